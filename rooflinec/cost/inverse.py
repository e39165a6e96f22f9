"""Inverse design: the smallest memory bandwidth, tensor peak, link bandwidth or memory size at
which a deployment's decode step meets a time (or memory) target, solved exactly with sympy.

Why exact: every kernel's FLOPs and bytes are sympy expressions, so at a fixed batch B and
context S the step is a sum of exact numbers and one unknown x. The step's time is
T(x) = sum_k max(F_k / P_k, D_k / W) + n_c x (v / L + latency): each kernel's roofline (at
the datasheet peaks, no overlap between kernels, no calibration: the roofline step) plus the
tensor-parallel all-reduces at the least time any correct all-reduce takes
(`collectives.least_time`: the payload once over the link, one latency). With x one of W (memory bandwidth), P (the tensor peak
of the GEMMs' dtype, `Deployment.gemm_dtype`: bf16 for fp4 weights on Hopper, which run
weight-only, their dequantisation FLOPs in the GEMMs'; the vector peak stays) or L (link bandwidth), T is non-increasing in x
and each max switches branch at one point x_k. Between consecutive switch points T is
a + c / x; sympy solves a + c / x = target exactly on each piece, and the smallest x on the
first piece (from above) where the root lies is the answer. The pieces are at most one per
kernel plus one, checked against `budget.INVERSE_PIECES` before any is solved (no timer).

Which term sets it: at the answer, the share of the target each term takes (weights, KV cache,
activations at the unknown; the kernels whose other branch binds; the all-reduces' fixed part).
The answer is checked by substitution: T(x*) <= target, T(x* (1 - 1e-9)) > target.
Memory: the smallest capacity is the weights plus B sequences' KV cache at S, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from rooflinec.base import budget
from rooflinec.base.roofline import compute_time, transfer_time
from rooflinec.cost import collectives, program_costs
from rooflinec.cost.deployment import Deployment
from rooflinec.model.symbols import B, M, S
from rooflinec.spec.load import DTYPE_BYTES

X = sp.Symbol("x", positive=True)
KNOBS = ("bandwidth", "peak", "link", "memory")
CLASSES = ("weights", "kv_cache", "activations", "scores")


class Unreachable(ValueError):
    """No value of the knob meets the target (the message names the term that floors it)."""


@dataclass(frozen=True)
class Kernel:
    name: str
    flops: sp.Rational
    traffic: dict                 # class -> exact bytes
    peak: sp.Rational             # the unit's peak (FLOP/s)
    scales: bool                  # the peak is the unknown (knob 'peak' and a matrix kernel)


@dataclass(frozen=True)
class Step:
    kernels: tuple
    bandwidth: sp.Rational
    collectives: int              # all-reduces per step
    volume: sp.Rational           # bytes the busiest device must send per all-reduce (the least)
    link_bandwidth: sp.Rational | None
    link_latency: sp.Rational


def _exact(v) -> sp.Rational:
    return sp.Rational(str(v)) if isinstance(v, float) else sp.Rational(v)


def decode_step(model, device, tp: int, weights: str, kv_cache: str, batch: int, context: int,
                activation: str = "bf16", experts: str | None = None) -> Step:
    """The decode step of `batch` sequences at `context` on one of tp devices, exact. Weights
    the device has no tensor peak for run weight-only (`Deployment.gemm_dtype`: the GEMMs on
    the bf16 peak, their dequantisation FLOPs in each GEMM's, the bytes at the format)."""
    dep = Deployment(model, device, tp, weights, kv_cache, experts=experts)
    dep.check()
    act = DTYPE_BYTES[activation]
    at = {B: batch, S: context, M: batch}
    matrix, vector = device.peak("matrix", dep.gemm_dtype), device.peak("vector", activation)
    if matrix is None or vector is None:
        raise Unreachable(f"{device.key} lists no "
                          f"{'tensor peak for ' + dep.gemm_dtype if matrix is None else 'vector peak'}")
    kernels = tuple(
        Kernel(op.name, sp.nsimplify(flops.xreplace(at)),
               {c: sp.nsimplify(e.xreplace(at)) for c, e in traffic.items()},
               _exact(matrix if op.unit == "matrix" else vector), op.unit == "matrix")
        for op, flops, traffic in program_costs.symbolic_ops(dep, "decode", device, act, dep.formats()))
    n_c = dep.all_reduces()   # the deployment's count: 0 at tp 1
    # the least volume (collectives.least_fraction: the payload once); one latency (`time_of`)
    volume = collectives.least_fraction("all_reduce", tp) * batch * model.d_model * act if tp > 1 else sp.Integer(0)
    link_bw = _exact(device.link_bandwidth) if device.link_bandwidth else None
    return Step(kernels, _exact(device.bandwidth), n_c, sp.nsimplify(volume), link_bw,
                _exact(device.link_latency or 0))


def time_of(step: Step, knob: str, x=X):
    """T(x): the roofline step with `knob` replaced by x (a sympy expression in X by default)."""
    bw = x if knob == "bandwidth" else step.bandwidth
    terms = [sp.Max(compute_time(k.flops, x if knob == "peak" and k.scales else k.peak),
                    transfer_time(sum(k.traffic.values()), bw)) for k in step.kernels]
    if step.collectives:
        link_bw = x if knob == "link" else step.link_bandwidth
        if link_bw is None:
            raise Unreachable("the device declares no interconnect for the all-reduces")
        terms.append(step.collectives * collectives.time(step.volume, 1, collectives.Link("", link_bw, step.link_latency)))
    return sp.Add(*terms)


@dataclass(frozen=True)
class Solution:
    knob: str
    value: sp.Rational            # exact
    piece: sp.Expr                # T(x) on the piece that holds the answer
    target: sp.Rational
    shares: dict                  # term -> seconds at the answer
    setter: str                   # the largest share
    met_at: bool                  # T(value) <= target
    missed_below: bool            # T(value (1 - 1e-9)) > target


def _piece(step: Step, knob: str, probe) -> tuple[sp.Expr, dict]:
    """T(x) with each max on the branch it takes at x = probe, and its terms by name."""
    named = {}
    bw = X if knob == "bandwidth" else step.bandwidth
    for k in step.kernels:
        c = compute_time(k.flops, X if knob == "peak" and k.scales else k.peak)
        m_terms = {cls: transfer_time(v, bw) for cls, v in k.traffic.items()}
        m = sp.Add(*m_terms.values())
        if c.subs(X, probe) >= m.subs(X, probe):
            named["compute (" + ("at x" if knob == "peak" and k.scales else "fixed") + ")"] = \
                named.get("compute (" + ("at x" if knob == "peak" and k.scales else "fixed") + ")", 0) + c
        else:
            for cls, e in m_terms.items():
                named[cls] = named.get(cls, 0) + e
    if step.collectives:
        link_bw = X if knob == "link" else step.link_bandwidth
        named["all-reduces"] = step.collectives * collectives.time(step.volume, 1, collectives.Link("", link_bw, step.link_latency))
    return sp.Add(*named.values()), named


def _switches(step: Step, knob: str) -> list:
    """The x at which a kernel's max changes branch (only kernels whose terms depend on x)."""
    out = []
    for k in step.kernels:
        d = sum(k.traffic.values())
        if knob == "bandwidth" and k.flops and d:
            out.append(d * k.peak / k.flops)        # D / W = F / P
        elif knob == "peak" and k.scales and k.flops and d:
            out.append(k.flops * step.bandwidth / d)   # F / P = D / W
    return sorted(set(v for v in out if v > 0))


def solve(step: Step, knob: str, target_s) -> Solution:
    """The smallest x with T(x) <= target (see the module)."""
    target = _exact(target_s)
    if knob not in ("bandwidth", "peak", "link"):
        raise ValueError(f"unknown knob {knob}")
    points = _switches(step, knob)
    budget.check_pieces(len(points) + 1)
    edges = [sp.Integer(0)] + points + [sp.oo]
    for lo, hi in zip(edges, edges[1:]):           # pieces from the smallest x upwards
        probe = (lo + hi) / 2 if hi != sp.oo else (lo + 1) * 2
        piece, named = _piece(step, knob, probe)
        roots = [r for r in sp.solve(sp.Eq(piece, target), X) if r.is_positive]
        inside = [r for r in roots if lo <= r <= hi]
        if inside:
            return _solution(step, knob, min(inside), piece, named, target)
    far = points[-1] * 2 if points else sp.Integer(1)     # past every switch: the last piece
    fixed = {n: e for n, e in _piece(step, knob, far)[1].items() if not sp.sympify(e).has(X)}
    what = max(fixed, key=lambda n: fixed[n]) if fixed else "no term"
    raise Unreachable(f"no {knob} meets {float(target) * 1e3:g} ms: the terms that do not depend on it "
                      f"take {float(sum(fixed.values())) * 1e3:.3f} ms, most of it {what}")


def _solution(step, knob, value, piece, named, target) -> Solution:
    shares = {n: sp.nsimplify(e).subs(X, value) for n, e in named.items()}
    full = time_of(step, knob)
    return Solution(knob, value, piece, target, shares, max(shares, key=lambda n: shares[n]),
                    bool(full.subs(X, value) <= target),
                    bool(full.subs(X, value * (1 - sp.Rational(1, 10 ** 9))) > target))


def memory_needed(model, tp: int, weights: str, kv_cache: str, batch: int, context: int,
                  experts: str | None = None) -> dict:
    """Bytes one device needs: its weights (`Deployment.weight_bytes`: block scales, replicated
    norms and KV heads) plus `batch` sequences' KV cache at `context`."""
    dep = Deployment(model, None, tp, weights, kv_cache, experts=experts)
    dep.check()
    w = sp.Integer(dep.weight_bytes())
    kv = batch * _exact(dep.kv_per_sequence(context))
    return {"weights": w, "kv_cache": kv, "total": w + kv}
