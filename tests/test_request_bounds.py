"""`simulate --bound`'s per-request bounds (serving/request_bounds.py): never above a measured
run of the same setup, and never above the replay's own figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rooflinec.serving import fitting, measurements, request_bounds, rows, validation
from rooflinec.serving import stepcost as sc

MEASURED = Path(__file__).resolve().parents[1].parent / "shared" / "measured" / "serving-v2-visible.csv"


@pytest.mark.slow
@pytest.mark.skipif(not MEASURED.exists(), reason="the visible measured rows are not beside the repository")
def test_the_ttft_bound_is_at_most_every_visible_measured_ttft():
    """Every visible row (aggregated serving): its prompt's prefill alone at the bound, the TTFT
    `simulate --bound` prints for a distinct prompt, is at most the measured mean TTFT."""
    specs, steps, checked, over = measurements.Specs(None), {}, 0, []
    for row in rows.read(str(MEASURED)):
        got = rows.resolve(row, specs)
        if isinstance(got, str) or row.mode == "disagg":
            continue
        dep, _ = rows.deployment(row, got, rows.kv_format(got.weights))
        key = (row.model, row.device, row.tp, row.attention_dp, row.moe_tp, row.moe_ep, got.weights)
        try:
            steps[key] = steps.get(key) or sc.build(dep)
        except Exception:        # a layout the step model does not price: not predicted either
            continue
        ttft, token = request_bounds.per_request(steps[key], [row.isl], cached=False)
        checked += 1
        if ttft[0] > row.ttft_s or token[0] > row.tpot_s:
            over.append((row.row_id, float(ttft[0]), row.ttft_s, float(token[0]), row.tpot_s))
    assert checked > 400 and over == []


@pytest.mark.slow
def test_the_bounds_are_below_the_replay_and_the_replay_is_labelled(call):
    """The trial's case: the replay at the bound under SGLang's schedule queued TTFT to 692 ms,
    above the measured 482 ms; the bound is the prompt's prefill alone, below both."""
    code, out, err = call("simulate", "llama-3.1-8b", "--device", "h200-sxm", "--tp", "8", "--weights",
                          "fp8-block128", "--engine", "sglang", "--concurrency", "64", "--isl", "8000",
                          "--osl", "100", "--bound", "--requests", "256", "--json")
    assert code == 0, err
    got = json.loads(out)
    replay = got["replay"]
    assert replay["note"] == request_bounds.NOT_A_BOUND
    for what in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert got[what]["mean"] <= replay[what]["mean"]
    assert got["ttft_s"]["mean"] < 0.482
    assert got["e2e_s"]["mean"] == pytest.approx(got["ttft_s"]["mean"] + 99 * got["tpot_s"]["mean"], rel=1e-9)
    code, text, err = call("simulate", "llama-3.1-8b", "--device", "h200-sxm", "--tp", "8", "--engine", "sglang",
                           "--concurrency", "4", "--isl", "512", "--osl", "8", "--bound", "--requests", "8")
    assert code == 0 and f"{request_bounds.NOT_A_BOUND}:" in text and "throughput (not a bound)" in text


def _prompt_features(isl: int, window) -> np.ndarray:
    """A step prefilling one prompt of `isl` tokens as one chunk, its last token's logits."""
    x = np.zeros((1, len(sc.FEATURES)))
    sc.attend(x[0], window, np.zeros(0, np.int64), np.array([0]), np.array([isl]))
    x[0, [sc.ONE, sc.TOKENS, sc.LOGITS]] = 1, isl, 1
    return x


@pytest.mark.slow
@pytest.mark.parametrize("model,device,engine,weights,tp,concurrency", [
    ("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", "vllm", "bf16", 1, 1),   # no reuse hit: every prompt sent once
    ("Qwen/Qwen3-235B-A22B-FP8", "h200-sxm", "sglang", "fp8-block", 2, 1),   # routed experts, collectives
    ("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", "trtllm", "bf16", 2, 64),  # the warm-up sent all 100 prompts
])
def test_validate_and_simulate_bound_give_one_prompt_alone(model, device, engine, weights, tp, concurrency):
    """validate's TTFT bound (`validation.prompt_alone`) is `simulate --bound`'s
    (`request_bounds.per_request`) over ISLs, the whole prompt where it is sent for the first
    time, its last token over the cached context where it was sent before; and the overlapped
    rule it takes is never above the sum of the kernels' own rooflines at the bound."""
    for isl in (1, 17, 512, 3000, 8191):
        moe = weights if "A22B" in model else ""
        row = rows.Row("t", model, device, engine, "agg", weights, moe, tp, 1, 1, tp if moe else 1, 1, 1, isl, 2,
                       concurrency, 1.0, 0.01)
        (case,) = fitting.prepare([row], measurements.Specs(None))
        assert case.predicted, case.reason
        full, _ = request_bounds.per_request(case.step, np.array([isl]), cached=False)
        last, _ = request_bounds.per_request(case.step, np.array([isl]), cached=True)
        got = validation.prompt_alone(case)
        if concurrency == 1:          # 2 warm-up + 20 measured requests: each of 100 prompts sent once at most
            assert got == full[0]
        else:                         # all 100 prompts sent in the warm-up: every measured one cached
            assert got == pytest.approx(last[0], rel=1e-12) and got <= full[0] * (1 + 1e-12)
        per_kernel = float(case.step.durations(_prompt_features(isl, case.step.window), sc.BOUND)[0])
        assert full[0] <= per_kernel * (1 + 1e-12)
