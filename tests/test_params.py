"""Parameter counts from the architecture: published totals, and the laws the count obeys."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.model import params as P
from rooflinec.spec import load as spec
from rooflinec.model import symbols as sym
from rooflinec.model import symbol_table
from rooflinec.cost.evaluate import number
from rooflinec.model.lower import lower

MODELS = ["qwen2.5-7b", "palm-540b", "gpt2-medium", "gpt3-175b"]
ROOT = Path(__file__).resolve().parent.parent


def model(key: str):
    return spec.load_model(str(ROOT / "rooflinec" / "spec" / "catalog" / "models" / f"{key}.yaml"))


def total(m) -> int:
    return int(number(P.count(m).total, symbol_table.model_values(m)))


def test_qwen25_7b_instruct_has_7_615_616_512_parameters():
    # Qwen2.5-7B-Instruct config.json (HF model card: 7.61B). Per layer:
    #   q, o 3584*3584 = 12,845,056 each; k, v 3584*512 = 1,835,008 each; qkv bias 3584 + 2*512 = 4608
    #   SwiGLU 3*3584*18944 = 203,685,888; two RMSNorm scales 2*3584 = 7168  -> 233,057,792
    # 28 layers = 6,525,618,176; untied embeddings 2*152064*3584 = 1,089,994,752; final norm 3584
    # 6,525,618,176 + 1,089,994,752 + 3,584 = 7,615,616,512
    assert total(model("qwen2.5-7b")) == 7_615_616_512


def test_palm_540b_count_matches_the_papers_540_35b():
    # PaLM table 1 / appendix B: N = 540.35e9. Per layer: q, o 18432*12288 = 226,492,416 each;
    # k, v (multi-query) 18432*256 = 4,718,592 each; SwiGLU 3*18432*73728 = 4,076,863,488;
    # one shared LayerNorm scale 18432 -> 4,539,303,936; x 118 = 535,637,864,448;
    # tied embedding 256000*18432 = 4,718,592,000; final norm 18432 -> 540,356,474,880.
    n = total(model("palm-540b"))
    assert n == 540_356_474_880
    assert n // 10**7 == 54035            # the paper's 540.35B truncates it


def test_gpt2_medium_count():
    # GPT-2 medium, HF checkpoint: wte 50257*1024 = 51,463,168; wpe 1024*1024 = 1,048,576;
    # per layer: 2 LayerNorms 2*2048, c_attn 1024*3072 + 3072, c_proj 1024*1024 + 1024,
    # c_fc 1024*4096 + 4096, mlp c_proj 4096*1024 + 1024 = 12,596,224; x 24 = 302,309,376;
    # final LayerNorm 2048 -> 354,823,168.
    assert total(model("gpt2-medium")) == 354_823_168


@pytest.mark.parametrize("key", MODELS)
def test_matmul_components_are_the_lowered_weights(key):
    """Every matmul component is the weight a lowered linear op reads, element for element."""
    m = model(key)
    counted, values = P.count(m), {**symbol_table.model_values(m), sym.b: 1}
    weights = {op.name: op.cost.bytes_of("weights") for op in lower(m, "decode").ops
               if op.category == "linear"}
    for c in counted.components:
        if c.matmul:
            name = "lm_head" if c.name == "embedding" else c.name      # a tied table is the head
            assert number(weights[name], values) == number(c.per, values)
    assert sum(number(w * (sym.L if n != "lm_head" else 1), values) for n, w in weights.items()) \
        == number(counted.matmul, values)


# --- laws over arbitrary architectures ---------------------------------------------------

dims = st.integers(1, 64)


@st.composite
def models(draw):
    n_kv = draw(st.integers(1, 8))
    return dataclasses.replace(
        model("qwen2.5-7b"), d_model=draw(dims), n_layers=draw(st.integers(1, 8)),
        vocab=draw(dims), n_heads=n_kv * draw(st.integers(1, 4)), n_kv_heads=n_kv,
        head_dim=draw(dims), d_ff=draw(dims), mlp_kind=draw(st.sampled_from(["swiglu", "gelu"])),
        qkv_bias=draw(st.booleans()), out_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()),
        norm_bias=draw(st.booleans()), block=draw(st.sampled_from(["sequential", "parallel"])),
        tied_embeddings=draw(st.booleans()),
        positions=draw(st.sampled_from(["rope", "learned"])), max_context=draw(dims))


def count(m, attr="total") -> int:
    return int(number(getattr(P.count(m), attr), symbol_table.model_values(m)))


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(models())
def test_total_is_the_sum_of_components(m):
    counted = P.count(m)
    values = symbol_table.model_values(m)
    assert count(m) == sum(number(c.count, values) for c in counted.components)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(models())
def test_untying_adds_one_vocab_by_width_matrix(m):
    tied = dataclasses.replace(m, tied_embeddings=True)
    untied = dataclasses.replace(m, tied_embeddings=False)
    assert count(untied) - count(tied) == m.vocab * m.d_model
    # the non-embedding count keeps an untied head, so it grows by the same matrix
    assert count(untied, "non_embedding") - count(tied, "non_embedding") == m.vocab * m.d_model


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(models())
def test_swiglu_adds_a_gate_matrix(m):
    gelu, swiglu = (dataclasses.replace(m, mlp_kind=k) for k in ("gelu", "swiglu"))
    gate = m.d_model * m.d_ff + (m.d_ff if m.mlp_bias else 0)
    assert count(swiglu) - count(gelu) == m.n_layers * gate


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(models())
def test_parallel_block_shares_one_norm(m):
    seq, par = (dataclasses.replace(m, block=k) for k in ("sequential", "parallel"))
    assert count(seq) - count(par) == m.n_layers * m.d_model * (2 if m.norm_bias else 1)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(models(), st.integers(1, 8))
def test_each_kv_head_adds_its_k_and_v(m, extra):
    more = dataclasses.replace(m, n_kv_heads=m.n_kv_heads + extra,
                               n_heads=(m.n_kv_heads + extra) * m.n_heads)
    base = dataclasses.replace(m, n_heads=more.n_heads)
    per_head = 2 * m.head_dim * (m.d_model + (1 if m.qkv_bias else 0))
    assert count(more) - count(base) == m.n_layers * extra * per_head


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(models())
def test_non_embedding_and_matmul_counts_leave_out_what_they_say(m):
    positions = m.max_context * m.d_model if m.positions == "learned" else 0
    assert count(m) - count(m, "non_embedding") == m.vocab * m.d_model + positions
    assert count(m, "matmul") <= count(m)
