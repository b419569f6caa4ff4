"""Small Sphinx fixes for the book (loaded from _config.yml as a local extension).

1. **Docstrings on the API page** (book/api.md). nmst_lib's docstrings are written to read
   well in ``help()``: plain text with the papers' notation, e.g. ``q(|y| > L)`` or ``1/|V|``.
   In reStructuredText ``|y|`` is a substitution reference and breaks a ``-W`` build, so
   before autodoc parses a docstring, such absolute-value bars outside inline literals are
   escaped; the text renders as written.
2. **Inline scripts added twice.** Sphinx 7.4 registers an inline script that an extension
   adds after the builder starts (sphinx-thebe's ``const THEBE_JS_URL = ...``,
   sphinx-togglebutton's selector) both directly and through its registry, so every page
   declared ``const THEBE_JS_URL`` twice: a JavaScript SyntaxError in the console. Identical
   ``<script>`` entries are dropped before the page is written.
"""

from __future__ import annotations

import re

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


def _process_docstring(app, what, name, obj, options, lines):
    lines[:] = [escape_bars(line) for line in lines]


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


def setup(app):
    app.connect("autodoc-process-docstring", _process_docstring)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
