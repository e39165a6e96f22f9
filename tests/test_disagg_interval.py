"""A disaggregated simulate's prediction interval: split conformal on the calibration's
disaggregated rows' residuals (`intervals.disaggregated_band`), or one line saying why none."""

from __future__ import annotations

import io
import json
import math

import pytest
import yaml

from rooflinec.cli.app import run
from rooflinec.serving import calibration, intervals


def call(*argv):
    out, err = io.StringIO(), io.StringIO()
    return run([str(a) for a in argv], out, err), out.getvalue(), err.getvalue()


def test_ten_residuals_give_the_80_percent_band_their_extremes_imply():
    """n = 10, level 0.8: lo is the floor(11 x 0.1) = 1st smallest, hi the ceil(11 x 0.9) = 10th,
    so [-0.5, 0.4] for -0.5, -0.4, ..., 0.4; a 100 ms prediction allows 100 e^-0.4 = 67.03 ms
    to 100 e^0.5 = 164.87 ms."""
    res = [round(-0.5 + 0.1 * i, 1) for i in range(10)]
    entry = {"tpot_log_residuals": res, "ttft_log_residuals": res[::-1]}
    q, words = intervals.disaggregated_band(entry)
    assert q == {"tpot": [-0.5, pytest.approx(0.4)], "ttft": [-0.5, pytest.approx(0.4)]}
    assert words == "disaggregated rows: 10 measured runs, split conformal"
    lo, hi = intervals.interval(0.1, *q["tpot"])
    assert (lo, hi) == (pytest.approx(0.1 * math.exp(-0.4)), pytest.approx(0.1 * math.exp(0.5)))
    assert (round(1e3 * lo, 2), round(1e3 * hi, 2)) == (67.03, 164.87)


def test_too_few_or_no_disaggregated_rows_give_no_band_and_say_why():
    q, words = intervals.disaggregated_band({"tpot_log_residuals": [0.1] * 8, "ttft_log_residuals": [0.1] * 8})
    assert q is None and "8 residuals cannot give a 80% interval; need at least 9" in words
    q, words = intervals.disaggregated_band(None)
    assert q is None and "no disaggregated rows' residuals" in words


BASE = ("simulate", "qwen3-235b-a22b", "--device", "h200-sxm", "--engine", "sglang", "--weights", "fp8",
        "--concurrency", 8, "--isl", 1000, "--osl", 32, "--prefill-workers", 1, "--prefill-tp", 4,
        "--decode-workers", 1, "--decode-tp", 8)


def _shipped() -> dict:
    with open(calibration.shipped(), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _write(tmp_path, doc) -> str:
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return str(path)


@pytest.mark.slow
def test_simulate_of_two_pools_prints_the_disaggregated_rows_band(tmp_path):
    """The shipped calibration's disaggregated residuals through `quantiles`, each end of the
    band no lower than the pools' bound, in the aggregated JSON's shape."""
    doc = _shipped()
    entry = doc["intervals"]["disaggregated"]
    n = len(entry["ttft_log_residuals"])
    assert n == entry["rows"] >= 9
    code, out, err = call(*BASE, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert set(got["interval"]) == {"level", "band", "ttft_mean_s", "tpot_mean_s"} and "no_interval" not in got
    assert got["interval"]["band"] == f"disaggregated rows: {n} measured runs, split conformal"
    code, bout, err = call(*BASE, "--json", "--bound")
    bound = json.loads(bout)
    assert code == 0 and "interval" not in bound and "no_interval" not in bound
    for w in ("ttft", "tpot"):
        r = sorted(entry[f"{w}_log_residuals"])
        k_lo, k_hi = math.floor((n + 1) * 0.1 + 1e-9), math.ceil((n + 1) * 0.9 - 1e-9)   # split conformal ranks
        lo, hi = r[k_lo - 1], r[k_hi - 1]
        want = [max(got[f"{w}_s"] * math.exp(-hi), bound[f"{w}_s"]), max(got[f"{w}_s"] * math.exp(-lo), bound[f"{w}_s"])]
        assert got["interval"][f"{w}_mean_s"] == pytest.approx(want, rel=1e-12)
        assert want[0] <= got[f"{w}_s"] * math.exp(-r[-1]) or want[0] == bound[f"{w}_s"]
    code, out, err = call(*BASE)
    assert code == 0 and f"80% interval of the mean (a prediction; disaggregated rows: {n} measured runs" in out


@pytest.mark.slow
def test_an_older_calibration_without_the_entry_loads_and_says_no_interval(tmp_path):
    doc = _shipped()
    del doc["intervals"]["disaggregated"]
    path = _write(tmp_path, doc)
    assert "disaggregated" not in calibration.load(path).intervals
    code, out, err = call(*BASE, "--calibration", path)
    assert code == 0, err
    assert "no 80% interval: the calibration holds no disaggregated rows' residuals" in out
    assert "interval of the mean" not in out
    code, out, err = call(*BASE, "--calibration", path, "--json")
    got = json.loads(out)
    assert "interval" not in got and got["no_interval"]["level"] == 0.8
    doc["intervals"]["disaggregated"] = {"rows": 3, "tpot_log_residuals": [0.1, 0.2, 0.3],
                                         "ttft_log_residuals": [0.1, 0.2, 0.3]}
    code, out, err = call(*BASE, "--calibration", _write(tmp_path, doc))
    assert code == 0 and "no 80% interval: disaggregated rows: 3 residuals cannot give a 80% interval" in out


def test_a_bad_disaggregated_entry_is_located(tmp_path):
    doc = _shipped()
    doc["intervals"]["disaggregated"] = {"tpot_log_residuals": "x", "ttft_log_residuals": [0.1]}
    with pytest.raises(Exception, match="tpot_log_residuals: expected a list of numbers"):
        calibration.load(_write(tmp_path, doc))
