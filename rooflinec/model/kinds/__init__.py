"""Layer kinds: what one kind of decoder layer owns, and the registry that finds them.

A decoder layer is two sublayers, each of a kind: a *mixer* (full attention, windowed
attention, latent attention, ...) and a *feed-forward* (dense MLP, mixture of experts). Each
kind is one module of this package defining a `Kind` subclass; the registry imports every
module here and keeps each subclass it finds (no central list), so adding a kind is adding
its module. A kind owns, for its layers: the spec section it reads (`key`, `schema`,
`from_spec`), its symbols and their meanings (`descriptions`, `values`), its parameters
(`params`), the cache one sequence keeps (`cache_token_bytes`, `cache_cap`,
`cache_state_bytes`), its ops in decode and prefill (`ops`, or `core` inside its family's
projections) and what a report states about it (`stated`).

Which layers are of which kind is data: `layers(model, first, stop)` counts a kind's layers
in closed form from the spec (the attention pattern, MoE's dense-first layers and layer
frequency); each slot's default kind takes the layers no other kind claims.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import sympy as sp

from rooflinec.model import symbols as sym

SLOTS = ("mixer", "ffn")
ZERO = sp.Integer(0)


class Kind:
    name = ""           # how a pattern and the registry name it
    slot = "mixer"      # "mixer" (token mixing: attention and its successors) or "ffn"
    order = 50          # where its ops and parameters sit among its slot's kinds
    default = False     # the slot's kind for every layer no other kind claims
    bulk = False        # when mixed, its ops repeat L - (the other kinds' layers), written in L
    prefix = ""         # its ops' name prefix when the model mixes it with other kinds of its slot
    family = ""         # the kind whose projections it shares (windowed attention: "full")
    pattern = False     # named in `attention.pattern`
    aliases: tuple = () # other pattern names it answers to
    key = ""            # the model spec's section holding its configuration ("" for none)
    schema: dict | None = None   # that section's JSON Schema fragment
    descriptions: dict = {}      # symbol -> what it means
    hf: dict = {}                # its section from a Hugging Face config: field -> config key

    # -- configuration and layers -------------------------------------------------------
    def from_spec(self, section):
        """The configuration a model carries for this kind (its spec section, frozen)."""
        return tuple(sorted(section.items())) if isinstance(section, dict) else section

    def config(self, model):
        """This kind's configuration in `model` (None where the model has none)."""
        if not self.key:
            return None
        found = getattr(model, self.key, None)
        return found if found is not None else dict(getattr(model, "blocks", ()) or ()).get(self.key)

    def layers(self, model, first: int, stop: int) -> int:
        """Layers first .. stop - 1 of this kind (a default kind is counted by `count`)."""
        if self.pattern:
            return pattern_layers(model, self.name, first, stop)
        return max(0, stop - first) if self.config(model) is not None else 0

    def values(self, model) -> dict:
        """Symbol -> the number `model` gives it, where the model has layers of this kind."""
        return {}

    # -- what the layers hold and do --------------------------------------------------------
    def params(self, model, repeat, mixed: bool) -> list:
        """Parameter components of its layers (rooflinec.model.component), repeated `repeat`."""
        return []

    def cache_token_bytes(self, model) -> sp.Expr:
        """Bytes one layer keeps per cached token (0: nothing that grows with the context)."""
        return ZERO

    def cache_cap(self, model) -> int | None:
        """At most this many tokens kept (a window), or None for the whole context."""
        return None

    def cache_tokens(self, model) -> sp.Expr:
        """Tokens a layer keeps at context S, symbolically (S, or min(S, W) under a window)."""
        return sym.S

    def cache_state_bytes(self, model) -> sp.Expr:
        """Bytes one layer keeps per sequence whatever the context (a recurrent state)."""
        return ZERO

    # -- tensor parallelism (rooflinec.cost.parallel) ------------------------------------------
    def tp_widths(self, model) -> tuple:
        """(what, count) of its own heads a tensor-parallel degree must divide."""
        return ()

    def shards(self, model, tp: int) -> dict:
        """Its own symbol -> what one of tp devices holds of it (its heads split like n_q)."""
        return {}

    def core(self, model, phase: str, conv, repeat, prefix: str) -> list:
        """Its own ops inside its family's (attention's score steps); `ops` for a whole sublayer."""
        return []

    def ops(self, model, phase: str, conv, repeat, members) -> list:
        """The sublayer's ops: `members` are (kind, repeat, prefix) of this family's kinds."""
        return [op for kind, r, p in members for op in kind.core(model, phase, conv, r, p)]

    def output(self, prefix: str) -> str:
        """The op whose output the residual add folds into."""
        return ""

    def stated(self, model, phase: str, conv) -> tuple:
        return ()

    def dtypes(self, model) -> tuple:
        """(unit, dtype, what) for ops of its own that compute in a format of their own, whatever
        the study's dtype (DSA's indexer: fp8): a study warns, located, of a device lacking it."""
        return ()


_REGISTRY: dict[str, Kind] | None = None


def registry() -> dict[str, Kind]:
    """name -> kind, every Kind subclass defined in this package's modules, in (slot, order)."""
    global _REGISTRY
    if _REGISTRY is None:
        found = []
        for info in pkgutil.iter_modules(__path__):
            module = importlib.import_module(f"{__name__}.{info.name}")
            found += [c() for _, c in inspect.getmembers(module, inspect.isclass)
                      if issubclass(c, Kind) and c.__module__ == module.__name__ and c.name]
        found.sort(key=lambda k: (SLOTS.index(k.slot), k.order, k.name))
        _REGISTRY = {k.name: k for k in found}
    return _REGISTRY


def register(kind: Kind) -> Kind:
    """Add a kind defined outside this package (a test's toy kind); returns it."""
    items = sorted({**registry(), kind.name: kind}.items(), key=lambda i: (SLOTS.index(i[1].slot), i[1].order, i[0]))
    _REGISTRY.clear()
    _REGISTRY.update(items)
    return kind


def unregister(name: str) -> None:
    registry().pop(name, None)


def of_slot(slot: str) -> list[Kind]:
    return [k for k in registry().values() if k.slot == slot]


def pattern_names() -> list[str]:
    return [n for k in registry().values() if k.pattern for n in (k.name, *k.aliases)]


def pattern_layers(model, name: str, first: int, stop: int) -> int:
    """Layers first .. stop - 1 whose entry of the repeating attention pattern is `name`, in
    closed form per pattern entry: a billion layers cost as little as two."""
    pattern = getattr(model, "pattern", ()) or ()
    period = len(pattern)
    return sum(_from(stop, r, period) - _from(first, r, period) for r, kind in enumerate(pattern) if kind == name)


def _from(n: int, r: int, period: int) -> int:
    """Layers i in 0 .. n - 1 with i % period == r."""
    return max(0, (n - r + period - 1) // period)


def counts(model, slot: str, first: int = 0, stop: int | None = None) -> list[tuple[Kind, int]]:
    """(kind, layers among first .. stop - 1) for each kind of `slot` the model has there."""
    stop = model.n_layers if stop is None else stop
    kinds = of_slot(slot)
    claimed = {k.name: k.layers(model, first, stop) for k in kinds if not k.default}
    rest = max(0, stop - first) - sum(claimed.values())
    if rest < 0:
        raise ValueError(f"{model.name}: the {slot} kinds claim more layers than layers {first}..{stop - 1}")
    return [(k, rest if k.default else claimed[k.name]) for k in kinds if (rest if k.default else claimed[k.name])]


def repeats(model, slot: str) -> list[tuple[Kind, sp.Expr, str]]:
    """(kind, repeat, prefix) per kind of `slot` the model has: a kind on every layer repeats L
    under its plain names; mixed, the bulk kind repeats L - (the others), the others their
    number of layers, under their prefix."""
    present = counts(model, slot)
    if len(present) == 1:
        return [(present[0][0], sym.L, "")]
    out = []
    for kind, n in present:
        others = sum(m for k, m in present if k is not kind)
        out.append((kind, sym.L - others if kind.bulk else sp.Integer(n), kind.prefix))
    return out


def families(model, slot: str) -> list[tuple[Kind, sp.Expr, list]]:
    """(family's kind, its layers' repeat, members) per family of `slot`: kinds sharing one
    family (windowed and full attention) share its projections and parameters."""
    present = counts(model, slot)
    members = repeats(model, slot)
    by_family: dict[str, list] = {}
    for kind, r, p in members:
        by_family.setdefault(kind.family or kind.name, []).append((kind, r, p))
    out = []
    for name, group in by_family.items():
        n = sum(m for k, m in present if (k.family or k.name) == name)
        base = registry()[name]
        if n == model.n_layers:
            r = sym.L
        elif base.bulk or any(k.bulk for k, _, _ in group):
            r = sym.L - (model.n_layers - n)
        else:
            r = sp.Integer(n)
        out.append((base, r, group))
    return out


def kinds_of(model) -> list[Kind]:
    """Every kind the model's layers use, mixers first."""
    return [k for slot in SLOTS for k, _ in counts(model, slot)]


def _symbol_order(model) -> list[Kind]:
    """Kinds in the order their symbols are listed: feed-forward kinds first, then mixers."""
    used = kinds_of(model)
    return [k for k in used if k.slot == "ffn"] + [k for k in used if k.slot == "mixer"]


def values(model) -> dict:
    """The symbols of the model's kinds and their values."""
    out = {}
    for kind in _symbol_order(model):
        out.update(kind.values(model))
    return out


def descriptions() -> dict:
    """What every kind's symbols mean (feed-forward kinds first)."""
    out = {}
    for kind in [k for k in registry().values() if k.slot == "ffn"] + of_slot("mixer"):
        out.update(kind.descriptions)
    return out


def cache_groups(model, first: int = 0, stop: int | None = None) -> list[tuple[sp.Expr, list[tuple[Kind, int]]]]:
    """(bytes per token per layer, [(kind, layers)]) for each distinct per-token cache the
    model's mixer kinds keep among layers first .. stop - 1 (full and windowed share one)."""
    groups: dict = {}
    for kind, n in counts(model, "mixer", first, stop):
        per = kind.cache_token_bytes(model)
        if per != 0:
            groups.setdefault(per, []).append((kind, n))
    return list(groups.items())


def cache_per_token(model) -> sp.Expr:
    """Bytes one token keeps in the layer kinds' caches, every layer at the full context: a
    group of layers covering the model is written in L."""
    total = ZERO
    for per, members in cache_groups(model):
        n = sum(m for _, m in members)
        total += (sym.L if n == model.n_layers else sp.Integer(n)) * per
    return total


def cache_state(model, first: int = 0, stop: int | None = None) -> sp.Expr:
    """Bytes one sequence keeps whatever its context (recurrent states) in layers first .. stop - 1."""
    return sp.Add(*(n * kind.cache_state_bytes(model) for kind, n in counts(model, "mixer", first, stop)))
