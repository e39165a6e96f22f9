"""Per-device quantities of a deployment (issue 31 item 4's property, beside the pipeline
stages' in tests/test_pipeline_stages.py): over catalog models and tp, attention_dp, ep,
moe_tp and pp that divide them, every per-device quantity is non-negative, and the shards sum
to the whole where nothing is replicated: ep x moe_tp devices hold the routed experts once,
tp devices the KV cache once (past n_kv heads each device keeps one, so more; a latent cache
is whole on each), and tp devices hold at least the model's weights and at most tp copies."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rooflinec.cost import deployment, parallel
from rooflinec.spec import load as spec

MODELS = ["deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b", "qwen2.5-7b", "llama-3.1-8b",
          "gemma-2-9b", "gpt2-medium"]
DEGREES = st.sampled_from([1, 2, 4, 8, 16])
_MODELS = {}


def _model(key: str):
    if key not in _MODELS:
        _MODELS[key] = spec.load_model(str(spec.catalog.path("models", key)))
    return _MODELS[key]


def _deployment(key, tp, dp, ep, pp) -> deployment.Deployment:
    m = _model(key)
    dep = deployment.Deployment(m, tp=tp, attention_dp=dp, moe_ep=ep if m.moe else 1, pp=pp)
    try:
        dep.check()
    except parallel.Unshardable:
        assume(False)
    return dep


def _params(model, **kw) -> int:
    layered, once = deployment.stage_params(model, **kw)
    return int(sum(layered) + once)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(MODELS), tp=DEGREES, dp=DEGREES, ep=DEGREES, pp=st.sampled_from([1, 2, 4]))
def test_per_device_quantities_are_non_negative_and_shards_sum_to_the_whole(key, tp, dp, ep, pp):
    dep = _deployment(key, tp, dp, ep, pp)
    m = dep.model
    for figure in (dep.params_per_device(), dep.weight_bytes(), dep.kv_per_token(),
                   dep.kv_per_sequence(1), dep.kv_per_sequence(4096), dep.largest_batch(80 * 2 ** 30, 4096)):
        assert figure >= 0, figure
    # tp devices of one stage: the KV cache once where tp divides the KV heads, more past them;
    # a latent cache (MLA) is every head's, so each device keeps it whole
    whole_kv = deployment.Deployment(m, pp=pp).kv_per_token()
    shard_kv = deployment.Deployment(m, tp=tp, pp=pp).kv_per_token()
    if getattr(m, "mla", None) is not None:
        assert shard_kv == whole_kv
    elif m.n_kv_heads % tp == 0:
        assert tp * shard_kv == whole_kv
    else:
        assert whole_kv <= tp * shard_kv <= tp * whole_kv
    # at ep 1 the tp devices hold the model once, plus what each keeps whole (norms, KV heads)
    if m.moe is None or dep.moe_ep == 1 and dep.attention_dp == 1:
        whole = _params(m, tp=1)
        held = tp * deployment.params_per_device(m, tp) if pp == 1 else None
        assert held is None or whole <= held <= tp * whole
    if m.moe is not None:   # the routed experts: ep ranks hold each once, split moe_tp ways
        routed = _params(m, tp=1, routed_only=True)
        per = _params(m, tp=dep.tp, ep=dep.moe_ep, moe_tp=dep.expert_tp, routed_only=True)
        assert _params(m, tp=1, ep=dep.moe_ep, moe_tp=1, routed_only=True) * dep.moe_ep == routed
        # each expert's down-projection bias (gpt-oss) stays whole on its moe_tp devices
        assert routed <= per * dep.moe_ep * dep.expert_tp <= routed * dep.expert_tp
        assert dep.routings(64)["bound"] * dep.moe_ep >= dep.routings(64)["total"] >= 0
