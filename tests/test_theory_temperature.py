"""Tests for Chapter 9's results (09_temperature) in nmst_lib.theory: what a global and a per-token
temperature do to the softmax (:func:`tempered_softmax`, :func:`tempered_entropy`,
:func:`entropy_temperature_derivative`, :func:`tempered_nucleus_size`, :func:`can_become_argmax`),
the softmax reading of eq. 5 (:func:`softmax_temperature_mean`) and the NMST floor under a
temperature on the non-eos logits (:func:`tempered_nmst_log_probs`)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.decoding import nucleus_mask, top_k_mask
from nmst_lib.heads import eos_lower_bound, nmst_log_probs
from nmst_lib.temperature import normalised_temperature
from nmst_lib.theory import (
    can_become_argmax,
    entropy_temperature_derivative,
    softmax_temperature_mean,
    tempered_entropy,
    tempered_log_softmax,
    tempered_nmst_log_probs,
    tempered_nucleus_size,
    tempered_softmax,
)

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def scores(seed, shape=(4, 30), scale=2.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*shape, generator=g, dtype=F64) + shift


# --------------------------------------------------------------------------- the tempered softmax


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([0.1, 1.0, 10.0]))
def test_tempered_softmax_is_softmax_of_logits_over_temperature(seed, scale):
    z = scores(seed, scale=scale)
    g = torch.Generator().manual_seed(seed + 1)
    per_token = 0.5 + 3 * torch.rand(z.shape, generator=g, dtype=F64)
    for tau in (1.0, 0.3, 7.0, per_token, per_token[..., :1]):
        p = tempered_softmax(z, tau)
        assert torch.allclose(p, torch.softmax(z / tau, -1), atol=1e-14)
        assert torch.allclose(p.sum(-1), torch.ones(4, dtype=F64), atol=1e-12)
    assert torch.allclose(tempered_softmax(z, 1.0), torch.softmax(z, -1), atol=1e-15)


def test_tempered_log_softmax_stays_finite_for_huge_logits_and_tiny_temperatures():
    z = torch.tensor([[1e4, -1e4, 0.0]], dtype=torch.float32)
    lp = tempered_log_softmax(z, 1e-3)
    assert torch.isfinite(lp).all() and lp[0, 0] == 0


def test_constant_temperature_cancels_against_scaled_logits():
    z = scores(3)
    assert torch.allclose(tempered_softmax(2.5 * z, 2.5), torch.softmax(z, -1), atol=1e-14)


# --------------------------------------------------------------------------- entropy


def _entropy_derivative_reference(z, tau):
    """sum over rows of Var_p(z) / T^3 for p = softmax(z / T), in 50-digit arithmetic (mpmath)."""
    import mpmath

    with mpmath.workdps(50):
        t = mpmath.mpf(tau)
        total = mpmath.mpf(0)
        for row in z.tolist():
            zs = [mpmath.mpf(v) for v in row]
            top = max(zs)
            w = [mpmath.exp((v - top) / t) for v in zs]
            p = [x / sum(w) for x in w]
            mean = sum(pi * zi for pi, zi in zip(p, zs))
            total += sum(pi * (zi - mean) ** 2 for pi, zi in zip(p, zs)) / t**3
        return float(total)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), tau=st.floats(0.05, 20.0), scale=st.sampled_from([0.1, 1.0, 5.0]))
def test_entropy_derivative_is_variance_over_temperature_cubed_and_matches_autograd(seed, tau, scale):
    z = scores(seed, scale=scale)
    t = torch.tensor(tau, dtype=F64, requires_grad=True)
    tempered_entropy(z, t).sum().backward()
    d = entropy_temperature_derivative(z, tau)
    assert (d >= 0).all()
    # The formula against a 50-digit reference: it is accurate to rounding.
    assert math.isclose(float(d.sum()), _entropy_derivative_reference(z, tau), rel_tol=1e-10, abs_tol=1e-300)
    # Autograd differentiates -sum p log p term by term; for a near-deterministic p (T = 0.05 on logits
    # of scale 5, z / T spans hundreds) those terms cancel and autograd itself loses digits (measured:
    # 3.7e-5 relative against the 50-digit reference, while the formula is within 5e-15). So autograd
    # is held to 1e-3, which still fails any wrong formula (a wrong power of T or a missing mean is
    # off by a factor).
    assert math.isclose(float(t.grad), float(d.sum()), rel_tol=1e-3, abs_tol=1e-12)
    p = torch.softmax(z / tau, -1)
    var = (p * (z - (p * z).sum(-1, keepdim=True)) ** 2).sum(-1)
    assert torch.allclose(d, var / tau**3, rtol=1e-10, atol=1e-300)


def test_entropy_is_non_decreasing_in_a_global_temperature_with_the_right_limits():
    z = scores(5, shape=(6, 50))
    z[0, 3] = z[0, 7] = z[0].max() + 1.0                 # a tied argmax in row 0
    taus = torch.logspace(-6, 3, 200, dtype=F64)
    H = torch.stack([tempered_entropy(z, float(t)) for t in taus])   # [taus, rows]
    assert (H[1:] >= H[:-1] - 1e-12).all()
    assert torch.allclose(H[0, 1:], torch.zeros(5, dtype=F64), atol=1e-6)   # T -> 0: a point mass
    assert math.isclose(float(H[0, 0]), math.log(2), abs_tol=1e-6)          # ... on the two tied tokens
    assert torch.allclose(H[-1], torch.full((6,), math.log(50), dtype=F64), atol=1e-4)  # T -> inf: uniform
    per_row = torch.linspace(0.5, 3, 6, dtype=F64)[:, None]
    assert torch.allclose(entropy_temperature_derivative(z, per_row),
                          torch.stack([entropy_temperature_derivative(z[i:i + 1], float(per_row[i])) for i in range(6)]).squeeze(1))


def test_entropy_derivative_is_zero_exactly_for_constant_logits():
    z = torch.full((2, 9), 1.7, dtype=F64)
    assert torch.equal(entropy_temperature_derivative(z, 1.3), torch.zeros(2, dtype=F64))


def test_entropy_derivative_refuses_a_per_token_temperature():
    z = scores(1)
    with pytest.raises(ValueError, match="one temperature per row"):
        entropy_temperature_derivative(z, torch.ones_like(z))


# --------------------------------------------------------------------------- ranking and candidate sets


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 29), tau=st.floats(0.05, 50.0))
def test_a_global_temperature_keeps_the_ranking_and_the_top_k_set(seed, k, tau):
    z = scores(seed)
    log_p = tempered_log_softmax(z, tau)
    assert torch.equal(torch.argsort(log_p, dim=-1, descending=True, stable=True),
                       torch.argsort(z, dim=-1, descending=True, stable=True))
    assert torch.equal(top_k_mask(log_p, k), top_k_mask(z.log_softmax(-1), k))
    assert torch.equal(log_p.argmax(-1), z.argmax(-1))          # greedy's choice cannot change


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), mu=st.floats(0.05, 0.99))
def test_nucleus_is_a_prefix_of_the_same_ranking_and_grows_with_the_temperature(seed, mu):
    z = scores(seed, shape=(5, 60))
    taus = torch.logspace(-1.5, 1.5, 40, dtype=F64)
    sizes = torch.stack([tempered_nucleus_size(z, float(t), mu) for t in taus])
    assert (sizes[1:] >= sizes[:-1]).all()
    order = torch.argsort(z, dim=-1, descending=True, stable=True)
    for t, size in zip(taus, sizes):
        mask = nucleus_mask(tempered_log_softmax(z, float(t)), mu)
        assert torch.equal(mask.sum(-1), size)
        prefix = torch.arange(60)[None, :] < size[:, None]          # the first `size` tokens of z's ranking
        assert torch.equal(mask.gather(-1, order), prefix)


def test_nucleus_size_against_a_hand_computation():
    z = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=F64))
    assert tempered_nucleus_size(z, 1.0, 0.5).item() == 1
    assert tempered_nucleus_size(z, 1.0, 0.79).item() == 2   # (exactly 0.8 is a rounding coin flip)
    assert tempered_nucleus_size(z, 1.0, 0.81).item() == 3
    assert tempered_nucleus_size(z, 1.0, 1.0).item() == 4
    with pytest.raises(ValueError, match="mu"):
        tempered_nucleus_size(z, 1.0, 0.0)


def _smallest_nucleus(probs, mu):
    """The size of the smallest set of most probable tokens of mass >= mu,
    counted in exact rational arithmetic."""
    total, size = Fraction(0), 0
    for p in sorted((Fraction(x) for x in probs), reverse=True):
        if total >= mu:
            break
        total, size = total + p, size + 1
    return size


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_nucleus_size_stops_where_the_mass_reaches_mu_exactly(dtype):
    # Dyadic probabilities: log p, its log-softmax and every partial mass
    # are exact, so the mass of the top k equals mu exactly and the
    # smallest set of mass >= mu stops there ('<' before the threshold,
    # not '<='). Powers of two as temperatures keep z / T = log p exact.
    probs = [0.125, 0.5, 0.125, 0.25]
    log_p = torch.tensor([probs], dtype=dtype).log()
    per_token = torch.tensor([[2.0, 0.5, 4.0, 1.0]], dtype=dtype)
    for tau in (1.0, 2.0, 0.5, per_token):
        z = log_p * tau
        for mu in (0.5, 0.75, 0.875):
            want = _smallest_nucleus(probs, Fraction(mu))
            assert want == {0.5: 1, 0.75: 2, 0.875: 3}[mu]
            got = tempered_nucleus_size(z, tau, mu)
            assert got.tolist() == [want], (dtype, tau, mu)
    # 128 equal tokens (global temperature 4): half the mass is 64 tokens
    wide = torch.full((2, 128), 1 / 128, dtype=dtype).log() * 4.0
    assert tempered_nucleus_size(wide, 4.0, 0.5).tolist() == [64, 64]


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_nucleus_of_mass_one_is_every_token_as_in_nucleus_mask(dtype):
    # Finite logits give every token a positive probability, so the
    # smallest set of mass >= 1 is the whole vocabulary, and nucleus_mask
    # keeps the support at p = 1. The cumulative mass rounds to 1 before
    # the last tokens (e^-40 is below float64's half ulp of 1, e^-20 below
    # float32's), which must not end the nucleus.
    z = torch.tensor([[0.0, -40.0], [0.0, -20.0], [3.0, 3.0]], dtype=dtype)
    assert tempered_nucleus_size(z, 1.0, 1.0).tolist() == [2, 2, 2]
    g = torch.Generator().manual_seed(0)
    z = (10 * torch.randn(6, 50, generator=g, dtype=F64)).to(dtype)
    per_token = 0.5 + 3 * torch.rand(6, 50, generator=g, dtype=F64)
    for tau in (0.5, 1.0, 4.0, per_token.to(dtype)):
        size = tempered_nucleus_size(z, tau, 1.0)
        assert size.tolist() == [50] * 6, tau
        support = nucleus_mask(tempered_log_softmax(z, tau), 1.0)
        assert torch.equal(size, support.sum(-1))


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_nucleus_size_stays_within_the_vocabulary_as_mu_grows_to_one(dtype):
    # Just below 1, mu lies within rounding of the whole mass, which can be
    # computed a few ulps below 1: the count must still stop at V (there is
    # no rank after the last token) and grow with mu, up to V at mu = 1.
    mus = [0.5, 0.999999, 1 - 2**-24, 1 - 1e-12, math.nextafter(1.0, 0.0), 1.0]
    z = scores(3, shape=(8, 30)).to(dtype)
    g = torch.Generator().manual_seed(4)
    per_token = (0.5 + 3 * torch.rand(8, 30, generator=g, dtype=F64)).to(dtype)
    for tau in (0.5, 1.0, 3.0, per_token):
        sizes = torch.stack([tempered_nucleus_size(z, tau, mu) for mu in mus])
        assert int(sizes.min()) >= 1 and int(sizes.max()) <= 30, (tau, sizes)
        assert bool((sizes[1:] >= sizes[:-1]).all()), (tau, sizes)
        assert sizes[-1].tolist() == [30] * 8


# --------------------------------------------------------------------------- per-token reordering


def _brute_force_reachable(z, lo, hi, samples=4000, seed=0):
    """Tokens that are the strict argmax of z / T for some T in [lo, hi]^V: every corner of the box
    (the proposition says corners suffice) plus random interior points, which must add nothing."""
    V = z.shape[-1]
    corners = torch.tensor([[lo if (c >> v) & 1 else hi for v in range(V)] for c in range(2**V)], dtype=F64)
    g = torch.Generator().manual_seed(seed)
    interior = lo + (hi - lo) * torch.rand(samples, V, generator=g, dtype=F64)
    reach_corners, reach_all = torch.zeros(V, dtype=torch.bool), torch.zeros(V, dtype=torch.bool)
    for T, target in ((corners, reach_corners), (torch.cat([corners, interior]), reach_all)):
        r = z / T
        top2 = torch.topk(r, 2, -1).values
        strict = top2[:, 0] > top2[:, 1]
        target[r.argmax(-1)[strict].unique()] = True
    return reach_corners, reach_all


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), V=st.integers(2, 7), shift=st.sampled_from([-3.0, 0.0, 3.0]),
       lo=st.floats(0.2, 3.0), ratio=st.floats(1.0, 4.0))
def test_can_become_argmax_agrees_with_a_search_over_temperatures(seed, V, shift, lo, ratio):
    z = scores(seed, shape=(V,), shift=shift)
    hi = lo * ratio
    mask = can_become_argmax(z, None, lo, hi)
    corners, everything = _brute_force_reachable(z, lo, hi, seed=seed)
    assert torch.equal(mask, corners) and torch.equal(mask, everything)
    assert all(bool(can_become_argmax(z, j, lo, hi)) == bool(mask[j]) for j in range(V))
    assert mask[z.argmax()]                                   # the argmax itself always can


def test_a_global_range_lets_only_the_argmax_win():
    z = scores(2, shape=(3, 12))
    mask = can_become_argmax(z, None, 2.0, 2.0)
    assert torch.equal(mask, torch.nn.functional.one_hot(z.argmax(-1), 12).bool())


def test_positive_logits_can_be_overtaken_within_the_ratio_of_the_range():
    # range [2, 4] (a = 1, b = 1/2): hi / lo = 2, so a positive z_j wins iff z_j > z_max / 2
    z = torch.tensor([10.0, 5.01, 4.99, 1.0], dtype=F64)
    assert can_become_argmax(z, None, 2.0, 4.0).tolist() == [True, True, False, False]


def test_per_token_temperature_is_not_shift_invariant():
    z = torch.tensor([10.0, 6.0], dtype=F64)
    assert can_become_argmax(z, 1, 2.0, 4.0)                  # 6/2 = 3 > 10/4 = 2.5
    assert not can_become_argmax(z - 9.0, 1, 2.0, 4.0)        # [1, -3]: -3/4 < 1/4, the same softmax
    assert torch.allclose(torch.softmax(z, -1), torch.softmax(z - 9.0, -1), atol=1e-15)
    # the same temperatures on shifted logits give another distribution; a global one does not
    T = torch.tensor([4.0, 2.0], dtype=F64)
    assert not torch.allclose(tempered_softmax(z, T), tempered_softmax(z + 5.0, T))
    assert torch.allclose(tempered_softmax(z, 3.0), tempered_softmax(z + 5.0, 3.0), atol=1e-14)


def test_can_become_argmax_rejects_bad_ranges_and_ids():
    z = scores(0, shape=(5,))
    with pytest.raises(ValueError, match="lo <= hi"):
        can_become_argmax(z, 0, 4.0, 2.0)
    with pytest.raises(ValueError, match="lo <= hi"):
        can_become_argmax(z, 0, 0.0, 2.0)
    with pytest.raises(ValueError, match="j must be in"):
        can_become_argmax(z, 5, 1.0, 2.0)
    with pytest.raises(TypeError, match="lo"):
        can_become_argmax(z, 0, None, 2.0)


# --------------------------------------------------------------------------- the softmax reading of eq. 5


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), V=st.integers(1, 5000), a=st.floats(0.1, 3.0), b=st.floats(0.1, 3.0))
def test_softmax_normalised_temperatures_have_a_constant_mean(seed, V, a, b):
    g = torch.Generator().manual_seed(seed)
    mu = 5 * torch.randn(3, V, generator=g, dtype=F64)
    tau = normalised_temperature(mu, "softmax", a=a, b=b)  # the library's eq. 5, the softmax reading
    assert torch.allclose(tau, (torch.softmax(mu, -1) + a) / b, rtol=1e-14)
    expected = softmax_temperature_mean(V, a, b)
    assert torch.allclose(tau.mean(-1), torch.full((3,), expected, dtype=F64), rtol=1e-12)
    assert math.isclose(expected, (a + 1 / V) / b, rel_tol=1e-15)


def test_softmax_temperature_mean_matches_the_papers_scale():
    # PTB, K = 10,000, (a, b) = (1, 1/2): T_v - 2 averages 2e-4, the order of their reported 8.34e-5
    assert math.isclose(softmax_temperature_mean(10_000, 1.0, 0.5) - 2.0, 2e-4, rel_tol=1e-9)
    for bad, name in (
        ((0, 1.0, 0.5), "vocab_size"),
        ((10, 0.0, 0.5), "a"),
        ((10, 1.0, -1.0), "b"),
        ((10, float("nan"), 1.0), "a"),
    ):
        with pytest.raises(ValueError, match=rf"^{name} must be"):
            softmax_temperature_mean(*bad)
    with pytest.raises(TypeError, match="vocab_size"):
        softmax_temperature_mean(2.5, 1.0, 0.5)


# --------------------------------------------------------------------------- CT + NMST


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), eps=st.sampled_from([1e-5, 1e-3, 5e-2]),
       log_tau=st.floats(-8.0, 8.0), scale=st.sampled_from([1.0, 30.0]))
def test_temperature_on_the_non_eos_logits_keeps_the_nmst_floor(seed, eps, log_tau, scale):
    T_, V = 40, 9
    eos = V - 1
    z = scores(seed, shape=(3, T_, V), scale=scale)
    g = torch.Generator().manual_seed(seed)
    tau = torch.exp(log_tau + torch.randn(3, T_, V, generator=g, dtype=F64))   # wild per-token temperatures
    lp = tempered_nmst_log_probs(z, tau, eos, eps)
    t = torch.arange(1, T_ + 1, dtype=F64)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(3, T_, dtype=F64), atol=1e-10)
    assert (lp[..., eos].exp() >= eos_lower_bound(t, eps) * (1 - 1e-12)).all()
    # eos's probability does not depend on the temperatures at all ...
    assert torch.allclose(lp[..., eos], nmst_log_probs(z, eos, eps)[..., eos], atol=1e-12)
    # ... and the others share 1 - p(eos) as a softmax of z / T over the non-eos tokens
    rest = torch.softmax(z[..., :eos] / tau[..., :eos], -1) * (-torch.expm1(lp[..., eos:]))
    assert torch.allclose(lp[..., :eos].exp(), rest, atol=1e-12)


def test_tempered_nmst_with_unit_temperature_is_nmst():
    z = scores(4, shape=(2, 15, 7))
    assert torch.allclose(tempered_nmst_log_probs(z, 1.0, 6, 1e-2), nmst_log_probs(z, 6, 1e-2), atol=1e-14)
    assert torch.allclose(tempered_nmst_log_probs(z[:, 3], 2.0, 6, 1e-2, t=4),
                          tempered_nmst_log_probs(z, 2.0, 6, 1e-2)[:, 3], atol=1e-14)


# --------------------------------------------------------------------------- argument checks


@pytest.mark.parametrize("tau, error, match", [
    (0.0, ValueError, "> 0"), (-1.0, ValueError, "> 0"), (float("nan"), ValueError, "> 0"),
    (float("inf"), ValueError, "> 0"), (True, TypeError, "bool"), ("2", TypeError, "positive number"),
    (torch.ones(3, 7), ValueError, "broadcast"), (torch.ones(2, 4, 30), ValueError, "enlarge"),
])
def test_temperatures_are_checked(tau, error, match):
    with pytest.raises(error, match=match):
        tempered_softmax(scores(0), tau)


def test_logits_are_checked():
    with pytest.raises(TypeError, match="floating-point"):
        tempered_entropy(torch.ones(3, dtype=torch.long), 1.0)
    with pytest.raises(ValueError, match="finite"):
        tempered_entropy(torch.tensor([0.0, -math.inf]), 1.0)
    with pytest.raises(ValueError, match="last dimension"):
        tempered_entropy(torch.tensor(1.0), 1.0)


# --------------------------------------------------------------------------- overflow and extreme inputs


@pytest.mark.parametrize("z, tau", [(torch.tensor([[1e4, 0.0]], dtype=torch.float16), 0.1),
                                    (torch.tensor([[1e4, 0.0]], dtype=torch.float32), 1e-36),
                                    (torch.tensor([[1e4, 0.0]], dtype=torch.float32),
                                     torch.tensor([[1e-36, 1.0]]))])
def test_tempered_functions_refuse_logits_over_temperatures_that_overflow_the_dtype(z, tau):
    # log_softmax of an infinite z / T is NaN: the docstring promised no overflow
    calls = [tempered_log_softmax, tempered_softmax, tempered_entropy, lambda z, t: tempered_nucleus_size(z, t, 0.9),
             lambda z, t: tempered_nmst_log_probs(z, t, 1, 0.1, t=1)]  # token 0 is not eos: tempered
    for call in calls:
        with pytest.raises(ValueError, match="z / tau overflows"):
            call(z, tau)


def test_entropy_derivative_refuses_a_temperature_whose_cube_underflows():
    with pytest.raises(ValueError, match="T\\^3 underflows"):
        entropy_temperature_derivative(torch.tensor([1.0, 0.0]), 1e-20)  # float32: 1e-60 -> 0
    assert float(entropy_temperature_derivative(torch.tensor([1.0, 0.0], dtype=F64), 1e-20)) == 0.0


def test_can_become_argmax_refuses_ratios_that_overflow_the_dtype():
    with pytest.raises(ValueError, match="z / tau overflows"):
        can_become_argmax(torch.tensor([6e4, 6.5e4], dtype=torch.float16), 0, 0.5, 1.0)


def test_tempered_nmst_ignores_the_eos_temperature_even_when_it_would_overflow():
    z = torch.tensor([[3.0, 1e4]], dtype=torch.float32)
    tau = torch.tensor([[1.0, 1e-36]])  # eos (id 1) keeps its raw logit: its ratio is never formed
    got = tempered_nmst_log_probs(z, tau, 1, 0.1, t=1)
    assert torch.equal(got, nmst_log_probs(z, 1, 0.1, t=1))


def _entropy_ref(z: torch.Tensor, tau) -> torch.Tensor:
    """Shannon entropy of softmax(z / T) in float64, the naive way after shifting by the max."""
    r = z.to(F64) / (tau.to(F64) if isinstance(tau, torch.Tensor) else tau)
    w = torch.exp(r - r.max(-1, keepdim=True).values)
    p = w / w.sum(-1, keepdim=True)
    return -torch.where(p > 0, p * torch.log(p), torch.zeros_like(p)).sum(-1)


@pytest.mark.parametrize("tau", [1.0, 0.25, 40.0, "per-token"])
def test_tempered_entropy_at_logits_of_1e4_in_float32_matches_a_float64_reference(tau):
    g = torch.Generator().manual_seed(5)
    z = torch.randn(6, 50, generator=g, dtype=F64)
    z[0, :2] = torch.tensor([1e4, -1e4])
    z[1] = torch.linspace(-1e4, 1e4, 50, dtype=F64)
    z[2, :] = 1e4  # all tied: entropy log V
    z32 = z.float()
    if tau == "per-token":
        tau = (0.5 + 3 * torch.rand(6, 50, generator=g)).float()
    got = tempered_entropy(z32, tau)
    want = _entropy_ref(z32, tau)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    torch.testing.assert_close(got.to(F64), want, rtol=1e-5, atol=1e-5)
    if not isinstance(tau, torch.Tensor):
        assert float(got[2]) == pytest.approx(math.log(50), rel=1e-6)


def test_tempered_nucleus_size_at_logits_of_1e4_in_float32_matches_a_float64_count():
    z = torch.tensor([[1e4, 1e4 - 1.0, 1e4 - 2.0, -1e4, 0.0],
                      [1e4, -1e4, -1e4, -1e4, -1e4],
                      [1e4, 1e4, 1e4, 1e4, 1e4]], dtype=torch.float32)
    for tau, mu in [(1.0, 0.5), (1.0, 0.9), (1.0, 0.99), (0.5, 0.9), (3.0, 0.9), (1e3, 0.5)]:
        p = torch.softmax(z.to(F64) / tau, -1)
        sorted_p = torch.sort(p, -1, descending=True).values
        before = torch.cumsum(sorted_p, -1) - sorted_p  # mass of the ranks before each one
        want = (before < mu).sum(-1)
        assert torch.equal(tempered_nucleus_size(z, tau, mu), want), (tau, mu)
    assert tempered_nucleus_size(z, 1.0, 0.9)[1] == 1 and tempered_nucleus_size(z, 1.0, 0.9)[2] == 5


def test_can_become_argmax_at_logits_of_1e4_in_float32_matches_the_float64_rule():
    z = torch.tensor([[1e4, 9e3, -1e4, 5e3], [-1e4, -9.9e3, -2e4, -1e4 + 1.0]], dtype=torch.float32)
    lo, hi = 2.0, 4.0
    z64 = z.to(F64)
    best = torch.where(z64 >= 0, z64 / lo, z64 / hi)
    worst = torch.where(z64 >= 0, z64 / hi, z64 / lo)
    want = torch.stack([torch.stack([best[r, j] > torch.cat([worst[r, :j], worst[r, j + 1:]]).max()
                                     for j in range(4)]) for r in range(2)])
    assert torch.equal(can_become_argmax(z, None, lo, hi), want)
    # 9e3 > (lo / hi) 1e4 = 5e3: it can overtake; 5e3 is not above 5e3 strictly
    assert want[0].tolist() == [True, True, False, False]
