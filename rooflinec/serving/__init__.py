"""Serving simulation: engines' schedulers declared as data, a step-by-step replay of a benchmark over the roofline."""
