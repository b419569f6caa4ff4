"""nmst_lib.entmax (Chapter 8 (08_sparse)) against its definitions and the ``entmax`` package 1.3.

The package is a required test dependency (pyproject ``test`` extra): importing it must not be
skipped, so that a missing package fails CI instead of hiding these comparisons.
"""

from __future__ import annotations

import math

import entmax as pkg
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.entmax import (
    entmax,
    entmax15,
    entmax_bisect,
    entmax_loss,
    entmax_support,
    entmax_threshold,
    log_entmax,
    sparsemax,
    tsallis_entropy,
)

F64 = torch.float64
HYP = settings(max_examples=25, deadline=None)


def _pkg_loss(z, y, alpha):
    if alpha == 2.0:
        return pkg.sparsemax_loss(z, y)
    if alpha == 1.5:
        return pkg.entmax15_loss(z, y)
    return pkg.entmax_bisect_loss(z, y, alpha)


OURS_AND_PKG = {
    "sparsemax": (lambda z, d: sparsemax(z, dim=d), lambda z, d: pkg.sparsemax(z, dim=d)),
    "entmax15": (lambda z, d: entmax15(z, dim=d), lambda z, d: pkg.entmax15(z, dim=d)),
    "bisect1.3": (lambda z, d: entmax_bisect(z, 1.3, dim=d), lambda z, d: pkg.entmax_bisect(z, 1.3, dim=d)),
    "bisect2.5": (lambda z, d: entmax_bisect(z, 2.5, dim=d), lambda z, d: pkg.entmax_bisect(z, 2.5, dim=d)),
}


def _value_and_grad(fn, z, w):
    x = z.clone().requires_grad_()
    p = fn(x)
    (p * w).sum().backward()
    return p.detach(), x.grad


# ------------------------------------------------------------------------- package agreement
@pytest.mark.parametrize("name", list(OURS_AND_PKG))
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_forward_and_gradient_match_package_on_every_dim(name, dim):
    ours, ref = OURS_AND_PKG[name]
    g = torch.Generator().manual_seed(1)
    z = 2 * torch.randn(4, 6, 5, generator=g, dtype=F64)
    w = torch.randn(4, 6, 5, generator=g, dtype=F64)
    p, gz = _value_and_grad(lambda x: ours(x, dim), z, w)
    q, gq = _value_and_grad(lambda x: ref(x, dim), z, w)
    torch.testing.assert_close(p, q, atol=1e-12, rtol=0)
    torch.testing.assert_close(gz, gq, atol=1e-12, rtol=0)
    torch.testing.assert_close(p.sum(dim), torch.ones_like(p.sum(dim)), atol=1e-12, rtol=0)


@pytest.mark.parametrize("alpha", [1.3, 1.5, 2.0, 2.5])
def test_loss_and_its_gradient_match_package(alpha):
    g = torch.Generator().manual_seed(2)
    z = 3 * torch.randn(7, 9, generator=g, dtype=F64)
    y = torch.randint(0, 9, (7,), generator=g)
    w = torch.rand(7, generator=g, dtype=F64)
    a = z.clone().requires_grad_()
    b = z.clone().requires_grad_()
    la, lb = entmax_loss(a, y, alpha), _pkg_loss(b, y, alpha)
    (la * w).sum().backward()
    (lb * w).sum().backward()
    torch.testing.assert_close(la, lb, atol=1e-12, rtol=0)
    torch.testing.assert_close(a.grad, b.grad, atol=1e-12, rtol=0)


def test_bisect_alpha_gradient_matches_package_for_per_row_alpha():
    g = torch.Generator().manual_seed(3)
    z = torch.randn(3, 8, generator=g, dtype=F64)
    w = torch.randn(3, 8, generator=g, dtype=F64)
    alphas = torch.tensor([[1.2], [1.7], [2.4]], dtype=F64)
    grads = []
    for fn in (entmax_bisect, pkg.entmax_bisect):
        x, al = z.clone().requires_grad_(), alphas.clone().requires_grad_()
        (fn(x, al, -1) * w).sum().backward()
        grads.append((x.grad, al.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-10, rtol=0)
    torch.testing.assert_close(grads[0][1], grads[1][1], atol=1e-10, rtol=0)


def test_gpt2_vocabulary_float32_matches_package_forward_and_gradient():
    V = 50257
    g = torch.Generator().manual_seed(4)
    z = 3 * torch.randn(2, V, generator=g)
    w = torch.randn(2, V, generator=g)
    for ours, ref in (OURS_AND_PKG["sparsemax"], OURS_AND_PKG["entmax15"]):
        p, gz = _value_and_grad(lambda x: ours(x, -1), z, w)
        q, gq = _value_and_grad(lambda x: ref(x, -1), z, w)
        assert p.dtype == torch.float32
        assert torch.equal(p > 0, q > 0)
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0)
        torch.testing.assert_close(gz, gq, atol=1e-5, rtol=0)
    y = torch.tensor([0, V - 1])
    torch.testing.assert_close(entmax_loss(z, y, 1.5), pkg.entmax15_loss(z, y), atol=1e-4, rtol=1e-6)


# ------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: sparsemax(x, dim=0),
        lambda x: entmax15(x, dim=0),
        lambda x: entmax15(x, dim=1, k=2),
        lambda x: entmax_bisect(x, 1.7, dim=0),
        lambda x: entmax_bisect(x, 3.0, dim=1),
        lambda x: entmax_threshold(x, 1.5, dim=0),
        lambda x: entmax_threshold(x, 1.25, dim=1),
        lambda x: entmax_threshold(x, 2, dim=1),
        lambda x: entmax_loss(x, torch.tensor([1, 0, 4]), 1.5),
        lambda x: entmax_loss(x, torch.tensor([1, 0, 4]), 2.0),
        lambda x: entmax_loss(x, torch.tensor([3, 0, 2]), 1.4),
    ],
    ids=["sparsemax", "entmax15", "entmax15-k2", "bisect1.7", "bisect3", "tau1.5", "tau1.25", "tau2",
         "loss1.5", "loss2", "loss1.4"],
)
def test_hand_written_backward_passes_gradcheck_float64(fn):
    z = torch.randn(3, 6, generator=torch.Generator().manual_seed(5), dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(fn, (z,))


@pytest.mark.parametrize("alpha", [1.5, 2.0, 1.3])
def test_log_entmax_gradient_on_support_passes_gradcheck(alpha):
    z = torch.randn(3, 6, generator=torch.Generator().manual_seed(6), dtype=F64).requires_grad_()
    supp = entmax(z.detach(), alpha) > 0
    assert torch.autograd.gradcheck(lambda x: log_entmax(x, alpha)[supp], (z,))


def test_per_row_alpha_gradient_passes_gradcheck():
    z = torch.randn(3, 6, generator=torch.Generator().manual_seed(7), dtype=F64).requires_grad_()
    al = torch.tensor([[1.2], [1.5], [2.6]], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, a: entmax_bisect(x, a), (z, al))


@pytest.mark.parametrize("alpha", [1.0, 1.5, 2.0, 1.3])
def test_loss_gradient_is_p_minus_onehot_times_incoming_gradient(alpha):
    g = torch.Generator().manual_seed(8)
    z = torch.randn(2, 3, 7, generator=g, dtype=F64)
    y = torch.randint(0, 7, (2, 3), generator=g)
    w = torch.randn(2, 3, generator=g, dtype=F64)
    x = z.clone().requires_grad_()
    (entmax_loss(x, y, alpha) * w).sum().backward()
    expected = (entmax(z, alpha) - F.one_hot(y, 7).to(F64)) * w.unsqueeze(-1)
    torch.testing.assert_close(x.grad, expected, atol=1e-12, rtol=0)


# -------------------------------------------------------------------------- extreme inputs
@pytest.mark.parametrize("alpha", [1.5, 2.0, 1.3])
def test_logits_of_magnitude_1e4_in_float32_give_the_float64_distribution(alpha):
    g = torch.Generator().manual_seed(9)
    z = 1e4 * torch.randn(4, 30, generator=g)
    z[:, 0] = 1e4
    z[:, 1] = 1e4 - 0.5
    z[:, 2] = -1e4
    p32 = entmax(z, alpha)
    p64 = entmax(z.double(), alpha)
    assert torch.isfinite(p32).all()
    torch.testing.assert_close(p32.double(), p64, atol=1e-5, rtol=0)
    y = torch.zeros(4, dtype=torch.long)
    loss = entmax_loss(z, y, alpha)
    assert torch.isfinite(loss).all()
    torch.testing.assert_close(loss.double(), entmax_loss(z.double(), y, alpha), atol=1e-3, rtol=1e-6)


@pytest.mark.parametrize("alpha", [1.0, 1.5, 2.0, 1.3])
@pytest.mark.parametrize("dim", [0, 1])
def test_neg_inf_entries_get_exactly_zero_and_leave_the_rest_unchanged(alpha, dim):
    g = torch.Generator().manual_seed(10)
    z = torch.randn(5, 8, generator=g, dtype=F64)
    mask = torch.zeros(5, 8, dtype=torch.bool)
    mask[1, 2:] = True  # one finite entry left in row 1 / column 0 ...
    mask[3, ::2] = True
    if dim == 0:
        z, mask = z.T.contiguous(), mask.T.contiguous()
    zm = z.masked_fill(mask, float("-inf"))
    x = zm.clone().requires_grad_()
    p = entmax(x, alpha, dim=dim)
    assert (p[mask] == 0).all()
    # each slice equals entmax of its finite entries alone
    for i in range(z.shape[1 - dim]):
        row = zm.select(1 - dim, i)
        keep = torch.isfinite(row)
        torch.testing.assert_close(p.detach().select(1 - dim, i)[keep], entmax(row[keep], alpha), atol=1e-12, rtol=0)
    (p * torch.randn(p.shape, generator=g, dtype=F64)).sum().backward()
    assert torch.isfinite(x.grad).all() and (x.grad[mask] == 0).all()
    logp = log_entmax(zm, alpha, dim=dim)
    assert torch.isneginf(logp[mask]).all()
    y = zm.argmax(dim)
    loss = entmax_loss(zm, y, alpha, dim=dim)
    assert torch.isfinite(loss).all()


@pytest.mark.parametrize("bad", [float("-inf"), float("inf"), float("nan")])
@pytest.mark.parametrize("alpha", [1.0, 1.5, 2.0, 1.3])
def test_slice_without_finite_maximum_raises_value_error(bad, alpha):
    z = torch.zeros(3, 4)
    z[1] = float("-inf")
    if not math.isinf(bad) or bad > 0:
        z[1, 0] = bad
    with pytest.raises(ValueError, match="finite"):
        entmax(z, alpha)


def test_half_input_is_computed_in_float32_and_returned_in_its_dtype():
    z = torch.randn(4, 11, generator=torch.Generator().manual_seed(11))
    for fn in (sparsemax, entmax15, lambda x: entmax_bisect(x, 1.3), lambda x: log_entmax(x, 1.5)):
        out = fn(z.half())
        assert out.dtype == torch.float16
        ref = fn(z.half().float())
        torch.testing.assert_close(out.float(), ref.half().float(), atol=0, rtol=0)
    loss = entmax_loss(z.bfloat16(), torch.zeros(4, dtype=torch.long), 1.5)
    assert loss.dtype == torch.bfloat16


# ---------------------------------------------------------------------------- alpha family
def test_alpha_to_one_approaches_softmax():
    z = torch.randn(4, 12, generator=torch.Generator().manual_seed(12), dtype=F64)
    errors = [(entmax_bisect(z, 1 + eps) - torch.softmax(z, -1)).abs().max().item() for eps in (1e-1, 1e-2, 1e-3)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1e-3


def test_alpha_two_bisection_equals_sparsemax_and_dispatcher_picks_exact_algorithms():
    z = torch.randn(5, 9, generator=torch.Generator().manual_seed(13), dtype=F64)
    torch.testing.assert_close(entmax_bisect(z, 2.0), sparsemax(z), atol=1e-12, rtol=0)
    torch.testing.assert_close(entmax_bisect(z, 1.5), entmax15(z), atol=1e-12, rtol=0)
    assert torch.equal(entmax(z, 2), sparsemax(z))
    assert torch.equal(entmax(z, 1.5), entmax15(z))
    assert torch.equal(entmax(z, 1), torch.softmax(z, -1))
    assert torch.equal(log_entmax(z, 1), torch.log_softmax(z, -1))


@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=12))
@HYP
def test_support_size_is_non_increasing_in_alpha(values):
    z = torch.tensor(values, dtype=F64)
    sizes = [int((entmax(z, a) > 0).sum()) for a in (1.1, 1.3, 1.5, 1.8, 2.0, 3.0, 6.0)]
    assert all(a >= b for a, b in zip(sizes, sizes[1:]))


@pytest.mark.parametrize("alpha", [1.5, 2.0, 1.3, 2.7])
@pytest.mark.parametrize("dim", [0, 1])
def test_threshold_reproduces_the_distribution_and_sums_to_one(alpha, dim):
    z = 2 * torch.randn(6, 7, generator=torch.Generator().manual_seed(14), dtype=F64) + 50.0
    tau = entmax_threshold(z, alpha, dim=dim)
    assert tau.shape[dim] == 1
    p = ((alpha - 1) * z - tau).clamp(min=0) ** (1 / (alpha - 1))
    torch.testing.assert_close(p.sum(dim), torch.ones(6 if dim == 1 else 7, dtype=F64), atol=1e-9, rtol=0)
    torch.testing.assert_close(p, entmax(z, alpha, dim=dim), atol=1e-9, rtol=0)
    torch.testing.assert_close(
        torch.exp(z - entmax_threshold(z, 1, dim=dim)), torch.softmax(z, dim), atol=1e-12, rtol=0
    )


# ------------------------------------------------------------------------------ partial sort
@pytest.mark.parametrize("fn", [sparsemax, entmax15], ids=["sparsemax", "entmax15"])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 40])
@pytest.mark.parametrize("dim", [0, 1])
def test_partial_sort_equals_full_sort_including_fallback_rows(fn, k, dim):
    g = torch.Generator().manual_seed(15)
    z = torch.randn(6, 20, generator=g, dtype=F64)
    z[0] *= 0.01  # flat row: support of all 20 > k, must fall back to the full sort
    z[1, 3] += 10  # peaked row: support of size 1 fits any k
    if dim == 0:
        z = z.T.contiguous()
    w = torch.randn(z.shape, generator=g, dtype=F64)
    full, gfull = _value_and_grad(lambda x: fn(x, dim=dim, k=z.shape[dim]), z, w)
    part, gpart = _value_and_grad(lambda x: fn(x, dim=dim, k=k), z, w)
    auto, gauto = _value_and_grad(lambda x: fn(x, dim=dim), z, w)
    assert torch.equal(part, full) and torch.equal(gpart, gfull)
    assert torch.equal(auto, full) and torch.equal(gauto, gfull)


def test_automatic_partial_sort_at_gpt2_vocabulary_equals_full_sort_bitwise():
    z = 2 * torch.randn(3, 50257, generator=torch.Generator().manual_seed(16))
    for fn in (sparsemax, entmax15):
        assert torch.equal(fn(z), fn(z, k=50257))


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cpu_sort_returns_torch_sorts_values_bitwise_on_any_dim(dtype, dim):
    """The NumPy sort behind the exact thresholds on a CPU (``_sort_descending``) gives exactly
    ``torch.sort``'s values, -inf (masked tokens), ties and signed zeros included, so the
    thresholds, distributions and losses it feeds are unchanged to the bit."""
    g = torch.Generator().manual_seed(17)
    z = torch.randn(7, 30, generator=g).to(dtype)
    z[0, :5] = -math.inf
    z[1, 3:9] = 0.25
    z[2, 0], z[2, 1] = 0.0, -0.0
    z = z.requires_grad_()
    got = _E._sort_descending(z, dim)
    want = torch.sort(z.detach(), dim=dim, descending=True).values
    assert got.dtype == dtype and not got.requires_grad and torch.equal(got, want)


def test_entmax15_loss_and_gradient_are_unchanged_by_the_cpu_sort(monkeypatch):
    z = (0.3 * torch.randn(64, 4000, generator=torch.Generator().manual_seed(18))).requires_grad_()
    y = torch.randint(0, 4000, (64,), generator=torch.Generator().manual_seed(19))

    def loss_and_grad():
        z.grad = None
        loss = entmax_loss(z, y, 1.5)
        loss.sum().backward()
        return loss.detach(), z.grad.clone()

    fast = loss_and_grad()
    monkeypatch.setattr(_E, "_sort_descending", lambda X, dim: torch.sort(X, dim=dim, descending=True).values)
    slow = loss_and_grad()
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])


# ------------------------------------------------------------------------- Fenchel-Young loss
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_alpha_one_loss_is_cross_entropy_exactly(dim):
    g = torch.Generator().manual_seed(17)
    z = 3 * torch.randn(4, 5, 6, generator=g)
    shape = list(z.shape)
    del shape[dim]
    y = torch.randint(0, z.shape[dim], shape, generator=g)
    expected = F.cross_entropy(z.movedim(dim, 1), y, reduction="none")
    assert torch.equal(entmax_loss(z, y, 1.0, dim=dim), expected)
    assert entmax_loss(z, y, 1.5, dim=dim).shape == tuple(shape)


@given(
    st.lists(st.floats(-20, 20, allow_nan=False), min_size=2, max_size=10),
    st.sampled_from([1.0, 1.3, 1.5, 2.0, 3.0]),
    st.integers(0, 9),
)
@HYP
def test_loss_is_non_negative(values, alpha, y):
    z = torch.tensor(values, dtype=F64)
    y = torch.tensor(y % len(values))
    assert entmax_loss(z, y, alpha).item() >= 0.0


@pytest.mark.parametrize("alpha", [1.5, 2.0, 1.25, 3.0])
def test_loss_is_zero_exactly_beyond_the_separation_margin_and_positive_inside(alpha):
    margin = 1.0 / (alpha - 1.0)
    base = torch.tensor([0.0, -0.25, -3.0, float("-inf")], dtype=F64)
    for gap, zero in ((margin + 1e-6, True), (margin + 5.0, True), (margin - 1e-3, False), (0.5 * margin, False)):
        z = base.clone()
        z[0] = gap - 0.25  # z_y exceeds the runner-up (-0.25) by `gap`
        loss = entmax_loss(z, torch.tensor(0), alpha).item()
        p = entmax(z, alpha)
        if zero:
            assert loss == 0.0 and p[0].item() == 1.0
        else:
            assert loss > 0.0 and p[0].item() < 1.0
    z = base.clone()
    z[0] = margin - 0.25  # exactly at the margin (exact floats) for the sort-based algorithms
    if alpha in (1.5, 2.0):
        assert entmax_loss(z, torch.tensor(0), alpha).item() == 0.0


@given(
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=6, max_size=6),
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=6, max_size=6),
    st.floats(0, 1),
    st.sampled_from([1.0, 1.5, 2.0, 1.3]),
)
@HYP
def test_loss_is_convex_along_segments(z1, z2, t, alpha):
    a, b = torch.tensor(z1, dtype=F64), torch.tensor(z2, dtype=F64)
    y = torch.tensor(2)
    mid = entmax_loss(t * a + (1 - t) * b, y, alpha)
    chord = t * entmax_loss(a, y, alpha) + (1 - t) * entmax_loss(b, y, alpha)
    assert mid.item() <= chord.item() + 1e-9


# ------------------------------------------------------------------------------ Tsallis entropy
def test_tsallis_entropy_special_cases_and_uniform_maximum():
    g = torch.Generator().manual_seed(18)
    p = torch.softmax(2 * torch.randn(4, 10, generator=g, dtype=F64), -1)
    p[0] = sparsemax(3 * torch.randn(10, generator=g, dtype=F64))  # with exact zeros
    shannon = -(torch.where(p > 0, p * p.log(), torch.zeros_like(p))).sum(-1)
    torch.testing.assert_close(tsallis_entropy(p, 1), shannon, atol=1e-12, rtol=0)
    torch.testing.assert_close(tsallis_entropy(p, 2), (1 - (p * p).sum(-1)) / 2, atol=1e-12, rtol=0)
    torch.testing.assert_close(tsallis_entropy(p.T, 1.5, dim=0), tsallis_entropy(p, 1.5), atol=1e-12, rtol=0)
    V = 10
    u = torch.full((V,), 1 / V, dtype=F64)
    for a in (1.2, 1.5, 2.0, 3.0):
        closed = (1 - V ** (1 - a)) / (a * (a - 1))
        assert tsallis_entropy(u, a).item() == pytest.approx(closed, rel=1e-12)
        assert (tsallis_entropy(p, a) <= closed + 1e-12).all()
    assert tsallis_entropy(u, 1 + 1e-6).item() == pytest.approx(math.log(V), rel=1e-5)
    assert tsallis_entropy(torch.eye(V, dtype=F64)[3], 1.5).item() == 0.0


def test_loss_equals_fenchel_young_definition():
    g = torch.Generator().manual_seed(19)
    z = torch.randn(5, 8, generator=g, dtype=F64)
    y = torch.randint(0, 8, (5,), generator=g)
    for a in (1.5, 2.0, 1.3):
        p = entmax(z, a)
        direct = ((p - F.one_hot(y, 8).to(F64)) * z).sum(-1) + tsallis_entropy(p, a)
        torch.testing.assert_close(entmax_loss(z, y, a), direct, atol=1e-12, rtol=0)


# ------------------------------------------------------------------------------- bad inputs
def test_bad_inputs_raise_clear_errors():
    z = torch.randn(2, 5)
    with pytest.raises(TypeError, match="torch.Tensor"):
        sparsemax([[0.0, 1.0]])
    with pytest.raises(ValueError, match="floating-point"):
        entmax15(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="dim must be in"):
        entmax(z, 1.5, dim=2)
    with pytest.raises(ValueError, match="size 0"):
        sparsemax(torch.zeros(3, 0))
    with pytest.raises(ValueError, match="scalar"):
        sparsemax(torch.tensor(1.0))
    for bad_alpha in (0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="alpha"):
            entmax(z, bad_alpha)
    with pytest.raises(ValueError, match="> 1"):
        entmax_bisect(z, 1.0)
    with pytest.raises(ValueError, match="> 1"):
        entmax_bisect(z, torch.tensor([[1.5], [0.9]]))
    with pytest.raises(ValueError, match="broadcast"):
        entmax_bisect(z, torch.full((2, 5), 1.5))
    with pytest.raises(TypeError, match="alpha"):
        entmax(z, "1.5")
    with pytest.raises(ValueError, match="k must"):
        sparsemax(z, k=0)
    with pytest.raises(ValueError, match="n_iter"):
        entmax_bisect(z, 1.5, n_iter=0)
    with pytest.raises(ValueError, match="shape"):
        entmax_loss(z, torch.zeros(3, dtype=torch.long), 1.5)
    with pytest.raises(ValueError, match="integer"):
        entmax_loss(z, torch.zeros(2), 1.5)
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        entmax_loss(z, torch.tensor([0, 5]), 1.5)
    with pytest.raises(ValueError, match="target's logit"):
        entmax_loss(z.masked_fill(torch.eye(2, 5, dtype=torch.bool), float("-inf")), torch.tensor([0, 1]), 2.0)
    with pytest.raises(TypeError, match="target"):
        entmax_loss(z, [0, 1], 1.5)
    with pytest.raises(ValueError, match="floating-point"):
        tsallis_entropy(torch.ones(3, dtype=torch.long), 1.5)


# ------------------------------------------------------------- exact threshold (issue 25)
from nmst_lib import entmax as _E  # noqa: E402


@pytest.mark.parametrize("alpha", [1.05, 1.2, 1.7, 2.5])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (F64, 1e-10)])
def test_exact_threshold_entmax_matches_the_package_at_wikitext_vocabulary(alpha, dtype, tol):
    z = (2 * torch.randn(6, 33278, generator=torch.Generator().manual_seed(30), dtype=F64)).to(dtype)
    z[0, :100] += 6.0  # a row with a support of ~100 (beyond the first 32 guesses)
    w = torch.randn(z.shape, generator=torch.Generator().manual_seed(31), dtype=dtype)
    # the reference: the package in float64 with 80 halvings (its float32 loss at alpha = 1.05 is
    # itself off by ~3e-4: omega divides a float32 sum by alpha (alpha - 1))
    z64, w64 = z.to(F64), w.to(F64)
    p, g = _value_and_grad(lambda x: entmax(x, alpha), z, w)
    p_ref, g_ref = _value_and_grad(lambda x: pkg.entmax_bisect(x, alpha, n_iter=80), z64, w64)
    torch.testing.assert_close(p.to(F64), p_ref, atol=tol, rtol=0)
    torch.testing.assert_close(g.to(F64), g_ref, atol=10 * tol, rtol=10 * tol)
    y = torch.randint(0, 33278, (6,), generator=torch.Generator().manual_seed(32))
    loss_ref = pkg.entmax_bisect_loss(z64, y, alpha, n_iter=80)
    torch.testing.assert_close(entmax_loss(z, y, alpha).to(F64), loss_ref, atol=10 * tol, rtol=10 * tol)


@pytest.mark.parametrize("alpha", [1.01, 1.2, 1.5, 1.9, 2.0, 3.0])
def test_exact_threshold_is_the_root_to_float64_rounding(alpha):
    z = 3 * torch.randn(5, 2000, generator=torch.Generator().manual_seed(33), dtype=F64)
    X = (alpha - 1) * (z - z.amax(-1, keepdim=True))
    tau = _E._exact_threshold(X, alpha, -1)
    mass = (X - tau).clamp(min=0).pow(1 / (alpha - 1)).sum(-1)
    torch.testing.assert_close(mass, torch.ones(5, dtype=F64), atol=1e-13, rtol=0)


def test_the_root_on_the_largest_scores_alone_is_only_a_lower_bound_when_the_support_is_larger():
    """Why the second stage exists (and so that the test above can fail): with a support of
    thousands of scores, the root on the 32 largest is strictly below the threshold."""
    z = 0.1 * torch.randn(2, 5000, generator=torch.Generator().manual_seed(34), dtype=F64)
    X = 0.05 * (z - z.amax(-1, keepdim=True))
    first = _E._newton_root(torch.topk(X, 32, dim=-1).values, 1.05)
    exact = _E._exact_threshold(X, 1.05, -1)
    assert bool((first < exact - 1e-3).all())
    assert int(((X - exact) > 0).sum(-1).min()) > 1000  # the support is far larger than 32


@pytest.mark.parametrize("alpha", [1.0, 1.2, 1.5, 2.0])
def test_entmax_loss_with_exclude_equals_the_loss_of_masked_logits(alpha):
    z = 2 * torch.randn(4, 7, 30, generator=torch.Generator().manual_seed(35), dtype=F64)
    z[0, 0, 5] = 50.0  # the excluded logit is the largest: it must not set the shift
    y = torch.randint(0, 29, (4, 7), generator=torch.Generator().manual_seed(36))
    y[y == 5] = 6
    x = z.clone().requires_grad_()
    loss = entmax_loss(x, y, alpha, exclude=5)
    (grad,) = torch.autograd.grad(loss.sum(), x)
    x2 = z.clone().requires_grad_()
    masked = x2.masked_fill(torch.arange(30) == 5, -math.inf)
    ref = entmax_loss(masked, y, alpha)
    (grad_ref,) = torch.autograd.grad(ref.sum(), x2)
    torch.testing.assert_close(loss, ref, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(grad, grad_ref, atol=1e-12, rtol=1e-12)
    assert bool((grad[..., 5] == 0).all())


def test_entmax_loss_exclude_is_checked():
    z = torch.randn(3, 6)
    y = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="exclude must be a class index"):
        entmax_loss(z, y, 1.5, exclude=6)
    with pytest.raises(ValueError, match="exclude must be a class index"):
        entmax_loss(z, y, 1.5, exclude=True)
    with pytest.raises(ValueError, match="no target may equal exclude"):
        entmax_loss(z, y, 1.5, exclude=2)


def _mp_entmax_loss(values, y, alpha):
    """The entmax loss of float64 scores to 50 digits (mpmath bisection on the threshold)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    a = mp.mpf(alpha)
    zs = [mp.mpf(v) for v in values]
    X = [(a - 1) * (v - max(zs)) for v in zs]
    b = 1 / (a - 1)
    lo, hi = mp.mpf(-1), mp.mpf(0)
    for _ in range(400):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(max(x - mid, 0) ** b for x in X) >= 1 else (lo, mid)
    p = [max(x - lo, 0) ** b for x in X]
    return sum(pj * (zj - zs[y]) for pj, zj in zip(p, zs)) + sum(pj - pj**a for pj in p) / (a * (a - 1))


@pytest.mark.parametrize("alpha", [1.2, 1.25, 1.5, 2.0])
@pytest.mark.parametrize("inside", [1e-3, 1.1e-3, 1e-2, 0.3])
def test_loss_just_inside_the_margin_keeps_its_digits(alpha, inside):
    """Eq. 6 near its zero: the largest probability is 1 - O(inside^b), and the entropy term
    1 - p_m^(alpha-1) would cancel to rounding (a loss of 1e-19 came out as -3e-16); the loss
    matches a 50-digit reference to 1e-9 relative."""
    margin = 1.0 / (alpha - 1.0)
    values = [margin - inside - 0.25, -0.25, -3.0] if inside == 1e-3 else [margin - inside - 0.3, -0.3, -3.1]
    z = torch.tensor(values + [float("-inf")], dtype=F64)
    got = entmax_loss(z, torch.tensor(0), alpha).item()
    want = float(_mp_entmax_loss(values, 0, alpha))
    assert want > 0 and got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("e", [1, 2, 3, 4, 5, 8, 1.0 / (1.2 - 1.0) - 1.0, 2.5, 0.5, 9])
def test_power_by_squaring_equals_pow_and_leaves_its_input_alone(e):
    from nmst_lib.entmax import _power

    u = torch.rand(257, dtype=F64) * 3
    u[::7] = 0.0
    before = u.clone()
    got = _power(u, e)
    assert got is not u and torch.equal(u, before)
    torch.testing.assert_close(got, u.pow(float(round(e)) if abs(e - round(e)) < 1e-9 else e), rtol=4e-16 * 8, atol=0)


def test_dense_and_ragged_layouts_give_the_same_threshold(monkeypatch):
    """The exact threshold (Chapter 8) does not depend on the layout its Newton iteration uses:
    near-uniform rows (most scores candidates) in the dense blocks and in the ragged layout,
    float32 and float64, agree to rounding, and both sum the entmax probabilities to 1."""
    import nmst_lib.entmax as E

    g = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, F64):
        z = (torch.randn(67, 3001, generator=g) * 0.3).to(dtype)
        z[:, 5] = float("-inf")
        monkeypatch.setattr(E, "_DENSE_BLOCK_ELEMENTS", 20 * 3001)  # several blocks
        dense = entmax_threshold(z, 1.2)
        monkeypatch.setattr(E, "_DENSE_CANDIDATE_FRACTION", float("inf"))
        ragged = entmax_threshold(z, 1.2)
        monkeypatch.undo()
        torch.testing.assert_close(dense, ragged, rtol=8 * torch.finfo(dtype).eps, atol=0)
        total = entmax(z.double(), 1.2).sum(-1)
        torch.testing.assert_close(total, torch.ones_like(total), rtol=0, atol=1e-12)


@pytest.mark.parametrize("alpha", [1.0, 1.3, 1.5, 2.0, 3.0])
@pytest.mark.parametrize("shape, dim", [((0, 4), -1), ((2, 0, 5), -1), ((5, 0), 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_every_entmax_function_returns_an_empty_result_of_the_right_shape_on_an_empty_batch(alpha, shape, dim, dtype):
    # the sort-based thresholds (alpha = 1.5, 2) took max() over no rows: RuntimeError
    z = torch.zeros(shape, dtype=dtype, requires_grad=True)
    kept = list(shape)
    kept[dim] = 1
    reduced = [n for i, n in enumerate(shape) if i != dim % len(shape)]
    target = torch.zeros(reduced, dtype=torch.long)
    results = [(entmax(z, alpha, dim=dim), shape), (log_entmax(z, alpha, dim=dim), shape),
               (entmax_threshold(z, alpha, dim=dim), kept), (entmax_loss(z, target, alpha, dim=dim), reduced),
               (tsallis_entropy(z.detach(), alpha, dim=dim), reduced)]
    if alpha > 1:
        results.append((entmax_bisect(z, alpha, dim=dim), shape))
        results.append((entmax_bisect(z, torch.full(kept, alpha), dim=dim), shape))
    if alpha in (1.5, 2.0):
        fn = entmax15 if alpha == 1.5 else sparsemax
        results += [(fn(z, dim=dim), shape), (fn(z, dim=dim, k=2), shape)]
    for out, want in results:
        assert tuple(out.shape) == tuple(want) and out.dtype == dtype
    # attached to z's graph: a backward gives z an (empty) gradient
    sum(out.float().sum() for out, _ in results[:4]).backward()
    assert z.grad is not None and z.grad.shape == z.shape


@pytest.mark.parametrize("alpha", [1.0, 1.5, 2.0])
@pytest.mark.parametrize("p, words", [([math.nan, 1.0], "finite"), ([0.5, math.inf], "finite"),
                                      ([-0.5, 1.5], ">= 0"), ([3.0, 4.0], "sum to 1"), ([0.2, 0.2], "sum to 1")])
def test_tsallis_entropy_refuses_what_is_not_a_distribution(alpha, p, words):
    # NaN gave -0.0, [-0.5, 1.5] NaN, [3, 4] -9 at alpha = 2
    with pytest.raises(ValueError, match=words):
        tsallis_entropy(torch.tensor(p, dtype=F64), alpha)
    with pytest.raises(ValueError, match=words):  # along dim 0 of a batch too
        tsallis_entropy(torch.tensor([p, [0.5, 0.5]], dtype=F64).T, alpha, dim=0)


def test_tsallis_entropy_accepts_distributions_within_the_rounding_of_their_dtype():
    p32 = torch.softmax(torch.randn(64, 4000, generator=torch.Generator().manual_seed(0)), -1)
    assert float((p32.sum(-1) - 1).abs().max()) > 0  # not exactly 1 in float32
    ent = tsallis_entropy(p32, 1.5)
    ref = (p32.double() - p32.double() ** 1.5).sum(-1) / 0.75
    torch.testing.assert_close(ent.double(), ref, rtol=1e-5, atol=1e-6)
    half = torch.tensor([0.3, 0.3, 0.4], dtype=torch.float16)
    assert tsallis_entropy(half, 2.0).item() == pytest.approx((1 - 0.09 - 0.09 - 0.16) / 2, abs=1e-3)


def _bisection_entmax_f64(z: torch.Tensor, alpha: float):
    """(p, u) of alpha-entmax on the rows of ``z``, in float64 from the definition (Martins et al.
    2020, eq. 3 and its KKT form): u = [(alpha - 1) z - tau]_+ with tau found by 200 halvings of
    [(alpha - 1) max z - 1, (alpha - 1) max z], the bracket where sum_j u_j^(1/(alpha-1)) crosses 1."""
    x = (alpha - 1.0) * z.to(F64)
    hi = x.max(-1, keepdim=True).values
    lo = hi - 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        above = (x - mid).clamp(min=0).pow(1.0 / (alpha - 1.0)).sum(-1, keepdim=True) >= 1
        lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
    u = (x - lo).clamp(min=0)
    return u.pow(1.0 / (alpha - 1.0)), u


def _logits_1e4(seed: int) -> torch.Tensor:
    """float32 rows with entries at +-1e4 and a few within 2 of the maximum (supports of several tokens)."""
    g = torch.Generator().manual_seed(seed)
    z = -1e4 + 2e4 * torch.rand(5, 40, generator=g)
    z[:, :6] = 1e4 - 2 * torch.rand(5, 6, generator=g)  # near the top: the support
    z[0, 10:] = -1e4
    z[1, 0] = 1e4
    z[2, :6] = 1e4  # six tied at the top
    return z.float()


@pytest.mark.parametrize("alpha", [1.3, 1.5, 2.0])
def test_log_entmax_at_logits_of_1e4_in_float32_matches_a_float64_bisection(alpha):
    z = _logits_1e4(0)
    p, u = _bisection_entmax_f64(z, alpha)
    got = log_entmax(z, alpha)
    assert got.dtype == torch.float32 and not got.isnan().any()
    support = p > 1e-4  # entries well inside the support (u is not near the threshold)
    assert torch.equal(torch.isfinite(got), p > 0)
    torch.testing.assert_close(got.to(F64)[support], p.log()[support], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got.exp().sum(-1).to(F64), torch.ones(5, dtype=F64), rtol=0, atol=1e-5)
    assert torch.allclose(got[2, :6].exp(), torch.full((6,), 1 / 6), atol=1e-6)  # the tie: uniform


@pytest.mark.parametrize("alpha", [1.3, 1.5, 2.0])
def test_entmax_loss_at_logits_of_1e4_in_float32_matches_the_fenchel_young_loss_in_float64(alpha):
    # Martins et al. (2020), eq. 6: (p - e_y) . z + H_alpha(p), p from the float64 bisection
    z = _logits_1e4(1)
    y = torch.tensor([12, 3, 20, 39, 1])  # row 0: at -1e4; rows 1, 4: near the top; rows 2, 3: anywhere
    p, _ = _bisection_entmax_f64(z, alpha)
    z64 = z.to(F64)
    onehot = F.one_hot(y, 40).to(F64)
    tsallis = (p - p.pow(alpha)).sum(-1) / (alpha * (alpha - 1.0))
    want = ((p - onehot) * z64).sum(-1) + tsallis
    got = entmax_loss(z, y, alpha)
    assert got.dtype == torch.float32 and (got >= 0).all()
    torch.testing.assert_close(got.to(F64), want, rtol=1e-5, atol=2e-3)  # 2e-3: float32 ulps of 1e4
    assert float(got[0]) > 1.9e4  # a target at -1e4 costs about the gap to the top, 2e4


@pytest.mark.parametrize("alpha", [1.0, 1.3, 1.5, 2.0, 2.5, 3.0])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_entmax_support_is_where_entmax_is_positive(alpha, dtype, scale):
    gen = torch.Generator().manual_seed(3)
    z = (torch.randn(64, 20, generator=gen, dtype=F64) * scale).to(dtype)
    z[0, 4] = -math.inf
    support = entmax_support(z, alpha)
    assert support.dtype == torch.bool and support.shape == z.shape
    if alpha == 1.0:
        assert torch.equal(support, torch.isfinite(z))
    else:
        assert torch.equal(support, entmax(z, alpha) > 0)
        assert not bool(support.all(-1).any())
    assert not bool(support[0, 4])
    # along another dim: the same mask, transposed
    assert torch.equal(entmax_support(z.T, alpha, dim=0), support.T)


@pytest.mark.parametrize("alpha", [1.25, 1.5, 2.0, 3.0])
def test_entmax_support_agrees_with_entmax_one_ulp_from_the_gap(alpha):
    """Where z_max - z_v is 1/(alpha - 1) to one ulp, the support decides
    as entmax does (in scores shifted by their maximum). The threshold moved
    back to z's own coordinates rounds: at alpha = 3, z = (3, 2.5 + ulp, 1),
    (alpha - 1) z_1 <= tau held there while entmax gave token 1 about 1e-8."""
    gap = 1.0 / (alpha - 1.0)
    for top in (0.0, 3.0, -8.0, 1e3):
        for v in (math.nextafter(top - gap, math.inf), top - gap,
                  math.nextafter(top - gap, -math.inf)):
            z = torch.tensor([top, v, top - 4 * gap], dtype=F64)
            assert torch.equal(entmax_support(z, alpha), entmax(z, alpha) > 0)
    z = torch.tensor([3.0, math.nextafter(2.5, math.inf), 1.0], dtype=F64)
    assert float(entmax(z, 3.0)[1]) > 0 and bool(entmax_support(z, 3.0)[1])


def test_entmax_support_keeps_a_token_whose_probability_underflows():
    """alpha = 1.05 in float32: p = (X - tau)^20 rounds to zero for
    X - tau = 2e-3 (about 1e-54), but the token is in the support."""
    alpha = 1.05
    z = torch.tensor([0.0, -1.0, -25.0])
    tau = float(entmax_threshold(z, alpha))
    z[2] = (tau + 2e-3) / (alpha - 1.0)
    assert float(entmax(z, alpha)[2]) == 0.0
    assert bool(entmax_support(z, alpha)[2])


def test_entmax_support_of_half_precision_scores_is_computed_in_float32():
    z = torch.randn(16, 9, generator=torch.Generator().manual_seed(5))
    for dtype in (torch.float16, torch.bfloat16):
        zh = z.to(dtype)
        support = entmax_support(zh, 1.5)
        assert torch.equal(support, entmax(zh.float(), 1.5) > 0)
        # entmax's half output rounds the smallest probabilities to zero
        assert bool(support[entmax(zh, 1.5) > 0].all())


def test_entmax_support_checks_its_arguments():
    with pytest.raises(ValueError, match="floating-point dtype"):
        entmax_support(torch.zeros(3, dtype=torch.long), 1.5)
    with pytest.raises(TypeError, match="torch.Tensor"):
        entmax_support([0.0, 1.0], 1.5)
    with pytest.raises(ValueError, match="alpha"):
        entmax_support(torch.zeros(3), 0.5)
    with pytest.raises(ValueError):
        entmax_support(torch.full((3,), -math.inf), 1.5)
    z = torch.randn(5, requires_grad=True)
    assert not entmax_support(z, 1.5).requires_grad
