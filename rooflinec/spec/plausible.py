"""Plausibility: hardware figures far outside what any accelerator has are most likely a unit
slip (`4.0 GB/s` written for 4.0 TB/s of HBM). They are warned about, located, not refused:
a spec may describe a device unlike any today."""

from __future__ import annotations

from rooflinec.base import roofline
from rooflinec.base.quantities import si

# generous bounds around every accelerator shipped so far (a 2017 V100 to a 2024 B200, a TPU,
# a workstation card) and the CPUs `measure device` describes: memory bandwidth in B/s, the
# tensor ridge in FLOP/B. A thousandfold unit slip in either figure lands outside one of them.
BANDWIDTH = (1e9, 100e12)
RIDGE = (2.0, 5000.0)


def _outside(value: float, bounds: tuple[float, float]) -> bool:
    return not bounds[0] <= value <= bounds[1]


def device_warnings(doc, device) -> tuple[str, ...]:
    """Located warnings for `device`'s figures, loaded from `doc`."""
    found = []
    if _outside(device.bandwidth, BANDWIDTH):
        found.append(doc.problem(("memory", "bandwidth"), (
            f"memory bandwidth {si(device.bandwidth, 'B/s')} is far outside any accelerator "
            f"({si(BANDWIDTH[0], 'B/s')} to {si(BANDWIDTH[1], 'B/s')}); check its unit (GB/s, TB/s)")))
    for dtype, peak in device.tensor.items():
        ridge = roofline.ridge(peak, device.bandwidth)
        if _outside(ridge, RIDGE):
            found.append(doc.problem(("compute", "tensor", dtype), (
                f"the {dtype} ridge, peak / bandwidth = {ridge:,.1f} FLOP/B, is far outside any "
                f"accelerator ({RIDGE[0]:g} to {RIDGE[1]:g}); check the units of the peak and "
                "the bandwidth")))
    return tuple(str(p) for p in found)
