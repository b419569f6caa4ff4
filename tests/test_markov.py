"""Tests of the exact section of nmst_lib.markov: decoders on a bigram LM as absorbing chains."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nmst_lib.decoding import decode
from nmst_lib.markov import (
    MarkovLM,
    _one_minus_kernel,  # the matrix I - Q that absorption_probabilities solves with
    absorption_probabilities,
    decoder_transition_matrix,
    exact_rnt_curve,
    expected_length,
    expected_lengths,
    random_markov_lm,
    survival_curve,
    termination_probability,
)
from nmst_lib.metrics import rnt_curve


def _lm(rows, eos_id=-1) -> MarkovLM:
    return MarkovLM(torch.tensor(rows, dtype=torch.float64).log(), eos_id=eos_id)


# Greedy loops 0 -> 1 -> 0 -> ... (eos, id 2, is never the argmax); every row gives eos 0.3.
LOOP = _lm([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3], [0.3, 0.4, 0.3]])
# Token 0 is a trap (0 -> 0 with probability 1); from token 1: 0.2 to the trap, 0.5 stay, 0.3 eos.
TRAP = _lm([[1.0, 0.0, 0.0], [0.2, 0.5, 0.3], [0.3, 0.4, 0.3]])
# eos (id 3) is the least probable token of every row: top-2 and nucleus-0.7 never pick it.
LAST = _lm([[0.5, 0.3, 0.15, 0.05], [0.2, 0.5, 0.25, 0.05], [0.3, 0.3, 0.3, 0.1], [0.45, 0.3, 0.15, 0.1]])


# --------------------------------------------------------------------------- hand-built chains


def test_greedy_loop_never_terminates():
    assert termination_probability(LOOP, "greedy", start_token=0) == 0.0
    assert expected_length(LOOP, "greedy", start_token=0) == math.inf
    assert exact_rnt_curve(LOOP, "greedy", start_token=0, Ls=[1, 10, 1000]).tolist() == [1.0, 1.0, 1.0]


def test_geometric_stopping_has_probability_one_and_mean_one_over_q():
    q = 0.3  # every row of LOOP gives eos probability q, so |y| ~ Geometric(q)
    for start in range(3):
        assert termination_probability(LOOP, "ancestral", start_token=start) == pytest.approx(1.0, abs=1e-14)
        assert expected_length(LOOP, "ancestral", start_token=start) == pytest.approx(1 / q, rel=1e-13)
        Ls = [1, 2, 5, 40]
        np.testing.assert_allclose(
            exact_rnt_curve(LOOP, "ancestral", start_token=start, Ls=Ls), [(1 - q) ** L for L in Ls], rtol=1e-13
        )


def test_trapped_state_is_split_out_by_reachability():
    b, c = 0.5, 0.3  # row of token 1: 0.2 to the trap (token 0), b back to 1, c to eos
    # from 1: x = c + b x + 0.2 * 0, so x = c / (1 - b); from the trap: exactly 0
    assert termination_probability(TRAP, "ancestral", start_token=1) == pytest.approx(c / (1 - b), rel=1e-14)
    assert termination_probability(TRAP, "ancestral", start_token=0) == 0.0
    assert expected_length(TRAP, "ancestral", start_token=1) == math.inf
    Ls = [1, 2, 3, 30]
    expected = [1 - c * (1 - b**L) / (1 - b) for L in Ls]
    np.testing.assert_allclose(exact_rnt_curve(TRAP, "ancestral", start_token=1, Ls=Ls), expected, rtol=1e-13)
    # the eos row (used when a context ends in eos): 0.3 to eos at once, 0.4 via token 1, 0.3 trapped
    assert termination_probability(TRAP, "ancestral", start_token=2) == pytest.approx(0.3 + 0.4 * c / (1 - b))


def test_greedy_reaching_eos_after_two_steps():
    model = _lm([[0.1, 0.5, 0.4], [0.2, 0.1, 0.7], [0.3, 0.4, 0.3]])  # greedy: 0 -> 1 -> eos
    assert termination_probability(model, "greedy", start_token=0) == 1.0
    assert expected_length(model, "greedy", start_token=0) == pytest.approx(2.0, rel=1e-14)
    assert exact_rnt_curve(model, "greedy", start_token=0, Ls=[1, 2, 3]).tolist() == [1.0, 0.0, 0.0]


def test_incomplete_decoders_never_stop_when_eos_is_last_but_consistent_ones_do():
    for start in range(4):
        assert termination_probability(LAST, "top-k", k=2, start_token=start) == 0.0
        assert termination_probability(LAST, "nucleus", p=0.7, start_token=start) == 0.0
        # Welleck et al. (2020), Thm 4.1: q(eos) >= p(eos) > 0 everywhere gives probability 1
        assert termination_probability(LAST, "top-k", k=2, consistent=True, start_token=start) == pytest.approx(1.0)
        assert termination_probability(LAST, "nucleus", p=0.7, consistent=True, start_token=start) == pytest.approx(1.0)
        assert termination_probability(LAST, "ancestral", start_token=start) == pytest.approx(1.0)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    vocab=st.integers(2, 9),
    temperature=st.sampled_from([0.3, 1.0, 3.0]),
    k=st.integers(1, 9),
    p=st.floats(0.05, 1.0),
)
def test_consistent_variants_terminate_with_probability_one(seed, vocab, temperature, k, p):
    model = random_markov_lm(vocab, temperature=temperature, generator=torch.Generator().manual_seed(seed))
    assert bool((model.transition_probs[:, model.eos_id] > 0).all())  # Thm 4.1's premise
    k = min(k, vocab)
    for kernel in (
        decoder_transition_matrix(model, "top-k", k=k, consistent=True),
        decoder_transition_matrix(model, "nucleus", p=p, consistent=True),
        decoder_transition_matrix(model, "ancestral"),
    ):
        torch.testing.assert_close(absorption_probabilities(kernel, model.eos_id), torch.ones(vocab, dtype=torch.float64))


# --------------------------------------------------------------------------- algebra properties


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    vocab=st.integers(2, 8),
    temperature=st.sampled_from([0.2, 0.5, 1.0]),
    method=st.sampled_from(["greedy", "ancestral", "top-k", "nucleus"]),
)
@example(seed=532503, vocab=6, temperature=0.2, method="ancestral")  # ill-conditioned: x - 1 ~ 1e-12
def test_absorption_and_lengths_solve_their_first_step_equations(seed, vocab, temperature, method):
    model = random_markov_lm(vocab, temperature=temperature, generator=torch.Generator().manual_seed(seed))
    kwargs = {"top-k": {"k": max(1, vocab // 2)}, "nucleus": {"p": 0.6}}.get(method, {})
    q = decoder_transition_matrix(model, method, **kwargs)
    eos = model.eos_id
    x = absorption_probabilities(q, eos)
    transient = [i for i in range(vocab) if i != eos]
    # x is a probability up to the solve's rounding, which the condition number of I - Q bounds
    # (seed 532503, V = 6, T = 0.2 has cond ~ 6e4 and x - 1 ~ 1e-12, within cond * ulp ~ 1.3e-11)
    slack = max(1e-12, 4 * torch.finfo(torch.float64).eps * float(torch.linalg.cond(_one_minus_kernel(q, torch.tensor(transient)))))
    assert bool(((x >= -slack) & (x <= 1 + slack)).all()), (x - 1, slack)
    # first-step analysis: x_i = q_i,eos + sum_j q_ij x_j (the eos "row" restarts from x_j of transient j)
    torch.testing.assert_close(x, q[:, eos] + q[:, transient] @ x[transient], atol=1e-10, rtol=0)
    # the survival curve decreases towards 1 - x
    surv = survival_curve(q, eos, list(range(vocab)), range(1, 3001))  # [start, L]
    assert bool((surv[:, 1:] <= surv[:, :-1] + 1e-15).all())
    assert bool((1 - surv[:, -1] <= x + 1e-12).all())
    lengths = expected_lengths(q, eos)
    for start in range(vocab):
        if math.isfinite(float(lengths[start])):
            assert float(x[start]) == pytest.approx(1.0, abs=1e-9)
            # E|y| = sum_{L >= 0} P(|y| > L) = 1 + sum_{L >= 1} r_nt(L)
            if float(surv[start, -1]) < 1e-13:
                assert float(lengths[start]) == pytest.approx(1 + float(surv[start].sum()), rel=1e-8)
        else:
            # infinite mean length only where some path gets trapped (termination prob < 1)
            assert float(x[start]) < 1 - 1e-12


def test_kernel_rows_follow_the_decoders_candidate_sets():
    model = random_markov_lm(7, temperature=0.8, generator=torch.Generator().manual_seed(5))
    P = model.transition_probs
    eos = model.eos_id
    torch.testing.assert_close(decoder_transition_matrix(model, "ancestral"), P)
    greedy = decoder_transition_matrix(model, "greedy")
    assert torch.equal(greedy, torch.nn.functional.one_hot(P.argmax(-1), 7).double())
    for k in (1, 3, 7):
        for consistent in (False, True):
            q = decoder_transition_matrix(model, "top-k", k=k, consistent=consistent)
            torch.testing.assert_close(q.sum(-1), torch.ones(7, dtype=torch.float64))
            for i in range(7):
                top = set(torch.topk(P[i], k).indices.tolist())
                kept = top | ({eos} if consistent else set())
                assert set(q[i].nonzero().squeeze(1).tolist()) == kept
                mass = sum(float(P[i, j]) for j in kept)
                for j in kept:
                    assert float(q[i, j]) == pytest.approx(float(P[i, j]) / mass, rel=1e-12)
    for p in (0.3, 0.7, 0.95):
        q = decoder_transition_matrix(model, "nucleus", p=p)
        for i in range(7):
            order = torch.argsort(P[i], descending=True).tolist()
            cum, kept = 0.0, set()
            for j in order:  # smallest most-probable set with mass >= p
                kept.add(j)
                cum += float(P[i, j])
                if cum >= p:
                    break
            assert set(q[i].nonzero().squeeze(1).tolist()) == kept
            mass = sum(float(P[i, j]) for j in kept)  # and renormalised on the kept set
            for j in kept:
                assert float(q[i, j]) == pytest.approx(float(P[i, j]) / mass, rel=1e-12)


# --------------------------------------------------------------------------- Monte Carlo agreement

N_ROWS = 10_000
DELTA = 1e-6


def _tolerance(n: int, comparisons: int, delta: float = DELTA) -> float:
    """Hoeffding + union bound: each r_nt(L) estimate is a mean of n i.i.d. indicators, so
    P(|rhat - r| >= tau) <= 2 exp(-2 n tau^2); over `comparisons` estimates the probability
    that any misses is <= 2 m exp(-2 n tau^2) = delta for tau = sqrt(log(2 m / delta) / (2 n)).
    A correct implementation fails this test with probability < delta = 1e-6."""
    return math.sqrt(math.log(2 * comparisons / delta) / (2 * n))


CASES = [
    ("ancestral", {}),
    ("top-k", {"k": 2}),
    ("top-k", {"k": 2, "consistent": True}),
    ("nucleus", {"p": 0.5}),
    ("nucleus", {"p": 0.5, "consistent": True}),
]


@pytest.mark.parametrize("method,kwargs", CASES, ids=[f"{m}-{kw}" for m, kw in CASES])
def test_exact_rnt_curve_and_termination_agree_with_monte_carlo(method, kwargs):
    model = random_markov_lm(8, temperature=0.7, generator=torch.Generator().manual_seed(11))
    start, max_len = 2, 40
    Ls = [1, 2, 3, 5, 8, 13, 21, 40]
    contexts = torch.full((N_ROWS, 1), start, dtype=torch.long)
    gen = decode(model, contexts, method, max_len=max_len, generator=torch.Generator().manual_seed(7), **kwargs)
    exact = exact_rnt_curve(model, method, start_token=start, Ls=Ls, **kwargs)
    tau = _tolerance(N_ROWS, comparisons=len(Ls))
    np.testing.assert_array_less(np.abs(rnt_curve(gen, Ls) - exact), tau)
    # the termination probability is the limit of 1 - r_nt(L): within max_len it is bracketed
    term = termination_probability(model, method, start_token=start, **kwargs)
    assert 1 - exact[-1] <= term + 1e-12
    mc_terminated = float(gen.terminated.double().mean())
    assert abs(mc_terminated - (1 - exact[-1])) < tau


def test_monte_carlo_agreement_is_not_vacuous_for_an_inconsistent_decoder():
    # top-k on a chain where eos is never in the top 2: exact and Monte Carlo both say 1
    gen = decode(LAST, torch.zeros(500, 1, dtype=torch.long), "top-k", k=2, max_len=50,
                 generator=torch.Generator().manual_seed(0))
    assert not bool(gen.terminated.any())
    assert exact_rnt_curve(LAST, "top-k", k=2, start_token=0, Ls=[50]).tolist() == pytest.approx([1.0], abs=1e-12)


# --------------------------------------------------------------------------- argument checks


def test_exact_functions_reject_bad_arguments():
    with pytest.raises(ValueError, match="beam"):
        decoder_transition_matrix(LOOP, "beam")
    with pytest.raises(ValueError, match="consistent"):
        decoder_transition_matrix(LOOP, "greedy", consistent=True)
    with pytest.raises(TypeError, match="consistent"):
        decoder_transition_matrix(LOOP, "top-k", k=1, consistent=1)
    with pytest.raises(ValueError, match="needs k"):
        decoder_transition_matrix(LOOP, "top-k")
    with pytest.raises(ValueError, match="needs p"):
        decoder_transition_matrix(LOOP, "nucleus")
    with pytest.raises(ValueError, match="k is only used"):
        decoder_transition_matrix(LOOP, "ancestral", k=2)
    with pytest.raises(ValueError, match="p is only used"):
        decoder_transition_matrix(LOOP, "top-k", k=1, p=0.5)
    with pytest.raises(ValueError, match="k must be"):
        decoder_transition_matrix(LOOP, "top-k", k=4)
    with pytest.raises(TypeError, match="MarkovLM"):
        decoder_transition_matrix(object(), "greedy")
    with pytest.raises(ValueError, match="start_token"):
        termination_probability(LOOP, "greedy", start_token=3)
    with pytest.raises(ValueError, match="start_token"):
        exact_rnt_curve(LOOP, "greedy", start_token=-1, Ls=[1])
    with pytest.raises(ValueError, match="L must be >= 1"):
        exact_rnt_curve(LOOP, "greedy", start_token=0, Ls=[0, 1])
    with pytest.raises(ValueError, match="non-empty"):
        exact_rnt_curve(LOOP, "greedy", start_token=0, Ls=[])
    with pytest.raises(ValueError, match="probability distributions"):
        absorption_probabilities(torch.ones(3, 3), 2)
    with pytest.raises(ValueError, match="square"):
        expected_lengths(torch.ones(3, 2) / 2, 1)


def test_random_markov_lm_takes_any_real_temperature_and_refuses_bools_and_infinity():
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    for bad, error in ((True, TypeError), ("2", TypeError), (math.inf, ValueError), (math.nan, ValueError),
                       (0.0, ValueError), (-1.0, ValueError)):
        with pytest.raises(error, match="temperature"):
            random_markov_lm(4, temperature=bad, generator=g())
    # numpy floats are real numbers (np.float32(2.0) was refused), with the same table as 2.0 and 2
    want = random_markov_lm(4, temperature=2.0, generator=g()).transition_log_probs
    for same in (np.float32(2.0), np.float64(2.0), 2):
        assert torch.equal(random_markov_lm(4, temperature=same, generator=g()).transition_log_probs, want)
