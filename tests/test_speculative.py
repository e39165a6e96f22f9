"""Speculative decoding and MTP (serving/speculative.py): the expected tokens per verification,
the verification step on the lowered programs, the drafts' costs, `serve` and `simulate` flags."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rooflinec.cli import quick
from rooflinec.serving import engines, metrics, simulator, workload
from rooflinec.serving import speculative as sp
from rooflinec.serving import stepcost as sc
from rooflinec.spec import catalog, load as spec

LLAMA8 = spec.load_model(catalog.path("models", "llama-3.1-8b"))
LLAMA70 = spec.load_model(catalog.path("models", "llama-3.1-70b"))
LLAMA1 = spec.load_model(catalog.path("models", "llama-3.2-1b"))
H100 = spec.load_hardware(catalog.path("hardware", "h100-sxm"))
STEP8 = sc.build(sc.Deployment(LLAMA8, H100, 1, "bf16", "bf16"))
STEP70 = sc.build(sc.Deployment(LLAMA70, H100, 1, "bf16", "bf16"))
CAL = sc.Parameters(bandwidth_fraction=0.8, compute_fraction=0.6, per_layer_s=2e-5, per_step_s=1e-3,
                    per_request_s=2e-5)


def draft(kind, k, alpha):
    return sp.Draft(kind, k, alpha, LLAMA1 if kind == "model" else None)


# --- golden ---------------------------------------------------------------------------------

def test_llama_70b_with_a_llama_1b_draft_on_an_h100_at_batch_1():
    """Llama-3.1-70B on one H100 SXM (3.35 TB/s, 989.4 TFLOP/s bf16; the datasheet), context
    4096, bf16, a Llama-3.2-1B draft (both from the meta-llama config.json files), k = 4,
    alpha = 0.7. By hand:
    E = (1 - 0.7^5) / (1 - 0.7) = (1 - 0.16807) / 0.3 = 2.7731 tokens per verification
        (Leviathan et al. 2023, eq. 1).
    Plain decode at B = 1 is memory-bound: every weight but the input embedding table (a gather
    reads one row): 70,553,706,496 - 128,256 x 8,192 = 69,503,033,344 parameters x 2 B
    = 139,006,066,688 B, plus the KV cache, 4,096 tokens x 80 layers x 2 x 8 heads x 128 x 2 B
    = 1,342,177,280 B: 140,348,243,968 B / 3.35e12 B/s = 41.895 ms (23.87 tokens/s).
    The verification runs 5 tokens: 5 x 2 x 69.5e9 FLOPs / 989.4e12 = 0.70 ms of compute, so it
    stays at the same weights and cache, 41.895 ms (activations and 5 logits add < 0.2%).
    The draft's 4 passes each read its 1,235,814,400 parameters (the tied table is its LM head)
    x 2 B = 2,471,628,800 B and its cache, 4,096 x 16 layers x 2 x 8 x 64 x 2 B = 134,217,728 B:
    4 x 2,605,846,528 B / 3.35e12 = 3.1114 ms.
    Predicted: 2.7731 / (41.895 + 3.111 ms) = 61.6 tokens/s, 2.58 x plain; at alpha = 1, 5 per step."""
    p = sp.point(STEP70, sp.speculative(STEP70, draft("model", 4, 0.7)), 1, 4096)
    assert p.tokens_per_step == pytest.approx(2.7731, abs=1e-4)
    assert p.plain_s == pytest.approx(140_348_243_968 / 3.35e12, rel=2e-3)
    assert p.verify_s == pytest.approx(140_348_243_968 / 3.35e12, rel=2e-3) and not p.verify_compute_bound
    assert p.draft_s == pytest.approx(4 * 2_605_846_528 / 3.35e12, rel=2e-3)
    assert p.tokens_per_s() == pytest.approx(2.7731 / (41.895e-3 + 3.1114e-3), rel=3e-3)
    assert p.speedup == pytest.approx(2.7731 * 41.895 / (41.895 + 3.1114), rel=3e-3)
    assert p.tokens_per_s(5) == pytest.approx(5 / (41.895e-3 + 3.1114e-3), rel=3e-3)


def test_mtp_head_parameters_by_hand():
    """Llama-3.1-8B (config.json: d_model 4096, 32 q / 8 kv heads of 128, d_ff 14336): one
    layer is q and o 2 x 4096^2 = 33,554,432, k and v 2 x 4096 x 1024 = 8,388,608, the SwiGLU
    MLP 3 x 4096 x 14336 = 176,160,768, two norms 8,192: 218,112,000; an MTP head adds the
    2 x 4096^2 = 33,554,432 projection and two norms (8,192): 251,674,624 parameters."""
    assert sp.mtp_parameters(LLAMA8) == 251_674_624
    mtp = sp.speculative(STEP8, draft("mtp", 2, 0.8))
    assert mtp.weight_bytes == 2 * 251_674_624 * 2
    assert mtp.kv_bytes_per_token == pytest.approx(2 * 131_072 / 32)   # 2 of 32 layers' KV


def test_expected_tokens_by_hand():
    assert sp.expected_tokens(0.7, 4) == pytest.approx(2.7731)
    assert sp.expected_tokens(0.8, 1) == pytest.approx(1.8)
    assert sp.expected_tokens(0.0, 4) == 1 and sp.expected_tokens(1.0, 4) == 5


# --- properties -----------------------------------------------------------------------------

KIND = st.sampled_from(["mtp", "model", "ngram"])


@pytest.mark.slow
@given(kind=KIND, k=st.integers(1, 8), batch=st.integers(1, 4096), context=st.integers(1, 32768))
@settings(max_examples=60)
def test_alpha_zero_never_beats_plain_decoding(kind, k, batch, context):
    """At alpha = 0 a verification yields one token, and costs at least a plain step: under the
    overlapped bound and under calibrated efficiencies and overheads, kernel by kernel."""
    s = sp.speculative(STEP8, draft(kind, k, 0.0))
    p = sp.point(STEP8, s, batch, context)
    assert p.tokens_per_s() <= p.plain_tokens_per_s * (1 + 1e-12)
    x = sp.decode_features(batch, context)
    assert s.durations(x, CAL)[0] >= STEP8.durations(x, CAL)[0] * (1 - 1e-12)


@given(k=st.integers(1, 16), eps=st.floats(1e-12, 1e-3))
def test_alpha_to_one_approaches_k_plus_1_tokens_per_step(k, eps):
    """E = sum_{i<=k} alpha^i, so (k + 1) - E = sum (1 - alpha^i) <= eps k (k + 1) / 2 at
    alpha = 1 - eps; E grows with alpha."""
    e = sp.expected_tokens(1 - eps, k)
    assert 0 <= (k + 1) - e <= eps * k * (k + 1) / 2 * (1 + 1e-9) + 1e-12
    assert sp.expected_tokens(1 - eps / 2, k) >= e


@given(k=st.integers(2, 8), lo=st.integers(256, 1 << 14), grow=st.integers(1, 1 << 14),
       context=st.integers(1, 1024), kind=KIND)
@pytest.mark.slow
@settings(max_examples=60)
def test_speculation_gains_nothing_more_once_the_verification_is_compute_bound(k, lo, grow, context, kind):
    """Once the verification step is compute-bound at batch b, its time is proportional to the
    batch while a plain step's per sequence can only fall: a free draft's speedup at any larger
    batch is at most its speedup at b, and a draft that costs steps does no better than free."""
    free = sp.speculative(STEP8, draft("ngram", k, 0.7))
    a = sp.point(STEP8, free, lo, context)
    assume(a.verify_compute_bound)
    later = sp.point(STEP8, free, lo + grow, context)
    assert later.speedup <= a.speedup * (1 + 1e-9)
    costed = sp.point(STEP8, sp.speculative(STEP8, draft(kind, k, 0.7)), lo + grow, context)
    assert costed.speedup <= a.speedup * (1 + 1e-9)


@given(batch=st.integers(1, 512), context=st.integers(2, 32768))
@settings(max_examples=30)
def test_a_verification_of_one_token_is_a_plain_decode_step(batch, context):
    """verify_map at k = 0: the decode as a one-token chunk of the prefill program's attention
    after context - 1 cached tokens prices as the decode program's step (the masked half of a
    one-token chunk's diagonal is the only difference)."""
    x = sp.decode_features(batch, context)
    y = x @ sp.verify_map(0)
    plain = max((x @ STEP8.compute.T).sum(), (x @ STEP8.memory.T).sum())
    verify = max((y @ STEP8.compute.T).sum(), (y @ STEP8.memory.T).sum())
    assert verify == pytest.approx(plain, rel=1e-3)


def test_plain_decode_matches_the_serving_sections_bound():
    section = quick.serving_section(LLAMA8, H100, "bf16", [1, 64, 256], 4096, 2048)
    s = sp.speculative(STEP8, draft("ngram", 4, 0.5))
    for row in section["steps"]:
        p = sp.point(STEP8, s, row["batch"], row["context"])
        assert p.plain_tokens_per_s == pytest.approx(row["devices"][0]["tokens_per_s"], rel=1e-6)


def test_speculation_stops_paying_as_the_batch_grows_at_a_short_context():
    """At context 512 the cache is small and the verification turns compute-bound near
    ridge / (k + 1): speculation stops paying at a finite batch, later in the best case."""
    s = sp.speculative(STEP8, draft("model", 4, 0.7))
    b = sp.break_even(STEP8, s, 512, s.tokens_per_step)
    assert b is not None and b > 1
    before, after = sp.point(STEP8, s, b - 1, 512), sp.point(STEP8, s, b, 512)
    assert before.speedup > 1 >= after.speedup
    best = sp.break_even(STEP8, s, 512, 5.0)
    assert best is None or best > b


# --- the simulator ----------------------------------------------------------------------------

def test_simulated_speculation_saves_steps_and_time_per_token():
    work = workload.benchmark(8, 512, 129)
    plain = simulator.simulate(STEP8, engines.load("vllm"), work, CAL)
    free = simulator.simulate(sp.speculative(STEP8, draft("ngram", 3, 1.0)), engines.load("vllm"), work, CAL)
    none = simulator.simulate(sp.speculative(STEP8, draft("ngram", 3, 0.0)), engines.load("vllm"), work, CAL)
    tp = {k: metrics.summary(r, 1)["tpot_s"]["mean"] for k, r in (("plain", plain), ("free", free), ("none", none))}
    # alpha = 1: 4 tokens per verification, so 128 decode tokens take 32 steps instead of 128
    assert metrics.summary(free, 1)["steps"] < metrics.summary(plain, 1)["steps"] / 3
    assert tp["free"] < tp["plain"] <= tp["none"]
    assert np.all(free.finish_s[free.measured] > free.first_s[free.measured])


def test_a_draft_models_weights_and_cache_take_kv_capacity():
    pol = engines.load("vllm")
    with_draft = sp.speculative(STEP8, draft("model", 4, 0.7))
    assert simulator.kv_capacity_tokens(with_draft, pol) < simulator.kv_capacity_tokens(STEP8, pol)


# --- the command line ---------------------------------------------------------------------------

def test_serve_prints_the_speculation_table(call):
    code, out, err = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--batch", "1,64,256",
                          "--context", "512", "--draft", "llama-3.2-1b", "--draft-k", "4", "--acceptance", "0.7")
    assert code == 0, err
    assert "2.77 tokens per verification" in out and "stops paying from batch" in out
    code, out, _ = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--speculate", "mtp:k=1,alpha=0.8", "--json")
    doc = json.loads(out)["speculation"]
    assert doc["kind"] == "mtp" and doc["tokens_per_step"] == pytest.approx(1.8) and len(doc["rows"]) == 3


@pytest.mark.parametrize("argv, flag", [
    (["--speculate", "eagle:k=1,alpha=0.5"], "--speculate"),
    (["--speculate", "mtp:k=1"], "--speculate"),
    (["--speculate", "mtp:k=0,alpha=0.5"], "--speculate"),
    (["--speculate", "ngram:k=2,alpha=1.5"], "--speculate"),
    (["--draft-k", "3"], "--draft-k"),
    (["--draft", "llama-3.2-1b"], "--acceptance"),
    (["--draft", "llama-3.2-1b", "--acceptance", "-0.1"], "--acceptance"),
    (["--draft", "no-such-model", "--acceptance", "0.5"], "--draft"),
    (["--draft", "llama-3.2-1b", "--acceptance", "0.5", "--speculate", "mtp:k=1,alpha=0.5"], "--speculate"),
])
@pytest.mark.slow
def test_bad_speculation_flags_are_usage_errors_naming_the_flag(call, argv, flag):
    for command in (["serve", "llama-3.1-8b", "--device", "h100-sxm"],
                    ["simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "vllm",
                     "--concurrency", "2", "--isl", "64", "--osl", "8"]):
        code, out, err = call(*command, *argv)
        assert code == 2 and flag in err and "Traceback" not in err and out == ""


def test_simulate_takes_the_speculation_flags(call):
    code, out, err = call("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "vllm", "--concurrency",
                          "4", "--isl", "256", "--osl", "64", "--speculate", "ngram:k=4,alpha=0.6", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["speculation"]["tokens_per_step"] == pytest.approx(sp.expected_tokens(0.6, 4))


def test_serve_out_draws_where_speculation_stops_paying(call, tmp_path):
    """Issue 28, item 4: with a draft, `serve --out` draws the speedup against batch (1 to
    16,384), ringed at the batch from which it stops paying, the batch the table prints."""
    argv = ["serve", "llama-3.1-8b", "--device", "h100-sxm", "--context", "512", "--draft", "llama-3.2-1b",
            "--draft-k", "4", "--acceptance", "0.7"]
    code, out, err = call(*argv, "--json")
    stop = json.loads(out)["speculation"]["stops_paying_from"]
    assert code == 0 and stop is not None and stop > 1
    code, out, err = call(*argv, "--out", tmp_path / "s.svg")
    svg = (tmp_path / "s.svg").read_text(encoding="utf-8")
    assert code == 0 and f"stops paying from batch {stop:,}" in out
    assert f">{stop:,}</text>" in svg and "stops paying from this batch" in svg and ">10k</text>" in svg   # batches 1 to 16,384
    assert "speculation&#x27;s speedup, a draft model, k = 4, context 512" in svg and "1x: plain decoding" in svg
