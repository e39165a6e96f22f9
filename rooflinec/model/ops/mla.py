"""Multi-head latent attention kernels (DeepSeek-V2, Sec. 2.1; DeepSeek-V3 config names).

Per token and layer the cache holds the latent c_KV (r_kv) and one rotary key (d_rope) that
every head shares. Two ways to attend in decode:
  naive     decompress the cached latents to per-head K (d_nope) and V (d_v) with W_UKV, then
            attend as multi-head attention: the decompression is a GEMM over every cached token
  absorbed  fold W_UK into the query and W_UV into the output (per-head r_kv x d_nope and
            r_kv x d_v products on the new tokens only) and attend in the latent space: scores
            over r_kv + d_rope, values of width r_kv, the cache read once for all heads
"""

from rooflinec.model.ir import Cost
from rooflinec.model.ops.registry import formula
from rooflinec.model.ops.linear import contraction, gemm


@formula("head_gemm")
def head_gemm(heads, m, k, n, b) -> Cost:
    # per head h: X_h[m,k] @ W_h[k,n]; each head's matrix is its own weight (W_UK, W_UV absorbed)
    return gemm(m, k, n, b) * heads


@formula("mla_decompress")
def mla_decompress(tokens, heads, r_kv, d_rope, d_nope, d_v, b) -> Cost:
    # C[tokens, r_kv] @ W_UKV[r_kv, heads*(d_nope+d_v)]: read the cached latents (and rotary
    # keys, concatenated into K), write full-width K and V for every head
    width = heads * (d_nope + d_v)
    return Cost.of(contraction(tokens, r_kv, width), weights=r_kv * width * b,
                   kv_cache=tokens * (r_kv + d_rope) * b,
                   activations=tokens * heads * (d_nope + d_rope + d_v) * b)


@formula("mla_attention")
def mla_attention(batch, queries, keys, heads, d_qk, d_v, b, causal_fraction=1) -> Cost:
    # naive form on decompressed K[keys, heads, d_qk], V[keys, heads, d_v]: Q K^T and P V
    flops = contraction(batch, heads, queries, keys, d_qk + d_v) * causal_fraction
    return Cost.of(flops, activations=batch * heads * (keys * (d_qk + d_v) + queries * (d_qk + d_v)) * b)


@formula("mla_latent_attention")
def mla_latent_attention(batch, queries, keys, heads, r_kv, d_rope, b, causal_fraction=1) -> Cost:
    # absorbed form: scores q~[heads, r_kv + d_rope] . [c_KV; k_rope] and P @ c_KV (width r_kv);
    # the cache [keys, r_kv + d_rope] read once for all heads (one latent "KV head")
    flops = contraction(batch, heads, queries, keys, 2 * r_kv + d_rope) * causal_fraction
    return Cost.of(flops, kv_cache=batch * keys * (r_kv + d_rope) * b,
                   activations=batch * heads * queries * (2 * r_kv + d_rope) * b)
