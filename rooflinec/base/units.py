"""Quantities as datasheets write them: ``1555 GB/s``, ``312 TFLOP/s``, ``40 GiB``.

A quantity in a spec is a plain number (already in base units), a numeric string
(PyYAML 1.1 reads ``312e12`` as the *string* ``'312e12'``), or ``"<number> <unit>"``.
``parse_quantity`` turns any of them into a number in base units (FLOP/s, B/s, B, s,
tokens/s) and checks that the unit belongs to the field's dimension. Arithmetic is
exact (``fractions.Fraction``): a result that is a whole number comes back as ``int``.

``GB`` is always 10^9 bytes and ``GiB`` always 2^30; nothing here guesses.
"""

from __future__ import annotations

import difflib
import math
import numbers
import re
import sys
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType
from typing import Mapping

__all__ = [
    "DIMENSIONS",
    "QuantityError",
    "parse_quantity",
]


class QuantityError(ValueError):
    """A spec quantity that cannot be read; the message says what fits instead."""

    def __init__(self, message: str, value: object = None, dimension: str | None = None):
        super().__init__(message)
        self.value = value
        self.dimension = dimension


# --- unit tables -------------------------------------------------------------------

_SI = (("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15), ("E", 18))
_BINARY = (("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50))


def _prefixed(base: str, prefixes, radix: int, extra_k: bool = True) -> dict[str, Fraction]:
    """``{prefix + base: factor}``; ``K`` is accepted as a spelling of ``k``."""
    table: dict[str, Fraction] = {}
    for prefix, power in prefixes:
        table[prefix + base] = Fraction(radix) ** power
        if prefix == "k" and extra_k:
            table["K" + base] = Fraction(radix) ** power
    return table


def _byte_units(suffix: str) -> dict[str, Fraction]:
    table = {"B" + suffix: Fraction(1)}
    table.update(_prefixed("B" + suffix, _SI[:5], 10))  # kB .. PB (no EB)
    table.update(_prefixed("B" + suffix, _BINARY, 2))  # KiB .. PiB
    return table


def _flops_units() -> dict[str, Fraction]:
    table: dict[str, Fraction] = {}
    for base in ("FLOP/s", "FLOPS"):
        table[base] = Fraction(1)
        table.update(_prefixed(base, _SI, 10))
    return table


def _tokens_units() -> dict[str, Fraction]:
    table: dict[str, Fraction] = {}
    for base in ("tokens/s", "token/s", "tok/s"):
        table[base] = Fraction(1)
        table.update(_prefixed(base, _SI[:2], 10))  # k, K, M
    return table


_TIME = {
    "s": Fraction(1),
    "ms": Fraction(1, 10**3),
    "us": Fraction(1, 10**6),
    "\u00b5s": Fraction(1, 10**6),  # MICRO SIGN
    "\u03bcs": Fraction(1, 10**6),  # GREEK SMALL LETTER MU
    "ns": Fraction(1, 10**9),
    "min": Fraction(60),
    "h": Fraction(3600),
    "day": Fraction(86400),
    "days": Fraction(86400),
}

DIMENSIONS: dict[str, Mapping[str, Fraction]] = {
    "flops_rate": MappingProxyType(_flops_units()),
    "bandwidth": MappingProxyType(_byte_units("/s")),
    "bytes": MappingProxyType(_byte_units("")),
    "count": MappingProxyType({}),
    "tokens_rate": MappingProxyType(_tokens_units()),
    "time": MappingProxyType(dict(_TIME)),
    "duration": MappingProxyType(dict(_TIME)),
}
"""Dimension name -> read-only table of accepted unit spellings -> factor to base units."""

# What a value of each dimension is called in a message, and an example of one.
_NOUN = {
    "flops_rate": ("a compute rate", "312 TFLOP/s"),
    "bandwidth": ("a bandwidth", "1555 GB/s"),
    "bytes": ("a memory size", "40 GiB"),
    "count": ("a plain count", "108"),
    "tokens_rate": ("a token rate", "238.3k tokens/s"),
    "time": ("a time", "20 ms"),
    "duration": ("a duration", "30 days"),
}

# The spellings an error message lists (DIMENSIONS holds every accepted one).
_SHOWN = {
    "flops_rate": ("FLOP/s", "kFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s", "EFLOP/s"),
    "bandwidth": ("B/s", "kB/s", "MB/s", "GB/s", "TB/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s"),
    "bytes": ("B", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"),
    "count": (),
    "tokens_rate": ("tokens/s", "k tokens/s", "M tokens/s", "tok/s"),
    "time": ("ns", "us", "ms", "s", "min", "h", "days"),
    "duration": ("ns", "us", "ms", "s", "min", "h", "days"),
}

def _table(dimension: str) -> Mapping[str, Fraction]:
    try:
        return DIMENSIONS[dimension]
    except KeyError:
        raise ValueError(
            f"unknown dimension {dimension!r}; known: {', '.join(DIMENSIONS)}"
        ) from None


# --- parsing ------------------------------------------------------------------------

_DIGITS = r"[0-9](?:_?[0-9])*"    # ASCII only: fullwidth or Arabic-Indic digits are not numbers
_QUANTITY = re.compile(
    rf"""\s*(?P<number>[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?[0-9]+)?)
         \s*(?P<unit>.*?)\s*""",
    re.VERBOSE | re.DOTALL | re.ASCII,
)
_NON_FINITE = re.compile(r"\s*[+-]?\.?(?:nan|inf(?:inity)?)\b", re.IGNORECASE)
_POSITIVE = "must be a positive finite number"
_MAX_DIGITS = 64       # digits in a mantissa; a datasheet number has a handful
_MAX_EXPONENT = 400    # beyond this, 64 digits cannot bring a value back into float range


def _fits(dimension: str) -> str:
    shown = _SHOWN[dimension]
    if not shown:
        return "write a plain number"
    return "use one of " + ", ".join(shown)


def _expected(dimension: str) -> str:
    return f"expected {_NOUN[dimension][0]}"


def _repr(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut short: a message quotes a value, not a whole file."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _owner(unit: str, dimension: str) -> str | None:
    """The other dimension that accepts ``unit``, if any."""
    for name, table in DIMENSIONS.items():
        if name != dimension and unit in table and name != "duration":
            return name
    return None


def _suggest(unit: str, dimension: str) -> str | None:
    """The closest accepted spelling, compared case-insensitively."""
    candidates = list(_table(dimension)) or [u for t in DIMENSIONS.values() for u in t]
    lowered = {}
    for candidate in candidates:
        lowered.setdefault(candidate.lower(), candidate)
    match = difflib.get_close_matches(unit.lower(), list(lowered), n=1, cutoff=0.5)
    return lowered[match[0]] if match else None


def _exact(value: Fraction) -> int | float:
    if value.denominator == 1:
        return int(value)
    return float(value)


def _number(value: numbers.Real, text: str, dimension: str) -> Fraction:
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityError(f"{text} {_POSITIVE}", value, dimension)
    try:
        return Fraction(value)
    except (TypeError, ValueError, OverflowError):
        raise QuantityError(
            f"{text} is not a number; {_expected(dimension)}", value, dimension
        ) from None


def _split(value: str, dimension: str) -> tuple[Fraction, str]:
    """``'1555 GB/s'`` -> ``(Fraction(1555), 'GB/s')``."""
    shown = _repr(value)
    if _NON_FINITE.match(value):
        raise QuantityError(f"{shown} {_POSITIVE}", value, dimension)
    match = _QUANTITY.fullmatch(value)
    if match is None:
        example = _NOUN[dimension][1]
        raise QuantityError(
            f"{shown} is not a number or a quantity; {_expected(dimension)} "
            f"such as '{example}'; {_fits(dimension)}",
            value,
            dimension,
        )
    digits = match["number"].replace("_", "")
    mantissa, _, exponent = digits.lower().partition("e")
    if len(mantissa) > _MAX_DIGITS:
        raise QuantityError(f"{shown} has more than {_MAX_DIGITS} digits; {_expected(dimension)}",
                            value, dimension)
    power = exponent.lstrip("+-").lstrip("0")
    if len(power) > 4 or int(power or 0) > _MAX_EXPONENT:  # 1e999999999 would take minutes
        raise QuantityError(f"{shown} {_POSITIVE}", value, dimension)
    sign = -1 if exponent.startswith("-") else 1
    number = Fraction(mantissa) * Fraction(10) ** (sign * int(power or 0))
    unit = "".join(match["unit"].split())  # '238.3k tokens/s' -> 'ktokens/s'
    return number, unit


def _factor(unit: str, value: str, dimension: str) -> Fraction:
    table = _table(dimension)
    if unit in table:
        return table[unit]
    shown = _repr(value)
    owner = _owner(unit, dimension)
    if owner is not None:
        message = f"{shown} is {_NOUN[owner][0]}, {_expected(dimension)}; {_fits(dimension)}"
    elif dimension == "count":
        message = f"{shown} has a unit ({unit!r}) but {_expected(dimension)}; {_fits(dimension)}"
    else:
        guess = _suggest(unit, dimension)
        hint = f"; did you mean {guess!r}?" if guess else ""
        message = (
            f"{shown} has an unknown unit {unit!r} for {_NOUN[dimension][0]}{hint} "
            f"({_fits(dimension)})"
        )
    raise QuantityError(message, value, dimension)


def parse_quantity(value: object, dimension: str) -> int | float:
    """Read a spec quantity as a number in the base unit of ``dimension``.

    >>> parse_quantity("24 GiB", "bytes")
    25769803776
    >>> parse_quantity("165.2 TFLOP/s", "flops_rate")
    165200000000000
    >>> parse_quantity("312e12", "flops_rate")
    312000000000000
    """
    _table(dimension)  # an unknown dimension is the caller's bug, not the user's
    if isinstance(value, bool) or value is None or not isinstance(value, (str, numbers.Real)):
        raise QuantityError(
            f"{_expected(dimension)} such as '{_NOUN[dimension][1]}', got {_type_name(value)}",
            value,
            dimension,
        )
    if isinstance(value, str):
        number, unit = _split(value, dimension)
        result = number * _factor(unit, value, dimension) if unit else number
        shown = _repr(value)
    else:
        result = _number(value, _repr(value), dimension)
        shown = _repr(value)
    if result <= 0 or result > Fraction(sys.float_info.max):
        raise QuantityError(f"{shown} {_POSITIVE}", value, dimension)
    if dimension == "bytes" and result.denominator != 1:
        raise QuantityError(f"{shown} is not a whole number of bytes; {_expected(dimension)} "
                            f"such as '{_NOUN[dimension][1]}'", value, dimension)
    out = _exact(result)
    if out == 0:  # underflowed to 0.0, e.g. '1e-400 s'
        raise QuantityError(f"{shown} {_POSITIVE}", value, dimension)
    return out
