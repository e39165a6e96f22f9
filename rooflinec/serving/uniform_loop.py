"""A closed loop of identical requests with room to spare, scheduled by counters.

`simulator._Loop` keeps arrays over all requests, so each event costs a few dozen NumPy
calls (about 90 us). Validation replays hundreds of closed loops whose requests all have one
prompt and one output length; where, besides, the KV cache holds every request in flight at
its whole length beside the prefix cache's pool (`_Loop.roomy`), the FCFS scheduler keeps the
requests in the order they were sent at every stage: admitted, prompt finished and output
finished in id order (the budget goes to the prompts in progress first, in admission order,
and every decode advances one token per step). The state is then a few counters, the prompts
in progress and the decodes' cohorts (the requests whose first token came in one step move
together), a prompt's hit on the prefix cache a flag per request, so an event is a few
Python operations on integers. It is the same scheduler,
written twice for speed: `tests/test_simulator.py` checks under hypothesis that it gives
`_Loop`'s schedule bit for bit, and `schedule` falls back to `_Loop` wherever a condition
above does not hold (or a prompt could never be scheduled, whose message `_Loop` owns).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from rooflinec.serving import stepcost as sc
from rooflinec.serving.engines import Policy
from rooflinec.serving.workload import Workload
from rooflinec.serving.serving_model import Unpredictable


def applies(model: sc.StepModel, policy: Policy, work: Workload, hit_tokens: int | None) -> bool:
    """The loop's own conditions (module docstring; the caller checks the capacity's room, as
    `_Loop.roomy`): a closed loop of fixed lengths, no window, one token per decode step, a
    prompt that fits a step where prompts are not chunked; `hit_tokens`: the tokens a prefix
    hit skips (None: no prompt hits), at least a block (else `_Loop` owns its recount)."""
    if not work.closed or not work.total or model.window is not None or getattr(model, "tokens_per_step", 1) != 1:
        return False
    if work.isl.low != work.isl.high or work.osl.low != work.osl.high or hit_tokens == 0:
        return False
    return policy.chunked_prefill or work.isl.low <= min(policy.max_tokens, policy.chunk_tokens)


def run(policy: Policy, work: Workload, max_events: int, hit_tokens: int | None) -> "_Counters":
    """The loop's schedule, run to the last request (`applies` holds)."""
    loop = _Counters(policy, work, hit_tokens)
    while loop.n_finished < work.total:
        if loop.runs >= max_events:
            raise Unpredictable(f"more than {max_events} scheduler events; shorten the workload")
        loop.step()
    return loop


class _Counters:
    """The loop's state: counters over requests in id order, the prompts in progress and the
    decodes' cohorts; the schedule's arrays as `_Loop` records them."""

    def __init__(self, policy: Policy, work: Workload, hit_tokens: int | None):
        self.pol, self.w, self.hit_tokens = policy, work, hit_tokens
        self.pid = work.prompt_ids().tolist() if hit_tokens else None
        self.computed = [False] * (work.unique_prompts or 0)   # a prompt's KV in the pool
        self.hit = bytearray(work.total)                       # a request's prompt hit the pool
        self.hits = 0                                          # measured requests that hit
        self.isl, self.osl = work.isl.low, work.osl.low
        n = work.total
        self.arrived, self.admitted, self.first, self.finished = (np.full(n, -1, np.int64) for _ in range(4))
        self.issued = self.n_admitted = self.n_first = self.n_finished = 0
        self.partial: deque[list[int]] = deque()   # [id, tokens prefilled] in admission order
        self.cohorts: deque[list[int]] = deque()   # [requests, decode clock at their first token]
        self.clock = 0                              # decode steps so far
        self.n_dec = self.entries = 0               # decoding requests; their sum of count x entry clock
        self.runs = 0
        self.x0, self.nsteps, self.growth, self.timeline = [], [], [], []
        self.phases = deque([c for c in (work.warmup, work.requests) if c])
        self._next_phase()

    # --- arrivals, as _Loop's -------------------------------------------------------------
    def _issue(self, count: int):
        self.arrived[self.issued:self.issued + count] = self.runs
        self.issued += count
        self.phase_left -= count

    def _next_phase(self):
        self.phase_left = self.phase_open = self.phases.popleft()
        self._issue(min(self.w.concurrency, self.phase_left))

    def _completed(self, count: int):
        self.phase_open -= count
        self._issue(min(count, self.phase_left))
        if self.phase_open == 0 and self.phases:
            self._next_phase()

    # --- one event ------------------------------------------------------------------------
    def _chunks(self, limit: int, n_running: int) -> list[tuple[list[int], int, int]]:
        """([id, prefilled], prefix, tokens) per prompt chunk: the prompts in progress, then
        admissions (`_Loop._chunks` and `_admissions`, every prompt `isl` tokens)."""
        out = []
        for entry in self.partial:
            left = self.isl - entry[1]
            c = min(left, limit) if self.pol.chunked_prefill else (left if left <= limit else 0)
            if c:
                out.append((entry, entry[1], c))
                limit -= c
        room = self.pol.max_batch - n_running
        if n_running == 0:
            room = min(room, 1)       # an idle engine steps at the first arrival (simulator)
        m = min(room, self.issued - self.n_admitted, limit)
        if room <= 0 or limit <= 0 or m <= 0:
            return out
        # FCFS while the budget lasts: chunked, every admission that gets a token; else whole prompts
        n, before = 0, 0
        for r in range(self.n_admitted, self.n_admitted + m):
            prefix = self._prefix(r)
            left = self.isl - prefix
            if self.pol.chunked_prefill:
                size = min(left, limit - before)
                if size <= 0:
                    break
            elif before + left > limit:
                break
            else:
                size = left
            entry = [r, prefix]
            self.partial.append(entry)
            out.append((entry, prefix, size))
            before += left
            n += 1
        self.admitted[self.n_admitted:self.n_admitted + n] = self.runs
        self.n_admitted += n
        return out

    def _prefix(self, r: int) -> int:
        """Request r's prompt tokens in the prefix cache as a candidate for admission. `_Loop`
        marks every candidate; a prompt's pool only grows, so the mark at admission is the same."""
        if not self.hit_tokens:
            return 0
        if not self.hit[r] and self.computed[self.pid[r]]:
            self.hit[r] = 1
            self.hits += r >= self.w.warmup
        return self.hit_tokens if self.hit[r] else 0

    def step(self):
        pol, n_running = self.pol, self.n_admitted - self.n_finished
        if pol.schedule == "prefill_first":
            chunks = self._chunks(min(pol.chunk_tokens, pol.max_tokens), n_running)
            n_dec = 0 if chunks else self.n_dec
        else:
            chunks = self._chunks(min(pol.max_tokens - self.n_dec, pol.chunk_tokens), n_running)
            n_dec = self.n_dec
        if not chunks and not n_dec:
            raise AssertionError("a roomy closed loop cannot stall")   # applies() rules it out
        # a decode run lasts until the oldest cohort (the most tokens) finishes
        k = 1 if chunks else self.osl - 1 - (self.clock - self.cohorts[0][1])
        x = [0.0] * len(sc.FEATURES)
        x[sc.ONE] = 1.0
        # each decode holds isl + (clock - entry) tokens; its context is one more
        x[sc.DECODES], x[sc.CONTEXT] = n_dec, float(n_dec * (self.isl + 1 + self.clock) - self.entries) if n_dec else 0.0
        tokens = logits = n_dec
        if chunks:
            x[sc.CHUNK_SQUARE] = float(sum((p + c) * (p + c) - p * p for _, p, c in chunks))
            x[sc.CHUNK_TOKENS] = float(sum(c for _, _, c in chunks))
            x[sc.CHUNK_KEYS] = float(sum(p + c for _, p, c in chunks))
            x[sc.CHUNKS] = len(chunks)
            tokens += sum(c for _, _, c in chunks)
            logits += sum(1 for _, p, c in chunks if p + c == self.isl)
        x[sc.TOKENS], x[sc.LOGITS] = tokens, logits
        g = [0.0] * len(sc.FEATURES)
        g[sc.CONTEXT] = n_dec
        self.x0.append(x)
        self.nsteps.append(k)
        self.growth.append(g)
        self.timeline.append((0.0, k, self.n_admitted - self.n_finished, self.issued - self.n_admitted, tokens))
        self._advance(n_dec, chunks, k)

    def _advance(self, n_dec: int, chunks, k: int):
        """`_Loop._tokens`: the decodes' k tokens, the chunks' prompt tokens, the finished."""
        run, finished = self.runs, 0
        if n_dec:
            self.clock += k
            while self.cohorts and 1 + self.clock - self.cohorts[0][1] >= self.osl:
                count, entry = self.cohorts.popleft()
                self.n_dec -= count
                self.entries -= count * entry
                finished += count
        for entry, p, c in chunks:
            entry[1] = p + c
        done = 0
        while self.partial and self.partial[0][1] == self.isl:    # prompts finish in admission order
            r = self.partial.popleft()[0]
            if self.hit_tokens and not self.hit[r]:
                self.computed[self.pid[r]] = True                  # its prompt joins the pool
            done += 1
        if done:
            self.first[self.n_first:self.n_first + done] = run
            self.n_first += done
            if self.osl == 1:
                finished += done
            else:
                self.cohorts.append([done, self.clock])
                self.n_dec += done
                self.entries += done * self.clock
        self.runs = run + 1
        if finished:
            self.finished[self.n_finished:self.n_finished + finished] = run
            self.n_finished += finished
            self._completed(finished)
