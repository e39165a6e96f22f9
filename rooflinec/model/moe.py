"""Mixture-of-experts layers: the model keys, their symbols, where the ops sit, their parameters.

A MoE layer replaces the dense MLP by a router GEMM (d_model -> E scores), a top-k over the
scores, k routed expert MLPs per token (width d_e), optional shared experts every token goes
through (total width d_s), and a weighted combine. Dense layers (DeepSeek-V3's
`first_k_dense_replace`, a `moe_layer_freq` above 1) keep the dense MLP of width d_ff; their
ops repeat once per dense layer and the MoE ops L - (dense layers) times.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from rooflinec.model import symbols as sym
from rooflinec.model.ops.vector import SOFTMAX_FLOPS
from rooflinec.model.symbols import L, M, b, d_model
from rooflinec.model.ops.moe import distinct_experts
from rooflinec.model.build import op as make_op
from rooflinec.model.kinds.dense import renamed

E = sym.dimension("E")        # routed experts
k = sym.dimension("k")        # experts each token is routed to (top-k)
d_e = sym.dimension("d_e")    # one routed expert's MLP width
d_s = sym.dimension("d_s")    # the shared experts' total MLP width
rho = sp.Symbol("rho", positive=True)   # routing imbalance (1: uniform)
DESCRIPTIONS = {E: "routed experts", k: "experts per token (top-k)",
                d_e: "routed expert MLP width", d_s: "shared experts' total MLP width",
                rho: "routing imbalance: tokens go uniformly to E/rho hot experts"}


@dataclass(frozen=True)
class MoE:
    experts: int
    top_k: int
    d_expert: int
    shared_experts: int = 0
    d_shared: int = 0          # one shared expert's width (default d_expert)
    first_dense: int = 0       # leading layers with a dense MLP
    every: int = 1             # a MoE layer every `every` layers after those
    imbalance: float = 1       # rho: routing concentrated on E/rho equally likely experts
    offset: int = 0            # ... namely those i with i % every == offset
    shared_gate: bool = False  # the shared experts' output scaled by sigmoid(X W[d_model,1]) (Qwen3-Next)

    def moe_layers(self, first: int, stop: int) -> int:
        """MoE layers among layers first .. stop - 1: those i >= first_dense with
        i % every == offset, counted in closed form (offset < every)."""
        below = lambda x: (x - self.offset + self.every - 1) // self.every   # noqa: E731 - i < x
        start = max(first, self.first_dense)
        return max(0, below(stop) - below(start)) if stop > start else 0

    def dense_layers(self, n_layers: int, first: int = 0) -> int:
        """Layers with a dense MLP among layers first .. n_layers - 1."""
        return max(0, n_layers - first) - self.moe_layers(first, n_layers)

    @property
    def shared_width(self) -> int:
        return self.shared_experts * (self.d_shared or self.d_expert)


def from_spec(section: dict | None) -> MoE | None:
    if not section:
        return None
    return MoE(section["experts"], section["top_k"], section["d_expert"],
               section.get("shared_experts", 0), section.get("d_shared", 0),
               section.get("first_dense", 0), section.get("every", 1), section.get("imbalance", 1),
               section.get("offset", 0), section.get("shared_gate", False))


def values(model) -> dict:
    moe = getattr(model, "moe", None)
    if moe is None:
        return {}
    return {E: moe.experts, k: moe.top_k, d_e: moe.d_expert, **({d_s: moe.shared_width} if moe.shared_experts else {}),
            **({rho: moe.imbalance} if moe.imbalance != 1 else {})}


def symbols(model) -> tuple:
    return tuple(values(model))


def distinct(model) -> sp.Expr:
    """Distinct routed experts a step of M tokens reads per MoE layer, as the expert GEMMs
    count them: E*(1-(1-k/E)^M), or over E/rho hot experts under imbalanced routing; exactly
    k at M = 1."""
    return distinct_experts(M, E / rho if model.moe.imbalance != 1 else E, k)


def repeats(model) -> tuple[sp.Expr, int]:
    """(launches of a MoE-layer op, launches of a dense-layer op) per model step."""
    dense = model.moe.dense_layers(model.n_layers)
    return L - dense, dense


ROUTED = "expert_"   # the prefix of the routed experts' op names (ffn's)


def routed(op) -> bool:
    """An op of the routed experts: the ops expert parallelism splits and whose weights are
    the `experts` tensor class (rooflinec.model.quant)."""
    return op.name.startswith(ROUTED)


def ffn(model, dense_mlp, moe_repeat) -> list:
    """The ops of a MoE layer, repeated `moe_repeat`: `dense_mlp()` builds the dense MLP's ops
    (the shared experts' shape); the dense layers' own MLP is the dense kind's
    (rooflinec.model.kinds.dense)."""
    ops = [make_op("router", "gemm", "linear", M, d_model, E, b, repeat=moe_repeat,
                    shape="X[M,d_model] @ W_router[d_model,E]", crossing=M),
            make_op("router_topk", "elementwise", "softmax", M * E, SOFTMAX_FLOPS, 1, 1, b,
                    repeat=moe_repeat, shape="top-k of softmax(scores[M,E]) -> k gates per token")]
    if model.moe.shared_experts:
        ops += renamed(dense_mlp(), "shared_", moe_repeat, d_s)
    if model.moe.shared_experts and model.moe.shared_gate:   # Qwen2-MoE / Qwen3-Next's shared_expert_gate
        ops += [make_op("shared_expert_gate", "gemm", "linear", M, d_model, 1, b, repeat=moe_repeat,
                        shape="X[M,d_model] @ W[d_model,1]", crossing=M),
                make_op("shared_expert_scale", "gate_mul", "elementwise", M * d_model, b, repeat=moe_repeat,
                        shape="sigmoid(g[M,1]) * Y_shared[M,d_model] (the sigmoid's M values left out)")]
    rows, gated = "X[M*k routed rows,d_model]", model.mlp_kind in ("swiglu", "geglu")
    act = {"swiglu": "silu", "geglu": "gelu", "gelu": "gelu"}[model.mlp_kind]

    # imbalanced routing (rho > 1) reads fewer distinct experts: uniform over E/rho hot ones
    hot, over = (E / rho, "(E/rho)*(1-(1-rho*k/E)^M)") if model.moe.imbalance != 1 else (E, "E*(1-(1-k/E)^M)")

    def expert(name):
        return make_op(name, "expert_gemm", "linear", M, k, hot, d_model, d_e, b, repeat=moe_repeat,
                       shape=f"{rows} @ W_e[d_model,d_e] over {over} distinct experts", crossing=M)

    first = "expert_gate_proj" if gated else "expert_up_proj"
    ops += [expert(first), make_op("expert_" + act, act, "elementwise", M * k * d_e, b,
                                   repeat=moe_repeat, into=first, shape=f"{act}(G[M*k,d_e])")]
    if gated:
        ops += [expert("expert_up_proj"),
                make_op("expert_gate_mul", "gate_mul", "elementwise", M * k * d_e, b, repeat=moe_repeat,
                        into="expert_up_proj", shape=f"{act}(G[M*k,d_e]) * U[M*k,d_e]")]
    ops += [
            make_op("expert_down_proj", "expert_gemm", "linear", M, k, hot, d_e, d_model, b,
                    repeat=moe_repeat, shape="H[M*k,d_e] @ W_e[d_e,d_model] over the distinct experts",
                    crossing=M),
            make_op("moe_combine", "moe_combine", "elementwise", M, k, d_model, b,
                    shared=bool(model.moe.shared_experts), repeat=moe_repeat,
                    shape="sum_i g_i * Y_i[M,d_model] over the k routed outputs"
                          + (" + shared output" if model.moe.shared_experts else ""))]
    return ops
