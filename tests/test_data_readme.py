"""data/README.md: its checksums are those of the real data, and data/ holds no data.

* The checksum table lists the files the loaders expect, relative to the folder
  ``NMST_DATA_DIR`` names; each row is checked against the real data that the environment
  named when pytest started (``tests/datasources.py``: ``NMST_WIKITEXT_DIR`` or
  ``$NMST_DATA_DIR/wikitext-2``, ``$NMST_DATA_DIR/gpt2-tokenizer``; never the fixture corpus),
  and skips with the reason when that data is absent (a plain clone).
* ``data/`` is committed (its README is not ignored), what git tracks there is small text,
  and the caches and checkpoints the library writes below it are ignored.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from datasources import (
    NO_REAL_TOKENIZER,
    NO_REAL_WIKITEXT,
    REAL_TOKENIZER_DIR,
    REAL_WIKITEXT_DIR,
)

REPO = Path(__file__).resolve().parents[1]
README = REPO / "data" / "README.md"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([\d,]+)\s*\|\s*`([0-9a-f]{64})`\s*\|\s*$", re.MULTILINE)
#: Where each top folder of the table is found: the real data named at session start.
REAL_FOLDERS = {"wikitext-2": (REAL_WIKITEXT_DIR, NO_REAL_WIKITEXT),
                "gpt2-tokenizer": (REAL_TOKENIZER_DIR, NO_REAL_TOKENIZER)}
#: What the library writes below data/ (git-ignored).
IGNORED = ("data/cache/bpe/x.pt", "data/checkpoints/wikitext2/x.safetensors")
LARGEST_TRACKED_BYTES = 100_000


def checksum_rows(text: str) -> list[tuple[str, int, str]]:
    """The rows ``(relative path, bytes, sha256)`` of the README's checksum table."""
    return [(path, int(size.replace(",", "")), digest) for path, size, digest in ROW.findall(text)]


ROWS = checksum_rows(README.read_text(encoding="utf-8"))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def test_the_table_lists_the_files_the_loaders_expect():
    assert sorted(path for path, _, _ in ROWS) == [
        "gpt2-tokenizer/merges.txt", "gpt2-tokenizer/vocab.json", "wikitext-2/test.txt", "wikitext-2/valid.txt"]


@pytest.mark.parametrize(("path", "size", "digest"), ROWS, ids=[row[0] for row in ROWS])
def test_the_real_data_has_the_listed_checksum(path, size, digest):
    folder, reason = REAL_FOLDERS[path.split("/")[0]]
    if folder is None:
        pytest.skip(reason)
    file = folder / path.split("/", 1)[1]
    assert file.stat().st_size == size, f"{file}: {file.stat().st_size:,} bytes, data/README.md says {size:,}"
    assert sha256_of(file) == digest, (
        f"{file} is not the copy the book's results were made with (SHA-256 differs from data/README.md)")


def _git(*args: str) -> subprocess.CompletedProcess | None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return None
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)


def test_data_is_committed_small_and_its_caches_ignored():
    if _git("rev-parse", "--git-dir") is None:
        pytest.skip("not a git checkout (e.g. an unpacked sdist): nothing to check about what git tracks")
    assert _git("check-ignore", "-q", "data/README.md").returncode == 1, ".gitignore ignores data/README.md"
    for path in IGNORED:
        assert _git("check-ignore", "-q", path).returncode == 0, f".gitignore does not ignore {path}"
    tracked = _git("ls-files", "data").stdout.split()
    big = [p for p in tracked if (REPO / p).stat().st_size > LARGEST_TRACKED_BYTES]
    assert not big, f"data files committed under data/ (keep data out of git): {big}"


def test_the_checksum_reader_reads_the_table_format():
    text = "| file | bytes | SHA-256 |\n| --- | --- | --- |\n| `a/b.txt` | 1,234 | `" + "0" * 64 + "` |\n"
    assert checksum_rows(text) == [("a/b.txt", 1234, "0" * 64)]
    assert sha256_of(README) == hashlib.sha256(README.read_bytes()).hexdigest()
