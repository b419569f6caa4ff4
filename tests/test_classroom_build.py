"""The classroom kit's plumbing without otter runs: reading a master's questions and points,
where public tests are found, and the command line's answers to bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import nbformat
import pytest

from nmst_lib.__main__ import main
from nmst_lib.classroom import ASSIGNMENTS, TESTS_MARKER, public_tests_dir
from nmst_lib.classroom.build import (
    UNPINNED_INSTALL_SPEC,
    _pinned_masters,
    _resolve_pin,
    assignment_questions,
    master_notebook,
    pinned_install_spec,
    repository_root,
)


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
    (tmp_path / "tests" / TESTS_MARKER).write_text(ASSIGNMENTS[0] + "\n")
    assert public_tests_dir(ASSIGNMENTS[0]) == "tests"


def test_a_local_tests_folder_of_another_assignment_is_not_used(tmp_path, monkeypatch):
    """Two assignments unpacked into one folder: ./tests/q1.py of a1 would check a2's q1 with a1's
    tests. The build's marker names the owner; another assignment's folder is passed over, with a
    warning, for the copy shipped in the package."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "q1.py").write_text("name = 'q1'\n")
    (tmp_path / "tests" / TESTS_MARKER).write_text(ASSIGNMENTS[0] + "\n")
    with pytest.warns(UserWarning, match=f"./tests holds the public tests of {ASSIGNMENTS[0]}, not of {ASSIGNMENTS[1]}"):
        chosen = public_tests_dir(ASSIGNMENTS[1])
    assert chosen.endswith(f"public_tests/{ASSIGNMENTS[1]}")


def test_every_assignment_has_a_master_whose_setup_cell_installs_the_classroom_extra():
    for assignment in ASSIGNMENTS:
        cells = json.loads(master_notebook(assignment).read_text(encoding="utf-8"))["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        setup = code[0]
        assert "nmst-lib[classroom] @ https://" in setup and f'public_tests_dir("{assignment}")' in setup, setup[:300]
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


def test_the_install_spec_is_pinned_to_a_ref_and_bad_refs_are_refused():
    assert pinned_install_spec(None) == UNPINNED_INSTALL_SPEC
    assert UNPINNED_INSTALL_SPEC.endswith("/when-do-language-models-stop/archive/refs/heads/main.zip")
    assert pinned_install_spec("v5.5") == UNPINNED_INSTALL_SPEC.replace("refs/heads/main", "v5.5")
    sha = "ba6450e478ebc66b62019622df8091d275de4591"
    assert pinned_install_spec(sha) == (
        "nmst-lib[classroom] @ https://github.com/nmst-book/when-do-language-models-stop/archive/" + sha + ".zip")
    for bad in ("", "two words", "-x", ".hidden", "a..b", "v1#frag", "a@b", "main/", "feature/x"):
        with pytest.raises(ValueError, match="not a git commit, tag or branch"):
            pinned_install_spec(bad)
    with pytest.raises(TypeError, match="git ref"):
        pinned_install_spec(5)


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_auto_pins_the_clean_commit_and_leaves_a_dirty_or_gitless_build_unpinned(tmp_path):
    """'auto' pins HEAD only when assignments/ and nmst_lib/ are committed: a dirty tree's
    build is held by no commit, so its editions say so instead of naming a wrong one."""
    assert _resolve_pin("auto", tmp_path)[0] is None
    assert "not built from a git checkout" in _resolve_pin("auto", tmp_path)[1]
    (tmp_path / "assignments").mkdir()
    (tmp_path / "assignments" / "x.txt").write_text("1")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "x")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert _resolve_pin("auto", tmp_path) == (head, f"pinned to the commit that built the kit, {head[:12]}")
    (tmp_path / "assignments" / "x.txt").write_text("2")
    ref, note = _resolve_pin("auto", tmp_path)
    assert ref is None and "uncommitted changes" in note
    assert _resolve_pin("v5.5", tmp_path) == ("v5.5", "pinned to v5.5, as requested")
    assert _resolve_pin(None, tmp_path)[0] is None


def test_the_pinned_copy_of_a_master_changes_only_its_install_spec(tmp_path):
    root = repository_root()
    spec = pinned_install_spec("v5.5")
    for assignment in ASSIGNMENTS:
        copy = _pinned_masters(root, assignment, spec, tmp_path / assignment)
        before = master_notebook(assignment, root).read_text(encoding="utf-8")
        after = copy.read_text(encoding="utf-8")
        assert spec in after and after.replace(spec, UNPINNED_INSTALL_SPEC) == before
        requirements = (copy.parent.parent / "requirements.txt").read_text(encoding="utf-8")
        assert requirements == (root / "assignments" / "requirements.txt").read_text(
            encoding="utf-8").replace(UNPINNED_INSTALL_SPEC, spec)


def test_pip_builds_the_library_from_a_zip_archive_of_the_repository_without_git(tmp_path):
    """The editions install GitHub's zip archive of a commit (:func:`pinned_install_spec`), so
    that the machine that installs it needs no git (otter grade's Docker image has none). The
    same archive, made as GitHub makes it (``git archive``, one top folder ``<repository>-<ref>``),
    builds with no git on ``PATH`` into a wheel that holds the library, the public tests a Colab
    student checks against and the published results."""
    root = repository_root()
    archive = tmp_path / "when-do-language-models-stop-HEAD.zip"
    subprocess.run(["git", "archive", "--format=zip", "--prefix=when-do-language-models-stop-HEAD/",
                    "-o", str(archive), "HEAD"], cwd=root, check=True, capture_output=True)
    empty = tmp_path / "bin"
    empty.mkdir()  # PATH holds nothing: no git to fall back on
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(tmp_path / "wheel"), f"nmst-lib[classroom] @ {archive.as_uri()}"],
                          env={**os.environ, "PATH": str(empty)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("nmst_lib-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "nmst_lib/classroom/build.py" in names
    assert any(n.startswith("nmst_lib/classroom/public_tests/a1_decoding/") for n in names)
    assert any(n.startswith("nmst_lib/published_results/wikitext2/") and n.endswith(".json") for n in names)
