"""Per-projection GEMM intensity at given token counts, and where each crosses the ridge."""

from rooflinec.model import quant
from rooflinec.model import symbols as sym
from rooflinec.analyses import analysis
from rooflinec.analyses.derivations import over_budget
from rooflinec.cost.derive import crossing
from rooflinec.base.errors import SpecError
from rooflinec.cost.evaluate import number
from rooflinec.model.ir import intensity
from rooflinec.base.roofline import regime


def _groups(ctx, params, linear):
    names = [op.name for op in linear]
    groups = params.groups or [[n] for n in names]
    problems = [ctx.problem(("analyses", "gemm_intensity", "groups", i, j),
                            f"no linear op '{name}' in {ctx.model.name}; linear ops: {', '.join(names)}")
                for i, group in enumerate(groups) for j, name in enumerate(group) if name not in names]
    if problems:
        raise SpecError(problems)
    return groups


def _one(values):
    """The value every point shares, or None where they differ (a mixture of experts' GEMMs
    read the distinct experts their M*k routings touch, more as M grows)."""
    values = set(values)
    return values.pop() if len(values) == 1 else None


@analysis("gemm_intensity", "GEMM intensity per projection")
def gemm_intensity(ctx, params) -> dict:
    linear = [op for op in ctx.program("decode").ops if op.category == "linear"]
    by_name = {op.name: op for op in linear}
    rows = []
    for group in _groups(ctx, params, linear):
        ops = [by_name[n] for n in group]
        points = []
        for m in params.tokens:
            values = [number(intensity(op.cost), {**ctx.values, op.crossing: m}) for op in ops]
            points.append({"tokens": m, "intensity": values[0], "spread": max(values) - min(values),
                           "weight_elements": number(quant.weight_elements(ops[0].cost),
                                                     {**ctx.values, ops[0].crossing: m}),
                           "regime": {d.key: regime(values[0], ctx.ridge(d)) for d in ctx.devices}})
        found = {d.key: crossing(intensity(ops[0].cost), ops[0].crossing, ctx.values, ctx.ridge(d))
                 for d in ctx.devices}
        rows.append({"ops": group, "label": " / ".join(group), "shape": ops[0].shape,
                     "weight_elements": _one(p["weight_elements"] for p in points),
                     "points": points, "crossing": {k: c.at for k, c in found.items()},
                     "formula": intensity(ops[0].cost), "variable": ops[0].crossing.name,
                     **over_budget(found)})
    return {"tokens": params.tokens, "rows": rows, "curves": _curves(ctx, rows)}


def sweep_range(crossings: list[int | None], lo: int = 1) -> tuple[int, int]:
    """Tokens in flight from 1 to a power of two past every crossing (at least 4096)."""
    top = max([4096, *(2 * c for c in crossings if c is not None)])
    return lo, 1 << (top - 1).bit_length()


def _curves(ctx, rows, n: int = 49) -> dict:
    """Each row's intensity at n tokens-in-flight counts, log-spaced, and at each crossing:
    what the chart of this section draws."""
    lo, hi = sweep_range([r["crossing"][d.key] for r in rows for d in ctx.devices])
    xs = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    lines = []
    for r in rows:
        var = sym.ALPHABET[r["variable"]]
        at = lambda x: number(r["formula"], {**ctx.values, var: x})  # noqa: E731
        marks = [{"device": d.key, "at": r["crossing"][d.key], "intensity": at(r["crossing"][d.key])}
                 for d in ctx.devices if r["crossing"][d.key] is not None]
        lines.append({"label": r["label"], "variable": r["variable"], "y": [at(x) for x in xs],
                      "crossings": marks})
    return {"x": xs, "lines": lines}
