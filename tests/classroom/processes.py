"""Processes seen from outside a sandbox: the host's /proc (helpers of the grading tests)."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line or name contains ``marker``, read from /proc."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            comm = (proc / "comm").read_text()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (marker in cmdline or marker in comm) and state != "Z":
            found.append(int(proc.name))
    return found


@contextlib.contextmanager
def watching(marker: str, every: float = 0.1):
    """The ids of the processes with ``marker`` (:func:`processes_with`) seen while the block runs:
    a set that a background thread fills, reading /proc every ``every`` seconds."""
    seen, done = set(), threading.Event()

    def watch():
        while not done.is_set():
            seen.update(processes_with(marker))
            time.sleep(every)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        done.set()
        watcher.join()


def wait_until_gone(marker: str, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return processes_with(marker)
