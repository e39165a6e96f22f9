"""The three answers to "is it compute-bound?", each named once. Every section that says
where something turns compute-bound names the rule it used and points to the other.
Plain data: the workbench computes by these rules, the templates name them."""

OP = "op bound"
STEP_OVERLAPPED = "step bound, overlapped"
STEP_PER_OP = "step bound, per-op sum"

RULES = {
    OP: "one op is compute-bound where its intensity reaches its unit's ridge, peak / bandwidth",
    STEP_OVERLAPPED: "a whole step takes max(Σ FLOPs / peak, Σ bytes / bandwidth), every op's "
                     "compute overlapping every op's memory traffic, the least time any schedule "
                     "reaches; compute-bound where the compute term is the larger",
    STEP_PER_OP: "a whole step takes Σ over ops of max(FLOPs / peak, bytes / bandwidth), ops one "
                 "after another; compute-bound where compute-bound ops hold at least half the time",
}
