"""`rooflinec import` against the rules of the transformers modeling files it mirrors, and
against text in a config.json that tries to become YAML structure (issue 31, items 1 and 6).

The rules, from huggingface/transformers (read at commit 00d4b3d2):
- src/transformers/models/qwen3_moe/modeling_qwen3_moe.py, Qwen3MoeDecoderLayer.__init__:
  layer i is sparse when `layer_idx not in mlp_only_layers and num_experts > 0 and
  (layer_idx + 1) % decoder_sparse_step == 0`, else a dense Qwen3MoeMLP of intermediate_size.
- src/transformers/models/gpt_oss/modeling_gpt_oss.py, GptOssAttention.__init__:
  `self.sliding_window = config.sliding_window if layer_type == "sliding_attention" else None`
  with `layer_type = config.layer_types[layer_idx]`.
- src/transformers/models/gpt2/modeling_gpt2.py, GPT2Attention.__init__: `head_dim =
  embed_dim // num_heads`, and a ValueError "`embed_dim` must be divisible by num_heads"
  where head_dim * num_heads != embed_dim.
- src/transformers/models/qwen3_next/configuration_qwen3_next.py, Qwen3NextConfig: without
  layer_types, layer i is "linear_attention" if (i + 1) % full_attention_interval else
  "full_attention"; modular_qwen3_next.py, Qwen3NextDecoderLayer: Qwen3NextGatedDeltaNet on
  linear_attention layers, Qwen3NextAttention (q_proj of num_attention_heads * head_dim * 2,
  `attn_output * torch.sigmoid(gate)`) on full ones; the MLP rule is Qwen3-MoE's.
- src/transformers/models/llama4/configuration_llama4.py, Llama4TextConfig: no_rope_layers
  defaults to `int((layer_idx + 1) % no_rope_layer_interval != 0)`, moe_layers to
  `range(interleave_moe_layer_step - 1, num_hidden_layers, interleave_moe_layer_step)`,
  layer_types to "chunked_attention" where no_rope_layers[i] else "full_attention";
  modeling_llama4.py: Llama4TextAttention applies RoPE where `config.no_rope_layers[layer_idx]`,
  Llama4TextDecoderLayer is Llama4TextMoe where `layer_idx in config.moe_layers`, else
  Llama4TextMLP of intermediate_size_mlp.
- src/transformers/models/glm4_moe/modular_glm4_moe.py, Glm4MoeDecoderLayer: Glm4MoeSparseMoeBlock
  where `layer_idx >= config.first_k_dense_replace`, else Glm4MoeMLP of intermediate_size.
- src/transformers/models/minimax_m2/modular_minimax_m2.py: MiniMaxM2Attention is
  FlexOlmoAttention's, q_norm = RMSNorm(num_attention_heads * head_dim) and k_norm over
  num_key_value_heads * head_dim (one norm over all heads); every layer full attention and MoE.
- src/transformers/models/nemotron_h/modular_nemotron_h.py, NemotronHBlock: one norm
  (NemotronHRMSNorm(hidden_size)), one mixer of MIXER_TYPES[config.layers_block_type[layer_idx]]
  (NemotronHMamba2Mixer, NemotronHAttention, NemotronHMLP, NemotronHMoE) and the residual add;
  configuration_nemotron_h.py, NemotronHConfig._pattern_to_list: hybrid_override_pattern's "M",
  "*", "-", "E" one block each. NemotronHMamba2Mixer: in_proj hidden_size -> d_inner + conv_dim
  + num_heads, conv1d over conv_dim = d_inner + 2 n_groups ssm_state_size (bias use_conv_bias),
  dt_bias, A_log, D per head, a gated norm over d_inner, out_proj; NemotronHMLP: up_proj, down_proj.
- src/transformers/models/jamba/configuration_jamba.py, JambaConfig.layers_block_type:
  "attention" if i % attn_layer_period == attn_layer_offset else "mamba"; layers_num_experts:
  num_experts if i % expert_layer_period == expert_layer_offset else 1 (JambaDecoderLayer's MoE
  where more than one); _check_supported_offset refuses an offset >= its period.
  modeling_jamba.py, JambaMambaMixer: in_proj hidden_size -> 2 d_inner (d_inner = mamba_expand x
  hidden_size; bias mamba_proj_bias), conv1d over d_inner (mamba_d_conv taps, bias
  mamba_conv_bias), x_proj d_inner -> dt_rank + 2 d_state, dt_proj dt_rank -> d_inner with a
  bias, A_log d_inner x d_state, D d_inner, RMSNorms over dt_rank, d_state, d_state, out_proj;
  JambaAttention: q, k, v, o without biases; JambaMLP: gate, up, down; JambaSparseMoeBlock: a
  router hidden_size -> num_experts and num_experts JambaMLPs; two RMSNorms a decoder layer.
- src/transformers/models/minimax/modular_minimax.py (at 008e5743; MiniMax-Text-01 and MiniMax-M1's
  architecture, the releases' modeling_minimax_m1.py the same): MiniMaxDecoderLayer is MiniMaxLightningAttention
  where the layer's type is linear (attn_type_list 0), Mixtral's attention where full (1), and a
  Mixtral sparse MoE on every layer; MiniMaxLightningAttention: qkv_proj hidden_size -> 3 *
  num_attention_heads * head_dim (then the activation), output_gate hidden_size -> num_attention_heads
  * head_dim, an RMSNorm over num_attention_heads * head_dim, out_proj, blocks of block_size.
- src/transformers/models/qwen3_5_moe/modular_qwen3_5_moe.py (at 0960594c): Qwen3_5MoeTextConfig is
  Qwen3NextConfig without intermediate_size, decoder_sparse_step and mlp_only_layers; Qwen3_5MoeDecoderLayer has
  Qwen3_5MoeSparseMoeBlock on every layer, Qwen3_5MoeGatedDeltaNet or Qwen3_5MoeAttention
  (Qwen3NextAttention's) by layer_types; Qwen3_5MoeForConditionalGeneration holds it in text_config.
- modular_qwen3_next.py, Qwen3NextRotaryEmbedding.compute_default_rope_parameters (Glm4Moe's is
  the same): RoPE turns `dim = int(head_dim * partial_rotary_factor)` dimensions of each head.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.spec import hfimport, load as spec
from rooflinec.spec.validate import MAX_DIMENSION
from rooflinec.model import params
from rooflinec.cli.app import run
from rooflinec.base.errors import SpecError
from rooflinec.cost.evaluate import number
from rooflinec.model import kinds
from rooflinec.model.lower import lower
from rooflinec.model.moe import MoE
from rooflinec.model.symbols import L, M
from rooflinec.model.symbol_table import model_values

CONFIGS = Path(__file__).resolve().parent / "hf_configs"
LOCATED = re.compile(r"^.+:\d+:\d+: .+: .+$")


def _config(folder: str) -> dict:
    return json.loads((CONFIGS / folder / "config.json").read_text(encoding="utf-8"))


def _import(tmp: Path, config: dict):
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps(config, indent=2), encoding="utf-8")
    text, notes = hfimport.convert(str(cfg))
    return spec.load_model(str(tmp / "imported.yaml"), text), text, cfg


def _total(model) -> int:
    return int(number(params.count(model).total, model_values(model)))


# --- item 1: nothing from the config becomes structure ---------------------------------------

def test_a_key_holding_yaml_does_not_turn_llama_into_a_moe(tmp_path):
    """The adversary's case: an unknown key "zz\\nmoe: {...}" wrote a real `moe:` line, and
    Llama-3.1-8B became a 25-trillion-parameter MoE. Now the note is one escaped comment line
    and the model keeps its 8,030,261,248 parameters (tests/test_hfimport.py derives them)."""
    config = _config("llama-3.1-8b")
    config["zz\nmoe: {experts: 64, top_k: 64, d_expert: 999999}"] = 1
    config["_name_or_path"] = "evil\nn_layers: 1000000"
    model, text, _ = _import(tmp_path, config)
    assert model.moe is None and model.n_layers == 32 and _total(model) == 8_030_261_248
    assert not [line for line in text.splitlines() if line.startswith("moe")]
    assert "zz\\nmoe: {experts: 64" in text   # the note, escaped, on its comment line
    assert model.name == "evil\nn_layers: 1000000"   # a name, quoted: not a field


@pytest.mark.parametrize("breaker", ["\n", "\r", "\x85", "\u2028", "\u2029", "\x0b", "\x1b[2J"])
def test_every_line_break_in_a_note_or_a_string_stays_escaped(tmp_path, breaker):
    config = _config("deepseek-v3")
    config["quantization_config"]["quant_method"] = f"fp8{breaker}moe: {{experts: 1}}"
    config[f"k{breaker}n_layers: 1"] = f"v{breaker}vocab: 7"
    config["_name_or_path"] = f"x{breaker}d_model: 8"
    model, text, _ = _import(tmp_path, config)
    assert (model.n_layers, model.vocab, model.d_model, model.moe.experts) == (61, 129280, 7168, 256)
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert all(breaker not in line for line in comments)
    assert yaml.safe_load(text)["name"] == f"x{breaker}d_model: 8"


# --- item 6: each importer against the modeling file it mirrors ------------------------------

def _sparse_by_transformers(n_layers: int, step: int, mlp_only=()) -> list[bool]:
    """Qwen3MoeDecoderLayer's rule (module docstring), layer by layer."""
    return [i not in mlp_only and (i + 1) % step == 0 for i in range(n_layers)]


@pytest.mark.slow
@settings(max_examples=25)
@given(step=st.integers(1, 6), n_layers=st.integers(1, 40))
def test_qwen3_moe_sparse_layers_follow_transformers(tmp_path_factory, step, n_layers):
    config = _config("qwen3-30b-a3b")
    config.update(decoder_sparse_step=step, num_hidden_layers=n_layers)
    model, _, _ = _import(tmp_path_factory.mktemp("q"), config)
    got = [model.moe.moe_layers(i, i + 1) == 1 for i in range(n_layers)]
    assert got == _sparse_by_transformers(n_layers, step)
    assert model.moe.dense_layers(n_layers) == got.count(False)


def test_qwen3_moe_step_two_costs_the_dense_layers_dense(tmp_path):
    """decoder_sparse_step 2 on Qwen3-30B-A3B's 48 layers: layers 1, 3, ..., 47 sparse (24),
    the other 24 a dense MLP of intermediate_size 6144: 3 * 2048 * 6144 = 37,748,736
    parameters each, where a sparse layer holds the router 2048*128 = 262,144 and 128 experts
    of 3 * 2048 * 768 = 4,718,592 (603,979,776 + 262,144 = 604,241,920)."""
    config = _config("qwen3-30b-a3b")
    every_layer, _, _ = _import(tmp_path, config)
    config["decoder_sparse_step"] = 2
    (tmp_path / "two").mkdir()
    halved, _, _ = _import(tmp_path / "two", config)
    assert halved.moe.dense_layers(48) == 24 and halved.d_ff == 6144
    assert _total(every_layer) - _total(halved) == 24 * (604_241_920 - 37_748_736)


def test_qwen3_moe_offset_is_refused_past_every(tmp_path):
    data = yaml.safe_load((Path(spec.__file__).parent / "catalog" / "models" / "qwen3-30b-a3b.yaml")
                          .read_text(encoding="utf-8"))
    data["moe"].update(every=2, offset=2)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(SpecError) as err:
        spec.load_model(str(path))
    assert "moe.offset" in str(err.value) and "not below every" in str(err.value)


@settings(max_examples=40)
@given(first=st.integers(0, 5), every=st.integers(1, 5), offset=st.integers(0, 4),
       a=st.integers(0, 30), span=st.integers(0, 30))
def test_moe_layers_closed_form_counts_the_rule(first, every, offset, a, span):
    """The closed form counts exactly the layers i in [a, a + span) with i >= first_dense and
    i % every == offset."""
    offset %= every
    moe = MoE(8, 2, 16, first_dense=first, every=every, offset=offset)
    rule = sum(1 for i in range(a, a + span) if i >= first and i % every == offset)
    assert moe.moe_layers(a, a + span) == rule
    assert moe.dense_layers(a + span, a) == span - rule


KINDS = {"sliding_attention": "sliding", "full_attention": "full"}


@pytest.mark.slow
@settings(max_examples=25)
@given(kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=40))
def test_gpt_oss_layer_types_are_the_pattern(tmp_path_factory, kinds):
    """Layer i is windowed exactly when transformers gives it a sliding window."""
    config = _config("gpt-oss-120b")
    config.update(num_hidden_layers=len(kinds), layer_types=kinds)
    model, _, _ = _import(tmp_path_factory.mktemp("g"), config)
    pattern = model.pattern or ("full",)
    assert [pattern[i % len(pattern)] for i in range(len(kinds))] == [KINDS[k] for k in kinds]
    assert (model.window == 128) if "sliding_attention" in kinds else not model.pattern


def test_gpt_oss_all_full_layers_are_costed_full(tmp_path):
    config = _config("gpt-oss-120b")
    config["layer_types"] = ["full_attention"] * 36
    model, _, _ = _import(tmp_path, config)
    assert not model.pattern   # was: the default alternation, whatever layer_types said


@pytest.mark.parametrize("bad", [["sliding_attention"] * 35, ["chunked_attention"] * 36, "full", [1] * 36])
def test_gpt_oss_layer_types_out_of_rule_are_located(tmp_path, bad):
    config = _config("gpt-oss-120b")
    config["layer_types"] = bad
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert LOCATED.match(str(err.value)) and ": layer_types: expected a list of 36 entries" in str(err.value)


def test_gpt2_head_dimension_must_divide(tmp_path):
    """n_embd 1000 over n_head 3: transformers refuses it; the importer used to floor 333."""
    config = _config("gpt2")
    config.update(n_embd=1000, n_head=3)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config, indent=2), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert run(["import", str(cfg)], out, err) == 1 and out.getvalue() == ""
    line = next(i for i, t in enumerate(cfg.read_text().splitlines(), 1) if '"n_head"' in t)
    assert err.getvalue().startswith(f"{cfg}:{line}:")
    assert "n_embd 1000 is not divisible by n_head 3" in err.getvalue()


@pytest.mark.parametrize(("step", "mlp_only", "sparse"), [
    # step 5 on 48 layers: (i + 1) % 5 == 0 for i = 4, 9, ..., 44: 9 sparse layers (issue 27: an
    # off-by-one once counted 10, i % 5 == 0 for i = 0, 5, ..., 45)
    (5, [], 9),
    # a leading run of dense layers: mlp_only_layers [0, 1, 2] at step 1 leaves 45 sparse (first_dense 3)
    (1, [0, 1, 2], 45),
    # at step 2 layers 1, 3, ..., 47 are sparse (24); [0, 1, 2, 3] removes 1 and 3: 22 left
    (2, [0, 1, 2, 3], 22),
    (1, list(range(48)), 0),   # every layer dense
])
def test_qwen3_moe_mlp_only_layers_follow_transformers(tmp_path, step, mlp_only, sparse):
    """Qwen3MoeDecoderLayer (modeling_qwen3_moe.py, module docstring): sparse when layer_idx not in
    mlp_only_layers and (layer_idx + 1) % decoder_sparse_step == 0; on Qwen3-30B-A3B's 48 layers."""
    config = _config("qwen3-30b-a3b")
    config.update(decoder_sparse_step=step, mlp_only_layers=mlp_only)
    model, _, _ = _import(tmp_path, config)
    got = [model.moe.moe_layers(i, i + 1) == 1 for i in range(48)]
    assert got == _sparse_by_transformers(48, step, mlp_only) and got.count(True) == sparse


def test_qwen3_moe_mlp_only_layers_the_rule_cannot_hold_are_noted(tmp_path):
    config = _config("qwen3-30b-a3b")
    config.update(mlp_only_layers=[10])   # a dense layer in the middle: no first_dense/every/offset says it
    model, text, _ = _import(tmp_path, config)
    assert model.moe.dense_layers(48) == 0   # costed as the step rule says, and the spec says so
    assert any("mlp_only_layers" in line and "not modelled" in line for line in text.splitlines())


# --- issue 28, item 6: the 2025 importers against their modeling files --------------------------

def _mixer_per_layer(model) -> list[str]:
    return [next(k.name for k, n in kinds.counts(model, "mixer", i, i + 1) if n) for i in range(model.n_layers)]


@pytest.mark.parametrize(("interval", "n_layers"), [(4, 48), (1, 8), (3, 10), (6, 5)])
def test_qwen3_next_mixers_follow_full_attention_interval(tmp_path, interval, n_layers):
    """Qwen3NextConfig's rule (module docstring), layer by layer."""
    config = _config("qwen3-next-80b-a3b-instruct")
    config.update(full_attention_interval=interval, num_hidden_layers=n_layers)
    model, _, _ = _import(tmp_path, config)
    want = ["linear" if (i + 1) % interval else "full" for i in range(n_layers)]
    assert _mixer_per_layer(model) == want


def test_qwen3_next_layer_types_win_over_the_interval(tmp_path):
    """A config whose layer_types differ from the interval's pattern is costed with its own."""
    config = _config("qwen3-next-80b-a3b-instruct")
    config["layer_types"] = ["full_attention", "linear_attention"] * 24
    model, _, _ = _import(tmp_path, config)
    assert model.pattern == ("full", "linear") and _mixer_per_layer(model).count("full") == 24


def test_qwen3_next_layer_types_out_of_rule_are_located(tmp_path):
    config = _config("qwen3-next-80b-a3b-instruct")
    config["layer_types"] = ["sliding_attention"] * 48
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert LOCATED.match(str(err.value)) and ": layer_types: expected a list of 48 entries" in str(err.value)


def test_qwen3_next_attention_is_gated_and_its_mlp_follows_qwen3_moe(tmp_path):
    """q_proj yields queries and the gate (2 * 16 * 256 outputs); the output is multiplied by
    sigmoid(gate): 1 FLOP an element for the multiply. decoder_sparse_step 2 leaves layers
    0, 2, ... dense of intermediate_size 5120 (Qwen3MoeDecoderLayer's rule)."""
    config = _config("qwen3-next-80b-a3b-instruct")
    config["decoder_sparse_step"] = 2
    model, _, _ = _import(tmp_path, config)
    assert model.output_gate and model.moe.shared_gate and model.moe.dense_layers(48) == 24
    ops = {o.name: o for o in lower(model, "decode").ops}
    assert ops["q_proj"].cost.flops.subs(model_values(model)).subs(M, 1) == 2 * 2048 * 2 * 16 * 256
    assert ops["attn_gate_mul"].repeat == L - 36 and "attn_gate_mul" in [o.name for o in lower(model, "prefill").ops]
    assert _sparse_by_transformers(48, 2).count(True) == model.moe.moe_layers(0, 48) == 24


@pytest.mark.parametrize("rope", [[1, 1, 1, 0] * 12, [1, 0] * 24, [0] + [1] * 47, [1] * 48])
def test_llama4_rope_skips_exactly_the_no_rope_layers(tmp_path, rope):
    """Llama4TextAttention applies RoPE where no_rope_layers[i] is 1: the RoPE op repeats over
    those layers only, and a layer attends chunked exactly when it uses RoPE (layer_types'
    default)."""
    config = _config("llama-4-scout-17b-16e")
    config["no_rope_layers"] = rope
    model, _, _ = _import(tmp_path, config)
    ops = {o.name: o for o in lower(model, "decode").ops}
    assert ops["rope"].repeat.subs(L, 48) == rope.count(1)
    assert _mixer_per_layer(model) == ["sliding" if x else "full" for x in rope]   # chunked: the sliding bound


def test_llama4_defaults_follow_its_config_class(tmp_path):
    """Without no_rope_layers, moe_layers and layer_types: NoPE every no_rope_layer_interval-th
    layer, MoE every interleave_moe_layer_step-th from step - 1 (Llama4TextConfig)."""
    config = _config("llama-4-scout-17b-16e")
    for key in ("no_rope_layers", "moe_layers"):
        del config[key]
    config.update(no_rope_layer_interval=3, interleave_moe_layer_step=3, num_hidden_layers=12)
    model, _, _ = _import(tmp_path, config)
    assert model.nope == (False, False, True) and model.pattern == ("chunked", "chunked", "full")
    moe = [model.moe.moe_layers(i, i + 1) == 1 for i in range(12)]
    assert moe == [i in range(2, 12, 3) for i in range(12)]
    assert model.moe.dense_layers(12) == 8 and model.d_ff == 16384


def test_llama4_moe_layers_off_any_rule_are_located(tmp_path):
    config = _config("llama-4-scout-17b-16e")
    config["moe_layers"] = [0, 1, 5]
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert LOCATED.match(str(err.value)) and ": moe_layers: these MoE layers are not every k-th" in str(err.value)


@pytest.mark.parametrize("first", [0, 3, 91])
def test_glm4_moe_dense_layers_are_the_first_k(tmp_path, first):
    """Glm4MoeDecoderLayer: sparse where layer_idx >= first_k_dense_replace."""
    config = _config("glm-4.7")
    config["first_k_dense_replace"] = first
    model, _, _ = _import(tmp_path, config)
    assert [model.moe.moe_layers(i, i + 1) == 1 for i in range(92)] == [i >= first for i in range(92)]


def test_minimax_m2_norms_q_and_k_over_all_heads(tmp_path):
    """FlexOlmoAttention's q_norm over 48 * 128 and k_norm over 8 * 128 elements: 7,168 gains a
    layer (a per-head norm would hold 2 * 128); the same FLOPs as per-head norms."""
    model, _, _ = _import(tmp_path, _config("minimax-m2.5"))
    per_head = spec.Model(**{**model.__dict__, "qk_norm": True})
    assert _total(model) - _total(per_head) == 62 * (7168 - 256)
    ops, heads = ({o.name: o for o in lower(m, "decode").ops} for m in (model, per_head))
    assert (ops["q_norm"].cost.flops - heads["q_norm"].cost.flops).expand() == 0


def test_minimax_m2_lightning_layers_are_refused_located(tmp_path):
    """attn_type 0 (lightning attention) is MiniMax-M1's and Text-01's layer, not MiniMaxM2's."""
    config = _config("minimax-m2.5")
    config["attn_type_list"][7] = 0
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert LOCATED.match(str(err.value)) and ": attn_type_list: lightning attention" in str(err.value)
    assert "MiniMaxM1ForCausalLM" in str(err.value)


def test_nope_beside_linear_layers_is_refused(tmp_path):
    data = yaml.safe_load(hfimport.convert(str(CONFIGS / "qwen3-next-80b-a3b-instruct"))[0])
    data["attention"]["nope"] = [False, True]
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(SpecError) as err:
        spec.load_model(str(path))
    assert "attention.nope" in str(err.value) and "other mixers" in str(err.value)


@pytest.mark.parametrize("folder", ["qwen3-next-80b-a3b-instruct", "qwen3-30b-a3b", "llama-4-scout-17b-16e"])
def test_the_most_layers_import_in_closed_form(tmp_path, folder):
    """The per-layer rules (mlp_only_layers, full_attention_interval, no_rope_layer_interval,
    interleave_moe_layer_step) are read in closed form: a billion layers once ran out of memory
    building Qwen3-MoE's list of sparse layers. Llama 4's per-layer lists must then be left out.
    The most a spec holds, validate.MAX_DIMENSION, imports; one more is refused at the key."""
    config = _config(folder)
    config["num_hidden_layers"] = MAX_DIMENSION
    for key in ("no_rope_layers", "moe_layers"):
        config.pop(key, None)
    model, _, _ = _import(tmp_path, config)
    assert model.n_layers == MAX_DIMENSION and model.moe.moe_layers(0, MAX_DIMENSION) > 0
    config["num_hidden_layers"] = MAX_DIMENSION + 1
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert LOCATED.match(str(err.value)) and "num_hidden_layers: expected a positive whole number of at most" in str(err.value)


@pytest.mark.parametrize(("types", "pattern"), [
    ([0, 0, 0, 0, 0, 0, 0, 1] * 10, ["lightning"] * 7 + ["full"]),
    ([0, 1] * 40, ["lightning", "full"]),
    ([1] * 80, None)])
def test_minimax_m1_mixers_follow_attn_type_list(tmp_path, types, pattern):
    """MiniMaxDecoderLayer: lightning attention where attn_type_list is 0, softmax attention where 1;
    the list becomes the pattern's shortest period; with no lightning layer no lightning section."""
    config = _config("minimax-m1-80k")
    config["attn_type_list"] = types
    model, _, _ = _import(tmp_path, config)
    registry = kinds.registry()
    lightning = types.count(0)
    assert (model.pattern or None) == (tuple(pattern) if pattern else None)
    assert dict((k.name, n) for k, n in kinds.counts(model, "mixer")) == \
        {n: c for n, c in (("full", 80 - lightning), ("lightning", lightning)) if c}
    assert (registry["lightning"].config(model) is not None) == bool(lightning)


def test_minimax_m1_reads_block_size_and_the_shared_expert(tmp_path):
    """block_size (Text-01's legacy configs carry it; M1's config leaves it out: the release's
    BLOCK = 256); shared_intermediate_size > 0 is a shared MLP mixed by a sigmoid of X W[d_model, 1]
    (the release's `coefficient`): 3*6144*4096 + 6144 more parameters a layer. A per-layer list
    whose widths differ is refused, located."""
    config = _config("minimax-m1-80k")
    plain, _, _ = _import(tmp_path, config)
    assert dict(kinds.registry()["lightning"].config(plain))["block"] == 256
    config.update(block_size=64, shared_intermediate_size=[4096])
    model, _, _ = _import(tmp_path, config)
    assert dict(kinds.registry()["lightning"].config(model))["block"] == 64
    assert (model.moe.shared_experts, model.moe.d_shared, model.moe.shared_gate) == (1, 4096, True)
    assert _total(model) - _total(plain) == 80 * (3 * 6144 * 4096 + 6144)
    config["shared_intermediate_size"] = [0, 4096]
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert LOCATED.match(str(err.value)) and "shared_intermediate_size" in str(err.value)


@pytest.mark.parametrize(("factor", "turned"), [(0.25, 64), (0.5, 128), (0.3, 76), (1.0, None)])
def test_partial_rotary_turns_int_head_dim_times_factor(tmp_path, factor, turned):
    """Qwen3-Next's head_dim 256: RoPE over int(256 * factor) dimensions of each q and k head, 3
    FLOPs an element: at 0.25, 3 * 64 * (16 + 2) = 3,456 a token and layer (all 256: 13,824)."""
    config = _config("qwen3-next-80b-a3b-instruct")
    config["partial_rotary_factor"] = factor
    model, _, _ = _import(tmp_path, config)
    assert model.rotary_dim == turned
    rope = next(o for o in lower(model, "decode").ops if o.name == "rope")
    assert rope.cost.flops.subs(model_values(model)).subs(M, 1) == 3 * (turned or 256) * 18


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, "half", True])
def test_partial_rotary_out_of_range_is_located(tmp_path, bad):
    config = _config("glm-4.7")
    config["partial_rotary_factor"] = bad
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert LOCATED.match(str(err.value)) and ": partial_rotary_factor: expected a fraction" in str(err.value)


def test_rotary_dim_above_head_dim_is_refused(tmp_path):
    config = _config("minimax-m2.5")
    config["rotary_dim"] = 256
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert LOCATED.match(str(err.value)) and "rotary_dim 256 exceeds head_dim 128" in str(err.value)


def test_qwen3_next_without_linear_layers_notes_the_unused_shape(tmp_path):
    config = _config("qwen3-next-80b-a3b-instruct")
    config["layer_types"] = ["full_attention"] * 48
    model, text, _ = _import(tmp_path, config)
    assert not model.pattern and not model.blocks
    assert "linear_num_value_heads: not modelled; costs nothing (no layer is linear_attention" in text


# --- Nemotron-H and Jamba against their transformers classes -----------------------------------

def _nemotron_blocks_by_transformers(config: dict) -> int:
    """Parameters of NemotronHForCausalLM block by block (module docstring): each block's norm and
    mixer, the untied tables and the final norm."""
    d, heads, kv, hd = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"], 128
    n_h, d_h, n, g, k = (config[key] for key in ("mamba_num_heads", "mamba_head_dim", "ssm_state_size",
                                                  "n_groups", "conv_kernel"))
    inner, conv = n_h * d_h, n_h * d_h + 2 * g * n
    mixer = {"M": d * (inner + conv + n_h) + conv * (k + 1) + 3 * n_h + inner + inner * d,
             "*": 2 * d * heads * hd + 2 * d * kv * hd, "-": 2 * d * config["intermediate_size"]}
    blocks = config["hybrid_override_pattern"]
    return 2 * config["vocab_size"] * d + sum(d + mixer[b] for b in blocks) + d


NEMOTRON_UNITS = ["M-", "M", "*-"]   # the pairs a rooflinec layer holds


@pytest.mark.slow
@settings(max_examples=15)
@given(units=st.lists(st.sampled_from(NEMOTRON_UNITS), min_size=1, max_size=12))
def test_nemotron_h_blocks_follow_transformers(tmp_path_factory, units):
    """Any pattern of the pairs: each Mamba-2 block a mamba layer, each attention block a full one,
    each MLP block a dense MLP; the count is transformers' block by block plus the noted norm of
    each Mamba-2 block with no MLP after it."""
    pattern = "".join(units)
    _check_nemotron(tmp_path_factory.mktemp("n"), pattern)


@pytest.mark.parametrize("pattern", ["M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", "MM*-M", "*-"])
def test_nemotron_h_published_and_edge_patterns_follow_transformers(tmp_path, pattern):
    _check_nemotron(tmp_path, pattern)


def _check_nemotron(tmp: Path, pattern: str) -> None:
    config = _config("nemotron-h-8b-base-8k")
    config.update(hybrid_override_pattern=pattern, num_hidden_layers=len(pattern))
    model, _, _ = _import(tmp, config)
    per_layer = [model.pattern[i % len(model.pattern)] for i in range(model.n_layers)] if model.pattern else \
        ["full"] * model.n_layers
    ssm = sum(kind in ("mamba", "mamba_no_ffn") for kind in per_layer)
    assert (ssm, per_layer.count("full")) == (pattern.count("M"), pattern.count("*"))
    assert model.n_layers - per_layer.count("mamba_no_ffn") == pattern.count("-")
    bare = per_layer.count("mamba_no_ffn")
    assert _total(model) == _nemotron_blocks_by_transformers(config) + bare * config["hidden_size"]


@pytest.mark.parametrize(("pattern", "block", "what"), [
    ("M--", 2, "an MLP block after no Mamba-2"), ("-M", 0, "an MLP block after no"),
    ("M*M-", 1, "an attention block with no MLP block after it"), ("MEM-", 1, "a MoE block (E)")])
def test_nemotron_h_patterns_a_layer_cannot_hold_are_located(tmp_path, pattern, block, what):
    config = _config("nemotron-h-8b-base-8k")
    config.update(hybrid_override_pattern=pattern, num_hidden_layers=len(pattern))
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert f"hybrid_override_pattern: block {block} is {what}" in str(err.value)
    assert LOCATED.match(str(err.value))


def test_nemotron_h_without_mamba_blocks_notes_the_unused_shape(tmp_path):
    config = _config("nemotron-h-8b-base-8k")
    config.update(hybrid_override_pattern="*-*-", num_hidden_layers=4)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config, indent=2), encoding="utf-8")
    _, notes = hfimport.convert(str(cfg))
    unused = {n.path for n in notes if "no block is Mamba-2" in n.message}
    assert unused == {"mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel",
                      "use_conv_bias", "chunk_size"}
    assert not [n for n in notes if "unknown to the" in n.message]


def test_nemotron_h_layers_block_type_is_read_like_the_pattern(tmp_path):
    config = _config("nemotron-h-8b-base-8k")
    names = {"M": "mamba", "*": "attention", "-": "mlp"}
    config["layers_block_type"] = [names[c] for c in config.pop("hybrid_override_pattern")]
    model, _, _ = _import(tmp_path, config)
    assert _total(model) == 8_100_852_736 + 4 * 4096


def test_jamba_with_every_layer_attention_follows_layers_num_experts(tmp_path):
    """attn_layer_period 1: no Mamba-1 layer, so Jamba maps (a Mixtral-like decoder without RoPE);
    its MoE layers are JambaConfig.layers_num_experts' for each expert period and offset."""
    for every, offset in ((2, 1), (1, 0), (4, 3), (3, 0)):
        config = _config("jamba-1.5-mini")
        config.update(attn_layer_period=1, attn_layer_offset=0, expert_layer_period=every,
                      expert_layer_offset=offset, num_hidden_layers=12)
        (tmp_path / f"{every}{offset}").mkdir()
        model, _, _ = _import(tmp_path / f"{every}{offset}", config)
        got = [model.moe.moe_layers(i, i + 1) == 1 for i in range(12)]
        assert got == [i % every == offset for i in range(12)] and model.positions == "none"


def _jamba_layers_by_transformers(config: dict) -> int:
    """Parameters of JambaForCausalLM layer by layer (module docstring): each layer's two norms,
    its mixer (JambaConfig.layers_block_type) and its feed-forward (layers_num_experts); the untied
    tables and the final norm."""
    d, n, ff, e = (config[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "num_experts"))
    heads, kv, hd = config["num_attention_heads"], config["num_key_value_heads"], d // config["num_attention_heads"]
    inner, state, rank, taps = config["mamba_expand"] * d, config["mamba_d_state"], config["mamba_dt_rank"], config["mamba_d_conv"]
    mamba = (d * 2 * inner + inner * (taps + 1) + inner * (rank + 2 * state) + rank * inner + inner
             + inner * state + inner + rank + 2 * state + inner * d)
    attention = 2 * d * heads * hd + 2 * d * kv * hd
    mlp = 3 * d * ff
    total = 0
    for i in range(n):
        total += 2 * d + (attention if i % config["attn_layer_period"] == config["attn_layer_offset"] else mamba)
        total += e * mlp + d * e if i % config["expert_layer_period"] == config["expert_layer_offset"] else mlp
    return 2 * config["vocab_size"] * d + total + d


@pytest.mark.slow
@settings(max_examples=15)
@given(period=st.integers(1, 9), offset=st.integers(0, 8), every=st.integers(1, 4), first=st.integers(0, 3),
       layers=st.integers(1, 20))
def test_jamba_layers_follow_transformers(tmp_path_factory, period, offset, every, first, layers):
    """Any attention period and offset, expert period and offset and depth: each Mamba-1 layer a
    mamba1 layer, each attention layer a full one, the experts where layers_num_experts puts them;
    the count is transformers' layer by layer."""
    config = _config("jamba-1.5-mini")
    config.update(attn_layer_period=period, attn_layer_offset=offset % period, expert_layer_period=every,
                  expert_layer_offset=first % every, num_hidden_layers=layers, hidden_size=256,
                  num_attention_heads=4, num_key_value_heads=2, intermediate_size=512, mamba_dt_rank=16,
                  vocab_size=1000)
    model, _, _ = _import(tmp_path_factory.mktemp("j"), config)
    assert _total(model) == _jamba_layers_by_transformers(config)


def test_jamba_offset_past_its_period_is_refused(tmp_path):
    config = _config("jamba-1.5-mini")
    config.update(attn_layer_period=1, attn_layer_offset=0, expert_layer_offset=2)
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert "expert_layer_offset: expert_layer_offset 2 must be smaller than expert_layer_period 2" in str(err.value)


def test_qwen3_5_every_layer_is_moe_and_the_gate_follows_attn_output_gate(tmp_path):
    """Qwen3_5MoeDecoderLayer: the sparse block on every layer; q_proj doubled for the gate only
    where attn_output_gate (10 layers of 2048*16*256 fewer parameters without it)."""
    config = _config("qwen3.5-35b-a3b")
    gated, _, _ = _import(tmp_path, config)
    assert gated.moe.moe_layers(0, 40) == 40 and gated.output_gate
    config["text_config"]["attn_output_gate"] = False
    plain, _, _ = _import(tmp_path, config)
    assert not plain.output_gate and _total(gated) - _total(plain) == 10 * 2048 * 16 * 256


def test_qwen3_5_rope_parameters_must_agree_with_the_partial_factor(tmp_path):
    """rope_parameters.partial_rotary_factor turning other dimensions than partial_rotary_factor
    does is refused, located at text_config.rope_parameters."""
    config = _config("qwen3.5-35b-a3b")
    config["text_config"]["rope_parameters"]["partial_rotary_factor"] = 0.5
    with pytest.raises(SpecError) as err:
        _import(tmp_path, config)
    assert LOCATED.match(str(err.value)) and "text_config.rope_parameters" in str(err.value)
