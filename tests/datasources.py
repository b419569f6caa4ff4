"""Data sources of the library tests (imported by tests/conftest.py and the test modules).

A module of its own, not ``conftest``: with pytest's default import mode, ``from conftest import``
in a test module can pick up ``tests/site/conftest.py`` when the whole ``tests/`` folder runs.

* ``FIXTURE_DATA_DIR``: the fixture corpus in the layout ``NMST_DATA_DIR`` expects (only
  ``wikitext-2/``; synthetic text written by ``tests/fixtures/make_corpus.py``).
* ``REAL_WIKITEXT_DIR`` / ``REAL_TOKENIZER_DIR``: the real data that ``NMST_WIKITEXT_DIR`` /
  ``NMST_DATA_DIR`` named when pytest started, or None; ``NO_REAL_WIKITEXT`` /
  ``NO_REAL_TOKENIZER``: the skip reasons when they are absent.
* ``write_tiny_bpe_tokenizer``: GPT-2-format files of a tiny byte-level BPE tokenizer.
* ``fixture_data_root`` and ``use_data_root``: a data root of the fixture corpus and a GPT-2
  tokenizer, and the environment that points the library at a data root, offline.
"""

from __future__ import annotations

import json
from pathlib import Path

from nmst_lib import data as D

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIXTURE_DATA_DIR = FIXTURES / "data"
"""A data root in the layout NMST_DATA_DIR expects (only ``wikitext-2/``; no tokenizer)."""
FIXTURE_WIKITEXT_DIR = FIXTURE_DATA_DIR / D.WIKITEXT_SUBDIR

# The real data as configured when the session started, before any test touches the environment.
_REAL_WIKITEXT = D.wikitext_dir()
_REAL_TOKENIZER = D.gpt2_tokenizer_dir()
_HOW = ("set NMST_DATA_DIR to a folder whose wikitext-2/ holds the real valid.txt and test.txt and whose "
        "gpt2-tokenizer/ holds GPT-2's vocab.json and merges.txt (scripts/test.sh does this on the project's "
        "machines, where ../shared/data exists)")


def _real_wikitext_dir() -> Path | None:
    path = _REAL_WIKITEXT
    if path is None or not ((path / "valid.txt").is_file() and (path / "test.txt").is_file()):
        return None
    if path.resolve() == FIXTURE_WIKITEXT_DIR.resolve():
        return None
    return path


def _real_tokenizer_dir() -> Path | None:
    path = _REAL_TOKENIZER
    if path is None or not ((path / "vocab.json").is_file() and (path / "merges.txt").is_file()):
        return None
    return path


REAL_WIKITEXT_DIR = _real_wikitext_dir()
"""The real WikiText-2 folder (with ``valid.txt`` and ``test.txt``) that the environment named
at session start (not the fixture corpus), or None."""
REAL_TOKENIZER_DIR = _real_tokenizer_dir()
"""The real GPT-2 tokenizer folder (``vocab.json`` + ``merges.txt``) named at session start, or None."""

NO_REAL_WIKITEXT = (
    "needs the real WikiText-2 validation and test splits (the environment names "
    + ("nothing" if _REAL_WIKITEXT is None else f"{_REAL_WIKITEXT}, without valid.txt/test.txt") + "): " + _HOW)
NO_REAL_TOKENIZER = (
    "needs GPT-2's real tokenizer files, not shipped with the project (1.5 MB; the environment gives "
    + ("no NMST_DATA_DIR" if _REAL_TOKENIZER is None else f"{_REAL_TOKENIZER}, without vocab.json/merges.txt")
    + "): " + _HOW)


# ------------------------------------------------------------------------ a tiny BPE tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (Radford et al. 2019, encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


TINY_MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "o u", "a i", "e a", "Ġ o", "Ġo f", "Ġa n", "Ġan d", "Ġ ,", "Ġ .",
               "Ġ i", "Ġi n", "Ġ s", "t r", "Ġ c", "c h", "Ġ b"]


def write_tiny_bpe_tokenizer(folder: Path) -> Path:
    """Write ``vocab.json`` + ``merges.txt`` of a byte-level BPE tokenizer in GPT-2's file format:
    the 256 byte symbols, one token per merge of :data:`TINY_MERGES`, and ``<|endoftext|>`` as the
    last id (as in GPT-2, so that eos is last)."""
    folder.mkdir(parents=True, exist_ok=True)
    symbols = list(_bytes_to_unicode().values())
    symbols += ["".join(m.split()) for m in TINY_MERGES]
    vocab = {s: i for i, s in enumerate(symbols)}
    vocab["<|endoftext|>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(TINY_MERGES) + "\n", encoding="utf-8")
    return folder


# ------------------------------------------------------------------------ pointing at a data root


def fixture_data_root(folder: Path, tokenizer_dir: Path) -> Path:
    """``folder/data``: a data root in the layout ``NMST_DATA_DIR`` expects, linking the fixture
    WikiText-2 and ``tokenizer_dir`` as GPT-2's tokenizer."""
    root = folder / "data"
    root.mkdir()
    (root / D.WIKITEXT_SUBDIR).symlink_to(FIXTURE_WIKITEXT_DIR, target_is_directory=True)
    (root / D.TOKENIZER_SUBDIR).symlink_to(tokenizer_dir, target_is_directory=True)
    return root


def use_data_root(mp, root: Path) -> None:
    """Through the ``pytest.MonkeyPatch`` ``mp``: the library reads the data root ``root``
    (``NMST_DATA_DIR``; ``NMST_WIKITEXT_DIR`` unset), the Hugging Face hub stays offline, and no
    torchrun variable (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``) makes a run one of several
    processes."""
    mp.setenv(D.DATA_DIR_ENV, str(root))
    mp.delenv(D.WIKITEXT_DIR_ENV, raising=False)
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("HF_DATASETS_OFFLINE", "1")
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        mp.delenv(name, raising=False)
