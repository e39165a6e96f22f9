"""Point budgets: how much an analysis, and a whole study, may evaluate.

Checked after ranges are expanded and before anything is evaluated, so a list or range
of a million values is a located error in milliseconds, not a build that runs for an hour.
An analysis's points are the product of the lists it crosses (serving's batch x contexts
is one table), summed over its tables, times the study's devices. The sweep is vectorised
and carries its own, larger limit (rooflinec.analyses.sweep.MAX_POINTS); it is not counted
here. The limits are stated in the study schema's descriptions.
"""

from __future__ import annotations

import math
from collections.abc import Callable

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
