"""Files on disk: where the repository and the user cache are, and writing
files atomically.

The bottom layer of the library: it imports nothing of ``nmst_lib``, so every
other module may use it. The data loaders (:mod:`nmst_lib.data`, e.g. the
GPT-2 BPE cache of Chapter 7, 07_gpt2), the models (a GPT-2 folder's
``nmst_head.json``) and the experiments (result files, checkpoints; Chapters
6-9) write through :func:`atomic_write_bytes`, so a reader never sees half a
file; :func:`repo_root`, :func:`is_source_checkout` and
:func:`user_cache_dir` decide where caches, checkpoints and new results go
(in a git clone: folders of the repository; in an installed wheel, e.g.
Colab: the user cache).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

__all__ = [
    "atomic_write_bytes",
    "is_source_checkout",
    "repo_root",
    "user_cache_dir",
    "write_json_atomic",
]


def repo_root() -> Path:
    """The project's root directory (the folder holding ``nmst_lib/``). Used to find the data,
    checkpoints and results of Chapters 6-9 and the commit every chapter's first cell prints."""
    return Path(__file__).resolve().parents[1]


def is_source_checkout() -> bool:
    """True when ``nmst_lib`` is imported from a git clone of the book's
    repository (an editable install or the working directory):
    ``pyproject.toml`` and ``.git`` sit beside the ``nmst_lib/`` folder.
    False for an installed wheel (site-packages has neither). It decides where Chapters 6-9 write
    new results and whether every chapter's first cell (:func:`nmst_lib.notebook.code_words`) names
    a commit."""
    root = repo_root()
    return (root / "pyproject.toml").is_file() and (root / ".git").exists()


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/nmst_lib`` (an absolute ``XDG_CACHE_HOME`` only, as
    the XDG base directory specification asks), else ``~/.cache/nmst_lib``. Where the runs of
    Chapters 6-9 keep results, checkpoints and tokenizers outside a source checkout."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "nmst_lib"


def atomic_write_bytes(path: str | os.PathLike, payload: bytes, mode: int | None = None) -> None:
    """Write ``payload`` to ``path`` atomically: a temporary file in the same
    directory, ``fsync``, then ``os.replace`` (a reader sees the old file or
    the new one, never half). ``mode``: the file's permissions (e.g. ``0o644``
    for a table others read); default the temporary file's, owner-only. Used for the checkpoints,
    caches and result files behind Chapters 6-9."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
    )
    try:
        if mode is not None:
            os.fchmod(fd, mode)
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
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (a no-op where folders cannot
    be opened, e.g. Windows)."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:  # pragma: no cover - e.g. Windows
        pass


def write_json_atomic(path: str | os.PathLike, data: dict) -> None:
    """Atomically write ``data`` as indented JSON (NaN/inf are rejected: not
    valid JSON). Writes the result files of Chapters 6-9."""
    text = json.dumps(data, indent=1, sort_keys=False, allow_nan=False) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))
