"""`rooflinec validate-ops`: measured kernels against their roofline bound and the fitted
per-op-class efficiency curve (rooflinec.serving.opfit), with 80% conformal intervals
(rooflinec.serving.intervals) checked on left-out models and tensor-parallel degrees."""

from __future__ import annotations

import csv
import io
import json
import math
import os

import numpy as np

from rooflinec.base import roofline
from rooflinec.base.errors import RooflineError

from rooflinec.cost import collectives as C
from rooflinec.serving import intervals, opfit, oplowering, opprofiles, optable
from rooflinec.serving.optable import CLASSES
from rooflinec.render import charts, pages as rnd

LEVEL = 0.8
WORST = 15
TOKENS_IN_SCOPE = 4096      # the acceptance's token range: 1 to 4096
FORM = "t = ((F / (eta P))^p + (B / (beta W))^p)^(1/p) + t0"


def _errors(pred, measured) -> np.ndarray:
    return pred / measured - 1


def _summary(err: np.ndarray) -> dict:
    if not len(err):
        return {"rows": 0, "median_abs": None, "signed_median": None, "p90_abs": None}
    a = np.abs(err)
    return {"rows": int(len(err)), "median_abs": float(np.median(a)), "signed_median": float(np.median(err)),
            "p90_abs": float(np.quantile(a, 0.9))}


def _fits(t: optable.Table, classes: np.ndarray, keep: np.ndarray, prior: dict) -> dict:
    """class -> (Curve, (lo, hi)) fitted on the kept rows; intervals from their residuals. A
    class with a `prior` curve keeps its p and t0 and refits only eta and beta."""
    out = {}
    for c in CLASSES:
        sel = keep & (classes == c)
        if not sel.any():
            continue
        k = t.kernels(sel)
        curve = opfit.fit(k, prior[c], opfit.EFFICIENCIES) if c in prior else opfit.fit(k)
        try:
            q = intervals.quantiles(np.log(k.predict(curve) / k.measured_s), LEVEL)
        except intervals.TooFewRows:
            q = None
        out[c] = (curve, q)
    return out


def _holdout(t: optable.Table, classes: np.ndarray, by: str, prior: dict) -> list[dict]:
    """Leave one group (a model, or a tp) out: refit on the rest, predict the group."""
    labels = t.column(by)
    out = []
    for g in sorted(set(labels.tolist())):
        left = labels == g
        fits = _fits(t, classes, ~left, prior)
        for c, (curve, q) in fits.items():
            sel = left & (classes == c)
            if not sel.any() or q is None:
                continue
            pred = t.kernels(sel).predict(curve)
            inside = intervals.covered(pred, t.measured_s[sel], *q)
            out.append({"group": str(g), "class": c, **_summary(_errors(pred, t.measured_s[sel])),
                        "coverage": float(inside.mean()), "inside": int(inside.sum())})
    return out


def _coverage(rows: list[dict]) -> dict:
    """Per class, and over all classes: share of left-out rows inside their 80% interval."""
    out = {}
    for c in [*CLASSES, "all"]:
        rs = [r for r in rows if c in ("all", r["class"])]
        n = sum(r["rows"] for r in rs)
        if n:
            worst = max(rs, key=lambda r: r["median_abs"])
            out[c] = {"rows": n, "coverage": sum(r["inside"] for r in rs) / n,
                      "worst_group": worst["group"], "worst_group_median_abs": worst["median_abs"]}
    return out


def _bound_check(t: optable.Table) -> dict:
    """Every kernel against its lower bound (`Table.least_s`); `in_l2`: how many kernels the L2
    lightens; `faster_than_memory`: how many beat the roofline that counts every byte."""
    ratio = t.least_s / t.measured_s
    bad = ratio > 1
    ops = t.column("op")
    reads = _read_bytes(t)
    return {"rows": int(len(ratio)), "violations": int(bad.sum()),
            "in_l2": int(t.in_l2.sum()), "l2_size": t.l2_size,
            "faster_than_memory": int((t.bound_s > t.measured_s).sum()),
            "by_op": {op: int((bad & (ops == op)).sum()) for op in opprofiles.OPS if (bad & (ops == op)).any()},
            "max_ratio": float(ratio.max()),
            "largest_violating_read_bytes": float(reads[bad].max()) if bad.any() else None,
            "median_ratio_by_op": {op: float(np.median(ratio[ops == op])) for op in opprofiles.OPS
                                   if (ops == op).any()}}


def _read_bytes(t: optable.Table) -> np.ndarray:
    """Bytes an op reads: for a two-operand add (read 2, write 1), 2/3 of its traffic."""
    ops = t.column("op")
    return np.where(ops == "add", t.nbytes * 2 / 3, t.nbytes)


def _worst(t: optable.Table, pred: np.ndarray, fits: dict) -> list[dict]:
    err = _errors(pred, t.measured_s)
    order = np.argsort(-np.abs(err), kind="stable")[:WORST]
    q = {c: fit[1] for c, fit in fits.items()}
    return [{"model": t.rows[i].model, "op": t.rows[i].op, "tokens": t.rows[i].tokens, "tp": t.rows[i].tp,
             "measured_s": float(t.measured_s[i]), "predicted_s": float(pred[i]),
             "interval_s": None if q[t.op_class[i]] is None else
             [float(x) for x in intervals.interval(pred[i], *q[t.op_class[i]])],
             "bound_s": float(t.bound_s[i]), "error": float(err[i]),
             "where": f"{os.path.basename(os.path.dirname(t.rows[i].file))}/mlp.csv:{t.rows[i].line}"}
            for i in order]


PREDICTION_COLUMNS = ("model", "op", "class", "tokens", "tp", "measured_ms", "predicted_ms", "interval_lo_ms",
                      "interval_hi_ms", "bound_ms", "row")


def predictions_csv(t: optable.Table, pred: np.ndarray, fits: dict) -> str:
    """Every kernel's calibrated prediction with its 80% interval (empty where its class has too
    few rows for one) and its roofline bound, in ms, one line per (row, op)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(PREDICTION_COLUMNS)
    lo, hi = np.full(len(pred), np.nan), np.full(len(pred), np.nan)
    for c, (_, q) in fits.items():
        sel = t.op_class == c
        if q is not None:
            lo[sel], hi[sel] = intervals.interval(pred[sel], *q)
    ms = lambda x: "" if math.isnan(x) else f"{1e3 * x:.6g}"   # noqa: E731
    for i, r in enumerate(t.rows):
        w.writerow([r.model, r.op, t.op_class[i], r.tokens, r.tp, ms(t.measured_s[i]), ms(pred[i]), ms(lo[i]),
                    ms(hi[i]), ms(t.bound_s[i]), f"{_short(r.file)}:{r.line}"])
    return buf.getvalue()


def _chart_points(t: optable.Table, classes: np.ndarray) -> dict:
    """Per class: {op: (intensities, achieved fractions of the roofline, bytes)} of its rows."""
    achieved = t.bound_s / t.measured_s
    ops = t.column("op")
    return {c: {op: (t.intensity[sel].tolist(), achieved[sel].tolist(), t.nbytes[sel].tolist()) for op in opprofiles.OPS
                if (sel := (ops == op) & (classes == c)).any()} for c in CLASSES if (classes == c).any()}


def _collectives(files: list[str], device) -> list[dict]:
    out = []
    for file in files:
        rows = opprofiles.read_collectives(file)
        groups = sorted({(r.collective, r.workers, r.per_node) for r in rows})
        for name, n, per_node in groups:
            rs = [r for r in rows if (r.collective, r.workers, r.per_node) == (name, n, per_node)]
            vol = opfit.volume(name, n, [r.size_bytes for r in rs])
            measured = np.array([r.time_s for r in rs])
            link = opfit.fit_link(vol, measured)
            entry = {"file": _short(file), "collective": name, "workers": n, "per_node": per_node,
                     "rows": len(rs), **link.as_dict(), **_summary(_errors(link.time(vol), measured))}
            entry["bound_violations"] = _bound_violations(device, name, n, per_node, [r.size_bytes for r in rs],
                                                          measured)
            out.append(entry)
    return out


def _bound_violations(device, name, n, per_node, sizes, measured):
    """Rows faster than the least time any all-reduce of their buffer takes over the
    catalog's scale-up link (`collectives.least_time`; one node only)."""
    if name != "all_reduce" or n != per_node or device.link_bandwidth is None or n < 2:
        return None
    link = C.Link(device.link, device.link_bandwidth, device.link_latency)
    bound = np.array([float(C.least_time("all_reduce", s, n, link)) for s in sizes])
    return int((bound > measured).sum())


def _short(file: str) -> str:
    parts = os.path.normpath(file).split(os.sep)
    return "/".join(parts[-2:])


def _transferred(t: optable.Table, classes: np.ndarray, prior: dict, in_scope: np.ndarray) -> dict:
    """class -> the prior curve as it came (nothing refitted) at this device's peaks: its errors
    in scope, and the eta and beta it brought (what the refit moved from)."""
    out = {}
    for c, curve in prior.items():
        sel = classes == c
        if sel.any():
            err = _errors(t.kernels(sel).predict(curve), t.measured_s[sel])
            out[c] = {"compute_fraction": curve.compute_fraction, "bandwidth_fraction": curve.bandwidth_fraction,
                      "in_scope": _summary(err[in_scope[sel]])}
    return out


def _read_rows(profile_files: list[str], tps) -> list:
    rows = [r for f in profile_files for r in opprofiles.read(f) if tps is None or r.tp in tps]
    if not rows:
        kept = "" if tps is None else f" at tp {', '.join(map(str, sorted(tps)))}"
        raise RooflineError(f"{', '.join(profile_files)}: no profiled kernels{kept}")
    return rows


def report(profile_files: list[str], collective_files: list[str], device_name: str, device, specs,
           curves: str | None = None, keep_tp: frozenset | None = None, with_rows: bool = False) -> dict:
    """`specs`: a measurements.Specs the profiles' models are looked up in by hf_id; `curves`:
    an earlier ops.json (another device's, or other rows') whose classes keep their p and t0
    here (only eta, beta refitted); `keep_tp`: keep only rows at these tensor-parallel degrees;
    `with_rows`: every kernel's prediction and interval as CSV text (rendered to ops/predictions.csv)."""
    prior = load_curves(curves) if curves else {}
    rows = _read_rows(profile_files, keep_tp)
    resolved = optable.models(rows, specs)
    t = optable.table(rows, device, resolved)
    classes = t.op_class
    ops = t.column("op")
    everything = np.ones(len(rows), bool)
    fits = _fits(t, classes, everything, prior)
    pred = np.zeros(len(rows))
    for c, (curve, _) in fits.items():
        pred[classes == c] = t.kernels(classes == c).predict(curve)
    err = _errors(pred, t.measured_s)
    tokens, tps = t.column("tokens"), t.column("tp")
    in_scope = tokens <= TOKENS_IN_SCOPE
    transferred = _transferred(t, classes, prior, in_scope)
    per_class = []
    for c, (curve, q) in fits.items():
        sel = classes == c
        per_class.append({"class": c, "ops": [op for op in opprofiles.OPS if (sel & (ops == op)).any()],
                          **curve.as_dict(), "refitted": list(opfit.EFFICIENCIES if c in prior else opfit.PARAMETERS),
                          "fit": _summary(err[sel]), "in_scope": _summary(err[sel & in_scope]),
                          "by_tp": {int(tp): _summary(err[sel & in_scope & (tps == tp)])["median_abs"]
                                    for tp in sorted(set(tps[sel].tolist()))},
                          "interval": None if q is None else {"lo": q[0], "hi": q[1]},
                          "transferred": transferred.get(c)})
    holdout = {by: _holdout(t, classes, by, prior) for by in ("model", "tp")}
    return {
        "title": "Per-operator kernels against the roofline",
        "device": device_name, "device_name": device.name, "peak_matrix": device.peak("matrix", oplowering.DTYPE),
        "bandwidth": device.bandwidth,
        "profiles": [_short(f) for f in profile_files], "rows_total": len(rows),
        "tp_kept": None if keep_tp is None else sorted(keep_tp),
        "models": [{"model": m, "from": where} for (m, _), (_, where) in sorted(resolved.items())],
        "assumed": oplowering.ASSUMED, "form": FORM, "level": LEVEL, "tokens_in_scope": TOKENS_IN_SCOPE,
        "classes": per_class,
        "curves_from": None if not curves else {"file": os.path.basename(curves), "device": prior_device(curves)},
        "bound": _bound_check(t),
        "holdout": {by: {"groups": rs, "coverage": _coverage(rs)} for by, rs in holdout.items()},
        "worst": _worst(t, pred, fits),
        "predictions": predictions_csv(t, pred, fits) if with_rows else None,
        "collectives": _collectives(collective_files, device),
        "points": _chart_points(t, classes),
        "ridge": roofline.ridge(device.peak("matrix", oplowering.DTYPE), device.bandwidth),
    }


# --- curves fitted earlier (another device's) ------------------------------------------

def _curves_doc(file: str) -> dict:
    try:
        with open(file, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise RooflineError(f"{file}: cannot read it: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f"{exc.lineno}:{exc.colno}" if isinstance(exc, json.JSONDecodeError) else "1:1"
        raise RooflineError(f"{file}:{where}: not an ops.json of `rooflinec validate-ops`: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("classes"), list):
        raise RooflineError(f"{file}: no 'classes' list; give the ops.json `rooflinec validate-ops` wrote")
    return doc


def prior_device(file: str) -> str:
    return str(_curves_doc(file).get("device", "?"))


def load_curves(file: str) -> dict:
    """class -> Curve from an ops.json; every parameter checked."""
    out = {}
    for i, c in enumerate(_curves_doc(file)["classes"]):
        values = [c.get(name) if isinstance(c, dict) else None for name in opfit.PARAMETERS]
        ok = all(isinstance(v, (int, float)) and math.isfinite(v) for v in values) and \
            0 < values[0] <= 1 and 0 < values[1] <= 1 and 1 <= values[2] <= opfit.P_MAX and values[3] >= 0
        if not ok or c.get("class") not in CLASSES:
            raise RooflineError(f"{file}: classes[{i}]: expected a class among {', '.join(CLASSES)} with "
                                f"{', '.join(opfit.PARAMETERS)} (fractions in (0, 1], p in [1, {opfit.P_MAX:g}], "
                                "t0 >= 0)")
        out[c["class"]] = opfit.Curve(*map(float, values))
    return out


# --- output -------------------------------------------------------------------------------

STEM = "ops"


def chart(points: dict, ridge: float, title: str) -> str:
    """Achieved fraction of the roofline (bound / measured) against intensity, one series per
    op; an op class without FLOPs (a gather) against the bytes it moves instead. The markers are
    rasterised inside the SVG: tens of thousands of vector markers would make it megabytes."""
    fig = charts._matplotlib()(figsize=(6.4, 4.2), dpi=150)
    fig.subplots_adjust(left=0.12, right=0.98, bottom=0.13, top=0.9)
    ax = fig.add_subplot(1, 1, 1)
    by_bytes = not any(x > 0 for xy in points.values() for x in xy[0])
    series = {op: (xy[2] if by_bytes else xy[0], xy[1]) for op, xy in points.items()}
    xs = [x for xy in series.values() for x in xy[0] if x > 0]
    ys = [y for xy in series.values() for y in xy[1] if y > 0]
    floor = min(1e-2, 10 ** math.floor(math.log10(min(ys)))) if ys else 1e-2
    lo, hi = (min(xs), max(xs)) if xs else (0.1, 10.0)
    lo, hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi if by_bytes else max(hi, ridge)))
    if not by_bytes:
        ax.plot([ridge, ridge], [floor, 2.0], color=charts.ROOF, lw=0.8, ls="--", label=f"ridge {ridge:.3g} FLOP/B")
    ax.plot([lo, hi], [1, 1], color=charts.ROOF, lw=0.8)
    for i, (op, (x, y)) in enumerate(series.items()):
        keep = [(a, c) for a, c in zip(x, y) if a > 0]
        if keep:
            ax.plot(*zip(*keep), ls="none", marker=charts.MARKERS[i % len(charts.MARKERS)], ms=2.5, mfc="none",
                    mew=0.6, color=charts.SERIES_COLOURS[i % len(charts.SERIES_COLOURS)], label=op,
                    rasterized=True)
    charts._log_axes(ax, (lo, hi), (floor, 2.0), "bytes moved" if by_bytes else "intensity (FLOP/byte)",
                     "achieved fraction of roofline")
    ax.legend(loc="lower right", frameon=False, fontsize=7)
    fig.text(0.55, 0.97, title, ha="center", va="top", fontsize=10)
    return charts._svg(fig)


def render(rep: dict, formats) -> dict[str, str]:
    """{relative path: text}: ops.md with a chart per op class under ops/, ops.json."""
    out = {}
    if "md" in formats:
        names = {c["class"]: f"{STEM}/{c['class']}.svg" for c in rep["classes"]}
        for c, path in names.items():
            pts = {op: xy for op, xy in rep["points"][c].items() if xy[0]}
            out[path] = chart(pts, rep["ridge"], f"{c}: bound / measured on {rep['device']}")
        out[f"{STEM}.md"] = rnd.environment(False, markdown=True).get_template(
            "md/validate-ops.md.j2").render(r=rep, charts=names)
    if "json" in formats:
        out[f"{STEM}.json"] = rnd.to_json({k: v for k, v in rep.items() if k not in ("points", "predictions")})
    if rep.get("predictions"):
        out[f"{STEM}/predictions.csv"] = rep["predictions"]
    return out
