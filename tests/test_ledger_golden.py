"""Per-operator ledgers of a GPT-2 medium layer (Radford et al. 2019: d_model 1024, 16 heads,
d_ff 4096) and a GPT-3 175B layer (Brown et al. 2020, table 2.1) on an A100, unfused and then
fused with FlashAttention (Dao et al. 2022, Algorithm 1). Each figure is checked, from the
built report, to the precision the comments state.

The A100 40GB (NVIDIA A100 datasheet and Ampere architecture whitepaper): 312 TFLOP/s bf16
tensor, 19.5 TFLOP/s fp32, 1555 GB/s, 108 SMs x 192 KiB, 2 bytes per element;
op time = max(FLOPs / peak, bytes / bandwidth).
Its conventions are the studies' `qkv: fused` and `bias: in_gemm`.
"""

from __future__ import annotations

import pytest

from rooflinec.cli import report
from rooflinec.spec import load as spec


def _built(path: str) -> dict:
    return report.build(spec.load_study(path))


@pytest.fixture(scope="module")
def gpt2() -> dict:
    return _built("specs/gpt2-medium.yaml")


@pytest.fixture(scope="module")
def gpt3() -> dict:
    return _built("specs/gpt3.yaml")


def _section(rep: dict, kind: str) -> dict:
    return next(s for s in rep["sections"] if s["kind"] == kind)


def _block(rep: dict, scope: str = "layer") -> dict:
    return next(b for b in _section(rep, "ledger")["blocks"] if b["scope"] == scope)


def _ledger(rep: dict, variant: str, scope: str = "layer") -> dict:
    return next(x for x in _block(rep, scope)["ledgers"] if x["variant"] == variant)


def _share(led: dict, name: str, key: str, where: str = "categories") -> float:
    return next(c[key] for c in led[where] if c["name"] == name)


def _row(led: dict, op: str) -> dict:
    return next(r for r in led["rows"] if r["op"] == op)


def _speedup(rep: dict, variant: str = "flash") -> float:
    return next(v["speedup"] for v in _block(rep)["comparison"] if v["variant"] == variant)


# --- GPT-2 medium layer: B = 8, N = 1024, d = 1024, 16 heads of 64 ------------------------

@pytest.mark.slow
def test_gpt2_linear_is_85_percent_of_flops_and_29_percent_of_time(gpt2):
    # QKV 2*8192*1024*3072 + out 2*8192*1024^2 + MLP 2 * 2*8192*1024*4096 = 206.2 GFLOP
    # (plus 9*8192*1024 bias FLOPs) of 242.0 GFLOP: 85.24%; 661 us of 2.279 ms: 29.0%
    led = _ledger(gpt2, "unfused")
    assert round(100 * _share(led, "linear", "flops_share")) == 85
    assert round(100 * _share(led, "linear", "time_share")) == 29


@pytest.mark.slow
def test_gpt2_elementwise_and_softmax_are_half_a_percent_of_flops_and_52_of_time(gpt2):
    # scale + mask + softmax (1 + 1 + 5) * 8*16*1024^2 + GELU 8*8192*4096 + 2 residual adds
    # 8192*1024 each = 1.225 GFLOP of 242.0: 0.506%; their time 1.187 ms of 2.279 ms: 52.1%
    led = _ledger(gpt2, "unfused")
    assert round(100 * _share(led, "elementwise + softmax", "flops_share", "groups"), 1) == 0.5
    assert round(100 * _share(led, "elementwise + softmax", "time_share", "groups")) == 52


@pytest.mark.parametrize("op", ["scale", "causal_mask", "softmax"])
def test_gpt2_each_pass_over_the_score_matrix_is_15_percent_of_time(gpt2, op):
    # each reads and writes 8*16*1024^2 scores * 2 B = 536.9 MB: 345.3 us of 2.279 ms = 15.15%
    assert round(100 * _row(_ledger(gpt2, "unfused"), op)["time_share"]) == 15


def test_gpt2_fusion_and_flash_attention_are_2_7_times_faster(gpt2):
    # 2.279 ms -> 0.8369 ms = 2.724x (the sum of the two terms instead of the max gives 2.27x)
    assert round(_speedup(gpt2), 1) == 2.7


def test_gpt2_attainable_fraction_of_peak_rises_from_34_to_93_percent(gpt2):
    # (242.0e9 / 312e12) / 2.279e-3 = 34.0%; (241.7e9 / 312e12) / 0.8369e-3 = 92.6%
    assert round(100 * _ledger(gpt2, "unfused")["totals"]["attainable"]) == 34
    assert round(100 * _ledger(gpt2, "flash")["totals"]["attainable"]) == 93


def test_gpt2_flash_attention_intensity_is_about_171(gpt2):
    # M = 192 KiB / 2 B = 98304; Bc = ceil(98304 / 256) = 384, Br = min(384, 64) = 64, Tc = 3
    # per head: FLOPs 4*1024^2*64 + 5*1024^2 = 273,678,336
    # traffic 3*1024*64 + 2*1024 + 3*(3*1024*64 + 4*1024) = 800,768 elements = 1,601,536 B
    # 273,678,336 / 1,601,536 = 170.9
    assert round(_row(_ledger(gpt2, "flash"), "attention")["intensity"]) == 171
    detail = _section(gpt2, "ledger")["flash"][0]
    assert (detail["tiles"]["cols"], detail["tiles"]["rows"], detail["tiles"]["col_blocks"]) == (384, 64, 3)
    assert detail["bytes"] == 8 * 16 * 1_601_536


# --- GPT-3 175B layer: B = 1, N = 2048, d = 12288, 96 heads of 128 -------------------------

@pytest.mark.slow
def test_gpt3_linear_is_97_percent_of_flops_and_83_percent_of_time(gpt3):
    led = _ledger(gpt3, "unfused")
    assert round(100 * _share(led, "linear", "flops_share")) == 97
    assert round(100 * _share(led, "linear", "time_share")) == 83


def test_gpt3_fusion_is_only_1_14_times_faster(gpt3):
    # 28.64 ms -> 25.10 ms = 1.141x: a wide model spends its time in the GEMMs
    assert round(_speedup(gpt3), 2) == 1.14


def test_gpt3_flash_attention_intensity_is_about_114(gpt3):
    # Bc = ceil(98304 / 512) = 192, Br = 128, Tc = ceil(2048 / 192) = 11; per head
    # FLOPs 4*2048^2*128 + 5*2048^2 = 2,168,455,168; traffic 3*2048*128 + 2*2048
    # + 11*(3*2048*128 + 4*2048) = 9,531,392 elements = 19,062,784 B -> 113.75
    assert round(_row(_ledger(gpt3, "flash"), "attention")["intensity"]) == 114


# --- the whole model: layers x L plus what runs once -----------------------------------------

@pytest.mark.parametrize("variant", ["unfused", "fused", "flash"])
def test_whole_model_is_L_layers_plus_the_ops_run_once(gpt2, variant):
    layer, model = _ledger(gpt2, variant, "layer"), _ledger(gpt2, variant, "model")
    once = sum(r["flops"] for r in model["rows"] if r["count"] == 1)
    assert model["totals"]["flops"] == pytest.approx(24 * layer["totals"]["flops"] + once, rel=1e-12)


def test_ledger_rows_carry_the_json_contract(gpt2):
    led = _ledger(gpt2, "flash")
    assert {"model", "device", "phase", "variant", "workload", "rows", "totals"} <= led.keys()
    assert led["workload"] == {"B": 8, "S": 1024}
    keys = {"op", "category", "flops", "bytes", "intensity", "bound", "time_s", "flops_share",
            "time_share", "symbolic"}
    assert all(keys <= r.keys() for r in led["rows"])
    assert all(set(r["symbolic"]) == {"flops", "bytes", "intensity"} for r in led["rows"])
