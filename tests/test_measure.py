"""`rooflinec measure` on this machine: a small GPT-2-style model (two layers) profiled on the
CPU against a device spec calibrated here a moment before.

The law checked: an op whose data cannot be in the last-level cache cannot run faster than its
roofline, max(FLOPs / peak, bytes / bandwidth), with the peak and bandwidth measured by
`measure device` on this machine (the highest of the calibrations around the run: one alone,
on a shared machine, can catch a busy moment); a measurement under it (beyond the timer tolerance) means
the spec or the cost model is wrong. Fresh data fits when one launch's bytes fit; weights and
KV cache, read once a step, only when the whole step's bytes fit. The sizes come from this
machine's cache: the decode model is wide enough that its step streams twice the cache, the
prefill prompt long enough that one launch of the score ops does. Both run on one PyTorch
thread, so the two agree on what "this machine" is even when other work shares the cores.
"""

import importlib.util
import io
import os
import subprocess
import sys
from dataclasses import replace

import pytest

_MISSING = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
if os.environ.get("CI") and _MISSING:
    # .ci/run installs the [measure] extra: in CI these tests must run, never skip
    pytest.fail(f"CI is set but {', '.join(_MISSING)} is not installed "
                "(pip install -e '.[test,measure]')", pytrace=False)
torch = pytest.importorskip("torch", reason="the [measure] extra (PyTorch) is not installed")

from rooflinec.spec import load as spec  # noqa: E402
from rooflinec.cli.app import run  # noqa: E402
from rooflinec.measure import device as calibration  # noqa: E402
from rooflinec.measure import model as measuring  # noqa: E402
from rooflinec.measure import report  # noqa: E402
from rooflinec.measure.model import TOLERANCE  # noqa: E402

def tiny_spec(d_model: int = 256, max_context: int = 2048) -> str:
    """GPT-2's layout at a small width: two layers, four heads, GPT-2's vocabulary."""
    return f"""\
name: tiny GPT-2
d_model: {d_model}
n_layers: 2
vocab: 50257
max_context: {max_context}
attention: {{n_heads: 4, n_kv_heads: 4, head_dim: {d_model // 4}, qkv_bias: true, out_bias: true}}
mlp: {{kind: gelu, d_ff: {4 * d_model}, bias: true}}
norm: {{kind: layernorm, bias: true}}
positions: learned
tied_embeddings: true
source: GPT-2's layout at small widths, for tests
"""


TINY = tiny_spec()
MARGIN = 2              # the sizes stream at least twice the cache, where an LRU keeps nothing
AFFORDED = 2**30        # bytes of weights (decode) or of one score buffer (prefill) a test spends
DECODE_CONTEXT = 128


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A spec tree: hardware/here.yaml measured now, models/tiny.yaml, and a study naming both."""
    root = tmp_path_factory.mktemp("measured")
    (root / "models").mkdir()
    (root / "models" / "tiny.yaml").write_text(TINY)
    out = io.StringIO()
    code = run(["measure", "device", "--quick", "--threads", "1",
                "--out", str(root / "hardware" / "here.yaml")], out, out)
    assert code == 0, out.getvalue()
    (root / "study.yaml").write_text("model: tiny\ndevices: [here]\ndtype: fp32\n"
                                     "analyses: {ledger: {phases: [decode], workloads: [{batch: 1, context: 128}]}}\n")
    return root


IMPLS = ["reference", pytest.param("transformers", marks=pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"))]
PHASES = ("decode", "prefill")
_RUNS = {}


@pytest.fixture(params=IMPLS)
def impl(request):
    return request.param


def decode_width(dev) -> int:
    """The narrowest width (a power of two from 256) whose decode step streams MARGIN x the
    cache, by the cost model's own bytes: so every weight comes from memory, on any cache."""
    d = 256
    while True:
        model = spec.load_model("tiny.yaml", tiny_spec(d))
        rows = measuring.predict(model, dev, "fp32", "decode", 1, DECODE_CONTEXT, {}).values()
        weights = sum(r.resident for r in rows)
        if weights > AFFORDED:
            pytest.skip(f"this machine's last-level cache ({dev.cache_size / 2**20:.0f} MiB) holds "
                        f"what a decode step up to {AFFORDED / 2**30:.0f} GiB streams: nothing here "
                        "is sure to come from memory, so the roofline law goes untested")
        if sum(r.bytes for r in rows) >= MARGIN * dev.cache_size:
            return d
        d *= 2


def prefill_context(dev) -> int:
    """The shortest prompt (a multiple of 512 from 2048) whose score ops, 4 heads x S^2 fp32
    read and written in one launch, move MARGIN x the cache."""
    S = 2048
    while 2 * 4 * 4 * S * S < MARGIN * dev.cache_size:
        S += 512
    if 4 * 4 * S * S > AFFORDED:
        pytest.skip(f"this machine's last-level cache ({dev.cache_size / 2**20:.0f} MiB) holds "
                    f"a prefill's score matrix up to {AFFORDED / 2**30:.0f} GiB: no op is sure "
                    "to run from memory, so the roofline law goes untested")
    return S


def workload(tree, phase):
    """(model, device, context) for `phase`, sized from the measured device's cache."""
    dev = spec.load_hardware(str(tree / "hardware" / "here.yaml"))
    if phase == "decode":
        return spec.load_model("tiny.yaml", tiny_spec(decode_width(dev))), dev, DECODE_CONTEXT
    S = prefill_context(dev)
    return spec.load_model("tiny.yaml", tiny_spec(max_context=S)), dev, S


def calibrated_now(tree):
    """This machine's fp32 peak and bandwidth, measured again now (as the tree's device was)."""
    cal = calibration.calibrate("cpu", quick=True, dtypes=("fp32",), threads=1)
    path = tree / "hardware" / "again.yaml"
    path.write_text(calibration.yaml_text(calibration.spec(cal)))
    return spec.load_hardware(str(path))


def strongest(devices):
    """The first device with the highest rates any of `devices` measured. A measured rate is
    one this machine reached, so the highest is still no more than it can reach: a bound drawn
    from it stays a bound, and is the tightest of them. One calibration alone is not: on a
    shared machine the rate one thread reaches in its own CPU time moves by up to 2x from
    moment to moment (its sibling's load, the memory others stream), so a peak measured in a
    busy moment is beaten by an op that ran in a quiet one."""
    first = devices[0]
    top = lambda rates: {d: max(getattr(x, rates)[d] for x in devices)   # noqa: E731
                         for d in getattr(first, rates)}
    return replace(first, tensor=top("tensor"), vector=top("vector"),
                   bandwidth=max(x.bandwidth for x in devices),
                   cache_bandwidth=max(x.cache_bandwidth for x in devices))


def measured(tree, impl, phase):
    """One measurement per implementation and phase, shared by the tests that read it, set
    against the strongest of three calibrations: the tree's, one just before and one just
    after the run, so the bound is measured in the moments the ops ran."""
    if (impl, phase) not in _RUNS:
        model, dev, context = workload(tree, phase)
        before = calibrated_now(tree)
        ran = measuring.measure_model(model, dev, "fp32", phase, 1, context, "cpu", steps=3,
                                      threads=1, impl=impl)
        bound = strongest([dev, before, calibrated_now(tree)])
        _RAN[impl, phase] = ran, bound
        _RUNS[impl, phase] = against(tree, ran, bound, phase)
    return _RUNS[impl, phase]


_RAN = {}   # (impl, phase) -> (the run, the device it was set against)


def against(tree, ran, bound, phase):
    """The report of `ran` set against the device `bound`."""
    model, _, context = workload(tree, phase)
    predicted = measuring.predict(model, bound, "fp32", phase, 1, context, ran.conventions)
    return report.build(replace(ran, device=bound, predicted=predicted))


def from_cache(row, rep) -> bool:
    """The rule, restated: fresh data fits by one launch, weights and KV cache by the step."""
    cache = rep["device"]["cache_size"]
    return row["bytes_per_launch"] <= cache and (
        not row["resident_bytes"] or rep["step_bytes"] <= cache)


@pytest.mark.slow
def test_calibration_writes_a_spec_that_check_accepts(tree):
    out = io.StringIO()
    assert run(["check", str(tree / "study.yaml")], out, out) == 0, out.getvalue()
    dev = spec.load_hardware(str(tree / "hardware" / "here.yaml"))
    # a CPU's fp32 product runs at more than 1 GFLOP/s and its memory streams at more than 1 GB/s
    assert dev.tensor["fp32"] > 1e9 and dev.bandwidth > 1e9
    assert dev.cache_size >= 2**20 and dev.cache_bandwidth > 0


@pytest.mark.slow
def test_the_measured_spec_says_how_it_was_measured(tree):
    import yaml
    data = yaml.safe_load((tree / "hardware" / "here.yaml").read_text())
    m = data["measured"]
    assert {"method", "date", "tool", "matmul", "copy", "read", "cache_copy", "leaves_out"} <= set(m)
    assert "SRAM" in m["leaves_out"]
    assert m["matmul"]["fp32"]["best"] == data["compute"]["tensor"]["fp32"]
    assert "1 threads" in m["tool"]


@pytest.mark.slow
@pytest.mark.parametrize("phase", PHASES)
def test_mapped_kernels_cover_95_percent(tree, impl, phase):
    rep = measured(tree, impl, phase)
    assert rep["coverage"] >= 0.95, rep["unmapped"]
    # every op of the spec ran, and the rest is listed with its time
    assert all(r["ran"] for r in rep["rows"]), [r["op"] for r in rep["rows"] if not r["ran"]]
    assert abs(rep["mapped_s"] + sum(u["time_s"] for u in rep["unmapped"]) - rep["profiled_s"]) \
        <= 1e-9 * rep["profiled_s"]


@pytest.mark.slow
@pytest.mark.parametrize("phase", PHASES)
def test_no_op_out_of_the_cache_beats_its_roofline(tree, impl, phase):
    rep = measured(tree, impl, phase)
    checked = [r for r in rep["rows"] if r["ran"] and r["law"] != "in cache"]
    assert checked, "the sizes chosen leave every op in the cache: the law goes untested"
    for r in checked:
        assert r["best_s"] >= (1 - TOLERANCE) * r["predicted_s"], (
            f"{r['op']} ran in {r['best_s']:.3g} s, under its roofline {r['predicted_s']:.3g} s")
    # one op per row: the report's mark is the rule; a group is in cache where any op of it is
    assert all((r["law"] == "in cache") == from_cache(r, rep)
               for r in rep["rows"] if r["ran"] and len(r["covers"]) == 1)
    assert rep["broken"] == []


@pytest.mark.slow
def test_a_decode_step_streaming_past_the_cache_reads_its_weights_from_memory(tree, impl):
    # issue 25 item 13: one launch of a decode GEMM fits the cache, but a step streams every
    # weight between two reads of one; the per-launch rule marked them all "in cache"
    rep = measured(tree, impl, "decode")
    cache = rep["device"]["cache_size"]
    assert rep["step_bytes"] >= MARGIN * cache
    rows = {r["op"]: r for r in rep["rows"]}
    gemms = [op for op in ("q_proj", "qkv_proj", "o_proj", "up_proj", "down_proj", "lm_head")
             if op in rows]
    assert len(gemms) >= 4
    assert any(rows[op]["bytes_per_launch"] <= cache for op in gemms)
    assert all(rows[op]["law"] == "holds" for op in gemms), {op: rows[op]["law"] for op in gemms}


@pytest.mark.slow
def test_the_prefill_scores_are_the_ops_above_the_cache(tree):
    rep = measured(tree, "reference", "prefill")
    above = {r["op"] for r in rep["rows"] if r["law"] != "in cache"}
    assert {"scale", "causal_mask", "softmax", "lm_head"} <= above
    # S x S scores per head, 4 heads, 4 bytes, read and written, in one launch
    S = rep["workload"]["context"]
    row = next(r for r in rep["rows"] if r["op"] == "scale")
    assert row["bytes_per_launch"] == 2 * 4 * S * S * 4 > rep["device"]["cache_size"]


@pytest.mark.slow
def test_the_profiler_prints_nothing_of_its_own(capfd):
    from rooflinec.measure import profile
    here = torch.device("cpu")
    profile.run(torch, here, lambda: torch.ones(4) + 1, 1, warmup=0)
    err = capfd.readouterr().err
    assert "USDT" not in err and "profiler_start" not in err


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="transformers is not installed")
@pytest.mark.slow
def test_transformers_ranges_map_by_module_and_group(tree):
    rep = measured(tree, "transformers", "prefill")
    rows = {r["op"]: r for r in rep["rows"]}
    assert rep["conventions"]["qkv"] == "fused" and "qkv_proj" in rows
    assert rows["attention"]["covers"] == ["qk_matmul", "scale", "causal_mask", "softmax", "pv_matmul"]
    # the group is set against the sum of its ops' rooflines, on the same device (each run has
    # its own strongest calibration, so the reference run is set against this run's)
    measured(tree, "reference", "prefill")
    ref_run, bound = _RAN["reference", "prefill"][0], _RAN["transformers", "prefill"][1]
    ref = {r["op"]: r for r in against(tree, ref_run, bound, "prefill")["rows"]}
    assert rows["attention"]["predicted_s"] == pytest.approx(
        sum(ref[op]["predicted_s"] for op in rows["attention"]["covers"]))


@pytest.mark.slow
def test_report_sets_measured_beside_predicted(tree, tmp_path):
    out = io.StringIO()
    code = run(["measure", "model", str(tree / "models" / "tiny.yaml"), "--device",
                str(tree / "hardware" / "here.yaml"), "--steps", "1", "--context", "64",
                "--threads", "1", "--impl", "reference", "--out", str(tmp_path)], out, out)
    assert code == 0, out.getvalue()
    md = (tmp_path / "tiny-decode-b1-s64.md").read_text()
    assert "| lm_head | 1 |" in md and "roofline" in md and "measured" in md
    svg = (tmp_path / "tiny-decode-b1-s64.svg").read_text()
    assert "predicted (roofline)" in svg and ">measured<" in svg.replace(" ", "")


@pytest.mark.slow
def test_build_never_imports_torch(tmp_path):
    code = ("import sys\nfrom rooflinec.cli.app import run\n"
            f"assert run(['build', 'specs/operators.yaml', '--out', {str(tmp_path)!r}]) == 0\n"
            "assert run(['check', 'specs/gpt2-medium.yaml']) == 0\n"
            "assert run(['explain', 'specs/qwen.yaml', 'k_proj']) == 0\n"
            "assert run(['--help']) == 0\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_command_line_mistakes_exit_2(tree):
    out = io.StringIO()
    assert run(["measure", "model", "x.yaml", "--device", "y.yaml", "--batch", "0"], out, out) == 2
    assert "positive" in out.getvalue()
    assert run(["measure", "device", "--dtypes", "fp9"], out, out) == 2
    assert run(["measure", "model", str(tree / "models" / "tiny.yaml"), "--device",
                str(tree / "hardware" / "here.yaml"), "--dtype", "fp16"], out, out) == 2


@pytest.mark.slow
def test_a_wrong_device_spec_is_a_located_error(tree, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncompute: {tensor: {fp32: fast}}\nmemory: {bandwidth: 1 GB/s, "
                   "capacity: 1 GiB}\nsource: me\n")
    out, err = io.StringIO(), io.StringIO()
    assert run(["measure", "model", str(tree / "models" / "tiny.yaml"), "--device", str(bad)],
               out, err) == 1
    assert f"{bad}:2:" in err.getvalue()


def test_config_json_gives_the_same_model_as_the_catalog(tmp_path):
    # openai-community/gpt2's config.json, the keys rooflinec reads; measure resolves MODEL as serve does
    from rooflinec.cli import quick
    cfg = tmp_path / "config.json"
    cfg.write_text('{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768, '
                   '"n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024, '
                   '"n_inner": null}')
    a, b = quick._model(str(cfg)), quick._model("gpt2")
    fields = ("d_model", "n_layers", "vocab", "n_heads", "n_kv_heads", "head_dim", "mlp_kind",
              "d_ff", "max_context", "qkv_bias", "out_bias", "mlp_bias", "norm_kind", "norm_bias",
              "positions", "tied_embeddings")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]


@pytest.mark.slow
def test_rope_runs_in_the_reference_decoder(tree):
    # a Llama-style layout: rotary positions, RMSNorm, SwiGLU, grouped KV heads
    (tree / "models" / "tiny-rope.yaml").write_text(
        TINY.replace("positions: learned", "positions: rope")
            .replace("mlp: {kind: gelu, d_ff: 1024, bias: true}", "mlp: {kind: swiglu, d_ff: 688}")
            .replace("norm: {kind: layernorm, bias: true}", "norm: {kind: rmsnorm}")
            .replace("n_kv_heads: 4", "n_kv_heads: 2"))
    dev = spec.load_hardware(str(tree / "hardware" / "here.yaml"))
    model = spec.load_model(str(tree / "models" / "tiny-rope.yaml"))
    rep = report.build(measuring.measure_model(model, dev, "fp32", "decode", 1, 128, "cpu",
                                               steps=3, threads=1, impl="reference"))
    rope = [r for r in rep["rows"] if r["op"] == "rope"]
    assert rope and rope[0]["law"] != "not run" and rope[0]["best_s"] > 0, rope
    assert rep["coverage"] >= 0.95, rep["unmapped"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the GPU path "
                    "(CUDA events, kernel times from the profiler) is not exercised")
def test_gpu_calibration_and_model(tmp_path):
    cal = calibration.calibrate("cuda", quick=True)
    hw = tmp_path / "hardware" / "gpu.yaml"
    hw.parent.mkdir()
    hw.write_text(calibration.yaml_text(calibration.spec(cal)))
    dev = spec.load_hardware(str(hw))
    model = spec.load_model("rooflinec/spec/catalog/models/gpt2.yaml")
    rep = report.build(measuring.measure_model(model, dev, "fp32", "decode", 1, 512, "cuda", steps=3))
    assert rep["coverage"] >= 0.95, rep["unmapped"]
    checked = [r for r in rep["rows"] if r["law"] != "in cache"]
    assert checked and rep["broken"] == [], [(r["op"], r["best_s"], r["predicted_s"]) for r in checked]


@pytest.mark.slow
def test_without_torch_measure_says_how_to_install_it():
    code = ("import sys\nsys.modules['torch'] = None   # import torch fails as if not installed\n"
            "from rooflinec.cli.app import run\n"
            "sys.exit(run(['measure', 'device', '--quick', '--out', 'never.yaml']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1
    assert "pip install -e '.[measure]'" in done.stderr and "Traceback" not in done.stderr


def test_a_wrong_out_is_said_before_any_timing(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    assert run(["measure", "device", "--out", str(tmp_path)], out, err) == 2   # a usage error
    assert f"--out: {tmp_path} is a folder" in err.getvalue()
    (tmp_path / "file").write_text("")
    assert run(["measure", "model", "m.yaml", "--device", "d.yaml", "--out",
                str(tmp_path / "file")], out, err) == 2   # a usage error too, as device's folder is
    assert "a file" in err.getvalue() and "usage: rooflinec measure model" in err.getvalue()
