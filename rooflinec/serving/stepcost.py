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
per layer, per step and per running request (host-side scheduling, sampling, detokenising)
and the tensor-parallel all-reduces (ring transfer plus a latency per collective).

A prompt chunk's attention: FLOPs from the prefill program's S^2 term as (p + c)^2 - p^2
(the causal count of c queries after p keys), its query and output traffic over c tokens,
and its KV traffic over the p + c keys it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import sympy as sp

from rooflinec.cost import collectives, program_costs
from rooflinec.cost.deployment import Deployment
from rooflinec.serving import serving_model as sm
from rooflinec.base import roofline
from rooflinec.spec.load import DTYPE_BYTES
from rooflinec.model.symbols import B, M, S

# step features, in this order
FEATURES = ("one", "tokens", "logits", "decodes", "context", "chunk_square", "chunk_tokens",
            "chunk_keys", "chunks")
(ONE, TOKENS, LOGITS, DECODES, CONTEXT, CHUNK_SQUARE, CHUNK_TOKENS, CHUNK_KEYS,
 CHUNKS) = range(len(FEATURES))


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

    @staticmethod
    def of(eff: sm.Efficiency) -> Parameters:
        return Parameters(**{f.name: getattr(eff, f.name) for f in fields(sm.Efficiency)})


BOUND = Parameters()
NAMES = tuple(f.name for f in fields(Parameters))


class NotAffine(sm.Unpredictable):
    """A kernel whose cost is not affine in the step features (the message names it)."""


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
    link_s: np.ndarray          # [2]: link seconds at 0 tokens, per token

    def durations(self, x: np.ndarray, p: Parameters) -> np.ndarray:
        """Step times for feature rows x [n, F]."""
        kernels = np.maximum((x @ self.compute.T) / p.compute_fraction, (x @ self.memory.T) / p.bandwidth_fraction)
        return kernels.sum(axis=1) + self.overheads(x, p)

    def overheads(self, x: np.ndarray, p: Parameters) -> np.ndarray:
        requests = x[:, DECODES] + x[:, CHUNKS]
        return (self.layers * p.per_layer_s + p.per_step_s + requests * p.per_request_s
                + self.collectives * p.per_collective_s + self.link_s[0] + self.link_s[1] * x[:, TOKENS])


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
    rows, names = [], []
    for op, flops, traffic in program_costs.symbolic_ops(dep, "decode", dev, act, stored):
        rows.append(_decode_row(op, flops, traffic))
        names.append(op.name)
    for op, flops, traffic in program_costs.symbolic_ops(dep, "prefill", dev, act, stored):
        if op.category == "attention":
            rows.append(_chunk_row(op, flops, traffic))
            names.append(f"{op.name} (prompt chunks)")
    peaks = np.array([[matrix if op_unit == "matrix" else vector] for op_unit, _, _ in rows])
    compute = roofline.compute_time(np.array([f for _, f, _ in rows]), peaks)
    memory = roofline.transfer_time(np.array([m for _, _, m in rows]), dev.bandwidth)
    coll, link = 0, np.zeros(2)
    if dep.tp > 1:
        if dev.link_bandwidth is None:
            raise sm.Unpredictable(f"{dev.key} declares no interconnect bandwidth for tensor parallelism")
        coll = dep.all_reduces()
        ln = collectives.Link(dev.link, dev.link_bandwidth, dev.link_latency)
        share = float(collectives.fraction("all_reduce", dep.tp)) * model.d_model * act
        # one-shot all-reduces (as serving_model): affine in tokens, so two points give it exactly
        at = [coll * collectives.time(share * t, 1, ln) for t in (0, 1)]
        link = np.array([at[0], at[1] - at[0]])
    return StepModel(dep, compute, memory, tuple(names), model.n_layers, coll, link)


def _terms(expr, symbols) -> dict:
    return {m: float(c) for m, c in sp.Poly(sp.expand(expr), *symbols).terms()} if expr != 0 else {}


def _decode_row(op, flops, traffic):
    """The decode program's op over the step: M -> tokens; B -> decodes in attention (B*S ->
    the sum of their contexts), else the sequences that get logits."""
    b_feature = DECODES if op.category == "attention" else LOGITS
    place = {(0, 0, 0): ONE, (0, 0, 1): TOKENS, (1, 0, 0): b_feature}
    if op.category == "attention":
        place[(1, 1, 0)] = CONTEXT

    def row(expr):
        out = np.zeros(len(FEATURES))
        for mono, c in _terms(expr, (B, S, M)).items():
            if mono not in place:
                raise NotAffine(f"decode op {op.name}: term {mono} of B, S, M is not affine in the step features")
            out[place[mono]] += c
        return out
    return op.unit, row(flops), sum((row(e) for e in traffic.values()), np.zeros(len(FEATURES)))


def _chunk_row(op, flops, traffic):
    """The prefill program's attention at B = 1 for one chunk: S^2 -> (p+c)^2 - p^2, S -> c
    (FLOPs, queries and outputs) or p + c (the KV cache it reads), constants -> per chunk."""
    def row(expr, linear):
        out = np.zeros(len(FEATURES))
        for (s_power,), c in _terms(expr.subs(B, 1), (S,)).items():
            if s_power > 2:
                raise NotAffine(f"prefill op {op.name}: S^{s_power} has no chunk feature")
            out[(CHUNKS, linear, CHUNK_SQUARE)[s_power]] += c
        return out
    memory = sum((row(e, CHUNK_KEYS if cls == "kv_cache" else CHUNK_TOKENS) for cls, e in traffic.items()),
                 np.zeros(len(FEATURES)))
    return op.unit, row(flops, CHUNK_TOKENS), memory
