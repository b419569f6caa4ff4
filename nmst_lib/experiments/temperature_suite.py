"""Chapter 9 (09_temperature): the contextual-temperature experiments of *Contextual Temperature for
Language Modeling* (2020) at the book's profiles, on Chapter 6's WikiText-2 pipeline and LSTM.

Models (one LSTM each, trained by :func:`nmst_lib.experiments.trainer.train`, Chapter 6's loop, with the
output layer of ``nmst_lib.temperature.contextual_head``; at ``cpu`` Chapter 6's cpu LSTM profile, 2 x 128,
vocabulary 5,000 + ``<unk>``, 4 epochs, lr 2e-3, plus the temperature fields), in run order
(:func:`temperature_suite_configs`):

1. CT-VA, sigmoid normalisation a = 1, b = 1/2 (eq. 5; tau in [2, 4]), loss scaling (Sec. 3.3) with its
   factor detached ("LS" below: each position's loss weighted by its mean temperature, held constant
   for the gradient, which is the gradient the paper's own softmax normalisation gives, since there
   the mean temperature is the constant (a + 1/V)/b);
2. CT-NMST (eps = Chapter 6's featured eps, 5e-4 at cpu), sigmoid, LS: the temperature divides the
   non-eos logits, eos follows NMST, so the termination bound 1 - (1 - eps)^t holds;
3. CT-VA sigmoid without loss scaling (Table 4's ablation);
4. CT-VA sigmoid with the literal eq. 7 (the factor has a gradient, which pushes every temperature
   towards a/b: Table 4's third row);
5. CT-VA power-tanh, lambda = 4, LS (Table 3; range [1/4, 4]);
6. CT-VA shifted-tanh, lambda = 3, LS (Table 3; range [2, 4]);
7. CT-VA softmax normalisation, LS (the paper's literal text for eq. 5: the temperatures sum to a
   constant);
8. MoS, M = 3 (eq. 3; no temperature);
9. CT-MoS, M = 3, sigmoid, LS (eq. 6);
10. CT-VA sigmoid with (a, b) = (1/2, 1), LS: range [1/2, 3/2], starting from T = 1 where the paper's
    [2, 4] starts from T = 3 (our diagnostic: a temperature of at least 2 needs logits, and output
    biases, at least twice as large as a plain softmax's, which Adam grows by about lr per step);
    at ``cpu`` also seeds 1 and 2 (greedy only, :data:`CENTRED_EXTRA_SEEDS`), for a seed spread.

Models 1, 2, 4 and 10 decode with greedy, top-2, top-4, nucleus-0.2 and nucleus-0.4, the others greedy only, on the
SAME validation contexts as Chapter 6 (128 for greedy, the first 64 for the others, L = 1e4 at cpu), by
Chapter 6's own code (:func:`nmst_lib.experiments.runs.evaluate_trained`), so r_nt(L) compares directly with
Chapter 6's committed VA and NMST LSTMs (:func:`baseline_configs`, :func:`load_baselines`).

Analyses (pure functions of a model and a :class:`nmst_lib.data.SequenceData`, batched tensor ops, no
loops over tokens): :func:`token_temperatures` (mean tau per vocabulary entry; logged over training by
:func:`temperature_monitor` for the tracked tokens of :func:`tracked_token_ids`, Fig. 1a),
:func:`temperature_by_position` (Fig. 1b: mean temperature at the first, middle and last 5 predicted
tokens of the lines with at least 15, with 95% bands over lines, and the full curve by position),
:func:`eos_temperature_by_distance` (eos's temperature against the distance to the line's true end),
:func:`greedy_continuations` (greedy continuations with the temperature of every chosen token, Table 5's
case studies), :func:`frequency_ranks`.

Results: one JSON per model, ``<results_dir>/temperature/<key>.json``, written atomically and stamped like
Chapters 6-8 (config and its hash, data description, seeds, code version, device, threads, command, date,
train/decode/analysis seconds); :func:`load_temperature_result`, :func:`load_temperature_results`; table
builders for :func:`nmst_lib.report.html_table`: :func:`temperature_table_rows` (Tables 1-2),
:func:`normalisation_table_rows` (Table 3), :func:`loss_scaling_table_rows` (Table 4),
:func:`temperature_rnt_rows` and :func:`temperature_rnt_curves` (r_nt(L) against VA and NMST).
CLI: ``python -m nmst_lib temperature --profile {quick,cpu,paper}``.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .. import data as D
from .._validation import check_positive_int
from .config import (
    FEATURED_EPS,
    PROFILES,
    ExperimentConfig,
    canonical_hash,
    config_from_dict,
    make_config,
    training_hash,
    validate_config,
)
from .family import Family, register, run_family_suite
from .results import (
    TEMPERATURE_FOLDER,
    StoredResult,
    command_line,
    current_records,
    load_result,
)
from .trainer import TrainedRun, prepare_data, train

__all__ = [
    "TEMPERATURE_RESULT_SCHEMA",
    "TEMPERATURE_EVALUATION_DEFAULTS",
    "CT_DECODERS",
    "CENTRED_EXTRA_SEEDS",
    "TEMPERATURE",
    "TemperatureConfig",
    "temperature_config_hash",
    "temperature_config_from_dict",
    "temperature_suite_configs",
    "baseline_configs",
    "load_baselines",
    "frequency_ranks",
    "tracked_token_ids",
    "monitor_subset",
    "token_temperatures",
    "temperature_monitor",
    "temperature_by_position",
    "eos_temperature_by_distance",
    "greedy_continuations",
    "temperature_result_path",
    "load_temperature_result",
    "load_temperature_results",
    "evaluate_temperature",
    "run_temperature",
    "run_temperature_suite",
    "temperature_table_rows",
    "normalisation_table_rows",
    "loss_scaling_table_rows",
    "temperature_rnt_rows",
    "temperature_rnt_curves",
]

TEMPERATURE_RESULT_SCHEMA = "nmst_lib.temperature_result/1"
_TEMPERATURE_SCHEMA_VERSION = 1
"""Bump when the evaluation code changes what a Chapter 9 result's numbers mean (every stored
temperature result then becomes STALE)."""

CENTRED_EXTRA_SEEDS = {"quick": (), "cpu": (1, 2), "paper": (1, 2)}
"""Seeds besides 0 of the suite's CT-VA with (a, b) = (1/2, 1) (Chapter 9, 09_temperature): its
perplexity is compared with the spread of Chapter 6's three VA LSTM seeds."""

CT_DECODERS = ("greedy", "top-2", "top-4", "nucleus-0.2", "nucleus-0.4")
"""Decoders of the CT-VA and CT-NMST models (Chapter 9, 09_temperature): greedy and the incomplete
decoders of Choi, Cho, Lee (2023) Fig. 2 / App. F, whose kept set a per-token temperature can change
(a global one cannot)."""

TEMPERATURE_EVALUATION_DEFAULTS = {
    "tracked_top": 100,
    "tracked_log_spaced": 60,
    "monitor_per_epoch": 8,
    "monitor_tokens": 8000,
    "monitor_seed": 0,
    "position_min_tokens": 15,
    "position_span": 5,
    "position_curve_max": 100,
    "eos_window": 30,
    "confidence": 0.95,
    "analysis_batch_size": 16,
    "continuation_contexts": 4,
    "continuation_max_len": 40,
    "continuation_top": 4,
}
"""The evaluation settings of :class:`TemperatureConfig` (Chapter 9, 09_temperature; Contextual
Temperature (2020) Sec. 4.5 and Fig. 1): tracked tokens = the ``tracked_top`` most frequent training
tokens + ``tracked_log_spaced`` log-spaced frequency ranks down to the rarest + eos + ``<unk>``; about
``monitor_per_epoch`` monitor records per epoch on a fixed random subset of about ``monitor_tokens``
scored validation tokens (lines drawn with seed ``monitor_seed``); the position protocol of Sec. 4.5
(lines with at least ``position_min_tokens`` predicted tokens, eos excluded: the first, middle and last
``position_span``) and the full curve for positions 1..``position_curve_max``; eos's temperature over
the last ``eos_window`` predictions of each line; bands = ``confidence`` normal intervals over lines;
``analysis_batch_size`` lines per batch; ``continuation_contexts`` greedy continuations of
``continuation_max_len`` tokens with the ``continuation_top`` most probable tokens per step."""

_INT_SETTINGS = ("tracked_top", "tracked_log_spaced", "monitor_per_epoch", "monitor_tokens", "position_min_tokens",
                 "position_span", "position_curve_max", "eos_window", "analysis_batch_size",
                 "continuation_max_len", "continuation_top")


# ------------------------------------------------------------------------------------ config


@dataclass(frozen=True)
class TemperatureConfig:
    """One model of Chapter 9's suite (09_temperature) and how it is evaluated (Contextual Temperature
    (2020) Sec. 4).

    ``model``: the :class:`~nmst_lib.experiments.config.ExperimentConfig` that trains it (an RNN/LSTM,
    with ``temperature`` and/or ``mixtures`` > 1) and fixes its r_nt(L) decodes (``model.decoders``,
    ``decode_max_len``, the contexts of Chapter 6). ``evaluation``: a dict of the settings of
    :data:`TEMPERATURE_EVALUATION_DEFAULTS` (missing keys take the defaults; unknown keys are an
    error)."""

    model: ExperimentConfig
    evaluation: dict

    def __post_init__(self):
        if not isinstance(self.model, ExperimentConfig):
            raise TypeError(f"model must be an ExperimentConfig (make_config(...)), got {type(self.model).__name__}")
        model = validate_config(self.model)
        if model.arch == "gpt2":
            raise ValueError("Chapter 9's experiments train RNN/LSTM models (contextual temperature is implemented "
                             "for RNNLM/LSTMLM); use arch rnn or lstm")
        object.__setattr__(self, "model", model)
        if not isinstance(self.evaluation, dict):
            raise TypeError(f"evaluation must be a dict of settings (keys: {', '.join(TEMPERATURE_EVALUATION_DEFAULTS)}), "
                            f"got {type(self.evaluation).__name__}")
        unknown = set(self.evaluation) - set(TEMPERATURE_EVALUATION_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown evaluation settings {sorted(unknown)}; known: "
                             f"{', '.join(TEMPERATURE_EVALUATION_DEFAULTS)}")
        ev = {**TEMPERATURE_EVALUATION_DEFAULTS, **self.evaluation}
        for name in _INT_SETTINGS:
            ev[name] = check_positive_int(ev[name], name)
        for name in ("monitor_seed", "continuation_contexts"):
            v = ev[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
        c = ev["confidence"]
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0.0 < c < 1.0:
            raise ValueError(f"confidence must be a number in (0, 1), e.g. 0.95, got {c!r}")
        ev["confidence"] = float(c)
        object.__setattr__(self, "evaluation", ev)

    @property
    def key(self) -> str:
        """The model's key, e.g. ``cpu-lstm-va-ct-sig-a1-b0.5-seed0`` (file name of its result)."""
        return self.model.key

    @property
    def label(self) -> str:
        """Short label of the model, e.g. ``CT-VA+LSTM (sigmoid a=1 b=0.5)``."""
        return self.model.label

    @property
    def has_temperature(self) -> bool:
        """True when the model has a contextual temperature (False for the plain MoS model)."""
        return self.model.temperature is not None

    def describe(self) -> str:
        """One line: label, decoders, r_nt horizon."""
        return f"{self.label}; decoders {','.join(self.model.decoders)}; L = {self.model.decode_max_len}"

    def to_dict(self) -> dict:
        """``{"model": model.to_dict(), "evaluation": evaluation}``."""
        return {"model": self.model.to_dict(), "evaluation": dict(self.evaluation)}

    def replace(self, **changes) -> "TemperatureConfig":
        """A validated copy with ``changes`` applied (``model=...``, ``evaluation=...``)."""
        return replace(self, **changes)


def temperature_config_hash(config: TemperatureConfig) -> str:
    """sha256 (16 hex digits) of the canonical JSON of ``config`` (model and evaluation) and the
    Chapter 9 (09_temperature) result schema version: equal hashes = the same numbers."""
    if not isinstance(config, TemperatureConfig):
        raise TypeError(f"expected a TemperatureConfig, got {type(config).__name__}")
    return canonical_hash({"schema": _TEMPERATURE_SCHEMA_VERSION, "config": config.to_dict()})


def temperature_config_from_dict(d: dict) -> TemperatureConfig:
    """Inverse of :meth:`TemperatureConfig.to_dict` (Chapter 9, 09_temperature)."""
    if not isinstance(d, dict) or set(d) != {"model", "evaluation"}:
        raise ValueError("a temperature config dict has exactly the keys 'model' and 'evaluation'")
    return TemperatureConfig(model=config_from_dict(d["model"]), evaluation=dict(d["evaluation"]))


_SUITE_EVALUATION = {
    "quick": dict(monitor_per_epoch=4, monitor_tokens=1000, position_curve_max=40, eos_window=15,
                  continuation_contexts=2, continuation_max_len=20, tracked_top=20, tracked_log_spaced=10),
    "cpu": dict(),
    "paper": dict(),
}
_SUITE_DECODERS = {"quick": ("greedy", "top-2"), "cpu": CT_DECODERS, "paper": CT_DECODERS}


def temperature_suite_configs(profile: str) -> list[TemperatureConfig]:
    """The models of Chapter 9 (09_temperature) at ``profile``, in run order (see the module
    docstring): CT-VA sigmoid + LS; CT-NMST (eps = the profile's featured eps) sigmoid + LS; CT-VA
    sigmoid without LS; CT-VA sigmoid with the literal eq. 7 LS; CT-VA power-tanh lambda 4 + LS; CT-VA
    shifted-tanh lambda 3 + LS; CT-VA softmax + LS; MoS M = 3; CT-MoS M = 3 sigmoid + LS (Contextual
    Temperature (2020) eq. 5-7, Tables 3-4); CT-VA sigmoid with (a, b) = (1/2, 1) + LS (range
    [1/2, 3/2], starting from T = 1). "LS" is the loss scaling of Sec. 3.3 with its factor
    detached (``detach_loss_scale``: a constant weight per position, the gradient the paper's own softmax
    normalisation gives, whose mean temperature is constant); the literal eq. 7, whose factor gradient
    pushes every sigmoid temperature to its floor a/b, is the fourth model, for Table 4.

    Training: :func:`~nmst_lib.experiments.config.make_config` (``profile``, ``"lstm"``) plus the
    temperature fields (rank ``hidden // 2``), i.e. at ``cpu`` Chapter 6's cpu LSTM. Decoding: the
    first two get :data:`CT_DECODERS` (quick: greedy, top-2), the others greedy, on Chapter 6's
    decoding contexts (cpu: 128 for greedy, the first 64 for the others; L = 1e4)."""
    if profile not in _SUITE_EVALUATION:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    eps = FEATURED_EPS[profile]
    sig = dict(temperature="sigmoid")
    ls = dict(loss_scaling=True, detach_loss_scale=True)
    models = [
        ("va", None, dict(sig, **ls), True),
        ("nmst", eps, dict(sig, **ls), True),
        ("va", None, dict(sig, loss_scaling=False), False),
        ("va", None, dict(sig, loss_scaling=True), True),  # the literal eq. 7 (Table 4)
        ("va", None, dict(temperature="power-tanh", **ls), False),
        ("va", None, dict(temperature="shifted-tanh", **ls), False),
        ("va", None, dict(temperature="softmax", **ls), False),
        ("va", None, dict(mixtures=3), False),
        ("va", None, dict(sig, mixtures=3, **ls), False),
        # the sigmoid with (a, b) = (1/2, 1): range [1/2, 3/2], starting from T = 1 instead of 3 (a diagnostic:
        # the paper's [2, 4] needs logits 2-4 times larger than a plain softmax's, which takes epochs to learn)
        ("va", None, dict(sig, temperature_a=0.5, temperature_b=1.0, **ls), True),
    ]
    out = []
    for head, e, fields_, featured in models:
        decoders = _SUITE_DECODERS[profile] if featured else ("greedy",)
        model = make_config(profile, "lstm", head, e, 0, decoders=decoders, **fields_)
        out.append(TemperatureConfig(model=model, evaluation=dict(_SUITE_EVALUATION[profile])))
    # more seeds of the last model (greedy only), against the seed spread of Chapter 6's three VA LSTMs
    for seed in CENTRED_EXTRA_SEEDS[profile]:
        out.append(out[-1].replace(model=out[-1].model.replace(seed=seed, decoders=("greedy",))))
    return out


def baseline_configs(profile: str) -> list[ExperimentConfig]:
    """Chapter 6's plain LSTM VA and NMST (eps = the profile's featured eps) configs that Chapter 9
    (09_temperature) compares with: seeds 0-2 at ``cpu`` (Chapter 6's committed results; seed 0 has
    every decoder), seed 0 at ``quick``, seeds 0-9 at ``paper``. Exactly the configs of
    :func:`nmst_lib.experiments.runs.suite_configs` (same hashes)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    seeds = {"quick": (0,), "cpu": (0, 1, 2), "paper": tuple(range(10))}[profile]
    eps = FEATURED_EPS[profile]
    return ([make_config(profile, "lstm", "va", None, s) for s in seeds]
            + [make_config(profile, "lstm", "nmst", eps, s) for s in seeds])


def load_baselines(profile: str = "cpu", results_dir=None) -> list[StoredResult]:
    """The stored Chapter 6 results of :func:`baseline_configs` (CURRENT, STALE or MISSING; nothing
    is run), read with Chapter 6's loader :func:`nmst_lib.experiments.results.load_result`. Chapter 9
    (09_temperature)."""
    return [load_result(c, results_dir) for c in baseline_configs(profile)]


# ---------------------------------------------------------------------------------- analyses


def frequency_ranks(data: D.SequenceData) -> torch.Tensor:
    """Token ids ordered by decreasing frequency in ``data`` (every stored token: contexts,
    continuations, eos; ties by smaller id), ``LongTensor[V]``: ``frequency_ranks(train)[r]`` is the
    id of rank r (0 = most frequent). Contextual Temperature (2020) Fig. 1a and 3a rank tokens by
    frequency; Chapter 9 (09_temperature)."""
    if not isinstance(data, D.SequenceData):
        raise TypeError(f"data must be a nmst_lib.data.SequenceData, got {type(data).__name__}")
    counts = torch.bincount(data.tokens, minlength=len(data.vocab))
    return torch.sort(-counts, stable=True).indices


def tracked_token_ids(ranks: torch.Tensor, *, top: int = 100, log_spaced: int = 60, eos_id: int | None = None,
                      unk_id: int | None = None, exclude=()) -> list[int]:
    """The tokens whose temperature is logged over training (Contextual Temperature (2020) Fig. 1a;
    Chapter 9, 09_temperature): the ids of frequency ranks 0..``top``-1, then ``log_spaced``
    log-spaced ranks from ``top`` to the rarest, then ``eos_id`` and ``unk_id`` (when given and not
    already in), in that order, without the ids in ``exclude`` (e.g. ``<pad>``, never a target)."""
    ranks = torch.as_tensor(ranks, dtype=torch.long)
    if ranks.dim() != 1 or ranks.numel() == 0:
        raise ValueError(f"ranks must be a non-empty 1-D tensor of token ids (frequency_ranks), got shape "
                         f"{tuple(ranks.shape)}")
    top = check_positive_int(top, "top")
    if isinstance(log_spaced, bool) or not isinstance(log_spaced, int) or log_spaced < 0:
        raise ValueError(f"log_spaced must be an integer >= 0, got {log_spaced!r}")
    excluded = {int(i) for i in exclude}
    n = ranks.numel()
    picks = list(range(min(top, n)))
    if log_spaced and n > top:
        spaced = np.unique(np.round(np.logspace(math.log10(top), math.log10(n - 1), log_spaced)).astype(np.int64))
        picks += [int(r) for r in spaced if top <= r < n]
    ids = [int(ranks[r]) for r in picks]
    for extra in (eos_id, unk_id):
        if extra is not None:
            ids.append(int(extra))
    out, seen = [], set()
    for i in ids:
        if i not in seen and i not in excluded:
            out.append(i)
            seen.add(i)
    return out


def monitor_subset(data: D.SequenceData, max_tokens: int, seed: int = 0) -> D.SequenceData:
    """A fixed random subset of the lines of ``data`` (drawn with ``seed``) with at most
    ``max_tokens`` scored tokens (at least one line): where :func:`temperature_monitor` measures the
    temperatures during training (Chapter 9, 09_temperature)."""
    if not isinstance(data, D.SequenceData):
        raise TypeError(f"data must be a nmst_lib.data.SequenceData, got {type(data).__name__}")
    max_tokens = check_positive_int(max_tokens, "max_tokens")
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(int(seed)))
    kept = int((torch.cumsum(data.continuation_lengths[order], 0) <= max_tokens).sum())
    return data.subset(order[:max(kept, 1)])


def _check_model(model) -> None:
    if not callable(getattr(model, "temperatures", None)):
        raise TypeError(f"model must have a contextual temperature (a RecurrentLM with a ContextualHead: "
                        f"model.temperatures(inputs)), got {type(model).__name__}")


def _check_data(data) -> None:
    if not isinstance(data, D.SequenceData):
        raise TypeError(f"data must be a nmst_lib.data.SequenceData, got {type(data).__name__}")


def _temperature_batches(model, data: D.SequenceData, batch_size: int):
    """Yield ``(indices, batch, tau [B, T, V])`` over ``data`` in length buckets, eval mode, no
    gradients, the model's mode restored afterwards (Chapter 9, 09_temperature)."""
    batch_size = check_positive_int(batch_size, "batch_size")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for indices in D.bucket_batches(data.lengths, batch_size):
                batch = D.make_batch(data, indices).to(model.device)
                yield indices, batch, model.temperatures(batch.inputs).float()
    finally:
        model.train(was_training)


def _first_tokens(data: D.SequenceData, max_tokens: int | None) -> D.SequenceData:
    if max_tokens is None:
        return data
    max_tokens = check_positive_int(max_tokens, "max_tokens")
    kept = int((torch.cumsum(data.continuation_lengths, 0) <= max_tokens).sum())
    return data.subset(torch.arange(max(kept, 1)))


def token_temperatures(model, data: D.SequenceData, max_tokens: int | None = None, batch_size: int = 16) -> torch.Tensor:
    """Mean temperature of every vocabulary entry over the scored positions of ``data`` (continuation
    tokens and eos, under teacher forcing), ``float64 [V]``: tau_v averaged over contexts, the quantity
    plotted per token in Contextual Temperature (2020) Fig. 1a (at one point of training). With
    ``max_tokens`` only the first lines of ``data`` up to that many scored tokens (at least one line).
    Chapter 9 (09_temperature)."""
    _check_model(model)
    _check_data(data)
    data = _first_tokens(data, max_tokens)
    total, count = None, 0
    for _, batch, tau in _temperature_batches(model, data, batch_size):
        scored = batch.target_mask
        part = tau[scored].sum(0, dtype=torch.float64)
        total = part if total is None else total + part
        count += int(scored.sum())
    return (total / count).cpu()


def temperature_monitor(data: D.SequenceData, tracked_ids, batch_size: int = 16) -> Callable:
    """The ``monitor`` of :func:`nmst_lib.experiments.trainer.train` for Chapter 9 (09_temperature;
    Contextual Temperature (2020) Fig. 1a): a function of the model returning ``{"tau": [mean tau of
    each tracked token over the scored positions of data], "mean_all": mean over all V entries,
    "mean_tracked": mean over the tracked ones}`` (raw floats, full precision). ``data`` is a fixed
    subset (:func:`monitor_subset`). One teacher-forced pass of the temperature head over ``data``
    (no perplexity: the per-epoch validation perplexity is in the training history)."""
    _check_data(data)
    ids = torch.as_tensor(list(tracked_ids), dtype=torch.long)
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError("tracked_ids must be a non-empty list of token ids (tracked_token_ids)")
    batch_size = check_positive_int(batch_size, "batch_size")

    def monitor(model) -> dict:
        means = token_temperatures(model, data, batch_size=batch_size)
        return {"tau": means[ids].tolist(), "mean_all": float(means.mean()), "mean_tracked": float(means[ids].mean())}

    return monitor


def _z(confidence: float) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a number in (0, 1), e.g. 0.95, got {confidence!r}")
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


def _band(values: torch.Tensor, z: float) -> dict:
    """Mean, sample std and normal confidence band over the rows of ``values [n, P]`` (NaN = no
    value), per column; None where a column has no value (std and band need 2)."""
    v = values.double()
    have = ~torch.isnan(v)
    n = have.sum(0)
    filled = torch.where(have, v, torch.zeros((), dtype=v.dtype))
    mean = filled.sum(0) / n.clamp(min=1)
    dev = torch.where(have, v - mean, torch.zeros((), dtype=v.dtype))
    var = (dev ** 2).sum(0) / (n - 1).clamp(min=1)
    std = var.sqrt()
    half = z * std / n.clamp(min=1).double().sqrt()

    def col(x, need):
        return [float(a) if int(k) >= need else None for a, k in zip(x.tolist(), n.tolist())]

    return {"mean": col(mean, 1), "std": col(std, 2), "ci_low": col(mean - half, 2), "ci_high": col(mean + half, 2)}


def temperature_by_position(model, data: D.SequenceData, *, min_tokens: int = 15, span: int = 5,
                            max_position: int = 100, confidence: float = 0.95, batch_size: int = 16) -> dict:
    """Mean temperature against position in the line (Contextual Temperature (2020) Fig. 1b and Sec. 4.5,
    "Average Temperature Over Word Positions"; Chapter 9, 09_temperature), under teacher forcing.

    At every prediction the temperature vector is summarised twice: ``mean_over_vocabulary`` (the mean of
    tau over all V entries, the paper's "average temperature") and ``target_token`` (tau of the token that
    comes next). Position h = 1, 2, ... is the prediction made after h tokens of the line (it predicts
    token h + 1; the line's own start, not the continuation task's context, is where history begins);
    eos's prediction is left out (see :func:`eos_temperature_by_distance`).

    ``protocol``: the paper's protocol on the lines with at least ``min_tokens`` predicted tokens: their
    first ``span``, middle ``span`` and last ``span`` predicted tokens, each line one observation;
    ``curve``: every position 1..``max_position`` over the lines that reach it. Each summary holds the mean,
    sample std, and the ``confidence`` normal band mean +- z std / sqrt(n) over lines, with the counts.
    Tensor ops over whole batches; no loop over tokens."""
    _check_model(model)
    _check_data(data)
    min_tokens = check_positive_int(min_tokens, "min_tokens")
    span = check_positive_int(span, "span")
    max_position = check_positive_int(max_position, "max_position")
    if 3 * span > min_tokens:
        raise ValueError(f"3 * span ({3 * span}) must not exceed min_tokens ({min_tokens}): the first, middle and "
                         "last span tokens of a line must not overlap (the paper uses span 5, min_tokens 15)")
    z = _z(confidence)
    n_lines = len(data)
    words = data.lengths - 2  # predicted tokens of each line, eos excluded
    curve = {k: torch.full((n_lines, max_position), float("nan"), dtype=torch.float64)
             for k in ("mean_over_vocabulary", "target_token")}
    eligible = words >= min_tokens
    proto = {k: torch.full((n_lines, 3 * span), float("nan"), dtype=torch.float64)
             for k in ("mean_over_vocabulary", "target_token")}
    offsets = torch.arange(span)
    for indices, batch, tau in _temperature_batches(model, data, batch_size):
        values = {"mean_over_vocabulary": tau.mean(-1, dtype=torch.float64).cpu(),
                  "target_token": tau.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1).double().cpu()}
        w = words[indices]
        cols = torch.arange(min(max_position, values["target_token"].shape[1]))
        inside = cols < w[:, None]
        for k, v in values.items():
            block = torch.where(inside, v[:, cols], torch.tensor(float("nan"), dtype=torch.float64))
            curve[k][indices[:, None], cols[None, :]] = block
        keep = eligible[indices]
        if bool(keep.any()):
            wk = w[keep]
            starts = torch.stack([torch.zeros_like(wk), (wk - span) // 2, wk - span], 1)  # [n, 3]
            where = (starts[:, :, None] + offsets).reshape(wk.shape[0], 3 * span)
            for k, v in values.items():
                proto[k][indices[keep]] = v[keep].gather(1, where)
    labels = [f"{part} {i + 1}" for part in ("first", "middle", "last") for i in range(span)]
    n_proto = int(eligible.sum())
    return {
        "confidence": float(confidence),
        "protocol": {"min_predicted_tokens": min_tokens, "span": span, "num_lines": n_proto, "labels": labels,
                     **{k: _band(v[eligible], z) for k, v in proto.items()}},
        "curve": {"position": list(range(1, max_position + 1)),
                  "count": (~torch.isnan(curve["target_token"])).sum(0).tolist(),
                  **{k: _band(v, z) for k, v in curve.items()}},
        "num_lines": n_lines,
        "eos_excluded": True,
    }


def eos_temperature_by_distance(model, data: D.SequenceData, window: int = 30, *, confidence: float = 0.95,
                                batch_size: int = 16) -> dict:
    """eos's temperature against the distance to the line's true end (Chapter 9, 09_temperature; the
    eos analysis of issue 12, after Contextual Temperature (2020) Sec. 4.5 and Table 6), under teacher
    forcing: distance d = 0 is the prediction whose target is eos, d = 1 the one before (the last word),
    ... up to ``window`` - 1. For each d: tau_eos (``eos``) and, for contrast, the mean temperature of all
    V entries at the same predictions (``mean_over_vocabulary``); mean, sample std and ``confidence``
    normal band over the lines that reach that distance, with counts. Tensor ops; no loop over tokens."""
    _check_model(model)
    _check_data(data)
    window = check_positive_int(window, "window")
    z = _z(confidence)
    eos = int(model.eos_id)
    n_lines = len(data)
    mats = {k: torch.full((n_lines, window), float("nan"), dtype=torch.float64)
            for k in ("eos", "mean_over_vocabulary")}
    d = torch.arange(window)
    for indices, batch, tau in _temperature_batches(model, data, batch_size):
        last = batch.lengths.cpu() - 2  # the index of the eos prediction
        pos = last[:, None] - d[None, :]
        ok = pos >= 0
        safe = pos.clamp(min=0)
        values = {"eos": tau[..., eos].double().cpu(), "mean_over_vocabulary": tau.mean(-1, dtype=torch.float64).cpu()}
        for k, v in values.items():
            mats[k][indices] = torch.where(ok, v.gather(1, safe), torch.tensor(float("nan"), dtype=torch.float64))
    return {"confidence": float(confidence), "distance": d.tolist(), "eos_id": eos,
            "count": (~torch.isnan(mats["eos"])).sum(0).tolist(), "num_lines": n_lines,
            **{k: _band(v, z) for k, v in mats.items()}}


@torch.no_grad()
def greedy_continuations(model, contexts: torch.Tensor, vocab, *, max_len: int = 40, top: int = 4) -> list[dict]:
    """Greedy continuations of ``contexts [n, k]`` with, at every step, the chosen token, its
    probability and temperature, eos's probability and temperature, and the ``top`` most probable tokens
    with theirs (Contextual Temperature (2020) Tables 5-6's case studies; Chapter 9, 09_temperature).
    Decoded by :func:`nmst_lib.decoding.decode`, then read back under teacher forcing (the same
    distributions as the decoding steps). Strings are raw vocabulary entries (the chapter escapes them)."""
    from ..decoding import decode

    _check_model(model)
    contexts = torch.as_tensor(contexts, dtype=torch.long)
    if contexts.dim() != 2 or contexts.shape[0] == 0 or contexts.shape[1] == 0:
        raise ValueError(f"contexts must be LongTensor[n, k] with n, k >= 1, got shape {tuple(contexts.shape)}")
    max_len = check_positive_int(max_len, "max_len")
    top = check_positive_int(top, "top")
    was_training = model.training
    model.eval()
    try:
        gen = decode(model, contexts, "greedy", max_len=max_len)
        n, k = contexts.shape
        steps = gen.tokens.shape[1]
        chosen = gen.tokens.clamp(min=0).cpu()
        inputs = torch.cat([contexts, chosen[:, :steps - 1]], 1).to(model.device)
        mask = (torch.arange(inputs.shape[1], device=model.device) < k - 1).expand(n, -1)
        log_probs = model(inputs, mask)[:, k - 1:].double().cpu()
        tau = model.temperatures(inputs)[:, k - 1:].double().cpu()
    finally:
        model.train(was_training)
    eos = int(model.eos_id)
    p = log_probs.exp()
    p_chosen = p.gather(-1, chosen[..., None]).squeeze(-1)
    tau_chosen = tau.gather(-1, chosen[..., None]).squeeze(-1)
    top_p, top_ids = p.topk(min(top, p.shape[-1]), dim=-1)
    top_tau = tau.gather(-1, top_ids)
    out = []
    for i in range(n):
        length = int(gen.lengths[i])
        out.append({
            "context": vocab.decode(contexts[i]),
            "tokens": vocab.decode(chosen[i, :length]),
            "token_ids": chosen[i, :length].tolist(),
            "p": p_chosen[i, :length].tolist(),
            "tau": tau_chosen[i, :length].tolist(),
            "p_eos": p[i, :length, eos].tolist(),
            "tau_eos": tau[i, :length, eos].tolist(),
            "top_tokens": [vocab.decode(row) for row in top_ids[i, :length]],
            "top_p": top_p[i, :length].tolist(),
            "top_tau": top_tau[i, :length].tolist(),
            "length": length,
            "terminated": bool(gen.terminated[i]),
        })
    return out


# ------------------------------------------------------------------------------------ store


def temperature_result_path(config: TemperatureConfig, results_dir=None) -> Path:
    """``<results_dir>/temperature/<key>.json`` (``results_dir`` defaults to
    :func:`~nmst_lib.experiments.results.default_results_dir`). Chapter 9 (09_temperature)."""
    return TEMPERATURE.path(config, results_dir)


def load_temperature_result(config: TemperatureConfig, results_dir=None) -> StoredResult:
    """The stored result of ``config`` with status CURRENT / STALE / MISSING, as Chapter 6's
    :func:`nmst_lib.experiments.results.load_result`: with ``results_dir`` only that folder;
    without it the write folder first, then the results published with the library
    (``nmst_lib/published_results/temperature``). Chapter 9 (09_temperature)."""
    return TEMPERATURE.load(TEMPERATURE.check(config), results_dir)


def load_temperature_results(profile: str = "cpu", results_dir=None) -> list[StoredResult]:
    """The stored results of every model of ``profile`` (CURRENT, STALE or MISSING; nothing is
    run), in suite order. Chapter 9 (09_temperature) reads its numbers through this."""
    return TEMPERATURE.load_all(profile, results_dir)


# ------------------------------------------------------------------------------ evaluation


def _monitor_every(config: TemperatureConfig, data) -> int:
    """Optimizer steps between monitor records: the batches of epoch 1 / ``monitor_per_epoch``, rounded
    up (one optimizer step per batch)."""
    m = config.model
    batches = D.bucket_batches(data.train.lengths, m.batch_size, max_tokens=m.max_batch_tokens, shuffle=True,
                               generator=D.epoch_generator(m.seed, 0))
    return max(1, math.ceil(len(batches) / config.evaluation["monitor_per_epoch"]))


def _tracking(config: TemperatureConfig, data) -> dict:
    ev = config.evaluation
    vocab = data.vocab
    ranks = frequency_ranks(data.train)
    ids = tracked_token_ids(ranks, top=ev["tracked_top"], log_spaced=ev["tracked_log_spaced"], eos_id=vocab.eos_id,
                            unk_id=vocab.unk_id, exclude=(vocab.pad_id,))
    rank_of = torch.empty_like(ranks)
    rank_of[ranks] = torch.arange(ranks.numel())
    counts = torch.bincount(data.train.tokens, minlength=len(vocab))
    return {"ids": ids, "strings": vocab.decode(ids), "frequency_ranks": rank_of[ids].tolist(),
            "train_counts": counts[ids].tolist(), "train_tokens": data.train.num_tokens,
            "rule": f"frequency ranks 0-{ev['tracked_top'] - 1} of the training tokens, {ev['tracked_log_spaced']} "
                    "log-spaced ranks down to the rarest, eos and <unk> (<pad> never a target: left out)"}


def _history_with_temperature(history: list[dict], log: list[dict]) -> list[dict]:
    """Chapter 6's per-epoch history with ``mean_temperature`` (mean over all V entries on the monitor
    subset at the end of the epoch) added from the monitor log."""
    at_epoch = {int(r["epoch"]): r["mean_all"] for r in log if float(r["epoch"]).is_integer()}
    return [{**h, "mean_temperature": at_epoch.get(int(h["epoch"]))} for h in history]


def evaluate_temperature(run: TrainedRun, config: TemperatureConfig, *, tracking: dict | None = None,
                         monitor_every: int | None = None, progress: bool = False,
                         log: Callable[[str], None] | None = None, command: str | None = None,
                         started: float | None = None) -> dict:
    """Everything a Chapter 9 (09_temperature) result holds for a trained model: Chapter 6's evaluation
    (:func:`nmst_lib.experiments.runs.evaluate_trained`: perplexities, history, r_nt(L) of every decoder
    on Chapter 6's contexts, eos probabilities, data, seeds, provenance) plus, for a model with a
    temperature, the monitor log of the tracked tokens (Fig. 1a), the final mean temperature of every
    vocabulary entry on the validation split with its training count (Fig. 3a), :func:`temperature_by_position`
    (Fig. 1b), :func:`eos_temperature_by_distance` and :func:`greedy_continuations` on the validation
    split, and the per-epoch mean temperature in the history."""
    from .runs import decoding_context_indices, evaluate_trained

    say = log or (lambda msg: None)
    model, data, ev, m = run.model, run.data, config.evaluation, config.model
    model.eval()
    base = evaluate_trained(run, progress=progress, log=log, command=command or command_line(), started=None)
    decode_seconds = sum(r["wall_seconds"] for r in base["decoding"].values())
    t0 = time.perf_counter()
    head = model.head
    rng = getattr(getattr(head, "temperature", None), "range", None)
    result = {
        "model": {"label": config.label, "head": m.head, "eps": m.eps, "temperature": m.temperature,
                  "a": m.temperature_a, "b": m.temperature_b, "lambda": m.temperature_lambda,
                  "rank": m.temperature_rank, "mixtures": m.mixtures, "loss_scaling": m.loss_scaling,
                  "detach_loss_scale": m.detach_loss_scale,
                  "range": list(rng) if rng is not None else None, "head_name": getattr(head, "name", None),
                  # with an ST/NMST base the eos logit is not tempered: its tau column exists but is unused
                  "eos_tempered": m.temperature is not None and m.head == "va",
                  "training_hash": training_hash(m), "checkpoint": Path(run.checkpoint).name},
        **base,
    }
    result["metrics"] = dict(result["metrics"])
    # with loss scaling the history's train_loss is the scaled objective (NLL x mean tau); perplexities never are
    result["metrics"]["train_loss_is_scaled"] = bool(m.loss_scaling)
    if config.has_temperature:
        tracking = tracking if tracking is not None else _tracking(config, data)
        result["metrics"]["history"] = _history_with_temperature(run.history, run.monitor_log)
        records = run.monitor_log
        result["monitor"] = {
            **tracking, "monitor_every": monitor_every, "monitor_tokens": ev["monitor_tokens"],
            "subset_scored_tokens": monitor_subset(data.valid, ev["monitor_tokens"], ev["monitor_seed"]).num_target_tokens,
            "complete": bool(records) and records[0]["step"] == 0,
            "records": records,
        }
        say(f"[temperature] {config.key}: token, position and eos analyses on {len(data.valid)} validation lines")
        means = token_temperatures(model, data.valid, batch_size=ev["analysis_batch_size"])
        result["token_temperatures"] = {
            "split": "valid", "scored_tokens": data.valid.num_target_tokens, "mean_tau": means.tolist(),
            "train_counts": torch.bincount(data.train.tokens, minlength=len(data.vocab)).tolist(),
            "of": "mean temperature of every vocabulary id (index = id) over the scored validation positions of the "
                  "final model, and each id's count in the training tokens (Fig. 3a: temperature x frequency)"}
        result["positions"] = temperature_by_position(
            model, data.valid, min_tokens=ev["position_min_tokens"], span=ev["position_span"],
            max_position=ev["position_curve_max"], confidence=ev["confidence"], batch_size=ev["analysis_batch_size"])
        result["eos_temperature"] = eos_temperature_by_distance(model, data.valid, ev["eos_window"],
                                                                confidence=ev["confidence"],
                                                                batch_size=ev["analysis_batch_size"])
        idx = decoding_context_indices(m, data.valid)
        contexts = data.valid.contexts(idx[:ev["continuation_contexts"]])
        result["continuations"] = (greedy_continuations(model, contexts, data.vocab, max_len=ev["continuation_max_len"],
                                                        top=ev["continuation_top"])
                                   if ev["continuation_contexts"] else [])
    else:
        result["monitor"] = result["positions"] = result["eos_temperature"] = result["token_temperatures"] = None
        result["continuations"] = []
    analysis_seconds = time.perf_counter() - t0
    result["seeds"] = {**result["seeds"], "monitor_subset": ev["monitor_seed"]}
    result["provenance"] = {**result["provenance"], "decode_seconds": decode_seconds,
                            "analysis_seconds": analysis_seconds,
                            "wall_seconds": (time.perf_counter() - started) if started is not None else None}
    return result


def run_temperature(config: TemperatureConfig, *, results_dir=None, checkpoint_dir=None, resume: bool = True,
                    device=None, progress: bool = True, log: Callable[[str], None] | None = None,
                    command: str | None = None, checkpoint_every: int | None = None) -> StoredResult:
    """Train (or resume, or load the finished checkpoint of) ``config.model`` with the temperature monitor
    (:func:`temperature_monitor` on :func:`monitor_subset`, about ``monitor_per_epoch`` records per epoch;
    none for a model without temperature), evaluate it (:func:`evaluate_temperature`) and store the result
    atomically; returns it (status CURRENT). Chapter 9 (09_temperature)."""
    if not isinstance(config, TemperatureConfig):
        raise TypeError(f"config must be a TemperatureConfig (see temperature_suite_configs), got "
                        f"{type(config).__name__}")
    started = time.perf_counter()
    data = prepare_data(config.model)
    ev = config.evaluation
    monitor = every = tracking = None
    if config.has_temperature:
        tracking = _tracking(config, data)
        subset = monitor_subset(data.valid, ev["monitor_tokens"], ev["monitor_seed"])
        monitor = temperature_monitor(subset, tracking["ids"], batch_size=ev["analysis_batch_size"])
        every = _monitor_every(config, data)
    run = train(config.model, checkpoint_dir=checkpoint_dir, resume=resume, data=data, device=device,
                progress=progress, log=log, checkpoint_every=checkpoint_every, monitor=monitor, monitor_every=every)
    result = evaluate_temperature(run, config, tracking=tracking, monitor_every=every, progress=progress, log=log,
                                  command=command, started=started)
    TEMPERATURE.save(result, config, results_dir)
    return load_temperature_result(config, results_dir)


def run_temperature_suite(profile: str, *, only=None, force: bool = False, results_dir=None,
                          checkpoint_dir=None, device=None, progress: bool = True,
                          log: Callable[[str], None] | None = print, command: str | None = None,
                          jobs: int = 1, threads: int | None = None) -> list[StoredResult]:
    """Run every model of :func:`temperature_suite_configs` (``only``: comma-separated key
    substrings or a predicate, :func:`~nmst_lib.experiments.family.select_configs`) whose
    stored result is not CURRENT (all of them with ``force``, training from scratch), resuming
    training from checkpoints; returns the stored results of the selected models in order: the
    ``temperature`` family through :func:`~nmst_lib.experiments.family.run_family_suite`.
    Every result file is written atomically, so processes running disjoint ``only`` subsets can
    share a results folder. Chapter 9 (09_temperature)."""
    return run_family_suite(TEMPERATURE, profile, only=only, force=force,
                            results_dir=results_dir, checkpoint_dir=checkpoint_dir,
                            device=device, progress=progress, log=log, command=command,
                            jobs=jobs, threads=threads)


TEMPERATURE = register(Family(
    name="temperature", title="temperature", chapter="09_temperature",
    schema=TEMPERATURE_RESULT_SCHEMA, folder=TEMPERATURE_FOLDER, config_type=TemperatureConfig,
    configs=temperature_suite_configs, config_hash=temperature_config_hash,
    config_from_dict=temperature_config_from_dict, run=run_temperature,
    describe=TemperatureConfig.describe,
    missing_hint="run it (run_temperature or `python -m nmst_lib suite temperature`)"))
"""Chapter 9's family (09_temperature): contextual-temperature and MoS LSTMs, results in
``temperature/``. Not ``distributed``: the temperature monitor of training runs in one
process."""


# --------------------------------------------------------------------------------- tables


def _records(stored) -> list[dict]:
    return current_records(stored)


def _ct_row(rec: dict) -> dict:
    m, met = rec["model"], rec["metrics"]
    return {"model": m["label"], "key": rec["key"], "params": met["num_parameters"], "val ppl": met["val_ppl"],
            "test ppl": met["test_ppl"], "seeds": 1}


def _spread(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) > 1 else None


def _baseline_rows(baselines) -> list[dict]:
    groups: dict[str, list[dict]] = {}
    for rec in _records(baselines):
        name = config_from_dict(rec["config"]).label
        groups.setdefault(name, []).append(rec)
    rows = []
    for name, recs in groups.items():
        val = [r["metrics"]["val_ppl"] for r in recs]
        test = [r["metrics"]["test_ppl"] for r in recs]
        rows.append({"model": f"{name} (Chapter 6)", "key": ",".join(r["key"] for r in recs),
                     "params": recs[0]["metrics"]["num_parameters"], "val ppl": statistics.fmean(val),
                     "test ppl": statistics.fmean(test), "seeds": len(recs), "val ppl sd": _spread(val),
                     "test ppl sd": _spread(test)})
    return rows


def temperature_table_rows(stored, baselines=()) -> list[dict]:
    """Contextual Temperature (2020) Tables 1-2 analogue (Chapter 9, 09_temperature): one row per model,
    ``{"model", "key", "params", "val ppl", "test ppl", "seeds"}``, Chapter 6's plain VA and NMST LSTMs
    first (``baselines``: :func:`load_baselines`; mean over their seeds, with ``"val ppl sd"`` and
    ``"test ppl sd"``, the sample standard deviations), then every CT / MoS model of ``stored``
    (:func:`load_temperature_results`), its seeds averaged the same way (most have one seed; sd None).
    Non-current results are skipped."""
    groups: dict[str, list[dict]] = {}
    for rec in _records(stored):
        groups.setdefault(rec["model"]["label"], []).append(rec)
    rows = []
    for recs in groups.values():
        row = _ct_row(recs[0])
        if len(recs) > 1:
            val = [r["metrics"]["val_ppl"] for r in recs]
            test = [r["metrics"]["test_ppl"] for r in recs]
            row.update({"key": ",".join(r["key"] for r in recs), "val ppl": statistics.fmean(val),
                        "test ppl": statistics.fmean(test), "seeds": len(recs), "val ppl sd": _spread(val),
                        "test ppl sd": _spread(test)})
        rows.append(row)
    return _baseline_rows(baselines) + rows


def _seed(rec: dict) -> int:
    """The training seed of a stored CT result (its config's model seed)."""
    return int(rec.get("config", {}).get("model", {}).get("seed", 0))


def _hyper(m: dict) -> str:
    if m["temperature"] in ("sigmoid", "softmax"):
        return f"a={m['a']:g}, b={m['b']:g}"
    return f"lambda={m['lambda']:g}"


def normalisation_table_rows(stored) -> list[dict]:
    """Contextual Temperature (2020) Table 3 analogue (Chapter 9, 09_temperature): the CT-VA models with
    (detached) loss scaling and no mixture, one per normalisation, ``{"normalisation", "hyper-parameter",
    "range", "params", "val ppl", "test ppl", "key"}``; ``range`` is the head's [lo, hi]."""
    rows = []
    for rec in _records(stored):
        m = rec["model"]
        if (m["temperature"] is None or m["mixtures"] != 1 or m["head"] != "va" or not m["loss_scaling"]
                or not m.get("detach_loss_scale", False)):
            continue
        if _seed(rec) != 0:  # one run per normalisation, as in the paper's table
            continue
        rows.append({"normalisation": m["temperature"], "hyper-parameter": _hyper(m), "range": m["range"],
                     "params": rec["metrics"]["num_parameters"], "val ppl": rec["metrics"]["val_ppl"],
                     "test ppl": rec["metrics"]["test_ppl"], "key": rec["key"]})
    return rows


def loss_scaling_table_rows(stored) -> list[dict]:
    """Contextual Temperature (2020) Table 4 analogue (Chapter 9, 09_temperature): the sigmoid CT-VA
    models with the paper's (a, b) = (1, 1/2) (no mixture) without loss scaling, with the literal
    eq. 7 (the factor has a gradient) and with the factor detached, in that order, ``{"model", "loss scaling", "params", "val ppl",
    "test ppl", "key"}``; ``loss scaling`` is ``"none"``, ``"eq. 7 (factor has a gradient)"`` or
    ``"detached factor"``."""
    rows = []
    names = {(False, False): "none", (True, False): "eq. 7 (factor has a gradient)",
             (True, True): "detached factor"}
    order = list(names.values())
    for rec in _records(stored):
        m = rec["model"]
        if (m["temperature"] != "sigmoid" or m["mixtures"] != 1 or m["head"] != "va"
                or (m.get("a"), m.get("b")) != (1.0, 0.5)):
            continue
        mode = names[(bool(m["loss_scaling"]), bool(m.get("detach_loss_scale", False)))]
        rows.append({"model": m["label"], "loss scaling": mode,
                     "params": rec["metrics"]["num_parameters"], "val ppl": rec["metrics"]["val_ppl"],
                     "test ppl": rec["metrics"]["test_ppl"], "key": rec["key"]})
    return sorted(rows, key=lambda r: order.index(r["loss scaling"]))


def _curve_sources(stored, baselines) -> list[tuple[str, dict]]:
    out = []
    for rec in _records(baselines):
        cfg = config_from_dict(rec["config"])
        out.append((f"{cfg.label}, seed {cfg.seed} (Chapter 6)", rec))
    for rec in _records(stored):
        seed = _seed(rec)
        out.append((rec["model"]["label"] + (f", seed {seed}" if seed else ""), rec))
    return out


def temperature_rnt_rows(stored, baselines=()) -> list[dict]:
    """r_nt at the largest L of every decoder of the CT models against Chapter 6's VA and NMST LSTMs on
    the same contexts (Choi, Cho, Lee (2023) eq. 11; Chapter 9, 09_temperature): one row per (model,
    decoder), ``{"model", "key", "decoder", "L", "contexts", "r_nt(L)", "terminated", "mean length"}``,
    only decoders that some CT model ran (baselines' other decoders left out). Mean length is over the
    continuations that terminated (None when none did)."""
    recs = _curve_sources(stored, baselines)
    wanted = {d for _, rec in recs if rec.get("schema") == TEMPERATURE_RESULT_SCHEMA for d in rec["decoding"]}
    rows = []
    for name, rec in recs:
        for d, r in rec["decoding"].items():
            if d not in wanted:
                continue
            rows.append({"model": name, "key": rec["key"], "decoder": d, "L": r["max_len"],
                         "contexts": r["num_contexts"], "r_nt(L)": r["rnt"][-1],
                         "terminated": r["terminated_fraction"], "mean length": r["mean_terminated_length"]})
    return rows


def temperature_rnt_curves(stored, baselines=()) -> list[dict]:
    """r_nt(L) curves (Choi, Cho, Lee (2023) eq. 11) of every CT model and decoder and of Chapter 6's
    VA and NMST LSTMs under the same decoders: ``{"model", "key", "decoder", "L", "rnt", "max_len",
    "num_contexts"}`` per curve (Chapter 9, 09_temperature)."""
    recs = _curve_sources(stored, baselines)
    wanted = {d for _, rec in recs if rec.get("schema") == TEMPERATURE_RESULT_SCHEMA for d in rec["decoding"]}
    return [{"model": name, "key": rec["key"], "decoder": d, "L": r["L"], "rnt": r["rnt"], "max_len": r["max_len"],
             "num_contexts": r["num_contexts"]}
            for name, rec in recs for d, r in rec["decoding"].items() if d in wanted]

