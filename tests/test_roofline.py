"""The roofline has one owner: rooflinec.base.roofline (issue 24, item 3)."""

from __future__ import annotations

import ast
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from rooflinec.base import roofline as R

PACKAGE = Path(__file__).resolve().parents[1] / "rooflinec"
OWNER = PACKAGE / "base" / "roofline.py"
# a bandwidth by any of its names: bandwidth, link.bandwidth, dev["cache_bandwidth"], bw;
# not a bandwidth_fraction (a calibrated efficiency, no bandwidth)
BANDWIDTH = re.compile(r"(^|_)(bandwidth|bw)$")


def _names(node: ast.AST):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            yield sub.id
        elif isinstance(sub, ast.Attribute):
            yield sub.attr
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value


def _mentions_bandwidth(node: ast.AST) -> bool:
    return any(BANDWIDTH.search(n) for n in _names(node))


def _divisions_by_bandwidth(path: Path) -> list[int]:
    """Lines of `path` that divide by a bandwidth (`x / bw`, `x / exact(dev.bandwidth)`, `/=`);
    a ratio of two bandwidths (one device's over another's, a unitless growth) is no time."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        left, right = (node.left, node.right) if isinstance(node, ast.BinOp) else \
            (node.target, node.value) if isinstance(node, ast.AugAssign) else (None, None)
        if right is not None and isinstance(node.op, (ast.Div, ast.FloorDiv)) \
                and _mentions_bandwidth(right) and not _mentions_bandwidth(left):
            found.append(node.lineno)
    return sorted(found)


@pytest.mark.slow
def test_only_the_roofline_module_divides_by_a_bandwidth():
    offenders = {str(p.relative_to(PACKAGE)): lines for p in sorted(PACKAGE.rglob("*.py"))
                 if p != OWNER and (lines := _divisions_by_bandwidth(p))}
    assert offenders == {}, f"divide through rooflinec.base.roofline instead: {offenders}"
    assert _divisions_by_bandwidth(OWNER), "the check must see the owner's own divisions"


def test_the_check_sees_the_forms_a_division_takes(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("a = x / dev.bandwidth\nb = x / exact(bw)\nc = x / d['cache_bandwidth']\n"
                     "x /= link_bandwidth\nok = x / eff.bandwidth_fraction\n"
                     "growth = b['bandwidth'] / a['bandwidth']\n")
    assert _divisions_by_bandwidth(probe) == [1, 2, 3, 4]


positive = st.floats(1e-3, 1e18, allow_nan=False, allow_infinity=False)


@pytest.mark.slow
@given(positive, positive, positive, positive)
def test_time_is_the_larger_term_and_bounds_both(flops, nbytes, peak, bandwidth):
    roof = R.roofline(flops, nbytes, peak, bandwidth)
    t = R.time(flops, nbytes, peak, bandwidth)
    assert t == max(flops / peak, nbytes / bandwidth)
    assert t >= roof.t_compute and t >= roof.t_memory
    # compute-bound exactly where the intensity reaches the ridge (exact rationals: no rounding)
    f, n, p, w = map(Fraction, (flops, nbytes, peak, bandwidth))
    exact = R.roofline(f, n, p, w)
    assert (exact.bound == "compute") == (f / n >= R.ridge(p, w))


def test_time_is_vectorised_elementwise():
    flops, nbytes = np.array([[1e12, 4e12], [2e9, 8e9]]), np.array([[1e9, 1e9], [4e9, 4e9]])
    got = R.time(flops, nbytes, 1e15, 1e12)
    assert np.array_equal(got, np.maximum(flops / 1e15, nbytes / 1e12))
    assert got.shape == (2, 2)


def test_ridge_is_exact_on_rationals_and_absent_without_a_peak():
    # H100 SXM5 datasheet (NVIDIA, 2022): 989.4 TFLOP/s dense BF16, 3.35 TB/s HBM3 ->
    # 989.4e12 / 3.35e12 = 295.34... FLOPs per byte
    assert R.ridge(sp.Rational(9894, 10) * 10**12, sp.Rational(335, 100) * 10**12) == sp.Rational(98940, 335)
    assert abs(R.ridge(989.4e12, 3.35e12) - 295.343) < 1e-3
    assert R.ridge(None, 3.35e12) is None
