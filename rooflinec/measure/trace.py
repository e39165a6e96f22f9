"""`rooflinec trace`: read a PyTorch profiler (Kineto) Chrome trace, find one step, map its GPU
kernels onto the spec's operators by name, and set each group beside its roofline.

Reading: ijson (a streaming JSON parser, its C yajl2 backend) over the gzip stream. Holistic
Trace Analysis reads Kineto traces with the same ijson call (`ijson.items(f,
"traceEvents.item")`, in hta.common.trace_parser) but then keeps every event in a pandas
DataFrame, so its memory grows with the file, and it installs jupyterlab, plotly, pandas,
networkx and pydot besides; Perfetto's trace processor is a native binary that its Python
package downloads at run time. So rooflinec calls ijson as HTA does and keeps only what the
report needs: the step annotations (one pass), then per kernel name its calls and time inside
the chosen step (a second pass). Memory is bounded by the number of distinct kernel names and
steps, not by the file (`bench/trace_bench.py` reads a 200 MB trace).

Steps: the `ProfilerStep#N` annotations torch.profiler writes. Where Kineto mirrored the step
onto the GPU timeline (`gpu_user_annotation`), a kernel belongs to it when it starts inside it;
else a kernel belongs to the CPU-side step when its launch (the runtime event with the same
`correlation`) lies inside it (a third pass collects those launches). `--step all` takes every
kernel in the file as one step, for traces without annotations.
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field
from importlib import resources

from rooflinec.base import yamlio
from rooflinec.base.errors import RooflineError, UsageError
from rooflinec.base.vocabulary import CATEGORIES

STEP_NAME = re.compile(r"ProfilerStep#(\d+)$")
STEP_CATS = {"user_annotation": "cpu", "gpu_user_annotation": "gpu"}
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime")
# sizes a trace may reach before it is refused (counted in bytes and names, never seconds)
MAX_BYTES = 16 * 2**30          # decompressed JSON read
MAX_KERNEL_NAMES = 200_000      # distinct kernel names kept


class TraceError(RooflineError):
    """A trace that cannot be read, located at its file and, where known, the byte."""


@dataclass(frozen=True)
class Step:
    number: int | None              # None: the whole trace (--step all)
    cpu: tuple[float, float] | None  # (start, end) in µs
    gpu: tuple[float, float] | None


@dataclass
class Kernels:
    """Per kernel name, calls and summed duration (µs) inside the chosen step."""

    calls: dict = field(default_factory=dict)
    time_us: dict = field(default_factory=dict)
    first_us: float | None = None
    last_us: float | None = None

    def add(self, name: str, ts: float, dur: float) -> None:
        if name not in self.calls and len(self.calls) >= MAX_KERNEL_NAMES:
            raise TraceError(f"more than {MAX_KERNEL_NAMES} distinct kernel names: not a "
                             "profiler trace rooflinec can summarise")
        self.calls[name] = self.calls.get(name, 0) + 1
        self.time_us[name] = self.time_us.get(name, 0.0) + dur
        self.first_us = ts if self.first_us is None else min(self.first_us, ts)
        self.last_us = ts + dur if self.last_us is None else max(self.last_us, ts + dur)

    @property
    def total_us(self) -> float:
        return sum(self.time_us.values())


@dataclass(frozen=True)
class Trace:
    path: str
    device: str | None               # the profiled GPU's name, from deviceProperties
    steps: tuple[int, ...]           # the ProfilerStep numbers found
    step: Step
    kernels: Kernels
    rule: str                        # how the step's kernels were chosen, in words
    shapes: tuple | None             # [B, T] of the step's first aten::embedding ids, if recorded


# --- streaming --------------------------------------------------------------------------


class _Counted:
    """A binary stream that counts the bytes read through it (for located errors and the cap)."""

    def __init__(self, raw, path: str):
        self.raw, self.path, self.read_bytes = raw, path, 0

    def read(self, n: int = -1) -> bytes:
        try:
            data = self.raw.read(n)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise TraceError(f"{self.path}: the gzip stream breaks off after {self.read_bytes:,} "
                             f"bytes of JSON ({exc}): a truncated or damaged file") from None
        self.read_bytes += len(data)
        if self.read_bytes > MAX_BYTES:
            raise TraceError(f"{self.path}: over {MAX_BYTES // 2**30} GiB of JSON: too large a "
                             "trace; record fewer steps (torch.profiler.schedule active=1)")
        return data


def _ijson():
    """ijson, imported at the first read: only `rooflinec trace` needs it (the `trace` extra),
    so the CLI loads without it and says how to install it."""
    try:
        import ijson
    except ImportError:
        raise TraceError("rooflinec trace needs ijson: pip install -e '.[trace]'") from None
    return ijson


def _open(path: str) -> _Counted:
    try:
        with open(path, "rb") as probe:
            gz = probe.read(2) == b"\x1f\x8b"
        return _Counted(gzip.open(path, "rb") if gz else open(path, "rb"), path)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _events(path: str):
    """Every entry of `traceEvents`, streamed; a located error where the JSON breaks."""
    ijson = _ijson()
    stream = _open(path)
    seen = 0
    try:
        for seen, event in enumerate(ijson.items(stream, "traceEvents.item", use_float=True), 1):
            if isinstance(event, dict):
                yield event
    except ijson.JSONError as exc:
        raise TraceError(f"{path}: not valid JSON near byte {stream.read_bytes:,} of the "
                         f"decompressed text ({exc}); a Kineto trace is one JSON object") from None
    finally:
        stream.raw.close()
    if not seen:
        raise TraceError(f"{path}: no `traceEvents` list: not a PyTorch profiler (Kineto / "
                         "Chrome trace) JSON object")


def _devices(path: str) -> list:
    """`deviceProperties` (Kineto writes it before or after `traceEvents`): one more pass,
    which tokenises the events in C without building them."""
    ijson = _ijson()
    stream = _open(path)
    try:
        return [d for d in ijson.items(stream, "deviceProperties.item", use_float=True)
                if isinstance(d, dict)]
    except ijson.JSONError:
        return []   # _events says where the JSON breaks
    finally:
        stream.raw.close()


# --- steps and kernels ----------------------------------------------------------------------


def _window(e: dict) -> tuple[float, float]:
    ts = float(e.get("ts", 0.0))
    return ts, ts + float(e.get("dur", 0.0))


def _is_kernel(e: dict) -> bool:
    return e.get("cat") == "kernel" and e.get("ph") == "X"


def _steps(path: str) -> tuple[dict, int, int]:
    """ProfilerStep number -> {"cpu": window, "gpu": window}; the GPU kernel and CPU op counts."""
    steps, kernels, ops = {}, 0, 0
    for e in _events(path):
        if _is_kernel(e):
            kernels += 1
            continue
        ops += e.get("cat") == "cpu_op"
        side = STEP_CATS.get(e.get("cat"))
        match = STEP_NAME.match(str(e.get("name", ""))) if side else None
        if match:
            steps.setdefault(int(match.group(1)), {})[side] = _window(e)
    return steps, kernels, ops


def choose(path: str, steps: dict, wanted: str | None) -> Step:
    """The step `wanted` names (a number, "all"), by default the last one recorded (warm-up
    steps come first)."""
    if wanted == "all":
        return Step(None, None, None)
    if not steps:
        raise TraceError(f"{path}: no ProfilerStep#N annotation (torch.profiler writes one per "
                         "prof.step()); pass --step all to take every kernel of the trace as "
                         "one step")
    if wanted is None:
        number = max(steps)
    else:
        try:
            number = int(wanted)
        except ValueError:
            raise UsageError(f"--step {wanted}: a step number or all") from None
        if number not in steps:
            raise UsageError(f"--step {wanted}: {path} holds ProfilerStep "
                             f"{', '.join(f'#{n}' for n in sorted(steps))}")
    return Step(number, steps[number].get("cpu"), steps[number].get("gpu"))


def _launched(path: str, window: tuple[float, float]) -> set:
    """Correlation ids of the kernel launches inside the CPU-side step."""
    start, end = window
    ids = set()
    for e in _events(path):
        if e.get("cat") in LAUNCH_CATS and start <= float(e.get("ts", -1.0)) <= end:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                ids.add(corr)
    return ids


def _collect(path: str, step: Step, on_gpu: bool = True) -> tuple[Kernels, tuple | None]:
    kernels, shapes, ops = Kernels(), None, []
    ids = _launched(path, step.cpu) if on_gpu and step.gpu is None and step.cpu is not None else None
    window = step.cpu or (float("-inf"), float("inf"))
    for e in _events(path):
        if not on_gpu and e.get("cat") == "cpu_op" and window[0] <= float(e.get("ts", 0.0)) <= window[1]:
            ops.append((e.get("tid"), *_window(e), str(e.get("name", ""))))
        if on_gpu and _is_kernel(e):
            ts, end = _window(e)
            if step.gpu is not None and not step.gpu[0] <= ts < step.gpu[1]:
                continue
            if ids is not None and (e.get("args") or {}).get("correlation") not in ids:
                continue
            kernels.add(str(e.get("name", "")), ts, end - ts)
        if shapes is None and e.get("name") == "aten::embedding":
            dims = (e.get("args") or {}).get("Input Dims")
            if window[0] <= float(e.get("ts", 0.0)) <= window[1] and dims and len(dims) > 1 \
                    and len(dims[1]) == 2:
                shapes = tuple(int(x) for x in dims[1])
    for _, start, end, name in _outermost(ops):
        kernels.add(name, start, end - start)
    return kernels, shapes


def _outermost(ops: list) -> list:
    """The CPU ops no other op of their thread encloses: a CPU trace's "kernels" (an inner
    op's time is already inside its caller's)."""
    out, ends = [], {}
    for tid, start, end, name in sorted(ops, key=lambda o: (str(o[0]), o[1], -o[2])):
        if start >= ends.get(tid, float("-inf")):
            out.append((tid, start, end, name))
            ends[tid] = end
    return out


def _gpu_name(props: list) -> str | None:
    """The GPU's name where every GPU the host lists is of one kind."""
    names = {p.get("name") for p in props if p.get("name")}
    return names.pop() if len(names) == 1 else None


def read(path: str, step: str | None = None) -> Trace:
    """The trace at `path` (JSON or gzipped JSON), reduced to one step's kernels."""
    steps, count, ops = _steps(path)
    if not count and not ops:
        raise TraceError(f"{path}: no GPU kernel (cat \"kernel\") and no CPU op (cat "
                         "\"cpu_op\") events: nothing ran under the profiler")
    chosen = choose(path, steps, step)
    kernels, shapes = _collect(path, chosen, on_gpu=bool(count))
    if not kernels.calls:
        raise TraceError(f"{path}: ProfilerStep#{chosen.number} holds no kernel")
    if not count:
        rule = ("no GPU kernels (a CPU trace): the outermost CPU ops of "
                + (f"ProfilerStep#{chosen.number}" if chosen.number is not None else "the trace"))
    elif chosen.number is None:
        rule = "every kernel in the trace (--step all)"
    elif chosen.gpu is not None:
        rule = f"kernels that start inside ProfilerStep#{chosen.number} on the GPU timeline"
    else:
        rule = (f"kernels launched inside ProfilerStep#{chosen.number} on the CPU (by their "
                "launch's correlation id)")
    return Trace(path, _gpu_name(_devices(path)), tuple(sorted(steps)), chosen, kernels, rule, shapes)


# --- rules ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    group: str
    pattern: re.Pattern
    categories: tuple[str, ...]
    collective: bool
    where: str                      # file:rule index, for messages


def load_rules(extra: str | None = None) -> tuple[Rule, ...]:
    """The user's rules (tried first), then the shipped ones."""
    shipped = resources.files("rooflinec.measure").joinpath("trace_rules.yaml")
    texts = [(extra, _text(extra))] if extra else []
    texts.append(("trace_rules.yaml (shipped)", shipped.read_text()))
    rules = []
    for where, text in texts:
        data = yamlio.load(where, text).data     # plain YAML, bounded; a located error
        entries = data.get("rules") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise RooflineError(f"{where}: expected `rules:`, a list of {{group, match, "
                                "categories | collective}}")
        for i, r in enumerate(entries):
            here = f"{where}: rules[{i}]"
            if not isinstance(r, dict) or not isinstance(r.get("group"), str) \
                    or not isinstance(r.get("match"), str):
                raise RooflineError(f"{here}: needs `group` and `match` (strings)")
            cats = tuple(r.get("categories") or ())
            bad = [c for c in cats if c not in CATEGORIES]
            if bad or not (cats or r.get("collective")):
                raise RooflineError(f"{here}: categories {bad or '(none)'}: give some of "
                                    f"{', '.join(CATEGORIES)}, or collective: true")
            try:
                pattern = re.compile(r["match"], re.IGNORECASE)
            except re.error as exc:
                raise RooflineError(f"{here}: match {r['match']!r}: {exc}") from None
            rules.append(Rule(r["group"], pattern, cats, bool(r.get("collective")), here))
    return tuple(rules)


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"--rules {path}: cannot read: {exc.strerror or exc}") from None


def classify(name: str, rules) -> Rule | None:
    return next((r for r in rules if r.pattern.search(name)), None)
