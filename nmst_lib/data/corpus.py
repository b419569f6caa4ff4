"""WikiText-2 as a corpus: the splits from the hub or a local folder, its
articles, the named article re-split that stands in for a missing training
split, and the provenance of every corpus (:class:`DataDescription`).

Where the lines come from is always written down:

* ``hub``: the official splits from the Hugging Face hub
  (``Salesforce/wikitext``, ``wikitext-2-v1``) when the hub can be reached.
  A quick probe decides; offline the call fails at once with
  :class:`~nmst_lib.data.WikiTextUnavailable` instead of retrying for ~23 s.
* ``local``: a folder holding ``train.txt``/``valid.txt``/``test.txt`` or
  ``wiki.{train,valid,test}.tokens``, read through
  ``datasets.load_dataset("text", ...)``; which folder is the business of
  :mod:`.sources` (:func:`~nmst_lib.data.wikitext_dir`).
* When that folder has no training split, the named substitute
  :data:`SUBSTITUTE_NAME`: the articles of the validation and test splits
  re-split by article (seeded, 80/10/10). It is never called "WikiText-2
  train".

The RNN/LSTM experiments of Chapter 6 (06_wikitext), Chapter 8 (08_sparse)
and Chapter 9 (09_temperature) and the classroom's Assignment 3 read
:func:`load_wikitext2`; Chapter 7 (07_gpt2) reads the raw text through
:mod:`.raw_wikitext`, which reuses the substitute.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .sources import (
    _WIKITEXT_FOLDER_HOLDS,
    DATA_DIR_ENV,
    WIKITEXT_DIR_ENV,
    WIKITEXT_SUBDIR,
    WikiTextUnavailable,
    _display_path,
    _hub_unreachable,
    _no_local_data_message,
    _where_from,
    go_offline,
    hub_is_reachable,
    wikitext_dir,
)

__all__ = [
    "HUB_CONFIG",
    "HUB_CONFIGS",
    "HUB_DATASET",
    "SPLITS",
    "SUBSTITUTE_NAME",
    "Corpus",
    "DataDescription",
    "drop_unk_markers",
    "is_article_heading",
    "load_local_splits",
    "load_wikitext2",
    "load_wikitext2_from_hub",
    "resplit_by_article",
    "split_articles",
]

HUB_DATASET, HUB_CONFIG = "Salesforce/wikitext", "wikitext-2-v1"
"""The hub dataset and the configuration of Chapter 6's WikiText-2."""
HUB_CONFIGS = (
    "wikitext-2-v1",
    "wikitext-2-raw-v1",
    "wikitext-103-v1",
    "wikitext-103-raw-v1",
)
"""The configurations of :data:`HUB_DATASET` a loader may ask for."""
SUBSTITUTE_NAME = "wikitext2-valtest-article-resplit"
"""Name of the substitute used when the official training split is
unavailable."""
SPLITS = ("train", "valid", "test")
_SPLIT_FILES = {
    "train": ("train.txt", "wiki.train.tokens"),
    "valid": ("valid.txt", "wiki.valid.tokens"),
    "test": ("test.txt", "wiki.test.tokens"),
}


# --------------------------------------------------------------------------
# The splits, from the hub or from a folder
# --------------------------------------------------------------------------


def _column_lines(dataset) -> list[str]:
    return [line.strip() for line in dataset["text"]]


def load_wikitext2_from_hub(
    timeout: float = 2.0, config: str = HUB_CONFIG
) -> dict[str, list[str]]:
    """The official WikiText splits (``Salesforce/wikitext``, default config
    ``wikitext-2-v1``) as stripped lines, through ``datasets`` (Merity et al.
    2016; the NMST paper's data, Choi, Cho, Lee (2023) Sec. 4.1; Chapter 6,
    06_wikitext). ``config`` may name another configuration of the same
    dataset, e.g. ``wikitext-103-raw-v1`` for Chapter 7 (07_gpt2).

    Fails fast with :class:`~nmst_lib.data.WikiTextUnavailable` when the hub
    is unreachable (and then sets ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE``
    so later calls fail fast too).
    """
    if config not in HUB_CONFIGS:
        raise ValueError(
            f"config must be one of {HUB_CONFIGS} (configurations of "
            f"{HUB_DATASET}), got {config!r}"
        )
    if not hub_is_reachable(timeout):
        go_offline()
        raise WikiTextUnavailable(
            f"{_hub_unreachable(timeout)}, so the official {config} splits "
            "cannot be downloaded. Use a local copy instead: source='local' "
            f"or 'auto' with ${DATA_DIR_ENV} (a folder whose "
            f"{WIKITEXT_SUBDIR}/ holds {_WIKITEXT_FOLDER_HOLDS}), "
            f"${WIKITEXT_DIR_ENV} or directory=...; without a training file "
            f"there the named substitute {SUBSTITUTE_NAME!r} is used."
        )
    import datasets

    try:
        ds = datasets.load_dataset(HUB_DATASET, config)
    except Exception as err:  # ConnectionError, hub errors: in our words
        raise WikiTextUnavailable(
            f"loading {HUB_DATASET} ({config}) from the hub failed: {err}"
        ) from err
    return {
        "train": _column_lines(ds["train"]),
        "valid": _column_lines(ds["validation"]),
        "test": _column_lines(ds["test"]),
    }


def _find_split_file(directory: Path, split: str) -> Path | None:
    for name in _SPLIT_FILES[split]:
        if (directory / name).is_file():
            return directory / name
    return None


def load_local_splits(
    directory: str | os.PathLike | None = None,
) -> dict[str, list[str]]:
    """The WikiText splits found in a local directory, as stripped lines,
    read with ``datasets.load_dataset("text", data_files=...)`` (works
    offline; Chapter 6, 06_wikitext).

    Looks for ``train.txt``/``valid.txt``/``test.txt`` or
    ``wiki.{train,valid,test}.tokens``; returns only the splits present (a
    copy of the public validation and test files, as on the project's
    machines, has no training split). The folder is ``directory``, else
    ``$NMST_WIKITEXT_DIR``, else ``$NMST_DATA_DIR/wikitext-2``
    (:func:`~nmst_lib.data.wikitext_dir`).
    """
    where = _where_from(directory)
    path = wikitext_dir(directory)
    if path is None:
        raise WikiTextUnavailable(
            _no_local_data_message(
                "a local copy was asked for (source 'local' or 'substitute')"
            )
        )
    if not path.is_dir():
        raise WikiTextUnavailable(
            f"WikiText-2 directory {path} (from {where}) does not exist; it "
            f"must be a folder holding {_WIKITEXT_FOLDER_HOLDS}. Set "
            f"{DATA_DIR_ENV} to a folder with a {WIKITEXT_SUBDIR}/ subfolder, "
            f"or {WIKITEXT_DIR_ENV} / directory=... to the WikiText-2 folder "
            "itself."
        )
    files = {s: _find_split_file(path, s) for s in SPLITS}
    files = {s: str(p) for s, p in files.items() if p is not None}
    if not files:
        raise WikiTextUnavailable(
            f"no WikiText split files in {path} (from {where}): expected "
            "train.txt/valid.txt/test.txt or wiki.{train,valid,test}.tokens"
        )
    import datasets

    ds = datasets.load_dataset("text", data_files=files)
    return {s: _column_lines(ds[s]) for s in files}


# --------------------------------------------------------------------------
# Articles and the substitute split
# --------------------------------------------------------------------------


_UNK_MARKER = "<unk>"
"""WikiText's stand-in for a rare word (Merity et al., 2016), a whitespace-separated token."""


def drop_unk_markers(lines: list[str]) -> list[str]:
    """``lines`` with every ``<unk>`` token deleted (Chapter 6, 06_wikitext, "The data").

    WikiText-2 replaced each word rarer than its vocabulary allowed by ``<unk>`` before release:
    5.5 % of the validation words. In a subword vocabulary that marker is one of the most frequent
    pieces, and a greedy decoder, which follows the most probable token, says it in half of what
    it writes. With the markers deleted the model is trained and scored on text without them, and
    its continuations are words. Only whole tokens equal to ``<unk>`` go; the spacing of the rest
    is kept (``" a <unk> b "`` becomes ``" a b "``), so a line of markers only becomes blank."""
    if isinstance(lines, str):
        raise TypeError("drop_unk_markers takes a list of lines, got one str; wrap it in a list")
    return [" ".join(t for t in line.split(" ") if t != _UNK_MARKER) if _UNK_MARKER in line else line
            for line in lines]


def is_article_heading(line: str) -> bool:
    """True for a top-level heading ``= Title =`` (one ``=`` on each side),
    which starts a new WikiText article; section headings
    ``= = Section = =`` are not article starts. The substitute training split of Chapters 6-9 is
    re-cut at these headings."""
    s = line.strip()
    return (
        len(s) >= 5
        and s.startswith("= ")
        and s.endswith(" =")
        and not s.startswith("= =")
        and not s.endswith("= =")
    )


def split_articles(lines: list[str]) -> list[list[str]]:
    """Group lines into articles; each article starts at a top-level heading
    (see :func:`is_article_heading`). Lines before the first heading form an
    article of their own. The substitute training split of Chapters 6-9 is re-cut by these articles."""
    articles: list[list[str]] = []
    for line in lines:
        if is_article_heading(line) or not articles:
            articles.append([])
        articles[-1].append(line)
    return [a for a in articles if any(s.strip() for s in a)]


def resplit_by_article(
    split_lines: dict[str, list[str]],
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    seed: int = 0,
) -> tuple[dict[str, list[str]], dict[str, int]]:
    """The substitute :data:`SUBSTITUTE_NAME`: pool the articles of the given
    splits (in the order given), shuffle them with ``seed`` and cut them into
    train/valid/test by article.

    Returns the new splits' lines and their article counts. Whole articles
    stay together, so no paragraph of a test article is seen in training
    (Chapter 6, 06_wikitext, "The data").
    """
    if (
        len(fractions) != 3
        or any(f < 0 for f in fractions)
        or abs(sum(fractions) - 1) > 1e-9
    ):
        raise ValueError(
            "fractions must be three non-negative numbers summing to 1, "
            f"got {fractions!r}"
        )
    articles = [
        a for name in split_lines for a in split_articles(split_lines[name])
    ]
    n = len(articles)
    if n < 3:
        raise ValueError(
            "need at least 3 articles to re-split into train/valid/test, "
            f"found {n}"
        )
    generator = torch.Generator().manual_seed(int(seed))
    order = torch.randperm(n, generator=generator).tolist()
    n_valid = max(1, round(fractions[1] * n))
    n_test = max(1, round(fractions[2] * n))
    n_train = n - n_valid - n_test
    if n_train < 1:
        raise ValueError(
            f"fractions {fractions!r} leave no training article out of {n}"
        )
    cuts = {
        "train": order[:n_train],
        "valid": order[n_train : n_train + n_valid],
        "test": order[n_train + n_valid :],
    }
    # the articles of each new split keep their original (reading) order
    splits = {
        s: [line for i in sorted(idx) for line in articles[i]]
        for s, idx in cuts.items()
    }
    return splits, {s: len(idx) for s, idx in cuts.items()}


# --------------------------------------------------------------------------
# Provenance, and the corpus
# --------------------------------------------------------------------------


@dataclass
class DataDescription:
    """Provenance of the text a run used: where it came from, which split
    played which role, and how big each split is (non-empty lines, whitespace
    tokens, articles).

    ``substitute`` is ``None`` for the official splits, else a sentence
    saying what was used instead (Chapter 6, 06_wikitext; ARCHITECTURE.md
    "Results, profiles and honesty").
    """

    source: str
    location: str | None
    splits: dict[str, str]
    num_lines: dict[str, int]
    num_tokens: dict[str, int]
    num_articles: dict[str, int]
    substitute: str | None = None
    substitute_seed: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def is_official(self) -> bool:
        """True when the training split is the official WikiText-2 training
        split."""
        return self.substitute is None

    def to_dict(self) -> dict:
        """A JSON-ready dict (for result files)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> DataDescription:
        """Inverse of :meth:`to_dict` (extra keys added by results, e.g.
        ``sequences``, are kept in ``extra``)."""
        fields = cls.__dataclass_fields__
        known = {k: v for k, v in d.items() if k in fields}
        extra = {k: v for k, v in d.items() if k not in fields}
        desc = cls(**known)
        desc.extra.update(extra)
        return desc

    def summary(self) -> str:
        """One line for a page or a log: which data, how many training
        tokens."""
        what = self.splits.get("train", "?")
        tokens = self.num_tokens.get("train", 0)
        return f"{what} ({tokens:,} training tokens; source: {self.source})"


@dataclass
class Corpus:
    """Train/valid/test lines plus the :class:`DataDescription` that says
    what they are. The models of Chapters 6-9 train on its WikiText-2 text."""

    train: list[str]
    valid: list[str]
    test: list[str]
    description: DataDescription

    def split(self, name: str) -> list[str]:
        """The lines of split ``name`` (``train``, ``valid`` or ``test``)."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        return getattr(self, name)


def _split_stats(lines: list[str]) -> tuple[int, int, int]:
    """Non-empty lines, whitespace tokens and articles of one split."""
    nonempty = [s for s in lines if s.strip()]
    tokens = sum(len(s.split()) for s in nonempty)
    return len(nonempty), tokens, len(split_articles(lines))


def _describe(
    source, location, splits, names, substitute=None, seed=None
) -> DataDescription:
    stats = {s: _split_stats(splits[s]) for s in SPLITS}
    return DataDescription(
        source=source,
        location=location,
        splits=names,
        num_lines={s: v[0] for s, v in stats.items()},
        num_tokens={s: v[1] for s, v in stats.items()},
        num_articles={s: v[2] for s, v in stats.items()},
        substitute=substitute,
        substitute_seed=seed,
    )


def _substitute_corpus(
    local: dict[str, list[str]],
    location: str,
    seed: int,
    fractions=(0.8, 0.1, 0.1),
) -> Corpus:
    pools = [s for s in ("valid", "test") if s in local]
    if not pools:
        raise WikiTextUnavailable(
            f"{location} has neither a training split nor validation/test "
            "splits"
        )
    pooled_lines = {s: local[s] for s in pools}
    splits, counts = resplit_by_article(pooled_lines, fractions, seed)
    total = sum(counts.values())
    pct = "/".join(f"{round(100 * f)}" for f in fractions)
    pooled = " + ".join(
        f"WikiText-2 {s} ({len(split_articles(local[s]))} articles)"
        for s in pools
    )
    sentence = (
        "The official WikiText-2 training split was not available. "
        f"Substitute {SUBSTITUTE_NAME!r}: the {total} articles of {pooled} "
        f"shuffled (seed {seed}) and re-split by article {pct} into train "
        f"({counts['train']} articles) / valid ({counts['valid']}) / test "
        f"({counts['test']}). This is NOT the WikiText-2 training split; "
        "perplexities are not comparable to published WikiText-2 numbers."
    )
    names = {
        s: f"{SUBSTITUTE_NAME} {s} ({counts[s]} articles of WikiText-2 "
        f"{'+'.join(pools)})"
        for s in SPLITS
    }
    source = f"local files, re-split ({SUBSTITUTE_NAME})"
    desc = _describe(source, location, splits, names, sentence, seed)
    return Corpus(splits["train"], splits["valid"], splits["test"], desc)


def load_wikitext2(
    source: str = "auto",
    directory: str | os.PathLike | None = None,
    *,
    substitute_seed: int = 0,
    hub_timeout: float = 2.0,
) -> Corpus:
    """WikiText-2 as a :class:`Corpus` with its provenance (Chapter 6,
    06_wikitext, "The data").

    ``source``:

    * ``"hub"``: the official splits from the Hugging Face hub;
      :class:`~nmst_lib.data.WikiTextUnavailable` (fast) when offline.
    * ``"local"``: the files of the local folder (``directory``, else
      ``$NMST_WIKITEXT_DIR``, else ``$NMST_DATA_DIR/wikitext-2``; see
      :func:`~nmst_lib.data.wikitext_dir`); with no training file there, the
      named substitute (validation + test articles re-split by article with
      ``substitute_seed``).
    * ``"substitute"``: always the substitute, built from the local
      validation and test files.
    * ``"auto"``: ``local`` when a local folder is configured (argument or
      either variable), else the hub. With neither a local folder nor the
      hub it raises :class:`~nmst_lib.data.WikiTextUnavailable` at once
      (within ``hub_timeout``; immediately when
      ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` is set), naming the
      variable to set and what the folder must hold.
    """
    allowed = ("auto", "hub", "local", "substitute")
    if source not in allowed:
        raise ValueError(f"source must be one of {allowed}, got {source!r}")
    path = wikitext_dir(directory)
    if source == "auto" and path is None and not hub_is_reachable(hub_timeout):
        go_offline()
        raise WikiTextUnavailable(
            _no_local_data_message(_hub_unreachable(hub_timeout))
        )
    if source == "hub" or (source == "auto" and path is None):
        return _hub_corpus(hub_timeout)
    local = load_local_splits(directory)
    location = _display_path(path)
    if source == "substitute" or "train" not in local:
        return _substitute_corpus(local, location, substitute_seed)
    missing = [s for s in SPLITS if s not in local]
    if missing:
        raise WikiTextUnavailable(
            f"{path} has a training split but lacks {missing}; add those files"
        )
    names = {s: f"WikiText-2 {s} (local files)" for s in SPLITS}
    desc = _describe("local files", location, local, names)
    return Corpus(local["train"], local["valid"], local["test"], desc)


def _hub_corpus(hub_timeout: float) -> Corpus:
    """The official WikiText-2 splits from the hub, described."""
    splits = load_wikitext2_from_hub(hub_timeout)
    names = {s: f"WikiText-2 {s} (official, {HUB_CONFIG})" for s in SPLITS}
    source = f"Hugging Face hub: {HUB_DATASET} ({HUB_CONFIG})"
    desc = _describe(source, HUB_DATASET, splits, names)
    return Corpus(splits["train"], splits["valid"], splits["test"], desc)
