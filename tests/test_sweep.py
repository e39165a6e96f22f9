"""Sweeps: vectorised results equal the symbolic path point by point; ranges expand and fail
located."""

import io
import json
import math
import os
from dataclasses import replace

import pytest
import sympy as sp
from hypothesis import given, settings, strategies as st

from rooflinec.cli import app as cli
from rooflinec.spec import load as spec
from rooflinec.cost import sweep
from rooflinec.cost.evaluate import number
from rooflinec.cost.workbench import Workbench
from rooflinec.model.lower import Conventions, lower
from rooflinec.model.symbols import B, M, S

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECS = os.path.join(ROOT, "specs")
QWEN = spec.load_study(os.path.join(SPECS, "qwen.yaml"))
BENCH = Workbench(QWEN)
PROGRAMS = {(ph, c): lower(QWEN.model, ph, Conventions(causal_halving=c))
            for ph in ("decode", "prefill") for c in (False, True)}
KERNELS = {k: sweep.compile_program(p) for k, p in PROGRAMS.items()}

# float64 arrays round each product; the symbolic path is exact integers rounded once.
REL = 1e-12

points = st.lists(st.tuples(st.integers(1, 4096), st.integers(1, 1 << 17)), min_size=1, max_size=6)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(points, st.sampled_from(sorted(KERNELS)))
def test_sweep_equals_scalar_ledger(pts, key):
    """Every point of a vectorised sweep has the time, FLOPs and bytes of the scalar ledger."""
    kernel = KERNELS[key]
    batches, contexts = sorted({b for b, _ in pts}), sorted({s for _, s in pts})
    totals = sweep.run(kernel, BENCH, {B: batches, S: contexts}, QWEN.devices, QWEN.dtype,
                       chunk=3)   # tiny chunks: the seams are tested too
    for dev in QWEN.devices:
        tot = totals[dev.key]
        for i, bb in enumerate(batches):
            for j, ss in enumerate(contexts):
                led = BENCH.ledger(kernel.program, dev, {B: bb, S: ss})
                assert math.isclose(tot.time[i, j], led.time, rel_tol=REL)
                assert math.isclose(tot.flops[i, j], led.flops, rel_tol=REL)
                assert math.isclose(tot.bytes[i, j], led.bytes, rel_tol=REL)
                compute = sum(r.roof.time for r in led.rows if r.roof.bound == "compute")
                assert math.isclose(tot.compute_time[i, j], compute, rel_tol=REL, abs_tol=0)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(st.integers(1, 10**5), st.integers(1, 10**6), st.sampled_from(sorted(KERNELS)))
def test_sweep_equals_sympy_subs(bb, ss, key):
    """Each op's FLOPs and bytes equal exact substitution into the sympy expressions (no
    lambdify at all): xreplace with integers leaves an exact sympy number."""
    program = PROGRAMS[key]
    values = {**_model_values(), B: bb, S: ss}
    values[M] = program.bindings[M].xreplace(values)
    kernel = KERNELS[key]
    flops, nbytes, tokens = sweep._costs(kernel, _alphabet(values), 1)
    for i, op in enumerate(kernel.ops):
        exact_f = (op.cost.flops * op.repeat).xreplace(values)
        exact_b = (op.cost.bytes * op.repeat).xreplace(values)
        assert math.isclose(flops[i, 0], float(exact_f), rel_tol=REL)
        assert math.isclose(nbytes[i, 0], float(exact_b), rel_tol=REL)
    assert tokens[0] == int(values[M])


def _model_values():
    from rooflinec.cost.workbench import Workbench
    return Workbench(QWEN).values


def _alphabet(values):
    from rooflinec.model import symbols as sym
    return [values.get(s, 0) for s in sym.ALPHABET.values()]


def test_compile_does_not_depend_on_depth():
    """Layers are a multiplier L, never unrolled: 24 and 1000 layers compile to the same ops."""
    shallow = sweep.compile_program(lower(replace(QWEN.model, n_layers=24), "decode"))
    deep = sweep.compile_program(lower(replace(QWEN.model, n_layers=1000), "decode"))
    assert [o.name for o in shallow.ops] == [o.name for o in deep.ops]
    assert shallow.program.ops == deep.program.ops


def test_tokens_axis_replaces_the_binding():
    kernel = sweep.compile_program(PROGRAMS[("decode", False)], given=(B, S, M))
    dev = QWEN.devices[0]
    tot = sweep.run(kernel, BENCH, {B: [4], S: [512], M: [12]}, [dev], QWEN.dtype)[dev.key]
    unbound = replace(PROGRAMS[("decode", False)], bindings={})   # the scalar path, M as given
    led = BENCH.ledger(unbound, dev, {B: 4, S: 512, M: 12})
    assert math.isclose(tot.time[0, 0, 0], led.time, rel_tol=REL)
    assert tot.tokens[0, 0, 0] == 12


def test_number_unchanged_for_scalars():
    assert number(sp.Integer(2) * B * S, {B: 3, S: 5}) == 30


# Random formulas over the heads a cost may use (user formulas add min, max, ceil, floor).
# ceil and floor take an integer polynomial over an integer, as tile counts do, so their
# value is exact in floats too; elsewhere floats round, hence the tolerance below.
_symbols = st.sampled_from([B, S, M]) | st.integers(1, 500).map(sp.Integer)
_polynomials = st.recursive(_symbols, lambda sub: st.tuples(sub, sub).map(
    lambda ab: ab[0] + ab[1]) | st.tuples(sub, sub).map(lambda ab: ab[0] * ab[1]), max_leaves=4)
_tiles = st.tuples(_polynomials, st.integers(1, 300)).flatmap(lambda pk: st.sampled_from(
    [sp.ceiling(pk[0] / pk[1]), sp.floor(pk[0] / pk[1]) + 1]))
_leaves = _symbols | _tiles | \
    st.tuples(st.integers(1, 50), st.integers(1, 50)).map(lambda pq: sp.Rational(*pq))
_formulas = st.recursive(_leaves, lambda sub: st.one_of(
    st.tuples(sub, sub).map(lambda ab: ab[0] + ab[1]),
    st.tuples(sub, sub).map(lambda ab: ab[0] * ab[1]),
    st.tuples(sub, sub).map(lambda ab: ab[0] / ab[1]),
    st.tuples(sub, st.integers(-2, 3)).map(lambda ae: ae[0] ** ae[1]),
    st.tuples(sub, sub).map(lambda ab: sp.Max(*ab)),
    st.tuples(sub, sub).map(lambda ab: sp.Min(*ab))), max_leaves=12)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_formulas, st.integers(1, 10**6), st.integers(1, 10**6), st.integers(1, 4096))
def test_number_equals_exact_substitution(expr, bb, ss, mm):
    """The scalar evaluator (closures over the sympy tree) gives the exact value, rounded:
    the same number sympy's exact arithmetic gives, to float precision."""
    values = {B: bb, S: ss, M: mm}
    exact = expr.xreplace(values)
    got = number(expr, values)
    assert math.isclose(got, float(exact), rel_tol=1e-9, abs_tol=1e-300)


# --- ranges ----------------------------------------------------------------------------

@pytest.mark.parametrize("spec_, want", [
    ({"from": 1, "to": 5, "step": 2}, [1, 3, 5]),
    ({"from": 1, "to": 6, "step": 2}, [1, 3, 5]),
    ({"from": 1, "to": 65536, "geometric": 2}, [2 ** k for k in range(17)]),
    ({"from": 3, "to": 30, "geometric": 3}, [3, 9, 27]),
    ({"from": 1, "to": 4, "geometric": 1.5}, [1, 2, 3]),   # 1, 1.5, 2.25, 3.375 rounded
    ([7, 3], [7, 3]),
])
def test_expand(spec_, want):
    assert sweep.expand(spec_) == want


@pytest.mark.parametrize("bad, message", [
    ({"from": 5, "to": 1, "step": 1}, "'to' (1) is below 'from' (5)"),
    ({"from": 1, "to": 5}, "give either 'step'"),
    ({"from": 1, "to": 5, "step": 1, "geometric": 2}, "give either 'step'"),
    ({"from": 1, "to": 10 ** 9, "step": 1}, "an axis may hold at most"),
])
def test_expand_errors(bad, message):
    with pytest.raises(sweep.AxisError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sweep.expand(bad)


def _study(tmp_path, analyses: str) -> str:
    """A study outside the repository: its names come from the installed catalog."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "s.yaml"
    path.write_text("model: qwen2.5-7b\ndevices: [rtx4090, a100-40gb]\nanalyses:\n" + analyses)
    return str(path)


def _build(path, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(["build", path, "--out", str(tmp_path / "out")], out, err)
    return code, err.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("analyses, expected", [
    # schema errors: located at the offending key
    ("  sweep:\n    batch: {from: 0, to: 4, step: 1}\n",
     "s.yaml:5:19: analyses.sweep.batch.from: must be >= 1, got integer 0"),
    ("  sweep:\n    batch: {from: 1, to: 4, stride: 1}\n",
     "s.yaml:5:29: analyses.sweep.batch.stride: unknown key 'stride'"),
    ("  sweep:\n    batch: {from: 1, to: 4, geometric: 1}\n",
     "analyses.sweep.batch.geometric: must be > 1"),
    ("  sweep:\n    context: 4096\n",
     "s.yaml:5:14: analyses.sweep.context: expected a list, got integer 4096"),
    # semantic errors: located too
    ("  sweep:\n    batch: {from: 8, to: 4, step: 1}\n",
     "s.yaml:5:12: analyses.sweep.batch: 'to' (4) is below 'from' (8)"),
    ("  sweep:\n    batch: {from: 1, to: 4}\n",
     "s.yaml:5:12: analyses.sweep.batch: give either 'step'"),
    ("  decode_view:\n    contexts: {from: 9, to: 1, geometric: 2}\n",
     "s.yaml:5:15: analyses.decode_view.contexts: 'to' (1) is below 'from' (9)"),
    ("  sweep:\n    batch: [1, 2]\n    devices: [h100-sxm]\n",
     "analyses.sweep.devices[0]: 'h100-sxm' is not a device of this study; its devices: rtx4090, a100-40gb"),
    ("  sweep:\n    batch: [1, 2]\n    context: [64]\n    variant: [flashy]\n",
     "analyses.sweep.variant: no variant 'flashy'; available: unfused, fused, flash"),
    ("  sweep:\n    batch: [1, 2]\n",
     "analyses.sweep: the decode program needs S; sweep that axis too (batch gives B, context gives S, tokens gives M)"),
    ("  sweep:\n    phase: decode\n",
     "analyses.sweep: give at least one workload axis: batch, context, tokens"),
    ("  sweep:\n    batch: {from: 1, to: 1000, step: 1}\n    context: {from: 1, to: 1000, step: 1}\n",
     "a study may sweep at most 100000"),
    ("  sweep:\n    batch: [1]\n    x: context\n",
     "analyses.sweep.x: 'context' is not swept here; swept: batch"),
])
def test_sweep_spec_errors_are_located(tmp_path, analyses, expected):
    code, err = _build(_study(tmp_path, analyses), tmp_path)
    assert code == 1
    assert expected in err, err
    assert "Traceback" not in err


@pytest.mark.slow
def test_ranges_work_in_every_analysis(tmp_path):
    """A range is accepted wherever a list of counts is, and means the same list."""
    listed = _study(tmp_path / "a", "  decode_view:\n    batch: [1, 2, 4]\n    contexts: [1024]\n")
    ranged = _study(tmp_path / "b",
                    "  decode_view:\n    batch: {from: 1, to: 4, geometric: 2}\n    contexts: [1024]\n")
    assert _build(listed, tmp_path / "a")[0] == 0 and _build(ranged, tmp_path / "b")[0] == 0
    a, b = (json.loads((tmp_path / f"{x}/out/s.json").read_text()) for x in "ab")
    assert a["inputs"][0]["sha256"] != b["inputs"][0]["sha256"]   # two study files ...
    assert dict(a, inputs=None) == dict(b, inputs=None)            # ... one report


@pytest.mark.slow
def test_section_shape_is_chart_ready():
    """One series per fixed combination: arrays over x of equal length; tables pick rows."""
    from rooflinec.cli import report
    section = next(s for s in report.build(QWEN)["sections"] if s["kind"] == "sweep")
    batches, contexts = section["axes"]["batch"], section["axes"]["context"]
    assert section["x"] == "batch"
    assert len(section["series"]) == len(contexts) * 2
    assert section["points"] == len(batches) * len(contexts) * 2
    for s in section["series"]:
        assert s["x"] == batches
        assert len(s["time_s"]) == len(s["tokens_per_s"]) == len(s["bound"]) == len(batches)
        # decode: one token per sequence per step, so tokens/s = B / step time
        assert all(math.isclose(t * r, x, rel_tol=REL)
                   for x, t, r in zip(s["x"], s["time_s"], s["tokens_per_s"]))
    rows = [r["x"] for r in section["tables"][0]["rows"]]
    assert rows[0] == batches[0] and rows[-1] == batches[-1]
    assert {2 ** k for k in range(9)} <= set(rows)


def test_chosen_rows():
    from rooflinec.analyses.sweep import chosen_rows
    xs = list(range(3, 40))
    assert [xs[i] for i in chosen_rows(xs, [None, 21])] == [3, 4, 8, 16, 21, 32, 39]


def test_memory_fit_has_one_owner_and_one_answer():
    """RTX 4090, Qwen2.5-7B in bf16: 24 GiB = 25,769,803,776 B; weights 7,615,616,512
    parameters x 2 B = 15,231,233,024 B; KV cache 2 (K, V) x 28 layers x 4 KV heads x 128 x 2 B
    = 57,344 B per token; (25,769,803,776 - 15,231,233,024) // 57,344 = 183,778 tokens,
    // 1024 = 179 sequences of S = 1024."""
    dev = QWEN.devices[0]
    assert (BENCH.weight_bytes(), BENCH.kv_per_token()) == (15_231_233_024, 57_344)
    assert BENCH.largest_batch(dev, 1024) == 179
    for context in (1024, 4096, 32768):
        top = BENCH.largest_batch(dev, context)
        assert not BENCH.fits(dev, top + 1, context)
        assert top == 0 or BENCH.fits(dev, top, context)


def test_a_series_compute_bound_from_its_first_point_is_not_called_memory_bound():
    """Only a series memory-bound at every point is 'memory-bound throughout'; one that is
    compute-bound from its first point has no crossing either, and says so."""
    from rooflinec.analyses.sweep import _table

    def series(context, bound):
        return {"fixed": {"context": context}, "x": [1, 8], "time_s": [1.0, 2.0],
                "tokens_per_s": [1.0, 4.0], "bound": bound, "fits": None, "crossing": None,
                "crossing_fits": None}
    table = _table([series(512, ["memory", "memory"]), series(8192, ["compute", "compute"])], {})
    assert table["never"] == [{"context": 512}]
    assert table["always"] == [{"context": 8192}]
