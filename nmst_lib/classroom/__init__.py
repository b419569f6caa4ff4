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

__all__ = ["ASSIGNMENTS", "public_tests_dir"]

#: The assignments, one per part of the book, in order (master: ``assignments/<id>/<id>.ipynb``).
ASSIGNMENTS = ("a1_decoding", "a2_self_terminating", "a3_experiments", "a4_sparse_temperature")


def public_tests_dir(assignment: str) -> str:
    """The folder ``otter.Notebook`` should read public tests from, for ``assignment``.

    ``./tests`` when it exists beside the notebook (the student zip, JupyterHub, a course's own
    copy); otherwise the copy shipped inside ``nmst_lib`` (Colab, which opens the notebook alone).
    While grading, otter-grader uses the autograder's own tests whatever this returns.
    """
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"unknown assignment {assignment!r}; the assignments are {', '.join(ASSIGNMENTS)}")
    if Path("tests").is_dir() and any(Path("tests").glob("*.py")):
        return "tests"
    shipped = Path(__file__).resolve().parent / "public_tests" / assignment
    if shipped.is_dir():
        return str(shipped)
    return "tests"
