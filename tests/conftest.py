"""Test-wide settings. Timings are the benchmark's business (bench/bench.py), never a test's:
hypothesis gets no per-example deadline, which would make the suite timed and flaky on a busy
machine."""

import pytest
from hypothesis import settings

settings.register_profile("rooflinec", deadline=None)
settings.load_profile("rooflinec")


@pytest.fixture(autouse=True)
def _progress_never(monkeypatch):
    """Whether a build passes its one-second progress delay depends on how busy the machine is:
    in-process builds print no progress unless a test sets its own delay (test_quick does)."""
    from rooflinec.cli import app as cli, progress
    monkeypatch.setattr(cli, "Progress", lambda stream: progress.Progress(stream, after_s=float("inf")))
