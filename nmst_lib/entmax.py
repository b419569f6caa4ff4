r"""The alpha-entmax family, its Tsallis entropies and its Fenchel-Young losses (Chapter 8 (08_sparse)).

The sparse output layers (:mod:`nmst_lib.heads`), entmax sampling (:mod:`nmst_lib.decoding`)
and the eos-outside-support construction (:mod:`nmst_lib.theory`) are built on it; Chapter 8
and Assignment 4 use it directly.

For scores :math:`z \in \mathbb{R}^V` and :math:`\alpha \ge 1`, Martins et al. (2020, Eq. 3)
define

.. math::  \alpha\text{-entmax}(z) = \operatorname{argmax}_{p \in \triangle^V}\; p^\top z + H_\alpha(p),

with the Tsallis entropy (their Eq. 4) :math:`H_\alpha(p) = \frac{1}{\alpha(\alpha-1)} \sum_j
(p_j - p_j^\alpha)` for :math:`\alpha \neq 1` and Shannon's :math:`-\sum_j p_j \log p_j` for
:math:`\alpha = 1`. Writing the KKT conditions of this concave problem (stationarity of
:math:`z_j - \frac{1}{\alpha-1} p_j^{\alpha-1} - \lambda + \mu_j`, complementary slackness for
:math:`p_j \ge 0`) gives the closed form used everywhere in this module:

.. math::  p_j = \big[(\alpha - 1) z_j - \tau\big]_+^{1/(\alpha-1)}, \qquad \textstyle\sum_j p_j = 1,

where the threshold :math:`\tau` (:func:`entmax_threshold`) is the unique root of the
decreasing function :math:`f(\tau) = \sum_j [(\alpha-1) z_j - \tau]_+^{1/(\alpha-1)} - 1`.
Since entmax is shift-invariant we always work with :math:`X = (\alpha-1)(z - \max z)`, whose
maximum is 0; then :math:`p_{\max} = (-\tau)^{1/(\alpha-1)} \le 1` gives :math:`\tau \ge -1`,
so only entries with :math:`X_j > -1` (i.e. :math:`z_j > \max z - 1/(\alpha-1)`, the
separation margin) can be in the support. This bound lets the sort-based algorithms sort only
those candidates (an exact partial sort), and the bisection run on them only.

* ``alpha = 2`` (sparsemax, Martins & Astudillo 2016): with the scores sorted decreasingly,
  :math:`z_{(1)} \ge z_{(2)} \ge \dots`, the support is :math:`\{1..K\}` with
  :math:`K = \max\{k : 1 + k z_{(k)} > \sum_{i \le k} z_{(i)}\}` and
  :math:`\tau = (\sum_{i \le K} z_{(i)} - 1)/K`.
* ``alpha = 1.5`` (Peters, Niculae & Martins 2019, Alg. 2): with :math:`X = (z - \max z)/2`
  sorted, on a support of size :math:`k` the condition :math:`\sum_{i \le k} (X_{(i)} - \tau)^2 = 1`
  is a quadratic in :math:`\tau` whose relevant root is
  :math:`\tau_k = M_k - \sqrt{(1 - k (S_k - M_k^2))/k}` with :math:`M_k` the mean and
  :math:`S_k` the mean of squares of the :math:`k` largest; :math:`K` is the number of
  :math:`k` with :math:`\tau_k \le X_{(k)}` (as their ``entmax`` package counts it) and
  :math:`\tau = \tau_K`.
* any ``alpha > 1``: the root of :math:`f` in :math:`[-1, -V^{1-\alpha}]` (where
  :math:`f \ge 0` and :math:`f \le 0` respectively). :func:`entmax_bisect` halves that bracket
  ``n_iter`` times (Blondel et al. (2019) / Peters et al. (2019)); everything else (:func:`entmax`,
  the loss, the log-probabilities, the threshold) finds it exactly in the dtype: a safeguarded
  Newton iteration on :math:`(\sum_j [X_j - \tau]_+^{1/(\alpha-1)})^{\alpha-1} - 1` (a convex
  p-norm for alpha <= 2: a handful of steps) run on the ``k`` largest scores, whose root bounds
  :math:`\tau` from below and equals it once at most ``k`` scores lie above it.

Jacobian (all alpha > 1). Differentiating :math:`\sum_j p_j = 1` gives, with
:math:`s = p^{2-\alpha}` on the support and 0 off it,
:math:`\partial p / \partial z = \operatorname{diag}(s) - s s^\top / \sum_j s_j`, so the
backward pass is :math:`\bar z = s \odot (\bar p - \langle s, \bar p\rangle / \sum_j s_j)`.
For sparsemax :math:`s` is the support indicator (the support mean of the incoming gradient is
subtracted); for entmax15 :math:`s = \sqrt p`.

The entmax loss (Martins et al. 2020, Eq. 6) is the Fenchel-Young loss
:math:`\ell_\alpha(z, y) = (p - e_y)^\top z + H_\alpha(p)` with :math:`p = \alpha\text{-entmax}(z)`:
convex in :math:`z`, non-negative, with gradient :math:`p - e_y` (Danskin's theorem), equal to the
cross-entropy at :math:`\alpha = 1`, and zero iff :math:`z_y \ge z_j + 1/(\alpha - 1)` for all
:math:`j \ne y` when :math:`\alpha > 1` (separation margin).

Conventions shared by every function here:

* ``dim`` is any valid axis; float32 and float64 are computed in their own dtype, float16 and
  bfloat16 in float32 and returned in the input dtype.
* ``-inf`` entries (masked tokens) get probability exactly 0. Every slice along ``dim`` needs at
  least one finite entry: a slice that is all ``-inf``, or that contains ``+inf`` or NaN, raises
  ``ValueError`` (checked with one reduction over the slice maxima).
* A tensor with no entries (an empty batch, e.g. ``[0, V]``; ``dim`` itself must be non-empty)
  gives an empty result of the right shape, in z's dtype.
* No Python loop over rows; the same code runs on CUDA.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd import Function

from ._validation import is_integer_tensor

__all__ = [
    "sparsemax",
    "entmax15",
    "entmax_bisect",
    "entmax",
    "entmax_threshold",
    "entmax_support",
    "tsallis_entropy",
    "entmax_loss",
    "log_entmax",
]

# Auto partial sort: sort only the candidates X_j >= -1 when they are at most this fraction of V
# (torch.topk of half a 50,257-row is still ~2x faster than torch.sort on CPU).
_AUTO_TOPK_FRACTION = 0.5


# ----------------------------------------------------------------------------------- validation
def _check_scores(z, dim, name: str = "z") -> int:
    """Check a score tensor and ``dim``; return ``dim`` as a non-negative axis."""
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of floating-point scores, got {type(z).__name__}")
    if not z.is_floating_point():
        raise ValueError(
            f"{name} must have a floating-point dtype (float16, bfloat16, float32 or float64), got {z.dtype}"
        )
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"dim must be an integer axis, got {type(dim).__name__}")
    if z.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension (the one entmax normalises over); got a scalar")
    if not (-z.dim() <= dim < z.dim()):
        raise ValueError(f"dim must be in [{-z.dim()}, {z.dim() - 1}] for a {z.dim()}-d tensor, got {dim}")
    dim = int(dim) % z.dim()
    if z.shape[dim] == 0:
        raise ValueError(f"{name} has size 0 along dim={dim}: there is nothing to normalise")
    return dim


def _check_rows(zmax: torch.Tensor, name: str = "z") -> None:
    """Every slice must have a finite maximum (at least one finite entry, no +inf, no NaN)."""
    if zmax.numel() and not bool(torch.isfinite(zmax).all()):
        raise ValueError(
            f"every slice of {name} along dim must have at least one finite entry and no +inf or NaN "
            "(-inf entries are allowed and get probability 0)"
        )


def _check_alpha_number(alpha, minimum_open: bool = False) -> float:
    """``alpha`` as a float >= 1 (> 1 when ``minimum_open``)."""
    if isinstance(alpha, torch.Tensor):
        if alpha.numel() != 1:
            raise ValueError(f"alpha must be a single number here, got a tensor of shape {tuple(alpha.shape)}")
        alpha = alpha.item()
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number >= 1, got {type(alpha).__name__}")
    alpha = float(alpha)
    if math.isnan(alpha) or alpha < 1.0 or (minimum_open and alpha == 1.0) or math.isinf(alpha):
        allowed = "> 1" if minimum_open else ">= 1 (1 = softmax)"
        raise ValueError(f"alpha must be a finite number {allowed}, got {alpha!r}")
    return alpha


def _check_k(k, size: int):
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be None or a positive integer (the partial-sort size), got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"k must be a positive integer (the partial-sort size), got {k}")
    return int(k)


def _compute_dtype(z: torch.Tensor) -> torch.dtype:
    return z.dtype if z.dtype in (torch.float32, torch.float64) else torch.float32


def _arange_like(n: int, ref: torch.Tensor, dim: int) -> torch.Tensor:
    """1, 2, ..., n shaped to broadcast along ``dim`` of ``ref``."""
    shape = [1] * ref.dim()
    shape[dim] = n
    return torch.arange(1, n + 1, dtype=ref.dtype, device=ref.device).view(shape)


# ------------------------------------------------------------------------------ thresholds
def _sort_descending(X: torch.Tensor, dim: int) -> torch.Tensor:
    """The values of ``X`` sorted decreasingly along ``dim`` (no indices, no autograd). On a CPU
    NumPy's vectorised sort does it: the same values as ``torch.sort`` (a sort's output depends
    only on its input's values), measured 13x faster on 2,048 rows of 4,000 entmax-1.5 logits (one
    thread), where ``torch.sort`` took two thirds of the entmax-1.5 loss's time. Elsewhere
    ``torch.sort``."""
    if X.device.type != "cpu":
        return torch.sort(X, dim=dim, descending=True).values
    a = np.sort(X.detach().numpy(), axis=dim)
    return torch.from_numpy(np.ascontiguousarray(np.flip(a, axis=dim)))


def _sorted_threshold(Xs: torch.Tensor, dim: int, alpha: float):
    """Threshold and support size from the decreasingly sorted (shifted, scaled) scores ``Xs``.

    ``alpha = 2``: support condition ``1 + k X_(k) > cumsum_k``; ``tau = (cumsum_K - 1)/K``.
    ``alpha = 1.5``: tau_k as in Peters et al. (2019) Alg. 2 (cumulative mean and mean of
    squares, tau from the quadratic); support size = number of k with tau_k <= X_(k), as their
    ``entmax`` package counts it.
    ``-inf`` entries never satisfy the conditions (for alpha = 1.5 their tau_k is NaN, and a
    comparison with NaN is false; likewise where 1 - k * variance < 0, which happens only
    beyond the support).
    """
    rho = _arange_like(Xs.shape[dim], Xs, dim)
    if alpha == 2.0:
        cs = Xs.cumsum(dim).sub_(1.0)
        support = (rho * Xs) > cs
        K = support.sum(dim, keepdim=True)
        tau = cs.gather(dim, K - 1).div_(K.to(Xs.dtype))
        return tau, K
    mean = Xs.cumsum(dim).div_(rho)
    mean_sq = (Xs * Xs).cumsum(dim).div_(rho)
    # delta = (1 - k (S_k - M_k^2)) / k = 1/k - S_k + M_k^2
    delta = mean_sq.neg_().add_(mean * mean).add_(rho.reciprocal())
    tau = mean.sub_(delta.sqrt_())  # NaN where delta < 0 (never inside the support)
    K = (tau <= Xs).sum(dim, keepdim=True)
    return tau.gather(dim, K - 1), K


def _sort_threshold(X: torch.Tensor, dim: int, alpha: float, k):
    """Exact threshold for alpha in {1.5, 2} of shifted scores ``X`` (max 0), sorting at most ``k``.

    ``k=None``: sort only the candidates ``X_j >= -1`` (the support lies among them, see the
    module docstring) when they are few, else everything. Rows whose support fills the ``k``
    sorted entries (support size == k < V) are recomputed with the full sort.
    """
    V = X.shape[dim]
    if k is None:
        # +1: one non-candidate, so a full support is detectable; an empty batch sorts everything (nothing)
        m = int((X >= -1.0).sum(dim).max()) + 1 if X.numel() else V
        k = m if m <= _AUTO_TOPK_FRACTION * V else V
    if k >= V:
        return _sorted_threshold(_sort_descending(X, dim), dim, alpha)
    Xs = torch.topk(X, k, dim=dim, largest=True, sorted=True).values
    tau, K = _sorted_threshold(Xs, dim, alpha)
    unsolved = K == k
    if bool(unsolved.any()):
        rows = unsolved.movedim(dim, -1).reshape(-1)
        Xr = X.movedim(dim, -1).reshape(-1, V)[rows]
        tau_r, K_r = _sorted_threshold(_sort_descending(Xr, -1), 1, alpha)
        tau_flat = tau.movedim(dim, -1).reshape(-1).clone()
        K_flat = K.movedim(dim, -1).reshape(-1).clone()
        tau_flat[rows] = tau_r.squeeze(1)
        K_flat[rows] = K_r.squeeze(1)
        shape = list(tau.movedim(dim, -1).shape)
        tau = tau_flat.view(shape).movedim(-1, dim)
        K = K_flat.view(shape).movedim(-1, dim)
    return tau, K


def _bisect_threshold(X: torch.Tensor, alpha, dim: int, n_iter: int) -> torch.Tensor:
    """Bisection for the root of f(tau) = sum_j [X_j - tau]_+^{1/(alpha-1)} - 1 (``X`` has max 0).

    f(-1) >= 0 (the maximum alone contributes 1) and f(-V^{1-alpha}) <= 0 (each of the V
    entries contributes at most 1/V), so the root lies in that bracket; only entries with
    X_j > -1 contribute on it, so when they are few the iterations run on them only.
    Returns the lower end of the final bracket (where f >= 0).
    """
    V = X.shape[dim]
    m = int((X > -1.0).sum(dim).max()) if X.numel() else V  # an empty batch: nothing to narrow down
    Xc = torch.topk(X, m, dim=dim, sorted=False).values if m <= _AUTO_TOPK_FRACTION * V else X
    inv = 1.0 / (alpha - 1.0)
    lo = torch.full_like(Xc.narrow(dim, 0, 1), -1.0)
    hi = -torch.as_tensor(float(V), dtype=X.dtype, device=X.device) ** (1.0 - alpha)
    hi = (hi + torch.zeros_like(lo)).contiguous()
    for _ in range(n_iter):
        mid = (lo + hi) * 0.5
        f = (Xc - mid).clamp_(min=0).pow_(inv).sum(dim, keepdim=True) - 1.0
        above = f >= 0
        lo = torch.where(above, mid, lo)
        hi = torch.where(above, hi, mid)
    return lo


# The exact threshold starts from the root on the 32 largest scores of each row (a lower bound).
_NEWTON_FIRST_K = 32
_NEWTON_MAX_ITER = 200  # a bound only: Newton needs < 10, bisection 24 (float32) to 53 (float64)


def _newton_root(Xk: torch.Tensor, alpha: float) -> torch.Tensor:
    """Root ``tau`` of ``f(tau) = sum_j [X_j - tau]_+^{1/(alpha-1)} - 1`` on the rows of ``Xk [n, k]``
    (max 0), to the dtype's resolution; ``[n, 1]``.

    ``alpha <= 2`` (``b = 1/(alpha-1) >= 1``): Newton on ``phi(tau) = (sum_j [X_j - tau]_+^b)^{1/b} - 1``,
    which has the same root and is a convex, decreasing p-norm of ``(X - tau)_+``, nearly linear
    far from the root; from the left end ``-1`` of the bracket ``[-1, -k^{1-alpha}]`` it rises
    monotonically to the root (quadratically once the support is fixed; 4-7 steps on 33,278
    scores) and stops when no row moves by more than 4 ulps (a step ``(N - 1) S / (N D)`` that
    small means ``f`` is zero to rounding, since ``D`` is bounded for ``b >= 1``). A step that
    leaves the bracket (kept from the signs of f; only rounding can cause one) is replaced by the
    midpoint. ``alpha > 2`` (f has infinite slopes at its kinks, where a tiny Newton step says
    nothing): bisection until the bracket is two adjacent floats."""
    b = 1.0 / (alpha - 1.0)
    lo = torch.full_like(Xk[:, :1], -1.0)
    hi = torch.full_like(lo, -float(Xk.shape[1]) ** (1.0 - alpha))
    tau = lo.clone()
    tol = 4 * torch.finfo(Xk.dtype).eps
    moving = torch.ones_like(lo, dtype=torch.bool)  # a row stops for good once converged: no row
    for _ in range(_NEWTON_MAX_ITER):               # depends on the others in its batch
        u = (Xk - tau).clamp_(min=0)
        if b < 1.0:
            above = u.pow_(b).sum(1, keepdim=True) >= 1.0
            lo = torch.where(above, tau, lo)
            hi = torch.where(above, hi, tau)
            tau = (lo + hi) * 0.5
            if not bool(((tau > lo) & (tau < hi)).any()):
                return lo
            continue
        w = (u > 0).to(u.dtype) if b == 1.0 else _power(u, b - 1.0)  # u^{b-1}: f' = -b sum w
        S = (w * u).sum(1, keepdim=True)  # sum u^b = f + 1
        D = w.sum(1, keepdim=True)
        above = S >= 1.0
        lo = torch.where(above, tau, lo)
        hi = torch.where(above, hi, tau)
        N = S.pow(alpha - 1.0)  # phi + 1;  phi' = -N D / S
        new = tau + (N - 1.0) * S / (N * D)
        new = torch.where((new >= lo) & (new <= hi), new, (lo + hi) * 0.5)
        new = torch.where(moving, new, tau)
        moving &= (new - tau).abs() > tol * tau.abs()
        tau = new
        if not bool(moving.any()):
            break
    return tau


def _power(u: torch.Tensor, e: float) -> torch.Tensor:
    """``u ** e`` for ``u >= 0`` as a new tensor: by repeated squaring when ``e`` is a whole number
    from 1 to 8 to rounding (alpha = 1.2 needs u^4 and u^5, alpha = 1.5 u and u^2), several times
    cheaper on a CPU than ``pow``'s exp/log and equal to a few ulps; ``torch.pow`` otherwise."""
    n = round(e)
    if abs(e - n) > 1e-9 or not 1 <= n <= 8:
        return u.pow(e)
    result, base = None, u
    while n:
        if n & 1:
            if result is None:  # the last factor may be taken over, never u itself
                result = base if n == 1 and base is not u else base.clone()
            else:
                result.mul_(base)
        n >>= 1
        if n:
            base = base * base if base is u else base.mul_(base)
    return result


def _newton_from_below(values: torch.Tensor, alpha: float, tau: torch.Tensor, spread, row_sum) -> torch.Tensor:
    """:func:`_newton_root`'s Newton iteration (alpha <= 2) started from lower bounds ``tau [n]``
    of the rows' thresholds, on scores laid out either as ragged rows or as a dense ``[n, V]``
    block: ``spread(tau)`` puts each row's tau beside its scores, ``row_sum(x)`` sums ``x`` per
    row. From below, Newton on the convex, decreasing ``phi`` rises monotonically to the root, so
    no bracket is needed; a row stops once its step is under 4 ulps."""
    b = 1.0 / (alpha - 1.0)
    tol = 4 * torch.finfo(values.dtype).eps
    moving = torch.ones_like(tau, dtype=torch.bool)
    for _ in range(_NEWTON_MAX_ITER):
        u = (values - spread(tau)).clamp_(min=0)
        w = (u > 0).to(u.dtype) if b == 1.0 else _power(u, b - 1.0)
        D = row_sum(w)
        S = row_sum(w.mul_(u))
        N = S.pow(alpha - 1.0)
        step = (N - 1.0) * S / (N * D)
        new = torch.where(moving, tau + step, tau)
        moving &= (new - tau).abs() > tol * tau.abs()
        tau = new
        if not bool(moving.any()):
            break
    return tau


def _ragged_newton_root(vals: torch.Tensor, row_ids: torch.Tensor, n_rows: int, alpha: float,
                        tau: torch.Tensor) -> torch.Tensor:
    """:func:`_newton_from_below` on ragged rows: the scores ``vals`` of row ``row_ids`` (per-row
    sums by ``index_add_``), started from lower bounds ``tau [n_rows]``."""
    return _newton_from_below(vals, alpha, tau, lambda t: t[row_ids],
                              lambda x: torch.zeros_like(tau).index_add_(0, row_ids, x))


# Candidates above the first-stage bound that make the dense layout cheaper than the ragged one
# (row sums instead of scatter-adds; measured: near-uniform rows at V = 10,000 ran 6x faster), and
# the float64 elements per block of rows in the dense layout (32 MiB).
_DENSE_CANDIDATE_FRACTION = 0.25
_DENSE_BLOCK_ELEMENTS = 1 << 22


def _dense_newton_root(flat: torch.Tensor, alpha: float, tau: torch.Tensor) -> torch.Tensor:
    """:func:`_newton_from_below` on every score of ``flat [n, V]`` in float64, in blocks of rows
    (memory stays at a few blocks; the loop is over blocks, not tokens), from ``tau [n]``."""
    out = torch.empty_like(tau)
    step = max(1, _DENSE_BLOCK_ELEMENTS // flat.shape[1])
    for start in range(0, flat.shape[0], step):
        block = flat[start:start + step].double()
        out[start:start + step] = _newton_from_below(block, alpha, tau[start:start + step],
                                                     lambda t: t[:, None], lambda x: x.sum(1))
    return out


def _exact_threshold(X: torch.Tensor, alpha: float, dim: int) -> torch.Tensor:
    """The entmax threshold of shifted scores ``X`` (max 0) for any float alpha > 1, exact in the
    dtype, without 50 blind halvings (issue 25; Chapter 8).

    The root for any subset of a row's scores is a lower bound on the row's threshold (f only
    grows with more entries), so every score in the support lies above it. (1) Newton
    (:func:`_newton_root`) on the row's ``k`` largest scores (``torch.topk``) gives such a bound
    ``tau0``. (2) The scores above ``tau0`` hold the whole support; Newton again, on those
    candidates only (ragged rows; every score of the row, in blocks, when most scores are
    candidates, as in the near-uniform rows of a model early in training), from ``tau0``, gives
    the threshold of the full row. For
    alpha > 2 step (1) alone, with ``k`` doubled until at most ``k`` scores lie above the root
    (then the ``k`` largest hold the support and the root is the threshold). A row's threshold
    depends on that row alone. ``keepdim`` along ``dim``."""
    Xr = X.movedim(dim, -1)
    shape = Xr.shape
    flat = Xr.reshape(-1, shape[-1])
    n, V = flat.shape
    k = min(V, _NEWTON_FIRST_K)
    Xk = flat if k >= V else torch.topk(flat, k, dim=1, sorted=True).values
    tau0 = _newton_root(Xk, alpha)
    if alpha <= 2.0:
        above = flat > tau0
        # in float64: float32 sums of thousands of terms would lose the digits that
        # p = u^{1/(alpha-1)} amplifies (20x at alpha = 1.05)
        if int(above.sum()) > _DENSE_CANDIDATE_FRACTION * above.numel():  # near-uniform rows
            tau = _dense_newton_root(flat, alpha, tau0.squeeze(1).double())
        else:
            row_ids, cols = above.nonzero(as_tuple=True)
            vals = flat[row_ids, cols].double()
            tau = _ragged_newton_root(vals, row_ids, n, alpha, tau0.squeeze(1).double())
        return tau.to(X.dtype).view(*shape[:-1], 1).movedim(-1, dim)
    tau = tau0
    pending = []
    count = (flat > tau0).sum(1)
    if not bool((count <= k).all()):
        pending.append((k, torch.arange(n, device=X.device)))
    while pending:  # alpha > 2: grow k (a power of two >= twice k and >= the row's count)
        k, rows = pending.pop()
        count = (flat[rows] > tau[rows]).sum(1)
        unfit = count > k
        rows, count = rows[unfit], count[unfit]
        need = count.clamp(min=2 * k).double().log2().ceil().exp2().long().clamp(max=V)
        for k_next in need.unique().tolist():
            sub_rows = rows[need == k_next]
            sub = flat[sub_rows]
            Xk = sub if k_next >= V else torch.topk(sub, int(k_next), dim=1, sorted=True).values
            tau[sub_rows] = _newton_root(Xk, alpha)
            if k_next < V:
                pending.append((int(k_next), sub_rows))
    return tau.view(*shape[:-1], 1).movedim(-1, dim)


def _masked_amax(z: torch.Tensor, dim: int, exclude: int) -> torch.Tensor:
    """``max`` along ``dim`` over every index but ``exclude``, read from two views (no copy)."""
    V = z.shape[dim]
    parts = [z.narrow(dim, 0, exclude), z.narrow(dim, exclude + 1, V - exclude - 1)]
    maxima = [part.amax(dim, keepdim=True) for part in parts if part.shape[dim] > 0]
    return maxima[0] if len(maxima) == 1 else torch.maximum(*maxima)


def _shift(z: torch.Tensor, dim: int, scale, exclude: int | None = None):
    """``X = scale * (z - max z)`` in the compute dtype, the maxima, after the row check.
    ``exclude``: an index along ``dim`` treated as ``-inf`` (masked) without copying ``z``."""
    zmax = z.amax(dim, keepdim=True) if exclude is None else _masked_amax(z, dim, exclude)
    _check_rows(zmax)
    X = z - zmax
    if exclude is not None:
        X.select(dim, exclude).fill_(-math.inf)
    if not (isinstance(scale, float) and scale == 1.0):
        X = X.mul_(scale)
    return X, zmax


# ------------------------------------------------------------------------- autograd Functions
class _SparsemaxFunction(Function):
    @staticmethod
    def forward(ctx, z, dim, k):
        X, _ = _shift(z, dim, 1.0)
        tau, _ = _sort_threshold(X, dim, 2.0, k)
        p = X.sub_(tau).clamp_(min=0)
        ctx.dim = dim
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        dim = ctx.dim
        supp = p > 0
        gz = g * supp
        # support mean of g; the support is read off p itself so the Jacobian matches the output
        v = gz.sum(dim, keepdim=True).div_(supp.sum(dim, keepdim=True))
        gz.sub_(v).mul_(supp)
        return gz, None, None


class _Entmax15Function(Function):
    @staticmethod
    def forward(ctx, z, dim, k):
        X, _ = _shift(z, dim, 0.5)
        tau, _ = _sort_threshold(X, dim, 1.5, k)
        s = X.sub_(tau).clamp_(min=0)  # s = sqrt(p) = p^{2 - 1.5}
        ctx.dim = dim
        ctx.save_for_backward(s)
        return s * s

    @staticmethod
    def backward(ctx, g):
        (s,) = ctx.saved_tensors
        dim = ctx.dim
        gz = g * s
        q = gz.sum(dim, keepdim=True).div_(s.sum(dim, keepdim=True))
        gz.sub_(q * s)
        return gz, None, None


def _entmax_jvp_t(p: torch.Tensor, g: torch.Tensor, alpha, dim: int) -> torch.Tensor:
    """s * (g - <s, g> / sum s) with s = p^{2-alpha} on the support (the entmax backward)."""
    s = torch.where(p > 0, p.pow(2.0 - alpha), torch.zeros((), dtype=p.dtype, device=p.device))
    gz = g * s
    q = gz.sum(dim, keepdim=True).div_(s.sum(dim, keepdim=True))
    return gz.sub_(q * s)


class _EntmaxBisectFunction(Function):
    @staticmethod
    def forward(ctx, z, alpha, dim, n_iter, ensure_sum_one, alpha_shape):
        X, _ = _shift(z, dim, alpha - 1.0)
        # n_iter None (float alpha from entmax()): the exact threshold; else n_iter halvings
        tau = _exact_threshold(X, alpha, dim) if n_iter is None else _bisect_threshold(X, alpha, dim, n_iter)
        p = X.sub_(tau).clamp_(min=0).pow_(1.0 / (alpha - 1.0))
        if ensure_sum_one:
            p = p.div_(p.sum(dim, keepdim=True))
        ctx.dim = dim
        ctx.alpha_shape = alpha_shape
        ctx.save_for_backward(p, alpha if isinstance(alpha, torch.Tensor) else None)
        ctx.alpha_float = None if isinstance(alpha, torch.Tensor) else alpha
        return p

    @staticmethod
    def backward(ctx, g):
        p, alpha_t = ctx.saved_tensors
        alpha = ctx.alpha_float if alpha_t is None else alpha_t
        dim = ctx.dim
        gz = _entmax_jvp_t(p, g, alpha, dim) if ctx.needs_input_grad[0] else None
        galpha = None
        if alpha_t is not None and ctx.needs_input_grad[1]:
            # dp_j/dalpha = b^2 (p_j - s_j/S) - b (p_j log p_j - (s_j/S) sum_i p_i log p_i),
            # b = 1/(alpha-1), s = p^{2-alpha}, S = sum s (differentiate p_j = u_j^b and sum p = 1).
            zero = torch.zeros((), dtype=p.dtype, device=p.device)
            supp = p > 0
            s = torch.where(supp, p.pow(2.0 - alpha), zero)
            s_hat = s / s.sum(dim, keepdim=True)
            plogp = torch.where(supp, p * torch.log(torch.where(supp, p, torch.ones_like(p))), zero)
            ent = plogp.sum(dim, keepdim=True)
            b = 1.0 / (alpha - 1.0)
            dpda = (p - s_hat) * b * b - (plogp - s_hat * ent) * b
            galpha = (g * dpda).sum(dim, keepdim=True).sum_to_size(ctx.alpha_shape)
        return gz, galpha, None, None, None, None


# ------------------------------------------------------------------------------- public API
def _half_wrap(fn, z, *args):
    dtype = _compute_dtype(z)
    if dtype != z.dtype:
        return fn(z.to(dtype), *args).to(z.dtype)
    return fn(z, *args)


def sparsemax(z: torch.Tensor, dim: int = -1, k: int | None = None) -> torch.Tensor:
    r"""Sparsemax (2-entmax): the Euclidean projection of ``z`` onto the simplex along ``dim``.

    Martins et al. (2020) Eq. 3 with alpha = 2; :math:`p = [z - \tau]_+` with the sort-based
    threshold :math:`\tau = (\sum_{i \le K} z_{(i)} - 1)/K` (module docstring), exact.
    ``k``: sort only the ``k`` largest scores (``torch.topk``); rows whose support does not fit
    in ``k`` are redone with the full sort, so the result never depends on ``k``. With
    ``k=None`` the exact candidate bound ``z_j >= max z - 1`` chooses the partial sort size
    (full sort when the candidates exceed half the row). Backward: the support mean of
    the incoming gradient is subtracted on the support, zero elsewhere. See Chapter 8 (08_sparse).
    """
    dim = _check_scores(z, dim)
    k = _check_k(k, z.shape[dim])
    return _half_wrap(_SparsemaxFunction.apply, z, dim, k)


def entmax15(z: torch.Tensor, dim: int = -1, k: int | None = None) -> torch.Tensor:
    r"""1.5-entmax along ``dim``: :math:`p = [z/2 - \tau]_+^2`, exact.

    Martins et al. (2020) Eq. 3 with alpha = 1.5; the threshold comes from the sort-based
    algorithm of Peters, Niculae & Martins (2019) (Alg. 2): on the ``k`` largest of
    :math:`X = (z - \max z)/2`, :math:`\sum (X_{(i)} - \tau)^2 = 1` is a quadratic whose root is
    :math:`\tau_k = M_k - \sqrt{1/k - S_k + M_k^2}` (cumulative mean :math:`M_k`, mean of
    squares :math:`S_k`); the support size is the number of :math:`k` with
    :math:`\tau_k \le X_{(k)}`, as their ``entmax`` package counts it. ``k`` as in
    :func:`sparsemax` (candidate bound ``z_j >= max z - 2``). Backward:
    :math:`s \odot (\bar p - \langle s, \bar p\rangle/\sum s)` with :math:`s = \sqrt p`. See
    Chapter 8 (08_sparse).
    """
    dim = _check_scores(z, dim)
    k = _check_k(k, z.shape[dim])
    return _half_wrap(_Entmax15Function.apply, z, dim, k)


def _prepare_alpha(alpha, z: torch.Tensor, dim: int, dtype: torch.dtype):
    """Float alpha > 1, or a tensor alpha broadcastable to ``z`` with size 1 along ``dim``.

    Returns (alpha for the Function, original alpha shape or None)."""
    if isinstance(alpha, torch.Tensor) and (alpha.numel() != 1 or alpha.requires_grad):
        if not alpha.is_floating_point():
            raise ValueError(f"a tensor alpha must have a floating-point dtype, got {alpha.dtype}")
        shape = list(z.shape)
        shape[dim] = 1
        try:
            expanded = torch.broadcast_shapes(tuple(alpha.shape), tuple(shape))
        except RuntimeError as err:
            raise ValueError(
                f"a tensor alpha must broadcast to {tuple(shape)} (z's shape with size 1 along dim), "
                f"got shape {tuple(alpha.shape)}"
            ) from err
        if list(expanded) != shape:
            raise ValueError(
                f"a tensor alpha must broadcast to {tuple(shape)} (z's shape with size 1 along dim), "
                f"got shape {tuple(alpha.shape)}"
            )
        if not bool(torch.isfinite(alpha).all()) or not bool((alpha > 1).all()):
            raise ValueError("every entry of alpha must be a finite number > 1 for entmax_bisect")
        return alpha.to(dtype=dtype, device=z.device).expand(shape), tuple(alpha.shape)
    return _check_alpha_number(alpha, minimum_open=True), None


def entmax_bisect(
    z: torch.Tensor, alpha=1.5, dim: int = -1, n_iter: int = 50, ensure_sum_one: bool = True
) -> torch.Tensor:
    r"""alpha-entmax for any alpha > 1 by bisection on the threshold.

    :math:`p_j = [(\alpha-1) z_j - \tau]_+^{1/(\alpha-1)}` (Martins et al. 2020, Eq. 3 and its
    KKT solution), with :math:`\tau` the root of the decreasing
    :math:`f(\tau) = \sum_j p_j(\tau) - 1` found by ``n_iter`` halvings of the bracket
    :math:`[-1, -V^{1-\alpha}]` in shifted coordinates (each halving gains one bit; 50 reaches
    float64 resolution). The returned ``p`` uses the lower end of the bracket (sum >= 1) and is
    renormalised when ``ensure_sum_one``. ``alpha``: a float > 1 or a tensor broadcastable to
    ``z`` with size 1 along ``dim`` (per-row alphas; it then receives a gradient,
    :math:`\partial p_j/\partial\alpha = b^2 (p_j - \hat s_j) - b (p_j \log p_j - \hat s_j
    \sum_i p_i \log p_i)`, :math:`b = 1/(\alpha-1)`, :math:`\hat s = s/\sum s`).
    Backward for ``z``: :math:`s \odot (\bar p - \langle s, \bar p\rangle/\sum s)`,
    :math:`s = p^{2-\alpha}` on the support. See Chapter 8 (08_sparse).
    """
    dim = _check_scores(z, dim)
    if isinstance(n_iter, bool) or not isinstance(n_iter, numbers.Integral) or n_iter < 1:
        raise ValueError(f"n_iter must be a positive integer, got {n_iter!r}")
    dtype = _compute_dtype(z)
    a, a_shape = _prepare_alpha(alpha, z, dim, dtype)
    if a_shape is None:
        a_shape = ()
    p = _EntmaxBisectFunction.apply(z.to(dtype), a, dim, int(n_iter), bool(ensure_sum_one), a_shape)
    return p.to(z.dtype)


def entmax(z: torch.Tensor, alpha, dim: int = -1) -> torch.Tensor:
    r"""alpha-entmax (Martins et al. 2020, Eq. 3) for any alpha >= 1, choosing the algorithm.

    alpha == 1: softmax; 1.5: :func:`entmax15`; 2: :func:`sparsemax` (both exact, sort-based);
    any other float: the threshold exact in the dtype (Newton on the k largest scores, see
    ``_exact_threshold``), with :func:`entmax_bisect`'s backward; a per-row tensor alpha:
    :func:`entmax_bisect`. See Chapter 8 (08_sparse).
    """
    dim = _check_scores(z, dim)
    if isinstance(alpha, torch.Tensor) and (alpha.numel() != 1 or alpha.requires_grad):
        return entmax_bisect(z, alpha, dim)
    a = _check_alpha_number(alpha)
    if a == 1.0:
        return _half_wrap(lambda x: _softmax_checked(x, dim), z)
    if a == 1.5:
        return entmax15(z, dim)
    if a == 2.0:
        return sparsemax(z, dim)
    return _half_wrap(lambda x: _EntmaxBisectFunction.apply(x, a, dim, None, True, ()), z)


def _softmax_checked(z: torch.Tensor, dim: int) -> torch.Tensor:
    _check_rows(z.amax(dim, keepdim=True).detach())
    return torch.softmax(z, dim)


def _shifted_threshold(z: torch.Tensor, alpha: float, dim: int):
    """(X, zmax, tau) with X = (alpha - 1)(z - max z) and tau in X's coordinates (no grad)."""
    if alpha == 1.5 or alpha == 2.0:
        X, zmax = _shift(z, dim, alpha - 1.0)
        tau, _ = _sort_threshold(X, dim, alpha, None)
    else:
        X, zmax = _shift(z, dim, alpha - 1.0)
        tau = _exact_threshold(X, alpha, dim)
    return X, zmax, tau


class _ThresholdFunction(Function):
    @staticmethod
    def forward(ctx, z, alpha, dim):
        X, zmax, tau = _shifted_threshold(z, alpha, dim)
        u = (X - tau).clamp_(min=0)
        if alpha == 1.5:
            s = u  # p^{1/2} = u
        elif alpha == 2.0:
            s = (u > 0).to(u.dtype)
        else:
            s = u.pow_((2.0 - alpha) / (alpha - 1.0)).mul_(u > 0)
        ctx.dim = dim
        ctx.alpha = alpha
        ctx.save_for_backward(s)
        return tau + (alpha - 1.0) * zmax

    @staticmethod
    def backward(ctx, g):
        # d tau / d z_j = (alpha - 1) s_j / sum s (differentiate sum_j p_j(z, tau) = 1).
        (s,) = ctx.saved_tensors
        gz = s * (g * (ctx.alpha - 1.0) / s.sum(ctx.dim, keepdim=True))
        return gz, None, None


def entmax_threshold(z: torch.Tensor, alpha, dim: int = -1) -> torch.Tensor:
    r"""The threshold :math:`\tau` of alpha-entmax, with ``keepdim`` along ``dim``.

    For alpha > 1: :math:`\alpha\text{-entmax}(z) = [(\alpha-1) z - \tau]_+^{1/(\alpha-1)}`
    (in the original, unshifted coordinates of ``z``); exact (sort-based) for alpha in {1.5, 2},
    by bisection otherwise. For alpha = 1 it returns the limit form :math:`\log\sum_j e^{z_j}`, so
    that softmax(z) = exp(z - tau). Differentiable:
    :math:`\partial\tau/\partial z = (\alpha - 1)\, s/\sum s`, :math:`s = p^{2-\alpha}` on the
    support (for alpha = 1, softmax). See Chapter 8 (08_sparse).
    """
    dim = _check_scores(z, dim)
    a = _check_alpha_number(alpha)
    if a == 1.0:
        _check_rows(z.amax(dim, keepdim=True).detach())
        return torch.logsumexp(z, dim, keepdim=True)
    return _half_wrap(_ThresholdFunction.apply, z, a, dim)


def entmax_support(z: torch.Tensor, alpha, dim: int = -1) -> torch.Tensor:
    r"""The support of alpha-entmax of ``z``: a bool tensor of ``z``'s shape, True where p > 0.

    Token j is in the support when :math:`(\alpha-1) z_j > \tau` (Martins et al. 2020, Eq. 3;
    Chapter 8, 08_sparse). The comparison is made where :func:`entmax` makes it, on the scores
    shifted by their maximum, :math:`(\alpha-1)(z_j - \max z)` against the threshold in those
    coordinates: shifting the threshold back to ``z``'s own coordinates rounds it, and one ulp
    inside the gap a token could be in the support while the unshifted comparison said not. So
    the support is exactly where :func:`entmax` is positive, except where a probability
    ``(X_j - tau)^{1/(alpha-1)}`` too small for the dtype rounds to zero (alpha near 1 in
    float32), where the support still says True. ``alpha = 1`` (softmax): every finite
    score. ``-inf`` scores are never in it. No gradient.
    """
    dim = _check_scores(z, dim)
    a = _check_alpha_number(alpha)
    z = z.detach()
    if a == 1.0:
        _check_rows(z.amax(dim, keepdim=True))
        return z > -math.inf
    dtype = _compute_dtype(z)
    X, _, tau = _shifted_threshold(z.to(dtype), a, dim)
    return X > tau


# How far from 1 a distribution may sum, per dtype (summation error of V rounded terms); the
# tolerances of nmst_lib.metrics.
_SUM_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def _check_distribution(q: torch.Tensor, dim: int, dtype: torch.dtype) -> None:
    """``q`` (``p`` in the compute dtype) must be finite, >= 0 and sum to 1 along ``dim``."""
    if q.numel() == 0:
        return
    if not bool(torch.isfinite(q).all()):
        raise ValueError("p must be finite: a probability distribution along dim (not logits with -inf, no NaN)")
    if float(q.min()) < 0:
        raise ValueError(f"p must be >= 0 (a probability distribution along dim), min is {float(q.min())!r}")
    tol = _SUM_TOLERANCE.get(dtype, 1e-3)
    worst = float((q.sum(dim) - 1).abs().max())
    if worst > tol:
        raise ValueError(f"p must sum to 1 along dim (a probability distribution) within {tol:g} for {dtype}; "
                         f"the worst slice is off by {worst:.3g}")


def tsallis_entropy(p: torch.Tensor, alpha, dim: int = -1) -> torch.Tensor:
    r"""Tsallis alpha-entropy of distributions ``p`` along ``dim`` (Martins et al. 2020, Eq. 4).

    :math:`H_\alpha(p) = \frac{1}{\alpha(\alpha-1)} \sum_j (p_j - p_j^\alpha)` for alpha != 1;
    alpha = 1: Shannon :math:`-\sum_j p_j \log p_j` (natural log, 0 log 0 = 0); alpha = 2: Gini,
    :math:`(1 - \|p\|^2)/2`. Maximised by the uniform distribution on V outcomes, where it equals
    :math:`(1 - V^{1-\alpha})/(\alpha(\alpha-1))` (-> log V as alpha -> 1). Returns shape
    ``p.shape`` without ``dim``. ``p`` must be a distribution along ``dim``: finite, >= 0 and
    summing to 1 within a dtype-dependent tolerance (float64 1e-6, float32 1e-3, float16 1e-2,
    bfloat16 3e-2), else ``ValueError`` (NaN gave -0.0, [3, 4] gave -9). See Chapter 8 (08_sparse).
    """
    dim = _check_scores(p, dim, name="p")
    a = _check_alpha_number(alpha)
    dtype = _compute_dtype(p)
    q = p.to(dtype)
    _check_distribution(q.detach(), dim, p.dtype)
    if a == 1.0:
        pos = q > 0
        ent = -torch.where(pos, q * torch.log(torch.where(pos, q, torch.ones_like(q))), torch.zeros_like(q)).sum(dim)
    elif a == 2.0:
        ent = (q - q * q).sum(dim) * 0.5
    else:
        ent = (q - q.pow(a)).sum(dim) / (a * (a - 1.0))
    return ent.to(p.dtype)


# ---------------------------------------------------------------------------------- the loss
def _entmax_probs_nograd(z: torch.Tensor, alpha: float, dim: int, exclude: int | None = None):
    """``(p, p^(alpha - 1))`` of alpha-entmax(z) without autograd. The second comes from
    ``p = u^b / S`` (``u = [X - tau]_+``, ``b = 1/(alpha-1)``, ``S`` the row sum, 1 to rounding) as
    ``u / S^(alpha-1)``: no ``pow`` over the row at a fractional exponent."""
    if alpha == 2.0:
        X, _ = _shift(z, dim, 1.0, exclude)
        tau, _ = _sort_threshold(X, dim, 2.0, None)
        p = X.sub_(tau).clamp_(min=0)
        return p, p
    if alpha == 1.5:
        X, _ = _shift(z, dim, 0.5, exclude)
        tau, _ = _sort_threshold(X, dim, 1.5, None)
        u = X.sub_(tau).clamp_(min=0)
        return u * u, u
    X, _ = _shift(z, dim, alpha - 1.0, exclude)
    tau = _exact_threshold(X, alpha, dim)
    u = X.sub_(tau).clamp_(min=0)
    p = _power(u, 1.0 / (alpha - 1.0))
    S = p.sum(dim, keepdim=True)
    return p.div_(S), u.div_(S.pow(alpha - 1.0))


class _EntmaxLossFunction(Function):
    @staticmethod
    def forward(ctx, z, target, alpha, dim, exclude=None):
        p, p_a1 = _entmax_probs_nograd(z, alpha, dim, exclude)  # p = 0 at exclude: drops out of the sums
        t = target.unsqueeze(dim)
        zy = z.gather(dim, t)
        supp = p > 0
        # (p - e_y)^T z = sum_{j in supp} p_j (z_j - z_y): differences first (exact for close
        # floats), and -inf logits (p_j = 0) never multiply 0.
        diff = torch.where(supp, (z - zy).mul_(p), torch.zeros((), dtype=p.dtype, device=p.device))
        # H_alpha(p) = sum_j p_j (1 - p_j^(alpha - 1)) / (alpha (alpha - 1)). For the largest p_m,
        # 1 - p_m^(alpha-1) cancels when p_m is near 1 (a loss near 0 would come out of rounding,
        # even negative); with r = sum_{j != m} p_j / p_m (each term accurate), p_m = 1 / (1 + r)
        # and 1 - p_m^(alpha-1) = -expm1(-(alpha - 1) log1p(r)) keep every digit.
        terms = p - p * p_a1
        m = p.argmax(dim, keepdim=True)
        pm = p.gather(dim, m)
        r = p.scatter(dim, m, 0.0).sum(dim, keepdim=True).div_(pm)
        terms.scatter_(dim, m, pm * torch.expm1(torch.log1p(r) * (1.0 - alpha)).neg_())
        omega = terms.sum(dim) / (alpha * (alpha - 1.0))
        loss = diff.sum(dim) + omega
        ctx.dim = dim
        ctx.save_for_backward(p, t)
        return loss

    @staticmethod
    def backward(ctx, g):
        p, t = ctx.saved_tensors
        dim = ctx.dim
        gu = g.unsqueeze(dim)
        gz = p * gu
        gz.scatter_add_(dim, t, -gu)
        return gz, None, None, None, None


def entmax_loss(logits: torch.Tensor, target: torch.Tensor, alpha, dim: int = -1,
                exclude: int | None = None) -> torch.Tensor:
    r"""Per-row alpha-entmax (Fenchel-Young) loss, shape ``logits.shape`` without ``dim``.

    :math:`\ell_\alpha(z, y) = (p - e_y)^\top z + H_\alpha(p)`, :math:`p = \alpha\text{-entmax}(z)`
    (Martins et al. 2020, Eq. 6; Blondel et al. 2019). Non-negative and convex in ``z``; its
    gradient is :math:`p - e_y` (hand-written backward, scaled by the incoming gradient); zero
    iff :math:`z_y \ge z_j + 1/(\alpha-1)` for every :math:`j \ne y` (alpha > 1). alpha = 1 is
    exactly ``F.cross_entropy(..., reduction='none')``. ``target``: integer class ids of shape
    ``logits.shape`` without ``dim``; masked (-inf) logits are fine as long as each target's
    logit is finite. ``alpha`` is a single number >= 1 (1.5 and 2 exact, the others with the
    threshold exact in the dtype). ``exclude``: one class index along ``dim`` treated as masked
    (``-inf``: probability 0, gradient 0) without a copy of the logits, for the NMST-entmax head
    (entmax over the non-eos logits); no target may equal it. See Chapter 8 (08_sparse).
    """
    dim = _check_scores(logits, dim, name="logits")
    a = _check_alpha_number(alpha)
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor of class ids, got {type(target).__name__}")
    if not is_integer_tensor(target):
        raise ValueError(f"target must hold integer class ids (e.g. torch.long), got {target.dtype}")
    row_shape = logits.shape[:dim] + logits.shape[dim + 1 :]
    if tuple(target.shape) != tuple(row_shape):
        raise ValueError(
            f"target must have shape {tuple(row_shape)} (logits' shape without dim={dim}), got {tuple(target.shape)}"
        )
    V = logits.shape[dim]
    target = target.to(device=logits.device, dtype=torch.long)
    if target.numel() and (bool((target < 0).any()) or bool((target >= V).any())):
        raise ValueError(f"target ids must lie in [0, {V}) for {V} classes")
    if exclude is not None:
        if isinstance(exclude, bool) or not isinstance(exclude, numbers.Integral) or not 0 <= exclude < V:
            raise ValueError(f"exclude must be a class index in [0, {V}) or None, got {exclude!r}")
        if V < 2:
            raise ValueError("exclude needs at least two classes along dim (one is masked)")
        exclude = int(exclude)
        if target.numel() and bool((target == exclude).any()):
            raise ValueError(f"no target may equal exclude={exclude}: a masked target has infinite loss")
    dtype = _compute_dtype(logits)
    z = logits.to(dtype)
    zy = z.detach().gather(dim, target.unsqueeze(dim))
    if zy.numel() and not bool(torch.isfinite(zy).all()):
        raise ValueError("every target's logit must be finite (a masked, -inf, target has infinite loss)")
    if a == 1.0:
        if exclude is not None:
            z = z.index_fill(dim, torch.tensor([exclude], device=z.device), -math.inf)
        _check_rows(z.detach().amax(dim, keepdim=True))
        if z.dim() == 1:
            loss = F.cross_entropy(z, target, reduction="none")
        else:
            loss = F.cross_entropy(z.movedim(dim, 1), target, reduction="none")
    else:
        loss = _EntmaxLossFunction.apply(z, target, a, dim, exclude)
    return loss.to(logits.dtype)


# ------------------------------------------------------------------------------ log entmax
class _LogEntmaxFunction(Function):
    @staticmethod
    def forward(ctx, z, alpha, dim):
        X, _, tau = _shifted_threshold(z, alpha, dim)
        u = X.sub_(tau)
        supp = u > 0
        one = torch.ones((), dtype=u.dtype, device=u.device)
        u_safe = torch.where(supp, u, one)
        logp = torch.where(supp, torch.log(u_safe) / (alpha - 1.0), torch.full_like(u, float("-inf")))
        ctx.dim = dim
        ctx.alpha = alpha
        ctx.save_for_backward(u_safe, supp)
        return logp

    @staticmethod
    def backward(ctx, g):
        # d log p_i / d z_j = (delta_ij - s_j / sum s) / u_i on the support, u = (alpha-1) z - tau,
        # s = p^{2-alpha} = u^{(2-alpha)/(alpha-1)}; entries outside the support are constant -inf.
        u, supp = ctx.saved_tensors
        dim, alpha = ctx.dim, ctx.alpha
        zero = torch.zeros((), dtype=u.dtype, device=u.device)
        w = torch.where(supp, g / u, zero)
        if alpha == 2.0:
            s = supp.to(u.dtype)
        elif alpha == 1.5:
            s = torch.where(supp, u, zero)
        else:
            s = torch.where(supp, u.pow((2.0 - alpha) / (alpha - 1.0)), zero)
        q = w.sum(dim, keepdim=True) / s.sum(dim, keepdim=True)
        return w - q * s, None, None


def log_entmax(z: torch.Tensor, alpha, dim: int = -1) -> torch.Tensor:
    r"""log of alpha-entmax probabilities: ``-inf`` outside the support.

    alpha = 1: ``log_softmax``. alpha > 1: :math:`\log p_j = \frac{1}{\alpha-1}\log((\alpha-1) z_j
    - \tau)` on the support, computed from the shifted scores (no underflow of :math:`p_j` for
    alpha close to 1). Differentiable on the support (the -inf entries are constants). Used by the
    entmax output heads for decoding and evaluation. See Chapter 8 (08_sparse).
    """
    dim = _check_scores(z, dim)
    a = _check_alpha_number(alpha)
    if a == 1.0:
        _check_rows(z.detach().amax(dim, keepdim=True))
        return torch.log_softmax(z, dim)
    return _half_wrap(_LogEntmaxFunction.apply, z, a, dim)
