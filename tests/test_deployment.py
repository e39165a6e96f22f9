"""The deployment: attention data parallelism with expert parallelism, golden on DeepSeek-V3.

DeepSeek-V3's figures come from its config.json (Hugging Face deepseek-ai/DeepSeek-V3, in the
catalog): d_model 7168, 61 layers (the first 3 dense, d_ff 18432), 256 routed experts of width
2048, top-8, one shared expert, MLA with a 512-wide latent and a 64-wide rotary key; the
layout is the DeepSeek-V3 Technical Report's (section 3.4: attention data parallelism with
expert parallelism, redundant experts for load balance).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
import sympy as sp

from rooflinec.cost import parallel
from rooflinec.cost.deployment import Deployment
from rooflinec.cost.workbench import Workbench
from rooflinec.model.moe import E, k
from rooflinec.model.symbols import L, M, b, d_model
from rooflinec.spec import load as spec

ROOT = Path(__file__).resolve().parents[1] / "rooflinec/spec/catalog"
DSV3 = spec.load_model(str(ROOT / "models/deepseek-v3.yaml"))
MIXTRAL = spec.load_model(str(ROOT / "models/mixtral-8x7b.yaml"))
H200 = spec.load_hardware(str(ROOT / "hardware/h200-sxm.yaml"))
DP8_EP8 = Deployment(DSV3, H200, 1, "fp8", "bf16", attention_dp=8, moe_ep=8)

EXPERT = 3 * 7168 * 2048          # gate, up and down of one routed expert: 44,040,192
MOE_LAYERS = 61 - 3               # first_k_dense_replace = 3


def test_dsv3_dp8_ep8_weights_per_rank():
    """Each of the 8 H200s holds 256 / 8 = 32 routed experts of each of the 58 MoE layers,
    32 x 58 x 44,040,192 = 81,738,596,352 parameters, and everything else whole (attention,
    the 3 dense layers, router, shared experts, embeddings, replicated under attention DP):
    671,026,404,352 in all (the model card's 671B) less the 58 x 256 x 44,040,192 routed =
    17,117,633,536. At fp8 (1 B; block scales not counted here) 98,856,229,888 B."""
    assert DP8_EP8.params_per_device(routed_only=True) == 32 * MOE_LAYERS * EXPERT == 81_738_596_352
    assert DP8_EP8.params_per_device(routed_only=False) == 671_026_404_352 - MOE_LAYERS * 256 * EXPERT
    assert DP8_EP8.weight_bytes() == 81_738_596_352 + 17_117_633_536


def test_dsv3_dp8_ep8_kv_per_rank_and_largest_batch():
    """MLA keeps the 512-wide latent and the 64-wide rotary key per layer: (512 + 64) x 61 x 2 B
    = 70,272 B per token at bf16, on each rank for its own sequences only. At B = 64 per rank
    and 4096 tokens: 64 x 4096 x 70,272 = 18,421,383,168 B. The largest batch at 4096 tokens:
    (141e9 - 98,856,229,888) / (4096 x 70,272) = 146.4, so 146 sequences per rank."""
    assert DP8_EP8.kv_per_token() == (512 + 64) * 61 * 2 == 70_272
    assert 64 * DP8_EP8.kv_per_sequence(4096) == 18_421_383_168
    assert DP8_EP8.largest_batch(H200.capacity, 4096) == (141_000_000_000 - 98_856_229_888) // (4096 * 70_272) == 146


def test_dsv3_dp8_ep8_all_to_all_bytes_per_layer_at_b64():
    """Decode at B = 64 per rank: each rank routes 64 x 8 = 512 rows of 7168 at bf16, 7,340,032
    B; under uniform routing 7/8 of them leave the rank: 6,422,528 B sent per dispatch, as many
    received, the combine the same rows back. The 8 GPUs share one NVLink domain (H200's 8)."""
    a2a = DP8_EP8.all_to_all_bytes(64, 2)
    assert a2a["sent"] == a2a["received"] == 64 * 8 * 7168 * 2 * 7 / 8 == 6_422_528
    assert (a2a["devices"], a2a["link"]) == (8, "scale-up")
    # across two domains of 8 (attention DP 16) the scale-out network carries it
    assert Deployment(DSV3, H200, 1, attention_dp=16, moe_ep=16).all_to_all_bytes(64, 2)["link"] == "scale-out"


def test_busiest_rank_pigeonhole_and_the_labelled_prediction():
    """8 ranks x 64 tokens x 8 experts = 4096 routings over 8 expert ranks: the busiest serves at
    least 512 (pigeonhole); at one token per rank, 64 routings, at least 8. The prediction at an
    imbalance of 1.3 is 1.3 x the mean, not a bound."""
    # experts: at least ceil(8/8) = 1 (every token routed to the same 8); uniform routing
    # touches D(512) = 256 (1 - (31/32)^512) of them, an eighth on each rank
    assert DP8_EP8.routings(64) == {"total": 4096, "bound": 512, "mean": 512, "predicted": 512,
                                    "experts_bound": 1, "experts_predicted": pytest.approx(256 * (1 - (31 / 32) ** 512) / 8)}
    assert DP8_EP8.routings(1)["bound"] == 8
    hot = Deployment(DSV3, H200, 1, attention_dp=8, moe_ep=8, imbalance=1.3)
    assert hot.routings(64)["predicted"] == pytest.approx(1.3 * 512)
    assert hot.routings(64)["bound"] == 512


def test_redundant_experts_cost_memory():
    """EPLB's 32 redundant experts over 8 ranks: (256 + 32) / 8 = 36 experts per rank per MoE
    layer, 4 x 58 x 44,040,192 parameters more than 32."""
    eplb = Deployment(DSV3, H200, 1, "fp8", attention_dp=8, moe_ep=8, redundant_experts=32)
    assert eplb.params_per_device(routed_only=True) - DP8_EP8.params_per_device(routed_only=True) == 4 * MOE_LAYERS * EXPERT
    with pytest.raises(parallel.Unshardable, match="redundant"):
        Deployment(DSV3, H200, 1, attention_dp=8, moe_ep=8, redundant_experts=3).check()


def test_the_moe_layers_must_cover_the_attention_devices():
    with pytest.raises(parallel.Unshardable, match="must cover"):
        Deployment(DSV3, H200, 1, attention_dp=4, moe_ep=8).check()
    # tp 2 x attention DP 4 = 8 devices = moe_tp 1 x ep 8 (moe_tp derived)
    ok = Deployment(MIXTRAL, H200, 2, attention_dp=4, moe_ep=8)
    ok.check()
    assert ok.expert_tp == 1 and ok.group == 8


def test_the_busiest_devices_program_and_its_all_to_alls():
    """The sharded decode program: the routed-expert ops carry ceil(8*M*k/8)/(M*k) of the
    whole routings (exactly 1 here: each rank serves its own share on average), and the
    dispatch all-to-all sends M*k*d_model*b x 7/8 per layer, 58 layers."""
    bench = Workbench.of(DSV3, (H200,), "bf16")
    whole = bench.program("decode", "unfused", H200, 1)
    prog = DP8_EP8.shard(whole)
    dispatch = next(c for c in prog.collectives if c.name == "moe_dispatch_all_to_all")
    assert (dispatch.devices, dispatch.span) == (8, 8)
    assert sp.simplify(dispatch.volume - M * k * d_model * b * sp.Rational(7, 8)) == 0
    assert dispatch.repeat.subs(L, 61) == MOE_LAYERS
    up = next(op for op in prog.ops if op.name == "expert_up_proj")
    base = next(op for op in whole.ops if op.name == "expert_up_proj")
    ratio = sp.simplify(up.cost.flops / base.cost.flops)
    assert ratio.subs({M: 64, k: 8, E: 256}) == 1
    assert ratio.subs({M: 1, k: 8, E: 256}) == 1
    assert not any(c.kind == "all_reduce" for c in prog.collectives)   # tp 1: no all-reduces


def test_tensor_parallel_experts_are_todays_layout():
    """Without attention DP or expert parallelism each expert splits like the MLP (moe_tp = tp)
    and the MoE layer's output is all-reduced: no all-to-all."""
    dep = Deployment(MIXTRAL, H200, 8)
    assert dep.expert_tp == 8 and not dep.all_to_all
    bench = Workbench.of(MIXTRAL, (H200,), "bf16")
    prog = dep.shard(bench.program("decode", "unfused", H200, 1))
    names = {c.name for c in prog.collectives}
    assert "moe_combine_all_reduce" in names and "moe_dispatch_all_to_all" not in names


@pytest.mark.parametrize("argv, fragment", [
    (("--ep", "3"), "--ep: expert-parallel degree 3 does not divide the 256 routed experts"),
    (("--attention-dp", "4", "--ep", "8"), "--attention-dp: tp 1 x attention_dp 4 = 4 devices, but moe_tp 1 x ep 8"),
    (("--attention-dp", "0"), "--attention-dp: expected a whole number"),
])
def test_serve_layout_flag_mistakes_name_their_flag(call, argv, fragment):
    code, out, err = call("serve", "deepseek-v3", "--device", "h200-sxm", *argv)
    assert code == 2 and out == "" and fragment in err and "Traceback" not in err


@pytest.mark.slow
def test_serve_deepseek_v3_at_attention_dp_8_ep_8(call):
    """`serve` asks the same deployment: one rank's weights (98,856,229,888 B at fp8, as above)
    and KV cache (70,272 B per token at bf16), the group's tokens/s over 8 ranks."""
    code, out, err = call("serve", "deepseek-v3", "--device", "h200-sxm", "--attention-dp", "8",
                          "--ep", "8", "--weights", "fp8", "--batch", "1,64", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["attention_dp"], data["ep"]) == (8, 8)
    assert data["serving"]["weight_bytes"] == 98_856_229_888 and data["serving"]["kv_per_token"] == 70_272
    assert data["serving"]["deployment"]["gpus"] == 8
    # calibrated rows as under tp (the serving model steps one rank: B per rank, 8 B in all)
    code, out, err = call("serve", "deepseek-v3", "--device", "h200-sxm", "--attention-dp", "8",
                          "--ep", "8", "--dtype", "fp8", "--batch", "1,64", "--json")
    assert code == 0, err
    points = json.loads(out)["calibrated"]["points"]
    assert points and all("why" not in p and p["tpot_s"] > 0 for p in points), points


@settings(max_examples=20, deadline=None)
@given(dp=st.sampled_from([1, 2, 4, 8]), ep=st.sampled_from([1, 2, 4, 8]), tokens=st.integers(0, 4096),
       imbalance=st.floats(1.0, 8.0), redundant=st.sampled_from([0, 8]))
def test_the_busiest_rank_lies_between_its_bound_and_what_it_holds(dp, ep, tokens, imbalance, redundant):
    """`Deployment.busiest`, the rule every step model asks: the bound's rows times ep cover
    every routing (pigeonhole) and its experts are ceil(k/ep) at a token or more; the prediction
    is never below the bound nor above the rank's own (min(k, held) rows per token, the experts
    it holds), and it grows with the imbalance factor."""
    dep = Deployment(DSV3, H200, 1, attention_dp=dp, moe_ep=ep, imbalance=imbalance, redundant_experts=redundant)
    (rows_b, experts_b), (rows_p, experts_p) = dep.busiest(tokens, True), dep.busiest(tokens, False)
    total, held = dp * tokens * 8, (256 + redundant) // ep
    assert rows_b * ep >= total > (rows_b - 1) * ep or tokens == 0
    assert experts_b == (-(-8 // ep) if tokens else 0)
    assert rows_b <= rows_p <= dp * tokens * min(8, held) and experts_b <= experts_p <= held
    assert dep.busiest(tokens, False)[0] <= replace(dep, imbalance=imbalance + 1).busiest(tokens, False)[0]
