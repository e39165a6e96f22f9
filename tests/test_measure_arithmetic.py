"""The arithmetic of `rooflinec measure`, without PyTorch: splitting a profile into op ranges,
rates from repeated timings, and the calibration's spec."""

from types import SimpleNamespace as NS

import pytest

from rooflinec.measure import device, profile
from rooflinec.measure.reference import PREFIX
from rooflinec.measure.timing import Timing


def _event(name, us, children=(), start=0):
    e = NS(name=name, cpu_time_total=us, cpu_children=list(children), cpu_parent=None,
           time_range=NS(start=start))
    for c in children:
        c.cpu_parent = e
    return e


def _step(start, attention_us, inner_us, glue_us):
    """One step: an attention range (with a nested qkv range) and one kernel outside."""
    qkv = _event(PREFIX + "qkv_proj", inner_us)
    attn = _event(PREFIX + "attention", attention_us, [_event("aten::view", 1), qkv])
    return _event(profile.STEP, attention_us + glue_us, [attn, _event("aten::cat", glue_us)], start)


def test_nested_ranges_are_subtracted_and_outside_kernels_listed():
    steps = [_step(0, 100, 30, 10), _step(1, 120, 40, 50), _step(2, 110, 35, 12)]
    events = [e for s in steps for e in _walk(s)]
    p = profile.split(events, on_gpu=False, steps=3, by_op={})
    # attention per step: 100 - 30, 120 - 40, 110 - 35 µs; qkv: 30, 40, 35 µs
    assert p.ops["attention"] == pytest.approx([70e-6, 80e-6, 75e-6])
    assert p.median("qkv_proj") == pytest.approx(35e-6) and p.best("qkv_proj") == pytest.approx(30e-6)
    # the cat outside every range: 10, 50, 12 µs, its median 12 µs
    assert p.unmapped == {"aten::cat": pytest.approx(12e-6)}
    # coverage = (75 + 35) / (75 + 35 + 12)
    assert p.coverage == pytest.approx(110 / 122)


def test_by_op_names_an_outside_kernel():
    s = _step(0, 100, 30, 10)
    p = profile.split(list(_walk(s)), on_gpu=False, steps=1, by_op={"aten::cat": "embed_add"})
    assert p.ops["embed_add"] == pytest.approx([10e-6]) and p.unmapped == {}


def test_a_missing_step_is_an_error():
    with pytest.raises(RuntimeError, match="1 steps, expected 2"):
        profile.split(list(_walk(_step(0, 1, 1, 1))), on_gpu=False, steps=2, by_op={})


def _walk(e):
    yield e
    for c in e.cpu_children:
        yield from _walk(c)


def test_rates_best_and_median():
    # 2n^3 FLOPs for n = 1000: 2 GFLOP in 10, 20 and 40 ms
    t = Timing(2 * 1000**3, (0.02, 0.01, 0.04))
    assert t.best == pytest.approx(200e9) and t.median == pytest.approx(100e9)


def test_the_spec_states_what_was_measured():
    flops = 2 * 1024**3
    cal = device.Calibration(
        name="cpu X", device="cpu", tool="PyTorch on cpu, 1 threads",
        matmul={"fp32": (1024, Timing(flops, (flops / 100e9, flops / 50e9)))},
        # a copy of 128 MiB moves 256 MiB: 2 x 2^27 B in 25 ms is 10.74 GB/s
        copy=Timing(2 * 2**27, (0.025,)), read=Timing(2**27, (0.02,)),
        cache_copy=Timing(2 * 2**23, (0.0002,)), cache_size=2**25, cache_found=True,
        capacity=2**34, quick=True)
    s = device.spec(cal)
    assert s["compute"]["tensor"] == {"fp32": "100 GFLOP/s"}
    assert s["compute"]["vector"] == {"fp32": "100 GFLOP/s"}
    assert s["measured"]["matmul"]["fp32"] == {"n": 1024, "best": "100 GFLOP/s",
                                               "median": "66.67 GFLOP/s", "repeats": 2}
    # bandwidth: the better of copy (10.74 GB/s) and read (2^27 B / 20 ms = 6.711 GB/s)
    assert s["memory"]["bandwidth"] == "10.74 GB/s"
    assert s["cache"] == {"size": "32 MiB", "bandwidth": "83.89 GB/s"}
    assert s["measured"]["copy"]["size"] == "128 MiB"
    assert "SRAM" in s["measured"]["leaves_out"]
