"""rooflinec trace benchmark: read a 200 MB profiler trace in under 30 s with bounded memory.

    python bench/trace_bench.py              # from the repository root; writes a temporary trace
    python bench/trace_bench.py --mb 400     # a larger one: the peak memory should not grow

Not a test: timings depend on the machine. It writes a synthetic Kineto trace of `--mb` MB of
JSON (gzipped, as torch.profiler's tensorboard handler writes them): ProfilerStep annotations
on the CPU and GPU timelines and, per kernel, its cpu_op, its runtime launch and the kernel,
with kernel names as cuBLAS, FlashAttention and PyTorch write them. It runs `trace.read` in a
fresh process and prints the wall time and that process's peak RSS, against the targets
(PASS/FAIL; exit status 1 if either is missed), and the CPU time beside the wall time: on a
machine other work shares, the wall time is the CPU time plus the waits. Targets: under 30 s; peak RSS under 300 MB,
and (with two sizes, `--mb 200 --mb 400`) the larger trace's peak within 1.25x the smaller's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
         "execute_segment_k_off_kernel__5x_cublas",
         "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, "
         "128, 4, false, false, cutlass::bfloat16_t> >(pytorch_flash::Flash_fwd_params)",
         "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::"
         "BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>)",
         "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps"
         "<float, float, float, float>, unsigned int, float, 4> >")
PER_STEP = 20_000     # kernels per profiler step


def write(path: str, megabytes: int) -> int:
    """A gzipped trace of about `megabytes` MB of JSON; returns its kernel count."""
    target, written, kernels, ts = megabytes * 10**6, 0, 0, 0.0
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB '
                'HBM3"}], "traceEvents": [\n')
        step = 0
        while written < target:
            step += 1
            start = ts
            events = []
            for i in range(PER_STEP):
                kernels += 1
                name = NAMES[i % len(NAMES)]
                events += [
                    {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1,
                     "ts": ts, "dur": 9.0, "args": {"External id": kernels, "Input Dims":
                                                    [[16, 559, 1024], [1024, 1024], []]}},
                    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                     "tid": 1, "ts": ts + 1, "dur": 4.0, "args": {"correlation": kernels}},
                    {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                     "ts": ts + 5, "dur": 3.5, "args": {"correlation": kernels, "device": 0,
                                                        "stream": 7, "grid": [132, 1, 1],
                                                        "block": [384, 1, 1]}}]
                ts += 10
            for cat in ("user_annotation", "gpu_user_annotation"):
                events.append({"ph": "X", "cat": cat, "name": f"ProfilerStep#{step}", "pid": 1,
                               "tid": 1, "ts": start, "dur": ts - start + 5})
            text = ",\n".join(json.dumps(e) for e in events)
            f.write(("" if step == 1 else ",\n") + text)
            written += len(text)
        f.write("\n]}\n")
    return kernels


READ = """\
import resource, sys, time
from rooflinec.measure import trace
t, c = time.perf_counter(), time.process_time()
read = trace.read(sys.argv[1])
print(time.perf_counter() - t, time.process_time() - c, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
      sum(read.kernels.calls.values()))
"""


def measure(path: str) -> tuple[float, float, int, int]:
    done = subprocess.run([sys.executable, "-c", READ, path], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
    seconds, cpu, rss, kernels = done.stdout.split()
    return float(seconds), float(cpu), int(rss), int(kernels)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, action="append", help="MB of JSON (default: 200)")
    sizes = parser.parse_args().mb or [200]
    ok, peaks = True, []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes:
            path = os.path.join(tmp, f"trace-{mb}.json.gz")
            kernels = write(path, mb)
            seconds, cpu, rss, last_step = measure(path)
            peaks.append(rss)
            fast, small = seconds < 30, rss < 300 * 2**20
            ok &= fast and small
            print(f"{mb} MB of JSON ({os.path.getsize(path) / 1e6:.1f} MB gzipped, {kernels:,} "
                  f"kernels; the last step's {last_step:,} read): {seconds:.1f} s ({cpu:.1f} s CPU) "
                  f"[{'PASS' if fast else 'FAIL'} < 30 s], peak RSS {rss / 2**20:.0f} MiB "
                  f"[{'PASS' if small else 'FAIL'} < 300 MiB]")
    if len(peaks) > 1:
        flat = max(peaks) <= 1.25 * min(peaks)
        ok &= flat
        print(f"peak RSS from {min(peaks) / 2**20:.0f} to {max(peaks) / 2**20:.0f} MiB over "
              f"{min(sizes)}..{max(sizes)} MB [{'PASS' if flat else 'FAIL'} within 1.25x]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
