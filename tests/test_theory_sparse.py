"""Tests for Chapter 8's termination results (08_sparse) in nmst_lib.theory: the entmax support
gap (:func:`entmax_eos_gap`, :func:`entmax_excludes`), the construction whose entmax layer gives
eos probability zero at every step (:func:`eos_outside_support_model`), and the termination of
the softmax and NMST-entmax layers on the same scores
(:func:`nmst_sampling_nontermination_bound`)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.decoding import LanguageModel, decode
from nmst_lib.entmax import entmax
from nmst_lib.heads import (
    EntmaxHead,
    NMSTEntmaxHead,
    VanillaHead,
    eos_lower_bound,
)
from nmst_lib.theory import (
    EosOutsideSupportModel,
    entmax_eos_gap,
    entmax_excludes,
    eos_outside_support_model,
    eos_rank_and_prob,
    nmst_sampling_nontermination_bound,
)

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def contexts(vocab_size=8, repeats=30):
    return torch.arange(vocab_size - 1).repeat(repeats)[:, None]


def r_nt(gen, L):
    return float((gen.first_finish_steps > L).double().mean())


# --------------------------------------------------------------------------- the gap


def test_entmax_eos_gap_is_one_over_alpha_minus_one():
    assert entmax_eos_gap(2.0) == 1.0 and entmax_eos_gap(1.5) == 2.0 and entmax_eos_gap(1.25) == 4.0
    assert entmax_eos_gap(1.0) == math.inf
    with pytest.raises(ValueError, match="alpha"):
        entmax_eos_gap(0.9)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), alpha=st.floats(1.05, 3.0), excess=st.floats(0.0, 2.0),
       vocab=st.integers(2, 30), scale=st.sampled_from([0.1, 1.0, 10.0]))
def test_a_gap_of_one_over_alpha_minus_one_gives_probability_exactly_zero(seed, alpha, excess, vocab, scale):
    z = torch.randn(vocab, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale
    others = z[:-1]
    z[-1] = others.max() - entmax_eos_gap(alpha) * (1 + excess) - 1e-9 * (1 + abs(float(others.max())))
    assert bool(entmax_excludes(z, vocab - 1, alpha))
    assert float(entmax(z, alpha)[-1]) == 0.0


@pytest.mark.parametrize("alpha", [1.2, 1.5, 2.0])
def test_the_gap_is_tight_when_the_best_token_takes_all_the_mass(alpha):
    # the best token alone (others far below): tau = (alpha - 1) z_max - 1, and eos just inside the gap survives
    gap = entmax_eos_gap(alpha)
    z = torch.tensor([0.0, -1e3, -1e3, -(gap - 1e-3)], dtype=F64)
    assert not bool(entmax_excludes(z, 3, alpha)) and float(entmax(z, alpha)[3]) > 0
    z[3] = -(gap + 1e-3)
    assert bool(entmax_excludes(z, 3, alpha)) and float(entmax(z, alpha)[3]) == 0


@pytest.mark.parametrize("alpha", [1.25, 1.5, 2.0, 3.0])
def test_a_gap_of_exactly_one_over_alpha_minus_one_gives_probability_zero(
    alpha,
):
    """The proposition's condition z_max - z_v >= 1/(alpha - 1) includes
    equality, and so must entmax_excludes' criterion (alpha - 1) z_v <= tau:
    the top token takes all the mass, tau = (alpha - 1) z_max - 1 and
    (alpha - 1) z_v = tau exactly (every number here is exact in float64).
    The tests above keep a margin (1e-9, 1e-3) on the gap, where a strict
    '<' in the criterion passes as well."""
    gap = entmax_eos_gap(alpha)
    for top in (0.0, 3.0, -8.0):
        z = torch.tensor([top, top - gap, top - 4 * gap], dtype=F64)
        assert float(entmax(z, alpha)[1]) == 0.0
        assert bool(entmax_excludes(z, 1, alpha))
    # one ulp inside the gap, the token is in the support
    inside = math.nextafter(-gap, math.inf)
    z = torch.tensor([0.0, inside, -4 * gap], dtype=F64)
    assert float(entmax(z, alpha)[1]) > 0.0
    assert not bool(entmax_excludes(z, 1, alpha))
    # with z_max != 0 too: the criterion is decided in entmax's shifted
    # coordinates (deciding it against tau moved back to z's coordinates
    # excluded z = (3, 2.5 + ulp, 1) at alpha = 3, where entmax gives ~1e-8)
    for top in (3.0, -8.0, 1e3):
        z = torch.tensor([top, math.nextafter(top - gap, math.inf),
                          top - 4 * gap], dtype=F64)
        positive = float(entmax(z, alpha)[1]) > 0.0
        assert bool(entmax_excludes(z, 1, alpha)) == (not positive)
    z = torch.tensor([3.0, math.nextafter(2.5, math.inf), 1.0], dtype=F64)
    assert float(entmax(z, 3.0)[1]) > 0.0
    assert not bool(entmax_excludes(z, 1, 3.0))


@pytest.mark.parametrize("alpha", [1.0, 1.3, 1.5, 2.0, 2.5])
def test_entmax_excludes_is_exactly_the_zero_pattern_of_entmax(alpha):
    z = torch.randn(40, 12, generator=torch.Generator().manual_seed(1), dtype=F64) * 2
    z[0, 3] = -math.inf
    zeros = entmax(z, alpha, dim=-1) == 0
    excluded = torch.stack([entmax_excludes(z, i, alpha) for i in range(12)], dim=-1)
    assert excluded.shape == (40, 12)
    assert torch.equal(excluded, zeros)
    if alpha > 1:
        assert bool(zeros.any()) and not bool(zeros.all(-1).any())
    # any dim
    assert torch.equal(entmax_excludes(z.T, 5, alpha, dim=0), excluded[:, 5])


def test_entmax_excludes_checks_its_arguments():
    with pytest.raises(TypeError, match="floating-point"):
        entmax_excludes(torch.zeros(3, dtype=torch.long), 0, 1.5)
    with pytest.raises(ValueError, match="index"):
        entmax_excludes(torch.zeros(3), 3, 1.5)
    with pytest.raises(ValueError, match="alpha"):
        entmax_excludes(torch.zeros(3), 0, 0.5)


# --------------------------------------------------------------------------- the construction


@pytest.mark.parametrize("alpha", [1.2, 1.5, 2.0])
def test_the_construction_keeps_eos_outside_the_entmax_support_after_every_token(alpha):
    model = eos_outside_support_model(8, alpha, device="cpu")
    assert isinstance(model, EosOutsideSupportModel) and isinstance(model, LanguageModel)
    assert model.eos_id == 7 and model.vocab_size == 8 and isinstance(model.head, EntmaxHead)
    assert model.min_gap >= entmax_eos_gap(alpha)
    assert bool(entmax_excludes(model.scores, 7, alpha).all())
    state, log_probs = model.initial_state(torch.arange(8)[:, None])
    assert bool((log_probs[:, 7] == -math.inf).all())
    for _ in range(3):
        state, log_probs = model.step(state, torch.arange(8))
        assert bool((log_probs[:, 7] == -math.inf).all())
        assert (log_probs.exp().sum(-1) - 1).abs().max() < 1e-12
    assert model.min_softmax_eos_prob > 0


@pytest.mark.parametrize("alpha", [1.5, 2.0])
def test_entmax_sampling_never_terminates_on_the_construction(alpha):
    # ancestral sampling of the entmax model = entmax sampling of its scores: r_nt(L) = 1 at L = 200
    ctx = contexts()
    entmax_model = eos_outside_support_model(8, alpha, device="cpu")
    softmax_model = eos_outside_support_model(8, alpha, head="vanilla", device="cpu")
    own = decode(entmax_model, ctx, "ancestral", max_len=200, generator=torch.Generator().manual_seed(2))
    via_decoder = decode(softmax_model, ctx, "entmax", alpha=alpha, max_len=200,
                         generator=torch.Generator().manual_seed(2))
    for gen in (own, via_decoder):
        assert r_nt(gen, 200) == 1.0 and not bool(gen.terminated.any())
        assert bool((gen.lengths == 200).all()) and bool(torch.isfinite(gen.scores).all())
    # entmax is shift-invariant: the two are the same decoder, draw for draw
    assert torch.equal(own.tokens, via_decoder.tokens)


def test_no_decoder_terminates_on_the_entmax_construction():
    model = eos_outside_support_model(8, 1.5, device="cpu")
    ctx = contexts(repeats=4)
    for method, kw in (("greedy", {}), ("top-k", {"k": 3}), ("top-k", {"k": 3, "consistent": True}),
                       ("nucleus", {"p": 0.9}), ("nucleus", {"p": 0.9, "consistent": True}),
                       ("nucleus", {"p": 1.0}), ("ancestral", {"temperature": 5.0}), ("entmax", {"alpha": 1.2}),
                       ("beam", {"beam_size": 4})):
        gen = decode(model, ctx, method, max_len=60, generator=torch.Generator().manual_seed(3), **kw)
        assert not bool(gen.terminated.any()), method


def test_softmax_ancestral_sampling_on_the_same_scores_terminates():
    model = eos_outside_support_model(8, 1.5, head="vanilla", device="cpu")
    c = model.min_softmax_eos_prob
    assert c > 0.005  # precondition for the step limit below: (1 - c)^3000 < 1e-6
    gen = decode(model, contexts(), "ancestral", max_len=3000, generator=torch.Generator().manual_seed(4))
    assert bool(gen.terminated.all())
    n = gen.lengths.numel()
    for L in (10, 50, 100, 200):
        bound = (1 - c) ** L
        assert r_nt(gen, L) <= bound + 5 * math.sqrt(bound * (1 - bound) / n) + 1e-12, L


def test_nmst_entmax_on_the_same_scores_terminates_by_the_nmst_bound():
    eps = 0.05
    model = eos_outside_support_model(8, 1.5, head="nmst-entmax", eps=eps, device="cpu")
    assert isinstance(model.head, NMSTEntmaxHead)
    ctx = contexts(repeats=60)
    gen = decode(model, ctx, "ancestral", max_len=200, generator=torch.Generator().manual_seed(5))
    assert bool(gen.terminated.all())
    n = gen.lengths.numel()
    for L in (1, 3, 5, 8):
        bound = nmst_sampling_nontermination_bound(eps, L)
        assert r_nt(gen, L) <= bound + 5 * math.sqrt(bound * (1 - bound) / n) + 1e-12, L
    assert nmst_sampling_nontermination_bound(eps, 40) < 1e-17
    # along the sampled paths p(eos at t) is never below the floor 1 - (1 - eps)^t
    trace = eos_rank_and_prob(model, ctx, gen.tokens)
    steps = torch.arange(1, gen.tokens.shape[1] + 1, dtype=F64).expand_as(trace.prob)
    floor = eos_lower_bound(steps, eps)
    assert bool((trace.prob[trace.valid] >= floor[trace.valid] * (1 - 1e-12)).all())


def test_nmst_sampling_nontermination_bound_values():
    assert nmst_sampling_nontermination_bound(0.1, 0) == 1.0
    assert math.isclose(nmst_sampling_nontermination_bound(0.1, 1), 0.9, rel_tol=1e-14)
    assert math.isclose(nmst_sampling_nontermination_bound(0.1, 3), 0.9 ** 6, rel_tol=1e-14)
    assert math.isclose(nmst_sampling_nontermination_bound(1e-5, 100), (1 - 1e-5) ** 5050, rel_tol=1e-12)
    with pytest.raises(ValueError, match="eps"):
        nmst_sampling_nontermination_bound(0.0, 3)
    with pytest.raises(ValueError, match="max_len"):
        nmst_sampling_nontermination_bound(0.1, -1)


def test_the_construction_is_reproducible_and_selects_rows():
    a = eos_outside_support_model(6, 2.0, seed=3, device="cpu")
    b = eos_outside_support_model(6, 2.0, seed=3, device="cpu")
    assert torch.equal(a.scores, b.scores) and isinstance(a.head, EntmaxHead)
    assert not torch.equal(a.scores, eos_outside_support_model(6, 2.0, seed=4, device="cpu").scores)
    state, _ = a.initial_state(torch.tensor([[0, 1], [2, 3]]))
    picked = a.select(state, torch.tensor([1, 1, 0]))
    assert picked[0].tolist() == [3, 3, 1]
    nmst = eos_outside_support_model(6, 2.0, head="nmst-entmax", eps=0.1, device="cpu")
    state, _ = nmst.initial_state(torch.tensor([[0], [2]]))
    state, _ = nmst.step(state, torch.tensor([1, 4]))
    assert nmst.select(state, torch.tensor([1]))[1].tolist() == [2]  # the NMST step count travels along
    assert isinstance(eos_outside_support_model(head="vanilla", device="cpu").head, VanillaHead)


def test_the_construction_checks_its_arguments():
    with pytest.raises(ValueError, match="alpha must be > 1"):
        eos_outside_support_model(alpha=1.0)
    with pytest.raises(ValueError, match="gap_factor"):
        eos_outside_support_model(gap_factor=0.5)
    with pytest.raises(ValueError, match="head must be one of"):
        eos_outside_support_model(head="st")
    with pytest.raises(ValueError, match="needs eps"):
        eos_outside_support_model(head="nmst-entmax")
    with pytest.raises(ValueError, match="no eps"):
        eos_outside_support_model(eps=0.1)
    with pytest.raises(ValueError, match="vocab_size"):
        eos_outside_support_model(1)
    model = eos_outside_support_model(device="cpu")
    with pytest.raises(ValueError, match="token ids"):
        model.initial_state(torch.tensor([[8]]))
