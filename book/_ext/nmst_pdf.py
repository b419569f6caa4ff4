"""The book as a PDF, its edition, and the download menu (issue 26). Loaded by nmst_book.setup.

1. **Edition.** One source of truth: ``parse.myst_substitutions`` in ``_config.yml`` holds
   ``edition`` ("3rd edition"), ``edition_version`` ("3.0") and ``edition_date`` (ISO date).
   Pages write ``{{ edition }}``; here they also become Sphinx's ``version``/``release``, so the
   PDF's title page names the edition (``latex_elements['releasename']``). CITATION.cff and the
   BibTeX box on the intro repeat them; tests/site/test_pdf.py checks that all agree.
2. **LaTeX class.** sphinx-jupyterbook-latex's ``jupyterBook.cls`` loads ``bbm`` (only in
   Debian's 1.4 GB texlive-fonts-extra), ``tikz`` and ``pgfplots`` for macros this book never
   uses. ``book/_latex/nmstbook.cls`` is that class without them (same code-cell boxes), copied
   into the LaTeX output folder and used as the LaTeX theme.
3. **Explorers become their static figure** (LaTeX builders only). A kernel-free explorer
   (``nmst_lib.plots.explorer_html``) is a ``text/html`` output holding pre-rendered PNG frames
   and JavaScript, which LaTeX cannot show (it would fall back to ``<IPython...HTML object>``).
   Before myst-nb picks a mime type, each such bundle is replaced by the frame the website
   shows first (the controls' initial values), followed by a line naming the controls' settings
   of that frame; the glue:figure caption around it is kept.
4. **Solutions at the end of each chapter** (LaTeX builders only), under a section "Solutions to
   the exercises", as a printed textbook does; the exercises keep their numbers and the
   solution titles still name them.
5. **Download menu** (HTML). The theme's ".pdf" entry (the browser's print dialog) becomes a
   link to the whole book as a PDF (``book.pdf`` at the site's root, copied there by
   ``scripts/pdf.sh``), and chapter pages also offer the notebook *with its outputs* from the
   build's execution (``_build/jupyter_execute``), copied to ``executed/`` in the site.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import shutil
from pathlib import Path

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

EDITION_KEYS = ("edition", "edition_version", "edition_date")
PDF_NAME = "book.pdf"  # the PDF's name at the site's root (scripts/pdf.sh copies it there)
EXECUTED_DIR = "executed"  # executed notebooks in the site: executed/<docname>.ipynb
_LATEX_CLASS = Path(__file__).resolve().parents[1] / "_latex" / "nmstbook.cls"


# ---------------------------------------------------------------------------------------
# 1. Edition
# ---------------------------------------------------------------------------------------


def edition_from_substitutions(substitutions) -> dict[str, str]:
    """The edition fields of ``myst_substitutions``; ValueError naming the missing ones."""
    if not isinstance(substitutions, dict):
        raise TypeError(f"myst_substitutions must be a mapping, got {type(substitutions).__name__}")
    missing = [key for key in EDITION_KEYS if not str(substitutions.get(key, "")).strip()]
    if missing:
        raise ValueError(f"_config.yml parse.myst_substitutions lacks {', '.join(missing)} (the book's edition)")
    date = str(substitutions["edition_date"])
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise ValueError(f"edition_date must be an ISO date YYYY-MM-DD, got {date!r}")
    return {key: str(substitutions[key]) for key in EDITION_KEYS}


def _set_edition(app, config) -> None:
    edition = edition_from_substitutions(config.myst_substitutions)
    config.version = config.release = edition["edition_version"]
    latex_elements = dict(config.latex_elements or {})
    # the title page reads "<edition>, version <release>" under the title
    latex_elements["releasename"] = f"{edition['edition'].capitalize()} ({edition['edition_date']}), version"
    config.latex_elements = latex_elements


def _use_book_class(app, config) -> None:
    """After sphinx-jupyterbook-latex chose ``jupyterBook``: the same class without unused packages."""
    if config.latex_theme == "jupyterBook":
        config.latex_theme = "nmstbook"
    config.latex_use_xindy = False  # no index in this book; xindy is another Debian package


def _latex_layout(app, config) -> None:
    """A4 pages; code and output lines wrap at the margin, even inside a long word (no overfull lines)."""
    latex_elements = dict(config.latex_elements or {})
    latex_elements.setdefault("papersize", "a4paper")
    latex_elements["sphinxsetup"] = ", ".join(
        part for part in (latex_elements.get("sphinxsetup", ""), "verbatimforcewraps=true", "verbatimmaxunderfull=2")
        if part)
    config.latex_elements = latex_elements


def _copy_book_class(app) -> None:
    from sphinx.builders.latex import LaTeXBuilder

    if isinstance(app.builder, LaTeXBuilder):
        shutil.copyfile(_LATEX_CLASS, Path(app.outdir) / _LATEX_CLASS.name)


# ---------------------------------------------------------------------------------------
# 3. Explorers -> their static figure
# ---------------------------------------------------------------------------------------

_FRAME = re.compile(r'<img class="nmst-explorer-frame" src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
_DATA = re.compile(r'<script type="application/json" class="nmst-explorer-data">(.*?)</script>', re.S)
_LABEL = re.compile(r'<label[^>]*>(.*?) <(?:input|select)', re.S)
_CHOSEN = re.compile(r'<output[^>]*>(.*?)</output>|<option value="\d+" selected>(.*?)</option>', re.S)


def explorer_static_frame(markup: str) -> tuple[bytes, str] | None:
    """The PNG the explorer shows first and the controls' settings for it, or None if not an explorer.

    ``markup`` is the ``text/html`` of :func:`nmst_lib.plots.explorer_html`. The settings read
    "Shown: <label> = <value>; ..." from the controls' labels and initial values.
    """
    if 'class="nmst-explorer"' not in markup:
        return None
    frame = _FRAME.search(markup)
    if frame is None:
        raise ValueError("an nmst explorer without an initial PNG frame (nmst_lib.plots.explorer_html changed?)")
    controls = markup.split('<div class="nmst-explorer-controls"', 1)[1].split("<img", 1)[0]
    labels = [html.unescape(label) for label in _LABEL.findall(controls)]
    chosen = [html.unescape(a or b) for a, b in _CHOSEN.findall(controls)]
    settings = "; ".join(f"{label} = {value}" for label, value in zip(labels, chosen))
    return base64.b64decode(frame.group(1)), settings


def _explorer_frames_count(markup: str) -> int:
    match = _DATA.search(markup)
    return len(json.loads(match.group(1))["frames"]) if match else 1


class ExplorerToStaticFigure(SphinxPostTransform):
    """Replace each explorer's mime bundle by its first frame (LaTeX builders; item 3)."""

    default_priority = 3  # before myst-nb's SelectMimeType (4)
    formats = ("latex",)

    def run(self, **kwargs) -> None:
        for bundle in list(self.document.findall(_is_mime_bundle)):
            html_children = [c for c in bundle.children if c.get("mime_type") == "text/html"]
            markup = "".join(raw.astext() for c in html_children for raw in c.findall(nodes.raw))
            found = explorer_static_frame(markup)
            if found is None:
                continue
            png, settings = found
            name = f"nmst-explorer-{hashlib.sha256(png).hexdigest()[:16]}.png"
            (Path(self.app.builder.outdir) / name).write_bytes(png)
            image = nodes.image(uri=name, candidates={"*": name})
            frames = _explorer_frames_count(markup)
            note = nodes.paragraph(
                "", f"Static view of an explorer with {frames} frames; shown: {settings}. "
                "The website lets the reader move its controls.", classes=["nmst-explorer-note"])
            bundle.replace_self([image, note])


def _is_mime_bundle(node) -> bool:
    return isinstance(node, nodes.container) and node.get("nb_element") == "mime_bundle"


# ---------------------------------------------------------------------------------------
# 4. Solutions at the end of each chapter (LaTeX)
# ---------------------------------------------------------------------------------------


class SolutionsAtChapterEnd(SphinxPostTransform):
    """Move every exercise solution to a "Solutions to the exercises" section ending its chapter."""

    default_priority = 30  # after sphinx-exercise resolved the solutions' titles (21, 22)
    formats = ("latex",)

    def run(self, **kwargs) -> None:
        from sphinx import addnodes
        from sphinx_exercise.nodes import solution_node

        for chapter in list(self.document.findall(addnodes.start_of_file)):
            top = next((c for c in chapter.children if isinstance(c, nodes.section)), None)
            if top is None:
                continue
            solutions = [s for s in top.findall(solution_node) if _owning_file(s) is chapter]
            if not solutions:
                continue
            section = nodes.section(ids=[f"solutions-{chapter['docname'].replace('/', '-')}"])
            section += nodes.title("", "Solutions to the exercises")
            for solution in solutions:
                solution.parent.remove(solution)
                section += solution
            top += section


def _owning_file(node):
    from sphinx import addnodes

    parent = node.parent
    while parent is not None and not isinstance(parent, addnodes.start_of_file):
        parent = parent.parent
    return parent


# ---------------------------------------------------------------------------------------
# 5. Download menu and executed notebooks (HTML)
# ---------------------------------------------------------------------------------------


def download_buttons(buttons: list, pathto, pagename: str, executed: bool, edition: str) -> list:
    """The theme's download entries with the print dialog replaced by the book's PDF, and the
    executed notebook added after the source notebook when ``executed``."""
    out = []
    for button in buttons:
        if button.get("label") == "download-pdf-button":
            out.append({"type": "link", "url": pathto(PDF_NAME, 1), "text": ".pdf (book)",
                        "tooltip": f"The whole book as a PDF ({edition})", "icon": "fas fa-file-pdf",
                        "label": "download-book-pdf-button"})
            continue
        out.append(button)
        if button.get("label") == "download-notebook-button" and executed:
            out.append({"type": "link", "url": f"{pathto(EXECUTED_DIR, 1)}/{pagename}.ipynb",
                        "text": ".ipynb (with outputs)", "tooltip": "Download the notebook with its outputs",
                        "icon": "fas fa-code", "label": "download-executed-notebook-button"})
            button["tooltip"] = "Download the notebook (no outputs: run it yourself)"
    return out


def _executed_notebook(app, docname: str) -> Path:
    return Path(app.outdir).parent / "jupyter_execute" / f"{docname}.ipynb"


def _edit_download_menu(app, pagename, templatename, context, doctree) -> None:
    edition = app.config.myst_substitutions.get("edition", "")
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            executed = bool(context.get("ipynb_source")) and _executed_notebook(app, pagename).is_file()
            group["buttons"] = download_buttons(group["buttons"], context["pathto"], pagename, executed, edition)


def _copy_executed_notebooks(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source = Path(app.outdir).parent / "jupyter_execute"
    for notebook in source.rglob("*.ipynb"):
        relative = notebook.relative_to(source)
        if relative.parts[0].startswith("."):
            continue
        target = Path(app.outdir) / EXECUTED_DIR / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".ipynb.tmp")
        shutil.copyfile(notebook, tmp)
        tmp.replace(target)  # atomic: a reader never downloads half a notebook


def setup(app):
    app.connect("config-inited", _set_edition, priority=900)
    app.connect("config-inited", _use_book_class, priority=900)  # after sphinx-jupyterbook-latex (500)
    app.connect("config-inited", _latex_layout, priority=900)
    app.connect("builder-inited", _copy_book_class, priority=900)
    app.add_post_transform(ExplorerToStaticFigure)
    app.add_post_transform(SolutionsAtChapterEnd)
    app.connect("html-page-context", _edit_download_menu, priority=600)  # after the theme's buttons
    app.connect("build-finished", _copy_executed_notebooks)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
