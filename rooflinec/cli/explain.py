"""`rooflinec explain SPEC OP`: one op's derivation, as text for a terminal. An op whose form
depends on the device (FlashAttention's tiles) is derived once per form, with the devices it
holds on; a device lacking a figure the variant needs is named with what it lacks."""

from rooflinec.spec import load as spec
from rooflinec.analyses.derivations import op_derivation
from rooflinec.base.errors import DeviceError, RooflineError, UsageError
from rooflinec.model.passes import DEFAULT_VARIANT
from rooflinec.render.pages import environment
from rooflinec.cost.workbench import Workbench
import sympy as sp


def explain(path: str, op_name: str, variant: str | None = None) -> str:
    ctx = Workbench(spec.load_study(path))
    if ctx.model is None:
        raise RooflineError(f"{path}: explain needs a study with a model; this one lists devices or ops only")
    phases = []
    for phase in ("decode", "prefill"):
        forms, lacking, names = _forms(ctx, phase, op_name, variant)
        if not forms:
            raise UsageError(f"{path}: no op '{op_name}' in {ctx.model.name}; ops: {', '.join(names)}")
        phases.append({"phase": phase, "bindings": ctx.program(phase).bindings, "lacking": lacking,
                       "forms": [_with_values(ctx, op_derivation(ctx, op, devs), op, devs)
                                 for op, devs in forms]})
    return environment(False).get_template("explain.txt.j2").render(
        model=ctx.model.name, name=op_name, phases=phases, devices=ctx.devices)


def _forms(ctx, phase: str, name: str, variant: str | None):
    """([(op, devices)] one per form of the op, [(device, what it lacks)], every op name).
    With no variant: the naive program's op, else the default variant's kernel."""
    naive = ctx.program(phase)
    names = [op.name for op in naive.ops]
    if variant is None and name in names:
        return [(naive.op(name), None)], [], names
    forms, lacking = {}, []
    for dev in ctx.devices:
        try:
            program = ctx.program(phase, variant or DEFAULT_VARIANT, dev)
        except DeviceError as exc:
            lacking.append((dev.key, str(exc)))
            continue
        names += [op.name for op in program.ops if op.name not in names]
        if name in [op.name for op in program.ops]:
            forms.setdefault(program.op(name), []).append(dev)
    if len(forms) == 1 and not lacking:
        return [(next(iter(forms)), None)], lacking, names
    return list(forms.items()), lacking, names


def _value(ctx, expr):
    """`expr` at the model's dimensions as a float (3584/449 also as 7.982), or None where
    it is an integer already or not a finite number."""
    if expr is None or sp.sympify(expr).is_Integer:   # an integer needs no decimal
        return None
    value = sp.sympify(expr).xreplace(ctx.values)
    return float(value) if value.is_number and value.is_finite else None


def _with_values(ctx, form: dict, op, devices) -> dict:
    """The derivation plus its limit and suprema as decimals at the model's dimensions, and,
    for an op with no crossing knob whose limit in S is finite, each device's ridge against it."""
    form["limit_value"] = _value(ctx, form["limit_S"])
    for c in form["crossings"]:
        c["supremum_value"] = _value(ctx, c["supremum"])
    form["against_limit"] = []
    if not form["crossings"] and form["limit_value"] is not None and op.cost.flops != 0:
        for dev in devices or ctx.devices:
            form["against_limit"].append({"device": dev.key, "ridge": float(ctx.ridge(dev, op.unit)),
                                          "below": form["limit_value"] < ctx.ridge(dev, op.unit)})
    return form
