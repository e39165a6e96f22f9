"""One device's share of a model split over tp devices: memory fit, step time with its
collectives (at the least time any correct algorithm takes, `collectives.least_time`, as every
roofline figure that may be read as a bound) beside the kernels, max(kernels, collectives)
(`roofline.combine`), tokens/s per GPU, and the smallest tp that fits."""

from __future__ import annotations

import sympy as sp

from rooflinec.cost import collectives as C
from rooflinec.cost import parallel as par
from rooflinec.analyses import analysis
from rooflinec.base.roofline import combine
from rooflinec.model.symbols import B, S

OVERLAP = ("a step takes max(kernels, collectives), whatever parallel.overlap says: an engine may "
           "overlap communication with compute, so the sum would bound nothing")


def _memory(ctx, device, tp: int, workloads) -> dict:
    weights, kv = ctx.weight_bytes(tp=tp), ctx.kv_per_token(tp=tp)
    need = [weights + w["batch"] * ctx.kv_per_sequence(w["context"], tp=tp) for w in workloads]
    return {"tp": tp, "weights": weights, "kv_per_token": kv, "needed": need,
            "fits": [n <= device.capacity for n in need],
            "kv_replicated": par.kv_replicated(ctx.model, tp)}


def _step(ctx, device, phase: str, variant: str, tp: int, workload: dict) -> dict:
    w = {B: workload["batch"], S: workload["context"]}
    program = ctx.program(phase, variant, device, tp)
    led = ctx.ledger(program, device, w)
    whole = ctx.ledger(ctx.program(phase, variant, device, 1), device, w).flops
    comm = ctx.communication(program, device, w, algorithm=C.LEAST)   # a roofline step: the least time
    compute = sum(r.roof.time for r in led.rows if r.roof.bound == "compute")
    memory = led.time - compute
    comm_s = sum(c.time for c in comm)
    step = combine(led.time, comm_s, True)     # a figure read as a bound: the collectives beside the kernels
    dep = ctx.deployment(tp)
    # the group that steps together, tp x attention_dp devices; each attention-DP rank its own batch
    gpus = dep.group
    tokens = workload["batch"] * (1 if phase == "decode" else workload["context"]) * dep.attention_dp
    return {"tp": tp, "flops": led.flops, "duplicated_flops": led.flops * tp - whole,
            "duplicated_share": (led.flops * tp - whole) / whole, "compute_s": compute, "memory_s": memory, "comm_s": comm_s, "step_s": step,
            "gpus": gpus, "tokens_per_s_group": tokens / step,
            "tokens_per_s_per_device": tokens / step / gpus, "comm_share": comm_s / step,
            "latency_bound": [c.collective.name for c in comm if c.latency_bound],
            "collectives": [{"name": c.collective.name, "kind": c.collective.kind,
                             "count": c.count, "payload": c.payload, "volume": c.volume,
                             "link": c.link.name, "bandwidth_s": c.bandwidth_s,
                             "latency_s": c.latency_s, "time_s": c.time,
                             "formula": sp.sympify(c.collective.volume_under(C.LEAST))} for c in comm]}


@analysis("parallel_view", "Per device under tensor parallelism")
def parallel_view(ctx, params) -> dict:
    for i, tp in enumerate(params.tp):
        ctx.check_tp(tp, ("analyses", "parallel_view", "tp", i))
    devices = []
    for dev in ctx.devices_named(("analyses", "parallel_view", "devices"), params.devices):
        memory = [_memory(ctx, dev, tp, params.workloads) for tp in sorted(params.tp)]
        smallest = [next((m["tp"] for m in memory if m["fits"][i]), None)
                    for i in range(len(params.workloads))]
        steps = [{"phase": phase, "workload": w,
                  "rows": [_step(ctx, dev, phase, params.variant, tp, w) for tp in sorted(params.tp)]}
                 for phase in params.phases for w in params.workloads]
        link = {"name": dev.link or None, "bandwidth": dev.link_bandwidth,
                "latency": dev.link_latency, "domain": dev.link_domain}
        devices.append({"key": dev.key, "name": dev.name, "capacity": dev.capacity, "link": link,
                        "memory": memory, "smallest_tp": smallest, "steps": steps})
    return {"variant": params.variant, "dtype": ctx.dtype, "tps": sorted(params.tp),
            "weights_format": ctx.weights_format(), "kv_format": ctx.storage("kv_cache"),
            "workloads": params.workloads, "overlap": OVERLAP, "devices": devices,
            "kv_heads": ctx.model.n_kv_heads, "pp": ctx.parallel.pp, "ep": ctx.parallel.ep,
            **({"attention_dp": ctx.parallel.attention_dp} if ctx.parallel.attention_dp > 1 else {}),
            "experts": ctx.model.moe.experts if getattr(ctx.model, "moe", None) else None}
