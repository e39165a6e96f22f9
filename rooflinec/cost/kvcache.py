"""The KV cache one device holds: per token, and for one sequence of a given context.

The formula per token is efficiency.kv_bytes_per_token (K and V, or a latent cache) plus what
the model's declared operators keep. On one of tp x pp devices the heads are its shard and the
layers ceil(L / pp). A windowed layer (rooflinec.model.window) keeps only the last min(S, W) tokens,
so a sequence of S tokens holds, per layer's bytes per token c:

    c * (full layers * S + windowed layers * min(S, W))

Under pipeline parallelism (consecutive layers per stage) the device counted holds ceil(L / pp)
layers, as many of them full as the stage with the most full layers, so the figure stays an
upper bound on every stage's memory.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from rooflinec.model import window
from rooflinec.cost.evaluate import number
from rooflinec.model.symbols import L, S, b
from rooflinec.model.symbol_table import model_values
from rooflinec.cost.efficiency import kv_bytes_per_token
from rooflinec.model.lower_custom import cache_per_token
from rooflinec.cost.parallel import on_one_device


def formula(model) -> sp.Expr:
    """Bytes one token keeps, all layers at the full context (the symbolic owner)."""
    return kv_bytes_per_token(model) + cache_per_token(model)


def _per_layer(model) -> sp.Expr:
    """Bytes one attention layer keeps per token (the part a window caps)."""
    return kv_bytes_per_token(model).xreplace({L: 1})


def sequence_formula(model) -> sp.Expr:
    """Bytes one sequence of S tokens keeps: windowed layers hold min(S, W) of them."""
    local = window.local_layers(model)
    if not local:
        return formula(model) * S
    return _per_layer(model) * ((L - local) * S + local * window.keys()) + cache_per_token(model) * S


def _value(expr: sp.Expr, model, b_kv, tp: int, pp: int, ep: int = 1):
    return number(expr.xreplace(on_one_device(model, tp, pp, ep)), {**model_values(model), b: b_kv})


def per_token(model, b_kv, tp: int = 1, pp: int = 1, ep: int = 1):
    """Bytes one token keeps on one device at b_kv bytes per element, every layer at the full
    context (an upper bound where layers are windowed); `ep` only says which widths tp splits."""
    return _value(formula(model), model, b_kv, tp, pp, ep)


def _windowed_on_device(model, pp: int) -> int:
    """Windowed layers counted on the device: its ceil(L/pp) layers less the most full layers
    one stage (ceil(L/pp) consecutive layers, from the first) holds, which bounds every stage
    at every context (all the windowed layers when pp = 1)."""
    layers = -(-model.n_layers // pp)
    stages = -(-model.n_layers // layers)
    # a whole stage's count depends only on where its first layer falls in the pattern, so the
    # first len(pattern) stages and the (maybe shorter) last one cover them all
    period = len(getattr(model, "pattern", ()) or ()) or 1
    starts = {s * layers for s in range(min(stages, period))} | {(stages - 1) * layers}
    full = max(window.full_layers(model, first, min(first + layers, model.n_layers)) for first in starts)
    return layers - full


def per_sequence(model, b_kv, context, tp: int = 1, pp: int = 1, ep: int = 1):
    """Bytes one sequence of `context` tokens keeps on one device, rounded up; windowed
    layers hold min(context, W). `context` may be a NumPy array."""
    whole = per_token(model, b_kv, tp, pp, ep) * context
    local = _windowed_on_device(model, pp)
    if local:
        per_layer = _value(_per_layer(model), model, b_kv, tp, 1, ep)
        whole = whole - local * per_layer * np.maximum(context - model.window, 0)
    if isinstance(whole, np.ndarray):
        return np.ceil(whole).astype(np.int64)
    return math.ceil(whole)
