"""Cost stage: what a workload costs on a device (the live calculator's terms)."""
