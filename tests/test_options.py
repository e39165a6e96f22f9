"""Study options: the schema's defaults are the code's (one source of truth)."""

from dataclasses import asdict, fields

import pytest

from rooflinec.spec import options
from rooflinec.analyses import ANALYSES
from rooflinec.analyses.published import CHIPS
from rooflinec.model.lower import PHASES, Conventions
from rooflinec.model.passes import DEFAULT_VARIANT, VARIANTS


def test_variant_defaults_are_the_default_variant():
    found = 0
    for key in ANALYSES:
        spec = options.analysis_keys(key).get("variant")
        if spec is not None:
            found += 1
            assert spec["default"] in (DEFAULT_VARIANT, [DEFAULT_VARIANT]), key
            assert DEFAULT_VARIANT in spec["description"], key   # the description says the same
    assert found == 6   # derivations, decode_view, sweep, serving, parallel_view, architectures


def test_convention_defaults_are_the_dataclass_defaults():
    assert options.convention_defaults() == asdict(Conventions())


def test_ledger_defaults_cover_every_phase_and_variant():
    ledger = options.parse("ledger", {"workloads": [{"batch": 1, "context": 8}]})
    assert ledger.phases == list(PHASES) and ledger.variants == list(VARIANTS)
    assert ledger.scopes == ["model"] and ledger.devices is None


def test_study_dtype_default_and_published_chips():
    assert options.study_default("dtype") == "bf16"
    rows = options.analysis_keys("published_efficiency")["rows"]["items"]["properties"]
    assert rows["chips"]["default"] == CHIPS


def test_written_values_win_and_defaults_are_fresh_copies():
    a = options.parse("decode_view", {"contexts": [8], "variant": "fused"})
    assert (a.variant, a.batch, a.contexts) == ("fused", [1], [8])
    a.batch.append(2)   # a default list belongs to one options object only
    assert options.parse("decode_view", {"contexts": [8]}).batch == [1]


@pytest.mark.parametrize("key", sorted(ANALYSES))
def test_every_schema_key_is_an_option(key):
    assert [f.name for f in fields(options.option_type(key))] == list(options.analysis_keys(key))
