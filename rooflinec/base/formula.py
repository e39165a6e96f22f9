"""A whitelist parser for cost formulas written in specs: ``2*M*d_model*n_experts``.

Text from a spec never reaches ``eval``, ``exec``, ``sympify`` or ``parse_expr``
(sympy's docs warn those call ``eval``). A hand-written tokenizer and a precedence
climber accept exactly:

- integer and decimal numbers (``2``, ``0.5``; read exactly, as Rationals);
- names from the dimension alphabet;
- ``+ - * /``, powers ``**`` or ``^`` with a small whole-number exponent, unary minus;
- parentheses, and calls to ``min``, ``max``, ``ceil`` and ``floor``.

Budgets, checked before sympy simplifies anything: at most MAX_CHARS characters,
MAX_DEPTH levels of nesting, MAX_SYMBOLS distinct symbols, no symbol raised past
MAX_EXPONENT once the formula is multiplied out (so ``(M**16)**16`` and ``M**16*M`` are
refused, not just ``M**17``), and at most MAX_TERMS terms when multiplied out.

Anything else raises FormulaError with the 1-based column where it starts and a
message saying what is wrong and what is accepted.

Precedence, loosest first, as in Python: ``+ -``; ``* /``; unary ``-``; ``**`` (right
associative, so ``-x**2`` is ``-(x**2)`` and ``2**-1`` is ``1/2``).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

import sympy as sp

MAX_CHARS = 1000
MAX_DEPTH = 50          # nested parentheses, unary signs, powers and calls
MAX_EXPONENT = 16       # |n| in x**n
MAX_BITS = 4096         # size of a number a power may build: 2**4096 is plenty
MAX_SYMBOLS = 24        # distinct symbols in one formula
MAX_TERMS = 256         # terms of the formula multiplied out (an upper bound, not expanded)

FUNCTIONS = {"min": sp.Min, "max": sp.Max, "ceil": sp.ceiling, "floor": sp.floor}
_ARITY = {"min": "two or more arguments", "max": "two or more arguments",
          "ceil": "one argument", "floor": "one argument"}
_ACCEPTS = ("numbers, the dimension symbols, + - * / ** ^, parentheses, "
            "and min(), max(), ceil(), floor()")


class FormulaError(ValueError):
    """A formula that cannot be read; ``column`` is 1-based in the formula text."""

    def __init__(self, message: str, column: int):
        super().__init__(message)
        self.message, self.column = message, column


@dataclass(frozen=True)
class Token:
    kind: str      # "number", "name", "op", "end"
    text: str
    column: int    # 1-based


def _is_digit(ch: str) -> bool:
    return "0" <= ch <= "9"


def _is_name_start(ch: str) -> bool:
    return ch == "_" or "a" <= ch <= "z" or "A" <= ch <= "Z"


def _is_name_char(ch: str) -> bool:
    return _is_name_start(ch) or _is_digit(ch)


def _stray(ch: str, column: int) -> FormulaError:
    what = {
        "'": "strings are not accepted", '"': "strings are not accepted",
        "[": "indexing with [ ] is not accepted", "]": "indexing with [ ] is not accepted",
        ".": "a '.' must be part of a number such as 0.5",
        "=": "comparisons and assignments are not accepted",
        "%": "'%' is not accepted; use floor() or ceil()",
    }.get(ch, f"character {ch!r} is not accepted")
    return FormulaError(f"{what}; a formula may use {_ACCEPTS}", column)


def tokenize(text: str) -> list[Token]:
    tokens, i, n = [], 0, len(text)
    while i < n:
        ch, col = text[i], i + 1
        if ch in " \t\r\n":
            i += 1
        elif ch == "." and tokens and (tokens[-1].kind == "name" or tokens[-1].text == ")"):
            raise FormulaError(f"attribute access ('{tokens[-1].text}.') is not accepted; "
                               f"a formula may use {_ACCEPTS}", col)
        elif _is_digit(ch) or (ch == "." and i + 1 < n and _is_digit(text[i + 1])):
            j = i
            while j < n and _is_digit(text[j]):
                j += 1
            if j < n and text[j] == ".":
                j += 1
                if j >= n or not _is_digit(text[j]):
                    raise FormulaError("a decimal point needs digits after it, as in 0.5", j + 1)
                while j < n and _is_digit(text[j]):
                    j += 1
            if j < n and text[j] in "eE":
                raise FormulaError("scientific notation is not accepted; write 1000 or 10**3",
                                   j + 1)
            if j < n and _is_name_char(text[j]):
                raise FormulaError(f"a number runs into a name at {text[i:j + 1]!r}; "
                                   "write a '*' between them, as in 2*M", j + 1)
            tokens.append(Token("number", text[i:j], col))
            i = j
        elif _is_name_start(ch):
            j = i
            while j < n and _is_name_char(text[j]):
                j += 1
            if text.startswith("__", i):
                raise FormulaError(f"names starting with '__' such as '{text[i:j]}' are not "
                                   f"accepted; a formula may use {_ACCEPTS}", col)
            tokens.append(Token("name", text[i:j], col))
            i = j
        elif text.startswith("**", i):
            tokens.append(Token("op", "**", col))
            i += 2
        elif ch in "+-*/^(),":
            tokens.append(Token("op", ch, col))
            i += 1
        else:
            raise _stray(ch, col)
    tokens.append(Token("end", "", n + 1))
    return tokens


def _number(token: Token) -> sp.Rational:
    whole, _, frac = token.text.partition(".")
    return sp.Rational(int((whole or "0") + frac), 10 ** len(frac))


class _Parser:
    def __init__(self, text: str, alphabet: dict[str, sp.Symbol]):
        self.tokens = tokenize(text)
        self.alphabet = alphabet
        self.pos = 0
        self.depth = 0

    # --- helpers ---------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def advance(self) -> Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def at(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in ops

    def expect(self, op: str, why: str) -> Token:
        if not self.at(op):
            raise FormulaError(f"expected '{op}' {why}, found {self.describe(self.tok)}",
                               self.tok.column)
        return self.advance()

    @staticmethod
    def describe(token: Token) -> str:
        return "the end of the formula" if token.kind == "end" else f"'{token.text}'"

    def enter(self, column: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FormulaError(f"formula is nested more than {MAX_DEPTH} levels deep", column)

    # --- grammar ---------------------------------------------------------------------

    def formula(self) -> sp.Expr:
        if self.tok.kind == "end":
            raise FormulaError(f"formula is empty; write an expression using {_ACCEPTS}", 1)
        expr = self.sum()
        if self.at(")"):
            raise FormulaError("unmatched ')'; it closes no '('", self.tok.column)
        if self.tok.kind != "end":
            raise FormulaError(f"unexpected {self.describe(self.tok)} after a complete "
                               "expression; join terms with an operator (+ - * / **)",
                               self.tok.column)
        return expr

    def sum(self) -> sp.Expr:
        left = self.product()
        while self.at("+", "-"):
            op = self.advance().text
            right = self.product()
            left = left + right if op == "+" else left - right
        return left

    def product(self) -> sp.Expr:
        left = self.unary()
        while self.at("*", "/"):
            op = self.advance().text
            column = self.tok.column
            right = self.unary()
            if op == "/" and right.is_zero:
                raise FormulaError("division by zero; a divisor must not be 0", column)
            left = left * right if op == "*" else left / right
            _check_degree(left, column)
        return left

    def unary(self) -> sp.Expr:
        if self.at("-", "+"):
            op = self.advance()
            self.enter(op.column)
            operand = self.unary()
            self.depth -= 1
            return -operand if op.text == "-" else operand
        return self.power()

    def power(self) -> sp.Expr:
        base_column = self.tok.column
        base = self.atom()
        if not self.at("**", "^"):
            return base
        op = self.advance()
        self.enter(op.column)
        column = self.tok.column
        exponent = self.unary()     # right associative: 2**3**2 is 2**9; 2**-1 is 1/2
        self.depth -= 1
        result = _power(base, exponent, base_column, column)
        _check_degree(result, op.column)
        return result

    def atom(self) -> sp.Expr:
        token = self.tok
        if token.kind == "number":
            self.advance()
            return _number(token)
        if token.kind == "name":
            self.advance()
            return self.name(token)
        if self.at("("):
            self.advance()
            self.enter(token.column)
            expr = self.sum()
            self.expect(")", f"to close the '(' at column {token.column}")
            self.depth -= 1
            return expr
        if token.kind == "end":
            raise FormulaError("formula ends where a number, symbol or '(' is expected",
                               token.column)
        raise FormulaError(f"unexpected '{token.text}'; expected a number, a symbol or '('",
                           token.column)

    def name(self, token: Token) -> sp.Expr:
        name = token.text
        calling = self.at("(")
        if name in FUNCTIONS:
            if not calling:
                raise FormulaError(f"'{name}' is a function; call it as {name}(...) "
                                   f"with {_ARITY[name]}", token.column)
            return self.call(token)
        if calling:
            what = (f"'{name}' is a symbol, not a function" if name in self.alphabet
                    else f"calls to '{name}' are not accepted")
            raise FormulaError(f"{what}; only min(), max(), ceil() and floor() may be called",
                               token.column)
        if name not in self.alphabet:
            raise FormulaError(f"unknown name '{name}'; {_did_you_mean(name, self.alphabet)}"
                               f"accepted names: {', '.join(self.alphabet)}", token.column)
        return self.alphabet[name]

    def call(self, token: Token) -> sp.Expr:
        open_paren = self.advance()
        self.enter(open_paren.column)
        args = [] if self.at(")") else [self.sum()]
        while self.at(","):
            self.advance()
            args.append(self.sum())
        self.expect(")", f"to close the call to {token.text}() at column {token.column}")
        self.depth -= 1
        one = token.text in ("ceil", "floor")
        if (one and len(args) != 1) or (not one and len(args) < 2):
            raise FormulaError(f"{token.text}() takes {_ARITY[token.text]}, got {len(args)}",
                               token.column)
        return FUNCTIONS[token.text](*args)


def _did_you_mean(name: str, alphabet) -> str:
    names = list(alphabet) + list(FUNCTIONS)
    folded = [n for n in names if n.lower() == name.lower()]
    match = folded or difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'? " if match else ""


def _power(base: sp.Expr, exponent: sp.Expr, base_column: int, column: int) -> sp.Expr:
    if not (exponent.is_Integer and abs(int(exponent)) <= MAX_EXPONENT):
        raise FormulaError(f"an exponent must be a whole number from -{MAX_EXPONENT} to "
                           f"{MAX_EXPONENT}, got {_short(exponent)}", column)
    n = int(exponent)
    if n < 0 and base.is_zero:
        raise FormulaError("division by zero: 0 raised to a negative power", base_column)
    if base.is_Rational:
        bits = max(abs(base.p).bit_length(), base.q.bit_length()) * abs(n)
        if bits > MAX_BITS:
            raise FormulaError(f"a power makes a number over {MAX_BITS} bits; "
                               "write a smaller constant", column)
    return base ** exponent


def degrees(expr: sp.Expr) -> dict:
    """An upper bound of the power each symbol reaches in `expr` multiplied out (a negative
    power counts by its size: 1/M**20 is as hard on the polynomial tools as M**20)."""
    if expr.is_Symbol:
        return {expr: 1}
    if expr.is_Pow and expr.exp.is_Integer:
        return {s: d * abs(int(expr.exp)) for s, d in degrees(expr.base).items()}
    out: dict = {}
    for arg in expr.args:
        for s, d in degrees(arg).items():
            out[s] = out.get(s, 0) + d if expr.is_Mul else max(out.get(s, 0), d)
    return out


def _check_degree(expr: sp.Expr, column: int) -> None:
    over = {s: d for s, d in degrees(expr).items() if d > MAX_EXPONENT}
    if over:
        s, d = max(over.items(), key=lambda item: item[1])
        raise FormulaError(f"{s} reaches the power {d} once multiplied out; powers of a symbol "
                           f"are limited to {MAX_EXPONENT} (nested or repeated powers count in full)",
                           column)


def expanded_terms(expr: sp.Expr) -> int:
    """An upper bound of the number of terms of `expr` multiplied out, without expanding it:
    a sum of t terms to the n-th power has at most C(t + n - 1, n)."""
    if expr.is_Atom:
        return 1
    if expr.is_Pow and expr.exp.is_Integer:
        t, n = expanded_terms(expr.base), abs(int(expr.exp))
        return math.comb(t + n - 1, n) if t > 1 else 1
    counts = [expanded_terms(a) for a in expr.args]
    if expr.is_Add:
        return sum(counts)
    if expr.is_Mul:
        return math.prod(counts)
    return max(1, sum(counts))   # min, max, ceil, floor: their arguments are multiplied out apart


def check_budget(expr: sp.Expr) -> None:
    """The budgets a whole formula must keep (see the module docstring), column 1."""
    symbols = expr.free_symbols
    if len(symbols) > MAX_SYMBOLS:
        raise FormulaError(f"formula uses {len(symbols)} distinct symbols; at most {MAX_SYMBOLS} "
                           "are accepted", 1)
    terms = expanded_terms(expr)
    if terms > MAX_TERMS:
        raise FormulaError(f"formula multiplies out to about {terms} terms; at most {MAX_TERMS} "
                           "are accepted (write the cost as the kernel computes it, not a "
                           "high power of a sum)", 1)


def _short(expr: sp.Expr, limit: int = 40) -> str:
    text = str(expr)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def parse_formula(text: str, alphabet: dict[str, sp.Symbol]) -> sp.Expr:
    """``text`` as a sympy expression over the symbols of ``alphabet``.

    >>> from rooflinec.model.symbols import ALPHABET
    >>> parse_formula("2*M*d_model*d_ff", ALPHABET)
    2*M*d_ff*d_model
    """
    if not isinstance(text, str):
        raise FormulaError(f"a formula must be text, got {type(text).__name__}", 1)
    if len(text) > MAX_CHARS:
        raise FormulaError(f"formula is {len(text)} characters; at most {MAX_CHARS} are accepted",
                           MAX_CHARS + 1)
    expr = _Parser(text, alphabet).formula()
    check_budget(expr)
    if expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        raise FormulaError("formula divides by zero somewhere; every divisor must be nonzero", 1)
    return expr
