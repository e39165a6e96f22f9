"""Full attention (MHA, GQA, MQA): n_q query heads over n_kv key/value heads of d_head.

Its layers cache K and V, 2 * n_kv * d_head elements per token, for the whole context; its
ops are the q/k/v projections (three GEMMs or one fused), q/k norms (per head over d_head,
Qwen3; or one over all heads, MiniMax-M2) and rotary positions (none on NoPE layers, Llama
4), then each member kind's score steps (its own: QK^T, scale, mask, softmax, P.V over S
keys, the score matrix in HBM), an output gate where the model has one (Qwen3-Next:
sigmoid(X W_g) times the heads' output, W_g folded into q_proj), then the output
projection. Windowed kinds (rooflinec.model.kinds.windowed) are of this family: they share
the projections and parameters and differ only in the keys their scores span.
"""

from __future__ import annotations

import sympy as sp

from rooflinec.model import window
from rooflinec.model.build import linear, op
from rooflinec.model.component import layer
from rooflinec.model.kinds import Kind, _from
from rooflinec.model.symbols import B, M, S, b, d_head, d_model, n_kv, n_q


def _q_width(model):
    """q_proj's output: the queries, and with an output gate as many gate values again."""
    return (2 if model.output_gate else 1) * n_q * d_head


def projections(model, conv, repeat) -> list:
    q = "2*n_q*d_head" if model.output_gate else "n_q*d_head"
    if conv.qkv == "fused":   # factored as (q + 2 n_kv) d_head, so the ledger prints it so
        gate = 2 if model.output_gate else 1
        return linear("qkv_proj", M, d_model, (gate * n_q + 2 * n_kv) * d_head,
                      f"X[M,d_model] @ W[d_model,({'2*' if gate == 2 else ''}n_q+2*n_kv)*d_head]",
                      model.qkv_bias, conv, repeat)
    return [*linear("q_proj", M, d_model, _q_width(model), f"X[M,d_model] @ W[d_model,{q}]",
                    model.qkv_bias, conv, repeat),
            *linear("k_proj", M, d_model, n_kv * d_head, "X[M,d_model] @ W[d_model,n_kv*d_head]",
                    model.qkv_bias, conv, repeat),
            *linear("v_proj", M, d_model, n_kv * d_head, "X[M,d_model] @ W[d_model,n_kv*d_head]",
                    model.qkv_bias, conv, repeat)]


def nope_layers(model) -> int:
    """Layers that apply no rotary positions: the `nope` pattern's true entries, repeated from
    layer 0, counted per entry in closed form."""
    pattern = getattr(model, "nope", ()) or ()
    return sum(_from(model.n_layers, r, len(pattern)) for r, skip in enumerate(pattern) if skip)


def qk_norms(model, repeat) -> list:
    """q/k RMSNorms: per head over d_head (Qwen3), or one over all heads' outputs at once
    (qk_norm "layer", MiniMax-M2); the same elements either way, so the same FLOPs and bytes."""
    if model.qk_norm == "layer":
        return [op("q_norm", "rmsnorm", "norm", M, n_q * d_head, b, repeat=repeat, shape="rmsnorm(Q[M,n_q*d_head])"),
                op("k_norm", "rmsnorm", "norm", M, n_kv * d_head, b, repeat=repeat, shape="rmsnorm(K[M,n_kv*d_head])")]
    return [op("q_norm", "rmsnorm", "norm", M * n_q, d_head, b, repeat=repeat, shape="rmsnorm(Q[M*n_q,d_head])"),
            op("k_norm", "rmsnorm", "norm", M * n_kv, d_head, b, repeat=repeat, shape="rmsnorm(K[M*n_kv,d_head])")]


def positions(model, repeat) -> list:
    """q/k norms, then rotary positions on q and k before the scores, on every layer but the
    NoPE ones (Llama 4: their RoPE op repeats `repeat` minus those layers), over each head's
    rotary_dim dimensions where only part of it turns (Qwen3-Next, GLM-4.5, MiniMax-M2)."""
    ops = qk_norms(model, repeat) if model.qk_norm else []
    rope_layers = repeat - nope_layers(model)
    turned = sp.Integer(model.rotary_dim) if model.rotary_dim else d_head   # partial rotary: those dims only
    if model.positions == "rope" and rope_layers != 0:
        ops.append(op("rope", "rope", "elementwise", M, n_q, n_kv, turned, b, repeat=rope_layers,
                      shape=f"rope(Q[M,n_q*{turned}]), rope(K[M,n_kv*{turned}]) with cos, sin[M,{turned}]"))
    return ops


def output_gate(model, repeat) -> list:
    """Qwen3-Next's gated attention: O * sigmoid(G), G the gate half of q_proj's output (the
    sigmoid costed as SiLU's FLOPs, one multiply more: an upper count)."""
    if not model.output_gate:
        return []
    n = M * n_q * d_head
    return [op("attn_gate_sigmoid", "silu", "elementwise", n, b, repeat=repeat, shape="sigmoid(G[M,n_q*d_head])"),
            op("attn_gate_mul", "gate_mul", "elementwise", n, b, repeat=repeat,
               shape="O[M,n_q*d_head] * sigmoid(G)[M,n_q*d_head]")]


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
        parts = [layer("q_proj", "attention", d_model * _q_width(model), repeat=repeat),
                 layer("k_proj", "attention", d_model * n_kv * d_head, repeat=repeat),
                 layer("v_proj", "attention", d_model * n_kv * d_head, repeat=repeat),
                 layer("o_proj", "attention", n_q * d_head * d_model, repeat=repeat)]
        if model.qkv_bias:
            parts.append(layer("qkv_bias", "attention", (n_q + 2 * n_kv) * d_head, matmul=False, repeat=repeat))
        if model.out_bias:
            parts.append(layer("o_bias", "attention", d_model, matmul=False, repeat=repeat))
        if model.sinks:     # gpt-oss: one learned sink logit per query head
            parts.append(layer("sinks", "attention", n_q, matmul=False, repeat=repeat))
        if model.qk_norm == "layer":   # a gain per element of every head's q and k (MiniMax-M2)
            parts.append(layer("qk_norm", "norm", (n_q + n_kv) * d_head, matmul=False, repeat=repeat))
        elif model.qk_norm:   # one gain of d_head shared by the query heads, one by the key heads
            parts.append(layer("qk_norm", "norm", 2 * d_head, matmul=False, repeat=repeat))
        return parts

    def cache_token_bytes(self, model):
        return 2 * n_kv * d_head * b      # K and V, per KV head

    def core(self, model, phase, conv, repeat, prefix):
        return scores(phase, conv, prefix, S, repeat)

    def ops(self, model, phase, conv, repeat, members):
        attend = [o for kind, r, p in members for o in kind.core(model, phase, conv, r, p)]
        out = linear("o_proj", M, n_q * d_head, d_model, "X[M,n_q*d_head] @ W[n_q*d_head,d_model]",
                     model.out_bias, conv, repeat)
        return [*projections(model, conv, repeat), *positions(model, repeat), *attend,
                *output_gate(model, repeat), *out]

    def output(self, prefix):
        return "o_proj"
