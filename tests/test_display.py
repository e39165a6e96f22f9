"""Display and usability defects a user saw, each pinned by the test that would have caught it:
fitted times at the solver's floor print as 0 under a stated resolution; the planner's best per
device is one row per device and its frontier has no repeats; every command-line option has
help text; MFU and HFU markers both show; ridge labels sit on no other ridge line; the catalog
tables fit 100 columns; YAML is parsed in one module; a study about tp opens where it fits."""

from __future__ import annotations

import argparse
import io
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from rooflinec.base import quantities as q, yamlio
from rooflinec.base.errors import SpecError
from rooflinec.cli import app, calibrated, quick
from rooflinec.measure import trace
from rooflinec.render import charts, pages


@given(st.floats(min_value=-1e-9, max_value=1e-9, allow_nan=False).filter(lambda x: abs(x) < 1e-9))
def test_a_time_under_the_resolution_prints_as_zero(x):
    assert q.resolved(x) == "0 s"


@given(st.floats(min_value=1e-9, max_value=1e6))
def test_a_time_at_or_over_the_resolution_prints_as_seconds_does(x):
    assert q.resolved(x) == q.seconds(x) and q.resolved(-x) == q.seconds(-x)


def _calibration(kind: str) -> str:
    # a group as the validation report carries it, its request latency at the fit's floor
    group = {"device": "h200-sxm", "engine": "vllm", "bandwidth_fraction": 1.0, "compute_fraction": 0.238,
             "per_layer_s": 0.0, "per_step_s": 0.02865, "per_collective_s": 0.0,
             "per_request_s": 2.614e-17, "request_latency_s": 9.358e-20}
    r = {"parameters": {"fitted": ["per_request_s"], "groups": [group], "default": dict(group)}}
    env = pages.environment(kind == "html", markdown=kind == "md")
    return env.get_template(f"{kind}/validation_calibration.{kind}.j2").render(r=r)


def test_the_calibration_table_prints_a_floor_value_as_zero_and_states_the_rule_once():
    for kind in ("md", "html"):
        text = _calibration(kind)
        assert "e-17" not in text and "e-20" not in text, kind
        assert "28.65 ms" in text                                   # a real time is untouched
        assert text.count("below 1 ns") == 1, kind
        assert text.count("0 s") >= 4 * 2                         # 4 zero cells in each of 2 rows


PLAN = ("plan", "llama-3.1-70b", "--slo", "tpot<=50ms", "--devices", "h200-sxm,mi300x", "--concurrency", "16,64",
        "--gpus", "2", "--aggregated", "--weights", "fp8", "--kv-cache", "fp8")


def _section(out: str, title: str) -> list[str]:
    """The rows of the table under the line starting with `title` (its header left out)."""
    lines = out[out.index(title):].split("\n\n")[0].splitlines()
    return lines[2:]


@pytest.mark.slow
def test_plan_shows_one_best_row_per_device_and_a_frontier_without_repeats(call):
    """1 GPU and pp2 (two stages replicating one GPU's rate) tie in tokens/s per GPU on H200 and
    MI300X: the table titled 'best per device' used to print both (and pp4 where it fitted)."""
    code, out, err = call(*PLAN)
    assert code == 0, err
    best = _section(out, "best per device")
    assert [r.split()[0] for r in best] == ["h200-sxm", "mi300x"]
    front = _section(out, "Pareto frontier")
    assert front and len(set(front)) == len(front)
    code, out, err = call(*PLAN, "--top", "3")
    rows = _section(out, "best 3 per device")
    for dev in ("h200-sxm", "mi300x"):
        mine = [r.split() for r in rows if r.split()[0] == dev]
        assert 1 <= len(mine) <= 3
        per_user = [float(r[-4]) for r in mine]        # tok/s/user, before $/M out, $/M in, J/tok
        assert per_user == sorted(set(per_user)), dev  # each next row faster per user: no replica


def _options(parser, path=("rooflinec",)):
    """(command path, option or positional, help, subcommand help) for every action of every
    parser, subcommands' included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            said = {c.dest: c.help for c in action._choices_actions}
            for name, child in action.choices.items():
                yield path, name, said.get(name)
                yield from _options(child, (*path, name))
        else:
            yield path, "/".join(action.option_strings) or action.dest, action.help


def test_every_option_of_every_command_has_help_text():
    parser = app._parser(io.StringIO(), io.StringIO())
    seen = list(_options(parser))
    assert len({p for p, _, _ in seen}) > 10                   # the walk reached the subcommands
    missing = [f"{' '.join(p)} {name}" for p, name, text in seen if not (text and text.strip())]
    assert not missing, missing


def _markers(svg: str, colour: str) -> list[tuple[float, float]]:
    """Centres (x, y) of the circles and polygons filled with `colour`."""
    out = [(float(x), float(y)) for x, y in re.findall(rf'<circle cx="([-\d.]+)" cy="([-\d.]+)" r="[\d.]+" fill="{colour}"', svg)]
    for pts in re.findall(rf'<polygon points="([^"]+)" fill="{colour}"', svg):
        xy = [tuple(map(float, p.split(","))) for p in pts.split()]
        out.append((sum(x for x, _ in xy) / len(xy), sum(y for _, y in xy) / len(xy)))
    return out


def test_the_scaling_chart_shows_mfu_and_hfu_where_they_are_equal():
    """Without recomputation HFU = MFU (Llama 3 405B's runs in specs/scale.yaml): the HFU square
    was drawn over the MFU circle at the same point. Now each series stands beside the others."""
    run = {"name": "run", "gpus": 8192, "step_s": 8.0, "pipelined_s": 5.5, "fits": True,
           "mfu": 0.681, "hfu": 0.681, "published": 0.43}
    svg = charts.draw({"kind": "scaling", "title": "t", "runs": [run, {**run, "gpus": 16384, "name": "other"}]})
    mfu, hfu = _markers(svg, charts.SERIES_COLOURS[0]), _markers(svg, charts.SERIES_COLOURS[1])
    level = [(a, [b for b in hfu if abs(a[1] - b[1]) < 0.5]) for a in mfu]
    level = [(a, same) for a, same in level if same]          # the MFU markers with an HFU at their height
    assert len(level) == 2                                     # one per run (the legend stacks its rows)
    for (ax, _), same in level:
        assert min(abs(ax - bx) for bx, _ in same) >= math.sqrt(28)   # a marker's width apart


@pytest.mark.slow
@pytest.mark.parametrize("command", ["devices", "models"])
def test_the_catalog_tables_fit_a_100_column_terminal_and_json_keeps_every_source(call, command):
    """The source column held whole citations (up to 1,300 characters a row): the table shows
    each source's cited name within 100 columns; --json keeps the full text and the names."""
    code, out, err = call(command)
    assert code == 0, err
    lines = out.splitlines()
    assert max(map(len, lines)) <= quick.TERMINAL
    rows = json.loads(call(command, "--json")[1])[command]
    assert all(r["source"] and (r.get("device") or r.get("model")) for r in rows)
    for line, r in zip(lines[1:], rows):
        shown = line[lines[0].index("source"):]
        assert shown and r["source"].startswith(shown.removesuffix("…"))


def test_a_cited_name_is_the_first_clause_cut_at_a_word():
    text = "H100 datasheet (secondary; dense figures are half the sparse FP8); NVLink 900 GB/s"
    assert quick.cited(text, 40) == "H100 datasheet"
    assert quick.cited("NVIDIA Ampere architecture blog, table 3; FlashAttention", 34) == "NVIDIA Ampere architecture blog…"
    assert len(quick.cited("x" * 80, 20)) == 20


PACKAGE = Path(__file__).resolve().parent.parent / "rooflinec"


def test_yaml_is_parsed_in_one_module():
    """cli/calibrated.py and measure/trace.py each had a YAML loader of their own; base/yamlio.py
    is the one owner (plain YAML, bounded, located errors; `trusted` for checked files)."""
    parsers = re.compile(r"yaml\.(?:safe_)?load\(|SafeLoader|yaml\.full_load|yaml\.unsafe_load")
    own = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if parsers.search(p.read_text())]
    assert own == [str(Path("base") / "yamlio.py")]


def test_the_shipped_calibration_reads_the_same_through_either_reader():
    shipped = calibrated.shipped()
    assert yamlio.trusted(shipped) == yamlio.load(shipped).data


def test_a_rules_file_gets_the_safe_loaders_refusals_located(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules: !!python/object:os.system [x]\n")
    with pytest.raises(SpecError) as got:
        trace.load_rules(str(rules))
    assert re.match(rf"^{re.escape(str(rules))}:1:\d+: .*!!python/object", str(got.value))


ROOT = PACKAGE.parent


def test_a_study_about_tp_answers_its_summary_where_the_weights_fit():
    """specs/llama70b-tp.yaml sweeps tp 1 to 8, yet its summary answered at tp 1, where the bf16
    weights fit neither device: every answer said 'does not fit'. A study with a tensor-parallel
    view opens at a tp of that view where the weights fit (the committed reports, fresh by
    test_reports_fresh)."""
    checked = []
    for path in sorted((ROOT / "reports").glob("*.json")):
        report = json.loads(path.read_text())
        view = next((s for s in report.get("sections", ()) if s["kind"] == "parallel_view"), None)
        summary = report.get("summary")
        if view is None or not summary:
            continue
        tp = (summary.get("deployment") or {}).get("tp", 1)
        assert tp in view["tps"], path.stem
        # one device short of memory keeps its row's pointer to the smallest tp that fits
        # (moe-mixtral's H100); a summary where no device holds the weights answers nothing
        assert any(d["weights_fit"] for d in summary["devices"] if not d["lacks"]), (path.stem, tp)
        checked.append(path.stem)
    assert "llama70b-tp" in checked


@given(st.lists(st.floats(min_value=1.0, max_value=2000.0), min_size=1, max_size=6))
def test_no_ridge_label_is_struck_through_by_another_ridge_line(ridges):
    """qwen's GEMM sweep: the RTX 4090's label (ridge 163.9) was set 11 pt above its line,
    right on the A100's line (200.6). A label's text (7.5 pt: ~6 pt above its baseline, ~2
    below) now crosses no ridge line, and no two labels share a line of text."""
    plot = charts._plot()
    plot.limits((1, 1e4), (0.5, 3000))
    at = charts._ridge_label_heights(plot, ridges)
    lines = [plot.y(r) for r in ridges]
    for base in at:
        assert not any(base - 6 < y < base + 2 for y in lines), (base, lines)
    ordered = sorted(at)
    assert all(b - a >= 8 for a, b in zip(ordered, ordered[1:]))
