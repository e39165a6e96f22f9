"""Hostile and absurd input: each class ends in a located error or a sane report, quickly.

Budgets on lists and ranges, formula budgets and expression-size budgets, piecewise formulas through
every analysis, numbers no device could have, finite reports, input files that are not
files, long values in messages; then a few cases of the mutation fuzzer (tests/hostile.py;
ROOFLINEC_HOSTILE_EXAMPLES=5000 for a long run).
"""


import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sympy as sp
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.cli.app import run as cli_run

SPECS = Path(__file__).resolve().parent.parent / "specs"
CATALOG = SPECS.parent / "rooflinec" / "spec" / "catalog"   # shipped models/ and hardware/
QWEN = yaml.safe_load((SPECS / "qwen.yaml").read_text(encoding="utf-8"))
LOCATED = __import__("re").compile(r"^.+:\d+:\d+: .+: .+$")
EXAMPLES = int(os.environ.get("ROOFLINEC_HOSTILE_EXAMPLES", "6"))


@pytest.fixture
def tree(catalog_tree):
    return catalog_tree


def _write(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def _study(tree: Path, analyses: dict, devices=("a100-40gb",), model="qwen2.5-7b") -> Path:
    return _write(tree / "study.yaml", {"model": model, "devices": list(devices), "analyses": analyses})


def _device(tree: Path, section: str, key: str, value) -> None:
    path = tree / "hardware" / "a100-40gb.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data[section][key] = value
    _write(path, data)


def _operator(tree: Path, flops: str, nbytes: str = "2*d_model*M", **extra) -> None:
    path = tree / "models" / "qwen2.5-7b.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data.update(extra)
    data["operators"] = [{"name": "padded", "unit": "matrix", "flops": flops, "bytes": nbytes}]
    _write(path, data)


def _run(*argv) -> tuple[int, str, str, float]:
    """(status, stdout, stderr, CPU seconds): a hang guard in CPU time, which a loaded machine
    does not trip (wall time under 20 other processes failed a 10 s guard)."""
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()
    code = cli_run([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue(), time.process_time() - start


def _refused(study: Path, *fragments: str, within: float = 10.0) -> str:
    """`check` exits 1, quickly, with located problems only, one of them holding every fragment."""
    code, _, err, took = _run("check", study)
    lines = err.splitlines()
    assert code == 1 and lines and all(LOCATED.match(line) for line in lines), err
    assert any(all(f in line for f in fragments) for line in lines), err
    assert took < within, f"{took:.1f} s"
    return err


def _all_analyses(device: str = "a100-40gb") -> dict:
    analyses = json.loads(json.dumps(QWEN["analyses"]))
    analyses["sweep"]["devices"] = [device]
    return analyses


# --- budgets on lists, ranges and the whole study ---------------------------------------

def test_a_range_past_the_axis_limit_is_refused_before_expanding(tree):
    study = _study(tree, {"gemm_intensity": {"tokens": {"from": 1, "to": 10 ** 7, "step": 1}}})
    _refused(study, "analyses.gemm_intensity.tokens", "at most 100000")


def test_a_geometric_range_with_a_ratio_barely_above_one_is_refused(tree):
    study = _study(tree, {"attention_intensity": {"contexts": {"from": 1, "to": 10 ** 6,
                                                               "geometric": 1.0000001}}})
    _refused(study, "attention_intensity.contexts", "at most 100000")


def test_crossed_lists_past_the_analysis_budget_are_refused(tree):
    rng = {"from": 1, "to": 10 ** 4, "step": 1}
    study = _study(tree, {"serving": {"batch": rng, "contexts": rng}})
    _refused(study, "analyses.serving", "at most 4096")


def test_an_operator_whose_argument_lists_cross_past_the_budget_is_refused(tree):
    values = list(range(1, 101))   # 100^3 points for one GEMM
    study = _write(tree / "study.yaml", {"devices": ["a100-40gb"], "analyses": {"operators": {"ops": [
        {"label": "big", "formula": "gemm", "args": {"m": values, "k": values, "n": values}}]}}})
    _refused(study, "analyses.operators", "at most 4096", within=5.0)


def test_analyses_within_their_budgets_but_past_the_study_budget_are_refused(tree):
    rng = {"from": 1, "to": 1000, "step": 1}   # 4000 points each on 4 devices
    study = _study(tree, {"gemm_intensity": {"tokens": rng}, "attention_intensity": {"contexts": rng},
                          "decode_view": {"contexts": rng},
                          "serving": {"batch": [1], "contexts": list(range(1, 101))}},
                   devices=["a100-40gb", "rtx4090", "h100-sxm", "l4"])   # serving: 3 x 100 x 4
    err = _refused(study, "analyses.serving", "at most 12288", within=5.0)
    assert "at most 4096" not in err   # each analysis alone is within its budget


# --- formula budgets and expression-size budgets ----------------------------------------------------

@pytest.mark.parametrize("formula, fragment", [
    ("((((M**16)**16)**16)**16)", "power 256"),        # nested powers count in full
    ("M**16*M", "power 17"),
    ("(B+S+M+1)**16", "terms"),                       # 969 terms multiplied out
    ("(B+S+M+1)**40", "exponent"),
])
def test_formulas_past_their_budgets_are_located(tree, formula, fragment):
    _operator(tree, formula)
    _refused(_study(tree, {"params": {}}), "operators[0].flops", fragment)


def test_a_formula_with_too_many_symbols_is_located(tree):
    dims = {f"k{i}": 2 for i in range(30)}
    _operator(tree, "*".join(dims), dimensions=dims)
    _refused(_study(tree, {"params": {}}), "operators[0].flops", "distinct symbols")


def test_a_model_with_too_many_dimensions_is_located(tree):
    _operator(tree, "2*M", dimensions={f"k{i}": 2 for i in range(40)})
    _refused(_study(tree, {"params": {}}), "dimensions")


def _refuse(*args, **kwargs):
    raise AssertionError("sympy was handed a step past its size budget")


def test_a_factoring_past_its_size_budget_is_not_attempted(monkeypatch):
    """The expression as written and False, decided from its size before sympy runs."""
    from rooflinec.model import ir
    x = sp.symbols("x0:9")
    big = sp.Mul(*(sum(x[:4]) + i for i in range(4)), evaluate=False)   # 5^4 = 625 terms out
    monkeypatch.setattr(ir.sp, "factor", _refuse)
    assert ir.factoring.__wrapped__(big) == (big, False)


@pytest.mark.slow
def test_a_limit_past_its_size_budget_is_none_not_a_hang(monkeypatch):
    from rooflinec.base import budget
    from rooflinec.cost import derive
    s = sp.Symbol("S", positive=True)
    long = sum(sp.ceiling(s / (i + 2)) * s ** (i % 3) for i in range(budget.LIMIT_OPS)) / sp.floor(s)
    monkeypatch.setattr(derive.sp, "limit", _refuse)
    assert derive.limit_within_budget(long, s) == (None, True)


def test_a_decaying_power_has_its_limit_without_gruntz(monkeypatch):
    """moe-mixtral's expert GEMM: (3/4)**M -> 0, so the limit is the ratio of leading terms,
    234995712 / 73728 = 9562/3, exactly; sp.limit (seconds, once cut off by a timer) never runs."""
    from rooflinec.cost import derive
    m = sp.Symbol("M", positive=True)
    monkeypatch.setattr(derive.sp, "limit", _refuse)
    f = 234995712 * m / (-939524096 * sp.Rational(3, 4) ** m + 73728 * m + 939524096)
    assert derive.limit_within_budget(f, m) == (sp.Rational(9562, 3), False)


def test_crossing_polynomials_past_their_degree_are_searched_exactly(monkeypatch):
    """M**16 / (M**15 + 1) against a ridge: no real-root isolation of a degree-16 polynomial;
    the search finds the same first integer the roots would: M**16 >= r (M**15 + 1) first holds
    at ceil(r) for r = 300 (300**16 - 300 * 300**15 = 0 < 300, 301**16 > 300 (301**15 + 1))."""
    from rooflinec.cost import derive
    m = sp.Symbol("M", positive=True)
    monkeypatch.setattr(derive, "_positive_roots", _refuse)
    derive._crossing.cache_clear()
    try:
        assert derive.crossing(m ** 16 / (m ** 15 + 1), m, {}, 300).at == 301
    finally:
        derive._crossing.cache_clear()


# --- piecewise formulas through every analysis -------------------------------------------

PIECEWISE = ["ceil(B/128)*d_model", "max(4096, 2048*B)", "min(4096, B)*d_model",
             "max(1, floor(B/128))*d_model", "B**(-16)*d_model + d_model"]


@pytest.mark.slow
@pytest.mark.parametrize("formula", PIECEWISE)
def test_piecewise_formulas_check_through_every_analysis(tree, formula):
    _operator(tree, formula, f"2*d_model + {formula}")
    code, out, err, _ = _run("check", _study(tree, _all_analyses()))
    assert code == 0, err


PARTS = st.sampled_from(["B", "S", "M", "ceil(B/128)", "floor(S/64)", "max(B, 8)", "min(M, 4096)",
                         "max(1, floor(M/128))", "B**(-2)", "ceil(S/256)"])
PIECE = st.tuples(PARTS, PARTS, st.sampled_from(["+", "*"])).map(lambda t: f"({t[0]}{t[2]}{t[1]})")


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None)
@given(flops=PIECE, nbytes=PIECE)
def test_random_piecewise_formulas_give_sane_sections(tmp_path_factory, flops, nbytes):
    """Every analysis succeeds; every crossover found is compute-bound where it says it is."""
    from rooflinec.cli import report
    from rooflinec.spec import load as spec
    from rooflinec.cost.workbench import Workbench
    tree = tmp_path_factory.mktemp("pw")
    shutil.copytree(CATALOG / "models", tree / "models")
    shutil.copytree(CATALOG / "hardware", tree / "hardware")
    _operator(tree, f"d_model*{flops}", f"2*d_model + d_model*{nbytes}")
    study = spec.load_study(str(_study(tree, _all_analyses())))
    rep = report.build(study)
    serving = next(s for s in rep["sections"] if s["kind"] == "serving")
    from rooflinec.model.lower import LEAST_WORK   # the serving section's bound conventions
    terms = Workbench(study).step_terms("decode", serving["variant"], study.devices[0], LEAST_WORK)
    for row in serving["crossovers"]:
        first = row["devices"][0]["first"]
        if first is not None:
            compute, memory = terms.at(first, row["context"])
            assert compute >= memory * (1 - 1e-12), (row, compute, memory)
    json.loads(__import__("rooflinec.render.pages", fromlist=["to_json"]).to_json(rep),
               parse_constant=lambda c: pytest.fail(f"report holds {c}"))


# --- numbers no device could have, finite reports ----------------------------------------

def test_sram_smaller_than_one_tile_is_located(tree):
    _device(tree, "on_chip", "sram_per_sm", "1 B")
    _refused(_study(tree, _all_analyses()), "sram_per_sm")


def test_fractional_bytes_are_refused(tree):
    _device(tree, "on_chip", "sram_per_sm", 0.5)
    _refused(_study(tree, {"params": {}}), "on_chip.sram_per_sm", "whole number of bytes")


@pytest.mark.parametrize("section, key, value", [
    ("memory", "bandwidth", "1e-300 B/s"), ("memory", "bandwidth", "1e30 GB/s"),
    ("compute", "tensor", {"bf16": "1e-300 FLOP/s"}), ("memory", "capacity", "1 B"),
])
def test_numbers_no_device_has_are_located(tree, section, key, value):
    _device(tree, section, key, value)
    _refused(_study(tree, {"params": {}}), f"{section}.{key}", "outside what any device has")


def test_a_ridge_no_device_has_is_located(tree):
    _device(tree, "memory", "bandwidth", "1 GB/s")   # 312 TFLOP/s over 1 GB/s: 312000 FLOP/B
    _refused(_study(tree, {"params": {}}), "compute.tensor.bf16", "peak / bandwidth")


@pytest.mark.parametrize("value, fragment", [
    (2 ** 53 + 1, "at most 2^53"), (10 ** 63, "at most 2^53"), (float("nan"), "finite"),
])
def test_huge_or_non_finite_numbers_in_a_spec_are_located(tree, value, fragment):
    study = _study(tree, {"attention_intensity": {"contexts": [1, value]}})
    _refused(study, "contexts[1]", fragment)


@pytest.mark.slow
def test_a_nan_geometric_ratio_is_located(tree):
    study = _study(tree, {"attention_intensity": {"contexts": {"from": 1, "to": 100,
                                                               "geometric": float("nan")}}})
    _refused(study, "geometric", "finite")


def test_a_number_that_is_not_finite_never_reaches_a_report(tree, monkeypatch):
    from rooflinec import analyses
    title, fn = analyses.ANALYSES["params"]
    monkeypatch.setitem(analyses.ANALYSES, "params", (title, lambda ctx, p: {"x": [1.0, math.inf]}))
    _refused(_study(tree, {"params": {}}), "analyses.params", "not finite", "x[1] = inf")


@pytest.mark.slow
def test_huge_but_valid_values_draw_or_say_why_a_chart_was_left_out(tree):
    _operator(tree, "d_model**16*V**16*d_ff**16", "2*d_model")
    study = _study(tree, {"decode_view": {"contexts": [1024, 2 ** 53]}})
    code, _, err, _ = _run("build", study, "--out", tree / "out", "--format", "md,html")
    assert code == 0, err
    md = (tree / "out" / "study.md").read_text(encoding="utf-8")
    html = (tree / "out" / "study.html").read_text(encoding="utf-8")
    assert "left out: it would plot" in md and "left out: it would plot" in html
    svgs = list((tree / "out" / "study").glob("*.svg")) if (tree / "out" / "study").exists() else []
    for svg in svgs:   # a chart left out is not written; the others are whole
        assert svg.read_text(encoding="utf-8").rstrip().endswith("</svg>")


# --- input files --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_given_as_the_study_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "study.yaml"
    os.mkfifo(fifo)
    try:   # a separate process: if it blocked, the timeout ends it and the test fails
        done = subprocess.run([sys.executable, "-m", "rooflinec", "check", str(fifo)],
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("check blocked on a FIFO")
    assert done.returncode == 1 and "not a regular file" in done.stderr, done.stderr


@pytest.mark.slow
def test_an_alias_repeating_a_large_node_is_refused_quickly(tree):
    lines = ["big: &b " + "x" * 500_000, "model: qwen2.5-7b", "devices: [a100-40gb]",
             "analyses: {params: {}}", "junk:"] + ["  - *b"] * 400
    study = tree / "study.yaml"
    study.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _refused(study, "expands to more than", within=5.0)


# --- messages, digits --------------------------------------------------------------------

def test_messages_quote_the_start_and_the_length_of_a_long_value(tree):
    study = _write(tree / "study.yaml", {"model": "qwen2.5-7b", "devices": ["x" * 5000],
                                         "analyses": {"params": {}, "y" * 5000: {}}})
    err = _refused(study, "(5000 characters)")
    assert all(len(line) < 1000 for line in err.splitlines()), [len(line) for line in err.splitlines()]


@pytest.mark.parametrize("text", ["\uff14\uff10 GiB", "\u0664\u0660 GiB", "4\uff10 GiB"])
def test_only_ascii_digits_are_numbers(text):
    from rooflinec.base.units import QuantityError, parse_quantity
    with pytest.raises(QuantityError):
        parse_quantity(text, "bytes")


# --- the mutation fuzzer -------------------------------------------------------------------

@pytest.mark.slow
def test_mutated_shipped_specs_end_located_or_finite():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hostile
    result = hostile.fuzz(max(EXAMPLES * 3, 10), seed=int(os.environ.get("ROOFLINEC_HOSTILE_SEED", "7")))
    assert not result["failures"], json.dumps(result["failures"][:3], indent=1)


# --- the other inputs: a measurements CSV, an imported config.json ----------------------

MEASURED_HEADER = ("model,device,engine,engine_version,weights,tp,pp,isl,osl,concurrency,"
                   "ttft_ms,tpot_ms,measured,row_id\n")


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("reader", ["measurements", "import"])
def test_a_fifo_as_a_csv_or_config_is_refused_without_blocking(tmp_path, reader):
    fifo = tmp_path / ("runs.csv" if reader == "measurements" else "config.json")
    os.mkfifo(fifo)
    code = ("from rooflinec.serving import measurements; from rooflinec.spec import hfimport\n"
            + (f"measurements.read({str(fifo)!r})" if reader == "measurements"
               else f"hfimport.convert({str(fifo)!r})"))
    try:   # a separate process: if it blocked, the timeout ends it and the test fails
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{reader} blocked on a FIFO")
    assert "SpecError" in done.stderr and "not a regular file" in done.stderr, done.stderr


def test_a_measurements_csv_over_the_cap_is_refused_before_it_is_read(tmp_path):
    from rooflinec.serving import measurements
    from rooflinec.base.errors import SpecError
    big = tmp_path / "runs.csv"
    with open(big, "wb") as fh:   # sparse: the size is checked, not the bytes
        fh.write(MEASURED_HEADER.encode())
        fh.truncate(measurements.MAX_BYTES + 1)
    with pytest.raises(SpecError, match=f"limited to {measurements.MAX_BYTES} bytes"):
        measurements.read(str(big))


def test_a_measurements_count_of_many_digits_is_located(tmp_path):
    from rooflinec.serving import measurements
    from rooflinec.base.errors import SpecError
    runs = tmp_path / "runs.csv"
    runs.write_text(MEASURED_HEADER + f"m,d,e,1,bf16,1,1,{'9' * 5000},1,1,1,1,,r1\n", encoding="utf-8")
    with pytest.raises(SpecError) as err:
        measurements.read(str(runs))
    assert "isl" in str(err.value) and "at most 15 digits" in str(err.value)
    assert len(str(err.value)) < 1000   # the 5000 digits are not repeated whole


@pytest.mark.parametrize("value, fragment", [
    ("1.0e+999", "must be finite"), ("NaN", "must be finite"), (str(2 ** 64), "at most 2^53")])
def test_an_imported_config_with_a_number_past_a_float_is_located(tmp_path, value, fragment):
    from rooflinec.spec import hfimport
    from rooflinec.base.errors import SpecError
    cfg = tmp_path / "config.json"
    src = (Path(__file__).parent / "hf_configs" / "llama-3.1-8b" / "config.json").read_text(encoding="utf-8")
    data = json.loads(src)
    data["rope_theta"] = "VALUE"
    cfg.write_text(json.dumps(data, indent=2).replace('"VALUE"', value), encoding="utf-8")
    with pytest.raises(SpecError) as err:
        hfimport.convert(str(cfg))
    assert "rope_theta" in str(err.value) and fragment in str(err.value), str(err.value)
    assert LOCATED.match(str(err.value)), str(err.value)


def test_serve_keeps_the_serving_analysis_budget():
    batches = ",".join(map(str, range(1, 5001)))
    code, out, err, took = _run("serve", "qwen2.5-7b", "--device", "a100-40gb", "--batch", batches)
    assert code == 1 and not out and "at most 4096" in err and "Traceback" not in err, err
    assert took < 10, f"{took:.1f} s"


@pytest.fixture
def expired_budgets(monkeypatch):
    """Every size budget is spent at once; the caches it fills are emptied before and after, so
    no other test sees a derivation left unsimplified."""
    from rooflinec.base import budget
    from rooflinec.cost import derive
    from rooflinec.model import ir
    caches = (ir.factoring, ir.intensity, derive.derive, derive._crossing)

    def clear():
        for cache in caches:
            cache.cache_clear()
    for name in ("FACTOR_TERMS", "EXPAND_TERMS", "ROOT_DEGREE"):
        monkeypatch.setattr(budget, name, 0)
    clear()
    yield
    clear()


@pytest.mark.slow
def test_a_spent_size_budget_is_stated_in_every_format(tree, expired_budgets):
    """Not simplified, limit and crossing not found: each said in md, html, JSON and explain,
    never printed as if sympy had simplified the formula or proved no crossing."""
    study = _study(tree, {"derivations": {"phases": ["decode"]}})
    code, _, err, _ = _run("build", study, "--out", tree / "out", "--quiet")
    assert code == 0, err
    data = json.loads((tree / "out" / "study.json").read_text(encoding="utf-8"))
    ops = [op for s in data["sections"] if s["kind"] == "derivations"
           for ph in s["phases"] for op in ph["ops"]]
    assert any(op.get("simplified") is False for op in ops)
    assert any(op.get("limit_expired") is True for op in ops)
    assert any(c.get("budget_expired") is True for op in ops for c in op["crossings"])
    for fmt in ("md", "html"):
        text = (tree / "out" / f"study.{fmt}").read_text(encoding="utf-8")
        for said in ("not simplified (size budget)", "limit not found within its size budget",
                     "crossing not found within its size budget"):
            assert said in text, (fmt, said)
    code, out, err, _ = _run("explain", study, "attention")
    assert code == 0, err
    assert "not simplified (size budget)" in out


@pytest.mark.slow
def test_attention_states_a_limit_and_a_crossing_past_their_size_budgets(tree, monkeypatch):
    """Limits and roots past their budgets (factoring still within, so the section runs):
    the attention section says so in JSON, md and html instead of "never"."""
    from rooflinec.base import budget
    from rooflinec.cost import derive
    monkeypatch.setattr(budget, "EXPAND_TERMS", 0)
    monkeypatch.setattr(budget, "ROOT_DEGREE", 0)
    derive._crossing.cache_clear()
    try:
        study = _study(tree, {"attention_intensity": QWEN["analyses"]["attention_intensity"]})
        code, _, err, _ = _run("build", study, "--out", tree / "out", "--quiet")
    finally:
        derive._crossing.cache_clear()
    assert code == 0, err
    data = json.loads((tree / "out" / "study.json").read_text(encoding="utf-8"))
    cases = next(s for s in data["sections"] if s["kind"] == "attention_intensity")["cases"]
    assert all(case.get("limit_expired") is True and case["limit"] is None
               for case in cases if case["depends_on_S"])
    # decode attention never reaches the ridge: its roots ran out of time, the search found none
    assert any(case.get("crossing_over_budget") == ["a100-40gb"] for case in cases)
    for fmt in ("md", "html"):
        text = (tree / "out" / f"study.{fmt}").read_text(encoding="utf-8")
        for said in ("limit not found within its size budget",
                     "crossing not found within its size budget"):
            assert said in text, (fmt, said)


# --- issue 31, round three: deployments the fuzzer found slow or broken --------------------

def test_a_crossing_past_the_exact_bits_is_probed_without_building_the_power():
    """gpt-oss-120b at attention_dp 16: the expert GEMM's intensity holds
    ceil(-128 (31/32)**(16 M)); past budget.EXACT_BITS a probe at M = 2**40 once built
    (31/32)**(2**44) exactly inside sympy's evalf of the ceiling (minutes). Each such power is
    now its value to budget.EXACT_DIGITS digits first: 16 M log2(32/31) = 8.06e11 bits below 1,
    so 2.5e-242566065905, and the ceiling of -128 times it is 0."""
    from rooflinec.cost import piecewise
    m = sp.Symbol("M", positive=True)
    den = 6266880 * m + 16588800 * sp.ceiling(-128 * sp.Rational(31, 32) ** (16 * m)) + 2123366400
    start = time.process_time()
    assert piecewise.at_least(1062420480 * m, den, m, 2 ** 40, 169) is True   # the limit is 169.5
    assert piecewise.at_least(1062420480 * m, den, m, 2 ** 40, 170) is False
    assert piecewise.value_at(den, {m: 2 ** 40}) == 6266880 * 2 ** 40 + 2123366400
    assert time.process_time() - start < 1.0


@pytest.mark.slow
def test_an_moe_model_at_attention_dp_16_derives_within_its_budget(tree):
    study = _write(tree / "study.yaml", {"model": "gpt-oss-120b", "devices": ["h100-sxm"],
                                         "parallel": {"attention_dp": 16},
                                         "analyses": {"derivations": {"phases": ["decode"]}}})
    code, _, err, took = _run("build", study, "--out", tree / "out", "--format", "json", "-q")
    assert code == 0, err
    assert took < 10, f"{took:.1f} s"


def test_a_formula_in_one_over_b_leaves_the_calibrated_answer_unpredicted(tree):
    """The summary's calibrated prediction at batch 1 steps with no decoding sequence (B = 0)
    while the first prompt prefills; B**(-16) there divided by zero (a traceback)."""
    from rooflinec.serving import serving_model
    from rooflinec.spec import load as spec
    _operator(tree, "B**(-16)*d_model + d_model", "2*d_model + B**(-16)*d_model")
    model = spec.load_model(str(tree / "models" / "qwen2.5-7b.yaml"))
    device = spec.load_hardware(str(tree / "hardware" / "h100-sxm.yaml"))
    run = serving_model.Run(model, device, "bf16", 1, 2048, 4096, 1)
    with pytest.raises(serving_model.Unpredictable, match="divides by zero"):
        serving_model.costs(run)


def test_a_declared_op_of_degree_two_in_the_split_widths_refuses_tensor_parallelism(tree):
    """The fuzzer's llama-3.1-70b with FLOPs d_model**16 V**16 d_ff**16 at tp 2: each width
    splits 1/tp, so tp devices held 1/2**31 of the op and parallel_view printed duplicated
    FLOPs of -3.7e217 (-100%). A term of degree 2 or more in n_q, n_kv, d_ff, V is refused."""
    from rooflinec.cost import parallel
    from rooflinec.model.symbols import V, d_ff, d_model, n_q
    assert parallel._sharded_degree(d_model ** 16 * V ** 16 * d_ff ** 16) == 32
    assert parallel._sharded_degree(2 * V * d_model + d_ff * d_model ** 3 + sp.Max(V, 4096)) == 1
    assert parallel._sharded_degree(n_q * d_ff) == 2
    _operator(tree, "2*M*d_model*V*d_ff")
    study = _study(tree, {"parallel_view": {"tp": [1, 2], "workloads": [{"batch": 1, "context": 4096}]}},
                   devices=["h100-sxm"])
    _refused(study, "parallel_view.tp[1]", "declared operator 'padded' cannot be split 2 ways",
             "FLOPs are of degree 2")


def test_a_min_or_max_of_high_degree_is_not_expanded():
    """The fuzzer's seed 1 case 1988 (12.8 s CPU): Mixtral at attention_dp 8, ep 8 with a
    declared op of FLOPs max((B+S+1)**16, (M+3)**16); the HTML calculator's step terms were
    expanded, rebuilding each max with sympy comparing 153-term arguments. Past degree 8 in
    a min or max argument the terms stay as written (the same values): 1.6 s."""
    from rooflinec.base import budget
    from rooflinec.model.symbols import B, M, S
    assert not budget.may_expand(2 * sp.Max((B + S + 1) ** 16, (M + 3) ** 16) + B)
    assert budget.may_expand(sp.Max(4096, 2048 * B) * (B + S) ** 2 + sp.Min(128, S))


@pytest.mark.slow
def test_mixtral_at_ep_8_with_a_max_of_degree_16_builds_within_its_budget(tree):
    path = tree / "models" / "mixtral-8x7b.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["operators"] = [{"name": "fuzzed_op", "unit": "vector", "flops": "max((B+S+1)**16, (M+3)**16)",
                          "bytes": "2*d_model + max((B+S+1)**16, (M+3)**16)"}]
    _write(path, data)
    work = [{"batch": 1, "context": 4096}, {"batch": 64, "context": 4096}]
    study = _write(tree / "study.yaml", {"model": "mixtral-8x7b", "devices": ["h100-sxm", "h200-sxm"],
                                         "parallel": {"attention_dp": 8, "ep": 8}, "analyses": {
                                             "parallel_view": {"tp": [1, 2, 4, 8], "workloads": work}}})
    code, _, err, took = _run("build", study, "--out", tree / "out", "--format", "json", "-q")
    assert code == 0, err
    assert took < 10, f"{took:.1f} s"
