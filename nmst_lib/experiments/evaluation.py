"""How good a model is on a split (Choi, Cho, Lee (2023) Sec. 4, Table 1;
Chapter 6, 06_wikitext): per-token perplexity (:func:`evaluate_perplexity`) or
the mean of the head's own loss (:func:`evaluate_loss`: the mean entmax loss of
Chapter 8, 08_sparse, whose perplexity can be infinite), over the
continuation tokens of every sequence; and the score that
:func:`nmst_lib.experiments.trainer.train` selects epochs by
(:func:`selection_metric`, :func:`validation_score`). Chapters 6-9 and the
classroom kit's third assignment evaluate trained models with them.
"""

from __future__ import annotations

import math

import torch

from .. import data as D
from ..models import RecurrentLM
from .config import NLL_HEADS, ExperimentConfig, validate_config
from .model_setup import _autocast

__all__ = [
    "evaluate_eps_perplexity",
    "evaluate_loss",
    "evaluate_perplexity",
    "selection_metric",
    "unigram_perplexity",
    "validation_score",
]

@torch.no_grad()
def evaluate_perplexity(model: RecurrentLM, data: D.SequenceData, batch_size: int = 64,
                        max_tokens: int | None = None) -> float:
    """Per-token perplexity exp(mean NLL) over the continuation tokens (eos included, context
    excluded) of ``data`` (Choi, Cho, Lee (2023) Sec. 4, Table 1; as
    :func:`nmst_lib.metrics.perplexity` over the whole split). Runs in eval mode; restores the
    model's mode afterwards. ``model``: a language model of :mod:`nmst_lib.models` (with
    ``token_nll``); ``data``: a :class:`nmst_lib.data.SequenceData` with at least one sequence
    (TypeError / ValueError otherwise, as for :func:`evaluate_loss` and
    :func:`evaluate_eps_perplexity`). The perplexities Chapters 6-9 report."""
    _check_model_and_data(model, data, "token_nll")
    return math.exp(_mean_over_split(model, data, model.token_nll, batch_size, max_tokens))


@torch.no_grad()
def evaluate_loss(model: RecurrentLM, data: D.SequenceData, batch_size: int = 64,
                  max_tokens: int | None = None) -> float:
    """Mean of the head's own per-token loss (:meth:`nmst_lib.models.RecurrentLM.token_loss`)
    over the continuation tokens (eos included, context excluded) of ``data``: log perplexity for
    the va/st/nmst heads, the mean entmax loss (Martins et al. (2020) eq. 5-6) for the entmax
    heads, whose perplexity can be infinite (Chapter 8, 08_sparse). Eval mode; restores the
    model's mode afterwards."""
    _check_model_and_data(model, data, "token_loss")
    return _mean_over_split(model, data, model.token_loss, batch_size, max_tokens)


@torch.no_grad()
def evaluate_eps_perplexity(model: RecurrentLM, data: D.SequenceData, batch_size: int = 64,
                            max_tokens: int | None = None) -> float:
    """The epsilon-perplexity (Martins et al. (2020) eq. 9) of the model's probabilities of the
    continuation tokens (eos included, context excluded) of ``data``, at the epsilon that
    minimises it (:func:`nmst_lib.metrics.epsilon_perplexity`, their App. A): a perplexity that
    stays finite when a sparse (entmax) model gives a reference token probability 0, and equals
    the perplexity when no token gets 0 and epsilon = 0 is best (Chapter 8, 08_sparse). Eval mode;
    restores the model's mode afterwards."""
    from ..metrics import epsilon_perplexity

    _check_model_and_data(model, data, "vocab_size")
    probs = []

    def collect(batch):
        batch = batch.to(model.device)
        log_p = model(batch.inputs, batch.context_mask)
        probs.append(batch.target_log_probs(log_p).double().exp())
        return torch.zeros((), dtype=torch.float64), batch.target_mask.sum()

    _mean_over_split(model, data, collect, batch_size, max_tokens)
    value, _ = epsilon_perplexity(torch.cat(probs), model.vocab_size)
    return value


def _check_model_and_data(model, data, needs: str) -> None:
    """The arguments of the evaluations: a model of :mod:`nmst_lib.models` (a ``torch.nn.Module``
    with ``device`` and ``needs``) and a :class:`nmst_lib.data.SequenceData` with a token to score."""
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "device") or not hasattr(model, needs):
        raise TypeError(f"model must be a language model of nmst_lib.models (RecurrentLM, GPT2LM: a torch.nn.Module "
                        f"with device and {needs}), got {type(model).__name__}")
    if not isinstance(data, D.SequenceData):
        raise TypeError(f"data must be a nmst_lib.data.SequenceData (one split's sequences), got {type(data).__name__}")
    if data.num_target_tokens == 0:
        raise ValueError("data has no continuation token to score (no sequence): the mean over the split is "
                         "undefined")


def _mean_over_split(model: RecurrentLM, data: D.SequenceData, summed, batch_size: int,
                     max_tokens: int | None) -> float:
    """sum / count of ``summed(batch) -> (sum, count)`` over the length-bucketed batches of
    ``data``, in eval mode (the model's mode is restored afterwards)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    device = model.device
    try:
        for indices in D.bucket_batches(data.lengths, batch_size, max_tokens=max_tokens):
            with _autocast(device):
                value, n = summed(D.make_batch(data, indices))
            total += float(value.double())
            count += int(n)
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("data has no continuation token to score: the mean over the split is undefined")
    return total / count


def unigram_perplexity(train: D.SequenceData, valid: D.SequenceData) -> float:
    """Validation perplexity of the unigram model: every continuation token (eos included)
    predicted by its frequency among ``train``'s continuation tokens, add-one smoothed over the
    vocabulary (so that a piece unseen in training keeps a finite probability), scored on
    ``valid``'s continuation tokens. It is what a model that ignores its context can reach: a
    model whose validation perplexity sits at this value has not yet learned to use the context
    (the *unigram plateau*; the ``start_below_unigram`` rule of
    :class:`~nmst_lib.experiments.trainer.Trainer`, Chapter 9, 09_temperature)."""
    for name, split in (("train", train), ("valid", valid)):
        if not isinstance(split, D.SequenceData):
            raise TypeError(f"{name} must be a nmst_lib.data.SequenceData, got {type(split).__name__}")
    if len(train.vocab) != len(valid.vocab):
        raise ValueError(f"train and valid must share a vocabulary, got sizes {len(train.vocab)} and "
                         f"{len(valid.vocab)}")
    counts = torch.bincount(train.continuation_tokens, minlength=len(train.vocab)).double() + 1.0
    log_probs = counts.log() - counts.sum().log()
    targets = valid.continuation_tokens
    if targets.numel() == 0:
        raise ValueError("valid has no continuation tokens to score")
    return math.exp(-float(log_probs[targets].mean()))


def selection_metric(config: ExperimentConfig) -> str:
    """What :func:`~nmst_lib.experiments.trainer.train` compares between epochs (lower is better): ``"val_ppl"`` (validation
    perplexity, Chapter 6) for the heads trained with the negative log-likelihood (va, st, nmst),
    ``"val_loss"`` (validation mean entmax loss, Chapter 8, 08_sparse) for the entmax heads. Both
    are the validation mean of the head's own training loss (perplexity is its exponential).
    With ``select_on="eps_ppl"`` an entmax head is compared by its validation epsilon-perplexity
    instead (``"val_eps_ppl"``, :func:`evaluate_eps_perplexity`), a perplexity, so that a
    threshold like the 0.5 % rule means what it means for a softmax model: the entmax loss spans
    about 0.14 nats between a uniform model (1.31 at alpha = 1.5 and 4,000 pieces) and a trained
    one (1.17), where the log perplexity spans about 3, so a threshold in nats stopped the entmax
    model while it still improved (pending_results/measuring/entmax-loss-rule/)."""
    config = validate_config(config)
    if config.training.select_on == "eps_ppl":
        return "val_eps_ppl"
    return "val_ppl" if config.head in NLL_HEADS else "val_loss"


def validation_score(config: ExperimentConfig, model: RecurrentLM,
                     data: D.SequenceData) -> float:
    """The :func:`selection_metric` of ``config`` for ``model`` on ``data``
    (the validation split), at twice the training batch size: what
    :func:`nmst_lib.experiments.trainer.train` compares between epochs. Used to train the models of
    Chapters 6-9."""
    metric = selection_metric(config)
    if metric == "val_ppl":
        return evaluate_perplexity(model, data, config.training.batch_size * 2, config.training.max_batch_tokens)
    if metric == "val_eps_ppl":
        return evaluate_eps_perplexity(model, data, config.training.batch_size * 2, config.training.max_batch_tokens)
    return evaluate_loss(model, data, config.training.batch_size * 2, config.training.max_batch_tokens)
