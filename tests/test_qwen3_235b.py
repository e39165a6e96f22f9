"""Qwen3-235B-A22B in the model catalog (issue 27, item 5): the shipped spec is what `import`
makes of the model's config.json (Qwen3MoeForCausalLM), and it counts the model card's 235B
total and 22B activated parameters."""

from __future__ import annotations

from pathlib import Path

from rooflinec.cost.evaluate import number
from rooflinec.model import params
from rooflinec.model.symbol_table import model_values
from rooflinec.spec import catalog, hfimport
from rooflinec.spec import load as spec

CONFIG = Path(__file__).resolve().parent / "hf_configs" / "qwen3-235b-a22b"


def counts(m) -> tuple[int, int]:
    c, v = params.count(m), model_values(m)
    return int(number(c.total, v)), int(number(c.active, v))


def shipped():
    return spec.load_model(catalog.path("models", "qwen3-235b-a22b"))


def test_the_card_s_235b_total_and_22b_activated():
    # Qwen3-235B-A22B model card: 235B total, 22B activated, 94 layers. Per layer: q and o
    # 2 * 4096 * 8192 = 67,108,864; k and v 2 * 4096 * 512 = 4,194,304 (attention 71,303,168);
    # q/k norms 2 * 128 = 256; two RMSNorms 8,192; router 4096 * 128 = 524,288; one expert
    # 3 * 4096 * 1536 = 18,874,368, 128 of them = 2,415,919,104: 2,487,755,008 a layer,
    # x 94 = 233,848,970,752; embeddings and LM head 2 * 151,936 * 4096 = 1,244,659,712; the final
    # norm 4,096: total 235,093,634,560.
    # Active: 8 experts = 150,994,944 instead of 128: 222,830,848 a layer, x 94 = 20,946,099,712,
    # + 1,244,659,712 + 4,096 = 22,190,763,520 (22B; without the input table 21.6B).
    total, active = counts(shipped())
    assert total == 235_093_634_560 and round(total / 1e9) == 235
    assert active == 22_190_763_520 and round(active / 1e9) == 22


def test_import_of_the_config_gives_the_shipped_spec():
    text, _ = hfimport.convert(str(CONFIG))
    imported = spec.load_model(str(CONFIG / "imported.yaml"), text)
    assert counts(imported) == counts(shipped())
    assert imported.moe == shipped().moe and imported.moe.dense_layers(94) == 0
    assert (imported.d_model, imported.n_layers, imported.vocab) == (4096, 94, 151936)
