"""Symbolic derivations: what an op's intensity depends on, its limits, its ridge crossing."""

from __future__ import annotations

import math
from fractions import Fraction
from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

from rooflinec.base import budget
from rooflinec.cost import piecewise
from rooflinec.model.ir import Op, factored, factoring, intensity
from rooflinec.model.symbols import S


@dataclass(frozen=True)
class Crossing:
    variable: sp.Symbol
    at: int | None        # smallest value at which the op is compute-bound; None if never
    supremum: sp.Expr     # intensity as the variable grows without bound
    budget_expired: bool = False   # roots past their size budget and the bounded search found none


def limit_at_infinity(f: sp.Expr, var: sp.Symbol) -> sp.Expr:
    """lim f as var -> oo; for a rational function, from the leading terms (fast and exact).
    Raises budget.OverBudget where the steps would pass their size budgets."""
    settled = _eventually(f, var)
    decayed = _decayed(settled, var)
    if decayed != settled and decayed.has(sp.Float):   # as sp.limit, which these once took,
        decayed = sp.nsimplify(decayed)                 # first makes floats exact (0.5 -> 1/2)
    settled = decayed
    if not budget.may_expand(settled):
        raise budget.OverBudget()
    num, den = sp.fraction(sp.together(settled))
    try:
        p, q = sp.Poly(num, var), sp.Poly(den, var)
    except sp.PolynomialError:   # not rational in var (ceil, min, ...)
        squeezed = _squeeze_ceilings(num, den, var)
        if squeezed is not None:
            return squeezed
        if not budget.may_take_limit(settled):
            raise budget.OverBudget() from None
        return sp.limit(settled, var, sp.oo)
    return _leading_ratio(p, q)


def _decayed(f: sp.Expr, var: sp.Symbol) -> sp.Expr:
    """f with q**g(var) set to 0 where 0 <= q < 1 and g grows without bound (a MoE layer's
    (1 - k/E)**M, the chance an expert is missed): its limit as var -> oo."""
    def decaying(e) -> bool:
        if not (e.is_Pow and e.base.is_Rational and 0 <= e.base < 1 and var in e.exp.free_symbols):
            return False
        g = piecewise.polynomial(e.exp, var)
        return g is not None and g.degree() >= 1 and g.LC().is_positive is True
    return f.replace(decaying, lambda e: sp.Integer(0))


def _eventually(f: sp.Expr, var: sp.Symbol) -> sp.Expr:
    """f once var exceeds the other arguments of its min and max (a sliding window's
    min(S, W) is W from S = W on), which a limit as var -> oo may assume."""
    def settled(e) -> bool:
        return isinstance(e, (sp.Min, sp.Max)) and var in e.args and all(
            var not in a.free_symbols for a in e.args if a != var)

    def value(e):
        return var if isinstance(e, sp.Max) else sp.Min(*(a for a in e.args if a != var))
    return f.replace(settled, value)


def _squeeze_ceilings(num: sp.Expr, den: sp.Expr, var: sp.Symbol) -> sp.Expr | None:
    """The limit of num/den where ceiling(u) terms (FlashAttention's passes over K/V) appear
    only in the denominator, linearly, with positive coefficients: num/den is then monotone in
    each of them, so it lies between its values at ceiling(u) = u and = u + 1, and where those
    two rational functions share a limit, so does num/den. None where that does not hold."""
    ceils = sorted((c for c in den.atoms(sp.ceiling) if var in c.free_symbols), key=sp.default_sort_key)
    if not ceils or num.has(*ceils):
        return None
    try:
        linear = sp.Poly(den, *ceils)
    except sp.PolynomialError:
        return None
    if linear.total_degree() != 1 or not all(c.is_positive for c in linear.coeffs()):
        return None
    bounds = []
    for shift in (0, 1):
        g = (num / den).xreplace({c: c.args[0] + shift for c in ceils})
        n, d = sp.fraction(sp.together(g))
        try:
            bounds.append(_leading_ratio(sp.Poly(n, var), sp.Poly(d, var)))
        except sp.PolynomialError:
            return None
    return bounds[0] if sp.cancel(bounds[0] - bounds[1]) == 0 else None


def exact(x) -> sp.Rational:
    """A float or int as the exact rational it stores (peaks and bandwidths are integral)."""
    return x if isinstance(x, sp.Rational) else sp.Rational(Fraction(x).numerator, Fraction(x).denominator)


def crossing(expr: sp.Expr, var: sp.Symbol, values: dict, ridge) -> Crossing:
    """Smallest integer `var` >= 1 with intensity >= ridge, solved exactly.

    Every other symbol is fixed by `values`; the ridge is taken as an exact rational.
    """
    fixed = frozenset((s, v) for s, v in values.items() if s != var and s in expr.free_symbols)
    return _crossing(expr, var, fixed, exact(ridge))


@lru_cache(maxsize=4096)
def _crossing(expr: sp.Expr, var: sp.Symbol, fixed: frozenset, ridge: sp.Rational) -> Crossing:
    num, den = (e.xreplace(dict(fixed)) for e in sp.fraction(expr))
    if var not in (num.free_symbols | den.free_symbols):
        return Crossing(var, 1 if num / den >= ridge else None, num / den)
    try:
        p, q = sp.Poly(num, var), sp.Poly(den, var)
    except sp.PolynomialError:   # not polynomial in var (ceil, min, ...): the general path
        return _crossing_general(num, den, var, ridge)
    if p.eval(1) / q.eval(1) >= ridge:   # the first candidate below holds: no roots needed
        return Crossing(var, 1, _leading_ratio(p, q))
    # intensity >= ridge  <=>  num - ridge * den >= 0, since den > 0; past the budget, searched
    gap = p - q * ridge
    roots = _positive_roots(gap) if budget.may_isolate_roots(gap) else None
    if roots is None:
        found = _crossing_general(num, den, var, ridge)
        return Crossing(var, found.at, found.supremum, budget_expired=found.at is None)
    candidates = sorted({1, *(max(1, int(math.ceil(r))) for r in roots)})
    at = next((c for c in candidates if p.eval(c) / q.eval(c) >= ridge), None)
    return Crossing(var, at, _leading_ratio(p, q))


def _positive_roots(poly: sp.Poly) -> list:
    try:
        return [r for r in poly.real_roots() if r > 0]
    except sp.PolynomialError:
        return []


def _leading_ratio(p: sp.Poly, q: sp.Poly) -> sp.Expr:
    """lim p/q at infinity from the leading terms; common factors do not change it."""
    if p.degree() > q.degree():
        return sp.oo if (p.LC() / q.LC()).is_positive is not False else -sp.oo
    if p.degree() < q.degree():
        return sp.Integer(0)
    return factored(p.LC() / q.LC())


def _crossing_general(num: sp.Expr, den: sp.Expr, var: sp.Symbol, ridge: sp.Rational) -> Crossing:
    """Intensity not rational in `var` (a declared op's min, max, ceil): searched, exactly
    (rooflinec.cost.piecewise.first_true)."""
    at = piecewise.first_true(lambda x: piecewise.at_least(num, den, var, x, ridge))
    return Crossing(var, at, limit_within_budget(num / den, var)[0])


def limit_within_budget(f: sp.Expr, var: sp.Symbol) -> tuple[sp.Expr | None, bool]:
    """lim f as var -> oo, and whether it was past its size budget; None where sympy cannot
    say (a user formula with min, max ...) or the steps would pass their budgets."""
    try:
        return limit_at_infinity(f, var), False
    except budget.OverBudget:
        return None, True
    except (NotImplementedError, ValueError, TypeError):
        return None, False


@dataclass(frozen=True)
class Derivation:
    op: Op
    flops: sp.Expr
    bytes: sp.Expr
    intensity: sp.Expr
    depends_on: tuple[sp.Symbol, ...]
    limit_S: sp.Expr | None     # intensity as the context S grows, where it depends on S
    simplified: bool = True     # False where factoring was past its size budget (as written)
    limit_expired: bool = False  # the limit in S was past its size budget




@lru_cache(maxsize=1024)
def derive(op: Op) -> Derivation:
    (flops, f_done), (nbytes, b_done) = factoring(op.cost.flops), factoring(op.cost.bytes)
    simple = intensity(op.cost)
    i_done = op.cost.flops == 0 or factoring(op.cost.flops / op.cost.bytes)[1]
    deps = tuple(sorted(simple.free_symbols, key=lambda s: s.name))
    limit, expired = limit_within_budget(simple, S) if S in simple.free_symbols else (None, False)
    return Derivation(op, flops, nbytes, simple, deps, limit, f_done and b_done and i_done, expired)
