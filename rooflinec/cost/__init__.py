"""Cost: what a program costs on a device (the roofline, collectives, caches, the live calculator's terms)."""
