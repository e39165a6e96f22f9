"""One parameter tensor class of a model (a `Component`), apart from the counting in
rooflinec.model.params so each layer kind (rooflinec.model.kinds) can declare its own
without importing the counter that gathers them."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from rooflinec.model.symbols import L


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
    biases: sp.Expr = sp.Integer(0)   # of `per`, bias vectors: stored beside the matrices'
    #                                   block format, with the dense weights (gpt-oss's experts)

    @property
    def count(self) -> sp.Expr:
        return self.per * self.repeat


def layer(name, group, per, matmul=True, note="", repeat=L) -> Component:
    """A per-layer component (repeated over the layers of its kind)."""
    return Component(name, group, per, repeat, matmul, False, note)
