"""The one adapter between the serving model and the compiler: a model's lowered program
(FlashAttention variant) evaluated at one workload point, op by op, as plain numbers.

It only calls lowering, the flash pass and scalar evaluation; what the numbers mean for a
serving step (dtypes, tensor parallelism, mixed batches) is the serving model's business.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache

from rooflinec.evaluate import number
from rooflinec.lower import Conventions
from rooflinec.passes import DEFAULT_VARIANT
from rooflinec.symbols import L, M, b
from rooflinec.workbench import Workbench

# Prefill attention skips the masked half; one logit per sequence; q, k and v as one GEMM
# (what serving engines run). The report states these.
CONVENTIONS = Conventions(causal_halving=True, logits="last", qkv="fused", bias="in_gemm")
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
def _bench(model) -> Workbench:
    """One workbench per model: it builds each (phase, device) program once."""
    return Workbench.of(model, (), "bf16", asdict(CONVENTIONS))


def op_costs(model, phase: str, device, workload: dict, tokens=None, bytes_per_element=2) -> list[OpCost]:
    """Every op of `model`'s `phase` program at `workload` ({B: .., S: ..}); `tokens` overrides
    the tokens a linear layer sees (M), as a mixed prefill + decode batch needs."""
    bench = _bench(model)
    prog = bench.program(phase, VARIANT, device)
    values = {**bench.at(workload, prog.bindings if tokens is None else {}), b: bytes_per_element}
    if tokens is not None:
        values[M] = tokens
    out = []
    for op in prog.ops:
        count = number(op.repeat, values)
        out.append(OpCost(op.name, op.category, op.unit, op.repeat == L,
                          count * number(op.cost.flops, values),
                          {cls: count * number(e, values) for cls, e in op.cost.traffic}))
    return out
