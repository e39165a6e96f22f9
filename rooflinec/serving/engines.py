"""Engine scheduling policies as data: `catalog/engines/<name>.yaml`, one file per engine.

Each file states the engine's version, the source files its defaults come from, and the
fields it does not know (`assumed`, each with what was assumed). Checked by hand here rather
than by a JSON Schema: a dozen scalar fields, each with a located message.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace

from rooflinec.spec import catalog
from rooflinec.base import yamlio
from rooflinec.base.errors import SpecError, UsageError
from rooflinec.spec.load import DTYPE_BYTES

SCHEDULES = ("mixed", "prefill_first")
PREEMPTION = ("recompute", "none")
# after a preemption: admission reserves every request's whole remaining output (SGLang raises its
# new-token ratio after a retraction), or reserves as before but admits nothing in the step that
# preempted (vLLM V1's Scheduler.schedule: `if not preempted_reqs`)
AFTER_PREEMPTION = ("reserve_output", "pause_admission")
OPTIONAL = {"after_preemption": "reserve_output"}     # a field an engine file may leave out: its default
FRACTION_OF = ("total", "free")
AUTO = "auto"          # the KV cache in the activation dtype
AUTO_DTYPE = "bf16"


@dataclass(frozen=True)
class Policy:
    name: str
    version: str
    source: str
    max_batch: int                   # most requests running at once
    max_tokens: int                  # tokens one step may schedule (decodes + prompt chunks)
    chunked_prefill: bool            # a prompt may be split over steps
    chunk_tokens: int                # most prompt tokens one step schedules
    schedule: str                    # mixed: decodes beside chunks; prefill_first: a prefill step pauses decodes
    kv_block_tokens: int
    cache_fraction: float
    cache_fraction_of: str           # total memory (weights inside it) or what the weights leave
    admission_reserve_output: float  # share of a request's output whose KV is reserved at admission
    preemption: str
    kv_cache: str
    prefix_caching: bool             # a prompt's cached full KV blocks are reused, not prefilled again
    assumed: dict                    # field -> what was assumed where no source states it
    after_preemption: str = OPTIONAL["after_preemption"]     # AFTER_PREEMPTION

    def kv_dtype(self) -> str:
        return AUTO_DTYPE if self.kv_cache == AUTO else self.kv_cache


INTEGERS = ("max_batch", "max_tokens", "chunk_tokens", "kv_block_tokens")
TEXTS = ("name", "version", "source")
OVERRIDABLE = INTEGERS + ("chunked_prefill", "schedule", "cache_fraction", "preemption", "after_preemption",
                          "kv_cache", "prefix_caching")


def names() -> list[str]:
    return catalog.names("engines")


def check(ref: str, files: bool = True) -> str:
    """The engine file `ref` names (a catalog name, or with `files` a YAML file's path), or a
    usage error naming the known engines: simulate's, plan's and serve's one check."""
    named = os.sep not in ref and not ref.endswith(".yaml")
    file = catalog.path("engines", ref) if named else ref if files else None
    if file is None or not os.path.isfile(file):
        raise UsageError(f"--engine: unknown engine '{ref}'; choose from {', '.join(names())}"
                         + (" or give an engine YAML file" if files else ""))
    return file


def key_of(ref: str) -> str:
    """The calibration's key for engine `ref` (its file's name less .yaml), checked by `check`."""
    check(ref)
    return os.path.basename(ref).removesuffix(".yaml")


def load(ref: str) -> Policy:
    """An engine by catalog name (trtllm, vllm, sglang) or a YAML file's path."""
    file = check(ref)
    doc = yamlio.load(file)
    d = doc.data
    if not isinstance(d, dict):
        raise SpecError([doc.problem((), "expected a mapping of scheduler fields")])
    problems, values = [], {}
    known = {f.name for f in fields(Policy)}
    for key in sorted(set(d) - known):
        problems.append(doc.problem((key,), f"unknown field; known: {', '.join(sorted(known))}", at_key=True))
    for f in fields(Policy):
        if f.name not in d:
            if f.name not in OPTIONAL:
                problems.append(doc.problem((), f"missing field '{f.name}'"))
            continue
        v, bad = d[f.name], problem(f.name, d[f.name])
        if bad:
            problems.append(doc.problem((f.name,), bad))
        values[f.name] = v
    if problems:
        raise SpecError(problems)
    return Policy(**values)


def problem(name: str, v) -> str:
    """Why `v` is not a valid value of field `name`, or ''."""
    if name in TEXTS:
        return "" if isinstance(v, str) and v.strip() else "expected text"
    if name in INTEGERS:
        return "" if _whole(v) else f"expected a whole number from 1 to {MOST:,}"
    if name in ("chunked_prefill", "prefix_caching"):
        return "" if isinstance(v, bool) else "expected true or false"
    if name in ("cache_fraction", "admission_reserve_output"):
        lo_ok = (lambda x: x > 0) if name == "cache_fraction" else (lambda x: x >= 0)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo_ok(v) and v <= 1
        return "" if ok else "expected a fraction in (0, 1]" if name == "cache_fraction" else "expected a fraction in [0, 1]"
    choices = {"schedule": SCHEDULES, "preemption": PREEMPTION, "cache_fraction_of": FRACTION_OF,
               "kv_cache": (AUTO, *DTYPE_BYTES), "after_preemption": AFTER_PREEMPTION}.get(name)
    if choices:
        return "" if v in choices else f"expected one of {', '.join(choices)}"
    if name == "assumed":
        return "" if isinstance(v, dict) and all(isinstance(x, str) for x in v.values()) else \
            "expected a mapping of field: what was assumed"
    return ""


MOST = 2**31      # a count a scheduler field may hold


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MOST


def override(policy: Policy, **changes) -> Policy:
    """`policy` with the given fields changed (None: unchanged); a bad value is a UsageError
    naming its flag."""
    given = {k: v for k, v in changes.items() if v is not None}
    for k, v in given.items():
        bad = problem(k, v)
        if bad:
            raise UsageError(f"--{k.replace('_', '-')}: {bad}")
    return replace(policy, **given)
