"""Tests of nmst_lib.metrics: r_nt(L) (Choi et al. 2023, eq. 11), its curve, lengths, perplexity."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.decoding import PAD, Generation
from nmst_lib.metrics import first_eos_steps, length_histogram, non_termination_ratio, perplexity, rnt_curve

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
