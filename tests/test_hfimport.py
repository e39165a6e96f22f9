"""`rooflinec import`: real public config.json files (tests/hf_configs/, sources in its README)
become model specs whose parameter counts match the published figures."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.spec import hfimport, load as spec
from rooflinec.spec.validate import MAX_DIMENSION
from rooflinec.model import params
from rooflinec.cost import deployment, kvcache
from rooflinec.base.errors import SpecError
from rooflinec.cost.evaluate import number
from rooflinec.model.lower import lower
from rooflinec.model.symbols import B, M, V, b, d_head, n_kv, n_q
from rooflinec.model.symbol_table import model_values

CONFIGS = Path(__file__).resolve().parent / "hf_configs"


def imported(folder: str, hf_id=None):
    text, notes = hfimport.convert(str(CONFIGS / folder), hf_id)
    return spec.load_model(str(CONFIGS / folder / "imported.yaml"), text), notes, text


def total(model) -> int:
    return int(number(params.count(model).total, model_values(model)))


# Published figures. A checkpoint's model.safetensors.index.json states metadata.total_size in
# bytes; these checkpoints store bf16, 2 bytes a parameter, so parameters = total_size / 2.
PUBLISHED = {
    # meta-llama/Llama-3.1-8B: total_size 16,060,522,496 B / 2
    "llama-3.1-8b": 8_030_261_248,
    # mistralai/Mistral-7B-v0.1: total_size 14,483,464,192 B / 2
    "mistral-7b-v0.1": 7_241_732_096,
    # Qwen/Qwen2.5-7B-Instruct: total_size 15,231,233,024 B / 2 (its card rounds to 7.61B)
    "qwen2.5-7b-instruct": 7_615_616_512,
    # Qwen/Qwen3-8B: total_size 16,381,470,720 B / 2 (its card rounds to 8.2B)
    "qwen3-8b": 8_190_735_360,
    # microsoft/Phi-3-mini-4k-instruct: total_size 7,642,159,104 B / 2 (the Phi-3 report: 3.8B)
    "phi-3-mini-4k-instruct": 3_821_079_552,
}


@pytest.mark.parametrize("folder", sorted(PUBLISHED))
def test_parameter_count_matches_the_checkpoint(folder):
    model, _, _ = imported(folder)
    assert total(model) == PUBLISHED[folder]


def test_llama_arithmetic():
    """Llama-3.1-8B by hand: two 128256 x 4096 tables (untied), and 32 layers of
    q 4096^2 + k, v 4096*1024 each + o 4096^2 + MLP 3*4096*14336 + two norms 2*4096
    = 218,112,000; plus the final norm: 1,050,673,152 + 6,979,584,000 + 4096 = 8,030,261,248."""
    model, _, _ = imported("llama-3.1-8b")
    assert params.count(model).per_layer.subs(model_values(model)) == 218_112_000
    assert 2 * 128256 * 4096 + 32 * 218_112_000 + 4096 == 8_030_261_248 == total(model)


def test_gemma2_matches_its_report():
    """Gemma 2 technical report, table 2: the 9B model has 8,324,201,984 non-embedding
    parameters. Per layer: q 3584*4096 + k, v 3584*2048 each + o 4096*3584 + MLP 3*3584*14336
    + four norms 4*3584 = 198,195,200; x 42 = 8,324,198,400; + the final norm 3584.
    The report's embedding count, 917,962,752, is 256,128 rows x 3584 (its vocabulary); the
    Hugging Face checkpoint has 256,000 rows (vocab_size), so the whole model here is
    256,000 * 3584 + 8,324,201,984 = 9,241,705,984, not the report's 9,242,164,736."""
    model, _, _ = imported("gemma-2-9b-it")
    counted = params.count(model)
    assert number(counted.non_embedding, model_values(model)) == 8_324_201_984
    assert total(model) == 256_000 * 3584 + 8_324_201_984 == 9_241_705_984


def test_gpt2_against_its_card():
    """openai-community/gpt2's card: 124M parameters (the GPT-2 paper's table 2 says 117M for
    the same shape; the released checkpoint is the 124M one). By hand: tables 50257*768 +
    1024*768; per layer LayerNorms 2*2*768, QKV 768*2304 + 2304, out 768*768 + 768, MLP
    768*3072 + 3072 + 3072*768 + 768 = 7,087,872; final LayerNorm 2*768: 124,439,808."""
    model, _, _ = imported("gpt2")
    assert total(model) == 50257 * 768 + 1024 * 768 + 12 * 7_087_872 + 2 * 768 == 124_439_808
    assert round(total(model) / 1e6) == 124


def test_qwen3_has_per_head_qk_norm():
    model, _, _ = imported("qwen3-8b")
    assert model.qk_norm
    program = lower(model, "prefill")
    ops = {op.name: op for op in program.ops}
    names = [op.name for op in program.ops]
    assert names.index("k_norm") < names.index("rope") < names.index("qk_matmul")
    # RMSNorm: 4 FLOPs an element over M*n_q rows of d_head; reads and writes them, reads the gain
    assert ops["q_norm"].cost.flops == 4 * M * n_q * d_head
    assert sp_equal(ops["k_norm"].cost.bytes, (2 * M * n_kv * d_head + d_head) * b)
    # and 2*d_head gains per layer: 8,190,735,360 minus what they add is 36 * 256 fewer
    without = spec.Model(**{**model.__dict__, "qk_norm": False})
    assert total(model) - total(without) == 36 * 2 * 128


def test_gemma2_layer():
    model, notes, text = imported("gemma-2-9b-it")
    names = [op.name for op in lower(model, "decode").ops]
    assert names[names.index("o_proj"):names.index("mlp_norm") + 1] == \
        ["o_proj", "attn_post_norm", "attn_residual", "mlp_norm"]
    assert "gelu" in names and "silu" not in names                 # tanh-GELU gate
    assert names[-1] == "logit_softcap"
    # the final soft-cap: 3 FLOPs per logit, the logits read and written
    ops = {op.name: op for op in lower(model, "decode").ops}
    assert ops["logit_softcap"].cost.flops == 3 * B * V
    assert sp_equal(ops["logit_softcap"].cost.bytes, 2 * B * V * b)
    # the attention soft-cap is FlashAttention's to do on chip: named, with its share
    capped = [n for n in notes if n.path == "attn_logit_softcapping"]
    assert len(capped) == 1 and "3 FLOPs a score beside attention's 4*d_head = 1024" in capped[0].message
    # sliding_window 4096 on every other layer from the first (transformers' Gemma2): modelled
    assert (model.window, model.pattern) == (4096, ("sliding", "full"))
    assert not [n for n in notes if n.path == "sliding_window"]


def test_rope_is_costed_without_a_declared_operator():
    """3 FLOPs per element of q and k; q and k read and written, one cos and one sin row."""
    model, _, text = imported("mistral-7b-v0.1")
    assert "operators" not in text
    rope = next(op for op in lower(model, "decode").ops if op.name == "rope")
    assert rope.cost.flops == 3 * M * (n_q + n_kv) * d_head
    assert sp_equal(rope.cost.bytes, (2 * (n_q + n_kv) + 2) * M * d_head * b)


def sp_equal(a, c) -> bool:
    return (a - c).expand() == 0


@pytest.mark.parametrize("folder", sorted(p.name for p in CONFIGS.iterdir() if p.is_dir()))
def test_every_field_is_mapped_or_noted(folder, tmp_path):
    """Each config field is read by the mapping or named in a located note; a field the
    importer does not know is noted as unknown, at its line."""
    data = json.loads((CONFIGS / folder / "config.json").read_text())
    data["frobnicate_layers"] = 3
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(data, indent=2))
    _, notes = hfimport.convert(str(cfg))
    unknown = [n for n in notes if n.path == "frobnicate_layers"]
    assert len(unknown) == 1 and "unknown to the" in unknown[0].message
    line = next(i for i, text in enumerate(cfg.read_text().splitlines(), 1) if "frobnicate" in text)
    assert (unknown[0].file, unknown[0].line, unknown[0].col) == (str(cfg), line, 3)
    assert all(n.message.startswith("not modelled; ") for n in notes)


def test_sliding_window_modelled_where_it_is_on():
    for folder, window in (("mistral-7b-v0.1", 4096), ("phi-3-mini-4k-instruct", 2047)):
        model, notes, _ = imported(folder)
        assert (model.window, model.pattern) == (window, ("sliding",))   # every layer
        assert not [n for n in notes if n.path == "sliding_window"]
    model, notes, _ = imported("qwen2.5-7b-instruct")     # use_sliding_window: false
    assert not [n for n in notes if n.path.startswith("sliding_window")] and not model.pattern


def test_hf_id_is_written_and_valid():
    model, _, text = imported("llama-3.1-8b", "meta-llama/Llama-3.1-8B")
    assert "\nhf_id: meta-llama/Llama-3.1-8B\n" in text and model.name == "Llama-3.1-8B"


def test_unknown_architecture_is_located(call, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{\n  "architectures": [\n    "MambaForCausalLM"\n  ],\n  "hidden_size": 8\n}\n')
    with pytest.raises(SpecError) as exc:
        hfimport.convert(str(cfg))
    assert str(exc.value).startswith(f"{cfg}:3:5: architectures[0]: architecture "
                                     '"MambaForCausalLM" is not covered; covered: LlamaForCausalLM')
    code, out, err = call("import", cfg)
    assert code == 1 and out == "" and "Traceback" not in err


def test_missing_field_is_located(call, tmp_path):
    data = json.loads((CONFIGS / "llama-3.1-8b" / "config.json").read_text())
    data["hidden_size"] = "4096"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(data, indent=2))
    code, _, err = call("import", cfg)
    # line 10 (after "{" and the three lines of architectures and five fields), column 18
    assert code == 1 and err == (f'{cfg}:10:18: hidden_size: expected a positive whole number of at most '
                                 f'{MAX_DIMENSION:,} (2^24, a model dimension\'s limit), got "4096"\n')
    del data["hidden_size"]
    cfg.write_text(json.dumps(data, indent=2))
    code, _, err = call("import", cfg)
    assert code == 1 and err == f"{cfg}:1:1: (top level): missing 'hidden_size', which the mapping needs\n"


@pytest.mark.slow
def test_import_command_writes_a_spec_a_study_can_use(call, tmp_path):
    """From a folder holding config.json to a model spec beside a study that names the
    catalog's h100-sxm, and a build."""
    shutil.copytree(CONFIGS / "llama-3.1-8b", tmp_path / "llama")
    (tmp_path / "models").mkdir()
    out = tmp_path / "models" / "llama.yaml"
    code, stdout, err = call("import", tmp_path / "llama", "--hf-id", "meta-llama/Llama-3.1-8B",
                             "--out", out, "-v")
    assert code == 0 and stdout == f"wrote {out}: Llama-3.1-8B, 8,030,261,248 parameters\n"
    assert f"{tmp_path / 'llama' / 'config.json'}:21:3: rope_scaling: not modelled; costs nothing" in err
    (tmp_path / "study.yaml").write_text(
        "model: llama\ndevices: [h100-sxm]\nanalyses:\n  params: {}\n"
        "  serving: {batch: [1], contexts: [4096]}\n")
    code, _, err = call("build", "-q", tmp_path / "study.yaml", "--out", tmp_path / "r",
                        "--format", "json")
    assert code == 0 and err == ""
    rep = json.loads((tmp_path / "r" / "study.json").read_text())
    assert rep["model"]["name"] == "Llama-3.1-8B" and rep["devices"][0]["key"] == "h100-sxm"
    counted = next(s for s in rep["sections"] if s["kind"] == "params")
    assert json.dumps(counted).count("8030261248") >= 1


def test_import_says_in_one_line_what_it_did_not_model(call):
    """Without -v one line: the count, what leaves work uncounted named first; -v lists each
    note located (the same notes the spec's head comments keep)."""
    code, out, err = call("import", CONFIGS / "gemma-2-9b-it")
    assert code == 0 and len(err.splitlines()) == 1, err
    cfg = CONFIGS / "gemma-2-9b-it" / "config.json"
    assert err.startswith(f"{cfg}: 14 things not modelled: 2 leave work uncounted "
                          "(Gemma's embedding scale, attn_logit_softcapping); 12 cost nothing ("), err
    assert err.rstrip().endswith("and 4 more); -v lists each with what it leaves out")
    code, verbose_out, verbose = call("import", "-v", CONFIGS / "gemma-2-9b-it")
    assert code == 0 and verbose_out == out
    listed = verbose.splitlines()
    assert len(listed) == 14 and all(line.startswith(f"{cfg}:") for line in listed)
    assert sum("costs nothing" in line for line in listed) == 12
    assert sum(line.startswith("# ") and "not modelled" in line for line in out.splitlines()) == 14


def test_quiet_import_prints_only_the_spec(call):
    code, out, err = call("import", "-q", CONFIGS / "gpt2")
    assert code == 0 and err == "" and out.startswith("# A model spec imported")


@pytest.mark.parametrize("folder", sorted(PUBLISHED))
def test_import_command_states_the_count(call, folder):
    code, out, err = call("import", "-q", CONFIGS / folder)
    assert code == 0 and err == ""
    assert out.splitlines()[1] == f"# {PUBLISHED[folder]:,} parameters, as rooflinec counts this spec"


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=False),
                   st.text(max_size=8), st.lists(st.integers(), max_size=2))


def test_every_bad_field_is_reported_at_once_located(call, tmp_path):
    """Two bad values (the user trial's): both printed, each at its key's value, as a spec's
    problems are; a check on a stand-in (hidden_size // heads) is not reported beside them."""
    data = json.loads((CONFIGS / "llama-3.1-8b" / "config.json").read_text())
    data.update(hidden_size="4096", num_attention_heads=-3)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(data, indent=2))
    lines = cfg.read_text().splitlines()
    at = {key: (i + 1, line.index(": ") + 3) for i, line in enumerate(lines)
          for key in ("hidden_size", "num_attention_heads") if line.strip().startswith(f'"{key}"')}
    limit = f"expected a positive whole number of at most {MAX_DIMENSION:,} (2^24, a model dimension's limit)"
    want = (f'{cfg}:{at["hidden_size"][0]}:{at["hidden_size"][1]}: hidden_size: {limit}, got "4096"\n'
            f'{cfg}:{at["num_attention_heads"][0]}:{at["num_attention_heads"][1]}: num_attention_heads: {limit}, got -3\n')
    for argv in (("import", cfg), ("serve", tmp_path, "--device", "h100-sxm")):
        code, out, err = call(*argv)
        assert code == 1 and out == "" and err == want, err


def _import_with_fields_drawn(call, folder, data, tmp_path_factory, fields: int):
    """`import` of a fixture whose `fields` distinct fields hold drawn values: (exit code,
    stdout), having checked it either imported or refused with problems located in the file."""
    config = json.loads((CONFIGS / folder / "config.json").read_text())
    for key in data.draw(st.lists(st.sampled_from(sorted(config)), min_size=fields, max_size=fields, unique=True)):
        config[key] = data.draw(VALUES)
    cfg = tmp_path_factory.mktemp("cfg") / "config.json"
    cfg.write_text(json.dumps(config, indent=2))
    code, out, err = call("import", "-q", cfg)
    assert code in (0, 1) and "Traceback" not in err
    if code == 1:
        assert err and all(line.startswith(str(cfg)) for line in err.splitlines()), err
    return code, out


@pytest.mark.slow
@settings(max_examples=40)
@given(folder=st.sampled_from(sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())), data=st.data())
def test_any_two_field_values_are_imported_or_refused_with_located_errors(call, folder, data, tmp_path_factory):
    """Two fields changed at once: a spec, or located problems (each field's own), never
    another exception: the stand-ins a bad field leaves the mapping are values it accepts."""
    _import_with_fields_drawn(call, folder, data, tmp_path_factory, 2)


@pytest.mark.slow
@settings(max_examples=60)
@given(folder=st.sampled_from(sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())),
       data=st.data())
def test_any_field_value_is_imported_or_refused_with_a_located_error(call, folder, data, tmp_path_factory):
    """Whatever one field holds, import gives a spec a study loads, or located problems: never
    another exception."""
    code, out = _import_with_fields_drawn(call, folder, data, tmp_path_factory, 1)
    if code == 0:
        assert out.startswith("# A model spec imported")


# --- the 2025 architectures (issue 28, item 6): counts against the model cards, by hand ---------

def active(model) -> int:
    return int(number(params.count(model).active, model_values(model)))


def test_qwen3_next_against_its_card():
    """Qwen/Qwen3-Next-80B-A3B-Instruct's card: 80B total, 3B active (its safetensors hold 81.3B
    with the multi-token-prediction layer, which transformers does not load). By hand: tables
    2 * 151936*2048 = 622,329,856; 12 gated full-attention layers of q 2048*(2*16*256) (queries
    and the output gate) + k, v 2048*512 each + o 4096*2048 + q/k norms 2*256 = 27,263,488;
    36 Gated DeltaNet layers of in_proj_qkvz 2048*12288 + in_proj_ba 2048*64 + conv 8192*4 +
    dt_bias, A_log 2*32 + gated norm 128 + out_proj 4096*2048 = 33,718,464; 48 MoE layers of
    router 2048*512 + 512 experts of 3*2048*512 + a shared expert of 3*2048*512 + its gate 2048
    = 1,614,809,088; two norms a layer and the final norm: 48*4096 + 2048."""
    model, _, _ = imported("qwen3-next-80b-a3b-instruct", "Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert total(model) == (622_329_856 + 12 * 27_263_488 + 36 * 33_718_464 + 48 * 1_614_809_088
                            + 48 * 4096 + 2048) == 79_674_391_296
    # active: 10 routed experts and the shared one, 48 * (1,048,576 + 11 * 3,145,728 + 2048) =
    # 1,711,374,336, beside everything that is not an expert: 3,874,929,408 with both tables
    assert active(model) == 79_674_391_296 - 48 * (512 - 10) * 3_145_728 == 3_874_929_408
    assert round(total(model) / 1e9) == 80 and int(active(model) / 1e9) == 3


def test_kimi_k2_is_deepseek_v3s_class():
    """moonshotai/Kimi-K2-Instruct (DeepseekV3ForCausalLM): 1T total, 32B activated on its card;
    1,026,408,209,408 counted here. By hand: tables 2 * 163840*7168 = 2,348,810,240; per layer
    MLA q_a 7168*1536 + q_b 1536*64*192 + kv_a 7168*576 + kv_b 512*64*256 + o 64*128*7168 +
    norms 1536 + 512 = 101,124,096 (+ 2*7168 layer norms); 1 dense layer of 3*7168*18432
    = 396,361,728; 60 MoE layers of router 7168*384 + 385 experts (384 routed, 1 shared) of
    3*7168*2048 = 16,958,226,432; the final norm 7168."""
    model, _, _ = imported("kimi-k2-instruct", "moonshotai/Kimi-K2-Instruct")
    per_layer = 101_124_096 + 2 * 7168
    assert total(model) == (2_348_810_240 + 61 * per_layer + 396_361_728 + 60 * 16_958_226_432
                            + 7168) == 1_026_408_209_408
    assert round(active(model) / 1e9) == 33   # the card's 32B, with both 1.17B tables counted


def test_llama4_scout_against_its_card():
    """meta-llama/Llama-4-Scout-17B-16E's card: 17B active, 109B total (with its 1.9B vision
    encoder, which a text spec leaves out). Text by hand: tables 2 * 202048*5120 =
    2,068,971,520; 48 layers of q, o 5120*5120 each + k, v 5120*1024 each + norms 2*5120 =
    62,924,800 and a MoE of router 5120*16 + 16 experts and a shared one of 3*5120*8192 =
    2,139,176,960; the final norm 5120. Active: 1 routed expert and the shared one."""
    model, _, _ = imported("llama-4-scout-17b-16e")
    assert total(model) == 2_068_971_520 + 48 * (62_924_800 + 2_139_176_960) + 5120 == 107_769_861_120
    assert active(model) == 107_769_861_120 - 48 * 15 * 125_829_120 == 17_172_894_720
    assert round(active(model) / 1e9) == 17


def test_llama4_maverick_interleaves_dense_and_moe_layers(tmp_path):
    """Llama-4-Maverick-17B-128E (card: 17B active, 400B total) is Scout's text shape with 128
    experts on every other layer (interleave_moe_layer_step 2, moe_layers 1, 3, ..., 47) and
    no qk-norm; its 24 dense layers are an MLP of intermediate_size_mlp 16384. By hand: 24 dense
    layers of 62,924,800 + 3*5120*16384 = 314,583,040; 24 MoE layers of 62,924,800 + router
    5120*128 + 129 experts of 125,829,120 = 16,295,536,640; tables and final norm as Scout's."""
    config = json.loads((CONFIGS / "llama-4-scout-17b-16e" / "config.json").read_text())
    config.update(num_local_experts=128, interleave_moe_layer_step=2, moe_layers=list(range(1, 48, 2)),
                  use_qk_norm=False)
    (tmp_path / "config.json").write_text(json.dumps(config))
    text, _ = hfimport.convert(str(tmp_path))
    model = spec.load_model(str(tmp_path / "m.yaml"), text)
    assert (model.moe.every, model.moe.offset, model.d_ff) == (2, 1, 16384)
    assert total(model) == 2_068_971_520 + 24 * (314_583_040 + 16_295_536_640) + 5120 == 400_711_848_960
    assert round(total(model) / 1e9) == 401 and round(active(model) / 1e9) == 17


def test_glm4_moe_against_the_glm45_card():
    """GLM-4.5's README (zai-org/GLM-4.5): 355B total, 32B active, for the shape GLM-4.6/4.7 keep
    (tests/hf_configs/glm-4.7). By hand: tables 2 * 151552*5120 = 1,551,892,480; 92 layers of
    q 5120*12288 + k, v 5120*1024 each + their biases 12288 + 2*1024 + o 12288*5120 + q/k norms
    2*128 + norms 2*5120 = 136,339,712; 3 dense layers of 3*5120*12288 = 188,743,680; 89 MoE
    layers of router 5120*160 + 161 experts (one shared) of 3*5120*1536 = 3,799,285,760; the
    final norm 5120: 352,797,814,784, 0.6% under the card's rounded 355B (the checkpoint adds
    the multi-token-prediction layer, which transformers does not load)."""
    model, notes, _ = imported("glm-4.7")
    assert total(model) == (1_551_892_480 + 92 * 136_339_712 + 3 * 188_743_680 + 89 * 3_799_285_760
                            + 5120) == 352_797_814_784
    assert abs(total(model) / 355e9 - 1) < 0.01 and round(active(model) / 1e9) == 34
    assert any(n.path == "num_nextn_predict_layers" for n in notes)


def test_minimax_m2_against_its_card():
    """MiniMaxAI/MiniMax-M2's card: 230B total, 10B active (M2.5 keeps the shape:
    tests/hf_configs/minimax-m2.5). By hand: tables 2 * 200064*3072 = 1,229,193,216; 62 layers
    of q 3072*6144 + k, v 3072*1024 each + o 6144*3072 + q/k norms over all heads (6144 + 1024)
    + norms 2*3072 = 44,053,504, and router 3072*256 + 256 experts of 3*3072*1536 =
    3,624,665,088; the final norm 3072. Without the three multi-token-prediction modules."""
    model, _, _ = imported("minimax-m2.5")
    assert model.qk_norm == "layer"
    assert total(model) == 1_229_193_216 + 62 * (44_053_504 + 3_624_665_088) + 3072 == 228_689_748_992
    assert round(total(model) / 1e9) == 229 and round((active(model) - 614_596_608) / 1e9) == 10


def test_qwen3_5_moe_against_its_card():
    """Qwen/Qwen3.5-35B-A3B (Qwen3_5MoeForConditionalGeneration; its text_config read, the vision
    encoder noted as left out): 35B in total and 3B activated, as Qwen3.6-35B-A3B's card (the same
    shape) and a card built on Qwen3.5-35B-A3B-Base give it. By hand:
    tables 2 * 248320*2048 = 1,017,118,720; 10 gated full-attention layers of 27,263,488 and 30
    Gated DeltaNet layers of 33,718,464 (both as Qwen3-Next's: the same head shapes); 40 MoE layers,
    every one (no decoder_sparse_step), of router 2048*256 + 256 experts and a shared one of
    3*2048*512 + its gate 2048 = 808,978,432; two norms a layer and the final norm: 40*4096 + 2048.
    A public text-decoder count of this config agrees: 34,660,610,688."""
    model, notes, _ = imported("qwen3.5-35b-a3b", "Qwen/Qwen3.5-35B-A3B")
    assert total(model) == (1_017_118_720 + 10 * 27_263_488 + 30 * 33_718_464 + 40 * 808_978_432
                            + 40 * 4096 + 2048) == 34_660_610_688
    # active: 8 routed experts and the shared one of 257
    assert active(model) == 34_660_610_688 - 40 * 248 * 3_145_728 == 3_454_988_928
    assert round(total(model) / 1e9) == 35 and int(active(model) / 1e9) == 3
    assert model.moe.moe_layers(0, 40) == 40 and model.output_gate and model.rotary_dim == 64
    assert any(n.path == "vision_config" and "vision encoder" in n.message for n in notes)


def test_minimax_m1_against_its_card():
    """MiniMaxAI/MiniMax-M1-80k's card (and arXiv 2506.13585, MiniMax-Text-01's shape): 456B total,
    45.9B activated per token. By hand: tables 2 * 200064*6144 = 2,458,386,432; 70 lightning layers
    of qkv_proj 6144*3*8192 + output_gate 6144*8192 + the norm over all heads 8192 + out_proj
    8192*6144 = 251,666,432; 10 softmax layers of q 6144*8192 + k, v 6144*1024 each + o 8192*6144
    = 113,246,208; 80 MoE layers of router 6144*32 + 32 experts of 3*6144*9216 = 5,436,014,592;
    two norms a layer and the final norm: 80*12288 + 6144."""
    model, notes, _ = imported("minimax-m1-80k", "MiniMaxAI/MiniMax-M1-80k")
    # the DeepNorm scales: alpha 3.556... a multiply left out, beta 1 nothing; postnorm costs nothing
    said = {n.path: n.message for n in notes}
    assert "one multiply per element" in said["layernorm_mlp_alpha"] and "a scale of 1" in said["layernorm_mlp_beta"]
    assert said["postnorm"].startswith("not modelled; costs nothing")
    assert total(model) == (2_458_386_432 + 70 * 251_666_432 + 10 * 113_246_208 + 80 * 5_436_014_592
                            + 80 * 12_288 + 6144) == 456_089_655_296
    # active: 2 of the 32 experts, 30 * 169,869,312 left out on each of 80 layers; the card's
    # 45.9B counts neither embedding table (45,944,920,064 without them)
    assert active(model) == 456_089_655_296 - 80 * 30 * 169_869_312 == 48_403_306_496
    assert round(total(model) / 1e9) == 456 and round((active(model) - 2_458_386_432) / 1e8) == 459


@pytest.mark.parametrize(("stem", "folder", "hf_id"), [
    ("qwen3-next-80b-a3b", "qwen3-next-80b-a3b-instruct", "Qwen/Qwen3-Next-80B-A3B-Instruct"),
    ("kimi-k2", "kimi-k2-instruct", "moonshotai/Kimi-K2-Instruct"),
    ("minimax-m1-80k", "minimax-m1-80k", "MiniMaxAI/MiniMax-M1-80k"),
    ("qwen3.5-35b-a3b", "qwen3.5-35b-a3b", "Qwen/Qwen3.5-35B-A3B")])
def test_catalog_entries_are_the_importers_output(stem, folder, hf_id):
    """The catalog's Qwen3-Next-80B-A3B, Kimi-K2, MiniMax-M1 and Qwen3.5-35B-A3B are `rooflinec import --hf-id` of the configs
    above, whose counts are checked against the cards: regenerating them changes nothing but the
    card's figures the shipped source adds."""
    shipped = yaml.safe_load((Path(spec.__file__).parent / "catalog" / "models" / f"{stem}.yaml").read_text(encoding="utf-8"))
    imported_now = yaml.safe_load(hfimport.convert(str(CONFIGS / folder), hf_id)[0])
    assert shipped["source"].startswith(imported_now.pop("source") + "; model card")
    assert {k: v for k, v in shipped.items() if k != "source"} == imported_now


def test_nope_layers_cost_no_rope_and_the_output_gate_its_elementwise_pass():
    """Issue 28, item 5. Llama 4 Scout at one decode token (M = 1): RoPE is 3 FLOPs an element of
    q and k, 3 * (40 + 8) * 128 = 18,432 a layer, on the 36 RoPE layers only: 663,552 a step
    (48 layers would be 884,736); it reads and writes q and k and reads a cos and a sin row,
    (2 * 48 + 2) * 128 elements of 2 bytes = 25,088 B a layer. Qwen3-Next's output gate: sigmoid
    (costed as SiLU) and a multiply over 16 * 256 = 4,096 elements of each of its 12 full layers;
    the multiply reads two operands and writes one, 3 * 4,096 * 2 B = 24,576 B a layer."""
    scout, _, _ = imported("llama-4-scout-17b-16e")
    rope = next(o for o in lower(scout, "decode").ops if o.name == "rope")
    values = {**model_values(scout), M: 1, b: 2}
    assert (rope.cost.flops * rope.repeat).subs(values) == 36 * 18_432 == 663_552
    assert rope.cost.bytes.subs(values) == 25_088
    nxt, _, _ = imported("qwen3-next-80b-a3b-instruct")
    ops = {o.name: o for o in lower(nxt, "decode").ops}
    values = {**model_values(nxt), M: 1, b: 2}
    assert (ops["attn_gate_mul"].cost.flops * ops["attn_gate_mul"].repeat).subs(values) == 12 * 4096
    assert ops["attn_gate_mul"].cost.bytes.subs(values) == 24_576
    assert ops["attn_gate_sigmoid"].repeat.subs(values) == 12


def test_llama4_release_config_is_read_through_its_text_config(tmp_path):
    """The published Llama-4-Scout config.json is Llama4ForConditionalGeneration: its text_config
    is the Llama4ForCausalLM config (the same count as the text-only one above), vision_config is
    noted as left out, and a bad text field is located at text_config.FIELD."""
    model, notes, _ = imported("llama-4-scout-17b-16e-release", "meta-llama/Llama-4-Scout-17B-16E")
    text_only, _, _ = imported("llama-4-scout-17b-16e")
    assert total(model) == total(text_only) == 107_769_861_120 and model.nope == text_only.nope
    assert any(n.path == "vision_config" and "vision encoder" in n.message for n in notes)
    assert any(n.path == "text_config.use_qk_norm" for n in notes)
    config = json.loads((CONFIGS / "llama-4-scout-17b-16e-release" / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 0
    (tmp_path / "config.json").write_text(json.dumps(config, indent=2))
    with pytest.raises(SpecError) as err:
        hfimport.convert(str(tmp_path))
    line = next(i for i, t in enumerate((tmp_path / "config.json").read_text().splitlines(), 1)
                if '"num_hidden_layers"' in t)
    assert str(err.value).startswith(f"{tmp_path / 'config.json'}:{line}:") and \
        "text_config.num_hidden_layers: expected a positive whole number" in str(err.value)


@pytest.mark.parametrize(("folder", "per_token", "at_32k"), [
    # 12 gated full layers keep K and V of 2 heads of 256 at 2 B: 12 * 2*2*256*2 = 24,576 B a token;
    # 36 Gated DeltaNet layers keep per sequence 32*128*128 state + 3 * 8,192 conv inputs =
    # 548,864 elements, 36 * 1,097,728 B = 39,518,208 B: 24,576 * 32,768 + 39,518,208
    ("qwen3-next-80b-a3b-instruct", 24_576, 844_824_576),
    # 48 layers of 2*8*128*2 = 4,096 B; the 36 chunked layers keep at most the 8,192-token chunk:
    # 36 * 4,096 * 8,192 + 12 * 4,096 * 32,768
    ("llama-4-scout-17b-16e", 196_608, 2_818_572_288),
    ("glm-4.7", 92 * 2 * 8 * 128 * 2, 92 * 4096 * 32_768),            # 376,832 B a token
    ("minimax-m2.5", 62 * 2 * 8 * 128 * 2, 62 * 4096 * 32_768),       # 253,952 B a token
    # 10 softmax layers of 2*8*128*2 = 4,096 B; 70 lightning layers keep per sequence 64 heads'
    # 128 x 128 states, 1,048,576 elements, 70 * 2,097,152 B = 146,800,640 B
    ("minimax-m1-80k", 40_960, 40_960 * 32_768 + 146_800_640),
    # 10 gated full layers of 2*2*256*2 = 2,048 B; 30 Gated DeltaNet layers of 1,097,728 B a sequence
    ("qwen3.5-35b-a3b", 20_480, 20_480 * 32_768 + 30 * 1_097_728),
    ("kimi-k2-instruct", 61 * (512 + 64) * 2, 61 * 1152 * 32_768),    # MLA's latent and rope key
    # 4 attention layers of 2*8*128*2 = 4,096 B; 24 Mamba-2 layers keep per sequence 128*64*128 state
    # + 3 * (8192 + 2*8*128) conv inputs = 1,079,296 elements, 24 * 2,158,592 B = 51,806,208 B
    ("nemotron-h-8b-base-8k", 16_384, 16_384 * 32_768 + 51_806_208),
    # the latent and rope key (576 * 2 B) and the indexer's fp8 key and fp32 scale (128 + 4 B)
    ("deepseek-v3.2-exp", 61 * 1284, 61 * 1284 * 32_768),
])
def test_cache_bytes_by_hand(folder, per_token, at_32k):
    """Issue 28, item 6: KV and state bytes per token and per sequence (S = 32,768, bf16)."""
    model, _, _ = imported(folder)
    assert kvcache.per_token(model, 2) == per_token
    assert kvcache.per_sequence(model, 2, 32_768) == at_32k


def test_nemotron_h_against_its_card():
    """nvidia/Nemotron-H-8B-Base-8K's card: 8B. By hand (transformers' NemotronHBlock: a norm and
    one mixer a block): tables 2 * 131072*4096 = 1,073,741,824; 24 Mamba-2 blocks of in_proj
    4096*(2*8192 + 2*8*128 + 128) = 76,021,760 + conv (8192 + 2*8*128)*(4 + 1) = 51,200 + dt_bias,
    A_log, D 3*128 + gated norm 8192 + out_proj 8192*4096 = 33,554,432 + the block's norm 4096 =
    109,640,064; 4 attention blocks of q, o 4096*4096 each + k, v 4096*1024 each + norm 4096 =
    41,947,136; 24 MLP blocks of up, down 4096*21504 each + norm 4096 = 176,164,864; the final norm
    4096: 8,100,852,736. rooflinec's layer is two sublayers, so the 4 Mamba-2 blocks with no MLP
    after them count a second norm each, noted: 4 * 4096 more, as the hand-written catalog entry."""
    model, notes, _ = imported("nemotron-h-8b-base-8k", "nvidia/Nemotron-H-8B-Base-8K")
    by_blocks = 1_073_741_824 + 24 * 109_640_064 + 4 * 41_947_136 + 24 * 176_164_864 + 4096
    assert by_blocks == 8_100_852_736 and total(model) == by_blocks + 4 * 4096 == active(model)
    assert any(n.path == "hybrid_override_pattern" and "16,384 parameters" in n.message for n in notes)
    path = Path(spec.__file__).parent / "catalog" / "models" / "nemotron-h-8b.yaml"
    catalog = spec.load_model(str(path), path.read_text(encoding="utf-8"))
    layers = lambda m: [m.pattern[i % len(m.pattern)] for i in range(m.n_layers)]   # noqa: E731
    assert (layers(model), model.n_layers, model.positions) == (layers(catalog), 28, "none")
    assert len(model.pattern) == 25   # its shortest period: layers 25..27 repeat layers 0..2
    assert total(catalog) == total(model)


def test_deepseek_v32_exp_is_v3_with_an_indexer():
    """deepseek-ai/DeepSeek-V3.2-Exp (DeepseekV32ForCausalLM): DeepSeek-V3's shape (671B without
    the multi-token-prediction module; 671,026,404,352 counted for tests/hf_configs/deepseek-v3)
    plus, on each of 61 layers, the lightning indexer: wq_b 1536*64*128 = 12,582,912, wk 7168*128
    = 917,504, its LayerNorm 2*128, weights_proj 7168*64 = 458,752: 13,959,424 a layer,
    851,524,864 in all: 671,877,929,216 without the multi-token-prediction module, the
    hand-written catalog entry's count (its MTP layer has an indexer too: 11,610,067,968 +
    13,959,424, test_deepseek_v3_mtp_module_is_counted_not_active)."""
    model, _, text = imported("deepseek-v3.2-exp", "deepseek-ai/DeepSeek-V3.2-Exp")
    v3, _, _ = imported("deepseek-v3")
    assert total(v3) - mtp(v3) == 671_026_404_352
    assert total(model) - mtp(model) == 671_026_404_352 + 61 * 13_959_424 == 671_877_929_216
    assert mtp(model) == 11_610_067_968 + 13_959_424
    path = Path(spec.__file__).parent / "catalog" / "models" / "deepseek-v3.2-exp.yaml"
    catalog = yaml.safe_load(path.read_text(encoding="utf-8"))
    imported_spec = yaml.safe_load(text)
    for key in ("d_model", "n_layers", "vocab", "mla", "sparse_attention", "moe"):
        assert imported_spec[key] == catalog[key], key


def test_jamba_against_its_model_card():
    """ai21labs/AI21-Jamba-1.5-Mini's card: 52B total, 12B active (Jamba-v0.1's the same shape).
    JambaConfig.layers_block_type puts attention at i % 8 == 4 (4 layers), Mamba-1 elsewhere (28);
    layers_num_experts 16 experts at i % 2 == 1 (16 layers), a dense MLP elsewhere. By hand:
    tables 2 x 65,536 x 4,096 = 536,870,912; 28 Mamba-1 mixers (JambaMambaMixer) x 105,308,448
    (in_proj 4096 x 16384, conv1d 8192 x 5, x_proj 8192 x 288, dt_proj 256 x 8192 + 8192, A_log
    8192 x 16, D 8192, the dt/B/C norms 288, out_proj 8192 x 4096) = 2,948,636,544; 4 attention
    x (2 x 4096^2 + 2 x 4096 x 1024) = 167,772,160; 16 MLPs x 3 x 4096 x 14336 = 2,818,572,288;
    16 MoE layers x (16 x 176,160,768 + a 4096 x 16 router) = 45,098,205,184; 65 norms x 4,096 =
    266,240: 51,570,323,328 (the card's 52B). Active: 2 of 16 experts, 16 x (2 x 176,160,768 +
    65,536) = 5,638,193,152 in place of 45,098,205,184: 12,110,311,296 (the card's 12B)."""
    model, notes, text = imported("jamba-1.5-mini", "ai21labs/AI21-Jamba-1.5-Mini")
    values = model_values(model)
    count = params.count(model)
    assert total(model) == 536_870_912 + 2_948_636_544 + 167_772_160 + 2_818_572_288 + 45_098_205_184 + 266_240 \
        == 51_570_323_328
    assert number(count.active, values) == 51_570_323_328 - 45_098_205_184 + 5_638_193_152 == 12_110_311_296
    assert (round(total(model) / 1e9), round(number(count.active, values) / 1e9)) == (52, 12)
    assert model.pattern == ("mamba1",) * 4 + ("full",) + ("mamba1",) * 3 and model.positions == "none"
    # state per sequence: 28 x (8192 x 16 + 8192 x 3) x 2 B = 8,716,288; 4 x 4,096 B per token
    assert kvcache.per_sequence(model, 2, 1) == 16_384 + 8_716_288
    assert not [n for n in notes if not n.message.startswith("not modelled; costs nothing")]
    path = Path(spec.__file__).parent / "catalog" / "models" / "jamba-1.5-mini.yaml"
    catalog = yaml.safe_load(path.read_text(encoding="utf-8"))
    imported_spec = yaml.safe_load(text)
    for key in ("d_model", "n_layers", "vocab", "attention", "mamba1", "moe", "mlp"):
        assert imported_spec[key] == catalog[key], key


def test_jamba_dt_rank_auto_and_mamba_defaults(tmp_path):
    """JambaConfig: mamba_dt_rank "auto" is ceil(hidden_size / 16); absent Mamba fields take its
    defaults (d_state 16, d_conv 4, expand 2, conv bias on, projection biases off)."""
    data = json.loads((CONFIGS / "jamba-1.5-mini" / "config.json").read_text())
    data.update(hidden_size=4000, mamba_dt_rank="auto")
    for key in ("mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_conv_bias", "mamba_proj_bias"):
        del data[key]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(data, indent=2))
    text, _ = hfimport.convert(str(cfg))
    assert yaml.safe_load(text)["mamba1"] == {"expand": 2, "state_size": 16, "dt_rank": 250, "conv_kernel": 4,
                                              "conv_bias": True, "proj_bias": False, "dt_bc_norms": True}


def test_jamba_mamba_layers_need_silu(tmp_path):
    data = json.loads((CONFIGS / "jamba-1.5-mini" / "config.json").read_text())
    data["hidden_act"] = "gelu"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(data, indent=2))
    with pytest.raises(SpecError) as err:
        hfimport.convert(str(cfg))
    line = next(i for i, t in enumerate(cfg.read_text().splitlines(), 1) if '"hidden_act"' in t)
    assert str(err.value).startswith(f"{cfg}:{line}:17: hidden_act: the Mamba-1 kind gates by silu(z)")


def mtp(model) -> int:
    return sum(int(number(c.count, model_values(model))) for c in params.count(model).components if c.group == "mtp")


def test_deepseek_v3_mtp_module_is_counted_not_active():
    """deepseek-ai/DeepSeek-V3's README: 685B total, 671B of the main model and 14B of the
    multi-token-prediction module; 37B activated. num_nextn_predict_layers 1 becomes mtp_layers 1:
    one decoder layer like layer 60 (MLA 187,107,328; router 7168*256 + 257 experts of 3*7168*2048
    = 11,320,164,352; two norms 2*7168), the projection of [h; emb] 2*7168*7168 = 102,760,448 and
    three norms 3*7168: 11,610,067,968. With the stored copies of the shared embedding and head
    (2 * 129,280*7168 = 1,853,358,080, the checkpoint's layer 61 keeps its own) the module is
    13.46B, the whole 684,489,830,400, within 0.1% of 685B (the checkpoint's fp32 block scales are
    the rest). Not active: a token's forward pass runs it only when speculation drafts with it,
    and a device holds it only then."""
    model, notes, text = imported("deepseek-v3")
    assert "\nmtp_layers: 1\n" in text and not any(n.path == "num_nextn_predict_layers" for n in notes)
    layer = 187_107_328 + 7168 * 256 + 257 * 3 * 7168 * 2048 + 2 * 7168
    assert mtp(model) == layer + 2 * 7168 * 7168 + 3 * 7168 == 11_610_067_968
    assert total(model) == 671_026_404_352 + 11_610_067_968 == 682_636_472_320
    assert abs((total(model) + 2 * 129_280 * 7168) / 685e9 - 1) < 0.001
    assert active(model) == 37_552_282_624   # as without the module
    without = spec.Model(**{**model.__dict__, "mtp_layers": 0})
    held = deployment.params_per_device
    assert held(model, 8) == held(without, 8) and total(without) == 671_026_404_352
