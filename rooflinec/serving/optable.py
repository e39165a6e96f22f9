"""Profile rows joined with their lowered FLOPs and bytes and their roofline bound on one device."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from rooflinec.serving import oplowering
from rooflinec.serving.opfit import BOUND, Kernels


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

    @property
    def bound_s(self) -> np.ndarray:
        return self.kernels().predict(BOUND)

    @property
    def intensity(self) -> np.ndarray:
        return self.flops / self.nbytes

    def kernels(self, keep: np.ndarray | None = None) -> Kernels:
        k = Kernels(self.flops, self.nbytes, self.peak, self.bandwidth, self.measured_s)
        return k if keep is None else k.subset(keep)

    def column(self, name: str) -> np.ndarray:
        return np.array([getattr(r, name) for r in self.rows])


def table(rows: list, device) -> Table:
    """Every row's op lowered once per (model shape, tp): one evaluation over all its token counts."""
    groups = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r.shape, r.tp, r.op)].append(i)
    n = len(rows)
    flops, nbytes, peak = np.zeros(n), np.zeros(n), np.zeros(n)
    for (shape, tp, op), idx in groups.items():
        low = oplowering.lowered(shape, tp)
        f, by = low.at(op, np.array([rows[i].tokens for i in idx]))
        flops[idx], nbytes[idx] = f, by
        peak[idx] = device.peak(low.units[op], oplowering.DTYPE)
    classes = np.array([oplowering.CLASSES[r.op] for r in rows])
    return Table(rows, classes, flops, nbytes, peak, device.bandwidth, np.array([r.time_s for r in rows]))
