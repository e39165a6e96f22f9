"""The answers first: a summary every model report opens with, owned by `summary` and shared
with `rooflinec serve`; and devices that lack a figure a section needs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from rooflinec.cli import quick, report, summary
from rooflinec.spec import load as spec
from rooflinec.model.passes import VARIANTS
from rooflinec.cost.workbench import Workbench

REPORTS = Path(__file__).parent.parent / "reports"

STUDY = """\
    title: answers
    model: qwen2.5-7b
    devices: [rtx4090, a100-40gb]
    analyses:
      params: {}
    """


def _study(tmp_path, text: str):
    path = tmp_path / "study.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.mark.slow
def test_report_opens_with_the_answers_per_device(call, tmp_path):
    path = _study(tmp_path, STUDY)
    code, _, err = call("build", path, "--out", tmp_path / "out", "--format", "md,html,json")
    assert code == 0, err
    md = (tmp_path / "out" / "study.md").read_text()
    assert md.index("## Summary") < md.index("## Devices") < md.index("## Parameter")
    head = md[md.index("## Summary"):md.index("## Devices")]
    for dev in ("rtx4090", "a100-40gb"):
        assert f"| {dev} | decode, S = {summary.CONTEXT}, B = 1 | ≤ " in head
        assert f"| {dev} | decode, S = {summary.CONTEXT}, largest batch that fits | ≤ " in head
        assert f"| {dev} | time to first token, prompt {summary.PROMPT} | ≥ " in head
        assert f"| {dev} | memory fit (" in head
    html = (tmp_path / "out" / "study.html").read_text()
    assert html.index('id="summary"') < html.index('id="devices"')
    data = json.loads((tmp_path / "out" / "study.json").read_text())
    assert [d["device"] for d in data["summary"]["devices"]] == ["rtx4090", "a100-40gb"]


@pytest.mark.slow
def test_summary_bounds_hold_under_every_variant():
    """The summary's TTFT ≥ and tokens/s ≤ are the ideal kernel's overlapped step bound under
    the least-work conventions (lower.LEAST_WORK): no variant (flash, fused, unfused) under the
    study's conventions can be faster."""
    from rooflinec.model.lower import LEAST_WORK
    study = spec.load_study("specs/qwen.yaml")
    bench = Workbench(study)
    rep = {"sections": [], "devices": [report._device(d, study.dtype) for d in study.devices]}
    answers = report._summary(study, bench, rep)
    assert answers["variant"] == "ideal"
    for dev, row in zip(study.devices, answers["devices"]):
        for p in row["prefill"]:
            ideal = bench.step_terms("prefill", "ideal", dev, LEAST_WORK).roof(1, p["prompt"]).time
            assert p["time_s"] == pytest.approx(ideal, rel=1e-12)
            for variant in VARIANTS:
                assert bench.step_terms("prefill", variant, dev).roof(1, p["prompt"]).time >= ideal * (1 - 1e-12)
        for c in row["decode"]:
            for variant in VARIANTS:
                t = bench.step_terms("decode", variant, dev).roof(1, c["context"]).time
                assert 1 / t <= c["batch_1"]["tokens_per_s"] * (1 + 1e-12)
            top = bench.step_terms("decode", "ideal", dev, LEAST_WORK).roof(c["max_batch"], c["context"])
            assert c["at_max_batch"]["tokens_per_s"] == pytest.approx(c["max_batch"] / top.time)
            assert bench.fits(dev, c["max_batch"], c["context"])
            assert not bench.fits(dev, c["max_batch"] + 1, c["context"])


def test_serve_prints_the_summary_the_report_holds(call):
    """One owner: `serve`'s opening lines are `summary.text` of the same answers."""
    code, out, err = call("serve", "qwen2.5-7b", "--device", "rtx4090", "--batch", "1")
    assert code == 0, err
    model = spec.load_model("rooflinec/spec/catalog/models/qwen2.5-7b.yaml")
    device = spec.load_hardware("rooflinec/spec/catalog/hardware/rtx4090.yaml")
    section = quick.serving_section(model, device, "bf16", [1], summary.CONTEXT, summary.PROMPT)
    dev = report._device(device, "bf16")
    assert out.startswith(summary.text(model.name, "bf16", summary.answers(section, [dev])))
    code, out, _ = call("serve", "qwen2.5-7b", "--device", "rtx4090", "--batch", "1", "--json")
    answers = json.loads(out)["summary"]["devices"][0]
    assert answers["decode"][0]["batch_1"]["tokens_per_s"] == pytest.approx(
        section["crossovers"][0]["devices"][0]["at_one"]["tokens_per_s"])


PARTIAL = """\
    title: partial
    model: qwen2.5-7b
    devices: [rtx4090, tpu-v4, b300]
    analyses:
      attention_intensity: {contexts: [512]}
      serving: {batch: [1], contexts: [1024], prompts: [512]}
      ledger: {phases: [prefill], variants: [flash], workloads: [{batch: 1, context: 512}]}
    """


@pytest.mark.slow
def test_a_device_lacking_a_figure_is_left_out_of_that_section_only(call, tmp_path):
    path = _study(tmp_path, PARTIAL)
    code, _, err = call("check", path)
    assert code == 0
    assert "Serving bounds: not evaluated on tpu-v4: device 'tpu-v4' lists no vector peak" in err
    code, _, err = call("build", path, "--out", tmp_path / "out", "--format", "md,html,json")
    assert code == 0, err
    data = json.loads((tmp_path / "out" / "study.json").read_text())
    serving = next(s for s in data["sections"] if s["kind"] == "serving")
    assert [row["device"] for row in serving["lacking"]] == ["tpu-v4"]
    assert [m["device"] for m in serving["memory"]] == ["rtx4090", "b300"]
    ledger = next(s for s in data["sections"] if s["kind"] == "ledger")
    assert {row["device"] for row in ledger["lacking"]} == {"tpu-v4", "b300"}   # no vector peak; no SRAM
    md = (tmp_path / "out" / "study.md").read_text()
    assert "Not evaluated on `tpu-v4`: device 'tpu-v4' lists no vector peak" in md
    assert "Not evaluated on `b300`: device 'b300' lists no on_chip.sram_per_sm" in md
    tpu = next(d for d in data["summary"]["devices"] if d["device"] == "tpu-v4")
    assert "lists no vector peak" in tpu["lacks"]
    assert call("explain", path, "attention")[0] == 0


def test_a_section_whose_only_device_lacks_a_figure_is_an_error(call, tmp_path):
    path = _study(tmp_path, PARTIAL.replace("[rtx4090, tpu-v4, b300]", "[tpu-v4]"))
    code, _, err = call("check", path)
    assert code == 1 and "devices[0]: device 'tpu-v4' lists no vector peak" in err


WIDE = """\
    title: wide
    model: qwen2.5-7b
    devices: [rtx4090, a100-40gb, h100-sxm, l4]
    analyses:
      decode_view: {batch: [1, 64], contexts: [1024]}
      serving: {batch: [1, 64], contexts: [1024], prompts: [512]}
    """


def _tables(md: str) -> list[list[list[str]]]:
    tables, rows = [], []
    for line in md.split("\n") + [""]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


@pytest.mark.slow
def test_markdown_tables_stay_narrow_and_bytes_follow_one_policy(call, tmp_path):
    path = _study(tmp_path, WIDE)
    code, _, err = call("build", path, "--out", tmp_path / "out", "--format", "md")
    assert code == 0, err
    md = (tmp_path / "out" / "study.md").read_text()
    assert "1 GB = 10⁹ B" in md and "1 GiB = 2³⁰ B" in md
    tables = _tables(md)
    assert all(len(t[0]) <= 9 for t in tables), [len(t[0]) for t in tables]
    # the same decode step's traffic: GB in the serving table and in the decode view
    serving = next(t for t in tables if "bytes moved" in t[0])
    view = next(t for t in tables if t[0][:3] == ["B", "S", "weights"])
    moved = serving[2][serving[0].index("bytes moved")]
    assert moved.endswith(" GB") and view[2][2].endswith(" GB"), (moved, view[2][2])
    assert serving[2][serving[0].index("KV cache held")].endswith("iB")
    assert "On **l4**:" in md


TRAINING = """\
    model: palm-540b
    devices: [tpu-v4]
    analyses:
      training: {{device: tpu-v4, chips: 6144, tokens_per_s: {rate}, sequence: 2048}}
    """


@pytest.mark.slow
def test_mfu_above_the_peak_is_an_error_at_the_throughput(call, tmp_path):
    # PaLM 540B: 238.3k tokens/s on 6144 TPU v4 is 46.2% MFU (PaLM, Table 3); a thousandfold
    # slip gives 46,200%
    path = _study(tmp_path, TRAINING.format(rate="238.3M tokens/s"))
    code, _, err = call("check", path)
    assert code == 1 and "Traceback" not in err
    assert "study.yaml:4:57: analyses.training.tokens_per_s: 238.3M tokens/s on 6144 × tpu-v4 gives MFU" in err
    assert "above the chips' peak" in err
    path = _study(tmp_path, TRAINING.format(rate="238.3k tokens/s"))
    assert call("check", path)[0] == 0


@pytest.mark.slow
def test_a_bandwidth_unit_slip_is_warned_about_where_it_is_written(call, tmp_path):
    """An H20 has 4.0 TB/s of HBM3 (NVIDIA H20 datasheet); written as 4.0 GB/s its ridge is
    148e12 / 4e9 = 37,000 FLOP/B, beyond any accelerator."""
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "h20.yaml").write_text(textwrap.dedent("""\
        name: NVIDIA H20
        compute:
          tensor: {bf16: 148 TFLOP/s}
        memory: {bandwidth: 4.0 GB/s, capacity: 96 GiB}
        source: NVIDIA H20 datasheet
        """))
    path = _study(tmp_path, STUDY.replace("[rtx4090, a100-40gb]", "[h20]"))
    for command in (["check", path], ["build", path, "--out", tmp_path / "out", "--format", "md"]):
        code, _, err = call(*command)
        assert code == 0, err
        assert "warning: " in err and "h20.yaml:3:18: compute.tensor.bf16: the bf16 ridge, peak / " \
               "bandwidth = 37,000.0 FLOP/B, is far outside any accelerator" in err, err
    hw = tmp_path / "hardware" / "h20.yaml"
    # past what any device could have (below 1 GB/s) the slip is an error, not a warning
    hw.write_text(hw.read_text().replace("4.0 GB/s", "4.0 MB/s").replace("148 TFLOP/s", "148 GFLOP/s"))
    code, _, err = call("check", path)
    assert code == 1 and "h20.yaml:4:21: memory.bandwidth: " in err and "1 GB/s" in err, err
    assert "warning" not in call("check", _study(tmp_path, STUDY))[2]


def test_no_shipped_device_is_implausible():
    from rooflinec.spec import catalog
    for name in catalog.names("hardware"):
        assert spec.load_hardware(catalog.path("hardware", name)).warnings == (), name


def _declaring(tmp_path, operator: str):
    """The catalog's Qwen2.5-7B with one declared operator, and a study of it on an RTX 4090."""
    (tmp_path / "models").mkdir(exist_ok=True)
    base = (spec.catalog.path("models", "qwen2.5-7b") and
            open(spec.catalog.path("models", "qwen2.5-7b"), encoding="utf-8").read())
    (tmp_path / "models" / "q.yaml").write_text(
        base + "dimensions: {n_experts: 64, d_latent: 512}\noperators:\n" + textwrap.dedent(operator))
    return _study(tmp_path, """\
        model: q
        devices: [rtx4090]
        analyses:
          params: {}
          serving: {batch: [1], contexts: [1024]}
        """)


ROUTER = """\
  - name: router
    after: o_proj
    unit: matrix
    flops: 2*M*d_model*n_experts
    bytes: {weights: d_model*n_experts*b, activations: M*(d_model + n_experts)*b}
    params: 1000*d_model*n_experts
    cache_per_token: d_latent*b
"""


@pytest.mark.slow
def test_declared_weights_and_cache_count_in_params_and_memory_fit(call, tmp_path):
    path = _declaring(tmp_path, ROUTER)
    code, _, err = call("build", path, "--out", tmp_path / "out", "--format", "json")
    assert code == 0, err
    data = json.loads((tmp_path / "out" / "study.json").read_text())
    serving = next(s for s in data["sections"] if s["kind"] == "serving")
    # Qwen2.5-7B: 7,615,616,512 parameters; the router adds 28 layers × 1000 · 3584 · 64
    router = 28 * 1000 * 3584 * 64
    assert serving["weight_bytes"] == 2 * (7_615_616_512 + router)
    # K and V: 2 · 28 · 4 · 128 · 2 = 57,344 B per token; the latent cache adds 28 · 512 · 2
    assert serving["kv_per_token"] == 57_344 + 28 * 512 * 2
    assert serving["memory"][0]["weights_fit"] is False     # 28.08 GB on a 24 GiB card
    answers = data["summary"]["devices"][0]
    assert answers["weights_fit"] is False
    assert answers["decode"][0]["batch_1"]["fits"] is False and answers["prefill"][0]["fits"] is False


def test_declared_params_may_not_depend_on_the_workload(call, tmp_path):
    path = _declaring(tmp_path, ROUTER.replace("params: 1000*d_model*n_experts", "params: M*d_model"))
    code, _, err = call("check", path)
    assert code == 1
    assert "operators[0].params: 'M*d_model' depends on M; what an operator holds is fixed by the model" in err


def test_a_comma_cut_by_a_flow_mapping_says_to_quote(call, tmp_path):
    path = _declaring(tmp_path, "  - {name: r, flops: 2*M*max(d_model, 4), bytes: M*b}\n")
    code, _, err = call("check", path)
    assert code == 1 and "Traceback" not in err
    assert "a comma ends the value, so a formula with commas (min, max) must be quoted" in err


PIECEWISE = """\
  - {name: pad, after: o_proj, unit: matrix, flops: "2*max(M, 128)*d_model*min(S, 4096)",
     bytes: "ceil(M/64)*64*d_model*b + d_model*b"}
"""


@pytest.mark.slow
@pytest.mark.parametrize("analysis", [
    "serving: {batch: [1, 64], contexts: [1024]}",
    "decode_view: {batch: [1, 64], contexts: [1024]}",
    "derivations: {phases: [decode, prefill]}",
    "ledger: {phases: [decode, prefill], workloads: [{batch: 1, context: 512}]}",
    "sweep: {phase: decode, batch: {from: 1, to: 64, step: 1}, context: [1024, 2048]}",
    "attention_intensity: {contexts: [512]}",
    "gemm_intensity: {tokens: [1, 256]}",
    "params: {}",
])
def test_min_max_ceil_of_a_workload_symbol_work_in_every_analysis(call, tmp_path, analysis):
    _declaring(tmp_path, PIECEWISE)
    path = _study(tmp_path, f"model: q\ndevices: [rtx4090]\nanalyses:\n  {analysis}\n")
    code, _, err = call("build", path, "--out", tmp_path / "out", "--format", "md,json")
    assert code == 0 and "Traceback" not in err, err
    data = json.loads((tmp_path / "out" / "study.json").read_text())
    assert data["summary"]["devices"][0]["decode"][0]["batch_1"]["tokens_per_s"] > 0


def _training(tmp_path, extra: str, devices: str = "[tpu-v4, a100-80gb]", device: str = "a100-80gb",
              conventions: str = ""):
    path = _study(tmp_path, f"model: palm-540b\ndevices: {devices}\n{conventions}analyses:\n"
                            f"  training: {{device: {device}, chips: 6144, tokens_per_s: 238.3k tokens/s, "
                            f"sequence: 2048{extra}}}\n")
    from rooflinec.spec import load as S
    return report.build(S.load_study(str(path)))["sections"][0]


def test_selective_recomputation_repeats_only_the_attention_forward():
    """Korthikanti et al. 2022: selective recomputation reruns the attention core only. Under
    PaLM's count that is the attention forward, 4·L·H·Q·T per token: for PaLM 540B
    (L = 118, H = 48, Q = 256, T = 2048) 4 · 118 · 48 · 256 · 2048 = 11,878,268,928."""
    from rooflinec.cost import efficiency as E
    from rooflinec.model.symbols import L, S, d_head, n_q
    account = E.palm_account(sp_symbol("N"))
    assert account.recomputed("selective") == 4 * L * n_q * d_head * S
    assert (4 * L * n_q * d_head * S).subs({L: 118, n_q: 48, d_head: 256, S: 2048}) == 11_878_268_928


def sp_symbol(name):
    import sympy as sp
    return sp.Symbol(name, positive=True)


@pytest.mark.slow
def test_n_convention_is_selectable(tmp_path):
    every = _training(tmp_path, "")
    non_embedding = _training(tmp_path, ", parameters: non_embedding")
    published = _training(tmp_path, ", parameters: published, published_parameters: 540.35e9")
    # PaLM 540B ties its 256k x 18432 embedding table: the non-embedding count leaves it out
    assert every["n_params"] - non_embedding["n_params"] == 256_000 * 18_432
    assert published["n_params"] == 540_350_000_000
    assert "Kaplan" in non_embedding["n_convention"]
    # 6N + 12·L·H·Q·T: the attention term is kept, so MFU moves by 6·ΔN only
    delta = every["accounts"][1]["model"] - non_embedding["accounts"][1]["model"]
    assert delta == pytest.approx(6 * 256_000 * 18_432)


@pytest.mark.slow
def test_training_step_ledger_per_op(tmp_path):
    s = _training(tmp_path, ", recompute: selective")
    step = s["step"]
    assert step["lacks"] is None and step["device"] == "a100-80gb"
    ledger = s["accounts"][2]          # the ledger's per-token forward and backward
    assert step["parts"]["forward"]["flops"] == pytest.approx(ledger["forward"] * 2048, rel=1e-9)
    assert step["parts"]["backward"]["flops"] == pytest.approx(ledger["backward"] * 2048, rel=1e-9)
    attention = sum(r["forward"]["flops"] for r in step["rows"] if r["category"] in ("attention", "attention_matmul"))
    assert step["parts"]["recompute"]["flops"] == pytest.approx(attention)
    assert step["tokens_per_s_per_chip"] == pytest.approx(2048 / step["totals"]["time_s"])
    for r in step["rows"]:
        assert r["time_s"] >= r["forward"]["time_s"] > 0 or r["forward"]["bytes"] == 0
    assert _training(tmp_path, "", devices="[tpu-v4]", device="tpu-v4")["step"]["lacks"].startswith(
        "device 'tpu-v4' lists no vector peak")


@pytest.mark.slow
def test_training_text_follows_the_study_conventions(tmp_path):
    s = _training(tmp_path, "", conventions="conventions: {qkv: fused}\n")
    stated = dict(s["program_conventions"])
    assert "fused" in stated["qkv"] or "one" in stated["qkv"], stated


@pytest.mark.slow
def test_explain_shows_every_device_tiles_crossings_and_decimal_limits(call, tmp_path):
    code, out, err = call("explain", "specs/qwen.yaml", "attention", "--variant", "flash")
    assert code == 0, err
    # Algorithm 1's tiles from each device's SRAM: Bc = 128 keys on the RTX 4090, 192 on the A100;
    # the limit 128·(4·d_head + 5)/(b·(3·d_head + 4)) at d_head = 128, b = 2 is 66176/776 = 85.28
    assert "K/V tiles of Bc = 128 keys, xL (on rtx4090)" in out
    assert "K/V tiles of Bc = 192 keys, xL (on a100-40gb)" in out
    assert "as S -> ∞ 128·(4·d_head + 5)/(b·(3·d_head + 4)) = 85.28" in out
    assert "rtx4090    ridge 163.9: never compute-bound (its intensity stays below the limit, 85.28)" in out
    assert "a100-40gb  ridge 200.6: never compute-bound (its intensity stays below the limit, 127.9)" in out
    code, out, _ = call("explain", "specs/qwen.yaml", "attention")
    assert "as S -> ∞ 2·n_q/(b·n_kv) = 7.000" in out     # 2 · 28 / (2 · 4)
    path = _study(tmp_path, PARTIAL)
    code, out, err = call("explain", path, "attention", "--variant", "flash")
    assert code == 0, err
    assert "tpu-v4     not derived: device 'tpu-v4' lists no on_chip.sram_per_sm" in out
    # ideal prefill attention: 2·S·n_q/(b·(n_kv + n_q)) = 0.875·S; ridge / 0.875 rounded up:
    # 163.9 -> 188, 229.2 -> 262, 281.25 -> 322 (b300: 2250e12 / 8000e9)
    code, out, err = call("explain", path, "attention")
    for line in ("rtx4090    ridge 163.9: compute-bound from S = 188",
                 "tpu-v4     ridge 229.2: compute-bound from S = 262",
                 "b300       ridge 281.2: compute-bound from S = 322"):
        assert line in out


@pytest.mark.slow
def test_a_section_naming_a_device_it_leaves_out_goes_on(call, tmp_path):
    path = _study(tmp_path, """\
        model: qwen2.5-7b
        devices: [rtx4090, tpu-v4]
        analyses:
          sweep: {phase: decode, batch: [1, 8], context: [1024], devices: [rtx4090, tpu-v4]}
        """)
    code, _, err = call("build", path, "--out", tmp_path / "out", "--format", "md")
    assert code == 0, err
    assert "Not evaluated on `tpu-v4`: device 'tpu-v4' lists no vector peak" in (tmp_path / "out" / "study.md").read_text()


@pytest.mark.slow
def test_report_opens_with_the_answer_then_why_then_the_folded_detail(call, tmp_path):
    """Issue 32 item 1: the answer, a short why (the formulas, the bound rules once), then the
    detail: folded in HTML (<details>), linked from a table of contents in Markdown."""
    import re
    from rooflinec.render.pages import anchor
    path = _study(tmp_path, STUDY)
    code, _, err = call("build", path, "--out", tmp_path / "out", "--format", "md,html,json")
    assert code == 0, err
    md = (tmp_path / "out" / "study.md").read_text()
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert heads[:4] == ["## Summary", "## Why", "## Contents", "## Devices"]
    assert md.count('Three rules answer "is it compute-bound?"') == 1
    assert md.index("## Why") < md.index("Three rules answer") < md.index("## Contents")
    contents = md[md.index("## Contents"):md.index("## Devices")]
    links = re.findall(r"\]\(#([^)]+)\)", contents)
    assert links == [anchor(h[3:]) for h in heads[3:]]      # every detail heading, in order
    assert "tokens/s per user" in md and "per GPU" in md
    html = (tmp_path / "out" / "study.html").read_text()
    summary = html[html.index('<section id="summary">'):html.index('<section id="why">')]
    assert "<details" not in summary
    for kind in ("devices", "model", "conventions", "params", "symbols"):
        assert f'<section id="{kind}"><details class="detail">\n<summary><h2>' in html, kind
    assert html.index('id="why"') < html.index('id="devices"')


def test_a_study_without_a_summary_opens_its_first_section():
    """The answer comes first even without a summary (no model, or a side-by-side study): the
    first section is open, the later ones and the symbols stay folded (committed reports)."""
    html = (REPORTS / "accelerators.html").read_text()
    assert '<section id="summary">' not in html
    assert '<section id="accelerators"><details class="detail" open>' in html
    assert '<section id="symbols"><details class="detail">' in html
    qwen = (REPORTS / "qwen.html").read_text()
    assert "<details class=\"detail\" open>" not in qwen



def test_per_user_is_one_sequence_s_rate_under_attention_dp():
    """Mixtral at attention DP 8, EP 8 (committed report): the group steps 8 ranks' batches at
    once, so per user is 1 / step (it printed 8x that, the group's tokens/s over one rank's
    batch) and per GPU the group's tokens/s over 8 devices."""
    data = json.loads((REPORTS / "moe-mixtral-ep.json").read_text())
    assert data["summary"]["deployment"]["attention_dp"] == 8
    for dev in data["summary"]["devices"]:
        for c in dev["decode"]:
            for pt, batch in ((c["batch_1"], 1), (c["at_max_batch"], c["max_batch"])):
                assert pt["per_user"] == pytest.approx(1 / pt["time_s"])
                assert pt["per_gpu"] == pytest.approx(batch * 8 / pt["time_s"] / 8)

@pytest.mark.slow
def test_calibrated_rows_appear_where_the_shipped_calibration_was_fitted(call, tmp_path):
    """On H100 the summary carries the serving model's calibrated TPOT beside the bounds (a
    prediction: never below the bound's step); on an RTX 4090 it carries none."""
    path = _study(tmp_path, STUDY.replace("[rtx4090, a100-40gb]", "[h100-sxm, rtx4090]"))
    code, _, err = call("build", path, "--out", tmp_path / "out", "--format", "md,json")
    assert code == 0, err
    data = json.loads((tmp_path / "out" / "study.json").read_text())
    h100, rtx = data["summary"]["devices"]
    assert rtx["calibrated"]["points"] == [] and "not rtx4090" in rtx["calibrated"]["note"]
    assert h100["calibrated"]["engine"] == "trtllm" and h100["calibrated"]["points"]
    for p in h100["calibrated"]["points"]:
        c = next(c for c in h100["decode"] if c["context"] == p["context"])
        bound = c["batch_1"] if p["batch"] == 1 else c["at_max_batch"]
        assert p["tpot_s"] >= bound["time_s"]
        assert p["tpot_interval_s"][0] < p["tpot_s"] < p["tpot_interval_s"][1]
    md = (tmp_path / "out" / "study.md").read_text()
    assert f"| h100-sxm | decode, S = {summary.CONTEXT}, B = 1, calibrated (trtllm) | TPOT " in md
    assert "Calibrated rows are predictions, not bounds" in md


def test_serve_per_user_under_attention_dp_is_one_over_the_step(call):
    code, text, err = call("serve", "mixtral-8x7b", "--device", "h100-sxm", "--attention-dp", "8", "--ep", "8",
                           "--batch", "1", "--context", "4096", "--prompt", "2048")
    assert code == 0, err
    step = next(r for r in text.splitlines() if r.strip().startswith("1 "))
    per_user, per_gpu = (float(c.replace(",", "")) for c in step.split()[1:3])
    # 8 ranks, one sequence each, over 8 GPUs: per user = per GPU = 1 / step (it read 8x per user)
    assert per_user == pytest.approx(per_gpu, rel=1e-3)
