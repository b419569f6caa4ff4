"""Grade submitted notebooks so that no submission can stop, hang or abuse a batch.

:func:`grade_submission` grades one notebook with otter-grader (as ``otter run`` does, with the
tests read-only) inside the limits and sandbox of :mod:`nmst_lib.classroom.sandbox`, checks the
results against the autograder's questions and points, and raises on anything but a grade; :func:`grade_one` turns every
outcome (graded, failed, timed out) into a :class:`Outcome`; :func:`grade_batch` grades a list of
notebooks into a CSV that is rewritten atomically after each one, so an interrupted batch resumes
where it stopped without grading anything twice. The instructor guide (book/instructors.md,
"Grading safely") describes the modes; ``python -m nmst_lib assignments grade`` is the command.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

from ..files import atomic_write_bytes
from . import ASSIGNMENTS
from .sandbox import Limits, SandboxUnavailable, run_limited, sandbox_problem

__all__ = ["SubmissionError", "GradingTimeout", "GradingFailed", "Outcome", "check_submission", "grade_submission",
           "grade_one", "grade_batch", "expected_questions", "DEFAULT_LIMITS", "STATUSES"]

#: The default limits: 900 s, several times the slowest measured grading of a solution notebook on
#: 2 CPU cores shared with other jobs, and 6 GiB of data segment per process, several times the
#: largest measured; the measurements are in ``assignments/grading_times.json`` (written by
#: ``scripts/measure_grading.py``; the instructors' page states them with the ratio to 900 s).
DEFAULT_LIMITS = Limits(timeout_s=900.0, memory_bytes=6 * 2**30, file_bytes=2**30)
#: A submission's status in the CSV.
STATUSES = ("graded", "failed", "timed out")
_MAX_NOTEBOOK_BYTES = 64 * 2**20


class SubmissionError(ValueError):
    """The file is not a gradable submission of this assignment (not JSON, not a notebook, ...)."""


class GradingTimeout(RuntimeError):
    """The submission ran past its wall-clock limit and was killed with all its processes."""


class GradingFailed(RuntimeError):
    """otter-grader stopped without results (a crash, or a limit such as memory was hit)."""


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def check_submission(submission: str | Path, assignment: str | None = None) -> dict:
    """Read ``submission`` as a notebook of ``assignment`` and return it, or raise SubmissionError.

    Checks, in order: the file exists and ends in ``.ipynb``; it is at most 64 MiB; it is JSON;
    nbformat reads and validates it as a notebook; when it names its assignment (otter's
    ``metadata.otter.assignment_name``), that is ``assignment``.
    """
    path = Path(submission)
    if not path.is_file():
        raise SubmissionError(f"no such file: {path}")
    if path.suffix != ".ipynb":
        raise SubmissionError(f"a submission is a Jupyter notebook (.ipynb), got {path.name}")
    if path.stat().st_size > _MAX_NOTEBOOK_BYTES:
        raise SubmissionError(f"the notebook is {path.stat().st_size / 2**20:.0f} MiB, more than the 64 MiB allowed")
    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SubmissionError(f"not a notebook: the file is not valid JSON ({_one_line(err, 120)})") from None
    import nbformat

    if not isinstance(raw, dict) or "cells" not in raw or "nbformat" not in raw:
        raise SubmissionError("not a notebook: valid JSON, but without the 'cells' and 'nbformat' of a notebook")
    try:
        with warnings.catch_warnings():  # nbformat warns about cells without ids (older notebooks): fine
            warnings.simplefilter("ignore")
            nb = nbformat.reads(json.dumps(raw), as_version=4)
            nbformat.validate(nb)
    except Exception as err:  # nbformat raises its own ValidationError and others
        raise SubmissionError(f"not a valid notebook: {_one_line(err, 160)}") from None
    named = (raw.get("metadata") or {}).get("otter", {}) or {}
    named = named.get("assignment_name") if isinstance(named, dict) else None
    if assignment is not None and named is not None and named != assignment:
        raise SubmissionError(f"wrong assignment: the notebook is {named!r}, this batch grades {assignment!r}")
    return raw


def _assignment_of(autograder_zip: Path) -> str | None:
    name = autograder_zip.name.removesuffix(".zip").removesuffix("-autograder")
    return name if name in ASSIGNMENTS else None


def _read_only_for_grading() -> list[Path]:
    """What a graded notebook reads besides Python: nmst_lib, the fixture corpus, the data folders."""
    package = Path(__file__).resolve().parents[1]
    paths = [package, package.parent / "tests" / "fixtures" / "data"]
    paths += [Path(os.environ[v]) for v in ("NMST_DATA_DIR", "NMST_WIKITEXT_DIR") if os.environ.get(v)]
    return [p for p in paths if p.exists()]


# Run instead of `otter run`: the same grading (otter.run.run_autograder.main on an autograder
# folder), but the grader lays the folder out beforehand, with the autograder's files and its tests
# mounted read-only in the sandbox (otter run would copy them where the notebook can write), the
# kernel imports the nmst_lib the grader imported, and in the sandbox, once otter is done, every
# other process of the submission is killed and only then are the results written, from memory
# (a process the notebook left behind cannot replace them). argv: AUTOGRADER_DIR PACKAGE_PARENT MODE.
_OTTER_DRIVER = """\
import json, os, signal, sys, time
ag_dir, package_parent, mode = sys.argv[1:4]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")]))
from otter.run.run_autograder import main
from otter.run.run_autograder.runners.abstract_runner import AbstractLanguageRunner
from otter.test_files import GradingResults
AbstractLanguageRunner.prepare_files = lambda self: None  # the grader placed the files
AbstractLanguageRunner.sanitize_tokens = lambda self: setattr(self.ag_config, "token", None)
made, to_dict = [], GradingResults.to_gradescope_dict
def keep(self, *args, **kwargs):
    made.append(json.dumps(to_dict(self, *args, **kwargs), indent=4))
    return json.loads(made[-1])
GradingResults.to_gradescope_dict = keep
main(ag_dir, logo=False, otter_run=True)
if mode == "sandbox" and os.getppid() == 1 and made:  # in bwrap's PID namespace: kill all but init and us
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:  # none left
        pass
    others = lambda: [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
    deadline = time.monotonic() + 10
    while others() and time.monotonic() < deadline:
        time.sleep(0.01)
    if others():
        sys.exit("processes of the submission survived SIGKILL: no results")
    with open(os.path.join(ag_dir, "results", "results.json"), "w") as f:
        f.write(made[-1])
"""


def expected_questions(autograder_zip: str | Path) -> dict:
    """``{question: points}`` of the autograded questions of a built autograder zip, from the kit's
    ``index.json`` two folders up (``<out>/<id>/<id>-autograder.zip`` beside ``<out>/index.json``).

    Grading accepts a ``results.json`` only when it scores exactly these questions, each out of
    these points. ValueError when the index is missing or does not list the assignment.
    """
    autograder_zip = Path(autograder_zip).resolve()
    assignment = _assignment_of(autograder_zip)
    index_path = autograder_zip.parent.parent / "index.json"
    if assignment is None or not index_path.is_file():
        raise ValueError(f"no index.json of the kit for {autograder_zip} (expected {index_path}, written by "
                         "`python -m nmst_lib assignments build` beside <id>/<id>-autograder.zip): grading checks "
                         "otter's results against the questions and points it lists; or pass expected={question: "
                         "points}")
    entry = json.loads(index_path.read_text(encoding="utf-8")).get("assignments", {}).get(assignment)
    if entry is None:
        raise ValueError(f"{index_path} does not list {assignment}: rebuild the kit")
    return {q["name"]: float(q["points"]) for q in entry["questions"] if q["kind"] == "autograded"}


def _lay_out(autograder_zip: Path, submission: Path, tmp: Path, mode: str) -> tuple[Path, list]:
    """The autograder folder otter expects, in ``tmp/scratch``; the zip's files outside it, in
    ``tmp/source``. Returns the scratch folder and the read-only mounts (sandbox) of the files."""
    import zipfile

    scratch, source = tmp / "scratch", tmp / "source"
    ag = scratch / "autograder"
    for sub in ("submission", "results", "source"):
        (ag / sub).mkdir(parents=True)
    with zipfile.ZipFile(autograder_zip) as z:
        z.extractall(source)
    if not (source / "tests").is_dir():
        raise ValueError(f"{autograder_zip} holds no tests/ folder: not an otter autograder zip")
    config = source / "otter_config.json"
    if config.is_file():  # no upload token where the notebook runs (otter's sanitize_tokens, done here)
        settings = json.loads(config.read_text(encoding="utf-8"))
        if isinstance(settings, dict) and settings.pop("token", None) is not None:
            config.write_text(json.dumps(settings, indent=2), encoding="utf-8")
    (ag / "submission_metadata.json").write_text("{}")
    for init in (ag / "__init__.py", ag / "submission" / "__init__.py"):
        init.touch()
    shutil.copy2(submission, ag / "submission" / "submission.ipynb")
    if (source / "files").is_dir():  # support files, as otter's prepare_files copies them
        shutil.copytree(source / "files", ag / "submission", dirs_exist_ok=True)
    (ag / "submission" / "tests").mkdir()
    if mode == "sandbox":
        inside = "/grading/autograder"
        return scratch, [(source, f"{inside}/source"), (source / "tests", f"{inside}/submission/tests")]
    shutil.copytree(source, ag / "source", dirs_exist_ok=True)  # trusted: copies, writable (see the guide)
    shutil.copytree(source / "tests", ag / "submission" / "tests", dirs_exist_ok=True)
    return scratch, []


def grade_submission(autograder_zip: str | Path, submission: str | Path, out_dir: str | Path | None = None, *,
                     mode: str = "sandbox", limits: Limits = DEFAULT_LIMITS, expected: dict | None = None) -> dict:
    """Grade one notebook with otter-grader: ``{question: {"score", "max_score"}}``.

    The notebook runs top to bottom in a fresh kernel, then every test case (public and hidden) of
    the autograder zip, in ``mode`` (``"sandbox"``: bubblewrap, see :mod:`.sandbox`; ``"trusted"``:
    no isolation) under ``limits``. This is ``otter run``, except that in the sandbox the
    autograder's files and tests are mounted read-only where the notebook runs. The results must
    score exactly the questions of ``expected`` (``{question: points}``; default
    :func:`expected_questions` of the zip), each out of its points, with a score between 0 and
    them; anything else raises GradingFailed ("results do not match the autograder").

    Raises SubmissionError (not a notebook of this assignment), GradingTimeout, GradingFailed (otter
    produced no results, or results that do not match), SandboxUnavailable. A failing student cell
    is not an error: it only loses points. ``out_dir`` keeps ``results.json`` and what the notebook
    could write: ``work/`` (the folder it ran in), ``home/`` (its ``$HOME``), ``tmp/``.
    """
    autograder_zip, submission = Path(autograder_zip).resolve(), Path(submission).resolve()
    if not autograder_zip.is_file():
        raise ValueError(f"the autograder zip {autograder_zip} does not exist")
    expected = expected_questions(autograder_zip) if expected is None else _checked_expected(expected)
    check_submission(submission, _assignment_of(autograder_zip))
    if mode == "sandbox" and sandbox_problem() is not None:
        raise SandboxUnavailable(sandbox_problem())
    with tempfile.TemporaryDirectory(prefix="nmst-grade-") as tmp:
        scratch, mounts = _lay_out(autograder_zip, submission, Path(tmp), mode)
        where = "/grading" if mode == "sandbox" else str(scratch)
        package_parent = str(Path(__file__).resolve().parents[2])
        argv = [sys.executable, "-c", _OTTER_DRIVER, f"{where}/autograder", package_parent, mode]
        result = run_limited(argv, scratch, mode=mode, limits=limits, read_only=_read_only_for_grading(),
                             read_only_at=mounts)
        # run_limited returns once every process of the submission is dead (in the sandbox its PID
        # namespace is gone), so nothing can change the results after they are read
        results_file = scratch / "autograder" / "results" / "results.json"
        if out_dir is not None:
            out = Path(out_dir)
            out.mkdir(parents=True, exist_ok=True)
            for sub, target in (("autograder/submission", "work"), ("home", "home"), ("tmp", "tmp")):
                shutil.copytree(scratch / sub, out / target, dirs_exist_ok=True, symlinks=True)
            if results_file.is_file():
                shutil.copy2(results_file, out / "results.json")
        if result.timed_out:
            raise GradingTimeout(f"stopped after the {limits.timeout_s:g} s limit (all its processes killed)")
        if result.returncode != 0 or not results_file.is_file():
            last = [ln for ln in result.stderr.splitlines() if ln.strip()][-1:] or [f"exit {result.returncode}"]
            raise GradingFailed(f"otter run failed (exit {result.returncode}): {_one_line(last[0])}")
        try:
            results = json.loads(results_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise GradingFailed(f"otter's results.json is unreadable: {_one_line(err)}") from None
    return _scores(results, expected)


def _checked_expected(expected) -> dict:
    if not isinstance(expected, dict) or not expected:
        raise TypeError(f"expected must be a non-empty dict {{question: points}}, got {expected!r}")
    out = {}
    for q, points in expected.items():
        if isinstance(points, bool) or not isinstance(points, (int, float)) or not points > 0:
            raise ValueError(f"expected[{q!r}] must be a positive number of points, got {points!r}")
        out[str(q)] = float(points)
    return out


def _scores(results: dict, expected: dict) -> dict:
    """The scores of otter's ``results.json``, checked against the autograder's questions and points."""
    import math

    scores, problems = {}, []
    for test in results.get("tests", []) if isinstance(results, dict) else []:
        if isinstance(test, dict) and test.get("max_score") is not None and test.get("name") != "Public Tests":
            name = str(test["name"])
            try:
                score, top = float(test.get("score") or 0.0), float(test["max_score"])
            except (TypeError, ValueError):
                problems.append(f"{name} has a score that is not a number")
                continue
            if name in scores:
                problems.append(f"{name} is scored twice")
            scores[name] = {"score": score, "max_score": top}
    if not scores:
        raise GradingFailed("otter's results.json holds no graded question")
    unknown, missing = sorted(set(scores) - set(expected)), [q for q in expected if q not in scores]
    if unknown:
        problems.append(f"questions the autograder does not have: {', '.join(unknown)}")
    if missing:
        problems.append(f"questions missing: {', '.join(missing)}")
    for q, v in scores.items():
        if q in expected and not math.isclose(v["max_score"], expected[q], abs_tol=1e-4):
            problems.append(f"{q} is out of {v['max_score']:g}, the autograder's is {expected[q]:g}")
        elif not 0.0 <= v["score"] <= v["max_score"] + 1e-9:  # also refuses nan
            problems.append(f"{q} scores {v['score']:g}, outside [0, {v['max_score']:g}]")
    if problems:
        raise GradingFailed("results do not match the autograder (was the grading tampered with?): "
                            + "; ".join(problems))
    return scores


@dataclasses.dataclass
class Outcome:
    """One submission's line of the batch: status (graded / failed / timed out), scores, one-line error."""

    submission: str
    status: str
    scores: dict
    error: str = ""
    seconds: float = 0.0
    sha256: str = ""


def _sha256(path: Path) -> str:
    """The file's sha256 (read in 1 MiB blocks: an upload may be huge), or "" when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(2**20), b""):
                digest.update(block)
    except OSError:
        return ""
    return digest.hexdigest()


def grade_one(autograder_zip, submission, *, mode: str = "sandbox", limits: Limits = DEFAULT_LIMITS) -> Outcome:
    """:func:`grade_submission` as an :class:`Outcome` that never raises for a bad submission.

    Only a missing sandbox (SandboxUnavailable: nothing could be graded) and Ctrl-C propagate.
    """
    import time

    start = time.monotonic()
    sha = _sha256(Path(submission))
    try:
        scores = grade_submission(autograder_zip, submission, mode=mode, limits=limits)
        status, error = "graded", ""
    except SandboxUnavailable:
        raise
    except GradingTimeout as err:
        scores, status, error = {}, "timed out", _one_line(err)
    except Exception as err:  # noqa: BLE001 -- any failure of one submission is reported, never fatal
        scores, status, error = {}, "failed", _one_line(f"{type(err).__name__}: {err}")
    return Outcome(str(submission), status, scores, error, time.monotonic() - start, sha)


def _columns(questions) -> list[str]:
    return ["submission", "status", *questions, "autograded_total", "max_total", "seconds", "error", "sha256"]


def _read_csv(path: Path, columns: list[str]) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != columns:
            raise ValueError(f"{path} holds another table (columns {reader.fieldnames}, expected {columns}): "
                             "give a new --csv file to start a batch")
        return list(reader)


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    """Merge ``rows`` into the table at ``path`` (by submission) and replace the file atomically.

    Under an exclusive ``flock`` on ``.<name>.lock`` beside it, so that two batches writing one CSV
    keep each other's rows: read the table on disk, replace or append ``rows``, and write it with
    :func:`nmst_lib.files.atomic_write_bytes` (a temporary file, flushed, renamed over ``path``,
    the folder flushed).
    """
    import fcntl

    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        table = {os.path.abspath(r["submission"]): r for r in _read_csv(path, columns)}
        table.update({os.path.abspath(r["submission"]): r for r in rows})
        text = io.StringIO(newline="")  # the csv module's own line ends, untranslated
        writer = csv.DictWriter(text, fieldnames=columns)
        writer.writeheader()
        writer.writerows(table.values())
        atomic_write_bytes(path, text.getvalue().encode("utf-8"), mode=0o644)


def _row(outcome: Outcome, questions) -> dict:
    total = sum(v["score"] for v in outcome.scores.values())
    top = sum(v["max_score"] for v in outcome.scores.values())
    row = {"submission": outcome.submission, "status": outcome.status, "seconds": f"{outcome.seconds:.1f}",
           "error": outcome.error, "sha256": outcome.sha256,
           "autograded_total": f"{total:g}" if outcome.status == "graded" else "",
           "max_total": f"{top:g}" if outcome.status == "graded" else ""}
    for q in questions:
        row[q] = f"{outcome.scores[q]['score']:g}" if q in outcome.scores else ""
    return row


def grade_batch(autograder_zip, submissions, questions, csv_path=None, *, mode: str = "sandbox",
                limits: Limits = DEFAULT_LIMITS, retry_failed: bool = False, progress: bool | None = None,
                log=None) -> dict:
    """Grade ``submissions`` one by one into ``csv_path``; return the counts by status.

    Each submission gets one row (:data:`STATUSES`; score columns ``questions``, totals, seconds,
    a one-line error, the file's sha256); the CSV is rewritten atomically after every submission,
    merged under a lock with what is on disk (another batch may write the same file).
    A submission that already has a row for the same file content is not graded again (an
    interrupted batch resumes), unless ``retry_failed`` and its row is not ``graded``. In sandbox
    mode a machine without a working sandbox raises SandboxUnavailable before anything runs.
    ``progress``: a tqdm bar on stderr (None: only on a terminal). Returns ``{"graded", "failed",
    "timed out", "skipped", "rows"}`` (``skipped``: rows kept from an earlier run).
    """
    from tqdm.auto import tqdm

    if mode == "sandbox" and sandbox_problem() is not None:
        raise SandboxUnavailable(f"no sandbox on this machine: {sandbox_problem()}. Grading runs students' code; "
                                 "without isolation it could read, change or send your files. Install bubblewrap, "
                                 "or pass --trusted to grade without isolation (only for code you trust)")
    columns = _columns(list(questions))
    csv_file = Path(csv_path) if csv_path is not None else None
    table = {os.path.abspath(r["submission"]): r for r in (_read_csv(csv_file, columns) if csv_file else [])}
    files = list(dict.fromkeys(str(s) for s in submissions))
    todo = []
    for sub in files:
        old = table.get(os.path.abspath(sub))
        if old is None or old["sha256"] != _sha256(Path(sub)) or (retry_failed and old["status"] != "graded"):
            todo.append(sub)
    bar = tqdm(total=len(files), initial=len(files) - len(todo), unit="notebook", desc="grading",
               disable=(None if progress is None else not progress), file=sys.stderr)
    try:
        for sub in todo:
            outcome = grade_one(autograder_zip, sub, mode=mode, limits=limits)
            table[os.path.abspath(sub)] = _row(outcome, questions)
            if csv_file is not None:  # merged with the file: another batch may write it too
                _write_csv(csv_file, columns, [table[os.path.abspath(sub)]])
            bar.update(1)
            if log is not None:
                log(_describe(outcome), bar)
    finally:
        bar.close()
    counts = {s: 0 for s in STATUSES}
    for sub in files:
        counts[table[os.path.abspath(sub)]["status"]] += 1
    return {**counts, "skipped": len(files) - len(todo), "rows": [table[os.path.abspath(s)] for s in files]}


def _describe(outcome: Outcome) -> str:
    if outcome.status != "graded":
        return f"{outcome.submission}: {outcome.status.upper()} ({outcome.seconds:.0f} s): {outcome.error}"
    total = sum(v["score"] for v in outcome.scores.values())
    top = sum(v["max_score"] for v in outcome.scores.values())
    detail = ", ".join(f"{q} {v['score']:g}/{v['max_score']:g}" for q, v in outcome.scores.items())
    return f"{outcome.submission}: {total:g}/{top:g} autograded points ({detail}; {outcome.seconds:.0f} s)"
