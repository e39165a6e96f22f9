"""The IR: costs, operators and programs. Symbolic only; numbers enter in evaluate."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

import sympy as sp

from rooflinec.base import budget

from rooflinec.model import symbols as sym

from rooflinec.base.vocabulary import CATEGORIES, TRAFFIC_CLASSES, UNITS  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class Cost:
    """FLOPs and HBM traffic of one kernel launch, split by traffic class."""

    flops: sp.Expr
    traffic: tuple[tuple[str, sp.Expr], ...] = ()

    @staticmethod
    def of(flops, **traffic) -> Cost:
        return Cost(sp.sympify(flops), tuple((k, sp.sympify(v)) for k, v in traffic.items() if v != 0))

    @property
    def bytes(self) -> sp.Expr:
        return sp.Add(*(e for _, e in self.traffic))

    def bytes_of(self, cls: str) -> sp.Expr:
        return sp.Add(*(e for c, e in self.traffic if c == cls))

    def __add__(self, other: Cost) -> Cost:
        merged: dict[str, sp.Expr] = dict(self.traffic)
        for cls, expr in other.traffic:
            merged[cls] = merged.get(cls, 0) + expr
        return Cost(self.flops + other.flops, tuple(merged.items()))

    def __mul__(self, k) -> Cost:
        return Cost(self.flops * k, tuple((c, e * k) for c, e in self.traffic))

    __rmul__ = __mul__


@lru_cache(maxsize=4096)
def factoring(expr: sp.Expr) -> tuple[sp.Expr, bool]:
    """sp.factor, once per expression (phases, variants and analyses share many costs), and
    whether it ran: past its size budget (rooflinec.base.budget.may_factor), the expression as
    written and False."""
    if not budget.may_factor(expr):
        return expr, False
    return sp.factor(expr), True


def factored(expr: sp.Expr) -> sp.Expr:
    return factoring(expr)[0]


@lru_cache(maxsize=None)
def intensity(cost: Cost) -> sp.Expr:
    """FLOPs per byte, simplified; zero for pure data movement."""
    if cost.flops == 0:
        return sp.Integer(0)
    return factored(cost.flops / cost.bytes)   # factor cancels common factors itself


@dataclass(frozen=True)
class Op:
    name: str            # q_proj, attention, ...
    formula: str         # the registered formula that built the cost
    category: str        # one of CATEGORIES
    unit: str            # matrix units (tensor peak) or vector units
    cost: Cost
    repeat: sp.Expr = sp.Integer(1)   # L for per-layer ops, 1 for once-per-model ops
    shape: str = ""      # shape algebra, e.g. "X[M,d_model] @ W[d_model,n_q*d_head]"
    crossing: sp.Symbol | None = None  # the workload knob that moves it across the ridge
    into: str = ""       # an elementwise op: the earlier op whose kernel it can run inside
    epilogue: Cost | None = None       # its cost when it runs inside `into` (the fused variant)
    absorbed: tuple[str, ...] = ()     # ops a pass folded into this one
    tiles: object = None                # FlashAttention's tile sizes, where the pass chose them
    dtype: str = ""      # the format it computes in where that is its own, not the study's (DSA's
    #                      indexer scores in fp8): the workbench's `op_dtype` takes its peak

    @property
    def per_layer(self) -> bool:
        """Runs in decoder layers (repeat L, or L less the dense layers of a MoE model)."""
        return sym.L in self.repeat.free_symbols

    @property
    def label(self) -> str:
        return " + ".join((self.name, *self.absorbed))

    def with_cost(self, cost: Cost, **changes) -> Op:
        return replace(self, cost=cost, **changes)


@dataclass(frozen=True)
class Program:
    """The ops of one model in one phase and variant; per-layer ops carry repeat = L."""

    model: str
    phase: str
    variant: str
    ops: tuple[Op, ...]
    bindings: dict = field(default_factory=dict)   # derived symbols, e.g. {M: B} in decode
    conventions: tuple[tuple[str, str], ...] = ()  # (key, stated choice) pairs for the report
    symbols: tuple[sp.Symbol, ...] = ()            # the model's own dimensions beyond the alphabet
    collectives: tuple = ()                        # collectives.Collective, per device (tp > 1)

    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)


class IRError(Exception):
    """A program broke an invariant of the IR: a bug in lowering or a pass, not in a spec."""


def verify(program: Program, alphabet: dict[str, sp.Symbol] | None = None) -> Program:
    """Check a program's invariants; return it unchanged so calls can chain."""
    allowed = set((alphabet or sym.ALPHABET).values()) | set(program.symbols)
    seen: set[str] = set()
    for op in program.ops:
        where = f"{program.model}/{program.phase}/{program.variant}: op {op.name!r}"
        if op.name in seen:
            raise IRError(f"{where}: duplicate name")
        seen.add(op.name)
        if op.category not in CATEGORIES:
            raise IRError(f"{where}: unknown category {op.category!r}")
        if op.unit not in UNITS:
            raise IRError(f"{where}: unknown unit {op.unit!r}")
        for cls, _ in op.cost.traffic:
            if cls not in TRAFFIC_CLASSES:
                raise IRError(f"{where}: unknown traffic class {cls!r}")
        for expr in (op.cost.flops, op.cost.bytes, op.repeat):
            stray = expr.free_symbols - allowed
            if stray:
                raise IRError(f"{where}: symbols outside the alphabet: {sorted(map(str, stray))}")
        if op.cost.bytes == 0:
            raise IRError(f"{where}: moves no bytes")
        if op.into and (op.into not in seen or op.epilogue is None):
            raise IRError(f"{where}: runs inside {op.into!r}, which must come earlier, with an epilogue cost")
    return program
