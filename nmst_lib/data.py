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
import os
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
]

CONTEXT_LEN = 10
"""k: the number of context tokens (Choi, Cho, Lee (2023), Sec. 4.1)."""
EOS, PAD, UNK = "<eos>", "<pad>", "<unk>"
HUB_DATASET, HUB_CONFIG = "Salesforce/wikitext", "wikitext-2-v1"
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


def load_wikitext2_from_hub(timeout: float = 2.0) -> dict[str, list[str]]:
    """The official WikiText-2 (``Salesforce/wikitext``, ``wikitext-2-v1``) splits as stripped
    lines, through ``datasets`` (Merity et al. 2016; the NMST paper's data, Choi, Cho, Lee (2023)
    Sec. 4.1; Chapter 6, 06_wikitext).

    Fails fast with :class:`WikiTextUnavailable` when the hub is unreachable (and then sets
    ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` so later calls fail fast too).
    """
    if not hub_is_reachable(timeout):
        _go_offline()
        raise WikiTextUnavailable(
            f"the Hugging Face hub is not reachable (probe of huggingface.co:443 failed within {timeout:g} s, "
            "or HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set), so the official WikiText-2 splits cannot be "
            f"downloaded. Use a local copy instead: source='local' or 'auto' with ${DATA_DIR_ENV} (a folder "
            f"whose {WIKITEXT_SUBDIR}/ holds {_WIKITEXT_FOLDER_HOLDS}), ${WIKITEXT_DIR_ENV} or directory=...; "
            f"without a training file there the named substitute {SUBSTITUTE_NAME!r} is used."
        )
    import datasets

    try:
        ds = datasets.load_dataset(HUB_DATASET, HUB_CONFIG)
    except Exception as err:  # ConnectionError, hub errors: report them in our words
        raise WikiTextUnavailable(f"loading {HUB_DATASET} ({HUB_CONFIG}) from the hub failed: {err}") from err
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
    06_wikitext): each non-empty line with more than ``context_len`` tokens becomes its ids
    followed by ``<eos>``; shorter lines are dropped. Built once; batches are tensor gathers."""
    context_len = check_positive_int(context_len, "context_len")
    kept = [(n, line.split()) for n, line in enumerate(lines)]
    kept = [(n, toks) for n, toks in kept if len(toks) > context_len]
    ids = [i for _, toks in kept for i in vocab.encode(toks) + [vocab.eos_id]]
    lengths = torch.tensor([len(toks) + 1 for _, toks in kept], dtype=torch.long)
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


class TokenizerVocabulary:
    """The parts of :class:`Vocabulary` that batches and traces use, for a BPE tokenizer whose
    eos is its last id (GPT-2: ``<|endoftext|>`` = 50256). Padding reuses the eos id (padded
    positions are never scored)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.eos_id = int(tokenizer.eos_token_id)
        if self.eos_id != len(tokenizer) - 1:
            raise ValueError(f"eos ({self.eos_id}) must be the tokenizer's last id ({len(tokenizer) - 1})")
        self.pad_id = self.unk_id = self.eos_id

    def __len__(self) -> int:
        return len(self.tokenizer)

    @property
    def fingerprint(self) -> str:
        """Identifies the tokenizer (class, size, eos) for checkpoint/data checks."""
        return hashlib.sha256(f"{type(self.tokenizer).__name__}:{len(self)}:{self.eos_id}".encode()).hexdigest()

    def decode(self, ids) -> list[str]:
        """Token strings of ``ids`` (negative ids skipped)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return self.tokenizer.convert_ids_to_tokens([i for i in ids if i >= 0])


def make_bpe_sequences(lines: list[str], tokenizer, context_len: int = CONTEXT_LEN,
                       max_len: int = 1024) -> SequenceData:
    """GPT-2 continuation-task sequences (Choi, Cho, Lee (2023) Sec. 4.2 and App. D; Chapter 6,
    06_wikitext): each non-empty line tokenised, followed by eos; sequences of at most
    ``context_len`` tokens (before eos) or longer than ``max_len`` (with eos) are dropped."""
    context_len = check_positive_int(context_len, "context_len")
    vocab = TokenizerVocabulary(tokenizer)
    texts = [(n, line.strip()) for n, line in enumerate(lines) if line.strip()]
    encoded = tokenizer([" " + t for _, t in texts])["input_ids"] if texts else []
    kept = [(n, ids) for (n, _), ids in zip(texts, encoded) if context_len < len(ids) and len(ids) + 1 <= max_len]
    flat = [i for _, ids in kept for i in ids + [vocab.eos_id]]
    lengths = torch.tensor([len(ids) + 1 for _, ids in kept], dtype=torch.long)
    return SequenceData(torch.tensor(flat, dtype=torch.long), lengths, context_len, vocab,
                        torch.tensor([n for n, _ in kept], dtype=torch.long))
