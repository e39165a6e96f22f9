"""The installed catalog and the quick answers: devices, models, serve, --version, -q."""

import io
import math
import shutil
import json
from pathlib import Path

import pytest

from rooflinec.spec import catalog
from rooflinec.cli.configurations import rates
from rooflinec.cli.progress import Progress

CONFIGS = Path(__file__).resolve().parent / "hf_configs"


@pytest.mark.slow
def test_devices_lists_every_shipped_device(call):
    shipped = catalog.names("hardware")
    assert len(shipped) >= 13 and "h100-sxm" in shipped
    code, out, err = call("devices")
    assert code == 0 and err == ""
    assert [line.split()[0] for line in out.splitlines()[1:]] == shipped
    # the A100 40GB: 312 TFLOP/s over 1555 GB/s is a ridge of 200.6 FLOP/byte
    assert "312.0 TFLOP/s bf16  1.555 TB/s  40.00 GiB  201 FLOP/B" in out
    code, out, _ = call("devices", "--json")
    rows = json.loads(out)["devices"]
    assert [r["name"] for r in rows] == shipped and all(r["source"] for r in rows)


@pytest.mark.slow
def test_models_lists_every_shipped_model_with_its_parameters(call):
    code, out, err = call("models")
    assert code == 0 and err == ""
    assert [line.split()[0] for line in out.splitlines()[1:]] == catalog.names("models")
    rows = {r["name"]: r for r in json.loads(call("models", "--json")[1])["models"]}
    assert rows["qwen2.5-7b"]["params"] == 7_615_616_512   # Qwen2.5-7B-Instruct's checkpoint


def test_unknown_name_lists_both_places(call, tmp_path):
    """A study's device name is looked for beside the study and in the catalog; a wrong one
    is answered with the candidates of both."""
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "my-gpu.yaml").write_text(
        (Path(catalog.ROOT) / "hardware" / "rtx4090.yaml").read_text())
    study = tmp_path / "study.yaml"
    study.write_text("devices: [my-gpx]\nanalyses: {accelerators: {}}\n")
    code, _, err = call("check", study)
    assert code == 1
    assert f"{study}:1:11: devices[0]: no spec 'my-gpx'" in err and "did you mean 'my-gpu'?" in err
    assert "my-gpu" in err.split("known hardware specs:")[1] and "h100-sxm" in err


@pytest.mark.slow
def test_serve_llama_on_h100(call):
    """Llama-3.1-8B decoding one sequence at context 4096 on an H100 SXM (3.35 TB/s) reads
    every weight but the embedding table (a gather reads B rows): (8,030,261,248 - 128,256 *
    4096) * 2 B = 15,009,849,344 B, plus a KV cache of 2 * 32 layers * 8 heads * 128 * 2 B
    = 131,072 B per token, * 4096 = 536,870,912 B: 15,546,720,256 B / 3.35e12 B/s = 4.641 ms,
    215.5 tokens/s (activations add a little)."""
    code, out, err = call("serve", CONFIGS / "llama-3.1-8b", "--device", "h100-sxm", "--json")
    assert code == 0, err
    data = json.loads(out)["serving"]
    step = data["steps"][0]["devices"][0]
    assert step["bound"] == "memory"
    assert step["tokens_per_s"] == pytest.approx(3.35e12 / 15_546_720_256, rel=2e-3)
    assert data["kv_per_token"] == 131_072
    assert [s["batch"] for s in data["steps"]] == [1, 8, 64]
    assert data["prefill"][0]["prompt"] == 2048 and data["prefill"][0]["devices"][0]["bound"] == "compute"
    code, text, _ = call("serve", CONFIGS / "llama-3.1-8b", "--device", "h100-sxm", "--batch", "1")
    assert code == 0
    assert f"{step['tokens_per_s']:,.1f}" in text and "time to first token ≥" in text and "(prompt 2,048, batch 1)" in text


@pytest.mark.slow
def test_serve_catalog_name_and_options(call):
    code, out, err = call("serve", "qwen2.5-7b", "--device", "a100-40gb", "--batch", "2,4",
                          "--context", "1024", "--prompt", "512", "--dtype", "fp16")
    assert code == 0, err
    assert "Qwen2.5-7B-Instruct on NVIDIA A100 40GB SXM4 (a100-40gb), fp16" in out
    assert "decode at context 1,024" in out and "prompt 512" in out


@pytest.mark.parametrize("argv, fragment", [
    (("serve", "qwen2.5-7b", "--device", "h100-sxn"), "did you mean 'h100-sxm'?"),
    (("serve", "qwen2.5-7c", "--device", "h100-sxm"), "did you mean 'qwen2.5-7b'?"),
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--batch", "1,x"), "--batch: expected whole"),
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--context", "0"), "--context: expected"),
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--dtype", "bf8"), "--dtype: unknown dtype"),
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--tp", "0"), "--tp: expected whole numbers >= 1"),
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--tp", "1,x"), "--tp: expected whole numbers >= 1"),
    (("serve", "qwen2.5-7b", "--device", "h100-sxm,h100-sxn"), "did you mean 'h100-sxm'?"),
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--out", "."), "--out"),
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--tp", "3"), "--tp: tensor-parallel degree 3 does not divide"),
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--weights", "fp9"), "--weights: unknown format 'fp9'"),
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--kv-cache", "int3"), "--kv-cache: unknown format"),
    # tf32 is a compute precision, stored as fp32: a study's quantization does not accept it
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--weights", "tf32"), "--weights: unknown format 'tf32'"),
    # the calibration's engine is checked as simulate checks its --engine: one line naming the known ones
    (("serve", "qwen2.5-7b", "--device", "h100-sxm", "--engine", "foo"),
     "--engine: unknown engine 'foo'; choose from sglang, trtllm, vllm\n"),
])
def test_serve_command_line_mistakes(call, argv, fragment):
    code, out, err = call(*argv)
    assert code == 2 and out == "" and fragment in err and "Traceback" not in err


@pytest.mark.slow
def test_serve_llama_70b_on_four_h100s_with_fp8_weights_and_kv_cache(call):
    """Llama-3.1-70B at tp 4 (config: 80 layers, 8 KV heads of 128; 70,553,706,496 parameters):
    one device keeps 2 KV heads, 2 x 80 x 2 x 128 x 1 B = 40,960 B of fp8 KV cache per token, and
    its share of the weights at 1 B each: per layer q and o 2 x 8192^2 / 4 = 33,554,432, k and v
    2 x 8192 x 1024 / 4 = 4,194,304, MLP 3 x 8192 x 28672 / 4 = 176,160,768, norms 16,384:
    213,925,888 x 80 = 17,114,071,040; embedding and LM head 2 x 128256 x 8192 / 4 = 525,336,576;
    final norm 8192: 17,639,415,808 B. The 70B does not fit one 80 GiB device at bf16; this does."""
    code, out, err = call("serve", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "4",
                          "--weights", "fp8", "--kv-cache", "fp8", "--json")
    assert code == 0, err
    data = json.loads(out)
    serving = data["serving"]
    # fp8 GEMMs on H100's fp8 peak (the deployment's rule, as plan and simulate), bf16 activations
    assert data["tp"] == 4 and data["dtype"] == "fp8" and data["dequantisation"] is None
    assert data["quantization"] == {"weights": "fp8", "kv_cache": "fp8", "activations": "bf16"}
    assert serving["kv_per_token"] == 40_960 and serving["weights_format"] == "fp8"
    assert serving["weight_bytes"] == 17_639_415_808
    one = json.loads(call("serve", "llama-3.1-70b", "--device", "h100-sxm", "--json")[1])["serving"]
    assert not one["memory"][0]["weights_fit"] and serving["memory"][0]["weights_fit"]
    # a quarter of the weight bytes at half the bytes each: a batch-1 step well under a quarter
    assert serving["steps"][0]["devices"][0]["time_s"] < one["steps"][0]["devices"][0]["time_s"] / 4
    code, text, _ = call("serve", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "4", "--weights", "fp8")
    assert code == 0 and "on 4 × NVIDIA H100 SXM5 80GB (h100-sxm), tp 4, fp8, KV cache bf16" in text


@pytest.mark.slow
def test_serve_weights_follow_the_one_gemm_rule_plan_and_simulate_use(call):
    """--weights fp8 alone: fp8 GEMMs where the device has their peak (H100: W8A8), weight-only bf16
    GEMMs where it has not (A100: W8A16, stated), the rule of Deployment.gemm_dtype that simulate and
    plan apply; --dtype bf16 asks for weight-only on H100 too. At a prompt of 2,048 the prefill is
    compute-bound: the fp8 peak (1,979 TFLOPS dense) halves the bf16 one's (989.4) TTFT bound."""
    from rooflinec.cli import storage
    from rooflinec.cost.deployment import Deployment
    from rooflinec.spec import catalog
    from rooflinec.spec import load as spec
    model = spec.load_model(catalog.path("models", "llama-3.1-8b"))
    got = {}
    for device, extra in (("h100-sxm", ()), ("h100-sxm", ("--dtype", "bf16")), ("a100-80gb", ())):
        code, out, err = call("serve", "llama-3.1-8b", "--device", device, "--weights", "fp8", "--json", *extra)
        assert code == 0, err
        got[device, extra] = json.loads(out)
        if not extra:   # serve's GEMMs are the deployment's
            dev = spec.load_hardware(catalog.path("hardware", device))
            assert got[device, extra]["dtype"] == Deployment(model, dev, weights="fp8").gemm_dtype
    w8a8, w8a16, a100 = got.values()
    assert (w8a8["dtype"], w8a16["dtype"], a100["dtype"]) == ("fp8", "bf16", "bf16")
    assert w8a8["dequantisation"] is None and "weight-only: weights fp8" in w8a16["dequantisation"]
    assert "dequantised into bf16 GEMMs" in a100["dequantisation"]
    ttft = lambda d: d["summary"]["devices"][0]["prefill"][0]["time_s"]   # noqa: E731
    assert ttft(w8a8) < 0.6 * ttft(w8a16)
    code, out, _ = call("serve", "--help")
    flat = lambda t: " ".join(t.split()).replace("- ", "-")   # noqa: E731  (argparse wraps at hyphens)
    assert code == 0 and flat(storage.GEMM_RULE) in flat(out)


def test_serve_dtype_the_device_lacks(call):
    code, _, err = call("serve", "qwen2.5-7b", "--device", "v100-sxm2")
    assert code == 1 and "lists no tensor peak for bf16; it has: fp16" in err


def test_version(call):
    code, out, _ = call("--version")
    assert code == 0 and out.startswith("rooflinec ")


@pytest.mark.slow
def test_quiet_build_writes_nothing_to_stderr(call, tmp_path):
    code, _, err = call("-q", "build", "specs/qwen.yaml", "--out", tmp_path, "--format", "json")
    assert code == 0 and err == ""


def test_progress_only_after_its_delay():
    late, early = io.StringIO(), io.StringIO()
    Progress(late, after_s=0.0)("specs/qwen.yaml: evaluated Serving bounds")
    Progress(early, after_s=3600.0)("specs/qwen.yaml: evaluated Serving bounds")
    assert late.getvalue() == "specs/qwen.yaml: evaluated Serving bounds\n" and early.getvalue() == ""


@pytest.mark.slow
def test_build_reports_its_sections_and_charts(call, tmp_path, monkeypatch):
    """With the delay at zero every section and every section's charts are reported."""
    from rooflinec.cli import app as cli
    monkeypatch.setattr(cli, "Progress", lambda stream: Progress(stream, after_s=0.0))
    code, _, err = call("build", "specs/gpt2-medium.yaml", "--out", tmp_path, "--format", "md")
    assert code == 0
    lines = err.splitlines()
    assert lines[:2] == ["specs/gpt2-medium.yaml: evaluated Operator ledgers",
                         "specs/gpt2-medium.yaml: evaluated Derivations"]
    assert any(line.startswith("specs/gpt2-medium.yaml: drew ") for line in lines[2:])


@pytest.mark.slow
def test_readme_config_to_answer_example_runs(call, tmp_path, monkeypatch):
    """The README's three lines, as written, in a copy of the folder they name."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = readme.split("From a config.json to an answer", 1)[1].split("```")[1]
    lines = [line.split("#")[0].split() for line in block.strip().splitlines()]
    assert len(lines) == 3 and all(argv[0] == "rooflinec" for argv in lines)
    (tmp_path / "tests").mkdir()
    shutil.copytree(CONFIGS, tmp_path / "tests" / "hf_configs")
    monkeypatch.chdir(tmp_path)
    outputs = []
    for argv in lines:
        code, out, err = call(*argv[1:])
        assert code == 0, err
        outputs.append(out)
    assert "h100-sxm" in outputs[0]
    assert "8,030,261,248 parameters" in outputs[1]
    assert "Llama-3.1-8B on NVIDIA H100 SXM5 80GB (h100-sxm), bf16" in outputs[2]
    assert "time to first token ≥" in outputs[2] and "(prompt 2,048, batch 1)" in outputs[2] and "decode at context 4,096" in outputs[2]


def test_serve_says_when_the_context_is_past_the_model(call):
    code, out, err = call("serve", "gpt2-medium", "--device", "h100-sxm", "--context", "1024")
    assert code == 0 and "2,048 tokens (--context or --prompt) run past the model's max_context, 1,024" in err
    code, out, err = call("serve", "gpt2-medium", "--device", "h100-sxm", "--context", "512",
                        "--prompt", "1024")
    assert code == 0 and "warning:" not in err


@pytest.mark.slow
def test_serve_says_the_room_for_kv_tokens_counts_windowed_layers_at_the_full_context(call):
    """gpt-oss-120b's sliding layers keep 128 tokens, so the tokens that fit beside the weights,
    counted at 73,728 B each (every layer at the full context), understate what fits: say so."""
    code, out, err = call("serve", "gpt-oss-120b", "--device", "h100-sxm", "--weights", "mxfp4")
    assert code == 0, err
    assert "tokens of KV cache at every layer's full context" in out
    code, out, err = call("serve", "llama-3.1-8b", "--device", "h100-sxm")
    assert code == 0 and "full context" not in out.splitlines()[1]


@pytest.mark.slow
def test_serve_shows_a_small_tokens_per_s_to_its_significant_figures(call):
    """gemma-2-9b on an L4 (300 GB/s) at a context of 10^8: its 21 full layers keep
    2 x 8 KV heads x 256 x 2 B = 8,192 B a token each, 21 x 8,192 x 10^8 = 17.2 TB read a step,
    about 57.4 s with the weights: 0.0174 tokens/s, not '0.0'."""
    code, out, err = call("serve", "gemma-2-9b", "--device", "l4", "--context", "100000000", "--batch", "1")
    assert code == 0, err
    assert "≤ 0.0174" in out and "≤ 0.0 " not in out


def test_serve_heading_names_the_kv_cache_as_the_reports_do(call):
    code, out, err = call("serve", "qwen2.5-7b", "--device", "h100-sxm", "--kv-cache", "fp8")
    assert code == 0, err
    assert out.startswith("Qwen2.5-7B-Instruct on NVIDIA H100 SXM5 80GB (h100-sxm), bf16, KV cache fp8,")


def _rows(text: str, device: str) -> list[list[str]]:
    """A configurations table's rows of `device`, split on runs of two spaces."""
    import re
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.startswith(f"  {device} ")]


def test_tokens_per_user_counts_every_attention_dp_rank_s_sequences():
    """DeepSeek-V3 at attention DP 8, EP 8 on 8 H200s, batch 8 per rank: the group steps
    8 x 8 = 64 sequences in 19.50 ms, 3,282 tokens/s; per user is one sequence's 1 / 19.50 ms =
    51.3 tokens/s (it was 3,282 / 8 = 410, the per-GPU figure), per GPU 3,282 / 8 = 410."""
    section = {"deployment": {"gpus": 8, "tp": 1, "ep": 8, "attention_dp": 8}}
    user, gpu = rates(64 / 0.0195, 8, section)
    assert user == pytest.approx(1 / 0.0195) and gpu == pytest.approx(64 / 0.0195 / 8)
    assert rates(8 / 0.0195, 8, {"deployment": {"gpus": 4, "tp": 4}}) == pytest.approx((1 / 0.0195, 2 / 0.0195))
    assert rates(100.0, 4, {}) == (25.0, 100.0)      # one device, no deployment block


@pytest.mark.slow
def test_serve_answers_tokens_per_gpu_and_per_user_over_tp_in_one_command(call):
    """Issue 32: 'tokens/s per GPU and per user for Llama-3.1-70B on H100 at tp 1, 2, 4, 8'.
    Each row is that tp's own serve (the same section): per user is the group's tokens/s over
    the batch (each sequence gets one token a step), per GPU over tp. At tp 1 the bf16 weights,
    70,553,706,496 x 2 B = 131.4 GiB, do not fit 80 GiB, and the answer names tp 2 (65.7 GiB
    per device, leaving room for a sequence's 4,096 x 160 KiB of KV cache)."""
    code, out, err = call("serve", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "1,2,4,8", "--batch", "1,8")
    assert code == 0, err
    rows = _rows(out, "h100-sxm")
    assert {r[1] for r in rows} == {"1", "2", "4", "8"}
    assert "h100-sxm at tp 1: the weights do not fit: the smallest tp that fits one sequence is 2" in out
    assert "tokens/s per user" in out and "tokens/s per GPU" in out
    for tp in (2, 8):
        one = json.loads(call("serve", "llama-3.1-70b", "--device", "h100-sxm", "--tp", str(tp),
                              "--batch", "1,8", "--json")[1])
        for step in one["serving"]["steps"]:
            group = step["devices"][0]["tokens_per_s"]
            row = next(r for r in rows if r[1] == str(tp) and r[3] == str(step["batch"]))
            assert float(row[4].replace(",", "")) == pytest.approx(group / step["batch"], rel=5e-3)
            assert float(row[5].replace(",", "")) == pytest.approx(group / tp, rel=5e-3)
        assert one["smallest_tp"] is None
    alone = json.loads(call("serve", "llama-3.1-70b", "--device", "h100-sxm", "--json")[1])
    assert alone["smallest_tp"]["tp"] == 2
    code, text, _ = call("serve", "llama-3.1-70b", "--device", "h100-sxm")
    assert "the weights do not fit: the smallest tp that fits one sequence is 2" in text
    assert "the largest batch that fits at context 4,096 is 0" not in text


@pytest.mark.slow
def test_serve_lists_devices_and_says_which_configuration_it_cannot_evaluate(call):
    code, out, err = call("serve", "qwen2.5-7b", "--device", "h100-sxm,a100-40gb", "--tp", "1,2", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [(c["device"], c["tp"]) for c in data["configurations"]] == [("h100-sxm", 1), ("h100-sxm", 2),
                                                                        ("a100-40gb", 1)]
    assert data["not_evaluated"] == ["a100-40gb at tp 2: not evaluated: device 'a100-40gb' lists no "
                                     "scale-up interconnect, which the all-reduce 'embedding_all_reduce' "
                                     "needs; add interconnect to its hardware spec"]


@pytest.mark.slow
def test_serve_puts_the_shipped_calibration_beside_the_bounds_where_it_was_fitted(call):
    """On H100 the shipped calibration has a (device, engine) group of its own (trtllm): TPOT is
    serving_model.predict with that group's efficiencies, for `batch` requests of the prompt,
    each generating 2 (4096 - 2048) tokens (mean context 4096); the interval is the file's
    pooled left-out band where it carries one (llama-3.1-8b at tp 1 with trtllm is calibrated in
    every respect), else the split conformal 80% one over its residuals; the prediction never
    beats the bound."""
    from rooflinec.cli import calibrated
    from rooflinec.serving import calibrate, intervals, serving_model
    from rooflinec.base import yamlio
    code, out, err = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--batch", "1,16", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert "the shipped calibration (default" in data["calibrated"]["note"] and "trtllm" in data["calibrated"]["note"]
    eff = calibrate.load(calibrated.shipped()).groups[("h100-sxm", "trtllm")]
    model = spec_model("llama-3.1-8b")
    device = spec_device("h100-sxm")
    doc = yamlio.load(calibrated.shipped()).data
    residuals = [r["tpot_log_residual"] for r in doc["rows"]]
    lo, hi = doc["intervals"]["tpot"] if "intervals" in doc else intervals.quantiles(residuals, 0.8)
    for point in data["calibrated"]["points"]:
        run = serving_model.Run(model, device, "bf16", 1, 2048, 4096, point["batch"])
        want = serving_model.predict(run, serving_model.costs(run), eff)
        assert point["tpot_s"] == pytest.approx(want.tpot_s, rel=1e-12)
        assert point["ttft_s"] == pytest.approx(want.ttft_s, rel=1e-12)
        assert point["tpot_interval_s"] == pytest.approx([want.tpot_s * math.exp(-hi), want.tpot_s * math.exp(-lo)])
        bound = next((s for s in data["serving"]["steps"] if s["batch"] == point["batch"]), None)
        if bound:
            assert point["tpot_s"] >= bound["devices"][0]["time_s"]
    text = call("serve", "llama-3.1-8b", "--device", "h100-sxm")[1]
    assert "calibrated TPOT (80%)" in text and "calibrated prediction by the shipped calibration" in text
    # no group of its own: the shipped calibration says so and predicts nothing
    text = call("serve", "llama-3.1-8b", "--device", "a100-40gb")[1]
    assert "no calibrated prediction: the shipped calibration was fitted on h100-sxm with trtllm" in text
    assert "calibrated TPOT" not in text
    text = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "vllm")[1]
    assert "not h100-sxm with vllm" in text


@pytest.mark.slow
def test_serve_calibration_file_is_read_with_located_errors(call, tmp_path):
    from rooflinec.cli import calibrated
    mine = tmp_path / "cal.yaml"
    mine.write_text(Path(calibrated.shipped()).read_text().replace("compute_fraction: 0.494604", "compute_fraction: 1.5"))
    code, out, err = call("serve", "llama-3.1-8b", "--device", "a100-40gb", "--calibration", mine)
    assert code == 1 and out == "" and f"{mine}:" in err and "compute_fraction: expected a fraction" in err
    mine.write_text(Path(calibrated.shipped()).read_text())
    code, out, err = call("serve", "llama-3.1-8b", "--device", "a100-40gb", "--calibration", mine)
    assert code == 0, err
    assert f"calibration {mine}: parameters pooled over every device and engine" in out


def test_serve_says_a_simulator_calibration_is_not_its_own(call, tmp_path):
    """The simulator's calibration (kind: simulator, or without it the simulator's parameters)
    given to serve: one located line saying which file serve takes, not one per parameter."""
    from rooflinec.cli import calibrated
    sim = Path(calibrated.shipped()).with_name("simulator-visible.yaml")
    code, out, err = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--calibration", sim)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"{sim}:2:") and "this is a simulator calibration (rooflinec simulate --calibration)" in err
    assert "unknown parameter" not in err
    bare = tmp_path / "sim.yaml"
    bare.write_text(sim.read_text().replace("kind: simulator\n", ""))
    code, out, err = call("serve", "llama-3.1-8b", "--device", "h100-sxm", "--calibration", bare)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "this is a simulator calibration" in err, err
    assert err.startswith(f"{bare}:") and "default.parameters." in err


@pytest.mark.slow
def test_serve_out_draws_tokens_per_gpu_against_batch(call, tmp_path):
    svg = tmp_path / "serve.svg"
    code, out, err = call("serve", "llama-3.1-70b", "--device", "h100-sxm", "--tp", "2,4", "--out", svg)
    assert code == 0, err
    text = svg.read_text()
    assert text.startswith("<?xml") and "tokens/s per GPU" in text and "tp 2" in text and "tp 4" in text
    assert "does not fit memory" in text          # batches past what fits are drawn faint
    assert "batch  " not in err and f"wrote {svg}" in err


def spec_model(name):
    from rooflinec.spec import load
    return load.load_model(catalog.path("models", name))


def spec_device(name):
    from rooflinec.spec import load
    return load.load_hardware(catalog.path("hardware", name))


def test_serve_names_the_dtype_a_device_computes_in_when_the_rules_one_lacks(call):
    """V100 has no bf16 tensor peak: with no --dtype the GEMM rule's bf16 cannot run there, and the
    error names the dtype it has; an explicit fp8 on A100 names the weight-only path."""
    code, _, err = call("serve", "llama-3.1-8b", "--device", "v100-sxm2")
    assert code == 1 and "lists no tensor peak for bf16; it has: fp16; give --dtype fp16 to compute in it" in err
    code, _, err = call("serve", "llama-3.1-8b", "--device", "a100-80gb", "--dtype", "fp8")
    assert code == 1 and "--weights fp8 --dtype bf16, or --weights fp8 alone" in err
