"""State-space layers: Mamba-2 (Dao and Gu, "Transformers are SSMs: Generalized Models and
Efficient Algorithms Through Structured State Space Duality", ICML 2024), as Nemotron-H, Granite
4.0-H and Zamba2 interleave it with attention (transformers' Mamba2Mixer and NemotronHMamba2Mixer;
config names in `hf`).

A layer projects the token (in_proj) to the gate z and the input x (n_sh heads of d_sh each,
d_inner = n_sh*d_sh wide), the input and output projections B and C (g_s groups of d_st, shared
by the heads of a group) and one step size dt per head: d_model x (2*d_inner + 2*g_s*d_st +
n_sh). A depthwise causal convolution of k_sc taps (and a bias, use_conv_bias) runs over x, B and C. Each
head keeps a state h of d_sh x d_st and, per token, with a scalar decay a = exp(dt*A):

    h <- a*h + (dt*x) B^T        decay, outer product, add     3*d_sh*d_st
    y  = h C + D*x               read                          2*d_sh*d_st

so 5*d_sh*d_st FLOPs per head per token (the O(d_sh) skip, dt's softplus and the exp are left
out: a lower count). The output is normed with the gate, rmsnorm(y * silu(z)), then out_proj.
A sequence keeps, per layer, the state and the convolution's last k_sc - 1 inputs whatever its
context (transformers keeps k_sc, vLLM k_sc - 1: the least a kernel needs is counted): decode
reads and writes the state once per token, and its bytes do not grow with S.

Prefill runs the chunked SSD algorithm (the paper's section 6), chunks of C_s tokens: per chunk
the intra-chunk (diagonal block) output C B^T once per group (2 C_s^2 d_st), masked by the
decays and applied to x per head (2 C_s^2 d_sh); each chunk's state B^T x per head (2 C_s d_sh
d_st); the inter-chunk state passing, one decay-and-add of each head's state per chunk (2 d_sh
d_st); the states' contribution to the outputs C h per head (2 C_s d_sh d_st). Per token:
g_s*2*C_s*d_st + n_sh*(2*C_s*d_sh + 4*d_sh*d_st + 2*d_sh*d_st/C_s), the intra-chunk quadratic
and the inter-chunk state terms. Its traffic is the least a fused kernel moves: x, B, C, dt and
y once, the final state written to the cache (the chunk states kept on chip). The state is
costed at the cache's bytes per element (engines often keep it in fp32: a study's `kv_cache`
format says so). Jamba's Mamba-1 layers (a state per channel, x_proj and dt_proj) are another
kind, rooflinec.model.kinds.mamba1.
"""

from __future__ import annotations

from rooflinec.model.build import linear, op
from rooflinec.model.component import layer
from rooflinec.model.ir import Cost
from rooflinec.model.kinds import Kind, pattern_layers
from rooflinec.model.kinds.linear import _register, short_conv  # noqa: F401  (short_conv registered)
from rooflinec.model.symbols import B, M, S, b, d_model, dimension

n_sh = dimension("n_sh")   # SSM heads, each with a state
d_sh = dimension("d_sh")   # SSM head width (d_inner / n_sh)
d_st = dimension("d_st")   # state size N per head (the width of B and C)
g_s = dimension("g_s")     # groups of heads sharing B and C
k_sc = dimension("k_sc")   # the SSM's short convolution taps
C_s = dimension("C_s")     # chunk length of the chunked SSD prefill

INNER = n_sh * d_sh                      # d_inner: x, z and y
IN_PROJ = 2 * INNER + 2 * g_s * d_st + n_sh   # z, x, B, C, dt
CONV = INNER + 2 * g_s * d_st            # channels the convolution runs over: x, B, C
STATE = n_sh * d_sh * d_st               # recurrent state elements per layer per sequence


@_register("ssd_scan")
def ssd_scan(batch, tokens, heads, head_dim, state, groups, chunk, b) -> Cost:
    # decode (tokens = 1): the recurrence, 5*head_dim*state per head; prefill: chunked SSD.
    # Reads x (heads*head_dim), B and C (groups*state each), dt (heads); writes y; the state of
    # every head is read (decode) and written once per sequence.
    if tokens == 1:
        per_token = heads * 5 * head_dim * state
    else:
        per_token = (groups * 2 * chunk * state
                     + heads * (2 * chunk * head_dim + 4 * head_dim * state + 2 * head_dim * state / chunk))
    held = batch * heads * head_dim * state * b
    io = batch * tokens * (2 * heads * head_dim + 2 * groups * state + heads) * b
    return Cost.of(batch * tokens * per_token, kv_cache=held * (2 if tokens == 1 else 1), activations=io)


class Mamba2(Kind):
    name = "mamba"
    slot = "mixer"
    order = 45
    pattern = True
    aliases = ("mamba_no_ffn",)   # a Mamba-2 layer with no feed-forward (rooflinec.model.kinds.bare)
    key = "mamba"
    schema = {"type": "object", "additionalProperties": False,
              "required": ["heads", "head_dim", "state_size", "groups", "conv_kernel"],
              "description": "Mamba-2 state-space layers (Nemotron-H, Granite 4.0-H) for the pattern's `mamba` "
                             "layers: per head a state of head_dim x state_size kept per sequence whatever the "
                             "context, and a short convolution's last conv_kernel - 1 inputs.",
              "properties": {
                  "heads": {"type": "integer", "minimum": 1, "description": "SSM heads; mamba_num_heads / num_heads."},
                  "head_dim": {"type": "integer", "minimum": 1,
                               "description": "Head width; mamba_head_dim / head_dim (heads x head_dim = "
                                              "expand x hidden_size)."},
                  "state_size": {"type": "integer", "minimum": 1, "description": "State size N; ssm_state_size."},
                  "groups": {"type": "integer", "minimum": 1,
                             "description": "Groups of heads sharing B and C; n_groups."},
                  "conv_kernel": {"type": "integer", "minimum": 1,
                                  "description": "Short convolution taps; conv_kernel."},
                  "conv_bias": {"type": "boolean", "default": True,
                                "description": "The convolution has a bias per channel; use_conv_bias (default true)."},
                  "chunk": {"type": "integer", "minimum": 1, "default": 256,
                            "description": "Chunk length C_s of the chunked SSD prefill (default 256, mamba_ssm's "
                                           "chunk_size)."}}}
    descriptions = {n_sh: "SSM heads (one state each)", d_sh: "SSM head width", d_st: "SSM state size N",
                    g_s: "SSM groups sharing B and C", k_sc: "SSM short convolution taps",
                    C_s: "chunk length of the SSM's chunked prefill"}
    hf = {"heads": "mamba_num_heads", "head_dim": "mamba_head_dim", "state_size": "ssm_state_size",
          "groups": "n_groups", "conv_kernel": "conv_kernel", "conv_bias": ("use_conv_bias", True),
          "chunk": ("chunk_size", 256)}   # NemotronH's names; Mamba2Config: num_heads, head_dim, state_size

    def layers(self, model, first, stop):
        return sum(pattern_layers(model, n, first, stop) for n in (self.name, *self.aliases))

    def values(self, model):
        c = dict(self.config(model))
        return {n_sh: c["heads"], d_sh: c["head_dim"], d_st: c["state_size"], g_s: c["groups"],
                k_sc: c["conv_kernel"], C_s: c.get("chunk", 256)}

    def params(self, model, repeat, mixed):
        p = lambda name, group, per, matmul=True: layer(name, group, per, matmul, repeat=repeat)  # noqa: E731
        bias = 1 if dict(self.config(model)).get("conv_bias", True) else 0
        return [p("ssm_in_proj", "attention", d_model * IN_PROJ),
                p("ssm_conv1d", "attention", CONV * (k_sc + bias), matmul=False),
                p("ssm_dt_a_d", "attention", 3 * n_sh, matmul=False),
                p("ssm_norm", "norm", INNER, matmul=False),
                p("ssm_out_proj", "attention", INNER * d_model)]

    def cache_state_bytes(self, model):
        return (STATE + CONV * (k_sc - 1)) * b

    def tp_widths(self, model):
        return (("SSM heads", dict(self.config(model))["heads"]),)

    def shards(self, model, tp):
        # vLLM's MambaMixer2: heads split over tp; B and C's groups too where tp divides them,
        # else every device keeps all of them
        groups = dict(self.config(model))["groups"]
        return {n_sh: n_sh / tp, **({g_s: g_s / tp} if groups % tp == 0 else {})}

    def ops(self, model, phase, conv, repeat, members):
        # names prefixed ssm_: a model may mix it with linear attention (its in_proj_*, out_proj)
        tokens = 1 if phase == "decode" else S
        lin = lambda name, k, n, shape: linear(name, M, k, n, shape, False, conv, repeat)  # noqa: E731
        return [*lin("ssm_in_proj", d_model, IN_PROJ, "X[M,d_model] @ W[d_model,2*n_sh*d_sh+2*g_s*d_st+n_sh]"),
                op("ssm_conv", "short_conv", "elementwise", B, tokens, CONV, k_sc, b, repeat=repeat,
                   shape="causal depthwise conv(k_sc) over [x;B;C][M,n_sh*d_sh+2*g_s*d_st]"),
                op("ssd_scan", "ssd_scan", "attention", B, tokens, n_sh, d_sh, d_st, g_s, C_s, b,
                   repeat=repeat, crossing=S if phase == "prefill" else None,
                   shape=("h[B,n_sh,d_sh,d_st]: h <- exp(dt*A) h + dt x B^T, y = h C" if phase == "decode"
                          else "chunked SSD over chunks of C_s tokens")),
                op("ssm_z_silu", "silu", "elementwise", M * INNER, b, repeat=repeat, shape="silu(Z[M,n_sh*d_sh])"),
                op("ssm_z_gate", "gate_mul", "elementwise", M * INNER, b, repeat=repeat,
                   shape="Y * silu(Z)[M,n_sh*d_sh]"),
                op("ssm_norm", "rmsnorm", "norm", M, INNER, b, repeat=repeat, shape="rmsnorm(Y*silu(Z))[M,n_sh*d_sh]"),
                *lin("ssm_out_proj", INNER, d_model, "X[M,n_sh*d_sh] @ W[n_sh*d_sh,d_model]")]

    def output(self, prefix):
        return "ssm_out_proj"

    def stated(self, model, phase, conv):
        what = ("the recurrence per token: 5*d_sh*d_st FLOPs per head, the state read and written"
                if phase == "decode" else
                "chunked SSD, chunks of C_s tokens: intra-chunk C_s^2 terms and inter-chunk state terms, "
                "the chunk states kept on chip")
        return (("state-space", f"Mamba-2 layers keep a d_sh x d_st state per head and a short "
                                f"convolution's k_sc - 1 inputs per sequence, whatever the context; {what}"),)
