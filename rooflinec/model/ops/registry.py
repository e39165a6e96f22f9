"""The registry of operator formulas: each kernel module registers its formulas here, and
the package (rooflinec.model.ops) imports every kernel module so importing it registers all."""

from collections.abc import Callable

from rooflinec.model.ir import Cost

FORMULAS: dict[str, Callable[..., Cost]] = {}
UNITS: dict[str, str] = {}


def formula(name: str, unit: str = "matrix"):
    """Register a cost formula under `name`; registering a name twice is a bug."""

    def register(fn):
        if name in FORMULAS:
            raise ValueError(f"formula {name!r} registered twice")
        FORMULAS[name] = fn
        UNITS[name] = unit
        return fn

    return register
