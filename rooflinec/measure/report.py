"""The measured report: each op's measured time beside its roofline, as data, then Markdown,
JSON and one roofline chart (measured and predicted points)."""

from __future__ import annotations

import json
import math

from rooflinec.base import roofline
from rooflinec.measure.model import TOLERANCE, Measurement
from rooflinec.cost.chartpoints import point
from rooflinec.render import charts
from rooflinec.render.pages import environment


def step_bytes(m: Measurement) -> float:
    """Bytes the whole step moves, by the cost model: what streams through the cache between
    two reads of one weight or KV entry (each is read once per step)."""
    return sum(p.bytes for p in m.predicted.values())


def _from_cache(p, streamed: float, cache: int | None) -> bool:
    """Whether op `p` may find its data in the last-level cache, and so beat the memory
    roofline. Its fresh data (activations an earlier op just wrote) stays there when one
    launch's bytes fit; its weights and KV cache were last read a step ago, so they stay only
    when the whole step's bytes (`streamed`) fit too. Replacement is taken as LRU: a scan
    longer than the cache leaves none of it behind."""
    if cache is None:
        return False
    return p.bytes / p.launches <= cache and (not p.resident or streamed <= cache)


def _row(name: str, parts: list, m: Measurement) -> dict:
    """One measured range against the roofline of the ops it covers (one op, or a group)."""
    dev, prof = m.device, m.profile
    flops, nbytes = sum(p.flops for p in parts), sum(p.bytes for p in parts)
    predicted = sum(p.time for p in parts)
    launches = max(p.launches for p in parts)
    per_launch = min(p.bytes / p.launches for p in parts)
    # a group is checked only when none of its ops can run from the cache
    in_cache = any(_from_cache(p, step_bytes(m), dev.cache_size) for p in parts)
    row = {"op": name, "covers": list(m.groups.get(name, [name])), "category": parts[0].category,
           "unit": parts[0].unit if len({p.unit for p in parts}) == 1 else "mixed",
           "launches": launches, "flops": flops, "bytes": nbytes, "bytes_per_launch": per_launch,
           "resident_bytes": sum(p.resident for p in parts),
           "intensity": flops / nbytes if nbytes else None,
           "bound": "/".join(sorted({p.bound for p in parts})),
           "predicted_s": predicted, "in_cache": in_cache, "ran": name in prof.ops,
           "measured_s": None, "best_s": None, "fraction": None, "cache_roofline_s": None,
           "cache_fraction": None, "law": "not run"}
    if not row["ran"]:
        return row
    row.update(measured_s=prof.median(name), best_s=prof.best(name))
    if not row["measured_s"]:   # a range that launched no kernel on the GPU
        row["law"] = "no time"
        return row
    row["fraction"] = predicted / row["measured_s"]
    if in_cache and dev.cache_bandwidth:
        row["cache_roofline_s"] = sum(roofline.time(p.flops, p.bytes, dev.peak(p.unit, m.dtype) or math.inf,
                                                        dev.cache_bandwidth) for p in parts)
        row["cache_fraction"] = row["cache_roofline_s"] / row["measured_s"]
    if in_cache:
        row["law"] = "in cache"
    else:
        row["law"] = "holds" if row["best_s"] >= (1 - TOLERANCE) * predicted else "broken"
    return row


def _ranges(m: Measurement) -> list[tuple[str, list]]:
    """(range name, its ops' predictions) in program order; a group at its first op."""
    member = {op: group for group, ops in m.groups.items() for op in ops}
    seen, out = set(), []
    for op in m.predicted:
        name = member.get(op, op)
        if name not in seen:
            seen.add(name)
            out.append((name, [m.predicted[o] for o in m.groups.get(name, [name]) if o in m.predicted]))
    return out


def build(m: Measurement) -> dict:
    """The report as JSON-ready data."""
    prof, dev = m.profile, m.device
    rows = [_row(name, parts, m) for name, parts in _ranges(m)]
    known = {r["op"] for r in rows}
    extra = {op: prof.median(op) for op in prof.ops if op not in known}
    unmapped = sorted({**prof.unmapped, **{f"op range {k} (not in the spec)": v
                                           for k, v in extra.items()}}.items(),
                      key=lambda kv: -kv[1])
    total = prof.mapped_time + prof.unmapped_time
    return {
        "model": {"key": m.model.key, "name": m.model.name, "layers": m.model.n_layers,
                  "source": m.model.source},
        "device": {**device_entry(dev, m.dtype),
                   "cache_size": dev.cache_size, "cache_bandwidth": dev.cache_bandwidth},
        "workload": {"phase": m.phase, "batch": m.batch, "context": m.context, "dtype": m.dtype},
        "ran_on": m.on, "tool": m.tool, "steps": prof.steps, "tolerance": TOLERANCE,
        "implementation": m.implementation, "conventions": m.conventions,
        "timer": "CUDA kernel time (torch.profiler)" if m.on.startswith("cuda")
                 else "CPU time of each op range (torch.profiler)",
        "coverage": prof.coverage, "profiled_s": total, "mapped_s": prof.mapped_time,
        "step_bytes": step_bytes(m),
        "predicted_s": sum(r["predicted_s"] for r in rows if r["ran"]),
        "rows": rows,
        "unmapped": [{"kernel": k, "time_s": v, "share": v / total if total else 0.0}
                     for k, v in unmapped],
        "broken": [r["op"] for r in rows if r["law"] == "broken"],
    }


def chart(report: dict) -> dict:
    """The device's roofline with each op twice: on its roof (predicted) and where it ran."""
    dev = report["device"]
    pts = []
    for r in report["rows"]:
        if not (r["ran"] and r["flops"] and r["measured_s"]):
            continue   # a pure data move has no place on a FLOP/s axis
        # FLOPs over the roofline time: the roof itself for one op, and for a group the rate
        # its ops' rooflines allow together
        pts.append(point(r["op"], "predicted (roofline)", r["intensity"], r["unit"],
                         flops_per_s=r["flops"] / r["predicted_s"]))
        pts.append(point(r["op"], "measured", r["intensity"], r["unit"],
                         flops_per_s=r["flops"] / r["measured_s"]))
    w = report["workload"]
    return {"kind": "roofline", "name": "measured",
            "title": f"{report['model']['name']}, {w['phase']} B={w['batch']} S={w['context']}: "
                     f"measured vs roofline",
            "device": dev, "points": [dict(p, attained=p["flops_per_s"]) for p in pts]}


def render(report: dict, stem: str) -> dict[str, str]:
    """File name -> text: <stem>.md, <stem>.json, <stem>.svg."""
    svg = charts.draw(chart(report))
    md = environment(False, markdown=True).get_template("measure.md.j2").render(r=report, chart=f"{stem}.svg")
    return {f"{stem}.md": md, f"{stem}.json": json.dumps(report, indent=1) + "\n", f"{stem}.svg": svg}


def device_entry(dev, dtype: str) -> dict:
    """The device as the report and its chart read it: peaks at `dtype`, bandwidth, and the
    ridges the roofline's owner computes."""
    tensor, vector = dev.peak("matrix", dtype), dev.peak("vector", dtype)
    return {"key": dev.key, "name": dev.name, "tensor_peak": tensor, "vector_peak": vector,
            "bandwidth": dev.bandwidth, "ridge_matrix": roofline.ridge(tensor, dev.bandwidth),
            "ridge_vector": roofline.ridge(vector, dev.bandwidth), "source": dev.source}
