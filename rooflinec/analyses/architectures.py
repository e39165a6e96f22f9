"""Architectures side by side: several models' decode steps on the study's devices across
contexts, so full attention, linear attention, state-space layers and sparse attention can be
read against each other: what one step reads (weights; the KV cache and recurrent state, per
sequence), and the batch where the step turns compute-bound (the serving section's overlapped
step bound, under lower.LEAST_WORK). Each model is costed by its own workbench over the study's
devices, dtype, conventions and quantization; the roofline charts place each step at its
byte-weighted intensity.
"""

from __future__ import annotations

from dataclasses import replace

from rooflinec.analyses import analysis
from rooflinec.cost import chartpoints
from rooflinec.cost import efficiency as E
from rooflinec.cost.workbench import Workbench
from rooflinec.model import kinds
from rooflinec.model.lower import LEAST_WORK
from rooflinec.model.symbols import B, S
from rooflinec.render import chartdata
from rooflinec.spec.load import load_model_ref

KEY = "architectures"


def _layers(model) -> list[dict]:
    """The model's mixer kinds and how many layers each takes."""
    return [{"kind": kind.name, "layers": n} for kind, n in kinds.counts(model, "mixer")]


def _step(bench, variant, dev, batch, context) -> dict:
    led = bench.ledger(bench.program("decode", variant, dev), dev, {B: batch, S: context})
    return {"device": dev.key, "time_s": led.time, "tokens_per_s": batch / led.time,
            "fits": bench.fits(dev, batch, context), "flops": led.flops, "bytes": led.bytes,
            "weight_bytes": led.traffic("weights"), "cache_bytes": led.traffic("kv_cache"),
            "cache_per_sequence": led.traffic("kv_cache") / batch,
            "intensity": led.flops / led.bytes}


def _crossing(bench, variant, dev, context) -> dict:
    c = E.crossover(bench.step_terms("decode", variant, dev, LEAST_WORK), context)
    return {"device": dev.key, "at": None if c.at is None else float(c.at), "first": c.first,
            "ceiling": c.ceiling, "max_batch": bench.largest_batch(dev, context)}


def _model_rows(ctx, index: int, ref: str, params) -> dict:
    model = load_model_ref(ctx.study.doc, ("analyses", KEY, "models", index), ref)
    bench = Workbench(replace(ctx.study, model=model))
    contexts = []
    for context in params.contexts:
        contexts.append({
            "context": context, "held_per_sequence": bench.kv_per_sequence(context),
            "steps": [{"batch": batch, "devices": [_step(bench, params.variant, d, batch, context)
                                                   for d in bench.devices]} for batch in params.batch],
            "crossings": [_crossing(bench, params.variant, d, context) for d in bench.devices]})
    return {"model": model.key, "name": model.name, "layers": model.n_layers, "mixers": _layers(model),
            "weight_bytes": bench.weight_bytes(), "contexts": contexts}


@analysis(KEY, "Architectures side by side: what a decode step reads, where it turns compute-bound",
          needs_model=False)
def architectures(ctx, params) -> dict:
    return {"variant": params.variant, "models": [_model_rows(ctx, i, ref, params)
                                                  for i, ref in enumerate(params.models)]}


@chartpoints.points(KEY)
def _points(section: dict) -> list[dict]:
    """Each model's decode step at its achieved rate (step FLOPs / step time) on each device."""
    return [chartpoints.point(f"S = {c['context']}", f"{m['model']}, B = {s['batch']}", d["intensity"],
                              device=d["device"], flops_per_s=d["flops"] / d["time_s"])
            for m in section["models"] for c in m["contexts"] for s in c["steps"] for d in s["devices"]]


def _reads_chart(index: int, section: dict, report: dict) -> dict | None:
    """Cache bytes one sequence moves per decode step (read, and a state written back) against
    S, a line per model and device (the throughput chart's form, read from the section's
    numbers): the KV cache's line climbs with S, a recurrent state's stays flat, a sparse
    layer's bends at its top-k."""
    devices = [d["key"] for d in report["devices"]]
    lines = []
    for m in section["models"]:
        for g, dev in enumerate(devices):
            cells = [next(d for d in c["steps"][0]["devices"] if d["device"] == dev) for c in m["contexts"]]
            lines.append({"label": m["model"], "group": g, "x": [c["context"] for c in m["contexts"]],
                          "y": [d["cache_per_sequence"] for d in cells], "fits": [d["fits"] for d in cells],
                          "crossing": None})
    if not lines:
        return None
    batch = section["models"][0]["contexts"][0]["steps"][0]["batch"]
    return {"kind": "throughput", "section": index, "name": f"{chartdata.slug(KEY)}-cache-read",
            "title": "Cache bytes one sequence moves per decode step against context S",
            "alt": "Bytes of KV cache, recurrent state and indexer keys one sequence moves per decode step "
                   "against the context, one line per model",
            "xlabel": "context S", "ylabel": f"cache bytes per sequence (B = {batch})",
            "groups": devices, "lines": lines}


# the section's line chart, registered where the charts of each section kind are found
chartdata.SWEEPS[KEY] = _reads_chart
