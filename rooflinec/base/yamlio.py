"""Read one YAML file safely, keeping the line and column of every node.

Only plain YAML: strings, numbers, booleans, null, lists and mappings with string
keys. Any other tag (``!!python/object``, ``!!set``, ``!!binary``, ``!custom``) is
refused before anything is constructed, and so are duplicate keys. Expansion is
bounded in node count, depth and expanded text (an alias counts the bytes it expands
to), so an alias bomb ("billion laughs"), a recursive alias or a large node repeated by
aliases fails fast instead of eating time and memory in the walk, validation or output.
Only regular files are read: a FIFO, device or folder is refused before it is opened
for reading, so it cannot block.

A JSON file (a Hugging Face config.json) is read as JSON: its values are JSON's (1e-05 a
number, NaN a number to refuse, where YAML 1.1 reads both as strings), its syntax errors are
JSON's, and every message names the input as JSON; the YAML walk only places its values and
keeps the same limits.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass

import yaml

from rooflinec.base.errors import Problem, SpecError

MAX_BYTES = 1 << 20       # a spec is a page of text, not a data set
MAX_NODES = 100_000       # after alias expansion
MAX_EXPANDED = 4 * MAX_BYTES   # bytes of scalar text after alias expansion
MAX_DEPTH = 64            # nesting of lists and mappings
MAX_NUMBER_CHARS = 64     # digits a number literal may have

Path = tuple  # JSON path: keys and indices

_YAML = "tag:yaml.org,2002:"
_PLAIN_SCALARS = {_YAML + t for t in ("str", "int", "float", "bool", "null")}
_NUMBERS = {_YAML + "int", _YAML + "float"}
_ACCEPTED = "strings, numbers, booleans, null, lists and mappings"


@dataclass(frozen=True)
class Form:
    """What kind of text a file is, as its messages name it."""
    language: str   # YAML, JSON
    noun: str       # what one such file is called
    mapping: str    # what its top level must be
    reader: str     # who keeps only the last of two equal keys


YAML = Form("YAML", "spec", "a YAML mapping of keys", "YAML")
JSON = Form("JSON", "config.json file", "a JSON object of fields", "a JSON reader")


class Located:
    """A loaded document plus where each of its values and keys was written."""

    def __init__(self, file: str, data, marks: dict, key_marks: dict, plain=frozenset()):
        self.file, self.data = file, data
        self.marks, self.key_marks = marks, key_marks
        self.plain = plain   # paths of plain (unquoted) one-line scalars: text starts at the mark

    def problem(self, path: Path, message: str, at_key: bool = False) -> Problem:
        line, col = self.where(path, at_key)
        return Problem(self.file, line, col, format_path(path), message)

    def where(self, path: Path, at_key: bool = False) -> tuple[int, int]:
        if at_key and path in self.key_marks:
            return self.key_marks[path]
        while path not in self.marks and path:
            path = path[:-1]
        return self.marks.get(path, (1, 1))


def format_path(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _at(mark) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1)


def _fail(file: str, message: str, mark=None, path: str = "(file)") -> SpecError:
    line, col = _at(mark) if mark is not None else (1, 1)
    return SpecError([Problem(file, line, col, path, message)])


def read_bytes(file: str, limit: int = MAX_BYTES, kind: str = "spec",
               form: str = "a YAML text file") -> bytes:
    """The bytes of `file`, a regular file of at most `limit` bytes (a located SpecError if
    not); every reader of user files (specs, measurements, config.json) opens them here."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            _check_regular(file, fd, limit, kind, form)
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(limit + 1)   # the file may grow while it is read
    except OSError as exc:
        raise _fail(file, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise _fail(file, f"file is over {limit} bytes; {kind}s are limited to {limit} bytes")
    return raw


def read_text(file: str, form: Form = YAML) -> str:
    kind = f"a {form.language} text file"
    raw = read_bytes(file, kind=form.noun, form=kind)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _line_col(raw[:exc.start].decode("utf-8", "replace"), None)
        raise SpecError([Problem(file, line, col, "(file)",
                                 f"not UTF-8 text (byte {exc.start}); a {form.noun} is {kind}")]) from None
    if "\x00" in text:
        line, col = _line_col(text, text.index("\x00"))
        raise SpecError([Problem(file, line, col, "(file)",
                                 f"contains NUL bytes; a {form.noun} is {kind}")])
    return text


def _check_regular(file: str, fd: int, limit: int, kind: str, form: str) -> None:
    """Refuse what is not a regular file of at most `limit` bytes."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise _fail(file, f"cannot read: it is {_kind(info.st_mode)}, not a regular file; "
                          f"a {kind} is {form}")
    if info.st_size > limit:
        raise _fail(file, f"file is {info.st_size} bytes; {kind}s are limited to {limit} bytes")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _line_col(text: str, position: int | None) -> tuple[int, int]:
    """1-based line and column of `position` in `text` (its end when None)."""
    head = text if position is None else text[:position]
    return head.count("\n") + 1, len(head) - (head.rfind("\n") + 1) + 1


def _json(file: str, text: str):
    """JSON's own reading of `text`: its value, or None where a number is past Python's digit
    limit (the walk names it, located). JSON's syntax errors are said as JSON's."""
    if not text.strip():
        raise _fail(file, f"file is empty; expected {JSON.mapping}")
    try:
        return json.loads(text)   # NaN and Infinity read as numbers, refused later as not finite
    except json.JSONDecodeError as exc:
        raise SpecError([Problem(file, exc.lineno, exc.colno, "(file)", f"JSON error: {exc.msg}")]) from None
    except RecursionError:
        raise _fail(file, f"JSON nesting is too deep; at most {MAX_DEPTH} levels") from None
    except ValueError:
        return None


def load(file: str, text: str | None = None, form: Form = YAML) -> Located:
    text = read_text(file, form) if text is None else text
    value = _json(file, text) if form is JSON else None
    loader = None
    try:
        # JSON's tabs are whitespace, which YAML refuses where it indents; a raw tab cannot be
        # inside a JSON string, so spaces in their place keep every column
        loader = yaml.SafeLoader(text if form is YAML else text.replace("\t", " "))
        node = loader.get_single_node()
        if node is None:
            raise _fail(file, f"file is empty; expected {form.mapping}")
        walk = _Walk(file, form)
        walk.visit(node, (), 0)
        if walk.problems:
            raise SpecError(walk.problems)
        if form is JSON and value is None:
            raise _fail(file, "cannot read a number of the file (past Python's digit limit)")
        data = loader.construct_document(node) if form is YAML else value
    except yaml.YAMLError as exc:
        if form is JSON:   # valid JSON that YAML cannot place (a raw C1 control in a string): unlocated
            return Located(file, value, {}, {})
        raise _yaml_error(file, text, exc) from None
    except RecursionError:
        raise _fail(file, f"{form.language} nesting is too deep; at most {MAX_DEPTH} levels") from None
    except (ValueError, TypeError, OverflowError) as exc:   # a constructor refused a value
        raise _fail(file, f"cannot read a value: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return Located(file, data, walk.marks, walk.key_marks, frozenset(walk.plain))


def trusted(file: str):
    """The data of a file `load` has already checked, or package data the project wrote: libyaml's
    C safe parser where present, no marks kept (the located walk is ~10x slower: a third of a
    second on a calibration's residual rows). Files from a user go through `load` first."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(read_text(file), Loader=loader)
    except yaml.YAMLError as exc:
        raise _fail(file, f"YAML error: {exc}") from None


def _yaml_error(file: str, text: str, exc: yaml.YAMLError) -> SpecError:
    """PyYAML's error, located."""
    if isinstance(exc, yaml.reader.ReaderError):
        line, col = _line_col(text, exc.position)
        return SpecError([Problem(file, line, col, "(file)",
                                  f"character U+{_codepoint(exc.character):04X} is not allowed in YAML; "
                                  "a spec is a YAML text file")])
    if isinstance(exc, yaml.MarkedYAMLError):
        return _fail(file, _yaml_message(exc), exc.problem_mark or exc.context_mark)
    return _fail(file, f"YAML error: {exc}")


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's problem, with its context ('while parsing a flow sequence') and where that began."""
    message = exc.problem or exc.context or "cannot parse"
    if exc.context and exc.problem:
        where = ""
        if exc.context_mark is not None and exc.problem_mark is not None \
                and exc.context_mark.line != exc.problem_mark.line:
            where = f" at line {exc.context_mark.line + 1}"
        message = (f"{exc.context}{where}, {message}" if message.startswith("but ")
                   else f"{message} ({exc.context}{where})")
    if "'\\t'" in message:
        message += "; indent with spaces, not tabs"
    return f"YAML error: {message}"


def _codepoint(character) -> int:
    return character if isinstance(character, int) else ord(character[:1] or "\0")


def _tag(tag: str) -> str:
    return "!!" + tag[len(_YAML):] if tag.startswith(_YAML) else tag


class _Walk:
    """Record where every value and key is; refuse what is not plain YAML."""

    def __init__(self, file: str, form: Form = YAML):
        self.file, self.form = file, form
        self.marks: dict = {}
        self.key_marks: dict = {}
        self.plain: set = set()
        self.problems: list[Problem] = []
        self.count = 0
        self.expanded = 0              # bytes of scalar text, each alias counted again
        self.stack: set[int] = set()   # ids of the collections being walked

    def _problem(self, node, path: Path, message: str) -> None:
        line, col = _at(node.start_mark)
        self.problems.append(Problem(self.file, line, col, format_path(path), message))

    def visit(self, node, path: Path, depth: int) -> None:
        self.count += 1
        if self.count > MAX_NODES:
            raise _fail(self.file, f"the document expands to more than {MAX_NODES} nodes"
                                   + (" (an alias repeated too often?)" if self.form is YAML else "")
                                   + f"; {self.form.noun}s must be small",
                        node.start_mark, format_path(path))
        if depth > MAX_DEPTH:
            raise _fail(self.file, f"nested more than {MAX_DEPTH} levels deep; {self.form.noun}s are shallow",
                        node.start_mark, format_path(path))
        self.marks.setdefault(path, _at(node.start_mark))
        if isinstance(node, yaml.ScalarNode):
            self.expanded += len(node.value)
            if self.expanded > MAX_EXPANDED:
                raise _fail(self.file, f"the document expands to more than {MAX_EXPANDED} bytes of "
                                       "text (an alias to a large value repeated?); specs must be small",
                            node.start_mark, format_path(path))
            self._scalar(node, path)
            return
        if id(node) in self.stack:
            raise _fail(self.file, "an alias refers to a list or mapping that contains it; "
                                   "recursive aliases are not accepted", node.start_mark,
                        format_path(path))
        wanted = _YAML + ("map" if isinstance(node, yaml.MappingNode) else "seq")
        if node.tag != wanted:
            self._problem(node, path, f"tag '{_tag(node.tag)}' is not accepted; "
                                      f"specs are plain YAML ({_ACCEPTED})")
            return
        self.stack.add(id(node))
        if isinstance(node, yaml.MappingNode):
            self._mapping(node, path, depth)
        else:
            for i, item in enumerate(node.value):
                self.visit(item, path + (i,), depth + 1)
        self.stack.discard(id(node))

    def _scalar(self, node, path: Path) -> None:
        if node.style is None and node.start_mark.line == node.end_mark.line:
            self.plain.add(path)
        if node.tag == _YAML + "timestamp":
            node.tag = _YAML + "str"    # a date is read as the text written
        elif node.tag not in _PLAIN_SCALARS:
            self._problem(node, path, f"tag '{_tag(node.tag)}' is not accepted; "
                                      f"specs are plain YAML ({_ACCEPTED})")
        elif node.tag in _NUMBERS and len(node.value) > MAX_NUMBER_CHARS:
            self._problem(node, path, f"number has {len(node.value)} characters; "
                                      f"at most {MAX_NUMBER_CHARS} are accepted")
            node.tag = _YAML + "str"

    def _mapping(self, node, path: Path, depth: int) -> None:
        seen: dict[str, tuple[int, int]] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag == _YAML + "merge":
                self.visit(value_node, path + ("<<",), depth + 1)   # `<<: *base`
                continue
            key = self._key(key_node, path)
            if key is None:
                continue
            where = _at(key_node.start_mark)
            if key in seen:
                self._problem(key_node, path + (key,),
                              f"duplicate key '{key}' (first written at line {seen[key][0]}); "
                              f"{self.form.reader} would keep only the last one, so remove one of them")
                continue
            seen[key] = where
            self.key_marks.setdefault(path + (key,), where)
            self.visit(value_node, path + (key,), depth + 1)

    def _key(self, key_node, path: Path) -> str | None:
        """The key as a string, or None after recording why it is not one."""
        if not isinstance(key_node, yaml.ScalarNode):
            kind = "a mapping" if isinstance(key_node, yaml.MappingNode) else "a list"
            self._problem(key_node, path, f"a key is {kind}; keys must be plain strings")
            return None
        if key_node.tag == _YAML + "str":
            return key_node.value
        if key_node.tag == _YAML + "timestamp":
            key_node.tag = _YAML + "str"
            return key_node.value
        if key_node.tag in _PLAIN_SCALARS:
            kind = {"int": "an integer", "float": "a number", "bool": "a boolean",
                    "null": "null"}[key_node.tag[len(_YAML):]]
            self._problem(key_node, path + (key_node.value,),
                          f"key '{key_node.value}' is read by YAML as {kind}; keys must be "
                          f"strings (quote it: \"{key_node.value}\")")
            return None
        self._problem(key_node, path, f"tag '{_tag(key_node.tag)}' on a key is not accepted; "
                                      f"specs are plain YAML ({_ACCEPTED})")
        return None
