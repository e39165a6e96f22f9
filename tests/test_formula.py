"""The whitelist formula parser: golden parses, located errors, and hypothesis laws.

A longer run: ROOFLINEC_FUZZ_EXAMPLES=5000 python -m pytest tests/test_fuzz.py tests/test_formula.py
"""

from __future__ import annotations

import os

import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rooflinec.base.formula import MAX_CHARS, FormulaError, parse_formula
from rooflinec.model.symbols import ALPHABET, B, L, M, S, V, b, d_ff, d_model

EXAMPLES = int(os.environ.get("ROOFLINEC_FUZZ_EXAMPLES", "100"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def parse(text: str) -> sp.Expr:
    return parse_formula(text, ALPHABET)


# --- golden parses ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2*M*d_model*d_ff", 2 * M * d_model * d_ff),
        ("  2 * M\n * d_model ", 2 * M * d_model),
        ("42", sp.Integer(42)),
        # decimals are exact: 0.5 = 1/2, 1.25 = 5/4
        ("0.5*M", sp.Rational(1, 2) * M),
        (".5", sp.Rational(1, 2)),
        ("1.25", sp.Rational(5, 4)),
        # precedence as in Python: * before +, ** before unary minus
        ("1 + 2*3", sp.Integer(7)),
        ("(1 + 2)*3", sp.Integer(9)),
        ("-M**2", -(M**2)),
        ("(-M)**2", M**2),
        # ** is right associative: 2**3**2 = 2**9 = 512 (not 8**2 = 64)
        ("2**3**2", sp.Integer(512)),
        ("2^3^2", sp.Integer(512)),
        ("2**-1", sp.Rational(1, 2)),
        ("M/S/B", M / S / B),
        ("M - S - B", M - S - B),
        ("--M", M),
        ("+M", M),
        ("b*(M*d_model + d_model*V)", b * (M * d_model + d_model * V)),
        ("min(M, S)", sp.Min(M, S)),
        ("max(M, S, B)", sp.Max(M, S, B)),
        ("ceil(S/128)", sp.ceiling(S / 128)),
        ("floor(M/2)", sp.floor(M / 2)),
        # ceil(7/2) = ceil(3.5) = 4
        ("ceil(7/2)", sp.Integer(4)),
        ("L*(2*M*d_model**2)", L * 2 * M * d_model**2),
        ("(M+1)**16", (M + 1) ** 16),
        ("M**-16", M**-16),
    ],
)
def test_parses(text, expected):
    assert parse(text) == expected


def test_symbols_come_from_the_alphabet():
    # same object, so positive=True, integer=True assumptions carry through
    assert parse("d_model").is_positive and parse("d_model") is d_model


def test_custom_alphabet():
    n_experts = sp.Symbol("n_experts", positive=True, integer=True)
    alphabet = {"M": M, "d_model": d_model, "n_experts": n_experts}
    assert parse_formula("2*M*d_model*n_experts", alphabet) == 2 * M * d_model * n_experts


# --- errors: what, where (1-based column), and what is accepted ----------------------


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("", 1, "formula is empty"),
        ("   ", 1, "formula is empty"),
        ("d_modle*2", 1, "did you mean 'd_model'?"),
        ("2*m", 3, "did you mean 'M'?"),
        ("lambda", 1, "accepted names: B, S, M, d_model"),
        ("d_model.__class__", 8, "attribute access"),
        ("(M).real", 4, "attribute access"),
        ("__import__", 1, "names starting with '__'"),
        ("M*__class__", 3, "names starting with '__'"),
        ("'M'", 1, "strings are not accepted"),
        ('M + "x"', 5, "strings are not accepted"),
        ("M[0]", 2, "indexing"),
        ("foo(M)", 1, "calls to 'foo' are not accepted"),
        ("exec(M)", 1, "only min(), max(), ceil() and floor() may be called"),
        ("M(2)", 1, "'M' is a symbol, not a function"),
        ("min", 1, "'min' is a function"),
        ("min(M)", 1, "min() takes two or more arguments, got 1"),
        ("ceil(M, S)", 1, "ceil() takes one argument, got 2"),
        ("floor()", 1, "floor() takes one argument, got 0"),
        ("M M", 3, "after a complete expression"),
        ("M)", 2, "unmatched ')'"),
        ("(M", 3, "expected ')' to close the '(' at column 1"),
        ("min(M, S", 9, "to close the call to min()"),
        ("M +", 4, "formula ends where"),
        ("M + * S", 5, "unexpected '*'"),
        ("M % 2", 3, "'%' is not accepted"),
        ("M == S", 3, "comparisons"),
        ("M;S", 2, "character ';' is not accepted"),
        ("M @ S", 3, "character '@' is not accepted"),
        ("2M", 2, "write a '*' between them"),
        ("1e3", 2, "scientific notation"),
        ("1.", 3, "a decimal point needs digits"),
        ("M**0.5", 4, "an exponent must be a whole number from -16 to 16"),
        ("M**S", 4, "got S"),
        ("M**17", 4, "got 17"),
        ("M**-17", 4, "got -17"),
        ("2**(3*6)", 4, "got 18"),
        ("1/0", 3, "division by zero"),
        ("M/(S-S)", 3, "division by zero"),
        ("0**-1", 1, "division by zero"),
        # (2**16)**16 = 2**256 is fine; once more is 2**4096 * 2**16 = over 4096 bits
        ("((2**16)**16)**16", 16, "over 4096 bits"),
        ("-" * 51 + "M", 51, "nested more than 50 levels"),
        ("(" * 51 + "M" + ")" * 51, 51, "nested more than 50 levels"),
    ],
)
def test_errors(text, column, fragment):
    with pytest.raises(FormulaError) as info:
        parse(text)
    assert info.value.column == column, str(info.value)
    assert fragment in str(info.value)


def test_error_lists_what_is_accepted():
    with pytest.raises(FormulaError, match=r"min\(\), max\(\), ceil\(\), floor\(\)"):
        parse("M.x")


def test_too_long():
    with pytest.raises(FormulaError, match="at most 1000") as info:
        parse("M+" * (MAX_CHARS // 2) + "M")
    assert info.value.column == MAX_CHARS + 1


def test_not_text():
    with pytest.raises(FormulaError, match="must be text"):
        parse_formula(42, ALPHABET)  # type: ignore[arg-type]


def test_formula_error_is_a_value_error():
    assert issubclass(FormulaError, ValueError)


def test_never_evaluates_python(monkeypatch):
    # sympify/parse_expr call eval; the parser must not reach them
    def refuse(*args, **kwargs):
        raise AssertionError("eval-based parsing reached")

    monkeypatch.setattr(sp, "sympify", refuse)
    monkeypatch.setattr(sp.parsing.sympy_parser, "parse_expr", refuse)
    assert parse("2*M*d_model + min(S, 4)") == 2 * M * d_model + sp.Min(S, 4)


# --- hypothesis ---------------------------------------------------------------------

FORMULA_CHARS = st.sampled_from(list("0123456789.+-*/^()_, eE[]'\"%") + list(ALPHABET)
                                + ["min", "max", "ceil", "floor", "**", "__", "d_", "x"])


def _check_total(text: str) -> None:
    try:
        result = parse(text)
    except FormulaError as exc:
        assert 1 <= exc.column <= len(text) + 1
        assert str(exc)
    else:
        assert isinstance(result, sp.Expr)
        assert not result.has(sp.zoo, sp.nan, sp.oo)


@pytest.mark.slow
@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_text_is_an_expr_or_a_formula_error(text):
    _check_total(text)


@pytest.mark.slow
@FUZZ
@given(st.lists(FORMULA_CHARS, max_size=60).map("".join))
def test_formula_like_text_is_an_expr_or_a_formula_error(text):
    _check_total(text)


# Random expression trees, built twice: as text, and directly with sympy.
_LEAVES = st.one_of(
    st.sampled_from(sorted(ALPHABET)).map(lambda n: (n, ALPHABET[n], 0)),
    st.integers(0, 999).map(lambda n: (str(n), sp.Integer(n), 0)),
    st.tuples(st.integers(0, 99), st.integers(0, 99)).map(
        lambda t: (f"{t[0]}.{t[1]:02d}", sp.Rational(t[0] * 100 + t[1], 100), 0)),
)


def _binary(pair, op):
    (ta, a, da), (tb, bb, db) = pair
    depth = max(da, db) + 2
    if op == "/" and bb.is_zero:
        op = "*"                 # the parser rightly refuses a zero divisor
    expr = {"+": a + bb, "-": a - bb, "*": a * bb, "/": a / bb if op == "/" else None}[op]
    return f"({ta}) {op} ({tb})", expr, depth


def _power(item, n, caret):
    text, expr, depth = item
    if expr.is_Rational and max(abs(expr.p).bit_length(), expr.q.bit_length()) * n > 4096:
        n = 1
    return f"({text}){'^' if caret else '**'}{n}", expr**n, depth + 2


def _wrap(item, kind):
    text, expr, depth = item
    if kind == "neg":
        return f"-({text})", -expr, depth + 2
    fn = {"ceil": sp.ceiling, "floor": sp.floor}[kind]
    return f"{kind}({text})", fn(expr), depth + 1


def _call(pair, kind):
    (ta, a, da), (tb, bb, db) = pair
    fn = {"min": sp.Min, "max": sp.Max}[kind]
    return f"{kind}({ta}, {tb})", fn(a, bb), max(da, db) + 1


def _extend(children):
    pairs = st.tuples(children, children)
    return st.one_of(
        st.builds(_binary, pairs, st.sampled_from("+-*/")),
        st.builds(_power, children, st.integers(0, 3), st.booleans()),
        st.builds(_wrap, children, st.sampled_from(["neg", "ceil", "floor"])),
        st.builds(_call, pairs, st.sampled_from(["min", "max"])),
    ).filter(lambda item: item[2] <= 40)   # stay under the parser's nesting limit


EXPRESSIONS = st.recursive(_LEAVES, _extend, max_leaves=10)


@pytest.mark.slow
@FUZZ
@given(EXPRESSIONS)
def test_generated_expressions_round_trip(item):
    text, expected, _ = item
    assert parse(text) == expected


@pytest.mark.slow
@FUZZ
@given(st.sampled_from(sorted(ALPHABET)), st.sampled_from(sorted(ALPHABET)))
def test_product_commutes(x, y):
    # one law: x*y and y*x parse to the same expression
    assert parse(f"{x}*{y}") == parse(f"{y}*{x}")
