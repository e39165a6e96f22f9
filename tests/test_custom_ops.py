"""User-declared operators: declared in a model spec, placed by lowering,
and shown in ledgers, derivations, explain, sweeps and the reports like a built-in op."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rooflinec.model import lower_custom
from rooflinec.cost import sweep as sw
from rooflinec.base.errors import SpecError
from rooflinec.cost.workbench import Workbench
from rooflinec.spec.load import load_model, load_study
from rooflinec.model.symbols import B, S, dimension

ROOT = Path(__file__).resolve().parent.parent

# GPT-2 medium's shape with a MoE router: every token scores n_experts experts.
MOE = """\
name: Tiny MoE
d_model: 1024
n_layers: 24
vocab: 50257
attention: {n_heads: 16, head_dim: 64}
mlp: {kind: gelu, d_ff: 4096}
source: test model
dimensions: {n_experts: 8}
operators:
  - name: router
    category: linear
    unit: matrix
    after: mlp_norm
    flops: 2*M*d_model*n_experts
    bytes: {weights: d_model*n_experts*b, activations: M*(d_model + n_experts)*b}
    crossing: M
  - name: router_topk
    runs: once
    flops: 0
    bytes: 4*B
"""

STUDY = """\
title: MoE router
model: moe
devices: [a100-40gb]
dtype: bf16
analyses:
  ledger:
    phases: [decode]
    variants: [unfused, flash]
    workloads: [{batch: 4, context: 1024}]
  derivations: {phases: [decode], variant: flash}
  sweep: {phase: decode, batch: [1, 4], context: [1024], variant: [unfused]}
"""


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "specs"
    shutil.copytree(ROOT / "rooflinec" / "spec" / "catalog" / "hardware", root / "hardware")
    (root / "models").mkdir()
    (root / "models" / "moe.yaml").write_text(MOE)
    (root / "moe.yaml").write_text(STUDY)
    return root


def model_problems(tree: Path, old: str, new: str) -> list[str]:
    text = MOE.replace(old, new, 1)
    assert text != MOE, old
    (tree / "models" / "moe.yaml").write_text(text)
    with pytest.raises(SpecError) as info:
        load_model(str(tree / "models" / "moe.yaml"))
    return [str(p) for p in info.value.problems]


# --- placement and numbers -------------------------------------------------------------

def test_router_is_placed_after_its_op_and_topk_at_the_end(tree):
    ctx = Workbench(load_study(str(tree / "moe.yaml")))
    names = [op.name for op in ctx.program("decode").ops]
    assert names[names.index("mlp_norm") + 1] == "router"
    assert names[-1] == "router_topk"
    # never fused away: present in every variant
    for variant in ("fused", "flash"):
        assert "router" in [op.name for op in ctx.program("decode", variant, ctx.devices[0]).ops]


def test_router_row_uses_the_declared_dimension(tree):
    study = load_study(str(tree / "moe.yaml"))
    ctx = Workbench(study)
    led = ctx.ledger(ctx.program("decode"), study.devices[0], {B: 4, S: 1024})
    row = next(r for r in led.rows if r.op.name == "router")
    # decode M = B = 4; per layer 2 * 4 * 1024 * 8 = 65,536 FLOPs; x 24 layers = 1,572,864
    assert row.flops == 1_572_864
    # weights 1024 * 8 * 2 = 16,384 B; activations 4 * (1024 + 8) * 2 = 8,256 B; x 24
    assert row.traffic == {"weights": 393_216, "activations": 198_144}
    assert row.op.unit == "matrix" and row.op.category == "linear"


def test_sweep_gives_the_extra_symbol_its_value(tree):
    study = load_study(str(tree / "moe.yaml"))
    ctx = Workbench(study)
    program = ctx.program("decode")
    kernel = sw.compile_program(program, given=(B, S))
    assert dimension("n_experts") in kernel.args
    totals = sw.run(kernel, ctx, {B: [4], S: [1024]}, study.devices, "bf16")
    led = ctx.ledger(program, study.devices[0], {B: 4, S: 1024})
    assert totals["a100-40gb"].flops[0, 0] == pytest.approx(led.flops, rel=1e-12)
    assert totals["a100-40gb"].bytes[0, 0] == pytest.approx(led.bytes, rel=1e-12)


@pytest.mark.slow
def test_declared_op_in_json_markdown_and_explain(call, tree, tmp_path):
    code, _, err = call("build", str(tree / "moe.yaml"), "--out", str(tmp_path), "--format", "md,json")
    assert code == 0, err
    rep = json.loads((tmp_path / "moe.json").read_text())
    ledger_section = next(s for s in rep["sections"] if s["kind"] == "ledger")
    rows = {r["op"]: r for r in ledger_section["blocks"][0]["ledgers"][0]["rows"]}
    assert rows["router"]["symbolic"]["flops"] == "2*M*d_model*n_experts"
    assert rows["router"]["formula"] == lower_custom.FORMULA
    derivation = next(s for s in rep["sections"] if s["kind"] == "derivations")
    router = next(o for o in derivation["phases"][0]["ops"] if o["op"] == "router")
    assert router["depends_on"] == ["M", "b", "d_model", "n_experts"]
    # intensity 2*M*d_model*n_experts / ((d_model*n_experts + M*(d_model + n_experts)) * b):
    # at d_model = 1024, n_experts = 8, b = 2 it tends to 8192 / 1032 = 7.94 < ridge 200.6
    assert router["crossings"][0]["at"] is None
    assert {"name": "n_experts", "meaning": "declared by the model spec", "value": 8} in rep["symbols"]
    md = (tmp_path / "moe.md").read_text()
    assert "| `n_experts` | declared by the model spec (= 8) |" in md
    assert "| router | linear | matrix |" in md
    assert "Operators declared by the model spec: router, router_topk. Its own dimensions: n_experts = 8." in md
    code, out, err = call("explain", str(tree / "moe.yaml"), "router")
    assert code == 0, err
    assert "FLOPs      2·M·d_model·n_experts" in out
    assert "depends on M, b, d_model, n_experts" in out


def test_qwen_rope_in_the_shipped_study():
    """RoPE, built in for `positions: rope`: 3 FLOPs per element of q and k (ops.vector.rope)."""
    rep = json.loads((ROOT / "reports" / "qwen.json").read_text())
    ledger_section = next(s for s in rep["sections"] if s["kind"] == "ledger")
    decode = ledger_section["blocks"][0]["ledgers"][0]
    assert decode["phase"] == "decode" and decode["workload"] == {"B": 1, "S": 4096}
    rope = next(r for r in decode["rows"] if r["op"] == "rope")
    # 3 * 1 * (28 + 4) * 128 = 12,288 FLOPs per layer; x 28 layers = 344,064
    assert rope["flops"] == 344_064
    # (2 * (28 + 4) + 2) * 1 * 128 * 2 = 16,896 B per layer; x 28 = 473,088
    assert rope["bytes"] == 473_088


# --- located problems ------------------------------------------------------------------

def test_formula_error_points_at_the_character(tree):
    found = model_problems(tree, "flops: 2*M*d_model*n_experts", "flops: 2*M*d_model*n_expert")
    f = tree / "models" / "moe.yaml"
    # the value starts at column 12 of line 14; 'n_expert' is its 13th character: 12 + 13 - 1
    assert len(found) == 1 and found[0].startswith(f"{f}:14:24: operators[0].flops: unknown name "
                                                   "'n_expert'; did you mean 'n_experts'?")


def test_formula_error_in_a_quoted_value_points_at_the_value(tree):
    found = model_problems(tree, "flops: 2*M*d_model*n_experts", 'flops: "2*M*d_model.real"')
    assert found == [f"{tree / 'models' / 'moe.yaml'}:14:12: operators[0].flops: attribute access "
                     "('d_model.') is not accepted; a formula may use numbers, the dimension "
                     "symbols, + - * / ** ^, parentheses, and min(), max(), ceil(), floor()"]


def test_formula_error_in_a_traffic_class(tree):
    found = model_problems(tree, "weights: d_model*n_experts*b", "weights: __import__('os')")
    assert len(found) == 1 and ":15:22: operators[0].bytes.weights: names starting with '__'" in found[0]


@pytest.mark.parametrize("old, new, where, fragment", [
    ("{n_experts: 8}", "{d_model: 8}", ":8:14: dimensions.d_model", "'d_model' is a built-in name"),
    ("{n_experts: 8}", "{n-experts: 8}", ":8:14: dimensions.n-experts", "is not a dimension name"),
    ("{n_experts: 8}", "{n_experts: 0}", ":8:25: dimensions.n_experts", "must be >= 1"),
    ("name: router\n", "name: router x\n", ":10:11: operators[0].name", "is not an operator name"),
    ("    flops: 0\n", "    flops: M - 4096\n", ":19:12: operators[1].flops", "may be negative"),
    ("    bytes: 4*B\n", "    bytes: floor(B/128)\n", ":20:12: operators[1].bytes", "may be 0"),
    ("    crossing: M\n", "    crossing: S\n", ":16:15: operators[0].crossing",
     "does not depend on S"),
    ("category: linear", "category: lineaer", ":11:15: operators[0].category",
     "did you mean 'linear'?"),
    ("{weights:", "{scores:", ":15:13: operators[0].bytes.scores", "unknown key 'scores'"),
    ("after: mlp_norm", "after: mlp_norm\n    before: lm_head", ":14:13: operators[0].before",
     "not both"),
])
def test_declaration_problems_are_located(tree, old, new, where, fragment):
    found = model_problems(tree, old, new)
    mine = [p for p in found if f"{tree / 'models' / 'moe.yaml'}{where}: " in p]
    assert len(mine) == 1 and fragment in mine[0], found
    if "n_experts:" in new or "{" not in new:   # else n_experts is undeclared: formulas say so too
        assert len(found) == 1, found


@pytest.mark.parametrize("old, new, where, fragment", [
    ("after: mlp_norm", "after: mlp_nrom", ":13:12: operators[0].after", "no op 'mlp_nrom'"),
    ("name: router\n", "name: lm_head\n", ":10:11: operators[0].name", "built-in op"),
    ("name: router\n", "name: attention\n", ":10:11: operators[0].name", "built-in op"),
])
def test_placement_problems_are_located_through_the_cli(call, tree, old, new, where, fragment):
    (tree / "models" / "moe.yaml").write_text(MOE.replace(old, new, 1))
    code, out, err = call("check", str(tree / "moe.yaml"))
    assert code == 1 and out == ""
    assert f"{tree / 'models' / 'moe.yaml'}{where}: " in err and fragment in err, err
    assert "Traceback" not in err


def test_duplicate_declared_names(tree):
    found = model_problems(tree, "name: router_topk", "name: router")
    assert len(found) == 1 and ":17:11: operators[1].name: operator 'router' is already declared" in found[0]
