"""Calibration and validation through the simulator, on the measured rows read in place from
../shared/measured/ (skipped where that folder is absent): every aggregated row predicted or
said why not, the per-request bounds hold on every one, the fit recovers known parameters."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from rooflinec.serving import measurements
from rooflinec.serving import calibration, fitting, intervals, rows, validation
from rooflinec.serving import stepcost as sc

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "measured"
V2 = SHARED / "serving-v2-visible.csv"
OLD = SHARED / "serving-visible.csv"


def need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"../shared/measured/{path.name} absent: the measured rows are read in place")
    return path


@pytest.fixture(scope="module")
def visible() -> list[fitting.Case]:
    """Every visible row's schedule, simulated once for the tests that need all of them."""
    return fitting.prepare(rows.read(str(need(V2))), measurements.Specs())


def small_v2(tmp_path, keep) -> Path:
    """A few rows of the layout CSV, chosen by `keep(row dict)`."""
    with open(need(V2), encoding="utf-8") as fh:
        rd = csv.DictReader(fh)
        picked = [r for r in rd if keep(r)]
        fields = rd.fieldnames
    path = tmp_path / "rows.csv"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(picked)
    return path


def few(r) -> bool:   # small concurrency on every (device, engine) with a dense model, and some rows not predicted
    return (int(r["concurrency"] or 0) in (2, 4) and r["model"].startswith("meta")) or r["mode"] == "disagg"


def few_and_ep(r) -> bool:   # and a MoE at tp x EP 8
    return few(r) or (r["moe_ep"] == "8" and r["concurrency"] == "4")


def test_both_csv_formats_read_as_one_kind_of_row():
    new, old = rows.read(str(need(V2))), rows.read(str(need(OLD)))
    assert len(new) == 567 and len(old) == 309
    assert {r.mode for r in new} == {"agg", "disagg"} and {r.mode for r in old} == {"agg"}
    # the 309 old rows are in the new file, same measurements
    by_id = {r.row_id: r for r in new}
    assert all(by_id[r.row_id].tpot_s == r.tpot_s and by_id[r.row_id].tp == r.tp for r in old)


@pytest.mark.slow
def test_rows_not_predicted_say_why(tmp_path):
    cases = fitting.prepare(rows.read(str(small_v2(tmp_path, few_and_ep))), measurements.Specs())
    reasons = [c.reason for c in cases if not c.predicted]
    assert any("disaggregated" in r for r in reasons)
    assert any(c.predicted and c.row.moe_ep == 8 for c in cases)    # tp x EP rows: predicted
    assert sum(c.predicted for c in cases) >= 8


@pytest.mark.slow
def test_the_fit_recovers_parameters_that_made_the_data(tmp_path):
    """Measurements synthesised by the simulator from known parameters give them back. Rows at
    C 32 beside C 2 and 4: at C 2 and 4 alone every step holds about as many requests, so the
    time per step and the time per request trade off against each other."""
    def spread(r):
        return few(r) or (r["concurrency"] == "32" and r["model"].startswith("meta"))
    cases = [c for c in fitting.prepare(rows.read(str(small_v2(tmp_path, spread))), measurements.Specs())
             if c.predicted]
    truth = sc.Parameters(compute_fraction=0.55, per_kernel_s=6e-6, per_request_s=30e-6)
    synthetic = [rows.Row(**{**vars(c.row), "ttft_s": c.means(truth)[0], "tpot_s": c.means(truth)[1]})
                 for c in cases]
    for c, r in zip(cases, synthetic):
        c.row = r
    got = fitting.fit(cases)
    assert got.compute_fraction == pytest.approx(0.55, rel=1e-3)
    assert got.per_kernel_s == pytest.approx(6e-6, rel=1e-3)
    assert got.per_request_s == pytest.approx(30e-6, rel=1e-2)
    assert (got.bandwidth_fraction, got.per_layer_s, got.per_step_s, got.per_collective_s) == (1, 0, 0, 0)   # not fitted
    # one row measuring what the model lacks (its TTFT 5x): soft-L1 bounds its pull, least
    # squares lets it move the fit for every row
    far = max(cases, key=lambda c: c.row.concurrency)
    far.row = rows.Row(**{**vars(far.row), "ttft_s": 5 * far.row.ttft_s})
    robust, squares = fitting.fit(cases), fitting.fit(cases, scale=0)

    def others(p):   # the largest log error of the other rows' means
        return max(abs(math.log(m / t)) for c in cases if c is not far
                   for m, t in zip(c.means(p), (c.row.ttft_s, c.row.tpot_s)))
    assert others(robust) < 0.25 * others(squares)


@pytest.mark.slow
def test_calibrate_then_validate_through_the_simulator(call, tmp_path):
    csv_file, cal = small_v2(tmp_path, few), tmp_path / "cal.yaml"
    code, out, err = call("calibrate", csv_file, "--out", cal)
    assert code == 0, err
    table = calibration.load(str(cal))
    assert table.fitted == fitting.FITTED and table.groups
    code, out, err = call("validate", csv_file, "--calibration", cal, "--out", tmp_path / "out")
    assert code == 0, err
    rep = json.loads((tmp_path / "out/serving.json").read_text())
    assert rep["title"].startswith("Serving simulator") and rep["violations"] == []
    models = {r["model"] for r in rep["rows"] if r["predicted"]}
    assert {h["by"] for h in rep["holdouts"]} == {"tp", "engine"} | ({"model"} if len(models) > 1 else set())
    assert all(r["ttft_bound_s"] <= r["ttft_s"] and r["tpot_bound_s"] <= r["tpot_s"] for r in rep["rows"] if r["predicted"])
    # the disaggregated rows are predicted in their own section, not among the aggregated ones
    assert rep["disaggregated"] and not any(u["row_id"] in {d["row_id"] for d in rep["disaggregated"]}
                                            for u in rep["unpredictable"] if "row_id" in u)
    md = (tmp_path / "out/serving.md").read_text()
    assert "weakest scheduling assumption" in md and "## Leave one group out" in md and "## By mode and layout" in md
    # a held-out group's band needs two other groups of its kind (the spread of their shifts)
    assert rep["coverage"]["all"]["rows"] == sum(h["tpot"]["rows"] for h in rep["holdouts"] if len({g["held_out"] for g in rep["holdouts"] if g["by"] == h["by"]}) > 2)


def test_intervals_come_from_left_out_residuals_and_cover_left_out_rows():
    """The pooled band is split conformal over every left-out row; a kind's band is the
    two-level band of a new group from that kind's groups; coverage checks each held-out group
    against the band of the other groups of its kind (nested), and keeps the split conformal
    and exchangeable-rows figures beside it."""
    rng = np.random.default_rng(0)
    ho = [{"by": by, "held_out": str(v), "residuals": rng.normal(0, 0.2, size=(30, 2))}
          for by in validation.HOLDOUTS for v in range(3)]
    band = intervals.band_of(ho)
    pooled = np.sort(np.concatenate([h["residuals"][:, 1] for h in ho]))   # 270 rows
    # (270 + 1) x 0.1 = 27.1 -> the 27th smallest; (271) x 0.9 = 243.9 -> the 244th
    assert band["ttft"] == [pooled[26], pooled[243]]
    tp = [h["residuals"][:, 0] for h in ho if h["by"] == "tp"]
    g = intervals.group_band(tp, 0.8)
    assert band["by"]["tp"]["tpot"] == [g.lo, g.hi] and band["by"]["tp"]["groups"] == 3
    cover = intervals.coverage(ho)
    assert cover["all"]["rows"] == 270 and 0.7 <= cover["all"]["ttft"] <= 1.0
    assert set(cover["model"]["groups"]) == {"0", "1", "2"}
    # each held-out group weighing the same, whatever its rows (here 30 each: the row share too)
    assert cover["tp"]["group_mean"]["tpot"] == pytest.approx(np.mean([g["tpot"] for g in cover["tp"]["groups"].values()]))
    assert cover["tp"]["group_mean"]["tpot"] == pytest.approx(cover["tp"]["tpot"])
    shifted = [dict(h, residuals=h["residuals"] + (1.0 if h["held_out"] == "0" else 0.0)) for h in ho]
    # a group unlike the others falls outside the split conformal band; the new-group band,
    # drawn from groups of which one is shifted, is wider and covers more of it
    got = intervals.coverage(shifted)
    assert got["all"]["split_conformal"]["ttft"] < 0.6 < got["all"]["ttft"]
    # a row against its kind's other rows: about 80% however unlike its group is (89 others:
    # 90 x 0.1 = 9 -> their 9th, 90 x 0.9 = 81 -> their 81st; a row of rank j of the 90 is
    # inside for 10 <= j <= 81: 72 of 90)
    assert got["model"]["exchangeable"]["ttft"] == pytest.approx(72 / 90)


@pytest.mark.slow
def test_per_request_bounds_hold_on_every_visible_aggregated_row(visible):
    """Every aggregated row the simulator predicts: the same schedule at efficiencies 1 and
    overheads 0 gives a mean TPOT at or below the measured one; the prompt prefilled alone at
    the bound, a TTFT at or below it."""
    done = [c for c in visible if c.predicted]
    assert len(done) == 538      # 355 dense rows and 183 of Qwen3-235B-A22B (tp, and tp x EP); the rest say why not
    over = [(c.row.row_id, w) for c in done for w, lo, m in
            (("tpot", c.bound_means()[1], c.row.tpot_s), ("ttft", validation.prompt_alone(c), c.row.ttft_s))
            if lo > m]
    assert over == []


@pytest.mark.slow
def test_no_visible_rows_interval_reaches_below_its_bound(visible):
    """Every aggregated row predicted with the shipped calibration and its band: each end of
    the mean TPOT's and mean TTFT's intervals is at or above the row's printed bound (no run is
    faster than the bound), and the interval is not empty."""
    table = calibration.load(calibration.shipped())
    recs = [validation.record(c, table.of(*c.group), table.intervals) for c in visible if c.predicted]
    assert len(recs) == 538
    below = [(r["row_id"], w) for r in recs for w in ("tpot", "ttft")
             if not r[f"{w}_bound_s"] <= r[f"{w}_interval_s"][0] <= r[f"{w}_interval_s"][1]]
    assert below == []


@pytest.mark.slow
def test_shipped_simulator_calibration_is_the_fit_of_the_visible_rows(visible, tmp_path):
    """What `rooflinec calibrate --simulate` writes (its document, `validation.calibrate`), on
    the schedules simulated once for this module."""
    doc = validation.calibrate(visible, V2.name)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=120), encoding="utf-8")
    fresh, kept = calibration.load(str(tmp_path / "c.yaml")), calibration.load(calibration.shipped())
    # to 1e-4 relative: the file keeps 6 digits, and another machine's floating point may move the last
    assert _figures(fresh) == pytest.approx(_figures(kept), rel=1e-4, abs=1e-12), \
        "refit: rooflinec calibrate ../shared/measured/serving-v2-visible.csv --out " \
        "rooflinec/serving/calibrations/simulator-visible.yaml"


def _figures(table: calibration.Table) -> dict:
    """Every fitted parameter of a calibration, keyed by its group and name."""
    sets = {("default",): table.default, **{("group", *k): v for k, v in table.groups.items()},
            **{("engine", k): v for k, v in table.engines.items()}, **{("kind", *k): v for k, v in table.kinds.items()}}
    return {(*key, name): float(getattr(p, name)) for key, p in sets.items() for name in sc.NAMES}


@pytest.mark.parametrize("tpot", ["5e-324", "1e300"])
def test_the_layout_reader_refuses_times_no_run_takes(tmp_path, tpot):
    """As the old reader (issue 31, item 5): a time under a nanosecond or over a week is a
    located error, never a division by ~0 or an infinity downstream."""
    path = small_v2(tmp_path, lambda r: r["mode"] == "agg")
    header, first, *_ = path.read_text(encoding="utf-8").splitlines()
    cells = first.split(",")
    cells[header.split(",").index("tpot_ms")] = tpot
    path.write_text(header + "\n" + ",".join(cells) + "\n", encoding="utf-8")
    with pytest.raises(measurements.SpecError) as err:
        rows.read(str(path))
    assert f"{path}:2:" in str(err.value) and "tpot_ms" in str(err.value) and "a week" in str(err.value)


def test_the_layout_reader_refuses_a_column_named_twice(tmp_path):
    path = small_v2(tmp_path, lambda r: r["mode"] == "agg")
    header, *body = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join([header + ",tpot_ms", *(line + ",1" for line in body[:2])]) + "\n", encoding="utf-8")
    with pytest.raises(measurements.SpecError) as err:
        rows.read(str(path))
    assert f"{path}:1:" in str(err.value) and "repeats column" in str(err.value)
