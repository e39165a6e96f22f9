"""Attention as one kernel: scores and weighted sum kept on chip (FlashAttention-style)."""

from rooflinec.ir import Cost
from rooflinec.ops import formula
from rooflinec.ops.linear import contraction


@formula("attention")
def attention(batch, queries, keys, n_q, n_kv, d, b, io: bool = True, causal_fraction=1) -> Cost:
    """`queries` tokens per sequence attend to `keys` cached tokens.

    FLOPs: Q K^T  [n_q, queries, d] @ [n_q, d, keys] and P V  [n_q, queries, keys] @ [n_kv, keys, d].
    Bytes: K and V read once from the cache (n_kv heads, the GQA saving); with `io`, Q read
    and O written too. `causal_fraction` scales the FLOPs when masked-out scores are skipped.
    """
    flops = 2 * contraction(batch, n_q, queries, keys, d) * causal_fraction
    kv = 2 * batch * n_kv * keys * d * b
    q_and_o = 2 * batch * n_q * queries * d * b if io else 0
    return Cost.of(flops, kv_cache=kv, activations=q_and_o)
