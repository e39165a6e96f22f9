"""Every shipped spec validates, and the lowering follows the model's architecture."""

import glob
import os

import pytest

from rooflinec.spec import load as spec
from rooflinec.model.lower import lower

HARDWARE = sorted(glob.glob("rooflinec/spec/catalog/hardware/*.yaml"))
MODELS = sorted(glob.glob("rooflinec/spec/catalog/models/*.yaml"))
STUDIES = sorted(glob.glob("specs/*.yaml"))


def test_catalog_is_not_empty():
    assert HARDWARE and MODELS and STUDIES


@pytest.mark.parametrize("path", HARDWARE)
def test_hardware_validates(path):
    dev = spec.load_hardware(path)
    assert dev.bandwidth > 0 and dev.tensor and dev.source


@pytest.mark.parametrize("path", MODELS)
def test_model_validates(path):
    assert spec.load_model(path).source


@pytest.mark.parametrize("path", STUDIES)
def test_study_validates(path):
    assert spec.load_study(path).stem == os.path.splitext(os.path.basename(path))[0]


def test_units_read_as_meant():
    a100 = spec.load_hardware("rooflinec/spec/catalog/hardware/a100-40gb.yaml")
    assert a100.bandwidth == 1555 * 10**9          # GB is 10^9
    assert a100.capacity == 40 * 2**30             # GiB is 2^30
    assert a100.tensor["bf16"] == 312 * 10**12
    assert a100.sram_per_sm == 192 * 1024


def linear_ops(model_file):
    return [o.name for o in lower(spec.load_model(model_file), "decode").ops if o.category == "linear"]


def test_swiglu_has_three_matrices_and_gelu_two():
    assert {"gate_proj", "up_proj", "down_proj"} <= set(linear_ops("rooflinec/spec/catalog/models/qwen2.5-7b.yaml"))
    gpt2 = linear_ops("rooflinec/spec/catalog/models/gpt2-medium.yaml")
    assert "gate_proj" not in gpt2 and {"up_proj", "down_proj"} <= set(gpt2)


def test_embedding_is_a_gather_not_a_matmul():
    program = lower(spec.load_model("rooflinec/spec/catalog/models/qwen2.5-7b.yaml"), "decode")
    emb = program.op("embedding")
    assert emb.cost.flops == 0 and emb.unit == "vector"


def test_layers_are_a_multiplier_not_an_unrolled_list():
    program = lower(spec.load_model("rooflinec/spec/catalog/models/gpt3-175b.yaml"), "decode")
    assert len([o for o in program.ops if o.name == "q_proj"]) == 1
    assert str(program.op("q_proj").repeat) == "L"


def test_spec_reference_is_fresh():
    from rooflinec.spec.schemadoc import reference
    with open("docs/spec-reference.md", encoding="utf-8") as fh:
        assert fh.read() == reference(), "run: python -m rooflinec.spec.schemadoc > docs/spec-reference.md"


def test_every_schema_property_has_a_description():
    from rooflinec.spec.validate import schema

    def walk(node, path):
        if isinstance(node, dict):
            for key, child in node.get("properties", {}).items():
                assert "description" in child, f"{path}.{key}"
            for key, child in node.items():
                walk(child, f"{path}.{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{path}[{i}]")

    for name in ("hardware", "model", "study", "report"):
        walk(schema(name), name)


def test_every_dtype_a_study_may_name_has_a_byte_width():
    """The study schema lists dtypes twice (the study's, the sweep's); each must be one that
    spec.DTYPE_BYTES sizes, or a valid spec would fail with a KeyError."""
    import json
    from importlib.resources import files
    schema = json.loads(files("rooflinec.spec").joinpath("schemas/study.schema.json").read_text())
    study = schema["properties"]["dtype"]["enum"]
    sweep = schema["properties"]["analyses"]["properties"]["sweep"]["properties"]["dtype"]["items"]["enum"]
    storage = schema["$defs"]["storage"]["enum"]
    assert set(study) == set(sweep)
    assert set(study) | set(storage) <= set(spec.DTYPE_BYTES)
