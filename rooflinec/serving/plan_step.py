"""The planner's step model for mixtures of experts, attention data parallelism (DP) and
expert parallelism (EP): one busiest device's step, vectorised over batches as
`stepcost.StepModel` is.

Why hand-written here: `stepcost.build` prices a MoE step under attention DP and EP too
(`stepcost.Routed`, asking `Deployment.busiest` as this module does), but the planner keeps
its own reading for what stepcost's does not do: the programs are read once per (device, tp,
formats) and shared by every dp and ep of the search (`memo`); the planner's step features
carry no per-sequence min(context, W), so windows are read as W or S over the contexts priced
(`_windowed`); the routed experts' GEMMs run at their own format's peak where the device lists
one (`experts_gemm_dtype`); with an all-to-all and no shared experts a MoE layer keeps only
o_proj's all-reduce (`_all_reduces`). `step_for` is the seam: once stepcost takes these,
`step_for` returns `stepcost.build`'s model and this module's `MoeStep` goes.

A `MoeStep` is two parts over one attention-DP rank's step features (`stepcost.FEATURES`):
- every op but the routed experts', read by `stepcost`'s own row readers from the lowered
  decode (and prefill attention) program at tp: affine, as `stepcost` prices a dense step,
  with its tensor-parallel all-reduces;
- the routed experts' ops, read from the program whose expert width is split over moe_tp
  (`Deployment.expert_tp`): per op, seconds per routed row (FLOPs and activations) and per
  expert read (weights). The busiest device, which the step waits for, serves the rows and
  reads the experts `Deployment.busiest` gives (the rule's one owner: the bound by pigeonhole,
  ceil(dp x M x k / ep) rows and ceil(k / ep) experts; the prediction under uniform routing at
  the deployment's imbalance factor, D(dp x M) / ep experts, clipped to the bound below);
  weights a device has no tensor peak for run weight-only (`Deployment.gemm_dtype`; the routed
  experts on their own format's peak where the device lists one, `experts_gemm_dtype`): their
  dequantisation FLOPs, per weight element read, go with the experts read, not the rows;
- with attention DP or EP, a dispatch and a combine all-to-all per MoE layer, the bytes one
  device sends (`Deployment.all_to_all_bytes`, uniform routing) over the link the workbench
  picks for the group (`Workbench.link`): in the prediction only (the bound hides
  collectives, as the dense bound does), each with the calibration's per-collective time.
Every rank is priced at the same features (the step waits for the busiest): the step that
prefills a prompt beside B - 1 decodes (the planner's TTFT) is priced as if every rank prefilled
one at once, which can only lengthen it. Tokens/s per GPU counts every rank: dp ranks each hold the batch (the planner's in-flight
count multiplies by dp) over tp x dp x pp devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import sympy as sp

from rooflinec.base import roofline
from rooflinec.cost import collectives, program_costs
from rooflinec.cost.deployment import Deployment, gemm_dtype, routed
from rooflinec.cost.workbench import Workbench
from rooflinec.model import quant
from rooflinec.model.window import local_layers
from rooflinec.model.symbols import B, M, S
from rooflinec.serving import serving_model as sm
from rooflinec.serving import stepcost as sc
from rooflinec.spec.load import DTYPE_BYTES

DISPATCH_AND_COMBINE = 2     # all-to-alls per MoE layer


@dataclass(frozen=True)
class DenseStep:
    """A `stepcost.StepModel` as the planner asks it: durations and the overlapped bound."""

    step: sc.StepModel

    @property
    def deployment(self) -> Deployment:
        return self.step.deployment

    def durations(self, x: np.ndarray, p: sc.Parameters) -> np.ndarray:
        return self.step.durations(x, p)

    def bound(self, x: np.ndarray) -> np.ndarray:
        """max(sum of compute, sum of memory) at the peaks, no overheads, collectives hidden."""
        return np.maximum((x @ self.step.compute.T).sum(axis=1), (x @ self.step.memory.T).sum(axis=1))


@dataclass(frozen=True)
class MoeStep:
    """The busiest device's step of a MoE deployment (see the module); arrays per routed op."""

    base: sc.StepModel            # every op but the routed experts', affine
    row_compute: np.ndarray       # [R] s per routed row at the peak
    row_memory: np.ndarray        # [R] s per routed row's activations
    expert_memory: np.ndarray     # [R] s per expert's weights read
    expert_compute: np.ndarray    # [R] s per expert read dequantising its weights (weight-only; else 0)
    a2a_s: np.ndarray             # [2] s of the step's all-to-alls at 0 tokens, per token per rank
    a2a_count: int

    @property
    def deployment(self) -> Deployment:
        return self.base.deployment

    def durations(self, x: np.ndarray, p: sc.Parameters) -> np.ndarray:
        rows, experts = self.deployment.busiest(x[:, sc.TOKENS], bound=False)
        compute = (rows[:, None] * self.row_compute + experts[:, None] * self.expert_compute) / p.compute_fraction
        memory = (rows[:, None] * self.row_memory + experts[:, None] * self.expert_memory) \
            / (p.bandwidth_fraction * p.expert_bandwidth_fraction)     # as stepcost.Routed
        a2a = self.a2a_s[0] + self.a2a_s[1] * x[:, sc.TOKENS] + self.a2a_count * p.per_collective_s
        return self.base.durations(x, p) + np.maximum(compute, memory).sum(axis=1) + a2a

    def bound(self, x: np.ndarray) -> np.ndarray:
        rows, experts = self.deployment.busiest(x[:, sc.TOKENS], bound=True)
        compute = ((x @ self.base.compute.T).sum(axis=1) + rows * self.row_compute.sum()
                   + experts * self.expert_compute.sum())
        memory = ((x @ self.base.memory.T).sum(axis=1) + rows * self.row_memory.sum()
                  + experts * self.expert_memory.sum())
        return np.maximum(compute, memory)


def misses(p: sc.Parameters, slo) -> str:
    """Why predictions miss `slo` (a pruning reason): the front end's fitted latency alone past
    the TTFT target is said apart, since no deployment meets it (`--request-latency` sets it for
    a harness without that front end)."""
    if p.request_latency_s > slo.ttft_s:
        return (f"prediction: the front end's latency alone, {1e3 * p.request_latency_s:.3g} ms, misses the "
                "TTFT target (--request-latency sets it)")
    return "prediction: misses the SLO"


def step_for(dep: Deployment, memo: dict | None = None, contexts: tuple | None = None):
    """The planner's step model of `dep`: stepcost's for a dense tensor-parallel deployment,
    `MoeStep` for a mixture of experts (the seam the module describes). `memo` keeps the
    programs' readings of one model between calls (per device, tp and formats: every dp and ep
    of a tp shares them). `contexts`: the fewest and the most tokens a sequence the step model
    prices holds (the planner's isl and isl + osl), which price a window outside them exactly
    (`_windowed`; a dense model with windows is read here the same way: stepcost's readers put
    them on window features the planner's do not fill)."""
    sm.checked(dep)
    memo = {} if memo is None else memo
    if getattr(dep.model, "moe", None) is None:
        if dep.attention_dp > 1 or dep.moe_ep > 1:
            raise sm.Unpredictable("attention DP and EP are searched for mixtures of experts only")
        if local_layers(dep.model):   # the planner's features keep no per-sequence min(S, W): read here
            return DenseStep(_dense_windowed(dep, memo, contexts))
        try:
            return DenseStep(sc.build(dep))
        except sc.Windowed:     # another minimum of the context (the keys sparse attention selects)
            return DenseStep(_dense_windowed(dep, memo, contexts))
    return build_moe(dep, memo, contexts)


def _dense_windowed(dep: Deployment, memo: dict, contexts: tuple | None) -> sc.StepModel:
    """`stepcost.build`'s step model of a dense deployment, its windows read by `_windowed`."""
    compute, memory, names, kernels = _base(dep, memo, contexts)
    return sc.StepModel(dep, compute, memory, names, dep.model.n_layers, *_all_reduces(dep), kernels=kernels)


def _base(dep: Deployment, memo: dict, contexts: tuple | None):
    """`_base_rows` once per device, tp, formats and context range."""
    dev = dep.device
    return _memo(memo, ("base", dev.key, dev.file, dep.tp, dep.weights, dep.kv_format, dep.compute, contexts),
                 lambda: _base_rows(dep, contexts))


def experts_gemm_dtype(dep: Deployment) -> str:
    """The dtype the routed experts' GEMMs run at: their own format's where the device lists a
    tensor peak for it, else the rest's (`Deployment.gemm_dtype`, dequantising into it: W4A8 for
    nvfp4 experts beside fp8 on Hopper); `compute` where given. Pricing nvfp4 experts beside
    bf16 attention on Blackwell at the attention's dtype would put the bound above a kernel the
    device runs (its fp4 peak)."""
    if dep.compute is None and dep.device is not None and dep.device.peak("matrix", dep.experts_format) is not None:
        return dep.experts_format
    return dep.gemm_dtype


def compute_of(dep: Deployment) -> dict:
    """What a report says of the GEMMs: their dtype, the routed experts' where it differs, and
    the weight-only statement (None where nothing is dequantised)."""
    moe = getattr(dep.model, "moe", None) is not None
    experts = experts_gemm_dtype(dep) if moe else dep.gemm_dtype
    said = [quant.dequantisation(dep.weights, dep.gemm_dtype)]
    if moe and dep.experts_format != dep.weights:
        said.append(quant.dequantisation(dep.experts_format, experts).replace("weights ", "routed experts ", 1))
    weight_only = "; ".join(filter(None, said)) or None
    return {"gemm_dtype": dep.gemm_dtype, "experts_gemm_dtype": experts if experts != dep.gemm_dtype else None,
            "weight_only": weight_only}


def _peaks(dev, dtype):
    matrix, vector = dev.peak("matrix", dtype), dev.peak("vector", sm.ACTIVATION_DTYPE)
    if matrix is None:
        raise sm.Unpredictable(f"{dev.key} lists no tensor peak for {dtype}")
    if vector is None:
        raise sm.Unpredictable(f"{dev.key} lists no vector peak (compute.vector) for norms and softmax")
    return matrix, vector


def _program(dep, tp, phase, compute=None):
    """One device's `phase` program at tp, every class at its format, the dequantisation FLOPs
    of GEMMs at `compute` (the deployment's gemm_dtype by default) substituted."""
    at = Deployment(dep.model, dep.device, tp, dep.weights, dep.kv_cache, experts=dep.experts,
                    compute=compute or dep.compute)
    return program_costs.symbolic_ops(at, phase, dep.device, DTYPE_BYTES[sm.ACTIVATION_DTYPE], dep.formats())


def build_moe(dep: Deployment, memo: dict, contexts: tuple | None = None) -> MoeStep:
    """The coefficients of a MoE deployment's busiest-device step (see the module)."""
    model, dev = dep.model, dep.device
    compute, memory, names, kernels = _base(dep, memo, contexts)
    coll, link = _all_reduces(dep)
    base = sc.StepModel(dep, compute, memory, names, model.n_layers, coll, link, kernels=kernels)
    routed_rows = _memo(memo, ("routed", dev.key, dev.file, dep.expert_tp, dep.weights, dep.experts_format,
                               dep.kv_format, dep.compute), lambda: _routed(dep))
    a2a_s, a2a_count = _all_to_alls(dep)
    return MoeStep(base, *routed_rows, a2a_s, a2a_count)


def _memo(memo: dict, key, make):
    """memo[key], made once; a failure too (a device without a peak fails every dp and ep alike)."""
    if key not in memo:
        try:
            memo[key] = make()
        except Exception as exc:   # re-raised below, each time the key is asked
            memo[key] = _Failed(exc)
    if isinstance(memo[key], _Failed):
        raise memo[key].exc
    return memo[key]


@dataclass(frozen=True)
class _Failed:
    exc: Exception


def _base_rows(dep: Deployment, contexts: tuple | None = None):
    """Seconds per unit of each step feature at the peaks, [K, F] compute and memory, of every
    op but the routed experts' (`stepcost`'s row readers), the ops' names, and the kernels a
    step launches (`stepcost.launches`, the routed experts' among them)."""
    dev = dep.device
    matrix, vector = _peaks(dev, dep.gemm_dtype)
    rows, names = [], []
    decode = _program(dep, dep.tp, "decode")
    for op, flops, traffic in _windowed(decode, contexts):
        if not routed(op):
            rows.append(sc._decode_row(op, flops, traffic))
            names.append(op.name)
    for op, flops, traffic in _windowed(_program(dep, dep.tp, "prefill"), contexts):
        if op.category == "attention":
            rows.append(sc._chunk_row(op, flops, traffic))
            names.append(f"{op.name} (prompt chunks)")
    peaks = np.array([[matrix if unit == "matrix" else vector] for unit, _, _ in rows])
    return (roofline.compute_time(np.array([f for _, f, _ in rows]), peaks),
            roofline.transfer_time(np.array([m for _, _, m in rows]), dev.bandwidth), tuple(names),
            sc.launches(decode, dep.model))


def _windowed(ops, contexts: tuple | None):
    """`ops` with each window's Min(W, S) (a sliding window; the keys sparse attention selects)
    as W where every context priced holds at least W tokens (decodes from isl on; a prompt of
    isl as one chunk from position 0, whose W S - W^2 / 2 attended keys are then affine in its
    tokens), as S where none holds more than W (isl + osl <= W): exact either way. A window
    inside the range is not affine in the step features: why not, naming the fix. An op costing
    per token of context outside attention (DSA's indexer top-k) is read as attention is."""
    def window(*args):
        w = next((a for a in args if a.is_number), None)
        if w is None or len(args) != 2 or S not in set().union(*(a.free_symbols for a in args)):
            raise sc.NotAffine(f"a minimum of {args} in the step")
        if contexts is not None and w <= contexts[0]:
            return w
        if contexts is not None and w >= contexts[1]:
            return next(a for a in args if not a.is_number)
        raise sc.NotAffine(f"a window of {w} tokens (sliding, or the keys sparse attention selects) lies inside "
                           f"the contexts priced ({'isl %d to isl + osl %d' % contexts if contexts else 'none given'}): "
                           f"give --isl of at least {w}, or isl + osl of at most {w}")

    def fix(e):
        e = sp.sympify(e)
        return e.replace(sp.Min, window) if e.has(sp.Min) else e

    def per_context(op, exprs):
        if op.category != "attention" and any(sp.expand(e).coeff(B).has(S) for e in exprs):
            return replace(op, category="attention")   # stepcost places B x S as context only there
        return op
    out = []
    for op, f, t in ops:
        f, t = fix(f), {c: fix(e) for c, e in t.items()}
        out.append((per_context(op, [f, *t.values()]), f, t))
    return out


def _routed(dep: Deployment):
    """Per routed op, seconds per row (FLOPs at the experts' peak, activations) and per expert
    read (weights, and their dequantisation FLOPs where weight-only), from the program with each
    expert's width over moe_tp: FLOPs and activations are M x k rows, the weights (and what
    dequantises them) E(1 - (1 - k/E)^M) experts' (k of them at M = 1)."""
    k, dev, dtype = dep.model.moe.top_k, dep.device, experts_gemm_dtype(dep)
    matrix, vector = _peaks(dev, dtype)
    units, per_row, per_expert = [], [], []
    for op, flops, traffic in _program(dep, dep.expert_tp, "decode", dtype):
        if not routed(op):
            continue
        acts = sum((e for cls, e in traffic.items() if cls != "weights"), sp.Integer(0))
        units.append(matrix if op.unit == "matrix" else vector)
        row_flops = _per_token(flops, op)
        per_row.append((row_flops / k, _per_token(acts, op) / k))
        dequant = float(sp.sympify(flops).subs(M, 1)) - row_flops   # what the k experts of one token add
        per_expert.append((float(sp.sympify(traffic.get("weights", 0)).subs(M, 1)) / k, max(dequant, 0.0) / k))
    return (roofline.compute_time(np.array([f for f, _ in per_row]), np.array(units)),
            roofline.transfer_time(np.array([a for _, a in per_row]), dev.bandwidth),
            roofline.transfer_time(np.array([w for w, _ in per_expert]), dev.bandwidth),
            roofline.compute_time(np.array([f for _, f in per_expert]), np.array(units)))


def _per_token(expr, op) -> float:
    """The coefficient of M: the per-token part of a routed op's cost. Terms over the distinct
    experts read, E(1 - (1 - k/E)^M) (weight-only dequantisation), are the per-expert part."""
    expr = sp.expand(sp.sympify(expr))
    expert_terms = [t for t in sp.Add.make_args(expr) if any(M in e.exp.free_symbols for e in t.atoms(sp.Pow))]
    poly = sp.Poly(expr - sp.Add(*expert_terms), M)
    if poly.degree() > 1:
        raise sc.NotAffine(f"routed op {op.name}: FLOPs or activations not linear in the tokens")
    return float(poly.coeff_monomial(M))


def _all_reduces(dep: Deployment):
    """The tensor-parallel all-reduces as `stepcost.build` predicts them (`stepcost.one_shot`,
    affine in tokens); the planner's bound (`DenseStep.bound`, `MoeStep.bound`) leaves them out."""
    if dep.tp == 1:
        return 0, np.zeros(2)
    dev = dep.device
    if dev.link_bandwidth is None:
        raise sm.Unpredictable(f"{dev.key} declares no interconnect bandwidth for tensor parallelism")
    coll = dep.all_reduces()
    moe = dep.model.moe
    if dep.all_to_all and not moe.shared_experts and dep.model.block != "parallel":
        # the combine all-to-all returns whole rows: a MoE layer's only all-reduce is o_proj's
        # (deployment._partial_outputs), a dense layer keeps its down projection's too
        coll = dep.model.n_layers + moe.dense_layers(dep.model.n_layers)
    return coll, sc.one_shot(dep, coll)


def _all_to_alls(dep: Deployment):
    """The step's dispatch and combine all-to-alls over the group's link: seconds at 0 tokens and
    per token per rank, and their count (none without attention DP or EP)."""
    if not dep.all_to_all:
        return np.zeros(2), 0
    moe = dep.model.moe
    layers = DISPATCH_AND_COMBINE * moe.moe_layers(0, dep.model.n_layers)
    try:
        link = Workbench.of(dep.model).link(dep.device, dep.group, "the experts' all-to-all")
    except Exception as exc:   # DeviceLacks: the device names no link for the group
        raise sm.Unpredictable(str(exc)) from None
    sent = dep.all_to_all_bytes(1, DTYPE_BYTES[sm.ACTIVATION_DTYPE])["sent"]
    at = [layers * collectives.time(sent * t, 1, link) for t in (0, 1)]
    return np.array([at[0], at[1] - at[0]]), layers


# --- one step model per key, for the search ---------------------------------------------

def powers(limit: int) -> list[int]:
    """The power-of-two degrees up to `limit`."""
    return [2 ** i for i in range(int(math.log2(max(1, limit))) + 1)]


def deployment_of(model, device, dep: dict, weights: str, kv: str, experts: str | None = None) -> Deployment:
    """The cost layer's deployment object of one searched point (expert tp fills tp x dp / ep;
    `experts` the routed experts' format, None: the weights')."""
    return Deployment(model, device, dep["tp"], weights, kv, attention_dp=dep["dp"], moe_ep=dep["ep"], pp=dep["pp"],
                      experts=experts)


def no_peak(model, device, fmt) -> str:
    """Why `device` cannot run the GEMMs of `fmt` (a `plan.Formats`), not even weight-only
    (`Deployment.gemm_dtype`), or ""."""
    dep = deployment_of(model, device, {"tp": 1, "dp": 1, "ep": 1, "pp": 1}, fmt.weights, fmt.kv_cache, fmt.experts)
    for stored, dtype in ((fmt.weights, dep.gemm_dtype), (dep.experts_format, experts_gemm_dtype(dep))):
        if device.peak("matrix", dtype) is None:
            return (f"device: {device.key} has no tensor peak for {dtype}"
                    + (f" (the weight-only GEMMs of {stored} weights)" if dtype != stored else ""))
    return ""


def cached_step(steps: dict, model, device, dep, weights, kv, experts=None, contexts=None):
    """One step model per (model, device, deployment but pp, formats): pp and batches share it."""
    key = (device.key, device.file, tuple((k, v) for k, v in dep.items() if k != "pp"), weights, kv, experts)
    if key not in steps:
        try:
            steps[key] = step_for(deployment_of(model, device, {**dep, "pp": 1}, weights, kv, experts), steps,
                                  contexts)
        except sm.Unpredictable as exc:
            steps[key] = exc
        except Exception as exc:   # sympy cannot read a step as affine
            what = " ".join(str(exc).split())[:100]
            steps[key] = sm.Unpredictable(f"the step model is not affine for this model ({type(exc).__name__}: {what})")
    found = steps[key]
    if isinstance(found, Exception):
        raise found
    return found


def cached_weights(steps: dict, step, pp: int) -> int:
    """Weight bytes on the busiest device at pp stages (`Deployment.weight_bytes`), once per
    split and weight format (no device's figure, nor dp but through moe_tp, enters it)."""
    d = step.deployment
    return _memo(steps, ("weights", d.tp, d.moe_ep, d.expert_tp, pp, d.weights, d.experts_format),
                 lambda: replace(d, pp=pp).weight_bytes())


def cached_kv_per_token(steps: dict, step) -> float:
    """KV-cache bytes one token keeps on the busiest device (`Deployment.kv_per_token`), once
    per split and KV format."""
    d = step.deployment
    return _memo(steps, ("kv", d.tp, d.moe_ep, d.pp, d.kv_format), lambda: float(d.kv_per_token()))
