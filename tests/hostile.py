"""A bounded mutation fuzzer over the shipped specs, with absurd and hostile values.

Each case copies the spec tree, keeps one or two analyses of a shipped study, applies one
to three mutations drawn from HOSTILE (huge and tiny numbers, NaN, fractional bytes,
non-ASCII digits, lists and ranges past every budget, piecewise and exploding formulas,
long names) to the study, a device or the model, or a deployment (DEPLOYMENT: tp, pp, ep,
attention_dp, moe_tp, replicas, storage formats per tensor class, on a model of the catalog,
MoE ones included), and builds it with the CLI in-process. The outcome must be exit 0 with
a JSON report that holds only finite numbers, no negative quantity (`negative`) and keeps
the report schema, or exit 1 with located problems only; a traceback, a case over 10 s of
CPU time or a file written outside --out is a failure.

    python tests/hostile.py --count 5000 --seed 1     # prints the counts, exits 1 on a failure
    python tests/hostile.py --count 400 --seed 2 --case 154,380 --keep DIR   # those cases, files kept

The digest printed is a hash of every case's outcome and output (the report, or the located
problems), the case folder's path taken out: a run repeated on a loaded machine must print
the same one (budgets count sizes, never seconds).

tests/test_hostile.py runs a few cases (ROOFLINEC_HOSTILE_EXAMPLES sets how many).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import io
import json
import random
import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import yaml

SPECS = Path(__file__).resolve().parent.parent / "specs"
CATALOG = SPECS.parent / "rooflinec" / "spec" / "catalog"   # shipped models/ and hardware/
LOCATED = re.compile(r"^.+:\d+:\d+: .+: .+$")   # file:line:col: path: message
SLOW_S = 10.0

HOSTILE = [0, -1, 1, 0.5, 1.5, 2 ** 53, 2 ** 53 + 1, 10 ** 63, 2 ** 64, 1e-300, 1e300, float("nan"),
           float("inf"), "1e-300 B/s", "1e-300 FLOP/s", "0.5 B", "1 B", "1e300 GB/s",
           "\uff14\uff10 GiB", "\u0664\u0660 GB/s", "x" * 5000, [], [10 ** 15], [1, 2 ** 53],
           {"from": 1, "to": 10 ** 7, "step": 1}, {"from": 1, "to": 10 ** 6, "geometric": 1.0000001},
           {"from": 1, "to": 10 ** 4, "step": 1}, {"from": 1, "to": 2 ** 53, "geometric": 2},
           {"from": 1, "to": 100, "geometric": float("nan")}, list(range(1, 3000))]
LARGE = [2 ** 30, 2 ** 40, [2 ** 40], [1, 2 ** 45], {"from": 1, "to": 2 ** 50, "geometric": 4}, 3,
         [1, 3, 7], "20 ms", "1 PB/s", "1 GFLOP/s", "1 KiB", "1 PB"]   # valid, and far from the usual
FORMULAS = ["ceil(B/128)*d_model", "max(4096, 2048*B)", "min(4096, B)*d_model",
            "max(1, floor(B/128))*d_model", "B**(-16)*d_model + d_model", "(B+S+M+1)**40",
            "((((M**16)**16)**16)**16)", "M**16*M", "(B+S+1)**16", "ceil((B+S+1)**16/128)",
            "max((B+S+1)**16, (M+3)**16)", "d_model**16*V**16*d_ff**16", "2**4000*M", "0*M",
            "M/(B-B)", "2*M*d_model", "floor(M/128)"]


# deployments, on models of the catalog (MoE ones too): degrees that divide, that do not, that
# leave a pipeline stage without layers, and formats per tensor class (the routed experts' too)
MODELS = ["deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b",
          "llama-3.1-70b", "llama-3.1-8b", "gemma-2-9b", "qwen2.5-7b"]
DEGREES = [1, 1, 2, 4, 8, 8, 16, 3, 7, 31, 61, 62, 64, 128, 256, 0, -1, 2 ** 40, 1.5, "8"]
AXES = ["tp", "pp", "ep", "attention_dp", "moe_tp", "replicas", "dp"]
FORMATS = ["bf16", "fp8", "int4", "mxfp4", "nvfp4", "fp32", "int8", "fp6", 1]
CLASSES = ["weights", "kv_cache", "activations", "experts"]
# keys whose numbers are signed by what they mean (an error, a difference from a published
# figure, a residual's quantile); every other number in a report is a quantity, never negative
SIGNED = re.compile(r"error|signed|difference|residual|intervals$|^log")


def negative(node, path=()) -> list[str]:
    """The paths of negative quantities in a JSON document (at most 5)."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if not SIGNED.search(str(key)):
                found += negative(value, path + (str(key),))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += negative(value, path + (str(i),))
    elif isinstance(node, (int, float)) and not isinstance(node, bool) and node < 0:
        found.append(f"{'.'.join(path)} = {node}")
    return found[:5]


def paths(node, path=()):
    """Every path to a value inside `node` (tests/test_fuzz.py mutates along them too)."""
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from paths(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from paths(value, path + (i,))


def _set(data, path, value) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def _get(data, path):
    for part in path:
        data = data[part]
    return data


def _mutate(rng: random.Random, doc: dict) -> None:
    """One value replaced; numbers and lists of numbers, where the absurd bites, most often."""
    found = [p for p in paths(doc) if p]
    numeric = [p for p in found if isinstance(_get(doc, p), (int, float, list))
               and not isinstance(_get(doc, p), bool)]
    pool = numeric if numeric and rng.random() < 0.8 else found
    values = LARGE if rng.random() < 0.3 else HOSTILE + LARGE   # some cases meant to build
    if pool:
        _set(doc, rng.choice(pool), copy.deepcopy(rng.choice(values)))


def _operator(rng: random.Random) -> dict:
    return {"name": "fuzzed_op", "unit": rng.choice(["matrix", "vector"]),
            "flops": rng.choice(FORMULAS), "bytes": f"2*d_model + {rng.choice(FORMULAS)}"}


def _deploy(rng: random.Random, study: dict) -> None:
    """A deployment of a catalog model: most often degrees that may divide it (powers of two,
    moe_tp derived), else a few hostile degrees; sometimes storage formats."""
    if rng.random() < 0.6:
        study["model"] = rng.choice(MODELS)
    if rng.random() < 0.6:
        study["parallel"] = {axis: rng.choice([1, 2, 4, 8]) for axis in ("tp", "attention_dp", "ep")}
        study["parallel"]["pp"] = rng.choice([1, 1, 2, 4])
    else:
        study["parallel"] = {axis: copy.deepcopy(rng.choice(DEGREES))
                             for axis in rng.sample(AXES, rng.randint(1, 3))}
    if rng.random() < 0.4:
        study["quantization"] = {c: rng.choice(FORMATS) for c in rng.sample(CLASSES, rng.randint(1, 2))}


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:   # a mutated name too long for a file name
        return False


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10 ** 9)


def make_case(rng: random.Random, root: Path) -> Path:
    """Write one mutated study (and its mutated model or device) under `root`; its path."""
    for folder in ("models", "hardware"):
        if not (root / folder).exists():
            shutil.copytree(CATALOG / folder, root / folder)
    study = _load(rng.choice(sorted(SPECS.glob("*.yaml"))))
    keys = list(study["analyses"])
    kept = rng.sample(keys, min(len(keys), rng.choice([1, 1, 2])))
    study["analyses"] = {k: study["analyses"][k] for k in kept}
    if "sweep" in study["analyses"]:
        study["analyses"]["sweep"]["devices"] = [study["devices"][0]]
    study["devices"] = study["devices"][:2]
    for _ in range(rng.randint(1, 3)):
        target = rng.choice(["study", "device", "model", "operator", "deployment"])
        if target == "deployment":
            _deploy(rng, study)
        elif target == "study":
            _mutate(rng, study)
        elif target == "device":
            name = study["devices"][0] if isinstance(study["devices"], list) and study["devices"] else None
            if isinstance(name, str) and _exists(root / "hardware" / f"{name}.yaml"):
                device = _load(CATALOG / "hardware" / f"{name}.yaml")
                _mutate(rng, device)
                (root / "hardware" / f"{name}.yaml").write_text(_dump(device), encoding="utf-8")
        elif isinstance(study.get("model"), str) and _exists(CATALOG / "models" / f"{study['model']}.yaml"):
            model = _load(CATALOG / "models" / f"{study['model']}.yaml")
            if target == "model":
                _mutate(rng, model)
            else:
                model["operators"] = [_operator(rng)]
            (root / "models" / f"{study['model']}.yaml").write_text(_dump(model), encoding="utf-8")
    path = root / "fuzzed.yaml"
    path.write_text(_dump(study), encoding="utf-8")
    return path


def _reject_constant(name: str):
    raise ValueError(f"the report holds {name}")


def _files(root: Path) -> dict:
    """Every file under `root` but the --out folder, with its size and modification time."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
            if p.is_file() and "out" not in p.relative_to(root).parts[:1]}


def digest(text: str, case: Path) -> str:
    """A hash of one case's output with its folder's path taken out."""
    return hashlib.sha256(text.replace(str(case), "CASE").encode("utf-8", "surrogatepass")).hexdigest()


def run_case(study: Path, out: Path) -> tuple[str, str, str]:
    """(outcome, detail, the output's digest); outcome 'ok' | 'located' | 'traceback' |
    'unlocated' | 'infinite' | 'negative' | 'invalid' | 'outside'."""
    outcome, detail, output = _build(study, out)
    return outcome, detail, digest(f"{outcome}\n{output}", study.parent)


def _build(study: Path, out: Path) -> tuple[str, str, str]:
    from rooflinec.cli.app import run as cli_run
    stdout, stderr = io.StringIO(), io.StringIO()
    before = _files(study.parent)
    try:
        code = cli_run(["build", str(study), "--out", str(out), "--format", "json"], stdout, stderr)
    except BaseException:   # noqa: BLE001 - a traceback is what the fuzzer looks for
        return "traceback", traceback.format_exc(), ""
    if _files(study.parent) != before:
        return "outside", f"files outside --out changed: {set(_files(study.parent)) ^ set(before)}", ""
    if code == 1:
        lines = stderr.getvalue().splitlines()
        bad = [line for line in lines if not LOCATED.match(line)]
        return ("located", "", stderr.getvalue()) if lines and not bad else (
            "unlocated", stderr.getvalue()[:2000], "")
    if code != 0:
        return "unlocated", f"exit {code}: {stderr.getvalue()[:2000]}", ""
    text = (out / f"{study.stem}.json").read_text(encoding="utf-8")
    try:
        rep = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        return "infinite", str(exc), ""
    if negative(rep):
        return "negative", "; ".join(negative(rep)), ""
    from jsonschema import Draft202012Validator
    from rooflinec.spec.validate import schema
    errors = [e.message[:200] for e in Draft202012Validator(schema("report")).iter_errors(rep)]
    return ("invalid", "; ".join(errors[:3]), "") if errors else ("ok", "", text)


FAILURES = ("traceback", "unlocated", "infinite", "negative", "invalid", "outside", "slow")


def fuzz(count: int, seed: int, report=None, only: set | None = None, keep: Path | None = None) -> dict:
    """Run `count` cases (or only the cases numbered in `only`), each folder kept under `keep`;
    the tally, the slowest case, the mean CPU seconds, the digest and the failures (at most 20)."""
    rng = random.Random(seed)
    tally = dict.fromkeys(("ok", "located") + FAILURES, 0)
    failures, slowest, spent, hashes = [], 0.0, 0.0, hashlib.sha256()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(count):
            case = Path(tmp) / f"case{i}"
            case.mkdir()
            study = make_case(rng, case)   # every case is drawn, so case i is the same case
            if only is not None and i not in only:
                shutil.rmtree(case)
                continue
            start = time.process_time()   # CPU seconds: a loaded machine does not trip the hang guard
            outcome, detail, output = run_case(study, case / "out")
            took = time.process_time() - start
            slowest, spent = max(slowest, took), spent + took
            hashes.update(f"{i} {output}\n".encode())
            tally[outcome] += 1
            if took > SLOW_S:
                tally["slow"] += 1
            if outcome not in ("ok", "located") or took > SLOW_S:
                if report is not None:   # as it happens: a long run's failures are known early
                    report(f"case {i}: {outcome}, {took:.1f} s CPU: {detail[:300]!r}")
                if len(failures) < 20:
                    failures.append({"case": i, "outcome": outcome, "seconds": round(took, 1),
                                     "study": study.read_text(encoding="utf-8")[:3000], "detail": detail})
            if keep is not None:
                shutil.copytree(case, keep / case.name, dirs_exist_ok=True)
            shutil.rmtree(case)
            if report is not None and (i + 1) % 100 == 0:
                report(f"{i + 1} cases: {tally}, slowest {slowest:.1f} s, mean {spent / (i + 1):.3f} s")
    ran = len(only & set(range(count))) if only is not None else count
    return {"count": count, "seed": seed, "tally": tally, "slowest_s": round(slowest, 2),
            "mean_cpu_s": round(spent / max(ran, 1), 4), "digest": hashes.hexdigest(),
            "failures": failures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--case", type=lambda text: {int(n) for n in text.split(",")},
                        help="run only these cases (e.g. 766,2293) of the --count drawn")
    parser.add_argument("--keep", type=Path, help="copy each case's folder (spec tree, out/) here")
    args = parser.parse_args()
    result = fuzz(args.count, args.seed, report=lambda line: print(line, flush=True),
                  only=args.case, keep=args.keep)
    print(json.dumps(result, indent=1))
    return 1 if sum(result["tally"][k] for k in FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())
