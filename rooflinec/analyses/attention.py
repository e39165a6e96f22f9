"""Decode and prefill attention intensity at given contexts, two ways of counting bytes."""

from rooflinec.analyses import analysis
from rooflinec.analyses.derivations import budget_flags, over_budget
from rooflinec.derive import crossing, limit_within_budget
from rooflinec.evaluate import number
from rooflinec.ir import intensity
from rooflinec.ops import FORMULAS
from rooflinec.symbols import B, S, b, d_head, n_kv, n_q
from rooflinec.workbench import regime

# "kv": K and V reads only, the bytes that grow with S; "io": also reading Q and writing O.
COUNTS = {"kv": False, "io": True}
QUERIES = {"decode": 1, "prefill": S}


def _cost(phase: str, io: bool, causal_fraction):
    return FORMULAS["attention"](B, QUERIES[phase], S, n_q, n_kv, d_head, b, io=io,
                                 causal_fraction=causal_fraction)


@analysis("attention_intensity", "Attention intensity against context")
def attention_intensity(ctx, params) -> dict:
    cases = []
    for phase in ("decode", "prefill"):
        for count, io in COUNTS.items():
            cost = _cost(phase, io, ctx.conventions.causal_fraction(phase))
            expr = intensity(cost)
            points = []
            for s in params.contexts:
                value = number(expr, {**ctx.values, S: s})
                points.append({"context": s, "intensity": value,
                               "regime": {d.key: regime(value, ctx.ridge(d)) for d in ctx.devices}})
            limit, expired = limit_within_budget(expr, S)
            found = {d.key: crossing(expr, S, ctx.values, ctx.ridge(d)) for d in ctx.devices}
            cases.append({"phase": phase, "count": count, "flops": cost.flops, "bytes": cost.bytes,
                          "formula": expr, "limit": limit,
                          "depends_on_S": S in expr.free_symbols, "points": points,
                          "crossing": {k: c.at for k, c in found.items()},
                          **budget_flags(limit_expired=expired), **over_budget(found)})
    return {"contexts": params.contexts, "cases": cases,
            "causal_halving": ctx.conventions.causal_halving}
