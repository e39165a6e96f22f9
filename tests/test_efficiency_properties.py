"""Laws the efficiency figures obey, over arbitrary architectures, runs and devices."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from rooflinec.cost import efficiency as E
from rooflinec.model import params as P
from rooflinec.spec import load as spec
from rooflinec.model import symbols as sym
from rooflinec.model import symbol_table
from rooflinec.base.roofline import bandwidth_utilisation
from rooflinec.cost.derive import exact
from rooflinec.cost.evaluate import number
from rooflinec.model.lower import Conventions, lower
from rooflinec.model.symbols import B, S

ROOT = Path(__file__).resolve().parent.parent
BASE = spec.load_model(str(ROOT / "rooflinec" / "spec" / "catalog" / "models" / "qwen2.5-7b.yaml"))
FEW = settings(max_examples=30, deadline=None)


@st.composite
def models(draw):
    n_kv = draw(st.integers(1, 8))
    return dataclasses.replace(
        BASE, d_model=draw(st.integers(8, 4096)), n_layers=draw(st.integers(1, 96)),
        vocab=draw(st.integers(8, 256000)), n_heads=n_kv * draw(st.integers(1, 8)), n_kv_heads=n_kv,
        head_dim=draw(st.integers(8, 256)), d_ff=draw(st.integers(8, 16384)),
        mlp_kind=draw(st.sampled_from(["swiglu", "gelu"])), qkv_bias=draw(st.booleans()),
        tied_embeddings=draw(st.booleans()), block=draw(st.sampled_from(["sequential", "parallel"])))


runs = st.fixed_dictionaries({
    "tokens_per_s": st.floats(1, 1e7), "chips": st.integers(1, 10000),
    "peak": st.floats(1e12, 1e16), "sequence": st.integers(1, 32768)})

devices = st.fixed_dictionaries({
    "matrix": st.integers(10**12, 2 * 10**15), "vector": st.integers(10**11, 10**14),
    "bandwidth": st.integers(10**11, 10**13)})


def value(model, expr, sequence) -> sp.Expr:
    """Exact value of a per-token expression (N may appear through the parameter count)."""
    return sp.sympify(expr).xreplace({**symbol_table.model_values(model), S: sequence, sym.b: 2})


def accounts(model):
    n = P.count(model).total
    return E.palm_account(n), E.ledger_account(lower(model, "prefill", Conventions(logits="all")))


@pytest.mark.slow
@FEW
@given(models(), runs)
def test_mfu_never_exceeds_hfu(model, run):
    for acc in accounts(model):
        mfu = E.utilisation(run["tokens_per_s"], float(value(model, acc.model, run["sequence"])),
                            run["chips"], run["peak"])
        for policy in E.RECOMPUTE:
            hw = float(value(model, acc.hardware(policy), run["sequence"]))
            assert mfu <= E.utilisation(run["tokens_per_s"], hw, run["chips"], run["peak"])


@pytest.mark.slow
@FEW
@given(models(), runs)
def test_attention_term_only_adds(model, run):
    palm, _ = accounts(model)
    with_attn = value(model, palm.model, run["sequence"])
    without = value(model, palm.without_attention().model, run["sequence"])
    assert with_attn >= without
    assert E.utilisation(run["tokens_per_s"], float(with_attn), run["chips"], run["peak"]) >= \
        E.utilisation(run["tokens_per_s"], float(without), run["chips"], run["peak"])


@pytest.mark.slow
@FEW
@given(models(), st.integers(1, 8192))
def test_recomputation_orders_none_palm_full(model, sequence):
    for acc in accounts(model):
        none, palm, full = (value(model, acc.hardware(p), sequence) for p in ("none", "palm", "full"))
        assert none <= palm <= full
        assert none == value(model, acc.model, sequence)


@pytest.mark.slow
@FEW
@given(models(), st.booleans())
def test_convention_minus_ledger_is_the_sum_of_the_explained_terms(model, halving):
    n = P.count(model).total
    palm = E.palm_account(n)
    ledger = E.ledger_account(lower(model, "prefill", Conventions(causal_halving=halving, logits="all")))
    terms = E.difference(palm, ledger, n)
    assert sp.expand(palm.model - ledger.model - sum(t["flops"] for t in terms)) == 0


def terms_for(model, device):
    values = {**symbol_table.model_values(model), sym.b: 2}
    return E.step_terms(lower(model, "decode"), values, lambda op: exact(device[op.unit]),
                        device["bandwidth"])


@pytest.mark.slow
@FEW
@given(models(), devices, st.integers(1, 512), st.integers(1, 65536), st.integers(1, 64),
       st.integers(1, 4096))
def test_decode_bound_grows_with_context_and_batch(model, device, batch, context, db, ds):
    t = terms_for(model, device)
    base = t.roof(batch, context).time
    assert t.roof(batch + db, context).time >= base
    assert t.roof(batch, context + ds).time >= base


@pytest.mark.slow
@FEW
@given(models(), devices, st.integers(1, 65536))
def test_compute_bound_batch_is_where_the_terms_meet(model, device, context):
    t = terms_for(model, device)
    c = E.crossover(t, context)
    compute = lambda b: t.compute.xreplace({B: b, S: context})   # noqa: E731
    memory = lambda b: t.memory.xreplace({B: b, S: context})     # noqa: E731
    if c.at is not None:
        assert compute(c.at) == memory(c.at)          # exact rationals: the lines meet here
    if c.first is not None:
        assert compute(c.first) >= memory(c.first)
        assert compute(c.first + 1000) >= memory(c.first + 1000)
        if c.first > 1:
            assert compute(c.first - 1) < memory(c.first - 1)
    else:
        assert compute(10**9) < memory(10**9)
    # the ceiling is approached from below as the batch grows
    assert (10**6) / t.roof(10**6, context).time <= c.ceiling * (1 + 1e-9)


@FEW
@given(st.integers(1, 2**40), st.integers(1, 2**37), st.integers(1, 2**20), st.integers(1, 2**17),
       st.integers(1, 2**17), st.integers(0, 2**36))
def test_memory_fit_is_monotone(capacity, weights, kv_token, context, more_context, more_capacity):
    fit = E.fit_tokens(capacity, weights, context * kv_token)
    assert E.fit_tokens(capacity, weights, (context + more_context) * kv_token) <= fit
    assert E.fit_tokens(capacity + more_capacity, weights, context * kv_token) >= fit
    assert weights + fit * context * kv_token <= max(capacity, weights)
    if weights <= capacity:     # one more sequence would not fit
        assert weights + (fit + 1) * context * kv_token > capacity


@pytest.mark.slow
@FEW
@given(models(), devices, st.integers(1, 64), st.integers(1, 32768))
def test_a_step_at_its_memory_bound_has_full_bandwidth_utilisation(model, device, batch, context):
    t = terms_for(model, device)
    compute, memory = t.at(batch, context)
    nbytes = float(t.bytes.xreplace({B: batch, S: context}))
    mbu = bandwidth_utilisation(nbytes, max(compute, memory), device["bandwidth"])
    assert mbu <= 1 + 1e-12
    if memory >= compute:
        assert abs(mbu - 1) < 1e-9


def test_kv_bytes_per_token_is_what_decode_reads_per_cached_token():
    """Each cached token adds K and V reads to every sequence's step (writes of the new
    token, if a program counts them, do not grow with S and drop out of the derivative)."""
    values = {**symbol_table.model_values(BASE), sym.b: 2}
    program = lower(BASE, "decode")
    kv = sum(op.cost.bytes_of("kv_cache") * op.repeat for op in program.ops)
    per_token = sp.diff(kv.subs(program.bindings), S) / B
    assert number(sp.cancel(per_token), values) == number(E.kv_bytes_per_token(), values) == 57_344
