"""Tests for decoding sparse models and the decoders of Chapter 8 (08_sparse): entmax sampling
(Martins et al. (2020), Sec. 3), ancestral sampling with a temperature, every existing decoder on
log-probabilities with ``-inf`` entries, and :func:`nmst_lib.decoding.decoder_distribution`.

Toy sparse models are bigram tables (:class:`nmst_lib.markov.MarkovLM`) whose rows are
sparsemax / entmax distributions, so many transitions have probability exactly zero.
Frequency checks draw many seeded samples and compare with the exact probabilities
(a 5-sigma binomial band per token).
"""

from __future__ import annotations

import math

import pytest
import torch

from nmst_lib.decoding import (
    METHODS,
    decode,
    decoder_distribution,
    nucleus_mask,
    sample_tokens,
    top_k_mask,
)
from nmst_lib.entmax import entmax
from nmst_lib.markov import MarkovLM

INF = math.inf
F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def sparse_table(vocab_size=8, alpha=2.0, scale=2.0, seed=0, eos_zero=False) -> MarkovLM:
    """A bigram LM whose rows are alpha-entmax of random scores (exact zeros), eos last."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(vocab_size, vocab_size, generator=g, dtype=F64) * scale
    if eos_zero:
        scores[:, -1] = -INF
    return MarkovLM(entmax(scores, alpha, dim=-1).log())


# every token-level decoder, with its arguments
TOKEN_LEVEL = [
    ("greedy", {}),
    ("ancestral", {}),
    ("ancestral", {"temperature": 0.5}),
    ("ancestral", {"temperature": 3.0}),
    ("top-k", {"k": 3}),
    ("top-k", {"k": 3, "consistent": True}),
    ("top-k", {"k": 5}),  # more than the support of most rows
    ("nucleus", {"p": 0.8}),
    ("nucleus", {"p": 0.8, "consistent": True}),
    ("nucleus", {"p": 1.0}),
    ("entmax", {"alpha": 1.5}),
    ("entmax", {"alpha": 2.0}),
    ("entmax", {"alpha": 1.0}),
]


def _transitions(gen, contexts):
    """(previous token, emitted token) pairs of every generated sequence."""
    pairs = []
    for row, seq in zip(contexts[:, -1].tolist(), gen.to_lists()):
        previous = row
        for token in seq:
            pairs.append((previous, token))
            previous = token
    return pairs


@pytest.mark.parametrize("method,kw", TOKEN_LEVEL + [("beam", {"beam_size": 3}), ("beam", {"beam_size": 6})])
def test_every_decoder_emits_only_tokens_of_positive_probability_on_a_sparse_model(method, kw):
    model = sparse_table(seed=1)
    table = model.transition_log_probs
    assert float((table == -INF).double().mean()) > 0.3, "precondition: a sparse table"
    contexts = torch.arange(7).repeat(20)[:, None]
    gen = decode(model, contexts, method, max_len=12, generator=torch.Generator().manual_seed(2), **kw)
    for previous, token in _transitions(gen, contexts):
        assert table[previous, token] > -INF, (method, previous, token)
    assert bool(torch.isfinite(gen.scores).all())
    # scores are the sums of the table's log-probabilities of the returned tokens
    for i, seq in enumerate(gen.to_lists()):
        previous, total = int(contexts[i, -1]), 0.0
        for token in seq:
            total += float(table[previous, token])
            previous = token
        assert math.isclose(float(gen.scores[i]), total, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize("method,kw", [m for m in TOKEN_LEVEL if m[0] != "greedy"])
def test_decode_draws_follow_decoder_distribution(method, kw):
    # one step, many seeded draws: the frequency of every token within 5 binomial sigmas of
    # decoder_distribution, and no draw outside its support
    model = sparse_table(vocab_size=6, alpha=1.5, scale=1.0, seed=3)
    row = model.transition_log_probs[2]
    n = 20_000
    gen = decode(model, torch.full((n, 1), 2), method, max_len=1, generator=torch.Generator().manual_seed(4), **kw)
    counts = torch.bincount(gen.tokens[:, 0], minlength=6).double()
    extra = {"eos_id": model.eos_id} if kw.get("consistent") else {}
    probs = decoder_distribution(row, method, **kw, **extra)
    assert bool((counts[probs == 0] == 0).all())
    sigma = (n * probs * (1 - probs)).sqrt()
    assert bool(((counts - n * probs).abs() <= 5 * sigma + 1e-9).all()), (counts, n * probs)


def test_greedy_decode_is_the_argmax_of_decoder_distribution():
    model = sparse_table(seed=5)
    gen = decode(model, torch.arange(7)[:, None], "greedy", max_len=1)
    probs = decoder_distribution(model.transition_log_probs[:7], "greedy")
    assert torch.equal(probs.argmax(-1), gen.tokens[:, 0])
    assert torch.equal(probs.sum(-1), torch.ones(7, dtype=F64)) and set(probs.unique().tolist()) == {0.0, 1.0}


def test_entmax_sampling_with_alpha_one_is_ancestral_sampling_draw_for_draw():
    model = sparse_table(alpha=1.5, seed=6)
    contexts = torch.arange(7).repeat(10)[:, None]
    ancestral = decode(model, contexts, "ancestral", max_len=15, generator=torch.Generator().manual_seed(7))
    entmax_one = decode(model, contexts, "entmax", alpha=1.0, max_len=15, generator=torch.Generator().manual_seed(7))
    tempered_one = decode(model, contexts, "ancestral", temperature=1.0, max_len=15,
                          generator=torch.Generator().manual_seed(7))
    assert torch.equal(ancestral.tokens, entmax_one.tokens)
    assert torch.equal(ancestral.tokens, tempered_one.tokens)


def test_entmax_sampling_approaches_ancestral_as_alpha_goes_to_one():
    row = torch.log_softmax(torch.randn(9, generator=torch.Generator().manual_seed(8), dtype=F64), -1)
    softmax = decoder_distribution(row, "ancestral")
    alphas = (1.5, 1.1, 1.01, 1.001)
    gaps = [float((decoder_distribution(row, "entmax", alpha=a) - softmax).abs().max()) for a in alphas]
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < 1e-3


def test_entmax_sampling_of_log_softmax_is_entmax_of_the_logits():
    # shift-invariance: entmax(log_softmax z) = entmax(z), so entmax sampling of a softmax model is
    # entmax of its scores (a second entmax on an entmax model's log-output is not its distribution)
    z = torch.randn(4, 10, generator=torch.Generator().manual_seed(9), dtype=F64) * 2
    for alpha in (1.2, 1.5, 2.0):
        torch.testing.assert_close(decoder_distribution(torch.log_softmax(z, -1), "entmax", alpha=alpha),
                                   entmax(z, alpha, dim=-1), atol=1e-12, rtol=0)


def test_temperature_scales_the_log_probabilities_and_keeps_zeros():
    row = sparse_table(seed=10).transition_log_probs[0]
    for t in (0.3, 1.0, 4.0):
        probs = decoder_distribution(row, "ancestral", temperature=t)
        expected = torch.softmax(row / t, -1)
        torch.testing.assert_close(probs, expected, atol=1e-15, rtol=0)
        assert torch.equal(probs == 0, row == -INF)
    cold = decoder_distribution(row, "ancestral", temperature=1e-3)
    torch.testing.assert_close(cold, decoder_distribution(row, "greedy"), atol=1e-12, rtol=0)


def test_top_k_with_fewer_positive_tokens_than_k_samples_among_them():
    # every row has exactly two tokens of positive probability; k = 5
    probs = torch.zeros(6, 6, dtype=F64)
    probs[:, 0], probs[:, 3] = 0.3, 0.7
    model = MarkovLM(probs.log())
    contexts = torch.arange(5).repeat(200)[:, None]
    for consistent in (False, True):
        gen = decode(model, contexts, "top-k", k=5, consistent=consistent, max_len=5,
                     generator=torch.Generator().manual_seed(11))
        assert set(gen.tokens.unique().tolist()) == {0, 3}
    mask = top_k_mask(probs.log(), 5)
    assert bool((mask.sum(-1) == 5).all())  # the set still has k tokens; the zeros are never drawn
    dist = decoder_distribution(probs.log(), "top-k", k=5)
    torch.testing.assert_close(dist, probs, atol=1e-15, rtol=0)


def test_consistent_sampling_does_not_rescue_a_model_that_gives_eos_probability_zero():
    # Chapter 8's point: adding eos to the candidate set adds a token of probability zero
    model = sparse_table(vocab_size=8, alpha=1.5, seed=12, eos_zero=True)
    assert bool((model.transition_log_probs[:, -1] == -INF).all())
    contexts = torch.arange(7).repeat(10)[:, None]
    for method, kw in (("top-k", {"k": 2, "consistent": True}), ("nucleus", {"p": 0.5, "consistent": True}),
                       ("ancestral", {}), ("entmax", {"alpha": 1.2}), ("greedy", {}), ("beam", {"beam_size": 4})):
        gen = decode(model, contexts, method, max_len=40, generator=torch.Generator().manual_seed(13), **kw)
        assert not bool(gen.terminated.any()), method
        assert bool((gen.first_finish_steps == 41).all()) and bool(torch.isfinite(gen.scores).all())
    dist = decoder_distribution(model.transition_log_probs, "top-k", k=2, consistent=True, eos_id=7)
    assert bool((dist[:, 7] == 0).all())


def test_beam_search_never_keeps_an_expansion_of_probability_zero():
    # from every token only token 1 has positive probability (eos has zero): one live prefix,
    # never finished, even with beam_size 4 > the support
    probs = torch.zeros(4, 4, dtype=F64)
    probs[:, 1] = 1.0
    model = MarkovLM(probs.log())
    gen = decode(model, torch.tensor([[0], [2]]), "beam", beam_size=4, max_len=6)
    assert gen.to_lists() == [[1] * 6, [1] * 6]
    assert not bool(gen.terminated.any()) and torch.equal(gen.scores, torch.zeros(2, dtype=F64))
    # eos reachable only through a zero: still a finite, non-terminated search
    probs[:, 1], probs[:, 3] = 0.5, 0.5
    probs[3] = torch.tensor([0.0, 1.0, 0.0, 0.0])
    gen = decode(MarkovLM(probs.log()), torch.tensor([[0]]), "beam", beam_size=4, max_len=3)
    assert gen.terminated[0] and gen.to_lists() == [[3]] and math.isclose(float(gen.scores[0]), math.log(0.5))


def test_sample_tokens_never_draws_a_token_of_log_probability_minus_inf():
    log_probs = torch.tensor([[-INF, 0.0, -INF, -INF], [math.log(0.5), -INF, math.log(0.5), -INF]])
    draws = sample_tokens(log_probs.repeat(500, 1), generator=torch.Generator().manual_seed(14)).view(500, 2)
    assert bool((draws[:, 0] == 1).all())
    assert set(draws[:, 1].tolist()) == {0, 2}
    assert sample_tokens(log_probs.float(), generator=torch.Generator().manual_seed(1)).tolist()[0] == 1


def test_nucleus_never_counts_a_token_of_probability_zero():
    # float32 rows whose finite mass rounds just below p = 1 - 1e-9: the zeros stay out
    logits = torch.randn(50, 40, generator=torch.Generator().manual_seed(15)) * 3
    logits[:, 20:] = -INF
    log_probs = torch.log_softmax(logits, -1)
    mask = nucleus_mask(log_probs, 1 - 1e-9)
    assert not bool(mask[:, 20:].any())
    assert not bool(decoder_distribution(log_probs, "nucleus", p=1 - 1e-9)[:, 20:].any())


def test_decoder_distribution_is_a_distribution_of_the_input_shape():
    log_probs = sparse_table(vocab_size=10, seed=16).transition_log_probs.view(2, 5, 10).float()
    for method, kw in TOKEN_LEVEL:
        extra = {"eos_id": 9} if kw.get("consistent") else {}
        probs = decoder_distribution(log_probs, method, **kw, **extra)
        assert probs.shape == (2, 5, 10) and probs.dtype == torch.float32
        assert (probs.sum(-1) - 1).abs().max() < 1e-6, method
        assert bool((probs[log_probs == -INF] == 0).all()), method


def test_decoder_distribution_top_k_and_nucleus_use_decodes_candidate_sets():
    log_probs = torch.log_softmax(torch.randn(30, 50, generator=torch.Generator().manual_seed(17)) * 2, -1)
    for k in (1, 5, 50):
        dist = decoder_distribution(log_probs, "top-k", k=k)
        assert torch.equal(dist > 0, top_k_mask(log_probs, k))
        with_eos = decoder_distribution(log_probs, "top-k", k=k, consistent=True, eos_id=49)
        assert torch.equal(with_eos > 0, top_k_mask(log_probs, k, eos_id=49))
    for p in (0.1, 0.9, 1.0):
        dist = decoder_distribution(log_probs, "nucleus", p=p)
        assert torch.equal(dist > 0, nucleus_mask(log_probs, p))
        kept = log_probs.masked_fill(~nucleus_mask(log_probs, p), -INF)
        torch.testing.assert_close(dist, torch.softmax(kept, -1), atol=1e-7, rtol=0)


def test_methods_list_entmax():
    assert "entmax" in METHODS and METHODS[-1] == "beam"


def test_arguments_of_other_methods_are_refused_with_a_clear_message():
    model = sparse_table()
    ctx = torch.zeros(2, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="alpha is only used by entmax"):
        decode(model, ctx, "ancestral", alpha=1.5, max_len=3)
    with pytest.raises(ValueError, match="temperature is only used by ancestral"):
        decode(model, ctx, "top-k", k=2, temperature=0.5, max_len=3)
    with pytest.raises(ValueError, match="temperature is only used by ancestral"):
        decode(model, ctx, "entmax", alpha=1.5, temperature=0.5, max_len=3)
    with pytest.raises(ValueError, match="entmax sampling needs alpha"):
        decode(model, ctx, "entmax", max_len=3)
    with pytest.raises(ValueError, match="alpha"):
        decode(model, ctx, "entmax", alpha=0.5, max_len=3)
    for bad in (0.0, -1.0, INF, math.nan):
        with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
            decode(model, ctx, "ancestral", temperature=bad, max_len=3)
    with pytest.raises(TypeError, match="temperature"):
        decode(model, ctx, "ancestral", temperature="hot", max_len=3)
    with pytest.raises(ValueError, match="consistent=True is only defined"):
        decode(model, ctx, "entmax", alpha=1.5, consistent=True, max_len=3)
    row = model.transition_log_probs[0]
    with pytest.raises(ValueError, match="not a token-level decoder"):
        decoder_distribution(row, "beam")
    with pytest.raises(ValueError, match="pass eos_id"):
        decoder_distribution(row, "top-k", k=2, consistent=True)
    with pytest.raises(ValueError, match="only used with consistent"):
        decoder_distribution(row, "top-k", k=2, eos_id=7)
    with pytest.raises(ValueError, match="method must be one of"):
        decoder_distribution(row, "sparsemax")
