"""Measured serving runs: the CSV format, read with located errors, and each row resolved
to the specs it names (model by its `hf_id`, device by its hardware spec name).

Columns (header row first, any order, extra columns ignored):
model (Hugging Face id), device (hardware spec name), engine, engine_version, weights
(GEMM weight dtype), tp, pp, isl, osl, concurrency (integers >= 1), ttft_ms, tpot_ms
(ms, from a nanosecond to a week), measured (date, may be empty), row_id (unique); a column
named twice is refused.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from rooflinec.spec import catalog, load as spec
from rooflinec.cost import parallel
from rooflinec.cost.deployment import gemm_dtype
from rooflinec.base import csvtable
from rooflinec.base.errors import Problem, SpecError
from rooflinec.serving.serving_model import Run

COLUMNS = ("model", "device", "engine", "engine_version", "weights", "tp", "pp", "isl", "osl",
           "concurrency", "ttft_ms", "tpot_ms", "measured", "row_id")
INTEGERS = ("tp", "pp", "isl", "osl", "concurrency")
TIMES = ("ttft_ms", "tpot_ms")
MAX_BYTES = 16 * 2**20
# a time a measurement can hold, in ms: no step is under a nanosecond, no run over a week (and
# the model divides by both, so 5e-324 or 1e300 would end in infinity or NaN)
MIN_MS, MAX_MS = 1e-6, 7 * 24 * 3600e3


@dataclass(frozen=True)
class Row:
    row_id: str
    model: str
    device: str
    engine: str
    weights: str
    tp: int
    pp: int
    isl: int
    osl: int
    concurrency: int
    ttft_s: float
    tpot_s: float


def read(file: str) -> list[Row]:
    """Every row of a measurements CSV; every problem located as file:line:col: column: what."""
    lines = csvtable.lines(file, MAX_BYTES, "measurements CSV", COLUMNS)
    header, problems = lines[0], []
    csvtable.require(file, header, COLUMNS)
    repeated = repeated_columns(file, header)
    if repeated:
        raise SpecError(repeated)
    rows, seen = [], {}
    for n, cells in csvtable.data(file, lines, problems):
        row = _row(file, n, header, cells, problems)
        if row is None:
            continue
        if row.row_id in seen:
            problems.append(_at(file, n, header, cells, "row_id", f"'{row.row_id}' repeats line {seen[row.row_id]}; "
                                "row ids must be unique"))
        seen[row.row_id] = n
        rows.append(row)
    if problems:
        raise SpecError(problems)
    return rows


def repeated_columns(file, header, names=COLUMNS) -> list[Problem]:
    """A column of `names` named twice: which copy holds the value would be a guess, so neither
    is taken."""
    out, first = [], {}
    for i, name in enumerate(header):
        if name in names and name in first:
            col = 1 + sum(len(c) + 1 for c in header[:i])
            out.append(Problem(file, 1, col, name, f"column '{name}' repeats column {first[name] + 1}; "
                                                   "each column once"))
        first.setdefault(name, i)
    return out


def _at(file, n, header, cells, column, message) -> Problem:
    i = header.index(column)
    col = 1 + sum(len(c) + 1 for c in cells[:i])
    return Problem(file, n, col, column, message)


def _row(file, n, header, cells, problems) -> Row | None:
    value = dict(zip(header, (c.strip() for c in cells)))
    out, before = {}, len(problems)
    for name in INTEGERS:
        text = value[name]
        if not (text.isascii() and text.isdigit()) or len(text) > 15 or int(text) < 1:
            problems.append(_at(file, n, header, cells, name, f"'{text}' is not a whole number >= 1 of at most 15 digits"))
        else:
            out[name] = int(text)
    for name in TIMES:
        try:
            x = float(value[name])
        except ValueError:
            x = math.nan
        if not (math.isfinite(x) and MIN_MS <= x <= MAX_MS):
            problems.append(_at(file, n, header, cells, name, f"'{value[name]}' is not a number of ms "
                                f"from {MIN_MS:g} (a nanosecond) to {MAX_MS:g} (a week)"))
        out[name] = x / 1e3
    for name in ("model", "device", "engine", "weights", "row_id"):
        if not value[name]:
            problems.append(_at(file, n, header, cells, name, "empty; every row needs it"))
    if len(problems) > before:
        return None
    return Row(value["row_id"], value["model"], value["device"], value["engine"], value["weights"],
               out["tp"], out["pp"], out["isl"], out["osl"], out["concurrency"], out["ttft_ms"],
               out["tpot_ms"])


def configuration(row: Row) -> tuple:
    """What a row's prediction depends on: rows alike in it are predicted alike."""
    return (row.model, row.device, row.weights, row.tp, row.pp, row.isl, row.osl, row.concurrency)


class Specs:
    """Model and hardware specs, loaded on demand: files under a folder's models/ and
    hardware/ (when one is given) shadow the installed catalog's."""

    def __init__(self, root: str | None = None):
        self.roots = ([root] if root else []) + [catalog.ROOT]
        self._models: dict | None = None
        self._devices: dict = {}

    def models(self) -> dict:
        if self._models is None:
            self._models = {}
            for root in reversed(self.roots):     # the catalog first, so a folder's file wins
                folder = os.path.join(root, "models")
                found = [spec.load_model(os.path.join(folder, f)) for f in sorted(os.listdir(folder))
                         if f.endswith(".yaml")] if os.path.isdir(folder) else []
                self._models.update({m.hf_id: m for m in found if m.hf_id})
        return self._models

    def device(self, name: str):
        if name not in self._devices:
            ok = name.replace("-", "").replace("_", "").isalnum()
            paths = [os.path.join(root, "hardware", f"{name}.yaml") for root in self.roots] if ok else []
            found = next((p for p in paths if os.path.isfile(p)), None)
            self._devices[name] = spec.load_hardware(found) if found else None
        return self._devices[name]


def resolve(row: Row, specs: Specs) -> Run | str:
    """The row as a serving-model Run, or why it cannot be predicted."""
    model = specs.models().get(row.model)
    if model is None:
        return f"no model spec with hf_id '{row.model}'"
    device = specs.device(row.device)
    if device is None:
        return f"no hardware spec '{row.device}'"
    if row.weights not in spec.DTYPE_BYTES:
        return f"weights dtype '{row.weights}' unknown; known: {', '.join(spec.DTYPE_BYTES)}"
    if device.peak("matrix", gemm_dtype(row.weights, device)) is None:   # else weight-only GEMMs
        return f"{row.device} lists no tensor peak for {gemm_dtype(row.weights, device)}"
    if row.pp != 1:
        return f"pipeline parallelism (pp {row.pp}) is not modelled"
    try:
        parallel.check(model, row.tp)
    except parallel.Unshardable as exc:
        return f"tp {row.tp}: {exc}"
    return Run(model, device, row.weights, row.tp, row.isl, row.osl, row.concurrency)


# --- the layout columns of a deployment CSV (serving-v2: attention DP, expert parallelism,
# disaggregated prefill and decode) ---------------------------------------------------------

LAYOUT_COLUMNS = ("mode", "gemm_weights", "moe_weights", "attention_dp", "moe_tp", "moe_ep")
# a format the serving model costs in place of the row's: fp8 with one scale per 128 x 128
# block is fp8 plus 1/16384 of a scale per element, left out (fewer bytes: still a bound)
STORED_AS = {"fp8-block": "fp8"}


def layout_reason(cells: dict) -> str:
    """Why the serving model (one aggregated instance, tensor parallelism only) cannot predict
    a row of a deployment CSV, or "" where it can."""
    if cells.get("mode", "agg") != "agg":
        return (f"{cells['mode']} serving (prefill and decode on separate workers) is not modelled: "
                "the model is one aggregated instance")
    for column, what in (("attention_dp", "attention data parallelism"), ("moe_ep", "expert parallelism")):
        if cells.get(column, "1") not in ("", "1"):
            return f"{what} ({column} {cells[column]}) is not modelled by the serving model"
    if cells.get("moe_weights") and cells.get("moe_tp", "") not in ("", cells.get("tp")):
        return f"routed experts split over moe_tp {cells['moe_tp']} GPUs, attention over tp {cells['tp']}: not modelled"
    if cells.get("moe_weights") and cells["moe_weights"] != cells["gemm_weights"]:
        return f"experts stored as {cells['moe_weights']}, dense GEMMs as {cells['gemm_weights']}: one weight format is modelled"
    return ""


def read_layouts(file: str) -> list[tuple[Row | None, str, dict]]:
    """Every row of a deployment CSV (the columns of `read`, with `gemm_weights` for `weights`,
    and LAYOUT_COLUMNS): (the row, "", its cells) where the serving model can predict it,
    else (None, why not, its cells). Rows are read in place, nothing is dropped."""
    lines = csvtable.lines(file, MAX_BYTES, "measurements CSV")
    header = lines[0]
    csvtable.require(file, header, LAYOUT_COLUMNS + ("row_id",))
    out = []
    for n, cells in zip(lines.starts[1:], lines[1:]):
        if not any(c.strip() for c in cells):
            continue
        value = dict(zip(header, (c.strip() for c in cells)))
        reason = layout_reason(value)
        if reason:
            out.append((None, reason, value))
            continue
        weights = STORED_AS.get(value["gemm_weights"], value["gemm_weights"])
        plain = dict(value, weights=weights)
        problems: list = []
        row = _row(file, n, list(plain), list(plain.values()), problems)
        out.append((row, "; ".join(p.message for p in problems), value))
    return out
