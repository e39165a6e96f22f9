"""Data movement without arithmetic."""

from rooflinec.model.ir import Cost
from rooflinec.model.ops.registry import formula


@formula("gather", unit="vector")
def gather(rows, width, b) -> Cost:
    # E[V,width][ids] -> X[rows,width]: read the chosen rows, write them; no multiply at all
    return Cost.of(0, weights=rows * width * b, activations=rows * width * b)
