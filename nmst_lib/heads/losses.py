"""The training loss of the vanilla, ST and NMST layers with less memory: ``-log p(y_t)``
(Choi, Cho, Lee (2023), eq. 3) through :mod:`nmst_lib.fused`, holding one ``[..., V]`` tensor.

:func:`nll_token_losses` equals ``head.token_losses`` on given logits;
:func:`projected_nll_token_losses` also computes the logits from the last hidden layer and the
output projection inside, so GPT-2's vocabulary of 50,257 fits (Chapter 7, 07_gpt2;
:meth:`nmst_lib.models.GPT2LM.token_loss`). Other heads, and calls without gradients, go
through ``head.token_losses`` unchanged.
"""

from __future__ import annotations

import torch

from ..fused import _ProjectedFusedNLL
from .eos_rules import _check_logits, _check_targets
from .log_probs import _fused_nll
from .modules import (
    NMSTHead,
    OutputHead,
    STHead,
    VanillaHead,
    _check_context_mask,
)

__all__ = [
    "nll_token_losses",
    "projected_nll_token_losses",
]

def nll_token_losses(head, logits: torch.Tensor, targets: torch.Tensor,
                     context_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``head.token_losses(logits, targets, context_mask)`` with less memory for backward.

    For the vanilla, ST and NMST layers (loss ``-log p(y_t)``, Choi, Cho, Lee (2023) eq. 3) the
    forward values are the same, bit for bit, and the gradient is the same function; autograd
    keeps a single ``[..., V]`` tensor (the log-softmax) and the backward reuses its memory
    instead of allocating a new one (:mod:`nmst_lib.fused`, its ``_FusedNLL`` with ``inplace_backward``;
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
    layers with gradients (:mod:`nmst_lib.fused`, its ``_ProjectedFusedNLL``) the logits are computed inside, become the
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
    return _ProjectedFusedNLL.apply(hidden, weight, targets, eos_id, rule)
