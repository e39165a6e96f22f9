"""Number formats: bytes per element (scales included) and the tensor peak each computes on.

A tensor class (weights, KV cache, activations) is stored in a format; the bytes it moves
per element come from here and nowhere else. Block-scaled formats carry one scale per block:

  MXFP4 (OCP Microscaling Formats v1.0): FP4 E2M1 elements, one 8-bit E8M0 scale per 32
        -> (4 + 8/32) / 8 = 17/32 = 0.53125 B per element
  NVFP4 (NVIDIA Blackwell): FP4 E2M1 elements, one FP8 E4M3 scale per 16 (the tensor's
        fp32 scale is one number, left out) -> (4 + 8/16) / 8 = 9/16 = 0.5625 B per element
  int4  weight-only (GPTQ/AWQ-style) with one bf16 scale per group of 128
        -> (4 + 16/128) / 8 = 33/64 = 0.515625 B per element
  fp8-block128  FP8 E4M3 with one fp32 scale per 128 x 128 block (DeepSeek-V3's checkpoint:
        config.json quantization_config weight_block_size [128, 128], `weight_scale_inv` fp32)
        -> (8 + 32/16384) / 8 = 4097/4096 = 1.000244140625 B per element (a matrix whose sides
        are not multiples of 128 pays whole edge blocks; per element that rounding is left out)

A tensor-wide scale (NVFP4's second-level fp32 scale, fp8's per-tensor scale) is one number per
matrix: 4 B beside millions of elements (Llama-3.1-70B's 80 layers x 7 matrices x 4 B = 2,240 B
of 35 GB), left out.

Tensor classes with a format of their own: `weights` (attention and dense weights: everything
but the routed experts, their biases included, and all weights where `experts` is not given),
`experts` (the routed experts' weight matrices: gpt-oss's MXFP4), `kv_cache` and `activations`.

A format's compute runs on the device's tensor peak for its `peak` dtype (fp8 on the fp8
peak, NVFP4 and MXFP4 on the fp4 peak). Where a device has no tensor peak for the weights'
format (fp4 on Hopper), the GEMMs are weight-only (`gemm_dtype`): the weights are read at
their format's bytes and dequantised into a GEMM on the activations' dtype (W4A16: bf16).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import sympy as sp
from dataclasses import replace
from rooflinec.model.symbols import b
from rooflinec.model.ir import Cost
from rooflinec.model.moe import routed


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
    "fp8-block128": Format(8, 128 * 128, 32, peak="fp8", note="E4M3, one fp32 scale per 128x128 block"),
}

# as plain numbers: every one is a multiple of 1/4096, so the float is exact
BYTES: dict[str, float | int] = {name: f.bytes if isinstance(f.bytes, int) else float(f.bytes)
                                 for name, f in FORMATS.items()}

# tensor classes a study may store in their own format, and the symbol their bytes take
# (activations keep b, the bytes per element of every class not stored otherwise)
b_w = sp.Symbol("b_w", positive=True)     # bytes per weight element
b_kv = sp.Symbol("b_kv", positive=True)   # bytes per KV-cache element
b_we = sp.Symbol("b_we", positive=True)   # bytes per routed-expert weight element
CLASS_SYMBOLS = {"weights": b_w, "experts": b_we, "kv_cache": b_kv}
ACTIVATIONS = "activations"
EXPERTS = "experts"
CLASSES = (*CLASS_SYMBOLS, ACTIVATIONS)

# Weight-only formats (int4, NVFP4, ... weights with bf16 compute): the GEMM runs on the compute
# dtype's peak and first turns each weight element it reads into the compute dtype: one convert
# and one multiply by its (block or tensor) scale. Counted as part of the GEMM's FLOPs, as the
# fused epilogues are, since the dequantisation runs inside the GEMM's kernel on loaded weights.
DEQUANT_FLOPS = 2
f_dq = sp.Symbol("f_dq", nonnegative=True)   # dequantisation FLOPs per weight element read
f_dqe = sp.Symbol("f_dqe", nonnegative=True)  # the same for routed-expert weights
DEQUANT_SYMBOLS = {"weights": f_dq, "experts": f_dqe}
DESCRIPTIONS = {b_w: "bytes per weight element",
                b_we: "bytes per routed-expert weight element",
                b_kv: "bytes per KV-cache element",
                f_dq: f"dequantisation FLOPs per weight element a GEMM reads: {DEQUANT_FLOPS} "
                      "(convert, scale) for weights stored in a format the compute dtype's peak "
                      "does not run on, 0 otherwise",
                f_dqe: "dequantisation FLOPs per routed-expert weight element a GEMM reads (as f_dq, "
                       "for the experts' format)"}
WEIGHT_ONLY_DTYPE = "bf16"   # the GEMM a weight-only kernel dequantises into (W4A16)


def dequant_flops(weights: str, compute: str) -> int:
    """f_dq's value: weights whose format computes on another peak than `compute` need it."""
    return DEQUANT_FLOPS if peak_dtype(weights) != peak_dtype(compute) else 0


def gemm_dtype(weights: str, has_peak) -> str:
    """The dtype a GEMM reading weights in format `weights` runs on: the format's own where
    `has_peak(dtype)` says the device lists a tensor peak for it, else the weight-only path's
    WEIGHT_ONLY_DTYPE (fp4 weights on Hopper: dequantised into bf16 GEMMs)."""
    return weights if has_peak(weights) else WEIGHT_ONLY_DTYPE


def dequantisation(weights: str, compute: str, experts: str | None = None) -> str:
    """What a report says of weights stored in `weights` (routed experts in `experts`) under
    GEMMs at `compute`; "" where no class needs dequantising."""
    stored = {"weights": weights, **({"routed experts": experts} if experts and experts != weights else {})}
    converted = [f"{cls} {fmt}" for cls, fmt in stored.items() if dequant_flops(fmt, compute)]
    if not converted:
        return ""
    return (f"weight-only: {' and '.join(converted)} read at their storage bytes (block scales "
            f"included) and dequantised into {compute} GEMMs on the {peak_dtype(compute)} tensor peak, "
            f"{DEQUANT_FLOPS} FLOPs per weight element read (a convert and a multiply by its scale) "
            "counted in the GEMM")


def checkpoint_formats(config) -> dict:
    """A Hugging Face `quantization_config` as a study's `quantization` keys ({} where it maps
    onto none): gpt-oss's `quant_method: mxfp4` with the attention and router in
    `modules_to_not_convert` is {experts: mxfp4} (the rest stays at the dtype); fp8 with
    `weight_block_size: [128, 128]` (DeepSeek-V3, Qwen3-FP8) is fp8-block128 for every weight."""
    if not isinstance(config, dict):
        return {}
    method, kept = config.get("quant_method"), config.get("modules_to_not_convert") or []
    if method == "mxfp4":
        dense_kept = isinstance(kept, list) and any(isinstance(m, str) and "self_attn" in m for m in kept)
        return {EXPERTS if dense_kept else "weights": "mxfp4"}
    if method == "fp8":
        return {"weights": "fp8-block128" if config.get("weight_block_size") == [128, 128] else "fp8"}
    return {}


def peak_dtype(name: str) -> str:
    """The dtype whose tensor peak a computation in format `name` runs on."""
    fmt = FORMATS.get(name)
    return fmt.peak if fmt else name


def byte_value(name: str):
    """Bytes per element as a plain number (an int for whole bytes)."""
    return BYTES[name]


def weight_elements(cost):
    """The weight elements `cost` reads: its weight bytes at one byte per element (b, b_w or
    b_we). Substituted, not divided and cancelled: cancelling expands E*(1 - (1 - k/E)^M) into
    powers E^M that no float holds at a prefill's M."""
    return cost.bytes_of("weights").xreplace({b: 1, b_w: 1, b_we: 1})


def retype(program, classes):
    """`program` with the bytes of each traffic class in `classes` written over that class's
    own symbol (b_w for weights, b_kv for the KV cache) instead of b: a class stored in a
    format other than the activations'. `experts` gives the routed experts' weights b_we
    (other weights stay b_w, or b where `weights` is not stored otherwise). Activations stored
    in their own format (b no longer the compute dtype's bytes) give every class its own
    symbol. A matrix op that reads weights gains f_dq (routed experts: f_dqe) FLOPs per weight
    element it reads (the dequantisation; zero when its weights are in the compute's format)."""

    own = CLASS_SYMBOLS if ACTIVATIONS in classes else {cls: None for cls in classes}
    swap = {cls: CLASS_SYMBOLS[cls] for cls in own if cls != EXPERTS}
    if not own:
        return program

    def cost(c, unit, cls):
        if c is None:
            return None
        flops, dq = c.flops, DEQUANT_SYMBOLS[cls]
        if cls == EXPERTS:   # counted as weights' by a first retyping: the experts' own now
            flops = flops.xreplace({f_dq: f_dqe})
        # weight elements read; a program retyped once already (a sweep's formats over the
        # study's) keeps the count it has
        if cls in own and unit == "matrix" and not flops.free_symbols & {f_dq, f_dqe}:
            flops += dq * weight_elements(c)
        # the routed experts' weights may be b_w already (retyped as weights first)
        weights = {b: b_we, b_w: b_we} if cls == EXPERTS else {b: swap["weights"]} if "weights" in swap else {}
        subs = {**{t: {b: s} for t, s in swap.items()}, "weights": weights}
        return Cost(flops, tuple((t, e.xreplace(subs[t]) if subs.get(t) else e) for t, e in c.traffic))

    def weight_class(op):
        return EXPERTS if EXPERTS in own and routed(op) else "weights"

    ops = tuple(replace(op, cost=cost(op.cost, op.unit, weight_class(op)),
                        epilogue=cost(op.epilogue, op.unit, weight_class(op))) for op in program.ops)
    used = (*swap.values(), *((b_we, f_dqe) if EXPERTS in own else ()), *((f_dq,) if "weights" in own else ()))
    carried = {s for op in ops for c in (op.cost, op.epilogue) if c is not None
               for s in (c.flops.free_symbols | {s for _, e in c.traffic for s in e.free_symbols})}
    extra = tuple(s for s in used if s not in program.symbols and s in carried)
    return replace(program, ops=ops, symbols=program.symbols + extra)
