"""The subword (BPE) vocabulary of Chapters 6, 8 and 9 (nmst_lib.data.subwords) and the pieces of
the experiments that use it: the config's vocab_kind, sequences whose words span several ids,
and the <unk> share of a decoder's output."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nmst_lib import data as D
from nmst_lib.data.subwords import (
    CONTINUES_WORD,
    WORD_START,
    SubwordVocabulary,
    learn_subword_vocabulary,
    piece_label,
    pieces_text,
    token_labels,
    tokens_text,
)
from nmst_lib.experiments import make_config
from nmst_lib.experiments.config import WORD_CPU_RECIPE
from nmst_lib.experiments.preparation import build_vocabulary_for
from nmst_lib.experiments.runs import unk_counts

pytest.importorskip("tokenizers")

LINES = [
    "the cat sat on the mat , and the dog sat on the log .",
    "a <unk> went to the market and bought electric guitars .",
    "electricity and electrons are electric ; the <unk> said so .",
    "= Heading of an article =",
] * 5


@pytest.fixture(scope="module")
def vocab():
    return learn_subword_vocabulary(LINES, 80)


def test_specials_come_last_with_eos_the_last_id(vocab):
    assert vocab.itos[-3:] == [D.UNK, D.PAD, D.EOS]
    assert vocab.eos_id == len(vocab) - 1 == 79
    assert (vocab.unk_id, vocab.pad_id) == (77, 78)


def test_learning_is_deterministic_same_lines_same_fingerprint():
    a, b = (learn_subword_vocabulary(LINES, 80) for _ in range(2))
    assert a.fingerprint == b.fingerprint and a == b
    c = learn_subword_vocabulary(LINES, 90)
    assert c.fingerprint != a.fingerprint and c != a


def test_display_of_the_encoded_words_gives_the_line_back(vocab):
    for line in set(LINES):
        ids = vocab.encode(line.split())
        assert "".join(vocab.display(ids)) == " " + line
        assert vocab.words_of(ids) == line.split()


def test_a_rare_word_is_spelled_in_pieces_not_replaced_by_unk(vocab):
    ids = vocab.encode(["electrics"])
    assert len(ids) > 1 and vocab.unk_id not in ids
    assert vocab.decode(ids)[0].startswith(WORD_START)
    assert "".join(vocab.display(ids)) == " electrics"


def test_stored_pieces_read_as_the_words_they_spell(vocab):
    """A result stores pieces as text (no vocabulary at hand): pieces_text spells the words
    again, one space between words, exactly as display does from the ids."""
    for line in set(LINES):
        pieces = vocab.decode(vocab.encode(line.split()))
        assert any(not p.startswith(WORD_START) for p in pieces) or "electric" not in line
        assert pieces_text(pieces) == line == tokens_text(pieces, "bpe")
    assert pieces_text(["▁Eng", "land", "▁.", D.EOS]) == "England . <eos>"
    assert pieces_text([]) == ""
    # a word vocabulary's tokens are words already
    assert tokens_text(["the", "cat", D.EOS], "word") == "the cat <eos>"


def test_a_piece_label_shows_where_a_word_starts_and_where_it_goes_on(vocab):
    """Per-piece tables label a word's first piece as itself and a piece that goes on with the
    word before it after ##, so no raw ▁ mark reaches a page and no piece looks like a word."""
    pieces = vocab.decode(vocab.encode(["electrics"]))
    labels = [piece_label(p) for p in pieces]
    assert labels[0] == pieces[0][1:] and all(x.startswith(CONTINUES_WORD) for x in labels[1:])
    assert "".join(x.removeprefix(CONTINUES_WORD) for x in labels) == "electrics"
    assert [piece_label(p) for p in ("▁the", "land", WORD_START, D.EOS, D.UNK)] == [
        "the", "##land", "␣", D.EOS, D.UNK]
    assert token_labels(["▁Eng", "land"], "bpe") == ["Eng", "##land"]
    assert token_labels(["England", "is"], "word") == ["England", "is"]
    assert not any(WORD_START in x for x in token_labels(vocab.itos, "bpe") if x != D.PAD)


@pytest.mark.parametrize("bad", ["▁the ▁cat", [1, 2], None])
def test_stored_pieces_must_be_a_list_of_strings(bad):
    with pytest.raises(TypeError, match="list of strings"):
        pieces_text(bad)
    with pytest.raises(TypeError, match="string"):
        piece_label(3)


def test_tokens_text_needs_a_known_vocabulary_kind():
    with pytest.raises(ValueError, match="'word' or 'bpe'"):
        tokens_text(["▁a"], "bpe-4k")


def test_the_datas_own_unk_is_one_id_and_unseen_characters_become_unk(vocab):
    assert vocab.encode(["<unk>"]) == [vocab.unk_id]
    ids = vocab.encode(["Zürich"])  # Z, ü and h never occur in LINES
    assert vocab.unk_id in ids
    assert vocab.encode([]) == []


def test_decode_skips_negative_ids_like_decoder_padding(vocab):
    ids = vocab.encode(["the", "cat"])
    assert vocab.decode(torch.tensor(ids + [-1, -1])) == vocab.decode(ids)


def test_bad_input_is_refused_with_a_message():
    with pytest.raises(ValueError, match=">= 64"):
        learn_subword_vocabulary(LINES, 10)
    with pytest.raises(ValueError, match="reserved token '<eos>'"):
        learn_subword_vocabulary(["a b <eos> c"], 100)
    with pytest.raises(ValueError, match="empty"):
        learn_subword_vocabulary(["", "  "], 100)
    with pytest.raises(TypeError, match="list of strings"):
        learn_subword_vocabulary("the cat sat", 100)


def test_a_tokenizer_without_the_specials_is_refused():
    import tokenizers as tk

    bare = tk.Tokenizer(tk.models.BPE())
    with pytest.raises(ValueError, match="special tokens"):
        SubwordVocabulary(bare)


def test_sequences_count_pieces_not_words(vocab):
    line = "electricity and electrons are electric ; the <unk> said so ."
    seqs = D.make_sequences([line, "the cat"], vocab, context_len=5)
    ids = vocab.encode(line.split())
    assert len(ids) > len(line.split())
    assert len(seqs) == 1 and int(seqs.lengths[0]) == len(ids) + 1
    assert seqs.sequence(0).tolist() == ids + [vocab.eos_id]


def test_config_names_the_vocabulary_in_its_key_and_keeps_word_hashes():
    bpe = make_config("cpu", "lstm", "va", **{**WORD_CPU_RECIPE, "vocab_kind": "bpe", "vocab_cap": 8000})
    assert bpe.key == "cpu-lstm-va-bpe8k-seed0"
    assert bpe.to_dict()["vocab_kind"] == "bpe"
    word = make_config("cpu", "lstm", "va", **WORD_CPU_RECIPE)
    assert (
        word.key == "cpu-lstm-va-seed0" and "vocab_kind" not in word.to_dict()
    )
    odd = make_config(
        "cpu", "lstm", "nmst", eps=5e-4, vocab_kind="bpe", vocab_cap=8192
    )
    assert odd.key == "cpu-lstm-nmst-eps5e-4-bpe8192-nounk-seed0"  # the cpu profile deletes <unk> markers


def test_config_refuses_a_bpe_vocabulary_without_a_size_or_on_gpt2():
    with pytest.raises(ValueError, match="vocab_kind bpe needs vocab_cap"):
        make_config("cpu", "lstm", "va", vocab_kind="bpe", vocab_cap=None)
    with pytest.raises(ValueError, match="unknown vocab_kind"):
        make_config("cpu", "lstm", "va", vocab_kind="chars")


def test_the_config_builds_the_vocabulary_it_names():
    bpe = make_config("quick", "lstm", "va", vocab_kind="bpe", vocab_cap=80)
    assert isinstance(build_vocabulary_for(bpe, LINES), SubwordVocabulary)
    word = make_config("quick", "lstm", "va", vocab_cap=5)
    built = build_vocabulary_for(word, LINES)
    assert isinstance(built, D.Vocabulary) and len(built) == 5 + 3


def test_unk_share_counts_emitted_tokens_only():
    unk, eos = 7, 9
    tokens = torch.tensor([[1, unk, 2, eos, -1], [unk, unk, 3, 4, 5]])
    lengths = torch.tensor(
        [4, 3]
    )  # row 0 ends with eos; row 1 cut after 3 tokens
    assert unk_counts(tokens, lengths, unk, eos) == (3, 6)


def test_min_improvement_is_a_relative_threshold_left_out_of_old_hashes():
    from nmst_lib.experiments.trainer import _improves

    assert _improves(99.0, 100.0, 0.0) and not _improves(100.0, 100.0, 0.0)
    assert not _improves(99.6, 100.0, 0.005)  # 0.4 % better: a plateau epoch
    assert _improves(99.4, 100.0, 0.005)  # 0.6 % better
    assert _improves(1e9, float("inf"), 0.005)  # the first epoch always improves
    word = make_config("cpu", "lstm", "va", **WORD_CPU_RECIPE)
    assert "min_improvement" not in word.to_dict()
    tuned = make_config("cpu", "lstm", "va", min_improvement=0.005)
    assert tuned.to_dict()["min_improvement"] == 0.005
    with pytest.raises(ValueError, match="min_improvement must lie in"):
        make_config("cpu", "lstm", "va", min_improvement=1.5)


TOKEN = st.sampled_from(["the", "<unk>", ",", "cat", "<unk>s", "x<unk>", "=", "@.@"])


@given(st.lists(st.lists(TOKEN, max_size=12), max_size=6))
def test_drop_unk_markers_deletes_exactly_the_unk_tokens_and_keeps_the_rest_in_order(token_lines):
    lines = [" " + " ".join(tokens) + " " for tokens in token_lines]
    dropped = D.drop_unk_markers(lines)
    assert len(dropped) == len(lines)
    for before, after in zip(lines, dropped):
        assert after.split() == [t for t in before.split() if t != "<unk>"]
        assert after.startswith(" ") and after.endswith(" ")  # the line's spacing is kept
    assert D.drop_unk_markers(dropped) == dropped  # idempotent


def test_drop_unk_markers_example_and_bad_input():
    assert D.drop_unk_markers([" a <unk> b ", " <unk> ", "no markers"]) == [" a b ", " ", "no markers"]
    with pytest.raises(TypeError, match="list of lines"):
        D.drop_unk_markers(" a <unk> b ")


def test_drop_unk_is_in_the_key_left_out_of_old_hashes_and_checked():
    plain = make_config("cpu", "lstm", "va", **{**WORD_CPU_RECIPE, "vocab_kind": "bpe", "vocab_cap": 4000})
    dropped = plain.replace(drop_unk=True)
    assert "drop_unk" not in plain.to_dict() and dropped.to_dict()["drop_unk"] is True
    assert (plain.key, dropped.key) == ("cpu-lstm-va-bpe4k-seed0", "cpu-lstm-va-bpe4k-nounk-seed0")
    with pytest.raises(TypeError, match="drop_unk must be True or False"):
        plain.replace(drop_unk="yes")
    gpt2 = make_config("quick", "gpt2", "va").replace(drop_unk=True)  # GPT-2's local text has the markers too
    assert gpt2.key == "quick-gpt2-va-nounk-seed0" and "drop_unk" not in make_config("quick", "gpt2", "va").to_dict()
    assert make_config("cpu", "gpt2", "va").to_dict()["drop_unk"] is True  # Chapter 7's converged recipe


def test_prepare_data_with_drop_unk_trains_and_scores_text_without_the_marker():
    from nmst_lib.experiments.preparation import prepare_data

    description = D.DataDescription(source="test", location=None, splits={}, num_lines={}, num_tokens={},
                                    num_articles={})
    corpus = D.Corpus(train=LINES, valid=LINES[:4], test=LINES[:4], description=description)
    config = make_config("quick", "lstm", "va", vocab_kind="bpe", vocab_cap=80, context_len=2)
    kept, dropped = prepare_data(config, corpus), prepare_data(config.replace(drop_unk=True), corpus)
    assert kept.description["sequences"]["valid"]["unk_rate"] > 0  # the marker is a piece of its own
    for name in ("train", "valid", "test"):
        assert dropped.description["sequences"][name]["unk_rate"] == 0.0
        assert not (getattr(dropped, name).tokens == dropped.vocab.unk_id).any()
    assert "drop_unk" in dropped.description["unk_markers"] and "unk_markers" not in kept.description
