"""Contextual temperature: a per-token, per-context temperature output layer (Chapter 9, 09_temperature).

*Contextual Temperature for Language Modeling* (2020) divides the logits ``z = U h_t`` of a
language model element-wise by a temperature vector ``tau[t] in R^V`` computed from the same
hidden state ``h_t`` (Sec. 3.1, eq. 5):

    ``tau = (sigma(h^T W1 W2) + a) / b``,  ``W1: H x Q``, ``W2: Q x V`` (no biases),

so every vocabulary entry gets its own temperature, different at every position, in the range
``[a/b, (1 + a)/b]`` (the paper's best ``(a, b) = (1, 1/2)``: ``[2, 4]``), and
``p = softmax(z / tau)`` (eq. 4 with a vector temperature). Four normalisations of
``mu = h^T W1 W2`` are implemented (``TEMPERATURE_NORMALISATIONS``):

* ``"sigmoid"``: ``(sigmoid(mu) + a) / b`` per token (the issue's reading of eq. 5; our default);
* ``"softmax"``: ``(softmax(mu) + a) / b`` with the softmax over the vocabulary, the paper's
  literal text ("we scaled temperatures using a Softmax function over the dimension of the
  vocabulary"); then the temperatures sum to the constant ``(1 + V a) / b`` and their mean is
  exactly ``(a + 1/V) / b`` at every position, which is what the temperatures the paper reports
  (``2 + 8.34e-5``, Sec. 4.5 and Fig. 1a "minus 2") look like;
* ``"power-tanh"``: ``lam ** tanh(mu)``, range ``[1/lam, lam]`` (Table 3, Lin et al. (2018), lam = 4);
* ``"shifted-tanh"``: ``tanh(mu) + lam``, range ``[lam - 1, lam + 1]`` (Table 3, lam = 3).

Every normalisation keeps ``tau`` bounded away from zero (``tau >= a/b > 0``, ``1/lam > 0`` or
``lam - 1 > 0``; the parameter checks enforce it), which is what makes the division ``z / tau``
safe without any clamp; the log-probabilities are ``log_softmax(z / tau)``, computed in log space.

:class:`ContextualHead` wraps a plain head of :mod:`nmst_lib.heads` as an output layer of a
:class:`nmst_lib.models.RecurrentLM`:

* base :class:`~nmst_lib.heads.VanillaHead`: ``log_softmax(z / tau)`` (CT, Sec. 3.1);
* base :class:`~nmst_lib.heads.STHead` / :class:`~nmst_lib.heads.NMSTHead`: the temperature
  divides the NON-eos logits only and the base head then runs unchanged, so ``p(eos)`` follows
  the ST/NMST rule on the raw eos logit and NMST's lower bound ``p(eos at t) >= 1 - (1 - eps)^t``
  holds exactly (this book's combination; Chapter 9);
* ``mixtures = M > 1`` (vanilla base only): the mixture of softmaxes of Yang et al. (2018)
  (the paper's eq. 3) with the temperature shared by the M components (eq. 6, CT-MoS), or
  without temperature (plain MoS);
* ``loss_scaling``: the per-token loss ``-log p(y_t)`` multiplied by the mean temperature at
  that position (Sec. 3.3, eq. 7, "the average of temperatures"); the factor gets a gradient
  (the literal eq. 7) unless ``detach_loss_scale`` (the gradient the paper's softmax normalisation
  gives, whose mean temperature is a constant).

The model passes its pre-output hidden state and its tied output layer to heads whose
``uses_hidden`` is True (:class:`nmst_lib.heads.OutputHead`); decoding
(:mod:`nmst_lib.decoding`) needs no change.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from ._validation import check_positive_int
from .heads import (
    NMSTHead,
    OutputHead,
    STHead,
    VanillaHead,
    _check_batch_size,
    _check_context_mask,
    _check_logits,
    _check_step_inputs,
    _check_targets,
)

__all__ = [
    "TEMPERATURE_NORMALISATIONS",
    "temperature_defaults",
    "temperature_range",
    "normalised_temperature",
    "ContextualTemperature",
    "ContextualHead",
    "contextual_head",
]

TEMPERATURE_NORMALISATIONS = ("sigmoid", "softmax", "power-tanh", "shifted-tanh")
"""The temperature normalisations of Contextual Temperature (2020): eq. 5 with a per-token
sigmoid (``"sigmoid"``, the default) or the paper's softmax over the vocabulary (``"softmax"``),
and the two alternatives of Table 3 (``"power-tanh"``: ``lam ** tanh(mu)``; ``"shifted-tanh"``:
``tanh(mu) + lam``). Chapter 9 (09_temperature)."""

_AB_NORMALISATIONS = ("sigmoid", "softmax")


# ----------------------------------------------------------------------------- parameters


def _check_normalisation(normalisation) -> str:
    if not isinstance(normalisation, str):
        raise TypeError(f"normalisation must be a string, one of {TEMPERATURE_NORMALISATIONS}; "
                        f"got {type(normalisation).__name__}")
    if normalisation not in TEMPERATURE_NORMALISATIONS:
        raise ValueError(f"unknown temperature normalisation {normalisation!r}; allowed: "
                         f"{', '.join(TEMPERATURE_NORMALISATIONS)}")
    return normalisation


def _check_real(value, name: str, why: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number ({why}), got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite ({why}), got {value!r}")
    return value


def temperature_defaults(normalisation) -> dict:
    """The paper's hyper-parameters of a normalisation (Contextual Temperature (2020), Sec. 4.2
    and Table 3): ``{"a": 1.0, "b": 0.5}`` for ``"sigmoid"`` and ``"softmax"`` (range [2, 4]),
    ``{"lam": 4.0}`` for ``"power-tanh"`` (range [1/4, 4]) and ``{"lam": 3.0}`` for
    ``"shifted-tanh"`` (range [2, 4]). Returns a new dict. Chapter 9 (09_temperature)."""
    normalisation = _check_normalisation(normalisation)
    if normalisation in _AB_NORMALISATIONS:
        return {"a": 1.0, "b": 0.5}
    return {"lam": 4.0 if normalisation == "power-tanh" else 3.0}


def _resolve_parameters(normalisation, a, b, lam) -> tuple[str, float | None, float | None, float | None]:
    """``(normalisation, a, b, lam)`` with defaults filled and every value checked."""
    normalisation = _check_normalisation(normalisation)
    defaults = temperature_defaults(normalisation)
    if normalisation in _AB_NORMALISATIONS:
        if lam is not None:
            raise ValueError(f"the {normalisation!r} normalisation takes a and b, not lam (got lam={lam!r}); "
                             "lam belongs to 'power-tanh' and 'shifted-tanh'")
        a = defaults["a"] if a is None else _check_real(a, "a", "a > 0, so that tau >= a/b > 0")
        b = defaults["b"] if b is None else _check_real(b, "b", "b > 0")
        if not a > 0:
            raise ValueError(f"a must be > 0 (tau = (sigma(mu) + a)/b >= a/b must stay positive, since the logits "
                             f"are divided by tau), got a={a!r}")
        if not b > 0:
            raise ValueError(f"b must be > 0 (tau = (sigma(mu) + a)/b must be positive), got b={b!r}")
        if not (math.isfinite((1.0 + a) / b) and a / b > 0):
            raise ValueError(f"the temperature range [a/b, (1 + a)/b] = [{a / b!r}, {(1.0 + a) / b!r}] must be finite "
                             f"and positive in float64 (got a={a!r}, b={b!r}): a tiny b overflows it")
        return normalisation, a, b, None
    if a is not None or b is not None:
        raise ValueError(f"the {normalisation!r} normalisation takes lam, not a and b (got a={a!r}, b={b!r}); "
                         "a and b belong to 'sigmoid' and 'softmax'")
    lam = defaults["lam"] if lam is None else _check_real(lam, "lam", "lam > 1")
    if not lam > 1:
        lower = "1/lam" if normalisation == "power-tanh" else "lam - 1"
        raise ValueError(f"lam must be > 1 for {normalisation!r} (the range's lower end {lower} must be a positive "
                         f"temperature below the upper end), got lam={lam!r}")
    if not math.isfinite(lam + 1.0):
        raise ValueError(f"lam must keep the range's upper end finite in float64, got lam={lam!r}")
    return normalisation, None, None, lam


def temperature_range(normalisation, a=None, b=None, lam=None) -> tuple[float, float]:
    """The closed range ``(lo, hi)`` of the temperatures of a normalisation (Contextual
    Temperature (2020), Sec. 3.1 and Table 3): ``[a/b, (1 + a)/b]`` for ``"sigmoid"`` and
    ``"softmax"`` (the softmax only reaches the ends in the limit; ``hi`` is attained by one
    token at most), ``[1/lam, lam]`` for ``"power-tanh"`` and ``[lam - 1, lam + 1]`` for
    ``"shifted-tanh"``. Missing hyper-parameters take :func:`temperature_defaults`.
    Chapter 9 (09_temperature)."""
    return _range(*_resolve_parameters(normalisation, a, b, lam))


def _range(normalisation: str, a, b, lam) -> tuple[float, float]:
    """:func:`temperature_range` of parameters already resolved."""
    if normalisation in _AB_NORMALISATIONS:
        return a / b, (1.0 + a) / b
    if normalisation == "power-tanh":
        return 1.0 / lam, lam
    return lam - 1.0, lam + 1.0


def normalised_temperature(mu, normalisation, a=None, b=None, lam=None) -> torch.Tensor:
    """Temperatures ``tau[..., V]`` from the scores ``mu = h^T W1 W2`` (Contextual Temperature
    (2020), eq. 5 and Table 3; Chapter 9, 09_temperature).

    ``"sigmoid"``: ``(sigmoid(mu) + a) / b``; ``"softmax"``: ``(softmax(mu, dim=-1) + a) / b``
    (over the vocabulary, the last dim: the mean of tau over the vocabulary is then exactly
    ``(a + 1/V) / b``); ``"power-tanh"``: ``lam ** tanh(mu)``, computed as
    ``torch.pow(lam, tanh(mu))`` (exactly ``lam`` and ``1/lam`` where tanh saturates); ``"shifted-tanh"``: ``tanh(mu) + lam``. Each result lies in
    :func:`temperature_range` (up to the rounding of its ends in the tensor's dtype), for any
    finite ``mu`` (``|mu| = 1e4`` included), and is
    bounded below by a positive number, so dividing logits by it is safe without clamping.
    ``a > 0``, ``b > 0`` (sigmoid, softmax) and ``lam > 1`` (the tanh forms) are checked, and
    the range must lie within the normal numbers of ``mu``'s dtype (``b = 1e-310`` gave ``inf``);
    missing values take :func:`temperature_defaults`.
    """
    normalisation, a, b, lam = _resolve_parameters(normalisation, a, b, lam)
    if not isinstance(mu, torch.Tensor):
        raise TypeError(f"mu must be a torch.Tensor [..., V], got {type(mu).__name__}")
    if not mu.is_floating_point():
        raise TypeError(f"mu must be a floating-point tensor, got {mu.dtype}")
    if mu.dim() < 1:
        raise ValueError("mu must have at least one dim (the vocabulary, last)")
    lo, hi = _range(normalisation, a, b, lam)
    info = torch.finfo(mu.dtype)
    if not (info.tiny <= lo and hi <= info.max):
        raise ValueError(f"the temperature range [{lo:.3g}, {hi:.3g}] of these parameters does not fit {mu.dtype} "
                         f"(normal numbers from {info.tiny:.3g} to {info.max:.3g}): the temperatures would overflow "
                         "to inf or round to 0; use other parameters or a wider dtype")
    if normalisation == "sigmoid":
        return (torch.sigmoid(mu) + a) / b
    if normalisation == "softmax":
        return (torch.softmax(mu, dim=-1) + a) / b
    if normalisation == "power-tanh":
        return torch.pow(lam, torch.tanh(mu))
    return torch.tanh(mu) + lam


# ----------------------------------------------------------------------------- the temperature module


def _check_hidden(hidden, hidden_size: int, min_dim: int = 1) -> torch.Tensor:
    if hidden is None:
        raise TypeError("this output layer needs the model's pre-output hidden state: pass hidden=[..., H] "
                        "(nmst_lib.models.RecurrentLM does so for heads with uses_hidden)")
    if not isinstance(hidden, torch.Tensor):
        raise TypeError(f"hidden must be a torch.Tensor [..., H], got {type(hidden).__name__}")
    if not hidden.is_floating_point():
        raise TypeError(f"hidden must be a floating-point tensor, got {hidden.dtype}")
    if hidden.dim() < min_dim or hidden.shape[-1] != hidden_size:
        raise ValueError(f"hidden must have shape [..., {hidden_size}] with at least {min_dim} dims, "
                         f"got {tuple(hidden.shape)}")
    return hidden


class ContextualTemperature(nn.Module):
    """The temperature network of Contextual Temperature (2020), Sec. 3.1, eq. 5 (and Table 3):
    ``tau = normalise(h W1 W2)`` with two bias-free linear maps ``W1: hidden_size -> rank`` and
    ``W2: rank -> vocab_size`` (the factorisation keeps the parameter count at ``Q (H + V)``
    instead of ``H V``), normalised by :func:`normalised_temperature`.
    Chapter 9 (09_temperature).

    Attributes: ``normalisation``, ``a``, ``b``, ``lam`` (None where not used), ``rank`` (Q),
    ``hidden_size``, ``vocab_size`` and ``range`` (:func:`temperature_range`).

    Initialisation: ``W1`` as ``nn.Linear`` (uniform in ``+-1/sqrt(H)``), ``W2`` ZERO, so that
    ``mu = 0`` and training starts from one constant temperature for every token and context:
    the middle of the range for ``"sigmoid"`` (``(1/2 + a)/b``, 3 with the defaults),
    ``"power-tanh"`` (1, the geometric middle) and ``"shifted-tanh"`` (lam), and
    ``(1/V + a)/b`` for ``"softmax"``. The model then starts as the plain softmax with a global
    temperature. ``W2`` still gets a gradient at the first step (``d mu / d W2 = h W1``, which
    differs between contexts) and ``W1`` from the second on; the columns of ``W2`` start equal
    but receive different gradients, so no symmetry has to be broken by noise.
    """

    def __init__(self, hidden_size: int, vocab_size: int, rank: int, normalisation: str = "sigmoid",
                 a=None, b=None, lam=None):
        super().__init__()
        self.hidden_size = check_positive_int(hidden_size, "hidden_size")
        self.vocab_size = check_positive_int(vocab_size, "vocab_size", minimum=2)
        self.rank = check_positive_int(rank, "rank")
        self.normalisation, self.a, self.b, self.lam = _resolve_parameters(normalisation, a, b, lam)
        self.range = temperature_range(self.normalisation, self.a, self.b, self.lam)
        self.W1 = nn.Linear(self.hidden_size, self.rank, bias=False)
        self.W2 = nn.Linear(self.rank, self.vocab_size, bias=False)
        nn.init.zeros_(self.W2.weight)

    def extra_repr(self) -> str:
        params = (f"a={self.a:g}, b={self.b:g}" if self.lam is None else f"lam={self.lam:g}")
        lo, hi = self.range
        return (f"hidden_size={self.hidden_size}, rank={self.rank}, vocab_size={self.vocab_size}, "
                f"normalisation={self.normalisation!r}, {params}, range=[{lo:g}, {hi:g}]")

    def scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """``mu = h W1 W2`` ``[..., V]`` before the normalisation (Table 3's
        ``mu``; Chapter 9, ``09_temperature``)."""
        hidden = _check_hidden(hidden, self.hidden_size)
        return self.W2(self.W1(hidden))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Temperatures ``tau[..., V]`` of ``hidden[..., H]`` (eq. 5; Chapter 9,
        ``09_temperature``), in ``self.range``."""
        return normalised_temperature(self.scores(hidden), self.normalisation, self.a, self.b, self.lam)


# ----------------------------------------------------------------------------- fused autograd


class _TemperedDivide(torch.autograd.Function):
    """``y = z / tau`` with a lean backward: ``dz = g / tau`` and ``dtau = -dz * y`` (two passes
    over ``[..., V]``; autograd's division backward recomputes ``z / tau / tau``)."""

    @staticmethod
    def forward(ctx, logits, tau):
        y = logits / tau
        ctx.save_for_backward(y, tau)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        y, tau = ctx.saved_tensors
        grad_logits = grad / tau
        grad_tau = torch.mul(grad_logits, y).neg_() if ctx.needs_input_grad[1] else None
        return (grad_logits if ctx.needs_input_grad[0] else None), grad_tau


class _TemperedNLL(torch.autograd.Function):
    """Per-position ``-log softmax(z / tau)[y]`` (times ``mean_v tau`` when ``scaled``) with a
    hand-written backward.

    With ``q = softmax(z / tau)``, upstream gradient ``g`` and loss factor ``m`` (``mean tau``
    when scaled, else 1): ``d/dz_v = g m (q_v - [v = y]) / tau_v`` and
    ``d/dtau_v = -(d/dz_v) (z_v / tau_v) + g nll / V`` (the last term only when scaled: the
    gradient of the factor, eq. 7 of Contextual Temperature (2020); left out when ``detached``,
    i.e. when the factor is a constant weight of each position's gradient). Saves
    ``z / tau``, ``log q`` and ``1 / tau``; the backward makes about four passes over
    ``[..., V]`` where autograd's chain (division, log-softmax, gather, mean) makes about ten.
    """

    @staticmethod
    def forward(ctx, logits, tau, targets, scaled, detached=False):
        inv_tau = torch.reciprocal(tau)
        y = logits * inv_tau
        log_q = torch.log_softmax(y, dim=-1)
        nll = -log_q.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        mean_tau = tau.mean(-1) if scaled else None
        ctx.save_for_backward(y, log_q, inv_tau, targets, nll, mean_tau)
        ctx.scaled, ctx.detached = scaled, detached
        return nll * mean_tau if scaled else nll

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_losses):
        y, log_q, inv_tau, targets, nll, mean_tau = ctx.saved_tensors
        g = grad_losses * mean_tau if ctx.scaled else grad_losses
        grad = torch.exp(log_q)  # q
        grad.mul_(g.unsqueeze(-1))
        grad.scatter_add_(-1, targets.unsqueeze(-1), -g.unsqueeze(-1))
        grad.mul_(inv_tau)  # d/dz
        grad_tau = None
        if ctx.needs_input_grad[1]:
            grad_tau = torch.mul(y, grad).neg_()
            if ctx.scaled and not ctx.detached:
                grad_tau.add_((grad_losses * nll / y.shape[-1]).unsqueeze(-1))
        return (grad if ctx.needs_input_grad[0] else None), grad_tau, None, None, None


class _MixtureNLL(torch.autograd.Function):
    """Per-position ``-log sum_m pi_m softmax(z_m / tau)[y]`` of a mixture of softmaxes (eqs. 3
    and 6; ``tau`` None: plain MoS), times ``mean_v tau`` when ``scaled``, with a hand-written
    backward over the ``[..., M, V]`` component logits.

    With ``q_m = softmax(z_m / tau)``, the posterior responsibilities
    ``r_m = pi_m q_m[y] / p[y]`` and upstream gradient ``g`` (times the factor when scaled):
    ``d/dz_{m,v} = g r_m (q_{m,v} - [v = y]) / tau_v``, ``d/d log pi_m = -g r_m`` and
    ``d/dtau_v = -sum_m (d/dz_{m,v}) z_{m,v} / tau_v`` (+ ``g nll / V`` when scaled). About four
    passes over ``[..., M, V]`` in backward where autograd's chain (division, log-softmax,
    logsumexp over the components, gather) makes several times more. ``detached``: the factor
    gets no gradient (the ``g nll / V`` term is left out)."""

    @staticmethod
    def forward(ctx, logits, log_prior, targets, scaled, tau, detached=False):
        inv_tau = None if tau is None else torch.reciprocal(tau)
        y = logits if tau is None else logits * inv_tau.unsqueeze(-2)
        log_q = torch.log_softmax(y, dim=-1)  # [..., M, V]
        index = targets[..., None, None].expand(*targets.shape, y.shape[-2], 1)
        joint = log_prior + log_q.gather(-1, index).squeeze(-1)  # log pi_m q_m[y]
        log_p = torch.logsumexp(joint, dim=-1)
        nll = -log_p
        resp = torch.exp(joint - log_p.unsqueeze(-1))
        mean_tau = tau.mean(-1) if scaled else None
        ctx.save_for_backward(y, log_q, inv_tau, resp, index, nll, mean_tau)
        ctx.scaled, ctx.detached = scaled, detached
        return nll * mean_tau if scaled else nll

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_losses):
        y, log_q, inv_tau, resp, index, nll, mean_tau = ctx.saved_tensors
        g = grad_losses * mean_tau if ctx.scaled else grad_losses
        gr = g.unsqueeze(-1) * resp  # [..., M]
        grad = torch.exp(log_q)  # q_m
        grad.mul_(gr.unsqueeze(-1))
        grad.scatter_add_(-1, index, -gr.unsqueeze(-1))
        grad_tau = None
        if inv_tau is not None:
            grad.mul_(inv_tau.unsqueeze(-2))  # d/dz
            if ctx.needs_input_grad[4]:
                grad_tau = torch.mul(grad.select(-2, 0), y.select(-2, 0))
                for m in range(1, y.shape[-2]):  # the M components, not tokens
                    grad_tau.addcmul_(grad.select(-2, m), y.select(-2, m))
                grad_tau.neg_()
                if ctx.scaled and not ctx.detached:
                    grad_tau.add_((grad_losses * nll / y.shape[-1]).unsqueeze(-1))
        grad_log_prior = -gr if ctx.needs_input_grad[1] else None
        return (grad if ctx.needs_input_grad[0] else None), grad_log_prior, None, None, grad_tau, None


def _lean_enabled(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


# ----------------------------------------------------------------------------- the output layer


_BASES = (VanillaHead, STHead, NMSTHead)


def _check_bool(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    return value


class ContextualHead(OutputHead):
    """An output layer with contextual temperature and/or a mixture of softmaxes (Contextual
    Temperature (2020), eqs. 3-7; Chapter 9, 09_temperature).

    ``base`` is a :class:`~nmst_lib.heads.VanillaHead`, :class:`~nmst_lib.heads.STHead` or
    :class:`~nmst_lib.heads.NMSTHead` (the entmax heads are not supported); ``temperature`` a
    :class:`ContextualTemperature` or None; ``mixtures`` the number M of softmaxes (M > 1 only
    with a vanilla base); ``loss_scaling`` multiplies the training loss by the mean temperature
    (needs a temperature). At least one of temperature and M > 1 is required (otherwise use
    the base head itself). ``name``: "CT-VA", "CT-ST", "CT-NMST", "MoS" or "CT-MoS";
    ``eps`` and ``eos_id`` are the base's. ``uses_hidden = True``: every method takes the
    model's pre-output hidden state ``hidden`` (the tensor its output layer reads) and, for
    MoS, the model's tied output layer ``output`` (an ``nn.Linear`` H -> V) as keyword
    arguments.

    * **CT-VA** (eq. 4-5): ``log p = log_softmax(z / tau)``.
    * **CT-ST / CT-NMST**: the non-eos logits are divided by tau, the eos logit is not, and
      the base head runs on the result, so ``p(eos)`` is exactly the base's function of the
      raw eos logit (NMST: ``>= 1 - (1 - eps)^t``, so every decoder terminates) and the other
      tokens share ``1 - p(eos)`` by ``softmax(z_{-eos} / tau_{-eos})``. The temperature of
      eos (column ``eos_id`` of :meth:`temperatures`) is not used.
    * **MoS / CT-MoS** (eqs. 3 and 6, Yang et al. (2018)): M latent states
      ``g_m = tanh(P_m h + c_m)`` (one ``nn.Linear`` H -> M H, ``latent``), logits
      ``z_m = output(g_m)`` through the model's tied output layer, prior
      ``pi = softmax(W_pi h)`` (``prior``, H -> M, no bias, as in the MoS code), and
      ``log p = logsumexp_m (log pi_m + log_softmax(z_m / tau))`` with ONE tau shared by the
      components (eq. 6; tau = 1 for plain MoS). The ``logits`` argument is ignored (it may be
      None; ``needs_logits`` is False so the model does not compute it). No dropout on the
      latent states (the MoS code has one; our models are small).
    * **Loss scaling** (Sec. 3.3, eq. 7): ``token_losses = -log p(y_t) * mean(tau_t)``, the
      mean over the tempered vocabulary entries (all V; the V - 1 non-eos ones for an ST/NMST
      base), NOT detached: the factor is part of the objective, so its gradient also pushes
      the temperatures down (for every token, by ``nll / V`` per position: with a per-token
      sigmoid this drives all temperatures to the floor ``a / b``, Chapter 9). With
      ``detach_loss_scale=True`` the factor is a constant weight of each position's gradient
      instead: exactly the gradient the paper's own normalisation gives, since with its
      softmax over the vocabulary the mean temperature is the constant ``(a + 1/V) / b`` and
      the factor has no gradient at all. Perplexities are always computed from ``forward``
      (plain NLL).

    Division by tau is safe because every normalisation keeps tau >= its positive lower bound
    (:func:`temperature_range`); numerics are in log space, without clamps.
    """

    uses_hidden = True

    def __init__(self, base: OutputHead, hidden_size: int, vocab_size: int, *,
                 temperature: ContextualTemperature | None, mixtures: int = 1, loss_scaling: bool = False,
                 detach_loss_scale: bool = False):
        if not isinstance(base, OutputHead):
            raise TypeError(f"base must be an output layer from nmst_lib.heads (VanillaHead, STHead or NMSTHead), "
                            f"got {type(base).__name__}")
        if type(base) not in _BASES:
            raise ValueError(f"contextual temperature wraps a VanillaHead, STHead or NMSTHead; got {type(base).__name__} "
                             f"({getattr(base, 'name', '?')}; the entmax heads and ContextualHead are not supported)")
        super().__init__(base.eos_id)
        self.hidden_size = check_positive_int(hidden_size, "hidden_size")
        self.vocab_size = check_positive_int(vocab_size, "vocab_size", minimum=2)
        self.mixtures = check_positive_int(mixtures, "mixtures")
        self.loss_scaling = _check_bool(loss_scaling, "loss_scaling")
        self.detach_loss_scale = _check_bool(detach_loss_scale, "detach_loss_scale")
        if self.detach_loss_scale and not self.loss_scaling:
            raise ValueError("detach_loss_scale applies to loss_scaling=True only (it says whether the mean-temperature "
                             "factor gets a gradient)")
        if temperature is not None:
            if not isinstance(temperature, ContextualTemperature):
                raise TypeError(f"temperature must be a ContextualTemperature or None, got {type(temperature).__name__}")
            if (temperature.hidden_size, temperature.vocab_size) != (self.hidden_size, self.vocab_size):
                raise ValueError(f"the temperature maps {temperature.hidden_size} -> {temperature.vocab_size}, the head "
                                 f"{self.hidden_size} -> {self.vocab_size}: they must agree")
        if temperature is None and self.mixtures == 1:
            raise ValueError("a ContextualHead needs a temperature or mixtures > 1; without either use the base head "
                             "itself (contextual_head returns it)")
        if self.mixtures > 1 and type(base) is not VanillaHead:
            raise ValueError(f"a mixture of softmaxes (mixtures={self.mixtures}) needs a VanillaHead base, got "
                             f"{type(base).__name__}")
        if self.loss_scaling and temperature is None:
            raise ValueError("loss_scaling multiplies the loss by the mean temperature: it needs a temperature")
        self.base = base
        self.eps = base.eps
        self.temperature = temperature
        if self.mixtures > 1:
            self.latent = nn.Linear(self.hidden_size, self.mixtures * self.hidden_size)
            self.prior = nn.Linear(self.hidden_size, self.mixtures, bias=False)
        prefix = "" if temperature is None else "CT-"
        self.name = prefix + ("MoS" if self.mixtures > 1 else base.name)

    @property
    def needs_logits(self) -> bool:
        """Whether ``forward``/``step``/``token_losses`` read the ``logits`` argument (False for MoS)."""
        return self.mixtures == 1

    def extra_repr(self) -> str:
        return (f"name={self.name!r}, hidden_size={self.hidden_size}, vocab_size={self.vocab_size}, "
                f"mixtures={self.mixtures}, loss_scaling={self.loss_scaling}"
                + (", detach_loss_scale=True" if self.detach_loss_scale else ""))

    # ------------------------------------------------------------------ pieces

    def temperatures(self, hidden: torch.Tensor) -> torch.Tensor:
        """The temperatures ``tau[..., V]`` at ``hidden[..., H]`` (eq. 5; Chapter 9,
        ``09_temperature``); ValueError without a
        temperature (plain MoS). For an ST/NMST base the eos column is not used."""
        if self.temperature is None:
            raise ValueError(f"the {self.name} head has no contextual temperature")
        return self.temperature(hidden)

    def _check_pair(self, logits, hidden, min_dim: int):
        hidden = _check_hidden(hidden, self.hidden_size, min_dim)
        if not self.needs_logits:
            if logits is not None:
                logits = _check_logits(logits, min_dim)
                if logits.shape[:-1] != hidden.shape[:-1]:
                    raise ValueError(f"logits {tuple(logits.shape)} and hidden {tuple(hidden.shape)} must agree on "
                                     "all dims but the last")
            return None, hidden
        logits = _check_logits(logits, min_dim)
        if logits.shape[-1] != self.vocab_size or logits.shape[:-1] != hidden.shape[:-1]:
            raise ValueError(f"logits [..., {self.vocab_size}] and hidden [..., {self.hidden_size}] must agree on all "
                             f"dims but the last, got {tuple(logits.shape)} and {tuple(hidden.shape)}")
        return logits, hidden

    def _check_output(self, output):
        if not isinstance(output, nn.Linear):
            raise TypeError(f"a mixture of softmaxes needs the model's output layer: output=nn.Linear({self.hidden_size}, "
                            f"{self.vocab_size}), got {type(output).__name__}")
        if (output.in_features, output.out_features) != (self.hidden_size, self.vocab_size):
            raise ValueError(f"output must map {self.hidden_size} -> {self.vocab_size}, got "
                             f"{output.in_features} -> {output.out_features}")
        return output

    def _tempered(self, logits: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        """``z / tau``; for an ST/NMST base the eos column is divided by exactly 1 (untouched)."""
        if type(self.base) is not VanillaHead:
            eos_id = self.base.resolve_eos_id(logits.shape[-1])
            tau = tau.index_fill(-1, torch.tensor([eos_id], device=tau.device), 1.0)
        if _lean_enabled(logits, tau):
            return _TemperedDivide.apply(logits, tau)
        return logits / tau

    def _mos_parts(self, hidden: torch.Tensor, output):
        """The component logits ``z_m = output(tanh(P_m h + c_m))`` ``[..., M, V]`` and the log
        prior ``log softmax(W_pi h)`` ``[..., M]`` (eq. 3, Yang et al. (2018))."""
        output = self._check_output(output)
        latent = torch.tanh(self.latent(hidden)).unflatten(-1, (self.mixtures, self.hidden_size))
        return output(latent), torch.log_softmax(self.prior(hidden), dim=-1)

    def _mos_log_probs(self, hidden: torch.Tensor, output, tau) -> torch.Tensor:
        logits, log_prior = self._mos_parts(hidden, output)
        if tau is not None:
            logits = logits / tau.unsqueeze(-2)
        return torch.logsumexp(log_prior.unsqueeze(-1) + torch.log_softmax(logits, dim=-1), dim=-2)

    def _log_probs(self, logits, context_mask, hidden, output, tau=None):
        """``(log p [..., T, V], tau or None)`` of teacher forcing (``tau``: already computed)."""
        logits, hidden = self._check_pair(logits, hidden, min_dim=2)
        if tau is None and self.temperature is not None:
            tau = self.temperature(hidden)
        if self.mixtures > 1:
            out = self._mos_log_probs(hidden, output, tau)
            _check_context_mask(context_mask, out)
            return out, tau
        scaled = self._tempered(logits, tau)
        if type(self.base) is VanillaHead:
            _check_context_mask(context_mask, scaled)
            return torch.log_softmax(scaled, dim=-1), tau
        return self.base(scaled, context_mask), tau

    def _mean_temperature(self, tau: torch.Tensor) -> torch.Tensor:
        """Mean of tau over the tempered entries (Sec. 3.3): all V, or the V - 1 non-eos ones."""
        if type(self.base) is VanillaHead:
            return tau.mean(-1)
        eos_id = self.base.resolve_eos_id(tau.shape[-1])
        return (tau.sum(-1) - tau[..., eos_id]) / (tau.shape[-1] - 1)

    # ------------------------------------------------------------------ the OutputHead interface

    def forward(self, logits, context_mask=None, *, hidden=None, output=None):
        """Log-probabilities ``[..., T, V]`` (teacher forcing) of ``logits = output(hidden)``
        with ``hidden[..., T, H]`` (Contextual Temperature (2020), eqs. 4-6; Chapter 9,
        09_temperature); ``context_mask`` as for the base head."""
        return self._log_probs(logits, context_mask, hidden, output)[0]

    def initial_step_state(self, batch_size: int, device=None) -> torch.Tensor:
        """The base head's decoding state (NMST: the step count; vanilla: a dummy ``zeros(B)``)."""
        return self.base.initial_step_state(_check_batch_size(batch_size), device)

    def step(self, logits, state, *, hidden=None, output=None):
        """Log-probabilities ``[B, V]`` of the next step and the new state, from ``logits[B, V]``
        and ``hidden[B, H]``; agrees with :meth:`forward` to float64 precision."""
        hidden = _check_hidden(hidden, self.hidden_size)
        if hidden.dim() != 2:
            raise ValueError(f"step expects the hidden state of one step, [B, H], got shape {tuple(hidden.shape)}")
        if not isinstance(state, torch.Tensor) or state.shape != hidden.shape[:1]:
            shape = tuple(state.shape) if isinstance(state, torch.Tensor) else type(state).__name__
            raise ValueError(f"state must be a tensor [B] = [{hidden.shape[0]}] from initial_step_state or step, "
                             f"got {shape}")
        logits, hidden = self._check_pair(logits, hidden, min_dim=2)
        tau = None if self.temperature is None else self.temperature(hidden)
        if self.mixtures > 1:
            return self._mos_log_probs(hidden, output, tau), state
        scaled = self._tempered(logits, tau)
        if type(self.base) is VanillaHead:
            return torch.log_softmax(_check_step_inputs(scaled, state), dim=-1), state
        return self.base.step(scaled, state)

    def token_losses(self, logits, targets, context_mask=None, *, hidden=None, output=None):
        """Per-position loss ``[..., T]``: ``-log p(y_t)``, times the mean temperature at that
        position when ``loss_scaling`` (Contextual Temperature (2020), Sec. 3.3, eq. 7; the
        factor gets a gradient unless ``detach_loss_scale``). Chapter 9 (09_temperature).

        With gradients and a vanilla base (CT, MoS, CT-MoS) the loss runs through one fused
        autograd function (the same values to rounding, with a hand-written backward that makes
        a few passes over ``[..., V]`` or ``[..., M, V]``), since the element-wise passes of the
        temperature and of the mixture otherwise dominate a training step of a small model."""
        if self.mixtures > 1 and isinstance(hidden, torch.Tensor) and torch.is_grad_enabled():
            _, hidden = self._check_pair(logits, hidden, min_dim=2)
            tau = None if self.temperature is None else self.temperature(hidden)
            components, log_prior = self._mos_parts(hidden, output)
            if _lean_enabled(components, log_prior, *([] if tau is None else [tau])):
                probe = components.select(-2, 0)  # [..., V]: shapes for the checks
                _check_context_mask(context_mask, probe)
                targets = _check_targets(targets, probe)
                return _MixtureNLL.apply(components, log_prior, targets, self.loss_scaling, tau,
                                         self.detach_loss_scale)
        tau = None
        if (type(self.base) is VanillaHead and self.mixtures == 1 and self.temperature is not None
                and isinstance(logits, torch.Tensor) and isinstance(hidden, torch.Tensor)):
            logits, hidden = self._check_pair(logits, hidden, min_dim=2)
            tau = self.temperature(hidden)
            if _lean_enabled(logits, tau):
                _check_context_mask(context_mask, logits)
                targets = _check_targets(targets, logits)
                if tau.dtype != logits.dtype:
                    dtype = torch.promote_types(tau.dtype, logits.dtype)
                    logits, tau = logits.to(dtype), tau.to(dtype)
                return _TemperedNLL.apply(logits, tau, targets, self.loss_scaling, self.detach_loss_scale)
        log_probs, tau = self._log_probs(logits, context_mask, hidden, output, tau)
        targets = _check_targets(targets, log_probs)
        losses = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        if self.loss_scaling:
            factor = self._mean_temperature(tau)
            losses = losses * (factor.detach() if self.detach_loss_scale else factor)
        return losses


def contextual_head(base: OutputHead, hidden_size: int, vocab_size: int, *, normalisation=None, a=None, b=None,
                    lam=None, rank=None, mixtures: int = 1, loss_scaling: bool = False,
                    detach_loss_scale: bool = False) -> OutputHead:
    """The output layer of a Chapter 9 (09_temperature) configuration: ``base`` itself when
    ``normalisation`` is None and ``mixtures == 1``; otherwise a :class:`ContextualHead` around
    ``base`` with a :class:`ContextualTemperature` (``normalisation`` one of
    ``TEMPERATURE_NORMALISATIONS``, hyper-parameters from :func:`temperature_defaults` when
    None, ``rank`` Q = ``hidden_size // 2`` when None; Contextual Temperature (2020), eq. 5,
    Table 3) and/or a mixture of ``mixtures`` softmaxes (eqs. 3 and 6), with loss scaling
    (Sec. 3.3, eq. 7) if asked, its factor detached with ``detach_loss_scale``.
    Hyper-parameters without a normalisation raise ValueError."""
    mixtures = check_positive_int(mixtures, "mixtures")
    loss_scaling = _check_bool(loss_scaling, "loss_scaling")
    if normalisation is None:
        given = {k: v for k, v in {"a": a, "b": b, "lam": lam, "rank": rank}.items() if v is not None}
        if given:
            raise ValueError(f"{', '.join(given)} set without a temperature normalisation; pass normalisation= one of "
                             f"{TEMPERATURE_NORMALISATIONS}")
        if loss_scaling:
            raise ValueError("loss_scaling needs a temperature: pass normalisation= one of "
                             f"{TEMPERATURE_NORMALISATIONS}")
        if mixtures == 1:
            if not isinstance(base, OutputHead):
                raise TypeError(f"base must be an output layer from nmst_lib.heads, got {type(base).__name__}")
            return base
        temperature = None
    else:
        hidden_size = check_positive_int(hidden_size, "hidden_size")
        if rank is None:
            if hidden_size < 2:
                raise ValueError("rank defaults to hidden_size // 2, which needs hidden_size >= 2; pass rank=")
            rank = hidden_size // 2
        temperature = ContextualTemperature(hidden_size, vocab_size, rank, normalisation, a=a, b=b, lam=lam)
    return ContextualHead(base, hidden_size, vocab_size, temperature=temperature, mixtures=mixtures,
                          loss_scaling=loss_scaling, detach_loss_scale=detach_loss_scale)
