"""A benchmark's deployment recipe (serving/recipes.py, catalog/benchmarks/): the engine
settings its runs used, applied per measured row from the row's clients and ISL; bad recipe
files fail with located errors."""

from __future__ import annotations

import pytest

from rooflinec.base.errors import SpecError, UsageError
from rooflinec.serving import engines, fitting, measurements, recipes, rows
from rooflinec.serving import stepcost as sc

from test_simulator_validation import small_v2  # a sibling module of the tests


def test_aiconfigurator_settings_per_run():
    """ai-dynamo/aiconfigurator's benchmark rules: TensorRT-LLM and vLLM agg max_num_tokens =
    max_batch_size + isl + 1500 with max_batch_size the concurrency: C 64, ISL 1024 gives
    64 + 1024 + 1500 = 2588 tokens a step; SGLang's max_prefill_tokens = isl + 1500 = 2524,
    its prefill batch beside the decodes (enable_mixed_chunk); TensorRT-LLM 1.0.0rc3's template:
    no chunked prefill, 0.80 of the free memory for the cache."""
    r = recipes.load(recipes.DEFAULT)
    trt = r.policy(engines.load("trtllm"), "trtllm", 64, 1024)
    assert (trt.max_batch, trt.max_tokens, trt.chunked_prefill, trt.cache_fraction) == (64, 2588, False, 0.8)
    vllm = r.policy(engines.load("vllm"), "vllm", 64, 1024)
    assert (vllm.max_batch, vllm.max_tokens) == (64, 2588)
    assert vllm.chunked_prefill == engines.load("vllm").chunked_prefill       # not the recipe's: kept
    sgl = r.policy(engines.load("sglang"), "sglang", 64, 1024)
    assert (sgl.max_batch, sgl.max_tokens, sgl.schedule) == (64, 2524, "mixed")
    assert sgl.chunk_tokens == engines.load("sglang").chunk_tokens            # chunked_prefill_size kept
    assert "trtllm: max_batch C, max_tokens C + ISL + 1500" in recipes.describe(r)
    assert recipes.load(recipes.NONE) is None and "catalog defaults" in recipes.describe(None)


def test_an_unknown_recipe_names_the_known_ones():
    with pytest.raises(UsageError, match="aiconfigurator"):
        recipes.load("nosuch")


@pytest.mark.parametrize("body, where, what", [
    ("engines:\n  trtllm: {source: s, max_tokens: {clients: 1, tokens: 2}}\n", "engines.trtllm.max_tokens", "a form takes"),
    ("engines:\n  trtllm: {source: s, schedule: {isl: 1}}\n", "engines.trtllm.schedule", "whole-number setting"),
    ("engines:\n  trtllm: {source: s, max_tokens: -3}\n", "engines.trtllm.max_tokens", "whole number"),
    ("engines:\n  trtllm: {source: s, warp: 9}\n", "engines.trtllm.warp", "not an engine setting"),
    ("engines:\n  nosuch: {source: s}\n", "engines.nosuch", "unknown engine"),
    ("engines:\n  vllm: {max_batch: {clients: 1}}\n", "engines.vllm", "name their source"),
    ("engines:\n  vllm: {source: s, max_batch: {clients: 0}}\n", "engines.vllm.max_batch", "all zeros"),
])
def test_a_bad_recipe_is_located(tmp_path, body, where, what):
    f = tmp_path / "r.yaml"
    f.write_text("name: r\nsource: s\n" + body, encoding="utf-8")
    with pytest.raises(SpecError) as err:
        recipes.load(str(f))
    assert where in str(err.value) and what in str(err.value) and "r.yaml:" in str(err.value)


@pytest.mark.slow
def test_prepare_replays_a_row_under_its_recipe(tmp_path):
    """TensorRT-LLM's Llama-3.1-8B row at C 8, ISL 1024, OSL 128, tp 1: under the recipe a step's
    budget is 8 + 1024 + 1500 = 2532 tokens, whole prompts only, so a step holds at most two
    prompts (2048 tokens beside the decodes); with the engine's defaults (8192) more."""
    keep = lambda r: r["engine"] == "trtllm" and r["concurrency"] == "8" and r["isl"] == "1024" \
        and r["osl"] == "128" and r["model"].startswith("meta-llama/Llama-3.1-8B") and r["tp"] == "1"   # noqa: E731
    csv_file = str(small_v2(tmp_path, keep))
    (case, *_) = [c for c in fitting.prepare(rows.read(csv_file), measurements.Specs()) if c.predicted]
    (plain, *_) = [c for c in fitting.prepare(rows.read(csv_file), measurements.Specs(), recipe=None) if c.predicted]
    assert (case.policy.max_tokens, plain.policy.max_tokens) == (8 + 1024 + 1500, 8192)
    tokens = lambda c: c.result.schedule.x0[:, sc.TOKENS]     # noqa: E731
    assert tokens(case).max() <= 2 * 1024 + 8 < tokens(plain).max()
