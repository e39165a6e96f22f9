"""Inverse design: the smallest memory bandwidth, tensor peak, link bandwidth or memory size at
which a deployment's decode step meets a time (or memory) target, solved exactly with sympy.

The rule solved is the one `serve` prints for the step (analyses/serving.py, one owner): the
overlapped step bound, max(sum FLOPs / peak, sum bytes / bandwidth) over the whole program
under the least-work conventions (`efficiency.step_terms`, the terms serve's step takes),
and the tensor-parallel collectives at the least time any correct algorithm takes
(`workbench.communication` at `collectives.LEAST`, serve's), beside the kernels whatever the
study's `parallel.overlap` (`roofline.combine`, a bound's rule). The study is serve's own
(`cli/plan.py` builds it as `serve` does), so T(x) with x at the device's figure is serve's
printed step.

With x one of W (memory bandwidth), P (the tensor peak of the GEMMs' dtype, serve's compute
dtype: `Deployment.gemm_dtype`, bf16 for fp4 weights on Hopper, weight-only; the peaks of ops
in other dtypes and the vector peak stay) or L (the scale-up link's bandwidth), every term is
a + c / x with c >= 0, so T(x) = max(compute(x), memory(x), comm(x)) is non-increasing, and
T(x) <= target exactly where each branch of the max meets it. sympy
solves each branch's a + c / x = target exactly; the answer is the largest of the branches'
smallest x (a branch not depending on x either always meets the target or never: then no x
does, Unreachable). The branch that gives the answer is the binding term.

Which term sets it: at the answer, the seconds each part of the step takes (compute, memory,
collectives), the binding branch first. The answer is checked by substitution: T(x*) <=
target, T(x* (1 - 1e-9)) > target.
Memory: the smallest capacity is the weights plus B sequences' KV cache at S, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from rooflinec.cost import collectives
from rooflinec.cost.deployment import Deployment
from rooflinec.cost.derive import exact
from rooflinec.cost.efficiency import step_terms
from rooflinec.model.lower import LEAST_WORK
from rooflinec.model.passes import DEFAULT_VARIANT
from rooflinec.model.symbols import B, S

X = sp.Symbol("x", positive=True)
KNOBS = ("bandwidth", "peak", "link", "memory")
_P, _W = sp.Symbol("P", positive=True), sp.Symbol("W", positive=True)


class Unreachable(ValueError):
    """No value of the knob meets the target (the message names the term that floors it)."""


@dataclass(frozen=True)
class Step:
    """One device's decode step as serve bounds it, exact: compute(P) and memory(W) with the
    GEMM dtype's tensor peak P and the bandwidth W symbolic, and the collectives' parts."""

    compute: sp.Expr              # seconds, in _P
    memory: sp.Expr               # seconds, in _W
    peak: sp.Rational             # the device's P
    bandwidth: sp.Rational        # the device's W
    comm_fixed: sp.Rational       # seconds of the collectives not over the scale-up link, and latencies
    comm_volume: sp.Rational      # bytes the busiest device sends over the scale-up link
    link_bandwidth: sp.Rational | None
    has_link_collectives: bool


def decode_step(bench, device, batch: int, context: int, variant: str = DEFAULT_VARIANT) -> Step:
    """The decode step of `batch` sequences at `context` on one device of `bench`'s study (serve's:
    its tp, compute dtype and stored formats), under serve's bound (the module)."""
    program = bench.program("decode", variant, device, conventions=LEAST_WORK)
    gemm = bench.dtype

    def peak(op):
        if op.unit == "matrix" and bench.op_dtype(device, op) == gemm:
            return _P
        return exact(bench.op_peak(device, op))

    at = {B: batch, S: context}
    terms = step_terms(program, bench.values, peak, 1)   # bytes / 1: the memory term is bytes / W
    fixed, volume, on_link = sp.Integer(0), sp.Integer(0), False
    scale_up = device.link_bandwidth
    for row in bench.communication(program, device, at, algorithm=collectives.LEAST) if program.collectives else ():
        if scale_up is not None and row.link.bandwidth == scale_up and row.link.name == device.link:
            volume += exact(row.volume)
            on_link = True
        else:
            fixed += exact(row.bandwidth_s)
        fixed += exact(row.latency_s)
    return Step(sp.nsimplify(terms.compute.xreplace(at)), sp.nsimplify(terms.bytes.xreplace(at)) / _W,
                exact(bench.peak(device, "matrix", gemm)), exact(device.bandwidth), fixed, volume,
                None if scale_up is None else exact(scale_up), on_link)


def parts(step: Step, knob: str, x=X) -> dict:
    """The step's three parts in seconds, `knob` replaced by x (a sympy expression in X by default)."""
    p = x if knob == "peak" else step.peak
    w = x if knob == "bandwidth" else step.bandwidth
    link = x if knob == "link" else step.link_bandwidth
    comm = step.comm_fixed + (step.comm_volume / link if step.comm_volume else 0)
    return {"compute": step.compute.xreplace({_P: p}), "memory": step.memory.xreplace({_W: w}),
            "collectives": sp.sympify(comm)}


def time_of(step: Step, knob: str, x=X):
    """T(x): serve's step bound with `knob` replaced by x, max(compute, memory, collectives)."""
    t = parts(step, knob, x)
    return sp.Max(t["compute"], t["memory"], t["collectives"])


@dataclass(frozen=True)
class Solution:
    knob: str
    value: sp.Rational            # exact
    piece: sp.Expr                # T(x) on the branch that binds at the answer: a + c / x
    target: sp.Rational
    shares: dict                  # part -> seconds at the answer
    setter: str                   # the binding branch
    met_at: bool                  # T(value) <= target
    missed_below: bool            # T(value (1 - 1e-9)) > target


def _branches(step: Step, knob: str) -> dict:
    """Each branch of the max as the step it would be were it the larger: T <= target iff each meets it."""
    return dict(parts(step, knob))


def _smallest(branch: sp.Expr, target) -> sp.Rational | None:
    """The smallest x > 0 with branch(x) <= target (branch = a + c / x, c >= 0): 0 where every x
    does, None where none does."""
    if not branch.has(X):
        return sp.Integer(0) if branch <= target else None
    roots = [r for r in sp.solve(sp.Eq(branch, target), X) if r.is_positive]
    return min(roots) if roots else None


def solve(step: Step, knob: str, target_s) -> Solution:
    """The smallest x with T(x) <= target (see the module)."""
    target = sp.Rational(str(target_s)) if isinstance(target_s, float) else sp.Rational(target_s)
    if knob not in ("bandwidth", "peak", "link"):
        raise ValueError(f"unknown knob {knob}")
    if knob == "link" and not step.has_link_collectives:
        raise Unreachable("the step sends nothing over the scale-up link (no collectives on it at this tp)")
    branches = _branches(step, knob)
    answers = {}
    for name, branch in branches.items():
        x = _smallest(branch, target)
        if x is None:
            floor = branch.subs(X, sp.oo) if branch.has(X) else branch
            raise Unreachable(f"no {knob} meets {float(target) * 1e3:g} ms: the terms that do not depend on it "
                              f"take {float(floor) * 1e3:.3f} ms, most of it {name}")
        answers[name] = x
    setter = max(answers, key=lambda n: (answers[n], branches[n].has(X)))
    value = answers[setter]
    if value == 0:
        raise Unreachable(f"every {knob} meets {float(target) * 1e3:g} ms: no term of the step depends on it")
    full = time_of(step, knob)
    shares = {n: e.subs(X, value) for n, e in parts(step, knob).items()}
    return Solution(knob, value, branches[setter], target, shares, setter,
                    bool(full.subs(X, value) <= target),
                    bool(full.subs(X, value * (1 - sp.Rational(1, 10 ** 9))) > target))


def memory_needed(model, tp: int, weights: str, kv_cache: str, batch: int, context: int,
                  experts: str | None = None) -> dict:
    """Bytes one device needs: its weights (`Deployment.weight_bytes`: block scales, replicated
    norms and KV heads) plus `batch` sequences' KV cache at `context`."""
    dep = Deployment(model, None, tp, weights, kv_cache, experts=experts)
    dep.check()
    w = sp.Integer(dep.weight_bytes())
    kv = batch * exact(dep.kv_per_sequence(context))
    return {"weights": w, "kv_cache": kv, "total": w + kv}
