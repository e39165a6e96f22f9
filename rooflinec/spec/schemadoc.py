"""Generate the spec-key reference (docs/spec-reference.md) from the JSON Schemas.

    python -m rooflinec.spec.schemadoc > docs/spec-reference.md
"""

from __future__ import annotations

import sys

from rooflinec.spec.validate import MAX_DIMENSION, schema

KINDS = (("hardware", "Hardware specs (`hardware/*.yaml` beside a study, or the catalog's `rooflinec/spec/catalog/hardware/`)"),
         ("model", "Model specs (`models/*.yaml` beside a study, or the catalog's `rooflinec/spec/catalog/models/`)"),
         ("study", "Study specs (`specs/*.yaml`)"))


def _resolve(node: dict, root: dict) -> dict:
    ref = node.get("$ref")
    if ref and ref.startswith("#/$defs/"):
        target = root["$defs"][ref.split("/")[-1]]
        return {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _type(node: dict) -> str:
    if "x-quantity" in node:
        return f"quantity ({node['x-quantity'].replace('_', ' ')})"
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    t = node.get("type", "")
    if t == "array":
        return "list"
    if t == "object":
        return "mapping"
    return " or ".join(t) if isinstance(t, list) else t


def _rows(node: dict, root: dict, prefix: str, required: set):
    for key, child in node.get("properties", {}).items():
        child = _resolve(child, root)
        path = f"{prefix}{key}"
        req = "yes" if key in required else ""
        desc = child.get("description", "").replace("|", "\\|")
        yield f"| `{path}` | {_type(child)} | {req} | {desc} |"
        if child.get("type") == "object" and "properties" in child:
            yield from _rows(child, root, path + ".", set(child.get("required", [])))
        items = child.get("items")
        if isinstance(items, dict):
            items = _resolve(items, root)
            if items.get("type") == "object":
                yield from _rows(items, root, path + "[].", set(items.get("required", [])))


def reference() -> str:
    out = ["# Spec reference", "",
           "Generated from the JSON Schemas in `rooflinec/spec/schemas/` by "
           "`python -m rooflinec.spec.schemadoc > docs/spec-reference.md`; do not edit by hand.",
           "Quantities are plain numbers or strings with a unit: `1555 GB/s`, `312 TFLOP/s`, "
           "`40 GiB`, `192 KiB` (GB = 10^9 bytes, GiB = 2^30), and `312e12` reads as a number.",
           f"Every integer of a model spec (widths, heads, layers, experts, vocabulary, context, a layer "
           f"kind's sizes) is at most {MAX_DIMENSION:,} (2^24).", ""]
    for name, title in KINDS:
        root = schema(name)
        out += [f"## {title}", "", root.get("description", ""), "",
                "| key | type | required | meaning |", "|---|---|---|---|",
                *_rows(root, root, "", set(root.get("required", []))), ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(reference())
