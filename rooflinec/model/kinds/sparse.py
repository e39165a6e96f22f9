"""Sparse attention: DeepSeek Sparse Attention (DSA; DeepSeek-AI, "DeepSeek-V3.2-Exp: Boosting
Long-Context Efficiency with DeepSeek Sparse Attention", 2025; transformers' DeepseekV32Indexer,
config names in `hf`) on latent attention (rooflinec.model.kinds.latent).

A lightning indexer picks, for every query, the top k_top of the cached tokens; latent
attention (MLA) then attends only those. The indexer has its own n_ih heads of d_ih: queries
from the query latent (wq_b, r_q -> n_ih*d_ih), one key per token (wk, d_model -> d_ih,
LayerNorm'd, rotary on d_rope of it), per-head weights (weights_proj, d_model -> n_ih). Its
keys are cached in fp8 with one fp32 scale each (b_ix bytes an element, s_ix a key: 128 + 4 =
132 B per token per layer for DeepSeek-V3.2), beside the latent. Every step scores every cached
key, sum_h w_h ReLU(q_h . k) (2*n_ih*d_ih + 3*n_ih FLOPs a pair), and keeps the top k_top
(one compare a score). The scoring runs in the indexer's own format (`dtype`, fp8 by default):
DeepSeek's inference code quantises q and k to fp8 (act_quant) and its fp8_index kernel takes
fp8 queries and keys, one fp32 weight per head (q's scale folded in) and fp32 key scales. So the
scores op computes at the device's fp8 tensor peak whatever the study's dtype (ir.Op.dtype; the
workbench's `op_dtype`), reads q at b_ix bytes an element and the weights at 4 B; a device
without an fp8 peak takes the study's, and a study naming it says so, located (`dtypes`). The scores are costed as kept on chip by a fused top-k, the least
traffic (DeepGEMM's fp8_mqa_logits writes them in fp32 and a top-k kernel reads them back: 8 B
a key more), so every variant stays a lower bound; decode reads

    indexer keys x S + selected latents x min(S, k_top)

per layer: past S = k_top*(r_kv + d_rope)*b / (d_ih*b_ix + s_ix) the indexer's keys outweigh the
selected latents (17,873 tokens for DeepSeek-V3.2 at a bf16 latent cache, 8,937 at fp8; with
the scores' round trip, 16,852 and 8,426), and the latents' read is capped at k_top. Prefill
query i attends min(i, k_top) keys (the counted share of S x min(S, k_top) is
1 - min(S, k_top)/(2S) with the masked half skipped); the indexer's scores are S x S, causal.

NSA (Yuan et al., "Native Sparse Attention", 2025) differs: no separate indexer over tokens;
each query's heads run three branches over the full KV cache, gated and summed: compressed
(attention over one learned summary per block of l tokens: S/d summaries), selected (the top
n blocks of l' tokens, chosen by the compressed branch's scores: n*l' tokens) and a sliding
window of w tokens. Its decode reads about S/d + n*l' + w tokens of K and V per head group, not
S indexer keys: its read grows with S only through the compressed keys. It is not modelled.
"""

from __future__ import annotations

import sympy as sp

from rooflinec.model import mla, quant
from rooflinec.model.build import linear, op
from rooflinec.model.component import layer
from rooflinec.model.ir import Cost
from rooflinec.model.kinds import Kind
from rooflinec.model.kinds.latent import LatentAttention
from rooflinec.model.kinds.linear import _register
from rooflinec.model.mla import d_rope, d_v, r_q
from rooflinec.model.symbols import B, M, S, b, d_model, dimension, n_q

n_ih = dimension("n_ih")     # indexer heads
d_ih = dimension("d_ih")     # indexer head width (and its key's)
k_top = dimension("k_top")   # tokens each query attends
b_ix = dimension("b_ix")     # bytes an element of the indexer's keys and queries (fp8: 1)
s_ix = dimension("s_ix")     # bytes of each cached key's scale (one fp32: 4)

KEY_BYTES = d_ih * b_ix + s_ix   # one cached indexer key
INDEX_BYTES = 4                  # one selected token's index, int32
WEIGHT_BYTES = 4                 # one head's weight of a query, fp32 (its scale folded in)
DTYPES = ("fp8", "bf16", "fp16", "fp32")   # formats the indexer may score in


def selected():
    """Keys each query attends at context S: min(S, k_top)."""
    return sp.Min(S, k_top)


@_register("lightning_index")
def lightning_index(batch, queries, keys, heads, dim, key_bytes, b, causal_fraction=1, read_keys=None) -> Cost:
    # scores sum_h w_h ReLU(q_h . k) for every (query, key) pair: a dot of `dim` per head, the
    # ReLU, the weighted add; every cached key read once (`read_keys` of them), q (`b` bytes an
    # element: the indexer's format) and one fp32 weight per head read; the scores stay on chip
    # for the fused top-k
    pairs = batch * queries * keys * causal_fraction
    return Cost.of(pairs * (2 * heads * dim + 3 * heads),
                   kv_cache=batch * (keys if read_keys is None else read_keys) * key_bytes,
                   activations=batch * queries * heads * (dim * b + WEIGHT_BYTES))


@_register("index_topk", unit="vector")
def index_topk(batch, queries, keys, k, causal_fraction=1) -> Cost:
    # the top-k of each query's scores, fused with the scoring (one compare a score, the scores
    # on chip): the k selected indices written
    return Cost.of(batch * queries * keys * causal_fraction, activations=batch * queries * k * INDEX_BYTES)


class SparseAttention(LatentAttention):
    name = "dsa"
    order = 25
    replaces = "mla"    # with its section, every latent layer is sparse
    key = "sparse_attention"
    schema = {"type": "object", "additionalProperties": False,
              "required": ["index_heads", "index_head_dim", "top_k"],
              "description": "DeepSeek Sparse Attention on the model's latent attention (mla, required): a "
                             "lightning indexer with its own heads scores every cached key each step, then "
                             "attention reads only the top_k selected latents. Its keys are cached beside the "
                             "latent, key_bytes an element and scale_bytes a key.",
              "properties": {
                  "index_heads": {"type": "integer", "minimum": 1, "description": "Indexer heads; index_n_heads."},
                  "index_head_dim": {"type": "integer", "minimum": 1, "description": "index_head_dim."},
                  "top_k": {"type": "integer", "minimum": 1, "description": "Tokens each query attends; index_topk."},
                  "dtype": {"enum": list(DTYPES), "default": "fp8",
                            "description": "The format the indexer's keys are cached in and its scores computed "
                                           "in (default fp8, as DeepSeek-V3.2's fp8_index kernel): their bytes an "
                                           "element, and the device's tensor peak for it (the study's where the "
                                           "device lists none)."},
                  "scale_bytes": {"type": "number", "minimum": 0, "default": 4,
                                  "description": "Bytes of each cached key's scale (default 4, one fp32)."}}}
    descriptions = {n_ih: "sparse attention's indexer heads", d_ih: "sparse attention's indexer head width",
                    k_top: "tokens each query of sparse attention attends",
                    b_ix: "bytes an element of the indexer's keys and queries", s_ix: "bytes of a cached indexer key's scale"}
    hf = {"index_heads": "index_n_heads", "index_head_dim": "index_head_dim", "top_k": "index_topk"}

    def from_spec(self, section):
        return Kind.from_spec(self, section)

    def layers(self, model, first, stop):
        return Kind.layers(self, model, first, stop) if model.mla is not None else 0

    def values(self, model):
        c = dict(self.config(model))
        return {**mla.values(model), n_ih: c["index_heads"], d_ih: c["index_head_dim"], k_top: c["top_k"],
                b_ix: quant.byte_value(c.get("dtype", "fp8")), s_ix: c.get("scale_bytes", 4)}

    def params(self, model, repeat, mixed):
        q_in = r_q if model.mla.q_lora_rank else d_model
        return [*super().params(model, repeat, mixed),
                layer("index_q_proj", "attention", q_in * n_ih * d_ih, repeat=repeat),
                layer("index_k_proj", "attention", d_model * d_ih, repeat=repeat),
                layer("index_k_norm", "norm", 2 * d_ih, matmul=False, repeat=repeat),
                layer("index_weights_proj", "attention", d_model * n_ih, repeat=repeat)]

    def cache_token_bytes(self, model):
        return super().cache_token_bytes(model) + KEY_BYTES

    def ops(self, model, phase, conv, repeat, members):
        lin = lambda name, tokens, k, n, shape: linear(name, tokens, k, n, shape, False, conv, repeat)  # noqa: E731
        make = lambda *a, **kw: op(*a, **{"repeat": repeat, **kw})   # noqa: E731
        return [*self.indexer(model, phase, conv, make, lin),
                *mla.attention_ops(model, phase, conv, make, lin, keys=selected()),
                *linear("o_proj", M, n_q * d_v, d_model, "X[M,n_q*d_v] @ W[n_q*d_v,d_model]", False, conv, repeat)]

    def indexer(self, model, phase, conv, make, lin) -> list:
        """The indexer's projections, its scores over every cached key and their top-k."""
        q_in, q_name = (r_q, "C_Q[M,r_q]") if model.mla.q_lora_rank else (d_model, "X[M,d_model]")
        queries = 1 if phase == "decode" else S
        fraction = conv.causal_fraction(phase)
        return [*lin("index_q_proj", M, q_in, n_ih * d_ih, f"{q_name} @ W[{q_name[-4:-1]},n_ih*d_ih]"),
                *lin("index_k_proj", M, d_model, d_ih, "X[M,d_model] @ W[d_model,d_ih]"),
                make("index_k_norm", "layernorm", "norm", M, d_ih, b, shape="layernorm(K_I[M,d_ih])"),
                *lin("index_weights_proj", M, d_model, n_ih, "X[M,d_model] @ W[d_model,n_ih]"),
                make("index_rope", "rope", "elementwise", M, n_ih, 1, d_rope, b,
                     shape="rope(Q_I[M,n_ih*d_rope]), rope(K_I[M,d_rope])"),
                make("index_scores", "lightning_index", "attention", B, queries, S, n_ih, d_ih, KEY_BYTES, b_ix,
                     causal_fraction=fraction, read_keys=S, crossing=S if phase == "prefill" else None,
                     dtype=self.dtype(model),
                     shape=f"sum_h w_h relu(Q_I[B,{queries},n_ih,d_ih] . K_I^T[B,d_ih,S]) ({self.dtype(model)})"),
                make("index_topk", "index_topk", "softmax", B, queries, S, k_top, causal_fraction=fraction,
                     shape=f"top-k_top of scores[B,{queries},S] -> indices[B,{queries},k_top]")]

    def dtype(self, model) -> str:
        """The format the indexer scores in (its section's `dtype`, fp8 by default)."""
        return dict(self.config(model)).get("dtype", "fp8")

    def dtypes(self, model):
        return (("matrix", self.dtype(model), "DeepSeek Sparse Attention's indexer scores (op 'index_scores')"),)

    def stated(self, model, phase, conv):
        own = self.dtype(model)
        return (*super().stated(model, phase, conv),
                ("sparse attention", f"DeepSeek Sparse Attention: a lightning indexer (n_ih heads of d_ih, {own} keys "
                                     "cached per token) scores every cached key each step; latent attention reads "
                                     "only the top min(S, k_top) latents; the indexer's scores are computed in "
                                     f"{own} (DeepSeek's fp8_index kernel), at the device's {own} tensor peak "
                                     "where it lists one, else at the study's"))
