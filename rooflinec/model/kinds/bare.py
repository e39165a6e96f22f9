"""Layers without a feed-forward: a hybrid whose blocks are single sublayers (Nemotron-H's
hybrid_override_pattern interleaves Mamba-2 blocks "M", attention blocks "*" and MLP blocks
"-", and some Mamba-2 blocks are followed by no MLP). rooflinec's layer is a mixer and a
feed-forward; such a mixer is named `<kind>_no_ffn` in the attention pattern (a pattern alias
of its kind, e.g. `mamba_no_ffn`) and this kind takes those layers' feed-forward slot: no
parameters, no ops. The layer's second norm and residual add are still counted (two norms per
layer), a slight over-count stated where a model uses it.
"""

from __future__ import annotations

from rooflinec.model.kinds import Kind, pattern_layers

SUFFIX = "_no_ffn"


class NoFeedForward(Kind):
    name = "no_ffn"
    slot = "ffn"
    order = 5        # before the dense MLP: the residual add folds into the last family's output

    def layers(self, model, first, stop):
        names = {n for n in (getattr(model, "pattern", ()) or ()) if isinstance(n, str) and n.endswith(SUFFIX)}
        return sum(pattern_layers(model, n, first, stop) for n in names)

    def ops(self, model, phase, conv, repeat, members):
        return []

    def output(self, prefix):
        return ""
