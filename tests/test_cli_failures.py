"""Bad input at the command line: every problem located, exit 1, and nothing written.

from __future__ import annotations
A failed build leaves an existing reports folder byte for byte as it was and no temporary
files behind, whether the failure is in a spec (found before anything is written) or in
writing itself (files already renamed are put back).
"""


import os
import re
import shutil
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
LOCATED = re.compile(r"^.+:\d+:\d+: .+: .+$")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (temporary ones included) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def tree(specs_tree):
    return specs_tree


@pytest.fixture
def reports(tmp_path) -> Path:
    """A copy of the committed reports: the "existing reports/ folder" a build must not touch."""
    shutil.copytree(ROOT / "reports", tmp_path / "reports")
    return tmp_path / "reports"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


@pytest.mark.slow
def test_five_mistakes_five_located_messages_reports_untouched(call, tree, reports):
    edit(tree / "qwen.yaml", "dtype: bf16", "dtype: bf17")                                 # 1
    edit(tree / "qwen.yaml", "title:", "titel:")                                           # 2
    edit(tree / "models" / "qwen2.5-7b.yaml", "n_layers: 28", "n_layers: 0")               # 3
    edit(tree / "models" / "qwen2.5-7b.yaml", "vocab: 152064", "vocab: -152064")          # 4
    edit(tree / "hardware" / "rtx4090.yaml", "1008 GB/s", "1008 GB")                        # 5
    before = snapshot(reports)
    code, out, err = call("build", tree / "qwen.yaml", "--out", reports)
    lines = err.splitlines()
    assert code == 1 and out == ""
    assert len(lines) == 5, err
    assert all(LOCATED.match(line) for line in lines), err
    model, device = tree / "models" / "qwen2.5-7b.yaml", tree / "hardware" / "rtx4090.yaml"
    for fragment in (f"{tree / 'qwen.yaml'}:3:1: titel: unknown key 'titel'; did you mean 'title'?",
                     f"{tree / 'qwen.yaml'}:6:8: dtype: \"bf17\" is not accepted; did you mean 'bf16'?",
                     f"{model}:3:11: n_layers: must be >= 1",
                     f"{model}:4:8: vocab: must be >= 1",
                     f"{device}:"):
        assert fragment in err, err
    assert "memory.bandwidth" in err and "Traceback" not in err
    assert snapshot(reports) == before


@pytest.mark.slow
def test_second_study_failing_writes_nothing_for_the_first(call, tree, reports):
    edit(tree / "gpt2-medium.yaml", "dtype: bf16", "dtype: bf17")
    before = snapshot(reports)
    code, out, err = call("build", "-q", tree / "qwen.yaml", tree / "gpt2-medium.yaml", "--out", reports)
    assert code == 1 and out == ""
    assert err.startswith(f"{tree / 'gpt2-medium.yaml'}:") and len(err.splitlines()) == 1, err
    assert snapshot(reports) == before


@pytest.mark.slow
def test_failed_write_puts_back_what_it_renamed(call, tree, reports, monkeypatch):
    """The third rename fails: the two reports already renamed are restored, and no
    temporary file (new or set aside) is left."""
    before = snapshot(reports)
    real, calls = os.replace, []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 5:    # 1st target set aside, renamed; 2nd set aside, renamed; 3rd ...
            raise PermissionError(13, "Permission denied", str(dst))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    code, out, err = call("build", tree / "qwen.yaml", "--out", reports, "--format", "md,json")
    monkeypatch.undo()
    assert code == 1 and out == "" and "cannot write the reports: Permission denied" in err
    assert "Traceback" not in err
    assert snapshot(reports) == before


def test_failed_build_into_a_new_folder_leaves_no_folder(call, tree, tmp_path, monkeypatch):
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (_ for _ in ()).throw(OSError(28, "No space left on device", dst)))
    out_dir = tmp_path / "new" / "reports"
    code, _, err = call("build", tree / "qwen.yaml", "--out", out_dir, "--format", "md,json")
    monkeypatch.setattr(os, "replace", real)
    assert code == 1 and "No space left on device" in err
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_a_folder_where_a_report_goes(call, tree, reports):
    shutil.rmtree(reports / "qwen")
    (reports / "qwen.json").unlink()
    (reports / "qwen.json").mkdir()
    before = snapshot(reports)
    code, _, err = call("build", "-q", tree / "qwen.yaml", "--out", reports)
    assert code == 1 and err == f"{reports / 'qwen.json'}: cannot write the reports: a folder is where a report goes\n"
    assert snapshot(reports) == before and not (reports / "qwen").exists()


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi"))


@pytest.mark.slow
@pytest.mark.parametrize("where, text, fragment", [
    ("qwen.yaml", BILLION_LAUGHS, "expands to more than 100000 nodes"),
    ("hardware/rtx4090.yaml", "name: !!python/object/apply:os.system [echo pwned]\n",
     "tag '!!python/object/apply:os.system' is not accepted"),
    ("models/qwen2.5-7b.yaml", "name: !!python/object:builtins.dict {}\n",
     "tag '!!python/object:builtins.dict' is not accepted"),
])
def test_hostile_yaml_is_refused_through_the_cli(call, tree, reports, where, text, fragment):
    (tree / where).write_text(text)
    before = snapshot(reports)
    code, out, err = call("build", tree / "qwen.yaml", "--out", reports)
    assert code == 1 and out == "" and "Traceback" not in err
    assert fragment in err and all(LOCATED.match(line) for line in err.splitlines()), err
    assert str(tree / where) in err
    assert snapshot(reports) == before
