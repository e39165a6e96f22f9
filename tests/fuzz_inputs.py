"""Hostile inputs other than specs, as hypothesis strategies and the checks they must pass:
config.json files for `import` (every architecture's fields, hostile keys and strings), a
measurements CSV for `validate` and `calibrate` (both layouts: the v1 columns and v2's
deployment columns, attention_dp, moe_tp, moe_ep, replicas, disaggregated pools), `serve`'s
flags (deployments, --attention-dp --ep --moe-tp, --speculate, --draft), and special files
as `--out`.

    python tests/fuzz_inputs.py --what import --count 5000 --seed 1   # exits 1 on a failure

The digest printed is a hash of every case's output in order (the written spec, the JSON,
the located problems; temporary paths taken out): a run repeated on a loaded machine must
print the same one.

tests/test_fuzz_inputs.py runs a few examples of each (ROOFLINEC_FUZZ_EXAMPLES sets how many;
its `slow` tests run more). A check fails on a traceback, an unlocated error, NaN or infinity in
a JSON output, a negative quantity (tests/hostile.py: `negative`), a case over SLOW_S, or
(import) a spec whose re-read model is not the one the config's mapped fields give.
"""

from __future__ import annotations

import argparse
import hashlib
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

from hostile import negative

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "hf_configs"
REFUSED: set = set()   # configs refused as published (nothing to compare a hostile copy with): none today
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
    return text


# --- a measurements CSV for validate and calibrate -------------------------------------------

MEASURED = ROOT.parent / "shared" / "measured" / "serving-visible.csv"   # real rows, read in place (the csv check needs it)
MEASURED_V2 = MEASURED.with_name("serving-v2-visible.csv")   # the v2 layout: deployment columns
CELLS = ["", "0", "-1", "1", "3", "5", "7", "1e-320", "5e-324", "1e300", "1e308", "nan", "inf",
         "-inf", "0x10", "1_000", "\uff14", "9" * 40, "2.5", "1e-6", "604800000", "6e8",
         "bf16", "fp8", "int4", "nvfp4", "h100-sxm", "a100-40gb", "tpu-v4", "../x", "\n", "=cmd()",
         "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "deepseek-ai/DeepSeek-V3",
         # v2 layout cells: modes, formats per tensor class, degrees that divide or do not
         "agg", "disagg", "fp8-block", "mxfp4", "2", "4", "8", "16", "32", "64", "256", "61", "1024"]


def _rows(path: Path = MEASURED) -> tuple[list[str], list[list[str]]]:
    import csv
    with open(path, encoding="utf-8", newline="") as fh:
        lines = list(csv.reader(fh))
    return lines[0], lines[1:]


DEPLOYMENT_COLUMNS = {"mode", "gemm_weights", "moe_weights", "tp", "pp", "attention_dp", "moe_tp", "moe_ep",
                      "replicas", "batch_per_rank", "prefill_workers", "prefill_tp", "prefill_attention_dp",
                      "prefill_moe_ep", "decode_workers", "decode_tp", "decode_attention_dp", "decode_moe_ep",
                      "decode_batch", "prefill_batch", "layout_fixed", "duplicate_of"}


@st.composite
def hostile_csvs(draw) -> str:
    """A few real rows of either layout (some repeated under new ids, as one configuration
    measured often), cells replaced by hostile values (v2: most often a deployment column),
    and sometimes a column named twice or missing."""
    import csv
    v2 = MEASURED_V2.is_file() and draw(st.booleans())
    header, rows = _rows(MEASURED_V2 if v2 else MEASURED)
    picked = [list(rows[i]) for i in draw(st.lists(st.integers(0, len(rows) - 1), min_size=1, max_size=6))]
    picked += [list(picked[0]) for _ in range(draw(st.integers(0, 40)))]
    for n, row in enumerate(picked):
        row[header.index("row_id")] = f"r{n}"
    deployment = [i for i, name in enumerate(header) if name in DEPLOYMENT_COLUMNS]
    for _ in range(draw(st.integers(0, 4))):
        row = draw(st.sampled_from(picked))
        col = draw(st.sampled_from(deployment) if deployment and draw(st.booleans())
                   else st.integers(0, len(header) - 1))
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


def check_csv(text: str, tmp: Path) -> str:
    """validate: exit 0 with only finite numbers in its JSON, none a negative quantity, or
    exit 1 with located lines only; calibrate: the same, its YAML without .inf or .nan and
    no negative quantity; both within SLOW_S."""
    from rooflinec.cli.app import run
    runs = tmp / "runs.csv"
    runs.write_text(text, encoding="utf-8", errors="surrogatepass")
    outputs = []
    for argv in (["validate", "-q", str(runs), "--out", str(tmp / "v"), "--format", "json"],
                 ["calibrate", str(runs), "--out", str(tmp / "cal.yaml")]):
        out, err = io.StringIO(), io.StringIO()
        start = time.process_time()   # a hang guard in CPU seconds: a loaded machine does not trip it
        code = run(argv, out, err)
        assert time.process_time() - start < SLOW_S, f"{argv[0]} took over {SLOW_S} s"
        if code == 1:
            lines = err.getvalue().splitlines()
            assert lines and all(LOCATED.match(line) for line in lines), err.getvalue()[:2000]
            outputs.append(err.getvalue())
            continue
        assert code == 0, err.getvalue()[:2000]
        if argv[0] == "validate":
            written = (tmp / "v" / "serving.json").read_text(encoding="utf-8")
            assert not negative(json.loads(written, parse_constant=_reject_constant)), negative(json.loads(written))
        else:
            written = (tmp / "cal.yaml").read_text(encoding="utf-8")
            assert not re.search(r"\.(inf|nan)\b", written, re.I), written[:2000]
            assert not negative(yaml.safe_load(written)), negative(yaml.safe_load(written))
        outputs.append(written)
    return "\n".join(outputs)


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
    return f"{code} {err.getvalue()}"


# --- serve's flags: deployments, speculation, drafts -----------------------------------------

SERVE_MODELS = ["deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b",
                "llama-3.1-70b", "llama-3.1-8b", "qwen2.5-7b", "gemma-2-9b", "gpt2"]
DEGREE = st.sampled_from(["1", "2", "4", "8", "8", "16", "3", "7", "32", "64", "256", "0", "-1",
                          "1e6", "2.5", "99999999999999999", ""])
BATCHES = st.sampled_from(["1", "1,8,64", "1000000", "1,1000000", "0", "-1", "4097", "1e6", "", "64,1"])
SPECULATE = st.sampled_from(["mtp:k=1,alpha=0.8", "ngram:k=4,alpha=0.6", "mtp:k=64,alpha=1",
                             "mtp:k=65,alpha=0.5", "mtp:k=0,alpha=0.5", "ngram:k=2,alpha=0",
                             "ngram:k=2,alpha=1e-320", "mtp:k=1,alpha=nan", "mtp:k=1,alpha=-1",
                             "eagle:k=1,alpha=0.5", "mtp", "mtp:k=1", "mtp:alpha=0.5,k=2", ""])
FLAG_VALUES = {"--tp": st.one_of(DEGREE, st.sampled_from(["1,2,4,8", "2,3", "8,8"])),
               "--attention-dp": DEGREE, "--ep": DEGREE, "--moe-tp": DEGREE, "--batch": BATCHES,
               "--context": st.sampled_from(["1", "4096", "131072", "1000000", "0", "2048"]),
               "--prompt": st.sampled_from(["1", "2048", "4095", "100000", "0"]),
               "--weights": st.sampled_from(["fp8", "int4", "nvfp4", "mxfp4", "bf16", "fp6"]),
               "--kv-cache": st.sampled_from(["fp8", "bf16", "int4"]),
               "--speculate": SPECULATE, "--draft": st.sampled_from(["llama-3.2-1b", "qwen1.5-0.5b", "gpt2",
                                                                     "deepseek-v3", "nothing"]),
               "--draft-k": st.sampled_from(["1", "4", "64", "65", "0"]),
               "--acceptance": st.sampled_from(["0.5", "0", "1", "1.5", "nan", "5e-324"])}


@st.composite
def serve_flags(draw) -> list[str]:
    """`serve MODEL --device D --json` and a few of its flags, values valid or hostile."""
    argv = ["serve", draw(st.sampled_from(SERVE_MODELS)), "--json", "--device",
            draw(st.sampled_from(["h100-sxm", "b200", "h200-sxm", "a100-40gb", "h100-sxm,b200", "l4"]))]
    for flag in draw(st.lists(st.sampled_from(sorted(FLAG_VALUES)), max_size=4, unique=True)):
        argv += [flag, draw(FLAG_VALUES[flag])]
    return argv


FLAG = re.compile(r"^--[a-z-]+: .+$")   # an error at the flag: --draft: cannot price ...
# none of --device x --tp evaluated: each (device, tp) with its reason
CONFIGURATION = re.compile(r"^(no configuration could be evaluated:|\S+ at tp \d+: not evaluated: .+)$")


def check_serve(argv: list[str], tmp: Path) -> str:
    """Exit 0 with JSON holding only finite numbers and no negative quantity; exit 2 with a
    usage error naming a flag or the model; exit 1 with lines located in a file, at a flag or
    at a (device, tp) only; within SLOW_S."""
    from rooflinec.cli.app import run
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()
    code = run(argv, out, err)
    assert time.process_time() - start < SLOW_S, f"serve took over {SLOW_S} s"
    lines = err.getvalue().splitlines()
    if code == 2:
        assert lines and re.match(r"rooflinec serve: error: ", lines[-1]), err.getvalue()[:2000]
        return f"2 {lines[-1]}"
    if code == 1:   # located in a spec file, or at the flag whose value it cannot serve
        assert lines and all(LOCATED.match(line) or FLAG.match(line) or CONFIGURATION.match(line)
                             for line in lines), err.getvalue()[:2000]
        assert "generators" not in err.getvalue(), err.getvalue()[:2000]   # sympy's words, not ours
        return f"1 {err.getvalue()}"
    assert code == 0, err.getvalue()[:2000]
    data = json.loads(out.getvalue(), parse_constant=_reject_constant)
    assert not negative(data), negative(data)
    return out.getvalue()


CHECKS = {"import": (hostile_configs, check_import), "csv": (hostile_csvs, check_csv),
          "out": (out_targets, check_out), "serve": (serve_flags, check_serve)}


def run_fuzz(what: str, count: int, seed_value: int, report=None) -> dict:
    """Run up to `count` examples of one check: how many ran (fewer where hypothesis exhausts
    the strategy: `out` has 30 cases in all), their mean CPU seconds and the digest of their
    outputs; raises (with hypothesis's smallest example) on a failure. `report(line)` hears
    every 100th case."""
    strategy, check = CHECKS[what]
    ran, spent, hashes = [0], [0.0], hashlib.sha256()

    @seed(seed_value)
    @settings(max_examples=count, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy())
    def fuzz(case):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.process_time()
            output = check(case, Path(tmp)) or ""
            spent[0] += time.process_time() - start
            hashes.update(f"{ran[0]} {output.replace(tmp, 'TMP')}\n".encode("utf-8", "surrogatepass"))
        ran[0] += 1
        if report is not None and ran[0] % 100 == 0:
            report(f"{what}: {ran[0]} cases, seed {seed_value}: no failure yet, "
                   f"mean {spent[0] / ran[0]:.3f} s CPU")
    fuzz()
    return {"ran": ran[0], "mean_cpu_s": round(spent[0] / max(ran[0], 1), 4), "digest": hashes.hexdigest()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=sorted(CHECKS), default="import")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    start = time.perf_counter()
    try:
        result = run_fuzz(args.what, args.count, args.seed, report=lambda line: print(line, flush=True))
    except Exception as exc:   # noqa: BLE001 - the failure, as hypothesis shrank it
        print(f"{args.what}: FAILED after {time.perf_counter() - start:.0f} s")
        for failure in getattr(exc, "exceptions", [exc]):
            print(f"{type(failure).__name__}: {str(failure)[:2000]}")
            print("\n".join(getattr(failure, "__notes__", [])))
        return 1
    print(f"{args.what}: {result['ran']} cases (of {args.count} asked), seed {args.seed}: no failure "
          f"({time.perf_counter() - start:.0f} s, mean {result['mean_cpu_s']} s CPU per case); "
          f"digest {result['digest']}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
