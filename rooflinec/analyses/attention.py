"""Decode and prefill attention intensity at given contexts, two ways of counting bytes; a
model with windowed layers (rooflinec.model.window) shows them beside its full-attention layers."""

from rooflinec.model import window
from rooflinec.analyses import analysis
from rooflinec.analyses.derivations import budget_flags, over_budget
from rooflinec.cost.derive import crossing, limit_within_budget
from rooflinec.cost.evaluate import number
from rooflinec.model.ir import intensity
from rooflinec.model.ops import FORMULAS
from rooflinec.model.symbols import B, S, b, d_head, n_kv, n_q
from rooflinec.base.roofline import regime

# "kv": K and V reads only, the bytes that grow with S; "io": also reading Q and writing O.
COUNTS = {"kv": False, "io": True}
QUERIES = {"decode": 1, "prefill": S}


def _cost(phase: str, io: bool, causal_fraction, keys=S):
    # a prefill's queries see `keys` each and read all S keys between them
    return FORMULAS["attention"](B, QUERIES[phase], keys, n_q, n_kv, d_head, b, io=io,
                                 causal_fraction=window.causal_share(causal_fraction, keys),
                                 read_keys=S if phase == "prefill" else keys)


def _layer_kinds(model) -> list[tuple[str, object]]:
    """(kind, keys per query) of the attention layers the model has: full ones see S keys,
    windowed ones min(S, W)."""
    local = window.local_layers(model)
    kinds = [("full", S)] if local < model.n_layers else []
    return kinds + ([("windowed", window.keys())] if local else [])


def _case(ctx, params, phase: str, layers: str, keys, count: str, io: bool) -> dict:
    cost = _cost(phase, io, ctx.conventions.causal_fraction(phase), keys)
    expr = intensity(cost)
    points = []
    for s in params.contexts:
        value = number(expr, {**ctx.values, S: s})
        points.append({"context": s, "intensity": value,
                       "regime": {d.key: regime(value, ctx.ridge(d)) for d in ctx.devices}})
    limit, expired = limit_within_budget(expr, S)
    found = {d.key: crossing(expr, S, ctx.values, ctx.ridge(d)) for d in ctx.devices}
    return {"phase": phase, "layers": layers, "count": count, "flops": cost.flops, "bytes": cost.bytes,
            "formula": expr, "limit": limit, "depends_on_S": S in expr.free_symbols, "points": points,
            "crossing": {k: c.at for k, c in found.items()},
            **budget_flags(limit_expired=expired), **over_budget(found)}


@analysis("attention_intensity", "Attention intensity against context")
def attention_intensity(ctx, params) -> dict:
    cases = [_case(ctx, params, phase, layers, keys, count, io)
             for phase in ("decode", "prefill") for layers, keys in _layer_kinds(ctx.model)
             for count, io in COUNTS.items()]
    return {"contexts": params.contexts, "cases": cases,
            "causal_halving": ctx.conventions.causal_halving}
