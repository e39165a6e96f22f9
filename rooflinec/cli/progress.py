"""Progress on standard error for builds that take a while: which section was evaluated,
which section's charts were drawn. Silent for the first second, so quick builds say nothing."""

from __future__ import annotations

import time


class Progress:
    """Progress lines on standard error, only once a build has run for about a second."""

    def __init__(self, stream, after_s: float = 1.0):
        self._stream, self._clock = stream, time.monotonic
        self._start, self._after = self._clock(), after_s

    def __call__(self, message: str) -> None:
        if self._clock() - self._start >= self._after:
            self._stream.write(message + "\n")
            self._stream.flush()


def drawn(svgs, path: str, progress):
    """`svgs`, after saying that they were drawn for `path`."""
    if progress is not None and svgs:
        progress(f"{path}: drew {len(svgs)} chart{'s' if len(svgs) != 1 else ''}")
    return svgs
