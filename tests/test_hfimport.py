"""`rooflinec import`: real public config.json files (tests/hf_configs/, sources in its README)
become model specs whose parameter counts match the published figures."""

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.spec import hfimport, load as spec
from rooflinec.model import params
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
    assert code == 1 and err == f'{cfg}:10:18: hidden_size: expected a positive whole number, got "4096"\n'
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


@pytest.mark.slow
@settings(max_examples=60)
@given(folder=st.sampled_from(sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())),
       data=st.data())
def test_any_field_value_is_imported_or_refused_with_a_located_error(call, folder, data, tmp_path_factory):
    """Whatever one field holds, import gives a spec a study loads, or located problems: never
    another exception."""
    config = json.loads((CONFIGS / folder / "config.json").read_text())
    key = data.draw(st.sampled_from(sorted(config)))
    config[key] = data.draw(VALUES)
    cfg = tmp_path_factory.mktemp("cfg") / "config.json"
    cfg.write_text(json.dumps(config, indent=2))
    code, out, err = call("import", "-q", cfg)
    assert code in (0, 1) and "Traceback" not in err
    if code == 1:
        assert err and all(line.startswith(str(cfg)) for line in err.splitlines()), err
    else:
        assert out.startswith("# A model spec imported")
