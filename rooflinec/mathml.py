"""Formulas as MathML Core, printed by sympy's own presentation printer.

Browsers render MathML natively (Chromium implements MathML Core), so a report needs no
script and no image for its formulas. sympy's presentation printer can emit a few
elements outside MathML Core (`mfenced`); they are rewritten to Core here. The output is
produced from sympy objects alone, never from spec text, so it is safe to insert as Markup.
"""

from __future__ import annotations

import re
from functools import lru_cache

import sympy as sp
from markupsafe import Markup
from sympy.printing.mathml import mathml as _print

# Named entities are HTML-only; numeric references work in HTML and XML alike.
_ENTITIES = {"&InvisibleTimes;": "&#x2062;", "&ApplyFunction;": "&#x2061;"}
_FENCE = re.compile(r"<mfenced([^>]*)>|</mfenced>")
_ATTR = re.compile(r'(open|close)="([^"]*)"')


def _core(text: str) -> str:
    """Rewrite the non-Core `mfenced` (older sympy) as `mrow` with explicit fence operators."""
    closers: list[str] = []

    def fence(m: re.Match) -> str:
        if m.group(0) == "</mfenced>":
            return f"<mo>{closers.pop()}</mo></mrow>"
        attrs = {"open": "(", "close": ")", **dict(_ATTR.findall(m.group(1)))}
        closers.append(attrs["close"])
        return f"<mrow><mo>{attrs['open']}</mo>"

    text = _FENCE.sub(fence, text)
    for entity, numeric in _ENTITIES.items():
        text = text.replace(entity, numeric)
    return text


def _strike(text: str, names: tuple[str, ...]) -> str:
    """Mark the identifiers in `names` as struck out (CSS class `struck`)."""
    for name in names:
        base, _, sub = name.partition("_")
        if sub:
            text = text.replace(f"<msub><mi>{base}</mi><mi>{sub}</mi></msub>",
                                f'<msub class="struck"><mi>{base}</mi><mi>{sub}</mi></msub>')
        else:
            text = text.replace(f"<mi>{name}</mi>", f'<mi class="struck">{name}</mi>')
    return text


@lru_cache(maxsize=4096)
def _math(expr: sp.Basic, display: bool, strike: tuple[str, ...]) -> str:
    body = _strike(_core(_print(expr, printer="presentation")), strike)
    block = ' display="block"' if display else ""
    return f'<math{block}>{body}</math>'


def mathml(expr, display: bool = False, strike: tuple[str, ...] = ()) -> Markup:
    """`expr` as a <math> element; identifiers named in `strike` are drawn struck out."""
    if expr is None:
        return Markup("—")
    return Markup(_math(sp.sympify(expr), display, tuple(strike)))


def raw_fraction(flops, nbytes) -> sp.Expr:
    """FLOPs / bytes as written, before sympy cancels anything."""
    return sp.Mul(flops, sp.Pow(nbytes, -1, evaluate=False), evaluate=False)


def cancelled(flops, nbytes, simplified) -> tuple[str, ...]:
    """Symbols present in FLOPs / bytes that the algebra removes from the simplified form."""
    before = sp.sympify(flops).free_symbols | sp.sympify(nbytes).free_symbols
    return tuple(sorted(s.name for s in before - sp.sympify(simplified).free_symbols))


def identity(flops, nbytes, simplified) -> Markup:
    """The raw fraction with cancelled symbols struck out, '=', and the simplified intensity."""
    return Markup(_identity(*map(sp.sympify, (flops, nbytes, simplified))))


@lru_cache(maxsize=1024)
def _identity(flops: sp.Expr, nbytes: sp.Expr, simplified: sp.Expr) -> str:
    struck = cancelled(flops, nbytes, simplified)
    right = _core(_print(simplified, printer="presentation"))
    if not struck and sp.fraction(simplified) == (flops, nbytes):
        return f'<math>{right}</math>'   # already in lowest terms as counted
    left = _strike(_core(_print(raw_fraction(flops, nbytes), printer="presentation")), struck)
    return f'<math><mrow>{left}<mo>=</mo>{right}</mrow></math>'
