"""The course edition of the website (``bash scripts/book.sh --course``): every chapter, every
exercise, no solution. The public site (``_build/html``) keeps the solutions in dropdowns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT / "_build" / "html"
COURSE = ROOT / "_build" / "course" / "_build" / "html"
REQUIRED = os.environ.get("NMST_REQUIRE_SITE") == "1"
CHAPTERS = sorted(p.stem for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def sites():
    for site, how in ((PUBLIC, "bash scripts/book.sh"), (COURSE, "bash scripts/book.sh --course")):
        if not (site / "index.html").is_file():
            message = f"{site} is not built: run `{how}` (scripts/test.sh does)"
            if REQUIRED:
                pytest.fail(message)
            pytest.skip(message)
    return PUBLIC, COURSE


def _boxes(page: Path, kind: str) -> int:
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    return len(soup.select(f"div.{kind}.admonition"))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_course_edition_keeps_every_exercise_and_drops_every_solution(sites, chapter):
    public, course = sites
    pub, crs = public / "chapters" / f"{chapter}.html", course / "chapters" / f"{chapter}.html"
    assert crs.is_file(), f"the course edition has no page for {chapter}"
    exercises = _boxes(pub, "exercise")
    assert exercises >= 1, f"{chapter} has no exercise on the public site"
    assert _boxes(pub, "solution") >= 1, f"{chapter}'s public page shows no solution dropdown"
    assert _boxes(crs, "exercise") == exercises
    assert _boxes(crs, "solution") == 0, f"{chapter}: a solution survived in the course edition"


def test_the_course_edition_says_what_it_is(sites):
    _, course = sites
    title = BeautifulSoup((course / "book" / "intro.html").read_text(encoding="utf-8"), "html.parser").title
    assert title is not None and "(course edition)" in title.get_text(), title
