"""Multi-head latent attention (DeepSeek-V2/V3): the model keys, their symbols, parameters, the
KV cache and the attention ops.

Keys (a HF config's names): q_lora_rank r_q (0: queries not compressed), kv_lora_rank r_kv,
qk_nope_head_dim d_nope, qk_rope_head_dim d_rope, v_head_dim d_v. The cache holds, per token
per layer, the latent c_KV (r_kv elements) and the shared rotary key (d_rope): r_kv + d_rope
elements, whatever the head count.
"""

from __future__ import annotations

from dataclasses import dataclass

from rooflinec.model import symbols as sym
from rooflinec.model.symbols import B, M, S, b, d_model, n_q

r_q = sym.dimension("r_q")
r_kv = sym.dimension("r_kv")
d_nope = sym.dimension("d_nope")
d_rope = sym.dimension("d_rope")
d_v = sym.dimension("d_v")
DESCRIPTIONS = {r_q: "query latent rank", r_kv: "KV latent rank (cached)", d_nope: "per-head q/k width without rotary",
                d_rope: "rotary q/k width (the rotary key is cached, shared by the heads)", d_v: "per-head value width"}


@dataclass(frozen=True)
class MLA:
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


def from_spec(section: dict | None) -> MLA | None:
    if not section:
        return None
    return MLA(section.get("q_lora_rank", 0), section["kv_lora_rank"], section["qk_nope_head_dim"],
               section["qk_rope_head_dim"], section["v_head_dim"])


def values(model) -> dict:
    m = getattr(model, "mla", None)
    if m is None:
        return {}
    return {**({r_q: m.q_lora_rank} if m.q_lora_rank else {}), r_kv: m.kv_lora_rank,
            d_nope: m.qk_nope_head_dim, d_rope: m.qk_rope_head_dim, d_v: m.v_head_dim}


def symbols(model) -> tuple:
    return tuple(values(model))


def kv_elements_per_token_layer():
    """Cached elements per token per layer: the latent and the shared rotary key."""
    return r_kv + d_rope


FORMS = {"absorbed": "decode attends in the latent space: W_UK folded into the query, W_UV into "
                     "the output; the latent cache is read once for all heads",
         "naive": "decode decompresses every cached latent to per-head K and V (W_UKV), then attends "
                  "as multi-head attention"}


def attention_ops(model, phase: str, conv, make_op, linear, keys=S) -> list:
    """Query and KV projections, rotary positions, attention in `conv.mla`'s form (prefill
    always decompresses: its new keys are its queries), and the output projection's input.
    Each query attends `keys` cached entries (a sparse kind's top-k: min(S, k))."""
    m = model.mla
    q_width = n_q * (d_nope + d_rope)
    if m.q_lora_rank:
        ops = [*linear("q_a_proj", M, d_model, r_q, "X[M,d_model] @ W_DQ[d_model,r_q]"),
               make_op("q_a_norm", "rmsnorm", "norm", M, r_q, b, shape="rmsnorm(C_Q[M,r_q])"),
               *linear("q_b_proj", M, r_q, q_width, "C_Q[M,r_q] @ W_UQ[r_q,n_q*(d_nope+d_rope)]")]
    else:
        ops = linear("q_proj", M, d_model, q_width, "X[M,d_model] @ W_Q[d_model,n_q*(d_nope+d_rope)]")
    ops += [*linear("kv_a_proj", M, d_model, r_kv + d_rope, "X[M,d_model] @ W_DKV[d_model,r_kv+d_rope]"),
            make_op("kv_a_norm", "rmsnorm", "norm", M, r_kv, b, shape="rmsnorm(C_KV[M,r_kv])"),
            make_op("rope", "rope", "elementwise", M, n_q, 1, d_rope, b,
                    shape="rope(Q_rope[M,n_q*d_rope]), rope(K_rope[M,d_rope]) (one key shared by the heads)")]
    decode = phase == "decode"
    queries = 1 if decode else S
    fraction = conv.causal_fraction(phase)
    if keys != S:   # query i attends min(i, k) keys: with the masked half skipped, 1 - keys/(2S) of S x keys
        fraction = 1 - (1 - fraction) * keys / S
    if decode and conv.mla == "absorbed":
        return ops + [
            make_op("q_absorb", "head_gemm", "linear", n_q, M, d_nope, r_kv, b,
                    shape="per head: Q_nope[M,d_nope] @ W_UK^T[d_nope,r_kv]", crossing=M),
            make_op("attention", "mla_latent_attention", "attention", B, queries, keys, n_q, r_kv, d_rope, b,
                    causal_fraction=fraction, crossing=None,
                    shape=f"softmax([Q~;Q_rope][B,n_q,r_kv+d_rope] . [C_KV;K_rope][B,{_k(keys)},r_kv+d_rope]) @ C_KV"),
            make_op("o_absorb", "head_gemm", "linear", n_q, M, r_kv, d_v, b,
                    shape="per head: O_latent[M,r_kv] @ W_UV[r_kv,d_v]", crossing=M)]
    tokens = B * (keys if decode else S)   # every attended cached token (decode) or prompt token (prefill)
    return ops + [
        make_op("kv_b_proj", "mla_decompress", "linear", tokens, n_q, r_kv, d_rope, d_nope, d_v, b,
                shape=f"C_KV[B*{_k(keys) if decode else 'S'},r_kv] @ W_UKV[r_kv,n_q*(d_nope+d_v)]"),
        make_op("attention", "mla_attention", "attention", B, queries, keys, n_q, d_nope + d_rope, d_v, b,
                causal_fraction=fraction,
                shape=f"softmax(Q[B,n_q,{queries},d_nope+d_rope] K^T) @ V[B,n_q,{_k(keys)},d_v]")]


def _k(keys) -> str:
    return str(keys).replace("Min", "min")
