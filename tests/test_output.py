"""The output side: standard streams that fail, two builds into one folder, a build killed while
it installs its reports, an unusable --out, and reports a rebuild no longer writes."""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rooflinec.cli import output, streams
from rooflinec.cli.app import run
from test_cli_failures import snapshot   # a folder's files and bytes

ROOT = Path(__file__).resolve().parent.parent
ROOFLINEC = [sys.executable, "-m", "rooflinec"]
TINY = """title: Two devices
devices: [rtx4090, a100-40gb]
dtype: bf16
analyses:
  accelerators: {dtypes: [bf16]}
"""


@pytest.fixture
def tree(specs_copy) -> Path:
    (specs_copy / "tiny.yaml").write_text(TINY)
    return specs_copy


# --- standard streams ------------------------------------------------------------------

class Failing(io.StringIO):
    """A standard output whose writes fail with `err`, at the write or at the flush."""

    def __init__(self, err: int):
        super().__init__()
        self.err = err

    def flush(self):
        raise OSError(self.err, os.strerror(self.err))

    def write(self, text):
        raise OSError(self.err, os.strerror(self.err))


COMMANDS = [("build", "-q", "{tree}/tiny.yaml", "--out", "{tmp}/out", "--format", "json"),
            ("check", "{tree}/tiny.yaml"), ("explain", "{tree}/qwen.yaml", "k_proj"), ("--help",)]


def argv(command, tree, tmp):
    return [a.format(tree=tree, tmp=tmp) for a in command]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("stdout, status, message", [
    (Failing(errno.EPIPE), streams.SIGPIPE_STATUS, ""),          # the reader went away
    (None, streams.SIGPIPE_STATUS, ""),                          # standard output closed
    (Failing(errno.ENOSPC), 1, "rooflinec: cannot write to standard output: No space left on device\n"),
], ids=["broken-pipe", "closed", "full-disk"])
def test_standard_output_failing(command, stdout, status, message, tree, tmp_path):
    err = io.StringIO()
    code = streams.guarded(lambda o, e: run(argv(command, tree, tmp_path), o, e), stdout, err)
    assert (code, err.getvalue()) == (status, message)


def shell(command: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, **kwargs)


@pytest.mark.slow
def test_build_piped_into_head_prints_one_line(tmp_path):
    done = shell(f"{' '.join(ROOFLINEC)} build -q specs/qwen.yaml --out {tmp_path} --format json "
                 "| head -n 1; echo \"status ${PIPESTATUS[0]}\" >&2")
    assert done.stdout == f"wrote {tmp_path}/qwen.json\n"
    assert "Traceback" not in done.stderr and done.stderr.startswith("status ")


@pytest.mark.slow
@pytest.mark.parametrize("redirect, status, message", [
    (">/dev/full", 1, "rooflinec: cannot write to standard output: No space left on device\n"),
    (">&-", streams.SIGPIPE_STATUS, ""),
])
def test_check_into_a_full_or_closed_standard_output(redirect, status, message):
    done = shell(f"{' '.join(ROOFLINEC)} check specs/qwen.yaml {redirect}")
    assert (done.returncode, done.stderr) == (status, message)


@pytest.mark.slow
@pytest.mark.parametrize("command", [["--help"], ["build", "-q", "{tree}/tiny.yaml", "--out", "{tmp}/o", "--format", "json"]],
                         ids=["help", "build"])
def test_into_a_pipe_nobody_reads(command, tree, tmp_path):
    read, write = os.pipe()
    os.close(read)   # every write gets EPIPE, deterministically
    try:
        done = subprocess.run([*ROOFLINEC, *argv(command, tree, tmp_path)], stdout=write,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (streams.SIGPIPE_STATUS, "")


# --- one build at a time ---------------------------------------------------------------

@pytest.fixture
def held(tmp_path):
    """The output folder's lock, held as another build would hold it, and its release."""
    out = tmp_path / "out"
    out.mkdir()
    fds = [os.open(out / output.LOCK, os.O_RDWR | os.O_CREAT)]
    fcntl.flock(fds[0], fcntl.LOCK_EX)

    def release():   # as `locked` releases: the lock file goes, then the lock
        if fds:
            os.unlink(out / output.LOCK)
            os.close(fds.pop())

    yield out, release
    release()


@pytest.mark.slow
def test_a_second_build_waits_then_refuses(call, tree, held, monkeypatch):
    out, _ = held
    monkeypatch.setattr(output, "LOCK_WAIT_S", 0.3)
    code, stdout, err = call("build", tree / "tiny.yaml", "--out", out, "--format", "json")
    lock = out / output.LOCK
    assert code == 1 and stdout == ""
    assert err == (f"{lock}: another rooflinec build is writing {out}; waiting up to 0.3 s\n"
                   f"{lock}: another rooflinec build is still writing {out} after 0.3 s; try again "
                   "when it has finished\n")
    assert os.listdir(out) == [output.LOCK]


@pytest.mark.slow
def test_a_second_build_waits_for_the_first_to_finish(call, tree, held, monkeypatch):
    out, release = held
    monkeypatch.setattr(output, "LOCK_WAIT_S", 30)
    (out / "tiny.json").write_text("the first build's")
    timer = threading.Timer(0.5, release)
    timer.start()
    code, _, err = call("build", tree / "tiny.yaml", "--out", out, "--format", "json")
    timer.join()
    assert code == 0, err
    assert "waiting up to 30 s" in err
    assert (out / "tiny.json").read_text().startswith("{")
    assert sorted(os.listdir(out)) == [output.MANIFEST, "tiny.json"]


# --- a build killed while it installs --------------------------------------------------

KILLER = """
import os, signal, sys
from rooflinec.cli import app as cli
k, out = int(sys.argv[1]), os.path.realpath(sys.argv[2])
real, seen = os.replace, []
def replace(src, dst):
    if os.path.realpath(os.path.dirname(dst)).startswith(out):
        seen.append(dst)
        if len(seen) == k:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
os.replace = replace
sys.exit(cli.run(sys.argv[3:], open(os.devnull, "w"), open(os.devnull, "w")))
"""


def killed_build(k: int, out: Path, *argv) -> int:
    """A build that SIGKILLs itself at its k-th rename into `out`; its exit status."""
    done = subprocess.run([sys.executable, "-c", KILLER, str(k), str(out), *map(str, argv)],
                          cwd=ROOT, timeout=120, capture_output=True, text=True)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode


def staged_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".rooflinec-*"))


@pytest.mark.slow
def test_a_build_killed_at_every_rename_is_completed_or_undone(call, tree, tmp_path):
    """The old set is tiny.md + tiny.json + tiny/'s chart; the new set is tiny.json alone, from an edited
    spec. Killed at each rename in turn, then recovered: the folder holds one set or the
    other, byte for byte, with its own manifest and nothing staged."""
    spec, out, ref = tree / "tiny.yaml", tmp_path / "out", tmp_path / "ref"
    assert call("build", spec, "--out", ref, "--format", "md,json")[0] == 0
    old = snapshot(ref)
    spec.write_text(TINY.replace("Two devices", "Two devices, again"))
    new_ref = tmp_path / "new"
    shutil.copytree(ref, new_ref)
    assert call("build", spec, "--out", new_ref, "--format", "json")[0] == 0
    new = snapshot(new_ref)
    assert set(new) == {".rooflinec.manifest.json", "tiny.json"} and new != old
    outcomes = []
    for k in range(1, 20):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(ref, out)
        status = killed_build(k, out, "build", spec, "--out", out, "--format", "json")
        if status == 0:   # it got past its last rename
            break
        assert status == -signal.SIGKILL
        said = []
        output.recover(str(out), said.append)
        after = snapshot(out)
        assert after in (old, new), (k, sorted(after))
        assert staged_files(out) == [] and said, k
        outcomes.append("new" if after == new else "old")
    assert snapshot(out) == new
    # the probe, the journal, three set-asides (md, json, the md's chart), one install, the
    # manifest: 7 renames
    assert len(outcomes) == 7 and outcomes[0] == "old" and outcomes[-1] == "new", outcomes


@pytest.mark.slow
def test_the_next_build_completes_an_interrupted_one_and_says_so(call, tree, tmp_path):
    spec, out = tree / "tiny.yaml", tmp_path / "out"
    assert call("build", spec, "--out", out, "--format", "md,json")[0] == 0
    spec.write_text(TINY.replace("Two devices", "Two devices, again"))
    # killed at its 4th rename, tiny.md's: the probe, the journal, tiny.md set aside, ...
    assert killed_build(4, out, "build", spec, "--out", out, "--format", "md,json") == -signal.SIGKILL
    assert staged_files(out) != []
    code, _, err = call("build", spec, "--out", out, "--format", "md,json")
    assert code == 0
    assert f"{out}: a build was interrupted while installing its reports; completed its 3 files" in err   # md, json, the chart
    assert staged_files(out) == [] and sorted(os.listdir(out)) == [output.MANIFEST, "tiny", "tiny.json", "tiny.md"]
    assert "Two devices, again" in (out / "tiny.md").read_text()


def test_a_rollback_cut_short_is_finished_backwards(tmp_path):
    """A rename failed, the build began putting files back and was killed: its journal says
    "back", so the next build restores the old files rather than installing the new ones."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "s.md").write_text("new")                       # renamed in, not yet put back
    (out / ".rooflinec-old-t-0").write_text("old")         # the old s.md, set aside
    (out / ".rooflinec-new-t-1").write_text("new json")    # staged, never renamed in
    (out / "s.json").write_text("old json")
    entries = [{"target": "s.md", "staged": ".rooflinec-new-t-0", "old": ".rooflinec-old-t-0",
                "had_old": True},
               {"target": "s.json", "staged": ".rooflinec-new-t-1", "old": ".rooflinec-old-t-1",
                "had_old": True}]
    (out / output.JOURNAL).write_text(json.dumps({"entries": entries, "direction": "back",
                                                  "manifest": {"s": ["s.json", "s.md"]}}))
    said = []
    output.recover(str(out), said.append)
    assert snapshot(out) == {"s.json": b"old json", "s.md": b"old"}
    assert said == [f"{out}: a build was interrupted while installing its reports; rolled back its 2 files"]


def test_staged_files_of_a_build_that_died_earlier_are_removed(call, tree, tmp_path):
    """Temporary files as earlier versions left them (.rooflinec-<random>), in the folder and
    in a chart folder."""
    out = tmp_path / "out"
    assert call("build", tree / "tiny.yaml", "--out", out, "--format", "json")[0] == 0
    (out / "tiny").mkdir()
    for name in ("tiny/.rooflinec-old-k2j4", ".rooflinec-x8a_1q", ".rooflinec-old-abc"):
        (out / name).write_text("half a report")
    code, _, err = call("build", tree / "tiny.yaml", "--out", out, "--format", "json")
    assert code == 0 and f"{out}: removed 3 staged files an interrupted build left" in err
    assert staged_files(out) == []


# --- an unusable --out -----------------------------------------------------------------

def test_an_unusable_out_fails_before_any_analysis(call, tree, tmp_path, monkeypatch):
    from rooflinec.cli import report
    ran = []
    monkeypatch.setattr(report, "build", lambda *a, **k: ran.append(a))

    def refused(src, dst):   # a place that takes the staged file but not the rename
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), src)

    monkeypatch.setattr(os, "replace", refused)
    code, _, err = call("build", tree / "qwen.yaml", "--out", tmp_path / "out")
    assert code == 1 and err == f"{tmp_path / 'out'}: cannot write the reports: Invalid cross-device link\n"
    assert ran == [] and not (tmp_path / "out").exists()


def test_a_file_as_out_fails_before_any_analysis(call, tree, tmp_path, monkeypatch):
    from rooflinec.cli import report
    monkeypatch.setattr(report, "build", lambda *a, **k: pytest.fail("an analysis ran"))
    (tmp_path / "file").write_text("")
    code, _, err = call("build", tree / "qwen.yaml", "--out", tmp_path / "file" / "reports")
    assert code == 1 and err.startswith(f"{tmp_path / 'file' / 'reports'}: cannot write the reports: ")


# --- a build owns the files it writes for a study ---------------------------------------

QWEN_GEMM = """title: Qwen, one section
model: qwen2.5-7b
devices: [rtx4090, a100-40gb]
dtype: bf16
analyses:
  gemm_intensity: {tokens: [1, 4096]}
"""


@pytest.mark.slow
def test_a_rebuild_removes_what_it_no_longer_writes(call, tree, tmp_path):
    spec, out = tree / "g.yaml", tmp_path / "out"
    spec.write_text(QWEN_GEMM)
    assert call("build", spec, "--out", out, "--format", "md,html,json")[0] == 0
    (out / "mine.txt").write_text("not a report")
    charts = sorted(os.listdir(out / "g"))
    assert "roofline-gemm-intensity-a100-40gb.svg" in charts
    spec.write_text(QWEN_GEMM.replace("[rtx4090, a100-40gb]", "[rtx4090]"))
    code, stdout, err = call("build", spec, "--out", out, "--format", "md")
    assert code == 0, err
    assert sorted(os.listdir(out)) == [output.MANIFEST, "g", "g.md", "mine.txt"]
    assert sorted(os.listdir(out / "g")) == [c for c in charts if "a100" not in c]
    md = (out / "g.md").read_text()
    assert "`catalog/hardware/rtx4090.yaml`" in md and "a100" not in md
    # with no chart format left, the chart folder goes too
    assert call("build", spec, "--out", out, "--format", "json")[0] == 0
    assert sorted(os.listdir(out)) == [output.MANIFEST, "g.json", "mine.txt"]


def test_a_manifest_cannot_remove_files_a_study_does_not_write(call, tree, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("keep.md", "tinyish.md", "other.json"):
        (out / name).write_text("someone else's")
    (tmp_path / "outside.md").write_text("outside")
    (out / output.MANIFEST).write_text(
        '{"format": "rooflinec-outputs", "studies": {"tiny": ["../outside.md", "keep.md", '
        '"tinyish.md", "/etc/hostname", "tiny/../other.json", "tiny.md"]}}')
    (out / "tiny.md").write_text("stale")
    assert call("build", tree / "tiny.yaml", "--out", out, "--format", "json")[0] == 0
    assert sorted(os.listdir(out)) == [output.MANIFEST, "keep.md", "other.json", "tiny.json", "tinyish.md"]
    assert (tmp_path / "outside.md").exists()
