"""One clock for every measurement: wall time on the CPU, CUDA events on a GPU.

The same code runs on both; only how a stretch of work is timed differs.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


def clock(torch, device):
    """A function timing `fn()` on `device`, in seconds, from launch to completion."""
    if device.type == "cuda":
        def timed(fn) -> float:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3   # elapsed_time is in ms
    else:
        def timed(fn) -> float:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
    return timed


@dataclass(frozen=True)
class Timing:
    """Repeated timings of one kernel: the work each run does, and the times it took."""

    work: float            # FLOPs or bytes per run
    times: tuple[float, ...]

    @property
    def best(self) -> float:
        """Highest rate reached: the run least disturbed by anything else on the machine."""
        return self.work / min(self.times)

    @property
    def median(self) -> float:
        return self.work / statistics.median(self.times)


def repeat(timed, fn, work: float, repeats: int, warmup: int = 2,
           budget: float = float("inf")) -> Timing:
    """`repeats` timings after `warmup` runs, or fewer (three at least) once `budget` seconds
    are spent: a slow dtype (bf16 on a CPU without bf16 units) must not take minutes."""
    for _ in range(warmup):
        timed(fn)
    times = []
    while len(times) < repeats and (len(times) < 3 or sum(times) < budget):
        times.append(timed(fn))
    return Timing(work, tuple(times))
