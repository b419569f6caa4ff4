"""The eos rules of the output layers: how ST and NMST set ``p(eos at t)``, and the checks every
output layer shares.

* **ST** (Welleck et al. (2020), Def. 4.3; Choi, Cho, Lee (2023), Def. 5, eq. 9):
  ``p(eos at t) = 1 - prod_{s<=t} (1 - eps) sigma(z_eos at s)``, non-decreasing in t.
* **NMST** (Choi, Cho, Lee (2023), Def. 6, eq. 10):
  ``p(eos at t) = (1 - sigma(z_eos)) (1 - (1 - eps)^t) + sigma(z_eos)``, free to go up and
  down but never below the lower bound ``f_lb(t) = 1 - (1 - eps)^t`` (:func:`eos_lower_bound`).

Everything is computed in log space, exactly, with no clamping (:func:`log1mexp`): the rules
return finite eos log-probabilities and finite gradients even at ``|logit| = 1e4`` in float32.
float16 / bfloat16 logits (mixed precision) are computed in float32 (``_check_logits``).
Chapter 4 (04_self_terminating) derives ST, Chapter 5 (05_nmst) derives NMST; the plots of
Chapters 4-7 draw ``f_lb(t)`` and :mod:`nmst_lib.theory.eos_shapes` runs the rules alone.
:mod:`nmst_lib.heads.log_probs` turns them into full log-probabilities.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

from .._validation import check_eps, check_index, is_integer_tensor

__all__ = [  # noqa: RUF022
    "log1mexp",
    "eos_lower_bound",
    "st_eos_log_probs",
    "nmst_eos_log_probs",
]

_LOG_HALF = -math.log(2.0)

# ----------------------------------------------------------------------------- checks


_HALF_DTYPES = (torch.float16, torch.bfloat16)


def _check_logits(logits, min_dim: int = 1) -> torch.Tensor:
    """Check ``logits`` and return them ready for the output layers: float16 / bfloat16 logits (e.g.
    from a model under autocast) are upcast to float32, so the result is float32. In bfloat16
    (8-bit significand) ``log1p(-eps)`` vanishes next to ``logsigmoid(z)`` for eps = 1e-4, and
    rounding the log-probabilities breaks NMST's lower bound and the sum to one by ~1e-2."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if not logits.is_floating_point():
        raise TypeError(
            f"logits must be a floating-point tensor (float32 or float64; float16/bfloat16 are computed in "
            f"float32), got {logits.dtype}"
        )
    if logits.dim() < min_dim:
        raise ValueError(
            f"logits must have at least {min_dim} dims ([..., T, V]: steps along dim -2, vocabulary last), "
            f"got shape {tuple(logits.shape)}"
        )
    return logits.float() if logits.dtype in _HALF_DTYPES else logits


def _check_eos_vocab(logits: torch.Tensor, eos_id) -> int:
    vocab_size = logits.shape[-1]
    eos_id = check_index(eos_id, vocab_size, "eos_id")
    if vocab_size < 2:
        raise ValueError(
            "ST/NMST need at least one non-eos token: the vocabulary (last dim of logits) must have size >= 2"
        )
    return eos_id


def _check_steps(t, shape: torch.Size) -> torch.Tensor | int:
    """``t`` for :func:`nmst_log_probs`: an int >= 0, or a real tensor >= 0 broadcastable to ``shape``."""
    if isinstance(t, torch.Tensor):
        if t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"t must be an integer or real tensor of step numbers, got dtype {t.dtype}")
        try:
            broadcast = torch.broadcast_shapes(t.shape, shape)
        except RuntimeError:
            broadcast = None
        if broadcast != shape:
            raise ValueError(
                f"t of shape {tuple(t.shape)} must broadcast to logits.shape[:-1] = {tuple(shape)}"
            )
        if bool((t < 0).any()) or bool(torch.isnan(t).any()):
            raise ValueError("t must be >= 0 (t = 1 is the first continuation step; t = 0 means no lower bound)")
        return t
    if isinstance(t, bool) or not isinstance(t, numbers.Integral):
        raise TypeError(f"t must be an int >= 0 or a tensor of step numbers, got {type(t).__name__}")
    if t < 0:
        raise ValueError(f"t must be >= 0 (t = 1 is the first continuation step), got {t}")
    return int(t)


def _check_alpha(alpha) -> float:
    """``alpha`` of alpha-entmax (Martins et al. (2020), eq. 3): a finite real number >= 1.

    ``alpha = 1`` is the softmax (dense), ``alpha = 1.5`` entmax15, ``alpha = 2`` sparsemax; every
    ``alpha > 1`` can give tokens probability exactly zero. Chapter 8 (08_sparse)."""
    if isinstance(alpha, torch.Tensor):
        if alpha.numel() != 1:
            raise ValueError(f"alpha must be a single number >= 1, got a tensor of shape {tuple(alpha.shape)}")
        alpha = alpha.item()
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number >= 1 (1 = softmax, 1.5 = entmax15, 2 = sparsemax), "
                        f"got {type(alpha).__name__}")
    alpha = float(alpha)
    if not (math.isfinite(alpha) and alpha >= 1.0):
        raise ValueError(f"alpha must be a finite number >= 1 (1 = softmax, 1.5 = entmax15, 2 = sparsemax), "
                         f"got {alpha!r}")
    return alpha


def _check_targets(targets, logits: torch.Tensor) -> torch.Tensor:
    """``targets[...]`` for :meth:`OutputHead.token_losses`: integer ids in ``[0, V)`` of shape
    ``logits.shape[:-1]``, moved to the logits' device."""
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"targets must be a torch.Tensor of token ids, got {type(targets).__name__}")
    if not is_integer_tensor(targets):
        raise TypeError(f"targets must hold integer token ids (e.g. torch.long), got dtype {targets.dtype}")
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets must have shape logits.shape[:-1] = {tuple(logits.shape[:-1])}, "
                         f"got {tuple(targets.shape)}")
    vocab_size = logits.shape[-1]
    targets = targets.to(device=logits.device, dtype=torch.long)
    if targets.numel() and bool(((targets < 0) | (targets >= vocab_size)).any()):
        raise ValueError(f"targets must be token ids in [0, {vocab_size}) (the vocabulary is the last dim of logits)")
    return targets


# ----------------------------------------------------------------------------- building blocks


def log1mexp(x):
    """``log(1 - exp(x))`` for ``x <= 0``, accurate over the whole range (Maechler 2012).

    Near 0 (``x > -log 2``) it uses ``log(-expm1(x))``, further out ``log1p(-exp(x))``; each
    branch only ever sees inputs that are safe for it, so gradients stay finite too. It turns
    ``log(1 - p(eos))`` into ``log p(eos)`` for ST (Welleck et al. (2020), Def. 4.3) and gives
    ``log f_lb(t)`` for NMST (Choi, Cho, Lee (2023), Def. 6); Chapter 4 (04_self_terminating).
    ``x = 0`` gives ``-inf``; ``x > 0`` is outside the domain and gives NaN (like ``torch.log``
    of a negative number). Accepts a floating tensor or a real number (returns a float).
    """
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"log1mexp needs a floating-point tensor, got {x.dtype}")
        near_zero = x > _LOG_HALF
        x_near = torch.where(near_zero, x, -1.0)
        x_far = torch.where(near_zero, -1.0, x)
        return torch.where(near_zero, torch.log(-torch.expm1(x_near)), torch.log1p(-torch.exp(x_far)))
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"log1mexp needs a real number or a floating tensor, got {type(x).__name__}")
    x = float(x)
    if x > 0 or math.isnan(x):
        return math.nan
    if x == 0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > _LOG_HALF else math.log1p(-math.exp(x))


def eos_lower_bound(t, eps):
    """The lower bound ``f_lb(t) = 1 - (1 - eps)^t`` on ``p(eos at step t)``.

    Choi, Cho, Lee (2023), Def. 6 and Fig. 1 (``f_lb``); Welleck et al. (2020), proof of
    Thm. 4.2. Both ST and NMST keep ``p(eos at t) >= f_lb(t)``, and ``f_lb(t) -> 1``, which is
    why they terminate (Chapters 4 and 5: 04_self_terminating, 05_nmst). Computed as
    ``-expm1(t * log1p(-eps))``, exact even for ``eps = 1e-5`` in float32.
    ``t`` is a number >= 0 (returns a float) or a tensor of step numbers >= 0 (returns a
    tensor; integer tensors are converted to the default float dtype).
    """
    eps = check_eps(eps)
    if isinstance(t, torch.Tensor):
        if t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"t must be a tensor of step numbers, got dtype {t.dtype}")
        if bool((t < 0).any()) or bool(torch.isnan(t).any()):
            raise ValueError("t must be >= 0 (step numbers)")
        if not t.is_floating_point():
            t = t.to(torch.get_default_dtype())
        return -torch.expm1(t * math.log1p(-eps))
    if isinstance(t, bool) or not isinstance(t, numbers.Real):
        raise TypeError(f"t must be a number >= 0 or a tensor, got {type(t).__name__}")
    if not t >= 0:
        raise ValueError(f"t must be >= 0 (a step number), got {t!r}")
    return -math.expm1(float(t) * math.log1p(-eps))


# ----------------------------------------------------------------------------- eos rules


def _st_rule(eos_logits: torch.Tensor, log1m_eps: float, is_step: torch.Tensor | None = None):
    """ST eos rule along the last dim; positions where ``is_step`` is False are context (no eos)."""
    log_keep_step = log1m_eps + F.logsigmoid(eos_logits)  # log((1 - eps) sigma(z_s))
    if is_step is not None:
        log_keep_step = torch.where(is_step, log_keep_step, 0.0)
    log_keep = torch.cumsum(log_keep_step, dim=-1)  # log(1 - p(eos at t)) = sum_{s <= t}
    return _finish_rule(log_keep, is_step)


def _nmst_rule(eos_logits: torch.Tensor, log1m_eps: float, t, is_step: torch.Tensor | None = None):
    """NMST eos rule at step(s) ``t``; positions where ``is_step`` is False are context (no eos)."""
    if isinstance(t, torch.Tensor):
        t = t.to(device=eos_logits.device, dtype=eos_logits.dtype)
    log_bound_keep = t * log1m_eps  # log (1 - eps)^t
    log_bound = log1mexp(log_bound_keep)  # log f_lb(t); -inf at t = 0
    log_sigma = F.logsigmoid(eos_logits)
    log_one_minus_sigma = F.logsigmoid(-eos_logits)
    # 1 - p(eos) = (1 - sigma) (1 - eps)^t   and   p(eos) = sigma + (1 - sigma) f_lb(t)
    log_keep = log_one_minus_sigma + log_bound_keep
    log_p_eos = torch.logaddexp(log_sigma, log_one_minus_sigma + log_bound)
    if is_step is None:
        return log_p_eos, log_keep
    return torch.where(is_step, log_p_eos, -math.inf), torch.where(is_step, log_keep, 0.0)


def _finish_rule(log_keep: torch.Tensor, is_step: torch.Tensor | None):
    """``(log p(eos), log(1 - p(eos)))`` from ``log(1 - p(eos))``; context positions get (-inf, 0)."""
    if is_step is None:
        return log1mexp(log_keep), log_keep
    # context positions: keep their (unused) input away from log1mexp's pole at 0, so that the
    # gradient of the branch torch.where drops is 0 and not 0 * inf = NaN
    log_p_eos = log1mexp(torch.where(is_step, log_keep, -1.0))
    return torch.where(is_step, log_p_eos, -math.inf), torch.where(is_step, log_keep, 0.0)


def st_eos_log_probs(eos_logits, eps):
    """``(log p(eos at t), log(1 - p(eos at t)))`` of an ST layer, steps ``t = 1..T`` along the last dim.

    Welleck et al. (2020), Def. 4.3; Choi, Cho, Lee (2023), Def. 5, eq. 9:
    ``1 - p(eos at t) = prod_{s<=t} (1 - eps) sigma(z_s)``, accumulated as a cumulative sum of
    ``log1p(-eps) + logsigmoid(z_s)``; ``log p(eos) = log1mexp(log(1 - p(eos)))``.
    ``eos_logits`` is ``[..., T]`` (the eos logit ``u_eos . h_t`` of each step). Chapter 4
    (04_self_terminating).
    """
    eps = check_eps(eps)
    eos_logits = _check_logits(eos_logits, min_dim=1)
    return _st_rule(eos_logits, math.log1p(-eps))


def nmst_eos_log_probs(eos_logits, eps, t=None):
    """``(log p(eos at t), log(1 - p(eos at t)))`` of an NMST layer.

    Choi, Cho, Lee (2023), Def. 6, eq. 10: ``p(eos) = sigma(z) + (1 - sigma(z)) f_lb(t)``, so
    ``log(1 - p(eos)) = logsigmoid(-z) + t log1p(-eps)`` exactly and
    ``log p(eos) = logaddexp(logsigmoid(z), logsigmoid(-z) + log f_lb(t))``.
    ``eos_logits`` is ``[..., T]``; ``t`` defaults to ``1..T`` along the last dim, or is an int
    >= 0 or a tensor broadcastable to ``eos_logits`` (``t = 0``: no lower bound,
    ``p(eos) = sigma(z)``). Chapter 5 (05_nmst).
    """
    eps = check_eps(eps)
    eos_logits = _check_logits(eos_logits, min_dim=1)
    if t is None:
        t = torch.arange(1, eos_logits.shape[-1] + 1, device=eos_logits.device)
    t = _check_steps(t, eos_logits.shape)
    return _nmst_rule(eos_logits, math.log1p(-eps), t)

