"""Checks of Assignment 4, "Sparse and temperature-shaped outputs" (Chapters 8 and 9).

The test cells of ``assignments/a4_sparse_temperature`` call these functions; each raises
``AssertionError`` with a message in the book's terms. ``check_*`` are the public tests (properties
from the theory: Theorem 8.1, Corollary 8.1, Theorem 8.5, eq. (8.2), Definition 9.1,
Propositions 9.1-9.4, Theorem 8.6, Exercise 8.3, Martins et al. (2020)'s Table 5), ``hidden_*``
the autograder's comparisons with ``nmst_lib`` on random and extreme inputs (``|z| = 1e4``,
``kappa = 1e-5``, float32, ties, masked tokens).

Problems: q1 ``sparsemax`` (Theorem 8.2), q2 ``epsilon_perplexity`` (eq. (8.2)) and
``sparsemax_score`` (Theorem 8.5), q3 ``contextual_temperature`` (Definition 9.1, eq. (9.1)) and
``ct_log_probs`` (softmax(z / T)), q5 the temperature sweep of a sparse model whose eos lies
outside the support (Theorem 8.6, Exercise 8.3), q7 ``softmax_reading_temperature``
(Proposition 9.1) and ``argmax_reachable`` (Proposition 9.4), q8 the train/test mismatch of
Martins et al. (2020)'s Table 5 on two models at the optimum of their losses
(:func:`mismatch_setting`; Chapter 8, Theorem 8.4).
"""

# A check's failure is an AssertionError (otter's test failure) whatever its
# cause, a wrong type included:
# ruff: noqa: TRY004

from __future__ import annotations

import itertools
import math
import numbers

import torch

from . import checks as C
from .a4_mismatch import (  # noqa: F401 -- q8, re-exported for the test cells
    MISMATCH,
    MISMATCH_ROWS,
    MismatchSetting,
    check_mismatch_format,
    check_mismatch_supports,
    check_mismatch_table5,
    hidden_mismatch_scores_recomputed,
    hidden_mismatch_supports_recomputed,
    mismatch_counts,
    mismatch_setting,
)
from .a4_sparse_temperature_common import (
    _as_tensor,
    _callable,
    _close,
    _shape_dtype,
    _tclose,
)
from .a4_temperature_reach import (  # noqa: F401 -- q7, re-exported for the test cells
    check_reachable_against_search,
    check_reachable_global_temperature,
    check_reachable_positive_logits,
    check_reachable_shift,
    check_softmax_reading_few_tokens_move,
    check_softmax_reading_mean,
    hidden_reachable_extreme,
    hidden_reachable_matches_library,
    hidden_softmax_reading_matches_library,
)

__all__ = [  # noqa: RUF022 -- grouped by problem, not sorted
    # q1
    "check_sparsemax_on_simplex", "check_sparsemax_threshold_form", "check_sparsemax_shift_invariance",
    "check_sparsemax_two_tokens", "hidden_sparsemax_matches_library", "hidden_sparsemax_extreme_scores",
    "hidden_sparsemax_ties", "hidden_sparsemax_float32", "hidden_sparsemax_masked_tokens",
    # q2
    "check_eps_perplexity_without_smoothing", "check_eps_perplexity_uniform_and_zeros",
    "check_sparsemax_score_bounds", "check_sparsemax_score_whole_distribution",
    "hidden_eps_perplexity_matches_library", "hidden_eps_perplexity_zero_probabilities",
    "hidden_sparsemax_score_matches_library",
    # q3
    "check_temperature_range", "check_temperature_constant_start", "check_ct_log_probs_global",
    "check_global_temperature_entropy_and_ranking", "hidden_temperature_matches_library",
    "hidden_ct_log_probs_matches_library", "hidden_ct_log_probs_extreme",
    # q5
    "SWEEP", "TemperedBigram", "sweep_scores", "check_sweep_format", "check_sweep_theorem_8_6",
    "check_sweep_monotone", "hidden_sweep_support_recomputed", "hidden_sweep_rnt_recomputed",
    # q7
    "check_softmax_reading_mean", "check_softmax_reading_few_tokens_move",
    "hidden_softmax_reading_matches_library",
    "check_reachable_global_temperature", "check_reachable_positive_logits",
    "check_reachable_shift", "check_reachable_against_search",
    "hidden_reachable_matches_library", "hidden_reachable_extreme",
    # q8
    "MISMATCH", "MISMATCH_ROWS", "MismatchSetting", "mismatch_counts",
    "mismatch_setting",
    "check_mismatch_format", "check_mismatch_supports",
    "check_mismatch_table5", "hidden_mismatch_supports_recomputed",
    "hidden_mismatch_scores_recomputed",
]


_THM81 = "Theorem 8.1 (alpha = 2: p = [z - tau]_+), Chapter 8"
_THM82 = "Theorem 8.2 (sort-based sparsemax), Chapter 8"


# ============================================================================== q1: sparsemax

def _student_sparsemax(sparsemax, z: torch.Tensor) -> torch.Tensor:
    _callable(sparsemax, "sparsemax")
    p = _as_tensor(C.call_student(sparsemax, z.clone(), name="sparsemax"), "sparsemax")
    _shape_dtype(p, z, "sparsemax")
    return p


def check_sparsemax_on_simplex(sparsemax) -> None:
    """Definition 8.2 (alpha = 2), Chapter 8: every row of sparsemax(z) is a point of the simplex
    (non-negative, sums to 1), for 2-d and 3-d inputs (along the last dimension)."""
    g = C.generator(81)
    for z in (2 * torch.randn(6, 10, generator=g, dtype=torch.float64),
              torch.randn(2, 3, 7, generator=g, dtype=torch.float64)):
        p = _student_sparsemax(sparsemax, z)
        C.expect(bool(torch.isfinite(p).all()), "sparsemax(z) has non-finite entries (nan or inf)")
        C.expect(float(p.min()) >= 0.0, f"sparsemax(z) has a negative entry ({C.fmt(float(p.min()))}): "
                 "a probability is >= 0 (Definition 8.2, the simplex), so threshold with [.]_+ = max(., 0)")
        sums = p.sum(-1)
        worst = float((sums - 1).abs().max())
        C.expect(worst <= 1e-9, f"a row of sparsemax(z) sums to {C.fmt(float(sums.flatten()[(sums - 1).abs().flatten().argmax()]), 8)}, "
                 f"not 1: the threshold tau = (sum of the k* largest scores - 1)/k* makes the support sum to 1 ({_THM82})")


def check_sparsemax_threshold_form(sparsemax) -> None:
    """Theorem 8.1 with alpha = 2 and Corollary 8.1 (Chapter 8): p = [z - tau]_+ with ONE threshold
    tau per row (so z_v - p_v is the same on the support and z_v <= tau off it), and every token
    scoring at least 1 below the best gets an exact zero."""
    g = C.generator(82)
    z = 1.5 * torch.randn(8, 12, generator=g, dtype=torch.float64)
    p = _student_sparsemax(sparsemax, z)
    for r in range(z.shape[0]):
        support = p[r] > 0
        C.expect(bool(support.any()), f"row {r} of sparsemax(z) is all zeros: the best token always has p > 0 "
                 "(Corollary 8.1, part 1)")
        taus = z[r][support] - p[r][support]
        C.expect(float(taus.max() - taus.min()) <= 1e-9,
                 f"row {r}: on the support p_v = z_v - tau needs one threshold tau, but z_v - p_v ranges from "
                 f"{C.fmt(float(taus.min()))} to {C.fmt(float(taus.max()))} ({_THM81}; a softmax is not sparsemax)")
        tau = float(taus.mean())
        outside = z[r][~support]
        if outside.numel():
            C.expect(float(outside.max()) <= tau + 1e-9,
                     f"row {r}: token scoring z = {C.fmt(float(outside.max()))} gets p = 0 although it is above the "
                     f"threshold tau = {C.fmt(tau)}; the support is {{v : z_v > tau}} ({_THM81})")
        far = z[r] <= z[r].max() - 1.0
        C.expect(bool((p[r][far] == 0).all()),
                 f"row {r}: a token at least 1 below the best score gets p = {C.fmt(float(p[r][far].abs().max()))}, "
                 "not an exact zero (Corollary 8.1, part 1: margin 1/(alpha - 1) = 1 for sparsemax)")


def check_sparsemax_shift_invariance(sparsemax) -> None:
    """Corollary 8.1, part 3 (Chapter 8): sparsemax(z + c 1) = sparsemax(z) for every constant c."""
    g = C.generator(83)
    z = 2 * torch.randn(5, 9, generator=g, dtype=torch.float64)
    p = _student_sparsemax(sparsemax, z)
    for c in (7.0, -3.5, 100.0):
        _tclose(_student_sparsemax(sparsemax, z + c), p, f"with c = {c:g}, sparsemax(z + c)",
                              "sparsemax(z) (Corollary 8.1, part 3: shift invariance)", rtol=0, atol=1e-9)


def check_sparsemax_two_tokens(sparsemax) -> None:
    """Exercise 8.2 (Chapter 8): for two tokens with d = z_1 - z_2, sparsemax(z)_1 = min(max((1 + d)/2, 0), 1);
    the token is alone in the support once d >= 1 (the margin 1/(alpha - 1) of Corollary 8.1, part 1)."""
    d = torch.linspace(-3, 3, 61, dtype=torch.float64)
    z = torch.stack([d, torch.zeros_like(d)], dim=-1)
    p = _student_sparsemax(sparsemax, z)
    want = torch.clamp((1 + d) / 2, 0.0, 1.0)
    for i in range(d.shape[0]):
        _close(p[i, 0], want[i], f"for z = [d, 0] with d = {float(d[i]):.1f}, sparsemax(z)_1",
               "the two-token formula min(max((1 + d)/2, 0), 1) (Exercise 8.2, Chapter 8)", rtol=0, atol=1e-9)


def _compare_sparsemax(sparsemax, z: torch.Tensor, what: str, atol: float) -> None:
    from nmst_lib.entmax import sparsemax as reference
    p = _student_sparsemax(sparsemax, z)
    _tclose(p, reference(z), f"on {what}, sparsemax(z)", f"nmst_lib.entmax.sparsemax ({_THM82})",
                          rtol=0, atol=atol)


def hidden_sparsemax_matches_library(sparsemax) -> None:
    """Theorem 8.2 (Chapter 8): equals ``nmst_lib.entmax.sparsemax`` on random float64 scores, 2-d and 3-d."""
    g = C.generator(84)
    _compare_sparsemax(sparsemax, 3 * torch.randn(16, 50, generator=g, dtype=torch.float64), "random scores [16, 50]", 1e-10)
    _compare_sparsemax(sparsemax, torch.randn(3, 4, 30, generator=g, dtype=torch.float64), "random scores [3, 4, 30]", 1e-10)
    _compare_sparsemax(sparsemax, 0.05 * torch.randn(4, 200, generator=g, dtype=torch.float64),
                       "nearly flat scores (large support)", 1e-10)


def hidden_sparsemax_extreme_scores(sparsemax) -> None:
    """Theorem 8.2 (Chapter 8) at |z| = 1e4 (float64): no overflow, the same result as the library."""
    g = C.generator(85)
    z = 1e4 * torch.randn(6, 40, generator=g, dtype=torch.float64)
    z[0, :3] = 1e4  # a three-way tie at the top, far above the rest
    z[1] = 1e4 + torch.linspace(0, 1.5, 40, dtype=torch.float64)  # large offset, several in the support
    _compare_sparsemax(sparsemax, z, "|z| = 1e4", 1e-8)


def hidden_sparsemax_ties(sparsemax) -> None:
    """Theorem 8.2 (Chapter 8) with many tied scores (integers 0..2)."""
    g = C.generator(86)
    z = torch.randint(0, 3, (10, 20), generator=g).double()
    z[0] = 1.0  # all equal: the uniform distribution
    _compare_sparsemax(sparsemax, z, "tied integer scores", 1e-12)


def hidden_sparsemax_float32(sparsemax) -> None:
    """Theorem 8.2 (Chapter 8) in float32: dtype kept, within 1e-5 of the library."""
    g = C.generator(87)
    _compare_sparsemax(sparsemax, (2 * torch.randn(8, 1000, generator=g)).float(), "float32 scores [8, 1000]", 1e-5)


def hidden_sparsemax_masked_tokens(sparsemax) -> None:
    """Theorem 8.2 (Chapter 8) with -inf scores (masked tokens): they get exactly 0, the rest as the library."""
    g = C.generator(88)
    z = torch.randn(5, 40, generator=g, dtype=torch.float64)
    z[3] -= 6.0  # every finite score far below 0: a masked token read as 0 would take all the mass
    z[:, ::3] = -math.inf
    p = _student_sparsemax(sparsemax, z)
    leak = (z == -math.inf) & (p != 0)
    if bool(leak.any()):
        r, v = (int(i) for i in leak.nonzero()[0])
        raise AssertionError(f"token {v} of row {r} has score -inf (masked) but probability {C.fmt(float(p[r, v]))}: "
                             "a masked token must get probability exactly 0 (its bracket [-inf - tau]_+ is 0, "
                             f"{_THM81})")
    _compare_sparsemax(sparsemax, z, "scores with -inf entries", 1e-10)


# ============================================================================== q2: metrics

_EQ82 = "eq. (8.2), Chapter 8"


def _student_eps_ppl(epsilon_perplexity, probs, vocab_size: int, kappa: float) -> float:
    _callable(epsilon_perplexity, "epsilon_perplexity")
    out = C.call_student(epsilon_perplexity, probs.clone(), vocab_size, kappa, name="epsilon_perplexity")
    if isinstance(out, tuple):
        raise AssertionError("`epsilon_perplexity` returned a tuple; return the eps-perplexity alone, a number "
                             "(kappa is given, not optimised here)")
    if isinstance(out, torch.Tensor):
        C.expect(out.numel() == 1, f"`epsilon_perplexity` returned a tensor of shape {tuple(out.shape)}; return one "
                 "number: the mean over all positions is inside the exp of eq. (8.2)")
        return float(out.detach())
    if isinstance(out, numbers.Real) and not isinstance(out, bool):
        return float(out)
    raise AssertionError(f"`epsilon_perplexity` returned a {type(out).__name__}; return a number")


def check_eps_perplexity_without_smoothing(epsilon_perplexity) -> None:
    """Eq. (8.2) with kappa = 0 (Chapter 8) is the plain perplexity exp(-mean log p_t) when every p_t > 0."""
    g = C.generator(91)
    p = torch.rand(200, generator=g, dtype=torch.float64) * 0.9 + 0.05
    want = math.exp(-float(torch.log(p).mean()))
    got = _student_eps_ppl(epsilon_perplexity, p, 1000, 0.0)
    rounding = math.isfinite(got) and abs(got - want) <= 1e-5 * want
    C.expect_close(got, want, "the eps-perplexity with kappa = 0", f"the plain perplexity exp(-mean log p_t) ({_EQ82})",
                   rtol=1e-9, atol=1e-12,
                   hint="the two differ only after the 5th digit, as float32 rounding does: accumulate the mean and "
                   "take its exp in float64, as the problem asks" if rounding else "")


def check_eps_perplexity_uniform_and_zeros(epsilon_perplexity) -> None:
    """Eq. (8.2) (Chapter 8): a model that gives every reference word 1/|V| has eps-perplexity |V| for
    every kappa; with kappa > 0 a reference word of probability 0 leaves it finite (Proposition 8.1)."""
    V = 50
    p = torch.full((30,), 1.0 / V, dtype=torch.float64)
    for kappa in (0.0, 0.01, 10.0):
        got = _student_eps_ppl(epsilon_perplexity, p, V, kappa)
        _close(got, float(V), f"the eps-perplexity of p_t = 1/|V| = 1/{V} with kappa = {kappa:g}",
                       f"{_EQ82}: (1/|V| + kappa)/(1 + kappa |V|) = 1/|V| for every kappa, so eps-ppl = |V|",
                       rtol=1e-9)
    q = torch.tensor([0.0, 0.5, 0.25, 0.0, 0.9], dtype=torch.float64)
    got = _student_eps_ppl(epsilon_perplexity, q, V, 0.01)
    C.expect(math.isfinite(got) and got > 0, f"with kappa = 0.01 and two reference words of probability 0 the "
             f"eps-perplexity is {C.fmt(got)}; smoothing makes every term of {_EQ82} positive, so it must be finite")


def _student_score(sparsemax_score, probs, target) -> torch.Tensor:
    _callable(sparsemax_score, "sparsemax_score")
    out = _as_tensor(C.call_student(sparsemax_score, probs.clone(), target.clone(), name="sparsemax_score"),
                     "sparsemax_score")
    C.expect(tuple(out.shape) == tuple(probs.shape[:-1]),
             f"`sparsemax_score` returned shape {tuple(out.shape)} for probs {tuple(probs.shape)}: one score per "
             f"position, shape {tuple(probs.shape[:-1])}")
    return out.to(torch.float64)


_THM85 = "Theorem 8.5, Chapter 8"


def check_sparsemax_score_bounds(sparsemax_score) -> None:
    """Theorem 8.5, parts 2-3 (Chapter 8): 0 <= sp <= 1; a one-hot p scores the word accuracy;
    the uniform p scores 1/|V| + (1 - 1/|V|)/2."""
    V = 6
    target = torch.tensor([0, 2, 5, 5])
    onehot = torch.zeros(4, V, dtype=torch.float64)
    onehot[torch.arange(4), torch.tensor([0, 1, 5, 3])] = 1.0
    _tclose(_student_score(sparsemax_score, onehot, target),
                          torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64),
                          "for one-hot predictions e_yhat, sp(e_yhat, y)",
                          "the word accuracy 1[yhat = y] (Theorem 8.5, part 3, Chapter 8)", rtol=0, atol=1e-12)
    uniform = torch.full((2, V), 1.0 / V, dtype=torch.float64)
    want = 1.0 / V + 0.5 * (1 - 1.0 / V)
    _tclose(_student_score(sparsemax_score, uniform, torch.tensor([0, 3])),
                          torch.full((2,), want, dtype=torch.float64), "for the uniform p, sp(p, y)",
                          "1/|V| + (1 - 1/|V|)/2 (Theorem 8.5, part 3, Chapter 8)", rtol=0, atol=1e-12)
    g = C.generator(92)
    p = torch.distributions.Dirichlet(torch.full((V,), 0.5, dtype=torch.float64)).sample((50,))
    s = _student_score(sparsemax_score, p, torch.randint(0, V, (50,), generator=g))
    bad = (s < -1e-12) | (s > 1 + 1e-12)
    if bool(bad.any()):
        raise AssertionError(f"a sparsemax score is {C.fmt(float(s[bad][0]))}, outside [0, 1] (Theorem 8.5, part 2, Chapter 8)")


def check_sparsemax_score_whole_distribution(sparsemax_score) -> None:
    """Theorem 8.5, part 1 (Chapter 8): sp = p_y + (1 - ||p||^2)/2 = 1 - ||p - e_y||^2 / 2, so of two
    distributions with the same p_y, the one that spreads the rest more thinly scores higher."""
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.5, 0.25, 0.25, 0.0]], dtype=torch.float64)
    s = _student_score(sparsemax_score, p, torch.tensor([0, 0]))
    C.expect(float(s[1]) > float(s[0]) + 1e-6,
             f"p = (0.5, 0.5, 0, 0) scores {C.fmt(float(s[0]))} and p = (0.5, 0.25, 0.25, 0) scores {C.fmt(float(s[1]))} "
             f"for y = 0: the score looks at the whole distribution, not only at p_y = 0.5 (H_2(p) in {_THM85})")
    g = C.generator(93)
    q = torch.distributions.Dirichlet(torch.full((9,), 0.3, dtype=torch.float64)).sample((40,))
    y = torch.randint(0, 9, (40,), generator=g)
    want = 1 - 0.5 * ((q - torch.nn.functional.one_hot(y, 9).double()) ** 2).sum(-1)
    _tclose(_student_score(sparsemax_score, q, y), want, "on random distributions, sp(p, y)",
                          "1 - ||p - e_y||^2 / 2 (Theorem 8.5, part 1, Chapter 8)", rtol=0, atol=1e-10)


def hidden_eps_perplexity_matches_library(epsilon_perplexity) -> None:
    """Eq. (8.2) (Chapter 8): equals ``nmst_lib.metrics.epsilon_perplexity(p, V, eps=kappa)`` on random
    probabilities with exact zeros, kappa in {1e-5, 1e-3, 0.5}, |V| = 50,257, float64 and float32."""
    from nmst_lib.metrics import epsilon_perplexity as reference
    g = C.generator(94)
    V = 50_257
    p = torch.rand(2000, generator=g, dtype=torch.float64) ** 4
    p[::7] = 0.0
    for kappa in (1e-5, 1e-3, 0.5):
        want = reference(p, V, eps=kappa)[0]
        _close(_student_eps_ppl(epsilon_perplexity, p, V, kappa), want,
                       f"the eps-perplexity with kappa = {kappa:g}, |V| = {V}", f"nmst_lib.metrics.epsilon_perplexity ({_EQ82})",
                       rtol=1e-8)
    pf = p.float().reshape(40, 50)
    want = reference(pf, V, eps=1e-5)[0]
    _close(_student_eps_ppl(epsilon_perplexity, pf, V, 1e-5), want,
                   "the eps-perplexity of float32 probabilities [40, 50] (every entry scored) with kappa = 1e-5",
                   f"nmst_lib.metrics.epsilon_perplexity ({_EQ82})", rtol=1e-5)


def hidden_eps_perplexity_zero_probabilities(epsilon_perplexity) -> None:
    """Eq. (8.2) (Chapter 8): kappa = 0 with a zero probability is the infinite plain perplexity;
    all-zero probabilities with kappa = 1e-5 give (1 + kappa |V|)/kappa."""
    p = torch.tensor([0.3, 0.0, 0.6], dtype=torch.float64)
    got = _student_eps_ppl(epsilon_perplexity, p, 100, 0.0)
    C.expect(math.isinf(got) and got > 0, f"with kappa = 0 and a reference word of probability 0 the eps-perplexity "
             f"is {C.fmt(got)}; eq. (8.2) is then the plain perplexity, +inf")
    z = torch.zeros(10, dtype=torch.float64)
    kappa, V = 1e-5, 50_257
    _close(_student_eps_ppl(epsilon_perplexity, z, V, kappa), (1 + kappa * V) / kappa,
                   "the eps-perplexity of all-zero probabilities, kappa = 1e-5", f"(1 + kappa |V|)/kappa ({_EQ82})",
                   rtol=1e-9)


def hidden_sparsemax_score_matches_library(sparsemax_score) -> None:
    """Theorem 8.5 (Chapter 8): equals ``nmst_lib.metrics.sparsemax_score`` on sparse distributions
    (sparsemax outputs, exact zeros at the target included), 3-d, float64 and float32."""
    from nmst_lib.entmax import sparsemax
    from nmst_lib.metrics import sparsemax_score as reference
    g = C.generator(95)
    p = sparsemax(2 * torch.randn(4, 6, 30, generator=g, dtype=torch.float64))
    y = torch.randint(0, 30, (4, 6), generator=g)
    y[0, 0] = int((p[0, 0] == 0).nonzero()[0])  # a reference word of probability exactly 0
    _tclose(_student_score(sparsemax_score, p, y), reference(p, y), "on sparsemax outputs (some p_y = 0), sp(p, y)",
                          f"nmst_lib.metrics.sparsemax_score ({_THM85})", rtol=0, atol=1e-12)
    pf = p.float()
    _tclose(_student_score(sparsemax_score, pf, y), reference(pf, y).double(), "on the same in float32, sp(p, y)",
                          f"nmst_lib.metrics.sparsemax_score ({_THM85})", rtol=0, atol=1e-5)


# ============================================================================== q3: contextual temperature

_DEF91 = "Definition 9.1, eq. (9.1), Chapter 9"


def _student_temperature(contextual_temperature, h, W1, W2, a, b) -> torch.Tensor:
    _callable(contextual_temperature, "contextual_temperature")
    T = _as_tensor(C.call_student(contextual_temperature, h.clone(), W1.clone(), W2.clone(), a, b,
                                  name="contextual_temperature"), "contextual_temperature")
    want_shape = tuple(h.shape[:-1]) + (W2.shape[-1],)
    C.expect(tuple(T.shape) == want_shape,
             f"`contextual_temperature` returned shape {tuple(T.shape)} for h {tuple(h.shape)}, W1 {tuple(W1.shape)}, "
             f"W2 {tuple(W2.shape)}: one temperature per token, shape {want_shape} ({_DEF91})")
    return T


def _random_temperature_inputs(seed: int, scale: float, shape=(4, 5), d=6, Q=3, V=11):
    g = C.generator(seed)
    h = torch.randn(*shape, d, generator=g, dtype=torch.float64)
    W1 = scale * torch.randn(d, Q, generator=g, dtype=torch.float64)
    W2 = scale * torch.randn(Q, V, generator=g, dtype=torch.float64)
    return h, W1, W2


def check_temperature_range(contextual_temperature) -> None:
    """Definition 9.1, eq. (9.1) (Chapter 9): every T_{t,v} lies in [a/b, (1 + a)/b], also when the scores
    eta are huge (|eta| up to about 1e4: the sigmoid saturates, nothing overflows)."""
    for (a, b), scale in (((1.0, 0.5), 1.0), ((1.0, 0.5), 40.0), ((0.5, 2.0), 3.0)):
        h, W1, W2 = _random_temperature_inputs(101, scale)
        T = _student_temperature(contextual_temperature, h, W1, W2, a, b)
        lo, hi = a / b, (1 + a) / b
        C.expect(bool(torch.isfinite(T).all()), f"some temperatures are not finite (a = {a}, b = {b}, weights of scale "
                 f"{scale:g}): eq. (9.1) is bounded")
        bad = (T < lo - 1e-12) | (T > hi + 1e-12)
        if bool(bad.any()):
            raise AssertionError(
                 f"a temperature is {C.fmt(float(T[bad][0]))}, outside [a/b, (1 + a)/b] = [{lo:g}, {hi:g}] for a = {a:g}, "
                 f"b = {b:g} ({_DEF91})")


def check_temperature_constant_start(contextual_temperature) -> None:
    """Definition 9.1 (Chapter 9): with W2 = 0 every eta is 0 and every temperature is (sigma(0) + a)/b
    = (1/2 + a)/b (3 for the paper's a = 1, b = 1/2), whatever the hidden state."""
    h, W1, W2 = _random_temperature_inputs(102, 1.0)
    T = _student_temperature(contextual_temperature, h, W1, torch.zeros_like(W2), 1.0, 0.5)
    bad = (T - 3.0).abs() > 1e-12
    if bool(bad.any()):
        raise AssertionError(
             f"with W2 = 0 a temperature is {C.fmt(float(T[bad][0]))}, but eq. (9.1) gives (sigma(0) + a)/b = "
             f"(1/2 + 1)/(1/2) = 3 for every token ({_DEF91}: sigma is the logistic sigmoid applied to every entry; a "
             f"softmax over the vocabulary would give (1/|V| + a)/b, the reading of Proposition 9.1)")


def _student_ct(ct_log_probs, z, T) -> torch.Tensor:
    _callable(ct_log_probs, "ct_log_probs")
    T_in = T.clone() if isinstance(T, torch.Tensor) else T
    out = _as_tensor(C.call_student(ct_log_probs, z.clone(), T_in, name="ct_log_probs"), "ct_log_probs")
    C.expect(tuple(out.shape) == tuple(z.shape),
             f"`ct_log_probs` returned shape {tuple(out.shape)} for logits of shape {tuple(z.shape)}")
    C.expect(out.dtype == z.dtype, f"`ct_log_probs` returned dtype {out.dtype} for {z.dtype} logits: keep the dtype")
    return out


def check_ct_log_probs_global(ct_log_probs) -> None:
    """Definition 9.1 (Chapter 9): with one temperature for every token (a number, or shape [..., 1])
    ct_log_probs(z, T) is log softmax(z / T); with one per token its rows are normalised."""
    g = C.generator(103)
    z = 3 * torch.randn(5, 12, generator=g, dtype=torch.float64)
    for T in (0.5, 2.0):
        _tclose(_student_ct(ct_log_probs, z, T), torch.log_softmax(z / T, -1),
                              f"with the global T = {T:g}, ct_log_probs(z, T)", f"log softmax(z / T) with one global T ({_DEF91})",
                              rtol=1e-9, atol=1e-12)
    Trow = 2 + 2 * torch.rand(5, 1, generator=g, dtype=torch.float64)
    _tclose(_student_ct(ct_log_probs, z, Trow), torch.log_softmax(z / Trow, -1),
                          "with T of shape [5, 1], ct_log_probs(z, T)", f"log softmax(z / T_t) row by row ({_DEF91})",
                          rtol=1e-9, atol=1e-12)
    Ttok = 2 + 2 * torch.rand(5, 12, generator=g, dtype=torch.float64)
    lp = _student_ct(ct_log_probs, z, Ttok)
    sums = torch.logsumexp(lp, -1)
    C.expect(float(sums.abs().max()) <= 1e-9,
             f"with one temperature per token, a row of exp(ct_log_probs(z, T)) sums to {C.fmt(float(sums.exp()[sums.abs().argmax()]), 8)}, "
             f"not 1: normalise over the vocabulary after dividing z by T entry by entry ({_DEF91})")


def check_global_temperature_entropy_and_ranking(ct_log_probs) -> None:
    """Propositions 9.2 and 9.3 (Chapter 9): under one global T the entropy of softmax(z / T) is
    non-decreasing in T, and the ranking of the tokens (greedy search's choice) does not change."""
    g = C.generator(104)
    z = 2 * torch.randn(4, 15, generator=g, dtype=torch.float64)
    Ts = (0.1, 0.3, 0.5, 1.0, 2.0, 4.0, 10.0)
    order = torch.argsort(z, dim=-1, descending=True, stable=True)
    H_prev = None
    for T in Ts:
        lp = _student_ct(ct_log_probs, z, T)
        H = -(lp.exp() * lp).sum(-1)
        if H_prev is not None and bool((H < H_prev - 1e-9).any()):
            raise AssertionError(
                     f"the entropy of softmax(z / T) falls from {C.fmt(float(H_prev[(H < H_prev - 1e-9)][0]))} to "
                     f"{C.fmt(float(H[(H < H_prev - 1e-9)][0]))} as T rises to {T:g}; dH/dT = Var_p(z)/T^3 >= 0 "
                     "(Proposition 9.2, eq. (9.3), Chapter 9)")
        C.expect(torch.equal(torch.argsort(lp, dim=-1, descending=True, stable=True), order),
                 f"at T = {T:g} the ranking of the tokens differs from the ranking of z: a global temperature keeps it "
                 "(Proposition 9.3, part 1, Chapter 9)")
        H_prev = H


def hidden_temperature_matches_library(contextual_temperature) -> None:
    """Definition 9.1 (Chapter 9): equals ``nmst_lib.temperature.ContextualTemperature`` with the same W1, W2
    (``nn.Linear`` stores their transposes) for (a, b) = (1, 1/2) and (0.3, 1.7), on [..., d] hidden states."""
    from nmst_lib.temperature import ContextualTemperature
    for (a, b), seed in (((1.0, 0.5), 105), ((0.3, 1.7), 106)):
        h, W1, W2 = _random_temperature_inputs(seed, 2.0, shape=(3, 4), d=6, Q=3, V=11)
        module = ContextualTemperature(6, 11, 3, "sigmoid", a=a, b=b).double()
        with torch.no_grad():
            module.W1.weight.copy_(W1.T)
            module.W2.weight.copy_(W2.T)
            want = module(h)
        _tclose(_student_temperature(contextual_temperature, h, W1, W2, a, b), want,
                              f"for a = {a:g}, b = {b:g}, T", f"nmst_lib.temperature.ContextualTemperature ({_DEF91})",
                              rtol=1e-10, atol=1e-12)


def hidden_ct_log_probs_matches_library(ct_log_probs) -> None:
    """Definition 9.1 (Chapter 9): equals ``nmst_lib.theory.tempered_log_softmax`` with per-token temperatures
    [B, T, V] and per-row temperatures [B, T, 1], float64."""
    from nmst_lib.theory import tempered_log_softmax
    g = C.generator(107)
    z = 4 * torch.randn(3, 5, 20, generator=g, dtype=torch.float64)
    for T in (2 + 2 * torch.rand(3, 5, 20, generator=g, dtype=torch.float64),
              0.2 + torch.rand(3, 5, 1, generator=g, dtype=torch.float64)):
        _tclose(_student_ct(ct_log_probs, z, T), tempered_log_softmax(z, T),
                              f"with T of shape {tuple(T.shape)}, ct_log_probs(z, T)",
                              f"nmst_lib.theory.tempered_log_softmax ({_DEF91})", rtol=1e-9, atol=1e-10)


def hidden_ct_log_probs_extreme(ct_log_probs) -> None:
    """Definition 9.1 (Chapter 9) at |z| = 1e4 with T in [2, 4], float64 and float32: finite where the
    library is, no overflow (exp(1e4 / 2) is inf: work in log space)."""
    from nmst_lib.theory import tempered_log_softmax
    g = C.generator(108)
    z = 1e4 * torch.randn(6, 30, generator=g, dtype=torch.float64)
    T = 2 + 2 * torch.rand(6, 30, generator=g, dtype=torch.float64)
    _tclose(_student_ct(ct_log_probs, z, T), tempered_log_softmax(z, T), "at |z| = 1e4 (float64), ct_log_probs(z, T)",
                          f"nmst_lib.theory.tempered_log_softmax ({_DEF91}; compute it with log_softmax)",
                          rtol=1e-9, atol=1e-6)
    zf, Tf = z.float(), T.float()
    _tclose(_student_ct(ct_log_probs, zf, Tf), tempered_log_softmax(zf, Tf),
                          "at |z| = 1e4 in float32, ct_log_probs(z, T)",
                          f"nmst_lib.theory.tempered_log_softmax ({_DEF91})", rtol=1e-5, atol=1e-2)


# ============================================================================== q5: the temperature sweep

#: The experiment's fixed settings (the notebook defines the same constants; the checks use these).
SWEEP = {
    "alpha": 1.5,           # 1.5-entmax output layer
    "gap_factor": 1.5,      # eos scores 1.5/(alpha - 1) below the best: (8.3) holds with room to spare
    "vocab_size": 8,
    "temperatures": (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0),
    "Ls": (10, 50, 200),
    "n": 1000,
    "seed": 0,
}


def sweep_scores() -> torch.Tensor:
    """The bigram scores [V, V] of the experiment: ``theory.eos_outside_support_model(8, 1.5, gap_factor=1.5,
    seed=0)`` on CPU (row i: the scores after token i; eos is the last id)."""
    from nmst_lib import theory
    return theory.eos_outside_support_model(SWEEP["vocab_size"], SWEEP["alpha"], gap_factor=SWEEP["gap_factor"],
                                            seed=0, device="cpu").scores


class TemperedBigram:
    """A bigram model whose next-token distribution after token i is alpha-entmax(scores[i] / T), in the
    decoding protocol of ``nmst_lib.decoding`` (the same class as the notebook's)."""

    def __init__(self, scores: torch.Tensor, alpha: float, T: float):
        from nmst_lib.entmax import entmax
        self.vocab_size = int(scores.shape[0])
        self.eos_id = self.vocab_size - 1
        self.log_table = torch.log(entmax(scores / T, alpha))  # [V, V]: -inf outside the support

    def initial_state(self, contexts):
        last = contexts[:, -1]
        return last, self.log_table[last]

    def step(self, state, tokens):
        return tokens, self.log_table[tokens]

    def select(self, state, index):
        return state[index]


def _sweep_entry(results, T):
    for key in results:
        if isinstance(key, numbers.Real) and not isinstance(key, bool) and math.isclose(float(key), T):
            return results[key]
    raise AssertionError(f"`results` has no entry for T = {T:g}; its keys should be the temperatures "
                         f"{list(SWEEP['temperatures'])}")


def _check_results_object(results) -> None:
    if results is None or results is Ellipsis:
        raise C.NotImplementedYet("`results` is None: `temperature_sweep` is not implemented yet (replace the `...`)")
    if not isinstance(results, dict):
        raise AssertionError(f"`results` is a {type(results).__name__}; it should be a dict {{T: {{'support': ..., "
                             "'eos_rows': ..., 'rnt': [...]}}}}")


def check_sweep_format(results) -> None:
    """The experiment's result table: one entry per temperature with the mean support size in [1, |V|],
    the number of rows with p(eos) > 0 in [0, |V| - 1] and r_nt(L) in [0, 1] for each L (Chapter 8)."""
    _check_results_object(results)
    V = SWEEP["vocab_size"]
    for T in SWEEP["temperatures"]:
        entry = _sweep_entry(results, T)
        C.expect(isinstance(entry, dict) and {"support", "eos_rows", "rnt"} <= set(entry),
                 f"results[{T:g}] should be a dict with the keys 'support', 'eos_rows' and 'rnt'")
        support, eos_rows, rnt = float(entry["support"]), entry["eos_rows"], list(entry["rnt"])
        C.expect(1.0 <= support <= V, f"results[{T:g}]['support'] = {C.fmt(support)}: a mean support size lies in "
                 f"[1, |V|] = [1, {V}] (the best token always has p > 0, Corollary 8.1)")
        C.expect(float(eos_rows) == int(eos_rows) and 0 <= int(eos_rows) <= V - 1,
                 f"results[{T:g}]['eos_rows'] = {eos_rows!r}: a count of the {V - 1} non-eos rows")
        C.expect(len(rnt) == len(SWEEP["Ls"]) and all(0.0 <= float(r) <= 1.0 for r in rnt),
                 f"results[{T:g}]['rnt'] = {rnt!r}: r_nt(L) for L in {list(SWEEP['Ls'])}, each a fraction in [0, 1]")


def check_sweep_theorem_8_6(results) -> None:
    """Theorem 8.6 and Corollary 8.1 (Chapter 8) on the sweep: for T <= gap_factor the scaled scores z/T still
    satisfy (8.3), so no row gives eos positive probability; and wherever no row does, nothing stops:
    r_nt(L) = 1 for every L."""
    check_sweep_format(results)
    for T in SWEEP["temperatures"]:
        entry = _sweep_entry(results, T)
        if T <= SWEEP["gap_factor"]:
            C.expect(int(entry["eos_rows"]) == 0,
                     f"at T = {T:g} eos has positive probability after {int(entry['eos_rows'])} token(s), but its score is "
                     f"{SWEEP['gap_factor']:g}/((alpha - 1) T) >= 1/(alpha - 1) below the best one, so "
                     "Corollary 8.1 (part 1) gives it p = 0 (Chapter 8)")
        if int(entry["eos_rows"]) == 0:
            C.expect(all(float(r) == 1.0 for r in entry["rnt"]),
                     f"at T = {T:g} no row gives eos positive probability, yet r_nt = {list(entry['rnt'])}: no sequence "
                     "can stop, r_nt(L) = 1 for every L (Theorem 8.6, Chapter 8)")


def check_sweep_monotone(results) -> None:
    """Exercise 8.3 (Chapter 8): the support of alpha-entmax(z / T) can only grow with T, so the mean support
    size and the number of rows with p(eos) > 0 are non-decreasing in T; r_nt(L) is non-increasing in L."""
    check_sweep_format(results)
    Ts = SWEEP["temperatures"]
    entries = [_sweep_entry(results, T) for T in Ts]
    for (T0, e0), (T1, e1) in zip(zip(Ts, entries), zip(Ts[1:], entries[1:])):
        C.expect(float(e1["support"]) >= float(e0["support"]) - 1e-12,
                 f"the mean support size falls from {C.fmt(float(e0['support']))} at T = {T0:g} to "
                 f"{C.fmt(float(e1['support']))} at T = {T1:g}; raising T can only add tokens (Exercise 8.3, Chapter 8)")
        C.expect(int(e1["eos_rows"]) >= int(e0["eos_rows"]),
                 f"the number of rows with p(eos) > 0 falls from {int(e0['eos_rows'])} at T = {T0:g} to "
                 f"{int(e1['eos_rows'])} at T = {T1:g} (Exercise 8.3, Chapter 8: the support only grows with T)")
    for T, e in zip(Ts, entries):
        r = [float(x) for x in e["rnt"]]
        C.expect(all(b <= a + 1e-12 for a, b in itertools.pairwise(r)),
                 f"at T = {T:g} r_nt(L) = {r} for L = {list(SWEEP['Ls'])} rises with L; r_nt(L) = q(|y| > L) can only "
                 "fall as L grows")


def _recomputed_support(T: float):
    from nmst_lib.entmax import entmax
    p = entmax(sweep_scores()[:-1] / T, SWEEP["alpha"])  # the non-eos rows
    return float((p > 0).sum(-1).double().mean()), int((p[:, -1] > 0).sum())


def hidden_sweep_support_recomputed(results) -> None:
    """The sweep's support sizes and eos counts recomputed with ``nmst_lib.entmax.entmax`` (Chapter 8)."""
    check_sweep_format(results)
    for T in SWEEP["temperatures"]:
        entry = _sweep_entry(results, T)
        support, eos_rows = _recomputed_support(T)
        _close(float(entry["support"]), support, f"the mean support size at T = {T:g}",
                       "1.5-entmax(scores[i] / T) over the 7 non-eos rows", rtol=1e-9)
        C.expect(int(entry["eos_rows"]) == eos_rows, f"at T = {T:g} you count {int(entry['eos_rows'])} rows with "
                 f"p(eos) > 0, but 1.5-entmax(scores[i] / T) over the 7 non-eos rows gives {eos_rows}")


def hidden_sweep_rnt_recomputed(results) -> None:
    """The sweep's r_nt(L) recomputed with the statement's recipe: ``decoding.decode(TemperedBigram(...),
    contexts, "ancestral", max_len=200, generator=torch.Generator().manual_seed(0))`` for each T, then
    ``metrics.non_termination_ratio`` (Chapter 8)."""
    from nmst_lib import decoding, metrics
    check_sweep_format(results)
    scores = sweep_scores()
    contexts = torch.arange(SWEEP["n"]).remainder(SWEEP["vocab_size"] - 1).unsqueeze(1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # [1000, 8] tensors: one thread is fastest, and a busy machine does not slow it down
    try:
        gens = {T: decoding.decode(TemperedBigram(scores, SWEEP["alpha"], T), contexts, "ancestral",
                                   max_len=max(SWEEP["Ls"]), generator=torch.Generator().manual_seed(SWEEP["seed"]))
                for T in SWEEP["temperatures"]}
    finally:
        torch.set_num_threads(threads)
    for T, gen in gens.items():
        entry = _sweep_entry(results, T)
        for L, got in zip(SWEEP["Ls"], entry["rnt"]):
            want = metrics.non_termination_ratio(gen, L)
            _close(float(got), want, f"r_nt({L}) at T = {T:g}",
                           "the recomputation with the statement's recipe (one decode to L = 200 per T, a fresh "
                           "torch.Generator().manual_seed(seed), contexts = "
                           "torch.arange(n).remainder(V - 1).unsqueeze(1))", rtol=0, atol=1e-12)
