"""The planner's speed: configurations searched per second, wall and CPU time (issue 29 item 6).

    python bench/plan.py                  # from the repository root; a few seconds of CPU

Searches Mixtral-8x7B (a mixture of experts, so every axis is searched: tp, attention dp, ep,
pp, and disaggregated prefill:decode pools) over every catalog device, every deployment of at
most 8 GPUs, five weight choices (bf16, fp8, nvfp4 everywhere; bf16 attention with mxfp4
experts, fp8 with nvfp4 experts; fp4 on devices without an fp4 peak weight-only) and two KV-cache
formats and 130 batch sizes (1 to 1024), at ISL 1024,
OSL 256 and TTFT <= 2 s, TPOT <= 50 ms: over 100,000 configurations.
Timed from a fresh process's first search (the step models are built inside the timing; the
imports are not). CPU time is the process's (time.process_time), so a busy machine's other
work is not counted; wall time is printed beside it. Target: under 10 s of CPU for the whole
search (at least 100,000 configurations), and under 10 s per 100,000. Exit status 1 if it is missed.
A benchmark, not a test: the figure is what the planner achieves here.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rooflinec.spec import catalog, load as spec  # noqa: E402
from rooflinec.serving import calibration, plan  # noqa: E402

TARGET_S_PER_100K = 10.0


def main() -> int:
    model = spec.load_model(catalog.path("models", "mixtral-8x7b"))
    devices = [spec.load_hardware(catalog.path("hardware", n)) for n in catalog.names("hardware")]
    table = calibration.load(calibration.shipped())
    batches = tuple(range(1, 121)) + tuple(round(128 * 8 ** (i / 9)) for i in range(10))   # 130: 1 to 1024
    work = plan.Workload(1024, 256, batches)
    pairs = [plan.Formats(w, k, e) for w, e in (("bf16", None), ("fp8", None), ("nvfp4", None),
                                                 ("bf16", "mxfp4"), ("fp8", "nvfp4")) for k in ("bf16", "fp8")]
    wall, cpu = time.perf_counter(), time.process_time()
    res = plan.search(model, devices, 8, work, plan.Slo(2.0, 0.05), lambda d: table.of(d.key, ""), lambda d: pairs)
    found = res.table()
    front = plan.pareto(found["per_gpu"], found["per_user"])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    modes = {m: int((found["mode"] == m).sum()) for m in ("agg", "disagg")}
    per_100k = cpu / res.searched * 100_000
    ok = per_100k < TARGET_S_PER_100K and cpu < TARGET_S_PER_100K and res.searched >= 100_000
    print(f"plan: {res.searched} configurations, {len(found['batch'])} meet the SLO, "
          f"{len(front)} on the frontier ({modes['agg']} aggregated and {modes['disagg']} disaggregated "
          f"feasible); CPU {cpu:.2f} s, wall {wall:.2f} s; "
          f"load {os.getloadavg()[0]:.2f}; {per_100k:.2f} s CPU per 100,000 (target < {TARGET_S_PER_100K:g} s): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
