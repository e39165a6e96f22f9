"""Analyses: each turns a study's parameters into one report section (JSON-ready data).

An analysis is a function registered under the study key that selects it; the
section it returns is rendered by `templates/<format>/<key>.<format>.j2`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

from rooflinec import symbols as sym
from rooflinec.derive import exact
from rooflinec.errors import Problem, SpecError
from rooflinec.lower import Conventions, lower
from rooflinec.spec import Study
from rooflinec.sweep import expand_ranges

ANALYSES: dict[str, tuple[str, Callable]] = {}


def analysis(key: str, title: str):
    def register(fn):
        if key in ANALYSES:
            raise ValueError(f"analysis {key!r} registered twice")
        ANALYSES[key] = (title, fn)
        return fn

    return register


class Context:
    """What every analysis needs: the study, its lowered programs, numbers for the symbols."""

    def __init__(self, study: Study):
        self.study = study
        self.model = study.model
        self.devices = study.devices
        self._programs: dict = {}

    @cached_property
    def conventions(self) -> Conventions:
        return Conventions(**self.study.conventions)

    def program(self, phase: str):
        if phase not in self._programs:
            self._programs[phase] = lower(self.model, phase, self.conventions)
        return self._programs[phase]

    @cached_property
    def values(self) -> dict:
        """Model dimensions and bytes per element; the workload symbols stay free."""
        return {**sym.model_values(self.model), sym.b: self.study.bytes_per_element}

    def peak(self, device, unit: str) -> float:
        return device.peak(unit, self.study.dtype)

    def ridge(self, device, unit: str = "matrix"):
        """Peak / bandwidth as an exact rational, so crossings are solved exactly."""
        return exact(self.peak(device, unit)) / exact(device.bandwidth)

    def problem(self, path: tuple, message: str) -> Problem:
        return self.study.doc.problem(path, message)


def run(study: Study) -> list[dict]:
    """Every analysis of the study, in the order written, as report sections."""
    ctx = Context(study)
    sections, problems = [], []
    for key, params in study.analyses.items():
        title, fn = ANALYSES[key]
        params, found = expand_ranges(params or {}, ("analyses", key), ctx.problem)
        if found:
            problems.extend(found)
            continue
        try:
            sections.append({"kind": key, "title": title, **fn(ctx, params)})
        except SpecError as exc:
            problems.extend(exc.problems)
    if problems:
        raise SpecError(problems)
    return sections


from rooflinec.analyses import attention, decode_view, derivations, gemm, sweep  # noqa: E402,F401
