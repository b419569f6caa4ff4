"""Checks of the book's PDF, its edition and its citation file (issue 26); no pytest inside.

Each function returns a list of problems (empty = fine), so that a unit test can plant a bad
input and see the check fail (tests/site/test_pdf.py).

1. :func:`missing_titles`: every chapter and back-matter page of ``_toc.yml`` must appear in the
   PDF's text (pdftotext), by its title.
2. :func:`unresolved_references`: LaTeX prints ``??`` for a reference it could not resolve.
3. :func:`raw_model_tokens`: a model token that reached the PDF unescaped or double-escaped.
   The website shows ``<unk>`` as those five characters (the HTML holds ``&lt;unk&gt;``); the PDF
   must show the same. A token written raw into LaTeX under an OT1 font comes out as ``¡unk¿``; one
   that went through HTML escaping twice comes out as ``&lt;unk&gt;``; both are flagged. A
   correctly typeset ``<unk>`` (code, outputs, tables) is what the site shows and is not a problem.
4. :func:`missing_glyphs`: XeLaTeX drops a character its font lacks with only a line in the log
   ("Missing character: There is no ... in font ..."): a silent gap on the page.
5. :func:`edition_problems`: the errata page names the current edition of ``_config.yml``, and
   ``CITATION.cff`` and the intro's BibTeX box agree with it.
6. :func:`citation_problems`: ``CITATION.cff`` validates against the Citation File Format 1.2.0
   JSON schema (``tests/site/cff-1.2.0.schema.json``, from the CFF project (CC-BY-4.0), as shipped in
   cffconvert 2.0.0; cffconvert itself pins jsonschema < 4, which the book's stack cannot use).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml

TOKENS = ("unk", "eos", "pad", "bos", "|endoftext|")
_TOKEN_ALTERNATIVES = "|".join(re.escape(t) for t in TOKENS)
# ¡unk¿ (OT1's < and >), &lt;unk&gt; (escaped twice), \textless{}unk (TeX source leaked as text)
_MANGLED = re.compile(
    rf"¡(?:{_TOKEN_ALTERNATIVES})¿|&lt;(?:{_TOKEN_ALTERNATIVES})&gt;|\\textless\{{\}}(?:{_TOKEN_ALTERNATIVES})"
)


def pdf_text(pdf: Path) -> str:
    """The PDF's text, as pdftotext (poppler-utils) extracts it."""
    return subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], check=True,
                          capture_output=True, text=True).stdout


def page_count(pdf: Path) -> int:
    """The number of pages, read by pdfinfo."""
    info = subprocess.run(["pdfinfo", str(pdf)], check=True, capture_output=True, text=True).stdout
    match = re.search(r"^Pages:\s+(\d+)", info, re.M)
    if match is None:
        raise ValueError(f"pdfinfo gave no page count for {pdf.name}")
    return int(match.group(1))


def _squash(text: str) -> str:
    """Whitespace collapsed, soft hyphens and ligatures undone, for comparing titles with pdftotext."""
    text = text.replace("\u00ad", "").replace("ﬁ", "fi").replace("ﬂ", "fl").replace("ﬀ", "ff")
    return re.sub(r"\s+", " ", text).strip().lower()


def missing_titles(text: str, titles: dict[str, str]) -> list[str]:
    """The pages (``{docname: title}``) whose title is not in the PDF's text."""
    squashed = _squash(text)
    return [f"{doc}: title {title!r} not found in the PDF" for doc, title in titles.items()
            if _squash(title) not in squashed]


def unresolved_references(text: str, context: int = 40) -> list[str]:
    """Each ``??`` (an unresolved LaTeX reference or citation) with the text around it."""
    return [f"'??' in ...{text[max(0, m.start() - context):m.end() + context]!r}..."
            for m in re.finditer(r"\?\?", text)]


def raw_model_tokens(text: str) -> list[str]:
    """Model tokens mangled on their way into the PDF (see the module docstring, item 3)."""
    found = [m.group(0) for m in _MANGLED.finditer(text)]
    return [f"{len(found)} mangled model token(s): " + ", ".join(sorted(set(found)))] if found else []


def missing_glyphs(log: str) -> list[str]:
    """XeLaTeX's "Missing character" lines: characters its fonts lack, dropped from the page."""
    lines = sorted(set(re.findall(r"Missing character: There is no .*", log)))
    return lines


def toc_titles(root: Path) -> dict[str, str]:
    """``{docname: first heading}`` of every page in ``_toc.yml`` (notebooks: first Markdown cell's ``#``)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    docs = [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    titles = {}
    for doc in docs:
        path = next((root / (doc + s) for s in (".md", ".ipynb") if (root / (doc + s)).is_file()), None)
        if path is None:
            raise ValueError(f"_toc.yml names {doc!r}, which is neither {doc}.md nor {doc}.ipynb")
        if path.suffix == ".ipynb":
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        else:
            source = path.read_text(encoding="utf-8")
        match = re.search(r"^# (.+)$", source, re.M)
        if match is None:
            raise ValueError(f"{path.name} has no '# ' title")
        titles[doc] = re.sub(r"[*_`]", "", match.group(1)).strip()
    return titles


def config_edition(config: dict) -> dict[str, str]:
    """The edition fields of ``_config.yml`` (parse.myst_substitutions); ValueError if missing."""
    subs = (config.get("parse") or {}).get("myst_substitutions") or {}
    missing = [k for k in ("edition", "edition_version", "edition_date") if not subs.get(k)]
    if missing:
        raise ValueError(f"_config.yml parse.myst_substitutions lacks {', '.join(missing)}")
    return {k: str(subs[k]) for k in ("edition", "edition_version", "edition_date")}


def edition_problems(edition: dict[str, str], errata_md: str, citation: dict, intro_md: str,
                     issues_url: str) -> list[str]:
    """Where the errata page, CITATION.cff or the intro's BibTeX box disagree with the edition."""
    problems = []
    section = f"## {edition['edition']} (version {edition['edition_version']}, {edition['edition_date']})"
    if section not in errata_md:
        problems.append(f"the errata page has no section {section!r} for the current edition")
    if issues_url not in errata_md:
        problems.append(f"the errata page does not say where to report an erratum ({issues_url})")
    if str(citation.get("version")) != edition["edition_version"]:
        problems.append(f"CITATION.cff version {citation.get('version')!r} != {edition['edition_version']!r}")
    if str(citation.get("date-released")) != edition["edition_date"]:
        problems.append(f"CITATION.cff date-released {citation.get('date-released')!r} != {edition['edition_date']!r}")
    preferred = citation.get("preferred-citation") or {}
    if str(preferred.get("edition")) != edition["edition"]:
        problems.append(f"CITATION.cff preferred-citation edition {preferred.get('edition')!r} != {edition['edition']!r}")
    bibtex = re.search(r"```bibtex\n(.*?)```", intro_md, re.S)
    if bibtex is None:
        problems.append("the intro has no BibTeX box")
    else:
        entry = bibtex.group(1)
        for want in (f"version   = {{{edition['edition_version']}}}",
                     f"note      = {{{edition['edition']}, {edition['edition_date']}}}",
                     f"year      = {{{edition['edition_date'][:4]}}}"):
            if want not in entry:
                problems.append(f"the intro's BibTeX box lacks {want!r}")
    return problems


class _NoDates(yaml.SafeLoader):
    """YAML without implicit timestamps: CFF dates stay strings, as the schema expects."""


_NoDates.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_citation(text: str) -> dict:
    """CITATION.cff's content, dates as strings."""
    data = yaml.load(text, Loader=_NoDates)  # noqa: S506 (a SafeLoader subclass)
    if not isinstance(data, dict):
        raise ValueError("CITATION.cff must hold a YAML mapping")
    return data


def citation_problems(citation: dict, schema: dict) -> list[str]:
    """Every way ``citation`` breaks the CFF schema (draft-07, formats checked)."""
    import jsonschema

    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in sorted(validator.iter_errors(citation), key=lambda e: list(map(str, e.absolute_path)))]
