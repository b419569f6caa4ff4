"""The repository URL lives in one place, ``_config.yml``'s ``repository.url`` (the Colab and
Binder buttons are built from it). What must repeat it, because it is read without the
repository (a chapter's install cell in Colab) or by people (README, how-to page), must repeat
it exactly; the Binder files install the checkout itself and name no other repository."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
URL = CONFIG["repository"]["url"]
OWNER, NAME = URL.removeprefix("https://github.com/").split("/")
CHAPTERS = sorted((REPO / "chapters").glob("[0-9][0-9]_*.ipynb"))
GITHUB = re.compile(r"(?:git\+)?https?://(?:www\.)?github\.com/[\w.-]+/[\w.-]+")


def _ours(text: str) -> list[str]:
    """Every GitHub URL in ``text`` that names our owner or our repository name."""
    found = [m.group(0).removeprefix("git+").removesuffix(".git") for m in GITHUB.finditer(text)]
    return [u for u in found if u.split("/")[3] == OWNER or u.split("/")[4] == NAME]


def _install_cell(path: Path) -> str:
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    install = [c for c in cells if "pip" in "".join(c["source"]) and "install" in "".join(c["source"])]
    assert install, f"{path.name}: no install cell (pip install of nmst-lib)"
    return "".join(install[0]["source"])


def test_the_config_names_a_github_repository_and_buttons_that_use_it():
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", URL), URL
    buttons = CONFIG["launch_buttons"]
    assert buttons["colab_url"] == "https://colab.research.google.com"
    assert buttons["binderhub_url"] == "https://mybinder.org"
    assert CONFIG["html"].get("use_download_button", True)  # the theme's default: .ipynb download


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_installs_from_the_configured_url(path):
    cell = _install_cell(path)
    assert f"nmst-lib @ git+{URL}" in cell, f"{path.name}'s install cell does not install from {URL}"
    assert set(_ours(cell)) == {URL}, f"{path.name}'s install cell names {_ours(cell)}, not only {URL}"
    assert set(_ours(path.read_text(encoding="utf-8"))) <= {URL}


def test_binder_installs_this_checkout_with_cpu_torch():
    files = sorted((REPO / "binder").iterdir())
    assert [f.name for f in files] == ["requirements.txt"]
    lines = [ln.strip() for ln in files[0].read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert any(ln.startswith("torch") for ln in lines)
    assert ".[data]" in lines  # the commit the Binder button opened, not a copy from elsewhere
    assert not _ours(files[0].read_text())  # no second copy of the repository URL


@pytest.mark.parametrize("name", ["README.md", "book/how_to_use.md", "book/intro.md", "pyproject.toml"])
def test_documents_name_only_the_configured_url(name):
    path = REPO / name
    if not path.is_file():
        pytest.skip(f"{name} does not exist")
    assert set(_ours(path.read_text(encoding="utf-8"))) <= {URL}


ASSIGNMENT_FILES = sorted((REPO / "assignments").glob("*/*.ipynb")) + [REPO / "assignments" / "requirements.txt",
                                                                       REPO / "book" / "instructors.md"]


@pytest.mark.parametrize("path", ASSIGNMENT_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_classroom_kit_installs_from_the_configured_url(path):
    """The assignments' setup cells (Colab), the autograder's requirements (Gradescope) and the
    instructor guide install nmst-lib[classroom] from the one configured URL, as GitHub's zip
    archive of a ref (no git needed where it is installed)."""
    text = path.read_text(encoding="utf-8")
    assert f"nmst-lib[classroom] @ {URL}/archive/" in text, f"{path.name} does not install nmst-lib[classroom] from {URL}"
    assert f"git+{URL}" not in text, f"{path.name} installs from git: the kit installs the zip archive"
    assert set(_ours(text)) == {URL}


def test_the_classroom_builds_spec_names_the_configured_repository_and_branch():
    from nmst_lib.classroom.build import REPOSITORY_URL, UNPINNED_INSTALL_SPEC

    assert REPOSITORY_URL == URL
    assert UNPINNED_INSTALL_SPEC == f"nmst-lib[classroom] @ {URL}/archive/refs/heads/{CONFIG['repository']['branch']}.zip"
