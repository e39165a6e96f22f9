"""The answers first: a summary every model report opens with, owned by `summary` and shared
with `rooflinec serve`; and devices that lack a figure a section needs."""

from __future__ import annotations

import io
import json
import textwrap

import pytest

from rooflinec import cli, quick, report, spec, summary
from rooflinec.passes import VARIANTS
from rooflinec.workbench import Workbench

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


def _call(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.run([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_report_opens_with_the_answers_per_device(tmp_path):
    path = _study(tmp_path, STUDY)
    code, _, err = _call("build", path, "--out", tmp_path / "out", "--format", "md,html,json")
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


def test_summary_bounds_hold_under_every_variant():
    """The summary's TTFT ≥ and tokens/s ≤ are the ideal kernel's overlapped step bound:
    no variant (flash, fused, unfused) can be faster."""
    study = spec.load_study("specs/qwen.yaml")
    bench = Workbench(study)
    rep = {"sections": [], "devices": [report._device(d, study.dtype) for d in study.devices]}
    answers = report._summary(study, bench, rep)
    assert answers["variant"] == "ideal"
    for dev, row in zip(study.devices, answers["devices"]):
        for p in row["prefill"]:
            ideal = bench.step_terms("prefill", "ideal", dev).roof(1, p["prompt"]).time
            assert p["time_s"] == pytest.approx(ideal, rel=1e-12)
            for variant in VARIANTS:
                assert bench.step_terms("prefill", variant, dev).roof(1, p["prompt"]).time >= ideal * (1 - 1e-12)
        for c in row["decode"]:
            for variant in VARIANTS:
                t = bench.step_terms("decode", variant, dev).roof(1, c["context"]).time
                assert 1 / t <= c["batch_1"]["tokens_per_s"] * (1 + 1e-12)
            top = bench.step_terms("decode", "ideal", dev).roof(c["max_batch"], c["context"])
            assert c["at_max_batch"]["tokens_per_s"] == pytest.approx(c["max_batch"] / top.time)
            assert bench.fits(dev, c["max_batch"], c["context"])
            assert not bench.fits(dev, c["max_batch"] + 1, c["context"])


def test_serve_prints_the_summary_the_report_holds():
    """One owner: `serve`'s opening lines are `summary.text` of the same answers."""
    code, out, err = _call("serve", "qwen2.5-7b", "--device", "rtx4090", "--batch", "1")
    assert code == 0, err
    model = spec.load_model("rooflinec/catalog/models/qwen2.5-7b.yaml")
    device = spec.load_hardware("rooflinec/catalog/hardware/rtx4090.yaml")
    section = quick.serving_section(model, device, "bf16", [1], summary.CONTEXT, summary.PROMPT)
    dev = report._device(device, "bf16")
    assert out.startswith(summary.text(model.name, "bf16", summary.answers(section, [dev])))


PARTIAL = """\
    title: partial
    model: qwen2.5-7b
    devices: [rtx4090, tpu-v4, b200]
    analyses:
      attention_intensity: {contexts: [512]}
      serving: {batch: [1], contexts: [1024], prompts: [512]}
      ledger: {phases: [prefill], variants: [flash], workloads: [{batch: 1, context: 512}]}
    """


def test_a_device_lacking_a_figure_is_left_out_of_that_section_only(tmp_path):
    path = _study(tmp_path, PARTIAL)
    assert _call("check", path)[0] == 0
    code, _, err = _call("build", path, "--out", tmp_path / "out", "--format", "md,html,json")
    assert code == 0, err
    data = json.loads((tmp_path / "out" / "study.json").read_text())
    serving = next(s for s in data["sections"] if s["kind"] == "serving")
    assert [row["device"] for row in serving["lacking"]] == ["tpu-v4"]
    assert [m["device"] for m in serving["memory"]] == ["rtx4090", "b200"]
    ledger = next(s for s in data["sections"] if s["kind"] == "ledger")
    assert {row["device"] for row in ledger["lacking"]} == {"tpu-v4", "b200"}   # no vector peak; no SRAM
    md = (tmp_path / "out" / "study.md").read_text()
    assert "Not evaluated on `tpu-v4`: device 'tpu-v4' lists no vector peak" in md
    assert "Not evaluated on `b200`: device 'b200' lists no on_chip.sram_per_sm" in md
    tpu = next(d for d in data["summary"]["devices"] if d["device"] == "tpu-v4")
    assert "lists no vector peak" in tpu["lacks"]
    assert _call("explain", path, "attention")[0] == 0


def test_a_section_whose_only_device_lacks_a_figure_is_an_error(tmp_path):
    path = _study(tmp_path, PARTIAL.replace("[rtx4090, tpu-v4, b200]", "[tpu-v4]"))
    code, _, err = _call("check", path)
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


def test_markdown_tables_stay_narrow_and_bytes_follow_one_policy(tmp_path):
    path = _study(tmp_path, WIDE)
    code, _, err = _call("build", path, "--out", tmp_path / "out", "--format", "md")
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
