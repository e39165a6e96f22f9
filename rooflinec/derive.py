"""Symbolic derivations: what an op's intensity depends on, its limits, its ridge crossing."""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy as sp

from rooflinec.ir import Op, intensity
from rooflinec.symbols import S


@dataclass(frozen=True)
class Crossing:
    variable: sp.Symbol
    at: int | None        # smallest value at which the op is compute-bound; None if never
    supremum: sp.Expr     # intensity as the variable grows without bound


def crossing(expr: sp.Expr, var: sp.Symbol, values: dict, ridge) -> Crossing:
    """Smallest integer `var` >= 1 with intensity >= ridge, solved exactly.

    Every other symbol is fixed by `values`; the ridge is taken as an exact rational.
    """
    ridge = sp.nsimplify(ridge, rational=True) if not isinstance(ridge, sp.Rational) else ridge
    f = sp.cancel(expr.xreplace({s: v for s, v in values.items() if s != var}))
    sup = sp.limit(f, var, sp.oo)
    if var not in f.free_symbols:
        return Crossing(var, 1 if f >= ridge else None, sup)
    num, den = sp.fraction(sp.cancel(f - ridge))
    roots = [r for r in sp.Poly(num, var).real_roots() if r > 0]
    candidates = sorted({1, *(max(1, math.ceil(r)) for r in roots)})
    at = next((c for c in candidates if f.subs(var, c) >= ridge), None)
    return Crossing(var, at, sup)


@dataclass(frozen=True)
class Derivation:
    op: Op
    flops: sp.Expr
    bytes: sp.Expr
    intensity: sp.Expr
    depends_on: tuple[sp.Symbol, ...]
    limit_S: sp.Expr | None     # intensity as the context S grows, where it depends on S


def derive(op: Op) -> Derivation:
    flops, nbytes = sp.factor(op.cost.flops), sp.factor(op.cost.bytes)
    simple = intensity(op.cost)
    deps = tuple(sorted(simple.free_symbols, key=lambda s: s.name))
    limit = sp.factor(sp.limit(simple, S, sp.oo)) if S in simple.free_symbols else None
    return Derivation(op, flops, nbytes, simple, deps, limit)
