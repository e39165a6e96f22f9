"""A published large training run from its stated configuration: FLOPs per iteration, the
1F1B pipeline bubble, tensor-, pipeline- and data-parallel communication over the devices'
links, and the TFLOP/s per GPU and MFU that leaves, beside what the paper reports.

The estimate runs every GEMM at the tensor peak, so its figures are ceilings: "overlapped"
hides all communication behind compute, "serial" adds it to the step."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from rooflinec.cost import collectives as C
from rooflinec.cost import parallel as par
from rooflinec.analyses import analysis
from rooflinec.base.errors import SpecError
from rooflinec.model.params import count
from rooflinec.spec.load import load_model_ref
from rooflinec.model.symbol_table import model_values

ACT_BYTES = 2    # bf16 activations, activation gradients and weight gradients


def _recompute(row: dict) -> bool:
    """Full recomputation: as written, else Megatron-LM's Table 1 (on) for a gpt run, off for a model."""
    return row.get("recompute", "gpt" in row)


@dataclass(frozen=True)
class Arch:
    layers: int
    hidden: int
    heads: int
    params: int
    model_flops: int      # per iteration, no recomputation
    hardware_flops: int   # per iteration, recomputation included
    counting: str


def _gpt(row: dict) -> Arch:
    """Megatron-LM's GPT configuration (Narayanan et al. 2021): its own parameter and FLOP counts."""
    g, batch, s = row["gpt"], row["batch"], row["sequence"]
    l, h, v = g["layers"], g["hidden"], g["vocab"]
    params = 12 * l * h * h * (1 + sp.Rational(13, 12 * h) + sp.Rational(v + s, 12 * l * h))
    model = par.megatron_flops(batch, s, l, h, v, recompute=False)
    hardware = par.megatron_flops(batch, s, l, h, v) if _recompute(row) else model
    return Arch(l, h, g["heads"], int(params), model, hardware,
                "Narayanan et al. 2021, eq. (3): F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) with full "
                "recomputation; model FLOPs without it, 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))")


def _spec(ctx, row: dict, path: tuple) -> Arch:
    """A model spec: PaLM's model FLOPs, 6N + 12·L·H·Q·T per token, N the parameters a token
    uses (a mixture of experts' k routed experts); memory holds all of them."""
    model = load_model_ref(ctx.study.doc, path + ("model",), row["model"])
    counted, values = count(model), model_values(model)
    n, active = int(counted.total.subs(values)), int(counted.active.subs(values))
    s = row["sequence"]
    attention = 4 * model.n_layers * model.n_heads * model.head_dim * s    # forward, per token
    flops = (6 * active + 3 * attention) * row["batch"] * s
    # full recomputation runs the layers' forward again (Megatron-LM checkpoints each layer's
    # input), not the embedding or the LM head
    layers = int(counted.in_layers.subs(values))
    hardware = flops + (2 * layers + attention) * row["batch"] * s if _recompute(row) else flops
    which = "from the model spec" if active == n else f"active per token of {n:,}, from the model spec"
    return Arch(model.n_layers, model.d_model, model.n_heads, n, flops, hardware,
                f"PaLM appendix B: 6N + 12·L·H·Q·T per token, N = {active:,} {which}")


def _communication(ctx, device, row: dict, arch: Arch, m: int) -> list[dict]:
    tp, pp, dp, micro = row["tp"], row["pp"], row["dp"], row["microbatch"]
    act = micro * row["sequence"] * arch.hidden * ACT_BYTES
    per_layer = 4 + (2 if _recompute(row) else 0)   # fwd 2, bwd 2, recomputed 2
    groups = [("tensor-parallel all-reduces", "all_reduce", tp, tp, act, per_layer * -(-arch.layers // pp) * m),
              ("pipeline sends (activations forward, gradients backward)", "p2p", pp, tp * pp, act, 2 * m),
              ("data-parallel gradient all-reduce", "all_reduce", dp, tp * pp * dp,
               arch.params / (tp * pp) * ACT_BYTES, 1)]
    out = []
    for name, kind, n, span, payload, times in groups:
        if n > 1:
            link = ctx.link(device, span, f"the {name} of run '{row['name']}'")
            # the least time any correct algorithm takes: the step is a ceiling's (MFU <=)
            out.append({"name": name, "kind": kind, "devices": n, "count": times, "payload": payload,
                        "link": link.name, "time_s": times * float(C.least_time(kind, payload, n, link))})
    return out


def _memory(row: dict, arch: Arch, m: int, recompute: bool) -> dict:
    """Bytes per device on the first pipeline stage, which holds min(p, m) microbatches'
    activations under 1F1B: bf16 weights and gradients, Adam state, ZeRO across dp."""
    tp, pp, zero = row["tp"], row["pp"], row["zero"]
    states = par.training_memory(arch.params / (tp * pp), ACT_BYTES, ACT_BYTES, row["dp"], zero)
    policy = "full" if recompute else row.get("activations", "none")
    one = lambda p: par.activation_bytes(row["sequence"], row["microbatch"],  # noqa: E731
                                         arch.hidden, arch.heads, 1, tp, p)
    kept = min(pp, m) * -(-arch.layers // pp) * one(policy)
    if recompute:   # one layer's full activations exist while it reruns
        kept += one(row.get("activations", "none"))
    total = sum(states.values()) + kept
    return {**states, "activations": kept, "total": total, "zero": zero,
            "policy": par.ACTIVATIONS[policy]}


def _rates(arch: Arch, gpus: int, seconds: float, peak: float) -> dict:
    return {"tflops_per_gpu": arch.hardware_flops / (gpus * seconds) / 1e12,
            "mfu": arch.model_flops / (gpus * seconds * peak),
            "hfu": arch.hardware_flops / (gpus * seconds * peak)}


def _with_degrees(ctx, row: dict, path: tuple) -> dict:
    """The run with the degrees it leaves out taken from the study's `parallel` block; the
    block's microbatch count m, where written, sets the microbatch size batch / (dp x m),
    else a microbatch is one sequence."""
    p = ctx.parallel
    row = {"tp": p.tp, "pp": p.pp, "dp": p.dp, "zero": p.zero, **row}
    if "microbatch" not in row and "microbatches" not in ctx.study.parallel:
        row["microbatch"] = 1
    if "microbatch" not in row:
        per_replica = row["batch"] // row["dp"]
        if row["batch"] % row["dp"] or per_replica % p.microbatches:
            raise SpecError([ctx.problem(path + ("batch",), (
                f"batch {row['batch']} does not split into {p.microbatches} microbatches on each of "
                f"{row['dp']} data-parallel replicas; set the run's microbatch size"))])
        row["microbatch"] = per_replica // p.microbatches
    return row


def _run(ctx, row: dict, path: tuple) -> dict:
    row = _with_degrees(ctx, row, path)
    device = ctx.device(path + ("device",), row.get("device"))
    peak = ctx.peak(device, "matrix")
    tp, pp, dp, micro = row["tp"], row["pp"], row["dp"], row["microbatch"]
    if row["batch"] % (dp * micro):
        raise SpecError([ctx.problem(path + ("batch",), f"batch {row['batch']} is not a whole "
                                     f"number of microbatches of {micro} over dp {dp}")])
    m, gpus = row["batch"] // (dp * micro), tp * pp * dp
    arch = _gpt(row) if "gpt" in row else _spec(ctx, row, path)
    compute = arch.hardware_flops / (gpus * peak)
    pipelined = compute * (m + pp - 1) / m          # 1F1B: the bubble idles (p-1)/(m+p-1)
    comm = _communication(ctx, device, row, arch, m)
    step = pipelined + sum(c["time_s"] for c in comm)
    recompute = _recompute(row)
    memory = _memory(row, arch, m, recompute)
    return {"name": row["name"], "source": row["source"], "device": device.key, "peak": peak,
            "gpus": gpus, "tp": tp, "pp": pp, "dp": dp, "microbatches": m, "microbatch": micro,
            "batch": row["batch"], "sequence": row["sequence"], "counting": arch.counting,
            "n_params": arch.params, "model_flops": arch.model_flops,
            "hardware_flops": arch.hardware_flops, "compute_s": compute,
            "bubble": float(par.bubble(pp, m)), "pipelined_s": pipelined, "communication": comm,
            "step_s": step, "overlapped": _rates(arch, gpus, pipelined, peak),
            "serial": _rates(arch, gpus, step, peak), "published": row.get("published", {}),
            "recompute": recompute, "memory": memory, "capacity": device.capacity, "fits": memory["total"] <= device.capacity}


@analysis("training_at_scale", "Training at scale: pipeline bubble, communication, MFU",
          needs_model=False)
def training_at_scale(ctx, params) -> dict:
    path = ("analyses", "training_at_scale", "runs")
    return {"runs": [_run(ctx, row, path + (i,)) for i, row in enumerate(params.runs)]}
