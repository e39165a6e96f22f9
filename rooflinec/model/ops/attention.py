"""Attention kernels: one fused kernel, the unfused steps around the score matrix, FlashAttention."""

import sympy as sp

from rooflinec.model.ir import Cost
from rooflinec.model.ops.registry import formula
from rooflinec.model.ops.linear import contraction


@formula("attention")
def attention(batch, queries, keys, n_q, n_kv, d, b, io: bool = True, causal_fraction=1,
              read_keys=None) -> Cost:
    """`queries` tokens per sequence attend to `keys` cached tokens each.

    FLOPs: Q K^T  [n_q, queries, d] @ [n_q, d, keys] and P V  [n_q, queries, keys] @ [n_kv, keys, d].
    Bytes: K and V read once from the cache (n_kv heads, the GQA saving) for the `read_keys`
    tokens the queries see between them (default `keys`: a windowed layer's prefill queries see
    min(S, W) keys each but all S between them); with `io`, Q read and O written too.
    `causal_fraction` scales the FLOPs when masked-out scores are skipped.
    """
    flops = 2 * contraction(batch, n_q, queries, keys, d) * causal_fraction
    kv = 2 * batch * n_kv * (keys if read_keys is None else read_keys) * d * b
    q_and_o = 2 * batch * n_q * queries * d * b if io else 0
    return Cost.of(flops, kv_cache=kv, activations=q_and_o)


# Unfused attention: each step is its own kernel and the score matrix goes through HBM.
# Per (sequence, query head). K and V come from the cache once per KV head: a grouped matmul
# lets the n_q / n_kv query heads of a group share each K/V tile (GQA's whole point), so the
# KV cache is read once per step, as in the fused kernel.

@formula("qk_matmul")
def qk_matmul(batch, heads, kv_heads, queries, keys, d, b, causal_fraction=1, read_keys=None) -> Cost:
    # Q[batch*heads, queries, d] @ K^T[batch*kv_heads, d, keys] -> S[batch*heads, queries, keys]
    flops = contraction(batch, heads, queries, keys, d) * causal_fraction
    return Cost.of(flops, activations=batch * heads * queries * d * b,
                   kv_cache=batch * kv_heads * (keys if read_keys is None else read_keys) * d * b,
                   scores=batch * heads * queries * keys * b)


@formula("pv_matmul")
def pv_matmul(batch, heads, kv_heads, queries, keys, d, b, causal_fraction=1, read_keys=None) -> Cost:
    # P[batch*heads, queries, keys] @ V[batch*kv_heads, keys, d] -> O[batch*heads, queries, d]
    flops = contraction(batch, heads, queries, keys, d) * causal_fraction
    return Cost.of(flops, scores=batch * heads * queries * keys * b,
                   kv_cache=batch * kv_heads * (keys if read_keys is None else read_keys) * d * b,
                   activations=batch * heads * queries * d * b)


# FlashAttention forward, Dao et al. 2022, Algorithm 1, counted literally per query head with
# N = sequence length, d = head dim, Bc = column block (keys per on-chip tile):
#   FLOPs  4 N^2 d (Q K^T and P V) + 5 N^2 (the softmax, as in `softmax`)
#   HBM    Nd + 2N (write O, l, m initialised) + 2Nd (read K and V once)
#          + Tc (3Nd + 4N), Tc = ceil(N / Bc) (per K/V block: read Q, O, l, m; write O, l, m)
# except that K and V are read once per KV head: under GQA a group's query heads share each
# K/V tile, as in the unfused matmuls above (kv_heads defaults to heads, i.e. MHA).
FLASH_SOFTMAX_FLOPS = 5


@formula("flash_attention")
def flash_attention(batch, heads, N, d, b, block_cols, causal_fraction=1, kv_heads=None) -> Cost:
    kv_heads = heads if kv_heads is None else kv_heads
    t_c = sp.ceiling(N / block_cols)
    flops = (2 * contraction(N, N, d) + FLASH_SOFTMAX_FLOPS * N * N) * causal_fraction
    per_head_act = N * d + 2 * N + t_c * (3 * N * d + 4 * N)
    return Cost.of(batch * heads * flops, kv_cache=batch * kv_heads * 2 * N * d * b,
                   activations=batch * heads * per_head_act * b)
