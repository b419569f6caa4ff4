"""Helpers for the tests that execute a chapter on a part of its published results
(``test_partial_chapter6.py`` to ``test_partial_chapter8.py``): the cell that points the chapter's
kernel at the copied part, a stand-in for a seed not trained yet, readers of the executed
notebook's glue values and Markdown, and the checks of them these tests share."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

__all__ = ["POINT_AT", "check_model_names", "execute_on", "glue_names", "glued", "glued_once", "glued_twice",
           "isolate", "markdown_outputs", "store_as_seed"]

ROOT = Path(__file__).resolve().parents[1]

# Run first in the chapter's kernel: the published results are the copied part, and this
# checkout's nmst_lib is the one imported.
POINT_AT = """\
import pathlib
import nmst_lib
import nmst_lib.experiments.results as _results

assert pathlib.Path(nmst_lib.__file__).is_relative_to({root!r}), nmst_lib.__file__
_results.published_results_dir = lambda: pathlib.Path({published!r})
"""


def glue_names(nb) -> set[str]:
    """Every glue key the chapter's markdown uses (roles and directives)."""
    names = set()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            names |= {
                m.split(":")[0]
                for m in re.findall(r"\{glue(?::\w+)?\}`([^`]+)`", cell.source)
            }
            names |= set(
                re.findall(r"\{glue(?::\w+)?\}[ \t]+(\S+)", cell.source)
            )
    return names


def glued(nb) -> dict[str, str]:
    """The values myst-nb's glue stored in the executed cells, by key (Markdown text)."""
    out = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            meta = o.get("metadata", {}).get("scrapbook")
            if meta:
                data = o.get("data", {})
                prefix = meta.get("mime_prefix", "")
                out[meta["name"]] = data.get(
                    prefix + "text/markdown",
                    data.get(prefix + "text/plain", ""),
                )
    return out


def glued_twice(nb) -> list[str]:
    """The glue keys an executed chapter set more than once (the book build warns, and fails,
    on a key glued twice on one page: set a key once, after choosing its value)."""
    names = [o["metadata"]["scrapbook"]["name"] for cell in nb.cells for o in cell.get("outputs", [])
             if o.get("metadata", {}).get("scrapbook")]
    return sorted({n for n in names if names.count(n) > 1})


def glued_once(nb, wanted: set[str]) -> dict[str, str]:
    """The executed chapter's glue values (:func:`glued`), after checking what the website build
    needs of them: no key glued twice (:func:`glued_twice`; the book build fails on one) and every
    key in ``wanted`` (the keys the chapter's prose uses, :func:`glue_names`) set."""
    values = glued(nb)
    twice = glued_twice(nb)
    assert twice == [], f"keys glued twice (the book build fails on a key glued twice): {twice}"
    assert wanted <= set(values), sorted(wanted - set(values))
    return values


def check_model_names(notice: str, keys, names: dict[str, str]) -> None:
    """The page's partial notice names the model of each result key in ``keys`` as the book names
    it (``names``: :func:`nmst_lib.experiments.model_names`, by key without the seed), never by its
    file name."""
    assert all(names[re.sub(r"-seed\d+$", "", key)] in notice for key in keys), notice
    assert "-seed" not in notice and "nounk" not in notice, notice


def markdown_outputs(nb) -> list[str]:
    return [
        o["data"]["text/markdown"]
        for c in nb.cells
        for o in c.get("outputs", [])
        if "text/markdown" in o.get("data", {})
    ]


def store_as_seed(family: str, data: dict, config, folder: Path, change) -> Path:
    """Store a copy of the result ``data`` in ``folder`` as the result of ``config`` (another seed
    of the same model), after ``change(copy)`` edits its numbers in place: a stand-in for a seed
    that is not trained yet, so that a test can execute a chapter on several seeds of a model.
    Never published: the copy lives in the test's temporary store."""
    from nmst_lib.experiments import get_family

    copy = json.loads(json.dumps(data))
    change(copy)
    for stamp in ("schema", "key", "config_hash", "config", "profile"):
        copy.pop(stamp, None)
    return get_family(family).save(copy, config, folder)


def isolate(monkeypatch, tmp_path: Path) -> None:
    """The chapter's kernel writes nowhere real and shows the committed ``cpu`` profile:
    ``NMST_RESULTS_DIR`` a fresh folder under ``tmp_path``, ``NMST_PROFILE=cpu``,
    ``NMST_RETRAIN=0``, and this checkout first on ``PYTHONPATH``."""
    monkeypatch.setenv("NMST_RESULTS_DIR", str(tmp_path / "written"))
    monkeypatch.setenv("NMST_PROFILE", "cpu")
    monkeypatch.setenv("NMST_RETRAIN", "0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def execute_on(nb, chapter: Path, published: Path, setup: str = ""):
    """Execute the chapter notebook ``nb`` (read from ``chapter``) with its published results
    read from ``published`` (the :data:`POINT_AT` cell, then ``setup``, run before its first
    cell); returns ``nb``, executed."""
    import nbformat
    from nbclient import NotebookClient

    point = POINT_AT.format(root=str(ROOT), published=str(published)) + setup
    nb.cells.insert(1, nbformat.v4.new_code_cell(point))
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(chapter.parent)}}).execute()
    return nb
