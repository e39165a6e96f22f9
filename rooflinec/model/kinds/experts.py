"""Mixture of experts: a router GEMM (d_model -> E scores), a top-k, k routed expert MLPs per
token (width d_e), optional shared experts every token goes through (total width d_s), and
a weighted combine. Which layers are MoE is data (rooflinec.model.moe: dense-first layers,
a layer frequency and offset); the block's keys, symbols and ops live there (cost/ reads it).
"""

from __future__ import annotations

from rooflinec.model import moe
from rooflinec.model.component import Component
from rooflinec.model.kinds import Kind
from rooflinec.model.kinds.dense import MATRICES, mlp_ops
from rooflinec.model.moe import E, d_e, d_s, k
from rooflinec.model.symbols import d_model


class MixtureOfExperts(Kind):
    name = "moe"
    slot = "ffn"
    order = 20
    bulk = True
    key = "moe"
    schema = {'type': 'object',
     'additionalProperties': False,
     'required': ['experts', 'top_k', 'd_expert'],
     'description': 'Mixture of experts: the MLP of (most) layers becomes a router, top_k of `experts` routed '
                    "expert MLPs (of mlp.kind) per token, and optional shared experts. A step's expert weight "
                    'traffic counts the expected distinct experts its M*top_k routings touch, E*(1-(1-k/E)^M), '
                    'assuming uniform routing.',
     'properties': {'experts': {'type': 'integer',
                                'minimum': 1,
                                'description': 'Routed experts E; num_local_experts / num_experts / '
                                               'n_routed_experts.'},
                    'top_k': {'type': 'integer',
                              'minimum': 1,
                              'description': 'Experts per token k; num_experts_per_tok.'},
                    'd_expert': {'type': 'integer',
                                 'minimum': 1,
                                 'description': "One routed expert's MLP width d_e; moe_intermediate_size "
                                                '(Mixtral: intermediate_size).'},
                    'shared_experts': {'type': 'integer',
                                       'minimum': 0,
                                       'description': 'Shared experts every token goes through (DeepSeek: '
                                                      'n_shared_experts); default 0.'},
                    'd_shared': {'type': 'integer',
                                 'minimum': 1,
                                 'description': "One shared expert's width; default d_expert."},
                    'shared_gate': {'type': 'boolean',
                                    'description': "Whether the shared experts' output is scaled by "
                                                   'sigmoid(X W[d_model,1]), a gate of d_model parameters per '
                                                   "MoE layer (Qwen2-MoE, Qwen3-Next: shared_expert_gate); "
                                                   'default false.'},
                    'first_dense': {'type': 'integer',
                                    'minimum': 0,
                                    'description': 'Leading layers with a dense MLP of width mlp.d_ff '
                                                   '(DeepSeek-V3: first_k_dense_replace); default 0.'},
                    'every': {'type': 'integer',
                              'minimum': 1,
                              'description': 'After those, layer i is a MoE layer when i % every == offset '
                                             '(DeepSeek: moe_layer_freq; Qwen3-MoE: decoder_sparse_step); '
                                             'default 1.'},
                    'offset': {'type': 'integer',
                               'minimum': 0,
                               'description': 'Which layer of each `every` is the MoE layer: i % every == '
                                              "offset, below every (Qwen3-MoE's (i + 1) % decoder_sparse_step == "
                                              '0 is offset every - 1); default 0.'},
                    'imbalance': {'type': 'number',
                                  'minimum': 1,
                                  'description': 'Routing imbalance rho (default 1, uniform): routing is taken '
                                                 'as uniform over E/rho hot experts, so a step reads '
                                                 '(E/rho)*(1-(1-rho*k/E)^M) distinct experts; at most '
                                                 'experts/top_k.'}}}
    descriptions = moe.DESCRIPTIONS

    def from_spec(self, section):
        return moe.from_spec(section)

    def layers(self, model, first, stop):
        return model.moe.moe_layers(first, stop) if model.moe is not None else 0

    def values(self, model):
        return moe.values(model)

    def params(self, model, repeat, mixed):
        """Router, routed experts (k of E active), shared experts."""
        ups, note = MATRICES[model.mlp_kind]
        mats = len(ups) + 1
        biases = (len(ups) * d_e + d_model) if model.mlp_bias else 0
        per_expert = mats * d_model * d_e + biases
        parts = [Component("router", "mlp", d_model * E + (E if model.mlp_bias else 0), repeat, True, False,
                           "X W_router[d_model,E]" + (" + bias" if model.mlp_bias else ""), layers="moe"),
                 Component("experts", "mlp", E * per_expert, repeat, True, False,
                           f"E experts, each {note}", active_per=k * per_expert, layers="moe",
                           biases=E * biases)]
        if model.moe.shared_experts:
            parts.append(Component("shared_experts", "mlp", mats * d_model * d_s, repeat, True, False,
                                   "every token: " + note, layers="moe"))
        if model.moe.shared_experts and model.moe.shared_gate:
            parts.append(Component("shared_expert_gate", "mlp", d_model, repeat, True, False,
                                   "sigmoid(X W[d_model,1]) scales the shared output", layers="moe"))
        return parts

    def ops(self, model, phase, conv, repeat, members):
        return moe.ffn(model, lambda: mlp_ops(model, conv), repeat)

    def output(self, prefix):
        return "moe_combine"
