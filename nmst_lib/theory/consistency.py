"""Welleck et al. (2020), Lemma 3.2 and Theorem 3.4: the floor on p(eos) that bounded hidden
states give a softmax model, and a consistent RNN that greedy search, top-k, nucleus and beam
search never stop (Chapter 2, ``02_consistency``).

Part of :mod:`nmst_lib.theory`, which re-exports every public name here."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .._validation import check_index, check_positive_int, check_token_ids

__all__ = [
    "bounded_state_log_eos_floor",
    "InconsistentRNN",
    "inconsistent_rnn",
    "EosTrace",
    "eos_rank_and_prob",
]


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# ---------------------------------------------------------------------------------------
# Welleck et al. (2020), Lemma 3.2: bounded hidden states put a floor under p(eos)
# ---------------------------------------------------------------------------------------


def bounded_state_log_eos_floor(output_embeddings, biases=None, *, state_bound: float, nu: float = math.inf,
                                eos_id: int = -1) -> float:
    r"""log xi of Welleck et al. (2020), Lemma 3.2 (Chapter 2, ``lem-ch2-bounded-states``): for a
    softmax model with logits ``z_v = u_v . h_t + c_v`` and states ``||h_t||_nu <= B``,

    .. math::
        p(\mathrm{eos} \mid \boldsymbol y_{<t}) \ge \xi
        = \frac{1}{|\mathcal V|}\exp\big(c_{\mathrm{eos}} - c^+ - 2 B u^+\big),
        \qquad u^+ = \max_v \|u_v\|_{\nu^*},\ c^+ = \max_v c_v,\ 1/\nu + 1/\nu^* = 1,

    at every step, so ``p(|y| > t) <= (1 - xi)^t``. Returned as log xi (computed in float64, no
    clamp), which stays finite when xi itself would underflow.

    Args:
        output_embeddings: the rows ``u_v``, a real tensor of shape (|V|, d), |V| >= 2.
        biases: the ``c_v``, shape (|V|,); None for zero biases.
        state_bound: B > 0, finite.
        nu: the Hölder exponent of the bound on the states, in [1, inf] (inf: ``|h_t|_inf <= B``,
            a tanh RNN with B = 1).
        eos_id: the eos row (-1: the last, the ARCHITECTURE.md convention).
    """
    u = output_embeddings
    if not isinstance(u, torch.Tensor) or u.dim() != 2 or u.shape[0] < 2 or not u.is_floating_point():
        raise TypeError(f"output_embeddings must be a real tensor of shape (|V| >= 2, d), got "
                        f"{type(u).__name__}{tuple(u.shape) if isinstance(u, torch.Tensor) else ''}")
    V = u.shape[0]
    c = torch.zeros(V, dtype=torch.float64, device=u.device) if biases is None else biases
    if not isinstance(c, torch.Tensor) or c.shape != (V,) or not c.is_floating_point():
        raise TypeError(f"biases must be None or a real tensor of shape ({V},), got "
                        f"{type(c).__name__}{tuple(c.shape) if isinstance(c, torch.Tensor) else ''}")
    if isinstance(state_bound, bool) or not isinstance(state_bound, (int, float)) or not (
            0 < state_bound < math.inf):
        raise ValueError(f"state_bound must be a finite number > 0 (B in ||h_t||_nu <= B), got {state_bound!r}")
    if isinstance(nu, bool) or not isinstance(nu, (int, float)) or not 1 <= nu <= math.inf:
        raise ValueError(f"nu must be a Hölder exponent in [1, inf], got {nu!r}")
    eos_id = check_index(V - 1 if eos_id == -1 else eos_id, V, "eos_id")
    u, c = u.to(torch.float64), c.to(torch.float64)
    if not (torch.isfinite(u).all() and torch.isfinite(c).all()):
        raise ValueError("output_embeddings and biases must be finite")
    nu_star = math.inf if nu == 1 else 1.0 if nu == math.inf else nu / (nu - 1)
    u_plus = torch.linalg.vector_norm(u, ord=nu_star, dim=1).max().item()
    return c[eos_id].item() - c.max().item() - 2 * state_bound * u_plus - math.log(V)


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
        one_hot = torch.nn.functional.one_hot(tokens, self.vocab_size).to(
            h.dtype
        )
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
        """``tokens`` checked as ids of this vocabulary, on the model's device."""
        return check_token_ids(tokens, self.vocab_size, name).to(self.device)

    def initial_state(self, contexts: torch.Tensor):
        """``h_0 = g(C)``: ``h_init`` run through the recurrence over the context ``[B, k]`` (k >= 0).

        Returns the state ``[B, d + V]`` and the log-probabilities of the first continuation token.
        """
        if not isinstance(contexts, torch.Tensor) or contexts.dim() != 2:
            raise ValueError("contexts must be a LongTensor of shape [B, k]")
        contexts = self._check_tokens(contexts, "contexts")
        h = self.h_init.expand(contexts.shape[0], -1)
        for j in range(
            contexts.shape[1]
        ):  # a loop over context positions: the recurrence is sequential
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
    d = (
        8
        if hidden_size is None
        else check_positive_int(hidden_size, "hidden_size")
    )
    if (
        isinstance(eos_id, int)
        and not isinstance(eos_id, bool)
        and eos_id == -1
    ):
        eos_id = vocab_size - 1
    eos_id = check_index(eos_id, vocab_size, "eos_id")
    if (
        isinstance(eos_margin, bool)
        or not isinstance(eos_margin, (int, float))
        or not eos_margin >= 1
        or not math.isfinite(eos_margin)
    ):
        raise ValueError(
            f"eos_margin must be a finite number >= 1 (the eos logit must stay negative), got {eos_margin!r}"
        )
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(
            f"dtype must be a floating-point torch.dtype, got {dtype!r}"
        )
    if 3.0 * eos_margin > torch.finfo(dtype).max:
        # ubar_eos reaches -3 eos_margin / d per entry, the eos logit -3 eos_margin
        raise ValueError(
            f"eos_margin = {eos_margin!r} is too large for {dtype}: the eos logit, down to -3 eos_margin, "
            f"must stay finite (eos_margin <= {torch.finfo(dtype).max / 3:.3g})"
        )
    device = _default_device() if device is None else torch.device(device)
    gen = torch.Generator().manual_seed(int(seed))

    def uniform(shape, low, high):
        return low + (high - low) * torch.rand(
            shape, generator=gen, dtype=torch.float64
        )

    chi, a_low = 2.0, 0.5
    # the invariant h1_t >= a_low of the docstring
    assert math.tanh(chi * a_low) >= a_low
    W_h = uniform((d, d), chi / d, 2 * chi / d)
    h_init = torch.full((d + vocab_size,), a_low, dtype=torch.float64)
    ubar = uniform((vocab_size, d), 0.5 / d, 1.5 / d)
    c = float(eos_margin) / a_low
    ubar[eos_id] = -uniform((d,), c / d, 1.5 * c / d)
    output_embeddings = torch.cat(
        [ubar, torch.eye(vocab_size, dtype=torch.float64)], dim=1
    )
    to = dict(dtype=dtype, device=device)
    return InconsistentRNN(
        W_h.to(**to), h_init.to(**to), output_embeddings.to(**to), eos_id
    )


class EosTrace(NamedTuple):
    """Per-step eos statistics along given trajectories (see :func:`eos_rank_and_prob`)."""

    rank: (
        torch.Tensor
    )  # [B, T] long: 1 = most probable, |V| = ranked last; 0 where not valid
    log_prob: (
        torch.Tensor
    )  # [B, T] log p(eos at t | prefix); NaN where not valid
    prob: torch.Tensor  # [B, T] p(eos at t | prefix); NaN where not valid
    valid: (
        torch.Tensor
    )  # [B, T] bool: step t was predicted (no eos/PAD before it)
    # [B, T] q(eos at t | prefix) of the decoder given to eos_rank_and_prob
    # (e.g. consistent top-k); NaN where not valid; None without one
    decoder_prob: torch.Tensor | None = None


def eos_rank_and_prob(
    model, contexts: torch.Tensor, tokens: torch.Tensor, decoder=None
) -> EosTrace:
    """Rank and probability of eos at every step of given continuations (teacher forcing).

    For each row b and step t, the model's distribution p(. | y_<t, C) is computed along the
    continuation ``tokens[b]`` (e.g. ``Generation.tokens``: PAD = -1 after the end) and we
    report the rank of eos (1 + the number of tokens with strictly larger probability, so
    rank |V| means "strictly last", the property Welleck et al. (2020), Theorem 3.4 builds
    in) and p(eos). Steps after an eos or a PAD are not valid. Works with any model that
    follows the decoding protocol (Chapters 2 and 3, ``02_consistency``, ``03_consistent_sampling``).

    With ``decoder``, a function from one step's log-probabilities ``[B, V]`` to the
    distribution ``[B, V]`` a token-level decoder draws from (e.g.
    ``functools.partial(nmst_lib.decoding.decoder_distribution, method="top-k", k=2,
    consistent=True, eos_id=model.eos_id)``), the trace also holds ``decoder_prob``, the
    probability q(eos) that decoder gives eos at each step: what Chapter 2 compares with p(eos)
    to say why consistent top-k stops sooner.
    """
    if decoder is not None and not callable(decoder):
        raise TypeError(
            "decoder must be a function from log-probabilities [B, V] to a distribution [B, V], "
            f"e.g. functools.partial(decoder_distribution, method='top-k', k=2); got {decoder!r}"
        )
    if (
        not isinstance(tokens, torch.Tensor)
        or tokens.dim() != 2
        or tokens.is_floating_point()
    ):
        raise ValueError(
            "tokens must be an integer tensor of shape [B, T] (PAD = -1 allowed after the end)"
        )
    if (
        not isinstance(contexts, torch.Tensor)
        or contexts.dim() != 2
        or contexts.shape[0] != tokens.shape[0]
    ):
        raise ValueError(
            "contexts must be a [B, k] integer tensor with the same B as tokens"
        )
    batch, steps = tokens.shape
    state, log_probs = model.initial_state(contexts)
    device = log_probs.device
    tokens = tokens.to(device)
    ended = (tokens == model.eos_id) | (tokens < 0)
    # step t is predicted iff no eos/PAD among tokens[:, :t]
    valid = torch.ones(batch, steps, dtype=torch.bool, device=device)
    if steps > 1:
        valid[:, 1:] = ~torch.cumsum(ended[:, :-1].long(), dim=1).bool()
    feed = tokens.clamp(
        min=0
    )  # PAD positions are fed a dummy token; their outputs are masked
    eos_lp, ranks, q_eos = [], [], []
    for t in range(
        steps
    ):  # the model is recurrent: one step per position, all rows at once
        eos_col = log_probs[:, model.eos_id : model.eos_id + 1]
        eos_lp.append(eos_col.squeeze(1))
        ranks.append(1 + (log_probs > eos_col).sum(dim=-1))
        if decoder is not None:
            q_eos.append(decoder(log_probs)[:, model.eos_id])
        if t + 1 < steps:
            state, log_probs = model.step(state, feed[:, t])
    log_prob = (
        torch.stack(eos_lp, dim=1)
        if steps
        else torch.empty(batch, 0, device=device)
    )
    rank = (
        torch.stack(ranks, dim=1)
        if steps
        else torch.empty(batch, 0, dtype=torch.long, device=device)
    )
    nan = torch.full_like(log_prob, float("nan"))
    log_prob = torch.where(valid, log_prob, nan)
    rank = torch.where(valid, rank, torch.zeros_like(rank))
    decoder_prob = None
    if decoder is not None:
        q = torch.stack(q_eos, dim=1) if steps else torch.empty(batch, 0, device=device)
        decoder_prob = torch.where(valid, q.to(log_prob.dtype), nan)
    return EosTrace(
        rank=rank, log_prob=log_prob, prob=log_prob.exp(), valid=valid, decoder_prob=decoder_prob
    )
