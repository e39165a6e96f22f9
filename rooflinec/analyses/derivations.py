"""For each op: FLOPs, bytes and intensity as formulas, what the intensity depends on,
its limit as the context grows, and the exact ridge crossing on each device."""

from rooflinec.model import symbols as sym
from rooflinec.analyses import analysis
from rooflinec.cost.derive import crossing, derive


def op_derivation(ctx, op, devices=None) -> dict:
    """`devices`: the devices this form of the op runs on (None: all, the op is the same on each)."""
    d = derive(op)
    crossings = []
    if op.crossing is not None and op.cost.flops != 0:
        for dev in devices or ctx.devices:
            c = crossing(d.intensity, op.crossing, ctx.values, ctx.ridge(dev, op.unit))
            crossings.append({"device": dev.key, "variable": c.variable, "at": c.at,
                              "supremum": c.supremum, "ridge": float(ctx.ridge(dev, op.unit)),
                              **budget_flags(budget_expired=c.budget_expired)})
    workload = set(sym.WORKLOAD)
    return {
        "op": op.name, "label": op.label, "category": op.category, "unit": op.unit,
        "shape": op.shape, "repeat": op.repeat, "flops": d.flops, "bytes": d.bytes,
        "traffic": [{"class": cls, "bytes": expr} for cls, expr in op.cost.traffic],
        "intensity": d.intensity, "depends_on": [s.name for s in d.depends_on],
        "workload_free": not (set(d.depends_on) & workload), "limit_S": d.limit_S,
        "crossings": crossings, "devices": [dev.key for dev in devices] if devices else None,
        **budget_flags(simplified=not d.simplified, limit_expired=d.limit_expired),
    }


def budget_flags(**expired: bool) -> dict:
    """A size budget a step was past, stated in the result (`simplified` as False, the others True);
    only where one did, so a study that stays within its budgets reads as before."""
    return {k: k != "simplified" for k, hit in expired.items() if hit}


def over_budget(crossings: dict) -> dict:
    """The devices (by key) whose crossing was not found within its size budget, where any."""
    keys = [key for key, c in crossings.items() if c.budget_expired]
    return {"crossing_over_budget": keys} if keys else {}


def program_ops(ctx, phase: str, variant: str) -> list[tuple]:
    """(op, devices) in program order; an op whose form differs by device (FlashAttention's
    tiles) appears once per form with the devices it holds on, else once with None."""
    programs = [(dev, ctx.program(phase, variant, dev)) for dev in ctx.devices]
    out = []
    for i, op in enumerate(programs[0][1].ops):
        forms: dict = {}
        for dev, program in programs:
            forms.setdefault(program.ops[i], []).append(dev)
        out.extend((o, None if len(forms) == 1 else devs) for o, devs in forms.items())
    return out


def collective_derivation(c) -> dict:
    """A collective's bytes as formulas: the payload, and what each device sends (ring model)."""
    return {"name": c.name, "kind": c.kind, "devices": c.devices, "group": c.group,
            "repeat": c.repeat, "payload": c.payload, "volume": c.volume, "steps": c.steps,
            "after": c.after, "why": c.why}


@analysis("derivations", "Derivations")
def derivations(ctx, params) -> dict:
    phases = params.phases
    variant = params.variant
    return {"variant": variant,
            "phases": [{"phase": phase,
                        "bindings": {str(k): v for k, v in ctx.program(phase).bindings.items()},
                        "conventions": list(ctx.program(phase).conventions),
                        "ops": [op_derivation(ctx, op, devs) for op, devs in program_ops(ctx, phase, variant)],
                        "collectives": [collective_derivation(c)
                                        for c in ctx.program(phase, variant, ctx.devices[0]).collectives]}
                       for phase in phases]}
