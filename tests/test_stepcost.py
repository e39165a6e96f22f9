"""The simulator's step cost for a mixture of experts: the routed experts' rows and distinct
experts per step, exactly in NumPy (prediction: uniform routing; bound: what any routing must
read), under tensor parallelism and under attention DP with expert parallelism."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rooflinec.serving import engines, metrics, rows, simulator, workload, stepcost as sc
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
    # the experts' own bandwidth fraction multiplies the step's on their reads only: memory
    # (9 + experts) / (0.5 x 0.5) now exceeds compute 9 / 0.5
    slow = sc.Parameters(0.5, 0.5, expert_bandwidth_fraction=0.5)
    assert r.seconds(x, slow)[0] == pytest.approx((9 + experts_p[1]) / 0.25 + 1e-3 + 3e-4)


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


@pytest.mark.slow
def test_a_windowed_model_simulates_and_speculation_on_it_is_refused_with_the_reason(call):
    """Gemma 2's sliding layers read min(S, 4096) keys per sequence (the window_ features):
    `simulate` runs it; a speculative draft's linear map of the features cannot carry the
    minimum, so speculation on it is refused with the reason, exit 1, no traceback."""
    argv = ["simulate", "gemma-2-9b", "--device", "h200-sxm", "--engine", "vllm", "--isl", "1024", "--osl", "64",
            "--concurrency", "8"]
    code, out, err = call(*argv)
    assert code == 0 and "TPOT" in out, err
    code, out, err = call(*argv, "--speculate", "ngram:k=4,alpha=0.5")
    assert code == 1 and "windowed layers" in err and "Traceback" not in err


# --- windowed layers: min(context, W) keys per sequence ------------------------------------

GEMMA = spec.load_model(str(CATALOG / "models/gemma-2-9b.yaml"))
GPT_OSS = spec.load_model(str(CATALOG / "models/gpt-oss-120b.yaml"))


@pytest.fixture(scope="module")
def gemma():
    return sc.build(sc.Deployment(GEMMA, H100, 1, "bf16", "bf16"))


def _program_s(dep, phase, b, s, tokens):
    """The lowered program of `phase` at B = b, S = s evaluated op by op (program_costs.op_costs,
    the workbench's scalar evaluation), each op's roofline at the peaks stepcost prices it on."""
    from rooflinec.cost import program_costs
    from rooflinec.model.symbols import B, S
    matrix, attention = H100.peak("matrix", dep.gemm_dtype), sc.attention_peak(dep)
    total = 0.0
    for o in program_costs.op_costs(dep, phase, H100, {B: b, S: s}, tokens=tokens, formats=dep.formats()):
        peak = (attention if o.category == "attention" else matrix) if o.unit == "matrix" else H100.peak("vector", "bf16")
        total += max(o.flops / peak, sum(o.traffic.values()) / H100.bandwidth)
    return total


def _row(window, kvlen=(), chunks=(), logits=None):
    x = np.zeros(len(sc.FEATURES))
    x[sc.ONE] = 1
    prefix, sizes = (np.array([c[i] for c in chunks], np.int64) for i in (0, 1))
    sc.attend(x, window, np.array(kvlen, np.int64), prefix, sizes)
    x[sc.TOKENS] = len(kvlen) + sizes.sum()
    x[sc.LOGITS] = len(kvlen) + len(chunks) if logits is None else logits
    return x


@pytest.mark.parametrize("s", [1000, 4095, 4096, 4097, 9000])
def test_a_windowed_step_costs_what_its_lowered_program_costs(gemma, s):
    """Gemma-2-9B (google/gemma-2-9b config.json: 42 layers alternating a 4,096-token sliding
    window with full attention, layer 0 sliding): 3 decodes at context S, and one prompt of S
    prefilled from position 0, cost at the bound exactly what the decode and prefill programs
    cost at B = 3 (B = 1), S, evaluated op by op: the 21 windowed layers' attention reads
    min(S, 4096) keys per sequence (the window_context feature, 3 min(S, W)), and a prompt's
    windowed attention S K - K^2/2 score pairs at K = min(S, W) (the chunk differences at p = 0),
    below and above W."""
    decode = _row(gemma.window, kvlen=[s - 1] * 3)
    assert decode[sc.WINDOW_CONTEXT] == 3 * min(s, 4096)
    assert gemma.durations(decode[None], sc.BOUND)[0] == pytest.approx(_program_s(gemma.deployment, "decode", 3, s, 3), rel=1e-12)
    prompt = _row(gemma.window, chunks=[(0, s)], logits=1)
    k_ = min(s, 4096)
    assert (prompt[sc.WINDOW_CHUNK_SK], prompt[sc.WINDOW_CHUNK_KK], prompt[sc.WINDOW_CHUNK_KEYS]) == (s * k_, k_ * k_, s)
    assert gemma.durations(prompt[None], sc.BOUND)[0] == pytest.approx(_program_s(gemma.deployment, "prefill", 1, s, None), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("s", [100, 128, 129, 2000])
def test_gpt_oss_decode_at_one_token_is_its_program(s):
    """gpt-oss-120b as it ships (bf16 attention, mxfp4 experts, weight-only bf16 GEMMs on H100;
    36 layers alternating a 128-token window with full attention): one decode at context S is
    the decode program at B = 1 (one token reads exactly k = 4 experts, the bound's count),
    their dequantisation FLOPs per expert read included."""
    dep = sc.Deployment(GPT_OSS, H100, 1, "bf16", "bf16", experts="mxfp4")
    step = sc.build(dep)
    assert step.window == 128 and step.routed.expert_compute.sum() > 0
    x = _row(step.window, kvlen=[s - 1])
    assert step.durations(x[None], sc.BOUND)[0] == pytest.approx(_program_s(dep, "decode", 1, s, 1), rel=1e-12)


@given(p=st.integers(0, 40), c=st.integers(1, 40), q=st.integers(1, 40), w=st.integers(1, 12))
@settings(max_examples=25, deadline=None)
def test_windowed_chunk_features_are_the_keys_each_query_sees(p, c, q, w):
    """A chunk of c queries after p tokens in a window of w: each query i sees min(p + i + 1, w)
    keys; summed, that is the causal count S K - K^2/2 differenced (f(p + c) - f(p), the
    prefill program's convention) plus the diagonal's half (K(p+c) - K(p)) / 2, counted here by
    brute force. The chunk reads the union of its queries' windows, and chunks telescope: a
    prompt in two chunks has the pairs of the prompt in one."""
    x = _row(w, chunks=[(p, c)])
    pairs = x[sc.WINDOW_CHUNK_SK] - x[sc.WINDOW_CHUNK_KK] / 2
    assert pairs + (min(p + c, w) - min(p, w)) / 2 == sum(min(p + i + 1, w) for i in range(c))
    union = {j for i in range(c) for j in range(max(0, p + i + 1 - w), p + i + 1)}
    assert x[sc.WINDOW_CHUNK_KEYS] == len(union)
    whole, split = _row(w, chunks=[(0, p + c + q)]), _row(w, chunks=[(0, p + c), (p + c, q)])
    for f in (sc.WINDOW_CHUNK_SK, sc.WINDOW_CHUNK_KK):
        assert whole[f] == split[f]


@given(s=st.integers(1, 12000), more=st.integers(1, 12000), b=st.integers(1, 64))
@settings(max_examples=40, deadline=None)
def test_a_windowed_step_grows_with_context_and_its_windowed_part_stops_at_w(gemma, s, more, b):
    """Cost is non-decreasing in the context; the windowed layers' attention (the local_ kernels)
    costs the same at every context past W = 4096."""
    local = np.array([n.startswith("local_") for n in gemma.names])
    x = np.array([_row(gemma.window, kvlen=[t - 1] * b) for t in (s, s + more)])
    whole = gemma.durations(x, sc.BOUND)
    part = np.maximum(x @ gemma.compute[local].T, x @ gemma.memory[local].T).sum(axis=1)
    assert whole[0] <= whole[1] and part[0] <= part[1]
    if s >= 4096:
        assert part[0] == part[1]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_windowed_schedule_retimes_to_its_simulation(gemma, engine):
    """Contexts cross the window mid-run (isl 3900, osl 400 against W = 4096): runs end where a
    decode's context reaches W, so the closed-form re-timing is exact, and one client's TPOT is
    the mean of its decode steps priced one by one."""
    cal = sc.Parameters(0.8, 0.6, 2e-5, 1e-3, 5e-6, 2e-5)
    work = workload.Workload(workload.Lengths(3900, 3900), workload.Lengths(400, 400), 12, 4, 4, None)
    res = simulator.simulate(gemma, engines.load(engine), work, cal)
    ttft, tpot = simulator.retimed_means(gemma, res.schedule, res.measured, res.osl, cal)
    s = metrics.summary(res, 1)
    assert ttft == pytest.approx(s["ttft_s"]["mean"], rel=1e-9) and tpot == pytest.approx(s["tpot_s"]["mean"], rel=1e-9)
    one = simulator.simulate(gemma, engines.load(engine), workload.benchmark(1, 3900, 400), cal)
    steps = gemma.durations(np.array([_row(gemma.window, kvlen=[3900 + j]) for j in range(399)]), cal)
    assert metrics.summary(one, 1)["tpot_s"]["mean"] == pytest.approx(steps.mean(), rel=1e-9)


@pytest.mark.slow
def test_simulate_gpt_oss(call):
    """The sliding-window MoE simulates as it ships (mxfp4 experts); at bf16 its 117B parameters
    (233.7 GB) leave one H100 no KV cache: a located refusal, no traceback."""
    argv = ["simulate", "gpt-oss-120b", "--device", "h100-sxm", "--engine", "vllm", "--isl", 1024, "--osl", 128,
            "--concurrency", 8]
    code, out, err = call(*argv, "--weights", "experts=mxfp4,attention=bf16", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kind"] == "prediction" and 0 < doc["ttft_s"]["mean"] and 0 < doc["tpot_s"]["mean"] < doc["e2e_s"]["mean"]
    code, _, err = call(*argv)
    assert code == 1 and "no memory for the KV cache" in err and "Traceback" not in err


def test_a_step_launches_its_lowered_programs_kernels():
    """The kernels a step launches: each op of the decode program `repeat` times. Llama-3.1-8B
    (32 layers): per layer attn_norm, qkv_proj, rope, attention, o_proj, mlp_norm, gate_proj,
    up_proj, down_proj (9), once the embedding, final_norm and lm_head: 32 x 9 + 3 = 291.
    Qwen3-235B-A22B (94 layers): per layer attn_norm, qkv_proj, q_norm, k_norm, rope,
    attention, o_proj, mlp_norm, router, router_topk, expert_gate_proj, expert_up_proj,
    expert_down_proj, moe_combine (14): 94 x 14 + 3 = 1319. tp and layout change no count."""
    llama = spec.load_model(str(CATALOG / "models/llama-3.1-8b.yaml"))
    qwen = spec.load_model(str(CATALOG / "models/qwen3-235b-a22b.yaml"))
    assert sc.build(sc.Deployment(llama, H100, 1, "bf16", "bf16")).kernels == 32 * 9 + 3
    assert sc.build(sc.Deployment(llama, H100, 4, "fp8", "fp8")).kernels == 32 * 9 + 3
    assert sc.build(sc.Deployment(qwen, H200, 8, "fp8", "fp8")).kernels == 94 * 14 + 3


@settings(max_examples=30, deadline=None)
@given(st.floats(0, 1e-4), st.integers(1, 256), st.integers(0, 1 << 20))
def test_the_fixed_time_per_kernel_is_the_kernels_times_it(mixtral_tp2, per_kernel, batch, context):
    """host(x) is affine in per_kernel_s with slope `kernels`, and at BOUND (0) adds nothing."""
    x = decode_rows([batch], 1)
    x[0, sc.CONTEXT] = context
    base = sc.Parameters(0.8, 0.6, 1e-6, 1e-4, 1e-6, 1e-6)
    with_k = sc.Parameters(0.8, 0.6, 1e-6, 1e-4, 1e-6, 1e-6, per_kernel_s=per_kernel)
    got = mixtral_tp2.host(x, with_k) - mixtral_tp2.host(x, base)
    assert got[0] == pytest.approx(mixtral_tp2.kernels * per_kernel, rel=1e-9, abs=1e-15)
    assert mixtral_tp2.host(x, sc.BOUND)[0] == 0
