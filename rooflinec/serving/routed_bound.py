"""The step bound of a mixture of experts, at the least-work routing (plain tp, attention DP or EP).

The serving section's step of a mixture of experts is the deployment's sharded program: its
(busiest) expert rank reads the expected distinct experts under uniform routing, and under
attention DP or EP its dispatch and combine all-to-alls move their uniform-routing bytes. Both
are expectations, so that step is not a bound: a routing that sends every token to the same k
experts reads k (Qwen3-30B-A3B at batch 16: 8 experts, not the expected 82.4 of 128). Here the
routed experts cost what any routing must: the simulator's step model at its bound
(`stepcost.Routed` at BOUND: the busiest rank serves at least ceil(dp x tokens x k / ep) routed
rows and reads at least ceil(k / ep) experts; a step routed all local moves nothing, so no
all-to-all). The other kernels are the same step model's; the step is bounded by the
overlapped rule, max(sum of compute, sum of memory), at the datasheet peaks, and by the
tensor-parallel collectives the serving bound times (`program_costs.collectives_s` at
collectives.LEAST: the least time any correct algorithm takes, as the section's), overlapped
with the kernels as the section's are (`roofline.combine`: max(kernels, collectives), what an
engine overlapping them approaches).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rooflinec.base import roofline
from rooflinec.cost import collectives, program_costs
from rooflinec.model.symbols import B, S
from rooflinec.serving import stepcost as sc

ROUTING = ("least-work routing (the simulator's bound): the busiest expert rank serves "
           "ceil(dp x tokens x k / ep) routed rows and reads ceil(k / ep) experts, no all-to-all "
           "moves a token; each step's FLOPs, bytes and intensity are that routing's")
MOST = 1 << 20     # the largest batch the compute-bound crossing is looked for at


def _decode(batch: int, context: int, window: int | None) -> np.ndarray:
    """Features of a step decoding `batch` sequences at `context` each, no prefill (windowed
    layers' min(context, W) by `stepcost.attend`, the features' one owner)."""
    x = np.zeros((1, len(sc.FEATURES)))
    none = np.zeros(0, np.int64)
    sc.attend(x[0], window, np.full(batch, context - 1, np.int64), none, none)
    x[0, sc.ONE], x[0, sc.TOKENS], x[0, sc.LOGITS] = 1, batch, batch
    return x


def _prompt(prompt: int, window: int | None) -> np.ndarray:
    """Features of a step prefilling one prompt as one chunk, its last token's logits."""
    x = np.zeros((1, len(sc.FEATURES)))
    sc.attend(x[0], window, np.zeros(0, np.int64), np.array([0]), np.array([prompt]))
    x[0, sc.ONE], x[0, sc.TOKENS], x[0, sc.LOGITS] = 1, prompt, 1
    return x


def _step(model: sc.StepModel, x: np.ndarray, workload: dict, tokens: int, bytes_per_element: int,
          routed: sc.Routed | None = None) -> dict:
    """The bounded step (the module) and its own FLOPs and bytes (`counts`): the kernels' seconds
    times the peaks they were timed at, so bytes / bandwidth is memory_s."""
    kernels = x @ model.compute.T
    compute, memory = float(kernels.sum()), float((x @ model.memory.T).sum())
    flops = float((kernels[0] * model.peaks).sum())
    routed = routed or model.routed
    if routed is not None:
        rows_c, rows_m, _ = routed.parts(x, True)     # the least-work routing, no all-to-all
        compute, memory = compute + float(rows_c.sum()), memory + float(rows_m.sum())
        flops += float((rows_c[0] * routed.peaks).sum())
    dep = model.deployment
    _, comm = program_costs.collectives_s(dep, dep.device, workload, tokens, bytes_per_element, dep.formats(),
                                          collectives.LEAST)
    time = roofline.combine(max(compute, memory), comm, True)
    bound = "collectives" if comm > max(compute, memory) else "compute" if compute >= memory else "memory"
    return {"compute_s": compute, "memory_s": memory, "comm_s": comm, "time_s": time, "bound": bound,
            "counts": (flops, memory * dep.device.bandwidth)}


def decode(model: sc.StepModel, batch: int, context: int, bytes_per_element: int) -> dict:
    """One attention-DP rank's decode step of `batch` sequences at `context`, bounded (the module);
    tokens/s are the group's (every rank steps such a batch)."""
    out = _step(model, _decode(batch, context, model.window), {B: batch, S: context}, batch, bytes_per_element)
    return {**out, "tokens_per_s": batch * model.deployment.attention_dp / out["time_s"]}


def prefill(model: sc.StepModel, prompt: int, bytes_per_element: int) -> dict:
    """One prompt's prefill alone, bounded (the module): the time to first token's bound. Alone
    in the group too: the other attention-DP ranks send the MoE layers nothing, so the busiest
    expert rank serves ceil(prompt x k / ep) rows (`Deployment.busiest` at attention DP 1), not
    the dp prompts' a step of every rank prefilling one would route."""
    lone = None if model.routed is None else replace(model.routed,
                                                     deployment=replace(model.deployment, attention_dp=1))
    out = _step(model, _prompt(prompt, model.window), {B: 1, S: prompt}, prompt, bytes_per_element, lone)
    return {**out, "prompt_tokens_per_s": prompt / out["time_s"]}


def compute_bound_from(model: sc.StepModel, context: int) -> int | None:
    """The least batch whose bounded decode step's compute reaches its memory (bisection:
    compute grows faster in the batch than memory, whose weights are read once), or None below
    MOST."""
    def turned(batch):
        step = decode(model, batch, context, 2)
        return step["compute_s"] >= step["memory_s"]
    if not turned(MOST):
        return None
    lo, hi = 0, MOST          # turned(hi), not turned(lo) (batch 0 reads the weights alone)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if turned(mid) else (mid, hi)
    return hi


def _timed(row: dict, step: dict) -> dict:
    """A section's row (a step or a prefill) with the bounded step: its times on the device,
    its own FLOPs and bytes on the row (one owner of both: the step model that timed it)."""
    times = {k: v for k, v in step.items() if k != "counts"}
    flops, nbytes = step["counts"]
    return {**row, "flops": flops, "bytes": nbytes, "devices": [{**row["devices"][0], **times}]}


def section(section: dict, model: sc.StepModel, bytes_per_element: int) -> dict:
    """The serving section with its step and TTFT bounds at the least-work routing (the
    module), each step's FLOPs and bytes that same step's (so its intensity too); memory fit
    and sizes unchanged. One device: serve's."""
    out = {**section, "routing": ROUTING}
    out["steps"] = [_timed(row, decode(model, row["batch"], row["context"], bytes_per_element))
                    for row in section["steps"]]
    crossovers = []
    for row in section["crossovers"]:
        d, context = row["devices"][0], row["context"]
        first = compute_bound_from(model, context)
        top = decode(model, d["max_batch"], context, bytes_per_element) if d["max_batch"] >= 1 else None
        one = decode(model, 1, context, bytes_per_element)
        counts = {"size_at_max": list(top.pop("counts"))} if top else {}
        flops_one, bytes_one = one.pop("counts")
        crossovers.append({**row, "flops_one": flops_one, "bytes_one": bytes_one,
                           "devices": [{**d, "at": None, "ceiling": None, "first": first,
                                        "reachable": first is not None and first <= d["max_batch"],
                                        "at_one": one, "at_max_batch": top, **counts}]})
    out["crossovers"] = crossovers
    out["prefill"] = [_timed(row, prefill(model, row["prompt"], bytes_per_element)) for row in section["prefill"]]
    return out
