"""The adversary's fuzzers over the inputs that are not specs (tests/fuzz_inputs.py): a few
examples each in the default run (ROOFLINEC_FUZZ_EXAMPLES sets how many), more under the
`slow` marker; `python tests/fuzz_inputs.py --what W --count 5000 --seed S` for a long run."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_inputs  # noqa: E402 - a sibling module of the tests, not a package

EXAMPLES = int(os.environ.get("ROOFLINEC_FUZZ_EXAMPLES", "8"))
SEED = int(os.environ.get("ROOFLINEC_FUZZ_SEED", "31"))


def _need_rows(what: str) -> None:
    if what == "csv" and not fuzz_inputs.MEASURED.is_file():
        pytest.skip("../shared/measured/serving-visible.csv absent: the csv fuzzer mutates real rows, read in place")


@pytest.mark.slow
@pytest.mark.parametrize("what", sorted(fuzz_inputs.CHECKS))
def test_fuzzed_inputs_end_located_or_sane(what):
    _need_rows(what)
    fuzz_inputs.run_fuzz(what, EXAMPLES, SEED)


@pytest.mark.slow
@pytest.mark.parametrize("what", sorted(fuzz_inputs.CHECKS))
def test_more_fuzzed_inputs_end_located_or_sane(what):
    _need_rows(what)
    fuzz_inputs.run_fuzz(what, 10 * EXAMPLES, SEED + 1)


def test_calibrating_the_simulator_on_no_predictable_row_is_located(tmp_path):
    """`tests/fuzz_inputs.py --what csv --seed 3` found it: a v2 file of one disaggregated row
    (the simulator's calibration fits aggregated rows only) ended in an unlocated
    'runs.csv: no predictable rows to fit'; now the same located line as without the simulator."""
    if not fuzz_inputs.MEASURED_V2.is_file():
        pytest.skip("../shared/measured/serving-v2-visible.csv absent: read in place")
    header, rows = fuzz_inputs._rows(fuzz_inputs.MEASURED_V2)
    disagg = next(r for r in rows if r[header.index("mode")] == "disagg")
    runs = tmp_path / "runs.csv"
    runs.write_text(",".join(header) + "\n" + ",".join(disagg) + "\n", encoding="utf-8")
    from rooflinec.cli.app import run
    out, err = io.StringIO(), io.StringIO()
    assert run(["calibrate", str(runs), "--out", str(tmp_path / "cal.yaml")], out, err) == 1
    assert err.getvalue().startswith(f"{runs}:1:1: (rows): no predictable rows to fit"), err.getvalue()


def test_an_interval_without_a_left_out_coverage_is_written_without_one():
    """`tests/fuzz_inputs.py --what csv --seed 3` found it: three v2 rows of two models gave the
    pooled interval its rows but no held-out group an interval of the others' (too few), and
    `calibrate` died on the missing coverage (TypeError); the coverage is now left out."""
    import numpy as np
    from rooflinec.serving import intervals
    rows = lambda n: np.tile([[0.1, -0.2]], (n, 1)) * np.arange(1, n + 1)[:, None]  # noqa: E731
    # 9 rows pooled give an 80% interval; 8 or 1 of the other group's give none
    ho = [{"by": "model", "residuals": rows(8)}, {"by": "model", "residuals": rows(1)}]
    assert intervals.band_of(ho) is not None and intervals.coverage(ho)["all"]["tpot"] is None
    assert intervals.block(ho)["intervals"]["left_out_coverage"] == {}
