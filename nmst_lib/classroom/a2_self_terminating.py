"""Checks of Assignment 2, "Self-terminating language models" (Chapters 4-5: 04_self_terminating, 05_nmst).

Each ``check_*`` function is a public test (a property from the theory, with a message in the book's
terms); each ``hidden_*`` function is a hidden test of the autograder (the student's code against
:mod:`nmst_lib` on random inputs from fixed seeds and on extreme inputs: ``|logit| = 1e4``,
``eps = 1e-5``, float32). The master notebook ``assignments/a2_self_terminating/a2_self_terminating.ipynb``
calls them from its test cells:

* q1: ``my_st_log_probs(logits, eos_id, eps)``, the ST layer (Definition 4.1, Proposition 4.1);
* q2: ``MyNMSTHead(eps, eos_id)``, the NMST layer as an ``nn.Module`` with an incremental ``step``
  (Definition 5.1, Proposition 5.2);
* q4: ``half_life_step``, ``beam_step_bound`` and ``tail_bound``, the step counts of Lemma 4.1,
  Theorems 4.1 and 4.3 and Theorem 5.1;
* q5: ``my_rnt(generation, Ls)`` and the experiment's ``results`` (r_nt(L) of greedy and beam search on
  a random LSTM with VA, ST and NMST heads; Theorems 4.1, 4.3 and 5.1).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from .checks import (
    NotImplementedYet,
    call_student,
    expect,
    expect_close,
    expect_given,
    expect_tensor_close,
    fmt,
    generator,
)

__all__ = [
    "check_st_rows_sum_to_one", "check_st_floor_and_monotone", "hidden_st_matches_library",
    "hidden_st_extreme_inputs",
    "check_nmst_rows_sum_to_one", "check_nmst_floor", "check_nmst_can_fall", "check_nmst_step_matches_forward",
    "hidden_nmst_matches_library", "hidden_nmst_extreme_inputs", "hidden_nmst_head_decodes_like_library",
    "check_half_life_step", "check_tail_bound_shape", "hidden_half_life_step_matches_library",
    "hidden_bounds_match_library",
    "check_rnt_token_level", "check_rnt_beam_uses_first_finish", "hidden_rnt_matches_library",
    "check_results_obey_the_theorems", "hidden_results_match_recomputation",
    "EXPERIMENT_HEADS", "EXPERIMENT", "experiment_keys", "experiment_model", "experiment_contexts",
]

_CH4 = "Chapter 4"
_CH5 = "Chapter 5"


# ----------------------------------------------------------------------------- helpers


def _check_callable(fn, what: str) -> None:
    if not callable(fn):
        raise TypeError(f"{what} must be callable, got {type(fn).__name__}")


def _as_tensor(out, what: str, like: torch.Tensor) -> torch.Tensor:
    """The student's output as a tensor of ``like``'s shape (an AssertionError otherwise)."""
    if not isinstance(out, torch.Tensor):
        raise AssertionError(f"{what} should be a torch.Tensor of shape {tuple(like.shape)}, got {type(out).__name__}")
    expect(tuple(out.shape) == tuple(like.shape),
           f"{what} has shape {tuple(out.shape)}, expected {tuple(like.shape)} (the shape of the logits)")
    return out.detach()


def _present(value, name: str):
    """A notebook variable that a stub leaves as ``None`` or ``...``."""
    if value is None or value is Ellipsis:
        raise NotImplementedYet(f"`{name}` is {value!r}: it is not computed yet (implement the functions above and "
                                "run their cells)")
    return value


def _floor_log_keep(T: int, eps: float, dtype=torch.float64) -> torch.Tensor:
    """log(1 - f_lb(t)) = t log(1 - eps) for t = 1..T."""
    return torch.arange(1, T + 1, dtype=dtype) * math.log1p(-eps)


def _non_eos_log_mass(log_probs: torch.Tensor, eos_id: int) -> torch.Tensor:
    """log(1 - alpha_t) read off the non-eos entries (accurate even when alpha_t is close to 1)."""
    keep = torch.cat([log_probs[..., :eos_id], log_probs[..., eos_id + 1:]], dim=-1)
    return keep.logsumexp(-1)


def _worst(values: torch.Tensor) -> tuple[int, ...]:
    """Index of the largest entry (NaN counts as the largest)."""
    v = torch.nan_to_num(values.to(torch.float64), nan=math.inf)
    return tuple(int(i) for i in torch.unravel_index(torch.argmax(v), v.shape))


def _no_nan(out: torch.Tensor, what: str, where: str) -> None:
    nan = torch.isnan(out)
    if bool(nan.any()):
        idx = tuple(int(i) for i in nan.nonzero()[0])
        raise AssertionError(f"{what}{list(idx)} is NaN: {where}")


def _call_st(fn, logits, eos_id, eps, name="my_st_log_probs"):
    out = call_student(fn, logits, eos_id, eps, name=name)
    return _as_tensor(out, f"`{name}(logits, eos_id={eos_id}, eps={eps:g})`", logits)


# ----------------------------------------------------------------------------- q1: the ST layer


def check_st_rows_sum_to_one(my_st_log_probs: Callable) -> None:
    """Proposition 4.1, part 1 (Chapter 4): every row of the ST layer is a probability distribution
    (the log-probabilities of Definition 4.1 log-sum-exp to 0 over the vocabulary), with the shape of
    the logits."""
    _check_callable(my_st_log_probs, "my_st_log_probs")
    g = generator(11)
    for eps, eos_id in ((0.05, 6), (0.2, 2)):
        logits = 3 * torch.randn(4, 12, 7, generator=g, dtype=torch.float64)
        out = _call_st(my_st_log_probs, logits, eos_id, eps)
        expect(bool(torch.isfinite(out).all()),
               f"`my_st_log_probs` returned non-finite log-probabilities on logits of size about 3 (eps = {eps:g}): "
               f"every token has positive probability under the ST layer (Proposition 4.1, part 1, {_CH4})")
        sums = out.to(torch.float64).logsumexp(-1).exp()
        worst = (sums - 1).abs().max().item()
        idx = _worst((sums - 1).abs())
        expect(worst < 1e-9,
               f"the probabilities of row (path {idx[0]}, step t = {idx[1] + 1}) sum to {fmt(sums[idx])}, not 1 "
               f"(eos_id = {eos_id}, eps = {eps:g}): eos gets alpha_t and the other tokens share 1 - alpha_t by a "
               f"softmax over the NON-eos logits (Definition 4.1, Proposition 4.1 part 1, {_CH4})")


def check_st_floor_and_monotone(my_st_log_probs: Callable) -> None:
    """Proposition 4.1, parts 2-3 (Chapter 4): alpha_t = p(eos at t) of the ST layer lies above the floor
    f_lb(t) = 1 - (1 - eps)^t and never decreases in t, whatever the logits."""
    _check_callable(my_st_log_probs, "my_st_log_probs")
    g = generator(12)
    T = 30
    for eps, scale in ((0.05, 3.0), (0.01, 8.0)):
        logits = scale * torch.randn(5, T, 6, generator=g, dtype=torch.float64)
        logits[0, :, 5] = 30.0  # sigma(a_t) ~ 1: alpha_t hugs the floor
        out = _call_st(my_st_log_probs, logits, 5, eps)
        _no_nan(out, "`my_st_log_probs` output", f"work in log space (Definition 4.1, {_CH4})")
        log_keep = _non_eos_log_mass(out.to(torch.float64), 5)  # log(1 - alpha_t)
        alpha = -torch.expm1(log_keep)
        floor_keep = _floor_log_keep(T, eps)
        excess = log_keep - floor_keep  # > 0 means alpha_t below the floor
        if bool((excess > 1e-9).any()):
            row, t = _worst(excess)
            raise AssertionError(
                f"p(eos) at t = {t + 1} is {fmt(alpha[row, t])}, below the floor 1 - (1 - eps)^{t + 1} = "
                f"{fmt(-math.expm1((t + 1) * math.log1p(-eps)))} (eps = {eps:g}): every factor "
                f"(1 - eps) sigma(a_s) of the running product is below 1 - eps (Definition 4.1, "
                f"Proposition 4.1 part 3, {_CH4})")
        drops = log_keep[:, 1:] - log_keep[:, :-1]  # > 0 means alpha fell
        if bool((drops > 1e-9).any()):
            row, t = _worst(drops)
            raise AssertionError(
                f"p(eos) falls from {fmt(alpha[row, t])} at t = {t + 1} to {fmt(alpha[row, t + 1])} at t = {t + 2} "
                f"(eps = {eps:g}): the ST layer's 1 - alpha_t is a running product over the steps s <= t, so "
                f"alpha_t never decreases (Definition 4.1, Proposition 4.1 part 2, {_CH4}). Is the product "
                f"accumulated along the steps (dim -2)?")


def hidden_st_matches_library(my_st_log_probs: Callable) -> None:
    """Definition 4.1 (Chapter 4): equal to ``nmst_lib.heads.st_log_probs`` on random float64 logits,
    several eps and eos positions, batched shapes [..., T, V]."""
    from nmst_lib.heads import st_log_probs

    _check_callable(my_st_log_probs, "my_st_log_probs")
    g = generator(13)
    cases = [((3, 25, 9), 8, 0.3, 4.0), ((2, 3, 40, 6), 0, 1e-2, 6.0), ((50, 11), 4, 1e-5, 2.0)]
    for shape, eos_id, eps, scale in cases:
        logits = scale * torch.randn(*shape, generator=g, dtype=torch.float64)
        want = st_log_probs(logits, eos_id, eps)
        got = _call_st(my_st_log_probs, logits, eos_id, eps)
        expect(got.dtype == torch.float64, f"`my_st_log_probs` returned {got.dtype} for float64 logits: keep the dtype")
        expect_tensor_close(got, want, f"log p for logits of shape {shape}, eos_id = {eos_id}, eps = {eps:g}",
                            f"Definition 4.1 ({_CH4}, nmst_lib.heads.st_log_probs)", rtol=1e-9, atol=1e-10)


def hidden_st_extreme_inputs(my_st_log_probs: Callable) -> None:
    """Chapter 4, "Why log space is not optional": float32 logits of size 1e4, eps = 1e-5 and 3000 steps
    give finite log-probabilities equal to ``st_log_probs`` (log1p, logsigmoid, a cumulative sum and
    log1mexp; no clamps)."""
    from nmst_lib.heads import st_log_probs

    _check_callable(my_st_log_probs, "my_st_log_probs")
    eps = 1e-5
    extreme = torch.tensor([[[1e4, -1e4, 0.0, 1e4], [-1e4, 1e4, 1e4, -1e4], [1e4, 1e4, -1e4, 1e4]],
                            [[0.0, -1e4, 1e4, -1e4], [1e4, -1e4, 0.0, 1e4], [1e4, 0.0, 0.0, 1e4]]],
                           dtype=torch.float32)
    long_path = (5 + torch.randn(2, 3000, 5, generator=generator(14))).to(torch.float32)
    for logits, eos_id, label in ((extreme, 3, "|logit| = 1e4"), (long_path, 4, "T = 3000 steps")):
        got = _call_st(my_st_log_probs, logits, eos_id, eps)
        expect(got.dtype == torch.float32, f"`my_st_log_probs` returned {got.dtype} for float32 logits: keep the dtype")
        want = st_log_probs(logits, eos_id, eps)
        bad = ~torch.isfinite(got)
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise AssertionError(
                f"log p{list(idx)} is {fmt(got[idx])} in float32 with {label}, eps = 1e-5; the library gives "
                f"{fmt(want[idx])}: compute log(1 - alpha_t) as a cumulative sum of log1p(-eps) + logsigmoid(a_s) "
                f"and log alpha_t with log1mexp, never 1 - (a product) ({_CH4}, eq. of 'Computing it in log space')")
        expect_tensor_close(got, want, f"log p in float32 with {label}, eps = 1e-5",
                            f"the log-space ST layer ({_CH4}, nmst_lib.heads.st_log_probs)", rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- q2: the NMST head


def _make_head(MyNMSTHead, eps, eos_id):
    head = call_student(MyNMSTHead, eps, eos_id, name="MyNMSTHead")
    expect(isinstance(head, torch.nn.Module),
           f"`MyNMSTHead({eps:g}, {eos_id})` is a {type(head).__name__}, not a torch.nn.Module: subclass nn.Module")
    return head


def _forward(head, logits, eps):
    out = call_student(head, logits, name="MyNMSTHead.forward")
    return _as_tensor(out, f"`MyNMSTHead(eps={eps:g}).forward(logits)`", logits)


def _initial_state(head, batch_size):
    return call_student(head.initial_step_state, batch_size, name="MyNMSTHead.initial_step_state")


def _step(head, logits, state):
    out = call_student(head.step, logits, state, name="MyNMSTHead.step")
    if not (isinstance(out, tuple) and len(out) == 2):
        raise AssertionError(f"`MyNMSTHead.step(logits, state)` must return a pair (log_probs [B, V], new_state), "
                             f"got {type(out).__name__}")
    log_probs, new_state = out
    return _as_tensor(log_probs, "the log-probabilities from `MyNMSTHead.step`", logits), new_state


def check_nmst_rows_sum_to_one(MyNMSTHead) -> None:
    """Definition 5.1 (Chapter 5): every row of the NMST layer is a probability distribution."""
    g = generator(21)
    for eps, eos_id in ((0.05, 6), (0.01, 0)):
        head = _make_head(MyNMSTHead, eps, eos_id)
        logits = 3 * torch.randn(3, 15, 7, generator=g, dtype=torch.float64)
        out = _forward(head, logits, eps)
        sums = out.to(torch.float64).logsumexp(-1).exp()
        worst = (sums - 1).abs().max().item()
        if not worst < 1e-9:
            idx = _worst((sums - 1).abs())
            raise AssertionError(
                f"the probabilities of row (path {idx[0]}, step t = {idx[1] + 1}) sum to {fmt(sums[idx])}, not 1 "
                f"(eos_id = {eos_id}, eps = {eps:g}): eos gets alpha_t and the other tokens share 1 - alpha_t by "
                f"a softmax over the NON-eos logits (Definition 5.1, {_CH5})")


def check_nmst_floor(MyNMSTHead) -> None:
    """Definition 5.1 and Proposition 5.2, part 1 (Chapter 5): alpha_t >= f_lb(t) = 1 - (1 - eps)^t at
    every step t = 1..T of ``forward``, also when lambda(t) = sigma(eos logit) is tiny."""
    g = generator(22)
    T, eps = 20, 0.05
    head = _make_head(MyNMSTHead, eps, 4)
    logits = 4 * torch.randn(4, T, 5, generator=g, dtype=torch.float64)
    logits[0, :, 4] = -30.0  # lambda(t) ~ 0: alpha_t sits on the floor
    out = _forward(head, logits, eps).to(torch.float64)
    _no_nan(out, "`MyNMSTHead.forward` output", f"work in log space (Definition 5.1, {_CH5})")
    log_keep = _non_eos_log_mass(out, 4)
    alpha = -torch.expm1(log_keep)
    excess = log_keep - _floor_log_keep(T, eps)
    if bool((excess > 1e-9).any()):
        row, t = _worst(excess)
        raise AssertionError(
            f"p(eos) at t = {t + 1} is {fmt(alpha[row, t])}, below the floor 1 - (1 - eps)^{t + 1} = "
            f"{fmt(-math.expm1((t + 1) * math.log1p(-eps)))} (eps = {eps:g}): Definition 5.1 ({_CH5}) mixes "
            f"alpha_t = (1 - lambda(t)) f_lb(t) + lambda(t) with f_lb(t) = 1 - (1 - eps)^t, and steps count "
            f"from t = 1 (the first continuation token)")


def check_nmst_can_fall(MyNMSTHead) -> None:
    """Definition 5.1 (Chapter 5): NMST is NOT monotone. A large eos logit at one step and a very negative
    one at the next make alpha_t fall back to the floor (the point of Remark 5.1 and Proposition 5.2)."""
    eps = 0.01
    head = _make_head(MyNMSTHead, eps, 2)
    logits = torch.zeros(1, 4, 3, dtype=torch.float64)
    logits[0, :, 2] = torch.tensor([-8.0, 8.0, -8.0, -8.0])
    out = _forward(head, logits, eps).to(torch.float64)
    alpha = -torch.expm1(_non_eos_log_mass(out, 2))[0]
    lam = torch.sigmoid(logits[0, :, 2])
    want = (1 - lam) * -torch.expm1(_floor_log_keep(4, eps)) + lam
    expect(float(alpha[2]) < float(alpha[1]) - 0.5,
           f"with eos logits (-8, 8, -8, -8), p(eos) is {fmt(alpha)} at t = 1..4, but Definition 5.1 ({_CH5}) gives "
           f"{fmt(want)}: alpha_t depends on the current eos logit only, so it falls from about 1 at t = 2 back to "
           f"the floor at t = 3 (an ST-style running product would never let it fall)")


def check_nmst_step_matches_forward(MyNMSTHead) -> None:
    """Chapter 5, the NMST layer: decoding one step at a time (``initial_step_state`` then ``step``,
    whose state counts the steps taken) gives the same log-probabilities as ``forward`` on the whole
    sequence."""
    g = generator(23)
    T, eps = 12, 0.1
    head = _make_head(MyNMSTHead, eps, 5)
    logits = 3 * torch.randn(3, T, 6, generator=g, dtype=torch.float64)
    whole = _forward(head, logits, eps).to(torch.float64)
    state = _initial_state(head, 3)
    for t in range(T):
        lp, state = _step(head, logits[:, t], state)
        expect_tensor_close(lp.to(torch.float64), whole[:, t],
                            f"`step` at t = {t + 1} (after {t} calls)",
                            f"`forward` on the whole sequence (Definition 5.1, {_CH5}; the state must count the "
                            f"steps taken, so that step t uses (1 - eps)^t)", rtol=1e-9, atol=1e-10)


def hidden_nmst_matches_library(MyNMSTHead) -> None:
    """Definition 5.1 (Chapter 5): ``forward`` equals ``nmst_lib.heads.NMSTHead`` (and ``step`` equals its
    ``step`` from a state of 0 and of 7 steps) on random float64 logits."""
    from nmst_lib.heads import NMSTHead

    g = generator(24)
    for eps, eos_id, V in ((0.3, 0, 5), (1e-2, 8, 9), (1e-5, 3, 7)):
        head = _make_head(MyNMSTHead, eps, eos_id)
        ref = NMSTHead(eps, eos_id=eos_id)
        logits = 5 * torch.randn(4, 30, V, generator=g, dtype=torch.float64)
        got = _forward(head, logits, eps)
        expect_tensor_close(got.to(torch.float64), ref(logits),
                            f"forward log p (eps = {eps:g}, eos_id = {eos_id})",
                            f"Definition 5.1 ({_CH5}, nmst_lib.heads.NMSTHead)", rtol=1e-9, atol=1e-10)
        state = _initial_state(head, 4)
        ref_state = ref.initial_step_state(4)
        for t in range(7):
            _, state = _step(head, logits[:, t], state)
            _, ref_state = ref.step(logits[:, t], ref_state)
        lp, _ = _step(head, logits[:, 7], state)
        want, _ = ref.step(logits[:, 7], ref_state)
        expect_tensor_close(lp.to(torch.float64), want, f"step log p at t = 8 (eps = {eps:g})",
                            f"Definition 5.1 ({_CH5}, nmst_lib.heads.NMSTHead.step)", rtol=1e-9, atol=1e-10)


def hidden_nmst_extreme_inputs(MyNMSTHead) -> None:
    """Chapter 5, "Computing it": float32 logits of size 1e4 and eps = 1e-5 give finite non-eos
    log-probabilities and the library's values; at eos logit -1e4, alpha_t is the floor f_lb(t), not 0."""
    from nmst_lib.heads import NMSTHead

    eps = 1e-5
    head = _make_head(MyNMSTHead, eps, 3)
    logits = torch.tensor([[[1e4, -1e4, 0.0, -1e4], [-1e4, 1e4, 0.0, 1e4], [1e4, 1e4, -1e4, -1e4]],
                           [[0.0, -1e4, 1e4, 1e4], [1e4, -1e4, 0.0, -1e4], [1e4, 0.0, 0.0, 0.0]]],
                          dtype=torch.float32)
    got = _forward(head, logits, eps)
    expect(got.dtype == torch.float32, f"`MyNMSTHead.forward` returned {got.dtype} for float32 logits: keep the dtype")
    want = NMSTHead(eps, eos_id=3)(logits)
    _no_nan(got, "`MyNMSTHead.forward` output in float32 at |logit| = 1e4, eps = 1e-5, ",
            f"work in log space ({_CH5}, 'Computing it')")
    expect_tensor_close(got, want, "float32 log p at |logit| = 1e4, eps = 1e-5",
                        f"the log-space NMST layer ({_CH5}, 'Computing it'; nmst_lib.heads.NMSTHead)",
                        rtol=1e-5, atol=1e-5)


def hidden_nmst_head_decodes_like_library(MyNMSTHead) -> None:
    """The decoding protocol (ARCHITECTURE.md; Chapter 1): the head plugged into ``nmst_lib.models.LSTMLM``
    decodes, greedily and with beam search (which reorders the head's state with ``select``), exactly
    what the library's ``NMSTHead`` decodes."""
    from nmst_lib.decoding import decode
    from nmst_lib.heads import NMSTHead
    from nmst_lib.models import LSTMLM

    eps, V = 0.05, 12
    probe = _make_head(MyNMSTHead, eps, V - 1)
    _step(probe, torch.zeros(2, V), _initial_state(probe, 2))  # a stub fails here, with "not implemented yet"
    contexts = torch.randint(0, V - 1, (16, 4), generator=generator(25))
    runs = {}
    for label, head in (("yours", _make_head(MyNMSTHead, eps, V - 1)), ("library", NMSTHead(eps, eos_id=V - 1))):
        torch.manual_seed(3)
        model = LSTMLM(V, hidden=16, layers=1, dropout=0.0, head=head)
        with torch.no_grad():
            model.embedding.weight.uniform_(-2.0, 2.0)
            model.output.bias[V - 1] = -4.0
        model.eval()
        try:
            runs[label] = {m: decode(model, contexts, m, max_len=60, **({"beam_size": 3} if m == "beam" else {}))
                           for m in ("greedy", "beam")}
        except AssertionError:
            raise
        except Exception as err:
            if label == "library":
                raise
            raise AssertionError(f"decoding an LSTMLM whose output layer is your MyNMSTHead raised "
                                 f"{type(err).__name__}: {err}") from None
    for m in ("greedy", "beam"):
        mine, ref = runs["yours"][m], runs["library"][m]
        expect(mine.to_lists() == ref.to_lists(),
               f"{m} decoding with MyNMSTHead returned lengths {fmt(mine.lengths[:8])} for the first contexts, the "
               f"library's NMSTHead {fmt(ref.lengths[:8])} (Definition 5.1, {_CH5}; `step`'s state must count "
               f"the steps of each row)")


# ----------------------------------------------------------------------------- q4: step counts


def _student_int(fn, *args, name):
    out = call_student(fn, *args, name=name)
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        out = out.item()
    if isinstance(out, float) and out.is_integer():
        out = int(out)
    if isinstance(out, bool) or not isinstance(out, (int, np.integer)):
        raise AssertionError(f"`{name}{args}` returned {out!r}: a step count must be an integer")
    return int(out)


def _student_float(fn, *args, name):
    out = call_student(fn, *args, name=name)
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        out = out.item()
    try:
        return float(out)
    except (TypeError, ValueError):
        raise AssertionError(f"`{name}{args}` returned {out!r}, not a number") from None


def check_half_life_step(half_life_step: Callable) -> None:
    """Lemma 4.1 (Chapter 4): t_{1/2} is the FIRST step with f_lb(t) = 1 - (1 - eps)^t > 1/2, so
    f_lb(t_{1/2}) > 1/2 >= f_lb(t_{1/2} - 1)."""
    for eps in (0.3, 0.05, 0.01, 2e-3):
        t = _student_int(half_life_step, eps, name="half_life_step")
        f_at = -math.expm1(t * math.log1p(-eps))
        f_before = -math.expm1((t - 1) * math.log1p(-eps))
        expect(t >= 1 and f_at > 0.5,
               f"half_life_step({eps:g}) = {t}, but f_lb({t}) = 1 - (1 - eps)^{t} = {fmt(f_at)} is not above 1/2: "
               f"Lemma 4.1 ({_CH4}) needs f_lb(t_1/2) > 1/2")
        expect(f_before <= 0.5,
               f"half_life_step({eps:g}) = {t}, but already f_lb({t - 1}) = {fmt(f_before)} > 1/2: t_1/2 is the "
               f"FIRST such step, floor(beta_eps) + 1 with beta_eps = -log 2 / log(1 - eps) (Lemma 4.1, {_CH4})")


def check_tail_bound_shape(tail_bound: Callable, half_life_step: Callable) -> None:
    """Theorem 5.1, part 1 (Chapter 5): the bound on q(|y| > L) is 1 before t_{1/2}, then the product
    prod_{t = t_{1/2}}^{L} (1 - eps)^t, which falls faster than 2^{-(L - t_{1/2} + 1)}."""
    eps = 0.05
    th = _student_int(half_life_step, eps, name="half_life_step")
    for L in (1, max(1, th - 1)):
        b = _student_float(tail_bound, eps, L, name="tail_bound")
        expect_close(b, 1.0, f"tail_bound({eps:g}, {L}) (L < t_1/2 = {th})",
                     f"Theorem 5.1 ({_CH5}), which bounds q(|y| > L) only from t_1/2 on (before it, by 1)", rtol=1e-12)
    prev = 1.0
    for L in range(th, th + 6):
        b = _student_float(tail_bound, eps, L, name="tail_bound")
        geo = 2.0 ** -(L - th + 1)
        expect(0.0 <= b < geo,
               f"tail_bound({eps:g}, {L}) = {fmt(b)}, but Theorem 5.1 part 1 ({_CH5}) gives a bound below "
               f"2^-(L - t_1/2 + 1) = {fmt(geo)} (t_1/2 = {th}): each factor (1 - eps)^t, t >= t_1/2, is below 1/2")
        expect(b < prev, f"tail_bound({eps:g}, L) does not decrease at L = {L}: {fmt(prev)} then {fmt(b)} "
                         f"(Theorem 5.1 part 1, {_CH5})")
        prev = b


def hidden_half_life_step_matches_library(half_life_step: Callable) -> None:
    """Lemma 4.1 (Chapter 4): equal to ``nmst_lib.theory.first_step_eos_above_half`` for eps from 0.75 to
    1e-7, including eps = 0.5 where beta_eps = 1 exactly (t_{1/2} = 2) and eps = 1e-5 (t_{1/2} = 69,315;
    log1p, not log(1 - eps) in float32)."""
    from nmst_lib.theory import first_step_eos_above_half

    for eps in (0.75, 0.5, 0.3, 0.1, 1e-2, 1e-3, 2.5e-3, 1e-4, 5e-5, 1e-5, 1e-7):
        got = _student_int(half_life_step, eps, name="half_life_step")
        want = first_step_eos_above_half(eps)
        expect(got == want, f"half_life_step({eps:g}) = {got}, but Lemma 4.1 ({_CH4}) gives t_1/2 = {want} "
                            f"(floor(beta_eps) + 1, beta_eps = {-math.log(2) / math.log1p(-eps):.6g})")


def hidden_bounds_match_library(beam_step_bound: Callable, tail_bound: Callable) -> None:
    """Theorem 4.3 (Chapter 4) / Theorem 5.1 part 2 (Chapter 5): beam search of width k stops within
    t_{1/2} + k - 1 steps (one less than ``nmst_lib.theory.beam_termination_bound``, the papers' t_{1/2} + k);
    Theorem 5.1 part 1: the tail bound (1 - eps)^{(L(L+1) - t_{1/2}(t_{1/2} - 1))/2}, to 1e-9 relative, also
    for eps = 1e-5 and L far beyond t_{1/2}."""
    from nmst_lib.theory import (
        beam_termination_bound,
        first_step_eos_above_half,
    )

    for eps, k in ((0.5, 1), (0.05, 4), (1e-3, 2), (1e-5, 10)):
        got = _student_int(beam_step_bound, eps, k, name="beam_step_bound")
        want = beam_termination_bound(eps, k) - 1
        expect(got == want, f"beam_step_bound({eps:g}, {k}) = {got}, but Theorem 4.3 ({_CH4}) gives "
                            f"t_1/2 + k - 1 = {want}")
    for eps, L in ((0.05, 14), (0.05, 30), (0.01, 120), (1e-3, 700), (1e-5, 69_316), (1e-5, 70_000)):
        th = first_step_eos_above_half(eps)
        want = math.exp(math.log1p(-eps) * (L * (L + 1) - th * (th - 1)) / 2) if L >= th else 1.0
        got = _student_float(tail_bound, eps, L, name="tail_bound")
        expect_close(got, want, f"tail_bound({eps:g}, {L})",
                     f"Theorem 5.1 part 1 ({_CH5}), prod over t = {th}..{L} of (1 - eps)^t,", rtol=1e-9, atol=1e-300)


# ----------------------------------------------------------------------------- q5: the experiment

#: The heads of the experiment, in the order of the results table.
EXPERIMENT_HEADS = ("VA", "ST", "NMST")


EXPERIMENT = {"V": 20, "HIDDEN": 32, "N_CONTEXTS": 100, "MAX_LEN": 300, "BEAM": 4, "EOS_BIAS": 6.0,
              "EPS_VALUES": (0.02, 0.005, 0.001)}
"""Problem 5's setting, the values of its given cell: the checks grade this experiment, whatever
the notebook's constants say (``checks.expect_given`` names an edited one)."""


def experiment_model(head_name: str, eps):
    """Problem 5's model: the same random 1-layer LSTM for every head (seed 0), on the CPU, in eval
    mode, with the eos bias -EOS_BIAS for VA and NMST and +EOS_BIAS for ST (ST's sigma(a_t) is a
    probability to go on; the sign remark after Definition 4.1, Chapter 4). The notebook's given
    ``build_model`` writes out the same lines."""
    from nmst_lib.heads import head_from_name
    from nmst_lib.models import LSTMLM

    V = EXPERIMENT["V"]
    torch.manual_seed(0)
    model = LSTMLM(V, hidden=EXPERIMENT["HIDDEN"], layers=1, dropout=0.0, head=head_from_name(head_name, eps=eps))
    with torch.no_grad():
        model.embedding.weight.uniform_(-2.0, 2.0)
        model.output.bias[V - 1] = EXPERIMENT["EOS_BIAS"] if head_name == "ST" else -EXPERIMENT["EOS_BIAS"]
    return model.eval()


def experiment_contexts() -> torch.Tensor:
    """Problem 5's contexts: N_CONTEXTS random prefixes of 5 non-eos tokens (generator seed 1)."""
    return torch.randint(0, EXPERIMENT["V"] - 1, (EXPERIMENT["N_CONTEXTS"], 5),
                         generator=torch.Generator().manual_seed(1))


def _expect_the_given_setting(EPS_VALUES, BEAM, LS, MAX_LEN=None) -> None:
    fixed = {"EPS_VALUES": EXPERIMENT["EPS_VALUES"], "BEAM": EXPERIMENT["BEAM"],
             "LS": list(range(1, EXPERIMENT["MAX_LEN"] + 1))}
    given = {"EPS_VALUES": EPS_VALUES, "BEAM": BEAM, "LS": LS}
    if MAX_LEN is not None:
        fixed["MAX_LEN"], given["MAX_LEN"] = EXPERIMENT["MAX_LEN"], MAX_LEN
    expect_given(given, fixed)


def experiment_keys(eps_values, beam_size: int):
    """The keys of the experiment's ``results``: (head, eps, decoder), eps None for VA."""
    decoders = ("greedy", f"beam-{beam_size}")
    keys = [("VA", None, d) for d in decoders]
    keys += [(h, float(e), d) for h in ("ST", "NMST") for e in eps_values for d in decoders]
    return keys


def _fake_generation(first_steps, max_len, method="greedy", lengths=None, eos_id=9):
    """A Generation whose tokens end in eos at ``lengths`` (default: the first-finish steps)."""
    from nmst_lib.decoding import PAD, Generation

    first = torch.as_tensor(first_steps, dtype=torch.long)
    lengths = first.clamp(max=max_len) if lengths is None else torch.as_tensor(lengths, dtype=torch.long)
    terminated = first <= max_len
    tokens = torch.full((len(first), max_len), PAD, dtype=torch.long)
    for i, (n, done) in enumerate(zip(lengths.tolist(), terminated.tolist())):
        tokens[i, :n] = 1
        if done:
            tokens[i, n - 1] = eos_id
    return Generation(tokens=tokens, lengths=lengths, terminated=terminated, max_len=max_len, eos_id=eos_id,
                      method=method, scores=torch.zeros(len(first)), first_finish_steps=first)


def _student_rnt(my_rnt, generation, Ls):
    out = call_student(my_rnt, generation, list(Ls), name="my_rnt")
    try:
        arr = np.asarray(out.detach().cpu() if isinstance(out, torch.Tensor) else out, dtype=np.float64)
    except (TypeError, ValueError):
        raise AssertionError(f"`my_rnt` returned {type(out).__name__}, not a sequence of numbers") from None
    expect(arr.shape == (len(Ls),), f"`my_rnt(generation, Ls)` returned shape {arr.shape}; expected one r_nt(L) per "
                                    f"L, shape ({len(Ls)},)")
    return arr


def check_rnt_token_level(my_rnt: Callable) -> None:
    """r_nt(L) (notation page; Choi et al. eq. 11; Chapter 4, 'Checking the bounds'): for a token-level
    decoder, the fraction of rows with no eos among their first L tokens."""
    gen = _fake_generation([1, 3, 3, 7, 11, 11], max_len=10)  # the last two never stop within 10
    Ls = [1, 2, 3, 6, 7, 10]
    want = np.array([5, 5, 3, 3, 2, 2]) / 6
    got = _student_rnt(my_rnt, gen, Ls)
    for L, g, w in zip(Ls, got, want):
        expect(abs(g - w) < 1e-12,
               f"r_nt({L}) is {fmt(float(g))} for greedy rows whose first eos is at steps 1, 3, 3, 7 and never "
               f"(two rows), but the definition gives {fmt(float(w))}: the fraction of rows with NO eos among "
               f"their first L tokens (a row ending exactly at step L has terminated)")


def check_rnt_beam_uses_first_finish(my_rnt: Callable) -> None:
    """r_nt(L) of beam search (notation page; Chapter 4, 'Checking the bounds'): read off
    ``first_finish_steps`` (the first step at which a hypothesis finished), not the returned lengths,
    since with step limit L beam search returns the best hypothesis finished by L."""
    gen = _fake_generation([2, 4, 4, 9], max_len=8, method="beam", lengths=[6, 4, 8, 8])
    Ls = [1, 2, 3, 4, 5, 6, 8]
    want = np.array([4, 3, 3, 1, 1, 1, 1]) / 4
    got = _student_rnt(my_rnt, gen, Ls)
    for L, g, w in zip(Ls, got, want):
        expect(abs(g - w) < 1e-12,
               f"r_nt({L}) of a beam search is {fmt(float(g))}, but it should be {fmt(float(w))}: the rows' first "
               f"finished hypotheses came at steps 2, 4, 4 and never (generation.first_finish_steps), while the "
               f"returned sequences have lengths 6, 4, 8, 8. A run with step limit L returns a hypothesis finished "
               f"by L, so r_nt(L) is read off first_finish_steps, not off the returned lengths (Chapter 4, "
               f"'Checking the bounds'; notation page, r_nt(L))")


def hidden_rnt_matches_library(my_rnt: Callable) -> None:
    """r_nt(L) equals ``nmst_lib.metrics.rnt_curve`` on random greedy and beam generations."""
    from nmst_lib.metrics import rnt_curve

    g = generator(51)
    for method in ("greedy", "beam", "nucleus"):
        max_len = 40
        first = torch.randint(1, max_len + 2, (64,), generator=g)
        lengths = None
        if method == "beam":
            extra = torch.randint(0, 10, (64,), generator=g)
            lengths = torch.where(first <= max_len, (first + extra).clamp(max=max_len), torch.full_like(first, max_len))
        gen = _fake_generation(first.tolist(), max_len, method=method, lengths=lengths)
        Ls = list(range(1, max_len + 1))
        got = _student_rnt(my_rnt, gen, Ls)
        want = rnt_curve(gen, Ls)
        bad = np.abs(got - want) > 1e-12
        if bad.any():
            i = int(np.argmax(bad))
            raise AssertionError(f"r_nt({Ls[i]}) of a random {method} generation is {fmt(float(got[i]))}, "
                                 f"nmst_lib.metrics.rnt_curve gives {fmt(float(want[i]))}")


def _check_results_structure(results, eps_values, beam_size, Ls):
    results = _present(results, "results")
    expect(isinstance(results, dict), f"`results` must be a dict, got {type(results).__name__}")
    keys = experiment_keys(eps_values, beam_size)
    normalised = {}
    for key, value in results.items():
        if isinstance(key, tuple) and len(key) == 3:
            head, eps, dec = key
            normalised[(head, None if eps is None else float(eps), dec)] = value
    for key in keys:
        expect(key in normalised, f"`results` has no entry {key!r}; expected the keys (head, eps, decoder) = "
                                  f"{keys[:3]} ... (eps None for VA)")
        entry = normalised[key]
        expect(isinstance(entry, dict) and "rnt" in entry and "mean_length" in entry,
               f"`results[{key!r}]` must be a dict with 'rnt' (r_nt(L) for L in LS) and 'mean_length'")
        rnt = np.asarray(entry["rnt"], dtype=np.float64)
        expect(rnt.shape == (len(Ls),), f"`results[{key!r}]['rnt']` has shape {rnt.shape}, expected ({len(Ls)},) "
                                        f"(one value per L in LS)")
    return normalised


def check_results_obey_the_theorems(results, EPS_VALUES, BEAM, LS) -> None:
    """Theorems 4.1 and 4.3 (Chapter 4) and Theorem 5.1 (Chapter 5) on the experiment's numbers: with ST
    and NMST heads, greedy search has r_nt(L) = 0 from L = t_{1/2} on, beam search of width k from
    L = t_{1/2} + k - 1 on; r_nt(L) never increases in L."""
    from nmst_lib.theory import first_step_eos_above_half

    _expect_the_given_setting(EPS_VALUES, BEAM, LS)
    res = _check_results_structure(results, EPS_VALUES, BEAM, LS)
    Ls = np.asarray(list(LS))
    for (head, eps, dec), entry in res.items():
        if (head, eps, dec) not in experiment_keys(EPS_VALUES, BEAM):
            continue
        rnt = np.asarray(entry["rnt"], dtype=np.float64)
        expect(bool((rnt >= 0).all() and (rnt <= 1).all()), f"r_nt of {head}, eps = {eps}, {dec} is outside [0, 1]")
        expect(bool((np.diff(rnt) <= 1e-12).all()),
               f"r_nt(L) of {head}, eps = {eps}, {dec} increases with L ({fmt(torch.as_tensor(rnt[:8]))} ...): a "
               f"row that terminated within L has terminated within every larger L")
        if head == "VA":
            continue
        th = first_step_eos_above_half(eps)
        bound = th if dec == "greedy" else th + BEAM - 1
        box = (f"Theorem 4.1 ({_CH4})" if head == "ST" else f"Theorem 5.1 ({_CH5})") if dec == "greedy" else \
            (f"Theorem 4.3 ({_CH4})" if head == "ST" else f"Theorem 5.1 part 2 ({_CH5})")
        late = (Ls >= bound) & (rnt > 0)
        expect(not bool(late.any()),
               f"r_nt({int(Ls[late][0]) if late.any() else 0}) of {head} with eps = {eps:g} under {dec} is "
               f"{fmt(float(rnt[late][0])) if late.any() else 0}, but {box} says every row stops within {bound} "
               f"steps (t_1/2 = {th})")


def hidden_results_match_recomputation(results, build_model, contexts, EPS_VALUES, BEAM, LS, MAX_LEN) -> None:
    """The experiment's numbers equal a recomputation of the problem's experiment (its
    :func:`experiment_model` and :func:`experiment_contexts`, which the notebook's given
    ``build_model`` and ``contexts`` must still equal) with the library's ``decode`` and
    ``rnt_curve`` (greedy and beam search are deterministic)."""
    from nmst_lib.decoding import decode
    from nmst_lib.metrics import rnt_curve

    _expect_the_given_setting(EPS_VALUES, BEAM, LS, MAX_LEN)
    expect_given({"contexts": contexts}, {"contexts": experiment_contexts()})
    for head, eps, _ in experiment_keys(EPS_VALUES, BEAM)[::2]:
        call = f"build_model({head!r}, {eps})"
        expect_given({call: call_student(build_model, head, eps, name="build_model")},
                     {call: experiment_model(head, eps)})
    res = _check_results_structure(results, EPS_VALUES, BEAM, LS)
    Ls = list(LS)
    for head, eps, dec in experiment_keys(EPS_VALUES, BEAM):
        model = experiment_model(head, eps)
        kwargs = {"beam_size": BEAM} if dec.startswith("beam") else {}
        gen = decode(model, contexts, "beam" if kwargs else "greedy", max_len=MAX_LEN, **kwargs)
        want_rnt = rnt_curve(gen, Ls)
        want_mean = gen.lengths.double().mean().item()
        entry = res[(head, eps, dec)]
        got_rnt = np.asarray(entry["rnt"], dtype=np.float64)
        bad = np.abs(got_rnt - want_rnt) > 1e-9
        if bad.any():
            i = int(np.argmax(bad))
            raise AssertionError(f"results[{(head, eps, dec)!r}]['rnt'] at L = {Ls[i]} is {fmt(float(got_rnt[i]))}, "
                                 f"but decoding the given build_model({head!r}, {eps}) with {dec} to MAX_LEN = {MAX_LEN} gives "
                                 f"r_nt = {fmt(float(want_rnt[i]))}")
        expect_close(float(entry["mean_length"]), want_mean, f"results[{(head, eps, dec)!r}]['mean_length']",
                     f"the mean returned length of the {dec} decode (lengths capped at MAX_LEN = {MAX_LEN})",
                     rtol=1e-9)
