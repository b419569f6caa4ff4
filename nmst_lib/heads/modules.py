"""The output layers as ``torch.nn.Module`` s: :class:`OutputHead` and its five subclasses,
built by name with :func:`head_from_name`.

Each head turns logits ``[B, T, V]`` into log-probabilities (``forward``, teacher forcing,
with a context mask: context positions are not steps), decodes one step at a time
(``initial_step_state`` and ``step``) and gives the per-position training loss
(``token_losses``: ``-log p(y_t)``, or the entmax loss for the sparse heads). The numbers come
from :mod:`nmst_lib.heads.eos_rules` and :mod:`nmst_lib.heads.log_probs`. Chapter 4
(04_self_terminating) uses :class:`STHead`, Chapter 5 (05_nmst) :class:`NMSTHead`, Chapter 8
(08_sparse) the entmax heads. The models of the experiment chapters (6-9,
:mod:`nmst_lib.models`) carry one of these layers, built from their configs by
:func:`head_from_name`, and Chapter 9's contextual temperature (:mod:`nmst_lib.temperature`)
wraps them.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from .._validation import check_eps, check_index, is_integer_tensor
from ..entmax import entmax_loss, log_entmax
from .eos_rules import (
    _check_alpha,
    _check_eos_vocab,
    _check_logits,
    _check_targets,
    _finish_rule,
    _nmst_rule,
    _st_rule,
)
from .log_probs import (
    _fused_nll,
    _log_probs_with_eos_rule,
    _nmst_entmax_assemble,
    _nmst_entmax_losses,
)

__all__ = [  # noqa: RUF022
    "OutputHead",
    "VanillaHead",
    "STHead",
    "NMSTHead",
    "EntmaxHead",
    "NMSTEntmaxHead",
    "head_from_name",
    "HEAD_NAMES",
]

# ----------------------------------------------------------------------------- modules


def _check_context_mask(context_mask, logits: torch.Tensor):
    if context_mask is None:
        return None
    if not isinstance(context_mask, torch.Tensor) or context_mask.dtype != torch.bool:
        got = context_mask.dtype if isinstance(context_mask, torch.Tensor) else type(context_mask).__name__
        raise TypeError(f"context_mask must be a bool tensor [B, T] (True at context positions), got {got}")
    if logits.dim() < 2 or context_mask.shape != logits.shape[:-1]:
        raise ValueError(
            f"context_mask must have shape logits.shape[:-1] = {tuple(logits.shape[:-1])} "
            f"(logits [B, T, V]), got {tuple(context_mask.shape)}"
        )
    return context_mask.to(logits.device)


def _check_step_inputs(logits, state, kind: str | None = None) -> torch.Tensor:
    """Check one decoding step's ``logits [B, V]`` and ``state [B]``; return the logits.

    ``kind`` says what the state holds: ``"log_keep"`` (ST: ``log prod_{s<t} (1 - eps)
    sigma(z_s)``, a float <= 0), ``"steps"`` (NMST, NMST-entmax: the steps taken so far, an
    integer >= 0) or None (a dummy, not read). The sign check is one reduction over ``[B]``."""
    logits = _check_logits(logits)
    if logits.dim() != 2:
        raise ValueError(f"step expects the logits of one step, [B, V], got shape {tuple(logits.shape)}")
    if not isinstance(state, torch.Tensor) or state.shape != logits.shape[:1]:
        shape = tuple(state.shape) if isinstance(state, torch.Tensor) else type(state).__name__
        raise ValueError(
            f"state must be a tensor [B] = [{logits.shape[0]}] from initial_step_state or step, got {shape}"
        )
    if kind == "steps":
        if not is_integer_tensor(state):
            raise TypeError(f"the state of {_STEP_STATE} must be an integer tensor (from initial_step_state or "
                            f"step), got dtype {state.dtype}")
        if bool((state < 0).any()):
            raise ValueError(f"the state of {_STEP_STATE} must be >= 0 (0 before the first step), got "
                             f"{int(state.min())}")
    elif kind == "log_keep":
        if not state.is_floating_point():
            raise TypeError(f"the state of ST must be a floating-point tensor of {_LOG_KEEP} (from "
                            f"initial_step_state or step), got dtype {state.dtype}")
        if not bool((state <= 0).all()):  # also catches NaN
            raise ValueError(f"the state of ST is {_LOG_KEEP}, a log-probability: it must be <= 0 and not "
                             "NaN (0 before the first step)")
    return logits


_STEP_STATE = "NMST (and NMST-entmax) counts the steps taken so far: it"
_LOG_KEEP = "log prod_{s<t} (1 - eps) sigma(z_eos at s)"


class OutputHead(nn.Module):
    """Base class of the output layers: logits ``[B, T, V]`` -> log-probabilities ``[B, T, V]``.

    Subclasses (:class:`VanillaHead`, :class:`STHead`, :class:`NMSTHead`,
    :class:`EntmaxHead`, :class:`NMSTEntmaxHead`) implement one definition each (Chapters 1,
    4, 5 and 8). Attributes: ``name`` ("VA", "ST", "NMST", "ENTMAX", "NMST-ENTMAX"), ``eps``
    (None for vanilla and entmax), ``alpha`` (None for the softmax heads) and ``eos_id``
    (``-1`` means the last id of the vocabulary, resolved against ``V`` at call time, as in
    ARCHITECTURE.md where eos is the last id for WikiText and GPT-2). The sparse heads give tokens
    outside their support log-probability ``-inf``; every decoder copes with that
    (:mod:`nmst_lib.decoding`).

    * ``forward(logits, context_mask=None)``: teacher forcing. ``context_mask[B, T]`` is True
      where position j predicts a context token: such positions are not steps, carry no eos
      mass (eos log-prob -inf, the rest a log-softmax over the non-eos logits) and are meant to
      carry no loss; step ``t = 1`` is the first False position of each row
      (``t = cumsum(~context_mask)``), whatever each row's context length.
    * ``initial_step_state(batch_size, device)`` and ``step(logits[B, V], state[B])`` decode one
      continuation step at a time; ``step`` agrees with ``forward`` to float64 precision, and the
      state is always a tensor with first dim ``B`` (a model's ``select`` indexes it).
    * ``token_losses(logits, targets, context_mask=None)``: the per-position training loss
      ``[..., T]`` the model averages over its scored positions. By default (VA, ST, NMST) the
      negative log-likelihood ``-log p(y_t)`` gathered from ``forward`` (Choi, Cho, Lee (2023),
      eq. 3), so that training with it is bit for bit today's NLL; the entmax heads use
      Fenchel-Young losses instead (Martins et al. (2020), eq. 6; Chapter 8, 08_sparse),
      because ``-log p(y)`` is infinite for a target outside a sparse support. Context
      positions get the loss of the head's distribution there too; callers drop them.
    * ``uses_hidden`` (class attribute, False here): True for output layers that also read
      the model's pre-output hidden state, such as the contextual-temperature layer
      :class:`nmst_lib.temperature.ContextualHead` (Chapter 9, 09_temperature). The model then
      passes ``hidden=`` (the tensor its output projection reads) and ``output=`` (that
      projection) as keyword arguments to ``forward``, ``step`` and ``token_losses``; heads
      with ``uses_hidden`` False are called exactly as above.
    """

    name = "?"
    eps: float | None = None
    alpha: float | None = None
    uses_hidden: bool = False

    def __init__(self, eos_id: int = -1):
        super().__init__()
        if isinstance(eos_id, bool) or not isinstance(eos_id, numbers.Integral):
            raise TypeError(f"eos_id must be an int >= 0, or -1 for the last id of the vocabulary; got {eos_id!r}")
        if eos_id < -1:
            raise ValueError(f"eos_id must be an int >= 0, or -1 for the last id of the vocabulary; got {eos_id}")
        self.eos_id = int(eos_id)

    def extra_repr(self) -> str:
        eps = "" if self.eps is None else f"eps={self.eps:g}, "
        alpha = "" if self.alpha is None else f"alpha={self.alpha:g}, "
        return f"{eps}{alpha}eos_id={self.eos_id}"

    def resolve_eos_id(self, vocab_size: int) -> int:
        """The eos id for a vocabulary of ``vocab_size`` (``-1`` -> ``vocab_size - 1``)."""
        eos_id = vocab_size - 1 if self.eos_id == -1 else self.eos_id
        return check_index(eos_id, vocab_size, "eos_id")

    def forward(self, logits: torch.Tensor, context_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Log-probabilities ``[..., T, V]`` of ``logits[..., T, V]`` (teacher forcing), with steps
        along dim -2 and ``context_mask[..., T]`` (True = context position, not a step)."""
        raise NotImplementedError

    def initial_step_state(self, batch_size: int, device=None) -> torch.Tensor:
        """The per-row state ``[batch_size]`` before the first continuation step."""
        raise NotImplementedError

    def step(self, logits: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities ``[B, V]`` of the next continuation step and the new state ``[B]``."""
        raise NotImplementedError

    def token_losses(self, logits: torch.Tensor, targets: torch.Tensor,
                     context_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Per-position training loss ``[..., T]`` of ``targets[..., T]`` under ``logits[..., T, V]``.

        Default: the negative log-likelihood ``-log p(y_t)``, gathered from :meth:`forward`
        (Choi, Cho, Lee (2023), eq. 3), so the mean over the scored positions is exactly the
        NLL the vanilla, ST and NMST heads have always been trained with. Subclasses with
        another loss (the entmax heads, Chapter 8, 08_sparse) override it.
        """
        log_probs = self(logits, context_mask)
        targets = _check_targets(targets, log_probs)
        return -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


class VanillaHead(OutputHead):
    """Vanilla softmax output layer (Choi, Cho, Lee (2023), Def. 1; Chapter 1, 01_decoding).

    A plain log-softmax at every position: it has no notion of steps, so ``context_mask`` is
    checked but does not change the output, and the decoding state is a dummy ``zeros(B)``.
    """

    name = "VA"

    def forward(self, logits, context_mask=None):
        logits = _check_logits(logits)
        _check_context_mask(context_mask, logits)
        return torch.log_softmax(logits, dim=-1)

    def initial_step_state(self, batch_size, device=None):
        return torch.zeros(_check_batch_size(batch_size), device=device)

    def step(self, logits, state):
        logits = _check_step_inputs(logits, state)
        return torch.log_softmax(logits, dim=-1), state

    def token_losses(self, logits, targets, context_mask=None):
        """``-log softmax(z)_y`` per position (Choi, Cho, Lee (2023), eq. 3), bit for bit the
        entry of :meth:`forward`; fused backward (:mod:`nmst_lib.fused`). The training loss of the
        VA models of Chapters 6-9."""
        logits = _check_logits(logits)
        _check_context_mask(context_mask, logits)
        targets = _check_targets(targets, logits)
        return _fused_nll(logits, targets, None, None)


class _SelfTerminatingBase(OutputHead):
    def __init__(self, eps, eos_id: int = -1):
        super().__init__(eos_id)
        self.eps = check_eps(eps)

    @property
    def log1m_eps(self) -> float:
        """``log(1 - eps)``, computed as ``log1p(-eps)`` (exact for eps = 1e-5)."""
        return math.log1p(-self.eps)

    def _prepare(self, logits, context_mask):
        logits = _check_logits(logits, min_dim=2)
        context_mask = _check_context_mask(context_mask, logits)
        eos_id = self.resolve_eos_id(logits.shape[-1])
        _check_eos_vocab(logits, eos_id)
        return logits, eos_id, (None if context_mask is None else ~context_mask)

    def _prepare_steps(self, logits, context_mask):
        """:meth:`_prepare` and the step ``t`` of every position for teacher forcing (NMST,
        NMST-entmax): ``t = cumsum(~context_mask)``, or ``1, 2, ..., T`` without a mask."""
        logits, eos_id, is_step = self._prepare(logits, context_mask)
        if is_step is None:
            t = torch.arange(1, logits.shape[-2] + 1, device=logits.device)
        else:
            t = torch.cumsum(is_step, dim=-1)
        return logits, eos_id, is_step, t

    def _prepare_step(self, logits, state, kind: str):
        """One decoding step's checked ``logits [B, V]`` and the eos id (``kind``: what the
        state holds, as in ``_check_step_inputs``)."""
        logits = _check_step_inputs(logits, state, kind)
        eos_id = self.resolve_eos_id(logits.shape[-1])
        _check_eos_vocab(logits, eos_id)
        return logits, eos_id

    def token_losses(self, logits, targets, context_mask=None):
        """``-log p(y_t)`` per position (Choi, Cho, Lee (2023), eq. 3), bit for bit the entry of
        :meth:`forward`, computed fused: one log-softmax pass over the non-eos logits forward,
        one in-place pass backward (:mod:`nmst_lib.fused`). NMST-entmax overrides it with its
        own loss."""
        logits, eos_id, rule = self._teacher_forcing_rule(logits, context_mask)
        targets = _check_targets(targets, logits)
        return _fused_nll(logits, targets, eos_id, rule)


class STHead(_SelfTerminatingBase):
    """Self-terminating output layer (Welleck et al. (2020), Def. 4.3; Choi, Cho, Lee (2023),
    Def. 5). Chapter 4 (04_self_terminating).

    ``p(eos at t) = 1 - prod_{s<=t} (1 - eps) sigma(z_eos at s)`` where the product runs over
    continuation steps only (context positions are skipped). The decoding state is
    ``log prod_{s<t} (1 - eps) sigma(z_s)`` per row, starting at 0.
    """

    name = "ST"

    def _teacher_forcing_rule(self, logits, context_mask):
        """``(logits, eos_id, eos_rule)`` of :meth:`forward` (shared with :func:`nll_token_losses`)."""
        logits, eos_id, is_step = self._prepare(logits, context_mask)
        log1m_eps = self.log1m_eps
        return logits, eos_id, lambda z: _st_rule(z, log1m_eps, is_step)

    def forward(self, logits, context_mask=None):
        logits, eos_id, rule = self._teacher_forcing_rule(logits, context_mask)
        return _log_probs_with_eos_rule(logits, eos_id, rule)

    def initial_step_state(self, batch_size, device=None):
        return torch.zeros(_check_batch_size(batch_size), device=device)

    def step(self, logits, state):
        logits, eos_id = self._prepare_step(logits, state, "log_keep")
        log1m_eps = self.log1m_eps

        def rule(eos_logits, log_keep_before):
            return _finish_rule(log_keep_before + (log1m_eps + F.logsigmoid(eos_logits)), None)

        log_probs = _log_probs_with_eos_rule(logits, eos_id, rule, state)
        new_state = state + (log1m_eps + F.logsigmoid(logits[:, eos_id]))
        return log_probs, new_state


class NMSTHead(_SelfTerminatingBase):
    """Non-monotonic self-terminating output layer (Choi, Cho, Lee (2023), Def. 6).
    Chapter 5 (05_nmst).

    ``p(eos at t) = (1 - sigma(z_eos)) (1 - (1 - eps)^t) + sigma(z_eos)`` with ``t`` counting
    continuation steps (``t = cumsum(~context_mask)``). The decoding state is the number of
    steps taken so far per row (a LongTensor, starting at 0; the first step uses ``t = 1``).
    """

    name = "NMST"

    def _teacher_forcing_rule(self, logits, context_mask):
        """``(logits, eos_id, eos_rule)`` of :meth:`forward` (shared with :func:`nll_token_losses`)."""
        logits, eos_id, is_step, t = self._prepare_steps(logits, context_mask)
        log1m_eps = self.log1m_eps
        return logits, eos_id, lambda z: _nmst_rule(z, log1m_eps, t, is_step)

    def forward(self, logits, context_mask=None):
        logits, eos_id, rule = self._teacher_forcing_rule(logits, context_mask)
        return _log_probs_with_eos_rule(logits, eos_id, rule)

    def initial_step_state(self, batch_size, device=None):
        return torch.zeros(_check_batch_size(batch_size), dtype=torch.long, device=device)

    def step(self, logits, state):
        logits, eos_id = self._prepare_step(logits, state, "steps")
        t = state + 1
        log1m_eps = self.log1m_eps
        return _log_probs_with_eos_rule(logits, eos_id, lambda z: _nmst_rule(z, log1m_eps, t)), t


class EntmaxHead(OutputHead):
    """alpha-entmax output layer (Martins et al. (2020), eq. 3; Chapter 8, 08_sparse).

    ``forward`` / ``step`` return ``log entmax_alpha(z)``: exactly ``-inf`` for the tokens below
    the threshold tau. Like the vanilla head it has no notion of steps (``context_mask`` is
    checked, not used; the decoding state is a dummy ``zeros(B)``) and nothing forces eos: eos
    may even get probability exactly zero at every step, so that no decoder, ancestral
    sampling included, terminates (:func:`nmst_lib.theory.eos_outside_support_model`).

    ``token_losses`` is the entmax loss, the Fenchel-Young loss of the Tsallis entropy
    (Martins et al. (2020), eqs. 5-6): ``L_alpha(z; y) = (p - e_y) . z + H^T_alpha(p)`` with
    ``p = entmax_alpha(z)``; convex in z, zero iff ``p = e_y``, gradient ``p - e_y``
    (:func:`nmst_lib.entmax.entmax_loss`). ``-log p(y)`` would be infinite outside the support.

    ``alpha >= 1``: ``alpha = 1`` is allowed and is the softmax with the cross-entropy loss
    (the vanilla head, up to rounding), the ``alpha -> 1`` end of the family; ``alpha > 1`` is sparse.
    """

    name = "ENTMAX"

    def __init__(self, alpha, eos_id: int = -1):
        super().__init__(eos_id)
        self.alpha = _check_alpha(alpha)

    def forward(self, logits, context_mask=None):
        logits = _check_logits(logits)
        _check_context_mask(context_mask, logits)
        return log_entmax(logits, self.alpha, dim=-1)

    def initial_step_state(self, batch_size, device=None):
        return torch.zeros(_check_batch_size(batch_size), device=device)

    def step(self, logits, state):
        logits = _check_step_inputs(logits, state)
        return log_entmax(logits, self.alpha, dim=-1), state

    def token_losses(self, logits, targets, context_mask=None):
        """The entmax loss ``L_alpha(z_t; y_t)`` per position (Martins et al. (2020),
        eq. 6; Chapter 8, ``08_sparse``)."""
        logits = _check_logits(logits)
        _check_context_mask(context_mask, logits)
        targets = _check_targets(targets, logits)
        return entmax_loss(logits, targets, self.alpha, dim=-1)


class NMSTEntmaxHead(_SelfTerminatingBase):
    r"""NMST-entmax output layer: NMST's eos probability, entmax for the rest (Chapter 8, 08_sparse).

    ``p(eos at t) = sigma(z_eos) + (1 - sigma(z_eos)) (1 - (1 - eps)^t)`` exactly as in
    :class:`NMSTHead` (Choi, Cho, Lee (2023), Def. 6; same code), and for ``v != eos``
    ``p(v) = (1 - p(eos)) q(v)`` with ``q = entmax_alpha(z_{-eos})``, alpha-entmax over the
    non-eos logits (Martins et al. (2020), eq. 3). Since ``p(eos at t) >= f_lb(t) -> 1``, eos
    can never leave the support, and every decoder of Chapter 8 terminates. Context positions
    (``context_mask`` True) are not steps and carry no eos mass: there the layer is
    ``entmax_alpha(z_{-eos})``, as :class:`NMSTHead` has a softmax over the non-eos logits. The
    decoding state is the number of steps taken (LongTensor, starting at 0), as in NMSTHead.

    **Training loss** (``token_losses``). Write ``b = [y = eos]`` and ``pi = p(eos at t)``; the
    model is "stop with probability pi, else draw y ~ q". Its loss is

    .. math::
        \ell(z; y) = -\log \pi \quad (y = \mathrm{eos}), \qquad
        \ell(z; y) = -\log(1 - \pi) + L_\alpha(z_{-\mathrm{eos}}; y) \quad (y \ne \mathrm{eos}),

    the negative log-likelihood of the Bernoulli event b plus, when the sequence goes on, the
    entmax (Fenchel-Young) loss of the conditional next-token distribution q. It is proper: its
    expectation under data with stop probability pi* and conditional q* is
    ``BCE(pi*, pi) + (1 - pi*) E_{y ~ q*} L_alpha(z_{-eos}; y)``; the first term is minimised
    exactly at ``pi = pi*`` (log loss is strictly proper), the second exactly where
    ``entmax_alpha(z_{-eos}) = q*`` (Fenchel-Young losses are convex with expected gradient
    ``q - q*``), and the two terms depend on disjoint logits (z_eos; z_{-eos}). Gradients:
    wrt a non-eos logit ``z_v``, ``(1 - b)(q_v - [v = y])``; wrt ``z_eos``, the NMST Bernoulli
    gradient ``-d log pi / d z_eos`` if b = 1 and ``d(-log(1 - pi)) / d z_eos = sigma(z_eos)``
    if b = 0 (``1 - pi = (1 - sigma(z_eos)) (1 - eps)^t``). With ``alpha = 1`` the loss is
    NMST's negative log-likelihood. Where q gives y probability zero the loss stays finite
    (unlike ``-log p(y)``).
    """

    name = "NMST-ENTMAX"

    def __init__(self, eps, alpha, eos_id: int = -1):
        super().__init__(eps, eos_id)
        self.alpha = _check_alpha(alpha)

    def _steps_and_rule(self, logits, context_mask):
        logits, eos_id, is_step, t = self._prepare_steps(logits, context_mask)
        log_p_eos, log_keep = _nmst_rule(logits[..., eos_id], self.log1m_eps, t, is_step)
        return logits, eos_id, log_p_eos, log_keep

    def forward(self, logits, context_mask=None):
        logits, eos_id, log_p_eos, log_keep = self._steps_and_rule(logits, context_mask)
        return _nmst_entmax_assemble(logits, eos_id, self.alpha, log_p_eos, log_keep)

    def initial_step_state(self, batch_size, device=None):
        return torch.zeros(_check_batch_size(batch_size), dtype=torch.long, device=device)

    def step(self, logits, state):
        logits, eos_id = self._prepare_step(logits, state, "steps")
        t = state + 1
        log_p_eos, log_keep = _nmst_rule(logits[:, eos_id], self.log1m_eps, t)
        return _nmst_entmax_assemble(logits, eos_id, self.alpha, log_p_eos, log_keep), t

    def token_losses(self, logits, targets, context_mask=None):
        """``-log p(eos)`` at eos targets, else ``-log(1 - p(eos)) + L_alpha(z_{-eos}; y)``
        (derivation in the class docstring; Chapter 8, 08_sparse)."""
        logits, eos_id, log_p_eos, log_keep = self._steps_and_rule(logits, context_mask)
        targets = _check_targets(targets, logits)
        return _nmst_entmax_losses(logits, targets, eos_id, self.alpha, log_p_eos, log_keep)


def _check_batch_size(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 0:
        raise ValueError(f"batch_size must be an int >= 0, got {batch_size!r}")
    return int(batch_size)


HEAD_NAMES = {"vanilla": VanillaHead, "va": VanillaHead, "st": STHead, "nmst": NMSTHead,
              "entmax": EntmaxHead, "nmst-entmax": NMSTEntmaxHead}


def head_from_name(name, eps=None, eos_id: int = -1, alpha=None) -> OutputHead:
    """Build an output layer by name: "vanilla"/"va", "st", "nmst", "entmax" or "nmst-entmax"
    (case-insensitive).

    ST, NMST and NMST-entmax need ``eps`` in (0, 1) (Welleck et al. (2020), Def. 4.3; Choi,
    Cho, Lee (2023), Defs. 5-6); vanilla and entmax take none. The entmax heads need
    ``alpha >= 1`` (Martins et al. (2020), eq. 3; Chapter 8, 08_sparse); the others take none.
    Chapters 4-8 use it to build models from configs.
    """
    if not isinstance(name, str):
        raise TypeError(f"head name must be a string, one of {sorted(HEAD_NAMES)}; got {type(name).__name__}")
    key = name.strip().lower()
    if key not in HEAD_NAMES:
        dense = sorted(k for k, c in HEAD_NAMES.items() if c not in (EntmaxHead, NMSTEntmaxHead))
        sparse = sorted(k for k, c in HEAD_NAMES.items() if c in (EntmaxHead, NMSTEntmaxHead))
        raise ValueError(f"unknown output layer {name!r}; allowed names: {', '.join(dense + sparse)} (any case; "
                         f"{' and '.join(sparse)} also need alpha)")
    cls = HEAD_NAMES[key]
    needs_alpha = cls in (EntmaxHead, NMSTEntmaxHead)
    if needs_alpha and alpha is None:
        raise ValueError(f"the {cls.name} head needs alpha >= 1 (e.g. 1.5; 2 = sparsemax), "
                         f"e.g. head_from_name({name!r}{'' if cls is EntmaxHead else ', eps=1e-4'}, alpha=1.5)")
    if not needs_alpha and alpha is not None:
        raise ValueError(f"the {cls.name} head has no alpha (only 'entmax' and 'nmst-entmax' do); "
                         f"pass alpha=None (got alpha={alpha!r})")
    if cls in (VanillaHead, EntmaxHead):
        if eps is not None:
            raise ValueError(f"the {cls.name} head has no eps; pass eps=None (got eps={eps!r})")
        return VanillaHead(eos_id) if cls is VanillaHead else EntmaxHead(alpha, eos_id)
    if eps is None:
        extra = ", alpha=1.5" if needs_alpha else ""
        raise ValueError(f"the {cls.name} head needs eps in (0, 1), e.g. head_from_name({name!r}, eps=1e-4{extra})")
    return NMSTEntmaxHead(eps, alpha, eos_id) if needs_alpha else cls(eps, eos_id)
