"""The command's standard streams. A reader that went away (`| head`, a closed standard
output) ends the command quietly with the status a shell gives a process killed by SIGPIPE; any
other write error (a full disk) is one line on standard error and status 1. Never a traceback."""

from __future__ import annotations

import errno
import os
import sys

SIGPIPE_STATUS = 128 + 13   # 13: SIGPIPE, as a shell reports a process it killed
_GONE = (errno.EPIPE, errno.EBADF)   # a reader that went away, a standard output that is closed


class OutputFailed(Exception):
    def __init__(self, error: OSError | None):
        self.error = error   # None: there was no standard output at all


class _Guarded:
    """A text stream whose write errors become OutputFailed (stdout) or are dropped (stderr)."""

    def __init__(self, stream, raising: bool):
        self._stream, self._raising = stream, raising

    def write(self, text: str) -> int:
        return self._call("write", text)

    def flush(self) -> None:
        self._call("flush")

    def _call(self, name: str, *args):
        if self._stream is None:
            if self._raising:
                raise OutputFailed(None)
            return 0
        try:
            return getattr(self._stream, name)(*args)
        except OSError as exc:
            if self._raising:
                raise OutputFailed(exc) from None
            return 0   # standard error is where failures are told; there is nowhere else


def process_streams():
    """The process's standard output and error (None where closed). A closed fd 0, 1 or 2
    gets /dev/null, so that no file this process opens takes its number and receives what
    was meant for the terminal."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    return sys.stdout, sys.stderr


def guarded(command, stdout, stderr) -> int:
    """`command(stdout, stderr) -> status`, run with streams whose failures end it as described
    above; a stream that is None is closed."""
    out, err = _Guarded(stdout, raising=True), _Guarded(stderr, raising=False)
    try:
        status = command(out, err)
        out.flush()
    except OutputFailed as exc:
        if exc.error is None or exc.error.errno in _GONE:
            status = SIGPIPE_STATUS
        else:
            err.write(f"rooflinec: cannot write to standard output: {exc.error.strerror or exc.error}\n")
            status = 1
    err.flush()
    return status
