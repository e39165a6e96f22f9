"""Specs: load (safe YAML) -> validate (JSON Schema + semantic checks) -> frozen dataclasses."""

from __future__ import annotations

import os
from fractions import Fraction
from dataclasses import dataclass, field, replace

from rooflinec.spec import catalog, validate
from rooflinec.model import custom, kinds, quant
from rooflinec.base import yamlio
from rooflinec.base import roofline
from rooflinec.base.errors import Problem, SpecError
from rooflinec.spec.options import study_default
from rooflinec.spec.plausible import device_warnings
from rooflinec.base.units import QuantityError, parse_quantity

DTYPE_BYTES = quant.BYTES   # bytes per element by format, block scales included (rooflinec.model.quant)


@dataclass(frozen=True)
class Device:
    key: str                  # file stem, e.g. "rtx4090"
    name: str
    tensor: dict              # dtype -> FLOP/s
    vector: dict              # dtype -> FLOP/s (may be empty)
    bandwidth: float          # B/s
    capacity: int             # B
    source: str
    year: int | None = None
    sm_count: int | None = None
    sram_per_sm: int | None = None   # B
    l2_size: int | None = None       # B, the L2 all SMs share (optional)
    notes: str = ""
    link: str = ""                        # scale-up interconnect (NVLink), if declared
    link_bandwidth: float | None = None   # B/s per device per direction
    link_latency: float | None = None     # s per collective step
    link_domain: int | None = None        # devices one scale-up domain joins (None: unbounded)
    network: str = ""                     # scale-out network (InfiniBand), if declared
    network_bandwidth: float | None = None   # B/s per device per direction
    network_latency: float | None = None     # s per message or collective step
    cache_size: int | None = None          # B, last-level cache (measured specs)
    cache_bandwidth: float | None = None   # B/s, a stream that fits in that cache
    board_power: float | None = None       # W, the board's power limit (TDP)
    board_power_source: str = ""           # the datasheet that states it
    file: str = field(default="", compare=False)   # the hardware spec it was read from
    warnings: tuple = field(default=(), compare=False)   # located: figures far outside any accelerator

    def peak(self, unit: str, dtype: str) -> float | None:
        """Peak FLOP/s of the matrix or vector units for `dtype` (vector falls back to fp32);
        a block-scaled format runs on its element type's peak (nvfp4 on fp4)."""
        if unit == "matrix":
            return self.tensor.get(quant.peak_dtype(dtype))
        return self.vector.get(dtype, self.vector.get("fp32"))

    def vector_dtype(self, dtype: str) -> str | None:
        return dtype if dtype in self.vector else ("fp32" if "fp32" in self.vector else None)


@dataclass(frozen=True)
class Model:
    key: str
    name: str
    d_model: int
    n_layers: int
    vocab: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    mlp_kind: str
    d_ff: int
    source: str
    max_context: int | None = None
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    norm_kind: str = "rmsnorm"
    norm_bias: bool = False
    positions: str = "rope"
    block: str = "sequential"
    tied_embeddings: bool = False
    qk_norm: bool | str = False   # RMSNorm of q and k: True per head (Qwen3), "layer" over all heads (MiniMax-M2)
    output_gate: bool = False  # attention output times sigmoid of a gate from q_proj (Qwen3-Next)
    nope: tuple = ()           # per layer, repeated: True where no RoPE is applied (Llama 4)
    rotary_dim: int | None = None   # dimensions of each head RoPE turns (partial rotary), None: all
    post_norms: bool = False  # a norm on each sublayer's output too (Gemma 2)
    mtp_layers: int = 0       # multi-token-prediction modules (DeepSeek-V3), counted by rooflinec.model.params
    notes: str = ""
    hf_id: str = ""            # Hugging Face id, how measured runs name the model
    dimensions: tuple = ()    # (name, value) pairs: the model's own symbols (rooflinec.model.custom)
    moe: object = None        # moe.MoE: routed experts (rooflinec.model.moe)
    mla: object = None        # mla.MLA: latent attention (rooflinec.model.mla)
    window: int | None = None  # attention window W of the pattern's sliding/chunked layers
    pattern: tuple = ()       # layer kinds (full, sliding, chunked), repeated (rooflinec.model.window)
    sinks: bool = False       # one learned attention-sink logit per head (gpt-oss)
    operators: tuple = ()     # custom.Declared ops, placed by lowering
    blocks: tuple = ()        # (key, configuration) of other layer kinds' sections (rooflinec.model.kinds)
    file: str = field(default="", compare=False)   # the model spec it was read from


@dataclass(frozen=True)
class Study:
    file: str
    stem: str
    title: str
    model: Model | None           # None for catalogs of devices or operators
    devices: tuple[Device, ...]
    dtype: str
    conventions: dict
    analyses: dict = field(default_factory=dict)   # name -> params, in the order written
    parallel: dict = field(default_factory=dict)   # the `parallel` block as written
    doc: object = field(default=None, compare=False, repr=False)  # the located study file
    quantization: dict = field(default_factory=dict)   # tensor class -> storage format


_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number",
          bool: "a boolean", type(None): "nothing (null)"}


def _mapping(file: str, kind: str, text: str | None = None) -> yamlio.Located:
    """Load `file` (or `text`, written as if it were `file`) as plain YAML: a mapping at the top."""
    doc = yamlio.load(file, text)
    if not isinstance(doc.data, dict):
        got = _KINDS.get(type(doc.data), type(doc.data).__name__)
        raise SpecError([doc.problem((), f"expected a mapping of keys for a {kind} spec, got {got}")])
    return doc


def _checked(file: str, kind: str, semantic=None, text: str | None = None) -> yamlio.Located:
    """Load and schema-check `file`; `semantic(doc)` adds cross-field problems found alongside."""
    doc = _mapping(file, kind, text)
    problems = validate.check(doc, kind)
    if semantic is not None:
        problems += semantic(doc)
    if problems:
        raise SpecError(problems)
    return doc


def _stem(file: str) -> str:
    return os.path.splitext(os.path.basename(file))[0]


# What any device could have: outside these a number is a typo or a unit slip (GB/s for
# TB/s ...), and it would put zeros or infinities into every report that uses it.
PHYSICAL = {
    ("memory", "bandwidth"): ("bandwidth", 10**9, 10**15, "1 GB/s", "1 PB/s"),
    ("memory", "capacity"): ("bytes", 2**20, 10**15, "1 MiB", "1 PB"),
    ("on_chip", "sram_per_sm"): ("bytes", 2**10, 2**30, "1 KiB", "1 GiB"),
    ("on_chip", "l2"): ("bytes", 2**10, 2**40, "1 KiB", "1 TiB"),
    ("cache", "size"): ("bytes", 2**10, 2**40, "1 KiB", "1 TiB"),
    ("cache", "bandwidth"): ("bandwidth", 10**9, 10**15, "1 GB/s", "1 PB/s"),
    ("compute", "tensor"): ("flops_rate", 10**9, 10**19, "1 GFLOP/s", "10 EFLOP/s"),
    ("compute", "vector"): ("flops_rate", 10**9, 10**19, "1 GFLOP/s", "10 EFLOP/s"),
}
RIDGE = (Fraction(1, 1000), 10**5)   # FLOPs per byte a peak over the bandwidth may come to


def _quantity(value, dimension: str):
    try:
        return parse_quantity(value, dimension)
    except QuantityError:
        return None   # the schema reports it


def _device_problems(doc: yamlio.Located) -> list[Problem]:
    """Peaks, bandwidth and sizes within PHYSICAL, and each ridge within RIDGE."""
    d, problems, found = doc.data, [], {}
    for (section, key), (dimension, lo, hi, lo_text, hi_text) in PHYSICAL.items():
        value = d.get(section, {}).get(key) if isinstance(d.get(section), dict) else None
        entries = value.items() if isinstance(value, dict) else [(None, value)]
        for dtype, v in entries:
            path = (section, key) + ((dtype,) if dtype is not None else ())
            number = _quantity(v, dimension) if v is not None else None
            if number is None:
                continue
            if lo <= number <= hi:
                found[path] = number
            else:
                problems.append(doc.problem(path, (
                    f"{validate.show(v)} is outside what any device has ({lo_text} to {hi_text}); "
                    "check the number and its unit")))
    bandwidth = found.get(("memory", "bandwidth"))
    for path, peak in found.items():   # both within PHYSICAL: the ratio is a modest float
        ridge = roofline.ridge(Fraction(peak), Fraction(bandwidth)) if bandwidth and path[0] == "compute" else None
        if ridge is not None and not RIDGE[0] <= ridge <= RIDGE[1]:
            problems.append(doc.problem(path, (
                f"peak / bandwidth is {float(ridge):.3g} FLOPs per byte, outside what any device "
                f"has ({float(RIDGE[0])} to {RIDGE[1]}); check the peak, the bandwidth and their units")))
    return problems


def load_hardware(file: str) -> Device:
    doc = _checked(file, "hardware", _device_problems)
    d = doc.data
    comp, mem, chip, cache = d["compute"], d["memory"], d.get("on_chip") or {}, d.get("cache") or {}
    rate = lambda peaks: {k: parse_quantity(v, "flops_rate") for k, v in (peaks or {}).items()}  # noqa: E731
    device = Device(
        key=_stem(file), name=d["name"], tensor=rate(comp["tensor"]), vector=rate(comp.get("vector")),
        bandwidth=parse_quantity(mem["bandwidth"], "bandwidth"),
        capacity=parse_quantity(mem["capacity"], "bytes"), source=d["source"], year=d.get("year"),
        sm_count=chip.get("sm_count"),
        sram_per_sm=parse_quantity(chip["sram_per_sm"], "bytes") if chip else None,
        l2_size=parse_quantity(chip["l2"], "bytes") if "l2" in chip else None,
        notes=d.get("notes", ""), **_interconnect(d.get("interconnect"), "link"),
        **_interconnect(d.get("scale_out"), "network"),
        cache_size=parse_quantity(cache["size"], "bytes") if cache else None,
        cache_bandwidth=parse_quantity(cache["bandwidth"], "bandwidth") if cache else None,
        board_power=(d.get("power") or {}).get("board_w"), board_power_source=(d.get("power") or {}).get("source", ""),
        file=file)
    return replace(device, warnings=device_warnings(doc, device))


def _own_dtypes(doc, i: int, device: Device, model, dtype: str) -> Device:
    """`device` warned, located at the study's devices[i], of each format a layer kind computes
    in of its own (rooflinec.model.kinds: `Kind.dtypes`, DSA's indexer: fp8) that it lists no
    peak for: those ops take the study's `dtype` peak instead (the workbench's `op_dtype`)."""
    lacking = tuple(str(doc.problem(("devices", i), f"device '{device.key}' lists no {'tensor' if unit == 'matrix' else 'vector'} peak for {own}, which "
                                                   f"{what} compute in; they are costed at its {dtype} peak"))
                    for kind in kinds.kinds_of(model) for unit, own, what in kind.dtypes(model)
                    if device.peak(unit, own) is None)
    return replace(device, warnings=device.warnings + lacking) if lacking else device


def _interconnect(link: dict | None, prefix: str) -> dict:
    """A scale-up link ("link") or the scale-out network ("network") as Device fields."""
    if not link:
        return {}
    latency = link.get("latency")
    fields = {prefix: link["name"], f"{prefix}_bandwidth": parse_quantity(link["bandwidth"], "bandwidth"),
              f"{prefix}_latency": None if latency is None else parse_quantity(latency, "time")}
    if "devices_per_domain" in link:
        fields["link_domain"] = link["devices_per_domain"]
    return fields


def _count(section, key: str) -> int | None:
    value = section.get(key) if isinstance(section, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _model_problems(doc: yamlio.Located) -> list[Problem]:
    """Cross-field checks, on the raw data, so they are reported with any schema problems."""
    d, problems = doc.data, []
    att = d.get("attention")
    n_heads, n_kv = _count(att, "n_heads"), _count(att, "n_kv_heads")
    if n_heads and n_kv and n_heads % n_kv:
        problems.append(doc.problem(("attention", "n_kv_heads"),
                                    f"{n_kv} KV heads do not divide {n_heads} query heads; each KV "
                                    "head must serve a whole group of query heads"))
    pattern = att.get("pattern") if isinstance(att, dict) else None
    if isinstance(pattern, list) and any(k in ("sliding", "chunked") for k in pattern) \
            and "window" not in att:
        problems.append(doc.problem(("attention", "pattern"), "sliding or chunked layers need "
                                    "attention.window (their window in tokens)"))
    for name in dict.fromkeys(k for k in (pattern if isinstance(pattern, list) else ()) if isinstance(k, str)):
        kind = next((k for k in kinds.registry().values() if name in (k.name, *k.aliases)), None)
        if kind is not None and kind.key and kind.key not in d:
            problems.append(doc.problem(("attention", "pattern"), f"'{name}' layers need the model's "
                                        f"`{kind.key}` section (their configuration)"))
    others = [k for k in pattern if isinstance(k, str) and k not in ("full", "sliding", "chunked")] if isinstance(pattern, list) else []
    if d.get("mla") and others:
        problems.append(doc.problem(("attention", "pattern"), f"latent attention (mla) is every layer's "
                                    f"attention; a pattern with {others[0]} layers is not modelled with it"))
    if d.get("mla") and isinstance(pattern, list) and any(k in ("sliding", "chunked") for k in pattern):
        # latent attention's decode reads every cached latent; a window would shrink the cache
        # to min(S, W) while the step still reads all S: refused rather than costed two ways
        problems.append(doc.problem(("attention", "pattern"), "windowed (sliding or chunked) layers "
                                    "with latent attention (mla) are not modelled: the latent cache "
                                    "would keep min(S, W) tokens while its decode reads all S; use "
                                    "full layers, or drop mla"))
    if isinstance(att, dict) and any(x is True for x in att.get("nope") or ()) and (others or d.get("mla")):
        # NoPE layers are counted over all layers; beside another mixer kind the RoPE op's
        # layers would be those two patterns' overlap, which is not modelled
        problems.append(doc.problem(("attention", "nope"), "NoPE layers are modelled where every layer is "
                                    "full, sliding or chunked attention; this model has other mixers"))
    rotary, head = (_count(att, "rotary_dim"), _count(att, "head_dim")) if isinstance(att, dict) else (None, None)
    if rotary and head and rotary > head:
        problems.append(doc.problem(("attention", "rotary_dim"), f"{rotary} rotary dimensions exceed head_dim {head}"))
    routed = d.get("moe")
    if isinstance(routed, dict) and all(isinstance(routed.get(x), (int, float)) for x in ("experts", "top_k", "imbalance")) \
            and routed["top_k"] > 0 and routed["imbalance"] > routed["experts"] / routed["top_k"]:
        problems.append(doc.problem(("moe", "imbalance"), f"{routed['imbalance']} is more than experts / top_k = "
                                    f"{routed['experts'] / routed['top_k']:g}: routing cannot concentrate on fewer "
                                    "experts than a token uses"))
    if isinstance(routed, dict) and isinstance(routed.get("top_k"), int) and isinstance(routed.get("experts"), int) \
            and routed["top_k"] > routed["experts"]:
        problems.append(doc.problem(("moe", "top_k"), f"top_k {routed['top_k']} exceeds the {routed['experts']} experts"))
    if isinstance(routed, dict) and isinstance(routed.get("offset"), int) \
            and routed["offset"] >= routed.get("every", 1):
        problems.append(doc.problem(("moe", "offset"), f"offset {routed['offset']} is not below every = "
                                    f"{routed.get('every', 1)}: no layer i has i % every == offset"))
    if d.get("positions") == "learned" and "max_context" not in d:
        problems.append(doc.problem(("positions",), "learned positions need max_context "
                                                    "(the size of the position table)"))
    return problems + custom.declare(doc)[2]


def _kind_sections(d: dict) -> dict:
    """Each layer kind's section, configured by its kind: MoE and MLA as the Model's `moe` and
    `mla` fields (cost/ and serving/ read them), any other kind's under `blocks`."""
    sections = {k.key: k.from_spec(d[k.key]) for k in kinds.registry().values() if k.key and d.get(k.key)}
    return {"moe": sections.pop("moe", None), "mla": sections.pop("mla", None), "blocks": tuple(sections.items())}


def load_model(file: str, text: str | None = None) -> Model:
    """A model spec from `file`, or from `text` (an imported config) reported as `file`."""
    doc = _checked(file, "model", _model_problems, text)
    d = doc.data
    att, mlp, norm = d["attention"], d["mlp"], d.get("norm") or {}
    model = Model(
        key=_stem(file), name=d["name"], d_model=d["d_model"], n_layers=d["n_layers"],
        vocab=d["vocab"], n_heads=att["n_heads"], n_kv_heads=att.get("n_kv_heads", att["n_heads"]),
        head_dim=att["head_dim"], mlp_kind=mlp["kind"], d_ff=mlp["d_ff"], source=d["source"],
        max_context=d.get("max_context"), qkv_bias=att.get("qkv_bias", False),
        out_bias=att.get("out_bias", False), mlp_bias=mlp.get("bias", False),
        norm_kind=norm.get("kind", "rmsnorm"), norm_bias=norm.get("bias", False),
        positions=d.get("positions", "rope"), block=d.get("block", "sequential"),
        tied_embeddings=d.get("tied_embeddings", False), qk_norm=att.get("qk_norm", False),
        post_norms=norm.get("post", False), mtp_layers=d.get("mtp_layers", 0), notes=d.get("notes", ""),
        hf_id=d.get("hf_id", ""), window=att.get("window"), pattern=tuple(att.get("pattern", ())),
        sinks=att.get("sinks", False), output_gate=att.get("output_gate", False),
        nope=tuple(att.get("nope", ())), rotary_dim=att.get("rotary_dim"), file=file, **_kind_sections(d))
    dims, ops, _ = custom.declare(doc)
    return replace(model, dimensions=dims, operators=ops) if (dims or ops) else model


def _resolve(doc: yamlio.Located, path: tuple, ref: str, folder: str) -> str | Problem:
    """A reference is a name under `folder`/ beside the study, else a catalog entry of that
    name (rooflinec.spec.catalog); or a relative .yaml path beside the study."""
    root = os.path.dirname(doc.file) or "."
    named = not ref.endswith((".yaml", ".yml"))
    rel = os.path.join(folder, ref + ".yaml") if named else ref
    target = os.path.normpath(os.path.join(root, rel))
    real_root = os.path.realpath(root)
    if os.path.isabs(ref) or not _inside(os.path.realpath(target), real_root):
        return doc.problem(path, f"'{ref}' points outside the spec tree ({root}); "
                                 "references must stay inside the study's folder")
    plain = named and not any(c in ref for c in "/\\")   # a catalog entry is a bare name
    shipped = catalog.path(folder, ref) if plain and not os.path.isfile(target) else None
    if shipped is not None:
        return shipped
    if not os.path.isfile(target):
        known = sorted(set(_known(root, folder)) | set(catalog.names(folder)))
        return doc.problem(path, f"no spec '{ref}' (looked for {target} and in the installed "
                                 f"catalog); {validate.closest(ref, known)}"
                                 f"known {folder.rstrip('s')} specs: {', '.join(known) or '(none)'}")
    if os.path.realpath(target) == os.path.realpath(doc.file):
        known = ", ".join(_known(root, folder)) or "(none)"
        return doc.problem(path, f"'{ref}' is this study itself; name a spec under {folder}/; "
                                 f"known {folder.rstrip('s')} specs: {known}")
    return target


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:   # different drives
        return False


def _known(root: str, folder: str) -> list[str]:
    try:
        return sorted(_stem(f) for f in os.listdir(os.path.join(root, folder)) if f.endswith(".yaml"))
    except OSError:
        return []


def _unique_key(doc: yamlio.Located, path: tuple, devices: list[Device]) -> list[Problem]:
    """A device is known by its file stem in charts, sweeps and tables: two with one stem
    would be one column."""
    *earlier, dev = devices
    if dev.key in {d.key for d in earlier}:
        return [doc.problem(path, f"a second device with key '{dev.key}' (devices are known by "
                                  "their file name); rename one of the files")]
    return []


def load_model_ref(doc: yamlio.Located, path: tuple, ref: str) -> Model:
    """A model a study names somewhere other than its `model` key, resolved the same way."""
    target = _resolve(doc, path, ref, "models")
    if isinstance(target, Problem):
        raise SpecError([target])
    return load_model(target)


def referenced_models(study: Study) -> list[str]:
    """The files of the models an analysis names in its `models` list (the architectures
    analysis), resolved as the study's `model` is."""
    out = []
    for key, options in study.analyses.items():
        refs = options.get("models", ()) if isinstance(options, dict) else ()
        for i, ref in enumerate(refs):
            target = _resolve(study.doc, ("analyses", key, "models", i), ref, "models")
            if not isinstance(target, Problem):
                out.append(target)
    return out


def load_study(file: str) -> Study:
    """Load a study and everything it references; raise SpecError with every problem found."""
    doc = _mapping(file, "study")
    d = doc.data
    problems: list[Problem] = validate.check(doc, "study")
    # follow the references that are well formed even when other keys are wrong
    bad = {p.path.split(".")[0].split("[")[0] for p in problems}
    model, devices = None, []
    target = _resolve(doc, ("model",), d["model"], "models") if "model" in d and "model" not in bad \
        else None
    if isinstance(target, Problem):
        problems.append(target)
    elif target is not None:
        try:
            model = load_model(target)
        except SpecError as exc:
            problems.extend(exc.problems)
    for i, ref in enumerate(d["devices"] if "devices" in d and "devices" not in bad else ()):
        target = _resolve(doc, ("devices", i), ref, "hardware")
        if isinstance(target, Problem):
            problems.append(target)
            continue
        try:
            devices.append(load_hardware(target))
        except SpecError as exc:
            problems.extend(exc.problems)
            continue
        problems += _unique_key(doc, ("devices", i), devices)
    for key, options in (d["analyses"] if "analyses" in d and "analyses" not in bad else {}).items():
        for i, ref in enumerate(options.get("models", ()) if isinstance(options, dict) else ()):
            target = _resolve(doc, ("analyses", key, "models", i), ref, "models")   # found before any build
            if isinstance(target, Problem):
                problems.append(target)
    dtype = d.get("dtype", study_default("dtype"))
    # a model study runs the model on every device at `dtype`; catalogs check what they use
    for dev in devices if "dtype" not in bad and "model" in d else ():
        if dev.peak("matrix", dtype) is None:
            on = "" if quant.peak_dtype(dtype) == dtype else f" (it runs on the {quant.peak_dtype(dtype)} peak)"
            problems.append(doc.problem(("dtype",) if "dtype" in d else ("devices",),
                                        f"device '{dev.key}' lists no tensor peak for {dtype}{on}; "
                                        f"it has: {', '.join(dev.tensor)}"))
    if model is not None and "dtype" not in bad:
        devices = [_own_dtypes(doc, i, dev, model, dtype) for i, dev in enumerate(devices)]
    stored = d.get("quantization")
    if model is not None and model.moe is None and isinstance(stored, dict) and quant.EXPERTS in stored:
        problems.append(doc.problem(("quantization", quant.EXPERTS), f"model '{model.name}' has no "
                                    "routed experts; `weights` stores all its weights"))
    if problems:
        raise SpecError(problems)
    conv = d.get("conventions") or {}
    title = d.get("title") or (f"{model.name}: operator rooflines" if model else _stem(file))
    return Study(file=file, stem=_stem(file), title=title, model=model, devices=tuple(devices),
                 dtype=dtype, conventions=conv, analyses=dict(d["analyses"]), doc=doc,
                 quantization=dict(d.get("quantization") or {}),
                 parallel=dict(d.get("parallel") or {}))
