"""Markdown tables stay readable with many devices: a table wider than `LIMIT` columns whose
columns are grouped by device (headers "<device> ...") is split into one table per device,
each repeating the shared columns. Templates lay tables out once; this keeps them narrow."""

from __future__ import annotations

import re

LIMIT = 9
_CELL = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in _CELL.split(line.strip())[1:-1]]


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def _owner(header: str, keys) -> str | None:
    return next((k for k in keys if header == k or header.startswith(k + " ")), None)


def _split(block: list[str], keys) -> list[str]:
    rows = [_cells(line) for line in block]
    header = rows[0]
    if len(header) <= LIMIT or any(len(r) != len(header) for r in rows):
        return block
    owners = [_owner(h, keys) for h in header]
    shown = [k for k in keys if k in owners]
    if len(shown) < 2:
        return block
    shared = [i for i, o in enumerate(owners) if o is None]
    out = []
    for key in shown:
        cols = shared + [i for i, o in enumerate(owners) if o == key]
        strip = lambda i, c: c[len(key):].strip() or c if owners[i] == key else c  # noqa: E731
        out += [f"On **{key}**:", ""] if out == [] else ["", f"On **{key}**:", ""]
        out.append(_row(strip(i, header[i]) for i in cols))
        out += [_row(r[i] for i in cols) for r in rows[1:]]
    return out


def narrow(text: str, keys) -> str:
    """`text` with every wide, device-grouped table split per device."""
    lines, out, block = text.split("\n"), [], []
    for line in lines + [""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            out += _split(block, keys)
            block = []
        out.append(line)
    return "\n".join(out[:-1])
