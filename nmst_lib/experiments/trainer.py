"""The one training loop of the library, for every experiment family (Chapters
6-9): the :class:`Trainer` (AdamW, learning-rate halving, early stopping and
best-by-validation selection, Choi, Cho, Lee (2023) App. D; atomic checksummed
checkpoints and exact resumption) and :func:`train`, which runs it (Chapter 6,
06_wikitext, first) and returns a :class:`TrainedRun`.
The same loop trains the entmax heads of Chapter 8 (08_sparse) on their own
loss (Martins et al. (2020) eq. 5-6), selecting by the validation mean of that
loss (:func:`nmst_lib.experiments.evaluation.selection_metric`), and fine-tunes
GPT-2 (Chapter 7, 07_gpt2; Choi, Cho, Lee (2023) Sec. 4.2 and App. D): AdamW
with no weight decay on biases and LayerNorm, a linear learning-rate decay per
optimizer step, gradient accumulation, ``max_steps``, and data-parallel
training over several processes (:mod:`nmst_lib.experiments.distributed`,
DistributedDataParallel through ``torchrun``).

What a run trains on comes from :mod:`nmst_lib.experiments.preparation`; the
model, optimiser groups, schedule, device and precision from
:mod:`nmst_lib.experiments.model_setup`; the validation and test scores from
:mod:`nmst_lib.experiments.evaluation`. This module holds the loop and what it
checkpoints: where (:func:`checkpoint_path`), the progress of a run, the RNG
states.

Reproducibility: every random choice comes from a seed (python, numpy, torch;
the data order from a generator seeded by ``(seed, epoch)``); checkpoints hold
the RNG states, so a run that is killed and resumed reaches the same final
validation perplexity as an uninterrupted one (bit for bit on CPU).
Checkpoints are safetensors files with a sha256 over their contents
(:mod:`nmst_lib.experiments.checkpoints`; files of the earlier ``.pt`` format
are still read): a truncated or corrupted file raises :class:`CheckpointError`.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .. import data as D
from ..models import GPT2LM, RecurrentLM
from .checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from .config import (
    DECODING_FIELDS,
    ExperimentConfig,
    training_hash,
    validate_config,
)
from .distributed import (
    DistContext,
    all_reduce_sum,
    init_distributed,
    no_sync,
    shard_rows,
    wrap_model,
)
from .evaluation import (
    evaluate_loss,
    evaluate_perplexity,
    selection_metric,
    unigram_perplexity,
    validation_score,
)
from .model_setup import (
    _autocast,
    autocast_dtype,
    build_model_for,
    default_device,
    linear_lr,
    parameter_groups,
    seed_everything,
    subnormals_flushed,
)
from .preparation import PreparedData, prepare_data
from .results import is_source_checkout, user_cache_dir

__all__ = [
    "TrainedRun",
    "Trainer",
    "checkpoint_path",
    "default_checkpoint_dir",
    "train",
]


def default_checkpoint_dir() -> Path:
    """Where checkpoints go by default: ``<repo>/data/checkpoints/wikitext2`` (git-ignored) in a
    source checkout, else ``<user cache>/checkpoints/wikitext2``
    (:func:`nmst_lib.experiments.results.user_cache_dir`), so that an installed wheel (Colab,
    ``pip install``) never writes into site-packages. Chapter 6 (``06_wikitext``)."""
    if is_source_checkout():
        return D.repo_root() / "data" / "checkpoints" / "wikitext2"
    return user_cache_dir() / "checkpoints" / "wikitext2"


_CHECKPOINT_SUFFIX = ".safetensors"
_LEGACY_SUFFIX = ".pt"


def _checkpoint_file(config: ExperimentConfig, checkpoint_dir=None) -> Path:
    """Where :func:`train` writes the checkpoint of ``config``."""
    base = Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint_dir()
    return base / f"{config.key}{_CHECKPOINT_SUFFIX}"


def checkpoint_path(config: ExperimentConfig, checkpoint_dir=None) -> Path:
    """The checkpoint file of ``config``: ``<checkpoint_dir>/<key>.safetensors``
    (:mod:`nmst_lib.experiments.checkpoints`), or ``<checkpoint_dir>/<key>.pt`` when only a
    checkpoint of the earlier format exists there (it is read, and the next checkpoint is
    written as ``.safetensors``). ``checkpoint_dir`` defaults to :func:`default_checkpoint_dir`.
    Used to train the models of Chapters 6-9."""
    path = _checkpoint_file(config, checkpoint_dir)
    legacy = path.with_name(f"{config.key}{_LEGACY_SUFFIX}")
    if not path.is_file() and legacy.is_file():
        return legacy
    return path


# ---------------------------------------------------------------------- checkpoints


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    np_state = np.random.get_state()
    state["numpy"] = {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                      "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached": float(np_state[4])}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _clone_state(module: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


# ---------------------------------------------------------------------------------- training


@dataclass
class TrainedRun:
    """A trained model (best epoch's weights, eval mode) and its training record.

    ``val_ppl``/``test_ppl``: perplexities for the heads trained with the negative
    log-likelihood (va, st, nmst); None for the entmax heads (Chapter 8, 08_sparse), whose
    perplexity is infinite as soon as one reference word falls outside the support.
    ``val_loss``/``test_loss``: the mean of the head's own per-token loss (log perplexity for
    va/st/nmst, computed as the log of the perplexity; the mean entmax loss for the entmax heads).
    ``step_losses``: the training loss of every optimizer step (the mean per-token loss of the
    whole global batch, over all micro-batches and processes; Chapter 7, 07_gpt2), in order;
    ``optimizer_steps``: how many steps were taken. ``monitor_log``: the records of
    :func:`train`'s ``monitor`` (Chapter 9, 09_temperature), in order; empty without one.
    """

    config: ExperimentConfig
    model: RecurrentLM | GPT2LM
    data: PreparedData
    history: list[dict]
    best_epoch: int
    epochs_run: int
    stopped_early: bool
    val_ppl: float | None
    test_ppl: float | None
    train_seconds: float
    device: str
    checkpoint: str
    resumed_from: dict | None = None
    val_loss: float | None = None
    test_loss: float | None = None
    step_losses: list[float] = field(default_factory=list)
    optimizer_steps: int = 0
    world_size: int = 1
    monitor_log: list[dict] = field(default_factory=list)


@dataclass
class _Progress:
    epoch: int = 0  # completed epochs
    step: int = 0  # batches (= optimizer steps) done in the current epoch
    # The best validation score so far (see selection_metric: perplexity for va/st/nmst, mean entmax
    # loss for the entmax heads); the name predates the entmax heads and is kept so that existing
    # checkpoints load.
    best_val_ppl: float = math.inf
    best_epoch: int = 0
    bad_epochs: int = 0
    lr: float = 0.0
    history: list = field(default_factory=list)
    finished: bool = False
    stopped_early: bool = False
    train_seconds: float = 0.0
    epoch_loss_sum: float = 0.0
    epoch_tokens: int = 0
    # Chapter 7 (07_gpt2); absent from older checkpoints, whose defaults are right for them
    opt_step: int = 0  # optimizer steps taken in the whole run
    step_losses: list = field(default_factory=list)  # global mean loss of every optimizer step
    reached_max_steps: bool = False
    # Chapter 9 (09_temperature); absent from checkpoints of unmonitored runs
    monitor_log: list = field(default_factory=list)  # the monitor's records, in order


def _progress_state(prog: _Progress) -> dict:
    state = {k: getattr(prog, k) for k in prog.__dataclass_fields__ if k not in ("step_losses", "monitor_log")}
    if prog.monitor_log:  # unmonitored runs write the checkpoints they always wrote
        state["monitor_log"] = prog.monitor_log
    state["step_losses"] = torch.tensor(prog.step_losses, dtype=torch.float64)  # a tensor: cheap to store
    return state


def _progress_from_state(state: dict) -> _Progress:
    state = dict(state)
    losses = state.pop("step_losses", None)
    prog = _Progress(**state)
    prog.step_losses = [] if losses is None else [float(v) for v in torch.as_tensor(losses).tolist()]
    return prog


def _checkpoint_payload(config, vocab, model, optimizer, scaler, best_state, prog: _Progress) -> dict:
    return {
        "format": 1,
        "config": config.to_dict(),
        "training_hash": training_hash(config),
        "vocab_size": len(vocab),
        "vocab_fingerprint": vocab.fingerprint,
        "model": model.state_dict(),
        "best_model": best_state,
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "rng": _rng_state(),
        "progress": _progress_state(prog),
    }


def _check_checkpoint_matches(ckpt: dict, config: ExperimentConfig, vocab, path: Path) -> None:
    if ckpt.get("training_hash") != training_hash(config):
        stored, current = ckpt.get("config", {}), config.to_dict()
        diff = [k for k in sorted(set(stored) | set(current))
                if stored.get(k) != current.get(k) and k not in DECODING_FIELDS]
        raise CheckpointError(
            f"checkpoint {path} was written for a different config (fields that differ: {diff or 'schema version'}); "
            "use another --checkpoint-dir, or train without --resume to start over"
        )
    if ckpt.get("vocab_fingerprint") != vocab.fingerprint:
        raise CheckpointError(
            f"vocabulary mismatch: checkpoint {path} has a vocabulary of {ckpt.get('vocab_size')} entries, the data "
            f"gives {len(vocab)} (different data source or vocabulary); point at the data it was trained on, or "
            "train without --resume to start over"
        )


def _decay_horizon(config: ExperimentConfig, data: PreparedData) -> int:
    """Optimizer steps of the linear schedule: ``config.training.lr_decay_steps``, else ``max_epochs`` x the
    batches of epoch 1 (one optimizer step per batch)."""
    if config.training.lr_decay_steps is not None:
        return config.training.lr_decay_steps
    batches = D.bucket_batches(data.train.lengths, config.training.batch_size, max_tokens=config.training.max_batch_tokens,
                               shuffle=True, generator=D.epoch_generator(config.seed, 0))
    return max(1, config.training.max_epochs * len(batches))


def _reseed_other_rank(config: ExperimentConfig, ctx: DistContext, opt_step: int) -> None:
    """Ranks > 0 draw their dropout masks from their own stream (seeded by seed, rank and the
    optimizer step at which they (re)start); rank 0's stream is the single-process one."""
    if ctx.rank > 0:
        torch.manual_seed((config.seed * 1_000_003 + ctx.rank) * 1_000_003 + opt_step)


def _check_hooks(monitor, monitor_every, checkpoint_every) -> tuple[int | None, int | None]:
    """Check :func:`train`'s ``monitor``, ``monitor_every`` and ``checkpoint_every``; returns
    the two intervals (validated positive integers or None)."""
    from .._validation import check_positive_int

    if monitor is not None and not callable(monitor):
        raise TypeError(f"monitor must be a function of the model returning a dict, got {type(monitor).__name__}")
    if monitor_every is not None:
        if monitor is None:
            raise ValueError("monitor_every needs a monitor (a function of the model returning a dict)")
        monitor_every = check_positive_int(monitor_every, "monitor_every")
    if checkpoint_every is not None:
        checkpoint_every = check_positive_int(checkpoint_every, "checkpoint_every")
    return monitor_every, checkpoint_every


def _improves(score: float, best: float, min_improvement: float, metric: str = "val_ppl") -> bool:
    """Whether a validation score (lower is better) improves on ``best`` by more than the
    threshold ``min_improvement`` (0: any improvement; 0.005: perplexity lower by more than 0.5 %,
    the ``rel`` threshold of PyTorch's ``ReduceLROnPlateau``). An epoch that does not halves the
    lr (``plateau``) and counts towards ``patience`` (Choi et al. (2023) App. D; Chapter 6).

    The rule is one rule in two units. A perplexity (``metric="val_ppl"``, or ``"val_eps_ppl"``,
    the epsilon-perplexity of an entmax head with ``select_on="eps_ppl"``) must fall by the
    factor ``1 - min_improvement``; a mean per-token loss in nats (``"val_loss"``, the entmax
    heads of Chapter 8) must fall by ``-log(1 - min_improvement)`` nats, which is the same
    condition when the loss is the log of the perplexity. (A relative threshold on a loss would
    not be: 0.5 % of a loss of 4.5 nats asks for 0.0225 nats, a perplexity 2.3 % lower.)"""
    if not math.isfinite(best):
        return score < best
    if metric in ("val_ppl", "val_eps_ppl"):
        return score < best - abs(best) * min_improvement
    if metric == "val_loss":
        return score < best + math.log1p(-min_improvement)
    raise ValueError(f"metric must be 'val_ppl', 'val_eps_ppl' or 'val_loss' (selection_metric), got {metric!r}")


def _left_unigram_plateau(history: list[dict], score: float, unigram_ppl: float | None,
                          fraction: float | None) -> bool:
    """Whether the plateau rule applies at this epoch (``start_below_unigram``, Chapter 9): always
    when ``fraction`` is None; otherwise once some epoch so far (this one included, validation
    perplexity ``score``) has ended below ``fraction`` times the unigram model's validation
    perplexity (:func:`~nmst_lib.experiments.evaluation.unigram_perplexity`)."""
    if fraction is None:
        return True
    bar = fraction * unigram_ppl
    return score < bar or any(r["val_ppl"] < bar for r in history)


class Trainer:
    """One training run of :func:`train` as steps a reader can follow: set up (model, AdamW,
    grad scaler, progress, all seeded from the config), :meth:`restore` a checkpoint,
    :meth:`run_epoch` (one epoch of batches, then :meth:`end_epoch`: validation, best weights,
    lr decay, early stopping, :meth:`checkpoint`), and :meth:`finish` (best weights, final
    perplexities, a :class:`TrainedRun`). Chapters 6-9 train through it; see :func:`train` for
    the options and the guarantees (exact resumption, one process or many)."""

    def __init__(self, config: ExperimentConfig, *, checkpoint_dir, data: PreparedData | None,
                 device, ctx: DistContext, progress: bool, checkpoint_every: int | None,
                 log: Callable[[str], None] | None, log_steps: bool, monitor,
                 monitor_every: int | None):
        self.config, self.ctx = config, ctx
        self.say = (log or (lambda msg: None)) if ctx.is_main else (lambda msg: None)
        self.progress = progress and ctx.is_main
        self.checkpoint_every, self.log_steps, self.monitor_every = checkpoint_every, log_steps, monitor_every
        self.device = ctx.device if ctx.distributed else (torch.device(device) if device is not None
                                                          else default_device())
        self.data = data if data is not None else prepare_data(config)
        self.path = checkpoint_path(config, checkpoint_dir)  # to resume from (a legacy .pt when only that exists)
        self.write_path = _checkpoint_file(config, checkpoint_dir)
        seed_everything(config.seed)
        self.model = build_model_for(config, len(self.data.vocab)).to(self.device)
        params = parameter_groups(self.model, config) if config.training.no_decay_bias_norm else self.model.parameters()
        self.optimizer = torch.optim.AdamW(params, lr=config.training.lr, betas=config.training.betas,
                                           weight_decay=config.training.weight_decay)
        # Loss scaling under any CUDA autocast: float16 has 5 exponent bits, and the cuDNN RNN/LSTM runs in
        # float16 even under bfloat16 autocast (see autocast_dtype); with bfloat16 elsewhere it costs nothing.
        self.scaler = torch.amp.GradScaler(self.device.type) if autocast_dtype(self.device) is not None else None
        self.prog = _Progress(lr=config.training.lr)
        self.best_state = _clone_state(self.model)
        self.resumed_from = None
        self.monitor = monitor if ctx.is_main else None
        self.metric = selection_metric(config)
        self.unigram_ppl = (unigram_perplexity(self.data.train, self.data.valid)
                            if config.training.start_below_unigram is not None else None)

    def restore(self, resume: bool) -> None:
        """With ``resume``, continue from the checkpoint when there is one (weights, optimizer,
        scaler, best weights, progress, RNG states); then fix the lr, the dropout stream of
        ranks > 0, and take the monitor's step-0 record of a fresh run."""
        config, path = self.config, self.path
        if resume and path.is_file():
            ckpt = load_checkpoint(path)
            _check_checkpoint_matches(ckpt, config, self.data.vocab, path)
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
            if self.scaler is not None and ckpt.get("scaler"):
                self.scaler.load_state_dict(ckpt["scaler"])
            self.best_state = ckpt["best_model"]
            self.prog = _progress_from_state(ckpt["progress"])
            _set_rng_state(ckpt["rng"])
            self.resumed_from = {"epoch": self.prog.epoch, "step": self.prog.step}
            self.say(f"[train] {config.key}: resumed from {path.name} at epoch {self.prog.epoch} + "
                     f"{self.prog.step} batches")
        elif resume:
            self.say(f"[train] {config.key}: no checkpoint at {path}; starting from scratch")
        _reseed_other_rank(config, self.ctx, self.prog.opt_step)
        self._set_lr(self.prog.lr)
        self.horizon = _decay_horizon(config, self.data) if config.training.lr_schedule == "linear" else None
        distributed = self.ctx.distributed or config.training.grad_accum > 1
        self.loss_module = wrap_model(self.model, self.ctx) if distributed else None
        prog = self.prog
        if self.monitor is not None and prog.opt_step == 0 and not prog.monitor_log and not prog.finished:
            self.watch(0.0)  # step 0: the initialised model
        self.start_time = time.perf_counter() - prog.train_seconds

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def watch(self, epochs_done: float) -> None:
        """One monitor record (:func:`_monitor_record`)."""
        _monitor_record(self.model, self.monitor, self.prog, epochs_done, self.device)

    def checkpoint(self) -> None:
        """Write the checkpoint atomically (rank 0 only)."""
        if self.ctx.is_main:
            save_checkpoint(self.write_path, _checkpoint_payload(self.config, self.data.vocab, self.model,
                                                                 self.optimizer, self.scaler, self.best_state,
                                                                 self.prog))

    @property
    def done(self) -> bool:
        """True when training has finished (early stop, ``max_epochs`` or ``max_steps``)."""
        return self.prog.finished or self.prog.epoch >= self.config.training.max_epochs

    def run_epoch(self) -> None:
        """One epoch of batches (or the rest of one) by :func:`_train_one_epoch`, then
        :meth:`end_epoch`."""
        self.prog = _train_one_epoch(
            self.config, self.model, self.optimizer, self.scaler, self.data, self.device, self.prog,
            self.progress, self.checkpoint_every, self.checkpoint, self.say, self.log_steps, self.start_time,
            ctx=self.ctx, loss_module=self.loss_module, horizon=self.horizon,
            watch=self.watch if self.monitor is not None else None, monitor_every=self.monitor_every)
        self.end_epoch()

    def end_epoch(self) -> None:
        """Validate; keep the weights when the validation score improved, else (plateau) decay
        the lr, unless the model is still on the unigram plateau (``start_below_unigram``);
        record the epoch; stop early after ``patience`` bad epochs; checkpoint."""
        config, prog, metric = self.config, self.prog, self.metric
        score = validation_score(config, self.model, self.data.valid)
        if math.isnan(score):
            raise FloatingPointError(f"{config.key}: the validation {metric} is NaN after epoch {prog.epoch + 1} "
                                     "(training diverged); lower lr or check the head's loss")
        epoch_no = prog.epoch + 1
        record = {"epoch": epoch_no, "lr": prog.lr, metric: score,
                  "train_loss": prog.epoch_loss_sum / max(prog.epoch_tokens, 1), "train_tokens": prog.epoch_tokens}
        if config.training.lr_schedule != "plateau" or config.training.max_steps is not None or config.training.grad_accum != 1:
            record["optimizer_steps"] = prog.opt_step  # Chapter 7's runs; Chapter 6's records keep their keys
        significant = _improves(score, prog.best_val_ppl, config.training.min_improvement, metric)
        rule_applies = _left_unigram_plateau(prog.history, score, self.unigram_ppl,
                                             config.training.start_below_unigram)
        if self.unigram_ppl is not None:
            record["unigram_val_ppl"], record["plateau_rule"] = self.unigram_ppl, rule_applies
        if score < prog.best_val_ppl:  # the best weights are kept whatever the threshold
            prog.best_val_ppl, prog.best_epoch = score, epoch_no
            self.best_state = _clone_state(self.model)
        if significant or not rule_applies:
            prog.bad_epochs = 0
        else:
            prog.bad_epochs += 1
            if config.training.lr_schedule == "plateau":
                prog.lr *= config.training.lr_decay
                self._set_lr(prog.lr)
        prog.history.append(record)
        prog.epoch, prog.step, prog.epoch_loss_sum, prog.epoch_tokens = epoch_no, 0, 0.0, 0
        prog.stopped_early = prog.bad_epochs >= config.training.patience
        prog.finished = prog.stopped_early or prog.epoch >= config.training.max_epochs or prog.reached_max_steps
        prog.train_seconds = time.perf_counter() - self.start_time
        self.checkpoint()
        self.say(f"[train] {config.key}: epoch {epoch_no}/{config.training.max_epochs} train_loss {record['train_loss']:.4f} "
                 f"{metric} {score:.{4 if metric == 'val_loss' else 2}f} lr {record['lr']:.2e}"
                 f"{' (best)' if prog.best_epoch == epoch_no else ''}"
                 f"{f' (max_steps {config.training.max_steps} reached)' if prog.reached_max_steps else ''}")

    def finish(self) -> TrainedRun:
        """Mark the run finished (checkpoint), load the best weights, evaluate them on the
        validation and test splits, and return the :class:`TrainedRun`."""
        config, prog, data = self.config, self.prog, self.data
        if not prog.finished:  # max_epochs reached by a resumed run whose flag was not set
            prog.finished = True
            self.checkpoint()
        model = self.model
        model.load_state_dict(self.best_state)
        model.eval()
        size = config.training.batch_size * 2
        if self.metric == "val_ppl":
            val_ppl = evaluate_perplexity(model, data.valid, size, config.training.max_batch_tokens)
            test_ppl = evaluate_perplexity(model, data.test, size, config.training.max_batch_tokens)
            val_loss, test_loss = math.log(val_ppl), math.log(test_ppl)
        else:
            val_ppl = test_ppl = None
            val_loss = evaluate_loss(model, data.valid, size, config.training.max_batch_tokens)
            test_loss = evaluate_loss(model, data.test, size, config.training.max_batch_tokens)
        return TrainedRun(config=config, model=model, data=data, history=list(prog.history),
                          best_epoch=prog.best_epoch, epochs_run=prog.epoch, stopped_early=prog.stopped_early,
                          val_ppl=val_ppl, test_ppl=test_ppl, train_seconds=prog.train_seconds,
                          device=str(self.device), checkpoint=str(self.write_path),
                          resumed_from=self.resumed_from, val_loss=val_loss, test_loss=test_loss,
                          step_losses=list(prog.step_losses), optimizer_steps=prog.opt_step,
                          world_size=self.ctx.world_size, monitor_log=list(prog.monitor_log))


def train(
    config: ExperimentConfig,
    *,
    checkpoint_dir=None,
    resume: bool = False,
    data: PreparedData | None = None,
    device=None,
    progress: bool = True,
    checkpoint_every: int | None = None,
    log: Callable[[str], None] | None = None,
    log_steps: bool = False,
    dist: DistContext | None = None,
    monitor: Callable[[torch.nn.Module], dict] | None = None,
    monitor_every: int | None = None,
) -> TrainedRun:
    """Train the model of ``config`` (Choi, Cho, Lee (2023) Sec. 4.1 and App. D; Chapter 6,
    06_wikitext; GPT-2: Sec. 4.2, Chapter 7, 07_gpt2). One loop for every arch.

    AdamW(lr, betas, weight_decay; :func:`~nmst_lib.experiments.model_setup.parameter_groups`: no decay on biases and LayerNorm
    with ``no_decay_bias_norm``) on the mean of the head's own per-token loss
    (:meth:`nmst_lib.models.RecurrentLM.token_loss`); per epoch, bucketed batches in an order fixed by
    ``(seed, epoch)``; one optimizer step per batch; gradient-norm clipping; after the epoch the validation score
    (:func:`~nmst_lib.experiments.evaluation.selection_metric`: perplexity for va/st/nmst, mean entmax loss for the entmax heads of
    Chapter 8, 08_sparse) decides: improvement -> remember these weights; none -> (``lr_schedule``
    ``plateau``) multiply the lr by ``lr_decay``, and stop after ``patience`` such epochs in a row.
    With ``lr_schedule="linear"`` the lr of optimizer step s is :func:`~nmst_lib.experiments.model_setup.linear_lr` (lr, s,
    ``lr_decay_steps``, default ``max_epochs`` x steps per epoch); early stopping is the same.
    Training also stops after ``max_steps`` optimizer steps (the partial epoch is validated).
    The returned model holds the best epoch's weights. On CUDA the forward pass runs under autocast to :func:`~nmst_lib.experiments.model_setup.autocast_dtype` (bfloat16, or
    float16) with a ``GradScaler``; the output layer runs in float32.

    Gradient accumulation and data parallelism (:mod:`nmst_lib.experiments.distributed`): each
    batch is split row-wise into ``grad_accum`` micro-batches per process (``dist``, default
    :func:`nmst_lib.experiments.distributed.init_distributed`: the ``torchrun`` environment, else
    one process), and every micro-batch's summed loss is divided by the scored tokens of the whole
    batch, so the update equals the one of the whole batch in one piece (up to floating-point
    summation order): ``grad_accum`` and the number of processes change memory and speed, not
    the optimisation. The loss of every optimizer step (over the whole batch) is recorded
    (``TrainedRun.step_losses``). With ``grad_accum = 1`` on one process the loop is the
    Chapter 6 one, bit for bit.

    A checkpoint :func:`checkpoint_path` is written atomically after every epoch (and
    every ``checkpoint_every`` batches when given) by rank 0 only. ``resume=True`` continues from it (also a
    finished run: then nothing is trained), restoring weights, optimizer, RNG states and the
    position in the epoch; without ``resume`` an existing checkpoint is overwritten.
    Config and data problems raise before any training step.

    The epochs (training and validation) run with subnormal numbers flushed to zero on the CPU
    (:func:`~nmst_lib.experiments.model_setup.subnormals_flushed`; the setting before the call
    is restored after it): the literal eq. 7 of Chapter 9 otherwise doubles its step time.

    ``monitor`` (Chapter 9, 09_temperature: the temperature of tracked tokens over training,
    Contextual Temperature (2020) Fig. 1a): a function of the model returning a dict of
    JSON-ready values (numbers, strings, lists, dicts), called before the first optimizer step
    (step 0), after every ``monitor_every`` optimizer steps, and at the end of every epoch (unless
    a record was just taken at that step), with the model in eval mode under ``torch.no_grad``
    and the RNG states saved and restored around it (it cannot change the training). Each record
    ``{"step": optimizer steps done, "epoch": epochs done (a float), **monitor(model)}`` goes to
    ``TrainedRun.monitor_log`` and into the checkpoint, so a resumed run continues the log exactly
    where the checkpoint left it (interrupted + resumed log == uninterrupted log). Only the main
    process calls it. Without ``monitor`` the run is bit for bit the unmonitored one.
    """
    config = validate_config(config)
    monitor_every, checkpoint_every = _check_hooks(monitor, monitor_every, checkpoint_every)
    ctx = dist if dist is not None else init_distributed(device)
    if not isinstance(ctx, DistContext):
        raise TypeError(f"dist must be a DistContext (see nmst_lib.experiments.distributed), got {type(ctx).__name__}")
    trainer = Trainer(config, checkpoint_dir=checkpoint_dir, data=data, device=device, ctx=ctx, progress=progress,
                      checkpoint_every=checkpoint_every, log=log, log_steps=log_steps, monitor=monitor,
                      monitor_every=monitor_every)
    trainer.restore(resume)
    with subnormals_flushed():  # the literal eq. 7 of Chapter 9 makes subnormal gradients: 2x slower unflushed
        while not trainer.done:
            trainer.run_epoch()
    return trainer.finish()


def _monitor_record(model: torch.nn.Module, monitor, prog: _Progress, epochs_done: float, device) -> None:
    """Append ``{"step", "epoch", **monitor(model)}`` to ``prog.monitor_log``: eval mode, no
    gradients, RNG states forked (restored afterwards), the model's mode restored (the hook of
    :func:`train`; Chapter 9, 09_temperature, Contextual Temperature (2020) Fig. 1a)."""
    was_training = model.training
    model.eval()
    devices = [device] if torch.device(device).type == "cuda" else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            record = monitor(model)
    finally:
        model.train(was_training)
    if not isinstance(record, dict) or not all(isinstance(k, str) for k in record):
        raise TypeError(f"the monitor must return a dict with string keys, got {type(record).__name__}")
    if "step" in record or "epoch" in record:
        raise ValueError("the monitor's dict must not use the keys 'step' and 'epoch' (train adds them)")
    prog.monitor_log.append({"step": prog.opt_step, "epoch": float(epochs_done), **record})


def _train_one_epoch(config, model, optimizer, scaler, data, device, prog, progress, checkpoint_every, checkpoint,
                     say, log_steps, start_time, *, ctx: DistContext | None = None, loss_module=None,
                     horizon: int | None = None, watch=None, monitor_every: int | None = None) -> _Progress:
    """One epoch (or the rest of one, from ``prog.step``) of teacher-forced training: one
    optimizer step per batch, the batch split into micro-batches over ``grad_accum`` and the
    processes of ``ctx`` (see :func:`train`)."""
    from tqdm.auto import tqdm

    ctx = ctx if ctx is not None else DistContext(device=device)
    epoch = prog.epoch  # 0-based index of the running epoch
    batches = D.bucket_batches(data.train.lengths, config.training.batch_size, max_tokens=config.training.max_batch_tokens,
                               shuffle=True, generator=D.epoch_generator(config.seed, epoch))
    k = config.data.context_len
    total_tokens = data.train.num_target_tokens
    done_tokens = sum(int((data.train.lengths[b] - k).sum()) for b in batches[:prog.step])
    bar = tqdm(total=total_tokens, initial=done_tokens, unit="tok", unit_scale=True, disable=not progress,
               desc=f"{config.label} epoch {epoch + 1}/{config.training.max_epochs}", leave=False, dynamic_ncols=True)
    model.train()
    with bar:
        for i in range(prog.step, len(batches)):
            if config.training.max_steps is not None and prog.opt_step >= config.training.max_steps:
                prog.reached_max_steps = True
                break
            if horizon is not None:  # linear schedule: the lr of this optimizer step
                prog.lr = linear_lr(config.training.lr, prog.opt_step, horizon)
                for group in optimizer.param_groups:
                    group["lr"] = prog.lr
            if loss_module is None:  # one process, one micro-batch: Chapter 6's step, bit for bit
                batch = D.make_batch(data.train, batches[i]).to(device)
                with _autocast(device):
                    nll, count = model.token_loss(batch)  # the head's own loss: NLL for va/st/nmst
                loss = nll / count
                optimizer.zero_grad(set_to_none=True)
                if scaler is not None:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                step_sum, n = float(nll.detach()), int(count)
            else:
                step_sum, n = _accumulate(config, data, batches[i], device, scaler, optimizer, loss_module, ctx)
            if scaler is not None:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.training.clip)
                scaler.step(optimizer)
                scaler.update()
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.training.clip)
                optimizer.step()
            prog.epoch_loss_sum += step_sum
            prog.epoch_tokens += n
            prog.step = i + 1
            prog.opt_step += 1
            step_loss = step_sum / max(n, 1)
            prog.step_losses.append(step_loss)
            bar.update(n)
            bar.set_postfix(loss=f"{step_loss:.3f}", lr=f"{prog.lr:.1e}", refresh=False)
            if log_steps:
                say(f"[step] epoch {epoch + 1} batch {i + 1}/{len(batches)} loss {step_loss:.4f}")
            if watch is not None and monitor_every and prog.opt_step % monitor_every == 0:
                watch(epoch + prog.step / len(batches))
            if checkpoint_every and prog.step % checkpoint_every == 0 and prog.step < len(batches):
                prog.train_seconds = time.perf_counter() - start_time
                checkpoint()
        else:
            if config.training.max_steps is not None and prog.opt_step >= config.training.max_steps:
                prog.reached_max_steps = True
    if watch is not None and (not prog.monitor_log or prog.monitor_log[-1]["step"] != prog.opt_step):
        watch(epoch + prog.step / len(batches))  # the end of the epoch (or where max_steps stopped it)
    return prog


def _accumulate(config, data, indices, device, scaler, optimizer, loss_module, ctx: DistContext) -> tuple[float, int]:
    """Forward and backward passes of this process's micro-batches of one global batch
    (:func:`nmst_lib.experiments.distributed.shard_rows`), each micro-batch's summed loss scaled by
    ``world_size / (scored tokens of the whole batch)``, DDP's gradient all-reduce only on the
    last one. An empty micro-batch runs one row weighted 0 (every process must call the same
    collectives). Returns the summed loss and the scored tokens of the whole batch (all
    processes), the numbers the step's logged loss is made of (Chapter 7, 07_gpt2)."""
    k = config.data.context_len
    total = int((data.train.lengths[indices] - k).sum())  # scored tokens of the global batch: known everywhere
    parts = shard_rows(indices, ctx.rank, ctx.world_size, config.training.grad_accum)
    optimizer.zero_grad(set_to_none=True)
    local_sum = 0.0
    for j, part in enumerate(parts):
        weight = 1.0
        if part.numel() == 0:
            part, weight = indices[:1], 0.0
        batch = D.make_batch(data.train, part).to(device)
        with no_sync(loss_module, skip=j < len(parts) - 1):
            with _autocast(device):
                nll, _count = loss_module(batch)
            loss = nll * (weight * ctx.world_size) / total
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
        local_sum += weight * float(nll.detach())
    step_sum, = all_reduce_sum([local_sum], ctx)
    return step_sum, total
