"""Grading that survives what students submit (nmst_lib.classroom.grading and `assignments grade`).

* a batch with broken uploads first (tests/assignments/bad_submissions.json) grades the valid
  notebook after them: one CSV row each, a status and a one-line error, exit status 1, a summary;
* an infinite loop is stopped at its timeout, with every process it started (checked in /proc);
* in the sandbox a notebook cannot write outside its folder, read the instructor's files or the
  grader's environment, or connect to 127.0.0.1 (checked from outside), and the solution in it
  still gets full marks; trusted mode lets all of it through (so the checks can see a leak);
* without a working sandbox grading refuses unless --trusted;
* an interrupted batch resumes without grading twice, and the CSV never holds half a table;
* a results.json that does not score exactly the autograder's questions and points is refused, and
  in the sandbox a notebook cannot rewrite the tests or replace the results after otter wrote them.
"""

from __future__ import annotations

import csv
import json
import os
import re
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from nmst_lib.__main__ import main
from nmst_lib.classroom import grading
from nmst_lib.classroom.grading import (
    Outcome,
    SubmissionError,
    check_submission,
    grade_batch,
    grade_one,
)
from nmst_lib.classroom.sandbox import (
    Limits,
    SandboxUnavailable,
    sandbox_problem,
)
from processes import processes_with, wait_until_gone, watching

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "assignments"
BAD = json.loads((FIXTURES / "bad_submissions.json").read_text(encoding="utf-8"))["submissions"]
A1 = "a1_decoding"


def sandbox_or_skip():
    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap does not work here: {sandbox_problem()}")


def notebook(cells: list[str], assignment: str = A1) -> dict:
    return {"cells": [{"cell_type": "code", "execution_count": None, "id": f"cell-{i}", "metadata": {}, "outputs": [],
                       "source": src} for i, src in enumerate(cells)],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}, "otter": {"assignment_name": assignment}},
            "nbformat": 4, "nbformat_minor": 5}


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ---- checking a file before grading it (no build needed) ----------------------------------------

@pytest.mark.parametrize("name", sorted(n for n in BAD if n != "bad_kernel.ipynb"))
def test_a_file_that_is_not_a_notebook_of_this_assignment_is_refused_with_why(name):
    with pytest.raises(SubmissionError, match=BAD[name]["error"]):
        check_submission(FIXTURES / name, A1)


def test_a_valid_notebook_of_this_assignment_passes_the_check(tmp_path):
    assert check_submission(FIXTURES / "a1_decoding_wrong.ipynb", A1)["metadata"]["otter"]["assignment_name"] == A1
    (tmp_path / "answers.txt").write_text("42")
    with pytest.raises(SubmissionError, match=r"\.ipynb"):
        check_submission(tmp_path / "answers.txt", A1)


# ---- otter's results checked against the autograder (no build needed) -------------------------

EXPECTED = {"q1": 9.0, "q2": 7.0}


def results(*tests) -> dict:
    return {"tests": [{"name": "Public Tests", "visibility": "visible", "status": "passed"},
                      *({"name": n, "score": s, "max_score": m} for n, s, m in tests)]}


def test_results_that_score_the_autograders_questions_are_read():
    got = grading._scores(results(("q1", 9, 9), ("q2", 3.5, 7)), EXPECTED)
    assert got == {"q1": {"score": 9.0, "max_score": 9.0}, "q2": {"score": 3.5, "max_score": 7.0}}


@pytest.mark.parametrize(("tests", "why"), [
    ((("q1", 99, 99), ("q2", 99, 99)), "q1 is out of 99, the autograder's is 9"),
    ((("q1", 9, 9), ("q2", 7, 7), ("q9", 5, 5)), "questions the autograder does not have: q9"),
    ((("q1", 9, 9),), "questions missing: q2"),
    ((("q1", 10, 9), ("q2", 7, 7)), r"q1 scores 10, outside \[0, 9\]"),
    ((("q1", -1, 9), ("q2", 7, 7)), r"q1 scores -1, outside \[0, 9\]"),
    ((("q1", float("nan"), 9), ("q2", 7, 7)), "q1 scores nan"),
    ((("q1", 9, 9), ("q1", 9, 9), ("q2", 7, 7)), "q1 is scored twice"),
])
def test_results_that_do_not_match_the_autograder_fail_with_what_is_wrong(tests, why):
    with pytest.raises(grading.GradingFailed, match="results do not match the autograder") as err:
        grading._scores(results(*tests), EXPECTED)
    assert re.search(why, str(err.value)), str(err.value)


def test_the_expected_questions_come_from_the_kits_index(tmp_path):
    zip_path = tmp_path / A1 / f"{A1}-autograder.zip"
    zip_path.parent.mkdir()
    zip_path.write_bytes(b"")
    with pytest.raises(ValueError, match="no index.json of the kit"):
        grading.expected_questions(zip_path)
    questions = [{"name": "q1", "kind": "autograded", "points": 9}, {"name": "q3", "kind": "manual", "points": 6}]
    (tmp_path / "index.json").write_text(json.dumps({"assignments": {A1: {"questions": questions}}}))
    assert grading.expected_questions(zip_path) == {"q1": 9.0}
    assert "expected_questions" in grading.__all__
    with pytest.raises(ValueError, match="positive number of points"):
        grading._checked_expected({"q1": 0})


# ---- the batch: resume, atomic CSV, summary, progress (the grading itself faked) -----------------

class FakeGrader:
    """Stands in for grade_one: records each call; raises KeyboardInterrupt at call ``interrupt_at``."""

    def __init__(self, interrupt_at=None, status="graded"):
        self.calls, self.interrupt_at, self.status = [], interrupt_at, status

    def __call__(self, autograder_zip, submission, *, mode, limits):
        self.calls.append(Path(submission).name)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        status = self.status(submission) if callable(self.status) else self.status
        scores = {"q1": {"score": 2.0, "max_score": 3.0}} if status == "graded" else {}
        return Outcome(str(submission), status, scores, "" if status == "graded" else "boom", 1.0,
                       grading._sha256(Path(submission)))


@pytest.fixture
def four_files(tmp_path):
    files = []
    for name in "abcd":
        path = tmp_path / f"{name}.ipynb"
        path.write_text(json.dumps(notebook([f"x = '{name}'"])))
        files.append(path)
    return files


def test_an_interrupted_batch_resumes_without_grading_any_submission_twice(tmp_path, four_files, monkeypatch):
    table = tmp_path / "scores.csv"
    first = FakeGrader(interrupt_at=3)
    monkeypatch.setattr(grading, "grade_one", first)
    with pytest.raises(KeyboardInterrupt):
        grade_batch("a.zip", four_files, ["q1"], table, mode="trusted")
    assert [r["submission"] for r in read_rows(table)] == [str(f) for f in four_files[:2]]
    second = FakeGrader()
    monkeypatch.setattr(grading, "grade_one", second)
    summary = grade_batch("a.zip", four_files, ["q1"], table, mode="trusted")
    assert second.calls == ["c.ipynb", "d.ipynb"] and summary["skipped"] == 2 and summary["graded"] == 4
    rows = read_rows(table)
    assert [r["submission"] for r in rows] == [str(f) for f in four_files]
    assert all(r["q1"] == "2" and r["autograded_total"] == "2" and r["status"] == "graded" for r in rows)
    four_files[0].write_text(json.dumps(notebook(["x = 'resubmitted'"])))  # a changed file is graded again
    third = FakeGrader()
    monkeypatch.setattr(grading, "grade_one", third)
    grade_batch("a.zip", four_files, ["q1"], table, mode="trusted")
    assert third.calls == ["a.ipynb"]


def test_a_crash_while_the_csv_is_written_leaves_the_previous_table_whole(tmp_path, four_files, monkeypatch):
    table = tmp_path / "scores.csv"
    monkeypatch.setattr(grading, "grade_one", FakeGrader())
    grade_batch("a.zip", four_files[:2], ["q1"], table, mode="trusted")
    before = table.read_bytes()
    real_fsync = os.fsync

    def crash(fd):  # the new table is half on disk when the machine "dies"
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        grade_batch("a.zip", four_files, ["q1"], table, mode="trusted")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert table.read_bytes() == before
    assert all(len(r) == len(read_rows(table)[0]) and None not in r.values() for r in read_rows(table))


def test_the_summary_counts_graded_failed_and_timed_out_and_failures_can_be_retried(tmp_path, four_files,
                                                                                     monkeypatch, capsys):
    table = tmp_path / "scores.csv"
    status = {"a.ipynb": "graded", "b.ipynb": "failed", "c.ipynb": "timed out", "d.ipynb": "graded"}
    monkeypatch.setattr(grading, "grade_one", FakeGrader(status=lambda s: status[Path(s).name]))
    summary = grade_batch("a.zip", four_files, ["q1"], table, mode="trusted", progress=True)
    assert (summary["graded"], summary["failed"], summary["timed out"]) == (2, 1, 1)
    assert "4/4" in capsys.readouterr().err  # the tqdm bar
    assert [r["status"] for r in read_rows(table)] == ["graded", "failed", "timed out", "graded"]
    assert read_rows(table)[1]["error"] == "boom" and read_rows(table)[1]["autograded_total"] == ""
    again = FakeGrader()
    monkeypatch.setattr(grading, "grade_one", again)
    assert grade_batch("a.zip", four_files, ["q1"], table, mode="trusted", retry_failed=True)["graded"] == 4
    assert again.calls == ["b.ipynb", "c.ipynb"]


def test_a_csv_of_another_table_is_refused(tmp_path, four_files):
    table = tmp_path / "scores.csv"
    table.write_text("name,score\nalice,3\n")
    with pytest.raises(ValueError, match="another table"):
        grade_batch("a.zip", four_files, ["q1"], table, mode="trusted")


def test_without_a_sandbox_grading_refuses_unless_trusted(tmp_path, four_files, monkeypatch):
    monkeypatch.setattr(grading, "sandbox_problem", lambda: "bubblewrap (`bwrap`) is not installed")
    monkeypatch.setattr(grading, "grade_one", FakeGrader())
    with pytest.raises(SandboxUnavailable, match="--trusted"):
        grade_batch("a.zip", four_files, ["q1"], tmp_path / "scores.csv", mode="sandbox")
    assert not (tmp_path / "scores.csv").exists()
    assert grade_batch("a.zip", four_files, ["q1"], tmp_path / "scores.csv", mode="trusted")["graded"] == 4


# ---- real grading with the built autograder ----------------------------------------------------

@pytest.fixture(scope="module")
def batch(built, tmp_path_factory):
    """`assignments grade a1_decoding` on every bad upload, then the solution: (exit status, rows, stdout)."""
    folder = tmp_path_factory.mktemp("batch")
    files = [FIXTURES / name for name in BAD] + [built / A1 / "instructor" / f"{A1}.ipynb"]
    table = folder / "scores.csv"
    argv = ["assignments", "grade", A1, *map(str, files), "--csv", str(table), "--out", str(built), "--timeout", "400"]
    if sandbox_problem() is not None:
        argv.append("--trusted")
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    return status, {Path(r["submission"]).name: r for r in read_rows(table)}, out.getvalue(), argv, table


@pytest.mark.parametrize("name", sorted(BAD))
def test_each_bad_upload_gets_one_row_with_its_status_and_a_one_line_error(batch, name):
    _, rows, _, _, _ = batch
    row = rows[name]
    assert row["status"] == BAD[name]["status"], row
    assert BAD[name]["error"] in row["error"] and "\n" not in row["error"] and len(row["error"]) <= 300, row
    assert row["autograded_total"] == "" and row["q1"] == ""


def test_the_solution_after_the_bad_uploads_is_graded_in_full(batch, index):
    _, rows, _, _, _ = batch
    row = rows[f"{A1}.ipynb"]
    assert row["status"] == "graded", row
    assert float(row["autograded_total"]) == index["assignments"][A1]["autograded_points"] == float(row["max_total"])


def test_the_exit_status_and_the_summary_say_what_failed(batch):
    status, rows, stdout, _, _ = batch
    assert status == 1 and len(rows) == len(BAD) + 1
    assert f"{len(BAD) + 1} submission(s): 1 graded, {len(BAD)} failed, 0 timed out" in stdout, stdout


def test_running_the_batch_again_grades_nothing_twice(batch, monkeypatch):
    _, rows, _, argv, table = batch
    before = table.read_bytes()

    def no_grading(*args, **kwargs):
        raise AssertionError("a submission already in the CSV was graded again")

    monkeypatch.setattr(grading, "grade_one", no_grading)
    assert main(argv) == 1
    assert table.read_bytes() == before


def test_an_infinite_loop_is_stopped_at_its_timeout_and_leaves_no_process(built, tmp_path):
    sandbox_or_skip()
    marker = f"loop{uuid.uuid4().hex[:11]}"  # 15 characters: a process name (comm) holds at most 15
    cell = ("import ctypes, subprocess, sys\n"
            f"ctypes.CDLL(None).prctl(15, b'{marker}', 0, 0, 0)  # the kernel's name, seen from outside\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)', '{marker}'], "
            "start_new_session=True)\n"
            "while True:\n    pass\n")
    runaway = tmp_path / "runaway.ipynb"
    runaway.write_text(json.dumps(notebook([cell])))
    with watching(marker, every=0.2) as seen:
        start = time.monotonic()
        outcome = grade_one(built / A1 / f"{A1}-autograder.zip", runaway, limits=Limits(timeout_s=45))
    assert outcome.status == "timed out" and "45 s" in outcome.error, outcome
    assert 45 <= time.monotonic() - start < 90
    assert len(seen) >= 2, "the looping kernel and its child never showed in /proc: the next check would prove nothing"
    assert wait_until_gone(marker) == [], f"left running: {processes_with(marker)}"


ESCAPE = """# an upload that tries to get out (the grading test writes this cell)
import hashlib, json, os, pathlib, socket
report = {{}}
try:
    pathlib.Path({outside!r}).write_text("escaped")
except OSError as err:
    report["write"] = repr(err)
for key, path in (("secret", {secret!r}), ("instructor", {instructor!r})):
    try:
        data = pathlib.Path(path).read_bytes()
        report[key] = data.decode() if key == "secret" else hashlib.sha256(data).hexdigest()
    except OSError as err:
        report[key] = repr(err)
report["variable"] = os.environ.get("NMST_TEST_SECRET")
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).sendall(b"scores")
except OSError as err:
    report["connect"] = repr(err)
pathlib.Path.home().joinpath("report.json").write_text(json.dumps(report))
"""


@pytest.fixture(scope="module")
def escapes(built, tmp_path_factory):
    """Grade an escaping upload in trusted mode (alone) and in the sandbox (inside the full solution)."""
    import hashlib

    solution = json.loads((built / A1 / "instructor" / f"{A1}.ipynb").read_text(encoding="utf-8"))
    instructor_sha = hashlib.sha256((built / A1 / "instructor" / f"{A1}.ipynb").read_bytes()).hexdigest()
    runs = {}
    for mode in ("trusted", "sandbox"):
        if mode == "sandbox" and sandbox_problem() is not None:
            continue
        token = uuid.uuid4().hex
        home = tmp_path_factory.mktemp(f"instructor-{mode}")
        secret, outside = home / "secret.txt", home / "escaped.txt"
        secret.write_text(f"file-{token}")
        with socket.socket() as server, pytest.MonkeyPatch.context() as mp:
            mp.setenv("NMST_TEST_SECRET", f"env-{token}")
            server.bind(("127.0.0.1", 0))
            server.listen()
            server.settimeout(0.5)
            cell = ESCAPE.format(outside=str(outside), secret=str(secret), port=server.getsockname()[1],
                                 instructor=str(built / A1 / "instructor" / f"{A1}.ipynb"))
            if mode == "sandbox":  # the full solution with the escape cell after its setup cell
                nb = json.loads(json.dumps(solution))
                nb["cells"].insert(2, notebook([cell])["cells"][0])
            else:
                nb = notebook([cell])
            upload = home / "upload.ipynb"
            upload.write_text(json.dumps(nb))
            kept = home / "kept"
            try:
                scores = grading.grade_submission(built / A1 / f"{A1}-autograder.zip", upload, kept, mode=mode,
                                                  limits=Limits(timeout_s=400))
            except Exception as err:  # reported by the tests
                scores = err
            try:
                server.accept()[0].close()
                connected = True
            except socket.timeout:
                connected = False
        report = (kept / "home" / "report.json").read_text() if (kept / "home" / "report.json").is_file() else None
        kept_text = "".join(p.read_text(errors="replace") for p in kept.rglob("*") if p.is_file())
        runs[mode] = {"scores": scores, "report": report, "leaks": {
            "wrote outside its folder": outside.exists(),
            "read the instructor's secret file": f"file-{token}" in kept_text,
            "read the instructor edition": instructor_sha in kept_text,
            "read the grader's environment": f"env-{token}" in kept_text,
            "connected to the instructor's 127.0.0.1": connected}}
    return runs


def test_trusted_mode_lets_every_escape_through_so_the_checks_can_see_one(escapes):
    run = escapes["trusted"]
    assert run["report"] is not None, f"the escape cell did not run: {run['scores']}"
    assert all(run["leaks"].values()), run["leaks"]


def test_in_the_sandbox_an_upload_cannot_write_outside_read_the_instructors_files_or_variables_or_connect(escapes):
    sandbox_or_skip()
    run = escapes["sandbox"]
    assert run["report"] is not None, f"the escape cell did not run: {run['scores']}"
    assert not any(run["leaks"].values()), run["leaks"]
    report = json.loads(run["report"])
    assert report["variable"] is None and "Connection refused" in report["connect"], report


def test_in_the_sandbox_the_solution_still_gets_full_marks(escapes, index):
    sandbox_or_skip()
    scores = escapes["sandbox"]["scores"]
    assert isinstance(scores, dict), f"grading in the sandbox failed: {scores}"
    assert sum(v["score"] for v in scores.values()) == index["assignments"][A1]["autograded_points"], scores
    assert all(v["score"] == v["max_score"] for v in scores.values()), scores


def test_the_command_refuses_without_a_sandbox_and_names_the_trusted_flag(built, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grading, "sandbox_problem", lambda: "bubblewrap (`bwrap`) is not installed")
    argv = ["assignments", "grade", A1, str(FIXTURES / "bad_truncated.ipynb"), "--csv", str(tmp_path / "s.csv"),
            "--out", str(built)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no sandbox on this machine" in err and "--trusted" in err, err
    assert not (tmp_path / "s.csv").exists()
    assert main([*argv, "--trusted"]) == 1  # graded (here: reported as failed) without isolation
    assert read_rows(tmp_path / "s.csv")[0]["status"] == "failed"


FORGERIES = """# an upload that forges its grade (the grading test writes this cell)
import glob, json, pathlib, re, subprocess, sys
report = {{}}
for path in glob.glob("tests/*.py") + glob.glob("../source/tests/*.py"):  # every test returns at once
    try:
        text = pathlib.Path(path).read_text()
        pathlib.Path(path).write_text(re.sub(r"(def test_\\w+\\([^)]*\\):\\n)", r"\\1    return\\n", text))
        report[path] = "rewritten"
    except OSError as err:
        report[path] = repr(err)
pathlib.Path.home().joinpath("forgery.json").write_text(json.dumps(report))
full = {{"tests": [{{"name": q, "score": p, "max_score": p}} for q, p in {expected!r}.items()]}}
replace = (  # a detached process puts full marks in every results.json it sees, for 15 minutes
    "import glob, json, time\\n"
    f"full = {{full!r}}\\n"
    "end = time.time() + 900\\n"
    "while time.time() < end:\\n"
    "    for f in glob.glob('/grading/**/results.json', recursive=True):\\n"
    "        try:\\n"
    "            if json.load(open(f)) != full:\\n"
    "                json.dump(full, open(f, 'w'))\\n"
    "        except Exception:\\n"
    "            pass\\n"
    "    time.sleep(0.002)\\n")
subprocess.Popen([sys.executable, "-c", replace], start_new_session=True)
"""


def test_in_the_sandbox_a_notebook_cannot_rewrite_the_tests_or_replace_the_results(built, index, tmp_path):
    sandbox_or_skip()
    expected = grading.expected_questions(built / A1 / f"{A1}-autograder.zip")
    student = json.loads((built / A1 / "student" / f"{A1}.ipynb").read_text(encoding="utf-8"))
    student["cells"].insert(2, notebook([FORGERIES.format(expected=expected)])["cells"][0])
    upload = tmp_path / "forged.ipynb"
    upload.write_text(json.dumps(student))
    kept = tmp_path / "kept"
    scores = grading.grade_submission(built / A1 / f"{A1}-autograder.zip", upload, kept,
                                      limits=Limits(timeout_s=400))
    report = json.loads((kept / "home" / "forgery.json").read_text())
    assert report and all("Read-only file system" in v for v in report.values()), report
    assert {q: v["score"] for q, v in scores.items()} == dict.fromkeys(expected, 0.0), scores


def test_two_batches_writing_one_csv_keep_each_others_rows(tmp_path):
    table = tmp_path / "scores.csv"
    columns = grading._columns(["q1"])

    def row(name):
        return {**dict.fromkeys(columns, ""), "submission": str(tmp_path / f"{name}.ipynb"), "status": "graded"}

    def batch(prefix):  # each batch holds only its own rows in memory, as two grading commands would
        for i in range(15):
            grading._write_csv(table, columns, [row(f"{prefix}{i}")])

    threads = [threading.Thread(target=batch, args=(p,)) for p in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = sorted(Path(r["submission"]).stem for r in read_rows(table))
    assert names == sorted(f"{p}{i}" for p in "ab" for i in range(15)), names
    assert not list(tmp_path.glob("*.tmp")), "a temporary file was left behind"
