"""Chapters 4-5: one trajectory of the wish to stop lambda(t) through the VA,
ST and NMST output layers (the eos-probability explorer of
:mod:`nmst_lib.plots` draws it).

Part of :mod:`nmst_lib.theory`, which re-exports every public name here."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

from .._validation import check_eps, check_positive_int
from ..heads import (
    nmst_eos_log_probs,
    st_eos_log_probs,
    vanilla_log_probs,
)

__all__ = [
    "EOS_SHAPES",
    "eos_trajectory",
    "eos_probabilities",
]


# ---------------------------------------------------------------------------
# Chapters 4-5: the wish to stop lambda(t) and each output layer's p(eos)
# ---------------------------------------------------------------------------

#: Trajectories of lambda(t) offered by :func:`eos_trajectory`, with their
#: descriptions (Chapters 4-5, ``04_self_terminating`` and ``05_nmst``).
EOS_SHAPES: dict[str, str] = {
    "one_stop": "could end once (t = t0), never again",
    "remark1": "Remark 1: may end at t0 (p = amplitude), must end at t1",
    "fading": "fading: lambda(t) = amplitude * t0 / (t0 + t)",
}

_HEADS = ("VA", "ST", "NMST")


def _check_probability(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a real number in (0, 1), "
            f"got {type(value).__name__}"
        )
    value = float(value)
    if not (0.0 < value < 1.0):
        raise ValueError(
            f"{name} must lie strictly between 0 and 1, got {value!r}"
        )
    return value


def _check_shape(shape) -> str:
    if shape not in EOS_SHAPES:
        raise ValueError(
            f"shape must be one of {sorted(EOS_SHAPES)}, got {shape!r}"
        )
    return shape


def _check_heads(heads) -> tuple[str, ...]:
    if (
        isinstance(heads, str)
        or not isinstance(heads, Sequence)
        or len(heads) == 0
    ):
        raise TypeError(
            f"heads must be a non-empty sequence drawn from {_HEADS}, "
            "e.g. ('VA', 'NMST')"
        )
    for head in heads:
        if head not in _HEADS:
            raise ValueError(f"unknown head {head!r}; allowed: {_HEADS}")
    return tuple(heads)


def _logit(p: torch.Tensor) -> torch.Tensor:
    """log(p) - log(1 - p), exact for p near 0 and near 1."""
    return torch.log(p) - torch.log1p(-p)


def eos_trajectory(
    t_max: int,
    shape: str = "one_stop",
    amplitude: float = 0.5,
    *,
    t0: int = 5,
    t1: int = 12,
    baseline: float = 1e-3,
) -> torch.Tensor:
    """The eos logit z_t = logit(lambda(t)), t = 1, ..., t_max, along a named
    trajectory.

    lambda(t) is the NMST mixing weight sigma(u_eos . h_t) of Choi, Cho, Lee
    (2023), Def. 6 (eq. 10, Fig. 1): how much the model itself wants to stop
    at step t. The trajectories (``shape``, :data:`EOS_SHAPES`) are:

    * ``"one_stop"``: lambda = ``amplitude`` at t = t0 (the text could end
      there, e.g. after "I am a boy") and ``baseline`` everywhere else: the
      model never wants to stop again.
    * ``"remark1"``: the optimal trajectory of Choi, Cho, Lee (2023), Remark 1
      (with the probabilities kept inside (0, 1)): ``amplitude`` at t0 where
      the shorter training sequence ends, ``baseline`` until t1 where the
      longer one ends, 1 - ``baseline`` from t1 on. Non-monotone.
    * ``"fading"``: lambda(t) = amplitude * t0 / (t0 + t), a model that grows
      ever less willing to stop (p(eos) -> 0, like the inconsistent RNN of
      Welleck et al. 2020, Thm. 3.4).

    Returns a float64 tensor of shape ``[t_max]`` (entry ``t - 1`` is step
    t), exact in log space. Chapters 4-5 (``04_self_terminating``,
    ``05_nmst``).
    """
    t_max = check_positive_int(t_max, "t_max")
    shape = _check_shape(shape)
    amplitude = _check_probability(amplitude, "amplitude")
    baseline = _check_probability(baseline, "baseline")
    t0 = check_positive_int(t0, "t0")
    t1 = check_positive_int(t1, "t1")
    if shape == "remark1" and not t0 < t1:
        raise ValueError(
            f"the Remark 1 trajectory needs t0 < t1, got t0={t0}, t1={t1}"
        )
    t = torch.arange(1, t_max + 1, dtype=torch.float64)
    lam = torch.full_like(t, baseline)
    if shape == "one_stop":
        lam[t == t0] = amplitude
    elif shape == "remark1":
        lam[t == t0] = amplitude
        lam[t >= t1] = 1.0 - baseline
    else:  # fading
        lam = amplitude * t0 / (t0 + t)
    return _logit(lam)


def _check_trajectory_steps(steps, T: int, device) -> torch.Tensor:
    """``steps`` of :func:`eos_probabilities`: every step 1..T when None,
    else checked (increasing integer steps in [1, T]) and moved to
    ``device``."""
    if steps is None:
        return torch.arange(1, T + 1, device=device)
    if (
        not isinstance(steps, torch.Tensor)
        or steps.dim() != 1
        or steps.is_floating_point()
        or steps.numel() == 0
        or bool((steps < 1).any())
        or bool((steps > T).any())
        or bool((torch.diff(steps) <= 0).any())
    ):
        raise ValueError(
            "steps must be a non-empty increasing 1-D integer tensor of "
            f"steps in [1, {T}]"
        )
    return steps.to(device)


def eos_probabilities(
    eos_logits: torch.Tensor,
    eps: float,
    heads: Sequence[str] = _HEADS,
    steps: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """p(eos | t) of the VA, ST and NMST layers for one eos-logit trajectory
    z_1, ..., z_T.

    The vocabulary is reduced to eos and one competing token of logit 0,
    which loses nothing: every layer below gives eos a probability that
    depends only on the eos logit and (for VA) the log-sum-exp of the other
    logits. With lambda(t) = sigma(z_t):

    * VA (softmax): p = sigma(z_t) = lambda(t).
    * NMST (Choi, Cho, Lee 2023, Def. 6, eq. 10): p = (1 - lambda(t)) f_lb(t)
      + lambda(t), with f_lb(t) = 1 - (1 - eps)^t; computed by
      :func:`nmst_lib.heads.nmst_eos_log_probs`.
    * ST (Welleck et al. 2020, Def. 4.3): p = 1 - prod_{s <= t} (1 - eps)
      sigma(u_eos . h_s). ST's sigmoid is a probability of *continuing*, so
      ST is given the negated logit -z_t: both self-terminating layers then
      receive the same per-step wish to stop lambda(t), and ST's p(eos)
      becomes 1 - prod_{s <= t} (1 - eps)(1 - lambda(s)), which can never
      decrease. Computed by :func:`nmst_lib.heads.st_eos_log_probs`.

    Args:
        eos_logits: float tensor ``[T]``, entry ``t - 1`` is z_t (e.g.
            :func:`eos_trajectory`).
        eps: the lower-bound rate in (0, 1).
        heads: which of ``"VA"``, ``"ST"``, ``"NMST"`` to compute.
        steps: optional increasing integer tensor of steps in ``[1, T]`` at
            which to return the probabilities (a figure needs a few thousand
            of a million steps). VA and NMST are then evaluated only there;
            ST still accumulates over every step.

    Returns:
        ``{head: float64 tensor [T]}`` (or ``[len(steps)]``) of
        probabilities, on the device of ``eos_logits``. Chapters 4-5
        (``04_self_terminating``, ``05_nmst``); drawn by
        :func:`nmst_lib.plots.eos_curves.plot_eos_probabilities`.
    """
    eps = check_eps(eps)
    if (
        not isinstance(eos_logits, torch.Tensor)
        or not eos_logits.is_floating_point()
        or eos_logits.dim() != 1
    ):
        raise TypeError(
            "eos_logits must be a 1-D floating-point torch.Tensor [T] "
            "(entry t-1 is step t)"
        )
    if eos_logits.shape[0] == 0:
        raise ValueError("eos_logits is empty: a trajectory needs at least one step")
    heads = _check_heads(heads)
    z = eos_logits.to(torch.float64)
    steps = _check_trajectory_steps(steps, z.shape[0], z.device)
    z_at = z[steps - 1]
    out: dict[str, torch.Tensor] = {}
    for head in heads:
        if head == "VA":  # eos against one token of logit 0
            pair = torch.stack([torch.zeros_like(z_at), z_at], dim=-1)
            log_p = vanilla_log_probs(pair)[..., 1]
        elif head == "NMST":
            log_p, _ = nmst_eos_log_probs(z_at, eps, t=steps)
        else:  # ST: its sigmoid is the probability of going on;
            # it accumulates over every step
            log_p, _ = st_eos_log_probs(-z[: int(steps[-1])], eps)
            log_p = log_p[steps - 1]
        out[head] = log_p.exp()
    return out
