"""Number formats: bytes per element (scales included) and the tensor peak each computes on.

A tensor class (weights, KV cache, activations) is stored in a format; the bytes it moves
per element come from here and nowhere else. Block-scaled formats carry one scale per block:

  MXFP4 (OCP Microscaling Formats v1.0): FP4 E2M1 elements, one 8-bit E8M0 scale per 32
        -> (4 + 8/32) / 8 = 17/32 = 0.53125 B per element
  NVFP4 (NVIDIA Blackwell): FP4 E2M1 elements, one FP8 E4M3 scale per 16 (the tensor's
        fp32 scale is one number, left out) -> (4 + 8/16) / 8 = 9/16 = 0.5625 B per element
  int4  weight-only (GPTQ/AWQ-style) with one bf16 scale per group of 128
        -> (4 + 16/128) / 8 = 33/64 = 0.515625 B per element

A format's compute runs on the device's tensor peak for its `peak` dtype (fp8 on the fp8
peak, NVFP4 and MXFP4 on the fp4 peak).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import sympy as sp
from dataclasses import replace
from rooflinec.model.symbols import b
from rooflinec.model.ir import Cost


@dataclass(frozen=True)
class Format:
    bits: int                 # bits of one element
    block: int = 0            # elements sharing one scale (0: no block scale)
    scale_bits: int = 0       # bits of that scale
    peak: str = ""            # the tensor-peak dtype its arithmetic runs at
    note: str = ""

    @property
    def bytes(self) -> Fraction | int:
        """Bytes per element, its share of the block scale included; whole bytes as int."""
        bits = Fraction(self.bits) + (Fraction(self.scale_bits, self.block) if self.block else 0)
        value = bits / 8
        return int(value) if value.denominator == 1 else value


FORMATS: dict[str, Format] = {
    "fp32": Format(32, peak="fp32"),
    "tf32": Format(32, peak="tf32", note="stored as fp32; tf32 is the tensor units' precision"),
    "bf16": Format(16, peak="bf16"),
    "fp16": Format(16, peak="fp16"),
    "fp8": Format(8, peak="fp8", note="E4M3; per-tensor scale (one number) left out"),
    "int8": Format(8, peak="int8"),
    "int4": Format(4, 128, 16, peak="int4", note="one bf16 scale per group of 128"),
    "mxfp4": Format(4, 32, 8, peak="fp4", note="OCP MX: E2M1, one E8M0 scale per 32"),
    "nvfp4": Format(4, 16, 8, peak="fp4", note="E2M1, one E4M3 scale per 16"),
}

# as plain numbers: every one is a multiple of 1/64, so the float is exact
BYTES: dict[str, float | int] = {name: f.bytes if isinstance(f.bytes, int) else float(f.bytes)
                                 for name, f in FORMATS.items()}

# tensor classes a study may store in their own format, and the symbol their bytes take
# (activations keep b, the bytes per element of every class not stored otherwise)
b_w = sp.Symbol("b_w", positive=True)     # bytes per weight element
b_kv = sp.Symbol("b_kv", positive=True)   # bytes per KV-cache element
CLASS_SYMBOLS = {"weights": b_w, "kv_cache": b_kv}
ACTIVATIONS = "activations"

# Weight-only formats (int4, NVFP4, ... weights with bf16 compute): the GEMM runs on the compute
# dtype's peak and first turns each weight element it reads into the compute dtype: one convert
# and one multiply by its (block or tensor) scale. Counted as part of the GEMM's FLOPs, as the
# fused epilogues are, since the dequantisation runs inside the GEMM's kernel on loaded weights.
DEQUANT_FLOPS = 2
f_dq = sp.Symbol("f_dq", nonnegative=True)   # dequantisation FLOPs per weight element read
DESCRIPTIONS = {b_w: "bytes per weight element", b_kv: "bytes per KV-cache element",
                f_dq: f"dequantisation FLOPs per weight element a GEMM reads: {DEQUANT_FLOPS} "
                      "(convert, scale) for weights stored in a format the compute dtype's peak "
                      "does not run on, 0 otherwise"}


def dequant_flops(weights: str, compute: str) -> int:
    """f_dq's value: weights whose format computes on another peak than `compute` need it."""
    return DEQUANT_FLOPS if peak_dtype(weights) != peak_dtype(compute) else 0


def peak_dtype(name: str) -> str:
    """The dtype whose tensor peak a computation in format `name` runs on."""
    fmt = FORMATS.get(name)
    return fmt.peak if fmt else name


def byte_value(name: str):
    """Bytes per element as a plain number (an int for whole bytes)."""
    return BYTES[name]


def weight_elements(cost):
    """The weight elements `cost` reads: its weight bytes at one byte per element (b or b_w).
    Substituted, not divided and cancelled: cancelling expands E*(1 - (1 - k/E)^M) into
    powers E^M that no float holds at a prefill's M."""
    return cost.bytes_of("weights").xreplace({b: 1, b_w: 1})


def retype(program, classes):
    """`program` with the bytes of each traffic class in `classes` written over that class's
    own symbol (b_w for weights, b_kv for the KV cache) instead of b: a class stored in a
    format other than the activations'. Activations stored in their own format (b no longer
    the compute dtype's bytes) give weights and KV cache their own symbols too. A matrix op
    that reads weights gains f_dq FLOPs per weight element it reads (the dequantisation; zero
    when the weights are in the compute's format)."""

    own = CLASS_SYMBOLS if ACTIVATIONS in classes else classes
    swap = {cls: CLASS_SYMBOLS[cls] for cls in own}
    if not swap:
        return program

    def cost(c, unit):
        if c is None:
            return None
        flops = c.flops
        # weight elements read; a program retyped once already (a sweep's formats over the
        # study's) keeps the count it has
        if "weights" in swap and unit == "matrix" and f_dq not in flops.free_symbols:
            flops += f_dq * weight_elements(c)
        return Cost(flops, tuple((cls, e.xreplace({b: swap[cls]}) if cls in swap else e)
                                 for cls, e in c.traffic))

    ops = tuple(replace(op, cost=cost(op.cost, op.unit), epilogue=cost(op.epilogue, op.unit))
                for op in program.ops)
    used = (*swap.values(), *((f_dq,) if "weights" in swap else ()))
    extra = tuple(s for s in used if s not in program.symbols)
    return replace(program, ops=ops, symbols=program.symbols + extra)
