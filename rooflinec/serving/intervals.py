"""Prediction intervals on log(predicted / measured): the calibrated rows' residuals in,
quantiles out, two ways.

- Split conformal, for a row drawn like the calibration rows: given n residuals and a level
  1 - a, the interval of a prediction y is [y e^-hi, y e^-lo] where lo and hi are the
  floor((n + 1) a/2)-th and ceil((n + 1)(1 - a/2))-th smallest residuals; for exchangeable
  rows each tail holds at most a/2 of new rows (Vovk, Gammerman and Shafer, "Algorithmic
  Learning in a Random World", 2005; Lei, G'Sell, Rinaldo, Tibshirani and Wasserman, JASA
  2018, split conformal).
- Two-level, for a row of a new group (a model, tp or engine no calibrated row has): a
  group's rows share one error, so a new group's rows are not exchangeable with the
  calibrated rows, and split conformal quantiles of them cover a new group's rows far less
  than their level (the visible serving rows: 58.7% of TPOT at 80%). The residual is a group
  shift plus the row's own noise, r = mu_g + e (the one-way random-effects model); the shift of a
  new group is a normal draw like the calibrated groups' ones, its predictive law Student's
  t with m - 1 degrees of freedom over m groups' medians (the prediction interval of one more
  normal draw; the random-effects form of Higgins, Thompson and Spiegelhalter, "A
  re-evaluation of random-effects meta-analysis", JRSS A 2009); the noise is the groups' own
  rows about their medians, with no law assumed; the interval is the convolution's quantiles
  (`group_band`).
  The shift and the noise are not independent in the data: a group's median is its shift
  plus the median of its rows' noise, so the medians' spread s_b^2 estimates tau^2 + v (v the
  mean sampling variance of a group's median), and a band that takes s_b^2 for the shifts'
  variance and then adds the rows' noise counts the noise twice, too wide where the noise
  dominates (exchangeable synthetic groups, 2 groups of 15 rows, shifts' sd 0.05, noise a
  centred exponential of sd 1, 300 draws at seed 0: 90% inside the 80% band). The shifts'
  variance is therefore the method-of-moments random-effects estimate tau^2 = max(s_b^2 - v,
  0) (DerSimonian and Laird, "Meta-analysis in clinical trials", Controlled Clinical Trials
  1986), v from each group's rows without a law assumed (`median_se`, McKean and Schrader,
  "A comparison of methods for studentizing the sample median", Communications in Statistics
  - Simulation and Computation 1984), and the new shift's scale about the medians' mean c is
  sqrt(tau^2 + s_b^2 / m) (the new draw's variance plus c's own, which s_b^2 / m estimates
  whatever part of it is noise): the same synthetic case 88%, 4 groups with shifts' sd 0.1
  and noise 0.5 80% (84% before). Where v is 0 the band is the plain t prediction interval.
  The noise keeps its own shape: a step's bound caps how far a prediction can exceed its
  measurement, so the residuals' two sides differ, and the band's ends are the convolution's
  own 10% and 90% points, each side its own quantile, not a width mirrored about c.
  Distribution-free alternatives over groups (Dunn, Wasserman and Ramdas,
  "Distribution-free prediction sets for two-layer hierarchical models", JASA 2022; Barber,
  Candes, Ramdas and Tibshirani's jackknife+, Annals of Statistics 2021, applied to groups)
  give a finite 80% interval only from ceil((m + 1) 0.8) <= m, 4 groups: the visible rows
  hold 3 models and 3 engines (2 each when one is held out to measure the coverage), so the
  normal shift is the assumption that buys an interval, and Student's t its small-sample
  price. Separate shift laws per kind of novelty are kept (a new tp's shifts spread a quarter
  of a new engine's on the visible rows' TPOT); pooling the kinds' groups would widen a new
  tp's band to cover engines.

Per kind of hold-out (`band_of`, `coverage`, `block`): a calibration issues the pooled split
conformal band for a deployment calibrated in every respect and a kind's two-level band for a
deployment new in that respect (`band_for` picks); the coverage of each is measured by nested
leave-one-group-out, a held-out group's residuals never in its own band.
Who groups the rows (per op class, per serving group) decides; this module imports nothing
from rooflinec.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import cache

import numpy as np


EPS = 1e-9


class TooFewRows(ValueError):
    """Fewer calibration rows than the level needs (n + 1 > 2 / a rows for each tail)."""


def quantiles(residuals, level: float = 0.8) -> tuple[float, float]:
    """(lo, hi): the conformal quantiles of the log residuals for a two-sided `level` interval."""
    r = np.sort(np.asarray(residuals, float))
    n, tail = len(r), (1 - level) / 2
    # EPS: (1 - 0.8) / 2 is 0.09999999999999998 in binary; 20 of it is 2, not 1.9999...
    k_lo, k_hi = math.floor((n + 1) * tail + EPS), math.ceil((n + 1) * (1 - tail) - EPS)
    if k_lo < 1 or k_hi > n:
        raise TooFewRows(f"{n} residuals cannot give a {level:.0%} interval; need at least "
                         f"{math.ceil(1 / tail - EPS) - 1}")
    return float(r[k_lo - 1]), float(r[k_hi - 1])


def interval(predicted, lo: float, hi: float, floor=0.0) -> tuple[np.ndarray, np.ndarray]:
    """The measured values a prediction's interval allows: log(pred / measured) in [lo, hi],
    and never below `floor`, the same step's lower bound where the caller has it (no run is
    faster than its bound, so the band's part below it would allow the impossible)."""
    p, f = np.asarray(predicted, float), np.asarray(floor, float)
    return np.maximum(p * np.exp(-hi), f), np.maximum(p * np.exp(-lo), f)


def covered(predicted, measured, lo: float, hi: float) -> np.ndarray:
    r = np.log(np.asarray(predicted, float) / np.asarray(measured, float))
    return (r >= lo) & (r <= hi)


# --- a new group: a shift shared by its rows, then each row's own noise ----------------------

class TooFewGroups(ValueError):
    """Fewer than two groups: the spread of group shifts cannot be estimated."""


def t_cdf(x, df: int) -> np.ndarray:
    """Student's t distribution function at integer `df` >= 1, in closed form (Abramowitz and
    Stegun, "Handbook of Mathematical Functions", 1964, 26.7.3 and 26.7.4: A(t|v) = P(|T| <= t)
    as a finite series in theta = atan(t / sqrt(v)))."""
    if df < 1 or int(df) != df:
        raise ValueError(f"t_cdf: df {df} is not a positive integer")
    t = np.asarray(x, float)
    th = np.arctan(np.abs(t) / math.sqrt(df))
    s, c = np.sin(th), np.cos(th)
    term, total = (np.ones_like(th), np.ones_like(th)) if df % 2 == 0 else (c, c if df > 1 else 0 * c)
    for j in range(2 if df % 2 == 0 else 3, df - 1, 2):   # each term (j - 1)/j cos^2 theta the last
        term = term * (j - 1) / j * c * c
        total = total + term
    a = s * total if df % 2 == 0 else 2 / math.pi * (th + (s * total if df > 1 else 0))
    return 0.5 + np.sign(t) * a / 2


@cache
def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t at integer `df`, by bisection on `t_cdf`."""
    return float(_invert(lambda x: t_cdf(x, df), np.array([p]), -1e6, 1e6)[0])


def _invert(cdf, p: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """x with cdf(x) = p for each p, by bisection in [lo, hi] (every p at once, a fixed count
    of halvings: the bracket shrinks to 2^-80 of its width, past a double's precision)."""
    lo, hi = np.full(len(p), float(lo)), np.full(len(p), float(hi))
    for _ in range(80):
        mid = (lo + hi) / 2
        below = cdf(mid) < p
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


Z95 = statistics.NormalDist().inv_cdf(0.975)     # the normal's 97.5% point, 1.95996


def median_se(x) -> float:
    """The standard error of the median of `x`, no law assumed (McKean and Schrader 1984): the
    order statistics c and n - c + 1 with c = round((n + 1)/2 - z sqrt(n/4)), z = 1.95996, bound
    the median's 95% sign-test interval (the quantiles 1/2 -+ z / (2 sqrt n)), so their distance
    over 2z estimates 1 / (2 sqrt(n) f(median)), the median's asymptotic standard deviation
    (Laplace). One row gives 0: nothing is known of its spread, and 0 takes nothing off the
    shifts' spread (`group_band`), the wide side."""
    x = np.sort(np.asarray(x, float))
    n = len(x)
    if n == 0:
        raise ValueError("median_se: no values")
    c = max(1, round((n + 1) / 2 - Z95 * math.sqrt(n / 4)))
    return float((x[n - c] - x[c - 1]) / (2 * Z95))


@dataclass(frozen=True)
class GroupBand:
    """The interval of a row of a new group, and what it is made of."""
    lo: float
    hi: float
    center: float          # mean of the groups' medians
    shift_scale: float     # sqrt(tau^2 + s_b^2 / m): the scale of the new group's shift about `center`
    groups: int            # m, the groups it is drawn from (t with m - 1 degrees of freedom)
    between_sd: float = 0.0   # tau: the shifts' spread, net of the medians' own sampling noise


def group_band(groups, level: float = 0.8) -> GroupBand:
    """The `level` interval of log(predicted / measured) for a row of a group none of `groups`
    (one array of log residuals each) is. The two-level law: a row's residual is its group's
    shift plus its own noise, r = mu_g + e. The shift of a new group is drawn like the others'
    (normal): with m_g each group's median, c their mean, s_b their standard deviation over m
    groups and v the mean of the medians' squared standard errors (`median_se`), the shifts'
    variance is tau^2 = max(s_b^2 - v, 0) (DerSimonian and Laird 1986: the medians' spread holds
    their own noise, which the rows' noise adds back below) and (mu_new - c) / sqrt(tau^2 +
    s_b^2 / m) is taken as Student's t with m - 1 degrees of freedom (exact where v is 0: the
    prediction interval of one more normal draw; Higgins, Thompson and Spiegelhalter, JRSS A
    2009, for the random-effects form). The noise is the groups' own rows about their medians,
    each group weighing the same (a new group is one more group, not one more row), taken as it
    is, with no distribution assumed. The new row's distribution function is their convolution,
    F(x) = sum_g 1/m mean_i T_{m-1}((x - c - (r_gi - m_g)) / scale), and the interval its
    (1 - level)/2 and (1 + level)/2 quantiles. Two groups give one degree of freedom (a Cauchy
    shift), wide as the evidence is thin; a distribution-free level over groups (Dunn,
    Wasserman and Ramdas, "Distribution-free prediction sets for two-layer hierarchical
    models", JASA 2022) needs ceil((m + 1) level) <= m groups, 4 at 80%, more than the visible
    rows have of a model or an engine. Where every median is equal (s_b = 0) the shift is c
    alone and the interval is the split conformal one of c + noise."""
    groups = [np.asarray(g, float)[np.isfinite(g)] for g in groups]
    groups = [g for g in groups if len(g)]
    m = len(groups)
    if m < 2:
        raise TooFewGroups(f"{m} group{'s' * (m != 1)} cannot give the spread of a new group's shift; need 2")
    medians = np.array([np.median(g) for g in groups])
    center, spread = float(medians.mean()), float(medians.std(ddof=1))
    noise = [g - med for g, med in zip(groups, medians)]
    between = max(spread * spread - float(np.mean([median_se(g) ** 2 for g in groups])), 0.0)
    scale = math.sqrt(between + spread * spread / m)
    tail = (1 - level) / 2
    if scale == 0:
        lo, hi = quantiles(center + np.concatenate(noise), level)
        return GroupBand(lo, hi, center, 0.0, m)
    weights = np.concatenate([np.full(len(e), 1 / (m * len(e))) for e in noise])
    shifts = center + np.concatenate(noise)

    def cdf(x):
        return t_cdf((x[:, None] - shifts[None, :]) / scale, m - 1) @ weights
    # F lies between T((x - max shift) / scale) and T((x - min shift) / scale): the bracket
    reach = t_quantile(1 - tail, m - 1) * scale
    lo, hi = _invert(cdf, np.array([tail, 1 - tail]), shifts.min() - reach, shifts.max() + reach)
    return GroupBand(float(lo), float(hi), center, scale, m, math.sqrt(between))

# --- per kind of hold-out: the bands a calibration issues and their coverage ---------------------
# `ho`: the left-out groups, each {"by": model | tp | engine, "held_out": its value, "residuals":
# [n, 2] log(predicted / measured) of TPOT and TTFT from a fit that never saw the group}

HOLDOUTS = ("model", "tp", "engine")
WHATS = ("tpot", "ttft")
LEVEL = 0.8          # the prediction intervals' level


def band_of(ho: list[dict], level: float = LEVEL) -> dict | None:
    """The intervals' log-residual quantiles (log predicted / measured) for TPOT and TTFT.
    - pooled (`tpot`, `ttft`): split conformal on every left-out row's residual (each row
      predicted by a fit that never saw its model, its tp or its engine): the band of a
      deployment whose model, tp and engine were all calibrated, its errors drawn like the
      calibrated rows' ones (`coverage`'s exchangeable figure).
    - per kind under `by` (a deployment whose model, tp or engine is new): the two-level band
      of a new group (`group_band`) from that kind's held-out groups, each group's
      residuals its own: the shift a new group's rows share is drawn like the calibrated
      groups' shifts, Student's t over their medians, beside its rows' own noise.
    None where too few rows."""
    if not ho:
        return None
    try:
        band = {"level": level, **_quantiles(np.concatenate([h["residuals"] for h in ho]), level)}
    except TooFewRows:
        return None
    band["by"] = {}
    for by in HOLDOUTS:
        got = _new_group([h["residuals"] for h in ho if h["by"] == by], level)
        if got:
            band["by"][by] = got
    return band


def _quantiles(res: np.ndarray, level: float) -> dict:
    return {w: list(quantiles(_finite(res[:, i]), level)) for i, w in enumerate(WHATS)}


def _new_group(parts: list[np.ndarray], level: float) -> dict | None:
    """{tpot: [lo, hi], ttft: [lo, hi], groups, center, shift_scale} of a new group from
    `parts` (one residual array [n, 2] per group); None where fewer than two groups."""
    out = {}
    for i, w in enumerate(WHATS):
        try:
            g = group_band([p[:, i] for p in parts], level)
        except TooFewGroups:
            return None
        out[w] = [g.lo, g.hi]
        out[f"{w}_center"], out[f"{w}_shift_scale"] = g.center, g.shift_scale
    return {**out, "groups": g.groups}


def coverage(ho: list[dict], level: float = LEVEL) -> dict:
    """The share of left-out rows inside their interval, per kind of hold-out and over all
    ('all' pools the kinds' rows), nested: a held-out group's residuals never shape its own
    interval.
    - `tpot`, `ttft` (new group): a held-out group's rows against the two-level band
      (`group_band`) of the other groups of its kind (the same model, tp or engine
      never on both sides); `groups`: the same per held-out group; `group_mean`: its mean
      over the held-out groups, each weighing the same (the law's own target: a new group is
      one draw, however many rows it has; the row share weighs a kind's largest group most).
    - `split_conformal`: the same rows against the split conformal band of the other groups'
      rows pooled (the band before the group shift was modelled: it ignores that a group's
      rows share their error).
    - `exchangeable`: each left-out row against its kind's split conformal band from every
      other left-out row of that kind (its own group's other rows included): the conformal
      guarantee where a deployment's errors are drawn like the calibrated rows' ones, the
      pooled band `band_of` issues.
    The other groups' residuals are each from a fit that never saw that group's rows but did
    see the held-out group's: the held-out rows reach their band only through those fits."""
    out, every = {}, {"new": {w: [] for w in WHATS}, "split": {w: [] for w in WHATS}}
    for by in HOLDOUTS:
        hs = [h for h in ho if h["by"] == by]
        hits = {"new": {w: [] for w in WHATS}, "split": {w: [] for w in WHATS}}
        groups = {}
        for h in hs:
            others = [o["residuals"] for o in hs if o is not h]
            if not others:
                continue
            band = _new_group(others, level)
            for i, w in enumerate(WHATS):
                mine = _finite(h["residuals"][:, i])
                if band:
                    inside = ((mine >= band[w][0]) & (mine <= band[w][1])).tolist()
                    hits["new"][w].extend(inside)
                    groups.setdefault(str(h.get("held_out", len(groups))), {})[w] = _share(inside)
                try:
                    lo, hi = quantiles(_finite(np.concatenate(others)[:, i]), level)
                except TooFewRows:
                    continue
                hits["split"][w].extend(((mine >= lo) & (mine <= hi)).tolist())
        out[by] = {w: _share(hits["new"][w]) for w in WHATS} | {"rows": len(hits["new"]["tpot"])} \
            | {"groups": groups, "group_mean": {w: _share([g[w] for g in groups.values() if g.get(w) is not None])
                                                for w in WHATS},
               "split_conformal": {w: _share(hits["split"][w]) for w in WHATS},
               "exchangeable": _jackknife([h["residuals"] for h in hs], level)}
        for kind in every:
            for w in WHATS:
                every[kind][w].extend(hits[kind][w])
    out["all"] = {w: _share(every["new"][w]) for w in WHATS} | {"rows": len(every["new"]["tpot"])} \
        | {"split_conformal": {w: _share(every["split"][w]) for w in WHATS},
           "exchangeable": _jackknife([h["residuals"] for h in ho], level)}
    return {"level": level, **out}


def _jackknife(parts: list[np.ndarray], level: float) -> dict:
    """The share of residuals inside the band from all the others (one left out at a time)."""
    out = {}
    for i, w in enumerate(WHATS):
        r = _finite(np.concatenate(parts)[:, i]) if parts else np.zeros(0)
        hits = []
        for j in range(len(r)):
            try:
                lo, hi = quantiles(np.delete(r, j), level)
            except TooFewRows:
                break
            hits.append(lo <= r[j] <= hi)
        out[w] = _share(hits)
    return out


def _finite(x):
    x = np.asarray(x, float)
    return x[np.isfinite(x)]


def _share(hits) -> float | None:
    return float(np.mean(hits)) if hits else None


def interval_table(cover: dict | None, band: dict | None) -> list[dict]:
    """The report's coverage table: per kind of hold-out and pooled, the nested coverage of the
    new-group band, of the split conformal band it replaces, and of a row from its kind's other
    rows; the band's measured / predicted factors (pooled: the pooled split conformal band's)."""
    if not cover:
        return []
    ends = factors(band)
    out = []
    for by in (*HOLDOUTS, "all"):
        c = cover.get(by)
        if not c:
            continue
        q = (band or {}).get("by", {}).get(by) if by != "all" else band
        out.append({"kind": "pooled" if by == "all" else f"new {by}", "rows": c["rows"],
                    "groups": None if by == "all" else (q or {}).get("groups"),
                    "new_group": {w: c[w] for w in WHATS}, "split_conformal": c["split_conformal"],
                    "exchangeable": c["exchangeable"], "factors": ends.get(by), "group_mean": c.get("group_mean"),
                    "by_group": c.get("groups", {})})
    return out


def factors(band: dict | None) -> dict:
    """Measured / predicted at the band's ends, pooled ('all') and per kind of hold-out."""
    if not band:
        return {}
    kinds = {"all": band, **band.get("by", {})}
    return {by: {w: [math.exp(-q[w][1]), math.exp(-q[w][0])] for w in WHATS} for by, q in kinds.items()}


def block(ho, usable=()) -> dict:
    band = band_of(ho) if ho else None
    if band is None:
        return {}
    cover = coverage(ho)
    return {"intervals": {
        "level": band["level"],
        "method": "tpot, ttft: split conformal on log(predicted / measured) of every row predicted with its "
                  "model, its tp or its engine left out of the fit, pooled: the band of a deployment whose "
                  "model, tp and engine are all calibrated; a prediction y allows measured values in "
                  "[y e^-hi, y e^-lo]. by_holdout: the band of a deployment new in that respect, two-level "
                  "(a shift the new group's rows share, Student's t with groups - 1 degrees of freedom about "
                  "the mean of that kind's held-out group medians, scale shift_scale = sqrt(tau^2 + s_b^2 / "
                  "groups) with s_b the medians' standard deviation and tau^2 = s_b^2 less the medians' mean "
                  "squared standard error, convolved with the "
                  "rows' own noise about their group's median), with its nested coverage of a held-out "
                  "group from the other groups (new_group), the split conformal band's (split_conformal) "
                  "and a row's from all the other rows of that kind (exchangeable); calibrated: the "
                  "models (Hugging Face ids), tp degrees and engines the rows hold",
        **{w: [_r(v) for v in band[w]] for w in WHATS},
        # a share only where some left-out row had an interval (few rows: none, said by absence)
        "left_out_coverage": {w: _r(cover["all"][w]) for w in WHATS if cover["all"][w] is not None},
        "left_out_coverage_split_conformal": {w: _r(v) for w, v in cover["all"]["split_conformal"].items()
                                              if v is not None},
        "calibrated": calibrated(usable),
        "by_holdout": {by: {**{w: [_r(v) for v in q[w]] for w in WHATS},
                            **{f"{w}_{k}": _r(q[f"{w}_{k}"]) for w in WHATS for k in ("center", "shift_scale")},
                            "groups": q["groups"],
                            "coverage_new_group": {w: _cover(cover[by][w]) for w in WHATS},
                            "coverage_split_conformal": {w: _cover(cover[by]["split_conformal"][w]) for w in WHATS},
                            "coverage_exchangeable": {w: _cover(cover[by]["exchangeable"][w]) for w in WHATS}}
                       for by, q in band["by"].items()}}}


def calibrated(usable) -> dict:
    """The models (Hugging Face ids), tp degrees and engines of the predicted rows."""
    return {by: sorted({getattr(c.row, by) for c in usable}, key=str) for by in HOLDOUTS}


def _cover(x):
    return None if x is None else _r(x)

def _r(x: float) -> float:
    return 0.0 if x == 0 or not math.isfinite(x) else float(f"{x:.6g}")


# --- which band a prediction takes -------------------------------------------------------------

def new_in(calibrated: dict | None, model_id: str, tp: int, engine: str, fitted_group: bool) -> list[str] | None:
    """The respects (model, tp, engine) in which a deployment is none of the calibrated ones;
    None where the calibration does not list them (an older file). A deployment whose
    (device, engine, kind of model) has no fit of its own borrows its engine's or the pooled
    parameters, as a left-out engine's rows do: it counts as a new engine."""
    if calibrated is None:
        return None
    values = {"model": model_id, "tp": tp, "engine": engine}
    new = [k for k, v in values.items() if k in calibrated and v not in calibrated[k]]
    return new + ["engine"] if not fitted_group and "engine" not in new else new


def mean_line(iv: dict) -> str:
    """An interval of the mean ({level, band, ttft_mean_s, tpot_mean_s}, each figure where it
    has one, else ttft_no_interval: why) in words: `simulate`'s and the disaggregated one's."""
    return (f"{iv['level']:.0%} interval of the mean (a prediction; {iv['band']}): "
            + ", ".join(f"{w.upper()} {1e3 * iv[f'{w}_mean_s'][0]:.2f}-{1e3 * iv[f'{w}_mean_s'][1]:.2f} ms"
                        for w in ("ttft", "tpot") if f"{w}_mean_s" in iv)
            + (f"; {iv['ttft_no_interval']}" if "ttft_no_interval" in iv else ""))


def band_for(band: dict, new: list[str] | None) -> tuple[dict | None, str]:
    """(quantiles {tpot: [lo, hi], ttft: [lo, hi]}, what they are) for a deployment new in
    `new`: calibrated in every respect, the pooled band; new in one, that kind's new-group
    band; new in several, the union of theirs (no group of the calibration was new in several
    respects at once, so that band's coverage is not measured); `new` None (the calibration
    does not say what it holds), the union of every kind's, the widest."""
    kinds = band.get("by") or {}
    pick = list(kinds) if new is None else [k for k in new if k in kinds]
    if new == []:
        return {w: band[w] for w in ("tpot", "ttft")}, "model, tp and engine calibrated: the pooled band"
    if not pick:
        return None, f"no band for a new {' and '.join(new)} in the calibration"
    q = {w: [min(kinds[k][w][0] for k in pick), max(kinds[k][w][1] for k in pick)] for w in ("tpot", "ttft")}
    if new is None:
        return q, ("the calibration does not list the models, tp and engines it holds (written before the "
                   "group-shift band): the widest of its per-kind bands (" + ", ".join(pick) + ")")
    return q, f"new {' and '.join(pick)}: the group-shift band" + (" (union; not measured)" if len(pick) > 1 else "")


# --- a disaggregated deployment: the disaggregated rows' own residuals ---------------------------
# The fit sees aggregated rows only; the disaggregated rows predicted with its parameters are a
# population of their own (another scheduler, a KV transfer), so their band is split conformal on
# their residuals alone, never the aggregated one borrowed.

DISAGG_WORDS = "disaggregated rows: {n} measured runs, split conformal"


def disaggregated_entry(records: list[dict]) -> dict | None:
    """The calibration's `disaggregated` entry: log(predicted / measured) TTFT and TPOT of
    each predicted disaggregated row (`disagg.row_record`'s records); None where none."""
    done = [r for r in records if r.get("predicted")]
    if not done:
        return None
    return {"rows": len(done),
            "method": "log(predicted / measured) mean TTFT and TPOT of each disaggregated row, predicted with "
                      "the fitted parameters (serving/disagg.py; the fit sees aggregated rows only); a "
                      "disaggregated prediction's band is split conformal on these alone",
            **{f"{w}_log_residuals": [_r(math.log1p(r[f"{w}_error"])) for r in done] for w in WHATS}}


def disaggregated_band(entry: dict | None, level: float = LEVEL) -> tuple[dict | None, str]:
    """(quantiles {tpot: [lo, hi], ttft: [lo, hi]}, what they are) from the calibration's
    disaggregated entry, by `quantiles`; (None, why) where the entry is absent or too short."""
    if not entry:
        return None, "the calibration holds no disaggregated rows' residuals (written before them, or none predicted)"
    try:
        q = {w: list(quantiles(_finite(entry[f"{w}_log_residuals"]), level)) for w in WHATS}
    except TooFewRows as exc:
        return None, f"disaggregated rows: {exc}"
    return q, DISAGG_WORDS.format(n=min(len(_finite(entry[f"{w}_log_residuals"])) for w in WHATS))
