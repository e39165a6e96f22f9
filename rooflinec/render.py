"""Rendering: one Jinja2 environment, filters in one place; templates only format."""

from __future__ import annotations

import json
import math
import re
from functools import cache, lru_cache

import jinja2
import sympy as sp

from rooflinec.charts import CHARTED

FORMATS = ("md", "html", "json")


@lru_cache(maxsize=4096)
def formula(expr) -> str:
    """A sympy expression as compact text: 2·M·d_model/(b·(M + d_model))."""
    if expr is None:
        return "—"
    expr = sp.sympify(expr)
    if expr == sp.oo:
        return "∞"
    return _sstr(expr).replace("**", "^").replace("*", "·")


@lru_cache(maxsize=4096)
def _sstr(expr) -> str:
    """sympy's printer is slow; Markdown and JSON print the same expressions, so print once."""
    return sp.sstr(expr)


def sig(x, digits: int = 4) -> str:
    """`digits` significant figures, no exponent for everyday magnitudes."""
    if x is None:
        return "—"
    if x == 0 or not math.isfinite(x):
        return str(x)
    mag = math.floor(math.log10(abs(x)))
    if -4 <= mag < 15:
        return f"{x:,.{max(digits - 1 - mag, 0)}f}"
    return f"{x:.{digits - 1}e}"


def fixed(x, decimals: int = 1) -> str:
    return "—" if x is None else f"{x:,.{decimals}f}"


def pct(x, decimals: int = 1) -> str:
    return "—" if x is None else f"{100 * x:.{decimals}f}%"


_SI = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(x, unit: str = "", digits: int = 4) -> str:
    """Decimal prefixes: 1.555e12 B/s -> '1.555 TB/s'."""
    if x is None:
        return "—"
    for factor, prefix in _SI:
        if abs(x) >= factor:
            return f"{sig(x / factor, digits)} {prefix}{unit}"
    return f"{sig(x, digits)} {unit}".rstrip()


def gib(x, digits: int = 4) -> str:
    """Binary bytes, the unit memory is sold in: 2^30 B = 1 GiB."""
    for factor, prefix in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(x) >= factor:
            return f"{sig(x / factor, digits)} {prefix}"
    return f"{sig(x, digits)} B"


def seconds(x, digits: int = 4) -> str:
    for factor, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if abs(x) >= factor:
            return f"{sig(x / factor, digits)} {unit}"
    return f"{sig(x, digits)} s"


FILTERS = {"formula": formula, "sig": sig, "fixed": fixed, "pct": pct, "si": si, "gib": gib,
           "seconds": seconds}


def symbol(name: str):
    """A symbol of the alphabet by name, for typesetting (never parses text)."""
    return sp.Symbol(name)


def _bytecode_cache():
    """Jinja's own cache of compiled templates (a private per-user temp folder, keyed by the
    template source's checksum): compiling the templates is ~0.05 s of every build."""
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


@cache
def environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rooflinec", "templates"), bytecode_cache=_bytecode_cache(),
        autoescape=autoescape, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(FILTERS)
    if autoescape:
        from rooflinec import mathml
        from rooflinec.chartdata import slug
        env.filters.update({"math": mathml.mathml, "symbol": symbol, "slug": slug})
        env.globals.update({"identity": mathml.identity, "cancelled": mathml.cancelled})
    return env


def draw_charts(report: dict, painter=None) -> list[list[dict]]:
    """Every chart of the report, per section: its file path (under <stem>/), caption and SVG.
    A charts.Painter, if given, draws them in its own process."""
    from rooflinec import chartdata, charts
    plan = chartdata.plan(report)
    flat = [c for section in plan for c in section]
    svgs = iter(painter.draw(flat) if painter is not None and flat else charts.draw_all(flat))
    return [[{"path": f"{report['study']}/{c['name']}.svg", "title": c["title"], "alt": c["alt"],
              "kind": c["kind"], "svg": next(svgs)} for c in section]
            for section in plan]


def markdown(report: dict, charts: list[list[dict]] | None = None) -> str:
    charts = charts if charts is not None else [[] for _ in report["sections"]]
    return environment(False).get_template("md/report.md.j2").render(r=report, charts=charts)


def html(report: dict, charts: list[list[dict]]) -> str:
    """Self-contained HTML: the charts' SVG inline (ids made unique), formulas as MathML."""
    from markupsafe import Markup

    from rooflinec.chartdata import slug
    from rooflinec.charts import DEVICE_COLOURS, inline
    inlined = [[dict(c, svg=Markup(inline(c["svg"], f"c{i}-{j}-{slug(c['kind'])}")))
                for j, c in enumerate(section)] for i, section in enumerate(charts)]
    colours = {d["key"]: DEVICE_COLOURS[i % len(DEVICE_COLOURS)] for i, d in enumerate(report["devices"])}
    return environment(True).get_template("html/report.html.j2").render(
        r=report, charts=inlined, colours=colours)


def _plain(obj):
    if isinstance(obj, sp.Basic):
        return "oo" if obj == sp.oo else _sstr(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"cannot put {type(obj).__name__} in a JSON report")


_ITEM = r'(?:-?\d[\d.eE+-]*|"[^"\\\n]*"|null|true|false)'
_SCALAR_LIST = re.compile(r"\[\n\s*(" + _ITEM + r"(?:,\n\s*" + _ITEM + r")*)\n\s*\]")


def _compact(text: str) -> str:
    """Lists of plain scalars on one line (a sweep's arrays), everything else indented."""
    return _SCALAR_LIST.sub(lambda m: "[" + ", ".join(re.findall(_ITEM, m.group(1))) + "]", text)


def to_json(report: dict) -> str:
    return _compact(json.dumps(report, default=_plain, indent=1, ensure_ascii=False)) + "\n"


def render(report: dict, fmt: str, charts: list[list[dict]] | None = None) -> dict[str, str]:
    """One format's files, as {path relative to the output folder: text}.

    Markdown comes with its chart files (<stem>/<chart>.svg, which it links); HTML inlines
    the same charts; JSON is one file. Pass `charts` to share one drawing between formats.
    """
    stem = report["study"]
    if fmt in CHARTED and charts is None:
        charts = draw_charts(report)
    if fmt == "md":
        return {f"{stem}.md": markdown(report, charts),
                **{c["path"]: c["svg"] for section in charts for c in section}}
    if fmt == "html":
        return {f"{stem}.html": html(report, charts)}
    if fmt == "json":
        return {f"{stem}.json": to_json(report)}
    raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")


def render_many(report: dict, formats, painter=None) -> dict[str, str]:
    """Several formats' files; charts are drawn once for all of them."""
    charts = draw_charts(report, painter) if any(f in CHARTED for f in formats) else None
    out: dict[str, str] = {}
    for fmt in formats:
        out.update(render(report, fmt, charts))
    return out
