"""The built editions: what a student gets holds no solution, rubric or hidden test; what an
instructor gets holds all of them; the public tests shipped in the package match a fresh build."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from nmst_lib.classroom import ASSIGNMENTS
from nmst_lib.classroom.build import assignment_questions, master_notebook

ROOT = Path(__file__).resolve().parents[2]


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _src(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _solution_lines(master: Path) -> list[str]:
    """The distinctive code lines between `# BEGIN SOLUTION` and `# END SOLUTION` in the master that
    the student may not see: not also given elsewhere in the master (a statement's recipe, given code)."""
    hidden, visible, inside, in_block = [], set(), False, False
    for cell in _cells(master):
        text = _src(cell)
        first = text.strip().splitlines()[0].strip() if text.strip() else ""
        if cell["cell_type"] == "raw":
            if re.match(r"#\s*BEGIN SOLUTION", first):
                in_block = True
            elif re.match(r"#\s*END SOLUTION", first):
                in_block = False
            continue
        if cell["cell_type"] == "markdown":
            if not in_block:
                visible.update(line.strip() for line in text.splitlines())
            continue
        for line in text.splitlines():
            if re.match(r"\s*#\s*BEGIN SOLUTION", line):
                inside = True
            elif re.match(r"\s*#\s*END SOLUTION", line):
                inside = False
            elif inside:
                if len(line.strip()) > 25 and not line.strip().startswith("#"):
                    hidden.append(line.strip())
            else:
                visible.add(line.strip())
    return [line for line in hidden if line not in visible and not any(line in v for v in visible)]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_assignment_is_built_with_all_three_editions(built, index, assignment):
    entry = index["assignments"][assignment]
    folder = built / assignment
    assert (folder / "student" / f"{assignment}.ipynb").is_file()
    assert (folder / f"{assignment}-student.zip").is_file()
    assert (folder / f"{assignment}-autograder.zip").is_file()
    assert (folder / "instructor" / f"{assignment}.ipynb").is_file()
    kinds = [q["kind"] for q in entry["questions"]]
    assert kinds.count("autograded") >= 3 and kinds.count("manual") >= 1, kinds
    # about five problems each; Assignment 4 has eight since issue 22 added Chapter 9's Propositions
    # 9.1/9.4 and Martins et al.'s Table 5 (two short ones, about 0.5 s of work together)
    assert 4 <= len(kinds) <= 8, f"{assignment} has {len(kinds)} problems; the kit asks for about five"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_edition_installs_the_library_at_the_commit_that_built_the_kit(built, index, assignment):
    """Students (Colab setup cell) and the autograder (Gradescope's environment) install one
    spec, recorded in index.json beside the assignment; a build from a clean checkout pins it to
    that checkout's commit, so the library cannot drift under a kit in the middle of a term."""
    from nmst_lib.classroom.build import REPOSITORY_URL, pinned_install_spec

    entry = index["assignments"][assignment]  # each assignment's own spec: a partial rebuild leaves the rest
    spec, commit = entry["install_spec"], entry["code_version"]
    if commit and not commit.endswith("+dirty"):
        assert entry["install_pin"] == commit and spec == pinned_install_spec(commit), entry
    folder = built / assignment
    with zipfile.ZipFile(folder / f"{assignment}-autograder.zip") as z:
        environment = z.read("environment.yml").decode()
    with zipfile.ZipFile(folder / f"{assignment}-student.zip") as z:
        student_zip = z.read(f"{assignment}/{assignment}.ipynb").decode()
    for name, text in [("student notebook", (folder / "student" / f"{assignment}.ipynb").read_text()),
                       ("student zip", student_zip),
                       ("instructor notebook", (folder / "instructor" / f"{assignment}.ipynb").read_text()),
                       ("autograder environment.yml", environment)]:
        installs = re.findall(re.escape(f"nmst-lib[classroom] @ {REPOSITORY_URL}/archive/") + r"[\w./-]+?\.zip", text)
        assert installs and set(installs) == {spec}, f"{assignment}'s {name} installs {installs}, not {spec}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_student_edition_holds_no_solution_rubric_or_hidden_test(built, assignment):
    master = master_notebook(assignment, ROOT)
    student = built / assignment / "student" / f"{assignment}.ipynb"
    text = "\n".join(_src(c) for c in _cells(student))
    solutions = _solution_lines(master)
    assert solutions, "the master has no solution lines to look for"
    leaked = [line for line in solutions if line in text]
    assert not leaked, f"solution lines in the student edition: {leaked[:3]}"
    assert "**Rubric**" not in text, "a rubric cell reached the student edition"
    assert "BEGIN SOLUTION" not in text and "BEGIN TEST CONFIG" not in text
    for test_file in (built / assignment / "student" / "tests").glob("*.py"):
        assert "hidden=True" not in test_file.read_text(encoding="utf-8"), f"hidden test case in {test_file.name}"
    names = set(zipfile.ZipFile(built / assignment / f"{assignment}-student.zip").namelist())
    # the zip unpacks into a folder named after the assignment, whose tests/ names it (two assignments
    # unzipped side by side keep their own tests)
    assert f"{assignment}/{assignment}.ipynb" in names and any(n.startswith(f"{assignment}/tests/q") for n in names)
    marker = zipfile.ZipFile(built / assignment / f"{assignment}-student.zip").read(f"{assignment}/tests/assignment.txt")
    assert marker.decode().strip() == assignment


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_instructor_edition_holds_the_solutions_and_every_test(built, index, assignment):
    master = master_notebook(assignment, ROOT)
    instructor = built / assignment / "instructor"
    text = "\n".join(_src(c) for c in _cells(instructor / f"{assignment}.ipynb"))
    missing = [line for line in _solution_lines(master) if line not in text]
    assert not missing, f"solution lines missing from the instructor edition: {missing[:3]}"
    questions = assignment_questions(master)
    hidden = sum(t["hidden"] for q in questions for t in q["tests"])
    found = sum(f.read_text(encoding="utf-8").count("hidden=True") for f in (instructor / "tests").glob("*.py"))
    assert hidden >= 1 and found == hidden, (hidden, found)
    manual = [q["name"] for q in questions if q["kind"] == "manual"]
    assert manual and text.count("**Rubric**") >= len(manual), f"{assignment}: a manual question without its rubric"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_autograded_test_case_has_explicit_points(assignment):
    """A bug loses exactly the points of the cases it fails only if every case carries its points."""
    for q in assignment_questions(master_notebook(assignment, ROOT)):
        if q["kind"] == "autograded":
            assert all(t["points"] is not None for t in q["tests"]), f"{assignment} {q['name']}: a test case has no points"
            assert any(not t["hidden"] for t in q["tests"]), f"{assignment} {q['name']}: no public test for grader.check"
            assert any(t["hidden"] for t in q["tests"]), f"{assignment} {q['name']}: no hidden test"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_public_tests_shipped_in_the_package_match_a_fresh_build(built, assignment):
    """Colab students check against nmst_lib/classroom/public_tests/<id>/ (the notebook arrives alone)."""
    shipped = ROOT / "nmst_lib" / "classroom" / "public_tests" / assignment
    fresh = built / assignment / "student" / "tests"
    names = sorted(p.name for p in fresh.glob("*.py"))
    assert names == sorted(p.name for p in shipped.glob("*.py")), (
        f"the shipped public tests of {assignment} differ from the build: run "
        "`python -m nmst_lib assignments build --sync-package` and commit nmst_lib/classroom/public_tests")
    for name in names:
        assert (fresh / name).read_text(encoding="utf-8") == (shipped / name).read_text(encoding="utf-8"), (
            f"{assignment}/{name} is stale: run `python -m nmst_lib assignments build --sync-package` and commit")
