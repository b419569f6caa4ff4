"""Each browser layout check (layout_checks.py) fails on a planted bad page and passes a good one,
so that the checks on the built site (test_layout.py) cannot pass vacuously. Also the static
build-machine check of site_checks.py on planted pages."""

from __future__ import annotations

import base64
import io

import pytest

import layout_checks as layout
import site_checks as checks


def _png(width: int, height: int = 40) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width / 100, height / 100), dpi=100)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def _page(tmp_path, body: str, name: str = "page.html", style: str = "") -> str:
    path = tmp_path / name
    path.write_text("<!doctype html><html><head><meta charset='utf-8'>"
                    "<meta name='viewport' content='width=device-width, initial-scale=1'>"
                    f"<style>body {{ margin: 0 }} article {{ max-width: 100% }} {style}</style></head>"
                    f"<body><article class='bd-article'>{body}</article></body></html>", encoding="utf-8")
    return path.as_uri()


@pytest.fixture
def phone(browser):
    browser.set_window_size(390, 844)
    yield browser
    browser.set_window_size(1280, 1400)


# --- 1. page width -------------------------------------------------------------------------


def test_page_width_check_finds_a_wide_table_and_names_it(phone, tmp_path):
    phone.get(_page(tmp_path, "<table class='results'><tr><td style='white-space:nowrap'>"
                    + "a long cell " * 40 + "</td></tr></table>"))
    problems = layout.page_width_problems(phone)
    assert problems and ("table.results" in problems[0] or "td" in problems[0]), problems


def test_page_width_check_passes_a_table_that_scrolls_in_its_own_box(phone, tmp_path):
    phone.get(_page(tmp_path, "<div style='overflow-x:auto'><table><tr><td style='white-space:nowrap'>"
                    + "a long cell " * 40 + "</td></tr></table></div><p>text that wraps " * 30 + "</p>"))
    assert layout.page_width_problems(phone) == []


_PRINTED = ("<div class='cell_output'><div class='output stream'><div class='highlight'><pre>"
            "r_nt(L) of every decoder at L = 10, 100, 1000: " + "0.0123 " * 30 + "</pre></div></div></div>")
_THEME_PRE = "div.highlight pre { overflow-x: auto; white-space: pre }"


def test_printed_output_check_finds_a_line_that_scrolls_in_its_box(phone, tmp_path):
    phone.get(_page(tmp_path, _PRINTED, style=_THEME_PRE))
    problems = layout.printed_output_problems(phone)
    assert problems and "r_nt(L) of every decoder" in problems[0], problems
    assert layout.page_width_problems(phone) == []  # the page itself does not scroll


def test_printed_output_check_passes_the_books_style_sheet(phone, tmp_path):
    """The book's own rule (book/_assets/site/nmst-book.css) makes the planted line wrap."""
    from pathlib import Path

    css = (Path(__file__).resolve().parents[2] / "book" / "_assets" / "site" / "nmst-book.css").read_text()
    phone.get(_page(tmp_path, _PRINTED, style=_THEME_PRE + css))
    assert layout.printed_output_problems(phone) == []


def test_page_width_check_finds_long_inline_code(phone, tmp_path):
    phone.get(_page(tmp_path, "<p>call <code style='white-space:nowrap'>"
                    "nmst_lib.experiments.results.published_results_dir_of_a_very_long_name()</code></p>"))
    assert layout.page_width_problems(phone)


# --- 2. figures ----------------------------------------------------------------------------


def test_figure_check_finds_a_shrunk_figure_and_one_without_a_link(browser, tmp_path):
    (tmp_path / "wide.png").write_bytes(_png(1400))
    browser.set_window_size(1280, 900)
    browser.get(_page(tmp_path, "<figure><img src='wide.png' alt='a wide plot'></figure>",
                      style="figure, div { margin: 0 } article { width: 672px } img { max-width: 100% }"))
    problems = layout.figure_problems(browser)
    assert any("1400 px wide but shown at" in p for p in problems), problems
    assert any("does not link to its full-size image" in p for p in problems), problems


def test_figure_check_passes_a_figure_drawn_for_the_column_that_links_to_itself(browser, tmp_path):
    (tmp_path / "fits.png").write_bytes(_png(670))
    browser.set_window_size(1280, 900)
    browser.get(_page(tmp_path, "<figure><a href='fits.png'><img src='fits.png' alt='a plot'></a></figure>",
                      style="figure, div { margin: 0 } article { width: 672px } img { max-width: 100% }"))
    assert layout.figure_problems(browser) == []


def test_figure_check_skips_the_link_of_an_explorer_frame_but_not_its_scale(browser, tmp_path):
    data = "data:image/png;base64," + base64.b64encode(_png(1400)).decode()
    browser.set_window_size(1280, 900)
    browser.get(_page(tmp_path, f"<div class='nmst-explorer'><img src='{data}' alt='frame'></div>",
                      style="figure, div { margin: 0 } article { width: 672px } img { max-width: 100% }"))
    problems = layout.figure_problems(browser)
    assert len(problems) == 1 and "1400 px wide but shown at" in problems[0], problems


# --- 3. toggles ----------------------------------------------------------------------------

_SIDEBAR = ("<button class='primary-toggle' {onclick}>menu</button>"
            "<div id='pst-primary-sidebar' style='display:none; width:200px; height:300px'>"
            "<a href='other.html'>Chapter 2</a></div>")


def test_toggle_check_finds_a_button_that_does_nothing(browser, tmp_path):
    (tmp_path / "other.html").write_text("<p>other</p>")
    url = _page(tmp_path, _SIDEBAR.format(onclick=""))
    problems = layout.toggle_problems(browser, url, "primary", settle=0.1)
    assert problems and "no panel" in problems[0], problems


def test_toggle_check_passes_a_button_that_opens_a_panel_whose_link_navigates(browser, tmp_path):
    (tmp_path / "other.html").write_text("<p>other</p>")
    show = "onclick=\"document.getElementById('pst-primary-sidebar').style.display='block'\""
    url = _page(tmp_path, _SIDEBAR.format(onclick=show))
    assert layout.toggle_problems(browser, url, "primary", settle=0.1) == []
    assert browser.current_url.endswith("other.html")


def test_toggle_check_finds_a_panel_whose_links_do_not_navigate(browser, tmp_path):
    show = "onclick=\"document.getElementById('pst-primary-sidebar').style.display='block'\""
    body = _SIDEBAR.format(onclick=show).replace("href='other.html'", "href='#' onclick='event.preventDefault()'")
    # a link to the page itself never navigates
    url = _page(tmp_path, body)
    problems = layout.toggle_problems(browser, url, "primary", settle=0.1)
    assert problems, problems


def test_toggle_check_reports_a_missing_button(browser, tmp_path):
    url = _page(tmp_path, "<p>no sidebar here</p>")
    assert "no visible button" in layout.toggle_problems(browser, url, "secondary", settle=0.1)[0]


def test_toggle_check_accepts_a_panel_shown_for_good_whose_link_works(browser, tmp_path):
    url = _page(tmp_path, "<div id='pst-secondary-sidebar' style='width:200px; height:300px'>"
                          "<a href='#section-2'>2. Section</a></div><h2 id='section-2'>2. Section</h2>")
    assert layout.toggle_problems(browser, url, "secondary", settle=0.1) == []


# --- 4. contrast ---------------------------------------------------------------------------


def test_contrast_ratio_is_wcag_s():
    assert layout.contrast_ratio((0, 0, 0), (255, 255, 255)) == pytest.approx(21.0)
    assert layout.contrast_ratio((255, 255, 255), (255, 255, 255)) == pytest.approx(1.0)
    # WCAG's worked value: #767676 on white is the lightest grey with 4.5:1
    assert layout.contrast_ratio((0x76, 0x76, 0x76), (255, 255, 255)) == pytest.approx(4.54, abs=0.01)


def test_contrast_check_finds_pink_on_grey_and_passes_light_on_dark(browser, tmp_path):
    browser.set_window_size(1280, 900)
    browser.get(_page(tmp_path, "<div class='output'><pre style='background:#eeeeee; color:#e83e8c'>"
                      "python -m nmst_lib run</pre></div>"))
    problems = layout.contrast_problems(browser, ["div.output"])
    assert problems and "below 4.5:1" in problems[0], problems
    browser.get(_page(tmp_path, "<div class='output' style='background:#14181e'><pre style='color:#ced6dd'>"
                      "python -m nmst_lib run</pre></div>"))
    assert layout.contrast_problems(browser, ["div.output"]) == []


# --- the build machine (static) ------------------------------------------------------------


def _article(body: str) -> str:
    return f"<html><body><article class='bd-article'>{body}</article></body></html>"


@pytest.mark.parametrize("bad", [
    "<div class='cell_output'><pre>saved to /work/main/nmst_lib/published_results/gpt2/x.json</pre></div>",
    "<pre>python -m nmst_lib gpt2 --results-dir /tmp/nmst-ch7-quick-abc123</pre>",
    "<p>from /home/reader/.venv/lib/python3.11/site-packages/transformers/x.py</p>",
    "<div class='output stderr'><pre>FutureWarning: `evaluation_strategy` is deprecated</pre></div>",
])
def test_build_machine_check_finds_paths_and_stderr(bad):
    assert checks.build_machine_problems(_article(bad))


@pytest.mark.parametrize("good", [
    "<pre>python -m nmst_lib gpt2 --results-dir RESULTS_DIR</pre>",
    "<p>stored in <code>nmst_lib/published_results/gpt2/</code> (package data)</p>",
    "<p>see https://github.com/x/y/tmp/notes and 1/2/3 and p(y|x)/q</p>",
    "<script>const path = '/tmp/x';</script>",
])
def test_build_machine_check_passes_relative_paths_and_urls(good):
    assert checks.build_machine_problems(_article(good)) == []


def test_raw_token_check_finds_a_piece_in_a_menu_and_passes_its_words():
    bad = _article("<select><option>\u2581the (rank 1)</option></select><p>Greedy continuation of "
                   "\u201c\u2581American \u2581Civil\u201d</p>")
    problems = checks.raw_token_problems(bad)
    assert problems and problems[0].startswith("3 raw subword mark(s)")
    good = _article("<select><option>the (rank 1)</option><option>##land</option></select>"
                    "<script>const mark = '\u2581';</script>")
    assert checks.raw_token_problems(good) == []
