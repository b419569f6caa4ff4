"""The results store: provenance-stamped JSON under ``data/results/``, written atomically, read
back with a clear CURRENT / STALE / MISSING status (Chapter 6, 06_wikitext; DESIGN.md
"Results, profiles and honesty").

A result is CURRENT only when its stored config hash equals the hash of the config the code
asks for now (:func:`nmst_lib.experiments.config.config_hash`). A file whose hash differs
(the code's profile changed, or the schema version was bumped) is STALE: it is returned so a
page can say so, never as if it were current.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data import repo_root
from .config import ExperimentConfig, config_hash, validate_config

__all__ = [
    "RESULT_SCHEMA",
    "CURRENT",
    "STALE",
    "MISSING",
    "StoredResult",
    "default_results_dir",
    "result_path",
    "atomic_write_bytes",
    "write_json_atomic",
    "save_result",
    "load_result",
    "code_version",
    "environment_info",
]

RESULT_SCHEMA = "nmst_lib.wikitext_result/1"
CURRENT, STALE, MISSING = "current", "stale", "missing"


def default_results_dir() -> Path:
    """``nmst_lib/published_results`` (committed, small JSON files shipped inside the package)."""
    return Path(__file__).resolve().parents[1] / "published_results"


def result_path(config: ExperimentConfig, results_dir: str | os.PathLike | None = None) -> Path:
    """Where the result of ``config`` lives: ``<results_dir>/wikitext2/<key>.json``."""
    base = Path(results_dir) if results_dir is not None else default_results_dir()
    return base / "wikitext2" / f"{config.key}.json"


def atomic_write_bytes(path: str | os.PathLike, payload: bytes) -> None:
    """Write ``payload`` to ``path`` atomically: a temporary file in the same directory,
    ``fsync``, then ``os.replace`` (a reader sees the old file or the new one, never half)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:  # pragma: no cover - e.g. Windows
        pass


def write_json_atomic(path: str | os.PathLike, data: dict) -> None:
    """Atomically write ``data`` as indented JSON (NaN/inf are rejected: not valid JSON)."""
    text = json.dumps(data, indent=1, sort_keys=False, allow_nan=False) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def _git(*args) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=repo_root(), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_version() -> dict:
    """The code that produced a result: git SHA of HEAD (or None outside a git checkout) and
    whether the library (``nmst_lib/``, ``pyproject.toml``) has uncommitted changes."""
    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--", "nmst_lib", "pyproject.toml")
    import nmst_lib

    return {
        "git_sha": sha,
        "git_dirty": None if status is None else bool(status),
        "nmst_lib": getattr(nmst_lib, "__version__", None),
    }


def environment_info(device: torch.device | str | None = None) -> dict:
    """Python, torch, platform and device description for provenance."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(terse=True),
        "device": str(device),
        "threads": torch.get_num_threads(),
    }
    if device.type == "cuda" and torch.cuda.is_available():
        info["device_name"] = torch.cuda.get_device_name(device)
    else:
        info["device_name"] = platform.processor() or platform.machine()
    return info


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def save_result(result: dict, config: ExperimentConfig, results_dir=None) -> Path:
    """Stamp ``result`` with the config (dict + hash + key), then write it atomically to
    :func:`result_path`. Returns the path."""
    config = validate_config(config)
    stamped = {"schema": RESULT_SCHEMA, "key": config.key, "config_hash": config_hash(config),
               "config": config.to_dict(), "profile": config.profile}
    stamped.update({k: v for k, v in result.items() if k not in stamped})
    path = result_path(config, results_dir)
    write_json_atomic(path, stamped)
    return path


@dataclass
class StoredResult:
    """What :func:`load_result` found: ``status`` is ``"current"``, ``"stale"`` or
    ``"missing"``; ``data`` the JSON (None when missing); ``message`` says why."""

    status: str
    path: Path
    data: dict | None
    message: str

    @property
    def is_current(self) -> bool:
        """True only for status CURRENT."""
        return self.status == CURRENT

    def __repr__(self) -> str:
        return f"StoredResult({self.status.upper()}: {self.path.name}; {self.message})"


def _config_diff(stored: dict, current: dict) -> list[str]:
    keys = sorted(set(stored) | set(current))
    return [f"{k}: stored {stored.get(k, '<absent>')!r} != current {current.get(k, '<absent>')!r}"
            for k in keys if stored.get(k, "<absent>") != current.get(k, "<absent>")]


def load_result(config: ExperimentConfig, results_dir=None) -> StoredResult:
    """The stored result for ``config`` with its status (Chapter 6, 06_wikitext).

    CURRENT: the file's config hash equals :func:`config_hash` of ``config``. STALE: the file
    exists but was made by a different config or schema (the message lists the fields that
    differ). MISSING: no file. An unreadable file raises ``ValueError`` naming it.
    """
    config = validate_config(config)
    path = result_path(config, results_dir)
    if not path.is_file():
        return StoredResult(MISSING, path, None, f"no result at {path}; run it (load_or_run or the CLI)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"result file {path} is unreadable ({err}); delete it and re-run the experiment") from err
    want = config_hash(config)
    stored_hash = data.get("config_hash")
    if data.get("schema") != RESULT_SCHEMA:
        return StoredResult(STALE, path, data, f"STALE: schema {data.get('schema')!r}, code expects {RESULT_SCHEMA!r}")
    if stored_hash != want:
        diff = _config_diff(data.get("config", {}), config.to_dict())
        why = "; ".join(diff) if diff else "same fields, different config schema version"
        return StoredResult(STALE, path, data, f"STALE: config hash {stored_hash} != current {want} ({why})")
    return StoredResult(CURRENT, path, data, f"current (config hash {want})")


def command_line() -> str:
    """The command that is running, for provenance (``python -m nmst_lib ...`` under the CLI)."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(("__main__.py", "nmst_lib")):
        return " ".join(["python -m nmst_lib", *argv[1:]])
    return " ".join(argv) if argv else "python"
