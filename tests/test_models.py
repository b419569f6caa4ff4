"""Tests of nmst_lib.models: the decoding protocol, select reordering every piece of state,
and a loss that covers continuation tokens only (Chapter 6, 06_wikitext)."""

import pytest
import torch

from datasources import NO_REAL_TOKENIZER, REAL_TOKENIZER_DIR
from nmst_lib import data as D
from nmst_lib.decoding import LanguageModel, decode
from nmst_lib.heads import NMSTHead, STHead, VanillaHead, head_from_name
from nmst_lib.metrics import perplexity
from nmst_lib.models import LSTMLM, RNNLM, RecurrentState, build_model

V = 12
EOS = V - 1


pytestmark = pytest.mark.usefixtures("one_thread")


def varied_model(arch, head, eps, eos_bias, seed=0):
    """A random model whose greedy/beam continuations end at different steps per row."""
    torch.manual_seed(seed)
    model = build_model(arch, V, hidden=16, layers=2, dropout=0.0, head=head_from_name(head, eps))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.6)
        model.output.bias[EOS] = eos_bias
    return model.eval()


VARIED = [("rnn", "va", None, -1.0), ("rnn", "st", 0.02, 4.0), ("lstm", "st", 0.02, 4.0), ("lstm", "nmst", 0.02, -3.0)]
ALL_HEADS = [("va", None), ("st", 0.05), ("nmst", 0.05)]


def contexts(n=8, k=4, seed=1):
    return torch.randint(0, V - 1, (n, k), generator=torch.Generator().manual_seed(seed))



def assert_steps_equal_forward(model, seq, k, full, tol):
    """initial_state on the first k tokens, then one step per later token, gives the
    log-probabilities of the full forward pass ``full`` at every continuation position."""
    state, lp = model.initial_state(seq[:, :k])
    steps = [lp]
    for j in range(k, seq.shape[1] - 1):
        state, lp = model.step(state, seq[:, j])
        steps.append(lp)
    torch.testing.assert_close(torch.stack(steps, 1), full[:, k - 1:], atol=tol, rtol=tol)

def test_models_follow_the_decoding_protocol():
    for cls in (RNNLM, LSTMLM):
        model = cls(V, hidden=8, layers=1, dropout=0.0).eval()
        assert isinstance(model, LanguageModel)
        assert model.vocab_size == V and model.eos_id == V - 1
        state, log_probs = model.initial_state(contexts())
        assert isinstance(state, RecurrentState)
        assert log_probs.shape == (8, V)
        torch.testing.assert_close(log_probs.logsumexp(-1), torch.zeros(8), atol=1e-5, rtol=0)
        state, log_probs = model.step(state, torch.arange(8) % V)
        assert log_probs.shape == (8, V)


def test_default_head_is_vanilla_and_embeddings_are_tied():
    model = LSTMLM(V, hidden=8, layers=2, dropout=0.1)
    assert isinstance(model.head, VanillaHead)
    assert model.output.weight is model.embedding.weight


@pytest.mark.parametrize("arch", ["rnn", "lstm"])
@pytest.mark.parametrize("head,eps", ALL_HEADS)
def test_incremental_steps_match_teacher_forcing(arch, head, eps):
    """initial_state + step give the same log-probs as forward with the context mask: the head
    state (ST's running product, NMST's step count) is carried correctly."""
    model = varied_model(arch, head, eps, eos_bias=0.0)
    k, T = 4, 7
    seq = torch.randint(0, V - 1, (3, k + T), generator=torch.Generator().manual_seed(5))
    context_mask = (torch.arange(k + T - 1) < k - 1).expand(3, -1)
    full = model(seq[:, :-1], context_mask)
    assert_steps_equal_forward(model, seq, k, full, tol=1e-5)


@pytest.mark.parametrize("arch,head,eps,bias", VARIED)
def test_select_reorders_all_state_batched_decode_equals_per_row(arch, head, eps, bias):
    """Greedy and beam search over a batch (rows finish at different steps and are dropped;
    beams are repeated and reordered) give what each row gives alone."""
    model = varied_model(arch, head, eps, bias)
    ctx = contexts()
    for method, kw in (("greedy", {}), ("beam", {"beam_size": 3})):
        batched = decode(model, ctx, method, max_len=40, **kw)
        assert len(set(batched.lengths.tolist())) > 1, "precondition: rows must finish at different steps"
        for i in range(ctx.shape[0]):
            alone = decode(model, ctx[i:i + 1], method, max_len=40, **kw)
            assert torch.equal(batched.tokens[i], alone.tokens[0]), (method, i)
            torch.testing.assert_close(batched.scores[i], alone.scores[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch,head,eps", [("lstm", "st", 0.05), ("rnn", "nmst", 0.05), ("lstm", "va", None)])
def test_select_permutes_hidden_and_head_state(arch, head, eps):
    model = varied_model(arch, head, eps, eos_bias=0.0)
    state, _ = model.initial_state(contexts(5))
    tokens = torch.tensor([1, 2, 3, 4, 5])
    state, _ = model.step(state, tokens)  # ST's running products now differ per row
    perm = torch.tensor([4, 0, 0, 3, 1])
    _, expected = model.step(state, tokens)
    _, got = model.step(model.select(state, perm), tokens[perm])
    torch.testing.assert_close(got, expected[perm], atol=1e-6, rtol=1e-6)
    picked = model.select(state, perm)
    hidden = picked.hidden if isinstance(picked.hidden, tuple) else (picked.hidden,)
    original = state.hidden if isinstance(state.hidden, tuple) else (state.hidden,)
    for h, h0 in zip(hidden, original):
        assert torch.equal(h, h0[:, perm])
    assert torch.equal(picked.head, state.head[perm])


def test_select_reorders_nmst_step_counts_of_rows_at_different_steps():
    """A hand-built state whose rows are at different steps: select must carry each row's t."""
    model = varied_model("lstm", "nmst", 0.3, eos_bias=-3.0)
    state, _ = model.initial_state(contexts(2))
    state = RecurrentState(state.hidden, torch.tensor([1, 40]))
    _, lp = model.step(state, torch.tensor([3, 3]))
    _, lp_swapped = model.step(model.select(state, torch.tensor([1, 0])), torch.tensor([3, 3]))
    torch.testing.assert_close(lp_swapped, lp.flip(0))
    assert lp[1, EOS] > lp[0, EOS]  # the lower bound 1 - (1 - eps)^t grows with t


@pytest.mark.parametrize("method,kw", [("ancestral", {}), ("top-k", {"k": 2}), ("nucleus", {"p": 0.5}),
                                       ("top-k", {"k": 2, "consistent": True})])
def test_sampling_decoders_run_on_the_models(method, kw):
    model = varied_model("lstm", "nmst", 0.05, eos_bias=-3.0)
    g = decode(model, contexts(), method, max_len=30, generator=torch.Generator().manual_seed(0), **kw)
    assert g.tokens.shape == (8, 30)
    assert bool(g.terminated.all())  # NMST with eps = 0.05 ends well within 30 steps here


def test_decoding_requires_eval_mode():
    model = RNNLM(V, hidden=8, layers=2, dropout=0.5)
    with pytest.raises(RuntimeError, match="eval"):
        model.initial_state(contexts())


def _toy_data():
    lines = ["a b c d e f g h i j k l m", "a b c d e f g h i j k", "b c d e f g h i j k l m n o p q",
             "short line"]
    vocab = D.build_vocabulary(lines)
    return D.make_sequences(lines, vocab), vocab


@pytest.mark.parametrize("head,eps", ALL_HEADS)
def test_loss_covers_continuation_tokens_only(head, eps):
    """token_nll of a padded batch = sum of the rows' own token_nll (padding carries nothing),
    the count is the number of continuation tokens incl. eos, and the mean equals an
    independent computation from forward() over the continuation positions."""
    seqs, vocab = _toy_data()
    torch.manual_seed(0)
    model = build_model("lstm", len(vocab), hidden=8, layers=1, dropout=0.0, head=head_from_name(head, eps)).eval()
    batch = D.make_batch(seqs, torch.arange(len(seqs)))
    total, count = model.token_nll(batch)
    assert int(count) == int((seqs.lengths - seqs.context_len).sum())
    singles = [model.token_nll(D.make_batch(seqs, [i])) for i in range(len(seqs))]
    torch.testing.assert_close(total, sum(s[0] for s in singles), atol=1e-4, rtol=1e-5)
    # independent: score each row's continuation from the unpadded forward pass
    k = seqs.context_len
    manual = []
    for i in range(len(seqs)):
        seq = seqs.sequence(i)[None]
        lp = model(seq[:, :-1], (torch.arange(seq.shape[1] - 1) < k - 1)[None])
        manual.append(lp[0, k - 1:].gather(-1, seq[0, k:, None]).squeeze(-1))
    manual = torch.cat(manual)
    torch.testing.assert_close(model.loss(batch), -manual.mean(), atol=1e-5, rtol=1e-5)
    # the shared perplexity metric agrees
    with torch.no_grad():
        lp = model(batch.inputs, batch.context_mask)
    ppl = perplexity(lp, batch.targets, batch.target_mask)
    assert ppl == pytest.approx(float(torch.exp(total.detach() / count)), rel=1e-5)


@pytest.mark.parametrize("head,eps", [("st", 1e-5), ("nmst", 1e-5)])
def test_loss_gradients_are_finite_with_context_positions(head, eps):
    """Context positions have p(eos) = 0 (log -inf) under ST/NMST; no NaN may leak into the gradients."""
    seqs, vocab = _toy_data()
    model = build_model("rnn", len(vocab), hidden=8, layers=2, dropout=0.2, head=head_from_name(head, eps))
    batch = D.make_batch(seqs, torch.arange(len(seqs)))
    lp = model(batch.inputs, batch.context_mask)
    assert bool((lp[batch.context_mask][:, model.eos_id] == float("-inf")).all())
    model.loss(batch).backward()
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())


def test_bad_model_arguments_are_rejected():
    with pytest.raises(ValueError, match="arch"):
        build_model("gru", V, hidden=8, layers=1, dropout=0.0)
    with pytest.raises(ValueError, match="dropout"):
        RNNLM(V, hidden=8, layers=1, dropout=1.0)
    with pytest.raises(ValueError, match="eos_id"):
        RNNLM(V, hidden=8, layers=1, dropout=0.0, head=STHead(0.1, eos_id=0))
    with pytest.raises(TypeError, match="head"):
        RNNLM(V, hidden=8, layers=1, dropout=0.0, head="nmst")
    with pytest.raises(ValueError, match="inputs"):
        RNNLM(V, hidden=8, layers=1, dropout=0.0)(torch.zeros(3, dtype=torch.long))


def test_heads_accept_explicit_last_eos_id():
    model = RNNLM(V, hidden=8, layers=1, dropout=0.0, head=NMSTHead(0.1, eos_id=V - 1)).eval()
    assert model.eos_id == V - 1
    decode(model, contexts(2), "greedy", max_len=5)


# ------------------------------------------------------------------------------------ GPT-2


@pytest.fixture(scope="module")
def tiny_gpt2():
    pytest.importorskip("transformers")
    from nmst_lib.models import GPT2LM

    def build(head, eps, eos_scale=8.0):
        torch.manual_seed(0)
        model = GPT2LM.from_config(head_from_name(head, eps), n_layer=2, n_embd=32, n_head=2, n_positions=64)
        with torch.no_grad():  # a louder eos embedding: continuations end at different steps
            model.model.transformer.wte.weight[-1] *= eos_scale
        return model.eval()

    return build


def test_gpt2_tokenizer_is_the_real_one():
    if REAL_TOKENIZER_DIR is None:
        pytest.skip(NO_REAL_TOKENIZER)
    tok = D.load_gpt2_tokenizer(REAL_TOKENIZER_DIR)
    assert tok("Hello world")["input_ids"] == [15496, 995]
    seqs = D.make_bpe_sequences(["Hello world", " = Valkyria Chronicles III = ",
                                 "The game began development in 2010 , carrying over a large portion of the work"], tok)
    assert len(seqs) == 1 and int(seqs.sequence(0)[-1]) == 50256 == seqs.vocab.eos_id


def test_gpt2_tokenizer_loading_fails_clearly_without_its_files(tmp_path, tiny_bpe_tokenizer, no_data_env):
    with pytest.raises(FileNotFoundError, match="vocab.json and merges.txt"):
        D.load_gpt2_tokenizer(tmp_path)  # a named folder without the files: no silent download
    no_data_env.setenv(D.DATA_DIR_ENV, str(tmp_path))  # a data root without gpt2-tokenizer/
    with pytest.raises(FileNotFoundError, match="NMST_DATA_DIR/gpt2-tokenizer"):
        D.load_gpt2_tokenizer()
    no_data_env.delenv(D.DATA_DIR_ENV)
    no_data_env.setenv("HF_HUB_OFFLINE", "1")  # nothing configured, no hub: fast, names the variable
    with pytest.raises(FileNotFoundError, match="NMST_DATA_DIR"):
        D.load_gpt2_tokenizer()
    from datasources import write_tiny_bpe_tokenizer

    with pytest.raises(ValueError, match="expected the GPT-2 tokenizer"):  # a BPE tokenizer, but not GPT-2's
        D.load_gpt2_tokenizer(write_tiny_bpe_tokenizer(tmp_path / "tiny"))


def test_bpe_sequences_and_gpt2_training_step_with_a_tiny_tokenizer(tiny_bpe_tokenizer):
    """make_bpe_sequences + TokenizerVocabulary + GPT2LM.token_nll on a generated byte-level BPE
    tokenizer (eos last), so the GPT-2 data path runs without GPT-2's tokenizer files."""
    tok = tiny_bpe_tokenizer
    lines = ["the chain of the train , and the bin in the sea .", " = A = ", "",
             "a tour of the isle , and the chair of the bear in the inn ."]
    seqs = D.make_bpe_sequences(lines, tok, context_len=10)
    assert seqs.line_numbers.tolist() == [0, 3]  # the heading is too short, the blank line is skipped
    eos = len(tok) - 1
    assert seqs.vocab.eos_id == eos and all(int(seqs.sequence(i)[-1]) == eos for i in range(len(seqs)))
    assert tok.decode(seqs.sequence(0)[:-1].tolist()) == " " + lines[0]  # byte-level: lossless
    assert seqs.vocab.decode(seqs.sequence(0)[:2]) == ["Ġthe", "Ġc"]
    from nmst_lib.models import GPT2LM

    torch.manual_seed(0)
    model = GPT2LM.from_config(NMSTHead(0.05), vocab_size=len(tok), eos_token_id=eos, bos_token_id=eos,
                               n_layer=1, n_embd=16, n_head=2, n_positions=128)
    batch = D.make_batch(seqs, torch.arange(len(seqs)))
    loss = model.loss(batch)
    assert torch.isfinite(loss) and float(loss.detach()) > 0
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    g = decode(model.eval(), seqs.contexts(), "greedy", max_len=8)
    assert g.tokens.shape == (2, 8)


@pytest.mark.parametrize("head,eps", ALL_HEADS)
def test_gpt2_incremental_steps_match_teacher_forcing(tiny_gpt2, head, eps):
    model = tiny_gpt2(head, eps, eos_scale=1.0)
    assert model.eos_id == 50256 == model.vocab_size - 1
    k, T = 4, 5
    seq = torch.randint(0, 50256, (2, k + T), generator=torch.Generator().manual_seed(3))
    full = model(seq[:, :-1], (torch.arange(k + T - 1) < k - 1).expand(2, -1))
    assert_steps_equal_forward(model, seq, k, full, tol=1e-4)


def test_gpt2_select_reorders_the_cache_batched_decode_equals_per_row(tiny_gpt2):
    model = tiny_gpt2("va", None)
    ctx = torch.randint(0, 50256, (6, 5), generator=torch.Generator().manual_seed(1))
    for method, kw in (("greedy", {}), ("beam", {"beam_size": 3})):
        batched = decode(model, ctx, method, max_len=20, **kw)
        assert len(set(batched.lengths.tolist())) > 1, "precondition: rows must finish at different steps"
        for i in range(ctx.shape[0]):
            alone = decode(model, ctx[i:i + 1], method, max_len=20, **kw)
            assert torch.equal(batched.tokens[i], alone.tokens[0]), (method, i)


def test_gpt2_refuses_to_decode_past_its_positions(tiny_gpt2):
    model = tiny_gpt2("va", None, eos_scale=0.0)
    with pytest.raises(ValueError, match="positions"):
        decode(model, torch.zeros(1, 10, dtype=torch.long), "greedy", max_len=80)
