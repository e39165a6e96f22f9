"""Numbers where sympy's polynomial tools refuse: formulas with min, max, ceil, floor or
negative powers of the variable (a declared op's tile padding, ceil(B/128), or a
saturating Max(4096, 2048*B)).

`polynomial` says whether the exact path applies; `first_true` is the search the
analyses fall back to: doubling finds a power of two where the condition holds, then
bisection the first whole value after the last power where it does not. The answer is
the smallest such value wherever the condition, once true, stays true as the variable
grows (the crossings rooflinec looks for). Crossings of one op evaluate each probe exactly
(`at`, sympy rationals); a whole step's long sums go through evaluate's compiled closures.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp

from rooflinec import timebox

SEARCH_DOUBLINGS = 40   # the search stops at 2^40: past any batch, context or token count


PIECEWISE = (sp.Min, sp.Max, sp.ceiling, sp.floor)


def has_piecewise(expr: sp.Expr, var: sp.Symbol) -> bool:
    """Whether `var` appears inside a min, max, ceil or floor of `expr`."""
    return any(var in f.free_symbols for f in expr.atoms(*PIECEWISE))


def polynomial(expr: sp.Expr, var: sp.Symbol) -> sp.Poly | None:
    """`expr` as a polynomial in `var`, or None where it is not one (ceil, min, var**-1 ...)
    or is not made one within the time budget."""
    if has_piecewise(expr, var):
        return None   # no Poly: sympy would first multiply out every argument
    return timebox.run(timebox.SIMPLIFY_S, lambda: _poly(expr, var), lambda: None)


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


def far(doublings: int = SEARCH_DOUBLINGS) -> int:
    """The value a limit is estimated at where sympy cannot take it: the end of the search."""
    return 2 ** doublings
