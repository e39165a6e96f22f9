"""A benchmark's deployment recipe: the engine settings its runs used where they differ from
the engines' defaults (`catalog/benchmarks/*.yaml`), applied to each measured row by
`validate` and `calibrate` (`fitting.prepare`). A setting is a value, or an affine form of the
run's clients per attention-DP rank and its ISL, {clients: a, isl: b, plus: c}: the measured
rows' source sizes a run's token budget to its concurrency and prompt (AIConfigurator's
benchmark generator: max_num_tokens = max_batch_size + isl + 1500, its max_batch_size the
concurrency). Read with every problem located, as the engines' files are."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rooflinec.base import yamlio
from rooflinec.base.errors import SpecError, UsageError
from rooflinec.serving import engines
from rooflinec.spec import catalog

DEFAULT = "aiconfigurator"      # the measured rows' source (their README)
NONE = "none"                   # the engines' own defaults
FORM = ("clients", "isl", "plus")
FIELDS = ("name", "source", "engines", "assumed")


@dataclass(frozen=True)
class Recipe:
    name: str
    source: str
    engines: dict                # engine key -> {field: value, or {clients, isl, plus}}

    def policy(self, policy: engines.Policy, engine: str, clients: int, isl: int) -> engines.Policy:
        """`policy` with this recipe's settings for `engine` at a run of `clients` and `isl`."""
        given = self.engines.get(engine, {})
        return replace(policy, **{k: _value(v, clients, isl) for k, v in given.items()}) if given else policy


def _value(v, clients: int, isl: int):
    if not isinstance(v, dict):
        return v
    return v.get("clients", 0) * clients + v.get("isl", 0) * isl + v.get("plus", 0)


def describe(recipe: Recipe | None) -> str:
    """The recipe in a sentence for the report's assumptions."""
    if recipe is None:
        return "Benchmark recipe: none; every engine at its catalog defaults."
    parts = [f"{e}: " + ", ".join(f"{k} {_form(v)}" for k, v in given.items()) for e, given in recipe.engines.items()]
    return (f"Benchmark recipe: {recipe.name} (catalog/benchmarks/), the settings its generator writes for "
            f"each run, C the run's clients per rank: {'; '.join(parts)}. {recipe.source.strip()}.")


def _form(v) -> str:
    if not isinstance(v, dict):
        return str(v).lower() if isinstance(v, bool) else str(v)
    terms = [f"{'' if v[k] == 1 else v[k]}{'C' if k == 'clients' else 'ISL'}" for k in ("clients", "isl") if v.get(k)]
    return " + ".join(terms + ([str(v["plus"])] if v.get("plus") else []))


def names() -> list[str]:
    return catalog.names("benchmarks")


def load(ref: str) -> Recipe | None:
    """The recipe a catalog name or YAML file names; None for NONE (the engines' defaults)."""
    if ref == NONE:
        return None
    file = catalog.path("benchmarks", ref) if not ref.endswith(".yaml") else ref
    if file is None:
        raise UsageError(f"unknown benchmark recipe '{ref}'; choose from {', '.join(names() + [NONE])} "
                         "or give a recipe YAML file")
    doc = yamlio.load(file)
    d, problems = doc.data, []
    if not isinstance(d, dict) or not isinstance(d.get("engines"), dict):
        raise SpecError([doc.problem((), "expected a mapping with 'name', 'source' and 'engines'")])
    for key in sorted(set(d) - set(FIELDS)):
        problems.append(doc.problem((key,), f"unknown field; known: {', '.join(FIELDS)}", at_key=True))
    for key in ("name", "source"):
        if not isinstance(d.get(key), str) or not d[key].strip():
            problems.append(doc.problem((key,) if key in d else (), f"{key}: expected text"))
    settings = {}
    for engine, entry in d["engines"].items():
        at = ("engines", engine)
        if engine not in engines.names():
            problems.append(doc.problem(at, f"unknown engine; known: {', '.join(engines.names())}", at_key=True))
        if not isinstance(entry, dict):
            problems.append(doc.problem(at, "expected a mapping of engine settings"))
            continue
        if not isinstance(entry.get("source"), str):
            problems.append(doc.problem(at, "each engine's settings name their source ('source': text)"))
        settings[engine] = {}
        for name, v in entry.items():
            if name == "source":
                continue
            bad = _problem(name, v)
            if bad:
                problems.append(doc.problem((*at, name), bad))
            settings[engine][name] = v
    if problems:
        raise SpecError(problems)
    return Recipe(d["name"], d["source"], settings)


def _problem(name: str, v) -> str:
    """Why `v` is not a setting of field `name`: an engine field's value, or for a whole-number
    field an affine form of whole-number coefficients."""
    if name not in engines.OVERRIDABLE:
        return f"not an engine setting; known: {', '.join(engines.OVERRIDABLE)}"
    if not isinstance(v, dict):
        return engines.problem(name, v)
    if name not in engines.INTEGERS:
        return "only a whole-number setting takes a form of clients and isl"
    if not v or set(v) - set(FORM):
        return f"a form takes {', '.join(FORM)}"
    if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 2**20 for c in v.values()):
        return "a form's coefficients are whole numbers from 0 to 1048576"
    if not (v.get("clients", 0) or v.get("isl", 0) or v.get("plus", 0)):
        return "a form of all zeros gives 0, not a setting"
    return ""
