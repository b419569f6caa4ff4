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
