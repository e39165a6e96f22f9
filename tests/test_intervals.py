"""The interval of a prediction on a new group (`serving.intervals.group_band`): Student's t
in closed form against its tables, the two-level band's arithmetic on a hand example, its
laws (it moves with the residuals, scales with them, widens with the level, holds the
predicted shift), the medians' standard error it takes off the shifts' spread, its coverage
on exchangeable synthetic groups, the band a deployment takes, and the nested coverage on the
visible serving rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from rooflinec.cli import calibrated, quick
from rooflinec.serving import intervals, serving_model

ROOT = Path(__file__).resolve().parents[1]
V2 = ROOT.parent / "shared" / "measured" / "serving-v2-visible.csv"


@pytest.mark.parametrize("df, p, table", [(1, 0.9, 3.078), (2, 0.9, 1.886), (3, 0.9, 1.638), (4, 0.9, 1.533),
                                          (5, 0.95, 2.015), (10, 0.95, 1.812), (30, 0.975, 2.042)])
def test_student_t_quantiles_match_the_tables(df, p, table):
    """t_{df, p} from any printed table (e.g. Abramowitz and Stegun 26.7, to 3 decimals)."""
    assert intervals.t_quantile(p, df) == pytest.approx(table, abs=5e-4)


def test_student_t_cdf_in_closed_form():
    """df 1 is Cauchy, 1/2 + atan(x)/pi; df 2 is 1/2 + x / (2 sqrt(2 + x^2)); symmetric."""
    x = np.array([-3.0, -0.5, 0.0, 0.7, 4.0])
    assert intervals.t_cdf(x, 1) == pytest.approx(0.5 + np.arctan(x) / math.pi)
    assert intervals.t_cdf(x, 2) == pytest.approx(0.5 + x / (2 * np.sqrt(2 + x * x)))
    assert intervals.t_cdf(x, 7) + intervals.t_cdf(-x, 7) == pytest.approx(np.ones(5))


def test_the_two_level_band_by_hand():
    """Two groups, each three rows: [-0.1, 0, 0.1] and [0.9, 1, 1.1]. Medians 0 and 1, so the
    shifts' centre c = 0.5 and spread s_b = sd(0, 1) = 1/sqrt(2), s_b^2 = 0.5; m = 2, 1 degree of
    freedom (Cauchy). Rows without noise: the medians carry none (v = 0), tau^2 = s_b^2 and the
    new group's shift has scale sqrt(0.5 + 0.5/2) = sqrt(3)/2 = 0.8660, the band
    c -+ 0.8660 x t_{1, 0.9} = 0.5 -+ 0.8660 x tan(0.4 pi) = 0.5 -+ 2.6654. With the noise
    -0.1, 0, 0.1: each median's standard error (`median_se`, n = 3: c = round(2 - 1.95996 x
    sqrt(0.75)) = round(0.3026) = 0, raised to 1) is (0.1 - -0.1) / (2 x 1.95996) = 0.051021,
    v = 0.0026031, tau^2 = 0.5 - 0.0026031 = 0.4973969, scale sqrt(0.4973969 + 0.25) =
    0.864521; F(x) = mean over d in (-0.1, 0, 0.1) of 1/2 + atan((x - 0.5 - d) / 0.864521) / pi,
    and the band's ends are where F is 0.1 and 0.9 (symmetric about 0.5)."""
    scale = math.sqrt(3) / 2
    g = intervals.group_band([np.zeros(3), np.ones(3)], 0.8)
    assert (g.center, g.shift_scale, g.groups, g.between_sd) == (0.5, pytest.approx(scale), 2, pytest.approx(math.sqrt(0.5)))
    assert [g.lo, g.hi] == pytest.approx([0.5 - scale * math.tan(0.4 * math.pi), 0.5 + scale * math.tan(0.4 * math.pi)])
    assert g.hi == pytest.approx(3.16536, abs=1e-5)
    g = intervals.group_band([[-0.1, 0, 0.1], [0.9, 1, 1.1]], 0.8)
    se = 0.2 / (2 * 1.959964)
    scale = math.sqrt(0.5 - se * se + 0.25)
    assert scale == pytest.approx(0.864521, abs=1e-6) and g.shift_scale == pytest.approx(scale)

    def cdf(x):
        return np.mean([0.5 + math.atan((x - 0.5 - d) / scale) / math.pi for d in (-0.1, 0, 0.1)])
    assert (cdf(g.lo), cdf(g.hi)) == (pytest.approx(0.1, abs=1e-9), pytest.approx(0.9, abs=1e-9))
    assert g.lo + g.hi == pytest.approx(1.0)


def test_the_medians_standard_error_by_hand_and_on_normal_rows():
    """1..10: c = round(5.5 - 1.95996 x sqrt(2.5)) = round(2.401) = 2, so the 2nd and 9th order
    statistics: (9 - 2) / (2 x 1.95996) = 1.78575. One row: 0. On normal rows the median's
    standard deviation is sqrt(pi / (2n)) sigma (Laplace; 0.06267 at n = 400, sigma 1): the
    estimate's mean over 200 draws (seed 3) within 5% of it."""
    assert intervals.median_se(np.arange(10, 0, -1.0)) == pytest.approx(7 / (2 * 1.959964), abs=1e-5)
    assert intervals.median_se([4.2]) == 0.0
    rng = np.random.default_rng(3)
    got = np.mean([intervals.median_se(rng.normal(0, 1, 400)) for _ in range(200)])
    assert got == pytest.approx(math.sqrt(math.pi / 800), rel=0.05)


def test_one_group_gives_no_band_and_equal_medians_the_conformal_one():
    with pytest.raises(intervals.TooFewGroups, match="need 2"):
        intervals.group_band([np.zeros(20)], 0.8)
    noise = np.linspace(-1, 1, 9)
    g = intervals.group_band([noise, noise + 0.0], 0.8)     # s_b = 0: the shift is c alone
    assert (g.lo, g.hi) == intervals.quantiles(np.concatenate([noise, noise]), 0.8)


groups_st = st.lists(st.lists(st.floats(-3, 3), min_size=1, max_size=6), min_size=2, max_size=5)


@pytest.mark.slow
@given(groups_st, st.floats(-2, 2), st.floats(0.1, 5))
@settings(max_examples=40)
def test_the_band_moves_and_scales_with_the_residuals(groups, shift, factor):
    """Residuals shifted by a (every group alike) shift the band by a; scaled by k > 0, scale it."""
    assume(np.std([np.median(x) for x in groups]) > 1e-6)    # equal medians: the conformal band (its own test)
    g = intervals.group_band(groups, 0.8)
    moved = intervals.group_band([np.add(x, shift) for x in groups], 0.8)
    scaled = intervals.group_band([np.multiply(x, factor) for x in groups], 0.8)
    tol = 1e-6 * (1 + abs(g.lo) + abs(g.hi))
    assert moved.lo == pytest.approx(g.lo + shift, abs=tol) and moved.hi == pytest.approx(g.hi + shift, abs=tol)
    assert scaled.lo == pytest.approx(g.lo * factor, abs=tol * factor) and scaled.hi == pytest.approx(g.hi * factor, abs=tol * factor)
    wider = intervals.group_band(groups, 0.9)
    assert g.lo <= g.hi and wider.lo <= g.lo + tol and wider.hi >= g.hi - tol


@pytest.mark.slow
@given(groups_st, st.floats(0.5, 0.95))
@settings(max_examples=25)
def test_the_band_holds_the_predicted_shift_and_widens_with_the_level(groups, level):
    """The band holds c, the groups' medians' mean (the shift the prediction is corrected by):
    each group's noise has half its rows on either side of 0, so F(c) lies in [1/4, 3/4], inside
    any band of level >= 1/2; and a higher level's band holds a lower one's."""
    assume(np.std([np.median(x) for x in groups]) > 1e-6)    # equal medians: the conformal band (its own test)
    g = intervals.group_band(groups, level)
    tol = 1e-9 * (1 + abs(g.lo) + abs(g.hi))
    assert g.lo - tol <= g.center <= g.hi + tol
    wider = intervals.group_band(groups, min(0.99, level + 0.04))
    assert wider.lo <= g.lo + tol and wider.hi >= g.hi - tol


@given(groups_st)
@settings(max_examples=25)
def test_residuals_symmetric_about_zero_give_a_band_holding_the_prediction(groups):
    """Every group beside its mirror image: the medians' mean is 0 and the law symmetric, so
    the band is [-h, h] and a prediction's interval [y e^-h, y e^h] holds y. (A model that
    over-predicts every group is not so: its band lies on one side of 0 and, rightly, leaves
    the uncorrected prediction out.)"""
    assume(max(abs(np.median(x)) for x in groups) > 1e-6)    # equal medians: the conformal band (its own test)
    g = intervals.group_band(groups + [[-x for x in grp] for grp in groups], 0.8)
    assert g.lo == pytest.approx(-g.hi, abs=1e-7) and g.lo <= 0 <= g.hi
    lo, hi = intervals.interval(2.0, g.lo, g.hi)
    assert lo <= 2.0 <= hi


def _coverage(rng, m, tau, sigma, rows=15, trials=300, level=0.8) -> float:
    """Draw m + 1 groups (shift N(0, tau^2), rows' noise sigma x a skewed law: a centred
    exponential, not normal); the band from m covers what share of the new group's rows."""
    hits = []
    for _ in range(trials):
        shifts = rng.normal(0, tau, m + 1)
        data = [s + sigma * (rng.exponential(1, rows) - 1) for s in shifts]
        g = intervals.group_band(data[:m], level)
        hits.append(np.mean((data[m] >= g.lo) & (data[m] <= g.hi)))
    return float(np.mean(hits))


@pytest.mark.slow
@pytest.mark.parametrize("m, tau, sigma, low, high", [
    (2, 1.0, 0.0, 0.75, 0.85), (3, 0.3, 0.3, 0.75, 0.85), (5, 0.1, 0.5, 0.75, 0.85), (8, 0.05, 1.0, 0.75, 0.85),
    (2, 0.05, 1.0, 0.80, 0.90)])
def test_coverage_on_exchangeable_groups_is_near_nominal(m, tau, sigma, low, high):
    """Exchangeable groups (the law's assumption: normal shifts; the rows' noise any law), 300
    draws at seed 0 (the share's standard error under 0.02): a new group's rows fall inside the
    80% band within 5 points of 80%, from shifts that dominate to noise that does. Two groups
    whose shifts are lost in the noise stay conservative (88% at 1000 draws): one degree of
    freedom's Cauchy shift on a spread that is mostly noise, the price of two groups (90% before
    the medians' own noise came off the shifts' spread, `group_band`)."""
    got = _coverage(np.random.default_rng(0), m, tau, sigma)
    assert low <= got <= high, got


def test_a_shift_unlike_the_groups_falls_outside():
    """The band is no licence: a new group shifted far past the calibrated groups' spread is
    outside it (coverage of the law, not of any group)."""
    rng = np.random.default_rng(1)
    data = [rng.normal(s, 0.05, 40) for s in (-0.1, 0.0, 0.1, 0.05)]
    g = intervals.group_band(data, 0.8)
    assert np.mean((data[0] + 3 >= g.lo) & (data[0] + 3 <= g.hi)) == 0


def test_the_band_a_deployment_takes():
    band = {"level": 0.8, "tpot": [-0.1, 0.1], "ttft": [-0.2, 0.2],
            "by": {"model": {"tpot": [-0.5, 0.4], "ttft": [-1, 1]}, "tp": {"tpot": [-0.2, 0.3], "ttft": [-0.3, 2]}}}
    seen = {"model": ["a"], "tp": [1, 2], "engine": ["vllm"]}
    assert intervals.new_in(seen, "a", 2, "vllm", True) == []
    assert intervals.new_in(seen, "b", 4, "vllm", True) == ["model", "tp"]
    assert intervals.new_in(seen, "a", 1, "vllm", False) == ["engine"]      # a device with no fit of its own
    assert intervals.new_in(None, "a", 1, "vllm", True) is None
    assert intervals.band_for(band, [])[0] == {"tpot": [-0.1, 0.1], "ttft": [-0.2, 0.2]}
    assert intervals.band_for(band, ["model"]) == ({"tpot": [-0.5, 0.4], "ttft": [-1, 1]}, "new model: the group-shift band")
    q, why = intervals.band_for(band, ["model", "tp"])
    assert q == {"tpot": [-0.5, 0.4], "ttft": [-1, 2]} and "union; not measured" in why
    assert intervals.band_for(band, ["engine"]) == (None, "no band for a new engine in the calibration")
    assert intervals.band_for(band, None)[0] == q and "does not list" in intervals.band_for(band, None)[1]


@pytest.fixture(scope="module")
def visible_coverage():
    """The nested coverage of every visible row, each predicted with its model, tp or engine
    left out of the fit."""
    if not V2.is_file():
        pytest.skip("../shared/measured/serving-v2-visible.csv absent: the measured rows are read in place")
    from rooflinec.serving import fitting, measurements, rows, validation
    cases = fitting.prepare(rows.read(str(V2)), measurements.Specs())
    return intervals.coverage(validation.holdouts(cases, fitting.FITTED))


@pytest.mark.slow
def test_nested_coverage_on_the_visible_rows(visible_coverage):
    """Each held-out group against the band of the other groups of its kind: pooled, and for a
    new tp or engine, the two-level band covers at least what the split conformal band did (it
    is wider where the groups' medians differ). Not so for a new model's TTFT: the three models'
    TTFT shifts left out agree closely enough that its band (78.4% covered) is narrower than the
    split conformal one (81.8%), both inside the 75-85% target."""
    cover = visible_coverage
    for by in ("tp", "engine", "all"):
        for w in intervals.WHATS:
            assert cover[by][w] >= cover[by]["split_conformal"][w], (by, w)
    assert cover["model"]["tpot"] >= cover["model"]["split_conformal"]["tpot"]
    assert 0.75 <= cover["model"]["ttft"] <= 0.85
    assert cover["all"]["rows"] == 3 * cover["model"]["rows"]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="pooled TPOT coverage 67.2%, under the 75% target: a new engine's band rests "
                   "on the two other engines' shifts, which agree (SGLang -15.2%, vLLM -19.4% signed TPOT left out) while "
                   "TensorRT-LLM's is +26.7%, so its 376 rows fall outside (new-engine TPOT coverage 32.9%); "
                   "75.8% before the fixed time per kernel and the benchmark recipe moved the engines' shifts")
def test_pooled_nested_coverage_meets_the_target(visible_coverage):
    """Pooled over the kinds the two-level band covers 75-90% of the left-out rows."""
    cover = visible_coverage
    assert 0.75 <= cover["all"]["tpot"] <= 0.90 and 0.75 <= cover["all"]["ttft"] <= 0.90


def _steady_state_calibration(tmp_path, calibrated: str) -> Path:
    """A steady-state calibration (`rooflinec calibrate`'s format) with a left-out bands block."""
    params = "{bandwidth_fraction: 1.0, compute_fraction: 0.5, per_layer_s: 0.0001, per_step_s: 0.0, per_collective_s: 0.0}"
    cal = tmp_path / "cal.yaml"
    cal.write_text(f"fitted: [compute_fraction, per_layer_s]\ndefault: {{parameters: {params}}}\n"
                   f"engines: [{{engine: trtllm, parameters: {params}}}]\n"
                   f"groups: [{{device: h100-sxm, engine: trtllm, parameters: {params}, residuals: {{rows: 10}}}}]\n"
                   "intervals: {level: 0.8, tpot: [-0.1, 0.2], ttft: [-0.5, 0.3],\n"
                   "  by_holdout: {model: {tpot: [-0.4, 0.4], ttft: [-1, 1]}}" + calibrated + "}\n", encoding="utf-8")
    return cal


@pytest.mark.slow
@pytest.mark.parametrize("model, lo, hi, band", [
    ("meta-llama/Llama-3.1-8B-Instruct", -0.1, 0.2, "model, tp and engine calibrated: the pooled band"),
    ("meta-llama/Llama-3.1-70B", -0.4, 0.4, "new model: the group-shift band")])
def test_serve_takes_the_band_of_its_deployment(call, tmp_path, model, lo, hi, band):
    """`serve` under a calibration with left-out bands: TPOT and TTFT each [y e^-hi, y e^-lo]
    of the band its deployment takes (llama-3.1-8b on h100-sxm with trtllm at tp 1: calibrated
    where the file lists its model, a new model's band where it does not)."""
    cal = _steady_state_calibration(tmp_path, f", calibrated: {{model: [{model}], tp: [1], engine: [trtllm]}}")
    code, out, err = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--calibration", cal, "--json")
    assert code == 0, err
    p = json.loads(out)["calibrated"]["points"][0]
    assert p["interval_band"] == band
    _within_band(p["tpot_interval_s"], p["tpot_s"], lo, hi)
    ttft = {"pooled": [-0.5, 0.3], "new": [-1, 1]}["pooled" if "pooled" in band else "new"]
    _within_band(p["ttft_interval_s"], p["ttft_s"], *ttft)
    code, text, err = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--calibration", cal)
    assert "predicted TTFT (80%)" in text and "80% intervals of TPOT and TTFT from the calibration's left-out refits" in text


def test_a_bad_bands_block_in_a_steady_state_calibration_is_located(call, tmp_path):
    cal = _steady_state_calibration(tmp_path, ", calibrated: [1]")
    code, out, err = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--calibration", cal)
    assert code == 1 and "cal.yaml:" in err and "calibrated" in err, err


def _within_band(got, y, lo, hi):
    """[y e^-hi, y e^-lo], the low end raised to the step's bound where the band reached below it
    (intervals.interval's floor): the high end exact, the low end at or above the band's."""
    assert got[1] == pytest.approx(y * math.exp(-lo))
    assert y * math.exp(-hi) * (1 - 1e-9) <= got[0] <= got[1]


@pytest.mark.slow
def test_plan_rows_carry_the_band_of_their_deployment(call, tmp_path):
    """`plan` under a simulator calibration with left-out bands: every row's prediction has
    TPOT and TTFT intervals [y e^-hi, y e^-lo] of its band (tp 1 calibrated: the pooled band;
    tp 2 not: a new tp's), the table its 80% columns and a line naming each band."""
    cal = tmp_path / "cal.yaml"
    cal.write_text("kind: simulator\ndefault:\n  parameters: {compute_fraction: 0.6}\n"
                   "groups: [{device: h100-sxm, engine: vllm, models: dense, parameters: {compute_fraction: 0.6}}]\n"
                   "intervals: {level: 0.8, tpot: [-0.1, 0.2], ttft: [-0.5, 0.3],\n"
                   "  by_holdout: {tp: {tpot: [-0.2, 0.3], ttft: [-2, 0.5]}},\n"
                   "  calibrated: {model: [meta-llama/Llama-3.1-8B-Instruct], tp: [1], engine: [vllm]}}\n",
                   encoding="utf-8")
    args = ("plan", "llama-3.1-8b", "--slo", "tpot<=1s", "--devices", "h100-sxm", "--gpus", 2, "--concurrency", "1,8",
            "--aggregated", "--weights", "bf16", "--kv-cache", "bf16", "--engine", "vllm", "--calibration", cal,
            "--top", "4")     # best per device is one row by default; --top adds the faster per user, tp 2 among them
    code, out, err = call(*args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    rows = [r for rows in doc["best_per_device"].values() for r in rows] + doc["frontier"]
    assert {r["deployment"]["tp"] for r in rows} >= {1, 2}
    for r in rows:
        p, q = r["prediction"], ({"tpot": [-0.1, 0.2], "ttft": [-0.5, 0.3]} if r["deployment"]["tp"] == 1 and
                                 r["deployment"]["pp"] == 1 else None)
        if r["deployment"]["tp"] == 2:
            q = {"tpot": [-0.2, 0.3], "ttft": [-2, 0.5]}
            assert p["interval"]["band"] == "new tp: the group-shift band"
        if q:
            for w in ("tpot", "ttft"):
                _within_band(p["interval"][f"{w}_s"], p[f"{w}_s"], *q[w])
    code, text, err = call(*args)
    assert "80%" in text.splitlines()[next(i for i, l in enumerate(text.splitlines()) if l.startswith("device"))]
    assert "  new tp: the group-shift band" in text


@given(st.floats(1e-6, 10), st.floats(-2, 0), st.floats(0, 2), st.floats(0, 20))
def test_an_interval_never_reaches_below_its_floor(pred, lo, hi, floor):
    """No run is faster than its bound: the band's ends are max(pred e^-hi, floor) and
    max(pred e^-lo, floor), and without a floor the plain conformal ends."""
    a, b = intervals.interval(pred, lo, hi, floor)
    assert a >= floor and b >= floor and a <= b
    assert (a, b) == pytest.approx((max(pred * math.exp(-hi), floor), max(pred * math.exp(-lo), floor)))
    assert intervals.interval(pred, lo, hi) == pytest.approx((pred * math.exp(-hi), pred * math.exp(-lo)))


@pytest.mark.slow
def test_plan_and_serve_bands_start_at_or_above_their_bound(call):
    """The user trial's case: plan's 80% TPOT band ran down to 18.63 ms beside '>= bound 27.30'."""
    code, out, err = call("plan", "llama-3.1-70b", "--slo", "tpot<=50ms", "--json")
    assert code == 0, err
    doc = json.loads(out)
    rows = [r for rows in doc["best_per_device"].values() for r in rows] + doc["frontier"]
    banded = [r for r in rows if (r["prediction"]["interval"] or {}).get("tpot_s")]
    assert banded
    for r in banded:
        assert r["prediction"]["interval"]["tpot_s"][0] >= r["bound"]["tpot_s_at_least"] * (1 - 1e-12)
    choice = calibrated.choose(None, "h200-sxm", None)
    for batch in (1, 64):
        run = calibrated.run(quick._model("mixtral-8x7b"), quick._device("h200-sxm"), "bf16", "bf16", 1, 2048, 4096, batch)
        p, floor = calibrated.predict(choice, run), serving_model.bound(serving_model.costs(run))
        assert p["tpot_interval_s"][0] >= floor.tpot_s and p["ttft_interval_s"][0] >= floor.ttft_s
