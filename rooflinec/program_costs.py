"""The one adapter between the serving model and the compiler: a model's lowered program
(FlashAttention variant) evaluated at one workload point, op by op, as plain numbers.

It only calls lowering, the flash pass and scalar evaluation; what the numbers mean for a
serving step (dtypes, tensor parallelism, mixed batches) is the serving model's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from rooflinec import passes
from rooflinec.evaluate import number, point
from rooflinec.lower import Conventions, lower
from rooflinec.symbols import L, M

# Prefill attention skips the masked half; one logit per sequence; q, k and v as one GEMM
# (what serving engines run). The report states these.
CONVENTIONS = Conventions(causal_halving=True, logits="last", qkv="fused", bias="in_gemm")


@dataclass(frozen=True)
class OpCost:
    name: str
    category: str
    unit: str           # "matrix" or "vector"
    per_layer: bool
    flops: float        # all launches of the step (L of them for a layer op)
    traffic: dict       # bytes by traffic class, all launches


_PROGRAMS: dict = {}


def program(model, phase: str, device):
    """The flash program, made once per (model, phase, device): lowering is the slow part."""
    key = (model, phase, device.key, device.sram_per_sm)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = _flash(model, phase, device)
    return _PROGRAMS[key]


def _flash(model, phase: str, device):
    target = passes.Target(device=device, conventions=CONVENTIONS, head_dim=model.head_dim,
                           bytes_per_element=2)
    return passes.apply(lower(model, phase, CONVENTIONS), "flash", target)


def op_costs(model, phase: str, device, workload: dict, tokens=None, bytes_per_element=2) -> list[OpCost]:
    """Every op of `model`'s `phase` program at `workload` ({B: .., S: ..}); `tokens` overrides
    the tokens a linear layer sees (M), as a mixed prefill + decode batch needs."""
    prog = program(model, phase, device)
    values = point(model, bytes_per_element, workload, prog.bindings if tokens is None else {})
    if tokens is not None:
        values[M] = tokens
    out = []
    for op in prog.ops:
        count = number(op.repeat, values)
        out.append(OpCost(op.name, op.category, op.unit, op.repeat == L,
                          count * number(op.cost.flops, values),
                          {cls: count * number(e, values) for cls, e in op.cost.traffic}))
    return out
