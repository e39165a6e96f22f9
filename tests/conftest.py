"""Test-wide settings and the fixtures many test files share. Timings are the benchmark's
business (bench/bench.py), never a test's: hypothesis gets no per-example deadline, which
would make the suite timed and flaky on a busy machine, and draws its examples from a fixed seed
(derandomize), so a run is the same run on every machine; fuzzing wider is `tests/hostile.py`'s
and `tests/fuzz_inputs.py`'s job."""

import io
import shutil
from pathlib import Path

import pytest
from hypothesis import settings

from rooflinec.cli import app as cli, progress
from rooflinec.spec import catalog

settings.register_profile("rooflinec", deadline=None, derandomize=True)
settings.load_profile("rooflinec")

ROOT = Path(__file__).resolve().parents[1]
CATALOG = Path(catalog.ROOT)   # the shipped models/ and hardware/


@pytest.fixture(autouse=True)
def _progress_never(monkeypatch):
    """Whether a build passes its one-second progress delay depends on how busy the machine is:
    in-process builds print no progress unless a test sets its own delay (test_quick does)."""
    monkeypatch.setattr(cli, "Progress", lambda stream: progress.Progress(stream, after_s=float("inf")))


def _call(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.run([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="session")
def call():
    """The command line in-process: call("build", spec, "--out", folder) -> (status, stdout, stderr).
    Stateless, so one for the session (hypothesis tests may take it)."""
    return _call


@pytest.fixture
def catalog_tree(tmp_path) -> Path:
    """tmp_path holding copies of the catalog's models/ and hardware/, for a test to edit or to
    write a study beside."""
    for folder in ("models", "hardware"):
        shutil.copytree(CATALOG / folder, tmp_path / folder)
    return tmp_path


@pytest.fixture
def specs_copy(tmp_path) -> Path:
    """A private copy of specs/ alone, the studies a test may edit: their names resolve in the
    installed catalog, and a device or model a test writes beside them wins."""
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    return tmp_path / "specs"


@pytest.fixture
def specs_tree(specs_copy) -> Path:
    """A private copy of specs/ with the catalog's models/ and hardware/ beside the studies
    (files beside a study win), so a test may edit a study, a device or a model."""
    tmp_path = specs_copy.parent
    for folder in ("models", "hardware"):
        shutil.copytree(CATALOG / folder, tmp_path / "specs" / folder, dirs_exist_ok=True)
    return tmp_path / "specs"
