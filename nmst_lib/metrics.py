"""Metrics of the book: non-termination ratio r_nt(L), its whole curve, lengths, perplexity.

* r_nt(L) (Choi, Cho, Lee 2023, eq. 11) estimates
  q(|y| > L), the probability that a decoder run with step limit L returns a continuation
  without eos. One decode to ``max_len`` gives the curve for every L <= max_len (ARCHITECTURE.md,
  "Canonical definitions"): for token-level decoders (greedy, sampling) through each row's
  first eos, for beam search (Welleck et al. 2020, Def. A.2) through each row's first
  *finished hypothesis* (``Generation.first_finish_steps``), NOT the length of the
  sequence it returned: with limit L beam search returns the best hypothesis finished by
  step L, while the run to ``max_len`` may return a later, better-scoring one
  (:func:`termination_steps`).
* Perplexity is exp of the mean negative log-likelihood per scored token.

All functions take a :class:`nmst_lib.decoding.Generation` (or anything with its ``tokens``,
``max_len`` and ``eos_id`` fields, and optionally ``method`` and ``first_finish_steps``) and
never look at the model. Chapter 2 (``02_consistency``) defines r_nt(L); Chapters 2-5 measure
it on their small models, and the experiments of Chapters 6-9 on trained ones (through
:mod:`nmst_lib.experiments`).

Metrics for sparse language models (Martins et al. 2020, Sec. 4 and 5; Chapter 8,
``08_sparse``), which take probabilities or token ids instead of a Generation (except
:func:`distinct_n`, which also accepts one):

* :func:`sparsemax_score` (eq. 10) and :func:`js_divergence` (eq. 11, closed form of App. D):
  per position, bounded, finite when the reference word gets probability 0;
* :func:`epsilon_perplexity` (eq. 9) with the optimal eps solved exactly (App. A);
* :func:`rep_wrep`: teacher-forced REP/WREP over windows 16/32/128/512 (Sec. 5.1, fn. 6);
* :func:`distinct_n`: distinct n-grams over a corpus of continuations (Sec. 5.2, fn. 10).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from ._validation import check_positive_int, is_integer_tensor

__all__ = [
    "first_eos_steps",
    "termination_steps",
    "non_termination_ratio",
    "rnt_curve",
    "length_histogram",
    "perplexity",
    "sparsemax_score",
    "js_divergence",
    "epsilon_perplexity",
    "rep_wrep",
    "distinct_n",
]


def _generation_fields(generation):
    for field in ("tokens", "max_len", "eos_id"):
        if not hasattr(generation, field):
            raise TypeError(f"expected a Generation (with tokens, max_len, eos_id), got {type(generation).__name__}")
    tokens = generation.tokens
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError("generation.tokens must be an integer tensor of shape [B, max_len]")
    max_len = _integer_field(generation.max_len, "generation.max_len")
    if max_len < 1:
        raise ValueError(f"generation.max_len must be >= 1 (a step limit), got {max_len}")
    if tokens.shape[1] > max_len:
        raise ValueError(f"generation.tokens has {tokens.shape[1]} columns, more than max_len = {max_len}")
    return tokens, max_len, _integer_field(generation.eos_id, "generation.eos_id")


def _integer_field(value, name: str) -> int:
    """An integer field of a Generation (a Python or NumPy integer, or a 0-d integer tensor), as
    ``int``: a float such as 10.7 was silently truncated."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point() \
            and value.dtype != torch.bool:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return int(value)


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
    if tokens.shape[1] == 0:  # no token decoded: no row has an eos
        return torch.full((tokens.shape[0],), max_len + 1, dtype=torch.long, device=tokens.device)
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
    if not is_integer_tensor(steps):
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

    The log-probabilities gathered at the scored targets must be log-probabilities: NaN, or a
    value above 0 (beyond a rounding tolerance of 1e-4; e.g. probabilities or logits passed by
    mistake, which would give a perplexity below 1), raises ``ValueError``.
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
    not_log_probs = ~(target_lp <= _LOG_PROB_TOLERANCE)  # NaN compares False: caught too
    if bool(not_log_probs.any()):
        worst = target_lp[not_log_probs]
        if bool(worst.isnan().any()):
            raise ValueError("log_probs is NaN at a scored target: perplexity needs the model's log-probabilities "
                             "there (finite, or -inf for a token of probability zero)")
        raise ValueError(f"log_probs must be log-probabilities (<= 0) at the scored targets, got {float(worst.max())!r}: "
                         "probabilities or logits instead of log p? (a perplexity below 1 would follow)")
    return float(torch.exp(-target_lp.sum() / n))


_LOG_PROB_TOLERANCE = 1e-4
"""How far above 0 a log-probability may be by rounding in :func:`perplexity` (a log-softmax or
an eos rule is off by a few ulps; probabilities passed by mistake exceed it unless all are tiny)."""


# --------------------------------------------------------------------------- sparse-LM metrics
# Martins, Marinho, Martins (2020), Sec. 4 (eqs. 9-11), App. A-D, Sec. 5.1 fn. 6, Sec. 5.2 fn. 10;
# Chapter 8 (08_sparse).

# How far from 1 a row of probabilities may sum, per dtype (summation error of V rounded terms).
_SUM_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def _check_probs_and_target(probs, target, name: str = "probs"):
    """Validate a distribution tensor [..., V] and target ids [...]; return (probs, target on
    probs' device, the computing dtype). Probabilities must be finite, >= 0 and sum to 1 per row
    within a dtype-dependent tolerance (float64 1e-6, float32 1e-3, half 1e-2, bfloat16 3e-2)."""
    if not isinstance(probs, torch.Tensor) or not probs.is_floating_point():
        raise TypeError(f"{name} must be a floating-point torch.Tensor of shape [..., V] (a probability "
                        f"distribution per position), got {type(probs).__name__ if not isinstance(probs, torch.Tensor) else probs.dtype}")
    if probs.dim() < 1 or probs.shape[-1] < 1:
        raise ValueError(f"{name} must have a non-empty last (vocabulary) dimension, got shape {tuple(probs.shape)}")
    if not is_integer_tensor(target):
        raise TypeError("target must be an integer torch.Tensor of token ids with shape probs.shape[:-1]")
    if target.shape != probs.shape[:-1]:
        raise ValueError(f"target must have shape probs.shape[:-1] = {tuple(probs.shape[:-1])}, got {tuple(target.shape)}")
    vocab = probs.shape[-1]
    if target.numel() and (int(target.min()) < 0 or int(target.max()) >= vocab):
        raise ValueError(f"target must hold token ids in [0, {vocab}), got range [{int(target.min())}, {int(target.max())}]")
    probs = probs.detach()
    compute = probs.dtype if probs.dtype in (torch.float32, torch.float64) else torch.float32
    if probs.numel():
        if not bool(torch.isfinite(probs).all()):
            raise ValueError(f"{name} must be finite (probabilities, not logits or log-probabilities)")
        if float(probs.min()) < 0:
            raise ValueError(f"{name} must be >= 0 (probabilities, not logits or log-probabilities); min is {float(probs.min())!r}")
        sums = probs.sum(dim=-1, dtype=compute)
        tol = _SUM_TOLERANCE.get(probs.dtype, 1e-3)
        worst = float((sums - 1).abs().max()) if sums.numel() else 0.0
        if worst > tol:
            raise ValueError(f"each row of {name} must sum to 1 (a distribution over the vocabulary) within {tol:g} "
                             f"for {probs.dtype}; the worst row is off by {worst:.3g}")
    return probs, target.to(probs.device), compute


def sparsemax_score(probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sparsemax score per position: sp = p_y + (1 - ``||p||^2``) / 2 = p_y + H_2(p) (Martins et al.
    2020, eq. 10; Chapter 8, ``08_sparse``).

    It is 1 minus the smallest sparsemax loss of any score vector whose sparsemax is p, and equals
    1 - ``||p - e_y||^2`` / 2 (App. C, half the squared Patrick-Fischer distance). Bounded
    (App. B): sp = 1 - ``||p - e_y||^2`` / 2 <= 1 with equality iff p = e_y, and sp = p_y + H_2(p) >= 0
    as a sum of two non-negative terms, with equality iff p = e_x for some x != y. For a one-hot
    (greedy) p it is word accuracy; for the uniform p it is 1/V + (1 - 1/V)/2.

    ``probs`` [..., V]: a probability distribution per position (float32/float64; half and
    bfloat16 are computed in float32), any device; ``target`` [...]: integer ids in [0, V).
    Returns shape ``probs.shape[:-1]`` in the computing dtype, on probs' device, without a graph.
    Rows must sum to 1 (see the tolerance in the error message); exact zeros are what it is for.
    """
    probs, target, compute = _check_probs_and_target(probs, target)
    p = probs.to(compute)
    p_y = p.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return p_y + 0.5 * (1.0 - (p * p).sum(dim=-1))


def _js_from_target_prob(p_y: torch.Tensor) -> torch.Tensor:
    """JS(p, e_y) = log 2 + [p_y log p_y - (1 + p_y) log(1 + p_y)] / 2 (nats), evaluated stably.

    Written with q = 1 - p_y (exact for p_y >= 1/2) as
    [q log 2 + p_y log(2 p_y / (1 + p_y)) - log1p(-q / 2)] / 2, where every term is O(q) near
    p_y = 1 (no cancellation against log 2). The middle term is p_y log1p(-q / (1 + p_y)) for
    p_y >= 1/2 (accurate near 1) and xlogy(p_y, 2 p_y / (1 + p_y)) below (0 at p_y = 0, no
    log1p(-1) for tiny p_y).
    """
    q = 1.0 - p_y
    near_one = p_y * torch.log1p(-q / (1.0 + p_y))
    elsewhere = torch.xlogy(p_y, 2.0 * p_y / (1.0 + p_y))
    middle = torch.where(p_y >= 0.5, near_one, elsewhere)
    return 0.5 * (q * math.log(2.0) + middle - torch.log1p(-0.5 * q))


def js_divergence(probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence JS(p, e_y) per position, natural log (Martins et al. 2020,
    eq. 11 with q = e_y, closed form of App. D; Chapter 8, ``08_sparse``).

    With m = (p + e_y)/2: ``KL(p||m)`` = (1 - p_y) log 2 + p_y log(2 p_y / (1 + p_y)) and
    ``KL(e_y||m)`` = log(2 / (1 + p_y)), so

        JS = log 2 + [p_y log p_y - (1 + p_y) log(1 + p_y)] / 2
           = H_b((1 + p_y)/2) - H_b(p_y)/2,

    a function of p_y alone, decreasing from log 2 (p_y = 0, even when p has an exact zero
    there) to 0 (p_y = 1). Evaluated without cancellation near p_y = 1 (see the source).
    ``probs`` [..., V] (rows summing to 1, float32/float64, half/bfloat16 computed in float32),
    ``target`` [...] ids in [0, V); returns shape ``probs.shape[:-1]`` on probs' device.
    """
    probs, target, compute = _check_probs_and_target(probs, target)
    p_y = probs.gather(-1, target.unsqueeze(-1)).squeeze(-1).to(compute)
    return _js_from_target_prob(p_y)


def _as_float64_vector(values, name: str) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        if not values.is_floating_point():
            raise TypeError(f"{name} must hold floating-point probabilities, got dtype {values.dtype}")
        t = values.detach().to(torch.float64).reshape(-1)
    else:
        arr = np.asarray(values)
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"{name} must be a tensor or array of probabilities, got dtype {arr.dtype}")
        t = torch.as_tensor(arr, dtype=torch.float64).reshape(-1)
    if t.numel() == 0:
        raise ValueError(f"{name} is empty: there is no reference word to score")
    if not bool(torch.isfinite(t).all()) or float(t.min()) < 0 or float(t.max()) > 1:
        raise ValueError(f"{name} must hold probabilities in [0, 1] (the model's probability of each reference "
                         f"word), got range [{float(t.min())!r}, {float(t.max())!r}]")
    return t


def _check_eps_value(eps) -> float:
    if isinstance(eps, torch.Tensor):
        if eps.numel() != 1:
            raise ValueError(f"eps must be a single number >= 0, got a tensor of shape {tuple(eps.shape)}")
        eps = eps.item()
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number >= 0 (or None to use the optimal one), got {type(eps).__name__}")
    eps = float(eps)
    if math.isnan(eps) or eps < 0:
        raise ValueError(f"eps must be >= 0 (additive smoothing; math.inf gives the uniform limit), got {eps!r}")
    return eps


def _optimal_lambda(r: torch.Tensor) -> float:
    """argmax over lambda in [0, 1] of f(lambda) = mean log((1 - lambda) r + lambda), r = V p.

    f is concave (log of an affine function), f'(lambda) = mean (1 - r) / ((1 - lambda) r + lambda)
    is non-increasing, f'(0) = mean(1/r) - 1 (+inf if some r = 0), f'(1) = 1 - mean(r). So
    lambda* = 0 if f'(0) <= 0, lambda* = 1 if f'(1) >= 0, and otherwise the root of f' in (0, 1),
    found by Newton steps safeguarded by a bracket (bisection, geometric once the bracket spans
    more than a factor 2) to about machine precision.
    """
    one_minus_r = 1.0 - r
    if bool((r > 0).all()):
        if float((1.0 / r).mean()) - 1.0 <= 0.0:
            return 0.0
    if float(one_minus_r.mean()) >= 0.0:
        return 1.0

    def derivatives(lam: float):
        denom = (1.0 - lam) * r + lam
        ratio = one_minus_r / denom
        return float(ratio.mean()), -float((ratio * ratio).mean())

    lo, hi = 0.0, 1.0           # f'(lo) > 0 > f'(hi)
    lam = 0.5
    for _ in range(5000):
        g, h = derivatives(lam)
        if g == 0.0:
            return lam
        if g > 0:
            lo = lam
        else:
            hi = lam
        if hi - lo <= 4 * math.ulp(hi):
            break
        step = lam - g / h if h < 0 else math.nan
        if abs(step - lam) <= 2 * math.ulp(lam):
            break  # Newton has converged (it may approach from one side: the bracket stays wide)
        if lo < step < hi:
            new = step
        elif lo > 0 and hi > 2 * lo:
            new = math.sqrt(lo * hi)
        else:
            new = 0.5 * (lo + hi)
        if abs(new - lam) <= 2 * math.ulp(lam):
            lam = new
            break
        lam = new
    return lam


def epsilon_perplexity(target_probs, vocab_size: int, eps=None) -> tuple[float, float]:
    """eps-perplexity (Martins et al. 2020, eq. 9; Chapter 8, ``08_sparse``) and the eps used.

        eps-ppl = exp( -mean_t log( (p_t + eps) / (1 + eps V) ) ),

    additive smoothing of the model's probability p_t of each reference word. ``target_probs``:
    those probabilities (tensor of any shape and float dtype, any device, or array-like; all
    entries are scored, in float64), values in [0, 1]; ``vocab_size`` V >= 1.

    ``eps`` given (>= 0): that value. eps = 0 gives plain perplexity (``inf`` if some p_t = 0);
    eps = ``math.inf`` gives the limit V, and so, to rounding, does a finite eps so large that
    eps V overflows float64 (computed as ``log1p(p / eps) - log(V + 1/eps)`` there).

    ``eps=None``: the eps minimising eps-ppl, solved exactly (App. A, without gradient steps).
    With lambda = eps V / (1 + eps V) in [0, 1), (p + eps)/(1 + eps V) = (1 - lambda) p + lambda/V,
    so log eps-ppl = -f(lambda) with f(lambda) = mean_t log((1 - lambda) p_t + lambda / V)
    concave (log of affine). f'(0) = mean 1/(V p_t) - 1 and f'(1) = 1 - V mean p_t:

    * f'(0) <= 0 (all p_t > 0 and well spread): lambda* = 0, eps = 0, plain perplexity;
    * f'(1) >= 0 (mean p_t <= 1/V, e.g. all p_t = 0): f increases up to lambda = 1, the infimum is
      the limit eps -> inf; returned as (V, ``math.inf``) (the uniform distribution's perplexity);
    * otherwise (e.g. some p_t = 0, so f'(0) = +inf): the unique root of f' in (0, 1) by
      safeguarded Newton to machine precision, then eps = lambda / (V (1 - lambda)).

    Returns ``(value, eps)`` as Python floats.
    """
    V = check_positive_int(vocab_size, "vocab_size")
    p = _as_float64_vector(target_probs, "target_probs")
    if eps is not None:
        eps = _check_eps_value(eps)
        if math.isinf(eps):
            return float(V), eps
        if eps == 0.0:
            return float(torch.exp(-torch.log(p).mean())), 0.0
        if math.isinf(eps * V):
            # eps V overflows float64 (eps > 1.8e308 / V): the same value written as
            # log((p + eps) / (1 + eps V)) = log1p(p / eps) - log(V + 1 / eps)
            log_ppl = -(torch.log1p(p / eps).mean() - math.log(V + 1.0 / eps))
            return float(torch.exp(log_ppl)), eps
        log_ppl = -(torch.log(p + eps).mean() - math.log1p(eps * V))
        return float(torch.exp(log_ppl)), eps
    r = p * V
    lam = _optimal_lambda(r)
    if lam >= 1.0:
        return float(V), math.inf
    if lam == 0.0:
        return float(torch.exp(-torch.log(p).mean())), 0.0
    f = torch.log((1.0 - lam) * p + lam / V).mean()
    return float(torch.exp(-f)), lam / (V * (1.0 - lam))


def _check_token_tensor(x, name: str) -> torch.Tensor:
    if not is_integer_tensor(x):
        raise TypeError(f"{name} must be an integer torch.Tensor of token ids with shape [B, T]")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape [B, T], got {tuple(x.shape)}")
    return x.long()


def _check_windows(windows) -> list[int]:
    if isinstance(windows, numbers.Integral) and not isinstance(windows, bool):
        windows = [windows]
    try:
        ws = list(windows)
    except TypeError:
        raise TypeError(f"windows must be a sequence of positive integers, got {type(windows).__name__}") from None
    if not ws:
        raise ValueError("windows must name at least one window size (e.g. (16, 32, 128, 512))")
    ws = [check_positive_int(w, "each window") for w in ws]
    if len(set(ws)) != len(ws):
        raise ValueError(f"windows must be distinct, got {ws}")
    return ws


def rep_wrep(predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None,
             windows=(16, 32, 128, 512)) -> dict:
    """Teacher-forced REP and WREP (Martins et al. 2020, Sec. 5.1 and fn. 6, after Welleck et al.
    2020's rep/l and wrep/l; Chapter 8, ``08_sparse``).

    ``targets[b, t]`` is the ground-truth token at position t of row b and ``predictions[b, t]``
    the token the decoder produced there given the true prefix (a sample, or the argmax). For a
    window w, position t is a *repeat* if predictions[b, t] occurs among the previous w
    ground-truth tokens targets[b, t-w .. t-1] (same row; fewer when t < w); it is a *wrong
    repeat* if it is a repeat and predictions[b, t] != targets[b, t]. Per window:

        rep  = #repeats / #scored positions,    wrep = #wrong repeats / #scored positions,

    pooled over all scored positions of the batch (not averaged per row; for rows of equal
    length with every position scored this is the mean of per-row fractions, the authors'
    ``repeat_at_1`` evaluated block by block). Scored positions are
    ``mask``'s True entries (default: all). The history is every earlier entry of ``targets``,
    scored or not (so a context can be put in front with mask False); negative ids in ``targets``
    (e.g. PAD = -1) never match. Predictions at scored positions must be ids >= 0.

    Returns ``{w: {"rep": float, "wrep": float} for w in windows}`` plus ``"mean"``: the average
    of each over the windows (the numbers in Martins et al.'s tables).

    Complexity: one sort of the 2BT (row, token, position) events, giving for each prediction the
    position of the last earlier occurrence of its token in the row's targets; O(BT log BT) in
    tensor ops, no Python loop over tokens, on the inputs' device.
    """
    predictions = _check_token_tensor(predictions, "predictions")
    targets = _check_token_tensor(targets, "targets")
    if predictions.shape != targets.shape:
        raise ValueError(f"predictions and targets must have the same shape [B, T], got "
                         f"{tuple(predictions.shape)} and {tuple(targets.shape)}")
    ws = _check_windows(windows)
    device = targets.device
    predictions = predictions.to(device)
    if mask is None:
        mask = torch.ones_like(targets, dtype=torch.bool)
    else:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError("mask must be a bool torch.Tensor [B, T] (True = position is scored)")
        if mask.shape != targets.shape:
            raise ValueError(f"mask must have the shape of targets {tuple(targets.shape)}, got {tuple(mask.shape)}")
        mask = mask.to(device)
    n = int(mask.sum())
    if n == 0:
        raise ValueError("no position is scored (empty input or mask all False): REP/WREP are undefined")
    if int(predictions[mask].min()) < 0:
        raise ValueError("predictions at scored positions must be token ids >= 0")

    B, T = targets.shape
    rows = torch.arange(B, device=device).unsqueeze(1).expand(B, T)
    pos = torch.arange(T, device=device).unsqueeze(0).expand(B, T)
    t_keep = targets >= 0
    key_span = int(max(int(targets.max()), int(predictions[mask].max()))) + 1
    # Events: queries (scored predictions, kind 0) and history (targets, kind 1). Ordered by
    # (row, token) group, then position, queries before targets at the same position (a query at
    # t must only see targets at positions < t).
    q_group = rows[mask] * key_span + predictions[mask]
    q_pos = pos[mask]
    h_group = rows[t_keep] * key_span + targets[t_keep]
    h_pos = pos[t_keep]
    group = torch.cat([q_group, h_group])
    time = torch.cat([2 * q_pos, 2 * h_pos + 1])
    order = torch.sort(time, stable=True).indices
    order = order[torch.sort(group[order], stable=True).indices]
    g_sorted, time_sorted = group[order], time[order]
    is_hist = (time_sorted % 2) == 1
    idx = torch.arange(order.numel(), device=device)
    last = torch.cummax(torch.where(is_hist, idx, torch.full_like(idx, -1)), dim=0).values
    found = (last >= 0) & (g_sorted[last.clamp(min=0)] == g_sorted)
    never = max(ws) + 1  # beyond every window
    gap_sorted = torch.where(found, (time_sorted - time_sorted[last.clamp(min=0)]) // 2 + 1,
                             torch.full_like(idx, never))
    # gap = t - j where j is the last earlier target position holding the predicted token:
    # ((2t) - (2j + 1)) // 2 + 1 = t - j.
    gap = torch.empty_like(gap_sorted)
    gap[order] = gap_sorted
    gap = gap[: q_pos.numel()]
    wrong = (predictions[mask] != targets[mask])
    out: dict = {}
    for w in ws:
        repeat = gap <= w
        out[w] = {"rep": float(repeat.sum()) / n, "wrep": float((repeat & wrong).sum()) / n}
    out["mean"] = {k: sum(out[w][k] for w in ws) / len(ws) for k in ("rep", "wrep")}
    return out


def _flat_sequences(sequences, lengths, include_eos: bool):
    """(flat tokens, row id per token) from a Generation, a [B, T] tensor (+ lengths) or lists."""
    if all(hasattr(sequences, f) for f in ("tokens", "lengths", "eos_id")):
        if lengths is not None:
            raise ValueError("lengths must not be given with a Generation (its own lengths are used)")
        tokens = sequences.tokens
        lengths = sequences.lengths.to(tokens.device).long()
        if not include_eos:
            terminated = getattr(sequences, "terminated", None)
            if terminated is None:
                raise TypeError("a Generation needs its terminated field to drop the final eos")
            lengths = lengths - terminated.to(tokens.device).long()
        sequences = tokens
    if isinstance(sequences, torch.Tensor):
        tokens = _check_token_tensor(sequences, "sequences")
        B, T = tokens.shape
        if lengths is None:
            lengths = torch.full((B,), T, dtype=torch.long, device=tokens.device)
        else:
            if not isinstance(lengths, torch.Tensor) or lengths.is_floating_point() or lengths.dtype == torch.bool:
                raise TypeError("lengths must be an integer torch.Tensor [B]")
            lengths = lengths.to(tokens.device).long()
            if lengths.shape != (B,):
                raise ValueError(f"lengths must have shape [B] = ({B},), got {tuple(lengths.shape)}")
            if B and (int(lengths.min()) < 0 or int(lengths.max()) > T):
                raise ValueError(f"lengths must lie in [0, T = {T}]")
        keep = torch.arange(T, device=tokens.device).unsqueeze(0) < lengths.unsqueeze(1)
        row = torch.arange(B, device=tokens.device).unsqueeze(1).expand(B, T)
        return tokens[keep], row[keep]
    if lengths is not None:
        raise ValueError("lengths is only for a [B, T] tensor of token ids")
    if isinstance(sequences, (str, bytes)) or not hasattr(sequences, "__iter__"):
        raise TypeError("sequences must be a list of token-id lists, a [B, T] LongTensor (with lengths) or a Generation")
    seqs = [_token_list(s) if not isinstance(s, torch.Tensor)
            else _check_token_tensor(s.reshape(1, -1), "each sequence").reshape(-1).cpu() for s in sequences]
    if not seqs:
        return torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    sizes = torch.tensor([s.numel() for s in seqs], dtype=torch.long)
    return torch.cat(seqs), torch.repeat_interleave(torch.arange(len(seqs)), sizes)


def _token_list(s) -> torch.Tensor:
    """One sequence given as a list (or array) of token ids, as a LongTensor: integers only (a float
    id such as 1.5 was truncated to 1)."""
    t = torch.as_tensor(s)
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.long)
    if not is_integer_tensor(t):
        raise TypeError(f"each sequence must hold integer token ids, got {t.dtype} values")
    return t.to(torch.long).reshape(-1)


def distinct_n(sequences, n: int, lengths: torch.Tensor | None = None, include_eos: bool = False,
               per: str = "ngrams") -> float:
    """distinct-n of a corpus of generated sequences (Li et al. 2016a; Martins et al. 2020,
    Sec. 5.2 and 5.3, fn. 10; Chapter 8, ``08_sparse``).

    Pooled over the corpus: the number of distinct n-grams among all sequences, divided by

    * ``per="ngrams"`` (default): the total number of n-grams, so the value lies in (0, 1] and is
      1 iff no n-gram repeats anywhere in the corpus;
    * ``per="tokens"``: the total number of tokens, the literal wording of Li et al. (2016a) and
      Martins et al. fn. 10 ("divided by the total number of generated words").

    The two differ only by the factor (#tokens - (n - 1) #sequences) / #tokens. n-grams never
    cross a sequence boundary; a sequence shorter than n contributes no n-gram (but its tokens
    still count for ``per="tokens"``). No n-gram at all (empty corpus, or every sequence shorter
    than n with ``per="ngrams"``) raises ``ValueError``.

    ``sequences``: a list of token-id lists (or 1-D tensors); a [B, T] integer tensor, with
    optional ``lengths`` [B] (row b is ``tokens[b, :lengths[b]]``, default all T); or a
    :class:`nmst_lib.decoding.Generation`, read as ``tokens[b, :lengths[b]]`` without the final
    eos of terminated rows (eos ends a continuation; it is not a word), unless ``include_eos``.
    """
    n = check_positive_int(n, "n")
    if per not in ("ngrams", "tokens"):
        raise ValueError(f"per must be 'ngrams' or 'tokens', got {per!r}")
    flat, row = _flat_sequences(sequences, lengths, include_eos)
    total_tokens = flat.numel()
    m = total_tokens - n + 1
    if m > 0:
        starts = torch.arange(m, device=flat.device)
        grams = flat.unfold(0, n, 1)  # [m, n]
        same_row = row[starts] == row[starts + n - 1]
        grams = grams[same_row]
    else:
        grams = flat.new_empty((0, n))
    if per == "ngrams" and grams.shape[0] == 0:
        raise ValueError(f"the sequences hold no {n}-gram (every sequence is shorter than n = {n}): distinct-{n} is undefined")
    if per == "tokens" and total_tokens == 0:
        raise ValueError("the sequences hold no token: distinct-n is undefined")
    distinct = torch.unique(grams, dim=0).shape[0] if grams.shape[0] else 0
    return distinct / (grams.shape[0] if per == "ngrams" else total_tokens)
