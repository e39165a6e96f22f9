"""`rooflinec plan`: the best deployment per device under a latency target, the Pareto frontier
of tokens/s per GPU against tokens/s per user, cost and energy per token; or, with --solve,
the smallest bandwidth, peak, link or memory that meets a target (cost/inverse.py)."""

from __future__ import annotations

import argparse
import json
import math
import os

import numpy as np
import sympy as sp

from rooflinec.base.errors import DeviceLacks, RooflineError, UsageError
from rooflinec.base.quantities import gib
from rooflinec.base.units import QuantityError, parse_quantity
from rooflinec.cli import quick, storage
from rooflinec.cli.output import check_file_target, write_file
from rooflinec.cli.simulate import add_request_latency, calibration_of
from rooflinec.cost import inverse
from rooflinec.cost.deployment import Deployment
from rooflinec.cost.parallel import Unshardable
from rooflinec.cost.workbench import Workbench
from rooflinec.serving import calibration, engines, intervals, plan, plan_cost, plan_step
from rooflinec.serving.plan_chart import pareto_svg
from rooflinec.serving import serving_model as sm
from rooflinec.spec import catalog
from rooflinec.spec.load import DTYPE_BYTES

EPILOG = """\
Every configuration is (device, deployment, weights' and KV cache's formats, batch): B
sequences in flight per pipeline stage (per attention-DP rank) at isl prompt and osl output
tokens, in steady state. Deployments: tp x pp, and for a mixture of experts attention DP and
EP (tp x dp = moe_tp x ep; the busiest expert device's step, tokens/s per GPU over every
rank); and disaggregated: P prefill workers of tp_p and D decode workers of tp_d (coprime
ratios within --gpus; TTFT = prefill + KV transfer + the decode worker's admission (1.5 decode steps), TPOT from the decode pool, the prefill
pool's rate must keep B sequences on each decode worker), on one frontier with the others.
TPOT and TTFT are predictions (the calibrated step model of `simulate`, at the steady mix);
the TPOT bound (overlapped step rule at the datasheet peaks) prunes first: a configuration
whose bound misses the SLO cannot meet it. Costs need a price ($/GPU-hour): the catalog's
table states only prices a public source gives; --price adds or replaces one. Energy per
token is a prediction, at the device's TDP: the board's power limit x the predicted GPU-seconds
per token (not a bound: a bound on energy would need a lower bound on throughput).

examples:
  rooflinec plan llama-3.1-70b --slo "ttft<=2s,tpot<=50ms" --devices h100-sxm,h200-sxm --gpus 8
  rooflinec plan mixtral-8x7b --slo "ttft<=1s,tpot<=30ms" --devices h200-sxm --gpus 8   # dp, ep, disagg
  rooflinec plan llama-3.1-8b --slo "tpot<=20ms" --isl 2048 --osl 256 --price h200-sxm=3.5 --out front.svg
  rooflinec plan llama-3.1-8b --slo "ttft<=1s,tpot<=30ms" --devices h100-sxm --gpus 4 --simulate trtllm
  rooflinec plan qwen3-30b-a3b --slo "tpot<=50ms" --devices h100-sxm --weights fp8 --weights experts=mxfp4,attention=bf16
  rooflinec plan llama-3.1-70b --solve bandwidth --device h100-sxm --tp 8 --batch 64 --context 8192 --slo "tpot<=20ms"
"""

DEFAULT_WEIGHTS = ("bf16", "fp8", "nvfp4")
# for a mixture of experts also per class (attention and dense weights, routed experts): gpt-oss's
# checkpoint (bf16 attention, mxfp4 experts) and fp8 attention beside nvfp4 experts
DEFAULT_MIXED = ({"weights": "bf16", "experts": "mxfp4"}, {"weights": "fp8", "experts": "nvfp4"})
DEFAULT_KV = ("bf16", "fp8")


def register(sub, streams, parents=()) -> None:
    s = sub.add_parser("plan", help="search deployments under a latency target: the best per device, "
                       "the Pareto frontier, cost and energy; --solve for the hardware that meets it",
                       streams=streams, parents=parents, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.set_defaults(parser=s)
    s.add_argument("model", metavar="MODEL", help="a catalog model, a model spec YAML or a config.json")
    s.add_argument("--slo", required=True, metavar="TARGETS",
                   help="comma-separated targets, e.g. 'ttft<=2s,tpot<=50ms' (ttft, tpot)")
    s.add_argument("--devices", metavar="A,B", help="catalog devices or hardware YAMLs (default: the whole catalog)")
    s.add_argument("--gpus", type=int, default=8, metavar="N", help="most GPUs one deployment uses (default: 8)")
    s.add_argument("--isl", type=int, default=1024, metavar="N", help="prompt tokens per request (default: 1024)")
    s.add_argument("--osl", type=int, default=256, metavar="N", help="output tokens per request (default: 256)")
    s.add_argument("--concurrency", metavar="LIST|LO-HI",
                   help="sequences in flight per stage to search: '1,8,64' or '1-1024' (default: 1 to 1024, "
                        "four per doubling)")
    s.add_argument("--weights", metavar="LIST", action="append",
                   help=f"weight formats to try: a list (default: {','.join(DEFAULT_WEIGHTS)}, and for a mixture of "
                   "experts bf16 attention with mxfp4 experts and fp8 with nvfp4), or one choice per class as "
                   "`serve --weights` takes it, experts=mxfp4,attention=bf16; repeat the flag for several; "
                   f"{storage.GEMM_RULE} (the dequantisation FLOPs counted, the bytes at the format), as serve and simulate")
    s.add_argument("--kv-cache", metavar="LIST", help=f"KV-cache formats to try (default: {','.join(DEFAULT_KV)})")
    s.add_argument("--engine", default="", metavar="NAME",
                   help="price the plan with the calibration's fit of this engine on each device (its "
                        "(device, engine, kind of model) group where the calibration has it, else as "
                        "`simulate` resolves a group it lacks); default: the pooled fit of every device and "
                        "engine, which may price faster than the engine that will serve. The output names the fit that priced each device")
    s.add_argument("--calibration", metavar="FILE", help="simulator calibration (default: the shipped one)")
    add_request_latency(s)
    s.add_argument("--simulate", metavar="ENGINE", help="replay the frontier's single-group configurations and disaggregated pairs in the "
                   "serving simulator under an engine's scheduler (trtllm, vllm, sglang or a YAML); a budget "
                   "of simulated requests, not of time")
    s.add_argument("--price", action="append", metavar="DEVICE=USD", help="$ per GPU-hour, e.g. h100-sxm=2.0")
    s.add_argument("--prices", metavar="FILE", help="a price table YAML (the catalog's prices/default.yaml format)")
    s.add_argument("--aggregated", action="store_true",
                   help="aggregated deployments only (no disaggregated prefill:decode pools)")
    s.add_argument("--top", type=int, default=1, metavar="N",
                   help="rows per device in 'best per device' (default: 1, the best; N > 1 adds the next-best "
                        "deployments that are faster per user than every row above them)")
    s.add_argument("--out", metavar="FILE.svg", help="write the Pareto chart")
    s.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    inv = s.add_argument_group("inverse design (--solve)")
    inv.add_argument("--solve", choices=inverse.KNOBS, help="the smallest value meeting --slo's tpot "
                     "(memory: the smallest capacity holding the batch)")
    inv.add_argument("--device", metavar="NAME", help="the device whose other figures stay")
    inv.add_argument("--tp", type=int, default=1, metavar="N",
                     help="tensor-parallel degree the solved step runs at (default: 1)")
    inv.add_argument("--batch", type=int, metavar="B", help="sequences decoded per step")
    inv.add_argument("--context", type=int, metavar="S", help="tokens in each sequence's context")


def parse_slo(text: str) -> plan.Slo:
    found = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("<=")
        name = name.strip().lower()
        if not sep or name not in ("ttft", "tpot") or name in found:
            raise UsageError(f"--slo: '{part}': expected ttft<=TIME or tpot<=TIME, each once, e.g. 'ttft<=2s,tpot<=50ms'")
        if _bare_number(value):
            raise UsageError(f"--slo: '{part}': {value.strip()} has no unit; give a time with its unit "
                             f"(us, ms, s), e.g. '{name}<={value.strip()}ms'")
        try:
            found[name] = float(parse_quantity(value.strip(), "time"))
        except QuantityError as exc:
            raise UsageError(f"--slo: '{part}': {exc}") from None
        if not found[name] > 0:
            raise UsageError(f"--slo: '{part}': the target must be positive")
    if not found:
        raise UsageError("--slo: no target; e.g. 'ttft<=2s,tpot<=50ms'")
    return plan.Slo(found.get("ttft", math.inf), found.get("tpot", math.inf))


def _bare_number(text: str) -> bool:
    """A target written without its unit (`tpot<=50`): refused rather than read as seconds."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _batches(text: str | None) -> tuple:
    if text is None:
        return tuple(sorted({round(2 ** (i / 4)) for i in range(41)}))
    try:
        if "-" in text:
            lo, hi = (int(v) for v in text.split("-"))
            values = sorted({round(lo * (hi / lo) ** (i / 40)) for i in range(41)} | {lo, hi})
        else:
            values = sorted({int(v) for v in text.split(",")})
    except (ValueError, ZeroDivisionError):
        values = []
    if not values or values[0] < 1 or values[-1] > 10 ** 6:
        raise UsageError(f"--concurrency: '{text}': expected a list (1,8,64) or a range (1-1024) of counts from 1 to 10^6")
    return tuple(values)


def _formats(text: str | None, default: tuple, flag: str) -> tuple:
    names = tuple(dict.fromkeys(v.strip() for v in text.split(","))) if text else default
    for n in names:
        if n not in DTYPE_BYTES:
            raise UsageError(f"{flag}: unknown format '{n}'; known: {', '.join(DTYPE_BYTES)}")
    return names


def _weight_choices(given: list | None, model) -> list[dict]:
    """--weights as quantization keys, one dict per choice: each flag a list of formats (one
    choice each) or one per-class choice (`cli/storage.py`'s parser, as `serve` reads it)."""
    moe = getattr(model, "moe", None) is not None
    if not given:
        return [{"weights": w} for w in DEFAULT_WEIGHTS] + (list(DEFAULT_MIXED) if moe else [])
    out = []
    for text in given:
        if "=" in text:
            choice = storage.weights(text)
            if "experts" in choice and not moe:
                raise UsageError(f"--weights {text}: {model.name} has no routed experts; give one format for its weights")
            out.append({"weights": choice.get("weights", "bf16"), **choice})
        else:
            out += [{"weights": storage.check_format(w, "--weights")} for w in dict.fromkeys(v.strip() for v in text.split(","))]
    return out


def _positive(name, v):
    if v is None or v < 1:
        raise UsageError(f"--{name}: expected a count of at least 1")
    return v


def cmd_plan(args, stdout, stderr) -> int:
    slo = parse_slo(args.slo)
    if args.out:
        check_file_target(args.out)
    model = quick._model(args.model)
    if args.solve:
        if args.request_latency is not None:
            raise UsageError("--request-latency: --solve solves the decode step, which has no front-end latency; "
                             "leave out one of them")
        return _solve(args, model, slo, stdout)
    for name in ("gpus", "isl", "osl", "top"):
        _positive(name, getattr(args, name))
    if args.gpus > 4096:
        raise UsageError("--gpus: at most 4096")
    work = plan.Workload(args.isl, args.osl, _batches(args.concurrency))
    refs = args.devices.split(",") if args.devices else catalog.names("hardware")
    try:
        devices = [quick._device(r.strip()) for r in dict.fromkeys(refs)]
    except UsageError as exc:
        raise UsageError(str(exc).replace("--device:", "--devices:", 1)) from None
    weights, kv = _weight_choices(args.weights, model), _formats(args.kv_cache, DEFAULT_KV, "--kv-cache")
    table = calibration_of(args)
    engine = engines.key_of(args.engine or args.simulate) if args.engine or args.simulate else ""
    prices = plan_cost.load(plan_cost.default_file())
    if args.prices:
        prices.update(plan_cost.load(args.prices))
    prices.update(plan_cost.parse_flags(args.price))
    kind = calibration.model_kind(model)
    res = plan.search(model, devices, args.gpus, work, slo, lambda d: table.of(d.key, engine, kind),
                      lambda d: [plan.Formats(w["weights"], k, w.get("experts")) for w in weights for k in kv],
                      disaggregated=not args.aggregated)
    out = document(model, devices, work, slo, res, prices, args, engine,
                   table.source or os.path.basename(args.calibration or calibration.shipped()),
                   _band_of(table, model, engine, kind))
    out["calibration"]["priced_by"] = {d.key: _priced_by(table, d.key, engine, kind) for d in devices}
    if table.latency_set:
        out["calibration"]["request_latency_s"] = table.default.request_latency_s
    if args.simulate:
        policy = engines.load(args.simulate)
        rows = [{**r, "isl": work.isl, "osl": work.osl} for r in out["frontier"]]
        sims = plan.simulate_points(model, {d.key: d for d in devices}, rows, policy, lambda d: table.of(d.key, engine, kind))
        for r, sim in zip(out["frontier"], sims):
            r["simulated"] = sim
    if args.out:
        try:
            write_file(args.out, _chart(out))
        except OSError as exc:
            raise RooflineError(f"{args.out}: cannot write: {exc.strerror or exc}") from None
    out.pop("_front")
    out.pop("_table")
    stdout.write(json.dumps(out, indent=1) + "\n" if args.json else text(out))
    return 0


def _priced_by(table, device: str, engine: str, kind: str) -> str:
    """Which of the calibration's fits prices `device`'s deployments (`Table.fit`'s words)."""
    if not engine:
        return "the pooled fit of every device and engine (no --engine named)"
    return table.fit(device, engine, kind)[1]


def _band_of(table, model, engine: str, kind: str):
    """(device, deployment) -> the interval's band and what it is (`intervals.band_for`), or
    None where the calibration has no intervals. The band was measured on the simulator's
    replay of benchmark rows; the plan's steady-state figure is not that replay, and layouts the
    calibration never held out (pp, dp, ep, disaggregated pools) are outside what it measured."""
    if not table.intervals:
        return lambda dev, dep: None

    def band(dev, dep):
        fitted = (dev, engine, kind) in table.groups or (dev, engine) in table.groups
        new = intervals.new_in(table.intervals.get("calibrated"), model.hf_id, dep["tp"], engine or "(pooled)", fitted)
        q, which = intervals.band_for(table.intervals, new)
        return (q and {w: q[w] for w in table.banded}), which
    return band


def _interval(band, tpot: float, ttft: float, tpot_bound: float) -> dict | None:
    """The band's interval about each prediction; TPOT's never below the step's bound."""
    if band is None or band[0] is None:
        return None if band is None else {"band": band[1]}
    q, which = band
    return {"band": which, **{f"{w}_s": [float(v) for v in intervals.interval(y, *q[w], floor)]
                              for w, y, floor in (("tpot", tpot, tpot_bound), ("ttft", ttft, 0.0)) if w in q},
            **calibration.unbanded(tuple(q))}


def _row(model, t: dict, i: int, devices: dict, prices: dict, isl: int, osl: int, band=lambda dev, dep: None) -> dict:
    dev = devices[t["device"][i]]
    per_gpu = float(t["per_gpu"][i])
    price = prices.get(dev.key)
    dep = {k: t[k][i] if k == "mode" else int(t[k][i]) for k in plan.DEPLOYMENT}
    return {
        "device": dev.key, "deployment": dep, "label": plan.label(dep), "mode": dep["mode"], "gpus": int(t["gpus"][i]),
        "weights": t["weights"][i], "experts": t["experts"][i] or None, "kv_cache": t["kv_cache"][i],
        "gemm": plan_step.compute_of(plan_step.deployment_of(model, dev, dep, t["weights"][i], t["kv_cache"][i],
                                                             t["experts"][i] or None)),
        "batch": int(t["batch"][i]),
        "prediction": {"tpot_s": float(t["tpot_s"][i]), "ttft_s": float(t["ttft_s"][i]),
                       "tokens_per_s_per_gpu": per_gpu, "tokens_per_s_per_user": float(t["per_user"][i]),
                       "interval": _interval(band(dev.key, dep), float(t["tpot_s"][i]), float(t["ttft_s"][i]),
                                             float(t["tpot_bound_s"][i]))},
        "bound": {"tpot_s_at_least": float(t["tpot_bound_s"][i]),
                  "tokens_per_s_per_gpu_at_most": float(t["per_gpu_bound"][i])},
        "memory_per_gpu_bytes": float(t["memory_bytes"][i]),
        "cost": None if price is None else {
            "usd_per_gpu_hour": price.usd_per_gpu_hour, "price_source": price.source, "price_date": price.date,
            "usd_per_million_output_tokens": plan_cost.per_million(price.usd_per_gpu_hour, per_gpu),
            "usd_per_million_input_tokens": plan_cost.per_million(price.usd_per_gpu_hour, per_gpu * isl / osl)},
        "energy_per_output_token_j": None if dev.board_power is None else
            plan_cost.energy_per_token_j(dev.board_power, per_gpu),
    }


def document(model, devices, work, slo, res, prices, args, engine, calibration_source,
             band=lambda dev, dep: None) -> dict:
    t = res.table()
    by_key = {d.key: d for d in devices}
    n = len(t["per_gpu"])
    front = plan.pareto(t["per_gpu"], t["per_user"]) if n else np.array([], dtype=int)
    best = {}
    for dev in dict.fromkeys(t["device"]):
        idx = np.flatnonzero(t["device"] == dev)
        seen, rows, fastest = set(), [], -math.inf
        for i in idx[np.lexsort((t["gpus"][idx], -t["per_user"][idx], -t["per_gpu"][idx]))]:
            # one row per deployment, its best; a row an earlier one matches in tokens/s per user
            # too (pp stages that only replicate one GPU's rate) is left out
            key = tuple(t[k][i] for k in plan.DEPLOYMENT)
            if key not in seen and t["per_user"][i] > fastest and len(rows) < args.top:
                seen.add(key)
                fastest = t["per_user"][i]
                rows.append(_row(model, t, int(i), by_key, prices, work.isl, work.osl, band))
        best[dev] = rows
    return {
        "kind": "plan", "model": model.key, "workload": {"isl": work.isl, "osl": work.osl,
                                                          "batches": list(work.batches)},
        "slo": {"ttft_s": None if math.isinf(slo.ttft_s) else slo.ttft_s,
                "tpot_s": None if math.isinf(slo.tpot_s) else slo.tpot_s},
        "gpus_at_most": args.gpus, "axes": [a.name for a in plan.AXES], "aggregated_only": args.aggregated,
        "calibration": {"source": calibration_source, "engine": engine or "pooled"},
        "searched": res.searched, "feasible": n, "pruned": dict(sorted(res.pruned.items(), key=lambda kv: -kv[1])),
        "top_per_device": args.top, "best_per_device": best,
        "devices_meeting_nothing": [d.key for d in devices if d.key not in best],
        "frontier": [_row(model, t, int(i), by_key, prices, work.isl, work.osl, band) for i in front],
        "devices_without_price": sorted(d.key for d in devices if d.key not in prices),
        "devices_without_power": sorted(d.key for d in devices if d.board_power is None),
        "_front": [int(i) for i in front], "_table": t,
    }


def _chart(out: dict) -> str:
    front = np.array(out["_front"], dtype=int)
    labels = [f"{r['device']} {r['label']} {r['weights']} B{r['batch']}" for r in out["frontier"]]
    return pareto_svg(out["_table"], front, labels, f"{out['model']}: isl {out['workload']['isl']}, "
                      f"osl {out['workload']['osl']}, under the SLO")


def _cells(r: dict) -> list:
    p, c = r["prediction"], r["cost"]
    e = r["energy_per_output_token_j"]
    g = r["gemm"]
    gemm = g["gemm_dtype"] + (f"/{g['experts_gemm_dtype']}" if g["experts_gemm_dtype"] else "") + (" W-only" if g["weight_only"] else "")
    iv = p.get("interval") or {}
    span = lambda w, f: f"{iv[w][0] * 1e3:{f}}-{iv[w][1] * 1e3:{f}}" if w in iv else "-"   # noqa: E731
    return [r["device"], r["label"], plan.Formats(r["weights"], r["kv_cache"], r["experts"]).label(), gemm, str(r["batch"]),
            f"{p['tpot_s'] * 1e3:.2f}", span("tpot_s", ".2f"), f"{r['bound']['tpot_s_at_least'] * 1e3:.2f}",
            f"{p['ttft_s'] * 1e3:.0f}", span("ttft_s", ".0f"),
            f"{p['tokens_per_s_per_gpu']:.0f}", f"{r['bound']['tokens_per_s_per_gpu_at_most']:.0f}",
            f"{p['tokens_per_s_per_user']:.1f}",
            "-" if c is None else f"{c['usd_per_million_output_tokens']:.3f}",
            "-" if c is None else f"{c['usd_per_million_input_tokens']:.3f}", "-" if e is None else f"{e:.3f}"]


def _sim_cells(sim: dict) -> list:
    if "not_simulated" in sim or not sim:
        return ["-", "-", "-"]
    return [f"{sim['tpot_s']['mean'] * 1e3:.2f}", f"{sim['ttft_s']['mean'] * 1e3:.0f}", f"{sim['tokens_per_s_per_gpu']:.0f}"]


HEAD = ["device", "deployment", "w/kv", "GEMMs", "B", "TPOT ms", "80%", ">= bound", "TTFT ms", "80%", "tok/s/GPU", "<= bound",
        "tok/s/user", "$/M out", "$/M in", "J/tok"]


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) if i > 3 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]


PRUNED_SHOWN = 8   # reasons printed; --json lists every one


def _pruned(out: dict) -> list[str]:
    """The answer comes first: the pruning counts after it, the most frequent reasons only."""
    reasons = list(out["pruned"].items())
    if not reasons:
        return []
    lines = ["", "pruned, by reason:"] + [f"  {n:>8}  {why}" for why, n in reasons[:PRUNED_SHOWN]]
    rest = reasons[PRUNED_SHOWN:]
    if rest:
        lines.append(f"  {sum(n for _, n in rest):>8}  {len(rest)} more reasons (--json lists every one)")
    return lines


def _priced_by_line(priced_by: dict) -> str:
    """Each fit once, with the devices it priced (one fit for all: 'every device')."""
    devices = {}
    for dev, where in priced_by.items():
        devices.setdefault(where, []).append(dev)
    if len(devices) == 1:
        return f"{next(iter(devices))}, for every device"
    return "; ".join(f"{', '.join(devs)}: {where}" for where, devs in devices.items())


def _latency_said(cal: dict) -> str:
    latency = cal.get("request_latency_s")
    return "" if latency is None else f", request latency {latency!r} s from --request-latency"


def text(out: dict) -> str:
    slo = ", ".join(f"{k[:-2].upper()} <= {v * 1e3:g} ms" for k, v in out["slo"].items() if v is not None)
    lines = [f"{out['model']}: isl {out['workload']['isl']}, osl {out['workload']['osl']}; {slo}; "
             f"at most {out['gpus_at_most']} GPUs over {', '.join(out['axes'])}"
             + ("" if out["aggregated_only"] else ", aggregated and disaggregated (prefill : decode workers)"),
             f"TPOT, TTFT and tokens/s are predictions (calibration: {out['calibration']['source']}, "
             f"{out['calibration']['engine']}{_latency_said(out['calibration'])}); '>= bound' and '<= bound' are bounds (datasheet peaks, no overheads);",
             "priced by: " + _priced_by_line(out["calibration"]["priced_by"]),
             "J/tok: predicted, at the device's TDP (board power limit / predicted tokens/s per GPU; a prediction, not a bound); $ per million tokens from the price table ($/GPU-hour), blank where a device has no price", "",
             f"searched {out['searched']} configurations: {out['feasible']} meet the SLO "
             + (f"({out['searched'] - out['feasible']} pruned, why at the end)" if out["pruned"] else "(none pruned)")]
    if not out["feasible"]:
        return "\n".join(lines + ["", "no configuration meets the SLO"] + _pruned(out)) + "\n"
    top = out["top_per_device"]
    lines += ["", "best per device (most tokens/s per GPU):" if top == 1 else
              f"best {top} per device (most tokens/s per GPU; each next row faster per user):"]
    lines += _table([HEAD] + [_cells(r) for rows in out["best_per_device"].values() for r in rows])
    if out["devices_meeting_nothing"]:
        lines += [f"no configuration on {', '.join(out['devices_meeting_nothing'])} meets the SLO (why at the end)"]
    lines += ["", "Pareto frontier (tokens/s per GPU against tokens/s per user, predictions):"]
    simulated = any("simulated" in r for r in out["frontier"])
    lines += _table([HEAD + (["sim TPOT", "sim TTFT", "sim tok/s/GPU"] if simulated else [])]
                    + [_cells(r) + (_sim_cells(r.get("simulated", {})) if simulated else []) for r in out["frontier"]])
    if simulated:
        why = sorted({r["simulated"]["not_simulated"] for r in out["frontier"] if "not_simulated" in r.get("simulated", {})})
        lines += [f"sim: the serving simulator's closed loop at the same clients, {out['calibration']['engine']}'s "
                  "scheduler (a prediction)" + (f"; - where not simulated: {'; '.join(why)}" if why else "")]
    lines += _interval_notes(out)
    lines += _weight_only_notes(out)
    lines += _pruned(out)
    if out["devices_without_price"]:
        lines += ["", f"no price (give --price DEVICE=USD): {', '.join(out['devices_without_price'])}"]
    if out["devices_without_power"]:
        lines += [f"no board power in the hardware spec: {', '.join(out['devices_without_power'])}"]
    return "\n".join(lines) + "\n"


def _interval_notes(out: dict) -> list[str]:
    """What the 80% columns are: each band the rows took, once."""
    rows = [r for rows in out["best_per_device"].values() for r in rows] + out["frontier"]
    shown = [r["prediction"]["interval"] for r in rows if r["prediction"].get("interval")]
    said = dict.fromkeys(iv["band"] for iv in shown)
    unbanded = dict.fromkeys(iv["ttft_no_interval"] for iv in shown if "ttft_no_interval" in iv)
    if not said:
        return ["", "80%: - (the calibration carries no intervals)"]
    return ["", "80%: the calibration's 80% interval of the predicted TPOT and TTFT (a prediction, not a bound), "
                "measured on the simulator's replay of benchmark runs; the steady-state figures here are not "
                "that replay, and pp, dp, ep and disaggregated pools were never held out. Bands:"] + \
        [f"  {s}" for s in said] + [f"  TTFT: -, {why.removeprefix('no TTFT interval: ')}" for why in unbanded]


def _weight_only_notes(out: dict) -> list[str]:
    """What the rows marked W-only mean: each weight-only statement shown, once."""
    rows = [r for rows in out["best_per_device"].values() for r in rows] + out["frontier"]
    said = dict.fromkeys(r["gemm"]["weight_only"] for r in rows if r["gemm"]["weight_only"])
    return ["", "W-only: weights in a format the device has no tensor peak for (GEMMs: their dtype, "
                "/ the routed experts' where it differs):"] + \
        [f"  {s}" for s in said] if said else []


# --- inverse design ----------------------------------------------------------------------

UNITS = {"bandwidth": ("GB/s", 1e9), "peak": ("TFLOP/s", 1e12), "link": ("GB/s", 1e9), "memory": ("GiB", 2 ** 30)}


def _solve(args, model, slo, stdout) -> int:
    if not args.device:
        raise UsageError("--device: --solve needs the device whose other figures stay")
    for name in ("tp", "batch", "context"):
        _positive(name, getattr(args, name))
    device = quick._device(args.device)
    choices = _weight_choices(args.weights or ["bf16"], model)
    if len(choices) > 1:
        raise UsageError("--weights: --solve takes one choice (a format, or one per class: experts=mxfp4,attention=bf16)")
    weights, experts = choices[0]["weights"], choices[0].get("experts")
    kv = _formats(args.kv_cache, (weights,), "--kv-cache")[0]
    quick._check_tp(model, args.tp, {})   # a --tp that does not divide the model: a usage error, as serve's
    dep = Deployment(model, device, args.tp, weights, kv, experts=experts)
    unit, scale = UNITS[args.solve]
    head = {"kind": "inverse", "model": model.key, "device": device.key, "tp": args.tp, "batch": args.batch,
            "context": args.context, "weights": weights, "experts": experts, "kv_cache": kv, "knob": args.solve,
            "unit": unit, "gemm": plan_step.compute_of(dep)}
    try:
        if args.solve == "memory":
            need = inverse.memory_needed(model, args.tp, weights, kv, args.batch, args.context, experts)
            out = {**head, "value": float(need["total"]) / scale, "exact_bytes": str(need["total"]),
                   "derivation": f"capacity >= weights {gib(float(need['weights']))} + {args.batch} x KV cache "
                                 f"per sequence at S = {args.context} ({gib(float(need['kv_cache']))})",
                   "setter": max(("weights", "kv_cache"), key=lambda k: need[k]),
                   "device_has": device.capacity / scale}
        else:
            if math.isinf(slo.tpot_s):
                raise UsageError("--slo: --solve needs a tpot target, e.g. 'tpot<=20ms'")
            step = inverse.decode_step(serve_bench(model, device, args.tp, weights, kv, experts, args.batch, args.context),
                                       device, args.batch, args.context)
            s = inverse.solve(step, args.solve, slo.tpot_s)
            fixed, varying = s.piece.as_independent(inverse.X, as_Add=True)
            c = sp.simplify(varying * inverse.X)
            what = {"bandwidth": "bytes the whole step moves", "peak": "FLOPs of the step's tensor ops in "
                    f"{dep.gemm_dtype}", "link": "bytes the collectives send over the scale-up link"}[args.solve]
            rule = "max(compute, memory, collectives)"     # a bound's, whatever parallel.overlap says
            out = {**head, "target_tpot_s": slo.tpot_s, "value": float(s.value) / scale, "exact": str(s.value),
                   "rule": f"serve's step bound: {rule}, compute = sum FLOPs / peak, memory = sum bytes / "
                           "bandwidth over the whole step (overlapped), collectives at their least time",
                   "derivation": f"the binding branch, {s.setter}: a + c / x with a = {float(fixed) * 1e3:.4g} ms "
                                 f"(its terms not depending on x), c = {float(c):.6g} ({what}); "
                                 f"x = c / (target - a) = {float(s.value):.6g} (exact in --json's 'exact')",
                   **({"routing": MOE_ROUTING} if getattr(model, "moe", None) is not None else {}),
                   "shares_s": {k: float(v) for k, v in s.shares.items()}, "setter": s.setter,
                   "check": {"met_at_value": s.met_at, "missed_just_below": s.missed_below},
                   "device_has": _device_has(device, args.solve, dep.gemm_dtype) / scale}
    except (inverse.Unreachable, sm.Unpredictable, Unshardable, DeviceLacks, ValueError) as exc:
        raise RooflineError(f"cannot solve: {exc}") from None
    stdout.write(json.dumps(out, indent=1) + "\n" if args.json else _solve_text(out))
    return 0


MOE_ROUTING = ("a mixture of experts: the step solved is the serving section's program, its experts those "
               "uniform routing reads in expectation; serve prints the least-work routing's step "
               "(serving/routed_bound.py: fewer experts read), which meets the target at a smaller figure")


def serve_bench(model, device, tp: int, weights: str, kv: str, experts: str | None, batch: int, context: int):
    """The workbench of `serve`'s study for this deployment (quick.compute's dtype rule and
    stored formats, quick._study's study): the step the inverse solve inverts is serve's."""
    storage = {"weights": weights, "kv_cache": kv, **({"experts": experts} if experts else {})}
    dtype, stored = quick.compute(model, device, None, storage)
    return Workbench(quick._study(model, device, dtype, [batch], context, context, tp, stored))


def _device_has(device, knob, gemm_dtype):
    return {"bandwidth": device.bandwidth, "peak": device.peak("matrix", gemm_dtype) or 0,
            "link": device.link_bandwidth or 0}[knob]


def _solved(o: dict) -> str:
    """The answer beside the device's own figure; a memory capacity in GiB by the project's
    formatter (`quantities.gib`), as serve prints it."""
    if o["knob"] == "memory":
        scale = UNITS["memory"][1]
        return f"  {gib(o['value'] * scale)}  ({o['device']} has {gib(o['device_has'] * scale)})"
    return f"  {o['value']:.4g} {o['unit']}  ({o['device']} has {o['device_has']:.4g} {o['unit']})"


def _solve_text(o: dict) -> str:
    weights = o["weights"] + (f" attention and dense, {o['experts']} routed experts" if o["experts"] else "")
    lines = [f"{o['model']} on {o['tp']} x {o['device']} ({weights} weights, {o['kv_cache']} KV), "
             f"B = {o['batch']}, S = {o['context']}: the smallest {o['knob']} per GPU"
             + (f" for TPOT <= {o['target_tpot_s'] * 1e3:g} ms (serve's decode step bound at the datasheet's "
                "other figures, no calibration)" if "target_tpot_s" in o else " holding the batch"),
             _solved(o)] + [f"  {o[k]}" for k in ("rule", "routing") if k in o] + [f"  {o['derivation']}", f"  set by: {o['setter']}"]
    if o["gemm"]["weight_only"]:
        lines.insert(1, f"  {o['gemm']['weight_only']}")
    if "shares_s" in o:
        lines += [f"    {k:>16}: {v * 1e3:.3f} ms" for k, v in sorted(o["shares_s"].items(), key=lambda kv: -kv[1])]
        c = o["check"]
        lines += [f"  check by substitution: met at the value: {c['met_at_value']}; missed just below: {c['missed_just_below']}"]
    return "\n".join(lines) + "\n"


COMMANDS = {"plan": cmd_plan}
