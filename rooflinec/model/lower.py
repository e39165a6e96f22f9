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

from rooflinec.model import kinds, lower_custom
from rooflinec.model.build import linear as _linear, norm as _norm, op as _op
from rooflinec.model.ir import Op, Program, verify
from rooflinec.model.kinds.dense import GATED  # noqa: F401 - serving/oplowering reads it here
from rooflinec.model.symbols import B, L, M, S, V, b, d_model

PHASES = ("decode", "prefill")


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


def _sublayer(model, slot: str, phase: str, conv: Conventions) -> list[Op]:
    """The ops of one slot (mixer or feed-forward) of a layer: each family of the model's kinds
    for that slot (rooflinec.model.kinds), repeated over its layers."""
    return [o for base, repeat, members in kinds.families(model, slot)
            for o in base.ops(model, phase, conv, repeat, members)]


def _output(model, slot: str) -> str:
    """The op of `slot` a residual add folds into: the last family's output."""
    base, _, members = kinds.families(model, slot)[-1]
    return base.output(next((p for k, _, p in members if k is base), ""))


def _residual(name, into, operands=2, repeat=L) -> Op:
    return _op(name, "add", "elementwise", M * d_model, b, operands=operands, into=into, repeat=repeat,
               shape="X[M,d_model] + " + " + ".join(["Y[M,d_model]"] * (operands - 1)))


def _mixer_residuals(model) -> list[Op]:
    """The attention sublayer's residual add, folded into its output projection: one per
    family of mixer kinds (a hybrid's linear layers fold into their own output), each repeated
    over that family's layers."""
    families = kinds.families(model, "mixer")
    if len(families) == 1:
        return [_residual("attn_residual", _output(model, "mixer"))]
    return [_residual(("" if i == 0 else base.name + "_") + "attn_residual",
                      base.output(next((p for k, _, p in members if k is base), "")), repeat=repeat)
            for i, (base, repeat, members) in enumerate(families)]


def _layer(model, phase: str, conv: Conventions) -> list[Op]:
    attn, ffn = _sublayer(model, "mixer", phase, conv), _sublayer(model, "ffn", phase, conv)
    if model.block == "parallel":   # PaLM: y = x + attn(norm(x)) + mlp(norm(x))
        return [_norm(model, "norm"), *attn, *ffn, _residual("residual", _output(model, "ffn"), operands=3)]
    # Gemma 2 also normalises each sublayer's output before its residual add
    post = getattr(model, "post_norms", False)
    return [_norm(model, "attn_norm"), *attn, *([_norm(model, "attn_post_norm")] if post else []),
            *_mixer_residuals(model), _norm(model, "mlp_norm"), *ffn,
            *([_norm(model, "mlp_post_norm")] if post else []),
            _residual("mlp_residual", _output(model, "ffn"))]


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
    stated = conv.stated(phase) + tuple(s for kind in kinds.kinds_of(model)
                                        for s in kind.stated(model, phase, conv))
    return verify(Program(model.name, phase, "unfused", tuple(ops), bindings, stated,
                          lower_custom.symbols(model) + tuple(kinds.values(model))))
