"""Fuzzing: hypothesis mutates the shipped specs; loading gives a spec or located problems.

Each example deletes, retypes, renames or changes values of a shipped model, hardware or
study spec (or splices junk into its text), writes it, and loads it. The outcome must be
a loaded object or a SpecError whose problems are all located; never another exception.

The last two properties go further, through the CLI's build path into a temporary --out:
hypothesis writes declared operators (formulas, traffic classes, positions, dimensions)
into a model, or mutates a small study, and the build must exit 0 with its reports or 1
with located problems only, writing nothing. They run a sixth as many examples.

A longer run: ROOFLINEC_FUZZ_EXAMPLES=5000 python -m pytest tests/test_fuzz.py tests/test_formula.py
"""

from __future__ import annotations

import copy
import io
import math
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostile import paths as _paths
from rooflinec.base.errors import SpecError
from rooflinec.spec.load import Device, Model, Study, load_hardware, load_model, load_study

SPECS = Path(__file__).resolve().parent.parent / "specs"
CATALOG = Path(__file__).resolve().parent.parent / "rooflinec" / "spec" / "catalog"
MODELS = sorted((CATALOG / "models").glob("*.yaml"))
HARDWARE = sorted((CATALOG / "hardware").glob("*.yaml"))
STUDIES = sorted(SPECS.glob("*.yaml"))

LOCATED = re.compile(r"^.+:\d+:\d+: .+: .+$")   # file:line:col: path: message
EXAMPLES = int(os.environ.get("ROOFLINEC_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the spec tree; each example overwrites one file in `scratch/`."""
    root = tmp_path_factory.mktemp("specs")
    shutil.copytree(CATALOG / "models", root / "models")
    shutil.copytree(CATALOG / "hardware", root / "hardware")
    return root


# --- mutations --------------------------------------------------------------------------

QUANTITY_TEXT = st.sampled_from([
    "0 GB/s", "-1555 GB/s", "1555 GB", "312 TFLOPs", "1e400 TFLOP/s", "1e99999999 GB/s",
    "nan GB/s", "inf", ".inf", "40 GiB", "192 KiB", "312e12", "1_555 GB/s", "  ", "GB/s",
    "9" * 80, "1" + "0" * 400 + " B",
])

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, -1, 1, 3, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 3584.0]),
    st.text(max_size=20),
    QUANTITY_TEXT,
)

VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


def _parent(data, path):
    for part in path[:-1]:
        data = data[part]
    return data


def _mutate(data, draw) -> None:
    """One mutation of `data` in place."""
    path = draw(st.sampled_from([p for p in _paths(data) if p]))
    parent, last = _parent(data, path), path[-1]
    op = draw(st.sampled_from(["delete", "retype", "rename", "change"]))
    if op == "delete":
        del parent[last]
    elif op == "rename" and isinstance(parent, dict):
        new = draw(st.one_of(st.text(max_size=12), st.just(str(last) + "s"),
                             st.just(str(last)[:-1]), st.just(str(last).upper())))
        parent[new] = parent.pop(last)
    elif op == "retype":
        parent[last] = draw(st.sampled_from([
            "text", 7, [1, 2], {"k": "v"}, None, True, math.nan, math.inf, -1.5, [], {}]))
    else:
        parent[last] = draw(VALUES)


def _dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _check(loader, file: str, kinds) -> None:
    try:
        result = loader(file)
    except SpecError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.line >= 1 and problem.col >= 1 and problem.path and problem.message
            assert str(problem).startswith(f"{problem.file}:{problem.line}:{problem.col}: ")
    else:
        assert isinstance(result, kinds)


def _mutated(source: Path, data_strategy) -> str:
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    for _ in range(data_strategy.draw(st.integers(1, 3))):
        if not data:
            break
        _mutate(data, data_strategy.draw)
    return _dump(data)


def _write(tree: Path, name: str, text: str | bytes) -> str:
    path = tree / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


# --- properties -------------------------------------------------------------------------


@pytest.mark.slow
@FUZZ
@given(source=st.sampled_from(MODELS), data=st.data())
def test_mutated_models_load_or_fail_located(tree, source, data):
    _check(load_model, _write(tree, "models/fuzzed.yaml", _mutated(source, data)), Model)


@pytest.mark.slow
@FUZZ
@given(source=st.sampled_from(HARDWARE), data=st.data())
def test_mutated_hardware_loads_or_fails_located(tree, source, data):
    _check(load_hardware, _write(tree, "hardware/fuzzed.yaml", _mutated(source, data)), Device)


@pytest.mark.slow
@pytest.mark.skipif(not STUDIES, reason="no shipped study")
@FUZZ
@given(source=st.sampled_from(STUDIES or [SPECS]), data=st.data())
def test_mutated_studies_load_or_fail_located(tree, source, data):
    _check(load_study, _write(tree, "study.yaml", _mutated(source, data)), Study)


@pytest.mark.slow
@FUZZ
@given(source=st.sampled_from(MODELS + HARDWARE), at=st.floats(0, 1),
       junk=st.one_of(st.text(max_size=12), st.binary(max_size=12),
                      st.sampled_from([": ", "- ", "&a ", "*a", "!!python/object ", "{", "]", "\t",
                                       "\n  ", "'", '"', "? ", "<<: *a", "%YAML 1.1\n", "---\n"])))
def test_junk_spliced_into_text_loads_or_fails_located(tree, source, at, junk):
    raw = source.read_bytes()
    cut = int(len(raw) * at)
    blob = raw[:cut] + (junk if isinstance(junk, bytes) else junk.encode("utf-8")) + raw[cut:]
    loader, kind = (load_model, Model) if source in MODELS else (load_hardware, Device)
    _check(loader, _write(tree, "fuzzed.yaml", blob), kind)


@FUZZ
@given(text=st.text(max_size=300))
def test_arbitrary_text_loads_or_fails_located(tree, text):
    _check(load_model, _write(tree, "arbitrary.yaml", text), Model)


# --- the whole build path: declared operators and study specs through the CLI -------------

from rooflinec.cli.app import run as cli_run   # noqa: E402
from rooflinec.model.ir import CATEGORIES   # noqa: E402
from rooflinec.model.symbols import ALPHABET   # noqa: E402

# builds are slower than loads: a sixth as many examples (10 by default)
FUZZ_BUILD = settings(FUZZ, max_examples=max(5, EXAMPLES // 6))
SMALL_STUDY = {
    "title": "fuzzed", "model": "fuzzed-model", "devices": ["a100-40gb", "rtx4090"], "dtype": "bf16",
    "analyses": {
        "ledger": {"phases": ["decode", "prefill"], "variants": ["unfused", "flash"],
                   "workloads": [{"batch": 2, "context": 256}]},
        "derivations": {"phases": ["decode", "prefill"], "variant": "flash"},
        "sweep": {"phase": "decode", "batch": [1, 8], "context": [256, 1024]},
    },
}
NAMES = [*ALPHABET, "n_experts", "top_k", "foo", "__class__", "d_Model"]
FORMULA_ATOMS = st.one_of(st.sampled_from(NAMES), st.integers(0, 4096).map(str),
                          st.sampled_from(["0.5", "1e3", "2.", "'x'", "os.system", "[1]", ""]))


def _combine(inner):
    pair = st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "**", "^", ",", " "]), inner)
    return st.one_of(pair.map("".join),
                     inner.map(lambda t: f"({t})"),
                     st.tuples(st.sampled_from(["min", "max", "ceil", "floor", "exp", "abs"]),
                               st.lists(inner, min_size=0, max_size=3))
                     .map(lambda fa: f"{fa[0]}({', '.join(fa[1])})"),
                     st.integers(1, 3).map(str).flatmap(lambda k: inner.map(lambda t: f"({t})**{k}")))


FORMULAS = st.one_of(st.recursive(FORMULA_ATOMS, _combine, max_leaves=8), st.integers(-2, 10**6),
                     st.text(max_size=12), st.none())
OPERATOR = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["router", "rope2", "lm_head", "attention", "a b", "__x", ""]),
                       st.text(max_size=6)),
     "flops": FORMULAS,
     "bytes": st.one_of(FORMULAS, st.dictionaries(
         st.sampled_from(["weights", "kv_cache", "activations", "scores", "bogus"]), FORMULAS,
         max_size=3))},
    optional={"category": st.sampled_from([*CATEGORIES, "bogus"]),
              "unit": st.sampled_from(["matrix", "vector", "tensor"]),
              "runs": st.sampled_from(["per_layer", "once", "twice"]),
              "after": st.sampled_from(["q_proj", "k_bias", "mlp_norm", "lm_head", "qk_matmul",
                                        "router", "rope", "nope"]),
              "before": st.sampled_from(["qk_matmul", "embedding", "final_norm", "nope"]),
              "crossing": st.sampled_from(["B", "S", "M", "Q"]),
              "shape": st.text(max_size=10)})
DIMENSIONS = st.dictionaries(st.sampled_from(["n_experts", "top_k", "d_model", "bad-name", "__x", "min"]),
                             st.sampled_from([1, 8, 0, -1, 2**40, "x", 2.5]), max_size=3)


def _build(tree: Path, study: dict, fmt: str) -> None:
    """Build `study` through the CLI into a fresh folder: reports, or located problems only."""
    out_dir = Path(tempfile.mkdtemp(dir=tree))
    study_file = _write(tree, "fuzzed-study.yaml", _dump(study))
    out, err = io.StringIO(), io.StringIO()
    code = cli_run(["build", study_file, "--out", str(out_dir), "--format", fmt], out, err)
    written = sorted(str(p) for p in out_dir.rglob("*")   # the folder's manifest is no report
                     if p.is_file() and p.name != ".rooflinec.manifest.json")
    if code == 0:
        assert written and all(f"wrote {p}" in out.getvalue() for p in written), out.getvalue()
        assert not any(".rooflinec-" in p for p in written)
    else:
        assert code == 1 and out.getvalue() == "" and written == [], (code, err.getvalue())
        lines = err.getvalue().splitlines()
        assert lines and all(LOCATED.match(line) for line in lines), err.getvalue()
    shutil.rmtree(out_dir)


@FUZZ_BUILD
@given(operators=st.lists(OPERATOR, min_size=1, max_size=3), dims=DIMENSIONS,
       fmt=st.sampled_from(["json", "md,json"]))
@pytest.mark.slow
def test_declared_operators_build_or_fail_located(tree, operators, dims, fmt):
    model = yaml.safe_load((CATALOG / "models" / "gpt2-medium.yaml").read_text(encoding="utf-8"))
    model.update({"dimensions": dims, "operators": operators})
    _write(tree, "models/fuzzed-model.yaml", _dump(model))
    _build(tree, SMALL_STUDY, fmt)


@pytest.mark.slow
@FUZZ_BUILD
@given(data=st.data())
def test_mutated_small_study_builds_or_fails_located(tree, data):
    shutil.copy(CATALOG / "models" / "qwen2.5-7b.yaml", tree / "models" / "fuzzed-model.yaml")
    study = copy.deepcopy(SMALL_STUDY)
    for _ in range(data.draw(st.integers(1, 3))):
        if not study:
            break
        _mutate(study, data.draw)
    _build(tree, study, "json")
