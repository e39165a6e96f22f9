"""`serve`'s bounds and its calibrated predictions side by side: a prediction never beats the
bound of the same step, the bound names its largest term, the bound under attention DP / EP is
one (the least-work routing), and what the prediction assumes is printed."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rooflinec.analyses.serving import dominant
from rooflinec.base import yamlio
from rooflinec.base.roofline import Roofline
from rooflinec.cli import calibrated, quick
from rooflinec.cost import collectives as C
from rooflinec.cost.deployment import Deployment
from rooflinec.serving import routed_bound, serving_model as sm, stepcost as sc
from rooflinec.spec import catalog, load


def model(name):
    return load.load_model(catalog.path("models", name))


def device(name):
    return load.load_hardware(catalog.path("hardware", name))


def test_the_bound_names_its_largest_term():
    # 1 ms of compute, 2 ms of memory: memory, unless the collectives take longer than both
    roof = Roofline(1e-3, 2e-3)
    assert dominant(roof, 1.5e-3) == "memory"
    assert dominant(roof, 2.5e-3) == "collectives"
    assert dominant(Roofline(3e-3, 2e-3), 2.5e-3) == "compute"


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b"]),
       st.sampled_from(["h100-sxm", "h200-sxm"]), st.sampled_from([1, 2, 4, 8, 16]),
       st.integers(1, 256), st.integers(1, 8), st.sampled_from(["bf16", "fp8"]))
@example("llama-3.1-70b", "h100-sxm", 16, 1, 8, "bf16")      # the trial's case: the ring crosses nodes
def test_a_calibrated_prediction_is_never_below_the_bound_of_its_step(name, key, tp, batch, growth, dtype):
    """Over models, devices, tp inside and past the NVLink domain, batches and contexts: the
    shipped calibration's TPOT is at least the step bound at (batch, context) and its TTFT at
    least the prompt's bound (the same collectives, on the same link, at fractions <= 1)."""
    m, dev, prompt = model(name), device(key), 1024
    context = prompt + 128 * growth
    section = quick.serving_section(m, dev, dtype, [batch], context, prompt, tp)
    if section["crossovers"][0]["devices"][0]["max_batch"] < batch:
        return     # past memory the prediction queues; serve prints none
    choice = calibrated.choose(None, key, None)
    p = calibrated.predict(choice, calibrated.run(m, dev, dtype, dtype, tp, prompt, context, batch))
    assert "why" not in p, p
    step = section["steps"][0]["devices"][0]
    assert p["tpot_s"] >= step["time_s"]
    assert p["ttft_s"] >= section["prefill"][0]["devices"][0]["time_s"]


def test_inside_a_domain_the_one_shot_prediction_is_at_least_the_bounds_all_reduce():
    """Inside an NVLink domain the calibrated step runs all-reduces one-shot: 2(n-1)/n of the
    payload and one latency each; the bound counts the least any all-reduce takes, the payload
    once and one latency (`collectives.least_time`). At n = 8 on H100, a 1 MiB decode payload:
    7/4 x 1,048,576 / 450e9 + 0.47 us = 4.548 us predicted against 2.800 us bounded."""
    h100 = device("h100-sxm")
    link = C.Link(h100.link, h100.link_bandwidth, h100.link_latency)
    for n in range(2, h100.link_domain + 1):
        one_shot = C.time(float(C.fraction("all_reduce", n)) * 2 ** 20, 1, link)
        assert one_shot >= float(C.least_time("all_reduce", 2 ** 20, n, link))
    assert C.time(7 / 4 * 2 ** 20, 1, link) == pytest.approx(4.548e-6, rel=1e-3)
    assert float(C.least_time("all_reduce", 2 ** 20, 8, link)) == pytest.approx(2.800e-6, rel=1e-3)


@pytest.mark.slow
def test_serve_names_collectives_and_the_link_past_the_nvlink_domain(call):
    """Llama-3.1-70B at tp 16 on H100 (NVLink domains of 8), batch 64 at context 128: the group
    crosses nodes over InfiniBand. The collectives' least time past the domain counts each
    node's 8 NICs together (`collectives.least_rate`: the slower of a device's two ports,
    450 + 50 GB/s, and a domain's 8 x 50 GB/s): 161 all-reduces of 64 x 8192 x 2 B, each
    1,048,576 / 400e9 + 2.7 us = 5.32 us, 0.857 ms, and the logits all-gather, 15/16 x 64 x
    128,256 x 2 B over min(500e9, 15/16 x 50e9 / (8/16 / 8)) = 500e9, + 2.7 us = 33.5 us:
    0.890 ms in all, under the step's memory (3.06 ms; one GPU's NIC alone had given 4.1 ms and
    called the step collectives-bound), and the calibrated TPOT (which times the same
    collectives by the ring) stays above the bound."""
    code, out, err = call("serve", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "8,16", "--batch", "64",
                          "--context", "128", "--prompt", "64", "--json")
    assert code == 0, err
    docs = {d["tp"]: d for d in json.loads(out)["configurations"]}
    at16 = docs[16]["serving"]["steps"][0]["devices"][0]
    reduce, gather = 64 * 8192 * 2, 15 / 16 * 64 * 128256 * 2
    assert at16["comm_s"] == pytest.approx(161 * (reduce / 400e9 + 2.7e-6) + gather / 500e9 + 2.7e-6, rel=1e-9)
    assert at16["comm_s"] < at16["memory_s"] and at16["bound"] == "memory"
    assert docs[8]["serving"]["steps"][0]["devices"][0]["bound"] == "memory"
    for doc in docs.values():
        assert doc["calibrated"]["points"][0]["tpot_s"] >= doc["serving"]["steps"][0]["devices"][0]["time_s"]
    text = call("serve", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "8,16", "--batch", "64",
                "--context", "128", "--prompt", "64")[1]
    assert "h100-sxm at tp 16: the tp group of 16 crosses the NVLink 4 (NVSwitch) domain of 8 devices: " \
           "its collectives run over InfiniBand NDR (ConnectX-7)" in text
    assert "at tp 8: the tp group" not in text


def test_the_crossing_is_said_only_past_the_domain():
    h100 = device("h100-sxm")
    assert quick.crossing(model("llama-3.1-8b"), h100, 8) == ""
    assert "crosses" in quick.crossing(model("llama-3.1-8b"), h100, 16)


QWEN_EP = Deployment(model("qwen3-30b-a3b"), device("h200-sxm"), 1, "bf16", "bf16", attention_dp=4, moe_ep=4)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(st.integers(1, 2048), st.integers(1, 32768))
def test_the_least_work_bound_is_below_the_simulators_bound_step(batch, context):
    """The overlapped rule, max(sum compute, sum memory), is at most the simulator's bound step
    (the sum of each kernel's max) on the same features and routing: the serve bound is below
    anything `simulate --bound` prices for that step."""
    step_model = sc.build(QWEN_EP)
    x = routed_bound._decode(batch, context, step_model.window)
    least = routed_bound.decode(step_model, batch, context, 2)
    assert least["comm_s"] == 0      # tp 1: no all-reduce, and no all-to-all at the least-work routing
    assert least["time_s"] <= step_model.durations(x, sc.BOUND)[0] * (1 + 1e-12)


@pytest.mark.slow
def test_the_ttft_bound_routes_one_prompt_alone_in_the_group():
    """Qwen3-30B-A3B (k = 8) at attention DP 4 x EP 4, a 1,024-token prompt alone: the MoE layers
    see its 1,024 tokens only, so the busiest expert rank serves ceil(1024 x 8 / 4) = 2,048 rows
    (not the 8,192 of four ranks prefilling at once) and reads ceil(8 / 4) = 2 experts; every
    other kernel is the step model's at the prompt's features."""
    step_model = sc.build(QWEN_EP)
    got = routed_bound.prefill(step_model, 1024, 2)
    x = routed_bound._prompt(1024, None)
    r = step_model.routed
    assert got["compute_s"] == pytest.approx(float((x @ step_model.compute.T).sum()) + 2048 * r.row_compute.sum())
    assert got["memory_s"] == pytest.approx(float((x @ step_model.memory.T).sum()) + 2048 * r.row_memory.sum()
                                            + 2 * r.expert_memory.sum())


@pytest.mark.slow
def test_serve_bound_under_attention_dp_is_at_most_simulate_bound(call):
    """Qwen3-30B-A3B at attention DP 4 x EP 4 on H200, 16 sequences a rank (64 clients),
    prompts of 1024 and 128 output tokens: serve's step bound at the context the requests start
    decoding at is at most the simulator's bound-mode TPOT (every step it replays decodes at
    least there, and some prefill beside), and below the old expected-routing figure."""
    args = ["qwen3-30b-a3b", "--device", "h200-sxm", "--attention-dp", "4", "--ep", "4"]
    code, out, err = call("serve", *args, "--batch", "16", "--context", "1025", "--prompt", "1024", "--json")
    assert code == 0, err
    serving = json.loads(out)["serving"]
    step = serving["steps"][0]["devices"][0]
    assert "least-work routing" in serving["routing"] and step["comm_s"] == 0
    code, out, err = call("simulate", *args, "--engine", "trtllm", "--concurrency", "64", "--isl", "1024",
                          "--osl", "128", "--bound", "--requests", "64", "--json")
    assert code == 0, err
    tpot = json.loads(out)["replay"]["tpot_s"]["mean"]    # the replay's steps at the bound
    assert step["time_s"] <= tpot
    text = call("serve", *args, "--batch", "16", "--context", "1025", "--prompt", "1024")[1]
    assert "routed experts: least-work routing" in text


@pytest.mark.slow
def test_json_reports_the_moe_tp_the_deployment_uses(call):
    for argv, want in ((("--tp", "4", "--moe-tp", "4"), 4), (("--tp", "4"), 4),
                       (("--tp", "2", "--attention-dp", "2", "--ep", "4", "--moe-tp", "1"), 1)):
        code, out, err = call("serve", "qwen3-30b-a3b", "--device", "h100-sxm", *argv, "--batch", "1", "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["serving"]["deployment"]["moe_tp"] == want == doc["summary"]["deployment"]["moe_tp"]
    code, out, _ = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "2", "--batch", "1", "--json")
    assert "moe_tp" not in json.loads(out)["serving"]["deployment"]     # no experts to split


@pytest.mark.slow
def test_weights_that_do_not_fit_say_why_there_is_no_prediction(call):
    """Llama-3.1-70B in bf16 on one H100: 141.1e9 B of weights (131.4 GiB), 80 GiB of memory
    (serving_model states memory in GiB)."""
    code, out, err = call("serve", "llama-3.1-70b", "--device", "h100-sxm", "--batch", "1,16")
    assert code == 0, err
    assert "  not predicted: bf16 weights need 131.4 GiB per device; h100-sxm has 80.00 GiB\n" in out


@pytest.mark.slow
def test_a_context_past_max_context_is_warned_once_located(call):
    code, out, err = call("serve", "llama-3.1-8b", "--device", "h100-sxm,h200-sxm", "--context", "200000",
                          "--batch", "1")
    assert code == 0
    spec = catalog.path("models", "llama-3.1-8b")
    line, col = yamlio.load(spec).where(("max_context",))
    want = f"warning: {spec}:{line}:{col}: max_context: 200,000 tokens"
    assert err.count("warning:") == 1 and err.startswith(want) and "131,072" in err
    assert call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--context", "8192", "--batch", "1")[2] == ""


@pytest.mark.slow
def test_the_output_length_the_prediction_assumes_is_printed_and_settable(call):
    """--context 1100 after a 1024-token prompt: 2 x 76 = 152 output tokens by default (mean
    context 1100), so each steady step prefills 1024 / 152 = 6.74 prompt tokens per decoded
    one; --osl 1024 predicts longer requests, whose TPOT is lower."""
    argv = ["serve", "llama-3.1-70b", "--device", "h200-sxm", "--dtype", "fp8", "--batch", "91",
            "--prompt", "1024", "--context", "1100"]
    code, out, err = call(*argv)
    assert code == 0, err
    assert "calibrated for requests of 1,024 prompt and 152 output tokens" in out and "= 6.74 prompt tokens" in out
    short = json.loads(call(*argv, "--json")[1])["calibrated"]
    long = json.loads(call(*argv, "--osl", "1024", "--json")[1])["calibrated"]
    assert short["osl"] == 152 and long["osl"] == 1024
    assert long["points"][0]["tpot_s"] < short["points"][0]["tpot_s"]
    assert calibrated.output_length(1024, 1100) == 152 and calibrated.output_length(1024, 1100, 7) == 7
    code, _, err = call(*argv, "--osl", "0")
    assert code == 2 and "--osl: expected a whole number >= 1, got 0" in err


def _measured_concurrency(device: str, engine: str) -> list[int]:
    doc = yamlio.load(calibrated.shipped()).data
    tag = f"_{device.replace('-', '_')}_{engine}_"
    return [int(re.search(r"_c(\d+)_tp", r["row_id"]).group(1)) for r in doc["rows"] if tag in r["row_id"]]


@pytest.mark.slow
def test_help_and_extrapolation_words(call):
    code, out, _ = call("serve", "--help")
    assert code == 0 and re.search(r"MODEL\s+a catalog model \(rooflinec models\)", out)
    assert "TTFT is the same model's" in out and "with no interval" not in out
    assert "Calibrated TPOT and predicted TTFT, each with its 80% interval" in out
    seen = _measured_concurrency("h100-sxm", "trtllm")
    lo, hi = min(seen), max(seen)
    assert lo > 1       # batch 1 lies below every run the calibration measured
    text = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--batch", "1,16")[1]
    assert "predicted TTFT" in text and "calibrated TTFT" not in text
    head = f"  extrapolated beyond the calibration's measured range (concurrency {lo:,} to {hi:,} on this " \
           "device with trtllm): batch "
    line = next(x for x in text.splitlines() if x.startswith(head))
    batches = [int(b.replace(",", "")) for b in line[len(head):].split(", ")]
    assert 1 in batches and 16 not in batches                   # 16 lies inside the measured range
    assert all(b < lo or b > hi for b in batches)


@pytest.mark.slow
def test_where_the_least_work_step_cannot_be_priced_the_figures_are_said_to_be_expectations(call):
    """DeepSeek-V3.2's indexer keeps min(S, k_top) keys, a minimum of the context the
    simulator's step features do not take (stepcost.Windowed), so its least-work step is not
    priced: under attention DP / EP serve says its step figures are expectations under uniform
    routing, not bounds."""
    code, out, err = call("serve", "deepseek-v3.2-exp", "--device", "h200-sxm", "--attention-dp", "8", "--ep", "8",
                          "--batch", "1")
    assert code == 0, err
    assert "the step and TTFT figures are expectations under uniform routing, not bounds" in out


def test_serve_says_when_the_batch_queues_behind_the_kv_cache():
    """The user trial's case: at --osl 1000 the requests' mean context, 1,024 + 500, fits fewer
    sequences than the batch: serve names the batches that queue and how many run at once,
    free memory / KV bytes per sequence at that context (serving_model.sequences_that_fit)."""
    model, device = quick._model("llama-3.1-70b"), quick._device("h200-sxm")
    choice = calibrated.choose(None, "h200-sxm", None)
    run = calibrated.run(model, device, "fp8", "fp8", 1, 1024, 1100, 390, osl=1000)
    p = calibrated.predict(choice, run)
    fits = sm.sequences_that_fit(run)
    assert fits < 390 and p["queued"] == {"running": pytest.approx(fits), "batch": 390.0}
    line = calibrated.queueing({390: p})
    assert f"batch 390 runs {fits:,.0f} at once" in line
    assert calibrated.queueing({390: calibrated.predict(choice, calibrated.run(model, device, "fp8", "fp8", 1, 1024, 1100, 64, osl=1000))}) == ""


@pytest.mark.slow
def test_the_least_work_step_of_one_sequence_is_the_programs_windowed_layers_included():
    """One sequence routes its token to exactly k experts whatever the routing, so at batch 1,
    dp 1 and ep 1 the least-work step is the serving section's (the sharded program's) step,
    FLOPs and bytes alike; gpt-oss-120b's sliding layers (W = 128) read min(context, W) keys
    (stepcost.attend's window features), at contexts inside and past the window."""
    m, dev = model("gpt-oss-120b"), device("h200-sxm")
    step_model = sc.build(Deployment(m, dev, 1, "bf16", "bf16"))
    assert step_model.window == 128
    for context in (64, 128, 129, 4096):
        want = quick.serving_section(m, dev, "bf16", [1], context, context, 1)["steps"][0]["devices"][0]
        got = routed_bound.decode(step_model, 1, context, 2)
        assert got["compute_s"] == pytest.approx(want["compute_s"], rel=1e-9)
        assert got["memory_s"] == pytest.approx(want["memory_s"], rel=1e-9)


@pytest.mark.slow
def test_a_moe_steps_flops_and_bytes_are_the_least_work_steps_it_times(call):
    """Mixtral-8x7B at tp 2 on H100 (the trial's case): each step's and the prompt's bytes are
    the least-work step's, so bytes / bandwidth is its memory_s, and its intensity the printed
    one. Two checks against the program the section lowers (uniform routing): at batch 1 both
    read the same k = 2 experts (the expected distinct experts of one token are k), so the bytes
    agree; the routed FLOPs are per routed row, the same under any routing, so the FLOPs agree at
    every batch; past one token uniform routing reads more experts than k, so more bytes."""
    args = ("serve", "mixtral-8x7b", "--device", "h100-sxm", "--tp", "2", "--batch", "1,64,256",
            "--context", "1088", "--prompt", "1024")
    code, out, err = call(*args, "--json")
    assert code == 0, err
    data, bandwidth = json.loads(out), device("h100-sxm").bandwidth
    uniform = quick.serving_section(model("mixtral-8x7b"), device("h100-sxm"), "bf16", [1, 64, 256], 1088, 1024, 2)
    for row, program in zip(data["serving"]["steps"], uniform["steps"]):
        assert row["bytes"] / bandwidth == pytest.approx(row["devices"][0]["memory_s"], rel=1e-12)
        assert row["flops"] == pytest.approx(program["flops"], rel=1e-9)
        assert (row["bytes"] == pytest.approx(program["bytes"], rel=1e-9) if row["batch"] == 1
                else row["bytes"] < program["bytes"])
    prompt = data["serving"]["prefill"][0]
    assert prompt["bytes"] / bandwidth == pytest.approx(prompt["devices"][0]["memory_s"], rel=1e-12)
    text = call(*args)[1]
    assert f"intensity {prompt['flops'] / prompt['bytes']:,.1f} FLOP/B" in text
    top = data["summary"]["devices"][0]["decode"][0]["at_max_batch"]
    flops, nbytes = data["serving"]["crossovers"][0]["devices"][0]["size_at_max"]
    assert top["intensity"] == pytest.approx(flops / nbytes) and nbytes / bandwidth == pytest.approx(
        data["serving"]["crossovers"][0]["devices"][0]["at_max_batch"]["memory_s"], rel=1e-12)


@pytest.mark.slow
def test_the_summary_line_says_the_bound_the_table_says(call):
    """Llama-3.1-8B at tp 16 on H100 with fp8 weights and KV cache: the group crosses nodes, so
    at batch 1 the collectives' latencies (two all-reduces a layer over InfiniBand) outlast the
    kernels, while at batch 64 the KV cache's reads do; the line under the table names the
    collectives' batches as the table does, and says the kernels alone stay memory-bound (never
    the bare 'decode stays memory-bound')."""
    args = ("serve", "llama-3.1-8b", "--device", "h100-sxm", "--tp", "16", "--batch", "1,64",
            "--weights", "fp8", "--kv-cache", "fp8")
    data = json.loads(call(*args, "--json")[1])["serving"]
    bounds = {row["batch"]: row["devices"][0]["bound"] for row in data["steps"]}
    top = data["crossovers"][0]["devices"][0]
    bounds[top["max_batch"]] = top["at_max_batch"]["bound"]
    bound_by = [b for b, term in sorted(bounds.items()) if term == "collectives"]
    assert 1 in bound_by and bounds[64] == "memory"
    text = call(*args)[1]
    line = next(line for line in text.splitlines() if line.startswith("decode ") and "fits at context" in line)
    assert line.startswith(f"decode is collectives-bound at batch {', '.join(f'{b:,}' for b in bound_by)} ")
    assert "its kernels stay memory-bound at every batch" in line and "decode stays" not in text
    for row in (r for r in text.splitlines() if r.strip().startswith(tuple(f"{b} " for b in bound_by))):
        assert " collectives " in row


@pytest.mark.slow
def test_a_ttft_point_outside_its_band_is_said_to_be_and_not_moved(call):
    """Llama-3.1-70B at tp 2 and 8 on H100 (the trial's case): the predicted TTFT (the
    steady-state model's, no queue) lies below the band of left-out residuals; the point is
    predict's, unmoved, and one line per configuration names exactly the batches outside and why."""
    args = ("serve", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "2,8")
    docs = json.loads(call(*args, "--json")[1])["configurations"]
    text = call(*args)[1]
    for doc in docs:
        points = [p for p in doc["calibrated"]["points"] if "ttft_interval_s" in p]
        below = [p["batch"] for p in points if p["ttft_s"] < p["ttft_interval_s"][0]]
        assert below, points       # the trial's case: the point sits under its band
        line = next(x for x in text.splitlines() if x.startswith(f"h100-sxm at tp {doc['tp']}: predicted TTFT"))
        assert line == (f"h100-sxm at tp {doc['tp']}: predicted TTFT lies below its interval at batch "
                        f"{', '.join(f'{b:,}' for b in below)}: " + line.split(": ", 2)[2])
        assert "omits the queueing behind other prompts" in line and "rooflinec simulate replays the queue" in line
        for p in points:   # unmoved: the cell prints predict's point before its band
            assert f"{quick.seconds(p['ttft_s'])} ({quick.seconds(p['ttft_interval_s'][0])}" in text


def test_outside_names_only_points_outside_their_band():
    inside = {"ttft_s": 1.0, "ttft_interval_s": [0.5, 2.0]}
    assert calibrated.outside({1: inside, 2: {"ttft_s": 1.0}}) == ""
    line = calibrated.outside({1: inside, 8: {"ttft_s": 0.3, "ttft_interval_s": [0.5, 2.0]},
                               64: {"ttft_s": 3.0, "ttft_interval_s": [0.5, 2.0]}})
    assert "lies below its interval at batch 8:" in line and "lies above its interval at batch 64:" in line
