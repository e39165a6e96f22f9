"""The serving model against the measurements the repository keeps: the validation figures,
each beside its target (PASS / FAIL; exit status 1 if any is missed).

    python bench/serving.py            # from the repository root; about ten seconds

A benchmark, not a test: the figures are what the model achieves, not facts a test pins.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rooflinec.cli import serving as serving_cli
from rooflinec.serving import validate_runs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=str(ROOT.parent / "shared" / "measured" / "serving-visible.csv"))
    ap.add_argument("--calibration", default=serving_cli.shipped_calibration())
    args = ap.parse_args()
    if not Path(args.csv).is_file():
        print(f"{args.csv}: absent; the measured rows are read in place from ../shared/measured/ (or give --csv)")
        return 2
    rep = validate_runs.report(args.csv, None, args.calibration)
    missed = 0

    def line(name, value, target=None):
        nonlocal missed
        verdict = ""
        if target is not None:
            ok = value is not None and value <= target
            missed += not ok
            verdict = f"  target <= {target:.0%}  {'PASS' if ok else 'FAIL'}"
        shown = "n/a" if value is None else f"{value:.1%}"
        print(f"{name:<48} {shown:>8}{verdict}")

    print(f"{rep['rows_predicted']} of {rep['rows_total']} rows predicted ({rep['source']}, "
          f"calibration {rep['calibration']})")
    t, f = rep["tpot"], rep["ttft"]
    line("TPOT median abs error, all rows", t["median_abs"], 0.10)
    line("TPOT signed median", t["signed_median"])
    line("TPOT 90th percentile abs error", t["p90_abs"])
    for by in validate_runs.HOLDOUTS:
        for h in (h for h in rep["holdouts"] if h["by"] == by):
            line(f"  leave out {by} = {h['held_out'].split('/')[-1]}", h["tpot"]["median_abs"])
        line(f"TPOT leave-one-{by}-out, worst median abs", rep["holdout_worst"][by],
             0.15 if by in ("tp", "model") else None)
    line("TTFT median abs error, all rows", f["median_abs"])
    line("TTFT signed median", f["signed_median"])
    line("TTFT 90th percentile abs error", f["p90_abs"])
    violations = len(rep["violations"])
    print(f"{'bound violations (uncalibrated bound > measured)':<48} {violations:>8}  target 0  "
          f"{'PASS' if violations == 0 else 'FAIL'}")
    missed += violations > 0
    print(f"{'rows not predicted':<48} {len(rep['unpredictable']):>8}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
