"""Checks of the built website in a real headless browser, offline, from file:// URLs.

What a reader of the static site must get: typeset mathematics (MathJax served locally),
the figures of every chapter, a Colab button that opens the right notebook, explorers whose
controls change the figure without a kernel, no broken internal link, and no request that
leaves the machine. Screenshots go to ``_build/screenshots/``.
"""

from __future__ import annotations

import json
import os
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from layout_checks import keep_screenshot
from site_checks import title_problems

ROOT = Path(os.environ.get("NMST_BOOK_ROOT") or Path(__file__).resolve().parents[2])

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
CHAPTERS = [e["file"] for part in TOC["parts"] for e in part["chapters"] if e["file"].startswith("chapters/")]
PAGES = [TOC["root"]] + [e["file"] for part in TOC["parts"] for e in part["chapters"]]
LOCAL_SCHEMES = {"file", "data", "blob", "about"}
BROWSER_SCHEMES = {"chrome", "chrome-extension", "chrome-untrusted", "devtools"}  # Chromium's own pages
# a TeX command in the prose means a formula lost its $...$ delimiters
RAW_TEX = r"\\(?:mathcal|mathrm|mathbf|boldsymbol|langle|rangle|frac|sum|prod|epsilon|sigma|lambda|theta|leq|geq|infty|lvert|rvert)\b"


def requested_urls(driver) -> list[str]:
    """Every URL the browser asked for since the last call (DevTools Network.requestWillBeSent)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def element_screenshot(browser, element, path: Path) -> None:
    """Save a PNG of ``element`` through DevTools (``Page.captureScreenshot`` clipped to its
    box). ChromeDriver's own element screenshot took 10 s for the first one on every chapter page
    (against 0.1-1.5 s this way), most of the explorer check's time."""
    import base64

    box = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height];", element)
    clip = dict(zip(("x", "y", "width", "height"), box), scale=1)
    shot = browser.execute_cdp_cmd("Page.captureScreenshot",
                                   {"format": "png", "captureBeyondViewport": True, "clip": clip})
    path.write_bytes(base64.b64decode(shot["data"]))


def built(site: Path, docname: str) -> Path:
    return site / f"{docname}.html"


def built_pages(site: Path, docnames) -> list[str]:
    return [d for d in docnames if built(site, d).is_file()]


def open_page(browser, path: Path, wait_math: bool = True) -> list[str]:
    """Load ``path``, wait until MathJax (if the page uses it) has typeset, return every URL requested."""
    requested_urls(browser)  # drop the logs of earlier pages
    browser.get_log("browser")
    browser.get(path.as_uri())
    if wait_math:
        # A page without MathJax's script (the API page, the bibliography) has nothing to wait
        # for; without this check the poll below waited its full 30 s on each of them.
        browser.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            if (!document.querySelector('script[src*="/mathjax/"]')) { done(true); return; }
            const start = Date.now();
            (function poll() {
              const mj = window.MathJax;
              if (mj && mj.startup && mj.startup.promise) { mj.startup.promise.then(() => done(true), () => done(false)); }
              else if (Date.now() - start > 30000) { done(false); }
              else { setTimeout(poll, 100); }
            })();
            """
        )
    time.sleep(0.3)
    return requested_urls(browser)


# --- mathematics -------------------------------------------------------------------------


@pytest.mark.parametrize("docname", ["book/notation", "book/intro"] + CHAPTERS)
def test_math_is_typeset_by_local_mathjax(site, browser, screenshots, docname):
    path = built(site, docname)
    if not path.is_file():
        pytest.skip(f"{docname} is not built (yet)")
    urls = open_page(browser, path)
    mathjax = [u for u in urls if "tex-svg-full.js" in u]
    assert mathjax and all(u.startswith("file://") for u in mathjax), f"MathJax not loaded locally: {mathjax}"
    counts = browser.execute_script(
        """
        return {
          containers: document.querySelectorAll('mjx-container').length,
          untypeset: Array.from(document.querySelectorAll('.math')).filter(e => !e.querySelector('mjx-container')).length,
          errors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
          text: (() => {  // the prose a reader sees: no code, no typeset formulas
            const main = document.querySelector('main').cloneNode(true);
            main.querySelectorAll('pre, code, .highlight, mjx-container, script, style, .cell_output').forEach(e => e.remove());
            return main.innerText;
          })(),
        };
        """
    )
    keep_screenshot(browser.save_screenshot, screenshots / (docname.replace("/", "__") + ".png"))
    assert counts["containers"] > 0, "no typeset formula on the page"
    assert counts["untypeset"] == 0, f"{counts['untypeset']} math elements were not typeset"
    assert counts["errors"] == 0, f"{counts['errors']} TeX errors (undefined macro?) on the page"
    assert "$$" not in counts["text"], "raw $$ left in the page text"
    assert not re.search(r"\\\(|\\\[", counts["text"]), "raw \\( or \\[ left in the page text"
    raw_tex = sorted(set(re.findall(RAW_TEX, counts["text"])))
    assert not raw_tex, f"TeX outside math delimiters, shown raw to the reader: {raw_tex[:10]}"


# --- figures and launch buttons ----------------------------------------------------------


@pytest.mark.parametrize("docname", CHAPTERS)
def test_chapter_shows_its_figures(site, browser, docname):
    path = built(site, docname)
    if not path.is_file():
        pytest.skip(f"{docname} is not built (yet)")
    open_page(browser, path, wait_math=False)
    figures = browser.execute_script(
        """
        const main = document.querySelector('main');
        const imgs = Array.from(main.querySelectorAll('.cell_output img, .output img, figure img, img.nmst-explorer-frame'));
        const svgs = Array.from(main.querySelectorAll('.cell_output svg')).filter(s => !s.closest('mjx-container'));
        return imgs.filter(i => i.complete && i.naturalWidth > 0).length + svgs.length;
        """
    )
    assert figures > 0, f"{docname}: no figure is displayed"


@pytest.mark.parametrize("docname", CHAPTERS)
def test_chapter_title_is_numbered_once(site, docname):
    """The table of contents numbers chapters; a title that repeats the number reads "1. 1. ..."."""
    path = built(site, docname)
    if not path.is_file():
        pytest.skip(f"{docname} is not built (yet)")
    problems = title_problems(path.read_text(encoding="utf-8"))
    assert not problems, f"{docname}: {problems}"


@pytest.mark.parametrize("docname", CHAPTERS)
def test_colab_button_opens_this_chapter_notebook(site, browser, docname):
    path = built(site, docname)
    if not path.is_file():
        pytest.skip(f"{docname} is not built (yet)")
    open_page(browser, path, wait_math=False)
    repo = urlsplit(CONFIG["repository"]["url"]).path.strip("/")
    branch = CONFIG["repository"]["branch"]
    expected = f"https://colab.research.google.com/github/{repo}/blob/{branch}/{docname}.ipynb"
    links = browser.execute_script(
        "return Array.from(document.querySelectorAll('a[href*=\"colab.research.google.com\"]')).map(a => a.href);"
    )
    assert links == [expected]


# --- explorers ---------------------------------------------------------------------------


def _move_every_control(browser, explorer) -> list[str]:
    """Move each slider one step and pick another menu entry; return the frame shown after each move."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    image = explorer.find_element("css selector", "img.nmst-explorer-frame")
    shown = [image.get_attribute("src")]
    moves = []
    for control in explorer.find_elements("css selector", "[data-control]"):
        if control.tag_name == "select":
            select = Select(control)
            if len(select.options) < 2:
                continue  # a menu with one entry cannot change anything
            current = int(control.get_attribute("value"))
            select.select_by_index((current + 1) % len(select.options))
        else:
            if int(control.get_attribute("max")) == 0:
                continue
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", control)
            key = Keys.ARROW_RIGHT if int(control.get_attribute("value")) < int(control.get_attribute("max")) else Keys.ARROW_LEFT
            control.send_keys(key)  # a real keyboard event on the focused slider
        time.sleep(0.1)
        shown.append(image.get_attribute("src"))
        moves.append(f"{control.get_attribute('aria-label')} -> {control.get_attribute('value')} (frame {image.get_attribute('data-frame')})")
    return shown, moves


def _check_explorer_page(browser, screenshots, path: Path, name: str) -> None:
    urls = open_page(browser, path, wait_math=False)
    explorers = browser.find_elements("css selector", ".nmst-explorer")
    assert explorers, f"{path.name}: no explorer on the page"
    for i, explorer in enumerate(explorers):
        browser.execute_script("arguments[0].scrollIntoView();", explorer)
        keep_screenshot(lambda p: element_screenshot(browser, explorer, Path(p)),
                        screenshots / f"{name}-explorer{i}-before.png")
        shown, moves = _move_every_control(browser, explorer)
        keep_screenshot(lambda p: element_screenshot(browser, explorer, Path(p)),
                        screenshots / f"{name}-explorer{i}-after.png")
        for move, before, after in zip(moves, shown, shown[1:]):
            assert before != after, f"{path.name}, explorer {i}: moving {move} did not change the displayed image"
        assert all(s.startswith("data:image/png;base64,") for s in shown)
    assert all(urlsplit(u).scheme in LOCAL_SCHEMES | BROWSER_SCHEMES for u in urls)


def test_eos_explorer_standalone_page_reacts_to_its_controls(browser, screenshots, tmp_path):
    """The eos explorer alone on a page (independent of which chapter embeds it)."""
    import matplotlib

    matplotlib.use("Agg")
    from nmst_lib.plots import eos_explorer_html

    explorer = eos_explorer_html(eps_values=(1e-4, 1e-3, 1e-2), amplitudes=(0.2, 0.9),
                                 shapes=("one_stop", "remark1"), t_max=20_000, dpi=60)
    page = tmp_path / "eos_explorer.html"
    page.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>eos explorer</title></head>"
                    f"<body>{explorer.data}</body></html>", encoding="utf-8")
    _check_explorer_page(browser, screenshots, page, "standalone")


def test_eos_token_explorer_standalone_page_reacts_to_its_controls(browser, screenshots, tmp_path):
    """Chapter 7's p(eos | t) explorer alone on a page: line menu, layer menu and eps slider each
    change the frame, and a context with model tokens is shown escaped in the menu."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    from nmst_lib.plots import eos_token_explorer_html

    rng = np.random.default_rng(0)
    tokens = [" The", " <unk>", " sat", ".", " It", " ended", ".", "<|endoftext|>"]
    lines = []
    for i in range(2):
        p_eos = {("va", None): rng.uniform(1e-4, 0.3, len(tokens))}
        for eps in (1e-4, 5e-4):
            p_eos[("st", eps)] = np.maximum.accumulate(rng.uniform(1e-3, 0.3, len(tokens)))
            p_eos[("nmst", eps)] = rng.uniform(1e-3, 0.3, len(tokens))
        lines.append({"context": f"line {i}: the <unk> of", "tokens": tokens, "p_eos": p_eos})
    explorer = eos_token_explorer_html(lines, dpi=50)
    page = tmp_path / "eos_token_explorer.html"
    page.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>eos token explorer</title></head>"
                    f"<body>{explorer.data}</body></html>", encoding="utf-8")
    _check_explorer_page(browser, screenshots, page, "standalone-gpt2")


def test_temperature_explorer_standalone_page_reacts_to_its_controls(browser, screenshots, tmp_path):
    """Chapter 9's "choose the token to follow" explorer alone on a page: the model menu and the
    token menu each change the frame, and model tokens are shown escaped in the menu."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    from nmst_lib.plots import temperature_explorer_html

    rng = np.random.default_rng(0)
    tokens = ["the", ",", "of", "<unk>", "<eos>"]
    runs = {name: {"epochs": np.linspace(0, 2, 5), "temperatures": 2 + rng.uniform(0, 1, (5, len(tokens))),
                   "ranks": np.arange(len(tokens)), "tokens": tokens} for name in ("CT-LSTM", "CT-NMST")}
    explorer = temperature_explorer_html(runs, dpi=40)
    page = tmp_path / "temperature_explorer.html"
    page.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>temperature explorer</title></head>"
                    f"<body>{explorer.data}</body></html>", encoding="utf-8")
    _check_explorer_page(browser, screenshots, page, "standalone-temperature")


def test_explorers_on_chapter_pages_react_to_their_controls(site, browser, screenshots):
    pages = [d for d in built_pages(site, CHAPTERS) if "nmst-explorer" in built(site, d).read_text(encoding="utf-8")]
    if not pages:
        pytest.skip("no built chapter embeds an explorer yet (chapters 2, 4, 5 will)")
    # MathJax typesets the whole chapter on the page's main thread (seconds per page), and every
    # step of the check waited for it; the explorers hold no formula, so their pages load here
    # without it (test_math_is_typeset_by_local_mathjax checks the typesetting of every chapter).
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/_static/mathjax/*"]})
    try:
        for docname in pages:
            _check_explorer_page(browser, screenshots, built(site, docname), docname.replace("/", "__"))
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})


# --- offline -----------------------------------------------------------------------------


@pytest.mark.parametrize("docname", PAGES)
def test_page_needs_no_network_and_logs_no_error(site, browser, docname):
    path = built(site, docname)
    if not path.is_file():
        pytest.skip(f"{docname} is not built (yet)")
    urls = open_page(browser, path)
    remote = sorted({u for u in urls if urlsplit(u).scheme not in LOCAL_SCHEMES | BROWSER_SCHEMES})
    assert not remote, f"{docname} requests non-local URLs: {remote}"
    resources = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name).concat([location.href]);"
    )
    assert all(urlsplit(u).scheme in LOCAL_SCHEMES for u in resources), resources
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"{docname}: console errors: {errors}"


# --- links -------------------------------------------------------------------------------


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "link", "img", "script", "iframe", "source"):
                self.links.append(attrs[key])


def _parse(path: Path, cache: dict) -> _Links:
    if path not in cache:
        parser = _Links()
        parser.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = parser
    return cache[path]


def test_no_internal_link_is_broken(site):
    pages = [p for p in site.rglob("*.html") if not {"_static", "_sources", "_images"} & set(p.relative_to(site).parts)]
    assert pages
    cache: dict = {}
    broken = []
    for page in pages:
        for link in _parse(page, cache).links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # external (http, https, mailto, data, javascript): not ours to check
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)} -> {link} (no file)")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _parse(target, cache).ids:
                broken.append(f"{page.relative_to(site)} -> {link} (no #{parts.fragment})")
    assert not broken, "broken internal links:\n" + "\n".join(sorted(set(broken))[:50])


# --- search ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served_site(site):
    """The built site over http on 127.0.0.1: the search page fetches each result's page to cut
    its snippet, which a browser refuses from file:// (the snippets appear only when served)."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def search_snippets(browser, base: str, query: str, want: int = 3) -> list[str]:
    """The snippet text of every result the site's search page shows for ``query``."""
    browser.get(f"{base}/search.html?q={query}")
    return browser.execute_async_script(
        """
        const [want, done] = [arguments[0], arguments[arguments.length - 1]];
        const start = Date.now();
        (function poll() {
          const found = Array.from(document.querySelectorAll('#search-results li p.context'));
          const finished = document.querySelector('#search-results .search-summary');
          if ((finished && found.length >= want) || Date.now() - start > 90000) {
            done(found.map(p => p.textContent));
          } else { setTimeout(poll, 200); }
        })();
        """,
        want,
    )


@pytest.mark.parametrize("query", ["perplexity", "termination", "entmax"])
def test_search_snippets_show_article_text_with_readable_formulas(site, browser, served_site, query):
    snippets = search_snippets(browser, served_site, query)
    assert len(snippets) >= 3, f"search for {query!r} showed {len(snippets)} snippets; expected >= 3"
    for text in snippets:
        assert not re.search(r"\\\(|\\\[|\$\$", text), f"TeX delimiters in a snippet: {text[:160]!r}"
        raw = sorted(set(re.findall(RAW_TEX, text)))
        assert not raw, f"raw TeX {raw} in a snippet: {text[:160]!r}"
        for chrome in ("On this page", "Contents", "By the", "Print to PDF"):  # sidebars, footer, header
            assert chrome not in text, f"page chrome {chrome!r} in a snippet: {text[:160]!r}"


def test_formulas_in_snippets_are_read_as_plain_text(site, browser, served_site):
    browser.get(f"{served_site}/search.html")
    cases = {
        r"\(r_{\mathrm{nt}}(L)\)": "r_nt(L)",
        r"\(1 - (1-\epsilon)^t \le p\)": "1 - (1-ε)^t ≤ p",
        r"\(\frac{1}{\alpha - 1}\)": "1/(α - 1)",
        r"\(\lvert\mathcal{V}\rvert\)": "|V|",
        r"\[p(y_t = \langle\text{eos}\rangle \mid y_{<t})\]": "p(y_t = ⟨eos⟩ | y_<t)",
        r"\(\{1, 2\}\)": "{1, 2}",
        r"\(p_{\boldsymbol\theta}(y),\ v \in \mathcal V\)": "p_θ(y), v ∈ V",
    }
    got = browser.execute_script("return arguments[0].map(window.nmstTexToText);", list(cases))
    assert got == list(cases.values())
