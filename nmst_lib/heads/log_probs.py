"""Output layers: vanilla softmax, self-terminating (ST), non-monotonic self-terminating (NMST),
and their sparse versions, entmax and NMST-entmax.

An output layer turns the logits ``z = U h_t`` of a language model into next-token
log-probabilities. The three softmax layers of the book differ only in how they treat ``<eos>``:

* **vanilla** (Choi, Cho, Lee (2023), Def. 1): ``log_softmax(z)``; nothing forces eos.
* **ST** (Welleck et al. (2020), Def. 4.3; Choi, Cho, Lee (2023), Def. 5, eq. 9):
  ``p(eos at t) = 1 - prod_{s<=t} (1 - eps) sigma(z_eos at s)``, non-decreasing in t.
* **NMST** (Choi, Cho, Lee (2023), Def. 6, eq. 10):
  ``p(eos at t) = (1 - sigma(z_eos)) (1 - (1 - eps)^t) + sigma(z_eos)``, free to go up and
  down but never below the lower bound ``f_lb(t) = 1 - (1 - eps)^t``.

In ST and NMST the other tokens share ``1 - p(eos)`` in proportion to a softmax over the
NON-eos logits.

Two sparse layers (Chapter 8, 08_sparse) replace the softmax by alpha-entmax (Martins et al.
(2020), eq. 3; :mod:`nmst_lib.entmax`), which can give tokens probability exactly zero
(log-probability ``-inf``):

* **entmax**: ``log entmax_alpha(z)``, trained with the entmax (Fenchel-Young) loss
  (Martins et al. (2020), eqs. 5-6) instead of the negative log-likelihood, which is infinite
  outside the support;
* **NMST-entmax** (this book, Chapter 8): eos gets NMST's ``p(eos at t)`` (so the lower
  bound ``f_lb(t)`` holds and every decoder terminates), the other tokens share
  ``1 - p(eos)`` in proportion to alpha-entmax over the NON-eos logits.

Everything is computed in log space, exactly, with no clamping: the layers
return finite eos log-probabilities and finite gradients even at ``|logit| = 1e4`` in float32,
and float64 inputs give float64-accurate outputs. float16 / bfloat16 logits (mixed precision)
are computed, and returned, in float32.

Steps ``t = 1, 2, ...`` count continuation tokens (ARCHITECTURE.md); the functions take them along
dim -2 of the logits ``[..., T, V]``, the :class:`OutputHead` modules also understand a context
mask (context positions are not steps) and decode one step at a time with :meth:`~OutputHead.step`.
Chapter 4 (04_self_terminating) derives ST, Chapter 5 (05_nmst) derives NMST, Chapter 8
(08_sparse) the entmax layers and their losses (:meth:`OutputHead.token_losses`). The models
of the experiment chapters (6-9, :mod:`nmst_lib.models`) carry one of these layers, Chapter 9's
contextual temperature (:mod:`nmst_lib.temperature`) wraps them, and the training loss of ST
and NMST goes through :mod:`nmst_lib.fused`.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from .._validation import check_eps, check_index
from ..entmax import entmax_loss, log_entmax
from ..fused import FusedNLL, ProjectedFusedNLL, fused_nll_forward

__all__ = [
    "log1mexp",
    "eos_lower_bound",
    "st_eos_log_probs",
    "nmst_eos_log_probs",
    "vanilla_log_probs",
    "st_log_probs",
    "nmst_log_probs",
    "entmax_log_probs",
    "nmst_entmax_log_probs",
    "OutputHead",
    "VanillaHead",
    "STHead",
    "NMSTHead",
    "EntmaxHead",
    "NMSTEntmaxHead",
    "head_from_name",
    "HEAD_NAMES",
    "nll_token_losses",
    "projected_nll_token_losses",
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
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
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


# ----------------------------------------------------------------------------- the shared layer


def _assemble_log_probs(logits: torch.Tensor, eos_id: int, log_p_eos: torch.Tensor, log_keep: torch.Tensor):
    """``out[..., v] = log(1 - p(eos)) + log_softmax_{v' != eos}(z)_v`` and ``out[..., eos] = log p(eos)``.

    The second line of Choi, Cho, Lee (2023), Defs. 5 and 6, computed as written: one copy of
    the logits with the eos logit set to -inf, turned into the non-eos log-softmax in place and
    shifted by ``log(1 - p(eos))``: one [..., V] tensor in all. The log-probabilities a model
    reports (``forward``, ``step``, :func:`st_log_probs`, :func:`nmst_log_probs`) come from here
    and keep float32's relative precision even for a log-probability near 0 next to an eos logit
    of 1e4 (Chapter 4's check). The training loss takes :mod:`nmst_lib.fused`'s one-pass route,
    whose shift of the full log-softmax costs up to a few float32 ulps of O(1) in absolute terms.
    """
    out = logits.clone(memory_format=torch.contiguous_format)
    out[..., eos_id] = -math.inf
    if out.device.type in ("cpu", "cuda"):
        # in place: the CPU and CUDA kernels read a whole row (max, sum) before writing it
        torch.log_softmax(out, dim=-1, out=out)
    else:
        out = torch.log_softmax(out, dim=-1)
    out += log_keep.unsqueeze(-1)
    out[..., eos_id] = log_p_eos
    return out


class _EosSplitLogSoftmax(torch.autograd.Function):
    """Autograd for :func:`_assemble_log_probs` without extra [..., V] tensors.

    With ``q = softmax over the non-eos logits`` and upstream gradient ``g``, the non-eos
    logits get ``g_w - q_w * sum_{v != eos} g_v``. The eos rule is a small function of the eos
    logits (and of ``rule_inputs``, e.g. ST's running state when decoding): it is re-run under
    autograd and differentiated with ``d/d log p(eos) = g_eos`` and
    ``d/d log(1 - p(eos)) = sum_{v != eos} g_v``.
    """

    @staticmethod
    def forward(ctx, logits, eos_id, eos_rule, *rule_inputs):
        eos_logits = logits[..., eos_id].clone()
        log_p_eos, log_keep = eos_rule(eos_logits, *rule_inputs)
        out = _assemble_log_probs(logits, eos_id, log_p_eos, log_keep)
        ctx.save_for_backward(out, eos_logits, log_keep, *rule_inputs)
        ctx.eos_id, ctx.eos_rule = eos_id, eos_rule
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        out, eos_logits, log_keep, *rule_inputs = ctx.saved_tensors
        eos_id = ctx.eos_id
        grad_log_p_eos = grad_out[..., eos_id]
        grad_log_keep = grad_out.sum(-1) - grad_log_p_eos  # sum over the non-eos tokens
        grad_logits = None
        if ctx.needs_input_grad[0]:
            # q = exp(out - log(1 - p(eos))) is the softmax over the non-eos logits; the eos column
            # (exp(log p(eos) - log(1 - p(eos))), maybe inf) is overwritten below
            grad_logits = torch.sub(out, log_keep.unsqueeze(-1)).exp_()
            torch.addcmul(grad_out, grad_logits, grad_log_keep.unsqueeze(-1), value=-1.0, out=grad_logits)
        with torch.enable_grad():
            leaves = [eos_logits.detach().requires_grad_(ctx.needs_input_grad[0])]
            leaves += [x.detach().requires_grad_(need) for x, need in zip(rule_inputs, ctx.needs_input_grad[3:])]
            wanted = [leaf for leaf in leaves if leaf.requires_grad]
            log_p_eos, log_keep = ctx.eos_rule(*leaves)
            grads = iter(torch.autograd.grad((log_p_eos, log_keep), wanted, (grad_log_p_eos, grad_log_keep),
                                             allow_unused=True, materialize_grads=True))
        if grad_logits is not None:
            grad_logits[..., eos_id] = next(grads)
        rule_grads = [next(grads) if leaf.requires_grad else None for leaf in leaves[1:]]
        return (grad_logits, None, None, *rule_grads)


def _log_probs_with_eos_rule(logits: torch.Tensor, eos_id: int, eos_rule, *rule_inputs: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of an output layer that sets ``p(eos)`` by ``eos_rule`` and shares
    ``1 - p(eos)`` among the other tokens by a softmax over their logits (Choi, Cho, Lee (2023),
    Defs. 5-6). ``eos_rule(eos_logits, *rule_inputs)`` returns ``(log p(eos), log(1 - p(eos)))``;
    gradients reach ``logits`` and any of ``rule_inputs`` that require them."""
    if torch.is_grad_enabled() and any(x.requires_grad for x in (logits, *rule_inputs)):
        return _EosSplitLogSoftmax.apply(logits, eos_id, eos_rule, *rule_inputs)
    log_p_eos, log_keep = eos_rule(logits[..., eos_id], *rule_inputs)
    return _assemble_log_probs(logits, eos_id, log_p_eos, log_keep)


def _fused_nll(logits: torch.Tensor, targets: torch.Tensor, eos_id, eos_rule, inplace_backward=False):
    """``-log p(y_t)`` of the vanilla (``eos_id`` None), ST or NMST layer by :mod:`nmst_lib.fused`:
    one log-softmax pass forward, ``exp`` and a multiply backward, one saved [..., V] tensor."""
    if torch.is_grad_enabled() and logits.requires_grad:
        return FusedNLL.apply(logits, targets, eos_id, eos_rule, inplace_backward)
    return fused_nll_forward(logits, targets, eos_id, eos_rule, (), inplace=False)[0]


def nll_token_losses(head, logits: torch.Tensor, targets: torch.Tensor,
                     context_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``head.token_losses(logits, targets, context_mask)`` with less memory for backward.

    For the vanilla, ST and NMST layers (loss ``-log p(y_t)``, Choi, Cho, Lee (2023) eq. 3) the
    forward values are the same, bit for bit, and the gradient is the same function; autograd
    keeps a single ``[..., V]`` tensor (the log-softmax) and the backward reuses its memory
    instead of allocating a new one (:class:`nmst_lib.fused.FusedNLL` with ``inplace_backward``;
    a second backward through the same graph is refused). Other heads (entmax, NMST-entmax) and
    calls without gradients go through ``head.token_losses`` unchanged (Chapter 7, 07_gpt2).
    """
    if not isinstance(head, OutputHead):
        raise TypeError(f"head must be an output layer from nmst_lib.heads, got {type(head).__name__}")
    lean = type(head) in (VanillaHead, STHead, NMSTHead)
    if not (lean and torch.is_grad_enabled() and isinstance(logits, torch.Tensor) and logits.requires_grad):
        return head.token_losses(logits, targets, context_mask)
    if type(head) is VanillaHead:
        logits = _check_logits(logits)
        _check_context_mask(context_mask, logits)
        targets = _check_targets(targets, logits)
        return _fused_nll(logits, targets, None, None, inplace_backward=True)
    logits, eos_id, rule = head._teacher_forcing_rule(logits, context_mask)
    targets = _check_targets(targets, logits)
    return _fused_nll(logits, targets, eos_id, rule, inplace_backward=True)


def projected_nll_token_losses(head, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                               context_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``head.token_losses(hidden @ weight^T, targets, context_mask)`` holding ONE ``[..., V]``
    float32 tensor per training step (Chapter 7, 07_gpt2; Choi, Cho, Lee (2023) eq. 3).

    ``hidden[..., T, H]`` is the last layer's output, ``weight[V, H]`` the output projection
    (GPT-2's ``lm_head``, tied to the token embedding; no bias). For the vanilla, ST and NMST
    layers with gradients (:class:`nmst_lib.fused.ProjectedFusedNLL`) the logits are computed inside, become the
    log-probabilities in place and then their own gradient: the values equal the head's own
    loss bit for bit, the gradients to rounding. Otherwise (no gradients, entmax heads) it is
    ``head.token_losses`` of the projected logits (float32).
    """
    if not isinstance(head, OutputHead):
        raise TypeError(f"head must be an output layer from nmst_lib.heads, got {type(head).__name__}")
    if not isinstance(hidden, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError("hidden and weight must be tensors ([..., T, H] and [V, H])")
    if weight.dim() != 2 or hidden.dim() < 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden [..., T, H] and weight [V, H] must agree on H, got {tuple(hidden.shape)} and "
                         f"{tuple(weight.shape)}")
    lean = type(head) in (VanillaHead, STHead, NMSTHead)
    if not (lean and torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)):
        logits = torch.nn.functional.linear(hidden, weight)
        with torch.autocast(device_type=logits.device.type, enabled=False):
            return head.token_losses(logits.float(), targets, context_mask)
    # validation and the eos rule need the logits' shape and device only: a stride-0 view, no [..., V] memory
    probe = torch.zeros((), dtype=torch.float32, device=hidden.device).expand(*hidden.shape[:-1], weight.shape[0])
    if type(head) is VanillaHead:
        _check_context_mask(context_mask, probe)
        eos_id, rule = None, None
    else:
        _, eos_id, rule = head._teacher_forcing_rule(probe, context_mask)
    targets = _check_targets(targets, probe)
    return ProjectedFusedNLL.apply(hidden, weight, targets, eos_id, rule)


# ----------------------------------------------------------------------------- functional API


def vanilla_log_probs(logits):
    """Log-softmax over the last dim: the vanilla output layer (Choi, Cho, Lee (2023), Def. 1;
    Welleck et al. (2020), Sec. 2). It has no notion of steps. Chapter 1 (01_decoding)."""
    return torch.log_softmax(_check_logits(logits), dim=-1)


def st_log_probs(logits, eos_id, eps):
    """Self-terminating (ST) log-probabilities for ``logits[..., T, V]``, steps ``t = 1..T`` along dim -2.

    Welleck et al. (2020), Def. 4.3; Choi, Cho, Lee (2023), Def. 5 (eq. 9):
    ``p(eos at t) = 1 - prod_{s<=t} (1 - eps) sigma(z_eos at s)`` and, for ``v != eos``,
    ``p(v) = (1 - p(eos)) softmax_{v' != eos}(z)_v``. Computed in log space:
    ``log(1 - p(eos))`` is a cumulative sum of ``log1p(-eps) + logsigmoid(z_eos)``,
    ``log p(eos) = log1mexp(log(1 - p(eos)))``. ``eos_id`` in ``[0, V)``, ``eps`` in (0, 1).
    Chapter 4 (04_self_terminating).
    """
    logits = _check_logits(logits, min_dim=2)
    eps = check_eps(eps)
    eos_id = _check_eos_vocab(logits, eos_id)
    log1m_eps = math.log1p(-eps)
    return _log_probs_with_eos_rule(logits, eos_id, lambda z: _st_rule(z, log1m_eps))


def nmst_log_probs(logits, eos_id, eps, t=None):
    """Non-monotonic self-terminating (NMST) log-probabilities for ``logits[..., V]``.

    Choi, Cho, Lee (2023), Def. 6 (eq. 10): ``p(eos at t) = (1 - sigma(z_eos)) (1 - (1-eps)^t)
    + sigma(z_eos)`` and, for ``v != eos``, ``p(v) = (1 - p(eos)) softmax_{v' != eos}(z)_v``.
    Computed in log space: ``log(1 - p(eos)) = logsigmoid(-z_eos) + t log1p(-eps)`` exactly and
    ``log p(eos) = logaddexp(logsigmoid(z_eos), logsigmoid(-z_eos) + log f_lb(t))``.
    ``t`` defaults to ``1..T`` along dim -2 (logits ``[..., T, V]``, at least 2-D); it may be an
    int >= 0 or a tensor broadcastable to ``logits.shape[:-1]`` (``t = 0``: no lower bound,
    ``p(eos) = sigma(z_eos)``). ``eos_id`` in ``[0, V)``, ``eps`` in (0, 1).
    Chapter 5 (05_nmst).
    """
    logits = _check_logits(logits, min_dim=2 if t is None else 1)
    eps = check_eps(eps)
    eos_id = _check_eos_vocab(logits, eos_id)
    if t is None:
        t = torch.arange(1, logits.shape[-2] + 1, device=logits.device)
    t = _check_steps(t, logits.shape[:-1])
    log1m_eps = math.log1p(-eps)
    return _log_probs_with_eos_rule(logits, eos_id, lambda z: _nmst_rule(z, log1m_eps, t))


def entmax_log_probs(logits, alpha):
    """Log alpha-entmax over the last dim: the entmax output layer (Martins et al. (2020), eq. 3).

    ``entmax_alpha(z) = argmax_p p.z + H^T_alpha(p)`` (Tsallis entropy) is
    ``[(alpha - 1) z - tau]_+^{1/(alpha - 1)}``; tokens below the threshold get probability
    exactly zero, i.e. log-probability ``-inf``. ``alpha >= 1``; ``alpha = 1`` is the softmax
    (:func:`vanilla_log_probs`). Like the vanilla layer it has no notion of steps. Computed by
    :func:`nmst_lib.entmax.log_entmax`. Chapter 8 (08_sparse).
    """
    alpha = _check_alpha(alpha)
    return log_entmax(_check_logits(logits), alpha, dim=-1)


def _eos_column(logits: torch.Tensor, eos_id: int) -> torch.Tensor:
    return torch.arange(logits.shape[-1], device=logits.device) == eos_id


def _nmst_entmax_assemble(logits, eos_id: int, alpha: float, log_p_eos, log_keep):
    """``out[..., v] = log(1 - p(eos)) + log entmax_alpha(z_{-eos})_v``, ``out[..., eos] = log p(eos)``."""
    non_eos = logits.masked_fill(_eos_column(logits, eos_id), -math.inf)
    out = log_entmax(non_eos, alpha, dim=-1) + log_keep.unsqueeze(-1)
    out[..., eos_id] = log_p_eos
    return out


def _nmst_entmax_losses(logits, targets, eos_id: int, alpha: float, log_p_eos, log_keep):
    """Per-position NMST-entmax loss: ``-log p(eos)`` at eos targets, else
    ``-log(1 - p(eos)) + L_alpha(z_{-eos}; y)`` (see :class:`NMSTEntmaxHead`)."""
    is_eos = targets == eos_id
    # eos targets take the other branch; give the Fenchel-Young loss a finite (non-eos) target there
    safe_targets = targets.masked_fill(is_eos, (eos_id + 1) % logits.shape[-1])
    # entmax over the non-eos logits: eos masked inside the loss, without a copy of the logits
    fenchel_young = entmax_loss(logits, safe_targets, alpha, dim=-1, exclude=eos_id)
    return torch.where(is_eos, -log_p_eos, fenchel_young - log_keep)


def nmst_entmax_log_probs(logits, eos_id, eps, alpha, t=None):
    """NMST-entmax log-probabilities for ``logits[..., V]`` (Chapter 8, 08_sparse).

    ``p(eos at t)`` is exactly NMST's (Choi, Cho, Lee (2023), Def. 6, eq. 10):
    ``sigma(z_eos) + (1 - sigma(z_eos)) (1 - (1 - eps)^t) >= f_lb(t)``, and for ``v != eos``
    ``p(v) = (1 - p(eos)) entmax_alpha(z_{-eos})_v``, alpha-entmax over the NON-eos logits
    (Martins et al. (2020), eq. 3; eos is excluded from the entmax). Non-eos tokens below the
    entmax threshold get ``-inf``; eos never does for ``t >= 1``. ``alpha >= 1`` (``alpha = 1``
    gives :func:`nmst_log_probs`); ``t`` as in :func:`nmst_log_probs` (default ``1..T`` along
    dim -2). The eos rule is the same code as NMST's, so ``p(eos)`` agrees bit for bit.
    """
    logits = _check_logits(logits, min_dim=2 if t is None else 1)
    eps = check_eps(eps)
    alpha = _check_alpha(alpha)
    eos_id = _check_eos_vocab(logits, eos_id)
    if t is None:
        t = torch.arange(1, logits.shape[-2] + 1, device=logits.device)
    t = _check_steps(t, logits.shape[:-1])
    log_p_eos, log_keep = _nmst_rule(logits[..., eos_id], math.log1p(-eps), t)
    return _nmst_entmax_assemble(logits, eos_id, alpha, log_p_eos, log_keep)


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


def _check_step_inputs(logits, state) -> torch.Tensor:
    logits = _check_logits(logits)
    if logits.dim() != 2:
        raise ValueError(f"step expects the logits of one step, [B, V], got shape {tuple(logits.shape)}")
    if not isinstance(state, torch.Tensor) or state.shape != logits.shape[:1]:
        shape = tuple(state.shape) if isinstance(state, torch.Tensor) else type(state).__name__
        raise ValueError(
            f"state must be a tensor [B] = [{logits.shape[0]}] from initial_step_state or step, got {shape}"
        )
    return logits


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
        entry of :meth:`forward`; fused backward (:mod:`nmst_lib.fused`)."""
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

    def token_losses(self, logits, targets, context_mask=None):
        """``-log p(y_t)`` per position (Choi, Cho, Lee (2023), eq. 3), bit for bit the entry of
        :meth:`forward`, computed fused: one log-softmax pass forward, one in-place pass
        backward (:mod:`nmst_lib.fused`). NMST-entmax overrides it with its own loss."""
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
        logits = _check_step_inputs(logits, state)
        eos_id = self.resolve_eos_id(logits.shape[-1])
        _check_eos_vocab(logits, eos_id)
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
        logits, eos_id, is_step = self._prepare(logits, context_mask)
        if is_step is None:
            t = torch.arange(1, logits.shape[-2] + 1, device=logits.device)
        else:
            t = torch.cumsum(is_step, dim=-1)
        log1m_eps = self.log1m_eps
        return logits, eos_id, lambda z: _nmst_rule(z, log1m_eps, t, is_step)

    def forward(self, logits, context_mask=None):
        logits, eos_id, rule = self._teacher_forcing_rule(logits, context_mask)
        return _log_probs_with_eos_rule(logits, eos_id, rule)

    def initial_step_state(self, batch_size, device=None):
        return torch.zeros(_check_batch_size(batch_size), dtype=torch.long, device=device)

    def step(self, logits, state):
        logits = _check_step_inputs(logits, state)
        eos_id = self.resolve_eos_id(logits.shape[-1])
        _check_eos_vocab(logits, eos_id)
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
        """The entmax loss ``L_alpha(z_t; y_t)`` per position (Martins et al. (2020), eq. 6)."""
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
        logits, eos_id, is_step = self._prepare(logits, context_mask)
        if is_step is None:
            t = torch.arange(1, logits.shape[-2] + 1, device=logits.device)
        else:
            t = torch.cumsum(is_step, dim=-1)
        log_p_eos, log_keep = _nmst_rule(logits[..., eos_id], self.log1m_eps, t, is_step)
        return logits, eos_id, log_p_eos, log_keep

    def forward(self, logits, context_mask=None):
        logits, eos_id, log_p_eos, log_keep = self._steps_and_rule(logits, context_mask)
        return _nmst_entmax_assemble(logits, eos_id, self.alpha, log_p_eos, log_keep)

    def initial_step_state(self, batch_size, device=None):
        return torch.zeros(_check_batch_size(batch_size), dtype=torch.long, device=device)

    def step(self, logits, state):
        logits = _check_step_inputs(logits, state)
        eos_id = self.resolve_eos_id(logits.shape[-1])
        _check_eos_vocab(logits, eos_id)
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
