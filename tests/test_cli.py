"""The CLI, in-process: exact exit codes and output, no subprocess."""

import os
import shutil
from pathlib import Path

import pytest

from rooflinec.spec import catalog

CATALOG = Path(catalog.ROOT)


@pytest.fixture
def tree(specs_copy):
    return specs_copy


@pytest.mark.slow
def test_build_writes_md_and_json(call, tmp_path):
    code, out, err = call("build", "specs/qwen.yaml", "--out", str(tmp_path), "--format", "md,json")
    assert code == 0, err
    # qwen/: the charts; the manifest: which files this study's build wrote
    assert sorted(os.listdir(tmp_path)) == [".rooflinec.manifest.json", "qwen", "qwen.json", "qwen.md"]
    assert f"wrote {tmp_path / 'qwen.md'}" in out


@pytest.mark.slow
def test_check_reports_ok(call):
    assert call("check", "specs/qwen.yaml") == (0, "specs/qwen.yaml: ok\n", "")


def test_explain_prints_the_derivation(call):
    code, out, _ = call("explain", "specs/qwen.yaml", "k_proj")
    assert code == 0
    assert "k_proj in Qwen2.5-7B-Instruct" in out
    assert "compute-bound from M = 259" in out      # exact crossing on the RTX 4090


def test_explain_unknown_op_lists_the_ops(call):
    code, _, err = call("explain", "specs/qwen.yaml", "qproj")
    assert code == 2 and "no op 'qproj'" in err and "q_proj" in err
    assert err.startswith("usage: rooflinec explain ")     # a command-line mistake: exit 2, usage


def test_explain_works_where_the_first_device_has_no_sram(call):
    """PaLM's TPU gives no SRAM figure: FlashAttention cannot be tiled there, but q_proj, an
    op of the naive program, needs no tiles."""
    code, out, err = call("explain", "specs/palm.yaml", "q_proj")
    assert code == 0, err
    assert "q_proj in PaLM 540B" in out


def test_explain_without_a_model_says_so(call):
    code, _, err = call("explain", "specs/accelerators.yaml", "q_proj")
    assert code == 1 and "explain needs a study with a model" in err


@pytest.mark.slow
def test_two_specs_with_one_file_name_are_refused(call, tree, tmp_path):
    other = tmp_path / "elsewhere"
    shutil.copytree(tree, other)
    out = tmp_path / "out"
    code, _, err = call("build", str(tree / "qwen.yaml"), str(other / "qwen.yaml"), "--out", str(out))
    assert code == 1 and "would overwrite" in err and "qwen.md" in err
    assert not out.exists()


def test_usage_errors_exit_2(call):
    assert call()[0] == 2
    assert call("frobnicate")[0] == 2
    code, _, err = call("build", "specs/qwen.yaml", "--format", "pdf")
    assert code == 2 and "unknown format pdf" in err


def test_help_teaches(call):
    code, out, _ = call("--help")
    assert code == 0 and "rooflinec build specs/qwen.yaml" in out and "exit status" in out


@pytest.mark.slow
def test_spec_error_is_located_and_writes_nothing(call, tree, tmp_path):
    study = tree / "qwen.yaml"
    study.write_text(study.read_text().replace("dtype: bf16", "dtype: bf17"))
    out_dir = tmp_path / "out"
    code, _, err = call("build", str(study), "--out", str(out_dir))
    assert code == 1
    assert f"{study}:6:8: dtype: \"bf17\" is not accepted; did you mean 'bf16'?" in err
    assert "Traceback" not in err
    assert not out_dir.exists()


def test_unknown_device_lists_known_ones(call, tree):
    study = tree / "qwen.yaml"
    study.write_text(study.read_text().replace("[rtx4090, a100-40gb]", "[rtx4090, a100-40g]"))
    code, _, err = call("check", str(study))
    assert code == 1
    assert "devices[1]: no spec 'a100-40g'" in err and "did you mean 'a100-40gb'?" in err
    assert "rtx4090" in err


@pytest.mark.slow
def test_added_device_appears_with_no_code_change(call, tree, tmp_path):
    """The README's worked example: copy a device file, edit two numbers, list it in the study."""
    mine = (CATALOG / "hardware" / "rtx4090.yaml").read_text()
    mine = mine.replace("NVIDIA GeForce RTX 4090", "My GPU").replace("1008 GB/s", "2000 GB/s")
    mine = mine.replace("bf16: 165.2 TFLOP/s", "bf16: 400 TFLOP/s")
    (tree / "hardware").mkdir()
    (tree / "hardware" / "my-gpu.yaml").write_text(mine)
    study = tree / "qwen.yaml"
    study.write_text(study.read_text().replace("[rtx4090, a100-40gb]", "[rtx4090, a100-40gb, my-gpu]"))
    code, _, err = call("build", str(study), "--out", str(tmp_path / "out"), "--format", "md")
    assert code == 0, err
    md = (tmp_path / "out" / "qwen.md").read_text()
    assert "My GPU (`my-gpu`)" in md
    assert "my-gpu (ridge 200.0)" in md             # 400e12 / 2000e9


@pytest.mark.slow
def test_spec_notes_appear_in_the_report(call, tree, tmp_path):
    """A file beside the study shadows the catalog's entry of the same name."""
    (tree / "hardware").mkdir()
    hw = tree / "hardware" / "rtx4090.yaml"
    hw.write_text((CATALOG / "hardware" / "rtx4090.yaml").read_text() + "notes: boost clock assumed\n")
    code, _, err = call("build", str(tree / "qwen.yaml"), "--out", str(tmp_path), "--format", "md,html")
    assert code == 0, err
    assert "boost clock assumed" in (tmp_path / "qwen.md").read_text()
    assert "boost clock assumed" in (tmp_path / "qwen.html").read_text()
