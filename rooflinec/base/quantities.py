"""The one quantity formatter: every number a report or chart prints with a prefix goes
through `prefixed`, with one table per kind of prefix."""

from __future__ import annotations

import math

DECIMAL = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
BINARY = ((2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki"))
SUBUNIT = ((1, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))   # seconds and below
EXACT_BINARY = ((1 << 20, "M"), (1 << 10, "k"))                 # sizes such as 4k = 4096


def prefixed(x, table=DECIMAL) -> tuple[float, str]:
    """(x scaled, prefix) for the largest prefix of `table` that |x| reaches, else (x, "")."""
    for factor, prefix in table:
        if abs(x) >= factor:
            return x / factor, prefix
    return x, ""


def sig(x, digits: int = 4) -> str:
    """`digits` significant figures, no exponent for everyday magnitudes."""
    if x is None:
        return "—"
    if x == 0 or not math.isfinite(x):
        return str(x)
    mag = math.floor(math.log10(abs(x)))
    if -4 <= mag < 15:
        return f"{x:,.{max(digits - 1 - mag, 0)}f}"
    return f"{x:.{digits - 1}e}"


def si(x, unit: str = "", digits: int = 4) -> str:
    """Decimal prefixes: 1.555e12 B/s -> '1.555 TB/s'."""
    if x is None:
        return "—"
    value, prefix = prefixed(x)
    return f"{sig(value, digits)} {prefix}{unit}".rstrip()


def gib(x, digits: int = 4) -> str:
    """Binary bytes, the unit memory is sold in: 2^30 B = 1 GiB."""
    value, prefix = prefixed(x, BINARY)
    return f"{sig(value, digits)} {prefix}B"


def seconds(x, digits: int = 4) -> str:
    value, prefix = prefixed(x, SUBUNIT)   # below a nanosecond: plain seconds
    return f"{sig(value, digits)} {prefix}s"


# A fitted time's resolution: a least-squares fit that pins a parameter at its floor leaves
# ~1e-20 s there, which is no time at all; such values print as 0 with this rule stated once.
RESOLUTION_S = 1e-9


def resolved(x, digits: int = 4) -> str:
    """A fitted time in seconds: |x| below RESOLUTION_S prints as '0 s' (the values kept)."""
    if x is not None and abs(x) < RESOLUTION_S:
        return "0 s"
    return seconds(x, digits)


RESOLUTION_RULE = f"times below {seconds(RESOLUTION_S, 1)} (a fit's floor) print as 0 s"


def short(x: float, unit: str = "") -> str:
    """Chart labels: 4 significant digits, '%g' style (19.5 TFLOP/s, 100k)."""
    value, prefix = prefixed(x, DECIMAL[1:])
    return f"{value:.4g} {prefix}{unit}" if unit else f"{value:g}{prefix}"


def count(v) -> str:
    """An integer size as written in a shape: exact binary multiples as 4k, 1M."""
    if isinstance(v, int):
        for factor, suffix in EXACT_BINARY:
            if v >= factor and v % factor == 0:
                return f"{v // factor}{suffix}"
    return str(v)
