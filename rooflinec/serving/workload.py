"""Workloads a deployment serves: a closed loop of clients or an open loop of Poisson arrivals.

Closed loop (the method of the measured rows: `aiperf --concurrency C --num-requests 20C
--warmup-request-count 2C`, all C clients start together): C clients, each sending its next
request the moment its last one finished. The warm-up requests are sent first and not
measured; the measured phase starts when the warm-up has drained, all C clients together
again (aiperf's warm-up guide, ai-dynamo/aiperf docs/tutorials/warmup.md: by default it waits
for every warm-up response before the profiling phase starts).
Open loop (the method of MLPerf's Server scenario): Poisson arrivals at a rate, from a seeded
generator. Lengths are fixed, drawn uniformly from a range (vLLM's and SGLang's random
datasets), or normal with a mean and a standard deviation as aiperf draws its synthetic
prompts' and outputs' lengths (`--synthetic-input-tokens-mean/-stddev`, `--output-tokens-mean/
-stddev`; ai-dynamo/aiperf's `sample_positive_normal_integer`: a normal redrawn below 0, then
rounded up, at least 1), seeded.

Prompts: aiperf's synthetic dataset holds `--num-dataset-entries` unique prompts, default 100
(ai-dynamo/aiperf src/aiperf/common/config/config_defaults.py InputDefaults.NUM_DATASET_ENTRIES;
docs/cli_options.md: the entries are reused until benchmarking is complete), drawn with the
default sampling strategy `shuffle` (InputDefaults.DATASET_SAMPLING_STRATEGY): each pass over the
dataset a seeded permutation, without replacement. The measured rows' recipe does not set it, so
their benchmark sends each of 100 prompts 0.22 C times; an engine's prefix cache may then skip
their prefill (`simulator`). `unique_prompts` None: every prompt distinct.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from rooflinec.base.errors import UsageError

DEFAULT_SEED = 0
AIPERF_DATASET_ENTRIES = 100     # aiperf's --num-dataset-entries default
# The replay's default for the measured rows: every prompt distinct. Replaying aiperf's 100
# reused prompts with the engines' prefix caching made the refitted validation worse (README,
# simulate), so prompt reuse is an option (`--unique-prompts 100`), not the default; the bounds
# take it regardless (validation.prompt_alone: the least work any run does).
BENCHMARK_UNIQUE_PROMPTS: int | None = None


NORMAL = re.compile(r"normal:([0-9]{1,9}),([0-9]{1,9}(?:\.[0-9]{1,9})?)")
TAIL_SDS = 10      # a normal's support as the checks see it: mean + 10 sd (a draw past it: p ~ 1e-23)
REDRAWS = 10_000   # a normal's redraws below 0 (aiperf's rejection limit), then the mean


@dataclass(frozen=True)
class Lengths:
    """Token counts: `low` = `high` for a fixed length, else uniform on [low, high]; with `sd`
    > 0, normal with mean `mean` and that sd (aiperf's draw), `low`-`high` its support (1 to
    mean + TAIL_SDS sd) for the checks that need one."""

    low: int
    high: int
    mean: int = 0
    sd: float = 0.0

    @staticmethod
    def parse(text: str, flag: str) -> Lengths:
        normal = NORMAL.fullmatch(str(text))
        if normal:
            mean, sd = int(normal[1]), float(normal[2])
            if mean < 1:
                raise UsageError(f"{flag}: '{text}': a normal's mean is at least 1 token")
            if sd == 0:
                return Lengths(mean, mean)
            return Lengths(1, mean + math.ceil(TAIL_SDS * sd), mean, sd)
        parts = str(text).split("-")
        if len(parts) not in (1, 2) or not all(p.isascii() and p.isdigit() and len(p) <= 9 for p in parts):
            raise UsageError(f"{flag}: '{text}' is not a token count (e.g. 1024), a range (e.g. 512-2048) or "
                             "normal:MEAN,SD (e.g. normal:1024,128)")
        low, high = int(parts[0]), int(parts[-1])
        if low < 1 or high < low:
            raise UsageError(f"{flag}: '{text}': lengths are at least 1 and a range is low-high")
        return Lengths(low, high)

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.sd > 0:
            return self._normal(n, rng)
        if self.low == self.high:
            return np.full(n, self.low, dtype=np.int64)
        return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)

    def _normal(self, n: int, rng: np.random.Generator) -> np.ndarray:
        x = rng.normal(self.mean, self.sd, size=n)
        for _ in range(REDRAWS):
            low = x < 0
            if not low.any():
                break
            x[low] = rng.normal(self.mean, self.sd, size=int(low.sum()))
        x[x < 0] = self.mean
        return np.clip(np.ceil(x), 1, self.high).astype(np.int64)

    def fields(self) -> dict:
        """The distribution for a script: {fixed: N}, {uniform: [low, high]} or {normal: {mean, sd}}."""
        if self.sd > 0:
            return {"normal": {"mean": self.mean, "sd": self.sd}}
        return {"fixed": self.low} if self.low == self.high else {"uniform": [self.low, self.high]}

    def __str__(self) -> str:
        if self.sd > 0:
            return f"normal mean {self.mean}, sd {self.sd:g}"
        return str(self.low) if self.low == self.high else f"uniform {self.low}-{self.high}"


@dataclass(frozen=True)
class Workload:
    isl: Lengths
    osl: Lengths
    requests: int              # measured requests
    warmup: int                # requests sent first and not measured
    concurrency: int | None    # closed loop: clients
    rate: float | None         # open loop: arrivals per second
    seed: int = DEFAULT_SEED
    unique_prompts: int | None = None   # distinct prompts, reused in shuffled passes; None: all distinct

    @property
    def closed(self) -> bool:
        return self.rate is None

    @property
    def total(self) -> int:
        return self.warmup + self.requests

    @property
    def reused(self) -> bool:
        """Some prompt is sent more than once."""
        return self.unique_prompts is not None and self.unique_prompts < self.total

    def prompt_ids(self) -> np.ndarray | None:
        """Each request's prompt (aiperf's shuffle: a permutation per pass), or None where
        every prompt is distinct."""
        if not self.reused:
            return None
        u = self.unique_prompts
        rng = np.random.default_rng([self.seed, 2])
        passes = -(-self.total // u)
        return np.concatenate([rng.permutation(u) for _ in range(passes)])[:self.total]

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """ISL and OSL per request; a reused prompt keeps its length."""
        rng = np.random.default_rng(self.seed)
        ids = self.prompt_ids()
        if ids is None:
            return self.isl.draw(self.total, rng), self.osl.draw(self.total, rng)
        return self.isl.draw(self.unique_prompts, rng)[ids], self.osl.draw(self.total, rng)

    def arrivals(self) -> np.ndarray:
        """Open loop: arrival times, exponential gaps at `rate` (a generator apart from the
        lengths', so the same seed gives the same lengths at any rate)."""
        rng = np.random.default_rng([self.seed, 1])
        return np.cumsum(rng.exponential(1 / self.rate, size=self.total))

    def fields(self) -> dict:
        """The workload for a script (`describe` says it in words)."""
        return {"closed_loop": self.closed, "concurrency": self.concurrency, "rate_per_s": self.rate,
                "isl": self.isl.fields(), "osl": self.osl.fields(), "requests": self.requests,
                "warmup": self.warmup, "seed": self.seed, "unique_prompts": self.unique_prompts}

    def describe(self) -> str:
        load = (f"closed loop of {self.concurrency} clients" if self.closed
                else f"Poisson arrivals at {self.rate:g} requests/s (seed {self.seed})")
        prompts = f"; {self.unique_prompts} unique prompts" if self.reused else ""
        return f"{load}; ISL {self.isl}, OSL {self.osl}; {self.requests} measured after {self.warmup} warm-up{prompts}"


def benchmark(concurrency: int, isl: int, osl: int, unique_prompts: int | None = BENCHMARK_UNIQUE_PROMPTS) -> Workload:
    """The measured rows' benchmark: 20C requests after 2C warm-up, fixed lengths;
    `unique_prompts` distinct prompts (None: all distinct; aiperf sends AIPERF_DATASET_ENTRIES)."""
    return Workload(Lengths(isl, isl), Lengths(osl, osl), 20 * concurrency, 2 * concurrency, concurrency, None,
                    unique_prompts=unique_prompts)


def unique_prompts_of(text, default: int | None) -> int | None:
    """--unique-prompts: a count of prompts, or None (0 or all) for every prompt distinct."""
    if text is None:
        return default
    t = str(text).strip().lower()
    if t == "all":
        return None
    if not (t.isascii() and t.isdigit() and len(t) <= 9):
        raise UsageError(f"--unique-prompts: '{text}' is not a count of prompts (e.g. 100), 0 or all")
    return int(t) or None
