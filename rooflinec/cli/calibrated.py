"""Calibrated TPOT and TTFT beside the bounds: the serving model's prediction
(`serving_model.predict`) with one calibration's efficiencies, and its interval.

The bounds say what no engine can beat; the calibration (fitted by `rooflinec calibrate` on
measured runs, per (device, engine)) says what an engine did reach on such runs. `serve` and
`build` ask this module, so both print one prediction. The shipped calibration applies by
default only to a device it was fitted on (a (device, engine) group of its own); a file the
user names applies to any device, through its engine's or pooled parameters, and the answer
says which.

The interval: where the file carries an `intervals` block (`rooflinec calibrate` writes one
from its leave-one-group-out refits, `serving.intervals.block`), the band the deployment takes
(`intervals.band_for`): the pooled split conformal band where its model, tp and engine (with a
fit of its device) were all calibrated, else the two-level band of a new group of that kind
(a shift its rows share, drawn like the calibrated groups' ones), for TPOT and TTFT. An
older file carries only the fit's own TPOT residuals: the interval is then split conformal
over them (in sample: rows the fit saw, narrower than a held-out one, blind to a new model's
shift) and TTFT has none.
A run whose concurrency lies outside the group's measured runs is marked as an
extrapolation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from rooflinec.base import yamlio
from rooflinec.base.errors import SpecError
from rooflinec.serving import calibrate, calibration, intervals, serving_model, stepcost
from rooflinec.spec.load import DTYPE_BYTES

SHIPPED = "serving-visible.yaml"   # the steady-state model's calibration the package ships
LEVEL = 0.8


def shipped() -> str:
    return str(resources.files("rooflinec.serving.calibrations").joinpath(SHIPPED))


@dataclass(frozen=True)
class Choice:
    """The parameters a prediction uses and where they come from."""

    efficiency: serving_model.Efficiency
    engine: str | None
    level: str                 # "group", "engine" or "pooled"
    file: str
    default: bool              # the shipped calibration, taken without being asked for
    interval: tuple | None     # (lo, hi) in-sample TPOT log residual quantiles at LEVEL, or None
    rows: int
    residuals: int = 0         # the residuals the interval is drawn from
    measured: tuple | None = None   # (least, most) concurrency of the group's runs, where the file says
    bands: dict | None = None  # the file's left-out bands (`calibration.Table.intervals`), or None

    def says(self, command: bool = True) -> str:
        """Where the figures come from; `command`: for `serve`, which names its flag."""
        where = {"group": f"fitted on {self.rows} measured runs of this device with {self.engine}",
                 "engine": f"{self.engine}'s parameters over every device (this device has no fit of its own)",
                 "pooled": "parameters pooled over every device and engine"}[self.level]
        source = (("the shipped calibration (default; --calibration FILE for another)" if command
                   else "the shipped calibration") if self.default else f"calibration {self.file}")
        band = (f"; {self.bands['level']:.0%} intervals of TPOT and TTFT from the calibration's left-out refits"
                if self.bands else
                f"; TPOT's {LEVEL:.0%} interval from the fit's {self.residuals} residuals (in sample, "
                "every device and engine; TTFT is not fitted)" if self.interval else "")
        return f"calibrated prediction by {source}: {where}{band}"


def _groups(doc) -> dict:
    """(device, engine) -> rows fitted, as the file's residuals record them."""
    out = {}
    for g in doc.get("groups") or []:
        if isinstance(g, dict) and isinstance(g.get("residuals"), dict):
            out[(g.get("device"), g.get("engine"))] = g["residuals"].get("rows", 0)
    return out


def _residuals(doc) -> list[float]:
    return [r["tpot_log_residual"] for r in doc.get("rows") or []
            if isinstance(r, dict) and isinstance(r.get("tpot_log_residual"), (int, float))]


def _measured(doc, device: str, engine: str) -> tuple | None:
    """(least, most) concurrency of the runs fitted for (device, engine), read from the rows'
    ids, which name them as the benchmark does (..._<device>_<engine>_..._c<N>_tp...);
    None where no id does."""
    tag = f"_{device.replace('-', '_')}_{engine}_"
    found = [int(m.group(1)) for r in doc.get("rows") or [] if isinstance(r, dict)
             and tag in str(r.get("row_id", "")) for m in [re.search(r"_c(\d+)_tp", str(r["row_id"]))] if m]
    return (min(found), max(found)) if found else None


def _bands(doc: dict) -> dict | None:
    """The file's `intervals` block in `calibration.Table.intervals`' shape, or None."""
    block = doc.get("intervals")
    if not isinstance(block, dict):
        return None
    return {"level": block["level"], "tpot": block["tpot"], "ttft": block["ttft"],
            "by": {k: {w: v[w] for w in ("tpot", "ttft")} for k, v in (block.get("by_holdout") or {}).items()},
            **({"calibrated": block["calibrated"]} if "calibrated" in block else {})}


def _interval(residuals) -> tuple | None:
    try:
        return intervals.quantiles(residuals, LEVEL)
    except intervals.TooFewRows:
        return None


@cache
def _document(path: str, default: bool) -> dict:
    """The calibration's mapping. A user's file is checked by calibrate.load first, every
    problem located; the shipped one (package data `calibrate` wrote) is not checked again,
    and both are then read by `yamlio.trusted` (libyaml's C parser): the located reader takes a
    third of a second on the shipped file's 309 residual rows, a quarter of `serve`'s import floor."""
    if not default:
        _not_simulator(path)
        calibrate.load(path)
        calibration.load(path)       # its intervals block, every problem located
    return yamlio.trusted(path)


SIMULATOR_FILE = ("this is a simulator calibration (rooflinec simulate --calibration); serve takes a serving "
                  "calibration (rooflinec calibrate without --simulate on a CSV without layout columns, "
                  "or the shipped default)")


def _not_simulator(path: str) -> None:
    """A located SpecError, one line, where `path` is the serving simulator's calibration (its
    `kind`, or parameters the simulator's step model has and the steady-state model lacks)."""
    doc = yamlio.load(path)
    d = doc.data if isinstance(doc.data, dict) else {}
    params = d.get("default", {}).get("parameters") if isinstance(d.get("default"), dict) else None
    names = set(params) if isinstance(params, dict) else set()
    theirs = names & (set(stepcost.NAMES) - set(serving_model.PARAMETERS))
    if d.get("kind") == calibration.KIND:
        raise SpecError([doc.problem(("kind",), SIMULATOR_FILE)])
    if theirs:
        raise SpecError([doc.problem(("default", "parameters", min(theirs)), SIMULATOR_FILE, at_key=True)])


def _efficiency(block: dict) -> serving_model.Efficiency:
    return serving_model.Efficiency(**{k: float(v) for k, v in block["parameters"].items()})


def choose(file: str | None, device: str, engine: str | None) -> Choice | str:
    """The parameters for `device` (and `engine`, when named), or a line saying why none apply."""
    default = file is None
    path = shipped() if default else file
    doc = _document(path, default)
    groups = _groups(doc)
    engines = {e.get("engine"): e for e in doc.get("engines") or []}
    mine = {e: n for (d, e), n in groups.items() if d == device and (engine is None or e == engine)}
    if default and not mine:
        fitted = ", ".join(sorted({f"{d} with {e}" for d, e in groups}))
        return (f"no calibrated prediction: the shipped calibration was fitted on {fitted}, not "
                f"{device}{' with ' + engine if engine else ''} (--calibration FILE applies one)")
    if mine:
        engine = max(sorted(mine), key=lambda e: mine[e])        # the engine with the most runs
        block = next(g for g in doc["groups"] if (g["device"], g["engine"]) == (device, engine))
        level, eff, rows = "group", _efficiency(block), mine[engine]
    elif engine in engines:
        level, eff, rows = "engine", _efficiency(engines[engine]), 0
    else:
        level, eff, rows = "pooled", _efficiency(doc["default"]), 0
    residuals = _residuals(doc)
    return Choice(eff, engine, level, path, default, _interval(residuals), rows, len(residuals),
                  _measured(doc, device, engine) if level == "group" else None, _bands(doc))


def output_length(prompt: int, context: int, osl: int | None = None) -> int | str:
    """Output tokens per request the prediction assumes: `osl` as given (serve's --osl), else
    2 (context - prompt), so the requests' mean context, prompt + osl / 2, is --context (the
    bounds' step); or why there is none."""
    if osl is not None:
        return osl
    if context <= prompt:
        return (f"--context {context:,} is not past --prompt {prompt:,}: the calibrated model decodes "
                "after the prompt (its mean context is --context), so it needs --context > --prompt "
                "(or --osl)")
    return 2 * (context - prompt)


def run(model, device, weights: str, kv_cache: str, tp: int, prompt: int, context: int,
        batch: int, layout: dict | None = None, experts: str | None = None,
        osl: int | None = None) -> serving_model.Run | str:
    """The serving model's run for serve's point: `batch` requests of `prompt` tokens per
    attention-DP rank, each generating `output_length` tokens (by default 2 (context - prompt),
    so the mean context is `context`); `layout`: serve's attention_dp, ep and moe_tp (the
    study's `parallel` keys); routed experts stored in `experts`; or why not."""
    if kv_cache != weights:
        return (f"the calibrated model stores the KV cache in the weights' format ({weights}); this run's is "
                f"{kv_cache} (--kv-cache, default bf16): --kv-cache {weights} gives a calibrated prediction")
    if weights not in DTYPE_BYTES:
        return f"the calibrated model runs GEMMs at the weights' dtype; {weights} is a storage format only"
    out = output_length(prompt, context, osl)
    if isinstance(out, str):
        return out
    layout = layout or {}
    dp = layout.get("attention_dp", 1)
    return serving_model.Run(model, device, weights, tp, prompt, out, batch * dp,
                             dp, layout.get("ep", 1), layout.get("moe_tp"), experts)


def predict(choice: Choice, run: serving_model.Run | str) -> dict:
    """TPOT and TTFT predicted, with their intervals (`interval_band` says which band; an older
    file: TPOT's in-sample one alone); or {"why": ...} when not predictable."""
    if isinstance(run, str):
        return {"why": run}
    try:
        costs = serving_model.costs(run)
        p = serving_model.predict(run, costs, choice.efficiency)
    except serving_model.Unpredictable as exc:
        return {"why": str(exc)}
    try:    # the band never reaches below the same run's bound
        floor = serving_model.bound(costs)
    except serving_model.Unpredictable:
        floor = serving_model.Prediction(0.0, 0.0)
    out = {"tpot_s": p.tpot_s, "ttft_s": p.ttft_s, "tokens_per_s_per_user": 1 / p.tpot_s,
           "engine": choice.engine, "level": choice.level, "interval_level": LEVEL}
    if choice.bands:
        new = intervals.new_in(choice.bands.get("calibrated"), run.model.hf_id, run.tp, choice.engine or "(pooled)",
                               choice.level == "group")
        q, out["interval_band"] = intervals.band_for(choice.bands, new)
        out["interval_level"] = choice.bands["level"]
        for w, y, f in (("tpot", p.tpot_s, floor.tpot_s), ("ttft", p.ttft_s, floor.ttft_s)) if q else ():
            out[f"{w}_interval_s"] = [float(v) for v in intervals.interval(y, *q[w], f)]
    elif choice.interval:
        lo, hi = intervals.interval(p.tpot_s, *choice.interval, floor.tpot_s)
        out["tpot_interval_s"] = [float(lo), float(hi)]
    if costs.concurrency < run.per_rank:    # the KV cache holds fewer sequences than the batch: the rest queue
        out["queued"] = {"running": float(costs.concurrency), "batch": float(run.per_rank)}
    if choice.measured and not choice.measured[0] <= run.concurrency <= choice.measured[1]:
        out["extrapolated"] = {"concurrency": run.concurrency, "measured": list(choice.measured)}
    return out


def extrapolation(points: dict, engine: str | None) -> str:
    """One line naming the batches (batch -> predict's dict) whose concurrency lies outside
    the runs the calibration measured ('' where none does)."""
    out = {b: p["extrapolated"] for b, p in sorted(points.items()) if "extrapolated" in p}
    if not out:
        return ""
    lo, hi = next(iter(out.values()))["measured"]
    return (f"extrapolated beyond the calibration's measured range (concurrency {lo:,} to {hi:,} on "
            f"this device with {engine}): batch " + ", ".join(f"{b:,}" for b in out))


def queueing(points: dict) -> str:
    """One line naming the batches (batch -> predict's dict) whose requests do not all fit the
    KV cache at once, so the rest wait and TTFT includes the wait ('' where none)."""
    out = {b: p["queued"] for b, p in sorted(points.items()) if "queued" in p}
    if not out:
        return ""
    return ("the KV cache holds fewer sequences than the batch at the requests' mean context (prompt + "
            "output / 2): the rest queue, so TPOT is the running batch's and TTFT includes the wait: " +
            ", ".join(f"batch {b:,} runs {q['running']:,.0f} at once" for b, q in out.items()))


def outside(points: dict) -> str:
    """One line naming the batches (batch -> predict's dict) whose predicted TTFT lies outside
    its own interval, and why ('' where none does): the point is the steady-state model's, the
    band its left-out residuals' (measured over predicted), so a band of residuals of one sign
    leaves the point out; the point is not moved."""
    sides = {}
    for b, p in sorted(points.items()):
        lo, hi = p.get("ttft_interval_s") or (None, None)
        if lo is not None and not lo <= p["ttft_s"] <= hi:
            sides.setdefault("below" if p["ttft_s"] < lo else "above", []).append(b)
    why = {"below": "the steady-state model's TTFT omits the queueing behind other prompts, which the measured "
                    "TTFTs of the band (the calibration's left-out residuals) include; rooflinec simulate "
                    "replays the queue",
           "above": "the band is the calibration's left-out residuals, measured TTFTs all below the "
                    "steady-state model's"}
    return "; ".join(f"predicted TTFT lies {side} its interval at batch {', '.join(f'{b:,}' for b in bs)}: "
                     f"{why[side]}" for side, bs in sides.items())
