"""Serving bounds: the most a device can do when this model decodes and prefills.

A step's lower bound is max(compute, memory) over the whole step, where compute sums each
op's FLOPs over its unit's peak and memory is every byte over the bandwidth: perfect overlap
of ops, so no kernel can beat it (decode_view sums per-op maxima instead, a tighter estimate
that assumes no overlap between ops). Memory fit counts weights and the KV cache only.
"""

from __future__ import annotations

from rooflinec import efficiency as E
from rooflinec import kvcache, piecewise, window
from rooflinec.analyses import analysis
from rooflinec.cost.roofline import bandwidth_utilisation
from rooflinec.symbols import B, S
from rooflinec.units import parse_quantity


def _terms(ctx, phase: str, variant: str) -> dict:
    """Each device's step terms for one phase (the workbench locates a missing peak)."""
    return {dev.key: ctx.step_terms(phase, variant, dev) for dev in ctx.devices}


def _bound(terms, batch, context) -> dict:
    roof = terms.roof(batch, context)
    return {"compute_s": roof.t_compute, "memory_s": roof.t_memory, "time_s": roof.time,
            "bound": roof.bound, "tokens_per_s": batch / roof.time}


def _size(terms, batch, context) -> tuple[float, float]:
    point = {B: batch, S: context}
    return piecewise.value_at(terms.flops, point), piecewise.value_at(terms.bytes, point)


def _steps(ctx, terms, batches, contexts) -> list[dict]:
    rows, weights = [], ctx.weight_bytes()
    for batch in batches:
        for context in contexts:
            # FLOPs and bytes are the device's to time, not to change: any device's terms do
            flops, nbytes = _size(terms[ctx.devices[0].key], batch, context)
            kv = batch * ctx.kv_per_sequence(context)
            need = weights + kv     # what ctx.memory_needed gives, the weights counted once
            rows.append({"batch": batch, "context": context, "flops": flops, "bytes": nbytes,
                         "kv_bytes": kv, "memory_needed": need,
                         "devices": [{"device": d.key, "fits": need <= d.capacity,
                                      **_bound(terms[d.key], batch, context)} for d in ctx.devices]})
    return rows


def _crossover(terms, context):
    """Where decode turns compute-bound; terms a declared op made piecewise in B (min, max,
    ceil) are not lines, so no meeting point is claimed for them."""
    import sympy as sp
    try:
        return E.crossover(terms, context)
    except sp.PolynomialError:
        return E.Crossover(context, None, None, None)


def _crossovers(ctx, terms, contexts) -> list[dict]:
    rows = []
    for context in contexts:
        per = []
        for d in ctx.devices:
            c = _crossover(terms[d.key], context)
            fit = ctx.largest_batch(d, context)
            at_fit = _bound(terms[d.key], fit, context) if fit >= 1 else None
            per.append({"device": d.key, "at": None if c.at is None else float(c.at),
                        "first": c.first, "ceiling": c.ceiling, "max_batch": fit,
                        "at_max_batch": at_fit, "at_one": _bound(terms[d.key], 1, context),
                        "size_at_max": _size(terms[d.key], max(fit, 1), context),
                        "reachable": c.first is not None and c.first <= fit})
        flops, nbytes = _size(terms[ctx.devices[0].key], 1, context)
        rows.append({"context": context, "flops_one": flops, "bytes_one": nbytes, "devices": per})
    return rows


def _prefill(ctx, prompts, variant: str) -> list[dict]:
    terms = _terms(ctx, "prefill", variant)
    rows = []
    for prompt in prompts:
        flops, nbytes = _size(terms[ctx.devices[0].key], 1, prompt)
        rows.append({"prompt": prompt, "flops": flops, "bytes": nbytes,
                     "devices": [{"device": d.key, **_bound(terms[d.key], 1, prompt)}
                                 for d in ctx.devices]})
    return rows


def _measured(ctx, terms, entries) -> list[dict]:
    rows = []
    for i, m in enumerate(entries):
        dev = ctx.device(("analyses", "serving", "measured", i, "device"), m.get("device"))
        t = parse_quantity(m["time_per_token"], "time")
        flops, nbytes = _size(terms[dev.key], m["batch"], m["context"])
        bound = _bound(terms[dev.key], m["batch"], m["context"])
        rows.append({"device": dev.key, "batch": m["batch"], "context": m["context"],
                     "time_s": t, "tokens_per_s": m["batch"] / t, "source": m["source"],
                     "bound_s": bound["time_s"], "of_bound": bound["time_s"] / t,
                     "mbu": bandwidth_utilisation(nbytes, t, dev.bandwidth),
                     "mfu": flops / t / ctx.peak(dev, "matrix")})
    return rows


@analysis("serving", "Serving bounds")
def serving(ctx, params) -> dict:
    weight_bytes, kv_token = ctx.weight_bytes(), ctx.kv_per_token()
    variant = params.variant
    terms = _terms(ctx, "decode", variant)
    contexts = params.contexts
    windowed = window.local_layers(ctx.model) > 0
    return {
        "weight_bytes": weight_bytes, "weights_format": ctx.storage("weights"),
        "kv_format": ctx.storage("kv_cache"), "kv_formula": ctx.kv_formula, "kv_per_token": kv_token,
        "kv_sequence_formula": kvcache.sequence_formula(ctx.model) if windowed else None,
        "kv_per_sequence": [{"context": s, "bytes": ctx.kv_per_sequence(s)} for s in contexts],
        "memory": [{"device": d.key, "capacity": d.capacity, "weights_fit": weight_bytes <= d.capacity,
                    "kv_tokens": E.fit_tokens(d.capacity, weight_bytes, kv_token)}
                   for d in ctx.devices],
        "steps": _steps(ctx, terms, params.batch, contexts),
        "crossovers": _crossovers(ctx, terms, contexts),
        "experts": getattr(ctx.model, "moe", None) is not None,   # a memory term concave in B
        "prefill": _prefill(ctx, params.prompts or contexts, variant), "variant": variant,
        "measured": _measured(ctx, terms, params.measured or []),
    }
