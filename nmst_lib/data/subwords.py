"""A subword (BPE) vocabulary learned on the training split (Chapters 6, 8, 9),
beside the word-level :class:`~nmst_lib.data.Vocabulary`.

WikiText-2 comes word-tokenised, and a word vocabulary small enough for a CPU
maps every rare word to ``<unk>``: with the 5,000 most frequent words of the
substitute training split, 19 % of the validation tokens are ``<unk>`` and a
greedy model learns to say ``<unk>`` most of the time. Byte-pair encoding
(Sennrich, Haddow, Birch (2016)), the tokenisation of Welleck et al. (2020)'s
Tables 1 and 3, keeps the vocabulary small and still spells every word: a rare
word becomes a few pieces instead of ``<unk>``. The only ``<unk>`` left is the
data's own (WikiText replaced its rare words by ``<unk>`` before release; about
2.6 % of tokens).

The merges are learned with the Hugging Face ``tokenizers`` library on the
training lines only, so validation and test words are spelled with the training
split's pieces. Each piece that starts a word carries the mark ``▁`` (as in
SentencePiece); :meth:`SubwordVocabulary.display` turns it back into a space,
so ``"".join(vocab.display(ids))`` is the text again. (Marking the start of a
word, not its end, is what makes the learned merges deterministic:
``tokenizers`` breaks ties between equally frequent pairs by symbol id, and the
ids of end-of-word symbols depend on the order of a hash map, while the
word-start mark is one character of the sorted alphabet.)

Ids follow :class:`nmst_lib.data.Vocabulary`'s layout, which the heads assume:
the learned pieces first, then ``<unk>``, ``<pad>`` and ``<eos>`` as the LAST
id (``eos_id == len(vocab) - 1``).
"""

from __future__ import annotations

import hashlib
import json

import torch

from .._validation import check_positive_int
from .vocabulary import EOS, PAD, UNK

__all__ = [
    "WORD_START",
    "CONTINUES_WORD",
    "SubwordVocabulary",
    "learn_subword_vocabulary",
    "piece_label",
    "piece_texts",
    "pieces_text",
    "token_labels",
    "tokens_text",
]

WORD_START = "\u2581"
"""Mark of a piece that starts a word (``"▁the"``, U+2581); shown as a
space."""

CONTINUES_WORD = "##"
"""Prefix of a piece's label when the piece continues the word before it
(``"land"`` in ``"▁Eng" "land"`` is labelled ``"##land"``, as in BERT's
WordPiece vocabulary): :func:`piece_label`."""

_SPECIALS = (UNK, PAD, EOS)
"""The specials, shown as themselves (never as pieces of a word)."""

_MIN_SIZE = 64
"""Smallest vocabulary accepted: the three specials plus room for the
characters."""


def _pieces(pieces) -> list[str]:
    if not isinstance(pieces, (list, tuple)) or not all(
        isinstance(p, str) for p in pieces
    ):
        raise TypeError(
            "pieces must be a list of strings (stored pieces such as '▁the'), "
            f"got {type(pieces).__name__}"
        )
    return list(pieces)


def piece_texts(pieces) -> list[str]:
    """Readable text of each stored piece: ``"▁the"`` shows as ``" the"``,
    ``"land"`` as ``"land"``, a special as a space and itself, so
    ``"".join(piece_texts(pieces))`` is the words, each after a space. What a
    page shows of a continuation stored as pieces (Chapters 6, 8, 9);
    :meth:`SubwordVocabulary.display` gives the same from ids."""
    out = []
    for piece in _pieces(pieces):
        if piece in _SPECIALS:
            out.append(" " + piece)
        elif piece.startswith(WORD_START):
            out.append(" " + piece[len(WORD_START) :])
        else:
            out.append(piece)
    return out


def pieces_text(pieces) -> str:
    """The words the stored ``pieces`` spell, one space between words (a
    piece without ``▁`` joins the word before it): ``["▁Eng", "land", "▁."]``
    gives ``"England ."``. Chapters 8 and 9 (``08_sparse``, ``09_temperature``) use it through
    :func:`tokens_text`."""
    return " ".join("".join(piece_texts(pieces)).split())


def piece_label(piece: str) -> str:
    """One stored piece as a reader sees it in a per-piece table (Chapter 9's
    continuations with their temperatures): a piece that starts a word as
    the word's start (``"▁the"`` -> ``"the"``), one that continues a word
    after :data:`CONTINUES_WORD` (``"land"`` -> ``"##land"``), a lone
    word-start mark as ``"␣"`` and a special as itself."""
    if not isinstance(piece, str):
        raise TypeError(f"piece must be a string, got {type(piece).__name__}")
    if piece in _SPECIALS:
        return piece
    if piece == WORD_START:
        return "␣"
    if piece.startswith(WORD_START):
        return piece[len(WORD_START) :]
    return CONTINUES_WORD + piece


def _kind(vocab_kind) -> str:
    if vocab_kind not in ("word", "bpe"):
        raise ValueError(
            f"vocab_kind must be 'word' or 'bpe' (a config's data.vocab_kind), got {vocab_kind!r}"
        )
    return vocab_kind


def tokens_text(tokens, vocab_kind: str) -> str:
    """The text of stored ``tokens`` of a model whose vocabulary is
    ``vocab_kind`` (its config's ``vocab_kind``): the words the pieces spell
    (``"bpe"``, :func:`pieces_text`) or the words with a space between
    (``"word"``). Chapters 8 and 9 (``08_sparse``, ``09_temperature``) print contexts with it."""
    tokens = _pieces(tokens)
    return (
        pieces_text(tokens) if _kind(vocab_kind) == "bpe" else " ".join(tokens)
    )


def token_labels(tokens, vocab_kind: str) -> list[str]:
    """Each stored token as a per-token table shows it: :func:`piece_label`
    of each piece (``"bpe"``) or the word itself (``"word"``). Chapters 8 and 9 (``08_sparse``,
    ``09_temperature``) label tokens with it."""
    tokens = _pieces(tokens)
    return (
        [piece_label(t) for t in tokens]
        if _kind(vocab_kind) == "bpe"
        else tokens
    )


def _tokenizers():
    try:
        import tokenizers
    except ImportError as err:  # pragma: no cover - the data extra
        raise ImportError(
            "a subword vocabulary needs the `tokenizers` package: "
            "pip install 'nmst_lib[data]' (Colab has it already)"
        ) from err
    return tokenizers


class SubwordVocabulary:
    """Piece <-> id map of a BPE tokenizer learned on the training lines
    (Chapter 6, 06_wikitext, "The data"; see the module docstring).

    Offers what :class:`nmst_lib.data.Vocabulary` offers to sequences,
    batches, training and decoding: ``itos``, ``stoi``, ``unk_id``,
    ``pad_id``, ``eos_id`` (last), ``fingerprint``, :meth:`encode` and
    :meth:`decode`; plus :meth:`display` for readable text.
    """

    def __init__(self, tokenizer):
        tok_vocab = tokenizer.get_vocab(with_added_tokens=True)
        missing = [s for s in (UNK, PAD, EOS) if s not in tok_vocab]
        if missing:
            raise ValueError(
                f"the tokenizer must know the special tokens {missing}: "
                "learn it with learn_subword_vocabulary"
            )
        by_id = sorted(tok_vocab.items(), key=lambda kv: kv[1])
        pieces = [p for p, _ in by_id if p not in (UNK, PAD, EOS)]
        self.tokenizer = tokenizer
        self.itos = pieces + [UNK, PAD, EOS]
        self.stoi = {p: i for i, p in enumerate(self.itos)}
        self.unk_id, self.pad_id, self.eos_id = (
            self.stoi[UNK],
            self.stoi[PAD],
            self.stoi[EOS],
        )
        # tokenizer id -> our id, one gather per encoded line
        lookup = torch.empty(len(tok_vocab), dtype=torch.long)
        for piece, tid in tok_vocab.items():
            lookup[tid] = self.stoi[piece]
        self._to_ours = lookup.tolist()
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, SubwordVocabulary)
            and self.fingerprint == other.fingerprint
        )

    def __repr__(self) -> str:
        return (
            f"SubwordVocabulary({len(self)} pieces, eos_id={self.eos_id},"
            f" fingerprint={self.fingerprint[:12]})"
        )

    @property
    def fingerprint(self) -> str:
        """sha256 of the pieces in id order AND the merges: equal
        fingerprints mean the same text gives the same ids."""
        if self._fingerprint is None:
            model = json.loads(self.tokenizer.to_str())["model"]
            blob = json.dumps(
                [self.itos, model.get("merges")], ensure_ascii=False
            )
            self._fingerprint = hashlib.sha256(
                blob.encode("utf-8")
            ).hexdigest()
        return self._fingerprint

    def encode(self, words: list[str]) -> list[int]:
        """Ids of the pieces that spell ``words`` (a whitespace-split line);
        the data's own ``<unk>`` stays one id, and a character the training
        split never showed becomes ``<unk>``."""
        if not words:
            return []
        ids = self.tokenizer.encode(words, is_pretokenized=True).ids
        to_ours = self._to_ours
        return [to_ours[i] for i in ids]

    def decode(self, ids) -> list[str]:
        """The pieces of ``ids`` as stored (``"▁the"``; negative ids, e.g.
        decoder padding -1, are skipped); :meth:`display` gives text."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return [self.itos[i] for i in ids if i >= 0]

    def display(self, ids) -> list[str]:
        """Readable text of each piece of ``ids``: ``"▁the"`` shows as
        ``" the"``, ``"land"`` as ``"land"``, a special as a space and
        itself, so ``"".join(display(ids))`` is the words, each after a space
        (Chapters 6, 8, 9: continuations on the page; GPT-2's pieces in
        Chapter 7 carry their spaces the same way)."""
        return piece_texts(self.decode(ids))

    def words_of(self, ids) -> list[str]:
        """The whole words ``ids`` spell (a piece without ``▁`` joins the one
        before it); what a word-level count, e.g. the share of ``<unk>`` words,
        reads."""
        return "".join(self.display(ids)).split()


def learn_subword_vocabulary(lines: list[str], size: int) -> SubwordVocabulary:
    """Learn BPE merges on ``lines`` (whitespace-tokenised training lines)
    until the vocabulary holds ``size`` entries, the specials ``<unk>``,
    ``<pad>``, ``<eos>`` included (Sennrich et al. (2016); Chapter 6,
    06_wikitext, "The data"). Deterministic: the same lines give the same
    :attr:`~SubwordVocabulary.fingerprint`."""
    size = check_positive_int(size, "subword vocabulary size")
    if size < _MIN_SIZE:
        raise ValueError(
            f"subword vocabulary size must be >= {_MIN_SIZE} "
            f"(specials plus characters), got {size}"
        )
    if isinstance(lines, str) or not all(isinstance(x, str) for x in lines):
        raise TypeError("lines must be a list of strings (the training lines)")
    text = [line for line in lines if line.split()]
    for special in (PAD, EOS):
        if any(special in line.split() for line in text):
            raise ValueError(
                f"the text already contains the reserved token {special!r}"
            )
    if not text:
        raise ValueError(
            "cannot learn a subword vocabulary from empty "
            "training data (no tokens found)"
        )
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(tk.models.BPE(unk_token=UNK, fuse_unk=True))
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Metaspace(
        replacement=WORD_START, prepend_scheme="always", split=True
    )
    trainer = tk.trainers.BpeTrainer(
        vocab_size=size, special_tokens=[UNK, PAD, EOS], show_progress=False
    )
    tokenizer.train_from_iterator(text, trainer=trainer)
    return SubwordVocabulary(tokenizer)
