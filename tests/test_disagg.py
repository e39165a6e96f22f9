"""Disaggregated prefill and decode (issue 27, item 2; serving/disagg.py): two pools of the
serving simulator, the KV cache of each prompt moved between them over a stated link; TTFT =
queueing + prefill + transfer, TPOT from decode workers that never prefill; rate matching."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from rooflinec.cli.app import run
from rooflinec.serving import disagg, engines, simulator
from rooflinec.serving import stepcost as sc
from rooflinec.serving.workload import benchmark
from rooflinec.spec import catalog
from rooflinec.spec import load as spec

MODEL = spec.load_model(catalog.path("models", "llama-3.1-70b"))
TRTLLM = engines.load("trtllm")


def pools(device: str, prefill=(2, 4), decode=(1, 8), weights="bf16") -> disagg.Pools:
    dev = spec.load_hardware(catalog.path("hardware", device))
    dep = lambda tp: sc.Deployment(MODEL, dev, tp, weights, TRTLLM.kv_dtype())   # noqa: E731
    return disagg.Pools(dep(prefill[1]), dep(decode[1]), prefill[0], decode[0])


def one_prompt_prefill_s(dep: sc.Deployment, isl: int, p: sc.Parameters) -> float:
    """TensorRT-LLM's prefill of one prompt: no chunking, max_num_tokens 8192, so one step of
    ISL tokens with one logit, priced by the step model directly."""
    x = np.zeros(len(sc.FEATURES))
    x[[sc.ONE, sc.TOKENS, sc.LOGITS, sc.CHUNK_SQUARE, sc.CHUNK_TOKENS, sc.CHUNK_KEYS, sc.CHUNKS]] = \
        [1, isl, 1, isl * isl, isl, isl, 1]
    return float(sc.build(dep).durations(x[None], p)[0])


@pytest.mark.parametrize(("device", "transfer_s"), [
    # Llama-3.1-70B KV cache: 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 B (bf16) = 327,680 B per
    # token; a prefill device of tp 4 holds 2 KV heads: 81,920 B; ISL 8192: 671,088,640 B per device
    # (a decode device of tp 8 receives half that). 4 x 2 + 8 = 16 GPUs: more than an HGX H100's 8
    # per NVLink domain, so over one 400 Gb/s ConnectX-7 port (50 GB/s): 671,088,640 / 50e9 =
    # 13.4218 ms + 2.7 us (NCCL's network latency) = 13.42447 ms.
    ("h100-sxm", 671_088_640 / 50e9 + 2.7e-6),
    # GB200 NVL72: 16 of 72 GPUs in one NVLink domain, 900 GB/s per direction:
    # 671,088,640 / 900e9 = 0.745654 ms + 0.47 us.
    ("gb200", 671_088_640 / 900e9 + 0.47e-6),
])
def test_disaggregated_llama_70b_ttft_is_prefill_plus_kv_transfer_at_isl_8192(device, transfer_s):
    """Issue 27's acceptance: prefill tp 4 x 2 workers, decode tp 8 x 1; one client (no queueing)."""
    p = pools(device)
    out = disagg.simulate(p, TRTLLM, 1, 8192, 64, sc.BOUND)
    prefill = one_prompt_prefill_s(p.prefill, 8192, sc.BOUND)
    assert out["transfer_s"] == pytest.approx(transfer_s, rel=1e-12)
    assert out["kv_bytes"] == 8192 * 327_680 / 4
    assert out["decode_wait_s"] == 0 and out["prefill_s"] == pytest.approx(prefill, rel=1e-12)
    # and half a decode step (the KV cache lands mid-step and joins at the next step boundary), and
    # TensorRT-LLM's first generation step (its first token streams with the second); the one
    # client's requests, seen as Poisson arrivals at the prefill ranks, queue a little there
    assert out["step_in_progress_s"] == out["tpot_s"] / 2 and out["first_token_steps"] == 1
    assert out["ttft_s"] == pytest.approx(prefill + out["queueing_s"] + transfer_s + 1.5 * out["tpot_s"], rel=1e-12)
    assert 0 <= out["queueing_s"] < 0.1 * prefill
    # the prefill is at least its GEMMs' FLOPs on 4 H100s (or GB200s): 2 x 69.5e9 non-embedding
    # weights x 8192 tokens / (4 x peak); H100: 1.139e15 / 3.958e15 = 0.288 s
    dense = 2 * 69.5e9 * 8192 / (4 * p.prefill.device.tensor["bf16"])
    assert prefill > dense


def test_the_link_is_stated_nvlink_inside_a_domain_rdma_across():
    assert "RDMA" in disagg.kv_link(pools("h100-sxm")).name                        # 16 > 8
    assert disagg.kv_link(pools("h100-sxm", (1, 4), (1, 4))).bandwidth == 450e9   # 8 of 8: NVLink
    assert "NVLink" in disagg.kv_link(pools("gb200")).name                         # 16 of 72
    assert "RDMA" in disagg.kv_link(pools("gb200", (10, 4), (5, 8))).name          # 80 > 72


def test_decode_workers_never_prefill():
    """The simulator's `prefilled` arrivals: one request decodes OSL - 1 steps at contexts ISL + 1 ..
    ISL + OSL - 1 and nothing else, so its TPOT is the mean of those decode steps."""
    p, isl, osl = pools("h100-sxm"), 8192, 64
    res = simulator.simulate(sc.build(p.decode), TRTLLM, benchmark(1, isl, osl), sc.BOUND, prefilled=True)
    x = np.zeros((osl - 1, len(sc.FEATURES)))
    x[:, [sc.ONE, sc.TOKENS, sc.LOGITS, sc.DECODES]] = 1
    x[:, sc.CONTEXT] = isl + 1 + np.arange(osl - 1)
    steps = sc.build(p.decode).durations(x, sc.BOUND)
    m = res.measured
    assert np.allclose((res.finish_s[m] - res.first_s[m]) / (osl - 1), steps.mean(), rtol=1e-12)
    assert not (res.schedule.x0[:, sc.CHUNKS]).any()          # no step ever scheduled a prompt chunk


@pytest.mark.slow
def test_rate_matching_names_the_pool_that_limits():
    """64 clients with 8K prompts on 2 prefill workers: the prefill pool limits; the balance asks for
    more prefill than decode workers; the decode pool limits when the prompts are short."""
    long = disagg.simulate(pools("h100-sxm"), TRTLLM, 64, 8192, 256, sc.BOUND)
    assert long["limited_by"] == "prefill" and long["balanced_prefill_per_decode"] > 2
    assert long["requests_per_s"] <= long["prefill_capacity_per_s"] * (1 + 1e-9)
    short = disagg.simulate(pools("h100-sxm"), TRTLLM, 64, 256, 256, sc.BOUND)
    assert short["limited_by"] == "decode" and short["balanced_prefill_per_decode"] < 1
    more = disagg.simulate(pools("h100-sxm", (4, 4), (1, 8)), TRTLLM, 64, 8192, 256, sc.BOUND)
    assert more["requests_per_s"] > long["requests_per_s"]    # more prefill workers help where it limits


@pytest.mark.slow
def test_the_bound_stays_below_the_prediction():
    p = pools("h100-sxm")
    lo = disagg.bound(p, TRTLLM, 8192, 64)
    for clients in (1, 32):
        out = disagg.simulate(p, TRTLLM, clients, 8192, 64, sc.Parameters(0.6, 0.5, 50e-6, 1e-3, 5e-6))
        assert lo["ttft_s"] <= out["ttft_s"] and lo["tpot_s"] <= out["tpot_s"]


def test_the_prefill_side_is_a_closed_loop_solved_by_mean_value_analysis():
    """`disagg.prefill_residence`: one client never queues (R = s, X = 1 / (s + Z)); two clients on
    one rank: the second finds the first in service with probability U(1) = s / (s + Z) and waits
    half a prompt then (a deterministic server's residual), so R(2) = s + s^2 / (2 (s + Z)); at
    s = 0.2, Z = 0.8: 0.2 + 0.04 / 2 = 0.22 s and X = 2 / 1.02. Many clients fill the ranks:
    X -> P / s."""
    assert disagg.prefill_residence(1, 4, 0.2, 0.8) == (0.2, 1 / 1.0)
    r, x = disagg.prefill_residence(2, 1, 0.2, 0.8)
    assert r == pytest.approx(0.22, rel=1e-12) and x == pytest.approx(2 / 1.02, rel=1e-12)
    r, x = disagg.prefill_residence(400, 4, 0.2, 0.8)
    assert x == pytest.approx(4 / 0.2, rel=5e-3) and r == pytest.approx(400 / x - 0.8, rel=1e-9)
    # more ranks for the same clients queue less
    assert disagg.prefill_residence(40, 8, 0.2, 0.8)[0] < disagg.prefill_residence(40, 4, 0.2, 0.8)[0]


QWEN235 = spec.load_model(catalog.path("models", "qwen3-235b-a22b"))


def test_pools_of_attention_dp_workers_count_their_ranks_and_devices():
    """The v2 row of Qwen3-235B-A22B-FP8 on H100 (vLLM): 1 prefill worker of tp 1 x dp 4 (its
    experts over the 4 GPUs, moe_tp 4), 3 decode workers of tp 4: 4 + 3 x 4 = 16 GPUs, 4 prefill
    ranks and 3 decode ranks. KV cache (fp8): 2 x 94 layers x 4 KV heads x 128 x 1 B = 96,256 B
    per token on a tp 1 prefill rank, a quarter on a tp 4 decode device; ISL 4000: 385,024,000 B
    sent by the prefill device; 16 > 8 GPUs per HGX H100: over the 50 GB/s ConnectX-7 port,
    7.70048 ms + 2.7 us."""
    h100 = spec.load_hardware(catalog.path("hardware", "h100-sxm"))
    pre = sc.Deployment(QWEN235, h100, 1, "fp8", "fp8", attention_dp=4, moe_tp=4)
    dec = sc.Deployment(QWEN235, h100, 4, "fp8", "fp8", moe_tp=4)
    p = disagg.Pools(pre, dec, 1, 3, 1)
    assert (p.devices, p.prefill_ranks, p.decode_ranks) == (16, 4, 3)
    assert pre.kv_per_token() == 2 * 94 * 4 * 128 and dec.kv_per_token() == 2 * 94 * 1 * 128
    assert disagg.kv_bytes(p, 4000) == 385_024_000
    link = disagg.kv_link(p)
    assert "RDMA" in link.name and disagg.transfer_s(p, 4000, link) == pytest.approx(385_024_000 / 50e9 + 2.7e-6)


def test_the_first_token_streams_from_the_decode_worker_by_the_engines_rule():
    """SGLang streams the prefill's token at admission (no forward pass); TensorRT-LLM and vLLM
    after the decode worker's first step (see serving/disagg.py)."""
    assert {engines.load(e).name: disagg.FIRST_TOKEN_STEPS[engines.load(e).name]
            for e in ("sglang", "trtllm", "vllm")} == {"SGLang": 0, "TensorRT-LLM": 1, "vLLM": 1}


def call(*argv):
    out, err = io.StringIO(), io.StringIO()
    return run([str(a) for a in argv], out, err), out.getvalue(), err.getvalue()


@pytest.mark.slow
def test_simulate_takes_two_pools():
    base = ("simulate", "llama-3.1-70b", "--device", "gb200", "--engine", "trtllm", "--isl", "8192", "--osl", "64",
            "--prefill-workers", 2, "--prefill-tp", 4, "--decode-workers", 1, "--decode-tp", 8)
    code, out, err = call(*base, "--concurrency", 1, "--json", "--bound")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kind"] == "bound" and doc["pools"] == {"prefill": [2, 4], "decode": [1, 8]}
    code, out, err = call(*base, "--concurrency", 1)
    assert code == 0 and "KV transfer" in out and "limited by" in out, err
    code, _, err = call(*base, "--rate", 2)
    assert code == 2 and "--prefill-workers: two pools" in err
    code, _, err = call(*base[:-2], "--decode-tp", 0, "--concurrency", 1)
    assert code == 2 and "--decode-tp: 0 must be at least 1" in err
    # a MoE's pools of attention-DP ranks: 2 prefill ranks of one worker, 4 decode ranks with EP 4
    code, out, err = call("simulate", "qwen3-30b-a3b", "--device", "h100-sxm", "--engine", "sglang", "--isl", "2048",
                          "--osl", "32", "--concurrency", 16, "--prefill-workers", 1, "--prefill-attention-dp", 2,
                          "--decode-workers", 1, "--decode-attention-dp", 4, "--decode-ep", 4, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["attention_dp"] == {"prefill": 2, "decode": 4} and doc["first_token_steps"] == 0
    assert doc["tokens_per_s_per_gpu"] == pytest.approx(doc["requests_per_s"] * 32 / 6)


SHARED = __import__("pathlib").Path(__file__).resolve().parents[1].parent / "shared" / "measured"
V2 = SHARED / "serving-v2-visible.csv"


def disagg_rows(tmp_path, edit=None):
    """The v2 file's disaggregated rows (read in place), optionally one cell changed."""
    import csv
    if not V2.is_file():
        pytest.skip("../shared/measured/serving-v2-visible.csv absent: the measured rows are read in place")
    with open(V2, encoding="utf-8") as fh:
        rd = csv.DictReader(fh)
        picked, fields = [r for r in rd if r["mode"] == "disagg"], rd.fieldnames
    if edit:
        picked[0].update(edit)
    path = tmp_path / "disagg.csv"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(picked)
    return path


@pytest.mark.slow
def test_validate_predicts_the_disaggregated_rows_it_can_and_says_why_for_the_rest(tmp_path):
    code, out, err = call("validate", disagg_rows(tmp_path), "--out", tmp_path / "out", "--format", "md,json")
    assert code == 0, err
    rep = json.loads((tmp_path / "out" / "serving.json").read_text())
    got = {r["row_id"]: r for r in rep["disaggregated"]}
    # the three Qwen3-32B-NVFP4 rows (b200, gb200; 40 prefill workers of tp 1, 6 decode workers of tp 4)
    for r in got.values():
        assert r["ttft_error"] == pytest.approx(r["ttft_s"] / r["measured_ttft_s"] - 1)
        assert r["ttft_bound_s"] <= r["measured_ttft_s"] and r["tpot_bound_s"] <= r["measured_tpot_s"]
        if "nvfp4" in r["row_id"]:
            assert ("NVLink" in r["link"]) == (r["device"] == "gb200")   # 40 + 24 = 64 GPUs: one NVL72, or RDMA
    # the 5 Qwen3-32B (SGLang, vLLM) and 2 Qwen3-235B-A22B-FP8 (vLLM, attention DP) rows state no
    # concurrency: decode_workers x decode_attention_dp x decode_batch clients, said on the row
    stated = [r for r in got.values() if not r["read"]]
    assert len(got) == 10 and len(stated) == 3 and all("nvfp4" in r["row_id"] and r["prefill"] == "40 x tp 1" for r in stated)
    dp = {r["prefill"]: r for r in got.values() if "dp" in r["prefill"]}
    assert set(dp) == {"1 x tp 1 x dp 4", "2 x tp 1 x dp 4"}
    assert dp["2 x tp 1 x dp 4"]["clients"] == 1 * 8 * 7 and "decode moe_tp 1 read as 8" in dp["2 x tp 1 x dp 4"]["read"]
    assert rep["unpredictable"] == [] and "10 disaggregated rows predicted" in out
    assert "## Disaggregated rows" in (tmp_path / "out" / "serving.md").read_text()


def test_a_bad_pool_cell_is_located(tmp_path):
    code, _, err = call("validate", disagg_rows(tmp_path, {"decode_tp": "four"}), "--out", tmp_path / "out")
    assert code == 1 and ":2:" in err and "decode_tp: 'four' is not a whole number" in err


def test_the_implied_prefill_inverts_the_prefill_queue():
    """`implied_prefill` undoes `prefill_residence`: at 552 clients over 40 ranks with a 7 s delay,
    a prefill of 0.3 s gives some residence R; asked for R, it answers 0.3 s."""
    r, _ = disagg.prefill_residence(552, 40, 0.3, 7.0)
    assert r > 0.3 and disagg.implied_prefill(552, 40, r, 7.0) == pytest.approx(0.3, rel=1e-6)
    assert disagg.implied_prefill(552, 40, -0.1, 7.0) == 0.0


def test_a_loop_past_the_event_budget_is_refused_with_the_reason():
    with pytest.raises(disagg.Unpredictable, match="clients: past the 227,272"):
        disagg.simulate(pools("h100-sxm"), TRTLLM, 10 ** 12, 8192, 64, sc.BOUND)
