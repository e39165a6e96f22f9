"""`rooflinec calibrate` and `rooflinec validate`: measured serving runs against the serving model."""

from __future__ import annotations

import os
from importlib import resources

from rooflinec import output
from rooflinec.errors import RooflineError

SHIPPED = "serving-visible.yaml"   # fitted on the measurements the repository keeps
SIMULATE_HELP = ("replay each row's benchmark in the serving simulator (rooflinec simulate) instead of "
                 "the steady-state model; the default for a CSV with layout columns (mode, tp, ...)")


def _simulated(args) -> bool:
    from rooflinec.serving import rows
    return args.simulate or rows.has_layout(args.csv)


def shipped_calibration() -> str:
    return str(resources.files("rooflinec.calibrations").joinpath(SHIPPED))


def register(sub, streams, parents=()) -> None:
    c = sub.add_parser("calibrate", help="fit the serving model's efficiencies to measured runs",
                       streams=streams, parents=parents)
    c.set_defaults(parser=c)   # a UsageError prints this command's usage line
    c.add_argument("csv", metavar="MEASUREMENTS.csv")
    c.add_argument("--out", default="calibration.yaml", metavar="FILE",
                   help="calibration YAML to write (default: calibration.yaml)")
    c.add_argument("--specs", metavar="DIR",
                   help="folder holding models/ and hardware/ that shadow the installed catalog")
    c.add_argument("--simulate", action="store_true", help=SIMULATE_HELP)
    v = sub.add_parser("validate", help="predict measured serving runs; report the errors",
                       streams=streams, parents=parents)
    v.set_defaults(parser=v)
    v.add_argument("csv", metavar="MEASUREMENTS.csv")
    v.add_argument("--calibration", metavar="FILE",
                   help="calibration YAML (default: the shipped one, fitted on the repository's measurements)")
    v.add_argument("--specs", metavar="DIR",
                   help="folder holding models/ and hardware/ that shadow the installed catalog")
    v.add_argument("--out", default="validation", metavar="DIR",
                   help="output folder (default: validation): serving.md, .html, .json, charts in serving/")
    v.add_argument("--format", default="md,html,json", metavar="LIST",
                   help="comma-separated formats among: md, html, json")
    v.add_argument("--simulate", action="store_true", help=SIMULATE_HELP)


def _specs_folder(path: str | None) -> str | None:
    if path is not None and not os.path.isdir(path):
        raise RooflineError(f"{path}: no such specs folder (it should hold models/ and hardware/); "
                            "give one with --specs")
    return path


def cmd_calibrate(args, stdout, stderr) -> int:
    import yaml
    if _simulated(args):
        from rooflinec.serving import cli as sim
        return sim.cmd_calibrate(args, stdout, stderr, _specs_folder(args.specs))

    from rooflinec import calibrate, measurements
    rows = measurements.read(args.csv)
    prepared = calibrate.prepare(rows, measurements.Specs(_specs_folder(args.specs)))
    try:
        cal = calibrate.fit_all(prepared)
    except ValueError as exc:
        raise RooflineError(f"{args.csv}: {exc}") from None
    doc = calibrate.document(cal, prepared, os.path.basename(args.csv))
    text = ("# rooflinec serving-model calibration, written by `rooflinec calibrate`.\n"
            + yaml.safe_dump(doc, sort_keys=False, width=120))
    try:
        output.write_file(args.out, text)
    except OSError as exc:
        raise RooflineError(f"{args.out}: cannot write: {exc.strerror or exc}") from None
    stdout.write(f"wrote {args.out}\n")
    return 0


def cmd_validate(args, stdout, stderr) -> int:
    from rooflinec import validate_runs
    from rooflinec.cli import _formats
    formats = _formats(args.format)
    say = lambda message: stderr.write(f"{message}\n")   # noqa: E731
    output.probe(args.out, say)
    if _simulated(args):
        from rooflinec.serving import calibration, validation
        rep = validation.report(args.csv, _specs_folder(args.specs), args.calibration or calibration.shipped())
    else:
        rep = validate_runs.report(args.csv, _specs_folder(args.specs), args.calibration or shipped_calibration())
    for target in output.write_reports(args.out, {"serving": validate_runs.render(rep, formats)}, say):
        stdout.write(f"wrote {target}\n")
    t, f = rep["tpot"], rep["ttft"]
    stdout.write(f"{t['rows']} of {rep['rows_total']} rows predicted: median abs error TPOT "
                 f"{100 * t['median_abs']:.1f}%, TTFT {100 * f['median_abs']:.1f}%; "
                 f"{len(rep['violations'])} bound violations\n" if t["rows"] else "no row predicted\n")
    return 0


COMMANDS = {"calibrate": cmd_calibrate, "validate": cmd_validate}
