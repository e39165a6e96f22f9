"""Charts drawn with matplotlib (Agg, no pyplot) as deterministic SVG text.

Imported only when a report format needs charts. Same input, same bytes: a fixed SVG hash
salt, no date or creator metadata, text kept as <text> (selectable, scalable, no glyph paths).
"""

from __future__ import annotations

import ctypes
import io
import math
import os
import re
import signal
import sys
import textwrap
import threading
import time
from functools import cache
import multiprocessing
import queue

from rooflinec.base.roofline import ridge as ridge_of
from rooflinec.base.quantities import short

SERIES_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
                  "#e377c2")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DEVICE_COLOURS = ("#444444", "#b8860b", "#5f9ea0", "#8b008b", "#2e8b57", "#cd5c5c")
ROOF = "#333333"
SIZE = (6.4, 4.2)


@cache
def _matplotlib():
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams.update({
        "svg.hashsalt": "rooflinec", "svg.fonttype": "none", "text.parse_math": False,
        "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
        "xtick.labelsize": 8, "ytick.labelsize": 8, "axes.spines.top": False,
        "axes.spines.right": False,
    })
    from matplotlib.figure import Figure
    return Figure


def _figure(size: tuple[float, float] = SIZE, below: float = 0.0):
    """One figure setup for every chart: fixed margins (no layout engine), no minor ticks;
    `below` inches under the axes for a legend."""
    fig = _matplotlib()(figsize=size)
    fig.subplots_adjust(left=0.11, right=0.98, bottom=(0.46 + below) / size[1], top=1 - 0.3 / size[1])
    return fig, fig.add_subplot()


def _title(fig, text: str) -> None:
    """The title as figure text at a fixed place: Axes.set_title would measure every tick
    label to keep clear of them, a sixth of a chart's drawing time."""
    fig.text(0.5, 1 - 0.08 / fig.get_figheight(), text, ha="center", va="top", fontsize=10)


def _tick(x: float, _pos=None) -> str:
    """Plain-text decade labels: 0.01, 1, 100, 10k, 1T (no mathtext)."""
    return short(x)


def _decades(lo: float, hi: float) -> list[float]:
    """Every power of ten from lo to hi."""
    return [10.0 ** e for e in range(math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9) + 1)]


TICK_PT, PAD_PT, TICK_FONT = 3.5, 3.5, 8   # tick length, gap to its label, label size
GRID = "#e4e4e4"


def _log_axes(ax, xlim: tuple[float, float], ylim: tuple[float, float], xlabel: str, ylabel: str) -> None:
    """Log-log axes with a tick, a label and a grid line at each decade, and the axis titles.

    Drawn as a few plain artists with matplotlib's own Axis objects hidden: an Axis makes
    five artists per tick and measures every label to place its title, over half of a
    chart's drawing time. Titles sit at offsets estimated from the labels' lengths."""
    from matplotlib.collections import LineCollection
    from matplotlib.markers import TICKDOWN, TICKLEFT
    from matplotlib.transforms import offset_copy
    ax.set(xscale="log", yscale="log", xlim=xlim, ylim=ylim)
    ax.xaxis.set_visible(False)
    ax.yaxis.set_visible(False)
    fig = ax.figure
    xs, ys = _decades(*xlim), _decades(*ylim)
    along_x, along_y = ax.get_xaxis_transform(), ax.get_yaxis_transform()  # data on one axis, axes on the other
    for ticks, transform, marker in ((xs, along_x, TICKDOWN), (ys, along_y, TICKLEFT)):
        ends = [[(t, 0), (t, 1)] if marker == TICKDOWN else [(0, t), (1, t)] for t in ticks]
        ax.add_collection(LineCollection(ends, colors=GRID, linewidths=0.6, transform=transform,
                                         zorder=0.5), autolim=False)
        zeros = [0] * len(ticks)
        ax.plot(*((ticks, zeros) if marker == TICKDOWN else (zeros, ticks)), ls="none",
                marker=marker, ms=TICK_PT, mew=0.8, color="black", transform=transform, clip_on=False)
    gap = TICK_PT + PAD_PT
    below = offset_copy(along_x, fig, y=-gap, units="points")
    left = offset_copy(along_y, fig, x=-gap, units="points")
    for x in xs:
        ax.text(x, 0, _tick(x), transform=below, ha="center", va="top", fontsize=TICK_FONT)
    labels = [_tick(y) for y in ys]
    for y, text in zip(ys, labels):
        ax.text(0, y, text, transform=left, ha="right", va="center_baseline", fontsize=TICK_FONT)
    title_gap = gap + 4   # label to axis title
    ax.text(0.5, 0, xlabel, transform=offset_copy(ax.transAxes, fig, y=-(title_gap + TICK_FONT * 1.2),
                                                  units="points"), ha="center", va="top")
    widest = CHAR_PT * TICK_FONT / LABEL_PT * max(map(len, labels), default=0)
    ax.text(0, 0.5, ylabel, transform=offset_copy(ax.transAxes, fig, x=-(title_gap + widest), units="points"),
            ha="center", va="bottom", rotation=90, rotation_mode="anchor")


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return buf.getvalue()


def _clusters(pts: list[dict], tol: float = 0.03, roof: float = 1.0) -> list[list[dict]]:
    """Points whose markers would overlap (within `tol` decades on both axes) share a label;
    so do points on the same flat roof within `roof` decades of each other, whose labels
    would run into each other long before their markers do."""
    groups: list[list[dict]] = []
    flat = lambda p: p.get("on_roof", False)  # noqa: E731
    for p in sorted(pts, key=lambda p: (flat(p), p["attained"] if flat(p) else 0, p["intensity"], p["attained"])):
        x, y = math.log10(p["intensity"]), math.log10(p["attained"])
        last = groups[-1][-1] if groups else None
        dx = abs(x - math.log10(last["intensity"])) if last else math.inf
        dy = abs(y - math.log10(last["attained"])) if last else math.inf
        same_roof = last is not None and flat(p) and flat(last) and dy < 1e-9
        if dx <= (roof if same_roof else tol) and dy <= tol:
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


MAX_NAMES = 3   # a cluster's label names this many points; the report's tables list them all


def _label(group: list[dict]) -> str:
    """The labels of overlapping points, once each (the series shows in marker and colour)."""
    labels = list(dict.fromkeys(p["label"] for p in group))
    if len(labels) > MAX_NAMES:
        labels = labels[:MAX_NAMES] + [f"+{len(labels) - MAX_NAMES} more"]
    return "\n".join(textwrap.wrap(", ".join(labels), 34))


LABEL_PT = 6.5                 # label font size
CHAR_PT, LINE_PT = 3.9, 8.0    # a label character's average width and a line's height, in points


def _annotate(ax, groups: list[list[dict]], xmin: float, xmax: float, dev: dict,
              legend: tuple[float, float] | None = None) -> None:
    """Label each cluster beside its marker, at the first corner (below or above, right or
    left) where the label's box overlaps no label placed before and stays in the axes. Boxes
    are estimated from the character count: measuring text would cost more than the chart.
    `legend`, (height, width) in points, reserves the upper-left corner for the legend."""
    x_pt, y_pt = _points_per_decade(ax)
    y_lo, y_hi = map(float, ax.get_ylim())   # plain floats: numpy scalars are slow in the loops below
    width_pt, height_pt = math.log10(xmax / xmin) * x_pt, math.log10(y_hi / y_lo) * y_pt
    def at(q: dict) -> tuple[float, float]:
        return math.log10(q["intensity"] / xmin) * x_pt, math.log10(q["attained"] / y_lo) * y_pt

    # every marker is an obstacle too; a label may not cover another point
    placed = [(x - 4, y - 4, x + 4, y + 4) for g in groups for x, y in (at(q) for q in g)]
    if legend is not None:   # (height, width) of an upper-left legend, estimated like the labels
        placed.append((0, height_pt - legend[0], legend[1], height_pt))

    def roof(xp: float) -> float:
        """The matrix roof in points: the bandwidth slope, then flat."""
        flops = min(xmin * 10 ** (xp / x_pt) * dev["bandwidth"], dev["tensor_peak"])
        return math.log10(flops / y_lo) * y_pt

    vector = None   # the vector roof's flat part, (start, height) in points
    if dev["vector_peak"]:
        vector = (math.log10(dev["ridge_vector"] / xmin) * x_pt,
                  math.log10(dev["vector_peak"] / y_lo) * y_pt)

    def roofs_through(box: tuple) -> int:
        flat = vector is not None and box[2] > vector[0] and box[1] < vector[1] < box[3]
        return int(_crosses(box, roof)) + int(flat)   # ints: bools would add as "or" if numpy's

    for group in groups:
        p, text = group[0], _label(group)
        lines = text.split("\n")
        w, h = CHAR_PT * max(map(len, lines)), LINE_PT * len(lines)
        x, y = at(p)
        sides = (1, -1) if x < 0.62 * width_pt else (-1, 1)
        ups = (-1, 1)   # below first: the roof rises to the right, so below-right is clear
        # the four corners beside the marker, then the same a few lines further away
        tries = [(sx, sy, gap) for gap in (7, 7 + LINE_PT * 2, 7 + LINE_PT * 4)
                 for sx in sides for sy in ups]
        own = (x - 4, y - 4, x + 4, y + 4)

        def cost(t) -> float:
            """Three times the area this try would cover of what is placed or would leave the
            axes (text on text is unreadable, text off the figure is cut), plus half the label
            for each roof that runs through it (a line through text is merely untidy)."""
            box = _box(x, y, w, h, *t)
            outside = w * h - _overlap((0, 0, width_pt, height_pt), box)
            crossed = w * h / 2 * roofs_through(box)
            return 3 * (outside + sum(_overlap(box, other) for other in placed if other != own)) + crossed

        # the first try that covers nothing, else the one that covers least
        sx, sy, gap = min(tries, key=lambda t: (cost(t), tries.index(t)))
        box = _box(x, y, w, h, sx, sy, gap)
        placed.append(box)
        ax.annotate(text, (p["intensity"], p["attained"]), fontsize=LABEL_PT, color="#222222",
                    xytext=(5 * sx, gap * sy), textcoords="offset points",
                    va="bottom" if sy > 0 else "top", ha="left" if sx > 0 else "right",
                    arrowprops=None if gap == 7 else {"arrowstyle": "-", "color": "#999999",
                                                      "lw": 0.5, "shrinkA": 0, "shrinkB": 3})


def _box(x, y, w, h, sx, sy, gap) -> tuple[float, float, float, float]:
    """A label's box, in points, at side sx and height sy of the marker at (x, y)."""
    left = x + 5 if sx > 0 else x - 5 - w
    bottom = y + gap if sy > 0 else y - gap - h
    return left, bottom, left + w, bottom + h


def _points_per_decade(ax) -> tuple[float, float]:
    """How many points one decade spans on each log axis (from the figure's fixed layout)."""
    box = ax.get_position()
    fig_w, fig_h = ax.figure.get_size_inches()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    return (float(box.width * fig_w * 72 / math.log10(x1 / x0)),
            float(box.height * fig_h * 72 / math.log10(y1 / y0)))


def _crosses(box: tuple, line) -> bool:
    """Whether a rising line y = line(x) passes through the box (left, bottom, right, top)."""
    return line(box[0]) < box[3] and line(box[2]) > box[1]


def _overlap(a: tuple, b: tuple) -> float:
    """The area two boxes (left, bottom, right, top) share."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _roofs(ax, dev: dict, xmin: float, xmax: float) -> None:
    bw, tensor, vector = dev["bandwidth"], dev["tensor_peak"], dev["vector_peak"]
    ridge = dev["ridge_matrix"]   # the report's, computed by the roofline's owner
    ax.plot([xmin, ridge, xmax], [xmin * bw, tensor, tensor], color=ROOF, lw=1.8,
            label=f"matrix roof {short(tensor, 'FLOP/s')}, {short(bw, 'B/s')}")
    if vector:
        vr = dev["ridge_vector"]
        ax.plot([vr, xmax], [vector, vector], color=ROOF, lw=1.1, ls="--",
                label=f"vector roof {short(vector, 'FLOP/s')}")
    ax.axvline(ridge, color="#999999", lw=0.8, ls=":")
    ax.annotate(f"ridge {ridge:.1f}", (ridge, 0), xycoords=("data", "axes fraction"), xytext=(3, 4),
                textcoords="offset points", rotation=90, fontsize=7.5, color="#555555")


def roofline(chart: dict):
    """Log-log attainable FLOP/s against intensity: roofs, ridge, and the labelled points."""
    dev = chart["device"]
    pts = [dict(p, on_roof=p["flops_per_s"] is None and p["attained"] < p["intensity"] * dev["bandwidth"])
           for p in chart["points"]]
    series = list(dict.fromkeys(p["series"] for p in pts))
    below = len(series) > 4   # a long legend goes under the axes, off the points
    extra = 0.17 * math.ceil((len(series) + 2) / 2) + 0.25 if below else 0
    fig, ax = _figure((SIZE[0], SIZE[1] + min(len(pts), 60) * 0.025 + extra), extra)
    ridge = dev["ridge_matrix"]
    xs = [p["intensity"] for p in pts]
    xmin = 10.0 ** math.floor(math.log10(min(0.5, *xs)))
    xmax = 10.0 ** math.ceil(math.log10(max(4 * ridge, *xs) * 1.5))
    _roofs(ax, dev, xmin, xmax)
    for i, name in enumerate(series):
        mine = [p for p in pts if p["series"] == name]
        # earlier series drawn larger, so a marker hidden under a later one still shows its rim
        ax.scatter([p["intensity"] for p in mine], [p["attained"] for p in mine],
                   s=max(44 - 6 * i, 20), zorder=3,
                   marker=MARKERS[i % len(MARKERS)], color=SERIES_COLOURS[i % len(SERIES_COLOURS)],
                   edgecolors="white", linewidths=0.5, label=name)
    # a measured point far under its roof widens the axis down to it
    ylo = min(xmin * dev["bandwidth"] / 2, *(p["attained"] / 2 for p in pts))
    _log_axes(ax, (xmin, xmax), (ylo, dev["tensor_peak"] * 3),
              "arithmetic intensity (FLOP / byte)", "attainable FLOP/s")
    # after the limits, which placement reads; an upper-left legend is kept clear of labels
    entries = [short(dev["tensor_peak"], "FLOP/s") + " matrix roof, " + short(dev["bandwidth"], "B/s"),
               *series] + (["vector roof"] if dev["vector_peak"] else [])
    legend = None if below else (len(entries) * 1.45 * 8.0 + 6, 28 + CHAR_PT * 1.2 * max(map(len, entries)))
    _annotate(ax, _clusters(pts), xmin, xmax, dev, legend)
    _title(fig, chart["title"])
    if below:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.42 / (fig.get_figheight() - 0.76 - extra)),
                  frameon=False, ncols=2)
    else:
        ax.legend(loc="upper left", frameon=False)
    return fig


def sweep(chart: dict):
    """Intensity against tokens in flight, one line per GEMM, each device's ridge and crossing."""
    fig, ax = _figure()
    for i, line in enumerate(chart["lines"]):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        ax.plot(line["x"], line["y"], color=colour, lw=1.4, label=line["label"])
        for c in line["crossings"]:
            ax.plot([c["at"]], [c["intensity"]], marker="o", ms=4, color=colour, zorder=3)
    for j, dev in enumerate(chart["devices"]):
        colour = DEVICE_COLOURS[j % len(DEVICE_COLOURS)]
        ridge = dev["ridge_matrix"]
        ax.axhline(ridge, color=colour, lw=1, ls="--")
        ats = [c["at"] for line in chart["lines"] for c in line["crossings"] if c["device"] == dev["key"]]
        span = f"{min(ats)}" if ats and min(ats) == max(ats) else (f"{min(ats)}–{max(ats)}" if ats else "none")
        ax.annotate(f"{dev['key']} ridge {ridge:.1f}; crossings at {span}", (0, ridge),
                    xycoords=("axes fraction", "data"), xytext=(4, 3 + 11 * j),
                    textcoords="offset points", ha="left", fontsize=7.5, color=colour)
    xs = [x for line in chart["lines"] for x in line["x"]]
    ys = [y for line in chart["lines"] for y in line["y"]]
    ridges = [d["ridge_matrix"] for d in chart["devices"]]
    _log_axes(ax, (min(xs) / 1.3, max(xs) * 1.3), (min(ys) / 1.5, max(*ys, *ridges) * 1.5),
              "tokens in flight M", "arithmetic intensity (FLOP / byte)")
    _title(fig, chart["title"])
    ax.legend(loc="lower right", frameon=False)
    return fig


LINE_STYLES = ("-", "--", ":", "-.")


def throughput(chart: dict):
    """Tokens/s against a swept axis: colour per series, line style per device (and variant),
    a ring where the series turns compute-bound."""
    from matplotlib.lines import Line2D
    fig, ax = _figure()
    labels = list(dict.fromkeys(line["label"] for line in chart["lines"]))
    for line in chart["lines"]:
        colour = SERIES_COLOURS[labels.index(line["label"]) % len(SERIES_COLOURS)]
        style = LINE_STYLES[line["group"] % len(LINE_STYLES)]
        # the whole series faint, then solid where weights and KV cache fit the device
        ax.plot(line["x"], line["y"], color=colour, lw=1.0, ls=style, alpha=0.3)
        fit = [y if f else math.nan for y, f in zip(line["y"], line["fits"])]
        ax.plot(line["x"], fit, color=colour, lw=1.3, ls=style)
        if line["crossing"]:
            c = line["crossing"]
            ax.plot([c["at"]], [c["tokens_per_s"]], marker="o", ms=6, mfc="none", mec=colour, mew=1.4, zorder=3)
            ax.annotate(f"{c['at']}", (c["at"], c["tokens_per_s"]), xytext=(4, -9), textcoords="offset points",
                        fontsize=7, color=colour)
    handles = [Line2D([], [], color=SERIES_COLOURS[i % len(SERIES_COLOURS)], lw=1.6, label=name)
               for i, name in enumerate(labels)]
    handles += [Line2D([], [], color=ROOF, lw=1.3, ls=LINE_STYLES[i % len(LINE_STYLES)], label=name)
                for i, name in enumerate(chart["groups"])]
    if any(line["crossing"] for line in chart["lines"]):
        handles.append(Line2D([], [], color=ROOF, ls="none", marker="o", mfc="none", mew=1.2,
                              label="compute-bound from here"))
    if not all(f for line in chart["lines"] for f in line["fits"]):
        handles.append(Line2D([], [], color=ROOF, lw=1.0, alpha=0.3, label="faint: does not fit memory"))
    xs = [x for line in chart["lines"] for x in line["x"]]
    ys = [y for line in chart["lines"] for y in line["y"]]
    _log_axes(ax, (min(xs) / 1.2, max(xs) * 1.2), (min(ys) / 1.5, max(ys) * 1.5),
              chart["xlabel"], chart["ylabel"])
    _title(fig, chart["title"])
    ax.legend(handles=handles, loc="upper left", frameon=False, ncols=2 if len(handles) > 6 else 1)
    return fig


def split(chart: dict):
    """Stacked bars: each tp's step time in parts (linear seconds, one bar per degree)."""
    fig, ax = _figure()
    xs = list(range(len(chart["tp"])))
    base = [0.0] * len(xs)
    for i, (name, values) in enumerate(chart["parts"].items()):
        ax.bar(xs, values, bottom=base, width=0.6, color=SERIES_COLOURS[i % len(SERIES_COLOURS)],
               label=name)
        base = [b + v for b, v in zip(base, values)]
    ax.set_xticks(xs, [str(t) for t in chart["tp"]])
    ax.set_xlabel("tensor-parallel degree tp")
    ax.set_ylabel("seconds per step, per device")
    _title(fig, chart["title"])
    ax.legend(loc="upper right", frameon=False)
    return fig


def catalog(chart: dict):
    """Every device's roof on one log-log chart: tensor roof solid with its ridge as a dot,
    vector roof dashed, one colour per device."""
    devs = chart["devices"]
    ridges = [ridge_of(d["tensor_peak"], d["bandwidth"]) for d in devs]
    xmin = 10.0 ** math.floor(math.log10(min(ridges) / 100))
    xmax = 10.0 ** math.ceil(math.log10(max(ridges) * 10))
    fig, ax = _figure((SIZE[0], SIZE[1] + 0.17 * math.ceil(len(devs) / 2) + 0.3),
                      0.17 * math.ceil(len(devs) / 2) + 0.3)
    for i, (d, ridge) in enumerate(zip(devs, ridges)):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        ax.plot([xmin, ridge, xmax], [xmin * d["bandwidth"], d["tensor_peak"], d["tensor_peak"]],
                color=colour, lw=1.3, ls=LINE_STYLES[i // len(SERIES_COLOURS) % len(LINE_STYLES)],
                label=f"{d['key']} ({d['dtype']}), ridge {ridge:.0f}")
        ax.plot([ridge], [d["tensor_peak"]], marker="o", ms=4, color=colour, zorder=3)
        if d["vector_peak"]:
            ax.plot([ridge_of(d["vector_peak"], d["bandwidth"]), xmax], [d["vector_peak"]] * 2, color=colour,
                    lw=0.7, ls=":")
    peaks = [d["tensor_peak"] for d in devs] + [d["vector_peak"] for d in devs if d["vector_peak"]]
    _log_axes(ax, (xmin, xmax), (xmin * min(d["bandwidth"] for d in devs), max(peaks) * 3),
              "arithmetic intensity (FLOP / byte)", "attainable FLOP/s")
    _title(fig, chart["title"])
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.42 / (fig.get_figheight() - 0.76)),
              frameon=False, ncols=2, fontsize=7)
    return fig


def bars(chart: dict):
    """Horizontal bars, a group per label and a bar per series; a missing value leaves a gap."""
    labels, series = chart["labels"], chart["series"]
    height = 0.8 / len(series)
    fig, ax = _figure((SIZE[0], 1.0 + 0.32 * len(labels) * len(series) ** 0.5))
    fig.subplots_adjust(left=0.42)
    for i, (name, values) in enumerate(series.items()):
        ys = [j + (i - (len(series) - 1) / 2) * height for j in range(len(labels))]
        shown = [(y, v) for y, v in zip(ys, values) if v is not None]
        ax.barh([y for y, _ in shown], [v for _, v in shown], height=height * 0.9,
                color=SERIES_COLOURS[i % len(SERIES_COLOURS)], label=name)
        for y, v in shown:
            ax.text(v, y, f" {v:.1%}", va="center", fontsize=6.5)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    top = max(v for values in series.values() for v in values if v is not None)
    ax.set_xlim(0, max(1.0, top * 1.15))
    ax.set_xlabel(chart["xlabel"])
    _title(fig, chart["title"])
    ax.legend(loc="lower right", frameon=False, fontsize=7)
    return fig


def scaling(chart: dict):
    """Two panels against GPUs (log): step time, then MFU and HFU beside the published
    figure; a run that does not fit memory hollow."""
    runs = sorted(chart["runs"], key=lambda r: r["gpus"])
    fig = _matplotlib()(figsize=(SIZE[0] * 1.3, SIZE[1]))
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.14, top=0.88, wspace=0.28)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    gpus = [r["gpus"] for r in runs]
    panels = ((left, (("step_s", "step (compute, bubble, communication)"),
                      ("pipelined_s", "compute and bubble only")), "seconds per step"),
              (right, (("mfu", "MFU (overlapped)"), ("hfu", "HFU (overlapped)"),
                       ("published", "published")), "fraction of peak"))
    for ax, fields, ylabel in panels:
        for i, (key, label) in enumerate(fields):
            colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
            # points, not lines: the runs are different models, not one model scaled
            pts = [(r["gpus"], r[key], r["fits"]) for r in runs if r[key] is not None]
            for fit in (True, False):
                mine = [(g, v) for g, v, f in pts if f is fit]
                if mine:
                    ax.scatter([g for g, _ in mine], [v for _, v in mine], s=28, zorder=3,
                               marker=MARKERS[i % len(MARKERS)], color=colour if fit else "white",
                               edgecolors=colour, linewidths=1.2,
                               label=label if fit else f"{label}, does not fit memory")
        ax.set_xscale("log")
        ax.set_xticks(gpus, [f"{g:,}" for g in gpus], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel("GPUs")
        ax.set_ylabel(ylabel)
        ax.legend(loc="best", frameon=False, fontsize=7)
    right.set_ylim(0, 1)
    for r in runs:
        left.annotate(r["name"], (r["gpus"], r["step_s"]), xytext=(4, 4), textcoords="offset points",
                      fontsize=6, color="#555555")
    _title(fig, chart["title"])
    return fig


DRAW = {"roofline": roofline, "sweep": sweep, "throughput": throughput, "split": split,
        "catalog": catalog, "bars": bars, "scaling": scaling}


def draw(chart: dict) -> str:
    """The chart's SVG; "" for a chart left out (rooflinec.render.chartdata says why, the report shows it)."""
    return "" if chart.get("left_out") else _svg(DRAW[chart["kind"]](chart))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        return os.cpu_count() or 1


def draw_all(charts: list[dict]) -> list[str]:
    """Every chart's SVG, in the order given (a Painter does this in its own process)."""
    return [draw(c) for c in charts]


class Painter:
    """A forked process that imports matplotlib while the caller computes, then draws.

    `rooflinec build` starts one before it evaluates its studies, so matplotlib's import runs
    on the other core, and hands it each section's charts as soon as the section is
    evaluated, so drawing overlaps the rest of the evaluation. Charts come back as SVG text,
    the same bytes whoever draws them; if the painter fails or dies, the caller draws them.
    Queues, not a bare pipe: their feeder threads keep either side from blocking on a full
    pipe while the other is busy. The painter dies with its parent, however the parent ends
    (a SIGKILL included): it would otherwise wait on the jobs queue forever.
    """

    def __init__(self):
        ctx = multiprocessing.get_context("fork")
        self._jobs, self._results = ctx.Queue(), ctx.Queue()
        self._proc = ctx.Process(target=_paint, args=(self._jobs, self._results, os.getpid()),
                                 daemon=True)
        self._proc.start()
        self._pending: dict[int, list[dict]] = {}
        self._done: dict[int, list[str] | None] = {}

    @staticmethod
    def available() -> bool:
        return _cores() >= 2 and "fork" in multiprocessing.get_all_start_methods()

    def submit(self, charts: list[dict]) -> int:
        ticket = len(self._pending)
        self._pending[ticket] = charts
        self._jobs.put((ticket, charts))
        return ticket

    def result(self, ticket: int) -> list[str]:
        while ticket not in self._done:
            try:
                done, svgs = self._results.get(timeout=0.5)
                self._done[done] = svgs
            except queue.Empty:
                if not self._proc.is_alive():
                    break
        svgs = self._done.get(ticket)
        return svgs if svgs is not None else draw_all(self._pending[ticket])

    def close(self) -> None:
        self._jobs.put(None)
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.terminate()
        for q in (self._jobs, self._results):
            q.cancel_join_thread()
            q.close()


def _warm_up() -> None:
    """Draw a throwaway chart: loads the fonts and text layout while the caller computes."""
    fig, ax = _figure()
    _title(fig, "warm-up")
    _log_axes(ax, (1, 10), (1, 10), "intensity", "FLOP/s")
    _svg(fig)


PR_SET_PDEATHSIG = 1   # linux/prctl.h: the signal a process gets when its parent dies
WATCH_S = 1.0          # how often the portable fallback looks for its parent


def _die_with_parent(parent: int) -> None:
    """End this process when `parent` does: on Linux the kernel sends SIGKILL at once
    (prctl PR_SET_PDEATHSIG); everywhere a daemon thread also sees the process re-parented."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):   # no libc prctl: the thread below still watches
            pass
    if os.getppid() != parent:   # the parent died before the signal was asked for
        os._exit(0)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    os._exit(0)


def _paint(jobs, results, parent: int) -> None:
    _die_with_parent(parent)
    _warm_up()
    while (job := jobs.get()) is not None:
        ticket, charts = job
        try:
            results.put((ticket, draw_all(charts)))
        except Exception:   # the caller draws these itself, and any error surfaces there
            results.put((ticket, None))


_ID = re.compile(r'\bid="([^"]+)"')


def inline(svg: str, prefix: str) -> str:
    """An SVG file's text made fit to sit inside HTML: no XML prolog, ids unique per chart."""
    svg = svg[svg.index("<svg"):]
    ids = set(_ID.findall(svg))
    svg = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    return re.sub(r'(href="#|url\(#)([^")]+)',
                  lambda m: m.group(1) + (f"{prefix}-{m.group(2)}" if m.group(2) in ids else m.group(2)),
                  svg)
