"""number()'s integer fast path returns exactly what the lambdified code returns: same value,
same type, bit for bit, for every expression the compiler produces and for random ones."""

import os

import sympy as sp
from hypothesis import given, settings, strategies as st

from rooflinec import spec
from rooflinec import symbols as sym
from rooflinec.evaluate import _compiled, _exact, number
from rooflinec.ir import intensity
from rooflinec.lower import Conventions, lower

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN = spec.load_study(os.path.join(ROOT, "specs", "qwen.yaml"))
ARGS = tuple(sym.ALPHABET.values())


def _program_exprs():
    exprs = []
    for phase in ("decode", "prefill"):
        for causal in (False, True):
            for op in lower(QWEN.model, phase, Conventions(causal_halving=causal)).ops:
                exprs += [op.cost.flops, op.cost.bytes, op.repeat, intensity(op.cost),
                          *(e for _, e in op.cost.traffic)]
    return exprs


EXPRS = _program_exprs()
values = st.lists(st.integers(1, 1 << 40), min_size=len(ARGS), max_size=len(ARGS))


def _same(a, b):
    """Same type and same printed value (repr tells -0.0 from 0.0 and nan equals nan)."""
    return type(a) is type(b) and repr(a) == repr(b)


@settings(max_examples=60, deadline=None)
@given(values, st.sampled_from(EXPRS))
def test_fast_path_equals_lambdify_on_compiled_expressions(vals, expr):
    args = dict(zip(ARGS, vals))
    assert _same(number(expr, args), _compiled(expr)(*vals))


def test_fast_path_covers_the_compiler_and_refuses_what_it_cannot_match():
    assert sum(_exact(e) is not None for e in EXPRS) > len(EXPRS) // 2
    x, y = sym.B, sym.S
    for expr in (x / 2, sp.ceiling(x / y), (x + 1 / y) / x, x**-2, sp.Rational(3, 2) * x / y):
        assert _exact(expr) is None


leaf = st.sampled_from(ARGS[:5]) | st.integers(-7, 7).map(sp.Integer)
poly = st.recursive(leaf, lambda kids: st.tuples(kids, kids).map(lambda t: t[0] + t[1])
                    | st.tuples(kids, kids).map(lambda t: t[0] * t[1])
                    | kids.map(lambda k: k**2), max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(poly, poly, st.integers(-5, 5), values)
def test_fast_path_equals_lambdify_on_random_rationals(num, den, coeff, vals):
    expr = coeff * num / den
    args = dict(zip(ARGS, vals))
    try:
        want = _compiled(expr)(*vals)
    except ZeroDivisionError:
        return
    assert _same(number(expr, args), want)


def test_non_integer_values_take_the_lambdify_path():
    expr = 2 * sym.M * sym.d_model / (sym.b * (sym.M + sym.d_model))
    vals = {sym.M: 3, sym.d_model: 7, sym.b: 0.5}
    assert _same(number(expr, vals), _compiled(expr)(*(vals.get(s, 0) for s in ARGS)))
