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
5. **Download menu** (HTML; the course edition keeps the theme's print entry: the book's PDF
   holds the solutions that edition leaves out). The theme's ".pdf" entry (the browser's print dialog) becomes a
   link to the whole book as a PDF (``book.pdf`` at the site's root, copied there by
   ``scripts/pdf.sh``), and chapter pages also offer the notebook *with its outputs*: the source
   notebook merged with the build's execution from its jupyter-cache, written to
   ``executed/<page>.ipynb`` in the site (not ``_build/jupyter_execute``, which a LaTeX build
   rewrites without outputs).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import shutil
from html.parser import HTMLParser
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
    config.today = edition["edition_date"]  # the title page's date: the edition's, not the build's
    config.latex_elements = latex_elements


def _use_book_class(app, config) -> None:
    """After sphinx-jupyterbook-latex chose ``jupyterBook``: the same class without unused packages."""
    if config.latex_theme == "jupyterBook":
        config.latex_theme = "nmstbook"
    config.latex_use_xindy = False  # no index in this book; xindy is another Debian package


def _latex_layout(app, config) -> None:
    """A4 pages; code and output lines wrap at the margin, even inside a long word (no overfull lines);
    figures stay where the page has them (``[H]``): as on the website, next to the code and text that
    draw and read them, and also inside solutions and proofs, whose boxes cannot hold a float."""
    latex_elements = dict(config.latex_elements or {})
    latex_elements.setdefault("papersize", "a4paper")
    latex_elements.setdefault("figure_align", "H")
    latex_elements["sphinxsetup"] = ", ".join(
        part for part in (latex_elements.get("sphinxsetup", ""), "verbatimforcewraps=true", "verbatimmaxunderfull=2")
        if part)
    # unicode-math maps \setminus to U+29F5, which Latin Modern Math lacks: XeLaTeX would drop it
    latex_elements["preamble"] = latex_elements.get("preamble", "") + (
        "\n% book/_ext/nmst_pdf.py: set minus as a backslash (Latin Modern Math has no U+29F5)\n"
        "\\AtBeginDocument{\\renewcommand{\\setminus}{\\mathbin{\\backslash}}}\n"
        # inline code (long test and function names) may break after an underscore, not run off the page
        "\\makeatletter\\let\\nmst@upquote\\sphinxupquote\n"
        "\\protected\\def\\sphinxupquote#1{{\\let\\nmst@us\\_\\def\\_{\\nmst@us\\discretionary{}{}{}}"
        "\\nmst@upquote{#1}}}\\makeatother\n")
    config.latex_elements = latex_elements


def _copy_book_class(app) -> None:
    """The book's class into the LaTeX folder; and box and exercise numbers per chapter (Theorem 5.2,
    Exercise 1.3) as on the site. sphinx-jupyterbook-latex sets numfig_secnum_depth to 2, which
    LaTeX needs (its parts make depth 2 the chapter) but which gives the numbers that sphinx-proof
    and sphinx-exercise read from the toctree one level too deep (Exercise 1.8.3). So the toctree
    numbers are assigned with 1, and :func:`_latex_figure_depth` restores 2 for the writer."""
    from sphinx.builders.latex import LaTeXBuilder

    if isinstance(app.builder, LaTeXBuilder):
        shutil.copyfile(_LATEX_CLASS, Path(app.outdir) / _LATEX_CLASS.name)
        app.config.numfig_secnum_depth = 1


def _latex_figure_depth(app, doctree, docname) -> None:
    """Once the book's doctree is resolved (the toctree numbers long assigned), before the LaTeX
    writer reads the setting: LaTeX's figures and equations reset per chapter (Fig. 6.3)."""
    from sphinx.builders.latex import LaTeXBuilder

    if isinstance(app.builder, LaTeXBuilder) and app.env.jblatex_captions_to_parts:
        app.config.numfig_secnum_depth = 2


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


class HtmlOutputsForLatex(SphinxPostTransform):
    """Give LaTeX the HTML outputs (nmst_lib.report's tables, provenance, details) as docutils nodes.

    A bundle with ``text/html`` and ``text/plain`` only would print, in LaTeX, its ``text/plain``:
    for an ``nmst_lib.report.Html`` that is the HTML source as a Python string. Such bundles are
    converted by :func:`html_to_nodes` (tables, captions as a bold line above the table, paragraphs,
    ``<strong>``, ``<code>``, ``<details>`` opened) before myst-nb picks a mime type.
    """

    default_priority = 3  # before myst-nb's SelectMimeType (4); explorers are handled first
    formats = ("latex",)

    def run(self, **kwargs) -> None:
        for bundle in list(self.document.findall(_is_mime_bundle)):
            kinds = {c.get("mime_type") for c in bundle.children}
            if "text/html" not in kinds or kinds & {"image/png", "image/jpeg", "application/pdf", "text/latex",
                                                    "text/markdown"}:
                continue
            markup = "".join(raw.astext() for c in bundle.children if c.get("mime_type") == "text/html"
                             for raw in c.findall(nodes.raw))
            if 'class="nmst-explorer"' not in markup:  # explorers: ExplorerToStaticFigure
                bundle.replace_self(html_to_nodes(markup))


def _is_mime_bundle(node) -> bool:
    return isinstance(node, nodes.container) and node.get("nb_element") == "mime_bundle"


class _Element:
    def __init__(self, tag: str, attrs: dict):
        self.tag, self.attrs, self.children = tag, attrs, []


class _TreeBuilder(HTMLParser):
    """A minimal HTML tree (the report module's well-formed markup; void tags: br, img, hr)."""

    VOID = {"br", "img", "hr", "meta", "input"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = _Element("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        element = _Element(tag, dict(attrs))
        self.stack[-1].children.append(element)
        if tag not in self.VOID:
            self.stack.append(element)

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):  # close up to the matching tag
            if self.stack[i].tag == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        self.stack[-1].children.append(data)


_INLINE = {"strong": nodes.strong, "b": nodes.strong, "em": nodes.emphasis, "i": nodes.emphasis,
           "code": nodes.literal}
_BLOCK = {"div", "details", "p", "table", "summary", "ul", "ol", "br", "caption"}


def html_to_nodes(markup: str) -> list:
    """Docutils nodes for a fragment of HTML made of div, p, br, strong/em/code, details/summary,
    ul/ol/li and table (caption, thead/tbody, th/td with colspan); other tags keep their text.
    A ``<details>`` is printed open, except the per-run stamps of a provenance block (:func:`_folded`)."""
    parser = _TreeBuilder()
    parser.feed(markup)
    parser.close()
    return _blocks(parser.root.children)


def _blocks(children) -> list:
    out, inline = [], []

    def flush():
        if any(not isinstance(n, nodes.Text) or n.astext().strip() for n in inline):
            out.append(nodes.paragraph("", "", *inline))
        inline.clear()

    for child in children:
        if isinstance(child, str) or child.tag not in _BLOCK | {"li"}:
            inline.extend(_inlines([child]))
        elif child.tag == "br":
            flush()
        else:
            flush()
            out.extend(_block(child))
    flush()
    return out


def _block(element) -> list:
    if element.tag == "table":
        return _table(element)
    if element.tag == "summary":
        return [nodes.paragraph("", "", nodes.strong("", "", *_inlines(element.children)))]
    if element.tag in ("ul", "ol"):
        items = [nodes.list_item("", *_blocks(li.children)) for li in element.children
                 if isinstance(li, _Element) and li.tag == "li"]
        return [(nodes.bullet_list if element.tag == "ul" else nodes.enumerated_list)("", *items)]
    if element.tag == "div" and "nmst-provenance" in element.attrs.get("class", "").split():
        return _blocks([_folded(c) if isinstance(c, _Element) and c.tag == "details" else c
                        for c in element.children])
    return _blocks(element.children)  # div, details (printed open), p, caption


def _folded(details):
    """A provenance block's full per-run stamps (commands, machines, paths where the results were
    made) stay folded in print, as on the website; the printed line says where they are."""
    summary = next((c for c in details.children if isinstance(c, _Element) and c.tag == "summary"), None)
    label = "".join(_text(summary)) if summary is not None else "Full provenance"
    note = _Element("p", {})
    note.children = [_element("em", f"{label}: folded on the website; the full stamps are there and in the "
                                    "chapter's notebook with outputs (download menu).")]
    return note


def _element(tag: str, text: str):
    element = _Element(tag, {})
    element.children = [text]
    return element


def _inlines(children) -> list:
    out = []
    for child in children:
        if isinstance(child, str):
            out.append(nodes.Text(child))
        elif child.tag in _INLINE:
            text = "".join(_text(child))
            out.append(_INLINE[child.tag](text, text))
        elif child.tag == "br":
            out.append(nodes.Text(" "))
        else:
            out.extend(_inlines(child.children))
    return out


def _text(element) -> list[str]:
    return [c if isinstance(c, str) else "".join(_text(c)) for c in element.children]


def _table(table) -> list:
    def elements(parent, tags):
        for child in parent.children:
            if isinstance(child, _Element):
                if child.tag in tags:
                    yield child
                elif child.tag in ("thead", "tbody", "tfoot"):
                    yield from elements(child, tags)

    caption = next(elements(table, {"caption"}), None)
    head_rows = [r for c in table.children if isinstance(c, _Element) and c.tag == "thead" for r in elements(c, {"tr"})]
    rows = list(elements(table, {"tr"}))
    width = max((sum(int(cell.attrs.get("colspan") or 1) for cell in elements(r, {"td", "th"})) for r in rows),
                default=0)
    if width == 0:
        return []
    # column widths in proportion to the longest text of each column (3 to 40 characters), given to
    # LaTeX so that long cells wrap inside the page instead of running off it
    longest = [3] * width
    for r in rows:
        column = 0
        for cell in elements(r, {"td", "th"}):
            span = int(cell.attrs.get("colspan") or 1)
            if span == 1:
                longest[column] = max(longest[column], min(40, len("".join(_text(cell)).strip())))
            column += span
    group = nodes.tgroup(cols=width)
    group.extend(nodes.colspec(colwidth=w) for w in longest)

    def row_node(tr):
        row = nodes.row()
        for cell in elements(tr, {"td", "th"}):
            entry = nodes.entry("", *(_blocks(cell.children) or [nodes.paragraph()]))
            span = int(cell.attrs.get("colspan") or 1)
            if span > 1:
                entry["morecols"] = span - 1
            row += entry
        return row

    if head_rows:
        group += nodes.thead("", *(row_node(r) for r in head_rows))
    group += nodes.tbody("", *(row_node(r) for r in rows if r not in head_rows))
    out = [nodes.paragraph("", "", nodes.strong("", "", *_inlines(caption.children)))] if caption else []
    size = r"\scriptsize" if width >= 8 else r"\small"  # wide results tables fit the page in a smaller font
    return out + [_latex(r"\begingroup" + size), nodes.table("", group, classes=["nmst-report-table", "colwidths-given"]),
                  _latex(r"\endgroup")]


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
            # (Sphinx's inline_all_toctrees leaves a chapter's top nodes pointing at their old parent,
            # so ownership is found top-down: a solution of a nested file belongs to that file)
            nested = {id(s) for f in top.findall(addnodes.start_of_file) for s in f.findall(solution_node)}
            solutions = [s for s in top.findall(solution_node) if id(s) not in nested]
            if not solutions:
                continue
            section = nodes.section(ids=[f"solutions-{chapter['docname'].replace('/', '-')}"])
            section += nodes.title("", "Solutions to the exercises")
            for solution in solutions:
                solution.parent.remove(solution)
                section += solution
            top += section


class ProofsAsTextbookProofs(SphinxPostTransform):
    """A proof as a printed textbook sets it (LaTeX): *Proof.* in italics, the text, a square at the end.

    sphinx-proof wraps a proof in an admonition without a title, which Sphinx's LaTeX writer opens
    as ``\\begin{sphinxadmonition}{note}`` followed by the proof's first paragraph, read as the
    title: an empty coloured title bar above every proof.
    """

    default_priority = 30
    formats = ("latex",)

    def run(self, **kwargs) -> None:
        from sphinx_proof.nodes import proof_node

        for proof in list(self.document.findall(proof_node)):
            proof.replace_self(textbook_proof(proof))


def textbook_proof(proof) -> nodes.container:
    """The proof's paragraphs, its leading "Proof." in italics and a square ending its last line."""
    body = [child for admonition in proof.children for child in admonition.children]
    first = body[0] if body and isinstance(body[0], nodes.paragraph) else None
    if first is not None and first.children and isinstance(first[0], nodes.Text) \
            and first[0].astext().startswith("Proof. "):
        rest = first[0].astext()[len("Proof. "):]
        first.replace(first[0], nodes.Text(rest))
        first.insert(0, nodes.emphasis("Proof.", "Proof."))
        first.insert(1, nodes.Text(" "))
    qed = nodes.raw("", r"\hfill\ensuremath{\square}", format="latex")
    if body and isinstance(body[-1], nodes.paragraph):
        body[-1] += qed
    else:
        body.append(nodes.paragraph("", "", qed))
    return nodes.container("", *body, classes=["nmst-proof"])


class NumberChaptersAsOnTheSite(SphinxPostTransform):
    """Parts unnumbered, chapters numbered only in numbered parts (LaTeX; item 4b).

    LaTeX numbers every ``\\chapter``, so the front matter (how to use, notation, instructors)
    would push Chapter 1 to Chapter 4, and with it every figure and equation number. Around each
    part (sphinx-jupyterbook-latex turns the toc's captions into parts, priority 700)
    ``secnumdepth`` is set: -2 (nothing numbered) for the part heading and unnumbered parts, 1
    (chapters and sections) in parts whose chapters the site numbers.
    """

    default_priority = 800
    formats = ("latex",)

    def run(self, **kwargs) -> None:
        from sphinx import addnodes

        numbered_docs = {doc for doc, numbers in self.env.toc_secnumbers.items() if numbers}
        self.document.insert(0, _latex(r"\setcounter{secnumdepth}{-2}"))  # the introduction
        for part in [c for c in self.document.children if isinstance(c, nodes.compound)]:
            section = next(iter(part.findall(nodes.section)), None)
            if section is None or not section.children or not isinstance(section[0], nodes.title):
                continue
            chapters = [f["docname"] for f in section.findall(addnodes.start_of_file)]
            numbered = any(doc in numbered_docs for doc in chapters)
            part.parent.insert(part.parent.index(part), _latex(r"\setcounter{secnumdepth}{-2}"))
            section.insert(1, _latex(r"\setcounter{secnumdepth}{%d}" % (1 if numbered else -2)))


def _latex(code: str) -> nodes.raw:
    return nodes.raw("", code + "\n", format="latex")


# ---------------------------------------------------------------------------------------
# 5. Download menu and executed notebooks (HTML)
# ---------------------------------------------------------------------------------------


def download_buttons(buttons: list, pathto, pagename: str, executed: bool, edition: str, pdf: bool = True) -> list:
    """The theme's download entries with the print dialog replaced by the book's PDF, and the
    executed notebook added after the source notebook (the entry whose text is ".ipynb": the
    page's source for a notebook chapter) when ``executed``."""
    out = []
    for button in buttons:
        if button.get("label") == "download-pdf-button" and pdf:
            out.append({"type": "link", "url": pathto(PDF_NAME, 1), "text": ".pdf (book)",
                        "tooltip": f"The whole book as a PDF ({edition})", "icon": "fas fa-file-pdf",
                        "label": "download-book-pdf-button"})
            continue
        out.append(button)
        if button.get("text") == ".ipynb" and executed and not any(
                b.get("label") == "download-executed-notebook-button" for b in out):
            out.append({"type": "link", "url": f"{pathto(EXECUTED_DIR, 1)}/{pagename}.ipynb",
                        "text": ".ipynb (with outputs)", "tooltip": "Download the notebook with its outputs",
                        "icon": "fas fa-code", "label": "download-executed-notebook-button"})
            button["tooltip"] = "Download the notebook (no outputs: run it yourself)"
    return out


def write_executed_notebook(source: Path, cache_dir: Path, target: Path) -> bool:
    """Write ``source`` with the outputs the build's jupyter-cache holds for it to ``target``
    (atomically); False, writing nothing, when the cache has no execution of this exact code."""
    import nbformat
    from jupyter_cache import get_cache

    if not cache_dir.is_dir():
        return False
    notebook = nbformat.read(str(source), as_version=4)
    try:
        _, merged = get_cache(str(cache_dir)).merge_match_into_notebook(notebook)
    except KeyError:  # the code changed since the cache was filled
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    nbformat.write(merged, str(tmp))
    tmp.replace(target)  # a reader never downloads half a notebook
    return True


def _course_tag(app, config) -> None:
    """The course edition (``nmst_course_edition``, nmst_book.py item 4) is tagged ``nmst_course``:
    pages can leave out what only the public edition has (``{only} html and not nmst_course``)."""
    if config.nmst_course_edition:
        app.tags.add("nmst_course")


def _edit_download_menu(app, pagename, templatename, context, doctree) -> None:
    edition = app.config.myst_substitutions.get("edition", "")
    for group in context.get("header_buttons", []):
        if group.get("label") != "download-buttons":
            continue
        executed = False
        if context.get("page_source_suffix") == ".ipynb" or context.get("ipynb_source"):
            cache_dir = Path(app.env.mystnb_config.execution_cache_path)  # set by myst-nb at builder-inited
            executed = write_executed_notebook(Path(app.env.doc2path(pagename)), cache_dir,
                                               Path(app.outdir) / EXECUTED_DIR / f"{pagename}.ipynb")
        # the course edition keeps the print dialog: the book's PDF holds the solutions it leaves out
        group["buttons"] = download_buttons(group["buttons"], context["pathto"], pagename, executed, edition,
                                            pdf=not app.config.nmst_course_edition)


def setup(app):
    app.connect("config-inited", _set_edition, priority=900)
    app.connect("config-inited", _course_tag, priority=900)
    app.connect("config-inited", _use_book_class, priority=900)  # after sphinx-jupyterbook-latex (500)
    app.connect("config-inited", _latex_layout, priority=900)
    app.connect("builder-inited", _copy_book_class, priority=900)
    app.connect("doctree-resolved", _latex_figure_depth)  # LaTeXBuilder.write emits no write-started
    app.add_post_transform(ExplorerToStaticFigure)
    app.add_post_transform(HtmlOutputsForLatex)
    app.add_post_transform(SolutionsAtChapterEnd)
    app.add_post_transform(NumberChaptersAsOnTheSite)
    app.add_post_transform(ProofsAsTextbookProofs)
    app.connect("html-page-context", _edit_download_menu, priority=600)  # after the theme's buttons
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
