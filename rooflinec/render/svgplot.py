"""A small SVG plotter written by hand: log or linear axes, decade ticks and grid, polylines,
markers, bars, legends and escaped text, in points (1/72 in) as matplotlib's SVG backend
writes them.

Why by hand: profiled on `build specs/qwen.yaml` (10 charts: 8 rooflines, the GEMM sweep and
the throughput sweep; 2-core machine at load 1.3), matplotlib cost 0.30 s CPU to import its
Figure and SVG backend and 0.46 s to draw the charts, 0.30 s of it in `savefig` (at load ~21:
0.84 s and 1.6 s), beside 1.2 s to evaluate the report: the full build took 2.45x the import
floor's CPU where JSON alone was 1.24x. These charts are lines, markers and labels whose sizes
the placement code already estimates from character counts; written here, the same 10 take
27 ms CPU, and no build imports matplotlib. Same input, same bytes: coordinates printed to
two decimals, and one id per axes (its clip path's), which `charts.inline` prefixes per chart.
"""

from __future__ import annotations

import math
from html import escape

FONT = "DejaVu Sans, Bitstream Vera Sans, Verdana, Arial, Helvetica, sans-serif"
ASCENT, DESCENT = 0.76, 0.24   # DejaVu Sans above and below the baseline, in em
LINE_SPACING = 1.2             # a line's height, in em (matplotlib's default)
CHAR_EM = 0.6                  # an average character's width, in em
TICK_PT, PAD_PT, TICK_FONT = 3.5, 3.5, 8   # tick length, gap to its label, label size
GRID = "#e4e4e4"
DASHES = {"-": None, "--": (3.7, 1.6), ":": (1.0, 1.65), "-.": (6.4, 1.6, 1.0, 1.6)}   # per unit width


def num(v: float) -> str:
    """A coordinate as text: two decimals, no trailing zeros, no "-0"."""
    text = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def text_width(text: str, size: float) -> float:
    """A line's width in points, estimated from its length."""
    return CHAR_EM * size * len(text)


def decades(lo: float, hi: float) -> list[float]:
    """Every power of ten from lo to hi."""
    return [10.0 ** e for e in range(math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9) + 1)]


def nice_ticks(lo: float, hi: float, most: int = 7) -> list[float]:
    """Round values from lo to hi at a step of 1, 2 or 5 times a power of ten."""
    span = hi - lo
    if span <= 0:
        return [lo]
    step = 10.0 ** math.floor(math.log10(span / most))
    step *= next(m for m in (1, 2, 5, 10) if span / (step * m) <= most)
    first = math.ceil(lo / step - 1e-9)
    return [round(k * step, 12) for k in range(first, math.floor(hi / step + 1e-9) + 1)]


class Scale:
    """Data to points along one axis: `start` at `lo`, `end` at `hi`, log or linear."""

    def __init__(self, lo: float, hi: float, start: float, end: float, log: bool):
        self.lo, self.hi, self.log = lo, hi, log
        self.start, self.end = start, end
        self._a, self._b = (math.log10(lo), math.log10(hi)) if log else (lo, hi)

    def __call__(self, v: float) -> float:
        if self.log:
            if not v > 0:
                return math.nan
            v = math.log10(v)
        return self.start + (v - self._a) / (self._b - self._a) * (self.end - self.start)

    def per_decade(self) -> float:
        """Points one decade spans (log axes)."""
        return abs(self.end - self.start) / (self._b - self._a)


def _dash(style: str, width: float) -> str:
    pattern = DASHES[style]
    return "" if pattern is None else f' stroke-dasharray="{",".join(num(p * width) for p in pattern)}"'


def _marker_points(shape: str, r: float) -> list[tuple[float, float]]:
    """The outline of a filled marker of half-width r around (0, 0), y down (matplotlib's
shapes: a square and triangles as wide as the marker, a diamond a little wider)."""
    if shape == "s":
        return [(-r, -r), (r, -r), (r, r), (-r, r)]
    if shape in "^v":
        k = -1 if shape == "^" else 1
        return [(0, k * r), (r, -k * r), (-r, -k * r)]
    if shape == "D":
        d = 1.2 * r
        return [(0, -d), (d, 0), (0, d), (-d, 0)]
    if shape in "PX":
        a = r / 3
        plus = [(-a, -r), (a, -r), (a, -a), (r, -a), (r, a), (a, a), (a, r), (-a, r), (-a, a),
                (-r, a), (-r, -a), (-a, -a)]
        if shape == "P":
            return plus
        c = math.sqrt(0.5)
        return [((x - y) * c, (x + y) * c) for x, y in plus]
    if shape == "*":
        return [(math.sin(k * math.pi / 5) * (r if k % 2 == 0 else 0.4 * r),
                 -math.cos(k * math.pi / 5) * (r if k % 2 == 0 else 0.4 * r)) for k in range(10)]
    raise ValueError(f"unknown marker {shape!r}")


LEGEND_PAD = 4.0   # a legend's distance from the axes' corner, in points


def _legend_metrics(size: float) -> tuple[float, float, float]:
    """A legend row's height, its handle's length and the gap to its text, in points."""
    return 1.45 * size, 2.0 * size, 0.8 * size


def _legend_columns(entries: list[dict], ncols: int, size: float) -> list[float]:
    rows = math.ceil(len(entries) / ncols)
    _, handle, gap = _legend_metrics(size)
    return [handle + gap + 1.5 * size + max((text_width(e["label"], size) for e in entries[c * rows:(c + 1) * rows]),
                                            default=0) for c in range(ncols)]


def legend_size(entries: list[dict], ncols: int = 1, size: float = 8) -> tuple[float, float]:
    """A legend's (width, height) in points, as `Plot.legend` lays it out."""
    return sum(_legend_columns(entries, ncols, size)), math.ceil(len(entries) / ncols) * _legend_metrics(size)[0]


class Plot:
    """One chart: a figure of `size` inches with an axes box at matplotlib-style fractions
    (left, right, bottom, top of the figure). Elements are drawn in three layers: under the
    data (grid), the data (clipped to the axes) and over it (axes, text)."""

    def __init__(self, size: tuple[float, float], left: float, right: float, bottom: float, top: float):
        self.width, self.height = size[0] * 72, size[1] * 72
        self.left, self.right = left * self.width, right * self.width
        self.top, self.bottom = (1 - top) * self.height, (1 - bottom) * self.height
        self.under: list[str] = []
        self.data: list[str] = []
        self.over: list[str] = []
        self.x = self.y = None
        self.panels = [self]   # the figure's axes, this one first; each clips its own data

    def panel(self, left: float, right: float, bottom: float, top: float) -> Plot:
        """Another axes box in the same figure (fractions of it, as for the first)."""
        other = Plot((self.width / 72, self.height / 72), left, right, bottom, top)
        other.under, other.over, other.panels = self.under, self.over, self.panels
        self.panels.append(other)
        return other

    def limits(self, xlim, ylim, xlog: bool = True, ylog: bool = True) -> None:
        self.x = Scale(*xlim, self.left, self.right, xlog)
        self.y = Scale(*ylim, self.bottom, self.top, ylog)

    # --- primitives, in points -----------------------------------------------------------

    def segment(self, x0, y0, x1, y1, colour: str, width: float = 1.0, style: str = "-",
                layer: list | None = None) -> None:
        (self.over if layer is None else layer).append(
            f'<line x1="{num(x0)}" y1="{num(y0)}" x2="{num(x1)}" y2="{num(y1)}" stroke="{colour}" '
            f'stroke-width="{num(width)}"{_dash(style, width)}/>')

    def path(self, pts: list[tuple[float, float]], colour: str, width: float = 1.0, style: str = "-",
             opacity: float | None = None, layer: list | None = None) -> None:
        """A polyline through points (in points); a NaN point breaks it."""
        runs, run = [], []
        for p in pts:
            if math.isnan(p[0]) or math.isnan(p[1]):
                runs.append(run)
                run = []
            else:
                run.append(p)
        runs.append(run)
        extra = _dash(style, width) + ("" if opacity is None else f' stroke-opacity="{num(opacity)}"')
        for run in (r for r in runs if r):
            if len(run) == 1:
                run = run * 2
            coords = " ".join(f"{num(x)},{num(y)}" for x, y in run)
            (self.data if layer is None else layer).append(
                f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="{num(width)}"{extra}/>')

    def marker(self, x: float, y: float, shape: str, size: float, fill: str, edge: str | None = None,
               edge_width: float = 0.0, layer: list | None = None) -> None:
        """A marker `size` points wide centred at (x, y) in points."""
        if math.isnan(x) or math.isnan(y):
            return
        stroke = f' stroke="{edge}" stroke-width="{num(edge_width)}"' if edge else ""
        r = size / 2
        if shape == "o":
            element = f'<circle cx="{num(x)}" cy="{num(y)}" r="{num(r)}" fill="{fill}"{stroke}/>'
        else:
            coords = " ".join(f"{num(x + dx)},{num(y + dy)}" for dx, dy in _marker_points(shape, r))
            element = f'<polygon points="{coords}" fill="{fill}"{stroke}/>'
        (self.data if layer is None else layer).append(element)

    def rect(self, x0, y0, x1, y1, fill: str, layer: list | None = None) -> None:
        x, y = min(x0, x1), min(y0, y1)
        (self.data if layer is None else layer).append(
            f'<rect x="{num(x)}" y="{num(y)}" width="{num(abs(x1 - x0))}" height="{num(abs(y1 - y0))}" fill="{fill}"/>')

    def text(self, x: float, y: float, text: str, size: float, anchor: str = "start",
             valign: str = "baseline", colour: str | None = None, rotate: float = 0.0) -> None:
        """Text at (x, y) in points; `anchor` start, middle or end; `valign` top, center,
        bottom or baseline of the block of lines (before any rotation, about (x, y))."""
        if text == "":
            return
        lines = str(text).split("\n")
        step = LINE_SPACING * size
        block = step * (len(lines) - 1)
        first = {"top": ASCENT * size, "bottom": -DESCENT * size - block,
                 "center": (ASCENT - DESCENT) * size / 2 - block / 2, "baseline": 0.0}[valign]
        attrs = f'font-size="{num(size)}"' + (f' text-anchor="{anchor}"' if anchor != "start" else "")
        attrs += f' fill="{colour}"' if colour else ""
        attrs += f' transform="rotate({num(-rotate)} {num(x)} {num(y)})"' if rotate else ""
        if len(lines) == 1:
            self.over.append(f'<text x="{num(x)}" y="{num(y + first)}" {attrs}>{escape(lines[0])}</text>')
            return
        spans = "".join(f'<tspan x="{num(x)}" y="{num(y + first + i * step)}">{escape(line)}</tspan>'
                        for i, line in enumerate(lines))
        self.over.append(f"<text {attrs}>{spans}</text>")

    # --- data coordinates ----------------------------------------------------------------

    def line(self, xs, ys, colour: str, width: float = 1.0, style: str = "-", opacity: float | None = None) -> None:
        self.path([(self.x(a), self.y(b)) for a, b in zip(xs, ys)], colour, width, style, opacity)

    def dot(self, x, y, shape: str, size: float, fill: str, edge: str | None = None, edge_width: float = 0.0) -> None:
        self.marker(self.x(x), self.y(y), shape, size, fill, edge, edge_width)

    def hline(self, y, colour: str, width: float = 1.0, style: str = "-") -> None:
        self.path([(self.left, self.y(y)), (self.right, self.y(y))], colour, width, style)

    def vline(self, x, colour: str, width: float = 1.0, style: str = "-") -> None:
        self.path([(self.x(x), self.top), (self.x(x), self.bottom)], colour, width, style)

    # --- axes, title, legend -------------------------------------------------------------

    def title(self, text: str, size: float = 10) -> None:
        """Centred at the top, its size shrunk until its widest line fits the figure (a long
        title was cut off at both sides)."""
        widest = max(text_width(line, 1.0) for line in str(text).split("\n"))
        fit = min(size, 0.96 * self.width / widest) if widest else size
        self.text(self.width / 2, 0.08 * 72, text, fit, anchor="middle", valign="top")

    def spines(self) -> None:
        self.segment(self.left, self.top, self.left, self.bottom, "#000000", 0.8)
        self.segment(self.left, self.bottom, self.right, self.bottom, "#000000", 0.8)

    def x_ticks(self, ticks, labels, grid: bool = True, size: float = TICK_FONT) -> None:
        for t, label in zip(ticks, labels):
            x = self.x(t)
            if grid:
                self.segment(x, self.top, x, self.bottom, GRID, 0.6, layer=self.under)
            self.segment(x, self.bottom, x, self.bottom + TICK_PT, "#000000", 0.8)
            self.text(x, self.bottom + TICK_PT + PAD_PT, label, size, anchor="middle", valign="top")

    def y_ticks(self, ticks, labels, grid: bool = True, size: float = TICK_FONT) -> None:
        for t, label in zip(ticks, labels):
            y = self.y(t)
            if grid:
                self.segment(self.left, y, self.right, y, GRID, 0.6, layer=self.under)
            self.segment(self.left - TICK_PT, y, self.left, y, "#000000", 0.8)
            self.text(self.left - TICK_PT - PAD_PT, y, label, size, anchor="end", valign="center")

    def axis_titles(self, xlabel: str, ylabel: str, widest: float, xrows: int = 1, size: float = 9) -> None:
        """The axis titles, clear of tick labels `widest` points wide (y) and `xrows` lines (x)."""
        gap = TICK_PT + PAD_PT + 4
        self.text((self.left + self.right) / 2, self.bottom + gap + TICK_FONT * LINE_SPACING * xrows,
                  xlabel, size, anchor="middle", valign="top")
        self.text(self.left - gap - widest, (self.top + self.bottom) / 2, ylabel, size,
                  anchor="middle", valign="bottom", rotate=90)

    def log_axes(self, xlabel: str, ylabel: str, tick) -> None:
        """A tick, a label (`tick(value)`) and a grid line at each decade; spines; titles."""
        xs, ys = decades(self.x.lo, self.x.hi), decades(self.y.lo, self.y.hi)
        self.x_ticks(xs, [tick(x) for x in xs])
        labels = [tick(y) for y in ys]
        self.y_ticks(ys, labels)
        self.spines()
        self.axis_titles(xlabel, ylabel, max((text_width(t, TICK_FONT) for t in labels), default=0))

    def legend(self, entries: list[dict], loc: str = "upper left", ncols: int = 1, size: float = 8,
               below: float = 0.0) -> None:
        """Legend rows, each {label, colour, and a line (width, style, opacity) and/or a
        marker (shape, size, fill, edge)}; `loc` a corner inside the axes or "below" them
        (`below` points under the axes' bottom), `size` the text's."""
        rows = math.ceil(len(entries) / ncols)
        row_h, handle, gap = _legend_metrics(size)
        col_w = _legend_columns(entries, ncols, size)
        w, h = legend_size(entries, ncols, size)
        if loc == "below":
            x0, y0 = (self.left + self.right) / 2 - w / 2, self.bottom + below
        else:
            x0 = self.left + LEGEND_PAD if "left" in loc else self.right - LEGEND_PAD - w
            y0 = self.top + LEGEND_PAD if "upper" in loc else self.bottom - LEGEND_PAD - h
        for i, e in enumerate(entries):
            col, row = divmod(i, rows)
            x, y = x0 + sum(col_w[:col]), y0 + (row + 0.5) * row_h
            if e.get("width"):
                self.path([(x, y), (x + handle, y)], e["colour"], e["width"], e.get("style", "-"),
                          e.get("opacity"), layer=self.over)
            if e.get("shape"):
                self.marker(x + handle / 2, y, e["shape"], e.get("size", 6), e.get("fill", e["colour"]),
                            e.get("edge"), e.get("edge_width", 0.0), layer=self.over)
            self.text(x + handle + gap, y, e["label"], size, valign="center")

    def svg(self) -> str:
        """The figure's SVG text (call it on the first panel)."""
        ids = ["axes"] + [f"axes{i}" for i in range(2, len(self.panels) + 1)]
        clips = "".join(f'<clipPath id="{i}"><rect x="{num(p.left)}" y="{num(p.top)}" width="{num(p.right - p.left)}" '
                        f'height="{num(p.bottom - p.top)}"/></clipPath>' for i, p in zip(ids, self.panels))
        return "".join((
            '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n',
            f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{num(self.width)}pt" '
            f'height="{num(self.height)}pt" viewBox="0 0 {num(self.width)} {num(self.height)}" '
            f'font-family="{FONT}" stroke-linejoin="round">\n',
            f"<defs>{clips}</defs>\n",
            f'<rect width="{num(self.width)}" height="{num(self.height)}" fill="#ffffff"/>\n',
            *(e + "\n" for e in self.under),
            *(f'<g clip-path="url(#{i})">\n' + "".join(e + "\n" for e in p.data) + "</g>\n"
              for i, p in zip(ids, self.panels)),
            *(e + "\n" for e in self.over),
            "</svg>\n"))
