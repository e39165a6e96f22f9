"""What a benchmark prints from a simulated run: TTFT, TPOT, ITL and E2E (mean, p50, p90, p99)
and throughput.

TPOT per request is (last token - first token) / (output tokens - 1), then averaged over
requests (as aiperf and vLLM's benchmark do); TTFT and E2E include the front end's latency
per request (`Parameters.request_latency_s`); ITL is every gap between two tokens of a
measured request, weighted per token; tokens/s per user is 1 / mean TPOT (a user's decode
speed); per GPU, the measured requests' output tokens over the time from the first measured
arrival to the last measured completion, divided by the devices. The queue wait is a measured
request's time from arrival to the step that first schedules it (part of its TTFT), and the
requests in the engine (`occupancy`) are time averages over the same span as the throughput,
so Little's law can be checked: running + waiting = completed requests/s x mean time in the
engine (E2E less the front end's latency), up to the span's edges. The throughput is the replayed
engine's: the front end's latency is added to each request's TTFT and E2E after the replay, not
put in a closed loop's cycle (the calibration fitted it so), so a closed loop's requests/s can
exceed C / E2E.

An open loop's queue is stable only if the engine completes what arrives (`backlog`): over
the second half of the arrivals (the first half lets the system fill), requests completed
against requests arrived in the same span. A finite run cannot tell an overload from a queue
still filling near capacity; either way its latencies depend on the run's length, and that
is what the check says.
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
    admitted = res.timeline[res.schedule.admitted, 0] if len(res.timeline) else res.arrival_s
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


def occupancy(arrival, admitted, finish, start, stop) -> dict:
    """Requests in the engine averaged over [start, stop]: waiting from arrival to the step that
    first schedules them, running from there to their last token (a preempted request counts
    as running), every request's time inside the span summed over the span's length."""
    def mean(a, b):
        return float((np.clip(b, start, stop) - np.clip(a, start, stop)).sum() / (stop - start)) if stop > start else 0.0
    return {"running": mean(admitted, finish), "waiting": mean(arrival, admitted)}


# a backlog grows where the second half of an open loop's arrivals sees fewer completions than
# this share of them (a stable queue completes what arrives, within its occupancy's noise)
BACKLOG = 0.95


def backlog(res) -> dict | None:
    """{arrived_per_s, completed_per_s, span_s} over the second half of the arrivals (every
    request's, warm-up too: they load the engine alike) where fewer than BACKLOG of the arrivals
    completed in that span, else None (and None below 4 requests: nothing to rate). A second
    half that arrives at one instant is a burst: its rate the workload's, none completed."""
    arrival = np.sort(res.arrival_s)
    n = len(arrival)
    if n < 4:
        return None
    start, stop = arrival[n // 2], arrival[-1]
    span = float(stop - start)
    if span <= 0:
        return {"arrived_per_s": float(res.workload.rate), "completed_per_s": 0.0, "span_s": 0.0}
    arrived = (n - n // 2 - 1) / span        # the arrivals after `start`, up to and with `stop`
    completed = float(np.count_nonzero((res.finish_s > start) & (res.finish_s <= stop))) / span
    if completed >= BACKLOG * arrived:
        return None
    return {"arrived_per_s": arrived, "completed_per_s": completed, "span_s": span}
