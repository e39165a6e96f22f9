"""The string MathML printer writes exactly what sympy's presentation printer writes, for
every head a cost can use: random formulas, checked against sympy itself."""

import sympy as sp
from hypothesis import given, settings, strategies as st
from sympy.printing.mathml import mathml as sympy_mathml

from rooflinec import mathml
from rooflinec.symbols import ALPHABET

NAMES = [*ALPHABET.values(), sp.Symbol("alpha"), sp.Symbol("x_1"), sp.Symbol("t_k_v"), sp.Symbol("w__2")]
leaves = st.sampled_from(NAMES) | st.integers(-40, 400).map(sp.Integer) | \
    st.tuples(st.integers(-9, 9), st.integers(1, 9)).map(lambda pq: sp.Rational(*pq))
real = lambda e: not e.has(sp.zoo, sp.nan, sp.I)  # noqa: E731  (x/0, (-1)**(1/2): Max refuses them)
pairs = lambda sub: st.tuples(sub, sub)  # noqa: E731
_formulas = st.recursive(leaves, lambda sub: st.one_of(
    pairs(sub).map(lambda ab: ab[0] + ab[1]),
    pairs(sub).map(lambda ab: ab[0] - ab[1]),
    pairs(sub).map(lambda ab: ab[0] * ab[1]),
    pairs(sub).map(lambda ab: ab[0] / ab[1]),
    st.tuples(sub, st.sampled_from([-3, -1, 2, 3, sp.Rational(1, 2), sp.Rational(-1, 2),
                                    sp.Rational(1, 3), sp.Rational(3, 2), sp.Rational(-2, 3)]))
    .map(lambda ae: ae[0] ** ae[1]),
    pairs(sub).map(lambda ab: sp.Max(*ab)), pairs(sub).map(lambda ab: sp.Min(*ab)),
    sub.map(sp.ceiling), sub.map(sp.floor)).filter(real), max_leaves=10)


@st.composite
def formulas(draw):
    """A random formula (composite: hypothesis then names it in one word, not by its tree)."""
    return draw(_formulas)


@settings(max_examples=300, deadline=None)
@given(formulas())
def test_same_markup_as_sympy(expr):
    assert mathml._print(expr) == sympy_mathml(expr, printer="presentation")


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
