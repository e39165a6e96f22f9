"""Measurement tables as CSV text: read within a size limit, the header checked, the data lines
handed over one by one with their line numbers. One owner for the serving runs, the deployment
layouts and the kernel profiles, so every table says its problems the same way (file:line:col)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from rooflinec.base import yamlio
from rooflinec.base.errors import Problem, SpecError


class Table(list):
    """The rows of cells, and the line each row starts on (a quoted cell may hold a line break,
    so a row is not always one line)."""

    def __init__(self, rows, starts):
        super().__init__(rows)
        self.starts = starts


def lines(file: str, max_bytes: int, what: str, expected: tuple[str, ...] = ()) -> Table:
    """The file's rows of cells, the header first. utf-8-sig: a spreadsheet's BOM is fine."""
    raw = yamlio.read_bytes(file, max_bytes, what, "a UTF-8 CSV text file")
    try:
        reader = csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline=""))
        rows, starts, ended = [], [], 0
        for row in reader:
            starts.append(ended + 1)
            rows.append(row)
            ended = reader.line_num
        out = Table(rows, starts)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise SpecError([Problem(file, 1, 1, "(file)", f"cannot read it as UTF-8 CSV: {exc}")]) from None
    if not out:
        hint = ": " + ",".join(expected) if expected else ""
        raise SpecError([Problem(file, 1, 1, "(header)", f"empty file; expected a header row{hint}")])
    return out


def require(file: str, header: list[str], columns) -> None:
    """Every column of `columns` in the header, or one located problem naming those missing."""
    missing = [c for c in columns if c not in header]
    if missing:
        raise SpecError([Problem(file, 1, 1, "(header)", f"missing column(s) {', '.join(missing)}; "
                                 f"expected: {','.join(columns)}")])


def data(file: str, table: Table, problems: list) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each data line that is not blank and has the header's width; a
    line of another width becomes a problem instead."""
    width = len(table[0])
    for n, cells in zip(table.starts[1:], table[1:]):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != width:
            problems.append(Problem(file, n, 1, "(row)", f"{len(cells)} cells, the header has {width}"))
            continue
        yield n, cells
