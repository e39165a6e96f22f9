"""FlashAttention: tile sizes from the device's on-chip memory, and the one kernel that
replaces the unfused attention steps (Dao et al. 2022, Algorithm 1)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rooflinec.model import window
from rooflinec.base.errors import DeviceError
from rooflinec.model.ir import Op, Program
from rooflinec.model.ops import FORMULAS
from rooflinec.model.symbols import B, L, S, b, d_head, n_kv, n_q


@dataclass(frozen=True)
class Blocks:
    sram_elements: int   # M in Algorithm 1: one SM's on-chip memory, in elements
    rows: int            # Br = min(ceil(M / 4d), d): query rows per tile
    cols: int            # Bc = ceil(M / 4d): keys per tile


def sram_elements(device, bytes_per_element) -> int | None:
    """Elements of one SM's SRAM (an A100 in bf16: 192 KiB // 2 B = 98304)."""
    if device is None or device.sram_per_sm is None:
        return None
    return int(device.sram_per_sm // bytes_per_element)


class SramTooSmall(DeviceError):
    """One SM's SRAM holds less than one tile: the Q, K, V and O rows of one step (4d elements)."""

    def __init__(self, device, sram: int, d: int):
        super().__init__(device, f"device '{getattr(device, 'key', device)}' has {sram} elements of "
                                 f"SRAM per SM, fewer than one FlashAttention tile needs (4 x d_head = "
                                 f"{4 * d}); give its real on_chip.sram_per_sm or choose the 'ideal' variant")


def blocks(sram: int, d: int, device=None) -> Blocks:
    # Algorithm 1, line 1: Bc = ceil(M / 4d), Br = min(ceil(M / 4d), d)
    if sram < 4 * d:   # Bc would be 1 only by rounding up, and the tile would not fit
        raise SramTooSmall(device, sram, d)
    cols = math.ceil(sram / (4 * d))
    return Blocks(sram, min(cols, d), cols)


def score_ops(program: Program) -> list[Op]:
    """The unfused attention steps: every op that writes or reads the score matrix."""
    return [op for op in program.ops if op.cost.bytes_of("scores") != 0]


def ideal_kernel(phase: str, causal_fraction, keys=S, prefix: str = "", repeat=L) -> Op:
    """The least any attention kernel moves: Q read and O written once per query head, K and
    V read once per KV head, no score matrix; FLOPs are the two matmuls, scaled by the
    causal fraction (masked tiles skipped). Decode's kernel already moves only this.
    `keys`, `prefix` and `repeat` describe windowed layers (rooflinec.model.window)."""
    if phase == "decode":
        return kernel(phase, causal_fraction, None, keys, prefix, repeat)
    cost = FORMULAS["attention"](B, S, keys, n_q, n_kv, d_head, b, io=True,
                                 causal_fraction=window.causal_share(causal_fraction, keys), read_keys=S)
    k = str(keys).replace("Min", "min")
    return Op(prefix + "attention", "attention", "attention", "matrix", cost, repeat=repeat,
              shape=f"Q[B,n_q,S,d_head] . K,V[B,n_kv,{k} each of S,d_head] -> O, compulsory traffic only"
              if keys != S else "Q[B,n_q,S,d_head] . K,V[B,n_kv,S,d_head] -> O, compulsory traffic only",
              crossing=S)


def kernel(phase: str, causal_fraction, tiles: Blocks | None, keys=S, prefix: str = "", repeat=L) -> Op:
    """The attention kernel: decode reads Q, K, V once and writes O; prefill is Algorithm 1
    (windowed layers in prefill: the compulsory-traffic kernel, Algorithm 1 has no window)."""
    if phase == "decode":
        cost = FORMULAS["attention"](B, 1, keys, n_q, n_kv, d_head, b, io=True)
        k = str(keys).replace("Min", "min")
        # with S as its knob the report shows it never turns compute-bound, and what it tends to
        return Op(prefix + "attention", "attention", "attention", "matrix", cost, repeat=repeat,
                  shape=f"Q[B,n_q,1,d_head] . K,V[B,n_kv,{k},d_head]", crossing=S)
    if keys != S:
        return ideal_kernel(phase, causal_fraction, keys, prefix, repeat)
    cost = FORMULAS["flash_attention"](B, n_q, S, d_head, b, tiles.cols, causal_fraction=causal_fraction,
                                       kv_heads=n_kv)
    return Op("attention", "flash_attention", "attention", "matrix", cost, repeat=L,
              shape=f"Q[B,n_q,S,d_head] . K,V[B,n_kv,S,d_head] -> O, K/V tiles of Bc = {tiles.cols} keys",
              tiles=tiles)
