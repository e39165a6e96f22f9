"""A user trial's command-line defects, each as the test that would have caught it: an SLO
without a unit, a layout mistake found after parsing (exit 2 with the usage line, as the
top-level help says), which calibration fit `simulate` used, memory in GiB, the KV cache's
size and the engine's memory fraction, the model's name and MODEL's help."""

from __future__ import annotations

import argparse
import io
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.base import yamlio
from rooflinec.base.errors import Problem, SpecError, UsageError
from rooflinec.base.yamlio import format_path
from rooflinec.base.quantities import gib
from rooflinec.cli import simulate as simulate_cli
from rooflinec.cli.app import run
from rooflinec.cli.plan import parse_slo
from rooflinec.base import csvtable
from rooflinec.serving import calibration, disagg, engines, metrics, simulator, workload
from rooflinec.serving import stepcost as sc
from rooflinec.serving.serving_model import Unpredictable
from rooflinec.spec import catalog, hfimport, load as spec, validate
from rooflinec.spec.hfconfig import Read
from rooflinec.spec.validate import MAX_DIMENSION

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
def test_the_label_names_the_fits_whose_parameters_are_used(device, engine, kind):
    """The label names each source the parameters come from (calibration.resolve's rule): the
    group's own fit; else host times from the engine's other kind on that device or its
    engine-wide fit, with the compute fraction of the kind's models; else the pooled fit."""
    params, label = TABLE.fit(device, engine, kind, "Shown")
    assert params == TABLE.of(device, engine, kind)
    other = "moe" if kind == "dense" else "dense"
    if (device, engine, kind) in TABLE.groups:
        assert params is TABLE.groups[(device, engine, kind)] and label == f"the calibration's ({device}, {engine}, {kind}) fit"
    elif (device, engine, other) in TABLE.groups or engine in TABLE.engines:
        mate = TABLE.groups.get((device, engine, other))
        host = mate or TABLE.engines[engine]
        assert (f"host times of ({device}, {engine}, {other})" if mate else "Shown's engine-wide host times") in label
        assert (params.per_layer_s, params.per_request_s) == (host.per_layer_s, host.per_request_s)
        eff = TABLE.kinds.get((None, kind))
        if eff is not None:
            assert params.compute_fraction == eff.compute_fraction and "the compute fraction of" in label
    else:
        assert params is TABLE.default and label.startswith("the pooled fit")


@pytest.mark.slow
def test_simulate_prints_the_fit_it_used():
    code, out, _ = cli("simulate", "llama-3.1-8b", "--device", "b200", "--engine", "vllm", *LOAD)
    assert code == 0 and out.splitlines()[1].startswith("prediction (composed: vLLM's engine-wide host times (b200 not calibrated with vllm)")
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
    line = next(x for x in text.splitlines() if " steps, mean batch per step " in x)
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


# --- 2. plausibility limits of every integer dimension, stated once (validate.MAX_DIMENSION) --

CONFIGS = Path(__file__).parent / "hf_configs"
MODELS = ("llama-3.1-8b", "deepseek-v3", "jamba-1.5-mini", "qwen3-next-80b-a3b")
HUGE = st.one_of(st.integers(MAX_DIMENSION + 1, 2 ** 53), st.integers(2 ** 53 + 1, 2 ** 200))


def _integer_fields(node, path=()):
    """Every integer leaf of a spec mapping, by path (booleans are not counts)."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _integer_fields(v, path + (k,))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _integer_fields(v, path + (i,))]
    return [path] if isinstance(node, int) and not isinstance(node, bool) else []


def _set(node, path, value):
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


SPEC_FIELDS = [(name, path) for name in MODELS
               for path in _integer_fields(yaml.safe_load(open(catalog.path("models", name), encoding="utf-8")))]


def test_the_limit_is_every_model_integers_maximum_in_the_schema():
    def integers(node):
        if isinstance(node, dict):
            if node.get("type") == "integer" or isinstance(node.get("type"), list) and "integer" in node["type"]:
                yield node
            for key, value in node.items():
                if key != "operators":   # declared operators' costs are not dimensions
                    yield from integers(value)
        elif isinstance(node, list):
            for value in node:
                yield from integers(value)
    found = list(integers(validate.schema("model")))
    assert len(found) > 30 and all(1 <= n["maximum"] <= MAX_DIMENSION for n in found)


@pytest.mark.slow
@given(st.sampled_from(SPEC_FIELDS), HUGE)
@settings(max_examples=40, deadline=None)
def test_a_model_spec_with_a_huge_integer_is_refused_at_it(field, value):
    name, path = field
    data = yaml.safe_load(open(catalog.path("models", name), encoding="utf-8"))
    _set(data, path, value)
    with pytest.raises(SpecError) as err:
        spec.load_model("huge.yaml", yaml.safe_dump(data, sort_keys=False))
    assert format_path(path) in {p.path for p in err.value.problems}, str(err.value)


def _read_keys(folder: str) -> dict:
    """The config keys whose counts the import writes into the spec, each with its spec path."""
    spec_, _ = hfimport.mapped(str(CONFIGS / folder))
    keys = {}
    for path in _integer_fields(spec_):
        node = spec_
        for part in path:
            node = node[part]
        if isinstance(node, Read):
            keys[node.where("").path] = format_path(path)
    return keys


CONFIG_KEYS = [(folder, key) for folder in ("llama-3.1-8b", "deepseek-v3", "jamba-1.5-mini",
                                            "qwen3-next-80b-a3b-instruct") for key in _read_keys(folder)]


def test_every_dimension_an_import_reads_is_tracked_to_its_key():
    keys = _read_keys("llama-3.1-8b")   # head_dim is hidden_size // num_attention_heads here: read from no key
    assert keys == {"hidden_size": "d_model", "num_hidden_layers": "n_layers", "vocab_size": "vocab",
                    "num_attention_heads": "attention.n_heads", "num_key_value_heads": "attention.n_kv_heads",
                    "intermediate_size": "mlp.d_ff",
                    "max_position_embeddings": "max_context"}


def _import_with(tmp_path, folder, key, value):
    data = json.loads((CONFIGS / folder / "config.json").read_text(encoding="utf-8"))
    data[key] = value
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(data, indent=2), encoding="utf-8")
    out = tmp_path / "out.yaml"
    code, printed, err = cli("import", str(cfg), "--out", str(out), "-q")
    return code, printed, err, cfg, out


@pytest.mark.slow
@given(st.sampled_from(CONFIG_KEYS), HUGE)
@settings(max_examples=40, deadline=None)
def test_an_import_with_a_huge_count_is_refused_at_its_key_and_writes_nothing(tmp_path_factory, case, value):
    folder, key = case
    code, printed, err, cfg, out = _import_with(tmp_path_factory.mktemp("huge"), folder, key, value)
    assert code == 1 and printed == "" and not out.exists()
    assert err.startswith(f"{cfg}:") and f": {key}: " in err and "parameters" not in err, err


def test_a_trillion_layers_are_refused_where_the_float_was(tmp_path):
    for value in (10 ** 12, 1e12):
        data = json.loads((CONFIGS / "llama-3.1-8b" / "config.json").read_text(encoding="utf-8"))
        data["num_hidden_layers"] = value
        with pytest.raises(SpecError) as err:
            _loaded(tmp_path, data)
        assert [p.path for p in err.value.problems] == ["num_hidden_layers"]


def _loaded(tmp_path, data):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return hfimport.load(str(cfg))


# --- 3. an imported spec's problems located in the config.json --------------------------------

def test_a_kv_head_count_that_does_not_divide_is_located_at_its_key(tmp_path):
    code, printed, err, cfg, out = _import_with(tmp_path, "llama-3.1-8b", "num_key_value_heads", 7)
    line = cfg.read_text().splitlines().index('  "num_key_value_heads": 7,') + 1
    col = len('  "num_key_value_heads": ') + 1
    assert code == 1 and printed == "" and not out.exists()
    assert err.startswith(f"{cfg}:{line}:{col}: num_key_value_heads: 7 KV heads do not divide 32 query heads")
    assert str(out) not in err and "attention.n_kv_heads" in err   # the spec's field named, not its file


def test_a_problem_of_a_derived_field_is_at_the_config_not_the_output():
    """rotary_dim from head_dim x partial_rotary_factor: no one key holds it."""
    problem = hfimport._relocated(Problem("c.json (imported)", 9, 9, "attention.rotary_dim", "must be >= 1"),
                                  {"attention": {"rotary_dim": 0}}, "c.json (imported)", "c.json")
    assert (problem.file, problem.line, problem.path) == ("c.json", 1, "(top level)")
    assert "attention.rotary_dim: must be >= 1" in problem.message


# --- 4. a config.json's errors speak of JSON -------------------------------------------------

@pytest.mark.parametrize("text,said", [
    ("", "file is empty; expected a JSON object of fields"),
    ("[" * 100 + "]" * 100, "config.json files are shallow"),
    ("[" * 100000 + "]" * 100000, "JSON nesting is too deep"),
    ('{"a": 1, "b": \x00}', "a config.json file is a JSON text file"),
    ('{"a": 1,, "b": 2}', "JSON error: Expecting property name enclosed in double quotes"),
    ('{"a": 1, "a": 2}', "a JSON reader would keep only the last one"),
    ("[1, 2]", "expected a config.json: a JSON object of fields"),
])
def test_json_input_errors_name_json(tmp_path, text, said):
    cfg = tmp_path / "config.json"
    cfg.write_text(text, encoding="utf-8")
    code, _, err = cli("import", str(cfg))
    assert code == 1 and said in err and "YAML" not in err and "spec" not in err, err


def test_json_syntax_errors_are_at_json_s_line_and_column(tmp_path):
    text = '{\n  "a": 1,\n  "b": [1, 2,,]\n}'
    cfg = tmp_path / "config.json"
    cfg.write_text(text, encoding="utf-8")
    with pytest.raises(json.JSONDecodeError) as raw:
        json.loads(text)
    with pytest.raises(SpecError) as err:
        yamlio.load(str(cfg), form=yamlio.JSON)
    assert (err.value.problems[0].line, err.value.problems[0].col) == (raw.value.lineno, raw.value.colno)


def test_json_values_are_json_s(tmp_path):
    """1e-05 is a number (YAML 1.1 reads it as a string), NaN a number refused as not finite
    (not the string "NaN"), a tab whitespace."""
    cfg = tmp_path / "config.json"
    cfg.write_text('{"eps":\t1e-05, "n": NaN}', encoding="utf-8")
    doc = yamlio.load(str(cfg), form=yamlio.JSON)
    assert doc.data["eps"] == 1e-05 and math.isnan(doc.data["n"])
    data = json.loads((CONFIGS / "llama-3.1-8b" / "config.json").read_text(encoding="utf-8"))
    data["num_hidden_layers"] = "VALUE"
    cfg.write_text(json.dumps(data, indent=2).replace('"VALUE"', "NaN"), encoding="utf-8")
    code, _, err = cli("import", str(cfg))
    assert code == 1 and "num_hidden_layers: NaN is not accepted; numbers must be finite" in err and '"NaN"' not in err


# --- a second trial: an open loop past capacity, a simulation past max_context -------------------

OPEN = ("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "trtllm", "--isl", "1024", "--osl", "128",
        "--requests", "300")


@pytest.mark.slow
def test_an_open_loop_past_capacity_says_its_queue_grows():
    code, out, _ = cli(*OPEN, "--rate", "500", "--json")
    doc = json.loads(out)
    grows = doc["backlog"]
    assert code == 0 and grows["completed_per_s"] < 0.5 * grows["arrived_per_s"]
    assert grows["arrived_per_s"] == pytest.approx(500, rel=0.25)      # 150 Poisson arrivals
    code, out, _ = cli(*OPEN, "--rate", "500")
    assert "not a steady state: " in out and "depends on --requests" in out
    code, out, _ = cli(*OPEN, "--rate", "5", "--json")   # well inside capacity: a steady state
    assert code == 0 and "backlog" not in json.loads(out)
    # a third of capacity (about 26.5/s), 1000 requests at seed 0: 482 of 499 arrivals complete in
    # the second half, a growth of 17 past the noise allowance 15 (the count at its ends 7 and 24),
    # but 96.6% of them: steady, as every other seed
    code, out, _ = cli(*OPEN[:-2], "--rate", "10", "--json")
    assert code == 0 and "backlog" not in json.loads(out)
    # SGLang at 150% of its capacity (about 22.5/s): the running count pinned near 388, the growth
    # waiting (183 on average over the second half, 97 over the run), 81 grown against a running
    # count's noise of 84: the standing queue counts
    sglang = [a if a != "trtllm" else "sglang" for a in OPEN[:-2]]
    code, out, _ = cli(*sglang, "--rate", "33.75", "--seed", "1", "--json")
    doc = json.loads(out)
    assert code == 0 and "backlog" in doc and doc["in_engine_mean"]["waiting"] > 84


def _run(arrival, finish, rate=1.0, admitted=None):
    """A Result's fields `metrics.backlog` reads: each request admitted in a run of its own
    (at its arrival unless `admitted` says when)."""
    start = np.asarray(arrival if admitted is None else admitted, float)
    timeline = np.zeros((len(start), 5))
    timeline[:, 0] = start
    return SimpleNamespace(arrival_s=np.asarray(arrival, float), finish_s=np.asarray(finish, float),
                           workload=SimpleNamespace(rate=rate), timeline=timeline,
                           schedule=SimpleNamespace(admitted=np.arange(len(start))))


def test_the_backlog_is_judged_on_the_second_half_of_the_arrivals():
    """1000 arrivals 0.1 s apart (10/s); the second half's span runs from the 501st arrival
    (50.0 s) to the last (99.9 s), 49.9 s with 499 arrivals after its start. Each request done
    5 s after it arrives: 499 ends in the span (the final drain, after the last arrival, does
    not count), no growth. Served one every 0.125 s from 0.5 s (8/s), request i ends at
    0.5 + 0.125 (i + 1): in (50.0, 99.9] for i + 1 = 397 ... 795, 399 of them (80%, under 95%),
    a growth of 100 against the noise allowance 3 sqrt(2 r + 1), r the running count, here
    every request from its arrival (104 in the engine at 50 s, 205 at 99.9 s: r about 155, an
    allowance near 53). Each condition alone is not enough: 20 requests each 5 s long, none
    done in the second half's 0.9 s (0%), grow by 9 against an allowance near 17 (a run too
    short to tell); 10,000 requests of which every 33rd of the second half is held past the
    last arrival grow by about 150 (past the noise) with 97% of the arrivals completed (not
    material). Three requests are too few to rate; a second half at one instant is a burst,
    rated at the workload's rate."""
    t = np.arange(1000) * 0.1
    assert metrics.backlog(_run(t, t + 5)) is None
    got = metrics.backlog(_run(t, 0.5 + 0.125 * (np.arange(1000) + 1)))
    assert got == {"arrived_per_s": pytest.approx(499 / 49.9), "completed_per_s": pytest.approx(399 / 49.9),
                   "span_s": pytest.approx(49.9)}
    short = np.arange(20) * 0.1
    assert metrics.backlog(_run(short, short + 5)) is None
    long = np.arange(10_000) * 0.1
    held = long + 5
    held[5000::33] = long[-1] + 1
    assert metrics.backlog(_run(long, held)) is None
    assert metrics.backlog(_run([0, 1, 2], [10, 20, 30])) is None
    assert metrics.backlog(_run([0, 0, 0, 0], [1, 2, 3, 4], rate=1e9)) == {"arrived_per_s": 1e9,
                                                                          "completed_per_s": 0.0, "span_s": 0.0}


def test_a_steady_poisson_stream_is_not_called_growing_however_short():
    """Poisson arrivals at 10/s, each request 1.2 s in the engine (a batching engine well below
    capacity: the count in it is Poisson, mean 12): 200 seeds each of 20, 100 and 1000
    requests, none past the noise allowance (3 standard deviations of the count's change,
    about 1 in 700 by a normal tail). The same arrivals through one server of 8 requests/s
    (FCFS: admitted at max(f_i-1, a_i), done 1/8 s later) are past it at 1000 requests in every
    one of 20 seeds: about 500 arrive in the second half's 50 s and 400 complete, a growth near
    100, while one runs at a time: an allowance of 3 sqrt(2 x 1 + 1) = 5.2."""
    rng = np.random.default_rng(7)
    for n in (20, 100, 1000):
        for _ in range(200):
            t = np.cumsum(rng.exponential(0.1, n))
            assert metrics.backlog(_run(t, t + 1.2, rate=10)) is None
    for _ in range(20):
        t = np.cumsum(rng.exponential(0.1, 1000))
        begun, served = np.empty(1000), np.empty(1000)
        for i, a in enumerate(t):
            begun[i] = max(served[i - 1] if i else 0.0, a)
            served[i] = begun[i] + 1 / 8
        assert metrics.backlog(_run(t, served, rate=10, admitted=begun)) is not None


def test_simulate_warns_past_the_model_max_context():
    code, out, err = cli("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "vllm", "--isl", "131000",
                         "--osl", "128", "--concurrency", "1", "--requests", "1", "--warmup", "0", "--json")
    assert "max_context: 131,128 tokens (--isl + --osl) run past the model's max_context, 131,072" in err


# --- a third trial: the closed loop's front-end latency, the chart's path, the seed, wide figures --

CLOSED = ("simulate", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "trtllm", "--isl", "1024", "--osl", "128",
          "--concurrency", "1", "--requests", "3", "--warmup", "0")


def test_a_closed_loop_says_its_front_end_latency_is_outside_the_clients_cycle():
    """The shipped (h100-sxm, trtllm) fit has a front-end latency: TTFT and E2E carry it, the
    replayed engine's cycle does not, so requests/s exceeds C / E2E and the text says why."""
    code, out, _ = cli(*CLOSED, "--json")
    doc = json.loads(out)
    latency = doc["parameters"]["request_latency_s"]
    assert code == 0 and doc["closed_loop"] and latency > 0
    assert doc["requests_per_s"] > 1 / doc["e2e_s"]["mean"]
    code, out, _ = cli(*CLOSED)
    assert f"the front end's latency, {1e3 * latency:.3g} ms, is in TTFT and E2E but not in the clients' cycle" in out
    code, out, _ = cli(*CLOSED[:-6], "--rate", "1", "--requests", "3")      # an open loop's arrivals do not wait on it
    assert code == 0 and f"the front end's latency, {1e3 * latency:.3g} ms, is in TTFT and E2E (--request" in out
    assert "clients' cycle" not in out


@pytest.mark.parametrize("chart, why", [("timeline.png", "does not end in .svg"), ("folder.svg", "is a folder")])
def test_a_chart_path_that_cannot_be_written_is_refused_before_any_work(tmp_path, chart, why):
    (tmp_path / "folder.svg").mkdir()
    code, _, err = cli(*CLOSED, "--chart", str(tmp_path / chart))
    assert code == 2 and why in err and sorted(p.name for p in tmp_path.iterdir()) == ["folder.svg"]


def test_a_negative_seed_is_a_usage_error():
    code, _, err = cli(*CLOSED, "--seed", "-5")
    assert code == 2 and "--seed: -5 must be a whole number >= 0" in err and "Traceback" not in err


def test_latency_columns_stay_apart_however_wide_their_figures():
    """A TTFT of 692,337.94 ms (9 characters) beside 676,603.62: every column is its widest
    figure plus one space, so no two figures run together."""
    wide = {k: {"mean": 692.33794, "p50": 676.60362, "p90": 1224.24933, "p99": 1360.20197} for k in
            ("ttft_s", "tpot_s", "itl_s", "e2e_s")}
    lines = simulate_cli._latency_table([(None, wide)])
    assert lines[1].split() == ["TTFT", "692337.94", "676603.62", "1224249.33", "1360201.97"]
    assert len({len(x) for x in lines[1:]}) == 1 and lines[0].endswith("p99  (ms)")


@pytest.mark.parametrize("load", [("--concurrency", "8"), ("--rate", "10", "--requests", "400", "--warmup", "40")])
def test_the_requests_in_the_engine_obey_littles_law(load):
    """The requests running and waiting on average over the throughput's span: their sum is
    completed requests/s x mean time in the engine (E2E less the front end's latency), within
    3% (warm-up requests inside the span; an identity otherwise, Little's law by construction).
    The running count is checked against the timeline's own, each run's running requests over
    its duration (to the next run's start, the last to the last token), clipped to the span:
    the same without preemptions, the closed loop's C clients in the engine all along but the
    drain; the queue wait is inside TTFT."""
    code, out, _ = cli(*CLOSED[:-6], *load, "--json")
    doc = json.loads(out)
    held = doc["in_engine_mean"]["running"] + doc["in_engine_mean"]["waiting"]
    in_engine = doc["e2e_s"]["mean"] - doc["parameters"]["request_latency_s"]
    assert code == 0 and doc["preemptions"] == 0
    assert held == pytest.approx(doc["requests_per_s"] * in_engine, rel=0.03)
    assert doc["in_engine_mean"]["running"] == pytest.approx(_timeline_running(load), rel=1e-6)
    if load[0] == "--concurrency":
        assert 0.9 * 8 <= held <= 8
    assert 0 <= doc["queue_wait_s"]["mean"] <= doc["ttft_s"]["mean"] - doc["parameters"]["request_latency_s"]


def _timeline_running(load) -> float:
    """The time-averaged running batch from the simulator's timeline, over the measured span."""
    from rooflinec.cli import quick
    flags = dict(zip(load[::2], load[1::2]))
    number = {k: int(flags[f"--{k}"]) if f"--{k}" in flags else None for k in ("concurrency", "requests", "warmup")}
    work = simulate_cli.workload_of(argparse.Namespace(
        **number, rate=float(flags["--rate"]) if "--rate" in flags else None, seed=0, isl="1024", osl="128",
        unique_prompts=None))
    policy = engines.load("trtllm")
    model, device = quick._model("llama-3.1-8b"), quick._device("h100-sxm")
    params = calibration.load(calibration.shipped()).of("h100-sxm", "trtllm", "dense")
    res = simulator.simulate(sc.build(sc.Deployment(model, device, 1, "bf16", policy.kv_dtype())), policy, work, params)
    m = res.measured
    start, stop = res.arrival_s[m].min(), res.finish_s[m].max()
    ends = np.append(res.timeline[1:, 0], res.finish_s.max())
    dur = np.clip(ends, start, stop) - np.clip(res.timeline[:, 0], start, stop)
    return float(dur @ res.timeline[:, 2] / (stop - start))


# --- a fourth trial: hostile rows, calibrations and arrival rates --------------------------------

V2 = Path(__file__).resolve().parents[2] / "shared" / "measured" / "serving-v2-visible.csv"


def _v2_rows(tmp_path, name, edits) -> Path:
    """A CSV of the visible rows' header and the rows `edits` makes from them (row -> rows)."""
    if not V2.is_file():
        pytest.skip("../shared/measured/serving-v2-visible.csv absent: the measured rows are read in place")
    import csv
    with open(V2, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    out = tmp_path / name
    with open(out, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in edits(rows):
            w.writerow(r)
    return out


def test_a_workload_past_the_event_budget_is_refused_before_any_array():
    """10^9 clients send 2.2 x 10^10 requests: the schedule says so at once (no 164 GiB of
    lengths drawn), and simulate refuses the defaults on its command line."""
    from rooflinec.cli import quick
    step = sc.build(sc.Deployment(quick._model("llama-3.1-8b"), H100, 1, "bf16", "bf16"))
    with pytest.raises(Unpredictable, match=r"22,000,000,000 requests .* past the 5,000,000 events"):
        simulator.schedule(step, engines.load("trtllm"), workload.benchmark(10**9, 1024, 128))
    code, _, err = cli(*CLOSED[:-6], "--concurrency", "1000000000")
    assert code == 2 and "past the 5,000,000 the simulator's event budget replays" in err and "20C" in err


def test_a_rate_whose_arrivals_outrun_a_double_is_refused():
    code, _, err = cli(*CLOSED[:-6], "--rate", "1e-300")
    assert code == 2 and "--rate: 1e-300 requests/s spreads 1,000 requests over 1e+303 s" in err


def test_a_prefill_batch_past_a_step_budget_is_the_rows_not_the_command_lines():
    pools = SimpleNamespace(prefill_batch=10**9)
    with pytest.raises(Unpredictable, match="a prefill batch of 1,000,000,000 prompts of 8,000 tokens"):
        disagg.prefill_policy(pools, engines.load("trtllm"), 8000)


def test_hostile_disaggregated_rows_are_not_predicted_with_their_reason(tmp_path):
    """A decode tp that does not divide the heads and a prefill batch of 10^9: each row is
    listed with why, no traceback; the report is written."""
    def edits(rows):
        d = next(r for r in rows if r["mode"] == "disagg")
        return [dict(d, decode_tp="3", row_id="tp3"), dict(d, prefill_batch="1000000000", row_id="batch")]
    csv_file = _v2_rows(tmp_path, "disagg.csv", edits)
    code, out, err = cli("validate", str(csv_file), "--out", str(tmp_path / "v"), "--format", "json")
    assert code == 0 and "Traceback" not in err and "2 rows not predicted" in out
    why = {r["row_id"]: r["reason"] for r in json.loads((tmp_path / "v" / "serving.json").read_text())["unpredictable"]}
    assert "tensor-parallel degree 3 does not divide" in why["tp3"]
    assert "past the 2,147,483,648 tokens a step's budget may hold" in why["batch"]


def test_calibrate_says_how_many_rows_it_fitted(tmp_path):
    def edits(rows):
        few = rows[130:133]
        return few + [dict(few[0], device="tpu-v9", row_id="elsewhere")]
    csv_file = _v2_rows(tmp_path, "four.csv", edits)
    code, out, err = cli("calibrate", str(csv_file), "--out", str(tmp_path / "cal.yaml"))
    assert code == 0 and "fitted on 3 of 4 aggregated rows" in err
    code, out, err = cli("calibrate", str(csv_file), "--out", str(tmp_path / "cal.yaml"), "-q")
    assert code == 0 and err == ""


@pytest.mark.parametrize("value", ["1.0e+307", "604801.0"])
def test_a_calibration_time_past_a_week_is_refused_at_it(tmp_path, value):
    """Finite but huge fixed times summed over a run's steps overflow to inf: a time is at
    most a week (a measured run's longest), said at the parameter without its name twice."""
    cal = tmp_path / "cal.yaml"
    cal.write_text(f"kind: simulator\ndefault:\n  parameters: {{per_kernel_s: {value}}}\n")
    with pytest.raises(SpecError) as err:
        calibration.load(str(cal))
    assert str(err.value).endswith("default.parameters.per_kernel_s: expected a time in seconds from 0 to 604800 "
                                   "(a week)")


def test_a_quoted_line_break_does_not_shift_the_lines_after_it(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text('a,b\n1,"x\ny"\n3,4\n', encoding="utf-8")
    table = csvtable.lines(str(f), 10**6, "table")
    assert list(csvtable.data(str(f), table, [])) == [(2, ["1", "x\ny"]), (4, ["3", "4"])]


def test_an_unknown_mode_is_one_problem_and_control_characters_never_reach_the_page(tmp_path):
    """A mode of 'hybrid' is said once, not with a problem for every prefill_* and decode_*
    cell it leaves empty; a row id carrying ESC and NUL is spelled out in the HTML report
    (\\x1b, \\x00), as in the Markdown one and on the terminal."""
    def bad_mode(rows):
        return [dict(rows[130], mode="hybrid")]
    code, _, err = cli("validate", str(_v2_rows(tmp_path, "mode.csv", bad_mode)), "--out", str(tmp_path / "m"))
    assert code == 1 and err.count("\n") == 1 and "mode: 'hybrid' is not agg or disagg" in err

    def controls(rows):
        return [dict(rows[130], row_id="run\x1b[31m\x00red")] + rows[131:133]
    code, _, err = cli("validate", str(_v2_rows(tmp_path, "esc.csv", controls)), "--out", str(tmp_path / "e"))
    page = (tmp_path / "e" / "serving.html").read_text(encoding="utf-8")
    assert code == 0 and "run\\x1b[31m\\x00red" in page and "\x1b" not in page and "\x00" not in page


def test_a_misspelt_calibration_block_is_refused_at_its_key(tmp_path):
    """'group' for 'groups' would read as a file with no groups: every group pooled, silently."""
    cal = tmp_path / "cal.yaml"
    cal.write_text("kind: simulator\ndefault:\n  parameters: {}\ngroup:\n- {}\n")
    with pytest.raises(SpecError) as err:
        calibration.load(str(cal))
    assert str(err.value) == (f"{cal}:4:1: group: unknown key; known: kind, fitted_on, method, fitted, default, "
                              "engines, groups, kinds, intervals")


# --- a fifth trial: a harness that times the engine without the measured rows' front end --------

def test_request_latency_replaces_the_fitted_front_end_in_ttft_and_e2e_only():
    """The measured rows' TTFT carries their server's front end, fitted as the request latency;
    a benchmark that times the engine alone sets it with --request-latency. An open loop's
    schedule does not depend on it: TTFT and E2E move by the difference, TPOT not at all."""
    load = (*CLOSED[:-6], "--rate", "2", "--requests", "50", "--json")
    fitted, alone = (json.loads(cli(*load, *extra)[1]) for extra in ((), ("--request-latency", "0")))
    shift = fitted["parameters"]["request_latency_s"]
    assert shift > 0 and alone["parameters"]["request_latency_s"] == 0
    assert "from --request-latency" in alone["parameters"]["source"]
    for what in ("ttft_s", "e2e_s"):
        assert alone[what]["mean"] == pytest.approx(fitted[what]["mean"] - shift, rel=1e-9)
    assert alone["tpot_s"] == fitted["tpot_s"] and alone["steps"] == fitted["steps"]


@pytest.mark.parametrize("value, why", [("-0.1", "expected a time in seconds from 0 to 604800"),
                                        ("inf", "expected a time in seconds"), ("nan", "expected a time")])
def test_a_request_latency_that_is_not_a_time_is_a_usage_error(value, why):
    code, _, err = cli(*CLOSED, "--request-latency", value)
    assert code == 2 and f"--request-latency: {value}: {why}" in err and "Traceback" not in err


def test_a_bound_takes_no_request_latency():
    code, _, err = cli(*CLOSED, "--bound", "--request-latency", "0.1")
    assert code == 2 and "a bound takes no time outside the engine" in err
    assert cli(*CLOSED, "--bound", "--request-latency", "-0")[0] == 0      # what a bound takes


def test_plan_prices_ttft_with_the_request_latency_it_is_given():
    """plan's TTFT holds the pooled fit's front-end latency; --request-latency 0 takes exactly
    that latency off every TTFT and leaves TPOT, and the output says which latency it used."""
    base = ("plan", "llama-3.1-8b", "--slo", "tpot<=30ms", "--devices", "h100-sxm", "--gpus", "1", "--isl", "1024",
            "--osl", "128", "--concurrency", "8", "--aggregated", "--json")
    fitted, alone = (json.loads(cli(*base, *extra)[1]) for extra in ((), ("--request-latency", "0")))
    shift = calibration.load(calibration.shipped()).default.request_latency_s
    best = [d["best_per_device"]["h100-sxm"][0] for d in (fitted, alone)]
    assert len({(b["label"], b["weights"], b["kv_cache"], b["batch"]) for b in best}) == 1
    one, other = (b["prediction"] for b in best)
    assert shift > 0 and alone["calibration"]["request_latency_s"] == 0
    assert "ttft_s" not in other["interval"] and other["interval"]["ttft_no_interval"] == calibration.NO_TTFT_BAND
    assert other["interval"]["tpot_s"] == one["interval"]["tpot_s"]
    assert other["ttft_s"] == pytest.approx(one["ttft_s"] - shift, rel=1e-9) and other["tpot_s"] == one["tpot_s"]
    code, out, _ = cli(*base[:-1], "--request-latency", "0")
    assert code == 0 and "request latency 0.0 s from --request-latency" in out


# --- lengths drawn as aiperf draws them: normal, redrawn below 0, rounded up ---------------------

def test_a_normal_length_has_the_mean_and_spread_asked_for():
    """normal:1024,128 over 20,000 draws: mean 1024 + 0.5 (rounding up adds half a token on
    average), within 3 standard errors (128 / sqrt(20000) = 0.91), its sd 128 within 2%."""
    x = workload.Lengths.parse("normal:1024,128", "--isl").draw(20_000, np.random.default_rng(0))
    assert x.dtype == np.int64 and abs(x.mean() - 1024.5) < 3 * 0.91 and abs(x.std() / 128 - 1) < 0.02


def test_a_normal_length_is_truncated_at_zero_as_aiperf_redraws():
    """normal:10,20 is redrawn below 0: the mean of a normal truncated at 0 is
    mu + sigma phi(a) / (1 - Phi(a)), a = -mu / sigma = -0.5: 10 + 20 x 0.35207 / 0.69146
    = 20.18, plus half a token for rounding up, within 3 standard errors (its sd 13.94)."""
    x = workload.Lengths.parse("normal:10,20", "--isl").draw(20_000, np.random.default_rng(1))
    phi, tail = math.exp(-0.125) / math.sqrt(2 * math.pi), 0.5 * (1 + math.erf(0.5 / math.sqrt(2)))
    assert x.min() >= 1 and abs(x.mean() - (10 + 20 * phi / tail + 0.5)) < 3 * 13.94 / math.sqrt(20_000)


@settings(max_examples=40, deadline=None)
@given(st.integers(20, 10**6), st.floats(0.01, 1.0), st.integers(0, 2**32))
def test_normal_lengths_are_seeded_and_within_ten_sds_of_their_mean(mean, spread, seed):
    """sd <= mean / 20, so the floor at 1 and the redraws below 0 never act: every draw is the
    ceiling of a normal, within 10 sd (+1 for rounding up) of the mean, the same for a seed."""
    sd = spread * mean / 20
    lengths = workload.Lengths(1, mean + math.ceil(workload.TAIL_SDS * sd), mean, sd)
    one, two = (lengths.draw(500, np.random.default_rng(seed)) for _ in range(2))
    assert (one == two).all() and (np.abs(one - mean) <= 10 * sd + 1).all()


@pytest.mark.parametrize("text, said", [("normal:1024,0", "ISL 1024,"), ("normal:512,64", "ISL normal mean 512, sd 64,")])
def test_simulate_says_the_length_distribution_it_drew(text, said):
    code, out, _ = cli(*CLOSED[:6], "--isl", text, "--osl", "8", "--rate", "1", "--requests", "20")
    assert code == 0 and said in out


@pytest.mark.parametrize("text, why", [("normal:1024", "is not a token count"), ("normal:0,5", "mean is at least 1"),
                                       ("normal:1e3,5", "is not a token count"), ("normal:-5,2", "is not a token count")])
def test_a_malformed_normal_length_is_a_usage_error(text, why):
    code, _, err = cli(*CLOSED[:6], "--isl", text, "--osl", "8", "--rate", "1")
    assert code == 2 and why in err and "Traceback" not in err


def test_a_replaced_request_latency_prints_no_ttft_interval_but_keeps_tpot_s():
    """The TTFT band was measured on TTFTs holding the fitted front-end latency: moved to
    another latency it would describe nothing measured, so simulate drops it and says why,
    aggregated and disaggregated alike, and keeps TPOT's (aggregated, the same interval: the
    replay's schedule does not hold the latency; the disaggregated loop's cycle does)."""
    disagg = ("--concurrency", "8", "--prefill-workers", "1", "--decode-workers", "1")
    for load in (CLOSED[-6:], disagg):
        base = (*CLOSED[:-6], *load, "--json")
        fitted, alone = (json.loads(cli(*base, *extra)[1]) for extra in ((), ("--request-latency", "0")))
        assert "ttft_mean_s" in fitted["interval"] and "ttft_mean_s" not in alone["interval"]
        assert alone["interval"]["ttft_no_interval"] == calibration.NO_TTFT_BAND
        assert "tpot_mean_s" in alone["interval"]
        if load is not disagg:
            assert alone["interval"]["tpot_mean_s"] == fitted["interval"]["tpot_mean_s"]
        code, out, _ = cli(*base[:-1], "--request-latency", "0")
        assert code == 0 and "; " + calibration.NO_TTFT_BAND in out


def test_plan_solve_refuses_a_request_latency_it_would_ignore():
    code, _, err = cli("plan", "llama-3.1-70b", "--solve", "bandwidth", "--device", "h100-sxm", "--tp", "8",
                       "--batch", "64", "--context", "8192", "--slo", "tpot<=20ms", "--request-latency", "0")
    assert code == 2 and "--solve solves the decode step" in err


def test_disaggregated_pools_refuse_a_normal_length_and_the_context_check_takes_the_draws(tmp_path):
    code, _, err = cli(*CLOSED[:6], "--isl", "normal:1024,64", "--osl", "8", "--concurrency", "4",
                       "--prefill-workers", "1", "--decode-workers", "1")
    assert code == 2 and "Traceback" not in err
    # Llama-3.1-8B's context is 131,072: a normal about 130,000 with sd 2,000 draws past it
    code, _, err = cli(*CLOSED[:6], "--isl", "normal:130000,2000", "--osl", "8", "--rate", "1", "--requests", "20")
    assert "run past the model's max_context, 131,072" in err
    code, _, err = cli(*CLOSED[:6], "--isl", "normal:1024,64", "--osl", "8", "--rate", "1", "--requests", "20")
    assert code == 0 and "max_context" not in err


def test_plan_says_when_the_front_end_latency_alone_misses_the_ttft_target():
    """A TTFT target under the pooled fit's 177 ms front-end latency: nothing can meet it, and
    the pruning reason says why instead of 'misses the SLO'; with --request-latency 0 it goes."""
    base = ("plan", "llama-3.1-8b", "--devices", "h100-sxm", "--gpus", "1", "--isl", "1024", "--osl", "128",
            "--concurrency", "8", "--aggregated", "--json")
    latency = calibration.load(calibration.shipped()).default.request_latency_s
    slo = f"ttft<={1e3 * latency / 2:.0f}ms,tpot<=30ms"
    doc = json.loads(cli(*base, "--slo", slo)[1])
    reason = f"prediction: the front end's latency alone, {1e3 * latency:.3g} ms, misses the TTFT target"
    assert doc["feasible"] == 0 and any(r.startswith(reason) for r in doc["pruned"])
    doc = json.loads(cli(*base, "--slo", slo, "--request-latency", "0")[1])
    assert not any(r.startswith(reason) for r in doc["pruned"])


def test_simulate_json_gives_the_workload_as_fields():
    code, out, _ = cli(*CLOSED[:6], "--isl", "normal:512,64", "--osl", "16-32", "--rate", "2", "--requests", "20",
                       "--json")
    load = json.loads(out)["load"]
    assert code == 0 and load["isl"] == {"normal": {"mean": 512, "sd": 64.0}} and load["osl"] == {"uniform": [16, 32]}
    assert (load["closed_loop"], load["rate_per_s"], load["requests"], load["warmup"]) == (False, 2.0, 20, 0)
