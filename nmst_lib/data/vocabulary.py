"""Vocabularies: the map between tokens and the ids a model reads.

:class:`Vocabulary` is the word-level vocabulary of the RNN/LSTM
experiments: built from the whitespace tokens of the training lines
(:func:`build_vocabulary`) for Chapter 6 (06_wikitext), Chapter 8
(08_sparse), Chapter 9 (09_temperature) and the classroom's Assignment 3.
Other vocabularies sit beside it and offer the same parts, which is all that
sequences, batches, decoding and traces use (:mod:`.sequences`):

* ``__len__``, ``itos`` (the token strings in id order) and ``fingerprint``
  (equal fingerprints mean interchangeable ids; results record it);
* ``eos_id`` (the LAST id, as the output layers of :mod:`nmst_lib.heads`
  expect), ``pad_id`` (fills batches, never a target) and ``unk_id``;
* ``decode(ids)``: token strings, negative ids (decoder padding) skipped.

GPT-2's byte-level BPE is the other one the book uses
(:class:`~nmst_lib.data.TokenizerVocabulary`, Chapter 7, in
:mod:`.gpt2_bpe`).
"""

from __future__ import annotations

import hashlib
from collections import Counter

import torch

from .._validation import check_positive_int

__all__ = ["EOS", "PAD", "UNK", "Vocabulary", "build_vocabulary"]

EOS, PAD, UNK = "<eos>", "<pad>", "<unk>"
"""The special tokens of a word-level :class:`Vocabulary`."""


class Vocabulary:
    """Word <-> id map built from the training lines (Chapter 6,
    06_wikitext, "The data").

    Ids: the kept words by decreasing frequency (ties: first occurrence),
    then ``<unk>`` (if not already a word), ``<pad>``, and ``<eos>`` as the
    LAST id, so ``eos_id == len(vocab) - 1`` as the heads expect. ``<pad>``
    only fills batches; it is never a target.
    """

    def __init__(self, itos: list[str]):
        if len(itos) != len(set(itos)):
            raise ValueError("vocabulary entries must be unique")
        if not itos or itos[-1] != EOS or PAD not in itos or UNK not in itos:
            raise ValueError(
                f"a vocabulary must contain {UNK!r} and {PAD!r} and end with "
                f"{EOS!r}"
            )
        self.itos = list(itos)
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.unk_id = self.stoi[UNK]
        self.pad_id = self.stoi[PAD]
        self.eos_id = self.stoi[EOS]

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and self.itos == other.itos

    def __repr__(self) -> str:
        return (
            f"Vocabulary({len(self)} entries, eos_id={self.eos_id}, "
            f"fingerprint={self.fingerprint[:12]})"
        )

    @property
    def fingerprint(self) -> str:
        """sha256 of the id order: equal fingerprints mean interchangeable
        ids."""
        blob = "\n".join(self.itos).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()

    def encode(self, tokens: list[str]) -> list[int]:
        """Ids of ``tokens``; words outside the vocabulary map to
        ``<unk>``."""
        get, unk = self.stoi.get, self.unk_id
        return [get(w, unk) for w in tokens]

    def decode(self, ids) -> list[str]:
        """Words of ``ids`` (negative ids, e.g. decoder padding -1, are
        skipped)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return [self.itos[i] for i in ids if i >= 0]


def build_vocabulary(lines: list[str], cap: int | None = None) -> Vocabulary:
    """The :class:`Vocabulary` of the whitespace tokens of ``lines``,
    optionally capped to the ``cap`` most frequent words (other words become
    ``<unk>``); plus ``<unk>``, ``<pad>``, ``<eos>`` (last). Chapter 6
    (06_wikitext), "The data"."""
    if cap is not None:
        cap = check_positive_int(cap, "vocab cap")
    counts = Counter(w for line in lines for w in line.split())
    for special in (PAD, EOS):
        if special in counts:
            raise ValueError(
                f"the text already contains the reserved token {special!r}"
            )
    unk_count = counts.pop(UNK, 0)
    # most_common is stable: ties keep their first occurrence
    words = [w for w, _ in counts.most_common(cap)]
    if not words and not unk_count:
        raise ValueError(
            "cannot build a vocabulary from empty training data (no tokens "
            "found)"
        )
    return Vocabulary(words + [UNK, PAD, EOS])
