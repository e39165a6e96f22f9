"""Latent attention (MLA, DeepSeek-V2/V3): queries and keys through low-rank latents, a cache of
the latent c_KV and the shared rotary key, r_kv + d_rope elements per token per layer whatever
the head count. The block's keys, symbols and ops live in rooflinec.model.mla (which cost/
also reads); this kind places them in a layer: parameters, cache, ops and what is stated.
"""

from __future__ import annotations

from rooflinec.model import mla
from rooflinec.model.build import linear, op
from rooflinec.model.component import layer
from rooflinec.model.kinds import Kind, of_slot
from rooflinec.model.mla import d_nope, d_rope, d_v, r_kv, r_q
from rooflinec.model.symbols import M, b, d_model, n_q


class LatentAttention(Kind):
    name = "mla"
    slot = "mixer"
    order = 20
    bulk = True
    key = "mla"
    schema = {'type': 'object',
     'additionalProperties': False,
     'required': ['kv_lora_rank', 'qk_nope_head_dim', 'qk_rope_head_dim', 'v_head_dim'],
     'description': 'Multi-head latent attention (DeepSeek-V2/V3): keys and values are decompressed from a '
                    'cached latent; the cache holds kv_lora_rank + qk_rope_head_dim elements per token per '
                    'layer. attention.head_dim is then qk_nope_head_dim + qk_rope_head_dim.',
     'properties': {'q_lora_rank': {'type': 'integer',
                                    'minimum': 0,
                                    'description': 'Query latent rank; 0 (default): queries projected directly.'},
                    'kv_lora_rank': {'type': 'integer', 'minimum': 1, 'description': 'KV latent rank (cached).'},
                    'qk_nope_head_dim': {'type': 'integer',
                                         'minimum': 1,
                                         'description': 'Per-head query/key width without rotary positions.'},
                    'qk_rope_head_dim': {'type': 'integer',
                                         'minimum': 1,
                                         'description': 'Rotary width of queries and of the one shared key '
                                                        '(cached).'},
                    'v_head_dim': {'type': 'integer', 'minimum': 1, 'description': 'Per-head value width.'}}}
    descriptions = mla.DESCRIPTIONS
    # its section from a Hugging Face config (DeepseekV3ForCausalLM's names)
    hf = {"q_lora_rank": ("q_lora_rank", 0), "kv_lora_rank": "kv_lora_rank", "qk_nope_head_dim": "qk_nope_head_dim",
          "qk_rope_head_dim": "qk_rope_head_dim", "v_head_dim": "v_head_dim"}

    def from_spec(self, section):
        return mla.from_spec(section)

    def layers(self, model, first, stop):
        # a kind that replaces it (sparse attention's section) takes every latent layer
        if any(getattr(k, "replaces", "") == self.name and k.config(model) is not None for k in of_slot(self.slot)):
            return 0
        return super().layers(model, first, stop)

    def values(self, model):
        return mla.values(model)

    def params(self, model, repeat, mixed):
        """Low-rank query and KV projections, their norms, the output."""
        q_width = n_q * (d_nope + d_rope)
        q = ([layer("q_a_proj", "attention", d_model * r_q, repeat=repeat),
              layer("q_b_proj", "attention", r_q * q_width, repeat=repeat),
              layer("q_a_norm", "norm", r_q, matmul=False, repeat=repeat)] if model.mla.q_lora_rank
             else [layer("q_proj", "attention", d_model * q_width, repeat=repeat)])
        return q + [layer("kv_a_proj", "attention", d_model * (r_kv + d_rope), repeat=repeat),
                    layer("kv_a_norm", "norm", r_kv, matmul=False, repeat=repeat),
                    layer("kv_b_proj", "attention", r_kv * n_q * (d_nope + d_v), repeat=repeat),
                    layer("o_proj", "attention", n_q * d_v * d_model, repeat=repeat)]

    def cache_token_bytes(self, model):
        return mla.kv_elements_per_token_layer() * b

    def ops(self, model, phase, conv, repeat, members):
        lin = lambda name, tokens, k, n, shape: linear(name, tokens, k, n, shape, False, conv, repeat)  # noqa: E731
        make = lambda *a, **kw: op(*a, **{"repeat": repeat, **kw})   # noqa: E731
        return [*mla.attention_ops(model, phase, conv, make, lin),
                *linear("o_proj", M, n_q * d_v, d_model, "X[M,n_q*d_v] @ W[n_q*d_v,d_model]", False, conv, repeat)]

    def output(self, prefix):
        return "o_proj"

    def stated(self, model, phase, conv):
        return (("latent attention", mla.FORMS["naive" if phase == "prefill" else conv.mla]),)
