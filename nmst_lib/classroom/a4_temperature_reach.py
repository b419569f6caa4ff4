"""Assignment 4, q7: what a contextual temperature can do (Propositions 9.1 and 9.4,
Chapter 9). The test cells reach these through :mod:`nmst_lib.classroom.a4_sparse_temperature`."""

# A check's failure is an AssertionError (otter's test failure) whatever its
# cause, a wrong type included:
# ruff: noqa: TRY004

from __future__ import annotations

import math

import torch

from . import checks as C
from .a4_sparse_temperature_common import (
    _as_tensor,
    _callable,
    _close,
    _shape_dtype,
    _tclose,
)

__all__ = [
    "check_softmax_reading_mean",
    "check_softmax_reading_few_tokens_move",
    "hidden_softmax_reading_matches_library",
    "check_reachable_global_temperature",
    "check_reachable_positive_logits",
    "check_reachable_shift",
    "check_reachable_against_search",
    "hidden_reachable_matches_library",
    "hidden_reachable_extreme",
]

# ======================================== q7: Propositions 9.1 and 9.4

_PROP91 = "Proposition 9.1 (the softmax reading), Chapter 9"
_PROP94 = ("Proposition 9.4 (what a bounded per-token temperature can "
           "reorder), Chapter 9")


def _student_reading(fn, eta, a, b) -> torch.Tensor:
    """Call ``softmax_reading_temperature(eta, a, b)``; check shape, dtype."""
    _callable(fn, "softmax_reading_temperature")
    name = "softmax_reading_temperature"
    T = _as_tensor(C.call_student(fn, eta.clone(), a, b, name=name), name)
    _shape_dtype(T, eta, name)
    return T


def _reading_inputs(seed: int, scale: float, shape=(8, 30)):
    g = C.generator(seed)
    return scale * torch.randn(*shape, generator=g, dtype=torch.float64)


def check_softmax_reading_mean(softmax_reading_temperature) -> None:
    """Proposition 9.1, part 1 (Chapter 9): with s = softmax(eta) over the
    vocabulary, the temperatures T = (s + a)/b of every context sum to
    (1 + |V| a)/b, whatever eta (|eta| up to 1e4 included), so their mean
    is the constant (a + 1/|V|)/b."""
    cases = (((1.0, 0.5), 0.1, (8, 30)), ((1.0, 0.5), 5.0, (2, 3, 17)),
             ((0.3, 1.7), 1e4, (8, 30)))
    for (a, b), scale, shape in cases:
        eta = _reading_inputs(111, scale, shape)
        T = _student_reading(softmax_reading_temperature, eta, a, b)
        C.expect(bool(torch.isfinite(T).all()),
                 f"with |eta| of scale {scale:g} some temperatures are not "
                 "finite: compute softmax(eta) with torch.softmax (it "
                 "subtracts the largest entry first), not exp(eta)/sum")
        V = eta.shape[-1]
        want = (1 + V * a) / b
        sums = T.sum(-1).flatten()
        worst = int((sums - want).abs().argmax())
        _close(float(sums[worst]), want,
               f"for a = {a:g}, b = {b:g}, |V| = {V} and eta of scale "
               f"{scale:g}, the sum of a context's temperatures",
               f"{_PROP91}, part 1 (sum_v (s_v + a)/b = (1 + |V| a)/b, "
               "because s = softmax(eta) over the vocabulary, the last "
               "dimension, sums to 1; a sigmoid per entry, or a softmax "
               "over another dimension, does not)",
               rtol=1e-9, atol=0.0)


def check_softmax_reading_few_tokens_move(softmax_reading_temperature) -> None:
    """Proposition 9.1, part 2 (Chapter 9): every T_v >= a/b, and at most
    1/(b delta) tokens reach a/b + delta; a constant eta gives every token
    (1/|V| + a)/b, the mean of part 1."""
    a, b = 1.0, 0.5
    eta = _reading_inputs(112, 3.0, (6, 40))
    T = _student_reading(softmax_reading_temperature, eta, a, b)
    low = float(T.min())
    C.expect(low >= a / b - 1e-12,
             f"a temperature is {C.fmt(low)}, below a/b = {a / b:g}: "
             f"T_v - a/b = s_v/b with s_v = softmax(eta)_v >= 0 ({_PROP91},"
             " part 2)")
    for delta in (1e-3, 1e-2, 0.1, 0.5):
        count = int((T >= a / b + delta).sum(-1).max())
        C.expect(count <= 1 / (b * delta),
                 f"{count} tokens of one context have T >= a/b + {delta:g}"
                 f", but at most 1/(b delta) = {1 / (b * delta):g} can: "
                 f"the s_v = b (T_v - a/b) sum to 1 ({_PROP91}, part 2)")
    flat = torch.full((3, 40), 2.5, dtype=torch.float64)
    T = _student_reading(softmax_reading_temperature, flat, a, b)
    want = (1 / 40 + a) / b
    bad = (T - want).abs() > 1e-12
    if bool(bad.any()):
        raise AssertionError(
            f"with eta = 2.5 for every token a temperature is "
            f"{C.fmt(float(T[bad][0]))}, but the softmax of a constant is "
            f"uniform, s_v = 1/|V|, so every T_v = (1/|V| + a)/b = "
            f"{C.fmt(want)} ({_PROP91}; a sigmoid would give "
            f"(sigma(2.5) + a)/b = {C.fmt((1 / (1 + math.exp(-2.5)) + a) / b)}"
            ")")


def hidden_softmax_reading_matches_library(softmax_reading_temperature) -> None:
    """Proposition 9.1 (Chapter 9): equals
    ``nmst_lib.temperature.normalised_temperature(eta, "softmax", a, b)``
    on [3, 4, 50] scores for two (a, b), and in float32 at |eta| = 1e4."""
    from nmst_lib.temperature import normalised_temperature
    for (a, b), seed in (((1.0, 0.5), 113), ((0.3, 1.7), 114)):
        eta = _reading_inputs(seed, 2.0, (3, 4, 50))
        _tclose(_student_reading(softmax_reading_temperature, eta, a, b),
                normalised_temperature(eta, "softmax", a=a, b=b),
                f"for a = {a:g}, b = {b:g}, T",
                "nmst_lib.temperature.normalised_temperature(eta, "
                f"'softmax') ({_PROP91})", rtol=1e-10, atol=1e-12)
    eta = _reading_inputs(115, 1e4, (5, 60)).float()
    _tclose(_student_reading(softmax_reading_temperature, eta, 1.0, 0.5),
            normalised_temperature(eta, "softmax", a=1.0, b=0.5),
            "at |eta| = 1e4 in float32, T",
            f"nmst_lib.temperature.normalised_temperature ({_PROP91})",
            rtol=1e-5, atol=1e-5)


def _student_reachable(fn, z, lo, hi) -> torch.Tensor:
    """Call ``argmax_reachable(z, lo, hi)``; check that it returns a bool
    mask of z's shape."""
    _callable(fn, "argmax_reachable")
    name = "argmax_reachable"
    mask = _as_tensor(C.call_student(fn, z.clone(), lo, hi, name=name), name)
    C.expect(tuple(mask.shape) == tuple(z.shape),
             f"`{name}` returned shape {tuple(mask.shape)} for logits of "
             f"shape {tuple(z.shape)}: one True/False per token")
    C.expect(mask.dtype == torch.bool,
             f"`{name}` returned dtype {mask.dtype}; return a bool mask "
             "(for example the result of a comparison `>`)")
    return mask


def _reachable_by_search(z: torch.Tensor, lo: float, hi: float):
    """The tokens of ``z [V]`` (2 <= V, small) that some corner of
    [lo, hi]^V makes the strict argmax of z / T, with a witness T for each:
    each ratio z_v / T_v is monotone in T_v, so a corner is the best case."""
    V = z.shape[-1]
    bits = torch.arange(2 ** V).unsqueeze(1) >> torch.arange(V) & 1
    corners = torch.where(bits.bool(), lo, hi).to(z.dtype)
    r = z / corners
    top2 = r.topk(2, -1).values
    strict = top2[:, 0] > top2[:, 1]
    winners = {}
    for i in strict.nonzero().flatten().tolist():
        winners.setdefault(int(r[i].argmax()), corners[i])
    return winners


def _deciding_comparison(zr: torch.Tensor, v: int, lo: float,
                         hi: float) -> str:
    """Proposition 9.4, part 1, for token ``v`` of the logits ``zr [V]``:
    its largest ratio z_v/T_v against the largest of the other tokens'
    smallest ratios, the numbers that decide whether v can win."""
    if zr.shape[-1] == 1:
        return "it is the only token, so there is no other ratio to beat"
    zr = zr.double()
    z_v = float(zr[v])
    best, t_best = max((z_v / lo, lo), (z_v / hi, hi))
    worst = torch.minimum(zr / lo, zr / hi)
    worst[v] = -math.inf
    k = int(worst.argmax())
    z_k = float(zr[k])
    t_k = hi if z_k / hi <= z_k / lo else lo
    verdict = ">" if best > float(worst[k]) else "<="
    return (f"token {v}'s largest ratio is z_{v}/{t_best:g} = "
            f"{C.fmt(best)}, and the strongest other token, {k} (z_{k} = "
            f"{C.fmt(z_k)}), cannot go below z_{k}/{t_k:g} = "
            f"{C.fmt(float(worst[k]))}; {C.fmt(best)} {verdict} "
            f"{C.fmt(float(worst[k]))}")


def _expect_mask(got, want, z, what: str, why: str, lo: float,
                 hi: float) -> None:
    bad = got != want
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        row, v = idx[:-1], idx[-1]
        says = "can" if bool(got[idx]) else "cannot"
        where = f" (row {list(row)})" if row else ""
        logits = (f"z = {C.fmt(z[row])}" if z.shape[-1] <= 8 else
                  f"the {z.shape[-1]} logits z{where}")
        raise AssertionError(
            f"{what}: your mask says token {v} (z_{v} = {C.fmt(z[idx])}) "
            f"{says} become the strict argmax of z/T for "
            f"{logits if z.shape[-1] > 8 else logits + where}, but {why}. "
            f"Here {_deciding_comparison(z[row], v, lo, hi)}")


def check_reachable_global_temperature(argmax_reachable) -> None:
    """Propositions 9.3 and 9.4 (Chapter 9) with lo = hi: one global
    temperature keeps the ranking, so only the strict argmax of z can be
    made the argmax of z / T, and with a tie at the top no token can."""
    g = C.generator(116)
    z = 3 * torch.randn(6, 9, generator=g, dtype=torch.float64)
    got = _student_reachable(argmax_reachable, z, 2.0, 2.0)
    want = torch.nn.functional.one_hot(z.argmax(-1), 9).bool()
    _expect_mask(got, want, z, "with lo = hi = 2 (one global temperature)",
                 "z/T keeps the order of z (Proposition 9.3, part 1): only "
                 "the largest logit can be the largest ratio", 2.0, 2.0)
    tie = torch.tensor([3.0, 3.0, 1.0, -2.0], dtype=torch.float64)
    got = _student_reachable(argmax_reachable, tie, 2.0, 2.0)
    _expect_mask(got, torch.zeros(4, dtype=torch.bool), tie,
                 "with lo = hi = 2 and two tokens tied at the top",
                 "a global temperature keeps the tie, so no token is the "
                 "*strict* argmax (the inequality in part 1 of "
                 f"{_PROP94} is strict)", 2.0, 2.0)


def check_reachable_positive_logits(argmax_reachable) -> None:
    """Proposition 9.4, part 2 (Chapter 9): for positive logits, token j
    can win iff z_j > (lo/hi) max_{i != j} z_i; with [a/b, (1 + a)/b] the
    ratio is a/(1 + a) (one half for the paper's a = 1)."""
    g = C.generator(117)
    z = 0.1 + 10 * torch.rand(8, 12, generator=g, dtype=torch.float64)
    for lo, hi in ((2.0, 4.0), (1.0, 3.0)):
        got = _student_reachable(argmax_reachable, z, lo, hi)
        top2 = z.topk(2, -1)
        is_top = torch.nn.functional.one_hot(top2.indices[:, 0], 12).bool()
        others = torch.where(is_top, top2.values[:, 1:2],
                             top2.values[:, :1])
        want = z > (lo / hi) * others
        _expect_mask(got, want, z, f"for positive logits and [lo, hi] = "
                     f"[{lo:g}, {hi:g}]",
                     f"{_PROP94}, part 2 says token j can iff z_j > (lo/hi)"
                     f" max_(i != j) z_i = {lo / hi:.4g} times the best "
                     "other logit (give j the temperature lo and every "
                     "other token hi)", lo, hi)


def check_reachable_shift(argmax_reachable) -> None:
    """Proposition 9.4, part 3 (Chapter 9): (10, 6) on [2, 4] lets the
    second token win (6/2 > 10/4), the same softmax shifted to (1, -3)
    does not; for a negative logit z_v / T_v is largest at T_v = hi, so
    (-2, -3) lets the second token win (-3/4 > -2/2)."""
    cases = (([10.0, 6.0], [True, True], "6/2 = 3 > 10/4 = 2.5"),
             ([1.0, -3.0], [True, False],
              ("the best the second token can reach is -3/4 (T = hi: a "
               "negative logit is largest at the largest temperature), "
               "below the first token's worst, 1/4; the same softmax as "
               "(10, 6), yet a different answer: part 3")),
             ([-2.0, -3.0], [True, True],
              ("both can: -2/4 > -3/2 and -3/4 > -2/2; a negative logit's "
               "ratio z_v/T_v is largest at the largest temperature, hi")))
    for z, want, why in cases:
        zt = torch.tensor(z, dtype=torch.float64)
        got = _student_reachable(argmax_reachable, zt, 2.0, 4.0)
        _expect_mask(got, torch.tensor(want), zt, "on [lo, hi] = [2, 4]",
                     f"{why} ({_PROP94})", 2.0, 4.0)


def check_reachable_against_search(argmax_reachable) -> None:
    """Proposition 9.4, part 1 (Chapter 9) against its definition: for
    five tokens with logits of both signs, the tokens that some corner of
    [2, 4]^5 makes the strict argmax of z / T (each ratio is monotone in
    its T_v, so a corner is the best case)."""
    for seed in range(12):
        g = C.generator(1180 + seed)
        z = (2 * torch.randn(5, generator=g, dtype=torch.float64)
             + (seed % 3 - 1) * 2.0)
        got = _student_reachable(argmax_reachable, z, 2.0, 4.0)
        winners = _reachable_by_search(z, 2.0, 4.0)
        for v in range(5):
            if bool(got[v]) and v not in winners:
                raise AssertionError(
                    f"your mask says token {v} can become the strict argmax"
                    f" of z/T for z = {C.fmt(z)} and T in [2, 4], but no "
                    "choice of temperatures does it (every corner of the "
                    "box was tried; each z_v/T_v is monotone in T_v). "
                    f"{_PROP94}, part 1: j can iff its largest ratio beats "
                    "every other token's smallest ratio")
            if not bool(got[v]) and v in winners:
                raise AssertionError(
                    f"your mask says token {v} cannot become the strict "
                    f"argmax of z/T for z = {C.fmt(z)}, but T = "
                    f"{C.fmt(winners[v])} makes it so (z/T = "
                    f"{C.fmt(z / winners[v])}; {_PROP94}, part 1)")


def hidden_reachable_matches_library(argmax_reachable) -> None:
    """Proposition 9.4, part 1 (Chapter 9): equals
    ``nmst_lib.theory.can_become_argmax(z, None, lo, hi)`` on [4, 6, 40]
    logits of both signs, with zeros and ties, for [2, 4], [0.5, 3] and a
    global temperature."""
    from nmst_lib.theory import can_become_argmax
    g = C.generator(119)
    z = 3 * torch.randn(4, 6, 40, generator=g, dtype=torch.float64) - 1.0
    z[0, 0, :5] = 0.0                   # zero logits: z/T = 0 for every T
    z[1, 1] = torch.round(z[1, 1])      # ties
    z[2, 2, :2] = z[2, 2].max() + 1.0   # a tie at the top
    z[3, 3] = z[3, 3].abs() + 0.5       # positive logits only
    z[3, 4] = -z[3, 4].abs() - 0.5      # negative logits only
    for lo, hi in ((2.0, 4.0), (0.5, 3.0), (1.5, 1.5)):
        _expect_mask(_student_reachable(argmax_reachable, z, lo, hi),
                     can_become_argmax(z, None, lo, hi), z,
                     f"on [lo, hi] = [{lo:g}, {hi:g}]",
                     "nmst_lib.theory.can_become_argmax disagrees "
                     f"({_PROP94}, part 1)", lo, hi)


def hidden_reachable_extreme(argmax_reachable) -> None:
    """Proposition 9.4 (Chapter 9) at the edges: |z| = 1e4 in float64 and
    float32, a single token (always the argmax), all-zero logits (no strict
    argmax), against ``nmst_lib.theory.can_become_argmax``."""
    from nmst_lib.theory import can_become_argmax
    g = C.generator(120)
    z = 1e4 * torch.randn(5, 30, generator=g, dtype=torch.float64)
    for zz, what in ((z, "|z| = 1e4"), (z.float(), "|z| = 1e4 in float32"),
                     (torch.zeros(3, 7, dtype=torch.float64),
                      "all-zero logits"),
                     (torch.tensor([[-5.0]], dtype=torch.float64),
                      "a single token")):
        try:
            got = _student_reachable(argmax_reachable, zz, 2.0, 4.0)
        except C.NotImplementedYet:
            raise
        except AssertionError as err:
            if zz.shape[-1] != 1:
                raise
            raise AssertionError(f"with {what}: {err}. A single token is "
                                 "always the strict argmax (there is no "
                                 "other token to beat); handle |V| = 1 "
                                 "before taking the top two") from None
        _expect_mask(got,
                     can_become_argmax(zz, None, 2.0, 4.0), zz,
                     f"with {what}", "nmst_lib.theory.can_become_argmax "
                     f"disagrees ({_PROP94}, part 1; a single token is "
                     "always the strict argmax, zero logits never are)",
                     2.0, 4.0)
