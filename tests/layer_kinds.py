"""What the layer-kind tests share (a sibling module of the tests, not a package): the catalog's
folders, a model spec written to a temporary file and loaded, and a program's ops by name."""

from __future__ import annotations

import textwrap
from pathlib import Path

from rooflinec.model.lower import Conventions, lower
from rooflinec.spec.load import load_model

CATALOG = Path(__file__).resolve().parent.parent / "rooflinec" / "spec" / "catalog"
HARDWARE = CATALOG / "hardware"
MODELS = CATALOG / "models"


def spec_model(tmp_path, text: str, file: str = "model.yaml"):
    """The model a spec's text describes, loaded from a file under `tmp_path`."""
    path = tmp_path / file
    path.write_text(textwrap.dedent(text))
    return load_model(str(path))


def ops_by_name(model, phase: str, conventions: Conventions | None = None) -> dict:
    """The lowered program's ops, by name."""
    return {o.name: o for o in lower(model, phase, conventions or Conventions()).ops}
