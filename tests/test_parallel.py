"""Many devices: Megatron-LM sharding, collectives and the per-device facts (golden values
with their arithmetic, and properties)."""

from __future__ import annotations

import glob
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.cost import collectives as C
from rooflinec.cost import deployment
from rooflinec.cost import parallel as par
from rooflinec.cost import kvcache
from rooflinec.spec import load as spec
from rooflinec.cli.app import run
from rooflinec.cost.evaluate import number
from rooflinec.model.lower import Conventions
from rooflinec.model.symbols import B, L, M, S, b, d_model
from rooflinec.cost.workbench import Workbench

ROOT = Path(__file__).resolve().parent.parent
LLAMA_70B = spec.load_model(str(ROOT / "rooflinec/spec/catalog/models/llama-3.1-70b.yaml"))
H100 = spec.load_hardware(str(ROOT / "rooflinec/spec/catalog/hardware/h100-sxm.yaml"))


def bench(model=LLAMA_70B, conventions=None):
    return Workbench.of(model, (H100,), "bf16", conventions)


# --- golden -----------------------------------------------------------------------------------

@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_two_all_reduces_of_m_by_d_model_per_layer_forward_four_with_backward(phase):
    """Megatron-LM (Shoeybi et al. 2019, section 3 and figure 4): a transformer layer under
    tensor parallelism does two all-reduces of the [B*S, d_model] activations in the forward
    pass (after attention's row-parallel o_proj and the MLP's down_proj) and two in the
    backward (the f operators before the column-parallel GEMMs): four in all."""
    program = bench().program(phase, "ideal", H100, tp=8)
    layer = [c for c in program.collectives if c.repeat == L]
    assert [c.kind for c in layer] == ["all_reduce", "all_reduce"]
    assert all(c.payload == M * d_model * b for c in layer)
    assert program.bindings[M] == (B if phase == "decode" else B * S)
    both = layer + [c for c in deployment.backward_collectives(program.collectives)]
    assert len(both) == 4 and all(c.payload == M * d_model * b and c.repeat == L for c in both)
    # prefill B = 1, S = 4096, Llama-3.1-70B (d_model 8192), bf16: 4 x 4096 x 8192 x 2 B
    # = 268,435,456 B per layer, each all-reduce sending 2(8-1)/8 = 7/4 of its payload
    values = {**bench().values, B: 1, S: 4096, M: 4096}
    assert sum(number(c.payload, values) for c in both) == 268_435_456
    assert sum(number(c.volume, values) for c in both) == 268_435_456 * 7 // 4


def test_ring_model_golden():
    # 8 x H100 over NVLink (450 GB/s per direction, 0.47 us per step): all-reduce of 16 KiB =
    # 2 x 7/8 x 16,384 B = 28,672 B in 2 x 7 = 14 steps: 28,672 / 450e9 + 14 x 0.47e-6
    link = C.Link("NVLink", 450e9, 0.47e-6)
    volume = float(C.fraction("all_reduce", 8)) * 16_384
    assert volume == 28_672 and C.steps("all_reduce", 8) == 14
    t = C.time(volume, 14, link)
    assert t == pytest.approx(28_672 / 450e9 + 14 * 0.47e-6)
    assert C.latency_bound(volume, 14, link)                   # a decode-sized message
    big = float(C.fraction("all_reduce", 8)) * 256e6
    assert not C.latency_bound(big, 14, link)                  # a prefill-sized one
    # all-gather and reduce-scatter move half an all-reduce; p2p the payload once
    assert C.fraction("all_gather", 8) == C.fraction("reduce_scatter", 8) == sp.Rational(7, 8)
    assert C.fraction("all_to_all", 4) == sp.Rational(3, 4) and C.steps("all_to_all", 4) == 3
    assert C.fraction("p2p", 2) == 1 and C.steps("p2p", 2) == 1


TABLE_1 = [  # Narayanan et al. 2021 (Megatron-LM, SC21), Table 1: s = 2048, V = 51,200
    # params (B), heads, hidden h, layers l, tp, pp, GPUs, batch B, TFLOP/s per GPU
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


@pytest.mark.parametrize("row", TABLE_1)
def test_megatron_table_1_parameters_and_flops(row):
    billions, _, h, l, _, _, gpus, batch, tflops = row
    s, V = 2048, 51_200
    # the paper's parameter count, 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), is the row's size
    P = 12 * l * h * h * (1 + sp.Rational(13, 12 * h) + sp.Rational(V + s, 12 * l * h))
    assert round(float(P) / 1e9, 1) == billions
    F = par.megatron_flops(batch, s, l, h, V)
    # expanded: 96 B s l h^2 + 16 B s^2 l h + 6 B s h V (the LM head once, not per layer)
    assert F == 96 * batch * s * l * h * h + 16 * batch * s * s * l * h + 6 * batch * s * h * V


def test_megatron_1t_row_golden():
    # 1T row: F = 96 x 3072 x 2048 x 128 x 25600^2 x (1 + 2048/153,600 + 51,200/52,428,800)
    #        = 50,665,495,807,918,080,000 x 1.014306640625 = 51,390,513,775,273,574,400 FLOPs
    F = par.megatron_flops(3072, 2048, 128, 25600, 51200)
    assert F == 51_390_513_775_273_574_400
    # 163 TFLOP/s on each of 3072 GPUs: 102.6 s an iteration; 163 / 312 (A100 bf16) = 52%
    assert F / (3072 * 163e12) == pytest.approx(102.63, abs=0.01)
    assert round(163 / 312 * 100) == 52


def test_pipeline_bubble_golden():
    # 1F1B (Narayanan et al. 2021, section 2.2): (p - 1) / (m + p - 1)
    assert par.bubble(1, 8) == 0
    assert par.bubble(4, 4) == sp.Rational(3, 7)
    # the 1T row: p = 64, dp = 3072 / (8 x 64) = 6, microbatch 1: m = 3072 / 6 = 512
    assert par.bubble(64, 512) == sp.Rational(63, 575)
    assert float(par.bubble(64, 512)) == pytest.approx(0.10957, abs=1e-5)


def test_llama_70b_weights_per_device_at_tp8():
    """Llama-3.1-70B (config.json: d_model 8192, 80 layers, 64 query and 8 KV heads of 128,
    d_ff 28672, vocab 128256) over 8 devices, per device, per layer:
      q   8192 x (64/8 x 128)  =  8,388,608     o    1024 x 8192       =  8,388,608
      k,v 2 x 8192 x (1 x 128) =  2,097,152     MLP  3 x 8192 x 3584   = 88,080,384
      norms 2 x 8192           =     16,384     layer total            = 106,971,136
    x 80 = 8,557,690,880; embedding and LM head 2 x 16,032 x 8192 = 262,668,288; final norm
    8192: 8,820,367,360 parameters, 17,640,734,720 B at bf16 (16.43 GiB) per device."""
    assert deployment.params_per_device(LLAMA_70B, 8) == 8_820_367_360
    # KV cache per token per device: 2 x 80 layers x 1 head x 128 x 2 B = 40,960 B
    assert kvcache.per_token(LLAMA_70B, 2, tp=8) == 40_960
    # one device alone holds all 70,553,706,496 parameters: 141.1 GB, more than an H100's 80 GiB
    assert deployment.params_per_device(LLAMA_70B, 1) == 70_553_706_496


def test_training_memory_zero_stages():
    # ZeRO (Rajbhandari et al. 2020), figure 1: 7.5B parameters, dp 64, mixed-precision Adam:
    # 2 + 2 + 12 = 16 B per parameter = 120 GB; stage 1: 2 + 2 + 12/64 -> 31.4 GB;
    # stage 2: 2 + (2 + 12)/64 -> 16.6 GB; stage 3: 16/64 -> 1.9 GB
    psi = 7.5e9
    total = lambda zero: sum(par.training_memory(psi, 2, 2, 64, zero).values()) / 1e9  # noqa: E731
    assert [round(total(z), 1) for z in range(4)] == [120.0, 31.4, 16.6, 1.9]


def test_activation_memory_golden():
    # Korthikanti et al. 2022, table 2, per layer at 16 bits; GPT-3 175B row (s 2048, b 1,
    # h 12288, a 96, t 8): tensor parallel, scores kept: s b h (10 + 24/8 + 5 x 96 x 2048 /
    # (12288 x 8)) = 2048 x 12288 x 23; with sequence parallelism and selective recomputation
    # s b h 34/8; full recomputation 2 s b h
    assert par.activation_bytes(2048, 1, 12288, 96, 1, 8, "none") == 2048 * 12288 * 23
    assert par.activation_bytes(2048, 1, 12288, 96, 1, 8, "selective") == 2048 * 12288 * 34 / 8
    assert par.activation_bytes(2048, 1, 12288, 96, 1, 8, "full") == 2 * 2048 * 12288


def test_replicated_kv_heads_are_duplicated_work():
    """PaLM 540B is multi-query (one KV head): at tp 8 every device computes the whole k and v
    projections, 2 x M x 18432 x 256 FLOPs each, so k_proj's per-device FLOPs equal the
    single-device ones while q_proj's are an eighth."""
    palm = spec.load_model(str(ROOT / "rooflinec/spec/catalog/models/palm-540b.yaml"))
    w = bench(palm)
    whole, part = w.program("decode", "unfused", H100, 1), w.program("decode", "unfused", H100, 8)
    values = w.at({B: 4, S: 2048}, whole.bindings)
    f = lambda p, name: number(p.op(name).cost.flops, values)  # noqa: E731
    assert f(part, "k_proj") == f(whole, "k_proj") == 2 * 4 * 18432 * 256
    assert f(part, "q_proj") * 8 == f(whole, "q_proj")


def test_kv_heads_replicate_past_their_count_and_the_program_says_so():
    m = spec.load_model(str(ROOT / "rooflinec/spec/catalog/models/llama-3.1-8b.yaml"))
    prog = bench(m).program("decode", "ideal", H100, tp=16)
    assert "KV heads replicated" in dict(prog.conventions)["tensor parallelism"]
    assert kvcache.per_token(m, 2, tp=16) == 2 * 32 * 1 * 128 * 2


def build_fails(tmp_path, study: str) -> str:
    """Build `study` (written as s.yaml): it must fail with exit 1 and write nothing; its stderr."""
    (tmp_path / "s.yaml").write_text(study)
    err = io.StringIO()
    assert run(["build", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o")], io.StringIO(), err) == 1
    assert not (tmp_path / "o").exists()
    return err.getvalue()


def test_a_degree_that_splits_a_head_is_a_located_error(tmp_path):
    msg = build_fails(tmp_path, "model: llama-3.1-70b\ndevices: [h100-sxm]\nparallel: {tp: 3}\n"
                                "analyses: {params: {}}\n")
    assert "s.yaml:3:" in msg and "parallel.tp" in msg and "does not divide the 64 query heads" in msg


def test_expert_parallelism_on_a_dense_model_is_a_located_error(tmp_path):
    msg = build_fails(tmp_path, "model: llama-3.1-70b\ndevices: [h100-sxm]\nparallel:\n  tp: 8\n"
                                "  ep: 4\nanalyses: {params: {}}\n")
    assert "s.yaml:5:" in msg and "parallel.ep" in msg and "this model has none" in msg


def test_a_group_past_the_domain_needs_a_network(tmp_path):
    from dataclasses import replace

    from rooflinec.base.errors import DeviceLacks
    lone = replace(H100, network="", network_bandwidth=None, network_latency=None)
    w = bench()
    assert w.link(H100, 16, "x").name.startswith("InfiniBand")
    with pytest.raises(DeviceLacks, match="scale_out"):
        w.link(lone, 16, "x")


# --- properties ------------------------------------------------------------------------------

SHARDED = {"n_q", "n_kv", "d_ff", "V", "d_e", "d_s"}   # d_e, d_s: a mixture of experts' widths


QWEN = spec.load_model(str(ROOT / "rooflinec/spec/catalog/models/qwen2.5-7b.yaml"))
MIXTRAL = spec.load_model(str(ROOT / "rooflinec/spec/catalog/models/mixtral-8x7b.yaml"))
# (model, tp) with tp dividing the KV heads and the vocabulary: Llama-3.1-70B (8 KV heads,
# V 128256), Qwen2.5-7B (4 KV heads, q/k/v biases, V 152064) and Mixtral-8x7B (experts split)
SPLITS = [(LLAMA_70B, 2), (LLAMA_70B, 4), (LLAMA_70B, 8), (QWEN, 2), (QWEN, 4), (MIXTRAL, 2), (MIXTRAL, 8)]


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["decode", "prefill"]), st.sampled_from(["unfused", "fused", "ideal"]),
       st.sampled_from(SPLITS), st.integers(1, 64), st.integers(1, 8192),
       st.sampled_from([Conventions(), Conventions(qkv="fused", bias="in_gemm", logits="all")]))
def test_per_device_flops_times_tp_is_the_whole_plus_duplicated_work(phase, variant, split, batch,
                                                                      context, conv):
    """Sharding splits every FLOP term written over n_q, n_kv, d_ff or V and duplicates the
    rest (norms, residual adds, also those fused into a GEMM's epilogue, the embedding's
    gather): per-device FLOPs x tp = single-device FLOPs + (tp - 1) x the FLOPs of the terms
    no sharded symbol touches (tp divides the KV heads here, so none are replicated)."""
    from dataclasses import asdict
    model, tp = split
    w = bench(model, conventions=asdict(conv))
    whole, part = w.program(phase, variant, H100, 1), w.program(phase, variant, H100, tp)
    values = w.at({B: batch, S: context}, whole.bindings)
    flops = lambda p: sum(number(o.cost.flops * o.repeat, values) for o in p.ops)  # noqa: E731
    unsharded = lambda e: sp.Add(*(t for t in sp.Add.make_args(sp.expand(e))  # noqa: E731
                                   if not {s.name for s in t.free_symbols} & SHARDED))
    dup = sum(number(unsharded(o.cost.flops) * o.repeat, values) for o in whole.ops)
    assert flops(part) * tp == pytest.approx(flops(whole) + (tp - 1) * dup, rel=1e-12)


@pytest.mark.slow
@given(st.sampled_from(C.KINDS), st.integers(2, 512), st.floats(1, 1e12), st.floats(1, 1e12),
       st.floats(1e9, 1e13), st.floats(0, 1e-4))
def test_comm_time_grows_with_payload_and_falls_with_bandwidth(kind, n, p1, p2, bw, latency):
    small, large = sorted((p1, p2))
    link, faster = C.Link("l", bw, latency), C.Link("l", bw * 2, latency)
    t = lambda p, lk: C.time(float(C.fraction(kind, n)) * p, C.steps(kind, n), lk)  # noqa: E731
    assert t(small, link) <= t(large, link)
    assert t(large, faster) < t(large, link)


@pytest.mark.slow
def test_tp_1_gives_exactly_todays_reports(tmp_path):
    """Every shipped study with a model, given `parallel: {tp: 1}`, builds the JSON report
    it builds without it, every number and formula the same (the study file's own name and
    hash aside)."""
    for study in sorted(glob.glob(str(ROOT / "specs/*.yaml"))):
        text = Path(study).read_text(encoding="utf-8")
        if "\nmodel:" not in text or "\nparallel:" in text:
            continue
        copy = tmp_path / "specs" / Path(study).name
        copy.parent.mkdir(exist_ok=True)
        copy.write_text(text + "\nparallel: {tp: 1, pp: 1, ep: 1, dp: 1}\n", encoding="utf-8")
        out = tmp_path / "out"
        assert run(["build", "-q", str(copy), "--out", str(out), "--format", "json"],
                   io.StringIO(), io.StringIO()) == 0
        mine = json.loads((out / (copy.stem + ".json")).read_text(encoding="utf-8"))
        shipped = json.loads((ROOT / "reports" / (copy.stem + ".json")).read_text(encoding="utf-8"))
        for report in (mine, shipped):   # the study file itself differs by the added block
            report.pop("study", None)
            report["inputs"] = report["inputs"][1:]
        assert mine == shipped, study


# --- training at scale: the shipped study ------------------------------------------------------

@pytest.fixture(scope="module")
def scale():
    from rooflinec import analyses
    study = spec.load_study(str(ROOT / "specs/scale.yaml"))
    [section] = analyses.run(study)
    return {r["name"]: r for r in section["runs"]}


def test_megatron_1t_row_in_the_study(scale):
    r = scale["GPT 1T (Megatron-LM)"]
    assert r["hardware_flops"] == 51_390_513_775_273_574_400
    assert r["microbatches"] == 512 and r["bubble"] == pytest.approx(63 / 575)
    # compute at the A100's 312 TFLOP/s: 51.39e18 / (3072 x 312e12) = 53.62 s; pipelined x 575/512
    assert r["compute_s"] == pytest.approx(51_390_513_775_273_574_400 / (3072 * 312e12))
    assert r["pipelined_s"] == pytest.approx(r["compute_s"] * 575 / 512)


def test_estimates_are_ceilings_above_what_the_papers_measured(scale):
    """Every GEMM at the tensor peak: no run can beat the estimate, overlapped or serial."""
    for r in scale.values():
        pub = r["published"]
        assert r["overlapped"]["tflops_per_gpu"] >= r["serial"]["tflops_per_gpu"] >= pub["tflops_per_gpu"]
        if "mfu" in pub:
            assert r["serial"]["mfu"] >= max(pub["mfu"])


# --- the per-device views --------------------------------------------------------------------

def _sections(tmp_path, text):
    from rooflinec import analyses
    (tmp_path / "s.yaml").write_text(text)
    return analyses.run(spec.load_study(str(tmp_path / "s.yaml")))


def test_parallel_view_smallest_tp_and_latency_bound_decode(tmp_path):
    [view] = _sections(tmp_path, "model: llama-3.1-70b\ndevices: [h100-sxm]\nanalyses:\n"
                       "  parallel_view: {workloads: [{batch: 1, context: 4096}]}\n")
    [dev] = view["devices"]
    # tp 1: 70,553,706,496 x 2 B = 141.1 GB > 80 GiB; tp 2: 35,306,037,248 x 2 B = 70.6 GB plus
    # 4096 tokens x 163,840 B of KV cache = 0.67 GB, under 85.9 GB
    assert [m["fits"][0] for m in dev["memory"]] == [False, True, True, True]
    assert dev["smallest_tp"] == [2]
    decode = next(st for st in dev["steps"] if st["phase"] == "decode")
    tp8 = decode["rows"][-1]
    # a figure read as a bound: the collectives beside the kernels (an engine may overlap them)
    kernels = tp8["compute_s"] + tp8["memory_s"]
    assert tp8["tp"] == 8 and tp8["step_s"] == pytest.approx(max(kernels, tp8["comm_s"]))
    assert tp8["step_s"] < kernels + tp8["comm_s"]
    assert tp8["tokens_per_s_per_device"] == pytest.approx(1 / tp8["step_s"] / 8)
    # a 16 KiB all-reduce: 14 x 0.47 us of latency against 28,672 B / 450 GB/s = 64 ns
    assert "o_proj_all_reduce" in tp8["latency_bound"]
    assert decode["rows"][0]["comm_s"] == 0
    # duplicated work: none on one device, then norms and residual adds on every device
    assert decode["rows"][0]["duplicated_flops"] == 0
    assert 0 < decode["rows"][1]["duplicated_flops"] < decode["rows"][-1]["duplicated_flops"]


@pytest.mark.slow
def test_the_summary_names_the_smallest_tp_where_one_device_does_not_fit(tmp_path):
    from rooflinec.cli import report
    (tmp_path / "s.yaml").write_text("model: llama-3.1-70b\ndevices: [h100-sxm]\nanalyses:\n"
                                     "  parallel_view: {workloads: [{batch: 1, context: 4096}]}\n")
    built = report.build(spec.load_study(str(tmp_path / "s.yaml")))
    [dev] = built["summary"]["devices"]
    assert not dev["weights_fit"]   # 141.1 GB of weights on one 80 GiB device
    assert dev["smallest_tp"] == [{"batch": 1, "context": 4096, "tp": 2, "tried": [1, 2, 4, 8]}]


def test_ledger_of_a_tp_study_lists_its_collectives(tmp_path):
    [led] = _sections(tmp_path, "model: llama-3.1-70b\ndevices: [h100-sxm]\nparallel: {tp: 8}\n"
                      "analyses:\n  ledger: {workloads: [{batch: 1, context: 4096}], "
                      "phases: [prefill], scopes: [layer], variants: [ideal]}\n")
    [blk] = led["blocks"]
    assert [c["name"] for c in blk["collectives"]] == ["o_proj_all_reduce", "down_proj_all_reduce"]
    # one layer, prefill B 1, S 4096: 2 x 7/4 x 4096 x 8192 x 2 B sent
    assert sum(c["volume"] for c in blk["collectives"]) == pytest.approx(2 * 7 / 4 * 4096 * 8192 * 2)


def test_a_device_without_a_link_is_left_out_of_a_tp_view_saying_why(tmp_path):
    """A device that lacks a figure a section needs is left out of that section, which names
    the key to add (as for a missing peak)."""
    [view] = _sections(tmp_path, "model: llama-3.1-8b\ndevices: [h100-sxm, rtx4090]\nanalyses:\n"
                       "  parallel_view: {tp: [1, 2], workloads: [{batch: 1, context: 1024}]}\n")
    [lack] = view["lacking"]
    assert lack["device"] == "rtx4090"
    assert "scale-up interconnect" in lack["why"] and "add interconnect" in lack["why"]


def test_a_tp_study_fits_memory_per_device(tmp_path):
    [view] = _sections(tmp_path, "model: llama-3.1-70b\ndevices: [h100-sxm]\nparallel: {tp: 8}\n"
                       "analyses:\n  decode_view: {contexts: [4096]}\n")
    # 17,640,734,720 B of weights and 4096 x 40,960 B of KV cache per device: fits in 80 GiB
    [point] = view["points"]
    assert point["devices"][0]["fits"]
    w = Workbench(spec.load_study(str(tmp_path / "s.yaml")))
    assert w.weight_bytes() == 17_640_734_720 and w.kv_per_token() == 40_960


def test_a_run_takes_its_degrees_from_the_study_parallel_block(tmp_path):
    [section] = _sections(tmp_path, "devices: [a100-80gb]\nparallel: {tp: 8, pp: 64, dp: 6, "
                          "microbatches: 512}\nanalyses:\n  training_at_scale:\n    runs:\n"
                          "      - {name: 1T, source: Narayanan et al. 2021 Table 1, sequence: 2048, "
                          "batch: 3072, gpt: {layers: 128, hidden: 25600, heads: 160, vocab: 51200}}\n")
    [r] = section["runs"]
    # 3072 sequences over dp 6 in 512 microbatches: 1 sequence each; bubble 63/575
    assert (r["gpus"], r["microbatch"], r["microbatches"]) == (3072, 1, 512)
    assert r["bubble"] == pytest.approx(63 / 575)


def test_a_mixture_of_experts_run_counts_the_parameters_a_token_uses(tmp_path):
    """6N counts a token's parameters: Mixtral-8x7B's 12,879,925,248 active (Jiang et al. 2024:
    12.9B active of 46.7B), not all 46,702,792,704; its memory still holds all of them."""
    [section] = _sections(tmp_path, "devices: [h100-sxm]\nparallel: {tp: 8, pp: 4}\nanalyses:\n"
                          "  training_at_scale:\n    runs:\n      - {name: m, source: none, "
                          "model: mixtral-8x7b, sequence: 4096, batch: 8}\n")
    [r] = section["runs"]
    # per token: 6 x 12,879,925,248 + 12 x 32 layers x 32 heads x 128 x 4096 = 83,722,002,432;
    # over 8 x 4096 tokens: 2,743,402,575,691,776
    assert r["model_flops"] == (6 * 12_879_925_248 + 12 * 32 * 32 * 128 * 4096) * 8 * 4096
    assert r["n_params"] == 46_702_792_704


# --- expert parallelism ------------------------------------------------------------------------


def ep_bench(ep: int) -> Workbench:
    """Attention data parallelism ep with expert parallelism ep at tp 1 (moe_tp 1): each rank
    its own batch, one ep-th of the experts."""
    return Workbench(spec.Study("", "", "", MIXTRAL, (H100,), "bf16", {}, parallel={"attention_dp": ep, "ep": ep}))


def test_mixtral_at_ep_8_golden():
    """Mixtral-8x7B (Jiang et al. 2024; config.json: d_model 4096, 32 layers, 8 experts of
    SwiGLU width 14336, top-2) at ep 8: each device keeps 1 expert per layer, 3 x 4096 x 14336 =
    176,160,768 parameters, x 32 layers = 5,637,144,576, so the 7 of 8 experts it drops are
    7 x 5,637,144,576 = 39,460,012,032 parameters fewer than the whole model. Each MoE layer
    dispatches and combines M x k x d_model = M x 2 x 4096 elements = 16,384 M bytes at bf16,
    7/8 of it leaving the device: 14,336 M bytes each way per layer."""
    whole, split = deployment.params_per_device(MIXTRAL, 1), deployment.params_per_device(MIXTRAL, 1, ep=8)
    assert whole - split == 7 * 3 * 4096 * 14336 * 32 == 39_460_012_032
    bench = ep_bench(8)
    assert bench.weight_bytes() == split * 2
    program = bench.program("decode", "unfused", H100)
    a2a = [c for c in program.collectives if c.kind == "all_to_all"]
    assert [c.name for c in a2a] == ["moe_dispatch_all_to_all", "moe_combine_all_to_all"]
    m = 1000
    rows = bench.communication(program, H100, {B: m, S: 4096})
    for row in rows:
        assert row.count == 32 and row.payload == 16_384 * m and row.volume == 32 * 14_336 * m
    assert any("ep = 8" in text for _, text in program.conventions)


@pytest.mark.slow
def test_ep_that_does_not_divide_the_experts_is_a_located_error(tmp_path):
    msg = build_fails(tmp_path, "model: mixtral-8x7b\ndevices: [h100-sxm]\nparallel:\n  ep: 3\n"
                                "analyses: {params: {}}\n")
    assert "s.yaml:4:" in msg and "parallel.ep" in msg and "does not divide the 8 routed experts" in msg


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.sampled_from(["decode", "prefill"]),
       st.integers(1, 4096), st.integers(1, 8192))
def test_per_device_expert_flops_times_ep_is_the_whole(ep, phase, batch, context):
    """The step waits for the busiest device (pigeonhole): of the ep ranks' ep*M*k routings it
    serves at least ceil(ep*M*k/ep), its expert weights ceil(D(ep*M)/ep) of the D distinct
    experts the ep ranks' tokens touch; every other op is the rank's own (unchanged)."""
    import math
    w = {B: batch, S: context}
    one = ep_bench(1).ledger(ep_bench(1).program(phase, "unfused", H100), H100, w)
    split = ep_bench(ep).ledger(ep_bench(ep).program(phase, "unfused", H100), H100, w)
    rows = 2 * (batch if phase == "decode" else batch * context)          # M*k, Mixtral's k = 2
    distinct = 8 * (1 - (1 - 2 / 8) ** (rows // 2))
    spread = 8 * (1 - (1 - 2 / 8) ** (ep * rows // 2))     # the distinct experts of ep ranks' tokens
    for a, s in zip(one.rows, split.rows):
        assert a.op.name == s.op.name
        if not deployment.routed(a.op):
            assert (s.flops, s.bytes) == pytest.approx((a.flops, a.bytes), rel=1e-12)
            continue
        share = math.ceil(ep * rows / ep) / rows
        assert s.flops == pytest.approx(a.flops * share, rel=1e-9)
        assert s.traffic.get("weights", 0) == pytest.approx(
            a.traffic.get("weights", 0) * math.ceil(spread / ep - 1e-9) / distinct, rel=1e-9)
        assert s.flops * ep >= a.flops * (1 - 1e-12) and s.bytes * ep >= a.bytes * (1 - 1e-12)
    assert any(deployment.routed(r.op) for r in one.rows)


def test_mixtral_at_tp_8_splits_every_expert_golden():
    """Mixtral-8x7B at tp 8 without ep: every expert's width 14336 splits (1792 per device), as
    vLLM and Megatron-LM shard experts. Per device and layer: q and o 2 x 4096 x 4096 / 8 =
    4,194,304; k and v 2 x 4096 x 1024 / 8 = 1,048,576; router 4096 x 8 = 32,768 (whole);
    experts 8 x 3 x 4096 x 1792 = 176,160,768; norms 2 x 4096 = 8,192: 181,444,608 x 32 layers =
    5,806,227,456; embedding and LM head 2 x 32000 x 4096 / 8 = 32,768,000; final norm 4096:
    5,838,999,552 parameters, an eighth of 46,702,792,704 plus the replicated router and norms."""
    assert deployment.params_per_device(MIXTRAL, 8) == 5_838_999_552
    program = bench(MIXTRAL).program("decode", "unfused", H100, tp=8)
    reduces = {c.name: c.repeat for c in program.collectives if c.kind == "all_reduce"}
    # each MoE layer's combined output is a partial sum over the 8 devices, as down_proj's is
    assert reduces == {"embedding_all_reduce": 1, "o_proj_all_reduce": sp.Symbol("L", positive=True, integer=True),
                       "moe_combine_all_reduce": sp.Symbol("L", positive=True, integer=True)}
    assert any("d_e" in text for _, text in program.conventions)


def test_deepseek_v3s_dense_and_moe_layers_each_reduce_their_output():
    # DeepSeek-V3: the first 3 layers dense (first_k_dense_replace), 58 MoE layers with a shared
    # expert: at tp 8 the dense layers' down projections and the MoE layers' combines each end
    # in an all-reduce, 3 and L - 3 of them per step
    m = spec.load_model(str(ROOT / "rooflinec/spec/catalog/models/deepseek-v3.yaml"))
    program = bench(m).program("decode", "unfused", H100, tp=8)
    reduces = {c.name: c.repeat for c in program.collectives if c.kind == "all_reduce"}
    L = sp.Symbol("L", positive=True, integer=True)
    assert reduces["dense_down_proj_all_reduce"] == 3 and reduces["moe_combine_all_reduce"] == L - 3


def test_under_ep_routed_experts_stay_whole_and_need_no_reduce():
    w = Workbench(spec.Study("", "", "", MIXTRAL, (H100,), "bf16", {}, parallel={"tp": 2, "attention_dp": 8, "ep": 8}))
    program = w.program("decode", "unfused", H100, tp=2)
    assert "moe_combine_all_reduce" not in {c.name for c in program.collectives}
    # tp 2 x attention DP 8 = moe_tp 2 x ep 8: 1 expert per layer on each device, half its
    # width (3 x 4096 x 7168 x 32 parameters), against all 8 at half width under tp 2 alone
    assert deployment.params_per_device(MIXTRAL, 2, ep=8, moe_tp=2) - deployment.params_per_device(MIXTRAL, 2, ep=1) == \
        3 * 4096 * 7168 * 32 - 8 * 3 * 4096 * 7168 * 32


def test_a_tp_that_does_not_divide_an_experts_width_is_refused():
    from dataclasses import replace
    odd = replace(MIXTRAL, moe=replace(MIXTRAL.moe, d_expert=14335))
    with pytest.raises(par.Unshardable, match="routed expert width d_e"):
        par.check(odd, 8)
    par.check(odd, 8, ep=8)   # whole experts under ep: their width is not split


@pytest.mark.slow
def test_ep_1_gives_exactly_todays_program():
    one = ep_bench(1)
    whole = Workbench.of(MIXTRAL, (H100,), "bf16")
    for phase in ("decode", "prefill"):
        assert one.program(phase, "unfused", H100) == whole.program(phase, "unfused", H100)
    assert one.weight_bytes() == whole.weight_bytes()


@pytest.mark.slow
def test_the_summary_names_the_degrees_tried_where_none_fits(tmp_path):
    """Where no tp of the view fits, the summary says which were tried (they were)."""
    from rooflinec.render import pages as render
    from rooflinec.cli import report
    (tmp_path / "s.yaml").write_text("model: llama-3.1-70b\ndevices: [h100-sxm]\nanalyses:\n"
                                     "  parallel_view: {tp: [1], workloads: [{batch: 1, context: 4096}]}\n")
    built = report.build(spec.load_study(str(tmp_path / "s.yaml")))
    [dev] = built["summary"]["devices"]
    assert dev["smallest_tp"] == [{"batch": 1, "context": 4096, "tp": None, "tried": [1]}]
    text = render.markdown(built)
    assert "B = 1, S = 4096 fits at none of tp = 1" in text and "none tried" not in text


def test_tp_with_ep_need_not_divide_the_routed_experts_width_for_the_kv_cache():
    """Under ep the routed experts split over moe_tp = tp / ep, so tp need not divide d_e: the
    KV cache's share is asked with the study's ep too. Mixtral-8x7B with d_e = 14,344 (not a
    multiple of 16, a multiple of 8) at tp 16, ep 2 (moe_tp 8): 8 KV heads over 16 devices, one each (replicated), so 32 layers x 2 x 128 x 2 B
    = 16,384 B per token; a sequence of 1,024 tokens holds 16,777,216 B."""
    odd = replace(MIXTRAL, moe=replace(MIXTRAL.moe, d_expert=14_344))
    bench = Workbench(spec.Study("", "", "", odd, (H100,), "bf16", {}, parallel={"tp": 16, "ep": 2}))
    assert bench.kv_per_token() == 16_384
    assert bench.kv_per_sequence(1024) == 16_777_216


@pytest.mark.slow
def test_the_tp_view_names_the_formats_its_memory_counts(tmp_path):
    """Weights stored in fp8 under bf16 compute: the view's memory is at fp8 weights and a bf16
    KV cache, and its prose says so (it said 'at bf16')."""
    from rooflinec.render import pages as render
    from rooflinec.cli import report
    (tmp_path / "s.yaml").write_text("model: llama-3.1-8b\ndevices: [h100-sxm]\nquantization: {weights: fp8}\n"
                                     "analyses:\n  parallel_view: {tp: [1, 2], workloads: [{batch: 1, context: 1024}]}\n")
    built = report.build(spec.load_study(str(tmp_path / "s.yaml")))
    [view] = [s for s in built["sections"] if s["kind"] == "parallel_view"]
    # 8,030,261,248 parameters at 1 B each on one device
    assert view["devices"][0]["memory"][0]["weights"] == 8_030_261_248
    assert "Memory counts weights at fp8 and KV cache at bf16" in render.markdown(built)


@pytest.mark.slow
def test_a_layer_ledger_of_deepseek_v3_says_which_layer_and_lists_its_reduces(tmp_path):
    # DeepSeek-V3: 3 dense layers, then 58 MoE layers; the layer scope shows a MoE layer (its
    # ops repeat L - 3) and, at tp 8, the all-reduces of that layer: o_proj's and the combine's
    [led] = _sections(tmp_path, "model: deepseek-v3\ndevices: [h100-sxm]\nparallel: {tp: 8}\n"
                      "analyses:\n  ledger: {workloads: [{batch: 1, context: 1024}], phases: [decode], "
                      "scopes: [layer], variants: [ideal]}\n")
    [blk] = led["blocks"]
    assert blk["one_layer"] == "a MoE layer; the 3 dense layers run a dense MLP"
    assert {c["name"] for c in blk["collectives"]} == {"o_proj_all_reduce", "moe_combine_all_reduce"}
    assert all(c["count"] == 1 for c in blk["collectives"])
