"""Build the classroom editions of every assignment with otter-grader.

One master notebook per assignment (``assignments/<id>/<id>.ipynb``, otter-assign format) becomes,
under ``_build/assignments/<id>/``:

* ``student/`` -- the notebook students get (``...`` where they write code, no solutions, no
  rubrics, no hidden tests) and its public tests; zipped as ``<id>-student.zip``;
* ``instructor/`` -- the solution notebook with rubrics, and every test, hidden ones included;
* ``<id>-autograder.zip`` -- what ``otter run``/``otter grade`` and Gradescope take.

Grading submissions (sandboxed, with limits, batch by batch) is :mod:`nmst_lib.classroom.grading`.
``index.json`` beside them lists each assignment's questions, their kind (autograded or manual)
and points, with provenance (code version, otter-grader version, date, install spec).

**The kit pins its library.** Every edition installs ``nmst_lib`` with one spec (the setup cell
in Colab, ``requirements.txt`` on Gradescope). The masters name the repository without a
version; a build from a clean checkout writes that commit into the editions
(``...@<commit>``), so students and the autograder install the library the kit was built and
tested against, all term, whatever the repository does meanwhile (``pin`` of
:func:`build_assignments`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml

from . import ASSIGNMENTS, TESTS_MARKER
from .grading import grade_submission  # noqa: F401 -- grading lives in .grading; kept importable from here

__all__ = ["repository_root", "master_notebook", "assignment_questions", "build_assignments", "grade_submission",
           "REPOSITORY_URL", "UNPINNED_INSTALL_SPEC", "pinned_install_spec"]

#: The book's repository, ``_config.yml``'s ``repository.url`` (tests/test_repository_url.py checks it).
REPOSITORY_URL = "https://github.com/nmst-book/when-do-language-models-stop"

#: What the masters install: the repository's default branch (``_config.yml``'s
#: ``repository.branch``) as GitHub's zip archive of it, which pip builds without git (otter
#: grade's Docker image, Ubuntu with otter's ``setup.sh``, installs none); the build pins it.
UNPINNED_INSTALL_SPEC = f"nmst-lib[classroom] @ {REPOSITORY_URL}/archive/refs/heads/main.zip"
_GIT_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

_BEGIN_QUESTION = re.compile(r"^\s*#\s*BEGIN\s+QUESTION\s*$", re.IGNORECASE)
_TEST_CONFIG = re.compile(r'"""\s*#\s*BEGIN\s+TEST\s+CONFIG(.*?)"""\s*#\s*END\s+TEST\s+CONFIG', re.DOTALL)


def repository_root() -> Path:
    """The checkout this package was imported from (where ``assignments/`` lives)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "assignments").is_dir():
        raise ValueError(f"no assignments/ folder next to nmst_lib in {root}: the classroom build needs a "
                         "clone of the book's repository (the master notebooks are not part of the wheel)")
    return root


def master_notebook(assignment: str, root: Path | None = None) -> Path:
    """``assignments/<id>/<id>.ipynb`` of ``assignment`` (ValueError for an unknown id or a missing file)."""
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"unknown assignment {assignment!r}; the assignments are {', '.join(ASSIGNMENTS)}")
    path = Path(root or repository_root()) / "assignments" / assignment / f"{assignment}.ipynb"
    if not path.is_file():
        raise ValueError(f"the master notebook of {assignment} is missing: {path}")
    return path


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def assignment_questions(master: Path) -> list[dict]:
    """The questions of a master notebook, in order: name, manual or autograded, points, test cases.

    An autograded question's points are the sum of its test cases' ``points`` (each test cell's
    ``BEGIN TEST CONFIG`` block; the kit gives every case explicit points, so a bug loses exactly
    the cases it fails); a manual question's come from its ``points:`` (graded by rubric).
    """
    cells = json.loads(Path(master).read_text(encoding="utf-8"))["cells"]
    questions: list[dict] = []
    current = None
    in_tests = False
    for cell in cells:
        src = _source(cell)
        first = src.strip().splitlines()[0].strip() if src.strip() else ""
        if cell["cell_type"] == "raw" and _BEGIN_QUESTION.match(first):
            config = yaml.safe_load("\n".join(src.strip().splitlines()[1:])) or {}
            current = {"name": str(config["name"]), "manual": bool(config.get("manual", False)),
                       "points": config.get("points"), "tests": []}
            questions.append(current)
        elif cell["cell_type"] == "raw" and re.match(r"#\s*BEGIN\s+TESTS", first, re.IGNORECASE):
            in_tests = True
        elif cell["cell_type"] == "raw" and re.match(r"#\s*END\s+TESTS", first, re.IGNORECASE):
            in_tests = False
        elif in_tests and cell["cell_type"] == "code" and current is not None:
            m = _TEST_CONFIG.search(src)
            config = (yaml.safe_load(m.group(1)) if m else None) or {}
            name = re.search(r"def\s+(\w+)\s*\(", src)
            current["tests"].append({"name": name.group(1) if name else "", "hidden": bool(config.get("hidden", False)),
                                     "points": config.get("points")})
    for q in questions:
        if q["tests"] and all(t["points"] is not None for t in q["tests"]):
            q["points"] = float(sum(t["points"] for t in q["tests"]))
        q["kind"] = "manual" if q["manual"] else ("autograded" if q["tests"] else "ungraded")
    return questions


def _otter(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    proc = subprocess.run([sys.executable, "-m", "otter", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"otter {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _zip_folder(folder: Path, target: Path, root: str) -> None:
    """Zip ``folder``'s files under the folder name ``root`` (what unzipping creates)."""
    tmp = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                z.write(path, Path(root) / path.relative_to(folder))
    os.replace(tmp, target)


def _git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "assignments", "nmst_lib"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def pinned_install_spec(ref: str | None) -> str:
    """The install spec of the editions: GitHub's zip archive of the book's repository at git
    ``ref`` (``.../archive/<ref>.zip``; pip installs it without git), or
    :data:`UNPINNED_INSTALL_SPEC` for ``None``.

    ``ref`` is a commit, tag or branch of the book's repository. A ref that could not name one in
    the archive's URL (spaces, ``/``, ``@``, ``#``, ``..``, a leading ``-`` or ``.``) is refused.
    """
    if ref is None:
        return UNPINNED_INSTALL_SPEC
    if not isinstance(ref, str):
        raise TypeError(f"pin must be a git ref (str) or None, not {type(ref).__name__}")
    if not _GIT_REF.fullmatch(ref) or ".." in ref or ref.endswith((".", "/", ".lock")):
        raise ValueError(f"pin {ref!r} is not a git commit, tag or branch name: use letters, digits and . _ - "
                         "(not starting with . or -, without .. or /), e.g. a commit hash or a tag like v5.5")
    return f"nmst-lib[classroom] @ {REPOSITORY_URL}/archive/{ref}.zip"


def _resolve_pin(pin, root: Path) -> tuple[str | None, str]:
    """The ref to pin (or None) and a sentence saying why, for ``pin`` of :func:`build_assignments`."""
    if pin is None:
        return None, "unpinned on request: the editions install the repository's default branch"
    if pin != "auto":
        pinned_install_spec(pin)  # validates
        return pin, f"pinned to {pin}, as requested"
    commit = _git_commit(root)
    if commit is None:
        return None, ("unpinned: not built from a git checkout, so there is no commit to pin; "
                      "the editions install the repository's default branch")
    if commit.endswith("+dirty"):
        return None, ("unpinned: assignments/ or nmst_lib/ has uncommitted changes, so no commit holds "
                      "what was built; the editions install the repository's default branch")
    return commit, f"pinned to the commit that built the kit, {commit[:12]}"


def _pinned_masters(root: Path, assignment: str, spec: str, into: Path) -> Path:
    """A copy of the assignment's master folder and of ``assignments/requirements.txt`` under
    ``into`` with :data:`UNPINNED_INSTALL_SPEC` replaced by ``spec``; returns the copied master."""
    src = master_notebook(assignment, root).parent
    copy = into / "assignments" / assignment
    shutil.copytree(src, copy)
    for path in (src / f"{assignment}.ipynb", root / "assignments" / "requirements.txt"):
        text = path.read_text(encoding="utf-8")
        if UNPINNED_INSTALL_SPEC not in text:
            raise RuntimeError(f"{path.relative_to(root)} does not install {UNPINNED_INSTALL_SPEC!r}, so the build "
                               "cannot pin it; restore the spec (tests/test_repository_url.py checks it)")
        target = copy / path.name if path.suffix == ".ipynb" else into / "assignments" / path.name
        target.write_text(text.replace(UNPINNED_INSTALL_SPEC, spec), encoding="utf-8")
    return copy / f"{assignment}.ipynb"


def build_assignments(out_dir: str | Path | None = None, only=None, sync_package: bool = False,
                      root: str | Path | None = None, pin: str | None = "auto") -> dict:
    """Build the student, instructor and autograder editions of the assignments (all, or ``only``).

    ``out_dir`` defaults to ``<repository>/_build/assignments``; each assignment's folder is
    replaced atomically (built in a temporary folder, then moved). ``sync_package=True`` also copies
    the public tests into ``nmst_lib/classroom/public_tests/<id>/`` (what a Colab student, who has
    only the notebook, checks against): maintainers run it after editing a master and commit the
    result; ``tests/classroom`` fails while the shipped copy differs from a fresh build.
    ``pin`` is the git ref the editions install ``nmst_lib`` at (:func:`pinned_install_spec`):
    ``"auto"`` (the default) pins the commit that built the kit when ``assignments/`` and
    ``nmst_lib/`` are committed, and leaves the spec unpinned otherwise (a development build:
    no commit holds it); a commit or tag pins that; ``None`` leaves it unpinned. The ref must be
    reachable on the repository's host for students' installs to find it. ``index.json``'s
    provenance records the spec and why.
    Returns the index (also written to ``index.json``).
    """
    root = Path(root) if root is not None else repository_root()
    out = Path(out_dir) if out_dir is not None else root / "_build" / "assignments"
    if only is None:
        ids = list(ASSIGNMENTS)
    else:
        ids = [only] if isinstance(only, str) else list(only)
        unknown = [a for a in ids if a not in ASSIGNMENTS]
        if unknown:
            raise ValueError(f"unknown assignment(s) {', '.join(unknown)}; the assignments are {', '.join(ASSIGNMENTS)}")
    ref, pin_note = _resolve_pin(pin, root)
    spec = pinned_install_spec(ref)
    out.mkdir(parents=True, exist_ok=True)
    import otter

    code_version = _git_commit(root)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text(encoding="utf-8")) if index_path.is_file() else {"assignments": {}}
    for assignment in ids:
        master = master_notebook(assignment, root)
        with tempfile.TemporaryDirectory(dir=out, prefix=f".{assignment}-") as tmp:
            tmp = Path(tmp)
            dist = tmp / "dist"
            pinned = _pinned_masters(root, assignment, spec, tmp / "src")
            _otter("assign", str(pinned), str(dist), cwd=pinned.parent)
            stage = tmp / assignment
            (stage / "student").mkdir(parents=True)
            shutil.copytree(dist / "student", stage / "student", dirs_exist_ok=True)
            # the marker that tells public_tests_dir whose tests these are (two assignments in one folder)
            (stage / "student" / "tests" / TESTS_MARKER).write_text(assignment + "\n", encoding="utf-8")
            zips = sorted((dist / "autograder").glob(f"{assignment}-autograder_*.zip"))
            if len(zips) != 1:
                raise RuntimeError(f"otter assign wrote {len(zips)} autograder zips for {assignment}, expected one")
            shutil.move(str(zips[0]), stage / f"{assignment}-autograder.zip")
            instructor = stage / "instructor"
            instructor.mkdir()
            shutil.copy2(dist / "autograder" / f"{assignment}.ipynb", instructor / f"{assignment}.ipynb")
            shutil.copytree(dist / "autograder" / "tests", instructor / "tests")
            _zip_folder(stage / "student", stage / f"{assignment}-student.zip", root=assignment)
            final = out / assignment
            old = tmp / "old"
            if final.exists():
                os.replace(final, old)
            os.replace(stage, final)
        if sync_package:
            shipped = Path(__file__).resolve().parent / "public_tests" / assignment
            if shipped.exists():
                shutil.rmtree(shipped)
            shutil.copytree(out / assignment / "student" / "tests", shipped, ignore=shutil.ignore_patterns(TESTS_MARKER))
        questions = assignment_questions(master)
        index["assignments"][assignment] = {
            "master": str(master.relative_to(root)),
            "questions": questions,
            "autograded_points": sum(q["points"] or 0 for q in questions if q["kind"] == "autograded"),
            "manual_points": sum(q["points"] or 0 for q in questions if q["kind"] == "manual"),
            "student": f"{assignment}/{assignment}-student.zip",
            "autograder": f"{assignment}/{assignment}-autograder.zip",
            "instructor": f"{assignment}/instructor/{assignment}.ipynb",
            # per assignment: a rebuild of some (--only) leaves the others' editions at their own spec
            "install_spec": spec, "install_pin": ref, "install_note": pin_note, "code_version": code_version,
        }
    from .. import __version__

    index["provenance"] = {"code_version": code_version, "nmst_lib": __version__,
                           "otter_grader": getattr(otter, "__version__", "unknown"),
                           "install_spec": spec, "install_pin": ref, "install_note": pin_note,
                           "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    tmp_index = index_path.with_suffix(".json.tmp")
    tmp_index.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp_index, index_path)
    return index
