"""Profile rows joined with their lowered FLOPs and bytes and their roofline bound on one device."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from rooflinec.serving import oplowering
from rooflinec.serving.opfit import BOUND, Kernels


# Op classes, each with a curve of its own: the GEMMs share one; each vector kernel is its own
# class, and so is each kind of it (LayerNorm and RMSNorm, SiLU-and-multiply and GELU)
CLASSES = ("gemm", "rmsnorm", "layernorm", "rope", "silu_and_mul", "gelu", "residual_add", "embedding")


def op_class(op: str, model) -> str:
    if op in oplowering.GEMMS:
        return "gemm"
    if op in ("input_layernorm", "post_attention_layernorm"):
        return model.norm_kind
    if op == "mlp_act":
        return "silu_and_mul" if model.mlp_kind in oplowering.GATED else "gelu"
    return {"attn_rope": "rope", "add": "residual_add", "emb": "embedding"}[op]


@dataclass(frozen=True)
class Table:
    """One entry per profiled (row, op), as arrays in the rows' order."""

    rows: list           # opprofiles.OpRow
    op_class: np.ndarray
    flops: np.ndarray
    nbytes: np.ndarray
    peak: np.ndarray
    bandwidth: float
    measured_s: np.ndarray
    l2_size: float | None = None   # B: the device's L2, where its spec states it

    @property
    def bound_s(self) -> np.ndarray:
        """The roofline time, every byte at memory bandwidth (what achieved fractions divide)."""
        return self.kernels().predict(BOUND)

    @property
    def least_bytes(self) -> np.ndarray:
        """The least memory traffic of a correct kernel: the L2 may hold up to its size of the
        operands (the kernel before may have left them there) and absorb writes, so only the
        bytes past it must cross to memory during the kernel."""
        return np.maximum(self.nbytes - (self.l2_size or 0), 0)

    @property
    def in_l2(self) -> np.ndarray:
        """Kernels whose bound counts fewer bytes than their traffic (it exceeds nothing on chip)."""
        return self.least_bytes < self.nbytes

    @property
    def least_s(self) -> np.ndarray:
        """The lower bound: the roofline time of the least traffic (no datasheet gives an L2
        bandwidth, so the on-chip bytes are counted as free)."""
        return Kernels(self.flops, self.least_bytes, self.peak, self.bandwidth, self.measured_s).predict(BOUND)

    @property
    def intensity(self) -> np.ndarray:
        return self.flops / self.nbytes

    def kernels(self, keep: np.ndarray | None = None) -> Kernels:
        k = Kernels(self.flops, self.nbytes, self.peak, self.bandwidth, self.measured_s)
        return k if keep is None else k.subset(keep)

    def column(self, name: str) -> np.ndarray:
        return np.array([getattr(r, name) for r in self.rows])


def models(rows: list, specs) -> dict:
    """(model label, shape) -> (model spec, where it came from), resolved once each."""
    out = {}
    for r in rows:
        if (r.model, r.shape) not in out:
            out[(r.model, r.shape)] = oplowering.resolve(r, specs)
    return out


def table(rows: list, device, resolved: dict) -> Table:
    """Every row's op lowered once per (model, tp): one evaluation over all its token counts."""
    groups = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(resolved[(r.model, r.shape)][0], r.tp, r.op)].append(i)
    n = len(rows)
    flops, nbytes, peak = np.zeros(n), np.zeros(n), np.zeros(n)
    for (model, tp, op), idx in groups.items():
        low = oplowering.lowered(model, tp)
        f, by = low.at(op, np.array([rows[i].tokens for i in idx]))
        flops[idx], nbytes[idx] = f, by
        peak[idx] = device.peak(low.units[op], oplowering.DTYPE)
    classes = np.array([op_class(r.op, resolved[(r.model, r.shape)][0]) for r in rows])
    return Table(rows, classes, flops, nbytes, peak, device.bandwidth, np.array([r.time_s for r in rows]),
                 device.l2_size)
