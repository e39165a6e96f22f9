"""Numbers where sympy's polynomial tools refuse: formulas with min, max, ceil, floor or
negative powers of the variable (a declared op's tile padding, ceil(B/128), or a
saturating Max(4096, 2048*B)).

`polynomial` says whether the exact path applies; `first_true` is the search the
analyses fall back to: doubling finds a power of two where the condition holds, then
bisection the first whole value after the last power where it does not. The answer is
the smallest such value wherever the condition, once true, stays true as the variable
grows (the crossings rooflinec looks for). Crossings of one op evaluate each probe exactly
(`at`, sympy rationals) where its numbers stay small (`at_least`); a whole step's long sums go
through evaluate's compiled closures.
"""

from __future__ import annotations

from collections.abc import Callable

import mpmath
import sympy as sp

from rooflinec.base import budget

SEARCH_DOUBLINGS = 40   # the search stops at 2^40: past any batch, context or token count


PIECEWISE = (sp.Min, sp.Max, sp.ceiling, sp.floor)


def has_piecewise(expr: sp.Expr, var: sp.Symbol) -> bool:
    """Whether `var` appears inside a min, max, ceil or floor of `expr`."""
    return any(var in f.free_symbols for f in expr.atoms(*PIECEWISE))


def polynomial(expr: sp.Expr, var: sp.Symbol) -> sp.Poly | None:
    """`expr` as a polynomial in `var`, or None where it is not one (ceil, min, var**-1 ...)
    or would multiply out past its budget (rooflinec.base.budget.EXPAND_TERMS)."""
    if has_piecewise(expr, var) or not budget.may_expand(expr):
        return None   # no Poly: sympy would first multiply out every argument
    return _poly(expr, var)


def _poly(expr: sp.Expr, var: sp.Symbol) -> sp.Poly | None:
    try:
        return sp.Poly(expr, var)
    except sp.PolynomialError:
        return None


def first_true(holds: Callable[[int], bool], doublings: int = SEARCH_DOUBLINGS) -> int | None:
    """The smallest whole x >= 1 with holds(x), searched by doubling then bisection; None if
    it does not hold at 2^doublings."""
    if holds(1):
        return 1
    lo = 1   # does not hold here
    for k in range(1, doublings + 1):
        hi = 2 ** k
        if holds(hi):
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if holds(mid) else (mid, hi)
            return hi
        lo = hi
    return None


def at(expr: sp.Expr, var: sp.Symbol, value) -> sp.Expr:
    """`expr` with `var` = value, exactly."""
    return expr.xreplace({var: sp.Integer(value)})


def at_least(num: sp.Expr, den: sp.Expr, var: sp.Symbol, value, bound) -> bool:
    """num / den >= bound at var = value, for den > 0: exactly where the powers of `var` build
    numbers of at most budget.EXACT_BITS bits, else at budget.EXACT_DIGITS significant digits
    (mpmath, the same on every machine): (1 - k/E)**M at M = 2**40 has no exact form to build."""
    point = {var: sp.Integer(value)}
    if budget.power_bits(num, point) + budget.power_bits(den, point) <= budget.EXACT_BITS:
        return num.xreplace(point) / den.xreplace(point) >= bound
    return bool(_digits(num - bound * den, point) >= 0)


def value_at(expr: sp.Expr, point: dict) -> float:
    """`expr` at `point` as a float: computed exactly and rounded once where its powers stay
    within budget.EXACT_BITS, else at budget.EXACT_DIGITS digits (a MoE step at B = 10**6)."""
    point = {s: sp.sympify(v) for s, v in point.items()}
    if budget.power_bits(expr, point) <= budget.EXACT_BITS:
        return float(expr.xreplace(point))
    return float(_digits(expr, point))


def _digits(expr: sp.Expr, point: dict) -> sp.Expr:
    """`expr` at `point` to budget.EXACT_DIGITS digits. Each power of a rational base to an
    exponent holding a symbol of `point` is first replaced by its value to those digits
    (mpmath, binary exponents: (31/32)**(16 M) at M = 2**40 is 2.5e-242566065905): sympy's
    evalf of a ceil or floor around such a power builds the exact rational, 2**44 bits."""
    powers = {p: _power(p, point) for p in expr.atoms(sp.Pow)
              if p.exp.free_symbols & point.keys() and p.base.is_Rational}
    return expr.xreplace(powers).xreplace(point).evalf(budget.EXACT_DIGITS)


def _power(power: sp.Pow, point: dict) -> sp.Expr:
    exponent = power.exp.xreplace(point)
    if not exponent.is_Rational:
        return power
    with mpmath.workdps(budget.EXACT_DIGITS):
        base = mpmath.mpf(power.base.p) / power.base.q
        value = mpmath.power(base, exponent.p if exponent.q == 1 else mpmath.mpf(exponent.p) / exponent.q)
    return sp.Float(value, budget.EXACT_DIGITS)


def far(doublings: int = SEARCH_DOUBLINGS) -> int:
    """The value a limit is estimated at where sympy cannot take it: the end of the search."""
    return 2 ** doublings
