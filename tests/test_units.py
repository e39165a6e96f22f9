"""Quantities: datasheet strings -> base units, exactly; wrong units say what fits."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from rooflinec.base.quantities import count, gib, seconds, short, si
from rooflinec.base.units import DIMENSIONS, QuantityError, parse_quantity

# --- reading quantities ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "dimension", "expected"),
    [
        # 24 * 2**30 = 25769803776
        ("24 GiB", "bytes", 25769803776),
        # 192 * 2**10 = 196608
        ("192 KiB", "bytes", 196608),
        # 40 * 2**30 = 42949672960 (an A100 40GB)
        ("40 GiB", "bytes", 42949672960),
        ("141 GB", "bytes", 141_000_000_000),
        ("1 B", "bytes", 1),
        ("3 kB", "bytes", 3000),
        ("3 KB", "bytes", 3000),
        ("2 PB", "bytes", 2 * 10**15),
        ("1 TiB", "bytes", 2**40),
        ("1 PiB", "bytes", 2**50),
        ("1008 GB/s", "bandwidth", 1_008_000_000_000),
        ("1555 GB/s", "bandwidth", 1_555_000_000_000),
        ("1555GB/s", "bandwidth", 1_555_000_000_000),
        ("1.2 TB/s", "bandwidth", 1_200_000_000_000),
        ("1 GiB/s", "bandwidth", 2**30),
        ("64 KiB/s", "bandwidth", 65536),
        ("312 TFLOP/s", "flops_rate", 312 * 10**12),
        # 165.2e12 is a whole number of FLOP/s, so it is an exact int
        ("165.2 TFLOP/s", "flops_rate", 165_200_000_000_000),
        ("19.5 TFLOPS", "flops_rate", 19_500_000_000_000),
        ("1978.9 TFLOP/s", "flops_rate", 1_978_900_000_000_000),
        ("2 PFLOP/s", "flops_rate", 2 * 10**15),
        ("1 EFLOPS", "flops_rate", 10**18),
        ("5 kFLOP/s", "flops_rate", 5000),
        ("5 KFLOP/s", "flops_rate", 5000),
        ("7 FLOP/s", "flops_rate", 7),
        ("238.3k tokens/s", "tokens_rate", 238300),
        ("238.3 ktokens/s", "tokens_rate", 238300),
        ("1.5 M tok/s", "tokens_rate", 1_500_000),
        ("120 tokens/s", "tokens_rate", 120),
        ("2 min", "time", 120),
        ("1.5 h", "time", 5400),
        ("1 day", "time", 86400),
        ("30 days", "duration", 30 * 86400),
        ("3 s", "duration", 3),
        ("108", "count", 108),
        (" 108 ", "count", 108),
        ("1_000 B", "bytes", 1000),
        (".5 KiB", "bytes", 512),
        ("5. GB", "bytes", 5 * 10**9),
        ("+2 GB", "bytes", 2 * 10**9),
    ],
)
def test_parses_datasheet_strings_exactly(text, dimension, expected):
    got = parse_quantity(text, dimension)
    assert got == expected
    assert type(got) is int  # whole results stay ints


@pytest.mark.parametrize(
    ("text", "dimension", "expected"),
    [
        ("20 ms", "time", 0.02),
        ("20 us", "time", 20e-6),
        ("20 \u00b5s", "time", 20e-6),  # micro sign
        ("20 \u03bcs", "time", 20e-6),  # Greek mu
        ("7 ns", "time", 7e-9),
        ("1e-3 s", "time", 1e-3),
        ("2.5 B/s", "bandwidth", 2.5),   # a byte count must be whole; a rate need not
    ],
)
def test_fractional_results_are_floats(text, dimension, expected):
    got = parse_quantity(text, dimension)
    assert isinstance(got, float)
    assert got == pytest.approx(expected, rel=1e-15)


def test_gb_is_decimal_and_gib_is_binary():
    assert parse_quantity("1 GB", "bytes") == 10**9
    assert parse_quantity("1 GiB", "bytes") == 2**30
    assert parse_quantity("1 GB/s", "bandwidth") == 10**9
    assert parse_quantity("1 GiB/s", "bandwidth") == 2**30
    # an A100's "20 MB" of SRAM is binary: 108 * 192 KiB = 20.25 MiB
    assert 108 * parse_quantity("192 KiB", "bytes") == parse_quantity("20.25 MiB", "bytes")


def test_plain_numbers_are_base_units():
    assert parse_quantity(312_000_000_000_000, "flops_rate") == 312e12
    assert parse_quantity(1.555e12, "bandwidth") == 1_555_000_000_000
    assert type(parse_quantity(3.0, "count")) is int
    assert parse_quantity(0.25, "time") == 0.25
    assert parse_quantity(Fraction(3, 2), "time") == 1.5


@pytest.mark.parametrize("text", ["312e12", "312E12", "3.12e14", "312e+12", "312_000e9"])
def test_exponent_strings_as_pyyaml_reads_them(text):
    assert parse_quantity(text, "flops_rate") == 312 * 10**12


def test_pyyaml_reads_exponent_without_dot_as_a_string():
    """YAML 1.1 needs a dot in a float: the loader sees a str, and we read the number."""
    loaded = yaml.safe_load("peak: 312e12\nbw: 1555 GB/s\nsize: 40 GiB\n")
    assert loaded["peak"] == "312e12"
    assert parse_quantity(loaded["peak"], "flops_rate") == 312 * 10**12
    assert parse_quantity(loaded["bw"], "bandwidth") == 1555 * 10**9
    assert parse_quantity(loaded["size"], "bytes") == 40 * 2**30


def test_duration_accepts_the_time_units():
    assert list(DIMENSIONS["duration"]) == list(DIMENSIONS["time"])
    for unit in list(DIMENSIONS["time"]):
        assert parse_quantity(f"2 {unit}", "duration") == parse_quantity(f"2 {unit}", "time")


def test_units_for_lists_spellings():
    assert list(DIMENSIONS["bytes"]) == ["B", "kB", "KB", "MB", "GB", "TB", "PB",
                                  "KiB", "MiB", "GiB", "TiB", "PiB"]
    assert "TFLOP/s" in list(DIMENSIONS["flops_rate"]) and "TFLOPS" in list(DIMENSIONS["flops_rate"])
    assert "GiB/s" in list(DIMENSIONS["bandwidth"])
    assert list(DIMENSIONS["count"]) == []
    assert set(DIMENSIONS) >= {"flops_rate", "bandwidth", "bytes", "count",
                               "tokens_rate", "time", "duration"}


def test_every_listed_unit_parses():
    for dimension in DIMENSIONS:
        for unit in list(DIMENSIONS[dimension]):
            factor = DIMENSIONS[dimension][unit]
            got = parse_quantity(f"1 {unit}", dimension)
            if factor.denominator == 1:
                assert got == factor and type(got) is int
            else:
                assert got == float(factor)


def test_unknown_dimension_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown dimension 'speed'"):
        parse_quantity("1 GB/s", "speed")


# --- errors -----------------------------------------------------------------------------


def _message(value, dimension) -> str:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(value, dimension)
    assert isinstance(caught.value, ValueError)
    return str(caught.value)


def test_wrong_dimension_names_both_and_lists_what_fits():
    message = _message("24 GB/s", "bytes")
    assert message == (
        "'24 GB/s' is a bandwidth, expected a memory size; "
        "use one of B, kB, MB, GB, TB, KiB, MiB, GiB, TiB"
    )


@pytest.mark.parametrize(
    ("value", "dimension", "owner", "fits"),
    [
        ("40 GiB", "bandwidth", "a memory size", "GB/s"),
        ("312 TFLOP/s", "bandwidth", "a compute rate", "GB/s"),
        ("1555 GB/s", "flops_rate", "a bandwidth", "TFLOP/s"),
        ("20 ms", "bytes", "a time", "GiB"),
        ("100 tokens/s", "flops_rate", "a token rate", "TFLOP/s"),
        ("24 GB", "count", "a memory size", "plain number"),
    ],
)
def test_wrong_dimension(value, dimension, owner, fits):
    message = _message(value, dimension)
    assert message.startswith(f"{value!r} is {owner}, expected ")
    assert fits in message


@pytest.mark.parametrize(
    ("value", "dimension", "guess"),
    [
        ("1555 Gb/s", "bandwidth", "GB/s"),
        ("1555 GBps", "bandwidth", "GB/s"),
        ("312 TFLOPs", "flops_rate", "TFLOPS"),
        ("312 Tflop/s", "flops_rate", "TFLOP/s"),
        ("40 gib", "bytes", "GiB"),
        ("40 GiBs", "bytes", "GiB"),
        ("3 mins", "time", "min"),
    ],
)
def test_unknown_unit_suggests_the_closest(value, dimension, guess):
    message = _message(value, dimension)
    assert "unknown unit" in message
    assert f"did you mean {guess!r}?" in message


def test_unknown_unit_without_a_close_match_still_lists_units():
    message = _message("5 parsecs", "time")
    assert "did you mean" not in message
    assert "use one of ns, us, ms, s, min, h, days" in message


@pytest.mark.parametrize("value", ["nan", "NaN GB", "inf", "-inf", ".inf", "Infinity B",
                                   float("nan"), float("inf"), -float("inf"),
                                   0, 0.0, "0", "0 GB", -1, "-5 GB", "-0.5", "1e400 B"])
def test_not_positive_finite(value):
    assert "must be a positive finite number" in _message(value, "bytes")


def test_underflow_to_zero_is_rejected():
    assert "must be a positive finite number" in _message("1e-400 s", "time")


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (True, "a boolean (true)"),
        (False, "a boolean (false)"),
        (None, "nothing (null)"),
        ([1, 2], "a list"),
        ({"a": 1}, "a mapping"),
        (b"12", "a bytes"),
    ],
)
def test_wrong_python_types(value, said):
    message = _message(value, "count")
    assert message == f"expected a plain count such as '108', got {said}"


@pytest.mark.parametrize("value", ["fast", "", "   ", "GB", "1,555 GB/s", "1.2.3 GB",
                                   "__import__('os')", "1e GB", "0x10"])
def test_non_numeric_strings(value):
    message = _message(value, "bandwidth")
    assert "is not a number or a quantity" in message or "unknown unit" in message
    assert "GB/s" in message


def test_error_carries_value_and_dimension():
    with pytest.raises(QuantityError) as caught:
        parse_quantity("24 GB/s", "bytes")
    assert caught.value.value == "24 GB/s"
    assert caught.value.dimension == "bytes"


def test_count_takes_no_unit():
    assert parse_quantity("108", "count") == 108
    assert "has a unit ('SMs')" in _message("108 SMs", "count")


# --- formatting (the one formatter, rooflinec.base.quantities) --------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (si(1.555e12, "B/s"), "1.555 TB/s"),        # A100 40GB HBM2 bandwidth
        (si(312e12, "FLOP/s"), "312.0 TFLOP/s"),    # A100 bf16 dense tensor peak
        (si(999.0), "999.0"),
        (gib(40 * 2**30), "40.00 GiB"),
        (gib(1000), "1,000 B"),
        (seconds(0.02), "20.00 ms"),
        (seconds(1.5e-6), "1.500 µs"),
        (seconds(1e-12), "1.000e-12 s"),
        (short(1e13), "10T"), (short(0.01), "0.01"), (short(19.5e12, "FLOP/s"), "19.5 TFLOP/s"),
        (count(4096), "4k"), (count(3 << 20), "3M"), (count(1000), "1000"),
    ],
)
def test_formats(text, expected):
    assert text == expected


# --- properties -------------------------------------------------------------------------

_BYTE_PREFIXES = [("", 1), ("k", 10**3), ("K", 10**3), ("M", 10**6), ("G", 10**9),
                  ("T", 10**12), ("P", 10**15), ("Ki", 2**10), ("Mi", 2**20),
                  ("Gi", 2**30), ("Ti", 2**40), ("Pi", 2**50)]


@pytest.mark.slow
@given(n=st.integers(min_value=1, max_value=10**12), prefix=st.sampled_from(_BYTE_PREFIXES),
       space=st.sampled_from(["", " ", "  "]))
def test_prefix_scales_exactly(n, prefix, space):
    name, factor = prefix
    assert parse_quantity(f"{n}{space}{name}B", "bytes") == n * factor
    assert parse_quantity(f"{n}{space}{name}B/s", "bandwidth") == n * factor


@pytest.mark.parametrize("text", ["1.5 B", "0.3 KiB", "41.51 GiB"])
def test_fractional_bytes_are_refused(text):
    with pytest.raises(QuantityError, match="whole number of bytes"):
        parse_quantity(text, "bytes")


@pytest.mark.slow
@given(n=st.integers(min_value=1, max_value=10**9))
def test_gib_over_gb_is_the_fixed_ratio(n):
    ratio = Fraction(parse_quantity(f"{n} GiB", "bytes"), parse_quantity(f"{n} GB", "bytes"))
    assert ratio == Fraction(2**30, 10**9)


@given(mantissa=st.decimals(min_value="0.001", max_value="99999", places=3,
                            allow_nan=False, allow_infinity=False),
       prefix=st.sampled_from([("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15)]))
@pytest.mark.slow
def test_decimal_mantissa_is_exact(mantissa, prefix):
    name, power = prefix
    text = f"{mantissa} {name}FLOP/s"
    got = parse_quantity(text, "flops_rate")
    exact = Fraction(mantissa) * 10**power
    if exact.denominator == 1:
        assert got == exact and type(got) is int
    else:
        assert got == float(exact)


# up to 1e17: specs spell sizes up to peta (PB, PFLOP/s), the formatter goes to exa
@pytest.mark.slow
@given(value=st.floats(min_value=1e-3, max_value=1e17, allow_nan=False, allow_infinity=False),
       kind=st.sampled_from(["bandwidth", "bytes", "flops_rate", "time"]))
def test_format_round_trips_to_four_significant_digits(value, kind):
    text = {"bandwidth": lambda v: si(v, "B/s"), "flops_rate": lambda v: si(v, "FLOP/s"),
            "bytes": gib, "time": seconds}[kind](value)
    try:
        back = parse_quantity(text.replace(",", "").replace("µs", "us"), kind)
    except QuantityError as exc:   # a byte count must be whole; '41.51 GiB' is not
        assert kind == "bytes" and "whole number of bytes" in str(exc)
        return
    # 4 significant digits: half a unit in the 4th digit is at most 5e-4 relative
    assert math.isclose(back, value, rel_tol=5.1e-4)
