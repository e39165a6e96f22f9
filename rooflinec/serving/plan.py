"""Plan a deployment: search devices x deployments x storage formats x batch under a latency
target, and keep the Pareto frontier of tokens/s per GPU against tokens/s per user.

Why this shape: a step's cost is affine in a handful of step features for a fixed
(device, tp, formats) (`stepcost.StepModel`), so one step model prices every batch of that
triple in a single NumPy product; a mixture of experts under attention DP and EP adds the
busiest expert device's routed rows and experts read, still arrays over the batches
(`plan_step`, the planner's own reading of the step, shared over dp and ep; `plan_step.step_for`
is the seam). The search builds each step model once and evaluates all
batches, all pipeline depths and both figures (a bound and a prediction) as arrays.

Per configuration (batch B sequences in flight per pipeline stage, isl prompt and osl output
tokens, steady state as in `serving_model`: every step decodes the B sequences at mean
context isl + osl/2 and prefills the B/osl prompts that start per step):

- **prediction**: TPOT = that steady step under the calibration's parameters; TTFT = the front
  end's latency plus the step that prefills one whole prompt beside B - 1 decodes; tokens/s per
  user = 1 / TPOT; tokens/s per GPU = sequences in flight / TPOT / GPUs.
- **bound**: TPOT >= the pure decode step of the B sequences, each at context isl (the least
  any of them holds), under the overlapped step rule at the datasheet peaks,
  max(sum FLOPs / peak, sum bytes / bandwidth), no overheads, collectives hidden: every step
  that decodes B sequences does at least that work (each feature at most the real step's, and
  every coefficient non-negative). Every prediction is at least its bound (the steady step has
  more of every feature, efficiencies <= 1, overheads >= 0, a sum of per-kernel maxima >= the
  maximum of sums), so a configuration whose bound misses the SLO is pruned before it is
  predicted, and is counted as such.

Pipeline parallelism (pp stages, balanced, pp microbatches of B in the pipe): one token of a
sequence passes every stage in turn, so TPOT is the whole model's step at B plus pp - 1
activation transfers, pp x B sequences are in flight, and a device holds 1/pp of the weights
and the KV cache of its layers for all pp x B sequences (B sequences' worth of a whole
model's layers at tp). The bound keeps the whole step (stages are sequential for a token).

Attention DP (dp ranks of tp devices, each its own B sequences and KV cache) multiplies the
sequences in flight and the GPUs; EP splits the routed experts over the tp x dp devices
(tp x dp = moe_tp x ep, `Deployment.check`) and adds none. Tokens/s per GPU = B x dp x pp /
TPOT over tp x dp x pp GPUs. Disaggregated prefill : decode pools are `plan_disagg`'s, on the
same table (`mode`, `prefill_tp`, `prefill_workers`, `decode_workers`).

Storage formats (`Formats`): attention and dense weights, KV cache, and for a mixture of experts
the routed experts' own (gpt-oss: mxfp4 experts beside bf16 attention). Weights a device has no
tensor peak for (fp4 on Hopper) run weight-only, `Deployment.gemm_dtype`'s rule: GEMMs on the
bf16 peak (or the attention's fp8 for fp4 experts) dequantising every weight element they read,
the FLOPs counted in both figures, the bytes at the format; a row says so (`plan_step.compute_of`).

The deployment axes are data (`AXES`): each names what rules a degree out for a model,
whether the degree multiplies the sequences in flight and whether it multiplies the GPUs;
the search crosses their power-of-two degrees within the GPU budget, and the tables and JSON
show every axis by name. A new axis is one entry there and one use in
`plan_step.deployment_of`, where the degree reaches the cost layer's `Deployment`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import product

import numpy as np

from rooflinec.cost import collectives, parallel
from rooflinec.serving import disagg, metrics, plan_disagg, plan_step, simulator
from rooflinec.serving import serving_model as sm
from rooflinec.serving import stepcost as sc
from rooflinec.serving.workload import Lengths
from rooflinec.serving.workload import Workload as Load
from rooflinec.spec.load import DTYPE_BYTES

F = sc.FEATURES


# --- the deployment axes, as data -------------------------------------------------------------

@dataclass(frozen=True)
class Axis:
    name: str
    why: str                      # what the degree splits
    applies: object               # model -> bool: whether values past 1 are searched
    check: object                 # (model, degree) -> reason it is ruled out, or ""
    in_flight: bool = False       # the degree multiplies the sequences in flight (each its own batch)
    devices: bool = True          # the degree multiplies the GPUs (ep splits the tp x dp devices instead)


def _tp_check(model, n):
    try:
        parallel.check(model, n)
    except parallel.Unshardable as exc:
        return f"divisibility: tp {n}: {exc}"
    return ""


def _pp_check(model, n):
    return "" if model.n_layers % n == 0 else f"divisibility: pp {n} does not divide the {model.n_layers} layers"


def _ep_check(model, n):
    try:
        parallel.check_ep(model, n)
    except parallel.Unshardable as exc:
        return f"divisibility: ep {n}: {exc}"
    return ""


def _moe(model) -> bool:
    return getattr(model, "moe", None) is not None


AXES = (
    Axis("tp", "tensor parallel: heads, MLP width and vocabulary split", lambda m: True, _tp_check),
    Axis("dp", "attention data parallel: ranks with their own batch and KV cache, one MoE layer over all",
         _moe, lambda m, n: "", in_flight=True),
    Axis("ep", "expert parallel: routed experts split over the tp x dp devices", _moe, _ep_check, devices=False),
    Axis("pp", "pipeline parallel: layers split into stages", lambda m: True, _pp_check, in_flight=True),
)


def gpus_of(dep: dict) -> int:
    return math.prod(dep[a.name] for a in AXES if a.devices)


def deployments(model, gpus: int) -> list[dict]:
    """Every combination of the axes' power-of-two degrees whose GPUs fit the budget (ep at most
    the tp x dp devices it splits)."""
    values = [plan_step.powers(gpus) if axis.applies(model) else [1] for axis in AXES]
    out = [dict(zip((a.name for a in AXES), combo)) for combo in product(*values)]
    return [d for d in out if gpus_of(d) <= gpus and d["ep"] <= d["tp"] * d["dp"]]


def _deployment_check(model, dep: dict) -> str:
    """The axes' joint rule (tp x dp = moe_tp x ep, each expert's width divisible): `Deployment.check`."""
    try:
        plan_step.deployment_of(model, None, dep, "bf16", "bf16").check()
    except parallel.Unshardable as exc:
        return f"divisibility: {label(dep)}: {exc}"
    return ""


def label(dep: dict) -> str:
    """`tp2 dp4 ep8`; a disaggregated pair as `disagg 1 x tp4 : 2 x tp2` (prefill : decode workers)."""
    if dep.get("mode") == "disagg":
        return f"disagg {dep['prefill_workers']} x tp{dep['prefill_tp']} : {dep['decode_workers']} x tp{dep['tp']}"
    return " ".join(f"{a.name}{dep[a.name]}" for a in AXES if dep.get(a.name, 1) > 1) or "1 GPU"


# --- the target ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Slo:
    ttft_s: float = math.inf
    tpot_s: float = math.inf

    def tighter(self, factor: float) -> Slo:
        return Slo(self.ttft_s * factor, self.tpot_s * factor)


@dataclass(frozen=True)
class Formats:
    """One searched storage choice: attention and dense weights, KV cache, and the routed
    experts' weights (None: the weights'; a MoE checkpoint such as gpt-oss's keeps mxfp4 experts
    beside bf16 attention). A (weights, kv_cache) pair reads as one."""
    weights: str
    kv_cache: str
    experts: str | None = None

    def label(self) -> str:
        """`fp8/fp8`; per class `bf16+mxfp4e/bf16` (attention + routed experts / KV cache)."""
        return f"{self.weights}{'+' + self.experts + 'e' if self.experts else ''}/{self.kv_cache}"


def formats_of(model, choices) -> list[Formats]:
    """`choices` as Formats, the experts' format dropped where it is the weights' or the model
    has no routed experts, repeats removed (in order)."""
    out = []
    for c in choices:
        f = c if isinstance(c, Formats) else Formats(*c)
        if f.experts == f.weights or not _moe(model):
            f = Formats(f.weights, f.kv_cache)
        out.append(f)
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Workload:
    isl: int
    osl: int
    batches: tuple                # sequences in flight per stage, searched


# --- the search ----------------------------------------------------------------------------

@dataclass
class Result:
    """Arrays over the configurations that were predicted and met the SLO; the counts of
    every configuration left out, by reason."""

    rows: list = field(default_factory=list)          # per step model: dict of arrays
    pruned: dict = field(default_factory=dict)        # reason -> configurations
    searched: int = 0

    def count(self, reason: str, n: int) -> None:
        if n:
            self.pruned[reason] = self.pruned.get(reason, 0) + int(n)

    def table(self) -> dict:
        """The feasible configurations as one dict of equal-length arrays."""
        if not self.rows:
            return {k: np.array([]) for k in COLUMNS}
        return {k: np.concatenate([np.asarray(r[k]) for r in self.rows]) for k in COLUMNS}

    def add(self, device: str, dep: dict, fmt: Formats, batch, met, tpot, ttft, bound, in_flight_per_s,
            in_flight_bound_per_s, gpus: int, memory) -> None:
        """The configurations `met` of one deployment (every array over the batches)."""
        n = int(met.sum())
        self.rows.append({
            "device": np.full(n, device, dtype=object), **{k: np.full(n, dep[k], dtype=object if k == "mode" else int)
                                                             for k in DEPLOYMENT},
            "weights": np.full(n, fmt.weights, dtype=object), "experts": np.full(n, fmt.experts or "", dtype=object),
            "kv_cache": np.full(n, fmt.kv_cache, dtype=object),
            "batch": batch[met].astype(int), "gpus": np.full(n, gpus),
            "tpot_s": tpot[met], "ttft_s": ttft[met], "tpot_bound_s": bound[met],
            "per_gpu": (in_flight_per_s / gpus)[met], "per_user": (1 / tpot)[met],
            "per_gpu_bound": (in_flight_bound_per_s / gpus)[met], "memory_bytes": np.broadcast_to(memory, met.shape)[met]})


# a configuration's deployment: the axes, and for a disaggregated one its pools (plan_disagg)
AGGREGATED = {"mode": "agg", "prefill_tp": 0, "prefill_workers": 0, "decode_workers": 0}
DEPLOYMENT = (*(a.name for a in AXES), *AGGREGATED)
COLUMNS = ("device", *DEPLOYMENT, "weights", "experts", "kv_cache", "batch", "gpus", "tpot_s", "ttft_s",
           "tpot_bound_s", "per_gpu", "per_user", "per_gpu_bound", "memory_bytes")


def features(batch: np.ndarray, isl: int, osl: int) -> tuple[np.ndarray, np.ndarray]:
    """Step features [n, F] of the steady step and of the step that prefills a new prompt."""
    b = batch.astype(float)
    starts = b / osl
    steady = np.zeros((len(b), len(F)))
    steady[:, sc.ONE] = 1
    steady[:, sc.DECODES] = b
    steady[:, sc.CONTEXT] = b * (isl + osl / 2)
    steady[:, sc.TOKENS] = b + starts * isl
    steady[:, sc.LOGITS] = b + starts
    steady[:, sc.CHUNK_SQUARE] = starts * isl ** 2
    steady[:, sc.CHUNK_TOKENS] = starts * isl
    steady[:, sc.CHUNK_KEYS] = starts * isl
    steady[:, sc.CHUNKS] = starts
    first = np.zeros_like(steady)
    first[:, sc.ONE] = 1
    first[:, sc.DECODES] = b - 1
    first[:, sc.CONTEXT] = (b - 1) * (isl + osl / 2)
    first[:, sc.TOKENS] = b - 1 + isl
    first[:, sc.LOGITS] = b
    first[:, sc.CHUNK_SQUARE] = isl ** 2
    first[:, sc.CHUNK_TOKENS] = isl
    first[:, sc.CHUNK_KEYS] = isl
    first[:, sc.CHUNKS] = 1
    return steady, first


def bound_features(batch: np.ndarray, isl: int) -> np.ndarray:
    """Step features [n, F] of the least decode step of `batch` sequences: context isl each, no
    prefill (a decode worker's step, `plan_disagg.decode_features`, at isl)."""
    return plan_disagg.decode_features(batch.astype(float), isl)


def _hop_s(device, batch: np.ndarray, model) -> np.ndarray:
    """One pipeline hop: the activations of `batch` tokens over the scale-up link."""
    if device.link_bandwidth is None:
        raise sm.Unpredictable(f"{device.key} declares no interconnect for pipeline stages")
    link = collectives.Link(device.link, device.link_bandwidth, device.link_latency)
    return collectives.time(batch * model.d_model * DTYPE_BYTES[sm.ACTIVATION_DTYPE], 1, link)


def search(model, devices, gpus: int, work: Workload, slo: Slo, params_of, formats,
           disaggregated: bool = True) -> Result:
    """Every (device, deployment, formats, batch), aggregated and (`disaggregated`) as prefill
    and decode pools (`plan_disagg`); `params_of(device)` the calibration's
    `stepcost.Parameters`; `formats(device)` the storage choices to try (`Formats`, or
    (weights, kv_cache[, experts]) tuples). Weights a device has no tensor peak for run
    weight-only (`Deployment.gemm_dtype`: bf16 GEMMs dequantising them, the FLOPs counted)."""
    res = Result()
    batch = np.asarray(work.batches, dtype=float)
    xs = (*features(batch, work.isl, work.osl), bound_features(batch, work.isl))
    deps, steps = deployments(model, gpus), {}     # one step model per key (`cached_step`)
    for device in devices:
        pairs = formats_of(model, formats(device))
        for dep in deps:
            n = len(batch) * len(pairs)
            res.searched += n
            reason = next((r for a in AXES if (r := a.check(model, dep[a.name]))), "") or _deployment_check(model, dep)
            if reason:
                res.count(reason, n)
                continue
            for fmt in pairs:
                _evaluate(res, steps, model, device, dep, fmt, batch, xs, work, slo, params_of(device))
        if disaggregated:
            plan_disagg.search(res, steps, model, device, gpus, work, slo, params_of(device), pairs, batch,
                               {a.name: 1 for a in AXES})
    return res


def _evaluate(res, steps, model, device, dep, fmt, batch, xs, work, slo, p) -> None:
    n, (steady_x, first_x, least_x) = len(batch), xs
    reason = plan_step.no_peak(model, device, fmt)
    if reason:
        res.count(reason, n)
        return
    try:
        step = plan_step.cached_step(steps, model, device, dep, fmt.weights, fmt.kv_cache, fmt.experts, (work.isl, work.isl + work.osl))
    except sm.Unpredictable as exc:
        res.count(f"unpredictable: {exc}", n)
        return
    pp = dep["pp"]
    try:
        hops = (pp - 1) * _hop_s(device, batch, model) if pp > 1 else 0.0
    except sm.Unpredictable as exc:
        res.count(f"device: {exc}", n)
        return
    weight_b = plan_step.cached_weights(steps, step, pp)
    if weight_b >= device.capacity:
        res.count("memory: the weights alone exceed the device", n)
        return
    kv_seq = plan_step.cached_kv_per_token(steps, step) * (work.isl + work.osl / 2)
    memory = weight_b + batch * kv_seq      # pp x B sequences, 1/pp of the layers each
    fits = memory <= device.capacity
    res.count("memory: the KV cache of the batch does not fit beside the weights", (~fits).sum())
    bound = step.bound(least_x)
    early = fits & (bound > slo.tpot_s)
    res.count("bound: the TPOT bound misses the SLO", early.sum())
    keep = fits & ~early
    if not keep.any():
        return
    tpot = step.durations(steady_x, p) + hops
    ttft = step.durations(first_x, p) + hops + p.request_latency_s
    met = keep & (tpot <= slo.tpot_s) & (ttft <= slo.ttft_s)
    res.count(plan_step.misses(p, slo), (keep & ~met).sum())
    if met.any():
        inflight = batch * math.prod(dep[a.name] for a in AXES if a.in_flight)
        res.add(device.key, {**dep, **AGGREGATED}, fmt, batch, met, tpot, ttft, bound,
                inflight / tpot, inflight / bound, gpus_of(dep), memory)


# --- the frontier ----------------------------------------------------------------------------

def pareto(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point dominates (>= in both, > in one), both maximised;
    of equal points the first. Sorted by y descending."""
    order = np.lexsort((np.arange(len(x)), -x, -y))   # y desc, then x desc, then index
    best = np.maximum.accumulate(np.concatenate(([-np.inf], x[order])))[:-1]
    return order[x[order] > best]


# --- the simulator near the frontier -----------------------------------------------------------

SIMULATED_REQUESTS = 200_000    # a budget in requests over all the points simulated (not in seconds)


def simulate_points(model, devices: dict, rows: list, policy, params_of) -> list:
    """The frontier's configurations replayed by the serving simulator, in order until the
    request budget is spent: one tensor-parallel group as a closed loop of as many clients as
    sequences in flight (4C measured after C warm-up, fixed lengths; `metrics.summary`), a
    disaggregated pair by `disagg.simulate` (D x B clients over both pools, its own
    benchmark); per row its figures, or why not."""
    out, spent = [], 0
    for r in rows:
        dep, dev = r["deployment"], devices[r["device"]]
        disaggregated = dep["mode"] == "disagg"
        if not disaggregated and any(dep[a.name] > 1 for a in AXES if a.name != "tp"):
            out.append({"not_simulated": "the simulator runs one tensor-parallel group or a disaggregated pair "
                                         "(no pp, dp or ep)"})
            continue
        clients = r["batch"] * (dep["decode_workers"] if disaggregated else 1)
        cost = clients * (DISAGG_REQUESTS_PER_CLIENT if disaggregated else 5)
        if spent + cost > SIMULATED_REQUESTS:
            out.append({"not_simulated": f"past the budget of {SIMULATED_REQUESTS} simulated requests"})
            continue
        spent += cost
        try:
            out.append((_simulate_pair if disaggregated else _simulate_group)(model, dev, r, clients, policy,
                                                                              params_of(dev)))
        except sm.Unpredictable as exc:
            out.append({"not_simulated": str(exc)})
    return out


# disagg.simulate's benchmark is 22 C requests a run, up to two runs a bisection step and two
# for the rate matching: the budget charges that many per client
DISAGG_REQUESTS_PER_CLIENT = 22 * 2 * (disagg.HALVINGS + 2)


def _simulate_group(model, dev, r, clients, policy, params) -> dict:
    step = sc.build(sc.Deployment(model, dev, r["deployment"]["tp"], r["weights"], r["kv_cache"],
                                  experts=r.get("experts")))
    load = Load(Lengths(r["isl"], r["isl"]), Lengths(r["osl"], r["osl"]), 4 * clients, clients, clients, None)
    return metrics.summary(simulator.simulate(step, policy, load, params), r["gpus"])


def _simulate_pair(model, dev, r, clients, policy, params) -> dict:
    dep = r["deployment"]
    pools = disagg.Pools(*(sc.Deployment(model, dev, tp, r["weights"], r["kv_cache"], experts=r.get("experts"))
                           for tp in (dep["prefill_tp"], dep["tp"])),
                         dep["prefill_workers"], dep["decode_workers"])
    got = disagg.simulate(pools, policy, clients, r["isl"], r["osl"], params)
    return {"tpot_s": {"mean": got["tpot_s"]}, "ttft_s": {"mean": got["ttft_s"]},
            "tokens_per_s_per_gpu": got["tokens_per_s_per_gpu"], "limited_by": got["limited_by"]}
