"""Chapter 9 (``09_temperature``): what a temperature, global or per token,
does to the entropy, the nucleus and the argmax, the mean of softmax-
normalised temperatures, and NMST's floor on p(eos) under any temperatures.

Part of :mod:`nmst_lib.theory`, which re-exports every public name here."""

from __future__ import annotations

import math
import numbers

import torch

from .._validation import check_index, check_positive_int

__all__ = [
    "tempered_log_softmax",
    "tempered_softmax",
    "tempered_entropy",
    "entropy_temperature_derivative",
    "tempered_nucleus_size",
    "can_become_argmax",
    "softmax_temperature_mean",
    "tempered_nmst_log_probs",
]


# ---------------------------------------------------------------------------------------
# Chapter 9: what a temperature does (global and per-token), and CT + NMST
# ---------------------------------------------------------------------------------------


def _check_scores(z, name: str = "z") -> torch.Tensor:
    if not isinstance(z, torch.Tensor) or not z.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point torch.Tensor of logits [..., V]"
        )
    if z.dim() == 0 or z.shape[-1] == 0:
        raise ValueError(
            f"{name} must have a non-empty last dimension (the vocabulary), got shape {tuple(z.shape)}"
        )
    if bool(torch.isnan(z).any()) or bool(torch.isinf(z).any()):
        raise ValueError(
            f"{name} must be finite (a temperature divides every logit, so -inf would stay -inf)"
        )
    return z


def _check_temperature(
    tau, z: torch.Tensor, name: str = "tau"
) -> torch.Tensor:
    """``tau`` as a tensor of z's dtype that broadcasts to ``z``: a number (one global
    temperature), ``[..., 1]`` (one per row) or ``[..., V]`` (one per token); finite and > 0."""
    if isinstance(tau, bool):
        raise TypeError(
            f"{name} must be a positive number or a tensor of positive temperatures, got bool"
        )
    if isinstance(tau, numbers.Real):
        tau = torch.tensor(float(tau), dtype=z.dtype, device=z.device)
    if not isinstance(tau, torch.Tensor):
        raise TypeError(
            f"{name} must be a positive number or a tensor of positive temperatures, got {type(tau).__name__}"
        )
    if not tau.is_floating_point():
        tau = tau.to(z.dtype)
    try:
        shape = torch.broadcast_shapes(tau.shape, z.shape)
    except RuntimeError:
        raise ValueError(
            f"{name} of shape {tuple(tau.shape)} does not broadcast to the logits' shape {tuple(z.shape)}; "
            "give a number, [..., 1] (one temperature per row) or [..., V] (one per token)"
        ) from None
    if shape != z.shape:
        raise ValueError(
            f"{name} of shape {tuple(tau.shape)} would enlarge the logits' shape {tuple(z.shape)} to "
            f"{tuple(shape)}; give a number, [..., 1] or [..., V]"
        )
    if (
        bool(torch.isnan(tau).any())
        or not bool((tau > 0).all())
        or bool(torch.isinf(tau).any())
    ):
        raise ValueError(
            f"{name} must be finite and > 0 (a temperature divides the logits), got min "
            f"{float(tau.min()):.3g}"
        )
    return tau.to(device=z.device, dtype=z.dtype)


def _divided(z: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """``z / tau``, checked finite: a tiny temperature or a half-precision dtype can overflow it
    (float16 ``z = 1e4`` at ``T = 0.1``; float32 at ``T = 1e-36``), and the log-softmax of an
    infinite logit is NaN."""
    scaled = z / tau
    if not bool(torch.isfinite(scaled).all()):
        raise ValueError(
            f"z / tau overflows {z.dtype} (largest {torch.finfo(z.dtype).max:.3g}): the logits divided by "
            "the temperatures must be finite; use a wider dtype (float32 or float64) or larger temperatures"
        )
    return scaled


def _is_global(tau: torch.Tensor) -> bool:
    return tau.dim() == 0 or tau.shape[-1] == 1


def tempered_log_softmax(z, tau) -> torch.Tensor:
    r"""``log softmax(z / T)`` over the last dim, for a global or a per-token temperature ``T`` = ``tau``.

    Temperature scaling, eq. 4 of *Contextual Temperature for Language Modeling* (2020); with one
    temperature per token (``tau`` of shape ``[..., V]``) it is their eq. 5's output layer,
    ``p_v = exp(z_v / T_v) / sum_w exp(z_w / T_w)`` (Chapter 9, ``09_temperature``). ``tau`` is a
    number, ``[..., 1]`` (one per row) or ``[..., V]``, finite and positive. Computed with
    ``log_softmax``, so the exponentials never overflow however large the logits or small the
    temperatures; ``z / T`` itself must be finite in the dtype (``ValueError`` otherwise, e.g.
    float16 ``z = 1e4`` at ``T = 0.1``, or float32 at ``T = 1e-36``).
    """
    z = _check_scores(z)
    tau = _check_temperature(tau, z)
    return torch.log_softmax(_divided(z, tau), dim=-1)


def tempered_softmax(z, tau) -> torch.Tensor:
    r"""``softmax(z / T)`` over the last dim (the probabilities of :func:`tempered_log_softmax`).

    Eq. 4 of *Contextual Temperature for Language Modeling* (2020) for a global ``T``; eq. 5's
    per-token form when ``tau`` is ``[..., V]``. Chapter 9 (``09_temperature``): a global
    temperature keeps the ranking of the tokens, a per-token one can change it
    (:func:`can_become_argmax`).
    """
    return tempered_log_softmax(z, tau).exp()


def tempered_entropy(z, tau) -> torch.Tensor:
    r"""Shannon entropy (nats) of ``softmax(z / T)`` over the last dim, shape ``z.shape[:-1]``.

    ``H = log sum_w exp(z_w / T_w) - sum_v p_v z_v / T_v``, computed from ``logsumexp`` (exact
    for every input with ``z / T`` finite in the dtype; ``ValueError`` otherwise, as in
    :func:`tempered_log_softmax`). Chapter 9 (``09_temperature``), Proposition "A temperature sets the
    entropy": for a global ``T`` it is non-decreasing in ``T``
    (:func:`entropy_temperature_derivative`), tends to ``log |argmax set|`` as ``T -> 0`` and to
    ``log V`` as ``T -> inf``.
    """
    z = _check_scores(z)
    tau = _check_temperature(tau, z)
    scaled = _divided(z, tau)
    log_p = torch.log_softmax(scaled, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


def entropy_temperature_derivative(z, tau) -> torch.Tensor:
    r"""``dH/dT = Var_p(z) / T^3`` for ``p = softmax(z / T)`` and one temperature ``T`` per row.

    Chapter 9 (``09_temperature``), Proposition "A temperature sets the entropy": with
    ``beta = 1/T``, ``log Z(beta)`` has derivative ``E_p[z]`` and ``E_p[z]`` has derivative
    ``Var_p(z)``, so ``H = log Z - beta E_p[z]`` has ``dH/dbeta = -beta Var_p(z)`` and
    ``dH/dT = Var_p(z) / T^3 >= 0``, zero only when all logits are equal. Only for a global
    temperature (a number or ``[..., 1]``): a per-token temperature has no single derivative
    (ValueError). Shape ``z.shape[:-1]``. Compare with autograd through :func:`tempered_entropy`.
    ``z / T`` must be finite and ``T^3`` positive in the dtype (``ValueError`` otherwise).
    """
    z = _check_scores(z)
    tau = _check_temperature(tau, z)
    if not _is_global(tau) and z.shape[-1] > 1:
        raise ValueError(
            "entropy_temperature_derivative is for one temperature per row (a number or [..., 1]); "
            f"got a per-token temperature of shape {tuple(tau.shape)}"
        )
    p = torch.softmax(_divided(z, tau), dim=-1)
    mean = (p * z).sum(dim=-1, keepdim=True)
    var = (p * (z - mean) ** 2).sum(dim=-1)
    t = tau.squeeze(-1) if tau.dim() > 0 else tau
    cube = t**3
    if not bool((cube > 0).all()):
        raise ValueError(
            f"T^3 underflows to 0 in {z.dtype} for a temperature of {float(t.min()):.3g}: dH/dT = Var/T^3 "
            "needs a wider dtype (float64) or a larger temperature"
        )
    return var / cube


def tempered_nucleus_size(z, tau, mu) -> torch.Tensor:
    r"""The number of tokens in the nucleus of ``softmax(z / T)``: the smallest set of most probable
    tokens whose total probability is ``>= mu`` (the book's nucleus, ARCHITECTURE.md).

    For a global ``T`` the nucleus is a prefix of the ranking of ``z`` whatever ``T``, and its size
    is non-decreasing in ``T`` (Chapter 9, ``09_temperature``, Proposition "A global temperature
    keeps the ranking": the probability of the top ``k`` tokens is non-increasing in ``T`` for
    every ``k``). ``tau`` as in :func:`tempered_log_softmax` (a per-token temperature is allowed:
    then the nucleus is a prefix of the ranking of ``z / T``). ``mu`` in ``(0, 1]``; ``mu = 1``
    gives the support, every token since ``z`` is finite, as ``nucleus_mask`` at ``p = 1``. The
    cumulative mass is computed in log space (``logcumsumexp``), as in
    ``nmst_lib.decoding.nucleus_mask``; where the mass of a prefix equals ``mu`` exactly, the
    count depends on how the log-softmax rounds (shifting ``z`` by a constant can move it by one),
    as for ``nucleus_mask``. Returns an int64 tensor of shape ``z.shape[:-1]``.
    """
    if (
        isinstance(mu, bool)
        or not isinstance(mu, numbers.Real)
        or not (0.0 < float(mu) <= 1.0)
    ):
        raise ValueError(
            f"mu (the nucleus mass) must be a number in (0, 1], got {mu!r}"
        )
    log_p = tempered_log_softmax(z, tau)
    if float(mu) == 1.0:
        # The smallest set of mass 1 is the support, as in nucleus_mask: every
        # token (z is finite). The cumulative mass can round to 1 before the
        # last tokens ([0, -40] in float64) and must not end the count there.
        return (log_p > -math.inf).sum(dim=-1)
    sorted_log_p = torch.sort(log_p, dim=-1, descending=True).values
    upto = torch.logcumsumexp(
        sorted_log_p, dim=-1
    )  # log of the mass of the top k, k = 1..V
    before = torch.cat(
        [torch.full_like(upto[..., :1], -math.inf), upto[..., :-1]], dim=-1
    )  # strictly before rank k
    return (before < math.log(float(mu))).sum(dim=-1)


def _check_range(lo, hi) -> tuple[float, float]:
    for name, v in (("lo", lo), ("hi", hi)):
        if (
            isinstance(v, bool)
            or not isinstance(v, numbers.Real)
            or not math.isfinite(float(v))
        ):
            raise TypeError(f"{name} must be a finite number, got {v!r}")
    lo, hi = float(lo), float(hi)
    if not 0.0 < lo <= hi:
        raise ValueError(
            f"the temperature range needs 0 < lo <= hi (e.g. [2, 4] for a = 1, b = 1/2), got [{lo}, {hi}]"
        )
    return lo, hi


def can_become_argmax(z, j, lo, hi) -> torch.Tensor:
    r"""Whether some per-token temperatures ``T_v`` in ``[lo, hi]`` make token ``j`` the strict argmax of ``z / T``.

    Chapter 9 (``09_temperature``), Proposition "What a bounded per-token temperature can
    reorder". Each ratio ``z_v / T_v`` moves independently in an interval whose ends are
    ``z_v / lo`` and ``z_v / hi``; the best case for ``j`` is its largest value,
    ``z_j / lo`` if ``z_j >= 0`` else ``z_j / hi``, against the smallest value of every other
    token, ``z_i / hi`` if ``z_i >= 0`` else ``z_i / lo``. So ``j`` can become the strict argmax
    (the token greedy search picks) iff

    .. math::
        \max_{T_j} \frac{z_j}{T_j} \;>\; \max_{i \neq j}\, \min_{T_i} \frac{z_i}{T_i} .

    For positive logits this is ``z_j > (lo / hi) max_{i != j} z_i``: with the paper's range
    [a/b, (1 + a)/b] the ratio is ``hi/lo = (1 + a)/a`` (2 for a = 1). The answer depends on the
    logits themselves, not only on their differences: unlike the softmax, a per-token
    temperature is not invariant to adding a constant to every logit. ``j`` is a token id, or
    ``None`` for a bool mask ``[..., V]`` over every token; otherwise a bool tensor of shape
    ``z.shape[:-1]``. With ``lo == hi`` (a global temperature) only the current argmax can.
    ``z / lo`` must be finite in the dtype (``ValueError`` otherwise).
    """
    z = _check_scores(z)
    lo, hi = _check_range(lo, hi)
    _divided(z, lo)  # the largest ratios in absolute value (lo <= hi)
    best = torch.where(z >= 0, z / lo, z / hi)  # the largest z_v / T_v can be
    worst = torch.where(
        z >= 0, z / hi, z / lo
    )  # the smallest z_v / T_v can be
    V = z.shape[-1]
    if V == 1:
        mask = torch.ones_like(z, dtype=torch.bool)
    else:
        top2 = torch.topk(worst, 2, dim=-1)
        is_top = torch.zeros_like(z, dtype=torch.bool).scatter(
            -1, top2.indices[..., :1], True
        )
        others_max = torch.where(
            is_top, top2.values[..., 1:2], top2.values[..., :1]
        )  # max over i != v of worst_i
        mask = best > others_max
    if j is None:
        return mask
    j = check_index(j, V, "j")
    return mask[..., j]


def softmax_temperature_mean(vocab_size, a, b) -> float:
    r"""The mean over the vocabulary of eq. 5's temperature when sigma is a *softmax*: ``(a + 1/K)/b``.

    *Contextual Temperature for Language Modeling* (2020), Sec. 3.1 says the temperatures are
    "scaled using a Softmax function over the dimension of the vocabulary": then
    ``T_v = (s_v + a)/b`` with ``sum_v s_v = 1``, so ``sum_v T_v = (1 + K a)/b`` whatever the
    context, the mean is ``(a + 1/K)/b``, the loss-scaling factor of Sec. 3.3 is this constant,
    and the average of ``T_v - a/b`` is ``1/(K b)`` (2e-4 for PTB's K = 10,000 and b = 1/2: the
    size of their reported ``2 + 8.34e-5``). Chapter 9 (``09_temperature``), Proposition "The
    softmax reading". ``vocab_size`` K >= 1, ``a > 0``, ``b > 0``.
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    for name, v in (("a", a), ("b", b)):
        if (
            isinstance(v, bool)
            or not isinstance(v, numbers.Real)
            or not (math.isfinite(float(v)) and float(v) > 0)
        ):
            raise ValueError(
                f"{name} must be a finite number > 0 (eq. 5: T = (sigma + a)/b), got {v!r}"
            )
    return (float(a) + 1.0 / vocab_size) / float(b)


def tempered_nmst_log_probs(logits, tau, eos_id, eps, t=None) -> torch.Tensor:
    r"""NMST log-probabilities with a temperature on the non-eos logits: CT + NMST as a formula.

    Chapter 9 (``09_temperature``), Theorem "CT + NMST keeps the termination guarantee": eos
    gets the NMST probability of its *raw* logit (Choi, Cho, Lee (2023), Def. 6),
    ``p(eos at t) = sigma(z_eos) + (1 - sigma(z_eos)) (1 - (1 - eps)^t)``, and every other token
    ``v`` gets ``(1 - p(eos)) softmax_{w != eos}(z_w / T_w)_v``. Whatever the temperatures,
    ``p(eos at t) >= 1 - (1 - eps)^t``. This is ``nmst_lib.heads.nmst_log_probs`` applied to the
    logits with every non-eos entry divided by its temperature (the eos entry of ``tau`` is
    ignored). ``tau``: a number, ``[..., 1]`` or ``[..., V]``; ``t`` as for ``nmst_log_probs``
    (default ``1..T`` along dim -2). The contextual head with an NMST base must agree with it.
    """
    from ..heads import nmst_log_probs

    z = _check_scores(logits, "logits")
    tau = _check_temperature(tau, z)
    eos_id = check_index(eos_id, z.shape[-1], "eos_id")
    is_eos = torch.zeros(z.shape[-1], dtype=torch.bool, device=z.device)
    is_eos[eos_id] = True
    # the eos entry keeps its raw logit: only the non-eos ratios must be finite
    tempered = _divided(z, torch.where(is_eos, torch.ones_like(tau), tau))
    return nmst_log_probs(torch.where(is_eos, z, tempered), eos_id, eps, t)
