"""Small Sphinx fixes for the book (loaded from _config.yml as a local extension).

1. **Docstrings on the API page** (book/api.md). nmst_lib's docstrings are written to read
   well in ``help()``: plain text with the papers' notation, e.g. ``q(|y| > L)`` or ``1/|V|``.
   In reStructuredText ``|y|`` is a substitution reference and breaks a ``-W`` build, so
   before autodoc parses a docstring, such absolute-value bars outside inline literals are
   escaped; the text renders as written.
2. **"word: text" on the first line of an attribute docstring.** napoleon reads the first
   line of an attribute, property or constant docstring as ``type: description`` (Google
   style). Here types come from annotations, and a first line such as
   ``k: the number of context tokens`` is prose, which napoleon would turn into a broken
   cross-reference to a class ``k``. An empty RST comment line is put in front of such a
   docstring before napoleon sees it; it renders as nothing.
3. **Inline scripts added twice.** Sphinx 7.4 registers an inline script that an extension
   adds after the builder starts (sphinx-thebe's ``const THEBE_JS_URL = ...``,
   sphinx-togglebutton's selector) both directly and through its registry, so every page
   declared ``const THEBE_JS_URL`` twice: a JavaScript SyntaxError in the console. Identical
   ``<script>`` entries are dropped before the page is written.
4. **The course edition** (``bash scripts/book.sh --course``, config ``nmst_course_edition: true``):
   every exercise solution is removed from the pages, dropdowns and all. sphinx-exercise's own
   ``hide_solutions`` cannot do it for this book: it drops ``solution-start`` but keeps
   ``solution-end``, which crashes the HTML writer, and would leave the solution's content
   on the page. Here the solutions are first merged as usual, then removed (a transform that
   runs after sphinx-exercise's ``MergeGatedSolutions``).
"""

from __future__ import annotations

import re

from sphinx.transforms import SphinxTransform

# an inline literal ``...`` or an interpreted text / role `...` (left untouched)
_LITERAL = re.compile(r"(``.+?``|`[^`]+`)")
# |x| with no space just inside the bars: an absolute value or a cardinality, never a table
_BARS = re.compile(r"\|(?=[^\s|])([^|`\n]*?[^\s|\\])\|")


def escape_bars(line: str) -> str:
    """Escape ``|x|`` outside inline literals: ``q(|y| > L)`` -> ``q(\\|y\\| > L)``."""
    parts = _LITERAL.split(line)
    for i in range(0, len(parts), 2):  # even parts are outside literals
        parts[i] = _BARS.sub(r"\\|\1\\|", parts[i])
    return "".join(parts)


_COLON = re.compile(r"(?<!:):(?!:)")


def _has_prose_colon(line: str) -> bool:
    """A single colon outside inline literals (what napoleon would split a type off at)."""
    return any(_COLON.search(part) for part in _LITERAL.split(line)[::2])


def _process_docstring(app, what, name, obj, options, lines):
    lines[:] = [escape_bars(line) for line in lines]
    first = next((line for line in lines if line.strip()), "")
    if what in ("attribute", "property", "data") and _has_prose_colon(first):
        lines[:0] = ["..", ""]  # an empty comment: napoleon finds no "type:" on the first line


def _script_key(script):
    attributes = getattr(script, "attributes", {}) or {}
    return (getattr(script, "filename", script) or "", tuple(sorted((k, str(v)) for k, v in attributes.items())))


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, unique = set(), []
    for script in scripts:
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: other handlers may still append per-page scripts


class _RemoveSolutions(SphinxTransform):
    """Remove every sphinx-exercise solution (plain or gated) in the course edition (item 4)."""

    default_priority = 50  # after sphinx-exercise's MergeGatedSolutions (10)

    def apply(self, **kwargs) -> None:
        if not self.config.nmst_course_edition:
            return
        from sphinx_exercise.nodes import solution_end_node, solution_node, solution_start_node

        for cls in (solution_node, solution_start_node, solution_end_node):
            for node in list(self.document.findall(cls)):
                node.parent.remove(node)


def setup(app):
    app.add_config_value("nmst_course_edition", False, "env")
    app.add_transform(_RemoveSolutions)
    app.connect("autodoc-process-docstring", _process_docstring, priority=400)  # before napoleon (500)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    app.setup_extension("nmst_pdf")  # the PDF, the edition and the download menu (issue 26; book/_ext/nmst_pdf.py)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
