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


def shown(file: str) -> str | None:
    """`file` as the package names it (`catalog/hardware/a100-40gb.yaml`) when the catalog
    ships it, so a report never names where the package happens to be installed; else None."""
    root, target = os.path.realpath(ROOT), os.path.realpath(file)
    if os.path.commonpath([root, target]) != root:
        return None
    return "/".join(["catalog", *os.path.relpath(target, root).split(os.sep)])
