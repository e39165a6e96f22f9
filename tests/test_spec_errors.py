"""Bad and hostile specs: every problem located as file:line:col: json.path: message.

Each test writes a spec to tmp_path, loads it, and checks the exact location and a
fragment of the message. `problems()` uses pytest.raises(SpecError), so any other
exception fails the test: nothing but SpecError may escape a loader.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rooflinec.spec import catalog
from rooflinec.base import yamlio
from rooflinec.base.errors import SpecError
from rooflinec.spec.load import load_hardware, load_model, load_study


# The Qwen2.5-7B spec (rooflinec/spec/catalog/models/qwen2.5-7b.yaml) without comments; tests edit one line
# of it, so every line and column below is counted in this text.
MODEL = """\
name: Qwen2.5-7B-Instruct
d_model: 3584
n_layers: 28
vocab: 152064
max_context: 32768
attention: {n_heads: 28, n_kv_heads: 4, head_dim: 128, qkv_bias: true}
mlp: {kind: swiglu, d_ff: 18944}
norm: {kind: rmsnorm}
positions: rope
tied_embeddings: false
source: Qwen2.5-7B-Instruct config.json
"""

# The A100 40GB spec (rooflinec/spec/catalog/hardware/a100-40gb.yaml) without comments.
HARDWARE = """\
name: NVIDIA A100 40GB SXM4
year: 2020
compute:
  tensor: {bf16: 312 TFLOP/s, fp16: 312 TFLOP/s}
  vector: {fp32: 19.5 TFLOP/s}
memory: {bandwidth: 1555 GB/s, capacity: 40 GiB}
on_chip: {sm_count: 108, sram_per_sm: 192 KiB}
source: NVIDIA Ampere architecture blog, table 3
"""

STUDY = """\
title: Qwen on two GPUs
model: qwen2.5-7b
devices: [a100-40gb, h100-sxm]
dtype: bf16
analyses:
  gemm_intensity: {tokens: [1, 256]}
"""


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def problems(loader, file: str) -> list:
    with pytest.raises(SpecError) as info:   # anything else escapes and fails the test
        loader(file)
    assert info.value.problems, "a SpecError carries at least one problem"
    return info.value.problems


def only(loader, file: str):
    found = problems(loader, file)
    assert len(found) == 1, "\n".join(map(str, found))
    return found[0]


def located(problem, file: str, line: int, col: int, path: str, fragment: str) -> None:
    assert str(problem).startswith(f"{file}:{line}:{col}: {path}: "), str(problem)
    assert fragment in problem.message, str(problem)


@pytest.fixture
def tree(catalog_tree: Path) -> Path:
    """A spec tree in tmp_path: the shipped models and hardware, and a study beside them."""
    write(catalog_tree, "study.yaml", STUDY)
    return catalog_tree


# --- the bases load ------------------------------------------------------------------


def test_bases_load(tmp_path, tree):
    assert load_model(write(tmp_path, "m.yaml", MODEL)).n_kv_heads == 4
    assert load_hardware(write(tmp_path, "h.yaml", HARDWARE)).bandwidth == 1555 * 10**9
    study = load_study(str(tree / "study.yaml"))
    assert [d.key for d in study.devices] == ["a100-40gb", "h100-sxm"]


# --- YAML syntax ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "col", "fragment"),
    [
        ("name: [unclosed\nd_model: 3\n", 2, 8, "expected ',' or ']'"),
        ("name: x\n  d_model: 3\n", 2, 10, "mapping values are not allowed here"),
        ("name: x\n\td_model: 3\n", 2, 1, "indent with spaces, not tabs"),
        ("name: 'open quote\n", 2, 1, "while scanning a quoted scalar at line 1"),
        ("name: a\n---\nname: b\n", 2, 1, "expected a single document"),
    ],
)
def test_yaml_syntax_errors(tmp_path, text, line, col, fragment):
    f = write(tmp_path, "m.yaml", text)
    problem = only(load_model, f)
    located(problem, f, line, col, "(file)", fragment)
    assert problem.message.startswith("YAML error: ")


# --- schema: types, required, unknown keys, enums -------------------------------------


def test_wrong_type(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "d_model: 3584", "d_model: big"))
    located(only(load_model, f), f, 2, 10, "d_model", 'expected an integer, got string "big"')


def test_mapping_where_a_number_belongs(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "vocab: 152064", "vocab: {size: 152064}"))
    located(only(load_model, f), f, 4, 8, "vocab", "expected an integer, got a mapping")


def test_float_is_not_an_integer(tmp_path):
    # JSON Schema would take 3584.0 as an integer; a count must be written as one
    f = write(tmp_path, "m.yaml", edit(MODEL, "d_model: 3584", "d_model: 3584.0"))
    located(only(load_model, f), f, 2, 10, "d_model", "expected an integer, got number 3584.0")


def test_boolean_is_not_an_integer(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "n_layers: 28", "n_layers: true"))
    located(only(load_model, f), f, 3, 11, "n_layers", "expected an integer, got boolean true")


def test_missing_required_key(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "source: Qwen2.5-7B-Instruct config.json\n", ""))
    located(only(load_model, f), f, 1, 1, "(top level)", "missing required key 'source'")


def test_unknown_key_did_you_mean(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "n_layers: 28", "n_layer: 28"))
    unknown, missing = sorted(problems(load_model, f), key=lambda p: p.line, reverse=True)
    located(unknown, f, 3, 1, "n_layer", "unknown key 'n_layer'; did you mean 'n_layers'?")
    assert "accepted keys: attention, block, d_model" in unknown.message
    located(missing, f, 1, 1, "(top level)", "missing required key 'n_layers' (Decoder layers")


def test_unknown_nested_key(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "head_dim: 128", "head_dims: 128"))
    found = problems(load_model, f)
    located(found[0], f, 6, 12, "attention", "missing required key 'head_dim'")
    located(found[1], f, 6, 41, "attention.head_dims", "did you mean 'head_dim'?")


def test_enum_did_you_mean(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "kind: swiglu", "kind: swiglue"))
    located(only(load_model, f), f, 7, 13, "mlp.kind",
            '"swiglue" is not accepted; did you mean \'swiglu\'? accepted: swiglu, geglu, gelu')


def test_unknown_dtype_key_in_peaks(tmp_path):
    f = write(tmp_path, "h.yaml", edit(HARDWARE, "bf16: 312", "bf61: 312"))
    located(only(load_hardware, f), f, 4, 12, "compute.tensor.bf61",
            "unknown key 'bf61'; did you mean 'bf16'? accepted: fp64, fp32")


def test_empty_string_name(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "name: Qwen2.5-7B-Instruct", "name: ''"))
    located(only(load_model, f), f, 1, 7, "name", "must not be empty")


def test_long_values_are_quoted_short(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "d_model: 3584", "d_model: " + "x" * 5000))
    problem = only(load_model, f)
    located(problem, f, 2, 10, "d_model", "expected an integer")
    assert len(problem.message) < 200


# --- quantities: zero, negative, NaN, infinite, wrong unit ---------------------------


@pytest.mark.parametrize(
    ("field", "old", "new", "line", "col", "fragment"),
    [
        ("n_layers", "n_layers: 28", "n_layers: 0", 3, 11, "must be >= 1, got integer 0"),
        ("vocab", "vocab: 152064", "vocab: -5", 4, 8, "must be >= 1, got integer -5"),
        ("n_layers", "n_layers: 28", "n_layers: .nan", 3, 11, "expected an integer, got number NaN"),
        ("d_model", "d_model: 3584", "d_model: .inf", 2, 10, "got number Infinity"),
        ("d_model", "d_model: 3584", "d_model: -.inf", 2, 10, "got number -Infinity"),
        ("attention.n_kv_heads", "n_kv_heads: 4", "n_kv_heads: 0", 6, 38, "must be >= 1"),
        ("mlp.d_ff", "d_ff: 18944", "d_ff: -18944", 7, 27, "must be >= 1"),
    ],
)
def test_bad_model_numbers(tmp_path, field, old, new, line, col, fragment):
    f = write(tmp_path, "m.yaml", edit(MODEL, old, new))
    located(only(load_model, f), f, line, col, field, fragment)


@pytest.mark.parametrize(
    ("old", "new", "line", "col", "path", "fragment"),
    [
        ("bandwidth: 1555 GB/s", "bandwidth: 0 GB/s", 6, 21, "memory.bandwidth",
         "'0 GB/s' must be a positive finite number"),
        ("bandwidth: 1555 GB/s", "bandwidth: -1555 GB/s", 6, 21, "memory.bandwidth",
         "must be a positive finite number"),
        ("bandwidth: 1555 GB/s", "bandwidth: .nan", 6, 21, "memory.bandwidth",
         "nan must be a positive finite number"),
        ("bandwidth: 1555 GB/s", "bandwidth: .inf", 6, 21, "memory.bandwidth",
         "inf must be a positive finite number"),
        ("bandwidth: 1555 GB/s", "bandwidth: nan GB/s", 6, 21, "memory.bandwidth",
         "must be a positive finite number"),
        ("bandwidth: 1555 GB/s", "bandwidth: 0", 6, 21, "memory.bandwidth",
         "must be a positive finite number"),
        # 1e99999999 would take Fraction minutes to build; it is refused by its exponent
        ("bandwidth: 1555 GB/s", "bandwidth: 1e99999999 GB/s", 6, 21, "memory.bandwidth",
         "must be a positive finite number"),
        ("capacity: 40 GiB", "capacity: 40 GB/s", 6, 42, "memory.capacity",
         "is a bandwidth, expected a memory size"),
        ("bf16: 312 TFLOP/s", "bf16: 312 TFLOPs", 4, 18, "compute.tensor.bf16",
         "unknown unit 'TFLOPs'"),
        ("sm_count: 108", "sm_count: .inf", 7, 21, "on_chip.sm_count",
         "expected an integer, got number Infinity"),
        ("sram_per_sm: 192 KiB", "sram_per_sm: -.inf", 7, 39, "on_chip.sram_per_sm",
         "must be a positive finite number"),
    ],
)
def test_bad_quantities(tmp_path, old, new, line, col, path, fragment):
    f = write(tmp_path, "h.yaml", edit(HARDWARE, old, new))
    located(only(load_hardware, f), f, line, col, path, fragment)


def test_bad_counts_in_a_study(tree):
    f = write(tree, "study.yaml", edit(STUDY, "tokens: [1, 256]", "tokens: [.nan, 0]"))
    nan, zero = problems(load_study, f)
    located(nan, f, 6, 29, "analyses.gemm_intensity.tokens[0]", "expected an integer, got number NaN")
    located(zero, f, 6, 35, "analyses.gemm_intensity.tokens[1]", "must be >= 1, got integer 0")


def test_number_with_too_many_digits(tmp_path):
    # int() of 5000 digits raises ValueError in Python >= 3.11; the walk refuses it first
    f = write(tmp_path, "m.yaml", edit(MODEL, "d_model: 3584", "d_model: " + "9" * 5000))
    located(only(load_model, f), f, 2, 10, "d_model", "number has 5000 characters; at most 64")


# --- impossible models ----------------------------------------------------------------


def test_kv_heads_must_divide_query_heads(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "n_kv_heads: 4", "n_kv_heads: 3"))
    # 28 % 3 = 1: three KV heads cannot split 28 query heads into whole groups
    located(only(load_model, f), f, 6, 38, "attention.n_kv_heads",
            "3 KV heads do not divide 28 query heads")


def test_more_kv_heads_than_query_heads(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "n_kv_heads: 4", "n_kv_heads: 56"))
    located(only(load_model, f), f, 6, 38, "attention.n_kv_heads", "56 KV heads do not divide 28")


def test_zero_layers(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "n_layers: 28", "n_layers: 0"))
    located(only(load_model, f), f, 3, 11, "n_layers", "must be >= 1")


def test_mlp_without_its_width(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "mlp: {kind: swiglu, d_ff: 18944}", "mlp: {kind: gelu}"))
    located(only(load_model, f), f, 7, 6, "mlp", "missing required key 'd_ff' (Hidden width")


def test_learned_positions_need_max_context(tmp_path):
    text = edit(edit(MODEL, "max_context: 32768\n", ""), "positions: rope", "positions: learned")
    f = write(tmp_path, "m.yaml", text)
    located(only(load_model, f), f, 8, 12, "positions", "learned positions need max_context")


def test_semantic_and_schema_problems_together(tmp_path):
    text = edit(edit(MODEL, "n_kv_heads: 4", "n_kv_heads: 3"), "vocab: 152064", "vocab: 0")
    f = write(tmp_path, "m.yaml", text)
    vocab, kv = problems(load_model, f)
    located(vocab, f, 4, 8, "vocab", "must be >= 1")
    located(kv, f, 6, 38, "attention.n_kv_heads", "do not divide")


def test_five_mistakes_five_problems(tmp_path):
    text = MODEL
    text = edit(text, "d_model: 3584", "d_model: 3584 wide")          # 1 wrong type
    text = edit(text, "n_layers: 28", "n_layer: 28")                   # 2 misspelled key ...
    text = edit(text, "kind: swiglu", "kind: relu")                    # 3 unknown MLP kind
    text = edit(text, "n_kv_heads: 4", "n_kv_heads: 5")                # 4 28 % 5 = 3
    text = edit(text, "source: Qwen2.5-7B-Instruct config.json\n", "")  # 5 no source
    f = write(tmp_path, "m.yaml", text)
    found = problems(load_model, f)
    # the misspelled key is two problems: n_layer unknown and n_layers missing
    assert [str(p) for p in found] == [
        f"{f}:1:1: (top level): missing required key 'n_layers' "
        "(Decoder layers; num_hidden_layers.)",
        f"{f}:1:1: (top level): missing required key 'source' (Where the config comes from.)",
        f"{f}:2:10: d_model: expected an integer, got string \"3584 wide\"",
        f"{f}:3:1: n_layer: unknown key 'n_layer'; did you mean 'n_layers'? accepted keys: "
        "attention, block, d_model, dimensions, hf_id, lightning_attention, linear_attention, mamba, mamba1, max_context, mla, mlp, moe, mtp_layers, n_layers, name, norm, "
        "notes, operators, positions, source, sparse_attention, tied_embeddings, vocab",
        f"{f}:6:38: attention.n_kv_heads: 5 KV heads do not divide 28 query heads; each KV head "
        "must serve a whole group of query heads",
        f"{f}:7:13: mlp.kind: \"relu\" is not accepted; did you mean 'gelu'? accepted: swiglu, geglu, gelu",
    ]


def test_five_mistakes_in_a_study_and_what_it_references(tree):
    write(tree, "models/qwen2.5-7b.yaml", edit(MODEL, "n_layers: 28", "n_layers: 0"))    # 1
    write(tree, "hardware/a100-40gb.yaml", edit(HARDWARE, "40 GiB", "40 GB/s"))         # 2
    text = edit(STUDY, "h100-sxm", "h100-sxn")                                           # 3
    text = edit(text, "dtype: bf16", "dtype: bf16\nconventions: {logits: some}")          # 4
    text = edit(text, "{tokens: [1, 256]}", "{tokens: [1, 256]}\n  decode_view: {}")      # 5
    f = write(tree, "study.yaml", text)
    a100 = str(tree / "hardware" / "a100-40gb.yaml")
    qwen = str(tree / "models" / "qwen2.5-7b.yaml")
    # every problem at once, sorted by file, line, column; each in the file it is in
    assert [str(p) for p in problems(load_study, f)] == [
        f"{a100}:6:42: memory.capacity: '40 GB/s' is a bandwidth, expected a memory size; "
        "use one of B, kB, MB, GB, TB, KiB, MiB, GiB, TiB",
        f"{qwen}:3:11: n_layers: must be >= 1, got integer 0",
        f"{f}:3:22: devices[1]: no spec 'h100-sxn' (looked for {tree / 'hardware' / 'h100-sxn.yaml'} "
        "and in the installed catalog); did you mean 'h100-sxm'? known hardware specs: " + ", ".join(
            sorted({p.stem for p in (tree / "hardware").glob("*.yaml")} | set(catalog.names("hardware")))),
        f"{f}:5:23: conventions.logits: \"some\" is not accepted; accepted: last, all",
        f"{f}:8:16: analyses.decode_view: missing required key 'contexts' (Context lengths S, "
        "e.g. [1024, 4096, 32768].)",
    ]


# --- references -----------------------------------------------------------------------


def test_missing_model_lists_known_ones(tree):
    f = write(tree, "study.yaml", edit(STUDY, "model: qwen2.5-7b", "model: qwen"))
    located(only(load_study, f), f, 2, 8, "model", "no spec 'qwen'")
    assert "known model specs: " + ", ".join(sorted(p.stem for p in (tree / "models").glob("*.yaml"))) in \
        only(load_study, f).message


def test_missing_file_path(tree):
    f = write(tree, "study.yaml", edit(STUDY, "model: qwen2.5-7b", "model: models/none.yaml"))
    located(only(load_study, f), f, 2, 8, "model", "no spec 'models/none.yaml'")


def test_directory_is_not_a_spec(tree):
    (tree / "models" / "dir.yaml").mkdir()
    f = write(tree, "study.yaml", edit(STUDY, "model: qwen2.5-7b", "model: dir"))
    located(only(load_study, f), f, 2, 8, "model", "no spec 'dir'")


@pytest.mark.parametrize("ref", ["../outside.yaml", "models/../../outside.yaml", "../../outside"])
def test_reference_escaping_the_tree(tree, ref):
    write(tree.parent, "outside.yaml", MODEL)
    write(tree.parent, "models/outside.yaml", MODEL)
    f = write(tree, "study.yaml", edit(STUDY, "model: qwen2.5-7b", f"model: {ref}"))
    located(only(load_study, f), f, 2, 8, "model", "points outside the spec tree")


def test_absolute_reference_is_refused_by_the_schema(tree):
    f = write(tree, "study.yaml", edit(STUDY, "model: qwen2.5-7b", "model: /etc/passwd"))
    located(only(load_study, f), f, 2, 8, "model", "is not a spec name or relative .yaml path")


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlink_escaping_the_tree(tree):
    write(tree.parent, "secret.yaml", MODEL)
    os.symlink(tree.parent / "secret.yaml", tree / "models" / "link.yaml")
    f = write(tree, "study.yaml", edit(STUDY, "model: qwen2.5-7b", "model: link"))
    located(only(load_study, f), f, 2, 8, "model", "points outside the spec tree")


@pytest.mark.parametrize("ref", ["study.yaml", "./study.yaml", "models/../study.yaml"])
def test_study_naming_itself(tree, ref):
    # no spec includes another except study -> model/hardware, so the only cycle is this one
    f = write(tree, "study.yaml", edit(STUDY, "model: qwen2.5-7b", f"model: {ref}"))
    located(only(load_study, f), f, 2, 8, "model", "is this study itself")


def test_study_naming_itself_as_a_device(tree):
    f = write(tree, "study.yaml", edit(STUDY, "[a100-40gb, h100-sxm]", "[a100-40gb, study.yaml]"))
    located(only(load_study, f), f, 3, 22, "devices[1]", "is this study itself")


def test_model_named_as_a_device(tree):
    f = write(tree, "study.yaml", edit(STUDY, "h100-sxm", "models/gpt2-medium.yaml"))
    found = problems(load_study, f)
    gpt2 = str(tree / "models" / "gpt2-medium.yaml")
    assert all(p.file == gpt2 for p in found)
    assert any("missing required key 'compute'" in p.message for p in found)


def test_dtype_the_device_lacks(tree):
    f = write(tree, "study.yaml", edit(STUDY, "dtype: bf16", "dtype: nvfp4"))
    a100, h100 = problems(load_study, f)
    located(a100, f, 4, 8, "dtype", "device 'a100-40gb' lists no tensor peak for nvfp4 (it runs on the "
                                    "fp4 peak); it has: bf16")
    located(h100, f, 4, 8, "dtype", "device 'h100-sxm' lists no tensor peak for nvfp4")


# --- files that are not specs ---------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_file(tmp_path, text):
    f = write(tmp_path, "m.yaml", text)
    located(only(load_model, f), f, 1, 1, "(file)", "file is empty")


@pytest.mark.parametrize(
    ("text", "line", "col", "fragment"),
    [
        ("---\n", 2, 1, "got nothing (null)"),
        ("- name: x\n", 1, 1, "got a list"),
        ("just words\n", 1, 1, "got a string"),
        ("42\n", 1, 1, "got a number"),
    ],
)
def test_top_level_not_a_mapping(tmp_path, text, line, col, fragment):
    f = write(tmp_path, "m.yaml", text)
    located(only(load_model, f), f, line, col, "(top level)",
            "expected a mapping of keys for a model spec, " + fragment)


def test_missing_file(tmp_path):
    f = str(tmp_path / "nope.yaml")
    located(only(load_model, f), f, 1, 1, "(file)", "cannot read: No such file or directory")


def test_directory_given_as_a_file(tmp_path):
    located(only(load_model, str(tmp_path)), str(tmp_path), 1, 1, "(file)", "cannot read")


def test_binary_junk(tmp_path):
    f = write(tmp_path, "m.yaml", b"name: x\n\xff\xfe\x00\x01 junk")
    located(only(load_model, f), f, 2, 1, "(file)", "not UTF-8 text (byte 8)")


def test_nul_bytes(tmp_path):
    f = write(tmp_path, "m.yaml", b"name: x\nd_model: 1\x00\n")
    located(only(load_model, f), f, 2, 11, "(file)", "contains NUL bytes")


def test_control_characters(tmp_path):
    f = write(tmp_path, "m.yaml", "name: x\nnotes: \x1b[31mred\n")
    located(only(load_model, f), f, 2, 8, "(file)", "character U+001B is not allowed in YAML")


def test_random_bytes(tmp_path):
    f = write(tmp_path, "m.yaml", bytes(range(256)) * 4)
    assert problems(load_model, f)[0].path == "(file)"


def test_file_over_the_size_limit(tmp_path):
    f = write(tmp_path, "m.yaml", MODEL + "notes: " + "x" * yamlio.MAX_BYTES + "\n")
    located(only(load_model, f), f, 1, 1, "(file)", f"specs are limited to {yamlio.MAX_BYTES} bytes")


# --- hostile YAML ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ("!!python/object/apply:os.system ['echo pwned']", "!!python/object/apply:os.system"),
        ("!!python/object:collections.OrderedDict {}", "!!python/object:collections.OrderedDict"),
        ("!!python/name:os.system", "!!python/name:os.system"),
        ("!!binary aGVsbG8=", "!!binary"),
        ("!!set {a, b}", "!!set"),
        ("!!omap [a: 1]", "!!omap"),
        ("!custom x", "!custom"),
    ],
)
def test_non_plain_tags_refused(tmp_path, value, tag):
    f = write(tmp_path, "m.yaml", edit(MODEL, "name: Qwen2.5-7B-Instruct", f"name: {value}"))
    located(only(load_model, f), f, 1, 7, "name", f"tag '{tag}' is not accepted; specs are plain YAML")


def test_python_tag_is_never_constructed(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a))
    f = write(tmp_path, "m.yaml", "name: !!python/object/apply:os.system ['echo pwned']\n")
    problems(load_model, f)
    assert calls == []


def test_tagged_key_refused(tmp_path):
    f = write(tmp_path, "m.yaml", MODEL + "!!python/name:os.system : x\n")
    located(only(load_model, f), f, 12, 1, "(top level)", "tag '!!python/name:os.system' on a key")


@pytest.mark.slow
def test_billion_laughs_refused(tmp_path):
    # 10 levels of 10 aliases each would expand to 10**10 strings; the walk stops at 100000 nodes
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    f = write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")
    problem = only(load_model, f)
    assert problem.file == f and problem.line >= 1
    assert "expands to more than 100000 nodes" in problem.message


def test_recursive_alias_refused(tmp_path):
    f = write(tmp_path, "m.yaml", "a: &a [x, *a]\n")
    located(only(load_model, f), f, 1, 4, "a[1]", "recursive aliases are not accepted")


def test_deep_nesting_refused(tmp_path):
    f = write(tmp_path, "m.yaml", "a: " + "[" * 100 + "]" * 100 + "\n")
    assert "nested more than 64 levels" in only(load_model, f).message


@pytest.mark.slow
def test_very_deep_nesting_refused(tmp_path):
    # deeper than Python's recursion limit in PyYAML's composer
    f = write(tmp_path, "m.yaml", "a: " + "[" * 1000 + "]" * 1000 + "\n")
    assert "nest" in only(load_model, f).message


def test_aliases_within_the_budget_are_fine(tmp_path):
    text = edit(MODEL, "source: Qwen2.5-7B-Instruct config.json",
                "source: &src Qwen2.5-7B-Instruct config.json\nnotes: *src")
    assert load_model(write(tmp_path, "m.yaml", text)).notes == "Qwen2.5-7B-Instruct config.json"


def test_merge_keys_are_plain_yaml(tmp_path):
    text = edit(MODEL, "norm: {kind: rmsnorm}", "norm: {<<: {kind: rmsnorm}}")
    assert load_model(write(tmp_path, "m.yaml", text)).norm_kind == "rmsnorm"


# --- keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "line", "col", "path", "fragment"),
    [
        ("1: x\n", 12, 1, "1", "key '1' is read by YAML as an integer; keys must be strings"),
        ("on: x\n", 12, 1, "on", "key 'on' is read by YAML as a boolean"),
        ("~: x\n", 12, 1, "~", "key '~' is read by YAML as null"),
        ("1.5: x\n", 12, 1, "1.5", "read by YAML as a number"),
        ("? [a]\n: x\n", 12, 3, "(top level)", "a key is a list; keys must be plain strings"),
        ("? {a: 1}\n: x\n", 12, 3, "(top level)", "a key is a mapping"),
    ],
)
def test_non_string_keys(tmp_path, extra, line, col, path, fragment):
    f = write(tmp_path, "m.yaml", MODEL + extra)
    located(only(load_model, f), f, line, col, path, fragment)


def test_duplicate_keys(tmp_path):
    f = write(tmp_path, "m.yaml", MODEL + "d_model: 4096\n")
    located(only(load_model, f), f, 12, 1, "d_model",
            "duplicate key 'd_model' (first written at line 2)")


def test_duplicate_nested_keys(tmp_path):
    f = write(tmp_path, "m.yaml", edit(MODEL, "{kind: swiglu,", "{kind: swiglu, kind: gelu,"))
    located(only(load_model, f), f, 7, 21, "mlp.kind", "duplicate key 'kind'")


def test_dates_read_as_text(tmp_path):
    # YAML 1.1 turns 2024-01-01 into a date; a spec means the text it wrote
    text = edit(MODEL, "name: Qwen2.5-7B-Instruct", "name: 2024-01-01")
    assert load_model(write(tmp_path, "m.yaml", text)).name == "2024-01-01"
