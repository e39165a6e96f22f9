"""Variants are passes: a table from variant name to Program -> Program rewrites.

unfused  the naive program as lowered
fused    bias, activation and residual run in the epilogue of the GEMM that produces their
         input: their FLOPs stay, the intermediate HBM round trip goes
flash    fused, and the attention steps become one kernel (FlashAttention in prefill, one
         read of Q, K, V and one write of O in decode)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rooflinec import flash
from rooflinec.errors import DeviceLacks
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
        return None if sram is None else flash.blocks(sram, self.head_dim)


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


def flash_attention(program: Program, target: Target) -> Program:
    """Replace the unfused attention steps (every op touching the score matrix) by one kernel."""
    steps = flash.score_ops(program)
    if not steps:
        return program
    tiles = target.tiles if program.phase == "prefill" else None
    if program.phase == "prefill" and tiles is None:
        if target.device is None:
            raise ValueError("the flash variant in prefill needs a device for its tiles")
        raise DeviceLacks(target.device, "on_chip.sram_per_sm", "on_chip",
                          "FlashAttention's prefill tiles (the 'flash' variant; 'fused' needs none)")
    attention = flash.kernel(program.phase, target.conventions.causal_fraction(program.phase), tiles)
    first = program.ops.index(steps[0])
    kept = [op for op in program.ops if op not in steps]
    return replace(program, ops=tuple(kept[:first]) + (attention,) + tuple(kept[first:]))


DEFAULT_VARIANT = "flash"   # the best implementation rooflinec models: figures are lower bounds

VARIANTS = {
    "unfused": (),
    "fused": (fuse_epilogues,),
    "flash": (fuse_epilogues, flash_attention),
}


def apply(program: Program, variant: str, target: Target = Target()) -> Program:
    for rewrite in VARIANTS[variant]:
        program = rewrite(program, target)
    return verify(replace(program, variant=variant))
