"""The string MathML printer writes exactly what sympy's presentation printer writes, for
every head a cost can use: random formulas, checked against sympy itself."""

import sympy as sp
from hypothesis import given, settings, strategies as st
from sympy.printing.mathml import mathml as sympy_mathml
import pytest

from rooflinec.render import mathml
from rooflinec.model.symbols import ALPHABET

NAMES = [*ALPHABET.values(), sp.Symbol("alpha"), sp.Symbol("x_1"), sp.Symbol("t_k_v"), sp.Symbol("w__2")]
leaves = st.sampled_from(NAMES) | st.integers(-40, 400).map(sp.Integer) | \
    st.tuples(st.integers(-9, 9), st.integers(1, 9)).map(lambda pq: sp.Rational(*pq))
EXPONENTS = [sp.Rational(*pq) for pq in ((-3, 1), (-1, 1), (2, 1), (3, 1), (1, 2), (-1, 2),
                                         (1, 3), (3, 2), (-2, 3))]
BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
          "/": lambda a, b: a / b, "max": sp.Max, "min": sp.Min}


@st.composite
def formulas(draw, depth: int = 3):
    """A random formula over the heads costs use, built bottom-up. Fractional powers take
    positive bases only, so every value stays real; a subtree that divides by zero is
    replaced by a leaf (Max and Min refuse zoo and nan)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(leaves)
    head = draw(st.sampled_from([*BINARY, "pow", "ceiling", "floor"]))
    a = draw(formulas(depth - 1))
    if head in ("ceiling", "floor"):
        expr = getattr(sp, head)(a)
    elif head == "pow":
        exponent = draw(st.sampled_from(EXPONENTS))
        expr = a ** (exponent if exponent.is_integer or a.is_positive else 2)
    else:
        expr = BINARY[head](a, draw(formulas(depth - 1)))
    return draw(leaves) if expr.has(sp.zoo, sp.nan) else expr


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(formulas())
def test_same_markup_as_sympy(expr):
    assert mathml._print(expr) == sympy_mathml(expr, printer="presentation")


@pytest.mark.slow
@given(formulas(), formulas())
@settings(max_examples=100, deadline=None)
def test_raw_fraction_same_markup_as_sympy(flops, nbytes):
    """The unevaluated FLOPs / bytes of an identity prints as sympy prints it."""
    raw = mathml.raw_fraction(flops, nbytes)
    assert mathml._print(raw) == sympy_mathml(raw, printer="presentation")


def test_infinity_same_markup_as_sympy():
    for expr in (sp.oo, -sp.oo, 2 * sp.oo):
        assert mathml._print(expr) == sympy_mathml(expr, printer="presentation")


def test_names_are_escaped():
    assert "&lt;" in mathml._print(sp.Symbol("a<b"))


def test_strike_marks_whole_identifiers_only():
    """A declared dimension may be any identifier: `d` struck leaves d_model alone; Greek
    names and names with two subscripts are struck too."""
    d, d_model, alpha, top_k = sp.symbols("d d_model alpha n_top_k", positive=True)
    out = str(mathml.mathml(d * d_model * alpha * top_k, strike=("d", "alpha", "n_top_k")))
    assert '<mi class="struck">d</mi>' in out and "<msub><mi>d</mi><mi>model</mi></msub>" in out
    assert '<mi class="struck">&#945;</mi>' in out
    assert '<msub class="struck"><mi>n</mi><mrow><mi>top</mi>' in out
    assert out.count("struck") == 3


def _elements(markup: str) -> list:
    """The <math> elements of `markup`, each parsed as XML (character references resolved)."""
    import xml.etree.ElementTree as ET
    root = ET.fromstring(f"<root>{markup}</root>")
    return [root] if root.find("math") is None and root.tag == "math" else list(root.iter("math"))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(formulas())
def test_a_wrapped_formula_is_well_formed_math_pieces_or_the_same(expr):
    """`wrap` gives the plain element, or a span of well-formed <math> elements, each opening
    and closing its own parentheses' tags (a piece is one element: XML parsing proves it)."""
    plain, wrapped = str(mathml.mathml(expr)), str(mathml.mathml(expr, wrap=True))
    if wrapped == plain:
        return
    assert wrapped.startswith('<span class="terms"><math>') and wrapped.endswith("</math></span>")
    assert len(_elements(wrapped)) >= 2


def test_a_long_sum_breaks_between_its_terms():
    x, y, z, w = sp.symbols("x y z w")
    wrapped = str(mathml.mathml(x + y + z - w, wrap=True))
    pieces = _elements(wrapped)
    assert len(pieces) == 4
    # sympy orders the terms -w, x, y, z: each later piece opens with its sign
    assert ["".join(p.itertext()) for p in pieces] == ["-w", "+x", "+y", "+z"]
    assert str(mathml.mathml(x + y, wrap=True)) == str(mathml.mathml(x + y))   # short: one piece
    frac = str(mathml.mathml((x + y) / (2 * (x + y + z + w)), wrap=True))
    assert "<mo>/</mo>" in frac and len(_elements(frac)) >= 4
