"""Windowed attention: sliding-window and chunked layers (Gemma 2, gpt-oss, Mistral, Llama 4),
with attention sinks stated (rooflinec.model.window holds W and the pattern's prose).

A windowed layer is of full attention's family: the same projections and parameters, its
scores over min(S, W) keys (its ops named `local_` beside full layers), and a cache of at most
W tokens. A chunked layer's query sees only its chunk's earlier keys, fewer: costed as the
sliding bound. Which layers are windowed is the attention pattern (data).
"""

from __future__ import annotations

from rooflinec.model import window
from rooflinec.model.kinds import Kind, pattern_layers
from rooflinec.model.kinds.full import scores
from rooflinec.model.symbols import b, d_head, n_kv


class Sliding(Kind):
    name = "sliding"
    slot = "mixer"
    order = 30
    family = "full"
    pattern = True
    aliases = ("chunked",)   # costed as the sliding bound, one group of `local_` ops
    prefix = window.PREFIX
    descriptions = window.DESCRIPTIONS

    def layers(self, model, first, stop):
        return sum(pattern_layers(model, n, first, stop) for n in (self.name, *self.aliases))

    def values(self, model):
        return {window.W: model.window}

    def cache_token_bytes(self, model):
        return 2 * n_kv * d_head * b

    def cache_cap(self, model):
        return model.window

    def cache_tokens(self, model):
        return window.keys()

    def core(self, model, phase, conv, repeat, prefix):
        return scores(phase, conv, prefix, window.keys(), repeat)

    def stated(self, model, phase, conv):
        return window.stated(model)
