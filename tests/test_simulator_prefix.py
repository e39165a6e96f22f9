"""Prompt reuse and prefix caching in the simulator: aiperf's 100 unique prompts in shuffled
passes, a hit skipping the cached whole blocks, the pool of prompts accounted beside the
batch, and the flags that turn either off."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from rooflinec.spec import catalog, load as spec
from rooflinec.base.errors import UsageError
from rooflinec.serving import engines, simulator, workload
from rooflinec.serving import stepcost as sc

STEP8 = sc.build(sc.Deployment(spec.load_model(catalog.path("models", "llama-3.1-8b")),
                               spec.load_hardware(catalog.path("hardware", "h100-sxm")), 1, "bf16", "bf16"))


def ttft(res) -> float:
    m = res.measured
    return float(np.mean(res.first_s[m] - res.arrival_s[m]))


def test_the_benchmark_sends_aiperfs_100_prompts_in_shuffled_passes():
    w = workload.benchmark(64, 512, 16)            # 128 warm-up + 1280 measured requests
    ids = w.prompt_ids()
    assert w.unique_prompts == 100 and len(ids) == w.total
    for start in range(0, w.total - 100, 100):     # each pass: every prompt once
        assert sorted(ids[start:start + 100]) == list(range(100))
    assert workload.benchmark(64, 512, 16).prompt_ids().tolist() == ids.tolist()    # seeded
    assert dataclasses.replace(w, unique_prompts=None).prompt_ids() is None


def test_a_hit_skips_whole_blocks_and_always_computes_the_last_token():
    # vLLM: 16-token blocks; SGLang: page 1; a prompt of 4000 tokens = 250 blocks, the last recomputed
    assert simulator.cacheable_tokens(4000, 16) == 3984
    assert simulator.cacheable_tokens(4001, 16) == 4000
    assert simulator.cacheable_tokens(4000, 1) == 3999
    assert simulator.cacheable_tokens(1, 32) == 0


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_reused_prompts_hit_and_cut_the_ttft_at_the_bound(engine):
    pol, w = engines.load(engine), workload.benchmark(64, 2000, 8)
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
    pol, w = engines.load("vllm"), workload.benchmark(64, 8000, 8)
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
    hot = json.loads(call(*base)[1])
    cold = json.loads(call(*base, "--unique-prompts", "all")[1])
    assert hot["prefix_cache"]["measured_hits"] > 0 and cold["prefix_cache"]["measured_hits"] == 0
    assert hot["ttft_s"]["mean"] < cold["ttft_s"]["mean"]
    rc, _, err = call(*base, "--unique-prompts", "many")
    assert rc != 0 and "--unique-prompts" in err
