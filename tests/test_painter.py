"""The chart painter process: same bytes as drawing in-process, and a fallback if it dies."""

import io
import os
import signal
import subprocess
import sys
import time

import pytest

from rooflinec.render import chartdata, charts
from rooflinec.cli import report
from rooflinec.spec import load as spec
from rooflinec.cli.app import run

pytestmark = pytest.mark.skipif(not charts.Painter.available(), reason="needs fork and two cores")


@pytest.fixture(scope="module")
def plan():
    rep = report.build(spec.load_study("specs/qwen.yaml"))
    charts_ = [c for section in chartdata.plan(rep) for c in section]
    assert len(charts_) >= 4   # two tickets of at least two charts each
    return charts_


@pytest.mark.slow
def test_painter_draws_the_same_bytes(plan):
    painter = charts.Painter()
    try:
        first, second = painter.submit(plan[:2]), painter.submit(plan[2:])
        assert painter.result(second) == charts.draw_all(plan[2:])
        assert painter.result(first) == charts.draw_all(plan[:2])
        # drawn by the painter, not by result()'s fallback in this process
        assert painter._done[first] is not None and painter._done[second] is not None
    finally:
        painter.close()


@pytest.mark.slow
def test_a_dead_painter_leaves_the_drawing_to_the_caller(plan):
    painter = charts.Painter()
    painter._proc.kill()
    painter._proc.join()
    try:
        assert painter.result(painter.submit(plan[:1])) == charts.draw_all(plan[:1])
    finally:
        painter.close()


@pytest.mark.slow
def test_build_with_and_without_a_painter_is_the_same(tmp_path, monkeypatch):
    with_painter, without = tmp_path / "with", tmp_path / "without"
    assert run(["build", "specs/gpt3.yaml", "--out", str(with_painter)], io.StringIO(), io.StringIO()) == 0
    monkeypatch.setattr(charts.Painter, "available", staticmethod(lambda: False))
    assert run(["build", "specs/gpt3.yaml", "--out", str(without)], io.StringIO(), io.StringIO()) == 0
    for f in sorted(p for p in with_painter.rglob("*") if p.is_file()):
        assert f.read_bytes() == (without / f.relative_to(with_painter)).read_bytes(), f.name


def _children(pid: int) -> set[int]:
    """Linux: the processes `pid` forked (its threads' children lists)."""
    found = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as fh:
            found.update(int(c) for c in fh.read().split())
    return found


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for whoever adopted it to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads /proc (Linux)")
def test_a_killed_build_leaves_no_painter(tmp_path):
    """Issue 31, item 7: SIGKILL a build while its painter lives; the painter ends too,
    within WATCH_S and a margin (it used to wait on its jobs queue forever)."""
    build = subprocess.Popen([sys.executable, "-m", "rooflinec", "build", "specs/qwen.yaml",
                              "--out", str(tmp_path / "out")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        painters: set[int] = set()
        for _ in range(600):   # up to a minute for the build to fork its painter
            painters = _children(build.pid)
            if painters or build.poll() is not None:
                break
            time.sleep(0.1)
        assert painters, "the build forked no painter"
    finally:
        build.send_signal(signal.SIGKILL)
        build.wait()
    for _ in range(100):   # up to ten seconds
        if not any(_alive(p) for p in painters):
            break
        time.sleep(0.1)
    left = [p for p in painters if _alive(p)]
    for pid in left:   # do not leave the orphan behind when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"painter(s) {left} outlived the killed build"
