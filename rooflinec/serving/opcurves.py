"""Per-op-class efficiency curves in the serving model (`rooflinec validate --op-efficiency`).

`validate-ops` fits, per op class, t = ((F / (eta P))^p + (B / (beta W))^p)^(1/p) + t0 on
measured kernels (rooflinec.serving.opfit). Given its ops.json, each kernel of the serving
model's step whose class has a curve is timed by that curve at the run's device peaks instead
of by the whole-step fractions; the kernels without one (attention: Vidur's public snapshot has
no attention profiles) keep the calibration's. The curves are carried as they came: no
parameter of theirs is refitted on serving rows. The calibration's own parameters (the
fraction for the remaining kernels, the time per layer) are fitted with the curves in place.

Which class a serving-model op is: a linear layer's GEMM is `gemm`; a norm is the model's norm
kind; `rope` and `embedding` by name. The serving model's step fuses epilogues (activations,
residual adds), so those classes have no kernel of their own there.
"""

from __future__ import annotations

import os

from rooflinec.serving import opfit, validate_ops, validate_runs
from rooflinec.serving.optable import CLASSES

SERVED = ("gemm", "rmsnorm", "layernorm", "rope", "embedding")   # the classes op_class gives


def op_class(run, op) -> str | None:
    """The op class of a serving-model kernel, or None (no curve for it)."""
    if op.category == "linear" and op.unit == "matrix":
        return "gemm"
    if op.category == "norm":
        return run.model.norm_kind if run.model.norm_kind in CLASSES else None
    return {"rope": "rope", "embedding": "embedding"}.get(op.name)


def op_time(curves: dict):
    """serving_model.step_cost's `op_time` for these curves (class -> opfit.Curve)."""
    def time(run, op, t_compute: float, t_memory: float) -> float | None:
        curve = curves.get(op_class(run, op))
        if curve is None:
            return None
        return float(opfit.smooth(t_compute / curve.compute_fraction, t_memory / curve.bandwidth_fraction,
                                  curve.sharpness)) + curve.overhead_s
    return time


def report(csv_file: str, specs_root: str | None, calibration_file: str | None, curves_file: str) -> dict:
    """validate_runs.report with the curves of `curves_file` (an ops.json) in the serving model."""
    curves = validate_ops.load_curves(curves_file)
    rep = validate_runs.report(csv_file, specs_root, calibration_file, op_time(curves))
    name, device, classes = (os.path.basename(curves_file), validate_ops.prior_device(curves_file),
                            [c for c in SERVED if c in curves])
    rep["op_efficiency"] = {"file": name, "device": device, "classes": classes, "form": validate_ops.FORM}
    rep["calibration"] += f"; per-op curves from {name} (fitted on {device}) for {', '.join(classes)} kernels"
    rep["assumptions"].append(
        f"Per-op efficiency: each kernel of class {', '.join(classes)} takes {validate_ops.FORM} with its class's "
        f"eta, beta, p, t0 as fitted on {device} (nothing refitted here), at the row's device peaks and "
        "bandwidth; the other kernels (attention) take the calibration's fractions, and the calibration's "
        "time per layer is fitted with the curves in place.")
    return rep
