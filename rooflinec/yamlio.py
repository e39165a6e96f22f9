"""Read one YAML file safely, keeping the line and column of every node.

Only plain YAML: SafeLoader refuses python tags. Expansion is bounded, so an
alias bomb fails fast instead of eating memory in the walk or in validation.
"""

from __future__ import annotations

import os

import yaml

from rooflinec.errors import Problem, SpecError

MAX_BYTES = 1 << 20       # a spec is a page of text, not a data set
MAX_NODES = 100_000       # after alias expansion

Path = tuple  # JSON path: keys and indices


class Located:
    """A loaded document plus where each of its values and keys was written."""

    def __init__(self, file: str, data, marks: dict, key_marks: dict):
        self.file, self.data = file, data
        self.marks, self.key_marks = marks, key_marks

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


def _fail(file: str, message: str, mark=None) -> SpecError:
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    return SpecError([Problem(file, line, col, "(file)", message)])


def read_text(file: str) -> str:
    try:
        size = os.path.getsize(file)
        if size > MAX_BYTES:
            raise _fail(file, f"file is {size} bytes; specs are limited to {MAX_BYTES} bytes")
        with open(file, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise _fail(file, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(file, f"not UTF-8 text (byte {exc.start}); a spec is a YAML text file") from None
    if "\x00" in text:
        raise _fail(file, "contains NUL bytes; a spec is a YAML text file")
    return text


def load(file: str, text: str | None = None) -> Located:
    text = read_text(file) if text is None else text
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise _fail(file, "file is empty; expected a YAML mapping")
        marks: dict = {}
        key_marks: dict = {}
        _walk(node, (), marks, key_marks, [0], file)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise _fail(file, f"YAML error: {exc.problem or exc.context}", mark) from None
    except yaml.YAMLError as exc:
        raise _fail(file, f"YAML error: {exc}") from None
    except RecursionError:
        raise _fail(file, "YAML nesting is too deep") from None
    finally:
        loader.dispose()
    return Located(file, data, marks, key_marks)


def _walk(node, path: Path, marks: dict, key_marks: dict, count: list, file: str) -> None:
    count[0] += 1
    if count[0] > MAX_NODES:
        raise _fail(file, f"the document expands to more than {MAX_NODES} nodes "
                          "(aliases repeated too often?); specs must be small")
    marks.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.tag)
            key_marks.setdefault(path + (key,), (key_node.start_mark.line + 1,
                                                 key_node.start_mark.column + 1))
            _walk(value_node, path + (key,), marks, key_marks, count, file)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, path + (i,), marks, key_marks, count, file)
