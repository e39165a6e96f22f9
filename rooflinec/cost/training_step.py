"""One training step op by op on a device: forward, backward and recomputed FLOPs, bytes and
roofline times for one sequence of T tokens, under the stated rules:

- backward: a matrix op's two gradient products (for its input and for its weight) do twice
  its forward FLOPs and move twice its forward bytes; a vector op's backward is counted as
  moving its forward bytes once more (read the output gradient, write the input gradient)
  and, as the model-FLOPs convention does, doing no FLOPs worth counting;
- recomputation: the policy's share of the op's forward (dense or attention part) again.
Each part is timed max(FLOPs / peak, bytes / bandwidth), parts and ops one after another.
"""

from __future__ import annotations

from rooflinec.cost.efficiency import ATTENTION, RECOMPUTE
from rooflinec.base.errors import DeviceLacks
from rooflinec.model.symbols import B, S
from rooflinec.base.roofline import roofline


def ledger(ctx, program, device, sequence: int, policy: str) -> dict:
    """The per-op training step of `program` (the training forward) for one sequence; where
    the device lacks a figure an op needs, only what it lacks (`lacks`)."""
    try:
        forward = ctx.ledger(program, device, {B: 1, S: sequence})
    except DeviceLacks as exc:
        return {"device": device.key, "lacks": str(exc)}
    dense_share, attention_share, _ = RECOMPUTE[policy]
    rows, totals = [], {"flops": 0.0, "bytes": 0.0, "time_s": 0.0}
    for r in forward.rows:
        matrix = r.op.unit == "matrix"
        share = float(attention_share if r.op.category in ATTENTION else dense_share)
        parts = {"forward": (r.flops, r.bytes),
                 "backward": (2 * r.flops if matrix else 0.0, (2 if matrix else 1) * r.bytes),
                 "recompute": (share * r.flops, share * r.bytes) if share else (0, 0)}
        row = {"op": r.op.name, "category": r.op.category, "unit": r.op.unit, "count": r.count}
        for name, (flops, nbytes) in parts.items():
            t = roofline(flops, nbytes, r.unit_peak, device.bandwidth).time if nbytes else 0
            row[name] = {"flops": flops, "bytes": nbytes, "time_s": t}
        row["time_s"] = sum(row[p]["time_s"] for p in parts)
        rows.append(row)
        for p in parts:
            totals["flops"] += row[p]["flops"]
            totals["bytes"] += row[p]["bytes"]
        totals["time_s"] += row["time_s"]
    sums = {p: {k: sum(row[p][k] for row in rows) for k in ("flops", "bytes", "time_s")}
            for p in ("forward", "backward", "recompute")}
    return {"device": device.key, "lacks": None, "sequence": sequence, "policy": policy, "rows": rows,
            "parts": sums, "totals": totals,
            "tokens_per_s_per_chip": sequence / totals["time_s"]}
