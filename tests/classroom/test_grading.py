"""The autograder on three submissions per assignment, as the issue asks of CI:

* the instructor edition (the solutions) scores full marks on every autograded question;
* the unmodified student edition scores zero on every autograded question, and grading does not crash;
* a deliberately wrong submission (``tests/assignments/<id>_wrong.ipynb``) loses exactly the points
  its bug deserves, as recorded beside it in ``<id>_wrong.json``.

The twelve gradings run two at a time (``otter run``, no Docker); the scores are written to
``_build/assignments/ci-scores.json``.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nmst_lib.classroom import ASSIGNMENTS
from nmst_lib.classroom.build import grade_submission

ROOT = Path(__file__).resolve().parents[2]
WRONG = ROOT / "tests" / "assignments"
KINDS = ("instructor", "student", "wrong")


def _submission(built: Path, assignment: str, kind: str) -> Path:
    if kind == "instructor":
        return built / assignment / "instructor" / f"{assignment}.ipynb"
    if kind == "student":
        return built / assignment / "student" / f"{assignment}.ipynb"
    return WRONG / f"{assignment}_wrong.ipynb"


@pytest.fixture(scope="session")
def scores(built) -> dict:
    jobs = [(a, k) for a in ASSIGNMENTS for k in KINDS]

    def run(job):
        a, k = job
        try:
            return job, grade_submission(built / a / f"{a}-autograder.zip", _submission(built, a, k))
        except Exception as err:  # reported by the test of that submission
            return job, err

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(pool.map(run, jobs))
    record = {f"{a}/{k}": (v if isinstance(v, dict) else f"error: {v}") for (a, k), v in results.items()}
    (built / "ci-scores.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return results


def _get(scores, assignment, kind) -> dict:
    result = scores[(assignment, kind)]
    if isinstance(result, Exception):
        pytest.fail(f"grading the {kind} submission of {assignment} crashed: {result}")
    return result


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_instructor_edition_scores_full_marks(scores, index, assignment):
    got = _get(scores, assignment, "instructor")
    expected = {q["name"]: q["points"] for q in index["assignments"][assignment]["questions"] if q["kind"] == "autograded"}
    assert set(got) == set(expected), (sorted(got), sorted(expected))
    short = {q: v for q, v in got.items() if v["score"] != v["max_score"] or v["max_score"] != expected[q]}
    assert not short, f"{assignment}: the solutions lose points: {short}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_unmodified_student_edition_scores_zero_on_every_question(scores, assignment):
    got = _get(scores, assignment, "student")
    assert got, f"{assignment}: no autograded question was graded"
    nonzero = {q: v for q, v in got.items() if v["score"] != 0}
    assert not nonzero, f"{assignment}: the unmodified student notebook earns points: {nonzero}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_wrong_submission_loses_exactly_its_bugs_points(scores, assignment):
    spec = json.loads((WRONG / f"{assignment}_wrong.json").read_text(encoding="utf-8"))
    got = _get(scores, assignment, "wrong")
    assert {q: v["score"] for q, v in got.items()} == {q: float(s) for q, s in spec["question_scores"].items()}, (
        f"{assignment}: the wrong submission ({spec['bug']}) scored {got}")
    assert {q: v["max_score"] for q, v in got.items()} == {q: float(s) for q, s in spec["max_scores"].items()}
    lost = sum(v["max_score"] - v["score"] for v in got.values())
    assert 0 < lost < sum(v["max_score"] for v in got.values()), f"{assignment}: the bug loses {lost} points"
