"""The planner's disaggregated configurations: P prefill workers of tp_p and D decode workers
of tp_d (the prefill : decode ratio an axis, each pool its own tp), priced from the steady
step, beside the aggregated points on one frontier.

Why not `disagg.simulate`: it replays both pools in the serving simulator (seconds per
configuration), and the planner searches tens of thousands; here each pool is its step model
(`plan_step.cached_step`, the same the aggregated points use) over every batch at once.
`disagg` still owns the pair (`disagg.Pools`) and the KV cache's move (`disagg.kv_link`,
`disagg.transfer_s`: a prompt's KV shard over NVLink inside one scale-up domain, else RDMA).

Per configuration (B sequences in flight on each decode worker, prompts isl, outputs osl):
- a decode worker steps its B sequences at mean context isl + osl/2 and never prefills:
  TPOT = that step (a prediction, calibrated); its bound the least decode step of B at context
  isl under the overlapped rule at the peaks, as the aggregated bound;
- a prefill worker prefills one prompt per step: prefill_s = that step; TTFT = prefill_s +
  the KV transfer + the decode worker's admission (`disagg.admission_steps`: half the step in
  progress and the one step before the first token streams, an engine not named) + the front
  end's latency (no queueing: steady state at rate matching; a prediction); the prefill bound
  alone (no transfer, no overheads) prunes on TTFT;
- rate matching (the rule of `disagg.rate_matching`, whose pools are simulator replays, here
  from the steady steps): the decode pool finishes D x B / (osl x TPOT) requests/s, which the
  prefill pool's P / prefill_s must carry, else the decode workers cannot hold B sequences
  each (a pruned reason, counted); tokens/s per GPU = D x B / TPOT over P tp_p + D tp_d GPUs;
  its bound min(D x B / TPOT bound, P x osl / prefill bound) over the same GPUs;
- memory: a decode worker holds its weights and B sequences' KV cache, a prefill worker its
  weights and one prompt's.
Ratios are coprime (2:2 prices as 1:1), at most `MOST_WORKERS` workers a pool, and both
pools fit the GPU budget. Pools are tensor
parallel only (attention DP and EP are aggregated axes here; `disagg.Pools` takes either).
"""

from __future__ import annotations

import math

import numpy as np

from rooflinec.serving import disagg, plan_step
from rooflinec.serving import serving_model as sm
from rooflinec.serving import stepcost as sc


MOST_WORKERS = 8     # workers of one pool in a ratio: 1:8 to 8:1 (a search budget, in counts)


def ratios(tp_p: int, tp_d: int, gpus: int) -> list[tuple[int, int]]:
    """Coprime (prefill workers, decode workers), at most MOST_WORKERS each, whose pools fit `gpus`."""
    most = min(gpus, MOST_WORKERS)
    return [(p, d) for p in range(1, most + 1) for d in range(1, most + 1)
            if math.gcd(p, d) == 1 and p * tp_p + d * tp_d <= gpus]


def decode_features(batch: np.ndarray, context: float) -> np.ndarray:
    """A decode worker's step: `batch` decodes at `context` each, no prefill."""
    x = np.zeros((len(batch), len(sc.FEATURES)))
    x[:, sc.ONE], x[:, sc.DECODES], x[:, sc.TOKENS], x[:, sc.LOGITS] = 1, batch, batch, batch
    x[:, sc.CONTEXT] = batch * context
    return x


def prompt_features(isl: int) -> np.ndarray:
    """A prefill worker's step: one whole prompt as one chunk, its first token's logits."""
    x = np.zeros((1, len(sc.FEATURES)))
    x[0, sc.ONE], x[0, sc.TOKENS], x[0, sc.LOGITS], x[0, sc.CHUNKS] = 1, isl, 1, 1
    x[0, sc.CHUNK_SQUARE], x[0, sc.CHUNK_TOKENS], x[0, sc.CHUNK_KEYS] = isl ** 2, isl, isl
    return x


def search(res, steps, model, device, gpus: int, work, slo, p: sc.Parameters, pairs, batch, at_one: dict) -> None:
    """Every disaggregated (tp_p, tp_d, ratio, formats, batch) of `device` into `res` (see the module)."""
    xs = (decode_features(batch, work.isl + work.osl / 2), decode_features(batch, work.isl), prompt_features(work.isl))
    for fmt in pairs:
        for tp_p, tp_d in ((a, b) for a in plan_step.powers(gpus) for b in plan_step.powers(gpus)):
            combos = ratios(tp_p, tp_d, gpus)
            n = len(batch) * len(combos)
            res.searched += n
            if n == 0:
                continue
            try:
                pools = _pools(steps, model, device, at_one, fmt, tp_p, tp_d, work)
            except sm.Unpredictable as exc:   # its message starts with the reason's kind
                res.count(str(exc), n)
                continue
            _ratios(res, pools, combos, device, work, slo, p, batch, xs, fmt, at_one)


def _pools(steps, model, device, at_one, fmt, tp_p, tp_d, work):
    reason = plan_step.no_peak(model, device, fmt)
    if reason:
        raise sm.Unpredictable(reason)
    try:
        pre, dec = (plan_step.cached_step(steps, model, device, {**at_one, "tp": t}, fmt.weights, fmt.kv_cache,
                                          fmt.experts, (work.isl, work.isl + work.osl)) for t in (tp_p, tp_d))
    except sm.Unpredictable as exc:
        raise sm.Unpredictable(f"unpredictable: {exc}") from None
    prompt = plan_step.cached_weights(steps, pre, 1) + work.isl * plan_step.cached_kv_per_token(steps, pre)
    if prompt > device.capacity:
        raise sm.Unpredictable("memory: a prefill worker's weights and one prompt's KV cache do not fit")
    return pre, dec, plan_step.cached_weights(steps, dec, 1), plan_step.cached_kv_per_token(steps, dec)


def _ratios(res, pools, combos, device, work, slo, p, batch, xs, fmt, at_one) -> None:
    (pre, dec, dec_weights, dec_kv), (steady_x, least_x, prompt_x) = pools, xs
    memory = dec_weights + batch * dec_kv * (work.isl + work.osl / 2)
    fits = memory <= device.capacity
    tpot, bound = dec.durations(steady_x, p), dec.bound(least_x)
    prefill_s, prefill_bound = float(pre.durations(prompt_x, p)[0]), float(pre.bound(prompt_x)[0])
    moves = {}
    for workers_p, workers_d in combos:
        pair = disagg.Pools(pre.deployment, dec.deployment, workers_p, workers_d)
        try:
            link = disagg.kv_link(pair)
            if link not in moves:    # the same bytes over each link the pairs' sizes pick
                moves[link] = disagg.transfer_s(pair, work.isl, link)
            ttft = prefill_s + moves[link] + p.request_latency_s + disagg.admission_steps(None) * tpot
        except sm.Unpredictable as exc:
            res.count(f"device: {exc}", len(batch))
            continue
        res.count("memory: the KV cache of the batch does not fit beside the weights", (~fits).sum())
        early = fits & ((bound > slo.tpot_s) | (prefill_bound > slo.ttft_s))
        res.count("bound: the TPOT or TTFT bound misses the SLO", early.sum())
        demand = workers_d * batch / (work.osl * tpot)              # requests/s the decode pool finishes
        fed = demand <= workers_p / prefill_s
        keep = fits & ~early
        res.count("rate: the prefill pool cannot keep B sequences on every decode worker", (keep & ~fed).sum())
        keep &= fed
        met = keep & (tpot <= slo.tpot_s) & (ttft <= slo.ttft_s)
        res.count(plan_step.misses(p, slo), (keep & ~met).sum())
        if met.any():
            gpus = workers_p * pre.deployment.tp + workers_d * dec.deployment.tp
            dep = {**at_one, "tp": dec.deployment.tp, "mode": "disagg", "prefill_tp": pre.deployment.tp,
                   "prefill_workers": workers_p, "decode_workers": workers_d}
            most = np.minimum(workers_d * batch / bound, workers_p * work.osl / prefill_bound)
            res.add(device.key, dep, fmt, batch, met, tpot, ttft, bound,
                    workers_d * batch / tpot, most, gpus, memory)
