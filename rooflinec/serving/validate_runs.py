"""Predicted against measured: every row of a measurements CSV through the serving model,
with and without calibration, and the errors that say how far to trust it."""

from __future__ import annotations

import math
import os

import numpy as np
from markupsafe import Markup

from rooflinec.serving import calibrate, intervals, measurements
from rooflinec.cost.deployment import ALL_REDUCES_PER_LAYER
from rooflinec.serving.serving_model import BOUND, bound, predict, request_bound
from rooflinec.render import charts, pages as rnd
from rooflinec.render.charts import inline

WORST = 5
HOLDOUTS = ("model", "tp", "engine")
STEM = "serving"   # <out>/serving.{md,html,json}, chart under <out>/serving/

ASSUMPTIONS = (
    "Aggregated serving, continuous batching, steady state: every step decodes one token for each "
    "of the C sequences in flight, at the mean context ISL + OSL/2, and prefills the prompts of the "
    "C/OSL requests that start per step (chunked prefill: a prompt's tokens share the step's GEMMs).",
    "TPOT is that step's time. A step is the sum over its kernels (the ideal variant: attention moving only compulsory traffic; fused QKV, "
    "epilogues fused) of max(FLOPs / (compute fraction x peak), bytes / (bandwidth fraction x "
    "bandwidth)), plus a fixed time per layer and per step, plus the all-reduces.",
    f"Tensor parallelism (Megatron-LM): heads, MLP width and vocabulary split over tp; KV heads too, "
    f"replicated when tp exceeds their count; {ALL_REDUCES_PER_LAYER} all-reduces per layer of the "
    "step's tokens x d_model in bf16, one-shot: 2(n-1)/n x payload / link bandwidth (per direction), plus one latency per "
    "collective (the link's, where its spec states one, and the calibration's); the bounds take the least time any "
    "all-reduce takes, the payload once / link bandwidth plus one latency. Communication does "
    "not overlap compute. Pipeline parallelism is not modelled.",
    "Weights and the KV cache are stored in the row's weight dtype (fp8 rows: fp8 GEMMs on the fp8 "
    "tensor peak); activations are bf16. The source does not state the KV-cache dtype.",
    "Sequences in flight: min(C, those whose KV cache at mean context fits in the memory the "
    "weights leave); the rest wait their turn, and TTFT includes that wait (Little's law: "
    "(C / in flight - 1) x (prefill + OSL x TPOT)).",
    "TTFT is the step that prefills the request's whole prompt beside the others' decode. "
    "The uncalibrated bounds hold on a population and step mix that are guaranteed, never at the "
    "mean mix: TTFT >= the prompt's prefill alone; TPOT >= one sequence's pure decode step at "
    "context ISL (every decode step holds at least the request itself); a request's OSL steps, "
    "TTFT + (OSL - 1) x TPOT >= OSL x that step. Each step by the overlapped rule, max(FLOPs / "
    "peak, bytes / bandwidth) summed over the step, at the datasheet peaks, no overheads, "
    "communication hidden.",
    "Today's pure decode step at the sequences in flight (the same step without prefill work; a prediction, not a bound: queued requests decode fewer at once) is kept beside each row.",
    "Not modelled: how an engine schedules and queues new requests beyond Little's law (where that "
    "dominates, the predicted TTFT is far below the measured one), pipeline parallelism, "
    "communication overlapping compute, and per-kernel effects beyond the fitted time per layer.",
)


def evaluate(prepared, cal: calibrate.Calibration) -> list[dict]:
    """One record per row: measured, calibrated, uncalibrated bounds, today's decode step."""
    out = []
    for p in prepared:
        r = p.row
        rec = {"row_id": r.row_id, "model": r.model, "device": r.device, "engine": r.engine,
               "weights": r.weights, "tp": r.tp, "isl": r.isl, "osl": r.osl,
               "concurrency": r.concurrency, "measured_tpot_s": r.tpot_s, "measured_ttft_s": r.ttft_s}
        if p.costs is None:
            out.append({**rec, "predicted": False, "reason": p.reason})
            continue
        cal_p, lo = predict(p.run, p.costs, cal.of(p.group)), bound(p.costs)
        out.append({**rec, "predicted": True, "in_flight": p.costs.concurrency,
                    "tpot_s": cal_p.tpot_s, "ttft_s": cal_p.ttft_s,
                    "tpot_bound_s": lo.tpot_s, "ttft_bound_s": lo.ttft_s,
                    "measured_request_s": r.ttft_s + (r.osl - 1) * r.tpot_s,
                    "request_bound_s": request_bound(p.run, p.costs),
                    "decode_bound_s": p.costs.decode.time(BOUND),
                    "tpot_error": cal_p.tpot_s / r.tpot_s - 1, "ttft_error": cal_p.ttft_s / r.ttft_s - 1})
    return out


def _median(values) -> float | None:
    return float(np.median(values)) if len(values) else None


def summary(errors) -> dict:
    e = np.asarray(errors, float)
    if not len(e):
        return {"rows": 0, "median_abs": None, "signed_median": None, "p90_abs": None}
    return {"rows": int(len(e)), "median_abs": float(np.median(np.abs(e))),
            "signed_median": float(np.median(e)), "p90_abs": float(np.percentile(np.abs(e), 90))}


BOUNDED = ("tpot", "ttft", "request")   # each record's {what}_bound_s against measured_{what}_s
RUN_KEYS = ("row_id", "model", "engine", "tp", "isl", "osl", "concurrency")


def _worst(records, what: str) -> list[dict]:
    """The rows furthest off in ratio (a 2x over and a 2x under rank alike)."""
    ranked = sorted(records, key=lambda r: -abs(math.log1p(r[f"{what}_error"])))
    return [{k: r[k] for k in RUN_KEYS} | {"measured_s": r[f"measured_{what}_s"],
                                           "predicted_s": r[f"{what}_s"], "error": r[f"{what}_error"]}
            for r in ranked[:WORST]]


def holdouts(prepared, free) -> list[dict]:
    """Leave one group out: refit (the same parameters) on the other rows, predict the
    group's rows. A (device, engine) the remaining rows do not cover takes its engine's fit,
    else the pooled one."""
    usable = [p for p in prepared if p.costs is not None]
    out = []
    for column in HOLDOUTS:
        for value in sorted({getattr(p.row, column) for p in usable}):
            test = [p for p in usable if getattr(p.row, column) == value]
            train = [p for p in usable if getattr(p.row, column) != value]
            if not train:
                continue
            cal = calibrate.fit_all(train, free)
            recs = evaluate(test, cal)
            out.append({"by": column, "held_out": str(value),
                        "fallback": sorted({f"{p.group[0]}/{p.group[1]}" for p in test if p.group not in cal.groups}),
                        "tpot": summary([r["tpot_error"] for r in recs]),
                        "ttft": summary([r["ttft_error"] for r in recs]),
                        # log(predicted / measured), the intervals' residuals (`intervals.band_of`)
                        "residuals": np.log1p([[r[f"{w}_error"] for w in intervals.WHATS] for r in recs])})
    return out


def worst_holdout(rows: list[dict], by: str) -> float | None:
    values = [h["tpot"]["median_abs"] for h in rows if h["by"] == by]
    return max(values) if values else None


def report(csv_file: str, specs_root: str | None, calibration_file: str | None, op_time=None) -> dict:
    """`op_time`: per-op efficiency curves in the step (rooflinec.serving.opcurves), or None."""
    rows = measurements.read(csv_file)
    prepared = calibrate.prepare(rows, measurements.Specs(specs_root), op_time)
    cal = calibrate.load(calibration_file) if calibration_file else calibrate.fit_all(prepared)
    records = evaluate(prepared, cal)
    done = [r for r in records if r["predicted"]]
    ho = holdouts(prepared, cal.fitted)
    band = intervals.band_of(ho)
    cover = intervals.coverage(ho) if ho else None
    ho = [{k: v for k, v in h.items() if k != "residuals"} for h in ho]
    violations = [{k: r[k] for k in RUN_KEYS}
                  | {"what": what, "bound_s": r[f"{what}_bound_s"], "measured_s": r[f"measured_{what}_s"]}
                  for r in done for what in BOUNDED if r[f"{what}_bound_s"] > r[f"measured_{what}_s"]]
    return {
        "study": STEM,
        "title": "Serving model: predicted against measured",
        "source": os.path.basename(csv_file),
        "calibration": os.path.basename(calibration_file) if calibration_file else "fitted on these rows",
        "parameters": {"fitted": list(cal.fitted), "default": vars(cal.default),
                       "groups": [{"device": d, "engine": e, **vars(cal.groups[(d, e)])}
                                  for d, e in sorted(cal.groups)]
                       + [{"device": "(other devices)", "engine": e, **vars(cal.engines[e])}
                          for e in sorted(cal.engines)]},
        "assumptions": list(ASSUMPTIONS),
        "rows_total": len(records), "rows_predicted": len(done),
        "tpot": summary([r["tpot_error"] for r in done]),
        "ttft": summary([r["ttft_error"] for r in done]),
        "tpot_over_bound": _median([r["measured_tpot_s"] / r["tpot_bound_s"] for r in done]),
        "tpot_over_decode_bound": _median([r["measured_tpot_s"] / r["decode_bound_s"] for r in done]),
        "by_group": [{"model": m, "device": d, "engine": e,
                      "tpot": summary([r["tpot_error"] for r in done if (r["model"], r["device"], r["engine"]) == (m, d, e)]),
                      "ttft": summary([r["ttft_error"] for r in done if (r["model"], r["device"], r["engine"]) == (m, d, e)])}
                     for m, d, e in sorted({(r["model"], r["device"], r["engine"]) for r in done})],
        "worst_tpot": _worst(done, "tpot"), "worst_ttft": _worst(done, "ttft"),
        "holdouts": ho,
        "holdout_worst": {by: worst_holdout(ho, by) for by in HOLDOUTS},
        "violations": violations,
        "intervals": band, "coverage": cover,
        "interval_table": intervals.interval_table(cover, band),
        "unpredictable": [{"row_id": r["row_id"], "model": r["model"], "device": r["device"],
                           "reason": r["reason"]} for r in records if not r["predicted"]],
        "rows": records,
    }


# --- the chart ----------------------------------------------------------------------------

def chart(rep: dict) -> str:
    """Predicted (calibrated) against measured TPOT and TTFT, log-log, y = x; colour by model,
    marker by tp."""
    fig = charts._matplotlib()(figsize=(9.0, 4.6))
    fig.subplots_adjust(left=0.08, right=0.99, bottom=0.27, top=0.9, wspace=0.28)
    done = [r for r in rep["rows"] if r["predicted"]]
    models = sorted({r["model"] for r in done})
    tps = sorted({r["tp"] for r in done})
    for i, what in enumerate(("tpot", "ttft")):
        ax = fig.add_subplot(1, 2, i + 1)
        xs = [r[f"measured_{what}_s"] * 1e3 for r in done]
        ys = [r[f"{what}_s"] * 1e3 for r in done]
        lo, hi = (min(xs + ys) / 1.5, max(xs + ys) * 1.5) if done else (1, 1000)   # empty axes if none
        lo, hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
        ax.plot([lo, hi], [lo, hi], color=charts.ROOF, lw=0.8, label="y = x")
        for mi, m in enumerate(models):
            for ti, tp in enumerate(tps):
                pts = [(x, y) for x, y, r in zip(xs, ys, done) if r["model"] == m and r["tp"] == tp]
                if pts:
                    ax.plot(*zip(*pts), ls="none", marker=charts.MARKERS[ti % len(charts.MARKERS)], ms=3.5,
                            mfc="none", mew=0.8, color=charts.SERIES_COLOURS[mi % len(charts.SERIES_COLOURS)],
                            label=f"{m.split('/')[-1]}, tp {tp}")
        charts._log_axes(ax, (lo, hi), (lo, hi), f"measured {what.upper()} (ms)", f"predicted {what.upper()} (ms)")
        fig.text(0.28 + 0.5 * i, 0.97, f"{what.upper()}: predicted (calibrated) against measured",
                 ha="center", va="top", fontsize=10)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, frameon=False, fontsize=7)
    return charts._svg(fig)


CHART = f"{STEM}/predicted-vs-measured.svg"


def render(rep: dict, formats) -> dict[str, str]:
    """{relative path: text} for the requested formats (md links the chart, html inlines it)."""
    out = {}
    svg = chart(rep) if {"md", "html"} & set(formats) else None
    if "md" in formats:
        out[f"{STEM}.md"] = rnd.environment(False, markdown=True).get_template("md/validation.md.j2").render(r=rep, chart=CHART)
        out[CHART] = svg
    if "html" in formats:

        out[f"{STEM}.html"] = rnd.environment(True).get_template("html/validation.html.j2").render(
            r=rep, svg=Markup(inline(svg, "validation")))
    if "json" in formats:
        out[f"{STEM}.json"] = rnd.to_json(rep)
    return out
