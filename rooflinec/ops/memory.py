"""Data movement without arithmetic."""

from rooflinec.ir import Cost
from rooflinec.ops import formula


@formula("gather", unit="vector")
def gather(rows, width, b) -> Cost:
    # E[V,width][ids] -> X[rows,width]: read the chosen rows, write them; no multiply at all
    return Cost.of(0, weights=rows * width * b, activations=rows * width * b)
