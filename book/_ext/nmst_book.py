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
5. **Constants a package re-exports** (``nmst_lib.data`` re-exports
   ``SUBSTITUTE_NAME``, ``CONTEXT_LEN``, ... from its modules). autodoc reads
   a constant's docstring (the string literal below the assignment) from the
   source of the module it documents, i.e. the package's ``__init__.py``,
   finds none, and leaves the constant off the page, which breaks every
   ``:data:`` reference to it under ``-n``. The docstring is taken from the
   module of the package that defines the constant (the same object), so the
   page shows it as before.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path

from sphinx.pycode import ModuleAnalyzer
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


def reexported_attr_doc(fullname: str) -> list[str] | None:
    """The docstring lines of the constant ``package.NAME`` that a package
    re-exports (named in its ``__all__``), read from the module of the
    package that defines it; None otherwise."""
    modname, _, attr = fullname.rpartition(".")
    try:
        package = importlib.import_module(modname)
    except ImportError:
        return None
    exported = getattr(package, "__all__", ())
    if not hasattr(package, "__path__") or attr not in exported:
        return None
    value = getattr(package, attr, None)
    for info in pkgutil.iter_modules(package.__path__):
        submodule = importlib.import_module(f"{modname}.{info.name}")
        if getattr(submodule, attr, None) is not value:
            continue
        analyzer = ModuleAnalyzer.for_module(submodule.__name__)
        analyzer.analyze()
        doc = analyzer.attr_docs.get(("", attr))
        if doc:
            return list(doc)
    return None


def _merge_reexported_attr_docs(app):
    """Item 5: before autodoc runs, the cached source analysis of each
    package of nmst_lib learns the docstrings of the constants it re-exports
    (autodoc documents a module-level constant only when that analysis has a
    docstring for it, and reads it from there)."""
    import nmst_lib

    packages = pkgutil.walk_packages(
        nmst_lib.__path__, "nmst_lib.", onerror=lambda name: None
    )
    for info in packages:
        if not info.ispkg:
            continue
        package = importlib.import_module(info.name)
        analyzer = ModuleAnalyzer.for_module(info.name)
        analyzer.analyze()
        for attr in getattr(package, "__all__", ()):
            if ("", attr) not in analyzer.attr_docs:
                doc = reexported_attr_doc(f"{info.name}.{attr}")
                if doc:
                    analyzer.attr_docs["", attr] = doc


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
        from sphinx_exercise.nodes import (
            solution_end_node,
            solution_node,
            solution_start_node,
        )

        for cls in (solution_node, solution_start_node, solution_end_node):
            for node in list(self.document.findall(cls)):
                node.parent.remove(node)


# ------------------------------------------------------------------ measured grading times
#: What scripts/measure_grading.py writes: seconds to grade each assignment's solutions.
GRADING_TIMES = Path(__file__).resolve().parents[2] / "assignments" / "grading_times.json"
_SHORT_NAME = {"a1_decoding": "a1", "a2_self_terminating": "a2", "a3_experiments": "a3",
               "a4_sparse_temperature": "a4"}
_ROUNDS_IN_WORDS = {1: "once", 2: "twice", 3: "three times", 4: "four times"}
_TIMES_IN_WORDS = {2: "twice", 3: "three times", 4: "four times", 5: "five times",
                   6: "six times", 7: "seven times", 8: "eight times", 9: "nine times",
                   10: "ten times"}


def _span(values) -> str:
    low, high = min(values), max(values)
    return f"{low:.0f} s" if round(low) == round(high) else f"{low:.0f}-{high:.0f} s"


def grading_substitutions(record: dict | None, timeout_s: float = 900.0) -> dict:
    """The instructors' page's measured grading times, in words, from ``assignments/grading_times.json``.

    ``grading_times``: one sentence per measurement, with the machine, its load, the date and the
    commit; ``grading_timeout_margin``: how many times the slowest grading the default limit is
    (rounded down, in words). Without a record both say that nothing was measured.
    """
    if not record:
        return {"grading_times": "We have not measured grading times on this edition "
                                 "(`scripts/measure_grading.py` writes them).",
                "grading_timeout_margin": "a limit we have not compared with a measured grading"}
    stamp, rows = record["provenance"], record["assignments"]
    parts = []
    for name, row in rows.items():
        sandbox, trusted = row["seconds"]["sandbox"], row["seconds"]["trusted"]
        parts.append(f"{_SHORT_NAME.get(name, name)} {_span(sandbox)} in the sandbox and "
                     f"{_span(trusted)} without it")
    slowest = max(max(max(v) for v in row["seconds"].values()) for row in rows.values())
    peak = max(row["peak_bytes"] for row in rows.values()) / 2**30
    load = stamp["load_average_before"][0], stamp["load_average_after"][0]
    sentence = (
        f"We graded each assignment's solutions {_ROUNDS_IN_WORDS.get(stamp['rounds'], str(stamp['rounds']) + ' times')} in each mode on "
        f"{stamp['cpu_count']} CPU cores (load average {min(load):.1f}-{max(load):.1f} at its start "
        f"and end; {stamp['started'][:10]}, commit "
        f"`{stamp['git_sha'][:7]}`, `scripts/measure_grading.py`): "
        + "; ".join(parts)
        + f". No grading's largest process used more than {peak:.1f} GiB."
    )
    ratio = int(timeout_s // slowest)
    more = "more than " if timeout_s / slowest > 1.02 * ratio else ""
    margin = (f"{more}{_TIMES_IN_WORDS.get(ratio, f'{ratio} times')} the slowest ({slowest:.0f} s)"
              if ratio >= 2 else f"close to the slowest ({slowest:.0f} s)")
    return {"grading_times": sentence, "grading_timeout_margin": margin}


def _add_grading_substitutions(app, config):
    record = None
    if GRADING_TIMES.is_file():
        record = json.loads(GRADING_TIMES.read_text(encoding="utf-8"))
    from nmst_lib.classroom.grading import DEFAULT_LIMITS

    config.myst_substitutions = {**(config.myst_substitutions or {}),
                                 **grading_substitutions(record, DEFAULT_LIMITS.timeout_s)}


def setup(app):
    app.add_config_value("nmst_course_edition", False, "env")
    app.add_transform(_RemoveSolutions)
    app.connect("config-inited", _add_grading_substitutions)
    app.connect("builder-inited", _merge_reexported_attr_docs)
    app.connect("autodoc-process-docstring", _process_docstring, priority=400)  # before napoleon (500)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    app.setup_extension("nmst_pdf")  # the PDF, the edition and the download menu (issue 26; book/_ext/nmst_pdf.py)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
