"""What the benchmark scripts of ``benchmarks/`` share to time code and store what they measured
(not a benchmark): waiting for the device before the clock is read, one timed call, the load
average that says whether other processes shared the CPU, and the atomic write of a result file.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import torch


def synchronize(device: torch.device) -> None:
    """Wait until the work queued on a CUDA ``device`` is done (nothing to wait for on the CPU),
    so that the clock read next counts it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device):
    """``(fn(), seconds)``: one call of ``fn``, timed with :func:`time.perf_counter` between two
    :func:`synchronize` of ``device``."""
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return result, time.perf_counter() - start


def load_average(digits: int | None = None) -> float | None:
    """The 1-minute load average (rounded to ``digits`` when given); None where the system does
    not report one."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    return load if digits is None else round(load, digits)


def note_if_busy(load: float | None, device: torch.device) -> None:
    """Say so when the CPU timings ran with more processes wanting the CPU than it has cores."""
    if (
        load is not None
        and device.type == "cpu"
        and load > (os.cpu_count() or 1)
    ):
        print(
            f"note: load average {load:.1f} on {os.cpu_count()} cores; other processes disturb these timings"
        )


def machine_and_run(device: torch.device, code_version: str, argv, load: float | None) -> dict:
    """The fields ``machine`` (device, torch, threads, platform, processor and cores, the load
    average ``load``), ``code_version``, ``command`` (the command line, or ``repr(argv)`` when the
    script was called with ``argv``) and ``date_utc`` of a result record, in that order."""
    command = "python " + " ".join([Path(sys.argv[0]).name] + sys.argv[1:]) if argv is None else repr(argv)
    return {
        "machine": {"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
                    "platform": platform.platform(terse=True),
                    "processor": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                    "load_average_1min_at_end": load},
        "code_version": code_version,
        "command": command,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_json(path: str | os.PathLike, record: dict, indent: int = 2) -> None:
    """Write ``record`` as JSON to ``path`` (its folder created) atomically, with the library's
    :func:`nmst_lib.files.atomic_write_bytes`, and say where."""
    from nmst_lib.files import atomic_write_bytes

    path = Path(path)
    atomic_write_bytes(path, (json.dumps(record, indent=indent) + "\n").encode("utf-8"), mode=0o644)
    print(f"wrote {path}")
