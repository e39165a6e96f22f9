"""Mamba-2 state-space layers as a layer kind (rooflinec.model.kinds.ssm): the state a sequence
keeps, decode and chunked-SSD prefill FLOPs and bytes, and that decode's bytes do not grow with
the context. Dimensions from Nemotron-H-8B-Base-8K's config.json (Hugging Face,
nvidia/Nemotron-H-8B-Base-8K): hidden_size 4096, mamba_num_heads 128, mamba_head_dim 64,
ssm_state_size 128, n_groups 8, conv_kernel 4, chunk_size 256; attention 32 query heads, 8 KV
heads of 128; 24 Mamba-2, 4 attention and 24 MLP blocks (squared-ReLU, intermediate_size 21504).
Here 28 layers of a Mamba-2 or attention mixer each with an up/down MLP (every layer has one:
this tests the mamba kind, not the model's total).
"""

from __future__ import annotations

import textwrap

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.cost import kvcache
from rooflinec.cost.evaluate import number
from rooflinec.cost.workbench import Workbench
from rooflinec.model import kinds, params, symbol_table
from rooflinec.model.kinds.ssm import C_s
from rooflinec.model.lower import Conventions, lower
from rooflinec.model.symbols import B, L, M, S, b
from rooflinec.base.errors import SpecError
from rooflinec.spec.load import load_hardware, load_model

from layer_kinds import HARDWARE, ops_by_name, spec_model  # a sibling module of the tests


SPEC = """\
name: nemotron-h-like
d_model: 4096
n_layers: 28
vocab: 131072
attention: {{n_heads: 32, n_kv_heads: 8, head_dim: 128, pattern: {pattern}}}
mamba: {{heads: 128, head_dim: 64, state_size: 128, groups: 8, conv_kernel: 4}}
mlp: {{kind: gelu, d_ff: 21504}}
source: Nemotron-H-8B-Base-8K config.json (Hugging Face, nvidia/Nemotron-H-8B-Base-8K), an MLP every layer
"""
HYBRID = "[mamba, mamba, mamba, mamba, mamba, mamba, full]"   # 24 Mamba-2 layers, 4 attention


def _model(tmp_path, pattern=HYBRID):
    return spec_model(tmp_path, SPEC.format(pattern=pattern), "hybrid.yaml")


def test_the_hybrid_pattern_is_data(tmp_path):
    model = _model(tmp_path)
    registry = kinds.registry()
    assert kinds.counts(model, "mixer") == [(registry["full"], 4), (registry["mamba"], 24)]
    ops = ops_by_name(model, "decode")
    assert ops["ssd_scan"].repeat == 24 and ops["q_proj"].repeat == L - 24
    assert (ops["mamba_attn_residual"].into, ops["mamba_attn_residual"].repeat) == ("ssm_out_proj", 24)


def test_state_bytes_per_sequence(tmp_path):
    model = _model(tmp_path)
    # per Mamba-2 layer: the state 128 heads x 64 x 128 = 1,048,576 elements, the convolution's
    # last 3 inputs of 8,192 + 2*8*128 = 10,240 channels = 30,720: 1,079,296 elements, 2,158,592 B
    # at bf16; 24 layers: 51,806,208 B. The 4 attention layers keep K and V, 2*8*128*2 = 4,096 B
    # per token each, 16,384 B per token.
    assert kvcache.per_token(model, 2) == 16_384
    assert kvcache.per_sequence(model, 2, 8192) == 16_384 * 8192 + 51_806_208 == 186_023_936
    values = symbol_table.model_values(model)
    assert kvcache.sequence_formula(model).subs(values).subs({b: 2, S: 8192}) == 186_023_936


def test_parameters_of_a_mamba_layer(tmp_path):
    model = _model(tmp_path, "[mamba]")
    values = symbol_table.model_values(model)
    parts = {c.name: number(c.per, values) for c in params.count(model).components}
    # in_proj 4096 x (2*8192 + 2*8*128 + 128) = 4096 x 18,560 = 76,021,760; conv1d 10,240
    # channels x (4 taps + a bias) = 51,200; dt_bias, A_log, D 3 x 128; the gated norm 8,192;
    # out_proj 8192 x 4096 = 33,554,432 (Nemotron-H-8B's backbone.layers.N.mixer.* shapes)
    assert parts["ssm_in_proj"] == 76_021_760 and parts["ssm_conv1d"] == 51_200
    assert parts["ssm_dt_a_d"] == 384 and parts["ssm_norm"] == 8192 and parts["ssm_out_proj"] == 33_554_432
    biasless = tmp_path / "biasless.yaml"   # use_conv_bias false: the 10,240 taps x 4 alone
    biasless.write_text(textwrap.dedent(SPEC.format(pattern="[mamba]")).replace(
        "conv_kernel: 4}", "conv_kernel: 4, conv_bias: false}"))
    plain = load_model(str(biasless))
    assert {c.name: number(c.per, values) for c in params.count(plain).components}["ssm_conv1d"] == 40_960


def test_decode_and_prefill_of_the_scan(tmp_path):
    model = _model(tmp_path)
    values = symbol_table.model_values(model)
    assert values[C_s] == 256
    point = {**values, B: 1, M: 1, S: 4096, b: 2}
    decode = ops_by_name(model, "decode")["ssd_scan"]
    # decode, one sequence: 128 heads x 5 x 64 x 128 = 5,242,880 FLOPs; the state read and
    # written, 2 x 1,048,576 x 2 B = 4,194,304 B; x, B, C, dt in and y out:
    # (2*8192 + 2*8*128 + 128) x 2 B = 37,120 B
    assert number(decode.cost.flops, point) == 5_242_880
    assert number(decode.cost.bytes_of("kv_cache"), point) == 4_194_304
    assert number(decode.cost.bytes_of("activations"), point) == 37_120
    prefill = ops_by_name(model, "prefill")["ssd_scan"]
    # prefill of S = 4,096 tokens in chunks of 256, per token: C B^T per group 8 x 2*256*128 =
    # 524,288; per head 2*256*64 + 4*64*128 + 2*64*128/256 = 65,600, x 128 = 8,396,800;
    # 8,921,088 per token x 4,096 tokens = 36,540,776,448
    assert number(prefill.cost.flops, point) == 36_540_776_448
    # only the final state is written to the cache: 1,048,576 x 2 B
    assert number(prefill.cost.bytes_of("kv_cache"), point) == 2_097_152


def test_decode_intensity_does_not_depend_on_the_context(tmp_path):
    model = _model(tmp_path, "[mamba]")
    values = symbol_table.model_values(model)
    scan = ops_by_name(model, "decode")["ssd_scan"]
    # the scan's intensity: 5,242,880 / (4,194,304 + 37,120) FLOPs per byte at any S and any
    # batch (each sequence brings its own state): 1.24, memory-bound on every device
    for batch in (1, 64):
        point = {**values, B: batch, M: batch, b: 2}
        intensity = (scan.cost.flops / scan.cost.bytes).subs(point)
        assert S not in intensity.free_symbols and intensity == sp.Rational(5_242_880, 4_231_424)
    # the hybrid's decode: as S grows its intensity tends to the attention layers' alone
    hybrid = lower(_model(tmp_path), "decode", Conventions())
    point = {**values, B: 8, M: 8, b: 2, L: 28}
    total = lambda ops: [sp.Add(*(o.repeat * getattr(o.cost, f) for o in ops)).subs(point)  # noqa: E731
                         for f in ("flops", "bytes")]
    flops, moved = total(hybrid.ops)
    attention = [o for o in hybrid.ops if o.name in ("qk_matmul", "scale", "causal_mask", "softmax", "pv_matmul")]
    a_flops, a_bytes = total(attention)
    assert sp.limit(flops / moved, S, sp.oo) == sp.limit(a_flops / a_bytes, S, sp.oo)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.integers(1, 2 ** 20), st.integers(1, 2 ** 20), st.integers(1, 512))
def test_decode_bytes_do_not_grow_with_the_context(tmp_path_factory, short, long, batch):
    model = _model(tmp_path_factory.mktemp("ssm"), "[mamba]")
    values = symbol_table.model_values(model)
    program = lower(model, "decode", Conventions())
    for op in program.ops:
        assert S not in op.cost.flops.free_symbols and S not in op.cost.bytes.free_symbols
    assert kvcache.per_sequence(model, 2, short) == kvcache.per_sequence(model, 2, long) == 28 * 2_158_592
    scan = {o.name: o for o in program.ops}["ssd_scan"]
    assert number(scan.cost.bytes, {**values, B: batch, M: batch, b: 2}) == batch * (4_194_304 + 37_120)


def test_only_the_attention_layers_read_more_as_the_context_grows(tmp_path):
    bench = Workbench.of(_model(tmp_path), [load_hardware(str(HARDWARE / "h100-sxm.yaml"))])
    device = bench.devices[0]
    program = bench.program("decode", "ideal", device)
    at = lambda s: bench.ledger(program, device, {B: 8, S: s}).bytes  # noqa: E731
    # 1,024 more cached tokens for 8 sequences: the 4 attention layers read 8 x 1,024 x 16,384 B
    # more (K and V at bf16); the 24 Mamba-2 layers' state reads stay what they were
    assert at(2048) - at(1024) == 8 * 1024 * 16_384


def test_nemotron_h_8b_in_the_catalog():
    model = load_model(str(HARDWARE.parent / "models" / "nemotron-h-8b.yaml"))
    registry = kinds.registry()
    assert kinds.counts(model, "mixer") == [(registry["full"], 4), (registry["mamba"], 24)]
    assert kinds.counts(model, "ffn") == [(registry["no_ffn"], 4), (registry["dense"], 24)]
    values = symbol_table.model_values(model)
    # the checkpoint's 52 blocks: 24 Mamba-2 x 109,635,968 (in_proj 76,021,760, conv1d 51,200,
    # A_log/D/dt_bias 384, norm 8,192, out_proj 33,554,432) = 2,631,263,232; 24 MLPs x 2 x 21,504
    # x 4,096 = 4,227,858,432; 4 attention x (2 x 4096^2 + 2 x 4096 x 1024) = 167,772,160;
    # embedding and head 2 x 131,072 x 4,096 = 1,073,741,824; 52 block norms and the final one
    # 53 x 4,096 = 217,088: 8,100,852,736 (the card's 8B). rooflinec's 28 layers count two norms
    # each: 4 x 4,096 more, for the 4 Mamba-2 layers without an MLP
    assert number(params.count(model).total, values) == 8_100_852_736 + 4 * 4096
    # a sequence at its 8,192-token context: 4 x 4,096 B of K and V per token, 24 x 2,158,592 B
    # of Mamba-2 state
    assert kvcache.per_sequence(model, 2, 8192) == 4 * 4096 * 8192 + 24 * 2_158_592
    ops = ops_by_name(model, "decode")
    assert "rope" not in ops and ops["dense_up_proj"].repeat == 24 and ops["mlp_residual"].into == "dense_down_proj"


def test_tensor_parallelism_splits_the_heads_and_their_state(tmp_path):
    model = _model(tmp_path)
    bench = Workbench.of(model, [load_hardware(str(HARDWARE / "h200-sxm.yaml"))])
    device = bench.devices[0]
    point = {**bench.values, B: 1, M: 1, S: 1024}
    scan = lambda tp: {o.name: o for o in bench.program("decode", "ideal", device, tp=tp).ops}["ssd_scan"]  # noqa: E731
    # tp = 2 (vLLM's MambaMixer2): 64 of the 128 heads and 4 of the 8 groups per device, so half
    # the scan's 5,242,880 FLOPs and half of each sequence's state: 4 attention layers x 2,048 B
    # per token and 24 x 1,079,296 B
    assert number(scan(2).cost.flops, point) == 5_242_880 // 2
    assert kvcache.per_sequence(model, 2, 8192, tp=2) == 4 * 2048 * 8192 + 24 * 1_079_296
    # out_proj is row-parallel: each device holds a partial sum, all-reduced after each Mamba-2 layer
    collectives = {c.name: c.repeat for c in bench.program("decode", "ideal", device, tp=2).collectives}
    assert collectives["ssm_out_proj_all_reduce"] == 24 and collectives["o_proj_all_reduce"] == L - 24
    odd = tmp_path / "odd.yaml"   # 24 SSM heads: 16 devices divide the 32 query heads, not those
    odd.write_text(textwrap.dedent(SPEC.format(pattern=HYBRID)).replace("heads: 128", "heads: 24"))
    with pytest.raises(ValueError, match="16 does not divide the 24 SSM heads"):
        kvcache.per_sequence(load_model(str(odd)), 2, 8192, tp=16)


def test_a_mamba_layer_without_its_section_is_a_located_error(tmp_path):
    path = tmp_path / "bare.yaml"
    path.write_text(textwrap.dedent(SPEC.format(pattern="[mamba_no_ffn, full]")).replace(
        "mamba: {heads: 128, head_dim: 64, state_size: 128, groups: 8, conv_kernel: 4}\n", ""))
    with pytest.raises(SpecError) as exc:
        load_model(str(path))
    assert "attention.pattern: 'mamba_no_ffn' layers need the model's `mamba` section" in str(exc.value)
