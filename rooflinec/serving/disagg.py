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

Each pool's worker is a `Deployment` of its own tp, attention_dp, moe_tp and moe_ep; a worker of
attention_dp ranks is attention_dp ranks of the pool, each its own batch and KV cache (the
simulator replays one rank: `stepcost.build`'s MoE layers see the tokens of all its worker's
ranks). P prefill ranks and D decode ranks in all. A prefill rank of a MoE worker under attention
DP is priced as that step model prices every rank, its MoE layers seeing all dp ranks' tokens as
if each prefilled a prompt at once: an upper estimate where the ranks are not all busy (vLLM's
idle DP ranks do run dummy steps to keep the MoE collectives in step, but on no tokens).

The closed loop of C clients, from first principles (a request's cycle: the prefill side, then
the decode side):
- the decode ranks hold the clients that are decoding; with f of the cycle on the prefill side,
  each decode rank replays ceil(C (1 - f) / D) clients in a closed loop of prefilled arrivals,
  giving the wait for a slot and TPOT; the loop's rate is then X = C (1 - f) / (wait + (OSL - 1)
  TPOT) (Little's law on the decode side);
- the prefill side is a closed queueing network: the C clients circulate between the P prefill
  ranks (FCFS, one prompt per step of s, a request to any of them alike) and the rest of the
  cycle (front end, transfer, decode side) as a delay; `prefill_residence` solves it by mean
  value analysis with a deterministic server's residual (one client never queues; many queue as
  the prefill ranks fill), giving the queueing, the prefill and the loop's rate; the engine's
  batching of several prompts per prefill step, where a worker is configured so, is left out of
  the queue (it would queue less);
- f solves f = prefill side / cycle by bisection (a fixed number of halvings, so the answer does
  not depend on a clock).

TTFT = the front end's latency + queueing + prefill + transfer + half a decode step (the KV
cache lands while the decode rank is mid-step; the request joins at the next step boundary) +
the wait for a slot + the decode steps the engine runs before it streams the first token
(`FIRST_TOKEN_STEPS`: the first token is streamed by the decode worker in all three engines;
SGLang streams the prefill's token when the request joins, with no forward pass, its scheduler's
"prebuilt" batch, `process_batch_result_prebuilt`; TensorRT-LLM's generation worker returns the
first token with the second, after its first generation step (NVIDIA/TensorRT-LLM pull request
3241; 6512, which would have streamed it from the context worker, was closed); vLLM's decode
worker recomputes the prompt's last token, so its first step computes the first token
(`_update_waiting_for_remote_kv`: num_computed_tokens - 1)). No layer-by-layer overlap of the
transfer with the prefill, and the link is not a queue (at these rates a prompt's transfer uses
it a few percent of the time). TPOT from the decode workers. Where the prefill pool limits the
loop's rate X = P / (one prompt's prefill), every client waits its turn there: TTFT = C / X -
(OSL - 1) TPOT, so a row's own TTFT, TPOT and C say what prefill time per prompt a
prefill-limited loop implies (`row_record`'s `implied_prefill_if_limiting_s`), beside the one
predicted.

The KV cache's format beside 4-bit weights is fp8 (`rows.kv_format`), and attention's matrix
products run at that format's peak, never the 4-bit weights' (`stepcost.attention_peak`).

Rate matching: each pool's capacity in requests/s (P prefill ranks with a saturating queue;
D decode ranks holding all C clients between them); the smaller limits the throughput, and
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
from rooflinec.serving import engines, intervals, rows, simulator
from rooflinec.serving import stepcost as sc
from rooflinec.serving.serving_model import Unpredictable
from rooflinec.serving.workload import benchmark

HALVINGS = 12            # bisection steps for the clients' split between the pools
# decode steps a request runs after it joins a decode rank's batch before its first token streams
# (see the module), by the engine policy's name; an engine not named: its first step computes it
FIRST_TOKEN_STEPS = {"SGLang": 0, "TensorRT-LLM": 1, "vLLM": 1}
ANY_ENGINE_STEPS = 1     # an engine not named (the planner's, which names none)
# clients a loop may have: the benchmark's 22 requests a client (20 measured after 2) within the
# simulator's event budget, so the prefill queue's mean value analysis (a pass per client) is bounded too
MOST_CLIENTS = simulator.MAX_EVENTS // 22


def admission_steps(engine: str | None) -> float:
    """Decode steps from a KV cache's arrival to its first token streamed: half the step in
    progress, then the engine's FIRST_TOKEN_STEPS."""
    return 0.5 + FIRST_TOKEN_STEPS.get(engine, ANY_ENGINE_STEPS)


@dataclass(frozen=True)
class Pools:
    """Two deployments (one worker of each pool: its tp, attention DP and experts' layout) and
    how many workers of each; `prefill_batch`: requests one prefill rank runs at once."""

    prefill: sc.Deployment
    decode: sc.Deployment
    prefill_workers: int
    decode_workers: int
    prefill_batch: int | None = None    # requests a prefill worker runs at once (None: the engine's)

    @property
    def devices(self) -> int:
        return self.prefill.devices * self.prefill_workers + self.decode.devices * self.decode_workers

    @property
    def prefill_ranks(self) -> int:
        return self.prefill.attention_dp * self.prefill_workers

    @property
    def decode_ranks(self) -> int:
        return self.decode.attention_dp * self.decode_workers


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


def prefill_residence(clients: int, ranks: int, service_s: float, think_s: float) -> tuple[float, float]:
    """Mean value analysis of the closed loop's prefill side (see the module): `clients`
    circulating between `ranks` FCFS prefill ranks (each request to one of them, visit ratio
    1 / ranks; one prompt per step of `service_s`) and the rest of the cycle, a delay of
    `think_s`. Per visit a request waits for the (Q - U) requests queued before it, a prompt each,
    and for the rest of the one in service where the rank is busy (U), half a prompt for a
    deterministic service (the residual E[s^2] / 2E[s]): R = s + s (Q - U) + U s / 2 (exact MVA
    for exponential service has s (1 + Q); Reiser and Lavenberg 1980, Lazowska et al.
    "Quantitative System Performance" 1984, chapter 7, on FCFS centres of other service
    distributions). Returns (queueing + prefill per request, the loop's rate in requests/s)."""
    q = u = 0.0                              # one rank's queue length and utilisation at n - 1 clients
    r = x = 0.0
    for n in range(1, clients + 1):
        r = service_s + service_s * max(0.0, q - u) + u * service_s / 2
        x = n / (r + think_s)
        q, u = x * r / ranks, min(1.0, x * service_s / ranks)
    return r, x


def implied_prefill(clients: int, ranks: int, residence_s: float, think_s: float) -> float:
    """The one prompt's prefill time under which `prefill_residence` gives `residence_s` (the
    queueing and prefill a row's measured TTFT leaves once the other terms are taken off), by
    bisection (the residence grows with the prefill); 0 where nothing is left."""
    if residence_s <= 0:
        return 0.0
    lo, hi = 0.0, residence_s
    for _ in range(4 * HALVINGS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if prefill_residence(clients, ranks, mid, think_s)[0] < residence_s else (lo, mid)
    return (lo + hi) / 2


def simulate(pools: Pools, policy: engines.Policy, clients: int, isl: int, osl: int,
             params: sc.Parameters) -> dict:
    """The closed-loop benchmark of `clients` over both pools: TTFT, TPOT, throughput, the
    clients' split, and the rate matching (see the module)."""
    if osl < 2:
        raise Unpredictable("a request of one output token never reaches a decode worker")
    if clients > MOST_CLIENTS:
        raise Unpredictable(f"{clients:,} clients: past the {MOST_CLIENTS:,} the simulator's event budget replays")
    link = kv_link(pools)
    xfer = transfer_s(pools, isl, link)
    pre = _Pool(pools.prefill, prefill_policy(pools, policy, isl), params, False)
    dec = _Pool(pools.decode, policy, params, True)
    P, D = pools.prefill_ranks, pools.decode_ranks
    first = FIRST_TOKEN_STEPS.get(policy.name, ANY_ENGINE_STEPS)
    alone = pre.run(1, isl, 1)[0]                    # one prompt's prefill, queueing nothing

    def at(f):
        c_d = max(1, math.ceil(clients * (1 - f) / D))
        wait, tpot, _, _ = dec.run(c_d, isl, osl)
        decoding = wait + (osl - 1) * tpot
        around = params.request_latency_s + xfer + tpot / 2      # joins the decode batch at the next step
        queued, rate = prefill_residence(clients, P, alone, around + decoding)
        side = around + queued
        return side / (side + decoding) - f, (c_d, queued, wait, tpot, rate)

    lo, hi = 0.0, 1.0
    for _ in range(HALVINGS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at(mid)[0] > 0 else (lo, mid)
    _, (c_d, queued, wait, tpot, rate) = at((lo + hi) / 2)
    ttft = params.request_latency_s + queued + xfer + tpot / 2 + wait + first * tpot
    match = rate_matching(pre, dec, pools, clients, isl, osl)
    # the loop's rate, at most either pool's capacity (whole clients per rank, rounded up, can
    # put a little more load on a pool than the loop has)
    rate = min(rate, match["prefill_capacity_per_s"], match["decode_capacity_per_s"])
    return {"ttft_s": ttft, "tpot_s": tpot, "prefill_s": alone, "queueing_s": queued - alone, "transfer_s": xfer,
            "decode_wait_s": wait, "step_in_progress_s": tpot / 2, "first_token_steps": first,
            "first_token_s": first * tpot, "front_end_s": params.request_latency_s,
            "link": {"name": link.name, "bandwidth": link.bandwidth, "latency": link.latency},
            "kv_bytes": kv_bytes(pools, isl), "requests_per_s": rate,
            "tokens_per_s_per_gpu": rate * osl / pools.devices,
            "prefill_utilisation": rate / match["prefill_capacity_per_s"],   # of what the pool can prefill
            "clients_per_decode_rank": c_d, **match}


def prefill_policy(pools: Pools, policy: engines.Policy, isl: int) -> engines.Policy:
    """The engine's policy on a prefill worker: with a prefill batch given, that many requests at
    once and a token budget that holds them (a disaggregated prefill worker is configured so)."""
    b = pools.prefill_batch
    if not b:
        return policy
    budget = max(policy.max_tokens, b * isl)
    if b > engines.MOST or budget > engines.MOST:    # the row's own figures, not a command line's
        raise Unpredictable(f"a prefill batch of {b:,} prompts of {isl:,} tokens: past the {engines.MOST:,} "
                            "tokens a step's budget may hold")
    return engines.override(policy, max_batch=b, max_tokens=budget, chunk_tokens=max(policy.chunk_tokens, budget))


def rate_matching(pre: _Pool, dec: _Pool, pools: Pools, clients: int, isl: int, osl: int) -> dict:
    """Requests/s each pool can carry (its ranks' own), the one that limits, and the prefill :
    decode worker ratio that balances them."""
    busy = 2 * (pools.prefill_batch or max(1, pre.policy.max_tokens // isl))   # a queue that never empties
    per_prefill = pre.run(busy, isl, 1)[2]
    per_decode = dec.run(max(1, math.ceil(clients / pools.decode_ranks)), isl, osl)[2]
    p_cap, d_cap = pools.prefill_ranks * per_prefill, pools.decode_ranks * per_decode
    return {"prefill_capacity_per_s": p_cap, "decode_capacity_per_s": d_cap,
            "limited_by": "prefill" if p_cap < d_cap else "decode",       # workers, each of its ranks:
            "balanced_prefill_per_decode": (per_decode * pools.decode.attention_dp)
                                           / (per_prefill * pools.prefill.attention_dp)}


def bound(pools: Pools, policy: engines.Policy, isl: int, osl: int) -> dict:
    """Lower bounds on a request's TTFT and mean TPOT (the module says why the transfer is out)."""
    pre = _Pool(pools.prefill, prefill_policy(pools, policy, isl), sc.BOUND, False).run(1, isl, 1)[0]
    tpot = _Pool(pools.decode, policy, sc.BOUND, True).run(1, isl, osl)[1]
    return {"ttft_s": pre, "tpot_s": tpot}


def text(out: dict) -> str:
    """`rooflinec simulate --prefill-workers ...` in the terminal."""
    (pw, ptp), (dw, dtp) = out["pools"]["prefill"], out["pools"]["decode"]
    dp = out.get("attention_dp", {})
    workers = lambda n, kind, tp: (f"{n} {kind} worker{'' if n == 1 else 's'} of tp {tp}"   # noqa: E731
                                   + (f" x dp {dp[kind]}" if dp.get(kind, 1) > 1 else ""))
    lines = [f"{out['model']} on {out['device']}, {out['engine']}: {workers(pw, 'prefill', ptp)}, "
             f"{workers(dw, 'decode', dtp)}; {out['workload']}", f"{out['kind']} ({out['parameters']})", ""]
    if out["kind"] == "bound":
        return "\n".join(lines + [f"TTFT >= {1e3 * out['ttft_s']:.2f} ms (a prompt's prefill alone), "
                                  f"TPOT >= {1e3 * out['tpot_s']:.3f} ms (one request's decode steps alone)"]) + "\n"
    lines += [f"TTFT {1e3 * out['ttft_s']:.2f} ms = front end {1e3 * out['front_end_s']:.2f} + queueing "
              f"{1e3 * out['queueing_s']:.2f} + prefill {1e3 * out['prefill_s']:.2f} + KV transfer "
              f"{1e3 * out['transfer_s']:.3f} ({out['kv_bytes'] / 1e6:.1f} MB per device over {out['link']['name']}) "
              f"+ the decode step in progress {1e3 * out['step_in_progress_s']:.2f} + wait for a decode slot "
              f"{1e3 * out['decode_wait_s']:.2f} + {out['first_token_steps']} decode step(s) before the first token "
              f"streams {1e3 * out['first_token_s']:.2f}",
              f"TPOT {1e3 * out['tpot_s']:.3f} ms (decode workers that never prefill)",
              f"{out['requests_per_s']:.2f} requests/s"
              + (" (the front end's latency is in each client's cycle here), " if out["front_end_s"] else ", ")
              + f"{out['tokens_per_s_per_gpu']:.1f} output tokens/s per GPU; "
              f"prefill ranks {100 * out['prefill_utilisation']:.0f}% busy; clients per decode rank "
              f"{out['clients_per_decode_rank']}",
              f"capacity: prefill pool {out['prefill_capacity_per_s']:.2f} requests/s, decode pool "
              f"{out['decode_capacity_per_s']:.2f}; limited by {out['limited_by']}; balanced at "
              f"{out['balanced_prefill_per_decode']:.2f} prefill workers per decode worker"]
    if "interval" in out:
        lines.append(intervals.mean_line(out["interval"]))
    elif "no_interval" in out:
        lines.append(f"no {out['no_interval']['level']:.0%} interval: {out['no_interval']['why']}")
    return "\n".join(lines) + "\n"


def _implied(row, out: dict, pools: Pools, clients: int) -> float:
    """The prefill per prompt the row's measured TTFT implies through the prefill ranks' queue:
    its TTFT less the predicted front end, transfer, wait and decode steps (at the measured
    TPOT) is the queueing and prefill, the rest of the measured cycle the delay."""
    steps = 0.5 + out["first_token_steps"]
    residence = row.ttft_s - out["front_end_s"] - out["transfer_s"] - out["decode_wait_s"] - steps * row.tpot_s
    cycle = row.ttft_s + (row.osl - 1 - out["first_token_steps"]) * row.tpot_s
    return implied_prefill(clients, pools.prefill_ranks, residence, cycle - residence)


ROW_ASSUMPTIONS = (
    "Disaggregated rows: each pool a Deployment of the row's prefill_* / decode_* layout (tp, attention_dp, "
    "moe_tp, moe_ep; a worker of attention_dp ranks is that many ranks of its pool), its workers as the row "
    "counts them; a prefill rank runs the row's prefill_batch prompts at once with a token budget that holds "
    "them, its arrivals Poisson at the loop's rate over the prefill ranks; the first token streams from the "
    "decode worker (serving/disagg.py: FIRST_TOKEN_STEPS); the clients are the row's concurrency, else "
    "decode_workers x decode_attention_dp x decode_batch (the rule the rows that state a concurrency obey); "
    "a vLLM pool's experts, where its moe_tp x moe_ep misses its GPUs and moe_ep is 1, over all its tp x "
    "attention_dp GPUs (vLLM's FusedMoEParallelConfig without expert parallelism); the KV cache by "
    "rows.kv_format; the (device, engine) calibration of the aggregated rows, not fitted on these.",
)


def row_record(row, resolved, policy: engines.Policy, params: sc.Parameters) -> dict:
    """One disaggregated row (`rows.resolve_disagg`'s) predicted, beside its measurement."""
    pre, dec = row.pools
    clients, read = rows.disagg_clients(row)
    deps, notes = rows.pool_deployments(row, resolved)
    pools = Pools(*deps, pre.workers, dec.workers, pre.batch)
    out = simulate(pools, policy, clients, row.isl, row.osl, params)
    lo = bound(pools, policy, row.isl, row.osl)
    return {"row_id": row.row_id, "model": row.model, "device": row.device, "engine": row.engine,
            "prefill": rows.pool_words(pre), "decode": rows.pool_words(dec),
            "isl": row.isl, "osl": row.osl, "clients": clients, "predicted": True,
            "read": "; ".join(([read] if read else []) + notes),
            "measured_ttft_s": row.ttft_s, "measured_tpot_s": row.tpot_s,
            "ttft_s": out["ttft_s"], "tpot_s": out["tpot_s"], "ttft_bound_s": lo["ttft_s"], "tpot_bound_s": lo["tpot_s"],
            "ttft_error": out["ttft_s"] / row.ttft_s - 1, "tpot_error": out["tpot_s"] / row.tpot_s - 1,
            "transfer_s": out["transfer_s"], "link": out["link"]["name"], "limited_by": out["limited_by"],
            "prefill_s": out["prefill_s"] + out["queueing_s"], "queueing_s": out["queueing_s"],
            "prefill_utilisation": out["prefill_utilisation"],
            # were the prefill pool the limit, the measured loop's rate C / (TTFT + (OSL-1) TPOT)
            # would be P / prefill: the prefill time per prompt the measurement implies (per rank)
            "implied_prefill_if_limiting_s": pools.prefill_ranks * (row.ttft_s + (row.osl - 1) * row.tpot_s) / clients,
            "implied_prefill_s": _implied(row, out, pools, clients),
            "balanced_prefill_per_decode": out["balanced_prefill_per_decode"]}
