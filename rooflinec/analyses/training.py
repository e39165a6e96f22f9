"""A training run: FLOPs per token two ways, MFU and HFU, and its timeline in chip time."""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from rooflinec.cost import efficiency as E
from rooflinec.model import params as P
from rooflinec.cost import training_step
from rooflinec.analyses import analysis
from rooflinec.cost.evaluate import number
from rooflinec.model.symbols import S
from rooflinec.base.units import parse_quantity
from rooflinec.base.errors import SpecError

N = sp.Symbol("N", positive=True, integer=True)   # every parameter, as the convention writes it
DAY = 86400


N_CONVENTIONS = {"all": "counted from the model spec, every parameter a token uses (PaLM's N)",
                 "non_embedding": "counted from the model spec, non-embedding parameters "
                                  "(Kaplan et al. 2020: no token or position table)",
                 "nanogpt": "counted from the model spec as nanoGPT's get_num_params counts: all "
                            "but the learned position table (a tied token table stays)",
                 "published": "as published (the study's published_parameters)"}


def _n(ctx, counted, params):
    """N of 6N: every parameter, the non-embedding ones, or a published count as written."""
    if params.parameters == "all":
        return counted.active
    if params.parameters == "non_embedding":
        return counted.non_embedding
    if params.parameters == "nanogpt":
        return counted.nanogpt
    if params.published_parameters is None:
        raise SpecError([ctx.problem(("analyses", "training", "parameters"), (
            "'published' needs the count: add published_parameters, e.g. 540.35e9"))])
    return sp.Integer(round(parse_quantity(params.published_parameters, "count")))


def _account_row(acc, value, tokens_per_s, chips, peak, policy) -> dict:
    model, hardware = value(acc.model), value(acc.hardware(policy))
    return {"name": acc.name, "formula": sp.expand(acc.model), "forward": value(acc.forward),
            "backward": value(acc.backward), "model": model, "hardware": hardware,
            "mfu": E.utilisation(tokens_per_s, model, chips, peak),
            "hfu": E.utilisation(tokens_per_s, hardware, chips, peak)}


def _policies(accounts, value, tokens_per_s, chips, peak) -> list[dict]:
    rows = []
    for policy, (_, _, meaning) in E.RECOMPUTE.items():
        per = [{"recomputed": value(a.recomputed(policy)), "hardware": value(a.hardware(policy)),
                "hfu": E.utilisation(tokens_per_s, value(a.hardware(policy)), chips, peak)}
               for a in accounts]
        rows.append({"policy": policy, "meaning": meaning, "accounts": per})
    return rows


def _timeline(params, tokens_per_s, chips, model_flops, peak) -> dict | None:
    if params.token_budget is None or params.spent is None:
        return None
    budget = parse_quantity(params.token_budget, "count")
    spent = [(seg["chips"], parse_quantity(seg["time"], "time")) for seg in params.spent]
    t = E.timeline(budget, tokens_per_s, chips, spent)
    return {"token_budget": budget, "ideal_days": t.ideal_s / DAY,
            "segments": [{"chips": c, "hours": s / 3600} for c, s in spent],
            "chip_days": t.chip_s / DAY, "spent_days": t.spent_s / DAY, "ratio": t.ratio,
            "effective_mfu": budget * model_flops / (t.chip_s * peak)}


def _plausible(ctx, rows, written, chips, device) -> None:
    """No run does more FLOPs per second than its chips' peak: MFU or HFU above 100% means
    the throughput (or the chip count, or the peak) is mistyped."""
    worst = max(rows, key=lambda r: r["hfu"])
    if worst["hfu"] > 1:
        which = "MFU" if worst["mfu"] > 1 else "HFU"
        share = worst["mfu"] if worst["mfu"] > 1 else worst["hfu"]
        raise SpecError([ctx.problem(("analyses", "training", "tokens_per_s"), (
            f"{written} on {chips} × {device.key} gives {which} {share:.0%} under the "
            f"{worst['name']} count, above the chips' peak; check the throughput's unit and "
            "value, the chip count and the device's peak"))])


@analysis("training", "Training efficiency: MFU and HFU")
def training(ctx, params) -> dict:
    device = ctx.device(("analyses", "training", "device"), params.device)
    peak = ctx.peak(device, "matrix")
    chips, seq = params.chips, params.sequence
    tokens_per_s = parse_quantity(params.tokens_per_s, "tokens_rate")
    policy = params.recompute
    counted = P.count(ctx.model)
    n_expr = _n(ctx, counted, params)
    n_params = int(number(n_expr, ctx.values))
    conv = replace(ctx.conventions, logits="all")   # the study's conventions, every token's logits
    program = ctx.program("prefill", tp=1, conventions=conv)   # the whole model's FLOPs
    values = {**ctx.values, S: seq}
    value = lambda e: float(number(sp.sympify(e).xreplace({N: n_expr}), values))  # noqa: E731
    palm = E.palm_account(N, model=ctx.model)
    accounts = [palm.without_attention(), palm, E.ledger_account(program)]
    rows = [_account_row(a, value, tokens_per_s, chips, peak, policy) for a in accounts]
    _plausible(ctx, rows, params.tokens_per_s, chips, device)
    terms = E.difference(E.palm_account(n_expr, model=ctx.model), accounts[2], n_expr)
    for t in terms:
        t["value"] = value(t["flops"])
    terms[0]["params_count"] = int(value(terms[0]["params"]))
    return {
        "device": {"key": device.key, "name": device.name, "peak": peak},
        "chips": chips, "tokens_per_s": tokens_per_s, "sequence": seq, "policy": policy,
        "policy_meaning": E.RECOMPUTE[policy][2], "n_params": n_params, "n_formula": n_expr,
        "n_convention": N_CONVENTIONS[params.parameters],
        "step": training_step.ledger(ctx, program, device, seq, policy),
        "program_conventions": list(conv.stated("prefill")), "variant": program.variant,
        "accounts": rows, "policies": _policies(accounts[1:], value, tokens_per_s, chips, peak),
        "difference": terms, "difference_total": rows[1]["model"] - rows[2]["model"],
        "timeline": _timeline(params, tokens_per_s, chips, rows[1]["model"], peak),
    }
