"""Chapter 8 (``08_sparse``): a sparse output layer (alpha-entmax) can make
every decoder, ancestral sampling included, never stop, and NMST-entmax
restores termination.

Part of :mod:`nmst_lib.theory`, which re-exports every public name here."""

from __future__ import annotations

import math

import torch

from .._validation import (
    check_eps,
    check_index,
    check_positive_int,
    check_token_ids,
)
from ..entmax import entmax_support
from ..heads import (
    EntmaxHead,
    NMSTEntmaxHead,
    OutputHead,
    VanillaHead,
    _check_alpha,
)

__all__ = [
    "entmax_eos_gap",
    "entmax_excludes",
    "EosOutsideSupportModel",
    "eos_outside_support_model",
    "nmst_sampling_nontermination_bound",
]


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# ---------------------------------------------------------------------------------------
# Chapter 8: a sparse output layer can make every decoder, ancestral sampling included, inconsistent
# ---------------------------------------------------------------------------------------


def entmax_eos_gap(alpha) -> float:
    r"""The score gap ``1 / (alpha - 1)`` that puts a token outside the support of alpha-entmax.

    Chapter 8 (08_sparse), Proposition ("a sparse output layer can make every decoder,
    ancestral sampling included, inconsistent"), first half: for ``alpha > 1`` and scores z,

    .. math::
        z_{\max} - z_v \ge \frac{1}{\alpha - 1} \;\Longrightarrow\; \mathrm{entmax}_\alpha(z)_v = 0.

    Proof. alpha-entmax is ``p_u = [(alpha - 1) z_u - tau]_+^{1/(alpha-1)}`` with tau chosen so
    that ``sum_u p_u = 1`` (Peters et al. (2019); the problem it solves is Martins et al.
    (2020), eq. 3).
    Since ``p_max <= 1``, ``(alpha - 1) z_max - tau <= 1``, i.e. ``tau >= (alpha - 1) z_max - 1``.
    The gap gives ``(alpha - 1) z_v <= (alpha - 1) z_max - 1 <= tau``, so ``p_v = 0``. The
    exact condition is ``(alpha - 1) z_v <= tau`` (:func:`entmax_excludes`); the gap is
    sufficient, and necessary only when the top token takes all the mass. ``alpha = 1`` (the
    softmax) excludes nothing: the gap is ``inf``.
    """
    alpha = _check_alpha(alpha)
    return math.inf if alpha == 1.0 else 1.0 / (alpha - 1.0)


def entmax_excludes(
    z: torch.Tensor, index, alpha, dim: int = -1
) -> torch.Tensor:
    """Whether token ``index`` gets probability exactly zero under alpha-entmax of ``z``.

    The exact criterion ``(alpha - 1) z_index <= tau(z)`` with the threshold tau of
    :func:`nmst_lib.entmax.entmax_threshold` (Martins et al. (2020), eq. 3; Chapter 8,
    08_sparse, Proposition), decided as :func:`nmst_lib.entmax.entmax_support` decides it, in
    the shifted coordinates :func:`nmst_lib.entmax.entmax` computes in, so that the two agree
    to the last bit; the sufficient gap is :func:`entmax_eos_gap`. Returns a bool tensor of
    ``z``'s shape without ``dim``. ``alpha = 1`` (softmax) gives False wherever ``z_index`` is
    finite; a ``-inf`` score is always excluded.
    """
    if not isinstance(z, torch.Tensor) or not z.is_floating_point():
        raise TypeError("z must be a floating-point torch.Tensor of scores")
    if z.dim() == 0:
        raise ValueError("z must have at least one dimension (the vocabulary)")
    alpha = _check_alpha(alpha)
    index = check_index(index, z.shape[dim], "index")
    return ~entmax_support(z, alpha, dim=dim).select(dim, index)


def nmst_sampling_nontermination_bound(eps, max_len: int) -> float:
    """Upper bound ``(1 - eps)^{L (L + 1) / 2}`` on r_nt(L) of ancestral sampling from an NMST or
    NMST-entmax model.

    Drawing from the model's own distribution, the chance of no eos in the first L steps is
    ``prod_{t <= L} (1 - p(eos at t)) <= prod_{t <= L} (1 - eps)^t`` because ``p(eos at t) >=
    f_lb(t) = 1 - (1 - eps)^t`` whatever the prefix (Choi, Cho, Lee (2023), Def. 6 and Thm. 3;
    Chapter 8, 08_sparse, the NMST-entmax head: the sparse part never touches eos). It goes to
    zero, so sampling terminates with probability one. Computed in log space.
    """
    eps = check_eps(eps)
    max_len = check_positive_int(max_len, "max_len", minimum=0)
    return math.exp(max_len * (max_len + 1) / 2 * math.log1p(-eps))


class EosOutsideSupportModel:
    r"""A bigram model whose scores keep eos outside the alpha-entmax support at every step
    (Chapter 8, 08_sparse, Proposition: a sparse output layer can make every decoder,
    ancestral sampling included, inconsistent).

    The scores of the next token after token i are row i of ``scores`` ``[V, V]``: the
    non-eos entries lie in ``[0, spread]`` and the eos entry is
    ``max_{v != eos} scores[i, v] - gap_factor / (alpha - 1)`` with ``gap_factor >= 1``. By
    :func:`entmax_eos_gap`, alpha-entmax of every row gives eos probability exactly zero, so
    under the entmax output layer *every* sequence that ends in eos has probability zero:
    ancestral sampling (which for this model is entmax sampling of its scores) never stops,
    r_nt(L) = 1 for every L, and so does every decoder that keeps to the support (greedy,
    top-k, nucleus, their consistent variants, which only add a zero-probability eos, and beam
    search). The softmax of the same scores gives eos at least ``min_softmax_eos_prob > 0`` at
    every step, so ancestral sampling of the softmax model stops with probability one,
    r_nt(L) <= (1 - min_softmax_eos_prob)^L (Welleck et al. (2020), Lemma 3.2).

    ``head`` is the output layer turning the scores into the model's log-probabilities
    (:class:`~nmst_lib.heads.EntmaxHead` by default; :class:`~nmst_lib.heads.VanillaHead`
    for the softmax model, :class:`~nmst_lib.heads.NMSTEntmaxHead`, which restores
    termination). Implements the decoding protocol of ARCHITECTURE.md; the state is the pair (last
    token ``[B]``, the head's step state ``[B]``).
    """

    def __init__(
        self, scores: torch.Tensor, head: OutputHead, alpha: float, eos_id: int
    ):
        self.scores = scores
        self.head = head
        self.alpha = float(alpha)
        self.vocab_size = int(scores.shape[0])
        self.eos_id = int(eos_id)
        others = (
            torch.arange(self.vocab_size, device=scores.device) != self.eos_id
        )
        self.min_gap = float(
            (scores[:, others].amax(-1) - scores[:, self.eos_id]).min()
        )
        self.min_softmax_eos_prob = float(
            torch.softmax(scores.double(), -1)[:, self.eos_id].min()
        )

    @property
    def device(self) -> torch.device:
        return self.scores.device

    def _check_tokens(self, tokens: torch.Tensor, name: str) -> torch.Tensor:
        """``tokens`` checked as ids of this vocabulary, on the model's device."""
        return check_token_ids(tokens, self.vocab_size, name).to(self.device)

    def initial_state(self, contexts: torch.Tensor):
        """The first continuation step follows the last context token (``contexts [B, k]``)."""
        if (
            not isinstance(contexts, torch.Tensor)
            or contexts.dim() != 2
            or contexts.shape[1] == 0
        ):
            raise ValueError(
                "contexts must be a LongTensor of shape [B, k] with k >= 1"
            )
        last = self._check_tokens(contexts, "contexts")[:, -1]
        head_state = self.head.initial_step_state(
            last.shape[0], device=self.device
        )
        log_probs, head_state = self.head.step(self.scores[last], head_state)
        return (last, head_state), log_probs

    def step(self, state, tokens: torch.Tensor):
        """Feed one token per row; the scores of the next step are its row of ``scores``."""
        _, head_state = state
        tokens = self._check_tokens(tokens, "tokens")
        log_probs, head_state = self.head.step(self.scores[tokens], head_state)
        return (tokens, head_state), log_probs

    def select(self, state, index: torch.Tensor):
        """Rows of the state picked, reordered or repeated by ``index``."""
        index = index.to(self.device)
        return state[0][index], state[1][index]


_CONSTRUCTION_HEADS = ("entmax", "vanilla", "nmst-entmax")


def eos_outside_support_model(
    vocab_size: int = 8,
    alpha: float = 1.5,
    *,
    head: str = "entmax",
    eps: float | None = None,
    gap_factor: float = 1.5,
    spread: float = 2.0,
    eos_id: int = -1,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> EosOutsideSupportModel:
    """Build the construction of Chapter 8 (08_sparse), Proposition: "a sparse output layer can
    make every decoder, ancestral sampling included, inconsistent".

    Statement. Let alpha > 1 and let a model's scores satisfy
    ``max_v z_v - z_eos >= 1/(alpha - 1)`` after every prefix. Under the alpha-entmax output
    layer, eos has probability exactly zero at every step (:func:`entmax_eos_gap`), hence
    p(|Y| < inf) = 0: ancestral (= entmax) sampling never terminates, r_nt(L) = 1 for all L,
    and no decoder that keeps to the model's support terminates either. With the softmax on
    the same (bounded) scores eos keeps a probability bounded away from zero, and ancestral
    sampling terminates with probability one; with the NMST-entmax head (NMST's eos, entmax
    for the rest) ``p(eos at t) >= 1 - (1 - eps)^t`` and sampling terminates
    (:func:`nmst_sampling_nontermination_bound`).

    The scores (:class:`EosOutsideSupportModel`, drawn reproducibly from ``seed``): non-eos
    entries uniform in ``[0, spread]``, the eos entry ``gap_factor / (alpha - 1)`` below each
    row's best non-eos score (``gap_factor >= 1``; the default 1.5 leaves a margin for
    rounding). ``head``: ``"entmax"`` (alpha-entmax; the inconsistent model), ``"vanilla"``
    (softmax of the same scores) or ``"nmst-entmax"`` (needs ``eps``). ``alpha > 1`` (the
    gap is infinite at alpha = 1). float64 by default; default device CUDA when available.
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size", minimum=2)
    alpha = _check_alpha(alpha)
    if alpha == 1.0:
        raise ValueError(
            "alpha must be > 1: the softmax (alpha = 1) gives every finite score positive probability"
        )
    if (
        isinstance(eos_id, int)
        and not isinstance(eos_id, bool)
        and eos_id == -1
    ):
        eos_id = vocab_size - 1
    eos_id = check_index(eos_id, vocab_size, "eos_id")
    for value, name, low in (
        (gap_factor, "gap_factor", 1.0),
        (spread, "spread", 0.0),
    ):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (math.isfinite(value) and value >= low)
        ):
            raise ValueError(
                f"{name} must be a finite number >= {low:g}, got {value!r}"
            )
    if (
        not isinstance(head, str)
        or head.strip().lower() not in _CONSTRUCTION_HEADS
    ):
        raise ValueError(
            f"head must be one of {', '.join(_CONSTRUCTION_HEADS)}, got {head!r}"
        )
    head = head.strip().lower()
    if head == "nmst-entmax":
        if eps is None:
            raise ValueError(
                "the nmst-entmax head needs eps in (0, 1), e.g. eps=0.05"
            )
        layer = NMSTEntmaxHead(eps, alpha, eos_id=eos_id)
    else:
        if eps is not None:
            raise ValueError(
                f"the {head} head has no eps; pass eps=None (got eps={eps!r})"
            )
        layer = (
            EntmaxHead(alpha, eos_id=eos_id)
            if head == "entmax"
            else VanillaHead(eos_id=eos_id)
        )
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(
            f"dtype must be a floating-point torch.dtype, got {dtype!r}"
        )
    device = _default_device() if device is None else torch.device(device)
    gen = torch.Generator().manual_seed(int(seed))
    scores = float(spread) * torch.rand(
        (vocab_size, vocab_size), generator=gen, dtype=torch.float64
    )
    others = torch.arange(vocab_size) != eos_id
    scores[:, eos_id] = scores[:, others].amax(-1) - float(
        gap_factor
    ) * entmax_eos_gap(alpha)
    return EosOutsideSupportModel(
        scores.to(dtype=dtype, device=device), layer, alpha, eos_id
    )
