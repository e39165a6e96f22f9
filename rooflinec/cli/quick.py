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
from rooflinec.base.errors import RooflineError, UsageError, one_line
from rooflinec.cli.summary import CONTEXT, PROMPT
from rooflinec.spec.load import DTYPE_BYTES, Study, load_hardware, load_model
from rooflinec.base.quantities import gib, seconds, si, sig
from rooflinec.model import params
from rooflinec.cost.evaluate import number
from rooflinec.model.symbol_table import model_values
from rooflinec.spec import hfimport, load as spec
from rooflinec.cli.output import check_file_target, write_file
from rooflinec.spec.validate import closest, schema
from rooflinec import analyses
from rooflinec.base import yamlio
from rooflinec.cost import parallel
from rooflinec.cost.deployment import Deployment
from rooflinec.cli import summary as answers
from rooflinec.cli import speculation
from rooflinec.serving import speculative, stepcost
from rooflinec.serving.serving_model import Unpredictable

SERVE_EPILOG = """\
MODEL is a catalog name (rooflinec models), a model spec YAML, or a Hugging Face config.json
(or the model folder holding one). The figures are roofline lower bounds for the ideal variant:
decode tokens/s per batch at the context, time to first token for one prompt, memory fit
(weights and KV cache), and what bounds each step. The bounds use the conventions of the
least work a correct kernel does, printed with them: the masked half of the prompt's scores
skipped, logits for the last prompt token only, one fused QKV GEMM, biases in the GEMM epilogue.

With --tp N the model is split over N devices (Megatron-LM tensor parallelism): memory is one
device's share of the weights and KV cache, a step is one device's kernels followed by its
all-reduces (ring model, not overlapping compute), and tokens/s are the group's, as the N
devices step together.
--weights and --kv-cache store those tensors in another format than --dtype (weight-only or
KV-cache quantization; --dtype stays the compute dtype), e.g.
  rooflinec serve llama-3.1-70b --device h100-sxm --tp 4 --weights fp8 --kv-cache fp8
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
    s.add_argument("model", metavar="MODEL")
    s.add_argument("--device", required=True, metavar="NAME",
                   help="a catalog device (rooflinec devices) or a hardware spec YAML")
    s.add_argument("--batch", default="1,8,64", metavar="LIST", help="batch sizes (default: 1,8,64)")
    s.add_argument("--context", default=CONTEXT, type=int, metavar="S",
                   help="tokens in the KV cache while decoding (default: 4096)")
    s.add_argument("--prompt", default=PROMPT, type=int, metavar="S",
                   help="prompt tokens for the time to first token (default: 2048)")
    s.add_argument("--dtype", default="bf16", metavar="DTYPE",
                   help="compute dtype: the tensor peak and the activations (default: bf16)")
    s.add_argument("--weights", metavar="FORMAT", help="weights' storage format, e.g. fp8, int4, "
                   "nvfp4 (default: --dtype)")
    s.add_argument("--kv-cache", metavar="FORMAT", help="KV cache's storage format, e.g. fp8 "
                   "(default: --dtype)")
    s.add_argument("--tp", default=1, type=int, metavar="N",
                   help="tensor-parallel degree; figures are one of N devices' (default: 1)")
    s.add_argument("--attention-dp", default=1, type=int, metavar="N", help="attention data-parallel "
                   "ranks, each with its own batch and KV cache; batch and memory are one rank's (default: 1)")
    s.add_argument("--ep", default=1, type=int, metavar="N", help="expert-parallel degree: the routed "
                   "experts over N ranks; tp x attention-dp = moe-tp x ep (default: 1)")
    s.add_argument("--moe-tp", default=None, type=int, metavar="N", help="each routed expert's width "
                   "over N devices (default: tp x attention-dp / ep)")
    s.add_argument("--json", action="store_true", help="the serving section as JSON")
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
    table = [("name", "device", "16-bit tensor", "bandwidth", "memory", "ridge", "source")]
    for r in rows:
        dtype = next((t for t in ("bf16", "fp16") if t in r["tensor_flops"]), None)
        peak = r["tensor_flops"][dtype] if dtype else None
        table.append((r["name"], r["device"], f"{si(peak, 'FLOP/s')} {dtype}" if peak else "—",
                      si(r["bandwidth"], "B/s"), gib(r["capacity"]),
                      f"{ridge(peak, r['bandwidth']):.0f} FLOP/B" if peak else "—", r["source"]))
    stdout.write(_table(table))
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
    table = [("name", "model", "parameters", "d_model", "layers", "heads/kv", "source")]
    table += [(r["name"], r["model"], f"{r['params']:,}", str(r["d_model"]), str(r["layers"]),
               f"{r['heads']}/{r['kv_heads']}", r["source"]) for r in rows]
    stdout.write(_table(table))
    return 0


def _table(rows) -> str:
    """Aligned columns; a spec's text with its control characters spelled out (one_line), so a
    name cannot move the cursor or break a row."""
    rows = [[one_line(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)


# --- import ---------------------------------------------------------------------------

def cmd_import(args, stdout, stderr) -> int:
    if args.out is not None:
        check_file_target(args.out)
    text, notes = hfimport.convert(args.config, args.hf_id)
    if not args.quiet:
        lines = [str(n) for n in notes] if args.verbose else [hfimport.summary(notes)] if notes else []
        for line in lines:
            stderr.write(f"{line}\n")
    # the spec is checked as a study would load it, and its parameters counted
    model = spec.load_model(args.out or hfimport.config_file(args.config) + " (imported)", text)
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
        text, _ = hfimport.convert(ref)
        return spec.load_model(hfimport.config_file(ref) + " (imported)", text)
    if catalog.path("models", ref):
        return spec.load_model(catalog.path("models", ref))
    raise UsageError(_unknown("model", ref, catalog.names("models")) +
                 "; or give a model spec YAML or a config.json")


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


def serving_section(model, device, dtype: str, batches, context: int, prompt: int,
                    tp: int = 1, quantization: dict | None = None, parallel: dict | None = None) -> dict:
    """The adapter: the study's serving analysis, run on one model and one device (through
    analyses.run, so the study's budgets (points and expression sizes) and finite numbers hold here too)."""
    where = yamlio.Located("<command line>", {}, {}, {})
    options = {"batch": batches, "contexts": [context], "prompts": [prompt]}
    study = Study(file="<command line>", stem="serve", title="serve", model=model, devices=(device,),
                  dtype=dtype, conventions={}, doc=where, analyses={"serving": options},
                  parallel={"tp": tp, **(parallel or {})}, quantization=dict(quantization or {}))
    return analyses.run(study)[0]


def _storage(args) -> dict:
    """--weights and --kv-cache as a study's `quantization`, each a storage format it accepts."""
    formats = schema("study")["$defs"]["storage"]["enum"]
    out = {}
    for flag, cls, value in (("--weights", "weights", args.weights), ("--kv-cache", "kv_cache", args.kv_cache)):
        if value is None:
            continue
        if value not in formats:
            raise UsageError(f"{flag}: unknown format '{value}'; choose from {', '.join(formats)}")
        out[cls] = value
    return out


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


def _setup(dtype: str, tp: int, storage: dict) -> str:
    """How the model runs, for the summary's heading: dtype, stored formats, devices."""
    stored = "".join(f", {'KV cache' if cls == 'kv_cache' else cls} {fmt}" for cls, fmt in storage.items())
    return dtype + stored


def cmd_serve(args, stdout, stderr) -> int:
    batches = _counts(args.batch, "--batch")
    for flag, value in (("--context", args.context), ("--prompt", args.prompt)):
        if value < 1:
            raise UsageError(f"{flag}: expected a whole number >= 1, got {value}")
    if args.dtype not in DTYPE_BYTES:
        raise UsageError(f"--dtype: unknown dtype '{args.dtype}'; choose from {', '.join(DTYPE_BYTES)}")
    storage = _storage(args)
    model, device = _model(args.model), _device(args.device)
    if args.tp < 1:
        raise UsageError(f"--tp: expected a whole number >= 1, got {args.tp}")
    layout = _layout(args)
    _check_tp(model, args.tp, layout)
    if device.peak("matrix", args.dtype) is None:
        raise RooflineError(f"{args.device}: device '{device.key}' lists no tensor peak for "
                            f"{args.dtype}; it has: {', '.join(device.tensor)}")
    draft = speculation.draft_of(args, _model)
    section = serving_section(model, device, args.dtype, batches, args.context, args.prompt,
                              args.tp, storage, layout)
    spec = _speculation(model, device, args, storage, draft, batches)
    if args.json:
        stdout.write(json.dumps({"model": model.name, "device": device.key, "dtype": args.dtype,
                                 "tp": args.tp, **layout, "quantization": storage,
                                 "context": args.context, "prompt": args.prompt,
                                 "summary": _plain(_answers(device, args.dtype, section)),
                                 "serving": _plain(section),
                                 **({"speculation": _plain(spec)} if spec else {})}, indent=1) + "\n")
    else:
        stdout.write(summary(model, device, _setup(args.dtype, args.tp, storage), section, args.dtype))
        stdout.write(speculation.text(spec) if spec else "")
    return 0


def _speculation(model, device, args, storage: dict, draft, batches) -> dict | None:
    """The speculation table (serving/speculative.py), on the simulator's step model."""
    if draft is None:
        return None
    try:
        target = speculative.target_model(stepcost.Deployment(model, device, args.tp, storage.get("weights", args.dtype),
                                                    storage.get("kv_cache", args.dtype)))
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


def summary(model, device, setup: str, section: dict, dtype: str | None = None) -> str:
    """The serving section as the few lines a model report opens with (`summary` owns them),
    and the decode batches asked for; `setup` heads them (the dtype, formats, devices)."""
    dtype = dtype or setup
    lines = [answers.text(model.name, setup, _answers(device, dtype, section)).rstrip("\n")]
    if section.get("conventions"):
        lines.append("  conventions of these bounds (the least work a correct kernel does): "
                     + "; ".join(f"{c['name']}: {c['choice']}" for c in section["conventions"]))
    lines.append(f"decode at context {section['steps'][0]['context']:,}:")
    table = [("batch", "tokens/s", "step", "bound", "memory needed", "fits")]
    for row in section["steps"]:
        d = row["devices"][0]
        table.append((str(row["batch"]), sig(d["tokens_per_s"]), seconds(d["time_s"]), d["bound"],
                      gib(row["memory_needed"]), "yes" if d["fits"] else "no"))
    lines += ["  " + line for line in _table(table).splitlines()]
    for row in section["crossovers"]:
        c = row["devices"][0]
        turn = (f"decode turns compute-bound from batch {c['first']:,}" if c["first"] is not None
                else "decode stays memory-bound at every batch")
        lines.append(f"{turn} (step bound, overlapped); the largest batch that fits at context "
                     f"{row['context']:,} is {c['max_batch']:,}")
    longest = max(section["steps"][0]["context"], section["prefill"][0]["prompt"])
    if model.max_context and longest > model.max_context:
        lines.append(f"note: {longest:,} tokens is past the model's max_context, {model.max_context:,}")
    return "\n".join(lines) + "\n"


COMMANDS = {"devices": cmd_devices, "models": cmd_models, "import": cmd_import, "serve": cmd_serve}
