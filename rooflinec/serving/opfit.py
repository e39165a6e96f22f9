"""Per-op-class efficiency: a smooth roofline fitted to measured kernel times.

The form, for an op of F FLOPs and B bytes on a unit of peak P and memory bandwidth W:

    t = ((F / (eta P))^p + (B / (beta W))^p)^(1/p) + t0

eta: the compute fraction reached when compute-bound, beta: the bandwidth fraction when
memory-bound, p: how sharply the two regimes meet at the ridge (p -> inf is the plain
roofline max; a small p is a dip around the ridge), t0: a fixed per-kernel time (launch
and tail). Four parameters per op class and device, fitted by least squares on
log(predicted / measured) (Levenberg-Marquardt, rooflinec.serving.lsq) over unbounded
coordinates: eta, beta = 1 / (1 + e^-x) in (0, 1); p = 1 + (P_MAX - 1) / (1 + e^-x) in
(1, 64) (past 64 the p-norm is the max to within 1.1%: 2^(1/64)); t0 = 1 us * e^x. With
eta = beta = 1, t0 = 0 and p -> inf it is the roofline bound; for any fitted values it is at
least the bound (each term is at least its own bound and the p-norm at least their max).

A collective: t = alpha + V / W_bus, V the bytes each device sends (2 (n - 1)/n of the buffer
for a ring all-reduce, the buffer for send/recv), fitted the same way per (collective,
GPUs, GPUs per node).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import math

import numpy as np

from rooflinec.base.roofline import compute_time, transfer_time
from rooflinec.serving.lsq import minimise

TIME_UNIT = 1e-6
P_MAX = 64.0
START = np.array([1.0, 1.5, -3.0, 1.5])   # eta 0.73, beta 0.82, p 4.0, t0 4.5 us


@dataclass(frozen=True)
class Curve:
    compute_fraction: float
    bandwidth_fraction: float
    sharpness: float
    overhead_s: float

    def time(self, flops, nbytes, peak, bandwidth) -> np.ndarray:
        return smooth(compute_time(np.asarray(flops, float), self.compute_fraction * peak),
                      transfer_time(np.asarray(nbytes, float), self.bandwidth_fraction * bandwidth),
                      self.sharpness) + self.overhead_s

    def as_dict(self) -> dict:
        return {k: float(f"{v:.6g}") for k, v in asdict(self).items()}


BOUND = Curve(1.0, 1.0, np.inf, 0.0)


def smooth(a: np.ndarray, c: np.ndarray, p: float) -> np.ndarray:
    """(a^p + c^p)^(1/p) as big * (1 + (small / big)^p)^(1/p); max(a, c) at p = inf. The ratio's
    power is taken as exp(max(p log ratio, -700)): no overflow, and no subnormal numbers (which
    slow a CPU a hundredfold) for the fit to wade through; the floor adds at most 1e-304."""
    big, small = np.maximum(a, c), np.minimum(a, c)
    if np.isinf(p):
        return big
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = np.where((big > 0) & (small > 0), np.log(small / np.where(big > 0, big, 1.0)), -np.inf)
    return big * (1 + np.exp(np.maximum(p * log_ratio, -700.0))) ** (1 / p)


PARAMETERS = ("compute_fraction", "bandwidth_fraction", "sharpness", "overhead_s")
EFFICIENCIES = PARAMETERS[:2]   # what a held-out device refits: its own two fractions


def curve(x: np.ndarray) -> Curve:
    x = np.clip(x, -30, 30)
    sig = 1 / (1 + np.exp(-x[:3]))
    return Curve(float(sig[0]), float(sig[1]), float(1 + (P_MAX - 1) * sig[2]), float(TIME_UNIT * np.exp(x[3])))


def coordinates(c: Curve) -> np.ndarray:
    """curve()'s inverse (a fraction of exactly 1 goes to the clip, 30)."""
    logit = lambda f: 30.0 if f >= 1 else -30.0 if f <= 0 else math.log(f / (1 - f))   # noqa: E731
    return np.array([logit(c.compute_fraction), logit(c.bandwidth_fraction),
                     logit((c.sharpness - 1) / (P_MAX - 1)), math.log(max(c.overhead_s, 1e-300) / TIME_UNIT)])


@dataclass(frozen=True)
class Kernels:
    """Measured kernels of one class, with what the roofline needs for each."""

    flops: np.ndarray
    nbytes: np.ndarray
    peak: np.ndarray
    bandwidth: float
    measured_s: np.ndarray

    def predict(self, c: Curve) -> np.ndarray:
        return c.time(self.flops, self.nbytes, self.peak, self.bandwidth)

    def subset(self, keep: np.ndarray) -> "Kernels":
        return Kernels(self.flops[keep], self.nbytes[keep], self.peak[keep], self.bandwidth, self.measured_s[keep])


def fit(k: Kernels, start: Curve | None = None, free=PARAMETERS) -> Curve:
    """The Curve minimising sum(log(predicted / measured)^2) over the kernels, moving only the
    `free` parameters; the others keep `start`'s values (default start: START)."""
    target, x0 = np.log(k.measured_s), START.copy() if start is None else coordinates(start)
    index = [PARAMETERS.index(name) for name in free]

    def at(y):
        x = x0.copy()
        x[index] = y
        return curve(x)
    return at(minimise(lambda y: np.log(k.predict(at(y))) - target, x0[index]))


# --- collectives -------------------------------------------------------------------------

@dataclass(frozen=True)
class Link:
    latency_s: float
    bus_bandwidth: float      # bytes/s of what each device sends

    def time(self, volume) -> np.ndarray:
        return self.latency_s + transfer_time(np.asarray(volume, float), self.bus_bandwidth)

    def as_dict(self) -> dict:
        return {"latency_s": float(f"{self.latency_s:.6g}"), "bus_bandwidth": float(f"{self.bus_bandwidth:.6g}")}


def volume(collective: str, workers: int, size) -> np.ndarray:
    """Bytes each device sends: a ring all-reduce sends 2 (n - 1)/n of the buffer."""
    size = np.asarray(size, float)
    return size * 2 * (workers - 1) / workers if collective == "all_reduce" else size


def fit_link(volumes: np.ndarray, measured_s: np.ndarray) -> Link:
    target = np.log(measured_s)

    def link(x):
        x = np.clip(x, -30, 30)
        return Link(TIME_UNIT * np.exp(x[0]), 1e9 * np.exp(x[1]))
    return link(minimise(lambda x: np.log(link(x).time(volumes)) - target, np.array([2.0, 4.0])))
