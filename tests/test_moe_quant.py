"""Mixture of experts, latent attention and quantized formats: published counts and the laws
the formulas obey."""

from __future__ import annotations

import math
import re
import textwrap
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.model import params as P
from rooflinec.model import quant
from rooflinec.spec import load as spec
from rooflinec.model import symbols as sym
from rooflinec.model import symbol_table
from rooflinec.base.errors import SpecError
from rooflinec.cost.evaluate import number
from rooflinec.model.ops.moe import distinct_experts
from rooflinec.model.symbols import B, M, S
from rooflinec.cost.workbench import Workbench

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "rooflinec" / "spec" / "catalog"


def model(key: str):
    return spec.load_model(str(CATALOG / "models" / f"{key}.yaml"))


def device(key: str):
    return spec.load_hardware(str(CATALOG / "hardware" / f"{key}.yaml"))


def counts(m) -> tuple[int, int]:
    p, values = P.count(m), symbol_table.model_values(m)
    return int(number(p.total, values)), int(number(p.active, values))


def test_mixtral_8x7b_has_46_70b_total_and_12_88b_active_parameters():
    # Jiang et al. 2024, "Mixtral of Experts": 46.7B total, 12.9B active (13B in the abstract);
    # config.json: d 4096, 32 layers, 32 heads / 8 KV heads of 128, 8 experts, top-2, 14336 wide.
    # Per layer: q, o 4096*4096 = 16,777,216 each; k, v 4096*1024 = 4,194,304 each -> 41,943,040
    #   router 4096*8 = 32,768; two norms 8,192; one expert 3*4096*14336 = 176,160,768
    #   total: 41,943,040 + 32,768 + 8,192 + 8*176,160,768 = 1,451,270,144; x32 = 46,440,644,608
    #   active: 41,943,040 + 32,768 + 8,192 + 2*176,160,768 = 394,305,536; x32 = 12,617,777,152
    # + embeddings 2*32000*4096 = 262,144,000 + final norm 4096
    total, active = counts(model("mixtral-8x7b"))
    assert total == 46_702_792_704
    assert active == 12_879_925_248


def test_deepseek_v3_has_671b_total_and_37b_activated_parameters():
    # DeepSeek-V3 README: "671B total parameters with 37B activated for each token" (the 14B
    # multi-token-prediction module excluded). config.json: d 7168, 61 layers (3 dense, d_ff 18432),
    # 128 heads, MLA q_lora 1536, kv_lora 512, nope 128, rope 64, v 128; 256 experts of 2048, top-8,
    # 1 shared. MLA per layer: 7168*1536 + 1536*128*192 + 7168*576 + 512*128*256 + 128*128*7168
    #   = 11,010,048 + 37,748,736 + 4,128,768 + 16,777,216 + 117,440,512 = 187,105,280 (+ norms)
    # MoE layer: 256*3*7168*2048 = 11,274,289,152 routed, 44,040,192 shared, router 1,835,008
    # The catalog counts the checkpoint's one MTP module in the total (mtp_layers: 1; 11,610,067,968
    # parameters, test_hfimport), not in the active count.
    m = model("deepseek-v3")
    total, active = counts(m)
    mtp = sum(int(number(c.count, symbol_table.model_values(m))) for c in P.count(m).components if c.group == "mtp")
    assert mtp == 11_610_067_968 and round((total - mtp) / 1e9) == 671
    # "activated" counts what a token multiplies by: without the input table (a gather)
    embedding = m.vocab * m.d_model   # 129280*7168 = 926,679,040
    assert round((active - embedding) / 1e9) == 37


def test_deepseek_v3_mla_caches_576_elements_per_token_per_layer():
    # config.json: kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements per layer; 61 layers at
    # bf16 (2 B): 61*576*2 = 70,272 B per token (a 128-head MHA of 192/128 would cache
    # 61*128*(192+128)*2 = 4,997,120 B)
    bench = Workbench.of(model("deepseek-v3"))
    assert bench.kv_per_token() == 70_272


def test_llama_31_8b_and_qwen3_32b_match_their_model_cards():
    # Llama-3.1-8B: safetensors total 8,030,261,248 ("8B"): per layer q, o 4096^2 = 16,777,216 each,
    # k, v 4096*1024 each, MLP 3*4096*14336 = 176,160,768, norms 8192 -> 218,112,000; x32 =
    # 6,979,584,000; + 2*128256*4096 = 1,050,673,152 + 4096.
    assert counts(model("llama-3.1-8b"))[0] == 8_030_261_248
    # Qwen3-32B model card: 32.8B parameters, 31.2B non-embedding. Per layer q, o 5120*8192 =
    # 41,943,040 each, k, v 5120*1024 each, MLP 3*5120*25600 = 393,216,000, norms 2*5120 + q/k
    # norms 2*128 -> 487,598,336; x64 = 31,206,293,504 (+5120); embeddings 2*151936*5120.
    m = model("qwen3-32b")
    p = P.count(m)
    total = number(p.total, symbol_table.model_values(m))
    assert total == 32_762_123_264                                  # 32.8B
    # the card's "non-embedding" leaves out both tables (input and untied output)
    assert total - 2 * 151936 * 5120 == 31_206_298_624              # 31.2B


def test_block_scaled_formats_count_their_scales():
    # NVFP4: 4-bit E2M1 + one 8-bit E4M3 scale per 16 -> (4 + 8/16)/8 = 0.5625 B
    # MXFP4 (OCP MX v1.0): 4 bits + one 8-bit E8M0 scale per 32 -> (4 + 8/32)/8 = 0.53125 B
    assert quant.FORMATS["nvfp4"].bytes == Fraction(9, 16) and quant.BYTES["nvfp4"] == 0.5625
    assert quant.FORMATS["mxfp4"].bytes == Fraction(17, 32) and quant.BYTES["mxfp4"] == 0.53125
    assert quant.BYTES["fp8"] == 1 and quant.BYTES["bf16"] == 2


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 512), st.data(), st.integers(1, 4096))
def test_distinct_experts_lie_between_k_and_min_e_mk_and_rise_with_m(experts, data, tokens):
    top_k = data.draw(st.integers(1, experts))
    at = lambda m: float(number(distinct_experts(M, sym.dimension("E"), sym.dimension("k")),  # noqa: E731
                               {M: m, sym.dimension("E"): experts, sym.dimension("k"): top_k}))
    d, tol = at(tokens), 1e-9 * experts
    assert top_k - tol <= d <= min(experts, tokens * top_k) + tol
    assert at(tokens + 1) >= d - tol
    if top_k < experts and d < experts * (1 - 1e-6):   # strictly, until floats reach E
        assert at(tokens + 1) > d


def test_expert_weight_traffic_per_token_falls_as_the_step_grows():
    # Mixtral decode: at B = 1 a token reads its 2 experts; at B = 512 the step reads all 8
    # once, shared by 512 tokens: weight bytes per token fall from 2 experts' to 8/512 of one's.
    bench = Workbench.of(model("mixtral-8x7b"), [device("h100-sxm")])
    prog = bench.program("decode", "ideal")
    op = prog.op("expert_down_proj")
    per_token = [number(op.cost.bytes_of("weights"), bench.at({B: n, S: 1}, prog.bindings)) / n
                 for n in (1, 2, 8, 64, 512)]
    expert = 4096 * 14336 * 2
    assert per_token[0] == pytest.approx(2 * expert)
    assert per_token[-1] == pytest.approx(8 * expert / 512)
    assert all(a > b for a, b in zip(per_token, per_token[1:]))


FORMATS_BY_BITS = ["fp32", "bf16", "fp8", "nvfp4", "mxfp4", "int4"]


@pytest.mark.parametrize("key", ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3"])
def test_quantized_weight_bytes_fall_with_bits(key):
    bench = Workbench.of(model(key))
    sizes = []
    for fmt in FORMATS_BY_BITS:
        bench.study = bench.study.__class__(**{**bench.study.__dict__, "quantization": {"weights": fmt}})
        sizes.append(bench.weight_bytes())
    assert all(a > b for a, b in zip(sizes, sizes[1:])), sizes


def _study(tmp_path, dtype: str, devices: str, quantization: str = "") -> str:
    text = textwrap.dedent(f"""\
        model: mixtral-8x7b
        devices: [{devices}]
        dtype: {dtype}
        {quantization}
        analyses:
          ledger: {{workloads: [{{batch: 8, context: 1024}}]}}
        """)
    (tmp_path / "s.yaml").write_text(text)
    return str(tmp_path / "s.yaml")


def test_a_dtype_the_device_has_no_peak_for_is_a_located_error(tmp_path):
    with pytest.raises(SpecError) as err:
        spec.load_study(_study(tmp_path, "nvfp4", "h100-sxm, b200"))
    message = str(err.value)
    assert "s.yaml:3:" in message and "h100-sxm" in message and "fp4" in message
    assert "b200" not in message.split("h100-sxm")[0]


def test_weight_only_quantization_changes_weight_bytes_and_adds_dequant_flops(tmp_path):
    plain = Workbench(spec.load_study(_study(tmp_path, "bf16", "b200")))
    quant4 = Workbench(spec.load_study(_study(tmp_path, "bf16", "b200", "quantization: {weights: nvfp4, kv_cache: fp8}")))
    point = {B: 64, S: 4096}
    a = plain.ledger(plain.program("decode", "ideal"), plain.devices[0], point)
    q = quant4.ledger(quant4.program("decode", "ideal"), quant4.devices[0], point)
    # the GEMMs dequantise every weight element they read: 2 FLOPs each (convert, scale)
    assert q.flops == pytest.approx(a.flops + quant.DEQUANT_FLOPS * a.traffic("weights") / 2)
    assert q.traffic("weights") == pytest.approx(a.traffic("weights") * 0.5625 / 2)
    assert q.traffic("kv_cache") == pytest.approx(a.traffic("kv_cache") / 2)
    assert q.traffic("activations") == pytest.approx(a.traffic("activations"))


CONFIGS = ROOT / "tests" / "hf_configs"


def imported(folder: str):
    from rooflinec.spec import hfimport
    text, notes = hfimport.convert(str(CONFIGS / folder))
    return spec.load_model(str(CONFIGS / folder / "imported.yaml"), text), notes


@pytest.mark.parametrize("folder, key", [("mixtral-8x7b-v0.1", "mixtral-8x7b"), ("deepseek-v3", "deepseek-v3"),
                                         ("qwen3-30b-a3b", "qwen3-30b-a3b"), ("gpt-oss-120b", "gpt-oss-120b")])
def test_imported_moe_configs_count_as_the_shipped_specs(folder, key):
    got, _ = imported(folder)
    assert counts(got) == counts(model(key))
    assert bench_kv(got) == bench_kv(model(key))


def bench_kv(m) -> int:
    return Workbench.of(m).kv_per_token()


def test_qwen3_30b_a3b_and_gpt_oss_120b_match_their_model_cards():
    # Qwen3-30B-A3B card: 30.5B total, 3.3B activated. Per layer: attention 2*2048*4096 +
    # 2*2048*512 = 18,874,368, q/k norms 256, norms 4096, router 2048*128 = 262,144, one expert
    # 3*2048*768 = 4,718,592 (128 of them, 8 active); x48; embeddings 2*151936*2048 = 622,329,856
    total, active = counts(model("qwen3-30b-a3b"))
    # 30,532,122,624 and 3,353,032,704: the card cuts both to one decimal
    assert int(total / 1e8) == 305 and int(active / 1e8) == 33
    # gpt-oss-120b card: 116.83B total, 5.13B active (without the input table). Per layer: attention
    # 2*2880*4096 + 2*2880*512 = 26,542,080 + biases 4096 + 1024 + 2880; router 2880*128 + 128;
    # one expert 3*2880*2880 + 2*2880 + 2880 = 24,891,840 (128, 4 active); norms 5760; x36;
    # embeddings 2*201088*2880 = 1,158,266,880
    m = model("gpt-oss-120b")
    total, active = counts(m)
    assert round(total / 1e7) == 11683
    assert round((active - m.vocab * m.d_model) / 1e7) == 513


def _with_window(m, window: int, pattern: tuple):
    import dataclasses
    return dataclasses.replace(m, window=window, pattern=pattern)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 65536), st.integers(1, 65536), st.integers(1, 256),
       st.sampled_from(["decode", "prefill"]), st.sampled_from(["unfused", "ideal"]),
       st.sampled_from([("sliding",), ("sliding", "full"), ("chunked", "full", "full")]),
       st.booleans())
@pytest.mark.slow
def test_a_sliding_window_layer_never_costs_more_than_a_full_one(window, context, batch, phase, variant,
                                                                 pattern, halving):
    # with causal halving a windowed layer's S*K - K^2/2 pairs against a full one's S^2/2:
    # the difference is -(S - K)^2 / 2 <= 0
    conv = {"causal_halving": halving}
    full = Workbench.of(model("llama-3.1-8b"), [device("h100-sxm")], conventions=conv)
    slid = Workbench.of(_with_window(full.model, window, pattern), [device("h100-sxm")], conventions=conv)
    point = {B: batch, S: context}
    a = full.ledger(full.program(phase, variant), full.devices[0], point)
    w = slid.ledger(slid.program(phase, variant), slid.devices[0], point)
    assert w.flops <= a.flops * (1 + 1e-12) and w.bytes <= a.bytes * (1 + 1e-12)
    assert w.time <= a.time * (1 + 1e-12)
    if context <= window:   # the window holds the whole context: no change at all
        assert w.flops == pytest.approx(a.flops) and w.bytes == pytest.approx(a.bytes)


def test_gemma2_windowed_decode_reads_min_s_w_keys_in_half_the_layers():
    # Gemma 2 (config: sliding_window 4096, every other layer): per token per layer a KV head
    # caches K and V of 256 elements, 8 KV heads, bf16: 2*8*256*2 = 8,192 B. At S = 32768:
    # 21 full layers read 32768 tokens, 21 windowed ones 4096: 8192*(21*32768 + 21*4096) B
    bench = Workbench.of(model("gemma-2-9b"), [device("h100-sxm")])
    led = bench.ledger(bench.program("decode", "ideal"), bench.devices[0], {B: 1, S: 32768})
    assert led.traffic("kv_cache") == 8192 * (21 * 32768 + 21 * 4096)
    names = [r.op.name for r in led.rows]
    assert "attention" in names and "local_attention" in names


def edited_model_error(tmp_path, key: str, old: str, new: str) -> tuple[str, str]:
    """The error a shipped model spec with `old` replaced by `new` raises, and its file."""
    f = tmp_path / "m.yaml"
    f.write_text((CATALOG / "models" / f"{key}.yaml").read_text().replace(old, new))
    with pytest.raises(SpecError) as err:
        spec.load_model(str(f))
    return str(err.value), str(f)


def test_a_sliding_pattern_without_a_window_is_a_located_error(tmp_path):
    message, f = edited_model_error(tmp_path, "llama-3.1-8b", "head_dim: 128,", "head_dim: 128, pattern: [sliding, full],")
    assert f"{f}:7:" in message and "attention.pattern" in message and "window" in message


def test_a_sweeps_formats_set_the_classes_bytes_and_the_memory(tmp_path):
    bench = Workbench(spec.load_study(_study(tmp_path, "bf16", "b200")))
    plain, nv = bench.values_for(), bench.values_for(None, {"weights": "nvfp4", "kv_cache": "fp8"})
    assert (plain[quant.b_w], plain[quant.b_kv], plain[sym.b]) == (2, 2, 2)
    assert (nv[quant.b_w], nv[quant.b_kv], nv[sym.b]) == (0.5625, 1, 2)
    # Mixtral's 46,702,792,704 parameters at 0.5625 B, and its KV cache 2*32*8*128 = 65,536
    # elements a token at 1 B
    assert bench.weight_bytes(None, {"weights": "nvfp4"}) == math.ceil(46_702_792_704 * 0.5625)
    assert bench.kv_per_token(None, {"kv_cache": "fp8"}) == 65_536


def test_mla_decode_attention_limits_as_s_grows():
    # DeepSeek-V2 Sec. 2.1 / DeepSeek-V3 config (128 heads, r_kv 512, rope 64, nope 128, v 128), bf16.
    # absorbed: per cached token 2*n_q*(2*r_kv + d_rope) FLOPs over (r_kv + d_rope)*b bytes read once
    #   for all heads -> 2*128*1088 / (576*2) = 241.78 FLOP/B, like MQA: just under the H100's
    #   bf16 ridge (989.4e12 / 3.35e12 = 295.3), so memory-bound at any S, but only just
    # naive: K and V decompressed per head, each cached token read as n_q*(d_qk + d_v) elements
    #   for 2*n_q*(d_qk + d_v) FLOPs -> 2/b = 1 FLOP/B, the MHA limit
    from rooflinec.cost.derive import limit_at_infinity
    from rooflinec.model.ir import intensity
    m = model("deepseek-v3")
    absorbed = Workbench.of(m).program("decode", "ideal").op("attention")
    naive = Workbench.of(m, conventions={"mla": "naive"}).program("decode", "ideal").op("attention")
    values = symbol_table.model_values(m) | {sym.b: 2}
    assert float(number(limit_at_infinity(intensity(absorbed.cost), S), values)) == pytest.approx(2 * 128 * 1088 / 1152)
    assert float(number(limit_at_infinity(intensity(naive.cost), S), values)) == pytest.approx(1.0)
    # the naive form also decompresses every cached latent, a GEMM over B*S tokens each step
    decompress = Workbench.of(m, conventions={"mla": "naive"}).program("decode", "ideal").op("kv_b_proj")
    assert S in decompress.cost.flops.free_symbols


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.integers(2, 256), st.data(), st.integers(1, 4096))
def test_imbalanced_routing_reads_no_more_experts_than_uniform(experts, data, tokens):
    from rooflinec.model.moe import E, k, rho
    top_k = data.draw(st.integers(1, experts - 1))
    skew = data.draw(st.floats(1, experts / top_k))
    uniform = distinct_experts(M, E, k)
    skewed = distinct_experts(M, E / rho, k)
    at = {M: tokens, E: experts, k: top_k, rho: skew}
    assert top_k - 1e-9 <= number(skewed, at) <= number(uniform, at) + 1e-9 * experts


def test_imbalance_past_experts_over_top_k_is_a_located_error(tmp_path):
    message, f = edited_model_error(tmp_path, "mixtral-8x7b", "d_expert: 14336}", "d_expert: 14336, imbalance: 5}")
    assert f"{f}:9:" in message and "moe.imbalance" in message and "experts / top_k = 4" in message


def test_an_imbalanced_mixtral_reads_fewer_expert_weights_at_the_same_flops():
    import dataclasses
    base = model("mixtral-8x7b")
    skewed = dataclasses.replace(base, moe=dataclasses.replace(base.moe, imbalance=2))
    point = {B: 8, S: 1024}
    a, w = (Workbench.of(m, [device("h100-sxm")]) for m in (base, skewed))
    la = a.ledger(a.program("decode", "ideal"), a.devices[0], point)
    lw = w.ledger(w.program("decode", "ideal"), w.devices[0], point)
    assert lw.flops == pytest.approx(la.flops)
    # 8 tokens, top-2: uniform over 8 experts reads 8*(1-(3/4)^8) = 7.20; over 4 hot ones 4*(1-(1/2)^8) = 3.98
    expert = 3 * 4096 * 14336 * 2 * 32
    assert la.traffic("weights") - lw.traffic("weights") == pytest.approx(expert * (8 * (1 - 0.75 ** 8) - 4 * (1 - 0.5 ** 8)))


@pytest.mark.parametrize("key, dev", [("mixtral-8x7b", "h100-sxm"), ("mixtral-8x7b", "b200")])
def test_moe_decode_turns_compute_bound_where_the_overlapped_terms_cross(key, dev):
    # the memory term of a MoE step is concave in B (distinct experts saturate at E): the
    # crossing is the first batch from which the compute term stays the larger
    from rooflinec.cost import efficiency
    bench = Workbench.of(model(key), [device(dev)])
    terms = bench.step_terms("decode", "ideal", bench.devices[0])
    c = efficiency.crossover(terms, 128)   # a short context: the KV reads stay below the GEMMs
    at = lambda n: float(number(terms.compute - terms.memory, {B: n, S: 128}))  # noqa: E731
    assert c.first is not None and c.first > 1
    assert at(c.first) >= 0 > at(c.first - 1)
    assert all(at(n) >= 0 for n in (2 * c.first, 16 * c.first))


@pytest.mark.slow
@pytest.mark.parametrize("key", ["deepseek-v3", "gemma-2-9b", "gpt-oss-120b"])
def test_every_analysis_builds_for_moe_mla_and_windowed_models(tmp_path, key):
    import io
    from rooflinec.cli.app import run
    study = (ROOT / "specs" / "qwen.yaml").read_text()
    study = study.replace("model: qwen2.5-7b", f"model: {key}").replace("[rtx4090, a100-40gb]", "[a100-40gb]")
    study = study.replace("groups: [[q_proj, o_proj], [k_proj, v_proj], [gate_proj, up_proj], [down_proj], [lm_head]]",
                          "groups: [[o_proj], [lm_head]]")
    (tmp_path / "s.yaml").write_text(study)
    out, err = io.StringIO(), io.StringIO()
    code = run(["build", "-q", "--format", "json", "--out", str(tmp_path / "out"), str(tmp_path / "s.yaml")], out, err)
    assert code == 0, err.getvalue()


def test_the_serving_model_caches_deepseek_v3s_latent_whole_on_every_device():
    # 61 layers x (512 + 64) elements x 1 B (fp8) = 35,136 B, not divided by tensor parallelism
    from rooflinec.cost.kvcache import per_token
    m = model("deepseek-v3")
    assert per_token(m, 1, tp=1) == per_token(m, 1, tp=8) == 35_136


@pytest.mark.parametrize("suffix", ["md", "html"])
def test_the_moe_report_states_its_routing_assumption(suffix):
    # the committed reports are kept fresh by the reports test; both formats carry the prose
    text = (ROOT / "reports" / f"moe-mixtral.{suffix}").read_text()
    plain = re.sub(r"<[^>]+>", "", text).replace("**", "")
    assert "Expert weight traffic assumes uniform routing" in plain
    assert "E·(1 − (1 − k/E)^M)" in plain
    assert "imbalance factor ρ = 1" in plain and "E = 8 routed experts" in plain


def test_a_weight_only_gemm_pays_two_dequant_flops_per_weight_element(tmp_path):
    # Mixtral-8x7B's q_proj (its config: hidden_size 4096, 32 heads of 128): W_q is
    # 4096 x 4096 = 16,777,216 elements. At M = 8 tokens the GEMM does 2*8*4096*4096 =
    # 268,435,456 FLOPs; NVFP4 weights under bf16 compute add 2 per weight element,
    # 2*16,777,216 = 33,554,432, for 301,989,888 in all.
    w = Workbench(spec.load_study(_study(tmp_path, "bf16", "b200", "quantization: {weights: nvfp4}")))
    flops = w.program("decode", "ideal").op("q_proj").cost.flops
    assert int(number(flops, {**w.values, M: 8})) == 268_435_456 + 33_554_432


@pytest.mark.parametrize("dtype, weights", [("bf16", "bf16"), ("fp8", "fp8"), ("nvfp4", "nvfp4")])
def test_no_dequant_flops_when_weights_are_in_the_compute_dtype(tmp_path, dtype, weights):
    devices = "b200"
    w = Workbench(spec.load_study(_study(tmp_path, dtype, devices, f"quantization: {{weights: {weights}}}")))
    plain = Workbench(spec.load_study(_study(tmp_path, dtype, devices)))
    assert w.values[quant.f_dq] == 0 and quant.dequant_flops(weights, dtype) == 0
    point = {B: 8, S: 1024}
    q = w.ledger(w.program("decode", "ideal"), w.devices[0], point)
    a = plain.ledger(plain.program("decode", "ideal"), plain.devices[0], point)
    assert q.flops == pytest.approx(a.flops)



def test_retyping_the_weights_twice_counts_their_dequantisation_once(tmp_path):
    # a sweep's formats retype a program the study's quantization retyped already
    w = Workbench(spec.load_study(_study(tmp_path, "bf16", "b200", "quantization: {weights: nvfp4}")))
    once = w.program("decode", "ideal")
    twice = quant.retype(once, ("weights",))
    assert [op.cost.flops for op in twice.ops] == [op.cost.flops for op in once.ops]



def test_gemm_intensity_tabulates_the_expert_gemms_and_where_they_turn_compute_bound(tmp_path):
    """Mixtral-8x7B (config.json: d_model 4096, 8 experts of d_e 14336, top-2), bf16 on an H100
    SXM (989.4 TFLOP/s, 3.35 TB/s: ridge 295.34). An expert GEMM reads the distinct experts of
    its M*k routings: 2 at M = 1, 2 x 4096 x 14336 = 117,440,512 weight elements. At large M
    all 8 are read: I = 2*M*k*d_model*d_e / (2*(8*d_model*d_e + M*k*(d_model + d_e))), which
    reaches the ridge at M = 295.34 x 469,762,048 / (117,440,512 - 295.34 x 36,864) = 1302.09,
    so from M = 1303 (the (3/4)^M of distinct experts is below 1e-160 there)."""
    from rooflinec import analyses
    (tmp_path / "s.yaml").write_text("model: mixtral-8x7b\ndevices: [h100-sxm]\nanalyses:\n"
                                     "  gemm_intensity: {tokens: [1, 4096]}\n")
    [section] = analyses.run(spec.load_study(str(tmp_path / "s.yaml")))
    row = next(r for r in section["rows"] if r["label"] == "expert_up_proj")
    assert row["points"][0]["weight_elements"] == 2 * 4096 * 14336
    assert row["points"][1]["weight_elements"] == pytest.approx(8 * 4096 * 14336)
    assert row["weight_elements"] is None   # it depends on M: each point carries its own
    assert row["crossing"]["h100-sxm"] == 1303


@pytest.mark.slow
def test_a_searched_decode_crossing_of_a_mixture_of_experts_is_shown_not_called_never(tmp_path):
    """A MoE step's memory term is concave in B, so its crossing is searched (no meeting point
    `at`); the report shows the batch found and does not call the terms linear."""
    from rooflinec.render import pages as render
    from rooflinec.cli import report
    (tmp_path / "s.yaml").write_text("model: mixtral-8x7b\ndevices: [h100-sxm]\nanalyses:\n"
                                     "  serving: {batch: [1], contexts: [128]}\n")
    built = report.build(spec.load_study(str(tmp_path / "s.yaml")))
    [serving] = [s for s in built["sections"] if s["kind"] == "serving"]
    [c] = serving["crossovers"][0]["devices"]
    # compute grows 25.57 GFLOP / 989.4 TFLOP/s = 25.8 us a sequence, faster than memory's
    # KV cache and activations: it overtakes the ~93 GB of weights at some finite batch
    assert c["at"] is None and c["first"] is not None and c["first"] > 1
    text = render.markdown(built)
    assert f"| 128 | B = {c['first']} (searched" in text
    assert "Both terms are linear" not in text
