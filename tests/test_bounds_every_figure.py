"""Acceptance (issue 25): every figure a shipped study prints as a bound (≤ tokens/s, ≥ time)
is at or below the time of every variant and convention of the same point.

The figures are read from each spec's committed report JSON (the summary, and the serving
section where the study has one); each point is re-costed here under every variant (unfused,
fused, flash, ideal) and every combination of conventions, by the overlapped step rule,
max(Σ FLOPs / the peak of each op's unit, Σ bytes / bandwidth), which no kernel beats, with
the collectives of the deployment the study's `parallel` block describes, taken as max(kernels,
collectives): an engine may overlap them, whatever `parallel.overlap` says."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from rooflinec.model import passes
from rooflinec.spec import load as spec
from rooflinec.base.errors import DeviceError
from rooflinec.model.lower import Conventions
from rooflinec.model.symbols import B, S
from rooflinec.cost.workbench import Workbench

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml"))
CHOICES = {"causal_halving": (True, False), "logits": ("last", "all"), "qkv": ("fused", "separate"),
           "bias": ("in_gemm", "separate_kernel")}
DECODE_CHOICES = ("qkv", "bias")   # causal masking and logits change only the prefill


def conventions(model, phase: str):
    keys = list(CHOICES) if phase == "prefill" else list(DECODE_CHOICES)
    mla = ("absorbed", "naive") if getattr(model, "mla", None) is not None and phase == "decode" else ("absorbed",)
    for combo in itertools.product(*(CHOICES[k] for k in keys), mla):
        yield Conventions(**dict(zip(keys, combo[:-1])), mla=combo[-1])


def fastest(bench, device, phase: str, batch: int, context: int) -> tuple[float, str]:
    """The least overlapped step time of any variant and convention at (batch, context)."""
    best = (float("inf"), "")
    for conv in conventions(bench.model, phase):
        for variant in passes.VARIANTS:
            try:
                prog = bench.program(phase, variant, device, conventions=conv)
                ledger = bench.ledger(prog, device, {B: batch, S: context})
            except DeviceError:          # a variant this device cannot run (flash: no SRAM)
                continue
            compute = sum(r.flops / r.unit_peak for r in ledger.rows)
            t = max(compute, ledger.bytes / device.bandwidth)
            # the deployment's collectives, as the study's parallel block states them
            comm = sum(c.time for c in bench.communication(prog, device, {B: batch, S: context}))
            t = max(t, comm)             # an engine may overlap them: the least a schedule reaches
            best = min(best, (t, f"{variant}, {conv}"))
    return best


def printed_bounds(report: dict):
    """(device, phase, batch, context, printed time, where) for every figure printed with ≤ or ≥."""
    for d in report["summary"]["devices"]:
        if d.get("lacks"):
            continue
        for c in d["decode"]:
            yield d["device"], "decode", 1, c["context"], c["batch_1"]["time_s"], "summary, batch 1"
            if c["at_max_batch"]:
                yield (d["device"], "decode", c["max_batch"], c["context"], c["at_max_batch"]["time_s"],
                       "summary, largest batch")
        for p in d["prefill"]:
            yield d["device"], "prefill", 1, p["prompt"], p["time_s"], "summary, TTFT"
    for section in report["sections"]:
        if section["kind"] != "serving":
            continue
        for row in section["steps"]:
            for d in row["devices"]:
                yield d["device"], "decode", row["batch"], row["context"], d["time_s"], "serving steps"
        for row in section["prefill"]:
            for d in row["devices"]:
                yield d["device"], "prefill", 1, row["prompt"], d["time_s"], "serving TTFT"


@pytest.mark.slow
@pytest.mark.parametrize("study", SPECS, ids=lambda p: p.stem)
def test_every_printed_bound_is_below_every_variant_and_convention(study):
    report = json.loads((ROOT / "reports" / f"{study.stem}.json").read_text(encoding="utf-8"))
    if report.get("model") is None or not report["summary"].get("devices"):
        pytest.skip(f"{study.name} prints no serving bound")
    bench = Workbench(spec.load_study(str(study)))
    devices = {d.key: d for d in bench.devices}
    seen, over = 0, []
    for key, phase, batch, context, time_s, where in printed_bounds(report):
        least, which = fastest(bench, devices[key], phase, batch, context)
        seen += 1
        if time_s > least * (1 + 1e-9):
            over.append(f"{where}: {key} {phase} B={batch} S={context}: printed {time_s:.6g} s, "
                        f"{which} takes {least:.6g} s")
    if not seen:
        pytest.skip(f"{study.name} prints no serving bound (no device has the figures)")
    assert over == []
