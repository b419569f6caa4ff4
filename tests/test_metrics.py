"""Tests of nmst_lib.metrics: r_nt(L) (Choi et al. 2023, eq. 11), its curve, lengths, perplexity."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.decoding import PAD, Generation, decode
from nmst_lib.markov import MarkovLM, random_markov_lm
from nmst_lib.metrics import (
    first_eos_steps,
    length_histogram,
    non_termination_ratio,
    perplexity,
    rnt_curve,
    termination_steps,
)

EOS = 4


def _generation(rows: list[list[int]], max_len: int, eos_id: int = EOS) -> Generation:
    """A Generation built by hand: each row is its continuation, padded with PAD."""
    tokens = torch.full((len(rows), max_len), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    terminated = torch.tensor([eos_id in row for row in rows])
    lengths = torch.tensor([len(row) for row in rows])
    return Generation(
        tokens=tokens,
        lengths=lengths,
        terminated=terminated,
        max_len=max_len,
        eos_id=eos_id,
        method="hand-made",
        scores=torch.zeros(len(rows)),
    )


# rows end at step 3, never (within 5), 1, 5
HAND = _generation([[1, 2, EOS], [1, 1, 1, 1, 1], [EOS], [2, 2, 2, 2, EOS]], max_len=5)


def test_first_eos_steps_of_a_hand_made_generation():
    assert first_eos_steps(HAND).tolist() == [3, 6, 1, 5]


def test_non_termination_ratio_of_a_hand_made_generation():
    # unterminated within L: L=1 -> rows 0,1,3; L=2 -> same; L=3 -> rows 1,3; L=4 -> rows 1,3; L=5 -> row 1
    expected = {1: 3 / 4, 2: 3 / 4, 3: 2 / 4, 4: 2 / 4, 5: 1 / 4}
    for L, r in expected.items():
        assert non_termination_ratio(HAND, L) == r


def _brute_force_rnt(tokens: torch.Tensor, eos_id: int, L: int) -> float:
    count = 0
    for row in tokens.tolist():
        if eos_id not in row[:L]:
            count += 1
    return count / len(tokens)


@st.composite
def generations(draw):
    max_len = draw(st.integers(1, 30))
    n = draw(st.integers(1, 25))
    rows = []
    for _ in range(n):
        length = draw(st.integers(1, max_len))
        body = draw(st.lists(st.integers(0, EOS - 1), min_size=length, max_size=length))
        if draw(st.booleans()):
            body[-1] = EOS
        elif length < max_len:
            body = body + draw(st.lists(st.integers(0, EOS - 1), min_size=max_len - length, max_size=max_len - length))
        rows.append(body)
    return _generation(rows, max_len)


@settings(max_examples=80, deadline=None)
@given(gen=generations(), data=st.data())
def test_non_termination_ratio_matches_a_brute_force_loop(gen, data):
    L = data.draw(st.integers(1, gen.max_len))
    assert non_termination_ratio(gen, L) == pytest.approx(_brute_force_rnt(gen.tokens, EOS, L), abs=1e-15)


@settings(max_examples=80, deadline=None)
@given(gen=generations())
def test_rnt_curve_equals_per_L_calls_and_is_non_increasing(gen):
    Ls = list(range(1, gen.max_len + 1))
    curve = rnt_curve(gen, Ls)
    assert isinstance(curve, np.ndarray) and curve.dtype == np.float64
    assert curve.tolist() == pytest.approx([non_termination_ratio(gen, L) for L in Ls], abs=1e-15)
    assert bool(np.all(np.diff(curve) <= 0))
    # any order and repeats of L are answered pointwise
    shuffled = Ls[::-1] + Ls[:2]
    assert rnt_curve(gen, shuffled).tolist() == pytest.approx([non_termination_ratio(gen, L) for L in shuffled])


@settings(max_examples=60, deadline=None)
@given(gen=generations())
def test_length_histogram_counts_every_row_and_its_tail_is_rnt(gen):
    hist = length_histogram(gen)
    assert hist.shape == (gen.max_len + 2,)
    assert hist[0] == 0 and hist.sum() == gen.tokens.shape[0]
    # terminated rows are counted at their length (Generation.lengths, eos included)
    terminated_lengths = gen.lengths[gen.terminated].tolist()
    for length in range(1, gen.max_len + 1):
        assert hist[length] == terminated_lengths.count(length)
    for L in range(1, gen.max_len + 1):
        assert hist[L + 1 :].sum() / gen.tokens.shape[0] == pytest.approx(non_termination_ratio(gen, L))


def test_metrics_agree_with_generation_lengths_from_a_real_decode():
    from nmst_lib.decoding import decode
    from nmst_lib.markov import random_markov_lm

    model = random_markov_lm(6, generator=torch.Generator().manual_seed(0))
    gen = decode(model, torch.zeros(200, 1, dtype=torch.long), "ancestral", max_len=15,
                 generator=torch.Generator().manual_seed(1))
    steps = first_eos_steps(gen)
    assert torch.equal(steps[gen.terminated], gen.lengths[gen.terminated])
    assert bool((steps[~gen.terminated] == gen.max_len + 1).all())


@pytest.mark.parametrize("L", [0, -1, 6])
def test_non_termination_ratio_rejects_L_outside_1_to_max_len(L):
    with pytest.raises(ValueError, match="max_len"):
        non_termination_ratio(HAND, L)
    with pytest.raises(ValueError, match="max_len"):
        rnt_curve(HAND, [1, L])


def test_metrics_reject_bad_arguments():
    with pytest.raises(TypeError, match="integer"):
        non_termination_ratio(HAND, 2.0)
    with pytest.raises(TypeError, match="integer"):
        non_termination_ratio(HAND, True)
    with pytest.raises(ValueError, match="non-empty"):
        rnt_curve(HAND, [])
    with pytest.raises(TypeError, match="integers"):
        rnt_curve(HAND, [1.5, 2.0])
    with pytest.raises(TypeError, match="Generation"):
        non_termination_ratio(torch.zeros(3, 4), 1)


# --------------------------------------------------------------------------- beam search: r_nt(L)
#
# With step limit L, beam search (Welleck et al. 2020, Def. A.2) returns the best hypothesis
# finished by step L; the run to L_max may return a later, better-scoring one. The search is
# the same up to step L whatever the limit, so the run limited to L terminates iff some
# hypothesis finished by step L (Generation.first_finish_steps), not iff the returned
# sequence of the longer run is at most L long.


def _peaked_table(seed: int, vocab_size: int, temperature: float) -> MarkovLM:
    """A random bigram table with logits z / temperature, z ~ N(0, I): small temperatures
    (large logit scales) give peaked rows, where a later, better-scoring finish is common."""
    return random_markov_lm(vocab_size, temperature=temperature, generator=torch.Generator().manual_seed(seed))


def _contexts(vocab_size: int) -> torch.Tensor:
    return torch.arange(vocab_size).repeat(2)[:, None]  # every token as the context, twice


def _rnt_per_step_limit(model, contexts, beam_size: int, Ls) -> np.ndarray:
    """The definition: one beam search per step limit L, r_nt(L) of that run."""
    return np.array([non_termination_ratio(decode(model, contexts, "beam", beam_size=beam_size, max_len=L), L)
                     for L in Ls])


def _counts(ratios, rows: int) -> list[int]:
    """Fractions of ``rows`` as exact row counts (rnt_curve computes 1 - terminated / B)."""
    return np.rint(np.asarray(ratios) * rows).astype(int).tolist()


def _assert_one_decode_gives_every_limit(model, contexts, beam_size: int, max_len: int) -> None:
    full = decode(model, contexts, "beam", beam_size=beam_size, max_len=max_len)
    Ls = list(range(1, max_len + 1))
    curve = rnt_curve(full, Ls)
    expected = _rnt_per_step_limit(model, contexts, beam_size, Ls)
    np.testing.assert_allclose(curve, expected, rtol=0, atol=1e-12)
    assert _counts(curve, len(contexts)) == _counts(expected, len(contexts))
    ff = full.first_finish_steps
    for L in Ls:
        limited = decode(model, contexts, "beam", beam_size=beam_size, max_len=L)
        assert non_termination_ratio(full, L) == non_termination_ratio(limited, L)
        # row by row: the limited search terminates iff a hypothesis finished by step L,
        # and it records the same first finish (or its own sentinel L + 1)
        assert torch.equal(limited.terminated, ff <= L)
        assert torch.equal(limited.first_finish_steps, torch.where(ff <= L, ff, L + 1))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), vocab_size=st.integers(3, 7), beam_size=st.sampled_from([1, 2, 3, 4, 6]),
       temperature=st.sampled_from([0.1, 0.2, 0.35, 0.5, 1.0]), max_len=st.integers(1, 12))
def test_beam_rnt_curve_of_one_decode_equals_one_decode_per_step_limit(seed, vocab_size, beam_size, temperature,
                                                                        max_len):
    model = _peaked_table(seed, vocab_size, temperature)
    _assert_one_decode_gives_every_limit(model, _contexts(vocab_size), beam_size, max_len)


@pytest.mark.parametrize("beam_size", [2, 3, 4, 8])
def test_beam_rnt_curve_equals_one_decode_per_step_limit_on_peaked_tables_for_many_L(beam_size):
    for seed in range(6):
        model = _peaked_table(seed, 6, temperature=0.25)
        _assert_one_decode_gives_every_limit(model, _contexts(6), beam_size, max_len=25)


def test_reading_beam_r_nt_off_the_returned_lengths_overstates_it_on_peaked_tables():
    """The old rule (a row counts as unterminated at L when its returned sequence is longer than
    L) differs from the definition on these models: it is never below it, and above it at some
    L for every beam size >= 2; for width 1 (greedy) both rules agree."""
    max_len, Ls = 15, list(range(1, 16))
    for beam_size in (1, 2, 3, 4):
        differs = 0
        for seed in range(10):
            model, contexts = _peaked_table(seed, 6, temperature=0.25), _contexts(6)
            full = decode(model, contexts, "beam", beam_size=beam_size, max_len=max_len)
            old_rule = np.array([float((first_eos_steps(full) > L).double().mean()) for L in Ls])
            right = _rnt_per_step_limit(model, contexts, beam_size, Ls)
            assert bool(np.all(old_rule >= right - 1e-12))
            differs += int(np.any(np.abs(old_rule - right) > 1e-12))
            np.testing.assert_allclose(rnt_curve(full, Ls), right, rtol=0, atol=1e-12)
        if beam_size == 1:
            assert differs == 0
        else:
            assert differs >= 3, f"beam-{beam_size}: the old rule differed on only {differs} of 10 tables"


def test_beam_r_nt_on_a_hand_made_table_where_a_later_finish_wins():
    # eos = 2. From 0: token 1 0.7, eos 0.3; from 1: eos 0.9. Width 2 finishes [eos] at step 1
    # and returns [1, eos] (0.63 > 0.3), finished at step 2. With limit 1 it returns [eos].
    probs = torch.tensor([[0.0, 0.7, 0.3], [0.0, 0.1, 0.9], [0.5, 0.5, 0.0]], dtype=torch.float64)
    model = MarkovLM(probs.log())
    full = decode(model, torch.tensor([[0]]), "beam", beam_size=2, max_len=10)
    assert full.lengths.tolist() == [2] and termination_steps(full).tolist() == [1]
    assert first_eos_steps(full).tolist() == [2]  # the returned sequence's length
    assert non_termination_ratio(full, 1) == 0.0 == non_termination_ratio(
        decode(model, torch.tensor([[0]]), "beam", beam_size=2, max_len=1), 1)
    assert rnt_curve(full, [1, 2, 10]).tolist() == [0.0, 0.0, 0.0]
    # length_histogram counts returned lengths: its tail is r_nt only at L = max_len
    hist = length_histogram(full)
    assert hist[2] == 1 and hist[max(1, 1) + 1 :].sum() == 1 and hist[full.max_len + 1] == 0


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), beam_size=st.integers(1, 5), max_len=st.integers(1, 10))
def test_beam_length_histogram_counts_returned_lengths_and_its_last_bin_is_rnt_at_max_len(seed, beam_size, max_len):
    model = _peaked_table(seed, 5, temperature=0.3)
    gen = decode(model, _contexts(5), "beam", beam_size=beam_size, max_len=max_len)
    hist = length_histogram(gen)
    assert hist.sum() == gen.tokens.shape[0]
    assert hist[1 : max_len + 1].tolist() == [int((gen.lengths[gen.terminated] == n).sum()) for n in range(1, max_len + 1)]
    assert hist[max_len + 1] / gen.tokens.shape[0] == pytest.approx(non_termination_ratio(gen, max_len), abs=1e-15)
    for L in range(1, max_len + 1):  # for smaller L the tail can only overstate r_nt(L)
        assert hist[L + 1 :].sum() / gen.tokens.shape[0] >= non_termination_ratio(gen, L) - 1e-15


def test_token_level_decoders_termination_steps_are_their_first_eos():
    model = _peaked_table(1, 6, temperature=0.5)
    for method, kwargs in [("greedy", {}), ("ancestral", {}), ("top-k", dict(k=2)), ("nucleus", dict(p=0.6))]:
        gen = decode(model, _contexts(6), method, max_len=8, generator=torch.Generator().manual_seed(0), **kwargs)
        assert torch.equal(termination_steps(gen), first_eos_steps(gen))
        # a hand-built copy without the field falls back to the tokens and gives the same curve
        bare = Generation(tokens=gen.tokens, lengths=gen.lengths, terminated=gen.terminated, max_len=gen.max_len,
                          eos_id=gen.eos_id, method=gen.method, scores=gen.scores)
        assert rnt_curve(bare, range(1, 9)).tolist() == rnt_curve(gen, range(1, 9)).tolist()


def _with_first_finish(gen: Generation, first_finish, method: str = "beam") -> Generation:
    return Generation(tokens=gen.tokens, lengths=gen.lengths, terminated=gen.terminated, max_len=gen.max_len,
                      eos_id=gen.eos_id, method=method, scores=gen.scores, first_finish_steps=first_finish)


def test_beam_metrics_reject_a_missing_or_malformed_first_finish_steps():
    beam_without = _with_first_finish(HAND, None)
    for metric in (lambda g: non_termination_ratio(g, 2), lambda g: rnt_curve(g, [1, 2]), termination_steps):
        with pytest.raises(ValueError, match="first_finish_steps"):
            metric(beam_without)
    with pytest.raises(ValueError, match=r"shape \[B\] = \(4,\)"):
        rnt_curve(_with_first_finish(HAND, torch.tensor([1, 2, 3])), [1])
    with pytest.raises(TypeError, match="integer tensor"):
        rnt_curve(_with_first_finish(HAND, torch.tensor([1.0, 2.0, 3.0, 6.0])), [1])
    with pytest.raises(TypeError, match="integer tensor"):
        rnt_curve(_with_first_finish(HAND, [3, 6, 1, 5]), [1])
    for bad in ([0, 6, 1, 5], [3, 7, 1, 5]):  # steps run 1..max_len, and max_len + 1 = 6 means never
        with pytest.raises(ValueError, match="max_len \\+ 1 = 6"):
            non_termination_ratio(_with_first_finish(HAND, torch.tensor(bad)), 1)
    # a well-formed field is used as given, whatever the tokens say
    assert non_termination_ratio(_with_first_finish(HAND, torch.tensor([1, 1, 1, 6])), 5) == 0.25


# --------------------------------------------------------------------------- perplexity


def _manual_perplexity(log_probs, targets, mask) -> float:
    total, count = 0.0, 0
    for idx in np.ndindex(*targets.shape):
        if bool(mask[idx]):
            total += float(log_probs[idx + (int(targets[idx]),)])
            count += 1
    return math.exp(-total / count)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 4), steps=st.integers(1, 6), vocab=st.integers(2, 7))
def test_perplexity_matches_a_manual_computation(seed, batch, steps, vocab):
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.log_softmax(3 * torch.randn(batch, steps, vocab, generator=g), dim=-1)
    targets = torch.randint(0, vocab, (batch, steps), generator=g)
    mask = torch.rand(batch, steps, generator=g) < 0.7
    mask[0, 0] = True
    targets[~mask] = -1  # padding ids at unscored positions must be ignored
    assert perplexity(log_probs, targets, mask) == pytest.approx(_manual_perplexity(log_probs, targets, mask), rel=1e-6)


def test_perplexity_of_float32_one_hot_log_probs_with_minus_inf_elsewhere():
    # the model puts all mass on the target at scored positions, and -inf everywhere else
    targets = torch.tensor([[2, 0, 1], [1, 1, -1]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    log_probs = torch.full((2, 3, 3), -math.inf, dtype=torch.float32)
    log_probs[0, 0, 2] = log_probs[0, 1, 0] = log_probs[0, 2, 1] = 0.0
    log_probs[1, 0, 1] = math.log(0.5)
    log_probs[1, 0, 0] = math.log(0.5)
    log_probs[1, 1, 1] = 0.0
    # one token at probability 1/2 among 5 scored tokens: exp(log 2 / 5)
    assert perplexity(log_probs, targets, mask) == pytest.approx(2 ** (1 / 5), rel=1e-7)
    # an impossible target makes the perplexity infinite, not NaN
    assert perplexity(log_probs, torch.tensor([[0, 0, 1], [1, 1, -1]]), mask) == math.inf


def test_perplexity_of_uniform_predictions_is_the_vocabulary_size():
    log_probs = torch.full((3, 4, 7), -math.log(7), dtype=torch.float64)
    targets = torch.randint(0, 7, (3, 4), generator=torch.Generator().manual_seed(0))
    assert perplexity(log_probs, targets, torch.ones(3, 4, dtype=torch.bool)) == pytest.approx(7.0, rel=1e-12)


def test_perplexity_rejects_bad_input():
    lp = torch.log_softmax(torch.zeros(2, 3, 4), -1)
    targets = torch.zeros(2, 3, dtype=torch.long)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="shape"):
        perplexity(lp, targets[:, :2], mask[:, :2])
    with pytest.raises(ValueError, match="shape"):
        perplexity(lp, targets, mask[:1])
    with pytest.raises(ValueError, match="no position"):
        perplexity(lp, targets, torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool"):
        perplexity(lp, targets, mask.long())
    with pytest.raises(TypeError, match="integer"):
        perplexity(lp, targets.double(), mask)
    with pytest.raises(ValueError, match="token ids"):
        perplexity(lp, targets + 4, mask)


def test_perplexity_of_grad_requiring_log_probs_is_a_plain_float_without_warning():
    import warnings

    logits = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    log_probs = torch.log_softmax(logits, dim=-1)
    targets = torch.randint(0, 5, (2, 3))
    mask = torch.ones(2, 3, dtype=torch.bool)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = perplexity(log_probs, targets, mask)
    expected = torch.exp(-log_probs.detach().gather(-1, targets.unsqueeze(-1)).mean()).item()
    assert isinstance(value, float) and abs(value - expected) < 1e-12 * expected


def test_perplexity_refuses_probabilities_logits_and_nan_at_scored_targets():
    probs = torch.tensor([[[0.9, 0.1], [0.3, 0.7]]])
    targets = torch.tensor([[0, 1]])
    mask = torch.tensor([[True, True]])
    with pytest.raises(ValueError, match=r"log-probabilities \(<= 0\).*probabilities or logits"):
        perplexity(probs, targets, mask)  # was 0.81: exp(-mean p) < 1
    with pytest.raises(ValueError, match="NaN at a scored target"):
        perplexity(torch.tensor([[[math.nan, 0.0], [-1.0, -0.5]]]), targets, mask)
    # NaN or positive values where nothing is scored do not matter, -inf gives inf, and rounding
    # of a log-probability just above 0 (a few ulps) is accepted
    lp = torch.tensor([[[-0.5, math.nan], [3.0, -2.0]]])
    assert perplexity(lp, targets, mask) == pytest.approx(math.exp((0.5 + 2.0) / 2), rel=1e-12)
    assert perplexity(lp, targets, torch.tensor([[True, False]])) == pytest.approx(math.exp(0.5), rel=1e-12)
    assert perplexity(torch.tensor([[[-math.inf, 0.0]]]), torch.tensor([[0]]), torch.tensor([[True]])) == math.inf
    assert perplexity(torch.tensor([[[1e-6, 0.0]]]), torch.tensor([[0]]), torch.tensor([[True]])) == \
        pytest.approx(math.exp(-1e-6), rel=1e-12)


def test_first_eos_steps_of_a_generation_with_no_column_is_never_and_integer_fields_are_checked():
    empty = Generation(tokens=torch.zeros(3, 0, dtype=torch.long), lengths=torch.zeros(3, dtype=torch.long),
                       terminated=torch.zeros(3, dtype=torch.bool), max_len=5, eos_id=EOS, method="greedy",
                       scores=torch.zeros(3))
    assert first_eos_steps(empty).tolist() == [6, 6, 6]  # was an IndexError from argmax
    gen = _generation([[1, EOS], [EOS]], 4)
    for field, value in (("max_len", 4.7), ("eos_id", 4.0), ("max_len", True), ("eos_id", "4")):
        bad = dataclasses.replace(gen, **{field: value})
        with pytest.raises(TypeError, match=f"generation.{field} must be an integer"):
            first_eos_steps(bad)  # 4.7 was silently truncated to 4
    assert first_eos_steps(dataclasses.replace(gen, max_len=np.int64(4))).tolist() == [2, 1]
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        first_eos_steps(dataclasses.replace(gen, tokens=gen.tokens[:, :0], max_len=0))
