"""Tests for nmst_lib.heads: the vanilla, ST and NMST output layers.

References are written out independently, the naive way, in float64 (explicit loops over
steps, the papers' formulas as printed): Welleck et al. (2020) Def. 4.3, Choi, Cho, Lee (2023)
Defs. 5-6. High-precision references use Python's ``decimal``.
"""

from __future__ import annotations

import math
from decimal import Decimal, getcontext

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.heads import (
    NMSTEntmaxHead,
    NMSTHead,
    OutputHead,
    STHead,
    VanillaHead,
    eos_lower_bound,
    head_from_name,
    log1mexp,
    nmst_eos_log_probs,
    nmst_log_probs,
    st_eos_log_probs,
    st_log_probs,
    vanilla_log_probs,
)

EPSILONS = [1e-5, 5e-4, 0.1]
F64 = torch.float64


# --------------------------------------------------------------------------- naive references


def _sigmoid(x: float) -> Decimal:
    return 1 / (1 + Decimal(-x).exp())


def _non_eos_softmax(row: list[float], eos_id: int) -> list[float]:
    norm = sum(math.exp(z) for v, z in enumerate(row) if v != eos_id)
    return [math.exp(z) / norm for z in row]


def naive_st_probs(logits: torch.Tensor, eos_id: int, eps: float) -> torch.Tensor:
    """Welleck et al. (2020) Def. 4.3 / Choi et al. (2023) eq. 9 with an explicit running product
    (in 50-digit decimal arithmetic, so that 1 - p(eos) keeps its digits when p(eos) ~ 1)."""
    getcontext().prec = 50
    B, T, V = logits.shape
    out = torch.empty(B, T, V, dtype=F64)
    for b in range(B):
        keep = Decimal(1)
        for t in range(T):
            row = logits[b, t].tolist()
            keep *= (1 - Decimal(eps)) * _sigmoid(row[eos_id])
            p_eos = 1 - keep
            soft = _non_eos_softmax(row, eos_id)
            out[b, t] = torch.tensor([float(1 - p_eos) * s for s in soft], dtype=F64)
            out[b, t, eos_id] = float(p_eos)
    return out


def naive_nmst_probs(logits: torch.Tensor, eos_id: int, eps: float, steps) -> torch.Tensor:
    """Choi et al. (2023) eq. 10 (in 50-digit decimal arithmetic); ``steps(b, t)`` gives the step
    number of position (b, t)."""
    getcontext().prec = 50
    B, T, V = logits.shape
    out = torch.empty(B, T, V, dtype=F64)
    for b in range(B):
        for t in range(T):
            row = logits[b, t].tolist()
            sig = _sigmoid(row[eos_id])
            p_eos = (1 - sig) * (1 - (1 - Decimal(eps)) ** steps(b, t)) + sig
            soft = _non_eos_softmax(row, eos_id)
            out[b, t] = torch.tensor([float(1 - p_eos) * s for s in soft], dtype=F64)
            out[b, t, eos_id] = float(p_eos)
    return out


def naive_log_probs(logits: torch.Tensor, eos_id: int, eps: float, rule: str) -> torch.Tensor:
    """log p of Welleck et al. (2020) Def. 4.3 (``rule="st"``) or Choi et al. (2023) eq. 10
    (``"nmst"``, step t + 1 at position t) in 50-digit decimal arithmetic, whose exponent range
    holds exp(-1e4): the reference for logits of size 1e4, where probabilities underflow every
    float type but their logarithms (about -1e4 per step) do not."""
    getcontext().prec = 50
    B, T, V = logits.shape
    out = torch.empty(B, T, V, dtype=F64)
    log_1m_eps = (1 - Decimal(eps)).ln()
    for b in range(B):
        log_keep = Decimal(0)
        for t in range(T):
            row = [Decimal(z) for z in logits[b, t].tolist()]
            z_eos = row[eos_id]
            if rule == "st":  # 1 - p(eos) = prod (1 - eps) sigma(z), log sigma(z) = -log(1 + e^-z)
                log_keep += log_1m_eps - (1 + (-z_eos).exp()).ln()
            else:  # 1 - p(eos) = (1 - sigma(z)) (1 - eps)^t, log(1 - sigma(z)) = -log(1 + e^z)
                log_keep = -(1 + z_eos.exp()).ln() + (t + 1) * log_1m_eps
            p_eos = 1 - log_keep.exp()
            top = max(z for v, z in enumerate(row) if v != eos_id)
            log_norm = top + sum((z - top).exp() for v, z in enumerate(row) if v != eos_id).ln()
            out[b, t] = torch.tensor([float(log_keep + z - log_norm) for z in row], dtype=F64)
            out[b, t, eos_id] = float(p_eos.ln())
    return out


def _logits(seed: int, shape, scale: float = 3.0, dtype=F64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(shape, generator=g, dtype=F64)).to(dtype)


def _finite_part(out: torch.Tensor) -> torch.Tensor:
    # gradcheck cannot difference -inf (context positions' eos): compare the finite entries
    return out.masked_fill(torch.isinf(out), 0.0)


# --------------------------------------------------------------------------- the papers' formulas


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("eos_id", [0, 2, 4])
def test_st_matches_definition_written_out(eps, eos_id):
    logits = _logits(1, (2, 7, 5))
    expected = naive_st_probs(logits, eos_id, eps)
    got = st_log_probs(logits, eos_id, eps)
    torch.testing.assert_close(got.exp(), expected, rtol=1e-10, atol=0)
    torch.testing.assert_close(got, expected.log(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("eos_id", [0, 2, 4])
def test_nmst_matches_definition_written_out(eps, eos_id):
    logits = _logits(2, (2, 7, 5))
    expected = naive_nmst_probs(logits, eos_id, eps, lambda b, t: t + 1)
    got = nmst_log_probs(logits, eos_id, eps)
    torch.testing.assert_close(got.exp(), expected, rtol=1e-10, atol=0)
    torch.testing.assert_close(got, expected.log(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("eps", [1e-5, 5e-4])
def test_nmst_with_given_steps_matches_definition_written_out(eps):
    logits = _logits(3, (2, 4, 6))
    steps = torch.tensor([[0, 1, 7, 1000], [3, 0, 2, 50_000]])
    expected = naive_nmst_probs(logits, 1, eps, lambda b, t: int(steps[b, t]))
    torch.testing.assert_close(nmst_log_probs(logits, 1, eps, t=steps).exp(), expected, rtol=1e-10, atol=0)
    # an int t is one step number for every position
    expected5 = naive_nmst_probs(logits, 1, eps, lambda b, t: 5)
    torch.testing.assert_close(nmst_log_probs(logits, 1, eps, t=5).exp(), expected5, rtol=1e-10, atol=0)


def test_nmst_at_step_zero_is_a_plain_sigmoid_for_eos():
    logits = _logits(4, (3, 5))
    logits[0, 2] = -1e4
    log_p = nmst_log_probs(logits, 2, 1e-4, t=0)[:, 2]
    torch.testing.assert_close(log_p, torch.nn.functional.logsigmoid(logits[:, 2]), rtol=1e-14, atol=0)
    assert float(log_p[0]) == -1e4  # exp(-1e4) underflows, its log does not


def test_eos_rules_agree_with_the_full_layers():
    logits = _logits(5, (2, 6, 4))
    for full, rule in [
        (st_log_probs(logits, 3, 1e-3), st_eos_log_probs(logits[..., 3], 1e-3)),
        (nmst_log_probs(logits, 3, 1e-3), nmst_eos_log_probs(logits[..., 3], 1e-3)),
    ]:
        log_p_eos, log_keep = rule
        torch.testing.assert_close(full[..., 3], log_p_eos, rtol=0, atol=1e-14)
        torch.testing.assert_close(torch.logsumexp(full[..., :3], -1), log_keep, rtol=0, atol=1e-14)


# --------------------------------------------------------------------------- building blocks


def _decimal_log1mexp(x: float) -> float:
    getcontext().prec = 400  # 1 - exp(-1e-300) needs ~300 digits
    return float((1 - Decimal(x).exp()).ln())


@pytest.mark.parametrize("x", [-1e-300, -1e-20, -1e-8, -1e-5, -0.3, -math.log(2), -0.7, -1.0, -20.0, -745.0])
def test_log1mexp_matches_high_precision_reference(x):
    expected = _decimal_log1mexp(x)
    assert log1mexp(x) == pytest.approx(expected, rel=1e-14, abs=1e-300)
    got = log1mexp(torch.tensor([x], dtype=F64))
    assert float(got) == pytest.approx(expected, rel=1e-14, abs=1e-300)
    if -80 < x < -1e-37:  # representable in float32
        got32 = log1mexp(torch.tensor([x], dtype=torch.float32))
        # abs=0: at x = -20 the value is -2e-9, where approx's default
        # abs=1e-12 alone would allow a 5e-4 relative error
        want32 = float(torch.tensor(expected, dtype=torch.float32))
        assert float(got32) == pytest.approx(want32, rel=1e-6, abs=0)


def test_log1mexp_has_finite_gradients_on_both_branches_and_a_pole_at_zero():
    x = torch.tensor([-1e-6, -0.5, -math.log(2), -0.8, -50.0, -1e4], dtype=F64, requires_grad=True)
    log1mexp(x).sum().backward()
    assert torch.isfinite(x.grad).all()
    # d/dx log(1 - e^x) = -e^x / (1 - e^x)
    expected = -torch.exp(x.detach()) / -torch.expm1(x.detach())
    torch.testing.assert_close(x.grad, expected, rtol=1e-12, atol=0)
    assert log1mexp(0.0) == -math.inf and float(log1mexp(torch.zeros(1))) == -math.inf
    assert math.isnan(log1mexp(0.5))


def _decimal_lower_bound(t: int, eps: float) -> float:
    getcontext().prec = 60
    return float(1 - (1 - Decimal(eps)) ** t)


@pytest.mark.parametrize("eps", [1e-5, 5e-4, 0.3])
def test_eos_lower_bound_matches_high_precision_reference(eps):
    steps = [0, 1, 2, 10, 1000, 69_315, 1_000_000]
    expected = [_decimal_lower_bound(t, eps) for t in steps]
    # abs=0: f_lb(1) = eps = 1e-5, where approx's default abs=1e-12 alone
    # would widen rel=1e-13 to 1e-7
    got = [eos_lower_bound(t, eps) for t in steps]
    assert got == pytest.approx(expected, rel=1e-13, abs=0)
    as64 = eos_lower_bound(torch.tensor(steps, dtype=F64), eps)
    torch.testing.assert_close(as64, torch.tensor(expected, dtype=F64), rtol=1e-13, atol=0)
    as32 = eos_lower_bound(torch.tensor(steps, dtype=torch.float32), eps)
    torch.testing.assert_close(as32, torch.tensor(expected, dtype=torch.float32), rtol=2e-6, atol=0)
    assert eos_lower_bound(torch.tensor(steps), eps).is_floating_point()


def test_eos_lower_bound_rejects_negative_steps_and_bad_eps():
    with pytest.raises(ValueError, match="t must be >= 0"):
        eos_lower_bound(-1, 0.1)
    with pytest.raises(ValueError, match="t must be >= 0"):
        eos_lower_bound(torch.tensor([1.0, -2.0]), 0.1)
    with pytest.raises(TypeError, match="t must be"):
        eos_lower_bound("3", 0.1)
    with pytest.raises(ValueError, match="eps"):
        eos_lower_bound(3, 0.0)


# --------------------------------------------------------------------------- properties

HEADS = {
    "vanilla": lambda z, eos, eps: vanilla_log_probs(z),
    "st": lambda z, eos, eps: st_log_probs(z, eos, eps),
    "nmst": lambda z, eos, eps: nmst_log_probs(z, eos, eps),
}


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([0.1, 3.0, 30.0, 1e3]),
    eps=st.sampled_from([1e-5, 5e-4, 0.1, 0.9]),
    eos=st.integers(0, 5),
    head=st.sampled_from(sorted(HEADS)),
)
def test_rows_are_probability_distributions(seed, scale, eps, eos, head):
    logits = _logits(seed, (2, 9, 6), scale)
    out = HEADS[head](logits, eos, eps)
    torch.testing.assert_close(torch.logsumexp(out, -1), torch.zeros(2, 9, dtype=F64), rtol=0, atol=1e-12)
    assert not torch.isnan(out).any()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1.0, 10.0, 1e4]),
    eps=st.sampled_from([1e-5, 5e-4, 0.1]),
    head=st.sampled_from(["st", "nmst"]),
)
def test_eos_probability_never_falls_below_the_lower_bound(seed, scale, eps, head):
    logits = _logits(seed, (3, 12, 4), scale)
    log_p_eos = HEADS[head](logits, 0, eps)[..., 0]
    bound = eos_lower_bound(torch.arange(1, 13, dtype=F64), eps)
    assert (log_p_eos >= bound.log() - 1e-12).all()


@settings(max_examples=50, deadline=None)
@given(
    eos_logits=st.lists(st.one_of(st.floats(-60, 60), st.sampled_from([-1e4, 1e4])), min_size=2, max_size=30),
    eps=st.sampled_from([1e-5, 5e-4, 0.1]),
)
def test_st_eos_probability_is_non_decreasing_in_t(eos_logits, eps):
    logits = torch.zeros(len(eos_logits), 3, dtype=F64)
    logits[:, 2] = torch.tensor(eos_logits, dtype=F64)
    log_p_eos = st_log_probs(logits, 2, eps)[:, 2]
    assert (log_p_eos[1:] >= log_p_eos[:-1]).all()


def test_nmst_eos_probability_can_fall_and_rise():
    logits = torch.zeros(1, 3, 4, dtype=F64)
    logits[0, :, 3] = torch.tensor([20.0, -20.0, 20.0])  # sigma ~ 1, ~ 0, ~ 1
    p = nmst_log_probs(logits, 3, 0.01)[0, :, 3].exp()
    assert p[1] < p[0] and p[2] > p[1]
    assert float(p[1]) == pytest.approx(1 - 0.99**2, rel=1e-6)  # down to f_lb(2)
    # ST cannot: the same logits give a non-decreasing p(eos)
    q = st_log_probs(logits, 3, 0.01)[0, :, 3].exp()
    assert q[1] >= q[0] and q[2] >= q[1]


# --------------------------------------------------------------------------- extremes and precision


def _random_targets(shape, vocab, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("head", ["st", "nmst", "st_masked", "nmst_masked"])
def test_logits_of_size_1e4_give_finite_eos_log_probs_and_gradients(dtype, head):
    g = torch.Generator().manual_seed(7)
    signs = torch.randint(0, 2, (4, 6, 8), generator=g) * 2 - 1
    logits = (1e4 * signs).to(dtype)
    logits[0, :, 7] = 1e4
    logits[1, :, 7] = -1e4
    logits = logits.requires_grad_()
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, :2] = True
    if head == "st":
        out = st_log_probs(logits, 7, 1e-5)
    elif head == "nmst":
        out = nmst_log_probs(logits, 7, 1e-5)
    else:
        layer = STHead(1e-5) if head == "st_masked" else NMSTHead(1e-5)
        out = layer(logits, mask)
    assert not torch.isnan(out).any()
    eos = out[..., 7] if not head.endswith("masked") else out[:, 2:, 7]
    assert torch.isfinite(eos).all()
    # every token, not only eos: in log space nothing underflows (a log of a softmax would give
    # -inf where the log-probability is about -2e4); the layers against the equations themselves
    scored = out if not head.endswith("masked") else out[:, 2:]
    assert torch.isfinite(scored).all()
    if head in ("st", "nmst"):
        reference = naive_log_probs(logits.detach().double(), 7, 1e-5, head)
        tol = dict(rtol=1e-6, atol=1e-3) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-9)
        torch.testing.assert_close(out.detach().double(), reference, **tol)
    targets = _random_targets((4, 6), 8)
    picked = out.gather(-1, targets.unsqueeze(-1))
    picked[torch.isfinite(picked)].sum().backward()
    assert torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_saturated_eos_logit_at_the_first_step_gives_p_eos_equal_to_eps(dtype):
    eps = 1e-5
    logits = torch.zeros(2, 1, 5, dtype=dtype)
    logits[0, 0, 4], logits[1, 0, 4] = 1e4, -1e4
    st_eos = st_log_probs(logits, 4, eps)[:, 0, 4]  # ST: 1 - (1 - eps) sigma(z)
    nmst_eos = nmst_log_probs(logits, 4, eps)[:, 0, 4]  # NMST: sigma(z) + (1 - sigma(z)) eps
    assert float(st_eos[0]) == pytest.approx(math.log(eps), rel=1e-6)
    assert float(st_eos[1]) == 0.0
    assert float(nmst_eos[1]) == pytest.approx(math.log(eps), rel=1e-6)
    assert float(nmst_eos[0]) == 0.0


@pytest.mark.parametrize("layer_name", ["st", "nmst"])
def test_float32_matches_float64_reference_at_eps_1e_5(layer_name):
    eps = 1e-5
    logits = _logits(11, (3, 20, 50), scale=3.0, dtype=torch.float32)
    logits[:, :, 49] = torch.linspace(-8.0, 25.0, 60).reshape(3, 20)  # from p(eos) ~ f_lb(t) to ~ 1
    logits[0, 0, 49] = 25.0  # ST at t = 1: p(eos) = eps to 6 digits; float32 1 - (1 - eps) is 1e-3 off
    got = HEADS[layer_name](logits, 49, eps)
    if layer_name == "st":
        ref = naive_st_probs(logits.double(), 49, eps)
    else:
        ref = naive_nmst_probs(logits.double(), 49, eps, lambda b, t: t + 1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double().exp(), ref, rtol=2e-5, atol=0)
    torch.testing.assert_close(got.double()[..., 49], ref[..., 49].log(), rtol=2e-6, atol=2e-7)


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("eos_id", [0, 3, 5])
def test_st_and_nmst_gradients_match_finite_differences(eos_id):
    logits = _logits(13, (2, 4, 6), scale=2.0).requires_grad_()  # steps below: [B, T]
    steps = torch.tensor([[0, 1, 4, 9], [2, 0, 1, 30]])
    for fn in [
        lambda z: st_log_probs(z, eos_id, 0.1),
        lambda z: nmst_log_probs(z, eos_id, 0.1),
        lambda z: nmst_log_probs(z, eos_id, 0.05, t=steps),
        lambda z: nmst_log_probs(z, eos_id, 0.05, t=0),
    ]:
        assert torch.autograd.gradcheck(fn, (logits,), fast_mode=True)


@pytest.mark.parametrize("layer", [STHead(0.1), NMSTHead(0.1), STHead(0.2, eos_id=0)])
def test_module_gradients_with_context_match_finite_differences(layer):
    logits = _logits(14, (3, 5, 4), scale=2.0).requires_grad_()
    mask = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda z: _finite_part(layer(z, mask)), (logits,), fast_mode=True)


def _plain_autograd_st(logits, eos_id, eps):
    # the same definition through ordinary autograd ops, as a second gradient reference
    log_keep = torch.cumsum(math.log1p(-eps) + torch.nn.functional.logsigmoid(logits[..., eos_id]), -1)
    masked = logits.index_fill(-1, torch.tensor([eos_id]), -math.inf)
    rest = torch.log_softmax(masked, -1) + log_keep.unsqueeze(-1)
    log_p = torch.log(-torch.expm1(log_keep))
    return torch.cat([rest[..., :eos_id], log_p.unsqueeze(-1), rest[..., eos_id + 1 :]], -1)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_st_gradient_agrees_with_plain_autograd_in_float32_and_float64(dtype):
    logits = _logits(15, (4, 8, 30), dtype=dtype)
    targets = _random_targets((4, 8), 30, seed=1)
    grads = []
    for fn in (lambda z: st_log_probs(z, 29, 5e-4), lambda z: _plain_autograd_st(z, 29, 5e-4)):
        z = logits.clone().requires_grad_()
        (-fn(z).gather(-1, targets.unsqueeze(-1)).mean()).backward()
        grads.append(z.grad)
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(grads[0], grads[1], rtol=tol, atol=tol)


def test_backward_twice_with_retained_graph_gives_the_same_gradients():
    logits = _logits(16, (2, 5, 7)).requires_grad_()
    out = st_log_probs(logits, 6, 1e-3)
    weights = _logits(17, (2, 5, 7))
    (g1,) = torch.autograd.grad(out, logits, weights, retain_graph=True)
    (g2,) = torch.autograd.grad(out, logits, weights)
    assert torch.equal(g1, g2)


def test_outputs_do_not_depend_on_whether_gradients_are_tracked_and_inputs_are_untouched():
    logits = _logits(18, (2, 5, 7))
    before = logits.clone()
    for fn in (lambda z: st_log_probs(z, 2, 1e-3), lambda z: nmst_log_probs(z, 2, 1e-3)):
        tracked = fn(logits.clone().requires_grad_())
        with torch.no_grad():
            untracked = fn(logits)
        assert torch.equal(tracked.detach(), untracked)
    assert torch.equal(logits, before)


def test_any_leading_batch_shape_is_the_same_as_one_row_at_a_time():
    logits = _logits(19, (2, 3, 6, 5))
    for fn in (lambda z: st_log_probs(z, 4, 1e-3), lambda z: nmst_log_probs(z, 4, 1e-3), STHead(1e-3), NMSTHead(1e-3)):
        whole = fn(logits)
        for i in range(2):
            for j in range(3):
                torch.testing.assert_close(whole[i, j], fn(logits[i, j]), rtol=0, atol=1e-15)


# --------------------------------------------------------------------------- context mask


@pytest.mark.parametrize("layer", [STHead(1e-3), NMSTHead(1e-3)])
def test_context_positions_carry_no_eos_mass(layer):
    logits = _logits(20, (2, 6, 5))
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    out = layer(logits, mask)
    assert (out[..., 4][mask] == -math.inf).all() and torch.isfinite(out[..., 4][~mask]).all()
    non_eos = torch.log_softmax(logits[..., :4], -1)
    torch.testing.assert_close(out[..., :4][mask], non_eos[mask], rtol=0, atol=1e-14)


@pytest.mark.parametrize("layer", [STHead(5e-4), NMSTHead(5e-4), STHead(0.1, eos_id=0), NMSTHead(0.1, eos_id=2)])
def test_steps_restart_at_the_first_continuation_position_whatever_the_context_length(layer):
    logits = _logits(21, (4, 9, 5))
    lengths = [0, 1, 3, 6]  # e.g. left-padded short lines and full contexts: only the mask matters
    mask = torch.arange(9).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    out = layer(logits, mask)
    for b, k in enumerate(lengths):
        torch.testing.assert_close(out[b, k:], layer(logits[b : b + 1, k:])[0], rtol=0, atol=1e-14)


def test_st_running_product_skips_context_positions_against_the_written_out_definition():
    eps = 1e-3
    logits = _logits(22, (1, 7, 4))
    mask = torch.tensor([[1, 1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    out = STHead(eps)(logits, mask)
    expected = naive_st_probs(logits[:, 2:], 3, eps)  # the context's eos logits play no part
    torch.testing.assert_close(out[:, 2:].exp(), expected, rtol=1e-10, atol=0)
    nmst = NMSTHead(eps)(logits, mask)
    expected = naive_nmst_probs(logits, 3, eps, lambda b, t: t - 1)  # t = 1 at position 2
    torch.testing.assert_close(nmst[:, 2:].exp(), expected[:, 2:], rtol=1e-10, atol=0)


def test_vanilla_head_is_log_softmax_and_has_no_steps():
    logits = _logits(23, (2, 5, 6))
    mask = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    expected = torch.log_softmax(logits, -1)
    assert torch.equal(VanillaHead()(logits, mask), expected)
    assert torch.equal(VanillaHead()(logits), expected)
    assert torch.equal(vanilla_log_probs(logits), expected)


def test_context_mask_of_wrong_type_or_shape_is_rejected():
    logits = _logits(24, (2, 5, 6))
    for layer in (VanillaHead(), STHead(0.1), NMSTHead(0.1)):
        with pytest.raises(TypeError, match="context_mask"):
            layer(logits, torch.zeros(2, 5))
        with pytest.raises(ValueError, match="context_mask"):
            layer(logits, torch.zeros(2, 4, dtype=torch.bool))


# --------------------------------------------------------------------------- incremental decoding


@pytest.mark.parametrize(
    "layer", [VanillaHead(), STHead(5e-4), NMSTHead(5e-4), STHead(0.1, eos_id=1), NMSTHead(1e-5, eos_id=1)]
)
def test_step_by_step_decoding_agrees_with_forward(layer):
    logits = _logits(25, (3, 10, 6), scale=4.0)
    state = layer.initial_step_state(3, logits.device)
    for t in range(10):
        log_probs, state = layer.step(logits[:, t], state)
        torch.testing.assert_close(log_probs, layer(logits)[:, t], rtol=0, atol=1e-14)
    # with a context: forward's continuation positions are the steps
    mask = torch.arange(10).unsqueeze(0) < 4
    mask = mask.expand(3, 10)
    with_context = layer(logits, mask)
    state = layer.initial_step_state(3, logits.device)
    for t in range(4, 10):
        log_probs, state = layer.step(logits[:, t], state)
        torch.testing.assert_close(log_probs, with_context[:, t], rtol=0, atol=1e-14)


@pytest.mark.parametrize("layer", [STHead(0.1), NMSTHead(0.1)])
def test_gradients_of_step_by_step_decoding_equal_those_of_forward(layer):
    # ST's state carries earlier eos logits: their gradient must flow through it
    logits = _logits(28, (3, 5, 6)).requires_grad_()
    weights = _logits(29, (3, 5, 6))
    (forward_grad,) = torch.autograd.grad((layer(logits) * weights).sum(), logits)
    state, total = layer.initial_step_state(3, "cpu"), 0.0
    for t in range(5):
        log_probs, state = layer.step(logits[:, t], state)
        total = total + (log_probs * weights[:, t]).sum()
    (step_grad,) = torch.autograd.grad(total, logits)
    torch.testing.assert_close(step_grad, forward_grad, rtol=0, atol=1e-13)


@pytest.mark.parametrize("layer", [VanillaHead(), STHead(0.1), NMSTHead(0.1)])
def test_step_state_is_a_batch_first_tensor_that_select_can_index(layer):
    logits = _logits(26, (4, 5))
    state = layer.initial_step_state(4, "cpu")
    assert isinstance(state, torch.Tensor) and state.shape == (4,)
    _, state = layer.step(logits, state)
    _, state = layer.step(logits, state)
    assert state.shape == (4,)
    index = torch.tensor([2, 2, 0])
    picked, _ = layer.step(logits[index], state[index])
    full, _ = layer.step(logits, state)
    torch.testing.assert_close(picked, full[index], rtol=0, atol=0)


def test_step_states_are_the_running_product_and_the_step_count():
    logits = _logits(27, (2, 3, 4))
    st_state = STHead(0.1).initial_step_state(2, "cpu")
    nmst_state = NMSTHead(0.1).initial_step_state(2, "cpu")
    assert torch.equal(st_state, torch.zeros(2)) and torch.equal(nmst_state, torch.zeros(2, dtype=torch.long))
    for t in range(3):
        _, st_state = STHead(0.1).step(logits[:, t], st_state)
        _, nmst_state = NMSTHead(0.1).step(logits[:, t], nmst_state)
    keep = torch.ones(2, dtype=F64)
    for t in range(3):
        keep = keep * 0.9 * torch.sigmoid(logits[:, t, 3])
    torch.testing.assert_close(st_state.exp(), keep, rtol=1e-12, atol=0)
    assert nmst_state.tolist() == [3, 3]


def test_step_rejects_wrong_shapes():
    layer = STHead(0.1)
    with pytest.raises(ValueError, match=r"\[B, V\]"):
        layer.step(torch.zeros(2, 3, 4), torch.zeros(2))
    with pytest.raises(ValueError, match="state"):
        layer.step(torch.zeros(2, 4), torch.zeros(3))
    with pytest.raises(ValueError, match="batch_size"):
        layer.initial_step_state(-1, "cpu")


@pytest.mark.parametrize("make", [lambda: NMSTHead(0.1), lambda: NMSTEntmaxHead(0.1, 1.5)])
def test_nmst_step_refuses_a_negative_or_non_integer_step_count(make):
    layer = make()
    logits = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"steps taken so far: it must be >= 0 .* got -4"):
        layer.step(logits, torch.tensor([0, -4]))  # t = -3 would give (1 - eps)^-3 > 1: NaN
    for state in (torch.tensor([1.5, 0.0]), torch.tensor([1.0, 0.0], dtype=F64), torch.tensor([True, False])):
        with pytest.raises(TypeError, match=rf"must be an integer tensor .* got dtype {state.dtype}"):
            layer.step(logits, state)
    # the state of initial_step_state and of step passes, any integer dtype too
    _, state = layer.step(logits, layer.initial_step_state(2))
    layer.step(logits, state.int())


def test_st_step_refuses_an_integer_positive_or_nan_running_log_product():
    layer = STHead(0.1)
    logits = torch.zeros(2, 4)
    with pytest.raises(TypeError, match=r"floating-point tensor .* got dtype torch.int64"):
        layer.step(logits, torch.zeros(2, dtype=torch.long))
    for bad in (0.5, math.nan):
        with pytest.raises(ValueError, match="must be <= 0 and not NaN"):
            layer.step(logits, torch.tensor([0.0, bad]))
    # -inf (p(eos) = 1 reached: an eos logit of -inf) is a valid state
    log_probs, state = layer.step(logits, torch.tensor([0.0, -math.inf]))
    assert log_probs[1, 3] == 0.0 and state[1] == -math.inf


# --------------------------------------------------------------------------- argument checks


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, float("nan")])
def test_eps_outside_the_open_unit_interval_is_rejected(bad):
    logits = torch.zeros(2, 3, 4)
    for call in (
        lambda: st_log_probs(logits, 3, bad),
        lambda: nmst_log_probs(logits, 3, bad),
        lambda: STHead(bad),
        lambda: NMSTHead(bad),
        lambda: head_from_name("st", eps=bad),
        lambda: st_eos_log_probs(logits[..., 3], bad),
    ):
        with pytest.raises(ValueError, match="eps"):
            call()


def test_eps_that_is_not_a_number_is_rejected():
    for call in (lambda: st_log_probs(torch.zeros(2, 3, 4), 3, "a"), lambda: NMSTHead("a")):
        with pytest.raises(TypeError, match="eps"):
            call()


def test_eos_id_out_of_range_is_rejected():
    logits = torch.zeros(2, 3, 4)
    for bad in (4, 10, -1, -5):
        for fn in (st_log_probs, nmst_log_probs):
            with pytest.raises(ValueError, match="eos_id"):
                fn(logits, bad, 0.1)
    with pytest.raises(TypeError, match="eos_id"):
        st_log_probs(logits, 1.5, 0.1)
    with pytest.raises(ValueError, match="eos_id"):
        STHead(0.1, eos_id=4)(logits)
    with pytest.raises(ValueError, match="eos_id"):
        NMSTHead(0.1, eos_id=-2)
    with pytest.raises(TypeError, match="eos_id"):
        VanillaHead(eos_id=2.0)
    assert torch.equal(STHead(0.1)(logits), st_log_probs(logits, 3, 0.1))  # -1: the last id


def test_bad_logits_are_rejected():
    with pytest.raises(TypeError, match="floating"):
        st_log_probs(torch.zeros(2, 3, 4, dtype=torch.long), 3, 0.1)
    with pytest.raises(TypeError, match="torch.Tensor"):
        vanilla_log_probs([[0.0, 1.0]])
    with pytest.raises(ValueError, match="at least 2 dims"):
        st_log_probs(torch.zeros(4), 3, 0.1)
    with pytest.raises(ValueError, match="at least 2 dims"):
        NMSTHead(0.1)(torch.zeros(4))
    with pytest.raises(ValueError, match="non-eos"):
        nmst_log_probs(torch.zeros(2, 1), 0, 0.1)


def test_bad_steps_are_rejected():
    logits = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="t must be >= 0"):
        nmst_log_probs(logits, 3, 0.1, t=-1)
    with pytest.raises(ValueError, match="t must be >= 0"):
        nmst_log_probs(logits, 3, 0.1, t=torch.tensor([1, -1, 2]))
    with pytest.raises(ValueError, match="broadcast"):
        nmst_log_probs(logits, 3, 0.1, t=torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="t must be"):
        nmst_log_probs(logits, 3, 0.1, t=1.5)
    with pytest.raises(TypeError, match="t must be"):
        nmst_log_probs(logits, 3, 0.1, t=torch.tensor([True, False, True]))


# --------------------------------------------------------------------------- factory and attributes


@pytest.mark.parametrize(
    "name, cls, label",
    [("vanilla", VanillaHead, "VA"), ("VA", VanillaHead, "VA"), ("St", STHead, "ST"), ("NMST", NMSTHead, "NMST")],
)
def test_head_from_name_builds_the_named_layer(name, cls, label):
    eps = None if cls is VanillaHead else 1e-4
    layer = head_from_name(name, eps=eps, eos_id=3)
    assert type(layer) is cls and isinstance(layer, OutputHead)
    assert layer.name == label and layer.eps == eps and layer.eos_id == 3
    assert "eos_id=3" in repr(layer) and (eps is None or "eps=0.0001" in repr(layer))


def test_head_from_name_rejects_unknown_names_and_missing_or_extra_eps():
    with pytest.raises(ValueError, match="allowed names: nmst, st, va, vanilla"):
        head_from_name("softmax")
    with pytest.raises(TypeError, match="string"):
        head_from_name(3)
    with pytest.raises(ValueError, match="needs eps"):
        head_from_name("nmst")
    with pytest.raises(ValueError, match="no eps"):
        head_from_name("vanilla", eps=1e-4)


# ------------------------------------------- the eos rules and the vanilla layer at |logit| = 1e4 in float32


def _eos_logits_1e4(seed: int) -> torch.Tensor:
    """float32 eos logits [3, 20]: saturated rows (+1e4, -1e4), a row that alternates, and ordinary values."""
    g = torch.Generator().manual_seed(seed)
    z = 5 * torch.randn(3, 20, generator=g)
    z[0, :10] = 1e4
    z[1, 5:] = -1e4
    z[2, ::2] = 1e4
    z[2, 1::4] = -1e4
    return z.float()


def _ln(x: Decimal) -> float:
    return float(x.ln()) if x > 0 else -math.inf


@pytest.mark.parametrize("eps", [1e-5, 1e-3])
def test_st_eos_log_probs_at_logits_of_1e4_in_float32_match_the_running_product_in_50_digits(eps):
    # Welleck et al. (2020), Def. 4.3; Choi, Cho, Lee (2023), eq. 9:
    # 1 - p(eos at t) = prod_{s <= t} (1 - eps) sigma(z_s)
    getcontext().prec = 50
    z = _eos_logits_1e4(1)
    log_p, log_keep = st_eos_log_probs(z, eps)
    assert log_p.dtype == torch.float32 and torch.isfinite(log_keep).all() and not log_p.isnan().any()
    want_p, want_keep = torch.empty(z.shape, dtype=F64), torch.empty(z.shape, dtype=F64)
    for b in range(z.shape[0]):
        keep = Decimal(1)
        for t in range(z.shape[1]):
            keep *= (1 - Decimal(eps)) * _sigmoid(float(z[b, t]))
            want_keep[b, t], want_p[b, t] = _ln(keep), _ln(1 - keep)
    torch.testing.assert_close(log_keep.to(F64), want_keep, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(log_p.to(F64), want_p, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eps", [1e-5, 1e-3])
def test_nmst_eos_log_probs_at_logits_of_1e4_in_float32_match_eq_10_in_50_digits(eps):
    # Choi, Cho, Lee (2023), eq. 10: p(eos at t) = sigma(z) + (1 - sigma(z)) (1 - (1 - eps)^t)
    getcontext().prec = 50
    z = _eos_logits_1e4(2)
    for t in (None, 0, 7, torch.full((3, 20), 10**6)):
        log_p, log_keep = nmst_eos_log_probs(z, eps, t)
        assert not log_p.isnan().any() and not log_keep.isnan().any()
        want_p, want_keep = torch.empty(z.shape, dtype=F64), torch.empty(z.shape, dtype=F64)
        for b in range(z.shape[0]):
            for s in range(z.shape[1]):
                step = s + 1 if t is None else int(t if isinstance(t, int) else t[b, s])
                sig = _sigmoid(float(z[b, s]))
                one_minus_sig = 1 / (1 + Decimal(float(z[b, s])).exp())  # not 1 - sig: 0 at z = 1e4
                keep = one_minus_sig * (1 - Decimal(eps)) ** step  # 1 - p(eos)
                want_p[b, s], want_keep[b, s] = _ln(sig + one_minus_sig * (1 - (1 - Decimal(eps)) ** step)), _ln(keep)
        torch.testing.assert_close(log_keep.to(F64), want_keep, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(log_p.to(F64), want_p, rtol=1e-5, atol=1e-5)


def test_vanilla_log_probs_at_logits_of_1e4_in_float32_match_a_float64_log_softmax_written_out():
    g = torch.Generator().manual_seed(4)
    z = (3 * torch.randn(4, 30, generator=g)).float()
    z[0, 3], z[0, 7] = 1e4, -1e4
    z[1] = -1e4
    z[1, 0] = -1e4 + 0.5
    z[2, ::3] = 1e4
    z[3, :] = torch.linspace(-1e4, 1e4, 30)
    got = vanilla_log_probs(z)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    want = torch.empty(z.shape, dtype=F64)
    for r, row in enumerate(z.tolist()):  # the float32 values, exactly, in float64
        top = max(row)
        log_norm = top + math.log(math.fsum(math.exp(x - top) for x in row))
        want[r] = torch.tensor([x - log_norm for x in row], dtype=F64)
    torch.testing.assert_close(got.to(F64), want, rtol=1e-6, atol=1e-5)
    assert float(got[0, 3]) == 0.0 and float(got[0, 7]) == -2e4
