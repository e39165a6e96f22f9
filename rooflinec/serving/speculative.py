"""Speculative decoding and multi-token prediction: what a verification step costs and yields.

A draft proposes k tokens per sequence; the target model then runs one verification step over
k + 1 tokens per sequence (the last accepted token and the k drafts) and keeps the longest
accepted prefix plus one token of its own. With each draft token accepted independently with
probability alpha, a verification step yields (1 - alpha^(k+1)) / (1 - alpha) tokens on
average (Leviathan, Kalman and Matias 2023, "Fast Inference from Transformers via Speculative
Decoding", eq. 1; k + 1 at alpha = 1). That expectation is an assumption about the text, so a
figure at a given alpha is a prediction; the best case, alpha = 1, gives the lower bound.

Costs are the serving simulator's step features (`stepcost.StepModel`), read off the lowered
programs, not a scalar factor: the verification step is the target's step with each decoding
sequence turned into a prompt chunk of c = k + 1 tokens after the p = context - 1 it holds
(the prefill program's attention: (p + c)^2 - p^2 causal scores, p + c keys read), its linear
layers and LM head over (k + 1) tokens per sequence. Decode turns into a small prefill, so its
intensity rises by up to k + 1 while its weight traffic stays. The feature map is linear, so
the verification step is a StepModel whose coefficients are the target's times that map.

The draft costs its own steps, after the target's prompt chunks and before the verification:
- `model`: a draft model (a spec, e.g. Llama-3.2-1B for Llama-3.1-70B; same tokenizer is the
  user's business) on the same devices and tensor parallelism, prefilling the prompts as the
  target does and running k decode passes per verification, at contexts S .. S + k - 1;
- `mtp`: k multi-token-prediction heads (DeepSeek-V3's MTP module), each one decoder layer of
  the target (the mean layer: its per-layer kernels over L), the shared embedding, a norm and
  the shared LM head, plus the 2 d_model x d_model projection of [embedding; hidden];
- `ngram`: prompt-lookup drafts, costed at zero (a host-side string match).
The k draft passes are priced as one kernel per op over their summed features: each op's
roofline of the summed traffic is at most the sum of its k rooflines, so a bound stays one.

Memory: a draft model's weights and KV cache, or the MTP heads' parameters (k mean layers and
projections, computed here from `model.params`' components, since they are not in the model
spec) and their KV cache (k mean layers' share), add to the target's; the MTP parameters are
not active per token unless the heads are used.

Left out, each making a figure smaller (a bound stays one; a prediction errs low): the MTP heads prefill a prompt
once (as one layer, not k); the k drafts' slots in the KV cache; the draft's fixed overheads
under a calibration (its layers' launches, its sampling); rejection sampling's own FLOPs.
Re-timing a recorded schedule (`simulator.run_times`, calibration) takes plain step models only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy as sp

from rooflinec.base import roofline
from rooflinec.cost import program_costs
from rooflinec.cost.evaluate import number
from rooflinec.model import params
from rooflinec.model.symbol_table import model_values
from rooflinec.serving import serving_model as sm
from rooflinec.serving import stepcost as sc
from rooflinec.spec.load import DTYPE_BYTES

SOURCE = "Leviathan, Kalman and Matias 2023, Fast Inference from Transformers via Speculative Decoding"
F = len(sc.FEATURES)
SEARCH_LIMIT = 1 << 20      # the largest batch the break-even search tries


@dataclass(frozen=True)
class Draft:
    kind: str              # mtp, model or ngram
    k: int                 # draft tokens per verification
    alpha: float           # per-token acceptance rate, in [0, 1]
    model: object = None   # the draft model's spec (kind "model")

    def describe(self) -> str:
        what = {"mtp": f"{self.k} MTP head{'s' * (self.k > 1)}", "ngram": "n-gram drafts",
                "model": f"draft {getattr(self.model, 'key', '')}"}[self.kind]
        return f"{what}, k = {self.k}, alpha = {self.alpha:g}"


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one verification step yields on average (Leviathan et al. 2023, eq. 1)."""
    if not 0 <= alpha <= 1 or k < 0:
        raise ValueError(f"alpha must be in [0, 1] and k >= 0, got alpha = {alpha}, k = {k}")
    # the geometric series itself: (1 - alpha^(k+1)) / (1 - alpha) cancels near alpha = 1
    return math.fsum(alpha ** i for i in range(k + 1))


def parse(text: str, flag: str = "--speculate") -> Draft:
    """`mtp:k=1,alpha=0.8` or `ngram:k=4,alpha=0.5` as a Draft; a ValueError names the flag."""
    kind, _, rest = text.partition(":")
    if kind not in ("mtp", "ngram"):
        raise ValueError(f"{flag}: '{kind}' is not a draft; give mtp:k=K,alpha=A or ngram:k=K,alpha=A "
                         "(a draft model: --draft MODEL --draft-k K --acceptance A)")
    fields = dict(kv.partition("=")[::2] for kv in rest.split(",") if kv)
    if set(fields) != {"k", "alpha"}:
        raise ValueError(f"{flag}: expected {kind}:k=K,alpha=A, got '{text}'")
    try:
        k, alpha = int(fields["k"]), float(fields["alpha"])
    except ValueError:
        raise ValueError(f"{flag}: k must be a whole number and alpha a number, got '{text}'") from None
    return checked(Draft(kind, k, alpha), flag)


def checked(draft: Draft, flag: str) -> Draft:
    if not 1 <= draft.k <= 64:
        raise ValueError(f"{flag}: k = {draft.k}; draft between 1 and 64 tokens per verification")
    if not 0 <= draft.alpha <= 1:
        raise ValueError(f"{flag}: alpha = {draft.alpha}; an acceptance rate is between 0 and 1")
    return draft


# --- the feature maps: a plain step's features -> the features the speculative kernels see ---------

def verify_map(k: int) -> np.ndarray:
    """T [F, F]: row f is what one unit of plain feature f adds to the verification step's
    features. A decode (context C = p + 1 keys) becomes a chunk of c = k + 1 tokens after p:
    chunk_square += 2c(C - 1) + c^2, chunk_tokens += c, chunk_keys += C - 1 + c, chunks += 1,
    and k more tokens through the linear layers and the LM head; the decode attention's own
    features (decodes, context) are not used by any kernel of the verification."""
    c = k + 1
    t = np.eye(F)
    t[sc.DECODES] = 0
    t[sc.CONTEXT] = 0
    t[sc.DECODES, [sc.TOKENS, sc.LOGITS]] = k
    t[sc.DECODES, [sc.CHUNK_SQUARE, sc.CHUNK_TOKENS, sc.CHUNK_KEYS, sc.CHUNKS]] = [c * c - 2 * c, c, c - 1, 1]
    t[sc.CONTEXT, [sc.CHUNK_SQUARE, sc.CHUNK_KEYS]] = [2 * c, 1]
    return t


def draft_map(k: int) -> np.ndarray:
    """The draft's k passes for the decodes (contexts C, C + 1, .., C + k - 1 per sequence,
    one token each), summed; its prompt chunks once. Constant features (the draft's weights)
    take k passes only where the step decodes: `Speculative._draft_features` adds them."""
    t = np.eye(F)
    t[sc.DECODES, [sc.DECODES, sc.TOKENS, sc.LOGITS, sc.CONTEXT]] = [k, k - 1, k - 1, k * (k - 1) / 2]
    t[sc.CONTEXT, sc.CONTEXT] = k
    return t


@dataclass(frozen=True)
class Speculative(sc.StepModel):
    """A StepModel whose every decode is a verification of k + 1 tokens with its draft passes:
    `compute`/`memory` are the verification's kernels (the target's coefficients through
    `verify_map`); the draft's kernels are `draft_compute`/`draft_memory` over `draft_map`."""

    draft: Draft = None
    draft_compute: np.ndarray = None
    draft_memory: np.ndarray = None
    tokens_per_step: float = 1.0        # expected tokens per decode step at the draft's alpha
    weight_bytes: float = 0.0           # the draft's (or MTP heads') weights on one device
    kv_bytes_per_token: float = 0.0     # and the KV cache one token keeps there

    def _draft_features(self, x: np.ndarray) -> np.ndarray:
        y = x @ draft_map(self.draft.k)
        y[:, sc.ONE] += (self.draft.k - 1) * (x[:, sc.DECODES] > 0)
        return y

    def terms(self, x: np.ndarray) -> tuple:
        """(verification compute, memory, draft compute, memory) in seconds at the peaks,
        summed over kernels, for feature rows x [n, F]."""
        y = self._draft_features(x)
        return ((x @ self.compute.T).sum(axis=1), (x @ self.memory.T).sum(axis=1),
                (y @ self.draft_compute.T).sum(axis=1), (y @ self.draft_memory.T).sum(axis=1))

    def extra_kernel_s(self, x: np.ndarray, p: sc.Parameters) -> np.ndarray:
        """The draft's kernels, which the target's step (`StepModel.durations`) adds to its own
        (at the bound among the kernels the collectives may overlap: `roofline.combine`)."""
        y = self._draft_features(x)
        return np.maximum((y @ self.draft_compute.T) / p.compute_fraction,
                          (y @ self.draft_memory.T) / p.bandwidth_fraction).sum(axis=1)

    def link(self, x: np.ndarray, p: sc.Parameters) -> np.ndarray:
        """The target's collectives; the all-reduces carry the verification's k + 1 tokens."""
        x = x.copy()
        x[:, sc.TOKENS] += self.draft.k * x[:, sc.DECODES]
        return super().link(x, p)


def target_model(dep: sc.Deployment) -> sc.StepModel:
    """`stepcost.build`, with a cost it cannot read as affine (a mixture of experts' distinct
    experts, E(1 - (1 - k/E)^M)) said as a sentence rather than sympy's traceback."""
    try:
        return sc.build(dep)
    except sp.PolynomialError:
        raise sm.Unpredictable("the step model reads costs affine in the step's tokens, and a cost of "
                               f"{dep.model.name} is not (a mixture of experts' distinct experts, "
                               "E(1 - (1 - k/E)^M), for one)") from None


def speculative(target: sc.StepModel, draft: Draft) -> Speculative:
    """The verification step and the draft's steps of `target`'s deployment (see the module)."""
    dep, k = target.deployment, draft.k
    if target.routed is not None:     # the verify map is linear; routed experts are not (stepcost.Routed)
        raise sm.Unpredictable("speculation is not priced for a mixture of experts: its routed experts' "
                               "cost per step is not affine in the verification's tokens")
    if target.window is not None:     # min(context, W) per sequence: no linear map carries it
        raise sm.Unpredictable(f"speculation is not priced for windowed layers ({dep.model.name}'s window of "
                               f"{target.window} keys): the verification's map of the features is linear")
    t = verify_map(k)
    if draft.kind == "model":
        own = target_model(sc.Deployment(draft.model, dep.device, dep.tp, dep.weights, dep.kv_cache))
        if own.window is not None:
            raise sm.Unpredictable(f"speculation is not priced with a windowed draft ({draft.model.name})")
        dc, dm, weights, kv = own.compute, own.memory, own.deployment.weight_bytes(), float(own.deployment.kv_per_token())
    elif draft.kind == "mtp":
        dc, dm = _mtp_rows(target)
        weights, kv = k * mtp_parameters(dep.model) * DTYPE_BYTES[dep.weights] / dep.tp, \
            k * float(dep.kv_per_token()) / dep.model.n_layers
    else:
        dc = dm = np.zeros((0, F))
        weights = kv = 0.0
    return Speculative(dep, target.compute @ t.T, target.memory @ t.T, target.names, target.layers,
                       target.collectives, target.link_s, draft, dc, dm,
                       expected_tokens(draft.alpha, k), weights, kv, link_bound_s=target.link_bound_s,
                       kernels=target.kernels)


def _per_layer(target: sc.StepModel) -> np.ndarray:
    """1 for the target's kernels inside the decoder layers, by name (the programs' ops)."""
    dep = target.deployment
    stored = {"weights": dep.weights, "kv_cache": dep.kv_cache}
    act = DTYPE_BYTES[sm.ACTIVATION_DTYPE]
    inside = {op.name for op, _, _ in program_costs.symbolic_ops(dep, "decode", dep.device, act, stored)
              if op.per_layer}
    inside |= {f"{op.name} (prompt chunks)" for op, _, _ in
               program_costs.symbolic_ops(dep, "prefill", dep.device, act, stored) if op.per_layer}
    return np.array([n in inside for n in target.names], float)


def _mtp_rows(target: sc.StepModel) -> tuple:
    """One MTP head's kernels: the target's mean layer (its per-layer kernels over L), its
    embedding, final norm and LM head, and the [embedding; hidden] projection (2 d_model to
    d_model, column-split over tp)."""
    dep = target.deployment
    scale = np.where(_per_layer(target) > 0, 1 / target.layers, 1.0)[:, None]
    d, tp = dep.model.d_model, dep.tp
    flops, act = np.zeros(F), DTYPE_BYTES[sm.ACTIVATION_DTYPE]
    flops[sc.TOKENS] = 2 * (2 * d) * d / tp
    traffic = np.zeros(F)
    traffic[sc.ONE] = 2 * d * d * DTYPE_BYTES[dep.weights] / tp
    traffic[sc.TOKENS] = (2 * d + d / tp) * act
    peak = dep.device.peak("matrix", dep.weights)
    proj_c = roofline.compute_time(flops, peak)[None]
    proj_m = roofline.transfer_time(traffic, dep.device.bandwidth)[None]
    return np.vstack([target.compute * scale, proj_c]), np.vstack([target.memory * scale, proj_m])


def mtp_parameters(model) -> float:
    """One MTP head's parameters: the mean decoder layer (every per-layer component over L),
    the 2 d_model x d_model projection and two norms of d_model (DeepSeek-V3's MTP module has
    its own block, projection and norms and shares the embedding and LM head). Counted here,
    not in `model.params`, which counts what the spec declares."""
    values = model_values(model)
    count = params.count(model)
    layers = sum(number(c.count, values) for c in count.components if c.repeat != 1 and c.group != "mtp")
    return layers / model.n_layers + 2 * model.d_model ** 2 + 2 * model.d_model


# --- the comparison `serve` prints ---------------------------------------------------------------

def decode_features(batch: float, context: float) -> np.ndarray:
    """A plain decode step of `batch` sequences with `context` keys each, as feature rows."""
    x = np.zeros((1, F))
    x[0, [sc.ONE, sc.TOKENS, sc.LOGITS, sc.DECODES, sc.CONTEXT]] = [1, batch, batch, batch, batch * context]
    return x


@dataclass(frozen=True)
class Point:
    """One batch: the step bounds (overlapped rule, datasheet peaks, no collectives) in
    seconds, and tokens/s: plain, speculative at alpha = 1 (a bound) and at the draft's
    alpha (a prediction)."""

    batch: int
    plain_s: float
    plain_compute_s: float
    plain_memory_s: float
    verify_s: float
    verify_compute_s: float
    verify_memory_s: float
    draft_s: float
    tokens_per_step: float

    @property
    def plain_tokens_per_s(self) -> float:
        return self.batch / self.plain_s

    def tokens_per_s(self, tokens_per_step: float | None = None) -> float:
        return self.batch * (tokens_per_step or self.tokens_per_step) / (self.verify_s + self.draft_s)

    @property
    def speedup(self) -> float:
        return self.tokens_per_s() / self.plain_tokens_per_s

    @property
    def verify_compute_bound(self) -> bool:
        return self.verify_compute_s >= self.verify_memory_s


def point(target: sc.StepModel, spec: Speculative, batch: float, context: float) -> Point:
    x = decode_features(batch, context)
    pc, pm = (x @ target.compute.T).sum(), (x @ target.memory.T).sum()
    vc, vm, dc, dm = (float(v[0]) for v in spec.terms(x))
    return Point(batch, max(pc, pm), pc, pm, max(vc, vm), vc, vm, max(dc, dm), spec.tokens_per_step)


def break_even(target: sc.StepModel, spec: Speculative, context: float, tokens_per_step: float,
               limit: int = SEARCH_LIMIT) -> int | None:
    """The first batch (a doubling, then bisection, search up to `limit`) where speculation at
    `tokens_per_step` yields no more tokens/s than plain decoding; None if it pays up to `limit`."""
    def pays(b):
        p = point(target, spec, b, context)
        return p.tokens_per_s(tokens_per_step) > p.plain_tokens_per_s
    if not pays(1):
        return 1
    lo = 1
    while lo < limit and pays(min(2 * lo, limit)):
        lo = min(2 * lo, limit)
    if lo >= limit:
        return None
    hi = min(2 * lo, limit)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if pays(mid) else (lo, mid)
    return hi


def max_batch(spec: Speculative, context: float) -> int:
    """The most sequences at `context` whose KV caches (target's and draft's) fit on one device
    beside both weights (every layer at full context; all of the memory)."""
    dep = spec.deployment
    free = dep.device.capacity - dep.weight_bytes() - spec.weight_bytes
    per_sequence = (float(dep.kv_per_token()) + spec.kv_bytes_per_token) * context
    return max(0, int(free // per_sequence))


def table(target: sc.StepModel, draft: Draft, batches, context: int) -> dict:
    """The comparison `serve --speculate/--draft` prints and writes as JSON."""
    spec = speculative(target, draft)
    points = [point(target, spec, b, context) for b in batches]
    best = float(draft.k + 1)
    return {"draft": draft.describe(), "kind": draft.kind, "k": draft.k, "alpha": draft.alpha,
            "tokens_per_step": spec.tokens_per_step, "source": SOURCE, "context": context,
            "draft_weight_bytes": spec.weight_bytes,
            "draft_kv_bytes_per_sequence": spec.kv_bytes_per_token * context,
            "max_batch": max_batch(spec, context), "search_limit": SEARCH_LIMIT,
            "rows": [{"batch": p.batch, "plain_step_s": p.plain_s, "plain_tokens_per_s": p.plain_tokens_per_s,
                      "verify_step_s": p.verify_s, "draft_s": p.draft_s,
                      "verify_compute_over_memory": p.verify_compute_s / p.verify_memory_s,
                      "plain_compute_over_memory": p.plain_compute_s / p.plain_memory_s,
                      "verify_bound": "compute" if p.verify_compute_bound else "memory",
                      "bound_tokens_per_s": p.tokens_per_s(best),
                      "predicted_tokens_per_s": p.tokens_per_s(), "predicted_speedup": p.speedup}
                     for p in points],
            "stops_paying_from": break_even(target, spec, context, spec.tokens_per_step),
            "stops_paying_from_best_case": break_even(target, spec, context, best)}
