"""Published efficiency figures, reproduced from the model and run specs.

PaLM (Chowdhery et al. 2022), appendix B and table 22: N = 540.35e9, L = 118, H = 48,
Q = 256, T = 2048, 6144 TPU v4 chips at 275 TFLOP/s, 238.3k tokens/s.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from rooflinec.cli import app as cli, report
from rooflinec.spec import load as spec

ROOT = Path(__file__).resolve().parent.parent


def sections(path: str) -> dict:
    return {s["kind"]: s for s in report.build(spec.load_study(str(ROOT / path)))["sections"]}


@pytest.fixture(scope="module")
def palm():
    return sections("specs/palm.yaml")["training"]


@pytest.fixture(scope="module")
def qwen():
    return sections("specs/qwen.yaml")


@pytest.mark.slow
def test_palm_flops_per_token(palm):
    dense, full, _ = palm["accounts"]
    # 6N = 6 * 540,356,474,880 = 3.242e12
    assert dense["model"] == pytest.approx(3.242e12, rel=1e-3)
    # 12 L H Q T = 12 * 118 * 48 * 256 * 2048 = 35,627,335,680 = 3.563e10
    assert full["model"] - dense["model"] == 12 * 118 * 48 * 256 * 2048
    # 6N + 12LHQT = 3.278e12 ("3.28 TFLOPs / token")
    assert round(full["model"] / 1e12, 2) == 3.28
    # with PaLM's recomputation: 7.5N + 16LHQT = 4.100e12 ("4.10 TFLOPs / token")
    assert round(full["hardware"] / 1e12, 2) == 4.10
    assert full["hardware"] == pytest.approx(7.5 * 540_356_474_880 + 16 * 118 * 48 * 256 * 2048)


def test_palm_mfu_and_hfu(palm):
    dense, full, ledger = palm["accounts"]
    # 238.3e3 * 3.242e12 / (6144 * 275e12) = 45.73%
    assert round(100 * dense["mfu"], 1) == 45.7
    # 238.3e3 * 3.278e12 / (6144 * 275e12) = 46.23%
    assert round(100 * full["mfu"], 1) == 46.2
    # 238.3e3 * 4.100e12 / (6144 * 275e12) = 57.83%
    assert round(100 * full["hfu"], 1) == 57.8
    # the ledger's own count differs from the convention by named terms that sum to the gap:
    # 6N counts the norm scales, 6 * (118 + 1) * 18432 FLOPs, which do no matmul; the ledger
    # counts the forward's vector-unit FLOPs (norms, softmax, residual adds), which 6N omits
    terms = {t["term"]: t["value"] for t in palm["difference"]}
    assert full["model"] - ledger["model"] == pytest.approx(sum(terms.values()))
    assert terms["weights"] == 6 * 119 * 18432
    assert terms["vector ops"] < 0
    assert round(100 * ledger["mfu"], 1) == 46.2


def test_palm_780b_token_timeline(palm):
    t = palm["timeline"]
    # 780e9 / 238.3e3 / 86400 = 37.88 days at the measured rate, without a pause
    assert round(t["ideal_days"], 2) == 37.88
    # (6144 * 1200 + 3072 * 336) / 24 = 350,208 chip-days = 57.00 days on 6144 chips
    assert t["chip_days"] == pytest.approx(350_208)
    assert round(t["spent_days"], 2) == 57.00
    assert round(t["ratio"], 3) == 1.505


@pytest.mark.slow
def test_published_table_recomputes_its_rows():
    rows = {r["name"]: r for r in sections("specs/published.yaml")["published_efficiency"]["rows"]}
    # PaLM table 3: 46.2%, recomputed from rooflinec/spec/catalog/models/palm-540b.yaml
    assert rows["PaLM 540B"]["kind"] == "tokens_per_s"
    assert round(100 * rows["PaLM 540B"]["value"], 1) == 46.2
    # LLaMA-65B: 380 * 6 * 65.2e9 / 312e12 = 47.65%
    assert rows["LLaMA-65B"]["value"] == pytest.approx(380 * 6 * 65.2e9 / 312e12)
    # Megatron-LM: 163 / 312 = 52.24%
    assert rows["Megatron-LM 1T (benchmark)"]["value"] == pytest.approx(163 / 312)
    assert rows["GPT-3 175B"]["kind"] == "quoted" and rows["GPT-3 175B"]["value"] is None


@pytest.mark.slow
def test_qwen_kv_cache_is_57_344_bytes_per_token(qwen):
    # 2 (K and V) * 28 layers * 4 KV heads * 128 head dim * 2 bytes = 57,344
    assert qwen["serving"]["kv_per_token"] == 57_344


@pytest.mark.slow
def test_qwen_weights_are_its_parameters_in_bf16(qwen):
    # 7,615,616,512 parameters * 2 bytes = 15,231,233,024 bytes
    assert qwen["serving"]["weight_bytes"] == 15_231_233_024
    assert qwen["params"]["totals"][0]["count"] == 7_615_616_512


def test_qwen_decode_at_batch_1_is_bound_by_reading_the_weights(qwen):
    # one step at B = 1 reads every matmul weight once: 7,070,285,824 * 2 B over 1555 GB/s on
    # the A100 = 9.09 ms of the step's 9.13 ms bound (the rest: KV cache and activations)
    step = next(p for p in qwen["serving"]["steps"] if p["batch"] == 1 and p["context"] == 1024)
    a100 = next(d for d in step["devices"] if d["device"] == "a100-40gb")
    assert a100["bound"] == "memory"
    assert 7_070_285_824 * 2 / 1555e9 < a100["time_s"] < 1.01 * 7_070_285_824 * 2 / 1555e9


@pytest.mark.slow
def test_palm_report_shows_the_reproduced_figures(tmp_path):
    out = io.StringIO()
    assert cli.run(["build", str(ROOT / "specs/palm.yaml"), "--out", str(tmp_path), "--format", "md"], out,
                   io.StringIO()) == 0
    text = (tmp_path / "palm.md").read_text(encoding="utf-8")
    for figure in ("45.7%", "46.2%", "57.8%", "3.278 TFLOP", "4.100 TFLOP", "37.88", "57.00", "1.505"):
        assert figure in text


def test_training_program_comes_from_the_workbench_cache(monkeypatch):
    """Training's program (logits of every token) is lowered by the workbench and kept in its
    cache: asking the workbench for it again lowers nothing."""
    from rooflinec import analyses
    from rooflinec.cost import workbench
    lowered = []
    real = workbench.lower

    def spy(model, phase, conv):
        lowered.append((phase, conv))
        return real(model, phase, conv)

    monkeypatch.setattr(workbench, "lower", spy)
    study = spec.load_study(str(ROOT / "specs/palm.yaml"))
    bench = workbench.Workbench(study)
    training = next(s for s in analyses.run(study, None, bench) if s["kind"] == "training")
    assert len(lowered) == 1
    phase, conv = lowered[0]
    assert phase == "prefill" and conv.logits == "all"
    assert list(conv.stated("prefill")) == training["program_conventions"]
    assert bench.program("prefill", conventions=conv).variant == training["variant"]
    assert len(lowered) == 1
