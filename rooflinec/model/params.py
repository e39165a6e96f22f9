"""Parameter counts from the architecture, per component, as sympy expressions.

Counts are written over the dimension alphabet (d_model, n_q, n_kv, d_head, d_ff, V, L);
the spec's booleans (biases, tied embeddings, MLP kind, block layout) choose which
components exist. Only a learned position table uses a number (its size, max_context),
since the alphabet has no symbol for a model constant that is not a workload.

Three totals:
- total: every parameter (what a checkpoint stores, the N of PaLM's 6N);
- non-embedding: without the token-embedding table and learned positions (Kaplan et al.
  2020); with tied embeddings the table is also the LM head, and it is excluded all the same;
- matmul: the weights of matrix products every token pays for (the ledger's 2 FLOPs per
  parameter per token): norms, biases and an untied input table (a gather) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
from dataclasses import replace

from rooflinec.model.symbols import L, V, d_ff, d_head, d_model, n_kv, n_q
from rooflinec.model.mla import d_nope, d_rope, d_v, r_kv, r_q
from rooflinec.model.moe import E, d_e, d_s, k, repeats
from rooflinec.model.lower_custom import RUNS

ONE = sp.Integer(1)


@dataclass(frozen=True)
class Component:
    name: str            # matches the lowered op name where one exists (q_proj, lm_head, ...)
    group: str           # embedding, attention, mlp, norm, head
    per: sp.Expr         # parameters in one copy
    repeat: sp.Expr      # L for per-layer components, 1 otherwise
    matmul: bool         # its weights enter a matrix product for every token
    embedding: bool      # left out of the non-embedding count
    note: str = ""
    active_per: sp.Expr | None = None   # parameters one token uses, where fewer (routed experts)
    layers: str = ""     # "moe" or "dense": repeated over those layers of a MoE model only

    @property
    def count(self) -> sp.Expr:
        return self.per * self.repeat


@dataclass(frozen=True)
class Params:
    model: str
    components: tuple[Component, ...]

    def _sum(self, keep, active: bool = False) -> sp.Expr:
        """Per-layer parts gathered under one factor L, so the formula reads as the layer."""
        per = (lambda c: c.per if c.active_per is None else c.active_per) if active else (lambda c: c.per)
        layer = sp.Add(*(per(c) for c in self.components if keep(c) and c.repeat == L))
        once = sp.Add(*(per(c) * c.repeat for c in self.components if keep(c) and c.repeat != L))
        return L * layer + once

    @property
    def total(self) -> sp.Expr:
        return self._sum(lambda c: True)

    @property
    def non_embedding(self) -> sp.Expr:
        return self._sum(lambda c: not c.embedding)

    @property
    def in_layers(self) -> sp.Expr:
        """Parameters a token uses inside the decoder layers (routed experts: k of E): what
        full activation recomputation runs again; the embedding, final norm and LM head not."""
        return self._sum(lambda c: c.repeat != ONE, active=True)

    @property
    def nanogpt(self) -> sp.Expr:
        """nanoGPT's N (model.get_num_params(non_embedding=True)): every parameter a token uses
        less the learned position table; the token table stays (tied, it is the LM head)."""
        return self._sum(lambda c: c.name != "positions", active=True)

    @property
    def active(self) -> sp.Expr:
        """Parameters one token's forward pass uses: routed experts count k of E."""
        return self._sum(lambda c: True, active=True)

    @property
    def matmul(self) -> sp.Expr:
        """Matmul weights one token multiplies by (routed experts: k of E)."""
        return self._sum(lambda c: c.matmul, active=True)

    @property
    def per_layer(self) -> sp.Expr:
        return sp.Add(*(c.per for c in self.components if c.repeat == L))


def _layer(name, group, per, matmul=True, note="") -> Component:
    return Component(name, group, per, L, matmul, False, note)


def _latent_attention(model) -> list[Component]:
    """MLA (DeepSeek-V2/V3): low-rank query and KV projections, their norms, the output."""
    q_width = n_q * (d_nope + d_rope)
    q = ([_layer("q_a_proj", "attention", d_model * r_q), _layer("q_b_proj", "attention", r_q * q_width),
          _layer("q_a_norm", "norm", r_q, matmul=False)] if model.mla.q_lora_rank
         else [_layer("q_proj", "attention", d_model * q_width)])
    return q + [_layer("kv_a_proj", "attention", d_model * (r_kv + d_rope)),
                _layer("kv_a_norm", "norm", r_kv, matmul=False),
                _layer("kv_b_proj", "attention", r_kv * n_q * (d_nope + d_v)),
                _layer("o_proj", "attention", n_q * d_v * d_model)]


def _attention(model) -> list[Component]:
    if model.mla is not None:
        return _latent_attention(model)
    # X[., d_model] @ W_q[d_model, n_q*d_head]; K and V have n_kv heads (GQA / MQA)
    parts = [_layer("q_proj", "attention", d_model * n_q * d_head),
             _layer("k_proj", "attention", d_model * n_kv * d_head),
             _layer("v_proj", "attention", d_model * n_kv * d_head),
             _layer("o_proj", "attention", n_q * d_head * d_model)]
    if model.qkv_bias:
        parts.append(_layer("qkv_bias", "attention", (n_q + 2 * n_kv) * d_head, matmul=False))
    if model.out_bias:
        parts.append(_layer("o_bias", "attention", d_model, matmul=False))
    if model.sinks:     # gpt-oss: one learned sink logit per query head
        parts.append(_layer("sinks", "attention", n_q, matmul=False))
    if model.qk_norm:   # one gain of d_head for every query head, one for every key head
        parts.append(_layer("qk_norm", "norm", 2 * d_head, matmul=False))
    return parts


# MLP kind -> (up-side matrices, note); the down matrix is common to both
_MLP = {"swiglu": (("gate_proj", "up_proj"), "SiLU(X W_gate) * (X W_up), then W_down"),
        "geglu": (("gate_proj", "up_proj"), "GELU(X W_gate) * (X W_up), then W_down"),
        "gelu": (("up_proj",), "GELU(X W_up), then W_down")}


def _mlp(model) -> list[Component]:
    if model.moe is not None:
        return _moe(model)
    return _dense_mlp(model)


def _dense_mlp(model) -> list[Component]:
    ups, note = _MLP[model.mlp_kind]
    parts = [_layer(n, "mlp", d_model * d_ff, note=note) for n in ups]
    parts.append(_layer("down_proj", "mlp", d_ff * d_model))
    if model.mlp_bias:
        parts.append(_layer("mlp_bias", "mlp", len(ups) * d_ff + d_model, matmul=False))
    return parts


def _moe(model) -> list[Component]:
    """Router, routed experts (k of E active), shared experts; dense layers keep the dense MLP."""

    moe_repeat, dense = repeats(model)
    ups, note = _MLP[model.mlp_kind]
    mats = len(ups) + 1
    parts = [replace(c, name="dense_" + c.name, repeat=sp.Integer(dense), layers="dense")
             for c in _dense_mlp(model)] if dense else []
    per_expert = mats * d_model * d_e + ((len(ups) * d_e + d_model) if model.mlp_bias else 0)
    parts += [Component("router", "mlp", d_model * E + (E if model.mlp_bias else 0), moe_repeat, True, False,
                        "X W_router[d_model,E]" + (" + bias" if model.mlp_bias else ""), layers="moe"),
              Component("experts", "mlp", E * per_expert, moe_repeat, True, False,
                        f"E experts, each {note}", active_per=k * per_expert, layers="moe")]
    if model.moe.shared_experts:
        parts.append(Component("shared_experts", "mlp", mats * d_model * d_s, moe_repeat, True, False,
                               "every token: " + note, layers="moe"))
    return parts


# block layout -> norms per layer
_NORMS_PER_LAYER = {"sequential": 2, "parallel": 1}


def _norms(model) -> list[Component]:
    width = d_model * (2 if model.norm_bias else 1)        # scale, and shift if it has one
    k = _NORMS_PER_LAYER[model.block] * (2 if model.post_norms else 1)
    what = f"{model.norm_kind}, {'scale and shift' if model.norm_bias else 'scale only'}"
    layout = model.block + (" block and post-norms" if model.post_norms else " block")
    return [_layer("norms", "norm", k * width, matmul=False, note=f"{k} per layer ({layout}), {what}"),
            Component("final_norm", "norm", width, ONE, False, False, what)]


def _embeddings(model) -> list[Component]:
    tied = model.tied_embeddings
    parts = [Component("embedding", "embedding", V * d_model, ONE, tied, True,
                       "tied: also the LM head's matrix" if tied else "input table (a gather)")]
    if model.positions == "learned":
        parts.append(Component("positions", "embedding", sp.Integer(model.max_context) * d_model,
                               ONE, False, True, f"learned, {model.max_context} positions"))
    return parts


def _head(model) -> list[Component]:
    if model.tied_embeddings:
        return []
    return [Component("lm_head", "head", d_model * V, ONE, True, False, "untied output matrix")]


def count(model) -> Params:
    """Every parameter of the model, one component per kind of tensor."""
    parts = _embeddings(model) + _attention(model) + _mlp(model) + _norms(model) + _head(model)
    return Params(model.name, tuple(parts + _declared(model)))


def _declared(model) -> list[Component]:
    """Weights the model spec's own operators hold (not assumed to meet every token)."""
    return [Component(d.name, "declared", d.params, RUNS[d.runs], False, False, "declared by the model spec")
            for d in model.operators if d.params != 0]
