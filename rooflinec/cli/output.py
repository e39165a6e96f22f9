"""Writing reports into an output folder: one build at a time, all files or none, and a crash
at any moment completed by the next build.

The folder holds, beside the reports:
- `.rooflinec.lock` while a build writes (an flock; a second build waits for it);
- `.rooflinec.manifest.json`, the files each study's last build wrote: a rebuild removes the
  ones it no longer writes, so a folder never mixes two builds' files for one study;
- `.rooflinec.journal.json` only while a set is being installed: what goes where, so a build
  killed mid-install is completed by the next one;
- `.rooflinec-*` files only while staged (new text, or an old file set aside).

A set is staged in full, then the journal is written (the commit point), then every file is
renamed into place. A rename that fails puts everything back; a crash after the commit point is
rolled forward by `recover`, and staged files of a build that died before it are removed.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import time
from contextlib import contextmanager

from rooflinec.base.errors import RooflineError, UsageError

try:
    import fcntl
except ImportError:   # no flock (Windows): builds into one folder are not serialised there
    fcntl = None

LOCK = ".rooflinec.lock"
MANIFEST = ".rooflinec.manifest.json"
JOURNAL = ".rooflinec.journal.json"
STAGED = ".rooflinec-"        # prefix of every staged, set-aside or temporary file
LOCK_WAIT_S = 60.0            # how long a build waits for another one writing the same folder
MANIFEST_FORMAT = "rooflinec-outputs"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fail(path: str, exc: OSError) -> RooflineError:
    return RooflineError(f"{exc.filename or path}: cannot write the reports: {exc.strerror or exc}")


def probe(out: str, say=None) -> None:
    """Fail now, before any analysis runs, if reports cannot be staged and renamed in `out`
    (a folder made for the probe is removed again)."""
    made: list[str] = []
    try:
        with locked(out, say, made):
            fd, tmp = _mkstemp(out, "tmp-")
            os.close(fd)
            try:
                os.replace(tmp, tmp + "-renamed")
                tmp += "-renamed"
            finally:
                _unlink(tmp)
    except OSError as exc:
        raise RooflineError(f"{out}: cannot write the reports: {exc.strerror or exc}") from None
    finally:
        _remove_empty(made)


def _mkstemp(folder: str, kind: str) -> tuple[int, str]:
    path = os.path.join(folder, f"{STAGED}{kind}{secrets.token_hex(6)}")
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600), path


# ---------------------------------------------------------------- the lock

@contextmanager
def locked(out: str, say=None, made: list | None = None, wait_s: float | None = None):
    """Hold `out`'s lock, making the folder if missing (the folders made are added to `made`).

    A build that finds the lock held says so and waits up to `wait_s`, then refuses. The lock
    file is removed on release; a waiter that then holds a removed file tries again."""
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    path, deadline = os.path.join(out, LOCK), None
    made = [] if made is None else made
    while True:
        made += _makedirs(out)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666 & ~_umask())
        try:
            if fcntl:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if deadline is None:
                deadline = time.monotonic() + wait_s
                if say:
                    say(f"{path}: another rooflinec build is writing {out}; waiting up to {wait_s:g} s")
            if time.monotonic() >= deadline:
                raise RooflineError(f"{path}: another rooflinec build is still writing {out} after "
                                    f"{wait_s:g} s; try again when it has finished") from None
            time.sleep(0.05)
            continue
        if _same_file(fd, path):
            break
        os.close(fd)
    try:
        yield
    finally:
        _unlink(path)
        os.close(fd)


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _makedirs(folder: str) -> list[str]:
    """Make `folder` and its missing parents; return the ones made, innermost first."""
    missing = []
    while folder and not os.path.isdir(folder):
        if os.path.lexists(folder):
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", folder)
        missing.append(folder)
        folder = os.path.dirname(folder)
    for d in reversed(missing):
        os.mkdir(d)
    return missing


def _remove_empty(folders) -> None:
    for folder in sorted(set(folders), key=len, reverse=True):   # innermost first
        try:
            os.rmdir(folder)
        except OSError:
            pass


# ---------------------------------------------------------------- writing a set

def write_reports(out: str, studies: dict[str, dict[str, str]], say=None) -> list[str]:
    """Install every study's files ({stem: {path under out: text}}) in `out`; return their paths.

    Files an earlier build wrote for one of these studies, and this one does not, are removed."""
    for files in studies.values():
        for rel in files:
            if os.path.isdir(_at(out, rel)):
                raise RooflineError(f"{_at(out, rel)}: cannot write the reports: a folder is where a "
                                    "report goes")
    made: list[str] = []
    try:
        with locked(out, say, made):
            _recover(out, say)
            _install(out, studies, _read_manifest(out, say))
    except BaseException as exc:
        _remove_empty(made)   # a failed build into a new folder leaves no folder
        if isinstance(exc, OSError):
            raise _fail(out, exc) from None
        raise
    return [_at(out, rel) for files in studies.values() for rel in files]


def _at(out: str, rel: str) -> str:
    return os.path.join(out, *rel.split("/"))


def _install(out: str, studies: dict, manifest: dict) -> None:
    token, entries, staged, made = secrets.token_hex(6), [], [], []
    new = {rel for files in studies.values() for rel in files}
    try:
        for i, (rel, text) in enumerate((r, t) for files in studies.values() for r, t in files.items()):
            folder = os.path.dirname(rel)
            made += _makedirs(_at(out, folder)) if folder else []
            entry = _entry(out, rel, f"{token}-{i}", staged=True)
            staged.append(entry["staged"])
            with open(_at(out, entry["staged"]), "x", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
            os.chmod(_at(out, entry["staged"]), 0o666 & ~_umask())   # reports are for sharing
            entries.append(entry)
        stale = sorted({rel for stem in studies for rel in manifest.get(stem, ())} - new)
        entries += [_entry(out, rel, f"{token}-s{i}", staged=False)
                    for i, rel in enumerate(stale) if os.path.lexists(_at(out, rel))]
        owned = dict(manifest, **{stem: sorted(files) for stem, files in studies.items()})
        journal = {"entries": entries, "manifest": owned, "direction": "forward"}
        _write_json(out, JOURNAL, journal)      # the commit point
    except BaseException:
        for rel in staged:
            _unlink(_at(out, rel))
        _remove_empty(made)
        raise
    try:
        for e in entries:
            if os.path.lexists(_at(out, e["target"])):
                os.replace(_at(out, e["target"]), _at(out, e["old"]))
            if e["staged"]:
                os.replace(_at(out, e["staged"]), _at(out, e["target"]))
        _finish(out, journal)
    except BaseException:
        _roll_back(out, journal)
        _remove_empty(made)
        raise


def _entry(out: str, rel: str, tag: str, staged: bool) -> dict:
    """Where `rel`'s new text is staged and its old file is set aside, beside it."""
    folder = os.path.dirname(rel)
    side = lambda kind: "/".join(filter(None, [folder, f"{STAGED}{kind}-{tag}"]))  # noqa: E731
    return {"target": rel, "staged": side("new") if staged else None, "old": side("old"),
            "had_old": os.path.lexists(_at(out, rel))}


def _finish(out: str, journal: dict) -> None:
    """After every file is in place: drop the old ones, record the new owners, close the journal."""
    for e in journal["entries"]:
        _unlink(_at(out, e["old"]))
    _remove_empty(_at(out, os.path.dirname(e["target"])) for e in journal["entries"]
                  if not e["staged"] and os.path.dirname(e["target"]))
    _write_json(out, MANIFEST, {"format": MANIFEST_FORMAT, "studies": journal["manifest"]})
    _unlink(os.path.join(out, JOURNAL))


def _roll_back(out: str, journal: dict) -> None:
    """Put every file back as it was before the journal was written."""
    try:   # a crash while rolling back must be finished backwards too
        _write_json(out, JOURNAL, dict(journal, direction="back"))
    except OSError:
        pass
    for e in reversed(journal["entries"]):
        target, old, new = (_at(out, e["target"]), _at(out, e["old"]),
                            _at(out, e["staged"]) if e["staged"] else None)
        if os.path.lexists(old):
            os.replace(old, target)
        elif not e["had_old"] and new and not os.path.lexists(new):
            _unlink(target)                     # a new file already renamed in
        if new:
            _unlink(new)
    _unlink(os.path.join(out, JOURNAL))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _write_json(out: str, name: str, data: dict) -> None:
    write_file(os.path.join(out, name), json.dumps(data, indent=1, sort_keys=True) + "\n")


# what a path that is not a regular file is, for the message that refuses to replace it
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _not_regular(path: str) -> str | None:
    """Why `path` may not be replaced by a written file, or None: only a regular file (or a
    link to one) or a path where nothing is yet may be. A rename over a FIFO or a device node
    would replace the node itself (as root, /dev/null)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a symbolic link to nothing" if os.path.islink(path) else None
    except NotADirectoryError:   # a file where a folder of the path should be: said by the caller
        return None
    except OSError as exc:
        return f"not usable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def check_file_target(path: str, flag: str = "--out") -> None:
    """A usage error, before any work, unless `path` is a regular file or a new path whose
    nearest existing folder is a folder."""
    why = _not_regular(path) if path else "empty"
    if why is None:
        parent = os.path.dirname(os.path.abspath(path))
        while not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            why = f"inside {parent}, which is not a folder"
    if why is not None:
        raise UsageError(f"{flag}: {path} is {why}; {flag} names a file to write, and only a "
                         "regular file or a new path is replaced")


def write_file(path: str, text: str) -> None:
    """One file, whole or not at all: staged beside `path`, then renamed over it (folders it
    makes for the file are removed again if the write fails); never over a special file."""
    why = _not_regular(path)
    if why is not None:   # checked again here: the path may have changed since the command began
        raise RooflineError(f"{path}: {why}; only a regular file or a new path is replaced")
    made, tmp = _makedirs(os.path.dirname(path)), None
    try:
        fd, tmp = _mkstemp(os.path.dirname(path) or ".", "tmp-")
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if tmp:
            _unlink(tmp)
        _remove_empty(made)
        raise


def write_command_file(path: str, text: str, stdout) -> int:
    """A command's one output file (a calibration, an imported spec): written whole, a write
    error one located line, `wrote PATH` on standard output."""
    try:
        write_file(path, text)
    except OSError as exc:
        raise RooflineError(f"{path}: cannot write: {exc.strerror or exc}") from None
    stdout.write(f"wrote {path}\n")
    return 0


# ---------------------------------------------------------------- after a crash

def recover(out: str, say=None) -> None:
    """Finish what a build killed while writing `out` left, if anything (takes the lock)."""
    if not os.path.isdir(out):
        return
    try:
        with locked(out, say):
            _recover(out, say)
    except OSError as exc:
        raise _fail(out, exc) from None


def _recover(out: str, say) -> None:
    journal_path = os.path.join(out, JOURNAL)
    if os.path.lexists(journal_path):
        journal = _read_journal(out, journal_path)
        if journal["direction"] == "forward":
            for e in journal["entries"]:
                if e["staged"] and os.path.lexists(_at(out, e["staged"])):
                    os.replace(_at(out, e["staged"]), _at(out, e["target"]))
                elif not e["staged"]:
                    _unlink(_at(out, e["target"]))
            _finish(out, journal)
        else:
            _roll_back(out, journal)
        if say:
            done = "completed" if journal["direction"] == "forward" else "rolled back"
            say(f"{out}: a build was interrupted while installing its reports; {done} its "
                f"{len(journal['entries'])} files")
    leftovers = [p for folder in _folders(out) for p in _staged_in(folder)]
    for path in leftovers:
        _unlink(path)
    if leftovers and say:
        say(f"{out}: removed {len(leftovers)} staged files an interrupted build left")


def _folders(out: str) -> list[str]:
    """The output folder and the chart folders in it."""
    with os.scandir(out) as it:
        return [out] + [e.path for e in it if e.is_dir(follow_symlinks=False)]


def _staged_in(folder: str) -> list[str]:
    with os.scandir(folder) as it:
        return sorted(e.path for e in it if e.name.startswith(STAGED) and
                      e.is_file(follow_symlinks=False))


def _inside(rel, prefix: str = "") -> bool:
    """A path this module wrote: relative, below the output folder, at most one folder deep."""
    if not isinstance(rel, str):
        return False
    parts = rel.split("/")
    return (0 < len(parts) <= 2 and all(p not in ("", ".", "..") and "\\" not in p for p in parts)
            and parts[-1].startswith(prefix))


def _read_journal(out: str, path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            journal = json.load(fh)
        ok = journal["direction"] in ("forward", "back") and isinstance(journal["manifest"], dict) \
            and all(_inside(e["target"]) and _inside(e["old"], STAGED)
                    and (e["staged"] is None or _inside(e["staged"], STAGED))
                    and isinstance(e["had_old"], bool) for e in journal["entries"])
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise RooflineError(f"{path}: cannot read the journal of an interrupted build; check the "
                            f"reports in {out} and remove it")
    return journal


def _read_manifest(out: str, say) -> dict[str, list[str]]:
    """{study stem: files its last build wrote}; files outside the study's own names are ignored."""
    path = os.path.join(out, MANIFEST)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        studies = data["studies"]
        assert data["format"] == MANIFEST_FORMAT and isinstance(studies, dict)
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError, AssertionError):
        if say:
            say(f"{path}: not a rooflinec manifest; ignored (files of earlier builds stay)")
        return {}
    return {stem: [rel for rel in files if _owned(stem, rel)]
            for stem, files in studies.items() if isinstance(files, list)}


def _owned(stem: str, rel) -> bool:
    """A path a study of this stem writes: <stem>.<format> or <stem>/<chart>."""
    return _inside(rel) and not rel.split("/")[-1].startswith(".") and (
        rel.startswith(f"{stem}/") or (rel.startswith(f"{stem}.") and "/" not in rel))

