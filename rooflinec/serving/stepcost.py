"""One engine step's time for a fixed deployment, as affine coefficients derived once.

For a fixed model, device, tensor parallelism and storage formats, every kernel's FLOPs and
bytes in a step are affine in a handful of step features: the tokens the linear layers see,
the sequences that get logits, the decodes and the sum of their contexts, and for the prompt
chunks scheduled (a chunk of c tokens after p already in the cache) the sums of
(p + c)^2 - p^2, c and p + c. The coefficients come from the lowered programs' sympy costs
(`program_costs.symbolic_ops`: the decode program for every kernel but prefill attention, the
prefill program's attention for the chunks), read off the polynomials once; a step is then
a matrix product in NumPy. A kernel's time is max(FLOPs / (compute fraction x peak),
bytes / (bandwidth fraction x bandwidth)), as in `serving_model`; the step adds a fixed time
per layer, per kernel launched (`StepModel.kernels`), per step and per running request (host-side scheduling, sampling, detokenising)
and the tensor-parallel all-reduces: predicted one-shot over the scale-up link (`one_shot`:
2(n-1)/n of the payload and one latency each, as `serving_model` and the shipped calibration
time them); at the bound (`Parameters` at BOUND) the serving bound's collectives at the
least time any correct algorithm takes (`bound_link`, `collectives.least_time`: the
all-reduce's payload once, one latency, on the link the workbench picks for the group),
beside the kernels: the bound step is max(kernels, collectives) (`roofline.combine`), what an
engine overlapping communication with compute approaches; the prediction adds them after.

A prompt chunk's attention: FLOPs from the prefill program's S^2 term as (p + c)^2 - p^2
(the causal count of c queries after p keys), its query and output traffic over c tokens,
and its KV traffic over the p + c keys it reads.

Windowed layers (sliding or chunked, `model/window.py`) read min(S, W) keys per sequence, which
no sum over the batch's contexts gives; their terms are affine in min(S, W) itself, so it is
read as a symbol K and the windowed layers' coefficients go on features of their own
(`attend`): a decode's min(context, W) summed over the decodes; a chunk's differences f(p + c)
- f(p) of the prefill program's S K and K^2 terms (its causal count S K - K^2/2, telescoping
over chunks) and the keys its queries' windows read, min(p + c, W - 1 + c). A run of decode
steps ends where a decode's context reaches W (`growth`), so within a run every feature grows
linearly and a recorded schedule re-times in closed form. Each step's cost is exactly the
lowered programs' at its contexts; a bound stays a bound (the least-work programs').

A mixture of experts' routed experts are not affine in the step's tokens: the weights read are
those of the distinct experts the step touches, E(1 - (1 - k/E)^M) under uniform routing, and
with attention DP or expert parallelism the busiest expert rank's routings take a ceiling. So
the routed-expert kernels (`Routed`) keep their cost per routed row and per distinct expert
read, and each step's rows and experts are evaluated exactly in NumPy from its tokens:

- every attention-DP rank steps a batch like this one (the simulator replays one rank, the
  clients split evenly over the ranks), so a MoE layer sees dp x tokens, routed k ways over
  moe_ep expert ranks; the step waits for the busiest expert rank, whose rows and experts are
  `Deployment.busiest`'s (the rule's one owner);
- the bound (`Parameters` at BOUND) takes what any routing must cost (pigeonhole rows,
  ceil(k / ep) experts); the dispatch and combine all-to-alls can move nothing (a step routed
  all local), so they are left out;
- a routed-expert kernel reads its experts' weights at a bandwidth fraction of its own
  (`Parameters.expert_bandwidth_fraction`, beside the step's): a decode step's grouped GEMM
  reads each expert the step touches as one small matrix (a few routed rows each, Qwen3-235B-A22B
  at 16 sequences: 128 rows over about 82 of its 128 experts per layer), a short tile loop per
  expert with its block scales, not one long stream, so the fraction it sustains is its kernel's
  (Triton's fused MoE in vLLM and SGLang, CUTLASS grouped GEMMs in TensorRT-LLM), not the dense
  GEMMs'. Without it the fit put that slowness into the host's time per layer (vLLM's MoE group:
  314 us a layer against its dense group's 76 us), which a dense model of the engine then
  borrowed (`calibration.resolve`; bench/simulator.py: Llama-3.1-70B left out, TPOT 24.8% -> 15.2%);
- the prediction takes uniform routing at the deployment's imbalance factor, and two
  all-to-alls per MoE layer, each device sending its (N-1)/N share of its tokens' routed rows
  (`Deployment.all_to_all_bytes`) over the workbench's link for the N = tp x dp devices, one
  link latency each (every pair's send is concurrent).

The interface for a deployment at scale is `build(Deployment(..., attention_dp=, moe_ep=,
moe_tp=))`: one StepModel of one attention-DP rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np
import sympy as sp

from rooflinec.cost import collectives, program_costs
from rooflinec.cost.deployment import Deployment, routed
from rooflinec.serving import serving_model as sm
from rooflinec.base import roofline
from rooflinec.base.errors import DeviceLacks
from rooflinec.spec.load import DTYPE_BYTES
from rooflinec.model.moe import distinct
from rooflinec.model.symbol_table import model_values
from rooflinec.model.symbols import B, L, M, S
from rooflinec.model.window import local_layers

# step features, in this order (the window_ ones: the windowed layers' own, see the module)
FEATURES = ("one", "tokens", "logits", "decodes", "context", "chunk_square", "chunk_tokens",
            "chunk_keys", "chunks", "window_context", "window_chunk_sk", "window_chunk_kk", "window_chunk_keys")
(ONE, TOKENS, LOGITS, DECODES, CONTEXT, CHUNK_SQUARE, CHUNK_TOKENS, CHUNK_KEYS,
 CHUNKS, WINDOW_CONTEXT, WINDOW_CHUNK_SK, WINDOW_CHUNK_KK, WINDOW_CHUNK_KEYS) = range(len(FEATURES))
GROWING = [CONTEXT, WINDOW_CONTEXT]   # what a run of unchanged decode steps grows (`growth`)
K = sp.Symbol("K", positive=True)     # min(S, W): the keys a windowed layer's query attends to


@dataclass(frozen=True)
class Parameters:
    """The simulator's named parameters: `serving_model.Efficiency`'s and a host-side time
    per running request per step, and a front-end latency per request (HTTP, tokenising, streaming
the first token back) that TTFT and E2E include and the scheduler never sees. At BOUND (all fractions 1, all times 0) a step's time is
    a lower bound on that step."""

    bandwidth_fraction: float = 1.0
    compute_fraction: float = 1.0
    per_layer_s: float = 0.0
    per_step_s: float = 0.0
    per_collective_s: float = 0.0
    per_request_s: float = 0.0
    request_latency_s: float = 0.0    # front end: arrival to scheduler and first token back (TTFT, E2E)
    # the routed experts' grouped GEMMs' achieved share of the bandwidth (times bandwidth_fraction):
    # `Routed`, fitted on MoE rows only (`fitting.EXPERT_ONLY`)
    expert_bandwidth_fraction: float = 1.0
    per_kernel_s: float = 0.0         # fixed time per kernel a step launches (`StepModel.kernels`)

    @staticmethod
    def of(eff: sm.Efficiency) -> Parameters:
        return Parameters(**{f.name: getattr(eff, f.name) for f in fields(sm.Efficiency)})


BOUND = Parameters()
NAMES = tuple(f.name for f in fields(Parameters))


def fixed_rates(p: Parameters) -> np.ndarray:
    """[4]: the fixed seconds per layer, per kernel, per step and per collective launch, in
    `StepModel.fixed_counts`' order."""
    return np.array([p.per_layer_s, p.per_kernel_s, p.per_step_s, p.per_collective_s])


class NotAffine(sm.Unpredictable):
    """A kernel whose cost is not affine in the step features (the message names it)."""


class Windowed(NotAffine):
    """A term with a min or max in the step's symbols other than the windowed layers' min(S, W)
    (which the window_ features take): the keys sparse attention selects, min(S, k_top)."""


def bounding(p: Parameters) -> bool:
    """Whether `p` asks for a lower bound (BOUND): routing then costs the least any routing can,
    and the step's collectives may overlap its kernels (`roofline.combine`)."""
    return p == BOUND


@dataclass(frozen=True)
class Routed:
    """The routed-expert kernels of one step (see the module): seconds at the peaks per routed
    row (compute, memory) and per distinct expert read (memory), per kernel [R]; the
    deployment, whose `busiest` gives each step's rows and experts; the all-to-alls' link
    seconds per step at 0 tokens and per token [2]."""

    row_compute: np.ndarray
    row_memory: np.ndarray
    expert_memory: np.ndarray
    deployment: Deployment
    all_to_all_s: np.ndarray
    expert_compute: np.ndarray | None = None   # [R] s per expert read dequantising it (weight-only; None: 0)
    peaks: np.ndarray | None = None            # [R] FLOP/s each kernel's compute seconds are at (x them: FLOPs)

    def parts(self, x: np.ndarray, bound: bool) -> tuple:
        """(compute [n, R], memory [n, R]) seconds at the peaks and the all-to-alls' [n]."""
        tokens = x[:, TOKENS]
        rows, experts = self.deployment.busiest(tokens, bound)
        link = np.zeros(len(x)) if bound else self.all_to_all_s[0] + self.all_to_all_s[1] * tokens
        compute = np.outer(rows, self.row_compute)
        if self.expert_compute is not None and self.expert_compute.any():
            compute = compute + np.outer(experts, self.expert_compute)
        return compute, np.outer(rows, self.row_memory) + np.outer(experts, self.expert_memory), link

    def seconds(self, x: np.ndarray, p: Parameters, parts: tuple | None = None) -> np.ndarray:
        """The routed kernels' times under `p` (`parts`: this x's, computed before)."""
        return roofline.combine(*self.split(x, p, parts), bounding(p))

    def split(self, x: np.ndarray, p: Parameters, parts: tuple | None = None) -> tuple:
        """(the routed kernels' seconds, the all-to-alls' seconds) per row under `p`."""
        compute, memory, link = parts or self.parts(x, bounding(p))
        achieved = p.bandwidth_fraction * p.expert_bandwidth_fraction   # a fraction of the peak, not a bandwidth
        return np.maximum(compute / p.compute_fraction, memory / achieved).sum(axis=1), link


@dataclass(frozen=True)
class StepModel:
    """Per-kernel seconds per unit of each feature at the peaks: compute [K, F], memory
    [K, F]; the step's fixed counts (layers, collectives) and its link time, affine in tokens."""

    deployment: Deployment
    compute: np.ndarray
    memory: np.ndarray
    names: tuple
    layers: int
    collectives: int
    link_s: np.ndarray          # [2]: link seconds at 0 tokens, per token (expected: one-shot all-reduces)
    # kernels one step launches: the lowered decode program's ops, each `repeat` times (L: the
    # layers), the routed experts' ops among them; each has a fixed launch, prologue and tail
    # time whatever its size (`Parameters.per_kernel_s`)
    kernels: int = field(default=0, kw_only=True)
    routed: Routed | None = field(default=None, kw_only=True)   # a MoE's routed experts (rows 0 above)
    window: int | None = field(default=None, kw_only=True)      # W of the windowed layers (None: none)
    # [F]: the collectives' least time per unit of each feature (`bound_link`), what the bound
    # (p = BOUND) takes in place of link_s; None: none priced, the bound leaves them out
    link_bound_s: np.ndarray | None = field(default=None, kw_only=True)
    # [K]: the FLOP/s each kernel's compute seconds are at, so compute x peaks are its FLOPs (and
    # memory x the device's bandwidth its bytes); None: not kept
    peaks: np.ndarray | None = field(default=None, kw_only=True)

    def durations(self, x: np.ndarray, p: Parameters) -> np.ndarray:
        """Step times for feature rows x [n, F]: the host's time, and the kernels' and the
        collectives' combined (`roofline.combine`: at the bound their max)."""
        if not bounding(p):     # the prediction's sum, in its own order (the calibrations' bytes)
            return self.dense_s(x, p) + self.overheads(x, p) + self.routed_s(x, p) + self.extra_kernel_s(x, p)
        routed, a2a = self.routed_split(x, p)
        return self.host(x, p) + roofline.combine(self.kernel_s(x, p) + routed, self.link(x, p) + a2a, True)

    def dense_s(self, x: np.ndarray, p: Parameters) -> np.ndarray:
        """The kernels' seconds per step but the routed experts'."""
        kernels = np.maximum((x @ self.compute.T) / p.compute_fraction, (x @ self.memory.T) / p.bandwidth_fraction)
        return kernels.sum(axis=1)

    def kernel_s(self, x: np.ndarray, p: Parameters) -> np.ndarray:
        """Every kernel's seconds per step but the routed experts'."""
        return self.dense_s(x, p) + self.extra_kernel_s(x, p)

    def extra_kernel_s(self, x: np.ndarray, p: Parameters) -> np.ndarray:
        """Kernels outside the lowered program's lines (a speculative step's draft); none here."""
        return np.zeros(len(x))

    def routed_s(self, x: np.ndarray, p: Parameters) -> np.ndarray:
        """The routed experts' kernels and all-to-alls per step (0 without a MoE): they depend
        on the tokens alone, so a run of steps whose context grows repeats them unchanged."""
        return np.zeros(len(x)) if self.routed is None else self.routed.seconds(x, p)

    def routed_split(self, x: np.ndarray, p: Parameters) -> tuple:
        """(the routed experts' kernels, their all-to-alls) per step (0, 0 without a MoE)."""
        return (np.zeros(len(x)),) * 2 if self.routed is None else self.routed.split(x, p)

    @property
    def fixed_counts(self) -> np.ndarray:
        """[4]: the step's layers, kernels, one step and collective launches, each a fixed time
        apart (`fixed_rates`)."""
        return np.array([self.layers, self.kernels, 1, self.collectives], float)

    def host(self, x: np.ndarray, p: Parameters) -> np.ndarray:
        """The fixed times per layer, kernel, step and collective launch and per running request
        (0 at BOUND)."""
        requests = x[:, DECODES] + x[:, CHUNKS]
        return self.fixed_counts @ fixed_rates(p) + requests * p.per_request_s

    def overheads(self, x: np.ndarray, p: Parameters) -> np.ndarray:
        """The host's time and the collectives after it (the prediction's: no overlap)."""
        return self.host(x, p) + self.link(x, p)

    def link(self, x: np.ndarray, p: Parameters) -> np.ndarray:
        """The step's tensor-parallel collectives per row of x: at BOUND their least time (any
        correct algorithm's, `bound_link`), else the expected one-shot all-reduces."""
        if bounding(p):
            return np.zeros(len(x)) if self.link_bound_s is None else x @ self.link_bound_s
        return self.link_s[0] + self.link_s[1] * x[:, TOKENS]


def build(dep: Deployment) -> StepModel:
    """The coefficients of one deployment's step, from its lowered programs (see the module)."""
    sm.checked(dep)
    model, dev = dep.model, dep.device
    act = DTYPE_BYTES[sm.ACTIVATION_DTYPE]
    stored = dep.formats()   # weights a device has no tensor peak for: weight-only GEMMs
    matrix, vector = dev.peak("matrix", dep.gemm_dtype), dev.peak("vector", sm.ACTIVATION_DTYPE)
    if matrix is None:
        raise sm.Unpredictable(f"{dev.key} lists no tensor peak for {dep.gemm_dtype}")
    if vector is None:
        raise sm.Unpredictable(f"{dev.key} lists no vector peak (compute.vector) for norms and softmax")
    moe = getattr(model, "moe", None)
    # the program without the busiest rank's ceilings (experts split moe_tp ways): Routed adds them
    flat = replace(dep, attention_dp=1, moe_ep=1, moe_tp=dep.expert_tp) if moe is not None else dep
    rows, names, experts, attending = [], [], [], set()
    w = model.window if local_layers(model) else None
    decode = program_costs.symbolic_ops(flat, "decode", dev, act, stored)
    for op, flops, traffic in _keyed(decode, w):
        if op.category == "attention":
            attending.add(op.name)
        if moe is not None and routed(op):
            experts.append(_routed_row(op, flops, traffic, model))
            flops, traffic = sp.Integer(0), {}
        rows.append(_decode_row(op, flops, traffic))
        names.append(op.name)
    for op, flops, traffic in _keyed(program_costs.symbolic_ops(flat, "prefill", dev, act, stored), w):
        if op.category == "attention":
            rows.append(_chunk_row(op, flops, traffic))
            names.append(f"{op.name} (prompt chunks)")
            attending.add(names[-1])
    attention = attention_peak(dep)
    peaks = np.array([[vector if op_unit != "matrix" else attention if name in attending else matrix]
                      for (op_unit, _, _), name in zip(rows, names)])
    kernels = _routed(dep, experts, matrix, vector, act) if experts else None
    compute = roofline.compute_time(np.array([f for _, f, _ in rows]), peaks)
    memory = roofline.transfer_time(np.array([m for _, _, m in rows]), dev.bandwidth)
    coll, link = (dep.all_reduces(), one_shot(dep, dep.all_reduces())) if dep.tp > 1 else (0, np.zeros(2))
    return StepModel(dep, compute, memory, tuple(names), model.n_layers, coll, link, routed=kernels, window=w,
                     link_bound_s=bound_link(dep, act, stored), peaks=peaks[:, 0], kernels=launches(decode, model))


def launches(ops, model) -> int:
    """Kernels one step of the program `ops` launches: each op `repeat` times, the layers'
    symbol at the model's depth."""
    depth = {L: model.n_layers}
    return int(sum(sp.sympify(op.repeat).xreplace(depth) for op, _, _ in ops))


def one_shot(dep: Deployment, count: int) -> np.ndarray:
    """[2]: seconds of `count` tensor-parallel all-reduces of the step's tokens x d_model
    activations at 0 tokens and per token, one-shot over the scale-up link (2(n-1)/n of the
    payload, one latency each): the expected time engines take over NVSwitch (vLLM's and
    TensorRT-LLM's custom all-reduce), as `serving_model` times them and the shipped
    calibration was fitted. Affine in tokens, so two points give it exactly."""
    dev = dep.device
    if dev.link_bandwidth is None:
        raise sm.Unpredictable(f"{dev.key} declares no interconnect bandwidth for tensor parallelism")
    ln = collectives.Link(dev.link, dev.link_bandwidth, dev.link_latency)
    share = float(collectives.fraction("all_reduce", dep.tp)) * dep.model.d_model * DTYPE_BYTES[sm.ACTIVATION_DTYPE]
    at = [count * collectives.time(share * t, 1, ln) for t in (0, 1)]
    return np.array([at[0], at[1] - at[0]])


def bound_link(dep: Deployment, act: int, stored: dict) -> np.ndarray | None:
    """[F]: the step's collectives but the all-to-alls (the embedding's and row-parallel
    all-reduces, the logits all-gather: the serving bound's) at their least time
    (`program_costs.collectives_s` at collectives.LEAST, on the workbench's link for the
    group: scale-up inside a domain, scale-out past it), per unit of each feature: affine
    in the tokens (M) and the sequences given logits (B), read at three points and checked
    at a fourth. None where nothing is priced: no collective, a device with no link for
    the group, or payloads not affine (the bound then leaves them out, as it may)."""
    if dep.tp == 1 and dep.attention_dp == 1 and dep.moe_ep == 1:
        return None

    def at(tokens, logits):
        return program_costs.collectives_s(dep, dep.device, {B: logits, S: 1}, tokens, act, stored,
                                           collectives.LEAST)[1]
    try:
        zero = at(0, 0)
        per_token, per_logit = at(1, 0) - zero, at(0, 1) - zero
        if not np.isclose(at(3, 2), zero + 3 * per_token + 2 * per_logit, rtol=1e-9, atol=0):
            return None
    except DeviceLacks:
        return None
    out = np.zeros(len(FEATURES))
    out[ONE], out[TOKENS], out[LOGITS] = zero, per_token, per_logit
    return out if out.any() else None


def _keyed(ops, w):
    """`ops` with each windowed layer's min(S, W) keys as the symbol K (none without a window)."""
    if w is None:
        return ops
    keys = {sp.Min(S, sp.Integer(w)): K}
    return [(op, f.xreplace(keys), {c: e.xreplace(keys) for c, e in t.items()}) for op, f, t in ops]


def _routed_row(op, flops, traffic, model):
    """A routed-expert op's (unit, FLOPs per routed row, other bytes per routed row, weight
    bytes per distinct expert read, FLOPs per distinct expert read): its FLOPs and activations
    linear in M (M k rows), its weights the distinct experts' E(1 - (1 - k/E)^M) times one
    expert's, and so any FLOPs over them (a weight-only GEMM dequantising each weight it reads)."""
    top_k, d = model.moe.top_k, distinct(model).xreplace(model_values(model))
    per_expert = sp.cancel(traffic.get("weights", sp.Integer(0)) / d)
    flops, dequant = _over_experts(sp.sympify(flops), d)
    others = sum((e for cls, e in traffic.items() if cls != "weights"), sp.Integer(0))
    out = []
    for expr in (flops, others, per_expert * M):
        terms = _terms(expr, (M,))
        if set(terms) - {(1,)}:
            raise NotAffine(f"routed op {op.name}: its cost is not a multiple of its tokens and experts")
        out.append(terms.get((1,), 0.0))
    return op.unit, out[0] / top_k, out[1] / top_k, out[2], float(dequant)


def _over_experts(expr, d):
    """(expr less its multiple of the distinct experts d(M), that multiple's coefficient): the
    part of a routed op's FLOPs that follows the experts read, not the rows."""
    power = [p for p in d.atoms(sp.Pow) if p.exp.has(M)]
    if not power or not expr.has(power[0]):
        return expr, 0.0
    u = sp.Dummy("u")
    c = sp.expand(expr.xreplace({power[0]: u})).coeff(u) / sp.expand(d.xreplace({power[0]: u})).coeff(u)
    return sp.expand(expr - c * d), c


def _routed(dep, experts, matrix, vector, act) -> Routed:
    """The routed kernels' seconds at the peaks, and the dispatch and combine all-to-alls."""
    dev = dep.device
    peak = np.array([matrix if unit == "matrix" else vector for unit, *_ in experts])
    row_c = roofline.compute_time(np.array([e[1] for e in experts]), peak)
    row_m = roofline.transfer_time(np.array([e[2] for e in experts]), dev.bandwidth)
    expert_m = roofline.transfer_time(np.array([e[3] for e in experts]), dev.bandwidth)
    expert_c = roofline.compute_time(np.array([e[4] for e in experts]), peak)
    try:    # affine in tokens: two points give it exactly
        at = [program_costs.all_to_all_s(dep, t, act) for t in (0, 1)]
    except DeviceLacks as exc:     # the device declares no link for the tp x dp devices
        raise sm.Unpredictable(str(exc)) from None
    a2a = np.array([at[0], at[1] - at[0]])
    return Routed(row_c, row_m, expert_m, dep, a2a, expert_compute=expert_c, peaks=peak)


def attention_peak(dep: Deployment) -> float:
    """The tensor peak attention's matrix products run at: their operands are activations (Q,
    the scores' probabilities) and the KV cache, never the weights, so the KV cache's format
    where the device has a peak for it and it is 8-bit or wider (FP8 attention kernels exist in
    TensorRT-LLM, vLLM and SGLang), else the activations' (no engine's attention kernel takes
    4-bit operands)."""
    dev, kv = dep.device, dep.kv_format
    wide = DTYPE_BYTES[kv] >= 1 and dev.peak("matrix", kv) is not None
    return dev.peak("matrix", kv if wide else sm.ACTIVATION_DTYPE)


def _terms(expr, symbols) -> dict:
    """The monomials of `expr` in `symbols`; a term that is no polynomial in them (a minimum
    of the context but the window's, `_keyed`) is not affine in the step features: said so,
    not raised raw."""
    if expr == 0:
        return {}
    try:
        return {m: float(c) for m, c in sp.Poly(sp.expand(expr), *symbols).terms()}
    except sp.PolynomialError as exc:
        bad = sorted(str(f) for f in expr.atoms(sp.Min, sp.Max) if f.free_symbols & set(symbols))
        raise (Windowed if bad else NotAffine)(f"{', '.join(bad) or exc} is not affine in the step features "
                        "(the simulator's step is affine in the batch's summed contexts and, for windowed "
                        "layers, in their sum of min(context, W); no other minimum of the context)") from None


def _decode_row(op, flops, traffic):
    """The decode program's op over the step: M -> tokens; B -> decodes in attention (B*S ->
    the sum of their contexts, B*K -> of their min(context, W)), else the sequences that get
    logits."""
    b_feature = DECODES if op.category == "attention" else LOGITS
    place = {(0, 0, 0, 0): ONE, (0, 0, 1, 0): TOKENS, (1, 0, 0, 0): b_feature}
    if op.category == "attention":
        place[(1, 1, 0, 0)] = CONTEXT
        place[(1, 0, 0, 1)] = WINDOW_CONTEXT

    def row(expr):
        out = np.zeros(len(FEATURES))
        for mono, c in _terms(expr, (B, S, M, K)).items():
            if mono not in place:
                raise NotAffine(f"decode op {op.name}: term {mono} of B, S, M, min(S, W) is not affine in the step features")
            out[place[mono]] += c
        return out
    return op.unit, row(flops), sum((row(e) for e in traffic.values()), np.zeros(len(FEATURES)))


# the prefill program's monomials in (S, K) at B = 1 -> a chunk's feature; S alone is the
# chunk's tokens (FLOPs, queries, outputs) or the keys it reads (the KV cache), per group
_CHUNK = {(2, 0): CHUNK_SQUARE, (0, 0): CHUNKS, (1, 1): WINDOW_CHUNK_SK, (0, 2): WINDOW_CHUNK_KK}


def _chunk_row(op, flops, traffic):
    """The prefill program's attention at B = 1 for one chunk of c tokens after p: a term f(S)
    of the prompt's count becomes f(p + c) - f(p) (S^2 -> (p+c)^2 - p^2; S K and K^2, K =
    min(S, W), alike), S -> c (FLOPs, queries and outputs) or the keys the chunk reads (the
    KV cache: p + c, or min(p + c, W - 1 + c) in a windowed layer), constants -> per chunk."""
    windowed = any(sp.sympify(e).has(K) for e in (flops, *traffic.values()))

    def row(expr, linear):
        out = np.zeros(len(FEATURES))
        for mono, c in _terms(sp.sympify(expr).subs(B, 1), (S, K)).items():
            if mono != (1, 0) and mono not in _CHUNK:
                raise NotAffine(f"prefill op {op.name}: S^{mono[0]} min(S, W)^{mono[1]} has no chunk feature")
            out[linear if mono == (1, 0) else _CHUNK[mono]] += c
        return out
    keys = WINDOW_CHUNK_KEYS if windowed else CHUNK_KEYS
    memory = sum((row(e, keys if cls == "kv_cache" else CHUNK_TOKENS) for cls, e in traffic.items()),
                 np.zeros(len(FEATURES)))
    return op.unit, row(flops, CHUNK_TOKENS), memory


# --- a step's features --------------------------------------------------------------------

def attend(x: np.ndarray, window: int | None, kvlen: np.ndarray, prefix: np.ndarray, sizes: np.ndarray) -> None:
    """Fill row `x`'s attention features for decodes holding `kvlen` tokens each (context
    kvlen + 1 with the new one) and prompt chunks of `sizes` tokens after `prefix`:
    decodes, context, the chunks' (p + c)^2 - p^2, tokens, keys read, count; with a window W,
    sum min(context, W), and per chunk the differences f(p + c) - f(p) of S min(S, W) and
    min(S, W)^2 and the keys the chunk reads, min(p + c, W - 1 + c) (its queries' windows:
    keys max(0, p - W + 1) .. p + c - 1). The chunk differences telescope (a prompt in chunks
    costs the prompt); the causal count they make of a chunk, S K - K^2/2 at f(S), is the
    prefill program's (the queries' exact sum of min(p + i + 1, W) keys, less the diagonal's
    half, as the full layers' (p + c)^2 / 2 - p^2 / 2)."""
    n = len(kvlen)
    x[DECODES] = n
    x[CONTEXT] = float(kvlen.sum() + n)
    if window is not None:
        x[WINDOW_CONTEXT] = float(np.minimum(kvlen + 1, window).sum())
    if not len(sizes):
        return
    keys = prefix + sizes
    x[CHUNK_SQUARE] = float((keys * keys - prefix * prefix).sum())
    x[CHUNK_TOKENS] = float(sizes.sum())
    x[CHUNK_KEYS] = float(keys.sum())
    x[CHUNKS] = len(sizes)
    if window is not None:
        at, before = np.minimum(keys, window), np.minimum(prefix, window)
        x[WINDOW_CHUNK_SK] = float((keys * at - prefix * before).sum())
        x[WINDOW_CHUNK_KK] = float((at * at - before * before).sum())
        x[WINDOW_CHUNK_KEYS] = float(np.minimum(keys, window - 1 + sizes).sum())


def growth(window: int | None, kvlen: np.ndarray, per_step) -> tuple[np.ndarray, int | None]:
    """A run of decode steps from `kvlen` cached tokens each, `per_step` more per step: (what
    each step adds to the features, [F]; the most steps the run may take while that stays so,
    None for no limit). Windowed layers read min(context, W): a run ends where a decode's
    context reaches W, so within a run the features grow linearly (the re-timing's closed form)."""
    g = np.zeros(len(FEATURES))
    g[CONTEXT] = len(kvlen) * per_step
    if window is None:
        return g, None
    ctx = kvlen + 1
    open_ = ctx < window
    g[WINDOW_CONTEXT] = int(open_.sum()) * per_step
    return g, int(np.ceil((window - ctx[open_]) / per_step).min()) if open_.any() else None
