"""Metrics of the book: non-termination ratio r_nt(L), its whole curve, lengths, perplexity.

* r_nt(L) (Choi, Cho, Lee 2023, eq. 11) estimates
  q(|y| > L), the probability that a decoder run with step limit L returns a continuation
  without eos. One decode to ``max_len`` gives the curve for every L <= max_len (DESIGN.md,
  "Canonical definitions"): for token-level decoders (greedy, sampling) through each row's
  first eos, for beam search (Welleck et al. 2020, Def. A.2) through each row's first
  *finished hypothesis* (``Generation.first_finish_steps``), NOT the length of the
  sequence it returned: with limit L beam search returns the best hypothesis finished by
  step L, while the run to ``max_len`` may return a later, better-scoring one
  (:func:`termination_steps`).
* Perplexity is exp of the mean negative log-likelihood per scored token.

All functions take a :class:`nmst_lib.decoding.Generation` (or anything with its ``tokens``,
``max_len`` and ``eos_id`` fields, and optionally ``method`` and ``first_finish_steps``) and
never look at the model. Chapters 2 and 6 (``02_consistency``, ``06_wikitext``).
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from ._validation import check_positive_int

__all__ = [
    "first_eos_steps",
    "termination_steps",
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

    Read from ``generation.tokens`` (PAD = -1 after the end): the length (eos included,
    Welleck et al. 2020, Def. 2.1) of each *returned* continuation. For token-level decoders
    (greedy, sampling) a row "has not terminated within L" exactly when its value is > L, the
    quantity behind r_nt(L) (Choi et al. 2023, eq. 11). For beam search it is only the
    returned sequence's length: the run with a smaller limit L may terminate although this is
    > L (a hypothesis finished earlier; see :func:`termination_steps`, which r_nt uses).
    Returns a LongTensor [B] on the tokens' device (Chapter 2, ``02_consistency``).
    """
    tokens, max_len, eos_id = _generation_fields(generation)
    is_eos = tokens == eos_id
    has_eos = is_eos.any(dim=1)
    first = is_eos.long().argmax(dim=1) + 1  # argmax returns the first maximum
    return torch.where(has_eos, first, torch.full_like(first, max_len + 1))


def termination_steps(generation) -> torch.Tensor:
    """Per row, the smallest step limit L under which the decoder terminates: a LongTensor [B]
    with values in 1..max_len, and ``max_len + 1`` for rows that do not terminate within
    ``max_len``. r_nt(L) is the fraction of rows whose value is > L (Choi, Cho, Lee 2023,
    eq. 11; Chapters 2 and 6, ``02_consistency``, ``06_wikitext``).

    It is ``generation.first_finish_steps`` when present (every :func:`nmst_lib.decoding.decode`
    fills it): for beam search (Welleck et al. 2020, Def. A.2) the first step at which any
    hypothesis finished, since the beam is the same up to step L whatever the limit >= L and
    the run limited to L returns a finished sequence iff one finished by step L; for
    token-level decoders their first eos. Without the field it falls back to
    :func:`first_eos_steps` of the tokens, except for ``method == "beam"``, where the
    returned lengths overstate r_nt(L) for L < max_len: that raises ``ValueError``.
    """
    tokens, max_len, _ = _generation_fields(generation)
    steps = getattr(generation, "first_finish_steps", None)
    if steps is None:
        if getattr(generation, "method", None) == "beam":
            raise ValueError(
                "a beam-search Generation needs first_finish_steps (the first step at which any hypothesis "
                "finished; decode() fills it): the returned lengths give r_nt(L) only at L = max_len")
        return first_eos_steps(generation)
    if not isinstance(steps, torch.Tensor) or steps.is_floating_point() or steps.is_complex() \
            or steps.dtype == torch.bool:
        raise TypeError(f"generation.first_finish_steps must be an integer tensor [B] (or None), "
                        f"got {type(steps).__name__ if not isinstance(steps, torch.Tensor) else steps.dtype}")
    if steps.shape != (tokens.shape[0],):
        raise ValueError(f"generation.first_finish_steps must have shape [B] = ({tokens.shape[0]},), "
                         f"got {tuple(steps.shape)}")
    if steps.numel() and (int(steps.min()) < 1 or int(steps.max()) > max_len + 1):
        raise ValueError(f"generation.first_finish_steps must hold steps in 1..max_len = {max_len}, or "
                         f"max_len + 1 = {max_len + 1} for 'never'; got range [{int(steps.min())}, {int(steps.max())}]")
    return steps.long()


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
    """r_nt(L): the fraction of rows that the decoder, run with step limit L, does not terminate.

    Choi, Cho, Lee (2023), eq. 11 (r_nt(L) = q(|y| > L)). Welleck et al. (2020), Section 5,
    count |y| >= L instead: their r_L equals r_nt(L - 1). For token-level decoders: rows with no
    eos among their first L tokens; for beam search: rows where no hypothesis finished by
    step L, which can differ from the returned length (:func:`termination_steps`). Requires
    1 <= L <= generation.max_len, since steps beyond max_len were not decoded (Chapter 2,
    ``02_consistency``; Chapter 6, ``06_wikitext``).
    """
    steps = termination_steps(generation)
    L = _check_L(L, int(generation.max_len))
    if steps.numel() == 0:
        raise ValueError("the generation has no rows: r_nt(L) is undefined")
    return float((steps > L).double().mean())


def rnt_curve(generation, Ls) -> np.ndarray:
    """r_nt(L) for every L in ``Ls`` from one decode: a float64 numpy array of len(Ls).

    Choi, Cho, Lee (2023), eq. 11 and Figures 2 and 7 (r_nt as a function of L). The
    termination steps (:func:`termination_steps`: first eos for token-level decoders, first
    finished hypothesis for beam search, Welleck et al. 2020, Def. A.2) are sorted once and
    each L is located by ``searchsorted``: the number of rows terminated within L is the
    number of steps <= L. So ``rnt_curve(decode(..., max_len=L_max), Ls)`` equals
    ``non_termination_ratio(decode(..., max_len=L), L)`` for every L in ``Ls``, beam search
    included (Chapters 2 and 6, ``02_consistency``, ``06_wikitext``).
    Every L must satisfy 1 <= L <= generation.max_len.
    """
    steps = termination_steps(generation)
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
    """Counts of returned continuation lengths: ``hist[l]`` = rows whose first eos is at step l.

    Index l runs over 0..max_len + 1: ``hist[0]`` is always 0 (every continuation has at
    least one token), ``hist[1..max_len]`` counts terminated rows by length (eos included,
    Welleck et al. 2020, Def. 2.1), ``hist[max_len + 1]`` counts rows with no eos within
    max_len (Chapters 2 and 6, ``02_consistency``, ``06_wikitext``; compare Welleck et al.
    2020, Figure 4). For token-level decoders ``hist[L+1:].sum() / B`` is r_nt(L) for every
    L <= max_len. For beam search these are the lengths of the sequences returned with limit
    ``max_len``: ``hist[max_len + 1] / B`` is r_nt(max_len), but for smaller L the tail
    overstates r_nt(L) (the run with limit L may return an earlier-finished hypothesis);
    use :func:`rnt_curve`.
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
