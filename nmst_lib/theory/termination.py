"""Step bounds of the self-terminating layers: Welleck et al. (2020) Theorems
4.2-4.3 (ST) and Choi, Cho, Lee (2023) Theorem 3 (NMST); Chapters 4-7 read
them, and the findings engine marks what they force.

Part of :mod:`nmst_lib.theory`, which re-exports every public name here."""

from __future__ import annotations

import math

from .._validation import check_eps, check_positive_int

__all__ = [
    "half_life_bound",
    "first_step_eos_above_half",
    "beam_termination_bound",
]


# ---------------------------------------------------------------------------------------
# Termination bounds of ST (Welleck et al. 2020, Thms 4.2-4.3) and NMST (Choi et al. 2023, Thm 3)
# ---------------------------------------------------------------------------------------


def half_life_bound(eps) -> float:
    """beta_eps = -log 2 / log(1 - eps): after it the lower bound f_lb(t) = 1 - (1 - eps)^t exceeds 1/2.

    Welleck et al. (2020), proof of Theorem 4.2, where it is called B (and Choi, Cho, Lee
    (2023), proof of Theorem 3, eq. 23): both ST and NMST satisfy p(eos at t) >= f_lb(t), and
    f_lb(t) > 1/2 exactly when t > beta_eps, so from then on eos is the most probable token.
    Returned as the real number beta_eps (computed with ``log1p``, exact at eps = 1e-5); the
    half-life step t_{1/2} = floor(beta_eps) + 1, the first integer step after it, is
    :func:`first_step_eos_above_half` (Chapter 4, ``04_self_terminating``, Lemma "The
    half-life of the lower bound"; Chapter 5, ``05_nmst``).
    """
    eps = check_eps(eps)
    return -math.log(2.0) / math.log1p(-eps)


def first_step_eos_above_half(eps) -> int:
    """The half-life step t_{1/2}: the smallest integer t >= 1 with f_lb(t) = 1 - (1 - eps)^t > 1/2.

    This is t_{1/2} of Choi, Cho, Lee (2023), eq. 23 (proof of Theorem 3): for every
    t >= t_{1/2}, an ST or NMST model puts more than half of its mass on eos, so greedy search
    and every incomplete probable decoder include eos (Chapters 4-5, ``04_self_terminating``,
    ``05_nmst``). With beta_eps = :func:`half_life_bound` it equals floor(beta_eps) + 1
    (beta_eps itself, when it is an integer, does not count: f_lb(beta_eps) = 1/2 exactly).
    Greedy search on an ST or NMST model stops within t_{1/2} steps, and the bound is attained
    (eps = 1e-2: beta_eps = 68.97, t_{1/2} = 69). The result is the smallest integer t for
    which the inequality t * log1p(-eps) < -log 2 holds in float64.

    For eps below about 7.7e-17, t_{1/2} exceeds 2^53, beyond which float64 no longer holds
    every integer: stepping t by one from floor(beta_eps) + 1 would not move the product, so
    that smallest t is found by bisection over the integers instead (the inequality is monotone
    in t). It agrees with floor(beta_eps) + 1 to float64's relative precision (about 1e-16;
    e.g. eps = 1e-25 gives 6.93e24). eps must be at least 1e-307 (``ValueError`` below): for
    smaller eps, beta_eps = log 2 / -log(1 - eps) approaches or exceeds the largest float64,
    1.8e308, and the inequality cannot be evaluated in float64.
    """
    eps = check_eps(eps)
    if eps < _SMALLEST_EPS:
        raise ValueError(
            f"eps must be >= {_SMALLEST_EPS:g} for t_1/2, got {eps!r}: below it beta_eps = log 2 / -log(1 - eps) "
            "approaches the largest float64 (1.8e308), where the defining inequality cannot be evaluated")
    log_keep, target = math.log1p(-eps), -math.log(2.0)
    t = math.floor(-math.log(2.0) / log_keep) + 1
    if t > _EXACT_INTEGERS:
        return _smallest_step_below(log_keep, target, t)
    # guard against rounding in beta_eps: make t the first step where the defining inequality holds
    while t > 1 and (t - 1) * log_keep < target:
        t -= 1
    while not t * log_keep < target:
        t += 1
    return int(t)


_EXACT_INTEGERS = 2**53
"""Beyond 2^53 consecutive integers are no longer all float64 numbers."""

_SMALLEST_EPS = 1e-307
"""The smallest eps :func:`first_step_eos_above_half` accepts (beta_eps = 6.9e306 there)."""


def _smallest_step_below(log_keep: float, target: float, start: int) -> int:
    """The smallest integer t >= 1 with ``t * log_keep < target`` in float64, from a guess ``start``.

    ``t * log_keep`` rounds ``t`` to float64 and then the product, both monotone, so the
    inequality holds from some t on: bracket it by steps that double, then bisect (about a
    hundred evaluations, whatever t)."""
    def holds(t: int) -> bool:
        return t * log_keep < target

    step = max(1, start >> 50)  # about the rounding error of start = floor(beta_eps) + 1
    hi = start
    while not holds(hi):
        hi, step = hi + step, 2 * step
    lo = max(0, hi - step)  # holds(0) is False: 0 * log_keep = -0.0 > target
    while holds(lo):
        lo, step = max(0, lo - step), 2 * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return hi


def beam_termination_bound(eps, beam_size: int) -> int:
    """Length bound for beam search on an ST or NMST model: every returned sequence has |y| <= t_{1/2} + k.

    Choi, Cho, Lee (2023), Theorem 3 (beam part, eq. 27) with t_{1/2} =
    :func:`first_step_eos_above_half` and k the beam width; Welleck et al. (2020), Theorem 4.3
    states the same argument as |Y| <= beta_eps + k with the real beta_eps = :func:`half_life_bound`
    (which they call B). Here
    |y| counts the continuation tokens including eos (ARCHITECTURE.md steps). Argument: from step
    t_{1/2} on, the eos child of every live prefix outscores all its siblings and all their
    descendants, so each step moves at least one sequence into the finished set, which is
    full after k such steps.

    We return the papers' statement, t_{1/2} + k. Counting steps exactly, the k finished
    sequences are in place after steps t_{1/2}, ..., t_{1/2} + k - 1, so the sharper bound is
    t_{1/2} + k - 1 = floor(beta_eps) + k (Welleck's beta_eps + k, rounded down); both are valid
    upper bounds (Chapter 4, Theorem "Beam search stops"; Chapter 5). The sharper one is not tight
    for every eps and k: some ST model attains it with k = 2 exactly when floor(beta_eps) <
    beta_eps log2(2 - eps) (t_{1/2} >= 2; always when eps > 1/2, t_{1/2} = 1), and with k = 3 only
    when eps > 1/2
    (``tests/test_theory.py``, "where the beam bound binds"; the k = 2 model is
    :func:`nmst_lib.theory.beam_attaining_model`).
    """
    beam_size = check_positive_int(beam_size, "beam_size")
    return first_step_eos_above_half(eps) + beam_size
