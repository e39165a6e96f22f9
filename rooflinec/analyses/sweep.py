"""A whole-model ledger swept over workload axes, devices, dtypes and variants.

Lowered and compiled once per (phase, variant); every point evaluated vectorised
(rooflinec.cost.sweep). The section carries every point as compact arrays, one series per
fixed combination of the other axes, and tables of chosen points for reading.
"""

from __future__ import annotations

import math
from itertools import product
import numpy as np

from rooflinec.analyses import analysis
from rooflinec.base.errors import SpecError
from rooflinec.model.passes import VARIANTS
from rooflinec.model import quant
from rooflinec.cost import sweep as sw

MAX_POINTS = 100_000   # a report carries every point; bench/bench.py sweeps far more
KEY = "sweep"




def _label(dtype: str, formats: dict | None) -> str:
    """The compute dtype, and the weights', KV cache's and activations' formats where a point
    sets them."""
    if not formats:
        return dtype
    names = {"weights": "weights", quant.EXPERTS: "experts", "kv_cache": "KV", quant.ACTIVATIONS: "activations"}
    return f"{dtype} ({', '.join(f'{names[c]} {f}' for c, f in formats.items())})"


def _problem(ctx, key, message):
    return ctx.problem(("analyses", KEY) + ((key,) if key else ()), message)


def _categorical(ctx, params) -> tuple:
    """Devices, dtypes and variants to sweep, each checked against what the study has."""
    problems = []
    known = {d.key: d for d in ctx.devices}
    names = params.devices or list(known)
    problems += ctx.device_problems(("analyses", KEY, "devices"), names)
    dtypes = params.dtype or [ctx.study.dtype]
    problems += [_problem(ctx, "dtype", f"device '{d.key}' lists no tensor peak for {t}; "
                                        f"it has: {', '.join(d.tensor)}")
                 for t in dtypes for n, d in known.items() if n in names and d.peak("matrix", t) is None]
    chosen = params.variant
    problems += [_problem(ctx, "variant", f"no variant '{v}'; available: {', '.join(VARIANTS)}")
                 for v in chosen if v not in VARIANTS]
    numeric = [a for a in sw.AXES if getattr(params, a) is not None]
    if not numeric:
        problems.append(_problem(ctx, None, "give at least one workload axis: "
                                            f"{', '.join(sw.AXES)}"))
    return [known[n] for n in names if n in known], dtypes, chosen, numeric, problems


def _check_size(ctx, params, numeric, devices, dtypes, chosen) -> list:
    n = math.prod(len(getattr(params, a)) for a in numeric) * len(devices) * len(dtypes) * len(chosen)
    if n > MAX_POINTS:
        return [_problem(ctx, None, f"the sweep has {n} points; a report carries every point, "
                                    f"so a study may sweep at most {MAX_POINTS}")]
    return []


def chosen_rows(xs: list, crossings) -> list[int]:
    """Indices worth a table row: the first, the last, every power of 2, every crossing."""
    keep = {0, len(xs) - 1}
    keep |= {i for i, x in enumerate(xs) if x & (x - 1) == 0}
    keep |= {xs.index(c) for c in crossings if c is not None}
    return sorted(keep)


def _crossing(xs, bound) -> int | None:
    """The first x at which the step turns compute-bound after being memory-bound."""
    for i in range(1, len(xs)):
        if bound[i] == "compute" and bound[i - 1] == "memory":
            return xs[i]
    return None


def _fits(ctx, device, dtype: str, numeric, params, formats=None):
    """Whether each point's weights and KV cache (B·S tokens) fit in the device's memory;
    None where the sweep does not give both B and S."""
    if not {"batch", "context"} <= set(numeric):
        return None
    grids = dict(zip(numeric, np.meshgrid(*(np.asarray(getattr(params, a), dtype=float)
                                            for a in numeric), indexing="ij")))
    return ctx.memory_needed(grids["batch"], grids["context"], dtype, formats) <= device.capacity


def _series(tot, fits, numeric, params, x_axis, labels):
    """One series per fixed value of the other numeric axes: arrays over the x axis."""
    x_pos = numeric.index(x_axis)
    others = [a for a in numeric if a != x_axis]
    time = np.moveaxis(tot.time, x_pos, -1)
    tokens = np.moveaxis(tot.tokens, x_pos, -1)
    bound = np.moveaxis(tot.bound, x_pos, -1)
    fit = None if fits is None else np.moveaxis(fits, x_pos, -1)
    out = []
    for idx in product(*(range(len(getattr(params, a))) for a in others)):
        t, b, xs = time[idx], bound[idx].tolist(), getattr(params, x_axis)
        crossing = _crossing(xs, b)
        f = None if fit is None else fit[idx].tolist()
        out.append({**labels, "fixed": {a: getattr(params, a)[i] for a, i in zip(others, idx)},
                    "x": xs, "time_s": t.tolist(),
                    "tokens_per_s": (tokens[idx] / t).tolist(), "bound": b, "fits": f,
                    "crossing": crossing,
                    "crossing_fits": None if f is None or crossing is None else f[xs.index(crossing)]})
    return out


def _table(series: list, labels: dict) -> dict:
    xs = series[0]["x"]
    rows = chosen_rows(xs, [s["crossing"] for s in series])
    return {**labels, "columns": [s["fixed"] for s in series],
            "crossed": [{"fixed": s["fixed"], "at": s["crossing"], "fits": s["crossing_fits"]}
                        for s in series if s["crossing"] is not None],
            "never": [s["fixed"] for s in series if set(s["bound"]) == {"memory"}],
            "always": [s["fixed"] for s in series if set(s["bound"]) == {"compute"}],
            "rows": [{"x": xs[i], "cells": [{"time_s": s["time_s"][i],
                                             "tokens_per_s": s["tokens_per_s"][i],
                                             "bound": s["bound"][i],
                                             "fits": None if s["fits"] is None else s["fits"][i]}
                                   for s in series]}
                     for i in rows]}


@analysis(KEY, "Sweep: the whole model over workload, devices and variants")
def sweep(ctx, params) -> dict:
    phase, scope = params.phase, params.scope
    devices, dtypes, chosen, numeric, problems = _categorical(ctx, params)
    problems += _check_size(ctx, params, numeric, devices, dtypes, chosen) if numeric else []
    x_axis = params.x or (numeric[0] if numeric else None)
    if x_axis is not None and x_axis not in numeric:
        problems.append(_problem(ctx, "x", f"'{x_axis}' is not swept here; swept: {', '.join(numeric)}"))
    if problems:
        raise SpecError(problems)
    axes = {sw.AXES[a]: getattr(params, a) for a in numeric}
    series, tables = [], []
    for variant in chosen:
        for dev in devices:   # FlashAttention's tiles depend on the device's SRAM
            for formats in params.formats or [None]:
                # each tensor class a point stores in its own format gets its own symbol
                program = quant.retype(ctx.program(phase, variant, dev), tuple(formats or ()))
                try:
                    kernel = sw.compile_program(program, given=axes, scope=scope)
                except sw.AxisError as exc:
                    raise SpecError([_problem(ctx, None, str(exc))]) from None
                for dtype in dtypes:
                    totals = sw.run(kernel, ctx, axes, [dev], dtype, formats=formats)
                    labels = {"device": dev.key, "dtype": _label(dtype, formats), "variant": variant}
                    fits = _fits(ctx, dev, dtype, numeric, params, formats)
                    found = _series(totals[dev.key], fits, numeric, params, x_axis, labels)
                    series += found
                    tables.append(_table(found, labels))
    return {"phase": phase, "scope": scope, "x": x_axis, "axes": {a: getattr(params, a) for a in numeric},
            "points": math.prod(len(getattr(params, a)) for a in numeric) * len(tables),
            "series": series, "tables": tables}
