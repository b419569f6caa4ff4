"""Fixtures of the website checks: the built site and a real headless Chromium.

The site is built by ``bash scripts/book.sh`` (``scripts/test.sh`` builds it before running
the tests). Without ``_build/html`` or without Debian's ``chromium`` + ``chromium-driver``
these tests are skipped with the reason, unless ``NMST_REQUIRE_SITE=1`` (set by
``scripts/test.sh``), in which case they fail.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# NMST_BOOK_ROOT: check a book built elsewhere (e.g. a copy with placeholder chapters)
ROOT = Path(os.environ.get("NMST_BOOK_ROOT") or Path(__file__).resolve().parents[2])
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
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
    # no network at all: a page that needs a CDN shows it as a failed request
    "--host-resolver-rules=MAP * ~NOTFOUND",
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
