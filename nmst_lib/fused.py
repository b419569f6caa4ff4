"""Fused ST / NMST output layers: log-probabilities and the NLL from ONE log-softmax pass.

The ST and NMST layers (Welleck et al. (2020), Def. 4.3; Choi, Cho, Lee (2023), Defs. 5-6,
eqs. 9-10; Chapters 4 and 5) give eos the probability ``p(eos)`` of their eos rule and every
other token ``v``

    ``log p(v) = log(1 - p(eos)) + log q_v``,   ``q = softmax over the NON-eos logits``.

Written naively, ``log q`` needs a copy of the logits with the eos logit set to ``-inf`` before
the log-softmax: one more pass over ``[B, T, V]`` than the vanilla layer. This module gets
``log q`` from the log-softmax over ALL the logits, ``lp = z - logsumexp(z)``, which the
vanilla layer computes anyway: with ``r = log(1 - softmax(z)_eos) = log1p(-exp(lp_eos))`` (the
log of the non-eos mass of the full softmax), ``log q_v = lp_v - r`` for ``v != eos``, so

    ``log p(v) = lp_v + shift``,   ``shift = log(1 - p(eos)) - r``    (one number per row).

This is exact up to rounding as long as the eos logit does not dominate: ``r`` is in
``[-log 2, 0]`` when ``softmax(z)_eos <= 1/2``, where ``log1p(-exp(.))`` is well conditioned and
``lp_v - r`` loses nothing. Rows where eos holds more than half of the full softmax mass (e.g.
an eos logit of 1e4 next to logits near 0, where ``lp_v`` would carry the absolute rounding
error of 1e4 and ``r`` would underflow) are few; they are recomputed exactly, from their own
logits with eos masked, as before. So every row is as accurate as the two-pass layer.

The NLL ``-log p(y_t)`` (Choi, Cho, Lee (2023), eq. 3) then needs only the gathered entry
``lp_y + shift`` (or ``-log p(eos)`` at eos targets), and its gradient with respect to a
non-eos logit is ``c_t (q_v - [v = y_t])`` with ``c_t = g_t [y_t != eos]``: the saved ``lp`` is
turned in place into ``exp(lp) = softmax(z)`` and scaled by ``c_t exp(-r_t)`` (``q_v = softmax(z)_v
exp(-r)``). The eos column comes from the (small, ``[..., T]``) eos rule, differentiated by
autograd. Forward: one log-softmax over ``[B, T, V]``; backward: ``exp`` and a multiply in
place. That is the vanilla layer's work (log-softmax forward, log-softmax backward), on the
same code path for CPU and CUDA (the exact rows are found with one ``nonzero``, a host
synchronisation per call on CUDA). ``benchmarks/bench_heads.py`` measures it.

Used by :mod:`nmst_lib.heads` for the training loss of every ST and NMST model the experiment
chapters train (Chapters 6-9); the log-probabilities a model reports for decoding and
evaluation come from the heads' two-pass computation, which keeps float32's relative precision
of a log-probability near 0 (Chapter 4's check).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

__all__ = ["SplitLogSoftmax", "split_log_softmax", "assemble_log_probs", "fused_nll_forward", "fused_nll_backward",
           "FusedNLL", "ProjectedFusedNLL"]

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


def assemble_log_probs(split: SplitLogSoftmax, eos_id: int, log_p_eos: torch.Tensor,
                       log_keep: torch.Tensor) -> torch.Tensor:
    """The layer's log-probabilities ``[..., V]``, in the memory of ``split.lp``:
    ``lp + shift`` (exact rows: ``log q + log(1 - p(eos))``), eos column ``log p(eos)``."""
    out = split.lp.add_(split.shift.unsqueeze(-1))
    if split.rows.numel():
        flat = out.view(-1, out.shape[-1])
        flat[split.rows] = split.exact_lq + log_keep.reshape(-1)[split.rows].unsqueeze(-1)
    out[..., eos_id] = log_p_eos
    return out


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


class ProjectedFusedNLL(torch.autograd.Function):
    """:class:`FusedNLL` with the output projection inside: ``logits = hidden @ weight^T`` is
    computed here, turned into the log-softmax IN PLACE (nobody else holds it), saved, and
    overwritten by its own gradient in backward, which then gives ``hidden`` and ``weight``
    their gradients (as ``nn.Linear``'s backward would). So a training step holds one
    ``[..., V]`` float32 tensor from forward to backward, never two (Chapter 7, 07_gpt2).
    Under autocast the projection runs in the autocast dtype, as ``nn.Linear`` would, and is
    upcast to float32 for the head; the backward's two matrix products run in that dtype too.
    The few eos-dominated rows that are recomputed exactly get their logits from the same
    projection of their hidden states."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, eos_id, eos_rule):
        """Losses per position of ``hidden @ weight^T``; saves the log-softmax in the logits' place."""
        logits = torch.nn.functional.linear(hidden, weight)
        ctx.mm_dtype = logits.dtype
        if logits.dtype != torch.float32:
            logits = logits.float()  # the heads compute in float32 (see heads._check_logits)
        flat_hidden = hidden.reshape(-1, hidden.shape[-1])

        def row_logits(rows):  # the same projection, in the same dtype, for a few rows
            mm_dtype = ctx.mm_dtype
            return torch.nn.functional.linear(flat_hidden[rows].to(mm_dtype), weight.to(mm_dtype)).float()

        with torch.autocast(device_type=logits.device.type, enabled=False):
            losses, saved = fused_nll_forward(logits, targets, eos_id, eos_rule, (), inplace=True,
                                              row_logits=row_logits)
        del logits
        ctx.n_saved = len(saved)
        ctx.save_for_backward(hidden, weight, targets, *saved)
        ctx.eos_id, ctx.eos_rule = eos_id, eos_rule
        return losses

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_losses):
        """Gradients of ``hidden`` and ``weight`` through the saved log-softmax, overwritten in place."""
        hidden, weight, targets, *saved = ctx.saved_tensors
        grad, _ = fused_nll_backward(tuple(saved), targets, ctx.eos_id, ctx.eos_rule, (), grad_losses.float(),
                                     True, [])
        del saved
        if ctx.mm_dtype != grad.dtype:
            grad = grad.to(ctx.mm_dtype)
        grad_hidden = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_hidden = grad.matmul(weight.to(grad.dtype)).to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            flat = grad.reshape(-1, grad.shape[-1])
            grad_weight = flat.t().mm(hidden.reshape(-1, hidden.shape[-1]).to(grad.dtype)).to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None
