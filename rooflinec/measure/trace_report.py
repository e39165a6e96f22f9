"""A trace's step against the cost model: each kernel group beside the roofline of the spec's
ops it stands for, the unmapped kernels, the step total, as data, Markdown, JSON and a chart.

The roofline is a lower bound per group: the least work a correct kernel does (the
conventions that do least: causal halving, logits for the last token, biases inside their
GEMM, q, k and v as one GEMM reading its input once; attention as one kernel moving only
compulsory traffic), and every other op as its own kernel through memory, as an eager run
launches it. A kernel name tells a GEMM from a norm, not q_proj from up_proj,
so the comparison is per group of ops (GEMMs, attention, norms, ...), not per op.
"""

from __future__ import annotations

import json
from dataclasses import replace

from rooflinec.model import passes
from rooflinec.measure.report import device_entry
from rooflinec.measure.trace import Trace, classify
from rooflinec.model.symbols import B, S, b
from rooflinec.cost.workbench import Workbench
from rooflinec.cost.chartpoints import point
from rooflinec.render import charts
from rooflinec.render.pages import environment

LEAST_WORK = {"causal_halving": True, "logits": "last", "bias": "in_gemm", "qkv": "fused"}


def bound_rows(model, device, dtype: str, phase: str, batch: int, context: int,
               quantization: dict | None = None):
    """The ledger rows of the eager program on one device: unfused ops, ideal attention."""
    bench = Workbench.of(model, [device], dtype, LEAST_WORK, quantization)
    unfused = bench.program(phase, "unfused")
    target = passes.Target(device, bench.conventions, model.head_dim, bench.values[b])
    eager = passes.verify(replace(passes.ideal_attention(unfused, target), variant="unfused"))
    return bench.ledger(eager, device, {B: batch, S: context}).rows


def _groups(rows, rules) -> dict:
    """Group name -> the spec ops it stands for (first rule naming a category takes it)."""
    owner, out = {}, {}
    for rule in rules:
        for cat in rule.categories:
            owner.setdefault(cat, rule.group)
    for r in rows:
        group = owner.get(r.op.category)
        if group is not None:
            out.setdefault(group, []).append(r)
    return out


def build(trace: Trace, model, device, dtype: str, phase: str, batch: int, context: int,
          rules, quantization: dict | None = None, workload_from: str = "given") -> dict:
    rows = bound_rows(model, device, dtype, phase, batch, context, quantization)
    ops = _groups(rows, rules)
    kernels, grouped = [], {}
    for name, calls in trace.kernels.calls.items():
        rule = classify(name, rules)
        group = rule.group if rule and rule.group in ops else None
        t = trace.kernels.time_us[name] / 1e6
        kernels.append({"kernel": name, "calls": calls, "time_s": t, "group": group,
                        "rule": rule.group if rule else None})
        if group:
            grouped.setdefault(group, []).append(kernels[-1])
    kernels.sort(key=lambda k: (-k["time_s"], k["kernel"]))
    total = trace.kernels.total_us / 1e6
    groups = [_group(g, ops[g], grouped.get(g, []), device) for g in ops]
    mapped = sum(g["measured_s"] for g in groups)
    return {
        "trace": {"file": trace.path, "device": trace.device, "steps": list(trace.steps),
                  "step": trace.step.number, "rule": trace.rule},
        "model": {"key": model.key, "name": model.name, "layers": model.n_layers},
        "device": device_entry(device, dtype),
        "workload": {"phase": phase, "batch": batch, "context": context, "dtype": dtype,
                     "from": workload_from},
        "conventions": dict(LEAST_WORK, attention="ideal (one kernel, compulsory traffic)"),
        "groups": groups,
        "kernels": kernels,
        "unmapped": [k for k in kernels if k["group"] is None],
        "kernel_s": total, "mapped_s": mapped, "coverage": mapped / total if total else 0.0,
        "span_s": (trace.kernels.last_us - trace.kernels.first_us) / 1e6,
        "model_step_s": sum(r.roof.time for r in rows),
        "violations": [g["group"] for g in groups if g["law"] == "broken"],
    }


def _group(name: str, rows, kernels: list, device) -> dict:
    flops, nbytes = sum(r.flops for r in rows), sum(r.bytes for r in rows)
    roof = sum(r.roof.time for r in rows)
    measured = sum(k["time_s"] for k in kernels)
    units = {r.op.unit for r in rows}
    law = "no kernel" if not kernels else ("holds" if measured >= roof else "broken")
    return {"group": name, "ops": [r.op.name for r in rows], "kernels": len(kernels),
            "calls": sum(k["calls"] for k in kernels), "flops": flops, "bytes": nbytes,
            "intensity": flops / nbytes if nbytes else None,
            "unit": units.pop() if len(units) == 1 else "matrix",
            "roofline_s": roof, "measured_s": measured,
            "fraction": roof / measured if measured else None, "law": law}


def violation(report: dict, group: str) -> str:
    """What a group under its roofline means, naming its kernels."""
    g = next(x for x in report["groups"] if x["group"] == group)
    names = [k["kernel"][:80] for k in report["kernels"] if k["group"] == group]
    return (f"group {group} ({', '.join(g['ops'])}): its kernels ran {g['measured_s']:.4g} s, under "
            f"the roofline {g['roofline_s']:.4g} s on {report['device']['name']}: a mapping bug "
            f"(these kernels do less than the ops mapped to them, or the workload B="
            f"{report['workload']['batch']} S={report['workload']['context']} is not the "
            f"trace's) or a spec error (the device's peaks, or the ops' cost): {names}")


def chart(report: dict) -> dict:
    """The device's roofline with each group twice: on its roof and where its kernels ran."""
    pts = []
    for g in report["groups"]:
        if not (g["flops"] and g["measured_s"] and g["roofline_s"]):
            continue
        pts.append(point(g["group"], "roofline (lower bound)", g["intensity"], g["unit"],
                         flops_per_s=g["flops"] / g["roofline_s"]))
        pts.append(point(g["group"], "measured (trace)", g["intensity"], g["unit"],
                         flops_per_s=g["flops"] / g["measured_s"]))
    w = report["workload"]
    return {"kind": "roofline", "name": "trace",
            "title": f"{report['model']['name']}, {w['phase']} B={w['batch']} S={w['context']}: "
                     f"trace vs roofline on {report['device']['name']}",
            "device": report["device"], "points": [dict(p, attained=p["flops_per_s"]) for p in pts]}


def render(report: dict, stem: str) -> dict[str, str]:
    """File name -> text: <stem>.md, <stem>.json, <stem>.svg."""
    svg = charts.draw(chart(report))
    md = environment(False, markdown=True).get_template("trace.md.j2").render(r=report, chart=f"{stem}.svg")
    return {f"{stem}.md": md, f"{stem}.json": json.dumps(report, indent=1) + "\n", f"{stem}.svg": svg}
