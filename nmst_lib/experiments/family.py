"""One interface for an experiment family (Chapters 6-9): what a family is, the
registry of families, and the one suite runner that ``python -m nmst_lib suite
FAMILY`` calls.

A *family* is one chapter's set of experiments: its configs at each profile,
how a config is keyed and hashed, how one is run, where its results live and
which schema they carry. The book has four, each registered by its own module:

* ``wikitext2`` (Chapter 6, 06_wikitext; :mod:`nmst_lib.experiments.runs`):
  RNN/LSTM language models with VA, ST and NMST output layers (Choi, Cho, Lee
  (2023) Sec. 4.1);
* ``gpt2`` (Chapter 7, 07_gpt2; :mod:`nmst_lib.experiments.gpt2`): GPT-2 (Sec.
  4.2);
* ``sparse`` (Chapter 8, 08_sparse; :mod:`nmst_lib.experiments.sparse`): entmax
  and NMST-entmax LSTMs (Martins et al. (2020) Sec. 5.1);
* ``temperature`` (Chapter 9, 09_temperature;
  :mod:`nmst_lib.experiments.temperature_suite`): contextual-temperature LSTMs
  (Contextual Temperature (2020) Sec. 4).

A fifth family is a new module that builds a :class:`Family` and calls
:func:`register`; the store (:func:`Family.load`, :func:`Family.save`, through
the one reader and writer of :mod:`nmst_lib.experiments.results`), the
selection of ``--only``, the skip-or-run step, the parallel jobs and the
``suite`` command then serve it unchanged."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._validation import check_positive_int
from .config import ExperimentConfig
from .results import (
    CURRENT,
    StoredResult,
    candidate_paths,
    default_results_dir,
    load_first_current,
    read_result_file,
    write_result,
)

__all__ = [
    "Family",
    "register",
    "get_family",
    "family_names",
    "select_configs",
    "pending_configs",
    "run_family_suite",
    "train_here",
    "scratch_folder",
    "SuiteClock",
]


@dataclass(frozen=True, repr=False)
class Family:
    """One experiment family (see the module docstring).

    ``name`` (the ``suite`` command's FAMILY), ``title`` (how messages name it,
    e.g. ``"GPT-2"``), ``chapter`` (e.g. ``"06_wikitext"``), ``schema`` (the
    ``schema`` stamped into and expected of its result files), ``folder`` (the
    sub-folder of a results directory; a function of the config when it depends
    on it, e.g. Chapter 6's GPT-2 runs go to ``gpt2/``), ``config_type`` (the
    class of its configs: every config has ``key``, ``to_dict()`` and ``model``
    or is itself the training config), ``configs(profile, **overrides)`` (the suite at a
    profile, in run order; ``overrides``: option fields set for every model), ``config_hash(config)``, ``config_from_dict(d)``
    (inverse of ``config.to_dict()``), ``run(config, *, results_dir,
    checkpoint_dir, resume, device, progress, log, command)`` (train or resume,
    evaluate, store; returns the
    :class:`~nmst_lib.experiments.results.StoredResult`), ``describe(config)``
    (one line for ``--dry-run``), ``missing_hint`` (how to make a missing
    result) and ``distributed`` (whether ``--nproc`` can train its models
    data-parallel: ``run`` then also takes ``dist``, and
    :func:`run_family_suite` trains every model on every process first)."""

    name: str
    title: str
    chapter: str
    schema: str
    folder: str | Callable[[Any], str]
    config_type: type
    configs: Callable[[str], list]
    config_hash: Callable[[Any], str]
    config_from_dict: Callable[[dict], Any]
    run: Callable[..., StoredResult]
    describe: Callable[[Any], str]
    missing_hint: str
    distributed: bool = False

    def check(self, config) -> Any:
        """``config`` if it is one of this family's configs, else TypeError."""
        if not isinstance(config, self.config_type):
            raise TypeError(
                f"the {self.name} family (Chapter {self.chapter}) takes "
                f"{self.config_type.__name__} configs, got "
                f"{type(config).__name__}"
            )
        return config

    def key(self, config) -> str:
        """The file-name key of ``config``'s result."""
        return self.check(config).key

    def training_config(self, config):
        """The :class:`~nmst_lib.experiments.config.ExperimentConfig` that
        trains ``config``'s model (the config itself for Chapters 6-7,
        ``config.model`` for Chapters 8-9)."""
        config = self.check(config)
        if isinstance(config, ExperimentConfig):  # its ``model`` is its ModelOptions section
            return config
        return getattr(config, "model", config)

    def __repr__(self) -> str:
        """``Family('wikitext2': WikiText-2, Chapter 06_wikitext)``: what the
        API page shows of a registered family (no functions, no addresses)."""
        return f"Family({self.name!r}: {self.title}, Chapter {self.chapter})"

    def path(self, config, results_dir=None) -> Path:
        """``<results_dir>/<folder>/<key>.json``; ``results_dir`` defaults to
        :func:`~nmst_lib.experiments.results.default_results_dir`."""
        base = (
            Path(results_dir)
            if results_dir is not None
            else default_results_dir()
        )
        folder = self.folder(config) if callable(self.folder) else self.folder
        return base / folder / f"{self.key(config)}.json"

    def load(self, config, results_dir=None) -> StoredResult:
        """The stored result of ``config`` (CURRENT / STALE / MISSING): with
        ``results_dir`` only that folder; without it the write folder first,
        then the results published with the library; the first CURRENT file
        wins (the one reader,
        :func:`~nmst_lib.experiments.results.read_result_file`)."""
        want, current = self.config_hash(config), config.to_dict()
        return load_first_current(
            candidate_paths(self.path, config, results_dir),
            lambda p: read_result_file(p, self.schema, want, current),
            self.missing_hint,
        )

    def save(self, result: dict, config, results_dir=None) -> Path:
        """Write ``result`` for ``config`` atomically, stamped with schema,
        key, config hash, config and profile (the one writer,
        :func:`~nmst_lib.experiments.results.write_result`)."""
        return write_result(
            result,
            self.path(config, results_dir),
            schema=self.schema,
            key=self.key(config),
            config_hash=self.config_hash(config),
            config=config.to_dict(),
            profile=self.training_config(config).profile,
        )

    def load_all(
        self, profile: str = "cpu", results_dir=None
    ) -> list[StoredResult]:
        """The stored results of every config of ``profile`` (nothing is run),
        in suite order."""
        return [self.load(c, results_dir) for c in self.configs(profile)]


_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add ``family`` to the registry (a family module calls this once at
    import); returns it. Registering another family under a taken name is a
    ValueError. The four families of Chapters 6-9 register here."""
    if not isinstance(family, Family):
        raise TypeError(f"expected a Family, got {type(family).__name__}")
    known = _FAMILIES.get(family.name)
    if (
        known is not None
        and known is not family
        and known.chapter != family.chapter
    ):
        raise ValueError(
            f"a family named {family.name!r} is already registered "
            f"(Chapter {known.chapter})"
        )
    _FAMILIES[family.name] = family
    return family


def family_names() -> tuple[str, ...]:
    """The names of the registered families, in registration order (importing
    :mod:`nmst_lib.experiments`, which any import of this module does first,
    registers the book's four). The book's four are the experiments of Chapters 6-9."""
    return tuple(_FAMILIES)


def get_family(name: str) -> Family:
    """The registered family called ``name`` (``wikitext2``, ``gpt2``,
    ``sparse``, ``temperature``, or one a module registered); ValueError naming
    the known ones. Chapter 8 (``08_sparse``) reads Chapter 6's family through it."""
    names = family_names()
    if name not in _FAMILIES:
        raise ValueError(
            f"unknown experiment family {name!r}: choose one of {', '.join(names)}"
        )
    return _FAMILIES[name]


def select_configs(
    configs: Sequence, only, *, suite: str = "the suite"
) -> list:
    """The configs selected by ``only``, in order: None keeps all; a string of
    one or more comma-separated key substrings keeps the configs whose key
    contains one of them (e.g. ``"va,nmst-eps5e-4"``); a callable is a
    predicate on configs. A string that selects nothing is a ValueError naming
    the keys. The ``--only`` of every suite command. Used by the suites of Chapters 6-9."""
    configs = list(configs)
    if only is None:
        return configs
    if isinstance(only, str):
        parts = [p.strip() for p in only.split(",") if p.strip()]
        if not parts:
            raise ValueError(
                "only must be one or more comma-separated key substrings (e.g. "
                f"'mos3,pow'), a callable, or None; got {only!r}"
            )
        chosen = [c for c in configs if any(p in c.key for p in parts)]
        if not chosen:
            raise ValueError(
                f"no model of {suite} has any of {parts} in its key; keys: "
                + ", ".join(c.key for c in configs)
            )
        return chosen
    if callable(only):
        return [c for c in configs if only(c)]
    raise TypeError(
        f"only must be a part of a key (str), a predicate on configs, or None; "
        f"got {only!r}"
    )


def pending_configs(
    configs,
    load,
    *,
    force: bool = False,
    log: Callable[[str], None] | None = None,
    tag: str = "suite",
    action: str = "running",
) -> list:
    """The configs of a suite that must run: those whose stored result
    (``load(config)``, a :class:`~nmst_lib.experiments.results.StoredResult`)
    is not CURRENT, or all of them with ``force``. Says one line per config
    through ``log`` (``[tag i/n] key: current, skipped`` or ``[tag i/n] key:
    missing, running``). The skip-or-queue step of every family. Used by the suites of Chapters 6-9."""
    say = log or (lambda msg: None)
    todo = []
    for i, config in enumerate(configs, 1):
        stored = load(config)
        if stored.status == CURRENT and not force:
            say(f"[{tag} {i}/{len(configs)}] {config.key}: current, skipped")
        else:
            say(
                f"[{tag} {i}/{len(configs)}] {config.key}: {stored.status}, {action}"
            )
            todo.append(config)
    return todo


def _run_job(payload) -> str:
    """One config of a parallel :func:`run_family_suite`, in its own (spawned)
    process."""
    import torch

    name, config_dict, kwargs, threads = payload
    if threads:
        torch.set_num_threads(threads)
    family = get_family(name)
    config = family.config_from_dict(config_dict)
    family.run(config, log=print, progress=False, **kwargs)
    return config.key


class SuiteClock:
    """The suite's own progress line: runs done out of ``total``, time so
    far and the time left estimated from the mean time of the runs done so
    far (wall time per finished run, so parallel jobs are counted as they
    run). The line says what the estimate rests on: runs of one suite can
    differ several-fold. Used by the suites of Chapters 6-9."""

    def __init__(self, total: int):
        self.total = check_positive_int(total, "total")
        self.done = 0
        self.start = time.monotonic()

    def tick(self) -> str:
        """Count one finished run; the line to print."""
        self.done += 1
        elapsed = time.monotonic() - self.start
        left = self.total - self.done
        line = f"{self.done}/{self.total} runs done in {_minutes(elapsed)}"
        if left > 0:
            per_run = elapsed / self.done
            line += (f"; about {_minutes(per_run * left)} left (the mean of the runs so far; "
                     "runs of one suite can differ several-fold)")
        return line


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _run_in_processes(
    family: Family,
    todo: list,
    kwargs: dict,
    jobs: int,
    threads: int | None,
    say,
) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    payloads = [(family.name, c.to_dict(), kwargs, threads) for c in todo]
    context = multiprocessing.get_context("spawn")
    clock = SuiteClock(len(todo))
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [pool.submit(_run_job, payload) for payload in payloads]
        for done, future in enumerate(as_completed(futures), 1):
            say(
                f"[{family.name}] {future.result()} finished; {clock.tick()}"
            )


def _run_distributed(
    family: Family, todo: list, ctx, kwargs: dict, progress: bool, log
) -> None:
    """Under ``torchrun``: every process trains every pending model together
    (DistributedDataParallel; rank 0 writes the checkpoints); then rank 0
    alone loads each finished checkpoint, evaluates and stores it."""
    from .distributed import DistContext
    from .trainer import train

    for config in todo:
        train(
            family.training_config(config),
            checkpoint_dir=kwargs["checkpoint_dir"],
            resume=kwargs["resume"],
            progress=progress,
            log=log if ctx.is_main else None,
            dist=ctx,
        )
    if not ctx.is_main:
        return
    for config in todo:
        family.run(
            config,
            device=ctx.device,
            progress=progress,
            log=log,
            dist=DistContext(device=ctx.device),
            **{**kwargs, "resume": True},
        )


def _distributed_context(family: Family, device):
    """The ``torchrun`` context when ``WORLD_SIZE`` > 1 (ValueError for a
    family that does not train data-parallel), else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    if not family.distributed:
        raise ValueError(
            f"the {family.name} family does not train data-parallel "
            "(--nproc); run it in one process per model (--jobs N)"
        )
    from .distributed import init_distributed

    return init_distributed(device)


def run_family_suite(
    family: Family | str,
    profile: str,
    *,
    only=None,
    force: bool = False,
    results_dir=None,
    checkpoint_dir=None,
    device=None,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
    command: str | None = None,
    jobs: int = 1,
    threads: int | None = None,
    overrides: dict | None = None,
) -> list[StoredResult]:
    """Run every config of ``family`` at ``profile`` (``only``:
    :func:`select_configs`) whose stored result is not CURRENT (all of them
    with ``force``, trained from scratch), resuming from checkpoints; returns
    the stored results of the selected configs, in order. The one runner behind
    ``python -m nmst_lib suite FAMILY`` and every chapter's suite function.
    ``overrides`` (``suite --set FIELD=VALUE``): option fields set for every
    model, as ``family.configs(profile, **overrides)`` applies them
    (:func:`~nmst_lib.experiments.config.suite_overrides`). Every suite of Chapters 6-9 runs through it.

    ``jobs > 1`` runs that many configs at once, each in its own (spawned)
    process with ``threads`` torch threads (on a 2-core CPU: ``jobs=2,
    threads=1``); a config's numbers do not depend on ``jobs``. Under
    ``torchrun`` (``WORLD_SIZE`` > 1, ``--nproc N``) every process first trains
    the pending models together, then rank 0 alone loads each finished
    checkpoint, evaluates and stores it (decoding is not distributed); only
    families with ``distributed`` allow it."""
    import torch

    from .model_setup import default_device

    family = get_family(family) if isinstance(family, str) else family
    if not isinstance(force, bool):
        raise TypeError(f"force must be True or False, got {force!r}")
    jobs = check_positive_int(jobs, "jobs")
    configs = select_configs(
        family.configs(profile, **(overrides or {})),
        only,
        suite=f"the {profile} {family.title} suite",
    )
    ctx = _distributed_context(family, device)
    quiet = ctx is not None and not ctx.is_main  # rank 0 speaks for all
    say = (lambda msg: None) if quiet or log is None else log
    todo = pending_configs(
        configs,
        lambda c: family.load(c, results_dir),
        force=force,
        log=say,
        tag=family.name,
        action="queued" if jobs > 1 else "running",
    )
    kwargs = {
        "results_dir": results_dir,
        "checkpoint_dir": checkpoint_dir,
        "resume": not force,
        "command": command,
    }
    if ctx is not None and ctx.distributed:
        _run_distributed(family, todo, ctx, kwargs, progress, log)
        return [family.load(c, results_dir) for c in configs]
    device = torch.device(device) if device is not None else default_device()
    if jobs > 1 and len(todo) > 1:
        _run_in_processes(
            family, todo, {**kwargs, "device": str(device)}, jobs, threads, say
        )
    else:
        clock = SuiteClock(len(todo)) if todo else None
        for config in todo:
            family.run(
                config, device=device, progress=progress, log=log, **kwargs
            )
            say(f"[{family.name}] {config.key} finished; {clock.tick()}")
    return [family.load(c, results_dir) for c in configs]


def scratch_folder(chapter: str) -> str:
    """Where a chapter's ``quick`` runs go: ``$NMST_QUICK_DIR`` when set (the tests point it at
    one folder so that chapters share their runs), else a new temporary folder named after the
    chapter (``nmst-ch6-quick-...``). Chapters 6-9, "Train it here"
    (:func:`~nmst_lib.experiments.page_selection.page_results`)."""
    if not isinstance(chapter, str) or not chapter.strip():
        raise ValueError(
            f"chapter must name the chapter, e.g. 'ch6', got {chapter!r}"
        )
    return os.environ.get("NMST_QUICK_DIR") or tempfile.mkdtemp(
        prefix=f"nmst-{chapter}-quick-"
    )


def train_here(
    family: str,
    profile: str,
    folder,
    *,
    only=None,
    progress: bool | None = None,
) -> list:
    """Train and decode every model of an experiment family's suite at ``profile`` into
    ``folder`` (results, and checkpoints in ``folder/checkpoints``), resuming where a run was
    interrupted and skipping the results already CURRENT there; returns the
    :class:`~nmst_lib.experiments.results.StoredResult` of every config of the suite, in order.
    The "train it here" switch of Chapters 6 (``wikitext2``), 7 (``gpt2``), 8 (``sparse``) and 9
    (``temperature``), through :func:`nmst_lib.experiments.family.run_family_suite` (``only``:
    some of the suite's keys, as there); progress bars unless ``profile`` is ``quick``."""
    fam = get_family(family)
    folder = Path(folder)
    count = len(
        select_configs(
            fam.configs(profile),
            only,
            suite=f"the {profile} {fam.title} suite",
        )
    )
    print(
        f"Training and decoding the {profile} {fam.title} suite here ({count} models) "
        f"into the folder {folder.name} ..."
    )
    progress = profile != "quick" if progress is None else bool(progress)
    return run_family_suite(
        fam,
        profile,
        only=only,
        results_dir=folder,
        checkpoint_dir=folder / "checkpoints",
        progress=progress,
        log=print if progress else None,
    )
