"""Tests for nmst_lib.fused: the ST / NMST layers' NLL from one log-softmax pass over the non-eos logits.

The reference is the two-pass layer written out in float64 (a copy of the logits with eos set to
-inf, its log-softmax, plus log(1 - p(eos)) of the papers' eos rules: Welleck et al. (2020),
Def. 4.3; Choi, Cho, Lee (2023), Defs. 5-6), differentiated by autograd.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nmst_lib.fused import non_eos_log_softmax
from nmst_lib.heads import (
    NMSTHead,
    STHead,
    VanillaHead,
    nmst_log_probs,
    projected_nll_token_losses,
    st_log_probs,
)

F64 = torch.float64
V = 40
EOS = V - 1


def reference_log_probs(logits: torch.Tensor, head, context_mask=None) -> torch.Tensor:
    """The layer the naive way, in float64: log_softmax over the non-eos logits + log(1 - p(eos))."""
    z = logits.to(F64)
    is_step = torch.ones(z.shape[:-1], dtype=torch.bool) if context_mask is None else ~context_mask
    zeos = z[..., EOS]
    log1m_eps = math.log1p(-head.eps)
    if isinstance(head, STHead):  # 1 - p(eos at t) = prod_{s <= t} (1 - eps) sigma(z_s) over steps
        log_keep = torch.cumsum(torch.where(is_step, log1m_eps + F.logsigmoid(zeos), 0.0), dim=-1)
        log_p_eos = torch.log(-torch.expm1(log_keep))
    else:  # p(eos) = sigma + (1 - sigma)(1 - (1 - eps)^t), t = number of steps so far
        t = torch.cumsum(is_step, dim=-1).to(F64)
        log_keep = F.logsigmoid(-zeos) + t * log1m_eps
        log_p_eos = torch.logaddexp(F.logsigmoid(zeos), F.logsigmoid(-zeos) + torch.log(-torch.expm1(t * log1m_eps)))
    log_keep = torch.where(is_step, log_keep, 0.0)
    log_p_eos = torch.where(is_step, log_p_eos, -math.inf)
    masked = z.clone()
    masked[..., EOS] = -math.inf
    out = torch.log_softmax(masked, dim=-1) + log_keep.unsqueeze(-1)
    out[..., EOS] = log_p_eos
    return out


def extreme_logits(dtype=torch.float32, seed=0) -> torch.Tensor:
    """Random logits with planted extremes: eos at +-1e4 (eos-dominated rows and eos-free rows),
    a non-eos logit at 1e4, at -1e4, and a row where eos is just above the rest."""
    g = torch.Generator().manual_seed(seed)
    z = 3 * torch.randn(3, 9, V, generator=g, dtype=F64)
    z[0, 2, EOS] = 1e4  # eos dominates: exp(-1e4) of mass for the rest
    z[0, 5, EOS] = -1e4
    z[1, 1, 3] = 1e4  # a non-eos token dominates
    z[1, 4, :] = -1e4
    z[1, 4, 7] = 0.0
    z[2, 3, EOS] = z[2, 3, :EOS].logsumexp(-1) + 0.01  # just over half of the mass on eos
    z[2, 6, EOS] = z[2, 6, :EOS].logsumexp(-1) + 40.0
    return z.to(dtype)


def targets_for(z: torch.Tensor) -> torch.Tensor:
    y = torch.randint(0, V, z.shape[:-1], generator=torch.Generator().manual_seed(1))
    y[0, 2] = 5  # a non-eos target where eos dominates: -log p(y) ~ 1e4
    y[0, 3] = y[2, 6] = y[1, 1] = EOS
    y[1, 4] = 7
    return y


HEADS = [STHead(1e-5), NMSTHead(1e-5), STHead(0.1), NMSTHead(0.1)]
MASK = (torch.arange(9) < 2).expand(3, 9)


@pytest.mark.parametrize("head", HEADS, ids=lambda h: f"{h.name}-{h.eps:g}")
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-12), (torch.float32, 2e-6), (torch.bfloat16, 2e-6)])
@pytest.mark.parametrize("masked", [False, True])
def test_fused_log_probs_and_losses_match_the_two_pass_layer(head, dtype, tol, masked):
    z = extreme_logits(dtype)
    mask = MASK if masked else None
    y = targets_for(z)
    expected = reference_log_probs(z, head, mask)  # bfloat16 logits are exact in float64
    got = head(z, mask)
    assert got.dtype == (F64 if dtype == F64 else torch.float32)
    finite = torch.isfinite(expected)
    assert torch.equal(finite, torch.isfinite(got))
    # relative to the size of the log-probability (1e4 carries an absolute rounding error of ~1e-3 in float32)
    torch.testing.assert_close(got[finite].to(F64), expected[finite], rtol=tol, atol=tol)
    losses = head.token_losses(z, y, mask)
    # the fused loss and the float64 reference agree to rounding (bit for bit with the head's
    # own log-probabilities: test_the_fused_loss_is_the_layers_own_log_probability_bit_for_bit)
    torch.testing.assert_close(losses.to(F64), -expected.gather(-1, y.unsqueeze(-1)).squeeze(-1), rtol=tol, atol=tol)


@pytest.mark.parametrize("head", HEADS, ids=lambda h: f"{h.name}-{h.eps:g}")
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-12), (torch.float32, 2e-6)])
def test_fused_nll_gradient_matches_autograd_through_the_two_pass_layer(head, dtype, tol):
    z = extreme_logits(dtype)
    y = targets_for(z)
    w = torch.rand(y.shape, generator=torch.Generator().manual_seed(2), dtype=dtype)
    x = z.clone().requires_grad_()
    (grad,) = torch.autograd.grad((head.token_losses(x, y, MASK) * w).sum(), x)
    x64 = z.to(F64).requires_grad_()
    ref = -reference_log_probs(x64, head, MASK).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    (grad_ref,) = torch.autograd.grad((ref * w.to(F64)).sum(), x64)
    assert grad.dtype == dtype and bool(torch.isfinite(grad).all())
    torch.testing.assert_close(grad.to(F64), grad_ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("head", [STHead(0.05), NMSTHead(0.05)], ids=lambda h: h.name)
def test_fused_nll_passes_gradcheck_in_float64_with_eos_dominated_rows(head):
    z = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(3), dtype=F64)
    z[0, 1, 6] = 4.0  # eos holds most of the full softmax's mass
    z[1, 3, 6] = 6.0
    y = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(4))
    y[1, 2] = 6
    mask = (torch.arange(5) < 1).expand(2, 5)
    assert torch.autograd.gradcheck(lambda x: head.token_losses(x, y, mask), (z.clone().requires_grad_(),))
    assert torch.autograd.gradcheck(lambda x: head(x, mask).masked_fill(mask.unsqueeze(-1), 0.0),
                                    (z.clone().requires_grad_(),))


@pytest.mark.parametrize("inplace", [False, True])
def test_non_eos_log_softmax_is_exact_whatever_the_eos_logit_in_float32(inplace):
    """``log q`` never sees the eos logit: on a row where eos holds all but exp(-1e4) of the full
    softmax's mass it is as exact as on any other (a shift of the full log-softmax by
    log(1 - softmax_eos) would be -inf there, or off by ~1e-3 in float32); -inf in the eos column;
    the logits are overwritten only in place."""
    z = extreme_logits(torch.float32)
    before = z.clone()
    log_q = non_eos_log_softmax(z, EOS, inplace=inplace)
    exact = torch.log_softmax(before[..., :EOS].to(F64), -1)
    assert bool(torch.isneginf(log_q[..., EOS]).all())
    torch.testing.assert_close(log_q[..., :EOS].to(F64), exact, rtol=2e-6, atol=2e-6)
    assert (log_q.data_ptr() == z.data_ptr()) == inplace
    if not inplace:
        assert torch.equal(z, before)
    # the full log-softmax shifted per row would fail on the eos-dominated row (0, 2)
    full = torch.log_softmax(before, -1)
    shifted = full[0, 2, :EOS] - torch.log1p(-full[0, 2, EOS].exp())
    assert not bool(torch.isfinite(shifted).all()) or float((shifted.to(F64) - exact[0, 2]).abs().max()) > 1e-4


@pytest.mark.parametrize("head", [VanillaHead(), STHead(1e-5), NMSTHead(1e-4)], ids=lambda h: h.name)
def test_projected_fused_nll_matches_the_head_on_the_projected_logits_with_eos_dominated_rows(head):
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(2, 6, 8, generator=g)
    weight = torch.randn(V, 8, generator=g)
    weight[EOS] = 600 * hidden[0, 3] / hidden[0, 3].norm() ** 2  # eos logit 600 at (0, 3)
    y = torch.randint(0, V, (2, 6), generator=g)
    y[1, 2] = EOS
    h = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    losses = projected_nll_token_losses(head, h, w, y)
    losses.sum().backward()
    h2 = hidden.clone().requires_grad_()
    w2 = weight.clone().requires_grad_()
    logits = h2 @ w2.T
    ref = -head(logits).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    ref.sum().backward()
    if head.eps is not None:
        assert float(logits[0, 3, EOS].detach()) > 500  # eos holds all of the full softmax's mass there
    torch.testing.assert_close(losses, ref, rtol=1e-5, atol=1e-5)
    # float32 products of hidden states with an eos weight of norm ~200: sums round differently
    torch.testing.assert_close(h.grad, h2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-4, atol=1e-4)


def test_fused_layer_functions_keep_their_values_through_the_functional_api():
    z = extreme_logits(F64)
    torch.testing.assert_close(st_log_probs(z, EOS, 1e-5), STHead(1e-5)(z), rtol=0, atol=0)
    torch.testing.assert_close(nmst_log_probs(z, EOS, 1e-5), NMSTHead(1e-5)(z), rtol=0, atol=0)


@pytest.mark.parametrize("head", HEADS, ids=lambda h: f"{h.name}-{h.eps:g}")
@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_the_fused_loss_is_the_layers_own_log_probability_bit_for_bit(head, dtype):
    """``token_losses`` (the training loss) and ``-forward(z)[y]`` (the log-probabilities a model
    reports for decoding and evaluation) take the same steps (mask eos, log-softmax, add
    log(1 - p(eos))), so they agree exactly, eos-dominated rows included, with and without gradients."""
    z = extreme_logits(dtype)
    y = targets_for(z)
    expected = -head(z, MASK).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    assert torch.equal(head.token_losses(z, y, MASK), expected)
    assert torch.equal(head.token_losses(z.clone().requires_grad_(), y, MASK).detach(), expected)


def test_non_eos_log_softmax_refuses_bad_logits_eos_ids_and_flags():
    z = torch.randn(2, 5)
    for logits, error, words in [([0.1, 0.2], TypeError, "floating-point"),
                                 (torch.arange(5), TypeError, "floating-point"),
                                 (torch.zeros(3, 1), ValueError, r"size >= 2"),  # V = 1 gave NaN
                                 (torch.zeros(()), ValueError, r"size >= 2")]:
        with pytest.raises(error, match=words):
            non_eos_log_softmax(logits, 0)
    for eos_id, error in [(5, ValueError), (-1, ValueError), ([4], TypeError), (1.0, TypeError), (True, TypeError)]:
        with pytest.raises(error, match="eos_id"):
            non_eos_log_softmax(z, eos_id)
    with pytest.raises(TypeError, match="inplace"):
        non_eos_log_softmax(z, 4, inplace=1)
    # the checked function gives the heads' unchecked one bit for bit
    from nmst_lib.fused import _non_eos_log_softmax

    assert torch.equal(non_eos_log_softmax(z, 2), _non_eos_log_softmax(z, 2))


def test_fused_module_exports_only_the_checked_function():
    import nmst_lib.fused as fused

    assert fused.__all__ == ["non_eos_log_softmax"]
    for name in ("fused_nll_forward", "fused_nll_backward", "FusedNLL", "ProjectedFusedNLL"):
        assert not hasattr(fused, name)  # private (leading underscore): unchecked, the heads' path
