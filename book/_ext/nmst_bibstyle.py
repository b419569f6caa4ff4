"""The bibliography's labels in the style the text cites in (a local Sphinx extension, _config.yml).

The chapters cite author-year (``bibtex_reference_style: author_year``: "Welleck et al. [2020]"),
but pybtex's ``plain`` style labels the bibliography's entries [1]-[17], so a reader who follows a
citation lands on a number the text never used. This style keeps ``plain``'s sorting (author, year,
title) and formatting and labels each entry the way the text names it: "Welleck et al., 2020",
"Martins, Marinho and Martins, 2020" for two or three authors... (first author "et al." from three on),
with "2020a", "2020b" when one label would name two entries.

The text's citations carry the same letter (``bibtex_reference_style: nmst_author_year``): the
year of an author-year citation is read from the entry's bibliography label, so the text says
"Welleck et al. [2020a]" where the bibliography lists "Welleck et al., 2020a" beside a 2020b.
"""

from __future__ import annotations

import re
from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from sphinxcontrib.bibtex import plugin as bibtex_plugins
from sphinxcontrib.bibtex.style.referencing import GroupReferenceStyle
from sphinxcontrib.bibtex.style.referencing.author_year import (
    AuthorYearReferenceStyle,
)
from sphinxcontrib.bibtex.style.referencing.basic_author_year import (
    BasicAuthorYearParentheticalReferenceStyle,
    BasicAuthorYearTextualReferenceStyle,
)
from sphinxcontrib.bibtex.style.referencing.extra_author import (
    ExtraAuthorReferenceStyle,
)
from sphinxcontrib.bibtex.style.referencing.extra_empty import (
    ExtraEmptyReferenceStyle,
)
from sphinxcontrib.bibtex.style.referencing.extra_label import (
    ExtraLabelReferenceStyle,
)
from sphinxcontrib.bibtex.style.referencing.extra_year import (
    ExtraYearReferenceStyle,
)
from sphinxcontrib.bibtex.style.template import (
    join,
    join2,
    node,
    post_text,
    pre_text,
    reference,
)

_BRACES = re.compile(r"[{}]")


def _last_name(person) -> str:
    return _BRACES.sub("", " ".join(person.prelast_names + person.last_names)).strip()


def author_year_label(entry) -> str:
    """"Welleck et al., 2020": the first author's last name ("A and B" for two authors, "A et al."
    for three or more), a comma, and the year; editors stand in for missing authors, the title
    for missing people, "n.d." for a missing year."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    year = _BRACES.sub("", entry.fields.get("year", "n.d."))
    if not persons:
        name = _BRACES.sub("", entry.fields.get("title", entry.key)).split(":")[0][:40]
    elif len(persons) == 1:
        name = _last_name(persons[0])
    elif len(persons) == 2:
        name = f"{_last_name(persons[0])} and {_last_name(persons[1])}"
    else:
        name = f"{_last_name(persons[0])} et al."
    return f"{name}, {year}"


class AuthorYearLabels(BaseLabelStyle):
    """pybtex label style: :func:`author_year_label`, made unique with a, b, ... after the year."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year_label(e) for e in entries]
        counts, seen = Counter(labels), Counter()
        for label in labels:
            if counts[label] > 1:
                seen[label] += 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]
            else:
                yield label


class AuthorYearStyle(PlainStyle):
    """``plain`` with :class:`AuthorYearLabels` (``bibtex_default_style: nmst_authoryear``)."""

    default_label_style = AuthorYearLabels


@node
def label_year(children, data) -> Text:
    """The year as the bibliography labels the entry: "2020a" for "Welleck et al., 2020a"."""
    assert not children
    return Text(data["formatted_entry"].label.rsplit(", ", 1)[-1])


class LabelYearParenthetical(BasicAuthorYearParentheticalReferenceStyle):
    """(Welleck et al., 2020a): the parenthetical citation with the label's year."""

    def inner(self, role_name):
        return join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
            pre_text,
            reference[join(sep=self.author_year_sep)[
                self.person.author_or_editor_or_title(full="s" in role_name), label_year]],
            post_text,
        ]


class LabelYearTextual(BasicAuthorYearTextualReferenceStyle):
    """Welleck et al. [2020a]: the textual citation with the label's year."""

    def inner(self, role_name):
        return join(sep=self.text_reference_sep)[
            self.person.author_or_editor_or_title(full="s" in role_name),
            join[
                self.bracket.left,
                join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
                    pre_text, reference[label_year], post_text],
                self.bracket.right,
            ],
        ]


class LabelYearReferenceStyle(AuthorYearReferenceStyle):
    """sphinxcontrib-bibtex's ``author_year`` with each year written as the bibliography labels
    it (:func:`label_year`); every other citation role as ``author_year`` has it."""

    def __post_init__(self):
        self.styles.extend([
            LabelYearParenthetical(bracket=self.bracket_parenthetical, person=self.person,
                                   author_year_sep=self.author_year_sep, pre_text_sep=self.pre_text_sep,
                                   post_text_sep=self.post_text_sep),
            LabelYearTextual(bracket=self.bracket_textual, person=self.person,
                             text_reference_sep=self.text_reference_sep, pre_text_sep=self.pre_text_sep,
                             post_text_sep=self.post_text_sep),
            ExtraAuthorReferenceStyle(bracket=self.bracket_author, person=self.person),
            ExtraLabelReferenceStyle(bracket=self.bracket_label),
            ExtraYearReferenceStyle(bracket=self.bracket_year),
            ExtraEmptyReferenceStyle(),
        ])
        GroupReferenceStyle.__post_init__(self)


def setup(app):
    register_plugin("pybtex.style.formatting", "nmst_authoryear", AuthorYearStyle)
    bibtex_plugins.register_plugin("sphinxcontrib.bibtex.style.referencing", "nmst_author_year",
                                   LabelYearReferenceStyle)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
