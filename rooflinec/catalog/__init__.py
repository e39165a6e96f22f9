"""The installed catalog: hardware and model specs shipped inside the package.

A study names a device or model; a file of that name beside the study (under `hardware/` or
`models/`) wins, otherwise the catalog's entry is used. Listing the catalog (`rooflinec devices`,
`rooflinec models`) reads these same files.
"""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.abspath(__file__))
FOLDERS = ("hardware", "models")


def path(folder: str, name: str) -> str | None:
    """The catalog file for `name` under `folder` (hardware or models), if one is shipped."""
    target = os.path.join(ROOT, folder, name + ".yaml")
    return target if os.path.isfile(target) else None


def names(folder: str) -> list[str]:
    """Every entry shipped under `folder`, sorted."""
    try:
        return sorted(f[:-5] for f in os.listdir(os.path.join(ROOT, folder)) if f.endswith(".yaml"))
    except OSError:
        return []
