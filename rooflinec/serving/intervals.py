"""Prediction intervals by split conformal quantiles of log residuals.

Given the calibration residuals r_i = log(predicted_i / measured_i) of n rows and a level
1 - a, the interval of a new prediction y is [y * e^-hi, y * e^-lo] where lo and hi are the
floor((n + 1) a/2)-th and ceil((n + 1)(1 - a/2))-th smallest r_i: for exchangeable rows each
tail holds at most a/2 of new rows, so at least 1 - a of them fall inside (Vovk et al.,
"Algorithmic Learning in a Random World", 2005; Lei et al., JASA 2018, split conformal).
Residuals in, quantiles out: who groups the rows (per op class, per serving group) decides.
"""

from __future__ import annotations

import math

import numpy as np


EPS = 1e-9


class TooFewRows(ValueError):
    """Fewer calibration rows than the level needs (n + 1 > 2 / a rows for each tail)."""


def quantiles(residuals, level: float = 0.8) -> tuple[float, float]:
    """(lo, hi): the conformal quantiles of the log residuals for a two-sided `level` interval."""
    r = np.sort(np.asarray(residuals, float))
    n, tail = len(r), (1 - level) / 2
    # EPS: (1 - 0.8) / 2 is 0.09999999999999998 in binary; 20 of it is 2, not 1.9999...
    k_lo, k_hi = math.floor((n + 1) * tail + EPS), math.ceil((n + 1) * (1 - tail) - EPS)
    if k_lo < 1 or k_hi > n:
        raise TooFewRows(f"{n} residuals cannot give a {level:.0%} interval; need at least "
                         f"{math.ceil(1 / tail - EPS) - 1}")
    return float(r[k_lo - 1]), float(r[k_hi - 1])


def interval(predicted, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The measured values a prediction's interval allows: log(pred / measured) in [lo, hi]."""
    p = np.asarray(predicted, float)
    return p * np.exp(-hi), p * np.exp(-lo)


def covered(predicted, measured, lo: float, hi: float) -> np.ndarray:
    r = np.log(np.asarray(predicted, float) / np.asarray(measured, float))
    return (r >= lo) & (r <= hi)
