"""The model built by Hugging Face transformers (GPT-2 layout), mapped onto the spec's ops by
module and by op.

A profiler range opens around each mapped module's forward (forward hooks): ln_1 is attn_norm,
c_attn the fused QKV GEMM, and so on. Work inside a module's forward but outside its mapped
children is named by the group it belongs to: the eager attention kernels (QK^T, scale, mask,
softmax, P.V) and the block's residual adds, each group set against the sum of its ops'
rooflines. Everything else the step runs is left outside every range: unmapped, and listed.
"""

from __future__ import annotations

import inspect
import re

from rooflinec.base.errors import RooflineError
from rooflinec.measure.reference import PREFIX

# transformers' GPT-2 computes q, k and v in one GEMM (c_attn) with its bias in the GEMM
# (Conv1D is an addmm), and logits for the last token only when asked (logits_to_keep=1)
CONVENTIONS = {"qkv": "fused", "bias": "in_gemm", "logits": "last", "causal_halving": False}
MODULES = (   # module name pattern -> the spec op (or group) its forward is
    (r"transformer\.wte", "embedding"), (r"transformer\.wpe", "pos_embedding"),
    (r"transformer\.h\.\d+\.ln_1", "attn_norm"), (r"transformer\.h\.\d+\.attn\.c_attn", "qkv_proj"),
    (r"transformer\.h\.\d+\.attn\.c_proj", "o_proj"), (r"transformer\.h\.\d+\.attn", "attention"),
    (r"transformer\.h\.\d+\.ln_2", "mlp_norm"), (r"transformer\.h\.\d+\.mlp\.c_fc", "up_proj"),
    (r"transformer\.h\.\d+\.mlp\.act", "gelu"), (r"transformer\.h\.\d+\.mlp\.c_proj", "down_proj"),
    (r"transformer\.h\.\d+", "residuals"), (r"transformer\.ln_f", "final_norm"), (r"lm_head", "lm_head"))
BY_OP = {"aten::add": "embed_add"}   # outside every module: token + position embeddings
GROUPS = {"attention": ("qk_matmul", "scale", "causal_mask", "softmax", "pv_matmul"),
          "residuals": ("attn_residual", "mlp_residual")}


def fits(model) -> str | None:
    """Why transformers' GPT-2 cannot stand for `model`, or None when it can."""
    wanted = {"mlp_kind": "gelu", "norm_kind": "layernorm", "positions": "learned",
              "block": "sequential"}
    off = [f"{k} {getattr(model, k)}" for k, v in wanted.items() if getattr(model, k) != v]
    if model.n_kv_heads != model.n_heads or model.head_dim * model.n_heads != model.d_model:
        off.append("grouped KV heads or head_dim x n_heads != d_model")
    if not (model.qkv_bias and model.out_bias and model.mlp_bias and model.norm_bias):
        off.append("a layer without biases")
    if getattr(model, "operators", ()):
        off.append("declared operators")
    return ", ".join(off) or None


class Decoder:
    """transformers' GPT2LMHeadModel with random weights, one step at a time."""

    name = "Hugging Face transformers' GPT2LMHeadModel (eager attention)"
    groups = GROUPS
    by_op = BY_OP
    conventions = CONVENTIONS

    def __init__(self, torch, model, device, dtype, phase: str, batch: int, context: int,
                 seed: int = 0):
        import transformers
        why = fits(model)
        if why:
            raise RooflineError(f"{model.name}: transformers' GPT-2 cannot stand for it ({why}); "
                                "use --impl reference")
        torch.manual_seed(seed)
        config = transformers.GPT2Config(
            n_embd=model.d_model, n_layer=model.n_layers, n_head=model.n_heads,
            vocab_size=model.vocab, n_positions=model.max_context, n_inner=model.d_ff,
            tie_word_embeddings=model.tied_embeddings, attn_implementation="eager")
        self.t, self.phase, self.m, self.B, self.S = torch, phase, model, batch, context
        self.net = transformers.GPT2LMHeadModel(config).to(device=device, dtype=dtype).eval()
        T = 1 if phase == "decode" else context
        self.ids = torch.randint(0, model.vocab, (batch, T), device=device)
        self.cache = None
        if phase == "decode":   # `context` cached tokens, in a cache with room for one more
            self.cache = transformers.StaticCache(config=config, max_cache_len=context + 1)
            kv = torch.randn(batch, model.n_heads, context, model.head_dim, device=device,
                             dtype=dtype)
            for i in range(model.n_layers):
                self.cache.update(kv, kv, i)
        self._hooks(torch)
        # transformers 5 renames past_key_values to cache
        params = inspect.signature(self.net.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"

    def _hooks(self, torch):
        patterns = [(re.compile(p + "$"), op) for p, op in MODULES]
        for name, module in self.net.named_modules():
            op = next((op for p, op in patterns if p.match(name)), None)
            if op is None:
                continue
            def enter(mod, args, op=op):
                mod._rooflinec_range = torch.profiler.record_function(PREFIX + op)
                mod._rooflinec_range.__enter__()

            def leave(mod, args, out):
                mod._rooflinec_range.__exit__(None, None, None)
            module.register_forward_pre_hook(enter)
            module.register_forward_hook(leave)

    def step(self):
        kwargs = {"logits_to_keep": 1, "use_cache": self.cache is not None}
        if self.cache is not None:
            # each step writes the new token's k and v to the same slot, after the `context`
            # cached ones: the cache neither grows nor is copied (a DynamicCache copies it whole)
            for layer in self.cache.layers:
                layer.cumulative_length.fill_(self.S)
            kwargs[self.cache_arg] = self.cache
            kwargs["position_ids"] = self.t.full((self.B, 1), self.S, device=self.ids.device)
        return self.net(self.ids, **kwargs).logits
