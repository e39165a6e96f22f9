"""The roofline: its time, max(FLOPs / peak, bytes / bandwidth), and its ridge, peak / bandwidth.

The one owner of both laws: every analysis, the sweep, the serving model and the spec's
plausibility checks call these functions, so a division by a bandwidth appears here only
(tests/test_roofline.py keeps it so). Each function works on numbers, sympy expressions
(exact crossings) and NumPy arrays (the sweeps' chunks, a serving model's kernels) alike.
It imports nothing from rooflinec, so the lowest layer (spec checks) may call it.
Which rule sums these times over a step is `rooflinec.cost.bounds`'s to name.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np


def larger(a, b):
    """max for numbers, elementwise for NumPy arrays (the sweeps' chunks)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return max(a, b)
    return np.maximum(a, b)


def combine(kernels, link, overlapped: bool):
    """A step's time from its kernels' seconds and its collectives' (link) seconds: their max
    where communication may overlap compute, else the link after the kernels. Every printed
    bound passes overlapped=True whatever a spec says (an engine that overlaps them, two-batch
    overlap, an asynchronous all-reduce, DeepEP's, approaches the max, so the sum bounds
    nothing; the serving simulator's bound: `stepcost.bounding`); predictions pass their own
    rule (the simulator's: the link after; a study's `parallel.overlap`)."""
    return larger(kernels, link) if overlapped else kernels + link


def compute_time(flops, peak):
    """FLOPs / peak: seconds at the unit's peak."""
    return flops / peak


def transfer_time(nbytes, bandwidth):
    """bytes / bandwidth: seconds to move `nbytes` at `bandwidth` (memory, cache or a link)."""
    return nbytes / bandwidth


@dataclass(frozen=True)
class Roofline:
    t_compute: object     # FLOPs / peak: seconds (a float, or an array in a sweep)
    t_memory: object      # bytes / bandwidth

    @property
    def time(self):
        return larger(self.t_compute, self.t_memory)

    @property
    def bound(self) -> str:
        return "compute" if self.t_compute >= self.t_memory else "memory"


def roofline(flops, nbytes, peak, bandwidth) -> Roofline:
    """Both terms of one kernel's roofline."""
    return Roofline(compute_time(flops, peak), transfer_time(nbytes, bandwidth))


def time(flops, nbytes, peak, bandwidth):
    """t = max(FLOPs / peak, bytes / bandwidth): the lower bound of one kernel's time."""
    return roofline(flops, nbytes, peak, bandwidth).time


def ridge(peak, bandwidth):
    """Peak / bandwidth: the FLOPs per byte an op needs to be compute-bound; None without a
    peak. Exact where both are exact (sympy rationals, Fractions), so crossings solve exactly."""
    if peak is None:
        return None
    return peak / bandwidth


def attainable(intensity: float, peak: float, bandwidth: float) -> float:
    """min(peak, intensity x bandwidth): the FLOP/s the roof allows at `intensity`."""
    return min(peak, intensity * bandwidth)


def bandwidth_utilisation(nbytes: float, seconds: float, bandwidth: float) -> float:
    """MBU: bytes a step must move over the time it took, as a fraction of the bandwidth."""
    return nbytes / seconds / bandwidth


def regime(intensity: float, ridge_value) -> str:
    return "compute-bound" if intensity >= ridge_value else "memory-bound"
