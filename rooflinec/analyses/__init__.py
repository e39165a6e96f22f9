"""Analyses: each turns a study's parameters into one report section (JSON-ready data).

An analysis is a function registered under the study key that selects it; the
section it returns is rendered by `templates/<format>/<key>.<format>.j2`.
"""

from __future__ import annotations

from collections.abc import Callable

from rooflinec import chartpoints
from rooflinec.errors import DeviceLacks, SpecError
from rooflinec.options import parse as parse_options
from rooflinec.spec import Study
from rooflinec.sweep import expand_ranges
from rooflinec.workbench import Workbench

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


def run(study: Study, on_section=None, bench: Workbench | None = None) -> list[dict]:
    """Every analysis of the study, in the order written, as report sections.
    `on_section(index, section)` hears of each section as soon as it is evaluated."""
    ctx = bench or Workbench(study)
    if study.model is not None:
        ctx.parallel   # noqa: B018  (checks the `parallel` block against the model, located)
    sections, problems = [], []
    for key, options in study.analyses.items():
        title, fn = ANALYSES[key]
        if study.model is None and key not in MODEL_FREE:
            problems.append(study.doc.problem(("analyses", key), (
                f"analysis '{key}' needs a model; add 'model: <name under models/>' to the study"),
                at_key=True))
            continue
        options, found = expand_ranges(options or {}, ("analyses", key), ctx.problem)
        if found:
            problems.extend(found)
            continue
        try:
            section = {"kind": key, "title": title, **fn(ctx, parse_options(key, options))}
            section["chart_points"] = chartpoints.section_points(section, study.devices, study.dtype)
            sections.append(section)
            if on_section is not None and not problems:
                on_section(len(sections) - 1, sections[-1])
        except SpecError as exc:
            problems.extend(exc.problems)
        except DeviceLacks as exc:
            where = study.devices.index(exc.device) if exc.device in study.devices else None
            problems.append(study.doc.problem(("devices", where) if where is not None
                                              else ("analyses", key), str(exc)))
        except (OverflowError, ZeroDivisionError) as exc:   # numbers past what a float holds
            problems.append(study.doc.problem(("analyses", key), (
                f"analysis '{key}' cannot evaluate its numbers ({exc}); check its workload sizes "
                "and the operator formulas the model declares"), at_key=True))
    if problems:
        raise SpecError(problems)
    return sections


def _register_all() -> None:
    """Import every module of this package: each registers its analysis, so a new analysis
    is one new file here, not an edit of this one."""
    import importlib
    import pkgutil
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}")


_register_all()
