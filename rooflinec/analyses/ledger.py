"""Per-operator time ledgers: one row per op, rollups by category, totals; variants compared.

`ledger_dict` is the one place a workbench Ledger becomes the report's JSON contract
(`report.schema.json`); other analyses reuse it.
"""

from __future__ import annotations

import sympy as sp

from rooflinec.model import flash, window
from rooflinec.analyses import analysis
from rooflinec.cost.evaluate import number
from rooflinec.model.ir import TRAFFIC_CLASSES, intensity
from rooflinec.model.symbols import B, L, S
from rooflinec.cost.workbench import Ledger


def symbolic(op) -> dict:
    """An op's per-launch FLOPs and bytes as its formulas build them, and its intensity
    simplified: sympy expressions (the JSON writer prints them as strings)."""
    return {"flops": op.cost.flops, "bytes": op.cost.bytes, "intensity": intensity(op.cost)}


def _row(r) -> dict:
    return {
        "op": r.op.name, "label": r.op.label, "absorbed": list(r.op.absorbed),
        "formula": r.op.formula, "category": r.op.category, "unit": r.op.unit, "count": r.count,
        "flops": r.flops, "bytes": r.bytes, "intensity": r.intensity, "bound": r.roof.bound,
        "time_s": r.roof.time, "compute_time_s": r.roof.t_compute, "memory_time_s": r.roof.t_memory,
        "flops_share": r.flops_share, "time_share": r.time_share,
        "traffic": {cls: r.traffic.get(cls, 0) for cls in TRAFFIC_CLASSES if cls in r.traffic},
        "symbolic": symbolic(r.op),
    }


def _rollup(led: Ledger, name: str, rows) -> dict:
    flops, nbytes, time = (sum(r.flops for r in rows), sum(r.bytes for r in rows),
                           sum(r.roof.time for r in rows))
    return {"name": name, "ops": [r.op.label for r in rows], "flops": flops, "bytes": nbytes,
            "time_s": time, "flops_share": flops / led.flops, "time_share": time / led.time}


def _categories(led: Ledger) -> list[dict]:
    order = list(dict.fromkeys(r.op.category for r in led.rows))
    return [_rollup(led, c, [r for r in led.rows if r.op.category == c]) for c in order]


def _totals(led: Ledger) -> dict:
    return {
        "flops": led.flops, "bytes": led.bytes, "intensity": led.flops / led.bytes,
        "time_s": led.time, "peak_time_s": led.flops / led.peak, "attainable": led.attainable,
        "traffic": {c: led.traffic(c) for c in TRAFFIC_CLASSES},
    }


def ledger_dict(led: Ledger, groups: dict | None = None) -> dict:
    """The JSON contract of one ledger: who, where, which workload, rows, rollups and totals.

    `groups` names extra rollups over categories, e.g. {"elementwise + softmax": [...]}.
    """
    cats = _categories(led)
    extra = [_rollup(led, name, [r for r in led.rows if r.op.category in members])
             for name, members in (groups or {}).items()]
    return {
        "model": led.program.model, "device": led.device.key, "device_name": led.device.name,
        "dtype": led.dtype, "phase": led.program.phase, "variant": led.program.variant,
        "scope": led.scope, "workload": dict(led.workload),
        "rows": [_row(r) for r in led.rows], "categories": cats, "groups": extra,
        "totals": _totals(led),
    }


def _comparison(ledgers: list[dict]) -> list[dict]:
    base = ledgers[0]["totals"]
    return [{"variant": x["variant"], "time_s": x["totals"]["time_s"], "flops": x["totals"]["flops"],
             "bytes": x["totals"]["bytes"], "speedup": base["time_s"] / x["totals"]["time_s"],
             "attainable": x["totals"]["attainable"]} for x in ledgers]


def _has_score_steps(ctx, phase: str) -> bool:
    return any(not op.name.startswith(window.PREFIX) for op in flash.score_ops(ctx.program(phase, "unfused")))


def _flash_detail(ctx, phase: str, device, workload: dict) -> dict:
    """The attention kernel against the unfused steps it replaces, per layer, at one point."""
    unfused, fused = ctx.program(phase, "unfused"), ctx.program(phase, "flash", device)
    values = ctx.at(workload, unfused.bindings)
    # the full-attention layers' steps (windowed layers have a kernel of their own)
    steps = [op for op in flash.score_ops(unfused) if not op.name.startswith(window.PREFIX)]
    kernel = fused.op("attention")
    step_flops = sum(number(op.cost.flops, values) for op in steps)
    step_bytes = sum(number(op.cost.bytes, values) for op in steps)
    flops, nbytes = number(kernel.cost.flops, values), number(kernel.cost.bytes, values)
    tiles, t = None, kernel.tiles   # the pass chose them; the op carries them
    if t is not None:
        tiles = {"sram_bytes": device.sram_per_sm, "sram_elements": t.sram_elements, "rows": t.rows,
                 "cols": t.cols, "col_blocks": -(-int(values[S]) // t.cols)}
    return {
        "phase": phase, "device": device.key, "workload": {s.name: v for s, v in workload.items()},
        "formula": kernel.formula, "tiles": tiles, "replaces": [op.name for op in steps],
        "flops": flops, "bytes": nbytes, "intensity": flops / nbytes,
        "unfused_flops": step_flops, "unfused_bytes": step_bytes,
        "bytes_ratio": nbytes / step_bytes, "exceeds_unfused": nbytes > step_bytes,
        "uncounted_flops": step_flops - flops, "symbolic": symbolic(kernel),
    }


def _formulas(ctx, phases, variants, devices) -> list[dict]:
    """Each distinct program's ops as formulas, once; a program equal on several devices
    lists them all."""
    out, seen = [], {}
    for phase in phases:
        for variant in variants:
            for device in devices:
                program = ctx.program(phase, variant, device)
                if program.ops in seen:
                    seen[program.ops]["devices"].append(device.key)
                    continue
                seen[program.ops] = {"phase": phase, "variant": variant, "devices": [device.key],
                                     "ops": [_formula_row(op) for op in program.ops]}
                out.append(seen[program.ops])
    return out


def _formula_row(op) -> dict:
    return {"op": op.name, "label": op.label, "formula": op.formula, "shape": op.shape,
            "repeat": op.repeat, **symbolic(op)}


def one_layer(model) -> str | None:
    """Which layer the layer scope shows where the model's layers differ: the kind whose ops
    repeat over L (Op.per_layer)."""
    notes = []
    local = window.local_layers(model)
    if 0 < local < model.n_layers:
        notes.append(f"a full-attention layer; the {local} windowed layers attend to min(S, W) keys")
    dense = model.moe.dense_layers(model.n_layers) if model.moe else 0
    if dense:
        notes.append(f"a MoE layer; the {dense} dense layer{'s' if dense > 1 else ''} run a dense MLP")
    return "; ".join(notes) or None


def _block(ctx, params, phase, device, workload, scope) -> dict:
    variants = params.variants
    groups = params.groups or {}
    ledgers = [ledger_dict(ctx.ledger(ctx.program(phase, v, device), device, workload, scope), groups)
               for v in variants]
    return {"phase": phase, "device": device.key, "scope": scope,
            "one_layer": one_layer(ctx.model) if scope == "layer" else None,
            "workload": {s.name: v for s, v in workload.items()},
            "ledgers": ledgers, "comparison": _comparison(ledgers),
            "collectives": _collectives(ctx, ctx.program(phase, variants[0], device), device,
                                        workload, scope)}


def _collectives(ctx, program, device, workload: dict, scope: str) -> list[dict]:
    """The program's collectives (tp > 1; the same in every variant), timed by the ring model;
    one layer's in the layer scope."""
    rows = [c for c in ctx.communication(program, device, workload)
            if scope == "model" or L in sp.sympify(c.collective.repeat).free_symbols]
    return [{"name": c.collective.name, "kind": c.collective.kind, "devices": c.collective.devices,
             "count": 1 if scope == "layer" else c.count,
             "volume": c.volume / (c.count if scope == "layer" else 1), "link": c.link.name,
             "time_s": c.time / (c.count if scope == "layer" else 1),
             "latency_bound": c.latency_bound} for c in rows]


@analysis("ledger", "Operator ledgers")
def ledger_analysis(ctx, params) -> dict:
    phases = params.phases
    variants = params.variants
    scopes = params.scopes
    devices = ctx.devices_named(("analyses", "ledger", "devices"), params.devices)
    points = [{B: w["batch"], S: w["context"]} for w in params.workloads]
    blocks, details = [], []
    for phase in phases:
        for device in devices:
            for workload in points:
                blocks.extend(_block(ctx, params, phase, device, workload, scope) for scope in scopes)
                if "flash" in variants and _has_score_steps(ctx, phase):   # latent attention has none
                    details.append(_flash_detail(ctx, phase, device, workload))
    return {"phases": phases, "variants": variants, "scopes": scopes,
            "conventions": [{"phase": p, "key": k, "choice": c}
                            for p in phases for k, c in ctx.program(p).conventions],
            "groups": params.groups or {}, "blocks": blocks, "flash": details,
            "formulas": _formulas(ctx, phases, variants, devices)}

