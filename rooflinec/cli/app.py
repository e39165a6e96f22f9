"""Command line: build, check, explain. `run(argv, stdout, stderr) -> int` is testable in-process."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from rooflinec.cli import output, quick, serving as serving_cli, streams
from rooflinec.base.errors import RooflineError, SpecError, UsageError
from rooflinec.cli.progress import Progress, drawn
from rooflinec.render.formats import parse as parse_formats
from rooflinec.cli import measure as measure_cli   # no torch: it loads when a measure runs
from rooflinec.cli import simulate as simulate_cli
from rooflinec.cli import plan as plan_cli
from rooflinec.cli import report
from rooflinec.spec import load as spec
from rooflinec.render.formats import CHARTED
from rooflinec.render.pages import draw_charts, render_many
from rooflinec.cli.explain import explain

EPILOG = """\
examples:
  rooflinec build specs/qwen.yaml                  # reports/qwen.{md,html,json}, charts in reports/qwen/
  rooflinec build specs/*.yaml --out my-reports --format md
  rooflinec check specs/qwen.yaml                  # validate only; every problem, located
  rooflinec explain specs/qwen.yaml k_proj         # one op's derivation in the terminal
  rooflinec devices                                # the installed catalog; also: rooflinec models
  rooflinec import config.json --hf-id meta-llama/Llama-3.1-8B --out models/llama-3.1-8b.yaml
  rooflinec serve llama-3.1-8b.yaml --device h100-sxm --batch 1,8,64 --context 4096
  rooflinec simulate llama-3.1-8b --device h100-sxm --engine trtllm --concurrency 64 --isl 1024 --osl 128
  rooflinec plan llama-3.1-70b --slo "ttft<=2s,tpot<=50ms" --devices h100-sxm,h200-sxm --gpus 8
  rooflinec validate ../shared/measured/serving-visible.csv   # serving model against measured runs
  rooflinec calibrate ../shared/measured/serving-visible.csv --out my-calibration.yaml
  rooflinec validate-ops vidur/compute/a100/*/*/mlp.csv --out ops   # kernels against the roofline
  rooflinec measure device --quick                 # time this machine (needs the [measure] extra)

exit status, every command:
  0    done: build wrote its reports, check found every spec valid, import, calibrate and
       measure wrote (or printed) their file, the others printed their answer
  1    an input file is wrong or unreadable (a spec, config.json, CSV, trace, engine or
       calibration file: each problem as file:line:col: path: message), the model cannot
       answer what was asked (e.g. the weights leave no memory for the KV cache), or an
       output could not be written
  2    the command line is wrong: the command's usage line and what is wrong
  141  standard output went away (| head, closed), as for a process killed by SIGPIPE
"""


class _Parser(argparse.ArgumentParser):
    """argparse that writes to the given (stdout, stderr) and raises instead of exiting."""

    def __init__(self, *args, streams, **kwargs):
        super().__init__(*args, **kwargs)
        self._streams = streams

    def _print_message(self, message, file=None):
        if message:
            out, err = self._streams
            (out if file is sys.stdout else err).write(message)

    def exit(self, status=0, message=None):
        if message:
            self._print_message(message, sys.stderr)
        raise _Exit(status)


class _Exit(Exception):
    def __init__(self, status: int):
        self.status = status


def _parser(stdout, stderr) -> _Parser:
    streams = (stdout, stderr)
    p = _Parser(prog="rooflinec", description="Compile YAML model and hardware specs into "
                "per-operator roofline reports with symbolic derivations.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter, streams=streams)
    p.add_argument("--version", action="version", version=f"rooflinec {_version()}")
    quiet = argparse.ArgumentParser(add_help=False)   # -q before or after the command
    quiet.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                       help="nothing on standard error unless something is wrong")
    p.add_argument("-q", "--quiet", action="store_true", default=False,
                   help="nothing on standard error unless something is wrong")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    b = sub.add_parser("build", help="build reports for one or more study specs", streams=streams,
                       parents=[quiet])
    b.set_defaults(parser=b)
    b.add_argument("specs", nargs="+", metavar="SPEC", help="study spec files, e.g. specs/qwen.yaml")
    b.add_argument("--out", default="reports", metavar="DIR", help="output folder (default: reports)")
    b.add_argument("--format", default="md,html,json", metavar="LIST",
                   help="comma-separated formats among: md, html, json (default: md,html,json); "
                        "md also writes its chart files under <stem>/")
    c = sub.add_parser("check", help="validate study specs and everything they reference",
                       streams=streams)
    c.set_defaults(parser=c)
    c.add_argument("specs", nargs="+", metavar="SPEC", help="study spec files, e.g. specs/qwen.yaml")
    e = sub.add_parser("explain", help="print one op's derivation: FLOPs, bytes, intensity, crossings",
                       streams=streams)
    e.set_defaults(parser=e)
    e.add_argument("spec", metavar="SPEC", help="a study spec, e.g. specs/qwen.yaml")
    e.add_argument("op", metavar="OP", help="op name, e.g. q_proj, attention, lm_head")
    e.add_argument("--variant", choices=("unfused", "fused", "flash", "ideal"), default=None,
                   help="the program variant whose op is derived (default: the naive op, else "
                        "the default variant's kernel); flash shows each device's tiles")
    quick.register(sub, streams, parents=[quiet])
    serving_cli.register(sub, streams, parents=[quiet])
    simulate_cli.register(sub, streams, parents=[quiet])
    plan_cli.register(sub, streams, parents=[quiet])
    measure_cli.register(sub, streams, parents=[quiet])
    measure_cli.register_trace(sub, streams, parents=[quiet])
    return p


def _version() -> str:
    try:
        return version("rooflinec")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "unknown (not installed)"


def _warn(study, stderr) -> None:
    """Located warnings of the study's devices (figures far outside any accelerator), once."""
    for line in dict.fromkeys(w for d in study.devices for w in d.warnings):
        stderr.write(f"warning: {line}\n")


def _lacking(path: str, rep: dict, stderr) -> None:
    """What the report leaves out for a device lacking a figure, as build and explain say it."""
    for section in rep["sections"]:
        for row in section.get("lacking", ()):
            stderr.write(f"note: {path}: {section['title']}: not evaluated on {row['device']}: {row['why']}\n")


def _build_all(specs: list[str], progress=None, stderr=None) -> list[dict]:
    """Load and evaluate every study; raise one SpecError holding every problem."""
    built, problems = [], []
    for path in specs:
        def heard(rep, i, section, path=path):
            progress(f"{path}: evaluated {section['title']}")
        try:
            study = spec.load_study(path)
            if stderr is not None:
                _warn(study, stderr)
            built.append(report.build(study, heard if progress else None))
            if stderr is not None:
                _lacking(path, built[-1], stderr)
        except SpecError as exc:
            problems.extend(exc.problems)
    if problems:
        raise SpecError(problems)
    return built


def _distinct(specs: list[str]) -> None:
    seen = {}
    for path in specs:
        key = os.path.realpath(path)
        if key in seen:
            raise UsageError(f"{path}: the same spec is given twice (also as {seen[key]})")
        seen[key] = path


def cmd_build(args, stdout, stderr) -> int:
    formats = parse_formats(args.format)
    if not args.out:
        raise UsageError("--out: empty; name the output folder, e.g. --out reports")
    _distinct(args.specs)
    say = lambda message: stderr.write(f"{message}\n")   # noqa: E731
    output.probe(args.out, say)   # an unusable folder fails before the analyses run
    outputs = _render_all(args, formats, None if args.quiet else Progress(stderr), stderr)
    for target in output.write_reports(args.out, outputs, say):
        stdout.write(f"wrote {target}\n")
    return 0


def _render_all(args, formats, progress, stderr=None) -> dict[str, dict[str, str]]:
    """{study stem: {path under --out: text}}."""
    outputs = {}
    charted = any(f in CHARTED for f in formats)
    for path, rep in zip(args.specs, _build_all(args.specs, progress, stderr)):
        svgs = draw_charts(rep, lambda svgs, path=path: drawn(svgs, path, progress)) if charted else None
        files = render_many(rep, formats, svgs)
        if rep["study"] in outputs:
            target = os.path.join(args.out, next(iter(files)))
            raise RooflineError(f"{path}: its reports would overwrite those of another spec with "
                                f"the same file name ({target}); build them with different --out")
        outputs[rep["study"]] = files
    return outputs


def cmd_check(args, stdout, stderr) -> int:
    _build_all(args.specs, stderr=stderr)
    for path in args.specs:
        stdout.write(f"{path}: ok\n")
    return 0


def cmd_explain(args, stdout, stderr) -> int:
    stdout.write(explain(args.spec, args.op, args.variant))
    return 0


COMMANDS = {"build": cmd_build, "check": cmd_check, "explain": cmd_explain, **quick.COMMANDS,
            **serving_cli.COMMANDS, **simulate_cli.COMMANDS, **plan_cli.COMMANDS,
            **measure_cli.COMMANDS}


def run(argv: list[str], stdout=None, stderr=None) -> int:
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    parser = _parser(stdout, stderr)
    try:
        args = parser.parse_args(argv)
        try:
            return COMMANDS[args.command](args, stdout, stderr)
        except UsageError as exc:   # a mistake on the command line: the command's usage, 2
            args.parser.error(str(exc))
    except _Exit as exc:
        return exc.status
    except RooflineError as exc:
        stderr.write(f"{exc}\n")
        return 1


def main() -> None:
    stdout, stderr = streams.process_streams()
    code = streams.guarded(lambda out, err: run(sys.argv[1:], out, err), stdout, stderr)
    # Leave without tearing the interpreter down: freeing sympy's caches (and matplotlib's
    # state where a command drew with it) takes a noticeable part of a build and helps no one. Output was flushed.
    os._exit(code)
