"""Lightning attention as a layer kind (rooflinec.model.kinds.lightning): the state a sequence
keeps, decode and blocked-prefill FLOPs and bytes, decode's intensity (no S in it) and
prefill's limit as S grows, and that decode's bytes do not grow with the context. Dimensions
from MiniMax-M1's config.json (Hugging Face, MiniMaxAI/MiniMax-M1-80k; tests/hf_configs):
hidden_size 6144, 80 layers with attn_type_list seven lightning (0) then one softmax (1),
num_attention_heads 64 of head_dim 128 (the lightning layers' too), 8 KV heads, block 256 (the
release's BLOCK). The MLP here is a dense SwiGLU (the model's 32 experts are left out: this
tests the lightning kind, not the model's total, which tests/test_hfimport.py checks).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.cost import kvcache
from rooflinec.cost.evaluate import number
from rooflinec.cost.workbench import Workbench
from rooflinec.model import kinds, params, symbol_table
from rooflinec.model.kinds.lightning import C_l
from rooflinec.model.lower import Conventions, lower
from rooflinec.model.symbols import B, L, M, S, b
from rooflinec.spec.load import load_hardware

from layer_kinds import HARDWARE, ops_by_name, spec_model  # a sibling module of the tests

PATTERN = "[lightning, lightning, lightning, lightning, lightning, lightning, lightning, full]"

SPEC = """\
name: minimax-m1-like
d_model: 6144
n_layers: 80
vocab: 200064
attention: {{n_heads: 64, n_kv_heads: 8, head_dim: 128, rotary_dim: 64, pattern: {pattern}}}
lightning_attention: {{heads: 64, head_dim: 128}}
mlp: {{kind: swiglu, d_ff: 9216}}
source: MiniMax-M1 config.json (Hugging Face, MiniMaxAI/MiniMax-M1-80k), dense MLP
"""


def _model(tmp_path, pattern=PATTERN):
    return spec_model(tmp_path, SPEC.format(pattern=pattern), "hybrid.yaml")


def test_seven_lightning_layers_to_one_softmax_is_data(tmp_path):
    model = _model(tmp_path)
    registry = kinds.registry()
    assert kinds.counts(model, "mixer") == [(registry["full"], 10), (registry["lightning"], 70)]
    ops = ops_by_name(model, "decode")
    assert ops["lightning"].repeat == 70 and ops["q_proj"].repeat == L - 70
    # RoPE on the softmax layers only: lightning layers apply no positions
    assert ops["rope"].repeat == L - 70 and not any(n.startswith("lightning") and "rope" in n for n in ops)
    assert (ops["lightning_attn_residual"].into, ops["lightning_attn_residual"].repeat) == ("lightning_out_proj", 70)
    every = _model(tmp_path, "[lightning]")
    assert kinds.counts(every, "mixer") == [(registry["lightning"], 80)]
    assert "q_proj" not in ops_by_name(every, "decode")


def test_state_bytes_per_sequence(tmp_path):
    model = _model(tmp_path)
    # per lightning layer: 64 heads x 128 x 128 = 1,048,576 state elements, 2,097,152 B at bf16
    # (no convolution state); 70 layers: 146,800,640 B. The 10 softmax layers keep K and V,
    # 2*8*128*2 = 4,096 B per token each, 40,960 B per token.
    assert kvcache.per_token(model, 2) == 40_960
    assert kvcache.per_sequence(model, 2, 32_768) == 40_960 * 32_768 + 146_800_640 == 1_488_977_920
    values = symbol_table.model_values(model)
    assert kvcache.sequence_formula(model).subs(values).subs({b: 2, S: 32_768}) == 1_488_977_920


def test_parameters_of_a_lightning_layer(tmp_path):
    model = _model(tmp_path, "[lightning]")
    values = symbol_table.model_values(model)
    parts = {c.name: number(c.per, values) for c in params.count(model).components}
    # qkv_proj 6144 x 3*64*128 = 150,994,944; output_gate 6144 x 8192 = 50,331,648; the norm over
    # all heads 8,192; out_proj 8192 x 6144 = 50,331,648 (the release's MiniMaxM1LightningAttention;
    # the decays are buffers, not parameters)
    assert parts["lightning_qkv_proj"] == 150_994_944 and parts["lightning_gate_proj"] == 50_331_648
    assert parts["lightning_norm"] == 8192 and parts["lightning_out_proj"] == 50_331_648
    assert {n for n in parts if n.startswith("lightning")} == {"lightning_qkv_proj", "lightning_gate_proj",
                                                               "lightning_norm", "lightning_out_proj"}


def test_decode_and_prefill_of_the_recurrence(tmp_path):
    model = _model(tmp_path)
    values = symbol_table.model_values(model)
    assert values[C_l] == 256
    decode = ops_by_name(model, "decode")["lightning"]
    point = {**values, B: 1, M: 1, S: 4096, b: 2}
    # decode, one sequence: 64 heads x 5 x 128 x 128 = 5,242,880 FLOPs (decay, write k v^T, read
    # S^T q); the state read and written, 2 x 1,048,576 x 2 B = 4,194,304 B; q, k, v in and o out,
    # 4 x 8,192 x 2 B = 65,536 B
    assert number(decode.cost.flops, point) == 5_242_880
    assert number(decode.cost.bytes_of("kv_cache"), point) == 4_194_304
    assert number(decode.cost.bytes_of("activations"), point) == 65_536
    prefill = ops_by_name(model, "prefill")["lightning"]
    # prefill of S = 4,096 tokens in blocks of C_l = 256: per token and head 4*256*128 + 256 +
    # 4*128^2 + 2*128^2/256 = 131,072 + 256 + 65,536 + 128 = 196,992; x 64 heads x 4,096 tokens
    assert Fraction(str(sp.nsimplify(prefill.cost.flops.subs(point)))) == 64 * 4096 * 196_992 == 51_640_270_848
    # only the final state is written to the cache: 1,048,576 x 2 B; q, k, v, o once:
    # 4,096 x 4 x 8,192 x 2 B
    assert number(prefill.cost.bytes_of("kv_cache"), point) == 2_097_152
    assert number(prefill.cost.bytes_of("activations"), point) == 268_435_456


def test_intensity_does_not_depend_on_the_context(tmp_path):
    model = _model(tmp_path)
    values = {**symbol_table.model_values(model), b: 2}
    decode = ops_by_name(model, "decode")["lightning"]
    intensity = sp.simplify(decode.cost.flops / decode.cost.bytes)
    # 5 d^2 / (b (2 d^2 + 4 d)) = 5 d / (b (2 d + 4)), with no B or S in it: 640 / 520 = 16/13
    assert S not in intensity.free_symbols and B not in intensity.free_symbols
    assert intensity.subs(values) == sp.Rational(16, 13)
    prefill = ops_by_name(model, "prefill")["lightning"]
    # prefill at one sequence: FLOPs grow as S, bytes as S (q, k, v, o) plus the state once, so
    # the limit is the per-token FLOPs over the per-token traffic: 64 x 196,992 / (4 x 8,192 x 2)
    # = 192.375 FLOP/B
    ratio = (prefill.cost.flops / prefill.cost.bytes).subs({**values, B: 1})
    assert sp.limit(ratio, S, sp.oo) == sp.Rational(64 * 196_992, 65_536) == sp.Rational(1539, 8)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.integers(1, 2 ** 20), st.integers(1, 2 ** 20), st.integers(1, 512))
def test_decode_bytes_do_not_grow_with_the_context(tmp_path_factory, short, long, batch):
    model = _model(tmp_path_factory.mktemp("lightning"), "[lightning]")
    values = symbol_table.model_values(model)
    program = lower(model, "decode", Conventions())
    for op in program.ops:
        assert S not in op.cost.flops.free_symbols and S not in op.cost.bytes.free_symbols
    # a sequence keeps the same bytes at any context: 80 layers of 2,097,152 B
    assert kvcache.per_sequence(model, 2, short) == kvcache.per_sequence(model, 2, long) == 80 * 2_097_152
    op = {o.name: o for o in program.ops}["lightning"]
    assert number(op.cost.bytes, {**values, B: batch, M: batch, b: 2}) == batch * (4_194_304 + 65_536)


def test_only_the_softmax_layers_read_more_as_the_context_grows(tmp_path):
    bench = Workbench.of(_model(tmp_path), [load_hardware(str(HARDWARE / "h200-sxm.yaml"))])
    device = bench.devices[0]
    program = bench.program("decode", "ideal", device)
    at = lambda s: bench.ledger(program, device, {B: 8, S: s}).bytes  # noqa: E731
    # 1,024 more cached tokens for 8 sequences: the 10 softmax layers read 8 x 1,024 x 40,960 B more;
    # the 70 lightning layers' state reads stay what they were
    assert at(2048) - at(1024) == 8 * 1024 * 40_960


def test_tensor_parallelism_splits_the_heads_and_their_state(tmp_path):
    model = _model(tmp_path)
    # tp = 8: 8 of the 64 lightning heads per device, 8 x 128 x 128 x 2 B = 262,144 B a layer;
    # the softmax layers keep one of the 8 KV heads, 512 B a token a layer
    assert kvcache.per_token(model, 2, tp=8) == 10 * 512
    assert kvcache.per_sequence(model, 2, 1000, tp=8) == 10 * 512 * 1000 + 70 * 262_144
