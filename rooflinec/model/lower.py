"""Lowering: a model spec and a phase become the naive (unfused) Program of symbolic ops.

Every kernel a straightforward implementation launches is an op: norms, the GEMMs and
their bias adds, the activation, residual adds, and attention as QK^T, scale, causal
mask, softmax and P.V with the score matrix in HBM between steps. Variants (fused
epilogues, FlashAttention) are passes over this program (rooflinec.model.passes).
This module only wires dimensions into registered formulas; it does no arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from rooflinec.model import lower_custom, mla, moe, window
from rooflinec.model.ir import Op, Program, verify
from rooflinec.model.ops import FORMULAS, UNITS
from rooflinec.model.symbols import B, L, M, S, V, b, d_ff, d_head, d_model, n_kv, n_q
from rooflinec.model.mla import attention_ops, d_v

PHASES = ("decode", "prefill")
GATED = {"swiglu": "silu", "geglu": "gelu"}   # gated MLP kind -> the gate's activation


@dataclass(frozen=True)
class Conventions:
    """Choices the cost model must make and the report must state."""

    causal_halving: bool = False   # prefill attention skips the masked half of the scores
    logits: str = "last"           # prefill computes logits for the "last" token or "all" tokens
    qkv: str = "separate"          # q, k, v as three GEMMs, or "fused" into one
    bias: str = "separate_kernel"  # a bias add is its own kernel, or runs "in_gemm" (epilogue)
    mla: str = "absorbed"          # latent attention in decode: "absorbed" or "naive" (rooflinec.model.mla)

    def causal_fraction(self, phase: str) -> sp.Expr:
        """Share of the score matrix attention computes: 1/2 in prefill when the masked half
        is skipped, else all of it (decode's one query sees every cached key)."""
        return sp.Rational(1, 2) if (self.causal_halving and phase == "prefill") else sp.Integer(1)

    def stated(self, phase: str) -> tuple[tuple[str, str], ...]:
        qkv = ("one fused QKV GEMM reads the normed input once" if self.qkv == "fused"
               else "q, k and v are three GEMMs, each reading the normed input")
        bias = ("bias adds run in the GEMM epilogue, even unfused (their FLOPs and bias reads "
                "are the GEMM's)" if self.bias == "in_gemm"
                else "each bias add is its own kernel in the unfused program")
        shared = (("qkv", qkv), ("bias", bias))
        if phase == "decode":
            return (("logits", "one new token per sequence, so the LM head runs on B tokens"),
                    *shared)
        causal = ("masked-out scores are skipped: attention FLOPs halved" if self.causal_halving
                  else "every score is computed: attention FLOPs not halved")
        logits = ("logits for every prompt token: the LM head runs on M = B*S tokens"
                  if self.logits == "all" else
                  "logits for the last prompt token only: the LM head runs on B tokens")
        return (("causal masking", causal), ("logits", logits), *shared)


# The conventions of a lower bound: the least work a correct kernel does (the masked half of
# the scores skipped, logits for the last prompt token only, one QKV GEMM reading its input
# once, biases in the GEMM epilogue, latent attention absorbed). Conventions that add work
# belong to ledgers of what a given kernel does, and are stated there.
LEAST_WORK = Conventions(causal_halving=True, logits="last", qkv="fused", bias="in_gemm", mla="absorbed")


def _op(name, formula, category, *args, repeat=L, shape="", crossing=None, into="", **kw) -> Op:
    """An op from a registered formula; an op with `into` also carries its epilogue cost."""
    fn = FORMULAS[formula]
    epilogue = fn(*args, **kw, epilogue=True) if into else None
    return Op(name, formula, category, UNITS[formula], fn(*args, **kw), sp.sympify(repeat), shape, crossing,
              into=into, epilogue=epilogue)


def _linear(name, tokens, k, n, shape, bias: bool, conv: Conventions, repeat=L) -> list[Op]:
    gemm = _op(name, "gemm", "linear", tokens, k, n, b, repeat=repeat, shape=shape,
               crossing=tokens)
    if not bias:
        return [gemm]
    add = _op(name.replace("_proj", "") + "_bias", "bias_add", "elementwise", tokens, n, b,
              repeat=repeat, shape=f"Y[{tokens},{n}] + bias[{n}]", into=name)
    if conv.bias == "in_gemm":
        return [gemm.with_cost(gemm.cost + add.epilogue, formula="gemm+bias_add",
                               absorbed=(add.name,))]
    return [gemm, add]


def _norm(model, name, repeat=L) -> Op:
    shape = f"norm(X[M,d_model]) * gain[d_model]{' + shift' if model.norm_bias else ''}"
    if model.norm_kind == "layernorm":
        return _op(name, "layernorm", "norm", M, d_model, b, repeat=repeat, shape=shape,
                   shift=model.norm_bias)
    return _op(name, "rmsnorm", "norm", M, d_model, b, repeat=repeat, shape=shape)


def _projections(model, conv: Conventions) -> list[Op]:
    if conv.qkv == "fused":
        return _linear("qkv_proj", M, d_model, (n_q + 2 * n_kv) * d_head,
                       "X[M,d_model] @ W[d_model,(n_q+2*n_kv)*d_head]", model.qkv_bias, conv)
    return [*_linear("q_proj", M, d_model, n_q * d_head, "X[M,d_model] @ W[d_model,n_q*d_head]",
                     model.qkv_bias, conv),
            *_linear("k_proj", M, d_model, n_kv * d_head, "X[M,d_model] @ W[d_model,n_kv*d_head]",
                     model.qkv_bias, conv),
            *_linear("v_proj", M, d_model, n_kv * d_head, "X[M,d_model] @ W[d_model,n_kv*d_head]",
                     model.qkv_bias, conv)]


def _positions(model) -> list[Op]:
    """Per-head q/k norms (Qwen3), then rotary positions on q and k, before the scores."""
    ops = []
    if getattr(model, "qk_norm", False):
        ops += [_op("q_norm", "rmsnorm", "norm", M * n_q, d_head, b, shape="rmsnorm(Q[M*n_q,d_head])"),
                _op("k_norm", "rmsnorm", "norm", M * n_kv, d_head, b, shape="rmsnorm(K[M*n_kv,d_head])")]
    if model.positions == "rope":
        ops.append(_op("rope", "rope", "elementwise", M, n_q, n_kv, d_head, b,
                       shape="rope(Q[M,n_q*d_head]), rope(K[M,n_kv*d_head]) with cos, sin[M,d_head]"))
    return ops


def _attention(phase: str, conv: Conventions, prefix: str = "", keys=S, repeat=L) -> list[Op]:
    """QK^T, scale, mask, softmax, P.V: the score matrix [B, n_q, queries, keys] lives in HBM;
    windowed layers (rooflinec.model.window) attend to keys = min(S, W) under their own names."""
    queries = 1 if phase == "decode" else S
    half = window.causal_share(conv.causal_fraction(phase), keys)
    knob = S if phase == "prefill" else None
    read = S if phase == "prefill" else keys   # a prefill's queries read all S keys between them
    k = str(keys).replace("Min", "min")
    scores = f"[B,n_q,{queries},{k}]"
    n = prefix
    return [
        _op(n + "qk_matmul", "qk_matmul", "attention_matmul", B, n_q, n_kv, queries, keys, d_head, b,
            causal_fraction=half, read_keys=read, shape=f"Q[B,n_q,{queries},d_head] @ K^T[B,n_kv,d_head,{k}]",
            crossing=knob, repeat=repeat),
        _op(n + "scale", "scale", "elementwise", B * n_q * queries * keys, b, shape=f"S{scores} / sqrt(d_head)",
            repeat=repeat),
        _op(n + "causal_mask", "causal_mask", "elementwise", B * n_q * queries * keys, b,
            shape=f"where(future, -inf, S{scores})", repeat=repeat),
        _op(n + "softmax", "softmax", "softmax", B * n_q * queries, keys, b, shape=f"softmax(S{scores})",
            repeat=repeat),
        _op(n + "pv_matmul", "pv_matmul", "attention_matmul", B, n_q, n_kv, queries, keys, d_head, b,
            causal_fraction=half, read_keys=read, shape=f"P{scores} @ V[B,n_kv,{k},d_head]", crossing=knob,
            repeat=repeat),
    ]


def _mlp(model, conv: Conventions) -> list[Op]:
    bias = model.mlp_bias
    up = _linear("up_proj", M, d_model, d_ff, "X[M,d_model] @ W[d_model,d_ff]", bias, conv)
    if model.mlp_kind in GATED:   # swiglu: SiLU gate; geglu (Gemma): tanh-GELU gate
        fn = GATED[model.mlp_kind]
        gate = _linear("gate_proj", M, d_model, d_ff, "X[M,d_model] @ W[d_model,d_ff]", bias, conv)
        act = [*gate, _op(fn, fn, "elementwise", M * d_ff, b, into="gate_proj",
                          shape=f"{fn}(G[M,d_ff])"),
               *up, _op("gate_mul", "gate_mul", "elementwise", M * d_ff, b, into="up_proj",
                        shape=f"{fn}(G[M,d_ff]) * U[M,d_ff]")]
    else:
        act = [*up, _op("gelu", "gelu", "elementwise", M * d_ff, b, into="up_proj",
                        shape="gelu(U[M,d_ff])")]
    down = _linear("down_proj", M, d_ff, d_model, "X[M,d_ff] @ W[d_ff,d_model]", bias, conv)
    return [*act, *down]


def _residual(name, into, operands=2) -> Op:
    return _op(name, "add", "elementwise", M * d_model, b, operands=operands, into=into,
               shape="X[M,d_model] + " + " + ".join(["Y[M,d_model]"] * (operands - 1)))


def _self_attention(model, phase: str, conv: Conventions) -> list[Op]:
    if model.mla is not None:
        linear = lambda name, tokens, k, n, shape: _linear(name, tokens, k, n, shape, False, conv)  # noqa: E731
        return [*attention_ops(model, phase, conv, _op, linear),
                *_linear("o_proj", M, n_q * d_v, d_model, "X[M,n_q*d_v] @ W[n_q*d_v,d_model]", False, conv)]
    attend = [op for prefix, keys, layers in window.groups(model)
              for op in _attention(phase, conv, prefix, keys, layers)]
    return [*_projections(model, conv), *_positions(model), *attend,
            *_linear("o_proj", M, n_q * d_head, d_model, "X[M,n_q*d_head] @ W[n_q*d_head,d_model]",
                     model.out_bias, conv)]


def _layer(model, phase: str, conv: Conventions) -> list[Op]:
    attn = _self_attention(model, phase, conv)
    if model.block == "parallel":   # PaLM: y = x + attn(norm(x)) + mlp(norm(x))
        return [_norm(model, "norm"), *attn, *_mlp(model, conv),
                _residual("residual", "down_proj", operands=3)]
    # Gemma 2 also normalises each sublayer's output before its residual add
    post = getattr(model, "post_norms", False)
    ffn = moe.ffn(model, lambda: _mlp(model, conv), _op) if model.moe else _mlp(model, conv)
    return [_norm(model, "attn_norm"), *attn, *([_norm(model, "attn_post_norm")] if post else []),
            _residual("attn_residual", "o_proj"), _norm(model, "mlp_norm"), *ffn,
            *([_norm(model, "mlp_post_norm")] if post else []),
            _residual("mlp_residual", ffn[-1].name if model.moe else "down_proj")]


def _embedding(model) -> list[Op]:
    tokens = _op("embedding", "gather", "embedding", M, d_model, b, repeat=1,
                 shape="E[V,d_model][ids[M]] -> X[M,d_model]")
    if model.positions != "learned":
        return [tokens]
    return [tokens,
            _op("pos_embedding", "gather", "embedding", M, d_model, b, repeat=1,
                shape="P[max_context,d_model][positions[M]] -> X[M,d_model]"),
            _op("embed_add", "add", "elementwise", M * d_model, b, repeat=1,
                shape="X[M,d_model] + P[M,d_model]")]


def lower(model, phase: str, conv: Conventions = Conventions()) -> Program:
    """The naive program: embedding, one decoder layer (repeat = L), final norm, LM head."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    logit_tokens = M if (phase == "prefill" and conv.logits == "all") else B
    ops = [*_embedding(model), *_layer(model, phase, conv), _norm(model, "final_norm", repeat=1),
           *_linear("lm_head", logit_tokens, d_model, V, f"X[{logit_tokens},d_model] @ W[d_model,V]",
                    False, conv, repeat=1)]
    ops = lower_custom.place(ops, getattr(model, "operators", ()), phase)   # user-declared ops
    bindings = {M: B} if phase == "decode" else {M: B * S}
    stated = conv.stated(phase) + ((("latent attention", mla.FORMS["naive" if phase == "prefill" else conv.mla]),)
                                   if model.mla else ()) + window.stated(model)
    return verify(Program(model.name, phase, "unfused", tuple(ops), bindings, stated,
                          lower_custom.symbols(model) + moe.symbols(model) + mla.symbols(model)
                          + window.symbols(model)))
