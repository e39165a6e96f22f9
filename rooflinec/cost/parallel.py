"""Many devices: the study's `parallel` block, the rules of each parallel axis on one symbol,
and the training facts (bubble, FLOPs per iteration, memory) that follow from the degrees.

The rules: what one of tp devices holds of each sharded symbol (`per_device`: n_q/tp, n_kv/tp
or one replicated KV head, d_ff/tp, ceil(V/tp), the expert widths, the heads a layer kind
splits: `Kind.shards`), which degrees divide the
model (`check`, `check_ep`, `stages`). Only rooflinec.cost.deployment applies them to
programs and memory (and rooflinec.cost.kvcache's formulas, which the deployment calls); its
module docstring states the layout (Megatron-LM, expert parallelism) they come from.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from rooflinec.model import kinds
from rooflinec.model.symbols import L, V, d_ff, n_kv, n_q
from rooflinec.model.moe import d_e, d_s


@dataclass(frozen=True)
class Parallel:
    """Degrees of parallelism and the training schedule; the study's `parallel` block."""

    tp: int = 1             # tensor parallel
    pp: int = 1             # pipeline stages
    ep: int = 1             # expert parallel: the routed experts over ep devices (moe_ep)
    attention_dp: int = 1   # attention data parallel: ranks with their own batch and KV cache
    moe_tp: int = 0         # each routed expert's width over moe_tp devices (0: tp x attention_dp / ep)
    dp: int = 1             # data parallel
    microbatches: int = 1   # per pipeline flush (training)
    zero: int = 0           # ZeRO stage across dp: 1 optimizer states, 2 + gradients, 3 + weights
    overlap: bool = False   # the engine overlaps communication with compute; no bound reads it (every
                            # bound takes max(kernels, collectives) whatever it says: roofline.combine)


class Unshardable(ValueError):
    """A degree that does not divide what it splits; the message says which."""


def expert_tp(tp: int, ep: int, moe_tp: int | None) -> int:
    """The degree that splits each routed expert's width: `moe_tp` when given, else tp while
    ep is 1 (vLLM's and Megatron-LM's experts under tensor parallelism), else 1."""
    return moe_tp if moe_tp is not None else (tp if ep == 1 else 1)


def _widths(model) -> tuple[tuple[str, int], ...]:
    """The widths tensor parallelism splits: heads, the MLP, and a mixture of experts' shared
    experts."""
    moe = getattr(model, "moe", None)
    out = (("query heads", model.n_heads), ("MLP width d_ff", model.d_ff))
    if moe is not None and moe.shared_experts:
        out += (("shared experts' width d_s", moe.shared_width),)
    return out + tuple(w for kind in kinds.kinds_of(model) for w in kind.tp_widths(model))


def check(model, tp: int, ep: int = 1, moe_tp: int | None = None) -> None:
    if tp < 1:
        raise Unshardable("tensor-parallel degree must be at least 1")
    for what, n in _widths(model):
        if n % tp:
            raise Unshardable(f"tensor-parallel degree {tp} does not divide the {n} {what}")
    moe, split = getattr(model, "moe", None), expert_tp(tp, ep, moe_tp)
    if moe is not None and moe.d_expert % split:
        what = "tensor-parallel degree" if moe_tp is None else "expert tensor-parallel degree (moe_tp)"
        raise Unshardable(f"{what} {split} does not divide the {moe.d_expert} routed expert width d_e")
    kv = model.n_kv_heads
    if kv % tp and tp % kv:
        raise Unshardable(f"tensor-parallel degree {tp} neither divides nor is a multiple of the "
                          f"{kv} KV heads")
    if tp > 1:
        _check_declared(model, tp)


SHARDED = frozenset({n_q, n_kv, d_ff, V, d_e, d_s})


def _sharded_degree(expr: sp.Expr) -> int:
    """The largest power the split widths reach in one term of `expr` (V**2, n_q*d_ff: 2)."""
    if expr in SHARDED:
        return 1
    if expr.is_Pow and expr.exp.is_Integer:
        return _sharded_degree(expr.base) * abs(int(expr.exp))
    degrees = [_sharded_degree(a) for a in expr.args]
    return (sum(degrees) if expr.is_Mul else max(degrees)) if degrees else 0


def _check_declared(model, tp: int) -> None:
    """A declared operator's widths split 1/tp each (per_device); in a term of degree 2 or more
    in them the tp shards would sum to less than the whole op (V**16 to 1/tp**15 of it)."""
    for op in getattr(model, "operators", ()):
        for what, expr in (("FLOPs", op.cost.flops), *((f"{c} bytes", e) for c, e in op.cost.traffic),
                           ("parameters", op.params), ("cache", op.cache)):
            degree = _sharded_degree(sp.sympify(expr))
            if degree > 1:
                raise Unshardable(f"declared operator '{op.name}' cannot be split {tp} ways: its {what} "
                                  f"are of degree {degree} in the widths tp splits (n_q, n_kv, d_ff, V), "
                                  "so its shards would not sum to the whole op; write it at most linear "
                                  "in them, or keep tp 1")


def check_ep(model, ep: int) -> None:
    moe = getattr(model, "moe", None)
    if ep < 1:
        raise Unshardable("expert-parallel degree must be at least 1")
    if ep > 1 and moe is None:
        raise Unshardable(f"expert-parallel degree {ep} splits a mixture of experts, and this model has none")
    if moe is not None and moe.experts % ep:
        raise Unshardable(f"expert-parallel degree {ep} does not divide the {moe.experts} routed experts")


def kv_replicated(model, tp: int) -> bool:
    return tp > model.n_kv_heads


def per_device(model, tp: int, ep: int = 1, moe_tp: int | None = None) -> dict:
    """Each sharded symbol -> what one of tp devices holds of it. A mixture of experts' shared
    experts split like the MLP; each routed expert's width over `expert_tp` devices."""
    split = expert_tp(tp, ep, moe_tp)
    if tp == 1 and split == 1:
        return {}
    check(model, tp, ep, moe_tp)
    moe = getattr(model, "moe", None)
    experts = {} if moe is None else {d_s: d_s / tp, **({d_e: d_e / split} if split > 1 else {})}
    dense = {} if tp == 1 else {n_q: n_q / tp, n_kv: sp.Integer(1) if kv_replicated(model, tp) else n_kv / tp,
                                d_ff: d_ff / tp, V: sp.ceiling(V / tp)}
    own = {} if tp == 1 else {s: v for kind in kinds.kinds_of(model) for s, v in kind.shards(model, tp).items()}
    return {**dense, **own, **experts}


# --- training at scale ------------------------------------------------------------------------

def bubble(pp: int, microbatches: int) -> sp.Rational:
    """1F1B's idle share of a pipeline flush: (p - 1) / (m + p - 1) (Narayanan et al. 2021, §2.2)."""
    return sp.Rational(pp - 1, microbatches + pp - 1)


def megatron_flops(batch, seq, layers, hidden, vocab, recompute: bool = True) -> int:
    """FLOPs per iteration of a GPT model, Narayanan et al. 2021, eq. (3), with full activation
    recomputation: F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)); without it (one forward fewer
    in the layers, the LM head unchanged): 72 B s l h^2 (1 + s/(6h) + V/(12 l h))."""
    k = 96 if recompute else 72
    f = k * sp.Integer(batch) * seq * layers * hidden ** 2 * (
        1 + sp.Rational(seq, 6 * hidden) + sp.Rational(6 * vocab, k * layers * hidden))
    return int(f)


ADAM_BYTES = 12   # fp32 master weights, first and second moments (Rajbhandari et al. 2020, ZeRO)


def training_memory(params: float, weight_bytes: int, grad_bytes: int, dp: int, zero: int) -> dict:
    """Bytes per device of weights, gradients and Adam state for `params` parameters per device
    (after tp and pp), with ZeRO stage `zero` splitting them across dp (ZeRO, figure 1)."""
    split = lambda stage: dp if zero >= stage else 1   # noqa: E731
    return {"weights": params * weight_bytes / split(3), "gradients": params * grad_bytes / split(2),
            "optimizer": params * ADAM_BYTES / split(1)}


# Korthikanti et al. 2022, table 2: activation bytes per layer at 16 bits, in units of s*b*h
ACTIVATIONS = {
    "none": "tensor parallelism, scores kept: 10 + 24/t + 5·a·s/(h·t)",
    "selective": "tensor and sequence parallelism, attention's scores recomputed (or never "
                 "stored, as FlashAttention does): 34/t",
    "full": "full recomputation: each layer's input, 2",
}


def activation_bytes(seq: int, micro: int, hidden: int, heads: int, layers: int, tp: int,
                     policy: str) -> float:
    """Activations per device for `layers` layers of one microbatch (ACTIVATIONS)."""
    s, bsz, h = seq, micro, hidden
    per = {"none": 10 + 24 / tp + 5 * heads * s / (h * tp), "selective": 34 / tp, "full": 2}[policy]
    return s * bsz * h * per * layers


# --- memory per device ------------------------------------------------------------------------

def stages(n_layers: int, pp: int) -> list[tuple[int, int]]:
    """Each pipeline stage's layers first .. stop - 1: ceil(L/pp) consecutive layers a stage,
    the last holding what is left; a pp that would leave a stage with no layers is refused."""
    per = -(-n_layers // pp)
    if pp < 1 or per * (pp - 1) >= n_layers:
        filled = -(-n_layers // per) if pp >= 1 else 0
        raise Unshardable(f"pipeline degree {pp} leaves stages with no layers: {n_layers} layers in "
                          f"stages of ceil(L/pp) = {per} fill only {filled} stages")
    return [(s * per, min((s + 1) * per, n_layers)) for s in range(pp)]


def on_one_device(model, tp: int, pp: int = 1, ep: int = 1) -> dict:
    """Symbol -> what one device holds of it: the tensor-parallel shards and ceil(L/pp) layers."""
    return {**per_device(model, tp, ep), L: sp.ceiling(L / pp)}
