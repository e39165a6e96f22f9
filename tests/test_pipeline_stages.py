"""Pipeline stages (issue 31, item 4): a stage holds ceil(L/pp) consecutive layers, its
dense and MoE layers counted where they are; a pp that leaves a stage empty is refused,
located; every per-device quantity is non-negative and the stages sum to the whole."""

from __future__ import annotations

import dataclasses
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinec.cost import deployment, kvcache, parallel
from rooflinec.model import params
from rooflinec.spec import load as spec
from rooflinec.cli.app import run
from rooflinec.cost.evaluate import number
from rooflinec.model.symbol_table import model_values

MODELS = ["deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-120b", "qwen2.5-7b", "gpt2-medium"]


def _model(key: str):
    return spec.load_model(str(spec.catalog.path("models", key)))


def _total(model) -> int:
    """Every parameter a deployment holds: the total less multi-token-prediction modules,
    which no device holds unless speculation drafts with them (DeepSeek-V3's mtp_layers: 1)."""
    p, values = params.count(model), model_values(model)
    mtp = sum(number(c.count, values) for c in p.components if c.group == "mtp")
    return int(number(p.total, values) - mtp)


def _valid_pp(n_layers: int, pp: int) -> bool:
    per = -(-n_layers // pp)
    return per * (pp - 1) < n_layers


def test_deepseek_v3_at_pp_31_holds_positive_weights():
    """61 layers over 31 stages: 2 layers a stage, the last 1. The first stage holds the 2 of
    the 3 dense-first layers; it used to count 2 - 3 = -1 MoE layers and -15,806,941,184 B."""
    m = _model("deepseek-v3")
    layered, once = deployment.stage_params(m, 1, 31)
    assert len(layered) == 31 and min(layered) > 0
    assert sum(layered) + once == _total(m)
    assert deployment.params_per_device(m, 1, 31) == int(max(layered) + once) > 0
    # stage 3 (layers 6, 7) holds two MoE layers, the heaviest: stage 0 (layers 0, 1) two dense
    assert max(layered) == layered[3] > layered[0]


def test_a_pp_with_empty_stages_is_refused_located(tmp_path):
    (tmp_path / "s.yaml").write_text("model: deepseek-v3\ndevices: [h200-sxm]\nparallel: {pp: 40}\n"
                                     "analyses:\n  params: {}\n", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert run(["check", str(tmp_path / "s.yaml")], out, err) == 1
    assert err.getvalue() == (f"{tmp_path / 's.yaml'}:3:16: parallel.pp: pipeline degree 40 leaves "
                              "stages with no layers: 61 layers in stages of ceil(L/pp) = 2 fill "
                              "only 31 stages; pick fewer stages\n")
    with pytest.raises(parallel.Unshardable):
        parallel.stages(61, 62)


@pytest.mark.slow
@settings(max_examples=40)
@given(key=st.sampled_from(MODELS), pp=st.integers(1, 130), first=st.integers(0, 5),
       every=st.integers(1, 4), offset=st.integers(0, 3), ep=st.sampled_from([1, 2]))
def test_stages_are_non_negative_and_sum_to_the_whole(key, pp, first, every, offset, ep):
    m = _model(key)
    if m.moe is not None:   # any layout of dense and MoE layers
        m = dataclasses.replace(m, moe=dataclasses.replace(m.moe, first_dense=first, every=every,
                                                           offset=offset % every))
    elif ep > 1:
        return
    if not _valid_pp(m.n_layers, pp):
        with pytest.raises(parallel.Unshardable):
            parallel.stages(m.n_layers, pp)
        return
    ranges = parallel.stages(m.n_layers, pp)
    assert [a for a, _ in ranges] == [b for _, b in [(0, 0), *ranges[:-1]]] and ranges[-1][1] == m.n_layers
    assert all(stop > first for first, stop in ranges)
    layered, once = deployment.stage_params(m, 1, pp, ep)
    assert all(x >= 0 for x in layered) and once >= 0
    if ep == 1:
        assert sum(layered) + once == _total(m)
    assert deployment.params_per_device(m, 1, pp, ep) >= max(layered)
    for context in (1, 4096, 10 ** 6):
        assert kvcache.per_sequence(m, 2, context, 1, pp, 1) >= 0
    assert kvcache.per_token(m, 2, 1, pp) >= 0
