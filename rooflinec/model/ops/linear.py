"""Matrix products."""

from rooflinec.model.ir import Cost
from rooflinec.model.ops.registry import formula


def contraction(*dims):
    """FLOPs of a contraction: 2 per multiply-add, each dimension counted once."""
    flops = 2
    for d in dims:
        flops = flops * d
    return flops


@formula("gemm")
def gemm(m, k, n, b, weight: bool = True) -> Cost:
    # X[m,k] @ W[k,n] -> Y[m,n]: read X, read W once (however many rows ride along), write Y
    x_and_y = (m * k + m * n) * b
    if weight:
        return Cost.of(contraction(m, k, n), weights=k * n * b, activations=x_and_y)
    return Cost.of(contraction(m, k, n), activations=x_and_y + k * n * b)


@formula("bmm")
def bmm(batch, m, k, n, b) -> Cost:
    # batch x (A[m,k] @ B[k,n] -> C[m,n]); no weights: every operand is an activation
    return gemm(m, k, n, b, weight=False) * batch
