"""The architectures analysis: several models' decode steps side by side (full attention,
Mamba-2 hybrid, dense and sparse latent attention), each model's cache read per sequence
checked by hand against its config (catalog specs: Llama-3.1-8B, Nemotron-H-8B, DeepSeek-V3
and DeepSeek-V3.2-Exp, from their config.json on Hugging Face)."""

from __future__ import annotations

import textwrap

import pytest

from rooflinec import analyses
from rooflinec.base.errors import SpecError
from rooflinec.render import chartdata
from rooflinec.spec.load import load_study

STUDY = """\
title: side by side
devices: [h200-sxm]
analyses:
  architectures:
    models: {models}
    batch: [2]
    contexts: [1024, 8192]
"""


def _section(tmp_path, models):
    path = tmp_path / "study.yaml"
    path.write_text(textwrap.dedent(STUDY.format(models=models)))
    return analyses.run(load_study(str(path)))[0]


def _reads(model) -> dict:
    """context -> the cache bytes one sequence moves in one decode step (read; a state also written)."""
    return {c["context"]: c["steps"][0]["devices"][0]["cache_per_sequence"] for c in model["contexts"]}


@pytest.mark.slow
def test_what_each_architecture_reads_per_decode_step(tmp_path):
    section = _section(tmp_path, "[llama-3.1-8b, nemotron-h-8b, deepseek-v3, deepseek-v3.2-exp]")
    llama, nemotron, dense, sparse = section["models"]
    assert [m["model"] for m in section["models"]] == ["llama-3.1-8b", "nemotron-h-8b", "deepseek-v3",
                                                       "deepseek-v3.2-exp"]
    # Llama-3.1-8B: 32 layers x K and V of 8 heads x 128 x 2 B = 131,072 B per cached token
    assert _reads(llama) == {1024: 1024 * 131_072, 8192: 8192 * 131_072}
    # Nemotron-H-8B: only its 4 attention layers grow, 4 x 4,096 B per token; the 24 Mamba-2
    # layers read and write their 2,158,592 B of state each step whatever S
    assert _reads(nemotron)[8192] - _reads(nemotron)[1024] == 7168 * 4 * 4096
    assert _reads(nemotron)[1024] == 1024 * 4 * 4096 + 24 * 2 * 1_048_576 * 2 + 24 * 2 * 30_720 * 2
    # DeepSeek-V3 reads every cached latent, 61 x 1,152 B a token; V3.2's sparse layers read every
    # indexer key (132 B) and the 2,048 selected latents: 61 x (8,192 x 132 + 2,048 x 1,152)
    assert _reads(dense)[8192] == 61 * 8192 * 1152
    assert _reads(sparse)[8192] == 61 * (8192 * 132 + 2048 * 1152) == 209_879_040
    assert _reads(sparse)[1024] == 61 * 1024 * (132 + 1152)
    # a recurrent or sparse layer's decode never reaches the ridge by batching at 8,192 tokens on
    # an H200 here: each sequence brings more bytes than FLOPs over the ridge
    crossing = {m["model"]: m["contexts"][1]["crossings"][0] for m in section["models"]}
    assert crossing["nemotron-h-8b"]["first"] is None and crossing["llama-3.1-8b"]["first"] is None
    assert crossing["deepseek-v3"]["first"] is not None    # 128 heads share one latent: MLA's decode is dense
    assert section["chart_points"] and {p["series"] for p in section["chart_points"]} == {
        f"{m}, B = 2" for m in ("llama-3.1-8b", "nemotron-h-8b", "deepseek-v3", "deepseek-v3.2-exp")}
    # the line chart: one line per model, its bytes the table's
    chart = chartdata.SWEEPS["architectures"](0, section, {"devices": [{"key": "h200-sxm"}]})
    assert [line["label"] for line in chart["lines"]] == [m["model"] for m in section["models"]]
    assert chart["lines"][3]["y"] == [_reads(sparse)[1024], _reads(sparse)[8192]]


def test_an_unknown_model_is_a_located_error(tmp_path):
    with pytest.raises(SpecError) as exc:
        _section(tmp_path, "[llama-3.1-8b, no-such-model]")
    assert "analyses.architectures.models[1]" in str(exc.value) and "no spec 'no-such-model'" in str(exc.value)
