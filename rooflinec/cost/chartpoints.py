"""Where each section's points sit on the roofline charts, computed with the analyses so the
render stage only reads numbers. A chart point is one small dict, the same for every section:

    {"label": "q_proj / o_proj",   # what the point is (annotated next to the marker)
     "series": "M = 256",          # one marker and colour per series (a variant, a phase ...)
     "intensity": 224.0,           # FLOPs / byte
     "unit": "matrix",             # which roof applies: "matrix" (tensor peak) or "vector"
     "device": None,               # only on this device's chart; None: on every device's
     "flops_per_s": None,          # achieved FLOP/s; None: on the roof
     "roof": {"h100": 9.8e14}}     # device key -> FLOP/s where the point sits on its chart

A section's points come from an extractor registered here for its kind (`@points("ledger")`),
so a new analysis plugs into the roofline charts without touching the drawing code.
"""

from __future__ import annotations

from collections.abc import Callable

from rooflinec.base.quantities import count
from rooflinec.base.roofline import attainable

EXTRACTORS: dict[str, Callable[[dict], list[dict]]] = {}


def points(kind: str):
    """Register the function that turns a section of `kind` into chart points."""
    def register(fn):
        if kind in EXTRACTORS:
            raise ValueError(f"chart points for {kind!r} registered twice")
        EXTRACTORS[kind] = fn
        return fn
    return register


def point(label: str, series: str, intensity: float, unit: str = "matrix",
          device: str | None = None, flops_per_s: float | None = None) -> dict:
    return {"label": label, "series": series, "intensity": intensity, "unit": unit,
            "device": device, "flops_per_s": flops_per_s}


@points("gemm_intensity")
def _gemm(section: dict) -> list[dict]:
    return [point(row["label"], f"M = {p['tokens']}", p["intensity"])
            for row in section["rows"] for p in row["points"]]


@points("attention_intensity")
def _attention(section: dict) -> list[dict]:
    return [point(f"S = {p['context']}", f"{c['phase']}{', windowed layers' if c['layers'] == 'windowed' else ''}, "
                  f"{c['count']} bytes", p["intensity"])
            for c in section["cases"] for p in c["points"]]


@points("decode_view")
def _decode_view(section: dict) -> list[dict]:
    """Whole-model decode steps: achieved FLOP/s (step FLOPs / step time) on each device."""
    return [point(f"S = {p['context']}", f"decode step, B = {p['batch']}", p["intensity"],
                  device=d["device"], flops_per_s=p["flops"] / d["time_s"])
            for p in section["points"] for d in p["devices"]]


def _ledger_blocks(section: dict) -> list[dict]:
    """One block per (phase, device): the whole model's where the section has it (it holds
    every op a layer has, at the same intensities), else the one layer's."""
    chosen: dict[tuple, dict] = {}
    for blk in section["blocks"]:
        key = (blk["phase"], blk["device"])
        if key not in chosen or blk["scope"] == "model":
            chosen[key] = blk
    return list(chosen.values())


@points("ledger")
def _ledger(section: dict) -> list[dict]:
    """Every op of every variant's ledger on its device's roof; one series per variant (and
    phase, where the section has both). Ops without arithmetic (gathers) have no place on a
    log axis and are left out; the table lists them."""
    phased = len(section["phases"]) > 1
    out, seen = [], set()
    for blk in _ledger_blocks(section):
        for led in blk["ledgers"]:
            series = f"{blk['phase']}, {led['variant']}" if phased else led["variant"]
            for row in led["rows"]:
                key = (blk["device"], series, row["label"])
                if row["intensity"] > 0 and key not in seen:
                    seen.add(key)
                    out.append(point(row["label"], series, row["intensity"], row["unit"], blk["device"]))
    return out


def _args(args: dict) -> str:
    vals = list(args.values())
    if len(set(vals)) == 1 and len(vals) > 1:
        return f"{'='.join(args)} = {count(vals[0])}"
    return ", ".join(f"{k}={count(v)}" for k, v in args.items())


@points("operators")
def _operators(section: dict) -> list[dict]:
    """Each operator at each of its argument sets; one series per operator."""
    return [point(_args(p["args"]), row["label"], p["intensity"], row["unit"])
            for row in section["rows"] for p in row["points"] if p["intensity"] > 0]


def section_points(section: dict, devices, dtype: str) -> list[dict]:
    """The section's points, each with `roof`: device key -> FLOP/s where it sits on that
    device's chart (its achieved FLOP/s, else the roof at its intensity)."""
    extract = EXTRACTORS.get(section["kind"])
    out = []
    for p in extract(section) if extract else []:
        roof = {}
        for dev in devices:
            if p["device"] in (None, dev.key):
                tensor = dev.peak("matrix", dtype)
                peak = tensor if p["unit"] == "matrix" else dev.peak("vector", dtype) or tensor
                roof[dev.key] = p["flops_per_s"] if p["flops_per_s"] is not None else \
                    attainable(p["intensity"], peak, dev.bandwidth)
        out.append(dict(p, roof=roof))
    return out
