"""Numbers enter here: a Program on a device at a workload point becomes a Ledger."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

from rooflinec import symbols as sym
from rooflinec.ir import Op, Program
from rooflinec.symbols import L

_ARGS = tuple(sym.ALPHABET.values())


@lru_cache(maxsize=4096)
def _compiled(expr: sp.Expr):
    # docstring_limit=0: no docstring printing the expression a second time (half the cost)
    return sp.lambdify(_ARGS, expr, modules="math", docstring_limit=0)


def _integral(expr) -> str | None:
    """Python source for `expr` if it is a polynomial with integer coefficients, else None."""
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Symbol:
        return expr.name
    if expr.is_Pow:
        base = _integral(expr.base)
        ok = base is not None and expr.exp.is_Integer and expr.exp >= 0
        return f"({base})**{int(expr.exp)}" if ok else None
    if expr.is_Add or expr.is_Mul:
        parts = [_integral(a) for a in expr.args]
        return None if None in parts else "(" + ("+" if expr.is_Add else "*").join(parts) + ")"
    return None


def _exact_source(expr: sp.Expr) -> str | None:
    """Source computing `expr` bit for bit as its lambdified code does, for integer arguments.

    Integer arithmetic is exact in any order, so only the rounding steps must match: the
    code printer writes a product with an integer coefficient as `num/den`, one true division
    of two integers (correctly rounded in Python), which `(num)/(den)` reproduces. Anything
    else (rational coefficients, functions, nested divisions) returns None: lambdify it.
    """
    whole = _integral(expr)
    if whole is not None or not expr.is_Mul:
        return whole
    num, den = [], []
    for factor in expr.args:
        if factor.is_Pow and factor.exp.is_Integer and factor.exp < 0:
            den.append(_integral(sp.Pow(factor.base, -factor.exp, evaluate=False)))
        else:
            num.append(_integral(factor))
    if None in num or None in den or not expr.as_coeff_Mul()[0].is_Integer:
        return None
    return f"({'*'.join(num) or '1'})/({'*'.join(den)})"


@lru_cache(maxsize=4096)
def _exact(expr: sp.Expr):
    """A cheap compile of `expr` for integer arguments, equal to `_compiled`; None if none."""
    source = _exact_source(expr)
    if source is None:
        return None
    return eval(f"lambda {', '.join(s.name for s in _ARGS)}: {source}", {})  # noqa: S307


def number(expr: sp.Expr, values: dict[sp.Symbol, float]):
    """Evaluate `expr` at `values` (every alphabet symbol it uses must be given)."""
    expr = sp.sympify(expr)
    used = expr.free_symbols
    missing = used - values.keys()
    if missing:
        raise ValueError(f"no value for {sorted(map(str, missing))} in {expr}")
    args = [values.get(s, 0) for s in _ARGS]
    if all(type(values[s]) is int for s in used):
        fast = _exact(expr)
        if fast is not None:
            return fast(*args)
    return _compiled(expr)(*args)


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
        rows.append(Row(op, count, flops, nbytes, traffic, peak,
                        roofline(flops, nbytes, peak, device.bandwidth)))
    total_f = sum(r.flops for r in rows) or 1
    total_t = sum(r.roof.time for r in rows) or 1
    rows = [Row(r.op, r.count, r.flops, r.bytes, r.traffic, r.unit_peak, r.roof,
                r.flops / total_f, r.roof.time / total_t) for r in rows]
    return Ledger(program, device, dtype, {s.name: v for s, v in workload.items()}, scope, tuple(rows))
