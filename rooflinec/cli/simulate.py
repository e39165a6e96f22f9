"""`rooflinec simulate`: one deployment serving a workload, replayed step by step."""

from __future__ import annotations

import argparse
import json
import os
import yaml

from rooflinec.cli import output
from rooflinec.base.errors import Problem, RooflineError, SpecError, UsageError
from rooflinec.serving.workload import Lengths, Workload, unique_prompts_of
from rooflinec.spec.load import DTYPE_BYTES
from rooflinec.cli import quick, speculation
from rooflinec.cli import storage as weight_flags
from rooflinec.serving import calibrate, calibration, disagg, engines, fitting, intervals, metrics, rows, simulator, stepcost as sc
from rooflinec.serving import recipes, request_bounds, speculative, validation, workload
from rooflinec.serving.serving_model import Unpredictable
from rooflinec.serving.measurements import Specs
from rooflinec.serving.chart import timeline
from rooflinec.cli.progress import Progress

EPILOG = f"""\
A closed loop (--concurrency C) replays the benchmark behind the measured rows: C clients
start together, each sends its next request when its last one finished; 2C warm-up requests
are not measured, then 20C are (aiperf --concurrency C --num-requests 20C
--warmup-request-count 2C). An open loop (--rate R) sends Poisson arrivals at R requests/s;
where its second half of arrivals completes under {metrics.BACKLOG:.0%} of them, a growth past a
steady count's noise or held in a standing queue, the output says it is not a steady state
(an overload, or a run too short: raise --requests).
Every step is timed as the roofline of that exact step (its decodes at their own contexts and
the prompt chunks scheduled), with the calibration's efficiencies and overheads for the
(device, engine). --bound: each request's least times under any schedule (TTFT: its prompt's
prefill alone at the datasheet peaks; TPOT, ITL: one sequence's decode step past its prompt;
E2E: TTFT's + (OSL - 1) of those); the replay at efficiencies 1 and overheads 0 under this
engine's schedule is printed beside them, labelled not a bound (a better schedule beats it).

examples:
  rooflinec simulate llama-3.1-8b --device h100-sxm --engine trtllm --concurrency 64 --isl 1024 --osl 128
  rooflinec simulate llama-3.1-70b --device h200-sxm --tp 4 --weights fp8 --engine vllm \\
      --concurrency 32 --isl 4000 --osl 500 --json
  rooflinec simulate llama-3.1-8b --device h100-sxm --engine sglang --rate 20 --isl 512-2048 \\
      --osl 128-512 --requests 2000 --chart timeline.svg
  rooflinec simulate llama-3.1-8b --device h100-sxm --engine vllm --concurrency 64 --isl 1024 \\
      --osl 128 --max-tokens 2048 --schedule prefill_first     # override the engine's defaults

  rooflinec simulate llama-3.1-8b --device h100-sxm --engine vllm --concurrency 16 --isl 1024 \\
      --osl 256 --speculate ngram:k=4,alpha=0.6         # every decode a verification of 5 tokens

engines: catalog/engines/*.yaml (trtllm, vllm, sglang), each with its version, the source
files of its defaults and what is assumed where no source states a default.
"""


def register(sub, streams, parents=()) -> None:
    s = sub.add_parser("simulate", help="replay a serving benchmark step by step: TTFT, TPOT, "
                       "ITL, E2E and throughput", streams=streams, parents=parents, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.set_defaults(parser=s)
    s.add_argument("model", metavar="MODEL", help="a catalog model (rooflinec models), a model spec YAML, "
                   "or a Hugging Face config.json (or the model folder holding one)")
    s.add_argument("--device", required=True, metavar="NAME",
                   help="a catalog device (rooflinec devices) or a hardware spec YAML")
    s.add_argument("--tp", default=1, type=int, metavar="N", help="tensor-parallel degree (default: 1)")
    s.add_argument("--attention-dp", default=1, type=int, metavar="N", help="attention data-parallel ranks, "
                   "each with its own batch and KV cache; the load splits evenly over them and one rank "
                   "is replayed (default: 1)")
    s.add_argument("--ep", default=1, type=int, metavar="N", help="expert parallelism: a MoE's routed experts "
                   "over N ranks; tp x attention-dp = moe-tp x ep (default: 1)")
    s.add_argument("--moe-tp", type=int, metavar="N", help="each routed expert's width over N devices "
                   "(default: tp x attention-dp / ep)")
    s.add_argument("--engine", required=True, metavar="NAME",
                   help="scheduler policy: trtllm, vllm, sglang, or an engine YAML")
    s.add_argument("--weights", default="bf16", metavar="FORMAT",
                   help="weights' format, e.g. fp8, or per class: experts=mxfp4,attention=bf16 (default: bf16); "
                        f"{weight_flags.GEMM_RULE}, as serve and plan")
    s.add_argument("--kv-cache", metavar="FORMAT",
                   help="KV cache's format (default: the engine's; auto is bf16)")
    load = s.add_argument_group("workload")
    load.add_argument("--concurrency", type=int, metavar="C", help="closed loop of C clients")
    load.add_argument("--rate", type=float, metavar="R", help="open loop: Poisson arrivals per second")
    load.add_argument("--isl", required=True, metavar="N|LO-HI|normal:MEAN,SD",
                      help="input tokens per request: fixed (1024), uniform on a range (512-2048, as vLLM's and "
                           "SGLang's random datasets draw), or normal (normal:1024,128, as aiperf draws "
                           "--synthetic-input-tokens-mean/-stddev: redrawn below 0, rounded up)")
    load.add_argument("--osl", required=True, metavar="N|LO-HI|normal:MEAN,SD",
                      help="output tokens per request, as --isl")
    load.add_argument("--requests", type=int, metavar="N",
                      help="measured requests (default: 20C closed loop, 1000 open loop)")
    load.add_argument("--warmup", type=int, metavar="N",
                      help="requests sent first and not measured (default: 2C closed loop, 0 open loop)")
    load.add_argument("--unique-prompts", metavar="N|all",
                      help=UNIQUE_HELP)
    load.add_argument("--seed", type=int, default=0, metavar="N",
                      help="seed of the lengths and arrivals (default: 0)")
    eng = s.add_argument_group("engine overrides (default: the engine file's)")
    eng.add_argument("--max-batch", type=int, metavar="N", help="most requests running at once")
    eng.add_argument("--max-tokens", type=int, metavar="N", help="tokens one step may schedule")
    eng.add_argument("--chunked-prefill", action=argparse.BooleanOptionalAction, default=None,
                     help="split prompts over steps")
    eng.add_argument("--chunk-tokens", type=int, metavar="N", help="most prompt tokens per step")
    eng.add_argument("--schedule", choices=engines.SCHEDULES,
                     help="mixed: decodes beside prompt chunks; prefill_first: prefill steps pause decodes")
    eng.add_argument("--cache-fraction", type=float, metavar="F", help="memory fraction for the KV cache")
    eng.add_argument("--preemption", choices=engines.PREEMPTION, help="what happens when blocks run out")
    eng.add_argument("--after-preemption", choices=engines.AFTER_PREEMPTION,
                     help="admission after a preemption: reserve_output (every running request's remaining output, "
                          "SGLang's) or pause_admission (none in the step that preempted, nothing reserved, vLLM V1's)")
    eng.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                     help="reuse a prompt's cached KV blocks (on in every engine file)")
    dis = s.add_argument_group("disaggregated prefill and decode (serving/disagg.py; a closed loop, fixed lengths)")
    for pool in ("prefill", "decode"):
        dis.add_argument(f"--{pool}-workers", type=int, metavar="N", help=f"{pool} workers (with it: two pools)")
        dis.add_argument(f"--{pool}-tp", type=int, metavar="N", help=f"tensor parallelism of one {pool} worker (default: --tp)")
        dis.add_argument(f"--{pool}-attention-dp", type=int, metavar="N",
                         help=f"attention data-parallel ranks of one {pool} worker, each its own batch (default: 1)")
        dis.add_argument(f"--{pool}-ep", type=int, metavar="N",
                         help=f"expert parallelism of one {pool} worker's MoE layers (default: 1; its experts fill "
                              "its tp x attention-dp GPUs)")
    dis.add_argument("--prefill-batch", type=int, metavar="N", help="requests a prefill worker runs at once")
    s.add_argument("--calibration", metavar="FILE",
                   help="parameters per (device, engine) (default: the shipped simulator calibration)")
    add_request_latency(s)
    s.add_argument("--bound", action="store_true",
                   help="each request's least TTFT, TPOT, ITL and E2E under any schedule (its prefill alone, "
                        "one sequence's decode steps, at the datasheet peaks); the replay at efficiencies 1, "
                        "overheads 0 beside them, not a bound")
    s.add_argument("--chart", metavar="FILE.svg", help="write running, waiting and tokens per step over time")
    s.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    speculation.add_arguments(s)


UNIQUE_HELP = ("distinct prompts, reused in shuffled passes, so the engine's prefix cache can skip a "
               "repeated prompt's prefill (aiperf's default dataset: 100); 0 or all: every prompt distinct "
               "(the default: replaying the 100 did not improve the measured rows' validation)")


def _positive(name: str, v, kind=int):
    if v is not None and not (v >= 1 if kind is int else 0 < v < float("inf")):
        raise UsageError(f"--{name}: {v} must be " + ("at least 1" if kind is int else "a positive, finite number"))
    return v


LONGEST_S = 1e9     # an open loop's expected span: a double keeps 1e9 s to 2e-7 s, under a step's microseconds


def workload_of(args):
    if (args.concurrency is None) == (args.rate is None):
        raise UsageError("--concurrency: give --concurrency C (closed loop) or --rate R (open loop), one of them")
    c, rate = _positive("concurrency", args.concurrency), _positive("rate", args.rate, float)
    for name in ("requests", "warmup"):
        v = getattr(args, name)
        if v is not None and not 0 <= v <= simulator.MAX_EVENTS:
            raise UsageError(f"--{name}: {v} must be between 0 and {simulator.MAX_EVENTS:,}, "
                             "the simulator's event budget")
    if args.seed < 0:
        raise UsageError(f"--seed: {args.seed} must be a whole number >= 0")
    requests = args.requests if args.requests is not None else (20 * c if c else 1000)
    warmup = args.warmup if args.warmup is not None else (2 * c if c else 0)
    if requests < 1:
        raise UsageError("--requests: at least one request is measured")
    if rate is not None and (requests + warmup) / rate > LONGEST_S:
        raise UsageError(f"--rate: {rate:g} requests/s spreads {requests + warmup:,} requests over "
                         f"{(requests + warmup) / rate:.3g} s; past {LONGEST_S:g} s (about 30 years) a double "
                         "loses the steps' microseconds against the arrival times")
    if requests + warmup > simulator.MAX_EVENTS:
        defaults = c and (args.requests is None or args.warmup is None)
        said = (f" (a closed loop of C clients sends 20C measured after 2C warm-up by default, here {c:,} "
                "clients; give --requests and --warmup)" if defaults else "")
        raise UsageError(f"--requests: {requests:,} measured and {warmup:,} warm-up requests are past the "
                         f"{simulator.MAX_EVENTS:,} the simulator's event budget replays{said}")
    return Workload(Lengths.parse(args.isl, "--isl"), Lengths.parse(args.osl, "--osl"),
                    requests, warmup, c, rate, args.seed, unique_prompts_of(args.unique_prompts, None))


def add_request_latency(s) -> None:
    s.add_argument("--request-latency", type=float, metavar="S",
                   help="seconds each request spends outside the engine (the server's front end, tokenizer and "
                        "client), added to TTFT and E2E (default: the calibration's, fitted on the measured rows, "
                        "whose benchmark went through the engine's server; the fit also takes up TTFT the model "
                        "lacks, so 0, for a harness that times the engine alone, is not validated and prints no "
                        "TTFT interval)")


def calibration_of(args) -> calibration.Table:
    """--calibration's table (the shipped one by default), --request-latency's in every fit."""
    table = calibration.load(args.calibration or calibration.shipped())
    if args.request_latency is None:
        return table
    seconds = args.request_latency + 0.0      # -0 is 0
    problem = calibrate.parameter_problem("request_latency_s", seconds)
    if problem:
        raise UsageError(f"--request-latency: {seconds!r}: {problem}")
    return table.with_request_latency(seconds)


def _formats(value, flag):
    if value is not None and value not in DTYPE_BYTES:
        raise UsageError(f"{flag}: unknown format '{value}'; known: {', '.join(DTYPE_BYTES)}")
    return value


def cmd_simulate(args, stdout, stderr) -> int:
    work = workload_of(args)
    if args.chart is not None:   # refused before any work, as every --out is
        if not args.chart.lower().endswith(".svg"):
            raise UsageError(f"--chart: {args.chart} does not end in .svg; the chart is written as SVG")
        output.check_file_target(args.chart, "--chart")
    _positive("tp", args.tp)
    model, device = quick._model(args.model), quick._device(args.device)
    policy = engines.override(engines.load(args.engine), max_batch=args.max_batch, max_tokens=args.max_tokens,
                              chunked_prefill=args.chunked_prefill, chunk_tokens=args.chunk_tokens,
                              schedule=args.schedule, cache_fraction=args.cache_fraction,
                              preemption=args.preemption, after_preemption=args.after_preemption,
                              kv_cache=_formats(args.kv_cache, "--kv-cache"),
                              prefix_caching=args.prefix_caching)
    stored = weight_flags.weights(args.weights)
    args.weights, args.experts = stored.get("weights", "bf16"), stored.get("experts")
    engine_key = os.path.basename(args.engine).removesuffix(".yaml")
    draft = speculation.draft_of(args, quick._model)
    band = table = None
    if args.bound:
        if args.request_latency:     # 0 is what a bound takes
            raise UsageError("--request-latency: a bound takes no time outside the engine; leave out one of "
                             "--bound and --request-latency")
        params, where = sc.BOUND, "bound: efficiencies 1, overheads 0"
    else:
        table = calibration_of(args)
        kind = calibration.model_kind(model)
        params, where = table.fit(device.key, engine_key, kind, policy.name)
        if args.request_latency is not None:
            where += f"; request latency {params.request_latency_s!r} s from --request-latency"
        if table.intervals:
            new = intervals.new_in(table.intervals.get("calibrated"), model.hf_id, args.tp, engine_key,
                                   (device.key, engine_key, kind) in table.groups or (device.key, engine_key) in table.groups)
            q, which = intervals.band_for(table.intervals, new)
            band = q and {"level": table.intervals["level"], "band": which, **q}
    if args.prefill_workers is not None or args.decode_workers is not None:
        if args.chart is not None:
            raise UsageError("--chart: the disaggregated simulation draws no chart; leave out --chart")
        _warn_context(args, model, work, stderr)
        return _disaggregated(args, work, model, device, policy, params, where, stdout,
                              None if args.bound else (table.intervals or {}), table and table.banded)
    work = _one_rank(work, _positive("attention-dp", args.attention_dp))
    _warn_context(args, model, work, stderr)
    layout = dict(attention_dp=args.attention_dp, moe_ep=_positive("ep", args.ep), moe_tp=_positive("moe-tp", args.moe_tp))
    # degrees that do not divide what they split are a command-line mistake, said as serve says it
    quick._check_tp(model, args.tp, {"attention_dp": args.attention_dp, "ep": args.ep, "moe_tp": args.moe_tp})
    try:
        base = sc.build(sc.Deployment(model, device, args.tp, args.weights, policy.kv_dtype(), experts=args.experts,
                                      **layout))
        step = speculative.speculative(base, draft) if draft else base
        res = simulator.simulate(step, policy, work, params)
    except Unpredictable as exc:
        raise RooflineError(f"cannot simulate: {exc}") from None
    # a bound with speculation only at its best case, alpha = 1; below it, alpha is a prediction
    bound = args.bound and (draft is None or draft.alpha == 1)
    out = {"kind": "bound" if bound else "prediction", "model": model.name, "device": device.key,
           "tp": args.tp, **({"attention_dp": args.attention_dp, "ep": args.ep} if args.attention_dp > 1 or args.ep > 1 else {}),
           "engine": {"name": policy.name, "version": policy.version, "file": engine_key},
           "workload": work.describe(), "load": work.fields(), "closed_loop": work.closed, "parameters": {"source": where, **vars(params)},
           "kv_cache": {"fraction": policy.cache_fraction, "of": policy.cache_fraction_of},
           "prefix_cache": {"on": policy.prefix_caching, "pool_fits": res.prefix_pool,
                            "measured_hits": res.prefix_hits},
           **({"speculation": {"draft": draft.describe(), "k": draft.k, "tokens_per_step": step.tokens_per_step,
                               "source": speculative.SOURCE}} if draft else {}),
           **metrics.summary(res, args.tp)}
    if bound:   # the replay's latencies are its schedule's; the bounds are each request's own
        try:
            least = request_bounds.summary(res, base, step.tokens_per_step if draft else 1.0)
        except Unpredictable as exc:
            raise RooflineError(f"cannot bound: {exc}") from None
        # the replay's latencies and queue beside the bounds, never at the top level with them
        out["replay"] = {"note": request_bounds.NOT_A_BOUND, **{k: out[k] for k in least},
                         **{k: out.pop(k) for k in ("queue_wait_s", "in_engine_mean")}}
        out.update(least)     # throughput and per-user tokens/s stay the replay's (the text says so)
    if band:
        def means_within(q):
            return {f"{w}_mean_s": [float(v) for v in intervals.interval(out[f"{w}_s"]["mean"], *q[w])]
                    for w in table.banded if out[f"{w}_s"]["mean"] is not None}
        out["interval"] = {"level": band["level"], "band": band["band"], **means_within(band), **calibration.unbanded(table.banded)}
    grows = None if work.closed else metrics.backlog(res)
    if grows:
        out["backlog"] = grows
    if args.chart:
        svg = timeline(res, f"{model.name} on {args.tp} x {device.key}, {policy.name}: {work.describe()}")
        try:
            output.write_file(args.chart, svg)
        except OSError as exc:
            raise RooflineError(f"{args.chart}: cannot write: {exc.strerror or exc}") from None
    stdout.write(json.dumps(out, indent=2) + "\n" if args.json else text(out))
    return 0


def _warn_context(args, model, work: Workload, stderr) -> None:
    """Warn where a request simulated, its prompt and output, runs past the model's context
    (the requests drawn: a normal length has no longest)."""
    isl, osl = work.lengths()
    warned = quick.context_warning(args.model, model, int((isl + osl).max()), "--isl + --osl")
    if warned:
        stderr.write(warned + "\n")


def _one_rank(work: Workload, dp: int) -> Workload:
    """The load one of `dp` attention-DP ranks serves: C / dp clients (or the rate / dp) and
    their share of the requests."""
    if dp == 1:
        return work
    if work.closed and work.concurrency % dp:
        raise UsageError(f"--attention-dp: {dp} ranks do not split --concurrency {work.concurrency} evenly")
    return Workload(work.isl, work.osl, max(1, work.requests // dp), work.warmup // dp,
                    work.concurrency // dp if work.closed else None, None if work.closed else work.rate / dp, work.seed,
                    work.unique_prompts)


def _disaggregated(args, work, model, device, policy, params, where, stdout, bands=None, banded=()) -> int:
    """`bands`: the calibration's intervals block ({} where it has none; None for a bound);
    `banded`: the figures it describes (`calibration.Table.banded`)."""
    if not work.closed or work.isl.low != work.isl.high or work.osl.low != work.osl.high:
        raise UsageError("--prefill-workers: two pools are simulated for a closed loop (--concurrency) of fixed --isl and --osl")
    names = ("prefill_workers", "decode_workers", "prefill_tp", "decode_tp", "prefill_batch",
             "prefill_attention_dp", "decode_attention_dp", "prefill_ep", "decode_ep")
    n = {k: _positive(k.replace("_", "-"), getattr(args, k)) for k in names}
    moe = getattr(model, "moe", None) is not None
    for pool in ("prefill", "decode"):   # each pool's tp divides the model, or the flag that set it is wrong
        try:
            quick._check_tp(model, n[f"{pool}_tp"] or args.tp, {})
        except UsageError as exc:
            raise UsageError(str(exc).replace("--tp:", f"--{pool}-tp:", 1) if n[f"{pool}_tp"] else str(exc)) from None
    deps = [sc.Deployment(model, device, n[f"{pool}_tp"] or args.tp, args.weights, policy.kv_dtype(),
                          experts=args.experts, attention_dp=n[f"{pool}_attention_dp"] or 1,
                          **({"moe_ep": n[f"{pool}_ep"] or 1} if moe else {}))
            for pool in ("prefill", "decode")]
    pools = disagg.Pools(*deps, n["prefill_workers"] or 1, n["decode_workers"] or 1, n["prefill_batch"])
    try:
        out = (disagg.bound(pools, policy, work.isl.low, work.osl.low) if args.bound else
               disagg.simulate(pools, policy, work.concurrency, work.isl.low, work.osl.low, params))
    except Unpredictable as exc:
        raise RooflineError(f"cannot simulate: {exc}") from None
    out = {"kind": "bound" if args.bound else "prediction", "model": model.name, "device": device.key,
           "pools": {"prefill": [pools.prefill_workers, deps[0].tp], "decode": [pools.decode_workers, deps[1].tp]},
           "attention_dp": {"prefill": deps[0].attention_dp, "decode": deps[1].attention_dp},
           "engine": policy.name, "workload": f"closed loop of {work.concurrency} clients; ISL {work.isl}, OSL {work.osl}; "
                                               "each worker replays the benchmark (20 requests a client after 2)",
           "parameters": where, **out}
    if bands is not None:
        out.update(_disaggregated_interval(bands, pools, policy, work, out, banded))
    stdout.write(json.dumps(out, indent=2) + "\n" if args.json else disagg.text(out))
    return 0


def _disaggregated_interval(bands: dict, pools, policy, work, out: dict, banded) -> dict:
    """{interval: {level, band, ttft_mean_s, tpot_mean_s}} (the aggregated JSON's shape) from the
    calibration's disaggregated rows' residuals, each end no lower than the pools' bound; or
    {no_interval: why} where the calibration has too few of them."""
    level = bands.get("level") or intervals.LEVEL
    q, which = intervals.disaggregated_band(bands.get("disaggregated"), level)
    if q is None:
        return {"no_interval": {"level": level, "why": which}}
    floor = disagg.bound(pools, policy, work.isl.low, work.osl.low)
    return {"interval": {"level": level, "band": which, **{
        f"{w}_mean_s": [float(v) for v in intervals.interval(out[f"{w}_s"], *q[w], floor[f"{w}_s"])]
        for w in banded}, **calibration.unbanded(banded)}}


LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E"))
QUANTS = ("mean", "p50", "p90", "p99")


def _rate(x: float) -> str:
    """Requests per second to two decimals, or three significant digits below one (0.00 hides
    a slow open loop)."""
    return f"{x:.2f}" if x >= 1 or x == 0 else f"{x:.3g}"


def _latency_table(tables) -> list[str]:
    """Rows of mean, p50, p90, p99 in ms under one header, each table after its caption; the
    columns as wide as their widest figure."""
    cells = [[["-" if r[key][q] is None else f"{1e3 * r[key][q]:.2f}" for q in QUANTS] for key, _ in LATENCIES]
             for _, r in tables]
    width = max(9, *(len(c) for t in cells for row in t for c in row)) + 1
    lines = [f"{'':6}" + "".join(f"{q:>{width}}" for q in QUANTS) + "  (ms)"]
    for (caption, _), rows in zip(tables, cells):
        lines += [caption] if caption else []
        lines += [f"{label:6}" + "".join(f"{c:>{width}}" for c in row) for (_, label), row in zip(LATENCIES, rows)]
    return lines


def text(out: dict) -> str:
    dp = out.get("attention_dp", 1)
    rank = ((f" (one of {dp} attention-DP ranks, ep {out['ep']}: its load, its requests/s)" if dp > 1
             else f" (ep {out['ep']})") if "ep" in out else "")
    lines = [f"{out['model']} on {out['tp']} x {out['device']}{rank}, {out['engine']['name']} "
             f"{out['engine']['version']}: {out['workload']}",
             f"{out['kind']} ({out['parameters']['source']})",
             *([f"speculative decoding: {out['speculation']['draft']}, {out['speculation']['tokens_per_step']:.3g} "
                "tokens per verification step expected"
                + (" (the best case)" if out["speculation"]["tokens_per_step"] == out["speculation"]["k"] + 1
                   else " (a prediction at that alpha)")] if "speculation" in out else []),
             ""]
    tables = [(None, out)] + ([(out["replay"]["note"] + ":", out["replay"])] if "replay" in out else [])
    lines += _latency_table(tables)
    if "interval" in out:
        iv = out["interval"]
        lines.append(intervals.mean_line(iv))
    if "queue_wait_s" in out:
        q, held = out["queue_wait_s"], out["in_engine_mean"]
        lines.append("queue wait (arrival to the first step that schedules it, inside TTFT): "
                     f"mean {1e3 * q['mean']:.2f} ms, p90 {1e3 * q['p90']:.2f} ms, p99 {1e3 * q['p99']:.2f} ms; "
                     f"in the engine on average {held['running']:.1f} running, {held['waiting']:.1f} waiting")
    per_user = out["tokens_per_s_per_user"]
    lines += ["", ("the replay's throughput (not a bound): " if "replay" in out else "")
              + f"output tokens/s per GPU {out['tokens_per_s_per_gpu']:.1f}, per user "
              f"{'-' if per_user is None else f'{per_user:.1f}'}; {_rate(out['requests_per_s'])} requests/s",
              f"{out['steps']} steps, mean batch per step {out['mean_batch']:.1f}, {out['preemptions']} preemptions, "
              f"KV cache {out['kv_cache_tokens']:,} tokens per device ({_cache_share(out)})"]
    latency = out["parameters"].get("request_latency_s", 0.0)
    if latency and out.get("closed_loop"):
        lines.append(f"the front end's latency, {1e3 * latency:.3g} ms, is in TTFT and E2E but not in the clients' "
                     "cycle (the calibration fits it so): the engine gets a client's next request the moment its "
                     f"last one finishes there, so requests/s is about C / (E2E - {1e3 * latency:.3g} ms), not "
                     "C / E2E (exactly so for fixed lengths over a long run)")
    elif latency:
        lines.append(f"the front end's latency, {1e3 * latency:.3g} ms, is in TTFT and E2E (--request-latency "
                     "replaces it)")
    if "backlog" in out:
        o = out["backlog"]
        lines.append(f"not a steady state: over the second half of the arrivals ({o['span_s']:.3g} s) "
                     f"{_rate(o['completed_per_s'])} requests/s completed of {o['arrived_per_s']:.4g}/s arrived, so the "
                     "requests in the engine grow (an overload, or a run too short to fill the engine) and every "
                     "latency above depends on --requests")
    return "\n".join(lines) + "\n"


def _cache_share(out: dict) -> str:
    """Where the simulator's KV cache is sized from: the engine's memory fraction (serve's
    bound gives the cache all the memory the weights leave)."""
    kv, name = out["kv_cache"], out["engine"]["name"]
    return (f"{name} gives weights and KV cache {kv['fraction']:g} of the memory; serve's figure gives the cache "
            "all that the weights leave" if kv["of"] == "total" else
            f"{name} gives the KV cache {kv['fraction']:g} of the memory the weights leave; serve's figure all of it")


def cmd_calibrate(args, stdout, stderr, specs_root) -> int:
    """`rooflinec calibrate --simulate`: the simulator's parameters fitted to measured rows."""

    cases = fitting.prepare(rows.read(args.csv), Specs(specs_root), unique_prompts_of(
        args.unique_prompts, workload.BENCHMARK_UNIQUE_PROMPTS), recipes.load(args.recipe))
    try:
        doc = validation.calibrate(cases, os.path.basename(args.csv), Specs(specs_root),
                                   None if getattr(args, "quiet", False) else Progress(stderr))
    except ValueError as exc:   # located at the header, as calibrate without the simulator says it
        raise SpecError([Problem(args.csv, 1, 1, "(rows)", f"{exc}; `rooflinec validate` "
                                 "says why each row is not predicted")]) from None
    code = output.write_command_file(args.out, "# rooflinec serving-simulator calibration, written by "
                                     "`rooflinec calibrate --simulate`.\n" + yaml.safe_dump(doc, sort_keys=False, width=120),
                                     stdout)
    aggregated = [c for c in cases if c.row.mode != "disagg"]
    say_unfitted(args, stderr, len(aggregated), sum(c.predicted for c in aggregated))
    return code


def say_unfitted(args, stderr, rows: int, fitted: int) -> None:
    """One line on standard error (unless -q) where some aggregated rows were not fitted."""
    if fitted < rows and not getattr(args, "quiet", False):
        stderr.write(f"fitted on {fitted} of {rows} aggregated rows; `rooflinec validate` says why each "
                     "other row is not predicted\n")


COMMANDS = {"simulate": cmd_simulate}
