"""The simulator calibration's loss and its rule for a group it has no fit of: soft-L1 on the
log ratios (`fitting.soft_l1`) and `calibration.resolve` (an engine's host times with a kind's
compute fraction), in a calibration file's `kinds` block and read back with located errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rooflinec.base.errors import SpecError
from rooflinec.serving import calibration, fitting
from rooflinec.serving import stepcost as sc


def test_soft_l1_golden():
    """scipy.optimize.least_squares' soft_l1 at f_scale s: rho(z) = 2 (sqrt(1 + z) - 1), z = (r/s)^2,
    cost s^2 rho. At s = 0.1 and r = 0.1 sqrt(8): z = 8, rho = 2 (3 - 1) = 4, so r'^2 = 0.01 x 4 and
    r' = 0.2; a residual of the opposite sign keeps its sign; scale 0 is least squares."""
    r = np.array([0.1 * math.sqrt(8), -0.1 * math.sqrt(8), 0.0])
    assert fitting.soft_l1(r, 0.1) == pytest.approx([0.2, -0.2, 0.0])
    assert list(fitting.soft_l1(r, 0)) == list(r)


@settings(max_examples=20, deadline=None)
@given(st.floats(-50, 50), st.floats(1e-3, 1.0))
def test_soft_l1_counts_small_residuals_as_squares_and_large_ones_linearly(r, s):
    got = float(fitting.soft_l1(np.array([r]), s)[0])
    assert got ** 2 == pytest.approx(2 * s * s * (math.sqrt(1 + (r / s) ** 2) - 1), rel=1e-9, abs=1e-300)
    assert abs(got) <= abs(r) * (1 + 1e-12) and math.copysign(1, got) == math.copysign(1, r) or r == 0
    assert got ** 2 <= 2 * s * abs(r) * (1 + 1e-9)      # the loss grows at most linearly


P = {name: sc.Parameters(compute_fraction=cf, per_layer_s=pl, request_latency_s=lat)
     for name, cf, pl, lat in (("vllm-moe", 0.2, 5e-5, 0.01), ("vllm", 0.3, 6e-5, 0.02),
                               ("h200-dense", 0.8, 1e-4, 0.3), ("dense", 0.7, 2e-4, 0.4), ("all", 0.5, 3e-5, 0.1))}


def lookup(present):
    keys = {("group", "h200", "vllm", "moe"): "vllm-moe", ("engine", "vllm"): "vllm",
            ("kind", "h200", "dense"): "h200-dense", ("kind", None, "dense"): "dense", ("default",): "all"}
    return lambda key: P[keys[key]] if key in keys and keys[key] in present else None


def test_a_group_without_a_fit_takes_its_engines_times_and_its_kinds_compute_fraction():
    everything = set(P)
    # its own fit first
    assert calibration.resolve(("h200", "vllm", "moe"), lookup(everything)) == P["vllm-moe"]
    # a dense model on (h200, vllm): the MoE group's host times, dense models' fraction on
    # every device (a per-device kind, as older files hold, is not used)
    got = calibration.resolve(("h200", "vllm", "dense"), lookup(everything))
    assert (got.per_layer_s, got.request_latency_s, got.compute_fraction) == (5e-5, 0.01, 0.7)
    assert calibration.resolve(("h200", "vllm", "dense"), lookup(everything - {"h200-dense"})) == got
    # a device without the engine's other group: the engine's pooled times
    got = calibration.resolve(("b200", "vllm", "dense"), lookup(everything))
    assert (got.per_layer_s, got.request_latency_s, got.compute_fraction) == (6e-5, 0.02, 0.7)
    # no fit of that kind anywhere: the engine's own
    assert calibration.resolve(("b200", "vllm", "dense"), lookup(everything - {"dense", "h200-dense"})) == P["vllm"]
    # an engine with no rows: the pooled fit, whatever the kinds hold
    assert calibration.resolve(("h200", "sglang", "dense"), lookup(everything)) == P["all"]


def test_the_experts_bandwidth_fraction_is_a_fraction_fitted_on_moe_rows_and_composed_with_the_kind():
    # a fraction on the logistic coordinate, as the compute fraction; starts near 1 (0.95)
    got = fitting.parameters(np.array([fitting.START["expert_bandwidth_fraction"]]), ("expert_bandwidth_fraction",))
    assert got.expert_bandwidth_fraction == pytest.approx(1 / (1 + math.exp(-3))) and got.compute_fraction == 1
    # a composed group takes its kind's kernel efficiencies, both of them, and its engine's host times
    kind = sc.Parameters(compute_fraction=0.2, expert_bandwidth_fraction=0.4, per_layer_s=9e-5)
    host = sc.Parameters(compute_fraction=0.9, per_layer_s=5e-5, request_latency_s=0.01)
    keys = {("engine", "vllm"): host, ("kind", None, "moe"): kind}
    got = calibration.resolve(("h200", "vllm", "moe"), keys.get)
    assert (got.compute_fraction, got.expert_bandwidth_fraction, got.per_layer_s, got.request_latency_s) == \
        (0.2, 0.4, 5e-5, 0.01)


def test_the_kinds_block_is_read_back_and_composes(tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text("kind: simulator\ndefault:\n  parameters: {compute_fraction: 0.5}\n"
                   "engines:\n- {engine: vllm, parameters: {compute_fraction: 0.3, per_layer_s: 6.0e-5}}\n"
                   "groups:\n- {device: h200-sxm, engine: vllm, models: moe, parameters: "
                   "{compute_fraction: 0.2, per_layer_s: 5.0e-5}}\n"
                   "kinds:\n- {device: h200-sxm, models: dense, parameters: {compute_fraction: 0.8}}\n"
                   "- {models: dense, parameters: {compute_fraction: 0.7}}\n")
    t = calibration.load(str(cal))
    assert set(t.kinds) == {("h200-sxm", "dense"), (None, "dense")}    # an older file's per-device kind: read, unused
    got = t.of("h200-sxm", "vllm", "dense")
    assert (got.compute_fraction, got.per_layer_s) == (0.7, 5e-5)
    assert t.of("h200-sxm", "vllm", "moe").compute_fraction == 0.2
    assert t.of("b200", "vllm", "dense").compute_fraction == 0.7 and t.of("b200", "sglang", "dense") == t.default
    cal.write_text("kind: simulator\ndefault:\n  parameters: {}\nkinds:\n- {models: sparse, parameters: {}}\n"
                   "- {device: 3, models: dense, parameters: {}}\n- {models: moe, parameters: {compute_fraction: 2}}\n")
    with pytest.raises(SpecError) as err:
        calibration.load(str(cal))
    text = str(err.value)
    assert "models: expected one of dense, moe" in text and "device: expected a device name" in text
    assert "compute_fraction: expected a fraction in (0, 1]" in text
    cal.write_text("kind: simulator\ndefault:\n  parameters: {expert_bandwidth_fraction: 1.5}\n")
    with pytest.raises(SpecError, match="expert_bandwidth_fraction: expected a fraction in"):
        calibration.load(str(cal))
