"""`serve` over lists: one row per (device, tp, batch), and the tokens/s-against-batch chart.

Each configuration is one serving section (`quick.serving_section`) and the calibrated
predictions beside it (`calibrated`); this module only lays them out. Tokens/s per user is
one sequence's rate, 1 / step (each sequence gets a token per step); per GPU is the group's
tokens/s over the devices that step together, so configurations of different sizes compare.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rooflinec.base.errors import one_line
from rooflinec.base.quantities import gib, seconds, sig
from rooflinec.cli import calibrated
from rooflinec.render import charts


@dataclass
class Configuration:
    device: object                 # spec.Device
    tp: int
    section: dict                  # the serving section at this tp
    predicted: dict                # batch -> calibrated.predict's dict
    note: str                      # where the calibrated figures come from, or why there are none
    smallest: dict | None          # {"tp", "tried"} when not one sequence fits at this tp
    drawn: list = field(default_factory=list)   # (batch, tokens/s of the group, fits) for the chart
    crossing: str = ""             # where the tp group leaves its scale-up domain: the link it takes
    assumed: str = ""              # the requests the calibrated prediction assumes (quick.workload)

    @property
    def gpus(self) -> int:
        group = self.section.get("deployment")
        return group["gpus"] if group else 1


def rates(tokens_per_s: float, batch: int, section: dict) -> tuple[float, float]:
    """(per user, per GPU) from a group's tokens/s at `batch`: `batch` is one attention-DP
    rank's, so the group steps batch x attention_dp sequences over its GPUs."""
    group = section.get("deployment") or {}
    return tokens_per_s / (batch * group.get("attention_dp", 1)), tokens_per_s / group.get("gpus", 1)


def calibrated_cells(p: dict | None) -> tuple[str, str]:
    """'TPOT (interval)' and 'TTFT (interval)' cells of one prediction; '—' where there is none."""
    if not p or "why" in p:
        return "—", "—"
    band = p.get("tpot_interval_s")
    tpot = seconds(p["tpot_s"]) + (f" ({seconds(band[0])}–{seconds(band[1])})" if band else "")
    band = p.get("ttft_interval_s")
    return tpot, seconds(p["ttft_s"]) + (f" ({seconds(band[0])}–{seconds(band[1])})" if band else "")


def does_not_fit(c: Configuration) -> str:
    """Why no batch runs at this configuration, naming the smallest tp that would fit."""
    m = c.section["memory"][0]
    what = "the weights do not fit" if not m["weights_fit"] else "not one sequence's KV cache fits"
    if c.smallest is None:
        return what
    tp = c.smallest["tp"]
    return (f"{what}: the smallest tp that fits one sequence is {tp}" if tp is not None
            else f"{what} at any tp of {', '.join(map(str, c.smallest['tried']))}")


HEAD = ("device", "tp", "GPUs", "batch", "tokens/s per user", "tokens/s per GPU", "step", "bound",
        "TTFT ≥", "fits")


def calibrated_head(points) -> tuple:
    """The calibrated columns' headers for these predictions (predict's dicts): TTFT says
    '(80%)' only where an interval is printed beside it (the shipped steady-state file gives none)."""
    band = " (80%)" if any("ttft_interval_s" in p for p in points) else ""
    return ("calibrated TPOT (80%)", "predicted TTFT" + band)


def caveats(c: Configuration) -> list[str]:
    """The lines naming the band the intervals take (a new model's is wider), the batches whose
    TTFT point lies outside its band (and why), those whose prediction extrapolates the calibration's measured runs, and those whose requests queue
    because the KV cache holds fewer at once."""
    engine = next((p.get("engine") for p in c.predicted.values() if "engine" in p), None)
    bands = sorted({p["interval_band"] for p in c.predicted.values() if p.get("interval_band")})
    lines = [f"80% interval: {'; '.join(bands)}" if bands else "",
             calibrated.outside(c.predicted), calibrated.extrapolation(c.predicted, engine),
             calibrated.queueing(c.predicted)]
    return [line for line in lines if line]


def _rows(c: Configuration) -> list[tuple]:
    dev, prefill = c.section["crossovers"][0]["devices"][0], c.section["prefill"][0]["devices"][0]
    ttft = seconds(prefill["time_s"])
    rows, at = [], [(row["batch"], row["devices"][0]) for row in c.section["steps"]]
    if dev["at_max_batch"] and dev["max_batch"] not in dict(at):
        at.append((dev["max_batch"], {**dev["at_max_batch"], "fits": True, "largest": True}))
    for batch, d in at:
        user, gpu = rates(d["tokens_per_s"], batch, c.section)
        label = f"{batch:,}" + (" (largest)" if d.get("largest") else "")
        rows.append((c.device.key, str(c.tp), str(c.gpus), label, sig(user), sig(gpu), seconds(d["time_s"]),
                     d["bound"], ttft, "yes" if d["fits"] else "no", *calibrated_cells(c.predicted.get(batch))))
    return rows


def text(model_name: str, setup: str, context: int, prompt: int, configs: list[Configuration]) -> str:
    """The configurations as one table, then what does not fit and where the predictions come from."""
    variant = configs[0].section.get("variant")
    lines = [one_line(f"{model_name}, {setup}, decode at context {context:,}, time to first token for a "
                      f"prompt of {prompt:,}: roofline lower bounds ({variant} variant; tokens/s ≤, "
                      f"TTFT ≥), one row per configuration")]
    rows = [HEAD + calibrated_head([p for c in configs for p in c.predicted.values()])]
    for c in configs:
        rows += _rows(c)
    lines += ["  " + line for line in columns(rows).splitlines()]
    for c in configs:
        if c.section["crossovers"][0]["devices"][0]["max_batch"] < 1:
            lines.append(f"{c.device.key} at tp {c.tp}: {does_not_fit(c)}")
        else:
            top = c.section["crossovers"][0]["devices"][0]["max_batch"]
            lines.append(f"{c.device.key} at tp {c.tp}: weights {gib(c.section['weight_bytes'])} per GPU; "
                         f"the largest batch that fits at context {context:,} is {top:,}")
        if c.crossing:
            lines.append(f"{c.device.key} at tp {c.tp}: {c.crossing}")
    for said in dict.fromkeys(c.section.get("routing") or c.section.get("expected") or "" for c in configs):
        if said:
            lines.append(one_line(f"routed experts: {said}"))
    for note in dict.fromkeys(f"{c.device.key}: {c.note}" for c in configs):
        lines.append(one_line(note))
    for assumed in dict.fromkeys(c.assumed for c in configs if c.assumed):
        lines.append(one_line(assumed))
    for c in configs:
        lines += [one_line(f"{c.device.key} at tp {c.tp}: {line}") for line in caveats(c)]
    return "\n".join(lines) + "\n"


def columns(rows) -> str:
    """Aligned columns; a spec's text with its control characters spelled out (one_line), so a
    name cannot move the cursor or break a row."""
    rows = [[one_line(str(x)) for x in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() + "\n" for r in rows)


def chart(model_name: str, context: int, configs: list[Configuration]) -> str:
    """Decode tokens/s per GPU against batch: a colour per tp, a line style per device, faint
    where the weights and KV cache do not fit (charts.throughput draws it)."""
    devices = list(dict.fromkeys(c.device.key for c in configs))
    lines = [{"label": f"tp {c.tp}", "group": devices.index(c.device.key),
              "x": [b for b, _, _ in c.drawn], "y": [t / c.gpus for _, t, _ in c.drawn],
              "fits": [f for _, _, f in c.drawn], "crossing": None} for c in configs]
    return charts.draw({"kind": "throughput", "lines": lines, "groups": devices,
                        "title": one_line(f"{model_name}: decode tokens/s per GPU (bound), context {context:,}"),
                        "xlabel": "batch B", "ylabel": "tokens/s per GPU"})
