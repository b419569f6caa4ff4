"""Continuation-task sequences and the batches a model trains on.

A *sequence* is one non-empty line of WikiText (a paragraph or a heading) as
ids; its first ``k = 10`` tokens are the context x and the rest, followed by
``<eos>``, is the continuation y (Choi, Cho, Lee (2023), Sec. 4.1; ARCHITECTURE.md
"Canonical definitions"). Lines of at most k tokens have no continuation and
are dropped. :class:`SequenceData` stores the sequences of one split flat;
:func:`make_batch` gathers some into a padded :class:`Batch`, and
:func:`iterate_batches` walks a split in batches of similar lengths, in an
order that depends only on the seed and the epoch (so a resumed run sees the
same batches).

Word-level sequences (:func:`make_sequences`, with a
:class:`~nmst_lib.data.Vocabulary`) serve the RNN/LSTM experiments of
Chapter 6 (06_wikitext), Chapter 8 (08_sparse), Chapter 9 (09_temperature)
and the classroom's Assignment 3; GPT-2's BPE sequences of Chapter 7
(07_gpt2) are the same :class:`SequenceData`
(:func:`~nmst_lib.data.make_bpe_sequences`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validation import check_positive_int, is_integer_tensor
from .vocabulary import Vocabulary

__all__ = [
    "CONTEXT_LEN",
    "Batch",
    "SequenceData",
    "bucket_batches",
    "epoch_generator",
    "iterate_batches",
    "make_batch",
    "make_sequences",
]

CONTEXT_LEN = 10
"""k: the number of context tokens (Choi, Cho, Lee (2023), Sec. 4.1)."""


class SequenceData:
    """The continuation-task sequences of one split, stored flat: ``tokens``
    holds every sequence (context, continuation, ``<eos>``) back to back,
    ``offsets[i]``/``lengths[i]`` locate sequence i. ``lengths = line tokens
    + 1`` (the eos), all > ``context_len + 1`` when built by
    :func:`make_sequences`.

    Choi, Cho, Lee (2023) Sec. 4.1; ARCHITECTURE.md canonical "sequence"; Chapter 6
    (06_wikitext). ``vocab`` is a :class:`~nmst_lib.data.Vocabulary` or
    another vocabulary with the same parts (GPT-2's
    :class:`~nmst_lib.data.TokenizerVocabulary`, Chapter 7).

    Checked once, at construction (one pass over ``tokens``): ``tokens`` and
    ``lengths`` are 1-D integer tensors, the lengths add up to the number of
    tokens (otherwise :func:`make_batch` would read past a sequence's end),
    every length is > ``context_len`` (a context and at least the eos to
    score), every token id lies in ``[0, len(vocab))`` and ``line_numbers``
    (when given) has one entry per sequence; ``ValueError``/``TypeError``
    otherwise.
    """

    def __init__(
        self,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        context_len: int,
        vocab: Vocabulary,
        line_numbers: torch.Tensor | None = None,
    ):
        context_len = check_positive_int(context_len, "context_len")
        _check_sequences(tokens, lengths, context_len, vocab, line_numbers)
        self.tokens = tokens
        self.lengths = lengths
        self.offsets = torch.cumsum(lengths, 0) - lengths
        self.context_len = context_len
        self.vocab = vocab
        self.line_numbers = (
            line_numbers
            if line_numbers is not None
            else torch.arange(len(lengths))
        )

    def __len__(self) -> int:
        return int(self.lengths.numel())

    def __repr__(self) -> str:
        return (
            f"SequenceData({len(self)} sequences, {self.num_tokens} tokens, "
            f"k={self.context_len})"
        )

    @property
    def num_tokens(self) -> int:
        """All stored tokens (contexts, continuations, eos)."""
        return int(self.tokens.numel())

    @property
    def continuation_lengths(self) -> torch.Tensor:
        """|y| per sequence: continuation tokens including ``<eos>`` (the
        scored tokens)."""
        return self.lengths - self.context_len

    @property
    def num_target_tokens(self) -> int:
        """Scored tokens in the split: continuation tokens including
        ``<eos>``."""
        return int(self.continuation_lengths.sum())

    @property
    def continuation_tokens(self) -> torch.Tensor:
        """Every scored token of the split, flat (each sequence's
        continuation and its ``<eos>``; contexts left out),
        ``LongTensor[num_target_tokens]``."""
        starts = torch.repeat_interleave(self.offsets, self.lengths)
        position = torch.arange(self.num_tokens) - starts
        return self.tokens[position >= self.context_len]

    def sequence(self, i: int) -> torch.Tensor:
        """Sequence i: context, continuation, eos."""
        start = int(self.offsets[i])
        return self.tokens[start : start + int(self.lengths[i])]

    def contexts(self, indices=None) -> torch.Tensor:
        """The contexts x (first k tokens) of the chosen sequences,
        ``LongTensor[n, k]``."""
        idx = (
            torch.arange(len(self))
            if indices is None
            else torch.as_tensor(indices, dtype=torch.long)
        )
        positions = torch.arange(self.context_len)
        return self.tokens[self.offsets[idx, None] + positions]

    def subset(self, indices) -> SequenceData:
        """The chosen sequences as a new :class:`SequenceData` (e.g. a token
        budget)."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        batch = make_batch(self, idx)
        mask = torch.arange(batch.tokens.shape[1]) < batch.lengths[:, None]
        return SequenceData(
            batch.tokens[mask],
            batch.lengths.clone(),
            self.context_len,
            self.vocab,
            self.line_numbers[idx],
        )


def _check_sequences(tokens, lengths, context_len: int, vocab, line_numbers):
    """The checks of :class:`SequenceData` (its docstring)."""
    for name, x in (("tokens", tokens), ("lengths", lengths)):
        if not is_integer_tensor(x) or x.dim() != 1:
            got = (
                f"dtype {x.dtype}, shape {tuple(x.shape)}"
                if isinstance(x, torch.Tensor)
                else type(x).__name__
            )
            raise TypeError(
                f"{name} must be a 1-D integer tensor (e.g. torch.long), "
                f"got {got}"
            )
    total = int(lengths.sum())
    if total != tokens.numel():
        raise ValueError(
            f"the lengths add up to {total} tokens, but tokens holds "
            f"{tokens.numel()}: they must be equal (the sequences are "
            "stored back to back)"
        )
    if lengths.numel() and int(lengths.min()) <= context_len:
        raise ValueError(
            f"every sequence must be longer than context_len = "
            f"{context_len} (a context and at least the eos to score), "
            f"got a length of {int(lengths.min())}"
        )
    if not hasattr(vocab, "pad_id") or not hasattr(vocab, "__len__"):
        raise TypeError(
            "vocab must be a vocabulary (with len() and pad_id, e.g. "
            f"nmst_lib.data.Vocabulary), got {type(vocab).__name__}"
        )
    if tokens.numel():
        low, high = (int(v) for v in torch.aminmax(tokens))
        if low < 0 or high >= len(vocab):
            raise ValueError(
                f"token ids must lie in [0, {len(vocab)}) for a vocabulary "
                f"of {len(vocab)}, got range [{low}, {high}]"
            )
    if line_numbers is not None and (
        not is_integer_tensor(line_numbers)
        or tuple(line_numbers.shape) != tuple(lengths.shape)
    ):
        raise ValueError(
            "line_numbers must be an integer tensor with one entry per "
            f"sequence ({lengths.numel()}), or None"
        )


def make_sequences(
    lines: list[str], vocab: Vocabulary, context_len: int = CONTEXT_LEN
) -> SequenceData:
    """Continuation-task sequences from lines (Choi, Cho, Lee (2023) Sec.
    4.1; Chapter 6, 06_wikitext): each line whose ids (one per word for a
    :class:`~nmst_lib.data.Vocabulary`, one per piece for a
    :class:`~nmst_lib.data.SubwordVocabulary`) number more than
    ``context_len`` becomes its ids followed by ``<eos>``; shorter lines are
    dropped. Built once; batches are tensor gathers."""
    context_len = check_positive_int(context_len, "context_len")
    encoded = [(n, vocab.encode(line.split())) for n, line in enumerate(lines)]
    kept = [(n, ids) for n, ids in encoded if len(ids) > context_len]
    ids = [i for _, line_ids in kept for i in line_ids + [vocab.eos_id]]
    lengths = [len(line_ids) + 1 for _, line_ids in kept]
    return SequenceData(
        torch.tensor(ids, dtype=torch.long),
        torch.tensor(lengths, dtype=torch.long),
        context_len,
        vocab,
        torch.tensor([n for n, _ in kept], dtype=torch.long),
    )


@dataclass
class Batch:
    """Padded sequences and the masks the loss and the heads need. Used to train and evaluate the
    models of Chapters 6-9.

    ``tokens[B, T]`` (padded with ``<pad>``), ``lengths[B]``; the model reads
    ``inputs = tokens[:, :-1]`` and predicts ``targets = tokens[:, 1:]``.
    Prediction j is of token j+1, so it is a context prediction when
    j + 1 < k: ``context_mask[:, j] = j < k - 1`` (no eos mass, no loss; step
    t = j - k + 2 counts from 1 at the first continuation token);
    ``target_mask`` marks the scored predictions (continuation tokens and
    eos, not padding).
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

    def _positions(self) -> torch.Tensor:
        """The prediction positions j = 0 .. T-2."""
        return torch.arange(
            self.tokens.shape[1] - 1, device=self.tokens.device
        )

    @property
    def context_mask(self) -> torch.Tensor:
        """``[B, T-1]`` bool, True where the predicted token is a context
        token (j < k - 1)."""
        context = self._positions() < self.context_len - 1
        return context.expand(self.tokens.shape[0], -1)

    @property
    def target_mask(self) -> torch.Tensor:
        """``[B, T-1]`` bool, True where the prediction is scored:
        continuation tokens and eos."""
        positions = self._positions()
        lengths = self.lengths.to(positions.device)[:, None]
        continuation = positions >= self.context_len - 1
        return continuation & (positions < lengths - 1)

    @property
    def num_target_tokens(self) -> int:
        """Number of scored predictions (continuation tokens including
        eos)."""
        return int((self.lengths - self.context_len).sum())

    def target_log_probs(self, log_probs: torch.Tensor) -> torch.Tensor:
        """``log p(y_t)`` of every scored prediction (``target_mask``), row by row, from the
        model's ``log_probs[B, T-1, V]`` of this batch: the terms of the NLL (Choi, Cho, Lee
        (2023) eq. 3). The targets are picked first and the scored positions kept after, so no
        ``[V]`` row is copied; unscored targets (padding) are read as token 0 and dropped."""
        scored = self.target_mask
        targets = self.targets.masked_fill(~scored, 0)
        return log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)[scored]

    def to(self, device) -> Batch:
        """The batch on ``device``."""
        return Batch(
            self.tokens.to(device, non_blocking=True),
            self.lengths.to(device),
            self.context_len,
        )


def make_batch(data: SequenceData, indices) -> Batch:
    """Gather sequences ``indices`` into a padded :class:`Batch` with one
    tensor gather. Used to train and evaluate the models of Chapters 6-9."""
    idx = torch.as_tensor(indices, dtype=torch.long)
    if idx.numel() == 0:
        raise ValueError("a batch needs at least one sequence")
    lengths = data.lengths[idx]
    width = int(lengths.max())
    positions = torch.arange(width)
    inside = positions < lengths[:, None]
    where = (data.offsets[idx, None] + positions).clamp(
        max=data.num_tokens - 1
    )
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
    """Index batches of similar lengths (Chapter 6, 06_wikitext,
    "Training").

    Shuffled (with ``generator``) or in order, the indices are cut into
    chunks of ``bucket_factor * batch_size``, sorted by length within each
    chunk (all at once when not shuffling), and cut into batches of at most
    ``batch_size`` sequences and, when ``max_tokens`` is given, at most
    ``max_tokens`` padded tokens (a longer single sequence gets a batch of
    its own). With ``shuffle`` the batch order is shuffled too.
    """
    if not is_integer_tensor(lengths) or lengths.dim() != 1:
        raise TypeError(
            "lengths must be a 1-D integer tensor of sequence lengths (e.g. "
            f"data.lengths), got {type(lengths).__name__}"
        )
    batch_size = check_positive_int(batch_size, "batch_size")
    if max_tokens is not None:
        max_tokens = check_positive_int(max_tokens, "max_tokens")
    bucket_factor = check_positive_int(bucket_factor, "bucket_factor")
    n = int(lengths.numel())
    order = (
        torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    )
    chunk = bucket_factor * batch_size if shuffle else max(n, 1)
    batches: list[torch.Tensor] = []
    for start in range(0, n, chunk):
        idx = order[start : start + chunk]
        idx = idx[torch.argsort(lengths[idx], stable=True)]
        batches += _cut_sorted(idx, lengths[idx], batch_size, max_tokens)
    if shuffle and batches:
        shuffled = torch.randperm(len(batches), generator=generator)
        batches = [batches[i] for i in shuffled.tolist()]
    return batches


def _cut_sorted(
    idx: torch.Tensor,
    sorted_len: torch.Tensor,
    batch_size: int,
    max_tokens: int | None,
) -> list[torch.Tensor]:
    """Cut indices sorted by length (``sorted_len``, ascending) into
    consecutive batches of at most ``batch_size`` sequences and
    ``max_tokens`` padded tokens (at least one sequence each)."""
    batches = []
    s = 0
    while s < idx.numel():
        size = min(batch_size, idx.numel() - s)
        if max_tokens is not None:
            # ascending lengths: the padded size grows with the batch's end
            widths = sorted_len[s : s + size]
            fits = torch.arange(1, size + 1) * widths <= max_tokens
            size = max(1, int(fits.sum()))
        batches.append(idx[s : s + size])
        s += size
    return batches


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The data-order generator of one training epoch: it depends only on
    ``(seed, epoch)``, so a resumed run sees the same batches in the same
    order. Used to train the models of Chapters 6-9."""
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
    """Yield :class:`Batch` es of ``data``; with ``shuffle`` the order
    depends only on ``(seed, epoch)``, so a resumed run sees the same
    batches (skip the first ``start``)."""
    gen = epoch_generator(seed, epoch) if shuffle else None
    batches = bucket_batches(
        data.lengths,
        batch_size,
        max_tokens=max_tokens,
        shuffle=shuffle,
        generator=gen,
    )
    for indices in batches[start:]:
        yield make_batch(data, indices)
