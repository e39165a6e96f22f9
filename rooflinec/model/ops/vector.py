"""Elementwise, normalisation and softmax kernels: the vector-unit work around the GEMMs.

Every kernel here streams its operands from HBM and writes its result back. With
`epilogue=True` the kernel runs inside the kernel that produced its first operand
(a GEMM epilogue): that operand never leaves the chip and the result takes the place
of the producer's output, so one read and one write of `n` elements disappear while
every FLOP stays.
"""

from rooflinec.model.ir import Cost
from rooflinec.model.ops.registry import formula

# FLOPs per element. Each count is stated once, here, with the arithmetic behind it.
ADD_FLOPS = 1         # one add per output element per extra operand
MUL_FLOPS = 1         # SwiGLU's gating multiply silu(gate) * up
SCALE_FLOPS = 1       # scores * 1/sqrt(d_head)
MASK_FLOPS = 1        # the causal mask: one select/add per score
GELU_FLOPS = 8        # tanh form 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))): cube (2), scale, add,
                      # scale, tanh, add 1, times 0.5x -> about 8
SILU_FLOPS = 4        # x / (1 + exp(-x)): negate, exp, add 1, divide
LAYERNORM_FLOPS = 8   # mean (add), subtract, square, variance (add), times rstd, gain, shift,
                      # and the reductions' share -> 8
RMSNORM_FLOPS = 4     # square, mean-of-squares (add), times rsqrt, gain: LayerNorm without the
                      # mean and the shift
SOFTMAX_FLOPS = 5     # max, subtract max, exp, sum, divide
ROPE_FLOPS = 3        # x*cos + rotate_half(x)*sin: two multiplies, one add (transformers'
                      # apply_rotary_pos_emb); rotate_half's sign flip is a data move


def _stream(n, flops_per, operands, b, cls="activations", params=0, epilogue=False) -> Cost:
    """`operands` tensors of n elements read, one written; `params` parameter elements read."""
    moved = operands + 1 - (2 if epilogue else 0)
    traffic = {cls: moved * n * b, "weights": params * b}
    return Cost.of(n * flops_per, **traffic)


@formula("elementwise", unit="vector")
def elementwise(n, flops_per_element, reads, writes, b) -> Cost:
    # y_1..y_writes = f(x_1..x_reads), n elements each: the general streaming kernel
    return Cost.of(n * flops_per_element, activations=(reads + writes) * n * b)


@formula("add", unit="vector")
def add(n, b, operands=2, epilogue=False) -> Cost:
    # y = x_1 + ... + x_operands (a residual add reads the stream and the branch output)
    return _stream(n, (operands - 1) * ADD_FLOPS, operands, b, epilogue=epilogue)


@formula("bias_add", unit="vector")
def bias_add(rows, width, b, epilogue=False) -> Cost:
    # Y[rows,width] = X[rows,width] + bias[width]: the bias vector is a parameter
    return _stream(rows * width, ADD_FLOPS, 1, b, params=width, epilogue=epilogue)


@formula("gelu", unit="vector")
def gelu(n, b, epilogue=False) -> Cost:
    return _stream(n, GELU_FLOPS, 1, b, epilogue=epilogue)


@formula("silu", unit="vector")
def silu(n, b, epilogue=False) -> Cost:
    return _stream(n, SILU_FLOPS, 1, b, epilogue=epilogue)


@formula("gate_mul", unit="vector")
def gate_mul(n, b, epilogue=False) -> Cost:
    # h = silu(gate) * up: two operands in, one out
    return _stream(n, MUL_FLOPS, 2, b, epilogue=epilogue)


@formula("layernorm", unit="vector")
def layernorm(rows, width, b, shift=True) -> Cost:
    # Y[rows,width] = (X - mean) / std * gain (+ shift): gain and shift are parameters
    return _stream(rows * width, LAYERNORM_FLOPS, 1, b, params=width * (2 if shift else 1))


@formula("rmsnorm", unit="vector")
def rmsnorm(rows, width, b) -> Cost:
    # Y[rows,width] = X / rms(X) * gain
    return _stream(rows * width, RMSNORM_FLOPS, 1, b, params=width)


@formula("scale", unit="vector")
def scale(n, b) -> Cost:
    # P = S / sqrt(d_head) over n scores, read from and written back to HBM
    return _stream(n, SCALE_FLOPS, 1, b, cls="scores")


@formula("causal_mask", unit="vector")
def causal_mask(n, b) -> Cost:
    # P = where(future, -inf, S) over n scores; the mask comes from indices, not from memory
    return _stream(n, MASK_FLOPS, 1, b, cls="scores")


@formula("softmax", unit="vector")
def softmax(rows, cols, b) -> Cost:
    # P[rows,cols] = softmax over each row of S[rows,cols]
    return _stream(rows * cols, SOFTMAX_FLOPS, 1, b, cls="scores")


@formula("rope", unit="vector")
def rope(rows, q_heads, kv_heads, d_head, b) -> Cost:
    # Q' = Q*cos + rotate_half(Q)*sin, the same for K, in one kernel: q and k are read and
    # written, and one cos and one sin row [rows, d_head] are read
    heads = q_heads + kv_heads
    return Cost.of(ROPE_FLOPS * rows * heads * d_head, activations=(2 * heads + 2) * rows * d_head * b)
