"""Small contracts: command-line mistakes exit 2 with the usage line, device keys are unique in
a study, and text from a spec is escaped for the format it is written in."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def tree(specs_tree):
    return specs_tree


# --- command-line mistakes: 2, with the command's usage line ------------------------------

def test_the_same_spec_twice_is_a_usage_error(call, tree, tmp_path):
    code, out, err = call("build", tree / "palm.yaml", tree / ".." / "specs" / "palm.yaml",
                          "--out", tmp_path / "out")
    assert code == 2 and out == ""
    assert err.startswith("usage: rooflinec build ")
    assert "the same spec is given twice" in err and not (tmp_path / "out").exists()


def test_an_empty_out_is_a_usage_error(call, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = call("build", ROOT / "specs" / "palm.yaml", "--out", "")
    assert code == 2 and err.startswith("usage: rooflinec build ") and "--out: empty" in err
    assert list(tmp_path.iterdir()) == []


# --- one device per key -------------------------------------------------------------------

def test_two_devices_with_one_file_name_are_a_located_error(call, tree):
    (tree / "other").mkdir()
    shutil.copy(tree / "hardware" / "a100-40gb.yaml", tree / "other" / "rtx4090.yaml")
    spec = tree / "two.yaml"
    spec.write_text("title: two\ndevices: [rtx4090, other/rtx4090.yaml]\n"
                    "analyses:\n  accelerators: {}\n")
    code, _, err = call("check", spec)
    assert code == 1
    # "devices: [rtx4090, " is 19 characters: the second reference starts at column 20
    assert err == (f"{spec}:2:20: devices[1]: a second device with key 'rtx4090' (devices are "
                   "known by their file name); rename one of the files\n")


# --- spec text escaped per format ---------------------------------------------------------

HOSTILE = "Evil | GPU\n# <script>alert(1)</script> [x](javascript:y) `z`"


def hostile_tree(tree: Path) -> Path:
    """A device whose name and a model whose name hold table, line, HTML, link and code syntax."""
    hw = tree / "hardware" / "rtx4090.yaml"
    hw.write_text(hw.read_text().replace("name: NVIDIA GeForce RTX 4090", f"name: {HOSTILE!r}".replace("'", '"')
                                         .replace("\n", "\\n")))
    model = tree / "models" / "qwen2.5-7b.yaml"
    text = model.read_text()
    name = re.search(r"^name: .*$", text, re.M).group(0)
    model.write_text(text.replace(name, 'name: "Qwen | <b>7B</b>\\nnext line"', 1))
    spec = tree / "h.yaml"
    spec.write_text("model: qwen2.5-7b\ndevices: [rtx4090, a100-40gb]\ndtype: bf16\n"
                    "analyses:\n  params: {}\n")
    return spec


@pytest.mark.slow
def test_names_from_a_spec_are_text_in_markdown(tree):
    from rooflinec.render import pages as render
    from rooflinec.cli import report
    from rooflinec.spec import load as spec
    rep = report.build(spec.load_study(str(hostile_tree(tree))))
    assert rep["devices"][0]["name"] == HOSTILE        # JSON keeps the name as written
    md = render.markdown(rep)
    assert "<script>" not in md and "<b>" not in md and "[x](javascript" not in md
    lines = md.splitlines()
    rows = [i for i, line in enumerate(lines) if line.startswith("| Evil")]
    header = lines[rows[0] - 2]    # the device table: its header, the rule, the row
    cells = lambda line: len(re.findall(r"(?<!\\)\|", line))   # noqa: E731  unescaped bars
    assert len(rows) == 1 and header.startswith("| device |")
    assert cells(lines[rows[0]]) == cells(header) == 9
    assert r"Evil \| GPU\\n# \<script\>alert(1)\</script\> \[x\](javascript:y) \`z\`" in lines[rows[0]]
    assert md.startswith(r"# Qwen \| \<b\>7B\</b\>\\nnext line: operator rooflines" "\n")  # one heading


def test_names_from_a_spec_are_one_line_in_the_terminal(call, tree):
    hostile_tree(tree)
    model = tree / "models" / "qwen2.5-7b.yaml"
    model.write_text(re.sub(r"^name: .*$", lambda _: r'name: "Qwen\e[2J\nfake line"', model.read_text(),
                            count=1, flags=re.M))
    code, out, err = call("explain", tree / "qwen.yaml", "k_proj")
    assert code == 0, err
    assert "\x1b" not in out and out.startswith("k_proj in Qwen\\x1b[2J\\nfake line\n")


def test_shared_prose_and_its_marks_are_escaped_in_markdown():
    """The prose written once for both formats prints a spec's text escaped in Markdown, and
    its marks (strong, code) escape what they mark while keeping their own syntax."""
    from rooflinec.render.pages import environment
    prose = environment(False, markdown=True).get_template("prose/sections.j2").module
    run = {"chips": 8, "device": {"name": "Evil | <b>GPU</b>", "key": "k`1|", "peak": 1e15},
           "tokens_per_s": 1e4, "sequence": 2048, "policy": "full|[x]", "policy_meaning": "m <i>",
           "n_params": 7e9}
    text = prose.training_run(run, "`N`")
    assert r"8 × Evil \| \<b\>GPU\</b\> (``k`1\|``)" in text
    assert r"recomputation: **full\|\[x\]** (m \<i\>)" in text
    assert text.endswith(r"counted from the model spec: \`N\`.")   # a plain string is text too


def test_serve_prints_a_spec_name_on_one_line(call, tree):
    hostile_tree(tree)
    code, out, err = call("serve", "qwen2.5-7b", "--device", tree / "hardware" / "rtx4090.yaml",
                          "--batch", "1")
    assert code == 0, err
    assert out.splitlines()[0].startswith(r"Qwen2.5-7B-Instruct on Evil | GPU\n# <script>")


def test_serve_mistakes_exit_2_with_serves_usage_line(call):
    code, out, err = call("serve", "qwen2.5-7b", "--device", "no-such-device")
    assert code == 2 and out == ""
    assert err.startswith("usage: rooflinec serve ") and "--device: no device 'no-such-device'" in err


@pytest.mark.slow
def test_catalog_inputs_are_named_inside_the_package():
    """A report names a catalog file as the package does, never where it is installed."""
    from rooflinec.cli import report
    from rooflinec.spec import load as spec
    rep = report.build(spec.load_study(str(ROOT / "specs" / "qwen.yaml")))
    assert [i["file"] for i in rep["inputs"]] == [
        "qwen.yaml", "catalog/models/qwen2.5-7b.yaml", "catalog/hardware/rtx4090.yaml",
        "catalog/hardware/a100-40gb.yaml"]
