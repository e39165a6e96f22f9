"""`rooflinec measure model`: run a model's step here, profile it, set each op beside its roofline."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

from rooflinec import measure
from rooflinec.errors import RooflineError
from rooflinec.measure import profile, reference

# A measured time under (1 - TOLERANCE) x its roofline time breaks the bound. The slack covers
# the calibration itself: its best copy or product may run a little slower than a model's op
# on a busy machine (timer resolution, a microsecond, is far below it for ops above the cache).
TOLERANCE = 0.10


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


def predict(model, device, dtype: str, phase: str, batch: int, context: int,
            conventions: dict) -> dict[str, Predicted]:
    """Every op's roofline from the cost model: the one place this package calls lowering
    and evaluation."""
    from rooflinec.evaluate import ledger
    from rooflinec.lower import Conventions, lower
    from rooflinec.spec import DTYPE_BYTES
    from rooflinec.symbols import B, S
    program = lower(model, phase, Conventions(**conventions))
    rows = ledger(program, model, device, dtype, DTYPE_BYTES[dtype], {B: batch, S: context}).rows
    return {r.op.name: Predicted(r.op.category, r.op.unit, r.count, r.flops, r.bytes, r.roof.time,
                                 r.roof.bound) for r in rows}


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
    from rooflinec.measure.device import TORCH_DTYPES
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
    from rooflinec.measure import hf
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


# Hugging Face config.json keys, GPT-2 style and Llama style, into a model spec's fields
def from_config(path: str):
    """A rooflinec Model from a Hugging Face config.json (GPT-2 or Llama/Qwen style)."""
    from rooflinec.spec import Model
    try:
        with open(path, encoding="utf-8") as f:
            c = json.load(f)
    except (OSError, ValueError) as exc:
        raise RooflineError(f"{path}: cannot read a config.json: {exc}") from None
    if not isinstance(c, dict):
        raise RooflineError(f"{path}: a config.json holds one JSON object")
    gpt2 = "n_embd" in c
    keys = (("n_embd", "n_layer", "n_head", "vocab_size") if gpt2 else
            ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    bad = [k for k in keys if not (isinstance(c.get(k), int) and c[k] > 0)]
    if bad:
        raise RooflineError(f"{path}: {', '.join(bad)}: missing or not a positive integer; a GPT-2 "
                            "config gives n_embd, n_layer, n_head, vocab_size, a Llama-style one "
                            "hidden_size, num_hidden_layers, num_attention_heads, vocab_size")
    d, layers, heads, vocab = (c[k] for k in keys)
    name = c.get("_name_or_path") or os.path.basename(os.path.dirname(os.path.abspath(path)))
    if gpt2:
        return Model(key="config", name=name or "gpt2", d_model=d, n_layers=layers, vocab=vocab,
                     n_heads=heads, n_kv_heads=heads, head_dim=d // heads, mlp_kind="gelu",
                     d_ff=c.get("n_inner") or 4 * d, source=path, max_context=c.get("n_positions"),
                     qkv_bias=True, out_bias=True, mlp_bias=True, norm_kind="layernorm",
                     norm_bias=True, positions="learned", tied_embeddings=True)
    kv = c.get("num_key_value_heads") or heads
    if heads % kv or not isinstance(c.get("intermediate_size"), int):
        raise RooflineError(f"{path}: needs intermediate_size, and num_key_value_heads dividing "
                            "num_attention_heads")
    return Model(key="config", name=name or "model", d_model=d, n_layers=layers, vocab=vocab,
                 n_heads=heads, n_kv_heads=kv, head_dim=c.get("head_dim") or d // heads,
                 mlp_kind="swiglu", d_ff=c["intermediate_size"], source=path,
                 max_context=c.get("max_position_embeddings"),
                 qkv_bias=bool(c.get("attention_bias", c.get("model_type") == "qwen2")),
                 tied_embeddings=bool(c.get("tie_word_embeddings", False)))


def load(path: str):
    """A model spec (.yaml) or a Hugging Face config.json."""
    from rooflinec import spec
    if path.endswith(".json"):
        return from_config(path)
    return spec.load_model(path)
