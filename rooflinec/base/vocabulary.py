"""Names the IR and the report share, plain data so the render stage can read them without
importing the IR: where an op's bytes go, what kind of op it is, which unit it runs on."""

TRAFFIC_CLASSES = ("weights", "kv_cache", "activations", "scores")   # a report sums bytes by these
CATEGORIES = ("embedding", "linear", "attention", "attention_matmul", "elementwise",
              "softmax", "norm", "custom")
UNITS = ("matrix", "vector")
