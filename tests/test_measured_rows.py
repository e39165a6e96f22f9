"""A measurements CSV with bad rows (issue 31, item 5): a row the model cannot shard is
reported as not predicted, with the reason, and the rest goes on; times no measurement can
hold and a column named twice are refused, located; rows of one configuration are costed once."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from rooflinec.serving import calibrate, measurements, rows
from rooflinec.serving import serving_model as sm
from rooflinec.cli.app import run
from rooflinec.base.errors import SpecError

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT.parent / "shared" / "measured" / "serving-visible.csv"   # read in place, never copied
pytestmark = pytest.mark.skipif(not MEASURED.is_file(), reason="../shared/measured/serving-visible.csv absent: "
                                "the measured rows (NVIDIA AIConfigurator) are read in place")
LOCATED = re.compile(r"^.+:\d+:\d+: .+: .+$")


def _lines() -> list[list[str]]:
    with open(MEASURED, encoding="utf-8", newline="") as fh:
        return list(csv.reader(fh))


def _write(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *rows])
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def _set(header, row, **cells) -> list[str]:
    row = list(row)
    for name, value in cells.items():
        row[header.index(name)] = value
    return row


@pytest.mark.slow
def test_a_row_whose_tp_does_not_divide_the_heads_is_not_predicted(tmp_path):
    """Llama-3.1-8B has 32 query heads: tp 3 cannot split them. That row is reported with
    the reason; the two good rows are still predicted (the whole run used to end)."""
    header, *rows = _lines()
    bad = _set(header, rows[0], tp="3", row_id="tp3")
    runs = _write(tmp_path / "runs.csv", header, [rows[0], bad, rows[1]])
    out, err = io.StringIO(), io.StringIO()
    assert run(["validate", "-q", str(runs), "--out", str(tmp_path / "v"), "--format", "json"],
               out, err) == 0, err.getvalue()
    assert "\n2 of 3 rows predicted" in out.getvalue()
    rep = json.loads((tmp_path / "v" / "serving.json").read_text(encoding="utf-8"))
    text = json.dumps(rep)
    assert "tp 3: tensor-parallel degree 3 does not divide the 32 query heads" in text
    assert run(["calibrate", str(runs), "--out", str(tmp_path / "cal.yaml")], out, err) == 0, err.getvalue()


@pytest.mark.parametrize("value", ["5e-324", "1e-320", "1e-9", "1e300", "1e9"])
@pytest.mark.parametrize("column", ["tpot_ms", "ttft_ms"])
def test_a_time_no_measurement_holds_is_refused_located(tmp_path, column, value):
    """5e-324 ms divided by zero, 1e300 raised a math domain error, 1e-320 wrote NaN and
    Infinity into the JSON and .inf into a calibration; now each is a located problem."""
    header, *rows = _lines()
    runs = _write(tmp_path / "runs.csv", header, [_set(header, rows[0], **{column: value})])
    with pytest.raises(SpecError) as err:
        measurements.read(str(runs))
    text = str(err.value)
    col = 1 + sum(len(c) + 1 for c in rows[0][:header.index(column)])
    assert text.startswith(f"{runs}:2:{col}: {column}: '{value}' is not a number of ms from 1e-06")
    for command in (["validate", str(runs), "--out", str(tmp_path / "v")],
                    ["calibrate", str(runs), "--out", str(tmp_path / "c.yaml")]):
        out, errs = io.StringIO(), io.StringIO()
        assert run(command, out, errs) == 1 and all(LOCATED.match(x) for x in errs.getvalue().splitlines())
    assert not (tmp_path / "c.yaml").exists() and not (tmp_path / "v").exists()


def test_a_column_named_twice_is_refused_located(tmp_path):
    """The second tp column used to win silently."""
    header, *rows = _lines()
    runs = _write(tmp_path / "runs.csv", header + ["tp"], [rows[0] + ["8"]])
    with pytest.raises(SpecError) as err:
        measurements.read(str(runs))
    col = 1 + sum(len(c) + 1 for c in header)
    assert str(err.value) == (f"{runs}:1:{col}: tp: column 'tp' repeats column "
                              f"{header.index('tp') + 1}; each column once")


def test_rows_of_one_configuration_are_costed_once(monkeypatch):
    """3,000 rows of one configuration (ids apart): the serving model's costs are computed
    once, not 3,000 times (counted in calls, not seconds), and every row gets them."""
    header, *rows = _lines()
    parsed = measurements.read(str(MEASURED))[:1]
    many = [measurements.Row(**{**parsed[0].__dict__, "row_id": f"r{i}"}) for i in range(3000)]
    calls = []
    real = sm.costs
    monkeypatch.setattr(sm, "costs", lambda r: calls.append(r) or real(r))
    prepared = calibrate.prepare(many, measurements.Specs())
    assert len(calls) == 1 and len(prepared) == 3000
    assert [p.row.row_id for p in prepared] == [f"r{i}" for i in range(3000)]
    assert len({id(p.costs) for p in prepared}) == 1 and prepared[0].costs is not None


def _disagg_row(engine="vllm", concurrency=0, prefill=(2, 1, 4, 1, 1, 1), decode=(1, 1, 8, 1, 1, 7)):
    pool = lambda w, tp, dp, mtp, mep, b: rows.Pool(w, tp, 1, dp, mtp, mep, b)   # noqa: E731
    return rows.Row("r", "Qwen/Qwen3-235B-A22B-FP8", "h100-sxm", engine, "disagg", "fp8", "fp8", 0, 0, 0, 0, 0, 0,
                    4000, 1000, concurrency, 1.0, 0.02, (pool(*prefill), pool(*decode)))


def test_a_disaggregated_row_without_concurrency_takes_the_decode_pools_batch():
    """decode_workers x decode_attention_dp x decode_batch: 1 x 8 x 7 = 56 (the rows that state a
    concurrency obey it: 480 = 6 x 1 x 80); a stated concurrency is kept."""
    c, read = rows.disagg_clients(_disagg_row())
    assert c == 56 and "1 decode worker x attention_dp 8 x decode_batch 7 = 56" in read
    assert rows.disagg_clients(_disagg_row(concurrency=480)) == (480, "")


def test_vllms_expert_rule_reads_a_pool_whose_experts_miss_its_gpus():
    """vLLM without expert parallelism splits each expert over all tp x dp GPUs (FusedMoEParallelConfig):
    tp 1 x dp 4 with moe_tp 1 x ep 1 reads as moe_tp 4; another engine's such pool is refused, located."""
    row = _disagg_row()
    assert rows.pool_experts(row, row.pools[0]) == (4, 1) and rows.pool_experts(row, row.pools[1]) == (8, 1)
    other = _disagg_row(engine="sglang")
    why = rows.pool_experts(other, other.pools[0], "prefill workers' ")
    assert why.startswith("prefill workers' moe_tp 1 x moe_ep 1 = 1 GPUs but tp 1 x attention_dp 4 = 4")
    assert rows.pool_experts(other, rows.Pool(1, 4, 1, 1, 2, 2, 1)) == (2, 2)    # consistent: as stated


def test_an_inconsistent_aggregated_vllm_layout_says_why_in_one_line():
    """The v2 file's vLLM Qwen3-235B rows of tp 1 with moe_tp 2: vLLM's rule would need attention DP 2,
    which the row's attention_dp 1 denies; the reason says both."""
    why = rows.inconsistent("vllm", 1, 1, 2, 1)
    assert why == ("moe_tp 2 x moe_ep 1 = 2 GPUs but tp 1 x attention_dp 1 = 1: the source's layout is inconsistent "
                   "(one instance's MoE layers and attention share its GPUs); vLLM's rule (experts over dp x tp GPUs "
                   "without expert parallelism) would need attention_dp 2, which the row's attention_dp 1 denies")
    assert "vLLM" not in rows.inconsistent("trtllm", 1, 1, 2, 1) and "\n" not in why
