"""For each op: FLOPs, bytes and intensity as formulas, what the intensity depends on,
its limit as the context grows, and the exact ridge crossing on each device."""

from rooflinec import symbols as sym
from rooflinec.analyses import analysis
from rooflinec.derive import crossing, derive


def op_derivation(ctx, op) -> dict:
    d = derive(op)
    crossings = []
    if op.crossing is not None and op.cost.flops != 0:
        for dev in ctx.devices:
            c = crossing(d.intensity, op.crossing, ctx.values, ctx.ridge(dev, op.unit))
            crossings.append({"device": dev.key, "variable": c.variable, "at": c.at,
                              "supremum": c.supremum, "ridge": float(ctx.ridge(dev, op.unit))})
    workload = set(sym.WORKLOAD)
    return {
        "op": op.name, "category": op.category, "unit": op.unit, "shape": op.shape,
        "repeat": op.repeat, "flops": d.flops, "bytes": d.bytes,
        "traffic": [{"class": cls, "bytes": expr} for cls, expr in op.cost.traffic],
        "intensity": d.intensity, "depends_on": [s.name for s in d.depends_on],
        "workload_free": not (set(d.depends_on) & workload), "limit_S": d.limit_S,
        "crossings": crossings,
    }


@analysis("derivations", "Derivations")
def derivations(ctx, params) -> dict:
    phases = params.get("phases", ["decode", "prefill"])
    return {"phases": [{"phase": phase,
                        "bindings": {str(k): v for k, v in ctx.program(phase).bindings.items()},
                        "conventions": list(ctx.program(phase).conventions),
                        "ops": [op_derivation(ctx, op) for op in ctx.program(phase).ops]}
                       for phase in phases]}
