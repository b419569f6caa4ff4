"""Where the beam-search bound binds (Chapters 4-5, ``04_self_terminating`` and ``05_nmst``).

Beam search of width k on an ST or NMST model stops after at most t_{1/2} + k - 1 steps
(Chapter 4, Theorem "Beam search stops"; Chapter 5, Theorem "Consistency of NMST", part 2;
the papers state t_{1/2} + k). This module builds a model on which width 2 runs to exactly
t_{1/2} + 1 steps, so that a check of the bound can fail if the bound is off by one:

* :func:`beam_gap_window` is the interval of first-step log-odds D for which it does;
* :class:`SplitFirstStepModel` is the model: tokens A = 0, B = 1, eos = 2; the first step
  splits the non-eos mass between A and B with log-odds D, every later step puts the non-eos
  mass on A, and the eos logit keeps p(eos at t) on the floor f_lb(t) = 1 - (1 - eps)^t
  (within 2e-9 relative: ST's continue factor sigma(20), NMST's weight sigma(-30));
* :func:`beam_attaining_model` is that model at the middle of the window.

Why: step 1 keeps A and B with score gap D, and each goes on with A, so the gap stays D. At a
step 2 <= t < t_{1/2} the two continuations beat the leader's eos iff D < log(Q_t / P_t) (P_t =
f_lb(t), Q_t = 1 - P_t), tightest at t = t_{1/2} - 1: nothing finishes before t_{1/2}. At
t_{1/2} the leader's eos comes first, and the leader's continuation beats the trailer's eos iff
D > log(P / Q) at P = P_{t_{1/2}}: one finished sequence and one live prefix, whose eos is the
second at t_{1/2} + 1. The window (log(P / Q), log(Q_T / P_T)), T = t_{1/2} - 1, is open iff
floor(beta_eps) < beta_eps log2(2 - eps), roughly iff the fractional part of beta_eps exceeds
1/2; when it is empty no ST model reaches t_{1/2} + 1 with width 2 (the argument is in
``tests/test_theory.py``, "where the beam bound binds", which also checks this module's model
against an independent one).
"""

from __future__ import annotations

import math

import torch

from .._validation import check_eps
from ..heads import NMSTHead, STHead, eos_lower_bound
from .termination import first_step_eos_above_half

__all__ = ["SplitFirstStepModel", "beam_attaining_model", "beam_gap_window"]

_EOS_LOGIT = {"st": 20.0, "nmst": -30.0}
"""The eos logit that keeps p(eos at t) on the floor: ST's factor to continue sigma(20) = 1 - 2e-9,
NMST's weight on stopping sigma(-30) = 9e-14."""


def beam_gap_window(eps) -> tuple[float, float]:
    """The open interval (lo, hi) of first-step log-odds D for which beam search of width 2 on
    :class:`SplitFirstStepModel` runs to exactly t_{1/2} + 1 steps: lo = log(P / (1 - P)) at
    P = f_lb(t_{1/2}), hi = log((1 - P') / P') at P' = f_lb(t_{1/2} - 1) (module docstring).
    ``lo >= hi`` means no such D exists for this eps. Needs t_{1/2} >= 2, i.e. eps <= 1/2
    (for eps > 1/2, t_{1/2} = 1 and width 2 always runs to step 2). Chapter 4
    (``04_self_terminating``) prints it where the beam bound is attained."""
    eps = check_eps(eps)
    t_half = first_step_eos_above_half(eps)
    if t_half < 2:
        raise ValueError(f"eps must be at most 1/2 (t_1/2 >= 2) for the window to exist, got eps = {eps!r} "
                         "(t_1/2 = 1: beam search of width 2 stops at step 2 on every model)")
    p_big, p_small = eos_lower_bound(t_half, eps), eos_lower_bound(t_half - 1, eps)
    return math.log(p_big / (1 - p_big)), math.log((1 - p_small) / p_small)


class SplitFirstStepModel:
    """The model of the module docstring, for the decoding protocol of ARCHITECTURE.md. Chapters 4-5
    (``04_self_terminating``, ``05_nmst``) build it through :func:`beam_attaining_model`.

    ``head`` is ``"st"`` or ``"nmst"``; ``gap`` the log-odds D of A over B at step 1. The state is
    the head's per-row step state; every row of a batch is the same model. ``last_step`` is
    the largest step whose next-token distribution a decoder has asked for since the last
    :meth:`initial_state`: for beam search, the step at which the search stopped (it ranks the
    expansions of step t from the distributions of the prefixes of length t - 1, asked for at
    step t).
    """

    vocab_size = 3
    eos_id = 2

    def __init__(self, eps, gap: float, head: str = "st", *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None):
        if head not in _EOS_LOGIT:
            raise ValueError(f"head must be 'st' or 'nmst', got {head!r}")
        if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not math.isfinite(gap):
            raise ValueError(f"gap must be a finite number (the log-odds of A over B at step 1), got {gap!r}")
        self.eps, self.gap, self.kind = check_eps(eps), float(gap), head
        self.head = (STHead if head == "st" else NMSTHead)(self.eps, eos_id=self.eos_id)
        z = _EOS_LOGIT[head]
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.first = torch.tensor([self.gap, 0.0, z], dtype=dtype, device=self.device)
        self.later = torch.tensor([0.0, -30.0, z], dtype=dtype, device=self.device)
        self.last_step = 0

    def _out(self, logits: torch.Tensor, head_state: torch.Tensor):
        return self.head.step(logits.expand(head_state.shape[0], -1), head_state)

    def initial_state(self, contexts: torch.Tensor):
        """Step 1's distribution for each context (``contexts [B, k]``; its tokens do not matter)."""
        if not isinstance(contexts, torch.Tensor) or contexts.dim() != 2:
            raise ValueError("contexts must be a LongTensor of shape [B, k]")
        head_state = self.head.initial_step_state(contexts.shape[0], device=self.device)
        log_probs, head_state = self._out(self.first, head_state)
        self.last_step = 1
        return head_state, log_probs

    def step(self, state, tokens: torch.Tensor):
        """The next step's distribution (the same for every prefix after step 1)."""
        log_probs, head_state = self._out(self.later, state)
        self.last_step += 1
        return head_state, log_probs

    def select(self, state, index: torch.Tensor):
        """Rows of the state picked, reordered or repeated by ``index``."""
        return state[index.to(state.device)]


def beam_attaining_model(eps, head: str = "st", **kwargs) -> SplitFirstStepModel:
    """:class:`SplitFirstStepModel` with D at the middle of :func:`beam_gap_window`: beam search
    of width 2 on it stops at exactly t_{1/2} + 1 (Chapter 4, Theorem "Beam search stops", is
    attained). ValueError when the window is empty for ``eps`` (no ST or NMST model attains the
    bound with width 2 then): take an eps whose beta_eps has a fractional part above about 1/2,
    e.g. 0.05 (beta = 13.51) or 0.1 (beta = 6.58)."""
    lo, hi = beam_gap_window(eps)
    if not lo < hi:
        raise ValueError(
            f"for eps = {eps!r} no ST or NMST model makes beam search of width 2 run to t_1/2 + 1: the window "
            f"of first-step log-odds ({lo:.4g}, {hi:.4g}) is empty (floor(beta_eps) >= beta_eps log2(2 - eps)); "
            "take an eps whose beta_eps has a fractional part above about 1/2, e.g. 0.05 or 0.1")
    return SplitFirstStepModel(eps, (lo + hi) / 2, head, **kwargs)
