"""Chapter 9 (09_temperature): the contextual-temperature experiments of *Contextual Temperature for
Language Modeling* (2020) at the book's profiles, on Chapter 6's WikiText-2 pipeline and LSTM.

Models (one LSTM each, trained by :func:`nmst_lib.experiments.trainer.train`, Chapter 6's loop, with the
output layer of ``nmst_lib.temperature.contextual_head``; at ``cpu`` Chapter 6's cpu LSTM, 2 x 128, trained by
the chapter's ``cpu`` recipe (:data:`~nmst_lib.experiments.config.CHAPTER_CPU_RECIPE`), plus the temperature
fields), in run order (:func:`temperature_suite_configs`):

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
    at ``cpu`` also seeds 1 and 2 (greedy only, :data:`EXTRA_SEEDS`), for a seed spread;
11. the plain VA LSTM with CT-VA's parameter count (a single-softmax analogue of the paper's MoS+
    baseline; seeds 0-2 at ``cpu``);
12. MoS+, M = 3: a mixture of softmaxes with CT-MoS's parameter count (the paper's Table 1
    baseline, a MoS enlarged to CT-MoS's size; seeds 0-2 at ``cpu``).

At ``cpu`` and ``paper`` (:data:`CT_MOS_ABLATIONS`), five more: CT-MoS with models 3-7's ablations
(no loss scaling, the literal eq. 7, power-tanh, shifted-tanh, softmax). The paper's Tables 3 and 4
compare CT-MoS models only (its only contextual-temperature model), so the page reads those tables
on these; models 3-7 are the same ablations on a single softmax, the book's own. Seeds 0-2 at
``cpu``, after every model above.

Every model that a perplexity finding of Chapter 9 compares (all but CT-NMST, whose findings are about
termination) has seeds 1 and 2 at ``cpu`` too, greedy only (:data:`EXTRA_SEEDS`), after the models
above, so that its noise band comes from seeds (issue 23).

Models 1, 2, 4 and 10 decode with greedy, top-2, top-4, nucleus-0.2 and nucleus-0.4, the others greedy only, on the
SAME validation contexts as Chapter 6 (128 for greedy, the first 64 for the others, L = 1e4 at cpu), by
Chapter 6's own code (:func:`nmst_lib.experiments.runs.evaluate_trained`), so r_nt(L) compares directly with
Chapter 6's committed VA and NMST LSTMs (:func:`baseline_configs`, :func:`load_baselines`).

Analyses (pure functions of a model and a :class:`nmst_lib.data.SequenceData`, batched tensor ops, no
loops over tokens) live in :mod:`nmst_lib.experiments.temperature_analysis` and are importable from here:
:func:`token_temperatures` (mean tau per vocabulary entry; logged over training by
:func:`temperature_monitor` for the tracked tokens of :func:`tracked_token_ids`, Fig. 1a),
:func:`temperature_by_position` (Fig. 1b), :func:`eos_temperature_by_distance`,
:func:`greedy_continuations` (Table 5's case studies), :func:`frequency_ranks`.

Results: one JSON per model, ``<results_dir>/temperature/<key>.json``, written atomically and stamped like
Chapters 6-8 (config and its hash, data description, seeds, code version, device, threads, command, date,
train/decode/analysis seconds); :func:`load_temperature_result`, :func:`load_temperature_results`; table
builders for :func:`nmst_lib.report.html_table`: :func:`temperature_table_rows` (Tables 1-2),
:func:`normalisation_table_rows` (Table 3), :func:`loss_scaling_table_rows` (Table 4),
:func:`temperature_rnt_rows` and :func:`temperature_rnt_curves` (r_nt(L) against VA and NMST).
CLI: ``python -m nmst_lib temperature --profile {quick,cpu,paper}``.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch

from .. import data as D
from .._validation import check_positive_int
from .config import (
    FEATURED_EPS,
    PROFILES,
    ExperimentConfig,
    canonical_hash,
    chapter_recipe,
    config_from_dict,
    make_config,
    suite_overrides,
    training_hash,
    validate_config,
)
from .config_sections import TemperatureOptions
from .family import Family, register, run_family_suite
from .preparation import prepare_data
from .results import (
    TEMPERATURE_FOLDER,
    StoredResult,
    command_line,
    current_records,
    load_result,
)
from .temperature_analysis import (
    eos_temperature_by_distance,
    frequency_ranks,
    greedy_continuations,
    monitor_subset,
    temperature_by_position,
    temperature_monitor,
    token_temperatures,
    tracked_token_ids,
    tracked_tokens_rule,
)
from .trainer import TrainedRun, train

__all__ = [
    "TEMPERATURE_RESULT_SCHEMA",
    "TEMPERATURE_EVALUATION_DEFAULTS",
    "CT_DECODERS",
    "EXTRA_SEEDS",
    "CT_MOS_ABLATIONS",
    "TEMPERATURE",
    "TemperatureConfig",
    "temperature_config_hash",
    "temperature_config_from_dict",
    "temperature_suite_configs",
    "vocabulary_size_of",
    "parameter_count",
    "parameter_matched_hidden",
    "baseline_configs",
    "load_baselines",
    "frequency_ranks",
    "tracked_token_ids",
    "tracked_tokens_rule",
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

EXTRA_SEEDS = {"quick": (), "cpu": (1, 2), "paper": (1, 2)}
"""Seeds besides 0 (greedy only) of every model of the temperature suite that a perplexity finding of
Chapter 9 (09_temperature) compares: CT-VA, its two loss-scaling ablations, the power-tanh,
shifted-tanh and softmax normalisations, MoS, CT-MoS, the parameter-matched VA and MoS+, and of the
centred (a, b) = (1/2, 1) model, which the page sets beside the matched VA beyond the paper; not
CT-NMST, whose findings are about termination. A difference between two
models is read against the spread of their seeds where both have two or more
(:func:`nmst_lib.findings.noise_band`)."""

CT_MOS_ABLATIONS = {"quick": False, "cpu": True, "paper": True}
"""Whether the suite has the CT-MoS models of the paper's Tables 3 and 4 (models 13-17 of the module
docstring): the paper's normalisation and loss-scaling ablations are of CT-MoS, so Chapter 9 reads
those tables on them. Left out of ``quick``, the tests' suite, for time (at ``cpu`` the stored CT-MoS
trained for 3.7 hours on one core, MoS+ for 1.8)."""

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
    with ``temperature`` and/or ``mixtures`` > 1, or the plain parameter-matched VA) and fixes its r_nt(L) decodes (``model.decoding.decoders``,
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
        t = self.model.temperature
        return t is not None and t.normalisation is not None

    def describe(self) -> str:
        """One line: label, decoders, r_nt horizon."""
        return f"{self.label}; decoders {','.join(self.model.decoding.decoders)}; L = {self.model.decoding.decode_max_len}"

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


def temperature_suite_configs(profile: str, **overrides) -> list[TemperatureConfig]:
    """The models of Chapter 9 (09_temperature) at ``profile``, in run order (see the module
    docstring; ``overrides``: option fields set for every model's training config on top of the
    suite's, :func:`~nmst_lib.experiments.config.suite_overrides`, the parameter-matched hidden
    size computed after them): CT-VA sigmoid + LS; CT-NMST (eps = the profile's featured eps) sigmoid + LS; CT-VA
    sigmoid without LS; CT-VA sigmoid with the literal eq. 7 LS; CT-VA power-tanh lambda 4 + LS; CT-VA
    shifted-tanh lambda 3 + LS; CT-VA softmax + LS; MoS M = 3; CT-MoS M = 3 sigmoid + LS (Contextual
    Temperature (2020) eq. 5-7, Tables 3-4); CT-VA sigmoid with (a, b) = (1/2, 1) + LS (range
    [1/2, 3/2], starting from T = 1), with :data:`EXTRA_SEEDS` more seeds; then the plain VA
    LSTM with CT-VA's parameter count (:func:`parameter_matched_hidden`: a hidden size about 1.27
    times CT-VA's), with as many seeds; then MoS+, the MoS with CT-MoS's parameter count
    (Contextual Temperature (2020), Table 1), with as many seeds; then the :data:`EXTRA_SEEDS` of every other model but
    CT-NMST, seed by seed, in the order above. "LS" is the loss scaling of Sec. 3.3 with its factor
    detached (``detach_loss_scale``: a constant weight per position, the gradient the paper's own softmax
    normalisation gives, whose mean temperature is constant); the literal eq. 7, whose factor gradient
    pushes every sigmoid temperature to its floor a/b, is the fourth model, for Table 4.

    Training: :func:`~nmst_lib.experiments.config.make_config` (``profile``, ``"lstm"``) plus the
    temperature fields (rank ``hidden // 2``), i.e. at ``cpu`` Chapter 6's cpu LSTM. Decoding: the
    first two get :data:`CT_DECODERS` (quick: greedy, top-2), the others greedy, on Chapter 6's
    decoding contexts (cpu: 128 for greedy, the first 64 for the others; L = 1e4)."""
    if profile not in _SUITE_EVALUATION:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    overrides = suite_overrides(overrides)
    overrides = {**chapter_recipe("temperature", profile), **overrides}
    eps = FEATURED_EPS[profile]
    sig = dict(temperature="sigmoid")
    ls = dict(loss_scaling=True, detach_loss_scale=True)
    # (head, eps, fields, featured: every decoder, compared by a perplexity finding: more seeds)
    models = [
        ("va", None, dict(sig, **ls), True, True),
        ("nmst", eps, dict(sig, **ls), True, False),
        ("va", None, dict(sig, loss_scaling=False), False, True),
        ("va", None, dict(sig, loss_scaling=True), True, True),  # the literal eq. 7 (Table 4)
        ("va", None, dict(temperature="power-tanh", **ls), False, True),
        ("va", None, dict(temperature="shifted-tanh", **ls), False, True),
        ("va", None, dict(temperature="softmax", **ls), False, True),
        ("va", None, dict(mixtures=3), False, True),
        ("va", None, dict(sig, mixtures=3, **ls), False, True),
        # the sigmoid with (a, b) = (1/2, 1): range [1/2, 3/2], starting from T = 1 instead of 3 (a diagnostic:
        # the paper's [2, 4] needs logits 2-4 times larger than a plain softmax's, which takes epochs to learn)
        ("va", None, dict(sig, temperature_a=0.5, temperature_b=1.0, **ls), True, True),
    ]
    out, seeded = [], []
    for head, e, fields_, featured, more_seeds in models:
        decoders = _SUITE_DECODERS[profile] if featured else ("greedy",)
        model = make_config(profile, "lstm", head, e, 0, **{"decoders": decoders, **fields_, **overrides})
        out.append(TemperatureConfig(model=model, evaluation=dict(_SUITE_EVALUATION[profile])))
        if more_seeds:
            seeded.append(out[-1])
    more = lambda config, seed: config.replace(model=config.model.replace(seed=seed, decoders=("greedy",)))
    # the centred model's further seeds first (the first suite's order)
    centred = out[-1]
    out += [more(centred, seed) for seed in EXTRA_SEEDS[profile]]
    # the parameter-matched baselines (greedy only), as many seeds each: the plain VA with CT-VA's
    # parameter count, then MoS+, the MoS with CT-MoS's
    ct = out[0].model
    ct_mos = next(c.model for c in out if c.model.temperature is not None
                  and c.model.temperature.mixtures > 1 and c.model.temperature.normalisation is not None)
    for matched, mixtures in ((ct, None), (ct_mos, ct_mos.temperature.mixtures)):
        fields_ = {} if mixtures is None else {"mixtures": mixtures}
        hidden = parameter_matched_hidden(matched, vocabulary_size_of(matched), **fields_)
        for seed in (0, *EXTRA_SEEDS[profile]):
            model = make_config(profile, "lstm", "va", None, seed,
                                **{"decoders": ("greedy",), **overrides, **fields_, "hidden": hidden})
            out.append(TemperatureConfig(model=model, evaluation=dict(_SUITE_EVALUATION[profile])))
    # every other compared model's further seeds, seed by seed
    out += [more(config, seed) for seed in EXTRA_SEEDS[profile] for config in seeded if config is not centred]
    if CT_MOS_ABLATIONS[profile]:
        # the paper's Tables 3 and 4 on CT-MoS, its own model (greedy only), after every model above
        mos = dict(mixtures=3)
        # in the order of CT-VA's same ablations (models 3-7)
        ablations = [
            dict(sig, **mos, loss_scaling=False),
            dict(sig, **mos, loss_scaling=True),  # the literal eq. 7
            dict(temperature="power-tanh", **mos, **ls),
            dict(temperature="shifted-tanh", **mos, **ls),
            dict(temperature="softmax", **mos, **ls),
        ]
        firsts = []
        for fields_ in ablations:
            model = make_config(profile, "lstm", "va", None, 0, **{"decoders": ("greedy",), **fields_, **overrides})
            firsts.append(TemperatureConfig(model=model, evaluation=dict(_SUITE_EVALUATION[profile])))
        out += firsts + [more(config, seed) for seed in EXTRA_SEEDS[profile] for config in firsts]
    return out


def vocabulary_size_of(config: ExperimentConfig) -> int:
    """The vocabulary size ``config`` trains with, known before its data is read: ``vocab_cap``
    words + ``<unk>``, ``<pad>``, ``<eos>`` (word vocabularies), ``vocab_cap`` pieces, specials
    included (BPE), or WikiText-2's 33,278 words + the three specials when uncapped (the
    ``paper`` profile; the substitute split's own count differs a little). Used by Chapter 9's suite
    (``09_temperature``)."""
    from .choices import WIKITEXT2_SIZES

    cap = config.data.vocab_cap
    if cap is None:
        return WIKITEXT2_SIZES["vocab_size"] + 3
    return cap if config.data.vocab_kind == "bpe" else cap + 3


def parameter_count(config: ExperimentConfig, vocab_size: int) -> int:
    """Trainable parameters of the model ``config`` builds for ``vocab_size`` ids (embedding and
    output layer tied; Chapter 9's temperature or mixture layers included)."""
    from .model_setup import build_model_for

    vocab_size = check_positive_int(vocab_size, "vocab_size")
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = build_model_for(config, vocab_size)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@functools.lru_cache(maxsize=32)
def parameter_matched_hidden(target: ExperimentConfig, vocab_size: int, *, mixtures: int = 1) -> int:
    """The hidden size H of a VA model of ``target``'s arch and layers without a temperature (head
    va; a single softmax, or a mixture of ``mixtures`` softmaxes) whose parameter count is closest
    to ``target``'s: the baseline that tells a better perplexity from more parameters (Contextual
    Temperature (2020), Table 1, built MoS+, a MoS of CT-MoS's size, for this reason: ``target``
    CT-MoS and ``mixtures`` its M; Chapter 9, 09_temperature). Counts grow with H, so H is found by
    bisection; ties go to the smaller H."""
    mixtures = check_positive_int(mixtures, "mixtures")
    want = parameter_count(target, vocab_size)
    plain = target.replace(head="va", eps=None, temperature=None, temperature_a=None, temperature_b=None,
                           temperature_lambda=None, temperature_rank=None, loss_scaling=False,
                           detach_loss_scale=False, mixtures=mixtures)

    def count(h: int) -> int:
        return parameter_count(plain.replace(hidden=h), vocab_size)

    lo, hi = 1, 2 * target.model.hidden
    while count(hi) < want:
        hi *= 2
    while hi - lo > 1:  # count(lo) < want <= count(hi), or lo = 1
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid) < want else (lo, mid)
    return lo if want - count(lo) <= count(hi) - want else hi


def baseline_configs(profile: str) -> list[ExperimentConfig]:
    """Chapter 6's plain LSTM VA and NMST (eps = the profile's featured eps) configs that Chapter 9
    (09_temperature) compares with: seeds 0-2 at ``cpu`` (Chapter 6's committed results; seed 0 has
    every decoder), seed 0 at ``quick``, seeds 0-9 at ``paper``. Exactly the configs of
    :func:`nmst_lib.experiments.runs.suite_configs` (same hashes)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    seeds = {"quick": (0,), "cpu": (0, 1, 2), "paper": tuple(range(10))}[profile]
    eps = FEATURED_EPS[profile]
    # Chapter 6's runs, without the unigram hold of Chapter 9's own recipe (it changes nothing for them:
    # UNIGRAM_HOLD_CPU_RECIPE)
    recipe = {k: v for k, v in chapter_recipe("temperature", profile).items() if k != "start_below_unigram"}
    return ([make_config(profile, "lstm", "va", None, s, **recipe) for s in seeds]
            + [make_config(profile, "lstm", "nmst", eps, s, **recipe) for s in seeds])


def load_baselines(profile: str = "cpu", results_dir=None) -> list[StoredResult]:
    """The stored Chapter 6 results of :func:`baseline_configs` (CURRENT, STALE or MISSING; nothing
    is run), read with Chapter 6's loader :func:`nmst_lib.experiments.results.load_result`. Chapter 9
    (09_temperature)."""
    return [load_result(c, results_dir) for c in baseline_configs(profile)]


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
    batches = D.bucket_batches(data.train.lengths, m.training.batch_size, max_tokens=m.training.max_batch_tokens, shuffle=True,
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
            "rule": tracked_tokens_rule(ev["tracked_top"], ev["tracked_log_spaced"])}


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
    t = m.temperature or TemperatureOptions()
    model.eval()
    base = evaluate_trained(run, progress=progress, log=log, command=command or command_line(), started=None)
    decode_seconds = sum(r["wall_seconds"] for r in base["decoding"].values())
    t0 = time.perf_counter()
    head = model.head
    rng = getattr(getattr(head, "temperature", None), "range", None)
    result = {
        "model": {"label": config.label, "head": m.head, "eps": m.eps, "temperature": t.normalisation,
                  "a": t.a, "b": t.b, "lambda": t.lam, "rank": t.rank, "mixtures": t.mixtures,
                  "loss_scaling": t.loss_scaling, "detach_loss_scale": t.detach_loss_scale,
                  "range": list(rng) if rng is not None else None, "head_name": getattr(head, "name", None),
                  # with an ST/NMST base the eos logit is not tempered: its tau column exists but is unused
                  "eos_tempered": t.normalisation is not None and m.head == "va",
                  "training_hash": training_hash(m), "checkpoint": Path(run.checkpoint).name},
        **base,
    }
    result["metrics"] = dict(result["metrics"])
    # with loss scaling the history's train_loss is the scaled objective (NLL x mean tau); perplexities never are
    result["metrics"]["train_loss_is_scaled"] = bool(t.loss_scaling)
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


def _seed_mean(recs: list[dict]) -> dict:
    """The row fields of one model over its stored seeds ``recs`` (at least one): ``{"key", "params",
    "val ppl", "test ppl", "seeds", "val ppl sd", "test ppl sd"}``, the perplexities the mean over the
    seeds and the sds their sample standard deviations (None with one seed); ``key`` joins the seeds'
    keys with commas."""
    val = [r["metrics"]["val_ppl"] for r in recs]
    test = [r["metrics"]["test_ppl"] for r in recs]
    return {"key": ",".join(r["key"] for r in recs), "params": recs[0]["metrics"]["num_parameters"],
            "val ppl": statistics.fmean(val), "test ppl": statistics.fmean(test), "seeds": len(recs),
            "val ppl sd": _spread(val), "test ppl sd": _spread(test)}


def _spread(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) > 1 else None


def _by_model(recs, name) -> dict[str, list[dict]]:
    """``recs`` grouped by model, ``name(rec)`` naming a model with its seed left out, in first-seen
    order."""
    groups: dict[str, list[dict]] = {}
    for rec in recs:
        groups.setdefault(name(rec), []).append(rec)
    return groups


def _baseline_rows(baselines) -> list[dict]:
    groups = _by_model(_records(baselines), lambda rec: config_from_dict(rec["config"]).label)
    return [{"model": f"{name} (Chapter 6)", **_seed_mean(recs)} for name, recs in groups.items()]


def temperature_table_rows(stored, baselines=()) -> list[dict]:
    """Contextual Temperature (2020) Tables 1-2 analogue (Chapter 9, 09_temperature): one row per model,
    ``{"model", "key", "params", "val ppl", "test ppl", "seeds", "val ppl sd", "test ppl sd"}``, Chapter
    6's plain VA and NMST LSTMs first (``baselines``: :func:`load_baselines`), then every CT / MoS model
    of ``stored`` (:func:`load_temperature_results`), each the mean over its stored seeds with the
    sample standard deviations (None with one seed). Non-current results are skipped."""
    groups = _by_model(_records(stored), lambda rec: rec["model"]["label"])
    return _baseline_rows(baselines) + [{"model": name, **_seed_mean(recs)} for name, recs in groups.items()]


def _seed(rec: dict) -> int:
    """The training seed of a stored CT result (its config's model seed)."""
    return int(rec.get("config", {}).get("model", {}).get("seed", 0))


def _hyper(m: dict) -> str:
    if m["temperature"] in ("sigmoid", "softmax"):
        return f"a={m['a']:g}, b={m['b']:g}"
    return f"lambda={m['lambda']:g}"


def normalisation_table_rows(stored, mixtures: int = 1) -> list[dict]:
    """Contextual Temperature (2020) Table 3 analogue (Chapter 9, 09_temperature): the CT-VA models with
    (detached) loss scaling and no mixture (``mixtures=3``: the CT-MoS models, the paper's own
    setting of Table 3), one row per normalisation and range, ``{"normalisation",
    "hyper-parameter", "range", "params", "val ppl", "test ppl", "seeds", "val ppl sd", "test ppl sd",
    "key"}``: the mean over the model's stored seeds, as in :func:`temperature_table_rows`; ``range``
    is the head's [lo, hi]."""
    recs = [rec for rec in _records(stored)
            if rec["model"]["temperature"] is not None and rec["model"]["mixtures"] == mixtures
            and rec["model"]["head"] == "va" and rec["model"]["loss_scaling"]
            and rec["model"].get("detach_loss_scale", False)]
    groups = _by_model(recs, lambda rec: rec["model"]["label"])
    return [{"normalisation": g[0]["model"]["temperature"], "hyper-parameter": _hyper(g[0]["model"]),
             "range": g[0]["model"]["range"], **_seed_mean(g)} for g in groups.values()]


def loss_scaling_table_rows(stored, mixtures: int = 1) -> list[dict]:
    """Contextual Temperature (2020) Table 4 analogue (Chapter 9, 09_temperature): the sigmoid CT-VA
    models with the paper's (a, b) = (1, 1/2) (no mixture; ``mixtures=3``: the CT-MoS models, the
    paper's own setting of Table 4) without loss scaling, with the literal
    eq. 7 (the factor has a gradient) and with the factor detached, in that order, ``{"model", "loss
    scaling", "params", "val ppl", "test ppl", "seeds", "val ppl sd", "test ppl sd", "key"}`` (the
    mean over the model's stored seeds); ``loss scaling`` is ``"none"``, ``"eq. 7 (factor has a
    gradient)"`` or ``"detached factor"``."""
    names = {(False, False): "none", (True, False): "eq. 7 (factor has a gradient)",
             (True, True): "detached factor"}
    order = list(names.values())
    mode = lambda m: names[(bool(m["loss_scaling"]), bool(m.get("detach_loss_scale", False)))]
    recs = [rec for rec in _records(stored)
            if rec["model"]["temperature"] == "sigmoid" and rec["model"]["mixtures"] == mixtures
            and rec["model"]["head"] == "va" and (rec["model"].get("a"), rec["model"].get("b")) == (1.0, 0.5)]
    groups = _by_model(recs, lambda rec: rec["model"]["label"])
    rows = [{"model": g[0]["model"]["label"], "loss scaling": mode(g[0]["model"]), **_seed_mean(g)}
            for g in groups.values()]
    return sorted(rows, key=lambda r: order.index(r["loss scaling"]))


def _curve_sources(stored, baselines) -> list[tuple[str, dict, dict]]:
    """``(name, record, identity)`` of every baseline and CT record, where ``identity`` is what a
    chapter selects on without reading the name: ``{"seed", "head", "eps", "baseline"}``
    (``baseline``: one of Chapter 6's LSTMs)."""
    out = []
    for rec in _records(baselines):
        cfg = config_from_dict(rec["config"])
        out.append((f"{cfg.label}, seed {cfg.seed} (Chapter 6)", rec,
                    {"seed": cfg.seed, "head": cfg.head, "eps": cfg.eps, "baseline": True}))
    for rec in _records(stored):
        seed = _seed(rec)
        out.append((rec["model"]["label"] + (f", seed {seed}" if seed else ""), rec,
                    {"seed": seed, "head": rec["model"]["head"], "eps": rec["model"].get("eps"),
                     "baseline": False}))
    return out


def temperature_rnt_rows(stored, baselines=()) -> list[dict]:
    """r_nt at the largest L of every decoder of the CT models against Chapter 6's VA and NMST LSTMs on
    the same contexts (Choi, Cho, Lee (2023) eq. 11; Chapter 9, 09_temperature): one row per (model,
    decoder), ``{"model", "key", "decoder", "L", "contexts", "r_nt(L)", "terminated", "mean length",
    "seed", "head", "eps", "baseline"}``, only decoders that some CT model ran (baselines' other
    decoders left out). Mean length is over the continuations that terminated (None when none did).
    ``baseline`` says whether the row is one of Chapter 6's LSTMs: select on it and on ``seed`` and
    ``head``, never on the ``model`` name (the parameter-matched VA's name starts with "VA" too)."""
    recs = _curve_sources(stored, baselines)
    wanted = {d for _, rec, _ in recs if rec.get("schema") == TEMPERATURE_RESULT_SCHEMA for d in rec["decoding"]}
    rows = []
    for name, rec, who in recs:
        for d, r in rec["decoding"].items():
            if d not in wanted:
                continue
            rows.append({"model": name, "key": rec["key"], "decoder": d, "L": r["max_len"],
                         "contexts": r["num_contexts"], "r_nt(L)": r["rnt"][-1],
                         "terminated": r["terminated_fraction"], "mean length": r["mean_terminated_length"],
                         **who})
    return rows


def temperature_rnt_curves(stored, baselines=()) -> list[dict]:
    """r_nt(L) curves (Choi, Cho, Lee (2023) eq. 11) of every CT model and decoder and of Chapter 6's
    VA and NMST LSTMs under the same decoders: ``{"model", "key", "decoder", "L", "rnt", "max_len",
    "num_contexts", "seed", "head", "eps", "baseline"}`` per curve (Chapter 9, 09_temperature; the
    last four as in :func:`temperature_rnt_rows`)."""
    recs = _curve_sources(stored, baselines)
    wanted = {d for _, rec, _ in recs if rec.get("schema") == TEMPERATURE_RESULT_SCHEMA for d in rec["decoding"]}
    return [{"model": name, "key": rec["key"], "decoder": d, "L": r["L"], "rnt": r["rnt"], "max_len": r["max_len"],
             "num_contexts": r["num_contexts"], **who}
            for name, rec, who in recs for d, r in rec["decoding"].items() if d in wanted]
