"""The report's charts as deterministic SVG text.

Every chart a build draws (rooflines, the GEMM sweep, tokens/s, tp splits, the catalog's
roofline, utilisation bars, the scaling panels; `serve --out` and `measure` too) is written
directly by `svgplot` (its docstring gives the profile that made matplotlib too slow for
them), so a build imports no plotting library and forks no painter. The plan, validation and
simulator charts (their own modules) still use matplotlib through the helpers at the end,
imported only when one is drawn: same input, same bytes (a fixed SVG hash salt, no date or
creator, text kept as <text>).
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from functools import cache

from rooflinec.base.roofline import ridge as ridge_of
from rooflinec.base.quantities import SUBUNIT, prefixed, short
from rooflinec.render import svgplot
from rooflinec.render.svgplot import CHAR_EM, GRID, PAD_PT, TICK_FONT, TICK_PT, decades as _decades

SERIES_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
                  "#e377c2")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DEVICE_COLOURS = ("#444444", "#b8860b", "#5f9ea0", "#8b008b", "#2e8b57", "#cd5c5c")
ROOF = "#333333"
SIZE = (6.4, 4.2)
LINE_STYLES = ("-", "--", ":", "-.")


def _tick(x: float, _pos=None) -> str:
    """Plain-text decade labels: 0.01, 1, 100, 10k, 1T (no mathtext)."""
    return short(x)


def _plot(size: tuple[float, float] = SIZE, below: float = 0.0, left: float = 0.11) -> svgplot.Plot:
    """One figure setup for every chart: fixed margins; `below` inches under the axes for a legend."""
    return svgplot.Plot(size, left, 0.98, (0.46 + below) / size[1], 1 - 0.3 / size[1])


LEGEND_BELOW_PT = 0.42 * 72   # a legend under the axes starts this far below them, clear of the x title


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


LABEL_PT = 6.5                              # label font size
CHAR_PT, LINE_PT = CHAR_EM * LABEL_PT, 8.0   # a label character's average width and a line's height, in points


def _box(x, y, w, h, sx, sy, gap) -> tuple[float, float, float, float]:
    """A label's box, in points, at side sx and height sy of the marker at (x, y)."""
    left = x + 5 if sx > 0 else x - 5 - w
    bottom = y + gap if sy > 0 else y - gap - h
    return left, bottom, left + w, bottom + h


def _crosses(box: tuple, line) -> bool:
    """Whether a rising line y = line(x) passes through the box (left, bottom, right, top)."""
    return line(box[0]) < box[3] and line(box[2]) > box[1]


def _overlap(a: tuple, b: tuple) -> float:
    """The area two boxes (left, bottom, right, top) share."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _annotate(plot: svgplot.Plot, groups: list[list[dict]], dev: dict,
              legend: tuple[float, float] | None = None) -> None:
    """Label each cluster beside its marker, at the first corner (below or above, right or
    left) where the label's box overlaps no label placed before and stays in the axes. Boxes
    are estimated from the character count (the SVG is written from the same estimate).
    `legend`, (height, width) in points, reserves the upper-left corner for the legend.
    Positions here are points from the axes' lower-left corner, y up."""
    x_pt, y_pt = plot.x.per_decade(), plot.y.per_decade()
    xmin, y_lo = plot.x.lo, plot.y.lo
    width_pt, height_pt = plot.right - plot.left, plot.bottom - plot.top

    def at(q: dict) -> tuple[float, float]:
        return math.log10(q["intensity"] / xmin) * x_pt, math.log10(q["attained"] / y_lo) * y_pt

    # every marker is an obstacle too; a label may not cover another point
    placed = [(x - 4, y - 4, x + 4, y + 4) for g in groups for x, y in (at(q) for q in g)]
    if legend is not None:
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
        return int(_crosses(box, roof)) + int(flat)

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
        placed.append(_box(x, y, w, h, sx, sy, gap))
        mx, my = plot.left + x, plot.bottom - y              # the marker, in SVG points
        tx, ty = mx + 5 * sx, my - gap * sy                  # the label's corner nearest it
        if gap != 7:   # a leader line from that corner to 3 points short of the marker
            d = math.hypot(tx - mx, ty - my)
            plot.segment(tx, ty, mx + (tx - mx) * 3 / d, my + (ty - my) * 3 / d, "#999999", 0.5)
        plot.text(tx, ty, text, LABEL_PT, anchor="start" if sx > 0 else "end",
                  valign="bottom" if sy > 0 else "top", colour="#222222")


def _roofs(plot: svgplot.Plot, dev: dict, xmin: float, xmax: float) -> list[dict]:
    """The device's roofs and ridge; their legend rows."""
    bw, tensor, vector = dev["bandwidth"], dev["tensor_peak"], dev["vector_peak"]
    ridge = dev["ridge_matrix"]   # the report's, computed by the roofline's owner
    plot.line([xmin, ridge, xmax], [xmin * bw, tensor, tensor], ROOF, 1.8)
    rows = [{"label": f"matrix roof {short(tensor, 'FLOP/s')}, {short(bw, 'B/s')}", "colour": ROOF, "width": 1.8}]
    if vector:
        plot.line([dev["ridge_vector"], xmax], [vector, vector], ROOF, 1.1, "--")
        rows.append({"label": f"vector roof {short(vector, 'FLOP/s')}", "colour": ROOF, "width": 1.1, "style": "--"})
    plot.vline(ridge, "#999999", 0.8, ":")
    size = 7.5   # read upwards from the axes' foot, just right of the ridge line
    plot.text(plot.x(ridge) + 3 + svgplot.ASCENT * size, plot.bottom - 4, f"ridge {ridge:.1f}", size,
              colour="#555555", rotate=90)
    return rows


def roofline(chart: dict) -> svgplot.Plot:
    """Log-log attainable FLOP/s against intensity: roofs, ridge, and the labelled points."""
    dev = chart["device"]
    pts = [dict(p, on_roof=p["flops_per_s"] is None and p["attained"] < p["intensity"] * dev["bandwidth"])
           for p in chart["points"]]
    series = list(dict.fromkeys(p["series"] for p in pts))
    below = len(series) > 4   # a long legend goes under the axes, off the points
    extra = 0.17 * math.ceil((len(series) + 2) / 2) + 0.25 if below else 0
    plot = _plot((SIZE[0], SIZE[1] + min(len(pts), 60) * 0.025 + extra), extra)
    ridge = dev["ridge_matrix"]
    xs = [p["intensity"] for p in pts]
    xmin = 10.0 ** math.floor(math.log10(min(0.5, *xs)))
    xmax = 10.0 ** math.ceil(math.log10(max(4 * ridge, *xs) * 1.5))
    # a measured point far under its roof widens the axis down to it
    ylo = min(xmin * dev["bandwidth"] / 2, *(p["attained"] / 2 for p in pts))
    plot.limits((xmin, xmax), (ylo, dev["tensor_peak"] * 3))
    rows = _roofs(plot, dev, xmin, xmax)
    for i, name in enumerate(series):
        # earlier series drawn larger, so a marker hidden under a later one still shows its rim
        marker = {"shape": MARKERS[i % len(MARKERS)], "size": math.sqrt(max(44 - 6 * i, 20)),
                  "fill": SERIES_COLOURS[i % len(SERIES_COLOURS)], "edge": "#ffffff", "edge_width": 0.5}
        for p in pts:
            if p["series"] == name:
                plot.dot(p["intensity"], p["attained"], marker["shape"], marker["size"], marker["fill"],
                         marker["edge"], marker["edge_width"])
        rows.append({"label": name, "colour": marker["fill"], **marker, "size": max(marker["size"], 6)})
    plot.log_axes("arithmetic intensity (FLOP / byte)", "attainable FLOP/s", _tick)
    if below:
        plot.legend(rows, "below", ncols=2, below=LEGEND_BELOW_PT)
        _annotate(plot, _clusters(pts), dev)
    else:   # an upper-left legend is kept clear of the labels
        w, h = svgplot.legend_size(rows)
        _annotate(plot, _clusters(pts), dev, (h + 6, w + 6))
        plot.legend(rows, "upper left")
    plot.title(chart["title"])
    return plot


RIDGE_LABEL_PT = 11   # a ridge label's line: 7.5 pt text and its gap


def _ridge_label_heights(plot: svgplot.Plot, ridges: list[float]) -> list[float]:
    """Baselines (points, downwards) of the ridge lines' labels, none struck through by another
    line: the highest ridge's label above its line; each other one under its own line where
    the gap to the next line down holds it, else stacked above the highest label."""
    order = sorted(range(len(ridges)), key=lambda j: -ridges[j])
    ys = [plot.y(ridges[j]) for j in order]
    floor = plot.y(plot.y.lo)
    at, stacked = [0.0] * len(ridges), 0
    for k, j in enumerate(order):
        room = (ys[k + 1] if k + 1 < len(ys) else floor) - ys[k]
        if k and room >= RIDGE_LABEL_PT + 2:
            at[j] = ys[k] + RIDGE_LABEL_PT - 2
        else:
            at[j] = ys[0] - 3 - RIDGE_LABEL_PT * stacked
            stacked += 1
    return at


def sweep(chart: dict) -> svgplot.Plot:
    """Intensity against tokens in flight, one line per GEMM, each device's ridge and crossing."""
    plot = _plot()
    xs = [x for line in chart["lines"] for x in line["x"]]
    ys = [y for line in chart["lines"] for y in line["y"]]
    ridges = [d["ridge_matrix"] for d in chart["devices"]]
    plot.limits((min(xs) / 1.3, max(xs) * 1.3), (min(ys) / 1.5, max(*ys, *ridges) * 1.5))
    rows = []
    for i, line in enumerate(chart["lines"]):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        plot.line(line["x"], line["y"], colour, 1.4)
        for c in line["crossings"]:
            plot.dot(c["at"], c["intensity"], "o", 4, colour)
        rows.append({"label": line["label"], "colour": colour, "width": 1.4})
    at = _ridge_label_heights(plot, ridges)
    for j, dev in enumerate(chart["devices"]):
        colour = DEVICE_COLOURS[j % len(DEVICE_COLOURS)]
        ridge = dev["ridge_matrix"]
        plot.hline(ridge, colour, 1.0, "--")
        ats = [c["at"] for line in chart["lines"] for c in line["crossings"] if c["device"] == dev["key"]]
        span = f"{min(ats)}" if ats and min(ats) == max(ats) else (f"{min(ats)}–{max(ats)}" if ats else "none")
        plot.text(plot.left + 4, at[j], f"{dev['key']} ridge {ridge:.1f}; crossings at {span}",
                  7.5, colour=colour)
    plot.log_axes("tokens in flight M", "arithmetic intensity (FLOP / byte)", _tick)
    plot.title(chart["title"])
    plot.legend(rows, "lower right")
    return plot


def throughput(chart: dict) -> svgplot.Plot:
    """Tokens/s against a swept axis: colour per series, line style per device (and variant),
    a ring where the series turns compute-bound; faint where weights and KV cache do not fit."""
    plot = _plot()
    xs = [x for line in chart["lines"] for x in line["x"]]
    ys = [y for line in chart["lines"] for y in line["y"]]
    plot.limits((min(xs) / 1.2, max(xs) * 1.2), (min(ys) / 1.5, max(ys) * 1.5))
    labels = list(dict.fromkeys(line["label"] for line in chart["lines"]))
    for line in chart["lines"]:
        colour = SERIES_COLOURS[labels.index(line["label"]) % len(SERIES_COLOURS)]
        style = LINE_STYLES[line["group"] % len(LINE_STYLES)]
        # the whole series faint, then solid where weights and KV cache fit the device
        plot.line(line["x"], line["y"], colour, 1.0, style, opacity=0.3)
        plot.line(line["x"], [y if f else math.nan for y, f in zip(line["y"], line["fits"])], colour, 1.3, style)
        if line["crossing"]:
            c = line["crossing"]
            plot.dot(c["at"], c["tokens_per_s"], "o", 6, "none", colour, 1.4)
            plot.text(plot.x(c["at"]) + 4, plot.y(c["tokens_per_s"]) + 9, f"{c['at']}", 7, colour=colour)
    rows = [{"label": name, "colour": SERIES_COLOURS[i % len(SERIES_COLOURS)], "width": 1.6}
            for i, name in enumerate(labels)]
    rows += [{"label": name, "colour": ROOF, "width": 1.3, "style": LINE_STYLES[i % len(LINE_STYLES)]}
             for i, name in enumerate(chart["groups"])]
    if any(line["crossing"] for line in chart["lines"]):
        rows.append({"label": "compute-bound from here", "colour": ROOF, "shape": "o", "size": 6,
                     "fill": "none", "edge": ROOF, "edge_width": 1.2})
    if not all(f for line in chart["lines"] for f in line["fits"]):
        rows.append({"label": "faint: does not fit memory", "colour": ROOF, "width": 1.0, "opacity": 0.3})
    plot.log_axes(chart["xlabel"], chart["ylabel"], _tick)
    plot.title(chart["title"])
    plot.legend(rows, "upper left", ncols=2 if len(rows) > 6 else 1)
    return plot


def speedup(chart: dict) -> svgplot.Plot:
    """Speculative decoding's speedup over plain decoding against batch (log batch, linear
    speedup): a line per series (faint past the largest batch that fits with the draft), the
    break-even line at 1x, and a ring where the first series stops paying."""
    plot = _plot()
    xs = [x for line in chart["lines"] for x in line["x"]]
    ys = [y for line in chart["lines"] for y in line["y"]] + [1.0]
    plot.limits((min(xs) / 1.2, max(xs) * 1.2), (0, max(ys) * 1.1), ylog=False)
    plot.hline(1.0, ROOF, 0.9, "--")
    for i, line in enumerate(chart["lines"]):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        plot.line(line["x"], line["y"], colour, 1.0, line.get("style", "-"), opacity=0.3)
        plot.line(line["x"], [y if f else math.nan for y, f in zip(line["y"], line["fits"])], colour, 1.4,
                  line.get("style", "-"))
    rows = [{"label": line["label"], "colour": SERIES_COLOURS[i % len(SERIES_COLOURS)], "width": 1.6,
             "style": line.get("style", "-")} for i, line in enumerate(chart["lines"])]
    rows.append({"label": "1x: plain decoding", "colour": ROOF, "width": 0.9, "style": "--"})
    stop = chart.get("stops_paying_from")
    if stop is not None:
        plot.dot(stop, 1.0, "o", 7, "none", SERIES_COLOURS[0], 1.4)
        plot.text(plot.x(stop) + 5, plot.y(1.0) + 10, f"{stop:,}", 7, colour=SERIES_COLOURS[0])
        rows.append({"label": "stops paying from this batch", "colour": ROOF, "shape": "o", "size": 7,
                     "fill": "none", "edge": SERIES_COLOURS[0], "edge_width": 1.2})
    if not all(f for line in chart["lines"] for f in line["fits"]):
        rows.append({"label": "faint: does not fit memory with the draft", "colour": ROOF, "width": 1.0,
                     "opacity": 0.3})
    ticks = _decades(plot.x.lo, plot.x.hi)
    plot.x_ticks(ticks, [_tick(t) for t in ticks])
    yt = svgplot.nice_ticks(0, plot.y.hi)
    labels = [f"{t:g}x" for t in yt]
    plot.y_ticks(yt, labels)
    plot.spines()
    plot.axis_titles(chart["xlabel"], chart["ylabel"], max(svgplot.text_width(t, TICK_FONT) for t in labels))
    plot.title(chart["title"])
    plot.legend(rows, "upper right")
    return plot


def _seconds_tick(t: float) -> str:
    value, prefix = prefixed(t, SUBUNIT)
    return f"{value:.4g} {prefix}s" if t else "0"


def split(chart: dict) -> svgplot.Plot:
    """Stacked bars: each tp's step time in parts (linear seconds, one bar per degree)."""
    plot = _plot()
    n = len(chart["tp"])
    totals = [sum(parts) for parts in zip(*chart["parts"].values())]
    top = max(totals, default=0) * 1.05 or 1.0
    plot.limits((-0.5, n - 0.5), (0, top), xlog=False, ylog=False)
    base = [0.0] * n
    rows = []
    for i, (name, values) in enumerate(chart["parts"].items()):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        for j, v in enumerate(values):
            plot.rect(plot.x(j - 0.3), plot.y(base[j]), plot.x(j + 0.3), plot.y(base[j] + v), colour)
        base = [b + v for b, v in zip(base, values)]
        rows.append({"label": name, "colour": colour, "shape": "s", "size": 9})
    plot.x_ticks(range(n), [str(t) for t in chart["tp"]], grid=False)
    ticks = svgplot.nice_ticks(0, top)
    labels = [_seconds_tick(t) for t in ticks]
    plot.y_ticks(ticks, labels, grid=False)
    plot.spines()
    plot.axis_titles("tensor-parallel degree tp", "seconds per step, per device",
                     max(svgplot.text_width(t, svgplot.TICK_FONT) for t in labels))
    plot.title(chart["title"])
    plot.legend(rows, "upper right")
    return plot


def catalog(chart: dict) -> svgplot.Plot:
    """Every device's roof on one log-log chart: tensor roof solid with its ridge as a dot,
    vector roof dotted, one colour per device."""
    devs = chart["devices"]
    ridges = [ridge_of(d["tensor_peak"], d["bandwidth"]) for d in devs]
    xmin = 10.0 ** math.floor(math.log10(min(ridges) / 100))
    xmax = 10.0 ** math.ceil(math.log10(max(ridges) * 10))
    extra = 0.17 * math.ceil(len(devs) / 2) + 0.3
    plot = _plot((SIZE[0], SIZE[1] + extra), extra)
    peaks = [d["tensor_peak"] for d in devs] + [d["vector_peak"] for d in devs if d["vector_peak"]]
    plot.limits((xmin, xmax), (xmin * min(d["bandwidth"] for d in devs), max(peaks) * 3))
    rows = []
    for i, (d, ridge) in enumerate(zip(devs, ridges)):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        style = LINE_STYLES[i // len(SERIES_COLOURS) % len(LINE_STYLES)]
        plot.line([xmin, ridge, xmax], [xmin * d["bandwidth"], d["tensor_peak"], d["tensor_peak"]], colour, 1.3, style)
        plot.dot(ridge, d["tensor_peak"], "o", 4, colour)
        if d["vector_peak"]:
            plot.line([ridge_of(d["vector_peak"], d["bandwidth"]), xmax], [d["vector_peak"]] * 2, colour, 0.7, ":")
        rows.append({"label": f"{d['key']} ({d['dtype']}), ridge {ridge:.0f}", "colour": colour, "width": 1.3,
                     "style": style})
    plot.log_axes("arithmetic intensity (FLOP / byte)", "attainable FLOP/s", _tick)
    plot.title(chart["title"])
    plot.legend(rows, "below", ncols=2, size=7, below=LEGEND_BELOW_PT)
    return plot


def bars(chart: dict) -> svgplot.Plot:
    """Horizontal bars, a group per label and a bar per series; a missing value leaves a gap."""
    labels, series = chart["labels"], chart["series"]
    height = 0.8 / len(series)
    plot = _plot((SIZE[0], 1.0 + 0.32 * len(labels) * len(series) ** 0.5), left=0.42)
    top = max(v for values in series.values() for v in values if v is not None)
    right = max(1.0, top * 1.15)
    plot.limits((0, right), (len(labels) - 0.5, -0.5), xlog=False, ylog=False)   # first label on top
    rows = []
    for i, (name, values) in enumerate(series.items()):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        for j, v in enumerate(values):
            if v is None:
                continue
            y = j + (i - (len(series) - 1) / 2) * height
            plot.rect(plot.x(0), plot.y(y - height * 0.45), plot.x(v), plot.y(y + height * 0.45), colour)
            plot.text(plot.x(v) + 1.5, plot.y(y), f"{v:.1%}", 6.5, valign="center")
        rows.append({"label": name, "colour": colour, "shape": "s", "size": 8})
    ticks = svgplot.nice_ticks(0, right)
    plot.x_ticks(ticks, [f"{t:g}" for t in ticks], grid=False)
    plot.y_ticks(range(len(labels)), labels, grid=False, size=7)
    plot.spines()
    plot.axis_titles(chart["xlabel"], "", 0)
    plot.title(chart["title"])
    plot.legend(rows, "lower right", size=7)
    return plot


# --- matplotlib, for the charts still drawn with it (plan, validation and the simulator's, in
# their own modules): imported only when one of them is drawn ----------------------------

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


DODGE_PT = 6.5   # series drawn side by side at one x, this far apart (a marker is ~5.3 pt wide)


def _dodge(i: int, n: int) -> float:
    """Series i of n: its markers' offset in points from the x they stand for, centred."""
    return (i - (n - 1) / 2) * DODGE_PT


def scaling(chart: dict) -> svgplot.Plot:
    """Two panels against GPUs (log): step time, then MFU and HFU beside the published
    figure, each series' marker shape its own and set beside the others at a run's GPUs; a run
    that does not fit memory hollow."""
    runs = sorted(chart["runs"], key=lambda r: r["gpus"])
    gpus = [r["gpus"] for r in runs]
    legend = 0.16 * (1 + 2 * (not all(r["fits"] for r in runs))) + 0.45   # inches under the axes
    size = (SIZE[0] * 1.3, SIZE[1] + legend)
    bottom, top = (0.46 + legend) / size[1], 1 - 0.5 / size[1]
    left = svgplot.Plot(size, 0.08, 0.475, bottom, top)
    right = left.panel(0.585, 0.98, bottom, top)
    xlim = (min(gpus) / 1.25, max(gpus) * 1.25)
    steps = [r[k] for r in runs for k in ("step_s", "pipelined_s") if r[k] is not None]
    left.limits(xlim, (0, max(steps, default=1) * 1.1), ylog=False)
    right.limits(xlim, (0, 1), ylog=False)
    panels = ((left, (("step_s", "step (compute, bubble, communication)"),
                      ("pipelined_s", "compute and bubble only")), "seconds per step"),
              (right, (("mfu", "MFU (overlapped)"), ("hfu", "HFU (overlapped)"),
                       ("published", "published")), "fraction of peak"))
    for plot, fields, ylabel in panels:
        rows = []
        for i, (key, label) in enumerate(fields):
            colour, shape = SERIES_COLOURS[i % len(SERIES_COLOURS)], MARKERS[i % len(MARKERS)]
            # points, not lines: the runs are different models, not one model scaled; each series
            # beside the others at a run's GPUs, so equal values (MFU = HFU without recomputation)
            # show both markers
            dx = _dodge(i, len(fields))
            pts = [(r["gpus"], r[key], r["fits"]) for r in runs if r[key] is not None]
            for fit in (True, False):
                mine = [(g, v) for g, v, f in pts if f is fit]
                fill = colour if fit else "#ffffff"
                for g, v in mine:
                    plot.marker(plot.x(g) + dx, plot.y(v), shape, math.sqrt(28), fill, colour, 1.2)
                if mine:
                    rows.append({"label": label if fit else f"{label}, does not fit memory", "colour": colour,
                                 "shape": shape, "size": math.sqrt(28), "fill": fill, "edge": colour,
                                 "edge_width": 1.2})
        plot.x_ticks(gpus, [f"{g:,}" for g in gpus], grid=False, size=7)
        ticks = svgplot.nice_ticks(plot.y.lo, plot.y.hi)
        labels = [f"{t:g}" for t in ticks]
        plot.y_ticks(ticks, labels, grid=False)
        plot.spines()
        plot.axis_titles("GPUs", ylabel, max(svgplot.text_width(t, svgplot.TICK_FONT) for t in labels))
        plot.legend(rows, "below", size=7, below=LEGEND_BELOW_PT)
    for r in runs:   # names beside the step-time points: above right, or below left past the middle
        x, y = left.x(r["gpus"]) + _dodge(0, len(panels[0][1])), left.y(r["step_s"])
        east = x < (left.left + left.right) / 2
        left.text(x + 4 if east else x - 4, y - 4 if east else y + 10, r["name"], 6,
                  anchor="start" if east else "end", colour="#555555")
    left.title(chart["title"])
    return left


DRAW = {"roofline": roofline, "sweep": sweep, "throughput": throughput, "speedup": speedup, "split": split,
        "catalog": catalog, "bars": bars, "scaling": scaling}


def draw(chart: dict) -> str:
    """The chart's SVG; "" for a chart left out (rooflinec.render.chartdata says why, the report shows it)."""
    if chart.get("left_out"):
        return ""
    return DRAW[chart["kind"]](chart).svg()


def draw_all(charts: list[dict]) -> list[str]:
    """Every chart's SVG, in the order given."""
    return [draw(c) for c in charts]


_ID = re.compile(r'\bid="([^"]+)"')


def inline(svg: str, prefix: str) -> str:
    """An SVG file's text made fit to sit inside HTML: no XML prolog, ids unique per chart."""
    svg = svg[svg.index("<svg"):]
    ids = set(_ID.findall(svg))
    svg = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    return re.sub(r'(href="#|url\(#)([^")]+)',
                  lambda m: m.group(1) + (f"{prefix}-{m.group(2)}" if m.group(2) in ids else m.group(2)),
                  svg)
