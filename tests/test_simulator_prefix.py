"""Prompt reuse and prefix caching in the simulator: aiperf's 100 unique prompts in shuffled
passes, a hit skipping the cached whole blocks, the pool of prompts accounted beside the
batch, the flags, and the bounds taking the reuse where the prediction (by default) does not."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from rooflinec.spec import catalog, load as spec
from rooflinec.base.errors import SpecError, UsageError
from rooflinec.serving import calibration, engines, fitting, rows, simulator, validation, workload
from rooflinec.serving.measurements import Specs
from rooflinec.serving import stepcost as sc

STEP8 = sc.build(sc.Deployment(spec.load_model(catalog.path("models", "llama-3.1-8b")),
                               spec.load_hardware(catalog.path("hardware", "h100-sxm")), 1, "bf16", "bf16"))


def ttft(res) -> float:
    m = res.measured
    return float(np.mean(res.first_s[m] - res.arrival_s[m]))


def test_the_benchmark_sends_aiperfs_100_prompts_in_shuffled_passes():
    w = workload.benchmark(64, 512, 16, workload.AIPERF_DATASET_ENTRIES)   # 128 warm-up + 1280 measured
    ids = w.prompt_ids()
    assert w.unique_prompts == 100 and len(ids) == w.total
    for start in range(0, w.total - 100, 100):     # each pass: every prompt once
        assert sorted(ids[start:start + 100]) == list(range(100))
    assert workload.benchmark(64, 512, 16, 100).prompt_ids().tolist() == ids.tolist()    # seeded
    assert workload.benchmark(64, 512, 16).prompt_ids() is None      # the prediction's default: all distinct
    assert workload.unique_prompts_of("all", 100) is None and workload.unique_prompts_of("0", 100) is None
    assert workload.unique_prompts_of(None, 7) == 7 and workload.unique_prompts_of("100", None) == 100


def test_a_hit_skips_whole_blocks_and_always_computes_the_last_token():
    # vLLM: 16-token blocks; SGLang: page 1; a prompt of 4000 tokens = 250 blocks, the last recomputed
    assert simulator.cacheable_tokens(4000, 16) == 3984
    assert simulator.cacheable_tokens(4001, 16) == 4000
    assert simulator.cacheable_tokens(4000, 1) == 3999
    assert simulator.cacheable_tokens(1, 32) == 0


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_reused_prompts_hit_and_cut_the_ttft_at_the_bound(engine):
    pol, w = engines.load(engine), workload.benchmark(64, 2000, 8, 100)
    hit = simulator.simulate(STEP8, pol, w, sc.BOUND)
    cold = simulator.simulate(STEP8, pol, dataclasses.replace(w, unique_prompts=None), sc.BOUND)
    off = simulator.simulate(STEP8, engines.override(pol, prefix_caching=False), w, sc.BOUND)
    assert hit.prefix_pool and hit.prefix_hits == w.requests     # the warm-up (128) saw all 100
    assert cold.prefix_hits == off.prefix_hits == 0
    assert ttft(hit) < 0.5 * ttft(cold)
    assert ttft(off) == pytest.approx(ttft(cold), rel=1e-12)     # the same lengths, no hit


def test_a_pool_that_does_not_fit_beside_the_batch_hits_nothing():
    """100 prompts of 8000 tokens at 128 KiB per token (bf16) are 105 GB: more than an H100's
    KV cache, so cyclic reuse under LRU evicts each before it comes back."""
    pol, w = engines.load("vllm"), workload.benchmark(64, 8000, 8, 100)
    res = simulator.schedule(STEP8, pol, w)
    assert not res.prefix_pool and res.prefix_hits == 0
    assert not simulator.prefix_pool_fits(pol, w, simulator.kv_capacity_tokens(STEP8, pol))


def test_prefix_caching_is_on_in_every_engine_file_with_its_source():
    for name in engines.names():
        pol = engines.load(name)
        assert pol.prefix_caching is True
        assert any(k in pol.source for k in ("prefix", "radix", "block_reuse"))
    with pytest.raises(UsageError, match="--prefix-caching"):
        engines.override(engines.load("vllm"), prefix_caching="yes")


def test_simulate_unique_prompts_flag(call):
    base = ["simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "vllm", "--concurrency", "8",
            "--isl", "512", "--osl", "4", "--bound", "--json"]
    hot = json.loads(call(*base, "--unique-prompts", "100")[1])
    cold = json.loads(call(*base)[1])
    assert hot["prefix_cache"]["measured_hits"] > 0 and cold["prefix_cache"]["measured_hits"] == 0
    assert hot["ttft_s"]["mean"] < cold["ttft_s"]["mean"]
    rc, _, err = call(*base, "--unique-prompts", "many")
    assert rc != 0 and "--unique-prompts" in err


def test_the_bounds_take_aiperfs_reused_prompts_where_the_prediction_does_not():
    """The TTFT bound of a row whose measured requests all repeat a prompt (C = 64: the 128
    warm-up requests sent all 100) is the last token alone over the cached context, far under
    the whole prompt; the TPOT bound comes from the reused schedule, at most the distinct one's."""
    row = rows.Row("t", "meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", "vllm", "agg", "bf16", "", 1, 1, 1, 1, 1, 1,
                   2000, 8, 64, 1.0, 0.01)
    (case,) = fitting.prepare([row], Specs(None))
    assert case.result.workload.unique_prompts is None and case.least_work.workload.unique_prompts == 100
    x = np.zeros(len(sc.FEATURES))
    x[[sc.ONE, sc.TOKENS, sc.LOGITS, sc.CHUNK_SQUARE, sc.CHUNK_TOKENS, sc.CHUNK_KEYS, sc.CHUNKS]] = \
        1, 2000, 1, 2000 ** 2, 2000, 2000, 1
    whole = float(STEP8.durations(x[None], sc.BOUND)[0])
    assert validation.prompt_alone(case) < 0.2 * whole
    assert case.bound_means()[1] <= case.means(sc.BOUND)[1] * (1 + 1e-9)


def test_calibration_groups_per_kind_of_model_and_older_files_without_it(tmp_path):
    """A group names its kind of model (dense or moe); a group without one (an older file)
    serves both; a bad kind is located."""
    cal = tmp_path / "cal.yaml"
    cal.write_text("kind: simulator\ndefault:\n  parameters: {compute_fraction: 0.5}\ngroups:\n"
                   "- {device: h100-sxm, engine: vllm, models: dense, parameters: {compute_fraction: 0.6}}\n"
                   "- {device: h100-sxm, engine: vllm, models: moe, parameters: {compute_fraction: 0.7}}\n"
                   "- {device: h200-sxm, engine: vllm, parameters: {compute_fraction: 0.8}}\n")
    t = calibration.load(str(cal))
    assert t.of("h100-sxm", "vllm").compute_fraction == 0.6
    assert t.of("h100-sxm", "vllm", "moe").compute_fraction == 0.7
    assert t.of("h200-sxm", "vllm", "moe").compute_fraction == 0.8
    assert t.of("b200", "vllm", "moe").compute_fraction == 0.5
    assert calibration.model_kind(STEP8.deployment.model) == "dense"
    cal.write_text("kind: simulator\ndefault:\n  parameters: {}\ngroups:\n"
                   "- {device: h100-sxm, engine: vllm, models: sparse, parameters: {}}\n")
    with pytest.raises(SpecError, match="models: expected one of dense, moe"):
        calibration.load(str(cal))
