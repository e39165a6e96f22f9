"""The committed example reports are what the code builds now, byte for byte.

After changing code or specs, regenerate them with:  rooflinec build specs/*.yaml
"""

import glob
import io
import os

import pytest

from rooflinec.cli.app import run

pytestmark = pytest.mark.slow   # builds every shipped study (or opens them in a browser)

STUDIES = sorted(glob.glob("specs/*.yaml"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    assert run(["build", *STUDIES, "--out", str(out)], io.StringIO(), io.StringIO()) == 0
    return out


def committed_files():
    return sorted(p for p in glob.glob("reports/**/*", recursive=True) if os.path.isfile(p))


def test_every_study_has_committed_reports():
    stems = {os.path.splitext(os.path.basename(s))[0] for s in STUDIES}
    have = {os.path.splitext(os.path.basename(p))[0] for p in committed_files()}
    assert stems <= have


@pytest.mark.parametrize("path", committed_files())
def test_committed_report_is_fresh(built, path):
    fresh = built / os.path.relpath(path, "reports")
    assert fresh.exists(), f"{path} is no longer built; delete it"
    with open(path, encoding="utf-8") as fh:
        assert fh.read() == fresh.read_text(encoding="utf-8"), (
            f"{path} is stale: run `rooflinec build specs/*.yaml`")


def test_build_is_deterministic(built, tmp_path):
    assert run(["build", *STUDIES, "--out", str(tmp_path)], io.StringIO(), io.StringIO()) == 0
    for fresh in sorted(p for p in built.rglob("*") if p.is_file()):
        again = tmp_path / fresh.relative_to(built)
        assert again.read_bytes() == fresh.read_bytes(), fresh.name


def report_schema():
    from rooflinec.spec.validate import schema
    return schema("report")


@pytest.mark.parametrize("path", sorted(glob.glob("reports/*.json")))
def test_json_report_follows_its_schema(path):
    import json

    from jsonschema import Draft202012Validator
    with open(path, encoding="utf-8") as fh:
        errors = [e.message for e in Draft202012Validator(report_schema()).iter_errors(json.load(fh))]
    assert errors == []


def test_report_schema_rejects_a_ledger_without_rows():
    import json

    from jsonschema import Draft202012Validator
    with open("reports/gpt2-medium.json", encoding="utf-8") as fh:
        rep = json.load(fh)
    ledger = next(s for s in rep["sections"] if s["kind"] == "ledger")["blocks"][0]["ledgers"][0]
    del ledger["rows"]
    assert not Draft202012Validator(report_schema()).is_valid(rep)
