"""The limits and the bubblewrap sandbox of nmst_lib.classroom.sandbox, on small Python commands.

Each check is made from outside the sandbox (the host's /proc, the host's files, a socket the test
listens on); the same command in trusted mode shows that the check can see the leak it guards against.
"""

from __future__ import annotations

import socket
import sys
import time
import uuid
from pathlib import Path

import pytest

from nmst_lib.classroom.sandbox import (
    Limits,
    SandboxUnavailable,
    run_limited,
    sandbox_problem,
)
from processes import processes_with, wait_until_gone, watching


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_bad_limits_and_modes_are_refused_with_what_is_allowed(tmp_path):
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        Limits(timeout_s=0)
    with pytest.raises(ValueError, match="memory_bytes"):
        Limits(memory_bytes=-1)
    with pytest.raises(ValueError, match="sandbox, trusted"):
        run_limited(python("pass"), tmp_path, mode="docker")


def test_without_bwrap_the_sandbox_is_unavailable_and_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on this PATH
    sandbox_problem.cache_clear()
    try:
        assert "apt-get install bubblewrap" in sandbox_problem()
        with pytest.raises(SandboxUnavailable, match="not installed"):
            run_limited(python("pass"), tmp_path, mode="sandbox")
    finally:
        monkeypatch.undo()
        sandbox_problem.cache_clear()


@pytest.mark.parametrize("mode", ["trusted", "sandbox"])
def test_a_runaway_is_stopped_at_its_timeout_with_every_process_it_started(tmp_path, mode):
    if mode == "sandbox" and sandbox_problem() is not None:
        pytest.skip(f"bubblewrap does not work here: {sandbox_problem()}")
    marker = f"runaway-{uuid.uuid4().hex[:12]}"
    # the child stays in the process group in trusted mode; in the sandbox it even leaves the session
    escape = "True" if mode == "sandbox" else "False"
    code = (f"import subprocess, sys\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)', '{marker}'], "
            f"start_new_session={escape})\n"
            "while True:\n    pass\n")
    start = time.monotonic()
    with watching(marker) as seen:
        result = run_limited(python(code), tmp_path, mode=mode, limits=Limits(timeout_s=4))
    assert result.timed_out and result.returncode is None
    assert 4 <= time.monotonic() - start < 30
    assert seen, "the runaway's child never appeared in /proc: the check below would prove nothing"
    assert wait_until_gone(marker) == [], f"processes left after the timeout: {processes_with(marker)}"


@pytest.mark.parametrize("mode", ["trusted", "sandbox"])
def test_the_memory_limit_stops_an_allocation_past_it(tmp_path, mode):
    if mode == "sandbox" and sandbox_problem() is not None:
        pytest.skip(f"bubblewrap does not work here: {sandbox_problem()}")
    code = "x = bytearray(2 * 2**30)\nprint('allocated', len(x))"
    limited = run_limited(python(code), tmp_path, mode=mode, limits=Limits(timeout_s=60, memory_bytes=2**30))
    assert limited.returncode != 0 and "MemoryError" in limited.stderr, limited
    roomy = run_limited(python("x = bytearray(2**28)\nprint('allocated', len(x))"), tmp_path, mode=mode,
                        limits=Limits(timeout_s=60, memory_bytes=2**30))
    assert roomy.returncode == 0 and "allocated 268435456" in roomy.stdout, roomy


def _escape_attempts(outside: Path, secret: Path, port: int, env_name: str) -> str:
    """Python that tries to write outside, read a file and a variable, and connect; prints what it got."""
    return (
        "import os, socket\n"
        f"try:\n    open({str(outside)!r}, 'w').write('escaped')\nexcept OSError as e:\n    print('write:', e)\n"
        f"try:\n    print('secret file:', open({str(secret)!r}).read())\nexcept OSError as e:\n    print('read:', e)\n"
        f"print('variable:', os.environ.get({env_name!r}))\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3).sendall(b'hello')\n"
        "except OSError as e:\n    print('connect:', e)\n")


@pytest.mark.parametrize("mode", ["trusted", "sandbox"])
def test_the_sandbox_blocks_writes_reads_variables_and_connections_that_trusted_mode_lets_through(
        tmp_path, monkeypatch, mode):
    if mode == "sandbox" and sandbox_problem() is not None:
        pytest.skip(f"bubblewrap does not work here: {sandbox_problem()}")
    token = uuid.uuid4().hex
    instructor = tmp_path / "instructor"
    instructor.mkdir()
    secret = instructor / "secret.txt"
    secret.write_text(f"file-{token}")
    outside = instructor / "escaped.txt"
    monkeypatch.setenv("NMST_TEST_SECRET", f"env-{token}")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        code = _escape_attempts(outside, secret, server.getsockname()[1], "NMST_TEST_SECRET")
        result = run_limited(python(code), tmp_path / "scratch", mode=mode, limits=Limits(timeout_s=60))
        try:
            server.accept()[0].close()
            connected = True
        except socket.timeout:
            connected = False
    assert result.returncode == 0, result.stderr
    leaks = {"wrote outside its folder": outside.exists(), "read the instructor's file": f"file-{token}" in result.stdout,
             "read the grader's variable": f"env-{token}" in result.stdout, "connected to 127.0.0.1": connected}
    if mode == "trusted":  # no isolation: every attempt succeeds, so the checks can see a leak
        assert all(leaks.values()), leaks
    else:
        assert not any(leaks.values()), leaks
        assert "Read-only file system" in result.stdout or "No such file" in result.stdout, result.stdout


def test_in_the_sandbox_a_process_that_detaches_does_not_outlive_a_normal_exit(tmp_path):
    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap does not work here: {sandbox_problem()}")
    marker = f"detached-{uuid.uuid4().hex[:12]}"
    code = (f"import subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)', '{marker}'], "
            "start_new_session=True)\n"
            "time.sleep(1)\n")
    result = run_limited(python(code), tmp_path, mode="sandbox", limits=Limits(timeout_s=60))
    assert result.returncode == 0 and not result.timed_out, result
    assert wait_until_gone(marker) == [], f"left running: {processes_with(marker)}"


def test_a_folder_mounted_read_only_inside_the_scratch_folder_cannot_be_changed(tmp_path):
    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap does not work here: {sandbox_problem()}")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "q1.py").write_text("points = 1\n")
    scratch = tmp_path / "scratch"
    (scratch / "ag" / "tests").mkdir(parents=True)
    code = ("import os\n"
            "print('read:', open('/grading/ag/tests/q1.py').read().strip())\n"
            "for attempt in (lambda: open('/grading/ag/tests/q1.py', 'w'), lambda: os.remove('/grading/ag/tests/q1.py'),\n"
            "                lambda: os.rename('/grading/ag/tests', '/grading/ag/gone')):\n"
            "    try:\n        attempt()\n        print('changed')\n"
            "    except OSError as e:\n        print('refused:', e.strerror)\n")
    result = run_limited(python(code), scratch, limits=Limits(timeout_s=60),
                         read_only_at=[(tests, "/grading/ag/tests")])
    assert result.returncode == 0, result.stderr
    assert "read: points = 1" in result.stdout and "changed" not in result.stdout, result.stdout
    assert result.stdout.count("refused:") == 3 and (tests / "q1.py").read_text() == "points = 1\n"
    with pytest.raises(ValueError, match="read_only_at needs mode='sandbox'"):
        run_limited(python("pass"), scratch, mode="trusted", read_only_at=[(tests, "/grading/ag/tests")])
    with pytest.raises(ValueError, match="an existing host path"):
        run_limited(python("pass"), scratch, read_only_at=[(tmp_path / "missing", "/grading/x")])


def test_read_only_paths_under_tmp_stay_visible_in_the_sandbox(tmp_path):
    # the sandbox's own /tmp is mounted first: a checkout, venv or data folder under the host's
    # /tmp (here pytest's tmp_path) is mounted after it and not hidden by it
    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap does not work here: {sandbox_problem()}")
    import tempfile

    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        data = Path(folder) / "data"
        data.mkdir()
        (data / "corpus.txt").write_text("tokens")
        code = f"print(open({str(data / 'corpus.txt')!r}).read()); open('/tmp/mine', 'w').write('x')"
        result = run_limited(python(code), tmp_path / "scratch", limits=Limits(timeout_s=60), read_only=[data])
    assert result.returncode == 0 and result.stdout.strip() == "tokens", result


def test_only_the_scratch_folder_and_small_ram_folders_are_writable_in_the_sandbox(tmp_path):
    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap does not work here: {sandbox_problem()}")
    from nmst_lib.classroom.sandbox import SHM_BYTES

    code = ("import os\n"
            "for path in ['/x', '/root/x', '/work/x', '/dev/x', '/etc/x', '/usr/x', '/grading/x', '/tmp/x']:\n"
            "    try:\n        open(path, 'w').write('x')\n        print('writable', path)\n"
            "    except OSError as e:\n        print('refused', path)\n"
            "try:\n    with open('/dev/shm/big', 'wb') as f:\n"
            f"        for i in range({SHM_BYTES // 2**20 + 8}):\n            f.write(bytes(2**20))\n"
            "    print('shm unbounded')\n"
            "except OSError as e:\n    print('shm full:', e.strerror)\n")
    result = run_limited(python(code), tmp_path / "scratch", limits=Limits(timeout_s=60))
    assert result.returncode == 0, result.stderr
    writable = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("writable")}
    assert writable == {"/grading/x", "/tmp/x"}, result.stdout
    assert "shm full: No space left on device" in result.stdout, result.stdout


def test_limits_refuse_a_process_count_that_is_not_positive():
    with pytest.raises(ValueError, match="processes must be a positive number"):
        Limits(processes=0)
