"""The accelerator catalog: peaks, bandwidth, ridges, on-chip memory, and how they grew."""

from __future__ import annotations

from rooflinec.analyses import analysis
from rooflinec.base.errors import SpecError
from rooflinec.base.roofline import ridge


def _tensor(dev, dtypes):
    """(dtype, peak) of the first of `dtypes` the device lists, else (None, None)."""
    return next(((d, dev.tensor[d]) for d in dtypes if d in dev.tensor), (None, None))


def _row(dev, dtypes) -> dict:
    dtype, tensor = _tensor(dev, dtypes)
    vector = dev.peak("vector", "fp32")
    sram = dev.sm_count * dev.sram_per_sm if dev.sram_per_sm is not None else None
    return {
        "key": dev.key, "name": dev.name, "year": dev.year, "dtype": dtype,
        "tensor_peak": tensor, "vector_peak": vector, "bandwidth": dev.bandwidth,
        "capacity": dev.capacity, "ridge_tensor": ridge(tensor, dev.bandwidth),
        "ridge_vector": ridge(vector, dev.bandwidth),
        "vector_over_tensor": vector / tensor if vector else None,
        "sm_count": dev.sm_count, "sram_per_sm": dev.sram_per_sm, "sram_total": sram,
        "capacity_over_sram": dev.capacity / sram if sram else None,
    }


def _pair(rows: dict, old: str, new: str) -> dict:
    a, b = rows[old], rows[new]
    return {"from": old, "to": new, "years": [a["year"], b["year"]],
            "compute": b["tensor_peak"] / a["tensor_peak"], "bandwidth": b["bandwidth"] / a["bandwidth"],
            "capacity": b["capacity"] / a["capacity"],
            "ridge_from": a["ridge_tensor"], "ridge_to": b["ridge_tensor"],
            "ridge": b["ridge_tensor"] / a["ridge_tensor"]}


def _check(ctx, dtypes, pairs) -> None:
    problems = [ctx.problem(("devices", i), f"device '{d.key}' lists no tensor peak for "
                                            f"{' or '.join(dtypes)}; it has: {', '.join(d.tensor)}")
                for i, d in enumerate(ctx.devices) if _tensor(d, dtypes)[0] is None]
    problems += [p for i, pair in enumerate(pairs)
                 for p in ctx.device_problems(("analyses", "accelerators", "compare", i), pair)]
    if problems:
        raise SpecError(problems)


@analysis("accelerators", "Accelerators", needs_model=False)
def accelerators(ctx, params) -> dict:
    dtypes = params.dtypes or [ctx.study.dtype]
    pairs = params.compare or []
    _check(ctx, dtypes, pairs)
    rows = {d.key: _row(d, dtypes) for d in ctx.devices}
    return {"dtypes": dtypes, "rows": list(rows.values()),
            "pairs": [_pair(rows, old, new) for old, new in pairs],
            "links": [_links(d) for d in ctx.devices if d.link or d.network]}


def _links(dev) -> dict:
    """What joins the device to others: its scale-up link and scale-out network, as declared."""
    return {"key": dev.key, "link": dev.link or None, "link_bandwidth": dev.link_bandwidth,
            "link_latency": dev.link_latency, "domain": dev.link_domain,
            "network": dev.network or None, "network_bandwidth": dev.network_bandwidth,
            "network_latency": dev.network_latency}
