"""The config reader every Hugging Face mapping shares (hfimport for dense decoders,
hfimport_moe for experts and latent attention): each field marked when a mapping reads it,
the rest noted, and the decoder fields all architectures have."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from rooflinec.base import yamlio
from rooflinec.base.errors import Problem, SpecError
from rooflinec.model import kinds
from rooflinec.spec.validate import MAX_DIMENSION


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
    "dtype": "the checkpoint's storage dtype (torch_dtype's newer name); the study's dtype sets bytes per element",
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
    "boi_token_index": "a token id", "eoi_token_index": "a token id", "image_token_index": "a token id",
    "image_token_id": "a token id", "video_token_id": "a token id", "vision_start_token_id": "a token id",
    "vision_end_token_id": "a token id",
}


COSTLESS = "not modelled; costs nothing"   # how a note on a field that changes no cost begins


class Read(int):
    """A count as read from one config key, remembering where: the spec's own checks of a
    field holding it (7 KV heads of 32 query heads) are located at that key, not in the
    spec the import would have written (`hfimport.load`). Arithmetic on it gives a plain int."""

    def __new__(cls, value: int, where):
        out = int.__new__(cls, value)
        out.where = where   # message -> Problem at the key's value
        return out


def _whole(value, low: int) -> bool:
    """A whole number from `low` to the model spec's plausibility limit (validate.MAX_DIMENSION)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_DIMENSION


def _expected(low: int, value) -> str:
    what = "a positive whole number" if low else "a whole number >= 0"
    return f"expected {what} of at most {MAX_DIMENSION:,} (2^24, a model dimension's limit), got {json.dumps(value)}"


@dataclass
class Reader:
    """The config's fields, each marked when mapped; the rest become notes. A field of the
    wrong type or range is a problem collected (`fail`), the mapping going on with a stand-in
    value, so the import reports every such field at once (`raise_collected`), as a spec does."""

    doc: yamlio.Located
    used: set = field(default_factory=set)
    notes: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    failed: set = field(default_factory=set)    # the keys of `problems`: a check on their stand-ins is moot

    def fail(self, key: str, message: str, stand_in):
        """Collect the problem at `key` and go on with `stand_in`."""
        self.problems.append(self.problem(key, message))
        self.failed.add(key)
        return stand_in

    def raise_collected(self, more=()) -> None:
        """A SpecError of every problem collected, in the file's order, else of `more` (what a
        check that cannot go on raised: beside a stand-in it may have checked the stand-in, so
        it waits until the fields are fixed); nothing where there are none."""
        found = sorted(set(self.problems) or set(more), key=lambda p: (p.line, p.col, p.message))
        if found:
            raise SpecError(found)

    @property
    def data(self) -> dict:
        return self.doc.data

    def get(self, key: str, default=None):
        self.used.add(key)
        return self.data.get(key, default)

    def need(self, key: str) -> int:
        """A count the mapping cannot do without: a positive whole number."""
        value = self.get(key)
        if _whole(value, 1):
            return self.read(key, value)
        message = _expected(1, value) if key in self.data else f"missing '{key}', which the mapping needs"
        return self.fail(key, message, self.read(key, 1))

    def flag(self, key: str, default: bool) -> bool:
        """A switch: true or false (null or absent: `default`)."""
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        return self.fail(key, f"expected true or false, got {json.dumps(value)}", default)

    def note(self, key: str, what: str) -> None:
        """`key` is present and not modelled: say what the spec leaves out."""
        if key in self.data:
            self.used.add(key)
            self.notes.append(self.doc.problem((key,), f"not modelled; this leaves out {what}",
                                               at_key=True))

    def problem(self, key: str, message: str) -> Problem:
        return self.doc.problem((key,) if key in self.data else (), message)

    def read(self, key: str, value: int) -> Read:
        return Read(value, lambda message: self.problem(key, message))

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


class Inner:
    """The text model's config inside a multimodal one (Llama 4's `text_config`), read as a config
    of its own: its problems are located at text_config.FIELD in the file."""

    def __init__(self, doc: yamlio.Located, key: str):
        self.outer, self.key = doc, key
        self.file, self.data = doc.file, doc.data[key]

    def problem(self, path: tuple, message: str, at_key: bool = False) -> Problem:
        return self.outer.problem((self.key, *path), message, at_key)


def _optional(r: Reader, key: str, default: int) -> int:
    """A count the config may leave out or set to null, meaning `default`."""
    return r.need(key) if r.data.get(key) is not None else r.used.add(key) or default


def count(r: Reader, key: str) -> int:
    """A count that may be 0 (absent or null: 0)."""
    value = r.get(key)
    if value is None:
        return 0
    if _whole(value, 0):
        return r.read(key, value)
    return r.fail(key, _expected(0, value), 0)


def kind_section(r: Reader, name: str) -> dict:
    """A layer kind's spec section read by its own map (rooflinec.model.kinds: `Kind.hf`, spec
    field -> config key, or (config key, default) for a field the config may leave out or null)."""
    return {field: _defaulted(r, *key) if isinstance(key, tuple) else r.need(key)
            for field, key in kinds.registry()[name].hf.items()}


def _defaulted(r: Reader, key: str, default):
    """A kind's field the config may leave out or null (meaning `default`): a switch where the
    default is one, else a count that may be 0."""
    if r.data.get(key) is None:
        r.used.add(key)
        return default
    return r.flag(key, default) if isinstance(default, bool) else count(r, key)


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


def _decoder(r: Reader, act_key: str = "hidden_act", act_default: str = "silu",
             d_ff_key: str = "intermediate_size") -> dict:
    """The fields every Llama-style decoder shares: RMSNorm, RoPE, a gated MLP (of d_ff_key's
    width: a config with no dense layer may name only its experts')."""
    d_model, heads = r.need("hidden_size"), r.need("num_attention_heads")
    head_dim = r.need("head_dim") if r.data.get("head_dim") is not None else d_model // heads
    if not head_dim and not r.failed & {"hidden_size", "num_attention_heads", "head_dim"}:
        # transformers' default head_dim, hidden_size // num_attention_heads, is 0
        raise SpecError([r.problem("num_attention_heads", f"{heads} heads of a hidden_size of {d_model} leave "
                                                          "each head no dimension; give head_dim or fewer heads")])
    act = r.get(act_key, act_default)
    kinds = {"silu": "swiglu", "gelu_pytorch_tanh": "geglu", "gelu": "geglu", "gelu_new": "geglu"}
    if not isinstance(act, str) or act not in kinds:
        act = r.fail(act_key, f"activation {json.dumps(act)} is not covered; covered: {', '.join(kinds)}", "silu")
    bias = r.flag("attention_bias", False)
    spec = {
        "d_model": d_model, "n_layers": r.need("num_hidden_layers"), "vocab": r.need("vocab_size"),
        "attention": {"n_heads": heads, "n_kv_heads": _optional(r, "num_key_value_heads", heads),
                      "head_dim": head_dim, "qkv_bias": bias, "out_bias": bias},
        "mlp": {"kind": kinds[act], "d_ff": r.need(d_ff_key),
                "bias": r.flag("mlp_bias", False)},
        "norm": {"kind": "rmsnorm", "bias": False},
        "positions": "rope",
        "tied_embeddings": r.flag("tie_word_embeddings", False),
    }
    if r.data.get("max_position_embeddings") is not None:
        spec["max_context"] = r.need("max_position_embeddings")
    factor = r.get("partial_rotary_factor", 1.0)
    if factor is None:
        factor = 1.0
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        factor = r.fail("partial_rotary_factor", f"expected a fraction of the head above 0 and at "
                                                 f"most 1, got {json.dumps(factor)}", 1.0)
    rotary = int(head_dim * factor)   # transformers' rotary embeddings: dim = int(head_dim * factor)
    if rotary < head_dim:
        spec["attention"]["rotary_dim"] = max(rotary, 1)
    return spec
