"""Answers without a study file: list the catalog, import a config.json, serve a model.

`register(sub, streams)` adds the commands to the CLI's parser; each command is
`fn(args, stdout, stderr) -> int`; a mistake on the command line raises UsageError.
"""

from __future__ import annotations

import argparse
import json
import os

from rooflinec.spec import catalog
from rooflinec.base.roofline import ridge
from rooflinec.base.errors import DeviceLacks, RooflineError, SpecError, UsageError, one_line
from rooflinec.cli.summary import CONTEXT, PROMPT
from rooflinec.spec.load import DTYPE_BYTES, Study, load_hardware, load_model
from rooflinec.base.quantities import gib, seconds, si, sig
from rooflinec.model import params, quant
from rooflinec.cost.evaluate import number
from rooflinec.model.symbol_table import model_values
from rooflinec.spec import hfimport, load as spec
from rooflinec.cli.output import check_file_target, write_file
from rooflinec.spec.validate import closest, schema
from rooflinec import analyses
from rooflinec.base import yamlio
from rooflinec.cost import parallel
from rooflinec.cli import summary as answers
from rooflinec.cli import calibrated, configurations as table
from rooflinec.cost.deployment import Deployment
from rooflinec.cost.workbench import Workbench
from rooflinec.cli import speculation
from rooflinec.cli import storage as weight_flags
from rooflinec.serving import engines, routed_bound, speculative, stepcost
from rooflinec.serving.serving_model import Unpredictable

SERVE_EPILOG = """\
MODEL is a catalog name (rooflinec models), a model spec YAML, or a Hugging Face config.json
(or the model folder holding one). The figures are roofline lower bounds for the ideal variant:
decode tokens/s per batch at the context, time to first token for one prompt, memory fit
(weights and KV cache), and what bounds each step. The bounds use the conventions of the
least work a correct kernel does, printed with them: the masked half of the prompt's scores
skipped, logits for the last prompt token only, one fused QKV GEMM, biases in the GEMM epilogue.

With --tp N the model is split over N devices (Megatron-LM tensor parallelism): memory is one
device's share of the weights and KV cache, a step is bounded by the larger of one device's
kernels and its collectives at the least time any correct algorithm takes (an all-reduce: its
payload once over the link plus one latency; an engine may overlap them with compute, so the
bound takes max(kernels, collectives), not their sum), and tokens/s are the group's, as the N
devices step together.
--weights and --kv-cache store those tensors in their own formats. The GEMMs run by one rule,
the one plan and simulate use: at the weights' format where the device has a tensor peak for it,
else weight-only, dequantised into bf16 GEMMs (stated); --dtype overrides it (weight-only by
request: --weights fp8 --dtype bf16 is W8A16). fp8 GEMMs (W8A8) with an fp8 KV cache:
  rooflinec serve llama-3.1-70b --device h100-sxm --tp 4 --weights fp8 --kv-cache fp8
--weights takes one format per weight class too, as gpt-oss ships (MXFP4 routed experts, bf16
attention, router, embeddings and LM head); the GEMMs follow the attention weights' format, and
a class whose format they do not run on (fp4 on Hopper) is read at its bytes and dequantised
into them (weight-only, stated):
  rooflinec serve gpt-oss-120b --device h100-sxm --weights experts=mxfp4,attention=bf16

Tokens/s per user is one sequence's rate (1 / step), per GPU the group's over its devices.
--device and --tp take lists: one table row per (device, tp, batch), and where the weights
do not fit the smallest tp that does is named:
  rooflinec serve llama-3.1-70b --device h100-sxm --tp 1,2,4,8
Calibrated TPOT and predicted TTFT, each with its 80% interval, come beside the bounds: the
serving model with the shipped calibration's efficiencies on a device it was fitted on (said so;
--engine picks its engine), or with --calibration FILE's on any device. The efficiencies are
fitted on measured TPOT only: TTFT is the same model's; the intervals are the calibration's
left-out residuals (a file without them: TPOT's in-sample band alone, TTFT none). The
steady-state TTFT omits the queueing behind other prompts that the measured TTFTs include, so
its point can lie below its band: said so (rooflinec simulate replays the queue). The prediction assumes requests
of --prompt tokens generating --osl tokens (default 2 x (context - prompt), so the mean context
is --context), printed with it; a short output makes every step prefill more prompt tokens per
decoded one. A batch outside the concurrency the calibration measured is marked extrapolated.
--out FILE draws tokens/s per GPU against batch (SVG).
""" + speculation.EPILOG + """  rooflinec serve llama-3.1-8b --device h100-sxm --draft llama-3.2-1b --draft-k 4 --acceptance 0.7
"""


def register(sub, streams, parents=()) -> None:
    d = sub.add_parser("devices", help="list the installed hardware catalog", streams=streams)
    d.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    m = sub.add_parser("models", help="list the installed model catalog", streams=streams)
    m.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    i = sub.add_parser("import", help="a Hugging Face config.json to a model spec YAML",
                       streams=streams, parents=parents)
    i.add_argument("config", metavar="CONFIG", help="a config.json, or a model folder holding one")
    i.add_argument("--hf-id", metavar="ID", help="the Hugging Face repo id, e.g. "
                   "meta-llama/Llama-3.1-8B (written as hf_id and used as the name)")
    i.add_argument("--out", metavar="FILE", help="write the spec here (default: standard output)")
    i.add_argument("-v", "--verbose", action="store_true",
                   help="list every field not modelled, located, with what it leaves out "
                        "(default: one summary line; the spec's head comments list them too)")
    s = sub.add_parser("serve", help="decode tokens/s, time to first token and memory fit, "
                       "in the terminal", streams=streams, epilog=SERVE_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("model", metavar="MODEL", help="a catalog model (rooflinec models), a model spec "
                   "YAML, or a Hugging Face config.json or the folder holding one")
    s.add_argument("--device", required=True, metavar="LIST",
                   help="a catalog device (rooflinec devices) or a hardware spec YAML; several "
                        "separated by commas, one row each")
    s.add_argument("--batch", default="1,8,64", metavar="LIST", help="batch sizes (default: 1,8,64)")
    s.add_argument("--context", default=CONTEXT, type=int, metavar="S",
                   help="tokens in the KV cache while decoding (default: 4096)")
    s.add_argument("--prompt", default=PROMPT, type=int, metavar="S",
                   help="prompt tokens for the time to first token (default: 2048)")
    s.add_argument("--osl", default=None, type=int, metavar="N",
                   help="output tokens per request for the calibrated prediction (default: "
                        "2 x (context - prompt), so the requests' mean context is --context, "
                        "the bounds' step; each step then prefills prompt / osl prompt tokens "
                        "per decoding sequence)")
    s.add_argument("--dtype", default=None, metavar="DTYPE",
                   help="compute dtype: the GEMMs' tensor peak, and the activations' and KV cache's format "
                        f"where not given otherwise (default: {weight_flags.GEMM_RULE}; activations and KV "
                        "cache bf16). --weights fp8 alone runs fp8 GEMMs where the device has their peak "
                        "(W8A8), as plan and simulate do; --weights fp8 --dtype bf16 is weight-only (W8A16)")
    s.add_argument("--weights", metavar="FORMAT", help=weight_flags.HELP)
    s.add_argument("--kv-cache", metavar="FORMAT", help="KV cache's storage format, e.g. fp8 "
                   "(default: --dtype where given, else bf16)")
    s.add_argument("--tp", default="1", metavar="LIST",
                   help="tensor-parallel degrees, e.g. 1,2,4,8: one row each (default: 1)")
    s.add_argument("--attention-dp", default=1, type=int, metavar="N", help="attention data-parallel "
                   "ranks, each with its own batch and KV cache; batch and memory are one rank's (default: 1)")
    s.add_argument("--ep", default=1, type=int, metavar="N", help="expert-parallel degree: the routed "
                   "experts over N ranks; tp x attention-dp = moe-tp x ep (default: 1)")
    s.add_argument("--moe-tp", default=None, type=int, metavar="N", help="each routed expert's width "
                   "over N devices (default: tp x attention-dp / ep)")
    s.add_argument("--json", action="store_true", help="the serving section as JSON")
    s.add_argument("--calibration", metavar="FILE", help="calibration YAML (rooflinec calibrate) "
                   "for predicted TPOT and TTFT beside the bounds (default: the shipped one, "
                   "where it was fitted on the device)")
    s.add_argument("--engine", metavar="NAME", help="the calibration's engine, e.g. trtllm, vllm "
                   "(default: the one with the most runs on the device)")
    s.add_argument("--out", metavar="FILE", help="also write an SVG chart of tokens/s per GPU "
                   "against batch, one line per configuration; with --speculate or --draft, the "
                   "speedup over plain decoding against batch, where it stops paying ringed")
    speculation.add_arguments(s)
    for command in (d, m, i, s):   # a UsageError prints the command's own usage line
        command.set_defaults(parser=command)


# --- the catalog ----------------------------------------------------------------------

def _devices() -> list:
    return [load_hardware(catalog.path("hardware", n)) for n in catalog.names("hardware")]


def _models() -> list:
    return [load_model(catalog.path("models", n)) for n in catalog.names("models")]


def cmd_devices(args, stdout, stderr) -> int:
    rows = [{"name": d.key, "device": d.name, "year": d.year, "tensor_flops": d.tensor,
             "vector_flops": d.vector, "bandwidth": d.bandwidth, "capacity": d.capacity,
             "source": d.source} for d in _devices()]
    if args.json:
        stdout.write(json.dumps({"devices": rows}, indent=1) + "\n")
        return 0
    table = [("name", "16-bit tensor", "bandwidth", "memory", "ridge", "source")]
    for r in rows:
        dtype = next((t for t in ("bf16", "fp16") if t in r["tensor_flops"]), None)
        peak = r["tensor_flops"][dtype] if dtype else None
        table.append((r["name"], f"{si(peak, 'FLOP/s')} {dtype}" if peak else "—",
                      si(r["bandwidth"], "B/s"), gib(r["capacity"]),
                      f"{ridge(peak, r['bandwidth']):.0f} FLOP/B" if peak else "—", r["source"]))
    stdout.write(_catalog_table(table))
    return 0


def cmd_models(args, stdout, stderr) -> int:
    rows = []
    for m in _models():
        total = int(number(params.count(m).total, model_values(m)))
        rows.append({"name": m.key, "model": m.name, "params": total, "d_model": m.d_model,
                     "layers": m.n_layers, "heads": m.n_heads, "kv_heads": m.n_kv_heads,
                     "vocab": m.vocab, "source": m.source})
    if args.json:
        stdout.write(json.dumps({"models": rows}, indent=1) + "\n")
        return 0
    table = [("name", "parameters", "d_model", "layers", "heads/kv", "source")]
    table += [(r["name"], f"{r['params']:,}", str(r["d_model"]), str(r["layers"]),
               f"{r['heads']}/{r['kv_heads']}", r["source"]) for r in rows]
    stdout.write(_catalog_table(table))
    return 0


TERMINAL = 100   # columns the catalog tables fit; --json keeps the full names and sources


def cited(source: str, width: int) -> str:
    """A source as its cited name: the first clause, before any ';' or parenthesis, cut to
    `width` characters at a word's end (ending in '…' where cut)."""
    name = source.split(";")[0].split(" (")[0].strip()
    if len(name) <= width:
        return name
    cut = name[:width - 1]
    if name[width - 1] != " " and " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,") + "…"


def _catalog_table(rows) -> str:
    """`rows` (header first, the source last) fitted to TERMINAL columns: the source shortened
    to its cited name in what the other columns leave. The display names are in --json."""
    others = sum(max(len(one_line(str(r[i]))) for r in rows) for i in range(len(rows[0]) - 1))
    width = max(TERMINAL - others - 2 * (len(rows[0]) - 1), len("source"))
    return _table([rows[0]] + [(*r[:-1], cited(r[-1], width)) for r in rows[1:]])


def _table(rows) -> str:
    """Aligned columns; a spec's text with its control characters spelled out (one_line), so a
    name cannot move the cursor or break a row."""
    return table.columns(rows)


# --- import ---------------------------------------------------------------------------

def cmd_import(args, stdout, stderr) -> int:
    if args.out is not None:
        check_file_target(args.out)
    # the spec is checked as a study would load it (its problems located in the config), and its parameters counted
    model, text, notes = hfimport.load(args.config, args.hf_id)
    if not args.quiet:
        lines = [str(n) for n in notes] if args.verbose else [hfimport.summary(notes)] if notes else []
        for line in lines:
            stderr.write(f"{line}\n")
    count = int(number(params.count(model).total, model_values(model)))
    head, rest = text.split("\n", 1)
    text = f"{head}\n# {count:,} parameters, as rooflinec counts this spec\n{rest}"
    if args.out is None:
        stdout.write(text)
        return 0
    try:
        write_file(args.out, text)
    except OSError as exc:
        raise RooflineError(f"{args.out}: cannot write the spec: {exc.strerror or exc}") from None
    stdout.write(one_line(f"wrote {args.out}: {model.name}, {count:,} parameters") + "\n")
    return 0


# --- serve ----------------------------------------------------------------------------

def _model(ref: str):
    """A catalog name, a model spec YAML, or a config.json (or its folder), as a Model."""
    if ref.endswith((".yaml", ".yml")) and os.path.isfile(ref):
        return spec.load_model(ref)
    if os.path.isfile(hfimport.config_file(ref)):
        return hfimport.load(ref)[0]
    if catalog.path("models", ref):
        return spec.load_model(catalog.path("models", ref))
    raise UsageError(_unknown("model", ref, catalog.names("models")) +
                 "; or give a model spec YAML or a config.json")


def _max_context_at(ref: str) -> tuple[str, tuple]:
    """The file MODEL names and where its max_context lives: a model spec's `max_context`, a
    config.json's `max_position_embeddings` (the field the importer maps)."""
    if ref.endswith((".yaml", ".yml")) and os.path.isfile(ref):
        return ref, ("max_context",)
    if os.path.isfile(hfimport.config_file(ref)):
        return hfimport.config_file(ref), ("max_position_embeddings",)
    return catalog.path("models", ref), ("max_context",)


def context_warning(ref: str, model, longest: int, flags: str = "--context or --prompt") -> str:
    """A located warning when `longest` tokens (the context or the prompt) run past the model
    spec's max_context ('' otherwise): past it the positions were never trained."""
    if not model.max_context or longest <= model.max_context:
        return ""
    file, path = _max_context_at(ref)
    problem = yamlio.load(file).problem(path, f"{longest:,} tokens ({flags}) run past the "
                                              f"model's max_context, {model.max_context:,}: the figures "
                                              "price the work, not a trained position")
    return f"warning: {problem}"


def _device(ref: str):
    if ref.endswith((".yaml", ".yml")) and os.path.isfile(ref):
        return spec.load_hardware(ref)
    if catalog.path("hardware", ref):
        return spec.load_hardware(catalog.path("hardware", ref))
    raise UsageError(_unknown("device", ref, catalog.names("hardware")) + "; or give a hardware spec YAML")


def _unknown(kind: str, ref: str, names) -> str:
    return f"{'--device' if kind == 'device' else 'MODEL'}: no {kind} '{ref}'; " \
           f"{closest(ref, names)}catalog {kind}s: {', '.join(names)}"


def _counts(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise UsageError(f"{flag}: expected whole numbers >= 1 separated by commas, got '{text}'")
    return values


def _study(model, device, dtype: str, batches, context: int, prompt: int, tp: int = 1,
           quantization: dict | None = None, layout: dict | None = None) -> Study:
    where = yamlio.Located("<command line>", {}, {}, {})
    options = {"batch": batches, "contexts": [context], "prompts": [prompt]}
    return Study(file="<command line>", stem="serve", title="serve", model=model, devices=(device,),
                 dtype=dtype, conventions={}, doc=where, analyses={"serving": options},
                 parallel={"tp": tp, **(layout or {})}, quantization=dict(quantization or {}))


def serving_section(model, device, dtype: str, batches, context: int, prompt: int,
                    tp: int = 1, quantization: dict | None = None, layout: dict | None = None) -> dict:
    """The adapter: the study's serving analysis, run on one model and one device (through
    analyses.run, so the study's budgets (points and expression sizes) and finite numbers hold here too)."""
    return analyses.run(_study(model, device, dtype, batches, context, prompt, tp, quantization, layout))[0]


TP_TRIED = (1, 2, 4, 8, 16, 32, 64)


def smallest_tp(model, device, dtype: str, context: int, quantization: dict) -> int | None:
    """The smallest tensor-parallel degree (of TP_TRIED, those that divide the model) whose
    share of the weights and one sequence's KV cache at `context` fit one device."""
    for tp in TP_TRIED:
        try:
            parallel.check(model, tp)
        except parallel.Unshardable:
            continue
        if Workbench(_study(model, device, dtype, [1], context, context, tp, quantization)).fits(device, 1, context):
            return tp
    return None


def compute(model, device, dtype: str | None, storage: dict) -> tuple[str, dict]:
    """`serve`'s compute dtype on `device` and every class's format: --dtype where given (each
    class not stored otherwise in it), else the GEMMs' dtype by the deployment's rule
    (`Deployment.gemm_dtype`: the weights' format where the device has its peak, else weight-only
    bf16), activations and KV cache bf16 unless stored otherwise."""
    if dtype is not None:
        return dtype, storage
    gemm = Deployment(model, device, weights=storage.get("weights", "bf16"), experts=storage.get("experts")).gemm_dtype
    defaults = {"weights": "bf16", "kv_cache": "bf16", quant.ACTIVATIONS: "bf16"}
    return gemm, {**{cls: f for cls, f in defaults.items() if f != gemm}, **storage}


def _storage(args) -> dict:
    """--weights (one format, or one per weight class) and --kv-cache as a study's
    `quantization`, each a storage format it accepts."""
    kv = {} if args.kv_cache is None else {"kv_cache": weight_flags.check_format(args.kv_cache, "--kv-cache")}
    return {**weight_flags.weights(args.weights), **kv}


def _layout(args) -> dict:
    """--attention-dp, --ep and --moe-tp as the study's `parallel` keys (those past 1)."""
    given = {"attention_dp": args.attention_dp, "ep": args.ep, "moe_tp": args.moe_tp}
    for key, value in given.items():
        if value is not None and value < 1:
            raise UsageError(f"--{key.replace('_', '-')}: expected a whole number >= 1, got {value}")
    return {key: value for key, value in given.items() if value is not None and (value > 1 or key == "moe_tp")}


def _check_tp(model, tp: int, layout: dict) -> None:
    dep = Deployment(model, tp=tp, attention_dp=layout.get("attention_dp", 1),
                     moe_tp=layout.get("moe_tp"), moe_ep=layout.get("ep", 1))
    try:
        dep.check()
    except parallel.Unshardable as exc:
        msg = str(exc)
        flag = (next((f"--{k.replace('_', '-')}" for k in ("moe_tp", "attention_dp", "ep") if k in layout), "--ep")
                if "must cover" in msg else "--moe-tp" if "(moe_tp)" in msg else "--ep" if "expert-parallel" in msg
                else "--attention-dp" if "attention data-parallel" in msg else "--tp")
        raise UsageError(f"{flag}: {exc}; pick a degree that divides them") from None


CLASS_NAMES = {"kv_cache": "KV cache", "experts": "routed experts"}


def _setup(dtype: str, tp: int, stored: dict) -> str:
    """How the model runs, for the summary's heading: dtype, stored formats, devices."""
    names = {**CLASS_NAMES, **({"weights": "attention and dense weights"} if "experts" in stored else {})}
    order = ("weights", "experts", "kv_cache")
    return dtype + "".join(f", {names.get(cls, cls)} {stored[cls]}" for cls in order
                           if cls in stored and (stored[cls] != dtype or "experts" in stored))


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"--device: expected a device name or hardware spec YAML, got '{text}'")
    return list(dict.fromkeys(names))


CHART_BATCHES = [2 ** k for k in range(15)]    # --out's batch axis: 1 to 16,384


def cmd_serve(args, stdout, stderr) -> int:
    batches, tps = _counts(args.batch, "--batch"), sorted(set(_counts(args.tp, "--tp")))
    given = (("--context", args.context), ("--prompt", args.prompt)) + ((("--osl", args.osl),) if args.osl is not None else ())
    for flag, value in given:
        if value < 1:
            raise UsageError(f"{flag}: expected a whole number >= 1, got {value}")
    if args.dtype is not None and args.dtype not in DTYPE_BYTES:
        raise UsageError(f"--dtype: unknown dtype '{args.dtype}'; choose from {', '.join(DTYPE_BYTES)}")
    if args.out is not None:
        check_file_target(args.out)
    if args.engine is not None:    # the calibration's engine: a catalog name, checked as simulate checks it
        engines.check(args.engine, files=False)
    storage = _storage(args)
    model, devices = _model(args.model), [_device(n) for n in _names(args.device)]
    if "experts" in storage and getattr(model, "moe", None) is None:
        raise UsageError(f"--weights experts=: {model.name} has no routed experts; give one format for its weights")
    warned = context_warning(args.model, model, max(args.context, args.prompt))
    if warned:
        stderr.write(warned + "\n")
    layout = _layout(args)
    for tp in tps:
        _check_tp(model, tp, layout)
    runs = {device.key: compute(model, device, args.dtype, storage) for device in devices}   # (dtype, storage)
    for name, device in zip(_names(args.device), devices):
        dtype = runs[device.key][0]
        if device.peak("matrix", dtype) is None:
            only = (f"; give --dtype {next(iter(device.tensor))} to compute in it" if args.dtype is None and device.tensor
                    else f"; for weights in {dtype} dequantised into bf16 GEMMs (weight-only): --weights {dtype} "
                         f"--dtype bf16, or --weights {dtype} alone"
                    if dtype in weight_flags.formats() and device.peak("matrix", "bf16") is not None else "")
            raise RooflineError(f"{name}: device '{device.key}' lists no tensor peak for "
                                f"{dtype}; it has: {', '.join(device.tensor)}{only}")
    asked = sorted(set(batches + (CHART_BATCHES if args.out else [])))
    configs, skipped, several = [], [], len(devices) * len(tps) > 1
    for device in devices:
        choice = calibrated.choose(args.calibration, device.key, args.engine)
        dtype, stored = runs[device.key]
        for tp in tps:
            try:
                section = serving_section(model, device, dtype, asked, args.context, args.prompt, tp, stored,
                                          layout)
            except SpecError as exc:   # one configuration of several: a row says why, the rest run
                if not several:
                    raise
                skipped.append(f"{device.key} at tp {tp}: not evaluated: "
                               + "; ".join(p.message for p in exc.problems))
                continue
            section = least_work(section, model, device, tp, dtype, stored, layout)
            top = section["crossovers"][0]["devices"][0]   # the chart's solid line ends at the largest batch that fits
            drawn = sorted([(row["batch"], row["devices"][0]["tokens_per_s"], row["devices"][0]["fits"])
                            for row in section["steps"]]
                           + ([(top["max_batch"], top["at_max_batch"]["tokens_per_s"], True)] if top["at_max_batch"] else []))
            section["steps"] = [row for row in section["steps"] if row["batch"] in batches]
            predicted = _predicted(args, model, device, tp, dtype, stored, section, choice)
            configs.append(table.Configuration(
                device, tp, section, predicted, choice if isinstance(choice, str) else choice.says(),
                _smallest(model, device, args, dtype, stored, section), drawn, crossing(model, device, tp),
                workload(args) if any("why" not in p for p in predicted.values()) else ""))
    if not configs:
        raise RooflineError("no configuration could be evaluated:\n" + "\n".join(skipped))
    draft = speculation.draft_of(args, _model)
    if draft is not None and several:
        raise UsageError(f"{'--draft' if args.draft else '--speculate'}: speculation is priced for one "
                         "--device and one --tp at a time")
    first = runs[configs[0].device.key]
    spec = _speculation(model, configs[0].device, configs[0].tp, args, *first, draft, batches)
    if args.out and spec:   # with a draft: where speculation stops paying as the batch grows
        drawn = _speculation(model, configs[0].device, configs[0].tp, args, *first, draft,
                             sorted(set(batches + CHART_BATCHES)))
        write_file(args.out, speculation.chart(model.name, drawn))
    elif args.out:
        write_file(args.out, table.chart(model.name, args.context, configs))
    if args.json:
        docs = [_document(model, c, args, *runs[c.device.key]) | layout | ({"speculation": _plain(spec)} if spec else {})
                for c in configs]
        stdout.write(json.dumps({"configurations": docs, "not_evaluated": skipped} if several else docs[0],
                                indent=1) + "\n")
    elif not several:
        c = configs[0]
        dtype, stored = runs[c.device.key]
        stdout.write(summary(model, c.device, _setup(dtype, c.tp, stored), c.section, dtype, c,
                             _dequantisation(model, dtype, stored)))
        stdout.write(speculation.text(spec) if spec else "")
    else:
        kinds = dict.fromkeys((runs[c.device.key][0], tuple(sorted(runs[c.device.key][1].items()))) for c in configs)
        setup = ("; ".join(f"{key}: {_setup(d, 1, st)}" for key, (d, st) in runs.items()) if len(kinds) > 1
                 else _setup(*runs[configs[0].device.key][:1], 1, runs[configs[0].device.key][1]))
        dq = "; ".join(dict.fromkeys(q for q in (_dequantisation(model, *runs[c.device.key]) for c in configs) if q))
        stdout.write(table.text(model.name, setup, args.context, args.prompt, configs)
                     + (f"{dq}\n" if dq else "") + "".join(one_line(line) + "\n" for line in skipped))
    if args.out and not args.quiet:
        stderr.write(one_line(f"wrote {args.out}") + "\n")
    return 0


def least_work(section: dict, model, device, tp: int, dtype: str, storage: dict, layout: dict) -> dict:
    """For a mixture of experts (plain tp, attention DP or expert parallelism), the section's
    step and TTFT bounds at the least-work routing (serving/routed_bound.py); where the step model cannot price the
    deployment, the section's figures said to be expectations under uniform routing."""
    dep = Deployment(model, device, tp, storage.get("weights", dtype), storage.get("kv_cache", dtype),
                     attention_dp=layout.get("attention_dp", 1), moe_tp=layout.get("moe_tp"),
                     moe_ep=layout.get("ep", 1), experts=storage.get("experts"), compute=dtype)
    if getattr(model, "moe", None) is None:   # dense: the section's step is the least work already
        return section
    try:
        return routed_bound.section(section, stepcost.build(dep), DTYPE_BYTES[dtype])
    except (Unpredictable, DeviceLacks) as exc:
        return {**section, "expected": f"the step and TTFT figures are expectations under uniform routing, "
                                       f"not bounds (the least-work routing's step cannot be priced: {exc})"}


def crossing(model, device, tp: int) -> str:
    """'' while the tp group stays inside one scale-up domain; else that it leaves it and the
    link its collectives take (`Workbench.link` chooses; the step's collectives are timed on it)."""
    domain = device.link_domain
    if tp == 1 or domain is None or tp <= domain:
        return ""
    try:
        link = Workbench(_study(model, device, "bf16", [1], 1, 1, tp)).link(device, tp, "the tp collectives")
    except DeviceLacks:
        return ""
    return (f"the tp group of {tp} crosses the {device.link or 'scale-up'} domain of {domain} devices: "
            f"its collectives run over {link.name or 'the scale-out network'}")


def _dequantisation(model, dtype: str, stored: dict) -> str:
    """The weight-only GEMMs' statement for --weights the --dtype peak does not run on."""
    weights = stored.get("weights", dtype)
    return Deployment(model, weights=weights, experts=stored.get("experts"), compute=dtype).dequantisation()


def _predicted(args, model, device, tp: int, dtype: str, storage: dict, section: dict, choice) -> dict:
    """Calibrated predictions per printed batch that fits and at the largest batch that fits (a
    batch past memory has no prediction: the serving model would run it with a queue)."""
    if isinstance(choice, str):
        return {}
    weights, kv = storage.get("weights", dtype), storage.get("kv_cache", dtype)
    top = section["crossovers"][0]["devices"][0]["max_batch"]
    points = sorted({row["batch"] for row in section["steps"] if row["batch"] <= top} | ({top} if top >= 1 else set()))
    if not points:    # no batch fits: the serving model's reason at one sequence, said as such
        why = calibrated.predict(choice, calibrated.run(model, device, weights, kv, tp, args.prompt, args.context,
                                                        1, _layout(args), storage.get("experts"), args.osl))
        return {1: why if "why" in why else {"why": "not one sequence fits beside the weights"}}
    return {b: calibrated.predict(choice, calibrated.run(model, device, weights, kv, tp, args.prompt,
                                                         args.context, b, _layout(args),
                                                         storage.get("experts"), args.osl)) for b in points}


def workload(args) -> str:
    """The requests the calibrated prediction assumes, and what that means for its steady
    step, in one line ('' where it predicts nothing for lack of an output length)."""
    osl = calibrated.output_length(args.prompt, args.context, args.osl)
    if isinstance(osl, str):
        return ""
    how = ("--osl" if args.osl is not None
           else f"2 x (context - prompt) by default, so their mean context is --context {args.context:,}; --osl sets it")
    return (f"calibrated for requests of {args.prompt:,} prompt and {osl:,} output tokens ({how}): "
            f"mean context {args.prompt + osl / 2:,.0f}; each steady step prefills prompt / osl = "
            f"{args.prompt / osl:.3g} prompt tokens per sequence it decodes, so a short output costs TPOT")


def _smallest(model, device, args, dtype: str, storage: dict, section: dict):
    """When the weights (or one sequence) do not fit: the smallest tp that would, else None."""
    if section["crossovers"][0]["devices"][0]["max_batch"] >= 1:
        return None
    return {"tp": smallest_tp(model, device, dtype, args.context, storage), "tried": list(TP_TRIED)}


def _document(model, c, args, dtype: str, storage: dict) -> dict:
    osl = calibrated.output_length(args.prompt, args.context, args.osl)
    return {"model": model.name, "device": c.device.key, "dtype": dtype, "tp": c.tp,
            "quantization": storage, "dequantisation": _dequantisation(model, dtype, storage) or None,
            "context": args.context, "prompt": args.prompt,
            "summary": _plain(_answers(c.device, dtype, c.section)),
            "serving": _plain(c.section), "smallest_tp": c.smallest, "crossing": c.crossing or None,
            "calibrated": {"note": c.note, "prompt": args.prompt,
                           "osl": osl if isinstance(osl, int) else None,
                           "points": [{"batch": b, **p} for b, p in c.predicted.items()]}}


def _speculation(model, device, tp: int, args, dtype: str, storage: dict, draft, batches) -> dict | None:
    """The speculation table (serving/speculative.py), on the simulator's step model."""
    if draft is None:
        return None
    try:
        target = speculative.target_model(stepcost.Deployment(model, device, tp, storage.get("weights", dtype),
                                                              storage.get("kv_cache", dtype)))
        return speculative.table(target, draft, batches, args.context)
    except Unpredictable as exc:
        raise RooflineError(f"{'--draft' if args.draft else '--speculate'}: cannot price speculation: {exc}") from None


def _plain(value):
    """JSON-ready: sympy expressions as text."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):     # a tuple as the report's JSON writes it: a list
        return [_plain(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def _answers(device, dtype: str, section: dict) -> dict:
    """The report's summary of this one device (`summary` owns it)."""
    dev = {"key": device.key, "name": device.name,
           "ridge_matrix": ridge(device.peak("matrix", dtype), device.bandwidth)}
    return answers.answers(section, [dev], variant=section.get("variant"))


def turning(section: dict, crossover: dict) -> str:
    """Where decode at the crossover's context turns compute-bound, said as the table says it:
    each printed step's and the largest fitting batch's `bound` (the step's one owner of its
    binding term) naming the batches the collectives bind, the kernels' crossing beside them."""
    c, context = crossover["devices"][0], crossover["context"]
    bounds = {row["batch"]: row["devices"][0]["bound"] for row in section["steps"] if row["context"] == context}
    if c["at_max_batch"]:
        bounds[c["max_batch"]] = c["at_max_batch"]["bound"]
    bound_by = sorted(b for b, term in bounds.items() if term == "collectives")
    kernels = (f"compute-bound from batch {c['first']:,}" if c["first"] is not None
               else "memory-bound at every batch")
    if not bound_by:
        return f"decode {'turns' if c['first'] is not None else 'stays'} {kernels} (step bound, overlapped)"
    kernels = f"{'turn' if c['first'] is not None else 'stay'} {kernels}"
    return (f"decode is collectives-bound at batch {', '.join(f'{b:,}' for b in bound_by)} (its collectives, "
            f"outlast the kernels); its kernels {kernels} (overlapped)")


def summary(model, device, setup: str, section: dict, dtype: str | None = None, config=None,
            dequantisation: str = "") -> str:
    """The serving section as the few lines a model report opens with (`summary` owns them),
    and the decode batches asked for; `setup` heads them (the dtype, formats, devices);
    `config` (a configurations.Configuration) adds its calibrated predictions; a weight-only
    run's `dequantisation` is stated under the heading."""
    dtype = dtype or setup
    lines = [answers.text(model.name, setup, _answers(device, dtype, section)).rstrip("\n")]
    if dequantisation:
        lines.append(f"  {dequantisation}")
    if config is not None and config.crossing:
        lines.append(f"  {config.crossing}")
    for key in ("routing", "expected"):
        if section.get(key):
            lines.append(f"  routed experts: {section[key]}")
    if section.get("conventions"):
        lines.append("  conventions of these bounds (the least work a correct kernel does): "
                     + "; ".join(f"{c['name']}: {c['choice']}" for c in section["conventions"]))
    lines.append(f"decode at context {section['steps'][0]['context']:,}:")
    head = ("batch", "tokens/s per user", "tokens/s per GPU", "step", "bound", "memory needed", "fits")
    predicted = config.predicted if config else {}
    rows = [head + (table.calibrated_head(predicted.values()) if predicted else ())]
    for row in section["steps"]:
        d = row["devices"][0]
        user, gpu = table.rates(d["tokens_per_s"], row["batch"], section)
        rows.append((str(row["batch"]), sig(user), sig(gpu), seconds(d["time_s"]), d["bound"],
                     gib(row["memory_needed"]), "yes" if d["fits"] else "no")
                    + (table.calibrated_cells(predicted.get(row["batch"])) if predicted else ()))
    lines += ["  " + line for line in table.columns(rows).splitlines()]
    for row in section["crossovers"]:
        c = row["devices"][0]
        fit = (f"the largest batch that fits at context {row['context']:,} is {c['max_batch']:,}"
               if c["max_batch"] >= 1 or config is None else f"at context {row['context']:,} {table.does_not_fit(config)}")
        lines.append(f"{turning(section, row)}; {fit}")
        top = predicted.get(c["max_batch"])
        if top and "why" not in top and c["max_batch"] not in {r["batch"] for r in section["steps"]}:
            tpot, ttft = table.calibrated_cells(top)
            lines.append(f"  calibrated at batch {c['max_batch']:,}: TPOT {tpot}, TTFT {ttft}"
                         + (" (extrapolated)" if "extrapolated" in top else ""))
    if config is not None:
        whys = sorted({p["why"] for p in predicted.values() if "why" in p})
        lines += [one_line(config.note)] + ([f"  {one_line(config.assumed)}"] if config.assumed else []) \
            + [f"  not predicted: {w}" for w in whys] + [f"  {line}" for line in table.caveats(config)]
    return "\n".join(lines) + "\n"


COMMANDS = {"devices": cmd_devices, "models": cmd_models, "import": cmd_import, "serve": cmd_serve}
