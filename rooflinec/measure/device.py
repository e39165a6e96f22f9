"""`rooflinec measure device`: time matrix products and streams here, write a hardware spec.

What it times, on the CPU or a CUDA GPU alike (rooflinec.measure.timing):
- per dtype, n x n by n x n products (2n^3 FLOPs) at a ladder of sizes; the best rate over
  the ladder is the matrix peak (the ladder reaches the plateau, or the rate is a floor);
- a streaming copy and a streaming read (a matrix-vector product) of a buffer four times the
  last-level cache, the better of the two is the memory bandwidth (a copy counts bytes read
  + written);
- a copy that fits in the last-level cache, recorded as the cache bandwidth.
"""

from __future__ import annotations

import datetime
import glob
import os
import platform
from dataclasses import dataclass
import yaml

from rooflinec import measure
from rooflinec.measure.timing import Timing, clock, clock_name, repeat
from rooflinec.base.quantities import BINARY, prefixed, short
from rooflinec.base.units import QuantityError, parse_quantity

MiB = 2**20
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}
DEFAULT_DTYPES = {("cpu", False): ("fp32", "bf16"), ("cuda", False): ("fp32", "bf16", "fp16"),
                  # a CPU without bf16 units takes seconds per bf16 product: quick times fp32
                  ("cpu", True): ("fp32",), ("cuda", True): ("fp32", "bf16")}
# matrix sides timed per device: quick stops where this machine's CPU already plateaus
LADDER = {("cpu", True): (256, 512, 1024), ("cpu", False): (512, 1024, 2048),
          ("cuda", True): (2048, 4096), ("cuda", False): (2048, 4096, 8192)}
LEAVES_OUT = ("on-chip SRAM per SM (on_chip) is not measured; the vector fp32 peak is the fp32 "
              "matrix product's rate (the same FMA units run both), and no other vector dtype is "
              "timed; peaks are what PyTorch's kernels reach here, not the silicon's datasheet peaks")


@dataclass(frozen=True)
class Calibration:
    name: str
    device: str                  # "cpu" or "cuda"
    tool: str
    matmul: dict                 # dtype -> (n, Timing) of the best size
    copy: Timing
    read: Timing
    cache_copy: Timing
    cache_size: int
    cache_found: bool
    capacity: int
    quick: bool
    clock: str = "with time.perf_counter"     # how each run was timed

    @property
    def bandwidth(self) -> float:
        return max(self.copy.best, self.read.best)


def last_level_cache(torch, device) -> tuple[int, bool]:
    """Bytes of the last-level cache (a CPU's L3, a GPU's L2), and whether it was found."""
    if device.type == "cuda":
        size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        return (size, True) if size else (64 * MiB, False)
    best = (0, 0)
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(index, "level")) as f:
                level = int(f.read())
            with open(os.path.join(index, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        size = int(text.rstrip("KMG")) * scale if text.rstrip("KMG").isdigit() else 0
        best = max(best, (level, size))
    return (best[1], True) if best[1] else (64 * MiB, False)


def _name(torch, device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return platform.processor() or platform.machine() or "this CPU"


def _capacity(torch, device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _matmul(torch, device, timed, dtype: str, sizes, repeats: int,
            budget: float) -> tuple[int, Timing]:
    """The best-rate size of the ladder, with its timing; the ladder stops early where one
    next product would take over the `budget` (seconds per size)."""
    best = None
    for n in sizes:
        a = torch.randn(n, n, device=device).to(getattr(torch, TORCH_DTYPES[dtype]))
        b = torch.randn(n, n, device=device).to(a.dtype)
        t = repeat(timed, lambda: torch.matmul(a, b), 2 * n**3, repeats, budget=budget)
        if best is None or t.best > best[1].best:
            best = (n, t)
        if min(t.times) * 8 > budget:   # the next side takes 8 times as long
            break
    return best


def _streams(torch, device, timed, big: int, small: int, repeats: int):
    src = torch.ones(big // 4, device=device)
    dst = torch.empty_like(src)
    copy = repeat(timed, lambda: dst.copy_(src), 2 * big, repeats)
    # the read is a matrix-vector product over the buffer: how a decode GEMM reads its weights
    # (a sum reads slower here than a GEMV does); the 1024-vector and the output are negligible
    rows, x = src.view(-1, 1024), torch.ones(1024, device=device)
    read = repeat(timed, lambda: torch.mv(rows, x), big, repeats)
    del src, dst, rows
    s_src = torch.ones(small // 4, device=device)
    s_dst = torch.empty_like(s_src)
    cached = repeat(timed, lambda: s_dst.copy_(s_src), 2 * small, repeats * 10)
    return copy, read, cached


def calibrate(on: str | None = None, quick: bool = False, dtypes=None,
              threads: int | None = None) -> Calibration:
    torch = measure.torch()
    device = measure.local_device(torch, on, threads)
    timed = clock(torch, device)
    cache_size, found = last_level_cache(torch, device)
    repeats = 10 if quick else 20
    dtypes = dtypes or DEFAULT_DTYPES[device.type, quick]
    if "fp32" not in dtypes:
        dtypes = ("fp32", *dtypes)   # the vector peak is the fp32 rate
    sizes = LADDER[device.type, quick]
    with torch.inference_mode():
        matmul = {d: _matmul(torch, device, timed, d, sizes, repeats, 1.0 if quick else 5.0)
                  for d in dtypes}
        # a quarter of the cache per buffer: source and destination stay inside it together
        # streams are short: three times the repeats, for a run no other process disturbed
        copy, read, cached = _streams(torch, device, timed, max(4 * cache_size, 64 * MiB),
                                      cache_size // 4, 3 * repeats)
    return Calibration(_name(torch, device), device.type, measure.describe(torch, device),
                       matmul, copy, read, cached, cache_size, found, _capacity(torch, device), quick,
                       clock_name(torch, device))


def format_quantity(value, dimension: str, binary: bool = False) -> str:
    """A base-unit number as a spec writes it (4 significant figures), e.g. 123.4 GFLOP/s."""
    if binary:
        return _bytes(value)
    return short(value, {"flops_rate": "FLOP/s", "bandwidth": "B/s"}[dimension])


def _bytes(nbytes: int) -> str:
    """4 significant figures where that is a whole number of bytes (a spec takes no other),
    e.g. 32 MiB; else whole MiB, rounded down: 23.54 GiB would be 0.44 of a byte past a count."""
    value, prefix = prefixed(nbytes, BINARY)
    text = f"{value:.4g} {prefix}B"
    try:
        parse_quantity(text, "bytes")
    except QuantityError:
        return f"{nbytes // MiB} MiB" if nbytes >= MiB else f"{int(nbytes)} B"
    return text


def _timed(t: Timing, size, dimension: str, repeats: int) -> dict:
    return {**size, "best": format_quantity(_round(t.best), dimension),
            "median": format_quantity(_round(t.median), dimension), "repeats": repeats}


def _round(x: float) -> int:
    """Four significant figures as an exact integer, so the YAML reads 123.4 GFLOP/s."""
    digits = max(len(str(int(x))) - 4, 0)
    return round(int(x), -digits)


def spec(cal: Calibration, date: datetime.date | None = None) -> dict:
    """The hardware spec for `cal`, as data: peaks, bandwidth, cache, and how they were measured."""
    date = date or datetime.date.today()
    flops = lambda t: format_quantity(_round(t.best), "flops_rate")   # noqa: E731
    band = lambda t: format_quantity(_round(t), "bandwidth")           # noqa: E731
    repeats = len(cal.copy.times)
    method = ("torch.matmul of n x n matrices per dtype (best over the sides timed), copy_ and mv "
              f"of a {cal.copy.work // 2 // MiB} MiB buffer, copy_ of a "
              f"{cal.cache_copy.work // 2 // MiB} MiB buffer inside the cache; each timed "
              f"{cal.clock} after two "
              f"warm-up runs{'; --quick: smaller sides, fewer repeats' if cal.quick else ''}")
    leaves_out = LEAVES_OUT + ("" if cal.cache_found else
                               "; the cache size was not found and 64 MiB is assumed")
    return {
        "name": f"{cal.name} (measured)",
        "year": date.year,
        "compute": {"tensor": {d: flops(t) for d, (n, t) in cal.matmul.items()},
                    "vector": {"fp32": flops(cal.matmul["fp32"][1])}},
        "memory": {"bandwidth": band(cal.bandwidth),
                   "capacity": format_quantity(cal.capacity, "bytes", binary=True)},
        "cache": {"size": format_quantity(cal.cache_size, "bytes", binary=True),
                  "bandwidth": band(cal.cache_copy.best)},
        "measured": {
            "method": method, "date": date.isoformat(), "tool": cal.tool,
            "matmul": {d: _timed(t, {"n": n}, "flops_rate", len(t.times))
                       for d, (n, t) in cal.matmul.items()},
            "copy": _timed(cal.copy, _size(cal.copy.work // 2), "bandwidth", repeats),
            "read": _timed(cal.read, _size(cal.read.work), "bandwidth", repeats),
            "cache_copy": _timed(cal.cache_copy, _size(cal.cache_copy.work // 2), "bandwidth",
                                 len(cal.cache_copy.times)),
            "leaves_out": leaves_out},
        "source": f"measured on this machine by rooflinec measure device, {date.isoformat()}",
    }


def _size(nbytes: int) -> dict:
    return {"size": format_quantity(nbytes, "bytes", binary=True)}


def yaml_text(data: dict) -> str:
    header = ("# Measured by `rooflinec measure device`: the rates PyTorch's kernels reach on this\n"
              "# machine, not datasheet peaks. See measured.leaves_out for what it does not cover.\n")
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
