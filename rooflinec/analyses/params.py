"""Parameter count per component, from the architecture, with the three totals."""

import math

from rooflinec.model import params as P
from rooflinec.model import quant
from rooflinec.analyses import analysis
from rooflinec.cost.evaluate import number
from rooflinec.model.symbols import L


def _row(ctx, c) -> dict:
    return {"name": c.name, "group": c.group, "per": c.per, "repeat": c.repeat,
            "copies": int(number(c.repeat, ctx.values)), "count": int(number(c.count, ctx.values)),
            "matmul": c.matmul, "embedding": c.embedding, "note": c.note}


def _total(ctx, label: str, expr, meaning: str, experts=0) -> dict:
    """One total; its bytes at the weights' format (the study's quantization, else dtype),
    `experts` of its parameters (the routed experts' matrices) at theirs."""
    n, routed = int(number(expr, ctx.values)), int(number(experts, ctx.values))
    stored = (n - routed) * ctx.values[quant.b_w] + routed * ctx.values[quant.b_we]
    return {"label": label, "formula": expr, "count": n, "bytes": math.ceil(stored),
            "meaning": meaning}


def _routed(counted, active: bool = False):
    """The routed experts' weight matrices (biases left out) in a total; k of E if `active`."""
    c = next((c for c in counted.components if c.name == "experts"), None)
    if c is None:
        return 0
    matrices = (c.per - c.biases) * c.repeat
    return matrices * c.active_per / c.per if active else matrices


@analysis("params", "Parameters")
def params(ctx, _params) -> dict:
    counted = P.count(ctx.model)
    rows = [_row(ctx, c) for c in counted.components]
    total = sum(r["count"] for r in rows)
    for r in rows:
        r["share"] = r["count"] / total
    totals = [
        _total(ctx, "total", counted.total, "every parameter: what a checkpoint stores, the N of 6N",
               _routed(counted)),
        _total(ctx, "non-embedding", counted.non_embedding,
               "without the token-embedding table and learned positions (Kaplan et al. 2020; "
               "nanoGPT leaves out only learned positions, keeping a tied table)", _routed(counted)),
        _total(ctx, "in matmuls", counted.matmul,
               "weights of matrix products every token pays for (norms, biases and an untied "
               "input table left out; routed experts: k of E)", _routed(counted, True)),
    ]
    if ctx.model.moe is not None:
        totals.insert(1, _total(ctx, "active", counted.active,
                                "parameters one token uses: k of the E routed experts, the rest whole, "
                                "the input table included (a model card's active count is often the "
                                "'in matmuls' row, which leaves it out)", _routed(counted, True)))
    return {"rows": rows, "totals": totals, "per_layer": counted.per_layer,
            "per_layer_count": int(number(counted.per_layer, ctx.values)),
            "layers": int(number(L, ctx.values))}
