"""GPT-2 data of Chapter 7 (07_gpt2): raw WikiText with honest provenance, the detokeniser, the
disk cache of BPE sequences, and the tokenizer vocabulary's fingerprint and readable display."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import torch

from datasources import FIXTURE_DATA_DIR, NO_REAL_TOKENIZER, REAL_TOKENIZER_DIR
from nmst_lib import data as D
from nmst_lib.data import gpt2_bpe

needs_real_tokenizer = pytest.mark.skipif(REAL_TOKENIZER_DIR is None, reason=NO_REAL_TOKENIZER)


@pytest.fixture(scope="module")
def gpt2_tokenizer():
    if REAL_TOKENIZER_DIR is None:
        pytest.skip(NO_REAL_TOKENIZER)
    return D.load_gpt2_tokenizer(REAL_TOKENIZER_DIR)


class CountingTokenizer:
    """A spy: forwards everything to the real tokenizer and counts the calls that tokenise."""

    def __init__(self, tokenizer):
        self._tok = tokenizer
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._tok(*args, **kwargs)

    def __len__(self):
        return len(self._tok)

    def __getattr__(self, name):
        return getattr(self._tok, name)


# ------------------------------------------------------------------------------ detokeniser


@pytest.mark.parametrize("tokenised, text", [
    ("a role @-@ playing game", "a role-playing game"),
    ("1 @,@ 000 people", "1,000 people"),
    ("3 @.@ 5 kg", "3.5 kg"),
    ("Hello , world . Next ; one : two ! three ?", "Hello, world. Next; one: two! three?"),
    ("60 cm ( 24 in ) long", "60 cm (24 in) long"),
    ('the " lobster red " colour', 'the "lobster red" colour'),
    ("the lobster 's claw does n't move", "the lobster's claw doesn't move"),
    ("the players ' union", "the players' union"),
    ("costs $ 5 , about 79 %", "costs $5, about 79%"),
    ("= = Life cycle = =", "== Life cycle =="),
    ("= = = Sub , section = = =", "=== Sub, section ==="),
    ("= Homarus gammarus =", "= Homarus gammarus ="),
    ("a species of <unk> lobster", "a species of <unk> lobster"),
    ("  padded line .  ", "padded line."),
    ("", ""),
])
def test_wikitext_detokenize_undoes_the_tokenised_spacing(tokenised, text):
    assert D.wikitext_detokenize(tokenised) == text


def test_wikitext_detokenize_keeps_article_headings_recognisable():
    assert D.is_article_heading(D.wikitext_detokenize(" = Valkyria Chronicles III = "))
    assert not D.is_article_heading(D.wikitext_detokenize(" = = Gameplay = = "))


def test_wikitext_detokenize_rejects_non_strings():
    with pytest.raises(TypeError, match="str"):
        D.wikitext_detokenize(["a", "b"])


# ------------------------------------------------------------------------------ raw corpus


@pytest.fixture
def fixture_root(no_data_env):
    no_data_env.setenv(D.DATA_DIR_ENV, str(FIXTURE_DATA_DIR))
    no_data_env.setenv("HF_HUB_OFFLINE", "1")
    return no_data_env


def test_load_wikitext_raw_offline_is_the_detokenised_substitute_split_by_article(fixture_root):
    raw = D.load_wikitext_raw("wikitext-2", "auto")
    tokenised = D.load_wikitext2("substitute")
    for split in D.SPLITS:  # same articles, same lines, each detokenised
        assert raw.split(split) == [D.wikitext_detokenize(line) for line in tokenised.split(split)]
    desc = raw.description
    assert not desc.is_official
    assert "local tokenised WikiText-2" in desc.substitute and "detokenised" in desc.substitute
    assert D.SUBSTITUTE_NAME in desc.substitute and "re-split by article" in desc.substitute
    assert "local WikiText-2 folder is configured" in desc.substitute
    assert desc.extra["detokenized"] is True and desc.extra["is_wikitext103"] is False
    assert desc.num_lines["train"] == sum(1 for s in raw.train if s.strip())


def test_load_wikitext_raw_with_drop_unk_deletes_the_markers_before_detokenising(fixture_root):
    """GPT-2's local text is WikiText-2 v1's, whose <unk> markers, once detokenised, stick to
    punctuation ("<unk>,"); deleted first, none is left and every other word stays in order."""
    kept = D.load_wikitext_raw("wikitext-2", "auto")
    dropped = D.load_wikitext_raw("wikitext-2", "auto", drop_unk=True)
    tokenised = D.load_wikitext2("substitute")
    assert sum(line.count("<unk>") for line in kept.train) > 0
    for split in D.SPLITS:
        assert not any("<unk>" in line for line in dropped.split(split))
        assert dropped.split(split) == [D.wikitext_detokenize(line)
                                        for line in D.drop_unk_markers(tokenised.split(split))]
    assert dropped.description.extra["unk_in_text"] is False and kept.description.extra["unk_in_text"] is True
    assert "the markers deleted" in dropped.description.substitute
    with pytest.raises(TypeError, match="drop_unk must be True or False"):
        D.load_wikitext_raw("wikitext-2", "auto", drop_unk="yes")


def test_load_wikitext_raw_says_plainly_it_is_not_wikitext103_offline(fixture_root):
    start = time.perf_counter()
    raw = D.load_wikitext_raw("wikitext-103", "auto")
    assert time.perf_counter() - start < 5
    assert "NOT WikiText-103" in raw.description.substitute
    assert "hub was not reachable" in raw.description.substitute
    assert raw.description.extra["asked_for"] == "WikiText-103 raw (wikitext-103-raw-v1)"


def test_load_wikitext_raw_from_the_hub_fails_fast_offline(no_data_env):
    no_data_env.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(D.WikiTextUnavailable, match="wikitext-103-raw-v1"):
        D.load_wikitext_raw("wikitext-103", "hub")
    with pytest.raises(D.WikiTextUnavailable, match="NMST_DATA_DIR"):
        D.load_wikitext_raw("wikitext-103", "auto")  # no hub and no local folder
    assert time.perf_counter() - start < 5


def test_load_wikitext_raw_rejects_unknown_dataset_and_source():
    with pytest.raises(ValueError, match="wikitext-103"):
        D.load_wikitext_raw("ptb")
    with pytest.raises(ValueError, match="substitute"):
        D.load_wikitext_raw("wikitext-2", "internet")
    with pytest.raises(ValueError, match="wikitext-2-raw-v1"):
        D.load_wikitext2_from_hub(config="wikitext-3")


# ------------------------------------------------------------------------------ the BPE cache


LINES = [
    "= Article =",
    "The lobster 's claws are blue , and the larger one crushes prey before the smaller one cuts it .",
    "short line",
    "",
    "Mating occurs in the summer , producing eggs which are carried by the females for up to a year .",
]


def test_bpe_sequences_cached_second_call_does_not_tokenise_and_is_identical(tmp_path, tiny_bpe_tokenizer):
    spy = CountingTokenizer(tiny_bpe_tokenizer)
    first = D.bpe_sequences_cached(LINES, spy, cache_dir=tmp_path)
    calls = spy.calls
    assert calls >= 1 and len(list(tmp_path.glob("*.safetensors"))) == 1
    second = D.bpe_sequences_cached(LINES, spy, cache_dir=tmp_path)
    assert spy.calls == calls  # read from disk: no tokenisation
    fresh = D.make_bpe_sequences(LINES, tiny_bpe_tokenizer)
    for data in (first, second):
        assert torch.equal(data.tokens, fresh.tokens) and data.tokens.dtype == torch.long
        assert torch.equal(data.lengths, fresh.lengths) and torch.equal(data.line_numbers, fresh.line_numbers)
        assert data.context_len == 10 and data.vocab.eos_id == len(tiny_bpe_tokenizer) - 1


def test_bpe_cache_key_changes_with_text_lengths_and_tokenizer(tmp_path, tiny_bpe_tokenizer, gpt2_tokenizer):
    D.bpe_sequences_cached(LINES, tiny_bpe_tokenizer, cache_dir=tmp_path)
    D.bpe_sequences_cached(LINES[:2] + ["x" + LINES[2]], tiny_bpe_tokenizer, cache_dir=tmp_path)
    D.bpe_sequences_cached(LINES, tiny_bpe_tokenizer, context_len=5, cache_dir=tmp_path)
    D.bpe_sequences_cached(LINES, tiny_bpe_tokenizer, max_len=30, cache_dir=tmp_path)
    real = D.bpe_sequences_cached(LINES, gpt2_tokenizer, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.safetensors"))) == 5
    assert torch.equal(real.tokens, D.make_bpe_sequences(LINES, gpt2_tokenizer).tokens)


def test_bpe_cache_rebuilds_a_corrupt_or_truncated_file(tmp_path, tiny_bpe_tokenizer):
    good = D.bpe_sequences_cached(LINES, tiny_bpe_tokenizer, cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.safetensors")
    raw = path.read_bytes()
    for broken in (raw[: len(raw) // 2], b"garbage", b""):
        path.write_bytes(broken)
        spy = CountingTokenizer(tiny_bpe_tokenizer)
        again = D.bpe_sequences_cached(LINES, spy, cache_dir=tmp_path)
        assert spy.calls >= 1 and torch.equal(again.tokens, good.tokens)
        assert len(path.read_bytes()) == len(raw)  # rewritten whole ...
        spy.calls = 0
        D.bpe_sequences_cached(LINES, spy, cache_dir=tmp_path)
        assert spy.calls == 0  # ... and readable again


def test_bpe_cache_is_written_atomically_leaving_no_temporary_files(tmp_path, tiny_bpe_tokenizer):
    D.bpe_sequences_cached(LINES, tiny_bpe_tokenizer, cache_dir=tmp_path / "nested" / "bpe")
    assert [p.suffix for p in (tmp_path / "nested" / "bpe").iterdir()] == [".safetensors"]


def test_bpe_cache_dir_is_git_ignored_data_cache_in_a_checkout(monkeypatch):
    path = D.bpe_cache_dir()
    from nmst_lib.files import is_source_checkout

    if is_source_checkout():
        assert path == D.repo_root() / "data" / "cache" / "bpe"
        if (D.repo_root() / ".git").exists():  # and git leaves it out of commits
            ignored = subprocess.run(["git", "check-ignore", "-q", str(path / "x.safetensors")],
                                     cwd=D.repo_root(), capture_output=True)
            assert ignored.returncode == 0, "data/cache/bpe is not git-ignored"
    assert D.bpe_cache_dir("~/x") == Path(os.path.expanduser("~/x"))


def test_bpe_sequences_cached_rejects_bad_input(tmp_path, tiny_bpe_tokenizer):
    with pytest.raises(TypeError, match="list of strings"):
        D.bpe_sequences_cached("one string", tiny_bpe_tokenizer, cache_dir=tmp_path)
    with pytest.raises(TypeError, match="list of strings"):
        D.bpe_sequences_cached(["a", 3], tiny_bpe_tokenizer, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="max_len"):
        D.bpe_sequences_cached(LINES, tiny_bpe_tokenizer, max_len=0, cache_dir=tmp_path)


def test_make_bpe_sequences_in_chunks_equals_one_call(monkeypatch, tiny_bpe_tokenizer):
    whole = D.make_bpe_sequences(LINES * 3, tiny_bpe_tokenizer)
    monkeypatch.setattr(gpt2_bpe, "_BPE_CHUNK_LINES", 2)  # read there
    chunked = D.make_bpe_sequences(LINES * 3, tiny_bpe_tokenizer)
    assert torch.equal(whole.tokens, chunked.tokens) and torch.equal(whole.line_numbers, chunked.line_numbers)
    assert len(whole) >= 6 and torch.equal(whole.lengths, chunked.lengths)


# ------------------------------------------------------------------------------ vocabulary


@needs_real_tokenizer
def test_tokenizer_vocabulary_display_decodes_bytes_to_readable_text(gpt2_tokenizer):
    vocab = D.TokenizerVocabulary(gpt2_tokenizer)
    ids = gpt2_tokenizer(" The café's lobster costs €5.")["input_ids"] + [vocab.eos_id]
    shown = vocab.display(ids)
    assert shown[0] == " The" and shown[-1] == "<|endoftext|>"
    assert not any("Ġ" in s for s in shown)
    assert "".join(shown[:-1]) == " The café's lobster costs €5."
    assert vocab.display(torch.tensor([262, -1, 50256])) == [" the", "<|endoftext|>"]


@needs_real_tokenizer
def test_tokenizer_vocabulary_display_marks_a_split_multibyte_character(gpt2_tokenizer):
    vocab = D.TokenizerVocabulary(gpt2_tokenizer)
    ids = gpt2_tokenizer("場")["input_ids"]
    assert len(ids) == 3  # one CJK character, three byte tokens
    assert vocab.display(ids) == ["\ufffd"] * 3
    assert vocab.display(gpt2_tokenizer("戦")["input_ids"]) == ["戦"]  # a whole character in one token


@needs_real_tokenizer
def test_tokenizer_vocabulary_texts_keep_a_character_split_between_two_pieces_whole(gpt2_tokenizer):
    """A context that ends inside a character and the continuation that completes it (what a
    stored example of Chapter 7 is): decoded together, the character is whole and belongs to the
    continuation; only bytes missing at the stream's ends are replaced."""
    vocab = D.TokenizerVocabulary(gpt2_tokenizer)
    ids = gpt2_tokenizer(" The 場 is here")["input_ids"]
    cut = next(k for k in range(1, len(ids)) if "\ufffd" in "".join(vocab.display(ids[k - 1:k])))  # 場's 1st
    context, continuation = vocab.texts(ids[:cut], ids[cut:])
    assert context + continuation == " The 場 is here" and "場" in continuation
    assert "\ufffd" not in context + continuation
    assert "".join(vocab.display(ids[cut:])).startswith("\ufffd")  # the per-token text could not
    assert vocab.texts(ids) == [" The 場 is here"]
    assert vocab.texts(ids[:cut + 1])[0].endswith("\ufffd")  # a character cut at the stream's end
    assert vocab.texts(torch.tensor([262, -1]), torch.tensor([50256])) == [" the", "<|endoftext|>"]


def test_tokenizer_vocabulary_fingerprint_hashes_the_real_vocabulary(tmp_path, tiny_bpe_tokenizer):
    from transformers import GPT2Tokenizer

    from datasources import TINY_MERGES, write_tiny_bpe_tokenizer

    base = D.TokenizerVocabulary(tiny_bpe_tokenizer)
    folder = write_tiny_bpe_tokenizer(tmp_path / "other")
    # same size, same eos, one merge (and its token) different: another vocabulary
    (folder / "vocab.json").write_text((folder / "vocab.json").read_text().replace('"Ġb"', '"Ġd"'))
    (folder / "merges.txt").write_text((folder / "merges.txt").read_text().replace("Ġ b", "Ġ d"))
    other = D.TokenizerVocabulary(GPT2Tokenizer.from_pretrained(str(folder)))
    assert len(other) == len(base) == 256 + len(TINY_MERGES) + 1 and other.eos_id == base.eos_id
    assert other.fingerprint != base.fingerprint
    same = D.TokenizerVocabulary(GPT2Tokenizer.from_pretrained(str(write_tiny_bpe_tokenizer(tmp_path / "same"))))
    assert same.fingerprint == base.fingerprint and len(base.fingerprint) == 64
