"""`rooflinec measure model`: run a model's step here, profile it, set each op beside its roofline."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rooflinec import measure
from rooflinec.base.errors import RooflineError
from rooflinec.measure import profile, reference
from rooflinec.model.symbols import B, S
from rooflinec.cost.workbench import Workbench
from rooflinec.measure.device import TORCH_DTYPES
from rooflinec.measure import hf

# A measured time under (1 - TOLERANCE) x its roofline time breaks the bound. The slack covers
# the calibration itself: its best copy or product may run a little slower than a model's op
# on a busy machine (timer resolution, a microsecond, is far below it for ops above the cache).
TOLERANCE = 0.10
# traffic classes a step reads from state kept between steps, once each per step: a second read
# of one weight comes a whole step later, after every other byte of the step went through
RESIDENT = ("weights", "kv_cache")


@dataclass(frozen=True)
class Predicted:
    """One op of rooflinec's cost model at the measured workload, over all its launches."""

    category: str
    unit: str
    launches: int
    flops: float
    bytes: float
    time: float
    bound: str
    resident: float = 0.0   # bytes of weights and KV cache: state a step reads once, not fresh data


def predict(model, device, dtype: str, phase: str, batch: int, context: int,
            conventions: dict) -> dict[str, Predicted]:
    """Every op's roofline from the cost model: the one place this package calls lowering
    and evaluation."""
    bench = Workbench.of(model, [device], dtype, conventions)
    # the naive program: the ops the implementations run, each kernel through memory
    rows = bench.ledger(bench.program(phase, "unfused"), device, {B: batch, S: context}).rows
    return {r.op.name: Predicted(r.op.category, r.op.unit, r.count, r.flops, r.bytes, r.roof.time,
                                 r.roof.bound, sum(r.traffic.get(c, 0) for c in RESIDENT))
            for r in rows}


@dataclass(frozen=True)
class Measurement:
    model: object
    device: object          # the hardware spec the roofline is drawn for
    dtype: str
    phase: str
    batch: int
    context: int
    on: str                 # the torch device it ran on
    tool: str
    implementation: str     # what built the model
    conventions: dict       # the lowering's choices the implementation makes
    groups: dict            # a measured range covering several ops -> those ops
    predicted: dict         # op -> Predicted
    profile: profile.Profile


def measure_model(model, device, dtype: str = "fp32", phase: str = "decode", batch: int = 1,
                  context: int = 128, on: str | None = None, steps: int = 5,
                  layers: int | None = None, threads: int | None = None,
                  impl: str = "auto") -> Measurement:
    """Build `model` with random weights, profile `steps` steps; `layers` overrides its depth;
    `impl`: "transformers", "reference", or "auto" (transformers where it can stand for the model)."""
    torch = measure.torch()
    here = measure.local_device(torch, on, threads)
    if layers:
        model = replace(model, n_layers=layers)
    if model.positions == "learned" and context + (phase == "decode") > (model.max_context or 0):
        raise RooflineError(f"--context {context}: {model.name} has learned positions up to "
                            f"{model.max_context} tokens")
    builder = _implementation(impl, model)
    decoder = builder(torch, model, here, getattr(torch, TORCH_DTYPES[dtype]), phase, batch, context)
    predicted = predict(model, device, dtype, phase, batch, context, decoder.conventions)
    with torch.inference_mode():
        prof = profile.run(torch, here, decoder.step, steps, by_op=decoder.by_op)
    return Measurement(model, device, dtype, phase, batch, context, str(here),
                       measure.describe(torch, here), decoder.name, decoder.conventions,
                       decoder.groups, predicted, prof)


def _implementation(impl: str, model):
    if impl == "reference":
        return reference.Decoder
    try:
        import transformers  # noqa: F401
    except ImportError:
        if impl == "transformers":
            raise RooflineError("--impl transformers: transformers is not installed; "
                                "pip install -e '.[measure]'") from None
        return reference.Decoder
    if impl == "auto" and hf.fits(model) is not None:
        return reference.Decoder
    return hf.Decoder
