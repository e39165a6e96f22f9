"""Mamba-1 state-space layers as a layer kind (rooflinec.model.kinds.mamba1): the state a sequence
keeps, the parameters of a layer, decode by the recurrence and prefill by the parallel scan, and
that decode's bytes do not grow with the context. Dimensions from AI21-Jamba-1.5-Mini's
config.json (Hugging Face, ai21labs/AI21-Jamba-1.5-Mini; tests/hf_configs/jamba-1.5-mini):
hidden_size 4096, mamba_expand 2 (d_inner 8192), mamba_d_state 16, mamba_dt_rank 256,
mamba_d_conv 4, mamba_conv_bias true, mamba_proj_bias false; attention 32 query heads, 8 KV heads
of 128, one layer in 8 (attn_layer_offset 4); 16 experts, top-2, every other layer (offset 1).
"""

from __future__ import annotations

import textwrap

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.base.errors import SpecError
from rooflinec.cost import kvcache
from rooflinec.cost.evaluate import number
from rooflinec.cost.workbench import Workbench
from rooflinec.model import kinds, params, symbol_table
from rooflinec.model.lower import Conventions, lower
from rooflinec.model.symbols import B, L, M, S, b
from rooflinec.spec.load import load_hardware, load_model

from layer_kinds import CATALOG, ops_by_name, spec_model  # a sibling module of the tests


SPEC = """\
name: jamba-like
d_model: 4096
n_layers: 32
vocab: 65536
attention: {{n_heads: 32, n_kv_heads: 8, head_dim: 128, pattern: {pattern}}}
mamba1: {{expand: 2, state_size: 16, dt_rank: 256, conv_kernel: 4, dt_bc_norms: true{extra}}}
mlp: {{kind: swiglu, d_ff: 14336}}
positions: none
source: AI21-Jamba-1.5-Mini config.json (Hugging Face, ai21labs/AI21-Jamba-1.5-Mini), a dense MLP every layer
"""
JAMBA = "[mamba1, mamba1, mamba1, mamba1, full, mamba1, mamba1, mamba1]"   # 28 Mamba-1 layers, 4 attention


def _model(tmp_path, pattern=JAMBA, extra=""):
    return spec_model(tmp_path, SPEC.format(pattern=pattern, extra=extra), "jamba.yaml")


def test_the_hybrid_pattern_is_data(tmp_path):
    model = _model(tmp_path)
    registry = kinds.registry()
    assert kinds.counts(model, "mixer") == [(registry["full"], 4), (registry["mamba1"], 28)]
    ops = ops_by_name(model, "decode")
    assert ops["selective_scan"].repeat == 28 and ops["q_proj"].repeat == L - 28
    assert (ops["mamba1_attn_residual"].into, ops["mamba1_attn_residual"].repeat) == ("mamba_out_proj", 28)


def test_state_bytes_per_sequence(tmp_path):
    model = _model(tmp_path)
    # per Mamba-1 layer: the state 8,192 channels x 16 = 131,072 elements, the convolution's last
    # 3 inputs of 8,192 channels = 24,576: 155,648 elements, 311,296 B at bf16; 28 layers:
    # 8,716,288 B. The 4 attention layers keep K and V, 2*8*128*2 = 4,096 B per token each.
    assert kvcache.per_token(model, 2) == 16_384
    assert kvcache.per_sequence(model, 2, 8192) == 16_384 * 8192 + 8_716_288 == 142_934_016
    values = symbol_table.model_values(model)
    assert kvcache.sequence_formula(model).subs(values).subs({b: 2, S: 8192}) == 142_934_016


def test_parameters_of_a_mamba1_layer(tmp_path):
    model = _model(tmp_path, "[mamba1]")
    values = symbol_table.model_values(model)
    parts = {c.name: number(c.per, values) for c in params.count(model).components}
    # JambaMambaMixer's shapes: in_proj 4096 x 2*8192 = 67,108,864; conv1d 8,192 x (4 taps + a
    # bias) = 40,960; x_proj 8192 x (256 + 2*16) = 2,359,296; dt_proj 256 x 8192 = 2,097,152;
    # A_log 8192 x 16, D 8192 and dt_proj's bias 8192 = 147,456; dt, B, C norms 256 + 16 + 16 =
    # 288; out_proj 8192 x 4096 = 33,554,432: 105,308,448 a layer
    assert (parts["mamba_in_proj"], parts["mamba_conv1d"], parts["mamba_x_proj"], parts["mamba_dt_proj"]) \
        == (67_108_864, 40_960, 2_359_296, 2_097_152)
    assert (parts["mamba_a_d_dt_bias"], parts["mamba_dt_bc_norms"], parts["mamba_out_proj"]) == (147_456, 288, 33_554_432)
    mixer = [n for n in parts if n.startswith("mamba_")]
    assert sum(parts[n] for n in mixer) == 105_308_448
    biased = _model(tmp_path, "[mamba1]", ", proj_bias: true")   # in_proj 2*8192 and out_proj 4096 biases
    counted = {c.name: number(c.per, values) for c in params.count(biased).components}
    assert (counted["mamba_in_bias"], counted["mamba_out_bias"]) == (16_384, 4096)
    assert {"mamba_in_bias", "mamba_out_bias"} <= set(ops_by_name(biased, "decode"))


def test_decode_and_prefill_of_the_scan(tmp_path):
    model = _model(tmp_path)
    values = symbol_table.model_values(model)
    point = {**values, B: 1, M: 1, S: 4096, b: 2}
    decode = ops_by_name(model, "decode")["selective_scan"]
    # decode, one sequence, at any S (here 4,096): 6 x 8,192 x 16 = 786,432 FLOPs; the state read
    # and written, 2 x 131,072 x 2 B = 524,288 B; A, D and dt's bias 8,192 x (16 + 2) x 2 B =
    # 294,912 B; x, dt, z-free y and B, C: (3 x 8,192 + 2 x 16) x 2 B = 49,216 B
    assert number(decode.cost.flops, point) == 786_432
    assert number(decode.cost.bytes_of("kv_cache"), point) == 524_288
    assert number(decode.cost.bytes_of("weights"), point) == 294_912
    assert number(decode.cost.bytes_of("activations"), point) == 49_216
    prefill = ops_by_name(model, "prefill")["selective_scan"]
    # prefill of S = 4,096 tokens by the parallel scan: 10 x 8,192 x 16 = 1,310,720 FLOPs a token,
    # x 4,096 = 5,368,709,120 (linear in S); only the final state is written, 131,072 x 2 B;
    # the tokens' operands 4,096 x 49,216 = 201,588,736 B
    assert number(prefill.cost.flops, point) == 5_368_709_120
    assert sp.degree(prefill.cost.flops, S) == 1
    assert number(prefill.cost.bytes_of("kv_cache"), point) == 262_144
    assert number(prefill.cost.bytes_of("activations"), point) == 201_588_736
    # the layer's other decode work: x_proj 2 x 8192 x 288 = 4,718,592 FLOPs, dt_proj 2 x 256 x
    # 8192 = 4,194,304, the convolution 2 x 4 x 8,192 = 65,536
    ops = ops_by_name(model, "decode")
    assert [number(ops[n].cost.flops, point) for n in ("mamba_x_proj", "mamba_dt_proj", "mamba_conv")] \
        == [4_718_592, 4_194_304, 65_536]


def test_decode_intensity_does_not_depend_on_the_context(tmp_path):
    model = _model(tmp_path, "[mamba1]")
    values = symbol_table.model_values(model)
    scan = ops_by_name(model, "decode")["selective_scan"]
    # 786,432 / (524,288 + 294,912 + 49,216) FLOPs per byte at one sequence, whatever S
    point = {**values, B: 1, M: 1, b: 2}
    intensity = (scan.cost.flops / scan.cost.bytes).subs(point)
    assert S not in intensity.free_symbols and intensity == sp.Rational(786_432, 868_416)
    # as the batch grows A, D and dt's bias are shared: the intensity tends to 6*16 / (2*16*2 +
    # (3*8192 + 32)*2/8192) per channel, 786,432 / (524,288 + 49,216), still memory-bound
    limit = sp.limit((scan.cost.flops / scan.cost.bytes).subs({**values, M: B, b: 2}), B, sp.oo)
    assert limit == sp.Rational(786_432, 573_504)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.integers(1, 2 ** 20), st.integers(1, 2 ** 20), st.integers(1, 512))
def test_decode_bytes_do_not_grow_with_the_context(tmp_path_factory, short, long, batch):
    model = _model(tmp_path_factory.mktemp("m1"), "[mamba1]")
    values = symbol_table.model_values(model)
    program = lower(model, "decode", Conventions())
    for op in program.ops:
        assert S not in op.cost.flops.free_symbols and S not in op.cost.bytes.free_symbols
    assert kvcache.per_sequence(model, 2, short) == kvcache.per_sequence(model, 2, long) == 32 * 311_296
    scan = {o.name: o for o in program.ops}["selective_scan"]
    assert number(scan.cost.bytes, {**values, B: batch, M: batch, b: 2}) == batch * (524_288 + 49_216) + 294_912


def test_only_the_attention_layers_read_more_as_the_context_grows(tmp_path):
    bench = Workbench.of(_model(tmp_path), [load_hardware(str(CATALOG / "hardware" / "h100-sxm.yaml"))])
    device = bench.devices[0]
    program = bench.program("decode", "ideal", device)
    at = lambda s: bench.ledger(program, device, {B: 8, S: s}).bytes  # noqa: E731
    # 1,024 more cached tokens for 8 sequences: the 4 attention layers read 8 x 1,024 x 16,384 B
    # more; the 28 Mamba-1 layers' state reads stay what they were
    assert at(2048) - at(1024) == 8 * 1024 * 16_384


def test_tensor_parallelism_splits_the_channels_and_their_state(tmp_path):
    model = _model(tmp_path)
    bench = Workbench.of(model, [load_hardware(str(CATALOG / "hardware" / "h200-sxm.yaml"))])
    device = bench.devices[0]
    point = {**bench.values, B: 1, M: 1, S: 1024}
    ops = {o.name: o for o in bench.program("decode", "ideal", device, tp=2).ops}
    # tp = 2 (vLLM's MambaMixer): 4,096 of the 8,192 channels per device, so half the scan and
    # half of each sequence's state: 4 attention layers x 2,048 B per token and 28 x 155,648 B
    assert number(ops["selective_scan"].cost.flops, point) == 786_432 // 2
    assert kvcache.per_sequence(model, 2, 8192, tp=2) == 4 * 2048 * 8192 + 28 * 155_648
    collectives = {c.name: c.repeat for c in bench.program("decode", "ideal", device, tp=2).collectives}
    assert collectives["mamba_out_proj_all_reduce"] == 28 and collectives["o_proj_all_reduce"] == L - 28
    odd = tmp_path / "odd.yaml"   # 4,104 channels: 16 devices divide the 32 query heads, not those
    odd.write_text(textwrap.dedent(SPEC.format(pattern=JAMBA, extra="")).replace("d_model: 4096", "d_model: 4104")
                   .replace("expand: 2", "expand: 1"))
    with pytest.raises(ValueError, match="16 does not divide the 4104 Mamba-1 channels"):
        kvcache.per_sequence(load_model(str(odd)), 2, 8192, tp=16)


def test_a_mamba1_layer_without_its_section_is_a_located_error(tmp_path):
    path = tmp_path / "bare.yaml"
    text = textwrap.dedent(SPEC.format(pattern="[mamba1, full]", extra=""))
    path.write_text("".join(line for line in text.splitlines(True) if not line.startswith("mamba1:")))
    with pytest.raises(SpecError) as exc:
        load_model(str(path))
    assert "attention.pattern: 'mamba1' layers need the model's `mamba1` section" in str(exc.value)


def test_jamba_in_the_catalog():
    model = load_model(str(CATALOG / "models" / "jamba-1.5-mini.yaml"))
    registry = kinds.registry()
    assert kinds.counts(model, "mixer") == [(registry["full"], 4), (registry["mamba1"], 28)]
    assert kinds.counts(model, "ffn") == [(registry["dense"], 16), (registry["moe"], 16)]
    # a sequence at 262,144 tokens (max_position_embeddings): 4 x 4,096 B of K and V per token and
    # 28 x 311,296 B of Mamba-1 state: 4,294,967,296 + 8,716,288 = 4,303,683,584 B; a dense 32-layer model of the same
    # attention would keep 8x the per-token part
    assert kvcache.per_sequence(model, 2, 262_144) == 16_384 * 262_144 + 8_716_288 == 4_303_683_584
