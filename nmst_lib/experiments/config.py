"""Experiment configurations and the three profiles (``quick``, ``cpu``,
``paper``) of the WikiText-2 experiments of Chapter 6 (06_wikitext), after
Choi, Cho, Lee (2023) Sec. 4.1 and App. D, F, G, and of the GPT-2 fine-tuning
experiments of Chapter 7 (07_gpt2), after Choi, Cho, Lee (2023) Sec. 4.2 and
App. D and Welleck et al. (2020) Sec. 5.3 (``arch="gpt2"``), and the
contextual-temperature and mixture-of-softmaxes output layers of Chapter 9
(09_temperature; Contextual Temperature (2020) Sec. 3, eq. 5-7: the
``temperature*``, ``loss_scaling`` and ``mixtures`` fields).

A config is a frozen dataclass; everything that can change a number in a result
is in it, so its hash (:func:`config_hash`) identifies the result. Runtime
choices that cannot change the numbers (progress bars, checkpoint frequency,
output folders) are not in it. Its options live in typed sections, one per
family of options (:mod:`.config_sections`: data, model, training, decoding,
and the GPT-2 and Chapter 9 sections that only those families have), named by
one flat vocabulary (:data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS`) in results' JSON, ``--set`` and
:func:`make_config`.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from dataclasses import dataclass, field, fields, replace

from .._validation import check_eps
from ..report import eps_text
from .config_sections import (
    DATASETS,
    FIELD_SECTIONS,
    LR_SCHEDULES,
    SECTION_TYPES,
    VOCAB_KINDS,
    DataOptions,
    DecodingOptions,
    GPT2Options,
    ModelOptions,
    TemperatureOptions,
    TrainingOptions,
    check_number,
    validate_data,
    validate_decoding,
    validate_gpt2,
    validate_model,
    validate_temperature,
    validate_training,
)
from .decoder_names import (
    ALL_DECODERS,
    GREEDY_ONLY,
    VA_CONSISTENT_DECODERS,
    DecoderSpec,
    parse_decoder,
)

__all__ = [
    "ARCHS",
    "SUITE_CHOSEN_FIELDS",
    "CHAPTER_CPU_RECIPE",
    "CONVERGED_CPU_RECIPE",
    "CPU_EPS",
    "CPU_RECIPES",
    "EPS_PPL_CPU_RECIPE",
    "GPT2_CONVERGED_CPU_RECIPE",
    "UNIGRAM_HOLD_CPU_RECIPE",
    "WORD_CPU_RECIPE",
    "DECODING_FIELDS",
    "EPS_HEADS",
    "FEATURED_EPS",
    "GPT2_CPU_EPS",
    "GPT2_FEATURED_EPS",
    "GPT2_MAX_POSITIONS",
    "HEADS",
    "NLL_HEADS",
    "PAPER_EPS",
    "PROFILES",
    "SCHEMA_VERSION",
    "SPARSE_HEADS",
    "ExperimentConfig",
    "canonical_hash",
    "chapter_recipe",
    "config_from_dict",
    "config_hash",
    "default_decoders",
    "make_config",
    "normalise_head",
    "suite_overrides",
    "training_hash",
    "validate_config",
]

# Re-exported for the import paths of earlier versions (their own modules
# document them).
_REEXPORTED = (
    DATASETS, FIELD_SECTIONS, LR_SCHEDULES, VOCAB_KINDS, ALL_DECODERS,
    GREEDY_ONLY, VA_CONSISTENT_DECODERS, DecoderSpec, parse_decoder,
    DataOptions, DecodingOptions, GPT2Options, ModelOptions,
    TemperatureOptions, TrainingOptions,
)

SCHEMA_VERSION = 1
"""Bump when the training or evaluation code changes what a config's numbers mean: every
stored result then becomes STALE."""

PROFILES = ("quick", "cpu", "paper")
ARCHS = ("rnn", "lstm", "gpt2")
"""Model families: tanh RNN and LSTM (Chapter 6, 06_wikitext; Chapter 8, 08_sparse) and GPT-2
(Chapter 7, 07_gpt2; Choi, Cho, Lee (2023) Sec. 4.2)."""
GPT2_MAX_POSITIONS = 1024
"""GPT-2's context window: context + continuation must fit in it (Radford et al. 2019)."""
HEADS = ("va", "st", "nmst", "entmax", "nmst-entmax")
_HEAD_ALIASES = {"va": "va", "vanilla": "va", "softmax": "va", "st": "st", "nmst": "nmst", "entmax": "entmax",
                 "nmst-entmax": "nmst-entmax", "nmst_entmax": "nmst-entmax"}
NLL_HEADS = ("va", "st", "nmst")
"""Heads trained with the negative log-likelihood: their validation loss is log perplexity."""
SPARSE_HEADS = ("entmax", "nmst-entmax")
"""Heads trained with an entmax (Fenchel-Young) loss (Martins et al. (2020) eq. 6; Chapter 8,
08_sparse): sparse outputs, so perplexity can be infinite; they need ``alpha`` > 1."""
EPS_HEADS = ("st", "nmst", "nmst-entmax")
"""Heads with the eps of the eos lower bound 1 - (1 - eps)^t."""

PAPER_EPS = (1e-5, 5e-5, 1e-4, 5e-4)
"""eps grid of Choi, Cho, Lee (2023) Sec. 4.1."""
CPU_EPS = (1e-4, 5e-4)
"""Reduced eps grid of the ``cpu`` profile: with L_max = 1e4 the lower bound
1 - (1 - eps)^t reaches 0.63 (eps = 1e-4) and 0.99 (eps = 5e-4), so the termination that the
theory promises is visible within the decoded horizon; eps = 1e-5 needs L ~ 1e5 (paper)."""

GPT2_CPU_EPS = (1e-4, 5e-4, 2.5e-3)
"""eps grid of the GPT-2 ``cpu`` profile (Chapter 7, 07_gpt2): two of Choi, Cho, Lee (2023) Sec. 4.2's
scale plus 2.5e-3, the eps of Welleck et al. (2020) Sec. 5.3 / Table 4 (ST GPT-2). With L = 1000 the
lower bound 1 - (1 - eps)^L is 0.10, 0.39 and 0.92."""
GPT2_FEATURED_EPS = {"quick": 1e-2, "cpu": 5e-4, "paper": 1e-5}
"""The eps whose GPT-2 ST/NMST models get every decoder (Choi, Cho, Lee (2023) Table 4 uses 1e-5;
Chapter 7, 07_gpt2); the same values as :data:`FEATURED_EPS`."""

def normalise_head(head: str) -> str:
    """``va``/``vanilla``/``softmax`` -> ``va``; ``st``; ``nmst``; ``entmax``;
    ``nmst-entmax``/``nmst_entmax`` -> ``nmst-entmax`` (case-insensitive). Used by the configs of
    Chapters 6-9."""
    key = head.lower() if isinstance(head, str) else head
    if key not in _HEAD_ALIASES:
        raise ValueError(f"unknown head {head!r}: choose one of va (vanilla softmax), st, nmst, entmax "
                         "(alpha-entmax, Chapter 8), nmst-entmax (NMST eos + alpha-entmax, Chapter 8)")
    return _HEAD_ALIASES[key]


def _short_count(n: int) -> str:
    """``8000`` -> ``"8k"``, ``8192`` -> ``"8192"``: a vocabulary size in a key."""
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def _unknown_fields(unknown) -> ValueError:
    """The error for flat names outside :data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS`: each with its
    closest known name, then every known name."""
    hints = []
    for name in sorted(map(str, unknown)):
        close = difflib.get_close_matches(name, FIELD_SECTIONS, n=1)
        hints.append(
            f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)
        )
    return ValueError(
        f"unknown config fields [{', '.join(hints)}]; known: "
        f"{sorted(FIELD_SECTIONS)}"
    )


def _section_kwargs(flat: dict) -> dict:
    """Flat field values -> the keyword arguments of :class:`ExperimentConfig`
    (identity fields and sections), routed by :data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS`. The
    ``gpt2`` section is built for arch gpt2 or when one of its fields is not
    None (on another arch validation then says it does not apply); the
    ``temperature`` section when one of its fields differs from its default
    (value or type: ``mixtures=True`` is not 1, and validation refuses it).
    Unknown names raise ValueError naming the allowed ones."""
    unknown = set(flat) - set(FIELD_SECTIONS)
    if unknown:
        raise _unknown_fields(unknown)
    kwargs, parts = {}, {name: {} for name in SECTION_TYPES}
    for name, value in flat.items():
        section, attr = FIELD_SECTIONS[name]
        if section is None:
            kwargs[attr] = value
        else:
            parts[section][attr] = value
    for section, cls in SECTION_TYPES.items():
        built = cls(**parts[section])
        optional = section in ("gpt2", "temperature")
        arch = kwargs.get("arch", "lstm")
        is_gpt2 = (
            section == "gpt2"
            and isinstance(arch, str)
            and arch.lower() == "gpt2"
        )
        kwargs[section] = (
            None if optional and not is_gpt2 and _all_default(built) else built
        )
    return kwargs


def _all_default(section) -> bool:
    """Every field at its default, of the default's type (``mixtures=True`` is
    not 1)."""
    default = type(section)()
    return all(
        getattr(section, f.name) == getattr(default, f.name)
        and type(getattr(section, f.name)) is type(getattr(default, f.name))
        for f in fields(section)
    )


@dataclass(frozen=True)
class ExperimentConfig:
    """One run of Chapters 6-9: who it is (``profile``, ``arch``, ``head``,
    ``eps``, ``alpha``, ``seed``) and one typed section per family of options
    (:mod:`nmst_lib.experiments.config_sections`): ``data``
    (:class:`~nmst_lib.experiments.config_sections.DataOptions`), ``model`` (:class:`~nmst_lib.experiments.config_sections.ModelOptions`), ``training``
    (:class:`~nmst_lib.experiments.config_sections.TrainingOptions`), ``decoding`` (:class:`~nmst_lib.experiments.config_sections.DecodingOptions`),
    ``gpt2`` (:class:`~nmst_lib.experiments.config_sections.GPT2Options`, Chapter 7 only, None for rnn/lstm) and
    ``temperature`` (:class:`~nmst_lib.experiments.config_sections.TemperatureOptions`, Chapter 9 only, None without
    a contextual temperature or mixture). Build with :func:`make_config` to get
    a profile's defaults (Choi, Cho, Lee (2023) Sec. 4.1-4.2, App. D; Chapter
    6, 06_wikitext).

    ``arch``: rnn | lstm | gpt2; ``head``: va | st | nmst | entmax |
    nmst-entmax; ``eps``: ST, NMST and NMST-entmax only; ``alpha``: entmax and
    NMST-entmax only, the alpha > 1 of alpha-entmax (Martins et al. (2020) eq.
    2; Chapter 8, 08_sparse).

    One flat vocabulary names every option: :data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS` routes
    ``hidden`` to ``model.hidden``, ``temperature`` to
    ``temperature.normalisation`` and so on. It is the vocabulary of
    :meth:`to_dict` (results' JSON and their hashes), :meth:`replace`,
    :func:`make_config` and ``--set``; attributes are read through the sections
    (``config.model.hidden``).
    """

    profile: str = "quick"
    arch: str = "lstm"
    head: str = "va"
    eps: float | None = None
    alpha: float | None = None
    seed: int = 0
    data: DataOptions = field(default_factory=DataOptions)
    model: ModelOptions = field(default_factory=ModelOptions)
    training: TrainingOptions = field(default_factory=TrainingOptions)
    decoding: DecodingOptions = field(default_factory=DecodingOptions)
    gpt2: GPT2Options | None = None
    temperature: TemperatureOptions | None = None

    @classmethod
    def from_flat(cls, **flat) -> ExperimentConfig:
        """An unvalidated config from flat field names
        (:data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS`); fields not given keep the sections' defaults.
        """
        return cls(**_section_kwargs(flat))

    @property
    def key(self) -> str:
        """File-name key: profile, arch, head, eps, alpha, seed (the identity
        of a run in a suite; the hidden size when it is not the profile's),
        e.g. ``cpu-lstm-nmst-eps5e-4-seed0``,
        ``cpu-lstm-entmax-a1.5-seed0``,
        ``cpu-lstm-nmst-entmax-eps5e-4-a1.5-seed0``; eps with as many digits as
        it needs (``cpu-gpt2-st-eps2.5e-3-seed0``, not ``eps3e-3``)."""
        eps = (
            ""
            if self.eps is None
            else f"-eps{eps_text(self.eps)}".replace("e-0", "e-")
        )
        alpha = "" if self.alpha is None else f"-a{self.alpha:g}"
        data = self.data
        vocab = (
            ""
            if data.vocab_kind == "word"
            else f"-{data.vocab_kind}{_short_count(data.vocab_cap)}"
        )
        vocab += "-nounk" if data.drop_unk else ""
        ident = f"{self.profile}-{self.arch}-{self.head}{eps}{alpha}"
        size = self._hidden_key()
        return f"{ident}{self._temperature_key()}{size}{vocab}-seed{self.seed}"

    def _hidden_key(self) -> str:
        """``-h{hidden}`` for an RNN/LSTM whose hidden size is not its
        profile's (Chapter 9's parameter-matched VA,
        ``cpu-lstm-va-h160-seed0``); empty for every other config."""
        if self.arch == "gpt2" or self.profile not in _PROFILE_DEFAULTS:
            return ""
        table = _PROFILE_DEFAULTS[self.profile]
        default = table[self.arch].get("hidden", table["common"].get("hidden"))
        return "" if self.model.hidden == default else f"-h{self.model.hidden}"

    def _temperature_key(self) -> str:
        """The Chapter 9 (09_temperature) part of :attr:`key`: ``-mos{M}`` for
        a mixture of M softmaxes (Contextual Temperature (2020) eq. 3), then
        ``-ct-`` and the normalisation of eq. 5 / Table 3 (``sig-a1-b0.5``,
        ``smax-a1-b0.5``, ``pow-l4``, ``shift-l3``), ``-nols`` without the loss
        scaling of Sec. 3.3, ``-lsdet`` with it detached
        (``detach_loss_scale``), and ``-q{rank}`` when the rank Q of W1 W2 is
        not ``hidden // 2``. Empty for every config of Chapters 6-8."""
        t = self.temperature
        if t is None:
            return ""
        out = f"-mos{t.mixtures}" if t.mixtures != 1 else ""
        if t.normalisation is None:
            return out
        short = {
            "sigmoid": "sig",
            "softmax": "smax",
            "power-tanh": "pow",
            "shifted-tanh": "shift",
        }[t.normalisation]
        if t.normalisation in ("sigmoid", "softmax"):
            norm = f"{short}-a{t.a:g}-b{t.b:g}"
        else:
            norm = f"{short}-l{t.lam:g}"
        out += (
            "-ct-"
            + norm
            + (
                "-lsdet"
                if t.detach_loss_scale
                else ""
                if t.loss_scaling
                else "-nols"
            )
        )
        if t.rank is not None and t.rank != self.model.hidden // 2:
            out += f"-q{t.rank}"
        return out

    @property
    def label(self) -> str:
        """Short label for plots, e.g. ``NMST+LSTM (eps=1e-04)``, ``ENTMAX+LSTM
        (alpha=1.5)``."""
        parts = (
            [] if self.eps is None else [f"eps={eps_text(self.eps)}"]
        ) + ([] if self.alpha is None else [f"alpha={self.alpha:g}"])
        head = self.head.upper()
        t = self.temperature or TemperatureOptions()
        if (
            t.mixtures != 1
        ):  # Chapter 9 (09_temperature): MoS / CT-MoS, CT-VA, CT-NMST
            head = "MoS" if head == "VA" else f"{head}-MoS"
            parts.append(f"M={t.mixtures}")
        if t.normalisation is not None:
            head = f"CT-{head}"
            if t.normalisation in ("sigmoid", "softmax"):
                parts.append(f"{t.normalisation} a={t.a:g} b={t.b:g}")
            else:
                parts.append(f"{t.normalisation} lambda={t.lam:g}")
            if not t.loss_scaling:
                parts.append("no LS")
            elif t.detach_loss_scale:
                parts.append("LS detached")
            if t.rank is not None and t.rank != self.model.hidden // 2:
                parts.append(f"Q={t.rank}")
        if self._hidden_key():  # Chapter 9's parameter-matched VA
            parts.append(f"hidden {self.model.hidden}")
        extra = f" ({', '.join(parts)})" if parts else ""
        return f"{head}+{self.arch.upper()}{extra}"

    def value(self, name: str):
        """The value of the flat field ``name`` (:data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS`), e.g.
        ``config.value("hidden") == config.model.hidden``; an absent section
        (``gpt2``, ``temperature``) reads as its defaults. For code that takes
        field names as data (recipe tables, ``--set``); code that names a field
        reads it from its section."""
        if name not in FIELD_SECTIONS:
            raise _unknown_fields({name})
        section, attr = FIELD_SECTIONS[name]
        if section is None:
            return getattr(self, attr)
        part = getattr(self, section)
        return getattr(
            SECTION_TYPES[section]() if part is None else part, attr
        )

    def flat_dict(self) -> dict:
        """Every flat field and its value, in the order of
        :data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS` (nothing left out, tuples kept): the inverse of
        :meth:`from_flat`."""
        return {name: self.value(name) for name in FIELD_SECTIONS}

    def to_dict(self) -> dict:
        """JSON-ready flat dict of every field (tuples become lists): the keys
        of :data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS`, so the dict and :func:`config_hash` are
        those of the flat config before the sections. ``alpha`` is left out
        when it is None (every head but entmax and nmst-entmax), and the fields
        added for GPT-2 (Chapter 7, 07_gpt2: dataset, pretrained, attn_heads,
        lr_schedule, lr_decay_steps, max_steps, grad_accum,
        no_decay_bias_norm), for Chapter 9 (09_temperature: temperature,
        temperature_a, temperature_b, temperature_lambda, temperature_rank,
        loss_scaling, mixtures, detach_loss_scale) and later (vocab_kind,
        drop_unk, min_improvement, start_below_unigram, select_on) when they are at their defaults, so that
        configs written before those fields existed keep their
        :func:`config_hash`."""
        d = self.flat_dict()
        d["betas"] = list(d["betas"])
        d["decoders"] = list(d["decoders"])
        for name, default in _OMITTED_AT_DEFAULT.items():
            if d[name] == default and type(d[name]) is type(default):
                del d[name]
        return d

    def replace(self, **changes) -> ExperimentConfig:
        """A validated copy with ``changes`` (flat field names,
        :data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS`) applied."""
        unknown = set(changes) - set(FIELD_SECTIONS)
        if unknown:
            raise _unknown_fields(unknown)
        return validate_config(
            ExperimentConfig.from_flat(**{**self.flat_dict(), **changes})
        )


_OMITTED_AT_DEFAULT = {
    "alpha": None,
    "vocab_kind": "word",
    "drop_unk": False,
    "min_improvement": 0.0,
    "start_below_unigram": None,
    "select_on": None,
    "dataset": "wikitext-2",
    "pretrained": None,
    "attn_heads": None,
    "lr_schedule": "plateau",
    "lr_decay_steps": None,
    "max_steps": None,
    "grad_accum": 1,
    "no_decay_bias_norm": False,
    "temperature": None,
    "temperature_a": None,
    "temperature_b": None,
    "temperature_lambda": None,
    "temperature_rank": None,
    "loss_scaling": False,
    "mixtures": 1,
    "detach_loss_scale": False,
}
"""Fields that :meth:`ExperimentConfig.to_dict` leaves out at these values
(they postdate Chapter 6's committed results, whose hashes must not change)."""


def _validate_identity(config: ExperimentConfig) -> dict:
    """profile, arch, head, eps, alpha, seed: the normalised values (arch and
    head lower case, eps and alpha floats), or ValueError / TypeError saying
    what is allowed."""
    if config.profile not in PROFILES:
        raise ValueError(
            f"unknown profile {config.profile!r}: choose one of "
            f"{', '.join(PROFILES)}"
        )
    arch = config.arch.lower() if isinstance(config.arch, str) else config.arch
    if arch not in ARCHS:
        raise ValueError(
            f"unknown arch {config.arch!r}: choose rnn (tanh RNN), lstm or "
            "gpt2"
        )
    head = normalise_head(config.head)
    out = {"arch": arch, "head": head}
    if head not in EPS_HEADS:
        if config.eps is not None:
            raise ValueError(
                "eps applies to the st, nmst and nmst-entmax heads only; "
                "leave it out (None) for "
                f"head {head}"
            )
    else:
        if config.eps is None:
            raise ValueError(
                f"head {head} needs eps in (0, 1), e.g. 1e-4 (the paper uses "
                f"{PAPER_EPS})"
            )
        out["eps"] = check_eps(config.eps)
    if head in SPARSE_HEADS:
        if config.alpha is None:
            raise ValueError(
                f"head {head} needs alpha > 1 (alpha-entmax; Martins et al. "
                "(2020) use 1.2 on "
                "WikiText-2, 1.5 is the exact sort-based entmax15)"
            )
        check_number(config.alpha, "alpha")
        if not (math.isfinite(config.alpha) and config.alpha > 1):
            raise ValueError(
                f"alpha must be a finite number > 1 for head {head} (alpha = "
                "1 is softmax: use "
                f"{'va' if head == 'entmax' else 'nmst'}), got "
                f"{config.alpha!r}"
            )
        out["alpha"] = float(config.alpha)
    elif config.alpha is not None:
        raise ValueError(
            "alpha applies to the entmax and nmst-entmax heads only; leave "
            "it out (None) for head "
            f"{head}"
        )
    seed = config.seed
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return out


def _check_data_for_arch(data: DataOptions, arch: str) -> None:
    """The data options that depend on the arch: WikiText-103, a fixed
    vocabulary and raw text for GPT-2 (Chapter 7), BPE pieces for rnn/lstm
    only (``drop_unk`` applies to every arch: GPT-2's local text is WikiText-2
    v1's, whose ``<unk>`` markers it deletes before detokenising)."""
    if data.dataset == "wikitext-103" and arch != "gpt2":
        raise ValueError(
            "dataset 'wikitext-103' is for arch gpt2 only (Choi, Cho, Lee "
            "(2023) Sec. 4.2); the RNN/LSTM "
            "experiments use 'wikitext-2'"
        )
    if data.vocab_kind == "bpe" and (arch == "gpt2" or data.vocab_cap is None):
        raise ValueError(
            "vocab_kind bpe needs vocab_cap, the number of pieces (e.g. "
            "8000), and an rnn or lstm "
            f"(GPT-2 has its own BPE); got arch {arch!r}, vocab_cap "
            f"{data.vocab_cap!r}"
        )
    if arch == "gpt2" and data.vocab_cap is not None:
        raise ValueError(
            "vocab_cap must be None for arch gpt2: the GPT-2 BPE vocabulary "
            "is fixed (50,257 ids), "
            f"got {data.vocab_cap!r}"
        )


def _check_gpt2_for_arch(gpt2: GPT2Options | None, arch: str) -> None:
    """A GPT2Options section is for arch gpt2 only (each field says so in its
    own words)."""
    if arch == "gpt2" or gpt2 is None:
        return
    if gpt2.pretrained is not None:
        raise ValueError(
            "pretrained applies to arch gpt2 only; leave it out (None) for "
            f"arch {arch}"
        )
    if gpt2.attn_heads is not None:
        raise ValueError(
            "attn_heads applies to a GPT-2 trained from scratch only (arch "
            "gpt2, pretrained None); "
            "a pretrained model brings its own; leave it out (None)"
        )
    raise ValueError(
        "the gpt2 section applies to arch gpt2 only; leave it out (None) for "
        f"arch {arch}"
    )


def _check_temperature_for_model(
    t: TemperatureOptions, arch: str, head: str
) -> None:
    """Contextual temperature and MoS (Chapter 9) need an RNN/LSTM with a
    softmax head; a mixture, head va."""
    if t.normalisation is None and t.mixtures == 1:
        return
    if arch == "gpt2":
        raise ValueError(
            "contextual temperature and mixtures of softmaxes are implemented "
            "for RNNLM/LSTMLM "
            "(Chapter 9); use arch rnn or lstm, or leave temperature and "
            "mixtures out for gpt2"
        )
    if head in SPARSE_HEADS:
        raise ValueError(
            "contextual temperature and mixtures of softmaxes need a "
            "softmax-based head (va, st or "
            f"nmst), got head {head}"
        )
    if t.mixtures > 1 and head != "va":
        raise ValueError(
            f"a mixture of softmaxes (mixtures={t.mixtures}) is implemented "
            "with head va only (MoS / "
            "CT-MoS, Contextual Temperature (2020) eq. 3 and 6), got head "
            f"{head}"
        )


def validate_config(config: ExperimentConfig) -> ExperimentConfig:
    """Check every section and return the config with normalised values; raises
    ValueError / TypeError saying what to change (before any data is loaded or
    any training starts). Each section has its own validator
    (:mod:`nmst_lib.experiments.config_sections`); the checks that involve two
    sections (the arch and the data, GPT-2 or temperature options; GPT-2's 1024
    positions) are here. Every config of Chapters 6-9 passes through it."""
    if not isinstance(config, ExperimentConfig):
        raise TypeError(
            f"expected an ExperimentConfig, got {type(config).__name__}"
        )
    changes = _validate_identity(config)
    arch, head = changes["arch"], changes["head"]
    data = validate_data(config.data)
    _check_data_for_arch(data, arch)
    _check_gpt2_for_arch(config.gpt2, arch)
    model = validate_model(config.model)
    if arch == "gpt2":
        changes["gpt2"] = validate_gpt2(
            config.gpt2 or GPT2Options(), model.hidden
        )
    changes["training"] = validate_training(config.training)
    if config.training.start_below_unigram is not None and head not in NLL_HEADS:
        raise ValueError(
            "start_below_unigram compares validation perplexities, and the "
            f"{head} head selects epochs by its mean entmax loss (perplexity "
            "can be infinite); leave it None for the entmax heads"
        )
    if config.training.select_on == "eps_ppl" and head in NLL_HEADS:
        raise ValueError(
            f"select_on='eps_ppl' is for the entmax heads (their perplexity is infinite once a "
            f"reference token falls outside the support); the {head} head selects epochs by its "
            "perplexity: leave select_on None"
        )
    temperature = config.temperature
    if temperature is not None:
        temperature = validate_temperature(temperature, model.hidden)
        _check_temperature_for_model(temperature, arch, head)
        if _all_default(temperature):
            temperature = None
    changes["temperature"] = temperature
    decoding = changes["decoding"] = validate_decoding(config.decoding)
    if arch == "gpt2":
        longest = max(
            decoding.decode_max_len, decoding.decode_max_len_nongreedy or 0
        )
        if data.context_len + longest > GPT2_MAX_POSITIONS:
            raise ValueError(
                f"GPT-2 attends to {GPT2_MAX_POSITIONS} positions: "
                f"context_len ({data.context_len}) "
                f"+ the longest decode_max_len ({longest}) must not exceed "
                "it; the paper uses "
                "L = 1000 with k = 10"
            )
    return replace(config, **changes)


DECODING_FIELDS = ("decoders", "decode_max_len", "decode_max_len_nongreedy", "num_decode_contexts",
                   "num_decode_contexts_nongreedy", "decode_batch_size", "num_eos_lines")
"""Fields that change only what is measured after training (not the trained weights)."""


def canonical_hash(payload: dict) -> str:
    """sha256 (first 16 hex digits) of ``payload`` as canonical JSON (sorted keys, no spaces): the
    one recipe behind every config and result hash of the experiments (Chapters 6-9)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def training_hash(config: ExperimentConfig) -> str:
    """Like :func:`config_hash` but over the fields that determine the trained weights only
    (everything except :data:`DECODING_FIELDS` and ``profile``): a checkpoint can be decoded
    under any decoding settings. It ties the checkpoints of Chapters 6-9 to their configs."""
    d = {k: v for k, v in config.to_dict().items() if k not in DECODING_FIELDS and k != "profile"}
    return canonical_hash({"schema": SCHEMA_VERSION, "training": d})


def config_hash(config: ExperimentConfig) -> str:
    """sha256 (first 16 hex digits) of the canonical JSON of every field plus
    :data:`SCHEMA_VERSION`: equal hashes mean the same experiment with the same code semantics. The
    results of Chapters 6 and 7 are stamped with it."""
    return canonical_hash({"schema": SCHEMA_VERSION, "config": config.to_dict()})


def config_from_dict(d: dict) -> ExperimentConfig:
    """Inverse of :meth:`ExperimentConfig.to_dict`: flat field names
    (:data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS`) routed to their sections (unknown keys are an
    error). It reads the configs stored with the results of Chapters 6-9."""
    d = dict(d)
    if "betas" in d:
        d["betas"] = tuple(d["betas"])
    if "decoders" in d:
        d["decoders"] = tuple(d["decoders"])
    return validate_config(ExperimentConfig.from_flat(**d))


# ---------------------------------------------------------------------------------- profiles

CONVERGED_CPU_RECIPE = dict(vocab_kind="bpe", vocab_cap=4000, drop_unk=True, max_epochs=60, patience=2,
                            min_improvement=0.005)
"""The ``cpu`` profile's vocabulary and stopping rule for RNN/LSTM models (issue 23's converged
recipe; Chapter 6, 06_wikitext): 4,000 BPE pieces learned on the training split
(:func:`nmst_lib.data.learn_subword_vocabulary`) after WikiText's own ``<unk>`` markers are deleted
(:func:`nmst_lib.data.drop_unk_markers`), and a plateau rule after Choi, Cho, Lee (2023) App. D (who
halve the learning rate after an epoch without improvement and stop after 10 such epochs, the
``paper`` profile) with our threshold and patience: an epoch that lowers the validation perplexity
by less than 0.5 % halves the learning rate, two such epochs in a row stop training, at most 60
epochs (measured: the LSTM VA model stops at about epoch 28, the slowest head at 36; with no
threshold it still gained 0.02-0.7 % an epoch at epoch 40, pending_results/measuring/cap40/). A run
is *converged* when early stopping fired (:func:`nmst_lib.findings.convergence`)."""

WORD_CPU_RECIPE = dict(vocab_kind="word", vocab_cap=5000, drop_unk=False, max_epochs=4, patience=2,
                       min_improvement=0.0)
"""The ``cpu`` recipe of the book's first editions: the 5,000 most frequent words + ``<unk>``
(WikiText's markers kept) and 4 epochs, which stopped every model while it still improved.
No chapter trains with it now (:data:`CHAPTER_CPU_RECIPE`). Chapter 8 switched to
:data:`EPS_PPL_CPU_RECIPE` with three of its four converged models in; the fourth, entmax-1.2,
joined them in the published store when it finished. Chapter 9 switched to
:data:`UNIGRAM_HOLD_CPU_RECIPE` with ten of its eleven seed-0 models in (book 5th edition); its
CT-MoS joined them when it finished, and MoS⁺ (added to the suite later, version 5.4) when it was
trained."""

UNIGRAM_HOLD_CPU_RECIPE = dict(CONVERGED_CPU_RECIPE, start_below_unigram=0.9)
"""Chapter 9's ``cpu`` recipe (09_temperature): :data:`CONVERGED_CPU_RECIPE` with the plateau rule
held back until the model has left the unigram plateau (validation perplexity below 90 % of the
unigram model's, :func:`~nmst_lib.experiments.evaluation.unigram_perplexity`: 905.6 per piece on
the substitute split's 4,000 pieces). A contextual-temperature model starts at temperature 3
(sigmoid, (a, b) = (1, 1/2)) and must grow its logits about threefold before it predicts better
than word frequencies: by Chapter 6's recipe alone it stopped at epoch 3 with validation
perplexity 931-939 (pending_results/measuring/ct-plateau/). Every Chapter 6 run left the plateau
by its second epoch and no epoch of theirs that failed the 0.5 % rule was on it, so the hold
changes nothing for them (tests/test_plateau_rules.py), and Chapter 9's baselines are Chapter 6's
runs."""

GPT2_CONVERGED_CPU_RECIPE = dict(max_train_tokens=None, drop_unk=True, max_epochs=30, patience=2,
                                 min_improvement=0.005)
"""Chapter 7's converged recipe for the ``cpu`` GPT-2 (07_gpt2), the ``cpu`` profile's own
(``_GPT2_PROFILE_DEFAULTS``) since one seed of every GPT-2 model was trained by it
(``FAMILY=gpt2 scripts/converge_cpu.sh``): the whole substitute training split (405,458 GPT-2
tokens; the first editions' 150,000 ran out at epoch 3, after which validation perplexity rose:
pending_results/measuring/gpt2-150k-unk-kept/), WikiText's ``<unk>`` markers deleted before
detokenising (:func:`nmst_lib.data.load_wikitext_raw`; with them kept every greedy continuation was
a loop of ``<unk>``), the same 0.5 % rule with patience 2 as the RNN/LSTM recipe, and at most 30
epochs, over which the linear learning-rate decay is spread."""

EPS_PPL_CPU_RECIPE = dict(CONVERGED_CPU_RECIPE, select_on="eps_ppl")
"""Chapter 8's ``cpu`` recipe (08_sparse): :data:`CONVERGED_CPU_RECIPE` with the entmax models'
epochs compared by validation epsilon-perplexity (``select_on="eps_ppl"``;
:func:`~nmst_lib.experiments.evaluation.selection_metric`), so that the 0.5 % rule is a rule on a
perplexity for them as for the softmax model, which is Chapter 6's LSTM VA and is selected by its
perplexity (:func:`~nmst_lib.experiments.sparse.sparse_suite_configs` gives it no ``select_on``).
By the mean entmax loss in nats the entmax-1.5 model stopped at epoch 8
(pending_results/measuring/entmax-loss-rule/): that loss spans about 0.14 nats from a uniform
model to a trained one, a log perplexity about 3."""

CPU_RECIPES = {"converged": CONVERGED_CPU_RECIPE, "converged-unigram-hold": UNIGRAM_HOLD_CPU_RECIPE,
               "converged-eps-ppl": EPS_PPL_CPU_RECIPE,
               "word-4-epochs": WORD_CPU_RECIPE}
"""The ``cpu`` recipes by name."""

CHAPTER_CPU_RECIPE = {"wikitext2": "converged", "sparse": "converged-eps-ppl", "temperature": "converged-unigram-hold"}
"""Which recipe of :data:`CPU_RECIPES` each RNN/LSTM family's ``cpu`` suite trains with. A chapter
moves to its converged recipe when one seed of each of its configurations is published by it
(ARCHITECTURE.md, "Results, profiles and honesty"); until then it keeps its published results and
their comparisons inside the chapter stay like for like. Every chapter has switched: Chapters 6-9
train by a converged recipe, and Chapter 9 compares with Chapter 6's LSTMs by Chapter 6's
(:func:`nmst_lib.experiments.temperature_suite.baseline_configs`)."""


def chapter_recipe(family: str, profile: str) -> dict:
    """The option fields that ``family``'s suite at ``profile`` sets on top of
    :func:`make_config`'s profile defaults: at ``cpu`` the fields of the recipe
    :data:`CHAPTER_CPU_RECIPE` names for it, empty otherwise (for ``wikitext2`` they change nothing: its recipe
    is the profile's own). A suite's ``--set`` overrides come after these. Used by the suites of
    Chapters 6-9."""
    if family not in CHAPTER_CPU_RECIPE:
        raise ValueError(f"unknown RNN/LSTM family {family!r}: choose one of {', '.join(CHAPTER_CPU_RECIPE)}")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    if profile != "cpu":
        return {}
    return dict(CPU_RECIPES[CHAPTER_CPU_RECIPE[family]])


_PROFILE_DEFAULTS = {
    # quick: seconds on a laptop core; for tests and CI. Numbers mean nothing.
    "quick": dict(
        common=dict(vocab_cap=300, max_train_tokens=12_000, max_eval_tokens=4_000, hidden=32, layers=2, dropout=0.1, max_epochs=2,
                    patience=2, batch_size=16, decode_max_len=40, num_decode_contexts=24, num_eos_lines=2,
                    decode_batch_size=64),
        rnn=dict(),
        lstm=dict(),
    ),
    # cpu: what the website shows. See make_config's docstring for the budget.
    "cpu": dict(
        common=dict(max_train_tokens=None, hidden=128, layers=2, dropout=0.3, lr=2e-3,
                    batch_size=16, decode_max_len=10_000, decode_max_len_nongreedy=None,
                    num_decode_contexts=128, num_decode_contexts_nongreedy=64, num_eos_lines=6,
                    decode_batch_size=512, **CONVERGED_CPU_RECIPE),
        rnn=dict(),
        lstm=dict(),
    ),
    # paper: Choi, Cho, Lee (2023) App. D.
    "paper": dict(
        common=dict(vocab_cap=None, max_train_tokens=None, layers=2, max_epochs=70, patience=10, batch_size=32,
                    decode_max_len=100_000, num_decode_contexts=None, num_eos_lines=8, decode_batch_size=256),
        rnn=dict(hidden=256, dropout=0.3),
        lstm=dict(hidden=512, dropout=0.5),
    ),
}


_GPT2_PROFILE_DEFAULTS = {
    # quick: seconds; tests and CI. A 2 x 32 GPT-2 from scratch on ~6k BPE tokens. Numbers mean nothing.
    "quick": dict(vocab_cap=None, max_train_tokens=6_000, max_eval_tokens=2_000, hidden=32, layers=2, attn_heads=2,
                  dropout=0.0, lr=1e-3, lr_schedule="linear", no_decay_bias_norm=True, max_epochs=2, patience=2,
                  batch_size=64, max_batch_tokens=512, decode_max_len=40, num_decode_contexts=16, num_eos_lines=2,
                  decode_batch_size=64),
    # cpu: the website's GPT-2 -- NOT pretrained GPT-2: a 2 x 128 GPT-2 trained from scratch on the offline text.
    "cpu": dict(vocab_cap=None, max_eval_tokens=None, hidden=128, layers=2, attn_heads=4,
                dropout=0.1, lr=1e-3, lr_schedule="linear", betas=(0.9, 0.99), weight_decay=0.01,
                no_decay_bias_norm=True, clip=1.0, batch_size=64, max_batch_tokens=2048, **GPT2_CONVERGED_CPU_RECIPE,
                decode_max_len=1000, decode_max_len_nongreedy=None, num_decode_contexts=128,
                num_decode_contexts_nongreedy=64, decode_batch_size=128, num_eos_lines=12),
    # paper: Choi, Cho, Lee (2023) Sec. 4.2 and App. D: pretrained GPT-2 (124M) fine-tuned on WikiText-103.
    "paper": dict(vocab_cap=None, max_train_tokens=None, max_eval_tokens=None, dataset="wikitext-103",
                  pretrained="gpt2", hidden=768, layers=12, dropout=0.1, lr=5e-5, lr_schedule="linear",
                  lr_decay_steps=500_000, max_steps=300_000, betas=(0.9, 0.99), weight_decay=0.01,
                  no_decay_bias_norm=True, clip=1.0, batch_size=1024, max_batch_tokens=1024, grad_accum=1,
                  max_epochs=10, patience=2, decode_max_len=1000, num_decode_contexts=None, decode_batch_size=64,
                  num_eos_lines=12),
}
"""Profiles of ``arch="gpt2"`` (Chapter 7, 07_gpt2); see :func:`make_config`."""


FEATURED_EPS = {"quick": 1e-2, "cpu": 5e-4, "paper": 1e-5}
"""The eps whose ST/NMST models get every decoder (the paper's App. F uses its best eps, 1e-5;
the cpu profile uses 5e-4, whose lower bound 1 - (1 - eps)^t reaches 0.22 at t = 500 and 0.5
at t = 1386, so that termination shows within the decoded horizons)."""


def default_decoders(profile: str, head: str, eps: float | None, seed: int = 0, arch: str = "lstm") -> tuple[str, ...]:
    """The decoders a profile runs for a model (Choi, Cho, Lee (2023) Fig. 2 and App. F):
    ``quick``: greedy, top-2, beam-2 for every model. ``cpu``/``paper``: VA gets every decoder
    plus consistent top-k / nucleus (Welleck et al. 2020, Defs. 4.1-4.2); ST/NMST at
    :data:`FEATURED_EPS` get every decoder; other eps get greedy only. In the ``cpu`` profile
    only seed 0 gets more than greedy (the other seeds give Table 1's and Fig. 2's spread).
    The sparse heads of Chapter 8 (08_sparse; entmax, nmst-entmax) get greedy and ancestral
    sampling from their own sparse distribution, which is entmax sampling (Martins et al. (2020)
    eq. 7), at every profile. GPT-2 (``arch="gpt2"``, Chapter 7, 07_gpt2) follows the same rule with
    :data:`GPT2_FEATURED_EPS` (Choi, Cho, Lee (2023) Table 4: top-{2,4}, nucleus-{0.2,0.4},
    beam-{2,4} for VA, ST and NMST at the featured eps)."""
    head = normalise_head(head)
    featured = GPT2_FEATURED_EPS if (isinstance(arch, str) and arch.lower() == "gpt2") else FEATURED_EPS
    if head in SPARSE_HEADS:  # Chapter 8 (08_sparse): greedy and the model's own sampler (entmax sampling)
        return ("greedy", "ancestral")
    if profile == "quick":
        return ("greedy", "top-2", "beam-2")
    if profile == "cpu" and seed != 0:
        return GREEDY_ONLY
    if head == "va":
        return ALL_DECODERS + VA_CONSISTENT_DECODERS
    if eps is not None and math.isclose(eps, featured[profile]):
        return ALL_DECODERS
    return GREEDY_ONLY


SUITE_CHOSEN_FIELDS = ("profile", "arch", "head", "eps", "alpha", "seed")
"""The fields a suite chooses for each of its models; :func:`suite_overrides` refuses them."""


def suite_overrides(overrides: dict) -> dict:
    """``overrides`` checked for a whole suite (``python -m nmst_lib suite FAMILY --set
    FIELD=VALUE``; every family's ``configs(profile, **overrides)``): option fields of
    :data:`~nmst_lib.experiments.config_sections.FIELD_SECTIONS` only, applied to every model of
    the suite on top of the suite's own settings. A model's identity (profile, arch, head, eps,
    alpha, seed) is the suite's to choose: naming one, or an unknown field, is a ValueError. A
    suite trained with overrides is a different suite (every config hash changes); this is how a
    new recipe is trained before a chapter switches its profile to it (issue 23's converged
    recipe, ``scripts/converge_cpu.sh``). Used by the suites of Chapters 6-9."""
    if not isinstance(overrides, dict):
        raise TypeError(f"overrides must be a dict of field names to values, got {type(overrides).__name__}")
    chosen = sorted(set(overrides) & set(SUITE_CHOSEN_FIELDS))
    if chosen:
        raise ValueError(f"a suite chooses {', '.join(SUITE_CHOSEN_FIELDS)} for each of its models; "
                         f"overrides cannot set {', '.join(chosen)}")
    unknown = sorted(set(overrides) - set(FIELD_SECTIONS))
    if unknown:
        raise ValueError(f"unknown config field(s) {', '.join(unknown)} in the suite's overrides; known: "
                         f"{', '.join(sorted(FIELD_SECTIONS))}")
    return dict(overrides)


def make_config(profile: str = "quick", arch: str = "lstm", head: str = "va", eps: float | None = None,
                seed: int = 0, **overrides) -> ExperimentConfig:
    """The config of ``profile`` for one (arch, head, eps, seed), with ``overrides`` applied.

    * ``quick``: a 2 x 32 model on 12k training tokens (4k validation / test tokens), vocabulary
      300, 2 epochs, 24 contexts decoded to L = 40. Seconds; for tests and CI; its numbers mean nothing.
    * ``cpu`` (the website; Chapter 6): :data:`CONVERGED_CPU_RECIPE`: 4,000 BPE pieces learned
      on the training split after WikiText's ``<unk>`` markers are deleted; 2 x 128 RNN / LSTM,
      dropout 0.3, tied; all training sequences of the substitute split; AdamW at lr 2e-3,
      batch 16 (more, smaller steps than the paper's lr 1e-3 / batch 32), betas, weight decay and
      clipping as in the paper, the lr halved after an epoch that gains less than 0.5 % and early
      stopping after two such epochs in a row, at most 60 epochs (measured on one CPU thread:
      20-36 epochs, 20-50 minutes a run; validation perplexity per piece about 182-203 for the
      RNNs, 202-217 for the LSTMs); eps in :data:`CPU_EPS`; seeds 0-2; every decoder runs to
      L = 1e4 (greedy on 128 fixed validation contexts, the other decoders on the first 64 of
      them: a row that never stops costs an output-layer product per step for all 10,000
      steps). Chapters 8 and 9 add the fields of their own recipe
      (:func:`chapter_recipe`: :data:`EPS_PPL_CPU_RECIPE` and :data:`UNIGRAM_HOLD_CPU_RECIPE`).
    * ``paper``: Choi, Cho, Lee (2023) App. D: full vocabulary, RNN 2 x 256 dropout 0.3 / LSTM
      2 x 512 dropout 0.5, tied, AdamW lr 1e-3 betas (0.9, 0.99) wd 0.01, lr halved after a
      non-improving epoch, early stop after 10, <= 70 epochs, batch 32, clip 1.0, eps in
      :data:`PAPER_EPS`, 10 seeds (see :func:`nmst_lib.experiments.runs.suite_configs`),
      L = 1e5. Needs a GPU.

    GPT-2 (``arch="gpt2"``; Chapter 7, 07_gpt2; the GPT-2 BPE vocabulary, eos = ``<|endoftext|>``):

    * ``quick``: a 2-layer GPT-2 (n_embd 32, 2 heads, dropout 0) from scratch on ~6k BPE tokens
      (2k validation / test), linear lr 1e-3, no decay on biases/LayerNorm, batches of <= 64
      sequences and 512 tokens, 2 epochs, 16 contexts decoded to L = 40. Seconds; tests and CI.
    * ``cpu`` (the website; **not pretrained GPT-2**: trained from scratch on the offline text):
      2 layers, n_embd 128, 4 heads, dropout 0.1; AdamW lr 1e-3 with linear decay, betas
      (0.9, 0.99), weight decay 0.01 except biases and LayerNorm, clip 1.0; batches of <= 64
      sequences and 2,048 tokens; :data:`GPT2_CONVERGED_CPU_RECIPE`: the whole substitute
      training split (405,458 BPE tokens) with WikiText's ``<unk>`` markers deleted, the 0.5 %
      plateau rule with patience 2, at most 30 epochs (the linear decay spread over them); eps in
      :data:`GPT2_CPU_EPS`; greedy on 128 validation contexts (the other decoders on 64) to
      L = 1000 (the paper's L). Budget: 5-9 epochs of about 5 minutes per model on one core.
    * ``paper``: Choi, Cho, Lee (2023) Sec. 4.2 and App. D: pretrained ``gpt2`` (124M) fine-tuned
      on WikiText-103, dropout 0.1, AdamW lr 5e-5 with linear decay over 500k steps, at most 300k
      steps, betas (0.9, 0.99), weight decay 0.01 except biases and LayerNorm, batches of <= 1,024
      tokens (fits a 16 GB T4 without accumulation), all validation contexts to L = 1000; early
      stopping after 2 epochs without validation improvement (our choice; max_steps binds first).
      Needs a GPU and the Hugging Face hub.

    Decoders default to :func:`default_decoders`. The entmax heads of Chapter 8 (08_sparse)
    take their ``alpha`` as an override (``make_config("cpu", "lstm", "entmax", alpha=1.5)``) and
    use the same profile defaults as the other heads.
    """
    if profile not in _PROFILE_DEFAULTS:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    arch_key = arch.lower() if isinstance(arch, str) else arch
    if arch_key not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}: choose rnn (tanh RNN), lstm or gpt2")
    if arch_key == "gpt2":
        defaults = dict(_GPT2_PROFILE_DEFAULTS[profile])
        defaults["decoders"] = default_decoders(profile, head, eps, seed, arch="gpt2")
    else:
        defaults = dict(_PROFILE_DEFAULTS[profile]["common"])
        defaults["decoders"] = default_decoders(profile, head, eps, seed)
        defaults.update(_PROFILE_DEFAULTS[profile][arch_key])
    defaults.update(overrides)
    identity = {"profile": profile, "arch": arch_key, "head": head, "eps": eps,
                "seed": seed}
    flat = {**identity, **defaults}
    return validate_config(ExperimentConfig.from_flat(**flat))
