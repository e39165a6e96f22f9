"""What the charts show, computed from the report dict; drawing lives in charts.py.

A chart point is one small dict, the same for every section:

    {"label": "q_proj / o_proj",   # what the point is (annotated next to the marker)
     "series": "M = 256",          # one marker and colour per series (a variant, a phase ...)
     "intensity": 224.0,           # FLOPs / byte
     "unit": "matrix",             # which roof applies: "matrix" (tensor peak) or "vector"
     "device": None,               # only on this device's chart; None: on every device's
     "flops_per_s": None}          # achieved FLOP/s; None: on the roof, min(peak, I x bandwidth)

A section provides points either by carrying a `chart_points` list itself or through an
extractor registered here for its kind (`@points("ledger")`), so a new analysis plugs into
the roofline charts without touching the drawing code.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rooflinec.quantities import count

EXTRACTORS: dict[str, Callable[[dict, dict], list[dict]]] = {}


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
def _gemm(section: dict, report: dict) -> list[dict]:
    return [point(row["label"], f"M = {p['tokens']}", p["intensity"])
            for row in section["rows"] for p in row["points"]]


@points("attention_intensity")
def _attention(section: dict, report: dict) -> list[dict]:
    return [point(f"S = {p['context']}", f"{c['phase']}, {c['count']} bytes", p["intensity"])
            for c in section["cases"] for p in c["points"]]


@points("decode_view")
def _decode_view(section: dict, report: dict) -> list[dict]:
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
def _ledger(section: dict, report: dict) -> list[dict]:
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
def _operators(section: dict, report: dict) -> list[dict]:
    """Each operator at each of its argument sets; one series per operator."""
    return [point(_args(p["args"]), row["label"], p["intensity"], row["unit"])
            for row in section["rows"] for p in row["points"] if p["intensity"] > 0]


def section_points(section: dict, report: dict) -> list[dict]:
    extract = EXTRACTORS.get(section["kind"])
    return list(section.get("chart_points", [])) + (extract(section, report) if extract else [])


def attained(p: dict, device: dict) -> float:
    """Where a point sits: its achieved FLOP/s, or the roof at its intensity."""
    if p["flops_per_s"] is not None:
        return p["flops_per_s"]
    peak = device["tensor_peak"] if p["unit"] == "matrix" else device["vector_peak"] or device["tensor_peak"]
    return min(peak, p["intensity"] * device["bandwidth"])


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"


def _roofline_charts(index: int, section: dict, report: dict) -> list[dict]:
    pts = section_points(section, report)
    charts = []
    for dev in report["devices"]:
        mine = [dict(p, attained=attained(p, dev)) for p in pts if p["device"] in (None, dev["key"])]
        if mine:
            charts.append({"kind": "roofline", "section": index,
                           "name": f"roofline-{slug(section['kind'])}-{slug(dev['key'])}",
                           "title": f"{section['title']}: {dev['name']}",
                           "alt": f"Roofline of {dev['name']} with the points of '{section['title']}'",
                           "device": dev, "points": mine})
    return charts


def gemm_sweep(index: int, section: dict, report: dict) -> dict | None:
    """Intensity of each GEMM row against its workload knob: the curves the analysis computed."""
    curves = section.get("curves")
    if not curves or not curves["lines"]:
        return None
    lines = [{**line, "x": curves["x"]} for line in curves["lines"]]
    return {"kind": "sweep", "section": index, "name": f"{slug(section['kind'])}-sweep",
            "title": "GEMM intensity against tokens in flight",
            "alt": "GEMM intensity of each projection against tokens in flight, with each device's ridge",
            "devices": report["devices"], "lines": lines}


AXIS_NAMES = {"batch": "B", "context": "S", "tokens": "M"}
AXIS_WORDS = {"batch": "batch B", "context": "context S", "tokens": "tokens in flight M"}


def _fixed(fixed: dict) -> str:
    return ", ".join(f"{AXIS_NAMES[a]} = {v}" for a, v in fixed.items()) or "all"


def throughput_sweep(index: int, section: dict, report: dict) -> dict | None:
    """Tokens/s against the swept axis: a line per series (the other axes fixed) per device,
    variant and dtype; where a series turns compute-bound, a mark."""
    groups = list(dict.fromkeys((s["device"], s["dtype"], s["variant"]) for s in section["series"]))
    lines = []
    for s in section["series"]:
        cross = None
        if s["crossing"] is not None and s["crossing"] in s["x"]:
            cross = {"at": s["crossing"], "tokens_per_s": s["tokens_per_s"][s["x"].index(s["crossing"])]}
        lines.append({"label": _fixed(s["fixed"]), "group": groups.index((s["device"], s["dtype"], s["variant"])),
                      "x": s["x"], "y": s["tokens_per_s"], "crossing": cross})
    if not lines:
        return None
    return {"kind": "throughput", "section": index, "name": f"{slug(section['kind'])}-{section['x']}",
            "title": f"{section['phase'].capitalize()} tokens/s against {AXIS_WORDS[section['x']]}",
            "alt": f"Tokens per second of the {section['phase']} step against {AXIS_WORDS[section['x']]}, "
                   "one line per series and device, each crossing into compute-bound marked",
            "xlabel": AXIS_WORDS[section["x"]], "ylabel": "tokens/s (roofline bound)",
            "groups": [f"{d}, {v}" + (f", {t}" if len({g[1] for g in groups}) > 1 else "")
                       for d, t, v in groups],
            "lines": lines}


def tp_split(index: int, section: dict, report: dict) -> list[dict]:
    """A step's time split into compute-bound kernels, memory-bound kernels and collectives
    against tp: one chart per device and phase, at the section's last workload."""
    charts = []
    for d in section["devices"]:
        for st in d["steps"]:
            if st["workload"] != section["workloads"][-1]:
                continue
            w, rows = st["workload"], st["rows"]
            what = f"{st['phase']} step, B = {w['batch']}, S = {w['context']}"
            charts.append({
                "kind": "split", "section": index,
                "name": f"{slug(section['kind'])}-{slug(d['key'])}-{st['phase']}",
                "title": f"{d['key']}: {what}, per device against tp",
                "alt": f"Time of one {what} on one {d['key']}, stacked as compute-bound kernels, "
                       "memory-bound kernels and collectives, for each tensor-parallel degree",
                "tp": [r["tp"] for r in rows],
                "parts": {"compute-bound kernels": [r["compute_s"] for r in rows],
                          "memory-bound kernels": [r["memory_s"] for r in rows],
                          "collectives": [r["comm_s"] for r in rows]}})
    return charts


SWEEPS = {"gemm_intensity": gemm_sweep, "sweep": throughput_sweep}
SPLITS = {"parallel_view": tp_split}


def plan_section(index: int, section: dict, report: dict) -> list[dict]:
    """The charts of one section: rooflines per device, then its sweep chart if any."""
    charts = _roofline_charts(index, section, report)
    sweep = SWEEPS.get(section["kind"])
    extra = sweep(index, section, report) if sweep else None
    split = SPLITS.get(section["kind"])
    return charts + ([extra] if extra else []) + (split(index, section, report) if split else [])


def plan(report: dict) -> list[list[dict]]:
    """For each section, in order, the charts to draw."""
    return [plan_section(i, section, report) for i, section in enumerate(report["sections"])]
