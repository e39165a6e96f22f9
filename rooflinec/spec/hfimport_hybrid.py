"""`rooflinec import` for hybrids of state-space and attention layers: Nemotron-H (Mamba-2 blocks,
attention blocks and MLP blocks in one string) and Jamba (Mamba-1 layers, rooflinec.model.kinds.mamba1,
one attention layer in each attn_layer_period, experts every expert_layer_period). Each rule cites the transformers class it mirrors (tests/test_import_rules.py checks them
block by block).

A Nemotron-H block is one sublayer (transformers' NemotronHBlock: a norm, one mixer, the
residual add); a rooflinec layer is two, a mixer and its feed-forward. So the pattern is read in
pairs: a Mamba-2 block followed by an MLP block is a `mamba` layer, one followed by anything else
a `mamba_no_ffn` layer (rooflinec.model.kinds.bare), an attention block followed by an MLP block
a `full` layer. What pairs cannot say is refused, located: an MLP block after no mixer, an
attention block with no MLP after it, and MoE blocks ("E", Nemotron 3's latent, non-gated experts).
"""

from __future__ import annotations

import json

from rooflinec.base.errors import SpecError
from rooflinec.model import kinds
from rooflinec.spec.hfconfig import COSTLESS, Reader, _decoder, _defaulted, _optional, _period, count, kind_section

# layers_block_type (the newer configs' list) as hybrid_override_pattern's characters
# (NemotronHConfig._pattern_to_list, and the older names remap_legacy_layer_types reads)
BLOCK_NAMES = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*",
               "mlp": "-", "moe": "E"}

PERIOD = 1024   # the longest attention pattern a model spec holds (model.schema.json)

NEMOTRON_FREE = {
    "expand": "the Mamba-2 width is mamba_num_heads x mamba_head_dim (NemotronHMamba2Mixer)",
    "mamba_proj_bias": "not read by NemotronHMamba2Mixer (use_bias sets in_proj's and out_proj's bias)",
    "hidden_act": "not read by NemotronH (mlp_hidden_act is the MLP's activation)",
    "time_step_min": "the step size's initialisation", "time_step_max": "the step size's initialisation",
    "time_step_floor": "the step size's initialisation",
    "time_step_limit": "a clamp on each head's step size: one compare, left out like softplus",
    "rescale_prenorm_residual": "weight initialisation", "residual_in_fp32": "the residual's numerics",
    "use_mamba_kernels": "a library switch (the fused kernels)", "hidden_dropout": "dropout, off at inference",
    "num_logits_to_keep": "the prompt logits computed: the study's logits convention says it",
    "mamba_ssm_cache_dtype": "the state cache's dtype: a study's kv_cache format stores it",
    "attention_head_dim": "read as the attention head width where head_dim is absent",
}


def _blocks(r: Reader) -> tuple[str, str]:
    """The blocks as one string of M, *, - and E, and the field they came from."""
    listed = r.get("layers_block_type")
    if listed is not None:
        if not isinstance(listed, list) or any(not isinstance(b, str) or b not in BLOCK_NAMES for b in listed):
            raise SpecError([r.problem("layers_block_type", "expected a list of block types, each one of "
                                                            f"{', '.join(BLOCK_NAMES)}")])
        return "".join(BLOCK_NAMES[b] for b in listed), "layers_block_type"
    text = r.get("hybrid_override_pattern")
    if not isinstance(text, str) or not text or set(text) - set("M*-E"):
        raise SpecError([r.problem("hybrid_override_pattern", "expected a string of block types: M (Mamba-2), "
                                                              "* (attention), - (MLP), E (MoE)")])
    return text, "hybrid_override_pattern"


def nemotron_layers(blocks: str) -> list[str] | str:
    """The blocks as rooflinec layers (kind names), or why they cannot be: the first block
    (0-based) a pair cannot hold, as a message."""
    layers, i = [], 0
    while i < len(blocks):
        block, after = blocks[i], blocks[i + 1] if i + 1 < len(blocks) else ""
        if block == "E" or (block in "M*" and after == "E"):
            where = i if block == "E" else i + 1
            return (f"block {where} is a MoE block (E), which is not covered (Nemotron 3's experts: "
                    "non-gated, behind a latent projection)")
        if block == "-":
            return f"block {i} is an MLP block after no Mamba-2 or attention block, which a rooflinec layer cannot hold"
        if block == "*" and after != "-":
            return (f"block {i} is an attention block with no MLP block after it, which a rooflinec layer "
                    "cannot hold (only Mamba-2 layers have a no-feed-forward form)")
        paired = after == "-"
        layers.append({"M": "mamba" if paired else "mamba_no_ffn", "*": "full"}[block])
        i += 2 if paired else 1
    return layers


def _nemotron_h(r: Reader) -> dict:
    blocks, key = _blocks(r)
    given = r.data.get("num_hidden_layers")
    r.used.add("num_hidden_layers")
    if given is not None and given != len(blocks):
        raise SpecError([r.problem("num_hidden_layers", f"num_hidden_layers {json.dumps(given)} is not the "
                                                        f"{len(blocks)} blocks of {key}")])
    layers = nemotron_layers(blocks)
    if isinstance(layers, str):
        raise SpecError([r.problem(key, layers)])
    d_model, heads = r.need("hidden_size"), r.need("num_attention_heads")
    width = "head_dim" if r.data.get("head_dim") is not None else "attention_head_dim"
    head_dim = r.need(width) if r.data.get(width) is not None else d_model // heads
    r.used.update({"head_dim", "attention_head_dim"})
    act = r.get("mlp_hidden_act", "relu2")
    if act != "relu2":
        raise SpecError([r.problem("mlp_hidden_act", f"activation {json.dumps(act)} is not covered; covered: relu2 "
                                                     "(NemotronHMLP: up_proj, the activation, down_proj)")])
    if r.get("mamba_hidden_act", "silu") != "silu":
        raise SpecError([r.problem("mamba_hidden_act", "the Mamba-2 kind gates by silu(z); covered: silu")])
    bias = r.flag("attention_bias", False)
    spec = {"d_model": d_model, "n_layers": len(layers), "vocab": r.need("vocab_size")}
    if r.data.get("max_position_embeddings") is not None:
        spec["max_context"] = r.need("max_position_embeddings")
    spec["attention"] = {"n_heads": heads, "n_kv_heads": _optional(r, "num_key_value_heads", heads),
                         "head_dim": head_dim, "qkv_bias": bias, "out_bias": bias}
    pattern = layers[:_period(layers)]
    if len(pattern) > PERIOD:
        raise SpecError([r.problem(key, f"a layer pattern repeating every {len(pattern)} layers is not modelled; "
                                        f"at most {PERIOD}")])
    if set(pattern) != {"full"}:
        spec["attention"]["pattern"] = pattern
    if "mamba" in pattern or "mamba_no_ffn" in pattern:
        spec["mamba"] = kind_section(r, "mamba")
    else:
        keys = (k[0] if isinstance(k, tuple) else k for k in kinds.registry()["mamba"].hf.values())
        for key in (k for k in keys if k in r.data):
            r.used.add(key)
            r.notes.append(r.doc.problem((key,), f"{COSTLESS} (no block is Mamba-2: the shape is unused)", at_key=True))
    spec.update(mlp={"kind": "gelu", "d_ff": r.need("intermediate_size"), "bias": r.flag("mlp_bias", False)},
                norm={"kind": "rmsnorm", "bias": False}, positions="none",
                tied_embeddings=r.flag("tie_word_embeddings", False))
    _nemotron_notes(r, layers, d_model)
    return spec


def _nemotron_notes(r: Reader, layers: list, d_model: int) -> None:
    """What the Nemotron-H mapping leaves out or adds, each on its field."""
    bare = layers.count("mamba_no_ffn")
    if bare:
        key = "layers_block_type" if "layers_block_type" in r.data else "hybrid_override_pattern"
        r.notes.append(r.doc.problem((key,), f"not modelled; this leaves out nothing but adds: the {bare} Mamba-2 "
                                             f"blocks with no MLP block after them are layers of two sublayers here, "
                                             f"each with a second norm ({bare} x {d_model} = {bare * d_model:,} "
                                             "parameters) and residual add", at_key=True))
    r.note("mlp_hidden_act", "squared ReLU's own FLOPs: costed as the GELU kind's one pass over d_ff (the same up "
                             "and down matrices)")
    if r.flag("use_bias", False):
        r.note("use_bias", "the biases of the Mamba-2 in_proj and out_proj")
    else:
        r.used.add("use_bias")
    if r.data.get("sliding_window") is not None:
        r.note("sliding_window", "a sliding window on the attention layers; costed as full attention")
    r.used.add("sliding_window")
    for key in ("num_nextn_predict_layers", "mtp_layers_block_type", "mtp_hybrid_override_pattern"):
        if count_free(r, key):
            r.note(key, "the multi-token-prediction layers (speculative decoding), which transformers does not load")
    for key, why in NEMOTRON_FREE.items():
        if key in r.data and key not in r.used:
            r.used.add(key)
            r.notes.append(r.doc.problem((key,), f"{COSTLESS} ({why})", at_key=True))


def count_free(r: Reader, key: str) -> bool:
    """The field is set to something other than nothing (0, null, an empty list)."""
    value = r.data.get(key)
    r.used.add(key)
    return value not in (None, 0, [], "")


JAMBA_FREE = {
    "use_mamba_kernels": "a library switch (the fused kernels)",
    "num_logits_to_keep": "the prompt logits computed: the study's logits convention says it",
    "router_aux_loss_coef": "the router's load-balancing loss, for training",
    "output_router_logits": "returns the router's logits, for training",
}


def _jamba(r: Reader) -> dict:
    n = r.need("num_hidden_layers")
    # JambaConfig.layers_block_type: "attention" where i % attn_layer_period == attn_layer_offset,
    # else "mamba" (JambaMambaMixer: Mamba-1); layers_num_experts: num_experts where
    # i % expert_layer_period == expert_layer_offset, else 1 (JambaDecoderLayer:
    # JambaSparseMoeBlock, else JambaMLP)
    attn_period, attn_offset = _rule(r, "attn_layer_period", "attn_layer_offset", 8, 4)
    spec = _decoder(r)
    if attn_period > PERIOD and n > attn_offset:
        raise SpecError([r.problem("attn_layer_period", f"a layer pattern repeating every {attn_period} layers "
                                                        f"is not modelled; at most {PERIOD}")])
    # the layers over two periods hold the shortest pattern of all n (the sequence repeats every period)
    layers = ["full" if i % attn_period == attn_offset else "mamba1" for i in range(min(n, 2 * attn_period))]
    pattern = layers[:_period(layers)]
    if "mamba1" in pattern:
        if spec["mlp"]["kind"] != "swiglu":   # the mixer's conv activation and gate are hidden_act
            raise SpecError([r.problem("hidden_act", "the Mamba-1 kind gates by silu(z) (JambaMambaMixer reads "
                                                     "hidden_act); covered: silu")])
        spec["attention"]["pattern"] = pattern
        spec["mamba1"] = _mamba1(r, spec["d_model"])
    else:
        for key in ("mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_dt_rank", "mamba_conv_bias",
                    "mamba_proj_bias"):
            if key in r.data:
                r.used.add(key)
                r.notes.append(r.doc.problem((key,), f"{COSTLESS} (no layer is Mamba-1: the shape is unused)",
                                             at_key=True))
    every, offset = _rule(r, "expert_layer_period", "expert_layer_offset", 2, 1)
    experts = r.need("num_experts") if r.data.get("num_experts") is not None else 16
    r.used.add("num_experts")
    if experts > 1 and offset < n:
        spec["moe"] = {"experts": experts, "top_k": _optional(r, "num_experts_per_tok", 2),
                       "d_expert": spec["mlp"]["d_ff"], "every": every, **({"offset": offset} if offset else {})}
    else:
        r.used.add("num_experts_per_tok")
    if r.data.get("sliding_window") is not None:   # JambaFlashAttention2 only
        r.note("sliding_window", "a sliding window on the attention layers (JambaFlashAttention2 only); costed as "
                                 "full attention")
    r.used.add("sliding_window")
    for key, why in JAMBA_FREE.items():
        if key in r.data:
            r.used.add(key)
            r.notes.append(r.doc.problem((key,), f"{COSTLESS} ({why})", at_key=True))
    spec["positions"] = "none"   # JambaAttention applies no rotary positions
    return spec


def _mamba1(r: Reader, d_model: int) -> dict:
    """The mamba1 section (rooflinec.model.kinds.mamba1: `hf`, JambaConfig's names and defaults:
    mamba_d_state 16, mamba_d_conv 4, mamba_expand 2, mamba_dt_rank "auto" = ceil(hidden_size / 16));
    Jamba normalises dt, B and C (JambaMambaMixer's dt_layernorm, b_layernorm, c_layernorm)."""
    defaults = {"mamba_expand": 2, "mamba_d_state": 16, "mamba_d_conv": 4}
    section = {}
    for field_, key in kinds.registry()["mamba1"].hf.items():
        if isinstance(key, tuple):
            section[field_] = _defaulted(r, *key)
        elif key == "mamba_dt_rank" and r.data.get(key) in (None, "auto"):
            r.used.add(key)
            section[field_] = -(-d_model // 16)
        elif r.data.get(key) is None and key in defaults:
            r.used.add(key)
            section[field_] = defaults[key]
        else:
            section[field_] = r.need(key)
    return {**section, "dt_bc_norms": True}


def _rule(r: Reader, period_key: str, offset_key: str, period: int, offset: int) -> tuple[int, int]:
    """A (period, offset) layer rule; JambaConfig._check_supported_offset refuses offset >= period."""
    period = r.need(period_key) if r.data.get(period_key) is not None else period
    offset = count(r, offset_key) if r.data.get(offset_key) is not None else offset
    r.used.update({period_key, offset_key})
    if offset >= period:
        raise SpecError([r.problem(offset_key, f"{offset_key} {offset} must be smaller than {period_key} {period} "
                                               "(JambaConfig)")])
    return period, offset


ARCHITECTURES = {"NemotronHForCausalLM": _nemotron_h, "JambaForCausalLM": _jamba}
