"""The issue-2 views after the whole-layer lowering: `derivations` and `decode_view` default
to the flash variant, where decode attention is one kernel whose intensity has S cancel;
and every study-schema property carries a description."""

from __future__ import annotations

import pytest
import sympy as sp

from rooflinec.cli import report
from rooflinec.spec import load as spec, validate
from rooflinec.model.symbols import b, n_kv, n_q


@pytest.fixture(scope="module")
def qwen() -> dict:
    return report.build(spec.load_study("specs/qwen.yaml"))


def _section(rep, kind):
    return next(s for s in rep["sections"] if s["kind"] == kind)


@pytest.mark.slow
def test_decode_attention_is_one_kernel_whose_intensity_loses_S(qwen):
    derivations = _section(qwen, "derivations")
    assert derivations["variant"] == "ideal"   # the default: lower bounds
    decode = next(p for p in derivations["phases"] if p["phase"] == "decode")
    attention = [op for op in decode["ops"] if op["category"] in ("attention", "attention_matmul")]
    assert [op["op"] for op in attention] == ["attention"]
    # 4 B S d n_q FLOPs over 2 B b d (S n_kv + n_q) bytes -> 2 n_q / (b n_kv) as S grows: 7 for Qwen
    assert sp.simplify(attention[0]["limit_S"] - 2 * n_q / (b * n_kv)) == 0


@pytest.mark.slow
def test_prefill_attention_turns_compute_bound_in_the_ideal_variant(qwen):
    # Compulsory traffic: 4·B·S²·d·n_q FLOPs over 2·B·S·b·d·(n_kv + n_q) bytes, so
    # I = 2·S·n_q / (b·(n_kv + n_q)) = 2·S·28 / (2·32) = 0.875·S for Qwen2.5-7B (28 query,
    # 4 KV heads). Ridge: RTX 4090 165.2e12 / 1008e9 = 163.89 -> S >= 187.3 -> 188;
    # A100 312e12 / 1555e9 = 200.64 -> S >= 229.3 -> 230.
    prefill = next(p for p in _section(qwen, "derivations")["phases"] if p["phase"] == "prefill")
    attention = next(op for op in prefill["ops"] if op["op"] == "attention")
    S = sp.Symbol("S", positive=True, integer=True)
    assert sp.simplify(attention["intensity"] - 2 * S * n_q / (b * (n_kv + n_q))) == 0
    assert {c["device"]: c["at"] for c in attention["crossings"]} == {"rtx4090": 188, "a100-40gb": 230}


def test_decode_view_reads_no_score_matrix_in_the_default_variant(qwen):
    view = _section(qwen, "decode_view")
    assert view["variant"] == "ideal"
    assert all(p["score_bytes"] == 0 for p in view["points"])


def _properties(node, path=()):
    if isinstance(node, dict):
        for key, sub in node.get("properties", {}).items():
            yield path + (key,), sub
            yield from _properties(sub, path + (key,))
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                yield from _properties(node[key], path + (key,))


def test_every_study_schema_property_has_a_description():
    missing = [".".join(p) for p, sub in _properties(validate.schema("study")) if "description" not in sub]
    assert missing == []
