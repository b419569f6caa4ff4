"""Source hygiene: no control characters in the library, tests, benchmarks or scripts, chapter
code that fits the website's column, and a clean ``ruff check``.

A backslash escape in a non-raw docstring turns LaTeX into control characters without any
error (``"\\alpha"`` becomes BEL + "lpha", ``"\\frac"`` a form feed, ``"\\ne"`` a newline); Chapter 8's
first docstrings did this and only the -W book build noticed. This check fails at once and
names the file and line.

The website's text column shows about 79 characters of code; a longer line makes its code cell
scroll sideways (issue 20, "Code that fits"). The formatted chapters' code cells are kept to
``[tool.ruff] line-length`` by ``ruff format`` (run it on a chapter after editing its code);
the check below also catches what the formatter cannot shorten (long strings and comments).

``ruff check`` finds nothing in the library, tests, benchmarks, scripts and chapters, under the
rules chosen in pyproject.toml (``[tool.ruff.lint]``: pyflakes and import order), so an unused
import or an undefined name fails here and not in a reader's notebook.

No chapter tells models apart by the display names the library gives its rows (see
:data:`LABEL_PARSING`).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("nmst_lib", "tests", "benchmarks", "scripts")
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def test_no_python_source_holds_control_characters():
    bad = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                match = CONTROL.search(line)
                if match:
                    bad.append(f"{path.relative_to(REPO)}:{number}: {match.group()!r} "
                               "(a backslash escape in a non-raw string? use r\"\"\"...\"\"\" for LaTeX)")
    assert not bad, "control characters in source files:\n" + "\n".join(bad)


def test_the_check_catches_a_bell_from_a_non_raw_alpha():
    assert CONTROL.search("L_\alpha")              # what a non-raw "\alpha" becomes
    assert not CONTROL.search(r"L_\alpha \frac{1}{2} \ne")


# Chapters whose code cells are formatted to LINE_LENGTH: all nine.
FORMATTED_CHAPTERS = [
    "chapters/01_decoding.ipynb",
    "chapters/02_consistency.ipynb",
    "chapters/03_consistent_sampling.ipynb",
    "chapters/04_self_terminating.ipynb",
    "chapters/05_nmst.ipynb",
    "chapters/06_wikitext.ipynb",
    "chapters/07_gpt2.ipynb",
    "chapters/08_sparse.ipynb",
    "chapters/09_temperature.ipynb",
]


def test_every_chapter_notebook_is_a_formatted_chapter():
    chapters = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "chapters").glob("*.ipynb"))
    assert chapters == sorted(FORMATTED_CHAPTERS), "a chapter is missing from FORMATTED_CHAPTERS"
LINE_LENGTH = 79  # pyproject.toml, [tool.ruff] line-length


def long_code_lines(notebook: dict, limit: int = LINE_LENGTH) -> list[str]:
    """``"cell C, line L: N characters"`` for every code-cell line longer than ``limit``.

    Markdown and raw cells are prose, wrapped by the browser, and are not counted.
    """
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise TypeError(f"expected a notebook dict with a 'cells' list, got {type(notebook).__name__}")
    found = []
    for index, cell in enumerate(notebook["cells"]):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        for number, line in enumerate(text.split("\n"), 1):
            if len(line) > limit:
                found.append(f"cell {index}, line {number}: {len(line)} characters")
    return found


def test_the_line_length_is_the_one_ruff_is_configured_with():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[tool\.ruff\]\n(.*?)(?=^\[)", pyproject, re.S | re.M)
    assert section, "pyproject.toml has no [tool.ruff] section"
    assert re.search(rf"^line-length = {LINE_LENGTH}$", section.group(1), re.M), section.group(1)


@pytest.mark.parametrize("chapter", FORMATTED_CHAPTERS, ids=lambda c: Path(c).stem)
def test_every_code_line_of_a_formatted_chapter_fits_the_column(chapter):
    notebook = json.loads((REPO / chapter).read_text(encoding="utf-8"))
    bad = long_code_lines(notebook)
    assert not bad, (f"{chapter}: code lines longer than {LINE_LENGTH} characters scroll sideways on "
                     "the website (run `ruff format` on it; split long strings and comments by hand):\n"
                     + "\n".join(bad))


def test_the_line_check_catches_a_planted_long_line():
    def notebook(*cells):
        return {"cells": [{"cell_type": kind, "source": source} for kind, source in cells]}

    fits = "x = 1  # " + "a" * (LINE_LENGTH - 9)
    assert len(fits) == LINE_LENGTH
    assert long_code_lines(notebook(("code", [fits + "\n", "y = 2"]))) == []
    planted = notebook(("markdown", ["m" * 200]), ("code", ["import math\n", fits + "b\n", "y = 2"]))
    assert long_code_lines(planted) == [f"cell 1, line 2: {LINE_LENGTH + 1} characters"]
    assert long_code_lines(notebook(("code", "z = 3\n" + "s" * 90))) == ["cell 0, line 2: 90 characters"]
    with pytest.raises(TypeError, match="notebook dict"):
        long_code_lines(["x = 1"])


def _ruff_format_check(paths: list[Path]) -> subprocess.CompletedProcess:
    """``ruff format --check`` with the repository's configuration (pyproject.toml)."""
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (it is in the test extra: pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "--config",
                           str(REPO / "pyproject.toml"), *map(str, paths)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_ruff_format_leaves_the_formatted_chapters_unchanged():
    result = _ruff_format_check([REPO / c for c in FORMATTED_CHAPTERS])
    version = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True, text=True).stdout
    assert result.returncode == 0, (f"`ruff format` would change these chapters ({version.strip()}; "
                                    f"pinned: see constraints.txt):\n{result.stdout}{result.stderr}")


def test_the_ruff_check_catches_a_planted_unformatted_cell(tmp_path):
    cell = {"cell_type": "code", "execution_count": None, "id": "a1", "metadata": {}, "outputs": [],
            "source": ["x = {  'a':1}"]}
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "planted.ipynb"
    path.write_text(json.dumps(notebook, indent=1) + "\n", encoding="utf-8")
    result = _ruff_format_check([path])
    assert result.returncode == 1 and "planted.ipynb" in result.stdout + result.stderr, result


# `ruff check` with the repository's rules ([tool.ruff.lint] in pyproject.toml: pyflakes, so no
# unused import or variable and no undefined name, and import order) over all the code: the
# library, tests, benchmarks, scripts and the chapters' code cells.
LINTED = (*FOLDERS, "chapters")


def _ruff_check(paths: list[Path]) -> subprocess.CompletedProcess:
    """``ruff check`` with the repository's configuration (pyproject.toml)."""
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (it is in the test extra: pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                           "--config", str(REPO / "pyproject.toml"), *map(str, paths)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def test_ruff_check_finds_nothing_in_the_library_tests_and_chapters():
    result = _ruff_check([REPO / p for p in LINTED])
    assert result.returncode == 0, ("`ruff check` reports problems (`ruff check --fix` sorts imports and drops "
                                    "unused ones; in a chapter, keep its JSON as it is and check `git diff`):\n"
                                    f"{result.stdout}{result.stderr}")


def test_the_ruff_check_catches_a_planted_unused_import_in_a_module_and_a_chapter(tmp_path):
    (tmp_path / "planted.py").write_text("import sys\nimport json\n\nprint(json.dumps(1))\n", encoding="utf-8")
    cell = {"cell_type": "code", "execution_count": None, "id": "a1", "metadata": {}, "outputs": [],
            "source": ["import math\n", "x = undefined_name"]}
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "planted.ipynb").write_text(json.dumps(notebook, indent=1) + "\n", encoding="utf-8")
    result = _ruff_check([tmp_path])
    found = result.stdout + result.stderr
    assert result.returncode == 1, result
    for problem in ("planted.py:1:1: I001", "planted.py:1:8: F401", "planted.ipynb:cell 1:1:8: F401",
                    "planted.ipynb:cell 1:2:5: F821"):
        assert problem in found, found


# A chapter reads which model a library row stands for from the row's fields (head, seed, baseline,
# paper row, ...), never from its display name: a name test such as `r["model"].startswith("VA")`
# also matched Chapter 9's parameter-matched "VA (hidden 162)" and put its r_nt in the range of
# Chapter 6's VA seeds. The names the library gives rows are for the reader, not for code.
LABEL_FIELDS = r'"(?:model|method|loss|label|decoder_label)"'
LABEL_PARSING = re.compile(
    rf"\[\s*{LABEL_FIELDS}\s*\]\s*\.\s*(?:startswith|endswith|split|rsplit|replace|removeprefix|removesuffix|"
    rf"partition|find|index)\("
    rf"|\"[^\"\n]*\"\s+(?:not\s+)?in\s+\w+\[\s*{LABEL_FIELDS}\s*\]"
)


def label_parsing_lines(notebook: dict) -> list[str]:
    """``"cell C, line L: code"`` for every line of a code cell that tests or takes apart a library
    row's display name (:data:`LABEL_PARSING`)."""
    if not isinstance(notebook, dict) or "cells" not in notebook:
        raise TypeError("notebook must be a notebook dict with a 'cells' list")
    out = []
    for i, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        out += [f"cell {i}, line {k}: {line.strip()}" for k, line in enumerate(source.splitlines(), 1)
                if LABEL_PARSING.search(line)]
    return out


@pytest.mark.parametrize("chapter", FORMATTED_CHAPTERS, ids=lambda c: Path(c).stem)
def test_no_chapter_reads_a_model_from_its_display_name(chapter):
    bad = label_parsing_lines(json.loads((REPO / chapter).read_text(encoding="utf-8")))
    assert not bad, (f"{chapter} reads a library row's display name; select on the row's fields "
                     "(head, seed, baseline, paper row, ...) instead:\n" + "\n".join(bad))


def test_the_label_check_catches_planted_name_tests():
    def notebook(*lines):
        return {"cells": [{"cell_type": "markdown", "source": 'r["model"].startswith("VA")'},
                          {"cell_type": "code", "source": "\n".join(lines)}]}

    planted = notebook('va = [r for r in rows if r["model"].startswith("VA")]',
                       'keep = "seed 0" in c["model"]',
                       'name = r["method"].split(" (")[0]',
                       'ok = r["head"] == "va" and r["seed"] == 0')
    assert label_parsing_lines(planted) == [
        'cell 1, line 1: va = [r for r in rows if r["model"].startswith("VA")]',
        'cell 1, line 2: keep = "seed 0" in c["model"]',
        'cell 1, line 3: name = r["method"].split(" (")[0]',
    ]
    with pytest.raises(TypeError, match="notebook dict"):
        label_parsing_lines([])
