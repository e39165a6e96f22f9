"""Tensor classes stored in their own formats. Activations (a study's `quantization:
{activations: ...}`) set b, the bytes per activation element, while `dtype` keeps choosing the
tensor peak; weights in a format that peak does not run on pay their dequantisation."""

from __future__ import annotations

import math
import textwrap
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.model import quant
from rooflinec.cli import report
from rooflinec.spec import load as spec
from rooflinec.model import symbols as sym
from rooflinec.base.errors import SpecError
from rooflinec.model.symbols import B, S
from rooflinec.cost.workbench import Workbench

ROOT = Path(__file__).resolve().parent.parent
LLAMA = spec.load_model(str(ROOT / "rooflinec" / "spec" / "catalog" / "models" / "llama-3.1-8b.yaml"))
H100 = spec.load_hardware(str(ROOT / "rooflinec" / "spec" / "catalog" / "hardware" / "h100-sxm.yaml"))


def _study(tmp_path, dtype: str, quantization: str) -> str:
    text = textwrap.dedent(f"""\
        model: llama-3.1-8b
        devices: [h100-sxm]
        dtype: {dtype}
        quantization: {quantization}
        analyses:
          ledger: {{workloads: [{{batch: 1, context: 1024}}]}}
        """)
    (tmp_path / "s.yaml").write_text(text)
    return str(tmp_path / "s.yaml")


def _layer(bench: Workbench, point: dict):
    return bench.ledger(bench.program("decode"), H100, point, scope="layer")


def test_fp8_activations_halve_an_elementwise_ops_bytes():
    # Llama-3.1-8B (its config.json: intermediate_size 14336): the SwiGLU product gate_mul
    # reads silu(G) and U and writes their product, three M x d_ff tensors. Decode at B = 1
    # has M = 1 token: 3 * 1 * 14336 = 43,008 elements, 86,016 B at bf16 (2 B) and
    # 43,008 B with the activations stored in fp8 (1 B); the compute dtype stays bf16.
    point = {B: 1, S: 1024}
    bf16 = _layer(Workbench.of(LLAMA, [H100], "bf16"), point).rows
    fp8 = _layer(Workbench.of(LLAMA, [H100], "bf16", quantization={"activations": "fp8"}), point).rows
    row = {r.op.name: r for r in bf16}["gate_mul"]
    row8 = {r.op.name: r for r in fp8}["gate_mul"]
    assert row.bytes == 86_016 and row8.bytes == 43_008
    assert row8.flops == row.flops == 14_336


_BENCHES: dict = {}


def _bench(fmt: str) -> Workbench:
    """One workbench per activations format, its programs lowered once for every example."""
    if fmt not in _BENCHES:
        _BENCHES[fmt] = Workbench.of(LLAMA, [H100], "bf16", quantization={"activations": fmt})
    return _BENCHES[fmt]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(quant.FORMATS)), min_size=2, max_size=2, unique=True),
       st.integers(1, 256), st.integers(1, 32768), st.sampled_from(["decode", "prefill"]))
def test_activation_bytes_fall_with_the_formats_bits_and_nothing_else_moves(pair, batch, context, phase):
    point = {B: batch, S: context}
    wide, narrow = sorted(pair, key=lambda f: -quant.byte_value(f))
    a, c = (_bench(f).ledger(_bench(f).program(phase), H100, point) for f in (wide, narrow))
    ratio = quant.byte_value(narrow) / quant.byte_value(wide)
    # activations (and the attention scores kept beside them) scale with b alone
    for cls in ("activations", "scores"):
        assert c.traffic(cls) == pytest.approx(a.traffic(cls) * ratio)
    assert c.traffic("activations") <= a.traffic("activations")
    for cls in ("weights", "kv_cache"):
        assert c.traffic(cls) == a.traffic(cls)
    assert c.flops == a.flops


def test_an_unknown_activations_format_is_a_located_error(tmp_path):
    with pytest.raises(SpecError) as err:
        spec.load_study(_study(tmp_path, "bf16", "{activations: fp6}"))
    message = str(err.value)
    assert "s.yaml:4:" in message and "quantization.activations" in message
    assert "fp6" in message and "nvfp4" in message   # what is wrong, and what is accepted


def test_fp8_compute_with_bf16_activations_runs_on_the_fp8_peak_at_two_bytes(tmp_path):
    bench = Workbench(spec.load_study(_study(tmp_path, "fp8", "{activations: bf16}")))
    assert bench.values[sym.b] == 2             # activations at bf16
    assert bench.values[quant.b_w] == 1         # weights follow the compute dtype, fp8
    assert bench.values[quant.b_kv] == 1
    ledger = _layer(bench, {B: 1, S: 1024})
    fp8_peak = H100.tensor["fp8"]
    assert ledger.peak == fp8_peak != H100.tensor["bf16"]
    assert {r.op.name: r for r in ledger.rows}["q_proj"].unit_peak == fp8_peak


@pytest.mark.slow
def test_the_report_header_states_the_activations_format(tmp_path):
    rep = report.build(spec.load_study(_study(tmp_path, "fp8", "{activations: bf16}")))
    assert (rep["dtype"], rep["activations"], rep["bytes_per_element"]) == ("fp8", "bf16", 2)
    from rooflinec.render.pages import render_many
    files = render_many(rep, ["md"])
    md = next(iter(files.values()))
    assert "fp8 arithmetic (its tensor peak), activations stored in bf16 (2 bytes per element)" in md
    # a study that stores them in its dtype keeps the short header and no key
    plain = report.build(spec.load_study(_study(tmp_path, "fp8", "{weights: fp8}")))
    assert "activations" not in plain and "stored" not in plain and plain["bytes_per_element"] == 1
    assert "fp8 (1 byte per element)," in next(iter(render_many(plain, ["md"]).values()))
    # weights and KV cache in their own formats: NVFP4 4 bits + an 8-bit scale per 16 = 0.5625 B
    quant = report.build(spec.load_study(_study(tmp_path, "bf16", "{weights: nvfp4, kv_cache: fp8}")))
    assert quant["stored"] == {"weights": {"format": "nvfp4", "bytes_per_element": 0.5625},
                               "kv_cache": {"format": "fp8", "bytes_per_element": 1}}
    assert ("bf16 (2 bytes per element), weights stored in nvfp4 (0.5625 bytes per element), KV cache "
            "stored in fp8 (1 byte per element)") in next(iter(render_many(quant, ["md"]).values()))


def test_a_moe_prefill_counts_the_dequantisation_of_every_distinct_expert_it_reads():
    # gpt-oss-120b's config.json: hidden_size 2880, 128 experts of intermediate_size 2880,
    # top-4. NVFP4 weights under bf16 compute, prefill of one 8192-token prompt (M = 8192):
    # expert_gate_proj does 2*M*k*d_model*d_e = 2*8192*4*2880*2880 = 543,581,798,400 FLOPs and
    # reads E*(1 - (1 - 4/128)^8192) ~ 128 experts (the rest is 1e-113), 128*2880*2880 =
    # 1,061,683,200 weight elements, each dequantised with 2 FLOPs: 2,123,366,400 more.
    # (The count must keep (1 - k/E)^M as a power: expanded, E^M overflows a float.)
    gpt = spec.load_model(str(ROOT / "rooflinec" / "spec" / "catalog" / "models" / "gpt-oss-120b.yaml"))
    bench = Workbench.of(gpt, [H100], "bf16", quantization={"weights": "nvfp4"})
    rows = bench.ledger(bench.program("prefill"), H100, {B: 1, S: 8192}, scope="layer").rows
    gate = {r.op.name: r for r in rows}["expert_gate_proj"]
    assert gate.flops == pytest.approx(543_581_798_400 + 2_123_366_400, rel=1e-12)
    assert gate.traffic["weights"] == pytest.approx(1_061_683_200 * 0.5625, rel=1e-12)


@pytest.mark.slow
def test_gemm_intensity_counts_weight_elements_whatever_their_format(tmp_path):
    # Llama-3.1-8B's W_q: hidden_size 4096 x 32 heads of 128 = 16,777,216 elements, whether its
    # weights are bf16 and activations fp8 (b_w = 2, b = 1) or weights NVFP4 (b_w = 0.5625)
    for quantization in ("{activations: fp8}", "{weights: nvfp4}"):
        path = _study(tmp_path, "bf16", quantization)
        text = Path(path).read_text().replace("ledger: {workloads: [{batch: 1, context: 1024}]}",
                                              "gemm_intensity: {tokens: [1], groups: [[q_proj]]}")
        Path(path).write_text(text)
        rep = report.build(spec.load_study(path))
        row = next(s for s in rep["sections"] if s["kind"] == "gemm_intensity")["rows"][0]
        assert row["weight_elements"] == 4096 * 4096


# --- formats per tensor class: routed experts apart from the attention and dense weights -----

GPT_OSS = spec.load_model(str(ROOT / "rooflinec" / "spec" / "catalog" / "models" / "gpt-oss-120b.yaml"))
B200 = spec.load_hardware(str(ROOT / "rooflinec" / "spec" / "catalog" / "hardware" / "b200.yaml"))


def test_the_gpt_oss_120b_checkpoint_weighs_60_8_gib_not_57_8():
    # OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card": a 60.8 GiB checkpoint, the MoE
    # weights in MXFP4 and the rest (attention, router, embeddings, LM head) in bf16; its
    # config.json's quantization_config keeps self_attn, router, embed_tokens and lm_head out.
    # The catalog's components: routed experts' matrices 36 layers x 128 experts x 3 x 2880 x 2880
    # = 114,661,785,600 elements at MXFP4's 4 + 8/32 bits = 17/32 B -> 60,914,073,600 B; the
    # other 116,829,156,672 - 114,661,785,600 = 2,167,371,072 parameters (the experts' biases,
    # 36 x 128 x (2 x 2880 + 2880) = 39,813,120, among them) at 2 B -> 4,334,742,144 B;
    # 65,248,815,744 B = 60.77 GiB. Every weight in MXFP4 would be 57.80 GiB.
    from rooflinec.cost.deployment import Deployment
    split = Deployment(GPT_OSS, weights="bf16", experts="mxfp4")
    assert split.params_per_device(True) == 114_661_785_600
    assert split.params_per_device(False) == 2_167_371_072
    assert split.weight_bytes() == 60_914_073_600 + 4_334_742_144 == 65_248_815_744
    assert round(split.weight_bytes() / 2**30, 1) == 60.8
    assert round(Deployment(GPT_OSS, weights="mxfp4").weight_bytes() / 2**30, 2) == 57.80
    # a study's quantization: {experts: mxfp4} is the same deployment
    assert Workbench.of(GPT_OSS, quantization={"experts": "mxfp4"}).weight_bytes() == 65_248_815_744


def test_gpt_oss_w4a16_decode_step_on_an_h100_reads_experts_at_mxfp4_and_the_rest_at_bf16():
    # gpt-oss-120b (config.json: d_model 2880, 64 query heads and 8 KV heads of 64, 128 experts
    # of 2880, top-4, 36 layers alternating a 128-token window with full attention, vocab 201,088),
    # MXFP4 experts and bf16 the rest, bf16 GEMMs on an H100 (no fp4 peak: weight-only W4A16).
    # Decode at B = 64, S = 4096, the ideal variant:
    # - bf16 weights per layer: q 2880*4096 + bias 4096, k and v 2880*512 + 512 each, o
    #   4096*2880 + bias 2880, two norms 2*2880, router 2880*128 -> 26,924,480; x36 =
    #   969,281,280; the embedding's 64 rows 64*2880 = 184,320, the final norm 2880 and the LM
    #   head 201,088*2880 = 579,133,440: 1,548,601,920 elements x 2 B = 3,097,203,840 B
    # - the experts: 64 tokens route 256 times over 128 experts, touching D = 128 (1 - (31/32)^64)
    #   = 111.22 distinct experts per layer (uniform routing); each 3*2880*2880 elements at 17/32 B
    # - KV cache: 2 x 8 x 64 elements x 2 B = 2,048 B per token per layer; 18 full layers read
    #   4096 tokens and 18 windowed ones 128: 64 x 2048 x (18*4096 + 18*128) = 9,965,666,304 B
    bench = Workbench.of(GPT_OSS, [H100], "bf16", quantization={"experts": "mxfp4"})
    led = bench.ledger(bench.program("decode", "ideal"), H100, {B: 64, S: 4096})
    distinct = 128 * (1 - (31 / 32) ** 64)
    experts = 36 * distinct * 3 * 2880 * 2880 * 17 / 32
    assert led.traffic("weights") == pytest.approx(3_097_203_840 + experts, rel=1e-12)
    assert led.traffic("kv_cache") == 9_965_666_304
    # each expert weight element read is dequantised into the bf16 GEMM: 2 FLOPs (f_dqe)
    gate = {r.op.name: r for r in led.rows}["expert_gate_proj"]
    assert gate.flops == pytest.approx(36 * (2 * 64 * 4 * 2880 * 2880 + 4 * 64 * 4 * 2880
                                             + 2 * distinct * 2880 * 2880), rel=1e-12)
    assert led.peak == H100.tensor["bf16"]
    # the serving model (calibrated predictions, simulator) reads the same weight bytes
    from rooflinec.cost import program_costs
    from rooflinec.serving import serving_model as sm
    run = sm.Run(GPT_OSS, H100, "bf16", 1, 4096, 1, 64, experts="mxfp4")
    ops = program_costs.op_costs(run.deployment, "decode", H100, {B: 64, S: 4096}, formats=run.deployment.formats())
    assert sum(o.traffic.get("weights", 0) for o in ops) == pytest.approx(led.traffic("weights"), rel=1e-12)


def test_experts_only_retypes_the_routed_ops_and_their_dequantisation():
    bench = Workbench.of(GPT_OSS, quantization={"experts": "mxfp4"})
    prog = bench.program("decode", "ideal")
    for op in prog.ops:
        weights = op.cost.bytes_of("weights")
        if op.name.startswith("expert_") and weights != 0:
            assert quant.b_we in weights.free_symbols and quant.f_dqe in op.cost.flops.free_symbols
        else:
            assert quant.b_we not in weights.free_symbols and quant.f_dqe not in op.cost.flops.free_symbols
            assert quant.f_dq not in op.cost.flops.free_symbols   # bf16 weights on bf16 GEMMs
    values = bench.values
    assert (values[quant.b_w], values[quant.b_we], values[quant.f_dq], values[quant.f_dqe]) == (2, 0.53125, 0, 2)


def test_weights_alone_still_store_the_routed_experts_too():
    # `weights` without `experts` keeps meaning every weight (the experts follow it)
    bench = Workbench.of(GPT_OSS, quantization={"weights": "mxfp4"})
    assert bench.storage("experts") == "mxfp4"
    assert bench.values[quant.b_we] == bench.values[quant.b_w] == 0.53125
    assert round(bench.weight_bytes() / 2**30, 2) == 57.80


def test_weight_only_gemms_where_the_device_lacks_the_weights_peak():
    # the H100 lists no fp4 tensor peak (its datasheet: FP8, FP16/BF16, TF32, INT8): NVFP4 or
    # MXFP4 weights are dequantised into bf16 GEMMs; the B200 runs them on its fp4 peak
    from rooflinec.cost.deployment import Deployment
    assert Deployment(GPT_OSS, H100, weights="mxfp4").gemm_dtype == "bf16"
    assert Deployment(GPT_OSS, B200, weights="mxfp4").gemm_dtype == "mxfp4"
    assert Deployment(GPT_OSS, H100, weights="fp8").gemm_dtype == "fp8"
    on_h100 = Deployment(GPT_OSS, H100, weights="mxfp4")
    assert on_h100.dequant() == {quant.f_dq: 2, quant.f_dqe: 2}
    assert "dequantised into bf16 GEMMs on the bf16 tensor peak" in on_h100.dequantisation()
    assert Deployment(GPT_OSS, B200, weights="mxfp4").dequantisation() == ""


def test_the_serving_model_runs_nvfp4_weights_on_an_h100_as_bf16_gemms():
    # Llama-3.1-8B decode, 8 sequences: the o_proj GEMM (4096 x 4096) does 2*8*4096*4096 =
    # 268,435,456 FLOPs, its fused residual add 8*4096 = 32,768, plus 2 per weight element
    # dequantised, 33,554,432; 32 layers; on the bf16 peak
    from rooflinec.cost import program_costs
    from rooflinec.serving import serving_model as sm
    run = sm.Run(LLAMA, H100, "nvfp4", 1, 1024, 128, 8)
    ops = {o.name: o for o in program_costs.op_costs(run.deployment, "decode", H100, {B: 8, S: 1024},
                                                     formats=run.deployment.formats())}
    assert ops["o_proj"].flops == 32 * (268_435_456 + 32_768 + 33_554_432)
    assert ops["o_proj"].traffic["weights"] == 32 * 4096 * 4096 * 0.5625
    step = sm.step_cost(run, 8, 1088, 0)   # no "no tensor peak for nvfp4"
    assert step.compute_s.sum() > 0


def test_fp8_with_128x128_block_scales_counts_one_fp32_scale_per_block():
    # DeepSeek-V3's config.json: quantization_config {quant_method: fp8, fmt: e4m3,
    # weight_block_size: [128, 128]}; each weight's `weight_scale_inv` holds one fp32 per block:
    # (8 + 32/(128*128)) / 8 = 1 + 1/4096 = 1.000244140625 B per element
    import json
    config = json.loads((ROOT / "tests" / "hf_configs" / "deepseek-v3" / "config.json").read_text())
    block = config["quantization_config"]["weight_block_size"]
    fmt = quant.FORMATS["fp8-block128"]
    assert fmt.block == block[0] * block[1] == 16_384 and fmt.scale_bits == 32
    assert fmt.bytes == Fraction(4097, 4096) and quant.BYTES["fp8-block128"] == 1.000244140625
    assert quant.peak_dtype("fp8-block128") == "fp8"
    # MXFP4 (OCP Microscaling Formats v1.0): one E8M0 per 32; NVFP4 (NVIDIA's NVFP4
    # description): one E4M3 per 16 (its second-level fp32 tensor scale, 4 B a matrix, left out)
    assert (quant.FORMATS["mxfp4"].block, quant.FORMATS["mxfp4"].scale_bits) == (32, 8)
    assert (quant.FORMATS["nvfp4"].block, quant.FORMATS["nvfp4"].scale_bits) == (16, 8)
    # DeepSeek-V3's weights: every parameter pays 1/4096 B of scale over plain fp8
    from rooflinec.cost.deployment import Deployment
    ds = spec.load_model(str(ROOT / "rooflinec" / "spec" / "catalog" / "models" / "deepseek-v3.yaml"))
    n = Deployment(ds, weights="fp8").params_per_device()
    assert Deployment(ds, weights="fp8-block128").weight_bytes() == math.ceil(n * Fraction(4097, 4096))


def test_the_importer_maps_a_checkpoints_quantization_config_to_per_class_formats():
    # gpt-oss-120b: quant_method mxfp4, modules_to_not_convert self_attn, router, embed_tokens,
    # lm_head -> the routed experts alone; DeepSeek-V3: fp8 in 128 x 128 blocks, every weight
    import json
    read = lambda name: json.loads((ROOT / "tests" / "hf_configs" / name / "config.json").read_text())  # noqa: E731
    assert quant.checkpoint_formats(read("gpt-oss-120b")["quantization_config"]) == {"experts": "mxfp4"}
    assert quant.checkpoint_formats(read("deepseek-v3")["quantization_config"]) == {"weights": "fp8-block128"}
    assert quant.checkpoint_formats({"quant_method": "awq"}) == {} == quant.checkpoint_formats("x")


def test_a_study_stores_the_routed_experts_and_an_unknown_class_is_located(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("model: gpt-oss-120b\ndevices: [h100-sxm]\nquantization: {experts: mxfp4}\n"
                    "analyses:\n  ledger: {workloads: [{batch: 1, context: 1024}]}\n")
    assert Workbench(spec.load_study(str(path))).weight_bytes() == 65_248_815_744
    path.write_text(path.read_text().replace("{experts: mxfp4}", "{expert: mxfp4}"))
    with pytest.raises(SpecError) as err:
        spec.load_study(str(path))
    assert "s.yaml:3:" in str(err.value) and "expert" in str(err.value)


def _serve(*argv) -> tuple[int, str, str]:
    import io
    from rooflinec.cli.app import run
    out, err = io.StringIO(), io.StringIO()
    return run(["serve", *argv], out, err), out.getvalue(), err.getvalue()


@pytest.mark.slow   # 0.4 s: one serve of gpt-oss-120b
def test_serve_takes_a_format_per_weight_class_and_states_the_dequantisation():
    code, out, err = _serve("gpt-oss-120b", "--device", "h100-sxm", "--batch", "1",
                            "--weights", "experts=mxfp4,attention=bf16")
    assert code == 0, err
    assert "attention and dense weights bf16, routed experts mxfp4" in out
    assert "weights 60.77 GiB" in out
    assert "weight-only: routed experts mxfp4 read at their storage bytes" in out
    assert "dequantised into bf16 GEMMs" in out


@pytest.mark.parametrize("flag, message", [
    ("expert=mxfp4", "unknown weight class 'expert'; choose from attention, experts"),
    ("experts=mxfp5", "--weights experts: unknown format 'mxfp5'; choose from"),
    ("experts=mxfp4,experts=bf16", "class 'experts' given twice"),
    ("experts=mxfp4,bf16", "'bf16' is not CLASS=FORMAT"),
    ("fp6", "--weights: unknown format 'fp6'"),
])
def test_serve_refuses_an_unknown_weight_class_or_format(flag, message):
    code, _, err = _serve("gpt-oss-120b", "--device", "h100-sxm", "--weights", flag)
    assert code == 2 and message in err and "Traceback" not in err


def test_serve_with_an_fp4_compute_dtype_on_hopper_names_the_weight_only_path():
    code, _, err = _serve("gpt-oss-120b", "--device", "h100-sxm", "--dtype", "mxfp4")
    assert code == 1 and "lists no tensor peak for mxfp4" in err and "--weights mxfp4 --dtype bf16" in err


def test_routed_experts_stored_for_a_model_without_them_is_a_located_error(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("model: llama-3.1-8b\ndevices: [h100-sxm]\nquantization: {experts: mxfp4}\n"
                    "analyses:\n  ledger: {workloads: [{batch: 1, context: 1024}]}\n")
    with pytest.raises(SpecError) as err:
        spec.load_study(str(path))
    assert "s.yaml:3:" in str(err.value) and "quantization.experts" in str(err.value)
    assert "no routed experts" in str(err.value)
    code, _, err = _serve("llama-3.1-8b", "--device", "h100-sxm", "--weights", "experts=mxfp4")
    assert code == 2 and "has no routed experts" in err


def test_a_sweeps_formats_store_the_routed_experts_point_by_point():
    # gpt-oss-120b with the routed experts at NVFP4 at one point: 114,661,785,600 expert
    # elements at 9/16 B and the other 2,167,371,072 parameters at the study's bf16
    bench = Workbench.of(GPT_OSS, [B200], "bf16")
    point = {"experts": "nvfp4"}
    values = bench.values_for(None, point)
    assert (values[quant.b_w], values[quant.b_we], values[quant.f_dqe]) == (2, 0.5625, 2)
    assert bench.weight_bytes(None, point) == 114_661_785_600 * 9 // 16 + 2_167_371_072 * 2
    retyped = quant.retype(bench.program("decode", "ideal"), tuple(point))
    weights = retyped.op("expert_down_proj").cost.bytes_of("weights")
    assert quant.b_we in weights.free_symbols
    assert quant.b_we not in retyped.op("o_proj").cost.bytes_of("weights").free_symbols


def test_experts_retyped_after_the_weights_take_their_own_dequantisation():
    # a study's {weights: nvfp4} retyped again by a sweep point storing the experts at bf16:
    # the routed GEMMs' dequantisation follows the experts' format (f_dqe = 0), the rest f_dq
    bench = Workbench.of(GPT_OSS, [B200], "bf16", quantization={"weights": "nvfp4"})
    retyped = quant.retype(bench.program("decode", "ideal"), ("experts",))
    down = retyped.op("expert_down_proj").cost.flops.free_symbols
    assert quant.f_dqe in down and quant.f_dq not in down
    assert quant.f_dq in retyped.op("o_proj").cost.flops.free_symbols
    assert bench.values_for(None, {"experts": "bf16"})[quant.f_dqe] == 0
