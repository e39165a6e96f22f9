"""Op builders every layer kind and lowering share: one op from a registered formula, a
linear layer with its bias, a norm. They wire dimensions into rooflinec.model.ops formulas
and do no arithmetic of their own."""

from __future__ import annotations

import sympy as sp

from rooflinec.model.ir import Op
from rooflinec.model.ops import FORMULAS, UNITS
from rooflinec.model.symbols import L, M, b, d_model


def op(name, formula, category, *args, repeat=L, shape="", crossing=None, into="", dtype="", **kw) -> Op:
    """An op from a registered formula; an op with `into` also carries its epilogue cost; `dtype`:
    the format it computes in where that is its own (ir.Op.dtype)."""
    fn = FORMULAS[formula]
    epilogue = fn(*args, **kw, epilogue=True) if into else None
    return Op(name, formula, category, UNITS[formula], fn(*args, **kw), sp.sympify(repeat), shape, crossing,
              into=into, epilogue=epilogue, dtype=dtype)


def linear(name, tokens, k, n, shape, bias: bool, conv, repeat=L) -> list[Op]:
    """A GEMM, and its bias add as its own kernel or in the epilogue (`conv.bias`)."""
    gemm = op(name, "gemm", "linear", tokens, k, n, b, repeat=repeat, shape=shape, crossing=tokens)
    if not bias:
        return [gemm]
    add = op(name.replace("_proj", "") + "_bias", "bias_add", "elementwise", tokens, n, b,
             repeat=repeat, shape=f"Y[{tokens},{n}] + bias[{n}]", into=name)
    if conv.bias == "in_gemm":
        return [gemm.with_cost(gemm.cost + add.epilogue, formula="gemm+bias_add", absorbed=(add.name,))]
    return [gemm, add]


def norm(model, name, repeat=L) -> Op:
    shape = f"norm(X[M,d_model]) * gain[d_model]{' + shift' if model.norm_bias else ''}"
    if model.norm_kind == "layernorm":
        return op(name, "layernorm", "norm", M, d_model, b, repeat=repeat, shape=shape, shift=model.norm_bias)
    return op(name, "rmsnorm", "norm", M, d_model, b, repeat=repeat, shape=shape)
