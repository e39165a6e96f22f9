"""Calibration through the simulator: each measured row's benchmark simulated once, its
schedule re-timed for every candidate parameter set, a few named parameters fitted per
(device, engine).

A row's benchmark is a closed loop with fixed lengths, so its schedule does not depend on the
step times (`simulator` module): the fit re-times the recorded runs in closed form, every
row of a fit at once (`simulator.Pool`), instead of re-simulating. The fit is
Levenberg-Marquardt on the log ratios of predicted to measured mean TPOT and mean TTFT
together (`calibrate.fit`'s method, its coordinates: a fraction 1 / (1 + e^-x), a time
1 us x e^x); the parameters not fitted keep their bound values.

The host's fixed time per step is fitted per kernel launched (`per_kernel_s`, times
`StepModel.kernels`: the lowered decode program's ops, each `repeat` times), not per step or
per layer: each kernel has a launch, prologue and tail latency whatever its size, so the fixed
time scales with the kernels and carries to a model of another depth and another kind of layer
(a calibration group holds one model, so on its own rows the three are nearly the same fit).
A mixture of experts' layer launches more kernels than a dense one (Qwen3-235B-A22B 14 per
layer, Llama-3.1 9), and a dense group composed from its engine's MoE group's host times
(`calibration.resolve`) took the MoE's per-layer time with it. Leaving a model out of the
visible rows, the worst left-out TPOT was 22.9% per layer (26.2% per layer under least
squares against 49.5% per step, bench/simulator.py) and 15.1% per kernel at the engines'
defaults; 30.3% and 20.7% under the benchmark recipe (`recipes`). The shipped fits per kernel
lie at 5.7-8.1 us in every group, dense and MoE alike, but SGLang's Llama-3.1-8B (56 us).

A MoE group fits one more: the routed experts' bandwidth fraction (`stepcost.Routed`'s reads
of their weights, beside the step's own fraction), the grouped GEMMs' sustained bandwidth; a
dense group has nothing that depends on it and keeps 1.

The loss is soft-L1 (Huber-like) on the log ratios at a scale of LOSS_SCALE: a residual well
inside it counts as in least squares, one beyond it linearly, so the few rows that measure an
effect the model does not have (TensorRT-LLM's Llama-3.1-8B rows at C 64-128 whose TTFT is
4-14x their neighbours' at C 32) no longer set the parameters for every other row of their
group (visible rows: TPOT 6.8% -> 6.0%, TTFT 31.0% -> 28.8%).

A fit is a function of its rows alone: the leave-one-group-out refits share the fits of the same
rows (`Fitter`'s `shared`), and a row's bounds (aiperf's reused prompts) share its prediction's
schedule where the prefix cache never hits (`_schedule`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from rooflinec.serving import calibrate, calibration
from rooflinec.serving import engines, lsq, recipes, rows, simulator, workload
from rooflinec.serving import stepcost as sc
from rooflinec.serving import serving_model as sm
from rooflinec.serving.serving_model import Unpredictable

# compute efficiency; the host's fixed time per kernel per step and per running request per
# step; the front end's latency per request (TTFT only); the routed experts' bandwidth fraction
FITTED = ("compute_fraction", "per_kernel_s", "per_request_s", "request_latency_s", "expert_bandwidth_fraction")
# fitted only where some row's model has routed experts (elsewhere nothing depends on it: left at 1)
EXPERT_ONLY = ("expert_bandwidth_fraction",)
# coordinates a fit starts from (else 0: a fraction 0.5, a time 1 us): the experts' bandwidth
# fraction at 0.95, near the roofline's 1, so a group whose rows do not ask for less keeps it
# there (started at 0.5, SGLang's MoE group fell into another minimum: compute fraction 1 and a
# 0.33 s front-end latency, its TTFT error 10.9% -> 30.9%)
START = {"expert_bandwidth_fraction": 3.0}
ITERATIONS = 60
TTFT_WEIGHT = 1.0        # TTFT's log residuals beside TPOT's in the fit
# soft-L1's scale in log units: residuals beyond about 10% (the TPOT target's order) count
# linearly (0.2 gave the same visible errors within 0.6 points, bench/simulator.py)
LOSS_SCALE = 0.1


def soft_l1(r: np.ndarray, scale: float = LOSS_SCALE) -> np.ndarray:
    """The residuals whose sum of squares is soft-L1's loss, sum 2 s^2 (sqrt(1 + (r/s)^2) - 1)
    (scipy.optimize.least_squares' loss='soft_l1' at f_scale s): r where |r| << s, its
    square root growth sqrt(2 s |r|) where |r| >> s; scale 0: r itself (least squares)."""
    if scale <= 0:
        return r
    return np.sign(r) * scale * np.sqrt(2 * (np.sqrt(1 + (r / scale) ** 2) - 1))


@dataclass
class Case:
    row: rows.Row
    reason: str = ""
    step: sc.StepModel | None = None
    policy: engines.Policy | None = None
    result: simulator.Result | None = None
    reused: simulator.Result | None = None     # the schedule with aiperf's reused prompts (the bounds')

    @property
    def group(self) -> tuple[str, str, str]:
        """(device, engine, kind of model): `calibration`'s groups."""
        return (self.row.device, self.row.engine, "moe" if self.row.moe_weights else "dense")

    @property
    def predicted(self) -> bool:
        return self.result is not None

    @cached_property
    def retimer(self) -> simulator.Retimer:
        r = self.result
        return simulator.Retimer(self.step, r.schedule, r.measured, r.osl)

    @cached_property
    def pool(self) -> simulator.Pool:
        return simulator.Pool([self.retimer])

    @property
    def least_work(self) -> simulator.Result:
        """The schedule the bounds take: the benchmark's prompts reused as aiperf sends them, so
        the engine's prefix cache may skip their prefill (the least work any run does)."""
        return self.reused or self.result

    def bound_means(self) -> tuple[float, float]:
        """(mean TTFT, mean TPOT) of `least_work` at the bound."""
        r = self.least_work
        if r.schedule is self.result.schedule:
            return self.means(sc.BOUND)
        ttft, tpot = simulator.Pool([simulator.Retimer(self.step, r.schedule, r.measured, r.osl)]).means(sc.BOUND)[0]
        return float(ttft), float(tpot)

    def means(self, p: sc.Parameters) -> tuple[float, float]:
        """(mean TTFT, mean TPOT) of the row's measured requests under `p`."""
        ttft, tpot = self.pool.means(p)[0]
        return float(ttft), float(tpot)


def prepare(measured: list[rows.Row], specs, unique_prompts=workload.BENCHMARK_UNIQUE_PROMPTS,
            recipe: recipes.Recipe | str | None = recipes.DEFAULT) -> list[Case]:
    """Every row's schedule, or the reason it is not predicted. A schedule depends on the
    engine, the workload and the KV capacity only (the step features count tokens, not
    seconds), so rows that differ in model, device or tp share one simulation wherever the
    capacity never bound it, each row's capacity holds its peak (`simulator.Result`) and gives
    the prefix cache's pool the same verdict (`simulator.prefix_pool_fits`). `unique_prompts`:
    the prediction's (`workload.benchmark`); the bounds' schedule reuses aiperf's prompts.
    `recipe`: the engine settings the rows' benchmark ran with (`recipes`, a Recipe or its name;
    None: the engines' defaults), per row from its clients per rank and ISL."""
    recipe = recipes.load(recipe) if isinstance(recipe, str) else recipe
    steps, policies, schedules, capacity, out = {}, {}, {}, {}, []
    for row in measured:
        got = rows.resolve(row, specs)
        if isinstance(got, str):
            out.append(Case(row, got))
            continue
        if row.engine not in engines.names():
            out.append(Case(row, f"no engine policy '{row.engine}'; known: {', '.join(engines.names())}"))
            continue
        if row.engine not in policies:
            policies[row.engine] = engines.load(row.engine)
        policy = policies[row.engine]
        # the rows do not state the KV-cache format: assumed stored like the weights (as the
        # steady-state model assumes), not in the engine's default
        dep, clients = rows.deployment(row, got, rows.kv_format(got.weights))    # one attention-DP rank's
        if recipe is not None:
            policy = recipe.policy(policy, row.engine, clients, row.isl)
        key = (row.model, row.device, row.tp, row.attention_dp, row.moe_tp, row.moe_ep, got.weights)
        try:
            if key not in steps:
                steps[key] = sc.build(dep)
            if (key, row.engine) not in capacity:       # the weights' bytes are a sympy sum: once
                capacity[key, row.engine] = simulator.kv_capacity_tokens(steps[key], policy)
            res, reused = (_schedule(schedules, steps[key], policy, row, clients, capacity[key, row.engine], u)
                           for u in (unique_prompts, workload.AIPERF_DATASET_ENTRIES))
        except Unpredictable as exc:
            out.append(Case(row, str(exc)))
            continue
        out.append(Case(row, "", steps[key], policy, res, None if reused is res else reused))
    return out


def _schedule(cache: dict, step: sc.StepModel, policy: engines.Policy, row: rows.Row,
              clients: int, tokens: int, unique_prompts: int | None) -> simulator.Result:
    """The row's benchmark (`clients` of one attention-DP rank) scheduled, or a cached schedule
    that its KV capacity (`tokens`) reproduces. Where the prefix cache's pool does not fit, no
    prompt hits and the prompts' reuse does not change the schedule: the bounds' workload then
    shares the prediction's schedule (the Result keeps its own workload)."""
    blocks = tokens // policy.kv_block_tokens
    work = workload.benchmark(clients, row.isl, row.osl, unique_prompts)
    pool = simulator.prefix_pool_fits(policy, work, tokens)
    settings = (policy.name, *(getattr(policy, f) for f in engines.OVERRIDABLE))    # a recipe's per row
    shared = cache.setdefault((settings, clients, row.isl, row.osl, unique_prompts if pool else None), [])
    for res in shared:
        same = res.capacity_tokens == tokens
        if same or (not res.capacity_bound and blocks >= res.peak_blocks and res.prefix_pool == pool):
            if same and res.workload == work:
                return res
            return replace(res, capacity_tokens=tokens, workload=work)
    res = simulator.schedule(step, policy, work, tokens)
    shared.append(res)
    return res


def parameters(x: np.ndarray, free) -> sc.Parameters:
    """The Parameters at coordinates x of the `free` ones (calibrate.efficiency's coordinates;
    the simulator's own times, per request and the front end's latency, as its times)."""
    steady = set(sm.PARAMETERS)
    eff = calibrate.efficiency(np.array([v for n, v in zip(free, x) if n in steady]),
                               tuple(n for n in free if n in steady))
    values = {n: getattr(eff, n) for n in sm.PARAMETERS}
    for n, v in zip(free, x):
        if n in EXPERT_ONLY:      # a fraction, as calibrate.efficiency's
            values[n] = float(1 / (1 + np.exp(-np.clip(v, -30, 30))))
        elif n not in steady:
            values[n] = calibrate.TIME_UNIT * float(np.exp(np.clip(v, -30, 30)))
    return sc.Parameters(**values)


def fit(cases: list[Case], free=FITTED, scale: float = LOSS_SCALE) -> sc.Parameters:
    """The Parameters minimising soft-L1 of the log errors of mean TPOT and mean TTFT
    (`scale` 0: their squares)."""
    target = np.log([[c.row.tpot_s, c.row.ttft_s] for c in cases])
    if not any(c.step.routed for c in cases):
        free = tuple(n for n in free if n not in EXPERT_ONLY)
    pool = simulator.Pool([c.retimer for c in cases])

    def residual(x):
        p = parameters(x, free)
        got = np.log(pool.means(p)[:, ::-1])
        return soft_l1(((got - target) * [1.0, TTFT_WEIGHT]).ravel(), scale)
    x, damping = np.array([START.get(n, 0.0) for n in free]), 1e-3
    r = residual(x)
    for _ in range(ITERATIONS):
        jac = lsq.jacobian(residual, x, r)
        grad, hess = jac.T @ r, jac.T @ jac
        step = np.linalg.solve(hess + damping * np.diag(np.diag(hess) + 1e-12), -grad)
        trial = residual(x + step)
        if trial @ trial < r @ r:
            x, r, damping = x + step, trial, damping / 3
            if np.abs(step).max() < 1e-5:
                break
        else:
            damping *= 4
            if damping > 1e8:
                break
    return parameters(x, free)


class Fitter:
    """Fits on demand over `cases`: the rows of each key of `calibration.resolve`'s lookup
    (a group, an engine, a kind on every device, all), each fitted once.

    `shared`: fits by the rows they saw (the cases' identities, in order) and the parameters
    fitted, for Fitters over subsets of the same cases (the leave-one-group-out refits: a group
    the held-out rows are not in fits the same rows as the full fit). A fit is a function of
    its rows alone, so sharing one changes nothing; the caller owns the dict and the cases
    stay alive while it does."""

    def __init__(self, cases: list[Case], free=FITTED, shared: dict | None = None):
        self.cases, self.free, self.memo = [c for c in cases if c.predicted], tuple(free), {}
        self.shared = {} if shared is None else shared

    def rows(self, key: tuple) -> list[Case]:
        level, *names = key
        keep = {"group": lambda g: g == tuple(names), "engine": lambda g: g[1] == names[0],
                "kind": lambda g: g[2] == names[1],       # ("kind", None, kind): every device's
                "default": lambda g: True}[level]
        return [c for c in self.cases if keep(c.group)]

    def get(self, key: tuple) -> sc.Parameters | None:
        if key not in self.memo:
            rows = self.rows(key)
            seen = (tuple(map(id, rows)), self.free)
            if seen not in self.shared:
                self.shared[seen] = fit(rows, self.free) if rows else None
            self.memo[key] = self.shared[seen]
        return self.memo[key]

    def of(self, group: tuple) -> sc.Parameters:
        return calibration.resolve(group, self.get)


def fit_all(cases: list[Case], free=FITTED, shared: dict | None = None) -> calibration.Table:
    """Every group's, engine's and kind's fit and the pooled one, as a calibration file holds
    them (`shared`: `Fitter`'s)."""
    f = Fitter(cases, free, shared)
    if not f.cases:
        raise ValueError("no predictable rows to fit")
    groups = sorted({c.group for c in f.cases})
    kinds = sorted({(None, k) for _, _, k in groups})
    return calibration.Table(f.get(("default",)), {g: f.get(("group", *g)) for g in groups},
                             {e: f.get(("engine", e)) for e in sorted({g[1] for g in groups})}, f.free,
                             kinds={k: f.get(("kind", *k)) for k in kinds})
