"""The provenance stamp every benchmark script of ``benchmarks/`` records (not a benchmark).

Each ``bench_*.py`` writes :func:`stamp` under the top-level key :data:`KEY` (``"provenance"``) of
its JSON, beside the keys it has always written: the code (full git SHA of HEAD, and whether the
checkout has uncommitted changes, from :func:`nmst_lib.experiments.results.code_version` for the
library plus a check of ``benchmarks/`` itself, whose scripts and "before" copies are timed code
too), the library's version, Python, torch, the platform, the device (the CUDA device's name on
CUDA, else the processor and core count), torch's thread count, the command and the UTC date-time
at which the stamp was taken (the start of the timed work).

A run from a checkout with uncommitted changes is not refused (benchmarks are run by hand while a
change is being made): its stamp says ``"git_dirty": true`` and :func:`stamp` prints a one-line
warning, so such a file is never mistaken for a measurement of a commit. Files written before this
stamp existed (every file stored in ``benchmarks/results/`` when it was added; README.md's
repository map) have no ``"provenance"`` key; readers must tolerate its absence.

The scripts put the repository root on ``sys.path`` before importing ``nmst_lib``, so the library
timed is the one of this checkout; this module does the same for itself.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nmst_lib.experiments import results as _results  # noqa: E402
from nmst_lib.files import repo_root  # noqa: E402

KEY = "provenance"
"""The top-level key of a benchmark JSON that holds :func:`stamp`."""
SCHEMA = "nmst_lib.benchmark_provenance/1"
FIELDS = ("schema", "git_sha", "git_dirty", "library_dirty", "benchmarks_dirty", "nmst_lib", "python", "torch",
          "platform", "device_type", "device", "threads", "command", "date_utc")
"""Every field of a stamp, in order."""


def device_description(device: torch.device | str) -> str:
    """The CUDA device's name for a CUDA device, else ``cpu (<processor>, <N> cores)``."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def uncommitted(root: str | os.PathLike, *pathspecs: str) -> bool | None:
    """Whether ``git status`` in ``root`` shows uncommitted changes (untracked files included) under
    ``pathspecs``; None when ``root`` is not a git checkout or git cannot be run."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--", *pathspecs], cwd=root, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.stdout.strip()) if out.returncode == 0 else None


def benchmarks_dirty() -> bool | None:
    """Uncommitted changes in ``benchmarks/`` (its stored results not counted); None when this
    folder is not in a git checkout of its own (a copy of the tree inside some other repository
    must not report that repository's status)."""
    if not (ROOT / ".git").exists():
        return None
    return uncommitted(ROOT, "benchmarks", ":(exclude)benchmarks/results")


def _either(*flags: bool | None) -> bool | None:
    if any(flag is True for flag in flags):
        return True
    return None if any(flag is None for flag in flags) else False


def command(script: str | os.PathLike, argv: list[str] | None = None) -> str:
    """``python benchmarks/<script> <arguments>`` (``argv``, default the command line's)."""
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    return shlex.join(["python", f"benchmarks/{Path(script).name}", *args])


def stamp(device: torch.device | str, *, script: str | os.PathLike, argv: list[str] | None = None,
          warn: bool = True) -> dict:
    """The provenance of a benchmark run on ``device`` by ``script`` (the caller's ``__file__``)
    with ``argv`` (None: ``sys.argv[1:]``). Prints a one-line warning (stderr) when the checkout
    has uncommitted changes in the library or in ``benchmarks/``, unless ``warn`` is False."""
    device = torch.device(device)
    code = _results.code_version()
    library = code["git_sha"] is not None and Path(repo_root()).resolve() != ROOT
    bench = benchmarks_dirty()
    dirty = _either(code["git_dirty"], bench)
    env = _results.environment_info(device)  # the fields every result is stamped with
    record = {
        "schema": SCHEMA,
        "git_sha": code["git_sha"],
        "git_dirty": dirty,
        "library_dirty": code["git_dirty"],
        "benchmarks_dirty": bench,
        "nmst_lib": code["nmst_lib"],
        "python": env["python"],
        "torch": env["torch"],
        "platform": env["platform"],
        "device_type": device.type,
        "device": device_description(device),
        "threads": env["threads"],
        "command": command(script, argv),
        "date_utc": _results.utc_now(),
    }
    if library:  # nmst_lib came from another checkout than this script: its SHA is not this one's
        record["library_checkout"] = str(repo_root())
    if warn and dirty:
        where = " and ".join(w for w, f in (("nmst_lib/", code["git_dirty"]), ("benchmarks/", bench)) if f)
        print(f"warning: uncommitted changes in {where} (HEAD {(code['git_sha'] or 'unknown')[:7]}): this result is "
              f"stamped \"git_dirty\": true and measures no commit", file=sys.stderr, flush=True)
    return record


def closing_fields(record: dict) -> dict:
    """``torch`` (the version), ``threads``, ``device`` (the stamp ``record``'s) and ``date`` (now,
    UTC, to the second): the fields ``bench_entmax``, ``bench_entmax_alpha``, ``bench_heads`` and
    ``bench_gpt2`` have always written last in their records, before the stamp."""
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": record["device"],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def short_version(record: dict) -> str:
    """The 7-character SHA, ``-dirty`` appended for a dirty checkout (``unknown`` outside git): the
    ``code_version`` value ``bench_decoding``, ``bench_samplers`` and ``bench_temperature`` have
    always written."""
    sha = record.get("git_sha")
    return (sha or "unknown")[:7] + ("-dirty" if record.get("git_dirty") else "")
