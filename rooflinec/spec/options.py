"""Typed study options: each analysis's keys as a frozen dataclass whose defaults are the
study schema's `"default"` values, the one source of truth (a test keeps the constants the
code also needs, such as `passes.DEFAULT_VARIANT` and `Conventions()`, equal to them).

A key the schema gives no default (one whose default depends on the study, such as "all the
study's devices") is None when not written; the analysis states what None means.
"""

from __future__ import annotations

import copy
from dataclasses import field, make_dataclass
from functools import cache

from rooflinec.spec import validate


@cache
def _study() -> dict:
    return validate.schema("study")


def analysis_keys(key: str) -> dict:
    """The schema's properties of analysis `key`."""
    return _study()["properties"]["analyses"]["properties"][key].get("properties", {})


def _field(spec: dict):
    default = spec.get("default")
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default))
    return field(default=default)


@cache
def option_type(key: str) -> type:
    props = analysis_keys(key)
    return make_dataclass(f"{key.title().replace('_', '')}Options",
                          [(name, object, _field(spec)) for name, spec in props.items()],
                          frozen=True)


def parse(key: str, written: dict):
    """The options of analysis `key`: what the study wrote, schema defaults for the rest."""
    return option_type(key)(**written)


def study_default(name: str):
    """The schema's default of a top-level study key (dtype)."""
    return _study()["properties"][name].get("default")


def convention_defaults() -> dict:
    props = _study()["properties"]["conventions"]["properties"]
    return {name: spec["default"] for name, spec in props.items()}


def parallel_defaults() -> dict:
    props = _study()["properties"]["parallel"]["properties"]
    return {name: spec["default"] for name, spec in props.items()}
