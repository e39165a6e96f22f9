"""`rooflinec calibrate` and `rooflinec validate`: measured serving runs against the serving model."""

from __future__ import annotations

import os
from importlib import resources
import yaml

from rooflinec.cli import output
from rooflinec.base.errors import Problem, RooflineError, SpecError
from rooflinec.render.formats import parse as parse_formats
from rooflinec.serving import calibrate, calibration, intervals, measurements, opcurves, recipes, rows, validate_ops, validate_runs, validation, workload
from rooflinec.base.errors import UsageError
from rooflinec.cli import simulate as sim
from rooflinec.cli.progress import Progress

SHIPPED = "serving-visible.yaml"   # the project's fit of ../shared/measured/serving-visible.csv (docs/measurements.md)
SIMULATE_HELP = ("replay each row's benchmark in the serving simulator (rooflinec simulate) instead of "
                 "the steady-state model; the default for a CSV with layout columns (mode, tp, ...)")


def _simulated(args) -> bool:
    return args.simulate or rows.has_layout(args.csv)


def shipped_calibration() -> str:
    return str(resources.files("rooflinec.serving.calibrations").joinpath(SHIPPED))


CSV_HELP = "measured serving runs, one a row (the columns: docs/measurements.md)"
RECIPE_HELP = ("the engine settings the rows' benchmark ran with where they differ from the engines' defaults: "
               f"a catalog recipe ({', '.join(recipes.names())}), a recipe YAML, or none for the engines' "
               f"defaults (default: {recipes.DEFAULT}, the measured rows' source; simulator only)")


def register(sub, streams, parents=()) -> None:
    c = sub.add_parser("calibrate", help="fit the serving model's efficiencies to measured runs",
                       streams=streams, parents=parents)
    c.set_defaults(parser=c)   # a UsageError prints this command's usage line
    c.add_argument("csv", metavar="MEASUREMENTS.csv", help=CSV_HELP)
    c.add_argument("--out", default="calibration.yaml", metavar="FILE",
                   help="calibration YAML to write (default: calibration.yaml)")
    c.add_argument("--specs", metavar="DIR",
                   help="folder holding models/ and hardware/ that shadow the installed catalog")
    c.add_argument("--simulate", action="store_true", help=SIMULATE_HELP)
    c.add_argument("--unique-prompts", metavar="N|all", help=sim.UNIQUE_HELP + " (simulator only)")
    c.add_argument("--recipe", default=recipes.DEFAULT, metavar="NAME|FILE|none", help=RECIPE_HELP)
    v = sub.add_parser("validate", help="predict measured serving runs; report the errors",
                       streams=streams, parents=parents)
    v.set_defaults(parser=v)
    v.add_argument("csv", metavar="MEASUREMENTS.csv", help=CSV_HELP)
    v.add_argument("--calibration", metavar="FILE",
                   help="calibration YAML (default: the shipped one, fitted on the repository's measurements)")
    v.add_argument("--specs", metavar="DIR",
                   help="folder holding models/ and hardware/ that shadow the installed catalog")
    v.add_argument("--out", default="validation", metavar="DIR",
                   help="output folder (default: validation): serving.md, .html, .json, charts in serving/")
    v.add_argument("--format", default="md,html,json", metavar="LIST",
                   help="comma-separated formats among: md, html, json")
    v.add_argument("--simulate", action="store_true", help=SIMULATE_HELP)
    v.add_argument("--unique-prompts", metavar="N|all", help=sim.UNIQUE_HELP + " (simulator only)")
    v.add_argument("--recipe", default=recipes.DEFAULT, metavar="NAME|FILE|none", help=RECIPE_HELP)
    v.add_argument("--op-efficiency", metavar="OPS.json",
                   help="time each GEMM, norm, RoPE and embedding kernel of the step by the per-op-class curve "
                   "of a `validate-ops` ops.json (at each row's device peaks, nothing refitted) instead of the "
                   "whole-step fractions; the calibration is then fitted on these rows with the curves in "
                   "place unless --calibration names one (steady-state model only)")
    o = sub.add_parser("validate-ops", help="measured kernels (Vidur mlp.csv or the simple CSV) against "
                       "their roofline; fit per-op-class efficiency curves", streams=streams, parents=parents,
                       description="Each kernel's FLOPs and bytes come from rooflinec's lowering of the op at the "
                       "profile's model shape, tokens and tp; the report gives the roofline bound check, a "
                       "fitted curve t = ((F/(eta P))^p + (B/(beta W))^p)^(1/p) + t0 per op class, 80% conformal "
                       "intervals with their coverage on left-out models and tp degrees, the worst kernels, and "
                       "a latency + bandwidth fit per collective. Simple CSV columns: model, op, tokens, tp, "
                       "time_ms, d_model, n_q, n_kv, d_head, d_ff, V, gated.")
    o.set_defaults(parser=o)
    o.add_argument("profiles", nargs="+", metavar="PROFILE.csv",
                   help="Vidur mlp.csv files (model named by its <org>/<model>/ folders) or simple CSVs")
    o.add_argument("--collectives", action="append", default=[], metavar="FILE",
                   help="a Vidur all_reduce.csv or send_recv.csv to fit (repeatable; default: none)")
    o.add_argument("--device", default="a100-80gb", metavar="NAME",
                   help="hardware spec the bound uses (default: a100-80gb, the A100 with the higher "
                   "bandwidth, so the bound holds for either A100)")
    o.add_argument("--curves", metavar="OPS.json",
                   help="an earlier run's ops.json (another device's, e.g. A100's): each class it has keeps "
                   "its p and t0 and refits only eta and beta here (default: fit all four); the report "
                   "gives each class's errors with the curve as it came and after the refit")
    o.add_argument("--tp", metavar="LIST", help="keep only rows at these comma-separated tensor-parallel "
                   "degrees (default: all), e.g. fit on --tp 1,2 and carry the curves to --tp 4,8")
    o.add_argument("--rows", action="store_true", help="also write ops/predictions.csv: every kernel's "
                   "calibrated prediction with its 80%% interval and its roofline bound, in ms")
    o.add_argument("--specs", metavar="DIR", help="folder holding models/ and hardware/ that shadow the installed catalog (a model "
                   "spec whose hf_id names a profile's model is used for it, its dimensions checked)")
    o.add_argument("--out", default="validation", metavar="DIR",
                   help="output folder (default: validation): ops.md, ops.json, a chart per op class in ops/")
    o.add_argument("--format", default="md,json", metavar="LIST",
                   help="comma-separated formats among: md, json (default: md,json)")


def _specs_folder(path: str | None) -> str | None:
    if path is not None and not os.path.isdir(path):
        raise RooflineError(f"{path}: no such specs folder (it should hold models/ and hardware/); "
                            "give one with --specs")
    return path


def cmd_calibrate(args, stdout, stderr) -> int:
    output.check_file_target(args.out)   # before any row is read, on either path
    if _simulated(args):
        return sim.cmd_calibrate(args, stdout, stderr, _specs_folder(args.specs))

    rows = measurements.read(args.csv)
    prepared = calibrate.prepare(rows, measurements.Specs(_specs_folder(args.specs)))
    try:
        cal = calibrate.fit_all(prepared)
    except ValueError as exc:   # located at the header: no row of the file could be costed
        raise SpecError([Problem(args.csv, 1, 1, "(rows)", f"{exc}; `rooflinec validate` "
                                 "says why each row is not predicted")]) from None
    doc = calibrate.document(cal, prepared, os.path.basename(args.csv))
    doc.update(intervals.block(validate_runs.holdouts(prepared, cal.fitted), [p for p in prepared if p.costs is not None]))
    code = output.write_command_file(args.out, "# rooflinec serving-model calibration, written by "
                                     "`rooflinec calibrate`.\n" + yaml.safe_dump(doc, sort_keys=False, width=120), stdout)
    sim.say_unfitted(args, stderr, len(prepared), sum(p.costs is not None for p in prepared))
    return code


def cmd_validate(args, stdout, stderr) -> int:
    formats = parse_formats(args.format)
    if args.op_efficiency and _simulated(args):
        raise UsageError("--op-efficiency: the steady-state model only; the simulator's step takes no per-op "
                         "curves yet (a CSV with layout columns is replayed in the simulator)")
    say = lambda message: stderr.write(f"{message}\n")   # noqa: E731
    output.probe(args.out, say)
    if args.op_efficiency:
        rep = opcurves.report(args.csv, _specs_folder(args.specs), args.calibration, args.op_efficiency)
    elif _simulated(args):
        rep = validation.report(args.csv, _specs_folder(args.specs), args.calibration or calibration.shipped(),
                                unique_prompts=workload.unique_prompts_of(args.unique_prompts,
                                                                          workload.BENCHMARK_UNIQUE_PROMPTS),
                                recipe=recipes.load(args.recipe), progress=None if args.quiet else Progress(stderr))
    else:
        rep = validate_runs.report(args.csv, _specs_folder(args.specs), args.calibration or shipped_calibration())
    for target in output.write_reports(args.out, {"serving": validate_runs.render(rep, formats)}, say):
        stdout.write(f"wrote {target}\n")
    t, f = rep["tpot"], rep["ttft"]
    stdout.write(f"{t['rows']} of {rep['rows_total']} rows predicted: median abs error TPOT "
                 f"{100 * t['median_abs']:.1f}%, TTFT {100 * f['median_abs']:.1f}%; "
                 f"{len(rep['violations'])} bound violations\n" if t["rows"] else "no row predicted\n")
    if rep.get("op_efficiency"):
        stdout.write(f"per-op curves from {args.op_efficiency} for {', '.join(rep['op_efficiency']['classes'])} kernels\n")
    if rep.get("disaggregated"):   # serving/disagg.py's rows
        d = rep["disaggregated_errors"]
        stdout.write(f"{len(rep['disaggregated'])} disaggregated rows predicted: median abs error TTFT "
                     f"{100 * d['ttft']['median_abs']:.1f}%, TPOT {100 * d['tpot']['median_abs']:.1f}%\n")
    if rep.get("unpredictable"):
        n = len(rep["unpredictable"])
        stdout.write(f"{n} row{'s' * (n != 1)} not predicted: the report's 'Rows not predicted' says why\n")
    return 0


def cmd_validate_ops(args, stdout, stderr) -> int:
    formats = parse_formats(args.format)
    if "html" in formats:
        raise UsageError("--format: validate-ops writes md and json only")
    specs = measurements.Specs(_specs_folder(args.specs))
    device = specs.device(args.device)
    if device is None:
        raise UsageError(f"--device: no hardware spec '{args.device}' (see `rooflinec devices`)")
    say = lambda message: stderr.write(f"{message}\n")   # noqa: E731
    output.probe(args.out, say)
    rep = validate_ops.report(args.profiles, args.collectives, args.device, device, specs, args.curves,
                              _tp_list(args.tp), args.rows)
    for target in output.write_reports(args.out, {"ops": validate_ops.render(rep, formats)}, say):
        stdout.write(f"wrote {target}\n")
    gemm = next((c for c in rep["classes"] if c["class"] == "gemm"), None)
    stdout.write(f"{rep['rows_total']} kernels; {rep['bound']['violations']} faster than their roofline bound"
                 + (f"; GEMM median abs error {100 * gemm['in_scope']['median_abs']:.1f}% (tokens <= "
                    f"{rep['tokens_in_scope']})" if gemm and gemm["in_scope"]["rows"] else "") + "\n")
    if gemm and gemm["transferred"] and gemm["transferred"]["in_scope"]["rows"]:
        stdout.write(f"GEMM curve from {args.curves}: median abs error {100 * gemm['transferred']['in_scope']['median_abs']:.1f}% "
                     f"as it came, {100 * gemm['in_scope']['median_abs']:.1f}% with eta, beta refitted\n")
    return 0


def _tp_list(text: str | None) -> frozenset | None:
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isascii() and p.isdigit() and 1 <= len(p) <= 6 and int(p) >= 1 for p in parts):
        raise UsageError(f"--tp: '{text}' is not a comma-separated list of whole numbers >= 1, e.g. 1,2")
    return frozenset(int(p) for p in parts)


COMMANDS = {"calibrate": cmd_calibrate, "validate": cmd_validate, "validate-ops": cmd_validate_ops}
