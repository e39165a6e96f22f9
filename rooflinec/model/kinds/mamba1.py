"""State-space layers: Mamba-1, the selective scan (Gu and Dao, "Mamba: Linear-Time Sequence
Modeling with Selective State Spaces", 2023), as Jamba interleaves it with attention
(transformers' JambaMambaMixer, MambaMixer; config names in `hf`).

A layer projects the token (in_proj) to the input x and the gate z, d_inner = expand x d_model
channels each: d_model x 2*d_inner. A depthwise causal convolution of k_mc taps (and a bias,
conv_bias) runs over x. x_proj maps the convolved channels to the step's low-rank input and the
input-dependent B and C, d_inner x (r_dt + 2*d_ms); dt_proj lifts the rank-r_dt input to one step
size per channel, r_dt x d_inner (its bias added inside the scan, with the softplus). Jamba
RMS-normalises dt, B and C before dt_proj and the scan (dt_bc_norms). Every channel c keeps its
own state h_c of d_ms elements with its own decay per element (A is d_inner x d_ms, learned),
and per token:

    h_c <- exp(dt_c*A_c) * h_c + (dt_c*x_c) B     step times A, decay, times B, add   4*d_ms
    y_c  = h_c . C + D_c*x_c                      read                              2*d_ms

so 6*d_inner*d_ms FLOPs per token (the exp per element, dt's softplus, dt*x and the D skip, all
O(d_inner) or transcendental, are left out: a lower count), then y * silu(z) and out_proj. A
sequence keeps, per layer, the d_inner x d_ms state and the convolution's last k_mc - 1 inputs
of every channel whatever its context (transformers keeps k_mc, vLLM k_mc - 1: the least a kernel
needs is counted): decode reads and writes the state once per token and reads A, D and dt's bias,
and its bytes do not grow with S.

Prefill runs the parallel (associative) scan (the paper's section 3.3; mamba_ssm's
selective_scan_fn): the recurrence's pairs (a, b) = (exp(dt*A), dt*x*B) combine as
(a1, b1) o (a2, b2) = (a1*a2, a2*b1 + b2), 3 FLOPs, and a work-efficient scan over S tokens does
2S combines (an up-sweep and a down-sweep; the Mamba authors count "2L associative operations",
state-spaces/mamba issue 110). Per token and state element: the discretisation 2 (dt*A, (dt*x)*B),
two combines 6, the output C 2: 10*d_inner*d_ms per token, linear in S (the authors' total for the
scan is 9*L*D*N, same issue; this count spells out each term). The recurrence run token by token
would do decode's 6: the parallel scan trades 4 FLOPs a token for a depth of log S, and prefill's
FLOPs here are that algorithm's, as the chunked kinds' are theirs. Its traffic is the least a fused
kernel moves: x, dt, B, C and y once, A, D and dt's bias once, the final state written to the cache.
The state is costed at the cache's bytes per element (engines often keep it in fp32: a study's
`kv_cache` format says so).

Why a kind of its own, not a variant of Mamba-2's (rooflinec.model.kinds.ssm): the two layers
share no fact but the short convolution's formula (shared, rooflinec.model.kinds.linear). Mamba-2
projects B, C and dt from the input in one in_proj, has one scalar decay per head, groups and a
gated norm and prefills by the chunked SSD; Mamba-1 has x_proj and dt_proj over the convolved
channels, a decay per state element, no heads or norm and prefills by the scan. A variant would
branch every method (parameters, state, ops, sharding) on which it is; two modules keep one owner
per fact.

Under tensor parallelism (vLLM's MambaMixer) the channels split over the devices: in_proj and
dt_proj column-parallel, x_proj and out_proj row-parallel. x_proj's partial sums need an
all-reduce of M x (r_dt + 2*d_ms) elements per layer, which is not counted (only each mixer's
output projection is all-reduced here): a lower count, stated with the layers.
"""

from __future__ import annotations

from rooflinec.model.build import linear, op
from rooflinec.model.component import layer
from rooflinec.model.ir import Cost
from rooflinec.model.kinds import Kind
from rooflinec.model.kinds.linear import _register, short_conv  # noqa: F401  (short_conv registered)
from rooflinec.model.symbols import B, M, S, b, d_model, dimension

d_mi = dimension("d_mi")   # Mamba-1 channels, d_inner = expand x d_model (each with a state)
d_ms = dimension("d_ms")   # state elements per channel (d_state, the width of B and C)
r_dt = dimension("r_dt")   # rank of the step size's projection (dt_rank)
k_mc = dimension("k_mc")   # the short convolution's taps (d_conv)

X_PROJ = r_dt + 2 * d_ms   # x_proj's width: dt's low-rank input, B, C
STATE = d_mi * d_ms        # recurrent state elements per layer per sequence
DECODE_FLOPS = 6           # per channel and state element, one token by the recurrence
PREFILL_FLOPS = 10         # per channel, state element and token, by the parallel scan


@_register("selective_scan")
def selective_scan(batch, tokens, channels, state, b) -> Cost:
    # decode (tokens = 1): the recurrence, 6*state per channel; prefill: the parallel scan,
    # 10*state per channel and token. Reads x and dt (channels), B and C (state each) and
    # writes y per token; A (channels x state), D and dt's bias (channels) read once; the state
    # read (decode) and written once per sequence.
    per_token = (DECODE_FLOPS if tokens == 1 else PREFILL_FLOPS) * channels * state
    held = batch * channels * state * b
    io = batch * tokens * (3 * channels + 2 * state) * b
    return Cost.of(batch * tokens * per_token, kv_cache=held * (2 if tokens == 1 else 1),
                   weights=channels * (state + 2) * b, activations=io)


class Mamba1(Kind):
    name = "mamba1"
    slot = "mixer"
    order = 46
    pattern = True
    key = "mamba1"
    schema = {"type": "object", "additionalProperties": False,
              "required": ["expand", "state_size", "dt_rank", "conv_kernel"],
              "description": "Mamba-1 selective state-space layers (Jamba) for the pattern's `mamba1` layers: "
                             "expand x d_model channels, each with a state of state_size elements kept per "
                             "sequence whatever the context, and a short convolution's last conv_kernel - 1 "
                             "inputs.",
              "properties": {
                  "expand": {"type": "integer", "minimum": 1,
                             "description": "Channels per d_model: d_inner = expand x d_model; mamba_expand."},
                  "state_size": {"type": "integer", "minimum": 1,
                                 "description": "State elements per channel (d_state, the width of B and C); "
                                                "mamba_d_state."},
                  "dt_rank": {"type": "integer", "minimum": 1,
                              "description": "Rank of the step size's projection; mamba_dt_rank ('auto': "
                                             "ceil(d_model / 16))."},
                  "conv_kernel": {"type": "integer", "minimum": 1, "description": "Short convolution taps; mamba_d_conv."},
                  "conv_bias": {"type": "boolean", "default": True,
                                "description": "The convolution has a bias per channel; mamba_conv_bias (default true)."},
                  "proj_bias": {"type": "boolean", "default": False,
                                "description": "in_proj and out_proj have biases; mamba_proj_bias (default false)."},
                  "dt_bc_norms": {"type": "boolean", "default": False,
                                  "description": "RMSNorms on dt, B and C after x_proj (Jamba's dt_layernorm, "
                                                 "b_layernorm, c_layernorm; plain Mamba has none; default false)."}}}
    descriptions = {d_mi: "Mamba-1 channels d_inner (one state each)", d_ms: "Mamba-1 state elements per channel",
                    r_dt: "Mamba-1 step size's projection rank", k_mc: "Mamba-1 short convolution taps"}
    hf = {"expand": "mamba_expand", "state_size": "mamba_d_state", "dt_rank": "mamba_dt_rank",
          "conv_kernel": "mamba_d_conv", "conv_bias": ("mamba_conv_bias", True),
          "proj_bias": ("mamba_proj_bias", False)}   # JambaConfig's names

    def _config(self, model) -> dict:
        return dict(self.config(model))

    def values(self, model):
        c = self._config(model)
        return {d_mi: c["expand"] * model.d_model, d_ms: c["state_size"], r_dt: c["dt_rank"], k_mc: c["conv_kernel"]}

    def params(self, model, repeat, mixed):
        c = self._config(model)
        p = lambda name, group, per, matmul=True: layer(name, group, per, matmul, repeat=repeat)  # noqa: E731
        parts = [p("mamba_in_proj", "attention", d_model * 2 * d_mi),
                 p("mamba_conv1d", "attention", d_mi * (k_mc + (1 if c.get("conv_bias", True) else 0)), matmul=False),
                 p("mamba_x_proj", "attention", d_mi * X_PROJ),
                 p("mamba_dt_proj", "attention", r_dt * d_mi),
                 p("mamba_a_d_dt_bias", "attention", d_mi * (d_ms + 2), matmul=False),
                 p("mamba_out_proj", "attention", d_mi * d_model)]
        if c.get("dt_bc_norms", False):
            parts.append(p("mamba_dt_bc_norms", "norm", X_PROJ, matmul=False))
        if c.get("proj_bias", False):
            parts += [p("mamba_in_bias", "attention", 2 * d_mi, matmul=False),
                      p("mamba_out_bias", "attention", d_model, matmul=False)]
        return parts

    def cache_state_bytes(self, model):
        return (STATE + d_mi * (k_mc - 1)) * b

    def tp_widths(self, model):
        c = self._config(model)
        return (("Mamba-1 channels", c["expand"] * model.d_model),)

    def shards(self, model, tp):
        return {d_mi: d_mi / tp}   # vLLM's MambaMixer: the channels (and their states) split over tp

    def ops(self, model, phase, conv, repeat, members):
        c = self._config(model)
        tokens = 1 if phase == "decode" else S
        bias = c.get("proj_bias", False)
        lin = lambda name, k, n, shape, with_bias=False: linear(name, M, k, n, shape, with_bias, conv, repeat)  # noqa: E731
        norms = [op("mamba_dt_bc_norms", "rmsnorm", "norm", M, X_PROJ, b, repeat=repeat,
                    shape="rmsnorm(dt[M,r_dt]), rmsnorm(B[M,d_ms]), rmsnorm(C[M,d_ms])")] \
            if c.get("dt_bc_norms", False) else []
        return [*lin("mamba_in_proj", d_model, 2 * d_mi, "X[M,d_model] @ W[d_model,2*d_mi]", bias),
                op("mamba_conv", "short_conv", "elementwise", B, tokens, d_mi, k_mc, b, repeat=repeat,
                   shape="causal depthwise conv(k_mc) over x[M,d_mi]"),
                *lin("mamba_x_proj", d_mi, X_PROJ, "X[M,d_mi] @ W[d_mi,r_dt+2*d_ms]"),
                *norms,
                *lin("mamba_dt_proj", r_dt, d_mi, "dt[M,r_dt] @ W[r_dt,d_mi]"),
                op("selective_scan", "selective_scan", "attention", B, tokens, d_mi, d_ms, b,
                   repeat=repeat, crossing=S if phase == "prefill" else None,
                   shape=("h[B,d_mi,d_ms]: h <- exp(dt*A) h + dt x B, y = h C + D x" if phase == "decode"
                          else "parallel selective scan over S tokens")),
                op("mamba_z_silu", "silu", "elementwise", M * d_mi, b, repeat=repeat, shape="silu(Z[M,d_mi])"),
                op("mamba_z_gate", "gate_mul", "elementwise", M * d_mi, b, repeat=repeat, shape="Y * silu(Z)[M,d_mi]"),
                *lin("mamba_out_proj", d_mi, d_model, "X[M,d_mi] @ W[d_mi,d_model]", bias)]

    def output(self, prefix):
        return "mamba_out_proj"

    def stated(self, model, phase, conv):
        what = ("the recurrence per token: 6*d_ms FLOPs per channel, the state read and written"
                if phase == "decode" else
                "the parallel scan: 10*d_ms FLOPs per channel and token (2 combines a token), the final "
                "state written")
        return (("state-space (Mamba-1)", f"Mamba-1 layers keep a d_ms-element state per channel (d_mi channels) "
                                          f"and a short convolution's k_mc - 1 inputs per sequence, whatever "
                                          f"the context; {what}; under tensor parallelism x_proj's all-reduce "
                                          f"is not counted"),)
