"""Where the data comes from: the environment variables, the local data
folders, and the Hugging Face hub (a quick probe, and going offline).

Every loader of :mod:`nmst_lib.data` asks this module where to look: the
WikiText-2 loaders of Chapter 6 (06_wikitext), Chapter 8 (08_sparse),
Chapter 9 (09_temperature) and the classroom kit (:mod:`.corpus`), the raw
WikiText and the GPT-2 tokenizer of Chapter 7 (07_gpt2; :mod:`.raw_wikitext`,
:mod:`.gpt2_bpe`), and pretrained GPT-2 (:mod:`nmst_lib.models`).

* ``$NMST_DATA_DIR`` (:data:`DATA_DIR_ENV`) names a data root holding
  ``wikitext-2/`` (WikiText-2's split files) and ``gpt2-tokenizer/`` (GPT-2's
  ``vocab.json`` + ``merges.txt``): :func:`data_root`.
* ``$NMST_WIKITEXT_DIR`` (:data:`WIKITEXT_DIR_ENV`) names the WikiText-2
  folder itself and wins over the data root: :func:`wikitext_dir`.
* Without a local folder the loaders use the hub; :func:`hub_is_reachable`
  decides within seconds, and :func:`go_offline` stops ``datasets`` and
  ``huggingface_hub`` from retrying for minutes once it is known to be away.
"""

from __future__ import annotations

import importlib
import os
import socket
import threading
from pathlib import Path

from ..files import repo_root

__all__ = [
    "DATA_DIR_ENV",
    "TOKENIZER_SUBDIR",
    "WIKITEXT_DIR_ENV",
    "WIKITEXT_SUBDIR",
    "WikiTextUnavailable",
    "data_root",
    "go_offline",
    "gpt2_tokenizer_dir",
    "hub_is_reachable",
    "wikitext_dir",
]

DATA_DIR_ENV = "NMST_DATA_DIR"
"""Environment variable naming the data root: a folder holding
``wikitext-2/`` (WikiText-2 split files) and ``gpt2-tokenizer/`` (GPT-2's
``vocab.json`` + ``merges.txt``)."""
WIKITEXT_DIR_ENV = "NMST_WIKITEXT_DIR"
"""Environment variable naming the WikiText-2 folder itself (wins over
``$NMST_DATA_DIR/wikitext-2``)."""
WIKITEXT_SUBDIR, TOKENIZER_SUBDIR = "wikitext-2", "gpt2-tokenizer"
"""The sub-folders of the data root: WikiText-2, and GPT-2's tokenizer."""


class WikiTextUnavailable(OSError):
    """WikiText-2 could not be obtained from the requested source (offline
    hub, missing files). Raised by the loaders of the data of Chapters 6-9."""


def data_root() -> Path | None:
    """The data root named by ``$NMST_DATA_DIR`` (a folder holding
    ``wikitext-2/`` and ``gpt2-tokenizer/``), or None when the variable is
    unset or empty. Nothing is checked here: the loaders say what is
    missing. Used by the loaders of the data of Chapters 6-9."""
    env = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(env).expanduser() if env else None


def wikitext_dir(directory: str | os.PathLike | None = None) -> Path | None:
    """The local WikiText-2 folder to read, by precedence: ``directory``
    (argument) > ``$NMST_WIKITEXT_DIR`` > ``$NMST_DATA_DIR/wikitext-2``; None
    when none is given (then :func:`~nmst_lib.data.load_wikitext2` with
    ``source="auto"`` uses the Hugging Face hub). Chapter 6 (06_wikitext),
    "The data"."""
    if directory is not None:
        return Path(directory).expanduser()
    env = os.environ.get(WIKITEXT_DIR_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    root = data_root()
    return root / WIKITEXT_SUBDIR if root is not None else None


def gpt2_tokenizer_dir(
    directory: str | os.PathLike | None = None,
) -> Path | None:
    """The local GPT-2 tokenizer folder (``vocab.json`` + ``merges.txt``):
    ``directory`` if given, else ``$NMST_DATA_DIR/gpt2-tokenizer``, else None
    (then :func:`~nmst_lib.data.load_gpt2_tokenizer` asks the Hugging Face
    hub for ``"gpt2"``). Chapter 7 (07_gpt2)."""
    if directory is not None:
        return Path(directory).expanduser()
    root = data_root()
    return root / TOKENIZER_SUBDIR if root is not None else None


def _where_from(directory) -> str:
    """Which setting named the local folder (for error messages)."""
    if directory is not None:
        return "the directory argument"
    if os.environ.get(WIKITEXT_DIR_ENV, "").strip():
        return f"${WIKITEXT_DIR_ENV}"
    return f"${DATA_DIR_ENV}/{WIKITEXT_SUBDIR}"


_WIKITEXT_FOLDER_HOLDS = (
    "valid.txt and test.txt (optionally train.txt), or "
    "wiki.{valid,test,train}.tokens: one line per row, articles headed "
    "' = Title = '"
)


def _no_local_data_message(reason: str) -> str:
    """The error when WikiText-2 cannot be had: ``reason``, and which
    variable to set to a folder holding what."""
    return (
        f"WikiText-2 is not available: {reason}, and no local copy is "
        f"configured. Set {DATA_DIR_ENV} to a data folder whose "
        f"{WIKITEXT_SUBDIR}/ subfolder holds {_WIKITEXT_FOLDER_HOLDS} (the "
        f"same folder may hold {TOKENIZER_SUBDIR}/ with GPT-2's vocab.json "
        f"and merges.txt); or set {WIKITEXT_DIR_ENV} to the WikiText-2 folder "
        "itself; or pass directory=... (CLI: --data-dir)."
    )


def _hub_unreachable(timeout: float) -> str:
    """Why the hub was not used, for error messages."""
    return (
        "the Hugging Face hub is not reachable (probe of huggingface.co:443 "
        f"failed within {timeout:g} s, or HF_HUB_OFFLINE/HF_DATASETS_OFFLINE "
        "is set)"
    )


def _display_path(path: Path) -> str:
    """``path`` for provenance: relative to the repository root when the
    library runs from a checkout and the folder is inside it or beside it
    (e.g. ``../data/wikitext-2``), else as given."""
    root = repo_root()
    try:
        rel = os.path.relpath(path.resolve(), root)
    except ValueError:  # another drive on Windows
        return str(path)
    beside = not rel.startswith(os.pardir + os.sep + os.pardir)
    if (root / "pyproject.toml").is_file() and beside:
        return rel
    return str(path)


_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def _offline_flag_set() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in {"1", "true", "yes", "on"}
        for v in _OFFLINE_VARIABLES
    )


def hub_is_reachable(
    timeout: float = 2.0, host: str = "huggingface.co", port: int = 443
) -> bool:
    """Quick probe: can a TCP connection to the hub be opened within
    ``timeout`` seconds? Used before WikiText-2 (Chapters 6-9) and GPT-2 (Chapter 7) are loaded.

    ``False`` at once when ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` is set.
    Name resolution runs in a daemon thread so that a hanging DNS lookup
    cannot block longer than ``timeout``.
    """
    if _offline_flag_set():
        return False
    outcome: list[bool] = []

    def probe():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(True)
        except OSError:
            outcome.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(outcome and outcome[0])


def go_offline() -> None:
    """Tell ``huggingface_hub``/``datasets`` not to retry the network in this
    process: sets ``HF_HUB_OFFLINE`` and ``HF_DATASETS_OFFLINE``, and the
    flags those libraries copied from them at import time (a loader calls it
    when :func:`hub_is_reachable` said no). Used when WikiText-2 (Chapters 6-9) and GPT-2
    (Chapter 7) are loaded."""
    for name in _OFFLINE_VARIABLES:
        os.environ[name] = "1"
    _set_flags("datasets.config", _OFFLINE_VARIABLES)
    _set_flags("huggingface_hub.constants", ("HF_HUB_OFFLINE",))


def _set_flags(module_name: str, names: tuple[str, ...]) -> None:
    """Set the offline flags ``names`` of an imported library module to
    True; a library that is missing or broken is left alone (the variables
    still apply when it is imported later)."""
    try:
        module = importlib.import_module(module_name)
    except Exception:  # noqa: BLE001 - missing or changed: nothing to set
        return
    for name in names:
        if hasattr(module, name):
            setattr(module, name, True)
