"""The simulator's step cost for a mixture of experts: the routed experts' rows and distinct
experts per step, exactly in NumPy (prediction: uniform routing; bound: what any routing must
read), under tensor parallelism and under attention DP with expert parallelism."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rooflinec.serving import engines, rows, simulator, workload, stepcost as sc
from rooflinec.spec import load as spec

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "rooflinec/spec/catalog"
MIXTRAL = spec.load_model(str(CATALOG / "models/mixtral-8x7b.yaml"))
DEEPSEEK = spec.load_model(str(CATALOG / "models/deepseek-v3.yaml"))
H100 = spec.load_hardware(str(CATALOG / "hardware/h100-sxm.yaml"))
H200 = spec.load_hardware(str(CATALOG / "hardware/h200-sxm.yaml"))
PREDICTING = sc.Parameters(0.8, 0.6, 1e-6, 1e-4, 1e-6, 1e-6, 0.0)


def decode_rows(batches, context=1024) -> np.ndarray:
    x = np.zeros((len(batches), len(sc.FEATURES)))
    b = np.asarray(batches, float)
    x[:, sc.ONE], x[:, sc.TOKENS], x[:, sc.LOGITS], x[:, sc.DECODES], x[:, sc.CONTEXT] = 1, b, b, b, b * context
    return x


@pytest.fixture(scope="module")
def mixtral_tp2():
    return sc.build(sc.Deployment(MIXTRAL, H100, 2, "bf16", "bf16"))


def test_the_busiest_expert_rank_by_pigeonhole_and_by_uniform_routing():
    # Mixtral's 8 experts, top 2, at 4 attention-DP ranks x 3 tokens over 4 expert ranks of 2
    # experts each: 24 routings, so some rank serves >= 6 and, a token reaching an expert at
    # most once, reads >= ceil(2/4) = 1 expert; uniform routing: 1.5 x the mean 6 rows, D(12)/4
    # experts with D(n) = 8 (1 - (3/4)^n). Routed asks the deployment (`Deployment.busiest`).
    dep = sc.Deployment(MIXTRAL, H100, 1, attention_dp=4, moe_ep=4, imbalance=1.5)
    r = sc.Routed(np.ones(1), np.ones(1), np.ones(1), dep, np.array([1e-3, 1e-4]))
    tokens = np.array([0.0, 3.0])
    (rows_b, experts_b), (rows_p, experts_p) = dep.busiest(tokens, True), dep.busiest(tokens, False)
    assert list(rows_b) == [0, 6] and list(rows_p) == [0, 9]
    assert list(experts_b) == [0, 1]
    assert experts_p[1] == pytest.approx(min(2, 8 * (1 - 0.75 ** 12) / 4))
    x = np.zeros((1, len(sc.FEATURES)))
    x[0, sc.TOKENS] = 3
    # per kernel max(rows x 1 s, rows x 1 s + experts x 1 s); the all-to-alls only predicted
    assert r.seconds(x, sc.BOUND)[0] == 6 + 1
    assert r.seconds(x, sc.Parameters())[0] == 6 + 1      # BOUND's values are the bound
    half = sc.Parameters(0.5, 0.5)
    assert r.seconds(x, half)[0] == pytest.approx((9 + experts_p[1]) / 0.5 + 1e-3 + 3e-4)


@pytest.mark.slow
def test_mixtral_routed_experts_per_step(mixtral_tp2):
    # Mixtral-8x7B (mistralai/Mixtral-8x7B-v0.1 config.json): 32 layers, d_model 4096, experts
    # of width 14336 (gate, up, down), 8 experts, top 2. At tp 2 one device holds half of each
    # expert: 3 x 4096 x 14336 x 2 B / 2 = 176,160,768 B per expert per layer, x 32 layers.
    r = mixtral_tp2.routed
    assert r.expert_memory.sum() * H100.bandwidth == pytest.approx(32 * 3 * 4096 * 14336 * 2 / 2)
    tokens = np.array([1.0, 8.0, 64.0])
    # prediction: uniform routing reads 8 (1 - (1 - 2/8)^M) distinct experts (exactly 2 at M = 1)
    assert r.deployment.busiest(tokens, False)[1] == pytest.approx(8 * (1 - 0.75 ** tokens))
    # bound: every token may route to the same 2 experts
    assert list(r.deployment.busiest(tokens, True)[1]) == [2, 2, 2]
    assert list(r.deployment.busiest(tokens, True)[0]) == list(r.deployment.busiest(tokens, False)[0]) == [2, 16, 128]   # M k rows at ep 1
    x = decode_rows([1, 8, 64])
    bound, predicted = mixtral_tp2.durations(x, sc.BOUND), mixtral_tp2.durations(x, PREDICTING)
    assert bound[0] == pytest.approx(mixtral_tp2.durations(x[:1], sc.Parameters(1, 1, 0, 0, 0, 0, 0))[0])
    assert np.all(bound <= predicted) and np.all(np.diff(predicted) > 0)


@pytest.mark.slow
def test_deepseek_attention_dp8_ep8_busiest_rank_and_all_to_alls():
    # DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json): 61 layers, the first 3 dense, so 58 MoE
    # layers; 256 routed experts, top 8; d_model 7168. Attention DP 8 x EP 8 on 8 H200s: 32
    # experts per device.
    dep = sc.Deployment(DEEPSEEK, H200, 1, "fp8", "fp8", attention_dp=8, moe_ep=8)
    r = sc.build(dep).routed
    tokens = np.array([64.0])
    # 8 ranks x 64 tokens x 8 routings = 4,096 rows over 8 expert ranks: >= 512 on the busiest
    assert dep.busiest(tokens, True)[0][0] == 512 and dep.busiest(tokens, False)[0][0] == 512 * dep.imbalance
    assert dep.busiest(tokens, True)[1][0] == 1     # ceil(k / ep): a token reaches an expert at most once
    assert dep.busiest(tokens, False)[1][0] == pytest.approx(256 * (1 - (1 - 8 / 256) ** 512) / 8)
    # each device sends its tokens' 8 rows of 7168 bf16 values, 7/8 of them off the device, in
    # each of 2 all-to-alls per MoE layer over NVLink (450 GB/s, 0.47 us per collective)
    per_token = 2 * 58 * 8 * 7168 * 2 * 7 / 8 / 450e9
    assert r.all_to_all_s[1] == pytest.approx(per_token)
    assert r.all_to_all_s[0] == pytest.approx(2 * 58 * 0.47e-6)
    x = decode_rows([64])
    assert r.seconds(x, sc.BOUND)[0] < r.seconds(x, PREDICTING)[0]   # the bound moves no tokens


@pytest.mark.slow
def test_simulate_a_mixture_of_experts(call):
    args = ("simulate", "mixtral-8x7b", "--device", "h100-sxm", "--tp", "2", "--engine", "vllm",
            "--isl", "128", "--osl", "8", "--concurrency", "2", "--requests", "4", "--warmup", "0", "--json")
    code, out, err = call(*args)
    assert code == 0, err
    code, low, err = call(*args, "--bound")
    assert code == 0, err
    got, lo = json.loads(out), json.loads(low)
    for what in ("ttft_s", "tpot_s"):
        assert 0 < lo[what]["mean"] <= got[what]["mean"] and math.isfinite(got[what]["mean"])


def test_attention_runs_at_its_operands_format_never_4_bit_weights():
    # B200 (catalog, NVIDIA datasheet): dense fp4 9, fp8 4.5, bf16 2.25 PFLOP/s
    b200 = spec.load_hardware(str(CATALOG / "hardware/b200.yaml"))
    qwen = spec.load_model(str(CATALOG / "models/qwen3-32b.yaml"))
    peak = lambda w, kv: sc.attention_peak(sc.Deployment(qwen, b200, 1, w, kv))   # noqa: E731
    assert peak("nvfp4", rows.kv_format("nvfp4")) == b200.peak("matrix", "fp8") == 4.5e15
    assert peak("nvfp4", "nvfp4") == b200.peak("matrix", "bf16") == 2.25e15
    assert peak("fp8", rows.kv_format("fp8")) == 4.5e15 and rows.kv_format("bf16") == "bf16"


@pytest.mark.slow
def test_simulate_one_attention_dp_rank_of_an_expert_parallel_deployment(call):
    args = ("simulate", "deepseek-v3", "--device", "h200-sxm", "--weights", "fp8", "--attention-dp", "8",
            "--ep", "8", "--engine", "sglang", "--isl", "128", "--osl", "4", "--concurrency", "16",
            "--requests", "16", "--warmup", "0", "--json")
    code, out, err = call(*args)
    assert code == 0, err
    got = json.loads(out)
    assert (got["attention_dp"], got["ep"]) == (8, 8) and "closed loop of 2 clients" in got["workload"]
    code, low, err = call(*args, "--bound")
    assert code == 0, err
    assert json.loads(low)["tpot_s"]["mean"] <= got["tpot_s"]["mean"]
    code, _, err = call(*args[:-7], "--concurrency", "12", "--json")
    assert code == 2 and "--attention-dp: 8 ranks do not split --concurrency 12 evenly" in err


@pytest.mark.slow
def test_a_moe_schedule_retimed_is_the_simulation(mixtral_tp2):
    """Calibration re-times a recorded schedule (simulator.Retimer); with routed experts, whose
    cost is not affine, it must still give the simulation's own means."""
    policy, work = engines.load("vllm"), workload.benchmark(4, 256, 16)
    res = simulator.simulate(mixtral_tp2, policy, work, PREDICTING)
    m = res.measured
    ttft = float(np.mean(res.first_s[m] - res.arrival_s[m]))
    tpot = float(np.mean((res.finish_s[m] - res.first_s[m]) / (res.osl[m] - 1)))
    sched = simulator.schedule(mixtral_tp2, policy, work).schedule
    got = simulator.Pool([simulator.Retimer(mixtral_tp2, sched, m, res.osl)]).means(PREDICTING)[0]
    assert tuple(got) == pytest.approx((ttft, tpot), rel=1e-9)
    assert simulator.retimed_means(mixtral_tp2, sched, m, res.osl, PREDICTING) == pytest.approx((ttft, tpot), rel=1e-9)


def test_a_windowed_model_is_refused_with_the_reason_not_a_traceback(call):
    """Gemma 2's sliding layers read min(S, 4096) keys per sequence: not affine in the step's
    summed context, so `simulate` says so and exits 1 (it raised sympy's PolynomialError)."""
    code, out, err = call("simulate", "gemma-2-9b", "--device", "h200-sxm", "--engine", "vllm",
                          "--isl", "1024", "--osl", "64", "--concurrency", "8")
    assert code == 1 and "Min(4096, S) is not affine" in err and "Traceback" not in err
