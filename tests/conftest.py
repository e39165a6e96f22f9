"""Test-wide settings. Timings are the benchmark's business (bench/bench.py), never a test's:
hypothesis gets no per-example deadline, which would make the suite timed and flaky on a busy
machine."""

from hypothesis import settings

settings.register_profile("rooflinec", deadline=None)
settings.load_profile("rooflinec")
