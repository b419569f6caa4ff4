"""Layout checks of a page in a real browser: what a reader on a phone or a desktop meets.

Each function takes a Selenium driver that has a page loaded (or a URL to load) and returns a
list of problems (strings a reader of the test output can act on); an empty list means the page
passes. ``test_layout.py`` runs them on every page of the built site at 390 px (a phone) and
1,280 px (a desktop); ``test_layout_checks.py`` shows that each one fails on a planted bad page.

1. :func:`page_width_problems`: the document is no wider than the viewport (no sideways
   scrolling); the elements that stick out are named.
2. :func:`figure_problems`: every figure image is drawn at about the size it is shown
   (intrinsic width at most ``max_ratio`` times the displayed width, so its text is not shrunk
   out of legibility) and links to its full-size image (a click opens it).
3. :func:`toggle_problems`: a sidebar toggle button opens (or closes) its panel, and a link in
   the opened panel navigates (where a wide screen shows the panel for good and has no button,
   the panel must be visible and its link must work).
4. :func:`contrast_problems`: text in the given boxes (output cells, tables) has a WCAG contrast
   ratio of at least 4.5:1 against the background it is drawn on.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

# --------------------------------------------------------------------------- 1. page width

_WIDTH_JS = r"""
const vw = document.documentElement.clientWidth;
const doc = Math.max(document.documentElement.scrollWidth, document.body ? document.body.scrollWidth : 0);
const describe = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
  + (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\s+/).slice(0, 2).join('.') : '');
const clipped = el => {  // inside a box that scrolls or clips horizontally and itself fits, or in a fixed layer
  for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
    const s = getComputedStyle(p);
    if (s.position === 'fixed') return true;  // an off-canvas panel does not widen the document
    if (['auto', 'scroll', 'hidden', 'clip'].includes(s.overflowX) && p.getBoundingClientRect().right <= vw + 1) return true;
  }
  return false;
};
const wide = [];
if (doc > vw + 1) {
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    const st = getComputedStyle(el);
    if (r.width > 0 && r.right > vw + 1 && st.position !== 'fixed' && st.visibility !== 'hidden' && !clipped(el)) {
      wide.push(describe(el) + ' (right edge ' + Math.round(r.right) + ' px)');
    }
  }
}
return {viewport: vw, document: doc, wide: wide};
"""


def page_width(driver) -> dict:
    """``{"viewport", "document", "wide"}``: CSS widths and the elements that stick out."""
    return driver.execute_script(_WIDTH_JS)


def page_width_problems(driver, max_listed: int = 6) -> list[str]:
    """The page scrolls sideways: its document is wider than the viewport."""
    width = page_width(driver)
    if width["document"] <= width["viewport"] + 1:
        return []
    # the innermost elements are the causes; their ancestors stick out because of them
    wide = width["wide"]
    return [f"document is {width['document']} px wide in a {width['viewport']} px viewport; "
            f"sticking out: " + "; ".join(wide[-max_listed:])]


_PRINTED_JS = r"""
const root = document.querySelector('article.bd-article') || document.body;
return [...root.querySelectorAll(
    'div.cell_output .output.stream pre, div.cell_output .output.text_plain pre')]
  .filter(pre => pre.clientWidth > 0 && pre.scrollWidth > pre.clientWidth + 1)
  .map(pre => ({width: pre.scrollWidth, box: pre.clientWidth,
                line: (pre.textContent.split('\n').sort((a, b) => b.length - a.length)[0] || '').slice(0, 60)}));
"""


def printed_output_problems(driver, max_listed: int = 4) -> list[str]:
    """What a cell printed scrolls sideways inside its box (on a phone it should wrap, as the
    book's style sheet makes it: a reader cannot see the end of a line without scrolling it)."""
    wide = driver.execute_script(_PRINTED_JS)
    return [f"printed output {w['width']} px wide in a {w['box']} px box, e.g. {w['line']!r}"
            for w in wide[:max_listed]]


# --------------------------------------------------------------------------- 2. figures

_FIGURES_JS = r"""
const root = document.querySelector('article.bd-article') || document.body;
return [...root.querySelectorAll('img')].map(img => {
  const link = img.closest('a[href]');
  return {src: (img.getAttribute('src') || '').slice(0, 80), natural: img.naturalWidth,
          shown: img.getBoundingClientRect().width, explorer: !!img.closest('.nmst-explorer'),
          link: link ? link.getAttribute('href') : null, complete: img.complete};
});
"""

_IMAGE_FILE = re.compile(r"\.(png|jpe?g|svg|gif|webp)(\?.*)?$", re.I)


def figures(driver) -> list[dict]:
    """Every image of the page's article with its intrinsic and displayed width and its link."""
    return driver.execute_script(_FIGURES_JS)


def figure_problems(driver, max_ratio: float = 1.25) -> list[str]:
    """Images shrunk to less than ``1/max_ratio`` of their size, or that do not open at full size.

    An explorer's frame is switched by JavaScript and has no file of its own: only its scale is
    checked. Hidden images (width 0, e.g. in a closed dropdown) are skipped.
    """
    problems = []
    for image in figures(driver):
        if not image["complete"] or image["natural"] == 0:
            problems.append(f"image {image['src']!r} did not load")
            continue
        if image["shown"] <= 0:
            continue
        ratio = image["natural"] / image["shown"]
        if ratio > max_ratio:
            problems.append(f"image {image['src']!r} is {image['natural']} px wide but shown at "
                            f"{image['shown']:.0f} px ({1 / ratio:.0%}; at most {max_ratio}x allowed)")
        if not image["explorer"]:
            link = image["link"]
            if not link or not (_IMAGE_FILE.search(link) or link.startswith("data:image/")):
                problems.append(f"image {image['src']!r} does not link to its full-size image (link: {link!r})")
    return problems


# --------------------------------------------------------------------------- 3. sidebar toggles

TOGGLES = {
    # button, then the panels it may show: the sidebar itself (desktop) or its dialog (phone)
    "primary": (".primary-toggle", ("#pst-primary-sidebar-modal", "#pst-primary-sidebar", ".bd-sidebar-primary")),
    "secondary": (".secondary-toggle", ("#pst-secondary-sidebar-modal", "#pst-secondary-sidebar", ".bd-sidebar-secondary")),
}

_VISIBLE_PANEL_JS = r"""
const selectors = arguments[0];
for (const sel of selectors) {
  for (const el of document.querySelectorAll(sel)) {
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    if (r.width > 40 && r.height > 40 && r.right > 0 && r.left < innerWidth && r.bottom > 0 && r.top < innerHeight
        && s.visibility !== 'hidden' && s.display !== 'none' && parseFloat(s.opacity) > 0.1) {
      const links = [...el.querySelectorAll('a[href]')].filter(a => {
        const q = a.getBoundingClientRect();
        return q.width > 0 && q.height > 0 && q.left >= 0 && q.right <= innerWidth && q.top >= 0 && q.bottom <= innerHeight;
      });
      return {selector: sel, links: links.length};
    }
  }
}
return null;
"""


def _visible_panel(driver, panels):
    return driver.execute_script(_VISIBLE_PANEL_JS, list(panels))


def _click_first_link(driver, panel_selector: str) -> bool:
    """Click the first link of the visible panel that leads to another page or place; True if the
    location changed."""
    before = driver.current_url
    ok = driver.execute_script(r"""
      const panel = [...document.querySelectorAll(arguments[0])].find(el => el.getBoundingClientRect().width > 40);
      if (!panel) return false;
      const here = location.href;
      const link = [...panel.querySelectorAll('a[href]')].find(a => {
        const q = a.getBoundingClientRect();
        return q.width > 0 && q.height > 0 && q.left >= 0 && q.right <= innerWidth && q.top >= 0 && q.bottom <= innerHeight && a.href !== here;
      });
      if (!link) return false;
      link.click();
      return true;
    """, panel_selector)
    if not ok:
        return False
    for _ in range(40):
        if driver.current_url != before:
            return True
        time.sleep(0.05)
    return False


def toggle_problems(driver, url: str, which: str, settle: float = 0.6) -> list[str]:
    """Clicking the ``which`` ("primary" or "secondary") sidebar toggle on ``url`` shows its panel
    (if it was hidden) or hides it and a second click shows it again (if it was shown); a link in
    the shown panel navigates. The page is loaded afresh first."""
    from selenium.webdriver.common.by import By

    button_selector, panels = TOGGLES[which]
    driver.get(url)
    time.sleep(settle)
    buttons = [b for b in driver.find_elements(By.CSS_SELECTOR, button_selector) if b.is_displayed()]
    width = driver.execute_script("return innerWidth")
    if not buttons:
        # a wide screen may show the panel for good (the in-page contents at 1,280 px): then it
        # must be visible, and a link in it must work
        shown = _visible_panel(driver, panels)
        if shown and shown["links"] and _click_first_link(driver, shown["selector"]):
            return []
        return [f"{which} toggle: no visible button ({button_selector}) at {width} px, and no panel shown "
                f"with a working link in its place"]
    before = _visible_panel(driver, panels)
    buttons[0].click()
    time.sleep(settle)
    after = _visible_panel(driver, panels)
    problems = []
    if before and after and before["selector"] == after["selector"]:
        problems.append(f"{which} toggle at {width} px: the panel {before['selector']} stayed as it was after a click")
        return problems
    if before and not after:
        # it hid the panel: a second click must bring it back
        [b for b in driver.find_elements(By.CSS_SELECTOR, button_selector) if b.is_displayed()][0].click()
        time.sleep(settle)
        after = _visible_panel(driver, panels)
        if not after:
            return [f"{which} toggle at {width} px: a second click did not show the panel again"]
    if not after:
        return [f"{which} toggle at {width} px: no panel ({', '.join(panels)}) is visible after a click"]
    if after["links"] == 0:
        return [f"{which} toggle at {width} px: the panel {after['selector']} shows no link in the window"]
    if not _click_first_link(driver, after["selector"]):
        problems.append(f"{which} toggle at {width} px: clicking a link in {after['selector']} did not navigate")
    return problems


# --------------------------------------------------------------------------- 4. contrast

_COLORS_JS = r"""
const selectors = arguments[0];
const parse = c => { const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null;
  const v = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
const background = el => {  // the colour drawn behind el: backgrounds of el and its ancestors blended
  const layers = [];
  for (let p = el; p; p = p.parentElement) {
    const c = parse(getComputedStyle(p).backgroundColor);
    if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
  }
  let out = [255, 255, 255];
  const html = parse(getComputedStyle(document.documentElement).backgroundColor);
  if (html && html[3] > 0) out = html.slice(0, 3);
  for (const c of layers.reverse()) out = out.map((x, i) => c[i] * c[3] + x * (1 - c[3]));
  return out;
};
const seen = new Set(), out = [];
for (const sel of selectors) {
  for (const box of document.querySelectorAll(sel)) {
    const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const el = n.parentElement;
      if (!n.textContent.trim() || seen.has(el)) continue;
      seen.add(el);
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0) continue;
      out.push({selector: sel, text: n.textContent.trim().slice(0, 40), color: parse(getComputedStyle(el).color), background: background(el)});
      if (out.length > 400) return out;
    }
  }
}
return out;
"""


def _luminance(rgb) -> float:
    def channel(c):
        c = c / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(float(x)) for x in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(foreground, background) -> float:
    """WCAG 2 contrast ratio of two sRGB colours (0-255 channels): 1 (none) to 21 (black on white).

    A foreground with alpha < 1 is blended onto the background first.
    """
    fg = list(foreground[:3])
    if len(foreground) > 3 and foreground[3] < 1:
        a = foreground[3]
        fg = [f * a + b * (1 - a) for f, b in zip(fg, background)]
    light, dark = sorted((_luminance(fg), _luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def contrast_problems(driver, selectors, minimum: float = 4.5, max_listed: int = 5) -> list[str]:
    """Text inside ``selectors`` whose contrast against its background is below ``minimum``."""
    low = []
    for item in driver.execute_script(_COLORS_JS, list(selectors)):
        if item["color"] is None:
            continue
        ratio = contrast_ratio(item["color"], item["background"])
        if ratio < minimum:
            low.append(f"{item['selector']}: {item['text']!r} at {ratio:.2f}:1 "
                       f"(text rgb{tuple(round(c) for c in item['color'][:3])} on rgb{tuple(round(c) for c in item['background'])})")
    if not low:
        return []
    return [f"{len(low)} text run(s) below {minimum}:1 contrast"] + low[:max_listed]


def set_color_mode(driver, mode: str) -> None:
    """Switch pydata-sphinx-theme's colour mode ("light" or "dark") as its theme button does."""
    driver.execute_script(
        "document.documentElement.dataset.theme = arguments[0]; document.documentElement.dataset.mode = arguments[0];",
        mode)
    time.sleep(0.2)


def keep_screenshot(take, path: Path) -> None:
    """Save a screenshot for the record (``_build/screenshots``). Screenshots are not checks: a
    renderer too busy to paint one in time (two browsers on two loaded cores timed out once on a
    large explorer) is noted and the test goes on to its assertions."""
    from selenium.common.exceptions import WebDriverException

    try:
        take(str(path))
    except WebDriverException as error:
        print(f"[site] screenshot {path.name} not taken: {str(error).splitlines()[0][:120]}")
