"""Disaggregated serving: prefill workers and decode workers, each its own deployment, the KV
cache of every prompt moving from a prefill worker to a decode worker.

Why a module of its own: the engine loop (`simulator`) replays one deployment; here two
pools of them are composed, each replayed by that loop unchanged:
- a prefill worker runs the closed-loop benchmark with one output token per request (its TTFT
  is the queueing and the prefill), under the row's prefill batch where one is given;
- a decode worker runs it with every request arriving prefilled (`simulator.simulate(...,
  prefilled=True)`: it never prefills), giving the wait for a slot and the TPOT;
- between them the KV cache of the prompt, ISL x KV bytes per token of one device, crosses the
  link between the pools (`kv_link`: the device's NVLink where both pools fit in one scale-up
  domain, else its scale-out network, RDMA), as a ring step of `collectives.time`: bytes /
  bandwidth + one latency. The larger of a prefill device's shard and a decode device's is the
  one that sets it (each device moves its own over its own link).

The C clients of the closed loop split between the pools as the time a request spends in each
(Little's law): with f of the cycle on the prefill side (queueing, prefill, transfer), each
prefill worker sees ceil(C f / P) clients and each decode worker ceil(C (1 - f) / D); f is
solved by bisection (a fixed number of halvings, so the answer does not depend on a clock). A
prediction: TTFT = queueing + prefill + transfer + half a decode step (the KV cache lands while
the decode worker is mid-step; the request joins its batch, and its first token goes out, at the
next step boundary) + the decode worker's wait for a slot (no layer-by-layer overlap of the
transfer with the prefill) + the calibration's front-end latency; TPOT from the decode workers.
Where the prefill pool limits the loop's rate X = P / (one prompt's prefill), every client
waits its turn there: TTFT = C / X - (OSL - 1) TPOT, so a row's own TTFT, TPOT and C say what
prefill time per prompt a prefill-limited loop implies (`row_record`'s
`implied_prefill_if_limiting_s`), beside the one predicted.

The KV cache's format beside 4-bit weights is fp8 (`rows.kv_format`), and attention's matrix
products run at that format's peak, never the 4-bit weights' (`stepcost.attention_peak`).

Rate matching: each pool's capacity in requests/s (P prefill workers with a saturating queue;
D decode workers holding all C clients between them); the smaller limits the throughput, and
the ratio of prefill to decode workers that balances them is the decode worker's capacity over
the prefill worker's.

The bound: a prompt's prefill alone at `stepcost.BOUND` (TTFT: the first token is computed by
the prefill worker, and engines may stream it before, or overlap the KV transfer with, the
prefill, so the transfer is left out of the bound), and the decode steps of one request alone
at BOUND over its own contexts (TPOT).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rooflinec.cost import collectives
from rooflinec.serving import engines, rows, simulator
from rooflinec.serving import stepcost as sc
from rooflinec.serving.serving_model import Unpredictable
from rooflinec.serving.workload import benchmark

HALVINGS = 12            # bisection steps for the clients' split between the pools


@dataclass(frozen=True)
class Pools:
    """Two deployments and how many workers of each (the deployment object of issue 27 item 1
    replaces `stepcost.Deployment` here; the pair stays the interface)."""

    prefill: sc.Deployment
    decode: sc.Deployment
    prefill_workers: int
    decode_workers: int
    prefill_batch: int | None = None    # requests a prefill worker runs at once (None: the engine's)

    @property
    def devices(self) -> int:
        return self.prefill.tp * self.prefill_workers + self.decode.tp * self.decode_workers


def kv_link(pools: Pools) -> collectives.Link:
    """NVLink where every device of both pools fits in one scale-up domain, else scale-out."""
    dev = pools.prefill.device
    inside = dev.link_bandwidth is not None and (dev.link_domain is None or pools.devices <= dev.link_domain)
    if inside:
        return collectives.Link(f"{dev.link}, inside one domain of {pools.devices} devices",
                                dev.link_bandwidth, dev.link_latency)
    if dev.network_bandwidth is None:
        raise Unpredictable(f"{pools.devices} devices leave {dev.key}'s scale-up domain and it declares no "
                            "scale_out network for the KV cache's transfer")
    return collectives.Link(f"{dev.network} (RDMA across domains, {pools.devices} devices)",
                            dev.network_bandwidth, dev.network_latency)


def kv_bytes(pools: Pools, isl: int) -> float:
    """Bytes of one prompt's KV cache the busiest device sends or receives: a prefill device's
    shard or a decode device's, whichever is larger."""
    return isl * max(float(pools.prefill.kv_per_token()), float(pools.decode.kv_per_token()))


def transfer_s(pools: Pools, isl: int, link: collectives.Link) -> float:
    return collectives.time(kv_bytes(pools, isl), 1, link)


class _Pool:
    """One worker of a pool, replayed by the simulator per concurrency (memoised)."""

    def __init__(self, dep: sc.Deployment, policy: engines.Policy, params: sc.Parameters, prefilled: bool):
        self.model, self.policy, self.params, self.prefilled = sc.build(dep), policy, params, prefilled
        self.seen: dict = {}

    def run(self, clients: int, isl: int, osl: int):
        key = (clients, isl, osl)
        if key not in self.seen:
            res = simulator.simulate(self.model, self.policy, benchmark(clients, isl, osl), self.params,
                                     prefilled=self.prefilled)
            m = res.measured
            wait = float(np.mean(res.first_s[m] - res.arrival_s[m]))
            tpot = float(np.mean((res.finish_s[m] - res.first_s[m]) / (osl - 1))) if osl > 1 else 0.0
            window = float(res.finish_s[m].max() - res.arrival_s[m].min())
            self.seen[key] = (wait, tpot, float(m.sum()) / window, res)
        return self.seen[key]


def simulate(pools: Pools, policy: engines.Policy, clients: int, isl: int, osl: int,
             params: sc.Parameters) -> dict:
    """The closed-loop benchmark of `clients` over both pools: TTFT, TPOT, throughput, the
    clients' split, and the rate matching (see the module)."""
    if osl < 2:
        raise Unpredictable("a request of one output token never reaches a decode worker")
    link = kv_link(pools)
    xfer = transfer_s(pools, isl, link)
    pre = _Pool(pools.prefill, prefill_policy(pools, policy, isl), params, False)
    dec = _Pool(pools.decode, policy, params, True)
    P, D = pools.prefill_workers, pools.decode_workers

    def at(f):
        c_p = max(1, math.ceil(clients * f / P))
        c_d = max(1, math.ceil(clients * (1 - f) / D))
        queued = pre.run(c_p, isl, 1)[0]                 # queueing + prefill, a latency before it
        wait, tpot, _, _ = dec.run(c_d, isl, osl)
        side = queued + xfer + tpot / 2                  # the KV lands mid-step: joins at the next
        return side / (side + wait + (osl - 1) * tpot) - f, (c_p, c_d, queued, wait, tpot)

    lo, hi = 0.0, 1.0
    for _ in range(HALVINGS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at(mid)[0] > 0 else (lo, mid)
    _, (c_p, c_d, queued, wait, tpot) = at((lo + hi) / 2)
    # the front end's latency once; half a decode step on average until the step in progress on
    # the decode worker ends and admits the request (its first token streams from there)
    ttft = queued + xfer + tpot / 2 + wait + params.request_latency_s
    cycle = ttft + (osl - 1) * tpot
    match = rate_matching(pre, dec, pools, clients, isl, osl)
    # the loop's rate (Little's law), at most either pool's capacity (whole clients per worker,
    # rounded up, can put a little more load on a pool than the loop has)
    rate = min(clients / cycle, match["prefill_capacity_per_s"], match["decode_capacity_per_s"])
    return {"ttft_s": ttft, "tpot_s": tpot, "prefill_s": queued, "transfer_s": xfer, "decode_wait_s": wait,
            "step_in_progress_s": tpot / 2,
            "link": {"name": link.name, "bandwidth": link.bandwidth, "latency": link.latency},
            "kv_bytes": kv_bytes(pools, isl), "requests_per_s": rate,
            "tokens_per_s_per_gpu": rate * osl / pools.devices,
            "clients_per_prefill_worker": c_p, "clients_per_decode_worker": c_d, **match}


def prefill_policy(pools: Pools, policy: engines.Policy, isl: int) -> engines.Policy:
    """The engine's policy on a prefill worker: with a prefill batch given, that many requests at
    once and a token budget that holds them (a disaggregated prefill worker is configured so)."""
    b = pools.prefill_batch
    if not b:
        return policy
    budget = max(policy.max_tokens, b * isl)
    return engines.override(policy, max_batch=b, max_tokens=budget, chunk_tokens=max(policy.chunk_tokens, budget))


def rate_matching(pre: _Pool, dec: _Pool, pools: Pools, clients: int, isl: int, osl: int) -> dict:
    """Requests/s each pool can carry, the one that limits, and the prefill : decode worker
    ratio that balances them."""
    busy = 2 * (pools.prefill_batch or max(1, pre.policy.max_tokens // isl))   # a queue that never empties
    per_prefill = pre.run(busy, isl, 1)[2]
    per_decode = dec.run(max(1, math.ceil(clients / pools.decode_workers)), isl, osl)[2]
    p_cap, d_cap = pools.prefill_workers * per_prefill, pools.decode_workers * per_decode
    return {"prefill_capacity_per_s": p_cap, "decode_capacity_per_s": d_cap,
            "limited_by": "prefill" if p_cap < d_cap else "decode",
            "balanced_prefill_per_decode": per_decode / per_prefill}


def bound(pools: Pools, policy: engines.Policy, isl: int, osl: int) -> dict:
    """Lower bounds on a request's TTFT and mean TPOT (the module says why the transfer is out)."""
    pre = _Pool(pools.prefill, prefill_policy(pools, policy, isl), sc.BOUND, False).run(1, isl, 1)[0]
    tpot = _Pool(pools.decode, policy, sc.BOUND, True).run(1, isl, osl)[1]
    return {"ttft_s": pre, "tpot_s": tpot}


def text(out: dict) -> str:
    """`rooflinec simulate --prefill-workers ...` in the terminal."""
    (pw, ptp), (dw, dtp) = out["pools"]["prefill"], out["pools"]["decode"]
    workers = lambda n, kind: f"{n} {kind} worker{'' if n == 1 else 's'}"   # noqa: E731
    lines = [f"{out['model']} on {out['device']}, {out['engine']}: {workers(pw, 'prefill')} of tp {ptp}, "
             f"{workers(dw, 'decode')} of tp {dtp}; {out['workload']}", f"{out['kind']} ({out['parameters']})", ""]
    if out["kind"] == "bound":
        return "\n".join(lines + [f"TTFT >= {1e3 * out['ttft_s']:.2f} ms (a prompt's prefill alone), "
                                  f"TPOT >= {1e3 * out['tpot_s']:.3f} ms (one request's decode steps alone)"]) + "\n"
    lines += [f"TTFT {1e3 * out['ttft_s']:.2f} ms = queueing + prefill {1e3 * out['prefill_s']:.2f} + KV transfer "
              f"{1e3 * out['transfer_s']:.3f} ({out['kv_bytes'] / 1e6:.1f} MB per device over {out['link']['name']}) "
              f"+ wait for a decode slot {1e3 * out['decode_wait_s']:.2f}",
              f"TPOT {1e3 * out['tpot_s']:.3f} ms (decode workers that never prefill)",
              f"{out['requests_per_s']:.2f} requests/s, {out['tokens_per_s_per_gpu']:.1f} output tokens/s per GPU; "
              f"clients per worker: prefill {out['clients_per_prefill_worker']}, decode {out['clients_per_decode_worker']}",
              f"capacity: prefill pool {out['prefill_capacity_per_s']:.2f} requests/s, decode pool "
              f"{out['decode_capacity_per_s']:.2f}; limited by {out['limited_by']}; balanced at "
              f"{out['balanced_prefill_per_decode']:.2f} prefill workers per decode worker"]
    return "\n".join(lines) + "\n"


ROW_ASSUMPTIONS = (
    "Disaggregated rows: each pool a tensor-parallel group of the row's prefill_* / decode_* layout, "
    "its workers as the row counts them; a prefill worker runs the row's prefill_batch prompts at once "
    "with a token budget that holds them (the rows do not state the engines' own); the clients are the "
    "row's concurrency (a row without one is not predicted); the KV cache in the weights' format; the "
    "(device, engine) calibration of the aggregated rows, not fitted on these.",
)


def row_record(row, resolved, policy: engines.Policy, params: sc.Parameters) -> dict:
    """One disaggregated row (`rows.resolve_disagg`'s) predicted, beside its measurement."""
    pre, dec = row.pools
    clients = row.concurrency
    kv = rows.kv_format(resolved.weights)
    deps = [sc.Deployment(resolved.model, resolved.device, p.tp, resolved.weights, kv) for p in (pre, dec)]
    pools = Pools(*deps, pre.workers, dec.workers, pre.batch * pre.attention_dp)
    out = simulate(pools, policy, clients, row.isl, row.osl, params)
    lo = bound(pools, policy, row.isl, row.osl)
    return {"row_id": row.row_id, "model": row.model, "device": row.device, "engine": row.engine,
            "prefill": f"{pre.workers} x tp {pre.tp}", "decode": f"{dec.workers} x tp {dec.tp}",
            "isl": row.isl, "osl": row.osl, "clients": clients, "predicted": True,
            "measured_ttft_s": row.ttft_s, "measured_tpot_s": row.tpot_s,
            "ttft_s": out["ttft_s"], "tpot_s": out["tpot_s"], "ttft_bound_s": lo["ttft_s"], "tpot_bound_s": lo["tpot_s"],
            "ttft_error": out["ttft_s"] / row.ttft_s - 1, "tpot_error": out["tpot_s"] / row.tpot_s - 1,
            "transfer_s": out["transfer_s"], "link": out["link"]["name"], "limited_by": out["limited_by"],
            "prefill_s": out["prefill_s"],
            # were the prefill pool the limit, the measured loop's rate C / (TTFT + (OSL-1) TPOT)
            # would be P / prefill: the prefill time per prompt the measurement implies
            "implied_prefill_if_limiting_s": pre.workers * (row.ttft_s + (row.osl - 1) * row.tpot_s) / clients,
            "balanced_prefill_per_decode": out["balanced_prefill_per_decode"]}
