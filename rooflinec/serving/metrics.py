"""What a benchmark prints from a simulated run: TTFT, TPOT, ITL and E2E (mean, p50, p90, p99)
and throughput.

TPOT per request is (last token - first token) / (output tokens - 1), then averaged over
requests (as aiperf and vLLM's benchmark do); TTFT and E2E include the front end's latency
per request (`Parameters.request_latency_s`); ITL is every gap between two tokens of a
measured request, weighted per token; tokens/s per user is 1 / mean TPOT (a user's decode
speed); per GPU, the measured requests' output tokens over the time from the first measured
arrival to the last measured completion, divided by the devices. The queue wait is a measured
request's time from arrival to the step that first schedules it (part of its TTFT), and the
requests in the engine (`occupancy`) are time averages over the same span as the throughput:
their sum is the requests' time in the engine within the span over its length, so it is
completed requests/s x mean time in the engine (E2E less the front end's latency), Little's
law, by construction, up to the warm-up requests' time inside the span. The throughput is
the replayed engine's: the front end's latency is added to each request's TTFT and E2E after
the replay, not put in a closed loop's cycle (the calibration fitted it so), so a closed
loop's requests/s can exceed C / E2E.

An open loop is in a steady state only if the engine completes what arrives (`backlog`): over
the second half of the arrivals (the first half lets the engine fill), requests completed
against requests arrived in the same span, short by a material share and beyond the noise of
a steady count. A finite run cannot tell an overload from an engine still filling near
capacity; either way its latencies depend on the run's length, and that is what the check says.
"""

from __future__ import annotations

import numpy as np

QUANTILES = (("p50", 50), ("p90", 90), ("p99", 99))


def stats(values, weights=None) -> dict:
    v = np.asarray(values, float)
    if not len(v):
        return {"mean": None, **{k: None for k, _ in QUANTILES}}
    w = np.ones(len(v)) if weights is None else np.asarray(weights, float)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    out = {"mean": float((v * w).sum() / cum[-1])}
    for name, q in QUANTILES:   # the smallest value with at least q% of the weight at or below it
        out[name] = float(v[min(int(np.searchsorted(cum, q / 100 * cum[-1] * (1 - 1e-12))), len(v) - 1)])
    return out


def summary(res, devices: int) -> dict:
    m = res.measured
    ttft = res.first_s[m] - res.arrival_s[m] + res.latency_s
    e2e = res.finish_s[m] - res.arrival_s[m] + res.latency_s
    long = m & (res.osl > 1)
    tpot = (res.finish_s[long] - res.first_s[long]) / (res.osl[long] - 1)
    start, stop = res.arrival_s[m].min(), res.finish_s[m].max()
    window = stop - start
    tpot_stats = stats(tpot)
    admitted = admitted_s(res)
    return {
        "ttft_s": stats(ttft), "tpot_s": tpot_stats, "itl_s": stats(res.itl_s, res.itl_weight),
        "e2e_s": stats(e2e), "queue_wait_s": stats(admitted[m] - res.arrival_s[m]),
        "in_engine_mean": occupancy(res.arrival_s, admitted, res.finish_s, start, stop),
        "tokens_per_s_per_gpu": float(res.osl[m].sum() / window / devices),
        "tokens_per_s_per_user": 1 / tpot_stats["mean"] if tpot_stats["mean"] else None,
        "requests_per_s": float(m.sum() / window),
        "measured_requests": int(m.sum()),
        "steps": int(res.timeline[:, 1].sum()) if len(res.timeline) else 0,
        "mean_batch": float((res.timeline[:, 1] * res.timeline[:, 2]).sum() / res.timeline[:, 1].sum()),
        "preemptions": res.preemptions,
        "kv_cache_tokens": res.capacity_tokens,
    }


def admitted_s(res) -> np.ndarray:
    """Each request's admission time: the start of the run that first schedules it (every
    request is admitted in some run)."""
    return res.timeline[res.schedule.admitted, 0]


def occupancy(arrival, admitted, finish, start, stop) -> dict:
    """Requests in the engine averaged over [start, stop]: waiting from arrival to the step that
    first schedules them, running from there to their last token (a preempted request counts
    as running), every request's time inside the span summed over the span's length."""
    def mean(a, b):
        if not stop > start:
            return 0.0
        return float((np.clip(b, start, stop) - np.clip(a, start, stop)).sum() / (stop - start))
    return {"running": mean(admitted, finish), "waiting": mean(arrival, admitted)}


# a shortfall that matters: fewer completions than this share of the arrivals
BACKLOG = 0.95


def backlog(res) -> dict | None:
    """{arrived_per_s, completed_per_s, span_s} over the second half of the arrivals (every
    request's, warm-up too: they load the engine alike) where the requests in the engine grew,
    else None (and None below 4 requests: nothing to rate). The growth is the arrivals less
    the completions in the span, D = n(stop) - n(start), and it counts where it is both
    material and past its noise: under BACKLOG of the arrivals completed, and D > 3 sqrt(2 r +
    1) or a standing queue as large (waiting requests averaged over the span). Below capacity
    a batching engine runs what arrives and the count it runs is about Poisson (M/G/inf: each
    arrival of a lifetime still in it; variance its mean, r over the span), so D's standard
    deviation is near sqrt(2 r); the count's lifetimes vary with the batch, which spreads it
    more (the engine's count at two instants of a run at a third of capacity: 7 and 24, r 12),
    so the share alone keeps a long steady run from being called growing on one such draw,
    and the noise alone a short one on a few requests. At its batch or KV limit the running
    count is pinned, not Poisson, and the growth waits: SGLang's Llama-3.1-8B at 150% of its
    capacity ran 388 on average with 183 waiting and grew by 81 against a noise of 84, so a
    standing queue past the noise counts as growth too. A second half that arrives at one
    instant is a burst: its rate the workload's, none completed."""
    arrival = np.sort(res.arrival_s)
    n = len(arrival)
    if n < 4:
        return None
    start, stop = arrival[n // 2], arrival[-1]
    span = float(stop - start)
    if span <= 0:
        return {"arrived_per_s": float(res.workload.rate), "completed_per_s": 0.0, "span_s": 0.0}
    arrived = n - n // 2 - 1                 # the arrivals after `start`, up to and with `stop`
    completed = int(np.count_nonzero((res.finish_s > start) & (res.finish_s <= stop)))
    held = occupancy(res.arrival_s, admitted_s(res), res.finish_s, start, stop)
    noise = 3 * np.sqrt(2 * held["running"] + 1)
    if completed >= BACKLOG * arrived or (arrived - completed <= noise and held["waiting"] <= noise):
        return None
    return {"arrived_per_s": arrived / span, "completed_per_s": completed / span, "span_s": span}
