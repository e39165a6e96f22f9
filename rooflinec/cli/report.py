"""A study becomes report data: the header every format shares plus one section per analysis."""

from __future__ import annotations

import hashlib
import os

from rooflinec import analyses
from rooflinec.spec import catalog
from rooflinec.model import quant
from rooflinec.cli import calibrated, summary
from rooflinec.cost import calculator
from rooflinec.model import symbols as sym
from rooflinec.model import symbol_table
from rooflinec.model.lower import PHASES
from rooflinec.spec.load import Study, referenced_models
from rooflinec.base.roofline import ridge
from rooflinec.cost.workbench import Workbench
from rooflinec.spec.options import parse

FORMAT = "rooflinec-report"
VERSION = 1


def _device(dev, dtype: str) -> dict:
    tensor, vector = dev.peak("matrix", dtype), dev.peak("vector", dtype)
    return {
        "key": dev.key, "name": dev.name, "year": dev.year, "tensor_peak": tensor,
        "vector_peak": vector, "vector_dtype": dev.vector_dtype(dtype),
        "bandwidth": dev.bandwidth, "capacity": dev.capacity,
        "ridge_matrix": ridge(tensor, dev.bandwidth),
        "ridge_vector": ridge(vector, dev.bandwidth),
        "sm_count": dev.sm_count, "sram_per_sm": dev.sram_per_sm, "source": dev.source,
        "notes": dev.notes,
    }


def _model(m) -> dict:
    return {
        "key": m.key, "name": m.name, "d_model": m.d_model, "n_layers": m.n_layers,
        "n_heads": m.n_heads, "n_kv_heads": m.n_kv_heads, "head_dim": m.head_dim,
        "mlp": m.mlp_kind, "d_ff": m.d_ff, "vocab": m.vocab, "norm": m.norm_kind,
        "block": m.block, "tied_embeddings": m.tied_embeddings, "source": m.source, "notes": m.notes,
        "dimensions": dict(m.dimensions), "operators": [d.name for d in m.operators],
        "moe": _routing(m.moe) if getattr(m, "moe", None) else None,
    }


def _routing(moe) -> dict:
    """What the expert weight traffic assumes: uniform routing over E/rho hot experts."""
    return {"experts": moe.experts, "top_k": moe.top_k, "imbalance": moe.imbalance,
            "hot": moe.experts / moe.imbalance if moe.imbalance != 1 else moe.experts}


def _sweep(study: Study, key: str) -> list:
    """The sweep analysis's `key` (its dtypes, its storage formats) as written; [] without."""
    return (study.analyses.get("sweep") or {}).get(key) or []


def _weight_only(study: Study) -> bool:
    """Whether the study stores weights (its quantization, a sweep's formats) in a format
    the compute dtype's peak does not run on: its GEMMs then pay dequantisation FLOPs."""
    formats = [study.quantization, *_sweep(study, "formats")]
    return any(quant.dequant_flops(f[cls], study.dtype) for f in formats for cls in ("weights", quant.EXPERTS)
               if cls in f)


def _symbols(study: Study, bench: Workbench) -> list[dict]:
    """The symbol table: the alphabet, then every symbol beyond it that the study's programs
    carry (a model's blocks and declared dimensions, the storage formats' b_w, b_kv, f_dq),
    each with its meaning and with its value where it has one throughout the study."""
    table = [{"name": s.name, "meaning": m} for s, m in sym.DESCRIPTIONS.items()]
    if study.model is None:
        return table
    meanings, fixed = symbol_table.descriptions(), _fixed_values(study, bench)
    for s in _carried(study, bench):
        table.append({"name": s.name, "meaning": meanings.get(s, "declared by the model spec"),
                      **({"value": fixed[s]} if s in fixed else {})})
    return table


def _carried(study: Study, bench: Workbench) -> tuple:
    """The symbols beyond the alphabet the study's programs carry, a sweep's storage formats
    retyping them included, in order of first appearance."""
    swept = tuple(dict.fromkeys(cls for f in _sweep(study, "formats") for cls in f))
    programs = [quant.retype(bench.program(phase), swept) for phase in PHASES]
    return tuple(dict.fromkeys(s for p in programs for s in p.symbols))


def _fixed_values(study: Study, bench: Workbench) -> dict:
    """The symbols' values that hold at every compute dtype and storage format the study
    evaluates (a sweep's dtypes and formats; the study's own otherwise)."""
    points = [bench.values_for(dtype, formats) for dtype in _sweep(study, "dtype") or [None]
              for formats in _sweep(study, "formats") or [None]]
    return {s: v for s, v in points[0].items() if all(p.get(s) == v for p in points)}


def _activations(bench: Workbench) -> dict:
    """b, the activations' bytes per element, their format where it is not the dtype, and the
    weights' and KV cache's formats (with bytes per element) where theirs is not."""
    stored = bench.storage(quant.ACTIVATIONS)
    others = {cls: {"format": bench.storage(cls), "bytes_per_element": bench.values[symbol]}
              for cls, symbol in quant.CLASS_SYMBOLS.items() if bench.storage(cls) != bench.dtype
              and (cls != quant.EXPERTS or cls in bench.study.quantization)}   # else the weights' format
    return {"bytes_per_element": bench.values[sym.b],
            **({"activations": stored} if stored != bench.dtype else {}),
            **({"stored": others} if others else {})}


def _inputs(study: Study) -> list[dict]:
    """The spec files the report was built from, relative to the study's folder (a catalog
    file as catalog/...), with the SHA-256 of their bytes: reports that state the same inputs
    came from the same specs."""
    root = os.path.dirname(study.file)
    files = [study.file, *([study.model.file] if study.model else []), *referenced_models(study),
             *(d.file for d in study.devices)]
    inputs = []
    for file in dict.fromkeys(files):
        with open(file, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        shown = catalog.shown(file) or os.path.relpath(file, root or ".").replace(os.sep, "/")
        inputs.append({"file": shown, "sha256": digest})
    return inputs


def build(study: Study, on_section=None) -> dict:
    """The report of a study. `on_section(report, index, section)` hears of each section as
    soon as it is evaluated (the report then holds the header and the sections so far)."""
    bench = Workbench(study)
    conv = bench.conventions
    report = {
        "format": FORMAT, "version": VERSION, "title": study.title, "study": study.stem,
        "inputs": _inputs(study),
        "model": _model(study.model) if study.model else None, "dtype": study.dtype,
        **_activations(bench),
        "devices": [_device(d, study.dtype) for d in study.devices],
        "conventions": [{"phase": p, "key": k, "choice": v} for p in PHASES for k, v in conv.stated(p)],
        "dequant_flops": quant.DEQUANT_FLOPS if _weight_only(study) else None,
        "symbols": [],   # filled in once the analyses have checked the study
        "sections": [],
    }

    def heard(index: int, section: dict) -> None:
        report["sections"].append(section)
        on_section(report, index, section)

    sections = analyses.run(study, heard if on_section else None, bench)
    report["sections"] = sections
    report["symbols"] = _symbols(study, bench)
    report["summary"] = _summary(study, bench, report) if study.model else None
    report["calculator"] = calculator.calculator(bench, report)   # HTML only (render.to_json)
    return report


def _summary(study: Study, bench: Workbench, report: dict) -> dict:
    """The answers the report opens with, from its serving section (or one run for them)."""
    shown = next((s for s in report["sections"] if s["kind"] == "serving"), None)
    options = parse("serving", summary.serving_options(study))
    section = shown or analyses.evaluate(bench, "serving", options, empty=True)
    link = {"kind": "serving", "title": shown["title"]} if shown else None
    split = next((s for s in report["sections"] if s["kind"] == "parallel_view"), None)
    answers = summary.answers(section, report["devices"], link, options.variant, split)
    for row, dev in zip(answers["devices"], study.devices):
        if not row["lacks"]:
            row["calibrated"] = _calibrated(study, bench, dev, row)
    return answers


def _calibrated(study: Study, bench: Workbench, device, row: dict) -> dict:
    """The shipped calibration's decode predictions beside one device's bounds, at batch 1 and
    at the largest batch that fits, for requests of S/2 prompt tokens generating S (mean
    context S); or a note saying why there are none."""
    choice = calibrated.choose(None, device.key, None)
    if isinstance(choice, str):
        return {"note": choice, "points": []}
    p = bench.parallel
    if p.pp > 1:
        return {"note": "no calibrated prediction: the serving model steps one pipeline stage", "points": []}
    layout = {"attention_dp": p.attention_dp, "ep": p.ep, "moe_tp": p.moe_tp or None}
    weights, kv = bench.storage("weights"), bench.storage("kv_cache")
    points = []
    for c in row["decode"]:
        for batch in dict.fromkeys((1, c["max_batch"]) if c["max_batch"] >= 1 else ()):
            run = calibrated.run(study.model, device, weights, kv, p.tp, c["context"] // 2, c["context"], batch,
                                 layout, bench.storage(quant.EXPERTS))
            points.append({"context": c["context"], "batch": batch, **calibrated.predict(choice, run)})
    return {"note": choice.says(command=False), "engine": choice.engine, "points": points}
