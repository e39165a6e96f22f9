"""Reports do not depend on machine load (issue 24, item 5): a build under a wall clock that
runs out at once writes the committed bytes.

Every clock the standard library offers jumps an hour per reading, and any interval timer or
alarm fires the moment it is set (its handler is called at once). A budget counted in seconds
would trip on every call and fall back; budgets counted in terms, degrees and bits
(rooflinec.base.budget) cannot, so each report equals its committed copy.
"""

from __future__ import annotations

import io
import signal
import time
from pathlib import Path

import pytest

from rooflinec.cli.app import run

ROOT = Path(__file__).resolve().parents[1]
# the studies whose sympy steps once ran under one-second timers: derivations, limits,
# crossings and the serving crossovers (moe-mixtral's limit came out null under load)
STUDIES = ("moe-mixtral", "windowed-attention", "gpt2-medium")


@pytest.fixture
def no_time_left(monkeypatch):
    clock = {"now": 0.0}

    def reading(*_):
        clock["now"] += 3600.0
        return clock["now"]

    def fire_at_once(*args):
        seconds = args[1] if len(args) > 1 else args[0]
        handler = signal.getsignal(signal.SIGALRM)
        if seconds and callable(handler):
            handler(signal.SIGALRM, None)
        return (0.0, 0.0) if len(args) > 1 else 0

    for name in ("time", "monotonic", "perf_counter", "process_time"):
        monkeypatch.setattr(time, name, reading)
    for name in ("time_ns", "monotonic_ns", "perf_counter_ns"):
        monkeypatch.setattr(time, name, lambda: int(reading() * 1e9))
    monkeypatch.setattr(signal, "setitimer", fire_at_once)
    monkeypatch.setattr(signal, "alarm", fire_at_once)
    # nothing cached from an earlier build on a normal clock may stand in for this one's steps
    from rooflinec.cost import derive
    from rooflinec.model import ir
    caches = (ir.factoring, ir.intensity, derive.derive, derive._crossing)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()


@pytest.mark.slow
def test_a_build_with_no_wall_clock_left_writes_the_committed_reports(tmp_path, no_time_left):
    specs = [str(ROOT / "specs" / f"{name}.yaml") for name in STUDIES]
    err = io.StringIO()
    assert run(["build", *specs, "--out", str(tmp_path), "--quiet"], io.StringIO(), err) == 0, err.getvalue()
    for name in STUDIES:
        for suffix in (".json", ".md", ".html"):
            committed = ROOT / "reports" / f"{name}{suffix}"
            assert (tmp_path / committed.name).read_bytes() == committed.read_bytes(), committed.name
