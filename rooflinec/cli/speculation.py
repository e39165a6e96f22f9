"""The speculation flags `serve` and `simulate` share, and the table `serve` prints.

`--speculate mtp:k=1,alpha=0.8` (MTP heads) or `--speculate ngram:k=4,alpha=0.6` (prompt
lookup, costed at zero), or `--draft MODEL --draft-k 4 --acceptance 0.7` (a draft model:
a catalog name, a model spec YAML or a config.json). The algebra is serving/speculative.py.
"""

from __future__ import annotations

from rooflinec.base.errors import UsageError, one_line
from rooflinec.base.quantities import gib, seconds, sig
from rooflinec.render import charts
from rooflinec.serving import speculative

EPILOG = """\
--speculate mtp:k=K,alpha=A | ngram:k=K,alpha=A, or --draft MODEL --draft-k K --acceptance A:
every decode step becomes a verification of K + 1 tokens per sequence through the target (the
prefill program's attention over the cache, the GEMMs and LM head on K + 1 tokens) after the
draft's own passes (a draft model's K decode passes; K MTP heads of one mean layer each; n-gram
drafts free), yielding (1 - A^(K+1)) / (1 - A) tokens on average (Leviathan et al. 2023).
"""


def add_arguments(parser) -> None:
    g = parser.add_argument_group("speculative decoding (" + speculative.SOURCE + ")")
    g.add_argument("--speculate", metavar="KIND:k=K,alpha=A",
                   help="mtp:k=1,alpha=0.8 (K MTP heads) or ngram:k=4,alpha=0.6 (prompt-lookup drafts, free)")
    g.add_argument("--draft", metavar="MODEL", help="a draft model: catalog name, model spec YAML or config.json")
    g.add_argument("--draft-k", type=int, metavar="K", help="draft tokens per verification with --draft (default: 4)")
    g.add_argument("--acceptance", type=float, metavar="A",
                   help="per-token acceptance rate of the --draft model's tokens, 0 to 1 (required with --draft)")


def draft_of(args, load_model) -> speculative.Draft | None:
    """The Draft the flags ask for, or None; `load_model` reads MODEL (a UsageError names it)."""
    if args.draft is None:
        for flag, value in (("--draft-k", args.draft_k), ("--acceptance", args.acceptance)):
            if value is not None:
                raise UsageError(f"{flag}: only with --draft MODEL")
        if args.speculate is None:
            return None
        try:
            return speculative.parse(args.speculate)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.speculate is not None:
        raise UsageError("--speculate: give --speculate or --draft, not both")
    if args.acceptance is None:
        raise UsageError("--acceptance: --draft needs the per-token acceptance rate, 0 to 1")
    try:
        model = load_model(args.draft)
    except UsageError as exc:
        raise UsageError(str(exc).replace("MODEL:", "--draft:", 1)) from None
    k = 4 if args.draft_k is None else args.draft_k
    try:
        return speculative.checked(speculative.Draft("model", k, args.acceptance, model),
                                   "--draft-k" if not 1 <= k <= 64 else "--acceptance")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def text(tab: dict) -> str:
    """`serve`'s speculation table: per batch the plain decode bound, the verification and
    draft steps, and tokens/s at alpha = 1 (a bound) and at the given alpha (a prediction)."""
    a, k = tab["alpha"], tab["k"]
    lines = [f"speculative decoding, {tab['draft']}: {tab['tokens_per_step']:.3g} tokens per verification "
             f"expected ((1 - a^(k+1)) / (1 - a), {tab['source']}), {k + 1} at best (alpha = 1)",
             f"  steps are bounds (overlapped rule, datasheet peaks, no collectives); tokens/s at alpha = {a:g} "
             "are a prediction, at alpha = 1 a bound;",
             f"  the draft keeps {gib(tab['draft_weight_bytes'])} of weights and "
             f"{gib(tab['draft_kv_bytes_per_sequence'])} of KV cache per sequence on each device",
             f"verify vs plain decode at context {tab['context']:,} (compute/memory: the step's compute time over "
             "its memory time, >= 1 compute-bound):"]
    rows = [("batch", "plain tok/s", "plain c/m", "verify", "verify c/m", "draft", "bound tok/s",
             f"at alpha {a:g}", "speedup")]
    for r in tab["rows"]:
        rows.append((str(r["batch"]), sig(r["plain_tokens_per_s"]), f"{r['plain_compute_over_memory']:.3g}",
                     seconds(r["verify_step_s"]), f"{r['verify_compute_over_memory']:.3g}", seconds(r["draft_s"]),
                     sig(r["bound_tokens_per_s"]), sig(r["predicted_tokens_per_s"]), f"{r['predicted_speedup']:.3g}x"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for key, what in (("stops_paying_from", f"at alpha = {a:g} (predicted)"),
                      ("stops_paying_from_best_case", "at alpha = 1 (best case)")):
        b = tab[key]
        lines.append(f"{what}: speculation " + (f"stops paying from batch {b:,}" if b is not None
                                                else f"pays at every batch searched (to {tab['search_limit']:,})")
                     + f"; the largest batch that fits with the draft is {tab['max_batch']:,}")
    return "\n".join(lines) + "\n"


def chart(model_name: str, tab: dict) -> str:
    """`serve --out`'s chart with a draft: the speedup over plain decoding against batch, at the
    draft's alpha (a prediction) and at alpha = 1 (a bound), where it stops paying ringed; faint
    past the largest batch that fits with the draft."""
    batches = [r["batch"] for r in tab["rows"]]
    fits = [b <= tab["max_batch"] for b in batches]
    plain = [r["plain_tokens_per_s"] for r in tab["rows"]]
    lines = [{"label": f"at alpha {tab['alpha']:g} (prediction)", "x": batches, "fits": fits,
              "y": [r["predicted_tokens_per_s"] / p for r, p in zip(tab["rows"], plain)]},
             {"label": "at alpha = 1 (bound)", "x": batches, "fits": fits, "style": "--",
              "y": [r["bound_tokens_per_s"] / p for r, p in zip(tab["rows"], plain)]}]
    what = {"model": "a draft model", "mtp": "MTP heads", "ngram": "n-gram drafts"}.get(tab["kind"], tab["kind"])
    title = f"{model_name}: speculation's speedup, {what}, k = {tab['k']}, context {tab['context']:,}"
    return charts.draw({"kind": "speedup", "lines": lines, "stops_paying_from": tab["stops_paying_from"],
                        "title": one_line(title), "xlabel": "batch B", "ylabel": "tokens/s over plain decoding"})
