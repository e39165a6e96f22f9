"""Full attention (MHA, GQA, MQA): n_q query heads over n_kv key/value heads of d_head.

Its layers cache K and V, 2 * n_kv * d_head elements per token, for the whole context; its
ops are the q/k/v projections (three GEMMs or one fused), per-head q/k norms (Qwen3) and
rotary positions, then each member kind's score steps (its own: QK^T, scale, mask, softmax,
P.V over S keys, the score matrix in HBM), then the output projection. Windowed kinds
(rooflinec.model.kinds.windowed) are of this family: they share the projections and
parameters and differ only in the keys their scores span.
"""

from __future__ import annotations

from rooflinec.model import window
from rooflinec.model.build import linear, op
from rooflinec.model.component import layer
from rooflinec.model.kinds import Kind
from rooflinec.model.symbols import B, M, S, b, d_head, d_model, n_kv, n_q


def projections(model, conv, repeat) -> list:
    if conv.qkv == "fused":
        return linear("qkv_proj", M, d_model, (n_q + 2 * n_kv) * d_head,
                      "X[M,d_model] @ W[d_model,(n_q+2*n_kv)*d_head]", model.qkv_bias, conv, repeat)
    return [*linear("q_proj", M, d_model, n_q * d_head, "X[M,d_model] @ W[d_model,n_q*d_head]",
                    model.qkv_bias, conv, repeat),
            *linear("k_proj", M, d_model, n_kv * d_head, "X[M,d_model] @ W[d_model,n_kv*d_head]",
                    model.qkv_bias, conv, repeat),
            *linear("v_proj", M, d_model, n_kv * d_head, "X[M,d_model] @ W[d_model,n_kv*d_head]",
                    model.qkv_bias, conv, repeat)]


def positions(model, repeat) -> list:
    """Per-head q/k norms (Qwen3), then rotary positions on q and k, before the scores."""
    ops = []
    if getattr(model, "qk_norm", False):
        ops += [op("q_norm", "rmsnorm", "norm", M * n_q, d_head, b, repeat=repeat, shape="rmsnorm(Q[M*n_q,d_head])"),
                op("k_norm", "rmsnorm", "norm", M * n_kv, d_head, b, repeat=repeat, shape="rmsnorm(K[M*n_kv,d_head])")]
    if model.positions == "rope":
        ops.append(op("rope", "rope", "elementwise", M, n_q, n_kv, d_head, b, repeat=repeat,
                      shape="rope(Q[M,n_q*d_head]), rope(K[M,n_kv*d_head]) with cos, sin[M,d_head]"))
    return ops


def scores(phase: str, conv, prefix: str, keys, repeat) -> list:
    """QK^T, scale, mask, softmax, P.V over `keys` keys: the score matrix [B, n_q, queries,
    keys] lives in HBM."""
    queries = 1 if phase == "decode" else S
    half = window.causal_share(conv.causal_fraction(phase), keys)
    knob = S if phase == "prefill" else None
    read = S if phase == "prefill" else keys   # a prefill's queries read all S keys between them
    k = str(keys).replace("Min", "min")
    shape = f"[B,n_q,{queries},{k}]"
    n = prefix
    return [
        op(n + "qk_matmul", "qk_matmul", "attention_matmul", B, n_q, n_kv, queries, keys, d_head, b,
           causal_fraction=half, read_keys=read, shape=f"Q[B,n_q,{queries},d_head] @ K^T[B,n_kv,d_head,{k}]",
           crossing=knob, repeat=repeat),
        op(n + "scale", "scale", "elementwise", B * n_q * queries * keys, b, shape=f"S{shape} / sqrt(d_head)",
           repeat=repeat),
        op(n + "causal_mask", "causal_mask", "elementwise", B * n_q * queries * keys, b,
           shape=f"where(future, -inf, S{shape})", repeat=repeat),
        op(n + "softmax", "softmax", "softmax", B * n_q * queries, keys, b, shape=f"softmax(S{shape})",
           repeat=repeat),
        op(n + "pv_matmul", "pv_matmul", "attention_matmul", B, n_q, n_kv, queries, keys, d_head, b,
           causal_fraction=half, read_keys=read, shape=f"P{shape} @ V[B,n_kv,{k},d_head]", crossing=knob,
           repeat=repeat),
    ]


class FullAttention(Kind):
    name = "full"
    slot = "mixer"
    order = 10
    default = True
    bulk = True
    pattern = True

    def layers(self, model, first, stop):   # the default: whatever no other mixer claims
        return 0

    def params(self, model, repeat, mixed):
        # X[., d_model] @ W_q[d_model, n_q*d_head]; K and V have n_kv heads (GQA / MQA)
        parts = [layer("q_proj", "attention", d_model * n_q * d_head, repeat=repeat),
                 layer("k_proj", "attention", d_model * n_kv * d_head, repeat=repeat),
                 layer("v_proj", "attention", d_model * n_kv * d_head, repeat=repeat),
                 layer("o_proj", "attention", n_q * d_head * d_model, repeat=repeat)]
        if model.qkv_bias:
            parts.append(layer("qkv_bias", "attention", (n_q + 2 * n_kv) * d_head, matmul=False, repeat=repeat))
        if model.out_bias:
            parts.append(layer("o_bias", "attention", d_model, matmul=False, repeat=repeat))
        if model.sinks:     # gpt-oss: one learned sink logit per query head
            parts.append(layer("sinks", "attention", n_q, matmul=False, repeat=repeat))
        if model.qk_norm:   # one gain of d_head for every query head, one for every key head
            parts.append(layer("qk_norm", "norm", 2 * d_head, matmul=False, repeat=repeat))
        return parts

    def cache_token_bytes(self, model):
        return 2 * n_kv * d_head * b      # K and V, per KV head

    def core(self, model, phase, conv, repeat, prefix):
        return scores(phase, conv, prefix, S, repeat)

    def ops(self, model, phase, conv, repeat, members):
        attend = [o for kind, r, p in members for o in kind.core(model, phase, conv, r, p)]
        return [*projections(model, conv, repeat), *positions(model, repeat), *attend,
                *linear("o_proj", M, n_q * d_head, d_model, "X[M,n_q*d_head] @ W[n_q*d_head,d_model]",
                        model.out_bias, conv, repeat)]

    def output(self, prefix):
        return "o_proj"
