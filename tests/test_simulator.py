"""The serving simulator: step costs from the lowered programs, the event loop's bookkeeping,
re-timing a closed-loop schedule, bounds per request, engine files and the `simulate` command."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rooflinec.spec import catalog, load as spec
from rooflinec.serving import serving_model as sm
from rooflinec.base.errors import SpecError, UsageError
from rooflinec.serving import calibration, engines, metrics, simulator, uniform_loop, workload
from rooflinec.serving import stepcost as sc

LLAMA8 = spec.load_model(catalog.path("models", "llama-3.1-8b"))
LLAMA70 = spec.load_model(catalog.path("models", "llama-3.1-70b"))
H100 = spec.load_hardware(catalog.path("hardware", "h100-sxm"))
H200 = spec.load_hardware(catalog.path("hardware", "h200-sxm"))
STEP8 = sc.build(sc.Deployment(LLAMA8, H100, 1, "bf16", "bf16"))
STEP70 = sc.build(sc.Deployment(LLAMA70, H200, 4, "fp8", "fp8"))
CAL = sc.Parameters(bandwidth_fraction=0.8, compute_fraction=0.6, per_layer_s=2e-5, per_step_s=1e-3,
                    per_collective_s=5e-6, per_request_s=2e-5, per_kernel_s=3e-6)


def features(decodes=0, context=0, chunks=(), logits=None):
    x = np.zeros(len(sc.FEATURES))
    x[sc.ONE], x[sc.DECODES], x[sc.CONTEXT] = 1, decodes, context
    for p, c in chunks:
        x[sc.CHUNK_SQUARE] += (p + c) ** 2 - p ** 2
        x[sc.CHUNK_TOKENS] += c
        x[sc.CHUNK_KEYS] += p + c
        x[sc.CHUNKS] += 1
    x[sc.TOKENS] = decodes + x[sc.CHUNK_TOKENS]
    x[sc.LOGITS] = decodes + len(chunks) if logits is None else logits
    return x


# --- step costs ------------------------------------------------------------------------

def test_decode_step_at_batch_one_is_the_weights_over_the_bandwidth():
    """Llama-3.1-8B (meta-llama/Llama-3.1-8B-Instruct config.json): 8.03e9 parameters x 2 bytes
    (bf16) = 16.06 GB, of which the input embedding table, 128,256 x 4,096 x 2 B = 1.05 GB, is
    read one row per token, not whole: one decode step reads 15.01 GB of weights; at H100 SXM's
    3.35 TB/s (datasheet) that is 15.01e9 / 3.35e12 = 4.48 ms; the activations and one short
    sequence's KV cache add well under 1%."""
    t = STEP8.durations(features(decodes=1, context=1)[None], sc.BOUND)[0]
    weights = STEP8.deployment.weight_bytes()
    assert weights == pytest.approx(16.06e9, rel=2e-3)
    read = weights - 128256 * 4096 * 2
    assert read / H100.bandwidth == pytest.approx(4.48e-3, rel=2e-3)
    assert read / H100.bandwidth <= t <= 1.01 * read / H100.bandwidth


def test_a_mixed_step_matches_the_steady_state_models_step():
    """The same machinery: decodes at one context beside one whole prompt (p = 0) cost what
    serving_model.step_cost says (it gives logits to the decodes only)."""
    run_ = sm.Run(LLAMA70, H200, "fp8", 4, 1000, 100, 16)
    eff = sm.Efficiency(0.8, 0.6, 1e-5, 1e-4, 1e-6)
    x = features(decodes=15, context=15 * 1050, chunks=[(0, 1000)], logits=15)
    assert STEP70.durations(x[None], sc.Parameters.of(eff))[0] == pytest.approx(
        sm.step_cost(run_, 15, 1050, 1).time(eff), rel=1e-12)


@given(p=st.integers(0, 8000), c=st.integers(1, 8000))
@settings(max_examples=40, deadline=None)
def test_prompt_chunks_add_up_to_the_whole_prompt(p, c):
    """Chunk attention FLOPs follow (p + c)^2 - p^2: a prompt split in two costs the FLOPs of
    the whole prompt (the causal count telescopes); its KV reads grow with the prefix."""
    flops = lambda chunks: (features(chunks=chunks) @ STEP8.compute.T)[-1]   # noqa: E731
    assert flops([(0, p), (p, c)]) - flops([(0, p + c)]) == pytest.approx(0, abs=1e-9 * flops([(0, p + c)]))


def test_bound_parameters_never_exceed_calibrated_ones_per_step():
    x = np.array([features(decodes=d, context=d * 3000, chunks=[(0, 512)] * (d % 3)) for d in range(0, 300, 7)])
    assert np.all(STEP70.durations(x, sc.BOUND) <= STEP70.durations(x, CAL))


# --- the event loop ----------------------------------------------------------------------

def test_one_client_alone_sees_the_prefill_step_then_decode_steps():
    """C = 1: a request's TTFT is its prompt's prefill step; TPOT is the mean of the
    OSL - 1 decode steps at contexts ISL + 1 ... ISL + OSL - 1."""
    isl, osl = 1000, 50
    res = simulator.simulate(STEP8, engines.load("vllm"), workload.benchmark(1, isl, osl), CAL)
    prefill = STEP8.durations(features(chunks=[(0, isl)])[None], CAL)[0]
    decodes = STEP8.durations(np.array([features(decodes=1, context=isl + 1 + j) for j in range(osl - 1)]), CAL)
    s = metrics.summary(res, 1)
    assert s["ttft_s"]["mean"] == pytest.approx(prefill, rel=1e-12)
    assert s["tpot_s"]["mean"] == pytest.approx(decodes.mean(), rel=1e-9)
    assert s["measured_requests"] == 20


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
def test_every_request_finishes_with_its_output(engine):
    work = workload.Workload(workload.Lengths(100, 3000), workload.Lengths(1, 400), 300, 30, 48, None, seed=3)
    res = simulator.simulate(STEP8, engines.load(engine), work, CAL)
    assert np.all(np.isfinite(res.finish_s)) and np.all(res.first_s <= res.finish_s)
    assert np.all(res.arrival_s <= res.first_s)
    assert int(res.timeline[:, 1].sum()) >= res.osl.max()


@pytest.mark.slow
@given(c=st.integers(1, 96), isl=st.integers(1, 6000), osl=st.integers(1, 600),
       engine=st.sampled_from(["trtllm", "vllm", "sglang"]))
@settings(max_examples=25, deadline=None)
def test_retiming_a_closed_loop_schedule_equals_simulating_it(c, isl, osl, engine):
    """In a closed loop every event falls on a step boundary: the schedule does not depend on
    step times, and the closed-form re-timing gives the simulation's own means."""
    work = workload.Workload(workload.Lengths(isl, isl), workload.Lengths(osl, osl), 3 * c, c, c, None)
    pol = engines.load(engine)
    res = simulator.simulate(STEP8, pol, work, CAL)
    s = metrics.summary(res, 1)
    ttft, tpot = simulator.retimed_means(STEP8, res.schedule, res.measured, res.osl, CAL)
    assert ttft == pytest.approx(s["ttft_s"]["mean"], rel=1e-9)
    if osl > 1:
        assert tpot == pytest.approx(s["tpot_s"]["mean"], rel=1e-9)
    bound = simulator.simulate(STEP8, pol, work, sc.BOUND)
    assert np.all(bound.first_s - bound.arrival_s <= res.first_s - res.arrival_s + 1e-12)


@pytest.mark.slow
def test_open_loop_is_seeded_and_poisson():
    work = workload.Workload(workload.Lengths(512, 2048), workload.Lengths(64, 256), 3000, 0, None, 50.0, seed=7)
    a, b = (simulator.simulate(STEP8, engines.load("sglang"), work, CAL) for _ in range(2))
    assert np.array_equal(a.first_s, b.first_s)
    gaps = np.diff(work.arrivals())
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.06)        # 3000 exponential gaps: sd 1.8%
    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.08)    # an exponential's sd is its mean


def test_kv_capacity_follows_the_engines_memory_rule():
    """Llama-3.1-70B fp8 at tp 4 on H200 (141 GB): weights 70.55e9 x 1 B / 4 = 17.64 GB (the norms whole on each device); TRT-LLM
    keeps 0.9 x (141 - 17.64) = 111.0 GB; a token's KV is 80 layers x 2 x 2 KV heads x 128 x 1 B
    = 40,960 B per device: 2.71 M tokens, in blocks of 32."""
    pol = engines.load("trtllm")
    tokens = simulator.kv_capacity_tokens(STEP70, pol)
    assert tokens % 32 == 0
    assert tokens == pytest.approx(0.9 * (141e9 - STEP70.deployment.weight_bytes()) / 40960, abs=32)


# --- engines -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["trtllm", "vllm", "sglang"])
def test_every_engine_file_states_version_source_and_assumptions(name):
    pol = engines.load(name)
    assert pol.version and "/" in pol.source and isinstance(pol.assumed, dict)


def test_a_bad_engine_field_is_located(tmp_path):
    text = open(catalog.path("engines", "vllm")).read().replace("schedule: mixed", "schedule: sometimes")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(SpecError) as exc:
        engines.load(str(bad))
    assert re.search(r"bad\.yaml:\d+:\d+: schedule: expected one of mixed, prefill_first", str(exc.value))


def test_an_override_names_its_flag():
    with pytest.raises(UsageError, match="--max-tokens"):
        engines.override(engines.load("vllm"), max_tokens=0)


# --- the command ----------------------------------------------------------------------------

@pytest.mark.slow
def test_simulate_json_has_the_four_latencies(call, tmp_path):
    chart = tmp_path / "t.svg"
    code, out, err = call("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "trtllm",
                          "--concurrency", 16, "--isl", 1024, "--osl", 64, "--json", "--chart", chart)
    assert code == 0, err
    doc = json.loads(out)
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(doc[key]) == {"mean", "p50", "p90", "p99"} and doc[key]["p50"] <= doc[key]["p99"]
    assert doc["kind"] == "prediction" and doc["tokens_per_s_per_gpu"] > 0
    first = chart.read_bytes()
    assert call("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "trtllm", "--concurrency", 16,
                "--isl", 1024, "--osl", 64, "--chart", chart)[0] == 0
    assert chart.read_bytes() == first


@pytest.mark.parametrize("extra, flag", [
    ((), "--concurrency"), (("--concurrency", 4, "--rate", 2), "--concurrency"),
    (("--concurrency", 0), "--concurrency"), (("--concurrency", 4, "--max-tokens", 0), "--max-tokens"),
    (("--rate", "-1"), "--rate"), (("--concurrency", 4, "--isl", "9-2"), "--isl"),
    (("--concurrency", 4, "--engine", "tgi"), "--engine"),
])
def test_usage_errors_name_their_flag(call, extra, flag):
    argv = ["simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "vllm", "--isl", 128, "--osl", 8, *extra]
    code, out, err = call(*argv)
    assert code == 2 and flag in err and "Traceback" not in err


def test_a_prompt_no_step_can_hold_is_an_error_not_a_hang(call):
    code, _, err = call("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "trtllm",
                        "--no-chunked-prefill", "--concurrency", 2, "--isl", 9000, "--osl", 8)
    assert code == 1 and "without chunked prefill" in err


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
def test_an_untimed_schedule_is_the_timed_one(engine):
    """The closed loop's schedule alone (no step timed) records the same runs as a timed
    simulation, and re-timing it gives the simulation's means."""
    pol, work = engines.load(engine), workload.benchmark(16, 700, 40)
    timed, bare = simulator.simulate(STEP8, pol, work, CAL), simulator.schedule(STEP8, pol, work)
    for f in ("x0", "steps", "arrived", "first", "finished"):
        assert np.array_equal(getattr(timed.schedule, f), getattr(bare.schedule, f))
    m = timed.measured
    got = simulator.retimed_means(STEP8, bare.schedule, m, bare.osl, CAL)
    assert got[0] == pytest.approx(float(np.mean(timed.first_s[m] - timed.arrival_s[m])), rel=1e-9)
    # the fit's reduced form (sorted flat kernels, affine overheads, pooled) gives the same means
    pool = simulator.Pool([simulator.Retimer(STEP8, bare.schedule, m, bare.osl)] * 2)
    for p in (CAL, sc.BOUND, dataclasses.replace(CAL, compute_fraction=0.2, bandwidth_fraction=0.5)):
        want = simulator.retimed_means(STEP8, bare.schedule, m, bare.osl, p)
        assert pool.means(p) == pytest.approx(np.array([want, want]), rel=1e-9)
    assert bare.peak_blocks > 0 and not bare.capacity_bound


def test_a_schedule_the_kv_capacity_never_bound_holds_at_any_capacity_above_its_peak():
    """Peak blocks and the capacity flag say when a schedule carries over to another
    deployment: above the peak the same runs; a capacity under it binds (or preempts)."""
    pol, work = engines.load("vllm"), workload.benchmark(64, 2000, 200)
    free = simulator.schedule(STEP8, pol, work)
    assert not free.capacity_bound
    tight = dataclasses.replace(pol, cache_fraction=pol.cache_fraction * 0.3)   # 8B on H100: 80 GB x 0.27 - 16 GB
    small = simulator.schedule(STEP8, tight, work)
    assert simulator.kv_capacity_tokens(STEP8, tight) // pol.kv_block_tokens < free.peak_blocks
    assert small.capacity_bound and len(small.schedule.steps) != len(free.schedule.steps)


def test_a_calibration_with_intervals_prints_the_band_of_the_deployment(call, tmp_path):
    """`simulate` under a calibration carrying intervals prints the interval of each mean,
    [mean e^-hi, mean e^-lo] of the band the deployment takes: the pooled one where its model,
    tp and engine (with a fit of its own device) were calibrated, a kind's new-group band where
    one is new, the widest where the file does not say what it holds."""
    def run(calibrated):
        cal = tmp_path / "cal.yaml"
        cal.write_text("kind: simulator\ndefault:\n  parameters: {compute_fraction: 0.6}\n"
                       "groups: [{device: h100-sxm, engine: vllm, models: dense, parameters: {compute_fraction: 0.6}}]\n"
                       "intervals: {level: 0.8, tpot: [-0.1, 0.2], ttft: [-0.5, 0.3],\n"
                       "  by_holdout: {model: {tpot: [-0.4, 0.4], ttft: [-1, 1]}, tp: {tpot: [-0.2, 0.3], ttft: [-2, 0.5]}}"
                       + calibrated + "}\n")
        args = ("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "vllm", "--concurrency", 4,
                "--isl", 256, "--osl", 16, "--calibration", cal)
        code, out, err = call(*args, "--json")
        assert code == 0, err
        return json.loads(out), call(*args)[1]
    seen = ", calibrated: {model: [meta-llama/Llama-3.1-8B-Instruct], tp: [1, 2], engine: [vllm]}"
    got, text = run(seen)
    mean = got["ttft_s"]["mean"]
    assert got["interval"]["ttft_mean_s"] == pytest.approx([mean * np.exp(-0.3), mean * np.exp(0.5)])
    assert "80% interval of the mean (a prediction; model, tp and engine calibrated" in text
    got, text = run(seen.replace("Llama-3.1-8B-Instruct", "Llama-3.1-70B"))     # a new model
    assert got["interval"]["ttft_mean_s"] == pytest.approx([mean * np.exp(-1), mean * np.exp(1)])
    assert "new model: the group-shift band" in text
    got, text = run(seen.replace("Llama-3.1-8B-Instruct", "x").replace("1, 2", "2"))   # new model and tp: the union
    assert got["interval"]["ttft_mean_s"] == pytest.approx([mean * np.exp(-1), mean * np.exp(2)])
    got, text = run("")     # an older file: the widest of its kinds' bands, said so
    assert got["interval"]["ttft_mean_s"] == pytest.approx([mean * np.exp(-1), mean * np.exp(2)])
    assert "does not list the models" in text


@pytest.mark.parametrize("block, where", [("{level: 1.5, tpot: [0, 1], ttft: [0, 1]}", "level"),
                                          ("{level: 0.8, tpot: [1, 0], ttft: [0, 1]}", "tpot"),
                                          ("[1, 2]", "intervals"),
                                          ("{level: 0.8, tpot: [0, 1], ttft: [0, 1], by_holdout: {model: {tpot: [1, 0], "
                                           "ttft: [0, 1]}}}", "by_holdout.model.tpot"),
                                          ("{level: 0.8, tpot: [0, 1], ttft: [0, 1], by_holdout: [1]}", "by_holdout")])
def test_a_bad_interval_block_is_located(tmp_path, block, where):
    cal = tmp_path / "cal.yaml"
    cal.write_text(f"kind: simulator\ndefault:\n  parameters: {{}}\nintervals: {block}\n")
    with pytest.raises(SpecError) as exc:
        calibration.load(str(cal))
    assert "cal.yaml:4" in str(exc.value) and where in str(exc.value)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_idle_engine_steps_at_the_first_arrival(engine):
    """Four clients start together; the front end hands their requests over one by one, so the
    idle engine's first step prefills one prompt and the other three join the next step (beside
    the first request's decode where the engine mixes steps; SGLang prefills first). A busy
    engine admits every waiting request its budget takes at once: under vLLM the first client's
    next request joins the three still running, and the other three clients' next ones join
    together; SGLang's prefill pauses the first request's decodes, so the wave finishes together
    and the idle engine again takes one request first."""
    work = workload.Workload(workload.Lengths(100, 100), workload.Lengths(4, 4), 8, 0, 4, None)
    res = simulator.schedule(STEP8, engines.load(engine), work)
    x = res.schedule.x0
    assert (x[0, sc.CHUNKS], x[0, sc.CHUNK_TOKENS], x[0, sc.DECODES]) == (1, 100, 0)
    assert (x[1, sc.CHUNKS], x[1, sc.CHUNK_TOKENS]) == (3, 300)
    assert x[1, sc.DECODES] == (1 if engine == "vllm" else 0)
    # the first request's first token comes a step before the others'
    assert list(res.schedule.first[:4]) == [0, 1, 1, 1]
    fifth, later = res.schedule.admitted[4], res.schedule.admitted[5:8]
    assert len(set(later)) == 1 and x[later[0], sc.CHUNKS] == 3 and later[0] == fifth + 1
    if engine == "vllm":
        assert res.timeline[fifth, 2] == 4 and res.schedule.finished[0] < res.schedule.finished[1]
    else:
        assert res.timeline[fifth, 2] == 1 and len(set(res.schedule.finished[:4])) == 1


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["trtllm", "vllm", "sglang"]), st.integers(1, 40), st.integers(1, 3000), st.integers(1, 80),
       st.booleans(), st.integers(1, 4), st.sampled_from([64, 512, 2048, 8192]), st.sampled_from([None, 3, 20]))
def test_the_counted_loop_gives_the_array_loops_schedule(engine, c, isl, osl, chunked, batch_div, budget, prompts):
    """`uniform_loop` (a roomy closed loop of identical requests, by counters) gives `_Loop`'s
    untimed Result bit for bit, under each engine's schedule, chunked or whole prompts, a
    batch limit below the clients, token budgets below the prompt, and prompts reused."""
    pol = dataclasses.replace(engines.load(engine), chunked_prefill=chunked, max_batch=max(1, c // batch_div),
                              max_tokens=budget, chunk_tokens=min(budget, engines.load(engine).chunk_tokens))
    work = workload.benchmark(c, isl, osl, prompts)
    cap = simulator.kv_capacity_tokens(STEP8, pol)
    hit = simulator.cacheable_tokens(isl, pol.kv_block_tokens) if simulator.prefix_pool_fits(pol, work, cap) else None
    assume(uniform_loop.applies(STEP8, pol, work, hit))
    counted = simulator.schedule(STEP8, pol, work, cap)
    looped = simulator._Loop(STEP8, pol, work, sc.BOUND, timed=False, capacity_tokens=cap).run()
    for part, other in ((counted.schedule, looped.schedule), (counted, looped)):
        for f in dataclasses.fields(part):
            a, b = getattr(part, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray):
                assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True), f.name
            elif f.name != "schedule":
                assert a == b, f.name


def test_the_counted_loop_leaves_what_it_cannot_count_to_the_array_loop():
    """Drawn lengths, a windowed model, a prompt over a whole-prompt budget, or a prefix hit
    that skips no whole block: `_Loop` schedules it (and where the cache is short of the
    requests in flight, `simulator.schedule` does not ask)."""
    pol, work = engines.load("vllm"), workload.benchmark(8, 1000, 100, None)
    assert uniform_loop.applies(STEP8, pol, work, None) and uniform_loop.applies(STEP8, pol, work, 992)
    assert not uniform_loop.applies(STEP8, pol, work, 0)
    assert not uniform_loop.applies(STEP8, pol, dataclasses.replace(work, isl=workload.Lengths(500, 1000)), None)
    assert not uniform_loop.applies(STEP8, dataclasses.replace(pol, chunked_prefill=False, max_tokens=999), work, None)
    assert not uniform_loop.applies(dataclasses.replace(STEP8, window=4096), pol, work, None)


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(st.sampled_from(["trtllm", "vllm", "sglang"]), st.integers(2, 16), st.integers(16, 1500), st.integers(2, 120))
def test_a_roomy_closed_loop_skips_the_kv_checks_and_keeps_its_schedule(engine, c, isl, osl):
    """Where C requests at their whole prompt and output fit the KV cache, the loop skips the
    admission and decode checks (`_Loop.roomy`): the schedule is the one the checks give at a
    capacity one block short of that whole, wherever that capacity never bound."""
    pol, work = engines.load(engine), workload.benchmark(c, isl, osl)
    blocks = c * -(-(isl + osl) // pol.kv_block_tokens)
    roomy = simulator.schedule(STEP8, pol, work, blocks * pol.kv_block_tokens)
    try:
        checked = simulator.schedule(STEP8, pol, work, (blocks - 1) * pol.kv_block_tokens)
    except sm.Unpredictable:      # a capacity too small for any schedule
        assume(False)
    assume(not checked.capacity_bound)
    for f in ("x0", "steps", "arrived", "first", "finished"):
        assert np.array_equal(getattr(roomy.schedule, f), getattr(checked.schedule, f)), f
    assert roomy.peak_blocks == blocks >= checked.peak_blocks


def test_vllm_admits_nothing_in_a_step_that_preempted_and_reserves_nothing_after():
    """vLLM V1 (vllm/v1/core/sched/scheduler.py): when a running request cannot get a block the
    last admitted one is preempted, no waiting request is scheduled in that step (`if not
    preempted_reqs`), and admission reserves nothing ahead, before or after. The replay keeps
    every step that followed a preemption free of admissions; a step without one admits again,
    so more requests run than under SGLang's rule (after a retraction every admission reserves
    the running requests' remaining output), on the same tight KV cache."""
    vllm = engines.load("vllm")
    assert vllm.after_preemption == "pause_admission" and vllm.admission_reserve_output == 0
    tight = dataclasses.replace(vllm, cache_fraction=0.27)          # 8B on H100: about 5.6 GB of KV
    work = workload.benchmark(64, 2000, 2000)
    loop = simulator._Loop(STEP8, tight, work, sc.BOUND, timed=False)
    calls, admissions = [], loop._admissions

    def watched(m, limit):      # (paused when asked, admitted any)
        was, got = loop.paused, admissions(m, limit)
        calls.append((was, got is not None))
        return got
    loop._admissions = watched
    paused = loop.run()
    assert paused.preemptions > 0 and (True, False) in calls and (True, True) not in calls
    assert (False, True) in calls[calls.index((True, False)):]         # admitting again after a step
    reserving = simulator.schedule(STEP8, dataclasses.replace(tight, after_preemption="reserve_output"), work)
    batch = lambda r: float((r.timeline[:, 1] * r.timeline[:, 2]).sum() / r.timeline[:, 1].sum())  # noqa: E731
    assert reserving.preemptions > 0 and batch(paused) > batch(reserving)


def test_an_engine_file_without_after_preemption_takes_its_stated_default(tmp_path):
    text = open(catalog.path("engines", "vllm"), encoding="utf-8").read()
    lines = [ln for ln in text.splitlines() if not ln.startswith("after_preemption:")]
    (tmp_path / "e.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert engines.load(str(tmp_path / "e.yaml")).after_preemption == engines.OPTIONAL["after_preemption"]
    (tmp_path / "bad.yaml").write_text("\n".join(lines) + "\nafter_preemption: evict\n", encoding="utf-8")
    with pytest.raises(SpecError, match="after_preemption: expected one of reserve_output, pause_admission"):
        engines.load(str(tmp_path / "bad.yaml"))
