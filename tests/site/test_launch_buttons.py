"""The launch and download buttons of every chapter page (static HTML, no browser needed):
Binder opens this chapter of this repository at the configured branch, and the download button
serves the chapter's own .ipynb. The Colab button is checked in a real browser by test_site.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
import yaml
from conftest import ROOT

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
CHAPTERS = [e["file"] for part in TOC["parts"] for e in part["chapters"] if e["file"].startswith("chapters/")]
HREF = re.compile(r'href="([^"]+)"')


def _page(site: Path, docname: str) -> tuple[Path, list[str]]:
    path = site / f"{docname}.html"
    if not path.is_file():
        pytest.skip(f"{docname} is not built (yet)")
    return path, [h.replace("&amp;", "&") for h in HREF.findall(path.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("docname", CHAPTERS)
def test_binder_button_opens_this_chapter(site, docname):
    _, hrefs = _page(site, docname)
    repo = urlsplit(CONFIG["repository"]["url"]).path.strip("/")
    branch = CONFIG["repository"]["branch"]
    binder = CONFIG["launch_buttons"]["binderhub_url"].rstrip("/")
    expected = f"{binder}/v2/gh/{repo}/{branch}?urlpath=tree/{docname}.ipynb"
    assert [h for h in hrefs if h.startswith(binder)] == [expected]


@pytest.mark.parametrize("docname", CHAPTERS)
def test_download_button_serves_the_chapter_notebook(site, docname):
    page, hrefs = _page(site, docname)
    downloads = [h for h in hrefs if h.endswith(f"_sources/{docname}.ipynb")]
    assert len(downloads) == 1, f"{docname}: no .ipynb download link among {len(hrefs)} links"
    served = Path(urlsplit(urljoin(page.as_uri(), downloads[0])).path)
    assert served.is_file(), f"{docname}: the download link points at a missing file {served}"
    notebook = json.loads(served.read_text(encoding="utf-8"))
    source = json.loads((ROOT / f"{docname}.ipynb").read_text(encoding="utf-8"))
    assert [c["source"] for c in notebook["cells"]] == [c["source"] for c in source["cells"]]


def test_no_jupyterlite_or_thebe_button(site):
    """JupyterLite (Pyodide) cannot run torch, and Thebe would need a Binder kernel per page."""
    page, hrefs = _page(site, CHAPTERS[0])
    assert not [h for h in hrefs if "jupyterlite" in h.lower() or "/lite/" in h.lower()]
    html = page.read_text(encoding="utf-8")
    assert "thebe-launch-button" not in html and "launch-thebe" not in html
