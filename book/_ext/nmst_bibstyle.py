"""The bibliography's labels in the style the text cites in (a local Sphinx extension, _config.yml).

The chapters cite author-year (``bibtex_reference_style: author_year``: "Welleck et al. [2020]"),
but pybtex's ``plain`` style labels the bibliography's entries [1]-[17], so a reader who follows a
citation lands on a number the text never used. This style keeps ``plain``'s sorting (author, year,
title) and formatting and labels each entry the way the text names it: "Welleck et al., 2020",
"Martins, Marinho and Martins, 2020" for two or three authors... (first author "et al." from three on),
with "2020a", "2020b" when one label would name two entries.
"""

from __future__ import annotations

import re
from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle

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


def setup(app):
    register_plugin("pybtex.style.formatting", "nmst_authoryear", AuthorYearStyle)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
