"""Hypothesis property tests of the core formulas: each test asserts one law."""

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.cost.derive import crossing
from rooflinec.model.ir import intensity
from rooflinec.model.ops import FORMULAS
from rooflinec.model.symbols import B, M, S, b, d_head, n_kv, n_q

dims = st.integers(min_value=1, max_value=1 << 16)
elem_bytes = st.sampled_from([1, 2, 4])
GEMM_I = intensity(FORMULAS["gemm"](M, sp.Symbol("K", positive=True), sp.Symbol("N", positive=True), b))
K, N = sorted(GEMM_I.free_symbols - {M, b}, key=str)


def gemm_i(m, k, n, nbytes):
    cost = FORMULAS["gemm"](m, k, n, nbytes)
    return sp.Rational(cost.flops) / sp.Rational(cost.bytes)


@pytest.mark.slow
@given(dims, dims, dims, elem_bytes)
def test_gemm_intensity_rises_with_m(m, k, n, nbytes):
    assert gemm_i(m + 1, k, n, nbytes) > gemm_i(m, k, n, nbytes)


@pytest.mark.slow
@given(dims, dims, dims, elem_bytes)
def test_gemm_intensity_below_both_bounds(m, k, n, nbytes):
    i = gemm_i(m, k, n, nbytes)
    assert i < sp.Rational(2 * m, nbytes)                        # weights alone cap it at 2M/b
    assert i < sp.Rational(2 * k * n, (k + n) * nbytes)          # infinitely many tokens cap it


@pytest.mark.slow
@given(dims, dims, dims, elem_bytes)
def test_gemm_intensity_symmetric_in_k_and_n(m, k, n, nbytes):
    assert gemm_i(m, k, n, nbytes) == gemm_i(m, n, k, nbytes)


@pytest.mark.slow
@given(st.integers(1, 1 << 20), st.integers(1, 1 << 20), st.integers(1, 64), st.integers(1, 8),
       st.integers(16, 256), elem_bytes)
def test_decode_attention_intensity_same_for_every_context(s1, s2, kv, group, d, nbytes):
    def at(s):
        c = FORMULAS["attention"](1, 1, s, kv * group, kv, d, nbytes, io=False)
        return sp.Rational(c.flops) / sp.Rational(c.bytes)
    assert at(s1) == at(s2) == sp.Rational(2 * kv * group, nbytes * kv)


@pytest.mark.slow
@given(dims, dims, st.floats(min_value=1, max_value=2000), elem_bytes)
@settings(max_examples=60, deadline=None)
def test_ridge_crossing_is_the_first_compute_bound_m(k, n, ridge, nbytes):
    c = crossing(GEMM_I, M, {K: k, N: n, b: nbytes}, ridge)
    ridge = sp.Rational(ridge)
    if c.at is None:
        assert sp.Rational(2 * k * n, (k + n) * nbytes) <= ridge    # the supremum never reaches it
        assert c.supremum == sp.Rational(2 * k * n, (k + n) * nbytes)
    else:
        assert gemm_i(c.at, k, n, nbytes) >= ridge
        assert c.at == 1 or gemm_i(c.at - 1, k, n, nbytes) < ridge


def test_attention_reads_kv_heads_not_query_heads():
    cost = FORMULAS["attention"](B, 1, S, n_q, n_kv, d_head, b)
    assert cost.bytes_of("kv_cache") == 2 * B * S * n_kv * d_head * b   # GQA: KV heads only
    assert n_q not in cost.bytes_of("kv_cache").free_symbols


def test_flash_attention_reads_kv_heads_not_query_heads():
    """GQA in FlashAttention: K and V come from the cache once per KV head, like the unfused
    matmuls; Q, O and the running statistics stay per query head."""
    gqa = FORMULAS["flash_attention"](B, n_q, S, d_head, b, 128, kv_heads=n_kv)
    assert gqa.bytes_of("kv_cache") == 2 * B * S * n_kv * d_head * b
    mha = FORMULAS["flash_attention"](B, n_q, S, d_head, b, 128)
    assert mha.bytes_of("kv_cache") == 2 * B * S * n_q * d_head * b
    assert gqa.bytes_of("activations") == mha.bytes_of("activations") and gqa.flops == mha.flops


@pytest.mark.slow
def test_squeezed_limit_of_flash_attention_matches_sympy():
    """FlashAttention's intensity has ceiling(S/Bc) passes in its bytes; the squeeze in
    derive.limit_at_infinity must give sympy's own limit."""
    from rooflinec.cost.derive import limit_at_infinity
    for block_cols in (64, 128, 192, 384):
        for kv_heads in (None, n_kv):   # MHA and GQA
            f = intensity(FORMULAS["flash_attention"](B, n_q, S, d_head, b, block_cols, kv_heads=kv_heads))
            assert sp.cancel(limit_at_infinity(f, S) - sp.limit(f, S, sp.oo)) == 0


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1024, 4096, 8192]), st.sampled_from([64, 128, 256]), st.integers(20, 400))
def test_crossing_through_a_ceiling_is_the_first_compute_bound_value(d, tile, ridge):
    """A declared op whose bytes count whole tiles, ceil(M / tile): not rational in M, so the
    crossing is searched; it must be the first M at which intensity reaches the ridge."""
    d_, b_ = sp.Symbol("d", positive=True), sp.Symbol("b", positive=True)
    f = 2 * M * d_ ** 2 / (b_ * (d_ ** 2 + tile * sp.ceiling(M / tile) * d_))
    at = crossing(f, M, {d_: d, b_: 2}, ridge).at
    value = lambda m: sp.Rational(2 * m * d * d, 2 * (d * d + tile * -(-m // tile) * d))  # noqa: E731
    first = next((m for m in range(1, 1 << 14) if value(m) >= ridge), None)
    assert at == first


def test_crossing_through_max_has_a_supremum_and_a_crossing():
    """Max(M, 64) is M from M = 64 on, so the limit is that of 2 M d / (b (M + 8)): 2 d / b;
    the crossing is searched (not rational in M) all the same."""
    d_ = sp.Symbol("d", positive=True)
    c = crossing(2 * M * d_ / (b * (sp.Max(M, 64) + 8)), M, {d_: 4096, b: 2}, 153)
    assert c.at == 3   # 2*3*4096 / (2*72) = 170.7 >= 153 > 113.8 at M = 2
    assert c.supremum == 4096   # 2 d / b at d = 4096, b = 2
