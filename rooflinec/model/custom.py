"""User-declared operators: a model spec's `dimensions` and `operators`.

A model may declare extra dimensions (``n_experts: 8``), which become positive integer
symbols beside the alphabet, and extra operators whose FLOPs and bytes are formulas over
that alphabet (``flops: 2*M*d_model*n_experts``). Formulas are read by the whitelist parser
(rooflinec.base.formula), never by ``sympify``; every mistake becomes a located problem.
Lowering places the declared ops (rooflinec.model.lower_custom).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import sympy as sp

from rooflinec.model import symbols as sym
from rooflinec.base.errors import Problem
from rooflinec.base.formula import FUNCTIONS, FormulaError, parse_formula
from rooflinec.model.ir import Cost
from rooflinec.base.yamlio import Located, format_path
from rooflinec.model.ir import intensity

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
CLASSES = ("weights", "kv_cache", "activations")   # "scores" belongs to the attention steps
DEFAULT_CLASS = "activations"
KNOBS = {s.name: s for s in sym.WORKLOAD}


@dataclass(frozen=True)
class Declared:
    """One operator as its model spec declares it, formulas already parsed."""

    name: str
    category: str
    unit: str
    runs: str                  # "per_layer" (repeat L) or "once"
    after: str | None          # the op it follows; None: see `before`
    before: str | None         # the op it precedes; both None: the end of the layer / the model
    cost: Cost
    crossing: sp.Symbol | None
    shape: str
    at: tuple[tuple[str, Problem], ...]   # where its entry, name, after, before are written
    params: sp.Expr = sp.Integer(0)       # weights it holds, one copy (× L when per_layer)
    cache: sp.Expr = sp.Integer(0)        # cache bytes per token of context, one copy

    def problem(self, message: str, key: str = "") -> Problem:
        return replace(dict(self.at).get(key) or dict(self.at)[""], message=message)


# --- reading the spec ----------------------------------------------------------------

def declare(doc: Located) -> tuple[tuple, tuple, list[Problem]]:
    """(dimensions as (name, value) pairs, Declared ops, problems) from a model document.

    Tolerates a malformed document: what the schema reports is skipped here.
    """
    data = doc.data if isinstance(doc.data, dict) else {}
    dims, names, problems = _dimensions(doc, data.get("dimensions"))
    alphabet = {**sym.ALPHABET, **{name: sym.dimension(name) for name in names}}
    entries = data.get("operators")
    ops, seen = [], {}
    for i, entry in enumerate(entries if isinstance(entries, list) else ()):
        if not isinstance(entry, dict):
            continue
        found, problems_i = _operator(doc, ("operators", i), entry, alphabet)
        name = entry.get("name")
        if isinstance(name, str) and name in seen:
            problems_i.append(doc.problem(("operators", i, "name"), (
                f"operator '{name}' is already declared at operators[{seen[name]}]; "
                "each operator needs its own name")))
        elif isinstance(name, str):
            seen[name] = i
        problems += problems_i
        if found is not None and not problems_i:
            ops.append(found)
    return dims, tuple(ops), problems


def _dimensions(doc: Located, dims) -> tuple[tuple, list[str], list[Problem]]:
    """((name, value) pairs, every well-formed name (formulas may use it even while the
    schema reports its value), problems)."""
    if not isinstance(dims, dict):
        return (), [], []
    good, names, problems = [], [], []
    reserved = ", ".join([*sym.ALPHABET, *FUNCTIONS])
    for name, value in dims.items():
        path = ("dimensions", name)
        if not IDENTIFIER.fullmatch(name) or name.startswith("__"):
            problems.append(doc.problem(path, f"'{name[:70]}' is not a dimension name; a name is "
                                              "a letter or '_' then letters, digits or '_' (at most "
                                              "64, not starting with '__'), e.g. n_experts",
                                        at_key=True))
        elif name in sym.ALPHABET or name in FUNCTIONS:
            problems.append(doc.problem(path, f"'{name}' is a built-in name; a model's own "
                                              f"dimension must not be one of: {reserved}",
                                        at_key=True))
        else:
            names.append(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                good.append((name, value))
    return tuple(good), names, problems


def _operator(doc: Located, path: tuple, entry: dict, alphabet) -> tuple[Declared | None, list]:
    problems = []
    name = entry.get("name")
    if isinstance(name, str) and not IDENTIFIER.fullmatch(name):
        problems.append(doc.problem(path + ("name",), (
            f"'{name[:70]}' is not an operator name; a name is a letter or '_' then letters, "
            "digits or '_' (at most 64), e.g. rope or moe_router")))
    flops = _formula(doc, path + ("flops",), entry.get("flops"), alphabet, problems)
    traffic = _traffic(doc, path, entry.get("bytes"), alphabet, problems)
    held = {key: _held(doc, path + (key,), entry.get(key, 0), alphabet, problems, free)
            for key, free in (("params", set(sym.WORKLOAD) | {sym.b}), ("cache_per_token", set(sym.WORKLOAD)))}
    if flops is None or traffic is None or problems:
        return None, problems
    cost = Cost(flops, traffic)
    problems += _signs(doc, path, cost, entry.get("bytes"))
    knob = KNOBS.get(entry.get("crossing")) if isinstance(entry.get("crossing"), str) else None
    if knob is not None and not problems:
        problems += _knob(doc, path + ("crossing",), cost, knob)
    if "after" in entry and "before" in entry:
        problems.append(doc.problem(path + ("before",), "give `after` or `before`, not both"))
    if problems or not isinstance(name, str):
        return None, problems
    at = tuple((key, doc.problem(path + ((key,) if key else ()), ""))
               for key in ("", "name", "after", "before"))
    return Declared(name, entry.get("category", "custom"), entry.get("unit", "vector"),
                    entry.get("runs", "per_layer"), entry.get("after"), entry.get("before"), cost, knob,
                    entry.get("shape") or f"declared in {doc.file}", at,
                    held["params"], held["cache_per_token"]), []


def _formula(doc: Located, path: tuple, text, alphabet, problems: list) -> sp.Expr | None:
    """`text` parsed, or None after recording a located problem (or when the schema will)."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        return None
    try:
        return parse_formula(str(text), alphabet)
    except FormulaError as exc:
        line, col = doc.where(path)
        if path in doc.plain:   # the text starts where the value does: point at the character
            col += exc.column - 1
        problems.append(Problem(doc.file, line, col, format_path(path), exc.message + _cut(str(text))))
        return None


def _cut(text: str) -> str:
    """A formula with a call left open was most likely cut at a comma by YAML's flow mapping
    ({flops: max(M, 1)} is the keys 'flops' and '1)'): say so."""
    if text.count("(") <= text.count(")"):
        return ""
    return ("; in a YAML flow mapping { ... } a comma ends the value, so a formula with commas "
            f"(min, max) must be quoted, e.g. \"{text}, ...)\"")


def _held(doc: Located, path: tuple, text, alphabet, problems: list, barred: set) -> sp.Expr:
    """What an operator holds in memory (parameters, cache bytes per token): a formula that
    does not depend on the workload (nor, for parameters, on bytes per element)."""
    expr = _formula(doc, path, text, alphabet, problems)
    if expr is None:
        return sp.Integer(0)
    used = sorted(map(str, expr.free_symbols & barred))
    if used:
        problems.append(doc.problem(path, (
            f"'{expr}' depends on {', '.join(used)}; what an operator holds is fixed by the "
            f"model, so write it over the model's dimensions"
            + ("" if "b" not in used else " (parameters are counted, not bytes: leave out b)"))))
    elif expr.is_nonnegative is not True:
        problems.append(doc.problem(path, f"'{expr}' may be negative for some positive dimensions"))
    return expr


def _traffic(doc: Located, path: tuple, spec, alphabet, problems: list) -> tuple | None:
    """Bytes by traffic class: one formula (activations) or a mapping class -> formula."""
    if not isinstance(spec, dict):
        expr = _formula(doc, path + ("bytes",), spec, alphabet, problems)
        return None if expr is None else ((DEFAULT_CLASS, expr),)
    if not spec or any(cls not in CLASSES for cls in spec):
        return None   # the schema reports it
    out = [(cls, _formula(doc, path + ("bytes", cls), text, alphabet, problems))
           for cls, text in spec.items()]
    if any(e is None for _, e in out):
        return None
    return tuple((cls, e) for cls, e in out if e != 0)


def _signs(doc: Located, path: tuple, cost: Cost, spec) -> list[Problem]:
    """FLOPs and each byte count never negative, total bytes always positive, for every
    positive value of the dimensions (sympy must be able to show it from the formula)."""
    problems = []
    if cost.flops.is_nonnegative is not True:
        problems.append(doc.problem(path + ("flops",), (
            f"FLOPs '{cost.flops}' may be negative for some positive dimensions; write it so "
            "that it cannot be, e.g. as a sum of products, or with max(..., 0)")))
    for cls, expr in cost.traffic:
        if expr.is_nonnegative is not True:
            where = path + (("bytes", cls) if isinstance(spec, dict) else ("bytes",))
            problems.append(doc.problem(where, (
                f"bytes '{expr}' may be negative for some positive dimensions; write it so "
                "that it cannot be, e.g. as a sum of products, or with max(..., 0)")))
    if not problems and cost.bytes.is_positive is not True:
        problems.append(doc.problem(path + ("bytes",), (
            f"bytes '{cost.bytes}' may be 0 for some positive dimensions; every kernel moves "
            "some data (floor(M/128) is 0 for M < 128: use ceil or max(..., 1))")))
    return problems


def _knob(doc: Located, path: tuple, cost: Cost, knob: sp.Symbol) -> list[Problem]:
    """A crossing knob must be the one workload symbol the intensity depends on."""
    free = intensity(cost).free_symbols & set(sym.WORKLOAD)
    if knob not in free:
        return [doc.problem(path, f"the intensity does not depend on {knob}, so {knob} cannot "
                                  "move it across the ridge; drop `crossing`"
                                  + (f" or use {', '.join(sorted(map(str, free)))}" if free else ""))]
    if free - {knob}:
        return [doc.problem(path, f"the intensity also depends on "
                                  f"{', '.join(sorted(map(str, free - {knob})))}; a crossing "
                                  "knob must be the only workload symbol (B, S, M) in it")]
    return []
