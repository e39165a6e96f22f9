"""HTML reports, charts and MathML: self-contained, deterministic, escaped, typeset by sympy."""

from __future__ import annotations

import io
import itertools
import re
import shutil
from pathlib import Path

import pytest
import sympy as sp

from rooflinec.render import chartdata, mathml
from rooflinec.cost import chartpoints
from rooflinec.cli import report
from rooflinec.spec import load as spec
from rooflinec.cli.app import run
from rooflinec.render.pages import chart_slots, render_many
from rooflinec.model.symbols import B, S, b, d_head, n_kv, n_q

ROOT = Path(__file__).resolve().parent.parent
QWEN = ROOT / "specs" / "qwen.yaml"


@pytest.fixture(scope="module")
def qwen():
    return report.build(spec.load_study(str(QWEN)))


@pytest.fixture(scope="module")
def files(qwen):
    return render_many(qwen, ["md", "html", "json"])


def hostile_study(tmp_path: Path) -> Path:
    """A study whose model is named `<script>alert(1)</script>`, in a spec tree under tmp_path."""
    (tmp_path / "models").mkdir()
    (tmp_path / "hardware").mkdir()
    shutil.copy(ROOT / "rooflinec" / "spec" / "catalog" / "hardware" / "rtx4090.yaml", tmp_path / "hardware")
    text = (ROOT / "rooflinec" / "spec" / "catalog" / "models" / "qwen2.5-7b.yaml").read_text()
    (tmp_path / "models" / "evil.yaml").write_text(
        re.sub(r"^name: .*$", "name: '<script>alert(1)</script>'", text, flags=re.M))
    study = tmp_path / "evil.yaml"
    study.write_text("model: evil\ndevices: [rtx4090]\ndtype: bf16\nanalyses:\n"
                     "  gemm_intensity: {tokens: [1, 256]}\n"
                     "  attention_intensity: {contexts: [128, 2048]}\n")
    return study


# --- the render API -------------------------------------------------------------------------

@pytest.mark.slow
def test_every_format_names_its_files(files):
    assert {"qwen.md", "qwen.html", "qwen.json"} <= files.keys()
    svgs = [p for p in files if p.endswith(".svg")]
    assert svgs and all(p.startswith("qwen/") for p in svgs)
    # one roofline per device for each section with points, and the GEMM sweep
    assert "qwen/roofline-gemm-intensity-rtx4090.svg" in svgs
    assert "qwen/roofline-attention-intensity-a100-40gb.svg" in svgs
    assert "qwen/gemm-intensity-sweep.svg" in svgs


@pytest.mark.slow
def test_markdown_links_every_chart_file(files):
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", files["qwen.md"])
    assert sorted(links) == sorted(p for p in files if p.endswith(".svg"))


@pytest.mark.slow
def test_json_alone_draws_no_chart(qwen):
    assert list(render_many(qwen, ["json"])) == ["qwen.json"]


@pytest.mark.slow
def test_same_spec_same_bytes(qwen, files):
    again = render_many(report.build(spec.load_study(str(QWEN))), ["md", "html", "json"])
    assert again == files


# --- self-contained, safe HTML ----------------------------------------------------------------

@pytest.mark.slow
def test_html_is_self_contained(files):
    html = files["qwen.html"]
    # the calculator's two inline scripts only: its data (JSON) and its code, no src
    assert re.findall(r"<script[^>]*>", html) == ['<script type="application/json" id="calc-data">',
                                                  '<script id="calc-script">']
    assert not re.search(r"""(src|href)=["'](https?:)?//""", html)   # nothing fetched
    assert "@import" not in html and "url(http" not in html and "fetch(" not in html
    # each chart file inline, and the calculator's roofline, which its script draws
    assert html.count("<svg") == sum(p.endswith(".svg") for p in files) + 1
    assert "@media print" in html and 'name="viewport"' in html


def test_inline_svg_ids_are_unique(files):
    ids = re.findall(r'\bid="([^"]+)"', files["qwen.html"])
    assert len(ids) == len(set(ids))
    for ref in re.findall(r'(?:href="#|url\(#)([^")]+)', files["qwen.html"]):
        assert ref in ids


@pytest.mark.slow
def test_hostile_model_name_is_escaped(tmp_path):
    study = hostile_study(tmp_path)
    assert run(["build", str(study), "--out", str(tmp_path / "out")], io.StringIO(), io.StringIO()) == 0
    html = (tmp_path / "out" / "evil.html").read_text()
    assert "<script>" not in html and html.count("<script") <= 2   # the calculator's, if any
    assert "alert(1)</script>" not in html                          # inside its JSON: \u003c
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    for svg in (tmp_path / "out" / "evil").glob("*.svg"):
        assert "<script" not in svg.read_text()


# --- MathML -----------------------------------------------------------------------------------

def test_mathml_is_presentation_core():
    out = str(mathml.mathml(2 * S * n_q / (b * (S * n_kv + n_q))))
    assert out.startswith("<math>") and out.endswith("</math>")
    assert "<mfrac>" in out and "<msub><mi>n</mi><mi>q</mi></msub>" in out
    assert "mfenced" not in out and "&InvisibleTimes;" not in out


def test_mfenced_is_rewritten_to_core():
    assert mathml._core('<mfenced><mi>x</mi></mfenced>') == "<mrow><mo>(</mo><mi>x</mi><mo>)</mo></mrow>"
    assert mathml._core('<mfenced open="[" close="]"><mn>1</mn></mfenced>') == \
        "<mrow><mo>[</mo><mn>1</mn><mo>]</mo></mrow>"


def test_decode_attention_raw_fraction_loses_S():
    # decode attention, K and V reads only: 4·B·S·d·n_q FLOPs over 2·B·S·d·n_kv·b bytes
    flops, nbytes = 4 * B * S * d_head * n_q, 2 * B * S * b * d_head * n_kv
    simplified = sp.cancel(flops / nbytes)
    assert simplified == 2 * n_q / (b * n_kv)
    assert mathml.cancelled(flops, nbytes, simplified) == ("B", "S", "d_head")
    raw = mathml.raw_fraction(flops, nbytes)
    assert S in raw.free_symbols and sp.cancel(raw) == simplified        # unsimplified, same value
    out = str(mathml.identity(flops, nbytes, simplified))
    assert out.count('<mi class="struck">S</mi>') == 2                  # numerator and denominator
    assert "<mo>=</mo>" in out


def test_attention_section_shows_the_derivation(files, qwen):
    case = next(c for c in next(s for s in qwen["sections"] if s["kind"] == "attention_intensity")["cases"]
                if c["phase"] == "decode" and c["count"] == "kv")
    assert S not in case["formula"].free_symbols
    assert str(mathml.identity(case["flops"], case["bytes"], case["formula"])) in files["qwen.html"]


# --- chart points and charts ------------------------------------------------------------------

def test_chart_points_share_one_shape(qwen):
    keys = {"label", "series", "intensity", "unit", "device", "flops_per_s", "roof"}
    devices = {d["key"] for d in qwen["devices"]}
    for section in qwen["sections"]:
        for p in section["chart_points"]:
            assert set(p) == keys
            assert p["unit"] in ("matrix", "vector") and p["intensity"] > 0
            assert set(p["roof"]) == (devices if p["device"] is None else {p["device"]})


def test_a_section_may_carry_its_own_points(qwen):
    roof = {d["key"]: 1e12 for d in qwen["devices"]}
    section = {"kind": "ledger_of_the_future", "title": "Ledger",
               "chart_points": [dict(chartpoints.point("attention", "flash", 170.9), roof=roof),
                                dict(chartpoints.point("softmax", "unfused", 1.25, unit="vector"),
                                     roof=roof)]}
    charts = chartdata.plan(dict(qwen, sections=[section]))[0]
    assert [c["device"]["key"] for c in charts] == [d["key"] for d in qwen["devices"]]
    assert {p["series"] for p in charts[0]["points"]} == {"flash", "unfused"}


def test_points_sit_on_the_roof(qwen):
    """Each point's height is min(peak, intensity x bandwidth) of its unit's roof, computed with
    the section; the chart draws exactly that number."""
    devices = {d["key"]: d for d in qwen["devices"]}
    seen = set()
    for i, section in enumerate(qwen["sections"]):
        for chart in chartdata.plan_section(i, section, qwen):
            if chart["kind"] == "roofline":
                assert all(p["attained"] == p["roof"][chart["device"]["key"]] for p in chart["points"])
        for p in section["chart_points"]:
            for key, height in p["roof"].items():
                dev = devices[key]
                peak = dev["tensor_peak"] if p["unit"] == "matrix" else dev["vector_peak"] or dev["tensor_peak"]
                if p["flops_per_s"] is None:
                    assert height == pytest.approx(min(peak, p["intensity"] * dev["bandwidth"]))
                    seen.add("roof" if height == peak else "slope")
    assert seen == {"roof", "slope"}


def test_gemm_sweep_crosses_the_ridge_where_the_table_says(qwen):
    index = next(i for i, s in enumerate(qwen["sections"]) if s["kind"] == "gemm_intensity")
    sweep = chartdata.gemm_sweep(index, qwen["sections"][index], qwen)
    for line in sweep["lines"]:
        assert all(y2 > y1 for y1, y2 in zip(line["y"], line["y"][1:]))   # rises with M
        for c in line["crossings"]:
            dev = next(d for d in qwen["devices"] if d["key"] == c["device"])
            assert c["intensity"] >= dev["tensor_peak"] / dev["bandwidth"]


@pytest.mark.slow
def test_charts_are_svg_with_text(qwen):
    from rooflinec.render.charts import draw
    for section in chart_slots(qwen):
        for c in section:
            svg = draw(c["spec"])
            assert svg.lstrip().startswith("<?xml") and "<svg" in svg
            assert "<text" in svg and "Date" not in svg
            assert "mathdefault" not in svg                          # plain tick labels


def _text_boxes(svg: str):
    """Each <text>'s lines in a chart's SVG as (text, box in points), measured with
    matplotlib's DejaVu Sans metrics (not the width estimate the chart was laid out with)."""
    import xml.etree.ElementTree as ET
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath
    measure = TextToPath().get_text_width_height_descent
    ns = "{http://www.w3.org/2000/svg}"
    root = ET.fromstring(svg[svg.index("<svg"):])
    clip = root.find(f"{ns}defs/{ns}clipPath/{ns}rect")
    axes = tuple(float(clip.get(k)) for k in ("x", "y", "width", "height"))
    boxes = []
    for el in root.iter(f"{ns}text"):
        size = float(el.get("font-size"))
        rotated = "rotate" in (el.get("transform") or "")
        for line in list(el.iter(f"{ns}tspan")) or [el]:
            text, x, y = line.text or "", float(line.get("x")), float(line.get("y"))
            w, h, d = measure(text, FontProperties(family="DejaVu Sans", size=size), ismath=False)
            shift = {"start": 0, "middle": w / 2, "end": w}[el.get("text-anchor", "start")]
            if rotated:   # rotate(-90) about (x, y): the line runs upwards from y
                box = (x - (h - d), y - w + shift, x + d, y + shift)
            else:
                box = (x - shift, y - (h - d), x - shift + w, y + d)
            boxes.append((el, text, box))
    return axes, boxes


@pytest.mark.slow
@pytest.mark.parametrize("study", sorted(p.name for p in (ROOT / "specs").glob("*.yaml")))
def test_chart_labels_do_not_overlap(study):
    """Point labels are placed from estimated sizes; measured with matplotlib's font metrics,
    no two texts inside a shipped roofline chart's axes overlap by more than a sliver (2 x 2 pt)."""
    from rooflinec.render import charts
    rep = report.build(spec.load_study(str(ROOT / "specs" / study)))
    rooflines = [c["spec"] for section in chart_slots(rep) for c in section if c["spec"]["kind"] == "roofline"]
    if not rooflines:
        pytest.skip(f"{study} draws no roofline chart")
    for chart in rooflines:
        (ax, ay, aw, ah), boxes = _text_boxes(charts.draw(chart))
        inside = [(el, t, b) for el, t, b in boxes if b[2] > ax and b[0] < ax + aw and b[3] > ay and b[1] < ay + ah]
        assert len(inside) >= 2   # the point labels and the ridge's
        for (el, text, one), (other_el, other_text, other) in itertools.combinations(inside, 2):
            if el is other_el:
                continue   # lines of one label
            w = min(one[2], other[2]) - max(one[0], other[0])
            h = min(one[3], other[3]) - max(one[1], other[1])
            assert w <= 2 or h <= 2, f"{chart['title']}: {text!r} and {other_text!r} overlap"


def test_every_category_class_has_a_colour(files):
    """The ledger legend and rows use category classes; each must be styled."""
    html = files["qwen.html"]
    used = set(re.findall(r'class="(?:cat )?(cat-[a-z-]+)"', html))
    styled = set(re.findall(r"\.(cat-[a-z-]+) \{", html))
    assert {"cat-attention-matmul", "cat-custom"} <= used
    assert used <= styled


def test_html_derivation_headings_name_what_a_kernel_absorbed(files):
    assert "<h4>o_proj + attn_residual <span" in files["qwen.html"]


# --- every section kind, the new charts ------------------------------------

def test_every_analysis_has_an_html_and_a_markdown_template():
    from rooflinec.analyses import ANALYSES
    from rooflinec.render.pages import environment
    assert len(ANALYSES) >= 12
    for kind in ANALYSES:
        environment(True).get_template(f"html/{kind}.html.j2")
        environment(False, markdown=True).get_template(f"md/{kind}.md.j2")


def test_ledger_chart_shows_each_variant_and_phase_per_device(qwen):
    index = next(i for i, s in enumerate(qwen["sections"]) if s["kind"] == "ledger")
    section = qwen["sections"][index]
    charts = chartdata.plan(qwen)[index]
    rooflines = [c for c in charts if c["kind"] == "roofline"]
    assert [c["device"]["key"] for c in rooflines] == [d["key"] for d in qwen["devices"]]
    want = {f"{ph}, {v}" for ph in section["phases"] for v in section["variants"]}
    for c in rooflines:
        assert {p["series"] for p in c["points"]} == want
        assert all(p["intensity"] > 0 for p in c["points"])
    flash = {p["label"] for p in rooflines[0]["points"] if p["series"].endswith("flash")}
    assert "attention" in flash


def test_sweep_chart_marks_each_crossing(qwen):
    index = next(i for i, s in enumerate(qwen["sections"]) if s["kind"] == "sweep")
    section = qwen["sections"][index]
    chart = next(c for c in chartdata.plan(qwen)[index] if c["kind"] == "throughput")
    assert len(chart["lines"]) == len(section["series"])
    for line, s in zip(chart["lines"], section["series"]):
        assert line["y"] == s["tokens_per_s"]
        assert (line["crossing"] or {}).get("at") == s["crossing"]


def test_operators_chart_has_every_point():
    rep = report.build(spec.load_study(str(ROOT / "specs" / "operators.yaml")))
    charts = chartdata.plan(rep)[0]
    n = sum(len(r["points"]) for r in rep["sections"][0]["rows"])
    assert [len(c["points"]) for c in charts] == [n] * len(rep["devices"])


def test_shared_prose_escapes_in_html_whatever_compiled_it_first():
    """The prose both formats share compiles per format (autoescape is compiled in): text
    from a spec is escaped in HTML even when Markdown rendered the same prose first."""
    from rooflinec.render.pages import environment
    section = {"layers": "<b>&"}
    md = environment(False).get_template("prose/sections.j2").module.params_intro(section)
    html = environment(True).get_template("prose/sections.j2").module.params_intro(section)
    assert "L = <b>& times" in md
    assert "<var>L</var> = &lt;b&gt;&amp; times" in html


def test_every_shipped_study_draws_a_chart():
    """Each committed HTML report holds at least one chart (an inline SVG figure that is not
    the calculator's), and its Markdown links one: no study is tables only."""
    root = Path(__file__).resolve().parents[1]
    for spec_file in sorted((root / "specs").glob("*.yaml")):
        html = (root / "reports" / f"{spec_file.stem}.html").read_text()
        charts = re.findall(r'<figure class="chart (?!calc-chart)[^"]*"[^>]*><svg', html)
        assert charts, f"{spec_file.stem}.html draws no chart"
        md = (root / "reports" / f"{spec_file.stem}.md").read_text()
        assert re.search(r"!\[[^\]]*\]\([^)]+\.svg\)", md), f"{spec_file.stem}.md links no chart"
