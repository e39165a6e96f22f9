"""The serving model's formulas: golden values with their arithmetic, and properties."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.cost import collectives as C
from rooflinec.cost import kvcache, parallel, program_costs
from rooflinec.cost.deployment import Deployment
from rooflinec.model import params
from rooflinec.spec import load as spec
from rooflinec.serving import serving_model as sm
from rooflinec.model.symbols import B, S, V, d_ff, n_kv, n_q
from rooflinec.model.symbol_table import model_values

ROOT = Path(__file__).resolve().parent.parent
LLAMA_8B = spec.load_model(str(ROOT / "rooflinec/spec/catalog/models/llama-3.1-8b.yaml"))
LLAMA_70B = spec.load_model(str(ROOT / "rooflinec/spec/catalog/models/llama-3.1-70b.yaml"))
H100 = spec.load_hardware(str(ROOT / "rooflinec/spec/catalog/hardware/h100-sxm.yaml"))
H200 = spec.load_hardware(str(ROOT / "rooflinec/spec/catalog/hardware/h200-sxm.yaml"))


def total(model) -> int:
    return int(params.count(model).total.subs(model_values(model)))


def test_llama_3_1_8b_parameter_count():
    # Llama-3.1-8B-Instruct model card (Hugging Face): 8,030,261,248 parameters (safetensors).
    # From config.json: embed and untied head 2 x 128256 x 4096 = 1,050,673,152;
    # per layer q, o 2 x 4096^2 + k, v 2 x 4096 x 1024 = 41,943,040, MLP 3 x 4096 x 14336 =
    # 176,160,768, two norms 8,192 -> 218,112,000 x 32 = 6,979,584,000; final norm 4,096.
    assert total(LLAMA_8B) == 1_050_673_152 + 6_979_584_000 + 4_096 == 8_030_261_248


def test_llama_3_1_70b_parameter_count():
    # Llama-3.1-70B model card (Hugging Face): 70,553,706,496 parameters (safetensors).
    # embed and head 2 x 128256 x 8192 = 2,101,346,304; per layer q, o 2 x 8192^2 + k, v
    # 2 x 8192 x 1024 = 150,994,944, MLP 3 x 8192 x 28672 = 704,643,072, norms 16,384 ->
    # 855,654,400 x 80 = 68,452,352,000; final norm 8,192.
    assert total(LLAMA_70B) == 2_101_346_304 + 68_452_352_000 + 8_192 == 70_553_706_496


def test_hf_ids_name_the_models():
    assert LLAMA_8B.hf_id == "meta-llama/Llama-3.1-8B-Instruct"
    assert LLAMA_70B.hf_id == "meta-llama/Llama-3.1-70B"


def test_nvlink_figures():
    # NVIDIA H100 / H200 Tensor Core GPU datasheets: NVLink 900 GB/s, both directions together
    for dev in (H100, H200):
        assert dev.link_bandwidth == 900e9 / 2
        # no datasheet states a latency: NCCL's cost model (src/graph/tuning.cc, hwLat, NVLink,
        # ring, LL protocol) charges 0.47 us per ring step; DGX H100/H200: 8 GPUs per NVSwitch
        assert dev.link_latency == pytest.approx(0.47e-6)
        assert dev.link_domain == 8


def test_ring_all_reduce_golden():
    # 8 devices, 1 MB: reduce-scatter 7/8 MB + all-gather 7/8 MB = 1.75 MB per device
    assert float(C.fraction("all_reduce", 8)) * 1e6 == pytest.approx(1.75e6)
    assert C.fraction("all_reduce", 1) == 0


@pytest.mark.slow
@given(st.floats(1, 1e12), st.integers(1, 1024))
def test_ring_all_reduce_grows_with_devices_and_stays_below_twice_the_payload(payload, n):
    sent = float(C.fraction("all_reduce", n)) * payload
    assert 0 <= sent < 2 * payload
    assert float(C.fraction("all_reduce", n + 1)) * payload >= sent


def test_shard_70b_at_tp8():
    # 64 query heads / 8 = 8; 8 KV heads / 8 = 1; 28672 / 8 = 3584; 128256 / 8 = 16032
    shares, values = parallel.per_device(LLAMA_70B, 8), model_values(LLAMA_70B)
    assert [int(shares[s].subs(values)) for s in (n_q, n_kv, d_ff, V)] == [8, 1, 3584, 16032]


def test_kv_heads_replicate_beyond_their_count():
    # 8 KV heads over tp 16: each device still holds one (a replica), never zero
    m = replace(LLAMA_8B, n_heads=32)
    assert parallel.per_device(m, 16)[n_kv] == 1
    assert kvcache.per_token(m, 2, tp=16) == 2 * 32 * 1 * 128 * 2
    assert Deployment(m, tp=16).kv_per_token() == 2 * 32 * 1 * 128 * 2


def test_shard_refuses_a_degree_that_splits_a_head():
    with pytest.raises(sm.Unpredictable, match="does not divide"):
        sm.checked(Deployment(LLAMA_8B, tp=3))


def test_kv_and_weight_bytes_golden():
    # K and V per token: 2 x 32 layers x 8 heads x 128 x 2 B = 131,072 B (bf16, tp 1)
    assert kvcache.per_token(LLAMA_8B, 2) == 131_072
    # 70B at fp8 over 4 devices: 80 layers x 2 x (8/4) x 128 x 1 B = 40,960 B per token per device
    assert kvcache.per_token(LLAMA_70B, 1, tp=4) == 40_960
    assert Deployment(LLAMA_70B, weights="fp8").weight_bytes() == 70_553_706_496
    # 8B at tp 2: the 65 RMSNorms (2 per layer + the final one) x 4096 = 266,240 weights stay
    # whole on each device, the rest halves: ((8,030,261,248 - 266,240) / 2 + 266,240) x 2 B
    assert Deployment(LLAMA_8B, tp=2).weight_bytes() == ((8_030_261_248 - 266_240) // 2 + 266_240) * 2


def test_llama_70b_weights_at_tp16_replicate_kv_heads():
    """The one weight-bytes figure (the deployment's), at a tp past the 8 KV heads, from
    meta-llama/Llama-3.1-70B's config.json (d_model 8192, 64 heads of 128, 8 KV heads, d_ff
    28672, 80 layers, vocabulary 128256, untied embeddings). Per layer per device: q and o
    8192 x 512 each (4 of the 64 heads), k and v one replicated KV head each, 2 x 8192 x 128,
    gate, up and down 3 x 8192 x 1792, two norms of 8192: 54,542,336; x 80 = 4,363,386,880;
    embedding and LM head 2 x 8016 x 8192 = 131,334,144; the final norm 8192: 4,494,729,216
    parameters, 1.9% above 70,553,706,496 / 16 (the even split an earlier owner printed)."""
    dep = Deployment(LLAMA_70B, tp=16)
    per_layer = 2 * 8192 * 512 + 2 * 8192 * 128 + 3 * 8192 * 1792 + 2 * 8192
    assert dep.params_per_device() == 80 * per_layer + 2 * 8016 * 8192 + 8192 == 4_494_729_216
    assert dep.weight_bytes() == 2 * 4_494_729_216
    assert dep.params_per_device() / (70_553_706_496 / 16) == pytest.approx(1.0193, abs=1e-4)


def test_sequences_that_fit_golden():
    # 70B fp8 on one H200: (141e9 - 70,553,706,496) B free / (163,840 B x (1024 + 8192/2)) = 83.98
    run = sm.Run(LLAMA_70B, H200, "fp8", 1, 1024, 8192, 128)
    assert sm.sequences_that_fit(run) == pytest.approx((141e9 - 70_553_706_496) / (163_840 * 5120))


def test_tp1_decode_step_is_todays_decode_ledger():
    """At tp 1 with no prefill, the step at the bound is the decode ledger's time (the serving
    model's variant and conventions)."""
    run = sm.Run(LLAMA_8B, H100, "bf16", 1, 1024, 256, 16)
    step = sm.step_cost(run, 16, 1152, 0)
    bench = program_costs._bench(LLAMA_8B)
    prog = bench.program("decode", program_costs.VARIANT, H100)
    ref = bench.ledger(prog, H100, {B: 16, S: 1152})
    assert step.time(sm.BOUND) == pytest.approx(ref.time, rel=1e-12)
    assert step.collectives == 0 and step.link_s == 0


def test_tp_step_has_two_all_reduces_per_layer():
    # 70B at tp 4, 16 tokens: 160 all-reduces of 16 x 8192 x 2 B = 262,144 B; ring 1.5 x that,
    # plus one NVLink latency (0.47 us) each: inside the NVLink domain engines run small
    # all-reduces one-shot (the calibration was fitted so)
    run = sm.Run(LLAMA_70B, H200, "fp8", 4, 1024, 1024, 16)
    step = sm.step_cost(run, 16, 1536, 0)
    assert step.collectives == 160
    assert step.link_s == pytest.approx(160 * (1.5 * 262_144 / 450e9 + 0.47e-6))


def test_a_tp_group_past_the_nvlink_domain_times_its_collectives_over_scale_out():
    """70B at tp 16 on H100 (NVLink domains of 8): the serving bound's collectives
    (deployment.collectives) by its ring model over InfiniBand NDR, 50 GB/s and 2.7 us a step:
    161 all-reduces of 16 x 8192 x 2 B, 2 x 15/16 of it and 30 steps each; the logits all-gather, 15/16 of 16 x 128,256 x 2 B and 15 steps. The latencies
    alone, 161 x 30 x 2.7 us = 13.04 ms, are what the one-shot NVLink model left out."""
    run = sm.Run(LLAMA_70B, H100, "bf16", 16, 1024, 1024, 16)
    step = sm.step_cost(run, 16, 1536, 0)
    assert step.collectives == 162
    all_reduces = 161 * (2 * 15 / 16 * 262_144 / 50e9 + 30 * 2.7e-6)
    gather = 15 / 16 * 4_104_192 / 50e9 + 15 * 2.7e-6
    assert step.link_s == pytest.approx(all_reduces + gather, rel=1e-12)
    assert 161 * 30 * 2.7e-6 == pytest.approx(13.041e-3, rel=1e-4)


def test_fp8_weights_halve_weight_traffic_and_use_the_fp8_peak():
    bf16 = sm.step_cost(sm.Run(LLAMA_70B, H200, "bf16", 8, 1024, 1024, 1), 1, 1024, 0)
    fp8 = sm.step_cost(sm.Run(LLAMA_70B, H200, "fp8", 8, 1024, 1024, 1), 1, 1024, 0)
    assert fp8.memory_s.sum() < 0.6 * bf16.memory_s.sum()     # weights dominate a batch-1 step
    # the largest GEMM on the fp8 peak (1978.9 TFLOP/s) against the bf16 one (989.4 TFLOP/s)
    assert fp8.compute_s.max() == pytest.approx(bf16.compute_s.max() * 989.4 / 1978.9, rel=1e-9)


efficiencies = st.builds(sm.Efficiency, st.floats(0.05, 1), st.floats(0.05, 1), st.floats(0, 1e-3),
                         st.floats(0, 1e-2), st.floats(0, 1e-4))
STEP = sm.step_cost(sm.Run(LLAMA_8B, H100, "bf16", 2, 2048, 256, 32), 32, 2176, 0.25)


@pytest.mark.slow
@given(efficiencies)
def test_the_bound_is_below_every_calibrated_step(eff):
    assert STEP.time(sm.BOUND) <= STEP.time(eff)


@pytest.mark.slow
@given(efficiencies, st.floats(1.01, 4))
def test_step_time_falls_as_efficiency_rises(eff, k):
    better = replace(eff, bandwidth_fraction=min(1, eff.bandwidth_fraction * k),
                     compute_fraction=min(1, eff.compute_fraction * k))
    assert STEP.time(better) <= STEP.time(eff)


@settings(max_examples=20)
@given(st.floats(0, 2), st.floats(0.01, 2))
def test_more_prefill_never_makes_a_step_faster(prefill, more):
    run = sm.Run(LLAMA_8B, H100, "bf16", 1, 1024, 128, 8)
    a = sm.step_cost(run, 8, 1088, prefill).time(sm.BOUND)
    assert sm.step_cost(run, 8, 1088, prefill + more).time(sm.BOUND) >= a


def test_ttft_has_no_wait_when_every_sequence_fits():
    run = sm.Run(LLAMA_8B, H100, "bf16", 1, 1024, 128, 8)
    c = sm.costs(run)
    assert c.concurrency == 8
    assert sm.predict(run, c, sm.BOUND).ttft_s == c.first.time(sm.BOUND)


def test_ttft_waits_by_littles_law_when_memory_caps_concurrency():
    run = sm.Run(LLAMA_70B, H200, "fp8", 1, 1024, 8192, 128)
    c = sm.costs(run)
    assert c.concurrency == pytest.approx(sm.sequences_that_fit(run)) and c.concurrency < 128
    p = sm.predict(run, c, sm.BOUND)
    prefill = c.first.time(sm.BOUND)
    assert p.ttft_s == pytest.approx(prefill + (128 / c.concurrency - 1) * (prefill + 8192 * p.tpot_s))


def test_weights_that_do_not_fit_are_unpredictable():
    small = replace(H100, capacity=10e9)
    with pytest.raises(sm.Unpredictable, match="weights need"):
        sm.costs(sm.Run(LLAMA_8B, small, "bf16", 1, 1024, 128, 8))


def test_tp_needs_an_interconnect():
    """No scale-up link: the collectives go over the scale-out network, as the bound's do
    (Workbench.link); with neither, the step is unpredictable."""
    run = sm.Run(LLAMA_8B, replace(H100, link_bandwidth=None), "bf16", 2, 1024, 128, 8)
    over_ib = sm.step_cost(run, 8, 1088, 0).link_s
    assert over_ib > sm.step_cost(replace(run, device=H100), 8, 1088, 0).link_s
    bare = replace(H100, link_bandwidth=None, network_bandwidth=None)
    with pytest.raises(sm.Unpredictable, match="interconnect"):
        sm.step_cost(replace(run, device=bare), 8, 1088, 0)


def test_a_device_without_a_vector_or_fp8_peak_is_unpredictable():
    run = sm.Run(LLAMA_8B, replace(H100, vector={}), "bf16", 1, 1024, 128, 8)
    with pytest.raises(sm.Unpredictable, match="vector peak"):
        sm.step_cost(run, 8, 1088, 0)
    # fp8 weights where the device has no fp8 peak run weight-only, on bf16 GEMMs: a device
    # with neither peak cannot run them
    run = sm.Run(LLAMA_8B, replace(H100, tensor={"fp16": 989.4e12}), "fp8", 1, 1024, 128, 8)
    with pytest.raises(sm.Unpredictable, match="no tensor peak for bf16"):
        sm.step_cost(run, 8, 1088, 0)


def test_mean_context():
    assert sm.mean_context(sm.Run(LLAMA_8B, H100, "bf16", 1, 1000, 300, 1)) == 1150
    assert math.isclose(sm.mean_context(sm.Run(LLAMA_8B, H100, "bf16", 1, 1, 1, 1)), 1.5)


@pytest.mark.slow
def test_attention_dp_with_expert_parallelism_steps_one_rank_and_adds_the_all_to_alls():
    """DeepSeek-V3 at attention DP 8 x EP 8: C = 512 clients are 64 per rank; the steady
    step's link time is its dispatch and combine all-to-alls alone (tp 1: no all-reduce), two per
    MoE layer at the step's tokens (program_costs.all_to_all_s)."""
    deepseek = spec.load_model(str(ROOT / "rooflinec/spec/catalog/models/deepseek-v3.yaml"))
    run = sm.Run(deepseek, H200, "fp8", 1, 1024, 256, 512, attention_dp=8, moe_ep=8)
    c = sm.costs(run)
    assert run.per_rank == 64 and c.concurrency == 64
    tokens = 64 + 64 / 256 * 1024               # the decodes and C/OSL prompts of ISL tokens per step
    assert c.steady.link_s == pytest.approx(program_costs.all_to_all_s(run.deployment, tokens, 2))
    assert c.steady.collectives == 2 * 58      # 61 layers, the first 3 dense
    p = sm.predict(run, c, sm.Efficiency(0.8, 0.6))
    assert p.tpot_s > c.steady.time(sm.BOUND) - c.steady.link_s > 0
    # its busiest rank's experts are an expectation, so the steady model prints no bound here
    with pytest.raises(sm.Unpredictable, match="no bound under attention DP"):
        sm.bound(c)
    with pytest.raises(sm.Unpredictable, match="no bound under attention DP"):
        sm.request_bound(run, c)
    assert sm.costs(sm.Run(LLAMA_8B, H100, "bf16", 1, 1024, 128, 8)).bounds
