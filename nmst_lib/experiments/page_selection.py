"""Which results a chapter page shows (Chapters 6-9): the committed results of the
profile the reader chose; the subset of them that is CURRENT when some are missing and the rest
still make the page (the suite is trained in the background and committed run by run, so a page
often has only part of a profile); or, when too little is stored or the reader asked to retrain,
a run made here. One rule for every chapter, so that the notice a reader sees reads the same on
every page, and a chapter never re-implements the choice.

The pieces a page needs are in :class:`PageResults`: the results it shows, the ones it leaves
out (named), the profile it ended up showing, and the notices that say so
(:meth:`PageResults.notices`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..report import and_list, book_notation
from .family import get_family, scratch_folder, train_here
from .results import CURRENT, StoredResult

__all__ = ["PageResults", "page_results", "partial_notice", "fallback_notice", "model_names"]


@dataclass(frozen=True)
class PageResults:
    """The results one chapter page shows, as :func:`page_results` chose them. Used by Chapters 6-9
    (:func:`page_results`).

    ``profile``: the profile shown (``quick`` after a fall-back); ``asked``: the profile the
    reader chose; ``results``: the CURRENT results shown, in suite order; ``configs``: their
    configs, in the same order; ``left_out``: the
    suite's results that are missing or STALE and are not shown (empty unless the page is
    partial); ``folder``: where a run made here wrote (None for the committed results);
    ``trained_here``: whether the results were trained just now; ``reason``: why the page does
    not show the committed results of ``asked`` (None when it does); ``names``: each model of the
    suite as the page's notice names it (:func:`model_names`)."""

    profile: str
    asked: str
    results: tuple[StoredResult, ...]
    configs: tuple = ()
    left_out: tuple[StoredResult, ...] = ()
    folder: str | None = None
    trained_here: bool = False
    reason: str | None = None
    names: Mapping[str, str] | None = None

    @property
    def data(self) -> list[dict]:
        """The shown results' JSON dicts, in suite order."""
        return [s.data for s in self.results]

    @property
    def partial(self) -> bool:
        """Whether some of the suite's results are left out."""
        return bool(self.left_out)

    def notices(self) -> list[str]:
        """The Markdown paragraphs a page puts above its results: why it shows another run than
        the committed one (:func:`fallback_notice`), and which models it leaves out
        (:func:`partial_notice`); empty when it shows the whole committed profile."""
        out = []
        if self.reason is not None:
            out.append(fallback_notice(self.reason, self.profile))
        if self.left_out:
            out.append(partial_notice(self.results, self.left_out, self.profile, self.names))
        return out


def fallback_notice(reason: str, profile: str) -> str:
    """The warning a page shows when its numbers are not the committed ``cpu`` results its
    prose was written for; ``reason`` says whose they are (e.g. "of a `quick` run made just now,
    because ..."). Used by Chapters 6-9 (:func:`page_results`)."""
    return (
        f"**This page is showing results {reason}**, not the committed `cpu` results the prose "
        "was written for: the tables and figures are computed from them, the text may not "
        "describe them"
        + (", and the `quick` profile trains for seconds, so its numbers mean nothing."
           if profile == "quick" else ".")
    )


def _model_of(result: StoredResult) -> str:
    """The model a stored result is a seed of: its key without the ``-seed{N}`` that every
    config's key ends with (:attr:`~nmst_lib.experiments.config.ExperimentConfig.key`)."""
    return re.sub(r"-seed\d+$", "", result.path.stem)


def _seed_of(result: StoredResult) -> int:
    """The seed a stored result was trained with: the ``N`` of the ``-seed{N}`` its key ends with."""
    return int(re.search(r"-seed(\d+)$", result.path.stem).group(1))


def _seeds_words(seeds: Sequence[int]) -> str:
    """``seed 2``, ``seeds 1 and 2``, ``seeds 0, 1 and 2``."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return "seeds " + ", ".join(map(str, seeds[:-1])) + f" and {seeds[-1]}"


def model_names(configs) -> dict[str, str]:
    """Each model of ``configs`` (a suite's configs, any family) as a reader is told of it: its
    key without the seed -> its label in the book's notation (:func:`~nmst_lib.report.book_notation`
    of the config's ``label``, e.g. ``cpu-gpt2-st-eps2.5e-3-nounk`` -> ``ST+GPT2 (ε=2.5e-3)``),
    so that a page's notice never shows a file name. Every config needs a ``key`` ending in
    ``-seed{N}`` and a ``label``. Used by Chapters 6-9 (through :func:`page_results`)."""
    out = {}
    for c in configs:
        key, label = getattr(c, "key", None), getattr(c, "label", None)
        if not isinstance(key, str) or not re.search(r"-seed\d+$", key) or not isinstance(label, str):
            raise TypeError("model_names needs experiment configs (a key ending in -seed{N} and a "
                            f"label), got {type(c).__name__}")
        out[re.sub(r"-seed\d+$", "", key)] = book_notation(label)
    return out


def _by_model(results: Sequence[StoredResult]) -> dict[str, list[int]]:
    """Each model of ``results`` (in order of first appearance) with its seeds there, sorted."""
    out: dict[str, list[int]] = {}
    for s in results:
        out.setdefault(_model_of(s), []).append(_seed_of(s))
    return {model: sorted(seeds) for model, seeds in out.items()}


def partial_notice(shown: Sequence[StoredResult], left_out: Sequence[StoredResult],
                   profile: str, names: Mapping[str, str] | None = None) -> str:
    """The paragraph a partial page shows: how many results are stored and shown; which models
    of the suite are not stored, or stored by an older version of the code (STALE), with the
    seeds when there are several, whose findings the page lists as not run; and which further
    seeds of the models shown are not stored yet, grouped by the seeds they lack, whose tables
    are the means of the stored seeds. ``names`` (:func:`model_names`) names each model as the
    book does; a model it lacks is named by its key without the seed. Used by Chapters 6-9
    (through :meth:`PageResults.notices`)."""
    if names is not None and not isinstance(names, Mapping):
        raise TypeError(f"names must map a model's key to its name (model_names), got {type(names).__name__}")
    names = names or {}
    models_shown = {_model_of(s) for s in shown}
    lacking = _by_model(left_out)
    missing = {m: seeds for m, seeds in lacking.items() if m not in models_shown}
    later = {m: seeds for m, seeds in lacking.items() if m in models_shown}
    parts = [f"**This page is showing the {len(shown)} `{profile}` results that are stored**"]
    if missing:
        listed = "; ".join(names.get(m, m) + (f" ({_seeds_words(seeds)})" if len(seeds) > 1 else "")
                           for m, seeds in missing.items())
        one = len(missing) == 1
        parts.append(f"{len(missing)} model{'' if one else 's'} of the suite {'is' if one else 'are'} "
                     f"not trained yet, or stored by an older version of the code ({listed}): the "
                     "tables and figures leave "
                     f"{'it' if one else 'them'} out, and a finding that needs one is listed as "
                     "*not run*, naming it")
    if later:
        groups: dict[tuple[int, ...], list[str]] = {}
        for m, seeds in later.items():
            groups.setdefault(tuple(seeds), []).append(m)
        if len(groups) == 1 and len(later) == len(models_shown):
            ((seeds, _),) = groups.items()
            what = (f"{_seeds_words(seeds)} of "
                    + ("the model shown" if len(later) == 1 else f"each of the {len(later)} models shown"))
        else:
            what = "; ".join(f"{_seeds_words(seeds)} of {and_list([names.get(m, m) for m in ms])}"
                             for seeds, ms in groups.items())
        n = sum(len(seeds) for seeds in later.values())
        parts.append(f"{n} further seed{'' if n == 1 else 's'} of the models shown "
                     f"{'is' if n == 1 else 'are'} not stored yet ({what}): each table shows the mean "
                     "over a model's stored seeds, and a finding's noise band comes from the seeds "
                     "where both models compared have two or more (a rate's band also from the seeds "
                     "of one of them), else from a floor the page states")
    return "; ".join(parts) + "."


def _check_args(family: str, profile: str, needs):
    """The registered family named ``family``, after checking the arguments."""
    if not isinstance(profile, str):
        raise TypeError(f"profile must be a profile name (str), got {type(profile).__name__}")
    if needs is not None and not callable(needs):
        raise TypeError(
            "needs must be None (every result of the suite must be stored) or a function of the "
            f"stored results' dicts that says whether they make the page, got {type(needs).__name__}"
        )
    return get_family(family)  # ValueError naming the families


def page_results(
    family: str,
    profile: str,
    *,
    retrain: bool = False,
    needs: Callable[[list[dict]], bool] | None = None,
    results_dir=None,
) -> PageResults:
    """Choose the results a chapter page shows (module docstring), in three cases:

    1. ``retrain`` or ``profile == "quick"``: train the suite here
       (:func:`~nmst_lib.experiments.family.train_here`) into ``$NMST_RESULTS_DIR``, else a
       scratch folder for ``quick`` and ``./nmst_results`` otherwise.
    2. The stored results of ``profile`` (``results_dir``: only that folder; default the
       write folder, then the published ones): all of them when every one is CURRENT; else, when
       ``needs`` (a function of the CURRENT results' dicts) says they make the page, only those,
       and the others are named in the page's notice (a *partial* page).
    3. Otherwise (``needs`` is None and one is missing, or ``needs`` says no): a ``quick`` run
       made here, with a notice that says why.

    ``needs=None`` asks for the whole suite. Chapter 7 passes "a VA model and an ST or NMST
    model are stored", Chapter 8 "the softmax model is stored" (its explorer reads that model's
    scores), Chapter 9 "the sigmoid contextual-temperature VA model is stored"."""
    fam = _check_args(family, profile, needs)
    chapter = f"ch{int(fam.chapter[:2])}"
    if retrain or profile == "quick":
        folder = os.environ.get("NMST_RESULTS_DIR") or (
            scratch_folder(chapter) if profile == "quick" else "nmst_results")
        stored = train_here(family, profile, folder)
        return _shown(profile, profile, fam.configs(profile), stored, folder=folder, trained_here=True,
                      reason=f"trained just now on this machine at the `{profile}` profile")
    configs = fam.configs(profile)
    stored = [fam.load(c, results_dir) for c in configs]
    current = [(c, s) for c, s in zip(configs, stored) if s.status == CURRENT]
    bad = [s for s in stored if s.status != CURRENT]
    if not bad:
        return PageResults(profile, profile, tuple(stored), tuple(configs))
    if needs is not None and current and needs([s.data for _, s in current]):
        return PageResults(profile, profile, tuple(s for _, s in current),
                           tuple(c for c, _ in current), left_out=tuple(bad), names=model_names(configs))
    if needs is None:
        why = f"{len(bad)} of the {len(stored)} `{profile}` results are missing or STALE ({bad[0].message})"
    else:
        names = ", ".join(s.path.stem for s in bad[:3]) + (", ..." if len(bad) > 3 else "")
        why = f"the `{profile}` results the page needs are missing or STALE ({names})"
    folder = scratch_folder(chapter)
    stored = train_here(family, "quick", folder)
    return _shown("quick", profile, fam.configs("quick"), stored, folder=folder, trained_here=True,
                  reason=f"of a `quick` run made just now, because {why}")


def _shown(profile, asked, configs, stored, **kwargs) -> PageResults:
    bad = [s for s in stored if s.status != CURRENT]
    if bad or len(configs) != len(stored):  # a run made here stores every result it was asked for
        raise RuntimeError(f"the run made here left {len(bad)} of {len(stored)} results not CURRENT"
                           + (f": {bad[0].message}" if bad else ""))
    return PageResults(profile, asked, tuple(stored), tuple(configs), **kwargs)
