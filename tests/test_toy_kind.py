"""A layer kind added in this one file (rooflinec.model.kinds): a toy "token shift" mixer
(RWKV-style: each layer mixes the token with the last `taps` tokens it keeps, then one d_model
x d_model projection). It shows the design's claim: the kind's spec section, symbols,
parameters, per-sequence state and ops all come from the class below; no other file names it,
and the model spec, parameter count, cache and decode program pick it up.
"""

from __future__ import annotations

import textwrap

import pytest
import sympy as sp

from rooflinec.base.errors import SpecError
from rooflinec.cost import kvcache
from rooflinec.cost.evaluate import number
from rooflinec.model import kinds, params, symbol_table
from rooflinec.model.build import linear, op
from rooflinec.model.component import layer
from rooflinec.model.lower import Conventions, lower
from rooflinec.model.symbols import B, M, S, b, d_model, dimension
from rooflinec.spec.load import load_model

n_taps = dimension("n_taps")


class TokenShift(kinds.Kind):
    name = "shift"
    slot = "mixer"
    order = 40
    pattern = True
    key = "shift"
    schema = {"type": "object", "additionalProperties": False, "required": ["taps"],
              "description": "Token shift: each layer keeps its last `taps` inputs.",
              "properties": {"taps": {"type": "integer", "minimum": 1, "description": "Tokens kept."}}}
    descriptions = {n_taps: "tokens a shift layer keeps"}

    def values(self, model):
        return {n_taps: dict(self.config(model))["taps"]}

    def params(self, model, repeat, mixed):
        return [layer("shift_mix", "attention", (n_taps + 1) * d_model, matmul=False, repeat=repeat),
                layer("shift_proj", "attention", d_model * d_model, repeat=repeat)]

    def cache_state_bytes(self, model):
        return n_taps * d_model * b

    def ops(self, model, phase, conv, repeat, members):
        return [op("shift_mix", "elementwise", "elementwise", M * d_model, 2 * n_taps, n_taps + 1, 1, b,
                   repeat=repeat, shape="sum_j mu_j * X[t-j]"),
                *linear("shift_proj", M, d_model, d_model, "X[M,d_model] @ W[d_model,d_model]", False, conv, repeat)]

    def output(self, prefix):
        return "shift_proj"


@pytest.fixture
def toy():
    kind = kinds.register(TokenShift())
    yield kind
    kinds.unregister(kind.name)


SPEC = """\
name: toy-shift
d_model: 1024
n_layers: 6
vocab: 32000
attention: {{n_heads: 8, n_kv_heads: 2, head_dim: 128, pattern: [shift, shift, full]}}
mlp: {{kind: swiglu, d_ff: 4096}}
{shift}
source: this test
"""


def _spec(tmp_path, shift="shift: {taps: 3}"):
    path = tmp_path / "toy.yaml"
    path.write_text(textwrap.dedent(SPEC.format(shift=shift)))
    return str(path)


def test_a_model_with_the_toy_kind_is_costed(toy, tmp_path):
    model = load_model(_spec(tmp_path))
    assert kinds.counts(model, "mixer") == [(kinds.registry()["full"], 2), (toy, 4)]
    values = symbol_table.model_values(model)
    assert values[n_taps] == 3 and symbol_table.descriptions()[n_taps] == "tokens a shift layer keeps"

    # parameters by hand: 2 full layers of q, k, v, o: 1024*(1024 + 2*256 + 1024) = 2,621,440;
    # 4 shift layers of (3 + 1)*1024 + 1024*1024 = 1,052,672; 6 SwiGLU MLPs of 3*1024*4096 =
    # 12,582,912 and 2 RMSNorm gains of 1024; embeddings and head 2*32000*1024 = 65,536,000;
    # final norm 1024. Total 2*2,621,440 + 4*1,052,672 + 6*(12,582,912 + 2,048) + 65,536,000
    # + 1024 = 5,242,880 + 4,210,688 + 75,509,760 + 65,537,024 = 150,500,352.
    total = number(params.count(model).total, values)
    assert total == 2 * 2_621_440 + 4 * 1_052_672 + 6 * (12_582_912 + 2048) + 65_536_000 + 1024 == 150_500_352

    # cache at bf16: a full layer keeps K and V, 2*2*128*2 = 1,024 B per token, so 2 of them
    # 2,048 B; 4 shift layers keep 3*1024*2 = 6,144 B each whatever the context, 24,576 B.
    # At S = 1,000: 2,048,000 + 24,576.
    assert kvcache.per_token(model, 2) == 2048
    assert kvcache.per_sequence(model, 2, 1000) == 2_048_000 + 24_576
    assert kvcache.per_sequence(model, 2, 1) == 2048 + 24_576
    assert kvcache.sequence_formula(model).subs(values).subs({b: 2, S: 1000}) == 2_048_000 + 24_576

    # decode: the shift ops repeat over the 4 shift layers, full attention's over L - 4
    program = lower(model, "decode", Conventions())
    by_name = {o.name: o for o in program.ops}
    assert by_name["shift_proj"].repeat == 4 and by_name["q_proj"].repeat == sp.Symbol("L", positive=True, integer=True) - 4
    assert by_name["mlp_residual"].into == "down_proj"
    point = {**values, B: 1, M: 1, S: 1000, b: 2}   # decode binds M = B
    proj = by_name["shift_proj"]
    # one token: 2*1024*1024 FLOPs; bytes 1024*1024*2 of weights + (1024 + 1024)*2 of activations
    assert number(proj.cost.flops * proj.repeat, point) == 4 * 2 * 1024 * 1024
    assert number(proj.cost.bytes, point) == 1024 * 1024 * 2 + 2048 * 2
    mix = by_name["shift_mix"]
    # 1024 elements, 2*3 FLOPs each; read 4 (the token and the 3 kept), write 1: 5*1024*2 B
    assert number(mix.cost.flops, point) == 6 * 1024 and number(mix.cost.bytes, point) == 5 * 1024 * 2
    assert n_taps in program.symbols


def test_the_toy_kinds_section_is_checked_by_its_own_schema(toy, tmp_path):
    with pytest.raises(SpecError) as err:
        load_model(_spec(tmp_path, "shift: {taps: 0}"))
    assert "shift.taps" in str(err.value) and "toy.yaml:7:15" in str(err.value)


def test_without_the_kind_the_pattern_name_is_refused(tmp_path):
    with pytest.raises(SpecError) as err:
        load_model(_spec(tmp_path))
    assert "attention.pattern" in str(err.value)
