"""The report's symbol table lists every symbol its formulas use, with its meaning and, for a
symbol beyond the alphabet with one value in the study, that value."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from rooflinec.model import mla, moe, quant, window
from rooflinec.cli import report
from rooflinec.spec import load as spec
from rooflinec.model import symbols as sym

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = {s.name for d in (moe.DESCRIPTIONS, mla.DESCRIPTIONS, window.DESCRIPTIONS, quant.DESCRIPTIONS)
          for s in d}
# keys whose strings are sympy expressions (sympy's str form); a params section's `formula` too
FORMULA_KEYS = {"flops", "bytes", "intensity", "per", "per_layer", "limit", "limit_S", "supremum",
                "depends_on", "payload", "volume", "kv_formula", "variable", "M"}
NOT_SYMBOLS = {"oo", "zoo", "nan"}


def committed(stem: str) -> dict:
    # the committed reports are kept fresh by test_reports_fresh
    return json.loads((ROOT / "reports" / f"{stem}.json").read_text())


def table(rep: dict) -> dict:
    return {s["name"]: s for s in rep["symbols"]}


def _strings(x, key=None, kind=None):
    """(key, string, section kind) for every string in `x`."""
    if isinstance(x, dict):
        kind = x.get("kind", kind) if isinstance(x.get("kind"), str) else kind
        for k, v in x.items():
            yield from _strings(v, k, kind)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v, key, kind)
    elif isinstance(x, str):
        yield key, x, kind


def formula_symbols(rep: dict) -> set[str]:
    """Every name a formula of the report's sections prints, functions (Min, Max) left out."""
    names = set()
    for key, text, kind in _strings(rep["sections"]):
        if key in FORMULA_KEYS or (key == "formula" and kind == "params"):
            names |= set(re.findall(r"\b([A-Za-z_]\w*)\b(?!\s*\()", text))
    return names - NOT_SYMBOLS


def test_the_mixtral_report_lists_its_experts_and_top_k_with_their_values():
    # Mixtral-8x7B's config.json: num_local_experts 8, num_experts_per_tok 2, intermediate_size 14336
    rows = table(committed("moe-mixtral"))
    assert (rows["E"]["value"], rows["k"]["value"], rows["d_e"]["value"]) == (8, 2, 14336)
    assert rows["E"]["meaning"] == moe.DESCRIPTIONS[moe.E]
    assert "rho" not in rows and "d_s" not in rows   # uniform routing, no shared experts
    md = (ROOT / "reports" / "moe-mixtral.md").read_text()
    assert "| `E` | routed experts (= 8) |" in md


def test_the_quantization_report_lists_the_storage_symbols():
    rows = table(committed("quantization"))
    assert {"b_w", "b_kv", "f_dq"} <= set(rows)
    # its sweep stores weights at bf16, fp8 and NVFP4: no one value for any of them
    assert not any("value" in rows[n] for n in ("b_w", "b_kv", "f_dq"))
    assert rows["f_dq"]["meaning"] == quant.DESCRIPTIONS[quant.f_dq]


def test_a_dense_bf16_report_lists_the_alphabet_alone():
    names = [s["name"] for s in committed("qwen")["symbols"]]
    assert names == [s.name for s in sym.DESCRIPTIONS]
    assert not BLOCKS & set(names)


@pytest.mark.parametrize("stem", ["qwen", "moe-mixtral", "moe-mixtral-ep", "quantization"])
def test_every_symbol_a_committed_reports_formulas_use_is_in_its_table(stem):
    rep = committed(stem)
    used = formula_symbols(rep)
    assert used, "the walk found no formula"
    assert used <= set(table(rep)), sorted(used - set(table(rep)))


def _study(tmp_path, model: str, quantization: str = "") -> dict:
    text = textwrap.dedent(f"""\
        model: {model}
        devices: [h100-sxm]
        {quantization}
        analyses:
          derivations: {{}}
          ledger: {{workloads: [{{batch: 4, context: 8192}}]}}
        """)
    (tmp_path / "s.yaml").write_text(text)
    return report.build(spec.load_study(str(tmp_path / "s.yaml")))


@pytest.mark.slow
@pytest.mark.parametrize("model, expected, quantization", [
    # DeepSeek-V3's config.json: kv_lora_rank 512, qk_rope_head_dim 64, 256 routed experts of 2048
    ("deepseek-v3", {"r_kv": 512, "d_rope": 64, "E": 256, "k": 8, "d_e": 2048}, ""),
    # gpt-oss-120b's config.json: sliding_window 128; stored as NVFP4 weights under bf16 compute
    ("gpt-oss-120b", {"W": 128, "b_w": 0.5625, "f_dq": 2}, "quantization: {weights: nvfp4}"),
])
def test_mla_window_and_storage_symbols_are_listed_and_cover_the_formulas(tmp_path, model, expected, quantization):
    rep = _study(tmp_path, model, quantization)
    rows = table(rep)
    assert {n: rows[n].get("value") for n in expected} == expected
    used = formula_symbols(rep)
    assert used & set(expected)
    assert used <= set(rows), sorted(used - set(rows))
