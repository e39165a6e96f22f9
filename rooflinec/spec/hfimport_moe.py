"""`rooflinec import` for mixture-of-experts and latent-attention architectures: Mixtral,
Qwen3-MoE, DeepSeek-V3 and gpt-oss. Each maps the shared decoder fields (hfconfig._decoder),
then its experts (and DeepSeek's MLA); every other field is mapped, costs nothing, or is noted."""

from __future__ import annotations

from rooflinec.model import quant
from rooflinec.spec.hfconfig import Reader, _decoder, _layer_types, _window, count, kind_section

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
    spec["attention"]["qk_norm"] = True
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
    exactly the step rule's from there on (a leading run of dense layers); else None."""
    if not (isinstance(dense, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in dense)):
        return None
    rule = [i for i in range(n_layers) if (i + 1) % step == 0]
    sparse = [i for i in rule if i not in dense]
    if sparse == rule:
        return 0
    first = sparse[0] if sparse else n_layers
    return first if sparse == [i for i in rule if i >= first] else None


def _deepseek_v3(r: Reader) -> dict:
    spec = _decoder(r)
    spec["attention"]["head_dim"] = r.need("qk_nope_head_dim") + r.need("qk_rope_head_dim")
    spec["mla"] = kind_section(r, "mla")
    spec["moe"] = {"experts": r.need("n_routed_experts"), "top_k": r.need("num_experts_per_tok"),
                   "d_expert": r.need("moe_intermediate_size"),
                   "shared_experts": count(r, "n_shared_experts"),
                   "first_dense": count(r, "first_k_dense_replace"), "every": r.need("moe_layer_freq")}
    r.note("num_nextn_predict_layers", "the multi-token-prediction module (speculative decoding)")
    _quantized(r)
    _free(r)
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


ARCHITECTURES = {"MixtralForCausalLM": _mixtral, "Qwen3MoeForCausalLM": _qwen3_moe,
                 "DeepseekV3ForCausalLM": _deepseek_v3, "GptOssForCausalLM": _gpt_oss}
