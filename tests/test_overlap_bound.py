"""A printed bound holds under an overlapped schedule: an engine that overlaps communication with
compute (two-batch overlap, an asynchronous all-reduce, DeepEP's) approaches max(kernels,
link), so every bound step takes that max (`roofline.combine`), never the sum; the simulator's
predictions keep the sum (the link after the kernels, as the shipped calibrations were fitted)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rooflinec.base import roofline
from rooflinec.serving import routed_bound, simulator, stepcost as sc
from rooflinec.spec import load as spec

CATALOG = Path(__file__).resolve().parent.parent / "rooflinec/spec/catalog"
H200 = spec.load_hardware(str(CATALOG / "hardware/h200-sxm.yaml"))
PREDICTING = sc.Parameters(0.8, 0.6, 1e-6, 1e-4, 1e-6, 1e-6, 0.0)


@pytest.fixture(scope="module")
def steps():
    """A dense model at tp 8 (its all-reduces and logits all-gather at their least time) and a
    mixture of experts at tp 2 (its routed experts beside them)."""
    model = lambda name: spec.load_model(str(CATALOG / f"models/{name}.yaml"))   # noqa: E731
    return {"llama-3.1-70b": sc.build(sc.Deployment(model("llama-3.1-70b"), H200, 8, "fp8", "fp8")),
            "mixtral-8x7b": sc.build(sc.Deployment(model("mixtral-8x7b"), H200, 2, "bf16", "bf16"))}


def _rows(decodes: list[int], context: int, chunk: int) -> np.ndarray:
    """One step per entry: `decodes` sequences at `context`, and a prompt chunk of `chunk` tokens."""
    x = np.zeros((len(decodes), len(sc.FEATURES)))
    for i, n in enumerate(decodes):
        sizes = np.array([chunk]) if chunk else np.zeros(0, np.int64)
        sc.attend(x[i], None, np.full(n, context - 1, np.int64), np.zeros(len(sizes), np.int64), sizes)
        x[i, sc.ONE], x[i, sc.TOKENS], x[i, sc.LOGITS] = 1, n + chunk, n + bool(chunk)
    return x


def _parts(step, x, p):
    """(the kernels' seconds, the collectives' seconds) per row of x under p."""
    routed, a2a = step.routed_split(x, p)
    return step.kernel_s(x, p) + routed, step.link(x, p) + a2a


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["llama-3.1-70b", "mixtral-8x7b"]), st.lists(st.integers(0, 512), min_size=1, max_size=6),
       st.integers(1, 32768), st.sampled_from([0, 1, 512, 8192]))
def test_every_bound_step_is_the_max_of_its_kernels_and_link_and_the_prediction_their_sum(
        steps, name, decodes, context, chunk):
    step = steps[name]
    x = _rows(decodes, context, chunk)
    kernels, link = _parts(step, x, sc.BOUND)
    bound = step.durations(x, sc.BOUND)
    assert (link > 0).all()       # priced: the property is not 0 = 0
    assert np.all(bound >= np.maximum(kernels, link)) and np.all(bound <= (kernels + link) * (1 + 1e-12))
    assert bound == pytest.approx(np.maximum(kernels, link), rel=1e-12)
    # the prediction: the host's time, the kernels, the collectives after them
    kernels, link = _parts(step, x, PREDICTING)
    assert step.durations(x, PREDICTING) == pytest.approx(step.host(x, PREDICTING) + kernels + link, rel=1e-12)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["llama-3.1-70b", "mixtral-8x7b"]), st.lists(st.integers(1, 256), min_size=1, max_size=4),
       st.integers(1, 16384), st.lists(st.integers(1, 400), min_size=4, max_size=4))
def test_a_retimed_run_bound_is_at_most_its_steps_bounds(steps, name, decodes, context, counts):
    """The simulator's bound per run of decode steps (`simulator.bound_runs`): max(the run's
    kernels, the run's link) lies between the max of the sums and the sum of each step's bound
    (each step's link the same in a run, its kernels growing with the context), so a bound."""
    step = steps[name]
    x0 = _rows(decodes, context, 0)
    steps_n = np.array(counts[:len(decodes)])
    growth = np.stack([sc.growth(None, np.full(n, context - 1), 1)[0] for n in decodes])
    none = np.zeros(0, np.int64)
    sched = simulator.Schedule(x0, steps_n, growth, none, none, none, none)
    runs = simulator.run_times(step, sched, sc.BOUND)
    for r, k in enumerate(steps_n):
        xs = x0[r] + np.arange(k)[:, None] * growth[r]
        kernels, link = _parts(step, xs, sc.BOUND)
        assert max(kernels.sum(), link.sum()) * (1 - 1e-9) <= runs[r] <= step.durations(xs, sc.BOUND).sum() * (1 + 1e-9)
        assert runs[r] == pytest.approx(max(kernels.sum(), link.sum()), rel=1e-9)


@pytest.mark.slow
def test_the_routed_bound_and_serve_take_the_max():
    """routed_bound's step (request bounds, `serve` of a mixture of experts): the collectives
    beside max(compute, memory)."""
    mixtral = spec.load_model(str(CATALOG / "models/mixtral-8x7b.yaml"))
    step = sc.build(sc.Deployment(mixtral, H200, 8, "bf16", "bf16"))
    for batch in (1, 64, 1024):
        out = routed_bound.decode(step, batch, 4096, 2)
        kernels = max(out["compute_s"], out["memory_s"])
        assert out["comm_s"] > 0 and out["time_s"] == roofline.combine(kernels, out["comm_s"], True)
        assert out["time_s"] == max(kernels, out["comm_s"]) < kernels + out["comm_s"]


def test_combine_is_the_max_when_overlapped_and_the_sum_otherwise():
    assert roofline.combine(3.0, 2.0, True) == 3.0 and roofline.combine(3.0, 5.0, True) == 5.0
    assert roofline.combine(3.0, 2.0, False) == 5.0
    got = roofline.combine(np.array([1.0, 4.0]), np.array([2.0, 3.0]), True)
    assert got.tolist() == [2.0, 4.0]
