"""Every study's HTML report, opened from disk in headless Chromium (Debian's `chromium`).

Driven over the Chrome DevTools Protocol on --remote-debugging-pipe (NUL-separated JSON on
file descriptors 3 and 4), so the test needs no package beyond the browser. It checks: no
console errors, no exceptions, no failed requests and no request leaving the file; tables,
charts and formulas present and visible (MathML laid out as math, not as text); no
horizontal overflow on a phone-width screen; and a screenshot that is not blank. At 1,000 and
1,600 px (`test_report_fits_the_page`): nothing sticks out of the page, no stray scrollbar, and
at 1,600 px every table fits its box (at 1,000 px a table may scroll inside its own box).

Outside CI a missing browser skips the test; with CI set it fails.
"""

from __future__ import annotations

import base64
import glob
import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rooflinec.render import chartdata
from rooflinec.cli import report
from rooflinec.spec import load as spec
from rooflinec.cli.app import run

pytestmark = pytest.mark.slow   # builds every shipped study (or opens them in a browser)

ROOT = Path(__file__).resolve().parent.parent
STUDIES = sorted(glob.glob(str(ROOT / "specs" / "*.yaml")))
SHOTS = os.environ.get("ROOFLINEC_SCREENSHOTS")   # a folder to keep the screenshots in, if set


def chromium() -> str:
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if exe:
        return exe
    reason = "headless Chromium not found (install Debian's package: apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {reason}")
    pytest.skip(reason)


class Browser:
    """Chromium with the DevTools protocol on a pipe; one page (flattened session)."""

    def __init__(self, exe: str, profile: Path):
        to_child, self._tx = os.pipe()      # we write commands to fd 3 of the child
        self._rx, from_child = os.pipe()    # the child writes replies and events to fd 4
        # bash (dash takes one-digit fds only) puts the pipe ends on fds 3 and 4, then becomes the browser
        shell = ["bash", "-c", f'exec "$@" 3<&{to_child} 4>&{from_child}', "sh"]
        self.proc = subprocess.Popen(
            [*shell, exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", "--mute-audio",
             f"--user-data-dir={profile}", "about:blank"],
            pass_fds=(to_child, from_child),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buf, self._id, self.events = b"", 0, []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no reply from Chromium")
            chunk = os.read(self._rx, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, timeout: float = 30, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._tx, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def page(self, method: str, **params):
        return self.call(method, session=self.session, **params)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events:
                if e.get("method") == method:
                    return e
            self.events.append(self._read(deadline))

    def evaluate(self, expression: str):
        res = self.page("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise AssertionError(f"page script failed: {res['exceptionDetails']}")
        return res["result"]["value"]

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._tx)
        os.close(self._rx)


# What a reader must see: each kind of element, how many are laid out with a visible box.
CENSUS = """(() => {
  const visible = el => { const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
  const count = sel => { const all = [...document.querySelectorAll(sel)];
    return {total: all.length, visible: all.filter(visible).length}; };
  const frac = document.querySelector('math mfrac');
  const fracBox = frac ? frac.getBoundingClientRect() : null;
  const mi = document.querySelector('math mi');
  return {
    tables: count('main table'), charts: count('figure.chart:not(.calc-chart) svg'), math: count('math'),
    toc: count('nav.toc a'), scripts: document.querySelectorAll('script').length,
    // MathML laid out as math: a fraction is taller than one identifier on its own line
    fraction_height: fracBox ? fracBox.height : 0,
    identifier_height: mi ? mi.getBoundingClientRect().height : 0,
    frac_display: frac ? getComputedStyle(frac).display : null,
    chart_text: [...document.querySelectorAll('figure.chart:not(.calc-chart) svg text')].length,
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    title: document.title,
  };
})()"""


# The page's only scripts are the calculator's: its data (JSON, never run) and its code, inline.
ONLY_CALCULATOR = """[...document.scripts].every(s => !s.src &&
  (s.id === 'calc-data' && s.type === 'application/json' || s.id === 'calc-script'))"""


def calculated(built: Path, study: str) -> bool:
    """Whether the report opens with a summary some device answers, and so carries the calculator."""
    summary = json.loads((built / f"{study}.json").read_text())["summary"]
    return summary is not None and any(not d["lacks"] for d in summary["devices"])


def non_blank(png: bytes) -> tuple[float, float]:
    """(standard deviation of grey levels, fraction of pixels unlike the background)."""
    import matplotlib.image as mpimg
    img = mpimg.imread(io.BytesIO(png), format="png")[..., :3].mean(axis=2)
    background = float(img[0, 0])
    return float(img.std()), float((abs(img - background) > 0.1).mean())


def problems(events: list[dict]) -> list[str]:
    """Console errors, exceptions, failed requests, requests that leave the file system."""
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            out.append(f"exception: {p['exceptionDetails'].get('text')}")
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(f"console.{p['type']}: {[a.get('value') for a in p.get('args', [])]}")
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}")
        elif m == "Network.loadingFailed":
            out.append(f"request failed: {p.get('errorText')} ({p.get('requestId')})")
        elif m == "Network.requestWillBeSent" and not p["request"]["url"].startswith(("file:", "data:")):
            out.append(f"network fetch: {p['request']['url']}")
        elif m == "Page.javascriptDialogOpening":
            out.append(f"dialog opened: {p.get('message')}")
    return out


# on load every detail is folded but, in a study without a summary, its first section
OPEN_ON_LOAD = """(() => {
  const all = [...document.querySelectorAll('details.detail')];
  const first = all.find(d => !['devices', 'model', 'conventions', 'symbols'].includes(d.parentElement.id));
  return all.every(d => d.open === (!document.getElementById('summary') && d === first));
})()"""


def open_report(browser: Browser, path: Path, width: int, height: int) -> tuple[dict, bytes]:
    browser.events.clear()
    browser.page("Emulation.setDeviceMetricsOverride", width=width, height=height,
                 deviceScaleFactor=1, mobile=width < 600)
    browser.page("Page.navigate", url=path.as_uri())
    browser.wait_for("Page.loadEventFired")
    # the detail folds under the answers (a study without a summary opens only its first
    # section, which holds its answer); a reader opens it, and then all of it must show and fit
    assert browser.evaluate(OPEN_ON_LOAD)
    browser.evaluate("document.querySelectorAll('details.detail').forEach(d => d.open = true) || true")
    census = browser.evaluate(CENSUS)
    shot = browser.page("Page.captureScreenshot", format="png")["data"]
    return census, base64.b64decode(shot)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(chromium(), tmp_path_factory.mktemp("chromium-profile"))
    for domain in ("Page", "Runtime", "Log", "Network"):
        b.page(f"{domain}.enable")
    yield b
    b.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reports")
    assert run(["build", *STUDIES, "--out", str(out), "--format", "html,json"], io.StringIO(), io.StringIO()) == 0
    return out


@pytest.mark.parametrize("study", [Path(s).stem for s in STUDIES])
@pytest.mark.parametrize("width, height", [(1280, 900), (390, 844)], ids=["desktop", "phone"])
def test_report_in_chromium(browser, built, study, width, height):
    census, png = open_report(browser, built / f"{study}.html", width, height)
    assert problems(browser.events) == []
    assert census["scripts"] == (2 if calculated(built, study) else 0)
    assert browser.evaluate(ONLY_CALCULATOR), "a script other than the calculator's, or one with a src"
    has_charts = any(chartdata.plan(report.build(spec.load_study(f"specs/{study}.yaml"))))
    for kind in ("tables", "charts", "math", "toc"):
        if kind == "charts" and not has_charts:
            assert census[kind]["total"] == 0
            continue
        assert census[kind]["total"] > 0, kind
        assert census[kind]["visible"] == census[kind]["total"], (kind, census[kind])
    assert census["chart_text"] > 0 or not has_charts            # SVG text, not glyph paths
    assert census["frac_display"] in ("math", "block math")              # MathML layout, not inline text
    assert census["fraction_height"] > 1.5 * census["identifier_height"] > 0
    assert census["overflow"] <= 0, "the page scrolls sideways; wide content needs a scroll wrapper"
    spread, inked = non_blank(png)
    assert spread > 0.02 and inked > 0.01, (spread, inked)
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        (Path(SHOTS) / f"{study}-{width}.png").write_bytes(png)


def test_hostile_model_name_stays_text(browser, tmp_path):
    """A model named like a script tag shows as text and runs nothing."""
    from test_html import hostile_study
    study = hostile_study(tmp_path)
    assert run(["build", str(study), "--out", str(tmp_path / "out"), "--format", "html"],
               io.StringIO(), io.StringIO()) == 0
    census, _ = open_report(browser, tmp_path / "out" / f"{study.stem}.html", 1280, 900)
    assert problems(browser.events) == []
    assert browser.evaluate(ONLY_CALCULATOR)
    text = browser.evaluate("document.querySelector('header').innerText")
    assert "<script>alert(1)</script>" in text


# Where the page is wider than what it holds: elements sticking out past the right edge (outside
# a box that scrolls), boxes that scroll down by a pixel or two (stray scrollbars), boxes that
# scroll sideways and are not meant to (tables' .scroll boxes and formula boxes are), tables
# wider than their box.
FIT = """(() => {
  const W = document.documentElement.clientWidth, out = {page: document.documentElement.scrollWidth - W,
    sticking: [], down: [], sideways: [], tables: []};
  const where = el => (el.closest('section') || {}).id + ' ' + el.tagName.toLowerCase() +
    (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ').join('.') : '');
  const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const inScroller = el => { for (let p = el.parentElement; p; p = p.parentElement) if (scrolls(p)) return true; return false; };
  // an inline <svg> clips what it draws to its own box, so its parts are not looked at
  for (const el of document.body.querySelectorAll(':not(svg *)')) {
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    if (r.width > 0 && r.right > W + 1 && !inScroller(el)) out.sticking.push(where(el) + ' ' + Math.round(r.right));
    if (['auto', 'scroll'].includes(s.overflowY) && el.scrollHeight > el.clientHeight) out.down.push(where(el));
    if (scrolls(el) && el.scrollWidth > el.clientWidth &&
        !el.matches('.scroll, div.eq, dd, .op p')) out.sideways.push(where(el));
  }
  for (const box of document.querySelectorAll('.scroll'))
    if (box.scrollWidth > box.clientWidth + 1) out.tables.push(where(box) + ' ' + box.scrollWidth + ' > ' + box.clientWidth);
  return out;
})()"""


@pytest.mark.slow
@pytest.mark.parametrize("study", [Path(s).stem for s in STUDIES])
@pytest.mark.parametrize("width", [1000, 1600])
def test_report_fits_the_page(browser, built, study, width):
    """At 1,000 and 1,600 px: no element overflows the page, no stray scrollbar; at 1,600 px
    no table is wider than its box. Screenshots go to ROOFLINEC_SCREENSHOTS when set."""
    census, png = open_report(browser, built / f"{study}.html", width, 900)
    fit = browser.evaluate(FIT)
    assert fit["page"] <= 0 and fit["sticking"] == [], fit["sticking"][:5]
    assert fit["down"] == [], f"boxes with a vertical scrollbar: {fit['down'][:5]}"
    assert fit["sideways"] == [], f"boxes that scroll sideways: {fit['sideways'][:5]}"
    if width >= 1600:
        assert fit["tables"] == [], f"tables wider than their box: {fit['tables']}"
    spread, inked = non_blank(png)
    assert spread > 0.02 and inked > 0.01, (spread, inked)
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        (Path(SHOTS) / f"{study}-{width}.png").write_bytes(png)


def _read(browser, ids=("calc-tokens", "calc-step", "calc-ttft", "calc-max", "calc-bound")) -> dict:
    return browser.evaluate("({%s})" % ", ".join(
        f"'{i}': [document.getElementById('{i}').textContent, +document.getElementById('{i}').dataset.value]"
        for i in ids))


def _set(browser, element: str, value) -> None:
    """Set a control as a reader would and fire the event the page listens for."""
    event = "change" if element in ("calc-device", "calc-tp", "calc-weights", "calc-kv") else "input"
    browser.evaluate(f"(() => {{ const e = document.getElementById('{element}'); e.value = {json.dumps(str(value))}; "
                     f"e.dispatchEvent(new Event('{event}')); return true; }})()")


CALCULATED = [Path(s).stem for s in STUDIES]


@pytest.mark.slow
@pytest.mark.parametrize("study", CALCULATED)
def test_calculator_equals_the_summary(browser, built, study):
    """Move the sliders to the summary's points on every device: the page's own figures
    (evaluated from sympy's JavaScript) equal the report's, to 1e-9, and print the same
    four significant figures; moving the slider changes them."""
    from rooflinec.base.quantities import seconds, sig
    if not calculated(built, study):
        pytest.skip(f"{study} has no summary a device answers, so no calculator")
    summary = json.loads((built / f"{study}.json").read_text())["summary"]
    open_report(browser, built / f"{study}.html", 1280, 900)
    assert problems(browser.events) == []
    assert browser.evaluate("!document.getElementById('calculator').hidden")
    shown = browser.evaluate("[...document.querySelectorAll('#calc-device option')].map(o => o.value)")
    devices = [d for d in summary["devices"] if not d["lacks"]]
    assert shown == [d["device"] for d in devices]
    for dev in devices:
        _set(browser, "calc-device", dev["device"])
        for c in dev["decode"]:
            _set(browser, "calc-batch-slider", 4)                     # B = 16: the figure moves
            moved = _read(browser)["calc-tokens"][1]
            _set(browser, "calc-batch-slider", 0)                     # back to B = 1
            _set(browser, "calc-context", c["context"])
            got = _read(browser)
            one = c["batch_1"]
            assert moved != got["calc-tokens"][1]
            assert got["calc-tokens"][1] == pytest.approx(one["tokens_per_s"], rel=1e-9)
            assert got["calc-tokens"][0].startswith(f"≤ {sig(one['tokens_per_s'])}")
            assert got["calc-step"][0] == seconds(one["time_s"])
            assert got["calc-bound"][0].startswith(one["bound"] + "-bound")
            assert got["calc-max"][1] == c["max_batch"]
            if c["at_max_batch"]:
                _set(browser, "calc-batch", c["max_batch"])
                top = _read(browser)["calc-tokens"]
                assert top[1] == pytest.approx(c["at_max_batch"]["tokens_per_s"], rel=1e-9)
                assert top[0] == f"≤ {sig(c['at_max_batch']['tokens_per_s'])}"   # and it fits
        for p in dev["prefill"]:
            _set(browser, "calc-prompt", p["prompt"])
            ttft = _read(browser)["calc-ttft"]
            assert ttft[1] == pytest.approx(p["time_s"], rel=1e-9)
            assert ttft[0].startswith(seconds(p["time_s"]))
    assert problems(browser.events) == []


def test_without_javascript_the_report_is_the_static_one(browser, built):
    """Scripts off: the calculator stays hidden, the summary's table is there and visible."""
    browser.page("Emulation.setScriptExecutionDisabled", value=True)
    try:
        open_report(browser, built / "qwen.html", 1280, 900)
    finally:
        browser.page("Emulation.setScriptExecutionDisabled", value=False)
    hidden = browser.evaluate("getComputedStyle(document.getElementById('calculator')).display")
    rows = browser.evaluate("document.querySelector('#summary table').getBoundingClientRect().height")
    assert hidden == "none" and rows > 100


def test_calculator_chart_ticks_are_the_quantity_formatters(browser, built):
    """The calculator's roofline printed its ticks as raw floats ('1e15'); they are
    quantities.short's, as on the static charts: '1 PFLOP/s' up the side, '1k' along the bottom."""
    from rooflinec.base.quantities import short
    open_report(browser, built / "qwen.html", 1280, 900)
    ticks = browser.evaluate("""(() => { const t = [...document.querySelectorAll('#calc-roofline text')];
      const pick = a => t.filter(e => e.getAttribute('text-anchor') === a && e.getAttribute('font-size') === '11')
                         .map(e => e.textContent);
      return {x: pick('middle'), y: pick('end')}; })()""")
    for axis, unit in (("x", ""), ("y", "FLOP/s")):
        labels = ticks[axis]
        assert len(labels) >= 3 and not any("e" in s.replace("FLOP", "") for s in labels), labels
        first = next(e for e in range(-6, 20) if short(10.0 ** e, unit) == labels[0])
        assert labels == [short(10.0 ** e, unit) for e in range(first, first + len(labels))]
    assert problems(browser.events) == []
