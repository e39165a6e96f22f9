"""Registered operator formulas: small functions from dimensions to a Cost.

`FORMULAS[name](...)` returns a Cost; composite operators call smaller ones so
"a multiply-add is 2 FLOPs" is written once (in `contraction`). `UNITS[name]` says
whether the kernel runs on the matrix units (tensor peak) or the vector units.
"""

from collections.abc import Callable

from rooflinec.model.ir import Cost

FORMULAS: dict[str, Callable[..., Cost]] = {}
UNITS: dict[str, str] = {}


def formula(name: str, unit: str = "matrix"):
    """Register a cost formula under `name`; registering a name twice is a bug."""

    def register(fn):
        if name in FORMULAS:
            raise ValueError(f"formula {name!r} registered twice")
        FORMULAS[name] = fn
        UNITS[name] = unit
        return fn

    return register


from rooflinec.model.ops import linear, attention, memory, vector, moe, mla  # noqa: E402,F401  (registers the formulas)
