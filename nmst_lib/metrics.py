"""Metrics of the book: non-termination ratio r_nt(L), its whole curve, lengths, perplexity.

* r_nt(L) (Choi, Cho, Lee 2023, eq. 11; Welleck et al. 2020's r_L, Section 5) estimates
  q(|y| > L), the probability that a decoder's continuation has no eos among its first L
  tokens; one decode to ``max_len`` gives the curve for every L <= max_len (DESIGN.md).
* Perplexity is exp of the mean negative log-likelihood per scored token.

All functions take a :class:`nmst_lib.decoding.Generation` (or anything with its ``tokens``,
``max_len`` and ``eos_id`` fields) and never look at the model. Chapters 2 and 6
(``02_consistency``, ``06_wikitext``).
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from ._validation import check_positive_int

__all__ = [
    "first_eos_steps",
    "non_termination_ratio",
    "rnt_curve",
    "length_histogram",
    "perplexity",
]


def _generation_fields(generation):
    for field in ("tokens", "max_len", "eos_id"):
        if not hasattr(generation, field):
            raise TypeError(f"expected a Generation (with tokens, max_len, eos_id), got {type(generation).__name__}")
    tokens = generation.tokens
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError("generation.tokens must be an integer tensor of shape [B, max_len]")
    max_len = int(generation.max_len)
    if tokens.shape[1] > max_len:
        raise ValueError(f"generation.tokens has {tokens.shape[1]} columns, more than max_len = {max_len}")
    return tokens, max_len, int(generation.eos_id)


def first_eos_steps(generation) -> torch.Tensor:
    """Step (1-based) of the first eos in each row, or ``max_len + 1`` when a row has none.

    With DESIGN.md's steps (t = 1 is the first generated token), a row "has not terminated
    within L" exactly when its value is > L; this is the quantity behind r_nt(L)
    (Choi et al. 2023, eq. 11). Read from ``generation.tokens`` (PAD = -1 after the end).
    Returns a LongTensor [B] on the tokens' device (Chapter 2, ``02_consistency``).
    """
    tokens, max_len, eos_id = _generation_fields(generation)
    is_eos = tokens == eos_id
    has_eos = is_eos.any(dim=1)
    first = is_eos.long().argmax(dim=1) + 1  # argmax returns the first maximum
    return torch.where(has_eos, first, torch.full_like(first, max_len + 1))


def _check_L(L, max_len: int) -> int:
    if isinstance(L, torch.Tensor) and L.numel() == 1 and not L.is_floating_point():
        L = int(L.item())
    if isinstance(L, bool) or not isinstance(L, numbers.Integral):
        raise TypeError(f"L must be an integer number of steps, got {type(L).__name__}")
    L = int(L)
    if not 1 <= L <= max_len:
        raise ValueError(f"L must satisfy 1 <= L <= max_len = {max_len} (one decode to max_len covers those L), got {L}")
    return L


def non_termination_ratio(generation, L: int) -> float:
    """r_nt(L): the fraction of rows with no eos among their first L generated tokens.

    Choi, Cho, Lee (2023), eq. 11 (r_nt(L) = q(|y| > L)); Welleck et al. (2020), Section 5
    (r_L, the fraction of continuations longer than L). Requires 1 <= L <= generation.max_len,
    since steps beyond max_len were not decoded (Chapter 2, ``02_consistency``).
    """
    steps = first_eos_steps(generation)
    L = _check_L(L, int(generation.max_len))
    if steps.numel() == 0:
        raise ValueError("the generation has no rows: r_nt(L) is undefined")
    return float((steps > L).double().mean())


def rnt_curve(generation, Ls) -> np.ndarray:
    """r_nt(L) for every L in ``Ls`` from one decode: a float64 numpy array of len(Ls).

    Choi, Cho, Lee (2023), eq. 11 and Figures 2 and 7 (r_nt as a function of L). The first
    eos steps are sorted once and each L is located by ``searchsorted``: the number of rows
    terminated within L is the number of first-eos steps <= L (Chapters 2 and 6).
    Every L must satisfy 1 <= L <= generation.max_len.
    """
    steps = first_eos_steps(generation)
    max_len = int(generation.max_len)
    if steps.numel() == 0:
        raise ValueError("the generation has no rows: r_nt(L) is undefined")
    Ls = _check_Ls(Ls, max_len)
    ordered = torch.sort(steps.cpu()).values
    terminated_within = torch.searchsorted(ordered, torch.as_tensor(Ls, dtype=ordered.dtype), right=True)
    return 1.0 - terminated_within.double().numpy() / steps.numel()


def _check_Ls(Ls, max_len: int) -> np.ndarray:
    if isinstance(Ls, torch.Tensor):
        Ls = Ls.detach().cpu().numpy()
    arr = np.asarray(list(Ls) if not isinstance(Ls, np.ndarray) else Ls)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("Ls must be a non-empty 1-D sequence of integers")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"Ls must hold integers, got dtype {arr.dtype}")
    if arr.min() < 1 or arr.max() > max_len:
        raise ValueError(f"every L must satisfy 1 <= L <= max_len = {max_len}, got range [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)


def length_histogram(generation) -> np.ndarray:
    """Counts of continuation lengths: ``hist[l]`` = rows whose first eos is at step l.

    Index l runs over 0..max_len + 1: ``hist[0]`` is always 0 (every continuation has at
    least one token), ``hist[1..max_len]`` counts terminated rows by length (eos included,
    Welleck et al. 2020, Def. 2.1), ``hist[max_len + 1]`` counts rows with no eos within
    max_len. ``hist[L+1:].sum() / B`` is r_nt(L) (Chapters 2 and 6; compare Welleck et al.
    2020, Figure 4).
    """
    steps = first_eos_steps(generation)
    max_len = int(generation.max_len)
    return torch.bincount(steps.cpu(), minlength=max_len + 2).numpy()


def perplexity(log_probs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> float:
    """exp(-sum(mask * log p(target)) / sum(mask)): per-token perplexity of scored positions.

    The perplexity of Choi, Cho, Lee (2023), Section 4 and Welleck et al. (2020), Tables 3-4,
    normalised by the number of scored tokens, the usual per-token convention (the formula as
    printed in Choi et al. divides the summed log-likelihood by the number of sequences N).
    ``log_probs`` [..., V] (any float dtype; -inf at impossible tokens is fine), ``targets``
    [...] integer ids, ``mask`` [...] bool (True = scored; e.g. continuation tokens and
    eos, never the context). Accumulated in float64. Chapters 4-6.
    """
    if not isinstance(log_probs, torch.Tensor) or not log_probs.is_floating_point() or log_probs.dim() < 1:
        raise TypeError("log_probs must be a floating-point tensor of shape [..., V]")
    if not isinstance(targets, torch.Tensor) or targets.is_floating_point() or targets.dtype == torch.bool:
        raise TypeError("targets must be an integer tensor of token ids")
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError("mask must be a bool tensor (True = position is scored)")
    if targets.shape != log_probs.shape[:-1] or mask.shape != targets.shape:
        raise ValueError(
            f"shapes must be log_probs [..., V], targets [...], mask [...]; got {tuple(log_probs.shape)}, "
            f"{tuple(targets.shape)}, {tuple(mask.shape)}"
        )
    n = int(mask.sum())
    if n == 0:
        raise ValueError("mask selects no position: perplexity is undefined")
    vocab = log_probs.shape[-1]
    scored = targets[mask]
    if int(scored.min()) < 0 or int(scored.max()) >= vocab:
        raise ValueError(f"targets at scored positions must be token ids in [0, {vocab})")
    safe = torch.where(mask, targets, torch.zeros_like(targets)).to(log_probs.device)
    # A metric, not a loss: no graph is kept (float() of a grad-requiring tensor warns).
    target_lp = log_probs.detach().gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    target_lp = target_lp[mask.to(log_probs.device)].double()
    return float(torch.exp(-target_lp.sum() / n))
