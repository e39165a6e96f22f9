"""What a planned configuration costs: dollars per million tokens from a $/GPU-hour table, and
energy per token predicted at the device's TDP (board power x predicted time).

Why here: the planner's figures are tokens/s per GPU; money and energy are that rate against a
price or a power. Prices come from the catalog's table (`catalog/prices/default.yaml`: only
figures a public source states, each with its source and date), a YAML file in the same format,
or `--price device=USD` flags, later ones winning. A device with no price gets no cost: nothing
is guessed.

$ per million output tokens = price per GPU-hour / (output tokens/s per GPU x 3600 s/h) x 10^6.
Input tokens are charged the same GPU-hour on their own (prompt tokens/s per GPU = output
tokens/s per GPU x isl / osl): the two figures split one bill two ways and do not add.
Energy per output token = board power (TDP) x predicted GPU-seconds per token: a prediction,
not a bound. The board never draws more than its TDP, but the time is predicted, not bounded
from below: an upper bound on energy would need a lower bound on throughput. An
estimate from measured power would need a measured board power a public source states for the
device under inference; no catalog device has one, so the hardware schema has no such field
and no estimate is printed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rooflinec.base import yamlio
from rooflinec.base.errors import SpecError, UsageError
from rooflinec.spec import catalog

SECONDS_PER_HOUR = 3600
MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    usd_per_gpu_hour: float
    source: str
    date: str = ""


def default_file() -> str:
    return catalog.path("prices", "default")


def load(file: str) -> dict:
    """{device key: Price} from a price file; every problem located."""
    doc = yamlio.load(file)
    d, problems, out = doc.data, [], {}
    table = d.get("prices") if isinstance(d, dict) else None
    if not isinstance(table, dict):
        raise SpecError([doc.problem((), "expected a mapping with 'prices': {device: {usd_per_gpu_hour, source, date}}")])
    for key, entry in table.items():
        value = entry.get("usd_per_gpu_hour") if isinstance(entry, dict) else None
        if not _price_ok(value):
            problems.append(doc.problem(("prices", key), "expected usd_per_gpu_hour: a positive number"))
        elif not isinstance(entry.get("source"), str) or not entry["source"].strip():
            problems.append(doc.problem(("prices", key), "expected source: where the price is stated"))
        else:
            out[str(key)] = Price(float(value), entry["source"], str(entry.get("date", "")))
    if problems:
        raise SpecError(problems)
    return out


def _price_ok(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 < v < 1e6


def parse_flags(values: list[str]) -> dict:
    """`--price h100-sxm=2.0` flags as {device: Price}."""
    out = {}
    for v in values or ():
        name, _, num = v.partition("=")
        try:
            price = float(num)
        except ValueError:
            price = None
        if not name or not _price_ok(price):
            raise UsageError(f"--price: '{v}': expected DEVICE=USD_PER_GPU_HOUR, e.g. h100-sxm=2.0")
        out[name] = Price(price, "--price on the command line")
    return out


def per_million(usd_per_gpu_hour, tokens_per_s_per_gpu):
    """$ per million tokens at a rate per GPU: price / (rate x 3600) x 10^6."""
    return usd_per_gpu_hour / (tokens_per_s_per_gpu * SECONDS_PER_HOUR) * MILLION


def energy_per_token_j(board_power_w, tokens_per_s_per_gpu):
    """Joules per token at the board's power limit (TDP) x the GPU-seconds per token: with a
    predicted rate, a prediction (not a bound)."""
    return board_power_w / tokens_per_s_per_gpu
