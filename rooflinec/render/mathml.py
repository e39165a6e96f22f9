"""Formulas as MathML Core, in the markup of sympy's presentation printer.

Browsers render MathML natively (Chromium implements MathML Core), so a report needs no
script and no image for its formulas. sympy's own printer builds an XML DOM per formula,
most of an HTML report's rendering time; `_tree` writes the same markup as strings for the
heads our costs use (tested equal to sympy's output) and hands any other head to sympy.
sympy can emit `mfenced`, outside MathML Core; it is rewritten to Core here. The output is
produced from sympy objects alone, never from spec text, so it is safe to insert as Markup.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache

import sympy as sp
from markupsafe import Markup
from sympy.core.sorting import default_sort_key
from sympy.printing.conventions import split_super_sub
from sympy.printing.mathml import mathml as _sympy_print
from sympy.printing.precedence import PRECEDENCE, precedence_traditional
from sympy.printing.pretty.pretty_symbology import greek_unicode

# Named entities are HTML-only; numeric references work in HTML and XML alike.
_ENTITIES = {"&InvisibleTimes;": "&#x2062;", "&ApplyFunction;": "&#x2061;"}
_FENCE = re.compile(r"<mfenced([^>]*)>|</mfenced>")
_ATTR = re.compile(r'(open|close)="([^"]*)"')
_TIMES, _MINUS = "<mo>&InvisibleTimes;</mo>", "<mo>-</mo>"
_BRACKETS = {sp.ceiling: ("\u2308", "\u2309"), sp.floor: ("\u230A", "\u230B")}


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


def _print(expr: sp.Basic, strike: frozenset = frozenset()) -> str:
    """`expr` as presentation MathML, as sympy's printer writes it (ASCII, character references);
    the symbols named in `strike` carry the CSS class `struck`."""
    return _tree(expr, strike).encode("ascii", "xmlcharrefreplace").decode()


def _mrow(*parts: str) -> str:
    return f"<mrow>{''.join(parts)}</mrow>"


@lru_cache(maxsize=8192)
def _tree(e, strike: frozenset = frozenset()) -> str:
    """One node, following sympy's MathMLPresentationPrinter case by case."""
    if isinstance(e, int):
        return f"<mn>{e}</mn>"
    if e.is_Symbol:
        return _symbol(e.name, e.name in strike)
    if e.is_Rational:
        if e.q == 1:
            return f"<mn>{e.p}</mn>"
        frac = f"<mfrac><mn>{abs(e.p)}</mn><mn>{e.q}</mn></mfrac>"
        return _mrow(_MINUS, frac) if e.p < 0 else frac
    if e.is_Mul:
        return _mrow(_MINUS, _product(-e, strike)) if e.could_extract_minus_sign() else _mrow(_product(e, strike))
    if e.is_Add:
        return _sum(e, strike)
    if e.is_Pow:
        return _power(e, strike)
    if e is sp.oo:
        return "<mi>&#x221E;</mi>"
    if e.func in _BRACKETS:
        left, right = _BRACKETS[e.func]
        return _mrow(f"<mo>{left}</mo>", _tree(e.args[0], strike), f"<mo>{right}</mo>")
    if e.func in (sp.Max, sp.Min):
        args = sorted(e.args, key=default_sort_key)
        return _mrow(f"<mo>{e.func.__name__.lower()}</mo>",
                     _mrow("<mo>(</mo>", "<mo>,</mo>".join(_tree(a, strike) for a in args), "<mo>)</mo>"))
    return _sympy_print(e, printer="presentation")


def _symbol(name: str, struck: bool = False) -> str:
    """d_model -> d with subscript model; Greek names as their letters; `struck`: the whole
    identifier gets the CSS class `struck`."""
    def text(part: str) -> str:
        return html.escape(greek_unicode.get(part, part))

    def join(items: list[str]) -> str:
        if len(items) == 1:
            return f"<mi>{text(items[0])}</mi>"
        return _mrow("<mo> </mo>".join(f"<mi>{text(i)}</mi>" for i in items))

    base, supers, subs = split_super_sub(name)
    mark = ' class="struck"' if struck else ""
    if not supers and not subs:
        return f"<mi{mark}>{text(base)}</mi>"
    mi = f"<mi>{text(base)}</mi>"
    if supers and subs:
        return f"<msubsup{mark}>{mi}{join(subs)}{join(supers)}</msubsup>"
    if supers:
        return f"<msup{mark}>{mi}{join(supers)}</msup>"
    return f"<msub{mark}>{mi}{join(subs)}</msub>"


def _product(e: sp.Expr, strike: frozenset) -> str:
    numerator, denominator = sp.fraction(e)
    if denominator is not sp.S.One:
        return f"<mfrac>{_tree(numerator, strike)}{_tree(denominator, strike)}</mfrac>"
    coeff, terms = e.as_coeff_mul()
    if coeff is sp.S.One and len(terms) == 1:
        return _tree(terms[0], strike)
    terms = sp.Mul._from_args(terms).as_ordered_factors()
    factors = _TIMES.join(_parenthesize(term, PRECEDENCE["Mul"], strike) for term in terms)
    return _tree(coeff, strike) + _TIMES + factors if coeff != 1 else factors


def _sum(e: sp.Expr, strike: frozenset) -> str:
    terms = e.as_ordered_terms()
    parts = [_tree(terms[0], strike)]
    for term in terms[1:]:
        parts += [_MINUS, _tree(-term, strike)] if term.could_extract_minus_sign() else ["<mo>+</mo>", _tree(term, strike)]
    return _mrow(*parts)


def _power(e: sp.Expr, strike: frozenset) -> str:
    base, exp = e.base, e.exp
    if exp.is_Rational and abs(exp.p) == 1 and exp.q != 1:
        root = f"<msqrt>{_tree(base, strike)}</msqrt>" if exp.q == 2 else f"<mroot>{_tree(base, strike)}{_tree(exp.q, strike)}</mroot>"
        return f"<mfrac><mn>1</mn>{root}</mfrac>" if exp.p == -1 else root
    if exp.is_Rational and exp.q != 1:
        sup = f"<msup>{_parenthesize(base, PRECEDENCE['Pow'], strike)}{_tree(abs(exp), strike)}</msup>"
        return f"<mfrac><mn>1</mn>{sup}</mfrac>" if exp.is_negative else sup
    if exp.is_negative:
        below = _tree(base, strike) if exp == -1 else f"<msup>{_parenthesize(base, PRECEDENCE['Pow'], strike)}{_tree(-exp, strike)}</msup>"
        return f"<mfrac><mn>1</mn>{below}</mfrac>"
    return f"<msup>{_parenthesize(base, PRECEDENCE['Pow'], strike)}{_tree(exp, strike)}</msup>"


def _parenthesize(e: sp.Expr, level: int, strike: frozenset) -> str:
    if precedence_traditional(e) <= level:
        return _mrow("<mo>(</mo>", _tree(e, strike), "<mo>)</mo>")
    return _tree(e, strike)


@lru_cache(maxsize=4096)
def _math(expr: sp.Basic, display: bool, strike: tuple[str, ...]) -> str:
    body = _core(_print(expr, frozenset(strike)))
    block = ' display="block"' if display else ""
    return f'<math{block}>{body}</math>'


WRAP_TERMS = 2   # a sum of more terms than this may break between them (`wrap`)


def _long(e: sp.Expr) -> bool:
    return isinstance(e, sp.Add) and len(e.args) > WRAP_TERMS


def _fenced(pieces: list[str], e: sp.Expr) -> list[str]:
    """`pieces` of `e` in parentheses, unless `e` is one symbol or number."""
    if e.is_Atom:
        return pieces
    return ["<mo>(</mo>" + pieces[0], *pieces[1:-1], pieces[-1] + "<mo>)</mo>"] if len(pieces) > 1 \
        else [f"<mo>(</mo>{pieces[0]}<mo>)</mo>"]


def _pieces(expr: sp.Expr, strike: frozenset) -> list[str]:
    """Where a line may break in `expr`: a long sum between its terms (the sign leading each
    after the first), a product between the terms of its long sum, a fraction with a long
    part as (numerator) / (denominator). One piece: `expr` does not break."""
    if _long(expr):
        out = []
        for i, term in enumerate(expr.as_ordered_terms()):
            minus = i > 0 and term.could_extract_minus_sign()
            inner = _pieces(-term if minus else term, strike)
            out += [("" if i == 0 else _MINUS if minus else "<mo>+</mo>") + inner[0], *inner[1:]]
        return out
    if isinstance(expr, sp.Mul):
        num, den = sp.fraction(expr)
        if den != 1:
            top, bottom = _pieces(num, strike), _pieces(den, strike)
            if len(top) == len(bottom) == 1:
                return [_print(expr, strike)]
            top, bottom = _fenced(top, num) if len(top) > 1 else top, _fenced(bottom, den)
            return [*top[:-1], top[-1] + "<mo>/</mo>", *bottom]
        sums = [f for f in expr.as_ordered_factors() if _long(f)]
        if sums:
            rest = expr / sums[0]
            inner = _fenced(_pieces(sums[0], strike), sums[0])
            head = "" if rest == 1 else _print(rest, strike) + _TIMES
            return [head + inner[0], *inner[1:]]
    return [_print(expr, strike)]


def _terms(expr: sp.Expr, strike: tuple[str, ...]) -> str | None:
    """`expr` as one <math> per piece (`_pieces`), so a line (a table cell) can break between
    them: MathML Core lays out no line breaks inside one element. None: one piece only."""
    pieces = _pieces(expr, frozenset(strike))
    if len(pieces) == 1:
        return None
    return '<span class="terms">' + " ".join(f"<math>{_core(p)}</math>" for p in pieces) + "</span>"


def mathml(expr, display: bool = False, strike: tuple[str, ...] = (), wrap: bool = False) -> Markup:
    """`expr` as a <math> element; identifiers named in `strike` are drawn struck out; `wrap`:
    a long sum (more than WRAP_TERMS terms), or a fraction of one, as one element per term,
    so it wraps."""
    if expr is None:
        return Markup("—")
    expr = sp.sympify(expr)
    wrapped = _terms(expr, tuple(strike)) if wrap and not display else None
    return Markup(wrapped or _math(expr, display, tuple(strike)))


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
    right = _core(_print(simplified))
    if not struck and sp.fraction(simplified) == (flops, nbytes):
        return f'<math>{right}</math>'   # already in lowest terms as counted
    left = _core(_print(raw_fraction(flops, nbytes), frozenset(struck)))
    return f'<math><mrow>{left}<mo>=</mo>{right}</mrow></math>'
