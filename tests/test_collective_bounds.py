"""A collective's least time (`collectives.least_time`), the one every bound takes: below the
ring's and the one-shot's times, and `serve`'s step bound below the simulator's bound-mode
step of the same step, over models, tp inside and past the NVLink domain, batches, contexts
and storage formats."""

from __future__ import annotations

import json

import pytest
import sympy as sp
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rooflinec.cli import quick
from rooflinec.cost import collectives as C
from rooflinec.cost.deployment import Deployment
from rooflinec.serving import routed_bound, stepcost as sc
from rooflinec.spec import catalog, load


def model(name):
    return load.load_model(catalog.path("models", name))


def device(name):
    return load.load_hardware(catalog.path("hardware", name))


links = st.builds(C.Link, st.just("l"), st.floats(1e9, 2e12), st.one_of(st.none(), st.floats(0, 1e-4)))
# past the scale-up domain: the network's NIC per device, the domain's size, the scale-up port
crossing = st.builds(C.Link, st.just("net"), st.floats(1e9, 2e11), st.one_of(st.none(), st.floats(0, 1e-4)),
                     st.integers(1, 72), st.floats(1e10, 2e12))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.sampled_from(C.KINDS), st.integers(1, 1024), st.floats(0, 1e10), links,
       st.sampled_from([None, True, False]))
def test_the_least_time_is_at_most_the_ring_and_the_one_shot(kind, n, payload, link, in_network):
    least = float(C.least_time(kind, payload, n, link, in_network))
    one_shot = float(C.time(C.fraction(kind, n) * payload, min(n - 1, 1), link))
    assert least <= float(C.ring_time(kind, payload, n, link)) * (1 + 1e-12)
    assert least <= one_shot * (1 + 1e-12)
    # the fabric unknown (None): the smaller of with and without reduction in the network
    assert float(C.least_time(kind, payload, n, link)) <= least * (1 + 1e-12)
    assert least >= 0 and (n > 1 or least == 0)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.sampled_from(C.KINDS), st.integers(2, 1024), st.floats(0, 1e10), crossing,
       st.sampled_from([None, True, False]))
def test_past_the_domain_the_least_time_is_at_most_the_ring_and_at_least_each_cut(kind, n, payload,
                                                                                   link, in_network):
    """The ring past the domain sends over one NIC per hop; the least time is never above it,
    and never below either cut: a device's two ports together, or one domain's NICs."""
    least = float(C.least_time(kind, payload, n, link, in_network))
    assert least <= float(C.ring_time(kind, payload, n, link)) * (1 + 1e-12)
    volume = float(C.least_fraction(kind, n, in_network)) * payload
    latency = link.latency or 0.0
    assert least >= (volume / (link.bandwidth + link.scale_up) + latency) * (1 - 1e-12)
    m = min(link.domain, n - 1)
    crosses = {"all_reduce": payload, "p2p": payload, "all_to_all": m * (n - m) / n * payload}.get(
        kind, (n - m) / n * payload)
    assert least >= (crosses / (m * link.bandwidth) + latency) * (1 - 1e-12)


@pytest.mark.slow
def test_golden_llama_3_1_405b_tp16_prefill_collectives_on_two_h100_nodes():
    """Llama-3.1-405B (Meta's config.json: d_model 16,384, 126 layers, vocabulary 128,256) at
    tp 16 on H100 SXM (NVIDIA H100 datasheet: NVLink 900 GB/s both ways, 450 GB/s each; DGX H100
    datasheet: 8 GPUs per NVSwitch domain, one 400 Gb/s = 50 GB/s ConnectX-7 per GPU; NCCL's
    tuning.cc: 2.7 us network latency), prefill of 2,048 tokens at batch 1. Its collectives:
    2 x 126 row-parallel all-reduces + the embedding's = 253, each of 2,048 x 16,384 x 2 B =
    67,108,864 B, and the logits' all-gather of 128,256 x 2 B = 256,512 B. Least time per
    all-reduce, the 2 domains of 8: max(V / (450 + 50 GB/s), V / (8 x 50 GB/s)) + 2.7 us =
    167.77 us + 2.7 us; the all-gather: a device receives 15/16 of it over its two ports,
    15/16 x 256,512 / 500 GB/s = 0.481 us, the domain's share 8/16 over its 8 NICs at 400 GB/s
    (0.321 us), + 2.7 us. In all 253 x 170.47 us + 3.18 us = 43.13 ms; one GPU's NIC alone
    (the defect) gave 253 x 67,108,864 / 50 GB/s = 339.6 ms."""
    m, dev = model("llama-3.1-405b"), device("h100-sxm")
    storage = {"weights": "fp8", "kv_cache": "fp8"}
    dtype, storage = quick.compute(m, dev, None, storage)
    section = quick.serving_section(m, dev, dtype, [1], 4096, 2048, 16, storage)
    comm = section["prefill"][0]["devices"][0]["comm_s"]
    v = 2048 * 16384 * 2
    all_reduce = max(v / 500e9, v / 400e9) + 2.7e-6
    gather = 15 / 16 * 128256 * 2
    all_gather = max(gather / 500e9, 8 / 16 * 128256 * 2 / 400e9) + 2.7e-6
    assert comm == pytest.approx(253 * all_reduce + all_gather, rel=1e-9)
    assert comm < 253 * v / 50e9 / 7      # the defect's one NIC, 339.6 ms, no longer


@pytest.mark.slow
def test_serve_says_a_single_tp_group_crosses_its_domain():
    import io
    from rooflinec.cli.app import run
    args = ["serve", "llama-3.1-405b", "--device", "h100-sxm", "--tp", "16", "--batch", "1",
            "--weights", "fp8", "--kv-cache", "fp8"]
    out = io.StringIO()
    assert run(args, out, io.StringIO()) == 0
    assert "crosses the NVLink 4 (NVSwitch) domain of 8 devices" in out.getvalue()
    out = io.StringIO()
    assert run(args + ["--json"], out, io.StringIO()) == 0
    assert "over InfiniBand NDR" in json.loads(out.getvalue())["crossing"]


def test_the_least_all_reduce_sends_the_payload_once_and_pays_one_latency():
    # in-network (or unknown): V once; without: the ring's 2(n-1)/n V, one latency still
    assert C.least_fraction("all_reduce", 8) == 1 and C.least_fraction("all_reduce", 8, True) == 1
    assert C.least_fraction("all_reduce", 8, False) == sp.Rational(7, 4)
    assert C.least_fraction("all_reduce", 2) == 1 == C.fraction("all_reduce", 2)
    # the other kinds: no algorithm moves less than the ring, only its latencies are its own
    for kind in ("reduce_scatter", "all_gather", "all_to_all"):
        assert C.least_fraction(kind, 8) == sp.Rational(7, 8) == C.fraction(kind, 8)
    assert C.least_fraction("p2p", 2) == 1
    assert [C.least_steps(k, 8) for k in C.KINDS] == [1] * 5 and C.least_steps("all_reduce", 1) == 0
    with pytest.raises(ValueError, match="unknown collective"):
        C.least_fraction("broadcast", 4)


def _serve_and_simulate(name, key, tp, batch, context, weights, kv):
    """(serve's step bound, the simulator's bound-mode step) for one decode step, or None where
    serve does not price it (the weights do not fit, or tp does not divide the model)."""
    m, dev = model(name), device(key)
    dtype, storage = quick.compute(m, dev, None, {"weights": weights, "kv_cache": kv})
    dep = Deployment(m, dev, tp, weights, kv)
    try:
        dep.check()
    except Exception:      # tp does not divide the model's heads or width
        return None
    section = quick.least_work(quick.serving_section(m, dev, dtype, [batch], context, 1024, tp, storage),
                               m, dev, tp, dtype, storage, {})
    step = section["steps"][0]["devices"][0]
    step_model = sc.build(dep)
    x = routed_bound._decode(batch, context, step_model.window)
    return step, float(step_model.durations(x, sc.BOUND)[0])


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "gemma-2-9b"]),
       st.sampled_from(["h100-sxm", "h200-sxm"]), st.sampled_from([1, 2, 4, 8, 16]),
       st.integers(1, 512), st.integers(1, 32768), st.sampled_from([("bf16", "bf16"), ("fp8", "fp8"),
                                                                     ("fp8", "bf16")]))
@example("llama-3.1-70b", "h200-sxm", 8, 64, 4096, ("fp8", "fp8"))      # the defect's case
@example("llama-3.1-70b", "h100-sxm", 16, 1, 8, ("bf16", "bf16"))       # past the domain: InfiniBand
def test_serves_step_bound_is_at_most_the_simulators_bound_step(name, key, tp, batch, context, formats):
    """The same step, priced twice: serve's bound (overlapped rule, the collectives' least time
    on the workbench's link) never exceeds the simulator's bound mode (each kernel's max summed,
    the same collectives at the same least time): max(sum c, sum m) <= sum max(c, m)."""
    got = _serve_and_simulate(name, key, tp, batch, context, *formats)
    if got is None:
        return
    step, simulated = got
    assert step["time_s"] <= simulated * (1 + 1e-9)


@pytest.mark.slow
def test_golden_llama_3_1_70b_tp8_fp8_batch_64_on_h200():
    """Llama-3.1-70B (Meta's config.json: d_model 8192, 80 layers, vocabulary 128,256) at tp 8 on
    H200 SXM (NVLink 4, 900 GB/s both directions = 450 GB/s per direction, datasheet; 0.47 us a
    message, NCCL's cost model), fp8 weights and KV cache, bf16 activations, batch 64, context
    4,096. The step's collectives are the embedding's all-reduce and two a layer, 161 of the
    64 x 8192 x 2 B = 1,048,576 B activations, and the logits all-gather of 64 x 128,256 x 2 B =
    16,416,768 B. Least time: an all-reduce 1,048,576 / 450e9 + 0.47 us = 2.8002 us (161 x: 450.83
    us); the all-gather 7/8 x 16,416,768 / 450e9 + 0.47 us = 32.392 us; 483.22 us in all. The
    ring's (the old bound) was 161 x (7/4 x 1,048,576 / 450e9 + 14 x 0.47 us) + 7/8 x 16,416,768 /
    450e9 + 7 x 0.47 us = 1.7511 ms, 1.27 ms above. The step bound is max(kernels, collectives)
    (an engine may overlap them): the kernels' memory term, 3.1677 ms, hides the 483.22 us (after
    the kernels, the old sum, it was 3.1677 + 0.48322 = 3.6509 ms)."""
    step, simulated = _serve_and_simulate("llama-3.1-70b", "h200-sxm", 8, 64, 4096, "fp8", "fp8")
    reduce = 64 * 8192 * 2
    gather = 64 * 128256 * 2
    least = 161 * (reduce / 450e9 + 0.47e-6) + (7 / 8 * gather / 450e9 + 0.47e-6)
    ring = 161 * (7 / 4 * reduce / 450e9 + 14 * 0.47e-6) + (7 / 8 * gather / 450e9 + 7 * 0.47e-6)
    assert least == pytest.approx(483.22e-6, rel=1e-4) and ring == pytest.approx(1.7511e-3, rel=1e-4)
    assert step["comm_s"] == pytest.approx(least, rel=1e-9)
    assert step["memory_s"] == pytest.approx(3.1677e-3, rel=1e-4) and step["memory_s"] > step["compute_s"]
    assert step["time_s"] == pytest.approx(max(step["compute_s"], step["memory_s"], least), rel=1e-12)
    assert step["time_s"] == pytest.approx(step["memory_s"], rel=1e-12) and step["bound"] == "memory"
    assert step["time_s"] <= simulated


@pytest.mark.slow
def test_serve_tp8_bound_is_at_most_simulate_bound_itl(call):
    """The defect as it was seen: Llama-3.1-70B fp8 at tp 8, 64 clients of 128-token prompts and
    128 output tokens on H200. Every decode step the simulator replays holds its 64 sequences at
    contexts of at least 129 tokens, so serve's bound at batch 64 and context 129 must be at most
    its bound-mode ITL p50 (the ring's collectives had put it 1.0 ms above: 3.84 ms against 2.83)."""
    args = ["llama-3.1-70b", "--device", "h200-sxm", "--tp", "8", "--weights", "fp8", "--kv-cache", "fp8"]
    code, out, err = call("serve", *args, "--batch", "64", "--context", "129", "--prompt", "128", "--json")
    assert code == 0, err
    step = json.loads(out)["serving"]["steps"][0]["devices"][0]
    code, out, err = call("simulate", *args, "--engine", "trtllm", "--concurrency", "64", "--isl", "128",
                          "--osl", "128", "--bound", "--requests", "128", "--json")
    assert code == 0, err
    assert step["time_s"] <= json.loads(out)["replay"]["itl_s"]["p50"]   # the replay's step at the bound


def test_the_simulators_bound_takes_the_least_time_its_prediction_the_one_shot():
    """At BOUND the step model's collectives are the least time (`StepModel.link_bound_s`), at any
    other parameters the one-shot all-reduces the calibration was fitted with (`link_s`)."""
    dep = Deployment(model("llama-3.1-8b"), device("h100-sxm"), 8, "bf16", "bf16")
    step_model = sc.build(dep)
    x = routed_bound._decode(32, 1024, step_model.window)
    reduce, gather = 32 * 4096 * 2, 32 * 128256 * 2
    # predicted: two one-shot all-reduces a layer (as fitted); the bound: the serving bound's
    # collectives, the embedding's all-reduce and the logits all-gather too
    assert step_model.collectives == 64
    one_shot = 64 * (7 / 4 * reduce / 450e9 + 0.47e-6)
    least = 65 * (reduce / 450e9 + 0.47e-6) + 7 / 8 * gather / 450e9 + 0.47e-6
    assert step_model.link(x, sc.Parameters(per_layer_s=1e-6))[0] == pytest.approx(one_shot, rel=1e-9)
    assert step_model.link(x, sc.BOUND)[0] == pytest.approx(least, rel=1e-9)


@pytest.mark.slow
def test_a_moe_step_bound_at_plain_tp_is_at_most_the_simulators_bound_step():
    """Qwen3-30B-A3B (128 experts, k = 8) at tp 2 on H100, batch 16 at context 2,048: 16 tokens
    are expected to touch E(1 - (1 - k/E)^16) = 82.4 of the 128 experts under uniform routing,
    but a routing sending every token to the same 8 reads 8, so serve's bound reads 8 (it read
    82.4 before: 6.5 ms where a correct run may take 1.5 ms)."""
    step, simulated = _serve_and_simulate("qwen3-30b-a3b", "h100-sxm", 2, 16, 2048, "bf16", "bf16")
    assert step["time_s"] <= simulated * (1 + 1e-9)
