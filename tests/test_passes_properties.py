"""Laws of ledgers and passes (hypothesis): shares sum to 1, totals are row sums, no op
beats either roofline term, passes keep FLOPs, fusion never adds bytes, FlashAttention's
traffic falls as SRAM grows; and where Algorithm 1 loses to the unfused attention, the
report says so."""

from __future__ import annotations

import io
import math
import shutil
from functools import cache

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.cli import app as cli
from rooflinec.model import flash
from rooflinec.cost.evaluate import number
from rooflinec.cost.workbench import Workbench
from rooflinec.model.lower import Conventions, lower
from rooflinec.model.ops import FORMULAS
from rooflinec.model.passes import Target, apply
from rooflinec.spec.load import load_hardware, load_model
from rooflinec.model.symbols import B, S

MODELS = ("qwen2.5-7b", "gpt2-medium", "gpt3-175b", "palm-540b")
CONVENTIONS = (Conventions(), Conventions(qkv="fused", bias="in_gemm"),
               Conventions(causal_halving=True, logits="all", bias="in_gemm"))


@cache
def model(key):
    return load_model(f"rooflinec/spec/catalog/models/{key}.yaml")


@cache
def device(key="a100-40gb"):
    return load_hardware(f"rooflinec/spec/catalog/hardware/{key}.yaml")


@cache
def program(key, phase, variant, conv=Conventions(), dev="a100-40gb"):
    m = model(key)
    return apply(lower(m, phase, conv), variant, Target(device(dev), conv, m.head_dim, 2))


workloads = st.fixed_dictionaries({"B": st.integers(1, 64), "S": st.integers(1, 8192)})
cases = st.tuples(st.sampled_from(MODELS), st.sampled_from(("decode", "prefill")),
                  st.sampled_from(("unfused", "fused", "flash", "ideal")), st.sampled_from(("layer", "model")))


def _ledger(case, w):
    key, phase, variant, scope = case
    return Workbench.of(model(key)).ledger(program(key, phase, variant), device(),
                                           {B: w["B"], S: w["S"]}, scope)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(cases, workloads)
def test_shares_sum_to_one_and_totals_are_row_sums(case, w):
    led = _ledger(case, w)
    assert math.isclose(sum(r.flops_share for r in led.rows), 1, rel_tol=1e-9)
    assert math.isclose(sum(r.time_share for r in led.rows), 1, rel_tol=1e-9)
    assert led.flops == sum(r.flops for r in led.rows)
    assert led.bytes == sum(r.bytes for r in led.rows)
    assert led.time == sum(r.roof.time for r in led.rows)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(cases, workloads)
def test_time_is_at_least_each_roofline_term(case, w):
    led = _ledger(case, w)
    for r in led.rows:
        assert r.roof.time >= r.flops / r.unit_peak
        assert r.roof.time >= r.bytes / led.device.bandwidth
    assert led.attainable <= 1 + 1e-12


def _total_flops(p, only=lambda op: True):
    return sp.expand(sum((op.cost.flops * op.repeat for op in p.ops if only(op)), sp.Integer(0)))


@pytest.mark.parametrize("conv", CONVENTIONS)
@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("key", MODELS)
def test_fusion_keeps_every_flop(key, phase, conv):
    assert _total_flops(program(key, phase, "fused", conv)) == _total_flops(program(key, phase, "unfused", conv))


@pytest.mark.parametrize("conv", CONVENTIONS)
@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("key", MODELS)
def test_flash_keeps_every_flop_outside_attention_and_every_contraction(key, phase, conv):
    """The attention kernel's count is the published one (Algorithm 1: 4N^2d + 5N^2 per head
    in prefill; 4 n_q S d in decode): it keeps the QK^T and P.V contractions, and leaves out
    at most the elementwise steps over the scores (scale, mask, and in decode the softmax)."""
    fused, fl = program(key, phase, "fused", conv), program(key, phase, "flash", conv)
    steps = flash.score_ops(program(key, phase, "unfused", conv))
    outside = lambda op: op.cost.bytes_of("scores") == 0 and op.name != "attention"  # noqa: E731
    assert _total_flops(fl, outside) == _total_flops(fused, outside)
    kernel = sp.expand(fl.op("attention").cost.flops)
    contractions = sp.expand(sum(op.cost.flops for op in steps if op.category == "attention_matmul"))
    everything = sp.expand(sum(op.cost.flops for op in steps))
    for s_val in (1, 128, 4096):
        at = Workbench.of(model(key)).at({B: 3, S: s_val}, {})
        assert number(contractions, at) <= number(kernel, at) <= number(everything, at)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(cases, workloads)
def test_ideal_attention_is_a_lower_bound_of_every_variant(case, w):
    """The ideal kernel moves compulsory traffic only, so no variant moves fewer bytes or
    takes less roofline time (flash counts more FLOPs too: its softmax)."""
    key, phase, _, scope = case
    ideal = _ledger((key, phase, "ideal", scope), w)
    for variant in ("unfused", "fused", "flash"):
        other = _ledger((key, phase, variant, scope), w)
        assert ideal.bytes <= other.bytes * (1 + 1e-12)
        assert ideal.time <= other.time * (1 + 1e-12)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(cases, workloads)
def test_fusion_never_adds_bytes(case, w):
    key, phase, _, scope = case
    unfused = _ledger((key, phase, "unfused", scope), w)
    fused = _ledger((key, phase, "fused", scope), w)
    assert fused.bytes <= unfused.bytes


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 16384), st.sampled_from([32, 64, 128, 256]),
       st.integers(1024, 1 << 20), st.integers(1024, 1 << 20))
def test_flash_traffic_falls_as_sram_grows(n, d, small, big):
    small, big = sorted((small, big))
    cost = lambda sram: FORMULAS["flash_attention"](1, 1, n, d, 2, flash.blocks(sram, d).cols).bytes  # noqa: E731
    assert cost(big) <= cost(small)


@pytest.mark.parametrize(("key", "batch", "seq"), [("gpt2-medium", 8, 1024), ("gpt3-175b", 1, 2048)])
def test_flash_traffic_is_below_the_unfused_attention_for_gpt2_and_gpt3_shapes(key, batch, seq):
    at = Workbench.of(model(key)).at({B: batch, S: seq}, {})
    conv = Conventions(qkv="fused", bias="in_gemm")
    kernel = program(key, "prefill", "flash", conv).op("attention").cost.bytes
    unfused = sum(op.cost.bytes for op in flash.score_ops(program(key, "prefill", "unfused", conv)))
    assert number(kernel, at) < number(unfused, at)


@pytest.mark.slow
def test_a_large_head_on_a_small_sram_loses_and_the_report_says_so(tmp_path):
    # PaLM's d_head = 256 on the A100: Bc = ceil(98304 / 1024) = 96, Tc = ceil(2048 / 96) = 22;
    # per head 3*2048*256 + 2*2048 + 22*(3*2048*256 + 4*2048) = 36,360,192 elements, against
    # the unfused 4*2048*256 + 8*2048^2 = 35,651,584: Algorithm 1 re-reads Q and O 22 times
    for sub in ("hardware", "models"):
        (tmp_path / sub).mkdir()
    shutil.copy("rooflinec/spec/catalog/hardware/a100-40gb.yaml", tmp_path / "hardware")
    shutil.copy("rooflinec/spec/catalog/models/palm-540b.yaml", tmp_path / "models")
    (tmp_path / "palm.yaml").write_text(
        "model: palm-540b\ndevices: [a100-40gb]\nanalyses:\n  ledger:\n    phases: [prefill]\n"
        "    variants: [unfused, flash]\n    scopes: [layer]\n    workloads: [{batch: 1, context: 2048}]\n")
    out, err = io.StringIO(), io.StringIO()
    assert cli.run(["build", str(tmp_path / "palm.yaml"), "--out", str(tmp_path), "--format", "md"], out, err) == 0
    text = (tmp_path / "palm.md").read_text()
    assert "the kernel moves more bytes than the unfused attention" in text
    assert "96 × 96 (22)" in text
