"""The fused ST / NMST training loss as it was up to main at 59e01b6 (session 22), kept for
``bench_heads.py`` to time "before" and "after" in one run: the log-softmax over ALL the logits,
shifted per row by ``log(1 - softmax(z)_eos)``, with the rows where eos holds more than half of
the full softmax's mass recomputed exactly (most rows of a trained ST model). A verbatim copy of
that commit's ``nmst_lib/fused.py`` from ``SplitLogSoftmax`` to ``FusedNLL`` (without
``assemble_log_probs``), used the way ``nmst_lib.heads`` used it (``FusedNLL.apply`` on a head's
teacher-forcing rule). Not part of the library."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

_LOG_HALF = -math.log(2.0)


class SplitLogSoftmax(NamedTuple):
    """The log-softmax over all logits, and how to turn it into the layer's log-probabilities.

    ``lp[..., V]``: ``log softmax(z)`` (the full one, eos included). ``shift[...]``: added to
    ``lp`` gives the layer's non-eos log-probabilities. ``neg_r[...]``: ``-log(1 - softmax(z)_eos)``
    (so that ``q_v = softmax(z)_v exp(neg_r)``). ``rows``: flat indices of the rows computed
    exactly instead (eos holds more than half the mass there); ``exact_lq[len(rows), V]``: their
    ``log q`` (non-eos log-softmax, ``-inf`` at eos). ``shift`` and ``neg_r`` are meaningless on
    those rows."""

    lp: torch.Tensor
    shift: torch.Tensor
    neg_r: torch.Tensor
    rows: torch.Tensor
    exact_lq: torch.Tensor


def _log_softmax(logits: torch.Tensor, inplace: bool) -> torch.Tensor:
    if inplace and logits.is_contiguous() and logits.device.type in ("cpu", "cuda"):
        # the CPU and CUDA kernels read a whole row (max, sum) before writing it
        return torch.log_softmax(logits, dim=-1, out=logits)
    return torch.log_softmax(logits, dim=-1)


def split_log_softmax(logits: torch.Tensor, eos_id: int, log_keep: torch.Tensor, inplace: bool = False,
                      row_logits=None) -> SplitLogSoftmax:
    """One log-softmax pass over ``logits[..., V]`` and the per-row terms that turn it into an
    ST / NMST layer with ``log(1 - p(eos)) = log_keep`` (module docstring).

    ``inplace``: the logits (contiguous, owned by the caller, no longer needed) become ``lp``;
    then ``row_logits(flat_rows)`` must return the original logits of those rows
    (``[len(flat_rows), V]``), for the rows recomputed exactly. Without ``inplace`` they are
    read from ``logits``."""
    V = logits.shape[-1]
    if row_logits is None:
        if inplace:
            raise ValueError("split_log_softmax(inplace=True) needs row_logits to recompute eos-dominated rows")
        def row_logits(rows):  # only called when some row is eos-dominated
            return logits.reshape(-1, V)[rows]
    lp = _log_softmax(logits, inplace)
    lp_eos = lp[..., eos_id]
    dominated = lp_eos > _LOG_HALF  # softmax(z)_eos > 1/2
    # r = log(1 - softmax_eos) in [-log 2, 0] on the other rows; a harmless -1 stands in on dominated rows
    neg_r = torch.log1p(-torch.exp(torch.where(dominated, -1.0, lp_eos))).neg_()
    shift = log_keep + neg_r
    rows = dominated.reshape(-1).nonzero().squeeze(1)
    if rows.numel():
        z = row_logits(rows).to(dtype=lp.dtype, copy=True)
        z[:, eos_id] = -math.inf
        exact_lq = torch.log_softmax(z, dim=-1)
    else:
        exact_lq = lp.new_empty((0, V))
    return SplitLogSoftmax(lp, shift, neg_r, rows, exact_lq)


def fused_nll_forward(logits, targets, eos_id, eos_rule, rule_inputs, inplace: bool, row_logits=None):
    """``-log p(y_t)`` per position and what the backward needs.

    ``eos_id is None``: the vanilla layer (``-log softmax(z)_y``). Otherwise the eos rule
    ``eos_rule(eos_logits, *rule_inputs) -> (log p(eos), log(1 - p(eos)))`` of ST or NMST.
    Equal bit for bit to ``-(layer log-probabilities)[y]`` as :func:`assemble_log_probs` forms them.
    Returns ``(losses, saved)``; ``saved`` is a tuple of tensors for :func:`fused_nll_backward`."""
    index = targets.unsqueeze(-1)
    if eos_id is None:
        lp = _log_softmax(logits, inplace)
        return -lp.gather(-1, index).squeeze(-1), (lp,)
    eos_logits = logits[..., eos_id].clone()  # before an in-place log-softmax overwrites it
    log_p_eos, log_keep = eos_rule(eos_logits, *rule_inputs)
    split = split_log_softmax(logits, eos_id, log_keep, inplace, row_logits)
    log_p_y = split.lp.gather(-1, index).squeeze(-1).add_(split.shift)
    if split.rows.numel():
        flat = log_p_y.view(-1)
        exact = split.exact_lq.gather(1, targets.reshape(-1)[split.rows].unsqueeze(1)).squeeze(1)
        flat[split.rows] = exact + log_keep.reshape(-1)[split.rows]
    losses = torch.where(targets == eos_id, -log_p_eos, -log_p_y)
    return losses, (split.lp, split.neg_r, split.rows, split.exact_lq, eos_logits)


def fused_nll_backward(saved, targets, eos_id, eos_rule, rule_inputs, grad_losses, need_logits: bool, need_rule,
                       inplace: bool = True):
    """Gradient of ``sum_t g_t (-log p(y_t))`` for the logits and for the eos rule's extra inputs
    (module docstring); written into the saved ``lp`` when ``inplace`` (then the graph cannot be
    differentiated twice), else into a new tensor (same passes over [..., V], one tensor more)."""
    index = targets.unsqueeze(-1)
    if eos_id is None:
        (lp,) = saved
        grad = lp.exp_() if inplace else lp.exp()  # softmax
        grad.mul_(grad_losses.unsqueeze(-1))
        grad.scatter_add_(-1, index, -grad_losses.unsqueeze(-1))
        return grad, []
    lp, neg_r, rows, exact_lq, eos_logits = saved
    is_eos = targets == eos_id
    zero = torch.zeros((), dtype=grad_losses.dtype, device=grad_losses.device)
    c = torch.where(is_eos, zero, grad_losses)  # the non-eos logits matter only where y != eos
    grad = None
    if need_logits:
        grad = lp.exp_() if inplace else lp.exp()  # softmax(z); times exp(-r) it is q (its eos column is overwritten below)
        grad.mul_((c * neg_r.exp()).unsqueeze(-1))
        grad.scatter_add_(-1, index, -c.unsqueeze(-1))
        if rows.numel():
            flat = grad.view(-1, grad.shape[-1])
            c_rows = c.reshape(-1)[rows].unsqueeze(1)
            exact = exact_lq.exp().mul_(c_rows)
            exact.scatter_add_(1, targets.reshape(-1)[rows].unsqueeze(1), -c_rows)
            flat[rows] = exact
    with torch.enable_grad():
        leaves = [eos_logits.detach().requires_grad_(need_logits)]
        leaves += [x.detach().requires_grad_(need) for x, need in zip(rule_inputs, need_rule)]
        wanted = [leaf for leaf in leaves if leaf.requires_grad]
        log_p_eos, log_keep = eos_rule(*leaves)
        grad_log_p_eos = torch.where(is_eos, -grad_losses, zero)
        grad_log_keep = -c
        grads = iter(torch.autograd.grad((log_p_eos, log_keep), wanted, (grad_log_p_eos, grad_log_keep),
                                         allow_unused=True, materialize_grads=True)) if wanted else iter(())
    if grad is not None:
        grad[..., eos_id] = next(grads)
    return grad, [next(grads) if leaf.requires_grad else None for leaf in leaves[1:]]


class FusedNLL(torch.autograd.Function):
    """``-log p(y_t)`` per position for the vanilla (``eos_id is None``), ST and NMST layers,
    keeping ONE ``[..., V]`` tensor for backward (the full log-softmax). With
    ``inplace_backward`` the backward overwrites it with the gradient of the logits (no new
    ``[..., V]`` tensor; a second backward through the same graph, ``retain_graph=True``, is then
    refused by autograd's in-place check), else it writes a new tensor."""

    @staticmethod
    def forward(ctx, logits, targets, eos_id, eos_rule, inplace_backward, *rule_inputs):
        """Losses ``-log p(y_t)`` per position (:func:`fused_nll_forward`); saves the log-softmax."""
        losses, saved = fused_nll_forward(logits, targets, eos_id, eos_rule, rule_inputs, inplace=False)
        ctx.n_saved = len(saved)
        ctx.save_for_backward(*saved, targets, *rule_inputs)
        ctx.eos_id, ctx.eos_rule, ctx.inplace = eos_id, eos_rule, inplace_backward
        return losses

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_losses):
        """Gradient of the logits (:func:`fused_nll_backward`), in place when asked."""
        tensors = ctx.saved_tensors
        saved, targets, rule_inputs = tensors[:ctx.n_saved], tensors[ctx.n_saved], tensors[ctx.n_saved + 1:]
        grad, rule_grads = fused_nll_backward(saved, targets, ctx.eos_id, ctx.eos_rule, rule_inputs, grad_losses,
                                              ctx.needs_input_grad[0], ctx.needs_input_grad[5:], ctx.inplace)
        return (grad if ctx.needs_input_grad[0] else None), None, None, None, None, *rule_grads


def nll_before(head, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``head.token_losses(logits, targets)`` (an ST or NMST head) by the code above."""
    logits, eos_id, rule = head._teacher_forcing_rule(logits, None)
    return FusedNLL.apply(logits, targets, eos_id, rule, False)  # as token_losses did (heads.log_probs._fused_nll)
