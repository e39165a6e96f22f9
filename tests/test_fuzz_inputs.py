"""The adversary's fuzzers over the inputs that are not specs (tests/fuzz_inputs.py): a few
examples each in the default run (ROOFLINEC_FUZZ_EXAMPLES sets how many), more under the
`slow` marker; `python tests/fuzz_inputs.py --what W --count 5000 --seed S` for a long run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_inputs  # noqa: E402 - a sibling module of the tests, not a package

EXAMPLES = int(os.environ.get("ROOFLINEC_FUZZ_EXAMPLES", "8"))
SEED = int(os.environ.get("ROOFLINEC_FUZZ_SEED", "31"))


def _need_rows(what: str) -> None:
    if what == "csv" and not fuzz_inputs.MEASURED.is_file():
        pytest.skip("../shared/measured/serving-visible.csv absent: the csv fuzzer mutates real rows, read in place")


@pytest.mark.slow
@pytest.mark.parametrize("what", sorted(fuzz_inputs.CHECKS))
def test_fuzzed_inputs_end_located_or_sane(what):
    _need_rows(what)
    fuzz_inputs.run_fuzz(what, EXAMPLES, SEED)


@pytest.mark.slow
@pytest.mark.parametrize("what", sorted(fuzz_inputs.CHECKS))
def test_more_fuzzed_inputs_end_located_or_sane(what):
    _need_rows(what)
    fuzz_inputs.run_fuzz(what, 10 * EXAMPLES, SEED + 1)
