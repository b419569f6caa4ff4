"""Tests for nmst_lib.decoding on Markov (bigram) language models.

Every expected value is derived independently of the code under test: greedy and beam
search against plain-Python references written from Welleck et al. (2020), Defs. 2.8 and
A.2; samplers against the exact distribution of their first tokens, enumerated in plain
Python from the table with candidate sets computed by sorting lists.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.decoding import (
    METHODS,
    PAD,
    Generation,
    LanguageModel,
    decode,
    nucleus_mask,
    restrict_log_probs,
    sample_tokens,
    top_k_mask,
)
from nmst_lib.markov import MarkovLM, random_markov_lm

INF = math.inf


# ----------------------------------------------------------------------------- helpers


def markov_from_probs(rows, eos_id=-1, dtype=torch.float64) -> MarkovLM:
    return MarkovLM(torch.tensor(rows, dtype=torch.float64).log().to(dtype), eos_id=eos_id)


def seeded_table(seed: int, vocab_size: int, *, temperature=1.0, eos_boost=0.0, levels=None, zeros=False) -> MarkovLM:
    """A random MarkovLM; ``levels`` quantises logits (many exact ties); ``zeros`` adds p = 0 entries."""
    g = torch.Generator().manual_seed(seed)
    if levels is None:
        logits = torch.randn(vocab_size, vocab_size, generator=g, dtype=torch.float64) / temperature
    else:
        logits = torch.randint(0, levels, (vocab_size, vocab_size), generator=g).double()
    logits[:, -1] += eos_boost
    if zeros:
        drop = torch.rand(vocab_size, vocab_size, generator=g) < 0.3
        drop[torch.arange(vocab_size), torch.randint(0, vocab_size, (vocab_size,), generator=g)] = False
        logits = logits.masked_fill(drop, -INF)
    return MarkovLM(torch.log_softmax(logits, dim=-1))


def all_contexts(vocab_size: int) -> torch.Tensor:
    """Every token as the last context token, then again in reverse (so rows repeat)."""
    last = list(range(vocab_size)) + list(reversed(range(vocab_size)))
    return torch.tensor([[0, v] for v in last])


def assert_valid_generation(gen: Generation, model: MarkovLM, contexts: torch.Tensor) -> None:
    """Generation invariants, with scores recomputed from the table by plain lookups."""
    table = model.transition_log_probs.tolist()
    assert gen.tokens.device.type == "cpu" and gen.tokens.dtype == torch.long
    assert gen.tokens.shape == (contexts.shape[0], gen.max_len)
    for i, seq in enumerate(gen.to_lists()):
        n = int(gen.lengths[i])
        assert len(seq) == n and 1 <= n <= gen.max_len
        assert gen.tokens[i, n:].eq(PAD).all()
        assert all(v != gen.eos_id for v in seq[:-1])
        assert (seq[-1] == gen.eos_id) == bool(gen.terminated[i])
        if not gen.terminated[i]:
            assert n == gen.max_len
        prev, score = int(contexts[i, -1]), 0.0
        for v in seq:
            score, prev = score + table[prev][v], v
        assert math.isclose(float(gen.scores[i]), score, rel_tol=1e-12, abs_tol=1e-12)


def assert_same_generation(a: Generation, b: Generation) -> None:
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.lengths, b.lengths)
    assert torch.equal(a.terminated, b.terminated)
    torch.testing.assert_close(a.scores, b.scores, rtol=1e-12, atol=1e-12)


class RecordingMarkovLM(MarkovLM):
    """A MarkovLM that records the working-batch size of every ``step`` call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_batch_sizes: list[int] = []

    def step(self, state, tokens):
        self.step_batch_sizes.append(int(tokens.shape[0]))
        return super().step(state, tokens)


# ----------------------------------------------------------------------------- plain-Python references


def reference_greedy(table, eos_id, last, max_len):
    """Welleck et al. (2020), Def. 2.8, one context at a time; ties to the smallest id."""
    seq, score, prev = [], 0.0, last
    for _ in range(max_len):
        row = table[prev]
        v = max(range(len(row)), key=row.__getitem__)  # first maximum
        seq.append(v)
        score += row[v]
        prev = v
        if v == eos_id:
            break
    return seq, seq[-1] == eos_id, score


def reference_beam(table, eos_id, last, width, max_len):
    """Welleck et al. (2020), Def. A.2 with Python lists, one context at a time.

    Candidates are listed prefix by prefix (in beam order), token by token, leaving out those
    of probability zero; a stable sort by score keeps that order among ties. Returns (tokens,
    terminated, score, live sizes of the beam before every further step, first step at which
    a sequence finished or max_len + 1).
    """
    beam = [((), 0.0, last)]  # (prefix, score, last token)
    finished, live_sizes, first_finish = [], [], max_len + 1
    for t in range(max_len):
        candidates = [(prefix + (v,), score + table[prev][v], v) for prefix, score, prev in beam for v in range(len(table))
                      if table[prev][v] > -INF]  # an expansion of probability zero is no hypothesis (Chapter 8)
        kept = sorted(candidates, key=lambda c: -c[1])[:width]
        finished += [c for c in kept if c[2] == eos_id]
        if finished and first_finish > max_len:
            first_finish = t + 1
        beam = [c for c in kept if c[2] != eos_id]
        if len(finished) >= width or not beam or t + 1 == max_len:
            break
        live_sizes.append(len(beam))
    if finished:
        best = max(finished, key=lambda c: c[1])  # first maximum: earliest found
        return list(best[0]), True, best[1], live_sizes, first_finish
    return list(beam[0][0]), False, beam[0][1], live_sizes, first_finish


def top_k_set(probs, k, eos_id=None):
    order = sorted(range(len(probs)), key=lambda v: -probs[v])  # stable: ties by id
    chosen = set(order[:k])
    return chosen | {eos_id} if eos_id is not None else chosen


def nucleus_set(probs, p, eos_id=None):
    order = sorted(range(len(probs)), key=lambda v: -probs[v])
    chosen, mass = set(), 0.0
    for v in order:
        if mass >= p:
            break
        chosen.add(v)
        mass += probs[v]
    return chosen | {eos_id} if eos_id is not None else chosen


def prefix_distribution(probs_table, eos_id, last, n_tokens, candidate_set):
    """Exact distribution of the first ``n_tokens`` tokens (cut at eos) of a sampler."""
    out = {}

    def visit(prefix, prob, prev):
        if len(prefix) == n_tokens or (prefix and prefix[-1] == eos_id):
            out[prefix] = prob
            return
        row = probs_table[prev]
        chosen = candidate_set(row)
        mass = sum(row[v] for v in chosen)
        for v in sorted(chosen):
            if row[v] > 0:
                visit(prefix + (v,), prob * row[v] / mass, v)

    visit((), 1.0, last)
    return out


def bernstein_tolerance(n: int, prob: float, delta: float) -> float:
    """t with P(|X - n prob| >= t) <= delta for X ~ Binomial(n, prob).

    Bernstein's inequality for a sum of n i.i.d. variables bounded by 1 with variance
    sigma^2 = n prob (1 - prob): P(|X - n prob| >= t) <= 2 exp(-t^2 / (2 sigma^2 + 2t/3)).
    Setting the right side to delta, L = ln(2 / delta), gives t^2 - (2L/3) t - 2 L sigma^2 = 0,
    whose positive root is returned. No normal approximation involved.
    """
    log_term = math.log(2.0 / delta)
    variance = n * prob * (1.0 - prob)
    return log_term / 3.0 + math.sqrt(log_term**2 / 9.0 + 2.0 * log_term * variance)


def assert_counts_match(counts: Counter, expected: dict, n: int, failure_prob: float = 1e-6) -> None:
    """Every prefix outside the support never appears; every cell is within its Bernstein bound.

    Bonferroni over the cells: each cell gets failure_prob / (#cells), so a correct sampler
    fails this check with probability below failure_prob.
    """
    unexpected = set(counts) - {c for c, q in expected.items() if q > 0}
    assert not unexpected, f"sampled prefixes of probability zero: {sorted(unexpected)[:5]}"
    delta = failure_prob / len(expected)
    for cell, prob in expected.items():
        tolerance = bernstein_tolerance(n, prob, delta)
        assert tolerance < 0.02 * n, "not enough samples for a meaningful test"
        assert abs(counts.get(cell, 0) - n * prob) <= tolerance, (cell, counts.get(cell, 0), n * prob, tolerance)


# A hand-made table (eos = 4) whose candidate sets are far from every boundary:
#   top-2: {0,1} {1,2} {4,0} {1,2}; nucleus-0.6: {0,1} {1,2} {4,0} {1,2,0}.
# eos lies outside the plain sets from rows 0, 1, 3 and inside from row 2.
HAND_PROBS = [
    [0.40, 0.25, 0.15, 0.12, 0.08],
    [0.10, 0.35, 0.30, 0.05, 0.20],
    [0.30, 0.05, 0.15, 0.10, 0.40],
    [0.20, 0.30, 0.25, 0.15, 0.10],
    [0.20, 0.20, 0.20, 0.20, 0.20],
]
HAND_EOS = 4

SAMPLERS = {  # name: (method, keyword arguments, candidate set of a row of probabilities)
    "ancestral": ("ancestral", dict(), lambda row: set(range(len(row)))),
    "top-2": ("top-k", dict(k=2), lambda row: top_k_set(row, 2)),
    "top-3": ("top-k", dict(k=3), lambda row: top_k_set(row, 3)),
    "consistent top-2": ("top-k", dict(k=2, consistent=True), lambda row: top_k_set(row, 2, HAND_EOS)),
    "nucleus-0.6": ("nucleus", dict(p=0.6), lambda row: nucleus_set(row, 0.6)),
    "consistent nucleus-0.6": ("nucleus", dict(p=0.6, consistent=True), lambda row: nucleus_set(row, 0.6, HAND_EOS)),
}


# ----------------------------------------------------------------------------- protocol and result type


def test_markov_lm_satisfies_the_protocol():
    assert isinstance(random_markov_lm(3), LanguageModel)
    assert not isinstance(object(), LanguageModel)


def test_generation_is_frozen_and_to_lists_drops_padding():
    model = seeded_table(0, 5, eos_boost=1.0)
    gen = decode(model, all_contexts(5), "greedy", max_len=6)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gen.max_len = 3
    assert gen.to_lists() == [gen.tokens[i, : gen.lengths[i]].tolist() for i in range(len(gen.lengths))]
    assert gen.method == "greedy" and gen.eos_id == model.eos_id
    assert_valid_generation(gen, model, all_contexts(5))


@pytest.mark.parametrize("method, kwargs", [("greedy", {}), ("ancestral", {}), ("top-k", dict(k=2)),
                                            ("nucleus", dict(p=0.7)), ("beam", dict(beam_size=3))])
def test_every_method_returns_a_well_formed_generation(method, kwargs):
    for seed in range(3):
        model = seeded_table(seed, 6, eos_boost=seed - 1.0)
        contexts = all_contexts(6)
        gen = decode(model, contexts, method, max_len=5, generator=torch.Generator().manual_seed(seed), **kwargs)
        assert_valid_generation(gen, model, contexts)


# ----------------------------------------------------------------------------- greedy and its equivalents


@pytest.mark.parametrize("seed", range(8))
def test_greedy_follows_the_argmax_chain_until_eos(seed):
    vocab_size = 3 + seed % 5
    model = seeded_table(seed, vocab_size, temperature=0.5 + seed / 4, eos_boost=(seed % 3) - 1.0)
    contexts = all_contexts(vocab_size)
    max_len = 1 + seed * 2
    gen = decode(model, contexts, "greedy", max_len=max_len)
    table = model.transition_log_probs.tolist()
    for i, last in enumerate(contexts[:, -1].tolist()):
        seq, terminated, score = reference_greedy(table, model.eos_id, last, max_len)
        assert gen.to_lists()[i] == seq
        assert bool(gen.terminated[i]) == terminated
        assert math.isclose(float(gen.scores[i]), score, rel_tol=1e-12)


def test_greedy_breaks_ties_towards_the_smallest_token_id():
    # From token 0 the tokens 1 and 2 tie; from both, eos (3) and token 0 tie.
    model = markov_from_probs([[0.2, 0.4, 0.4, 0.0], [0.5, 0.0, 0.0, 0.5], [0.5, 0.0, 0.0, 0.5], [0.25] * 4])
    gen = decode(model, torch.tensor([[0]]), "greedy", max_len=4)
    assert gen.to_lists() == [[1, 0, 1, 0]]


@pytest.mark.parametrize("seed", range(6))
def test_top_k_with_k_one_equals_greedy(seed):
    model = seeded_table(seed, 5, eos_boost=seed / 3 - 1)
    contexts = all_contexts(5)
    greedy = decode(model, contexts, "greedy", max_len=7)
    top1 = decode(model, contexts, "top-k", k=1, max_len=7, generator=torch.Generator().manual_seed(seed))
    assert_same_generation(greedy, top1)


@pytest.mark.parametrize("seed", range(6))
def test_beam_width_one_equals_greedy(seed):
    model = seeded_table(seed, 5, eos_boost=seed / 3 - 1)
    contexts = all_contexts(5)
    assert_same_generation(decode(model, contexts, "greedy", max_len=7),
                           decode(model, contexts, "beam", beam_size=1, max_len=7))


def test_nucleus_with_tiny_p_equals_greedy():
    model = seeded_table(3, 6)
    contexts = all_contexts(6)
    nucleus = decode(model, contexts, "nucleus", p=1e-9, max_len=6, generator=torch.Generator().manual_seed(0))
    assert_same_generation(decode(model, contexts, "greedy", max_len=6), nucleus)


# ----------------------------------------------------------------------------- samplers' distributions


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_sampler_draws_the_first_three_tokens_from_the_renormalised_distribution(name):
    method, kwargs, candidate_set = SAMPLERS[name]
    n = 40_000
    model = markov_from_probs(HAND_PROBS, eos_id=HAND_EOS)
    gen = decode(model, torch.zeros(n, 1, dtype=torch.long), method, max_len=3,
                 generator=torch.Generator().manual_seed(1234), **kwargs)
    counts = Counter(tuple(seq) for seq in gen.to_lists())
    expected = prefix_distribution(HAND_PROBS, HAND_EOS, 0, 3, candidate_set)
    assert math.isclose(sum(expected.values()), 1.0, rel_tol=1e-12)
    assert_counts_match(counts, expected, n)


def test_sampler_uses_the_global_rng_without_a_generator():
    model = markov_from_probs(HAND_PROBS, eos_id=HAND_EOS)
    n = 40_000
    torch.manual_seed(99)
    gen = decode(model, torch.full((n, 1), 3), "nucleus", p=0.6, max_len=2)
    expected = prefix_distribution(HAND_PROBS, HAND_EOS, 3, 2, lambda row: nucleus_set(row, 0.6))
    assert_counts_match(Counter(tuple(s) for s in gen.to_lists()), expected, n)
    torch.manual_seed(99)
    assert torch.equal(decode(model, torch.full((n, 1), 3), "nucleus", p=0.6, max_len=2).tokens, gen.tokens)


def test_sample_tokens_follows_the_distribution_and_never_draws_zero_probability():
    probs = [0.5, 0.0, 0.3, 0.2]
    n = 60_000
    log_probs = torch.tensor(probs, dtype=torch.float64).log().expand(n, 4)
    draws = sample_tokens(log_probs, torch.Generator().manual_seed(5))
    counts = Counter((v,) for v in draws.tolist())
    assert_counts_match(counts, {(v,): q for v, q in enumerate(probs)}, n)


def test_consistent_sampling_adds_eos_only_where_it_was_missing():
    model = markov_from_probs(HAND_PROBS, eos_id=HAND_EOS)
    n = 2_000
    for last, eos_in_plain_set in [(0, False), (2, True)]:
        contexts = torch.full((n, 1), last)
        for method, kwargs in [("top-k", dict(k=2)), ("nucleus", dict(p=0.6))]:
            plain = decode(model, contexts, method, max_len=1, generator=torch.Generator().manual_seed(0), **kwargs)
            cons = decode(model, contexts, method, max_len=1, consistent=True,
                          generator=torch.Generator().manual_seed(0), **kwargs)
            # eos (p >= 0.08 of the renormalised mass) shows up in 2,000 draws unless excluded.
            assert bool(plain.terminated.any()) == eos_in_plain_set
            assert bool(cons.terminated.any())
            if eos_in_plain_set:  # same candidate set, same noise: identical draws
                assert torch.equal(plain.tokens, cons.tokens)


# ----------------------------------------------------------------------------- candidate-set masks


def test_top_k_mask_on_ties_keeps_the_smallest_ids():
    log_probs = torch.tensor([0.1, 0.3, 0.3, 0.3]).log()
    assert top_k_mask(log_probs, 2).tolist() == [False, True, True, False]
    assert top_k_mask(log_probs, 1).tolist() == [False, True, False, False]
    assert top_k_mask(log_probs, 4).all()
    assert top_k_mask(log_probs, 2, eos_id=0).tolist() == [True, True, True, False]
    assert top_k_mask(log_probs, 2, eos_id=2).tolist() == [False, True, True, False]


def test_nucleus_mask_on_hand_made_distributions():
    log_probs = torch.tensor([0.1, 0.5, 0.25, 0.15, 0.0], dtype=torch.float64).log()
    assert nucleus_mask(log_probs, 0.3).tolist() == [False, True, False, False, False]
    assert nucleus_mask(log_probs, 0.6).tolist() == [False, True, True, False, False]
    assert nucleus_mask(log_probs, 0.8).tolist() == [False, True, True, True, False]
    # p = 1 keeps the support, and nothing of probability zero
    assert nucleus_mask(log_probs, 1.0).tolist() == [True, True, True, True, False]
    assert nucleus_mask(log_probs, 0.6, eos_id=4).tolist() == [False, True, True, False, True]
    assert nucleus_mask(log_probs, 0.6, eos_id=2).tolist() == [False, True, True, False, False]
    # ties are ranked by id: with 4 equal tokens, p = 0.4 needs two of them, the first two
    uniform = torch.full((4,), 0.25).log()
    assert nucleus_mask(uniform, 0.4).tolist() == [True, True, False, False]


@pytest.mark.parametrize("dtype, gap", [(torch.float64, 1e-9), (torch.float32, 1e-5)])
def test_nucleus_mask_is_sharp_at_the_threshold(dtype, gap):
    log_probs = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64).log().to(dtype)
    # the two most probable tokens hold 0.8: enough for p just below, not for p just above
    assert nucleus_mask(log_probs, 0.8 - gap).tolist() == [False, True, True]
    assert nucleus_mask(log_probs, 0.8 + gap).tolist() == [True, True, True]
    assert nucleus_mask(log_probs, 0.5 - gap).tolist() == [False, True, False]
    assert nucleus_mask(log_probs, 0.5 + gap).tolist() == [False, True, True]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_nucleus_mask_stops_where_the_mass_reaches_p_exactly(dtype):
    # Dyadic probabilities: every partial mass and its log-cumsum are exact,
    # so the mass of the kept set equals p exactly. The smallest set with
    # mass >= p stops there (the tests above keep p a gap away from the
    # mass, where '<=' in place of '<' keeps the same set).
    log_probs = torch.tensor([0.125, 0.5, 0.125, 0.25], dtype=dtype).log()
    assert nucleus_mask(log_probs, 0.5).tolist() == [False, True, False, False]
    assert nucleus_mask(log_probs, 0.75).tolist() == [False, True, False, True]
    assert nucleus_mask(log_probs, 0.875).tolist() == [True, True, False, True]
    uniform = torch.full((2, 4), 0.25, dtype=dtype).log()
    expected = [[True, True, False, False]] * 2
    assert nucleus_mask(uniform, 0.5).tolist() == expected
    # and beyond the first prefilter (64 tokens): 128 equal tokens, p = 1/2
    wide = torch.full((1, 128), 1 / 128, dtype=dtype).log()
    assert int(nucleus_mask(wide, 0.5).sum()) == 64


def test_masks_and_restriction_are_exact_at_huge_logits_in_float32():
    logits = torch.tensor([[1e4, 0.0, -1e4, 5e3]], dtype=torch.float32)
    log_probs = torch.log_softmax(logits, dim=-1)
    assert top_k_mask(log_probs, 2).tolist() == [[True, False, False, True]]
    assert nucleus_mask(log_probs, 0.9).tolist() == [[True, False, False, False]]
    assert nucleus_mask(log_probs, 1.0).all()
    restricted = restrict_log_probs(log_probs, top_k_mask(log_probs, 1, eos_id=2))
    assert torch.isfinite(restricted[0, [0, 2]]).all()
    assert restricted[0, 2].item() == pytest.approx(-2e4, rel=1e-6)
    assert restricted[0, 0].item() == 0.0
    # a set without the dominant token: the normaliser is itself about -5e3 (log of a sum of
    # exp(-2e4) and exp(-5e3), which underflow), and the restriction renormalises in log space
    restricted = restrict_log_probs(log_probs, torch.tensor([[False, False, True, True]]))
    assert restricted[0, 3].item() == pytest.approx(0.0, abs=1e-3)
    assert restricted[0, 2].item() == pytest.approx(-1.5e4, rel=1e-6)
    assert restricted[0, :2].eq(-math.inf).all()
    assert sample_tokens(log_probs, torch.Generator().manual_seed(0)).tolist() == [0]


def probability_rows(min_size=2, max_size=8):
    weights = st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1.0), st.sampled_from([0.25, 0.5])),
                       min_size=min_size, max_size=max_size).filter(lambda w: sum(w) > 0)
    return weights.map(lambda w: torch.tensor(w, dtype=torch.float64).div(sum(w)).log())


@settings(max_examples=150, deadline=None)
@given(log_probs=probability_rows(), data=st.data())
def test_top_k_mask_keeps_exactly_k_most_probable_tokens(log_probs, data):
    vocab_size = log_probs.numel()
    k = data.draw(st.integers(1, vocab_size))
    mask = top_k_mask(log_probs, k)
    assert int(mask.sum()) == k
    kept, dropped = log_probs[mask], log_probs[~mask]
    if dropped.numel():
        assert kept.min() >= dropped.max()
        # among equal values the kept ids come first
        boundary = kept.min()
        ids_kept = mask.nonzero().flatten()[log_probs[mask] == boundary]
        ids_dropped = (~mask).nonzero().flatten()[log_probs[~mask] == boundary]
        if ids_dropped.numel():
            assert ids_kept.max() < ids_dropped.min()
    eos = data.draw(st.integers(0, vocab_size - 1))
    consistent = top_k_mask(log_probs, k, eos_id=eos)
    expected = mask.clone()
    expected[eos] = True
    assert torch.equal(consistent, expected)


@settings(max_examples=150, deadline=None)
@given(log_probs=probability_rows(), p=st.floats(1e-6, 1.0), data=st.data())
def test_nucleus_mask_is_the_smallest_most_probable_set_of_mass_at_least_p(log_probs, p, data):
    mask = nucleus_mask(log_probs, p)
    probs = log_probs.exp()
    assert mask[log_probs.argmax()]
    kept_mass = float(probs[mask].sum())
    assert kept_mass >= p - 1e-9
    assert kept_mass - float(probs[mask].min()) < p + 1e-9  # minimal: one fewer is not enough
    if (~mask).any():
        assert log_probs[mask].min() >= log_probs[~mask].max()
    eos = data.draw(st.integers(0, log_probs.numel() - 1))
    expected = mask.clone()
    expected[eos] = True
    assert torch.equal(nucleus_mask(log_probs, p, eos_id=eos), expected)


# Large vocabularies: the decoders find candidate sets with topk prefilters (64, then 1,024
# tokens, then a full sort); these tests pin them to the full-vocabulary rules.


def full_sort_nucleus_mask(log_probs: torch.Tensor, p: float) -> torch.Tensor:
    """The definition, over the whole vocabulary: a stable descending sort, then keep a token
    while the mass ranked before it is below p."""
    ordered, order = torch.sort(log_probs, dim=-1, descending=True, stable=True)
    before = torch.logcumsumexp(ordered, dim=-1).roll(1, dims=-1)
    before[..., 0] = -INF
    return torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < math.log(p))


def large_vocabulary_rows(seed: int, rows: int, vocab_size: int, temperature: float, quantum: float | None,
                          zeros: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab_size, generator=g, dtype=torch.float64) / temperature
    if quantum is not None:  # many exact ties
        logits = (logits / quantum).round() * quantum
    if zeros:
        logits = logits.masked_fill(torch.rand(rows, vocab_size, generator=g) < 0.5, -INF)
        logits[:, 0] = 0.0
    return torch.log_softmax(logits, dim=-1)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), vocab_size=st.integers(65, 3000), temperature=st.sampled_from([0.1, 0.5, 2.0, 50.0]),
       quantum=st.sampled_from([None, 0.5, 2.0]), zeros=st.booleans(), p=st.sampled_from([0.05, 0.2, 0.5, 0.9, 0.999]),
       k=st.integers(1, 70), dtype=st.sampled_from([torch.float64, torch.float32]))
def test_prefiltered_candidate_sets_equal_the_full_vocabulary_rules(seed, vocab_size, temperature, quantum, zeros, p, k,
                                                                   dtype):
    from nmst_lib.decoding import _nucleus_sets, _top_k_ids, _top_k_mask

    log_probs = large_vocabulary_rows(seed, 6, vocab_size, temperature, quantum, zeros).to(dtype)
    assert torch.equal(nucleus_mask(log_probs, p), full_sort_nucleus_mask(log_probs, p))
    ids, kept = _nucleus_sets(log_probs, p)
    prefix = torch.arange(kept.shape[1]) < kept.sum(dim=1, keepdim=True)
    assert torch.equal(kept, prefix) and bool(kept[:, -1].any())  # kept slots: a prefix, no empty column
    k = min(k, vocab_size)
    assert torch.equal(_top_k_ids(log_probs, k), _top_k_mask(log_probs, k).nonzero()[:, 1].view(6, k))


@pytest.mark.parametrize("vocab_size, p, size", [(100, 0.305, 31), (3000, 0.1005, 302), (3000, 0.9005, 2702)])
def test_nucleus_keeps_the_smallest_ids_when_a_tie_straddles_every_prefilter(vocab_size, p, size):
    # Uniform rows: every rank is a tie, so topk's order among ties must not matter; the
    # sizes fall inside the first prefilter (31 < 64), the second (302 < 1024) and neither.
    log_probs = torch.full((3, vocab_size), -math.log(vocab_size), dtype=torch.float64)
    expected = torch.zeros(3, vocab_size, dtype=torch.bool)
    expected[:, :size] = True
    assert torch.equal(nucleus_mask(log_probs, p), expected)


def test_top_k_ids_keeps_the_smallest_ids_on_ties_and_minus_infinity():
    from nmst_lib.decoding import _top_k_ids

    log_probs = torch.tensor([[-1.0, -2.0, -1.0, -1.0, -3.0], [0.0, -INF, -INF, -INF, -INF]])
    assert _top_k_ids(log_probs, 2).tolist() == [[0, 2], [0, 1]]
    assert _top_k_ids(log_probs, 5).tolist() == [[0, 1, 2, 3, 4]] * 2


def large_vocabulary_model(vocab_size=300, decay=0.02, seed=3):
    """Every row: probabilities decaying as exp(-decay * rank) over a random order of the ids."""
    g = torch.Generator().manual_seed(seed)
    rank = torch.randperm(vocab_size, generator=g).double()
    row = torch.log_softmax(-decay * rank, dim=0)
    return MarkovLM(row.expand(vocab_size, vocab_size).clone()), row.exp().tolist()


@pytest.mark.parametrize("method, kwargs, rule, sizes", [
    ("nucleus", dict(p=0.8), lambda row: nucleus_set(row, 0.8), (65, 1024)),  # 80 tokens: the second prefilter
    ("nucleus", dict(p=0.3), lambda row: nucleus_set(row, 0.3), (1, 63)),  # 18 tokens: the first
    ("nucleus", dict(p=0.8, consistent=True), lambda row: nucleus_set(row, 0.8, 299), (66, 1025)),
    ("top-k", dict(k=100), lambda row: top_k_set(row, 100), (100, 100)),
    ("top-k", dict(k=100, consistent=True), lambda row: top_k_set(row, 100, 299), (101, 101)),
])
def test_large_vocabulary_samplers_draw_from_the_renormalised_candidate_set(method, kwargs, rule, sizes):
    model, row = large_vocabulary_model()  # eos = 299 has rank 210: outside every plain set here
    chosen = rule(row)
    assert sizes[0] <= len(chosen) <= sizes[1] and (299 in chosen) == kwargs.get("consistent", False)
    n = 60_000
    gen = decode(model, torch.zeros(n, 1, dtype=torch.long), method, max_len=1,
                 generator=torch.Generator().manual_seed(7), **kwargs)
    mass = sum(row[v] for v in chosen)
    expected = {(v,): row[v] / mass for v in chosen}
    assert_counts_match(Counter(tuple(s) for s in gen.to_lists()), expected, n)


@settings(max_examples=100, deadline=None)
@given(log_probs=probability_rows(), data=st.data())
def test_restrict_log_probs_renormalises_over_the_mask(log_probs, data):
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=log_probs.numel(), max_size=log_probs.numel())))
    mask[log_probs.argmax()] = True
    restricted = restrict_log_probs(log_probs, mask)
    assert torch.logsumexp(restricted, 0).item() == pytest.approx(0.0, abs=1e-12)
    assert (restricted[~mask] == -INF).all()
    inside = mask & (log_probs > -INF)
    shift = (restricted - log_probs)[inside]
    torch.testing.assert_close(shift, shift[:1].expand_as(shift), rtol=0, atol=1e-12)
    expected_shift = -math.log(float(log_probs.exp()[mask].sum()))
    assert shift[0].item() == pytest.approx(expected_shift, abs=1e-12)


# ----------------------------------------------------------------------------- beam search


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    vocab_size=st.integers(2, 6),
    width=st.integers(1, 5),
    max_len=st.integers(1, 7),
    eos_boost=st.sampled_from([-2.0, 0.0, 1.0, 3.0]),
    kind=st.sampled_from(["smooth", "peaked", "ties", "zeros"]),
)
def test_beam_search_equals_the_reference_of_definition_a2(seed, vocab_size, width, max_len, eos_boost, kind):
    model = seeded_table(
        seed, vocab_size, temperature=0.3 if kind == "peaked" else 1.0, eos_boost=eos_boost,
        levels=2 if kind == "ties" else None, zeros=kind == "zeros",
    )
    model = RecordingMarkovLM(model.transition_log_probs)
    contexts = all_contexts(vocab_size)
    gen = decode(model, contexts, "beam", beam_size=width, max_len=max_len)
    table = model.transition_log_probs.tolist()
    live_sizes = []
    for i, last in enumerate(contexts[:, -1].tolist()):
        seq, terminated, score, sizes, first_finish = reference_beam(table, model.eos_id, last, width, max_len)
        assert gen.to_lists()[i] == seq
        assert bool(gen.terminated[i]) == terminated
        assert int(gen.first_finish_steps[i]) == first_finish
        assert float(gen.scores[i]) == score or math.isclose(float(gen.scores[i]), score, rel_tol=1e-12)
        live_sizes.append(sizes)
    # The working batch holds exactly the live prefixes of the contexts still searching.
    expected_batches = [sum(s[t] for s in live_sizes if len(s) > t) for t in range(max(map(len, live_sizes)))]
    assert model.step_batch_sizes == expected_batches


@pytest.mark.parametrize("seed", range(4))
def test_beam_search_batched_equals_one_context_at_a_time(seed):
    model = seeded_table(seed, 6, eos_boost=0.5)
    contexts = all_contexts(6)
    batched = decode(model, contexts, "beam", beam_size=3, max_len=6)
    for i in range(contexts.shape[0]):
        alone = decode(model, contexts[i : i + 1], "beam", beam_size=3, max_len=6)
        assert alone.to_lists()[0] == batched.to_lists()[i]
        assert bool(alone.terminated[0]) == bool(batched.terminated[i])
        assert alone.scores[0].item() == batched.scores[i].item()


def test_beam_search_returns_the_best_live_prefix_when_nothing_finished():
    # eos has probability zero from every token: no sequence can finish.
    probs = [[0.6, 0.4, 0.0], [0.3, 0.7, 0.0], [0.5, 0.5, 0.0]]
    model = markov_from_probs(probs)
    gen = decode(model, torch.tensor([[2]]), "beam", beam_size=2, max_len=4)
    assert not gen.terminated[0] and gen.lengths[0] == 4
    # best 4-token path from token 2, by brute force over all 2^4 paths
    best = max(
        ([a, b, c, d] for a in (0, 1) for b in (0, 1) for c in (0, 1) for d in (0, 1)),
        key=lambda s: sum(math.log(probs[p][v]) for p, v in zip([2] + s[:-1], s)),
    )
    assert gen.to_lists() == [best]


def test_beam_search_stops_at_beam_size_finished_even_if_a_live_prefix_scores_higher():
    # From 0: token 1 0.55, eos 0.45; from 1: token 1 0.99, eos 0.01 (eos = 2).
    model = markov_from_probs([[0.0, 0.55, 0.45], [0.0, 0.99, 0.01], [0.5, 0.5, 0.0]])
    # Width 1 never keeps an eos expansion here: the prefix is cut at max_len.
    gen = decode(model, torch.tensor([[0]]), "beam", beam_size=1, max_len=3)
    assert gen.to_lists() == [[1, 1, 1]] and not gen.terminated[0]
    # Width 2: step 1 keeps [1] (live) and [eos] (to S); step 2 keeps [1, 1] (0.5445) and
    # [1, eos] (0.0055, to S). S holds 2 sequences: stop and return its best, [eos] (0.45),
    # although the live [1, 1] scores higher (Def. A.2).
    gen2 = decode(model, torch.tensor([[0]]), "beam", beam_size=2, max_len=10)
    assert gen2.to_lists() == [[2]] and gen2.terminated[0]
    assert gen2.scores[0].item() == pytest.approx(math.log(0.45), rel=1e-12)


def test_beam_search_first_finish_step_comes_before_a_later_better_returned_sequence():
    # eos = 2. From 0: token 1 0.7, eos 0.3; from 1: eos 0.9, token 1 0.1. Width 2: step 1
    # keeps [1] (0.7) and [eos] (0.3, to S: the first finish, step 1); step 2 keeps [1, eos]
    # (0.63, to S) and [1, 1] (0.07): S is full, and the best of S, [1, eos], is returned.
    model = markov_from_probs([[0.0, 0.7, 0.3], [0.0, 0.1, 0.9], [0.5, 0.5, 0.0]])
    gen = decode(model, torch.tensor([[0]]), "beam", beam_size=2, max_len=10)
    assert gen.to_lists() == [[1, 2]] and gen.terminated.tolist() == [True]
    assert gen.first_finish_steps.tolist() == [1] and gen.lengths.tolist() == [2]
    # With step limit 1 the search is the same up to step 1 and returns [eos]: terminated.
    cut = decode(model, torch.tensor([[0]]), "beam", beam_size=2, max_len=1)
    assert cut.to_lists() == [[2]] and cut.terminated.tolist() == [True] and cut.first_finish_steps.tolist() == [1]


def test_beam_search_first_finish_sentinel_is_max_len_plus_one_when_nothing_finished():
    model = markov_from_probs([[0.6, 0.4, 0.0], [0.3, 0.7, 0.0], [0.5, 0.5, 0.0]])  # p(eos) = 0
    gen = decode(model, torch.tensor([[2], [0], [1]]), "beam", beam_size=2, max_len=4)
    assert gen.first_finish_steps.tolist() == [5, 5, 5] and not gen.terminated.any()


def test_beam_search_returns_the_earliest_finished_among_equal_scores():
    # eos = 3. From 0: token 1 has 1/2, eos 1/4; from 1: eos 1/2, token 1
    # 1/4. Width 2: step 1 keeps [1] (1/2) and [eos] (1/4, finished);
    # step 2 keeps [1, eos] (1/4, finished) and [1, 1] (1/8), and stops
    # with two finished sequences of exactly the same score (log 1/2 +
    # log 1/2 = log 1/4 in binary floating point). Def. A.2 returns the
    # best finished sequence, the earliest found among equal scores: [eos].
    model = markov_from_probs([[0.125, 0.5, 0.125, 0.25],
                               [0.125, 0.25, 0.125, 0.5],
                               [0.25] * 4, [0.25] * 4])
    table = model.transition_log_probs.tolist()
    assert table[0][1] + table[1][3] == table[0][3]  # the tie is exact
    assert reference_beam(table, 3, 0, 2, 5)[:3] == ([3], True, table[0][3])
    gen = decode(model, torch.tensor([[0], [0]]), "beam", beam_size=2,
                 max_len=5)
    assert gen.to_lists() == [[3], [3]]
    assert gen.terminated.tolist() == [True, True]
    assert gen.lengths.tolist() == [1, 1]
    assert gen.scores.tolist() == [table[0][3]] * 2
    assert gen.first_finish_steps.tolist() == [1, 1]


def test_beam_search_stops_when_every_kept_expansion_ends_in_eos():
    # eos = 2. From token 0 only eos has positive probability: width 3
    # keeps one expansion, [eos], so no live prefix is left although S
    # holds one sequence of three. Def. A.2 stops there and calls the
    # model for no further step.
    probs = [[0.0, 0.0, 1.0], [0.5, 0.25, 0.25], [0.5, 0.25, 0.25]]
    model = RecordingMarkovLM(markov_from_probs(probs).transition_log_probs)
    gen = decode(model, torch.tensor([[0]]), "beam", beam_size=3, max_len=6)
    assert gen.to_lists() == [[2]] and gen.terminated.tolist() == [True]
    assert gen.first_finish_steps.tolist() == [1]
    assert model.step_batch_sizes == []


@pytest.mark.parametrize("method, kwargs", [("greedy", {}), ("ancestral", {}), ("top-k", dict(k=2)),
                                            ("nucleus", dict(p=0.7)), ("beam", dict(beam_size=1)),
                                            ("beam", dict(beam_size=3))])
def test_first_finish_steps_shape_dtype_and_sentinel(method, kwargs):
    for seed in range(4):
        model = seeded_table(seed, 6, temperature=0.3, eos_boost=seed - 2.0)
        contexts = all_contexts(6)
        gen = decode(model, contexts, method, max_len=5, generator=torch.Generator().manual_seed(seed), **kwargs)
        ff = gen.first_finish_steps
        assert ff.dtype == torch.long and ff.shape == (contexts.shape[0],) and ff.device.type == "cpu"
        assert int(ff.min()) >= 1 and int(ff.max()) <= gen.max_len + 1
        assert torch.equal(gen.terminated, ff <= gen.max_len)  # max_len + 1 = never finished
        if method == "beam":
            assert bool((ff[gen.terminated] <= gen.lengths[gen.terminated]).all())
        if method != "beam" or kwargs["beam_size"] == 1:  # token-level (and width 1 = greedy): the first eos
            assert torch.equal(ff, torch.where(gen.terminated, gen.lengths, gen.max_len + 1))


def test_generation_built_without_first_finish_steps_keeps_none():
    gen = Generation(tokens=torch.tensor([[1, 2]]), lengths=torch.tensor([2]), terminated=torch.tensor([True]),
                     max_len=2, eos_id=2, method="greedy", scores=torch.zeros(1))
    assert gen.first_finish_steps is None and gen.to_lists() == [[1, 2]]


# ----------------------------------------------------------------------------- randomness


@pytest.mark.parametrize("method, kwargs", [("ancestral", {}), ("top-k", dict(k=3)), ("nucleus", dict(p=0.8)),
                                            ("top-k", dict(k=2, consistent=True))])
def test_same_seed_same_output_and_different_seeds_differ(method, kwargs):
    model = seeded_table(7, 8, eos_boost=-1.0)
    contexts = torch.randint(0, 8, (500, 3), generator=torch.Generator().manual_seed(0))
    run = lambda seed: decode(model, contexts, method, max_len=10, generator=torch.Generator().manual_seed(seed), **kwargs)  # noqa: E731
    assert_same_generation(run(1), run(1))
    assert not torch.equal(run(1).tokens, run(2).tokens)


# ----------------------------------------------------------------------------- working batch and early exit


def countdown_model(vocab_size=6):
    """Greedy from token i (< eos) walks i-1, ..., 0, eos: context i finishes after i + 1 tokens."""
    eos = vocab_size - 1
    logits = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    for i in range(1, eos):
        logits[i, i - 1] = 5.0
    logits[0, eos] = 5.0
    return RecordingMarkovLM(torch.log_softmax(logits, dim=-1))


def test_greedy_drops_finished_rows_and_stops_when_all_rows_finished():
    model = countdown_model()
    gen = decode(model, torch.tensor([[4], [0], [2], [3], [1]]), "greedy", max_len=100)
    assert gen.lengths.tolist() == [5, 1, 3, 4, 2] and gen.terminated.all()
    assert gen.to_lists()[0] == [3, 2, 1, 0, 5]
    assert model.step_batch_sizes == [4, 3, 2, 1]  # 4 step calls, not 99


def test_sampling_working_batch_is_exactly_the_unfinished_rows():
    model = RecordingMarkovLM(seeded_table(11, 6, eos_boost=2.0).transition_log_probs)
    min_eos = model.transition_probs[:, -1].min().item()
    assert 300 * (1 - min_eos) ** 200 < 1e-9  # so every row finishes within max_len
    gen = decode(model, torch.randint(0, 6, (300, 2), generator=torch.Generator().manual_seed(1)), "ancestral",
                 max_len=200, generator=torch.Generator().manual_seed(3))
    assert gen.terminated.all()
    longest = int(gen.lengths.max())
    assert model.step_batch_sizes == [int((gen.lengths > t).sum()) for t in range(1, longest)]
    assert len(model.step_batch_sizes) < 199


def test_no_step_is_taken_after_the_last_token_at_max_len():
    model = countdown_model()
    gen = decode(model, torch.tensor([[4]]), "greedy", max_len=2)
    assert gen.to_lists() == [[3, 2]] and not gen.terminated[0]
    assert model.step_batch_sizes == [1]


# ----------------------------------------------------------------------------- argument errors


@pytest.fixture
def model():
    return seeded_table(0, 5)


CONTEXTS = torch.tensor([[0, 1], [2, 3]])


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(method="sample"), ValueError, "greedy"),
        (dict(method="top-k"), ValueError, "needs k"),
        (dict(method="top-k", k=0), ValueError, ">= 1"),
        (dict(method="top-k", k=6), ValueError, "vocabulary size 5"),
        (dict(method="top-k", k=2.5), TypeError, "integer"),
        (dict(method="greedy", k=2), ValueError, "only used by top-k"),
        (dict(method="nucleus"), ValueError, "needs p"),
        (dict(method="nucleus", p=0.0), ValueError, "(0, 1]"),
        (dict(method="nucleus", p=1.5), ValueError, "(0, 1]"),
        (dict(method="nucleus", p=float("nan")), ValueError, "(0, 1]"),
        (dict(method="nucleus", p="0.5"), TypeError, "real number"),
        (dict(method="top-k", k=2, p=0.5), ValueError, "only used by nucleus"),
        (dict(method="beam"), ValueError, "needs beam_size"),
        (dict(method="beam", beam_size=0), ValueError, ">= 1"),
        (dict(method="greedy", beam_size=2), ValueError, "only used by beam"),
        (dict(method="greedy", max_len=0), ValueError, "max_len"),
        (dict(method="greedy", consistent=True), ValueError, "only defined for 'top-k' and 'nucleus'"),
        (dict(method="ancestral", consistent=True), ValueError, "only defined for 'top-k' and 'nucleus'"),
        (dict(method="beam", beam_size=2, consistent=True), ValueError, "only defined for 'top-k' and 'nucleus'"),
        (dict(method="ancestral", generator=0), TypeError, "torch.Generator"),
        (dict(method="greedy", contexts=torch.tensor([0, 1])), ValueError, "2-D"),
        (dict(method="greedy", contexts=torch.tensor([[0.0, 1.0]])), TypeError, "integer token ids"),
        (dict(method="greedy", contexts=[[0, 1]]), TypeError, "torch.Tensor"),
        (dict(method="greedy", contexts=torch.zeros(0, 2, dtype=torch.long)), ValueError, "empty batch"),
        (dict(method="greedy", contexts=torch.zeros(2, 0, dtype=torch.long)), ValueError, "at least one token"),
        (dict(method="greedy", contexts=torch.tensor([[0, 5]])), ValueError, "[0, 5)"),
        (dict(method="greedy", contexts=torch.tensor([[-1, 2]])), ValueError, "[0, 5)"),
    ],
)
def test_decode_rejects_bad_arguments_with_a_clear_message(model, kwargs, error, words):
    kwargs = {"contexts": CONTEXTS, "max_len": 4, **kwargs}
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        decode(model, **kwargs)


def test_decode_rejects_objects_that_do_not_follow_the_protocol():
    with pytest.raises(TypeError, match="decoding protocol"):
        decode(object(), CONTEXTS, "greedy", max_len=3)

    class NoSelect:
        eos_id, vocab_size = 1, 2
        initial_state = step = lambda self, *a: None

    with pytest.raises(TypeError, match="lacks select"):
        decode(NoSelect(), CONTEXTS, "greedy", max_len=3)


def test_decode_rejects_log_probs_of_the_wrong_shape(model):
    class Transposed(MarkovLM):
        def initial_state(self, contexts):
            state, log_probs = super().initial_state(contexts)
            return state, log_probs[:, :-1]

    with pytest.raises(ValueError, match=r"expected \(2, 5\)"):
        decode(Transposed(model.transition_log_probs), CONTEXTS, "greedy", max_len=3)


def test_mask_functions_reject_bad_arguments():
    log_probs = torch.tensor([0.5, 0.3, 0.2]).log()
    with pytest.raises(ValueError, match="vocabulary size 3"):
        top_k_mask(log_probs, 4)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        nucleus_mask(log_probs, 0.0)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        top_k_mask(log_probs, 1, eos_id=3)
    with pytest.raises(TypeError, match="floating-point"):
        nucleus_mask(torch.tensor([1, 2]), 0.5)
    with pytest.raises(TypeError, match="boolean"):
        restrict_log_probs(log_probs, torch.tensor([1, 0, 1]))
    with pytest.raises(ValueError, match="shape"):
        restrict_log_probs(log_probs, torch.tensor([True, False]))
    with pytest.raises(ValueError, match="positive probability"):
        restrict_log_probs(torch.tensor([0.0, -INF]), torch.tensor([False, True]))
    with pytest.raises(TypeError, match="torch.Generator"):
        sample_tokens(log_probs, generator="seed")


def test_methods_constant_lists_every_method():
    assert METHODS == ("greedy", "ancestral", "top-k", "nucleus", "entmax", "beam")


# ------------------------------------------------------ rows that are no distribution (NaN, all -inf)


class _BrokenRowLM(MarkovLM):
    """A MarkovLM whose log-probabilities get ``bad_row`` in row 0 at step ``at_step`` (0: the
    first token, from initial_state)."""

    def __init__(self, table, bad_row, at_step):
        super().__init__(table)
        self.bad_row, self.at_step, self.calls = bad_row, at_step, 0

    def _spoil(self, log_probs):
        if self.calls == self.at_step:
            log_probs = log_probs.clone()
            log_probs[0] = self.bad_row
        self.calls += 1
        return log_probs

    def initial_state(self, contexts):
        state, log_probs = super().initial_state(contexts)
        return state, self._spoil(log_probs)

    def step(self, state, tokens):
        state, log_probs = super().step(state, tokens)
        return state, self._spoil(log_probs)


_NAN_ROW = torch.tensor([0.0, math.nan, -1.0, -2.0, -3.0], dtype=torch.float64)
_EMPTY_ROW = torch.full((5,), -INF, dtype=torch.float64)
_DECODERS = [("greedy", {}), ("ancestral", {}), ("ancestral", {"temperature": 0.7}), ("top-k", {"k": 2}),
             ("top-k", {"k": 2, "consistent": True}), ("nucleus", {"p": 0.9}), ("nucleus", {"p": 1.0}),
             ("entmax", {"alpha": 1.5}), ("beam", {"beam_size": 2})]


@pytest.mark.parametrize("method, kwargs", _DECODERS)
@pytest.mark.parametrize("at_step", [0, 2])
def test_every_decoder_refuses_a_step_whose_row_contains_nan(method, kwargs, at_step):
    table = seeded_table(0, 5, eos_boost=-30.0).transition_log_probs  # eos never wins: steps go on
    model = _BrokenRowLM(table, _NAN_ROW, at_step)
    where = "initial_state" if at_step == 0 else "step"
    with pytest.raises(ValueError, match=rf"row 0 of the log_probs model.{where} returned .* contains NaN"):
        decode(model, CONTEXTS, method, max_len=6, generator=torch.Generator().manual_seed(0), **kwargs)


@pytest.mark.parametrize("method, kwargs", _DECODERS)
@pytest.mark.parametrize("at_step", [0, 2])
def test_every_decoder_refuses_a_step_whose_row_has_no_finite_log_probability(method, kwargs, at_step):
    table = seeded_table(0, 5, eos_boost=-30.0).transition_log_probs
    model = _BrokenRowLM(table, _EMPTY_ROW, at_step)
    with pytest.raises(ValueError, match="has no token of positive probability"):
        decode(model, CONTEXTS, method, max_len=6, generator=torch.Generator().manual_seed(0), **kwargs)


@pytest.mark.parametrize("bad_row, words", [(_NAN_ROW, "contains NaN"),
                                            (_EMPTY_ROW, "no token of positive probability"),
                                            (torch.tensor([0.0, INF, -1.0, -2.0, -3.0]), r"contains \+inf")])
def test_candidate_sets_sampling_and_decoder_distribution_refuse_a_row_that_is_no_distribution(bad_row, words):
    from nmst_lib.decoding import decoder_distribution

    good = torch.log_softmax(torch.randn(2, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1)), -1)
    log_probs = torch.stack([good[0], bad_row.double(), good[1]])  # the bad row is row 1
    calls = [lambda: top_k_mask(log_probs, 2), lambda: nucleus_mask(log_probs, 0.5),
             lambda: nucleus_mask(log_probs, 1.0), lambda: sample_tokens(log_probs),
             lambda: restrict_log_probs(log_probs, torch.ones(3, 5, dtype=torch.bool))]
    calls += [lambda m=m, kw=kw: decoder_distribution(log_probs, m, **kw)
              for m, kw in [("greedy", {}), ("ancestral", {}), ("top-k", {"k": 2}), ("nucleus", {"p": 0.5}),
                            ("entmax", {"alpha": 1.5})]]
    for call in calls:
        with pytest.raises(ValueError, match=rf"row 1 of log_probs .*{words}"):
            call()
    # a leading batch dim is flattened: row 1 of [3, 5] is row 1 of [1, 3, 5] too
    with pytest.raises(ValueError, match="row 1 of log_probs"):
        top_k_mask(log_probs[None], 2)


def test_rows_with_minus_infinity_but_a_finite_entry_and_empty_batches_are_still_accepted():
    log_probs = torch.tensor([[0.0, -INF, -INF], [-INF, -0.5, -1.0]]).log_softmax(-1)
    assert top_k_mask(log_probs, 1).tolist() == [[True, False, False], [False, True, False]]
    drawn = sample_tokens(log_probs, torch.Generator().manual_seed(0)).tolist()
    assert drawn[0] == 0 and drawn[1] in (1, 2)
    assert nucleus_mask(torch.empty(0, 3), 0.5).shape == (0, 3)
