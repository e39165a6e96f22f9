"""The operator catalog: standalone kernels given by formula name and shape, not by a model.

Each entry names a registered formula and its integer arguments; an argument given as a
list sweeps it (lists are zipped, scalars repeat). Arguments given the same values share
one symbol in the entry's intensity formula, so a square matmul shows 2*n/(3*b).
"""

from __future__ import annotations

import inspect

import sympy as sp

from rooflinec.model import symbols as sym
from rooflinec.analyses import analysis
from rooflinec.base.errors import SpecError
from rooflinec.model.ir import intensity
from rooflinec.model.ops import FORMULAS, UNITS
from rooflinec.base.roofline import roofline

FIXED = ("b", "epilogue")   # bytes per element comes from the study's dtype


def _accepted(name: str) -> tuple[list[str], list[str]]:
    """(required, optional) argument names of a formula, without the ones the study fixes."""
    params = [p for p in inspect.signature(FORMULAS[name]).parameters.values() if p.name not in FIXED]
    return ([p.name for p in params if p.default is inspect.Parameter.empty],
            [p.name for p in params if p.default is not inspect.Parameter.empty])


def _options(name: str) -> set[str]:
    """The formula's on/off options (a bool default); every other argument is a dimension."""
    return {p.name for p in inspect.signature(FORMULAS[name]).parameters.values()
            if isinstance(p.default, bool)}


def _kinds(path: tuple, name: str, args: dict, known, problem) -> list:
    """A dimension given true or false, or an option given a number: located, not a TypeError."""
    options = _options(name)
    return [problem(path + ("args", k), (
                f"argument '{k}' of formula '{name}' is an option: write true or false, not {v!r}"
                if k in options else
                f"argument '{k}' of formula '{name}' is a dimension: write a whole number >= 1 "
                f"or a list of them, not {str(v).lower()}"))
            for k, v in args.items() if k in known and (k in options) != isinstance(v, bool)]


def _problems(ctx, i: int, entry: dict) -> list:
    path = ("analyses", "operators", "ops", i)
    name = entry["formula"]
    if name not in FORMULAS:
        return [ctx.problem(path + ("formula",), f"no formula '{name}'; formulas: {', '.join(sorted(FORMULAS))}")]
    required, optional = _accepted(name)
    args = entry["args"]
    out = [ctx.problem(path + ("args", k), f"formula '{name}' takes no argument '{k}'; it takes: "
                                           f"{', '.join(required + optional)}")
           for k in args if k not in required + optional]
    out += _kinds(path, name, args, required + optional, ctx.problem)
    out += [ctx.problem(path + ("args",), f"formula '{name}' needs argument '{k}'")
            for k in required if k not in args]
    lengths = {len(v) for v in args.values() if isinstance(v, list)}
    if len(lengths) > 1:
        out.append(ctx.problem(path + ("args",), f"swept arguments must be lists of one length, got lengths {sorted(lengths)}"))
    return out


def _points(args: dict) -> list[dict]:
    n = max((len(v) for v in args.values() if isinstance(v, list)), default=1)
    return [{k: (v[i] if isinstance(v, list) else v) for k, v in args.items()} for i in range(n)]


def _symbolic(name: str, args: dict) -> sp.Expr:
    """The entry's intensity with a symbol per integer argument (equal sweeps share one)."""
    symbols, first = {}, {}
    for k, v in args.items():
        if isinstance(v, bool):
            symbols[k] = v
            continue
        owner = first.setdefault(repr(v), k)
        symbols[k] = symbols.get(owner) if owner != k else sp.Symbol(k, positive=True, integer=True)
    return intensity(FORMULAS[name](**symbols, b=sym.b))


def _evaluate(ctx, name: str, point: dict, devices) -> dict:
    cost = FORMULAS[name](**point, b=ctx.values[sym.b])
    flops, nbytes = float(cost.flops), float(cost.bytes)
    unit = UNITS[name]
    per_device = []
    for dev in devices:
        peak = ctx.peak(dev, unit, needed_by=f"operator '{name}'")
        roof = roofline(flops, nbytes, peak, dev.bandwidth)
        per_device.append({"device": dev.key, "bound": roof.bound, "time_s": roof.time,
                           "attainable": flops / roof.time / peak})
    return {"args": point, "flops": flops, "bytes": nbytes, "intensity": flops / nbytes,
            "devices": per_device}


@analysis("operators", "Operator catalog", needs_model=False)
def operators(ctx, params) -> dict:
    entries = params.ops
    problems = [p for i, e in enumerate(entries) for p in _problems(ctx, i, e)]
    problems += [ctx.problem(("devices", i), f"device '{d.key}' lists no tensor peak for {ctx.study.dtype}")
                 for i, d in enumerate(ctx.devices) if d.peak("matrix", ctx.study.dtype) is None]
    if problems:
        raise SpecError(problems)
    rows = []
    for e in entries:
        rows.append({"label": e["label"], "formula": e["formula"], "unit": UNITS[e["formula"]],
                     "intensity": _symbolic(e["formula"], e["args"]),
                     "points": [_evaluate(ctx, e["formula"], p, ctx.devices) for p in _points(e["args"])]})
    return {"devices": [d.key for d in ctx.devices], "dtype": ctx.study.dtype, "rows": rows}
