"""The text the book's language models learn from: WikiText, its
vocabularies, continuation-task sequences and batches, and GPT-2's BPE.

A *sequence* is one non-empty line of WikiText (a paragraph or a heading);
its first ``k = 10`` tokens are the context x and the rest, followed by
``<eos>``, is the continuation y (Choi, Cho, Lee (2023), Sec. 4.1; ARCHITECTURE.md
"Canonical definitions"). Lines of at most k tokens are dropped. Where the
text came from is always written down (:class:`DataDescription`): the
official splits from the Hugging Face hub, a local folder
(``$NMST_DATA_DIR``), or the named substitute :data:`SUBSTITUTE_NAME` when
the training split is missing.

Who reads it: the RNN/LSTM experiments of Chapter 6 (06_wikitext), Chapter 8
(08_sparse) and Chapter 9 (09_temperature) and the classroom's Assignment 3
(word-level WikiText-2); the GPT-2 experiments of Chapter 7 (07_gpt2; raw
WikiText and GPT-2's byte-level BPE).

One module per idea; every public name is importable from here:

* ``sources``: the environment variables, the local data folders, the
  hub probe and going offline.
* ``corpus``: WikiText-2's splits (hub or folder), its articles, the
  article re-split substitute, :class:`Corpus` and
  :class:`DataDescription`.
* ``raw_wikitext``: raw, detokenised WikiText for GPT-2 (Chapter 7).
* ``vocabulary``: the word-level :class:`Vocabulary`.
* ``subwords``: the subword (BPE) :class:`SubwordVocabulary` learned on the
  training split, beside it (Chapters 6, 8, 9).
* ``sequences``: :class:`SequenceData`, :class:`Batch` and the
  bucketed, resumable batch order.
* ``gpt2_bpe``: GPT-2's tokenizer, :class:`TokenizerVocabulary`, BPE
  sequences and their disk cache (Chapter 7).

The file helpers they use (atomic writes, the repository and cache folders)
are :mod:`nmst_lib.files`; nothing here imports the experiments.
"""

from ..files import repo_root
from .corpus import (
    HUB_CONFIG,
    HUB_CONFIGS,
    HUB_DATASET,
    SPLITS,
    SUBSTITUTE_NAME,
    Corpus,
    DataDescription,
    drop_unk_markers,
    is_article_heading,
    load_local_splits,
    load_wikitext2,
    load_wikitext2_from_hub,
    resplit_by_article,
    split_articles,
)
from .gpt2_bpe import (
    BPE_CACHE_FORMAT,
    TokenizerVocabulary,
    bpe_cache_dir,
    bpe_sequences_cached,
    load_gpt2_tokenizer,
    make_bpe_sequences,
)
from .raw_wikitext import (
    RAW_HUB_CONFIGS,
    load_wikitext_raw,
    wikitext_detokenize,
)
from .sequences import (
    CONTEXT_LEN,
    Batch,
    SequenceData,
    bucket_batches,
    epoch_generator,
    iterate_batches,
    make_batch,
    make_sequences,
)
from .sources import (
    DATA_DIR_ENV,
    TOKENIZER_SUBDIR,
    WIKITEXT_DIR_ENV,
    WIKITEXT_SUBDIR,
    WikiTextUnavailable,
    data_root,
    go_offline,
    gpt2_tokenizer_dir,
    hub_is_reachable,
    wikitext_dir,
)
from .subwords import (
    CONTINUES_WORD,
    WORD_START,
    SubwordVocabulary,
    learn_subword_vocabulary,
    piece_label,
    piece_texts,
    pieces_text,
    token_labels,
    tokens_text,
)
from .vocabulary import EOS, PAD, UNK, Vocabulary, build_vocabulary

# grouped by module, in the order of the list above (the API page's order)
__all__ = [  # noqa: RUF022
    # where the data comes from
    "DATA_DIR_ENV",
    "TOKENIZER_SUBDIR",
    "WIKITEXT_DIR_ENV",
    "WIKITEXT_SUBDIR",
    "WikiTextUnavailable",
    "data_root",
    "go_offline",
    "gpt2_tokenizer_dir",
    "hub_is_reachable",
    "wikitext_dir",
    # WikiText-2 and its provenance
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
    # raw WikiText for GPT-2 (Chapter 7)
    "RAW_HUB_CONFIGS",
    "load_wikitext_raw",
    "wikitext_detokenize",
    # vocabularies
    "EOS",
    "PAD",
    "UNK",
    "Vocabulary",
    "build_vocabulary",
    "WORD_START",
    "CONTINUES_WORD",
    "SubwordVocabulary",
    "learn_subword_vocabulary",
    "piece_label",
    "piece_texts",
    "pieces_text",
    "token_labels",
    "tokens_text",
    # sequences and batches
    "CONTEXT_LEN",
    "Batch",
    "SequenceData",
    "bucket_batches",
    "epoch_generator",
    "iterate_batches",
    "make_batch",
    "make_sequences",
    # GPT-2's BPE (Chapter 7)
    "BPE_CACHE_FORMAT",
    "TokenizerVocabulary",
    "bpe_cache_dir",
    "bpe_sequences_cached",
    "load_gpt2_tokenizer",
    "make_bpe_sequences",
    # the repository root (nmst_lib.files), kept for existing callers
    "repo_root",
]
