"""Per-operator kernel profiles: Vidur's `mlp.csv` and all-reduce CSVs, and rooflinec's own
simple CSV, read into plain rows with located errors.

Vidur (github.com/microsoft/vidur, `data/profiling/compute/<device>/<org>/<model>/mlp.csv`):
one row per (num_tokens, num_tensor_parallel_workers), the whole model's config in columns
n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size, use_gated_mlp, and per op
`time_stats.<op>.median` in milliseconds (the kernel time of one call on one GPU). The model is
named by the file's two parent folders (its Hugging Face id).

The simple CSV (header first, any column order, extra columns ignored):
model (a label, e.g. a Hugging Face id), op (one of OPS), tokens, tp (whole numbers >= 1),
time_ms (positive), and the model's shape symbols d_model, n_q, n_kv, d_head, d_ff, V (whole
numbers >= 1) and gated (true/false: a gated MLP, its up projection fused with the gate).

Written with the csv module: pandas is not a dependency and the files are small.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from rooflinec.base import csvtable
from rooflinec.base.errors import Problem, SpecError

# Vidur's op names, each one kernel (or a fused few) of one decoder layer
OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
       "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
SHAPES = ("d_model", "n_q", "n_kv", "d_head", "d_ff", "V")
SIMPLE = ("model", "op", "tokens", "tp", "time_ms", *SHAPES, "gated")
VIDUR_CONFIG = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp",
                "num_tokens", "num_tensor_parallel_workers")
COLLECTIVE = ("num_workers", "devices_per_node", "size")
MAX_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Shape:
    """The whole model's dimensions (not one shard's)."""

    d_model: int
    n_q: int
    n_kv: int
    d_head: int
    d_ff: int
    V: int
    gated: bool


@dataclass(frozen=True)
class OpRow:
    file: str
    line: int
    model: str
    shape: Shape
    op: str
    tokens: int
    tp: int
    time_s: float


@dataclass(frozen=True)
class CollectiveRow:
    file: str
    line: int
    collective: str
    workers: int
    per_node: int
    size_bytes: int
    time_s: float


class _Cells:
    """One data row's cells by column name; each bad cell a located problem."""

    def __init__(self, file, n, header, cells, problems):
        self.file, self.n, self.header, self.cells, self.problems = file, n, header, cells, problems
        self.value = dict(zip(header, (c.strip() for c in cells)))

    def bad(self, column, message):
        i = self.header.index(column)
        self.problems.append(Problem(self.file, self.n, 1 + sum(len(c) + 1 for c in self.cells[:i]),
                                     column, message))

    def whole(self, column) -> int | None:
        text = self.value[column]
        if text.isascii() and text.isdigit() and len(text) <= 15 and int(text) >= 1:
            return int(text)
        self.bad(column, f"'{text}' is not a whole number >= 1 of at most 15 digits")
        return None

    def positive(self, column, scale=1e-3) -> float | None:
        try:
            x = float(self.value[column])
        except ValueError:
            x = math.nan
        if math.isfinite(x) and x > 0:
            return x * scale
        self.bad(column, f"'{self.value[column]}' is not a positive number of ms")
        return None

    def flag(self, column) -> bool | None:
        text = self.value[column].lower()
        if text in ("true", "false"):
            return text == "true"
        self.bad(column, f"'{self.value[column]}' is not true or false")
        return None


def _rows(file, lines, required, parse):
    header, problems, out = lines[0], [], []
    csvtable.require(file, header, required)
    for n, cells in csvtable.data(file, lines, problems):
        row, before = _Cells(file, n, header, cells, problems), len(problems)
        parsed = parse(row)
        if len(problems) == before:
            out.extend(parsed)
    if problems:
        raise SpecError(problems)
    return out


def is_vidur(header: list[str]) -> bool:
    return any(h.startswith("time_stats.") for h in header)


def read(file: str) -> list[OpRow]:
    """Every (row, op) of a Vidur mlp.csv or a simple profile CSV."""
    lines = csvtable.lines(file, MAX_BYTES, "profile CSV")
    return _vidur(file, lines) if is_vidur(lines[0]) else _simple(file, lines)


def model_label(file: str) -> str:
    """Vidur keeps each model's profile at <org>/<model>/mlp.csv: its Hugging Face id."""
    parts = os.path.normpath(os.path.abspath(file)).split(os.sep)
    return "/".join(parts[-3:-1])


def _vidur(file, lines) -> list[OpRow]:
    header, label = lines[0], model_label(file)
    ops = [op for op in OPS if f"time_stats.{op}.median" in header]
    if not ops:
        raise SpecError([Problem(file, 1, 1, "(header)", "no time_stats.<op>.median column for any of "
                                 + ", ".join(OPS))])

    def parse(row: _Cells):
        n = {c: row.whole(c) for c in VIDUR_CONFIG if c != "use_gated_mlp"}
        gated = row.flag("use_gated_mlp")
        times = {op: row.positive(f"time_stats.{op}.median") for op in ops}
        if None in n.values() or gated is None or None in times.values():
            return []
        heads = n["n_head"]
        if n["n_embd"] % heads:
            row.bad("n_embd", f"{n['n_embd']} is not a multiple of n_head {heads}")
            return []
        shape = Shape(n["n_embd"], heads, n["n_kv_head"], n["n_embd"] // heads, n["n_expanded_embd"],
                      n["vocab_size"], gated)
        return [OpRow(file, row.n, label, shape, op, n["num_tokens"], n["num_tensor_parallel_workers"], t)
                for op, t in times.items()]
    return _rows(file, lines, VIDUR_CONFIG, parse)


def _simple(file, lines) -> list[OpRow]:
    def parse(row: _Cells):
        op = row.value["op"]
        if op not in OPS:
            row.bad("op", f"'{op}' is not an op; known: {', '.join(OPS)}")
        if not row.value["model"]:
            row.bad("model", "empty; every row needs a model label")
        n = {c: row.whole(c) for c in ("tokens", "tp", *SHAPES)}
        gated, t = row.flag("gated"), row.positive("time_ms")
        if None in n.values() or gated is None or t is None or op not in OPS:
            return []
        return [OpRow(file, row.n, row.value["model"], Shape(*(n[s] for s in SHAPES), gated), op,
                      n["tokens"], n["tp"], t)]
    return _rows(file, lines, SIMPLE, parse)


def read_collectives(file: str) -> list[CollectiveRow]:
    """Every row of a Vidur network CSV (all_reduce.csv, send_recv.csv)."""
    lines = csvtable.lines(file, MAX_BYTES, "profile CSV")
    name = next((h.split(".")[1] for h in lines[0] if h.startswith("time_stats.") and h.endswith(".median")), None)
    if name is None:
        raise SpecError([Problem(file, 1, 1, "(header)", "no time_stats.<collective>.median column")])

    def parse(row: _Cells):
        n = {c: row.whole(c) for c in COLLECTIVE}
        t = row.positive(f"time_stats.{name}.median")
        if None in n.values() or t is None:
            return []
        return [CollectiveRow(file, row.n, name, n["num_workers"], n["devices_per_node"], n["size"], t)]
    return _rows(file, lines, COLLECTIVE, parse)
