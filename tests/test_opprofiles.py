"""Per-op profiles: the simple CSV and Vidur's mlp.csv read with located errors, each op's
FLOPs and bytes from the lowering, and `rooflinec validate-ops` in-process."""

import json

import numpy as np
import pytest

from rooflinec.serving import measurements
from rooflinec.base.errors import SpecError
from rooflinec.serving import oplowering, opprofiles
from rooflinec.serving.opprofiles import Shape

# Llama-2-7B (its Hugging Face config.json): d_model 4096, 32 heads of 128, d_ff 11008, V 32000
LLAMA2_7B = Shape(4096, 32, 32, 128, 11008, 32000, True)
HEADER = "model,op,tokens,tp,time_ms,d_model,n_q,n_kv,d_head,d_ff,V,gated\n"


def simple(tmp_path, body: str):
    f = tmp_path / "ops.csv"
    f.write_text(HEADER + body, encoding="utf-8")
    return str(f)


def test_simple_csv_rows(tmp_path):
    f = simple(tmp_path, "llama,mlp_up_proj,16,2,0.25,4096,32,32,128,11008,32000,true\n")
    (row,) = opprofiles.read(f)
    assert (row.model, row.op, row.tokens, row.tp, row.line) == ("llama", "mlp_up_proj", 16, 2, 2)
    assert row.time_s == pytest.approx(0.25e-3) and row.shape == LLAMA2_7B


def test_simple_csv_errors_are_located_together(tmp_path):
    f = simple(tmp_path, "llama,mlp_upp,16,2,0.25,4096,32,32,128,11008,32000,true\n"
                         "llama,add,0,2,-1,4096,32,32,128,11008,32000,yes\n")
    with pytest.raises(SpecError) as e:
        opprofiles.read(f)
    text = str(e.value)
    assert f"{f}:2:7: op: 'mlp_upp' is not an op" in text
    assert f"{f}:3:11: tokens: '0' is not a whole number >= 1" in text
    assert f"{f}:3:15: time_ms: '-1' is not a positive number of ms" in text
    assert "gated: 'yes' is not true or false" in text


def test_a_missing_column_is_named(tmp_path):
    f = tmp_path / "ops.csv"
    f.write_text("model,op,tokens\nx,add,1\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"ops.csv:1:1: \(header\): missing column\(s\) tp, time_ms"):
        opprofiles.read(str(f))


def test_a_vidur_file_names_its_model_by_its_folders(tmp_path):
    folder = tmp_path / "meta-llama" / "Llama-2-7b-hf"
    folder.mkdir(parents=True)
    (folder / "mlp.csv").write_text(
        "time_stats.add.median,time_stats.add.min,n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,"
        "use_gated_mlp,num_tokens,num_tensor_parallel_workers\n0.055,0.05,32,32,4096,11008,32000,True,4096,1\n",
        encoding="utf-8")
    (row,) = opprofiles.read(str(folder / "mlp.csv"))
    assert (row.model, row.op, row.tokens, row.tp, row.shape) == ("meta-llama/Llama-2-7b-hf", "add", 4096, 1, LLAMA2_7B)
    assert row.time_s == pytest.approx(55e-6)


# --- the lowering of each op ----------------------------------------------------------------

def test_fused_gate_up_gemm_golden():
    # Vidur's mlp_up_proj on Llama-2-7B, tp 2: one GEMM [M, 4096] @ [4096, 2 * 11008 / 2 = 11008]
    # M = 16: FLOPs 2 * 16 * 4096 * 11008 = 1,442,840,576; bytes 2 * (4096 * 11008 + 16 * 4096
    # + 16 * 11008) = 2 * (45,088,768 + 65,536 + 176,128) = 90,660,864 (weights, X once, Y)
    f, b = oplowering.lowered(oplowering.model_of(LLAMA2_7B), 2).at("mlp_up_proj", np.array([16]))
    assert (f[0], b[0]) == (1_442_840_576, 90_660_864)


def test_qkv_and_silu_and_mul_golden():
    # attn_pre_proj, tp 4: [M, 4096] @ [4096, (32 + 2 * 32) * 128 / 4 = 3072]; M = 1:
    # FLOPs 2 * 4096 * 3072 = 25,165,824; bytes 2 * (4096 * 3072 + 4096 + 3072) = 25,180,160
    low = oplowering.lowered(oplowering.model_of(LLAMA2_7B), 4)
    f, b = low.at("attn_pre_proj", np.array([1]))
    assert (f[0], b[0]) == (25_165_824, 25_180_160)
    # mlp_act, tp 4, M = 8: read gate and up [8, 2752] each, write one: 3 * 8 * 2752 * 2 = 132,096
    f, b = low.at("mlp_act", np.array([8]))
    assert b[0] == 132_096


def test_a_spec_that_disagrees_with_the_profile_is_a_located_error(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.yaml").write_text(
        "name: tiny\nhf_id: org/tiny\nd_model: 4096\nn_layers: 2\nvocab: 32000\n"
        "attention: {n_heads: 32, n_kv_heads: 32, head_dim: 128}\nmlp: {kind: swiglu, d_ff: 14336}\n"
        "source: a test\n", encoding="utf-8")
    row = opprofiles.read(simple(tmp_path, "org/tiny,add,1,1,0.01,4096,32,32,128,11008,32000,true\n"))[0]
    with pytest.raises(SpecError, match=r"ops.csv:2:1: \(row\): model 'org/tiny': the profile's d_ff 11008 \(the spec: 14336\)"):
        oplowering.resolve(row, measurements.Specs(str(tmp_path)))
    row = opprofiles.read(simple(tmp_path, "org/tiny,add,1,1,0.01,4096,32,32,128,14336,32000,true\n"))[0]
    assert oplowering.resolve(row, measurements.Specs(str(tmp_path)))[1] == "spec tiny"


# --- the command ----------------------------------------------------------------------------

def _profile(tmp_path) -> str:
    """Kernels timed by a known curve (eta 0.7, beta 0.8, p 2, t0 4 us) on a100-80gb, 10 token
    counts x 2 tp x 2 GEMMs: the fit must find it and every kernel is above its bound."""
    from rooflinec.serving.opfit import Curve
    curve, lines = Curve(0.7, 0.8, 2.0, 4e-6), []
    model = oplowering.model_of(LLAMA2_7B)
    for tp in (1, 2):
        for op in ("mlp_up_proj", "mlp_down_proj"):
            tokens = np.array([1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096])
            f, b = oplowering.lowered(model, tp).at(op, tokens)
            for m, t in zip(tokens, curve.time(f, b, 312e12, 2.039e12)):
                lines.append(f"llama,{op},{m},{tp},{float(t) * 1e3!r},4096,32,32,128,11008,32000,true\n")
    return simple(tmp_path, "".join(lines))


@pytest.mark.slow
def test_validate_ops_writes_the_report_and_finds_the_curve(call, tmp_path):
    code, out, err = call("validate-ops", _profile(tmp_path), "--rows", "--out", str(tmp_path / "v"))
    assert code == 0, err
    lines = (tmp_path / "v" / "ops" / "predictions.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("model,op,class,tokens,tp,measured_ms,predicted_ms,interval_lo_ms,interval_hi_ms")
    assert len(lines) == 41 and all(line.endswith(f":{n}") for n, line in enumerate(lines[1:], start=2))
    assert "40 kernels; 0 faster than their roofline bound; GEMM median abs error 0.0%" in out
    rep = json.loads((tmp_path / "v" / "ops.json").read_text(encoding="utf-8"))
    (gemm,) = rep["classes"]
    assert (round(gemm["compute_fraction"], 3), round(gemm["bandwidth_fraction"], 3)) == (0.7, 0.8)
    assert (tmp_path / "v" / "ops" / "gemm.svg").read_text(encoding="utf-8").startswith("<?xml")
    md = (tmp_path / "v" / "ops.md").read_text(encoding="utf-8")
    assert "| gemm | mlp_up_proj, mlp_down_proj | 0.700 | 0.800 |" in md


def test_validate_ops_usage_and_input_errors(call, tmp_path):
    code, _, err = call("validate-ops", _profile(tmp_path), "--device", "a100-81gb", "--out", str(tmp_path / "v"))
    assert code == 2 and "--device: no hardware spec 'a100-81gb'" in err
    code, _, err = call("validate-ops", _profile(tmp_path), "--tp", "1,x", "--out", str(tmp_path / "v"))
    assert code == 2 and "--tp: '1,x' is not a comma-separated list" in err
    code, _, err = call("validate-ops", _profile(tmp_path), "--tp", "4", "--out", str(tmp_path / "v"))
    assert code == 1 and "no profiled kernels at tp 4" in err and not (tmp_path / "v").exists()
    bad = simple(tmp_path, "llama,add,1,1,zero,4096,32,32,128,11008,32000,true\n")
    code, _, err = call("validate-ops", bad, "--out", str(tmp_path / "w"))
    assert code == 1 and err.startswith(f"{bad}:2:") and "Traceback" not in err
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_curves_from_another_device_keep_p_and_t0_and_refit_eta_and_beta(call, tmp_path):
    # fitted on a100-80gb kernels made by (0.7, 0.8, 2, 4 us); then kernels on h100-sxm made by
    # (0.6, 0.9, 2, 4 us): with --curves only eta and beta move, and they land on 0.6 and 0.9
    from rooflinec.serving.opfit import Curve
    a100 = tmp_path / "a100"
    assert call("validate-ops", _profile(tmp_path), "--out", str(a100), "--format", "json")[0] == 0
    model, lines = oplowering.model_of(LLAMA2_7B), []
    for m in (1, 16, 64, 256, 1024, 4096):
        f, b = oplowering.lowered(model, 1).at("mlp_up_proj", np.array([m]))
        t = Curve(0.6, 0.9, 2.0, 4e-6).time(f, b, 989.4e12, 3.35e12)[0]   # h100-sxm: 989.4 TFLOP/s, 3.35 TB/s
        lines.append(f"llama,mlp_up_proj,{m},1,{float(t) * 1e3!r},4096,32,32,128,11008,32000,true\n")
    (tmp_path / "h100").mkdir()
    h100 = simple(tmp_path / "h100", "".join(lines))
    code, _, err = call("validate-ops", h100, "--device", "h100-sxm", "--curves", str(a100 / "ops.json"),
                        "--out", str(tmp_path / "v"), "--format", "json")
    assert code == 0, err
    (gemm,) = json.loads((tmp_path / "v" / "ops.json").read_text(encoding="utf-8"))["classes"]
    assert gemm["refitted"] == ["compute_fraction", "bandwidth_fraction"]
    assert (round(gemm["compute_fraction"], 3), round(gemm["bandwidth_fraction"], 3)) == (0.6, 0.9)
    assert (round(gemm["sharpness"], 3), round(gemm["overhead_s"] * 1e6, 3)) == (2.0, 4.0)
    # the curve as it came (A100's eta 0.7, beta 0.8 at H100's peaks) is off; its errors are reported
    assert gemm["transferred"]["compute_fraction"] == pytest.approx(0.7, abs=1e-3)
    assert gemm["transferred"]["in_scope"]["median_abs"] > 0.05 > gemm["in_scope"]["median_abs"]


def test_a_curves_file_that_is_not_an_ops_json_is_refused(call, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"classes": [{"class": "gemm", "compute_fraction": 2}]}', encoding="utf-8")
    code, _, err = call("validate-ops", _profile(tmp_path), "--curves", str(bad), "--out", str(tmp_path / "v"))
    assert code == 1 and err.startswith(f"{bad}: classes[0]: expected a class") and not (tmp_path / "v").exists()
    bad.write_text("{", encoding="utf-8")
    code, _, err = call("validate-ops", _profile(tmp_path), "--curves", str(bad), "--out", str(tmp_path / "v"))
    assert code == 1 and err.startswith(f"{bad}:1:2: not an ops.json")
