"""The accelerator catalog (peaks and bandwidths from each vendor's datasheet, cited in
specs/hardware/) and the operator catalog, from the built reports; and studies without a
model."""

from __future__ import annotations

import shutil

import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from rooflinec.cli import report
from rooflinec.spec import load as spec
from rooflinec.model.ir import intensity
from rooflinec.model.ops import FORMULAS
from rooflinec.model.symbols import b


@pytest.fixture(scope="module")
def devices() -> dict:
    rep = report.build(spec.load_study("specs/accelerators.yaml"))
    section = rep["sections"][0]
    return {"rows": {r["key"]: r for r in section["rows"]},
            "pairs": {(p["from"], p["to"]): p for p in section["pairs"]}}


@pytest.fixture(scope="module")
def operators() -> dict:
    rep = report.build(spec.load_study("specs/operators.yaml"))
    return {r["label"]: r for r in rep["sections"][0]["rows"]}


# --- ridge points -------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "tensor", "vector"), [
    ("v100-sxm2", 138.9, 17.44),   # 125e12 / 900e9 = 138.9; 15.7e12 / 900e9 = 17.44
    ("a100-40gb", 200.6, 12.54),   # 312e12 / 1555e9 = 200.6; 19.5e12 / 1555e9 = 12.54
    ("h100-sxm", 295.3, 20.00),    # 989.4e12 / 3350e9 = 295.3; 67e12 / 3350e9 = 20.00
])
def test_ridges(devices, key, tensor, vector):
    row = devices["rows"][key]
    assert round(row["ridge_tensor"], 1) == tensor
    assert round(row["ridge_vector"], 2) == vector


def test_v100_to_h100_compute_grew_7_9x_and_bandwidth_3_7x(devices):
    # 989.4 / 125 = 7.915; 3350 / 900 = 3.722: the ridge rose from 139 to 295
    pair = devices["pairs"][("v100-sxm2", "h100-sxm")]
    assert (round(pair["compute"], 1), round(pair["bandwidth"], 1)) == (7.9, 3.7)
    assert (round(pair["ridge_from"]), round(pair["ridge_to"])) == (139, 295)


def test_a100_vector_peak_is_a_sixteenth_and_its_sram_a_2023rd_of_memory(devices):
    row = devices["rows"]["a100-40gb"]
    assert round(1 / row["vector_over_tensor"]) == 16          # 312 / 19.5 = 16
    assert row["sram_total"] == 108 * 192 * 1024               # 20.25 MiB
    assert row["sram_total"] / 2**20 == 20.25
    assert round(row["capacity_over_sram"]) == 2023            # 40 GiB / 20.25 MiB = 2022.7


# --- operator intensities on the A100 -------------------------------------------------------

def _point(operators, label, **args) -> dict:
    return next(p for p in operators[label]["points"] if all(p["args"][k] == v for k, v in args.items()))


@given(st.integers(1, 10**6))
def test_square_matmul_intensity_is_n_over_3(n):
    # 2n^3 FLOPs over 3n^2 elements of 2 bytes: 2n^3 / (6n^2) = n/3
    cost = FORMULAS["gemm"](n, n, n, 2)
    assert cost.flops / cost.bytes == sp.Rational(n, 3)


def test_square_matmul_law_is_shown_symbolically(operators):
    m = sp.Symbol("m", positive=True, integer=True)
    assert operators["square matmul"]["intensity"] == 2 * m / (3 * b)


@pytest.mark.parametrize(("n", "value", "fraction"), [
    (64, 21.33, 10.6),     # 64/3 = 21.33; 21.33 * 1555e9 / 312e12 = 10.6% of peak
    (512, 170.7, 85.1),    # 512/3 = 170.7 -> 85.1%
])
def test_square_matmuls_below_the_ridge(operators, n, value, fraction):
    p = _point(operators, "square matmul", m=n)
    assert round(p["intensity"], 2 if n == 64 else 1) == value
    assert round(100 * p["devices"][0]["attainable"], 1) == fraction


def test_gpt3_mlp_at_one_token_is_intensity_1_and_half_a_percent_of_peak(operators):
    # 2*12288*49152 / (2*(12288 + 12288*49152 + 49152)) = 0.9999 -> 0.9999 * 1555e9 / 312e12 = 0.50%
    p = _point(operators, "GPT-3 MLP up-projection (1 token = decode)", m=1)
    assert round(p["intensity"], 1) == 1.0
    assert round(100 * p["devices"][0]["attainable"], 1) == 0.5
    big = _point(operators, "GPT-3 MLP up-projection (1 token = decode)", m=2048)
    assert round(big["intensity"]) == 1695 and big["devices"][0]["bound"] == "compute"


@pytest.mark.parametrize(("label", "value"), [
    ("bias add (2048 tokens x 12288)", 0.25),   # 1 FLOP per 2 elements of 2 B (+ the bias row)
    ("GELU (tanh form)", 2.0),                  # 8 FLOPs per 2 elements of 2 B
    ("LayerNorm", 2.0),                         # 8 FLOPs per 2 elements of 2 B (+ gain, shift)
    ("softmax over N x N scores", 1.25),        # 5 FLOPs per 2 elements of 2 B
])
def test_vector_ops_are_far_below_the_ridge(operators, label, value):
    p = operators[label]["points"][0]
    assert round(p["intensity"], 2) == value
    assert p["devices"][0]["bound"] == "memory"


@pytest.mark.parametrize(("d", "value"), [(64, 60.24), (128, 113.8)])
def test_one_head_qk_is_memory_bound(operators, d, value):
    # 2*2048*2048*d / (2*(2*2048*d + 2048^2)): d = 64 -> 60.24, d = 128 -> 113.8
    p = _point(operators, "one head's Q K^T, N = 2048", k=d)
    assert round(p["intensity"], 2 if d == 64 else 1) == value
    assert p["devices"][0]["bound"] == "memory"   # below the A100's ridge of 200.6


# --- studies without a model ------------------------------------------------------------------

def _tree(tmp_path, study: str) -> str:
    (tmp_path / "hardware").mkdir()
    shutil.copy("rooflinec/spec/catalog/hardware/a100-40gb.yaml", tmp_path / "hardware")
    (tmp_path / "study.yaml").write_text(study)
    return str(tmp_path / "study.yaml")


def test_an_analysis_that_needs_a_model_says_so_where_it_is_asked_for(call, tmp_path):
    path = _tree(tmp_path, "devices: [a100-40gb]\nanalyses:\n  ledger:\n    workloads: [{batch: 1, context: 8}]\n")
    code, _, err = call("check", path)
    assert code == 1
    assert f"{path}:3:3: analyses.ledger: analysis 'ledger' needs a model" in err


def test_an_operator_with_a_wrong_argument_is_located(call, tmp_path):
    path = _tree(tmp_path, "devices: [a100-40gb]\nanalyses:\n  operators:\n    ops:\n"
                           "      - {label: x, formula: gemm, args: {m: 1, k: 2, q: 3}}\n")
    code, _, err = call("check", path)
    assert code == 1
    assert "analyses.operators.ops[0].args.q: formula 'gemm' takes no argument 'q'" in err
    assert "analyses.operators.ops[0].args: formula 'gemm' needs argument 'n'" in err


def test_a_vector_op_on_a_device_without_a_vector_peak_is_located(call, tmp_path):
    path = _tree(tmp_path, "devices: [a100-40gb]\nanalyses:\n  operators:\n    ops:\n"
                           "      - {label: x, formula: softmax, args: {rows: 8, cols: 8}}\n")
    hw = tmp_path / "hardware" / "a100-40gb.yaml"
    hw.write_text("\n".join(line for line in hw.read_text().splitlines() if "vector" not in line) + "\n")
    code, _, err = call("check", path)
    assert code == 1 and "Traceback" not in err
    assert "lists no vector peak" in err and "softmax" in err


def test_symbolic_intensity_of_a_formula_cancels_dimensions():
    n = sp.Symbol("n", positive=True)
    assert intensity(FORMULAS["softmax"](n, n, b)) == sp.Rational(5, 2) / b
