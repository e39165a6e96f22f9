"""`rooflinec explain SPEC OP`: one op's derivation, as text for a terminal."""

from rooflinec import spec
from rooflinec.analyses import Context
from rooflinec.analyses.derivations import op_derivation
from rooflinec.errors import RooflineError
from rooflinec.render import environment


def explain(path: str, op_name: str) -> str:
    ctx = Context(spec.load_study(path))
    phases = []
    for phase in ("decode", "prefill"):
        # an op of the naive program, else of the flash variant (the attention kernel)
        unfused, fused = ctx.program(phase), ctx.program(phase, "flash", ctx.devices[0])
        program = unfused if op_name in {op.name for op in unfused.ops} else fused
        names = list(dict.fromkeys(op.name for op in unfused.ops + fused.ops))
        if op_name not in names:
            raise RooflineError(f"{path}: no op '{op_name}' in {ctx.model.name}; ops: {', '.join(names)}")
        phases.append({"phase": phase, "bindings": program.bindings,
                       "op": op_derivation(ctx, program.op(op_name))})
    return environment(False).get_template("explain.txt.j2").render(
        model=ctx.model.name, name=op_name, phases=phases, devices=ctx.devices)
