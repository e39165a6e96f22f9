"""Registered operator formulas: small functions from dimensions to a Cost.

`FORMULAS[name](...)` returns a Cost; composite operators call smaller ones so
"a multiply-add is 2 FLOPs" is written once (in `contraction`). `UNITS[name]` says
whether the kernel runs on the matrix units (tensor peak) or the vector units.
"""

from rooflinec.model.ops.registry import FORMULAS, UNITS, formula  # noqa: F401  (the package's interface)
from rooflinec.model.ops import linear, attention, memory, vector, moe, mla  # noqa: F401  (registers the formulas)
