"""The cache one device holds: per token, and for one sequence of a given context.

Each layer kind (rooflinec.model.kinds) says what one of its layers keeps: bytes per cached
token (K and V, or a latent), at most how many tokens (a window W), and bytes per sequence
whatever the context (a recurrent state); the model's declared operators add theirs. On one of
tp x pp devices the heads are its shard and the layers ceil(L / pp). A windowed layer keeps
only the last min(S, W) tokens, so a sequence of S tokens holds, per layer's bytes per token c:

    c * (full layers * S + windowed layers * min(S, W)) + recurrent layers * state

Under pipeline parallelism (consecutive layers per stage) the device counted holds ceil(L / pp)
layers, as many of them full as the stage with the most full layers, so the figure stays an
upper bound on every stage's memory.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from rooflinec.model import kinds
from rooflinec.cost.evaluate import number
from rooflinec.model.symbols import L, S, b
from rooflinec.model.symbol_table import model_values
from rooflinec.model.lower_custom import cache_per_token
from rooflinec.cost.parallel import on_one_device


def formula(model) -> sp.Expr:
    """Bytes one token keeps, all layers at the full context (the symbolic owner)."""
    return kinds.cache_per_token(model) + cache_per_token(model)


def _capped(model) -> bool:
    return any(k.cache_cap(model) is not None for _, members in kinds.cache_groups(model) for k, _ in members)


def sequence_formula(model) -> sp.Expr:
    """Bytes one sequence of S tokens keeps: windowed layers hold min(S, W) of them, a
    recurrent layer its state."""
    state = kinds.cache_state(model)
    if not _capped(model):
        return formula(model) * S + state
    held = sp.Add(*(per * sp.Add(*(r * k.cache_tokens(model) for k, r in _repeats(model, members)))
                    for per, members in kinds.cache_groups(model)))
    return held + cache_per_token(model) * S + state


def _repeats(model, members):
    """(kind, repeat) of a cache group's kinds, as lowering repeats their layers."""
    repeat = {k.name: r for k, r, _ in kinds.repeats(model, "mixer")}
    return [(kind, repeat[kind.name]) for kind, _ in members]


def _value(expr: sp.Expr, model, b_kv, tp: int, pp: int, ep: int = 1):
    return number(expr.xreplace(on_one_device(model, tp, pp, ep)), {**model_values(model), b: b_kv})


def per_token(model, b_kv, tp: int = 1, pp: int = 1, ep: int = 1):
    """Bytes one token keeps on one device at b_kv bytes per element, every layer at the full
    context (an upper bound where layers are windowed); `ep` only says which widths tp splits.
    Where some layers keep no tokens (recurrent ones), the stage keeping the most per token."""
    if pp == 1 or _every(model):
        return _value(formula(model), model, b_kv, tp, pp, ep)
    declared = _value(cache_per_token(model), model, b_kv, tp, pp, ep)
    return declared + max(_value(sp.Add(*(n * per for per, members in kinds.cache_groups(model, first, stop)
                                          for _, n in members)), model, b_kv, tp, 1, ep)
                          for first, stop in _stages(model, pp))


def _every(model) -> bool:
    """Whether every layer keeps tokens (no recurrent-only layers)."""
    return sum(n for _, members in kinds.cache_groups(model) for _, n in members) == model.n_layers


def _stages(model, pp: int) -> list[tuple[int, int]]:
    """(first, stop) of the stages whose counts bound every stage: a whole stage's count
    depends only on where its first layer falls in the pattern, so the first len(pattern)
    stages and the (maybe shorter) last one cover them all."""
    layers = -(-model.n_layers // pp)
    stages = -(-model.n_layers // layers)
    period = len(getattr(model, "pattern", ()) or ()) or 1
    starts = {s * layers for s in range(min(stages, period))} | {(stages - 1) * layers}
    return [(first, min(first + layers, model.n_layers)) for first in sorted(starts)]


def _windowed(model):
    """The one capped (windowed) kind the model's layers use, or None."""
    capped = [k for k, _ in kinds.counts(model, "mixer") if k.cache_cap(model) is not None]
    return capped[0] if len(capped) == 1 else None


def _per_layer(model) -> sp.Expr:
    """Bytes one windowed layer keeps per token (the part a window caps)."""
    kind = _windowed(model)
    return kind.cache_token_bytes(model) if kind else formula(model).xreplace({L: 1})


def _windowed_on_device(model, pp: int) -> int:
    """Windowed layers counted on the device: its ceil(L/pp) layers less the most uncapped
    layers one stage holds, which bounds every stage at every context (all the windowed layers
    when pp = 1); 0 unless every layer keeps tokens (a recurrent layer's state is apart)."""
    kind = _windowed(model)
    if kind is None or not _every(model):
        return 0
    uncapped = max(sum(n for k, n in kinds.counts(model, "mixer", first, stop) if k.cache_cap(model) is None)
                   for first, stop in _stages(model, pp))
    return -(-model.n_layers // pp) - uncapped


def per_sequence(model, b_kv, context, tp: int = 1, pp: int = 1, ep: int = 1):
    """Bytes one sequence of `context` tokens keeps on one device, rounded up; windowed
    layers hold min(context, W), recurrent layers their state. `context` may be a NumPy array."""
    whole = per_token(model, b_kv, tp, pp, ep) * context
    local = _windowed_on_device(model, pp)
    if local:
        per_layer = _value(_per_layer(model), model, b_kv, tp, 1, ep)
        whole = whole - local * per_layer * np.maximum(context - _windowed(model).cache_cap(model), 0)
    if kinds.cache_state(model) != 0:   # the stage whose recurrent layers keep the most
        whole = whole + max(_value(kinds.cache_state(model, first, stop), model, b_kv, tp, 1, ep)
                            for first, stop in _stages(model, pp))
    if isinstance(whole, np.ndarray):
        return np.ceil(whole).astype(np.int64)
    return math.ceil(whole)
