"""Run a step under torch.profiler and split its time by the op ranges the decoder opened.

Time is the CPU time of each top-level event of a step on the CPU, and the kernel time on the
GPU (device_time_total) under CUDA. A top-level event outside every op range is an unmapped
kernel: it is listed with its time, never dropped.
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass

from rooflinec.measure.reference import PREFIX

STEP = "rooflinec-step"
# Kineto's own progress lines (`USDT: ... profiler_start`, `STAGE: ... Warm Up`): its USDT level
# prints whatever KINETO_LOG_LEVEL says, straight to file descriptor 2
KINETO_LINE = re.compile(rb"^(USDT|STAGE):\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] ")


@dataclass(frozen=True)
class Profile:
    ops: dict          # op name -> per-step times (s)
    outside: dict      # kernel name outside every op range -> per-step times (s)
    steps: int

    @property
    def unmapped(self) -> dict:
        """Median time per step of each kernel outside the ops (a median, like the ops':
        one step preempted inside a view must not count as that view's time)."""
        return {k: statistics.median(v) for k, v in self.outside.items()}

    def median(self, op: str) -> float:
        return statistics.median(self.ops[op])

    def best(self, op: str) -> float:
        return min(self.ops[op])

    @property
    def mapped_time(self) -> float:
        return sum(self.median(op) for op in self.ops)

    @property
    def unmapped_time(self) -> float:
        return sum(self.unmapped.values())

    @property
    def coverage(self) -> float:
        """Share of the profiled time that maps to the spec's ops."""
        total = self.mapped_time + self.unmapped_time
        return self.mapped_time / total if total else 0.0


def run(torch, device, step, steps: int, warmup: int = 2, by_op: dict | None = None) -> Profile:
    for _ in range(warmup):
        step()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize(device)
    with quiet(), torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            with torch.profiler.record_function(STEP):
                step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    return split(prof.events(), device.type == "cuda", steps, by_op or {})


@contextlib.contextmanager
def quiet():
    """Drop Kineto's progress lines, which C++ writes to file descriptor 2 (no Python stream
    sees them, and no setting stops them), and pass every other line written meanwhile on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = b"".join(line for line in held if not KINETO_LINE.match(line))
            if kept:
                os.write(2, kept)


def split(events, on_gpu: bool, steps: int, by_op: dict) -> Profile:
    """Per-step time of each op range, less the ranges nested in it, and of each event outside
    every range; `by_op` names an op for such an event by its name (aten::add -> embed_add)."""
    took = (lambda e: e.device_time_total) if on_gpu else (lambda e: e.cpu_time_total)
    ops, outside = defaultdict(lambda: [0.0] * steps), defaultdict(lambda: [0.0] * steps)
    roots = [e for e in events if e.name == STEP and e.cpu_parent is None]
    if len(roots) != steps:
        raise RuntimeError(f"the profile holds {len(roots)} steps, expected {steps}")

    def nested(e):
        """The ranges directly inside `e` (with no range between)."""
        for child in e.cpu_children:
            yield from [child] if child.name.startswith(PREFIX) else nested(child)

    def visit(e, i: int) -> None:
        inner = list(nested(e))
        seconds = (took(e) - sum(took(r) for r in inner)) / 1e6   # the profiler counts µs
        name = e.name[len(PREFIX):] if e.name.startswith(PREFIX) else by_op.get(e.name)
        if name is not None:
            ops[name][i] += seconds
        elif seconds > 0:
            outside[e.name][i] += seconds
        for r in inner:
            visit(r, i)

    for i, root in enumerate(sorted(roots, key=lambda e: e.time_range.start)):
        for child in root.cpu_children:
            visit(child, i)
    return Profile(dict(ops), dict(outside), steps)
