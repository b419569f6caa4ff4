"""The data a config trains on (Chapter 6, 06_wikitext, "The data"; Chapter 7,
07_gpt2, for GPT-2's byte-level BPE): the corpus its ``data`` section names
(:func:`load_corpus`), the vocabulary built from the training lines
(:func:`build_vocabulary_for`: the most frequent words, or BPE pieces), the
continuation-task sequences of every split cut to the config's token budgets,
and the provenance dict that goes into results (:func:`prepare_data`,
:class:`PreparedData`). :func:`nmst_lib.experiments.trainer.train` trains on
what :func:`prepare_data` returns; every family (Chapters 6-9) prepares its
data here. Corpus and tokenizer are cached per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .. import data as D
from .config import GPT2_MAX_POSITIONS, ExperimentConfig, validate_config

__all__ = [
    "PreparedData",
    "build_vocabulary_for",
    "load_corpus",
    "prepare_data",
]

_CORPUS_CACHE: dict = {}
_TOKENIZER_CACHE: dict = {}


def load_corpus(config: ExperimentConfig, directory=None) -> D.Corpus:
    """The corpus named by ``config.data.data_source`` (cached per process and local folder; see
    :func:`nmst_lib.data.load_wikitext2` for where the data comes from: ``directory``,
    ``$NMST_WIKITEXT_DIR``, ``$NMST_DATA_DIR/wikitext-2``, else the hub). For GPT-2 (Chapter 7,
    07_gpt2) the raw, detokenised text of ``config.data.dataset``
    (:func:`nmst_lib.data.load_wikitext_raw`; with ``drop_unk`` the local text's ``<unk>`` markers are
    deleted before it is detokenised)."""
    folder = D.wikitext_dir(directory)
    where = None if folder is None else str(folder.resolve())
    if config.arch == "gpt2":
        key = ("raw", config.data.dataset, config.data.data_source, where, config.data.substitute_seed,
               config.data.drop_unk)
        if key not in _CORPUS_CACHE:
            _CORPUS_CACHE[key] = D.load_wikitext_raw(config.data.dataset, config.data.data_source, directory,
                                                     substitute_seed=config.data.substitute_seed,
                                                     drop_unk=config.data.drop_unk)
        return _CORPUS_CACHE[key]
    key = (config.data.data_source, where, config.data.substitute_seed)
    if key not in _CORPUS_CACHE:
        _CORPUS_CACHE[key] = D.load_wikitext2(config.data.data_source, directory, substitute_seed=config.data.substitute_seed)
    return _CORPUS_CACHE[key]


def _gpt2_tokenizer():
    """GPT-2's tokenizer (:func:`nmst_lib.data.load_gpt2_tokenizer`), loaded once per process and
    tokenizer folder."""
    folder = D.gpt2_tokenizer_dir()
    key = None if folder is None else str(Path(folder).resolve())
    if key not in _TOKENIZER_CACHE:
        _TOKENIZER_CACHE[key] = D.load_gpt2_tokenizer()
    return _TOKENIZER_CACHE[key]


@dataclass
class PreparedData:
    """Vocabulary and sequences of each split, plus the provenance dict that goes into results.
    For GPT-2 (Chapter 7, 07_gpt2) ``vocab`` is a :class:`nmst_lib.data.TokenizerVocabulary`."""

    vocab: D.Vocabulary | D.TokenizerVocabulary
    train: D.SequenceData
    valid: D.SequenceData
    test: D.SequenceData
    description: dict


def _truncate(data: D.SequenceData, max_tokens: int | None, name: str) -> D.SequenceData:
    if max_tokens is None or data.num_tokens <= max_tokens:
        return data
    keep = int((torch.cumsum(data.lengths, 0) <= max_tokens).sum())
    if keep == 0:
        raise ValueError(f"{name}={max_tokens} is smaller than the first sequence of the split "
                         f"({int(data.lengths[0])} tokens); raise it")
    return data.subset(torch.arange(keep))


def build_vocabulary_for(config: ExperimentConfig, train_lines: list[str]):
    """The vocabulary ``config`` asks for, from the training lines: the ``vocab_cap`` most
    frequent words (``vocab_kind`` word), or ``vocab_cap`` BPE pieces learned on them
    (``vocab_kind`` bpe, :func:`nmst_lib.data.learn_subword_vocabulary`). Chapter 6,
    06_wikitext, "The data"."""
    if config.data.vocab_kind == "bpe":
        from ..data.subwords import learn_subword_vocabulary

        return learn_subword_vocabulary(train_lines, config.data.vocab_cap)
    return D.build_vocabulary(train_lines, cap=config.data.vocab_cap)


def _lines(corpus: D.Corpus, split: str, config: ExperimentConfig) -> list[str]:
    """The lines of ``split``, without WikiText's ``<unk>`` markers when ``config.data.drop_unk``."""
    lines = corpus.split(split)
    return D.drop_unk_markers(lines) if config.data.drop_unk else lines


def prepare_data(config: ExperimentConfig, corpus: D.Corpus | None = None) -> PreparedData:
    """Vocabulary from the training lines (capped at ``config.data.vocab_cap``), continuation-task
    sequences of every split (k = ``config.data.context_len``), the training sequences cut to
    ``config.data.max_train_tokens`` (validation and test to ``config.data.max_eval_tokens``), and a
    provenance dict (Chapter 6, 06_wikitext, "The data").
    For GPT-2 (Choi, Cho, Lee (2023) Sec. 4.2; Chapter 7, 07_gpt2) the raw text of
    ``config.data.dataset`` tokenised with GPT-2's BPE (vocabulary fixed at the tokenizer's, eos
    ``<|endoftext|>`` appended, lines of at most k or more than 1,024 tokens dropped; cached on
    disk by :func:`nmst_lib.data.bpe_sequences_cached`).
    Raises ValueError when a split has no usable sequence."""
    config = validate_config(config)
    corpus = corpus if corpus is not None else load_corpus(config)
    if config.arch == "gpt2":
        tokenizer = _gpt2_tokenizer()
        vocab = D.TokenizerVocabulary(tokenizer)

        def sequences(lines):
            return D.bpe_sequences_cached(lines, tokenizer, context_len=config.data.context_len,
                                          max_len=GPT2_MAX_POSITIONS)
    else:
        vocab = build_vocabulary_for(config, _lines(corpus, "train", config))

        def sequences(lines):
            return D.make_sequences(lines, vocab, config.data.context_len)
    splits = {}
    for name in D.SPLITS:
        seqs = sequences(_lines(corpus, name, config))
        if len(seqs) == 0:
            raise ValueError(f"the {name} split has no line longer than context_len={config.data.context_len} tokens: "
                             "nothing to train or evaluate on; check the data source or lower context_len")
        splits[name] = seqs
    splits["train"] = _truncate(splits["train"], config.data.max_train_tokens, "max_train_tokens")
    splits["valid"] = _truncate(splits["valid"], config.data.max_eval_tokens, "max_eval_tokens")
    splits["test"] = _truncate(splits["test"], config.data.max_eval_tokens, "max_eval_tokens")
    desc = corpus.description.to_dict()
    desc["sequences"] = {
        name: {"num_sequences": len(s), "num_tokens": s.num_tokens, "num_scored_tokens": s.num_target_tokens}
        for name, s in splits.items()
    }
    if config.arch == "gpt2":
        desc["vocabulary"] = {"size": len(vocab), "cap": None, "fingerprint": vocab.fingerprint,
                              "built_from": "the GPT-2 byte-level BPE tokenizer (fixed; eos <|endoftext|> is the last "
                                            "id)", "tokenizer": str(D.gpt2_tokenizer_dir() or "Hugging Face hub: gpt2")}
        desc["max_sequence_tokens"] = GPT2_MAX_POSITIONS
    else:
        for name, s in splits.items():
            desc["sequences"][name]["unk_rate"] = float((s.tokens == vocab.unk_id).double().mean())
        desc["vocabulary"] = {"size": len(vocab), "cap": config.data.vocab_cap, "fingerprint": vocab.fingerprint,
                              "built_from": "train split (after substitution, before max_train_tokens)"}
        if config.data.vocab_kind != "word":
            desc["vocabulary"]["kind"] = f"{config.data.vocab_kind} pieces learned with tokenizers"
        if config.data.drop_unk:
            desc["unk_markers"] = "deleted from every split before the vocabulary was built (drop_unk)"
    desc["context_len"] = config.data.context_len
    return PreparedData(vocab, splits["train"], splits["valid"], splits["test"], desc)
