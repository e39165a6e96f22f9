"""Serving stage: the serving simulator (engines' schedulers as data, a step-by-step replay of a
benchmark over the roofline), measured runs and kernels against the cost model (per-op profiles,
efficiency fits, intervals)."""
