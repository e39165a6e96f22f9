"""Linear attention: Gated DeltaNet (Yang, Kautz and Hatamizadeh, "Gated Delta Networks:
Improving Mamba2 with Delta Rule", ICLR 2025), as Qwen3-Next interleaves it with full attention
(transformers' Qwen3NextGatedDeltaNet; config names in `hf`).

A layer projects the token to queries and keys (n_lk heads of d_lk), values (n_lv heads of
d_lv), an output gate z (as wide as the values) and per value head two scalars, the write
strength beta and the decay alpha; a depthwise causal convolution of k_conv taps runs over q, k
and v. Each value head keeps a state S of d_lk x d_lv and, per token, applies the gated delta
rule:

    S <- exp(g) * S                      decay                 d_lk*d_lv multiplies
    u  = beta * (v - S^T k)              what the key recalls  2*d_lk*d_lv
    S <- S + k u^T                       write                 2*d_lk*d_lv
    o  = S^T q                           read                  2*d_lk*d_lv

so 7*d_lk*d_lv FLOPs per head per token (the O(d_lv) vector terms, the q/k L2 norms and the
gates' softplus are left out: a lower count). A sequence keeps, per layer, the state and the
convolution's last k_conv - 1 inputs whatever its context: decode reads and writes the state
once per token, and its bytes do not grow with S.

Prefill runs the chunked algorithm (Yang et al., "Parallelizing Linear Transformers with the
Delta Rule over Sequence Length", NeurIPS 2024; the UT transform): per chunk of C tokens and
head, A = K K^T (2C^2 d_lk), T = (I + strictly-lower(beta A))^-1 by forward substitution
(C^3/3), W = T (beta K) (2C^2 d_lk), U = T (beta V) (2C^2 d_lv), intra-chunk scores Q K^T
(2C^2 d_lk), the new values U - W S (2C d_lk d_lv), the output Q S + (Q K^T masked)(U - W S)
(2C d_lk d_lv + 2C^2 d_lv) and the state update S + K^T (U - W S) (2C d_lk d_lv): per token
6C d_lk + 4C d_lv + 6 d_lk d_lv + C^2/3, the intra-chunk quadratic terms and the inter-chunk
state terms (S taken as a multiple of C). Its traffic is the least a fused kernel moves: q, k,
v, the gates and o once, the final state written to the cache (the chunk states kept on chip).
The state is costed at the cache's bytes per element (engines often keep it in fp32: a study's
`kv_cache` format says so).
"""

from __future__ import annotations


from rooflinec.model.build import linear, op
from rooflinec.model.component import layer
from rooflinec.model.ir import Cost
from rooflinec.model.kinds import Kind
from rooflinec.model.ops.registry import FORMULAS, formula
from rooflinec.model.symbols import B, M, S, b, d_model, dimension

n_lk = dimension("n_lk")       # key (and query) heads
n_lv = dimension("n_lv")       # value heads, each with a state
d_lk = dimension("d_lk")       # key head width
d_lv = dimension("d_lv")       # value head width
k_conv = dimension("k_conv")   # short convolution taps
C = dimension("C")             # chunk length of the chunked prefill

QKVZ = 2 * n_lk * d_lk + 2 * n_lv * d_lv    # in_proj_qkvz's width: q, k, v and the gate z
CONV = 2 * n_lk * d_lk + n_lv * d_lv        # channels the convolution runs over: q, k, v
STATE = n_lv * d_lk * d_lv                  # recurrent state elements per layer per sequence


def _register(name, unit="matrix"):
    """Register a formula once (the registry imports this module once; a reload would not)."""
    return (lambda fn: fn) if name in FORMULAS else formula(name, unit)


@_register("short_conv", unit="vector")
def short_conv(batch, tokens, channels, taps, b) -> Cost:
    # a depthwise causal convolution over `tokens` new tokens per sequence: 2*taps FLOPs per
    # channel per token; the last taps - 1 inputs per channel read from and written to the cache
    return Cost.of(2 * taps * batch * tokens * channels, weights=channels * taps * b,
                   kv_cache=2 * batch * channels * (taps - 1) * b,
                   activations=2 * batch * tokens * channels * b)


@_register("gated_delta_rule")
def gated_delta_rule(batch, tokens, key_heads, value_heads, d_k, d_v, chunk, b) -> Cost:
    # decode (tokens = 1): the recurrence, 7*d_k*d_v per head; prefill: the chunked algorithm.
    # Reads q, k (key heads), v, beta and alpha (value heads), writes o; the state of every
    # value head is read (decode) and written once per sequence.
    per_token = (7 * d_k * d_v if tokens == 1
                 else 6 * chunk * d_k + 4 * chunk * d_v + 6 * d_k * d_v + chunk ** 2 / 3)
    state = batch * value_heads * d_k * d_v * b
    io = batch * tokens * (2 * key_heads * d_k + 2 * value_heads * d_v + 2 * value_heads) * b
    return Cost.of(batch * tokens * value_heads * per_token, kv_cache=state * (2 if tokens == 1 else 1),
                   activations=io)


class GatedDeltaNet(Kind):
    name = "linear"
    slot = "mixer"
    order = 40
    pattern = True
    key = "linear_attention"
    schema = {"type": "object", "additionalProperties": False,
              "required": ["key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv_kernel"],
              "description": "Gated DeltaNet linear attention (Qwen3-Next) for the pattern's `linear` layers: "
                             "per value head a state of key_head_dim x value_head_dim kept per sequence whatever "
                             "the context, and a short convolution's last conv_kernel - 1 inputs.",
              "properties": {
                  "key_heads": {"type": "integer", "minimum": 1, "description": "Query/key heads; linear_num_key_heads."},
                  "value_heads": {"type": "integer", "minimum": 1,
                                  "description": "Value heads, each with its own state; linear_num_value_heads."},
                  "key_head_dim": {"type": "integer", "minimum": 1, "description": "linear_key_head_dim."},
                  "value_head_dim": {"type": "integer", "minimum": 1, "description": "linear_value_head_dim."},
                  "conv_kernel": {"type": "integer", "minimum": 1, "description": "Short convolution taps; "
                                  "linear_conv_kernel_dim."},
                  "chunk": {"type": "integer", "minimum": 1, "default": 64,
                            "description": "Chunk length C of the chunked prefill (default 64, the chunk "
                                           "flash-linear-attention's kernels use)."}}}
    descriptions = {n_lk: "linear attention's query/key heads", n_lv: "linear attention's value heads (one state each)",
                    d_lk: "linear attention's key head width", d_lv: "linear attention's value head width",
                    k_conv: "linear attention's short convolution taps", C: "chunk length of linear attention's prefill"}
    hf = {"key_heads": "linear_num_key_heads", "value_heads": "linear_num_value_heads",
          "key_head_dim": "linear_key_head_dim", "value_head_dim": "linear_value_head_dim",
          "conv_kernel": "linear_conv_kernel_dim"}

    def values(self, model):
        c = dict(self.config(model))
        return {n_lk: c["key_heads"], n_lv: c["value_heads"], d_lk: c["key_head_dim"], d_lv: c["value_head_dim"],
                k_conv: c["conv_kernel"], C: c.get("chunk", 64)}

    def params(self, model, repeat, mixed):
        p = lambda name, group, per, matmul=True: layer(name, group, per, matmul, repeat=repeat)  # noqa: E731
        return [p("in_proj_qkvz", "attention", d_model * QKVZ), p("in_proj_ba", "attention", d_model * 2 * n_lv),
                p("conv1d", "attention", CONV * k_conv, matmul=False),
                p("dt_bias_a_log", "attention", 2 * n_lv, matmul=False),
                p("gated_norm", "norm", d_lv, matmul=False),
                p("out_proj", "attention", n_lv * d_lv * d_model)]

    def cache_state_bytes(self, model):
        return (STATE + CONV * (k_conv - 1)) * b

    def tp_widths(self, model):
        c = dict(self.config(model))
        return (("linear attention's key heads", c["key_heads"]), ("linear attention's value heads", c["value_heads"]))

    def shards(self, model, tp):
        return {n_lk: n_lk / tp, n_lv: n_lv / tp}   # vLLM's Qwen3-Next Gated DeltaNet splits both

    def ops(self, model, phase, conv, repeat, members):
        tokens = 1 if phase == "decode" else S
        lin = lambda name, k, n, shape: linear(name, M, k, n, shape, False, conv, repeat)  # noqa: E731
        return [*lin("in_proj_qkvz", d_model, QKVZ, "X[M,d_model] @ W[d_model,2*n_lk*d_lk+2*n_lv*d_lv]"),
                *lin("in_proj_ba", d_model, 2 * n_lv, "X[M,d_model] @ W[d_model,2*n_lv]"),
                op("short_conv", "short_conv", "elementwise", B, tokens, CONV, k_conv, b, repeat=repeat,
                   shape="causal depthwise conv(k_conv) over [q;k;v][M,2*n_lk*d_lk+n_lv*d_lv]"),
                op("delta_rule", "gated_delta_rule", "attention", B, tokens, n_lk, n_lv, d_lk, d_lv, C, b,
                   repeat=repeat, crossing=S if phase == "prefill" else None,
                   shape=("S[B,n_lv,d_lk,d_lv]: decay, delta-rule write, read o = S^T q" if phase == "decode"
                          else "chunked gated delta rule over chunks of C tokens")),
                op("gated_norm", "rmsnorm", "norm", M * n_lv, d_lv, b, repeat=repeat,
                   shape="rmsnorm(O[M*n_lv,d_lv])"),
                op("z_silu", "silu", "elementwise", M * n_lv * d_lv, b, repeat=repeat, shape="silu(Z[M,n_lv*d_lv])"),
                op("z_gate", "gate_mul", "elementwise", M * n_lv * d_lv, b, repeat=repeat,
                   shape="norm(O) * silu(Z)[M,n_lv*d_lv]"),
                *lin("out_proj", n_lv * d_lv, d_model, "X[M,n_lv*d_lv] @ W[n_lv*d_lv,d_model]")]

    def output(self, prefix):
        return "out_proj"

    def stated(self, model, phase, conv):
        what = ("the recurrence per token: 7*d_lk*d_lv FLOPs per value head, the state read and written"
                if phase == "decode" else
                "the chunked algorithm, chunks of C tokens: intra-chunk C^2 terms and inter-chunk state terms, "
                "the chunk states kept on chip")
        return (("linear attention", f"Gated DeltaNet layers keep a d_lk x d_lv state per value head and a "
                                     f"short convolution's k_conv - 1 inputs per sequence, whatever the context; "
                                     f"{what}"),)


