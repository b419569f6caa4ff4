"""Run one student's code with limits, and (where the machine allows) inside a bubblewrap sandbox.

Grading executes code written by people the instructor does not know. Two modes:

* **sandbox** (the default): the command runs under Debian's ``bwrap`` (bubblewrap) in new user,
  mount, PID, network, IPC, UTS and cgroup namespaces. It sees a read-only view of only what grading
  needs (the system's ``/usr``, the Python installation, ``nmst_lib`` and the data it reads, the
  autograder zip), one writable scratch folder (``/grading``, also its ``/tmp`` and ``$HOME``), two
  small RAM-backed folders (``/dev/shm``, :data:`SHM_BYTES`; ``/run``, :data:`RUN_BYTES`), a
  read-only root (bwrap's root is a tmpfs, RAM, writable unless remounted), an
  environment built from scratch (none of the grader's variables except a short list of harmless
  ones), and no network (its own loopback only). ``--die-with-parent`` and the PID namespace mean
  that killing the sandbox kills every process the submission started.
* **trusted**: no isolation (the code runs as the grading user, with the user's files, environment
  and network, as ``otter run`` does; only ``$HOME`` and ``$TMPDIR`` point into the scratch folder,
  which keeps caches tidy and protects nothing); only the limits below apply. For code the instructor trusts,
  or machines without a working ``bwrap``.

Both modes apply a wall-clock timeout (the whole process group, and in the sandbox the whole PID
namespace, is killed with SIGKILL) and, inside the command, resource limits: the size of the data
segment of each process (``RLIMIT_DATA``: heap and anonymous memory, what a runaway allocation
grows; per process, so several processes can each take that much) and of any file written
(``RLIMIT_FSIZE``). The sandbox also limits the processes and threads (``RLIMIT_NPROC``), except
where the grading user is root, whose processes the kernel exempts; trusted mode does not (the
limit would count all of the user's processes). The instructor guide (book/instructors.md, "Grading safely") says
what each mode protects against and what it does not.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["Limits", "RunResult", "SandboxUnavailable", "sandbox_problem", "run_limited", "MODES",
           "PASSED_ENV", "python_paths", "SHM_BYTES", "RUN_BYTES"]

#: The grading modes: isolated in bubblewrap, or the grading user's own rights (limits only).
MODES = ("sandbox", "trusted")

#: Variables passed from the grader into the sandbox when set: where the data is, thread counts.
PASSED_ENV = ("NMST_DATA_DIR", "NMST_WIKITEXT_DIR", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TZ")

# Files of /etc that programs need to start (dynamic linker, alternatives' symlinks, fonts, time
# zone); nothing else of /etc (passwd and group are written fresh: no names of the machine's users).
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "fonts", "localtime", "mime.types",
        "hosts", "nsswitch.conf", "ssl")
_TOP = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")

#: Sizes of the sandbox's RAM-backed folders (tmpfs): ``/dev/shm`` and ``/run``.
SHM_BYTES = 256 * 2**20
RUN_BYTES = 16 * 2**20

# Applied inside the command, before it starts: python LIMITS DATA_BYTES FSIZE_BYTES NPROC -- argv...
# (NPROC 0: no limit on processes; trusted mode, where it would count all of the user's processes)
_SET_LIMITS = ("import os, resource, sys\n"
               "data, fsize, nproc = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])\n"
               "resource.setrlimit(resource.RLIMIT_DATA, (data, data))\n"
               "resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))\n"
               "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
               "if nproc:\n"
               "    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))\n"
               "os.execv(sys.argv[5], sys.argv[5:])\n")


class SandboxUnavailable(RuntimeError):
    """No working bubblewrap on this machine: grading refuses unless the code is declared trusted."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-submission limits: wall-clock seconds, data-segment bytes (memory) of each process, bytes
    per written file, and processes and threads together (``RLIMIT_NPROC``; sandbox mode only)."""

    timeout_s: float = 900.0
    memory_bytes: int = 6 * 2**30
    file_bytes: int = 2**30
    processes: int = 1024

    def __post_init__(self):
        for name in ("timeout_s", "memory_bytes", "file_bytes", "processes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")


@dataclasses.dataclass
class RunResult:
    """What a limited run did: exit code (None when killed at the timeout), output tails, seconds."""

    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    seconds: float


@functools.lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    """None when bubblewrap works here; else why not (missing ``bwrap``, or namespaces refused).

    The probe runs ``true`` with the same namespace options that grading uses, so a kernel or
    container that forbids user or network namespaces is found before any submission runs.
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (`bwrap`) is not installed (Debian/Ubuntu: `apt-get install bubblewrap`)"
    cmd = [bwrap, *_system_binds(), "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent",
           "--new-session", "--clearenv", "true"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bwrap could not be run: {err}"
    if proc.returncode != 0:
        return f"bwrap cannot create its namespaces here: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}"
    return None


def _system_binds() -> list[str]:
    """Read-only /usr, the merged-/usr symlinks (or folders) /bin, /lib, ..., and a few /etc files."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in _TOP:
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in _ETC:
        if (Path("/etc") / name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def _read_only_binds(paths) -> list[str]:
    args, seen = [], set()
    for path in paths:
        real = Path(path).resolve()
        if real.exists() and real not in seen and not str(real).startswith("/usr/"):
            seen.add(real)
            args += ["--ro-bind", str(real), str(real)]
            if Path(path).absolute() != real:  # also where it is named (a venv's symlinks, a linked folder)
                args += ["--ro-bind", str(real), str(Path(path).absolute())]
    return args


def python_paths() -> list[Path]:
    """The Python installation the grader runs on: the venv, its base installation, their site-packages."""
    import site

    paths = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent]
    return paths + [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]


def _sandbox_argv(argv: list[str], scratch: Path, read_only, env: dict, read_only_at=()) -> list[str]:
    """The bwrap command line running ``argv`` with ``scratch`` writable at /grading, all else as above.

    ``read_only_at``: ``(host path, path inside)`` pairs bound read-only after the scratch folder, so
    they can lie inside it (``/grading/...``) and still not be writable there.
    """
    etc = scratch / ".etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text("student:x:1000:1000:student:/grading/home:/bin/sh\n")
    (etc / "group").write_text("student:x:1000:\n")
    for sub in ("home", "tmp"):
        (scratch / sub).mkdir(exist_ok=True)
    # Order matters: a later mount hides what an earlier one put at or under its path. So the
    # writable /grading and /tmp come first, then the read-only paths (a checkout, venv or data
    # folder under /tmp stays visible), then the small RAM-backed folders, and last the root
    # itself becomes read-only (bwrap's root is a tmpfs: writable, and counted in RAM).
    cmd = [shutil.which("bwrap") or "bwrap", "--bind", str(scratch), "/grading", "--bind", str(scratch / "tmp"), "/tmp",
           *_system_binds(),
           "--ro-bind", str(etc / "passwd"), "/etc/passwd", "--ro-bind", str(etc / "group"), "/etc/group",
           *_read_only_binds(read_only),
           *[arg for host, inside in read_only_at for arg in ("--ro-bind", str(Path(host).resolve()), str(inside))],
           "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--proc", "/proc",
           "--size", str(RUN_BYTES), "--tmpfs", "/run", "--remount-ro", "/",
           "--unshare-all", "--uid", "1000", "--gid", "1000", "--hostname", "grading",
           "--die-with-parent", "--new-session", "--clearenv", "--chdir", "/grading/work"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return [*cmd, *argv]


def _sandbox_env() -> dict:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": "/grading/home",
           "TMPDIR": "/tmp", "USER": "student", "LANG": "C.UTF-8", "PYTHONNOUSERSITE": "1",
           "PYDEVD_DISABLE_FILE_VALIDATION": "1", "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.update({k: os.environ[k] for k in PASSED_ENV if os.environ.get(k)})
    return env


def run_limited(argv: list[str], scratch: str | Path, *, mode: str = "sandbox", limits: Limits = Limits(),
                read_only=(), read_only_at=()) -> RunResult:
    """Run ``argv`` in ``scratch/work`` under ``limits``, sandboxed (``mode="sandbox"``) or not.

    ``read_only``: extra paths the sandbox may read (besides the system and Python installation).
    ``read_only_at``: ``(host path, path inside the sandbox)`` pairs mounted read-only, for example
    an autograder's tests at ``/grading/...``, where the command can read them but not change,
    move or delete them (sandbox mode only: trusted mode has no mounts and refuses them).
    Raises :class:`SandboxUnavailable` in sandbox mode when bubblewrap does not work here. At the
    timeout the whole process group (and in the sandbox its PID namespace) gets SIGKILL; the result
    then says ``timed_out``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    read_only_at = [(Path(host), str(inside)) for host, inside in read_only_at]
    if mode != "sandbox" and read_only_at:
        raise ValueError("read_only_at needs mode='sandbox': trusted mode runs without mounts, so nothing in "
                         "its scratch folder can be made read-only")
    for host, inside in read_only_at:
        if not host.exists() or not inside.startswith("/"):
            raise ValueError(f"read_only_at takes (an existing host path, an absolute path inside), got "
                             f"({str(host)!r}, {inside!r})")
    scratch = Path(scratch).resolve()
    (scratch / "work").mkdir(parents=True, exist_ok=True)
    processes = int(limits.processes) if mode == "sandbox" else 0
    limited = [sys.executable, "-c", _SET_LIMITS, str(int(limits.memory_bytes)), str(int(limits.file_bytes)),
               str(processes), "--", *argv]
    if mode == "sandbox":
        problem = sandbox_problem()
        if problem is not None:
            raise SandboxUnavailable(problem)
        env = _sandbox_env()
        cmd, cwd = _sandbox_argv(limited, scratch, [*python_paths(), *read_only], env, read_only_at), scratch
        env_outer = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    else:  # the grader's environment, but HOME and TMPDIR in the scratch folder (caches, otter's files)
        for sub in ("home", "tmp"):
            (scratch / sub).mkdir(exist_ok=True)
        cmd, cwd = limited, scratch / "work"
        env_outer = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1", HOME=str(scratch / "home"),
                         TMPDIR=str(scratch / "tmp"))
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env_outer, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=limits.timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:  # Ctrl-C while waiting: take the submission down with us
            _kill_group(proc)
            raise
        _kill_group(proc)  # also whatever the command left behind in its group
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = (f.read()[-20000:].decode("utf-8", "replace") for f in (out, err))
    return RunResult(None if timed_out else proc.returncode, timed_out, stdout, stderr, seconds)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (started in its own session) and reap ``proc``."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
