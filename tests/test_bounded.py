"""Real inputs that once hung end quickly, by budgets counted in bits, degrees and layers
(issue 31, item 3). Each case that hung on main runs in a subprocess with a timeout, so a
regression fails instead of hanging the suite; the laws behind each fix are tested in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sympy as sp
import yaml
from hypothesis import given
from hypothesis import strategies as st

from rooflinec.model import moe, window
from rooflinec.spec.validate import MAX_DIMENSION   # 2^24: the largest dimension a spec may state

ROOT = Path(__file__).resolve().parents[1]
HANG = 60   # seconds: far past the few each case takes, short of a hang


@pytest.fixture
def tree(catalog_tree) -> Path:
    return catalog_tree


def _rooflinec(tree: Path, *argv) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        return subprocess.run([sys.executable, "-m", "rooflinec", *map(str, argv)], cwd=tree, env=env,
                              capture_output=True, text=True, timeout=HANG)
    except subprocess.TimeoutExpired:
        pytest.fail(f"rooflinec {' '.join(map(str, argv))} ran past {HANG} s")


def _model(tree: Path, base: str, name: str, **changes) -> str:
    data = yaml.safe_load((tree / "models" / f"{base}.yaml").read_text(encoding="utf-8"))
    for key, value in changes.items():
        if isinstance(value, dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    (tree / "models" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return name


def _build(tree: Path, study: dict) -> dict:
    (tree / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False), encoding="utf-8")
    done = _rooflinec(tree, "build", "study.yaml", "--out", tree / "out", "--quiet", "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads((tree / "out" / "study.json").read_text(encoding="utf-8"))


def _crossings(report: dict) -> list:
    return [c for s in report["sections"] if s["kind"] == "derivations"
            for ph in s["phases"] for op in ph["ops"] for c in op["crossings"]]


# --- MoE crossings: (1 - k/E)**M is not built exactly at M = 2**40 -----------------------

@pytest.mark.slow
def test_deepseek_v3_at_tp_8_derives_its_crossings(tree):
    report = _build(tree, {"model": "deepseek-v3", "devices": ["h100-sxm"], "parallel": {"tp": 8},
                           "analyses": {"derivations": {"phases": ["decode"]}}})
    assert any(c["variable"] == "M" and c["at"] for c in _crossings(report))


@pytest.mark.slow
@pytest.mark.parametrize("moe_change", [{"d_expert": 1}, {"experts": MAX_DIMENSION}])
def test_moe_extremes_build(tree, moe_change):
    name = _model(tree, "mixtral-8x7b", "extreme", moe=moe_change)
    report = _build(tree, {"model": name, "devices": ["h100-sxm"], "analyses": {
        "derivations": {"phases": ["decode"]},
        "serving": {"batch": [1, 64, 1024], "contexts": [1024, 32768]}}})
    assert _crossings(report)


@pytest.mark.slow
def test_serve_of_a_moe_model_at_a_million_sequences(tree):
    done = _rooflinec(tree, "serve", "mixtral-8x7b", "--device", "h100-sxm", "--batch", "1000000", "--json")
    assert done.returncode == 0, done.stderr
    assert "1000000" in done.stdout


def test_a_probe_past_the_exact_bits_is_evaluated_at_fixed_digits():
    """(31/32)**M at M = 2**40 would take 5·2**40 bits exactly; the comparison is the same at
    60 digits: 100·M / (1 + M - M·(31/32)**M) -> 100 from below, so >= 99 holds far out."""
    from rooflinec.base import budget
    from rooflinec.cost import piecewise
    m = sp.Symbol("M", positive=True)
    num, den = 100 * m, 1 + m - m * sp.Rational(31, 32) ** m
    assert budget.power_bits(num / den, {m: sp.Integer(2 ** 40)}) > budget.EXACT_BITS
    assert piecewise.at_least(num, den, m, 2 ** 40, 99)
    assert not piecewise.at_least(num, den, m, 2 ** 40, 101)
    # within the exact bits, the exact answer: at M = 1, 100 / (1 + 1 - 31/32) = 3200/33 < 99
    assert not piecewise.at_least(num, den, m, 1, 99) and piecewise.at_least(num, den, m, 1, sp.Rational(3200, 33))


# --- layer counts in closed form -----------------------------------------------------------

class _Counted(tuple):
    """A pattern that counts how often it is read; past 1000 reads the count was a loop."""

    reads = 0

    def _read(self):
        type(self).reads += 1
        if type(self).reads > 1000:
            raise AssertionError("a layer count read its pattern once per layer")

    def __getitem__(self, i):
        self._read()
        return super().__getitem__(i)

    def __iter__(self):
        self._read()
        return super().__iter__()


class _Every(int):
    """A MoE layer frequency that counts the `i % every` a per-layer loop would take."""

    used = 0

    def __rmod__(self, other):
        type(self).used += 1
        if type(self).used > 1000:
            raise AssertionError("a layer count took i % every once per layer")
        return other % int(self)


class _Model:
    def __init__(self, n_layers, pattern):
        self.n_layers, self.pattern = n_layers, pattern


def test_a_billion_layers_cost_as_few_reads_as_two():
    _Counted.reads = 0
    model = _Model(10 ** 9, _Counted(("sliding", "full")))
    assert window.full_layers(model, 0, 10 ** 9) == 5 * 10 ** 8
    assert window.local_layers(model) == 5 * 10 ** 8
    _Every.used = 0
    # layers 0, 1, 2 dense, then the odd layers 3, 5, ..., 10**9 - 1: 499,999,999 of them
    assert moe.MoE(8, 2, 64, first_dense=3, every=_Every(2)).dense_layers(10 ** 9) == 3 + 499_999_999


kinds = st.lists(st.sampled_from(["full", "sliding", "chunked"]), max_size=5)


@pytest.mark.slow
@given(kinds, st.integers(0, 200), st.integers(0, 200))
def test_full_layers_in_closed_form_count_what_the_loop_counts(pattern, first, length):
    stop = first + length
    loop = sum(1 for i in range(first, stop) if not pattern or pattern[i % len(pattern)] not in window.LOCAL)
    assert window.full_layers(_Model(stop, tuple(pattern)), first, stop) == loop


@pytest.mark.slow
@given(st.integers(0, 300), st.integers(0, 40), st.integers(1, 7))
def test_dense_layers_in_closed_form_count_what_the_loop_counts(n_layers, first_dense, every):
    loop = sum(1 for i in range(n_layers) if i < first_dense or i % every)
    assert moe.MoE(8, 2, 64, first_dense=first_dense, every=every).dense_layers(n_layers) == loop


@pytest.mark.slow
def test_a_windowed_model_of_the_most_layers_a_spec_may_state_builds(tree):
    name = _model(tree, "gemma-2-9b", "deep", n_layers=MAX_DIMENSION)
    report = _build(tree, {"model": name, "devices": ["h100-sxm"], "analyses": {
        "params": {}, "serving": {"batch": [1], "contexts": [1024]}}})
    assert report["sections"]


# --- declared operators ------------------------------------------------------------------

@pytest.mark.slow
def test_a_dimension_given_true_is_a_located_error(tree):
    (tree / "study.yaml").write_text(yaml.safe_dump({"devices": ["h100-sxm"], "analyses": {"operators": {
        "ops": [{"label": "g", "formula": "gemm", "args": {"m": True, "k": 4096, "n": 4096}}]}}}),
        encoding="utf-8")
    done = _rooflinec(tree, "check", "study.yaml")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "study.yaml:" in done.stderr and "args.m" in done.stderr and "is a dimension" in done.stderr


@pytest.mark.slow
def test_an_option_given_a_number_is_a_located_error(tree):
    (tree / "study.yaml").write_text(yaml.safe_dump({"devices": ["h100-sxm"], "analyses": {"operators": {
        "ops": [{"label": "n", "formula": "layernorm", "args": {"rows": 4, "width": 8, "shift": 3}}]}}}),
        encoding="utf-8")
    done = _rooflinec(tree, "check", "study.yaml")
    assert done.returncode == 1 and "args.shift" in done.stderr and "is an option" in done.stderr, done.stderr


@pytest.mark.slow
def test_a_degree_16_operator_builds_every_analysis(tree):
    """FLOPs M**16 over bytes M**15 + 1: its crossing polynomial has degree 16, past the
    budget for real roots, so the exact search finds it (tests/test_hostile.py checks it
    equals the roots' answer)."""
    name = _model(tree, "qwen2.5-7b", "deg16", operators=[
        {"name": "padded", "unit": "matrix", "flops": "M**16", "bytes": "M**15 + 1"}])
    qwen = yaml.safe_load((ROOT / "specs" / "qwen.yaml").read_text(encoding="utf-8"))
    analyses = {**qwen["analyses"], "sweep": {**qwen["analyses"]["sweep"], "devices": ["a100-40gb"]}}
    report = _build(tree, {"model": name, "devices": ["a100-40gb"], "analyses": analyses})
    assert any(c["at"] for c in _crossings(report))


@pytest.mark.slow
@pytest.mark.parametrize("config", ["gemma-2-9b-it", "deepseek-v3"])
def test_importing_a_config_of_the_most_layers_a_spec_may_state_ends(tree, config):
    """Gemma 2's sliding/full pattern and DeepSeek-V3's dense-first layers were counted layer
    by layer on import; the counts are now closed-form (2^24 layers, the limit: a billion is
    refused at the config key since the dimension limit, tests/test_cli_trial.py)."""
    data = json.loads((ROOT / "tests" / "hf_configs" / config / "config.json").read_text(encoding="utf-8"))
    data["num_hidden_layers"] = MAX_DIMENSION
    (tree / "config.json").write_text(json.dumps(data), encoding="utf-8")
    done = _rooflinec(tree, "import", "config.json", "--out", tree / "big.yaml")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load((tree / "big.yaml").read_text(encoding="utf-8"))["n_layers"] == MAX_DIMENSION
