"""The serving simulator: its speed, and its validation figures on the visible measured rows
(read in place from ../shared/measured/), each beside its target (PASS / FAIL; exit status 1
if any is missed).

    python bench/simulator.py             # from the repository root; a few minutes
    python bench/simulator.py --speed     # the speed figure alone

Speed: 10,000 requests of Llama-3.1-8B on one H100 under TensorRT-LLM's policy, a closed loop
of 64 clients, ISL 1024 and OSL 128; CPU time of the process (time.process_time), so a busy
machine's other work is not counted. Validation: `rooflinec validate` through the simulator
with the shipped simulator calibration, then the same with the calibration refitted on the
rows (what the leave-one-group-out figures do for each held-out group; `rooflinec validate`
without --calibration, its CPU time beside the first's), and the share of
left-out rows inside their 80% prediction interval per kind of hold-out (`validation.coverage`:
a held-out group against the band of the other groups of its kind, the figure that can fail;
beside it a row against the band of all its kind's other left-out rows, near 80% by
construction).
A benchmark, not a test: the figures are what the simulator achieves, not facts a test pins.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rooflinec.spec import catalog, load as spec  # noqa: E402
from rooflinec.serving import calibration, engines, simulator, validation, workload  # noqa: E402
from rooflinec.serving import stepcost as sc  # noqa: E402

V2 = ROOT.parent / "shared" / "measured" / "serving-v2-visible.csv"


def speed() -> float:
    model = spec.load_model(catalog.path("models", "llama-3.1-8b"))
    device = spec.load_hardware(catalog.path("hardware", "h100-sxm"))
    step = sc.build(sc.Deployment(model, device, 1, "bf16", "bf16"))
    work = workload.Workload(workload.Lengths(1024, 1024), workload.Lengths(128, 128), 10_000, 0, 64, None)
    params = calibration.load(calibration.shipped()).of("h100-sxm", "trtllm")
    simulator.simulate(step, engines.load("trtllm"), workload.benchmark(8, 128, 8), params)   # warm
    start = time.process_time()
    simulator.simulate(step, engines.load("trtllm"), work, params)
    return time.process_time() - start


def split(rep: dict, what: str, line) -> None:
    """TPOT and TTFT median abs error of the dense and the MoE models' rows apart (a MoE row's
    layout names its experts: the CSV's `moe_weights` is set)."""
    for name, moe in (("dense", False), ("MoE", True)):
        got = [r for r in rep["rows"] if r.get("predicted") and ("experts" in r["layout"]) == moe]
        for w in validation.WHATS:
            errs = [abs(r[f"{w}_error"]) for r in got]
            line(f"  {name} rows ({len(got)}): {w.upper()} median abs, {what}",
                 float(np.median(errs)) if errs else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=str(V2))
    ap.add_argument("--calibration", default=calibration.shipped())
    ap.add_argument("--speed", action="store_true", help="the speed figure alone")
    args = ap.parse_args()
    missed = 0

    def verdict(ok: bool) -> str:
        nonlocal missed
        missed += not ok
        return "PASS" if ok else "FAIL"

    s = speed()
    print(f"{'10,000 requests simulated, CPU s':<52} {s:>8.3f}  target < 1 s  {verdict(s < 1)}")
    if args.speed:
        return 1 if missed else 0
    if not Path(args.csv).is_file():
        print(f"{args.csv} absent: the validation figures need ../shared/measured/")
        return 1
    start = time.process_time()
    rep = validation.report(args.csv, None, args.calibration, with_holdouts=False)
    took = time.process_time() - start
    print(f"{'validate (simulate every row), CPU s':<52} {took:>8.1f}  target < 30 s  {verdict(took < 30)}")

    def line(name, value, target=None):
        tail = "" if target is None else f"  target <= {target:.0%}  {verdict(value is not None and value <= target)}"
        print(f"{name:<52} {'n/a' if value is None else f'{value:.1%}':>8}{tail}")

    print(f"{rep['rows_predicted']} of {rep['rows_total']} rows predicted ({rep['source']}, "
          f"calibration {rep['calibration']})")
    line("TPOT median abs error, shipped calibration", rep["tpot"]["median_abs"], 0.08)
    line("TTFT median abs error, shipped calibration", rep["ttft"]["median_abs"], 0.25)
    line("TPOT signed median", rep["tpot"]["signed_median"])
    line("TTFT signed median", rep["ttft"]["signed_median"])
    split(rep, "shipped calibration", line)
    for g in rep["by_group"]:
        line(f"  {g['model'].split('/')[-1]} {g['device']} {g['engine']}: TPOT", g["tpot"]["median_abs"])
        line(f"  {g['model'].split('/')[-1]} {g['device']} {g['engine']}: TTFT", g["ttft"]["median_abs"])
    start = time.process_time()
    fitted = validation.report(args.csv, None, None)
    took = time.process_time() - start
    print(f"{'validate refitted (fits, left-out refits), CPU s':<52} {took:>8.1f}  target < 30 s  {verdict(took < 30)}")
    line("TPOT median abs error, refitted on these rows", fitted["tpot"]["median_abs"], 0.08)
    line("TTFT median abs error, refitted on these rows", fitted["ttft"]["median_abs"], 0.25)
    split(fitted, "refitted", line)
    for by in validation.HOLDOUTS:
        for h in (h for h in fitted["holdouts"] if h["by"] == by):
            print(f"  leave out {by} = {h['held_out'].split('/')[-1]:<30} TPOT {h['tpot']['median_abs']:7.1%}"
                  f"  TTFT {h['ttft']['median_abs']:7.1%}  ({h['tpot']['rows']} rows)")
        line(f"TPOT leave-one-{by}-out, worst median abs", fitted["holdout_worst"][by], 0.15)
        line(f"TTFT leave-one-{by}-out, worst median abs", fitted["holdout_worst_ttft"][by], 0.35)
    cover = fitted["coverage"]
    for by in (*validation.HOLDOUTS, "all"):
        for w in validation.WHATS:
            c, x = cover[by][w], cover[by]["exchangeable"][w]
            ok = c is not None and 0.75 <= c <= 0.85
            print(f"{f'{w.upper()} held-out groups in the others 80% band, by {by}':<52} "
                  f"{'n/a' if c is None else f'{c:.1%}':>8}  target 75-85%  {verdict(ok)}  ({cover[by]['rows']} rows;"
                  f" a row in its kind's band from the other rows, by construction near 80%:"
                  f" {'n/a' if x is None else f'{x:.1%}'})")
    v = len(rep["violations"])
    print(f"{'bound violations (bound > measured)':<52} {v:>8}  target 0  {verdict(v == 0)}")
    print(f"{'rows not predicted':<52} {len(rep['unpredictable']):>8}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
