"""The deployment: how a model runs on many devices, and the one owner of what follows.

A `Deployment` names the model, the device it runs on, the degrees of parallelism (tensor
parallelism of attention and dense layers `tp`, attention data parallelism `attention_dp`,
expert tensor and expert parallelism `moe_tp` x `moe_ep` = tp x attention_dp, pipeline
stages `pp`, replicas), and the storage format of each tensor class (attention and dense
weights, routed-expert weights, KV cache) apart from the compute precision. Everything that
depends on how the model is split is asked of it:

- the sharding of every layer, as a pass over a lowered program (`shard`): Megatron-LM's
  tensor parallelism and the busiest expert rank (below);
- the collectives each layer needs (`collectives`, `expert_collectives`, `all_to_all_bytes`,
  and the count the serving model times, `all_reduces`);
- parameters and weight bytes per device (`params_per_device`, `weight_bytes`), the KV cache
  per device (`kv_per_token`, `kv_per_sequence`, by rooflinec.cost.kvcache's formulas), the
  largest batch one rank holds;
- the busiest rank, which a step waits for (`routings`: the pigeonhole bound, the mean under
  uniform routing, and the prediction at an imbalance factor).

The rules of each axis on one symbol (what one of tp devices holds of n_q, n_kv, d_ff, V, the
expert widths; which degrees divide the model) are `rooflinec.cost.parallel`'s `per_device`
and `check`, which the KV-cache formulas read too; nothing else applies them.

Sharding (Shoeybi et al. 2019, Megatron-LM, section 3; Narayanan et al. 2021):
- q, k, v and gate/up are column-parallel, o and down row-parallel: each device holds n_q/tp
  query heads, n_kv/tp KV heads and d_ff/tp of the MLP width, so every op written over n_q,
  n_kv or d_ff divides by tp (attention included: heads are independent);
- KV heads are replicated when tp exceeds their count: each device keeps the one KV head its
  query heads read (n_kv per device = 1), which is duplicated work and memory;
- the embedding and the LM head are vocabulary-parallel: V/tp rows (rounded up) per device;
- norms, residual adds and the embedding's gather run whole on every device (no sequence
  parallelism): duplicated work.
The forward pass then needs one all-reduce of the [M, d_model] activations after o_proj and
one after down_proj per layer (one per layer for a parallel block), one after the
vocabulary-parallel embedding, and an all-gather of the logits.

Attention data parallelism with expert parallelism (DeepSeek-AI 2024, "DeepSeek-V3 Technical
Report", section 3.4: attention DP with EP for decode; GShard and DeepSpeed-MoE's expert
layout). Each of `attention_dp` ranks of tp devices runs attention, the dense layers, the router
and the shared experts on its own M tokens (its own batch and KV cache; their weights
replicated on every rank, split by tp within it). A MoE layer sees the dp*M tokens of all
ranks: the E routed experts (plus any redundant copies, DeepSeek's EPLB) are placed E/ep per
expert rank, each expert's width d_e split over moe_tp devices. A step waits for its busiest
device, so the program is that device's (pigeonhole): of the dp*M*k routings one expert rank
serves at least ceil(dp*M*k/ep), and of the D distinct experts the dp*M tokens touch it holds
at least ceil(D/ep); the routed-expert ops' FLOPs and activations scale by
ceil(dp*M*k/ep)/(M*k), their weights by ceil(D(dp*M)/ep)/D(M). (At M = 1, dp = 1 Mixtral's two
experts sit on two devices, each reading a whole expert per layer.) The mean rank under uniform
routing, dp*M*k/ep routings, times an imbalance factor is a prediction of the busiest, not a
bound, and is stated as one. Tokens reach their experts and come back by two all-to-alls per
MoE layer (dispatch and combine) over the tp x dp devices: each device sends the k routed rows
of its M/tp tokens to each of an expert's moe_tp shards, (N-1)/N of them off the device under
uniform routing, over the scale-up link while the N devices share a domain, else scale-out.
Without attention DP or expert parallelism (moe_tp = tp) the experts split like the MLP and the
MoE layer's output is all-reduced instead.

The pass runs after the variant's passes (the attention kernels they build are written over
n_q and n_kv too); at tp = ep = 1 it returns the program unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache

import numpy as np
import sympy as sp

from rooflinec.cost import kvcache
from rooflinec.cost.collectives import Collective
from rooflinec.cost.parallel import Unshardable, check, check_ep, kv_replicated, per_device, stages
from rooflinec.model import kinds, quant
from rooflinec.model.ir import Cost, Program, verify
from rooflinec.model.moe import d_e, d_s, distinct, k, repeats, routed
from rooflinec.model.params import count
from rooflinec.model.symbol_table import model_values
from rooflinec.model.symbols import L, M, V, b, d_model


ALL_REDUCES_PER_LAYER = 2   # Megatron-LM: after attention's o_proj and after the MLP's down_proj


@dataclass(frozen=True)
class Deployment:
    """How `model` runs: on `device`, attention and dense layers split tp ways within each of
    `attention_dp` ranks that hold their own batch and KV cache, each MoE layer's routed
    experts over `moe_ep` ranks with each expert's width over `moe_tp` (tp x attention_dp =
    moe_tp x moe_ep devices), over pp stages, `replicas` times; weights, routed-expert weights
    and KV cache stored in their own formats. The positional fields are the serving
    simulator's (model, device, tp, weights, kv_cache). Prefill and decode workers are two
    deployments (a disaggregated pair composes them)."""

    model: object                 # spec.Model
    device: object = None         # spec.Device (None where no fact asked needs one)
    tp: int = 1                   # tensor parallelism of attention and dense layers
    weights: str = "bf16"         # storage format of attention and dense weights
    kv_cache: str | None = None   # storage format of the KV cache (None: the weights')
    attention_dp: int = 1         # attention data parallelism: ranks with their own batch
    moe_tp: int | None = None     # each routed expert's width over moe_tp (None: derived)
    moe_ep: int = 1               # expert parallelism: the routed experts over moe_ep ranks
    pp: int = 1                   # pipeline stages
    replicas: int = 1             # copies of the whole deployment serving independent requests
    experts: str | None = None    # storage format of routed-expert weights (None: the weights')
    redundant_experts: int = 0    # extra copies of hot experts (DeepSeek's EPLB), memory only
    imbalance: float = 1.0        # busiest expert rank's load over the mean (predictions only)
    compute: str | None = None    # the GEMMs' dtype (None: gemm_dtype's choice for the weights)

    @property
    def kv_format(self) -> str:
        return self.kv_cache or self.weights

    @property
    def experts_format(self) -> str:
        return self.experts or self.weights

    @property
    def gemm_dtype(self) -> str:
        """The dtype the GEMMs run at: `compute` as given, else the weights' format where the
        device lists a tensor peak for it, else weight-only (bf16 GEMMs dequantising them)."""
        return self.compute or gemm_dtype(self.weights, self.device)

    def formats(self) -> dict:
        """Each tensor class's storage format, as a study's `quantization`."""
        return {"weights": self.weights, quant.EXPERTS: self.experts_format, "kv_cache": self.kv_format}

    def dequant(self) -> dict:
        """f_dq and f_dqe: dequantisation FLOPs per weight element a GEMM at gemm_dtype reads."""
        return {quant.DEQUANT_SYMBOLS[cls]: quant.dequant_flops(fmt, self.gemm_dtype)
                for cls, fmt in (("weights", self.weights), (quant.EXPERTS, self.experts_format))}

    def dequantisation(self) -> str:
        """What a report says of the weight-only GEMMs ("" where none dequantises)."""
        moe = getattr(self.model, "moe", None) is not None
        return quant.dequantisation(self.weights, self.gemm_dtype, self.experts_format if moe else None)

    @property
    def group(self) -> int:
        """Devices of one stage that step together: tp x attention_dp (= moe_tp x moe_ep)."""
        return self.tp * self.attention_dp

    @property
    def devices(self) -> int:
        return self.group * self.pp

    @property
    def expert_tp(self) -> int:
        """moe_tp as given, else what fills the group: tp x attention_dp / moe_ep."""
        return self.moe_tp if self.moe_tp is not None else max(1, self.group // self.moe_ep)

    @property
    def all_to_all(self) -> bool:
        """Whether MoE layers move tokens between devices (attention DP or expert parallelism)."""
        return getattr(self.model, "moe", None) is not None and (self.attention_dp > 1 or self.moe_ep > 1)

    def check(self) -> None:
        """Every degree divides what it splits (parallel.Unshardable says which does not)."""
        if self.attention_dp < 1:
            raise Unshardable("attention data-parallel degree must be at least 1")
        check(self.model, self.tp, self.moe_ep, self.expert_tp)
        check_ep(self.model, self.moe_ep)
        moe = getattr(self.model, "moe", None)
        if moe is not None and self.expert_tp * self.moe_ep != self.group:
            raise Unshardable(f"tp {self.tp} x attention_dp {self.attention_dp} = {self.group} devices, "
                              f"but moe_tp {self.expert_tp} x ep {self.moe_ep} = "
                              f"{self.expert_tp * self.moe_ep}: the MoE layers must cover the same devices")
        if moe is not None and (moe.experts + self.redundant_experts) % self.moe_ep:
            raise Unshardable(f"expert-parallel degree {self.moe_ep} does not divide the "
                              f"{moe.experts} + {self.redundant_experts} redundant routed experts")
        stages(self.model.n_layers, self.pp)

    def shares(self) -> dict:
        """Each sharded symbol -> what one device holds of it (parallel.per_device's rules)."""
        return per_device(self.model, self.tp, self.moe_ep, self.expert_tp)

    # --- memory per device --------------------------------------------------------------

    def params_per_device(self, routed_only: bool | None = None) -> int:
        return params_per_device(self.model, self.tp, self.pp, self.moe_ep, self.expert_tp,
                                 self.redundant_experts, routed_only)

    def weight_bytes(self) -> int:
        """Weight bytes one device holds: its parameters (the busiest stage's, norms and, past
        n_kv, KV heads replicated) at the weights' format, the routed experts at theirs,
        rounded up."""
        if self.experts_format == self.weights or getattr(self.model, "moe", None) is None:
            return math.ceil(self.params_per_device() * quant.byte_value(self.weights))
        return (math.ceil(self.params_per_device(False) * quant.byte_value(self.weights))
                + math.ceil(self.params_per_device(True) * quant.byte_value(self.experts_format)))

    def kv_per_token(self):
        """KV-cache bytes one token keeps on one device, every layer at the full context (each
        attention-DP rank holds only its own sequences')."""
        return kvcache.per_token(self.model, quant.byte_value(self.kv_format), self.tp, self.pp, self.moe_ep)

    def kv_per_sequence(self, context):
        """KV-cache bytes one sequence of `context` tokens keeps on one device (NumPy works)."""
        return kvcache.per_sequence(self.model, quant.byte_value(self.kv_format), context,
                                    self.tp, self.pp, self.moe_ep)

    def largest_batch(self, capacity: int, context: int) -> int:
        """Sequences of `context` tokens one attention-DP rank holds beside its weights."""
        return max(0, (capacity - self.weight_bytes()) // self.kv_per_sequence(context))

    # --- the program one device runs, its collectives and the busiest rank ----------------

    def shard(self, program: Program) -> Program:
        """`program` as the busiest device runs it, with its collectives (see the module)."""
        return shard(program, self)

    def all_reduces(self) -> int:
        """The per-layer tensor-parallel all-reduces of one step (after o_proj and the MLP's
        down projection; one per layer for a parallel block); 0 at tp 1."""
        if self.tp == 1:
            return 0
        return (1 if self.model.block == "parallel" else ALL_REDUCES_PER_LAYER) * self.model.n_layers

    def dispatch_rows(self, tokens, top_k=k):
        """Rows of d_model one device sends in a MoE layer's dispatch (and the combine's
        return): its share tokens/tp of its attention-DP rank's tokens, k routed rows each, to
        each of an expert's moe_tp shards."""
        return tokens * top_k * sp.Rational(self.expert_tp, self.tp)

    @property
    def experts_held(self) -> int:
        """Routed experts one expert rank holds, redundant copies included."""
        return (self.model.moe.experts + self.redundant_experts) // self.moe_ep

    def busiest(self, tokens, bound: bool) -> tuple:
        """(rows, experts): the routed rows the busiest expert rank serves and the distinct
        experts it reads in one MoE layer at `tokens` per attention-DP rank (a number or a
        NumPy array), the one statement of the rule every step model asks:
        - `bound` (the least any routing costs): ceil(dp x tokens x k / ep) rows (pigeonhole:
          some rank serves at least its share of the routings) and ceil(k / ep) experts (a
          token reaches an expert at most once, so its k routings touch k distinct experts: all
          tokens routed to the same k, ceil(k / ep) of them on one rank), none at 0 tokens;
        - else a prediction under uniform routing: the mean dp x tokens x k / ep at the
          imbalance factor, and D(dp x tokens) / ep experts (D(n) = E(1 - (1 - k/E)^n),
          `model.moe.distinct`'s count, over E/rho hot experts under a model's skew), each
          clipped to what can be: at least the bound, at most the rank's own (each token
          routes to at most min(k, held) of the experts it holds; at most the experts held)."""
        moe, dp, ep = self.model.moe, self.attention_dp, self.moe_ep
        tokens = np.asarray(tokens, dtype=float)
        total = dp * tokens * moe.top_k
        rows = np.ceil(total / ep)
        experts = np.where(tokens > 0, float(-(-moe.top_k // ep)), 0.0)
        if bound:
            return rows, experts
        held = self.experts_held
        return (np.clip(self.imbalance * total / ep, rows, dp * tokens * min(moe.top_k, held)),
                np.clip(_distinct(self.model)(dp * tokens) / ep, experts, held))

    def routings(self, tokens) -> dict:
        """Routed rows per expert rank in one MoE layer at `tokens` per attention-DP rank, as a
        report states them: `total`, `mean` under uniform routing, and the busiest rank's
        (`busiest`): `bound` and `predicted` rows, `experts_bound` and `experts_predicted`."""
        total = self.attention_dp * tokens * self.model.moe.top_k
        (rows_b, experts_b), (rows_p, experts_p) = (self.busiest(tokens, bnd) for bnd in (True, False))
        return {"total": total, "mean": total / self.moe_ep, "bound": float(rows_b), "predicted": float(rows_p),
                "experts_bound": float(experts_b), "experts_predicted": float(experts_p)}

    def all_to_all_bytes(self, tokens, bytes_per_element) -> dict:
        """One MoE layer's dispatch (or combine: the same rows back) at `tokens` per
        attention-DP rank, under uniform routing (a prediction: a step routed all-local moves
        none): bytes one device sends to others, (N-1)/N of its rows, and receives on the mean
        and on the predicted busiest rank; `link`: scale-up while the N devices fit in one
        domain, else scale-out."""
        n = self.group
        rows = self.dispatch_rows(tokens, self.model.moe.top_k) * self.model.d_model * bytes_per_element
        off = float(rows * sp.Rational(n - 1, n))
        domain = getattr(self.device, "link_domain", None)
        return {"devices": n, "sent": off, "received": off, "received_busiest": self.imbalance * off,
                "link": "scale-up" if domain is None or n <= domain else "scale-out"}


@cache   # one NumPy function per model: the step models ask it per step
def _distinct(model):
    """`model.moe.distinct` in NumPy: expected distinct experts n tokens touch."""
    return sp.lambdify(M, distinct(model).xreplace(model_values(model)), "numpy")


def gemm_dtype(weights: str, device) -> str:
    """The dtype GEMMs reading weights stored in `weights` run at on `device` (quant.gemm_dtype:
    the format's own where the device has its tensor peak, else weight-only); no device: the
    format's own."""
    return quant.gemm_dtype(weights, lambda f: device is None or device.peak("matrix", f) is not None)


def _cost(cost: Cost | None, subs: dict) -> Cost | None:
    if cost is None:
        return None
    return Cost(cost.flops.xreplace(subs), tuple((c, e.xreplace(subs)) for c, e in cost.traffic))


def _partial_outputs(program: Program, model, dep) -> list[str]:
    """The ops whose [M, d_model] output is a partial sum over the tp devices: the row-parallel
    o and down projections (a MoE model's dense layers' too; each mixer family's output
    projection: a hybrid's out_proj, ssm_out_proj), and a MoE layer's combine when its experts
    are split by tp alone (no all-to-all) or it has shared experts split by tp."""
    names = {op.name for op in program.ops}
    moe = getattr(model, "moe", None)
    ffn = ["down_proj", "dense_down_proj"]
    if moe is not None and (not dep.all_to_all or moe.shared_experts):
        ffn.append("moe_combine")
    mixers = [base.output(next((p for k, _, p in members if k is base), ""))
              for base, _, members in kinds.families(model, "mixer")]
    layer = ffn if model.block == "parallel" else [*dict.fromkeys(["o_proj", *mixers]), *ffn]
    return [name for name in layer if name in names]


def collectives(program: Program, model, dep) -> tuple[Collective, ...]:
    """The forward pass's tensor-parallel collectives, after the ops whose outputs are partial."""
    names, tp = {op.name for op in program.ops}, dep.tp
    act = M * d_model * b
    out = []
    if "embedding" in names:
        out.append(Collective("embedding_all_reduce", "all_reduce", act, tp, "tp", tp,
                              after="embedding", why="vocabulary-parallel embedding: each device "
                              "holds V/tp rows, the others contribute zeros"))
    for name in _partial_outputs(program, model, dep):
        out.append(Collective(f"{name}_all_reduce", "all_reduce", act, tp, "tp", tp,
                              repeat=program.op(name).repeat, after=name, why="row-parallel: each "
                              "device holds a partial sum of the [M, d_model] output"))
    if "lm_head" in names:
        tokens = program.op("lm_head").crossing
        out.append(Collective("logits_all_gather", "all_gather", tokens * V * b, tp, "tp", tp,
                              after="lm_head", why="vocabulary-parallel LM head: each device "
                              "holds V/tp of every token's logits"))
    return tuple(out)


# the backward pass's conjugate of each row-parallel output's all-reduce: Megatron's f operator,
# the identity forward, an all-reduce of the input's gradient before the column-parallel GEMMs
_CONJUGATE = {"o_proj_all_reduce": ("attention_input_grad_all_reduce", "the gradient of the "
                                    "attention block's input, summed over the column-parallel q, k, v"),
              "down_proj_all_reduce": ("mlp_input_grad_all_reduce", "the gradient of the MLP's "
                                       "input, summed over the column-parallel gate and up"),
              "dense_down_proj_all_reduce": ("dense_mlp_input_grad_all_reduce", "the gradient of "
                                             "a dense layer's MLP input, summed over gate and up"),
              "moe_combine_all_reduce": ("moe_input_grad_all_reduce", "the gradient of a MoE "
                                         "layer's input, summed over the split experts")}


def backward_collectives(forward: tuple[Collective, ...]) -> tuple[Collective, ...]:
    """The per-layer all-reduces a training step adds in its backward pass (one per forward
    all-reduce of a layer: four per layer in all for a sequential block)."""
    return tuple(replace(c, name=_CONJUGATE[c.name][0], after="", why=_CONJUGATE[c.name][1])
                 for c in forward if c.name in _CONJUGATE)


def _busiest(cost: Cost | None, rows, weights) -> Cost | None:
    """A routed-expert op's cost on the busiest expert-parallel device: FLOPs and every
    traffic class but the weights times `rows`, the weights times `weights`."""
    if cost is None:
        return None
    return Cost(cost.flops * rows, tuple((c, e * (weights if c == "weights" else rows)) for c, e in cost.traffic))


def expert_collectives(model, dep) -> tuple[Collective, ...]:
    """Each MoE layer's dispatch and combine all-to-alls over the tp x attention_dp devices
    (`Deployment.dispatch_rows`: the rows one device sends, (N-1)/N of them to others under
    uniform routing)."""
    n, repeat = dep.group, repeats(model)[0]
    payload = dep.dispatch_rows(M) * d_model * b
    return (Collective("moe_dispatch_all_to_all", "all_to_all", payload, n, "ep", n,
                       repeat=repeat, after="router_topk", why="each token's k routed rows go to "
                       "the devices holding their experts (each of an expert's moe_tp shards)"),
            Collective("moe_combine_all_to_all", "all_to_all", payload, n, "ep", n,
                       repeat=repeat, after="expert_down_proj", why="the experts' outputs return "
                       "to their tokens' devices for the weighted combine"))


def split_experts(program: Program, model, dep) -> Program:
    """`program` as the busiest expert device runs its routed experts: unchanged unless
    attention DP or expert parallelism spreads the MoE layer's tokens (see the module)."""
    if not dep.all_to_all:
        return program
    dp, ep, moe = dep.attention_dp, dep.moe_ep, model.moe
    rows, experts = M * k, distinct(model)
    share = (sp.ceiling(dp * rows / ep) / rows, sp.ceiling(experts.xreplace({M: dp * M}) / ep) / experts)
    ops = tuple(replace(op, cost=_busiest(op.cost, *share), epilogue=_busiest(op.epilogue, *share))
                if routed(op) else op for op in program.ops)
    held = dep.experts_held
    tokens = "M*k" if dp == 1 else f"{dp}*M*k (attention DP {dp}: M tokens per rank)"
    stated = (("expert parallelism", f"ep = {ep}, moe_tp = {dep.expert_tp}: the {moe.experts} "
               f"routed experts{f' and {dep.redundant_experts} redundant copies' if dep.redundant_experts else ''} "
               f"placed {held} per expert rank, each expert's width over moe_tp devices; a step waits for its "
               f"busiest device, which serves at least ceil({tokens}/ep) of the routings and reads at least "
               "ceil(D/ep) of the D distinct experts the step touches (pigeonhole; D as the expert GEMMs "
               "count it, exactly k at one token): the routed-expert ops are that device's; attention, "
               "router, dense layers and shared experts replicated over attention DP (split by tp); a "
               "dispatch and a combine all-to-all per MoE layer (bytes under uniform routing)"),
              ("expert parallelism, mean device (a prediction)", f"under uniform routing the mean "
               f"device serves {tokens}/ep routings and reads D/ep experts; the step still waits for the "
               f"busiest, whose load exceeds the mean by the routing's imbalance (predicted at "
               f"{dep.imbalance:g} x the mean{'; redundant experts as in DeepSeek EPLB even it out' if dep.redundant_experts else ''})"),)
    return verify(replace(program, ops=ops, conventions=program.conventions + stated,
                          collectives=program.collectives + expert_collectives(model, dep)))


def _kind_heads(model) -> str:
    """The layer kinds' own sharded symbols, as the stated convention names them."""
    own = [str(s) for kind in kinds.kinds_of(model) for s in kind.shards(model, 2)]
    return f" (or the layer kinds' {', '.join(own)})" if own else ""


def shard(program: Program, dep) -> Program:
    """`program` as one device of deployment `dep` runs it, with its collectives; unchanged
    on one device."""
    model, tp = dep.model, dep.tp
    subs = dep.shares()
    if tp == 1:
        ops = tuple(replace(op, cost=_cost(op.cost, subs), epilogue=_cost(op.epilogue, subs))
                    for op in program.ops) if subs else program.ops
        return split_experts(replace(program, ops=ops) if subs else program, model, dep)
    ops = tuple(replace(op, cost=_cost(op.cost, subs), epilogue=_cost(op.epilogue, subs))
                for op in program.ops)
    kv = (f"KV heads replicated: {model.n_kv_heads} KV heads over {tp} devices, each keeps one"
          if kv_replicated(model, tp) else f"{model.n_kv_heads // tp} KV head{'s' if model.n_kv_heads // tp > 1 else ''} per device")
    moe = getattr(model, "moe", None)
    experts = "" if moe is None else (
        "; each routed expert's width d_e and the shared experts' d_s split too, the router whole"
        if not dep.all_to_all else "; the shared experts' width d_s splits, routed experts placed by ep")
    stated = (("tensor parallelism", f"tp = {tp} (Megatron-LM): q/k/v and gate/up "
               "column-parallel, o and down row-parallel, embedding and LM head vocabulary-parallel; "
               f"{kv}; every op written over n_q, n_kv, d_ff or V{_kind_heads(model)} (declared operators too) divides by tp, "
               f"norms and residual adds run whole on every device{experts}"),)
    return split_experts(verify(replace(program, ops=ops, conventions=program.conventions + stated,
                                        collectives=collectives(program, model, dep))), model, dep)


# --- parameters per device ---------------------------------------------------------------

def _layers_in(model, c, first: int, stop: int) -> int:
    """How many copies of per-layer component `c` layers first .. stop - 1 hold."""
    if c.layers == "moe":
        return model.moe.moe_layers(first, stop)
    if c.layers == "dense":   # a MoE model's dense layers, or a hybrid's layers with an MLP (kinds.bare)
        if model.moe is None:
            return dict((kind.name, n) for kind, n in kinds.counts(model, "ffn", first, stop)).get("dense", 0)
        return model.moe.dense_layers(stop, first)
    return stop - first


def stage_params(model, tp: int, pp: int = 1, ep: int = 1, moe_tp: int | None = None,
                 redundant: int = 0, routed_only: bool | None = None) -> tuple[list, sp.Expr]:
    """Parameters one device of each pipeline stage holds in its layers (exact numbers, tp
    shards and (E + redundant)/ep of the routed experts at 1/moe_tp of their width), and those
    outside the layers (embeddings, final norm, LM head); the stages and the rest sum to the
    model's parameters on one device. `routed_only`: True counts the routed experts' weight
    matrices alone, False all but them (their biases included)."""
    if ep > 1:
        check_ep(model, ep)
    shard, values = per_device(model, tp, ep, moe_tp), model_values(model)
    layered, once = [], sp.Integer(0)
    for c in count(model).components:
        if c.group == "mtp":   # multi-token-prediction modules: held only by a speculative draft
            continue
        # routed_only splits the routed experts' matrices from everything else, their biases
        # included (stored beside a block format, as gpt-oss's checkpoint does)
        routed_part = {None: c.per, True: c.per - c.biases, False: c.biases}[routed_only] \
            if c.name == "experts" else (c.per if routed_only is not True else 0)
        if routed_part == 0:
            continue
        held = sp.Rational(model.moe.experts + redundant, model.moe.experts * ep) if c.name == "experts" else 1
        per = sp.sympify(routed_part).xreplace(shard).subs(values) * held
        if c.layers or c.repeat == L:
            layered.append((c, per))
        else:
            once += per * c.repeat.subs(values)
    return [sum((per * _layers_in(model, c, first, stop) for c, per in layered), sp.Integer(0))
            for first, stop in stages(model.n_layers, pp)], once


@cache   # a pure function of a frozen model and counts; the planner asks it per format of each split
def params_per_device(model, tp: int, pp: int = 1, ep: int = 1, moe_tp: int | None = None,
                      redundant: int = 0, routed_only: bool | None = None) -> int:
    """Parameters one device holds: its tensor-parallel shard of the busiest pipeline stage's
    layers, with the embedding and LM head on that same stage (an upper bound for pp > 1,
    where they sit on the first and last); norms and, past n_kv, KV heads are replicated;
    (E + redundant)/ep of the routed experts, each at 1/moe_tp of its width."""
    layered, once = stage_params(model, tp, pp, ep, moe_tp, redundant, routed_only)
    return int(max(layered) + once)
