"""Per-request lower bounds for `simulate --bound`: what no engine's schedule can beat.

The replay at efficiency 1 and overhead 0 is the engine's own schedule (its batching, its
chunking, its queue), which another engine can beat: its TTFT is a queue under that schedule,
not a bound. A request's least times, whatever the schedule:

- TTFT >= its prompt's prefill alone on the deployment at the bound (`routed_bound.prefill`,
  serve's TTFT bound: the step model at the datasheet peaks, the overlapped rule, the
  collectives' least time, nothing else in the step); with prefix caching on, a cached prompt
  may skip all but its last token, so the bound is that token's step alone (one sequence's
  decode at the prompt's context, `routed_bound.decode`);
- every later token: a decode step holding at least this request at a context past its
  prompt, at least one sequence's decode step at context ISL + 1 (serve's step bound; windowed
  layers by the step model's own `attend`); with speculation that step can emit at most
  `tokens_per_step` tokens, so a token's share is that step over them;
- TPOT >= that per-token share, and so the mean ITL gap of a request; without speculation
  every gap too (each token is its own step), with it the tokens of one step may arrive
  together, a gap of 0, so the ITL quantiles are not bounded (None); E2E >= TTFT's bound +
  (OSL - 1) x the share.
"""

from __future__ import annotations

import numpy as np

from rooflinec.serving import metrics, routed_bound
from rooflinec.serving import serving_model as sm
from rooflinec.spec.load import DTYPE_BYTES

NOT_A_BOUND = "the replay at efficiency 1 under this engine's schedule: not a bound"


def per_request(model, isl: np.ndarray, cached: bool, tokens_per_step: float = 1.0):
    """(TTFT bound, least seconds per later token) per request of prompt `isl` (the module)."""
    bpe = DTYPE_BYTES[sm.ACTIVATION_DTYPE]
    ttft, token = {}, {}
    for n in map(int, np.unique(isl)):
        ttft[n] = (routed_bound.decode(model, 1, n, bpe) if cached
                   else routed_bound.prefill(model, n, bpe))["time_s"]
        token[n] = routed_bound.decode(model, 1, n + 1, bpe)["time_s"] / tokens_per_step
    return (np.array([ttft[int(n)] for n in isl]), np.array([token[int(n)] for n in isl]))


def summary(res, model, tokens_per_step: float = 1.0) -> dict:
    """The bound's TTFT, TPOT, ITL and E2E statistics over the replay's measured requests."""
    m = res.measured
    isl, osl = res.isl[m], res.osl[m]
    cached = bool(res.policy.prefix_caching and res.workload.reused)   # a reused prompt may hit, whatever the eviction
    ttft, token = per_request(model, isl, cached, tokens_per_step)
    long = osl > 1
    itl = metrics.stats(token[long], osl[long] - 1)
    if tokens_per_step > 1:        # a step's tokens may arrive together: only the mean is bounded
        itl = {k: (v if k == "mean" else None) for k, v in itl.items()}
    return {"ttft_s": metrics.stats(ttft), "tpot_s": metrics.stats(token[long]), "itl_s": itl,
            "e2e_s": metrics.stats(ttft + (osl - 1) * token)}
