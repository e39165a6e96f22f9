"""A discrete-event replay of one deployment serving a workload, engine step by engine step.

A plain event loop, not SimPy: the only process is the engine's step loop (clients act at step
boundaries, Poisson arrivals are a sorted array), so SimPy's generators and event queue
would add a scheduling layer and its per-event cost without removing any code. An event is a
*run*: consecutive steps whose batch does not change (the same decodes, no prompt chunk, no
arrival, completion or preemption in between). A run of k decode steps is timed in one
NumPy call (its contexts grow by one token per step), so the loop's Python work is per event,
not per step.

Each step's time is `stepcost.StepModel.durations`: the roofline of that exact step (the
decodes at their own contexts, the prompt chunks scheduled) under the calibration's
parameters. The engine's scheduler is `engines.Policy`: the token budget, the batch limit,
chunked prefill, mixed steps or prefill first, KV blocks reserved at admission, preemption by
recompute. Admission reserves, for every running request and the new one, what it holds plus
the policy's share of its remaining output (SGLang's new-token ratio; 1 for TensorRT-LLM's
guaranteed-no-evict; 0 for vLLM). After a preemption (`Policy.after_preemption`) SGLang's share
is 1 (it raises its ratio after a retraction); vLLM V1 keeps reserving nothing but admits no
request in a step that preempted (vllm/v1/core/sched/scheduler.py, `if not preempted_reqs`), so
it re-admits the preempted request when its blocks are free and may preempt it again, each
re-admission recomputing its prompt and its output so far (Llama-3.1-70B on one H200, ISL 1024,
OSL 8192, C 64, each refitted: TTFT 177 s predicted under the share of 1, 23.6 s so, 5.3 s
measured; TPOT 30.2, 41.2, 46.3 ms). KV-cache capacity: the policy's fraction of the device's memory less the weights,
in blocks of the policy's size, at the KV bytes per token of one device.

Prefix caching (the engine's `prefix_caching`; the workload's `unique_prompts`): a request whose
prompt an earlier request has prefilled skips the prompt's cached whole KV blocks, the last token
always computed for its logits (vLLM: block 16, SGLang: page 1, TensorRT-LLM: block 32), so its
prefill is the uncached tail, whose attention still reads the cached context. Eviction: the
cached prompts are a pool beside the running batch's own KV (a hit's blocks are the pool's,
shared); the pool of every unique prompt must fit beside the largest running batch's own KV
(`prefix_pool_fits`), else the engines' LRU eviction under cyclic reuse (each prompt comes back
after all the others) evicts every prompt before its reuse, and nothing hits. Two requests
prefilling the same prompt at once each compute it.

An idle engine steps at the first arrival: requests sent at the same instant (a closed loop's
clients at a phase's start, or after a wave of requests finished in the same step) reach the
engine one after another, since the server's front end takes each request's HTTP and
tokenisation in turn (vLLM's API server, SGLang's tokenizer manager and trtllm-serve are one
process each), and a scheduler with nothing running starts a step with what has arrived; the
others arrive during that step and join the next. So in a closed loop an idle engine admits one
request, a busy one every waiting request its budget takes (the front end's few milliseconds per
request are shorter than a step). Without this, a closed loop of fixed lengths whose clients' prompts
fit one step stays in lock-step waves forever (Llama-3.1-70B at C 8, ISL 1024: TTFT predicted
twice C 4's and C 16's, the measured runs monotone); with it the waves break up (visible rows:
TTFT median 28.8% -> 26.9%, TPOT 6.0% -> 5.8%, bench/simulator.py).

In a closed loop every event falls on a step boundary, so the schedule (which steps run with
which batch) does not depend on the step times: `Schedule` records it, and `retime` prices
the same schedule under other parameters exactly (calibration re-times it instead of
re-simulating). A closed loop of identical requests that never meets the KV capacity is
scheduled by `uniform_loop`'s counters instead, the same schedule bit for bit. `Pool` lays
many schedules' arrays side by side (a fit's rows): the growing
kernels' runs in one array (a one-step run, every step with a prompt chunk, is max of its two
roofline terms, what the closed form gives it, so only longer runs take the closed form), the
flat kernels' prefix sums in one gather, one model's routed experts in one call; each
schedule's sums keep their order, so the means are the same bits as one schedule's alone.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import islice
from dataclasses import dataclass

import numpy as np

from rooflinec.base import roofline
from rooflinec.serving import stepcost as sc, uniform_loop
from rooflinec.serving.engines import Policy
from rooflinec.serving.workload import Workload
from rooflinec.serving.serving_model import Unpredictable
from rooflinec.base.quantities import gib

MAX_EVENTS = 5_000_000    # a budget in events, so no workload runs away


def within_budget(work: Workload) -> None:
    """Unpredictable where the workload has more requests than the event budget (each takes
    an event at least), before any array of them is drawn."""
    if work.total > MAX_EVENTS:
        raise Unpredictable(f"{work.total:,} requests ({work.warmup:,} warm-up, {work.requests:,} measured): "
                            f"past the {MAX_EVENTS:,} events the simulator replays")


@dataclass(frozen=True)
class Schedule:
    """The runs, in order, and each request's run indices (arrival: runs finished before it came)."""

    x0: np.ndarray            # [R, F] features of a run's first step
    steps: np.ndarray         # [R] steps in the run
    growth: np.ndarray        # [R, F] features added per step (the decodes' contexts, `stepcost.growth`)
    arrived: np.ndarray       # [N] runs completed when the request arrived
    admitted: np.ndarray      # [N] run in which it was first scheduled
    first: np.ndarray         # [N] run whose end gives the first token
    finished: np.ndarray      # [N] run whose end gives the last token


@dataclass(frozen=True)
class Result:
    workload: Workload
    policy: Policy
    capacity_tokens: int
    isl: np.ndarray
    osl: np.ndarray
    arrival_s: np.ndarray
    first_s: np.ndarray
    finish_s: np.ndarray
    measured: np.ndarray      # bool mask: not warm-up
    itl_s: np.ndarray         # inter-token gaps of the measured requests (values)
    itl_weight: np.ndarray    # how many tokens had each gap
    timeline: np.ndarray      # [R, 5]: run start s, steps, running, waiting, tokens per step
    schedule: Schedule
    preemptions: int
    latency_s: float = 0.0    # the front end's, added to TTFT and E2E (the schedule is unaffected)
    peak_blocks: int = 0      # the most KV blocks any admission or decode run needed
    capacity_bound: bool = False   # the KV capacity refused something (else any capacity >= peak_blocks gives this schedule)
    prefix_hits: int = 0      # measured requests whose prompt's prefix came from the cache
    prefix_pool: bool = False  # the unique prompts' pool fitted beside the batch (`prefix_pool_fits`)


def cacheable_tokens(isl, block_tokens: int):
    """Tokens of a prompt a cache hit skips: its whole blocks, the last token always computed."""
    return (isl - 1) // block_tokens * block_tokens


def prefix_pool_fits(policy: Policy, work: Workload, capacity_tokens: int) -> bool:
    """Prefix caching hits at all: the engine caches, prompts are reused, and the pool of every
    unique prompt's cacheable blocks fits beside the largest running batch's own KV (the
    uncached tail and the output of min(C, max batch) requests at the longest lengths)."""
    if not (policy.prefix_caching and work.reused):
        return False
    within_budget(work)
    b, isl, osl = policy.kv_block_tokens, *work.lengths()
    ids = work.prompt_ids()
    first = np.unique(ids, return_index=True)[1]
    pool = int(cacheable_tokens(isl[first], b).sum()) // b
    own = -(-int((isl - cacheable_tokens(isl, b) + osl).max()) // b)
    batch = min(work.concurrency or policy.max_batch, policy.max_batch)
    return pool + batch * own <= capacity_tokens // b


def kv_capacity_tokens(model: sc.StepModel, policy: Policy) -> int:
    dev, dep = model.deployment.device, model.deployment
    weights = dep.weight_bytes() + getattr(model, "weight_bytes", 0.0)   # a draft's (speculative.py)
    cache = (policy.cache_fraction * dev.capacity - weights if policy.cache_fraction_of == "total"
             else policy.cache_fraction * (dev.capacity - weights))
    if cache <= 0:
        raise Unpredictable(f"{dep.weights} weights take {gib(weights)} per device; "
                            f"{policy.name} leaves no memory for the KV cache on {dev.key}")
    per_token = float(dep.kv_per_token()) + getattr(model, "kv_bytes_per_token", 0.0)
    blocks = int(cache // (per_token * policy.kv_block_tokens))
    return blocks * policy.kv_block_tokens


def simulate(model: sc.StepModel, policy: Policy, work: Workload, params: sc.Parameters,
             prefilled: bool = False) -> Result:
    """`prefilled`: each request arrives with its prompt's KV cache and first token (a
    disaggregated decode worker's, `serving/disagg.py`): admitted straight into decoding, its
    "first token" at admission (so its TTFT is the wait for a slot)."""
    return _Loop(model, policy, work, params, prefilled).run()


def schedule(model: sc.StepModel, policy: Policy, work: Workload, capacity_tokens: int | None = None) -> Result:
    """A closed loop's schedule alone: the steps are not timed (every time in the Result is
    0), since in a closed loop the schedule does not depend on them; `Retimer` and `Pool` price it.
    `capacity_tokens`: `kv_capacity_tokens(model, policy)` where the caller has it."""
    if not work.closed:
        raise ValueError("an open loop's schedule depends on the step times: simulate it")
    within_budget(work)
    capacity_tokens = kv_capacity_tokens(model, policy) if capacity_tokens is None else capacity_tokens
    caching = prefix_pool_fits(policy, work, capacity_tokens)
    hit = int(cacheable_tokens(work.isl.low, policy.kv_block_tokens)) if caching else None
    if uniform_loop.applies(model, policy, work, hit):
        lengths = work.lengths()
        peak = roomy_peak(policy, work, *lengths, caching)
        if peak <= capacity_tokens // policy.kv_block_tokens:
            loop = uniform_loop.run(policy, work, MAX_EVENTS, hit)
            return _counted(loop, policy, work, lengths, capacity_tokens, peak, caching)
    return _Loop(model, policy, work, sc.BOUND, timed=False, capacity_tokens=capacity_tokens).run()


def roomy_peak(policy: Policy, work: Workload, isl: np.ndarray, osl: np.ndarray, caching: bool) -> int:
    """KV blocks of the most requests in flight at their whole prompt and output, beside every
    unique prompt's pool where prompts hit: a closed loop within them never meets the capacity
    (`_Loop.roomy`)."""
    b = policy.kv_block_tokens
    most = min(work.concurrency or policy.max_batch, policy.max_batch)
    whole = most * -(-int((isl + osl).max()) // b)
    if caching:
        first = np.unique(work.prompt_ids(), return_index=True)[1]
        whole += int(cacheable_tokens(isl[first], b).sum()) // b
    return whole


def _counted(loop, policy, work, lengths, capacity_tokens, peak, caching) -> Result:
    """`uniform_loop`'s schedule as `_Loop` gives it untimed: every time 0, its peak `roomy_peak`."""
    sched = Schedule(np.array(loop.x0), np.array(loop.nsteps), np.array(loop.growth, float).reshape(-1, len(sc.FEATURES)),
                     loop.arrived, loop.admitted, loop.first, loop.finished)
    zeros = np.zeros(work.total)
    return Result(work, policy, capacity_tokens, *lengths, zeros, zeros, zeros,
                  np.arange(work.total) >= work.warmup, np.zeros(0), np.zeros(0), np.array(loop.timeline), sched, 0,
                  sc.BOUND.request_latency_s, peak, False, loop.hits, caching)


class _Loop:
    """The loop's state is arrays over all requests (NumPy, so each event's work is a few
    vector operations), plus the admission order (for preemption) and the prompts in progress."""

    def __init__(self, model, policy, work, params, prefilled=False, timed=True, capacity_tokens=None):
        self.m, self.pol, self.w, self.p, self.timed = model, policy, work, params, timed
        self.arrive_prefilled = prefilled
        self.peak, self.bound = 0, False
        within_budget(work)
        self.isl, self.osl = work.lengths()
        n = work.total
        self.cap_tokens = kv_capacity_tokens(model, policy) if capacity_tokens is None else capacity_tokens
        self.cap_blocks = self.cap_tokens // policy.kv_block_tokens
        self.prompt = self.isl.copy()
        self.pid = work.prompt_ids()
        self.caching = not prefilled and prefix_pool_fits(policy, work, self.cap_tokens)
        self.pool = 0                          # blocks of the cached prompts
        # tokens a decode step yields: 1, or a speculative step's expectation (speculative.py)
        self.adv = getattr(model, "tokens_per_step", 1)
        # a closed loop whose most requests in flight fit at their whole prompt and output, beside
        # every unique prompt's pool, never meets the KV capacity: admission and decode skip their
        # checks (the same schedule), the peak taken as that whole (a capacity at least it gives this schedule)
        whole = roomy_peak(policy, work, self.isl, self.osl, self.caching) if work.closed and n else 0
        self.roomy = work.closed and not prefilled and self.adv == 1 and whole <= self.cap_blocks
        if self.roomy:
            self.peak = whole
        self.cached = np.zeros(n, np.int64)    # a request's prompt tokens in the pool
        self.computed = np.zeros(work.unique_prompts or 0, bool)
        self.hits = 0
        self.prefilled = np.zeros(n, np.int64)
        self.kvlen, self.gen = (np.zeros(n, np.int64 if self.adv == 1 else float) for _ in range(2))
        self.arrival, self.first, self.finish, self.last = (np.full(n, np.nan) for _ in range(4))
        self.arrived_run, self.admitted_run, self.first_run, self.finish_run = (np.full(n, -1, np.int64) for _ in range(4))
        self.measured = np.arange(n) >= work.warmup
        self.decoding = np.zeros(n, bool)     # running with its prompt in the cache
        self.running = np.zeros(n, bool)
        self.order: dict[int, None] = {}      # admission order of the running requests
        self.partial: list[int] = []          # running requests whose prompt is not all in
        self.waiting: deque[int] = deque()
        self.n_running = 0
        self.t, self.runs, self.done, self.preemptions = 0.0, 0, 0, 0
        self.paused = False       # no admission this step: it preempted (after_preemption: pause_admission)
        self.x0, self.nsteps, self.growth, self.timeline = [], [], [], []
        self.itl, self.itl_w = [], []
        self.issued = 0
        if work.closed:
            self.phases = deque([c for c in (work.warmup, work.requests) if c])
            self._next_phase()
        else:
            self.times = work.arrivals()
            self.next_arrival = 0

    # --- arrivals ----------------------------------------------------------------------
    def _issue(self, at: float):
        i = self.issued
        self.issued += 1
        self.arrival[i], self.arrived_run[i] = at, self.runs
        self.waiting.append(i)

    def _next_phase(self):
        self.phase_left = self.phases.popleft()
        self.phase_open = self.phase_left
        for _ in range(min(self.w.concurrency, self.phase_left)):
            self._issue(self.t)
            self.phase_left -= 1

    def _completed(self, count: int):
        self.done += count
        if not self.w.closed:
            return
        self.phase_open -= count
        for _ in range(min(count, self.phase_left)):   # each client sends its next request
            self._issue(self.t)
            self.phase_left -= 1
        if self.phase_open == 0 and self.phases:
            self._next_phase()

    def _arrivals_until(self, t):
        while self.next_arrival < len(self.times) and self.times[self.next_arrival] <= t:
            self._issue(self.times[self.next_arrival])
            self.next_arrival += 1

    # --- KV blocks ---------------------------------------------------------------------
    def _blocks(self, tokens):
        return -(-tokens // self.pol.kv_block_tokens)

    def _share(self) -> float:
        """The share of each running request's remaining output its admission reserves."""
        raised = self.preemptions and self.pol.after_preemption == "reserve_output"
        return 1.0 if raised else self.pol.admission_reserve_output

    def _reserved(self, ids, share: float):
        """Blocks for requests `ids`: what they hold, plus `share` of their remaining output."""
        return self._blocks(np.maximum(self.kvlen[ids], self.prompt[ids]) - self.cached[ids]
                            + np.ceil(share * (self.osl[ids] - self.gen[ids])).astype(np.int64))

    def _free_blocks(self) -> int:
        return self.cap_blocks - self.pool

    def _hit(self, cand):
        """Requests in `cand` whose prompt the pool holds start past its cached tokens."""
        new = cand[(self.cached[cand] == 0) & (self.prefilled[cand] == 0)]
        new = new[self.computed[self.pid[new]]]
        if len(new):
            c = cacheable_tokens(self.isl[new], self.pol.kv_block_tokens)
            self.cached[new] = self.prefilled[new] = self.kvlen[new] = c
            self.hits += int(self.measured[new].sum())

    def _pool(self, done):
        """Prompts prefilled for the first time join the pool; their blocks are the pool's."""
        ids = done[(self.cached[done] == 0) & ~self.computed[self.pid[done]]]
        ids = ids[np.unique(self.pid[ids], return_index=True)[1]]
        if len(ids):
            c = cacheable_tokens(self.isl[ids], self.pol.kv_block_tokens)
            self.computed[self.pid[ids]] = True
            self.cached[ids] = c
            self.pool += int(c.sum()) // self.pol.kv_block_tokens

    # --- the scheduler -----------------------------------------------------------------
    def _schedule(self):
        """(decoding request ids, chunks) for the next step; chunks are arrays (request,
        prefix, tokens)."""
        pol = self.pol
        if self.arrive_prefilled:
            self._admit_prefilled()
        decoding = np.flatnonzero(self.decoding)
        if pol.schedule == "prefill_first":
            chunks = self._chunks(min(pol.chunk_tokens, pol.max_tokens))
            return (decoding[:0], chunks) if len(chunks[0]) else (decoding, chunks)
        return decoding, self._chunks(min(pol.max_tokens - len(decoding), pol.chunk_tokens))

    def _chunks(self, limit):
        ids, prefix, sizes = [], [], []
        for r in self.partial:          # prompts in progress first, in admission order
            c = self._chunk(int(self.prompt[r] - self.prefilled[r]), limit)
            if c:
                ids.append(r)
                prefix.append(int(self.prefilled[r]))
                sizes.append(c)
                limit -= c
        room = self.pol.max_batch - self.n_running
        if self.w.closed and self.n_running == 0:
            room = min(room, 1)     # an idle engine steps at the first arrival (module docstring)
        new = self._admissions(min(room, len(self.waiting), limit), limit) if room > 0 and limit > 0 else None
        if new is not None and not ids:
            return new[0], self.prefilled[new[0]], new[1]
        if new is not None:
            ids = np.concatenate([np.array(ids, np.int64), new[0]])
            return ids, np.concatenate([np.array(prefix, np.int64), self.prefilled[new[0]]]), \
                np.concatenate([np.array(sizes, np.int64), new[1]])
        return np.array(ids, np.int64), np.array(prefix, np.int64), np.array(sizes, np.int64)

    def _admissions(self, m, limit):
        """FCFS from the queue's head: as many as the batch, the token budget and the KV blocks
        take (the first that does not fit stops the rest), as (ids, chunk tokens); admitted."""
        if m <= 0 or self.paused:
            return None
        cand = np.fromiter(islice(self.waiting, m), np.int64, m)
        if self.caching:
            self._hit(cand)
        left = self.prompt[cand] - self.prefilled[cand]
        before = np.cumsum(left) - left
        if self.pol.chunked_prefill:
            sizes = np.minimum(left, np.maximum(limit - before, 0))
            ok = sizes > 0
        else:
            sizes, ok = left, before + left <= limit
        if self.roomy:
            n = int(np.argmin(ok)) if not ok.all() else m
        else:
            running = np.flatnonzero(self.running)      # theirs and the candidates' in one call
            blocks = self._reserved(np.concatenate([running, cand]), self._share())
            need = int(blocks[:len(running)].sum()) + np.cumsum(blocks[len(running):])
            fits = need <= self._free_blocks()
            both = ok & fits
            n = int(np.argmin(both)) if not both.all() else m
            self.bound |= n < m and bool(ok[n]) and not fits[n]
            if n:
                self.peak = max(self.peak, int(need[n - 1]) + self.pool)
        if n == 0:
            return None
        got = cand[:n]
        for _ in range(n):
            self.waiting.popleft()
        self.running[got] = True
        self.admitted_run[got[self.admitted_run[got] < 0]] = self.runs
        listed = got.tolist()
        self.order.update(dict.fromkeys(listed))
        self.partial.extend(listed)
        self.n_running += n
        return got, sizes[:n]

    def _admit_prefilled(self):
        """FCFS, as many as the batch and the KV blocks take: prompt and first token in the cache."""
        m = min(self.pol.max_batch - self.n_running, len(self.waiting))
        if m <= 0 or self.paused:
            return
        cand = np.fromiter(islice(self.waiting, m), np.int64, m)
        held = int(self._reserved(np.flatnonzero(self.running), self._share()).sum())
        ok = held + np.cumsum(self._reserved(cand, self._share())) <= self.cap_blocks
        got = cand[:int(np.argmin(ok)) if not ok.all() else m]
        for _ in range(len(got)):
            self.waiting.popleft()
        self.running[got] = self.decoding[got] = True
        self.admitted_run[got] = self.first_run[got] = self.runs
        self.prefilled[got] = self.kvlen[got] = self.prompt[got]
        self.gen[got], self.first[got], self.last[got] = 1, self.t, self.t   # TTFT here: the wait for a slot
        self.order.update(dict.fromkeys(got.tolist()))
        self.n_running += len(got)

    def _chunk(self, left, limit) -> int:
        if self.pol.chunked_prefill:
            return min(left, limit)
        return left if left <= limit else 0

    # --- the loop ------------------------------------------------------------------------
    def run(self) -> Result:
        while self.done < self.w.total:
            if self.runs >= MAX_EVENTS:
                raise Unpredictable(f"more than {MAX_EVENTS} scheduler events; shorten the workload")
            decoding, chunks = self._schedule()
            if not len(decoding) and not len(chunks[0]):
                if not self.w.closed and self.next_arrival < len(self.times) and not self.n_running:
                    self.t = max(self.t, self.times[self.next_arrival])
                    self._arrivals_until(self.t)
                    continue
                if self.paused:     # the step that preempted admitted nothing; the next one may
                    self.paused = False
                    continue
                if self.pol.preemption == "recompute" and self.n_running > 1:
                    self._preempt()
                    continue
                raise Unpredictable(self._stuck())
            self._step(decoding, chunks)
        return self._result()

    def _stuck(self) -> str:
        r = self.waiting[0] if self.waiting else next(iter(self.order))
        if not self.pol.chunked_prefill and self.prompt[r] > self.pol.max_tokens:
            return (f"a prompt of {self.prompt[r]} tokens exceeds {self.pol.name}'s {self.pol.max_tokens} "
                    "tokens per step without chunked prefill (--max-tokens, --chunked-prefill)")
        return (f"a request of {self.isl[r]} + {self.osl[r]} tokens cannot be scheduled: the KV cache holds "
                f"{self.cap_tokens} tokens per device")

    def _preempt(self):
        """Recompute: the last admitted request gives its blocks back and waits at the front."""
        r = next(reversed(self.order))
        del self.order[r]
        self.running[r] = self.decoding[r] = False
        if r in self.partial:
            self.partial.remove(r)
        self.n_running -= 1
        self.prompt[r] = self.isl[r] + self.gen[r]
        self.prefilled[r] = self.kvlen[r] = self.cached[r]     # a cached prefix stays in the pool
        self.waiting.appendleft(r)
        self.preemptions += 1
        self.paused = self.pol.after_preemption == "pause_admission"

    def _decode_steps(self, decoding) -> int:
        """Steps the decodes can run unchanged: to the next completion, within the KV cache."""
        k = int(np.ceil((self.osl[decoding] - self.gen[decoding]) / self.adv).min())
        most = sc.growth(self.m.window, self.kvlen[decoding], self.adv)[1]   # to a context reaching a window
        k = k if most is None else min(k, most)
        if self.pol.admission_reserve_output >= 1 or self.roomy:
            return k                      # every running request's whole output is reserved, or all fit
        lens = self.kvlen[decoding] - self.cached[decoding]
        prefilling = self.running & ~self.decoding
        others = int(self._blocks(self.kvlen[prefilling] - self.cached[prefilling]).sum())
        free = self._free_blocks()

        def fits(j):
            return others + int(self._blocks(lens + j * self.adv).sum()) <= free
        if fits(k):
            self.peak = max(self.peak, others + int(self._blocks(lens + k).sum()) + self.pool)
            return k
        self.bound = True
        lo, hi = 0, k        # fits(lo) or lo = 0; not fits(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo if fits(lo) else 0

    def _step(self, decoding, chunks):
        n_dec = len(decoding)
        ids, prefix, sizes = chunks
        k = 1 if len(ids) else self._decode_steps(decoding)
        if k == 0:
            self._preempt()
            return
        x0 = np.zeros(len(sc.FEATURES))
        x0[sc.ONE] = 1
        sc.attend(x0, self.m.window, self.kvlen[decoding], prefix, sizes)
        grows = sc.growth(self.m.window, self.kvlen[decoding], self.adv)[0]
        tokens, logits = n_dec, n_dec
        if len(ids):
            tokens += int(sizes.sum())
            logits += int((prefix + sizes == self.prompt[ids]).sum())
        x0[sc.TOKENS], x0[sc.LOGITS] = tokens, logits
        if not self.timed:
            dur = np.zeros(k)
        elif k == 1:
            dur = self.m.durations(x0[None], self.p)
        else:
            x = np.repeat(x0[None], k, axis=0) + np.outer(np.arange(k), grows)
            dur = self.m.durations(x, self.p)
        ends = self.t + np.cumsum(dur)
        if not self.w.closed and self.next_arrival < len(self.times) and k > 1:
            cut = int(np.searchsorted(ends, self.times[self.next_arrival])) + 1
            if cut < k:
                k, dur, ends = cut, dur[:cut], ends[:cut]
        self.paused = False       # a step ran: the next one admits again
        self.x0.append(x0)
        self.nsteps.append(k)
        self.growth.append(grows)
        self.timeline.append((self.t, k, self.n_running, len(self.waiting), tokens))
        self._tokens(decoding, ids, sizes, dur, ends)
        if not self.w.closed:
            self._arrivals_until(self.t)

    def _tokens(self, decoding, ids, sizes, dur, ends):
        k, end, run = len(dur), float(ends[-1]), self.runs
        finished = []
        if len(decoding):
            if self.timed:
                self._gaps(decoding, dur, ends)
            gen = self.gen[decoding] + (k * self.adv if self.adv != 1 else k)   # the ids are distinct
            self.gen[decoding] = gen
            self.kvlen[decoding] += k * self.adv if self.adv != 1 else k
            self.last[decoding] = end
            finished.append(decoding[gen >= self.osl[decoding]])
        if len(ids):
            prefilled = self.prefilled[ids] + sizes
            self.prefilled[ids] = prefilled
            self.kvlen[ids] += sizes
            done = ids[prefilled == self.prompt[ids]]
            if len(done):
                if self.caching:
                    self._pool(done)
                gone = set(done.tolist())
                self.partial = [r for r in self.partial if r not in gone]
                self.decoding[done] = True
                fresh = self.gen[done] == 0
                self.first[done[fresh]], self.first_run[done[fresh]] = end, run
                if self.timed:
                    again = done[~fresh & self.measured[done]]      # recomputed after a preemption
                    self.itl.append(end - self.last[again])
                    self.itl_w.append(np.ones(len(again)))
                self.gen[done] += 1
                self.last[done] = end
                finished.append(done[self.gen[done] >= self.osl[done]])
        self.t, self.runs = end, run + 1
        ids = np.concatenate(finished) if finished else np.zeros(0, np.int64)
        if len(ids):
            self.running[ids] = self.decoding[ids] = False
            self.finish[ids], self.finish_run[ids] = end, run
            self.n_running -= len(ids)
            for r in ids.tolist():
                del self.order[r]
            self._completed(len(ids))

    def _gaps(self, decoding, dur, ends):
        """The measured decodes' inter-token gaps in a run: its first step's since their last
        token, then its steps' own times."""
        gaps = ends[0] - self.last[decoding[self.measured[decoding]]]
        self.itl.append(gaps)
        self.itl_w.append(np.ones(len(gaps)))
        if len(dur) > 1 and len(gaps):
            self.itl.append(dur[1:])
            self.itl_w.append(np.full(len(dur) - 1, float(len(gaps))))
        if self.adv != 1 and len(gaps):   # a verification's further tokens come at once
            self.itl.append(np.zeros(1))
            self.itl_w.append(np.full(1, (self.adv - 1) * len(gaps) * len(dur)))

    def _result(self) -> Result:
        sched = Schedule(np.array(self.x0), np.array(self.nsteps), np.array(self.growth, float).reshape(-1, len(sc.FEATURES)),
                         self.arrived_run, self.admitted_run, self.first_run, self.finish_run)
        itl = np.concatenate(self.itl) if self.itl else np.zeros(0)
        w = np.concatenate(self.itl_w) if self.itl_w else np.zeros(0)
        return Result(self.w, self.pol, self.cap_tokens, self.isl, self.osl, self.arrival, self.first,
                      self.finish, self.measured, itl, w, np.array(self.timeline), sched, self.preemptions,
                      self.p.request_latency_s, self.peak, self.bound or self.preemptions > 0,
                      self.hits, self.caching)


# --- re-timing a recorded schedule (closed loop) ---------------------------------------------

def run_times(model: sc.StepModel, sched: Schedule, p: sc.Parameters) -> np.ndarray:
    """Each run's total time under `p`, exactly: in a run only the context grows, by `growth`
    per step, so each kernel's two roofline terms are affine in the step index j and
    sum_j max(a + b j, c + d j) has a closed form (split where the two lines cross)."""
    a, b, c, d = _lines(model, sched, np.ones(len(model.names), bool))
    k = np.broadcast_to(sched.steps[:, None].astype(float), a.shape)
    sums = _max_of_lines(a / p.compute_fraction, b / p.compute_fraction,
                         c / p.bandwidth_fraction, d / p.bandwidth_fraction, k)
    if not sc.bounding(p):     # the prediction's sum, in its own order (the calibrations' bytes)
        return sums.sum(axis=1) + sched.steps * (model.overheads(sched.x0, p) + model.routed_s(sched.x0, p))
    return bound_runs(model, sched, sums.sum(axis=1))


def bound_runs(model: sc.StepModel, sched: Schedule, kernels: np.ndarray) -> np.ndarray:
    """Each run's bound from its kernels' seconds at the peaks (`kernels` [R]): the kernels and
    the collectives overlapped over the run, max(sum of the kernels, sum of the link)
    (`roofline.combine`), at most the sum over its steps of each step's max (every step's
    link is the same in a run, its kernels grow), so a bound still."""
    steps, x0 = sched.steps, sched.x0
    routed, a2a = model.routed_split(x0, sc.BOUND)
    extra = model.extra_kernel_s(x0, sc.BOUND)    # a speculative step's draft
    return roofline.combine(kernels + steps * (routed + extra), steps * (model.link(x0, sc.BOUND) + a2a), True)


def _lines(model, sched, kernels):
    """Per run and kernel (the `kernels` mask) the compute line a + b j and the memory line
    c + d j of step j, at the peaks: [R, K] each."""
    a, c = sched.x0 @ model.compute[kernels].T, sched.x0 @ model.memory[kernels].T
    b, d = sched.growth @ model.compute[kernels].T, sched.growth @ model.memory[kernels].T
    return a, b, c, d


def _max_of_lines(a, b, c, d, k):
    """sum over integer j in [0, k) of max(a + b j, c + d j), elementwise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(b != d, (c - a) / (b - d), 0.0)
    # j in [lo, hi) takes the first line (a, b); the rest the second
    rising = b > d
    lo = np.where(rising, np.clip(np.ceil(r), 0, k), 0.0)
    hi = np.where(rising, k, np.clip(np.floor(r) + 1, 0, k))
    same = b == d
    lo, hi = np.where(same, 0.0, lo), np.where(same, np.where(a >= c, k, 0.0), hi)
    return _series(a, b, lo, hi) + _series(c, d, 0.0, lo) + _series(c, d, hi, k)


def _series(alpha, beta, lo, hi):
    """sum over integer j in [lo, hi) of alpha + beta j (0 where hi <= lo)."""
    n = np.maximum(hi - lo, 0.0)
    return n * alpha + beta * np.where(n > 0, (hi * (hi - 1) - lo * (lo - 1)) / 2, 0.0)


def retimed_means(model: sc.StepModel, sched: Schedule, measured: np.ndarray, osl: np.ndarray,
                  p: sc.Parameters) -> tuple[float, float]:
    """(mean TTFT, mean TPOT) of the measured requests when `sched` runs under `p`."""
    ends = np.concatenate([[0.0], np.cumsum(run_times(model, sched, p))])   # ends[i]: after i runs
    m = measured
    ttft = ends[sched.first[m] + 1] - ends[sched.arrived[m]]
    long = m & (osl > 1)
    tpot = (ends[sched.finished[long] + 1] - ends[sched.first[long] + 1]) / (osl[long] - 1)
    return float(ttft.mean()) + p.request_latency_s, float(tpot.mean()) if len(tpot) else math.nan


class Retimer:
    """`retimed_means` of one schedule, reduced once to what the means depend on. A mean is
    w @ run times (each run's weight in the mean, `_window_weights`), so with T = (TTFT,
    TPOT) weights:
    - a kernel whose cost does not grow with the context contributes w max(A / cf, B / bf)
      per run (A, B: its compute and memory seconds over the run at the peaks), which is A / cf
      where B / A <= bf / cf, else B / bf: the (run, kernel) entries sorted by B / A with
      prefix sums of w A and w B give the sum over all of them at any (cf, bf) in one lookup;
    - the kernels that grow (attention over the context) keep `_max_of_lines` per run;
    - the overheads are affine in the parameters: w @ steps, w @ requests and w @ tokens.
    `Pool` evaluates many of them at once (a fit's rows)."""

    def __init__(self, model: sc.StepModel, sched: Schedule, measured: np.ndarray, osl: np.ndarray):
        grows = (model.compute[:, sc.GROWING] != 0).any(axis=1) | (model.memory[:, sc.GROWING] != 0).any(axis=1)
        self.model, self.sched, self.measured = model, sched, measured
        runs = len(sched.steps)
        long = measured & (osl > 1)
        self.has_tpot = bool(long.any())
        w = np.stack([_window_weights(runs, sched.arrived[measured], sched.first[measured] + 1),
                      _window_weights(runs, sched.first[long] + 1, sched.finished[long] + 1, 1 / (osl[long] - 1))])
        steps = sched.steps.astype(float)
        flat_a = (sched.x0 @ model.compute[~grows].T) * steps[:, None]        # [R, Kf]
        flat_b = (sched.x0 @ model.memory[~grows].T) * steps[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(flat_a > 0, flat_b / flat_a, np.inf).ravel()
        order = np.argsort(q, kind="stable")
        self.flat_q = q[order]
        zero = np.zeros((2, 1))
        self.flat_a = np.hstack([zero, np.cumsum((w[:, :, None] * flat_a[None]).reshape(2, -1)[:, order], axis=1)])
        self.flat_b = np.hstack([zero, np.cumsum((w[:, :, None] * flat_b[None]).reshape(2, -1)[:, order], axis=1)])
        a, b, c, d = _lines(model, sched, grows)
        self.grow = tuple(x.ravel() for x in (a, b, c, d, np.broadcast_to(steps[:, None], a.shape)))
        self.grow_w = np.repeat(w, int(grows.sum()), axis=1)                  # [2, R Kg]
        x = sched.x0 * steps[:, None]
        self.totals = w @ np.stack([steps, x[:, sc.DECODES] + x[:, sc.CHUNKS], x[:, sc.TOKENS]], axis=1)   # [2, 3]
        # the bound's (TTFT, TPOT): each run's kernels and collectives overlapped (`bound_runs`)
        self.bound = w @ run_times(model, sched, sc.BOUND)                     # [2]
        # a MoE's routed experts depend on a step's tokens alone: flat in a run, their parts
        # (the bound's and the prediction's) computed once
        self.w, self.steps = w, steps
        self.routed = model.routed and {bnd: model.routed.parts(sched.x0, bnd) for bnd in (False, True)}

    def routed_share(self, p: sc.Parameters) -> np.ndarray:
        """The routed experts' kernels and all-to-alls' share of (TTFT, TPOT) under `p` ([2])."""
        if not self.routed:
            return np.zeros(2)
        return self.w @ (self.model.routed.seconds(None, p, self.routed[sc.bounding(p)]) * self.steps)

    def flat(self, cf: float, bf: float) -> np.ndarray:
        """The non-growing kernels' share of (TTFT, TPOT) at fractions (cf, bf)."""
        n = int(np.searchsorted(self.flat_q, bf / cf, side="right"))
        return self.flat_a[:, n] / cf + (self.flat_b[:, -1] - self.flat_b[:, n]) / bf

    def queue_share(self, p: sc.Parameters) -> float:
        """The share of the measured requests' TTFT spent waiting to be scheduled."""
        ends = np.concatenate([[0.0], np.cumsum(run_times(self.model, self.sched, p))])
        m = self.measured
        wait = ends[self.sched.admitted[m]] - ends[self.sched.arrived[m]]
        ttft = ends[self.sched.first[m] + 1] - ends[self.sched.arrived[m]] + p.request_latency_s
        return float(wait.sum() / ttft.sum())


class Pool:
    """The (TTFT, TPOT) means of many schedules under one parameter set at once: the growing
    kernels' runs of all of them in one array, the roofline part remembered for the last few
    (compute, bandwidth) fractions (a fit's Jacobian moves the times with the fractions fixed)."""

    MEMO = 4

    def __init__(self, retimers: list[Retimer]):
        self.retimers = retimers
        self.grow = tuple(np.concatenate([r.grow[i] for r in retimers]) for i in range(5))
        self.grow_w = np.concatenate([r.grow_w for r in retimers], axis=1)
        self.owner = np.concatenate([np.full(len(r.grow[0]), i) for i, r in enumerate(retimers)]).astype(np.int64)
        # a run of one step (every step with a prompt chunk) sums max(a, c) alone: `_max_of_lines`
        # gives exactly that (its other terms are 0), so those entries skip its closed form
        self.single = self.grow[4] == 1
        self.lines = tuple(x[~self.single] for x in self.grow)
        self.peaks = self.grow[0][self.single], self.grow[2][self.single]
        self.totals = np.stack([r.totals for r in retimers])                 # [n, 2, 3]
        m = [r.model for r in retimers]
        self.fixed = np.stack([x.fixed_counts for x in m])                  # [n, 4]
        self.link = np.stack([x.link_s for x in m])                          # [n, 2]
        self.bound = np.stack([r.bound for r in retimers])                   # [n, 2]
        self.no_tpot = np.array([not r.has_tpot for r in retimers])
        self.routed = [i for i, r in enumerate(retimers) if r.routed]
        # the routed experts' parts of one model's schedules side by side: priced in one call
        by_model: dict = {}
        for i in self.routed:
            by_model.setdefault(id(retimers[i].model.routed), []).append(i)
        self.routed_models = []
        for idx in by_model.values():
            rs = [retimers[i] for i in idx]
            parts = {bnd: tuple(np.concatenate([r.routed[bnd][j] for r in rs]) for j in range(3)) for bnd in (False, True)}
            self.routed_models.append((rs[0].model.routed, idx, parts, np.cumsum([len(r.steps) for r in rs])[:-1]))
        # the flat kernels' prefix sums side by side, so one gather prices every schedule's
        self.flat_q = [r.flat_q for r in retimers]
        start = np.cumsum([0] + [r.flat_a.shape[1] for r in retimers])
        self.flat_start, self.flat_last = start[:-1], start[1:] - 1
        self.flat_a = np.hstack([r.flat_a for r in retimers])
        self.flat_b = np.hstack([r.flat_b for r in retimers])
        self.memo: dict = {}

    def roofline(self, cf: float, bf: float) -> np.ndarray:
        """[n, 2]: the kernels' share of each schedule's (TTFT, TPOT) at fractions (cf, bf)."""
        key = (cf, bf)
        if key not in self.memo:
            if len(self.memo) >= self.MEMO:
                self.memo.pop(next(iter(self.memo)))
            a, b, c, d, k = self.lines
            per = np.empty(len(self.single))
            per[~self.single] = _max_of_lines(a / cf, b / cf, c / bf, d / bf, k)
            per[self.single] = np.maximum(self.peaks[0] / cf, self.peaks[1] / bf)
            n = len(self.retimers)
            grown = np.stack([np.bincount(self.owner, per * self.grow_w[i], minlength=n) for i in range(2)], axis=1)
            self.memo[key] = grown + self.flat(cf, bf)
        return self.memo[key]

    def flat(self, cf: float, bf: float) -> np.ndarray:
        """[n, 2]: `Retimer.flat` of every schedule."""
        q = bf / cf
        n = self.flat_start + np.array([qs.searchsorted(q, side="right") for qs in self.flat_q], np.int64)
        return (self.flat_a[:, n] / cf + (self.flat_b[:, self.flat_last] - self.flat_b[:, n]) / bf).T

    def routed_share(self, p: sc.Parameters) -> np.ndarray:
        """[len(self.routed), 2]: `Retimer.routed_share` of the schedules with routed experts."""
        share = {}
        for routed, idx, parts, cuts in self.routed_models:
            for i, s in zip(idx, np.split(routed.seconds(None, p, parts[sc.bounding(p)]), cuts)):
                r = self.retimers[i]
                share[i] = r.w @ (s * r.steps)
        return np.stack([share[i] for i in self.routed])

    def means(self, p: sc.Parameters) -> np.ndarray:
        """[n, 2]: mean TTFT (with the front end's latency) and mean TPOT (nan without a
        request of more than one output token)."""
        if sc.bounding(p):     # the kernels and the collectives overlapped per run (`bound_runs`)
            out = self.bound.copy()
        else:
            link0, link1 = self.link.T
            per_step = self.fixed @ sc.fixed_rates(p) + link0
            over = self.totals @ np.array([0.0, p.per_request_s, 0.0]) + self.totals[:, :, 0] * per_step[:, None] \
                + self.totals[:, :, 2] * link1[:, None]
            out = self.roofline(p.compute_fraction, p.bandwidth_fraction) + over
            if self.routed:          # the others' share is 0
                out[self.routed] += self.routed_share(p)
        out[:, 0] += p.request_latency_s
        out[self.no_tpot, 1] = math.nan
        return out


def _window_weights(runs: int, start: np.ndarray, stop: np.ndarray, scale=None) -> np.ndarray:
    """w[r] = sum over requests i with start_i <= r < stop_i of scale_i, divided by their count:
    the mean over requests of sum(run times in [start_i, stop_i)) is w @ run times."""
    scale = np.ones(len(start)) if scale is None else scale
    diff = np.zeros(runs + 1)
    np.add.at(diff, start, scale)
    np.add.at(diff, stop, -scale)
    return np.cumsum(diff)[:runs] / max(len(start), 1)
