"""Hostile inputs other than specs, as hypothesis strategies and the checks they must pass:
config.json files for `import` (every architecture's fields, hostile keys and strings), a
measurements CSV for `validate` and `calibrate`, and special files as `--out`.

    python tests/fuzz_inputs.py --what import --count 5000 --seed 1   # exits 1 on a failure

tests/test_fuzz_inputs.py runs a few examples of each (ROOFLINEC_FUZZ_EXAMPLES sets how many;
its `slow` tests run more). A check fails on a traceback, an unlocated error, NaN or infinity in
a JSON output, a case over SLOW_S, or (import) a spec whose re-read model is not the one the
config's mapped fields give.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "hf_configs"
REFUSED = {"jamba-1.5-mini"}   # refused as published (Mamba-1 layers): nothing to compare a hostile copy with
FOLDERS = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir() and p.name not in REFUSED)
LOCATED = re.compile(r"^.+:\d+:\d+: .+: .+$")   # file:line:col: path: message
SLOW_S = 10.0

# text that is structure somewhere: YAML and JSON syntax, every kind of line break, terminal
# escapes, lone surrogates and non-characters, and the injected MoE
NASTY = ["zz\nmoe: {experts: 64, top_k: 64, d_expert: 999999}", "\nmoe:\n  experts: 64", "# x",
         "&a", "*a", "!!python/object/apply:os.system ['true']", "'", '"', "---", "...", "{", "[",
         ": ", "- ", "\r\nn_layers: 1", "\x85n_layers: 1", "\u2028", "\u2029", "\x1b[2J", "\x9b2J",
         "\ud800", "\udfff", "\ufffe", "\uffff", "\x00", "\t", "\ufeff", "x" * 3000, "é", "𝔘"]
TEXT = st.one_of(st.sampled_from(NASTY),
                 st.text(st.characters(exclude_categories=()), max_size=40),
                 st.lists(st.sampled_from(NASTY), min_size=2, max_size=4).map("".join))
# keys under YAML's 1024 characters of an implicit key: config.json is read by the YAML
# reader (for its locations), which refuses a longer key, located
KEYS = TEXT.filter(lambda key: len(json.dumps(key)) < 1000)
JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53),
                                 st.floats(allow_nan=False, allow_infinity=False), TEXT),
                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                               st.dictionaries(KEYS, inner, max_size=3)),
                       max_leaves=6)


def _config(folder: str) -> dict:
    return json.loads((CONFIGS / folder / "config.json").read_text(encoding="utf-8"))


@st.composite
def hostile_configs(draw) -> tuple[str, dict, dict]:
    """(folder, the shipped config, that config with hostile keys and strings added): unknown
    keys, a hostile _name_or_path and quant_method, text in fields only ever noted."""
    folder = draw(st.sampled_from(FOLDERS))
    base = _config(folder)
    config = json.loads(json.dumps(base))
    for key, value in draw(st.dictionaries(KEYS, JSONISH, min_size=1, max_size=4)).items():
        if key not in config and not re.fullmatch(r"[a-z_]+", key):   # not a field some mapping reads
            config[key] = value
    if draw(st.booleans()):
        config["_name_or_path"] = draw(TEXT)
    if draw(st.booleans()):
        config["quantization_config"] = {"quant_method": draw(TEXT), draw(KEYS): draw(JSONISH)}
    return folder, base, config


def write_json(path: Path, data) -> Path:
    """ASCII JSON: a lone surrogate stays an escape (\\ud800), as a hostile file may hold it."""
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def _model_fields(spec: dict) -> dict:
    """What costs: the spec without its name and provenance."""
    return {k: v for k, v in spec.items() if k not in ("name", "source")}


def check_import(case, tmp: Path) -> None:
    """Import the hostile config: a spec whose re-read mapping is the mapped one, whose model
    fields are the clean config's, and which loads; or located problems only. The CLI too."""
    from rooflinec.spec import hfimport, load as spec
    from rooflinec.cli.app import run
    from rooflinec.base.errors import SpecError
    folder, base, config = case
    cfg = write_json(tmp / "config.json", config)
    start = time.process_time()   # a hang guard in CPU seconds: a loaded machine does not trip it
    clean, _ = hfimport.mapped(str(write_json(tmp / "clean.json", base)))
    try:
        mapped, notes = hfimport.mapped(str(cfg))
    except SpecError as exc:   # only a mapped field can be refused, and the hostile ones are not
        raise AssertionError(f"{folder}: refused: {exc}") from None
    text = hfimport.emit(mapped, notes)
    assert yaml.safe_load(text) == mapped, "the written spec is not the mapped one"
    assert _model_fields(mapped) == _model_fields(clean), "hostile text changed the model"
    assert all("\n" not in line for line in text.splitlines())
    spec.load_model(str(tmp / "imported.yaml"), text)   # a study loads it
    out, err = io.StringIO(), io.StringIO()
    code = run(["import", "-v", str(cfg), "--out", str(tmp / "m" / "spec.yaml")], out, err)   # -v: every note, located
    assert code == 0, err.getvalue()
    written = yaml.safe_load((tmp / "m" / "spec.yaml").read_text(encoding="utf-8"))
    assert _model_fields(written) == _model_fields(clean)
    assert all(LOCATED.match(line) for line in err.getvalue().splitlines()), err.getvalue()[:2000]
    assert time.process_time() - start < SLOW_S


# --- a measurements CSV for validate and calibrate -------------------------------------------

MEASURED = ROOT.parent / "shared" / "measured" / "serving-visible.csv"   # real rows, read in place (the csv check needs it)
CELLS = ["", "0", "-1", "1", "3", "5", "7", "1e-320", "5e-324", "1e300", "1e308", "nan", "inf",
         "-inf", "0x10", "1_000", "\uff14", "9" * 40, "2.5", "1e-6", "604800000", "6e8",
         "bf16", "fp8", "int4", "nvfp4", "h100-sxm", "a100-40gb", "tpu-v4", "../x", "\n", "=cmd()",
         "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "deepseek-ai/DeepSeek-V3"]


def _rows() -> tuple[list[str], list[list[str]]]:
    import csv
    with open(MEASURED, encoding="utf-8", newline="") as fh:
        lines = list(csv.reader(fh))
    return lines[0], lines[1:]


@st.composite
def hostile_csvs(draw) -> str:
    """A few real rows (some repeated under new ids, as one configuration measured often),
    cells replaced by hostile values, and sometimes a column named twice or missing."""
    import csv
    header, rows = _rows()
    picked = [list(rows[i]) for i in draw(st.lists(st.integers(0, len(rows) - 1), min_size=1, max_size=6))]
    picked += [list(picked[0]) for _ in range(draw(st.integers(0, 40)))]
    for n, row in enumerate(picked):
        row[header.index("row_id")] = f"r{n}"
    for _ in range(draw(st.integers(0, 4))):
        row, col = draw(st.sampled_from(picked)), draw(st.integers(0, len(header) - 1))
        row[col] = draw(st.one_of(st.sampled_from(CELLS), TEXT))
    header = list(header)
    change = draw(st.sampled_from(["none", "none", "repeat", "drop", "extra"]))
    col = draw(st.integers(0, len(header) - 1))
    if change == "repeat":
        header.append(header[col])
        picked = [r + [r[col]] for r in picked]
    elif change == "drop":
        header.pop(col)
        picked = [r[:col] + r[col + 1:] for r in picked]
    elif change == "extra":
        header.append(draw(TEXT))
        picked = [r + [draw(TEXT)] for r in picked]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *picked])
    return out.getvalue()


def _reject_constant(name: str):
    raise ValueError(f"the JSON holds {name}")


def check_csv(text: str, tmp: Path) -> None:
    """validate: exit 0 with only finite numbers in its JSON, or exit 1 with located lines
    only; calibrate: the same, its YAML without .inf or .nan; both within SLOW_S."""
    from rooflinec.cli.app import run
    runs = tmp / "runs.csv"
    runs.write_text(text, encoding="utf-8", errors="surrogatepass")
    for argv in (["validate", "-q", str(runs), "--out", str(tmp / "v"), "--format", "json"],
                 ["calibrate", str(runs), "--out", str(tmp / "cal.yaml")]):
        out, err = io.StringIO(), io.StringIO()
        start = time.process_time()   # a hang guard in CPU seconds: a loaded machine does not trip it
        code = run(argv, out, err)
        assert time.process_time() - start < SLOW_S, f"{argv[0]} took over {SLOW_S} s"
        if code == 1:
            lines = err.getvalue().splitlines()
            assert lines and all(LOCATED.match(line) for line in lines), err.getvalue()[:2000]
            continue
        assert code == 0, err.getvalue()[:2000]
        if argv[0] == "validate":
            json.loads((tmp / "v" / "serving.json").read_text(encoding="utf-8"),
                       parse_constant=_reject_constant)
        else:
            written = (tmp / "cal.yaml").read_text(encoding="utf-8")
            assert not re.search(r"\.(inf|nan)\b", written, re.I), written[:2000]


# --- special files as --out ------------------------------------------------------------------

TARGETS = ("new", "new-nested", "regular", "link-to-regular", "folder", "fifo", "socket",
           "link-to-fifo", "dangling-link", "under-a-file")
REFUSED = {"folder": "a folder", "fifo": "a FIFO", "socket": "a socket", "link-to-fifo": "a FIFO",
           "dangling-link": "a symbolic link to nothing", "under-a-file": "inside"}
COMMANDS = ("import", "calibrate", "measure device")


@st.composite
def out_targets(draw) -> tuple[str, str]:
    return draw(st.sampled_from(COMMANDS)), draw(st.sampled_from(TARGETS))


def make_target(tmp: Path, kind: str) -> Path | None:
    """A path of `kind` under `tmp` (None where this system cannot make one)."""
    import socket
    path = tmp / "target.yaml"
    if kind == "new-nested":
        return tmp / "a" / "b" / "target.yaml"
    if kind in ("regular", "link-to-regular", "under-a-file"):
        path.write_text("old\n", encoding="utf-8")
    if kind == "link-to-regular":
        (tmp / "link.yaml").symlink_to(path)
        return tmp / "link.yaml"
    if kind == "under-a-file":
        return path / "target.yaml"
    if kind == "folder":
        path.mkdir()
    if kind in ("fifo", "link-to-fifo"):
        if not hasattr(os, "mkfifo"):
            return None
        os.mkfifo(tmp / "fifo")
        os.symlink(tmp / "fifo", path) if kind == "link-to-fifo" else os.replace(tmp / "fifo", path)
    if kind == "socket":
        if not hasattr(socket, "AF_UNIX") or len(str(path)) > 100:
            return None
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
    if kind == "dangling-link":
        path.symlink_to(tmp / "nothing")
    return path


def _argv(command: str, target: Path, tmp: Path) -> list[str]:
    if command == "import":
        return ["import", "-q", str(CONFIGS / "gpt2"), "--out", str(target)]
    if command == "calibrate":   # a CSV that is not there: a usable --out ends at it, exit 1
        return ["calibrate", str(tmp / "absent.csv"), "--out", str(target)]
    return ["measure", "device", "--quick", "--on", "nowhere", "--out", str(target)]


def _snapshot(path: Path):
    return os.lstat(path).st_mode if os.path.lexists(path) else None


def check_out(case, tmp: Path) -> None:
    """A special --out is a usage error (exit 2) naming the flag and what the path is, before
    any input is read or any timing runs, and the path is left as it was; a regular file or
    a new path is accepted."""
    from rooflinec.cli.app import run
    command, kind = case
    target = make_target(tmp, kind)
    if target is None:
        return
    before = _snapshot(target)
    out, err = io.StringIO(), io.StringIO()
    code = run(_argv(command, target, tmp), out, err)
    if kind in REFUSED:
        assert code == 2 and f"--out: {target} is {REFUSED[kind]}" in err.getvalue(), err.getvalue()
        assert _snapshot(target) == before, "a refused --out was touched"
    elif command == "import":
        assert code == 0 and os.path.isfile(target), err.getvalue()
        # no --hf-id and no _name_or_path: the spec says it is unnamed (never the folder's name)
        assert yaml.safe_load(target.read_text(encoding="utf-8"))["name"].startswith("GPT2LMHeadModel")
    else:   # accepted, then the missing CSV or the unknown --on ends the command (exit 1 or 2)
        assert code in (1, 2) and "--out" not in err.getvalue(), err.getvalue()
        assert _snapshot(target) == before


CHECKS = {"import": (hostile_configs, check_import), "csv": (hostile_csvs, check_csv),
          "out": (out_targets, check_out)}


def run_fuzz(what: str, count: int, seed_value: int, report=None) -> int:
    """Run up to `count` examples of one check, and say how many ran (fewer where hypothesis
    exhausts the strategy: `out` has 30 cases in all); raises (with hypothesis's smallest
    example) on a failure. `report(line)` hears every 100th case."""
    strategy, check = CHECKS[what]
    ran = [0]

    @seed(seed_value)
    @settings(max_examples=count, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy())
    def fuzz(case):
        with tempfile.TemporaryDirectory() as tmp:
            check(case, Path(tmp))
        ran[0] += 1
        if report is not None and ran[0] % 100 == 0:
            report(f"{what}: {ran[0]} cases, seed {seed_value}: no failure yet")
    fuzz()
    return ran[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=sorted(CHECKS), default="import")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    start = time.perf_counter()
    try:
        ran = run_fuzz(args.what, args.count, args.seed, report=lambda line: print(line, flush=True))
    except Exception as exc:   # noqa: BLE001 - the failure, as hypothesis shrank it
        print(f"{args.what}: FAILED after {time.perf_counter() - start:.0f} s")
        for failure in getattr(exc, "exceptions", [exc]):
            print(f"{type(failure).__name__}: {str(failure)[:2000]}")
            print("\n".join(getattr(failure, "__notes__", [])))
        return 1
    print(f"{args.what}: {ran} cases (of {args.count} asked), seed {args.seed}: no failure "
          f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
