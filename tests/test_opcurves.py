"""Per-op efficiency curves in the serving model (`validate --op-efficiency`): which kernels a
curve times, the step hook, and the command on a few rows."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rooflinec.spec import load as spec
from rooflinec.serving import opcurves, opfit, serving_model as sm

ROOT = Path(__file__).resolve().parent.parent
LLAMA_8B = spec.load_model(str(ROOT / "rooflinec/spec/catalog/models/llama-3.1-8b.yaml"))
H100 = spec.load_hardware(str(ROOT / "rooflinec/spec/catalog/hardware/h100-sxm.yaml"))
RUN = sm.Run(LLAMA_8B, H100, "bf16", 1, 1024, 128, 8)


class Op:
    def __init__(self, name, unit, category):
        self.name, self.unit, self.category = name, unit, category


def test_op_classes_of_the_serving_steps_kernels():
    assert opcurves.op_class(RUN, Op("qkv_proj", "matrix", "linear")) == "gemm"
    assert opcurves.op_class(RUN, Op("attn_norm", "vector", "norm")) == "rmsnorm"   # Llama: RMSNorm
    assert opcurves.op_class(RUN, Op("rope", "vector", "elementwise")) == "rope"
    assert opcurves.op_class(RUN, Op("attention", "matrix", "attention")) is None


def test_a_curve_times_its_kernels_and_leaves_the_others():
    # eta 0.5, beta 0.8, p 2, t0 3 us: a kernel of 4 us compute and 8 us memory at the peaks takes
    # sqrt((4 / 0.5)^2 + (8 / 0.8)^2) = sqrt(64 + 100) = 12.806 us, + 3 us
    time = opcurves.op_time({"gemm": opfit.Curve(0.5, 0.8, 2.0, 3e-6)})
    assert time(RUN, Op("down_proj", "matrix", "linear"), 4e-6, 8e-6) == pytest.approx((math.sqrt(164) + 3) * 1e-6)
    assert time(RUN, Op("attention", "matrix", "attention"), 4e-6, 8e-6) is None


def test_the_step_hook_adds_each_curve_kernels_time_and_keeps_the_bounds():
    # the roofline max itself as every class's curve (eta = beta = 1, p = inf) plus t0 = 1 ms:
    # the steady step grows by 1 ms per kernel with a class, the bounds not at all
    curve = opfit.Curve(1.0, 1.0, math.inf, 1e-3)
    plain, curved = sm.costs(RUN), sm.costs(RUN, opcurves.op_time(dict.fromkeys(opcurves.SERVED, curve)))
    classed = int((~np.isnan(curved.steady.curve_s)).sum())
    assert classed > 0 and classed < len(curved.steady.compute_s)      # attention keeps the fractions
    assert curved.steady.time(sm.BOUND) == pytest.approx(plain.steady.time(sm.BOUND) + classed * 1e-3)
    assert sm.bound(curved) == sm.bound(plain) and curved.one.curve_s is None


@pytest.mark.slow
def test_validate_with_op_efficiency_fits_the_calibration_with_the_curves_in_place(call, tmp_path):
    curves = tmp_path / "ops.json"
    curves.write_text(json.dumps({"device": "a100-80gb", "classes": [
        {"class": "gemm", "compute_fraction": 0.7, "bandwidth_fraction": 0.85, "sharpness": 1.4,
         "overhead_s": 5e-6}]}), encoding="utf-8")
    rows = tmp_path / "runs.csv"
    head = "model,device,engine,engine_version,weights,tp,pp,isl,osl,concurrency,ttft_ms,tpot_ms,measured,row_id\n"
    rows.write_text(head + "".join(f"meta-llama/Llama-3.1-8B-Instruct,h100-sxm,trtllm,1,bf16,1,1,1024,128,{c},"
                                   f"{100 + c},{7 + c / 8},,r{c}\n" for c in (1, 4, 16, 64)), encoding="utf-8")
    code, out, err = call("validate", str(rows), "--op-efficiency", str(curves), "--out", str(tmp_path / "v"),
                          "--format", "json")
    assert code == 0, err
    assert "per-op curves from" in out and "for gemm kernels" in out
    rep = json.loads((tmp_path / "v" / "serving.json").read_text(encoding="utf-8"))
    assert rep["op_efficiency"]["classes"] == ["gemm"] and rep["calibration"].startswith("fitted on these rows")
    assert rep["rows_predicted"] == 4 and not rep["violations"]
