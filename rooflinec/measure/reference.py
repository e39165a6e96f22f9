"""A small dense decoder in PyTorch with random weights: the ops of rooflinec's naive program,
each run inside a profiler range named after its op, so a profile maps onto the spec by name.

It makes the lowering's choices (CONVENTIONS): q, k and v as three GEMMs, each bias
added inside its GEMM (torch's addmm), attention as five kernels with the score matrix in
memory between them, and logits for the last prompt token only. Decode attends to a random
KV cache of `context` tokens per layer; the new token's k and v are not appended to it.
"""

from __future__ import annotations

import math

PREFIX = "rooflinec::"
# the lowering's choices this implementation makes
CONVENTIONS = {"qkv": "separate", "bias": "in_gemm", "logits": "last", "causal_halving": False}
# the ops this implementation runs; a spec's other ops (declared operators) are listed as not run
RUNS = frozenset({
    "embedding", "pos_embedding", "embed_add", "attn_norm", "norm", "q_proj", "k_proj", "v_proj",
    "rope", "qk_matmul", "scale", "causal_mask", "softmax", "pv_matmul", "o_proj", "attn_residual",
    "mlp_norm", "gate_proj", "silu", "up_proj", "gate_mul", "gelu", "down_proj", "mlp_residual",
    "residual", "final_norm", "lm_head"})


class Decoder:
    """`model` (a rooflinec Model) on `device` at `dtype`, ready to run one decode or prefill step."""

    name = "rooflinec's reference decoder"
    conventions = CONVENTIONS
    groups: dict = {}   # every range is one op
    by_op: dict = {}

    def __init__(self, torch, model, device, dtype, phase: str, batch: int, context: int,
                 seed: int = 0):
        self.t, self.m, self.phase, self.B, self.S = torch, model, phase, batch, context
        self.gen = torch.Generator(device="cpu").manual_seed(seed)
        self.device, self.dtype = device, dtype
        d, hd = model.d_model, model.head_dim
        self.embed = self._w(model.vocab, d)
        self.pos = self._w(model.max_context or context, d) if model.positions == "learned" else None
        self.lm = self.embed if model.tied_embeddings else self._w(model.vocab, d)
        self.final = self._norm()
        self.layers = [self._layer() for _ in range(model.n_layers)]
        T = 1 if phase == "decode" else context
        self.ids = torch.randint(0, model.vocab, (batch, T), generator=self.gen).to(device)
        first = context if phase == "decode" else 0
        self.positions = torch.arange(first, first + T, device=device).clamp(
            max=(model.max_context or context + 1) - 1)
        self.rotary = self._rotary() if model.positions == "rope" else None
        # True where a query may not see a key: the future, in prefill; nothing, in decode
        future = torch.ones(T, context, dtype=torch.bool, device=device).triu(1)
        self.mask = future if phase == "prefill" else torch.zeros_like(future)
        self.cache = [(self._w(batch, model.n_kv_heads, context, hd, std=1.0),
                       self._w(batch, model.n_kv_heads, context, hd, std=1.0))
                      for _ in self.layers] if phase == "decode" else None

    def _rotary(self, base: float = 10000.0):
        """cos and sin of each position's angles, [T, 1, d_head]: computed once, outside the step."""
        hd, t = self.m.head_dim, self.t
        inv = 1.0 / base ** (t.arange(0, hd, 2, device=self.device, dtype=t.float32) / hd)
        angles = self.positions.to(t.float32)[:, None] * inv[None]
        full = t.cat((angles, angles), -1)[:, None, :]
        return full.cos().to(self.dtype), full.sin().to(self.dtype)

    def _rope(self, q, k):
        """Rotary positions on q and k (rotate-half form, as Llama and Qwen apply them)."""
        cos, sin = self.rotary
        hd, (B, T) = self.m.head_dim, q.shape[:2]

        def rotate(x):
            x = x.view(B, T, -1, hd)
            half = self.t.cat((-x[..., hd // 2:], x[..., :hd // 2]), -1)
            return (x * cos + half * sin).reshape(B, T, -1)
        return rotate(q), rotate(k)

    def _w(self, *shape, std: float = 0.02):
        return (self.t.randn(*shape, generator=self.gen) * std).to(self.device, self.dtype)

    def _norm(self):
        d = self.m.d_model
        return (self.t.ones(d, device=self.device, dtype=self.dtype),
                self.t.zeros(d, device=self.device, dtype=self.dtype) if self.m.norm_bias else None)

    def _linear(self, k: int, n: int, bias: bool):
        return (self._w(n, k), self._w(n) if bias else None)

    def _layer(self) -> dict:
        m = self.m
        d, q, kv = m.d_model, m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
        layer = {"norm1": self._norm(), "norm2": self._norm(),
                 "q": self._linear(d, q, m.qkv_bias), "k": self._linear(d, kv, m.qkv_bias),
                 "v": self._linear(d, kv, m.qkv_bias), "o": self._linear(q, d, m.out_bias),
                 "up": self._linear(d, m.d_ff, m.mlp_bias), "down": self._linear(m.d_ff, d, m.mlp_bias)}
        if m.mlp_kind == "swiglu":
            layer["gate"] = self._linear(d, m.d_ff, m.mlp_bias)
        return layer

    # one op each, inside its named range
    def _op(self, name: str, fn, *args):
        with self.t.profiler.record_function(PREFIX + name):
            return fn(*args)

    def _normed(self, name: str, x, params):
        F = self.t.nn.functional
        gain, shift = params
        if self.m.norm_kind == "layernorm":
            return self._op(name, F.layer_norm, x, (self.m.d_model,), gain, shift)
        return self._op(name, F.rms_norm, x, (self.m.d_model,), gain)

    def _proj(self, name: str, x, params):
        return self._op(name, self.t.nn.functional.linear, x, *params)

    def _attention(self, layer: dict, i: int, h):
        m, B, T = self.m, self.B, h.shape[1]
        n_kv, g, hd = m.n_kv_heads, m.n_heads // m.n_kv_heads, m.head_dim
        q, k, v = (self._proj(f"{n}_proj", h, layer[n]) for n in "qkv")
        if self.rotary is not None:
            q, k = self._op("rope", self._rope, q, k)
        if self.cache is not None:
            k_all, v_all = self.cache[i]
        else:
            k_all = k.view(B, T, n_kv, hd).transpose(1, 2)
            v_all = v.view(B, T, n_kv, hd).transpose(1, 2)
        S = k_all.shape[2]

        def qk():   # the query heads of one KV head side by side: [B, n_kv, g*T, d_head]
            heads = q.view(B, T, n_kv, g, hd).permute(0, 2, 3, 1, 4).reshape(B, n_kv, g * T, hd)
            return (heads @ k_all.transpose(-1, -2)).view(B, n_kv, g, T, S)

        def pv(p):
            out = p.view(B, n_kv, g * T, S) @ v_all
            return out.view(B, n_kv, g, T, hd).permute(0, 3, 1, 2, 4).reshape(B, T, m.n_heads * hd)

        s = self._op("qk_matmul", qk)
        s = self._op("scale", self.t.mul, s, 1 / math.sqrt(hd))
        s = self._op("causal_mask", self.t.masked_fill, s, self.mask, float("-inf"))
        p = self._op("softmax", self.t.softmax, s, -1)
        return self._proj("o_proj", self._op("pv_matmul", pv, p), layer["o"])

    def _mlp(self, layer: dict, h):
        F = self.t.nn.functional
        up = self._proj("up_proj", h, layer["up"])
        if self.m.mlp_kind == "swiglu":
            gate = self._op("silu", F.silu, self._proj("gate_proj", h, layer["gate"]))
            act = self._op("gate_mul", self.t.mul, gate, up)
        else:
            act = self._op("gelu", F.gelu, up)
        return self._proj("down_proj", act, layer["down"])

    def step(self):
        """One forward step; returns the logits."""
        F, add = self.t.nn.functional, self.t.add
        x = self._op("embedding", F.embedding, self.ids, self.embed)
        if self.pos is not None:
            x = self._op("embed_add", add, x, self._op("pos_embedding", F.embedding,
                                                        self.positions, self.pos))
        for i, layer in enumerate(self.layers):
            if self.m.block == "parallel":
                h = self._normed("norm", x, layer["norm1"])
                a, f = self._attention(layer, i, h), self._mlp(layer, h)
                x = self._op("residual", lambda: x + a + f)
                continue
            a = self._attention(layer, i, self._normed("attn_norm", x, layer["norm1"]))
            x = self._op("attn_residual", add, x, a)
            f = self._mlp(layer, self._normed("mlp_norm", x, layer["norm2"]))
            x = self._op("mlp_residual", add, x, f)
        x = self._normed("final_norm", x, self.final)
        return self._op("lm_head", lambda: F.linear(x[:, -1:], self.lm))
