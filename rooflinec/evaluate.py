"""Numbers enter here: a Program on a device at a workload point becomes a Ledger."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

from rooflinec import symbols as sym
from rooflinec.ir import Op, Program
from rooflinec.symbols import L

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
    import numpy  # lazily: only sweeps need it
    # The module object, not the string "numpy": the string makes lambdify run
    # `from numpy import *`, which loads numpy's lazy submodules (f2py, testing ...), ~0.15 s.
    return sp.lambdify(args, list(exprs), modules=[numpy], docstring_limit=0)


def point(model, dtype_bytes, workload: dict, bindings: dict) -> dict[sp.Symbol, float]:
    """Values of every symbol at one workload point; bound symbols (M) follow their binding."""
    values = {**sym.model_values(model), sym.b: dtype_bytes, **workload}
    for s, expr in bindings.items():
        values[s] = number(expr, values)
    return values


@dataclass(frozen=True)
class Roofline:
    t_compute: float
    t_memory: float

    @property
    def time(self) -> float:
        return max(self.t_compute, self.t_memory)

    @property
    def bound(self) -> str:
        return "compute" if self.t_compute >= self.t_memory else "memory"


def roofline(flops: float, nbytes: float, peak: float, bandwidth: float) -> Roofline:
    """t = max(FLOPs / peak, bytes / bandwidth): the lower bound of one kernel's time."""
    return Roofline(flops / peak, nbytes / bandwidth)


def regime(intensity: float, ridge: float) -> str:
    return "compute-bound" if intensity >= ridge else "memory-bound"


@dataclass(frozen=True)
class Row:
    op: Op
    count: int            # launches: L for a layer op over the whole model, else 1
    flops: float
    bytes: float
    traffic: dict         # bytes by traffic class
    unit_peak: float
    roof: Roofline
    flops_share: float = 0.0
    time_share: float = 0.0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


@dataclass(frozen=True)
class Ledger:
    program: Program
    device: object
    dtype: str
    workload: dict        # symbol name -> number
    scope: str            # "layer" or "model"
    rows: tuple[Row, ...]

    @property
    def flops(self) -> float:
        return sum(r.flops for r in self.rows)

    @property
    def bytes(self) -> float:
        return sum(r.bytes for r in self.rows)

    @property
    def time(self) -> float:
        return sum(r.roof.time for r in self.rows)

    def traffic(self, cls: str) -> float:
        return sum(r.traffic.get(cls, 0) for r in self.rows)

    @property
    def attainable(self) -> float:
        """Fraction of the tensor peak the whole ledger can reach: (FLOPs / peak) / time."""
        return self.flops / self.device.peak("matrix", self.dtype) / self.time


class NoPeak(ValueError):
    """A device gives no peak for the units an op runs on (e.g. no `compute.vector`)."""

    def __init__(self, device, unit: str, dtype: str, op: str):
        super().__init__(f"device '{device.key}' lists no {unit} peak for {dtype} (nor fp32), which "
                         f"op '{op}' runs on; add compute.{'tensor' if unit == 'matrix' else 'vector'} "
                         "to its hardware spec")
        self.device = device


def ledger(program: Program, model, device, dtype: str, dtype_bytes, workload: dict,
           scope: str = "model") -> Ledger:
    """One row per op; scope "layer" keeps one decoder layer, "model" all L layers + the rest."""
    values = point(model, dtype_bytes, workload, program.bindings)
    rows = []
    for op in program.ops:
        per_layer = op.repeat == L
        if scope == "layer" and not per_layer:
            continue
        count = int(number(op.repeat, values)) if scope == "model" else 1
        traffic = {cls: count * number(e, values) for cls, e in op.cost.traffic}
        flops, nbytes = count * number(op.cost.flops, values), sum(traffic.values())
        peak = device.peak(op.unit, dtype)
        if peak is None and flops:
            raise NoPeak(device, op.unit, dtype, op.name)
        peak = peak or math.inf   # pure data movement needs no peak
        rows.append(Row(op, count, flops, nbytes, traffic, peak,
                        roofline(flops, nbytes, peak, device.bandwidth)))
    total_f = sum(r.flops for r in rows) or 1
    total_t = sum(r.roof.time for r in rows) or 1
    rows = [Row(r.op, r.count, r.flops, r.bytes, r.traffic, r.unit_peak, r.roof,
                r.flops / total_f, r.roof.time / total_t) for r in rows]
    return Ledger(program, device, dtype, {s.name: v for s, v in workload.items()}, scope, tuple(rows))
