"""Lightning attention: MiniMax-01's linear attention (MiniMax, "MiniMax-01: Scaling Foundation
Models with Lightning Attention", 2025; Qin et al., "Lightning Attention-2: A Free Lunch for
Handling Unlimited Sequence Lengths in Large Language Models", 2024), as MiniMax-Text-01 and
MiniMax-M1 interleave it with softmax attention, seven lightning layers to one (transformers'
MiniMaxLightningAttention; the release's modeling_minimax_m1.py).

A layer projects the token to queries, keys and values, n_la heads of d_la each (qkv_proj, then
SiLU), and to an output gate as wide (output_gate). Each head keeps a state S of d_la x d_la, a
plain sum of k v^T with a fixed decay lambda per head (exp(-slope), set by the head and the
layer's depth: a buffer, not a parameter) and, per token:

    S <- lambda * S                  decay                 d_la^2 multiplies
    S <- S + k v^T                   write                 2*d_la^2
    o  = S^T q                       read                  2*d_la^2

so 5*d_la^2 FLOPs per head per token. The output is normed over all heads at once (one RMSNorm
of n_la*d_la), gated by sigmoid(X W_gate) and projected (out_proj). Why a kind of its own and
not the Gated DeltaNet kind (rooflinec.model.kinds.linear) with other numbers: the delta rule
reads the state once more before it writes (7*d^2 a head, not 5) and its chunked prefill solves
a triangular system per chunk (the C^2/3 and UT-transform terms), and Gated DeltaNet has a short
convolution (its state too), the per-head gates beta and alpha with their projection and a
per-head norm; lightning has none of them. What the two share is the law, not a formula: a
state per head kept whatever the context. A sequence keeps, per layer, the states and nothing
else: decode reads and writes them once per token, and its bytes do not grow with S.

Prefill runs the blocked algorithm (Lightning Attention-2, and transformers' loop over blocks of
C_l tokens, the release's BLOCK = 256): per block and head, the intra-block part is softmax-free
quadratic attention, Q K^T (2 C_l^2 d_la), times the decay mask (C_l^2), times V (2 C_l^2 d_la);
the inter-block part reads the state carried in, (Q * decay) S (2 C_l d_la^2), and carries it on,
S <- lambda^C_l S + (K * decay)^T V (2 C_l d_la^2 + 2 d_la^2). Per token 4 C_l d_la + C_l +
4 d_la^2 + 2 d_la^2 / C_l: the intra-block quadratic and the inter-block state terms (S taken
as a multiple of C_l; the O(d_la) decay scalings and the add of the two parts left out: a lower
count). Its traffic is the least a fused kernel moves: q, k, v and o once, the final state
written to the cache (the block states kept on chip). The state is costed at the cache's bytes
per element (engines keep it in fp32: a study's `kv_cache` format says so).
"""

from __future__ import annotations

from rooflinec.model.build import linear, op
from rooflinec.model.component import layer
from rooflinec.model.ir import Cost
from rooflinec.model.kinds import Kind
from rooflinec.model.kinds.linear import _register
from rooflinec.model.symbols import B, M, S, b, d_model, dimension

n_la = dimension("n_la")   # lightning heads, each with a state
d_la = dimension("d_la")   # lightning head width (queries, keys and values alike)
C_l = dimension("C_l")     # block length of the blocked prefill

INNER = n_la * d_la                 # q, k, v, the gate and o: each this wide
STATE = n_la * d_la * d_la          # recurrent state elements per layer per sequence
BLOCK = 256                         # the release's BLOCK (modeling_minimax_m1.py), transformers' block_size


@_register("lightning_attention")
def lightning_attention(batch, tokens, heads, d, block, b) -> Cost:
    # decode (tokens = 1): the recurrence, 5*d^2 per head; prefill: the blocked algorithm. Reads
    # q, k and v, writes o; every head's state read (decode) and written once per sequence.
    per_token = 5 * d ** 2 if tokens == 1 else 4 * block * d + block + 4 * d ** 2 + 2 * d ** 2 / block
    state = batch * heads * d * d * b
    io = batch * tokens * 4 * heads * d * b
    return Cost.of(batch * tokens * heads * per_token, kv_cache=state * (2 if tokens == 1 else 1),
                   activations=io)


class LightningAttention(Kind):
    name = "lightning"
    slot = "mixer"
    order = 42
    pattern = True
    key = "lightning_attention"
    schema = {"type": "object", "additionalProperties": False, "required": ["heads", "head_dim"],
              "description": "Lightning attention (MiniMax-Text-01, MiniMax-M1) for the pattern's `lightning` "
                             "layers: per head a state of head_dim x head_dim with a fixed decay, kept per "
                             "sequence whatever the context; no convolution, no delta rule.",
              "properties": {
                  "heads": {"type": "integer", "minimum": 1,
                            "description": "Heads, each with its own state; num_attention_heads."},
                  "head_dim": {"type": "integer", "minimum": 1,
                               "description": "Head width of queries, keys and values; head_dim."},
                  "block": {"type": "integer", "minimum": 1, "default": BLOCK,
                            "description": f"Block length C_l of the blocked prefill; block_size (default "
                                           f"{BLOCK}, the release's BLOCK)."}}}
    descriptions = {n_la: "lightning attention's heads (one state each)", d_la: "lightning attention's head width",
                    C_l: "block length of lightning attention's prefill"}
    hf = {"block": ("block_size", BLOCK)}   # heads and head_dim: the softmax layers' (num_attention_heads, head_dim)

    def values(self, model):
        c = dict(self.config(model))
        return {n_la: c["heads"], d_la: c["head_dim"], C_l: c.get("block", BLOCK)}

    def params(self, model, repeat, mixed):
        p = lambda name, group, per, matmul=True: layer(name, group, per, matmul, repeat=repeat)  # noqa: E731
        return [p("lightning_qkv_proj", "attention", d_model * 3 * INNER),
                p("lightning_gate_proj", "attention", d_model * INNER),
                p("lightning_norm", "norm", INNER, matmul=False),
                p("lightning_out_proj", "attention", INNER * d_model)]

    def cache_state_bytes(self, model):
        return STATE * b

    def tp_widths(self, model):
        return (("lightning attention's heads", dict(self.config(model))["heads"]),)

    def shards(self, model, tp):
        return {n_la: n_la / tp}   # vLLM's MiniMaxText01LinearAttention splits the heads

    def ops(self, model, phase, conv, repeat, members):
        # names prefixed lightning_: the model mixes it with full attention (q_proj, o_proj, ...)
        tokens = 1 if phase == "decode" else S
        lin = lambda name, k, n, shape: linear(name, M, k, n, shape, False, conv, repeat)  # noqa: E731
        vec = lambda name, formula, shape, n=M * INNER: op(name, formula, "elementwise", n, b,  # noqa: E731
                                                          repeat=repeat, shape=shape)
        return [*lin("lightning_qkv_proj", d_model, 3 * INNER, "X[M,d_model] @ W[d_model,3*n_la*d_la]"),
                vec("lightning_qkv_silu", "silu", "silu([q;k;v][M,3*n_la*d_la])", M * 3 * INNER),
                op("lightning", "lightning_attention", "attention", B, tokens, n_la, d_la, C_l, b,
                   repeat=repeat, crossing=S if phase == "prefill" else None,
                   shape=("S[B,n_la,d_la,d_la]: S <- lambda S + k v^T, o = S^T q" if phase == "decode"
                          else "blocked lightning attention over blocks of C_l tokens")),
                op("lightning_norm", "rmsnorm", "norm", M, INNER, b, repeat=repeat, shape="rmsnorm(O[M,n_la*d_la])"),
                *lin("lightning_gate_proj", d_model, INNER, "X[M,d_model] @ W[d_model,n_la*d_la]"),
                vec("lightning_gate_sigmoid", "silu", "sigmoid(G[M,n_la*d_la])"),
                vec("lightning_gate_mul", "gate_mul", "norm(O) * sigmoid(G)[M,n_la*d_la]"),
                *lin("lightning_out_proj", INNER, d_model, "X[M,n_la*d_la] @ W[n_la*d_la,d_model]")]

    def output(self, prefix):
        return "lightning_out_proj"

    def stated(self, model, phase, conv):
        what = ("the recurrence per token: 5*d_la^2 FLOPs per head, the state read and written"
                if phase == "decode" else
                "the blocked algorithm, blocks of C_l tokens: intra-block softmax-free C_l^2 terms and "
                "inter-block state terms, the block states kept on chip")
        return (("lightning attention", f"lightning layers keep a d_la x d_la state per head per sequence, "
                                        f"whatever the context (a fixed decay, no convolution); {what}; the "
                                        f"sigmoid gate costed as SiLU"),)
