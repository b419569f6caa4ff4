"""The output layers as functions on logits: vanilla softmax, ST, NMST, entmax and NMST-entmax
log-probabilities, and the layer they share.

In ST and NMST the other tokens share ``1 - p(eos)`` in proportion to a softmax over the
NON-eos logits (Choi, Cho, Lee (2023), Defs. 5-6): ``_assemble_log_probs`` computes that in
one ``[..., V]`` tensor and ``_EosSplitLogSoftmax`` differentiates it without more; the eos
rules come from :mod:`nmst_lib.heads.eos_rules`. The sparse layers (Chapter 8, 08_sparse)
replace the softmax by alpha-entmax (Martins et al. (2020), eq. 3; :mod:`nmst_lib.entmax`),
which can give tokens probability exactly zero (log-probability ``-inf``); NMST-entmax keeps
NMST's ``p(eos at t)``, so the lower bound ``f_lb(t)`` holds and every decoder terminates.

Steps ``t = 1, 2, ...`` count continuation tokens (ARCHITECTURE.md); the functions take them
along dim -2 of the logits ``[..., T, V]``. Chapter 1 (01_decoding) uses the vanilla layer,
Chapter 4 (04_self_terminating) ST, Chapter 5 (05_nmst) NMST, Chapter 8 (08_sparse) the entmax
layers; ``_fused_nll`` is the training loss by :mod:`nmst_lib.fused`.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from .._validation import check_eps
from ..entmax import entmax_loss, log_entmax
from ..fused import _fused_nll_forward, _FusedNLL, _non_eos_log_softmax
from .eos_rules import (
    _check_alpha,
    _check_eos_vocab,
    _check_logits,
    _check_steps,
    _nmst_rule,
    _st_rule,
)

__all__ = [  # noqa: RUF022
    "vanilla_log_probs",
    "st_log_probs",
    "nmst_log_probs",
    "entmax_log_probs",
    "nmst_entmax_log_probs",
]

# ----------------------------------------------------------------------------- the shared layer


def _assemble_log_probs(logits: torch.Tensor, eos_id: int, log_p_eos: torch.Tensor, log_keep: torch.Tensor):
    """``out[..., v] = log(1 - p(eos)) + log_softmax_{v' != eos}(z)_v`` and ``out[..., eos] = log p(eos)``.

    The second line of Choi, Cho, Lee (2023), Defs. 5 and 6, computed as written: the non-eos
    log-softmax of one copy of the logits (:func:`nmst_lib.fused.non_eos_log_softmax`, eos
    masked to -inf), shifted by ``log(1 - p(eos))`` in place: one [..., V] tensor in all. The
    log-probabilities a model reports (``forward``, ``step``, :func:`st_log_probs`,
    :func:`nmst_log_probs`) come from here and keep float32's relative precision even for a
    log-probability near 0 next to an eos logit of 1e4 (Chapter 4's check). The training loss
    (:mod:`nmst_lib.fused`) takes the same steps, so it equals ``-out[..., y]`` bit for bit.
    """
    out = _non_eos_log_softmax(logits, eos_id)
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
        return _FusedNLL.apply(logits, targets, eos_id, eos_rule, inplace_backward)
    return _fused_nll_forward(logits, targets, eos_id, eos_rule, (), inplace=False)[0]


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
    Logits are not checked for NaN or ``+inf`` (that would be one more pass over ``[..., T, V]``
    in every training step): NaN propagates to NaN log-probabilities, ``+inf`` among the non-eos
    logits gives NaN too, and the decoders (:mod:`nmst_lib.decoding`) refuse such rows; a
    ``-inf`` non-eos logit is a token of probability zero.
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
    Logits are not checked for NaN or ``+inf`` (that would be one more pass over ``[..., T, V]``
    in every training step): NaN propagates to NaN log-probabilities, ``+inf`` among the non-eos
    logits gives NaN too, and the decoders (:mod:`nmst_lib.decoding`) refuse such rows; a
    ``-inf`` non-eos logit is a token of probability zero.
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

