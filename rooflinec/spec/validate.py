"""JSON Schema validation that reports every problem, located, with a hint."""

from __future__ import annotations

import difflib
import json
import math
from functools import cache
from importlib import resources

from jsonschema import Draft202012Validator, ValidationError, validators

from rooflinec.base.errors import Problem
from rooflinec.model import kinds
from rooflinec.base.units import QuantityError, parse_quantity
from rooflinec.base.yamlio import Located


def _quantity(validator, dimension, instance, schema):
    if isinstance(instance, bool) or not isinstance(instance, (int, float, str)):
        return  # "type" reports it
    try:
        parse_quantity(instance, dimension)
    except QuantityError as exc:
        yield ValidationError(str(exc))


# JSON Schema counts 3584.0 as an integer; a spec field that wants a count wants an int.
_TYPES = Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda checker, instance: isinstance(instance, int) and not isinstance(instance, bool))
_Validator = validators.extend(Draft202012Validator, {"x-quantity": _quantity}, type_checker=_TYPES)


def schema(name: str) -> dict:
    """The named schema; the model's with the registered layer kinds' sections."""
    return _schema(name, tuple(kinds.registry()) if name == "model" else ())


@cache
def _schema(name: str, registered: tuple) -> dict:
    text = resources.files("rooflinec.spec.schemas").joinpath(f"{name}.schema.json").read_text("utf-8")
    loaded = json.loads(text)
    return _with_kinds(loaded) if name == "model" else loaded


def _with_kinds(root: dict) -> dict:
    """The model schema with each layer kind's own section (rooflinec.model.kinds: its `key`
    and `schema`) placed before `dimensions`, feed-forward kinds first, and every kind a
    pattern may name in `attention.pattern`'s enum."""
    kinds_ = [k for k in kinds.registry().values() if k.slot == "ffn"] + kinds.of_slot("mixer")
    sections = {k.key: k.schema for k in kinds_ if k.key and k.schema}
    props = {}
    for key, value in root["properties"].items():
        if key == "dimensions":
            props.update(sections)
        props[key] = value
    items = root["properties"]["attention"]["properties"]["pattern"]["items"]
    items["enum"] = list(dict.fromkeys([*items["enum"], *kinds.pattern_names()]))
    return {**root, "properties": {k: v if k == "operators" else _bounded(v) for k, v in props.items()}}


# The one plausibility limit of a model's integer dimensions (widths, heads, layers, experts,
# vocabulary, context, a kind's sizes): 2^24, above the largest any released config holds (Llama 4
# Scout's 10,485,760-token context) and far below where a parameter count stops meaning anything
# (a trillion layers printed 2.2e20 parameters). Every integer field of the model schema takes it
# as its maximum unless it states a smaller one; declared operators' costs are not dimensions.
MAX_DIMENSION = 2 ** 24


def _bounded(node):
    """`node` (a schema) with MAX_DIMENSION as the maximum of every integer it holds that has none."""
    if isinstance(node, list):
        return [_bounded(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _bounded(v) for k, v in node.items()}
    types = node.get("type")
    if (types == "integer" or isinstance(types, list) and "integer" in types) and "maximum" not in node:
        out["maximum"] = MAX_DIMENSION
    return out


def _validator(name: str):
    return _compiled(name, tuple(kinds.registry()) if name == "model" else ())


@cache
def _compiled(name: str, registered: tuple):
    return _Validator(schema(name))


MAX_INTEGER = 2 ** 53   # the largest integer every later step (floats, NumPy) holds exactly


def numbers(doc: Located, node, path: tuple = ()) -> list[Problem]:
    """Rules for every number in a spec, whatever the field: finite, and integers exact as floats."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in numbers(doc, v, path + (k,))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in numbers(doc, v, path + (i,))]
    if isinstance(node, float) and not math.isfinite(node):
        return [doc.problem(path, f"{json.dumps(node)} is not accepted; numbers must be finite")]
    if isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_INTEGER:
        return [doc.problem(path, f"integer of {len(str(abs(node)))} digits is too large; integers "
                                  f"are at most 2^53 = {MAX_INTEGER}")]
    return []


def check(doc: Located, name: str) -> list[Problem]:
    """Every schema violation in `doc`, and every number no field accepts, as located problems."""
    errors = list(_validator(name).iter_errors(doc.data))
    # a value of the wrong type gets one message, not also "must be >= 1" for -.inf
    mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    problems: list[Problem] = []
    for err in errors:
        if err.validator == "type" or tuple(err.absolute_path) not in mistyped:
            problems.extend(_explain(doc, err))
    said = {p.path for p in problems}   # the schema's own message is the more specific
    return problems + [p for p in numbers(doc, doc.data) if p.path not in said]


def closest(word: str, choices) -> str:
    """The likeliest name meant: one that `word` begins (h200 -> h200-sxm) before the closest
    by difflib's ratio (which would offer b200 for h200)."""
    names = [str(c) for c in choices]
    prefixed = sorted((n for n in names if n.startswith(str(word)) and n != str(word)), key=len)
    match = prefixed[:1] or difflib.get_close_matches(str(word), names, n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'? " if match else ""


_TYPE_NAMES = {"integer": "an integer", "number": "a number", "string": "a string",
               "boolean": "true or false", "array": "a list", "object": "a mapping", "null": "null"}


def show(instance, limit: int = 60) -> str:
    """A value as JSON, cut short: a message quotes a value, not a whole file."""
    text = json.dumps(instance, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _got(instance) -> str:
    kind = {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "list", dict: "mapping", type(None): "null"}.get(type(instance), type(instance).__name__)
    text = show(instance) if not isinstance(instance, (dict, list)) else kind
    return f"got {kind} {text}" if text != kind else f"got a {kind}"


def _described(sch: dict, key: str) -> str:
    text = sch.get("properties", {}).get(key, {}).get("description", "")
    return f" ({text})" if text else ""


def _explain(doc: Located, err: ValidationError) -> list[Problem]:
    path = tuple(err.absolute_path)
    kw, inst, sch = err.validator, err.instance, err.schema
    if kw == "additionalProperties" and isinstance(inst, dict):
        known = sorted(sch.get("properties", {}))
        out = []
        for key in (k for k in inst if k not in known):
            hint = closest(key, known)
            out.append(doc.problem(path + (key,), f"unknown key '{key}'; {hint}accepted keys: "
                                                  f"{', '.join(known) or '(none)'}", at_key=True))
        return out
    if kw == "required" and isinstance(inst, dict):
        return [doc.problem(path, f"missing required key '{key}'{_described(sch, key)}")
                for key in err.validator_value if key not in inst]
    if kw == "type":
        wanted = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        return [doc.problem(path, f"expected {' or '.join(_TYPE_NAMES.get(w, w) for w in wanted)}, {_got(inst)}")]
    if kw == "enum":
        choices = err.validator_value
        accepted = f"{closest(inst, choices)}accepted: {', '.join(map(str, choices))}"
        if "propertyNames" in err.relative_schema_path and isinstance(inst, str):
            return [doc.problem(path + (inst,), f"unknown key '{inst}'; {accepted}", at_key=True)]
        return [doc.problem(path, f"{show(inst)} is not accepted; {accepted}")]
    if kw in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[kw]
        limit = " (2^24: the plausibility limit of a model's dimensions)" if err.validator_value == MAX_DIMENSION else ""
        return [doc.problem(path, f"must be {op} {err.validator_value}{limit}, {_got(inst)}")]
    if kw == "propertyNames":
        return [doc.problem(path, f"key {err.message}")]
    if kw == "minLength":
        return [doc.problem(path, "must not be empty")]
    if kw in ("minItems", "minProperties"):
        return [doc.problem(path, f"must not be empty (at least {err.validator_value})")]
    if kw == "uniqueItems":
        return [doc.problem(path, "items must be unique")]
    if kw == "pattern":
        return [doc.problem(path, f"{show(inst)} is not a spec name or relative .yaml path "
                                  "(letters, digits, '_', '.', '-' and '/')")]
    return [doc.problem(path, err.message)]
