"""Golden tests: Qwen2.5-7B-Instruct (its model card and config.json: d_model 3584, 28 query and
4 KV heads of 128, d_ff 18944) on an RTX 4090 (NVIDIA Ada Lovelace whitepaper: 165.2 TFLOP/s
bf16 tensor with fp32 accumulate, 1008 GB/s). Worked by hand, with the ridge rounded to 165
FLOP/byte:
  M=1:   every projection I = 1.0 (memory-bound)
  M=256: q/o 224.0 (compute), k/v 162.9 (memory), gate/up 236.0 (compute), down 236.0 (compute)
  S=128/512/2048: decode I = 7.0 (memory); prefill I = 896.0 / 3584.0 / 14336.0 (compute)
The report uses the device's ridge, 165.2e12 / 1008e9 = 163.89. No regime of the
table changes between 165 and 163.9: the closest call, k/v at 162.9, is below both.
"""

import pytest
import sympy as sp

from rooflinec.cli import report
from rooflinec.spec import load as spec
from rooflinec.model.ir import intensity
from rooflinec.model.ops import FORMULAS
from rooflinec.model.symbols import B, S, b, d_head, n_kv, n_q

QWEN = "specs/qwen.yaml"


@pytest.fixture(scope="module")
def qwen():
    return report.build(spec.load_study(QWEN))


def section(rep, kind):
    return next(s for s in rep["sections"] if s["kind"] == kind)


@pytest.mark.slow
def test_rtx4090_ridge_is_163_9(qwen):
    rtx = next(d for d in qwen["devices"] if d["key"] == "rtx4090")
    # 165.2e12 FLOP/s / 1008e9 B/s = 163.888... FLOP/byte
    assert rtx["ridge_matrix"] == pytest.approx(163.888, abs=1e-3)


# (row, M) -> (intensity worked by hand above, regime at ridge 163.9)
GEMM_TABLE = {
    ("q_proj / o_proj", 1): (1.0, "memory-bound"),
    ("k_proj / v_proj", 1): (1.0, "memory-bound"),
    ("gate_proj / up_proj", 1): (1.0, "memory-bound"),
    ("down_proj", 1): (1.0, "memory-bound"),
    # 2*256*3584^2 / ((256*3584 + 3584^2 + 256*3584) * 2) = 224.0
    ("q_proj / o_proj", 256): (224.0, "compute-bound"),
    # 2*256*3584*512 / ((256*3584 + 3584*512 + 256*512) * 2) = 162.9
    ("k_proj / v_proj", 256): (162.9, "memory-bound"),
    # 2*256*3584*18944 / ((256*3584 + 3584*18944 + 256*18944) * 2) = 236.0
    ("gate_proj / up_proj", 256): (236.0, "compute-bound"),
    ("down_proj", 256): (236.0, "compute-bound"),
}


@pytest.mark.parametrize("key", list(GEMM_TABLE))
def test_gemm_table(qwen, key):
    label, m = key
    row = next(r for r in section(qwen, "gemm_intensity")["rows"] if r["label"] == label)
    p = next(p for p in row["points"] if p["tokens"] == m)
    want, regime = GEMM_TABLE[key]
    assert round(p["intensity"], 1) == want
    assert p["regime"]["rtx4090"] == regime
    assert p["spread"] == pytest.approx(0, abs=1e-9)  # ops sharing a row have equal intensity


@pytest.mark.parametrize("context,decode,prefill", [(128, 7.0, 896.0), (512, 7.0, 3584.0),
                                                    (2048, 7.0, 14336.0)])
def test_attention_table(qwen, context, decode, prefill):
    cases = {(c["phase"], c["count"]): c for c in section(qwen, "attention_intensity")["cases"]}
    d = next(p for p in cases["decode", "kv"]["points"] if p["context"] == context)
    p = next(p for p in cases["prefill", "kv"]["points"] if p["context"] == context)
    # decode: 4*n_q*S*d / (2*n_kv*S*d*b) = 2*28/(2*4) = 7; prefill: 7*S
    assert round(d["intensity"], 1) == decode and d["regime"]["rtx4090"] == "memory-bound"
    assert round(p["intensity"], 1) == prefill and p["regime"]["rtx4090"] == "compute-bound"


def test_prefill_attention_crossing_matches_the_hand_count(qwen):
    # S* = I* b / (2 n_q / n_kv) = 163.9 * 2 / 14 = 23.4 -> 24 tokens (at the rounded ridge: 165/7 ~ 24)
    cases = {(c["phase"], c["count"]): c for c in section(qwen, "attention_intensity")["cases"]}
    assert cases["prefill", "kv"]["crossing"]["rtx4090"] == 24
    assert cases["decode", "kv"]["crossing"]["rtx4090"] is None


def test_k_proj_needs_more_tokens_than_q_proj(qwen):
    rows = {r["label"]: r for r in section(qwen, "gemm_intensity")["rows"]}
    for dev in ("rtx4090", "a100-40gb"):
        assert rows["k_proj / v_proj"]["crossing"][dev] > rows["q_proj / o_proj"]["crossing"][dev]
    # q/o: M* = ceil(R b K N / (2 K N - R b (K + N))) with K = N = 3584, R = 165.2e12/1008e9
    r = sp.Rational(165_200_000_000_000, 1_008_000_000_000)
    k = n = 3584
    assert rows["q_proj / o_proj"]["crossing"]["rtx4090"] == sp.ceiling(r * 2 * k * n / (2 * k * n - r * 2 * (k + n)))


def attention_intensity(queries, io=False):
    return intensity(FORMULAS["attention"](B, queries, S, n_q, n_kv, d_head, b, io=io))


def test_decode_attention_intensity_is_gqa_ratio_over_b():
    # decode: 4 n_q S d FLOPs over K and V, 2 n_kv S d b bytes: I = 4 n_q S d / (2 n_kv S d b) = (2/b)(n_q/n_kv): S and d cancel
    assert sp.simplify(attention_intensity(1) - 2 * n_q / (b * n_kv)) == 0


def test_prefill_attention_intensity_is_decode_times_s():
    assert sp.simplify(attention_intensity(S) - 2 * n_q * S / (b * n_kv)) == 0


def test_decode_attention_with_q_and_o_tends_to_the_ratio():
    exact = attention_intensity(1, io=True)
    assert S in exact.free_symbols
    assert sp.limit(exact, S, sp.oo) == 2 * n_q / (b * n_kv)


def gemm_intensity(m, k, n):
    return intensity(FORMULAS["gemm"](m, k, n, b))


def test_gemm_at_one_token_tends_to_2_over_b():
    k, n = sp.symbols("K N", positive=True)
    i = gemm_intensity(1, k, n)
    # K, N >> 1: the K*N weight read dominates the bytes
    assert sp.limit(sp.limit(i, k, sp.oo), n, sp.oo) == 2 / b


def test_gemm_with_few_tokens_tends_to_2m_over_b():
    k, n, m = sp.symbols("K N M", positive=True)
    i = gemm_intensity(m, k, n)
    # M << K, N: fix M and let K, N grow
    assert sp.simplify(sp.limit(sp.limit(i, k, sp.oo), n, sp.oo) - 2 * m / b) == 0


def test_derivation_shows_s_cancel(qwen):
    decode = next(p for p in section(qwen, "derivations")["phases"] if p["phase"] == "decode")
    att = next(o for o in decode["ops"] if o["op"] == "attention")
    assert att["limit_S"] == 2 * n_q / (b * n_kv)
    assert "S" in att["depends_on"]           # the ledger's exact count reads Q and writes O too


def test_decode_view_weights_dominate_kv(qwen):
    # 7.6e9 parameters x 2 B: ~14 GiB of weights vs < 1 GiB of KV at moderate context; average I ~ 1
    p = next(p for p in section(qwen, "decode_view")["points"] if p["batch"] == 1 and p["context"] == 4096)
    assert 13 * 2**30 < p["weight_bytes"] < 15 * 2**30
    assert p["kv_bytes"] < 2**30
    # KV: 2 (K, V) * 28 layers * 4 heads * 128 * 2 bytes * 4096 tokens = 224 MiB
    assert p["kv_bytes"] == 2 * 28 * 4 * 128 * 2 * 4096
    assert 0.9 < p["intensity"] < 1.2
