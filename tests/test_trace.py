"""`rooflinec trace`: real GPU traces recorded by others (../shared/traces, read in place; their
README gives device, kernels and steps), a trace recorded here on the CPU, and bad traces.

The law on a real trace: a group of kernels cannot run faster than the roofline of the spec's
ops it stands for, costed at the least work any correct kernel does, on that GPU's catalog
spec; a group under it is a mapping bug or a spec error, and the failure says which kernels.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from rooflinec.cli import quick
from rooflinec.measure import trace, trace_report

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
QWEN = "tracelens-h100-Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
BERT = "tracelens-h100-gaunernst_bert-small-uncased__1016001.json.gz"
RESNET = "hta-nccl_parser_config-nccl_data.json.gz"
B200 = "tracelens-b200-eager_trace.json.gz"


def shared(name: str) -> str:
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"../shared/traces/{name} absent: the real GPU traces are read in place, "
                    "never copied into the project")
    return str(path)


@pytest.fixture(scope="module")
def qwen():
    """The H100 Qwen1.5-0.5B trace against the h100-sxm catalog spec, at the trace's shape."""
    read = trace.read(shared(QWEN))
    return read, trace_report.build(read, quick._model("qwen1.5-0.5b"), quick._device("h100-sxm"),
                                    "bf16", "prefill", *read.shapes, trace.load_rules())


@pytest.mark.slow
def test_the_qwen_step_is_the_gpu_side_profiler_step(qwen):
    read, _ = qwen
    # ../shared/traces/README.md: 1,029 kernel events (31,760 µs) lie inside the GPU-side
    # ProfilerStep#6; the other 436 are the tail of warm-up step 5
    assert read.steps == (6,) and read.step.gpu is not None
    assert sum(read.kernels.calls.values()) == 1029
    assert read.kernels.total_us == pytest.approx(31760, abs=1)
    assert read.device == "NVIDIA H100 80GB HBM3"
    # batch 16 (README); 559 tokens: the ids' shape the trace recorded for aten::embedding
    assert read.shapes == (16, 559)


@pytest.mark.slow
def test_the_qwen_trace_is_covered_and_no_group_beats_its_roofline(qwen):
    _, rep = qwen
    assert rep["coverage"] >= 0.90, rep["unmapped"]
    checked = [g for g in rep["groups"] if g["kernels"]]
    assert {"gemm", "attention", "norm", "elementwise", "embedding"} <= {g["group"] for g in checked}
    for g in checked:
        assert g["measured_s"] >= g["roofline_s"], trace_report.violation(rep, g["group"])
    assert rep["violations"] == []


def test_the_qwen_gemm_group_counts_every_projection(qwen):
    _, rep = qwen
    gemm = next(g for g in rep["groups"] if g["group"] == "gemm")
    # Qwen1.5-0.5B: d 1024, 16 heads of 64 (q, k, v: 3 x 1024 outputs), d_ff 2816, 24 layers
    per_token = 24 * (1024 * 3 * 1024 + 1024 * 1024 + 3 * 1024 * 2816)   # 308,281,344 weights
    tokens = 16 * 559                                                      # 8,944
    head = 2 * 16 * 1024 * 151936          # logits for each sequence's last token: 4.979 GFLOP
    biases = 24 * tokens * 3 * 1024        # q, k, v biases, one add each: 0.659 GFLOP
    assert gemm["flops"] == pytest.approx(2 * per_token * tokens + head + biases, rel=1e-9)
    # 168 projections (24 layers x 7) and one fp32 product of the rotary frequencies
    assert gemm["calls"] == 169


@pytest.mark.slow
def test_the_report_draws_both_point_sets(call, tmp_path):
    code, out, err = call("trace", shared(QWEN), "--model", "qwen1.5-0.5b", "--device", "h100-sxm",
                          "--out", tmp_path)
    assert code == 0, err
    svg = (tmp_path / "qwen1.5-0.5b-prefill-b16-s559-trace.svg").read_text()
    assert "roofline (lower bound)" in svg and "measured (trace)" in svg
    md = (tmp_path / "qwen1.5-0.5b-prefill-b16-s559-trace.md").read_text()
    assert "| gemm |" in md and "| holds |" in md and "| broken |" not in md
    data = json.loads((tmp_path / "qwen1.5-0.5b-prefill-b16-s559-trace.json").read_text())
    assert data["model_step_s"] > 0 and data["kernel_s"] > data["model_step_s"]


@pytest.mark.slow
def test_a_study_names_model_device_and_dtype(call, tmp_path):
    study = tmp_path / "qwen-h100.yaml"
    study.write_text("model: qwen1.5-0.5b\ndevices: [a100-80gb, h100-sxm]\ndtype: bf16\n"
                     "analyses: {params: {}}\n")
    code, out, err = call("trace", shared(QWEN), "--study", study, "--device", "h100-sxm",
                          "--out", tmp_path / "out")
    assert code == 0, err
    assert "on the roofline of NVIDIA H100" in next((tmp_path / "out").glob("*.md")).read_text()
    assert call("trace", shared(QWEN), "--study", study, "--device", "b200")[0] == 2


@pytest.mark.slow
def test_cpu_side_steps_take_the_kernels_their_launches_started():
    read = trace.read(shared(RESNET))
    # README: ProfilerStep#4 to #6 as CPU user annotations only; 2,700 kernels, 162,532 µs in all
    assert read.steps == (4, 5, 6) and read.step.number == 6 and read.step.gpu is None
    assert "correlation" in read.rule
    assert 0 < read.kernels.total_us < 162532
    steps = [trace.read(shared(RESNET), str(n)).kernels for n in (4, 5, 6)]
    assert sum(sum(k.calls.values()) for k in steps) <= 2700


@pytest.mark.slow
def test_a_trace_without_steps_says_how_to_read_it_all():
    with pytest.raises(trace.TraceError, match="--step all"):
        trace.read(shared(B200))
    read = trace.read(shared(B200), "all")
    # README: 768 kernel events summing to 10,863 µs
    assert sum(read.kernels.calls.values()) == 768
    assert read.kernels.total_us == pytest.approx(10863, abs=1)
    rules = trace.load_rules()
    groups = {name: trace.classify(name, rules).group for name in read.kernels.calls
              if trace.classify(name, rules)}
    by = lambda prefix: {g for n, g in groups.items() if prefix in n}   # noqa: E731
    assert by("bmm_MxE4m3") == {"gemm"} and by("fmhaSm100") == {"attention"}
    assert by("multimem_all_reduce") == {"collective"} and by("fused_add_rms_norm") == {"norm"}


@pytest.mark.slow
def test_bert_small_flash_and_cutlass_kernels_map():
    read = trace.read(shared(BERT))
    rules = trace.load_rules()
    names = {trace.classify(n, rules).group for n in read.kernels.calls if "flash_fwd" in n}
    assert names == {"attention"}
    assert all(trace.classify(n, rules).group == "gemm" for n in read.kernels.calls
               if "cutlass" in n and "gemm" in n)


# --- bad traces -------------------------------------------------------------------------


def _kineto(events, **top) -> str:
    return json.dumps({"schemaVersion": 1, "traceEvents": events, **top})


KERNEL = {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 10.0, "dur": 5.0,
          "args": {"correlation": 1}}


@pytest.mark.parametrize("text, message", [
    ("[1, 2, 3]", "no `traceEvents`"),
    ("hello", "not valid JSON near byte"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "na', "not valid JSON near byte"),
    (_kineto([]), "no `traceEvents`"),
    (_kineto([{"ph": "X", "cat": "python_function", "name": "f", "ts": 0, "dur": 1}]),
     "nothing ran under the profiler"),
    (_kineto([KERNEL]), "no ProfilerStep#N annotation"),
])
def test_a_bad_trace_is_a_located_error(call, tmp_path, text, message):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    code, out, err = call("trace", bad, "--model", "qwen1.5-0.5b", "--device", "h100-sxm",
                          "--batch", "1", "--context", "8", "--out", tmp_path / "out")
    assert code == 1 and message in err and str(bad) in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_truncated_gzip_says_where_it_breaks(call, tmp_path):
    whole = Path(shared(BERT)).read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    code, out, err = call("trace", cut, "--model", "qwen1.5-0.5b", "--device", "h100-sxm",
                          "--out", tmp_path / "out")
    assert code == 1 and "truncated" in err and "bytes of JSON" in err, err
    assert not (tmp_path / "out").exists()


def test_a_huge_trace_is_refused_by_size(tmp_path, monkeypatch):
    big = tmp_path / "big.json.gz"
    with gzip.open(big, "wt") as f:
        f.write(_kineto([dict(KERNEL, ts=float(i)) for i in range(2000)]))
    monkeypatch.setattr(trace, "MAX_BYTES", 10_000)
    with pytest.raises(trace.TraceError, match="too large a trace"):
        trace.read(str(big), "all")


@pytest.mark.slow
def test_step_and_source_mistakes_are_usage_errors(call, tmp_path):
    assert call("trace", shared(QWEN), "--device", "h100-sxm")[0] == 2
    code, _, err = call("trace", shared(QWEN), "--model", "qwen1.5-0.5b", "--device", "h100-sxm",
                        "--step", "3")
    assert code == 2 and "#6" in err
    code, _, err = call("trace", shared(QWEN), "--model", "qwen1.5-0.5b", "--device", "h100-sxm",
                        "--phase", "decode")
    assert code == 2 and "--context" in err


@pytest.mark.slow
def test_user_rules_come_first_and_bad_ones_are_located(call, tmp_path):
    mine = tmp_path / "rules.yaml"
    mine.write_text("rules:\n  - {group: elementwise, match: 'reduce_kernel', categories: [elementwise]}\n")
    read = trace.read(shared(QWEN))
    model, dev = quick._model("qwen1.5-0.5b"), quick._device("h100-sxm")
    rep = trace_report.build(read, model, dev, "bf16", "prefill", 16, 559, trace.load_rules(str(mine)))
    assert rep["unmapped"] == []
    mine.write_text("rules:\n  - {group: x, match: '(', categories: [linear]}\n")
    code, _, err = call("trace", shared(QWEN), "--model", "qwen1.5-0.5b", "--device", "h100-sxm",
                        "--rules", mine, "--out", tmp_path / "out")
    assert code == 1 and f"{mine}: rules[0]: match" in err, err
    mine.write_text("rules:\n  - {group: x, match: 'y', categories: [gemms]}\n")
    assert "categories ['gemms']" in call("trace", shared(QWEN), "--model", "qwen1.5-0.5b",
                                          "--device", "h100-sxm", "--rules", mine)[2]


# --- a trace recorded here ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="the [measure] extra (PyTorch) is not installed")
def test_a_cpu_trace_recorded_here_with_torch_profiler(call, tmp_path):
    import torch

    from rooflinec.spec import load as spec
    from rooflinec.measure import profile, reference
    model_yaml = tmp_path / "tiny.yaml"
    model_yaml.write_text("name: tiny\nd_model: 128\nn_layers: 2\nvocab: 512\nmax_context: 256\n"
                          "attention: {n_heads: 2, n_kv_heads: 2, head_dim: 64}\n"
                          "mlp: {kind: gelu, d_ff: 512}\nnorm: {kind: layernorm}\n"
                          "positions: learned\ntied_embeddings: true\nsource: a test\n")
    decoder = reference.Decoder(torch, spec.load_model(str(model_yaml)), torch.device("cpu"),
                                torch.float32, "prefill", 2, 32)
    path = tmp_path / "cpu.json"
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)
    with profile.quiet(), torch.inference_mode(), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule, record_shapes=True,
            on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(3):
            decoder.step()
            prof.step()
    read = trace.read(str(path))
    assert read.steps == (1, 2) and read.step.number == 2 and "CPU trace" in read.rule
    assert read.shapes == (2, 32)
    # outermost ops only: none inside another, so their time fits in the step
    assert read.kernels.total_us <= read.step.cpu[1] - read.step.cpu[0]
    assert read.kernels.calls["aten::linear"] == 2 * 6 + 1   # q, k, v, o, up, down per layer; lm_head
    code, out, err = call("trace", path, "--model", model_yaml, "--device", "v100-sxm2",
                          "--dtype", "fp16", "--out", tmp_path / "out")
    assert code == 0, err
    rep = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert rep["coverage"] >= 0.90, rep["unmapped"]


@pytest.mark.slow
def test_without_ijson_trace_says_how_to_install_it():
    import subprocess
    import sys
    code = ("import sys\nsys.modules['ijson'] = None   # import ijson fails as if not installed\n"
            "from rooflinec.cli.app import run\n"
            "sys.exit(run(['trace', 'x.json', '--model', 'gpt2', '--device', 'h100-sxm']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1
    assert "pip install -e '.[trace]'" in done.stderr and "Traceback" not in done.stderr
