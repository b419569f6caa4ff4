"""Fused ST / NMST output layers: the NLL and its gradient from ONE log-softmax pass.

The ST and NMST layers (Welleck et al. (2020), Def. 4.3; Choi, Cho, Lee (2023), Defs. 5-6,
eqs. 9-10; Chapters 4 and 5) give eos the probability ``p(eos)`` of their eos rule and every
other token ``v``

    ``log p(v) = log(1 - p(eos)) + log q_v``,   ``q = softmax over the NON-eos logits``.

``log q`` is the log-softmax of the logits with the eos logit set to ``-inf``
(:func:`non_eos_log_softmax`): exact on every row, whatever the eos logit, since the eos logit
never enters it. The eos logit itself only feeds the small (``[..., T]``) eos rule, which is read
(and cloned) before the mask is written. Where the logits are ours (the projection of
:func:`nmst_lib.heads.projected_nll_token_losses` computes them inside) the mask and the log-softmax are written in
place; otherwise into one copy (the tensor an out-of-place log-softmax would allocate; writing
it is one more pass). These are the steps the heads' own log-probabilities take, so the loss is
``-log p(y_t)`` of :meth:`nmst_lib.heads.OutputHead.forward` bit for bit.

The NLL ``-log p(y_t)`` (Choi, Cho, Lee (2023), eq. 3) then needs only the gathered entry
``log q_y + log(1 - p(eos))`` (or ``-log p(eos)`` at eos targets), and its gradient with respect
to a non-eos logit is ``c_t (q_v - [v = y_t])`` with ``c_t = g_t [y_t != eos]``: the saved
``log q`` is turned in place into ``q = exp(log q)`` (0 in the eos column) and scaled by ``c_t``.
The eos column comes from the eos rule, differentiated by autograd. Forward: one log-softmax over
``[B, T, V]``; backward: ``exp`` and a multiply in place. That is the vanilla layer's work
(log-softmax forward, log-softmax backward), on the same code path for CPU and CUDA.

An earlier version (up to session 22) took the log-softmax over ALL the logits and shifted it
by ``log(1 - softmax(z)_eos)`` per row, recomputing exactly the rows where eos held more than
half of the full softmax's mass. A trained ST model keeps its eos logit large, so that
``prod_s (1 - eps) sigma(z_eos)`` stays near 1: after one epoch eos held that mass on 85 % of the
positions of 1,024 validation tokens for Chapter 7's ST GPT-2 (0 % for its NMST twin), and the
recomputation ran on nearly every row. ``benchmarks/bench_heads.py`` (32 x 35 x 33,278 float32
logits, one thread, one run each) measured the shifted loss at 2.33 times the vanilla layer's
time where every row is eos-dominated and the masked one at 0.74 times; on random logits, where
none is, the masked loss costs 0.80 times the vanilla layer's against the shift's 0.71 (the copy
the mask is written into). Used by :mod:`nmst_lib.heads` for the training loss of every ST and NMST
model the experiment chapters train (Chapters 6-9); the log-probabilities a model reports for
decoding and evaluation come from the heads' own computation (Chapter 4's check).

Public here is :func:`non_eos_log_softmax`, which checks its arguments. The loss itself is
reached through the checked functions of :mod:`nmst_lib.heads`:
:func:`nmst_lib.heads.nll_token_losses` (given logits) and
:func:`nmst_lib.heads.projected_nll_token_losses` (the projection inside, Chapter 7). The
pieces they call (``_fused_nll_forward``, ``_fused_nll_backward`` and the autograd functions
``_FusedNLL`` and ``_ProjectedFusedNLL``) are private: they take the heads' already checked
tensors and eos rules and check nothing, so that a training step pays for no check twice.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from ._validation import check_index

__all__ = ["non_eos_log_softmax"]


def _log_softmax(logits: torch.Tensor, inplace: bool) -> torch.Tensor:
    if inplace and logits.is_contiguous() and logits.device.type in ("cpu", "cuda"):
        # the CPU and CUDA kernels read a whole row (max, sum) before writing it
        return torch.log_softmax(logits, dim=-1, out=logits)
    return torch.log_softmax(logits, dim=-1)


def non_eos_log_softmax(logits: torch.Tensor, eos_id: int, inplace: bool = False) -> torch.Tensor:
    """``log q``: the log-softmax of ``logits[..., V]`` over the non-eos tokens, ``-inf`` in the
    eos column.

    ``q = softmax_{v != eos}(z)`` is how the ST and NMST layers share ``1 - p(eos)`` among the
    other tokens, ``p(v) = (1 - p(eos)) q_v`` (Welleck et al. (2020), Def. 4.3; Choi, Cho, Lee
    (2023), Defs. 5-6, eqs. 9-10; Chapter 4, ``04_self_terminating``, and Chapter 5,
    ``05_nmst``). ``logits``: a floating-point tensor ``[..., V]`` with ``V >= 2`` (at least one
    non-eos token); ``eos_id`` an integer id in ``[0, V)``. ``inplace``: the logits (owned by the
    caller, no longer needed, their eos column read already) become ``log q``; otherwise one
    copy does. Exact on every row, whatever the eos logit (1e4 included): the eos logit never
    enters the sum. Logits are not checked for NaN or ``+inf`` (they propagate, as in the heads).
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        got = logits.dtype if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise TypeError(f"logits must be a floating-point torch.Tensor [..., V], got {got}")
    if logits.dim() < 1 or logits.shape[-1] < 2:
        raise ValueError(f"logits must have a last (vocabulary) dim of size >= 2: eos and at least one other "
                         f"token, got shape {tuple(logits.shape)}")
    eos_id = check_index(eos_id, logits.shape[-1], "eos_id")
    if not isinstance(inplace, bool):
        raise TypeError(f"inplace must be True or False, got {type(inplace).__name__}")
    return _non_eos_log_softmax(logits, eos_id, inplace)


def _non_eos_log_softmax(logits: torch.Tensor, eos_id: int, inplace: bool = False) -> torch.Tensor:
    """:func:`non_eos_log_softmax` without the checks (the heads' path, arguments checked there)."""
    z = logits if inplace and logits.is_contiguous() else logits.clone(memory_format=torch.contiguous_format)
    z[..., eos_id] = -math.inf
    return _log_softmax(z, inplace=True)


def _fused_nll_forward(logits, targets, eos_id, eos_rule, rule_inputs, inplace: bool):
    """``-log p(y_t)`` per position (Choi, Cho, Lee (2023), eq. 3, with the layer of Defs. 5-6 or
    Def. 1; Chapters 4-7) and what the backward needs. Unchecked: the heads check the logits,
    the targets and the eos id (:func:`nmst_lib.heads.nll_token_losses`).

    ``eos_id is None``: the vanilla layer (``-log softmax(z)_y``). Otherwise the eos rule
    ``eos_rule(eos_logits, *rule_inputs) -> (log p(eos), log(1 - p(eos)))`` of ST or NMST and
    ``log q`` (:func:`non_eos_log_softmax`). ``inplace``: the logits become the saved tensor.
    Returns ``(losses, saved)``; ``saved`` is a tuple of tensors for ``_fused_nll_backward``."""
    index = targets.unsqueeze(-1)
    if eos_id is None:
        lp = _log_softmax(logits, inplace)
        return -lp.gather(-1, index).squeeze(-1), (lp,)
    eos_logits = logits[..., eos_id].clone()  # before the mask overwrites it (in place)
    log_p_eos, log_keep = eos_rule(eos_logits, *rule_inputs)
    log_q = _non_eos_log_softmax(logits, eos_id, inplace)
    is_eos = targets == eos_id
    # an eos target gathers -inf from the masked column: replaced by -log p(eos)
    log_p_y = log_q.gather(-1, index).squeeze(-1).add_(log_keep)
    return torch.where(is_eos, -log_p_eos, -log_p_y), (log_q, eos_logits)


def _fused_nll_backward(saved, targets, eos_id, eos_rule, rule_inputs, grad_losses, need_logits: bool, need_rule,
                        inplace: bool = True):
    """Gradient of ``sum_t g_t (-log p(y_t))`` for the logits and for the eos rule's extra inputs:
    ``c_t (q_v - [v = y_t])`` for a non-eos logit, ``c_t = g_t [y_t != eos]`` (module docstring;
    Choi, Cho, Lee (2023), eq. 3 and Defs. 5-6; Chapters 4-7); written into the saved tensor when
    ``inplace`` (then the graph cannot be differentiated twice), else into a new tensor (same
    passes over [..., V], one tensor more). Unchecked, as ``_fused_nll_forward``."""
    index = targets.unsqueeze(-1)
    if eos_id is None:
        (lp,) = saved
        grad = lp.exp_() if inplace else lp.exp()  # softmax
        grad.mul_(grad_losses.unsqueeze(-1))
        grad.scatter_add_(-1, index, -grad_losses.unsqueeze(-1))
        return grad, []
    log_q, eos_logits = saved
    is_eos = targets == eos_id
    zero = torch.zeros((), dtype=grad_losses.dtype, device=grad_losses.device)
    c = torch.where(is_eos, zero, grad_losses)  # the non-eos logits matter only where y != eos
    grad = None
    if need_logits:
        grad = log_q.exp_() if inplace else log_q.exp()  # q (0 in the eos column, overwritten below)
        grad.mul_(c.unsqueeze(-1))
        grad.scatter_add_(-1, index, -c.unsqueeze(-1))
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


class _FusedNLL(torch.autograd.Function):
    """``-log p(y_t)`` per position (Choi, Cho, Lee (2023), eq. 3) for the vanilla (``eos_id is
    None``; Def. 1), ST and NMST layers (Defs. 5-6; Chapters 4-7),
    keeping ONE ``[..., V]`` tensor for backward (the log-softmax, over the non-eos logits for ST
    and NMST). With ``inplace_backward`` the backward overwrites it with the gradient of the
    logits (no new ``[..., V]`` tensor; a second backward through the same graph,
    ``retain_graph=True``, is then refused by autograd's in-place check), else it writes a new
    tensor. Unchecked: reached through :func:`nmst_lib.heads.nll_token_losses`."""

    @staticmethod
    def forward(ctx, logits, targets, eos_id, eos_rule, inplace_backward, *rule_inputs):
        """Losses ``-log p(y_t)`` per position (``_fused_nll_forward``); saves the log-softmax."""
        losses, saved = _fused_nll_forward(logits, targets, eos_id, eos_rule, rule_inputs, inplace=False)
        ctx.n_saved = len(saved)
        ctx.save_for_backward(*saved, targets, *rule_inputs)
        ctx.eos_id, ctx.eos_rule, ctx.inplace = eos_id, eos_rule, inplace_backward
        return losses

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_losses):
        """Gradient of the logits (``_fused_nll_backward``), in place when asked."""
        tensors = ctx.saved_tensors
        saved, targets, rule_inputs = tensors[:ctx.n_saved], tensors[ctx.n_saved], tensors[ctx.n_saved + 1:]
        grad, rule_grads = _fused_nll_backward(saved, targets, ctx.eos_id, ctx.eos_rule, rule_inputs, grad_losses,
                                              ctx.needs_input_grad[0], ctx.needs_input_grad[5:], ctx.inplace)
        return (grad if ctx.needs_input_grad[0] else None), None, None, None, None, *rule_grads


class _ProjectedFusedNLL(torch.autograd.Function):
    """``_FusedNLL`` (Choi, Cho, Lee (2023), eq. 3 and Defs. 1, 5-6) with the output projection inside: ``logits = hidden @ weight^T`` is
    computed here, turned into the log-softmax IN PLACE (nobody else holds it), saved, and
    overwritten by its own gradient in backward, which then gives ``hidden`` and ``weight``
    their gradients (as ``nn.Linear``'s backward would). So a training step holds one
    ``[..., V]`` float32 tensor from forward to backward, never two (Chapter 7, 07_gpt2).
    Under autocast the projection runs in the autocast dtype, as ``nn.Linear`` would, and is
    upcast to float32 for the head; the backward's two matrix products run in that dtype too.
    Unchecked: reached through :func:`nmst_lib.heads.projected_nll_token_losses`."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, eos_id, eos_rule):
        """Losses per position of ``hidden @ weight^T``; saves the log-softmax in the logits' place."""
        logits = torch.nn.functional.linear(hidden, weight)
        ctx.mm_dtype = logits.dtype
        if logits.dtype != torch.float32:
            logits = logits.float()  # the heads compute in float32 (see heads._check_logits)
        with torch.autocast(device_type=logits.device.type, enabled=False):
            losses, saved = _fused_nll_forward(logits, targets, eos_id, eos_rule, (), inplace=True)
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
        grad, _ = _fused_nll_backward(tuple(saved), targets, ctx.eos_id, ctx.eos_rule, (), grad_losses.float(),
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
