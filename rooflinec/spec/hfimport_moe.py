"""`rooflinec import` for mixture-of-experts, latent- and linear-attention architectures:
Mixtral, Qwen3-MoE, Qwen3-Next, DeepSeek-V3 (and Kimi-K2, its class), GLM-4.5 (Glm4Moe),
MiniMax-M2, MiniMax-M1 and Text-01 (lightning attention, seven layers to one softmax),
Qwen3.5-MoE (Qwen3-Next's layers, every one MoE), Llama 4, gpt-oss and DeepSeek-V3.2 (DeepSeek
Sparse Attention on V3's latent attention). Each maps the shared decoder fields
(hfconfig._decoder), then its experts (and DeepSeek's MLA, Qwen3-Next's Gated DeltaNet layers,
MiniMax's lightning layers); every other field is mapped, costs nothing, or is noted. Each rule
cites the transformers class it mirrors (tests/test_import_rules.py checks them layer by layer)."""

from __future__ import annotations

import json

from rooflinec.base.errors import SpecError
from rooflinec.model import kinds, quant
from rooflinec.spec.hfconfig import COSTLESS, Reader, _decoder, _layer_types, _period, _window, count, kind_section

# routing and training switches that change no FLOP or byte count of inference
ROUTING_FREE = ("router_aux_loss_coef", "output_router_logits", "norm_topk_prob", "aux_loss_alpha",
                "seq_aux", "routed_scaling_factor", "n_group", "topk_group", "topk_method", "ep_size",
                "scoring_func", "swiglu_limit", "initial_context_length", "experts_per_token")


def _free(r: Reader) -> None:
    r.used.update(k for k in ROUTING_FREE if k in r.data)


def _quantized(r: Reader) -> None:
    config = r.data.get("quantization_config")
    method = config.get("quant_method", "?") if isinstance(config, dict) else "?"
    stored = quant.checkpoint_formats(config)
    as_study = ("{" + ", ".join(f"{k}: {v}" for k, v in stored.items()) + "}") if stored else "its formats"
    r.note("quantization_config", f"the checkpoint's {method} storage: a study's `quantization: "
                                  f"{as_study}` stores it (the weights' formats are the study's)")


def _mixtral(r: Reader) -> dict:
    spec = _decoder(r)   # intermediate_size is each expert's width; no layer is dense
    spec["moe"] = {"experts": r.need("num_local_experts"), "top_k": r.need("num_experts_per_tok"),
                   "d_expert": spec["mlp"]["d_ff"]}
    _free(r)
    _window(r, spec)
    return spec


def _qwen3_moe(r: Reader) -> dict:
    spec = _decoder(r)
    spec["attention"]["qk_norm"] = True   # Qwen3MoeAttention: q_norm, k_norm = RMSNorm(head_dim)
    # transformers' Qwen3MoeDecoderLayer: layer i is sparse when (i + 1) % decoder_sparse_step == 0
    # (and layer_idx not in mlp_only_layers)
    step = r.need("decoder_sparse_step")
    spec["moe"] = {"experts": r.need("num_experts"), "top_k": r.need("num_experts_per_tok"),
                   "d_expert": r.need("moe_intermediate_size"), "every": step,
                   **({"offset": step - 1} if step > 1 else {})}
    first = _mlp_only(r.get("mlp_only_layers") or [], step, spec["n_layers"])
    if first is None:
        r.note("mlp_only_layers", "that the listed layers are dense (they are not the leading layers "
                                  "of the step rule); every layer the step makes sparse is costed as MoE")
    elif first:
        spec["moe"]["first_dense"] = first
    _free(r)
    _window(r, spec)
    return spec


def _mlp_only(dense, step: int, n_layers: int) -> int | None:
    """mlp_only_layers as `first_dense`: the first sparse layer, where the sparse layers left are
    exactly the step rule's from there on (a leading run of dense layers); else None. In closed
    form over the listed layers: a billion layers cost as little as two."""
    if not (isinstance(dense, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in dense)):
        return None
    removed = sorted({i for i in dense if 0 <= i < n_layers and (i + 1) % step == 0})
    if removed != [step - 1 + j * step for j in range(len(removed))]:
        return None   # a rule layer dense in the middle of the sparse ones
    return min(step - 1 + len(removed) * step, n_layers) if removed else 0


MTP_MOST = 64   # model.schema.json's mtp_layers maximum


def _deepseek_v3(r: Reader) -> dict:
    spec = _decoder(r)
    spec["attention"]["head_dim"] = r.need("qk_nope_head_dim") + r.need("qk_rope_head_dim")
    spec["mla"] = kind_section(r, "mla")
    spec["moe"] = {"experts": r.need("n_routed_experts"), "top_k": r.need("num_experts_per_tok"),
                   "d_expert": r.need("moe_intermediate_size"),
                   "shared_experts": count(r, "n_shared_experts"),
                   "first_dense": count(r, "first_k_dense_replace"), "every": r.need("moe_layer_freq")}
    mtp = count(r, "num_nextn_predict_layers")   # DeepseekV3 MTP modules: counted, not active
    if mtp > MTP_MOST:
        raise SpecError([r.problem("num_nextn_predict_layers", f"{mtp} multi-token-prediction modules; a model "
                                                               f"spec's mtp_layers holds at most {MTP_MOST}")])
    if mtp:
        spec["mtp_layers"] = mtp
    _quantized(r)
    _free(r)
    return spec


def _deepseek_v32(r: Reader) -> dict:
    # DeepseekV32Config is DeepseekV3Config plus the lightning indexer's index_n_heads,
    # index_head_dim and index_topk (DeepseekV32Indexer, on every layer's latent attention)
    spec = _deepseek_v3(r)
    spec["sparse_attention"] = kind_section(r, "dsa")
    if "indexer_rope_interleave" in r.data:   # the rotary layout of the indexer's d_rope: same count
        r.used.add("indexer_rope_interleave")
        r.notes.append(r.doc.problem(("indexer_rope_interleave",), f"{COSTLESS} (how the indexer's rotary "
                                                                    "dimensions are paired)", at_key=True))
    return spec


def _gpt_oss(r: Reader) -> dict:
    spec = _decoder(r)
    spec["mlp"]["bias"] = True   # expert gate/up and down biases, and the router's
    spec["moe"] = {"experts": r.need("num_local_experts"), "top_k": r.need("num_experts_per_tok"),
                   "d_expert": spec["mlp"]["d_ff"]}
    # layer_types (transformers' GptOssDecoderLayer: one per layer; sliding_attention layers
    # use sliding_window); absent: alternating from a sliding layer 0, the config's default
    if not _layer_types(r, spec):
        _window(r, spec, alternating=True)
    spec["attention"]["sinks"] = True   # one learned logit per head in every layer
    _quantized(r)
    _free(r)
    return spec


def _per_layer(r: Reader, key: str, n: int, accepted: dict) -> list | None:
    """A per-layer list field as its entries mapped by `accepted` (None where the config leaves
    it out); refused, located, unless it has one accepted entry per layer."""
    items = r.get(key)
    if items is None:
        return None
    if not isinstance(items, list) or len(items) != n or any(
            not isinstance(i, (str, int)) or isinstance(i, bool) or i not in accepted for i in items):
        raise SpecError([r.problem(key, f"expected a list of {n} entries (num_hidden_layers), each one of "
                                        f"{', '.join(json.dumps(a) for a in accepted)}")])
    return [accepted[i] for i in items]


def _repeating(items: list) -> list:
    """A per-layer list as its shortest repeating period (rooflinec's patterns repeat from layer 0)."""
    return items[:_period(items)]


def _every_kth(r: Reader, key: str, n: int, others: str, kth: str) -> list:
    """The period of a per-layer rule "`kth` where (i + 1) % interval == 0, else `others`"
    (Qwen3-Next's full_attention_interval, Llama 4's no_rope_layer_interval), in closed form:
    an interval of a billion layers costs nothing to read."""
    interval = r.need(key) if r.data.get(key) is not None else 4
    r.used.add(key)
    if interval > n:
        return [others]
    if interval > PERIOD:
        raise SpecError([r.problem(key, f"a layer pattern repeating every {interval} layers is not modelled; "
                                        f"at most {PERIOD}")])
    return [others] * (interval - 1) + [kth]


PERIOD = 1024   # the longest attention pattern a model spec holds (model.schema.json)


NEXT_MIXERS = {"linear_attention": "linear", "full_attention": "full"}


def _qwen3_next(r: Reader) -> dict:
    spec = _qwen3_moe(r)   # the sparse-step rule is Qwen3-MoE's (Qwen3NextDecoderLayer)
    # Qwen3NextAttention: q_proj yields the queries and a gate, attn_output * sigmoid(gate)
    _next_layers(r, spec, gated=True)
    return spec


def _next_layers(r: Reader, spec: dict, gated: bool) -> None:
    """Qwen3-Next's (and Qwen3.5's) mixers, output gate and shared expert."""
    n = spec["n_layers"]
    # Qwen3NextConfig: layer_types, else "linear_attention" where (i + 1) % full_attention_interval
    # is non-zero and "full_attention" where it is zero (interval default 4)
    given = _per_layer(r, "layer_types", n, NEXT_MIXERS)
    pattern = _repeating(given) if given is not None else _every_kth(r, "full_attention_interval", n, "linear", "full")
    r.used.add("full_attention_interval")
    if "linear" in pattern:
        spec["attention"]["pattern"] = pattern
        spec["linear_attention"] = kind_section(r, "linear")
    else:
        for key in (k for k in kinds.registry()["linear"].hf.values() if k in r.data):
            r.used.add(key)
            r.notes.append(r.doc.problem((key,), f"{COSTLESS} (no layer is linear_attention: the Gated "
                                                 "DeltaNet shape is unused)", at_key=True))
    if gated:
        spec["attention"]["output_gate"] = True
    shared = count(r, "shared_expert_intermediate_size")
    if shared:   # Qwen2MoeSparseMoeBlock: one shared expert and its sigmoid shared_expert_gate
        spec["moe"].update(shared_experts=1, d_shared=shared, shared_gate=True)


# Qwen3.5's own fields that change no count, and why
QWEN35_FREE = {
    "mamba_ssm_dtype": "the recurrent state's dtype: a study's kv_cache format stores it",
    "mtp_use_dedicated_embeddings": "whether the multi-token-prediction layer has its own embedding (not loaded)",
}


def _qwen3_5_moe(r: Reader) -> dict:
    # transformers' Qwen3_5MoeTextConfig is Qwen3NextConfig without intermediate_size,
    # decoder_sparse_step and mlp_only_layers: Qwen3_5MoeDecoderLayer puts Qwen3_5MoeSparseMoeBlock
    # (Qwen3-Next's) on every layer, Qwen3_5MoeGatedDeltaNet (in_proj_qkv, in_proj_z, in_proj_b,
    # in_proj_a: Qwen3-Next's in_proj_qkvz and in_proj_ba split, the same weights and FLOPs, so the
    # linear kind as it is, its two fused GEMMs as engines merge them) on the linear_attention
    # layers and Qwen3NextAttention (gated where attn_output_gate) on the full ones
    spec = _decoder(r, d_ff_key="moe_intermediate_size")   # no dense layer: the experts' width
    spec["attention"]["qk_norm"] = True   # Qwen3NextAttention: q_norm, k_norm = RMSNorm(head_dim)
    _rope_parameters(r, spec)
    spec["moe"] = {"experts": r.need("num_experts"), "top_k": r.need("num_experts_per_tok"),
                   "d_expert": r.need("moe_intermediate_size")}
    _next_layers(r, spec, gated=r.flag("attn_output_gate", True))
    r.note("mtp_num_hidden_layers", "the multi-token-prediction layer (speculative decoding), which "
                                    "Qwen3_5MoeForCausalLM does not load")
    for key, why in QWEN35_FREE.items():
        if key in r.data:
            r.used.add(key)
            r.notes.append(r.doc.problem((key,), f"{COSTLESS} ({why})", at_key=True))
    _free(r)
    return spec


def _rope_parameters(r: Reader, spec: dict) -> None:
    """rope_parameters (transformers' newer home of rope_theta, rope_type and partial_rotary_factor;
    Qwen3.5's mrope_section and mrope_interleaved split each head's rotary dimensions among
    time, height and width for images and video: for text the three positions are one, the same
    RoPE): its partial_rotary_factor must be the one read beside it."""
    rope = r.get("rope_parameters")
    if rope is None:
        return
    turned = spec["attention"].get("rotary_dim", spec["attention"]["head_dim"])
    factor = rope.get("partial_rotary_factor", turned / spec["attention"]["head_dim"]) if isinstance(rope, dict) else None
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
            or max(int(spec["attention"]["head_dim"] * factor), 1) != turned:
        raise SpecError([r.problem("rope_parameters", f"expected a mapping whose partial_rotary_factor turns the "
                                                      f"{turned} dimensions partial_rotary_factor does")])
    r.notes.append(r.doc.problem(("rope_parameters",), f"{COSTLESS} (RoPE's base frequency and type, and mRoPE's "
                                                       "split of the rotary dimensions among time, height and "
                                                       "width: for text one position, the same RoPE)", at_key=True))


def _glm4_moe(r: Reader) -> dict:
    spec = _decoder(r)
    # Glm4MoeAttention: q, k, v biased by attention_bias, o_proj never; q_norm/k_norm =
    # RMSNorm(head_dim) where use_qk_norm
    spec["attention"]["out_bias"] = False
    if r.flag("use_qk_norm", False):
        spec["attention"]["qk_norm"] = True
    # Glm4MoeDecoderLayer: layer_idx >= first_k_dense_replace is a MoE layer; its shared
    # experts are one MLP of moe_intermediate_size * n_shared_experts
    spec["moe"] = {"experts": r.need("n_routed_experts"), "top_k": r.need("num_experts_per_tok"),
                   "d_expert": r.need("moe_intermediate_size"), "shared_experts": count(r, "n_shared_experts"),
                   "first_dense": count(r, "first_k_dense_replace")}
    r.note("num_nextn_predict_layers", "the multi-token-prediction layer (speculative decoding), which "
                                       "transformers does not load")
    _quantized(r)
    _free(r)
    return spec


def _minimax_m2(r: Reader) -> dict:
    spec = _decoder(r)
    # MiniMaxM2SparseMoeBlock: num_local_experts experts of intermediate_size, top
    # num_experts_per_tok, a sigmoid router with a routing bias; every layer sparse
    spec["moe"] = {"experts": r.need("num_local_experts"), "top_k": r.need("num_experts_per_tok"),
                   "d_expert": spec["mlp"]["d_ff"]}
    if count(r, "shared_intermediate_size"):
        r.note("shared_intermediate_size", "a shared expert of this width (MiniMax-M2 releases set 0)")
    kinds = _per_layer(r, "attn_type_list", spec["n_layers"], MINIMAX_MIXERS) or ["full"]
    if "lightning" in kinds:   # MiniMaxM2Attention on every layer: lightning layers are M1's
        raise SpecError([r.problem("attn_type_list", "lightning attention (attn_type 0) is not a layer of "
                                                     "MiniMaxM2ForCausalLM (MiniMaxM2Attention on every layer); "
                                                     "MiniMaxM1ForCausalLM / MiniMaxText01ForCausalLM map it")])
    # MiniMaxM2Attention (FlexOlmoAttention's): q_norm = RMSNorm(num_attention_heads * head_dim) and
    # k_norm = RMSNorm(num_key_value_heads * head_dim) on every layer, one norm over all heads at
    # once (the release's qk_norm_type per_layer); transformers does not read use_qk_norm
    if r.flag("use_qk_norm", True):
        qk = r.get("qk_norm_type", "per_layer")
        if qk != "per_layer":
            raise SpecError([r.problem("qk_norm_type", f"qk_norm_type {json.dumps(qk)} is not covered; covered: "
                                                       "per_layer")])
        spec["attention"]["qk_norm"] = "layer"
    r.used.add("qk_norm_type")
    _rotary(r, spec)
    for key in ("use_mtp", "num_mtp_modules", "mtp_transformer_layers"):
        r.note(key, "the multi-token-prediction modules (speculative decoding)")
    r.used.update(k for k in ("use_routing_bias",) if k in r.data)   # E biases on the router scores
    _quantized(r)
    _free(r)
    return spec


def _rotary(r: Reader, spec: dict) -> None:
    """rotary_dim: the dimensions of each head RoPE turns (MiniMax: 64 of 128)."""
    if r.data.get("rotary_dim") is not None:
        rotary = r.need("rotary_dim")
        if rotary > spec["attention"]["head_dim"]:
            raise SpecError([r.problem("rotary_dim", f"rotary_dim {rotary} exceeds head_dim "
                                                     f"{spec['attention']['head_dim']}")])
        if rotary < spec["attention"]["head_dim"]:
            spec["attention"]["rotary_dim"] = rotary
    r.used.add("rotary_dim")


MINIMAX_MIXERS = {1: "full", 0: "lightning"}   # attn_type_list: 1 softmax attention, 0 lightning

# MiniMaxM1DecoderLayer: residual * alpha + sublayer(x) * beta after each sublayer (DeepNorm's scales)
DEEPNORM = tuple(f"layernorm_{part}_{x}" for part in ("full_attention", "linear_attention", "mlp")
                 for x in ("alpha", "beta"))


def _minimax_m1(r: Reader) -> dict:
    # the release's modeling_minimax_m1.py (MiniMaxText01's architecture; transformers'
    # MiniMaxDecoderLayer): attn_type_list per layer, MiniMaxM1LightningAttention where 0 (heads
    # and head_dim as the softmax layers', blocks of block_size, BLOCK = 256 where absent) and
    # Mixtral's attention where 1, with RoPE over rotary_dim; every layer a Mixtral MoE of
    # num_local_experts experts of intermediate_size, top num_experts_per_tok
    spec = _decoder(r)
    att = spec["attention"]
    spec["moe"] = {"experts": r.need("num_local_experts"), "top_k": r.need("num_experts_per_tok"),
                   "d_expert": spec["mlp"]["d_ff"]}
    given = _per_layer(r, "attn_type_list", spec["n_layers"], MINIMAX_MIXERS)
    pattern = _repeating(given) if given is not None else ["full"]
    if "lightning" in pattern:
        att["pattern"] = pattern
        spec["lightning_attention"] = {"heads": att["n_heads"], "head_dim": att["head_dim"],
                                       **kind_section(r, "lightning")}
    _rotary(r, spec)
    _shared_expert(r, spec)
    for key in DEEPNORM:
        value = r.data.get(key)
        if value is not None and value != 1:
            r.note(key, f"the scale {value} of the residual or sublayer output before their add: one multiply "
                        "per element of d_model, per token and layer")
        elif key in r.data:
            r.used.add(key)
            r.notes.append(r.doc.problem((key,), f"{COSTLESS} (a scale of 1)", at_key=True))
    if r.data.get("postnorm") is not None:   # the residual taken after the norm: the same norm and add
        r.used.add("postnorm")
        r.notes.append(r.doc.problem(("postnorm",), f"{COSTLESS} (where the residual is taken, before or after "
                                                    "the norm: the same norm and add)", at_key=True))
    if r.data.get("sliding_window") is not None:
        r.note("sliding_window", "a sliding window on the softmax layers; costed as full attention")
    r.used.update(k for k in ("sliding_window", "router_jitter_noise") if k in r.data)
    _free(r)
    return spec


def _shared_expert(r: Reader, spec: dict) -> None:
    """shared_intermediate_size (a width, or one per layer as a list, MiniMax-Text-01's): a shared
    MLP of that width beside the experts, mixed by a sigmoid of X W[d_model, 1] (the release's
    `coefficient`, shared_moe_mode sigmoid); 0 everywhere is none."""
    width = r.get("shared_intermediate_size")
    widths = width if isinstance(width, list) else [width]
    if any(w is not None and (not isinstance(w, int) or isinstance(w, bool) or w < 0) for w in widths) \
            or len(set(widths)) > 1:
        raise SpecError([r.problem("shared_intermediate_size", "expected one whole number >= 0 (or a list of one "
                                                               "value): a shared expert's width per layer that "
                                                               "changes is not modelled")])
    mode = r.get("shared_moe_mode", "sigmoid")
    if widths and widths[0]:
        spec["moe"].update(shared_experts=1, d_shared=widths[0], shared_gate=True)
        if mode != "sigmoid":
            r.note("shared_moe_mode", f"the {mode} mixing of the shared expert, costed as the sigmoid gate")
    elif "shared_moe_mode" in r.data:
        r.notes.append(r.doc.problem(("shared_moe_mode",), f"{COSTLESS} (no shared expert: "
                                                           "shared_intermediate_size is 0)", at_key=True))


def _llama4(r: Reader) -> dict:
    spec = _decoder(r)
    n = spec["n_layers"]
    # Llama4TextConfig: no_rope_layers (1: the layer uses RoPE), else 1 where
    # (i + 1) % no_rope_layer_interval != 0; Llama4TextAttention skips RoPE where it is 0
    given = _per_layer(r, "no_rope_layers", n, {1: False, 0: True})
    nope = _repeating(given) if given is not None else _every_kth(r, "no_rope_layer_interval", n, False, True)
    r.used.add("no_rope_layer_interval")
    if any(nope):
        spec["attention"]["nope"] = nope
    # layer_types (else chunked_attention on the RoPE layers, full_attention on the NoPE ones)
    # with chunks of attention_chunk_size: a chunk's queries see its earlier keys only, costed
    # as the sliding bound of W = the chunk (rooflinec.model.kinds.windowed)
    given = _per_layer(r, "layer_types", n, {"chunked_attention": "chunked", "full_attention": "full"})
    kinds = _repeating(given) if given is not None else ["full" if x else "chunked" for x in nope]
    if "chunked" in kinds and r.get("attention_chunk_size") is not None:
        spec["attention"].update(window=r.need("attention_chunk_size"), pattern=kinds)
    # Llama4TextDecoderLayer: layer_idx in moe_layers is Llama4TextMoe (router, experts of
    # intermediate_size, one shared expert of intermediate_size), the rest Llama4TextMLP of
    # intermediate_size_mlp; moe_layers defaults to every interleave_moe_layer_step-th from step - 1
    step = r.need("interleave_moe_layer_step") if r.data.get("interleave_moe_layer_step") is not None else 1
    r.used.add("interleave_moe_layer_step")
    given = r.get("moe_layers")
    every = {"every": step, **({"offset": step - 1} if step > 1 else {})} if given is None else _every(r, given, n)
    d_expert = spec["mlp"]["d_ff"]
    dense = r.data.get("intermediate_size_mlp") is not None
    spec["mlp"]["d_ff"] = r.need("intermediate_size_mlp") if dense else d_expert
    r.used.add("intermediate_size_mlp")
    spec["moe"] = {"experts": r.need("num_local_experts"), "top_k": r.need("num_experts_per_tok"),
                   "d_expert": d_expert, "shared_experts": 1, **every}
    if r.flag("use_qk_norm", False):
        r.note("use_qk_norm", "the weightless L2 norm of q and k on the RoPE layers (about 4 FLOPs an element of "
                              "q and k)")
    if r.data.get("attn_temperature_tuning"):
        r.note("attn_temperature_tuning", "the NoPE layers' query scaling by log1p(floor((pos + 1) / "
                                          "floor_scale)) * attn_scale + 1 (one multiply per query element)")
    r.used.update(k for k in ("floor_scale", "attn_scale", "router_jitter_noise", "for_llm_compressor")
                  if k in r.data)
    _quantized(r)
    _free(r)
    return spec


def _every(r: Reader, layers, n: int) -> dict:
    """moe_layers as MoE's every/offset (or first_dense): the listed layers must be exactly those
    i >= first with i % every == offset; else refused, located."""
    whole = lambda i: isinstance(i, int) and not isinstance(i, bool)   # noqa: E731
    if not (isinstance(layers, list) and layers and all(whole(i) for i in layers)):
        raise SpecError([r.problem("moe_layers", "expected a non-empty list of layer indices")])
    first, every = layers[0], (layers[1] - layers[0] if len(layers) > 1 else n)
    rule = range(first, n, every) if every >= 1 and 0 <= first < n else range(0)
    if len(rule) != len(layers) or any(a != b for a, b in zip(rule, layers)):
        raise SpecError([r.problem("moe_layers", "these MoE layers are not every k-th layer from one layer on, "
                                                 "which is what a model spec's moe.every/offset/first_dense express")])
    offset = first % every
    first_dense = first - offset if first >= every else 0
    return {"every": every, **({"offset": offset} if offset else {}),
            **({"first_dense": first_dense} if first_dense else {})}


ARCHITECTURES = {"MixtralForCausalLM": _mixtral, "Qwen3MoeForCausalLM": _qwen3_moe,
                 "Qwen3NextForCausalLM": _qwen3_next, "Qwen3_5MoeForCausalLM": _qwen3_5_moe,
                 "DeepseekV3ForCausalLM": _deepseek_v3,
                 "DeepseekV32ForCausalLM": _deepseek_v32,
                 "Glm4MoeForCausalLM": _glm4_moe, "MiniMaxM2ForCausalLM": _minimax_m2,
                 "MiniMaxM1ForCausalLM": _minimax_m1, "MiniMaxText01ForCausalLM": _minimax_m1,
                 "Llama4ForCausalLM": _llama4, "GptOssForCausalLM": _gpt_oss}
