"""Variants are passes: a table from variant name to Program -> Program rewrites (STYLE 7).

unfused  the naive program as lowered
fused    bias, activation and residual run in the epilogue of the GEMM that produces their
         input: their FLOPs stay, the intermediate HBM round trip goes
flash    fused, and the attention steps become one kernel (FlashAttention in prefill, one
         read of Q, K, V and one write of O in decode)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sympy as sp

from rooflinec import flash
from rooflinec.ir import Program, verify
from rooflinec.lower import Conventions


@dataclass(frozen=True)
class Target:
    """What a pass may need beyond the program: the device, conventions, model numbers."""

    device: object = None
    conventions: Conventions = Conventions()
    head_dim: int | None = None
    bytes_per_element: float | None = None

    @property
    def tiles(self) -> flash.Blocks | None:
        sram = flash.sram_elements(self.device, self.bytes_per_element)
        return None if sram is None else flash.blocks(sram, self.head_dim, self.device)


def fuse_epilogues(program: Program, target: Target) -> Program:
    """Fold every op that names an `into` producer into that producer's kernel."""
    ops, where = [], {}
    for op in program.ops:
        if not op.into:
            where[op.name] = len(ops)
            ops.append(op)
            continue
        i = where[op.into]
        host = ops[i]
        ops[i] = host.with_cost(host.cost + op.epilogue, formula=f"{host.formula}+{op.formula}",
                                absorbed=host.absorbed + (op.name,))
    return replace(program, ops=tuple(ops))


class NoOnChipMemory(ValueError):
    """The flash variant in prefill needs the device's SRAM per SM."""


def flash_attention(program: Program, target: Target) -> Program:
    """Replace the unfused attention steps (every op touching the score matrix) by one kernel."""
    steps = flash.score_ops(program)
    if not steps:
        return program
    if program.phase == "prefill" and target.tiles is None:
        raise NoOnChipMemory(getattr(target.device, "key", "no device"))
    half = sp.Rational(1, 2) if target.conventions.causal_halving else 1
    attention = flash.kernel(program.phase, half, target.tiles)
    first = program.ops.index(steps[0])
    kept = [op for op in program.ops if op not in steps]
    return replace(program, ops=tuple(kept[:first]) + (attention,) + tuple(kept[first:]))


VARIANTS = {
    "unfused": (),
    "fused": (fuse_epilogues,),
    "flash": (fuse_epilogues, flash_attention),
}


def apply(program: Program, variant: str, target: Target = Target()) -> Program:
    for rewrite in VARIANTS[variant]:
        program = rewrite(program, target)
    return verify(replace(program, variant=variant))
