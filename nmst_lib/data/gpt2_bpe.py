"""GPT-2's byte-level BPE (Chapter 7, 07_gpt2): the tokenizer, its
vocabulary in the form batches and traces use, the continuation-task
sequences of raw WikiText, and a disk cache of those sequences.

The lines come from :func:`~nmst_lib.data.load_wikitext_raw`; the sequences
are :class:`~nmst_lib.data.SequenceData` as for the word-level models, with
:class:`TokenizerVocabulary` in place of the word
:class:`~nmst_lib.data.Vocabulary` (Choi, Cho, Lee (2023) Sec. 4.2 and App.
D). Tokenising WikiText-103 takes minutes, so :func:`bpe_sequences_cached`
keeps the ids on disk, under a key that changes with the tokenizer or the
text.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from pathlib import Path

import torch

from .._validation import check_positive_int
from ..files import (
    atomic_write_bytes,
    is_source_checkout,
    repo_root,
    user_cache_dir,
)
from .sequences import CONTEXT_LEN, SequenceData
from .sources import (
    DATA_DIR_ENV,
    TOKENIZER_SUBDIR,
    go_offline,
    gpt2_tokenizer_dir,
    hub_is_reachable,
)

__all__ = [
    "BPE_CACHE_FORMAT",
    "TokenizerVocabulary",
    "bpe_cache_dir",
    "bpe_sequences_cached",
    "load_gpt2_tokenizer",
    "make_bpe_sequences",
]


# --------------------------------------------------------------------------
# The tokenizer and its vocabulary
# --------------------------------------------------------------------------


def load_gpt2_tokenizer(directory: str | os.PathLike | None = None):
    """The GPT-2 tokenizer (Choi, Cho, Lee (2023) Sec. 4.2; Chapter 7,
    07_gpt2) from a folder holding ``vocab.json`` and ``merges.txt``:
    ``directory``, else ``$NMST_DATA_DIR/gpt2-tokenizer``; with neither, from
    the Hugging Face hub (``"gpt2"``). A named folder without both files is
    an error (no silent download). Uses ``GPT2Tokenizer``: in transformers 5,
    ``GPT2TokenizerFast(vocab_file=..., merges_file=...)`` silently returns
    an empty tokenizer."""
    from transformers import GPT2Tokenizer

    path = gpt2_tokenizer_dir(directory)
    if path is not None:
        if not (
            (path / "vocab.json").is_file() and (path / "merges.txt").is_file()
        ):
            source = (
                "the directory argument"
                if directory is not None
                else f"${DATA_DIR_ENV}/{TOKENIZER_SUBDIR}"
            )
            raise FileNotFoundError(
                f"{path} (from {source}) must hold vocab.json and merges.txt, "
                "the GPT-2 tokenizer files (encoder.json and vocab.bpe "
                f"upstream); unset {DATA_DIR_ENV} to use the Hugging Face hub "
                "instead"
            )
        tok = GPT2Tokenizer.from_pretrained(str(path))
    else:
        tok = _gpt2_tokenizer_from_hub()
    if len(tok) != 50257 or tok.eos_token_id != 50256:
        raise ValueError(
            "expected the GPT-2 tokenizer (50257 ids, eos 50256), got "
            f"{len(tok)} ids, eos {tok.eos_token_id}"
        )
    return tok


def _gpt2_tokenizer_from_hub():
    """``GPT2Tokenizer.from_pretrained("gpt2")``, after a probe: offline,
    ``from_pretrained`` retries for minutes and then returns an EMPTY
    tokenizer."""
    from transformers import GPT2Tokenizer

    offline_help = (
        f"Set {DATA_DIR_ENV} to a folder whose {TOKENIZER_SUBDIR}/ subfolder "
        "holds GPT-2's vocab.json and merges.txt, or pass directory=..."
    )
    if not hub_is_reachable():
        go_offline()
        raise FileNotFoundError(
            "the GPT-2 tokenizer is not available: no local copy is "
            "configured and the Hugging Face hub is not reachable (or "
            f"HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set). {offline_help}"
        )
    try:
        return GPT2Tokenizer.from_pretrained("gpt2")
    except OSError as err:
        raise FileNotFoundError(
            "loading the GPT-2 tokenizer from the Hugging Face hub failed "
            f"({err}). {offline_help}"
        ) from err


def _gpt2_byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's byte -> printable-character table (Radford et al.
    2019, ``encoder.py``): byte-level BPE tokens are strings of these
    characters (``'Ġ'`` is the space byte)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
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
    """The parts of :class:`~nmst_lib.data.Vocabulary` that batches and
    traces use, for a BPE tokenizer whose eos is its last id (GPT-2:
    ``<|endoftext|>`` = 50256). Padding reuses the eos id (padded positions
    are never scored). Choi, Cho, Lee (2023) Sec. 4.2; Chapter 7
    (07_gpt2)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.eos_id = int(tokenizer.eos_token_id)
        if self.eos_id != len(tokenizer) - 1:
            raise ValueError(
                f"eos ({self.eos_id}) must be the tokenizer's last id "
                f"({len(tokenizer) - 1})"
            )
        self.pad_id = self.unk_id = self.eos_id
        self._fingerprint: str | None = None
        self._itos: list[str] | None = None

    def __len__(self) -> int:
        return len(self.tokenizer)

    def __repr__(self) -> str:
        return (
            f"TokenizerVocabulary({len(self)} ids, eos_id={self.eos_id}, "
            f"fingerprint={self.fingerprint[:12]})"
        )

    @property
    def itos(self) -> list[str]:
        """The token strings in id order (byte-level symbols, e.g.
        ``'Ġthe'``)."""
        if self._itos is None:
            ids = list(range(len(self)))
            self._itos = list(self.tokenizer.convert_ids_to_tokens(ids))
        return self._itos

    @property
    def fingerprint(self) -> str:
        """sha256 of the real vocabulary: every token string in id order (as
        :attr:`Vocabulary.fingerprint <nmst_lib.data.Vocabulary.fingerprint>`),
        so equal fingerprints mean interchangeable ids; two tokenizers of the
        same size but different vocabularies differ. Chapter 7 (07_gpt2)."""
        if self._fingerprint is None:
            blob = json.dumps(self.itos, ensure_ascii=False)
            digest = hashlib.sha256(blob.encode("utf-8")).hexdigest()
            self._fingerprint = digest
        return self._fingerprint

    def decode(self, ids) -> list[str]:
        """Token strings of ``ids`` (negative ids skipped), as the tokenizer
        stores them (``'Ġthe'``); :meth:`display` gives readable text."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        kept = [i for i in ids if i >= 0]
        return self.tokenizer.convert_ids_to_tokens(kept)

    def display(self, ids) -> list[str]:
        """Readable text of each token of ``ids`` (negative ids skipped): the
        token's bytes decoded as UTF-8, so ``'Ġthe'`` shows as ``' the'`` and
        eos as ``'<|endoftext|>'``. A token holding only part of a multi-byte
        character shows ``'\\ufffd'`` for the missing part.
        ``''.join(display(ids))`` is the decoded text when no character is
        split across tokens. For pages, traces and tables of Chapter 7
        (07_gpt2); HTML-escape before use."""
        return [_readable(token) for token in self.decode(ids)]

    def texts(self, *id_lists) -> list[str]:
        """Readable text of consecutive pieces of one token stream (e.g. a context and its
        continuation), one string per piece, their bytes decoded as UTF-8 *together*: a
        character whose bytes two tokens share is whole, and goes to the piece that completes
        it. (Joining :meth:`display` shows such a character as two ``'\\ufffd'``.) Only bytes
        missing at the stream's ends show as ``'\\ufffd'``. Chapter 7's stored examples."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out = []
        for k, ids in enumerate(id_lists):
            raw = b"".join(_token_bytes(token) for token in self.decode(ids))
            out.append(decoder.decode(raw, final=k == len(id_lists) - 1))
        return out


def _token_bytes(token: str) -> bytes:
    """The bytes a byte-level token stands for; a special token (``<|endoftext|>``) as its text."""
    if token and all(ch in _BYTE_DECODER for ch in token):
        return bytes(_BYTE_DECODER[ch] for ch in token)
    return token.encode("utf-8")


def _readable(token: str) -> str:
    """One byte-level token as text; special tokens such as
    ``<|endoftext|>`` are stored as plain text and come back as they are."""
    return _token_bytes(token).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------
# Sequences
# --------------------------------------------------------------------------

_BPE_CHUNK_LINES = 4096


def make_bpe_sequences(
    lines: list[str],
    tokenizer,
    context_len: int = CONTEXT_LEN,
    max_len: int = 1024,
) -> SequenceData:
    """GPT-2 continuation-task sequences (Choi, Cho, Lee (2023) Sec. 4.2 and
    App. D; Chapter 7, 07_gpt2): each non-empty line tokenised (with a
    leading space, as inside running text), followed by eos; sequences of at
    most ``context_len`` tokens (before eos) or longer than ``max_len`` (with
    eos) are dropped. Lines are tokenised in chunks, so that WikiText-103
    never holds all its ids as Python lists at once."""
    context_len = check_positive_int(context_len, "context_len")
    max_len = check_positive_int(max_len, "max_len")
    vocab = TokenizerVocabulary(tokenizer)
    texts = [(n, line.strip()) for n, line in enumerate(lines) if line.strip()]
    flat: list[torch.Tensor] = []
    lengths: list[int] = []
    numbers: list[int] = []
    for start in range(0, len(texts), _BPE_CHUNK_LINES):
        chunk = texts[start : start + _BPE_CHUNK_LINES]
        encoded = tokenizer([" " + t for _, t in chunk])["input_ids"]
        kept = [
            (n, ids)
            for (n, _), ids in zip(chunk, encoded)
            if context_len < len(ids) and len(ids) + 1 <= max_len
        ]
        if kept:
            chunk_ids = [i for _, ids in kept for i in ids + [vocab.eos_id]]
            flat.append(torch.tensor(chunk_ids, dtype=torch.long))
            lengths += [len(ids) + 1 for _, ids in kept]
            numbers += [n for n, _ in kept]
    tokens = torch.cat(flat) if flat else torch.zeros(0, dtype=torch.long)
    return SequenceData(
        tokens,
        torch.tensor(lengths, dtype=torch.long),
        context_len,
        vocab,
        torch.tensor(numbers, dtype=torch.long),
    )


# --------------------------------------------------------------------------
# The disk cache of BPE sequences
# --------------------------------------------------------------------------

BPE_CACHE_FORMAT = 1
"""Version of the cache files of :func:`bpe_sequences_cached` (part of the
key: a new format never reads an old file)."""


def bpe_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where :func:`bpe_sequences_cached` keeps its files: ``cache_dir`` if
    given, else ``<repo>/data/cache/bpe`` (git-ignored) in a source checkout,
    else ``<user cache>/bpe`` (``~/.cache/nmst_lib/bpe``). Chapter 7
    (07_gpt2)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if is_source_checkout():
        return repo_root() / "data" / "cache" / "bpe"
    return user_cache_dir() / "bpe"


def _tokenizer_digest(tokenizer) -> str:
    """sha256 of everything that decides the ids: the whole serialised
    tokenizer (vocabulary, merges, pre-tokeniser, special tokens) when it has
    a ``tokenizers`` backend, else the vocabulary in id order and the class
    name."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        blob = backend.to_str()
    else:
        vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
        blob = json.dumps(
            [type(tokenizer).__name__, vocab], ensure_ascii=False
        )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _lines_digest(lines) -> str:
    h = hashlib.sha256()
    for line in lines:
        b = line.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _cache_key(lines, tokenizer, context_len: int, max_len: int) -> str:
    """sha256 over the tokenizer, the text, ``context_len``, ``max_len``
    and :data:`BPE_CACHE_FORMAT`: the name of the cache file."""
    parts = {
        "format": BPE_CACHE_FORMAT,
        "tokenizer": _tokenizer_digest(tokenizer),
        "text": _lines_digest(lines),
        "context_len": context_len,
        "max_len": max_len,
    }
    blob = json.dumps(parts, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def _check_lines(lines) -> list[str]:
    if isinstance(lines, str) or not hasattr(lines, "__iter__"):
        raise TypeError(
            f"lines must be a list of strings, got {type(lines).__name__}"
        )
    lines = list(lines)
    if not all(isinstance(line, str) for line in lines):
        raise TypeError("lines must be a list of strings")
    return lines


def bpe_sequences_cached(
    lines: list[str],
    tokenizer,
    context_len: int = CONTEXT_LEN,
    max_len: int = 1024,
    cache_dir: str | os.PathLike | None = None,
) -> SequenceData:
    """:func:`make_bpe_sequences`, cached on disk (Chapter 7, 07_gpt2; the
    issue's "a second run does not re-tokenise").

    The cache file ``<cache dir>/<key>.safetensors`` (see
    :func:`bpe_cache_dir`) is named by a sha256 over the tokenizer
    (vocabulary + merges + settings), the text (every line),
    ``context_len``, ``max_len`` and the cache format, so different text or
    a different tokenizer can never reuse it. It is written atomically
    (temporary file + ``os.replace``); a file that cannot be read or whose
    stored key differs is rebuilt. The second call with the same inputs
    reads the ids from disk and does not tokenise.
    """
    context_len = check_positive_int(context_len, "context_len")
    max_len = check_positive_int(max_len, "max_len")
    lines = _check_lines(lines)
    key = _cache_key(lines, tokenizer, context_len, max_len)
    path = bpe_cache_dir(cache_dir) / f"{key}.safetensors"
    vocab = TokenizerVocabulary(tokenizer)
    cached = _read_cache(path, key, context_len, vocab)
    if cached is not None:
        return cached
    data = make_bpe_sequences(lines, tokenizer, context_len, max_len)
    _write_cache(path, key, data, max_len)
    return data


def _read_cache(
    path: Path, key: str, context_len: int, vocab: TokenizerVocabulary
) -> SequenceData | None:
    """The sequences stored at ``path`` under ``key``; None when there is
    no such file, or it cannot be read, or it holds another key."""
    from safetensors import SafetensorError
    from safetensors.torch import load as st_load

    if not path.is_file():
        return None
    try:
        raw = path.read_bytes()
        header_len = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + header_len])
        meta = header.get("__metadata__") or {}
        if meta.get("key") != key:
            return None
        stored = st_load(raw)
        return SequenceData(
            stored["tokens"].long(),
            stored["lengths"].long(),
            context_len,
            vocab,
            stored["line_numbers"].long(),
        )
    except (
        SafetensorError,
        OSError,
        KeyError,
        ValueError,
        RuntimeError,
        AttributeError,
    ):
        return None  # unreadable or foreign: rebuilt by the caller


def _write_cache(path: Path, key: str, data: SequenceData, max_len: int):
    """Store ``data`` at ``path`` atomically (ids as int32 where they fit);
    a cache folder that cannot be written is not an error."""
    from safetensors.torch import save as st_save

    vocab = data.vocab
    ids_dtype = torch.int32 if len(vocab) < 2**31 else torch.long
    tensors = {
        "tokens": data.tokens.to(ids_dtype),
        "lengths": data.lengths,
        "line_numbers": data.line_numbers,
    }
    metadata = {
        "key": key,
        "format": str(BPE_CACHE_FORMAT),
        "context_len": str(data.context_len),
        "max_len": str(max_len),
        "num_sequences": str(len(data)),
        "vocab_fingerprint": vocab.fingerprint,
    }
    try:
        atomic_write_bytes(path, st_save(tensors, metadata=metadata))
    except OSError:
        return  # read-only: the caller's sequences are right all the same
