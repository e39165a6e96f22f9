"""The one adapter between the serving model and the compiler: a model's lowered program
(the ideal variant, passes.DEFAULT_VARIANT) evaluated at one workload point, op by op, as plain numbers.

It only calls lowering, the flash pass, the deployment's sharding (one device's program) and
scalar evaluation; what the numbers mean for a serving step (dtypes, mixed batches) is the
serving model's business.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import cache

from rooflinec.cost import collectives
from rooflinec.cost.evaluate import number
from rooflinec.model.lower import LEAST_WORK
from rooflinec.model.passes import DEFAULT_VARIANT
from rooflinec.model.symbols import M, b
from rooflinec.cost.workbench import Workbench

# The lower bound's conventions (what serving engines run too): the masked half skipped, one
# logit per sequence, q, k and v as one GEMM. The report states these.
CONVENTIONS = LEAST_WORK
# The attention kernel that moves only compulsory traffic: the step stays a lower bound.
VARIANT = DEFAULT_VARIANT


@dataclass(frozen=True)
class OpCost:
    name: str
    category: str
    unit: str           # "matrix" or "vector"
    per_layer: bool
    flops: float        # all launches of the step (L of them for a layer op)
    traffic: dict       # bytes by traffic class, all launches


@cache
def _bench(model, stored: tuple = ()) -> Workbench:
    """One workbench per model and storage formats: it builds each (phase, device) program once."""
    return Workbench.of(model, (), "bf16", asdict(CONVENTIONS), dict(stored))


def _program(dep, phase: str, device, formats: dict | None):
    """One device's `phase` program under deployment `dep`: the workbench's tensor-parallel
    shard, or, with attention DP, expert parallelism or experts split otherwise than by tp,
    the deployment's own pass over the whole program (one device's, before any split)."""
    bench = _bench(dep.model, tuple(sorted((formats or {}).items())))
    if (dep.attention_dp, dep.moe_ep, dep.expert_tp) == (1, 1, dep.tp):
        return bench, bench.program(phase, VARIANT, device, dep.tp)
    key = (bench, phase, getattr(device, "key", None), dep.tp, dep.attention_dp, dep.moe_ep,
           dep.expert_tp, dep.redundant_experts, dep.imbalance)
    if key not in _SHARDED:
        _SHARDED[key] = dep.shard(bench.program(phase, VARIANT, device, 1))
    return bench, _SHARDED[key]


_SHARDED: dict = {}   # (workbench, phase, device, degrees) -> program: each sharded once


def all_to_all_s(dep, tokens, bytes_per_element) -> float:
    """Seconds of one step's dispatch and combine all-to-alls at `tokens` per attention-DP rank
    (two per MoE layer; 0 where `dep` moves no tokens between devices): each waits for the
    predicted busiest device's bytes, sent or received (`Deployment.all_to_all_bytes`, under
    uniform routing: a prediction), over the workbench's link for the tp x dp devices, with one
    link latency (every pair's send is concurrent)."""
    if not dep.all_to_all:
        return 0.0
    link = _bench(dep.model).link(dep.device, dep.group, "the MoE layers' dispatch and combine all-to-alls")
    moved = dep.all_to_all_bytes(tokens, bytes_per_element)
    layers = dep.model.n_layers - dep.model.moe.dense_layers(dep.model.n_layers)
    return 2 * layers * collectives.time(max(moved["sent"], moved["received_busiest"]), 1, link)


def tp_link(dep) -> collectives.Link:
    """The link the tp group's collectives take (the workbench's: scale-up inside one domain,
    else scale-out; DeviceLacks where the device declares neither)."""
    return _bench(dep.model).link(dep.device, dep.tp, "the tensor-parallel all-reduces")


def collectives_s(dep, device, workload: dict, tokens, bytes_per_element, formats: dict | None = None,
                  algorithm: str = collectives.RING) -> tuple[int, float]:
    """(launches, seconds) of one decode step's collectives but the all-to-alls (those are
    `all_to_all_s`'s): the ones the serving bound times (the sharded program's embedding and
    row-parallel all-reduces and the logits all-gather), by `Workbench.communication` over
    the workbench's link (scale-up inside one domain, scale-out across) under `algorithm`:
    the ring (the expected time, a prediction's) or collectives.LEAST (the least time any
    correct algorithm takes, a bound's), at `workload` with `tokens` rows (M) in
    `bytes_per_element` activations."""
    bench, prog = _program(dep, "decode", device, formats)
    kept = tuple(c for c in prog.collectives if c.kind != "all_to_all")
    if not kept:
        return 0, 0.0
    rows = bench.communication(replace(prog, collectives=kept, bindings={}), device,
                               {**workload, M: tokens, b: bytes_per_element}, algorithm=algorithm)
    return sum(r.count for r in rows), float(sum(r.time for r in rows))


def op_costs(dep, phase: str, device, workload: dict, tokens=None, bytes_per_element=2,
             formats: dict | None = None, category: str | None = None) -> list[OpCost]:
    """Every op of one device's `phase` program under deployment `dep` at `workload`
    ({B: .., S: ..}); `tokens` overrides
    the tokens a linear layer sees (M), as a mixed prefill + decode batch needs; `formats`
    stores weights and KV cache in their own formats ({"weights": "fp8", ...}); `category`: only
    the ops of that category (the others not evaluated)."""
    bench, prog = _program(dep, phase, device, formats)
    values = {**bench.at(workload, prog.bindings if tokens is None else {}), b: bytes_per_element}
    if tokens is not None:
        values[M] = tokens
    values.update(dep.dequant())   # weight-only GEMMs dequantise; on the weights' own peak none
    out = []
    for op in prog.ops:
        if category is not None and op.category != category:
            continue
        count = number(op.repeat, values)
        out.append(OpCost(op.name, op.category, op.unit, op.per_layer,
                          count * number(op.cost.flops, values),
                          {cls: count * number(e, values) for cls, e in op.cost.traffic}))
    return out


def symbolic_ops(dep, phase: str, device, bytes_per_element=2, formats: dict | None = None):
    """Every op of one device's `phase` program under deployment `dep` as (op, FLOPs, {traffic class: bytes}), sympy
    expressions of the workload symbols (B, S, M) alone: model dimensions and bytes per element
    substituted, the launches (repeat) multiplied in, M left free (no binding), the
    dequantisation FLOPs of the deployment's GEMMs (as `op_costs`)."""
    bench, prog = _program(dep, phase, device, formats)
    values = {**bench.values_for(), b: bytes_per_element, **dep.dequant()}
    return [(op, (op.repeat * op.cost.flops).xreplace(values),
             {cls: (op.repeat * e).xreplace(values) for cls, e in op.cost.traffic}) for op in prog.ops]
