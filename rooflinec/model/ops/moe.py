"""Mixture-of-experts kernels: routed expert GEMMs and the weighted combine of their outputs."""

import sympy as sp

from rooflinec.model.ir import Cost
from rooflinec.model.ops.registry import formula
from rooflinec.model.ops.linear import contraction
from rooflinec.model.ops.vector import ADD_FLOPS, MUL_FLOPS


def distinct_experts(tokens, experts, top_k):
    """Expected experts a step of `tokens` routings of `top_k` each touches, under uniform
    routing: each expert is missed by one token with probability 1 - k/E, by all of them
    with (1 - k/E)^M, so E * (1 - (1 - k/E)^M) experts are read. It lies between k (M = 1)
    and min(E, M*k), and rises with M towards E."""
    return experts * (1 - (1 - sp.Rational(1) * top_k / experts) ** tokens)


@formula("expert_gemm")
def expert_gemm(m, top_k, experts, k, n, b) -> Cost:
    # each of m tokens goes through top_k experts: X[m*top_k rows, k] @ W_e[k, n]; the step
    # reads the weights of every distinct expert it touches once, and each routed row in and out
    return Cost.of(contraction(m, top_k, k, n), weights=distinct_experts(m, experts, top_k) * k * n * b,
                   activations=m * top_k * (k + n) * b)


@formula("moe_combine", unit="vector")
def moe_combine(m, top_k, width, b, shared: bool = False) -> Cost:
    # y = sum_i g_i * y_i over the top_k routed outputs (+ the shared experts' output): a
    # multiply and an add per routed element; reads every output once, writes y
    parts = top_k + (1 if shared else 0)
    flops = m * width * (top_k * (MUL_FLOPS + ADD_FLOPS) + (ADD_FLOPS if shared else 0))
    return Cost.of(flops, activations=(parts + 1) * m * width * b)
