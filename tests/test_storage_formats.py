"""Tensor classes stored in their own formats. Activations (a study's `quantization:
{activations: ...}`) set b, the bytes per activation element, while `dtype` keeps choosing the
tensor peak; weights in a format that peak does not run on pay their dequantisation."""

from __future__ import annotations

import textwrap
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
