"""Lowering's side of the operators a model spec declares (parsed by rooflinec.model.custom): each
is placed in the program after the op it names, before one, or at the end of the layer
(per-layer ops) or of the model (once-per-model ops)."""

from __future__ import annotations

import sympy as sp

from rooflinec.model import custom
from rooflinec.model import symbols as sym
from rooflinec.base.errors import SpecError
from rooflinec.model.ir import Op

RUNS = {"per_layer": sym.L, "once": sp.Integer(1)}
FORMULA = "declared"          # Op.formula of every user-declared op
FLASH_KERNEL = "attention"    # the op the flash variant adds (rooflinec.model.flash.kernel)


def _op(d: custom.Declared) -> Op:
    return Op(d.name, FORMULA, d.category, d.unit, d.cost, RUNS[d.runs], d.shape, d.crossing)


def place(ops: list[Op], declared, phase: str) -> list[Op]:
    """`ops` with every declared op inserted; SpecError (located in the model) if one cannot be."""
    out, problems, tail = list(ops), [], {}
    taken = {o.name for o in ops} | {a for o in ops for a in o.absorbed} | {FLASH_KERNEL}
    for d in declared:
        if d.name in taken:
            problems.append(d.problem(f"'{d.name}' is the name of a built-in op of the {phase} "
                                      "program; choose another name", "name"))
            continue
        index = _position(out, d, tail)
        if index is None:
            key = "after" if d.after is not None else "before"
            names = ", ".join(o.name for o in out)
            problems.append(d.problem(f"no op '{getattr(d, key)}' in the {phase} program to place "
                                      f"'{d.name}' {key}; ops: {names}", key))
            continue
        out.insert(index, _op(d))
        tail[d.after] = d.name
        taken.add(d.name)
    if problems:
        raise SpecError(problems)
    return out


def _position(ops: list[Op], d: custom.Declared, tail: dict) -> int | None:
    if d.before is not None:   # each op placed before X goes after those placed before X
        return next((i for i, o in enumerate(ops) if o.name == d.before or d.before in o.absorbed),
                    None)
    if d.after is None:
        if d.runs == "once":
            return len(ops)
        # the end of the layer: before the first once-per-model op that follows a layer op
        layer = [i for i, o in enumerate(ops) if o.per_layer]
        return (layer[-1] + 1) if layer else len(ops)
    anchor = tail.get(d.after, d.after)   # after the ops already placed after the same op
    for i, o in enumerate(ops):
        if o.name == anchor or anchor in o.absorbed:
            return i + 1
    return None


def symbols(model) -> tuple[sp.Symbol, ...]:
    """The model's extra dimension symbols, in the order declared."""
    return tuple(sym.extra_values(model))


def cache_per_token(model) -> sp.Expr:
    """Cache bytes per token of context the model's declared operators keep."""
    return sp.Add(*(d.cache * RUNS[d.runs] for d in model.operators))
