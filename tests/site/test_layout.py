"""The built website at a phone's and a desktop's width, in a real headless browser (issue 20).

* both sidebar toggles open (or close and reopen) their panel at 390 px and at 1,280 px, and a
  link in the opened panel navigates: a reader on a phone reaches every chapter;
* no page is wider than the screen at 390 px (nothing scrolls sideways), and what a cell printed
  wraps inside its box there;
* every figure is drawn at about the size the column shows it at 1,280 px (intrinsic width at
  most 1.25x the displayed width) and links to its full-size image;
* nothing of the build machine on a page (no absolute path, no stderr block);
* in dark mode, text in output boxes and tables has at least 4.5:1 contrast.

The checks are in ``layout_checks.py`` (browser) and ``site_checks.py`` (static) and are shown to
fail on planted pages in ``test_layout_checks.py``. The measured widths and figure scales are
written to ``<site>/../layout-metrics.json`` and printed in the terminal summary.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

import layout_checks as layout
import site_checks as checks

ROOT = Path(os.environ.get("NMST_BOOK_ROOT") or Path(__file__).resolve().parents[2])
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
PAGES = [TOC["root"]] + [e["file"] for part in TOC["parts"] for e in part["chapters"]]
PHONE = (390, 844)
DESKTOP = (1280, 900)
# output boxes and tables: where the reader meets the results (and where dark mode failed)
CONTRAST_BOXES = ["div.cell_output", "div.output", "table.table", "article table", ".nmst-provenance", "pre"]


def _built(site: Path, docname: str) -> Path:
    path = site / f"{docname}.html"
    if not path.is_file():
        pytest.skip(f"{docname} is not built (yet)")
    return path


def _load(browser, path: Path, size) -> None:
    browser.set_window_size(*size)
    browser.get(path.as_uri())
    # wait for MathJax where the page has it: typeset formulas change the layout
    browser.execute_async_script("""
        const done = arguments[arguments.length - 1], start = Date.now();
        (function poll() {
          const mj = window.MathJax;
          if (mj && mj.startup && mj.startup.promise) { mj.startup.promise.then(() => done(true), () => done(false)); }
          else if (!document.querySelector('script[src*="mathjax"]') || Date.now() - start > 30000) { done(false); }
          else { setTimeout(poll, 100); }
        })();""")
    time.sleep(0.3)


@pytest.fixture(scope="module")
def layout_metrics(site):
    metrics: dict = {}
    yield metrics
    if metrics:
        try:
            (site.parent / "layout-metrics.json").write_text(json.dumps(metrics, indent=1, sort_keys=True) + "\n")
        except OSError:
            pass


@pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["phone", "desktop"])
@pytest.mark.parametrize("which", ["primary", "secondary"])
def test_sidebar_toggle_opens_its_panel_and_a_link_in_it_navigates(site, browser, which, size):
    path = _built(site, "chapters/03_consistent_sampling")
    browser.set_window_size(*size)
    problems = layout.toggle_problems(browser, path.as_uri(), which)
    browser.set_window_size(*DESKTOP)
    assert not problems, problems


def test_from_a_phone_every_chapter_is_reachable_through_the_table_of_contents(site, browser):
    path = _built(site, "book/intro")
    browser.set_window_size(*PHONE)
    browser.get(path.as_uri())
    time.sleep(0.5)
    [b for b in browser.find_elements("css selector", ".primary-toggle") if b.is_displayed()][0].click()
    time.sleep(0.6)
    panel = layout._visible_panel(browser, layout.TOGGLES["primary"][1])
    assert panel, "the table of contents did not open on a phone"
    hrefs = browser.execute_script(r"""
        const panel = [...document.querySelectorAll(arguments[0])].find(el => el.getBoundingClientRect().width > 40);
        return [...panel.querySelectorAll('a[href]')].map(a => a.href);""", panel["selector"])
    browser.set_window_size(*DESKTOP)
    chapters = [d for d in PAGES if d.startswith("chapters/")]
    missing = [d for d in chapters if not any(h.split("#")[0].endswith(d + ".html") for h in hrefs)]
    assert not missing, f"the phone's table of contents has no link to {missing}"


@pytest.mark.parametrize("docname", PAGES)
def test_page_is_no_wider_than_a_phone(site, browser, docname, layout_metrics, screenshots):
    path = _built(site, docname)
    _load(browser, path, PHONE)
    width = layout.page_width(browser)
    problems = layout.page_width_problems(browser) + layout.printed_output_problems(browser)
    # the top of the page as a phone shows it, for the record (a reader's first screen)
    layout.keep_screenshot(browser.save_screenshot, screenshots / f"phone__{docname.replace('/', '__')}.png")
    browser.set_window_size(*DESKTOP)
    layout_metrics.setdefault(docname, {})["width_at_390_px"] = width["document"]
    assert not problems, f"{docname}: {problems}"


@pytest.mark.parametrize("docname", PAGES)
def test_figures_are_drawn_for_the_column_and_open_at_full_size(site, browser, docname, layout_metrics):
    path = _built(site, docname)
    _load(browser, path, DESKTOP)
    shown = [f for f in layout.figures(browser) if f["shown"] > 0 and f["natural"] > 0]
    if shown:
        layout_metrics.setdefault(docname, {})["smallest_figure_scale_at_1280_px"] = round(
            min(f["shown"] / f["natural"] for f in shown), 3)
    problems = layout.figure_problems(browser)
    assert not problems, f"{docname}: " + "\n".join(problems)


@pytest.mark.parametrize("docname", PAGES)
def test_page_shows_nothing_of_the_build_machine(site, docname):
    html = _built(site, docname).read_text(encoding="utf-8")
    problems = checks.build_machine_problems(html)
    assert not problems, f"{docname}: " + "\n".join(problems)


@pytest.mark.parametrize("docname", [d for d in PAGES if d.startswith("chapters/")])
def test_chapter_shows_no_raw_model_token(site, docname):
    """A continuation, a menu or a table shows the words a model's subword pieces spell, never the
    pieces with their word-start marks (the API page documents the mark, so it is not checked)."""
    problems = checks.raw_token_problems(_built(site, docname).read_text(encoding="utf-8"))
    assert not problems, f"{docname}: " + "\n".join(problems)


@pytest.mark.parametrize("docname", [d for d in PAGES if d.startswith("chapters/")] + ["book/instructors"])
def test_output_boxes_and_tables_are_readable_in_dark_mode(site, browser, docname):
    path = _built(site, docname)
    _load(browser, path, DESKTOP)
    layout.set_color_mode(browser, "dark")
    problems = layout.contrast_problems(browser, CONTRAST_BOXES)
    layout.set_color_mode(browser, "light")
    assert not problems, f"{docname}: " + "\n".join(problems)
