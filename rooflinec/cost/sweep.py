"""Sweeps: workload axes written as lists or ranges, and chunked vectorised evaluation.

A Program is compiled once into a Kernel: one `sympy.lambdify` (NumPy) of every op's FLOPs
and traffic, with the layer count L left a number to pass in, never unrolled. The point grid
is walked in chunks; each chunk is reduced to per-point totals before the next, so memory
is bounded by the chunk, not by (points x ops).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import sympy as sp
import numpy as np

from rooflinec.model import symbols as sym
from rooflinec.cost.evaluate import vectorised
from rooflinec.model.ir import Op, Program
from rooflinec.model.symbols import B, M, S
from rooflinec.base.roofline import Roofline, compute_time, transfer_time

CHUNK = 1 << 16            # points per chunk
MAX_AXIS = 100_000         # values one list or range may expand to (the sweep's point budget)
AXES = {"batch": B, "context": S, "tokens": M}   # workload axes a study may sweep


class AxisError(ValueError):
    """A range that cannot be expanded, or axes that leave a symbol free; the message says
    what is accepted."""


# --- axes ----------------------------------------------------------------------------

def is_range(value) -> bool:
    return isinstance(value, dict) and "from" in value


def expand(value) -> list[int]:
    """A list of positive integers as written, or a range {from, to, step | geometric}."""
    if not is_range(value):
        return list(value)
    lo, hi = value["from"], value["to"]
    if hi < lo:
        raise AxisError(f"'to' ({hi}) is below 'from' ({lo})")
    if ("step" in value) == ("geometric" in value):
        raise AxisError("give either 'step' (arithmetic: from, from+step, ...) or "
                        "'geometric' (ratio: from, from*r, ...), not both or neither")
    if "step" in value:
        count = (hi - lo) // value["step"] + 1
        _check_size(count)
        return list(range(lo, hi + 1, value["step"]))
    return _geometric(lo, hi, value["geometric"])


def _geometric(lo: int, hi: int, ratio) -> list[int]:
    """from, from*r, from*r^2 ... up to `to`, rounded to integers, repeats dropped."""
    _check_size(int(math.log(hi / lo) / math.log(ratio)) + 1)
    out, k = [], 0
    while True:
        v = lo * ratio ** k
        if v > hi * (1 + 1e-12):
            return out
        v = int(v) if isinstance(ratio, int) else round(v)
        if not out or v != out[-1]:
            out.append(v)
        k += 1


def _check_size(count: int) -> None:
    if count > MAX_AXIS:
        raise AxisError(f"expands to {count} values; an axis may hold at most {MAX_AXIS}")


def expand_ranges(params, path: tuple, problem: Callable) -> tuple[object, list]:
    """`params` with every range mapping replaced by its list; problems located by `problem`."""
    if is_range(params):
        try:
            return expand(params), []
        except AxisError as exc:
            return [], [problem(path, str(exc))]
    if isinstance(params, dict):
        out, problems = {}, []
        for key, value in params.items():
            out[key], found = expand_ranges(value, path + (key,), problem)
            problems.extend(found)
        return out, problems
    return params, []


# --- kernels -------------------------------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    """A Program compiled for vectorised evaluation at one scope ("model" or "layer")."""

    program: Program
    ops: tuple[Op, ...]
    slots: tuple[tuple[int, str], ...]   # (op index, "flops" or a traffic class) per output
    fn: Callable                          # values of `args` -> outputs, then the tokens per step (M)
    args: tuple                           # the alphabet, then the model's own dimensions


def compile_program(program: Program, given: Iterable[sp.Symbol] = (B, S),
                    scope: str = "model") -> Kernel:
    """One lambdify for all ops; bindings (M = B ...) fill only the symbols not `given`."""
    given = frozenset(given)
    bind = {s: e for s, e in program.bindings.items() if s not in given}
    ops = tuple(op for op in program.ops if scope == "model" or op.per_layer)
    exprs, slots = [], []
    for i, op in enumerate(ops):
        count = op.repeat if scope == "model" else 1
        exprs.append((op.cost.flops * count).xreplace(bind))
        slots.append((i, "flops"))
        for cls, expr in op.cost.traffic:
            exprs.append((expr * count).xreplace(bind))
            slots.append((i, cls))
    tokens = M.xreplace(bind)
    free = set().union(*(e.free_symbols for e in exprs), tokens.free_symbols) & set(sym.WORKLOAD)
    if free - given:
        raise AxisError(f"the {program.phase} program needs {', '.join(sorted(map(str, free - given)))}; "
                        f"sweep that axis too ({', '.join(f'{k} gives {v}' for k, v in AXES.items())})")
    args = (*sym.ALPHABET.values(), *program.symbols)
    return Kernel(program, ops, tuple(slots), vectorised([*exprs, tokens], args), args)


@dataclass
class Totals:
    """Per-point sums over every op, shaped like the point grid."""

    time: object           # roofline time of one step: sum over ops of max(F/peak, bytes/bw)
    compute_time: object   # the part of `time` spent in compute-bound ops
    flops: object
    bytes: object
    tokens: object         # tokens through the model per step (M)

    @property
    def bound(self):
        """"compute" where compute-bound ops hold at least half the step's time."""
        return np.where(2 * self.compute_time >= self.time, "compute", "memory")


def _peaks(kernel: Kernel, bench, device, dtype: str):
    return np.array([bench.op_peak(device, op, dtype) for op in kernel.ops])[:, None]


def _costs(kernel: Kernel, values: list, n: int):
    """FLOPs and bytes per op (rows) at each point of a chunk (columns), and the tokens."""
    with np.errstate(all="ignore"):     # a non-finite value is reported, located, downstream
        outputs = kernel.fn(*values)
    flops = np.zeros((len(kernel.ops), n))
    nbytes = np.zeros((len(kernel.ops), n))
    for (i, what), out in zip(kernel.slots, outputs):
        if what == "flops":
            flops[i] += out
        else:
            nbytes[i] += out
    return flops, nbytes, np.broadcast_to(np.asarray(outputs[-1], dtype=float), (n,))


def run(kernel: Kernel, bench, axes: dict, devices, dtype: str, chunk: int = CHUNK,
        formats: dict | None = None) -> dict:
    """Totals for every device over the grid of `axes` ({symbol: values}), chunk by chunk;
    `bench` (the study's workbench) gives the symbols' values (weights and KV cache in
    `formats` where given) and the peaks."""
    symbols = list(axes)
    grids = [np.asarray(axes[s], dtype=float) for s in symbols]
    shape = tuple(len(g) for g in grids)
    n = math.prod(shape)
    fixed = bench.values_for(dtype, formats)
    peaks = {d.key: (_peaks(kernel, bench, d, dtype), d.bandwidth) for d in devices}
    out = {k: Totals(*(np.empty(n) for _ in range(5))) for k in peaks}
    alphabet = kernel.args
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        coords = np.unravel_index(np.arange(start, stop), shape)
        at = {s: g[c] for s, g, c in zip(symbols, grids, coords)}
        values = [at[s] if s in at else fixed.get(s, 0) for s in alphabet]
        flops, nbytes, tokens = _costs(kernel, values, stop - start)
        t_mem_all = {}
        for key, (peak, bandwidth) in peaks.items():
            memory = t_mem_all.setdefault(bandwidth, transfer_time(nbytes, bandwidth))
            roof = Roofline(compute_time(flops, peak), memory)
            t = roof.time
            tot = out[key]
            tot.time[start:stop] = t.sum(axis=0)
            tot.compute_time[start:stop] = np.where(roof.t_compute >= memory, t, 0.0).sum(axis=0)
            tot.flops[start:stop] = flops.sum(axis=0)
            tot.bytes[start:stop] = nbytes.sum(axis=0)
            tot.tokens[start:stop] = tokens
    for tot in out.values():
        for name in ("time", "compute_time", "flops", "bytes", "tokens"):
            setattr(tot, name, getattr(tot, name).reshape(shape))
    return out
