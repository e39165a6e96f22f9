"""DeepSeek Sparse Attention as a layer kind (rooflinec.model.kinds.sparse) on DeepSeek-V3.2-Exp
(the catalog's deepseek-v3.2-exp, from its config.json on Hugging Face, deepseek-ai/DeepSeek-
V3.2-Exp: DeepSeek-V3's dimensions with index_n_heads 64, index_head_dim 128, index_topk 2048):
parameters, the cache per token, what a decode step reads and computes, that a sparse layer
reads between its top-k's latents and a dense latent layer's, and that the indexer scores in fp8
(its own peak and bytes).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import sympy as sp

from rooflinec.cost import kvcache
from rooflinec.cost.evaluate import number
from rooflinec.model import kinds, params, symbol_table
from rooflinec.model.lower import Conventions, lower
from rooflinec.cost.workbench import Workbench
from rooflinec.model.symbols import B, L, M, S, b
from rooflinec.spec.load import load_hardware, load_model, load_study

from layer_kinds import ops_by_name  # a sibling module of the tests

CATALOG = "rooflinec/spec/catalog/models/"


@pytest.fixture(scope="module")
def sparse():
    return load_model(CATALOG + "deepseek-v3.2-exp.yaml")


def _dense(model):
    """The same model without its indexer: DeepSeek-V3's dense latent attention."""
    return replace(model, blocks=tuple((k, v) for k, v in model.blocks if k != "sparse_attention"))


def test_every_latent_layer_is_sparse(sparse):
    assert [(k.name, n) for k, n in kinds.counts(sparse, "mixer")] == [("dsa", 61)]
    assert [(k.name, n) for k, n in kinds.counts(_dense(sparse), "mixer")] == [("mla", 61)]


def test_parameters_against_the_model_card(sparse):
    values = symbol_table.model_values(sparse)
    count = params.count(sparse)
    # the indexer per layer (transformers' DeepseekV32Indexer): wq_b 1536 x 64*128 = 12,582,912;
    # wk 7168 x 128 = 917,504; k_norm (LayerNorm, gain and shift) 256; weights_proj 7168 x 64 = 458,752: 13,959,424, x 61 layers
    # = 851,524,864 on DeepSeek-V3's 671,026,404,352 = 671,877,929,216; the card's 685B adds the
    # multi-token-prediction module (mtp_layers: 1): one layer like the last, its indexer
    # included, 11,610,067,968 + 13,959,424 = 11,624,027,392 (DeepSeek-V3's card: 671B + 14B)
    parts = {c.name: number(c.per, values) for c in count.components}
    assert (parts["index_q_proj"], parts["index_k_proj"], parts["index_k_norm"], parts["index_weights_proj"]) \
        == (12_582_912, 917_504, 256, 458_752)
    mtp = sum(number(c.count, values) for c in count.components if c.group == "mtp")
    assert mtp == 11_610_067_968 + 13_959_424
    assert number(count.total, values) - mtp == 671_026_404_352 + 61 * 13_959_424 == 671_877_929_216
    dense = params.count(_dense(sparse))
    assert number(dense.total, values) - sum(number(c.count, values) for c in dense.components
                                             if c.group == "mtp") == 671_026_404_352


def test_cache_per_token(sparse):
    # per layer: the latent and rotary key (512 + 64) x 2 B = 1,152 B and the indexer's fp8 key
    # with its fp32 scale 128 + 4 = 132 B: 1,284 B, x 61 = 78,324 B per token
    assert kvcache.per_token(sparse, 2) == 61 * 1284 == 78_324
    assert kvcache.per_token(_dense(sparse), 2) == 61 * 1152


def test_a_decode_step_at_32k(sparse):
    values = symbol_table.model_values(sparse)
    point = {**values, B: 1, M: 1, S: 32_768, b: 2}
    ops = ops_by_name(sparse, "decode")
    index, attention = ops["index_scores"], ops["attention"]
    # the indexer reads every cached key: 32,768 x 132 B = 4,325,376 B, and scores each,
    # 2*64*128 + 3*64 = 16,576 FLOPs a key: 543,162,368 FLOPs
    assert number(index.cost.bytes_of("kv_cache"), point) == 4_325_376
    assert number(index.cost.flops, point) == 543_162_368
    # attention reads the 2,048 selected latents, 2,048 x 1,152 B = 2,359,296 B (dense: all
    # 32,768, 37,748,736 B), 2*128*(2*512 + 64)*2,048 = 570,425,344 FLOPs
    assert number(attention.cost.bytes_of("kv_cache"), point) == 2_359_296
    assert number(attention.cost.flops, point) == 570_425_344
    assert number(ops_by_name(_dense(sparse), "decode")["attention"].cost.bytes_of("kv_cache"), point) == 37_748_736


def test_where_the_indexer_dominates(sparse):
    values = symbol_table.model_values(sparse)
    ops = ops_by_name(sparse, "decode")
    at = {**values, B: 1, b: 2}
    keys = sp.sympify(ops["index_scores"].cost.bytes_of("kv_cache")).subs(at)
    latents = ops["attention"].cost.bytes_of("kv_cache").subs(at)
    # past k_top the latents' read stops growing; the indexer's keys outweigh it past
    # 2,048 x 1,152 / 132 = 17,873.45 tokens (8,936.7 with an fp8 latent cache, b = 1)
    x = sp.Symbol("x")   # S is an integer: the crossing is not
    crossing = sp.solve(sp.Eq(keys.subs(S, x), latents.subs(S, 10**6)), x)[0]
    assert crossing == sp.Rational(2048 * 1152, 132) and int(crossing) == 17_873
    assert keys.subs(S, 17_873) < latents.subs(S, 17_873) and keys.subs(S, 17_874) > latents.subs(S, 17_874)


@pytest.mark.parametrize("context", [1, 100, 2048, 2313, 2314, 10_000, 163_840])
def test_a_sparse_layer_reads_between_its_top_k_and_a_dense_layer(sparse, context):
    values = symbol_table.model_values(sparse)
    point = {**values, B: 4, M: 4, S: context, b: 2, L: 61}
    cache = lambda model: sum(number(o.repeat * o.cost.bytes_of("kv_cache"), point)  # noqa: E731
                              for o in lower(model, "decode", Conventions()).ops)
    sparse_read, dense_read = cache(sparse), cache(_dense(sparse))
    top_k = 61 * 4 * min(context, 2048) * 1152
    indexer = 61 * 4 * context * 132
    # the latents a sparse layer reads are its top-k's, at most a dense layer's; the indexer's
    # keys come on top: the sparse layer reads less than the dense one only once
    # 132 S < 1,152 (S - 2,048), S > 2,313.04
    assert sparse_read == top_k + indexer and top_k <= dense_read
    assert (sparse_read < dense_read) == (context > 2313)


def test_prefill_attends_the_selected_keys(sparse):
    values = symbol_table.model_values(sparse)
    halved = ops_by_name(sparse, "prefill", Conventions(causal_halving=True))["attention"]
    # S = 8,192 queries, query i attends min(i, 2,048) keys: 2,048 x 8,192 - 2,048^2/2 =
    # 14,680,064 pairs of 2*128*(192 + 128) FLOPs = 1,202,590,842,880 FLOPs
    point = {**values, B: 1, M: 8192, S: 8192, b: 2}
    assert number(halved.cost.flops, point) == 14_680_064 * 2 * 128 * 320 == 1_202_590_842_880


# --- the indexer scores in fp8: its own peak and bytes ------------------------------------------

HARDWARE = "rooflinec/spec/catalog/hardware/"


def test_the_indexer_scores_at_the_devices_fp8_peak(sparse):
    """DeepSeek-V3.2-Exp's fp8_index kernel takes fp8 queries and keys (act_quant), one fp32 weight
    per head and fp32 key scales: the scores op computes in fp8 whatever the study's dtype, so it
    runs at the device's fp8 tensor peak (H100 SXM: 1,978.9 TFLOP/s; the study's bf16 989.4) and
    reads q at 1 B an element; a device with no fp8 peak (A100) takes the study's bf16 312."""
    h100, a100 = (load_hardware(HARDWARE + f"{k}.yaml") for k in ("h100-sxm", "a100-40gb"))
    bench = Workbench.of(sparse, [h100, a100])
    rows = {}
    for device in (h100, a100):
        program = bench.program("prefill", "ideal", device)
        scores, q_proj = program.op("index_scores"), program.op("index_q_proj")
        assert scores.dtype == "fp8" and not q_proj.dtype      # the projections are the study's GEMMs
        assert bench.op_peak(device, q_proj) == device.tensor["bf16"]
        rows[device.key] = next(r for r in bench.ledger(program, device, {B: 1, S: 8192}).rows
                                if r.op.name == "index_scores")
    assert bench.op_peak(h100, rows["h100-sxm"].op) == 1978.9e12 and rows["a100-40gb"].unit_peak == 312e12
    # prefill of S = 8,192 (the default conventions count every pair, causal_halving off):
    # 8,192^2 = 67,108,864 pairs of 16,576 FLOPs in each of 61 layers, 67,856,188,309,504 FLOPs;
    # compute-bound, so fp8's peak halves the time on the H100: 67,856,188,309,504 / 1,978.9e12 =
    # 34.3 ms (at bf16's 989.4e12 it would be 68.6 ms)
    row = rows["h100-sxm"]
    assert row.flops == 61 * 8192 ** 2 * 16_576 == 67_856_188_309_504
    assert row.roof.time == pytest.approx(67_856_188_309_504 / 1978.9e12) and row.roof.bound == "compute"
    # decode reads q in fp8 and one fp32 weight per head: 64 x (128 x 1 + 4) = 8,448 B a query
    values = symbol_table.model_values(sparse)
    scores = ops_by_name(sparse, "decode")["index_scores"]
    assert number(scores.cost.bytes_of("activations"), {**values, B: 1, M: 1, S: 4096, b: 2}) == 8448


def test_a_bf16_indexer_takes_bf16_bytes_and_peak(sparse):
    """`dtype: bf16` (an indexer trained without the fp8 path): keys 128 x 2 B + the 4 B scale per
    token, queries at 2 B; the scores op then runs at the study's bf16 peak on every device."""
    section = dict(dict(sparse.blocks)["sparse_attention"])
    bf16 = replace(sparse, blocks=tuple((k, tuple(sorted({**section, "dtype": "bf16"}.items()))
                                         if k == "sparse_attention" else v) for k, v in sparse.blocks))
    assert kvcache.per_token(bf16, 2) == 61 * (1152 + 260)
    h100 = load_hardware(HARDWARE + "h100-sxm.yaml")
    bench = Workbench.of(bf16, [h100])
    assert bench.op_peak(h100, bench.program("decode", "ideal", h100).op("index_scores")) == 989.4e12


def test_a_device_without_an_fp8_peak_is_noted_located(tmp_path):
    study = tmp_path / "dsa.yaml"
    study.write_text("title: dsa\nmodel: deepseek-v3.2-exp\ndevices: [h100-sxm, a100-40gb]\n"
                     "analyses: {ledger: {workloads: [{batch: 8, context: 8192}]}}\n")
    h100, a100 = load_study(str(study)).devices
    assert h100.warnings == ()
    assert a100.warnings == (f"{study}:3:21: devices[1]: device 'a100-40gb' lists no tensor peak for fp8, which "
                             "DeepSeek Sparse Attention's indexer scores (op 'index_scores') compute in; they are "
                             "costed at its bf16 peak",)
