"""The classroom kit: assignments built with otter-grader from master notebooks in ``assignments/``.

Each assignment has a check module here (``a1_decoding``, ...) whose functions raise
``AssertionError`` with messages in the book's terms; the master notebooks' test cells only call
them (Assignment 4's module re-exports its q7 and q8 checks from
``a4_temperature_reach`` and ``a4_mismatch``; the shared machinery is
``checks``). ``build`` makes the student, instructor and autograder editions;
``grading`` and ``sandbox`` grade submissions with limits, in a bubblewrap
sandbox. :data:`ASSIGNMENTS` names the assignments in order, and
:func:`public_tests_dir` tells a student notebook where its public tests are.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ASSIGNMENTS", "TESTS_MARKER", "public_tests_dir"]

#: The assignments, one per part of the book, in order (master: ``assignments/<id>/<id>.ipynb``).
ASSIGNMENTS = ("a1_decoding", "a2_self_terminating", "a3_experiments", "a4_sparse_temperature")


#: The file in a student edition's ``tests/`` that names its assignment (one line: the id).
TESTS_MARKER = "assignment.txt"


def public_tests_dir(assignment: str) -> str:
    """The folder ``otter.Notebook`` should read public tests from, for ``assignment``.

    ``./tests`` when it exists beside the notebook and holds this assignment's tests (the student
    zip, JupyterHub, a course's own copy); otherwise the copy shipped inside ``nmst_lib`` (Colab,
    which opens the notebook alone). A ``./tests`` whose marker (:data:`TESTS_MARKER`, written by
    the build) names another assignment is not used: its ``q1.py`` would check other functions
    (two assignments unpacked in one folder); a warning says so. While grading, otter-grader
    uses the autograder's own tests whatever this returns.
    """
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"unknown assignment {assignment!r}; the assignments are {', '.join(ASSIGNMENTS)}")
    local = Path("tests")
    shipped = Path(__file__).resolve().parent / "public_tests" / assignment
    if local.is_dir() and any(local.glob("*.py")):
        marker = local / TESTS_MARKER
        owner = marker.read_text(encoding="utf-8").strip() if marker.is_file() else assignment
        if owner == assignment or not shipped.is_dir():
            return "tests"
        import warnings

        warnings.warn(f"./tests holds the public tests of {owner}, not of {assignment}: checking against the copy "
                      f"shipped with nmst_lib instead. Keep each assignment in its own folder (unzip "
                      f"{assignment}-student.zip as it is: it unpacks into {assignment}/)", stacklevel=2)
    if shipped.is_dir():
        return str(shipped)
    return "tests"
