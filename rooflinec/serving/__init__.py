"""Serving stage: measured kernels and runs against the cost model (per-op profiles, efficiency fits, intervals)."""
