"""Numbers enter here: sympy expressions become Python or NumPy functions of the symbols.

The roofline built on these numbers (ledgers, peaks, ridges) is the workbench's.
"""

from __future__ import annotations

import math
from functools import lru_cache

import sympy as sp
import numpy

from rooflinec.model import symbols as sym

_ARGS = tuple(sym.ALPHABET.values())


# sympy heads a scalar formula may use, and their Python meaning (as lambdify's "math")
_CALLS = {sp.Max: max, sp.Min: min, sp.ceiling: math.ceil, sp.floor: math.floor}


class _Unsupported(Exception):
    """A node the closure builder does not know; `lambdify` handles the whole expression."""


def _closure(expr: sp.Expr, index: dict):
    """`expr` as nested Python closures over a tuple of values: built from the sympy tree
    itself (no printing, no code generation), ~35x quicker to make than a lambdify, with
    the same arithmetic (integers stay exact, rationals become p / q)."""
    if expr.is_Symbol:
        i = index[expr]
        return lambda v: v[i]
    if expr.is_Integer:
        c = int(expr)
        return lambda v: c
    if expr.is_Mul or expr.is_Rational or _reciprocal(expr):
        return _quotient(expr, index)
    parts = [_closure(a, index) for a in expr.args]
    if expr.is_Add:
        return lambda v: sum(f(v) for f in parts)
    if expr.is_Pow:
        base, exponent = parts
        return lambda v: base(v) ** exponent(v)
    call = _CALLS.get(expr.func)
    if call is None:
        raise _Unsupported(expr.func)
    return lambda v: call(*(f(v) for f in parts))


def _reciprocal(expr: sp.Expr) -> bool:
    return expr.is_Pow and expr.exp.is_Integer and expr.exp < 0


def _quotient(expr: sp.Expr, index: dict):
    """A product as numerator / denominator, one division at the end: exact integers divide
    with a single rounding (2*B*S/(b*(B + S)) is the nearest float to the true ratio)."""
    num, den = sp.fraction(expr, exact=True)   # exact: keep x**-1 whole, no expansion
    tops = [_closure(a, index) for a in sp.Mul.make_args(num)]
    bottoms = [_closure(a, index) for a in sp.Mul.make_args(den)]
    if den == 1:
        return lambda v: math.prod(f(v) for f in tops)
    return lambda v: math.prod(f(v) for f in tops) / math.prod(f(v) for f in bottoms)


@lru_cache(maxsize=4096)
def _compiled(expr: sp.Expr):
    """`expr` as a function of the alphabet, then of any other symbols it uses (a model's
    own dimensions), in name order."""
    args = _ARGS + tuple(sorted(expr.free_symbols - set(_ARGS), key=lambda s: s.name))
    try:
        body = _closure(expr, {s: i for i, s in enumerate(args)})
        return args, lambda *values: body(values)
    except _Unsupported:
        # docstring_limit=0: no docstring printing the expression a second time (half the cost)
        return args, sp.lambdify(args, expr, modules="math", docstring_limit=0)


class Unbound(ValueError):
    """An expression uses a symbol the analysis gives no value (a declared op brought it in)."""

    def __init__(self, missing):
        self.names = sorted(map(str, missing))
        super().__init__(f"no value for {', '.join(self.names)}")


def number(expr: sp.Expr, values: dict[sp.Symbol, float]):
    """Evaluate `expr` at `values` (every symbol it uses must be given)."""
    expr = sp.sympify(expr)
    missing = expr.free_symbols - values.keys()
    if missing:
        raise Unbound(missing)
    args, fn = _compiled(expr)
    return fn(*(values.get(s, 0) for s in args))


def vectorised(exprs, args=_ARGS):
    """One NumPy function computing every expression in `exprs` at once.

    Compiled with a single `sympy.lambdify` (one code generation for the lot); call it with
    scalars or NumPy arrays for `args` (default: the whole alphabet, in ALPHABET order) and it
    returns a list, one result per expression, broadcast over the arrays.
    """
    # The module object, not the string "numpy": the string makes lambdify run
    # `from numpy import *`, which loads numpy's lazy submodules (f2py, testing ...), ~0.15 s.
    return sp.lambdify(args, list(exprs), modules=[numpy], docstring_limit=0)
