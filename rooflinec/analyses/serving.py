"""Serving bounds: the most a device can do when this model decodes and prefills.

A step's lower bound is max(compute, memory) over the whole step, where compute sums each
op's FLOPs over its unit's peak and memory is every byte over the bandwidth: perfect overlap
of ops, so no kernel can beat it (decode_view sums per-op maxima instead, a tighter estimate
that assumes no overlap between ops). A tensor-parallel step's collectives take the least
time any correct algorithm does (`collectives.least_time`), beside the kernels: max(kernels,
collectives) whatever `parallel.overlap` says (`roofline.combine`: an engine may overlap
them, so the sum bounds nothing). Memory fit counts weights and the KV cache only.
Every figure here is a bound, so the steps are lowered under lower.LEAST_WORK (the masked
half skipped, last-token logits, one QKV GEMM), whatever conventions the study's ledgers state.
"""

from __future__ import annotations
import sympy as sp

from rooflinec.cost import collectives as C
from rooflinec.cost import efficiency as E
from rooflinec.cost import kvcache, piecewise
from rooflinec.model import window
from rooflinec.analyses import analysis
from rooflinec.base.roofline import bandwidth_utilisation, combine
from rooflinec.model.lower import LEAST_WORK
from rooflinec.model.symbols import B, S
from rooflinec.base.units import parse_quantity


class _Step:
    """One device's step of one phase in the study's deployment: the two overlapped terms
    (`terms`) and the collectives its `parallel` block adds, each at the least time any
    correct algorithm takes (`collectives.least_time`: one latency, the all-reduce's payload
    once), not the ring's expected time: a bound's."""

    def __init__(self, ctx, phase: str, variant: str, device):
        self.terms = ctx.step_terms(phase, variant, device, LEAST_WORK)
        self.program = ctx.program(phase, variant, device, conventions=LEAST_WORK)
        self.ctx, self.device = ctx, device

    def comm(self, batch, context) -> float:
        if not self.program.collectives:
            return 0.0
        rows = self.ctx.communication(self.program, self.device, {B: batch, S: context}, algorithm=C.LEAST)
        return float(sum(c.time for c in rows))


def _terms(ctx, phase: str, variant: str) -> dict:
    """Each device's step for one phase under the bound's conventions (the workbench locates
    a missing peak or link)."""
    return {dev.key: _Step(ctx, phase, variant, dev) for dev in ctx.devices}


def _bound(step: _Step, batch, context) -> dict:
    """The step's bound: the overlapped terms and the collectives beside them, whatever the
    study's `parallel.overlap` (`roofline.combine`: an engine may overlap them, so only the max
    bounds the step)."""
    roof, comm = step.terms.roof(batch, context), step.comm(batch, context)
    time = combine(roof.time, comm, True)
    return {"compute_s": roof.t_compute, "memory_s": roof.t_memory, "comm_s": comm, "time_s": time,
            "bound": dominant(roof, comm), "tokens_per_s": batch * step.ctx.parallel.attention_dp / time}


def dominant(roof, comm: float) -> str:
    """The step's largest term by name: the roofline's ("compute" or "memory"), or
    "collectives" where the collectives take longer than either."""
    return "collectives" if comm > max(roof.t_compute, roof.t_memory) else roof.bound


def _size(step: _Step, batch, context) -> tuple[float, float]:
    point = {B: batch, S: context}
    return piecewise.value_at(step.terms.flops, point), piecewise.value_at(step.terms.bytes, point)


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
    try:
        return E.crossover(terms, context)
    except sp.PolynomialError:
        return E.Crossover(context, None, None, None)


def _crossovers(ctx, terms, contexts) -> list[dict]:
    rows = []
    for context in contexts:
        per = []
        for d in ctx.devices:
            c = _crossover(terms[d.key].terms, context)
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


def _prompt_rate(bound: dict, prompt: int) -> dict:
    """A prefill's rate as prompt tokens/s (B = 1: the prompt over its TTFT), never 1 / TTFT
    under the decode rows' name."""
    rate = bound.pop("tokens_per_s") * prompt
    return {**bound, "prompt_tokens_per_s": rate}


def _prefill(ctx, prompts, variant: str) -> list[dict]:
    terms = _terms(ctx, "prefill", variant)
    rows = []
    for prompt in prompts:
        flops, nbytes = _size(terms[ctx.devices[0].key], 1, prompt)
        rows.append({"prompt": prompt, "flops": flops, "bytes": nbytes,
                     "devices": [{"device": d.key, **_prompt_rate(_bound(terms[d.key], 1, prompt), prompt)}
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


def _deployment(ctx) -> dict | None:
    """The group the study's `parallel` block describes, whose step every figure here is
    (tokens/s are the group's: its devices step together); None on one device."""
    p, dep = ctx.parallel, ctx.deployment()
    if dep.group == 1:
        return None
    # tokens/s are the group's: each of the attention_dp ranks steps its own batch
    moe = getattr(ctx.model, "moe", None) is not None    # moe_tp: each expert's width, as the deployment splits it
    return {"gpus": dep.group, "tp": p.tp, "ep": p.ep, "attention_dp": p.attention_dp,
            **({"moe_tp": dep.expert_tp} if moe else {}),
            "collectives": "beside the kernels, max(kernels, collectives): a bound whatever "
                           "parallel.overlap says (an engine may overlap communication with compute)"}


@analysis("serving", "Serving bounds")
def serving(ctx, params) -> dict:
    weight_bytes, kv_token = ctx.weight_bytes(), ctx.kv_per_token()
    variant = params.variant
    terms = _terms(ctx, "decode", variant)
    contexts = params.contexts
    windowed = window.local_layers(ctx.model) > 0
    return {
        "weight_bytes": weight_bytes, "weights_format": ctx.weights_format(),
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
        "conventions": [{"name": name, "choice": text} for name, text in LEAST_WORK.stated("prefill")],
        "deployment": _deployment(ctx),
        "measured": _measured(ctx, terms, params.measured or []),
    }
