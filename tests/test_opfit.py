"""The per-op efficiency curve, its fit, the collective fit and the conformal intervals, on
synthetic data whose answers are known."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.serving import intervals, opfit

positive = st.floats(1e3, 1e15, allow_nan=False)
fraction = st.floats(0.01, 1.0)


@pytest.mark.slow
@given(positive, positive, fraction, fraction, st.floats(1.0, 64.0), st.floats(0, 1e-3))
def test_every_curve_is_at_least_the_roofline_bound(flops, nbytes, eta, beta, p, t0):
    # each term is at least its own bound (eta, beta <= 1) and a p-norm at least the max
    bound = opfit.BOUND.time(flops, nbytes, 312e12, 2.039e12)
    t = opfit.Curve(eta, beta, p, t0).time(flops, nbytes, 312e12, 2.039e12)
    assert t >= bound * (1 - 1e-12)


@pytest.mark.slow
@given(positive, positive, st.floats(1.0, 64.0))
def test_the_p_norm_lies_between_the_max_and_two_to_the_one_over_p_times_it(a, c, p):
    s = opfit.smooth(np.array(a), np.array(c), p)
    assert max(a, c) * (1 - 1e-12) <= s <= 2 ** (1 / p) * max(a, c) * (1 + 1e-12)


def test_p_one_is_the_sum_and_infinity_the_roofline_max():
    # p = 1: 3 + 4 = 7; p = 2: sqrt(9 + 16) = 5; p = inf: max = 4
    a, c = np.array([3.0]), np.array([4.0])
    assert opfit.smooth(a, c, 1.0)[0] == pytest.approx(7.0)
    assert opfit.smooth(a, c, 2.0)[0] == pytest.approx(5.0)
    assert opfit.smooth(a, c, math.inf)[0] == 4.0
    assert opfit.smooth(np.array([0.0]), np.array([0.0]), 2.0)[0] == 0.0


def test_the_fit_recovers_the_parameters_that_made_the_times():
    # GEMM-like kernels M x 4096 x 4096 in fp16, M from 1 to 8192, timed by a known curve
    m = np.unique(np.geomspace(1, 8192, 60).round())
    flops, nbytes = 2 * m * 4096 * 4096, 2 * (4096 * 4096 + 2 * m * 4096)
    truth = opfit.Curve(0.7, 0.85, 3.0, 5e-6)
    k = opfit.Kernels(flops, nbytes, np.full(len(m), 312e12), 2.039e12, truth.time(flops, nbytes, 312e12, 2.039e12))
    got = opfit.fit(k)
    assert got.compute_fraction == pytest.approx(0.7, rel=1e-3)
    assert got.bandwidth_fraction == pytest.approx(0.85, rel=1e-3)
    assert got.sharpness == pytest.approx(3.0, rel=1e-2)
    assert got.overhead_s == pytest.approx(5e-6, rel=1e-2)


def test_the_link_fit_recovers_latency_and_bus_bandwidth():
    # t = 20 us + V / 150 GB/s over 2 KiB .. 64 MiB; an 8-GPU ring sends 2 * 7/8 of the buffer
    size = np.geomspace(2048, 64 * 2**20, 40)
    v = opfit.volume("all_reduce", 8, size)
    assert v[0] == pytest.approx(2048 * 1.75)
    link = opfit.fit_link(v, 20e-6 + v / 150e9)
    assert link.latency_s == pytest.approx(20e-6, rel=1e-4)
    assert link.bus_bandwidth == pytest.approx(150e9, rel=1e-4)


# --- conformal intervals --------------------------------------------------------------------

def test_quantiles_pick_the_conformal_order_statistics():
    # n = 19, level 0.8: lo is the floor(20 * 0.1) = 2nd smallest, hi the ceil(20 * 0.9) = 18th
    r = np.arange(1, 20, dtype=float)
    assert intervals.quantiles(r, 0.8) == (2.0, 18.0)


def test_too_few_residuals_are_refused():
    # 8 rows: floor(9 * 0.1) = 0, no lower order statistic
    with pytest.raises(intervals.TooFewRows, match="need at least 9"):
        intervals.quantiles(np.zeros(8), 0.8)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["normal", "laplace", "skewed"])
def test_coverage_on_exchangeable_synthetic_residuals_is_the_level(seed, kind):
    # split conformal guarantees level <= E[coverage] <= level + 2 / (n + 1) for exchangeable
    # rows; 400 trials of n = 99 calibration and 50 test rows estimate it with a standard error of
    # about 0.0035 (per trial: Beta(80, 20)'s spread of the conditional coverage plus 50 test rows); the
    # seeds are fixed because a +-0.015 band is 4.3 standard errors, which a random seed crosses once
    # in a long while (seed 1094, normal: 0.78485)
    rng = np.random.default_rng(seed)
    draw = {"normal": lambda size: rng.normal(0, 0.1, size), "laplace": lambda size: rng.laplace(0, 0.1, size),
            "skewed": lambda size: rng.lognormal(0, 0.5, size) - 1}[kind]
    hits = []
    for _ in range(400):
        lo, hi = intervals.quantiles(draw(99), 0.8)
        test = draw(50)
        hits.append(((test >= lo) & (test <= hi)).mean())
    assert 0.8 - 0.015 <= np.mean(hits) <= 0.8 + 2 / 100 + 0.015


def test_covered_and_interval_agree():
    # log(pred / measured) in [lo, hi]  <=>  measured in [pred e^-hi, pred e^-lo]
    pred, measured = np.array([1.0, 1.0, 1.0]), np.array([0.5, 1.0, 2.0])
    lo, hi = -0.1, 0.2
    a, b = intervals.interval(pred, lo, hi)
    assert list(intervals.covered(pred, measured, lo, hi)) == list((measured >= a) & (measured <= b)) == [False, True, False]
