"""What the charts show, read from the report dict; drawing lives in charts.py.

A chart point is one small dict that the analyses' section carries under `chart_points`
(built by rooflinec/cost/chartpoints.py, which documents its fields); here each point only finds
its height on each device's chart, already computed (`roof`), so the render stage computes
nothing.
"""

from __future__ import annotations

import re

from rooflinec.cost.finite import settle

def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"


def _roofline_charts(index: int, section: dict, report: dict) -> list[dict]:
    pts = section.get("chart_points", [])
    charts = []
    for dev in report["devices"]:
        mine = [dict(p, attained=p["roof"][dev["key"]]) for p in pts if dev["key"] in p["roof"]]
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
    variant and dtype; where a series turns compute-bound, a mark; which points fit memory."""
    groups = list(dict.fromkeys((s["device"], s["dtype"], s["variant"]) for s in section["series"]))
    lines = []
    for s in section["series"]:
        cross = None
        if s["crossing"] is not None and s["crossing"] in s["x"]:
            cross = {"at": s["crossing"], "tokens_per_s": s["tokens_per_s"][s["x"].index(s["crossing"])]}
        lines.append({"label": _fixed(s["fixed"]), "group": groups.index((s["device"], s["dtype"], s["variant"])),
                      "x": s["x"], "y": s["tokens_per_s"], "fits": s["fits"], "crossing": cross})
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


def catalog_roofline(index: int, section: dict, report: dict) -> dict | None:
    """Every device of the accelerator table on one roofline: its tensor roof at its dtype,
    the ridge marked, the vector roof dashed."""
    rows = [r for r in section.get("rows", ()) if r.get("ridge_tensor")]   # a tensor roof to draw
    if not rows:
        return None
    return {"kind": "catalog", "section": index, "name": f"{slug(section['kind'])}-rooflines",
            "title": "The devices on one roofline: tensor peak at each device's dtype, ridge marked",
            "alt": "Roofline of every device in the table on one log-log chart, tensor roofs with "
                   "their ridge points and vector roofs dashed",
            "devices": rows}


def published_bars(index: int, section: dict, report: dict) -> dict | None:
    """Each published run's utilisation: the figure computed here (MFU or HFU, as the run
    counts) beside the one its paper quotes (a range where it gives one)."""
    rows = [r for r in section.get("rows", ()) if r.get("value") is not None or r.get("quoted")]
    if not rows:
        return None
    return {"kind": "bars", "section": index, "name": f"{slug(section['kind'])}-utilisation",
            "title": "Utilisation of published training runs: computed and quoted",
            "alt": "Horizontal bars of each published run's utilisation, computed from its "
                   "throughput beside the figure its paper quotes",
            "labels": [f"{r['name']} ({r['counts']} FLOPs)" for r in rows],
            "series": {"computed here": [r.get("value") for r in rows],
                       "quoted (low)": [r["quoted"][0] if r.get("quoted") else None for r in rows],
                       "quoted (high)": [r["quoted"][1] if r.get("quoted") else None for r in rows]},
            "xlabel": "fraction of peak"}


def training_bars(index: int, section: dict, report: dict) -> dict | None:
    """MFU and HFU of the run under each way of counting FLOPs per token."""
    accounts = section.get("accounts") or []
    if not accounts:
        return None
    return {"kind": "bars", "section": index, "name": f"{slug(section['kind'])}-mfu-hfu",
            "title": f"MFU and HFU of the run ({section['policy']} recomputation)",
            "alt": "Horizontal bars of model FLOPs utilisation and hardware FLOPs utilisation "
                   "under each way of counting FLOPs per token",
            "labels": [a["name"] for a in accounts],
            "series": {"MFU": [a["mfu"] for a in accounts], "HFU": [a["hfu"] for a in accounts]},
            "xlabel": "fraction of peak"}


def scaling(index: int, section: dict, report: dict) -> dict | None:
    """Step time and MFU against the number of devices, a point per run; a run whose
    per-device memory does not fit is drawn hollow."""
    runs = section.get("runs") or []
    if not runs:
        return None
    return {"kind": "scaling", "section": index, "name": f"{slug(section['kind'])}-scaling",
            "title": "Step time and MFU against devices",
            "alt": "Two panels against the number of GPUs: the step's time (with the pipeline "
                   "bubble, and with communication too) and its MFU and HFU beside the published "
                   "figure, each series beside the others at a run's GPUs; hollow where a run's memory does not fit",
            "runs": [{"name": r["name"], "gpus": r["gpus"], "step_s": r["step_s"],
                      "pipelined_s": r["pipelined_s"], "fits": r["fits"],
                      "mfu": r["overlapped"]["mfu"], "hfu": r["overlapped"]["hfu"],
                      "published": _published_fraction(r["published"])} for r in runs]}


def _published_fraction(published: dict) -> float | None:
    """The fraction of peak a run's paper gives: its MFU (the first quoted), else its share."""
    if published.get("mfu"):
        return published["mfu"][0]
    return published.get("peak_fraction")


SWEEPS = {"gemm_intensity": gemm_sweep, "sweep": throughput_sweep, "accelerators": catalog_roofline,
          "published_efficiency": published_bars, "training": training_bars,
          "training_at_scale": scaling}
SPLITS = {"parallel_view": tp_split}


def for_section(report: dict, section: dict) -> dict:
    """The report as one section sees it: the devices that section could evaluate."""
    lacking = {row["device"] for row in section.get("lacking", ())}
    if not lacking:
        return report
    return {**report, "devices": [d for d in report["devices"] if d["key"] not in lacking]}


CHART_RANGE = (1e-100, 1e100)   # magnitudes a log axis is drawn over; 0 is left to the chart


def _outside(node) -> float | None:
    """A number in a chart's data that no log axis can show, if any."""
    if isinstance(node, dict):
        node = list(node.values())
    if isinstance(node, (list, tuple)):
        return next((x for x in map(_outside, node) if x is not None), None)
    if isinstance(node, (int, float)) and not isinstance(node, bool) and node != 0:
        if not CHART_RANGE[0] <= abs(node) <= CHART_RANGE[1]:   # NaN fails too
            return node
    return None


def _checked(chart: dict) -> dict:
    """`chart`, or `chart` with `left_out` saying why it is not drawn (the report shows that)."""
    found: list = []
    chart = settle(chart, "", found)
    if found:
        return dict(chart, left_out=f"it would plot a number that is not finite ({found[0]}); the "
                                    "numbers are in the tables")
    bad = _outside({k: v for k, v in chart.items() if k != "section"})
    if bad is None:
        return chart
    return dict(chart, left_out=f"it would plot {float(bad):.3g}, outside the {CHART_RANGE[0]:g} to "
                                f"{CHART_RANGE[1]:g} a log axis here is drawn over; the numbers are in "
                                "the tables")


def plan_section(index: int, section: dict, report: dict) -> list[dict]:
    """The charts of one section: rooflines per device, then its sweep chart if any."""
    if section.get("omitted"):          # every device lacked a figure it needs
        return []
    report = for_section(report, section)
    charts = _roofline_charts(index, section, report)
    sweep = SWEEPS.get(section["kind"])
    extra = sweep(index, section, report) if sweep else None
    split = SPLITS.get(section["kind"])
    splits = split(index, section, report) if split else []
    return [_checked(c) for c in charts + ([extra] if extra else []) + splits]


def plan(report: dict) -> list[list[dict]]:
    """For each section, in order, the charts to draw."""
    return [plan_section(i, section, report) for i, section in enumerate(report["sections"])]
