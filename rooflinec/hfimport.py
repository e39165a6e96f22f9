"""A Hugging Face config.json becomes a model spec (YAML text), with its provenance.

Every field of the config is either mapped to a spec key or named in a located note that says
it is not modelled and what that leaves out; nothing is dropped silently. No network: the user
supplies the file (or the model folder holding it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import yaml

from rooflinec import validate, yamlio
from rooflinec.errors import Problem, SpecError, one_line

# Fields that change no FLOP or byte count, and why; read for every architecture.
COST_FREE = {
    "architectures": "read: chooses the mapping",
    "model_type": "read: names the architecture family",
    "_name_or_path": "read: a display name when no --hf-id is given",
    "initializer_range": "weight initialisation, for training",
    "attention_dropout": "dropout, off at inference",
    "attn_pdrop": "dropout, off at inference",
    "embd_pdrop": "dropout, off at inference",
    "resid_pdrop": "dropout, off at inference",
    "summary_first_dropout": "dropout of a classification head the LM does not use",
    "bos_token_id": "a token id", "eos_token_id": "a token id", "pad_token_id": "a token id",
    "torch_dtype": "the checkpoint's storage dtype; the study's dtype sets bytes per element",
    "transformers_version": "the library version that wrote the file",
    "use_cache": "a library switch; the cost model always keeps a KV cache in decode",
    "sliding_window_size": "the same as sliding_window, noted there when it is on",
    "auto_map": "where the library finds the code",
    "rms_norm_eps": "a constant inside the norm", "layer_norm_epsilon": "a constant inside the norm",
    "rope_theta": "RoPE's base frequency: the cos/sin values, not how many are applied",
    "rope_scaling": "rescales RoPE's frequencies, computed once; the per-token work is unchanged",
    "original_max_position_embeddings": "RoPE scaling's reference length",
    "pretraining_tp": "the tensor-parallel split used in pretraining; the same matrices",
    "max_window_layers": "only read when use_sliding_window is true",
    "query_pre_attn_scalar": "the value of the score scale; the scale op is costed",
    "cache_implementation": "the library's cache layout",
    "n_ctx": "the same as n_positions",
    "scale_attn_weights": "whether scores are scaled; the scale op is costed",
    "scale_attn_by_inverse_layer_idx": "a different scale value per layer; same cost",
    "reorder_and_upcast_attn": "numerics of the score product (fp32 upcast); same count",
    "task_specific_params": "generation settings for other tasks",
    "summary_type": "a classification head the LM does not use",
    "summary_use_proj": "a classification head the LM does not use",
    "summary_activation": "a classification head the LM does not use",
    "summary_proj_to_labels": "a classification head the LM does not use",
    "tie_word_embeddings": "mapped to tied_embeddings",
}


COSTLESS = "not modelled; costs nothing"   # how a note on a field that changes no cost begins


@dataclass
class Reader:
    """The config's fields, each marked when mapped; the rest become notes."""

    doc: yamlio.Located
    used: set = field(default_factory=set)
    notes: list = field(default_factory=list)

    @property
    def data(self) -> dict:
        return self.doc.data

    def get(self, key: str, default=None):
        self.used.add(key)
        return self.data.get(key, default)

    def need(self, key: str) -> int:
        """A count the mapping cannot do without: a positive whole number."""
        value = self.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        message = (f"expected a positive whole number, got {json.dumps(value)}" if key in self.data
                   else f"missing '{key}', which the mapping needs")
        raise SpecError([self.problem(key, message)])

    def flag(self, key: str, default: bool) -> bool:
        """A switch: true or false (null or absent: `default`)."""
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        raise SpecError([self.problem(key, f"expected true or false, got {json.dumps(value)}")])

    def note(self, key: str, what: str) -> None:
        """`key` is present and not modelled: say what the spec leaves out."""
        if key in self.data:
            self.used.add(key)
            self.notes.append(self.doc.problem((key,), f"not modelled; this leaves out {what}",
                                               at_key=True))

    def problem(self, key: str, message: str) -> Problem:
        return self.doc.problem((key,) if key in self.data else (), message)

    def leftovers(self, arch: str) -> list[Problem]:
        """A note for every field no mapping read: why it costs nothing, or that it is unknown."""
        out = []
        for key in self.data:
            if key in self.used:
                continue
            why = COST_FREE.get(key)
            text = (f"{COSTLESS} ({why})" if why else
                    f"not modelled; unknown to the {arch} mapping, so what it changes is not counted")
            out.append(self.doc.problem((key,), text, at_key=True))
        return out


def _optional(r: Reader, key: str, default: int) -> int:
    """A count the config may leave out or set to null, meaning `default`."""
    return r.need(key) if r.data.get(key) is not None else r.used.add(key) or default


def _window(r: Reader, spec: dict, alternating: bool = False) -> None:
    """Sliding-window attention: every layer's, or every other layer's from the first
    (Gemma 2, gpt-oss), as attention.window and attention.pattern."""
    window = r.data.get("sliding_window")
    on = r.data.get("use_sliding_window", True)
    r.used.update({"sliding_window", "use_sliding_window", "sliding_window_size"})
    if window is None or not on:
        return
    if "use_sliding_window" in r.data:   # Qwen2/3: only layers from max_window_layers on; rare
        r.used.discard("sliding_window")
        r.note("sliding_window", f"sliding-window attention (a window of {window} from layer "
                                 "max_window_layers on); costed as full attention")
        return
    spec["attention"].update(window=r.need("sliding_window"),
                             pattern=["sliding", "full"] if alternating else ["sliding"])


LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}


def _layer_types(r: Reader, spec: dict) -> bool:
    """`layer_types`, one attention kind per layer, as attention.pattern (its shortest
    repeating period) and, where a layer is sliding, attention.window; False when absent."""
    kinds = r.get("layer_types")
    if kinds is None:
        return False
    n = spec["n_layers"]
    if not isinstance(kinds, list) or len(kinds) != n \
            or any(not isinstance(k, str) or k not in LAYER_TYPES for k in kinds):
        raise SpecError([r.problem("layer_types", f"expected a list of {n} entries (num_hidden_layers), "
                                                  f"each one of {', '.join(LAYER_TYPES)}")])
    r.used.update({"sliding_window", "sliding_window_size"})
    pattern = [LAYER_TYPES[k] for k in kinds[:_period(kinds)]]
    if "sliding" in pattern:
        spec["attention"].update(window=r.need("sliding_window"), pattern=pattern)
    return True


def _period(items: list) -> int:
    """The shortest p with items[i] == items[i - p] for every i >= p (KMP's failure function:
    linear in the list's length)."""
    fail, k = [0] * len(items), 0
    for i in range(1, len(items)):
        while k and items[i] != items[k]:
            k = fail[k - 1]
        if items[i] == items[k]:
            k += 1
        fail[i] = k
    return len(items) - (fail[-1] if items else 0)


def _decoder(r: Reader, act_key: str = "hidden_act", act_default: str = "silu") -> dict:
    """The fields every Llama-style decoder shares: RMSNorm, RoPE, a gated MLP."""
    d_model, heads = r.need("hidden_size"), r.need("num_attention_heads")
    head_dim = r.need("head_dim") if r.data.get("head_dim") is not None else d_model // heads
    act = r.get(act_key, act_default)
    kinds = {"silu": "swiglu", "gelu_pytorch_tanh": "geglu", "gelu": "geglu", "gelu_new": "geglu"}
    if not isinstance(act, str) or act not in kinds:
        raise SpecError([r.problem(act_key, f"activation {json.dumps(act)} is not covered; "
                                            f"covered: {', '.join(kinds)}")])
    bias = r.flag("attention_bias", False)
    spec = {
        "d_model": d_model, "n_layers": r.need("num_hidden_layers"), "vocab": r.need("vocab_size"),
        "attention": {"n_heads": heads, "n_kv_heads": _optional(r, "num_key_value_heads", heads),
                      "head_dim": head_dim, "qkv_bias": bias, "out_bias": bias},
        "mlp": {"kind": kinds[act], "d_ff": r.need("intermediate_size"),
                "bias": r.flag("mlp_bias", False)},
        "norm": {"kind": "rmsnorm", "bias": False},
        "positions": "rope",
        "tied_embeddings": r.flag("tie_word_embeddings", False),
    }
    if r.data.get("max_position_embeddings") is not None:
        spec["max_context"] = r.need("max_position_embeddings")
    if r.data.get("partial_rotary_factor", 1.0) != 1.0:
        r.note("partial_rotary_factor", "that RoPE turns only part of each head; costed on all of it")
    else:
        r.used.add("partial_rotary_factor")
    return spec


def _llama(r: Reader) -> dict:
    spec = _decoder(r)
    _window(r, spec)
    return spec


def _qwen2(r: Reader) -> dict:
    spec = _decoder(r)
    spec["attention"].update(qkv_bias=True, out_bias=False)   # Qwen2: biases on q, k, v only
    _window(r, spec)
    return spec


def _qwen3(r: Reader) -> dict:
    spec = _decoder(r)
    spec["attention"]["qk_norm"] = True   # Qwen3: RMSNorm over d_head on every q and k head
    _window(r, spec)
    return spec


def _phi3(r: Reader) -> dict:
    spec = _decoder(r)   # fused qkv_proj and gate_up_proj hold the same weights; the study's
    _window(r, spec)     # `qkv: fused` convention costs the fused GEMM
    return spec


def _gemma2(r: Reader) -> dict:
    r.used.add("hidden_act")   # Gemma2 reads hidden_activation; hidden_act is its older alias
    spec = _decoder(r, act_key="hidden_activation", act_default="gelu_pytorch_tanh")
    spec["tied_embeddings"] = r.flag("tie_word_embeddings", True)
    spec["norm"]["post"] = True   # a norm before and after each sublayer: four per layer
    cap = r.data.get("attn_logit_softcapping")
    if cap is not None:   # on chip in FlashAttention kernels, so not an op of its own here
        per_score = 4 * spec["attention"]["head_dim"]
        r.note("attn_logit_softcapping", f"the attention soft-cap {cap}*tanh(s/{cap}): 3 FLOPs a "
                                         f"score beside attention's 4*d_head = {per_score}, and in "
                                         "the unfused program one more pass over the scores")
    cap = r.get("final_logit_softcapping")
    if cap is not None:
        spec["operators"] = [{
            "name": "logit_softcap", "category": "elementwise", "unit": "vector", "runs": "once",
            "after": "lm_head", "flops": "3*B*V", "bytes": "2*B*V*b",
            "shape": "cap*tanh(logits[B,V]/cap)",
            "notes": f"final_logit_softcapping: {cap}*tanh(x/{cap}), divide, tanh and multiply, 3 "
                     "FLOPs a logit (transformers' Gemma2); the logits read and written once; B "
                     "rows, as under the default convention logits: last"}]
    if not _layer_types(r, spec):   # transformers' Gemma2 default: sliding from layer 0, alternating
        _window(r, spec, alternating=True)
    r.notes.append(r.doc.problem((), "not modelled; this leaves out Gemma's embedding scale "
                                     "(the gathered rows times sqrt(d_model): one multiply per "
                                     "element, once per token)"))
    return spec


def _gpt2(r: Reader) -> dict:
    d_model = r.need("n_embd")
    act = r.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in ("gelu_new", "gelu", "gelu_pytorch_tanh"):
        raise SpecError([r.problem("activation_function", f"activation {json.dumps(act)} is not "
                                   "covered; covered: gelu_new, gelu, gelu_pytorch_tanh")])
    heads = r.need("n_head")
    if d_model % heads:   # transformers' GPT2Attention raises the same ValueError
        raise SpecError([r.problem("n_head", f"n_embd {d_model} is not divisible by n_head {heads}; "
                                             "GPT-2's head dimension is n_embd / n_head")])
    return {
        "d_model": d_model, "n_layers": r.need("n_layer"), "vocab": r.need("vocab_size"),
        "max_context": r.need("n_positions"),
        "attention": {"n_heads": heads, "head_dim": d_model // heads,
                      "qkv_bias": True, "out_bias": True},
        "mlp": {"kind": "gelu", "d_ff": _optional(r, "n_inner", 4 * d_model), "bias": True},
        "norm": {"kind": "layernorm", "bias": True},
        "positions": "learned",
        "tied_embeddings": r.flag("tie_word_embeddings", True),
    }


ARCHITECTURES = {
    "LlamaForCausalLM": _llama, "MistralForCausalLM": _llama, "Qwen2ForCausalLM": _qwen2,
    "Qwen3ForCausalLM": _qwen3, "Gemma2ForCausalLM": _gemma2, "Phi3ForCausalLM": _phi3,
    "GPT2LMHeadModel": _gpt2,
}


def _more_architectures() -> None:
    from rooflinec.hfimport_moe import ARCHITECTURES as MOE   # experts and latent attention
    ARCHITECTURES.update(MOE)


NAMED = 8                                   # fields the summary line names of each kind


def _name(note: Problem) -> str:
    """The field a note is on; a note on the whole config by what it leaves out."""
    if note.path and note.path != "(top level)":
        return note.path
    return note.message.split("leaves out ", 1)[-1].split(" (")[0]


def _names(notes: list[Problem]) -> str:
    names = [_name(n) for n in notes[:NAMED]]
    more = len(notes) - len(names)
    return ", ".join(names) + (f" and {more} more" if more else "")


def summary(notes: list[Problem]) -> str:
    """One line for `import` without -v: how many fields were not modelled, those that leave
    work uncounted named first (they change the costs), then those that cost nothing."""
    costless = [n for n in notes if n.message.startswith(COSTLESS)]
    uncounted = [n for n in notes if not n.message.startswith(COSTLESS)]
    parts = []
    if uncounted:
        parts.append(f"{len(uncounted)} leave work uncounted ({_names(uncounted)})")
    if costless:
        parts.append(f"{len(costless)} cost nothing ({_names(costless)})")
    return one_line(f"{notes[0].file}: {len(notes)} things not modelled: {'; '.join(parts)}; "
                    "-v lists each with what it leaves out")


def config_file(path: str) -> str:
    """The config.json of `path`: the file itself, or the one inside a model folder."""
    return os.path.join(path, "config.json") if os.path.isdir(path) else path


def convert(path: str, hf_id: str | None = None) -> tuple[str, list[Problem]]:
    """The model spec YAML for the config at `path`, and the notes on what it leaves out."""
    spec, notes = mapped(path, hf_id)
    return emit(spec, notes), notes


def mapped(path: str, hf_id: str | None = None) -> tuple[dict, list[Problem]]:
    """The model spec (a mapping) for the config at `path`, and the notes on what it leaves out."""
    file = config_file(path)
    doc = yamlio.load(file)
    if not isinstance(doc.data, dict):
        raise SpecError([doc.problem((), "expected a config.json: a mapping of fields")])
    problems = validate.numbers(doc, doc.data)   # finite, integers exact: as in any spec
    if problems:
        raise SpecError(problems)
    r = Reader(doc)
    r.used.update({"model_type", "_name_or_path"})   # read for the name, or only informative
    _more_architectures()
    archs = r.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise SpecError([doc.problem(("architectures", 0) if arch is not None else (),
                                     f"architecture {json.dumps(arch)} is not covered; covered: "
                                     f"{', '.join(ARCHITECTURES)}")])
    spec = ARCHITECTURES[arch](r)
    name = _model_name(hf_id, r.data.get("_name_or_path"), arch)
    source = f"{hf_id or r.data.get('_name_or_path') or 'an unnamed'} config.json ({arch}), imported by rooflinec import"
    notes = sorted(r.notes + r.leftovers(arch), key=lambda p: (p.line, p.col))
    head = {"name": name, **({"hf_id": hf_id} if hf_id else {})}
    return {**head, **spec, "source": source}, notes


def _model_name(hf_id, name_or_path, arch: str) -> str:
    """The last part of --hf-id, else of _name_or_path: the first that is not empty. A folder's
    name says nothing of the model (a Hugging Face snapshot's is a commit hash), so without
    either the name says it is unnamed."""
    for given in (hf_id, name_or_path):
        last = str(given or "").rsplit("/", 1)[-1]
        if last.strip():
            return last
    return f"{arch} (unnamed: --hf-id names it)"


class _Dumper(yaml.SafeDumper):
    """Plain YAML: no anchors or aliases, whatever objects the mapping shares; a string
    holding a line break or control character double-quoted, where every one is escaped
    (PyYAML writes \x85 raw in a single-quoted string, and reads it back as a break)."""

    def ignore_aliases(self, data) -> bool:
        return True

    def represent_str(self, data: str):
        style = '"' if one_line(data) != data else None
        return self.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _Dumper.represent_str)


def emit(spec: dict, notes: list[Problem]) -> str:
    """The spec through PyYAML's emitter, so no text from the config becomes structure (a
    string is quoted and escaped wherever YAML needs it); sub-mappings in flow style. The notes
    head the file as comments, each one line with its control characters escaped, so the spec
    keeps what it leaves out."""
    lines = ["# A model spec imported from a Hugging Face config.json by `rooflinec import`.",
             *(comment(f"{n.line}:{n.col}: {n.path}: {n.message}") for n in notes)]
    body = yaml.dump(spec, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=2**31 - 1,
                     default_flow_style=None)
    return "\n".join(lines) + "\n" + body


def comment(text: str) -> str:
    """`text` as one YAML comment line: line breaks and control characters escaped."""
    return "# " + one_line(text)
