"""The workbench: every study-wide fact with one owner.

For one study it holds the numbers the symbols take, the resolved devices, the peak an op
runs against (one exception, located at the device, when a device lacks a figure), the
ridge and the roofline of a cost (by rooflinec.base.roofline's laws), the bound rules, and the programs per (phase, variant,
device), lowered and rewritten once. Analyses take typed options, call the workbench and
return section data; nothing else repeats these facts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from dataclasses import replace

from rooflinec.cost import collectives as C
from rooflinec.cost import parallel as par
from rooflinec.cost import kvcache
from rooflinec.cost.deployment import Deployment
from rooflinec.model import passes, quant
from rooflinec.model import symbols as sym
from rooflinec.model import symbol_table
from rooflinec.base.roofline import Roofline, ridge, roofline, transfer_time
from rooflinec.cost.derive import exact
from rooflinec.base.errors import DeviceLacks, Problem, SpecError
from rooflinec.cost.evaluate import number
from rooflinec.model.ir import Op, Program
from rooflinec.model.lower import Conventions, lower
from rooflinec.spec.options import convention_defaults, parallel_defaults
from rooflinec.spec.load import Study
from rooflinec.cost.efficiency import fit_tokens, step_terms

# --- peaks ----------------------------------------------------------------------------


def peak(device, unit: str, dtype: str, needed_by: str) -> float:
    """The peak an op on `unit` runs against at `dtype` (vector falls back to fp32)."""
    value = device.peak(unit, dtype)
    if value is None:
        figure = f"{unit} peak for {dtype}" + (" (nor fp32)" if unit == "vector" else "")
        field = "compute.tensor" if unit == "matrix" else "compute.vector"
        raise DeviceLacks(device, figure, field, needed_by)
    return value


# --- ledgers: one row per op ------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    op: Op
    count: int            # launches: L for a layer op over the whole model, else 1
    flops: float
    bytes: float
    traffic: dict         # bytes by traffic class
    unit_peak: float
    roof: Roofline
    flops_share: float = 0.0
    time_share: float = 0.0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


@dataclass(frozen=True)
class Ledger:
    """A program on a device at one workload point; its time is the per-op sum."""

    program: Program
    device: object
    dtype: str
    workload: dict        # symbol name -> number
    scope: str            # "layer" or "model"
    rows: tuple[Row, ...]
    peak: float           # the tensor peak at `dtype`

    @property
    def flops(self) -> float:
        return sum(r.flops for r in self.rows)

    @property
    def bytes(self) -> float:
        return sum(r.bytes for r in self.rows)

    @property
    def time(self) -> float:
        return sum(r.roof.time for r in self.rows)

    def traffic(self, cls: str) -> float:
        return sum(r.traffic.get(cls, 0) for r in self.rows)

    @property
    def attainable(self) -> float:
        """Fraction of the tensor peak the whole ledger can reach: (FLOPs / peak) / time."""
        return self.flops / self.peak / self.time


@dataclass(frozen=True)
class CommRow:
    """One collective of a program on a device at one workload point, all its launches."""

    collective: C.Collective
    count: int            # launches: L for a per-layer collective over the whole model
    payload: float        # bytes of one launch's whole tensor
    volume: float         # bytes the busiest device sends, all launches, under `algorithm`
    link: C.Link
    bandwidth_s: float    # volume / link bandwidth
    latency_s: float      # steps x link latency
    algorithm: str = C.RING   # what timed it: the ring (expected) or the least time (a bound's)

    @property
    def time(self) -> float:
        return self.bandwidth_s + self.latency_s

    @property
    def latency_bound(self) -> bool:
        return self.latency_s > self.bandwidth_s


# --- the workbench ----------------------------------------------------------------------


class Workbench:
    """What every analysis needs of its study, each fact computed in one place."""

    def __init__(self, study):
        self.study = study
        self.model = study.model
        self.devices = study.devices
        self.dtype = study.dtype
        self._programs: dict = {}
        self.named = study.devices   # the devices an option may name, left-out ones included

    @classmethod
    def of(cls, model, devices=(), dtype: str = "bf16", conventions: dict | None = None,
           quantization: dict | None = None) -> Workbench:
        """A workbench without a study file (tests, the benchmark): problems cannot be located."""
        return cls(Study("", "", "", model, tuple(devices), dtype, dict(conventions or {}),
                         quantization=dict(quantization or {})))

    def without(self, device) -> Workbench:
        """The same study less one device (a section it lacks a figure for); programs are
        shared, since each is keyed by its device."""
        bench = Workbench(replace(self.study, devices=tuple(d for d in self.devices if d is not device)))
        bench._programs, bench.named = self._programs, self.named
        return bench

    def problem(self, path: tuple, message: str) -> Problem:
        return self.study.doc.problem(path, message)

    # symbols and their numbers

    @cached_property
    def conventions(self) -> Conventions:
        return Conventions(**{**convention_defaults(), **self.study.conventions})

    @cached_property
    def parallel(self) -> par.Parallel:
        """The study's `parallel` block; a degree that does not divide the model, located."""
        p = par.Parallel(**{**parallel_defaults(), **self.study.parallel})
        try:
            par.check_ep(self.model, p.ep)
        except par.Unshardable as exc:
            raise SpecError([self.problem(("parallel", "ep"), f"{exc}; pick a degree that divides "
                                          "the routed experts, or leave ep at 1")]) from None
        try:
            if self.model is not None:
                par.stages(self.model.n_layers, p.pp)
        except par.Unshardable as exc:
            raise SpecError([self.problem(("parallel", "pp"), f"{exc}; pick fewer stages")]) from None
        self._check(p, p.tp, ("parallel", "tp"))
        return p

    def _deployment(self, p: par.Parallel, tp: int, weights: str | None = None,
                    kv_cache: str | None = None, experts: str | None = None) -> Deployment:
        return Deployment(self.model, None, tp, weights or self.storage("weights"), kv_cache,
                          attention_dp=p.attention_dp, moe_tp=p.moe_tp or None, moe_ep=p.ep, pp=p.pp,
                          experts=experts)

    def _check(self, p: par.Parallel, tp: int, path: tuple) -> None:
        if self.model is None:
            return
        try:
            self._deployment(p, tp).check()
        except par.Unshardable as exc:
            msg, given = str(exc), self.study.parallel
            if "must cover" in msg:
                key = next((k for k in ("attention_dp", "moe_tp", "ep") if k in given), "ep")
                raise SpecError([self.problem(("parallel", key), f"{msg}; set attention_dp and moe_tp so "
                                              "that tp x attention_dp = moe_tp x ep")]) from None
            where = ("parallel", "moe_tp") if "(moe_tp)" in msg and "moe_tp" in given else path
            raise SpecError([self.problem(where, f"{msg}; pick a degree that divides them")]) from None

    def check_tp(self, tp: int, path: tuple) -> None:
        """A tp that does not divide the model (or, with the study's attention DP and expert
        parallelism, does not fill the MoE layers' devices), located at `path`."""
        self._check(self.parallel, tp, path)

    def storage(self, cls: str, dtype: str | None = None, formats: dict | None = None) -> str:
        """The format tensor class `cls` (weights, kv_cache, activations) is stored in:
        `formats` (a sweep's point), else the study's `quantization` for it, else the compute
        dtype. Routed experts not stored otherwise follow the weights."""
        stored = {**self.study.quantization, **(formats or {})}
        if cls == quant.EXPERTS and cls not in stored:
            cls = "weights"
        return stored.get(cls, dtype or self.dtype)

    def weights_format(self) -> str:
        """The weights' format as a report names it: the routed experts' beside it where the
        study stores them otherwise (gpt-oss: "bf16, routed experts mxfp4")."""
        weights, experts = self.storage("weights"), self.storage(quant.EXPERTS)
        moe = getattr(self.model, "moe", None) is not None
        return weights if experts == weights or not moe else f"{weights}, routed experts {experts}"

    def values_for(self, dtype: str | None = None, formats: dict | None = None) -> dict:
        """Model dimensions and bytes per element with compute at `dtype` (the study's by
        default): b for activations, b_w and b_kv for weights and KV cache, each at its storage
        format; the workload symbols stay free."""
        model = symbol_table.model_values(self.model) if self.model is not None else {}
        return {**model, sym.b: quant.byte_value(self.storage(quant.ACTIVATIONS, dtype, formats)),
                **{s: quant.byte_value(self.storage(cls, dtype, formats))
                   for cls, s in quant.CLASS_SYMBOLS.items()},
                **{s: quant.dequant_flops(self.storage(cls, dtype, formats), dtype or self.dtype)
                   for cls, s in quant.DEQUANT_SYMBOLS.items()}}

    @cached_property
    def values(self) -> dict:
        return self.values_for()

    def at(self, workload: dict, bindings: dict, dtype: str | None = None) -> dict:
        """Values of every symbol at one workload point; bound symbols (M) follow their binding."""
        values = {**self.values_for(dtype), **workload}
        for s, expr in bindings.items():
            values[s] = number(expr, values)
        return values

    # memory fit: weights and the KV cache only (activations and workspace left out), on one
    # device: its share when the study's `parallel` block splits the model

    def deployment(self, tp: int | None = None, dtype: str | None = None,
                   formats: dict | None = None) -> Deployment:
        """How the study runs its model: the `parallel` block's degrees (`tp`: instead of
        its tp) and each tensor class's storage format (`formats`: a sweep's point)."""
        p = self.parallel
        return self._deployment(p, tp or p.tp, self.storage("weights", dtype, formats),
                                self.storage("kv_cache", dtype, formats),
                                self.storage(quant.EXPERTS, dtype, formats))

    def weight_bytes(self, dtype: str | None = None, formats: dict | None = None,
                     tp: int | None = None) -> int:
        """Weight bytes one device holds, at the weights' format (`tp`: instead of the study's)."""
        return self.deployment(tp, dtype, formats).weight_bytes()

    @cached_property
    def kv_formula(self):
        """Cache bytes per token: K and V (a latent-attention model's latent and rotary key),
        plus what the model's declared operators keep."""
        return kvcache.formula(self.model)

    def kv_per_token(self, dtype: str | None = None, formats: dict | None = None,
                     tp: int | None = None) -> int:
        """KV-cache bytes of one token on one device at the KV cache's format, every layer at
        the full context (windowed layers hold fewer: kv_per_sequence counts them)."""
        return math.ceil(self.deployment(tp, dtype, formats).kv_per_token())

    def kv_per_sequence(self, context, dtype: str | None = None, formats: dict | None = None,
                        tp: int | None = None):
        """KV-cache bytes of one sequence of `context` tokens on one device (NumPy arrays work)."""
        return self.deployment(tp, dtype, formats).kv_per_sequence(context)

    def memory_needed(self, batch, context, dtype: str | None = None, formats: dict | None = None):
        """Bytes of weights plus B sequences of S tokens of KV cache (NumPy arrays work too)."""
        return self.weight_bytes(dtype, formats) + batch * self.kv_per_sequence(context, dtype, formats)

    def fits(self, device, batch, context, dtype: str | None = None) -> bool:
        return self.memory_needed(batch, context, dtype) <= device.capacity

    def largest_batch(self, device, context: int, dtype: str | None = None) -> int:
        """Largest batch whose sequences of `context` tokens all fit beside the weights."""
        return fit_tokens(device.capacity, self.weight_bytes(dtype), self.kv_per_sequence(context, dtype))

    # devices

    def device(self, path: tuple, key: str | None):
        """One of the study's devices by key; with no key, the study's only device."""
        keys = [d.key for d in self.named]
        if key is None and len(self.named) == 1:
            return self.named[0]
        if key in keys:
            return self.named[keys.index(key)]
        what = "name the device this uses" if key is None else f"'{key}' is not a device of this study"
        raise SpecError([self.problem(path, f"{what}; the study's devices: {', '.join(keys)}")])

    def device_problems(self, path: tuple, keys) -> list[Problem]:
        """A located problem for each of `keys` (written at `path`) that names no device."""
        known = [d.key for d in self.named]
        return [self.problem(path + (i,), f"'{k}' is not a device of this study; its devices: "
                                          f"{', '.join(known)}")
                for i, k in enumerate(keys) if k not in known]

    def devices_named(self, path: tuple, keys) -> list:
        """The study's devices named by `keys` (all of them if none), in the study's order."""
        problems = self.device_problems(path, keys or [])
        if problems:
            raise SpecError(problems)
        return [d for d in self.devices if not keys or d.key in keys]

    def peak(self, device, unit: str, dtype: str | None = None, needed_by: str = "this study"):
        return peak(device, unit, dtype or self.dtype, needed_by)

    def op_dtype(self, device, op: Op, dtype: str | None = None) -> str:
        """The dtype `op` computes in on `device`: its own where it has one and the device lists
        that peak (DSA's indexer: fp8), else the study's (`dtype` where a sweep gives another);
        a device lacking the op's own peak is warned about where the study names it
        (spec.load: `Kind.dtypes`)."""
        if op.dtype and device.peak(op.unit, op.dtype) is not None:
            return op.dtype
        return dtype or self.dtype

    def op_peak(self, device, op: Op, dtype: str | None = None):
        """The peak `op` runs against; pure data movement (no FLOPs) needs none: infinity."""
        dtype = self.op_dtype(device, op, dtype)
        if device.peak(op.unit, dtype) is None and op.cost.flops == 0:
            return math.inf
        return self.peak(device, op.unit, dtype, f"op '{op.name}'")

    def ridge(self, device, unit: str = "matrix"):
        """The exact ridge of `unit` on `device` (rationals: crossings are solved exactly)."""
        return ridge(exact(self.peak(device, unit)), exact(device.bandwidth))

    # programs

    def program(self, phase: str, variant: str = "unfused", device=None, tp: int | None = None,
                conventions: Conventions | None = None) -> Program:
        """The lowered program of `phase` after the passes of `variant`, as one of `tp`
        devices runs it (the study's tp by default), built once; the passes that need a
        device (FlashAttention's tiles) get `device`. `conventions`: other choices than the
        study's (training counts the logits of every token)."""
        tp = self.parallel.tp if tp is None else tp
        conv = conventions or self.conventions
        key = (phase, variant, device.key if device is not None else None, conv, tp)
        if key not in self._programs:
            whole = key[:4] + ("whole",)   # one device's whole program, before any split
            if whole not in self._programs:
                naive = (phase, "unfused", None, conv, "naive")
                if naive not in self._programs:
                    self._programs[naive] = lower(self.model, phase, conv)
                target = passes.Target(device, conv, self.model.head_dim, self.values[sym.b])
                self._programs[whole] = quant.retype(passes.apply(self._programs[naive], variant, target),
                                                     tuple(self.study.quantization))
            self._programs[key] = self.deployment(tp).shard(self._programs[whole])
        return self._programs[key]

    # links between devices

    def link(self, device, span: int, needed_by: str) -> C.Link:
        """The link a group of `span` devices talks over: the scale-up link while the group
        fits in one scale-up domain, else the scale-out network (with the domain's size and
        the scale-up port beside it: the least time past the domain, `collectives.least_rate`,
        counts the domain's NICs together)."""
        domain = device.link_domain
        if device.link_bandwidth is not None and (domain is None or span <= domain):
            return C.Link(device.link, device.link_bandwidth, device.link_latency)
        if device.network_bandwidth is not None:
            return C.Link(device.network, device.network_bandwidth, device.network_latency,
                          domain, device.link_bandwidth)
        if device.link_bandwidth is None:
            raise DeviceLacks(device, "scale-up interconnect", "interconnect", needed_by)
        raise DeviceLacks(device, f"scale-out network (its scale-up domain joins {domain} devices, "
                                  f"the group {span})", "scale_out", needed_by)

    def communication(self, program: Program, device, workload: dict,
                      dtype: str | None = None, algorithm: str = C.RING) -> tuple[CommRow, ...]:
        """Every collective of `program` at one workload point, timed by `algorithm`: the ring
        model (C.RING, the expected time: ledgers, parallel_view, training) or the least time
        any correct algorithm takes (C.LEAST, `collectives.least_time`: every bound)."""
        values = self.at(workload, program.bindings, dtype)
        rows = []
        for c in program.collectives:
            count = int(number(c.repeat, values))
            link = self.link(device, c.span, f"the {c.kind.replace('_', '-')} '{c.name}'")
            volume = count * number(c.volume_under(algorithm), values)
            rate = link.bandwidth if algorithm == C.RING else float(C.least_rate(c.kind, c.devices, link))
            rows.append(CommRow(c, count, number(c.payload, values), volume, link,
                                transfer_time(volume, rate),
                                count * c.steps_under(algorithm) * (link.latency or 0.0), algorithm))
        return tuple(rows)

    # evaluation

    def ledger(self, program: Program, device, workload: dict, scope: str = "model",
               dtype: str | None = None) -> Ledger:
        """One row per op; scope "layer" keeps one decoder layer, "model" all L layers + the rest."""
        dtype = dtype or self.dtype
        values = self.at(workload, program.bindings, dtype)
        rows = []
        for op in program.ops:
            if scope == "layer" and not op.per_layer:
                continue
            count = int(number(op.repeat, values)) if scope == "model" else 1
            traffic = {cls: count * number(e, values) for cls, e in op.cost.traffic}
            flops, nbytes = count * number(op.cost.flops, values), sum(traffic.values())
            unit_peak = self.op_peak(device, op, dtype)
            rows.append(Row(op, count, flops, nbytes, traffic, unit_peak,
                            roofline(flops, nbytes, unit_peak, device.bandwidth)))
        total_f = sum(r.flops for r in rows) or 1
        total_t = sum(r.roof.time for r in rows) or 1
        rows = [Row(r.op, r.count, r.flops, r.bytes, r.traffic, r.unit_peak, r.roof,
                    r.flops / total_f, r.roof.time / total_t) for r in rows]
        return Ledger(program, device, dtype, {s.name: v for s, v in workload.items()}, scope,
                      tuple(rows), self.peak(device, "matrix", dtype))

    def step_terms(self, phase: str, variant: str, device, conventions: Conventions | None = None):
        """The two terms of `phase`'s whole step on `device` under the overlapped rule
        (`conventions`: other choices than the study's, e.g. a bound's lower.LEAST_WORK)."""
        program = self.program(phase, variant, device, conventions=conventions)
        return step_terms(program, self.values,
                          lambda op: exact(self.peak(device, op.unit, self.op_dtype(device, op),
                                                     f"the {phase} op '{op.name}'")),
                          device.bandwidth)
