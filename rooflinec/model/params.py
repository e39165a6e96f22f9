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

from rooflinec.model import kinds
from rooflinec.model.component import Component, layer
from rooflinec.model.symbols import L, V, d_model
from rooflinec.model.lower_custom import RUNS

ONE = sp.Integer(1)


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
    return layer(name, group, per, matmul, note)


def _sublayers(model) -> list[Component]:
    """Each slot's kinds' components (rooflinec.model.kinds), one family at a time: the
    mixers' (attention), then the feed-forwards' (MLP, experts)."""
    out = []
    for slot in kinds.SLOTS:
        families = kinds.families(model, slot)
        mixed = len(families) > 1
        out += [c for base, repeat, _ in families for c in base.params(model, repeat, mixed)]
    return out


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
    parts = _embeddings(model) + _sublayers(model) + _norms(model) + _head(model) + _mtp(model)
    return Params(model.name, tuple(parts + _declared(model)))


def _last_layer(model) -> sp.Expr:
    """Parameters of one decoder layer of the kinds the model's last layer has (its mixer's
    family and its feed-forward, one copy each) and its norms."""
    out = sp.Integer(0)
    for slot in kinds.SLOTS:
        for kind, _ in kinds.counts(model, slot, model.n_layers - 1, model.n_layers):
            base = kinds.registry()[kind.family or kind.name]
            out += sp.Add(*(c.per for c in base.params(model, ONE, False)))
    return out + _norms(model)[0].per


def _mtp(model) -> list[Component]:
    """DeepSeek-V3's multi-token-prediction modules (DeepSeek-AI 2024, "DeepSeek-V3 Technical
    Report", section 2.2): each a decoder layer like the main model's (the last one's kinds), the
    projection M_k of the two normed inputs [h; emb] (2 d_model x d_model), those two RMSNorms and
    the norm before the head; the embedding and the LM head are the model's own. Their tokens'
    share of the active count is 0: only a speculative draft runs them."""
    if not getattr(model, "mtp_layers", 0):
        return []
    per = _last_layer(model) + 2 * d_model * d_model + 3 * d_model
    return [Component("mtp", "mtp", per, sp.Integer(model.mtp_layers), True, False,
                      f"{model.mtp_layers} multi-token-prediction module(s): a decoder layer, the 2 d_model x "
                      "d_model projection and three norms; embedding and head shared; not active per token",
                      active_per=sp.Integer(0))]


def _declared(model) -> list[Component]:
    """Weights the model spec's own operators hold (not assumed to meet every token)."""
    return [Component(d.name, "declared", d.params, RUNS[d.runs], False, False, "declared by the model spec")
            for d in model.operators if d.params != 0]
