"""Each profiled op's FLOPs and bytes from rooflinec's own lowering.

A profile row names a model (a Hugging Face id) and its shape (opprofiles.Shape). The model
spec is the catalog's (or a --specs folder's) with that hf_id, its dimensions checked against
the shape; else one built from the shape with the stated defaults (ASSUMED). It is lowered (decode phase, unfused, q/k/v fused and bias in the GEMM, as
serving engines run them) and sharded for tp by the Megatron-LM pass (parallel.shard), and
each Vidur op is read off the op(s) of that program it runs:

  emb -> embedding; input_layernorm -> attn_norm; post_attention_layernorm -> mlp_norm;
  attn_pre_proj -> qkv_proj; attn_rope -> rope; attn_post_proj -> o_proj;
  mlp_up_proj -> gate_proj with its width doubled (d_ff -> 2*d_ff: one GEMM, gate and up
    fused, reading X once) when the MLP is gated, else up_proj;
  mlp_act -> gate_mul's traffic (read gate and up, write one) with silu's and gate_mul's
    FLOPs (one fused SiLU-and-multiply kernel) when gated, else gelu;
  mlp_down_proj -> down_proj; add -> attn_residual (a parallel block's three-operand
    residual where the model has one).

Every op's FLOPs and bytes are polynomials in the tokens M: one lambdify per (model, tp)
evaluates them over all token counts at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import sympy as sp

from rooflinec.spec import load as spec
from rooflinec.base.errors import Problem, SpecError
from rooflinec.model.lower import GATED
from rooflinec.cost.evaluate import vectorised
from rooflinec.model.ir import Cost
from rooflinec.serving.opprofiles import OPS, Shape
from rooflinec.model.symbols import B, M, S, d_ff
from rooflinec.cost.workbench import Workbench

CONVENTIONS = {"qkv": "fused", "bias": "in_gemm"}
DTYPE = "fp16"          # Vidur profiles with fp16 weights and activations
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
UNITS = {op: "matrix" if op in GEMMS else "vector" for op in OPS}
ASSUMED = ("sequential block, RMSNorm, RoPE on the whole head, no biases, SwiGLU when gated else "
           "GELU; fp16 (2 bytes per element)")


def model_of(shape: Shape) -> spec.Model:
    key = f"shape-{shape.d_model}-{shape.n_q}-{shape.n_kv}-{shape.d_head}-{shape.d_ff}-{shape.V}-{shape.gated}"
    return spec.Model(key, key, shape.d_model, 1, shape.V, shape.n_q, shape.n_kv, shape.d_head,
                      "swiglu" if shape.gated else "gelu", shape.d_ff, "a Vidur profile's columns")


def resolve(row, specs) -> tuple[spec.Model, str]:
    """The model spec for a profile row, and where it came from."""
    model = specs.models().get(row.model)
    if model is None:
        return model_of(row.shape), "built from the profile's shape"
    sh = row.shape
    theirs = {"d_model": model.d_model, "n_q": model.n_heads, "n_kv": model.n_kv_heads,
              "d_head": model.head_dim, "d_ff": model.d_ff, "V": model.vocab, "gated": model.mlp_kind in GATED}
    wrong = [f"{k} {getattr(sh, k)} (the spec: {v})" for k, v in theirs.items() if getattr(sh, k) != v]
    if wrong:
        raise SpecError([Problem(row.file, row.line, 1, "(row)", f"model '{row.model}': the profile's "
                                 f"{', '.join(wrong)} disagree with {model.file or model.key}")])
    return model, f"spec {model.key}"


def _cost(ops: dict, vidur_op: str, gated: bool) -> Cost:
    if vidur_op == "mlp_up_proj":
        if not gated:
            return ops["up_proj"].cost
        c = ops["gate_proj"].cost
        return Cost(c.flops.xreplace({d_ff: 2 * d_ff}), tuple((k, e.xreplace({d_ff: 2 * d_ff})) for k, e in c.traffic))
    if vidur_op == "mlp_act":
        if not gated:
            return ops["gelu"].cost
        c = ops["gate_mul"].cost
        return Cost(c.flops + ops["silu"].cost.flops, c.traffic)
    if vidur_op == "add" and "attn_residual" not in ops:
        return ops["residual"].cost
    return ops[MAPPED[vidur_op]].cost


MAPPED = {"emb": "embedding", "input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm",
          "attn_pre_proj": "qkv_proj", "attn_rope": "rope", "attn_post_proj": "o_proj",
          "mlp_down_proj": "down_proj", "add": "attn_residual"}


@dataclass(frozen=True)
class Lowered:
    """Per op: the unit it runs on and its FLOPs and bytes as functions of the tokens."""

    units: dict
    _fn: object
    names: tuple

    def at(self, op: str, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = self._fn(np.asarray(tokens, float))
        i = self.names.index(op)
        ones = np.ones(np.shape(tokens))
        return values[2 * i] * ones, values[2 * i + 1] * ones


@cache
def lowered(model: spec.Model, tp: int) -> Lowered:
    bench = Workbench.of(model, (), DTYPE, CONVENTIONS)
    prog = bench.program("decode", "unfused", None, tp=tp)
    ops = {op.name: op for op in prog.ops}
    values = {k: v for k, v in bench.values_for(DTYPE).items() if k not in (B, S, M)}
    names = tuple(UNITS)
    exprs = []
    for name in names:
        c = _cost(ops, name, model.mlp_kind in GATED)
        exprs += [sp.sympify(c.flops).xreplace(values), sum(e for _, e in c.traffic).xreplace(values)]
    return Lowered(UNITS, vectorised(exprs, (M,)), names)
