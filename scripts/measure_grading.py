"""Time the autograder on each assignment's solution notebook, in the sandbox and without it.

The instructors' page (book/instructors.md) says how long grading takes and how much memory it
needs, to justify the default limits (900 s, 6 GiB). Those numbers come from this script, not
from the page's author: it grades the instructor edition of every assignment ``--rounds`` times
in each mode, alternating the modes so that a change in the machine's load hits both alike, and
writes ``assignments/grading_times.json`` (atomically) with what produced it: the commit, whether
``nmst_lib/`` or ``assignments/`` had uncommitted changes, the machine (cores, load average
before and after), Python, otter-grader and the UTC time. The book's build reads that file
(book/_ext/nmst_book.py) into the page.

Each grading runs in a child process of its own, so that the peak resident memory of the largest
process it started (``ru_maxrss`` of its children: the notebook's kernel) is its own.

Usage (the kit must be built first: ``bash scripts/assignments.sh``)::

    .venv/bin/python scripts/measure_grading.py [--rounds 2] [--only a1_decoding ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nmst_lib.classroom import ASSIGNMENTS  # noqa: E402
from nmst_lib.experiments.results import (  # noqa: E402
    code_version,
    command_line,
    utc_now,
)
from nmst_lib.files import write_json_atomic  # noqa: E402

OUT = ROOT / "assignments" / "grading_times.json"
MODES = ("sandbox", "trusted")


def grade_once(autograder_zip: str, submission: str, mode: str) -> dict:
    """Grade in this process; the wall time and the largest child's peak memory (bytes)."""
    from nmst_lib.classroom.grading import grade_submission

    start = time.monotonic()
    scores = grade_submission(autograder_zip, submission, mode=mode)
    seconds = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    full = all(v["score"] == v["max_score"] for v in scores.values())
    return {"seconds": round(seconds, 2), "peak_bytes": peak, "full_marks": full}


def _in_child(autograder_zip: Path, submission: Path, mode: str) -> dict:
    argv = [sys.executable, __file__, "--one", str(autograder_zip), str(submission), mode]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"grading {submission.name} ({mode}) failed: {tail}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _uncommitted() -> bool | None:
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", "nmst_lib", "assignments",
             ":(exclude)assignments/grading_times.json",
             ":(exclude)nmst_lib/published_results"],
            cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.stdout.strip()) if out.returncode == 0 else None


def _otter_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("otter-grader")
    except Exception:  # noqa: BLE001 - provenance only
        return None


def measure(built: Path, rounds: int, only) -> dict:
    names = [a for a in ASSIGNMENTS if not only or a in only]
    kit = json.loads((built / "index.json").read_text(encoding="utf-8"))
    stamp = {
        "kit_built_from": kit["provenance"]["code_version"],
        "git_sha": code_version()["git_sha"],
        "git_dirty": _uncommitted(),
        "nmst_lib": code_version()["nmst_lib"],
        "python": platform.python_version(),
        "otter_grader": _otter_version(),
        "cpu_count": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "started": utc_now(),
        "command": command_line(),
        "rounds": rounds,
    }
    timings: dict = {a: {m: [] for m in MODES} for a in names}
    peaks: dict = {a: 0 for a in names}
    for r in range(rounds):
        for a in names:
            zip_ = built / a / f"{a}-autograder.zip"
            sub = built / a / "instructor" / f"{a}.ipynb"
            # alternate which mode goes first, so a load change hits both alike
            order = MODES if r % 2 == 0 else MODES[::-1]
            for mode in order:
                got = _in_child(zip_, sub, mode)
                if not got["full_marks"]:
                    raise RuntimeError(f"{a}'s solutions lost points ({mode}): "
                                       "the kit is broken, not slow")
                timings[a][mode].append(got["seconds"])
                peaks[a] = max(peaks[a], got["peak_bytes"])
                print(f"[round {r + 1}/{rounds}] {a} {mode}: "
                      f"{got['seconds']:.1f} s", flush=True)
    stamp["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    stamp["finished"] = utc_now()
    return {
        "what": "seconds to grade each assignment's instructor edition (the "
                "solutions), per mode and round; peak_bytes: the largest "
                "process's peak resident memory over all its gradings",
        "provenance": stamp,
        "assignments": {
            a: {"seconds": timings[a], "peak_bytes": peaks[a]} for a in names
        },
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", nargs="*", choices=ASSIGNMENTS)
    parser.add_argument("--built", type=Path,
                        default=ROOT / "_build" / "assignments")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(grade_once(*args.one)))
        return 0
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not (args.built / "index.json").is_file():
        parser.error(f"no built kit in {args.built}: run "
                     "`bash scripts/assignments.sh` first")
    result = measure(args.built, args.rounds, args.only)
    write_json_atomic(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
