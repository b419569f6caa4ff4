"""The bibliography's author-year labels (book/_ext/nmst_bibstyle.py); no build."""

import sys
from pathlib import Path

from pybtex.database import parse_string

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "book" / "_ext"))
import nmst_bibstyle  # noqa: E402

BIB = r"""
@inproceedings{a, author = {Welleck, Sean and Kulikov, Ilia and Kim, Jaedeok}, title = {Consistency}, year = {2020}}
@inproceedings{b, author = {Welleck, Sean and Kulikov, Ilia and Cho, Kyunghyun}, title = {Other}, year = {2020}}
@article{c, author = {Martins, Pedro and Marinho, Zita}, title = {Sparse}, year = {2020}}
@article{d, author = {{von} Neumann, John}, title = {Games}, year = {1944}}
@misc{e, title = {WikiText: a corpus}}
"""


def test_labels_name_the_work_as_the_text_cites_it():
    entries = parse_string(BIB, "bibtex").entries
    labels = dict(zip(entries, nmst_bibstyle.AuthorYearLabels().format_labels(entries.values())))
    assert labels["a"] == "Welleck et al., 2020a" and labels["b"] == "Welleck et al., 2020b"  # made unique
    assert labels["c"] == "Martins and Marinho, 2020"
    assert labels["d"] == "von Neumann, 1944"
    assert labels["e"] == "WikiText, n.d."
    assert not any(label.strip("[]").isdigit() for label in labels.values())


def test_the_book_uses_the_style():
    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "_config.yml").read_text())
    assert config["sphinx"]["config"]["bibtex_default_style"] == "nmst_authoryear"
    assert "nmst_bibstyle" in config["sphinx"]["local_extensions"]


def test_the_texts_citations_carry_the_bibliographys_letter(tmp_path):
    """A textual and a parenthetical citation of two works one label would name (Welleck et al.,
    2020) say 2020a and 2020b, as the bibliography's labels do; a unique one keeps its year."""
    from sphinx.application import Sphinx

    (tmp_path / "refs.bib").write_text(BIB)
    (tmp_path / "conf.py").write_text(
        f"import sys; sys.path.insert(0, {str(Path(nmst_bibstyle.__file__).parent)!r})\n"
        "extensions = ['sphinxcontrib.bibtex', 'nmst_bibstyle']\n"
        "bibtex_bibfiles = ['refs.bib']\n"
        "bibtex_reference_style = 'nmst_author_year'\n"
        "bibtex_default_style = 'nmst_authoryear'\n"
    )
    (tmp_path / "index.rst").write_text(
        "T\n=\n\nSee :cite:t:`a` and :cite:t:`b`; also :cite:p:`b,c`.\n\n.. bibliography::\n   :all:\n"
    )
    app = Sphinx(str(tmp_path), str(tmp_path), str(tmp_path / "_build"), str(tmp_path / "_doctrees"), "text",
                 status=None, warning=None, freshenv=True)
    app.build()
    text = " ".join((tmp_path / "_build" / "index.txt").read_text().replace("*", "").split())  # no italics
    style = nmst_bibstyle.AuthorYearStyle()  # the bibliography's order (author, year, title) and labels
    ordered = style.sort(parse_string(BIB, "bibtex").entries.values())
    labels = {e.key: label for e, label in zip(ordered, style.format_labels(ordered))}
    year = {key: label.rsplit(", ", 1)[1] for key, label in labels.items()}
    assert sorted((year["a"], year["b"])) == ["2020a", "2020b"]  # "Cho" sorts before "Kim": b is 2020a
    assert f"See Welleck et al. [{year['a']}] and Welleck et al. [{year['b']}]" in text, text
    assert f"[Martins and Marinho, 2020, Welleck et al., {year['b']}]" in text, text
    assert f"[{labels['a']}]" in text and f"[{labels['b']}]" in text, text  # the bibliography's labels


def test_the_book_cites_with_the_label_years():
    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "_config.yml").read_text())
    assert config["sphinx"]["config"]["bibtex_reference_style"] == "nmst_author_year"
