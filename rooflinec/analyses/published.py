"""Published training efficiencies, as data: recomputed where the paper gives the inputs.

A row is recomputed from what it publishes (the table `RECOMPUTE` is keyed by that input):
achieved FLOP/s per chip over the device's peak, or a throughput in tokens/s times the model
FLOPs per token (6N, plus 12·L·H·Q·T when a model spec and sequence length are given) over
chips x peak. A row that publishes only a percentage is shown as quoted.
"""

from __future__ import annotations

from rooflinec.cost import efficiency as E
from rooflinec.model import params as P
from rooflinec.model import symbols as sym
from rooflinec.model import symbol_table
from rooflinec.analyses import analysis
from rooflinec.base.errors import SpecError
from rooflinec.cost.evaluate import number
from rooflinec.spec.load import load_model_ref
from rooflinec.base.units import parse_quantity

ROWS = ("analyses", "published_efficiency", "rows")
CHIPS = 1   # a throughput is per chip unless the row says (the schema's default too)


def _achieved(ctx, row, path, peak) -> dict:
    achieved = parse_quantity(row["achieved"], "flops_rate")
    return {"value": achieved / peak, "achieved": achieved}


def _flops_per_token(ctx, row, path) -> tuple[float, float, str]:
    """(model FLOPs per token, N, where N came from) from a model spec or a published N."""
    if "model" in row:
        model = load_model_ref(ctx.study.doc, path + ("model",), row["model"])
        values = {**symbol_table.model_values(model), sym.S: row.get("sequence", 1)}
        n_expr = P.count(model).active   # a mixture of experts: the k routed experts a token uses
        acc = E.palm_account(n_expr, model=model)
        acc = acc if "sequence" in row else acc.without_attention()
        return float(number(acc.model, values)), int(number(n_expr, values)), model.name
    if "sequence" in row:
        raise SpecError([ctx.problem(path + ("sequence",), "the attention term 12·L·H·Q·T needs "
                                     "the architecture; give `model` (a spec under models/)")])
    n = parse_quantity(row["params"], "count")
    return float(E.palm_account(n).without_attention().model), n, "published count"


def _throughput(ctx, row, path, peak) -> dict:
    if "model" not in row and "params" not in row:
        raise SpecError([ctx.problem(path, "a throughput row needs N: give `params` (the "
                                     "published count) or `model` (a spec under models/)")])
    rate = parse_quantity(row["tokens_per_s"], "tokens_rate")
    chips = row.get("chips", CHIPS)
    flops, n, n_from = _flops_per_token(ctx, row, path)
    return {"value": E.utilisation(rate, flops, chips, peak), "tokens_per_s": rate,
            "chips": chips, "flops_per_token": flops, "n_params": n, "n_from": n_from,
            "attention_term": "sequence" in row}


# the input a row publishes -> how it is recomputed
RECOMPUTE = {"achieved": _achieved, "tokens_per_s": _throughput}


def _row(ctx, i: int, row: dict) -> dict:
    path = ROWS + (i,)
    given = [k for k in RECOMPUTE if k in row]
    out = {k: row.get(k) for k in ("name", "year", "hardware", "counts", "counting", "source")}
    quoted = row.get("quoted")
    out["quoted"] = quoted if isinstance(quoted, list) or quoted is None else [quoted, quoted]
    if len(given) > 1:
        raise SpecError([ctx.problem(path, f"give one of {', '.join(RECOMPUTE)}, not both")])
    if not given:
        if quoted is None:
            raise SpecError([ctx.problem(path, "a row needs `quoted` (the published percentage) "
                                         f"or an input to recompute it from: {', '.join(RECOMPUTE)}")])
        return {**out, "kind": "quoted", "value": None}
    device = ctx.device(path + ("device",), row.get("device"))
    peak = ctx.peak(device, "matrix")
    return {**out, "kind": given[0], "device": device.key, "peak": peak,
            **RECOMPUTE[given[0]](ctx, row, path, peak)}


@analysis("published_efficiency", "Published training efficiencies")
def published_efficiency(ctx, params) -> dict:
    rows, problems = [], []
    for i, row in enumerate(params.rows):
        try:
            rows.append(_row(ctx, i, row))
        except SpecError as exc:
            problems.extend(exc.problems)
    if problems:
        raise SpecError(problems)
    return {"rows": rows}
