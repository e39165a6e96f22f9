"""Rendering: one Jinja2 environment, filters in one place; templates only format."""

from __future__ import annotations

import json
import math
import re
import zlib
from functools import cache, lru_cache

import jinja2
import sympy as sp
from markupsafe import Markup
from markupsafe import escape

from rooflinec.cost import bounds
from rooflinec.base.errors import one_line, spelled
from rooflinec.render.formats import CHARTED, FORMATS
from rooflinec.base.quantities import RESOLUTION_RULE, gib, resolved, seconds, si, sig
from rooflinec.base.vocabulary import CATEGORIES
from rooflinec.render.chartdata import for_section, slug
from rooflinec.render import chartdata, mathml
from rooflinec.render.mdtables import narrow
from rooflinec.render.charts import DEVICE_COLOURS, draw_all, inline


@lru_cache(maxsize=4096)
def formula(expr) -> str:
    """A sympy expression as compact text: 2·M·d_model/(b·(M + d_model))."""
    if expr is None:
        return "—"
    expr = sp.sympify(expr)
    if expr == sp.oo:
        return "∞"
    text = _sstr(expr).replace("**", "^").replace("*", "·")
    return text.replace("Min(", "min(").replace("Max(", "max(")


@lru_cache(maxsize=4096)
def _sstr(expr) -> str:
    """sympy's printer is slow; Markdown and JSON print the same expressions, so print once."""
    return sp.sstr(expr)


def fixed(x, decimals: int = 1) -> str:
    return "—" if x is None else f"{x:,.{decimals}f}"


def pct(x, decimals: int = 1) -> str:
    return "—" if x is None else f"{100 * x:.{decimals}f}%"


# the unit policy for bytes, stated in every report: bytes moved in decimal units (GB),
# memory held (capacity, weights, KV cache that must fit) in binary units (GiB)
def anchor(title: str) -> str:
    """A Markdown heading's link target as GitHub makes it: lower case, punctuation dropped,
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", str(title).lower()).replace(" ", "-")


FILTERS = {"anchor": anchor, "formula": formula, "sig": sig, "fixed": fixed, "pct": pct, "si": si, "gib": gib,
           "seconds": seconds, "resolved": resolved, "traffic": lambda x: si(x, "B"), "capacity": gib}


def symbol(name: str):
    """A symbol of the alphabet by name, for typesetting (never parses text)."""
    return sp.Symbol(name)


def _bytecode_cache(kind: str, filters: dict, finalize=None):
    """Jinja's own cache of compiled templates (a private per-user temp folder, keyed by the
    template source's checksum): compiling the templates is ~0.05 s of every build. Compiled
    code holds the environment's escaping (HTML, Markdown or terminal text), its finalize (a
    call compiled in only where one is set) and which filters take the context, so the file
    names carry all three."""
    passes = sorted((name, str(getattr(f, "jinja_pass_arg", ""))) for name, f in filters.items())
    key = zlib.crc32(repr((kind, getattr(finalize, "__name__", None), passes)).encode())
    try:
        return jinja2.FileSystemBytecodeCache(pattern=f"__rooflinec_{key:08x}_%s.cache")
    except (OSError, RuntimeError):
        return None


class Verbatim(str):
    """Markdown that a filter made (a code span, a formula) and that is not escaped again."""


# characters that would start a link, code, HTML or an entity inside a line, or end a table
# cell (emphasis, * and _, is left alone: it cannot break the page, and names are full of _)
_MD_SPECIAL = re.compile(r"([\\`\[\]<>|&])")


def md_text(value):
    """Every value a Markdown template prints, as text: markup in a spec's names is shown, not
    obeyed (a `|` would end a table cell, a newline the row, `<b>` would be HTML)."""
    if isinstance(value, (Verbatim, Markup)) or not isinstance(value, str):   # Markup: | safe
        return value
    return _MD_SPECIAL.sub(r"\\\1", one_line(value))


def md_code(value) -> Verbatim:
    """`value` as a Markdown code span, however many backticks it holds; `|` escaped, which a
    table needs even inside code."""
    text = one_line(str(value)).replace("|", "\\|")
    ticks = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return Verbatim(f"{ticks}{pad}{text}{pad}{ticks}")


# characters an input's text may carry that no page shows as text: C0 controls but tab and the
# line breaks, DEL, C1 (ESC, NUL and \x9b open terminal escapes), lone surrogates
_HTML_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def _finalize_html(value):
    """HTML: a value's control characters spelled out (\\x1b) before it is escaped; markup a
    filter made is the page's own, left as it is."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return spelled(value, _HTML_UNSAFE)
    return value


def _finalize_text(value):
    """Terminal text: control characters (escape sequences, line breaks) spelled out."""
    return one_line(value) if isinstance(value, str) else value


def _mark(fn):
    """A filter never folded at compile time: the prose is written once for every format, so
    its marks are looked up when it renders."""
    return jinja2.pass_context(lambda _context, text: fn(text))


def _html(tag: str):
    def mark(text):
        return Markup(f"<{tag}>{escape(text)}</{tag}>")
    return mark


# Markup in prose written once for both formats (templates/prose/): a term, a variable,
# a variable with a star (B* where they meet).
def _md_sub(base, index):
    """Markdown writes a one-letter subscript inline (Bc), a longer one after '_' (M_sram)."""
    return f"{base}{index}" if len(index) == 1 else f"{base}_{index}"


def _html_sub(base, index):
    return Markup(f"<var>{escape(base)}<sub>{escape(index)}</sub></var>")


_MD = {"strong": lambda text: f"**{text}**", "var": str, "code": lambda text: f"`{text}`",
       "star": lambda text: f"{text}\\*"}
MD_MARKS = {**{name: _mark(fn) for name, fn in _MD.items()},      # terminal text
            "sub": jinja2.pass_context(lambda _c, base, index: _md_sub(base, index))}
# Markdown reports: the marked text escaped (md_text), the mark itself kept (Verbatim)
MD_REPORT_MARKS = {**{name: _mark(lambda text, fn=fn: Verbatim(fn(md_text(text))))
                      for name, fn in _MD.items()},
                   "code": _mark(md_code),
                   "sub": jinja2.pass_context(lambda _c, base, index:
                                              Verbatim(_md_sub(md_text(base), md_text(index))))}
HTML_MARKS = {"strong": _mark(_html("strong")), "var": _mark(_html("var")),
              "code": _mark(_html("code")),
              "star": _mark(lambda text: _html("var")(text) + "*"),
              "sub": jinja2.pass_context(lambda _c, base, index: _html_sub(base, index))}


@cache
def environment(autoescape: bool, markdown: bool = False) -> jinja2.Environment:
    """HTML (autoescape), Markdown (`md_text` on every value) or terminal text."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rooflinec.render", "templates"),
        autoescape=autoescape, undefined=jinja2.StrictUndefined,
        finalize=_finalize_html if autoescape else md_text if markdown else _finalize_text,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(FILTERS)
    env.filters["for_section"] = for_section
    if autoescape:
        env.filters.update(HTML_MARKS)
    elif markdown:
        env.filters.update({**MD_REPORT_MARKS, "formula": lambda e: Verbatim(formula(e))})
    else:
        env.filters.update(MD_MARKS)
    env.globals["rules"] = bounds.RULES
    env.globals["resolution_rule"] = RESOLUTION_RULE
    if autoescape:
        env.filters.update({"math": mathml.mathml, "symbol": symbol, "slug": slug})
        env.globals.update({"identity": mathml.identity, "cancelled": mathml.cancelled,
                            "categories": CATEGORIES})
    env.bytecode_cache = _bytecode_cache("html" if autoescape else "md" if markdown else "text",
                                         env.filters, env.finalize)
    return env


def chart_slots(report: dict) -> list[list[dict]]:
    """Every chart of the report, per section: its file path (under <stem>/), caption, alt
    text and the data to draw it from."""
    return [[{"path": f"{report['study']}/{c['name']}.svg", "title": c["title"], "alt": c["alt"],
              "kind": c["kind"], "spec": c, "left_out": c.get("left_out")} for c in section]
            for section in chartdata.plan(report)]


def markdown(report: dict, charts: list[list[dict]] | None = None) -> str:
    """Markdown links the chart files; it never holds their SVG."""
    charts = charts if charts is not None else [[] for _ in report["sections"]]
    text = environment(False, markdown=True).get_template("md/report.md.j2").render(
        r=report, charts=charts)
    return narrow(text, [d["key"] for d in report["devices"]])


def _token(i: int, j: int) -> str:
    return f"<!--rooflinec chart {i}.{j}-->"


def html_text(report: dict, charts: list[list[dict]]) -> str:
    """Self-contained HTML, formulas as MathML, with a marker where each chart's SVG goes."""

    marked = [[dict(c, svg=Markup(_token(i, j))) for j, c in enumerate(section)]
              for i, section in enumerate(charts)]
    colours = {d["key"]: DEVICE_COLOURS[i % len(DEVICE_COLOURS)] for i, d in enumerate(report["devices"])}
    return environment(True).get_template("html/report.html.j2").render(
        r=report, charts=marked, colours=colours)


def inline_charts(text: str, charts: list[list[dict]], svgs: list[list[str]]) -> str:
    """The HTML with each chart's SVG in place of its marker (ids made unique per chart)."""
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
    """The report's numbers; each section's chart points, drawn from those numbers, and the
    HTML calculator's JavaScript stay out."""
    report = {k: v for k, v in report.items() if k != "calculator"}
    if "sections" in report:
        report = dict(report, sections=[{k: v for k, v in s.items() if k != "chart_points"}
                                        for s in report["sections"]])
    return _compact(json.dumps(report, default=_plain, indent=1, ensure_ascii=False)) + "\n"


def draw_charts(report: dict, heard=None) -> list[list[str]]:
    """Every chart's SVG, per section; `heard(svgs)` hears of each section's as it is drawn."""
    drawn = []
    for section in chart_slots(report):
        drawn.append(draw_all([c["spec"] for c in section]))
        if heard is not None:
            heard(drawn[-1])
    return drawn


def render_many(report: dict, formats, svgs=None) -> dict[str, str]:
    """Several formats' files, as {path relative to the output folder: text}.

    Markdown comes with its chart files (<stem>/<chart>.svg, which it links), HTML inlines
    the same charts, JSON is one file. `svgs`, per section, are the charts already drawn
    (`draw_charts`); without them, the charts are drawn here.
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
    if svgs is None:
        svgs = [draw_all([c["spec"] for c in section]) for section in slots]
    if "html" in formats:
        out[f"{stem}.html"] = inline_charts(out[f"{stem}.html"], slots, svgs)
    if "md" in formats:
        out.update({c["path"]: svg for section, drawn in zip(slots, svgs)
                    for c, svg in zip(section, drawn) if not c["left_out"]})
    return out
