"""The classroom kit's plumbing without otter runs: reading a master's questions and points,
where public tests are found, and the command line's answers to bad input."""

from __future__ import annotations

import json

import nbformat
import pytest

from nmst_lib.__main__ import main
from nmst_lib.classroom import ASSIGNMENTS, public_tests_dir
from nmst_lib.classroom.build import assignment_questions, master_notebook


def _master(tmp_path):
    nb = nbformat.v4.new_notebook()
    raw, code, md = nbformat.v4.new_raw_cell, nbformat.v4.new_code_cell, nbformat.v4.new_markdown_cell
    nb.cells = [
        raw("# ASSIGNMENT CONFIG\nname: toy\n"),
        raw("# BEGIN QUESTION\nname: q1\n"), md("Write f."),
        raw("# BEGIN SOLUTION"), code("def f(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"),
        raw("# END SOLUTION"), raw("# BEGIN TESTS"),
        code('""" # BEGIN TEST CONFIG\npoints: 1\n""" # END TEST CONFIG\ndef test_public(f):\n    assert f(1) == 1\n'),
        code('""" # BEGIN TEST CONFIG\nhidden: true\npoints: 2.5\n""" # END TEST CONFIG\ndef test_hidden(f):\n    assert f(2) == 2\n'),
        raw("# END TESTS"), raw("# END QUESTION"),
        raw("# BEGIN QUESTION\nname: q2\nmanual: true\npoints: 4\n"), md("Prove it."), raw("# END QUESTION"),
    ]
    path = tmp_path / "toy.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_questions_points_are_the_sum_of_its_test_cases_and_manual_points_come_from_its_config(tmp_path):
    q1, q2 = assignment_questions(_master(tmp_path))
    assert (q1["name"], q1["kind"], q1["points"]) == ("q1", "autograded", 3.5)
    assert [(t["name"], t["hidden"], t["points"]) for t in q1["tests"]] == [("test_public", False, 1), ("test_hidden", True, 2.5)]
    assert (q2["name"], q2["kind"], q2["points"], q2["tests"]) == ("q2", "manual", 4, [])


def test_unknown_assignments_are_refused_with_the_list_of_known_ones():
    with pytest.raises(ValueError, match="a1_decoding"):
        public_tests_dir("a9_nothing")
    with pytest.raises(ValueError, match="the assignments are"):
        master_notebook("a9_nothing")


def test_public_tests_come_from_a_local_tests_folder_first_then_from_the_package(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shipped = public_tests_dir(ASSIGNMENTS[0])
    assert shipped == "tests" or shipped.endswith(f"public_tests/{ASSIGNMENTS[0]}")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "q1.py").write_text("name = 'q1'\n")
    assert public_tests_dir(ASSIGNMENTS[0]) == "tests"


def test_every_assignment_has_a_master_whose_setup_cell_installs_the_classroom_extra():
    for assignment in ASSIGNMENTS:
        cells = json.loads(master_notebook(assignment).read_text(encoding="utf-8"))["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        setup = code[0]
        assert "nmst-lib[classroom] @ git+" in setup and f'public_tests_dir("{assignment}")' in setup, setup[:300]
        assert all(not c.get("outputs") for c in cells if c["cell_type"] == "code"), f"{assignment}: outputs stored"


@pytest.mark.parametrize("argv, message", [
    (["assignments", "grade"], "needs the assignment id"),
    (["assignments", "grade", "a9_nothing", "x.ipynb"], "unknown assignment"),
    (["assignments", "build", "extra"], "takes no positional"),
    (["assignments", "build", "--only", "a9_nothing"], "unknown assignment"),
])
def test_the_command_line_explains_bad_input(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
