"""Per-layer attention patterns: full, sliding window and chunked layers.

A model declares `attention.window` (W) and `attention.pattern`, a list of layer kinds repeated
over the layers from the first (Gemma 2 and gpt-oss: [sliding, full]). A sliding-window layer's
query attends to the last min(S, W) keys and caches only those; a chunked layer (Llama 4's
local layers) attends within its chunk of W tokens, so at most min(S, W) keys: costed as that
bound. In prefill, query i of a sliding-window layer sees min(i, W) keys: with K = min(S, W),
S*K - K^2/2 score pairs under the causal halving a full layer's S^2/2 uses (the two agree at
K = S), and S*K when the masked scores are computed anyway. Attention sinks (gpt-oss: one learned logit per head added
to the softmax denominator) are stated and counted as parameters; their one add per score row
is negligible and not costed.
"""

from __future__ import annotations

import sympy as sp

from rooflinec.model import symbols as sym

W = sym.dimension("W")   # window (or chunk) length in tokens
DESCRIPTIONS = {W: "attention window (or chunk) in tokens"}
LOCAL = ("sliding", "chunked")
PREFIX = "local_"        # the windowed layers' attention ops


def full_layers(model, first: int, stop: int) -> int:
    """Full-attention layers among layers first .. stop - 1 (the pattern repeats from layer 0),
    counted per pattern entry in closed form: a billion layers cost as little as two."""
    pattern = getattr(model, "pattern", ()) or ()
    if not pattern:
        return max(0, stop - first)
    return sum(_from(stop, r, len(pattern)) - _from(first, r, len(pattern))
               for r, kind in enumerate(pattern) if kind not in LOCAL)


def _from(n: int, r: int, period: int) -> int:
    """Layers i in 0 .. n - 1 with i % period == r."""
    return max(0, (n - r + period - 1) // period)


def local_layers(model) -> int:
    """Layers whose pattern entry is sliding or chunked."""
    pattern = getattr(model, "pattern", ()) or ()
    return sum(_from(model.n_layers, r, len(pattern)) for r, kind in enumerate(pattern) if kind in LOCAL)


def values(model) -> dict:
    return {W: model.window} if local_layers(model) else {}


def symbols(model) -> tuple:
    return tuple(values(model))


def keys() -> sp.Expr:
    """Keys a windowed layer's query attends to."""
    return sp.Min(sym.S, W)


def causal_share(fraction, keys) -> sp.Expr:
    """Share of the S x keys score block a prefill layer computes, given the share `fraction`
    a full layer computes of its S x S: 1 - (1 - fraction) * K / S for K = min(S, W) keys, so
    S*K - K^2/2 pairs under halving, S*K without it, and `fraction` itself when K = S."""
    return (sym.S - (1 - fraction) * keys) / sym.S   # written so S - K/2 stays one readable factor


def groups(model) -> list[tuple[str, sp.Expr, sp.Expr]]:
    """(name prefix, keys, layers) for each kind of attention layer the model has; a model
    whose every layer is windowed keeps the plain names."""
    local = local_layers(model)
    if local == 0:
        return [("", sym.S, sym.L)]
    if local == model.n_layers:
        return [("", keys(), sym.L)]
    return [("", sym.S, sym.L - local), (PREFIX, keys(), sp.Integer(local))]


def stated(model) -> tuple:
    local = local_layers(model)
    if not local:
        return ()
    kinds = "/".join(model.pattern)
    text = (f"{local} of {model.n_layers} layers attend to a window of W = {model.window} keys (pattern "
            f"{kinds}, repeated): their attention, KV-cache reads and KV memory use min(S, W); in prefill query i "
            "sees min(i, W) keys, costed with the same causal convention as full layers")
    if "chunked" in model.pattern:
        text += "; a chunked layer's query sees only its chunk's earlier keys, fewer: costed as the sliding bound"
    if model.sinks:
        text += "; attention sinks (one logit per head) stated, their one add per score row not costed"
    return (("attention pattern", text),)
