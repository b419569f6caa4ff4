"""The papers' constructions and bounds as code.

* :func:`bounded_state_log_eos_floor` is the floor xi on p(eos) that bounded hidden states give a
  softmax model, Welleck et al. (2020), Lemma 3.2 (Chapter 2).
* :func:`inconsistent_rnn` builds the tanh RNN of the proof of Welleck et al. (2020),
  Theorem 3.4: a *consistent* language model (every finite sequence has positive
  probability, eos has probability bounded away from zero) under which greedy search, top-k,
  nucleus and beam search never emit eos (Chapter 2, ``02_consistency``).
* :func:`half_life_bound`, :func:`first_step_eos_above_half` and
  :func:`beam_termination_bound` are the step counts used in the consistency proofs of the
  self-terminating (ST) and non-monotonic self-terminating (NMST) models: Welleck et al.
  (2020) Theorems 4.2-4.3 and Choi, Cho, Lee (2023) Theorem 3 (Chapters 4-5,
  ``04_self_terminating`` and ``05_nmst``).
* :func:`beam_attaining_model` (Chapters 4-5) is a model on which beam search of width 2 runs
  to exactly t_{1/2} + 1 steps, the bound of both beam theorems (:func:`beam_gap_window` says
  for which eps such a model exists).
* :func:`eos_outside_support_model` (Chapter 8, ``08_sparse``) is a bigram model whose scores
  put eos at least ``1/(alpha - 1)`` below the best token at every step, so that alpha-entmax
  gives eos probability exactly zero (:func:`entmax_eos_gap`, :func:`entmax_excludes`): every
  decoder, ancestral (entmax) sampling included, never terminates, while the softmax of the same
  scores terminates with probability one and the NMST-entmax head on them terminates by
  :func:`nmst_sampling_nontermination_bound`.
* :func:`eos_trajectory` and :func:`eos_probabilities` (Chapters 4-5) follow
  one trajectory of the wish to stop lambda(t) (:data:`EOS_SHAPES`, Remark 1's
  among them) through the VA, ST and NMST output layers: ST's p(eos) can only
  rise, NMST's rises and falls with lambda(t) above the floor f_lb(t). The
  eos-probability explorer of :mod:`nmst_lib.plots` draws them.
* :func:`remark1_dataset` is the two-sequence data set of Choi, Cho, Lee (2023) Remark 1
  ("I am a boy" / "I am a boy, and you are a girl."), whose optimal eos probabilities are not
  monotone in t, so that no ST model can fit it (Chapter 5, ``05_nmst``).
* :func:`tempered_log_softmax` and the functions after it are what a temperature does
  (Chapter 9, ``09_temperature``): a global or per-token temperature's effect on the entropy
  (:func:`entropy_temperature_derivative`), on the nucleus (:func:`tempered_nucleus_size`) and
  on which token can become the argmax (:func:`can_become_argmax`), the mean of the
  softmax-normalised temperatures (:func:`softmax_temperature_mean`), and NMST's floor on
  p(eos) under any non-eos temperatures (:func:`tempered_nmst_log_probs`).

Chapters 2-5, 8 and 9 check their theorems numerically with these; the experiment chapters
(6-9) read the step bounds (e.g. :func:`first_step_eos_above_half`) to mark findings that a
theorem forces.

Conventions (ARCHITECTURE.md): steps t count continuation tokens, t = 1 predicts the first token
after the context; the ST/NMST lower bound on p(eos at t) is f_lb(t) = 1 - (1 - eps)^t.
"""

from __future__ import annotations

from .beam_bound import (  # noqa: F401
    SplitFirstStepModel,
    beam_attaining_model,
    beam_gap_window,
)
from .consistency import (  # noqa: F401
    EosTrace,
    InconsistentRNN,
    bounded_state_log_eos_floor,
    eos_rank_and_prob,
    inconsistent_rnn,
)
from .eos_shapes import (  # noqa: F401
    EOS_SHAPES,
    eos_probabilities,
    eos_trajectory,
)
from .nonmonotone import (  # noqa: F401
    RemarkOneDataset,
    best_monotone_eos_probs,
    eos_log_likelihood,
    monotone_violation,
    optimal_eos_probs,
    remark1_dataset,
)
from .sparse import (  # noqa: F401
    EosOutsideSupportModel,
    entmax_eos_gap,
    entmax_excludes,
    eos_outside_support_model,
    nmst_sampling_nontermination_bound,
)
from .tempered import (  # noqa: F401
    can_become_argmax,
    entropy_temperature_derivative,
    softmax_temperature_mean,
    tempered_entropy,
    tempered_log_softmax,
    tempered_nmst_log_probs,
    tempered_nucleus_size,
    tempered_softmax,
)
from .termination import (  # noqa: F401
    beam_termination_bound,
    first_step_eos_above_half,
    half_life_bound,
)

__all__ = [
    # Chapter 2: Lemma 3.2 and Theorem 3.4
    "bounded_state_log_eos_floor",
    "InconsistentRNN",
    "inconsistent_rnn",
    "EosTrace",
    "eos_rank_and_prob",
    "half_life_bound",
    "first_step_eos_above_half",
    "beam_termination_bound",
    # Chapters 4-5: a model on which beam search of width 2 attains t_1/2 + 1
    "beam_gap_window",
    "SplitFirstStepModel",
    "beam_attaining_model",
    "entmax_eos_gap",
    "entmax_excludes",
    "EosOutsideSupportModel",
    "eos_outside_support_model",
    "nmst_sampling_nontermination_bound",
    "RemarkOneDataset",
    "remark1_dataset",
    "optimal_eos_probs",
    "monotone_violation",
    "best_monotone_eos_probs",
    "eos_log_likelihood",
    # Chapter 9 (09_temperature): temperatures
    "tempered_log_softmax",
    "tempered_softmax",
    "tempered_entropy",
    "entropy_temperature_derivative",
    "tempered_nucleus_size",
    "can_become_argmax",
    "softmax_temperature_mean",
    "tempered_nmst_log_probs",
    # Chapters 4-5: eos probabilities of a constructed model (plots re-exports them)
    "EOS_SHAPES",
    "eos_trajectory",
    "eos_probabilities",
]
