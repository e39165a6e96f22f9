"""Calibration and `rooflinec validate` end to end: the fit recovers known efficiencies, the
uncalibrated bound holds on every shipped measurement, and the commands work on a handful of
rows, with located errors for bad input."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from rooflinec.serving import calibrate, measurements
from rooflinec.serving import serving_model as sm
from rooflinec.base.errors import SpecError

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "rooflinec" / "spec" / "catalog"
SHIPPED_CSV = ROOT.parent / "shared" / "measured" / "serving-visible.csv"   # read in place, never copied


def shipped_csv() -> Path:
    if not SHIPPED_CSV.is_file():
        pytest.skip("../shared/measured/serving-visible.csv absent: the measured rows (NVIDIA AIConfigurator) "
                    "are read in place, and the shipped calibration's refit needs them")
    return SHIPPED_CSV
LOCATED = re.compile(r"^.+:\d+:\d+: .+: .+$")


@pytest.fixture(scope="module")
def shipped():
    return calibrate.prepare(measurements.read(str(shipped_csv())), measurements.Specs(str(SPECS)))


@pytest.mark.slow
def test_every_shipped_row_is_predicted(shipped):
    assert len(shipped) == 309
    assert [p.reason for p in shipped if p.costs is None] == []


@pytest.mark.slow
def test_uncalibrated_bound_holds_on_every_shipped_row(shipped):
    """A bound above a measurement is a bug in the model, not noise."""
    over = [(p.row.row_id, what) for p in shipped for what, lo, m in
            (("tpot", sm.bound(p.costs).tpot_s, p.row.tpot_s), ("ttft", sm.bound(p.costs).ttft_s, p.row.ttft_s))
            if lo > m]
    assert over == []


@pytest.mark.slow
def test_fit_recovers_the_efficiencies_that_made_the_data(shipped):
    """Measurements synthesised from known parameters give those parameters back."""
    truth = sm.Efficiency(compute_fraction=0.6, per_layer_s=50e-6)
    some = shipped[::7]
    synthetic = [sm.predict(p.run, p.costs, truth).tpot_s for p in some]
    got = calibrate.fit([p.costs for p in some], synthetic)
    assert got.compute_fraction == pytest.approx(0.6, rel=1e-4)
    assert got.per_layer_s == pytest.approx(50e-6, rel=1e-4)
    assert (got.bandwidth_fraction, got.per_step_s, got.per_collective_s) == (1, 0, 0)   # not fitted


def test_fit_of_every_parameter_recovers_them_too(shipped):
    truth = sm.Efficiency(0.8, 0.5, 30e-6, 1e-3, 5e-6)
    some = shipped[::3]
    synthetic = [sm.predict(p.run, p.costs, truth).tpot_s for p in some]
    got = calibrate.fit([p.costs for p in some], synthetic, sm.PARAMETERS)
    steps = calibrate.Steps.of([p.costs for p in some])
    assert max(abs(math.log(a / b)) for a, b in zip(steps.time(got), synthetic)) < 1e-4


@pytest.mark.slow
def test_shipped_calibration_is_the_fit_of_the_shipped_csv(call, shipped, tmp_path):
    code, _, err = call("calibrate", shipped_csv(), "--specs", SPECS, "--out", tmp_path / "c.yaml")
    assert code == 0, err
    fresh, kept = calibrate.load(str(tmp_path / "c.yaml")), calibrate.load(
        str(ROOT / "rooflinec/serving/calibrations/serving-visible.yaml"))
    assert fresh == kept, "refit: rooflinec calibrate ../shared/measured/serving-visible.csv --out " \
                          "rooflinec/serving/calibrations/serving-visible.yaml"


HANDFUL = (1, 50, 100, 190, 200, 260, 300)   # tp 1, 2, 4 of the 8B, the 70B on both engines


@pytest.fixture
def small_csv(tmp_path) -> Path:
    with open(shipped_csv(), encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    keep = [rows[i] for i in HANDFUL]
    keep.append(dict(rows[0], model="example/unknown-model", row_id="unknown-model"))
    keep.append(dict(rows[0], device="tpu-v9", row_id="unknown-device"))
    path = tmp_path / "runs.csv"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep)
    return path


@pytest.mark.slow
def test_calibrate_then_validate_end_to_end(call, small_csv, tmp_path):
    cal = tmp_path / "cal.yaml"
    code, out, err = call("calibrate", small_csv, "--specs", SPECS, "--out", cal)
    assert code == 0, err
    doc = yaml.safe_load(cal.read_text())
    assert doc["fitted"] == list(calibrate.FITTED)
    assert len(doc["rows"]) == len(HANDFUL)            # residuals of every predictable row
    code, out, err = call("validate", small_csv, "--specs", SPECS, "--calibration", cal,
                          "--out", tmp_path / "out")
    assert code == 0, err
    assert "median abs error TPOT" in out
    rep = json.loads((tmp_path / "out/serving.json").read_text())
    ids = [r["row_id"] for r in rep["rows"]]
    assert len(ids) == len(HANDFUL) + 2
    done = [r for r in rep["rows"] if r["predicted"]]
    for r in done:   # both predictions, calibrated and not, beside the row id
        assert 0 < r["tpot_bound_s"] <= r["tpot_s"] and 0 < r["ttft_bound_s"] <= r["ttft_s"]
        assert r["tpot_error"] == pytest.approx(r["tpot_s"] / r["measured_tpot_s"] - 1)
    reasons = {u["row_id"]: u["reason"] for u in rep["unpredictable"]}
    assert "hf_id" in reasons["unknown-model"] and "tpu-v9" in reasons["unknown-device"]
    assert {h["by"] for h in rep["holdouts"]} == {"model", "tp", "engine"}
    assert rep["violations"] == []
    md = (tmp_path / "out/serving.md").read_text()
    assert "## Leave one group out" in md and "unknown-model" in md
    assert (tmp_path / "out/serving/predicted-vs-measured.svg").read_text().startswith("<?xml")
    assert "<svg" in (tmp_path / "out/serving.html").read_text()


@pytest.mark.slow
def test_validate_defaults_to_the_shipped_calibration(call, small_csv, tmp_path):
    code, _, err = call("validate", small_csv, "--specs", SPECS, "--out", tmp_path, "--format", "json")
    assert code == 0, err
    assert json.loads((tmp_path / "serving.json").read_text())["calibration"] == "serving-visible.yaml"


@pytest.mark.parametrize("cell, value, message", [
    ("tpot_ms", "fast", "is not a number of ms from"),
    ("tpot_ms", "-1", "is not a number of ms from"),
    ("ttft_ms", "inf", "is not a number of ms from"),
    ("tp", "0", "whole number >= 1"),
    ("isl", "1.5", "whole number >= 1"),
    ("row_id", "", "empty"),
])
def test_a_bad_cell_is_located_and_nothing_is_written(call, small_csv, tmp_path, cell, value, message):
    lines = small_csv.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[2].split(",")
    cells[header.index(cell)] = value
    lines[2] = ",".join(cells)
    small_csv.write_text("\n".join(lines) + "\n")
    code, out, err = call("validate", small_csv, "--specs", SPECS, "--out", tmp_path / "out")
    assert code == 1 and out == ""
    assert LOCATED.match(err.strip()) and f":3:" in err and cell in err and message in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_file_with_no_predictable_row_still_reports_why(call, small_csv, tmp_path):
    lines = small_csv.read_text().splitlines()
    small_csv.write_text("\n".join([lines[0]] + [l for l in lines if "unknown-model" in l]) + "\n")
    code, out, err = call("validate", small_csv, "--specs", SPECS, "--out", tmp_path / "out")
    assert code == 0, err
    assert "no row predicted" in out
    assert "unknown-model" in (tmp_path / "out/serving.md").read_text()
    code, _, err = call("calibrate", small_csv, "--specs", SPECS, "--out", tmp_path / "c.yaml")
    assert code == 1 and "no predictable rows" in err and not (tmp_path / "c.yaml").exists()


def test_calibrate_with_no_predictable_row_says_it_located(call, small_csv, tmp_path):
    # found by `tests/fuzz_inputs.py --what csv --seed 1`: one row of an unknown model made
    # calibrate's refusal the one unlocated error line (file: message, no line or column)
    lines = small_csv.read_text().splitlines()
    small_csv.write_text("\n".join([lines[0]] + [l for l in lines if "unknown-model" in l]) + "\n")
    code, _, err = call("calibrate", small_csv, "--specs", SPECS, "--out", tmp_path / "c.yaml")
    assert code == 1 and err.splitlines() == [f"{small_csv}:1:1: (rows): no predictable rows to fit; "
                                              "`rooflinec validate` says why each row is not predicted"]


def test_a_missing_column_is_named(call, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("model,device\nm,d\n")
    code, _, err = call("validate", path, "--specs", SPECS, "--out", tmp_path / "out")
    assert code == 1 and "missing column" in err and "tpot_ms" in err


def test_repeated_row_ids_are_refused(small_csv, tmp_path):
    lines = small_csv.read_text().splitlines()
    small_csv.write_text("\n".join(lines + [lines[1]]) + "\n")
    with pytest.raises(SpecError, match="repeats line 2"):
        measurements.read(str(small_csv))


def test_a_missing_file_or_specs_folder_is_an_error_not_a_traceback(call, tmp_path, small_csv):
    code, _, err = call("validate", tmp_path / "none.csv", "--specs", SPECS)
    assert code == 1 and "cannot read" in err
    code, _, err = call("validate", small_csv, "--specs", tmp_path / "nowhere")
    assert code == 1 and "no such specs folder" in err


@pytest.mark.slow
def test_a_bad_calibration_is_located(call, small_csv, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("default:\n  parameters:\n    bandwidth_fraction: 1.5\n    compute_fraction: 0.5\n"
                   "    per_layer_s: 0\n    per_step_s: 0\n    per_collective_s: 0\n")
    code, _, err = call("validate", small_csv, "--specs", SPECS, "--calibration", bad, "--out", tmp_path / "o")
    assert code == 1 and LOCATED.match(err.strip()) and "bandwidth_fraction" in err and ":3:" in err


def test_the_command_line_lists_the_new_commands(call):
    code, out, _ = call("--help")
    assert code == 0 and "calibrate" in out and "validate" in out
