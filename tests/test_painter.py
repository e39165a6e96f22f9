"""The chart painter process: same bytes as drawing in-process, and a fallback if it dies."""

import pytest

from rooflinec import chartdata, charts, report, spec

pytestmark = pytest.mark.skipif(not charts.Painter.available(), reason="needs fork and two cores")


@pytest.fixture(scope="module")
def plan():
    rep = report.build(spec.load_study("specs/gpt3.yaml"))
    return [c for section in chartdata.plan(rep) for c in section]


def test_painter_draws_the_same_bytes(plan):
    painter = charts.Painter()
    try:
        assert painter.draw(plan) == charts.draw_all(plan, parallel=False)
    finally:
        painter.close()


def test_a_dead_painter_leaves_the_drawing_to_the_caller(plan):
    painter = charts.Painter()
    painter._proc.kill()
    painter._proc.join()
    try:
        assert painter.draw(plan[:1]) == charts.draw_all(plan[:1], parallel=False)
    finally:
        painter.close()
