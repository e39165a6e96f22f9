"""The `measure` command's arguments and actions; torch loads only when one of them runs."""

from __future__ import annotations

import argparse
import os


from rooflinec import output
from rooflinec.errors import RooflineError, UsageError

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
    o.add_argument("--phase", choices=("decode", "prefill"), default="decode")
    o.add_argument("--batch", type=_positive, default=1, metavar="B")
    o.add_argument("--context", type=_positive, default=128, metavar="S",
                   help="prompt length (prefill) or cached tokens (decode); default 128")
    o.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
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
                   help="output folder (default: measured): <model>-<phase>.md, .json, .svg")


def cmd_measure(args, stdout, stderr) -> int:
    # a wrong --out is said before minutes of timing, not after
    if args.what == "device":
        output.check_file_target(args.out)
    if args.what == "model" and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise RooflineError(f"{args.out}: a file; --out names the folder the report goes to")
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
    from rooflinec.measure import device
    from rooflinec.spec import DTYPE_BYTES
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
    from rooflinec import quick
    from rooflinec.measure import model, report
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


COMMANDS = {"measure": cmd_measure}
