"""`simulate --bound`'s per-request bounds (serving/request_bounds.py): never above a measured
run of the same setup, and never above the replay's own figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rooflinec.serving import measurements, request_bounds, rows
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
