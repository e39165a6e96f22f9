"""The live calculator an HTML report carries: the summary's cost terms as JavaScript.

A step's two roofline terms (`efficiency.step_terms`: the serving section's rule, step bound,
overlapped) are sympy expressions; here they are kept in the workload (B, S) and in the
storage formats' bytes per element (b_w, b_kv, and f_dq, the dequantisation FLOPs), and
printed by sympy's JavaScript printer (`sympy.printing.jscode`), so the page evaluates the
same formulas the report did, at any batch, context, format, device and tensor-parallel degree
the report covers. Memory fit travels as numbers: parameters and KV-cache elements one device
holds per tp, which the page multiplies by the chosen formats' bytes, as the workbench does.
"""

from __future__ import annotations

import math
import re

import sympy as sp
from sympy.printing.jscode import jscode

from rooflinec.cost import collectives as C
from rooflinec.cost import kvcache
from rooflinec.model import quant, window
from rooflinec.cost.derive import exact
from rooflinec.cost.efficiency import step_terms
from rooflinec.base.roofline import transfer_time
from rooflinec.model.lower import LEAST_WORK
from rooflinec.base.errors import DeviceError
from rooflinec.spec.validate import schema
from rooflinec.model.symbols import B, S

FREE = (quant.b_w, quant.b_kv, quant.f_dq)   # left in the expressions: the formats' figures
PHASES = ("decode", "prefill")


def formats() -> list[dict]:
    """Every storage format a study's quantization accepts, with its bytes per element."""
    names = schema("study")["$defs"]["storage"]["enum"]
    return [{"name": n, "bytes": float(quant.byte_value(n))} for n in names]


ARGS = (B, S, *FREE)                          # the page's functions take these, in this order
# what the printer may write: numbers, the arguments, Math's functions, arithmetic
JS = re.compile(r"^(?:[0-9.e]+|B|S|b_w|b_kv|f_dq|Math\.(?:pow|min|max|ceil|floor|sqrt)|[-+*/(), ])*$")
SLIDER = (7, 20)                              # the context and prompt sliders: 2^7 to 2^20 tokens


class NotPrintable(ValueError):
    """A term the page cannot evaluate (a symbol left free that is not one of ARGS)."""


def _js(expr: sp.Expr) -> str:
    """`expr` as a JavaScript expression over ARGS; refused if anything else is left in it,
    so the script holds arithmetic only."""
    extra = expr.free_symbols - set(ARGS)
    if extra:
        raise NotPrintable(f"free symbols {sorted(map(str, extra))}")
    text = jscode(expr, strict=False)
    if not JS.match(text):
        raise NotPrintable(f"printed as {text[:80]!r}")
    return text


def _step(tokens: int) -> int:
    """The slider position (a power of two) nearest `tokens`."""
    return min(max(round(math.log2(tokens)), SLIDER[0]), SLIDER[1])


def _terms(bench, phase: str, variant: str, device, tp: int) -> dict:
    """One step's FLOPs, bytes, roofline terms and collectives' time as JavaScript in B, S,
    b_w, b_kv, f_dq, under the bound's conventions (lower.LEAST_WORK), as the summary's."""
    program = quant.retype(bench.program(phase, variant, device, tp, conventions=LEAST_WORK),
                           ("weights", "kv_cache"))
    values = {s: v for s, v in bench.values.items() if s not in FREE}
    terms = step_terms(program, values,
                       lambda op: exact(bench.peak(device, op.unit, bench.op_dtype(device, op),
                                                   f"the {phase} op '{op.name}'")),
                       device.bandwidth)
    return {**{name: _js(getattr(terms, name)) for name in ("flops", "bytes", "compute", "memory")},
            "comm": _js(_comm(bench, program, device, values))}


def _comm(bench, program, device, values) -> sp.Expr:
    """The bound's time of the step's collectives (Workbench.communication at C.LEAST, the
    summary's), kept in the workload's symbols: each launch's least volume over the link,
    plus one latency."""
    total = sp.Integer(0)
    for c in program.collectives:
        link = bench.link(device, c.span, f"the {c.kind.replace('_', '-')} '{c.name}'")
        count = sp.sympify(c.repeat).xreplace(program.bindings).xreplace(values)
        volume = sp.sympify(c.volume_under(C.LEAST)).xreplace(program.bindings).xreplace(values)
        total += count * (transfer_time(volume, sp.nsimplify(link.bandwidth))
                          + c.steps_under(C.LEAST) * sp.nsimplify(link.latency or 0))
    return total


def _memory(bench, tp: int) -> dict:
    """Per device at `tp`: parameters, KV-cache elements per token (every layer at the full
    context) and, for windowed layers, what each keeps per token and how many the device holds."""
    model, p = bench.model, bench.parallel
    local = kvcache._windowed_on_device(model, p.pp)
    dep = bench.deployment(tp)
    if _experts_apart(bench):   # routed experts at the study's format, the rest at the page's b_w
        routed = dep.params_per_device(True)
        return {"params": dep.params_per_device(False),
                "experts_bytes": math.ceil(routed * quant.byte_value(dep.experts_format)),
                **_kv_memory(model, p, tp, local)}
    return {"params": dep.params_per_device(), **_kv_memory(model, p, tp, local)}


def _experts_apart(bench) -> bool:
    """Whether the study stores the routed experts in a format of their own."""
    return quant.EXPERTS in bench.study.quantization and getattr(bench.model, "moe", None) is not None


def _kv_memory(model, p, tp: int, local) -> dict:
    """KV-cache elements per token on one device, and what windowed layers keep."""
    return {"kv_token": float(kvcache.per_token(model, 1, tp, p.pp, p.ep)),
            "kv_layer": float(kvcache._value(kvcache._per_layer(model), model, 1, tp, 1, p.ep)) if local else 0.0,
            "local": local, "window": int(model.window or 0) if local else 0}


def tps(report: dict, bench) -> list[int]:
    """The study's tp and those its tensor-parallel view tried."""
    split = next((s for s in report["sections"] if s["kind"] == "parallel_view"), None)
    return sorted({bench.parallel.tp, *(split["tps"] if split else ())})


def calculator(bench, report: dict) -> dict | None:
    """What the page's script needs; None when the report has no summary to calculate."""
    summary = report.get("summary")
    if not summary or bench.model is None:
        return None
    variant = summary["variant"]
    devices, terms, degrees = [], {}, tps(report, bench)
    for dev in bench.devices:
        try:
            steps = {str(tp): {phase: _terms(bench, phase, variant, dev, tp) for phase in PHASES}
                     for tp in degrees}
        except (DeviceError, NotPrintable):   # the summary says why a device is not evaluated
            continue
        devices.append({"key": dev.key, "name": dev.name, "capacity": dev.capacity,
                        "peak": float(bench.peak(dev, "matrix")), "bandwidth": dev.bandwidth})
        terms[dev.key] = steps
    if not devices:
        return None
    first = next(d for d in summary["devices"] if not d["lacks"])
    context, prompt = first["decode"][0]["context"], first["prefill"][0]["prompt"]
    data = {"variant": variant, "dtype": bench.dtype, "tps": degrees, "tp": bench.parallel.tp,
            "ranks": bench.parallel.attention_dp,   # attention-DP ranks: each steps its own B sequences
            "memory": {str(tp): _memory(bench, tp) for tp in degrees},
            "formats": [dict(f, f_dq=quant.dequant_flops(f["name"], bench.dtype)) for f in formats()],
            **({"experts": bench.storage(quant.EXPERTS)} if _experts_apart(bench) else {}),
            "weights": bench.storage("weights"), "kv_cache": bench.storage("kv_cache"),
            "devices": devices, "context": context, "prompt": prompt}
    return {"data": data, "terms": terms, "sliders": {"context": _step(context), "prompt": _step(prompt)}}
