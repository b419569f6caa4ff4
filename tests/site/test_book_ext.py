"""Unit tests of the book's Sphinx glue (book/_ext/nmst_book.py); no build, no browser."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "book" / "_ext"))
import nmst_book  # noqa: E402


@pytest.mark.parametrize(
    "line, expected",
    [
        ("q(|y| > L)", r"q(\|y\| > L)"),
        ("the |V| - 1 most probable, 1/|V|", r"the \|V\| - 1 most probable, 1/\|V\|"),
        ("``|logit| = 1e4`` stays", "``|logit| = 1e4`` stays"),  # inside a literal: untouched
        ("| a | b |", "| a | b |"),  # a table row: untouched
        ("x|y", "x|y"),
    ],
)
def test_absolute_value_bars_are_escaped_outside_literals(line, expected):
    assert nmst_book.escape_bars(line) == expected


def test_attribute_docstring_with_prose_colon_gets_an_empty_comment_first():
    lines = ["k: the number of context tokens."]
    nmst_book._process_docstring(None, "data", "CONTEXT_LEN", None, {}, lines)
    assert lines == ["..", "", "k: the number of context tokens."]
    function_lines = ["Returns: something."]
    nmst_book._process_docstring(None, "function", "f", None, {}, function_lines)
    assert function_lines == ["Returns: something."]
    literal_colon = ["``a: b`` is a literal"]
    nmst_book._process_docstring(None, "attribute", "x", None, {}, literal_colon)
    assert literal_colon == ["``a: b`` is a literal"]


def test_identical_scripts_are_dropped_in_place():
    class Script(str):
        def __new__(cls, filename, **attributes):
            obj = super().__new__(cls, filename or "")
            obj.filename, obj.attributes = filename, attributes
            return obj

    scripts = [Script(None, body="const A = 1"), Script("x.js"), Script("", body="const A = 1"), Script("x.js")]
    context = {"script_files": scripts}
    nmst_book._drop_duplicate_scripts(None, "page", "page.html", context, None)
    assert context["script_files"] is scripts and len(scripts) == 2


def test_constants_a_package_reexports_keep_their_docstrings_on_the_api_page():
    """Item 5: nmst_lib.data re-exports its modules' constants; their docstrings are read from
    the module that defines them, and the package's source analysis learns them."""
    from sphinx.pycode import ModuleAnalyzer

    doc = nmst_book.reexported_attr_doc("nmst_lib.data.SUBSTITUTE_NAME")
    assert doc and doc[0].startswith("Name of the substitute")
    assert nmst_book.reexported_attr_doc("nmst_lib.data.no_such_name") is None
    assert nmst_book.reexported_attr_doc("nmst_lib.theory.eos_shapes.EOS_SHAPES") is None  # not a package
    assert nmst_book.reexported_attr_doc("nmst_lib.heads.HEAD_NAMES") is None  # no docstring
    nmst_book._merge_reexported_attr_docs(None)
    analyzer = ModuleAnalyzer.for_module("nmst_lib.data")
    assert analyzer.attr_docs["", "CONTEXT_LEN"][0].startswith("k: the number of context tokens")
