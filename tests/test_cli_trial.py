"""A user trial's command-line defects, each as the test that would have caught it: an SLO
without a unit, a layout mistake found after parsing (exit 2 with the usage line, as the
top-level help says), which calibration fit `simulate` used, memory in GiB, the KV cache's
size and the engine's memory fraction, the model's name and MODEL's help."""

from __future__ import annotations

import io
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.base.errors import UsageError
from rooflinec.base.quantities import gib
from rooflinec.cli.app import run
from rooflinec.cli.plan import parse_slo
from rooflinec.serving import calibration, engines, simulator
from rooflinec.serving import stepcost as sc
from rooflinec.serving.serving_model import Unpredictable
from rooflinec.spec import catalog, load as spec

LLAMA8 = spec.load_model(catalog.path("models", "llama-3.1-8b"))
LLAMA70 = spec.load_model(catalog.path("models", "llama-3.1-70b"))
H100 = spec.load_hardware(catalog.path("hardware", "h100-sxm"))
LOAD = ["--isl", "16", "--osl", "4", "--concurrency", "1", "--requests", "2", "--warmup", "0"]


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return run(list(argv), out, err), out.getvalue(), err.getvalue()


# --- 1. an SLO without its unit ---------------------------------------------------------------

@pytest.mark.slow
@given(st.one_of(st.integers(1, 10**6).map(str), st.floats(1e-3, 1e6).map(repr)), st.sampled_from(("ttft", "tpot")))
@settings(max_examples=25, deadline=None)
def test_a_bare_number_is_refused_not_read_as_seconds(value, name):
    with pytest.raises(UsageError, match="has no unit"):
        parse_slo(f"{name}<={value}")


@pytest.mark.parametrize("text,seconds", [("tpot<=50ms", 0.05), ("tpot<=50 ms", 0.05), ("ttft<=2s", 2.0),
                                          ("tpot<=500us", 5e-4)])
def test_a_time_with_its_unit_is_read_in_seconds(text, seconds):
    slo = parse_slo(text)
    assert math.isclose(min(slo.ttft_s, slo.tpot_s), seconds)


def test_plan_with_a_unitless_slo_exits_2_with_its_usage():
    code, out, err = cli("plan", "llama-3.1-8b", "--devices", "h100-sxm", "--slo", "tpot<=50")
    assert code == 2 and out == "" and "usage: rooflinec plan" in err
    assert "'tpot<=50': 50 has no unit" in err and "tpot<=50ms" in err


# --- 5. command-line mistakes found after parsing: 2 and the usage line -----------------------

@pytest.mark.parametrize("argv,flag", [
    (["--attention-dp", "8", "--ep", "8", "--concurrency", "8"], "--ep"),      # experts on a dense model
    (["--tp", "3", "--concurrency", "8"], "--tp"),                             # 3 does not divide 32 heads
    (["--prefill-workers", "1", "--prefill-tp", "3", "--concurrency", "8"], "--prefill-tp"),
    (["--prefill-workers", "1", "--tp", "3", "--concurrency", "8"], "--tp"),
])
def test_simulate_layout_mistakes_are_usage_errors(argv, flag):
    code, out, err = cli("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "vllm",
                         "--isl", "1024", "--osl", "128", *argv)
    assert code == 2 and out == "", err
    assert "usage: rooflinec simulate" in err and f"error: {flag}: " in err and "Traceback" not in err


def test_plan_solve_with_a_tp_that_does_not_divide_is_a_usage_error():
    code, _, err = cli("plan", "llama-3.1-8b", "--slo", "tpot<=50ms", "--solve", "bandwidth", "--device",
                       "h100-sxm", "--tp", "3", "--batch", "8", "--context", "1024")
    assert code == 2 and "usage: rooflinec plan" in err and "--tp: tensor-parallel degree 3" in err


def test_measure_out_naming_a_file_is_a_usage_error(tmp_path):
    target = tmp_path / "a-file"
    target.write_text("")
    code, _, err = cli("measure", "model", "gpt2", "--device", "h100-sxm", "--out", str(target))
    assert code == 2 and "usage: rooflinec measure model" in err


def test_the_top_level_help_states_every_exit_status():
    code, out, _ = cli("--help")
    status = out.split("exit status", 1)[1]
    assert code == 0 and "every command" in status
    for number in ("0", "1", "2", "141"):
        assert f"\n  {number} " in status
    assert "0 built" not in out


# --- 6. which calibration fit simulate used ---------------------------------------------------

TABLE = calibration.load(calibration.shipped())


@pytest.mark.parametrize("device,engine,kind", [("b200", "vllm", "dense"), ("h100-sxm", "vllm", "dense"),
                                                ("h200-sxm", "vllm", "dense"), ("h200-sxm", "trtllm", "moe"),
                                                ("h100-sxm", "nope", "dense")])
def test_the_label_names_the_fit_whose_parameters_are_used(device, engine, kind):
    params, label = TABLE.fit(device, engine, kind, "Shown")
    assert params == TABLE.of(device, engine, kind)
    if (device, engine, kind) in TABLE.groups:
        assert params is TABLE.groups[(device, engine, kind)] and label == f"the calibration's ({device}, {engine}, {kind}) fit"
    elif engine in TABLE.engines:
        assert params is TABLE.engines[engine] and label.startswith("Shown's engine-wide fit: ")
        pairs = {k[:2] for k in TABLE.groups}
        why = (f"no {kind} model calibrated on ({device}, {engine})" if (device, engine) in pairs else
               f"{device} not calibrated with {engine}" if device in {p[0] for p in pairs} else f"{device} not calibrated")
        assert label == f"Shown's engine-wide fit: {why}"
    else:
        assert params is TABLE.default and label.startswith("the pooled fit")


@pytest.mark.slow
def test_simulate_prints_the_fit_it_used():
    code, out, _ = cli("simulate", "llama-3.1-8b", "--device", "b200", "--engine", "vllm", *LOAD)
    assert code == 0 and out.splitlines()[1] == "prediction (vLLM's engine-wide fit: b200 not calibrated)"
    assert "calibration for (b200" not in out


# --- 7. memory in GiB, the KV cache's size, the model's name ----------------------------------

def test_weights_that_leave_no_cache_are_said_in_gib_as_serve_says_them():
    step = sc.build(sc.Deployment(LLAMA70, H100, 1, "bf16", "bf16"))
    with pytest.raises(Unpredictable) as caught:
        simulator.kv_capacity_tokens(step, engines.load("vllm"))
    weights = step.deployment.weight_bytes()
    assert f"take {gib(weights)} per device" in str(caught.value) and " GB " not in str(caught.value)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_simulate_says_the_cache_size_and_the_fraction_it_comes_from(engine):
    code, out, _ = cli("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", engine, *LOAD, "--json")
    doc = json.loads(out)
    policy = engines.load(engine)
    dep = sc.Deployment(LLAMA8, H100, 1, "bf16", policy.kv_dtype())
    weights, per_token = float(dep.weight_bytes()), float(dep.kv_per_token())
    # vLLM: 0.9 of the whole memory, weights inside it; TensorRT-LLM: 0.9 of what the weights leave
    cache = (policy.cache_fraction * H100.capacity - weights if policy.cache_fraction_of == "total"
             else policy.cache_fraction * (H100.capacity - weights))
    block = policy.kv_block_tokens
    assert doc["kv_cache_tokens"] == int(cache // (per_token * block)) * block
    assert doc["kv_cache"] == {"fraction": policy.cache_fraction, "of": policy.cache_fraction_of}
    code, text, _ = cli("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", engine, *LOAD)
    line = text.splitlines()[-1]
    assert f"KV cache {doc['kv_cache_tokens']:,} tokens per device ({policy.name} gives" in line
    assert f"{policy.cache_fraction:g} of the memory" in line


@pytest.mark.slow
def test_simulate_names_a_config_folder_by_the_model_not_the_file():
    code, out, _ = cli("simulate", "tests/hf_configs/llama-3.1-8b", "--device", "h100-sxm", "--engine", "vllm",
                       *LOAD, "--json")
    served = cli("serve", "tests/hf_configs/llama-3.1-8b", "--device", "h100-sxm", "--json")[1]
    assert code == 0 and json.loads(out)["model"] == json.loads(served)["model"] != "config"


# --- 8. MODEL's help --------------------------------------------------------------------------

def test_simulate_help_says_a_config_json_is_a_model():
    code, out, _ = cli("simulate", "--help")
    assert code == 0 and "config.json" in out.split("MODEL", 2)[-1].split("--device")[0]
