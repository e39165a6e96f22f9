"""The answers a model report opens with, and `rooflinec serve` prints: one owner.

Per device: decode tokens/s at batch 1 and at the largest batch that fits, time to first
token for each prompt, memory fit, what bounds each, and the headline intensities against
the ridge. Everything is read from a serving section (the study's own, or one run with the
defaults below when the study has none), so the summary and that section cannot disagree.
"""

from __future__ import annotations
from rooflinec.base.errors import one_line
from rooflinec.base.quantities import gib, seconds, sig

# what the summary uses when a study has no serving analysis (and `serve`'s defaults)
CONTEXT, PROMPT = 4096, 2048


def serving_options(study) -> dict:
    """The serving options the summary reads: the study's own, else one context and prompt."""
    written = dict(study.analyses.get("serving") or {})
    if written:
        return written
    return {"batch": [1], "contexts": [CONTEXT], "prompts": [PROMPT]}


def _point(bound: dict | None, flops: float, nbytes: float, fits: bool = True,
           batch: int | None = None, gpus: int = 1, ranks: int = 1) -> dict | None:
    """One answer; a decode point (`batch`, one of `ranks` attention-DP ranks' batch) also per
    user (one sequence's rate, 1 / step: the group's tokens/s over its batch x ranks sequences)
    and per GPU (the group's tokens/s over the `gpus` that step together)."""
    if bound is None:
        return None
    rate = {k: bound[k] for k in ("tokens_per_s", "prompt_tokens_per_s") if k in bound}
    if batch is not None:
        rate.update(per_user=bound["tokens_per_s"] / (batch * ranks), per_gpu=bound["tokens_per_s"] / gpus)
    return {**rate, "time_s": bound["time_s"],
            "bound": bound["bound"], "intensity": flops / nbytes, "fits": fits}


ROOM = "tokens of KV cache"
WINDOWED = " at every layer's full context (windowed layers keep fewer, so more fit)"


def smallest_tp(split: dict | None, device: str) -> list[dict]:
    """From a report's tensor-parallel view: per workload, the smallest tp whose share fits
    `device` (None where none of those `tried` does)."""
    rows = next((d for d in (split or {}).get("devices", ()) if d["key"] == device), None)
    if rows is None:
        return []
    return [{**w, "tp": tp, "tried": split["tps"]} for w, tp in zip(split["workloads"], rows["smallest_tp"])]


def answers(section: dict, devices, link: dict | None = None, variant: str | None = None,
            split: dict | None = None) -> dict:
    """The summary of a serving section on `devices` (each with key, name and the tensor
    ridge); `link`: that section's kind and title in the report, None when it is not shown;
    `variant`: the one it was asked for (a section no device could evaluate does not say);
    `split`: the report's tensor-parallel view, whose smallest fitting tp the memory row names."""
    lacking = {row["device"]: row["why"] for row in section.get("lacking", ())}
    memory = {m["device"]: m for m in section.get("memory", ())}
    rows, group = [], section.get("deployment")
    gpus, ranks = (group["gpus"], group.get("attention_dp", 1)) if group else (1, 1)
    for dev in devices:
        if dev["key"] in lacking:
            rows.append({"device": dev["key"], "name": dev["name"], "lacks": lacking[dev["key"]]})
            continue
        m = memory[dev["key"]]
        room = m["kv_tokens"] if m["weights_fit"] else -1    # tokens of KV cache that fit
        decode = []
        for row in section["crossovers"]:
            d = next(c for c in row["devices"] if c["device"] == dev["key"])
            decode.append({"context": row["context"],
                           "batch_1": _point(d["at_one"], row["flops_one"], row["bytes_one"],
                                              room >= row["context"], 1, gpus, ranks),
                           "max_batch": d["max_batch"],
                           "at_max_batch": _point(d["at_max_batch"], *d.get("size_at_max", (1, 1)),
                                                  batch=max(d["max_batch"], 1), gpus=gpus, ranks=ranks),
                           "compute_bound_from": d["first"], "reachable": d["reachable"]})
        prefill = []
        for row in section["prefill"]:
            d = next(c for c in row["devices"] if c["device"] == dev["key"])
            prefill.append({"prompt": row["prompt"],
                            **_point(d, row["flops"], row["bytes"], room >= row["prompt"])})
        rows.append({"device": dev["key"], "name": dev["name"], "lacks": None,
                     "capacity": m["capacity"], "weights_fit": m["weights_fit"],
                     "kv_tokens": m["kv_tokens"], "ridge": dev["ridge_matrix"],
                     "smallest_tp": smallest_tp(split, dev["key"]),
                     "decode": decode, "prefill": prefill})
    return {"variant": section.get("variant", variant), "deployment": section.get("deployment"),
            "weight_bytes": section.get("weight_bytes"),
            "kv_per_token": section.get("kv_per_token"), "link": link, "devices": rows,
            "room": ROOM + (WINDOWED if section.get("kv_sequence_formula") is not None else "")}


def deployment(group: dict) -> str:
    """'tp 8', 'attention_dp 8, ep 8' or 'tp 2, ep 4': the degrees of a study's group of
    devices."""
    return ", ".join(f"{k} {group[k]}" for k in ("tp", "attention_dp", "moe_tp", "ep") if group.get(k, 1) > 1)


def text(model_name: str, dtype: str, summary: dict) -> str:
    """The summary as lines for a terminal (`rooflinec serve`)."""
    lines = []
    group = summary.get("deployment")
    for d in summary["devices"]:
        on = f"{group['gpus']} × {d['name']} ({d['device']}), {deployment(group)}" if group \
            else f"{d['name']} ({d['device']})"
        head = one_line(f"{model_name} on {on}, {dtype}"
                        + (f", {summary['variant']} variant" if summary['variant'] else ""))
        if d["lacks"]:
            lines += [head + ": not evaluated", f"  {d['lacks']}"]
            continue
        lines.append(head + ": roofline lower bounds")
        lines.append(f"  memory {gib(d['capacity'])}: weights {gib(summary['weight_bytes'])}, KV cache "
                     f"{gib(summary['kv_per_token'])} per token; "
                     + (f"room for {d['kv_tokens']:,} {summary['room']}" if d["weights_fit"]
                        else "the weights do not fit"))
        for p in d["prefill"]:
            lines.append(f"  time to first token ≥ {seconds(p['time_s'])} (prompt {p['prompt']:,}, "
                         f"batch 1), {p['bound']}-bound, intensity {p['intensity']:,.1f} FLOP/B "
                         f"(ridge {d['ridge']:,.1f})" + ("" if p["fits"] else "; does not fit in memory"))
        for c in d["decode"]:
            one = c["batch_1"]
            line = (f"  decode at context {c['context']:,}: ≤ {sig(one['tokens_per_s'])} tokens/s at "
                    f"batch 1 ({one['bound']}-bound, intensity {one['intensity']:,.2f} FLOP/B"
                    + ("" if one["fits"] else ", does not fit in memory") + ")")
            top = c["at_max_batch"]
            line += (f"; ≤ {sig(top['tokens_per_s'])} tokens/s at batch {c['max_batch']:,}, the "
                     f"largest that fits ({top['bound']}-bound)" if top else "; no batch fits")
            lines.append(line)
    return "\n".join(lines) + "\n"
