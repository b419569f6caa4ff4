"""The ST / NMST layers as they were before the fusion (main at 6289c36), kept for
``bench_heads.py`` to time "before" and "after" in one run. A verbatim copy of that commit's
``_assemble_log_probs`` and ``_EosSplitLogSoftmax`` (two passes over [B, T, V]: a copy of the
logits with eos masked, its log-softmax, a shift), used the way its ``token_losses`` used them
(log-probabilities, then the target's entry). Not part of the library."""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from nmst_lib.heads.eos_rules import _nmst_rule, _st_rule


def _assemble_log_probs(logits: torch.Tensor, eos_id: int, log_p_eos: torch.Tensor, log_keep: torch.Tensor,
                        inplace: bool = False):
    """``out[..., v] = log(1 - p(eos)) + log_softmax_{v' != eos}(z)_v`` and ``out[..., eos] = log p(eos)``.

    The second line of Choi, Cho, Lee (2023), Defs. 5 and 6. One copy of the logits (with the
    eos logit set to -inf) is turned into the non-eos log-softmax in place, shifted by
    ``log(1 - p(eos))`` in place, and its eos column set: one [..., V] tensor in all. With
    ``inplace`` (contiguous logits the caller owns and no longer needs) the logits themselves
    become the output, with the same numbers.
    """
    out = logits if inplace and logits.is_contiguous() else logits.clone(memory_format=torch.contiguous_format)
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


def st_nll_before(logits, targets, eos_id, eps):
    """ST's ``-log p(y_t)`` per position, the pre-fusion way (steps t = 1..T along dim -2)."""
    log1m_eps = math.log1p(-eps)
    out = _EosSplitLogSoftmax.apply(logits, eos_id, lambda z: _st_rule(z, log1m_eps))
    return -out.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def nmst_nll_before(logits, targets, eos_id, eps):
    """NMST's ``-log p(y_t)`` per position, the pre-fusion way (steps t = 1..T along dim -2)."""
    log1m_eps = math.log1p(-eps)
    t = torch.arange(1, logits.shape[-2] + 1, device=logits.device)
    out = _EosSplitLogSoftmax.apply(logits, eos_id, lambda z: _nmst_rule(z, log1m_eps, t))
    return -out.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
