"""Predicted against measured through the simulator: every row's benchmark replayed, the
errors of mean TTFT and mean TPOT per group and left out per group, the per-request bounds
(the same schedule at efficiencies 1 and overheads 0), and the rows whose scheduling
assumption carries most of the prediction. The report has the steady-state validation's
shape (`validate_runs.render` draws it) plus the simulator's own sections.

Prediction intervals (issue 30 item 3; the law in `serving.intervals`): each row predicted by
a fit that never saw its model, its tp or its engine (`holdouts`); the pooled split conformal
band of those residuals for a deployment calibrated in every respect, and per kind the
two-level band of a new group (a shift its rows share, Student's t over the held-out groups'
medians, their spread net of the medians' own sampling noise, beside the rows' own noise), measured by nested leave-one-group-out
(`intervals.coverage`), both kept in the calibration file (`intervals.block`)."""

from __future__ import annotations

import math
import os

import numpy as np

from rooflinec.serving import measurements, validate_runs
from rooflinec.serving.calibrate import NEGLIGIBLE_S
from rooflinec.serving import calibration, disagg, engines, fitting, intervals, recipes, request_bounds, rows, workload
from rooflinec.serving import stepcost as sc
from rooflinec.serving.serving_model import Unpredictable
from rooflinec.cost import parallel

WEAKEST = 8
HOLDOUTS, LEVEL, WHATS = intervals.HOLDOUTS, intervals.LEVEL, intervals.WHATS

ASSUMPTIONS = (
    "Each row's benchmark is replayed step by step: a closed loop of C clients, 2C warm-up requests "
    "then 20C measured ones, fixed ISL and OSL, all clients starting together (and again when the "
    "warm-up has drained); mean TTFT and mean TPOT over the measured requests, as aiperf reports them. "
    "Requests sent at the same instant reach the engine one after another (the server's front end "
    "takes them in turn), so an idle engine's step starts with one of them and the others join the next "
    "step; a busy engine admits at its next step every waiting request its budget takes.",
    "The engine's scheduler is its catalog file (catalog/engines/): token budget, batch limit, "
    "chunked prefill, mixed steps (TensorRT-LLM, vLLM) or prefill first (SGLang), KV blocks and "
    "the memory fraction for the cache, admission reservation, preemption by recompute and what "
    "admission does after it (SGLang reserves every running request's output, vLLM admits nothing in that "
    "step); each file lists what it assumes. The runs' own settings are not published: where the rows' source "
    "states what its benchmark generator writes, the benchmark recipe below replaces the defaults.",
    "A step's time is the roofline of that step: the decodes at their own contexts and the prompt "
    "chunks scheduled (FlashAttention variant, fused QKV, epilogues fused), each kernel "
    "max(FLOPs / (compute fraction x peak), bytes / (bandwidth fraction x bandwidth)), plus a fixed "
    "time per kernel launched (each kernel's launch and tail latency, so a deeper model's step, or one "
    "whose layers launch more kernels, costs more) "
    "and per running request (host-side scheduling and sampling), and the "
    "tensor-parallel all-reduces (one-shot: 2(n-1)/n x payload / link bandwidth + one latency each; at the bound "
    "the least time any all-reduce takes, the payload once / link bandwidth + one latency, beside the kernels: "
    "max(kernels, all-reduces), as an engine overlapping communication with compute approaches).",
    "Fitted per (device, engine, kind of model) with a soft-L1 loss on the log ratios (scale 0.1: a "
    "row off by much more than 10% counts linearly, so rows measuring what the model lacks do not "
    "set a group's parameters). A group the calibration lacks (and a left-out one) takes its engine's "
    "host-side times (its other kind's group on that device, else the engine's fit) with the compute "
    "fraction of models of its kind on every device; an engine with no rows takes the "
    "pooled fit (calibration.resolve).",
    "Weights in the row's GEMM format (fp8-block read as fp8); the KV cache as the next line says; "
    "activations bf16. KV-cache capacity: the engine's memory fraction of the device "
    "less the weights (activation workspace and CUDA graphs not subtracted).",
    "Prompts: every prompt distinct in the prediction. aiperf's default dataset is 100 unique prompts "
    "reused in shuffled passes and the engines cache prefixes by default; replaying that (a prompt sent "
    "before skips its cached whole KV blocks while the 100 prompts' KV fits beside the running batch's "
    "own) made the refitted errors larger, so it is an option (--unique-prompts 100), and the bounds take it.",
    "Bounds: TPOT from the schedule with aiperf's 100 reused prompts and the engine's prefix caching, every "
    "efficiency 1 and every overhead 0; TTFT from the request's own prompt prefilled alone at the bound "
    "(a prompt sent before: its last token alone, the rest cached, whatever the eviction). The schedule's TTFT at the bound is not a "
    "bound: the replay's synchronised waves queue prompts behind each other more than the measured "
    "runs do (the report counts the rows where it exceeds the measurement). A closed loop of fixed "
    "lengths keeps whatever synchronisation it starts with (the requests of a wave finish in the same "
    "step), and SGLang's default scheduler runs a prefill batch whenever one can be formed, so its decodes "
    "wait for the whole wave (a recipe's mixed chunk runs them beside it). Where the replay at the bound "
    "exceeds the measured TTFT the runs did "
    "not keep that synchronisation; what spread them (timing noise the deterministic replay lacks is "
    "one candidate) is not modelled.",
    "The KV cache is stored in the row's weight format, fp8 beside 4-bit weights (the rows do not "
    "state it; `rows.kv_format`).",
    "A mixture of experts' routed experts per step by stepcost.Routed: predicted under uniform routing, "
    "their weights read at a bandwidth fraction of their own (fitted on the MoE rows) "
    "(with the dispatch and combine all-to-alls under expert parallelism), bounded by what any "
    "routing must read (pigeonhole rows, ceil(k/ep) experts, no all-to-all). "
    "Not predicted: layouts whose experts' GPUs are not the attention's, pipeline parallelism. "
    "Disaggregated rows are predicted apart (their own section, serving/disagg.py).",
)


def record(case: fitting.Case, p: sc.Parameters, band: dict | None = None) -> dict:
    r = case.row
    rec = {"row_id": r.row_id, "model": r.model, "device": r.device, "engine": r.engine,
           "weights": r.weights, "tp": r.tp, "layout": rows.layout(r), "isl": r.isl, "osl": r.osl,
           "concurrency": r.concurrency,
           "measured_tpot_s": r.tpot_s, "measured_ttft_s": r.ttft_s}
    if not case.predicted:
        return {**rec, "predicted": False, "reason": case.reason}
    ttft, tpot = case.means(p)
    ttft_sched = case.means(sc.BOUND)[0]
    tpot_lo, ttft_lo = case.bound_means()[1], prompt_alone(case)
    res = case.result
    return {**rec, "predicted": True, "tpot_s": tpot, "ttft_s": ttft, "tpot_bound_s": tpot_lo,
            "ttft_bound_s": ttft_lo, "ttft_schedule_bound_s": ttft_sched,
            "decode_bound_s": _decode_bound(case),
            "tpot_error": tpot / r.tpot_s - 1, "ttft_error": ttft / r.ttft_s - 1,
            "queue_share": case.retimer.queue_share(p), "preemptions": res.preemptions,
            "mean_batch": float((res.timeline[:, 1] * res.timeline[:, 2]).sum() / res.timeline[:, 1].sum()),
            "kv_cache_tokens": res.capacity_tokens,
            **(_intervals(band, {"tpot": (tpot, tpot_lo), "ttft": (ttft, ttft_lo)}) if band else {})}


def _intervals(band: dict, predicted: dict) -> dict:
    """The measured means the interval allows around the predicted ones (`band`: the log
    residual quantiles, as `intervals.band_of` gives them; `predicted`: per figure, the
    prediction and the row's bound), each end no lower than the bound (`intervals.interval`'s
    floor, as the disaggregated intervals take theirs): no run is faster than its bound."""
    out = {}
    for what, (y, floor) in predicted.items():
        lo, hi = intervals.interval(y, *band[what], floor)
        out[f"{what}_interval_s"] = [float(lo), float(hi)]
    return out


def prompt_alone(case) -> float:
    """The mean TTFT bound: each measured request's prompt prefilled alone at the bound (no
    queue, no other work, no front-end latency), the least any schedule can give it, priced by
    its one owner, `request_bounds.per_request` (`simulate --bound`'s: the overlapped rule over
    the step's kernels, the collectives' least time, the least-work routing of one prompt).
    Where the engine caches prefixes and the benchmark reuses prompts, a request whose prompt
    was sent before may find all of it cached but the last token (whatever the eviction), so
    its least work is that one token over the cached context; a prompt's first sending
    (aiperf's first pass over the dataset) prefills it all."""
    isl, work = np.array([case.row.isl]), case.least_work.workload
    full = float(request_bounds.per_request(case.step, isl, cached=False)[0][0])
    if not (case.policy.prefix_caching and work.reused):
        return full
    last = float(request_bounds.per_request(case.step, isl, cached=True)[0][0])
    first = np.arange(work.total)[case.least_work.measured] < work.unique_prompts
    return float(np.where(first, full, last).mean())


def _decode_bound(case) -> float:
    """The pure decode step of all C sequences at the mean context, at the bound."""
    r = case.row
    x = np.zeros(len(sc.FEATURES))
    x[[sc.ONE, sc.TOKENS, sc.LOGITS, sc.DECODES]] = 1, r.concurrency, r.concurrency, r.concurrency
    x[sc.CONTEXT] = r.concurrency * (r.isl + r.osl / 2)
    if case.step.window is not None:      # windowed layers read min(context, W) (stepcost.attend)
        x[sc.WINDOW_CONTEXT] = r.concurrency * min(r.isl + r.osl / 2, case.step.window)
    return float(case.step.durations(x[None], sc.BOUND)[0])


def _errors(case: fitting.Case, p: sc.Parameters) -> dict:
    """`record`'s errors alone (what a left-out row's record is used for)."""
    ttft, tpot = case.means(p)
    return {"tpot_error": tpot / case.row.tpot_s - 1, "ttft_error": ttft / case.row.ttft_s - 1}


def _summaries(recs) -> dict:
    return {w: validate_runs.summary([r[f"{w}_error"] for r in recs]) for w in ("tpot", "ttft")}


def holdouts(cases, free, shared: dict | None = None, progress=None) -> list[dict]:
    """Each model, tp and engine left out in turn: the parameters its rows take
    (`calibration.resolve`: their group's, else composed from their engine's and their kind's,
    else the pooled one) refitted without them. `shared`: `fitting.Fitter`'s, the fits of the
    same rows done once (a group the held-out rows are not in fits the same rows every time).
    `progress`: called with a line before each refit (the CLI's, after its first second)."""
    shared = {} if shared is None else shared
    usable = [c for c in cases if c.predicted]
    out = []
    plan = [(by, value) for by in HOLDOUTS for value in sorted({getattr(c.row, by) for c in usable}, key=str)]
    for i, (by, value) in enumerate(plan, start=1):
        if progress:
            progress(f"refitting without {by} {value} ({i} of {len(plan)} left-out groups)")
        test = [c for c in usable if getattr(c.row, by) == value]
        train = [c for c in usable if getattr(c.row, by) != value]
        if not train:
            continue
        fitter, borrowed = fitting.Fitter(train, free, shared), set()
        for g in {c.group for c in test}:
            if fitter.get(("group", *g)) is None:
                borrowed.add(f"{g[0]}/{g[1]}")
        recs = [_errors(c, fitter.of(c.group)) for c in test]
        out.append({"by": by, "held_out": str(value), "fallback": sorted(borrowed), **_summaries(recs),
                    "residuals": np.log1p([[r[f"{w}_error"] for w in WHATS] for r in recs])})
    return out


def report(csv_file: str, specs_root: str | None, calibration_file: str | None, with_holdouts=True,
           unique_prompts=workload.BENCHMARK_UNIQUE_PROMPTS, recipe: recipes.Recipe | str | None = recipes.DEFAULT,
           progress=None) -> dict:
    """`unique_prompts`: the prediction's distinct prompts (`workload.benchmark`); `recipe`: the
    engine settings the rows' benchmark ran with (a Recipe or its name; None: the engines' defaults);
    `progress`: called with a line at each stage (`holdouts`')."""
    recipe = recipes.load(recipe) if isinstance(recipe, str) else recipe
    specs = measurements.Specs(specs_root)
    cases = fitting.prepare(rows.read(csv_file), specs, unique_prompts, recipe)
    band, shared = None, {}      # the fits of the same rows, done once (`fitting.Fitter`)
    if calibration_file:
        table = calibration.load(calibration_file)
        of, fitted, band = (lambda c: table.of(*c.group)), table.fitted, table.intervals       # noqa: E731
        params = {"default": table.default, "groups": table.groups, "engines": table.engines}
    else:
        fits = fitting.fit_all(cases, shared=shared) if any(c.predicted for c in cases) else None
        of, fitted = (lambda c: fits.of(*c.group)), fitting.FITTED       # noqa: E731
        params = ({"default": fits.default, "groups": fits.groups, "engines": fits.engines} if fits
                  else {"default": sc.BOUND, "groups": {}, "engines": {}})
    if progress:
        progress(f"scheduled {len(cases)} rows ({sum(c.predicted for c in cases)} predictable)")
    ho = holdouts(cases, fitted, shared, progress) if with_holdouts else []
    if progress:
        progress("predicting the rows and the disaggregated ones")
    measured = intervals.band_of(ho) if ho else None     # this run's bands, beside the coverage it measures
    band = band or measured
    disaggregated = [c for c in cases if c.row.mode == "disagg"]
    split = [_disaggregated(c, specs, of(c)) for c in disaggregated]   # serving/disagg.py
    records = [record(c, of(c), band) for c in cases if c.row.mode != "disagg"] + [r for r in split if not r["predicted"]]
    done = [r for r in records if r["predicted"]]
    cover = intervals.coverage(ho) if ho else None
    ho = [{k: v for k, v in h.items() if k != "residuals"} for h in ho]
    violations = [{k: r.get(k) for k in validate_runs.RUN_KEYS}
                  | {"what": w, "bound_s": r[f"{w}_bound_s"], "measured_s": r[f"measured_{w}_s"]}
                  for r in done + [s for s in split if s["predicted"]] for w in ("tpot", "ttft")
                  if r[f"{w}_bound_s"] > r[f"measured_{w}_s"]]
    groups = sorted({(r["model"], r["device"], r["engine"]) for r in done})
    median = lambda xs: float(np.median(xs)) if xs else None   # noqa: E731
    return {
        "study": validate_runs.STEM,
        "title": "Serving simulator: predicted against measured",
        "source": os.path.basename(csv_file),
        "calibration": os.path.basename(calibration_file) if calibration_file else "fitted on these rows",
        "parameters": {"fitted": list(fitted), "default": vars(params["default"]),
                       "groups": [{"device": g[0], "engine": g[1] + (f", {g[2]} models" if len(g) > 2 else ""),
                                   **vars(params["groups"][g])} for g in sorted(params["groups"])]
                       + [{"device": "(other devices)", "engine": e, **vars(params["engines"][e])}
                          for e in sorted(params["engines"])]},
        "assumptions": list(ASSUMPTIONS[:2]) + [recipes.describe(recipe)] + list(ASSUMPTIONS[2:])
        + list(disagg.ROW_ASSUMPTIONS),
        "rows_total": len(cases), "rows_predicted": len(done) + sum(r["predicted"] for r in split),
        "disaggregated": [r for r in split if r["predicted"]],
        "disaggregated_errors": _summaries([r for r in split if r["predicted"]]),
        **_summaries(done),
        "tpot_over_bound": median([r["measured_tpot_s"] / r["tpot_bound_s"] for r in done]),
        "tpot_over_decode_bound": median([r["measured_tpot_s"] / r["decode_bound_s"] for r in done]),
        "by_group": [{"model": m, "device": d, "engine": e,
                      **_summaries([r for r in done if (r["model"], r["device"], r["engine"]) == (m, d, e)])}
                     for m, d, e in groups],
        "by_layout": by_layout([dict(r, layout=rows.layout(c.row)) for c, r in zip(disaggregated, split)] + records),
        "worst_tpot": validate_runs._worst(done, "tpot"), "worst_ttft": validate_runs._worst(done, "ttft"),
        "holdouts": ho,
        "holdout_worst": {by: validate_runs.worst_holdout(ho, by) for by in HOLDOUTS},
        "holdout_worst_ttft": {by: max((h["ttft"]["median_abs"] for h in ho if h["by"] == by), default=None)
                               for by in HOLDOUTS},
        "violations": violations,
        "intervals": band, "coverage": cover, "interval_table": intervals.interval_table(cover, measured or band),
        "schedule_ttft_over_measured": sum(r["ttft_schedule_bound_s"] > r["measured_ttft_s"] for r in done),
        "weakest": weakest(done),
        "simulator": True,
        "unpredictable": [{"row_id": r["row_id"], "model": r["model"], "device": r["device"],
                           "reason": r["reason"]} for r in records if not r["predicted"]],
        "rows": records,
    }


def by_layout(recs) -> list[dict]:
    """Rows, rows predicted and errors per mode and layout (`rows.layout`), each row once."""
    seen, out = {}, []
    for r in recs:
        seen.setdefault(r["row_id"], r)
    for lay in sorted({r["layout"] for r in seen.values()}):
        group = [r for r in seen.values() if r["layout"] == lay]
        done = [r for r in group if r["predicted"]]
        out.append({"layout": lay, "rows": len(group), "predicted": len(done),
                    **(_summaries(done) if done else {"tpot": None, "ttft": None})})
    return out


def _disaggregated(case, specs, params) -> dict:
    """A disaggregated row through `serving/disagg.py`, or why not (kept apart from the fit)."""
    r = case.row
    got = rows.resolve_disagg(r, specs)
    if isinstance(got, str) or r.engine not in engines.names():
        reason = got if isinstance(got, str) else f"no engine policy '{r.engine}'"
        return {"row_id": r.row_id, "model": r.model, "device": r.device, "predicted": False, "reason": reason}
    try:
        return disagg.row_record(r, got, engines.load(r.engine), params)
    except (Unpredictable, parallel.Unshardable) as exc:    # a pool's degrees the model cannot split
        return {"row_id": r.row_id, "model": r.model, "device": r.device, "predicted": False,
                "reason": f"disaggregated: {exc}"}


def weakest(done) -> list[dict]:
    """The rows where the scheduling assumption carries most of the prediction: the largest
    share of TTFT spent queueing for admission (set by the assumed batch limit, token budget and
    KV reservation, not by the roofline), then preemptions (the assumed KV capacity binds)."""
    ranked = sorted(done, key=lambda r: (-(r["queue_share"] + (1 if r["preemptions"] else 0)), r["row_id"]))
    return [{k: r[k] for k in validate_runs.RUN_KEYS}
            | {"queue_share": r["queue_share"], "preemptions": r["preemptions"], "mean_batch": r["mean_batch"],
               "ttft_error": r["ttft_error"], "tpot_error": r["tpot_error"]} for r in ranked[:WEAKEST]]


def calibrate(cases, source: str, specs=None, progress=None) -> dict:
    """`rooflinec calibrate --simulate`'s document: the fits of the rows, with the intervals
    from their left-out refits, and the disaggregated rows predicted with the fits (as
    `report` predicts them) for their own band. ValueError where no row is predicted."""
    shared = {}      # the fits of the same rows, done once (`fitting.Fitter`)
    fits = fitting.fit_all(cases, shared=shared)
    specs = specs or measurements.Specs()
    split = [_disaggregated(c, specs, fits.of(*c.group)) for c in cases if c.row.mode == "disagg"]
    return document(fits, cases, source, holdouts(cases, fits.fitted, shared, progress), split)


def document(fits: calibration.Table, cases, source: str, ho: list[dict] | None = None,
             disaggregated: list[dict] = ()) -> dict:
    """The calibration YAML's content (`calibration.load` reads it back); `disaggregated`:
    the disaggregated rows' records (`_disaggregated`), their residuals kept in the intervals."""
    usable = [c for c in cases if c.predicted]

    def residuals(cs, p_of):
        errs = np.array([[m / t - 1 for m, t in zip(c.means(p_of(c))[::-1], (c.row.tpot_s, c.row.ttft_s))]
                         for c in cs])
        return {"rows": len(cs), "tpot_median_abs_error": _r(float(np.median(np.abs(errs[:, 0])))),
                "ttft_median_abs_error": _r(float(np.median(np.abs(errs[:, 1]))))}

    def params(p):   # a time the fit drove to its coordinate's floor (1 us e^-30) is written as 0
        return {n: 0.0 if n not in calibration.FRACTIONS and getattr(p, n) < NEGLIGIBLE_S
                else _r(getattr(p, n)) for n in sc.NAMES}
    own = lambda c: fits.of(*c.group)   # noqa: E731
    return {
        "kind": calibration.KIND,
        "fitted_on": source,
        "method": "the simulator's schedule of each row's benchmark, re-timed; soft-L1 loss (scale "
                  f"{fitting.LOSS_SCALE:g}) on "
                  "log(predicted / measured) mean TPOT and mean TTFT, per (device, engine, dense or MoE "
                  "model), per engine and pooled; parameters not fitted keep their bound values",
        "fitted": list(fits.fitted),
        "default": {"parameters": params(fits.default), "residuals": residuals(usable, own)},
        "engines": [{"engine": e, "parameters": params(fits.engines[e]),
                     "residuals": residuals([c for c in usable if c.group[1] == e], own)}
                    for e in sorted(fits.engines)],
        "groups": [{"device": g[0], "engine": g[1], "models": g[2], "parameters": params(fits.groups[g]),
                    "residuals": residuals([c for c in usable if c.group == g], own)}
                   for g in sorted(fits.groups)],
        # the compute fraction of a kind of model on every device, for an engine's group of
        # the other kind only (calibration.resolve)
        "kinds": [{"models": k, "parameters": params(fits.kinds[d, k])} for d, k in fits.kinds],
        **_with_disaggregated(intervals.block(ho, usable), disaggregated),
    }


def _with_disaggregated(block: dict, disaggregated) -> dict:
    """The intervals block with the disaggregated rows' residuals beside the aggregated bands
    (none where the block is empty: too few aggregated rows for any band)."""
    entry = intervals.disaggregated_entry(list(disaggregated))
    if not block or entry is None:
        return block
    return {"intervals": {**block["intervals"], "disaggregated": entry}}


def _r(x: float) -> float:
    return 0.0 if x == 0 or not math.isfinite(x) else float(f"{x:.6g}")
