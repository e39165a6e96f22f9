"""The simulator's calibration file: `stepcost.Parameters` per (device, engine, kind of model),
per engine and pooled, as `rooflinec calibrate` writes it; read back with every problem located.

The kind of model (`models`: dense or moe) is a group of its own on one (device, engine): a
mixture of experts' steps run other kernels (fused-MoE grouped GEMMs, the router, the experts'
all-to-all), whose efficiencies a dense model's rows do not measure; fitting both kinds
together made the dense rows' TPOT error 5.8% -> 14.1% (bench/simulator.py). A group without
`models` (an older file) serves both kinds. The MoE compute fractions differ by engine more than
any layout explains: TensorRT-LLM's on the H100 (expert-parallel) fits at 1.0, SGLang's and vLLM's
on the H200 (tensor-sharded experts) at 0.13-0.20. Per GPU both layouts compute the same routed
rows per expert (tokens x k / experts) and FLOPs; the sharded one's GEMMs are moe_tp times
narrower, which costs a tile loop, not a factor of five. And TensorRT-LLM's MoE rows prefill at
most 1,024 tokens, a small share of their TTFT: holding its fraction at 0.5 raised the group's
soft-L1 loss by 7%, at 0.15 by 73% (its TTFT error 16% -> 33%), so it is above 0.5 but weakly
fixed there; the rest is the engines' grouped-GEMM kernels (block-fp8 Triton on SGLang and vLLM),
not modelled.

A (device, engine, kind) with no group of its own (a new model kind on a calibrated engine)
composes its parameters (`resolve`): the host-side times (per kernel, per request, the front
end's latency: the engine's software) from its engine's other group on that device, else the
engine's pooled fit; the compute fraction and the routed experts' bandwidth fraction (the
kernels' efficiencies) from the models of its kind on every calibrated device (`kinds`). Taking
both from the engine's rows of the other kind gave a MoE's fraction (0.15-0.23 on SGLang and
vLLM) to a dense model: leaving Llama-3.1-70B out, its TTFT error was 136%; composed, 37%
(bench/simulator.py). The fraction is of each device's own peak, and the calibrated devices'
tensor cores are one die (the H100's and H200's GH100); on one device a kind's rows can be one
engine's alone: with Llama-3.1-70B left out, dense models on the H200 are SGLang's 8B rows,
whose fit sits at a compute fraction of 1.0 (its TTFT carries an excess the model lacks), and
the 70B rows left out were off by TTFT 47.4%, TPOT 9.3%; with the kind's rows on every device,
27.1% and 6.8% (every other hold-out the same). This rule was chosen after seeing that figure,
so it is no longer a blind one. Files that hold a kind per device (written before this rule)
are read; those entries are not used. An engine with no rows at all takes the pooled fit (its
host times are unknown).

A file in the steady-state model's format (`calibrate.load`, no per_request_s) is read too,
its parameters taken as they are with no time per request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from importlib import resources

from rooflinec.base import yamlio
from rooflinec.base.errors import SpecError
from rooflinec.serving.stepcost import NAMES, Parameters
from rooflinec.serving import calibrate

FRACTIONS = ("bandwidth_fraction", "compute_fraction", "expert_bandwidth_fraction")
SHIPPED = "simulator-visible.yaml"
KIND = "simulator"
MODEL_KINDS = ("dense", "moe")
NO_TTFT_BAND = ("no TTFT interval: the calibration's TTFT band was measured with its fitted front-end latency, "
                "which --request-latency replaced")
TOP_KEYS = ("kind", "fitted_on", "method", "fitted", "default", "engines", "groups", "kinds", "intervals")


def model_kind(model) -> str:
    """A model spec's calibration group: moe where it has routed experts."""
    return "moe" if getattr(model, "moe", None) is not None else "dense"


def resolve(group: tuple, get) -> Parameters:
    """The parameters of `group` (device, engine, kind) by the module's rule, from `get(key)`:
    the Parameters fitted on the rows of one key or None, keys ("group", device, engine, kind),
    ("engine", engine), ("kind", None, kind) (every device's), ("default",)."""
    return resolved(group, get)[0]


def resolved(group: tuple, get) -> tuple[Parameters, str]:
    """`resolve`'s parameters and where they come from, in words for a reader."""
    device, engine, kind = group
    own = get(("group", device, engine, kind))
    if own is not None:
        return own, f"the calibration's ({device}, {engine}, {kind}) fit"
    other = next(k for k in MODEL_KINDS if k != kind)
    mate = get(("group", device, engine, other))
    host = mate or get(("engine", engine))
    if host is None:
        return get(("default",)), f"the pooled fit of every device and engine ({engine} not fitted)"
    hosts = (f"host times of ({device}, {engine}, {other})" if mate is not None
             else f"{engine}'s engine-wide host times ({device} not calibrated with {engine})")
    eff = get(("kind", None, kind))
    if eff is None:
        return host, f"{hosts}, its compute fraction too (no {kind} model calibrated)"
    return (replace(host, compute_fraction=eff.compute_fraction,
                    expert_bandwidth_fraction=eff.expert_bandwidth_fraction),
            f"composed: {hosts}, the compute fraction of {kind} models on every device")


@dataclass(frozen=True)
class Table:
    default: Parameters
    groups: dict               # (device, engine, kind) or, in older files, (device, engine) -> Parameters
    engines: dict              # engine -> Parameters
    fitted: tuple
    source: str = ""
    intervals: dict | None = None   # {level, tpot: [lo, hi], ttft: [lo, hi], by: {kind: {tpot, ttft}}}:
    #                                 log(predicted / measured) quantiles, pooled and per kind of hold-out;
    #                                 newer files: disaggregated: {tpot_log_residuals, ttft_log_residuals}
    kinds: dict = field(default_factory=dict)   # (None, kind) -> Parameters; older files: (device, kind) too, unused
    latency_set: bool = False   # every fit's front-end latency replaced (`with_request_latency`)

    @property
    def banded(self) -> tuple[str, ...]:
        """The figures the file's intervals describe: TPOT and TTFT, or TPOT alone once the
        front-end latency the TTFT band was measured with is replaced (NO_TTFT_BAND)."""
        return ("tpot",) if self.latency_set else ("ttft", "tpot")

    def of(self, device: str, engine: str, kind: str = "dense") -> Parameters:
        return self.fit(device, engine, kind)[0]

    def fit(self, device: str, engine: str, kind: str = "dense", shown: str | None = None) -> tuple[Parameters, str]:
        """The parameters for (device, engine, kind) by `resolve`'s rule, and which fit that is,
        said for a reader (`shown`: the engine's display name, else its key)."""
        if (device, engine) in self.groups:    # an older file's group serves both kinds
            return self.groups[device, engine], f"the calibration's ({device}, {shown or engine}) fit"
        params, where = resolved((device, engine, kind), self.get)
        return params, where.replace(f"{engine}'s engine-wide", f"{shown or engine}'s engine-wide")

    def with_request_latency(self, seconds: float) -> Table:
        """Every fit's front-end latency set to `seconds` (`simulate` and `plan --request-latency`:
        a harness without the measured rows' server front end). The fitted latency also carries
        TTFT the model lacks, so the TTFT it leaves is not validated, and the file's TTFT band
        (measured with the fitted latency) no longer applies: `banded`."""
        def each(fits: dict) -> dict:
            return {k: replace(v, request_latency_s=seconds) for k, v in fits.items()}
        return replace(self, default=replace(self.default, request_latency_s=seconds), groups=each(self.groups),
                       engines=each(self.engines), kinds=each(self.kinds), latency_set=True)

    def get(self, key: tuple) -> Parameters | None:
        """`resolve`'s lookup: the parameters this file holds for `key`, or None."""
        level, *names = key
        if level == "default":
            return self.default
        if level == "engine":
            return self.engines.get(names[0])
        return (self.groups if level == "group" else self.kinds).get(tuple(names))


def unbanded(banded: tuple) -> dict:
    """{ttft_no_interval: why} where the figures banded (`Table.banded`) leave TTFT out, else {}."""
    return {} if "ttft" in banded else {"ttft_no_interval": NO_TTFT_BAND}


def shipped() -> str:
    return str(resources.files("rooflinec.serving.calibrations").joinpath(SHIPPED))


def load(file: str) -> Table:
    doc = yamlio.load(file)
    d, problems = doc.data, []
    if not isinstance(d, dict) or "default" not in d:
        raise SpecError([doc.problem((), "expected a calibration mapping with 'default', 'engines' and 'groups'")])
    if d.get("kind") != KIND:   # the steady-state model's calibration: read by its own loader
        old = calibrate.load(file)
        band = _intervals(doc, d.get("intervals"), problems)
        if problems:
            raise SpecError(problems)
        return Table(Parameters.of(old.default), {k: Parameters.of(v) for k, v in old.groups.items()},
                     {k: Parameters.of(v) for k, v in old.engines.items()}, old.fitted, "steady-state calibration", band)

    def params(path, block):
        ps = block.get("parameters") if isinstance(block, dict) else None
        if not isinstance(ps, dict):
            problems.append(doc.problem(path, "expected a mapping with 'parameters'"))
            return None
        for name in sorted(set(ps) - set(NAMES)):
            problems.append(doc.problem(path + ("parameters", name), f"unknown parameter; known: {', '.join(NAMES)}"))
        values = {}
        for name in NAMES:
            v = ps.get(name, Parameters.__dataclass_fields__[name].default)
            bad = calibrate.parameter_problem(name, v, FRACTIONS)
            if bad:
                problems.append(doc.problem(path + ("parameters", name), bad))
            values[name] = v
        return values

    def entries(key, names):
        found, items = {}, d.get(key) or []
        if not isinstance(items, list):
            problems.append(doc.problem((key,), f"expected a list of {{{', '.join(names)}, parameters}}"))
            return found
        for i, g in enumerate(items):
            values = params((key, i), g)
            if isinstance(g, dict) and not all(isinstance(g.get(k), str) for k in names):
                problems.append(doc.problem((key, i), f"needs {' and '.join(names)} names"))
            elif isinstance(g, dict) and "models" in g and g["models"] not in MODEL_KINDS:
                problems.append(doc.problem((key, i, "models"), f"expected one of {', '.join(MODEL_KINDS)}"))
            elif values is not None:
                found[tuple(g[k] for k in names) + ((g["models"],) if "models" in g else ())] = values
        return found

    for key in sorted(set(d) - set(TOP_KEYS), key=str):    # a misspelt block would be read as absent
        problems.append(doc.problem((key,), f"unknown key; known: {', '.join(TOP_KEYS)}", at_key=True))
    default = params(("default",), d["default"])
    groups, engines = entries("groups", ("device", "engine")), entries("engines", ("engine",))
    kinds = _kinds(doc, d.get("kinds"), params, problems)
    fitted = d.get("fitted", [])
    if not (isinstance(fitted, list) and all(f in NAMES for f in fitted)):
        problems.append(doc.problem(("fitted",), f"expected a list of parameter names among {', '.join(NAMES)}"))
    band = _intervals(doc, d.get("intervals"), problems)
    if problems:
        raise SpecError(problems)
    return Table(Parameters(**default), {k: Parameters(**v) for k, v in groups.items()},
                 {k[0]: Parameters(**v) for k, v in engines.items()}, tuple(fitted), str(d.get("fitted_on", "")),
                 band, {k: Parameters(**v) for k, v in kinds.items()})


def _kinds(doc, items, params, problems) -> dict:
    """The optional `kinds` list: {models: dense or moe, device (absent: every device), parameters}."""
    found = {}
    if items is None:
        return found
    if not isinstance(items, list):
        problems.append(doc.problem(("kinds",), "expected a list of {models, device, parameters}"))
        return found
    for i, g in enumerate(items):
        values = params(("kinds", i), g)
        if not isinstance(g, dict):
            continue
        if g.get("models") not in MODEL_KINDS:
            problems.append(doc.problem(("kinds", i), f"models: expected one of {', '.join(MODEL_KINDS)}"))
        elif "device" in g and not isinstance(g["device"], str):
            problems.append(doc.problem(("kinds", i, "device"), "device: expected a device name"))
        elif values is not None:
            found[(g.get("device"), g["models"])] = values
    return found


def _intervals(doc, block, problems) -> dict | None:
    """The optional `intervals` block: a level in (0, 1) and [lo, hi] per TPOT and TTFT."""
    if block is None:
        return None
    if not isinstance(block, dict):
        problems.append(doc.problem(("intervals",), "expected a mapping with level, tpot and ttft"))
        return None
    level = block.get("level")
    if not (_number(level) and 0 < level < 1):
        problems.append(doc.problem(("intervals", "level"), "level: expected a fraction in (0, 1)"))
    out = {"level": level, **_band(doc, ("intervals",), block, problems)}
    kinds = block.get("by_holdout", {})
    if not isinstance(kinds, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in kinds.items()):
        problems.append(doc.problem(("intervals", "by_holdout"), "by_holdout: expected a mapping of hold-out "
                                    "kind (model, tp, engine): {tpot: [lo, hi], ttft: [lo, hi]}"))
        return out
    out["by"] = {k: _band(doc, ("intervals", "by_holdout", k), v, problems) for k, v in kinds.items()}
    seen = block.get("calibrated")     # the models, tp degrees and engines fitted (newer files)
    if seen is not None and not (isinstance(seen, dict) and all(isinstance(v, list) for v in seen.values())):
        problems.append(doc.problem(("intervals", "calibrated"), "calibrated: expected a mapping of "
                                    "model, tp, engine: [values]"))
    elif seen is not None:
        out["calibrated"] = seen
    split = _disaggregated(doc, block.get("disaggregated"), problems)
    if split is not None:
        out["disaggregated"] = split
    return out


def _disaggregated(doc, entry, problems) -> dict | None:
    """The optional `intervals.disaggregated` entry (newer files): each disaggregated row's
    log(predicted / measured) TTFT and TPOT, the residuals of a disaggregated deployment's band."""
    if entry is None:
        return None
    path = ("intervals", "disaggregated")
    if not isinstance(entry, dict):
        problems.append(doc.problem(path, "expected a mapping with tpot_log_residuals and ttft_log_residuals"))
        return None
    out = {}
    for what in ("tpot", "ttft"):
        key = f"{what}_log_residuals"
        v = entry.get(key)
        if not (isinstance(v, list) and all(_number(x) for x in v)):
            problems.append(doc.problem(path + (key,), f"{key}: expected a list of numbers"))
        out[key] = v
    return out


def _band(doc, path, block, problems) -> dict:
    """{tpot: [lo, hi], ttft: [lo, hi]} from `block`, each checked."""
    out = {}
    for what in ("tpot", "ttft"):
        v = block.get(what)
        if not (isinstance(v, list) and len(v) == 2 and all(_number(x) for x in v) and v[0] <= v[1]):
            problems.append(doc.problem(path + (what,), f"{what}: expected [lo, hi], lo <= hi"))
        out[what] = v
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
