"""Aggregated continuous batching in steady state: TPOT and TTFT from one mixed step.

A run serves `concurrency` requests of `isl` prompt and `osl` output tokens on `tp` devices.
In steady state every step decodes one token for each of the C sequences in flight, at mean
context isl + osl/2, and prefills the prompts of the C/osl requests that start per step
(chunked prefill, so a prompt's tokens share the step's GEMMs). TPOT is that step's time.
A new request's first token comes out of a step that prefills its whole prompt beside the
others' decode; if fewer than C sequences fit in memory, the rest wait their turn (Little's
law), and that wait is part of TTFT.

A step's time is the sum over its kernels of max(FLOPs / (compute fraction x peak),
bytes / (bandwidth fraction x bandwidth)), plus fixed times per layer and per step, plus the
tensor-parallel collectives on the link the serving bound's take (the workbench's: scale-out
once the tp group leaves one scale-up domain): one-shot all-reduces inside a domain, as
engines run them and the calibration was fitted; past it the bound's own collectives (the
embedding's and row-parallel all-reduces, the logits all-gather) by the ring model. Either
is at least their least time (`collectives.least_time`, which the serving bound takes), so
the step never comes out below the bound of the same step. The calibration's efficiencies
(`Efficiency`) are the only fitted numbers.

Attention data parallelism with expert parallelism (`Run.attention_dp`, `moe_ep`, `moe_tp`):
the concurrency splits evenly over the attention-DP ranks, each stepping its own batch and KV
cache (memory per rank), and the step is one rank's program as the deployment shards it
(`Deployment.shard`: a MoE layer sees the tokens of every rank, the busiest expert rank's share
by pigeonhole), plus the dispatch and combine all-to-alls under uniform routing
(`program_costs.all_to_all_s`, a prediction; the bounds leave communication out). The
busiest rank's experts there are the deployment's pigeonhole over the expected distinct experts,
so under attention DP or expert parallelism `bound` refuses (Unpredictable): the simulator's
(`stepcost.Routed`, the least any routing reads) is the one to print.

The lower bounds (`bound`) are computed on a population and step mix that are guaranteed,
never at the mean mix: a step waits for every kernel in it, and a request's every decode step
holds at least that request, at a context of at least its prompt; so TPOT >= the pure decode
step of one sequence at context isl, TTFT >= its prompt's prefill alone, and a request's
OSL steps take TTFT + (OSL - 1) x TPOT >= OSL x that decode step. Each step is bounded by the
overlapped rule, max(sum FLOPs / peak, sum bytes / bandwidth), at the datasheet peaks, with no
overheads and no communication (it may overlap). The steady step at the mean mix is a
prediction: queued requests decode fewer sequences at once than the concurrency, and a mixture
of experts' distinct experts are concave in tokens, so the mean step's experts exceed the mean
over the real steps (Jensen's inequality).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from rooflinec.cost import collectives as C
from rooflinec.cost import parallel, program_costs
from rooflinec.cost.deployment import Deployment
from rooflinec.base.errors import DeviceLacks
from rooflinec.base.quantities import gib
from rooflinec.base.roofline import Roofline, combine, roofline
from rooflinec.spec.load import DTYPE_BYTES
from rooflinec.model.symbols import B, S

ACTIVATION_DTYPE = "bf16"   # activations and all-reduce payloads; weights and KV may be smaller


@dataclass(frozen=True)
class Efficiency:
    """The calibration's named parameters, one set per (device, engine)."""

    bandwidth_fraction: float = 1.0   # achieved fraction of the memory bandwidth
    compute_fraction: float = 1.0     # achieved fraction of the tensor (and vector) peak
    per_layer_s: float = 0.0          # fixed time per decoder layer per step (launches, sync)
    per_step_s: float = 0.0           # fixed time per step (scheduling, sampling)
    per_collective_s: float = 0.0     # fitted time of one all-reduce beyond its modelled transfer


BOUND = Efficiency()
PARAMETERS = tuple(f.name for f in fields(Efficiency))


@dataclass(frozen=True)
class Run:
    model: object       # spec.Model
    device: object      # spec.Device
    weights: str        # GEMM weight dtype; the KV cache is assumed to be stored in it too
    tp: int
    isl: int
    osl: int
    concurrency: int           # over every attention-DP rank
    attention_dp: int = 1
    moe_ep: int = 1
    moe_tp: int | None = None
    experts: str | None = None   # routed experts' storage format (None: the weights')

    @property
    def deployment(self) -> Deployment:
        """How the run's model runs: tp devices per attention-DP rank, the experts over moe_tp x
        moe_ep of them, weights and KV cache in the weight dtype (routed experts in theirs);
        GEMMs at the weight dtype, or weight-only where the device has no tensor peak for it."""
        return Deployment(self.model, self.device, self.tp, self.weights, self.weights,
                          attention_dp=self.attention_dp, moe_tp=self.moe_tp, moe_ep=self.moe_ep,
                          experts=self.experts)

    @property
    def per_rank(self) -> float:
        """The concurrency one attention-DP rank serves."""
        return self.concurrency / self.attention_dp


class Unpredictable(ValueError):
    """A run the model cannot predict; the message says why."""


def checked(dep: Deployment) -> Deployment:
    """`dep`, or why it cannot split its model (rooflinec.cost.parallel's rules)."""
    try:
        dep.check()
    except parallel.Unshardable as exc:
        raise Unpredictable(str(exc)) from None
    return dep


# --- memory ----------------------------------------------------------------------------

def sequences_that_fit(run: Run) -> float:
    """How many sequences at mean context isl + osl/2 have their KV cache in the memory the
    weights leave free (all of it: engines reserve 0.9 or so, and activations take some)."""
    dep = checked(run.deployment)
    free = run.device.capacity - dep.weight_bytes()
    if free <= 0:
        raise Unpredictable(f"{run.weights} weights need {gib(dep.weight_bytes())} "
                            f"per device; {run.device.key} has {gib(run.device.capacity)}")
    return free / dep.kv_per_sequence(mean_context(run))


def mean_context(run: Run) -> float:
    return run.isl + run.osl / 2


# --- one step ----------------------------------------------------------------------------

@dataclass(frozen=True)
class StepCost:
    """One step on one device at the datasheet peaks; `time` applies the efficiencies."""

    compute_s: np.ndarray      # per kernel, FLOPs / peak
    memory_s: np.ndarray       # per kernel, bytes / bandwidth
    layers: int
    collectives: int           # collectives in the step (0 at tp 1 without attention DP or EP)
    link_s: float              # their expected time (`_tp_collectives`), and the all-to-alls
    curve_s: np.ndarray | None = None   # per kernel, a per-op curve's time (NaN: none; see step_cost)

    def time(self, eff: Efficiency) -> float:
        return float(timed(self, eff))

    @property
    def lower_bound(self) -> float:
        """The step bound, overlapped: max(sum of compute, sum of memory), every kernel's
        compute overlapping every kernel's traffic and the collectives hidden behind both."""
        return float(max(self.compute_s.sum(), self.memory_s.sum()))


def timed(step, eff: Efficiency):
    """A step's time under `eff`: one step's fields, or many steps' stacked along axis 0; at
    BOUND the kernels and the collectives overlapped, else the collectives after the kernels."""
    kernels = Roofline(step.compute_s / eff.compute_fraction, step.memory_s / eff.bandwidth_fraction).time
    curves = getattr(step, "curve_s", None)
    if curves is not None:     # kernels priced by a per-op curve keep its time, the others eff's
        kernels = np.where(np.isnan(curves), kernels, curves)
    if eff == BOUND:     # the bound's kernels and collectives overlapped (`roofline.combine`); the rest 0
        return combine(kernels.sum(axis=-1), step.link_s, True)
    return (kernels.sum(axis=-1) + step.layers * eff.per_layer_s + eff.per_step_s
            + step.collectives * eff.per_collective_s + step.link_s)


def step_cost(run: Run, decode_seqs: float, context: float, prefill_seqs: float, op_time=None) -> StepCost:
    """A step decoding `decode_seqs` sequences at `context` and prefilling `prefill_seqs`
    prompts of run.isl tokens (a fraction: chunks of prompts), on one of tp devices.
    `op_time(run, op, t_compute, t_memory)`: a kernel's seconds from a per-op efficiency curve
    (rooflinec.serving.opcurves), or None where it has none (the Efficiency times it)."""
    dep, dev = checked(run.deployment), run.device
    tokens = decode_seqs + prefill_seqs * run.isl
    act = DTYPE_BYTES[ACTIVATION_DTYPE]
    # activations at bf16; weights and the KV cache stored in the run's weight dtype
    stored = dep.formats()   # weights a device has no tensor peak for: weight-only GEMMs
    ops = program_costs.op_costs(dep, "decode", dev, {B: decode_seqs, S: context}, tokens, act, stored)
    # the prompts' attention; their GEMMs are above
    ops += program_costs.op_costs(dep, "prefill", dev, {B: prefill_seqs, S: run.isl},
                                  bytes_per_element=act, formats=stored, category="attention")
    matrix_peak = dev.peak("matrix", dep.gemm_dtype)
    if matrix_peak is None:
        raise Unpredictable(f"{dev.key} lists no tensor peak for {dep.gemm_dtype}")
    vector_peak = dev.peak("vector", ACTIVATION_DTYPE)
    if vector_peak is None:
        raise Unpredictable(f"{dev.key} lists no vector peak (compute.vector) for norms and softmax")
    roofs = [roofline(op.flops, sum(op.traffic.values()), matrix_peak if op.unit == "matrix" else vector_peak,
                      dev.bandwidth) for op in ops]
    try:
        collectives, link_s = 0, program_costs.all_to_all_s(dep, tokens, act)
        if run.tp > 1:
            launches, seconds = _tp_collectives(run, dep, tokens, decode_seqs, context, stored)
            collectives, link_s = launches, link_s + seconds
    except DeviceLacks as exc:    # no link declared for the group's devices
        raise Unpredictable(str(exc)) from None
    if dep.all_to_all:
        collectives += 2 * (run.model.n_layers - run.model.moe.dense_layers(run.model.n_layers))
    return StepCost(np.array([r.t_compute for r in roofs]), np.array([r.t_memory for r in roofs]), run.model.n_layers, collectives, link_s,
                    _curve_times(run, ops, roofs, op_time))


def _tp_collectives(run: Run, dep: Deployment, tokens, decode_seqs, context, stored) -> tuple[int, float]:
    """(launches, seconds) of the step's tensor-parallel collectives, on the link the serving
    bound's take (`program_costs.tp_link`). Inside one scale-up domain, the per-layer all-reduces
    one-shot: engines run small all-reduces so over NVSwitch (vLLM's custom all-reduce,
    TensorRT-LLM's), one link latency each, and the shipped calibration was fitted so (every
    measured run's tp group within a domain): 2(n-1)/n of the payload and one latency, at
    least the least time the bound counts (the payload once, one latency). Past the domain,
    the bound's own collectives (the embedding's and row-parallel all-reduces, the logits
    all-gather) by the ring model over the scale-out network (`program_costs.collectives_s`
    at collectives.RING, the expected algorithm), at least their least time: the step never
    comes out below the bound."""
    act = DTYPE_BYTES[ACTIVATION_DTYPE]
    link = program_costs.tp_link(dep)
    if link.name == run.device.link and link.bandwidth == run.device.link_bandwidth:
        volume = float(C.fraction("all_reduce", run.tp)) * tokens * run.model.d_model * act
        return dep.all_reduces(), dep.all_reduces() * C.time(volume, 1, link)
    return program_costs.collectives_s(dep, run.device, {B: decode_seqs, S: context}, tokens, act, stored,
                                       C.RING)


def _curve_times(run, ops, roofs, op_time) -> np.ndarray | None:
    if op_time is None:
        return None
    times = [op_time(run, op, r.t_compute, r.t_memory) for op, r in zip(ops, roofs)]
    return np.array([np.nan if t is None else t for t in times], float)


# --- a run's prediction ---------------------------------------------------------------------

@dataclass(frozen=True)
class Costs:
    """A run's steps, at the peaks: what calibration re-times for every candidate Efficiency."""

    concurrency: float         # sequences in flight on one attention-DP rank: min(C / dp, what fits)
    steady: StepCost           # a steady-state step (TPOT)
    first: StepCost            # the step that prefills a new request's prompt
    alone: StepCost            # that prompt's prefill alone (the TTFT bound)
    decode: StepCost           # today's pure decode step (no prefill)
    one: StepCost              # one sequence's pure decode step at context isl (the TPOT bound)
    bounds: bool = True        # whether `bound` holds: not under attention DP or EP (the module)


def costs(run: Run, op_time=None) -> Costs:
    """`op_time`: per-op curves for the predicted steps (steady, first); the bounds never take them."""
    if min(run.tp, run.isl, run.osl, run.concurrency, run.attention_dp) < 1:
        raise Unpredictable("tp, attention DP, isl, osl and concurrency must be at least 1")
    c = min(run.per_rank, sequences_that_fit(run))
    if c < 1:
        raise Unpredictable("not one sequence's KV cache fits beside the weights")
    ctx = mean_context(run)
    try:
        return Costs(c, step_cost(run, c, ctx, c / run.osl, op_time), step_cost(run, c - 1, ctx, 1, op_time),
                     step_cost(run, 0, ctx, 1), step_cost(run, c, ctx, 0), step_cost(run, 1, run.isl, 0),
                     bounds=run.attention_dp == 1 and run.moe_ep == 1)
    except ZeroDivisionError:   # a declared op's formula in 1/B, at a step with no sequence decoding
        raise Unpredictable("an op's cost divides by zero at one of the run's steps (B = 0: "
                            "a step that decodes no sequence)") from None


@dataclass(frozen=True)
class Prediction:
    tpot_s: float
    ttft_s: float


def predict(run: Run, c: Costs, eff: Efficiency) -> Prediction:
    tpot = c.steady.time(eff)
    prefill = c.first.time(eff)
    waiting = run.per_rank / c.concurrency - 1    # Little's law: the share of C that waits
    return Prediction(tpot, prefill + waiting * (prefill + run.osl * tpot))


def bound(c: Costs) -> Prediction:
    """The uncalibrated lower bounds on the guaranteed population (the module's docstring):
    TPOT >= one sequence's pure decode step at context isl, TTFT >= the prompt's prefill
    alone, each under the overlapped step rule at the datasheet peaks. Under attention DP or
    EP the busiest rank's experts are an expectation, so no bound is given (the simulator's is)."""
    _bounded(c)
    return Prediction(c.one.lower_bound, c.alone.lower_bound)


def _bounded(c: Costs) -> None:
    if not c.bounds:
        raise Unpredictable("the steady-state model gives no bound under attention DP or expert "
                            "parallelism (its busiest rank's experts are an expectation); "
                            "`rooflinec simulate --bound` gives one")


def request_bound(run: Run, c: Costs) -> float:
    """A request's OSL steps (its prefill and OSL - 1 decodes) each take at least one
    sequence's pure decode step: TTFT + (OSL - 1) x TPOT >= OSL x that step."""
    _bounded(c)
    return run.osl * c.one.lower_bound
