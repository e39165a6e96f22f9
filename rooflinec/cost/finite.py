"""Numbers fit to leave the evaluation: finite, and floats where an integer is past 2^53.

Analyses compute exactly (Python integers, sympy rationals); a report, a chart or NumPy
takes floats. `settle` is the one gate every section and chart passes: an integer too big
to be exact as a float becomes a float (NumPy would otherwise hold it as an object), and
an infinity, a NaN or an integer past the float range is named so the caller can refuse it.
"""

from __future__ import annotations

import math

EXACT = 2 ** 53   # integers above this leave a section as floats: charts and NumPy take floats


def settle(node, path: str, bad: list):
    """`node` (a section) with integers above EXACT as floats; where a number is infinite,
    NaN or too large for a float, 'path = value' is added to `bad`."""
    if isinstance(node, dict):
        return {k: settle(v, f"{path}.{k}" if path else str(k), bad) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return type(node)(settle(v, f"{path}[{i}]", bad) for i, v in enumerate(node))
    if isinstance(node, int) and not isinstance(node, bool) and abs(node) > EXACT:
        try:
            node = float(node)
        except OverflowError:
            bad.append(f"{path} = an integer of {len(str(abs(node)))} digits")
            return node
    if isinstance(node, float) and not math.isfinite(node):
        bad.append(f"{path} = {node}")
    return node
