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


def _grading_record(**overrides):
    record = {
        "provenance": {"rounds": 2, "cpu_count": 2, "load_average_before": [3.24, 1, 1],
                       "load_average_after": [4.51, 1, 1], "started": "2026-11-30T08:14:06+00:00",
                       "git_sha": "cf835d5318f972ebb3a0a598a77cb91cdcb3b776"},
        "assignments": {
            "a1_decoding": {"seconds": {"sandbox": [20.2, 24.9], "trusted": [19.6, 19.8]},
                            "peak_bytes": 2**30},
            "a2_self_terminating": {"seconds": {"sandbox": [180.0, 221.7], "trusted": [170.2, 200.0]},
                                    "peak_bytes": int(1.7 * 2**30)},
        },
    }
    record.update(overrides)
    return record


def test_grading_times_sentence_states_each_assignment_its_machine_and_commit():
    words = nmst_book.grading_substitutions(_grading_record(), timeout_s=900)
    sentence = words["grading_times"]
    assert "twice in each mode on 2 CPU cores" in sentence
    assert "load average 3.2-4.5" in sentence and "2026-11-30" in sentence and "`cf835d5`" in sentence
    assert "a1 20-25 s in the sandbox and 20 s without it" in sentence
    assert "a2 180-222 s in the sandbox and 170-200 s without it" in sentence
    assert "more than 1.7 GiB" in sentence
    # 900 s / 221.7 s = 4.06: four times, to 2 %
    assert words["grading_timeout_margin"] == "four times the slowest (222 s)"
    record = _grading_record()
    record["assignments"]["a2_self_terminating"]["seconds"]["sandbox"] = [180.0, 200.0]
    assert nmst_book.grading_substitutions(record, timeout_s=900)["grading_timeout_margin"] == (
        "more than four times the slowest (200 s)")


def test_grading_margin_says_so_when_the_limit_is_close_to_the_slowest():
    record = _grading_record()
    record["assignments"]["a2_self_terminating"]["seconds"]["trusted"] = [600.0, 650.0]
    assert nmst_book.grading_substitutions(record, timeout_s=900)["grading_timeout_margin"] == (
        "close to the slowest (650 s)")


def test_grading_times_without_a_record_say_nothing_was_measured():
    words = nmst_book.grading_substitutions(None)
    assert "not measured" in words["grading_times"] and "measured" in words["grading_timeout_margin"]


def test_the_stored_grading_times_cover_every_assignment_from_a_clean_commit():
    from nmst_lib.classroom import ASSIGNMENTS

    path = nmst_book.GRADING_TIMES
    if not path.is_file():
        pytest.fail(f"{path.name} is missing: run scripts/measure_grading.py")
    import json

    record = json.loads(path.read_text(encoding="utf-8"))
    stamp = record["provenance"]
    assert set(record["assignments"]) == set(ASSIGNMENTS)
    assert stamp["git_dirty"] is False and stamp["kit_built_from"] == stamp["git_sha"]
    for name, row in record["assignments"].items():
        for mode in ("sandbox", "trusted"):
            assert len(row["seconds"][mode]) == stamp["rounds"] >= 1, (name, mode)
            assert all(s > 0 for s in row["seconds"][mode]), (name, mode)
        assert row["peak_bytes"] > 0, name
