"""Gated DeltaNet linear attention as a layer kind (rooflinec.model.kinds.linear): the state a
sequence keeps, decode and chunked-prefill FLOPs and bytes, and that decode's bytes do not grow
with the context. Dimensions from Qwen3-Next-80B-A3B's config.json (Hugging Face,
Qwen/Qwen3-Next-80B-A3B-Instruct): hidden_size 2048, 48 layers with full_attention_interval 4
(three Gated DeltaNet layers, then one gated full-attention layer), linear_num_key_heads 16,
linear_num_value_heads 32, linear_key_head_dim = linear_value_head_dim = 128,
linear_conv_kernel_dim 4; full attention 16 query heads, 2 KV heads of 256. The MLP here is a
dense SwiGLU (the model's experts and its attention output gate are left out: this tests the
linear kind, not the model's total).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.cost import kvcache
from rooflinec.cost.evaluate import number
from rooflinec.model import kinds, params, symbol_table
from rooflinec.model.kinds.linear import C
from rooflinec.model.lower import Conventions, lower
from rooflinec.model.symbols import B, L, M, S, b
from rooflinec.cost.workbench import Workbench
from rooflinec.spec.load import load_hardware

from layer_kinds import HARDWARE, ops_by_name, spec_model  # a sibling module of the tests


SPEC = """\
name: qwen3-next-like
d_model: 2048
n_layers: 48
vocab: 151936
attention: {{n_heads: 16, n_kv_heads: 2, head_dim: 256, pattern: {pattern}}}
linear_attention: {{key_heads: 16, value_heads: 32, key_head_dim: 128, value_head_dim: 128, conv_kernel: 4}}
mlp: {{kind: swiglu, d_ff: 5120}}
source: Qwen3-Next-80B-A3B config.json (Hugging Face, Qwen/Qwen3-Next-80B-A3B-Instruct), dense MLP
"""


def _model(tmp_path, pattern="[linear, linear, linear, full]"):
    return spec_model(tmp_path, SPEC.format(pattern=pattern), "hybrid.yaml")


def test_the_hybrid_pattern_is_data(tmp_path):
    model = _model(tmp_path)
    registry = kinds.registry()
    assert kinds.counts(model, "mixer") == [(registry["full"], 12), (registry["linear"], 36)]
    ops = ops_by_name(model, "decode")
    assert ops["delta_rule"].repeat == 36 and ops["q_proj"].repeat == L - 36
    # each family's residual add folds into its own output projection, over its own layers
    assert (ops["attn_residual"].into, ops["attn_residual"].repeat) == ("o_proj", L - 36)
    assert (ops["linear_attn_residual"].into, ops["linear_attn_residual"].repeat) == ("out_proj", 36)
    every = _model(tmp_path, "[linear]")
    assert kinds.counts(every, "mixer") == [(registry["linear"], 48)]
    assert ops_by_name(every, "decode")["delta_rule"].repeat == L and "q_proj" not in ops_by_name(every, "decode")


def test_state_bytes_per_sequence(tmp_path):
    model = _model(tmp_path)
    # per linear layer: the state 32 heads x 128 x 128 = 524,288 elements, the convolution's last
    # 3 inputs of 2*16*128 + 32*128 = 8,192 channels = 24,576: 548,864 elements, 1,097,728 B at
    # bf16; 36 layers: 39,518,208 B. The 12 full layers keep K and V, 2*2*256*2 = 2,048 B per
    # token each, 24,576 B per token.
    assert kvcache.per_token(model, 2) == 24_576
    assert kvcache.per_sequence(model, 2, 32_768) == 24_576 * 32_768 + 39_518_208 == 844_824_576
    assert kvcache.per_sequence(model, 2, 1) == 24_576 + 39_518_208
    values = symbol_table.model_values(model)
    assert kvcache.sequence_formula(model).subs(values).subs({b: 2, S: 32_768}) == 844_824_576


def test_parameters_of_a_linear_layer(tmp_path):
    model = _model(tmp_path, "[linear]")
    values = symbol_table.model_values(model)
    parts = {c.name: number(c.per, values) for c in params.count(model).components}
    # in_proj_qkvz 2048 x (2*16*128 + 2*32*128) = 25,165,824; in_proj_ba 2048 x 64 = 131,072;
    # conv1d 8,192 channels x 4 taps = 32,768; dt_bias and A_log 2 x 32; the gated norm 128;
    # out_proj 4096 x 2048 = 8,388,608 (transformers' Qwen3NextGatedDeltaNet)
    assert parts["in_proj_qkvz"] == 25_165_824 and parts["in_proj_ba"] == 131_072
    assert parts["conv1d"] == 32_768 and parts["dt_bias_a_log"] == 64 and parts["gated_norm"] == 128
    assert parts["out_proj"] == 8_388_608


def test_decode_and_prefill_of_the_delta_rule(tmp_path):
    model = _model(tmp_path)
    values = symbol_table.model_values(model)
    assert values[C] == 64
    decode = ops_by_name(model, "decode")["delta_rule"]
    point = {**values, B: 1, M: 1, S: 4096, b: 2}
    # decode, one sequence: 32 heads x 7 x 128 x 128 = 3,670,016 FLOPs; the state read and
    # written, 2 x 524,288 x 2 B = 2,097,152 B; q, k, v, beta, alpha in and o out:
    # (2*16*128 + 2*32*128 + 2*32) x 2 B = 24,704 B
    assert number(decode.cost.flops, point) == 3_670_016
    assert number(decode.cost.bytes_of("kv_cache"), point) == 2_097_152
    assert number(decode.cost.bytes_of("activations"), point) == 24_704
    prefill = ops_by_name(model, "prefill")["delta_rule"]
    # prefill of S = 4,096 tokens in chunks of C = 64: per token and head 6*64*128 + 4*64*128 +
    # 6*128*128 + 64^2/3 = 180,224 + 4,096/3; x 32 heads x 4,096 tokens
    per_token = Fraction(180_224) + Fraction(4096, 3)
    assert Fraction(str(sp.nsimplify(prefill.cost.flops.subs(point)))) == 32 * 4096 * per_token
    # only the final state is written to the cache: 524,288 x 2 B
    assert number(prefill.cost.bytes_of("kv_cache"), point) == 1_048_576


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.integers(1, 2 ** 20), st.integers(1, 2 ** 20), st.integers(1, 512))
def test_decode_bytes_do_not_grow_with_the_context(tmp_path_factory, short, long, batch):
    model = _model(tmp_path_factory.mktemp("linear"), "[linear]")
    values = symbol_table.model_values(model)
    program = lower(model, "decode", Conventions())
    for op in program.ops:
        assert S not in op.cost.flops.free_symbols and S not in op.cost.bytes.free_symbols
    # so decode's intensity does not depend on S; and a sequence keeps the same bytes at any context
    assert kvcache.per_sequence(model, 2, short) == kvcache.per_sequence(model, 2, long) == 48 * 1_097_728
    delta = {o.name: o for o in program.ops}["delta_rule"]
    point = {**values, B: batch, M: batch, b: 2}
    assert number(delta.cost.bytes, point) == batch * (2_097_152 + 24_704)


def test_only_the_full_layers_read_more_as_the_context_grows(tmp_path):
    bench = Workbench.of(_model(tmp_path), [load_hardware(str(HARDWARE / "h100-sxm.yaml"))])
    device = bench.devices[0]
    program = bench.program("decode", "ideal", device)
    at = lambda s: bench.ledger(program, device, {B: 8, S: s}).bytes  # noqa: E731
    # 1,024 more cached tokens for 8 sequences: the 12 full layers read 8 x 1,024 x 24,576 B more
    # (K and V at bf16); the 36 linear layers' state reads stay what they were
    assert at(2048) - at(1024) == 8 * 1024 * 24_576


def test_a_pipeline_stage_keeps_its_own_layers(tmp_path):
    model = _model(tmp_path)
    # pp = 4: 12 consecutive layers a stage, 3 full and 9 linear in each (the pattern's period
    # divides 12): 3 x 2,048 = 6,144 B per token and 9 x 1,097,728 = 9,879,552 B of state
    assert kvcache.per_token(model, 2, pp=4) == 6144
    assert kvcache.per_sequence(model, 2, 1000, pp=4) == 6144 * 1000 + 9_879_552


def test_tensor_parallelism_splits_the_heads_and_their_state(tmp_path):
    model = _model(tmp_path)
    # tp = 2 (vLLM's Qwen3-Next Gated DeltaNet splits key and value heads): per linear layer 16
    # value heads' 128 x 128 states and the convolution's 3 x (2*8*128 + 16*128) inputs,
    # 274,432 elements, 548,864 B; the 12 full layers keep one of the 2 KV heads, 1,024 B a token
    assert kvcache.per_token(model, 2, tp=2) == 12 * 1024
    assert kvcache.per_sequence(model, 2, 1000, tp=2) == 12 * 1024 * 1000 + 36 * 548_864
