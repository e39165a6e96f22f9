"""`rooflinec explain SPEC OP`: one op's derivation, as text for a terminal."""

from rooflinec import spec
from rooflinec.workbench import Workbench
from rooflinec.analyses.derivations import op_derivation
from rooflinec.errors import DeviceLacks, RooflineError, UsageError
from rooflinec.passes import DEFAULT_VARIANT
from rooflinec.render import environment


def explain(path: str, op_name: str) -> str:
    ctx = Workbench(spec.load_study(path))
    if ctx.model is None:
        raise RooflineError(f"{path}: explain needs a study with a model; this one lists devices or ops only")
    phases = []
    for phase in ("decode", "prefill"):
        # an op of the naive program, else of the default variant (the attention kernel)
        program = ctx.program(phase)
        names = [op.name for op in program.ops]
        if op_name not in names:
            program = _kernel_program(ctx, phase) or program
            names += [op.name for op in program.ops if op.name not in names]
        if op_name not in names:
            raise UsageError(f"{path}: no op '{op_name}' in {ctx.model.name}; ops: {', '.join(names)}")
        phases.append({"phase": phase, "bindings": program.bindings,
                       "op": op_derivation(ctx, program.op(op_name))})
    return environment(False).get_template("explain.txt.j2").render(
        model=ctx.model.name, name=op_name, phases=phases, devices=ctx.devices)


def _kernel_program(ctx, phase: str):
    """The default variant's program on the first device (its attention kernel); None where
    that device lacks a figure the variant needs."""
    try:
        return ctx.program(phase, DEFAULT_VARIANT, ctx.devices[0])
    except DeviceLacks:
        return None
