"""Rendering: one Jinja2 environment, filters in one place; templates only format."""

from __future__ import annotations

import json
import math
import re
from functools import cache, lru_cache

import jinja2
import sympy as sp

from rooflinec.formats import CHARTED, FORMATS
from rooflinec.ir import CATEGORIES


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
        env.globals.update({"identity": mathml.identity, "cancelled": mathml.cancelled,
                            "categories": CATEGORIES})
    return env


def chart_slots(report: dict) -> list[list[dict]]:
    """Every chart of the report, per section: its file path (under <stem>/), caption, alt
    text and the data to draw it from."""
    from rooflinec import chartdata
    return [[{"path": f"{report['study']}/{c['name']}.svg", "title": c["title"], "alt": c["alt"],
              "kind": c["kind"], "spec": c, "left_out": c.get("left_out")} for c in section]
            for section in chartdata.plan(report)]


def markdown(report: dict, charts: list[list[dict]] | None = None) -> str:
    """Markdown links the chart files; it never holds their SVG."""
    charts = charts if charts is not None else [[] for _ in report["sections"]]
    return environment(False).get_template("md/report.md.j2").render(r=report, charts=charts)


def _token(i: int, j: int) -> str:
    return f"<!--rooflinec chart {i}.{j}-->"


def html_text(report: dict, charts: list[list[dict]]) -> str:
    """Self-contained HTML, formulas as MathML, with a marker where each chart's SVG goes."""
    from markupsafe import Markup

    from rooflinec.charts import DEVICE_COLOURS
    marked = [[dict(c, svg=Markup(_token(i, j))) for j, c in enumerate(section)]
              for i, section in enumerate(charts)]
    colours = {d["key"]: DEVICE_COLOURS[i % len(DEVICE_COLOURS)] for i, d in enumerate(report["devices"])}
    return environment(True).get_template("html/report.html.j2").render(
        r=report, charts=marked, colours=colours)


def inline_charts(text: str, charts: list[list[dict]], svgs: list[list[str]]) -> str:
    """The HTML with each chart's SVG in place of its marker (ids made unique per chart)."""
    from rooflinec.chartdata import slug
    from rooflinec.charts import inline
    for i, (section, drawn) in enumerate(zip(charts, svgs)):
        for j, (c, svg) in enumerate(zip(section, drawn)):
            if c["left_out"]:   # the template wrote why instead of a marker
                continue
            text = text.replace(_token(i, j), inline(svg, f"c{i}-{j}-{slug(c['kind'])}"), 1)
    return text


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


def render_many(report: dict, formats, svgs=None) -> dict[str, str]:
    """Several formats' files, as {path relative to the output folder: text}.

    Markdown comes with its chart files (<stem>/<chart>.svg, which it links), HTML inlines
    the same charts, JSON is one file. `svgs`, per section, are charts already drawn, or a
    callable that waits for a Painter's: every format's text is rendered before it is called,
    so the painter draws meanwhile. Without either, the charts are drawn here.
    """
    stem = report["study"]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown format {unknown[0]!r}; choose from {', '.join(FORMATS)}")
    slots = chart_slots(report) if any(f in CHARTED for f in formats) else []
    text = {"md": markdown, "html": html_text, "json": lambda r, _: to_json(r)}
    out = {f"{stem}.{fmt}": text[fmt](report, slots) for fmt in formats}
    if not slots:
        return out
    if callable(svgs):
        svgs = svgs()
    if svgs is None:
        from rooflinec.charts import draw_all
        svgs = [draw_all([c["spec"] for c in section]) for section in slots]
    if "html" in formats:
        out[f"{stem}.html"] = inline_charts(out[f"{stem}.html"], slots, svgs)
    if "md" in formats:
        out.update({c["path"]: svg for section, drawn in zip(slots, svgs)
                    for c, svg in zip(section, drawn) if not c["left_out"]})
    return out


def render(report: dict, fmt: str) -> dict[str, str]:
    """One format's files (see render_many)."""
    return render_many(report, [fmt])
