"""The symbol table of a model: the value a model spec gives each symbol its formulas carry,
and what each symbol means, gathered from the alphabet (symbols) and from each block that
adds symbols of its own (the layer kinds of rooflinec.model.kinds, storage formats). Apart from
symbols so the blocks can import the alphabet without a cycle."""

from __future__ import annotations

import sympy as sp

from rooflinec.model import kinds, quant
from rooflinec.model import symbols as sym


def model_values(model) -> dict[sp.Symbol, int]:
    """The numbers a model spec gives the model symbols (its extra dimensions included)."""
    return {
        sym.d_model: model.d_model, sym.n_q: model.n_heads, sym.n_kv: model.n_kv_heads,
        sym.d_head: model.head_dim, sym.d_ff: model.d_ff, sym.V: model.vocab, sym.L: model.n_layers,
        **sym.extra_values(model), **_block_values(model),
    }


def descriptions() -> dict[sp.Symbol, str]:
    """What every symbol a formula may carry means: the alphabet, the model blocks' (experts,
    latent attention, windows) and the storage formats' (b_w, b_kv, f_dq). A model's declared
    dimensions are described by its spec."""
    return {**sym.DESCRIPTIONS, **kinds.descriptions(), **quant.DESCRIPTIONS}


def _block_values(model) -> dict:
    """The symbols of the model's layer kinds (experts, latent attention, windows)."""
    return kinds.values(model)
