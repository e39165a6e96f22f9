"""The chart painter process: same bytes as drawing in-process, and a fallback if it dies."""

import io

import pytest

from rooflinec import chartdata, charts, report, spec
from rooflinec.cli import run

pytestmark = pytest.mark.skipif(not charts.Painter.available(), reason="needs fork and two cores")


@pytest.fixture(scope="module")
def plan():
    rep = report.build(spec.load_study("specs/qwen.yaml"))
    charts_ = [c for section in chartdata.plan(rep) for c in section]
    assert len(charts_) >= 4   # two tickets of at least two charts each
    return charts_


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


def test_a_dead_painter_leaves_the_drawing_to_the_caller(plan):
    painter = charts.Painter()
    painter._proc.kill()
    painter._proc.join()
    try:
        assert painter.result(painter.submit(plan[:1])) == charts.draw_all(plan[:1])
    finally:
        painter.close()


def test_build_with_and_without_a_painter_is_the_same(tmp_path, monkeypatch):
    with_painter, without = tmp_path / "with", tmp_path / "without"
    assert run(["build", "specs/gpt3.yaml", "--out", str(with_painter)], io.StringIO(), io.StringIO()) == 0
    monkeypatch.setattr(charts.Painter, "available", staticmethod(lambda: False))
    assert run(["build", "specs/gpt3.yaml", "--out", str(without)], io.StringIO(), io.StringIO()) == 0
    for f in sorted(p for p in with_painter.rglob("*") if p.is_file()):
        assert f.read_bytes() == (without / f.relative_to(with_painter)).read_bytes(), f.name
