"""Writing reports: all of them or none, never a half-written or stale-looking set."""

from __future__ import annotations

import errno
import os
import tempfile


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_all(outputs: dict[str, str]) -> None:
    """Write every file to a temporary name first; rename into place only when all are written.

    If a rename fails, the files already renamed are put back as they were (the old file
    restored, a new one removed) and folders it made are removed, so a failed build leaves
    the output folder as it found it.
    """
    for target in outputs:
        if os.path.isdir(target):
            raise IsADirectoryError(errno.EISDIR, "a folder is where a report goes", target)
    staged, done, made = [], [], []
    try:
        for target, text in outputs.items():
            made += _makedirs(os.path.dirname(target) or ".")
            fd, tmp = tempfile.mkstemp(prefix=".rooflinec-", dir=os.path.dirname(target) or ".")
            staged.append((tmp, target))
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
            os.chmod(tmp, 0o666 & ~_umask())   # mkstemp makes 0600; reports are for sharing
        for tmp, target in staged:
            done.append((target, _set_aside(target)))
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _undo(done, made)
        raise
    for _, old in done:
        if old:
            os.unlink(old)


def _makedirs(folder: str) -> list[str]:
    """Make `folder` and its missing parents; return the ones made, innermost first."""
    missing = []
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for d in reversed(missing):
        os.mkdir(d)
    return missing


def _set_aside(target: str) -> str | None:
    """Move an existing `target` to a temporary name beside it, to restore on failure."""
    if not os.path.exists(target):
        return None
    fd, old = tempfile.mkstemp(prefix=".rooflinec-old-", dir=os.path.dirname(target) or ".")
    os.close(fd)
    try:
        os.replace(target, old)
    except BaseException:
        os.unlink(old)
        raise
    return old


def _undo(done: list, made: list) -> None:
    for target, old in reversed(done):
        if old:
            os.replace(old, target)
        elif os.path.exists(target):
            os.unlink(target)
    for folder in sorted(made, key=len, reverse=True):   # innermost first; only empty ones
        try:
            os.rmdir(folder)
        except OSError:
            pass
