"""The `measure` command's arguments and actions; torch loads only when one of them runs."""

from __future__ import annotations

import argparse
import os


from rooflinec.cli import output
from rooflinec.base.errors import RooflineError, UsageError
from rooflinec.cli import quick
from rooflinec.spec import load as spec
from rooflinec.measure import device, model, report, trace, trace_report
from rooflinec.spec.load import DTYPE_BYTES

EPILOG = """\
examples:
  rooflinec measure device --out hardware/this-machine.yaml          # time products and streams here
  rooflinec measure model gpt2 --device hardware/this-machine.yaml --phase decode
  rooflinec measure model config.json --device hardware/this-machine.yaml --phase prefill --context 512

Needs PyTorch: pip install -e '.[measure]'. Runs on a CUDA GPU when PyTorch sees one (--on picks).
"""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def register(sub, streams, parents=()) -> None:
    """The `measure device` and `measure model` parsers, under `sub`."""
    m = sub.add_parser("measure", help="time kernels here with PyTorch: calibrate the device, "
                       "or profile a model's ops against their rooflines", streams=streams,
                       parents=parents,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = m.add_subparsers(dest="what", required=True, metavar="WHAT")
    d = what.add_parser("device", help="time matrix products and memory streams; write a hardware spec",
                        streams=streams)
    d.set_defaults(parser=d)   # a UsageError prints this command's usage line
    d.add_argument("--out", default="hardware/this-machine.yaml", metavar="FILE",
                   help="hardware spec to write (default: hardware/this-machine.yaml)")
    d.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (seconds)")
    d.add_argument("--dtypes", metavar="LIST", help="comma-separated dtypes to time, e.g. fp32,bf16 "
                   "(default: fp32,bf16 on a CPU, fp32,bf16,fp16 on a GPU; --quick: fp32 on a CPU)")
    d.add_argument("--on", metavar="DEVICE", help="cpu or cuda (default: cuda when present)")
    d.add_argument("--threads", type=_positive, metavar="N", help="PyTorch CPU threads (default: "
                   "PyTorch's); measure models with the same number")
    o = what.add_parser("model", help="profile one step of a model; report each op beside its roofline",
                        streams=streams)
    o.set_defaults(parser=o)
    o.add_argument("model", metavar="MODEL", help="a catalog model (rooflinec models), a model spec YAML, "
                   "or a Hugging Face config.json (or its folder)")
    o.add_argument("--device", required=True, metavar="SPEC",
                   help="hardware spec whose roofline the ops are set against, e.g. the one "
                        "`measure device` wrote (or a catalog device)")
    o.add_argument("--phase", choices=("decode", "prefill"), default="decode",
                   help="the step profiled: one token per sequence after --context cached, or the prompt (default: decode)")
    o.add_argument("--batch", type=_positive, default=1, metavar="B", help="sequences in the step (default: 1)")
    o.add_argument("--context", type=_positive, default=128, metavar="S",
                   help="prompt length (prefill) or cached tokens (decode); default 128")
    o.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"),
                   help="the format the random weights and activations run in (default: fp32)")
    o.add_argument("--steps", type=_positive, default=5, help="profiled steps (default 5)")
    o.add_argument("--layers", type=_positive, metavar="L", help="run only L layers (default: all)")
    o.add_argument("--on", metavar="DEVICE", help="cpu or cuda (default: cuda when present)")
    o.add_argument("--threads", type=_positive, metavar="N", help="PyTorch CPU threads (default: "
                   "PyTorch's); use the number the device spec was measured with")
    o.add_argument("--impl", choices=("auto", "transformers", "reference"), default="auto",
                   help="what builds the model: Hugging Face transformers (GPT-2 layouts), "
                        "rooflinec's reference decoder (any dense decoder), or auto: "
                        "transformers where installed and able to, else the reference")
    o.add_argument("--out", default="measured", metavar="DIR",
                   help="output folder (default: measured): <model>-<phase>-b<B>-s<S>.md, .json "
                        "and .svg, e.g. gpt2-decode-b1-s128.md")


TRACE_EPILOG = """\
examples:
  rooflinec trace prof.json.gz --model qwen1.5-0.5b --device h100-sxm --phase prefill
  rooflinec trace prof.json.gz --study specs/qwen.yaml --phase decode --batch 8 --context 4096
  rooflinec trace vllm-rank0.json.gz --model gpt-oss-120b --device b200 --step all

Reads a PyTorch profiler (Kineto) Chrome-trace JSON, gzipped or not, as torch.profiler's
export_chrome_trace or tensorboard_trace_handler writes it; README says how to record one.
"""


def register_trace(sub, streams, parents=()) -> None:
    """The `trace` parser, under `sub`."""
    t = sub.add_parser("trace", help="set a profiler trace's kernels beside their rooflines",
                       streams=streams, parents=parents, epilog=TRACE_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.set_defaults(parser=t)
    t.add_argument("trace", metavar="TRACE", help="a Kineto / Chrome-trace JSON file (.json or .json.gz)")
    t.add_argument("--study", metavar="STUDY.yaml", help="the study whose model, first device "
                   "(or --device) and dtype the kernels are set against")
    t.add_argument("--model", metavar="MODEL", help="instead of --study: a catalog model, a model "
                   "spec YAML or a config.json")
    t.add_argument("--device", metavar="SPEC", help="a catalog device or hardware spec YAML "
                   "(with --study: one of its devices; default its first)")
    t.add_argument("--dtype", help="(default: the study's, else bf16)")
    t.add_argument("--phase", choices=("decode", "prefill"), default="prefill",
                   help="what the traced step ran (default: prefill)")
    t.add_argument("--step", metavar="N", help="ProfilerStep#N to read, or all: every kernel of "
                   "the trace as one step (default: the last step in the trace)")
    t.add_argument("--batch", type=_positive, metavar="B", help="sequences in the step (default: "
                   "from the trace's aten::embedding input shape, where recorded)")
    t.add_argument("--context", type=_positive, metavar="S", help="prompt tokens (prefill) or cached "
                   "tokens (decode); default in prefill: from the trace, as --batch")
    t.add_argument("--rules", metavar="FILE", help="more kernel-name rules, tried before the "
                   "shipped ones (rooflinec/measure/trace_rules.yaml shows the format)")
    t.add_argument("--out", default="traced", metavar="DIR",
                   help="output folder (default: traced): <model>-<phase>-b<B>-s<S>-trace.md, "
                        ".json and .svg")


def cmd_trace(args, stdout, stderr) -> int:
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out}: a file; --out names the folder the report goes to")
    model, device, dtype, quantization = _trace_setup(args)
    rules = trace.load_rules(args.rules)
    read = trace.read(args.trace, args.step)
    batch, context, source = _trace_workload(args, read)
    report = trace_report.build(read, model, device, dtype, args.phase, batch, context, rules,
                                quantization, source)
    say = lambda message: stderr.write(f"{message}\n")   # noqa: E731
    output.probe(args.out, say)
    stem = f"{model.key}-{args.phase}-b{batch}-s{context}-trace"
    for target in output.write_reports(args.out, {stem: trace_report.render(report, stem)}, say):
        stdout.write(f"wrote {target}\n")
    stdout.write(f"coverage {report['coverage']:.1%} of {report['kernel_s'] * 1e3:.4g} ms of kernels; "
                 f"{len(report['violations'])} group(s) under the roofline\n")
    return 0


def _trace_setup(args):
    """(model, device, dtype, quantization) from --study, or from --model and --device."""
    if bool(args.study) == bool(args.model):
        raise UsageError("give --study STUDY.yaml, or --model and --device")
    if args.study:
        study = spec.load_study(args.study)
        if study.model is None:
            raise UsageError(f"--study {args.study}: a study of devices or operators, with no model")
        devices = {d.key: d for d in study.devices}
        if args.device and args.device not in devices:
            raise UsageError(f"--device {args.device}: not a device of {args.study} "
                             f"({', '.join(devices)})")
        device = devices[args.device] if args.device else study.devices[0]
        return study.model, device, args.dtype or study.dtype, study.quantization
    if not args.device:
        raise UsageError("--model needs --device")
    device, dtype = quick._device(args.device), args.dtype or "bf16"
    if device.peak("matrix", dtype) is None:
        raise UsageError(f"--dtype {dtype}: {args.device} lists no tensor peak for it")
    return quick._model(args.model), device, dtype, {}


def _trace_workload(args, read) -> tuple[int, int, str]:
    """(B, S, where they came from): the flags, else the trace's embedding shape (prefill)."""
    shape = read.shapes
    batch = args.batch or (shape[0] if shape else None)
    context = args.context or (shape[1] if shape and args.phase == "prefill" else None)
    if batch is None or context is None:
        need = "--context" if batch else "--batch and --context"
        raise UsageError(f"{need}: the trace records no aten::embedding input shape to read "
                         f"{'them' if not batch else 'it'} from" if args.phase == "prefill" else
                         f"{need}: a decode step's cached tokens are not in the trace; say them")
    given = [f for f, v in (("--batch", args.batch), ("--context", args.context)) if v]
    source = "given by " + " and ".join(given) if len(given) == 2 else \
        f"B x S = {shape[0]} x {shape[1]} from the trace's aten::embedding ids" + \
        (f", {' and '.join(given)} given" if given else "")
    return batch, context, source


def cmd_measure(args, stdout, stderr) -> int:
    # a wrong --out is said before minutes of timing, not after
    if args.what == "device":
        output.check_file_target(args.out)
    if args.what == "model" and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out}: a file; --out names the folder the report goes to")
    if args.what == "device":
        written = [_write_spec(args.out, _device(args))]
    else:
        say = lambda message: stderr.write(f"{message}\n")   # noqa: E731
        output.probe(args.out, say)
        stem, files = _model(args)
        written = output.write_reports(args.out, {stem: files}, say)
    for target in written:
        stdout.write(f"wrote {target}\n")
    return 0


def _write_spec(path: str, text: str) -> str:
    try:
        output.write_file(path, text)
    except OSError as exc:
        raise RooflineError(f"{path}: cannot write: {exc.strerror or exc}") from None
    return path


def _device(args) -> str:
    dtypes = None
    if args.dtypes is not None:
        dtypes = tuple(d.strip() for d in args.dtypes.split(",") if d.strip())
        bad = [d for d in dtypes if d not in device.TORCH_DTYPES or d not in DTYPE_BYTES]
        if bad or not dtypes:
            raise UsageError(f"--dtypes: unknown {', '.join(bad) or '(empty)'}; choose from "
                         f"{', '.join(d for d in device.TORCH_DTYPES if d in DTYPE_BYTES)}")
    cal = device.calibrate(args.on, args.quick, dtypes, args.threads)
    return device.yaml_text(device.spec(cal))


def _model(args) -> tuple[str, dict[str, str]]:
    """The report's stem and its files, by path under --out."""
    dev = quick._device(args.device)
    if dev.peak("matrix", args.dtype) is None:
        raise UsageError(f"--dtype {args.dtype}: {args.device} lists no tensor peak for it; it has "
                     f"{', '.join(dev.tensor)}")
    m = quick._model(args.model)
    measured = model.measure_model(m, dev, args.dtype, args.phase, args.batch, args.context,
                                   args.on, args.steps, args.layers, args.threads,
                                   args.impl)
    stem = f"{m.key}-{args.phase}-b{args.batch}-s{args.context}"
    return stem, report.render(report.build(measured), stem)


COMMANDS = {"measure": cmd_measure, "trace": cmd_trace}
