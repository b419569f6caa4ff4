"""Checks of Assignment 1, "Decoding and consistency" (Chapters 1-3: ``01_decoding``,
``02_consistency``, ``03_consistent_sampling``).

Every function raises ``AssertionError`` with a message in the book's terms. ``check_*`` are the
public tests (properties from the theory: what a student runs with ``grader.check``);
``hidden_*`` compare a student's function with ``nmst_lib`` on random and extreme inputs (the
autograder's hidden tests). The problems:

* q1 ``nucleus_candidates(log_probs, mu)``: the nucleus of Definition 1.4 (Chapter 1);
* q2 ``consistent_top_k_log_probs(log_probs, k, eos_id)``: consistent top-k, Definition 3.1 and
  Lemma 3.1 (Chapter 3);
* q4 ``exact_rnt(kernel, eos_id, start_token, Ls)``: r_nt(L) = phi Q^(L-1) 1 of Theorem 2.2,
  item 1 (Chapter 2);
* q5 ``rnt_from_tokens(tokens, eos_id, Ls)`` and the experiment on the inconsistent RNN of
  Theorem 2.1 (Chapter 2) with the consistent decoders of Corollary 3.1 (Chapter 3).

q3 (a proof) and q6 (the experiment's interpretation) are graded by rubric.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from nmst_lib.decoding import (
    Generation,
    nucleus_mask,
    restrict_log_probs,
    top_k_mask,
)
from nmst_lib.markov import (
    decoder_transition_matrix,
    random_markov_lm,
    survival_curve,
)
from nmst_lib.metrics import rnt_curve

from .checks import (
    call_student,
    expect,
    expect_close,
    expect_given,
    expect_tensor_close,
    fmt,
    generator,
)

__all__ = [
    "EXPERIMENT_DECODERS",
    "EXPERIMENT",
    "experiment_rnn",
    "experiment_contexts",
    "check_nucleus_keeps_the_top_token",
    "check_nucleus_is_a_most_probable_set",
    "check_nucleus_mass_reaches_mu",
    "check_nucleus_is_the_smallest_set",
    "hidden_nucleus_matches_library",
    "hidden_nucleus_breaks_ties_by_token_id",
    "hidden_nucleus_extreme_logits_float32",
    "hidden_nucleus_mu_one_keeps_the_support",
    "check_consistent_top_k_candidate_set",
    "check_consistent_top_k_never_lowers_eos",
    "check_consistent_top_k_keeps_ratios",
    "hidden_consistent_top_k_matches_library",
    "hidden_consistent_top_k_ties",
    "hidden_consistent_top_k_extreme_logits_float32",
    "check_exact_rnt_first_step_and_monotone",
    "check_exact_rnt_geometric",
    "check_exact_rnt_trapped_loop",
    "hidden_exact_rnt_matches_library",
    "hidden_exact_rnt_eos_not_last",
    "hidden_exact_rnt_long_horizon",
    "check_rnt_from_tokens_small_example",
    "hidden_rnt_from_tokens_matches_library",
    "check_experiment_follows_the_theory",
    "hidden_experiment_curves_match_generations",
    "hidden_experiment_generations_follow_their_decoders",
    "bounded_state_xi",
]

_NUCLEUS = "the nucleus of Definition 1.4 (Chapter 1)"
_CONSISTENT_TOP_K = "consistent top-k (Definition 3.1, Chapter 3)"


# ----------------------------------------------------------------------------- input helpers


def _random_log_probs(seed: int, rows: int, vocab: int, dtype=torch.float64,
                      temperatures=(0.2, 1.0, 5.0)) -> torch.Tensor:
    """Rows of log-probabilities from softmax(z / T), z ~ N(0, I), T cycling over ``temperatures``
    (peaked, moderate and flat distributions)."""
    g = generator(seed)
    temps = torch.tensor(temperatures, dtype=torch.float64).repeat(rows // len(temperatures) + 1)[:rows]
    logits = torch.randn(rows, vocab, generator=g, dtype=torch.float64) / temps[:, None]
    return torch.log_softmax(logits, dim=-1).to(dtype)


def _check_mu(mu) -> float:
    if isinstance(mu, bool) or not isinstance(mu, (int, float)) or not 0 < mu <= 1:
        raise ValueError(f"mu must be a number in (0, 1], got {mu!r}")
    return float(mu)


def _ambiguous_rows(log_probs: torch.Tensor, mu: float, tol: float) -> torch.Tensor:
    """Rows where a partial sum of the sorted probabilities lies within ``tol`` of ``mu``: there the
    nucleus depends on rounding (nmst_lib.decoding.nucleus_mask says so), so checks skip them."""
    probs = log_probs.double().exp()
    cumulative = torch.sort(probs, dim=-1, descending=True).values.cumsum(dim=-1)
    return ((cumulative - mu).abs() < tol).any(dim=-1)


def _student_mask(fn, log_probs: torch.Tensor, mu: float, name: str) -> torch.Tensor:
    out = call_student(fn, log_probs.clone(), mu, name=name)
    expect(isinstance(out, torch.Tensor),
           f"`{name}` returned a {type(out).__name__}; return a boolean torch.Tensor shaped like log_probs")
    expect(out.dtype == torch.bool,
           f"`{name}` returned a tensor of dtype {out.dtype}; return a boolean mask (dtype torch.bool), "
           "True for the tokens in the candidate set")
    expect(tuple(out.shape) == tuple(log_probs.shape),
           f"`{name}` returned shape {tuple(out.shape)} for log_probs of shape {tuple(log_probs.shape)}: "
           "one True/False per token and row")
    return out.cpu()


# ----------------------------------------------------------------------------- q1: the nucleus

_Q1 = "nucleus_candidates"
_MUS = (0.05, 0.3, 0.75, 0.95)


def _q1_public_inputs():
    """(log_probs, mu) pairs of the public q1 checks: random float64 rows of three shapes."""
    for i, mu in enumerate(_MUS):
        yield _random_log_probs(100 + i, 300, 20), mu


def check_nucleus_keeps_the_top_token(nucleus_candidates) -> None:
    """Every nucleus is non-empty and holds the most probable token (Proposition 1.4, Chapter 1)."""
    for log_probs, mu in _q1_public_inputs():
        mask = _student_mask(nucleus_candidates, log_probs, mu, _Q1)
        empty = ~mask.any(dim=-1)
        if bool(empty.any()):
            r = int(empty.nonzero()[0])
            raise AssertionError(f"row {r} (mu = {mu}) has an empty candidate set; the nucleus always keeps the "
                                 "most probable token, whose preceding mass 0 is below mu (Proposition 1.4, Chapter 1)")
        top = log_probs.argmax(dim=-1)
        missing = ~mask.gather(1, top[:, None]).squeeze(1)
        if bool(missing.any()):
            r = int(missing.nonzero()[0])
            raise AssertionError(
                f"row {r} (mu = {mu}) drops its most probable token {int(top[r])} (p = {fmt(log_probs[r, top[r]].exp())}); "
                "every incomplete probable decoder keeps v^(1) (Proposition 1.4, Chapter 1)")


def check_nucleus_is_a_most_probable_set(nucleus_candidates) -> None:
    """Kept tokens are at least as probable as dropped ones: the nucleus is v^(1), ..., v^(k_mu),
    a prefix of the tokens sorted by probability (Definition 1.4; (probable) of Definition 1.7)."""
    for log_probs, mu in _q1_public_inputs():
        mask = _student_mask(nucleus_candidates, log_probs, mu, _Q1)
        kept_min = log_probs.masked_fill(~mask, math.inf).amin(dim=-1)
        dropped_max = log_probs.masked_fill(mask, -math.inf).amax(dim=-1)
        bad = kept_min < dropped_max
        if bool(bad.any()):
            r = int(bad.nonzero()[0])
            kept_tok = int(log_probs[r].masked_fill(~mask[r], math.inf).argmin())
            drop_tok = int(log_probs[r].masked_fill(mask[r], -math.inf).argmax())
            raise AssertionError(
                f"row {r} (mu = {mu}) keeps token {kept_tok} (p = {fmt(log_probs[r, kept_tok].exp())}) but drops the more "
                f"probable token {drop_tok} (p = {fmt(log_probs[r, drop_tok].exp())}); the nucleus is the *most probable* "
                f"tokens v^(1), ..., v^(k_mu) (Definition 1.4 in Chapter 1): sort by probability first")


def check_nucleus_mass_reaches_mu(nucleus_candidates) -> None:
    """The nucleus carries probability at least mu (Definition 1.4, Chapter 1)."""
    for log_probs, mu in _q1_public_inputs():
        mask = _student_mask(nucleus_candidates, log_probs, mu, _Q1)
        mass = log_probs.exp().masked_fill(~mask, 0.0).sum(dim=-1)
        bad = (mass < mu) & ~_ambiguous_rows(log_probs, mu, 1e-9)
        if bool(bad.any()):
            r = int(bad.nonzero()[0])
            raise AssertionError(
                f"row {r}: the candidate set has mass {fmt(mass[r])}, below mu = {mu}; the nucleus is the smallest set of "
                f"most probable tokens with mass >= mu (Definition 1.4 in Chapter 1). Did you keep a token only while the "
                f"mass *including* it is below mu? Keep it while the mass *before* it is below mu")


def _dyadic_rows():
    """Rows whose partial sums are exact in binary floating point: [1/2, 1/4, 1/8, 1/8] and a flat row."""
    probs = torch.tensor([[0.5, 0.25, 0.125, 0.125], [0.125, 0.5, 0.125, 0.25], [0.25, 0.25, 0.25, 0.25]],
                         dtype=torch.float64)
    return probs.log()


def check_nucleus_is_the_smallest_set(nucleus_candidates) -> None:
    """Removing the least probable member of the nucleus drops its mass below mu: k_mu is the
    *smallest* k with mass >= mu (Definition 1.4, Chapter 1). Includes rows whose partial sums hit
    mu exactly (mu = 0.75 on [1/2, 1/4, 1/8, 1/8]), where ">= mu" and "> mu" differ."""
    cases = list(_q1_public_inputs()) + [(_dyadic_rows(), mu) for mu in (0.5, 0.75)]
    for log_probs, mu in cases:
        mask = _student_mask(nucleus_candidates, log_probs, mu, _Q1)
        probs = log_probs.exp()
        mass = probs.masked_fill(~mask, 0.0).sum(dim=-1)
        smallest = probs.masked_fill(~mask, math.inf).amin(dim=-1)
        without = mass - smallest
        exact = log_probs.shape[-1] == 4  # the dyadic rows: no rounding anywhere
        ambiguous = torch.zeros_like(mass, dtype=torch.bool) if exact else _ambiguous_rows(log_probs, mu, 1e-9)
        bad = (without >= mu) & mask.any(dim=-1) & ~ambiguous
        if bool(bad.any()):
            r = int(bad.nonzero()[0])
            row = f"p = {fmt(probs[r])}" if exact else f"row {r}"
            raise AssertionError(
                f"{row}, mu = {mu}: your set keeps {int(mask[r].sum())} tokens of mass {fmt(mass[r])}, but without its least "
                f"probable member (p = {fmt(smallest[r])}) the mass is {fmt(without[r])} >= mu already; the nucleus is the "
                f"*smallest* such set, k_mu = min{{k : p(v^(1)) + ... + p(v^(k)) >= mu}} (Definition 1.4 in Chapter 1). "
                f"Keep a token only while the mass before it is strictly below mu")


def _compare_masks(fn, log_probs: torch.Tensor, mu: float, what: str, tol: float, min_rows: int = 1) -> None:
    want = nucleus_mask(log_probs, mu)
    got = _student_mask(fn, log_probs, mu, _Q1)
    ambiguous = _ambiguous_rows(log_probs, mu, tol) if mu < 1 else torch.zeros(log_probs.shape[0], dtype=torch.bool)
    compared = ~ambiguous
    if int(compared.sum()) < min_rows:
        raise ValueError("the check's inputs leave too few unambiguous rows")  # the check's own inputs are wrong
    bad = (got != want).any(dim=-1) & compared
    if bool(bad.any()):
        r = int(bad.nonzero()[0])
        extra = (got[r] & ~want[r]).nonzero().flatten().tolist()
        missing = (want[r] & ~got[r]).nonzero().flatten().tolist()
        probs = log_probs[r].double().exp()
        parts = []
        if missing:
            parts.append(f"misses token(s) {missing[:5]} (p = {fmt(probs[missing[:5]])})")
        if extra:
            parts.append(f"keeps token(s) {extra[:5]} (p = {fmt(probs[extra[:5]])}) that are not in it")
        raise AssertionError(
            f"{what}, mu = {mu}: {int(bad.sum())} of {int(compared.sum())} rows differ from {_NUCLEUS}; "
            f"row {r} {' and '.join(parts)} (its nucleus has {int(want[r].sum())} tokens)")


def hidden_nucleus_matches_library(nucleus_candidates) -> None:
    """Same set as ``nmst_lib.decoding.nucleus_mask`` on 2,000 random float64 rows of 50 tokens and
    on float32 rows, for thresholds from 0.01 to 0.99 (Definition 1.4, Chapter 1); rows whose
    partial sums lie within rounding of mu are not compared."""
    for i, mu in enumerate((0.01, 0.3, 0.6, 0.9, 0.99)):
        log_probs = _random_log_probs(200 + i, 2000, 50, temperatures=(0.1, 0.3, 1.0, 3.0))
        _compare_masks(nucleus_candidates, log_probs, mu, "random float64 rows", 1e-9, min_rows=1500)
        log_probs32 = _random_log_probs(300 + i, 500, 50, dtype=torch.float32)
        _compare_masks(nucleus_candidates, log_probs32, mu, "random float32 rows", 1e-5, min_rows=300)


def hidden_nucleus_breaks_ties_by_token_id(nucleus_candidates) -> None:
    """Tied probabilities: the smaller token id ranks first, as in ``nmst_lib`` (a stable sort);
    integer logits in {0, 1, 2} make many ties (Definition 1.4, Chapter 1). Rows of 40 tokens:
    torch's CPU sort keeps ties in order anyway up to 16, so shorter rows let an unstable sort pass."""
    g = generator(400)
    logits = torch.randint(0, 3, (1000, 40), generator=g).double()
    log_probs = torch.log_softmax(logits, dim=-1)
    for mu in (0.1, 0.35, 0.55, 0.8):
        _compare_masks(nucleus_candidates, log_probs, mu, "rows with tied probabilities (ties go to the smaller "
                       "token id)", 1e-9, min_rows=500)


def hidden_nucleus_extreme_logits_float32(nucleus_candidates) -> None:
    """float32 log-probabilities of logits of size 1e4 to 6e4 (probabilities underflow to 0 or are 1;
    two tied maxima give 1/2 each): the same sets as ``nmst_lib`` (Definition 1.4, Chapter 1)."""
    g = generator(500)
    logits = torch.randn(200, 30, generator=g) * 1e4
    logits[::4, :2] = 5e4  # two tied maxima (above every other logit): p = (1/2, 1/2, 0, ...)
    logits[1::4, 5] = 6e4  # one dominant token
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    for mu in (0.3, 0.9):
        _compare_masks(nucleus_candidates, log_probs, mu, "float32 rows with |logit| ~ 1e4", 1e-5, min_rows=150)


def hidden_nucleus_mu_one_keeps_the_support(nucleus_candidates) -> None:
    """mu = 1 keeps every token of positive probability (the smallest set of mass 1 is the support),
    also in float32 where a cumulative sum reaches 1 before the last token (Definition 1.4)."""
    log_probs = torch.log_softmax(torch.randn(64, 1000, generator=generator(600)) * 6.0, dim=-1)
    _compare_masks(nucleus_candidates, log_probs, 1.0, "float32 rows of 1,000 tokens (mu = 1: every token of positive "
                   "probability; a float32 cumulative sum reaches 1 before the last token)", 0.0)
    _compare_masks(nucleus_candidates, _random_log_probs(601, 64, 40), 1.0, "float64 rows", 0.0)


# ----------------------------------------------------------------------------- q2: consistent top-k

_Q2 = "consistent_top_k_log_probs"


def _student_log_q(fn, log_probs: torch.Tensor, k: int, eos_id: int) -> torch.Tensor:
    out = call_student(fn, log_probs.clone(), k, eos_id, name=_Q2)
    expect(isinstance(out, torch.Tensor) and out.is_floating_point(),
           f"`{_Q2}` returned {type(out).__name__ if not isinstance(out, torch.Tensor) else out.dtype}; "
           "return a floating-point tensor of log-probabilities log q(v) shaped like log_probs")
    expect(tuple(out.shape) == tuple(log_probs.shape),
           f"`{_Q2}` returned shape {tuple(out.shape)} for log_probs of shape {tuple(log_probs.shape)}")
    expect(not bool(torch.isnan(out).any()), f"`{_Q2}` returned NaN; log q(v) is -inf outside the candidate set "
           "and finite inside it")
    return out.detach().cpu()


def _q2_public_inputs():
    for i, (k, eos_id) in enumerate([(1, 11), (2, 11), (3, 0), (5, 6)]):
        yield _random_log_probs(700 + i, 300, 12), k, eos_id


def check_consistent_top_k_candidate_set(consistent_top_k_log_probs) -> None:
    """The candidates (finite log q) are V'_t = {eos} u V_k: the k most probable tokens plus eos,
    k + 1 tokens when eos is not among the top k (Definition 3.1, Chapter 3)."""
    for log_probs, k, eos_id in _q2_public_inputs():
        log_q = _student_log_q(consistent_top_k_log_probs, log_probs, k, eos_id)
        got = log_q > -math.inf
        want = top_k_mask(log_probs, k, eos_id=eos_id)
        bad = (got != want).any(dim=-1)
        if not bool(bad.any()):
            continue
        r = int(bad.nonzero()[0])
        rank = 1 + (log_probs[r][None, :] > log_probs[r][:, None]).sum(dim=-1)  # 1 = most probable
        if not bool(got[r, eos_id]):
            raise AssertionError(
                f"row {r} (k = {k}, eos_id = {eos_id}): log q(eos) = -inf, eos (rank {int(rank[eos_id])}) is not a "
                f"candidate; consistent top-k always adds eos, V'_t = {{eos}} u V_k (Definition 3.1 in Chapter 3)")
        extra = (got[r] & ~want[r]).nonzero().flatten().tolist()
        missing = (want[r] & ~got[r]).nonzero().flatten().tolist()
        if extra:
            v = extra[0]
            raise AssertionError(
                f"row {r} (k = {k}, eos_id = {eos_id}): token {v} has rank {int(rank[v])} > k and is not eos, yet it has "
                f"finite log q = {fmt(log_q[r, v])}; V'_t = {{eos}} u V_k holds the k most probable tokens and eos only, "
                f"{int(want[r].sum())} tokens here (Definition 3.1 in Chapter 3)")
        v = missing[0]
        raise AssertionError(
            f"row {r} (k = {k}, eos_id = {eos_id}): token {v} has rank {int(rank[v])} <= k but log q = -inf; every one "
            f"of the k most probable tokens is a candidate of consistent top-k (Definition 3.1 in Chapter 3)")


def check_consistent_top_k_never_lowers_eos(consistent_top_k_log_probs) -> None:
    """q is a distribution (log-sum-exp 0) with q(eos) >= p(eos): Lemma 3.1, eq. (3.1) (Chapter 3)."""
    for log_probs, k, eos_id in _q2_public_inputs():
        log_q = _student_log_q(consistent_top_k_log_probs, log_probs, k, eos_id)
        total = torch.logsumexp(log_q.double(), dim=-1)
        bad = (total.abs() > 1e-9)
        if bool(bad.any()):
            r = int(bad.nonzero()[0])
            raise AssertionError(f"row {r} (k = {k}): q sums to {fmt(total[r].exp(), 10)}, not 1; renormalise over the "
                                 "candidate set as in eq. (1.2) of Definition 1.3 (Chapter 1)")
        lowered = log_q[:, eos_id] < log_probs[:, eos_id] - 1e-12
        if bool(lowered.any()):
            r = int(lowered.nonzero()[0])
            raise AssertionError(
                f"row {r} (k = {k}): q(eos) = {fmt(log_q[r, eos_id].exp())} is below the model's p(eos) = "
                f"{fmt(log_probs[r, eos_id].exp())}; adding eos to the candidate set never lowers its probability "
                f"(Lemma 3.1, eq. (3.1), Chapter 3)")


def check_consistent_top_k_keeps_ratios(consistent_top_k_log_probs) -> None:
    """On the candidates, log q - log p is one constant, -log p(V'_t): the renormalised proposal of
    Definition 3.1 keeps the model's ratios between candidates (Chapter 3)."""
    for log_probs, k, eos_id in _q2_public_inputs():
        log_q = _student_log_q(consistent_top_k_log_probs, log_probs, k, eos_id)
        kept = log_q > -math.inf
        shift = (log_q - log_probs).masked_fill(~kept, math.nan)
        spread = torch.nan_to_num(shift, nan=-math.inf).amax(dim=-1) - torch.nan_to_num(shift, nan=math.inf).amin(dim=-1)
        bad = spread > 1e-9
        if bool(bad.any()):
            r = int(bad.nonzero()[0])
            raise AssertionError(
                f"row {r} (k = {k}): log q(v) - log p(v) ranges over [{fmt(torch.nan_to_num(shift[r], nan=math.inf).min())}, "
                f"{fmt(torch.nan_to_num(shift[r], nan=-math.inf).max())}] on the candidates; it must be the same constant "
                f"-log p(V'_t) for all of them, q(v) = p(v) / sum_(v' in V'_t) p(v') (Definition 3.1 in Chapter 3)")


def _compare_log_q(fn, log_probs, k, eos_id, what, atol) -> None:
    want = restrict_log_probs(log_probs, top_k_mask(log_probs, k, eos_id=eos_id))
    got = _student_log_q(fn, log_probs, k, eos_id)
    expect_tensor_close(got, want, f"log q ({what}, k = {k}, eos_id = {eos_id})", _CONSISTENT_TOP_K,
                        rtol=1e-6 if log_probs.dtype == torch.float32 else 1e-10, atol=atol)


def hidden_consistent_top_k_matches_library(consistent_top_k_log_probs) -> None:
    """Same log q as ``restrict_log_probs(log_probs, top_k_mask(log_probs, k, eos_id=eos_id))`` on
    random float64 rows, every k from 1 to V, eos at random positions (Definition 3.1, Chapter 3)."""
    g = generator(800)
    for k in range(1, 16):
        log_probs = _random_log_probs(800 + k, 200, 15, temperatures=(0.1, 0.5, 1.0, 4.0))
        eos_id = int(torch.randint(0, 15, (1,), generator=g))
        _compare_log_q(consistent_top_k_log_probs, log_probs, k, eos_id, "random float64 rows", 1e-10)


def hidden_consistent_top_k_ties(consistent_top_k_log_probs) -> None:
    """Tied probabilities at the k-th place go to the smaller token id, as in ``nmst_lib``
    (exactly k tokens plus eos; Definition 3.1, Chapter 3). Rows of 40 tokens, for the reason given
    in :func:`hidden_nucleus_breaks_ties_by_token_id`."""
    logits = torch.randint(0, 3, (500, 40), generator=generator(900)).double()
    log_probs = torch.log_softmax(logits, dim=-1)
    for k, eos_id in ((1, 9), (3, 9), (4, 0), (6, 5)):
        got = _student_log_q(consistent_top_k_log_probs, log_probs, k, eos_id) > -math.inf
        want = top_k_mask(log_probs, k, eos_id=eos_id)
        for r in (got != want).any(dim=-1).nonzero().flatten().tolist():
            missing = (want[r] & ~got[r]).nonzero().flatten().tolist()
            tied = [(a, b) for a in missing for b in range(a + 1, log_probs.shape[-1])
                    if b != eos_id and bool(got[r, b]) and bool(log_probs[r, b] == log_probs[r, a])]
            if tied:
                a, b = tied[0]
                raise AssertionError(
                    f"row {r} (k = {k}, eos_id = {eos_id}): tokens {a} and {b} tie at the k-th place (p = "
                    f"{fmt(log_probs[r, a].exp())} each); ties go to the smaller token id, so V_k holds token {a}, "
                    f"but your log q is -inf at {a} and finite at {b} (rank with a stable sort, "
                    "torch.sort(..., descending=True, stable=True); Definition 3.1, Chapter 3)")
            break
        _compare_log_q(consistent_top_k_log_probs, log_probs, k, eos_id, "rows with tied probabilities", 1e-10)


def hidden_consistent_top_k_extreme_logits_float32(consistent_top_k_log_probs) -> None:
    """float32 logits of size 1e4, where p(eos) underflows to 0 but log p(eos) is finite: log q(eos)
    must be finite and equal the library's (work in log space; Lemma 3.1, Chapter 3)."""
    logits = torch.randn(100, 8, generator=generator(1000)) * 1e4
    logits[:, 7] = -2e4  # eos (the last id) far below everything: p(eos) = 0 in float32
    logits[:4] = torch.tensor([1e4, 9.9e3, -1e4, 5e3, -1e4, 0.0, 2e3, -1e4])
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    for k in (1, 2, 5):
        got = _student_log_q(consistent_top_k_log_probs, log_probs, k, 7)
        bad = ~torch.isfinite(got[:, 7])
        if bool(bad.any()):
            r = int(bad.nonzero()[0])
            raise AssertionError(
                f"float32 row {r} with |logit| ~ 1e4 (k = {k}): log q(eos) = {fmt(got[r, 7])}, but log p(eos) = "
                f"{fmt(log_probs[r, 7])} is finite, so log q(eos) = log p(eos) - log p(V'_t) is too; p(eos) underflows "
                "in float32, so compute in log space (logsumexp) (Lemma 3.1, Chapter 3)")
        _compare_log_q(consistent_top_k_log_probs, log_probs, k, 7, "float32 rows with |logit| ~ 1e4", 1e-3)


# ----------------------------------------------------------------------------- q4: exact r_nt(L)

_Q4 = "exact_rnt"
_THM22 = "Theorem 2.2, item 1 (Chapter 2): r_nt(L) = phi Q^(L-1) 1"


def _student_rnt(fn, kernel: torch.Tensor, eos_id: int, start: int, Ls) -> torch.Tensor:
    out = call_student(fn, kernel.clone(), eos_id, start, list(Ls), name=_Q4)
    try:
        values = torch.as_tensor(np.asarray(out, dtype=np.float64) if not isinstance(out, torch.Tensor) else out)
    except Exception:
        raise AssertionError(f"`{_Q4}` returned a {type(out).__name__}; return one number per L "
                             "(a list, numpy array or tensor)") from None
    values = values.detach().cpu().double().reshape(-1)
    expect(values.numel() == len(Ls), f"`{_Q4}` returned {values.numel()} values for {len(Ls)} step limits Ls = "
           f"{list(Ls)[:8]}: return r_nt(L) for each L, in the order of Ls")
    return values


def check_exact_rnt_first_step_and_monotone(exact_rnt) -> None:
    """r_nt(1) = 1 - K_S[c, eos], values in [0, 1], non-increasing in L (Theorem 2.2, Chapter 2)."""
    lm = random_markov_lm(6, generator=generator(1100))
    Ls = [1, 2, 3, 5, 10, 30]
    for method, kwargs in (("ancestral", {}), ("top-k", dict(k=2, consistent=True)), ("nucleus", dict(p=0.7))):
        kernel = decoder_transition_matrix(lm, method, **kwargs)
        for start in (0, 3):
            got = _student_rnt(exact_rnt, kernel, lm.eos_id, start, Ls)
            label = f"{method}{' (consistent)' if kwargs.get('consistent') else ''} from start token {start}"
            expect_close(got[0], 1 - float(kernel[start, lm.eos_id]), f"r_nt(1) for {label}",
                         f"1 - K_S[c, eos] (the first token is drawn from row c of the kernel; {_THM22})", rtol=1e-9)
            expect(bool(((got >= -1e-12) & (got <= 1 + 1e-12)).all()),
                   f"r_nt(L) for {label} is {fmt(got)} for Ls = {Ls}: a probability lies in [0, 1]")
            rises = got[1:] > got[:-1] + 1e-12
            if bool(rises.any()):
                i = int(rises.nonzero()[0])
                raise AssertionError(
                    f"r_nt(L) for {label} rises from {fmt(got[i])} at L = {Ls[i]} to {fmt(got[i + 1])} at L = "
                    f"{Ls[i + 1]}; r_nt(L) = q(|y| > L) cannot grow with L (Theorem 2.2 in Chapter 2)")


def check_exact_rnt_geometric(exact_rnt) -> None:
    """A kernel that stops with probability delta after every token gives r_nt(L) = (1 - delta)^L
    (Theorem 2.2, Chapter 2)."""
    delta, vocab = 0.1, 5
    body = torch.softmax(torch.randn(vocab, vocab - 1, generator=generator(1200), dtype=torch.float64), dim=-1)
    kernel = torch.cat([(1 - delta) * body, torch.full((vocab, 1), delta, dtype=torch.float64)], dim=1)
    Ls = [1, 2, 5, 20, 100]
    got = _student_rnt(exact_rnt, kernel, vocab - 1, 0, Ls)
    want = torch.tensor([(1 - delta) ** L for L in Ls], dtype=torch.float64)
    expect_tensor_close(got, want, f"exact_rnt(kernel with K[i, eos] = {delta} for every i, eos_id = {vocab - 1}, "
                        f"start_token = 0, Ls = {Ls})", f"(1 - delta)^L ({_THM22})", rtol=1e-9, atol=1e-12)


def check_exact_rnt_trapped_loop(exact_rnt) -> None:
    """Greedy search trapped in a loop never stops: r_nt(L) = 1 for every L; from a token whose
    greedy successor is eos, r_nt(L) = 0 (Theorem 2.2, Chapter 2)."""
    # tokens 0 -> 1 -> 0 (a loop), 2 -> eos (= 3): the greedy kernel of a bigram model
    kernel = torch.zeros(4, 4, dtype=torch.float64)
    kernel[0, 1] = kernel[1, 0] = kernel[2, 3] = kernel[3, 3] = 1.0
    Ls = [1, 2, 3, 10, 50]
    got = _student_rnt(exact_rnt, kernel, 3, 0, Ls)
    expect_tensor_close(got, torch.ones(len(Ls), dtype=torch.float64),
                        f"exact_rnt(greedy kernel trapped in the loop 0 -> 1 -> 0, eos_id = 3, start_token = 0, Ls = {Ls})",
                        "Theorem 2.2 in Chapter 2 (r_nt(L) = 1 for every L: no path from token 0 reaches eos)",
                        rtol=0, atol=1e-12)
    got = _student_rnt(exact_rnt, kernel, 3, 2, Ls)
    expect_tensor_close(got, torch.zeros(len(Ls), dtype=torch.float64),
                        f"exact_rnt(greedy kernel, eos_id = 3, start_token = 2, Ls = {Ls})",
                        "Theorem 2.2 in Chapter 2 (token 2's greedy successor is eos, so r_nt(L) = 0 for every L; did you "
                        "leave eos in Q?)", rtol=0, atol=1e-12)


def _compare_rnt(fn, kernel, eos_id, start, Ls, what, rtol=1e-9) -> None:
    want = survival_curve(kernel, eos_id, start, Ls).double()
    got = _student_rnt(fn, kernel, eos_id, start, Ls)
    expect_tensor_close(got, want, f"exact_rnt(kernel of {what}, start_token = {start}, Ls = {list(Ls)[:8]})",
                        f"nmst_lib.markov.survival_curve ({_THM22})", rtol=rtol, atol=1e-12)


_DECODERS_Q4 = (("ancestral", {}), ("greedy", {}), ("top-k", dict(k=2)), ("top-k", dict(k=2, consistent=True)),
                ("nucleus", dict(p=0.7)), ("nucleus", dict(p=0.7, consistent=True)))


def hidden_exact_rnt_matches_library(exact_rnt) -> None:
    """Same r_nt(L) as ``nmst_lib.markov.survival_curve`` on random bigram models under six
    decoders, from every start token, with unsorted and repeated Ls (Theorem 2.2, Chapter 2)."""
    Ls = [7, 1, 30, 3, 3, 200, 2]
    for i, vocab in enumerate((4, 7, 12)):
        lm = random_markov_lm(vocab, temperature=[0.5, 1.0, 2.0][i], generator=generator(1300 + i))
        for method, kwargs in _DECODERS_Q4:
            kernel = decoder_transition_matrix(lm, method, **kwargs)
            label = f"{method}{' (consistent)' if kwargs.get('consistent') else ''}, |V| = {vocab}"
            for start in range(vocab - 1):
                _compare_rnt(exact_rnt, kernel, lm.eos_id, start, Ls, label)


def hidden_exact_rnt_eos_not_last(exact_rnt) -> None:
    """eos need not be the last id: eos_id = 0 and a middle id (Theorem 2.2, Chapter 2)."""
    Ls = [1, 4, 16, 64]
    for seed, eos_id in ((1400, 0), (1401, 3)):
        lm = random_markov_lm(7, eos_id=eos_id, generator=generator(seed))
        for method, kwargs in (("ancestral", {}), ("top-k", dict(k=3, consistent=True))):
            kernel = decoder_transition_matrix(lm, method, **kwargs)
            for start in (v for v in range(7) if v != eos_id):
                _compare_rnt(exact_rnt, kernel, eos_id, start, Ls, f"{method}, eos_id = {eos_id}")


def hidden_exact_rnt_long_horizon(exact_rnt) -> None:
    """Tiny eos probabilities (1e-6 per step) and L up to 20,000: r_nt(L) is still computed to
    1e-8 relative (Theorem 2.2, Chapter 2; Chapter 3's cycle model)."""
    delta, n_cycle = 1e-6, 4
    vocab = n_cycle + 1
    P = torch.full((vocab, vocab), 0.1 / (n_cycle - 1), dtype=torch.float64)
    P[torch.arange(n_cycle), (torch.arange(n_cycle) + 1) % n_cycle] = 0.9
    P[:, -1] = 0.0
    P[:n_cycle] *= 1 - delta
    P[:n_cycle, -1] = delta
    P[-1] = 1.0 / vocab
    from nmst_lib.markov import MarkovLM
    lm = MarkovLM(P.log())
    Ls = [1, 10, 1000, 20000]
    for method, kwargs in (("ancestral", {}), ("top-k", dict(k=1, consistent=True))):
        kernel = decoder_transition_matrix(lm, method, **kwargs)
        _compare_rnt(exact_rnt, kernel, lm.eos_id, 0, Ls, f"{method} on a cycle model with p(eos) = 1e-6", rtol=1e-8)


# ----------------------------------------------------------------------------- q5: the experiment

_Q5 = "rnt_from_tokens"

#: The decoders of the experiment (names -> keyword arguments of ``nmst_lib.decoding.decode``).
EXPERIMENT_DECODERS = {
    "greedy": dict(method="greedy"),
    "top-2": dict(method="top-k", k=2),
    "nucleus-0.6": dict(method="nucleus", p=0.6),
    "consistent top-2": dict(method="top-k", k=2, consistent=True),
    "consistent nucleus-0.6": dict(method="nucleus", p=0.6, consistent=True),
    "ancestral": dict(method="ancestral"),
}
_PLAIN = ("greedy", "top-2", "nucleus-0.6")
_STOPPING = ("consistent top-2", "consistent nucleus-0.6", "ancestral")

EXPERIMENT = {"MAX_LEN": 3000, "SEED": 2, "LS": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 3000],
              "N_CONTEXTS": 200, "CONTEXT_LEN": 3}
"""Problem 5's setting, the values of its given cell: the checks grade this experiment, whatever
the notebook's constants say (``checks.expect_given`` names an edited one)."""


def experiment_rnn():
    """Problem 5's model, Chapter 3's: ``inconsistent_rnn(6, seed=0, eos_margin=1.0)`` on the CPU
    (Theorem 2.1's RNN, on which eos is ranked last after every prefix; Chapter 2)."""
    from nmst_lib.theory import inconsistent_rnn

    return inconsistent_rnn(6, seed=0, eos_margin=1.0, device="cpu")


def experiment_contexts(rnn) -> torch.Tensor:
    """Problem 5's contexts: N_CONTEXTS random prefixes of CONTEXT_LEN non-eos tokens (seed 0)."""
    return torch.randint(0, rnn.eos_id, (EXPERIMENT["N_CONTEXTS"], EXPERIMENT["CONTEXT_LEN"]),
                         generator=torch.Generator().manual_seed(0))


def _student_curve(fn, tokens: torch.Tensor, eos_id: int, Ls) -> torch.Tensor:
    out = call_student(fn, tokens.clone(), eos_id, list(Ls), name=_Q5)
    try:
        values = torch.as_tensor(np.asarray(out, dtype=np.float64) if not isinstance(out, torch.Tensor) else out)
    except Exception:
        raise AssertionError(f"`{_Q5}` returned a {type(out).__name__}; return one number per L") from None
    values = values.detach().cpu().double().reshape(-1)
    expect(values.numel() == len(Ls), f"`{_Q5}` returned {values.numel()} values for {len(Ls)} step limits: "
           "return r_nt(L) for each L of Ls, in order")
    return values


def check_rnt_from_tokens_small_example(rnt_from_tokens) -> None:
    """r_nt(L) = the fraction of rows with no eos among their first L tokens (Chapter 2, after
    Definition 2.2; Choi et al. 2023, eq. 11), on a hand-made batch (PAD = -1 after eos)."""
    eos = 5
    tokens = torch.tensor([[1, 5, -1, -1], [2, 3, 4, 1], [5, -1, -1, -1], [0, 0, 0, 5]])
    Ls = [1, 2, 3, 4]
    got = _student_curve(rnt_from_tokens, tokens, eos, Ls)
    want = torch.tensor([0.75, 0.5, 0.5, 0.25], dtype=torch.float64)
    expect_tensor_close(got, want, f"rnt_from_tokens(tokens, eos_id = 5, Ls = {Ls})",
                        "the fraction of rows with no eos among their first L tokens, for the rows [1, eos], "
                        "[2, 3, 4, 1] (cut at L_max = 4), [eos], [0, 0, 0, eos] (Chapter 2: r_nt(L) = q(|y| > L); a row "
                        "that ends with eos exactly at step L has stopped within L)", rtol=0, atol=1e-12)


def hidden_rnt_from_tokens_matches_library(rnt_from_tokens) -> None:
    """Same curve as ``nmst_lib.metrics.rnt_curve`` on random token batches with eos at random
    places, unsorted Ls, and eos not the last id (Chapter 2)."""
    g = generator(1500)
    for eos in (9, 0, 4):
        tokens = torch.randint(0, 10, (300, 40), generator=g)
        tokens[tokens == eos] = (eos + 1) % 10
        stop = torch.randint(1, 80, (300,), generator=g)  # first eos at step stop, or none when stop > 40
        for i, s in enumerate(stop.tolist()):
            if s <= 40:
                tokens[i, s - 1] = eos
                tokens[i, s:] = -1
        generation = Generation(tokens=tokens, lengths=stop.clamp(max=40), terminated=stop <= 40, max_len=40,
                                eos_id=eos, method="ancestral", scores=torch.zeros(300))
        Ls = [40, 1, 13, 2, 27, 13]
        want = torch.as_tensor(rnt_curve(generation, Ls))
        got = _student_curve(rnt_from_tokens, tokens, eos, Ls)
        expect_tensor_close(got, want, f"rnt_from_tokens(tokens, eos_id = {eos}, Ls = {Ls})",
                            "nmst_lib.metrics.rnt_curve (Chapter 2)", rtol=0, atol=1e-12)


def bounded_state_xi(model) -> float:
    """xi = exp(-2 B u+) / |V| of Lemma 2.2 (Chapter 2) for the inconsistent RNN (B = 1, nu = inf,
    u+ = max_v ||u_v||_1, zero biases): the floor under p(eos) that Theorem 3.1 turns into
    r_nt(L) <= (1 - xi)^L."""
    u_plus = float(model.output_embeddings.abs().sum(dim=1).max())
    return math.exp(-2.0 * u_plus) / model.vocab_size


def _experiment_inputs(generations, curves) -> None:
    expect(isinstance(generations, dict),
           f"`generations` is {type(generations).__name__}, not the dict that `run_decoders` returns: implement "
           "`run_decoders` and run the experiment cell")
    missing = [name for name in EXPERIMENT_DECODERS if name not in generations]
    expect(not missing, f"`generations` lacks the decoder(s) {missing}; it needs all of {list(EXPERIMENT_DECODERS)}")
    for name in EXPERIMENT_DECODERS:
        expect(isinstance(generations[name], Generation),
               f"generations[{name!r}] is a {type(generations[name]).__name__}, not the Generation that "
               "nmst_lib.decoding.decode returns")
    expect(isinstance(curves, dict), f"`curves` is {type(curves).__name__}; run the experiment cell (it builds "
           "curves from rnt_from_tokens)")
    missing = [name for name in EXPERIMENT_DECODERS if name not in curves]
    expect(not missing, f"`curves` lacks the decoder(s) {missing}")


def _curve(curves, name: str, Ls) -> torch.Tensor:
    value = curves[name]
    expect(value is not None and value is not Ellipsis,
           f"curves[{name!r}] is {value!r}: rnt_from_tokens is not implemented yet")
    try:
        values = torch.as_tensor(np.asarray(value, dtype=np.float64)).reshape(-1)
    except Exception:
        raise AssertionError(f"curves[{name!r}] is a {type(value).__name__}, not one number per L") from None
    expect(values.numel() == len(Ls), f"curves[{name!r}] has {values.numel()} values for the {len(Ls)} values of LS")
    return values


def check_experiment_follows_the_theory(generations, curves, rnn, LS) -> None:
    """On the inconsistent RNN the plain decoders never stop, r_nt(L) = 1 (Theorem 2.1, Chapter 2);
    the consistent ones and ancestral sampling obey r_nt(L) <= (1 - xi)^L (Theorem 3.1 and
    Corollary 3.1, Chapter 3; xi of Lemma 2.2)."""
    expect_given({"LS": LS, "rnn": rnn}, {"LS": EXPERIMENT["LS"], "rnn": experiment_rnn()})
    _experiment_inputs(generations, curves)
    Ls = [int(L) for L in LS]
    xi = bounded_state_xi(rnn)
    for name in _PLAIN:
        values = _curve(curves, name, Ls)
        below = values < 1
        if bool(below.any()):
            i = int(below.nonzero()[0])
            raise AssertionError(
                f"{name}: r_nt(L = {Ls[i]}) = {fmt(values[i])} < 1, but on this RNN eos is ranked last after every prefix, "
                f"so {name} never emits it and r_nt(L) = 1 for every L (Theorem 2.1 in Chapter 2). Check the decoder's "
                "settings in run_decoders (no consistent=True here) and rnt_from_tokens")
    for name in _STOPPING:
        values = _curve(curves, name, Ls)
        bound = torch.tensor([(1 - xi) ** L for L in Ls], dtype=torch.float64)
        above = values > bound + 1e-12
        if bool(above.any()):
            i = int(above.nonzero()[0])
            raise AssertionError(
                f"{name}: r_nt(L = {Ls[i]}) = {fmt(values[i])} is above the guarantee (1 - xi)^L = {fmt(bound[i])} "
                f"(xi = {fmt(xi)}) of Theorem 3.1 (Chapter 3), eq. (3.4); a decoder with q(eos) >= p(eos) >= xi "
                "cannot stay unfinished that often. Is this decoder consistent (consistent=True)?")


def hidden_experiment_curves_match_generations(generations, curves, LS) -> None:
    """The reported curves are r_nt(L) of the student's own generations, recomputed with
    ``nmst_lib.metrics.rnt_curve`` (Chapter 2)."""
    expect_given({"LS": LS}, {"LS": EXPERIMENT["LS"]})
    _experiment_inputs(generations, curves)
    Ls = [int(L) for L in LS]
    for name in EXPERIMENT_DECODERS:
        values = _curve(curves, name, Ls)
        generation = generations[name]
        expect(max(Ls) <= generation.max_len, f"generations[{name!r}] was decoded to max_len = {generation.max_len}, "
               f"below max(LS) = {max(Ls)}; decode with max_len = MAX_LEN")
        want = torch.as_tensor(rnt_curve(generation, Ls))
        expect_tensor_close(values, want, f"curves[{name!r}]", "r_nt(L) recomputed from generations[" + repr(name) +
                            "] with nmst_lib.metrics.rnt_curve", rtol=0, atol=1e-12)


def _candidate_mask(name: str, log_probs: torch.Tensor, eos_id: int) -> torch.Tensor:
    kwargs = EXPERIMENT_DECODERS[name]
    eos = eos_id if kwargs.get("consistent") else None
    if kwargs["method"] == "greedy":
        return top_k_mask(log_probs, 1)
    if kwargs["method"] == "top-k":
        return top_k_mask(log_probs, kwargs["k"], eos_id=eos)
    if kwargs["method"] == "nucleus":
        return nucleus_mask(log_probs, kwargs["p"], eos_id=eos)
    return log_probs > -math.inf


def hidden_experiment_generations_follow_their_decoders(generations, contexts, rnn, MAX_LEN, SEED) -> None:
    """Teacher-forces the RNN along every generation and checks each token against its decoder's
    candidate set (Definition 1.4, Chapter 1; Definitions 3.1-3.2, Chapter 3); ancestral samples
    must leave the consistent nucleus at least once (their candidate set is all of V). Then each
    generation must be token for token the statement's recipe: ``decode(rnn, contexts,
    max_len=MAX_LEN, generator=torch.Generator().manual_seed(SEED), **EXPERIMENT_DECODERS[name])``
    (a sampler decoded greedily stays inside its candidate set, but not on the recipe's tokens)."""
    _experiment_inputs(generations, {name: None for name in EXPERIMENT_DECODERS})
    fixed_rnn = experiment_rnn()
    expect_given({"rnn": rnn, "contexts": contexts, "MAX_LEN": MAX_LEN, "SEED": SEED},
                 {"rnn": fixed_rnn, "contexts": experiment_contexts(fixed_rnn), "MAX_LEN": EXPERIMENT["MAX_LEN"],
                  "SEED": EXPERIMENT["SEED"]})
    eos_id = rnn.eos_id
    for name in EXPERIMENT_DECODERS:
        generation = generations[name]
        tokens = generation.tokens
        expect(tokens.shape[0] == contexts.shape[0],
               f"generations[{name!r}] has {tokens.shape[0]} rows for {contexts.shape[0]} contexts: decode every context once")
        expect(int(generation.max_len) == int(MAX_LEN),
               f"generations[{name!r}] was decoded with max_len = {generation.max_len}, not MAX_LEN = {MAX_LEN}")
        state, log_probs = rnn.initial_state(contexts)
        alive = torch.ones(tokens.shape[0], dtype=torch.bool)
        outside_nucleus = 0
        for t in range(tokens.shape[1]):
            current = tokens[:, t]
            alive &= current >= 0
            if not bool(alive.any()):
                break
            log_probs = log_probs.cpu()
            mask = _candidate_mask(name, log_probs, eos_id)
            inside = mask.gather(1, current.clamp(min=0)[:, None]).squeeze(1)
            bad = alive & ~inside
            if bool(bad.any()):
                r = int(bad.nonzero()[0])
                v = int(current[r])
                rank = 1 + int((log_probs[r] > log_probs[r, v]).sum())
                raise AssertionError(
                    f"generations[{name!r}], row {r}, step t = {t + 1}: token {v} (rank {rank}, p = "
                    f"{fmt(log_probs[r, v].exp())}) is outside the candidate set of {name} "
                    f"({int(mask[r].sum())} tokens); decode with {EXPERIMENT_DECODERS[name]} (Definition 1.4 in "
                    "Chapter 1, Definitions 3.1-3.2 in Chapter 3)")
            if name == "ancestral":
                nucleus = nucleus_mask(log_probs, 0.6, eos_id=eos_id)
                outside_nucleus += int((alive & ~nucleus.gather(1, current.clamp(min=0)[:, None]).squeeze(1)).sum())
            alive &= current != eos_id
            state, log_probs = rnn.step(state, current.clamp(min=0))
        if name == "ancestral":
            expect(outside_nucleus > 0,
                   "generations['ancestral'] never takes a token outside the consistent nucleus-0.6 candidate set; "
                   "ancestral sampling draws from all of V (Definition 1.4 in Chapter 1): decode with method='ancestral'")
    for name in EXPERIMENT_DECODERS:
        _expect_the_recipe(name, generations[name], contexts, rnn, int(MAX_LEN), SEED)


def _expect_the_recipe(name: str, generation, contexts, rnn, max_len: int, seed) -> None:
    from nmst_lib.decoding import decode

    kwargs = EXPERIMENT_DECODERS[name]
    recipe = (f"decode(model, contexts, max_len=max_len, generator=torch.Generator().manual_seed(seed), "
              f"{', '.join(f'{k}={v!r}' for k, v in kwargs.items())})")
    want = decode(rnn, contexts, max_len=max_len, generator=torch.Generator().manual_seed(int(seed)), **kwargs).tokens
    got = generation.tokens.detach().cpu()
    width = max(got.shape[1], want.shape[1])
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=-1)  # noqa: E731
    differ = pad(got) != pad(want)
    if bool(differ.any()):
        r, t = (int(i) for i in differ.nonzero()[0])
        raise AssertionError(
            f"generations[{name!r}], row {r}, step t = {t + 1}: token {int(pad(got)[r, t])}, but the statement's "
            f"recipe {recipe} with seed = SEED = {seed} gives {int(pad(want)[r, t])} there. Decode each decoder "
            "with exactly its settings from the table and a fresh generator seeded with SEED (one per decoder, "
            "created just before its decode call)")
