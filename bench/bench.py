"""rooflinec benchmark: build time against the import floor, sweep throughput and memory,
compile time against depth. Prints figures and PASS/FAIL against the targets.

    python bench/bench.py            # from the repository root; about two minutes
    python bench/bench.py --runs 7   # more runs per median
    python bench/bench.py --qwen-only  # the target study alone of the builds

Not a test: timings depend on the machine, and each line prints the load averages beside
its figures. Targets (a 2-core machine):
  build specs/qwen.yaml       <= 1.5 x the import floor, CPU <= 1.6 x the floor's CPU (a Python that only imports the
                                 runtime dependencies, matplotlib as drawing needs it: its
                                 figure and SVG backend, not bare matplotlib); every build cold.
                                 Builds now write their SVG by hand and import no matplotlib,
                                 so a floor without it is printed beside (no target)
  serve (a quick answer)       <= 1.2 x the import floor
  10^6-point ledger sweep      < 2 s and < 500 MB peak RSS (all ops, one device, one variant)
  compile at 1000 layers       within 10% of 24 layers
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPORT_NAMES = {"pyyaml": "yaml"}   # distribution name -> module name where they differ
AS_USED = {"matplotlib": ["matplotlib.figure", "matplotlib.backends.backend_svg"]}
FULL, NO_CHARTS = "md,html,json", "json"   # json alone draws no chart (md and html do)
# Bytecode caching on, as in a normal install: the dependencies' .pyc files already exist,
# so the floor and rooflinec are compared on equal terms (one warm-up run writes rooflinec's).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": ROOT}
SWEEP_SIDE = 1000                    # batch 1..1000 x context 1..1000 = 10^6 points


def runtime_modules() -> list[str]:
    """The modules of pyproject's runtime dependencies, imported as the build uses them.

    `import matplotlib` alone loads neither the Figure class nor a backend, which drawing a
    chart needs; the build draws SVG charts, so the floor imports matplotlib.figure and the
    SVG backend (what plotting really costs) in matplotlib's place.
    """
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        deps = tomllib.load(fh)["project"]["dependencies"]
    names = [d.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip()
             for d in deps]
    modules = []
    for name in names:
        module = IMPORT_NAMES.get(name.lower(), name.lower().replace("-", "_"))
        modules.extend(AS_USED.get(module, [module]))
    return modules


def _timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU time (user + sys) of one subprocess run, in s."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=ENV, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def paired(argvs: list[list[str]], runs: int) -> list[tuple[float, float, float]]:
    """Best and median wall time and best CPU time of each command, in s, the commands run
    in turn (a, b, a, b, ...) after one warm-up each, so that a busy spell of the machine
    falls on all of them alike.

    Best-of-N is the run least disturbed by other processes; CPU time shows the work itself
    on a busy machine. The floor and the builds are measured the same way.
    """
    for argv in argvs:
        subprocess.run(argv, cwd=ROOT, env=ENV, check=True, stdout=subprocess.DEVNULL)  # warm-up
    samples = [[] for _ in argvs]
    for _ in range(runs):
        for argv, got in zip(argvs, samples):
            got.append(_timed(argv))
    return [(min(w for w, _ in got), statistics.median(w for w, _ in got), min(c for _, c in got))
            for got in samples]


def wall(argv: list[str], runs: int) -> tuple[float, float, float]:
    return paired([argv], runs)[0]


def studies() -> list[str]:
    """Shipped studies: the YAML files directly under specs/ (hardware and models are below)."""
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "specs", "*.yaml")))


def child(mode: str) -> dict:
    """Run this script's `mode` in a fresh interpreter; it prints one JSON line."""
    out = subprocess.run([sys.executable, __file__, "--child", mode], cwd=ROOT, check=True,
                         env=ENV, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- children ------------------------------------------------------------------------

def _qwen():
    from rooflinec.spec import load as spec
    return spec.load_study(os.path.join(ROOT, "specs", "qwen.yaml"))


def child_sweep() -> dict:
    import resource

    import numpy as np

    from rooflinec.cost import sweep
    from rooflinec.model.lower import lower
    from rooflinec.model.symbols import B, S
    from rooflinec.cost.workbench import Workbench
    study = _qwen()
    device = study.devices[0]
    kernel = sweep.compile_program(lower(study.model, "decode"))
    bench = Workbench(study)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def timed(contexts: int):
        axes = {B: np.arange(1, SWEEP_SIDE + 1), S: np.arange(1, contexts + 1)}
        start = time.perf_counter()
        totals = sweep.run(kernel, bench, axes, [device], study.dtype)
        return totals, time.perf_counter() - start

    timed(1)   # warm-up: NumPy's and the kernel's first calls
    _, tenth_seconds = timed(SWEEP_SIDE // 10)   # a tenth of the points: a tenth of the time?
    totals, seconds = timed(SWEEP_SIDE)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KiB on Linux
    points = totals[device.key].time.size
    return {"points": points, "ops": len(kernel.ops), "device": device.key, "seconds": seconds,
            "tenth_points": points // 10, "tenth_seconds": tenth_seconds,
            "rss_mib": rss / 1024, "rss_growth_mib": (rss - rss_before) / 1024}


def child_compile() -> dict:
    """Lower + verify + compile at 24 and at 1000 layers, alternating, caches cleared each time."""
    from dataclasses import replace

    from sympy.core.cache import clear_cache

    from rooflinec.cost import sweep
    from rooflinec.cost.evaluate import _compiled
    from rooflinec.model.ir import factoring, intensity
    from rooflinec.model.lower import lower
    model = _qwen().model
    times = {24: [], 1000: []}
    ops = {}
    for _ in range(7):
        for layers in times:
            clear_cache(), _compiled.cache_clear()
            intensity.cache_clear(), factoring.cache_clear()
            deep = replace(model, n_layers=layers)
            start = time.perf_counter()
            kernel = sweep.compile_program(lower(deep, "decode"))
            kernel.fn(*[1] * len(kernel.args))
            times[layers].append(time.perf_counter() - start)
            ops[layers] = len(kernel.ops)
    return {str(k): {"seconds": statistics.median(v), "ops": ops[k]} for k, v in times.items()}


# --- report --------------------------------------------------------------------------

def load() -> str:
    """The machine's load averages (1, 5, 15 min), as `uptime` prints them: timings on a busy
    machine read with them (CPU time is the steadier figure)."""
    return "load " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="runs per median (default 5)")
    p.add_argument("--qwen-only", action="store_true",
                   help="build only specs/qwen.yaml (the target) of the shipped studies")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps({"sweep": child_sweep, "compile": child_compile}[args.child]()))
        return 0
    ok = True
    modules = runtime_modules()
    floor_argv = [sys.executable, "-c", "import " + ", ".join(modules)]
    # builds draw their charts with render/svgplot.py and import no matplotlib (the plan and
    # validation charts still do): the floor of what a build really imports, shown beside
    lean = [m for m in modules if m.split(".")[0] not in AS_USED]
    lean_argv = [sys.executable, "-c", "import " + ", ".join(lean)]
    qwen = os.path.join("specs", "qwen.yaml")
    with tempfile.TemporaryDirectory() as out:
        build = lambda study, formats: [sys.executable, "-m", "rooflinec", "build", study,  # noqa: E731
                                        "--out", out, "--format", formats]
        # The floor and the qwen builds are measured in turn, so that load falls on all alike.
        qwen_formats = (FULL, "md,json", NO_CHARTS)
        serve = [sys.executable, "-m", "rooflinec", "serve", "qwen2.5-7b", "--device", "h100-sxm"]
        (floor, floor_med, floor_cpu), (lean_floor, _, lean_cpu), *measured, served = paired(
            [floor_argv, lean_argv, *(build(qwen, f) for f in qwen_formats), serve], args.runs)
        qwen_runs = dict(zip(qwen_formats, measured))
        print(f"import floor: python -c 'import {', '.join(modules)}'\n"
              f"  best {floor:.3f} s, median {floor_med:.3f} s, cpu {floor_cpu:.3f} s "
              f"({args.runs} runs, in turn with the qwen builds; {load()})")
        full, _, full_cpu = qwen_runs[FULL]
        print(f"  without matplotlib, which no build imports: python -c 'import {', '.join(lean)}'\n"
              f"  best {lean_floor:.3f} s, cpu {lean_cpu:.3f} s; against it build {qwen} --format {FULL}: "
              f"best {full / lean_floor:.2f} x, cpu {full_cpu / lean_cpu:.2f} x (no target)")
        for study in [qwen] if args.qwen_only else studies():
            # qwen draws charts: also with md's charts only, and with none (json)
            for formats in qwen_formats if study == qwen else (FULL,):
                t, med, cpu = qwen_runs[formats] if study == qwen else wall(build(study, formats), args.runs)
                tag = " (no charts)" if formats == NO_CHARTS else ""
                line = (f"build {study} --format {formats}{tag}: best {t:.3f} s = {t / floor:.2f} x"
                        f" floor (median {med:.3f} s = {med / floor_med:.2f} x; cpu {cpu:.3f} s ="
                        f" {cpu / floor_cpu:.2f} x)")
                if study == qwen and formats == FULL:
                    passed, frugal = t <= 1.5 * floor, cpu <= 1.6 * floor_cpu
                    ok &= passed and frugal
                    line += (f"  [target best <= 1.5 x best floor: {verdict(passed)}; "
                             f"cpu <= 1.6 x floor cpu: {verdict(frugal)}]")
                line += f"  ({load()})"
                print(line)
        t, med, cpu = served
        passed = t <= 1.2 * floor
        ok &= passed
        print(f"{' '.join(serve[2:])}: best {t:.3f} s = {t / floor:.2f} x floor (median {med:.3f} s"
              f" = {med / floor_med:.2f} x; cpu {cpu:.3f} s = {cpu / floor_cpu:.2f} x)"
              f"  [target best <= 1.2 x best floor: {verdict(passed)}]  ({load()})")
    s = child("sweep")
    fast, small = s["seconds"] < 2, s["rss_mib"] < 500
    ok &= fast and small
    print(f"ledger sweep: {s['points']:,} points x {s['ops']} ops on {s['device']}: "
          f"{s['seconds']:.3f} s = {s['points'] / s['seconds']:,.0f} points/s  "
          f"[target < 2 s: {verdict(fast)}]")
    growth = s["seconds"] / s["tenth_seconds"]
    print(f"  linear in points: {s['tenth_points']:,} points {s['tenth_seconds']:.3f} s, "
          f"{s['points']:,} points {s['seconds']:.3f} s = {growth:.1f} x the time for 10 x the "
          f"points ({'at most linear' if growth <= 11 else 'WORSE than linear'})")
    print(f"peak memory (process maxrss): {s['rss_mib']:.0f} MiB, of which the sweep added "
          f"{s['rss_growth_mib']:.0f} MiB  [target < 500 MB: {verdict(small)}]")
    c = child("compile")
    shallow, deep = c["24"]["seconds"], c["1000"]["seconds"]
    flat = deep <= 1.1 * shallow
    ok &= flat
    print(f"compile (lower + verify + lambdify), median of 7: 24 layers {shallow * 1e3:.1f} ms, "
          f"1000 layers {deep * 1e3:.1f} ms = {deep / shallow:.3f} x; ops {c['24']['ops']} "
          f"and {c['1000']['ops']}  [target <= 1.10 x: {verdict(flat)}]")
    print("all targets met" if ok else "some targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
