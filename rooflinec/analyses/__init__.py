"""Analyses: each turns a study's parameters into one report section (JSON-ready data).

An analysis is a function registered under the study key that selects it; the
section it returns is rendered by `templates/<format>/<key>.<format>.j2`.
"""

from __future__ import annotations

from collections.abc import Callable
import importlib
import pkgutil

from rooflinec.cost import chartpoints
from rooflinec.base.budget import Budget
from rooflinec.base.errors import DeviceError, SpecError, VariantLacks
from rooflinec.cost.evaluate import Unbound
from rooflinec.cost.finite import settle
from rooflinec.spec.options import parse as parse_options
from rooflinec.spec.load import Study
from rooflinec.cost.sweep import expand_ranges
from rooflinec.cost.workbench import Workbench

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


def _expanded(study: Study, ctx: Workbench) -> dict:
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


def run(study: Study, on_section=None, bench: Workbench | None = None) -> list[dict]:
    """Every analysis of the study, in the order written, as report sections.
    `on_section(index, section)` hears of each section as soon as it is evaluated."""
    ctx = bench or Workbench(study)
    if study.model is not None:
        ctx.parallel   # noqa: B018  (checks the `parallel` block against the model, located)
    sections, problems = [], []
    for key, options in _expanded(study, ctx).items():
        title = ANALYSES[key][0]
        try:
            bad: list = []   # checked before any format or chart sees the section
            data = evaluate(ctx, key, parse_options(key, options))
            section = settle({"kind": key, "title": title, **data}, "", bad)
            if bad:
                problems.append(study.doc.problem(("analyses", key), (
                    f"analysis '{key}' computes a number that is not finite ({bad[0]}); check its "
                    "workload sizes, the devices' numbers and the formulas the model declares"),
                    at_key=True))
                continue
            # from the settled numbers, for the devices the section evaluated; a chart holding a
            # number past its axis is left out
            left_out = {row["device"] for row in section["lacking"]}
            section["chart_points"] = [] if section.get("omitted") else chartpoints.section_points(
                section, [d for d in study.devices if d.key not in left_out], study.dtype)
            sections.append(section)
            if on_section is not None and not problems:
                on_section(len(sections) - 1, sections[-1])
        except SpecError as exc:
            problems.extend(exc.problems)
        except DeviceError as exc:   # a missing figure, SRAM smaller than a tile
            where = study.devices.index(exc.device) if exc.device in study.devices else None
            problems.append(study.doc.problem(("devices", where) if where is not None
                                              else ("analyses", key), str(exc)))
        except Unbound as exc:
            problems.append(study.doc.problem(("analyses", key), (
                f"analysis '{key}' evaluates at no value of {', '.join(exc.names)}, but its formulas "
                "still depend on it (an operator the model declares brings it in, or does not "
                "simplify within its size budget); this analysis cannot use such an operator"),
                at_key=True))
        except (OverflowError, ZeroDivisionError) as exc:   # numbers past what a float holds
            problems.append(study.doc.problem(("analyses", key), (
                f"analysis '{key}' cannot evaluate its numbers ({exc}); check its workload sizes "
                "and the operator formulas the model declares"), at_key=True))
    if problems:
        raise SpecError(problems)
    return sections


def evaluate(ctx: Workbench, key: str, options, empty: bool = False) -> dict:
    """Analysis `key`'s section. A device lacking a figure it needs (a vector peak, the SRAM
    FlashAttention's tiles come from) is left out of this section only, and the section
    says so (`lacking`: device and why). With no device left the last lack is raised, an
    error located at that device, unless `empty` or the lack is only the chosen variant's
    (errors.VariantLacks: FlashAttention's SRAM): then the section is only the note."""
    fn, lacking = ANALYSES[key][1], []
    while True:
        try:
            return {**fn(ctx, options), "lacking": lacking}
        except DeviceError as exc:   # a lacking figure, SRAM smaller than a tile
            if exc.device not in ctx.devices or (len(ctx.devices) == 1 and not empty
                                                 and not isinstance(exc, VariantLacks)):
                raise
            lacking.append({"device": exc.device.key, "why": str(exc)})
            ctx = ctx.without(exc.device)
            if not ctx.devices:
                return {"lacking": lacking, "omitted": True}


def _register_all() -> None:
    """Import every module of this package: each registers its analysis, so a new analysis
    is one new file here, not an edit of this one."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}")


_register_all()
