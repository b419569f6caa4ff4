"""WikiText-2 for continuation tasks: loading, the article re-split substitute, vocabulary,
sequences, bucketed batches.

A *sequence* is one non-empty line of WikiText-2 (a paragraph or a heading), whitespace
tokenised; its first ``k = 10`` tokens are the context x and the rest, followed by ``<eos>``,
is the continuation y (Choi, Cho, Lee (2023), Sec. 4.1; DESIGN.md "Canonical definitions").
Lines of at most k tokens have no continuation and are dropped. The experiments of
Chapter 6 (06_wikitext) train and decode on these sequences.

Where the data comes from is always written down (:class:`DataDescription`):

* ``hub``: the official splits from the Hugging Face hub (``Salesforce/wikitext``,
  ``wikitext-2-v1``) when the hub can be reached. A quick probe decides; offline the call
  fails at once with :class:`WikiTextUnavailable` instead of retrying for ~23 s.
* ``local``: a directory holding ``train.txt``/``valid.txt``/``test.txt`` or
  ``wiki.{train,valid,test}.tokens``, read through ``datasets.load_dataset("text", ...)``.
  Which directory (first that applies): the ``directory`` argument; the ``NMST_WIKITEXT_DIR``
  environment variable (the WikiText-2 folder itself); ``$NMST_DATA_DIR/wikitext-2`` (the
  ``NMST_DATA_DIR`` variable names a data root holding ``wikitext-2/`` and
  ``gpt2-tokenizer/``). With none of them, ``source="auto"`` uses the hub, and without the
  hub it fails fast with :class:`WikiTextUnavailable` saying which variable to set
  (:func:`wikitext_dir`, :func:`data_root`).
* When that directory has no training split, the named substitute
  :data:`SUBSTITUTE_NAME`: the articles of the validation and test splits re-split by article
  (seeded, 80/10/10). It is never called "WikiText-2 train".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ._validation import check_positive_int

__all__ = [
    "CONTEXT_LEN",
    "EOS",
    "PAD",
    "UNK",
    "HUB_DATASET",
    "HUB_CONFIG",
    "SUBSTITUTE_NAME",
    "WikiTextUnavailable",
    "DataDescription",
    "Corpus",
    "Vocabulary",
    "SequenceData",
    "Batch",
    "repo_root",
    "DATA_DIR_ENV",
    "WIKITEXT_DIR_ENV",
    "data_root",
    "wikitext_dir",
    "default_wikitext_dir",
    "hub_is_reachable",
    "load_wikitext2_from_hub",
    "load_local_splits",
    "is_article_heading",
    "split_articles",
    "resplit_by_article",
    "load_wikitext2",
    "build_vocabulary",
    "make_sequences",
    "make_batch",
    "bucket_batches",
    "epoch_generator",
    "iterate_batches",
    "gpt2_tokenizer_dir",
    "default_gpt2_tokenizer_dir",
    "load_gpt2_tokenizer",
    "TokenizerVocabulary",
    "make_bpe_sequences",
    "RAW_HUB_CONFIGS",
    "wikitext_detokenize",
    "load_wikitext_raw",
    "bpe_cache_dir",
    "bpe_sequences_cached",
]

CONTEXT_LEN = 10
"""k: the number of context tokens (Choi, Cho, Lee (2023), Sec. 4.1)."""
EOS, PAD, UNK = "<eos>", "<pad>", "<unk>"
HUB_DATASET, HUB_CONFIG = "Salesforce/wikitext", "wikitext-2-v1"
RAW_HUB_CONFIGS = {"wikitext-2": "wikitext-2-raw-v1", "wikitext-103": "wikitext-103-raw-v1"}
"""Hub configurations of the raw (not ``<unk>``-replaced) WikiText text that GPT-2 reads (Chapter 7, 07_gpt2)."""
HUB_CONFIGS = ("wikitext-2-v1", "wikitext-2-raw-v1", "wikitext-103-v1", "wikitext-103-raw-v1")
SUBSTITUTE_NAME = "wikitext2-valtest-article-resplit"
"""Name of the substitute used when the official training split is unavailable."""
DATA_DIR_ENV = "NMST_DATA_DIR"
"""Environment variable naming the data root: a folder holding ``wikitext-2/`` (WikiText-2 split
files) and ``gpt2-tokenizer/`` (GPT-2's ``vocab.json`` + ``merges.txt``)."""
WIKITEXT_DIR_ENV = ENV_DIR = "NMST_WIKITEXT_DIR"
"""Environment variable naming the WikiText-2 folder itself (wins over ``$NMST_DATA_DIR/wikitext-2``)."""
WIKITEXT_SUBDIR, TOKENIZER_SUBDIR = "wikitext-2", "gpt2-tokenizer"
SPLITS = ("train", "valid", "test")
_SPLIT_FILES = {
    "train": ("train.txt", "wiki.train.tokens"),
    "valid": ("valid.txt", "wiki.valid.tokens"),
    "test": ("test.txt", "wiki.test.tokens"),
}


class WikiTextUnavailable(OSError):
    """WikiText-2 could not be obtained from the requested source (offline hub, missing files)."""


# --------------------------------------------------------------------------------------------
# Where the data lives
# --------------------------------------------------------------------------------------------


def repo_root() -> Path:
    """The project's root directory (the folder holding ``nmst_lib/``)."""
    return Path(__file__).resolve().parents[1]


def data_root() -> Path | None:
    """The data root named by ``$NMST_DATA_DIR`` (a folder holding ``wikitext-2/`` and
    ``gpt2-tokenizer/``), or None when the variable is unset or empty. Nothing is checked here:
    the loaders say what is missing."""
    env = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(env).expanduser() if env else None


def wikitext_dir(directory: str | os.PathLike | None = None) -> Path | None:
    """The local WikiText-2 folder to read, by precedence: ``directory`` (argument) >
    ``$NMST_WIKITEXT_DIR`` > ``$NMST_DATA_DIR/wikitext-2``; None when none is given (then
    :func:`load_wikitext2` with ``source="auto"`` uses the Hugging Face hub). Chapter 6
    (06_wikitext), "The data"."""
    if directory is not None:
        return Path(directory).expanduser()
    env = os.environ.get(WIKITEXT_DIR_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    root = data_root()
    return root / WIKITEXT_SUBDIR if root is not None else None


def default_wikitext_dir(directory: str | os.PathLike | None = None) -> Path | None:
    """Alias of :func:`wikitext_dir` (kept for existing callers): the configured local WikiText-2
    folder, or None when neither an argument nor ``$NMST_WIKITEXT_DIR`` / ``$NMST_DATA_DIR`` names one."""
    return wikitext_dir(directory)


def _where_from(directory) -> str:
    """Which setting named the local folder (for error messages)."""
    if directory is not None:
        return "the directory argument"
    if os.environ.get(WIKITEXT_DIR_ENV, "").strip():
        return f"${WIKITEXT_DIR_ENV}"
    return f"${DATA_DIR_ENV}/{WIKITEXT_SUBDIR}"


_WIKITEXT_FOLDER_HOLDS = ("valid.txt and test.txt (optionally train.txt), or wiki.{valid,test,train}.tokens: "
                          "one line per row, articles headed ' = Title = '")


def _no_local_data_message(reason: str) -> str:
    return (
        f"WikiText-2 is not available: {reason}, and no local copy is configured. Set {DATA_DIR_ENV} to a data "
        f"folder whose {WIKITEXT_SUBDIR}/ subfolder holds {_WIKITEXT_FOLDER_HOLDS} (the same folder may hold "
        f"{TOKENIZER_SUBDIR}/ with GPT-2's vocab.json and merges.txt); or set {WIKITEXT_DIR_ENV} to the "
        f"WikiText-2 folder itself; or pass directory=... (CLI: --data-dir)."
    )


def _display_path(path: Path) -> str:
    """``path`` for provenance: relative to the repository root when the library runs from a
    checkout and the folder is inside it or beside it (e.g. ``../data/wikitext-2``), else as given."""
    root = repo_root()
    try:
        rel = os.path.relpath(path.resolve(), root)
    except ValueError:  # another drive on Windows
        return str(path)
    if (root / "pyproject.toml").is_file() and not rel.startswith(os.pardir + os.sep + os.pardir):
        return rel
    return str(path)


def _offline_flag_set() -> bool:
    return any(os.environ.get(v, "").strip().lower() in {"1", "true", "yes", "on"}
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def hub_is_reachable(timeout: float = 2.0, host: str = "huggingface.co", port: int = 443) -> bool:
    """Quick probe: can a TCP connection to the hub be opened within ``timeout`` seconds?

    ``False`` at once when ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` is set. Name resolution
    runs in a daemon thread so that a hanging DNS lookup cannot block longer than ``timeout``.
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


def _go_offline() -> None:
    """Tell ``huggingface_hub``/``datasets`` not to retry the network in this process."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    try:  # the libraries read the variables at import time; update them if already imported
        import datasets.config as dconfig

        dconfig.HF_HUB_OFFLINE = True
        if hasattr(dconfig, "HF_DATASETS_OFFLINE"):
            dconfig.HF_DATASETS_OFFLINE = True
    except Exception:  # pragma: no cover - datasets missing or changed: the env vars still apply
        pass
    try:
        import huggingface_hub.constants as hconst

        hconst.HF_HUB_OFFLINE = True
    except Exception:  # pragma: no cover - huggingface_hub missing or changed
        pass


def _column_lines(dataset) -> list[str]:
    return [line.strip() for line in dataset["text"]]


def load_wikitext2_from_hub(timeout: float = 2.0, config: str = HUB_CONFIG) -> dict[str, list[str]]:
    """The official WikiText splits (``Salesforce/wikitext``, default config ``wikitext-2-v1``)
    as stripped lines, through ``datasets`` (Merity et al. 2016; the NMST paper's data, Choi,
    Cho, Lee (2023) Sec. 4.1; Chapter 6, 06_wikitext). ``config`` may name another
    configuration of the same dataset, e.g. ``wikitext-103-raw-v1`` for Chapter 7 (07_gpt2).

    Fails fast with :class:`WikiTextUnavailable` when the hub is unreachable (and then sets
    ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` so later calls fail fast too).
    """
    if config not in HUB_CONFIGS:
        raise ValueError(f"config must be one of {HUB_CONFIGS} (configurations of {HUB_DATASET}), got {config!r}")
    if not hub_is_reachable(timeout):
        _go_offline()
        raise WikiTextUnavailable(
            f"the Hugging Face hub is not reachable (probe of huggingface.co:443 failed within {timeout:g} s, "
            f"or HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set), so the official {config} splits cannot be "
            f"downloaded. Use a local copy instead: source='local' or 'auto' with ${DATA_DIR_ENV} (a folder "
            f"whose {WIKITEXT_SUBDIR}/ holds {_WIKITEXT_FOLDER_HOLDS}), ${WIKITEXT_DIR_ENV} or directory=...; "
            f"without a training file there the named substitute {SUBSTITUTE_NAME!r} is used."
        )
    import datasets

    try:
        ds = datasets.load_dataset(HUB_DATASET, config)
    except Exception as err:  # ConnectionError, hub errors: report them in our words
        raise WikiTextUnavailable(f"loading {HUB_DATASET} ({config}) from the hub failed: {err}") from err
    return {"train": _column_lines(ds["train"]), "valid": _column_lines(ds["validation"]),
            "test": _column_lines(ds["test"])}


def _find_split_file(directory: Path, split: str) -> Path | None:
    for name in _SPLIT_FILES[split]:
        if (directory / name).is_file():
            return directory / name
    return None


def load_local_splits(directory: str | os.PathLike | None = None) -> dict[str, list[str]]:
    """The WikiText splits found in a local directory, as stripped lines, read with
    ``datasets.load_dataset("text", data_files=...)`` (works offline; Chapter 6, 06_wikitext).

    Looks for ``train.txt``/``valid.txt``/``test.txt`` or ``wiki.{train,valid,test}.tokens``;
    returns only the splits present (a copy of the public validation and test files, as on the
    project's machines, has no training split). The folder is ``directory``, else
    ``$NMST_WIKITEXT_DIR``, else ``$NMST_DATA_DIR/wikitext-2`` (:func:`wikitext_dir`).
    """
    where = _where_from(directory)
    path = wikitext_dir(directory)
    if path is None:
        raise WikiTextUnavailable(_no_local_data_message("a local copy was asked for (source 'local' or 'substitute')"))
    if not path.is_dir():
        raise WikiTextUnavailable(
            f"WikiText-2 directory {path} (from {where}) does not exist; it must be a folder holding "
            f"{_WIKITEXT_FOLDER_HOLDS}. Set {DATA_DIR_ENV} to a folder with a {WIKITEXT_SUBDIR}/ subfolder, "
            f"or {WIKITEXT_DIR_ENV} / directory=... to the WikiText-2 folder itself."
        )
    files = {s: _find_split_file(path, s) for s in SPLITS}
    files = {s: str(p) for s, p in files.items() if p is not None}
    if not files:
        raise WikiTextUnavailable(
            f"no WikiText split files in {path} (from {where}): expected train.txt/valid.txt/test.txt or "
            "wiki.{train,valid,test}.tokens"
        )
    import datasets

    ds = datasets.load_dataset("text", data_files=files)
    return {s: _column_lines(ds[s]) for s in files}


# --------------------------------------------------------------------------------------------
# Articles and the substitute split
# --------------------------------------------------------------------------------------------


def is_article_heading(line: str) -> bool:
    """True for a top-level heading ``= Title =`` (one ``=`` on each side), which starts a new
    WikiText article; section headings ``= = Section = =`` are not article starts."""
    s = line.strip()
    return (len(s) >= 5 and s.startswith("= ") and s.endswith(" =")
            and not s.startswith("= =") and not s.endswith("= ="))


def split_articles(lines: list[str]) -> list[list[str]]:
    """Group lines into articles; each article starts at a top-level heading (see
    :func:`is_article_heading`). Lines before the first heading form an article of their own."""
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
    """The substitute :data:`SUBSTITUTE_NAME`: pool the articles of the given splits (in the
    order given), shuffle them with ``seed`` and cut them into train/valid/test by article.

    Returns the new splits' lines and their article counts. Whole articles stay together, so no
    paragraph of a test article is seen in training (Chapter 6, 06_wikitext, "The data").
    """
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions!r}")
    articles = [a for name in split_lines for a in split_articles(split_lines[name])]
    n = len(articles)
    if n < 3:
        raise ValueError(f"need at least 3 articles to re-split into train/valid/test, found {n}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed))).tolist()
    n_valid = max(1, round(fractions[1] * n))
    n_test = max(1, round(fractions[2] * n))
    n_train = n - n_valid - n_test
    if n_train < 1:
        raise ValueError(f"fractions {fractions!r} leave no training article out of {n}")
    cuts = {"train": order[:n_train], "valid": order[n_train:n_train + n_valid], "test": order[n_train + n_valid:]}
    # keep the articles of each new split in their original order (reading order within a split)
    splits = {s: [line for i in sorted(idx) for line in articles[i]] for s, idx in cuts.items()}
    return splits, {s: len(idx) for s, idx in cuts.items()}


@dataclass
class DataDescription:
    """Provenance of the text a run used: where it came from, which split played which role,
    and how big each split is (non-empty lines, whitespace tokens, articles).

    ``substitute`` is ``None`` for the official splits, else a sentence saying what was used
    instead (Chapter 6, 06_wikitext; DESIGN.md "Results, profiles and honesty").
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
        """True when the training split is the official WikiText-2 training split."""
        return self.substitute is None

    def to_dict(self) -> dict:
        """A JSON-ready dict (for result files)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "DataDescription":
        """Inverse of :meth:`to_dict` (extra keys added by results, e.g. ``sequences``, are kept in ``extra``)."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        extra = {k: v for k, v in d.items() if k not in cls.__dataclass_fields__}
        desc = cls(**known)
        desc.extra.update(extra)
        return desc

    def summary(self) -> str:
        """One line for a page or a log: which data, how many training tokens."""
        what = self.splits.get("train", "?")
        return f"{what} ({self.num_tokens.get('train', 0):,} training tokens; source: {self.source})"


@dataclass
class Corpus:
    """Train/valid/test lines plus the :class:`DataDescription` that says what they are."""

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
    nonempty = [s for s in lines if s.strip()]
    return len(nonempty), sum(len(s.split()) for s in nonempty), len(split_articles(lines))


def _describe(source, location, splits, names, substitute=None, seed=None) -> DataDescription:
    stats = {s: _split_stats(splits[s]) for s in SPLITS}
    return DataDescription(
        source=source, location=location, splits=names,
        num_lines={s: v[0] for s, v in stats.items()},
        num_tokens={s: v[1] for s, v in stats.items()},
        num_articles={s: v[2] for s, v in stats.items()},
        substitute=substitute, substitute_seed=seed,
    )


def _substitute_corpus(local: dict[str, list[str]], location: str, seed: int,
                       fractions=(0.8, 0.1, 0.1)) -> Corpus:
    pools = [s for s in ("valid", "test") if s in local]
    if not pools:
        raise WikiTextUnavailable(f"{location} has neither a training split nor validation/test splits")
    splits, counts = resplit_by_article({s: local[s] for s in pools}, fractions, seed)
    total = sum(counts.values())
    pct = "/".join(f"{round(100 * f)}" for f in fractions)
    pooled = " + ".join(f"WikiText-2 {s} ({len(split_articles(local[s]))} articles)" for s in pools)
    sentence = (
        f"The official WikiText-2 training split was not available. Substitute {SUBSTITUTE_NAME!r}: the "
        f"{total} articles of {pooled} shuffled (seed {seed}) and re-split by article {pct} into "
        f"train ({counts['train']} articles) / valid ({counts['valid']}) / test ({counts['test']}). "
        "This is NOT the WikiText-2 training split; perplexities are not comparable to published WikiText-2 numbers."
    )
    names = {s: f"{SUBSTITUTE_NAME} {s} ({counts[s]} articles of WikiText-2 {'+'.join(pools)})" for s in SPLITS}
    desc = _describe(f"local files, re-split ({SUBSTITUTE_NAME})", location, splits, names, sentence, seed)
    return Corpus(splits["train"], splits["valid"], splits["test"], desc)


def load_wikitext2(
    source: str = "auto",
    directory: str | os.PathLike | None = None,
    *,
    substitute_seed: int = 0,
    hub_timeout: float = 2.0,
) -> Corpus:
    """WikiText-2 as a :class:`Corpus` with its provenance (Chapter 6, 06_wikitext, "The data").

    ``source``:

    * ``"hub"``: the official splits from the Hugging Face hub; :class:`WikiTextUnavailable`
      (fast) when offline.
    * ``"local"``: the files of the local folder (``directory``, else ``$NMST_WIKITEXT_DIR``,
      else ``$NMST_DATA_DIR/wikitext-2``; see :func:`wikitext_dir`); with no training file there,
      the named substitute (validation + test articles re-split by article with
      ``substitute_seed``).
    * ``"substitute"``: always the substitute, built from the local validation and test files.
    * ``"auto"``: ``local`` when a local folder is configured (argument or either variable),
      else the hub. With neither a local folder nor the hub it raises
      :class:`WikiTextUnavailable` at once (within ``hub_timeout``; immediately when
      ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` is set), naming the variable to set and what
      the folder must hold.
    """
    allowed = ("auto", "hub", "local", "substitute")
    if source not in allowed:
        raise ValueError(f"source must be one of {allowed}, got {source!r}")
    path = wikitext_dir(directory)
    if source == "auto" and path is None and not hub_is_reachable(hub_timeout):
        _go_offline()
        raise WikiTextUnavailable(_no_local_data_message(
            f"the Hugging Face hub is not reachable (probe of huggingface.co:443 failed within {hub_timeout:g} s, "
            "or HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set)"))
    if source == "hub" or (source == "auto" and path is None):
        splits = load_wikitext2_from_hub(hub_timeout)
        names = {s: f"WikiText-2 {s} (official, {HUB_CONFIG})" for s in SPLITS}
        desc = _describe(f"Hugging Face hub: {HUB_DATASET} ({HUB_CONFIG})", HUB_DATASET, splits, names)
        return Corpus(splits["train"], splits["valid"], splits["test"], desc)
    local = load_local_splits(directory)
    location = _display_path(path)
    if source == "substitute" or "train" not in local:
        return _substitute_corpus(local, location, substitute_seed)
    missing = [s for s in SPLITS if s not in local]
    if missing:
        raise WikiTextUnavailable(f"{path} has a training split but lacks {missing}; add those files")
    names = {s: f"WikiText-2 {s} (local files)" for s in SPLITS}
    desc = _describe("local files", location, local, names)
    return Corpus(local["train"], local["valid"], local["test"], desc)


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


class Vocabulary:
    """Word <-> id map built from the training lines (Chapter 6, 06_wikitext, "The data").

    Ids: the kept words by decreasing frequency (ties: first occurrence), then ``<unk>`` (if
    not already a word), ``<pad>``, and ``<eos>`` as the LAST id, so ``eos_id == len(vocab) - 1``
    as the heads expect. ``<pad>`` only fills batches; it is never a target.
    """

    def __init__(self, itos: list[str]):
        if len(itos) != len(set(itos)):
            raise ValueError("vocabulary entries must be unique")
        if not itos or itos[-1] != EOS or PAD not in itos or UNK not in itos:
            raise ValueError(f"a vocabulary must contain {UNK!r} and {PAD!r} and end with {EOS!r}")
        self.itos = list(itos)
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.unk_id, self.pad_id, self.eos_id = self.stoi[UNK], self.stoi[PAD], self.stoi[EOS]

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and self.itos == other.itos

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} entries, eos_id={self.eos_id}, fingerprint={self.fingerprint[:12]})"

    @property
    def fingerprint(self) -> str:
        """sha256 of the id order: equal fingerprints mean interchangeable ids."""
        return hashlib.sha256("\n".join(self.itos).encode("utf-8")).hexdigest()

    def encode(self, tokens: list[str]) -> list[int]:
        """Ids of ``tokens``; words outside the vocabulary map to ``<unk>``."""
        get, unk = self.stoi.get, self.unk_id
        return [get(w, unk) for w in tokens]

    def decode(self, ids) -> list[str]:
        """Words of ``ids`` (negative ids, e.g. decoder padding -1, are skipped)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return [self.itos[i] for i in ids if i >= 0]


def build_vocabulary(lines: list[str], cap: int | None = None) -> Vocabulary:
    """The :class:`Vocabulary` of the whitespace tokens of ``lines``, optionally capped to the
    ``cap`` most frequent words (other words become ``<unk>``); plus ``<unk>``, ``<pad>``,
    ``<eos>`` (last). Chapter 6 (06_wikitext), "The data"."""
    if cap is not None:
        cap = check_positive_int(cap, "vocab cap")
    counts = Counter(w for line in lines for w in line.split())
    for special in (PAD, EOS):
        if special in counts:
            raise ValueError(f"the text already contains the reserved token {special!r}")
    unk_count = counts.pop(UNK, 0)
    words = [w for w, _ in counts.most_common(cap)]  # most_common is stable: ties keep first occurrence
    if not words and not unk_count:
        raise ValueError("cannot build a vocabulary from empty training data (no tokens found)")
    return Vocabulary(words + [UNK, PAD, EOS])


# --------------------------------------------------------------------------------------------
# Sequences and batches
# --------------------------------------------------------------------------------------------


class SequenceData:
    """The continuation-task sequences of one split, stored flat: ``tokens`` holds every
    sequence (context, continuation, ``<eos>``) back to back, ``offsets[i]``/``lengths[i]`` locate
    sequence i. ``lengths = line tokens + 1`` (the eos), all > ``context_len + 1``.

    Choi, Cho, Lee (2023) Sec. 4.1; DESIGN.md canonical "sequence"; Chapter 6 (06_wikitext).
    """

    def __init__(self, tokens: torch.Tensor, lengths: torch.Tensor, context_len: int, vocab: Vocabulary,
                 line_numbers: torch.Tensor | None = None):
        self.tokens = tokens
        self.lengths = lengths
        self.offsets = torch.cumsum(lengths, 0) - lengths
        self.context_len = context_len
        self.vocab = vocab
        self.line_numbers = line_numbers if line_numbers is not None else torch.arange(len(lengths))

    def __len__(self) -> int:
        return int(self.lengths.numel())

    def __repr__(self) -> str:
        return f"SequenceData({len(self)} sequences, {self.num_tokens} tokens, k={self.context_len})"

    @property
    def num_tokens(self) -> int:
        """All stored tokens (contexts, continuations, eos)."""
        return int(self.tokens.numel())

    @property
    def continuation_lengths(self) -> torch.Tensor:
        """|y| per sequence: continuation tokens including ``<eos>`` (the scored tokens)."""
        return self.lengths - self.context_len

    @property
    def num_target_tokens(self) -> int:
        """Scored tokens in the split: continuation tokens including ``<eos>``."""
        return int(self.continuation_lengths.sum())

    def sequence(self, i: int) -> torch.Tensor:
        """Sequence i: context, continuation, eos."""
        start = int(self.offsets[i])
        return self.tokens[start:start + int(self.lengths[i])]

    def contexts(self, indices=None) -> torch.Tensor:
        """The contexts x (first k tokens) of the chosen sequences, ``LongTensor[n, k]``."""
        idx = torch.arange(len(self)) if indices is None else torch.as_tensor(indices, dtype=torch.long)
        return self.tokens[self.offsets[idx, None] + torch.arange(self.context_len)]

    def subset(self, indices) -> "SequenceData":
        """The chosen sequences as a new :class:`SequenceData` (e.g. a token budget)."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        batch = make_batch(self, idx)
        mask = torch.arange(batch.tokens.shape[1]) < batch.lengths[:, None]
        return SequenceData(batch.tokens[mask], batch.lengths.clone(), self.context_len, self.vocab,
                            self.line_numbers[idx])


def make_sequences(lines: list[str], vocab: Vocabulary, context_len: int = CONTEXT_LEN) -> SequenceData:
    """Continuation-task sequences from lines (Choi, Cho, Lee (2023) Sec. 4.1; Chapter 6,
    06_wikitext): each line whose ids (one per word for a :class:`Vocabulary`, one per piece
    for a :class:`nmst_lib.subwords.SubwordVocabulary`) number more than ``context_len``
    becomes its ids followed by ``<eos>``; shorter lines are dropped. Built once; batches are tensor gathers."""
    context_len = check_positive_int(context_len, "context_len")
    encoded = [(n, vocab.encode(line.split())) for n, line in enumerate(lines)]
    kept = [(n, ids) for n, ids in encoded if len(ids) > context_len]
    ids = [i for _, line_ids in kept for i in line_ids + [vocab.eos_id]]
    lengths = torch.tensor([len(line_ids) + 1 for _, line_ids in kept], dtype=torch.long)
    return SequenceData(torch.tensor(ids, dtype=torch.long), lengths, context_len, vocab,
                        torch.tensor([n for n, _ in kept], dtype=torch.long))


@dataclass
class Batch:
    """Padded sequences and the masks the loss and the heads need.

    ``tokens[B, T]`` (padded with ``<pad>``), ``lengths[B]``; the model reads ``inputs =
    tokens[:, :-1]`` and predicts ``targets = tokens[:, 1:]``. Prediction j is of token j+1,
    so it is a context prediction when j + 1 < k: ``context_mask[:, j] = j < k - 1`` (no eos
    mass, no loss; step t = j - k + 2 counts from 1 at the first continuation token);
    ``target_mask`` marks the scored predictions (continuation tokens and eos, not padding).
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    context_len: int

    @property
    def inputs(self) -> torch.Tensor:
        """What the model reads: ``tokens[:, :-1]``."""
        return self.tokens[:, :-1]

    @property
    def targets(self) -> torch.Tensor:
        """What position j predicts: ``tokens[:, 1:]``."""
        return self.tokens[:, 1:]

    @property
    def context_mask(self) -> torch.Tensor:
        """``[B, T-1]`` bool, True where the predicted token is a context token (j < k - 1)."""
        positions = torch.arange(self.tokens.shape[1] - 1, device=self.tokens.device)
        return (positions < self.context_len - 1).expand(self.tokens.shape[0], -1)

    @property
    def target_mask(self) -> torch.Tensor:
        """``[B, T-1]`` bool, True where the prediction is scored: continuation tokens and eos."""
        positions = torch.arange(self.tokens.shape[1] - 1, device=self.tokens.device)
        return (positions >= self.context_len - 1) & (positions < self.lengths.to(positions.device)[:, None] - 1)

    @property
    def num_target_tokens(self) -> int:
        """Number of scored predictions (continuation tokens including eos)."""
        return int((self.lengths - self.context_len).sum())

    def to(self, device) -> "Batch":
        """The batch on ``device``."""
        return Batch(self.tokens.to(device, non_blocking=True), self.lengths.to(device), self.context_len)


def make_batch(data: SequenceData, indices) -> Batch:
    """Gather sequences ``indices`` into a padded :class:`Batch` with one tensor gather."""
    idx = torch.as_tensor(indices, dtype=torch.long)
    if idx.numel() == 0:
        raise ValueError("a batch needs at least one sequence")
    lengths = data.lengths[idx]
    width = int(lengths.max())
    positions = torch.arange(width)
    inside = positions < lengths[:, None]
    where = (data.offsets[idx, None] + positions).clamp(max=data.num_tokens - 1)
    tokens = torch.where(inside, data.tokens[where], data.vocab.pad_id)
    return Batch(tokens, lengths, data.context_len)


def bucket_batches(
    lengths: torch.Tensor,
    batch_size: int,
    *,
    max_tokens: int | None = None,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
    bucket_factor: int = 50,
) -> list[torch.Tensor]:
    """Index batches of similar lengths (Chapter 6, 06_wikitext, "Training").

    Shuffled (with ``generator``) or in order, the indices are cut into chunks of
    ``bucket_factor * batch_size``, sorted by length within each chunk (all at once when not
    shuffling), and cut into batches of at most ``batch_size`` sequences and, when
    ``max_tokens`` is given, at most ``max_tokens`` padded tokens (a longer single sequence gets
    a batch of its own). With ``shuffle`` the batch order is shuffled too.
    """
    batch_size = check_positive_int(batch_size, "batch_size")
    if max_tokens is not None:
        max_tokens = check_positive_int(max_tokens, "max_tokens")
    n = int(lengths.numel())
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    chunk = bucket_factor * batch_size if shuffle else max(n, 1)
    batches: list[torch.Tensor] = []
    for start in range(0, n, chunk):
        idx = order[start:start + chunk]
        idx = idx[torch.argsort(lengths[idx], stable=True)]
        sorted_len = lengths[idx]
        s = 0
        while s < idx.numel():
            size = min(batch_size, idx.numel() - s)
            if max_tokens is not None:  # sorted ascending: padded size grows with the batch end
                fits = torch.arange(1, size + 1) * sorted_len[s:s + size] <= max_tokens
                size = max(1, int(fits.sum()))
            batches.append(idx[s:s + size])
            s += size
    if shuffle and batches:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The data-order generator of one training epoch: it depends only on ``(seed, epoch)``, so
    a resumed run sees the same batches in the same order."""
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))


def iterate_batches(
    data: SequenceData,
    batch_size: int,
    *,
    max_tokens: int | None = None,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    start: int = 0,
):
    """Yield :class:`Batch` es of ``data``; with ``shuffle`` the order depends only on
    ``(seed, epoch)``, so a resumed run sees the same batches (skip the first ``start``)."""
    gen = epoch_generator(seed, epoch) if shuffle else None
    for indices in bucket_batches(data.lengths, batch_size, max_tokens=max_tokens, shuffle=shuffle,
                                  generator=gen)[start:]:
        yield make_batch(data, indices)


# --------------------------------------------------------------------------------------------
# GPT-2 (byte-level BPE) sequences
# --------------------------------------------------------------------------------------------


def gpt2_tokenizer_dir(directory: str | os.PathLike | None = None) -> Path | None:
    """The local GPT-2 tokenizer folder (``vocab.json`` + ``merges.txt``): ``directory`` if given,
    else ``$NMST_DATA_DIR/gpt2-tokenizer``, else None (then :func:`load_gpt2_tokenizer` asks the
    Hugging Face hub for ``"gpt2"``)."""
    if directory is not None:
        return Path(directory).expanduser()
    root = data_root()
    return root / TOKENIZER_SUBDIR if root is not None else None


def default_gpt2_tokenizer_dir() -> Path | None:
    """Alias of :func:`gpt2_tokenizer_dir` without an argument (kept for existing callers)."""
    return gpt2_tokenizer_dir()


def load_gpt2_tokenizer(directory: str | os.PathLike | None = None):
    """The GPT-2 tokenizer (Choi, Cho, Lee (2023) Sec. 4.2; Chapter 6, 06_wikitext) from a folder
    holding ``vocab.json`` and ``merges.txt``: ``directory``, else ``$NMST_DATA_DIR/gpt2-tokenizer``;
    with neither, from the Hugging Face hub (``"gpt2"``). A named folder without both files is an
    error (no silent download). Uses ``GPT2Tokenizer``: in transformers 5,
    ``GPT2TokenizerFast(vocab_file=..., merges_file=...)`` silently returns an empty tokenizer."""
    from transformers import GPT2Tokenizer

    path = gpt2_tokenizer_dir(directory)
    if path is not None:
        if not ((path / "vocab.json").is_file() and (path / "merges.txt").is_file()):
            source = "the directory argument" if directory is not None else f"${DATA_DIR_ENV}/{TOKENIZER_SUBDIR}"
            raise FileNotFoundError(
                f"{path} (from {source}) must hold vocab.json and merges.txt, the GPT-2 tokenizer files "
                f"(encoder.json and vocab.bpe upstream); unset {DATA_DIR_ENV} to use the Hugging Face hub instead"
            )
        tok = GPT2Tokenizer.from_pretrained(str(path))
    else:
        offline_help = (f"Set {DATA_DIR_ENV} to a folder whose {TOKENIZER_SUBDIR}/ subfolder holds GPT-2's "
                        "vocab.json and merges.txt, or pass directory=...")
        # Probe first: offline, from_pretrained("gpt2") retries for minutes and then returns an EMPTY tokenizer.
        if not hub_is_reachable():
            _go_offline()
            raise FileNotFoundError(
                "the GPT-2 tokenizer is not available: no local copy is configured and the Hugging Face hub is not "
                f"reachable (or HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set). {offline_help}"
            )
        try:
            tok = GPT2Tokenizer.from_pretrained("gpt2")
        except OSError as err:
            raise FileNotFoundError(f"loading the GPT-2 tokenizer from the Hugging Face hub failed ({err}). "
                                    f"{offline_help}") from err
    if len(tok) != 50257 or tok.eos_token_id != 50256:
        raise ValueError(f"expected the GPT-2 tokenizer (50257 ids, eos 50256), got {len(tok)} ids, eos {tok.eos_token_id}")
    return tok


def _gpt2_byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's byte -> printable-character table (Radford et al. 2019, ``encoder.py``):
    byte-level BPE tokens are strings of these characters (``'Ġ'`` is the space byte)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_DECODER = _gpt2_byte_decoder()


class TokenizerVocabulary:
    """The parts of :class:`Vocabulary` that batches and traces use, for a BPE tokenizer whose
    eos is its last id (GPT-2: ``<|endoftext|>`` = 50256). Padding reuses the eos id (padded
    positions are never scored). Choi, Cho, Lee (2023) Sec. 4.2; Chapter 7 (07_gpt2)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.eos_id = int(tokenizer.eos_token_id)
        if self.eos_id != len(tokenizer) - 1:
            raise ValueError(f"eos ({self.eos_id}) must be the tokenizer's last id ({len(tokenizer) - 1})")
        self.pad_id = self.unk_id = self.eos_id
        self._fingerprint: str | None = None
        self._itos: list[str] | None = None

    def __len__(self) -> int:
        return len(self.tokenizer)

    def __repr__(self) -> str:
        return f"TokenizerVocabulary({len(self)} ids, eos_id={self.eos_id}, fingerprint={self.fingerprint[:12]})"

    @property
    def itos(self) -> list[str]:
        """The token strings in id order (byte-level symbols, e.g. ``'Ġthe'``)."""
        if self._itos is None:
            self._itos = list(self.tokenizer.convert_ids_to_tokens(list(range(len(self)))))
        return self._itos

    @property
    def fingerprint(self) -> str:
        """sha256 of the real vocabulary: every token string in id order (as
        :attr:`Vocabulary.fingerprint`), so equal fingerprints mean interchangeable ids; two
        tokenizers of the same size but different vocabularies differ. Chapter 7 (07_gpt2)."""
        if self._fingerprint is None:
            blob = json.dumps(self.itos, ensure_ascii=False)
            self._fingerprint = hashlib.sha256(blob.encode("utf-8")).hexdigest()
        return self._fingerprint

    def decode(self, ids) -> list[str]:
        """Token strings of ``ids`` (negative ids skipped), as the tokenizer stores them
        (``'Ġthe'``); :meth:`display` gives readable text."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return self.tokenizer.convert_ids_to_tokens([i for i in ids if i >= 0])

    def display(self, ids) -> list[str]:
        """Readable text of each token of ``ids`` (negative ids skipped): the token's bytes
        decoded as UTF-8, so ``'Ġthe'`` shows as ``' the'`` and eos as ``'<|endoftext|>'``.
        A token holding only part of a multi-byte character shows ``'\ufffd'`` for the missing
        part. ``''.join(display(ids))`` is the decoded text when no character is split across
        tokens. For pages, traces and tables of Chapter 7 (07_gpt2); HTML-escape before use."""
        out = []
        for token in self.decode(ids):
            if token and all(ch in _BYTE_DECODER for ch in token):
                out.append(bytes(_BYTE_DECODER[ch] for ch in token).decode("utf-8", errors="replace"))
            else:  # special tokens such as <|endoftext|> are stored as plain text
                out.append(token)
        return out


_BPE_CHUNK_LINES = 4096


def make_bpe_sequences(lines: list[str], tokenizer, context_len: int = CONTEXT_LEN,
                       max_len: int = 1024) -> SequenceData:
    """GPT-2 continuation-task sequences (Choi, Cho, Lee (2023) Sec. 4.2 and App. D; Chapter 7,
    07_gpt2): each non-empty line tokenised (with a leading space, as inside running text),
    followed by eos; sequences of at most ``context_len`` tokens (before eos) or longer than
    ``max_len`` (with eos) are dropped. Lines are tokenised in chunks, so that WikiText-103
    never holds all its ids as Python lists at once."""
    context_len = check_positive_int(context_len, "context_len")
    max_len = check_positive_int(max_len, "max_len")
    vocab = TokenizerVocabulary(tokenizer)
    texts = [(n, line.strip()) for n, line in enumerate(lines) if line.strip()]
    flat: list[torch.Tensor] = []
    lengths: list[int] = []
    numbers: list[int] = []
    for start in range(0, len(texts), _BPE_CHUNK_LINES):
        chunk = texts[start:start + _BPE_CHUNK_LINES]
        encoded = tokenizer([" " + t for _, t in chunk])["input_ids"]
        kept = [(n, ids) for (n, _), ids in zip(chunk, encoded) if context_len < len(ids) and len(ids) + 1 <= max_len]
        if kept:
            flat.append(torch.tensor([i for _, ids in kept for i in ids + [vocab.eos_id]], dtype=torch.long))
            lengths += [len(ids) + 1 for _, ids in kept]
            numbers += [n for n, _ in kept]
    tokens = torch.cat(flat) if flat else torch.zeros(0, dtype=torch.long)
    return SequenceData(tokens, torch.tensor(lengths, dtype=torch.long), context_len, vocab,
                        torch.tensor(numbers, dtype=torch.long))


# --------------------------------------------------------------------------------------------
# Raw WikiText for GPT-2 (Chapter 7), and a disk cache of its BPE sequences
# --------------------------------------------------------------------------------------------

_DETOK_JOINERS = {"@-@": "-", "@,@": ",", "@.@": "."}
_DETOK_CLOSE = {".", ",", ";", ":", "!", "?", ")", "]", "}", "%", "'s", "'re", "'ve", "'ll", "'d", "'m", "n't", "'t"}
_DETOK_OPEN = {"(", "[", "{", "$"}
_HEADING = re.compile(r"^((?:= )*=) (.*?) ((?:= )*=)$")


def wikitext_detokenize(line: str) -> str:
    """Undo WikiText's tokenisation of one line into readable running text (Chapter 7, 07_gpt2):
    ``" @-@ "`` -> ``"-"``, ``" @,@ "`` -> ``","``, ``" @.@ "`` -> ``"."``; no space before
    closing punctuation (``. , ; : ! ? ) ] } %``) and clitics (``'s``, ``n't``, ...), none after
    opening brackets and ``$``; double quotes paired within the line (``" lobster red "`` ->
    ``"lobster red"``); a lone ``'`` after a word ending in s closes a plural possessive;
    headings ``= = Section = =`` -> ``== Section ==`` (article titles ``= Title =`` stay, so
    :func:`is_article_heading` still finds them). ``<unk>`` is kept as text. Leading and trailing
    spaces are stripped. GPT-2 was pretrained on ordinary text, and the continuations shown in
    Chapter 7 must read like text; WikiText-103's raw release keeps the tokenised spacing, the
    NMST paper (Choi, Cho, Lee (2023) Sec. 4.2) does not say whether it was undone.
    """
    if not isinstance(line, str):
        raise TypeError(f"line must be a str, got {type(line).__name__}")
    s = line.strip()
    if not s:
        return ""
    heading = _HEADING.match(s)
    if heading and heading.group(1).count("=") == heading.group(3).count("="):
        bars = "=" * heading.group(1).count("=")
        return f"{bars} {wikitext_detokenize(heading.group(2))} {bars}"
    out: list[str] = []
    glue_next = False  # no space before the next token
    open_quote = False
    for tok in s.split():
        if tok in _DETOK_JOINERS:
            out.append(_DETOK_JOINERS[tok])
            glue_next = True
            continue
        glue = glue_next or not out
        glue_next = False
        if tok in _DETOK_CLOSE:
            glue = True
        elif tok in _DETOK_OPEN:
            glue_next = True
        elif tok == '"':
            if open_quote:
                glue = True
            else:
                glue_next = True
            open_quote = not open_quote
        elif tok == "'" and out and out[-1].endswith("s"):
            glue = True
        out.append(tok if glue else " " + tok)
    return "".join(out)


def _detokenized_corpus(corpus: Corpus) -> Corpus:
    splits = {s: [wikitext_detokenize(line) for line in corpus.split(s)] for s in SPLITS}
    return Corpus(splits["train"], splits["valid"], splits["test"], corpus.description)


def load_wikitext_raw(dataset: str = "wikitext-2", data_source: str = "auto", directory=None,
                      substitute_seed: int = 0, *, hub_timeout: float = 2.0) -> Corpus:
    """Raw WikiText text for GPT-2 fine-tuning (Choi, Cho, Lee (2023) Sec. 4.2 and App. D;
    Welleck et al. (2020) Sec. 5.3; Chapter 7, 07_gpt2), every line passed through
    :func:`wikitext_detokenize`, with a :class:`DataDescription` that says plainly what it is.

    ``dataset``: ``"wikitext-2"`` or ``"wikitext-103"`` (the papers' GPT-2 data).
    ``data_source``:

    * ``"hub"``: ``Salesforce/wikitext``, configuration ``wikitext-103-raw-v1`` or
      ``wikitext-2-raw-v1`` (:data:`RAW_HUB_CONFIGS`), through ``datasets``; fails fast with
      :class:`WikiTextUnavailable` when the hub is unreachable (as :func:`load_wikitext2`).
    * ``"local"``: the local tokenised WikiText-2 folder (see :func:`wikitext_dir`): its own
      splits when it has a training file, else the named substitute :data:`SUBSTITUTE_NAME`
      (validation + test articles re-split by article with ``substitute_seed``, exactly as
      ``load_wikitext2("substitute")``); ``<unk>`` stays in the text.
    * ``"substitute"``: always that substitute.
    * ``"auto"``: for ``"wikitext-2"``, ``"local"`` when a local folder is configured, else the
      hub (as :func:`load_wikitext2`); for ``"wikitext-103"``, the hub when it is reachable,
      else ``"local"`` (never silently: the description then says it is not WikiText-103).
    """
    if dataset not in RAW_HUB_CONFIGS:
        raise ValueError(f"dataset must be one of {tuple(RAW_HUB_CONFIGS)}, got {dataset!r}")
    allowed = ("auto", "hub", "local", "substitute")
    if data_source not in allowed:
        raise ValueError(f"data_source must be one of {allowed}, got {data_source!r}")
    config = RAW_HUB_CONFIGS[dataset]
    name = "WikiText-103" if dataset == "wikitext-103" else "WikiText-2"
    local_dir = wikitext_dir(directory)
    why = f"data_source={data_source!r} was asked for"
    if data_source == "auto":
        if dataset == "wikitext-103":
            data_source = "hub" if hub_is_reachable(hub_timeout) else "local"
            why = "the Hugging Face hub was not reachable"
        else:
            data_source = "local" if local_dir is not None else "hub"
            why = "a local WikiText-2 folder is configured (data_source='auto' prefers it for wikitext-2)"
        if data_source == "local" and local_dir is None:
            _go_offline()
            raise WikiTextUnavailable(_no_local_data_message(
                f"{name} (raw) needs the Hugging Face hub, which is not reachable (probe of huggingface.co:443 "
                f"failed within {hub_timeout:g} s, or HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set)"))
    if data_source == "hub":
        raw = load_wikitext2_from_hub(hub_timeout, config)
        splits = {s: [wikitext_detokenize(line) for line in raw[s]] for s in SPLITS}
        names = {s: f"{name} {s} (official, {config}, detokenised)" for s in SPLITS}
        desc = _describe(f"Hugging Face hub: {HUB_DATASET} ({config}), each line detokenised", HUB_DATASET,
                         splits, names)
        desc.extra.update({"dataset": dataset, "hub_config": config, "detokenized": True})
        return Corpus(splits["train"], splits["valid"], splits["test"], desc)
    corpus = load_wikitext2("substitute" if data_source == "substitute" else "local", directory,
                            substitute_seed=substitute_seed)
    corpus = _detokenized_corpus(corpus)
    old = corpus.description
    stats = {s: _split_stats(corpus.split(s)) for s in SPLITS}
    not_103 = " This is NOT WikiText-103." if dataset == "wikitext-103" else ""
    what = ("the local tokenised WikiText-2 (v1: rare words replaced by <unk>, kept as text)"
            + (" re-split by article" if old.substitute else ""))
    sentence = (
        f"Asked for {name} (raw) for GPT-2; the Hugging Face hub was not used ({why}). Used instead: {what}, each line "
        f"detokenised (wikitext_detokenize) and tokenised with GPT-2's BPE.{not_103} "
        + (old.substitute or "The splits are WikiText-2's own (local files).")
    )
    desc = DataDescription(
        source=old.source + ", detokenised", location=old.location,
        splits={s: f"{v}, detokenised" for s, v in old.splits.items()},
        num_lines={s: v[0] for s, v in stats.items()}, num_tokens={s: v[1] for s, v in stats.items()},
        num_articles={s: v[2] for s, v in stats.items()},
        substitute=sentence, substitute_seed=old.substitute_seed,
        extra={"dataset": dataset, "asked_for": f"{name} raw ({config})", "detokenized": True,
               "unk_in_text": True, "is_wikitext103": False},
    )
    return Corpus(corpus.train, corpus.valid, corpus.test, desc)


BPE_CACHE_FORMAT = 1


def bpe_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where :func:`bpe_sequences_cached` keeps its files: ``cache_dir`` if given, else
    ``<repo>/data/cache/bpe`` (git-ignored) in a source checkout, else
    ``<user cache>/bpe`` (``~/.cache/nmst_lib/bpe``). Chapter 7 (07_gpt2)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    from .experiments.results import is_source_checkout, user_cache_dir

    return repo_root() / "data" / "cache" / "bpe" if is_source_checkout() else user_cache_dir() / "bpe"


def _tokenizer_digest(tokenizer) -> str:
    """sha256 of everything that decides the ids: the whole serialised tokenizer (vocabulary,
    merges, pre-tokeniser, special tokens) when it has a ``tokenizers`` backend, else the vocabulary
    in id order and the class name."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        blob = backend.to_str()
    else:
        blob = json.dumps([type(tokenizer).__name__, sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])],
                          ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _lines_digest(lines) -> str:
    h = hashlib.sha256()
    for line in lines:
        b = line.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def bpe_sequences_cached(lines: list[str], tokenizer, context_len: int = CONTEXT_LEN, max_len: int = 1024,
                         cache_dir: str | os.PathLike | None = None) -> SequenceData:
    """:func:`make_bpe_sequences`, cached on disk (Chapter 7, 07_gpt2; the issue's "a second run
    does not re-tokenise").

    The cache file ``<cache dir>/<key>.safetensors`` (see :func:`bpe_cache_dir`) is named by a
    sha256 over the tokenizer (vocabulary + merges + settings), the text (every line), ``context_len``,
    ``max_len`` and the cache format, so different text or a different tokenizer can never reuse
    it. It is written atomically (temporary file + ``os.replace``); a file that cannot be read or
    whose stored key differs is rebuilt. The second call with the same inputs reads the ids
    from disk and does not tokenise.
    """
    context_len = check_positive_int(context_len, "context_len")
    max_len = check_positive_int(max_len, "max_len")
    if isinstance(lines, str) or not hasattr(lines, "__iter__"):
        raise TypeError(f"lines must be a list of strings, got {type(lines).__name__}")
    lines = list(lines)
    if not all(isinstance(line, str) for line in lines):
        raise TypeError("lines must be a list of strings")
    from safetensors import SafetensorError
    from safetensors.torch import load as st_load
    from safetensors.torch import save as st_save

    from .experiments.results import atomic_write_bytes

    key = hashlib.sha256(json.dumps({
        "format": BPE_CACHE_FORMAT, "tokenizer": _tokenizer_digest(tokenizer), "text": _lines_digest(lines),
        "context_len": context_len, "max_len": max_len}, sort_keys=True).encode()).hexdigest()
    path = bpe_cache_dir(cache_dir) / f"{key}.safetensors"
    vocab = TokenizerVocabulary(tokenizer)
    if path.is_file():
        try:
            raw = path.read_bytes()
            header_len = int.from_bytes(raw[:8], "little")
            meta = json.loads(raw[8:8 + header_len]).get("__metadata__") or {}
            if meta.get("key") == key:
                stored = st_load(raw)
                return SequenceData(stored["tokens"].long(), stored["lengths"].long(), context_len, vocab,
                                    stored["line_numbers"].long())
        except (SafetensorError, OSError, KeyError, ValueError, RuntimeError, AttributeError):
            pass  # unreadable or foreign: rebuilt below
    data = make_bpe_sequences(lines, tokenizer, context_len, max_len)
    ids_dtype = torch.int32 if len(vocab) < 2**31 else torch.long
    payload = st_save({"tokens": data.tokens.to(ids_dtype), "lengths": data.lengths,
                       "line_numbers": data.line_numbers},
                      metadata={"key": key, "format": str(BPE_CACHE_FORMAT), "context_len": str(context_len),
                                "max_len": str(max_len), "num_sequences": str(len(data)),
                                "vocab_fingerprint": vocab.fingerprint})
    try:
        atomic_write_bytes(path, payload)
    except OSError:  # a read-only cache is not an error: the sequences are still right
        pass
    return data
