"""The KV cache one device holds, windowed layers' memory and prefill, and the S-limit of a
windowed op (rooflinec.cost.kvcache, rooflinec.model.window)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.cost import kvcache
from rooflinec.spec import load as spec
from rooflinec.model import window
from rooflinec.model import symbols as sym
from rooflinec.model import symbol_table
from rooflinec.cost.derive import derive
from rooflinec.cost.evaluate import number
from rooflinec.model.lower import Conventions, lower
from rooflinec.model.symbols import B, S
from rooflinec.cost.workbench import Workbench

CATALOG = Path(__file__).resolve().parent.parent / "rooflinec" / "spec" / "catalog"


def model(key: str):
    return spec.load_model(str(CATALOG / "models" / f"{key}.yaml"))


GPT_OSS, GEMMA, LLAMA = model("gpt-oss-120b"), model("gemma-2-9b"), model("llama-3.1-8b")


def test_gpt_oss_sequence_keeps_128_tokens_in_its_sliding_layers():
    # gpt-oss-120b config.json: 36 layers alternating sliding (window 128) and full attention,
    # 8 KV heads of 64. Per layer per token: K and V, 2 x 8 x 64 x 2 B (bf16) = 2,048 B.
    # Every layer at the full context: 36 x 2,048 = 73,728 B per token.
    assert kvcache.per_token(GPT_OSS, 2) == 73_728
    # A sequence of 4,096 tokens: 18 full layers keep 4,096, 18 sliding ones 128:
    # 2,048 x (18 x 4,096 + 18 x 128) = 2,048 x 76,032 = 155,713,536 B (148.5 MiB)
    assert kvcache.per_sequence(GPT_OSS, 2, 4096) == 155_713_536
    # at or below the window every layer keeps the whole context
    assert kvcache.per_sequence(GPT_OSS, 2, 128) == 128 * 73_728


def test_the_workbench_fits_windowed_sequences_by_what_they_keep():
    # Gemma 2 9B: 42 layers, 21 sliding (window 4,096); per layer per token 2 x 8 x 256 x 2 = 8,192 B.
    # Weights 9,241,705,984 parameters x 2 B = 18,483,411,968 B; an H100's 80 GiB = 85,899,345,920 B.
    # A sequence of 8,192 tokens keeps 8,192 x (21 x 8,192 + 21 x 4,096) = 2,113,929,216 B, so
    # (85,899,345,920 - 18,483,411,968) // 2,113,929,216 = 31 sequences (every layer at full
    # context: 2,818,572,288 B a sequence, 23).
    bench = Workbench.of(GEMMA, [spec.load_hardware(str(CATALOG / "hardware" / "h100-sxm.yaml"))])
    assert bench.kv_per_sequence(8192) == 2_113_929_216
    assert bench.largest_batch(bench.devices[0], 8192) == 31
    assert bench.memory_needed(2, 8192) == 18_483_411_968 + 2 * 2_113_929_216


MODELS = st.sampled_from([GPT_OSS, GEMMA, LLAMA, model("deepseek-v3")])


@settings(max_examples=40, deadline=None)
@given(MODELS, st.integers(1, 1 << 20), st.integers(1, 1 << 20))
def test_a_sequence_keeps_at_most_a_token_per_layer_and_more_as_it_grows(m, context, more):
    whole = kvcache.per_token(m, 2) * context
    kept = kvcache.per_sequence(m, 2, context)
    assert kept <= whole
    assert kvcache.per_sequence(m, 2, context + more) >= kept
    if not window.local_layers(m) or context <= m.window:
        assert kept == whole


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.sampled_from([GPT_OSS, GEMMA, LLAMA]), st.integers(1, 1 << 18), st.integers(1, 64))
def test_the_memory_a_sequence_holds_is_what_its_decode_step_reads(m, context, batch):
    """Decode reads every cached token once per step: the KV bytes of the step's reads are the
    cache its sequences hold, windowed layers included (the formula and the number agree)."""
    program = lower(m, "decode")
    reads = sum(op.cost.bytes_of("kv_cache") * op.repeat for op in program.ops)
    values = {**symbol_table.model_values(m), sym.b: 2, B: batch, S: context}
    assert number(reads, values) == batch * kvcache.per_sequence(m, 2, context)
    assert number(kvcache.sequence_formula(m), values) == kvcache.per_sequence(m, 2, context)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([GPT_OSS, GEMMA]), st.integers(1, 1 << 18), st.sampled_from([2, 4, 8]))
def test_a_pipeline_stage_is_never_counted_below_its_share(m, context, pp):
    # the device counted holds ceil(L/pp) layers, as many of them full as there are
    one = kvcache.per_sequence(m, 2, context)
    assert kvcache.per_sequence(m, 2, context, pp=pp) * pp >= one
    assert kvcache.per_sequence(m, 2, context, pp=pp) <= one


def _local_qk_flops(m, halving: bool):
    prog = lower(m, "prefill", Conventions(causal_halving=halving))
    return prog.op(window.PREFIX + "qk_matmul").cost.flops


def test_windowed_prefill_counts_each_querys_keys_under_the_causal_convention():
    # Gemma 2: 16 query heads of 256; W = 4,096; one sequence of S = 8,192 prompt tokens.
    # Query i sees min(i, W) keys: S*W - W^2/2 = 33,554,432 - 8,388,608 = 25,165,824 pairs
    # (the continuous count, as full layers' S^2/2); QK^T costs 2 x 16 x 256 FLOPs a pair.
    values = {**symbol_table.model_values(GEMMA), B: 1, S: 8192}
    assert number(_local_qk_flops(GEMMA, True), values) == 2 * 16 * 256 * 25_165_824
    # without halving every query's W keys are computed: S*W pairs
    assert number(_local_qk_flops(GEMMA, False), values) == 2 * 16 * 256 * 8192 * 4096
    # within the window the windowed layer costs what a full layer does: S^2/2 pairs
    short = {**values, S: 2048}
    full = lower(GEMMA, "prefill", Conventions(causal_halving=True)).op("qk_matmul").cost.flops
    assert number(_local_qk_flops(GEMMA, True), short) == number(full, short) == 2 * 16 * 256 * 2048**2 / 2


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 1 << 17), st.integers(1, 1 << 17))
def test_windowed_prefill_pairs_match_the_exact_count_to_the_diagonal(context, w):
    # sum over queries i = 1..S of min(i, W), exactly, against the formula's S*K - K^2/2:
    # they differ by K/2 (the diagonal half that S^2/2 also leaves out)
    keys = min(context, w)
    exact = keys * (keys + 1) // 2 + (context - keys) * keys
    share = window.causal_share(sp.Rational(1, 2), window.keys())
    counted = (S * window.keys() * share).xreplace({S: context, window.W: w})   # exact rationals
    assert counted == exact - sp.Rational(keys, 2)


def test_a_windowed_decode_ops_intensity_tends_to_its_value_at_the_window():
    # decode attention over min(S, W) keys: 2 n_q min(S,W) / (b (n_kv min(S,W) + n_q)), which
    # from S = W on is constant: gpt-oss (n_q 64, n_kv 8, W 128, b 2) 2*64*128/(2*(8*128+64)) = 128/17
    prog = Workbench.of(GPT_OSS).program("decode", "ideal")
    d = derive(prog.op(window.PREFIX + "attention"))
    values = {**symbol_table.model_values(GPT_OSS), sym.b: 2}
    assert window.W in d.limit_S.free_symbols and S not in d.limit_S.free_symbols
    assert d.limit_S.xreplace(values) == sp.Rational(128, 17)


def test_a_model_without_windows_keeps_its_whole_context():
    assert kvcache.sequence_formula(LLAMA) == kvcache.formula(LLAMA) * S


def test_a_pipeline_stage_of_alternating_layers_keeps_its_own_full_layers():
    # gemma-2-9b (config.json): 42 layers, layer 0 sliding then alternating with full, window
    # 4,096; 8 KV heads of 256, so 2 x 8 x 256 x 2 B = 8,192 B per layer per token (bf16).
    # pp = 2 splits layers 0-20 (10 full, 11 sliding) and 21-41 (11 full, 10 sliding); the
    # device counted holds 21 layers, 11 of them full: at S = 131,072
    # 8,192 x (11 x 131,072 + 10 x 4,096) = 12,146,704,384 B, not 21 full layers' 22,548,578,304.
    assert kvcache.per_sequence(GEMMA, 2, 131_072, pp=2) == 12_146_704_384
    # pp = 3: stages of 14 layers, 7 full each: 8,192 x (7 x 131,072 + 7 x 4,096)
    assert kvcache.per_sequence(GEMMA, 2, 131_072, pp=3) == 8_192 * 7 * (131_072 + 4_096)


@pytest.mark.slow
def test_attention_intensity_shows_windowed_layers_beside_full_ones(tmp_path):
    from rooflinec import analyses
    study = tmp_path / "s.yaml"
    study.write_text("model: gpt-oss-120b\ndevices: [h100-sxm]\n"
                     "analyses:\n  attention_intensity: {contexts: [64, 4096]}\n")
    [section] = analyses.run(spec.load_study(str(study)))
    kinds = [(c["phase"], c["layers"], c["count"]) for c in section["cases"]]
    assert kinds == [(p, k, c) for p in ("decode", "prefill") for k in ("full", "windowed") for c in ("kv", "io")]
    io = next(c for c in section["cases"] if c["phase"] == "decode" and c["layers"] == "windowed"
              and c["count"] == "io")
    # decode over min(S, W) keys (gpt-oss: 64 query heads, 8 KV heads, W = 128, b = 2):
    # 2*n_q*min(S,W) / (b*(n_kv*min(S,W) + n_q)): at S = 64, 8192/1152 = 7.11; at S = 4096
    # the window caps it, 16384/2176 = 7.53, the value it keeps as S grows
    at = [p["intensity"] for p in io["points"]]
    assert at[0] == 2 * 64 * 64 / (2 * (8 * 64 + 64)) and at[1] == 2 * 64 * 128 / (2 * (8 * 128 + 64))
    assert S not in io["limit"].free_symbols
    dense = tmp_path / "d.yaml"
    dense.write_text("model: llama-3.1-8b\ndevices: [h100-sxm]\n"
                     "analyses:\n  attention_intensity: {contexts: [64]}\n")
    [plain] = analyses.run(spec.load_study(str(dense)))
    assert {c["layers"] for c in plain["cases"]} == {"full"}
