"""The book as a PDF, its edition and its citation file (issue 26).

The PDF is built by ``bash scripts/pdf.sh`` (``scripts/test.sh`` runs it after the website).
Without ``_build/latex/book.pdf`` (or without pdftotext) the tests of the built PDF are skipped
with the reason, unless ``NMST_REQUIRE_SITE=1`` (set by ``scripts/test.sh``), where they fail.
The checks themselves (tests/site/pdf_checks.py) are unit-tested here on planted bad inputs, and
the edition and CITATION.cff checks need no build.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "book" / "_ext"))
import nmst_pdf  # noqa: E402
import pdf_checks  # noqa: E402

ROOT = Path(os.environ.get("NMST_BOOK_ROOT") or Path(__file__).resolve().parents[2])
PDF = ROOT / "_build" / "latex" / "book.pdf"
REQUIRED = os.environ.get("NMST_REQUIRE_SITE") == "1"
SCHEMA = Path(__file__).resolve().parent / "cff-1.2.0.schema.json"


def _config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- the built PDF


@pytest.fixture(scope="module")
def pdf() -> Path:
    reason = None
    if not PDF.is_file():
        reason = f"no {PDF.relative_to(ROOT)}: build it with `bash scripts/pdf.sh`"
    elif shutil.which("pdftotext") is None or shutil.which("pdfinfo") is None:
        reason = "pdftotext/pdfinfo missing (Debian's poppler-utils; scripts/pdf.sh installs it)"
    if reason:
        if REQUIRED:
            pytest.fail(reason + " (NMST_REQUIRE_SITE=1: the PDF checks must run)")
        pytest.skip(reason)
    return PDF


@pytest.fixture(scope="module")
def text(pdf) -> str:
    return pdf_checks.pdf_text(pdf)


def test_pdf_has_every_chapter_and_back_matter_page(text):
    titles = pdf_checks.toc_titles(ROOT)
    assert len(titles) >= 15
    assert pdf_checks.missing_titles(text, titles) == []


def test_pdf_has_no_unresolved_reference(text):
    assert pdf_checks.unresolved_references(text) == []


def test_pdf_has_no_mangled_model_token(text):
    assert pdf_checks.raw_model_tokens(text) == []


def test_pdf_lost_no_character_for_want_of_a_glyph(pdf):
    log = pdf.with_suffix(".log").read_text(encoding="utf-8", errors="replace")
    assert pdf_checks.missing_glyphs(log) == []


def test_pdf_title_page_names_the_edition(pdf, text):
    edition = pdf_checks.config_edition(_config())
    first_page = text.split("\f", 1)[0]
    assert edition["edition"].capitalize() in first_page and edition["edition_version"] in first_page
    print(f"\n[pdf] {pdf.name}: {pdf_checks.page_count(pdf)} pages")


def test_pdf_shows_explorers_as_static_figures(text):
    """Each explorer is replaced by its first frame and a line naming the shown settings."""
    assert text.count("Static view of an explorer") >= 7
    assert "IPython.core.display.HTML object" not in text


def test_pdf_collects_solutions_at_chapter_ends(text):
    assert text.count("Solutions to the exercises") >= 9


# --------------------------------------------------------------------------- edition, citation


def test_errata_page_citation_and_bibtex_name_the_current_edition():
    config = _config()
    edition = pdf_checks.config_edition(config)
    problems = pdf_checks.edition_problems(
        edition,
        (ROOT / "book" / "errata.md").read_text(encoding="utf-8"),
        pdf_checks.load_citation((ROOT / "CITATION.cff").read_text(encoding="utf-8")),
        (ROOT / "book" / "intro.md").read_text(encoding="utf-8"),
        config["repository"]["url"].rstrip("/") + "/issues",
    )
    assert problems == []
    assert nmst_pdf.edition_from_substitutions(config["parse"]["myst_substitutions"]) == edition


def test_citation_file_validates_against_the_cff_schema():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    citation = pdf_checks.load_citation((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert pdf_checks.citation_problems(citation, schema) == []


# --------------------------------------------------------------------------- the checks can fail


def test_unresolved_reference_check_finds_planted_question_marks():
    problems = pdf_checks.unresolved_references("as shown in Theorem ?? above, and in Fig. 2.1")
    assert len(problems) == 1 and "Theorem ??" in problems[0]
    assert pdf_checks.unresolved_references("as shown in Theorem 5.2 (is it? yes)") == []


@pytest.mark.parametrize("bad", ["the ¡unk¿ of", "a &lt;eos&gt; here", r"x \textless{}pad\textgreater{}",
                                 "¡|endoftext|¿"])
def test_model_token_check_finds_planted_mangled_tokens(bad):
    problems = pdf_checks.raw_model_tokens("fine text <unk> and <eos>\n" + bad)
    assert len(problems) == 1 and problems[0].startswith("1 mangled model token(s)")


def test_model_token_check_accepts_tokens_shown_as_the_site_shows_them():
    assert pdf_checks.raw_model_tokens("Alan <unk> writes <eos> ... <|endoftext|>") == []


def test_title_check_finds_a_missing_chapter_and_tolerates_line_breaks():
    text = "1 Decoding\nalgorithms and candidate sets\n2 Consistency"
    titles = {"chapters/01": "Decoding algorithms and candidate sets", "chapters/03": "Consistent sampling"}
    assert pdf_checks.missing_titles(text, titles) == ["chapters/03: title 'Consistent sampling' not found in the PDF"]


def test_missing_glyph_check_reads_xelatex_log():
    log = "Overfull \\hbox\nMissing character: There is no ⟨ (U+27E8) in font FreeMono:mapping=tex-text;!\n"
    assert pdf_checks.missing_glyphs(log) == ["Missing character: There is no ⟨ (U+27E8) in font FreeMono:mapping=tex-text;!"]
    assert pdf_checks.missing_glyphs("Output written on book.pdf (3 pages).") == []


def _good_edition_inputs():
    edition = {"edition": "3rd edition", "edition_version": "3.0", "edition_date": "2026-11-26"}
    errata = "## 3rd edition (version 3.0, 2026-11-26)\nReport at https://example.org/book/issues\n"
    citation = {"version": "3.0", "date-released": "2026-11-26", "preferred-citation": {"edition": "3rd edition"}}
    intro = ("```bibtex\n@book{x,\n  version   = {3.0},\n  year      = {2026},\n"
             "  note      = {3rd edition, 2026-11-26}\n}\n```\n")
    return edition, errata, citation, intro, "https://example.org/book/issues"


def test_edition_check_passes_consistent_inputs_and_flags_each_disagreement():
    edition, errata, citation, intro, url = _good_edition_inputs()
    assert pdf_checks.edition_problems(edition, errata, citation, intro, url) == []
    stale_errata = errata.replace("3rd edition", "2nd edition")
    assert "no section" in pdf_checks.edition_problems(edition, stale_errata, citation, intro, url)[0]
    no_tracker = errata.replace(url, "")
    assert "where to report" in pdf_checks.edition_problems(edition, no_tracker, citation, intro, url)[0]
    old_cff = dict(citation, version="2.0")
    assert "CITATION.cff version" in pdf_checks.edition_problems(edition, errata, old_cff, intro, url)[0]
    old_box = intro.replace("{3.0}", "{2.0}")
    assert "BibTeX box lacks" in pdf_checks.edition_problems(edition, errata, citation, old_box, url)[0]


def test_citation_check_flags_a_file_that_breaks_the_schema():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    good = pdf_checks.load_citation("cff-version: 1.2.0\nmessage: m\ntitle: t\nauthors:\n  - name: a\n"
                                    "date-released: 2026-11-26\n")
    assert good["date-released"] == "2026-11-26"  # a string, as the schema wants
    assert pdf_checks.citation_problems(good, schema) == []
    no_authors = {k: v for k, v in good.items() if k != "authors"}
    assert any("authors" in p for p in pdf_checks.citation_problems(no_authors, schema))
    bad_date = dict(good, **{"date-released": "26 November 2026"})
    assert pdf_checks.citation_problems(bad_date, schema) != []
    unknown_key = dict(good, edition="3rd")  # 'edition' belongs in a reference, not at the top
    assert pdf_checks.citation_problems(unknown_key, schema) != []


def test_edition_fields_must_be_complete_and_dated():
    with pytest.raises(ValueError, match="edition_date"):
        nmst_pdf.edition_from_substitutions({"edition": "3rd edition", "edition_version": "3.0"})
    with pytest.raises(ValueError, match="ISO date"):
        nmst_pdf.edition_from_substitutions({"edition": "3rd edition", "edition_version": "3.0",
                                             "edition_date": "November 2026"})
    with pytest.raises(TypeError):
        nmst_pdf.edition_from_substitutions(["3rd edition"])


# --------------------------------------------------------------------------- nmst_pdf's pieces


def test_explorer_static_frame_is_the_initial_frame_with_its_settings():
    import matplotlib

    from nmst_lib.plots import Control, explorer_html

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def draw(a, shape):
        fig, ax = plt.subplots(figsize=(2, 1))
        ax.plot([0, 1], [0, a])
        ax.set_title(shape)
        return fig

    markup = explorer_html(draw, [Control("a", (1, 2, 3), label="amplitude", initial=1),
                                  Control("shape", ("<unk>", "flat"), label="shape", kind="dropdown", initial=0)]).data
    png, settings = nmst_pdf.explorer_static_frame(markup)
    assert png.startswith(b"\x89PNG")
    assert settings == "amplitude = 2; shape = <unk>"
    initial = markup.split('src="data:image/png;base64,', 1)[1].split('"', 1)[0]
    import base64

    assert png == base64.b64decode(initial)
    assert nmst_pdf.explorer_static_frame("<div>a table</div>") is None
    with pytest.raises(ValueError, match="initial PNG frame"):
        nmst_pdf.explorer_static_frame('<div class="nmst-explorer"><div class="nmst-explorer-controls"></div></div>')


def test_download_menu_links_the_book_pdf_and_the_executed_notebook():
    # a notebook chapter: the theme's source entry is the .ipynb
    buttons = [
        {"label": "download-source-button", "url": "../_sources/chapters/x.ipynb", "text": ".ipynb"},
        {"label": "download-pdf-button", "type": "javascript", "javascript": "window.print()", "text": ".pdf"},
    ]
    out = nmst_pdf.download_buttons(buttons, lambda name, resource: f"../{name}", "chapters/x", True, "3rd edition")
    labels = [b["label"] for b in out]
    assert labels == ["download-source-button", "download-executed-notebook-button", "download-book-pdf-button"]
    assert out[1]["url"] == "../executed/chapters/x.ipynb" and out[2]["url"] == "../book.pdf"
    assert not any(b.get("type") == "javascript" for b in out)
    # a Markdown page: no executed notebook, the PDF still replaces the print dialog
    md = [{"label": "download-source-button", "url": "_sources/book/intro.md", "text": ".md"}, dict(buttons[1])]
    plain = nmst_pdf.download_buttons(md, lambda n, r: n, "book/intro", False, "e")
    assert [b["label"] for b in plain] == ["download-source-button", "download-book-pdf-button"]
    # the course edition: executed notebook yes, the book's PDF (with solutions) no
    course = nmst_pdf.download_buttons([dict(b) for b in buttons], lambda n, r: n, "chapters/x", True, "e", pdf=False)
    assert [b["label"] for b in course] == ["download-source-button", "download-executed-notebook-button",
                                            "download-pdf-button"]


# --------------------------------------------------------------------------- the site links them

SITE = ROOT / "_build" / "html"


@pytest.fixture(scope="module")
def site_with_pdf() -> Path:
    if not (SITE / "index.html").is_file() or not (SITE / "book.pdf").is_file():
        reason = "no _build/html with book.pdf: run `bash scripts/book.sh` then `bash scripts/pdf.sh`"
        if REQUIRED:
            pytest.fail(reason + " (NMST_REQUIRE_SITE=1: the PDF checks must run)")
        pytest.skip(reason)
    return SITE


def test_every_page_downloads_the_book_pdf_and_chapters_their_executed_notebook(site_with_pdf):
    toc = pdf_checks.toc_titles(ROOT)
    for doc in toc:
        page = (site_with_pdf / f"{doc}.html").read_text(encoding="utf-8")
        assert "download-book-pdf-button" in page and "window.print()" not in page, doc
        depth = doc.count("/")
        assert f'href="{"../" * depth}book.pdf"' in page, doc
        if doc.startswith("chapters/"):
            assert f'href="{"../" * depth}executed/{doc}.ipynb"' in page, doc
            notebook = json.loads((site_with_pdf / "executed" / f"{doc}.ipynb").read_text(encoding="utf-8"))
            outputs = sum(len(cell.get("outputs", [])) for cell in notebook["cells"])
            assert outputs >= 5, f"{doc}: the executed notebook has only {outputs} outputs"


# --------------------------------------------------------------------------- HTML outputs and proofs in LaTeX


def test_report_html_becomes_a_table_with_caption_spans_and_unescaped_tokens():
    from docutils import nodes

    from nmst_lib.report import Html

    markup = Html('<div class="nmst-table-wrapper"><table><caption>Continuations of &lt;unk&gt;</caption>'
                  '<thead><tr><th></th><th colspan="2">ours (cpu)</th></tr>'
                  '<tr><th>model</th><th>ppl</th><th>text</th></tr></thead>'
                  '<tbody><tr><td>VA</td><td>615.97</td><td>the &lt;unk&gt; of <code>a_b</code></td></tr></tbody>'
                  '</table></div>')
    out = nmst_pdf.html_to_nodes(markup)
    caption, table = out[0], next(n for n in out if isinstance(n, nodes.table))
    assert caption.astext() == "Continuations of <unk>"
    assert "colwidths-given" in table["classes"]
    group = table[0]
    assert group["cols"] == 3 and len(list(group.findall(nodes.colspec))) == 3
    head_rows = list(group.findall(nodes.thead))[0].children
    assert [e.get("morecols", 0) for e in head_rows[0].children] == [0, 1]
    body = list(group.findall(nodes.tbody))[0]
    assert body.astext().split("\n\n") == ["VA", "615.97", "the <unk> of a_b"]
    assert any(isinstance(n, nodes.literal) and n.astext() == "a_b" for n in body.findall(nodes.literal))
    raw = [n.astext() for n in out if isinstance(n, nodes.raw)]
    assert raw[0].startswith(r"\begingroup\small") and raw[1].startswith(r"\endgroup")


def test_provenance_stamps_stay_folded_in_print_but_other_details_open():
    markup = ('<div class="nmst-provenance"><p><strong>Profile:</strong> cpu</p><details><summary>Full provenance'
              ' of every run (2 result files)</summary><table><tr><td>--checkpoint-dir /home/x</td></tr></table>'
              '</details></div><details><summary>Every model</summary><p>kept &amp; shown</p></details>')
    text = " | ".join(n.astext() for n in nmst_pdf.html_to_nodes(markup))
    assert "/home/x" not in text
    assert "Full provenance of every run (2 result files): folded on the website" in text
    assert "Every model | kept & shown" in text


def test_proof_becomes_italic_proof_text_and_a_square():
    from docutils import nodes
    from sphinx_proof.nodes import proof_node

    proof = proof_node()
    admonition = nodes.admonition()
    admonition += nodes.paragraph("", "Proof. By Lemma 5.1, it stops.")
    admonition += nodes.math_block("", "x = 1")
    proof += admonition
    out = nmst_pdf.textbook_proof(proof)
    assert isinstance(out, nodes.container) and not list(out.findall(nodes.admonition))
    first = out[0]
    assert isinstance(first[0], nodes.emphasis) and first[0].astext() == "Proof."
    assert first.astext() == "Proof. By Lemma 5.1, it stops."
    assert isinstance(out[-1], nodes.paragraph) and r"\square" in out[-1].astext()  # after the display
