"""Measured rows for the simulator: the layout CSV (`serving-v2-visible.csv`: mode, layout and
storage-format columns) and the old one (`measurements.read`), as one kind of row; each row
resolved to a deployment, engine and benchmark, or the reason it is not predicted.

Predicted: aggregated rows of one engine instance: a tensor-parallel group, or for a MoE model
attention tp x attention DP with the routed experts over moe_tp x moe_ep of the same devices
(`deployment`: the row's `stepcost.Deployment`, one attention-DP rank's; `clients`: the
concurrency one rank serves, C / attention_dp). Disaggregated rows (their `prefill_*` and
`decode_*` columns: one worker's layout, its batch per rank, how many workers) are resolved by
`resolve_disagg` and `pool_deployments` for `serving/disagg.py`: each pool a `Deployment` of its
own tp, attention_dp, moe_tp and moe_ep; their model may be a quantized checkpoint of a catalog
model (`CHECKPOINTS`; the row's format columns give its formats).

Two readings of the source's columns, each stated where it is used:
- a disaggregated row without a concurrency: the clients are decode_workers x
  decode_attention_dp x decode_batch (`disagg_clients`), the rule every disaggregated row that
  states its concurrency obeys (480 = 6 x 1 x 80, 552 = 6 x 1 x 92), as `concurrency =
  batch_per_rank x attention_dp x replicas` for the aggregated rows;
- a vLLM pool whose moe_tp x moe_ep is not its tp x attention_dp while moe_ep is 1: vLLM without
  expert parallelism splits every expert over all dp x tp GPUs of the instance (vLLM,
  `FusedMoEParallelConfig.make` in model_executor/layers/fused_moe/config.py: `flatten_tp_across_dp`,
  `ep_size=1` unless `enable_expert_parallel`), so moe_tp = tp x attention_dp (`_vllm_experts`).
  The aggregated vLLM rows with tp x attention_dp below moe_tp are not read so: that would need
  attention DP the row itself denies (attention_dp 1, batch_per_rank = concurrency).

Not predicted, with the reason: other layouts whose MoE devices (moe_tp x moe_ep) are not the
attention's (tp x attention_dp), a dense model under aggregated attention DP (its columns then
mean nothing), pipeline parallelism, rows spread over replicas, models or devices without a
spec, devices without a tensor peak for the GEMMs (weights whose own peak a device lacks run
weight-only, on bf16 GEMMs). `fp8-block` (one scale per 128 x 128 block) is read as fp8: its
scales add 4 bytes per 16,384 weights (0.02%), left out.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

from rooflinec.cost.deployment import Deployment
from rooflinec.serving import measurements
from rooflinec.cost.deployment import gemm_dtype
from rooflinec.spec import load as spec
from rooflinec.base import csvtable
from rooflinec.base.errors import SpecError

LAYOUT = ("mode", "gemm_weights", "moe_weights", "tp", "pp", "attention_dp", "moe_tp", "moe_ep", "replicas")
REQUIRED = ("model", "device", "engine", "isl", "osl", "concurrency", "ttft_ms", "tpot_ms", "row_id", *LAYOUT)
AGG_INTEGERS = ("tp", "pp", "attention_dp", "moe_tp", "moe_ep", "replicas")
FORMAT_ALIASES = {"fp8-block": "fp8"}
POOL = ("workers", "tp", "pp", "attention_dp", "moe_tp", "moe_ep", "batch")   # prefill_* and decode_* columns
# quantized checkpoints measured -> the catalog model they quantize (the
# model cards: NVIDIA's ModelOpt NVFP4 export of Qwen3-32B; Qwen's block-fp8 Qwen3-235B-A22B)
CHECKPOINTS = {"nvidia/Qwen3-32B-NVFP4": "Qwen/Qwen3-32B", "Qwen/Qwen3-235B-A22B-FP8": "Qwen/Qwen3-235B-A22B"}


@dataclass(frozen=True)
class Pool:
    """One kind of disaggregated worker: its layout, requests per rank, how many."""

    workers: int
    tp: int
    pp: int
    attention_dp: int
    moe_tp: int
    moe_ep: int
    batch: int


@dataclass(frozen=True)
class Row:
    row_id: str
    model: str
    device: str
    engine: str
    mode: str
    weights: str
    moe_weights: str
    tp: int
    pp: int
    attention_dp: int
    moe_tp: int
    moe_ep: int
    replicas: int
    isl: int
    osl: int
    concurrency: int
    ttft_s: float
    tpot_s: float
    pools: tuple = ()         # disaggregated rows: (prefill Pool, decode Pool) where the columns are given


def has_layout(file: str) -> bool:
    """Whether `file`'s header names the layout columns (False where it cannot be read: the
    reader that follows says why)."""
    try:
        with open(file, encoding="utf-8-sig", newline="") as fh:
            header = next(csv.reader([fh.readline()]), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    return "mode" in header


def read(file: str) -> list[Row]:
    """Every row of either CSV format; problems located as file:line:col: column: what."""
    lines = csvtable.lines(file, measurements.MAX_BYTES, "measurements CSV", REQUIRED)
    if "mode" not in lines[0]:
        return [_from_old(r) for r in measurements.read(file)]
    header, problems, rows, seen = lines[0], [], [], {}
    repeated = measurements.repeated_columns(file, header, set(header))   # said first: a repeat may hide a missing one
    if repeated:
        raise SpecError(repeated)
    csvtable.require(file, header, REQUIRED)
    for n, cells in csvtable.data(file, lines, problems):
        row = _row(file, n, header, cells, problems)
        if row is None:
            continue
        if row.row_id in seen:
            problems.append(measurements._at(file, n, header, cells, "row_id",
                                             f"'{row.row_id}' repeats line {seen[row.row_id]}; row ids must be unique"))
        seen[row.row_id] = n
        rows.append(row)
    if problems:
        raise SpecError(problems)
    return rows


def _row(file, n, header, cells, problems) -> Row | None:
    value = dict(zip(header, (c.strip() for c in cells)))
    at = lambda col, msg: problems.append(measurements._at(file, n, header, cells, col, msg))   # noqa: E731
    before = len(problems)
    if value["mode"] not in ("agg", "disagg"):
        at("mode", f"'{value['mode']}' is not agg or disagg")
    agg = value["mode"] != "disagg"    # an unknown mode's row read as aggregated: its pools' cells are not asked for
    ints = {}
    for name in ("isl", "osl", "concurrency", *(AGG_INTEGERS if agg else ())):
        text = value[name]
        if not name == "concurrency" or agg or text:
            if not (text.isascii() and text.isdigit()) or len(text) > 15 or int(text) < 1:
                at(name, f"'{text}' is not a whole number >= 1 of at most 15 digits")
            else:
                ints[name] = int(text)
    times = {}
    for name in ("ttft_ms", "tpot_ms"):
        try:
            x = float(value[name])
        except ValueError:
            x = math.nan
        if not (math.isfinite(x) and measurements.MIN_MS <= x <= measurements.MAX_MS):
            at(name, f"'{value[name]}' is not a number of ms from {measurements.MIN_MS:g} "
                     f"(a nanosecond) to {measurements.MAX_MS:g} (a week)")
        times[name] = x / 1e3
    for name in ("model", "device", "engine", "row_id", "gemm_weights"):
        if not value[name]:
            at(name, "empty; every row needs it")
    pools = () if agg else _pools(value, at)
    if len(problems) > before:
        return None
    return Row(value["row_id"], value["model"], value["device"], value["engine"], value["mode"],
               value["gemm_weights"], value["moe_weights"], *(ints.get(k, 0) for k in AGG_INTEGERS),
               ints["isl"], ints["osl"], ints.get("concurrency", 0), times["ttft_ms"], times["tpot_ms"], pools)


def _pools(value: dict, at) -> tuple:
    """A disaggregated row's (prefill, decode) Pools; () where its file has no such columns."""
    names = [f"{kind}_{k}" for kind in ("prefill", "decode") for k in POOL]
    if not all(n in value for n in names):
        return ()
    got = {}
    for n in names:
        text = value[n]
        if not (text.isascii() and text.isdigit()) or len(text) > 15 or int(text) < 1:
            at(n, f"'{text}' is not a whole number >= 1 of at most 15 digits")
        else:
            got[n] = int(text)
    if len(got) < len(names):
        return ()
    return tuple(Pool(*(got[f"{kind}_{k}"] for k in POOL)) for kind in ("prefill", "decode"))


def _from_old(r) -> Row:
    return Row(r.row_id, r.model, r.device, r.engine, "agg", r.weights, "", r.tp, r.pp, 1, r.tp, 1, 1,
               r.isl, r.osl, r.concurrency, r.ttft_s, r.tpot_s)


@dataclass(frozen=True)
class Resolved:
    model: object
    device: object
    weights: str


def resolve(row: Row, specs: measurements.Specs) -> Resolved | str:
    """The row's model, device and weight format, or why it is not predicted."""
    if row.mode == "disagg":
        return ("disaggregated prefill and decode workers: predicted by serving/disagg.py "
                "(validate's disaggregated rows), not by one engine's replay")
    model = specs.models().get(CHECKPOINTS.get(row.model, row.model))
    is_moe = getattr(model, "moe", None) is not None or bool(row.moe_weights)
    why = _layout(row, is_moe)
    if why:
        return why
    if row.pp != 1:
        return f"pipeline parallelism (pp {row.pp}) is not modelled"
    if row.replicas != 1:
        return f"load spread over {row.replicas} replicas is not modelled"
    return _formats(row, model, specs, is_moe)


def _layout(row, is_moe: bool) -> str:
    """Why the row's attention-DP / expert layout is not predicted, or ''."""
    if row.attention_dp > 1 and not is_moe:
        return f"attention data parallelism {row.attention_dp} of a dense model: not modelled (replicas are)"
    if is_moe and row.moe_tp * row.moe_ep != row.tp * row.attention_dp:
        return inconsistent(row.engine, row.tp, row.attention_dp, row.moe_tp, row.moe_ep)
    if row.concurrency % row.attention_dp:
        return f"concurrency {row.concurrency} does not split evenly over {row.attention_dp} attention-DP ranks"
    return ""


def inconsistent(engine: str, tp: int, dp: int, moe_tp: int, moe_ep: int, kind: str = "") -> str:
    """Why a layout whose experts' GPUs are not its attention's is left out (one located line)."""
    why = (f"{kind}moe_tp {moe_tp} x moe_ep {moe_ep} = {moe_tp * moe_ep} GPUs but tp {tp} x attention_dp {dp} = "
           f"{tp * dp}: the source's layout is inconsistent (one instance's MoE layers and attention share its GPUs)")
    if engine == "vllm" and moe_ep == 1 and moe_tp % tp == 0 and moe_tp > tp * dp:
        why += (f"; vLLM's rule (experts over dp x tp GPUs without expert parallelism) would need attention_dp "
                f"{moe_tp // tp}, which the row's attention_dp {dp} denies")
    return why


def _vllm_experts(engine: str, tp: int, dp: int, moe_tp: int, moe_ep: int) -> tuple[int, int] | None:
    """A vLLM worker's (moe_tp, moe_ep) by vLLM's rule where moe_ep is 1 (no expert
    parallelism): every expert split over the worker's tp x dp GPUs (see the module); None
    where that rule does not apply."""
    if engine == "vllm" and moe_ep == 1:
        return tp * dp, 1
    return None


def layout(row: Row) -> str:
    """The row's mode and layout in words (the validation report's groups)."""
    if row.mode == "disagg":
        return ("disagg, " + ", ".join(f"{kind} {pool_words(p)}" for kind, p in zip(("prefill", "decode"), row.pools))
                if row.pools else "disagg")
    if not row.moe_weights:      # a dense model: the expert columns mean nothing
        return f"agg, tp {row.tp}"
    return f"agg, tp {row.tp} x dp {row.attention_dp}, experts moe_tp {row.moe_tp} x ep {row.moe_ep}"


def pool_words(p: Pool) -> str:
    """One pool's layout in words: workers x tp (x dp where attention DP is on)."""
    return f"{p.workers} x tp {p.tp}" + (f" x dp {p.attention_dp}" if p.attention_dp > 1 else "")


def kv_format(weights: str) -> str:
    """The KV cache's format, which the rows do not state: the weights' where that is 8-bit or
    wider (as the steady-state model assumes); fp8 beside 4-bit weights (NVFP4 and MXFP4 are
    weight formats: no engine stores or reads attention's operands in 4 bits), an assumption."""
    return weights if spec.DTYPE_BYTES[weights] >= 1 else "fp8"


def deployment(row: Row, got: Resolved, kv_cache: str):
    """The row's deployment, one attention-DP rank of it (`stepcost.Deployment`), and the clients
    that rank serves (the benchmark's concurrency split evenly over the ranks)."""
    moe = getattr(got.model, "moe", None) is not None
    layout = dict(attention_dp=row.attention_dp, moe_tp=row.moe_tp, moe_ep=row.moe_ep) if moe else {}
    return Deployment(got.model, got.device, row.tp, got.weights, kv_cache, **layout), row.concurrency // row.attention_dp


def resolve_disagg(row: Row, specs: measurements.Specs) -> Resolved | str:
    """A disaggregated row's model, device and weight format (its pools are `row.pools`, read by
    `pool_deployments`), or why `serving/disagg.py` cannot predict it."""
    if not row.pools:
        return "disaggregated row without prefill_* and decode_* columns: its pools are unknown"
    model = specs.models().get(CHECKPOINTS.get(row.model, row.model))
    is_moe = getattr(model, "moe", None) is not None or bool(row.moe_weights)
    for kind, pool in zip(("prefill", "decode"), row.pools):
        if pool.pp != 1:
            return f"disaggregated, {kind} workers with pipeline parallelism (pp {pool.pp}): not modelled"
        if is_moe and isinstance(pool_experts(row, pool), str):
            return "disaggregated, " + pool_experts(row, pool, f"{kind} workers' ")
    return _formats(row, model, specs, is_moe)


def pool_experts(row: Row, pool: Pool, kind: str = "") -> tuple[int, int] | str:
    """A MoE pool's (moe_tp, moe_ep): as the row states them where they cover the worker's
    tp x attention_dp GPUs, else by vLLM's rule where it applies; else why not."""
    if pool.moe_tp * pool.moe_ep == pool.tp * pool.attention_dp:
        return pool.moe_tp, pool.moe_ep
    got = _vllm_experts(row.engine, pool.tp, pool.attention_dp, pool.moe_tp, pool.moe_ep)
    return got or inconsistent(row.engine, pool.tp, pool.attention_dp, pool.moe_tp, pool.moe_ep, kind)


def disagg_clients(row: Row) -> tuple[int, str]:
    """A disaggregated row's clients, and how they were read: its concurrency, else
    decode_workers x decode_attention_dp x decode_batch (see the module)."""
    if row.concurrency:
        return row.concurrency, ""
    dec = row.pools[1]
    c = dec.workers * dec.attention_dp * dec.batch
    return c, (f"concurrency not stated: {dec.workers} decode worker{'' if dec.workers == 1 else 's'} x "
               f"attention_dp {dec.attention_dp} x decode_batch {dec.batch} = {c} clients")


def pool_deployments(row: Row, got: Resolved) -> tuple:
    """The row's (prefill, decode) worker `Deployment`s: each its own tp, attention_dp and, for
    a MoE model, moe_tp and moe_ep (`experts`); the KV cache by `kv_format`; and the readings
    taken (vLLM's expert rule), in words."""
    moe = getattr(got.model, "moe", None) is not None
    deps, notes = [], []
    for kind, pool in zip(("prefill", "decode"), row.pools):
        layout = {"attention_dp": pool.attention_dp}
        if moe:
            moe_tp, moe_ep = pool_experts(row, pool)
            layout.update(moe_tp=moe_tp, moe_ep=moe_ep)
            if (moe_tp, moe_ep) != (pool.moe_tp, pool.moe_ep):
                notes.append(f"{kind} moe_tp {pool.moe_tp} read as {moe_tp} (vLLM: experts over tp {pool.tp} x "
                             f"dp {pool.attention_dp} GPUs without expert parallelism)")
        deps.append(Deployment(got.model, got.device, pool.tp, got.weights, kv_format(got.weights), **layout))
    return tuple(deps), notes


def _formats(row: Row, model, specs: measurements.Specs, is_moe: bool) -> Resolved | str:
    if model is None:
        return f"no model spec with hf_id '{row.model}'"
    device = specs.device(row.device)
    if device is None:
        return f"no hardware spec '{row.device}'"
    weights = FORMAT_ALIASES.get(row.weights, row.weights)
    if weights not in spec.DTYPE_BYTES:
        return f"weights format '{row.weights}' unknown; known: {', '.join(spec.DTYPE_BYTES)}"
    if device.peak("matrix", gemm_dtype(weights, device)) is None:   # else weight-only GEMMs
        return f"{row.device} lists no tensor peak for {gemm_dtype(weights, device)}"
    if is_moe and FORMAT_ALIASES.get(row.moe_weights, row.moe_weights or weights) != weights:
        return f"routed experts in {row.moe_weights} beside {row.weights} GEMMs: per-class formats not modelled yet"
    return Resolved(model, device, weights)
