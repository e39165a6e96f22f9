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
from rooflinec.finite import settle
from rooflinec.evaluate import NoPeak, Unbound
from rooflinec import flash, passes, timebox
from rooflinec.budget import Budget
from rooflinec.lower import Conventions, lower
from rooflinec.passes import Target
from rooflinec.spec import Study
from rooflinec.sweep import expand_ranges

ANALYSES: dict[str, tuple[str, Callable]] = {}
MODEL_FREE: set[str] = set()   # analyses that run without a model (catalogs of devices, ops)


def analysis(key: str, title: str, needs_model: bool = True):
    def register(fn):
        if key in ANALYSES:
            raise ValueError(f"analysis {key!r} registered twice")
        ANALYSES[key] = (title, fn)
        if not needs_model:
            MODEL_FREE.add(key)
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

    def program(self, phase: str, variant: str = "unfused", device=None):
        """The lowered program of `phase` after the passes of `variant`, cached; FlashAttention's
        prefill tiles come from `device`."""
        key = (phase, variant, device.key if device is not None else None)
        if key not in self._programs:
            naive = (phase, "unfused", None)
            if naive not in self._programs:
                self._programs[naive] = lower(self.model, phase, self.conventions)
            base = self._programs[naive]
            target = Target(device, self.conventions, self.model.head_dim, self.study.bytes_per_element)
            try:
                self._programs[key] = passes.apply(base, variant, target)
            except passes.NoOnChipMemory:
                raise SpecError([self.problem(("devices", self._index(device)), (
                    f"device '{getattr(device, 'key', None)}' gives no on_chip.sram_per_sm, which the "
                    f"'{variant}' variant needs for FlashAttention's tiles in {phase}; add on_chip to "
                    "its hardware spec or choose the 'fused' variant"))]) from None
            except flash.SramTooSmall as exc:
                raise SpecError([self.problem(("devices", self._index(device)), str(exc))]) from None
        return self._programs[key]

    def _index(self, device) -> int:
        return self.devices.index(device) if device in self.devices else 0

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


def _expanded(study: Study, ctx: Context) -> dict:
    """Every analysis's options with ranges expanded, all within their budgets; SpecError with
    every problem before anything is evaluated."""
    out, problems = {}, []
    budget = Budget(len(study.devices), ctx.problem)
    for key, options in study.analyses.items():
        if study.model is None and key not in MODEL_FREE:
            problems.append(study.doc.problem(("analyses", key), (
                f"analysis '{key}' needs a model; add 'model: <name under models/>' to the study"),
                at_key=True))
            continue
        out[key], found = expand_ranges(options or {}, ("analyses", key), ctx.problem)
        problems += found or budget.charge(key, out[key])
    if problems:
        raise SpecError(problems)
    return out


def run(study: Study, on_section=None) -> list[dict]:
    """Every analysis of the study, in the order written, as report sections.
    `on_section(index, section)` hears of each section as soon as it is evaluated."""
    ctx = Context(study)
    timebox.reset()
    sections, problems = [], []
    for key, options in _expanded(study, ctx).items():
        title, fn = ANALYSES[key]
        try:
            bad: list = []   # checked before any format or chart sees the section
            section = settle({"kind": key, "title": title, **fn(ctx, options)}, "", bad)
            if bad:
                problems.append(study.doc.problem(("analyses", key), (
                    f"analysis '{key}' computes a number that is not finite ({bad[0]}); check its "
                    "workload sizes, the devices' numbers and the formulas the model declares"),
                    at_key=True))
                continue
            sections.append(section)
            if on_section is not None and not problems:
                on_section(len(sections) - 1, sections[-1])
        except SpecError as exc:
            problems.extend(exc.problems)
        except NoPeak as exc:
            where = study.devices.index(exc.device) if exc.device in study.devices else None
            problems.append(study.doc.problem(("devices", where) if where is not None
                                              else ("analyses", key), str(exc)))
        except Unbound as exc:
            problems.append(study.doc.problem(("analyses", key), (
                f"analysis '{key}' evaluates at no value of {', '.join(exc.names)}, but its formulas "
                "still depend on it (an operator the model declares brings it in, or does not "
                "simplify within the time budget); this analysis cannot use such an operator"),
                at_key=True))
        except (OverflowError, ZeroDivisionError) as exc:   # numbers past what a float holds
            problems.append(study.doc.problem(("analyses", key), (
                f"analysis '{key}' cannot evaluate its numbers ({exc}); check its workload sizes "
                "and the operator formulas the model declares"), at_key=True))
    if problems:
        raise SpecError(problems)
    return sections


from rooflinec.analyses import attention, decode_view, derivations, gemm, sweep  # noqa: E402,F401
from rooflinec.analyses import params, published, serving, training  # noqa: E402,F401
from rooflinec.analyses import accelerators, ledger, operators  # noqa: E402,F401
