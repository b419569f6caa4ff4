"""The results store of every experiment family (Chapters 6-9; the families are described in
:mod:`nmst_lib.experiments.family`): provenance-stamped JSON files, written atomically by ONE
writer (:func:`write_result`), read back by ONE reader (:func:`read_result_file`) with a clear
CURRENT / STALE / MISSING status, turned into table records by ONE builder
(:func:`current_records`), stamped by ONE provenance builder (:func:`training_provenance`)
(ARCHITECTURE.md "Results, profiles and honesty").

Where results live:

* **Published results** (:func:`published_results_dir`): the committed results the website
  shows (the ``cpu`` profile) are *package data*, ``nmst_lib/published_results/wikitext2/``
  (Chapter 6's RNNs/LSTMs), ``.../gpt2/`` (Chapter 7, 07_gpt2), ``.../sparse/`` (Chapter 8) and
  ``.../temperature/`` (Chapter 9, 09_temperature),
  read with ``importlib.resources``. They travel inside the wheel, so a ``pip install``
  or a Colab notebook that installs the library from git has them without the repository.
* **New runs** are written to :func:`default_results_dir`: ``$NMST_RESULTS_DIR`` if set;
  else, in a source checkout (an editable install inside a git clone, which is how the
  maintainers regenerate the committed files), the published folder itself; else a user
  cache folder (``$XDG_CACHE_HOME/nmst_lib/results``, default ``~/.cache/nmst_lib/results``),
  since an installed package's folder is not the place to write.
* :func:`load_result` without a directory looks in the write directory first and then in
  the published results; the :class:`StoredResult` says which (``source``).

A result is CURRENT only when its stored config hash equals the hash of the config the code
asks for now (:func:`nmst_lib.experiments.config.config_hash`). A file whose hash differs
(the code's profile changed, or the schema version was bumped) is STALE: it is returned so a
page can say so, never as if it were current.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.resources
import json
import numbers
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..files import (  # re-exported: their importers keep working
    atomic_write_bytes,
    is_source_checkout,
    repo_root,
    user_cache_dir,
    write_json_atomic,
)
from .config import ExperimentConfig, config_hash, validate_config

__all__ = [
    "mean_over_seeds",
    "utc_now",
    "command_line",
    "RESULT_SCHEMA",
    "CURRENT",
    "STALE",
    "MISSING",
    "StoredResult",
    "ENV_RESULTS_DIR",
    "PUBLISHED",
    "LOCAL",
    "published_results_dir",
    "is_source_checkout",
    "user_cache_dir",
    "default_results_dir",
    "RNN_FOLDER",
    "GPT2_FOLDER",
    "TEMPERATURE_FOLDER",
    "result_folder",
    "result_path",
    "read_result_file",
    "write_result",
    "candidate_paths",
    "load_first_current",
    "current_records",
    "training_provenance",
    "training_seeds",
    "atomic_write_bytes",
    "write_json_atomic",
    "save_result",
    "ALLOW_DIRTY_ENV",
    "DirtyResultError",
    "refuse_dirty_publication",
    "load_result",
    "code_version",
    "environment_info",
]

RESULT_SCHEMA = "nmst_lib.wikitext_result/1"
CURRENT, STALE, MISSING = "current", "stale", "missing"

ENV_RESULTS_DIR = "NMST_RESULTS_DIR"
"""Environment variable: where new results are written (and looked for first)."""
PUBLISHED, LOCAL = "published", "local"
"""Values of :attr:`StoredResult.source`: the package's published results, or any other folder."""
_PUBLISHED_FOLDER = "published_results"


@functools.lru_cache(maxsize=None)
def published_results_dir() -> Path:
    """The results committed with the library: ``nmst_lib/published_results`` as package data
    (``importlib.resources``), shipped in the wheel. Holds ``wikitext2/<key>.json`` for the
    ``cpu`` profile that Chapter 6 (06_wikitext) and the website show, ``gpt2/<key>.json`` for
    Chapter 7 (07_gpt2), ``sparse/<key>.json`` for Chapter 8 (08_sparse) and
    ``temperature/<key>.json`` for Chapter 9 (09_temperature). Read-only in an
    installed package; a source checkout writes its regenerated results here."""
    root = importlib.resources.files("nmst_lib").joinpath(_PUBLISHED_FOLDER)
    if not isinstance(root, Path):  # e.g. imported from a zip archive: no folder to point at
        raise RuntimeError(
            f"nmst_lib is installed as {type(root).__name__} ({root}), not as files on disk, so its published "
            f"results have no folder; install it as a regular (unzipped) package, e.g. with pip")
    return root


def default_results_dir() -> Path:
    """Where new results are *written*: ``$NMST_RESULTS_DIR`` if set (and not empty); else the
    published folder (:func:`published_results_dir`) in a source checkout
    (:func:`is_source_checkout`: how the maintainers regenerate the committed results); else
    ``<user cache>/results`` (:func:`user_cache_dir`), e.g. in Colab or after ``pip install``. Used
    by the runs of Chapters 6-9."""
    env = os.environ.get(ENV_RESULTS_DIR, "")
    if env:
        return Path(env).expanduser()
    if is_source_checkout():
        return published_results_dir()
    return user_cache_dir() / "results"


def _check_dir(results_dir) -> Path | None:
    if results_dir is None:
        return None
    if not isinstance(results_dir, (str, os.PathLike)) or isinstance(results_dir, bytes) or results_dir == "":
        raise TypeError(f"results_dir must be a folder path (str or os.PathLike) or None for the default, "
                        f"got {results_dir!r}")
    return Path(results_dir)


RNN_FOLDER = "wikitext2"
"""Sub-folder of a results directory for the RNN/LSTM results of Chapter 6 (06_wikitext)."""
GPT2_FOLDER = "gpt2"
"""Sub-folder of a results directory for the GPT-2 results of Chapter 7 (07_gpt2)."""
TEMPERATURE_FOLDER = "temperature"
"""Sub-folder of a results directory for the contextual-temperature results of Chapter 9
(09_temperature; Contextual Temperature (2020)), written by ``nmst_lib.experiments.temperature_suite``
(one JSON per model, its own schema). A contextual-temperature config run through Chapter 6's
``run``/``decode`` commands still goes to :data:`RNN_FOLDER`, under its own key (``...-ct-...``)."""


def result_folder(config: ExperimentConfig) -> str:
    """The sub-folder of a results directory that holds ``config``'s result: :data:`GPT2_FOLDER`
    (``gpt2``) for arch ``"gpt2"`` (Chapter 7, 07_gpt2; Choi, Cho, Lee (2023) Sec. 4.2), else
    :data:`RNN_FOLDER` (``wikitext2``, Chapter 6's RNN/LSTM results, where they have always been)."""
    if not isinstance(config, ExperimentConfig):
        raise TypeError(f"expected an ExperimentConfig, got {type(config).__name__}")
    return GPT2_FOLDER if config.arch == "gpt2" else RNN_FOLDER


def result_path(config: ExperimentConfig, results_dir: str | os.PathLike | None = None) -> Path:
    """Where the result of ``config`` is written: ``<results_dir>/<folder>/<key>.json``, with
    ``<folder>`` = ``wikitext2`` for the RNN/LSTM runs of Chapter 6 (06_wikitext) and ``gpt2``
    for the GPT-2 runs of Chapter 7 (07_gpt2) (:func:`result_folder`), and ``results_dir``
    defaulting to :func:`default_results_dir`."""
    base = _check_dir(results_dir)
    base = base if base is not None else default_results_dir()
    return base / result_folder(config) / f"{config.key}.json"


def _git(*args) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=repo_root(), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_version() -> dict:
    """The code that produced a result: git SHA of HEAD (None when the library is not a source
    checkout, e.g. an installed wheel, even one whose environment lies inside some other git
    repository) and whether the library (``nmst_lib/``, ``pyproject.toml``) has uncommitted
    changes, results in ``nmst_lib/published_results`` not counted; plus the library's version.
    Stamped on every result of Chapters 6-9; every chapter's first cell prints it."""
    checkout = is_source_checkout()
    sha = _git("rev-parse", "HEAD") if checkout else None
    # Results themselves are not code: a suite writes one file per model into the published folder,
    # and counting those made every result after the first look "dirty" (Chapter 7's first cpu run).
    status = _git("status", "--porcelain", "--", "nmst_lib", "pyproject.toml",
                  f":(exclude)nmst_lib/{_PUBLISHED_FOLDER}") if checkout else None
    import nmst_lib

    return {
        "git_sha": sha,
        "git_dirty": None if status is None else bool(status),
        "nmst_lib": getattr(nmst_lib, "__version__", None),
    }


def environment_info(device: torch.device | str | None = None) -> dict:
    """Python, torch, platform and device description for provenance. Stamped on the results of
    Chapters 6-9."""
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
    """The current UTC time, ISO 8601 to the second. Stamped on the results of Chapters 6-9."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


#: Set to ``1`` to publish a result made from a worktree with uncommitted library changes (see
#: :func:`refuse_dirty_publication`); the result is then stamped ``"dirty_forced": true``.
ALLOW_DIRTY_ENV = "NMST_ALLOW_DIRTY_RESULTS"


class DirtyResultError(ValueError):
    """A result made from uncommitted code was about to be written into the published results.
    Raised to guard the published results of Chapters 6-9."""


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
    except ValueError:
        return False
    return True


def refuse_dirty_publication(result: dict, path: str | os.PathLike) -> dict:
    """The results the website shows must say which code made them. A result whose provenance has
    ``git_dirty: true`` (the library had uncommitted changes) is refused with
    :class:`DirtyResultError` when it would be written into :func:`published_results_dir`, unless
    the environment sets ``NMST_ALLOW_DIRTY_RESULTS=1``: then it is written, stamped
    ``"dirty_forced": true``, with a loud warning on stderr, and pages show "+ local changes".
    Results written anywhere else (``--out``, ``$NMST_RESULTS_DIR``, the user cache) are the
    user's own and pass unchanged. Returns the result to write. Guards the published results of
    Chapters 6-9."""
    provenance = result.get("provenance") or {}
    if not provenance.get("git_dirty") or not _inside(Path(path), published_results_dir()):
        return result
    if os.environ.get(ALLOW_DIRTY_ENV) != "1":
        raise DirtyResultError(
            f"refusing to publish {Path(path).name}: it was made from a worktree with uncommitted changes to "
            f"nmst_lib/ or pyproject.toml (git {str(provenance.get('git_sha'))[:10]} + local changes), so no one "
            f"could say which code made it. Commit first and rerun, write it elsewhere (--out DIR or "
            f"NMST_RESULTS_DIR), or set {ALLOW_DIRTY_ENV}=1 to publish it marked as made from uncommitted code.")
    print(f"WARNING: publishing {Path(path).name} from UNCOMMITTED code ({ALLOW_DIRTY_ENV}=1); the result is "
          f"stamped dirty_forced and pages will say '+ local changes'.", file=sys.stderr, flush=True)
    return {**result, "provenance": {**provenance, "dirty_forced": True}}


@dataclass
class StoredResult:
    """What :func:`load_result` found: ``status`` is ``"current"``, ``"stale"`` or
    ``"missing"``; ``path`` the file (for MISSING: where a run would write it); ``data`` the
    JSON (None when missing); ``message`` says why; ``source`` says where the file came from:
    :data:`PUBLISHED` (the results shipped with the library, :func:`published_results_dir`),
    :data:`LOCAL` (any other folder: a run directory, ``$NMST_RESULTS_DIR``, the user cache),
    or None when missing. Used by Chapters 6-9."""

    status: str
    path: Path
    data: dict | None
    message: str
    source: str | None = None

    @property
    def is_current(self) -> bool:
        """True only for status CURRENT."""
        return self.status == CURRENT

    def __repr__(self) -> str:
        where = f" [{self.source}]" if self.source else ""
        return f"StoredResult({self.status.upper()}{where}: {self.path.name}; {self.message})"


def _flat(config: dict) -> dict:
    """``config`` with the fields of its dict-valued parts spelled ``part.field`` (the
    ``model`` and ``evaluation`` parts of Chapters 8 and 9's configs); flat configs unchanged."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def _config_diff(stored: dict, current: dict) -> list[str]:
    """``field: stored X != current Y`` for every field (``part.field`` in a nested config)
    whose value differs between ``stored`` and ``current``."""
    stored, current = _flat(stored), _flat(current)
    keys = sorted(set(stored) | set(current))
    return [f"{k}: stored {stored.get(k, '<absent>')!r} != current "
            f"{current.get(k, '<absent>')!r}"
            for k in keys if stored.get(k, "<absent>") != current.get(k, "<absent>")]


def _source_of(path: Path) -> str:
    try:
        published = published_results_dir().resolve()
    except RuntimeError:
        return LOCAL
    return PUBLISHED if path.resolve().is_relative_to(published) else LOCAL


def read_result_file(path: Path, schema: str, want: str, current: dict) -> StoredResult:
    """THE reader of a result file, for every experiment family (Chapters 6-9; see
    :mod:`nmst_lib.experiments.family`): STALE when the file's ``schema`` is not ``schema`` or
    its ``config_hash`` is not ``want`` (the message names the fields of ``current``, the
    config's ``to_dict()``, that differ), else CURRENT. An unreadable file raises ValueError
    saying to delete it and re-run."""
    path = Path(path)
    source = _source_of(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"result file {path} is unreadable ({err}); delete it and "
                         "re-run the experiment") from err
    if not isinstance(data, dict):
        raise ValueError(f"result file {path} holds a JSON {type(data).__name__}, not a "
                         "result object; delete it and re-run the experiment")
    if data.get("schema") != schema:
        return StoredResult(STALE, path, data, f"STALE: schema {data.get('schema')!r}, "
                            f"code expects {schema!r}", source)
    stored_hash = data.get("config_hash")
    if stored_hash != want:
        diff = _config_diff(data.get("config", {}), current)
        why = "; ".join(diff) if diff else "same fields, different config schema version"
        return StoredResult(STALE, path, data, f"STALE: config hash {stored_hash} != "
                            f"current {want} ({why})", source)
    return StoredResult(CURRENT, path, data, f"current (config hash {want})", source)


def write_result(result: dict, path: Path, *, schema: str, key: str, config_hash: str,
                 config: dict, profile: str) -> Path:
    """THE writer of a result file (every family, Chapters 6-9): ``result`` stamped first with
    ``schema``, ``key``, ``config_hash``, ``config`` (the config's ``to_dict()``) and
    ``profile`` (keys of ``result`` with those names are not copied), written atomically to
    ``path``; the match of :func:`read_result_file`. A result made from uncommitted code is
    refused in the published folder (:func:`refuse_dirty_publication`)."""
    stamped = {"schema": schema, "key": key, "config_hash": config_hash, "config": config,
               "profile": profile}
    stamped.update({k: v for k, v in result.items() if k not in stamped})
    write_json_atomic(path, refuse_dirty_publication(stamped, path))
    return path


def candidate_paths(path_of, config, results_dir=None) -> list[Path]:
    """Where a stored result of ``config`` may be: ``path_of(config, results_dir)`` (the write
    folder) and, without ``results_dir``, the same name among the results published with the
    library (when that is another file). Every family's store (Chapters 6-9)."""
    write_path = path_of(config, results_dir)
    candidates = [write_path]
    if results_dir is None:
        try:
            published = path_of(config, published_results_dir())
        except RuntimeError:
            published = None
        if published is not None and published.resolve() != write_path.resolve():
            candidates.append(published)
    return candidates


def load_first_current(candidates: list[Path], read, missing_hint: str) -> StoredResult:
    """The first CURRENT result among the existing files of ``candidates`` (each read with
    ``read(path)``, e.g. :func:`read_result_file`), else the first one found (STALE, its message
    naming a second STALE file), else MISSING with a message that names the paths looked at and
    ``missing_hint`` (how to produce the result). Every family's store (Chapters 6-9)."""
    found = [read(p) for p in candidates if p.is_file()]
    for stored in found:
        if stored.status == CURRENT:
            return stored
    if found:
        stale = found[0]
        if len(found) > 1:
            stale.message += f" (also STALE: {found[1].path})"
        return stale
    looked = " nor ".join(str(p) for p in candidates)
    return StoredResult(MISSING, candidates[0], None, f"no result at {looked}; {missing_hint}")


def save_result(result: dict, config: ExperimentConfig, results_dir=None) -> Path:
    """Stamp ``result`` with the config (dict + hash + key), then write it atomically to
    :func:`result_path` (:func:`write_result`). Returns the path. A result made from
    uncommitted code is refused in the published folder (:func:`refuse_dirty_publication`).
    Chapters 6 and 7's store (:class:`~nmst_lib.experiments.config.ExperimentConfig`)."""
    config = validate_config(config)
    return write_result(result, result_path(config, results_dir), schema=RESULT_SCHEMA,
                        key=config.key, config_hash=config_hash(config),
                        config=config.to_dict(), profile=config.profile)


def load_result(config: ExperimentConfig, results_dir=None) -> StoredResult:
    """The stored result for ``config`` with its status and source (Chapters 6 and 7's store).

    With ``results_dir``, only :func:`result_path` (``<results_dir>/wikitext2/<key>.json``, or
    ``<results_dir>/gpt2/<key>.json`` for GPT-2, Chapter 7) is read. Without it, the
    write directory (:func:`default_results_dir`) is read first, then the published results
    shipped with the library (:func:`published_results_dir`): the first CURRENT file wins, so
    a new run overrides the published one, and a STALE file left in the write directory by
    older code does not hide a CURRENT published one. ``source`` says which it was.

    CURRENT: the file's config hash equals :func:`config_hash` of ``config``. STALE: the file
    exists but was made by a different config or schema (the message lists the fields that
    differ). MISSING: no file anywhere (``path`` is where a run would write it). An
    unreadable file raises ``ValueError`` naming it.
    """
    config = validate_config(config)
    want, current = config_hash(config), config.to_dict()
    return load_first_current(candidate_paths(result_path, config, results_dir),
                              lambda p: read_result_file(p, RESULT_SCHEMA, want, current),
                              "run it (load_or_run or the CLI)")


def current_records(results, *, need: str | None = None) -> list[dict]:
    """The result dicts of the CURRENT results among ``results`` (one or many
    :class:`StoredResult` or result dicts; STALE and MISSING ones are left out, never shown as
    if they were current): THE records builder of every family's tables (Chapters 6-9). With
    ``need``, every record must hold that key (e.g. ``"config"``). Raises TypeError for anything
    else."""
    if isinstance(results, (StoredResult, Mapping)):
        results = [results]
    if isinstance(results, (str, bytes)) or not isinstance(results, Iterable):
        raise TypeError(f"results must be StoredResults or result dicts, got "
                        f"{type(results).__name__}")
    out = []
    for r in results:
        if isinstance(r, StoredResult):
            if r.status != CURRENT or r.data is None:
                continue
            r = r.data
        if r is None:
            continue
        if not isinstance(r, Mapping) or (need is not None and need not in r):
            what = f"a stored result dict (with {need!r})" if need else "a result dict"
            raise TypeError(f"expected a StoredResult or {what}, got {type(r).__name__}")
        out.append(r)
    return out


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _integers(value) -> bool:
    """An integer, or a non-empty list of integers (not bools)."""
    items = value if isinstance(value, (list, tuple)) and value else [value]
    return all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items)


def mean_over_seeds(rows, by) -> list[dict]:
    """Table rows of several seeds of one model merged into one row per model (Chapters 7-8).

    ``rows``: dicts, one per (model, seed) and whatever else a table has per model (a decoder);
    ``by``: the names of the fields that say which rows belong together (e.g. ``("loss",
    "decoder")``), in order of first appearance. In a merged row a field whose value is a number in
    every seed is the mean over the seeds, and ``per_seed[field]`` lists the seeds' values (for a
    noise band, :meth:`nmst_lib.findings.Band.from_seeds`); a number that is None in some seed
    (e.g. an infinite perplexity) makes the mean None. A list of numbers (a curve, e.g. r_nt(L))
    is averaged elementwise over seeds with the same length. Integers, or lists of integers, equal
    in every seed (a count of contexts, the grid of L) stay as they are. Any other field must be
    equal in every seed; ``seeds`` counts the merged rows. Raises ValueError for a field that
    differs where it cannot be averaged, or a row without a field of ``by``.
    """
    by = tuple(by)
    groups: dict[tuple, list[Mapping]] = {}
    for row in rows:
        if not isinstance(row, Mapping) or any(k not in row for k in by):
            raise ValueError(f"every row must be a dict with the fields {by}, got {row!r}")
        groups.setdefault(tuple(row[k] for k in by), []).append(row)
    out = []
    for key, group in groups.items():
        merged, per_seed = dict(group[0]), {}
        for name in merged:
            if name in by:
                continue
            values = [row.get(name) for row in group]
            if all(v == values[0] for v in values) and _integers(values[0]):
                continue  # a count or a grid of points (L), the same in every seed
            if all(_number(v) or v is None for v in values) and any(_number(v) for v in values):
                per_seed[name] = [None if v is None else float(v) for v in values]
                merged[name] = None if None in values else float(np.mean(values))
            elif all(isinstance(v, (list, tuple)) and v and all(_number(x) for x in v) for v in values):
                if len({len(v) for v in values}) != 1:
                    raise ValueError(f"{name!r} of {key} has lengths {[len(v) for v in values]} across "
                                     "seeds; curves are averaged only over the same points")
                per_seed[name] = [list(map(float, v)) for v in values]
                merged[name] = np.mean(np.asarray(values, dtype=np.float64), axis=0).tolist()
            elif any(v != values[0] for v in values):
                raise ValueError(f"{name!r} of {key} differs across seeds ({values!r}) and is not a "
                                 "number to average")
        merged["seeds"] = len(group)
        merged["per_seed"] = per_seed
        out.append(merged)
    return out


def training_provenance(run, *, command: str | None = None,
                        started: float | None = None) -> dict:
    """THE provenance block of a result (every family, Chapters 6-9): the code
    (:func:`code_version`), the machine (:func:`environment_info` of the run's device), the
    command, the date, the training seconds of ``run`` (a
    :class:`~nmst_lib.experiments.trainer.TrainedRun`), the wall seconds since ``started`` (a
    ``time.perf_counter()``; None without it) and where training resumed from."""
    return {
        **code_version(),
        **environment_info(run.device),
        "command": command or command_line(),
        "date_utc": utc_now(),
        "train_seconds": run.train_seconds,
        "wall_seconds": (time.perf_counter() - started) if started is not None else None,
        "resumed_from": run.resumed_from,
    }


def training_seeds(config: ExperimentConfig) -> dict:
    """The seeds of a trained model for a result's ``seeds`` block (every family): python,
    numpy and torch (``config.seed``) and the data order. Stamped on the results of Chapters 6-9."""
    return {"python": config.seed, "numpy": config.seed, "torch": config.seed,
            "data_order": f"torch.Generator seeded with seed * 1000003 + epoch (seed {config.seed})"}


def command_line() -> str:
    """The command that is running, for provenance (``python -m nmst_lib ...`` under the CLI).
    Stamped on the results of Chapters 6-9."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(("__main__.py", "nmst_lib")):
        return " ".join(["python -m nmst_lib", *argv[1:]])
    return " ".join(argv) if argv else "python"
