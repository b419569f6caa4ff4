"""Fixtures of the website checks: the built site and a real headless Chromium.

The site is built by ``bash scripts/book.sh`` (``scripts/test.sh`` builds it before running
the tests). Without ``_build/html`` or without Debian's ``chromium`` + ``chromium-driver``
these tests are skipped with the reason, unless ``NMST_REQUIRE_SITE=1`` (set by
``scripts/test.sh``), in which case they fail.

Checking another build: ``NMST_BOOK_ROOT=/path/to/checkout`` reads that checkout's
``_config.yml``, ``_toc.yml``, ``nmst_lib`` and ``_build/html``; ``NMST_SITE_DIR=/path/to/html``
overrides only where the built HTML is (e.g. ``NMST_BOOK_ROOT=/tmp/wt NMST_SITE_DIR=/tmp/wt/_build/html``).

The page-height test records each chapter's height in ``site_metrics`` (written to
``<site>/../site-metrics.json``); the table is printed in pytest's terminal summary, with or
without ``-s`` or ``-q``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# NMST_BOOK_ROOT: check a book built elsewhere (e.g. a copy with placeholder chapters)
ROOT = Path(os.environ.get("NMST_BOOK_ROOT") or Path(__file__).resolve().parents[2])
SITE = Path(os.environ.get("NMST_SITE_DIR") or ROOT / "_build" / "html")
SCREENSHOTS = SITE.parent / "screenshots"
METRICS = SITE.parent / "site-metrics.json"
REQUIRED = os.environ.get("NMST_REQUIRE_SITE") == "1"

CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1400",
    "--hide-scrollbars",
    # no network at all: a page that needs a CDN shows it as a failed request (the loopback
    # address stays, for the search test's local http server: search snippets need http)
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


def _missing(reason: str):
    if REQUIRED:
        pytest.fail(reason + " (NMST_REQUIRE_SITE=1: the site checks must run)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def site() -> Path:
    """The built website, ``_build/html``."""
    if not (SITE / "index.html").is_file():
        _missing(f"no built website at {SITE}: run `bash scripts/book.sh` first")
    return SITE


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium (Selenium) with a fresh profile and DevTools logging of every request."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install selenium)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not chromium or not driver_path:
        _missing("Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    profile = tempfile.mkdtemp(prefix="nmst-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(120)
    driver.set_script_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


# --- page heights: collected by test_site_content.py, printed at the end of the run -------


@pytest.fixture(scope="session")
def site_metrics(request) -> dict:
    """``{docname: {"height_px": ..., "width_px": ...}}``, saved to ``site-metrics.json`` next to the site."""
    metrics: dict = {}
    request.config._nmst_site_metrics = metrics
    yield metrics
    if metrics:
        try:
            METRICS.write_text(json.dumps(metrics, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        except OSError:
            pass


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    metrics = getattr(config, "_nmst_site_metrics", None)
    if not metrics:
        return
    terminalreporter.write_sep("-", "chapter page heights (CSS px, 1,280 px window, toggles closed)")
    for docname, entry in sorted(metrics.items()):
        limit = entry.get("limit_px")
        flag = "" if limit is None or entry["height_px"] <= limit else "   OVER THE LIMIT"
        terminalreporter.write_line(f"{docname:40s} {entry['height_px']:>8,} px   (limit {limit:,} px){flag}")
    terminalreporter.write_line(f"(saved to {METRICS})")
