"""The dense MLP: GELU (up, GELU, down) or gated (SwiGLU: SiLU gate; GeGLU: tanh-GELU gate)
with width d_ff. Every layer's feed-forward unless another kind claims it (a MoE model's
dense-first layers keep it, under `dense_` names, repeated over those layers only).
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from rooflinec.model.build import linear, op
from rooflinec.model.component import layer
from rooflinec.model.kinds import Kind
from rooflinec.model.symbols import L, M, b, d_ff, d_model

GATED = {"swiglu": "silu", "geglu": "gelu"}   # gated MLP kind -> the gate's activation
# MLP kind -> (up-side matrices, note); the down matrix is common to both
MATRICES = {"swiglu": (("gate_proj", "up_proj"), "SiLU(X W_gate) * (X W_up), then W_down"),
            "geglu": (("gate_proj", "up_proj"), "GELU(X W_gate) * (X W_up), then W_down"),
            "gelu": (("up_proj",), "GELU(X W_up), then W_down")}


def mlp_ops(model, conv) -> list:
    """The dense MLP's ops at width d_ff, repeated L (renamed by `renamed` for other layers)."""
    bias = model.mlp_bias
    up = linear("up_proj", M, d_model, d_ff, "X[M,d_model] @ W[d_model,d_ff]", bias, conv)
    if model.mlp_kind in GATED:   # swiglu: SiLU gate; geglu (Gemma): tanh-GELU gate
        fn = GATED[model.mlp_kind]
        gate = linear("gate_proj", M, d_model, d_ff, "X[M,d_model] @ W[d_model,d_ff]", bias, conv)
        act = [*gate, op(fn, fn, "elementwise", M * d_ff, b, into="gate_proj", shape=f"{fn}(G[M,d_ff])"),
               *up, op("gate_mul", "gate_mul", "elementwise", M * d_ff, b, into="up_proj",
                       shape=f"{fn}(G[M,d_ff]) * U[M,d_ff]")]
    else:
        act = [*up, op("gelu", "gelu", "elementwise", M * d_ff, b, into="up_proj", shape="gelu(U[M,d_ff])")]
    down = linear("down_proj", M, d_ff, d_model, "X[M,d_ff] @ W[d_ff,d_model]", bias, conv)
    return [*act, *down]


def renamed(ops, prefix: str, repeat, width=None):
    """Dense-MLP ops as another block's: names (and the `into` links) prefixed, repeated
    `repeat` times, the width d_ff replaced by `width`."""
    out = []
    for o in ops:
        cost = o.cost if width is None else type(o.cost)(
            o.cost.flops.xreplace({d_ff: width}), tuple((c, e.xreplace({d_ff: width})) for c, e in o.cost.traffic))
        epi = o.epilogue
        if epi is not None and width is not None:
            epi = type(epi)(epi.flops.xreplace({d_ff: width}), tuple((c, e.xreplace({d_ff: width})) for c, e in epi.traffic))
        shape = o.shape.replace("d_ff", str(width)) if width is not None else o.shape
        out.append(replace(o, name=prefix + o.name, into=(prefix + o.into) if o.into else "",
                           cost=cost, epilogue=epi, repeat=sp.sympify(repeat), shape=shape))
    return out


def mlp_params(model) -> list:
    ups, note = MATRICES[model.mlp_kind]
    parts = [layer(n, "mlp", d_model * d_ff, note=note) for n in ups]
    parts.append(layer("down_proj", "mlp", d_ff * d_model))
    if model.mlp_bias:
        parts.append(layer("mlp_bias", "mlp", len(ups) * d_ff + d_model, matmul=False))
    return parts


class DenseMLP(Kind):
    name = "dense"
    slot = "ffn"
    order = 10
    default = True
    prefix = "dense_"

    def layers(self, model, first, stop):
        return 0

    def params(self, model, repeat, mixed):
        parts = mlp_params(model)
        if not mixed:
            return parts
        return [replace(c, name=self.prefix + c.name, repeat=repeat, layers="dense") for c in parts]

    def ops(self, model, phase, conv, repeat, members):
        prefix = members[0][2]
        ops = mlp_ops(model, conv)
        return ops if (repeat == L and not prefix) else renamed(ops, prefix, repeat)

    def output(self, prefix):
        return prefix + "down_proj"
