"""Efficiency: training FLOPs per token, MFU / HFU, and serving bounds.

Training FLOPs are counted two ways, side by side:
- the model-FLOPs convention of PaLM (Chowdhery et al. 2022, appendix B): 6N + 12·L·H·Q·T
  per token, N every parameter, H query heads, Q head dim, T sequence length;
- the ledger's own count: the forward of the training program (prefill-shaped, logits for
  every token) op by op, and a backward of twice the forward's matrix-unit FLOPs.
Both are an `Account` of the forward split into dense and attention parts, matrix and vector
units, so recomputation policies (a table, not flags) apply to either.

Serving bounds come from the decode and prefill programs: the two roofline terms of a whole
step, sum(FLOPs / peak of their unit) and bytes / bandwidth, each linear in the batch B at a
fixed context S, so where they meet is solved exactly.

Works on any Program: "matrix" means ops on the matrix unit, "attention" ops whose
category is attention or attention_matmul; no op list is assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy as sp

from rooflinec.base import budget
from rooflinec.cost import piecewise
from rooflinec.cost.derive import exact
from rooflinec.cost.evaluate import number
from rooflinec.model.ir import Program
from rooflinec.model.symbols import B, L, M, S, b, d_head, n_kv, n_q
from rooflinec.base.roofline import Roofline, transfer_time
from rooflinec.model.mla import d_v, kv_elements_per_token_layer

ATTENTION = ("attention", "attention_matmul")

# policy -> (fraction of the dense forward recomputed, fraction of the attention forward, meaning)
RECOMPUTE = {
    "none": (sp.Integer(0), sp.Integer(0), "no recomputation: activations are all kept"),
    "full": (sp.Integer(1), sp.Integer(1), "the whole forward runs twice (full activation checkpointing)"),
    "palm": (sp.Rational(3, 4), sp.Integer(1),
             "PaLM's: 75% of the non-attention forward and all of the attention forward run again"),
    "selective": (sp.Integer(0), sp.Integer(1),
                  "selective (Korthikanti et al. 2022): only the attention forward runs again"),
}


# --- training FLOPs ---------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    """FLOPs per token of one training step's forward, split by part and by unit."""

    name: str
    dense_matrix: sp.Expr       # weight matmuls
    attention_matrix: sp.Expr   # score and weighted-sum matmuls
    dense_vector: sp.Expr = sp.Integer(0)       # norms, activations, residual adds, ...
    attention_vector: sp.Expr = sp.Integer(0)   # scale, mask, softmax, ...

    @property
    def dense(self) -> sp.Expr:
        return self.dense_matrix + self.dense_vector

    @property
    def attention(self) -> sp.Expr:
        return self.attention_matrix + self.attention_vector

    @property
    def forward(self) -> sp.Expr:
        return self.dense + self.attention

    @property
    def backward(self) -> sp.Expr:
        """Gradients with respect to activations and to weights: two matmuls per forward matmul."""
        return 2 * (self.dense_matrix + self.attention_matrix)

    @property
    def model(self) -> sp.Expr:
        """Model FLOPs: one forward and one backward, nothing recomputed."""
        return self.forward + self.backward

    def recomputed(self, policy: str) -> sp.Expr:
        dense, attention, _ = RECOMPUTE[policy]
        return dense * self.dense + attention * self.attention

    def hardware(self, policy: str) -> sp.Expr:
        """Hardware FLOPs: model FLOPs plus the forward work recomputation repeats."""
        return self.model + self.recomputed(policy)

    def without_attention(self) -> Account:
        return Account(self.name + ", without attention", self.dense_matrix, sp.Integer(0),
                       self.dense_vector, sp.Integer(0))


def palm_account(n_params: sp.Expr, sequence=S, model=None) -> Account:
    """PaLM appendix B: forward 2N per token in matmuls with the weights, and per layer and
    head QK^T and PV over T keys, 2·2·Q·T, so the training total is 6N + 12·L·H·Q·T. Under
    latent attention (MLA) the values are d_v wide, not the query/key head dim Q: QK^T takes
    2·Q·T and PV 2·d_v·T, so the total is 6N + 6·L·H·(Q + d_v)·T (DeepSeek-V3: Q 192, d_v 128)."""
    if getattr(model, "mla", None) is not None:
        return Account("model FLOPs (PaLM appendix B, values d_v wide under latent attention)",
                       2 * n_params, 2 * L * n_q * (d_head + d_v) * sequence)
    return Account("model FLOPs (PaLM appendix B)", 2 * n_params, 4 * L * n_q * d_head * sequence)


def _per_token(program: Program, keep) -> sp.Expr:
    total = sp.Add(*(op.cost.flops * op.repeat for op in program.ops if keep(op)))
    tokens = (M * 1).subs(program.bindings)    # tokens through the layers: B·S in prefill
    per_token = total.subs(program.bindings) / tokens
    return sp.factor(sp.cancel(per_token)) if budget.may_factor(per_token) else per_token


def ledger_account(program: Program) -> Account:
    """The forward of a training program, op by op, per token (FLOPs / (B·S))."""
    def part(attention: bool, unit: str):
        return _per_token(program, lambda op: (op.category in ATTENTION) == attention
                          and op.unit == unit)
    return Account(f"ledger ({program.variant})", part(False, "matrix"), part(True, "matrix"),
                   part(False, "vector"), part(True, "vector"))


def _tidy(expr: sp.Expr) -> sp.Expr:
    return sp.factor(sp.expand(expr))


def difference(convention: Account, ledger: Account, n_params: sp.Expr) -> list[dict]:
    """convention.model - ledger.model as three named terms that sum to it exactly."""
    return [
        {"term": "weights", "flops": _tidy(3 * (convention.dense_matrix - ledger.dense_matrix)),
         "params": _tidy(n_params - ledger.dense_matrix / 2),
         "why": "6N counts each of N's parameters; the ledger's matmuls use only matrix weights "
                "(norm scales, biases and an untied input table do no matmul), 6 FLOPs per parameter"},
        {"term": "attention", "flops": _tidy(3 * (convention.attention_matrix - ledger.attention_matrix)),
         "why": "12·L·H·Q·T computes every score; a ledger that skips the causal half counts half"},
        {"term": "vector ops", "flops": _tidy(-(ledger.dense_vector + ledger.attention_vector)),
         "why": "the ledger counts the forward's vector-unit FLOPs; model FLOPs count none, and "
                "the backward rule (2 x matmul FLOPs) adds none for them"},
    ]


def utilisation(tokens_per_s: float, flops_per_token: float, chips: int, peak: float) -> float:
    """Achieved FLOP/s over peak FLOP/s: MFU with model FLOPs, HFU with hardware FLOPs."""
    return tokens_per_s * flops_per_token / (chips * peak)


@dataclass(frozen=True)
class Timeline:
    ideal_s: float         # token budget at the measured throughput, without a pause
    chip_s: float          # chip-seconds actually spent
    chips: int             # chips of the measured run

    @property
    def spent_s(self) -> float:
        """Wall time the spent chip time comes to on the run's chips."""
        return self.chip_s / self.chips

    @property
    def ratio(self) -> float:
        return self.spent_s / self.ideal_s


def timeline(token_budget: float, tokens_per_s: float, chips: int, spent) -> Timeline:
    """`spent`: (chips, seconds) segments of chip time the run actually used."""
    return Timeline(token_budget / tokens_per_s, sum(c * t for c, t in spent), chips)


# --- serving ----------------------------------------------------------------------------


def kv_bytes_per_token(model=None) -> sp.Expr:
    """K and V, per layer, per KV head, d_head elements each; under latent attention (MLA)
    the latent and the shared rotary key, r_kv + d_rope elements per layer."""
    if getattr(model, "mla", None) is not None:
        return L * kv_elements_per_token_layer() * b
    return 2 * L * n_kv * d_head * b


@dataclass(frozen=True)
class Terms:
    """The two roofline terms of one whole step, in seconds, as expressions in B and S."""

    flops: sp.Expr
    bytes: sp.Expr
    compute: sp.Expr
    memory: sp.Expr

    def at(self, batch, context) -> tuple[float, float]:
        """(compute seconds, memory seconds) of the step at B = batch, S = context."""
        point = {B: batch, S: context}
        return piecewise.value_at(self.compute, point), piecewise.value_at(self.memory, point)

    def roof(self, batch, context) -> Roofline:
        return Roofline(*self.at(batch, context))


def step_terms(program: Program, values: dict, peak, bandwidth) -> Terms:
    """sum(FLOPs / peak of the op's unit) and bytes / bandwidth over the whole program.

    `values` fixes the model symbols and b; `peak(op)` is the peak the op runs against, as an
    exact rational (the workbench's, which raises where the device lacks it); bandwidth enters
    exactly too, so crossings are exact.
    """
    flops = nbytes = compute = sp.Integer(0)
    for op in program.ops:
        f = (op.cost.flops * op.repeat).xreplace(program.bindings).xreplace(values)
        nbytes += (op.cost.bytes * op.repeat).xreplace(program.bindings).xreplace(values)
        if f != 0:
            compute += f / peak(op)
        flops += f
    terms = (flops, nbytes, compute, transfer_time(nbytes, exact(bandwidth)))
    if all(map(budget.may_expand, terms)):
        return Terms(*map(sp.expand, terms))
    return Terms(*terms)   # not expanded: the same values, slower to evaluate


@dataclass(frozen=True)
class Crossover:
    """Where decode turns compute-bound at one context: the batch at which the terms meet."""

    context: int
    at: sp.Rational | None      # exact meeting point; None if the terms never meet for B > 0
    first: int | None           # smallest integer batch that is compute-bound
    ceiling: float              # tokens/s as B grows without bound: 1 / max(slopes)


def crossover(terms: Terms, context: int) -> Crossover:
    """Both terms are linear in B at a fixed S: c0 + c1·B and m0 + m1·B (or piecewise: searched;
    a mixture of experts' memory term is concave in B: see `_crossover_concave`)."""
    if piecewise.has_piecewise(terms.compute, B) or piecewise.has_piecewise(terms.memory, B):
        return _crossover_searched(terms, context)
    compute, memory = (t.xreplace({S: context}) for t in (terms.compute, terms.memory))
    if compute.is_polynomial(B) and not memory.is_polynomial(B):
        return _crossover_concave(compute, memory, context)
    c = piecewise.polynomial(compute, B)
    m = piecewise.polynomial(memory, B)
    if c is None or m is None or c.degree() > 1 or m.degree() > 1:
        return _crossover_searched(terms, context)
    c0, c1 = c.coeff_monomial(1), c.coeff_monomial(B)
    m0, m1 = m.coeff_monomial(1), m.coeff_monomial(B)
    ceiling = float(1 / max(c1, m1)) if max(c1, m1) > 0 else math.inf
    if c1 > m1:     # compute grows faster: it overtakes memory where the lines meet
        at = (m0 - c0) / (c1 - m1)
        return Crossover(context, at, max(1, int(math.ceil(at))), ceiling)
    first = 1 if (c1 == m1 and c0 >= m0) else None   # parallel lines, or memory pulls away
    return Crossover(context, None, first, ceiling)


def _crossover_concave(compute: sp.Expr, memory: sp.Expr, context: int) -> Crossover:
    """A MoE step's memory term adds K·(1 − q^B) (the distinct experts' weights, q < 1):
    concave in B, so compute − memory is convex and, where compute's slope is the larger,
    memory-bound on one interval of B at most; the crossing is its upper end, found by
    doubling and bisection on integers. The ceiling uses the slopes as B grows (q^B → 0)."""
    vanish = lambda e: e.replace(lambda x: x.is_Pow and x.exp.has(B), lambda x: sp.Integer(0))  # noqa: E731
    c1 = sp.Poly(compute, B).coeff_monomial(B)
    m1 = sp.Poly(sp.expand(vanish(memory)), B).coeff_monomial(B)
    ceiling = float(1 / max(c1, m1)) if max(c1, m1) > 0 else math.inf
    if c1 <= m1:
        return Crossover(context, None, None, ceiling)
    gap = sp.lambdify(B, compute - memory, modules="math")
    lo, hi = 1, 1
    while gap(hi) < 0 or gap(hi + 1) < gap(hi):   # past the memory-bound interval, and rising
        lo, hi = hi, hi * 2
        if hi > 2 ** 60:
            return Crossover(context, None, None, ceiling)
    if gap(lo) >= 0 and lo == hi:
        return Crossover(context, None, 1, ceiling)
    while hi - lo > 1:   # gap(lo) < 0 or still falling, gap(hi) >= 0 and rising
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if gap(mid) >= 0 and gap(mid + 1) >= gap(mid) else (mid, hi)
    return Crossover(context, None, hi, ceiling)


def _crossover_searched(terms: Terms, context: int) -> Crossover:
    """Terms a declared op made piecewise (ceil, min, max) or nonlinear in B: the first
    compute-bound batch is searched, `at` is that batch (no meeting point is solved for),
    and the ceiling is tokens/s at the end of the search, B = 2^40."""
    def step(batch) -> tuple:
        point = {B: batch, S: context}
        return number(terms.compute, point), number(terms.memory, point)

    def compute_bound(batch) -> bool:
        compute, memory = step(batch)
        return compute >= memory
    first = piecewise.first_true(compute_bound)
    far = piecewise.far()
    ceiling = far / max(step(far))
    return Crossover(context, None if first is None else sp.Integer(first), first, ceiling)


def fit_tokens(capacity: int, weight_bytes: int, kv_per_item: int) -> int:
    """Items (tokens, or whole sequences) of KV cache that fit beside the weights
    (activations and workspace ignored)."""
    return max(0, (capacity - weight_bytes) // kv_per_item)
