"""Tests of nmst_lib.data: sources and the named substitute split, vocabulary, sequences
(context / continuation / eos), batches and bucketing (Chapter 6, 06_wikitext)."""

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import nmst_lib
from datasources import (
    FIXTURE_DATA_DIR,
    FIXTURE_WIKITEXT_DIR,
    FIXTURES,
    NO_REAL_WIKITEXT,
    REAL_WIKITEXT_DIR,
)
from nmst_lib import data as D

_OFFLINE_AT_IMPORT = __import__("os").environ.get("HF_DATASETS_OFFLINE")


def fake_split(n_articles, prefix, seed=0):
    """WikiText-style lines: article headings, section headings, paragraphs, blank lines."""
    g = torch.Generator().manual_seed(seed)
    lines = [""]
    for a in range(n_articles):
        lines += [f" = {prefix} Article {a} = ", ""]
        for s in range(2):
            lines += [f" = = Section {s} = = ", ""]
            n = int(torch.randint(5, 30, (1,), generator=g))
            words = [f"w{int(w)}" for w in torch.randint(0, 40, (n,), generator=g)]
            lines += [" " + " ".join([f"{prefix.lower()}{a}"] + words) + " . ", ""]
    return lines


@pytest.fixture
def wt_dir(tmp_path):
    """A local folder with only valid/test files, like the public copy on the project's machines."""
    (tmp_path / "valid.txt").write_text("\n".join(fake_split(12, "Valid", 1)) + "\n")
    (tmp_path / "test.txt").write_text("\n".join(fake_split(8, "Test", 2)) + "\n")
    return tmp_path


def test_article_headings_are_top_level_only():
    assert D.is_article_heading(" = Homarus gammarus = ")
    assert D.is_article_heading("= A =")
    assert not D.is_article_heading(" = = Description = = ")
    assert not D.is_article_heading(" = = = Sub = = = ")
    assert not D.is_article_heading(" The = sign = ")
    assert not D.is_article_heading("")


def test_split_articles_keeps_every_line_once():
    lines = fake_split(5, "X")
    articles = D.split_articles(lines)
    assert len(articles) == 5
    assert all(D.is_article_heading(a[0]) for a in articles)
    assert [s for a in articles for s in a] == lines[1:]  # only the leading blank line is dropped


def test_substitute_split_is_by_article_named_and_counted(wt_dir):
    corpus = D.load_wikitext2("local", wt_dir, substitute_seed=3)
    desc = corpus.description
    assert not desc.is_official
    assert D.SUBSTITUTE_NAME in desc.substitute and "NOT the WikiText-2 training split" in desc.substitute
    for role in D.SPLITS:
        assert D.SUBSTITUTE_NAME in desc.splits[role]
        assert "WikiText-2 train" not in desc.splits[role]
    assert sum(desc.num_articles.values()) == 20
    assert desc.num_articles == {"train": 16, "valid": 2, "test": 2}
    heads = {s: [ln for ln in corpus.split(s) if D.is_article_heading(ln)] for s in D.SPLITS}
    all_heads = [h for hs in heads.values() for h in hs]
    assert len(all_heads) == len(set(all_heads)) == 20  # each article in exactly one split
    # every paragraph travels with its article (first token names the article)
    for s in D.SPLITS:
        titles = {h.split()[1].lower() + h.split()[3] for h in heads[s]}  # e.g. "valid3"
        paragraphs = [ln for ln in corpus.split(s) if ln and not ln.startswith("=")]
        assert {p.split()[0] for p in paragraphs} <= titles
    assert desc.num_tokens["train"] == sum(len(ln.split()) for ln in corpus.train)


def test_substitute_split_is_deterministic_and_seeded(wt_dir):
    a = D.load_wikitext2("local", wt_dir, substitute_seed=0)
    b = D.load_wikitext2("local", wt_dir, substitute_seed=0)
    c = D.load_wikitext2("local", wt_dir, substitute_seed=1)
    assert a.train == b.train and a.valid == b.valid
    assert a.train != c.train


def test_local_directory_with_a_training_split_is_used_as_is(wt_dir):
    (wt_dir / "train.txt").write_text("\n".join(fake_split(4, "Train", 9)) + "\n")
    corpus = D.load_wikitext2("local", wt_dir)
    assert corpus.description.is_official
    assert corpus.train[1].startswith("= Train Article 0")
    assert corpus.description.num_articles["train"] == 4


def test_env_var_names_the_local_directory(wt_dir, no_data_env):
    no_data_env.setenv(D.WIKITEXT_DIR_ENV, str(wt_dir))
    assert D.wikitext_dir() == wt_dir
    corpus = D.load_wikitext2("auto")  # an explicit directory wins over the hub
    assert corpus.description.num_articles["train"] == 16


def test_data_root_variable_names_wikitext_and_tokenizer_folders(tmp_path, no_data_env):
    assert D.data_root() is None and D.wikitext_dir() is None and D.gpt2_tokenizer_dir() is None
    no_data_env.setenv(D.DATA_DIR_ENV, str(tmp_path))
    assert D.data_root() == tmp_path
    assert D.wikitext_dir() == tmp_path / "wikitext-2"
    assert D.gpt2_tokenizer_dir() == tmp_path / "gpt2-tokenizer"


def test_precedence_argument_then_wikitext_variable_then_data_root(wt_dir, tmp_path, no_data_env):
    """argument > NMST_WIKITEXT_DIR > NMST_DATA_DIR/wikitext-2 (> the hub, when none is set)."""
    root = tmp_path / "root"
    (root / "wikitext-2").mkdir(parents=True)
    (root / "wikitext-2" / "valid.txt").write_text("\n".join(fake_split(6, "Root", 3)) + "\n")
    no_data_env.setenv(D.DATA_DIR_ENV, str(root))
    assert D.load_wikitext2("auto").description.num_articles == {"train": 4, "valid": 1, "test": 1}
    no_data_env.setenv(D.WIKITEXT_DIR_ENV, str(wt_dir))  # the specific variable wins over the root
    assert D.wikitext_dir() == wt_dir
    assert sum(D.load_wikitext2("auto").description.num_articles.values()) == 20
    only_valid = tmp_path / "arg"
    only_valid.mkdir()
    (only_valid / "valid.txt").write_text("\n".join(fake_split(3, "Arg", 4)) + "\n")
    assert D.wikitext_dir(only_valid) == only_valid  # the argument wins over both
    assert sum(D.load_wikitext2("local", only_valid).description.num_articles.values()) == 3


def test_no_local_data_and_no_hub_fails_fast_saying_which_variable_to_set(no_data_env):
    no_data_env.setenv("HF_HUB_OFFLINE", "1")
    for source in ("auto", "local", "substitute"):
        start = time.perf_counter()
        with pytest.raises(D.WikiTextUnavailable) as info:
            D.load_wikitext2(source)
        assert time.perf_counter() - start < 2.0
        message = str(info.value)
        for needed in ("NMST_DATA_DIR", "wikitext-2/", "valid.txt", "test.txt", "NMST_WIKITEXT_DIR"):
            assert needed in message, (source, needed, message)
    with pytest.raises(D.WikiTextUnavailable, match="NMST_DATA_DIR"):
        D.load_local_splits()


def test_data_root_without_a_wikitext_folder_is_a_clear_error(tmp_path, no_data_env):
    no_data_env.setenv(D.DATA_DIR_ENV, str(tmp_path))  # e.g. a root holding only gpt2-tokenizer/
    with pytest.raises(D.WikiTextUnavailable, match=r"does not exist.*\$NMST_DATA_DIR/wikitext-2|"
                                                    r"\$NMST_DATA_DIR/wikitext-2.*does not exist"):
        D.load_wikitext2("auto")


def test_offline_hub_fails_fast_with_a_clear_message(no_data_env):
    no_data_env.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(D.WikiTextUnavailable, match="not reachable"):
        D.load_wikitext2("hub")
    assert time.perf_counter() - start < 2.0


def test_reachability_probe_is_bounded_by_its_timeout(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    start = time.perf_counter()
    # TEST-NET-1 address: never answers, so only the timeout can end the probe
    assert D.hub_is_reachable(timeout=0.3, host="192.0.2.1", port=9) is False
    assert time.perf_counter() - start < 1.5


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(D.WikiTextUnavailable, match="does not exist"):
        D.load_local_splits(tmp_path / "nowhere")
    with pytest.raises(D.WikiTextUnavailable, match="no WikiText split files"):
        D.load_local_splits(tmp_path)
    with pytest.raises(ValueError, match="source"):
        D.load_wikitext2("internet")


def test_real_validation_and_test_splits_give_the_named_substitute():
    path = REAL_WIKITEXT_DIR
    if path is None:
        pytest.skip(NO_REAL_WIKITEXT)
    corpus = D.load_wikitext2("local", path)
    desc = corpus.description
    assert not desc.is_official
    local = D.load_local_splits(path)
    assert set(local) == {"valid", "test"}
    assert len(local["valid"]) == 3760 and len(local["test"]) == 4358  # the wikitext-2-v1 line counts
    assert sum(desc.num_articles.values()) == len(D.split_articles(local["valid"])) + len(
        D.split_articles(local["test"]))
    assert desc.num_tokens["train"] > 300_000


# ---------------------------------------------------------------------------- fixture corpus


def test_fixture_corpus_is_what_its_script_generates():
    out = subprocess.run([sys.executable, str(FIXTURES / "make_corpus.py"), "--check"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    sizes = {p.name: p.stat().st_size for p in FIXTURE_WIKITEXT_DIR.iterdir() if p.suffix == ".txt"}
    assert set(sizes) == {"valid.txt", "test.txt"} and sum(sizes.values()) < 200_000


def test_fixture_corpus_reads_like_the_local_wikitext_folder(no_data_env):
    """The fixture, named through NMST_DATA_DIR as a user would, gives the named substitute with
    WikiText's structure: article and section headings, blank rows, lines > k tokens."""
    no_data_env.setenv(D.DATA_DIR_ENV, str(FIXTURE_DATA_DIR))
    local = D.load_local_splits()
    assert set(local) == {"valid", "test"}
    articles = {s: D.split_articles(lines) for s, lines in local.items()}
    assert {s: len(a) for s, a in articles.items()} == {"valid": 16, "test": 14}
    assert all(D.is_article_heading(a[0]) for a in articles["valid"] + articles["test"])
    assert any(line.startswith("= = ") for line in local["valid"]) and "" in local["valid"]
    corpus = D.load_wikitext2("auto")
    desc = corpus.description
    assert not desc.is_official and D.SUBSTITUTE_NAME in desc.substitute
    assert desc.num_articles == {"train": 24, "valid": 3, "test": 3}
    assert desc.location.endswith("fixtures/data/wikitext-2")
    vocab = D.build_vocabulary(corpus.train, cap=300)
    valid = D.make_sequences(corpus.valid, vocab)
    assert len(valid) >= 24  # the quick profile decodes 24 validation contexts
    assert D.make_sequences(corpus.train, vocab).num_tokens > 12_000  # the quick profile's training budget


# ------------------------------------------------------------------------------ vocabulary


def test_vocabulary_puts_eos_last_and_has_pad_and_unk():
    vocab = D.build_vocabulary(["b a b c", "c b"])
    assert vocab.itos[-1] == D.EOS and vocab.eos_id == len(vocab) - 1
    assert vocab.itos[:3] == ["b", "c", "a"]  # by frequency, ties by first occurrence
    assert {D.PAD, D.UNK} <= set(vocab.itos)
    assert vocab.encode(["a", "zzz"]) == [vocab.stoi["a"], vocab.unk_id]
    assert vocab.decode([vocab.stoi["c"], -1, vocab.eos_id]) == ["c", D.EOS]


def test_vocabulary_cap_keeps_the_most_frequent_words_plus_unk():
    lines = ["a a a a b b b c c d <unk> <unk>"]
    vocab = D.build_vocabulary(lines, cap=2)
    assert vocab.itos == ["a", "b", D.UNK, D.PAD, D.EOS]
    seqs = D.make_sequences(["a b c d " * 3], vocab, context_len=2)
    words = vocab.decode(seqs.tokens)
    assert Counter(words)[D.UNK] == 6 and "c" not in words


def test_vocabulary_rejects_reserved_tokens_and_empty_data():
    with pytest.raises(ValueError, match="reserved"):
        D.build_vocabulary(["a <eos> b"])
    with pytest.raises(ValueError, match="empty"):
        D.build_vocabulary(["", "  "])
    with pytest.raises(ValueError, match="cap"):
        D.build_vocabulary(["a"], cap=0)


# ------------------------------------------------------------------------------- sequences


def test_sequences_are_lines_with_eos_and_short_lines_are_dropped():
    lines = ["one two three", "", "a b c d e f g h i j k l", "a b c d e f g h i j", " = = Heading = = "]
    vocab = D.build_vocabulary(lines)
    seqs = D.make_sequences(lines, vocab, context_len=10)
    assert len(seqs) == 1  # only the 12-token line has more than k = 10 tokens
    assert seqs.line_numbers.tolist() == [2]
    assert vocab.decode(seqs.sequence(0)) == "a b c d e f g h i j k l".split() + [D.EOS]
    assert vocab.decode(seqs.contexts()[0]) == list("abcdefghij")
    assert seqs.continuation_lengths.tolist() == [3]  # k, l, eos
    assert seqs.num_target_tokens == 3


def test_batch_masks_split_context_from_continuation():
    lines = ["a b c d e f", "a b c d e f g h i"]
    vocab = D.build_vocabulary(lines)
    seqs = D.make_sequences(lines, vocab, context_len=3)
    batch = D.make_batch(seqs, [0, 1])
    assert batch.tokens.shape == (2, 10)
    assert batch.tokens[0, 7:].tolist() == [vocab.pad_id] * 3
    assert batch.context_mask.tolist()[0] == [True, True] + [False] * 7
    # scored targets are the continuation words and eos, never context or padding
    scored = [vocab.decode(batch.targets[i][batch.target_mask[i]]) for i in range(2)]
    assert scored == [["d", "e", "f", D.EOS], ["d", "e", "f", "g", "h", "i", D.EOS]]
    assert batch.num_target_tokens == int(batch.target_mask.sum()) == 11


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=60), batch_size=st.integers(1, 9),
       max_tokens=st.one_of(st.none(), st.integers(1, 120)), shuffle=st.booleans(), seed=st.integers(0, 5))
def test_bucket_batches_partition_the_data_within_the_caps(lengths, batch_size, max_tokens, shuffle, seed):
    lengths = torch.tensor(lengths)
    gen = torch.Generator().manual_seed(seed)
    batches = D.bucket_batches(lengths, batch_size, max_tokens=max_tokens, shuffle=shuffle, generator=gen,
                               bucket_factor=2)
    flat = torch.cat(batches).tolist()
    assert sorted(flat) == list(range(len(lengths)))
    for b in batches:
        assert 1 <= b.numel() <= batch_size
        if max_tokens is not None and b.numel() > 1:
            assert b.numel() * int(lengths[b].max()) <= max_tokens
    again = D.bucket_batches(lengths, batch_size, max_tokens=max_tokens, shuffle=shuffle,
                             generator=torch.Generator().manual_seed(seed), bucket_factor=2)
    assert all(torch.equal(x, y) for x, y in zip(batches, again))


def test_unshuffled_buckets_are_sorted_by_length():
    lengths = torch.tensor([5, 1, 9, 3, 7, 2])
    batches = D.bucket_batches(lengths, 2)
    assert [lengths[b].tolist() for b in batches] == [[1, 2], [3, 5], [7, 9]]


def test_make_batch_matches_a_naive_padding():
    lines = [" ".join(f"w{j}" for j in range(n)) for n in (11, 15, 12, 30, 11)]
    vocab = D.build_vocabulary(lines)
    seqs = D.make_sequences(lines, vocab)
    idx = [3, 0, 4]
    batch = D.make_batch(seqs, idx)
    naive = torch.nn.utils.rnn.pad_sequence([seqs.sequence(i) for i in idx], batch_first=True,
                                            padding_value=vocab.pad_id)
    assert torch.equal(batch.tokens, naive)
    assert batch.lengths.tolist() == [31, 12, 12]


def test_epoch_order_depends_only_on_seed_and_epoch():
    lines = [" ".join(f"w{j}" for j in range(11 + n % 7)) for n in range(40)]
    seqs = D.make_sequences(lines, D.build_vocabulary(lines))
    first = [b.tokens for b in D.iterate_batches(seqs, 4, shuffle=True, seed=1, epoch=2)]
    again = [b.tokens for b in D.iterate_batches(seqs, 4, shuffle=True, seed=1, epoch=2)]
    other = [b.tokens for b in D.iterate_batches(seqs, 4, shuffle=True, seed=1, epoch=3)]
    rest = [b.tokens for b in D.iterate_batches(seqs, 4, shuffle=True, seed=1, epoch=2, start=3)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(first, other))
    assert all(torch.equal(a, b) for a, b in zip(first[3:], rest))


def test_the_library_names_no_workplace_paths():
    """Data locations come from arguments and NMST_DATA_DIR / NMST_WIKITEXT_DIR, never from the
    layout of the project's machines (the ../shared folder beside the checkout)."""
    root = Path(nmst_lib.__file__).resolve().parent
    offenders = [f"{p.relative_to(root.parent)}:{n}" for p in sorted(root.rglob("*.py"))
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if "shared/data" in line or '"shared"' in line or "../shared" in line]
    assert not offenders, offenders


def test_going_offline_does_not_leak_out_of_a_test():
    """The tests above that found the hub unreachable set the offline flags through
    nmst_lib.data.go_offline; the no_data_env fixture restored them (chapter kernels started
    later by the same pytest run inherit os.environ)."""
    import os

    assert os.environ.get("HF_DATASETS_OFFLINE") == _OFFLINE_AT_IMPORT


def test_the_package_reexports_every_public_name_of_its_modules():
    """nmst_lib.data is a package of modules by idea (sources, corpus, vocabulary, ...): every
    public name of each module (its __all__) is the same object in the package, and the
    package's __all__ names nothing else but repo_root (from nmst_lib.files)."""
    import importlib
    import pkgutil

    names = {"repo_root"}
    for info in pkgutil.iter_modules(D.__path__):
        module = importlib.import_module(f"nmst_lib.data.{info.name}")
        names |= set(module.__all__)
        assert all(getattr(D, n) is getattr(module, n) for n in module.__all__), info.name
    assert len(D.__all__) == len(set(D.__all__)) and set(D.__all__) == names


def test_bucket_batches_refuses_lengths_that_are_not_an_integer_tensor_and_a_bucket_factor_below_one():
    with pytest.raises(TypeError, match="lengths must be a 1-D integer tensor"):
        D.bucket_batches([12, 13, 14], 2)  # an AttributeError before
    with pytest.raises(TypeError, match="lengths must be a 1-D integer tensor"):
        D.bucket_batches(torch.tensor([12.0, 13.0]), 2)
    for bad, error in ((0, ValueError), (-3, ValueError), (2.5, TypeError)):
        with pytest.raises(error, match="bucket_factor"):
            D.bucket_batches(torch.tensor([12, 13, 14]), 2, shuffle=True, generator=torch.Generator(),
                             bucket_factor=bad)
