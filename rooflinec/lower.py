"""Lowering: a model spec and a phase become a Program of symbolic ops.

This module only wires dimensions into registered formulas; it does no arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from rooflinec.ir import Op, Program, verify
from rooflinec.ops import FORMULAS
from rooflinec.symbols import B, L, M, S, V, b, d_ff, d_head, d_model, n_kv, n_q

PHASES = ("decode", "prefill")


@dataclass(frozen=True)
class Conventions:
    """Choices the cost model must make and the report must state."""

    causal_halving: bool = False   # prefill attention skips the masked half of the scores
    logits: str = "last"           # prefill computes logits for the "last" token or "all" tokens

    def stated(self, phase: str) -> tuple[tuple[str, str], ...]:
        if phase == "decode":
            return (("logits", "one new token per sequence, so the LM head runs on B tokens"),)
        causal = ("masked-out scores are skipped: attention FLOPs halved" if self.causal_halving
                  else "every score is computed: attention FLOPs not halved")
        logits = ("logits for every prompt token: the LM head runs on M = B*S tokens"
                  if self.logits == "all" else
                  "logits for the last prompt token only: the LM head runs on B tokens")
        return (("causal masking", causal), ("logits", logits))


def _linear(name: str, tokens, k, n, shape: str) -> Op:
    return Op(name, "gemm", "linear", "matrix", FORMULAS["gemm"](tokens, k, n, b),
              repeat=L, shape=shape, crossing=M)


def _attention(phase: str, conv: Conventions) -> Op:
    if phase == "decode":
        cost = FORMULAS["attention"](B, 1, S, n_q, n_kv, d_head, b)
        return Op("attention", "attention", "attention", "matrix", cost, repeat=L,
                  shape="Q[B,n_q,1,d_head] . K,V[B,n_kv,S,d_head]")
    half = sp.Rational(1, 2) if conv.causal_halving else 1
    cost = FORMULAS["attention"](B, S, S, n_q, n_kv, d_head, b, causal_fraction=half)
    return Op("attention", "attention", "attention", "matrix", cost, repeat=L,
              shape="Q[B,n_q,S,d_head] . K,V[B,n_kv,S,d_head]", crossing=S)


def _mlp(model) -> list[Op]:
    up = ("gate_proj", "up_proj") if model.mlp_kind == "swiglu" else ("up_proj",)
    ops = [_linear(n, M, d_model, d_ff, "X[M,d_model] @ W[d_model,d_ff]") for n in up]
    ops.append(_linear("down_proj", M, d_ff, d_model, "X[M,d_ff] @ W[d_ff,d_model]"))
    return ops


def lower(model, phase: str, conv: Conventions = Conventions()) -> Program:
    """The ops of one decoder layer (repeat = L) plus the embedding and the LM head."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    logit_tokens = M if (phase == "prefill" and conv.logits == "all") else B
    ops = [
        Op("embedding", "gather", "embedding", "vector", FORMULAS["gather"](M, d_model, b),
           shape="E[V,d_model][ids[M]] -> X[M,d_model]"),
        _linear("q_proj", M, d_model, n_q * d_head, "X[M,d_model] @ W[d_model,n_q*d_head]"),
        _linear("k_proj", M, d_model, n_kv * d_head, "X[M,d_model] @ W[d_model,n_kv*d_head]"),
        _linear("v_proj", M, d_model, n_kv * d_head, "X[M,d_model] @ W[d_model,n_kv*d_head]"),
        _attention(phase, conv),
        _linear("o_proj", M, n_q * d_head, d_model, "X[M,n_q*d_head] @ W[n_q*d_head,d_model]"),
        *_mlp(model),
        Op("lm_head", "gemm", "linear", "matrix", FORMULAS["gemm"](logit_tokens, d_model, V, b),
           shape=f"X[{logit_tokens},d_model] @ W[d_model,V]", crossing=logit_tokens),
    ]
    bindings = {M: B} if phase == "decode" else {M: B * S}
    return verify(Program(model.name, phase, "fused-attention", tuple(ops), bindings,
                          conv.stated(phase)))
