"""`--weights` on the command line: one storage format for every weight, or one per weight
class (`experts=mxfp4,attention=bf16`), as a study's `quantization` keys. `serve` and
`simulate` share it; the formats are the study schema's `storage` enum."""

from __future__ import annotations

from rooflinec.base.errors import UsageError
from rooflinec.spec.validate import schema

# how GEMMs run against the weights' format, in words for every command's --help (the rule's one
# owner is model/quant.py: gemm_dtype, which cost/deployment.py's Deployment.gemm_dtype applies)
GEMM_RULE = ("GEMMs at the weights' format where the device lists a tensor peak for it, else weight-only: "
             "dequantised into bf16 GEMMs, stated")
# the command line's names for the weight classes -> the study's quantization keys
WEIGHT_CLASSES = {"attention": "weights", "experts": "experts"}
HELP = ("weights' storage format, e.g. fp8, int4, nvfp4, fp8-block128; or one per class: "
        "experts=mxfp4,attention=bf16 (attention: the attention and dense weights, embeddings, "
        "router and LM head; experts: the routed experts' matrices; default: --dtype where given, else bf16)")


def formats() -> list[str]:
    return schema("study")["$defs"]["storage"]["enum"]


def check_format(value: str, flag: str) -> str:
    """`value` if it is a storage format, else a usage error naming the accepted ones."""
    if value not in formats():
        raise UsageError(f"{flag}: unknown format '{value}'; choose from {', '.join(formats())}")
    return value


def weights(text: str | None, flag: str = "--weights") -> dict:
    """`text` as quantization keys: {"weights": f} for a plain format (every weight), else
    {"weights": .., "experts": ..} for the classes it names; {} for None."""
    if text is None:
        return {}
    if "=" not in text:
        return {"weights": check_format(text.strip(), flag)}
    out: dict = {}
    for part in text.split(","):
        name, sep, value = (s.strip() for s in part.partition("="))
        if not sep:
            raise UsageError(f"{flag}: '{part.strip()}' is not CLASS=FORMAT; write e.g. "
                             "experts=mxfp4,attention=bf16 or one format for every weight")
        if name not in WEIGHT_CLASSES:
            raise UsageError(f"{flag}: unknown weight class '{name}'; choose from {', '.join(WEIGHT_CLASSES)}")
        if WEIGHT_CLASSES[name] in out:
            raise UsageError(f"{flag}: class '{name}' given twice")
        out[WEIGHT_CLASSES[name]] = check_format(value, f"{flag} {name}")
    return out
