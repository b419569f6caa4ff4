"""Output layers: vanilla softmax, self-terminating (ST), non-monotonic self-terminating (NMST),
and their sparse versions, entmax and NMST-entmax.

An output layer turns the logits ``z = U h_t`` of a language model into next-token
log-probabilities. The three softmax layers of the book differ only in how they treat ``<eos>``:

* **vanilla** (Choi, Cho, Lee (2023), Def. 1): ``log_softmax(z)``; nothing forces eos.
* **ST** (Welleck et al. (2020), Def. 4.3; Choi, Cho, Lee (2023), Def. 5, eq. 9):
  ``p(eos at t) = 1 - prod_{s<=t} (1 - eps) sigma(z_eos at s)``, non-decreasing in t.
* **NMST** (Choi, Cho, Lee (2023), Def. 6, eq. 10):
  ``p(eos at t) = (1 - sigma(z_eos)) (1 - (1 - eps)^t) + sigma(z_eos)``, free to go up and
  down but never below the lower bound ``f_lb(t) = 1 - (1 - eps)^t``.

In ST and NMST the other tokens share ``1 - p(eos)`` in proportion to a softmax over the
NON-eos logits.

Two sparse layers (Chapter 8, 08_sparse) replace the softmax by alpha-entmax (Martins et al.
(2020), eq. 3; :mod:`nmst_lib.entmax`), which can give tokens probability exactly zero
(log-probability ``-inf``):

* **entmax**: ``log entmax_alpha(z)``, trained with the entmax (Fenchel-Young) loss
  (Martins et al. (2020), eqs. 5-6) instead of the negative log-likelihood, which is infinite
  outside the support;
* **NMST-entmax** (this book, Chapter 8): eos gets NMST's ``p(eos at t)`` (so the lower
  bound ``f_lb(t)`` holds and every decoder terminates), the other tokens share
  ``1 - p(eos)`` in proportion to alpha-entmax over the NON-eos logits.

Everything is computed in log space, exactly, with no clamping: the layers
return finite eos log-probabilities and finite gradients even at ``|logit| = 1e4`` in float32,
and float64 inputs give float64-accurate outputs. float16 / bfloat16 logits (mixed precision)
are computed, and returned, in float32. Logits are not checked for NaN or ``+inf`` (a pass over
``[..., T, V]`` in every training step): they propagate to NaN log-probabilities, which the
decoders of :mod:`nmst_lib.decoding` refuse. The decoding state of ``step`` is checked (one
reduction over ``[B]``): ST's running ``log(1 - p(eos))`` must be a float <= 0, NMST's step
count an integer >= 0.

Steps ``t = 1, 2, ...`` count continuation tokens (ARCHITECTURE.md); the functions take them along
dim -2 of the logits ``[..., T, V]``, the :class:`OutputHead` modules also understand a context
mask (context positions are not steps) and decode one step at a time with :meth:`~OutputHead.step`.
Chapter 4 (04_self_terminating) derives ST, Chapter 5 (05_nmst) derives NMST, Chapter 8
(08_sparse) the entmax layers and their losses (:meth:`OutputHead.token_losses`). The models
of the experiment chapters (6-9, :mod:`nmst_lib.models`) carry one of these layers, Chapter 9's
contextual temperature (:mod:`nmst_lib.temperature`) wraps them, and the training loss of ST
and NMST goes through :mod:`nmst_lib.fused`.

The package is split by idea; every name above is importable from ``nmst_lib.heads``:

* ``nmst_lib.heads.eos_rules``: the checks, :func:`log1mexp`, :func:`eos_lower_bound` and
  the ST and NMST eos rules (Chapters 4-5);
* ``nmst_lib.heads.log_probs``: the layer ST and NMST share and the functional API, from
  :func:`vanilla_log_probs` to :func:`nmst_entmax_log_probs` (Chapters 1, 4, 5 and 8);
* ``nmst_lib.heads.modules``: :class:`OutputHead`, its subclasses and
  :func:`head_from_name` (Chapters 4-9);
* ``nmst_lib.heads.losses``: :func:`nll_token_losses` and
  :func:`projected_nll_token_losses`, the training loss with less memory (Chapter 7).
"""

from .eos_rules import _check_alpha as _check_alpha
from .eos_rules import _check_logits as _check_logits
from .eos_rules import _check_targets as _check_targets
from .eos_rules import (
    eos_lower_bound,
    log1mexp,
    nmst_eos_log_probs,
    st_eos_log_probs,
)
from .log_probs import (
    entmax_log_probs,
    nmst_entmax_log_probs,
    nmst_log_probs,
    st_log_probs,
    vanilla_log_probs,
)
from .losses import nll_token_losses, projected_nll_token_losses
from .modules import (
    HEAD_NAMES,
    EntmaxHead,
    NMSTEntmaxHead,
    NMSTHead,
    OutputHead,
    STHead,
    VanillaHead,
    head_from_name,
)
from .modules import _check_batch_size as _check_batch_size
from .modules import _check_context_mask as _check_context_mask
from .modules import _check_step_inputs as _check_step_inputs

__all__ = [  # noqa: RUF022
    "log1mexp",
    "eos_lower_bound",
    "st_eos_log_probs",
    "nmst_eos_log_probs",
    "vanilla_log_probs",
    "st_log_probs",
    "nmst_log_probs",
    "entmax_log_probs",
    "nmst_entmax_log_probs",
    "OutputHead",
    "VanillaHead",
    "STHead",
    "NMSTHead",
    "EntmaxHead",
    "NMSTEntmaxHead",
    "head_from_name",
    "HEAD_NAMES",
    "nll_token_losses",
    "projected_nll_token_losses",
]
