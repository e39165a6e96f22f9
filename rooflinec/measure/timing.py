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
        now = cpu_clock(torch)

        def timed(fn) -> float:
            start = now()
            fn()
            return now() - start
    return timed


def cpu_clock(torch):
    """On one PyTorch thread, the thread's CPU time: a run that other processes preempted
    counts only the time it ran, so a busy machine still measures the rates its cores reach
    (a short op between two preemptions reaches them too; wall time would understate the
    peak and let such an op "beat" its roofline). On more threads, wall time: the work runs
    in PyTorch's pool, outside this thread."""
    return time.thread_time if torch.get_num_threads() == 1 else time.perf_counter


def clock_name(torch, device) -> str:
    if device.type == "cuda":
        return "with CUDA events"
    return {time.thread_time: "with time.thread_time (one thread: the CPU time it ran)",
            time.perf_counter: "with time.perf_counter"}[cpu_clock(torch)]


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
