"""Variants are passes: a table from variant name to Program -> Program rewrites.

unfused  the naive program as lowered
fused    bias, activation and residual run in the epilogue of the GEMM that produces their
         input: their FLOPs stay, the intermediate HBM round trip goes
flash    fused, and the attention steps become one kernel (FlashAttention's Algorithm 1 from
         one SM's SRAM in prefill, one read of Q, K, V and one write of O in decode)
ideal    fused, and the attention steps become one kernel that moves only compulsory traffic
         (Q and O once per query head, K and V once per KV head) in both phases
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rooflinec.model import flash, window
from rooflinec.model.symbols import S
from rooflinec.base.errors import VariantLacks
from rooflinec.model.ir import Program, verify
from rooflinec.model.lower import Conventions


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


def _one_kernel(program: Program, make) -> Program:
    """Replace the unfused attention steps (every op touching the score matrix) by the one
    kernel `make(keys, prefix, repeat)` builds, where the first of them stood; windowed
    layers' steps (rooflinec.model.window) become a kernel of their own."""
    steps = flash.score_ops(program)
    if not steps:
        return program
    first = program.ops.index(steps[0])
    kernels = []
    for prefix in dict.fromkeys(window.PREFIX if op.name.startswith(window.PREFIX) else "" for op in steps):
        group = [op for op in steps if op.name.startswith(window.PREFIX) == bool(prefix)]
        windowed = any(window.W in op.cost.bytes.free_symbols for op in group)
        kernels.append(make(window.keys() if windowed else S, prefix, group[0].repeat))
    kept = [op for op in program.ops if op not in steps]
    return replace(program, ops=tuple(kept[:first]) + tuple(kernels) + tuple(kept[first:]))


def flash_attention(program: Program, target: Target) -> Program:
    """FlashAttention's Algorithm 1, tiles from the device's SRAM (prefill)."""
    tiles = target.tiles if program.phase == "prefill" else None
    if program.phase == "prefill" and tiles is None and flash.score_ops(program):
        if target.device is None:
            raise ValueError("the flash variant in prefill needs a device for its tiles")
        raise VariantLacks(target.device, "on_chip.sram_per_sm", "on_chip",
                          "FlashAttention's prefill tiles (the 'flash' variant; 'ideal' needs none)")
    fraction = target.conventions.causal_fraction(program.phase)
    return _one_kernel(program, lambda keys, prefix, repeat: flash.kernel(program.phase, fraction, tiles,
                                                                           keys, prefix, repeat))


def ideal_attention(program: Program, target: Target) -> Program:
    """A kernel that moves only compulsory traffic; needs nothing of the device."""
    fraction = target.conventions.causal_fraction(program.phase)
    return _one_kernel(program, lambda keys, prefix, repeat: flash.ideal_kernel(program.phase, fraction,
                                                                                 keys, prefix, repeat))


# The least traffic any implementation moves: figures that claim a lower bound use it.
DEFAULT_VARIANT = "ideal"

VARIANTS = {
    "unfused": (),
    "fused": (fuse_epilogues,),
    "flash": (fuse_epilogues, flash_attention),
    "ideal": (fuse_epilogues, ideal_attention),
}


def apply(program: Program, variant: str, target: Target = Target()) -> Program:
    for rewrite in VARIANTS[variant]:
        program = rewrite(program, target)
    return verify(replace(program, variant=variant))
