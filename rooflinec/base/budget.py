"""Budgets, all counted in points, terms, degrees or bits, never in seconds, so a report is
the same on an idle and on a loaded machine.

Point budgets: how much an analysis, and a whole study, may evaluate.

Checked after ranges are expanded and before anything is evaluated, so a list or range
of a million values is a located error in milliseconds, not a build that runs for an hour.
An analysis's points are the product of the lists it crosses (serving's batch x contexts
is one table), summed over its tables, times the study's devices. The sweep is vectorised
and carries its own, larger limit (rooflinec.analyses.sweep.MAX_POINTS); it is not counted
here. The limits are stated in the study schema's descriptions.

Expression budgets: sympy's open-ended steps (factoring, expanding, real roots, limits by
Gruntz's algorithm) are sized before they run, by upper bounds computed from the expression
tree in one pass (`formula.expanded_terms`, `formula.degrees`), never by a timer. A step past
its budget is not attempted: its caller's stated fallback runs instead (the formula as written,
the searched crossing, "limit not found"), the same on every machine. The budgets sit well
above what the shipped models need (12 terms, 9 symbols, degree 3, crossing polynomials of
degree 1) and well below where sympy takes seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import sympy as sp

from rooflinec.base.formula import degrees, expanded_terms

MAX_ANALYSIS = 4096    # points x devices one analysis may evaluate
MAX_STUDY = 12288      # the same, summed over a study's analyses

# analysis -> its tables, each the list keys it crosses; an analysis not named here
# crosses every list it has (an upper bound)
TABLES = {
    "gemm_intensity": [("tokens",)],
    "attention_intensity": [("contexts",)],
    "decode_view": [("batch", "contexts")],
    "serving": [("batch", "contexts"), ("contexts",), ("prompts",), ("measured",)],
    "ledger": [("phases", "variants", "scopes", "workloads")],
    "sweep": [],
}
DEFAULTS = {"serving": {"prompts": "contexts"}}   # a list left out that another one stands for


def _operator_points(options: dict) -> int:
    """The operator catalog crosses each op's argument lists."""
    ops = options.get("ops")
    return sum(math.prod(len(v) for v in op["args"].values() if isinstance(v, list))
               for op in (ops if isinstance(ops, list) else ())
               if isinstance(op, dict) and isinstance(op.get("args"), dict))


COUNTERS = {"operators": _operator_points}


def points(key: str, options: dict) -> int:
    """Points one analysis evaluates, before the devices multiply them."""
    if not isinstance(options, dict):
        return 1
    if key in COUNTERS:
        return COUNTERS[key](options)
    options = {**{k: options.get(v) for k, v in DEFAULTS.get(key, {}).items()}, **options}
    tables = TABLES.get(key, [tuple(k for k, v in options.items() if isinstance(v, list))])
    lists = [[len(options[k]) for k in table if isinstance(options.get(k), list)] for table in tables]
    return sum(math.prod(lengths) for lengths in lists if lengths)


class Budget:
    """A study's running total; `charge` returns the located problems of one analysis."""

    def __init__(self, devices: int, problem: Callable):
        self.devices, self.problem, self.spent = max(1, devices), problem, 0

    def charge(self, key: str, options) -> list:
        n = points(key, options) * self.devices
        self.spent += n
        if n > MAX_ANALYSIS:
            return [self.problem(("analyses", key), (
                f"analysis '{key}' would evaluate {n} points (its lists crossed, times "
                f"{self.devices} device(s)); an analysis may evaluate at most {MAX_ANALYSIS}: "
                "shorten its lists or ranges"))]
        if self.spent > MAX_STUDY:
            return [self.problem(("analyses", key), (
                f"the study's analyses up to '{key}' would evaluate {self.spent} points; a study "
                f"may evaluate at most {MAX_STUDY} in all: shorten lists or split the study"))]
        return []


# --- expression budgets -------------------------------------------------------------------

FACTOR_TERMS = 64      # terms multiplied out that sp.factor / sp.cancel may meet
FACTOR_DEGREE = 40     # sum over symbols of the power each reaches (numerator and denominator)
EXPAND_TERMS = 4096    # terms sp.expand or sp.Poly may build
PIECEWISE_DEGREE = 8   # degree of a min or max argument sp.expand may rebuild
ROOT_DEGREE = 4        # degree of a crossing polynomial whose real roots are isolated exactly
ROOT_BITS = 4096       # bits of its largest coefficient
LIMIT_OPS = 60         # operations of an expression handed to sp.limit (Gruntz)
EXACT_BITS = 1 << 16   # bits the powers of one evaluation may build exactly (q**M at M = 2**40
                       # would take 2**40 bits); past it, EXACT_DIGITS significant digits
EXACT_DIGITS = 60


class OverBudget(Exception):
    """A step past its expression budget: the caller's stated fallback applies."""


def _degree(expr: sp.Expr) -> int:
    return sum(degrees(expr).values())


def may_factor(expr: sp.Expr) -> bool:
    """Whether sp.factor (or sp.cancel) may run on `expr`."""
    return expanded_terms(expr) <= FACTOR_TERMS and _degree(expr) <= FACTOR_DEGREE


def may_expand(expr: sp.Expr) -> bool:
    """Whether sp.expand (or sp.Poly, which multiplies out) may run on `expr`: its terms, and
    the degree of every min and max argument (expanding rebuilds each min and max, and sympy
    compares their arguments pairwise by its assumptions: seconds a call at degree 16)."""
    return expanded_terms(expr) <= EXPAND_TERMS and all(
        _degree(arg) <= PIECEWISE_DEGREE for f in expr.atoms(sp.Min, sp.Max) for arg in f.args)


def may_isolate_roots(poly: sp.Poly) -> bool:
    """Whether the real roots of a univariate `poly` with rational coefficients may be isolated."""
    coeffs = poly.all_coeffs()
    if poly.degree() > ROOT_DEGREE or not all(c.is_number and c.is_finite for c in coeffs):
        return False
    return all(max(abs(sp.Rational(c).p).bit_length(), sp.Rational(c).q.bit_length()) <= ROOT_BITS
               for c in coeffs)


def may_take_limit(expr: sp.Expr) -> bool:
    """Whether sp.limit may run on `expr`."""
    return sp.count_ops(expr) <= LIMIT_OPS and may_expand(expr)


def power_bits(expr: sp.Expr, point: dict) -> float:
    """An upper bound of the bits the powers whose exponent holds a symbol of `point` build
    there (a MoE layer's (1 - k/E)**M); infinite where a base or an exponent is not a number."""
    total = 0
    for power in expr.atoms(sp.Pow):
        if not power.exp.free_symbols & point.keys() or power.base.is_Float:
            continue   # a float power is float arithmetic: no bits pile up
        exponent = power.exp.xreplace(point)
        if not (power.base.is_Rational and exponent.is_Number):
            return math.inf
        base = power.base
        total += math.ceil(abs(exponent)) * max(abs(base.p).bit_length(), base.q.bit_length())
    return total
