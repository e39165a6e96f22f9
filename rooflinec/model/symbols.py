"""The dimension alphabet: every symbol a cost formula may use, defined once.

Dimensions are positive integers so sympy may cancel them; bytes per element is
only positive (int4 weights are half a byte).
"""

import sympy as sp


def _dim(name: str) -> sp.Symbol:
    return sp.Symbol(name, positive=True, integer=True)


# workload
B = _dim("B")            # sequences in the batch
S = _dim("S")            # context length: tokens cached (decode) or in the prompt (prefill)
M = _dim("M")            # tokens in flight through a linear layer (decode: B; prefill: B*S)
# model
d_model = _dim("d_model")
n_q = _dim("n_q")        # query heads
n_kv = _dim("n_kv")      # key/value heads (GQA / MQA)
d_head = _dim("d_head")
d_ff = _dim("d_ff")
V = _dim("V")            # vocabulary
L = _dim("L")            # decoder layers
# numerics
b = sp.Symbol("b", positive=True)   # bytes per element

DESCRIPTIONS: dict[sp.Symbol, str] = {
    B: "sequences in the batch",
    S: "context length (tokens cached in decode, prompt tokens in prefill)",
    M: "tokens in flight through a linear layer (decode: B, prefill: B*S)",
    d_model: "model width",
    n_q: "query heads",
    n_kv: "key/value heads",
    d_head: "head dimension",
    d_ff: "MLP hidden width",
    V: "vocabulary size",
    L: "decoder layers",
    b: "bytes per element of the activations (and of weights and KV cache, unless b_w and b_kv are listed)",
}

ALPHABET: dict[str, sp.Symbol] = {s.name: s for s in DESCRIPTIONS}
WORKLOAD = (B, S, M)


def dimension(name: str) -> sp.Symbol:
    """A model's own extra dimension (``n_experts``): a positive integer like the alphabet's."""
    return _dim(name)


def extra_values(model) -> dict[sp.Symbol, int]:
    """The model's declared extra dimensions (``dimensions:`` in its spec), as symbol values."""
    return {_dim(name): value for name, value in dict(getattr(model, "dimensions", None) or {}).items()}
