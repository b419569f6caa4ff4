"""Tests of nmst_lib.theory: Welleck et al. (2020) Thm 3.4 construction, ST/NMST termination
bounds, and Choi, Cho, Lee (2023) Remark 1."""

from __future__ import annotations

import math
import random
import re
import signal
from decimal import Decimal, getcontext, localcontext
from functools import partial

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.decoding import decode, decoder_distribution
from nmst_lib.heads import STHead, eos_lower_bound
from nmst_lib.theory import (
    InconsistentRNN,
    beam_termination_bound,
    best_monotone_eos_probs,
    bounded_state_log_eos_floor,
    eos_log_likelihood,
    eos_rank_and_prob,
    first_step_eos_above_half,
    half_life_bound,
    inconsistent_rnn,
    monotone_violation,
    optimal_eos_probs,
    remark1_dataset,
)

V = 10  # vocabulary of the Theorem 3.4 model in these tests
STEPS = 300  # "never terminates" is checked over this many decoding steps


@pytest.fixture(scope="module")
def rnn() -> InconsistentRNN:
    return inconsistent_rnn(V, hidden_size=6, seed=3, device="cpu")


def _contexts(batch: int, k: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (batch, k), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- construction


def test_construction_matches_the_proof_block_structure_and_signs(rnn):
    d = rnn.hidden_size
    assert bool((rnn.W_h > 0).all()), "every entry of W_h is positive"
    assert bool((rnn.h_init > 0).all()), "h_0 = g(C) consists of positive values"
    U = rnn.output_embeddings
    assert U.shape == (V, d + V)
    ubar, second = U[:, :d], U[:, d:]
    non_eos = [v for v in range(V) if v != rnn.eos_id]
    assert bool((ubar[non_eos] > 0).all()), "ubar_v > 0 for non-eos tokens"
    assert bool((ubar[rnn.eos_id] < 0).all()), "ubar_eos < 0"
    assert torch.equal(second, torch.eye(V, dtype=U.dtype)), "u_v = [ubar_v ; e(v)]: one-hot second block"
    assert rnn.eos_id == V - 1 and rnn.vocab_size == V
    assert rnn.W_h.dtype == torch.float64


def test_step_is_the_proofs_block_diagonal_tanh_recurrence(rnn):
    d = rnn.hidden_size
    # the full recurrence matrix of the proof: [[W_h, 0], [0, I]]
    M = torch.zeros(d + V, d + V, dtype=torch.float64)
    M[:d, :d] = rnn.W_h
    M[d:, d:] = torch.eye(V, dtype=torch.float64)
    contexts = _contexts(4)
    state, _ = rnn.initial_state(contexts)
    tokens = torch.tensor([0, 3, V - 1, 5])
    new_state, log_probs = rnn.step(state, tokens)
    inputs = torch.zeros(4, d + V, dtype=torch.float64)
    inputs[torch.arange(4), d + tokens] = 1.0
    expected = torch.tanh(state @ M.T + inputs)
    torch.testing.assert_close(new_state, expected, rtol=0, atol=1e-15)
    logits = expected @ rnn.output_embeddings.T
    torch.testing.assert_close(log_probs, (logits.exp() / logits.exp().sum(-1, keepdim=True)).log())


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    vocab=st.integers(2, 12),
    hidden=st.integers(1, 6),
    data=st.data(),
)
def test_eos_logit_negative_non_eos_positive_along_any_prefix(seed, vocab, hidden, data):
    model = inconsistent_rnn(vocab, hidden, seed=seed, device="cpu")
    # arbitrary prefixes, eos included as an input: the margin must hold regardless
    tokens = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=40))
    context = data.draw(st.lists(st.integers(0, vocab - 1), min_size=0, max_size=5))
    state, _ = model.initial_state(torch.tensor([context], dtype=torch.long).reshape(1, len(context)))
    for token in tokens:
        logits = model.logits(state)[0]
        assert bool((model.W_h > 0).all())
        assert float(logits[model.eos_id]) < 0
        non_eos = torch.cat([logits[: model.eos_id], logits[model.eos_id + 1 :]])
        assert bool((non_eos > 0).all())
        assert bool((state[0, :hidden] >= model.min_h1).all()), "invariant h1_t >= m of the docstring"
        state, _ = model.step(state, torch.tensor([token]))


def test_greedy_never_terminates_and_eos_is_ranked_last_with_positive_probability(rnn):
    contexts = _contexts(8)
    gen = decode(rnn, contexts, "greedy", max_len=STEPS)
    assert not bool(gen.terminated.any())
    assert bool((gen.lengths == STEPS).all())
    trace = eos_rank_and_prob(rnn, contexts, gen.tokens)
    assert bool(trace.valid.all())
    assert bool((trace.rank == V).all()), "eos is ranked strictly last at every step"
    assert bool((trace.prob > 0).all()) and bool((trace.prob < 1 / V).all())


@pytest.mark.parametrize("k", [1, 2, V // 2, V - 1])
def test_top_k_never_terminates_for_k_up_to_V_minus_1(rnn, k):
    gen = decode(rnn, _contexts(16), "top-k", k=k, max_len=STEPS, generator=torch.Generator().manual_seed(k))
    assert not bool(gen.terminated.any())
    assert bool((gen.tokens != rnn.eos_id).all())


def test_top_k_with_k_equal_V_is_complete_and_can_terminate(rnn):
    # the boundary case: k = |V| is ancestral sampling, which does stop
    gen = decode(rnn, _contexts(64), "top-k", k=V, max_len=STEPS, generator=torch.Generator().manual_seed(0))
    assert bool(gen.terminated.any())


@pytest.mark.parametrize("p", [0.3, 0.8, 1 - 1 / V])
def test_nucleus_never_terminates_below_one_minus_max_eos_prob(rnn, p):
    contexts = _contexts(16)
    gen = decode(rnn, contexts, "nucleus", p=p, max_len=STEPS, generator=torch.Generator().manual_seed(1))
    assert not bool(gen.terminated.any())
    trace = eos_rank_and_prob(rnn, contexts, gen.tokens)
    # the premise of the test: p is below 1 - p(eos) all along the way
    assert p < 1 - float(trace.prob.max())


@pytest.mark.parametrize("beam_size", [1, 2, math.isqrt(V - 1), V - 1])
def test_beam_search_never_terminates_for_width_up_to_sqrt_V_minus_1_and_beyond(rnn, beam_size):
    # sqrt(|V| - 1) is the width of Choi et al. (2023), App. A.3; with the beam of Welleck
    # et al. Def. A.2 every width <= |V| - 1 works (see inconsistent_rnn's docstring)
    gen = decode(rnn, _contexts(3), "beam", beam_size=beam_size, max_len=STEPS)
    assert not bool(gen.terminated.any())
    assert bool((gen.lengths == STEPS).all())


def test_ancestral_and_consistent_top_k_terminate_for_some_rows(rnn):
    contexts = _contexts(64)
    anc = decode(rnn, contexts, "ancestral", max_len=STEPS, generator=torch.Generator().manual_seed(0))
    assert bool(anc.terminated.any())
    cons = decode(
        rnn, contexts, "top-k", k=2, consistent=True, max_len=STEPS, generator=torch.Generator().manual_seed(0)
    )
    assert bool(cons.terminated.any())


def test_eos_rank_and_prob_marks_steps_after_eos_and_pad_invalid(rnn):
    eos = rnn.eos_id
    tokens = torch.tensor([[1, eos, -1, -1], [2, 3, 4, 5], [eos, -1, -1, -1]])
    trace = eos_rank_and_prob(rnn, _contexts(3), tokens)
    expected_valid = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(trace.valid, expected_valid)
    assert bool(trace.prob[~expected_valid].isnan().all())
    assert bool((trace.rank[~expected_valid] == 0).all())
    # valid entries agree with the model's own step-by-step distribution
    state, lp = rnn.initial_state(_contexts(3)[1:2])
    manual = [lp[0, eos]]
    for tok in [2, 3, 4]:
        state, lp = rnn.step(state, torch.tensor([tok]))
        manual.append(lp[0, eos])
    torch.testing.assert_close(trace.log_prob[1], torch.stack(manual))


def test_eos_trace_gives_a_decoders_eos_probability_renormalised_over_its_candidates(rnn):
    """decoder_prob is q(eos) of the named decoder at each step: for consistent top-2 on a model
    that ranks eos last, p(eos) / (p(eos) + the two largest probabilities), written out here from
    the model's own step-by-step distribution; never below p(eos); NaN after the end."""
    eos = rnn.eos_id
    tokens = torch.tensor([[1, eos, -1, -1], [2, 3, 4, 5]])
    contexts = _contexts(2)
    top2 = partial(decoder_distribution, method="top-k", k=2, consistent=True, eos_id=eos)
    trace = eos_rank_and_prob(rnn, contexts, tokens, decoder=top2)
    assert eos_rank_and_prob(rnn, contexts, tokens).decoder_prob is None
    assert bool(trace.decoder_prob[~trace.valid].isnan().all())
    state, lp = rnn.initial_state(contexts[1:2])
    manual = []
    for t in range(4):
        p = lp[0].exp()
        manual.append(p[eos] / (p[eos] + p[:eos].topk(2).values.sum()))
        if t < 3:
            state, lp = rnn.step(state, tokens[1, t : t + 1])
    torch.testing.assert_close(trace.decoder_prob[1], torch.stack(manual).to(trace.decoder_prob.dtype))
    assert bool((trace.decoder_prob[trace.valid] >= trace.prob[trace.valid]).all())
    greedy = eos_rank_and_prob(rnn, contexts, tokens, decoder=partial(decoder_distribution, method="greedy"))
    assert bool((greedy.decoder_prob[greedy.valid] == 0).all())  # eos is ranked last: greedy never picks it


@pytest.mark.parametrize("decoder", ["top-k", {"method": "top-k", "k": 2}])
def test_eos_trace_refuses_a_decoder_that_is_not_a_function(rnn, decoder):
    with pytest.raises(TypeError, match="decoder must be a function from log-probabilities"):
        eos_rank_and_prob(rnn, _contexts(1), torch.tensor([[1, 2]]), decoder=decoder)


def test_inconsistent_rnn_rejects_bad_arguments():
    with pytest.raises(ValueError, match="vocab_size"):
        inconsistent_rnn(1)
    with pytest.raises(TypeError, match="vocab_size"):
        inconsistent_rnn(4.0)
    with pytest.raises(ValueError, match="hidden_size"):
        inconsistent_rnn(4, 0)
    with pytest.raises(ValueError, match="eos_margin"):
        inconsistent_rnn(4, eos_margin=0.5)
    with pytest.raises(ValueError, match="eos_id"):
        inconsistent_rnn(4, eos_id=4)
    with pytest.raises(TypeError, match="dtype"):
        inconsistent_rnn(4, dtype=torch.long)
    model = inconsistent_rnn(4, device="cpu")
    with pytest.raises(ValueError, match="token ids"):
        model.step(model.initial_state(torch.zeros(1, 1, dtype=torch.long))[0], torch.tensor([4]))
    with pytest.raises(ValueError, match="tokens"):
        eos_rank_and_prob(model, torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 2, 2, dtype=torch.long))


@pytest.mark.parametrize("margin, dtype, words", [(math.inf, torch.float64, "finite number >= 1"),
                                                   (math.nan, torch.float64, "finite number >= 1"),
                                                   (1e300, torch.float32, "too large for torch.float32")])
def test_inconsistent_rnn_refuses_an_eos_margin_that_is_not_finite_in_its_dtype(margin, dtype, words):
    # eos_margin = inf gave NaN parameters and log-probabilities
    with pytest.raises(ValueError, match=words):
        inconsistent_rnn(V, eos_margin=margin, dtype=dtype, device="cpu")
    big = inconsistent_rnn(V, eos_margin=1e30, dtype=torch.float32, device="cpu")
    state, log_probs = big.initial_state(_contexts(2))
    assert not bool(torch.isnan(log_probs).any())


def test_inconsistent_rnn_eos_id_can_be_any_token():
    model = inconsistent_rnn(6, eos_id=0, device="cpu")
    gen = decode(model, torch.ones(4, 2, dtype=torch.long), "greedy", max_len=50)
    assert not bool(gen.terminated.any())
    trace = eos_rank_and_prob(model, torch.ones(4, 2, dtype=torch.long), gen.tokens)
    assert bool((trace.rank == 6).all())


# --------------------------------------------------------------------------- Lemma 3.2: the floor xi


def _xi_by_hand(u, c, B, nu):
    """log xi of Lemma 3.2 written out: (1/|V|) exp(c_eos - c+ - 2 B max_v ||u_v||_nu*), eos last."""
    nu_star = math.inf if nu == 1 else 1.0 if nu == math.inf else nu / (nu - 1)
    rows = [[float(x) for x in row] for row in u]
    norm = (lambda r: max(abs(x) for x in r)) if nu_star == math.inf else (
        lambda r: sum(abs(x) ** nu_star for x in r) ** (1 / nu_star))
    return float(c[-1]) - max(float(x) for x in c) - 2 * B * max(norm(r) for r in rows) - math.log(len(rows))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), vocab=st.integers(2, 12), dim=st.integers(1, 6),
       nu=st.sampled_from([1.0, 1.5, 2.0, 3.0, math.inf]), B=st.floats(0.1, 5.0))
def test_bounded_state_floor_is_lemma_3_2s_xi_and_holds_for_every_state_in_the_ball(seed, vocab, dim, nu, B):
    """log xi equals the lemma's formula, and p(eos | h) >= xi for states on the boundary of the
    nu-ball of radius B (where the logits reach their extremes) and inside it."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(vocab, dim, generator=g, dtype=torch.float64)
    c = torch.randn(vocab, generator=g, dtype=torch.float64)
    log_xi = bounded_state_log_eos_floor(u, c, state_bound=B, nu=nu)
    assert log_xi == pytest.approx(_xi_by_hand(u, c, B, nu), rel=1e-12, abs=1e-12)
    h = torch.randn(256, dim, generator=g, dtype=torch.float64)
    h = B * h / torch.linalg.vector_norm(h, ord=nu, dim=1, keepdim=True)  # on the boundary
    h = torch.cat([h, h * torch.rand(256, 1, generator=g, dtype=torch.float64)])  # and inside
    log_p_eos = torch.log_softmax(h @ u.T + c, dim=1)[:, -1]
    assert bool((log_p_eos >= log_xi - 1e-12).all())


@pytest.mark.parametrize("vocab", [6, 100, 10_000])
def test_bounded_state_floor_nearly_binds_on_a_one_dimensional_model(vocab):
    """u_eos = -1, u_v = +1, c = 0, |h| <= 1: at h = 1, p(eos) = 1 / (1 + (|V| - 1) e^2) and
    xi = e^-2 / |V|, so p(eos) / xi = |V| e^2 / (1 + (|V| - 1) e^2) -> 1: the lemma's constant
    cannot be raised by more than this factor (1.17 at |V| = 6, 1.009 at 100)."""
    u = torch.ones(vocab, 1, dtype=torch.float64)
    u[-1] = -1.0
    log_xi = bounded_state_log_eos_floor(u, state_bound=1.0, nu=math.inf)
    log_p = torch.log_softmax(u[:, 0] * 1.0, dim=0)[-1].item()
    e2 = math.exp(2)
    assert log_p - log_xi == pytest.approx(math.log(vocab * e2 / (1 + (vocab - 1) * e2)), rel=1e-12)
    assert 0 < log_p - log_xi < math.log(1.2)


def test_bounded_state_floor_at_extreme_logits_and_in_float32():
    """|u| = 1e4 gives log xi near -2e4 (xi itself underflows float64; its log does not), and a
    float32 input gives the float64 value of the same numbers."""
    u = torch.tensor([[1e4, -1e4], [-1e4, 5.0], [3.0, 1e4]], dtype=torch.float32)
    log_xi = bounded_state_log_eos_floor(u, state_bound=1.0, nu=2.0)
    assert math.isfinite(log_xi) and math.exp(log_xi) == 0.0
    assert log_xi == pytest.approx(_xi_by_hand(u.double(), [0.0] * 3, 1.0, 2.0), rel=1e-12)
    assert log_xi == bounded_state_log_eos_floor(u.double(), state_bound=1.0, nu=2.0)
    eps_scale = bounded_state_log_eos_floor(u * 1e-9, state_bound=1.0)  # tiny logits: xi -> 1/|V|
    assert eps_scale == pytest.approx(-math.log(3), abs=1e-4)


def test_bounded_state_floor_eos_row_can_be_any_token():
    u = torch.tensor([[-1.0], [1.0], [1.0]])
    c = torch.tensor([0.5, 0.0, 0.0])
    assert bounded_state_log_eos_floor(u, c, state_bound=1.0, eos_id=0) == pytest.approx(0.5 - 0.5 - 2 - math.log(3))


@pytest.mark.parametrize("call, error, words", [
    (lambda: bounded_state_log_eos_floor([[1.0], [2.0]], state_bound=1.0), TypeError, "real tensor"),
    (lambda: bounded_state_log_eos_floor(torch.ones(1, 3), state_bound=1.0), TypeError, "|V| >= 2"),
    (lambda: bounded_state_log_eos_floor(torch.ones(3, 2, dtype=torch.long), state_bound=1.0), TypeError, "real"),
    (lambda: bounded_state_log_eos_floor(torch.ones(3, 2), torch.ones(2), state_bound=1.0), TypeError, "biases"),
    (lambda: bounded_state_log_eos_floor(torch.ones(3, 2), state_bound=0.0), ValueError, "state_bound"),
    (lambda: bounded_state_log_eos_floor(torch.ones(3, 2), state_bound=math.inf), ValueError, "state_bound"),
    (lambda: bounded_state_log_eos_floor(torch.ones(3, 2), state_bound=1.0, nu=0.5), ValueError, "Hölder"),
    (lambda: bounded_state_log_eos_floor(torch.ones(3, 2), state_bound=1.0, eos_id=3), ValueError, "eos_id"),
    (lambda: bounded_state_log_eos_floor(torch.full((3, 2), math.nan), state_bound=1.0), ValueError, "finite"),
])
def test_bounded_state_floor_rejects_bad_arguments_with_what_is_allowed(call, error, words):
    with pytest.raises(error, match=re.escape(words)):
        call()


# --------------------------------------------------------------------------- termination bounds

getcontext().prec = 60


def _decimal_half_life(eps: float) -> Decimal:
    # independent high-precision computation of B = -ln 2 / ln(1 - eps), eps taken exactly
    return -Decimal(2).ln() / (Decimal(1) - Decimal(eps)).ln()


def _decimal_first_step(eps: float) -> int:
    # smallest integer t with (1 - eps)^t < 1/2, by exact high-precision powers
    keep = Decimal(1) - Decimal(eps)
    t = int(_decimal_half_life(eps))  # floor(B), B > 0
    while t >= 1 and keep**t < Decimal("0.5"):
        t -= 1
    while not keep**t < Decimal("0.5"):
        t += 1
    return t


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(min_value=1e-7, max_value=0.999, allow_nan=False))
def test_half_life_bound_equals_minus_log2_over_log1p_minus_eps(eps):
    expected = float(_decimal_half_life(eps))
    assert half_life_bound(eps) == pytest.approx(expected, rel=1e-13)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(min_value=1e-6, max_value=0.999, allow_nan=False))
def test_first_step_is_where_the_lower_bound_first_exceeds_one_half(eps):
    t = first_step_eos_above_half(eps)
    assert t == _decimal_first_step(eps)
    assert t == math.floor(half_life_bound(eps)) + 1
    # f_lb(t) = 1 - (1 - eps)^t crosses 1/2 exactly at t (float64, log space)
    f_lb = lambda s: -math.expm1(s * math.log1p(-eps))  # noqa: E731
    assert f_lb(t) > 0.5
    assert t == 1 or f_lb(t - 1) <= 0.5


def test_bounds_at_eps_1e5_are_precise():
    eps = 1e-5
    B = half_life_bound(eps)
    assert B == pytest.approx(float(_decimal_half_life(eps)), rel=1e-14)
    # the float32 mistake the NOTES warn about would be far off
    naive32 = -math.log(2) / float(torch.log(torch.tensor(1 - eps, dtype=torch.float32)))
    assert abs(naive32 - B) > 50
    assert first_step_eos_above_half(eps) == _decimal_first_step(eps) == 69315


def _within_seconds(seconds: int, fn, *args):
    """``fn(*args)``, failing (not hanging) when it takes more than ``seconds`` (SIGALRM)."""
    def fail(signum, frame):
        raise TimeoutError(f"{fn.__name__}{args} took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        return fn(*args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _exact_half_life(eps: float) -> Decimal:
    # beta_eps = ln 2 / -ln(1 - eps) with eps taken exactly, at 800 digits: 1 - eps keeps every
    # digit of eps down to 1e-300 (60 digits, as above, would round 1 - 1e-300 to 1)
    with localcontext() as ctx:
        ctx.prec = 800
        return Decimal(2).ln() / -(Decimal(1) - Decimal(eps)).ln()


@pytest.mark.parametrize("eps", [1e-17, 1e-25, 1e-100, 1e-300, 1e-307])
def test_first_step_for_eps_beyond_float64_integers_finishes_and_agrees_with_the_closed_form(eps):
    # t_1/2 > 2^53 here: the old +-1 correction loops never moved t (eps = 1e-25 hung)
    t = _within_seconds(5, first_step_eos_above_half, eps)
    assert t > 2**53
    # the defining inequality in float64 holds at t and not at t - 1 (it is monotone in t)
    log_keep = math.log1p(-eps)
    assert t * log_keep < -math.log(2.0) <= (t - 1) * log_keep
    # the closed form floor(beta_eps) + 1, and the exact beta_eps, to float64's precision
    assert abs(t - (math.floor(half_life_bound(eps)) + 1)) <= 1e-15 * t
    exact = _exact_half_life(eps)
    assert abs(Decimal(t) - exact) <= Decimal("1e-15") * exact
    assert _within_seconds(5, beam_termination_bound, eps, 4) == t + 4


@pytest.mark.parametrize("eps", [1e-308, 3e-309, 5e-324])
def test_first_step_refuses_eps_whose_half_life_leaves_the_float64_range(eps):
    for fn, args in ((first_step_eos_above_half, (eps,)), (beam_termination_bound, (eps, 2))):
        with pytest.raises(ValueError, match=r"eps must be >= 1e-307.*largest float64"):
            _within_seconds(5, fn, *args)


def test_first_step_at_an_exact_half_is_the_next_step():
    # eps = 1/2: f_lb(1) = 1/2 exactly (not > 1/2), so the first step is 2
    assert half_life_bound(0.5) == 1.0
    assert first_step_eos_above_half(0.5) == 2


def test_first_step_agrees_with_heads_eos_lower_bound():
    heads = pytest.importorskip("nmst_lib.heads")
    for eps in (1e-5, 1e-4, 5e-4, 0.01, 0.3):
        t = first_step_eos_above_half(eps)
        steps = torch.tensor([t - 1, t], dtype=torch.float64)
        f = heads.eos_lower_bound(steps, eps)
        assert float(f[1]) > 0.5 and (t == 1 or float(f[0]) <= 0.5)


@given(eps=st.floats(min_value=1e-6, max_value=0.99), k=st.integers(1, 50))
def test_beam_termination_bound_is_t_half_plus_k(eps, k):
    assert beam_termination_bound(eps, k) == first_step_eos_above_half(eps) + k


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, float("nan")])
def test_bounds_reject_eps_outside_the_open_unit_interval(bad):
    for fn in (half_life_bound, first_step_eos_above_half):
        with pytest.raises(ValueError, match="eps"):
            fn(bad)
    with pytest.raises(ValueError, match="eps"):
        beam_termination_bound(bad, 2)


def test_bounds_reject_non_numbers_and_bad_beam_sizes():
    with pytest.raises(TypeError, match="eps"):
        half_life_bound("0.1")
    with pytest.raises(ValueError, match="beam_size"):
        beam_termination_bound(0.1, 0)
    with pytest.raises(TypeError, match="beam_size"):
        beam_termination_bound(0.1, 2.0)


@pytest.mark.parametrize("kind", ["STHead", "NMSTHead"])
@pytest.mark.parametrize("eps", [0.05, 0.2])
def test_st_and_nmst_heads_fix_the_theorem_3_4_model_within_the_bounds(kind, eps):
    # The experiment of Chapters 4 and 5: the Theorem 3.4 network, its softmax replaced by a
    # self-terminating head through nmst_lib.adapters.WithHead. Its eos logit is negative (it
    # never wants to stop). NMST reads that as a small weight lambda(t) on stopping; ST's sigmoid
    # is a probability to *continue*, so ST gets the negated eos logit (fed the raw one, it would
    # stop at step 1 and prove nothing). Gain 5 sharpens the non-eos softmax, so that one token
    # outranks eos until alpha_t is close to f_lb(t) = 1/2 and the greedy runs get long.
    heads = pytest.importorskip("nmst_lib.heads")
    from nmst_lib.adapters import WithHead

    base = inconsistent_rnn(V, seed=1, eos_margin=1.25, device="cpu")
    head = getattr(heads, kind)(eps, eos_id=base.eos_id)
    model = WithHead(base, head, negate_eos=kind == "STHead", gain=5.0)
    contexts = _contexts(8)
    t_half = first_step_eos_above_half(eps)
    greedy = decode(model, contexts, "greedy", max_len=4 * t_half)
    assert bool(greedy.terminated.all())
    assert int(greedy.lengths.max()) <= t_half  # Welleck Thm 4.2 / Choi Thm 3
    # not the trivial case: no greedy run stops at the first step
    assert int(greedy.lengths.min()) >= 2
    for k in (2, 3):
        beam = decode(model, contexts, "beam", beam_size=k, max_len=4 * t_half + k)
        assert bool(beam.terminated.all())
        assert int(beam.lengths.max()) <= beam_termination_bound(eps, k) - 1  # even the tight count


class _PeakedModel:
    """All non-eos mass on token 0 and eos logit +-50: p(eos at t) equals f_lb(t) up to e^-50
    under ST (sigma(+50) ~ 1) and NMST (sigma(-50) ~ 0), so greedy meets the bound exactly."""

    def __init__(self, head, eos_logit, vocab=4):
        self.head, self.vocab_size, self.eos_id = head, vocab, vocab - 1
        self.logits = torch.full((vocab,), -1000.0, dtype=torch.float64)
        self.logits[0], self.logits[self.eos_id] = 0.0, eos_logit

    def _out(self, head_state):
        return self.head.step(self.logits.expand(head_state.shape[0], -1), head_state)

    def initial_state(self, contexts):
        log_probs, state = self._out(self.head.initial_step_state(contexts.shape[0], contexts.device))
        return state, log_probs

    def step(self, state, tokens):
        log_probs, state = self._out(state)
        return state, log_probs

    def select(self, state, index):
        return state[index]


@pytest.mark.parametrize("kind,eos_logit", [("STHead", 50.0), ("NMSTHead", -50.0)])
@pytest.mark.parametrize("eps", [0.01, 0.05, 0.2, 0.3])  # f_lb(t) is not within rounding of 1/2 here
def test_greedy_stops_exactly_at_the_first_step_eos_above_half_when_the_bound_is_tight(kind, eos_logit, eps):
    heads = pytest.importorskip("nmst_lib.heads")
    model = _PeakedModel(getattr(heads, kind)(eps, eos_id=3), eos_logit)
    t_half = first_step_eos_above_half(eps)
    gen = decode(model, torch.zeros(2, 1, dtype=torch.long), "greedy", max_len=t_half + 5)
    # eos beats token 0 exactly when f_lb(t) > 1 - f_lb(t): not one step earlier or later
    assert gen.lengths.tolist() == [t_half, t_half]
    assert bool(gen.terminated.all())


# --------------------------------------------------------------------------- where the beam bound binds


class _PrefixSTModel:
    """An ST language model whose logits are a function ``logits_of(prefix)`` of the continuation so far,
    turned into log-probabilities by the library's ST layer (``STHead.step``). It records every prefix it
    is asked to continue: beam search asks for the prefixes of length t - 1 exactly when it ranks the
    expansions of step t, so :meth:`last_step` is the step at which the search stopped."""

    def __init__(self, eps, logits_of, vocab_size=3):
        self.vocab_size, self.eos_id = vocab_size, vocab_size - 1
        self.head, self.logits_of = STHead(eps, eos_id=self.eos_id), logits_of
        self.seen = []  # (prefix, log-probabilities of its next token)

    def _out(self, prefixes, head_state):
        logits = torch.tensor([self.logits_of(p) for p in prefixes], dtype=torch.float64)
        log_probs, head_state = self.head.step(logits, head_state)
        self.seen.extend(zip(prefixes, log_probs))
        return log_probs, head_state

    def initial_state(self, contexts):
        prefixes = [()] * contexts.shape[0]
        head_state = self.head.initial_step_state(len(prefixes)).double()
        log_probs, head_state = self._out(prefixes, head_state)
        return (prefixes, head_state), log_probs

    def step(self, state, tokens):
        prefixes, head_state = state
        prefixes = [p + (int(v),) for p, v in zip(prefixes, tokens)]
        log_probs, head_state = self._out(prefixes, head_state)
        return (prefixes, head_state), log_probs

    def select(self, state, index):
        prefixes, head_state = state
        return [prefixes[i] for i in index.tolist()], head_state[index]

    def last_step(self) -> int:
        return max(len(p) for p, _ in self.seen) + 1

    def eos_above_floor_everywhere(self, eps) -> bool:
        # Prop. 4.1, part 3: alpha_t > f_lb(t) after every prefix; strict here, not up to rounding,
        # because the eos logits below stay at or under 20 (sigma(20) = 1 - 2e-9)
        return all(float(lp[self.eos_id]) > math.log(eos_lower_bound(len(p) + 1, eps)) for p, lp in self.seen)


# ST multiplies 1 - alpha by sigma(z_eos) each step, so a LARGE eos logit resists stopping: sigma(20) = 1 - 2e-9
# keeps alpha_t just above its floor f_lb(t) (a very negative one would give alpha_1 ~ 1)
_Z_EOS = 20.0


def _gap_model(eps, gap, later):
    """Tokens A = 0, B = 1, eos = 2. Step 1 splits the non-eos mass between A and B with log-odds ``gap``;
    after that every prefix gets the logits ``(*later, _Z_EOS)``. The logits depend on the step alone,
    so all live prefixes (of equal length) share alpha_t."""
    return _PrefixSTModel(eps, lambda p: (gap, 0.0, _Z_EOS) if not p else (*later, _Z_EOS))


def _beam_stop(model, k, max_len):
    gen = decode(model, torch.zeros(1, 1, dtype=torch.long), "beam", beam_size=k, max_len=max_len)
    return model.last_step(), gen


def _gap_window(eps):
    """(lo, hi): the k = 2 model of ``_gap_model(eps, D, (0, -30))`` runs to t_1/2 + 1 iff lo < D < hi."""
    t_half = first_step_eos_above_half(eps)
    p_big, p_small = eos_lower_bound(t_half, eps), eos_lower_bound(t_half - 1, eps)
    return math.log(p_big / (1 - p_big)), math.log((1 - p_small) / p_small)


@pytest.mark.parametrize("eps,k,gap,later", [
    (0.05, 2, 0.051, (0.0, -30.0)),  # window (0.0493, 0.0534)
    (0.1, 2, 0.1, (0.0, -30.0)),  # window (0.0869, 0.1259)
    (0.6, 3, 3.0, (0.0, 0.0)),  # t_1/2 = 1: k = 3 cannot bind for eps <= 1/2 (docstring)
])
def test_beam_search_bound_t_half_plus_k_minus_1_is_attained(eps, k, gap, later):
    r"""Thm 4.3 (Chapter 4): beam search of width k stops within t_1/2 + k - 1 steps on every ST
    model; on these it stops exactly then. Write P_t = f_lb(t), Q_t = 1 - P_t, P = P_{t_1/2},
    Q = Q_{t_1/2}, T = t_1/2 - 1; alpha_t is within 1e-8 of P_t here.

    k = 2: step 1 keeps A and B with score gap D = ``gap``; each then continues with A (B's logit
    -30), so the gap stays D. At step 1 B's share (1 - eps) / (1 + e^D) beats eps; at every step
    2 <= t <= T the two continuations beat the leader's eos iff D < log(Q_t / P_t), tightest at
    t = T: no finish before t_1/2. At t_1/2 the leader's eos comes
    first and its continuation beats the trailer's eos iff D > log(P / Q): one finish and one live
    prefix, whose eos is the second finish, at t_1/2 + 1. That window is empty for some eps (next
    test).

    k = 3 never binds when eps <= 1/2, on any ST model. It needs no finish before t_1/2 and one each
    at t_1/2 and t_1/2 + 1. At step T >= 1 each of the three kept prefixes scores at most its
    parent's score + log(1 - alpha) and above every parent's eos expansion, so any two differ by
    less than log(Q_T / P_T). From t_1/2 on a prefix's eos beats its own children, so a kept child
    has its parent's eos kept: with one finish at t_1/2, both kept children u_1, u_2 have one
    parent r, and each beats the eos of another prefix, so its share c_i of 1 - alpha(r) exceeds
    R = (P / Q)(P_T / Q_T). At t_1/2 + 1 the u_i whose eos is kept keeps two children too, the
    smaller at most half of 1 - alpha <= Q_{t_1/2+1}, above the other's eos (> 1/2), so
    c_i / c_j > 2; with c_1 + c_2 <= 1 that forces R < 1/3. But R > P_T / Q_T > 1 - 2 eps, so
    eps > 1/3, then t_1/2 = 2 and R = eps^2 (2 - eps) / (1 - eps)^3 >= 5/8. With eps > 1/2
    (t_1/2 = 1) there is no step T: step 1 keeps all three children of the context, eos, A and B
    (gap 3); at step 2 A's eos and both of A's children (shares 1/2) beat B's eos, since
    e^3 > 2 alpha_2 / (1 - alpha_2) = 10.5; step 3 finishes the third.
    """
    t_half = first_step_eos_above_half(eps)
    bound = t_half + k - 1
    assert bound == beam_termination_bound(eps, k) - 1  # the chapter's count, one below the papers'
    # a step limit well past the bound, so that it is not what stops the search
    model = _gap_model(eps, gap, later)
    stop, gen = _beam_stop(model, k, max_len=bound + 10)
    assert stop == bound
    assert gen.first_finish_steps.tolist() == [t_half]  # nothing finished before t_1/2
    assert bool(gen.terminated.all())
    # every finished sequence entered at the step equal to its length, at the latest `stop`;
    # the returned one is the first, the most probable
    assert gen.lengths.tolist() == [t_half]
    assert model.eos_above_floor_everywhere(eps)


def test_beam_width_2_runs_to_t_half_plus_1_exactly_when_the_gap_is_inside_the_window():
    r"""The k = 2 construction above for eps with t_1/2 = 3, 5, 8, 13, and gaps D on both sides of
    each edge of the window (lo, hi) of ``_gap_window``: the search stops at t_1/2 + 1 exactly when
    lo < D < hi, never later (Thm 4.3). Otherwise it stops by t_1/2: at or below lo both eos
    expansions are kept at t_1/2; above hi the leader's eos is kept at some step before t_1/2.

    The window is open iff P P_T < Q Q_T, i.e. (1 - eps)^T > 1 / (2 - eps), i.e. floor(beta_eps) <
    beta_eps log2(2 - eps): roughly, iff the fractional part of beta_eps exceeds 1/2. When it is
    empty no ST model at all reaches t_1/2 + 1 with k = 2 (t_1/2 >= 2): at step T the two kept
    prefixes beat every parent's eos, so their gap is below log(Q_T / P_T) = hi, and at t_1/2 the
    leader's kept child (at most 1 - alpha <= Q) beats the trailer's eos (at least P): gap above lo.
    """
    seen = set()
    for beta in (2.2, 2.8, 4.2, 4.8, 7.2, 7.8, 12.2, 12.8):
        eps = -math.expm1(-math.log(2.0) / beta)  # beta_eps = beta
        t_half = first_step_eos_above_half(eps)
        lo, hi = _gap_window(eps)
        beta_eps = half_life_bound(eps)
        assert (lo < hi) == (math.floor(beta_eps) < beta_eps * math.log2(2 - eps)) == (beta % 1 > 0.5)
        seen.add(lo < hi)
        gaps = [0.0, lo - 1e-4, lo + 1e-4, (lo + hi) / 2, hi - 1e-4, hi + 1e-4, 2 * hi]
        for gap in gaps:
            model = _gap_model(eps, gap, (0.0, -30.0))
            stop, gen = _beam_stop(model, 2, max_len=t_half + 10)
            first_finish = int(gen.first_finish_steps[0])
            if lo < gap < hi:
                assert (stop, first_finish) == (t_half + 1, t_half), (eps, gap)
            elif gap < hi:  # gap <= lo: both eos expansions kept at t_1/2
                assert (stop, first_finish) == (t_half, t_half), (eps, gap)
            else:  # the leader's eos kept before t_1/2
                assert stop <= t_half and first_finish < t_half, (eps, gap)
            assert bool(gen.terminated.all()) and model.eos_above_floor_everywhere(eps)
    assert seen == {True, False}


def _random_logits(seed):
    """Logits drawn afresh for every prefix (three non-eos tokens with spread 3, eos logit in [5, 20]),
    the same ones whenever the same prefix comes back."""
    def logits_of(prefix):
        rng = random.Random(f"{seed}:{prefix}")
        return (*(rng.gauss(0.0, 3.0) for _ in range(3)), rng.uniform(5.0, 20.0))
    return logits_of


def test_beam_search_stops_within_t_half_plus_k_minus_1_on_random_st_models_and_width_3_by_t_half_plus_1():
    r"""Thm 4.3 on random ST models whose logits depend on the whole prefix, k = 1..4: the search
    never runs past t_1/2 + k - 1. With k = 3 and eps <= 1/2 it never runs past t_1/2 + 1 either
    (the impossibility argued in ``test_beam_search_bound_t_half_plus_k_minus_1_is_attained``),
    though some of these models take it that far, to the edge of the claim."""
    width_3_at_edge = 0
    for seed in range(48):
        eps, k = (0.1, 0.2, 0.3, 0.45)[seed % 4], 1 + seed // 4 % 4
        model = _PrefixSTModel(eps, _random_logits(seed), vocab_size=4)
        t_half = first_step_eos_above_half(eps)
        stop, gen = _beam_stop(model, k, max_len=t_half + k + 5)
        assert stop <= t_half + k - 1 and bool(gen.terminated.all()), (seed, eps, k, stop)
        assert model.eos_above_floor_everywhere(eps)
        if k == 3:
            assert stop <= t_half + 1, (seed, eps, stop)
            width_3_at_edge += stop == t_half + 1
    assert width_3_at_edge >= 2


# --------------------------------------------------------------------------- Remark 1


def _brute_force_optimal_eos(sequences, counts, path):
    # the empirical conditional p(eos | path_<t), by plain counting over token strings
    out = []
    for t in range(len(path)):
        sharing = [(s, c) for s, c in zip(sequences, counts) if list(s[:t]) == list(path[:t]) and len(s) > t]
        total = sum(c for _, c in sharing)
        out.append(sum(c for s, c in sharing if s[t] == "<eos>") / total)
    return out


def test_remark1_dataset_matches_the_paper():
    data = remark1_dataset()
    short, long = data.sequences
    assert " ".join(short) == "I am a boy <eos>"
    assert " ".join(long) == "I am a boy , and you are a girl . <eos>"
    assert data.counts == (1, 1)
    assert data.vocab[data.eos_id] == "<eos>" and data.eos_id == data.vocab_size - 1
    # Remark 1's assumptions: shared prefix y_<t0 and t0 = |y1| < |y2| - 1
    t0 = len(short)
    assert short[: t0 - 1] == long[: t0 - 1] and t0 < len(long) - 1
    ids = data.token_ids()
    assert ids.shape == (2, len(long)) and int(ids[0, t0]) == -1


def test_optimal_eos_probs_follow_remark1():
    data = remark1_dataset()
    p = optimal_eos_probs(data)
    t0 = len(data.sequences[0])
    # eqs. 20-22 of Choi et al. (2023): 0 before t0, 1/2 at t0, 0 after, and 1 at the end
    expected = [0.0] * (t0 - 1) + [0.5] + [0.0] * (len(data.sequences[1]) - t0 - 1) + [1.0]
    assert p.tolist() == expected
    assert p.tolist() == _brute_force_optimal_eos(data.sequences, data.counts, data.sequences[1])
    assert float(monotone_violation(p)) == 0.5


@given(c1=st.integers(1, 20), c2=st.integers(1, 20))
def test_optimal_eos_probs_with_unequal_counts_match_counting(c1, c2):
    data = remark1_dataset((c1, c2))
    p = optimal_eos_probs(data)
    assert p.tolist() == pytest.approx(_brute_force_optimal_eos(data.sequences, data.counts, data.sequences[1]))
    assert float(monotone_violation(p)) == pytest.approx(c1 / (c1 + c2))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), eps=st.sampled_from([1e-5, 1e-3, 0.1]))
def test_every_st_model_has_monotone_eos_probs(seed, eps):
    heads = pytest.importorskip("nmst_lib.heads")
    g = torch.Generator().manual_seed(seed)
    logits = 4 * torch.randn(3, 12, 5, generator=g, dtype=torch.float64)  # [B, T, V], steps along dim -2
    st_eos = heads.st_log_probs(logits, eos_id=4, eps=eps)[..., 4].exp()
    assert bool((monotone_violation(st_eos) == 0).all())
    # strictly increasing where p(eos) is not yet within rounding of 1
    unsaturated = st_eos[:, 1:] < 1 - 1e-12
    assert bool((st_eos[:, 1:] > st_eos[:, :-1])[unsaturated].all())


def test_nmst_can_represent_the_remark1_optimum_up_to_its_lower_bound():
    heads = pytest.importorskip("nmst_lib.heads")
    data = remark1_dataset()
    target = optimal_eos_probs(data)
    # eos logit +-30: sigma ~ 1 where the data stops, ~ 0 where it goes on
    eos_logit = torch.where(target > 0.75, 30.0, torch.where(target > 0.25, 0.0, -30.0)).double()
    logits = torch.zeros(1, target.numel(), data.vocab_size, dtype=torch.float64)
    logits[0, :, data.eos_id] = eos_logit
    p = heads.nmst_log_probs(logits, eos_id=data.eos_id, eps=1e-5)[0, :, data.eos_id].exp()
    assert float(monotone_violation(p)) > 0.49
    torch.testing.assert_close(p, target, atol=1e-3, rtol=0)


def test_best_monotone_fit_is_one_eighth_after_boy():
    # maximise log q + 7 log(1 - q) (one stop and seven go decisions pooled from t0 on,
    # since monotonicity forces p_t >= p_t0 afterwards): q = 1/8
    data = remark1_dataset()
    fit = best_monotone_eos_probs(data)
    t0 = len(data.sequences[0])
    expected = [0.0] * (t0 - 1) + [1 / 8] * (len(data.sequences[1]) - t0) + [1.0]
    torch.testing.assert_close(fit, torch.tensor(expected, dtype=torch.float64))
    assert float(monotone_violation(fit)) == 0
    assert eos_log_likelihood(data, fit) < eos_log_likelihood(data, optimal_eos_probs(data))
    assert eos_log_likelihood(data, optimal_eos_probs(data)) == pytest.approx(2 * math.log(0.5))


@settings(max_examples=60, deadline=None)
@given(
    c1=st.integers(1, 5),
    c2=st.integers(1, 5),
    increments=st.lists(st.floats(0, 1), min_size=12, max_size=12),
)
def test_best_monotone_fit_beats_every_other_monotone_sequence(c1, c2, increments):
    data = remark1_dataset((c1, c2))
    fit = best_monotone_eos_probs(data)
    other = torch.tensor(increments, dtype=torch.float64).cumsum(0)
    other = other / max(1.0, float(other[-1]))  # non-decreasing in [0, 1]
    assert float(monotone_violation(fit)) == 0
    assert eos_log_likelihood(data, other) <= eos_log_likelihood(data, fit) + 1e-12


def test_remark1_helpers_reject_bad_input():
    with pytest.raises(ValueError, match="counts"):
        remark1_dataset((1, 0))
    with pytest.raises(ValueError, match="counts"):
        remark1_dataset((1, 2, 3))
    data = remark1_dataset()
    with pytest.raises(ValueError, match="shape"):
        eos_log_likelihood(data, torch.zeros(3))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        eos_log_likelihood(data, torch.full((12,), 1.5))
    with pytest.raises(ValueError, match="leaves the data"):
        optimal_eos_probs(data, data.encode(["I", "am", "girl", "."]))
    with pytest.raises(ValueError, match="vocabulary"):
        data.encode(["cat"])
    with pytest.raises(ValueError, match="eos_probs"):
        monotone_violation(torch.tensor(0.5))


def test_optimal_eos_probs_refuses_a_path_that_is_not_a_1d_integer_tensor():
    data = remark1_dataset()
    for bad in ([1, 2], torch.tensor([1.0, 2.0]), torch.tensor([[1, 2]]), torch.tensor([], dtype=torch.long)):
        with pytest.raises(TypeError, match="path must be a non-empty 1-D integer tensor"):
            optimal_eos_probs(data, bad)  # a list was an AttributeError
    assert optimal_eos_probs(data, data.longest()).tolist() == optimal_eos_probs(data).tolist()


def test_eos_probabilities_refuse_an_empty_trajectory():
    from nmst_lib.theory import eos_probabilities

    with pytest.raises(ValueError, match="eos_logits is empty"):
        eos_probabilities(torch.zeros(0, dtype=torch.float64), 0.1)  # IndexError before


# --------------------------------------------------------------------------- nmst_lib.theory.beam_bound


@pytest.mark.parametrize("head", ["st", "nmst"])
@pytest.mark.parametrize("eps", [0.05, 0.1])
def test_the_library_model_makes_beam_width_2_stop_at_exactly_t_half_plus_1(head, eps):
    """Chapter 4's beam theorem (and Chapter 5's part 2) is attained with k = 2: the search on
    ``beam_attaining_model`` stops at t_1/2 + 1 steps, one finished sequence entering at t_1/2 and
    one at t_1/2 + 1, for both layers; the same gap on the tests' own prefix model agrees."""
    from nmst_lib.theory import beam_attaining_model, beam_gap_window

    t_half = first_step_eos_above_half(eps)
    model = beam_attaining_model(eps, head)
    lo, hi = beam_gap_window(eps)
    assert lo < model.gap < hi
    gen = decode(model, torch.zeros(3, 1, dtype=torch.long), "beam", beam_size=2, max_len=t_half + 10)
    assert model.last_step == t_half + 1 == beam_termination_bound(eps, 2) - 1  # the chapter's count
    assert gen.first_finish_steps.tolist() == [t_half] * 3 and bool(gen.terminated.all())
    assert gen.lengths.tolist() == [t_half] * 3  # the returned (best) one is the first finished
    greedy = decode(model, torch.zeros(1, 1, dtype=torch.long), "greedy", max_len=t_half + 10)
    assert greedy.lengths.tolist() == [t_half]  # and greedy search meets its own bound
    if head == "st":  # an independent model with the same logits stops at the same step
        other = _gap_model(eps, model.gap, (0.0, -30.0))
        assert _beam_stop(other, 2, max_len=t_half + 10)[0] == t_half + 1


def test_the_beam_window_is_empty_where_no_model_attains_the_bound_and_bad_input_is_refused():
    from nmst_lib.theory import (
        SplitFirstStepModel,
        beam_attaining_model,
        beam_gap_window,
    )

    eps = -math.expm1(-math.log(2.0) / 4.2)  # beta_eps = 4.2: fractional part below 1/2
    lo, hi = beam_gap_window(eps)
    assert lo >= hi
    with pytest.raises(ValueError, match="window of first-step log-odds"):
        beam_attaining_model(eps)
    with pytest.raises(ValueError, match="eps must be at most 1/2"):
        beam_gap_window(0.6)
    with pytest.raises(ValueError, match="head must be 'st' or 'nmst'"):
        SplitFirstStepModel(0.05, 0.05, head="vanilla")
    with pytest.raises(ValueError, match="gap must be a finite number"):
        SplitFirstStepModel(0.05, float("nan"))
