"""Many devices: the `parallel` block, Megatron-LM tensor-parallel sharding as a pass over a
lowered program, the collectives it adds, and the per-device facts (memory, bubble) that
follow from the degrees.

Sharding (Shoeybi et al. 2019, Megatron-LM, section 3; Narayanan et al. 2021):
- q, k, v and gate/up are column-parallel, o and down row-parallel: each device holds n_q/tp
  query heads, n_kv/tp KV heads and d_ff/tp of the MLP width, so every op written over n_q,
  n_kv or d_ff divides by tp (attention included: heads are independent);
- KV heads are replicated when tp exceeds their count: each device keeps the one KV head its
  query heads read (n_kv per device = 1), which is duplicated work and memory;
- the embedding and the LM head are vocabulary-parallel: V/tp rows (rounded up) per device;
- norms, residual adds and the embedding's gather run whole on every device (no sequence
  parallelism): duplicated work.
The forward pass then needs one all-reduce of the [M, d_model] activations after o_proj and
one after down_proj per layer (one per layer for a parallel block), one after the
vocabulary-parallel embedding, and an all-gather of the logits.

Expert parallelism (ep, GShard and DeepSpeed-MoE's layout) splits the E routed experts over ep
devices, E/ep each; attention, the router and shared experts stay whole on every one. A step
waits for its busiest device, so the program is that device's (pigeonhole): of the M*k
routings one device serves at least ceil(M*k/ep), and of the D distinct experts the step reads
one device holds at least ceil(D/ep); the routed-expert ops' FLOPs and activations scale by
ceil(M*k/ep)/(M*k), their weights by ceil(D/ep)/D. (At M = 1 Mixtral's two experts sit on two
devices, each reading a whole expert per layer.) The mean device under uniform routing, M*k/ep
routings and D/ep experts, is a prediction of the typical device, not of the step, and is
stated as one. Tokens reach their experts and come back by two all-to-alls per MoE layer
(dispatch and combine) of M*k*d_model elements each.

It is a pass applied after the variant's passes (the attention kernels they build are
written over n_q and n_kv too); at tp = 1 it returns the program unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sympy as sp

from rooflinec.cost.collectives import Collective
from rooflinec.model.ir import Cost, Program, verify
from rooflinec.model.symbols import L, M, V, b, d_ff, d_model, n_kv, n_q
from rooflinec.model.moe import d_e, d_s, distinct, k, repeats
from rooflinec.model.params import count
from rooflinec.model.symbol_table import model_values


@dataclass(frozen=True)
class Parallel:
    """Degrees of parallelism and the training schedule; the study's `parallel` block."""

    tp: int = 1             # tensor parallel
    pp: int = 1             # pipeline stages
    ep: int = 1             # expert parallel (within the data-parallel ranks)
    dp: int = 1             # data parallel
    microbatches: int = 1   # per pipeline flush (training)
    zero: int = 0           # ZeRO stage across dp: 1 optimizer states, 2 + gradients, 3 + weights
    overlap: bool = False   # communication overlaps compute (else it adds to the step)


class Unshardable(ValueError):
    """A degree that does not divide what it splits; the message says which."""


def _widths(model, ep: int) -> tuple[tuple[str, int], ...]:
    """The widths tensor parallelism splits: heads, the MLP, and a mixture of experts' shared
    experts and (unless expert parallelism places whole experts) each routed expert."""
    moe = getattr(model, "moe", None)
    out = (("query heads", model.n_heads), ("MLP width d_ff", model.d_ff))
    if moe is not None and moe.shared_experts:
        out += (("shared experts' width d_s", moe.shared_width),)
    if moe is not None and ep == 1:
        out += (("routed expert width d_e", moe.d_expert),)
    return out


def check(model, tp: int, ep: int = 1) -> None:
    if tp < 1:
        raise Unshardable("tensor-parallel degree must be at least 1")
    for what, n in _widths(model, ep):
        if n % tp:
            raise Unshardable(f"tensor-parallel degree {tp} does not divide the {n} {what}")
    kv = model.n_kv_heads
    if kv % tp and tp % kv:
        raise Unshardable(f"tensor-parallel degree {tp} neither divides nor is a multiple of the "
                          f"{kv} KV heads")


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


def per_device(model, tp: int, ep: int = 1) -> dict:
    """Each sharded symbol -> what one of tp devices holds of it. A mixture of experts' shared
    experts split like the MLP; each routed expert too (1/tp of every expert, as vLLM and
    Megatron-LM shard experts under tensor parallelism) unless ep places whole experts."""
    if tp == 1:
        return {}
    check(model, tp, ep)
    moe = getattr(model, "moe", None)
    experts = {} if moe is None else {d_s: d_s / tp, **({d_e: d_e / tp} if ep == 1 else {})}
    return {n_q: n_q / tp, n_kv: sp.Integer(1) if kv_replicated(model, tp) else n_kv / tp,
            d_ff: d_ff / tp, V: sp.ceiling(V / tp), **experts}


def shard_model(model, tp: int):
    """One device's slice of `model` as a model spec (memory, the serving model)."""
    check(model, tp)
    moe = getattr(model, "moe", None)
    if moe is not None:
        moe = replace(moe, d_expert=moe.d_expert // tp, d_shared=(moe.d_shared or moe.d_expert) // tp)
    return replace(model, key=f"{model.key}/tp{tp}", n_heads=model.n_heads // tp,
                   n_kv_heads=max(1, model.n_kv_heads // tp), d_ff=model.d_ff // tp,
                   vocab=-(-model.vocab // tp), moe=moe)


def _cost(cost: Cost | None, subs: dict) -> Cost | None:
    if cost is None:
        return None
    return Cost(cost.flops.xreplace(subs), tuple((c, e.xreplace(subs)) for c, e in cost.traffic))


def _partial_outputs(program: Program, model, ep: int) -> list[str]:
    """The ops whose [M, d_model] output is a partial sum over the tp devices: the row-parallel
    o and down projections (a MoE model's dense layers' too), and a MoE layer's combine when
    its experts (or its shared experts) are split by tp."""
    names = {op.name for op in program.ops}
    moe = getattr(model, "moe", None)
    ffn = ["down_proj", "dense_down_proj"]
    if moe is not None and (ep == 1 or moe.shared_experts):
        ffn.append("moe_combine")
    layer = ffn if model.block == "parallel" else ["o_proj", *ffn]
    return [name for name in layer if name in names]


def collectives(program: Program, model, tp: int, ep: int = 1) -> tuple[Collective, ...]:
    """The forward pass's tensor-parallel collectives, after the ops whose outputs are partial."""
    names = {op.name for op in program.ops}
    act = M * d_model * b
    out = []
    if "embedding" in names:
        out.append(Collective("embedding_all_reduce", "all_reduce", act, tp, "tp", tp,
                              after="embedding", why="vocabulary-parallel embedding: each device "
                              "holds V/tp rows, the others contribute zeros"))
    for name in _partial_outputs(program, model, ep):
        out.append(Collective(f"{name}_all_reduce", "all_reduce", act, tp, "tp", tp,
                              repeat=program.op(name).repeat, after=name, why="row-parallel: each "
                              "device holds a partial sum of the [M, d_model] output"))
    if "lm_head" in names:
        tokens = program.op("lm_head").crossing
        out.append(Collective("logits_all_gather", "all_gather", tokens * V * b, tp, "tp", tp,
                              after="lm_head", why="vocabulary-parallel LM head: each device "
                              "holds V/tp of every token's logits"))
    return tuple(out)


# the backward pass's conjugate of each row-parallel output's all-reduce: Megatron's f operator,
# the identity forward, an all-reduce of the input's gradient before the column-parallel GEMMs
_CONJUGATE = {"o_proj_all_reduce": ("attention_input_grad_all_reduce", "the gradient of the "
                                    "attention block's input, summed over the column-parallel q, k, v"),
              "down_proj_all_reduce": ("mlp_input_grad_all_reduce", "the gradient of the MLP's "
                                       "input, summed over the column-parallel gate and up"),
              "dense_down_proj_all_reduce": ("dense_mlp_input_grad_all_reduce", "the gradient of "
                                             "a dense layer's MLP input, summed over gate and up"),
              "moe_combine_all_reduce": ("moe_input_grad_all_reduce", "the gradient of a MoE "
                                         "layer's input, summed over the split experts")}


def backward_collectives(forward: tuple[Collective, ...]) -> tuple[Collective, ...]:
    """The per-layer all-reduces a training step adds in its backward pass (one per forward
    all-reduce of a layer: four per layer in all for a sequential block)."""
    return tuple(replace(c, name=_CONJUGATE[c.name][0], after="", why=_CONJUGATE[c.name][1])
                 for c in forward if c.name in _CONJUGATE)


def routed(op) -> bool:
    """An op of the routed experts (moe.ffn names them expert_*): the ops ep splits."""
    return op.name.startswith("expert_")


def _busiest(cost: Cost | None, rows, weights) -> Cost | None:
    """A routed-expert op's cost on the busiest expert-parallel device: FLOPs and every
    traffic class but the weights times `rows`, the weights times `weights`."""
    if cost is None:
        return None
    return Cost(cost.flops * rows, tuple((c, e * (weights if c == "weights" else rows)) for c, e in cost.traffic))


def expert_collectives(model, tp: int, ep: int) -> tuple[Collective, ...]:
    """Each MoE layer's dispatch and combine all-to-alls: M*k rows of d_model, (ep-1)/ep of
    them to other devices."""
    payload, repeat = M * k * d_model * b, repeats(model)[0]
    return (Collective("moe_dispatch_all_to_all", "all_to_all", payload, ep, "ep", tp * ep,
                       repeat=repeat, after="router_topk", why="each token's k routed rows go to "
                       "the devices holding their experts"),
            Collective("moe_combine_all_to_all", "all_to_all", payload, ep, "ep", tp * ep,
                       repeat=repeat, after="expert_down_proj", why="the experts' outputs return "
                       "to their tokens' devices for the weighted combine"))


def split_experts(program: Program, model, ep: int, tp: int = 1) -> Program:
    """`program` as one of ep expert-parallel devices runs it; unchanged at ep = 1."""
    if ep == 1:
        return program
    check_ep(model, ep)
    rows, experts = M * k, distinct(model)
    share = (sp.ceiling(rows / ep) / rows, sp.ceiling(experts / ep) / experts)
    ops = tuple(replace(op, cost=_busiest(op.cost, *share), epilogue=_busiest(op.epilogue, *share))
                if routed(op) else op for op in program.ops)
    stated = (("expert parallelism", f"ep = {ep}: the {model.moe.experts} routed experts split "
               f"{model.moe.experts // ep} per device; a step waits for its busiest device, which "
               "serves at least ceil(M*k/ep) of the M*k routings and reads at least ceil(D/ep) of "
               "the D distinct experts the step touches (pigeonhole; D as the expert GEMMs count it, exactly "
               "k at M = 1): the routed-expert ops are that "
               "device's; attention, router and shared experts whole on every device; a dispatch and "
               "a combine all-to-all per MoE layer"),
              ("expert parallelism, mean device (a prediction)", "under uniform routing the mean "
               "device serves M*k/ep routings and reads D/ep experts; the step still waits for the "
               "busiest, whose load exceeds the mean by the routing's imbalance"),)
    return verify(replace(program, ops=ops, conventions=program.conventions + stated,
                          collectives=program.collectives + expert_collectives(model, tp, ep)))


def shard(program: Program, model, tp: int, ep: int = 1) -> Program:
    """`program` as one of tp (and ep) devices runs it, with its collectives; unchanged at
    tp = ep = 1."""
    if tp == 1:
        return split_experts(program, model, ep)
    subs = per_device(model, tp, ep)
    ops = tuple(replace(op, cost=_cost(op.cost, subs), epilogue=_cost(op.epilogue, subs))
                for op in program.ops)
    kv = (f"KV heads replicated: {model.n_kv_heads} KV heads over {tp} devices, each keeps one"
          if kv_replicated(model, tp) else f"{model.n_kv_heads // tp} KV head{'s' if model.n_kv_heads // tp > 1 else ''} per device")
    moe = getattr(model, "moe", None)
    experts = "" if moe is None else (
        "; each routed expert's width d_e and the shared experts' d_s split too, the router whole"
        if ep == 1 else "; the shared experts' width d_s splits, routed experts stay whole (ep places them)")
    stated = (("tensor parallelism", f"tp = {tp} (Megatron-LM): q/k/v and gate/up "
               "column-parallel, o and down row-parallel, embedding and LM head vocabulary-parallel; "
               f"{kv}; every op written over n_q, n_kv, d_ff or V (declared operators too) divides by tp, "
               f"norms and residual adds run whole on every device{experts}"),)
    return split_experts(verify(replace(program, ops=ops, conventions=program.conventions + stated,
                                        collectives=collectives(program, model, tp, ep))), model, ep, tp)


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


def _layers_in(model, c, first: int, stop: int) -> int:
    """How many copies of per-layer component `c` layers first .. stop - 1 hold."""
    if c.layers == "moe":
        return model.moe.moe_layers(first, stop)
    if c.layers == "dense":
        return model.moe.dense_layers(stop, first)
    return stop - first


def stage_params(model, tp: int, pp: int = 1, ep: int = 1) -> tuple[list, sp.Expr]:
    """Parameters one device of each pipeline stage holds in its layers (exact numbers, tp
    shards and E/ep of the routed experts), and those outside the layers (embeddings, final
    norm, LM head); the stages and the rest sum to the model's parameters on one tp x ep
    shard."""
    if ep > 1:
        check_ep(model, ep)
    shard, values = per_device(model, tp, ep), model_values(model)
    layered, once = [], sp.Integer(0)
    for c in count(model).components:
        per = c.per.xreplace(shard).subs(values) / (ep if c.name == "experts" else 1)
        if c.layers or c.repeat == L:
            layered.append((c, per))
        else:
            once += per * c.repeat.subs(values)
    return [sum((per * _layers_in(model, c, first, stop) for c, per in layered), sp.Integer(0))
            for first, stop in stages(model.n_layers, pp)], once


def params_per_device(model, tp: int, pp: int = 1, ep: int = 1) -> int:
    """Parameters one device holds: its tensor-parallel shard of the busiest pipeline stage's
    layers, with the embedding and LM head on that same stage (an upper bound for pp > 1,
    where they sit on the first and last); norms and, past n_kv, KV heads are replicated;
    E/ep of the routed experts."""
    layered, once = stage_params(model, tp, pp, ep)
    return int(max(layered) + once)


def on_one_device(model, tp: int, pp: int = 1, ep: int = 1) -> dict:
    """Symbol -> what one device holds of it: the tensor-parallel shards and ceil(L/pp) layers."""
    return {**per_device(model, tp, ep), L: sp.ceiling(L / pp)}
