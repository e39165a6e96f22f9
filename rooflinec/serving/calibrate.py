"""Calibration: the serving model's efficiencies fitted to measured runs.

Least squares on log(predicted / measured) TPOT, one fit per (device, engine), one per
engine and one over all rows: a (device, engine) with no fit of its own takes its engine's,
else the pooled one. Only the FITTED parameters move; the others keep their bound values
(datasheet bandwidth, no per-step or per-collective time): with every parameter free the
fit is no better on its own rows and worse on rows it has not seen (the validation report's
leave-one-group-out errors). The fit is Levenberg-Marquardt in NumPy over unbounded
coordinates: a fraction f = 1 / (1 + e^-x) stays in (0, 1), a time t = 1 us x e^x stays
positive. TTFT is not fitted: it is predicted from the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from rooflinec.serving.lsq import jacobian
from rooflinec.serving.serving_model import PARAMETERS, Costs, Efficiency, timed
from rooflinec.serving import measurements, serving_model
from rooflinec.serving.serving_model import Unpredictable, predict
from rooflinec.base import yamlio
from rooflinec.base.errors import SpecError

FRACTIONS = ("bandwidth_fraction", "compute_fraction")
MAX_TIME_S = measurements.MAX_MS / 1e3     # a week: no fitted time is longer than a measured run
FITTED = ("compute_fraction", "per_layer_s")
TIME_UNIT = 1e-6
ITERATIONS = 200


def parameter_problem(name: str, v, fractions=FRACTIONS) -> str:
    """Why `v` is not a value of parameter `name` ('' where it is): a fraction in (0, 1], else
    a time in seconds from 0 to a week (a finite time past it would overflow the steps' sums)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if name in fractions:
        return "" if ok and 0 < v <= 1 else "expected a fraction in (0, 1]"
    return "" if ok and 0 <= v <= MAX_TIME_S else f"expected a time in seconds from 0 to {MAX_TIME_S:g} (a week)"


def efficiency(x: np.ndarray, free=PARAMETERS) -> Efficiency:
    """The Efficiency at coordinates x of the `free` parameters; the others at BOUND's."""
    x = np.clip(x, -30, 30)
    values = {name: (1 / (1 + np.exp(-v)) if name in FRACTIONS else TIME_UNIT * np.exp(v))
              for name, v in zip(free, x)}
    return Efficiency(**{k: float(v) for k, v in values.items()})


@dataclass(frozen=True)
class Steps:
    """Many runs' steady steps stacked, so one Efficiency re-times them all at once."""

    compute_s: np.ndarray      # [runs, kernels], zero-padded
    memory_s: np.ndarray
    layers: np.ndarray
    collectives: np.ndarray
    link_s: np.ndarray
    curve_s: np.ndarray | None = None    # per-op curves' kernel times (NaN: none), serving_model.StepCost's

    @staticmethod
    def of(costs: list[Costs]) -> Steps:
        steps = [c.steady for c in costs]
        width = max(len(s.compute_s) for s in steps)
        pad = lambda a: np.pad(a, (0, width - len(a)))   # noqa: E731
        curves = None if all(s.curve_s is None for s in steps) else np.array(
            [np.pad(s.curve_s, (0, width - len(s.curve_s)), constant_values=np.nan) for s in steps])
        return Steps(np.array([pad(s.compute_s) for s in steps]), np.array([pad(s.memory_s) for s in steps]),
                     np.array([s.layers for s in steps], float),
                     np.array([s.collectives for s in steps], float), np.array([s.link_s for s in steps]), curves)

    def time(self, eff: Efficiency) -> np.ndarray:
        return timed(self, eff)


def fit(costs: list[Costs], measured_tpot_s: list[float], free=FITTED) -> Efficiency:
    """The Efficiency minimising sum(log(predicted TPOT / measured TPOT)^2) over the `free`
    parameters."""
    steps, target = Steps.of(costs), np.log(np.asarray(measured_tpot_s, float))
    residual = lambda x: np.log(steps.time(efficiency(x, free))) - target   # noqa: E731
    x, damping = np.zeros(len(free)), 1e-3
    r = residual(x)
    for _ in range(ITERATIONS):
        jac = jacobian(residual, x, r)
        grad, hess = jac.T @ r, jac.T @ jac
        step = np.linalg.solve(hess + damping * np.diag(np.diag(hess) + 1e-12), -grad)
        trial = residual(x + step)
        if trial @ trial < r @ r:
            x, r, damping = x + step, trial, damping / 3
            if np.abs(step).max() < 1e-7:
                break
        else:
            damping *= 4
            if damping > 1e12:
                break
    return efficiency(x, free)


# --- runs prepared once, fitted per (device, engine) -------------------------------------

@dataclass(frozen=True)
class Prepared:
    row: object                # measurements.Row
    run: object = None         # serving_model.Run, or None
    costs: Costs | None = None
    reason: str = ""           # why the row cannot be predicted

    @property
    def group(self) -> tuple[str, str]:
        return (self.row.device, self.row.engine)


def prepare(rows, specs, op_time=None) -> list[Prepared]:
    """`op_time`: per-op efficiency curves (serving_model.step_cost's), or None."""
    out, seen = [], {}   # rows of one configuration share its costs: computed once
    for row in rows:
        key = measurements.configuration(row)
        if key not in seen:
            seen[key] = _prepared(row, specs, op_time)
        out.append(replace(seen[key], row=row))
    return out


def _prepared(row, specs, op_time=None) -> Prepared:
    run = measurements.resolve(row, specs)
    if isinstance(run, str):
        return Prepared(row, reason=run)
    try:
        costs = serving_model.costs(run) if op_time is None else serving_model.costs(run, op_time)
        return Prepared(row, run, costs)
    except Unpredictable as exc:
        return Prepared(row, run, reason=str(exc))


@dataclass(frozen=True)
class Calibration:
    default: Efficiency
    groups: dict               # (device, engine) -> Efficiency
    engines: dict              # engine -> Efficiency
    fitted: tuple = FITTED

    def of(self, group: tuple[str, str]) -> Efficiency:
        return self.groups.get(group) or self.engines.get(group[1]) or self.default


def fit_all(prepared: list[Prepared], free=FITTED) -> Calibration:
    """One fit per (device, engine), per engine, and over all predictable rows."""
    usable = [p for p in prepared if p.costs is not None]
    if not usable:
        raise ValueError("no predictable rows to fit")

    def over(ps):
        return fit([p.costs for p in ps], [p.row.tpot_s for p in ps], free)

    groups = {g: over([p for p in usable if p.group == g]) for g in sorted({p.group for p in usable})}
    engines = {e: over([p for p in usable if p.group[1] == e]) for e in sorted({p.group[1] for p in usable})}
    return Calibration(over(usable), groups, engines, tuple(free))


def document(cal: Calibration, prepared: list[Prepared], source: str) -> dict:
    """The calibration YAML's content: parameters per (device, engine), the fit's residuals."""
    usable = [p for p in prepared if p.costs is not None]

    def residuals(ps):
        r = [math.log(predict(p.run, p.costs, cal.of(p.group)).tpot_s / p.row.tpot_s) for p in ps]
        return {"rows": len(ps), "tpot_log_rms": _r(math.sqrt(sum(x * x for x in r) / len(r))),
                "tpot_median_abs_error": _r(float(np.median(np.abs(np.expm1(r)))))}

    return {
        "fitted_on": source,
        "method": "least squares on log(predicted / measured) TPOT, per (device, engine), per engine "
                  "and pooled; parameters not fitted keep their bound values",
        "fitted": list(cal.fitted),
        "default": {"parameters": _params(cal.default), "residuals": residuals(usable)},
        "engines": [{"engine": e, "parameters": _params(cal.engines[e]),
                     "residuals": residuals([p for p in usable if p.group[1] == e])}
                    for e in sorted(cal.engines)],
        "groups": [{"device": d, "engine": e, "parameters": _params(cal.groups[(d, e)]),
                    "residuals": residuals([p for p in usable if p.group == (d, e)])}
                   for d, e in sorted(cal.groups)],
        "rows": [{"row_id": p.row.row_id,
                  "tpot_log_residual": _r(math.log(predict(p.run, p.costs, cal.of(p.group)).tpot_s
                                                   / p.row.tpot_s))} for p in usable],
    }


NEGLIGIBLE_S = 1e-12    # a fitted time below this is a parameter the data drove to zero


def _params(eff: Efficiency) -> dict:
    return {name: 0.0 if name not in FRACTIONS and getattr(eff, name) < NEGLIGIBLE_S
            else _r(getattr(eff, name)) for name in PARAMETERS}


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def load(file: str) -> Calibration:
    """A calibration YAML as written by `document`; problems located in the file."""
    doc = yamlio.load(file)
    d, problems = doc.data, []

    def eff(path, block):
        ps = block.get("parameters") if isinstance(block, dict) else None
        if not isinstance(ps, dict):
            problems.append(doc.problem(path, "expected a mapping with 'parameters'"))
            return None
        values = {}
        for name in PARAMETERS:
            v = ps.get(name)
            bad = parameter_problem(name, v)
            if bad:
                problems.append(doc.problem(path + ("parameters", name), bad) if name in ps
                                else doc.problem(path + ("parameters",), f"{name}: {bad}"))
            values[name] = v
        unknown = sorted(set(ps) - set(PARAMETERS))
        if unknown:
            problems.append(doc.problem(path + ("parameters", unknown[0]), f"unknown parameter; known: {', '.join(PARAMETERS)}"))
        return values

    def entries(key, names):
        found = {}
        items = d.get(key) or []
        if not isinstance(items, list):
            problems.append(doc.problem((key,), f"expected a list of {{{', '.join(names)}, parameters}}"))
            items = []
        for i, g in enumerate(items):
            values = eff((key, i), g)
            if isinstance(g, dict) and not all(isinstance(g.get(k), str) for k in names):
                problems.append(doc.problem((key, i), f"needs {' and '.join(names)} names"))
            elif values is not None:
                found[tuple(g[k] for k in names)] = values
        return found

    if not isinstance(d, dict) or "default" not in d:
        raise SpecError([doc.problem((), "expected a calibration mapping with 'default', 'engines' and 'groups'")])
    default = eff(("default",), d["default"])
    groups, engines = entries("groups", ("device", "engine")), entries("engines", ("engine",))
    fitted = d.get("fitted", list(FITTED))
    if not (isinstance(fitted, list) and fitted and all(f in PARAMETERS for f in fitted)):
        problems.append(doc.problem(("fitted",), f"expected a list of parameter names among {', '.join(PARAMETERS)}"))
    if problems:
        raise SpecError(problems)
    return Calibration(Efficiency(**default), {k: Efficiency(**v) for k, v in groups.items()},
                       {k[0]: Efficiency(**v) for k, v in engines.items()}, tuple(fitted))
