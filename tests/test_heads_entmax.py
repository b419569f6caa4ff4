"""Tests for the sparse output layers of nmst_lib.heads (Chapter 8, 08_sparse): the entmax head
(Martins et al. (2020), eq. 3, trained with the Fenchel-Young loss of eqs. 5-6), the NMST-entmax
head (NMST's eos probability, Choi, Cho, Lee (2023) Def. 6, with alpha-entmax over the other
tokens) and ``OutputHead.token_losses``.

References are written out independently in float64: alpha-entmax by bisection on the
threshold tau of ``sum_v [(alpha - 1) z_v - tau]_+^{1/(alpha-1)} = 1`` (200 halvings), the
NMST eos rule from the printed formula, the Fenchel-Young loss from its definition.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.heads import (
    EntmaxHead,
    NMSTEntmaxHead,
    NMSTHead,
    OutputHead,
    STHead,
    VanillaHead,
    entmax_log_probs,
    head_from_name,
    nmst_entmax_log_probs,
)

F64 = torch.float64
ALPHAS = [1.2, 1.5, 2.0]


pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------- naive references


def naive_entmax(z: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha-entmax along the last dim by bisection on tau, float64; alpha = 1 is the softmax."""
    z = z.to(F64)
    if alpha == 1.0:
        return torch.softmax(z, -1)
    u = (alpha - 1) * z
    finite = torch.isfinite(u)
    top = u.masked_fill(~finite, -math.inf).amax(-1, keepdim=True)
    lo, hi = top - 1, top  # sum >= 1 at tau = max - 1, sum = 0 at tau = max
    for _ in range(200):
        mid = (lo + hi) / 2
        mass = torch.where(finite, (u - mid).clamp(min=0), 0.0).pow(1 / (alpha - 1)).sum(-1, keepdim=True)
        lo, hi = torch.where(mass >= 1, mid, lo), torch.where(mass >= 1, hi, mid)
    p = torch.where(finite, (u - (lo + hi) / 2).clamp(min=0), 0.0).pow(1 / (alpha - 1))
    return p / p.sum(-1, keepdim=True)


def naive_fenchel_young(z: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """L(z; y) = (p - e_y) . z + H^T_alpha(p), p = entmax(z) (Martins et al. 2020, eqs. 5-6)."""
    z = z.to(F64)
    p = naive_entmax(z, alpha)
    pz = torch.where(p > 0, p * z, 0.0).sum(-1)
    zy = z.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    if alpha == 1.0:
        entropy = -torch.special.xlogy(p, p).sum(-1)
    else:
        entropy = (1 - p.pow(alpha).sum(-1)) / (alpha * (alpha - 1))
    return pz - zy + entropy


def naive_nmst_eos(z_eos: torch.Tensor, t: torch.Tensor, eps: float) -> torch.Tensor:
    """Choi, Cho, Lee (2023) eq. 10 as printed: (1 - sigma(z)) (1 - (1 - eps)^t) + sigma(z)."""
    sigma = torch.sigmoid(z_eos.to(F64))
    return (1 - sigma) * (1 - (1 - eps) ** t.to(F64)) + sigma


def naive_nmst_entmax(z: torch.Tensor, eps: float, alpha: float) -> torch.Tensor:
    """Probabilities [B, T, V] of NMST-entmax, eos last, t = 1..T along dim -2."""
    z = z.to(F64)
    t = torch.arange(1, z.shape[-2] + 1, dtype=F64).expand(z.shape[:-1])
    p_eos = naive_nmst_eos(z[..., -1], t, eps)
    q = naive_entmax(z[..., :-1], alpha)
    return torch.cat([(1 - p_eos).unsqueeze(-1) * q, p_eos.unsqueeze(-1)], dim=-1)


def random_logits(shape, scale=3.0, seed=0, dtype=F64):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype) * scale


# --------------------------------------------------------------------------- entmax head


@pytest.mark.parametrize("alpha", [1.0, *ALPHAS])
def test_entmax_head_is_log_entmax_of_the_naive_reference(alpha):
    z = random_logits((3, 6, 11))
    head = EntmaxHead(alpha)
    log_probs = head(z)
    reference = naive_entmax(z, alpha)
    torch.testing.assert_close(log_probs.exp(), reference, atol=1e-10, rtol=0)
    if alpha > 1:  # exactly -inf outside the support, finite inside
        assert torch.equal(log_probs == -math.inf, reference == 0)
        assert bool((reference == 0).any()), "precondition: some tokens outside the support"
    assert torch.equal(entmax_log_probs(z, alpha), log_probs)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_entmax_probabilities_sum_to_one(alpha):
    z64 = random_logits((4, 7, 50), scale=5.0)
    assert (EntmaxHead(alpha)(z64).exp().sum(-1) - 1).abs().max() < 1e-12
    z32 = z64.float()
    assert (EntmaxHead(alpha)(z32).exp().sum(-1) - 1).abs().max() < 1e-6


def test_entmax_head_with_alpha_one_is_the_vanilla_head_and_its_loss_the_nll():
    z = random_logits((2, 5, 9))
    y = torch.randint(0, 9, (2, 5), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(EntmaxHead(1.0)(z), VanillaHead()(z), atol=1e-14, rtol=0)
    torch.testing.assert_close(EntmaxHead(1.0).token_losses(z, y), VanillaHead().token_losses(z, y), atol=1e-13, rtol=0)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_entmax_token_losses_are_the_fenchel_young_loss(alpha):
    z = random_logits((3, 5, 13), seed=2)
    y = torch.randint(0, 13, (3, 5), generator=torch.Generator().manual_seed(3))
    losses = EntmaxHead(alpha).token_losses(z, y)
    assert losses.shape == (3, 5)
    torch.testing.assert_close(losses, naive_fenchel_young(z, y, alpha), atol=1e-10, rtol=0)
    assert bool((losses >= -1e-12).all())


@pytest.mark.parametrize("alpha", ALPHAS)
def test_entmax_token_losses_are_finite_for_targets_outside_the_support(alpha):
    z = torch.tensor([[[8.0, 0.0, -5.0, 1.0]]], dtype=F64)
    head = EntmaxHead(alpha)
    assert head(z)[0, 0, 2] == -math.inf  # precondition: token 2 has probability zero
    loss = head.token_losses(z, torch.tensor([[2]]))
    assert torch.isfinite(loss).all() and float(loss) > 0


def test_entmax_head_step_equals_forward_per_position():
    z = random_logits((3, 4, 10))
    for alpha in ALPHAS:
        head = EntmaxHead(alpha)
        full = head(z)
        state = head.initial_step_state(3)
        for j in range(4):
            lp, state = head.step(z[:, j], state)
            assert torch.equal(lp, full[:, j])


def test_entmax_head_checks_its_context_mask():
    head = EntmaxHead(1.5)
    z = random_logits((2, 3, 5))
    mask = torch.tensor([[True, False, False]] * 2)
    assert torch.equal(head(z, mask), head(z))  # no notion of steps, like the vanilla head
    with pytest.raises(TypeError, match="bool"):
        head(z, mask.long())
    with pytest.raises(ValueError, match="shape"):
        head(z, mask[:, :2])


# --------------------------------------------------------------------------- NMST-entmax head


@pytest.mark.parametrize("alpha", [1.0, *ALPHAS])
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_nmst_entmax_matches_the_naive_reference(alpha, eps):
    z = random_logits((2, 6, 12), seed=4)
    log_probs = NMSTEntmaxHead(eps, alpha)(z)
    reference = naive_nmst_entmax(z, eps, alpha)
    torch.testing.assert_close(log_probs.exp(), reference, atol=1e-10, rtol=0)
    assert torch.equal(log_probs == -math.inf, reference == 0)
    torch.testing.assert_close(nmst_entmax_log_probs(z, -1 % 12, eps, alpha), log_probs, atol=0, rtol=0)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_nmst_entmax_eos_probability_is_exactly_nmsts(alpha):
    z = random_logits((3, 7, 9), seed=5)
    mask = torch.arange(7).expand(3, 7) < torch.tensor([[0], [2], [4]])
    for context_mask in (None, mask):
        ours = NMSTEntmaxHead(0.01, alpha, eos_id=3)(z, context_mask)
        nmst = NMSTHead(0.01, eos_id=3)(z, context_mask)
        assert torch.equal(ours[..., 3], nmst[..., 3])


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_nmst_entmax_eos_never_below_the_nmst_floor(dtype):
    eps = 1e-5
    z = random_logits((2, 50, 20), scale=1e4, seed=6, dtype=dtype)
    z[..., -1] = -1e4  # the eos logit as low as it gets: p(eos) = f_lb(t) exactly
    log_probs = NMSTEntmaxHead(eps, 1.5)(z)
    t = torch.arange(1, 51, dtype=F64)
    floor = -torch.expm1(t * math.log1p(-eps))
    p_eos = log_probs[..., -1].to(F64).exp()
    assert bool(torch.isfinite(log_probs[..., -1]).all())
    tol = 1e-6 if dtype == torch.float32 else 1e-15
    assert bool((p_eos >= floor * (1 - tol)).all())
    torch.testing.assert_close(p_eos, floor.expand_as(p_eos), rtol=tol, atol=0)
    sums = log_probs.exp().sum(-1)
    assert (sums - 1).abs().max() < (1e-6 if dtype == torch.float32 else 1e-12)


def test_nmst_entmax_context_positions_have_no_eos_mass():
    z = random_logits((2, 5, 8), seed=7)
    mask = torch.tensor([[True, True, False, False, False], [True, False, False, False, False]])
    log_probs = NMSTEntmaxHead(0.05, 1.5)(z, mask)
    assert bool((log_probs[..., -1][mask] == -math.inf).all())
    expected = torch.cat([naive_entmax(z[..., :-1], 1.5), torch.zeros(2, 5, 1, dtype=F64)], -1)  # entmax over non-eos
    torch.testing.assert_close(log_probs[mask].exp(), expected[mask], atol=1e-12, rtol=0)
    # the first False position of each row is step t = 1
    first = naive_nmst_eos(z[0, 2, -1], torch.tensor(1.0), 0.05)
    torch.testing.assert_close(log_probs[0, 2, -1].exp(), first, atol=1e-15, rtol=0)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_nmst_entmax_step_equals_forward_per_position(alpha):
    z = random_logits((3, 6, 10), seed=8)
    head = NMSTEntmaxHead(0.02, alpha)
    full = head(z)
    state = head.initial_step_state(3)
    assert state.dtype == torch.long and torch.equal(state, torch.zeros(3, dtype=torch.long))
    for j in range(6):
        lp, state = head.step(z[:, j], state)
        # float64 precision: the exact entmax threshold (Newton) may differ by an ulp between a
        # [3, V] and an [18, V] batch (row sums round by batch shape), and log p = log(u)/(alpha-1)
        # with u = (alpha-1) z - tau small amplifies it to a few ulps of log p (~20 here)
        torch.testing.assert_close(lp, full[:, j], atol=1e-14, rtol=1e-14)
    assert torch.equal(state, torch.full((3,), 6))


def test_nmst_entmax_with_alpha_one_is_nmst():
    z = random_logits((2, 6, 9), seed=9)
    y = torch.randint(0, 9, (2, 6), generator=torch.Generator().manual_seed(1))
    y[0, -1] = 8
    torch.testing.assert_close(NMSTEntmaxHead(0.1, 1.0)(z), NMSTHead(0.1)(z), atol=1e-14, rtol=0)
    torch.testing.assert_close(NMSTEntmaxHead(0.1, 1.0).token_losses(z, y), NMSTHead(0.1).token_losses(z, y),
                               atol=1e-13, rtol=0)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_nmst_entmax_token_losses_are_stop_nll_plus_conditional_fenchel_young(alpha):
    eps = 0.03
    z = random_logits((3, 6, 10), seed=10)
    y = torch.randint(0, 10, (3, 6), generator=torch.Generator().manual_seed(11))
    y[:, 2] = 9  # some eos targets
    losses = NMSTEntmaxHead(eps, alpha).token_losses(z, y)
    t = torch.arange(1, 7, dtype=F64).expand(3, 6)
    p_eos = naive_nmst_eos(z[..., -1], t, eps)
    fy = naive_fenchel_young(z[..., :-1], y.clamp(max=8), alpha)
    expected = torch.where(y == 9, -p_eos.log(), -(1 - p_eos).log() + fy)
    torch.testing.assert_close(losses, expected, atol=1e-10, rtol=0)


@pytest.mark.parametrize("alpha", [1.5, 2.0])
def test_token_losses_pass_gradcheck_in_float64(alpha):
    z = random_logits((2, 3, 6), scale=1.0, seed=12).requires_grad_()
    y = torch.tensor([[1, 5, 2], [0, 5, 3]])  # eos (5) only at steps: a context position has no eos mass
    mask = torch.tensor([[True, False, False], [False, False, False]])
    assert torch.autograd.gradcheck(lambda x: EntmaxHead(alpha).token_losses(x, y), (z,))
    assert torch.autograd.gradcheck(lambda x: NMSTEntmaxHead(0.1, alpha).token_losses(x, y, mask), (z,))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_nmst_entmax_loss_gradient_is_conditional_residual_and_bernoulli(alpha):
    eps = 0.05
    z = random_logits((1, 4, 7), seed=13).requires_grad_()
    y = torch.tensor([[2, 6, 0, 4]])  # eos (6) at step 2
    NMSTEntmaxHead(eps, alpha).token_losses(z, y).sum().backward()
    zd = z.detach()
    q = naive_entmax(zd[..., :-1], alpha)
    b = (y == 6).to(F64)
    onehot = torch.nn.functional.one_hot(y.clamp(max=5), 6).to(F64)
    torch.testing.assert_close(z.grad[..., :-1], (1 - b).unsqueeze(-1) * (q - onehot), atol=1e-10, rtol=0)
    # eos logit, continuing steps: d(-log(1 - pi))/dz = sigma(z_eos)
    sigma = torch.sigmoid(zd[..., -1])
    keep = y != 6
    torch.testing.assert_close(z.grad[..., -1][keep], sigma[keep], atol=1e-12, rtol=0)
    # eos target: -d log pi / dz with pi = sigma + (1 - sigma) f, f = 1 - (1 - eps)^t
    f = 1 - (1 - eps) ** 2
    s = sigma[0, 1]
    pi = s + (1 - s) * f
    torch.testing.assert_close(z.grad[0, 1, -1], -(s * (1 - s) * (1 - f)) / pi, atol=1e-12, rtol=0)


@pytest.mark.parametrize("head", [EntmaxHead(1.5), NMSTEntmaxHead(1e-5, 1.5), NMSTEntmaxHead(1e-5, 2.0)])
def test_sparse_heads_stay_finite_at_extreme_float32_logits(head):
    z = random_logits((2, 8, 30), scale=1e4, seed=14, dtype=torch.float32).requires_grad_()
    y = torch.randint(0, 30, (2, 8), generator=torch.Generator().manual_seed(15))
    y[:, 3] = 29
    log_probs = head(z.detach())
    assert not bool(torch.isnan(log_probs).any())
    assert (log_probs.exp().sum(-1) - 1).abs().max() < 1e-6
    losses = head.token_losses(z, y)
    assert bool(torch.isfinite(losses).all())
    losses.sum().backward()
    assert bool(torch.isfinite(z.grad).all())


# --------------------------------------------------------------------------- token_losses of VA/ST/NMST


@pytest.mark.parametrize("head", [VanillaHead(), STHead(0.02), NMSTHead(0.02)])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_default_token_losses_reproduce_the_models_nll_to_rounding(head, dtype):
    # what RecurrentLM.token_nll computes: -(log_probs[scored].gather(targets[scored])).sum().
    # The fused loss takes the log-probabilities' own steps (test_heads_fused checks bit for bit);
    # here a tolerance of rounding is enough.
    z = random_logits((4, 9, 15), seed=16, dtype=dtype)
    targets = torch.randint(0, 15, (4, 9), generator=torch.Generator().manual_seed(17))
    context_mask = (torch.arange(9) < 3).expand(4, 9)
    scored = ~context_mask & (torch.arange(9) < torch.tensor([[9], [7], [5], [4]]))
    log_probs = head(z, context_mask)
    nll = -log_probs[scored].gather(-1, targets[scored].unsqueeze(-1)).squeeze(-1).sum()
    losses = head.token_losses(z, targets, context_mask)
    assert losses.shape == (4, 9)
    tol = 2e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(losses, -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1), rtol=tol, atol=tol)
    torch.testing.assert_close(losses[scored].sum(), nll, rtol=tol, atol=tol)


def test_token_losses_check_their_targets():
    z = random_logits((2, 3, 5))
    for head in (VanillaHead(), EntmaxHead(1.5), NMSTEntmaxHead(0.1, 1.5)):
        with pytest.raises(TypeError, match="integer"):
            head.token_losses(z, torch.zeros(2, 3))
        with pytest.raises(ValueError, match="shape"):
            head.token_losses(z, torch.zeros(2, 4, dtype=torch.long))
        with pytest.raises(ValueError, match=r"\[0, 5\)"):
            head.token_losses(z, torch.full((2, 3), 5))
    with pytest.raises(NotImplementedError):
        OutputHead().token_losses(z, torch.zeros(2, 3, dtype=torch.long))


# --------------------------------------------------------------------------- construction


def test_head_from_name_builds_the_sparse_heads():
    head = head_from_name("ENTMAX", alpha=1.5)
    assert isinstance(head, EntmaxHead) and head.name == "ENTMAX" and head.alpha == 1.5 and head.eps is None
    head = head_from_name(" nmst-entmax ", eps=1e-4, alpha=2, eos_id=3)
    assert isinstance(head, NMSTEntmaxHead) and head.name == "NMST-ENTMAX"
    assert (head.alpha, head.eps, head.eos_id) == (2.0, 1e-4, 3)
    assert "alpha=2" in repr(head)
    assert VanillaHead().alpha is None and NMSTHead(0.1).alpha is None


def test_head_from_name_says_what_is_missing_or_extra():
    with pytest.raises(ValueError, match="needs alpha"):
        head_from_name("entmax")
    with pytest.raises(ValueError, match="needs alpha"):
        head_from_name("nmst-entmax", eps=0.1)
    with pytest.raises(ValueError, match="needs eps"):
        head_from_name("nmst-entmax", alpha=1.5)
    with pytest.raises(ValueError, match="no eps"):
        head_from_name("entmax", eps=0.1, alpha=1.5)
    with pytest.raises(ValueError, match="no alpha"):
        head_from_name("nmst", eps=0.1, alpha=1.5)
    with pytest.raises(ValueError, match="no alpha"):
        head_from_name("va", alpha=1.5)
    with pytest.raises(ValueError, match="nmst-entmax"):
        head_from_name("sparsemax")


@pytest.mark.parametrize("alpha", [0.5, 0.999, -1.0, math.nan, math.inf])
def test_alpha_below_one_or_not_finite_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha"):
        EntmaxHead(alpha)
    with pytest.raises(ValueError, match="alpha"):
        NMSTEntmaxHead(0.1, alpha)
    with pytest.raises(ValueError, match="alpha"):
        entmax_log_probs(torch.zeros(3), alpha)


def test_alpha_of_the_wrong_type_is_refused():
    for alpha in ("1.5", True, None):
        with pytest.raises(TypeError, match="alpha"):
            EntmaxHead(alpha)


# --------------------------------------------------------------------------- property


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    alpha=st.sampled_from(ALPHAS),
    eps=st.sampled_from([1e-5, 1e-3, 0.2]),
    scale=st.sampled_from([0.1, 3.0, 100.0]),
    vocab=st.integers(2, 12),
)
def test_nmst_entmax_is_a_distribution_with_nmsts_eos(seed, alpha, eps, scale, vocab):
    z = random_logits((2, 4, vocab), scale=scale, seed=seed)
    log_probs = NMSTEntmaxHead(eps, alpha)(z)
    assert (log_probs.exp().sum(-1) - 1).abs().max() < 1e-12
    assert torch.equal(log_probs[..., -1], NMSTHead(eps)(z)[..., -1])
    assert bool((log_probs[..., :-1].exp() <= (1 - log_probs[..., -1].exp()).unsqueeze(-1) + 1e-15).all())


# --------------------------------------------------------------------------- models


SPARSE_HEADS = [("entmax", None, 1.5), ("nmst-entmax", 0.05, 1.5), ("nmst-entmax", 0.05, 2.0)]


def _steps_equal_forward(model, seq, k, tol):
    full = model(seq[:, :-1], (torch.arange(seq.shape[1] - 1) < k - 1).expand(seq.shape[0], -1))
    state, lp = model.initial_state(seq[:, :k])
    steps = [lp]
    for j in range(k, seq.shape[1] - 1):
        state, lp = model.step(state, seq[:, j])
        steps.append(lp)
    stepped = torch.stack(steps, 1)
    reference = full[:, k - 1:]
    # the same support, token for token (a sparse head's zeros are its point), then the same values
    assert torch.equal(stepped == -math.inf, reference == -math.inf), "step() and forward() keep different tokens"
    torch.testing.assert_close(stepped.exp(), reference.exp(), atol=tol, rtol=0)
    return full


@pytest.mark.parametrize("name,eps,alpha", SPARSE_HEADS)
def test_recurrent_models_run_the_sparse_heads(name, eps, alpha):
    from nmst_lib.models import build_model

    torch.manual_seed(0)
    V = 20
    model = build_model("lstm", V, hidden=16, layers=1, dropout=0.0,
                        head=head_from_name(name, eps=eps, alpha=alpha)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 1.0)
    seq = torch.randint(0, V - 1, (3, 9), generator=torch.Generator().manual_seed(1))
    full = _steps_equal_forward(model, seq, 4, tol=1e-5)
    assert bool((full == -math.inf).any()), "precondition: the sparse head gives zeros"
    if name == "nmst-entmax":
        assert bool(torch.isfinite(full[:, 3:, -1]).all())


@pytest.mark.parametrize("name,eps,alpha", SPARSE_HEADS[:2])
def test_gpt2_runs_the_sparse_heads(name, eps, alpha):
    pytest.importorskip("transformers")
    from nmst_lib.models import GPT2LM

    torch.manual_seed(0)
    model = GPT2LM.from_config(head_from_name(name, eps=eps, alpha=alpha), n_layer=1, n_embd=16, n_head=2,
                               n_positions=32).eval()
    seq = torch.randint(0, 50256, (2, 7), generator=torch.Generator().manual_seed(3))
    full = _steps_equal_forward(model, seq, 3, tol=1e-5)
    assert (full.exp().sum(-1) - 1).abs().max() < 1e-5
