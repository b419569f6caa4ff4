"""The papers' constructions and bounds as code.

* :func:`inconsistent_rnn` builds the tanh RNN of the proof of Welleck et al. (2020),
  Theorem 3.4: a *consistent* language model (every finite sequence has positive
  probability, eos has probability bounded away from zero) under which greedy search, top-k,
  nucleus and beam search never emit eos (Chapter 2, ``02_consistency``).
* :func:`half_life_bound`, :func:`first_step_eos_above_half` and
  :func:`beam_termination_bound` are the step counts used in the consistency proofs of the
  self-terminating (ST) and non-monotonic self-terminating (NMST) models: Welleck et al.
  (2020) Theorems 4.2-4.3 and Choi, Cho, Lee (2023) Theorem 3 (Chapters 4-5,
  ``04_self_terminating`` and ``05_nmst``).
* :func:`eos_outside_support_model` (Chapter 8, ``08_sparse``) is a bigram model whose scores
  put eos at least ``1/(alpha - 1)`` below the best token at every step, so that alpha-entmax
  gives eos probability exactly zero (:func:`entmax_eos_gap`, :func:`entmax_excludes`): every
  decoder, ancestral (entmax) sampling included, never terminates, while the softmax of the same
  scores terminates with probability one and the NMST-entmax head on them terminates by
  :func:`nmst_sampling_nontermination_bound`.
* :func:`eos_trajectory` and :func:`eos_probabilities` (Chapters 4-5) follow
  one trajectory of the wish to stop lambda(t) (:data:`EOS_SHAPES`, Remark 1's
  among them) through the VA, ST and NMST output layers: ST's p(eos) can only
  rise, NMST's rises and falls with lambda(t) above the floor f_lb(t). The
  eos-probability explorer of :mod:`nmst_lib.plots` draws them.
* :func:`remark1_dataset` is the two-sequence data set of Choi, Cho, Lee (2023) Remark 1
  ("I am a boy" / "I am a boy, and you are a girl."), whose optimal eos probabilities are not
  monotone in t, so that no ST model can fit it (Chapter 5, ``05_nmst``).
* :func:`tempered_log_softmax` and the functions after it are what a temperature does
  (Chapter 9, ``09_temperature``): a global or per-token temperature's effect on the entropy
  (:func:`entropy_temperature_derivative`), on the nucleus (:func:`tempered_nucleus_size`) and
  on which token can become the argmax (:func:`can_become_argmax`), the mean of the
  softmax-normalised temperatures (:func:`softmax_temperature_mean`), and NMST's floor on
  p(eos) under any non-eos temperatures (:func:`tempered_nmst_log_probs`).

Chapters 2-5, 8 and 9 check their theorems numerically with these; the experiment chapters
(6-9) read the step bounds (e.g. :func:`first_step_eos_above_half`) to mark findings that a
theorem forces.

Conventions (ARCHITECTURE.md): steps t count continuation tokens, t = 1 predicts the first token
after the context; the ST/NMST lower bound on p(eos at t) is f_lb(t) = 1 - (1 - eps)^t.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ._validation import check_eps, check_index, check_positive_int
from .entmax import entmax_threshold
from .heads import (
    EntmaxHead,
    NMSTEntmaxHead,
    OutputHead,
    VanillaHead,
    _check_alpha,
    nmst_eos_log_probs,
    st_eos_log_probs,
    vanilla_log_probs,
)

__all__ = [
    "InconsistentRNN",
    "inconsistent_rnn",
    "EosTrace",
    "eos_rank_and_prob",
    "half_life_bound",
    "first_step_eos_above_half",
    "beam_termination_bound",
    "entmax_eos_gap",
    "entmax_excludes",
    "EosOutsideSupportModel",
    "eos_outside_support_model",
    "nmst_sampling_nontermination_bound",
    "RemarkOneDataset",
    "remark1_dataset",
    "optimal_eos_probs",
    "monotone_violation",
    "best_monotone_eos_probs",
    "eos_log_likelihood",
    # Chapter 9 (09_temperature): temperatures
    "tempered_log_softmax",
    "tempered_softmax",
    "tempered_entropy",
    "entropy_temperature_derivative",
    "tempered_nucleus_size",
    "can_become_argmax",
    "softmax_temperature_mean",
    "tempered_nmst_log_probs",
    # Chapters 4-5: eos probabilities of a constructed model (plots re-exports them)
    "EOS_SHAPES",
    "eos_trajectory",
    "eos_probabilities",
]


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# ---------------------------------------------------------------------------------------
# Welleck et al. (2020), Theorem 3.4: a consistent RNN that incomplete decoding never stops
# ---------------------------------------------------------------------------------------


class InconsistentRNN:
    r"""The tanh RNN of the proof of Welleck et al. (2020), Theorem 3.4 (Chapter 2, ``02_consistency``).

    The hidden state has two blocks, ``h_t = [h1_t ; h2_t]`` with ``h1_t`` in R^d and ``h2_t``
    in R^|V|, and the recurrence of the proof,

    .. math::
        h_t = \tanh\left(\begin{bmatrix} W_h & 0 \\ 0 & I \end{bmatrix} h_{t-1}
              + \begin{bmatrix} 0 \\ e(y_t) \end{bmatrix}\right),

    so ``h1_t = tanh(W_h h1_{t-1})`` (every entry of ``W_h`` positive) and
    ``h2_t = tanh(h2_{t-1} + e(y_t))`` (identity on a one-hot of the last token: ``h2_t[v]`` is a
    recency clock, not a counter: reading v puts it in (tanh 1, tanh 2), and every step
    without v applies tanh again, so it decays; Chapter 2, ``02_consistency``, checks that
    the value tells how many steps ago v was last read). ``h_0 = g(C)`` is positive: the
    positive vector ``h_init`` run through the same recurrence over the context tokens.

    Output embeddings (Definition 2.3, biases ``c_v = 0``): ``u_v = [ubar_v ; e(v)]`` with
    ``ubar_v > 0`` for non-eos v and ``ubar_eos < 0``; the next-token distribution is the
    vanilla softmax of ``u_v . h_t``.

    **Magnitudes.** The proof states that eos always has a negative logit, which needs more
    than the signs: ``u_eos . h_t = ubar_eos . h1_t + h2_t[eos]`` and ``h2_t[eos]`` lies in
    (0, 1). The construction therefore also guarantees

    * ``h1_t >= a_low`` entrywise for every t, where ``a_low = min(h_init[:d])`` (the
      chapter's underlined a): every row of ``W_h`` sums to at least ``chi`` with
      ``tanh(chi * a_low) >= a_low``, so ``h1_{t-1} >= a_low`` implies
      ``h1_t >= tanh(chi * a_low) >= a_low`` (induction); and
    * ``ubar_eos . h1_t <= -sum|ubar_eos| * a_low <= -eos_margin`` with ``eos_margin >= 1``,

    hence ``u_eos . h_t < 1 - eos_margin <= 0 < u_v . h_t`` for every non-eos v, every
    context and every prefix (even one containing eos). Consequently eos is ranked strictly
    last at every step, so p(eos) < 1/|V|, while ``|h_t| <= 1`` keeps p(eos) bounded away
    from zero (Lemma 3.2: the model is consistent and ancestral sampling stops).

    Implements the decoding protocol of ARCHITECTURE.md; the state is ``h_t`` as a ``[B, d + V]``
    tensor.

    Attributes:
        W_h: ``[d, d]`` positive recurrence block.
        h_init: ``[d + V]`` positive initial state, before the context is read.
        output_embeddings: ``[V, d + V]``; row v is ``u_v``.
        min_h1: the invariant lower bound a_low on every entry of ``h1_t``.
    """

    def __init__(self, W_h, h_init, output_embeddings, eos_id):
        self.W_h = W_h
        self.h_init = h_init
        self.output_embeddings = output_embeddings
        self.hidden_size = int(W_h.shape[0])
        self.vocab_size = int(output_embeddings.shape[0])
        self.eos_id = int(eos_id)
        self.min_h1 = float(h_init[: self.hidden_size].min())

    @property
    def device(self) -> torch.device:
        return self.W_h.device

    def _recur(self, h: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """One step of the proof's recurrence: tanh(blockdiag(W_h, I) h + [0; e(y)])."""
        d = self.hidden_size
        h1, h2 = h[:, :d], h[:, d:]
        one_hot = torch.nn.functional.one_hot(tokens, self.vocab_size).to(h.dtype)
        return torch.tanh(torch.cat([h1 @ self.W_h.T, h2 + one_hot], dim=-1))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Logits ``u_v . h_t`` for every token v (Definition 2.3 with c_v = 0)."""
        return h @ self.output_embeddings.T

    def _log_probs(self, h: torch.Tensor) -> torch.Tensor:
        # vanilla softmax (Definition 2.3) in log space; written with logsumexp because
        # torch.log_softmax on small float64 batches is very slow on a busy multi-threaded CPU
        logits = self.logits(h)
        return logits - torch.logsumexp(logits, dim=-1, keepdim=True)

    def _check_tokens(self, tokens: torch.Tensor, name: str) -> torch.Tensor:
        if not isinstance(tokens, torch.Tensor) or tokens.is_floating_point() or tokens.is_complex():
            raise TypeError(f"{name} must be an integer torch.Tensor of token ids")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"{name} must hold token ids in [0, {self.vocab_size}), got values outside")
        return tokens.to(self.device)

    def initial_state(self, contexts: torch.Tensor):
        """``h_0 = g(C)``: ``h_init`` run through the recurrence over the context ``[B, k]`` (k >= 0).

        Returns the state ``[B, d + V]`` and the log-probabilities of the first continuation token.
        """
        if not isinstance(contexts, torch.Tensor) or contexts.dim() != 2:
            raise ValueError("contexts must be a LongTensor of shape [B, k]")
        contexts = self._check_tokens(contexts, "contexts")
        h = self.h_init.expand(contexts.shape[0], -1)
        for j in range(contexts.shape[1]):  # a loop over context positions: the recurrence is sequential
            h = self._recur(h, contexts[:, j])
        return h, self._log_probs(h)

    def step(self, state: torch.Tensor, tokens: torch.Tensor):
        """``h_t = f(y_t, h_{t-1})`` for every row, and the next-token log-probabilities."""
        h = self._recur(state, self._check_tokens(tokens, "tokens"))
        return h, self._log_probs(h)

    def select(self, state: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Rows of the state picked, reordered or repeated by ``index``."""
        return state[index.to(state.device)]


def inconsistent_rnn(
    vocab_size: int,
    hidden_size: int | None = None,
    *,
    eos_id: int = -1,
    eos_margin: float = 1.25,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> InconsistentRNN:
    """Build the consistent tanh RNN of the proof of Welleck et al. (2020), Theorem 3.4.

    Under this model eos is ranked strictly last at every step (Chapter 2,
    ``02_consistency``), so every decoder that only considers the |V| - 1 most probable
    tokens never terminates: greedy, top-k with k <= |V| - 1, nucleus with p <= 1 - 1/|V|
    (the V - 1 other tokens already carry 1 - p(eos) > 1 - 1/|V| >= p), and beam search with
    width k <= sqrt(|V| - 1) (Choi et al. 2023, App. A.3; with the beam of Welleck et al.
    Def. A.2, which expands every token, any k <= |V| - 1 works, since every live prefix has
    |V| - 1 non-eos children scoring above its eos child). Ancestral sampling does terminate:
    p(eos) is bounded away from zero (Lemma 3.2).

    Parameters are drawn (from ``seed``, reproducibly) inside the ranges the proof needs:
    ``W_h`` entries uniform in [chi/d, 2 chi/d] with chi = 2 (rows sum to >= 2),
    ``h_init = 1/2`` (so ``h1_t >= 1/2`` for all t, since tanh(2 * 1/2) > 1/2),
    ``ubar_v`` uniform in [0.5/d, 1.5/d] for non-eos v, and ``ubar_eos`` uniform in
    [-1.5 c/d, -c/d] with c = 2 * ``eos_margin`` so that ``ubar_eos . h1_t <= -eos_margin``.
    See :class:`InconsistentRNN` for how each piece maps to the proof.

    Args:
        vocab_size: |V| >= 2, eos included.
        hidden_size: d, the size of the ``W_h`` block (default 8); the state has d + |V| entries.
        eos_id: the eos id (-1: the last id, the ARCHITECTURE.md convention).
        eos_margin: how far below -1 the first-block eos contribution is pushed; must be >= 1
            (the proof's "eos logit is negative" needs it, because ``h2_t[eos]`` < 1).
            Larger values make eos rarer (ancestral sampling stops later).
        seed: seed of the parameter draw.
        dtype: float64 by default.
        device: default CUDA when available, else CPU.
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size", minimum=2)
    d = 8 if hidden_size is None else check_positive_int(hidden_size, "hidden_size")
    if isinstance(eos_id, int) and not isinstance(eos_id, bool) and eos_id == -1:
        eos_id = vocab_size - 1
    eos_id = check_index(eos_id, vocab_size, "eos_id")
    if isinstance(eos_margin, bool) or not isinstance(eos_margin, (int, float)) or not eos_margin >= 1:
        raise ValueError(f"eos_margin must be a number >= 1 (the eos logit must stay negative), got {eos_margin!r}")
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    device = _default_device() if device is None else torch.device(device)
    gen = torch.Generator().manual_seed(int(seed))

    def uniform(shape, low, high):
        return low + (high - low) * torch.rand(shape, generator=gen, dtype=torch.float64)

    chi, a_low = 2.0, 0.5
    # the invariant h1_t >= a_low of the docstring
    assert math.tanh(chi * a_low) >= a_low
    W_h = uniform((d, d), chi / d, 2 * chi / d)
    h_init = torch.full((d + vocab_size,), a_low, dtype=torch.float64)
    ubar = uniform((vocab_size, d), 0.5 / d, 1.5 / d)
    c = float(eos_margin) / a_low
    ubar[eos_id] = -uniform((d,), c / d, 1.5 * c / d)
    output_embeddings = torch.cat([ubar, torch.eye(vocab_size, dtype=torch.float64)], dim=1)
    to = dict(dtype=dtype, device=device)
    return InconsistentRNN(W_h.to(**to), h_init.to(**to), output_embeddings.to(**to), eos_id)


class EosTrace(NamedTuple):
    """Per-step eos statistics along given trajectories (see :func:`eos_rank_and_prob`)."""

    rank: torch.Tensor  # [B, T] long: 1 = most probable, |V| = ranked last; 0 where not valid
    log_prob: torch.Tensor  # [B, T] log p(eos at t | prefix); NaN where not valid
    prob: torch.Tensor  # [B, T] p(eos at t | prefix); NaN where not valid
    valid: torch.Tensor  # [B, T] bool: step t was predicted (no eos/PAD before it)


def eos_rank_and_prob(model, contexts: torch.Tensor, tokens: torch.Tensor) -> EosTrace:
    """Rank and probability of eos at every step of given continuations (teacher forcing).

    For each row b and step t, the model's distribution p(. | y_<t, C) is computed along the
    continuation ``tokens[b]`` (e.g. ``Generation.tokens``: PAD = -1 after the end) and we
    report the rank of eos (1 + the number of tokens with strictly larger probability, so
    rank |V| means "strictly last", the property Welleck et al. (2020), Theorem 3.4 builds
    in) and p(eos). Steps after an eos or a PAD are not valid. Works with any model that
    follows the decoding protocol (Chapters 2 and 5, ``02_consistency``, ``05_nmst``).
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError("tokens must be an integer tensor of shape [B, T] (PAD = -1 allowed after the end)")
    if not isinstance(contexts, torch.Tensor) or contexts.dim() != 2 or contexts.shape[0] != tokens.shape[0]:
        raise ValueError("contexts must be a [B, k] integer tensor with the same B as tokens")
    batch, steps = tokens.shape
    state, log_probs = model.initial_state(contexts)
    device = log_probs.device
    tokens = tokens.to(device)
    ended = (tokens == model.eos_id) | (tokens < 0)
    # step t is predicted iff no eos/PAD among tokens[:, :t]
    valid = torch.ones(batch, steps, dtype=torch.bool, device=device)
    if steps > 1:
        valid[:, 1:] = ~torch.cumsum(ended[:, :-1].long(), dim=1).bool()
    feed = tokens.clamp(min=0)  # PAD positions are fed a dummy token; their outputs are masked
    eos_lp, ranks = [], []
    for t in range(steps):  # the model is recurrent: one step per position, all rows at once
        eos_col = log_probs[:, model.eos_id : model.eos_id + 1]
        eos_lp.append(eos_col.squeeze(1))
        ranks.append(1 + (log_probs > eos_col).sum(dim=-1))
        if t + 1 < steps:
            state, log_probs = model.step(state, feed[:, t])
    log_prob = torch.stack(eos_lp, dim=1) if steps else torch.empty(batch, 0, device=device)
    rank = torch.stack(ranks, dim=1) if steps else torch.empty(batch, 0, dtype=torch.long, device=device)
    nan = torch.full_like(log_prob, float("nan"))
    log_prob = torch.where(valid, log_prob, nan)
    rank = torch.where(valid, rank, torch.zeros_like(rank))
    return EosTrace(rank=rank, log_prob=log_prob, prob=log_prob.exp(), valid=valid)


# ---------------------------------------------------------------------------------------
# Termination bounds of ST (Welleck et al. 2020, Thms 4.2-4.3) and NMST (Choi et al. 2023, Thm 3)
# ---------------------------------------------------------------------------------------


def half_life_bound(eps) -> float:
    """beta_eps = -log 2 / log(1 - eps): after it the lower bound f_lb(t) = 1 - (1 - eps)^t exceeds 1/2.

    Welleck et al. (2020), proof of Theorem 4.2, where it is called B (and Choi, Cho, Lee
    (2023), proof of Theorem 3, eq. 23): both ST and NMST satisfy p(eos at t) >= f_lb(t), and
    f_lb(t) > 1/2 exactly when t > beta_eps, so from then on eos is the most probable token.
    Returned as the real number beta_eps (computed with ``log1p``, exact at eps = 1e-5); the
    half-life step t_{1/2} = floor(beta_eps) + 1, the first integer step after it, is
    :func:`first_step_eos_above_half` (Chapter 4, ``04_self_terminating``, Lemma "The
    half-life of the lower bound"; Chapter 5, ``05_nmst``).
    """
    eps = check_eps(eps)
    return -math.log(2.0) / math.log1p(-eps)


def first_step_eos_above_half(eps) -> int:
    """The half-life step t_{1/2}: the smallest integer t >= 1 with f_lb(t) = 1 - (1 - eps)^t > 1/2.

    This is t_{1/2} of Choi, Cho, Lee (2023), eq. 23 (proof of Theorem 3): for every
    t >= t_{1/2}, an ST or NMST model puts more than half of its mass on eos, so greedy search
    and every incomplete probable decoder include eos (Chapters 4-5, ``04_self_terminating``,
    ``05_nmst``). With beta_eps = :func:`half_life_bound` it equals floor(beta_eps) + 1
    (beta_eps itself, when it is an integer, does not count: f_lb(beta_eps) = 1/2 exactly).
    Greedy search on an ST or NMST model stops within t_{1/2} steps, and the bound is attained
    (eps = 1e-2: beta_eps = 68.97, t_{1/2} = 69). The result is checked against the
    inequality t * log1p(-eps) < -log 2 in float64.
    """
    eps = check_eps(eps)
    log_keep, target = math.log1p(-eps), -math.log(2.0)
    t = math.floor(-math.log(2.0) / log_keep) + 1
    # guard against rounding in beta_eps: make t the first step where the defining inequality holds
    while t > 1 and (t - 1) * log_keep < target:
        t -= 1
    while not t * log_keep < target:
        t += 1
    return int(t)


def beam_termination_bound(eps, beam_size: int) -> int:
    """Length bound for beam search on an ST or NMST model: every returned sequence has |y| <= t_{1/2} + k.

    Choi, Cho, Lee (2023), Theorem 3 (beam part, eq. 27) with t_{1/2} =
    :func:`first_step_eos_above_half` and k the beam width; Welleck et al. (2020), Theorem 4.3
    states the same argument as |Y| <= beta_eps + k with the real beta_eps = :func:`half_life_bound`
    (which they call B). Here
    |y| counts the continuation tokens including eos (ARCHITECTURE.md steps). Argument: from step
    t_{1/2} on, the eos child of every live prefix outscores all its siblings and all their
    descendants, so each step moves at least one sequence into the finished set, which is
    full after k such steps.

    We return the papers' statement, t_{1/2} + k. Counting steps exactly, the k finished
    sequences are in place after steps t_{1/2}, ..., t_{1/2} + k - 1, so the tight bound is
    t_{1/2} + k - 1 = floor(beta_eps) + k (Welleck's beta_eps + k, rounded down); both are valid
    upper bounds (Chapter 4, Theorem "Beam search stops"; Chapter 5).
    """
    beam_size = check_positive_int(beam_size, "beam_size")
    return first_step_eos_above_half(eps) + beam_size


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
    that ``sum_u p_u = 1`` (Martins et al. (2020), eq. 3 and Prop. 1; Peters et al. (2019)).
    Since ``p_max <= 1``, ``(alpha - 1) z_max - tau <= 1``, i.e. ``tau >= (alpha - 1) z_max - 1``.
    The gap gives ``(alpha - 1) z_v <= (alpha - 1) z_max - 1 <= tau``, so ``p_v = 0``. The
    exact condition is ``(alpha - 1) z_v <= tau`` (:func:`entmax_excludes`); the gap is
    sufficient, and necessary only when the top token takes all the mass. ``alpha = 1`` (the
    softmax) excludes nothing: the gap is ``inf``.
    """
    alpha = _check_alpha(alpha)
    return math.inf if alpha == 1.0 else 1.0 / (alpha - 1.0)


def entmax_excludes(z: torch.Tensor, index, alpha, dim: int = -1) -> torch.Tensor:
    """Whether token ``index`` gets probability exactly zero under alpha-entmax of ``z``.

    The exact criterion ``(alpha - 1) z_index <= tau(z)`` with the threshold tau of
    :func:`nmst_lib.entmax.entmax_threshold` (Martins et al. (2020), eq. 3; Chapter 8,
    08_sparse, Proposition); the sufficient gap is :func:`entmax_eos_gap`. Returns a bool tensor
    of ``z``'s shape without ``dim``. ``alpha = 1`` (softmax) gives False wherever ``z_index``
    is finite; a ``-inf`` score is always excluded.
    """
    if not isinstance(z, torch.Tensor) or not z.is_floating_point():
        raise TypeError("z must be a floating-point torch.Tensor of scores")
    if z.dim() == 0:
        raise ValueError("z must have at least one dimension (the vocabulary)")
    alpha = _check_alpha(alpha)
    index = check_index(index, z.shape[dim], "index")
    z_index = z.select(dim, index)
    if alpha == 1.0:
        return z_index == -math.inf
    tau = entmax_threshold(z, alpha, dim=dim).squeeze(dim)
    return ((alpha - 1.0) * z_index <= tau) | (z_index == -math.inf)


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

    def __init__(self, scores: torch.Tensor, head: OutputHead, alpha: float, eos_id: int):
        self.scores = scores
        self.head = head
        self.alpha = float(alpha)
        self.vocab_size = int(scores.shape[0])
        self.eos_id = int(eos_id)
        others = torch.arange(self.vocab_size, device=scores.device) != self.eos_id
        self.min_gap = float((scores[:, others].amax(-1) - scores[:, self.eos_id]).min())
        self.min_softmax_eos_prob = float(torch.softmax(scores.double(), -1)[:, self.eos_id].min())

    @property
    def device(self) -> torch.device:
        return self.scores.device

    def _check_tokens(self, tokens: torch.Tensor, name: str) -> torch.Tensor:
        if not isinstance(tokens, torch.Tensor) or tokens.is_floating_point() or tokens.is_complex():
            raise TypeError(f"{name} must be an integer torch.Tensor of token ids")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"{name} must hold token ids in [0, {self.vocab_size}), got values outside")
        return tokens.to(self.device)

    def initial_state(self, contexts: torch.Tensor):
        """The first continuation step follows the last context token (``contexts [B, k]``)."""
        if not isinstance(contexts, torch.Tensor) or contexts.dim() != 2 or contexts.shape[1] == 0:
            raise ValueError("contexts must be a LongTensor of shape [B, k] with k >= 1")
        last = self._check_tokens(contexts, "contexts")[:, -1]
        head_state = self.head.initial_step_state(last.shape[0], device=self.device)
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
        raise ValueError("alpha must be > 1: the softmax (alpha = 1) gives every finite score positive probability")
    if isinstance(eos_id, int) and not isinstance(eos_id, bool) and eos_id == -1:
        eos_id = vocab_size - 1
    eos_id = check_index(eos_id, vocab_size, "eos_id")
    for value, name, low in ((gap_factor, "gap_factor", 1.0), (spread, "spread", 0.0)):
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value >= low)):
            raise ValueError(f"{name} must be a finite number >= {low:g}, got {value!r}")
    if not isinstance(head, str) or head.strip().lower() not in _CONSTRUCTION_HEADS:
        raise ValueError(f"head must be one of {', '.join(_CONSTRUCTION_HEADS)}, got {head!r}")
    head = head.strip().lower()
    if head == "nmst-entmax":
        if eps is None:
            raise ValueError("the nmst-entmax head needs eps in (0, 1), e.g. eps=0.05")
        layer = NMSTEntmaxHead(eps, alpha, eos_id=eos_id)
    else:
        if eps is not None:
            raise ValueError(f"the {head} head has no eps; pass eps=None (got eps={eps!r})")
        layer = EntmaxHead(alpha, eos_id=eos_id) if head == "entmax" else VanillaHead(eos_id=eos_id)
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    device = _default_device() if device is None else torch.device(device)
    gen = torch.Generator().manual_seed(int(seed))
    scores = float(spread) * torch.rand((vocab_size, vocab_size), generator=gen, dtype=torch.float64)
    others = torch.arange(vocab_size) != eos_id
    scores[:, eos_id] = scores[:, others].amax(-1) - float(gap_factor) * entmax_eos_gap(alpha)
    return EosOutsideSupportModel(scores.to(dtype=dtype, device=device), layer, alpha, eos_id)


# ---------------------------------------------------------------------------------------
# Choi, Cho, Lee (2023), Remark 1: the optimal p(eos | prefix) need not be monotone
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemarkOneDataset:
    """A data set of continuations sharing one context, as in Choi, Cho, Lee (2023), Remark 1.

    Attributes:
        vocab: token strings; ``vocab[eos_id] == "<eos>"`` (eos is the last id).
        context: the shared context x as token strings (a single ``<bos>``).
        sequences: the continuations y^(n) as token strings, each ending with ``<eos>``.
        counts: how often each continuation occurs (equal in the paper).
    """

    vocab: tuple[str, ...]
    context: tuple[str, ...]
    sequences: tuple[tuple[str, ...], ...]
    counts: tuple[int, ...]

    @property
    def eos_id(self) -> int:
        return self.vocab.index("<eos>")

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, words) -> torch.Tensor:
        """Token ids of a sequence of token strings."""
        index = {w: i for i, w in enumerate(self.vocab)}
        unknown = [w for w in words if w not in index]
        if unknown:
            raise ValueError(f"tokens {unknown} are not in the vocabulary {self.vocab}")
        return torch.tensor([index[w] for w in words], dtype=torch.long)

    def context_ids(self) -> torch.Tensor:
        """The context as a ``[1, k]`` LongTensor (ready for a model's ``initial_state``)."""
        return self.encode(self.context).unsqueeze(0)

    def token_ids(self) -> torch.Tensor:
        """The continuations as a ``[N, T_max]`` LongTensor, PAD = -1 after each eos."""
        longest = max(len(s) for s in self.sequences)
        out = torch.full((len(self.sequences), longest), -1, dtype=torch.long)
        for n, seq in enumerate(self.sequences):
            out[n, : len(seq)] = self.encode(seq)
        return out

    def longest(self) -> torch.Tensor:
        """Token ids of the longest continuation (y^(2) of Remark 1)."""
        lengths = [len(s) for s in self.sequences]
        return self.encode(self.sequences[lengths.index(max(lengths))])

    def eos_decision_counts(self, path: torch.Tensor | None = None):
        """Counts behind each eos decision along ``path`` (default: the longest continuation).

        Returns ``(stop, go)``, float64 tensors of length |path|: at step t, ``stop[t-1]`` is the
        (count-weighted) number of data sequences that share the prefix path_<t and have eos
        at step t, ``go[t-1]`` the number that share it and continue. The maximum-likelihood
        objective (Choi et al. 2023, eq. 3) restricted to eos decisions along the path is
        ``sum_t stop_t log p_t + go_t log(1 - p_t)``.
        """
        path = self.longest() if path is None else path
        data = self.token_ids()
        weights = torch.tensor(self.counts, dtype=torch.float64)
        steps = path.shape[0]
        width = max(steps, data.shape[1])
        padded = torch.full((data.shape[0], width), -1, dtype=torch.long)
        padded[:, : data.shape[1]] = data
        same = padded[:, :steps] == path.unsqueeze(0)  # [N, T]
        # shares_prefix[n, t] = all(same[n, :t]) (t = 0: the empty prefix, always shared)
        shares = torch.ones(data.shape[0], steps, dtype=torch.bool)
        if steps > 1:
            shares[:, 1:] = torch.cumprod(same[:, :-1].long(), dim=1).bool()
        is_eos = padded[:, :steps] == self.eos_id
        stop = (weights[:, None] * (shares & is_eos)).sum(0)
        go = (weights[:, None] * (shares & ~is_eos & (padded[:, :steps] >= 0))).sum(0)
        return stop, go


def remark1_dataset(counts: tuple[int, int] = (1, 1)) -> RemarkOneDataset:
    """The two-sequence data set of Choi, Cho, Lee (2023), Remark 1 and Section 1.

    y^(1) = "I am a boy <eos>", y^(2) = "I am a boy , and you are a girl . <eos>", sharing the
    context x (a single ``<bos>``) and the prefix y_<t0 = "I am a boy" with
    t0 = |y^(1)| = 5 < |y^(2)| - 1 = 11, as Remark 1 assumes. Each sequence occurs once by
    default (the paper's two-instance data set); ``counts`` changes the frequencies.
    Used in Chapter 5 (``05_nmst``) to show why ST's monotone p(eos) costs likelihood.
    """
    if (
        not isinstance(counts, (tuple, list))
        or len(counts) != 2
        or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts)
    ):
        raise ValueError(f"counts must be two positive integers (one per sequence), got {counts!r}")
    short = ("I", "am", "a", "boy", "<eos>")
    long = ("I", "am", "a", "boy", ",", "and", "you", "are", "a", "girl", ".", "<eos>")
    vocab = ("<bos>", "I", "am", "a", "boy", ",", "and", "you", "are", "girl", ".", "<eos>")
    return RemarkOneDataset(vocab=vocab, context=("<bos>",), sequences=(short, long), counts=tuple(counts))


def optimal_eos_probs(dataset: RemarkOneDataset, path: torch.Tensor | None = None) -> torch.Tensor:
    """The data's optimal p*(eos at t | y_<t, x) along ``path`` (default: the longest sequence).

    An unconstrained model maximising the likelihood (Choi et al. 2023, eq. 3) matches the
    empirical conditional: p*_t = stop_t / (stop_t + go_t) (see
    :meth:`RemarkOneDataset.eos_decision_counts`). For :func:`remark1_dataset` along y^(2):
    0 for t = 1..4, 1/2 at t = t0 = 5 (after "boy"), 0 for t = 6..11, and 1 at t = 12
    (Remark 1, eqs. 20-22): not monotone (Chapter 5, ``05_nmst``). Float64, length |path|.
    """
    stop, go = dataset.eos_decision_counts(path)
    if bool(((stop + go) == 0).any()):
        raise ValueError("path leaves the data: some of its prefixes occur in no data sequence")
    return stop / (stop + go)


def monotone_violation(eos_probs: torch.Tensor) -> torch.Tensor:
    """The largest drop max_t (p_{t-1} - p_t)^+ of a sequence of eos probabilities (0 if non-decreasing).

    Every ST model has a strictly increasing p(eos at t) along any prefix path
    (Welleck et al. 2020, Def. 4.3: p_t - p_{t-1} = (1 - p_{t-1})(1 - (1-eps) sigma_t) > 0),
    so its violation is 0; the optimum of Choi et al. (2023), Remark 1 has violation 1/2.
    NMST (Choi et al. 2023, Def. 6) can have any violation (Chapter 5, ``05_nmst``).
    Accepts ``[..., T]`` and reduces the last dimension.
    """
    if not isinstance(eos_probs, torch.Tensor) or eos_probs.dim() < 1:
        raise ValueError("eos_probs must be a tensor [..., T] of probabilities")
    if eos_probs.shape[-1] < 2:
        return torch.zeros(eos_probs.shape[:-1], dtype=eos_probs.dtype, device=eos_probs.device)
    drops = eos_probs[..., :-1] - eos_probs[..., 1:]
    return drops.clamp(min=0).amax(dim=-1)


def best_monotone_eos_probs(dataset: RemarkOneDataset, path: torch.Tensor | None = None) -> torch.Tensor:
    """The best non-decreasing p(eos at t) along ``path``: what ST can approach on this data.

    Maximises ``sum_t stop_t log p_t + go_t log(1 - p_t)`` over non-decreasing (p_t), the
    constraint every ST model obeys (Welleck et al. 2020, Def. 4.3; Choi et al. 2023, Def. 5).
    This is weighted isotonic regression of the empirical rates stop_t / (stop_t + go_t) with
    weights stop_t + go_t, given in closed form by the min-max formula
    p_t = max_{s<=t} min_{u>=t} (sum_{s..u} stop) / (sum_{s..u} (stop + go)).
    An ST model with eps > 0 can only approach it (it also needs p_t >= 1 - (1-eps)^t and a
    strict increase); its value is the supremum of the ST likelihood as eps -> 0.
    For :func:`remark1_dataset` along y^(2): 0 for t <= 4, 1/8 for t = 5..11, 1 at t = 12
    (Chapter 5, ``05_nmst``).
    """
    stop, go = dataset.eos_decision_counts(path)
    total = stop + go
    if bool((total == 0).any()):
        raise ValueError("path leaves the data: some of its prefixes occur in no data sequence")
    zero = torch.zeros(1, dtype=stop.dtype)
    cs, ct = torch.cat([zero, stop.cumsum(0)]), torch.cat([zero, total.cumsum(0)])
    steps = stop.shape[0]
    s = torch.arange(steps).unsqueeze(1)  # block start (row)
    u = torch.arange(steps).unsqueeze(0)  # block end (column)
    block = (cs[u + 1] - cs[s]) / (ct[u + 1] - ct[s]).where(u >= s, torch.ones(()))  # avg over s..u
    inf = torch.tensor(float("inf"), dtype=stop.dtype)
    # min over u >= t of block[s, u], for each (s, t): reverse cumulative minimum along u
    masked = torch.where(u >= s, block, inf)
    suffix_min = torch.flip(torch.cummin(torch.flip(masked, [1]), dim=1).values, [1])  # [s, t]
    candidates = torch.where(s <= u, suffix_min, -inf)  # only s <= t (here u plays t)
    return candidates.amax(dim=0)


def eos_log_likelihood(dataset: RemarkOneDataset, eos_probs: torch.Tensor, path: torch.Tensor | None = None):
    """Log-likelihood of the data's eos decisions along ``path`` under eos probabilities ``eos_probs``.

    ``sum_t stop_t log p_t + go_t log(1 - p_t)``, with the convention 0 * log 0 = 0: the part
    of the objective of Choi et al. (2023), eq. 3 that depends on p(eos) along the path (the
    non-eos tokens can be fitted exactly by both ST and NMST). Compare
    :func:`optimal_eos_probs` with :func:`best_monotone_eos_probs` (Chapter 5, ``05_nmst``).
    """
    stop, go = dataset.eos_decision_counts(path)
    p = torch.as_tensor(eos_probs, dtype=torch.float64)
    if p.shape != stop.shape:
        raise ValueError(f"eos_probs must have shape {tuple(stop.shape)} (one per step of the path), got {tuple(p.shape)}")
    if bool(((p < 0) | (p > 1) | p.isnan()).any()):
        raise ValueError("eos_probs must lie in [0, 1]")
    zero = torch.zeros_like(p)
    term_stop = torch.where(stop > 0, stop * torch.log(p), zero)
    term_go = torch.where(go > 0, go * torch.log1p(-p), zero)
    return float((term_stop + term_go).sum())


# ---------------------------------------------------------------------------
# Chapters 4-5: the wish to stop lambda(t) and each output layer's p(eos)
# ---------------------------------------------------------------------------

#: Trajectories of lambda(t) offered by :func:`eos_trajectory`, with their
#: descriptions (Chapters 4-5, ``04_self_terminating`` and ``05_nmst``).
EOS_SHAPES: dict[str, str] = {
    "one_stop": "could end once (t = t0), never again",
    "remark1": "Remark 1: may end at t0 (p = amplitude), must end at t1",
    "fading": "fading: lambda(t) = amplitude * t0 / (t0 + t)",
}

_HEADS = ("VA", "ST", "NMST")


def _check_probability(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a real number in (0, 1), "
            f"got {type(value).__name__}"
        )
    value = float(value)
    if not (0.0 < value < 1.0):
        raise ValueError(
            f"{name} must lie strictly between 0 and 1, got {value!r}"
        )
    return value


def _check_shape(shape) -> str:
    if shape not in EOS_SHAPES:
        raise ValueError(
            f"shape must be one of {sorted(EOS_SHAPES)}, got {shape!r}"
        )
    return shape


def _check_heads(heads) -> tuple[str, ...]:
    if (
        isinstance(heads, str)
        or not isinstance(heads, Sequence)
        or len(heads) == 0
    ):
        raise TypeError(
            f"heads must be a non-empty sequence drawn from {_HEADS}, "
            "e.g. ('VA', 'NMST')"
        )
    for head in heads:
        if head not in _HEADS:
            raise ValueError(f"unknown head {head!r}; allowed: {_HEADS}")
    return tuple(heads)


def _logit(p: torch.Tensor) -> torch.Tensor:
    """log(p) - log(1 - p), exact for p near 0 and near 1."""
    return torch.log(p) - torch.log1p(-p)


def eos_trajectory(
    t_max: int,
    shape: str = "one_stop",
    amplitude: float = 0.5,
    *,
    t0: int = 5,
    t1: int = 12,
    baseline: float = 1e-3,
) -> torch.Tensor:
    """The eos logit z_t = logit(lambda(t)), t = 1, ..., t_max, along a named
    trajectory.

    lambda(t) is the NMST mixing weight sigma(u_eos . h_t) of Choi, Cho, Lee
    (2023), Def. 6 (eq. 10, Fig. 1): how much the model itself wants to stop
    at step t. The trajectories (``shape``, :data:`EOS_SHAPES`) are:

    * ``"one_stop"``: lambda = ``amplitude`` at t = t0 (the text could end
      there, e.g. after "I am a boy") and ``baseline`` everywhere else: the
      model never wants to stop again.
    * ``"remark1"``: the optimal trajectory of Choi, Cho, Lee (2023), Remark 1
      (with the probabilities kept inside (0, 1)): ``amplitude`` at t0 where
      the shorter training sequence ends, ``baseline`` until t1 where the
      longer one ends, 1 - ``baseline`` from t1 on. Non-monotone.
    * ``"fading"``: lambda(t) = amplitude * t0 / (t0 + t), a model that grows
      ever less willing to stop (p(eos) -> 0, like the inconsistent RNN of
      Welleck et al. 2020, Thm. 3.4).

    Returns a float64 tensor of shape ``[t_max]`` (entry ``t - 1`` is step
    t), exact in log space. Chapters 4-5 (``04_self_terminating``,
    ``05_nmst``).
    """
    t_max = check_positive_int(t_max, "t_max")
    shape = _check_shape(shape)
    amplitude = _check_probability(amplitude, "amplitude")
    baseline = _check_probability(baseline, "baseline")
    t0 = check_positive_int(t0, "t0")
    t1 = check_positive_int(t1, "t1")
    if shape == "remark1" and not t0 < t1:
        raise ValueError(
            f"the Remark 1 trajectory needs t0 < t1, got t0={t0}, t1={t1}"
        )
    t = torch.arange(1, t_max + 1, dtype=torch.float64)
    lam = torch.full_like(t, baseline)
    if shape == "one_stop":
        lam[t == t0] = amplitude
    elif shape == "remark1":
        lam[t == t0] = amplitude
        lam[t >= t1] = 1.0 - baseline
    else:  # fading
        lam = amplitude * t0 / (t0 + t)
    return _logit(lam)


def _check_trajectory_steps(steps, T: int, device) -> torch.Tensor:
    """``steps`` of :func:`eos_probabilities`: every step 1..T when None,
    else checked (increasing integer steps in [1, T]) and moved to
    ``device``."""
    if steps is None:
        return torch.arange(1, T + 1, device=device)
    if (
        not isinstance(steps, torch.Tensor)
        or steps.dim() != 1
        or steps.is_floating_point()
        or steps.numel() == 0
        or bool((steps < 1).any())
        or bool((steps > T).any())
        or bool((torch.diff(steps) <= 0).any())
    ):
        raise ValueError(
            "steps must be a non-empty increasing 1-D integer tensor of "
            f"steps in [1, {T}]"
        )
    return steps.to(device)


def eos_probabilities(
    eos_logits: torch.Tensor,
    eps: float,
    heads: Sequence[str] = _HEADS,
    steps: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """p(eos | t) of the VA, ST and NMST layers for one eos-logit trajectory
    z_1, ..., z_T.

    The vocabulary is reduced to eos and one competing token of logit 0,
    which loses nothing: every layer below gives eos a probability that
    depends only on the eos logit and (for VA) the log-sum-exp of the other
    logits. With lambda(t) = sigma(z_t):

    * VA (softmax): p = sigma(z_t) = lambda(t).
    * NMST (Choi, Cho, Lee 2023, Def. 6, eq. 10): p = (1 - lambda(t)) f_lb(t)
      + lambda(t), with f_lb(t) = 1 - (1 - eps)^t; computed by
      :func:`nmst_lib.heads.nmst_eos_log_probs`.
    * ST (Welleck et al. 2020, Def. 4.3): p = 1 - prod_{s <= t} (1 - eps)
      sigma(u_eos . h_s). ST's sigmoid is a probability of *continuing*, so
      ST is given the negated logit -z_t: both self-terminating layers then
      receive the same per-step wish to stop lambda(t), and ST's p(eos)
      becomes 1 - prod_{s <= t} (1 - eps)(1 - lambda(s)), which can never
      decrease. Computed by :func:`nmst_lib.heads.st_eos_log_probs`.

    Args:
        eos_logits: float tensor ``[T]``, entry ``t - 1`` is z_t (e.g.
            :func:`eos_trajectory`).
        eps: the lower-bound rate in (0, 1).
        heads: which of ``"VA"``, ``"ST"``, ``"NMST"`` to compute.
        steps: optional increasing integer tensor of steps in ``[1, T]`` at
            which to return the probabilities (a figure needs a few thousand
            of a million steps). VA and NMST are then evaluated only there;
            ST still accumulates over every step.

    Returns:
        ``{head: float64 tensor [T]}`` (or ``[len(steps)]``) of
        probabilities, on the device of ``eos_logits``. Chapters 4-5
        (``04_self_terminating``, ``05_nmst``); drawn by
        :func:`nmst_lib.plots.eos_curves.plot_eos_probabilities`.
    """
    eps = check_eps(eps)
    if (
        not isinstance(eos_logits, torch.Tensor)
        or not eos_logits.is_floating_point()
        or eos_logits.dim() != 1
    ):
        raise TypeError(
            "eos_logits must be a 1-D floating-point torch.Tensor [T] "
            "(entry t-1 is step t)"
        )
    heads = _check_heads(heads)
    z = eos_logits.to(torch.float64)
    steps = _check_trajectory_steps(steps, z.shape[0], z.device)
    z_at = z[steps - 1]
    out: dict[str, torch.Tensor] = {}
    for head in heads:
        if head == "VA":  # eos against one token of logit 0
            pair = torch.stack([torch.zeros_like(z_at), z_at], dim=-1)
            log_p = vanilla_log_probs(pair)[..., 1]
        elif head == "NMST":
            log_p, _ = nmst_eos_log_probs(z_at, eps, t=steps)
        else:  # ST: its sigmoid is the probability of going on;
            # it accumulates over every step
            log_p, _ = st_eos_log_probs(-z[: int(steps[-1])], eps)
            log_p = log_p[steps - 1]
        out[head] = log_p.exp()
    return out


# ---------------------------------------------------------------------------------------
# Chapter 9: what a temperature does (global and per-token), and CT + NMST
# ---------------------------------------------------------------------------------------

def _check_scores(z, name: str = "z") -> torch.Tensor:
    if not isinstance(z, torch.Tensor) or not z.is_floating_point():
        raise TypeError(f"{name} must be a floating-point torch.Tensor of logits [..., V]")
    if z.dim() == 0 or z.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last dimension (the vocabulary), got shape {tuple(z.shape)}")
    if bool(torch.isnan(z).any()) or bool(torch.isinf(z).any()):
        raise ValueError(f"{name} must be finite (a temperature divides every logit, so -inf would stay -inf)")
    return z


def _check_temperature(tau, z: torch.Tensor, name: str = "tau") -> torch.Tensor:
    """``tau`` as a tensor of z's dtype that broadcasts to ``z``: a number (one global
    temperature), ``[..., 1]`` (one per row) or ``[..., V]`` (one per token); finite and > 0."""
    if isinstance(tau, bool):
        raise TypeError(f"{name} must be a positive number or a tensor of positive temperatures, got bool")
    if isinstance(tau, numbers.Real):
        tau = torch.tensor(float(tau), dtype=z.dtype, device=z.device)
    if not isinstance(tau, torch.Tensor):
        raise TypeError(f"{name} must be a positive number or a tensor of positive temperatures, got {type(tau).__name__}")
    if not tau.is_floating_point():
        tau = tau.to(z.dtype)
    try:
        shape = torch.broadcast_shapes(tau.shape, z.shape)
    except RuntimeError:
        raise ValueError(f"{name} of shape {tuple(tau.shape)} does not broadcast to the logits' shape {tuple(z.shape)}; "
                         "give a number, [..., 1] (one temperature per row) or [..., V] (one per token)") from None
    if shape != z.shape:
        raise ValueError(f"{name} of shape {tuple(tau.shape)} would enlarge the logits' shape {tuple(z.shape)} to "
                         f"{tuple(shape)}; give a number, [..., 1] or [..., V]")
    if bool(torch.isnan(tau).any()) or not bool((tau > 0).all()) or bool(torch.isinf(tau).any()):
        raise ValueError(f"{name} must be finite and > 0 (a temperature divides the logits), got min "
                         f"{float(tau.min()):.3g}")
    return tau.to(device=z.device, dtype=z.dtype)


def _is_global(tau: torch.Tensor) -> bool:
    return tau.dim() == 0 or tau.shape[-1] == 1


def tempered_log_softmax(z, tau) -> torch.Tensor:
    r"""``log softmax(z / T)`` over the last dim, for a global or a per-token temperature ``T`` = ``tau``.

    Temperature scaling, eq. 4 of *Contextual Temperature for Language Modeling* (2020); with one
    temperature per token (``tau`` of shape ``[..., V]``) it is their eq. 5's output layer,
    ``p_v = exp(z_v / T_v) / sum_w exp(z_w / T_w)`` (Chapter 9, ``09_temperature``). ``tau`` is a
    number, ``[..., 1]`` (one per row) or ``[..., V]``, finite and positive. Computed with
    ``log_softmax`` (no overflow for large logits or small temperatures).
    """
    z = _check_scores(z)
    tau = _check_temperature(tau, z)
    return torch.log_softmax(z / tau, dim=-1)


def tempered_softmax(z, tau) -> torch.Tensor:
    r"""``softmax(z / T)`` over the last dim (the probabilities of :func:`tempered_log_softmax`).

    Eq. 4 of *Contextual Temperature for Language Modeling* (2020) for a global ``T``; eq. 5's
    per-token form when ``tau`` is ``[..., V]``. Chapter 9 (``09_temperature``): a global
    temperature keeps the ranking of the tokens, a per-token one can change it
    (:func:`can_become_argmax`).
    """
    return tempered_log_softmax(z, tau).exp()


def tempered_entropy(z, tau) -> torch.Tensor:
    r"""Shannon entropy (nats) of ``softmax(z / T)`` over the last dim, shape ``z.shape[:-1]``.

    ``H = log sum_w exp(z_w / T_w) - sum_v p_v z_v / T_v``, computed from ``logsumexp`` (exact
    for every finite input). Chapter 9 (``09_temperature``), Proposition "A temperature sets the
    entropy": for a global ``T`` it is non-decreasing in ``T``
    (:func:`entropy_temperature_derivative`), tends to ``log |argmax set|`` as ``T -> 0`` and to
    ``log V`` as ``T -> inf``.
    """
    z = _check_scores(z)
    tau = _check_temperature(tau, z)
    scaled = z / tau
    log_p = torch.log_softmax(scaled, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


def entropy_temperature_derivative(z, tau) -> torch.Tensor:
    r"""``dH/dT = Var_p(z) / T^3`` for ``p = softmax(z / T)`` and one temperature ``T`` per row.

    Chapter 9 (``09_temperature``), Proposition "A temperature sets the entropy": with
    ``beta = 1/T``, ``log Z(beta)`` has derivative ``E_p[z]`` and ``E_p[z]`` has derivative
    ``Var_p(z)``, so ``H = log Z - beta E_p[z]`` has ``dH/dbeta = -beta Var_p(z)`` and
    ``dH/dT = Var_p(z) / T^3 >= 0``, zero only when all logits are equal. Only for a global
    temperature (a number or ``[..., 1]``): a per-token temperature has no single derivative
    (ValueError). Shape ``z.shape[:-1]``. Compare with autograd through :func:`tempered_entropy`.
    """
    z = _check_scores(z)
    tau = _check_temperature(tau, z)
    if not _is_global(tau) and z.shape[-1] > 1:
        raise ValueError("entropy_temperature_derivative is for one temperature per row (a number or [..., 1]); "
                         f"got a per-token temperature of shape {tuple(tau.shape)}")
    p = torch.softmax(z / tau, dim=-1)
    mean = (p * z).sum(dim=-1, keepdim=True)
    var = (p * (z - mean) ** 2).sum(dim=-1)
    t = tau.squeeze(-1) if tau.dim() > 0 else tau
    return var / t**3


def tempered_nucleus_size(z, tau, mu) -> torch.Tensor:
    r"""The number of tokens in the nucleus of ``softmax(z / T)``: the smallest set of most probable
    tokens whose total probability is ``>= mu`` (the book's nucleus, ARCHITECTURE.md).

    For a global ``T`` the nucleus is a prefix of the ranking of ``z`` whatever ``T``, and its size
    is non-decreasing in ``T`` (Chapter 9, ``09_temperature``, Proposition "A global temperature
    keeps the ranking": the probability of the top ``k`` tokens is non-increasing in ``T`` for
    every ``k``). ``tau`` as in :func:`tempered_log_softmax` (a per-token temperature is allowed:
    then the nucleus is a prefix of the ranking of ``z / T``). ``mu`` in ``(0, 1]``. The
    cumulative mass is computed in log space (``logcumsumexp``), as in
    ``nmst_lib.decoding.nucleus_mask``. Returns an int64 tensor of shape ``z.shape[:-1]``.
    """
    if isinstance(mu, bool) or not isinstance(mu, numbers.Real) or not (0.0 < float(mu) <= 1.0):
        raise ValueError(f"mu (the nucleus mass) must be a number in (0, 1], got {mu!r}")
    log_p = tempered_log_softmax(z, tau)
    sorted_log_p = torch.sort(log_p, dim=-1, descending=True).values
    upto = torch.logcumsumexp(sorted_log_p, dim=-1)  # log of the mass of the top k, k = 1..V
    before = torch.cat([torch.full_like(upto[..., :1], -math.inf), upto[..., :-1]], dim=-1)  # strictly before rank k
    return (before < math.log(float(mu))).sum(dim=-1)


def _check_range(lo, hi) -> tuple[float, float]:
    for name, v in (("lo", lo), ("hi", hi)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
            raise TypeError(f"{name} must be a finite number, got {v!r}")
    lo, hi = float(lo), float(hi)
    if not 0.0 < lo <= hi:
        raise ValueError(f"the temperature range needs 0 < lo <= hi (e.g. [2, 4] for a = 1, b = 1/2), got [{lo}, {hi}]")
    return lo, hi


def can_become_argmax(z, j, lo, hi) -> torch.Tensor:
    r"""Whether some per-token temperatures ``T_v`` in ``[lo, hi]`` make token ``j`` the strict argmax of ``z / T``.

    Chapter 9 (``09_temperature``), Proposition "What a bounded per-token temperature can
    reorder". Each ratio ``z_v / T_v`` moves independently in an interval whose ends are
    ``z_v / lo`` and ``z_v / hi``; the best case for ``j`` is its largest value,
    ``z_j / lo`` if ``z_j >= 0`` else ``z_j / hi``, against the smallest value of every other
    token, ``z_i / hi`` if ``z_i >= 0`` else ``z_i / lo``. So ``j`` can become the strict argmax
    (the token greedy search picks) iff

    .. math::
        \max_{T_j} \frac{z_j}{T_j} \;>\; \max_{i \neq j}\, \min_{T_i} \frac{z_i}{T_i} .

    For positive logits this is ``z_j > (lo / hi) max_{i != j} z_i``: with the paper's range
    [a/b, (1 + a)/b] the ratio is ``hi/lo = (1 + a)/a`` (2 for a = 1). The answer depends on the
    logits themselves, not only on their differences: unlike the softmax, a per-token
    temperature is not invariant to adding a constant to every logit. ``j`` is a token id, or
    ``None`` for a bool mask ``[..., V]`` over every token; otherwise a bool tensor of shape
    ``z.shape[:-1]``. With ``lo == hi`` (a global temperature) only the current argmax can.
    """
    z = _check_scores(z)
    lo, hi = _check_range(lo, hi)
    best = torch.where(z >= 0, z / lo, z / hi)      # the largest z_v / T_v can be
    worst = torch.where(z >= 0, z / hi, z / lo)     # the smallest z_v / T_v can be
    V = z.shape[-1]
    if V == 1:
        mask = torch.ones_like(z, dtype=torch.bool)
    else:
        top2 = torch.topk(worst, 2, dim=-1)
        is_top = torch.zeros_like(z, dtype=torch.bool).scatter(-1, top2.indices[..., :1], True)
        others_max = torch.where(is_top, top2.values[..., 1:2], top2.values[..., :1])  # max over i != v of worst_i
        mask = best > others_max
    if j is None:
        return mask
    j = check_index(j, V, "j")
    return mask[..., j]


def softmax_temperature_mean(vocab_size, a, b) -> float:
    r"""The mean over the vocabulary of eq. 5's temperature when sigma is a *softmax*: ``(a + 1/K)/b``.

    *Contextual Temperature for Language Modeling* (2020), Sec. 3.1 says the temperatures are
    "scaled using a Softmax function over the dimension of the vocabulary": then
    ``T_v = (s_v + a)/b`` with ``sum_v s_v = 1``, so ``sum_v T_v = (1 + K a)/b`` whatever the
    context, the mean is ``(a + 1/K)/b``, the loss-scaling factor of Sec. 3.3 is this constant,
    and the average of ``T_v - a/b`` is ``1/(K b)`` (2e-4 for PTB's K = 10,000 and b = 1/2: the
    size of their reported ``2 + 8.34e-5``). Chapter 9 (``09_temperature``), Proposition "The
    softmax reading". ``vocab_size`` K >= 1, ``a > 0``, ``b > 0``.
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    for name, v in (("a", a), ("b", b)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (math.isfinite(float(v)) and float(v) > 0):
            raise ValueError(f"{name} must be a finite number > 0 (eq. 5: T = (sigma + a)/b), got {v!r}")
    return (float(a) + 1.0 / vocab_size) / float(b)


def tempered_nmst_log_probs(logits, tau, eos_id, eps, t=None) -> torch.Tensor:
    r"""NMST log-probabilities with a temperature on the non-eos logits: CT + NMST as a formula.

    Chapter 9 (``09_temperature``), Theorem "CT + NMST keeps the termination guarantee": eos
    gets the NMST probability of its *raw* logit (Choi, Cho, Lee (2023), Def. 6),
    ``p(eos at t) = sigma(z_eos) + (1 - sigma(z_eos)) (1 - (1 - eps)^t)``, and every other token
    ``v`` gets ``(1 - p(eos)) softmax_{w != eos}(z_w / T_w)_v``. Whatever the temperatures,
    ``p(eos at t) >= 1 - (1 - eps)^t``. This is ``nmst_lib.heads.nmst_log_probs`` applied to the
    logits with every non-eos entry divided by its temperature (the eos entry of ``tau`` is
    ignored). ``tau``: a number, ``[..., 1]`` or ``[..., V]``; ``t`` as for ``nmst_log_probs``
    (default ``1..T`` along dim -2). The contextual head with an NMST base must agree with it.
    """
    from .heads import nmst_log_probs

    z = _check_scores(logits, "logits")
    tau = _check_temperature(tau, z)
    eos_id = check_index(eos_id, z.shape[-1], "eos_id")
    tempered = z / tau
    is_eos = torch.zeros(z.shape[-1], dtype=torch.bool, device=z.device)
    is_eos[eos_id] = True
    return nmst_log_probs(torch.where(is_eos, z, tempered), eos_id, eps, t)
