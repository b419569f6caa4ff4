"""The typed sections of an experiment's config (issue 21): one frozen
dataclass per family of options, each with its own validator, and the one table
(:data:`FIELD_SECTIONS`) that routes a flat field name (the names of results'
JSON, of ``--set FIELD=VALUE`` and of ``make_config(..., hidden=128)``) to its
section and attribute.

* :class:`DataOptions`: the corpus and its vocabulary (Chapter 6, 06_wikitext;
  Chapter 7, 07_gpt2 for ``dataset``).
* :class:`ModelOptions`: the network's size (every chapter).
* :class:`TrainingOptions`: the optimiser, its schedule and early stopping
  (Choi, Cho, Lee (2023) App. D; Chapters 6-9).
* :class:`DecodingOptions`: what is measured after training (decoders,
  horizons, contexts).
* :class:`GPT2Options`: Chapter 7 (07_gpt2) only; None for rnn/lstm.
* :class:`TemperatureOptions`: Chapter 9 (09_temperature; Contextual
  Temperature (2020) Sec. 3, eq. 3, 5-7) only; None without a contextual
  temperature and with one softmax.

The checks that involve two sections (e.g. ``select_on`` for entmax heads only) live
in :func:`nmst_lib.experiments.config.validate_config`, which calls these
validators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from .._validation import check_positive_int
from .decoder_names import GREEDY_ONLY, parse_decoder

__all__ = [
    "DATASETS",
    "FIELD_SECTIONS",
    "LR_SCHEDULES",
    "SECTION_TYPES",
    "SELECT_ON",
    "VOCAB_KINDS",
    "DataOptions",
    "DecodingOptions",
    "GPT2Options",
    "ModelOptions",
    "TemperatureOptions",
    "TrainingOptions",
    "check_number",
    "validate_data",
    "validate_decoding",
    "validate_gpt2",
    "validate_model",
    "validate_temperature",
    "validate_training",
]

VOCAB_KINDS = ("word", "bpe")
"""Vocabularies of the RNN/LSTM experiments: whitespace words, or BPE pieces
learned on the training split (Chapter 6, "The data")."""
DATASETS = ("wikitext-2", "wikitext-103")
"""Corpora: WikiText-2 (every arch) and WikiText-103 (GPT-2 only; Choi, Cho,
Lee (2023) Sec. 4.2)."""
SELECT_ON = ("eps_ppl",)
"""Values of ``select_on`` besides None (the head's own validation loss):
``eps_ppl``, the validation epsilon-perplexity of an entmax head (Martins et al.
(2020) eq. 9 at the epsilon that minimises it; Chapter 8)."""
LR_SCHEDULES = ("plateau", "linear")
"""``plateau``: multiply the lr by ``lr_decay`` after an epoch without
validation improvement (Choi, Cho, Lee (2023) App. D, Chapter 6); ``linear``:
lr * max(0, 1 - step / lr_decay_steps) per optimizer step (GPT-2 fine-tuning,
App. D; Chapter 7, 07_gpt2)."""


@dataclass(frozen=True)
class DataOptions:
    """The corpus and its vocabulary (Chapter 6, 06_wikitext, "The data").

    ``data_source`` (see :func:`nmst_lib.data.load_wikitext2`),
    ``substitute_seed``, ``context_len`` k, ``vocab_kind`` (``word``:
    whitespace words; ``bpe``: subword pieces learned on the training split,
    :func:`nmst_lib.data.learn_subword_vocabulary`), ``vocab_cap`` (word: N
    most frequent training words + ``<unk>``, None = all; bpe: the number of
    pieces, specials included, required), ``drop_unk`` (delete the data's own
    ``<unk>`` markers from every split before the vocabulary is built:
    :func:`nmst_lib.data.drop_unk_markers`; for GPT-2, before the text is
    detokenised),
    ``max_train_tokens`` (training sequences kept in order until this many
    tokens; None = all), ``max_eval_tokens`` (the same for the validation and
    test splits), ``dataset`` (``wikitext-2``, or ``wikitext-103`` for GPT-2
    only; Chapter 7, 07_gpt2)."""

    data_source: str = "auto"
    substitute_seed: int = 0
    context_len: int = 10
    vocab_cap: int | None = None
    vocab_kind: str = "word"
    drop_unk: bool = False
    max_train_tokens: int | None = None
    max_eval_tokens: int | None = None
    dataset: str = "wikitext-2"


@dataclass(frozen=True)
class ModelOptions:
    """The network's size: ``hidden`` (embedding size = hidden, tied
    embeddings; GPT-2's n_embd), ``layers`` (GPT-2's n_layer) and ``dropout``
    (Choi, Cho, Lee (2023) App. D; Chapters 6-9)."""

    hidden: int = 256
    layers: int = 2
    dropout: float = 0.3


@dataclass(frozen=True)
class TrainingOptions:
    """Optimisation (Choi, Cho, Lee (2023) App. D; Chapters 6-9): AdamW(``lr``,
    ``betas``, ``weight_decay``) on the mean of the head's own per-token loss;
    the lr is multiplied by ``lr_decay`` after an epoch whose validation score
    does not improve by more than the relative ``min_improvement``
    (``lr_schedule`` ``plateau``), or decays linearly to 0 over
    ``lr_decay_steps`` optimizer steps (``linear``, GPT-2, Chapter 7); training
    stops after ``patience`` non-improving epochs, ``max_epochs`` or
    ``max_steps`` optimizer steps; the best epoch is kept. ``batch_size``
    sequences (and at most ``max_batch_tokens`` padded tokens) per batch,
    ``grad_accum`` micro-batches per optimizer step, gradient-norm clipping at
    ``clip``, ``no_decay_bias_norm``: no weight decay on biases and LayerNorm
    (GPT-2). ``start_below_unigram`` (None: off) holds the plateau rule back
    while the model is still on the unigram plateau: until an epoch's
    validation perplexity falls below this fraction of the unigram model's
    (:func:`~nmst_lib.experiments.evaluation.unigram_perplexity`), an epoch
    without improvement neither decays the lr nor counts towards ``patience``
    (Chapter 9's contextual-temperature models, whose temperatures start at 3,
    spend several epochs there). ``select_on`` (None: the head's own
    validation loss, as perplexity for va/st/nmst and as the mean entmax loss
    for the entmax heads) is what epochs are compared by; ``"eps_ppl"``
    (entmax heads only) compares their validation epsilon-perplexity
    (Martins et al. (2020) eq. 9, Chapter 8), so that the 0.5 % rule means
    the same for them as for a softmax model's perplexity."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = 0.01
    lr_decay: float = 0.5
    max_epochs: int = 70
    patience: int = 10
    min_improvement: float = 0.0
    batch_size: int = 32
    max_batch_tokens: int | None = None
    clip: float = 1.0
    lr_schedule: str = "plateau"
    lr_decay_steps: int | None = None
    max_steps: int | None = None
    grad_accum: int = 1
    no_decay_bias_norm: bool = False
    start_below_unigram: float | None = None
    select_on: str | None = None


@dataclass(frozen=True)
class DecodingOptions:
    """What is measured after training (not the trained weights; Choi, Cho, Lee
    (2023) Fig. 2, App. F; Chapters 6-9): every name in ``decoders`` (see
    :func:`~nmst_lib.experiments.decoder_names.parse_decoder`) decodes
    ``num_decode_contexts`` validation contexts (None = all) up to
    ``decode_max_len`` tokens; decoders other than greedy may use the first
    ``num_decode_contexts_nongreedy`` of them and a shorter
    ``decode_max_len_nongreedy`` (None = as greedy); ``decode_batch_size`` rows
    per batch; ``num_eos_lines`` validation lines get per-token eos
    probabilities."""

    decoders: tuple[str, ...] = GREEDY_ONLY
    decode_max_len: int = 1000
    decode_max_len_nongreedy: int | None = None
    num_decode_contexts: int | None = None
    num_decode_contexts_nongreedy: int | None = None
    decode_batch_size: int = 512
    num_eos_lines: int = 4


@dataclass(frozen=True)
class GPT2Options:
    """GPT-2 (``arch="gpt2"`` only; Choi, Cho, Lee (2023) Sec. 4.2, App. D;
    Chapter 7, 07_gpt2): ``pretrained`` (a Hugging Face name such as ``"gpt2"``
    or a ``save_pretrained`` folder; None = a randomly initialised GPT-2 with
    hidden = n_embd, layers = n_layer) and ``attn_heads`` (n_head of a GPT-2
    from scratch; divides ``hidden``)."""

    pretrained: str | None = None
    attn_heads: int | None = None


@dataclass(frozen=True)
class TemperatureOptions:
    """Contextual temperature and mixtures of softmaxes (Chapter 9,
    09_temperature; Contextual Temperature (2020) Sec. 3, eq. 3, 5-7; RNN/LSTM
    with head va, st or nmst only).

    ``normalisation`` (flat name ``temperature``: ``sigmoid``, ``softmax``,
    ``power-tanh`` or ``shifted-tanh``; None = no contextual temperature),
    ``a``/``b`` (``temperature_a``/``_b``; sigmoid/softmax: tau = (sigma(mu) +
    a) / b, default a = 1, b = 1/2), ``lam`` (``temperature_lambda``;
    power-tanh: lambda ** tanh(mu), default 4; shifted-tanh: tanh(mu) + lambda,
    default 3), ``rank`` (``temperature_rank``: Q of mu = h W1 W2, default
    hidden // 2), ``loss_scaling`` (multiply each token's NLL by the mean
    temperature, Sec. 3.3), ``detach_loss_scale`` (with loss_scaling: the
    factor gets no gradient; False = the literal eq. 7) and ``mixtures`` (M >
    1: a mixture of M softmaxes, eq. 3 and 6, head va only)."""

    normalisation: str | None = None
    a: float | None = None
    b: float | None = None
    lam: float | None = None
    rank: int | None = None
    loss_scaling: bool = False
    detach_loss_scale: bool = False
    mixtures: int = 1


SECTION_TYPES = {
    "data": DataOptions,
    "model": ModelOptions,
    "training": TrainingOptions,
    "decoding": DecodingOptions,
    "gpt2": GPT2Options,
    "temperature": TemperatureOptions,
}
"""Section attribute of :class:`~nmst_lib.experiments.config.ExperimentConfig`
-> its type; ``gpt2`` and ``temperature`` may be None (the family does not use
them)."""


def _route(section, names, renamed=None) -> dict:
    renamed = renamed or {}
    return {renamed.get(n, n): (section, n) for n in names}


FIELD_SECTIONS = {
    **_route(None, ("profile", "arch", "head", "eps", "seed", "alpha")),
    **_route(
        "data",
        (
            "data_source",
            "substitute_seed",
            "context_len",
            "vocab_cap",
            "vocab_kind",
            "drop_unk",
            "max_train_tokens",
            "max_eval_tokens",
        ),
    ),
    **_route("model", ("hidden", "layers", "dropout")),
    **_route(
        "training",
        (
            "lr",
            "betas",
            "weight_decay",
            "lr_decay",
            "max_epochs",
            "patience",
            "min_improvement",
            "start_below_unigram",
            "select_on",
            "batch_size",
            "max_batch_tokens",
            "clip",
        ),
    ),
    **_route("decoding", tuple(f.name for f in fields(DecodingOptions))),
    **_route("data", ("dataset",)),
    **_route("gpt2", ("pretrained", "attn_heads")),
    **_route(
        "training",
        (
            "lr_schedule",
            "lr_decay_steps",
            "max_steps",
            "grad_accum",
            "no_decay_bias_norm",
        ),
    ),
    **_route(
        "temperature",
        (
            "normalisation",
            "a",
            "b",
            "lam",
            "rank",
            "loss_scaling",
            "mixtures",
            "detach_loss_scale",
        ),
        {
            "normalisation": "temperature",
            "a": "temperature_a",
            "b": "temperature_b",
            "lam": "temperature_lambda",
            "rank": "temperature_rank",
        },
    ),
}
"""The one flat vocabulary of a config: flat field name (results' JSON,
``--set``, :func:`~nmst_lib.experiments.config.make_config`,
``ExperimentConfig.replace``) -> (section attribute, or None for the identity
fields on the config itself; attribute in the section). In the order of
:meth:`~nmst_lib.experiments.config.ExperimentConfig.to_dict` (the order of the flat config before the
sections, so that written results keep their layout)."""


# ------------------------------------------------------------ validators


def check_number(value, name):
    """TypeError unless ``value`` is a real number (not a bool, not NaN). Used by the config checks
    of Chapters 6-9."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or math.isnan(value)
    ):
        raise TypeError(f"{name} must be a number, got {value!r}")


def _check_type(section, cls, name):
    if not isinstance(section, cls):
        raise TypeError(
            f"the {name} section must be a {cls.__name__}, got "
            f"{type(section).__name__}"
        )


def _check_bool(value, name):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def _check_optional_positive(section, names):
    for name in names:
        if getattr(section, name) is not None:
            check_positive_int(getattr(section, name), name)


def validate_data(data: DataOptions) -> DataOptions:
    """Checks of :class:`DataOptions` alone (the arch-dependent ones are in
    :func:`~nmst_lib.experiments.config.validate_config`). Used by the configs of Chapters 6-9."""
    _check_type(data, DataOptions, "data")
    if data.dataset not in DATASETS:
        raise ValueError(
            f"unknown dataset {data.dataset!r}: choose one of "
            f"{', '.join(DATASETS)}"
        )
    if data.vocab_kind not in VOCAB_KINDS:
        raise ValueError(
            f"unknown vocab_kind {data.vocab_kind!r}: choose word (whitespace "
            "words, the "
            "vocab_cap most frequent) or bpe (subword pieces learned on the "
            "training split)"
        )
    _check_bool(data.drop_unk, "drop_unk")
    value = data.substitute_seed
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"substitute_seed must be an integer >= 0, got {value!r}"
        )
    if data.data_source not in ("auto", "hub", "local", "substitute"):
        raise ValueError(
            "data_source must be auto, hub, local or substitute, got "
            f"{data.data_source!r}"
        )
    check_positive_int(data.context_len, "context_len")
    _check_optional_positive(
        data, ("vocab_cap", "max_train_tokens", "max_eval_tokens")
    )
    return data


def validate_model(model: ModelOptions) -> ModelOptions:
    """Checks of :class:`ModelOptions`: positive integer sizes, dropout in [0,
    1). Used by the configs of Chapters 6-9."""
    _check_type(model, ModelOptions, "model")
    check_positive_int(model.hidden, "hidden")
    check_positive_int(model.layers, "layers")
    check_number(model.dropout, "dropout")
    if not 0.0 <= model.dropout < 1.0:
        raise ValueError(f"dropout must lie in [0, 1), got {model.dropout!r}")
    return model


def _validate_rates(t: TrainingOptions) -> None:
    """lr_decay in (0, 1], min_improvement in [0, 1), lr and clip > 0,
    weight_decay >= 0."""
    check_number(t.lr_decay, "lr_decay")
    if not 0.0 < t.lr_decay <= 1.0:
        raise ValueError(f"lr_decay must lie in (0, 1], got {t.lr_decay!r}")
    check_number(t.min_improvement, "min_improvement")
    if not 0.0 <= t.min_improvement < 1.0:
        raise ValueError(
            f"min_improvement must lie in [0, 1), got {t.min_improvement!r} "
            "(a relative "
            "threshold, e.g. 0.005 for 0.5 %)"
        )
    if t.start_below_unigram is not None:
        check_number(t.start_below_unigram, "start_below_unigram")
        if not 0.0 < t.start_below_unigram <= 1.0:
            raise ValueError(
                "start_below_unigram must lie in (0, 1] (a fraction of the "
                "unigram model's validation perplexity, e.g. 0.9) or be None "
                f"(no hold), got {t.start_below_unigram!r}"
            )
        if t.lr_schedule != "plateau":
            raise ValueError(
                "start_below_unigram holds back the plateau rule, so it needs "
                f"lr_schedule='plateau', got {t.lr_schedule!r}"
            )
    if t.select_on is not None and t.select_on not in SELECT_ON:
        raise ValueError(
            f"select_on must be None (the head's own validation loss) or one of "
            f"{', '.join(map(repr, SELECT_ON))}, got {t.select_on!r}"
        )
    for name in ("lr", "clip"):
        v = getattr(t, name)
        check_number(v, name)
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v!r}")
    check_number(t.weight_decay, "weight_decay")
    if t.weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {t.weight_decay!r}")


def validate_training(training: TrainingOptions) -> TrainingOptions:
    """Checks of :class:`TrainingOptions`; returns it with ``betas`` as a tuple
    of floats. Used by the configs of Chapters 6-9."""
    _check_type(training, TrainingOptions, "training")
    t = training
    for name in ("max_epochs", "patience", "batch_size", "grad_accum"):
        check_positive_int(getattr(t, name), name)
    _check_optional_positive(t, ("max_batch_tokens", "max_steps"))
    _validate_rates(t)
    betas = tuple(t.betas)
    if len(betas) != 2 or not all(
        isinstance(b, (int, float)) and 0 <= b < 1 for b in betas
    ):
        raise ValueError(
            f"betas must be two numbers in [0, 1), got {t.betas!r}"
        )
    if t.lr_schedule not in LR_SCHEDULES:
        raise ValueError(
            f"unknown lr_schedule {t.lr_schedule!r}: choose plateau (multiply "
            "the lr by lr_decay "
            "after an epoch without validation improvement) or linear (linear "
            "decay to 0 over "
            "lr_decay_steps optimizer steps)"
        )
    if t.lr_decay_steps is not None:
        if t.lr_schedule != "linear":
            raise ValueError(
                "lr_decay_steps applies to lr_schedule 'linear' only; leave "
                "it out (None) for 'plateau'"
            )
        check_positive_int(t.lr_decay_steps, "lr_decay_steps")
    _check_bool(t.no_decay_bias_norm, "no_decay_bias_norm")
    return replace(t, betas=tuple(float(b) for b in betas))


def validate_decoding(decoding: DecodingOptions) -> DecodingOptions:
    """Checks of :class:`DecodingOptions`; returns it with ``decoders`` as a
    tuple. Used by the configs of Chapters 6-9."""
    _check_type(decoding, DecodingOptions, "decoding")
    d = decoding
    check_positive_int(d.decode_max_len, "decode_max_len")
    check_positive_int(d.decode_batch_size, "decode_batch_size")
    _check_optional_positive(
        d,
        (
            "num_decode_contexts",
            "decode_max_len_nongreedy",
            "num_decode_contexts_nongreedy",
        ),
    )
    n = d.num_eos_lines
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"num_eos_lines must be an integer >= 0, got {n!r}")
    decoders = tuple(d.decoders)
    if not decoders:
        raise ValueError(
            "decoders must name at least one decoder, e.g. ('greedy',)"
        )
    if len(set(decoders)) != len(decoders):
        raise ValueError(f"decoders must be distinct, got {decoders}")
    for name in decoders:
        parse_decoder(name)
    return replace(d, decoders=decoders)


def validate_gpt2(gpt2: GPT2Options, hidden) -> GPT2Options:
    """Checks of :class:`GPT2Options` for an ``arch="gpt2"`` config (a
    GPT2Options on another arch is refused by
    :func:`~nmst_lib.experiments.config.validate_config`): ``pretrained`` a
    name or folder, or None with ``attn_heads`` dividing ``hidden`` (Chapter 7, ``07_gpt2``)."""
    _check_type(gpt2, GPT2Options, "gpt2")
    name = gpt2.pretrained
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(
            "pretrained must be a Hugging Face model name (e.g. 'gpt2') or a "
            "folder written by "
            f"GPT2LM.save_pretrained, got {name!r}"
        )
    if gpt2.attn_heads is not None:
        if gpt2.pretrained is not None:
            raise ValueError(
                "attn_heads applies to a GPT-2 trained from scratch only "
                "(arch gpt2, pretrained None); "
                "a pretrained model brings its own; leave it out (None)"
            )
        check_positive_int(gpt2.attn_heads, "attn_heads")
        if isinstance(hidden, int) and hidden % gpt2.attn_heads:
            raise ValueError(
                f"hidden ({hidden}) must be a multiple of attn_heads "
                f"({gpt2.attn_heads}): "
                "each attention head gets hidden / attn_heads dimensions"
            )
    elif gpt2.pretrained is None:
        raise ValueError(
            "a GPT-2 trained from scratch (pretrained None) needs attn_heads, "
            "a divisor of hidden "
            "(e.g. attn_heads=4 with hidden=128), or pretrained='gpt2'"
        )
    return gpt2


def _validate_scaling(t: TemperatureOptions) -> None:
    """mixtures >= 1; loss_scaling and detach_loss_scale booleans, detach only
    with scaling."""
    if (
        isinstance(t.mixtures, bool)
        or not isinstance(t.mixtures, int)
        or t.mixtures < 1
    ):
        raise ValueError(
            "mixtures must be an integer >= 1 (1 = a single softmax; M > 1 = "
            "a mixture of M "
            "softmaxes, Contextual Temperature (2020) eq. 3), got "
            f"{t.mixtures!r}"
        )
    _check_bool(t.loss_scaling, "loss_scaling")
    _check_bool(t.detach_loss_scale, "detach_loss_scale")
    if t.detach_loss_scale and not t.loss_scaling:
        raise ValueError(
            "detach_loss_scale applies with loss_scaling=True only (it says "
            "whether the "
            "mean-temperature factor of Contextual Temperature (2020) eq. 7 "
            "gets a gradient)"
        )


_PARAMS = (
    ("a", "temperature_a"),
    ("b", "temperature_b"),
    ("lam", "temperature_lambda"),
)


def _normalisation_parameter(t, attr, name, norm, uses_ab, defaults):
    """One of a, b, lambda of eq. 5 / Table 3: None where it does not apply,
    else a finite number in its range (the normalisation's default when not
    given)."""
    value = getattr(t, attr)
    if (attr in ("a", "b")) != uses_ab:
        if value is not None:
            own = (
                "temperature_a and temperature_b"
                if uses_ab
                else "temperature_lambda"
            )
            raise ValueError(
                f"{name} does not apply to the {norm} normalisation (its "
                f"parameters: {own}); leave {name} out"
            )
        return None
    value = defaults[attr] if value is None else value
    check_number(value, name)
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if attr in ("a", "b") and not value > 0:
        raise ValueError(
            f"{name} must be > 0 (tau = (sigma + a) / b must stay positive: "
            "its range is "
            f"[a/b, (1+a)/b]), got {value!r}"
        )
    if attr == "lam" and not value > 1:
        raise ValueError(
            f"temperature_lambda must be > 1 for {norm} (Table 3: lambda = 4 "
            "for power-tanh, range "
            "[1/lambda, lambda]; lambda = 3 for shifted-tanh, range "
            "[lambda-1, lambda+1]), "
            f"got {value!r}"
        )
    return value


def validate_temperature(
    temperature: TemperatureOptions, hidden
) -> TemperatureOptions:
    """Checks of :class:`TemperatureOptions` (Contextual Temperature (2020) eq.
    3, 5-7, Table 3; Chapter 9, ``09_temperature``): ``normalisation`` one of
    :data:`nmst_lib.temperature.TEMPERATURE_NORMALISATIONS` or None; a, b > 0
    (sigmoid and softmax) or lambda > 1 (power-tanh and shifted-tanh), filled
    with the normalisation's defaults
    (:func:`nmst_lib.temperature.temperature_defaults`); ``rank`` a positive
    integer, default ``hidden // 2``. The arch and head checks are in
    :func:`~nmst_lib.experiments.config.validate_config`."""
    _check_type(temperature, TemperatureOptions, "temperature")
    t = temperature
    _validate_scaling(t)
    if t.normalisation is None:
        given = [
            name
            for attr, name in _PARAMS + (("rank", "temperature_rank"),)
            if getattr(t, attr) is not None
        ]
        if t.loss_scaling:
            given.append("loss_scaling")
        if given:
            raise ValueError(
                f"{', '.join(given)}: only for a contextual temperature; set "
                "temperature to one of "
                "sigmoid, softmax, power-tanh, shifted-tanh, or leave them out"
            )
        return t
    from ..temperature import TEMPERATURE_NORMALISATIONS, temperature_defaults

    norm = (
        t.normalisation.lower()
        if isinstance(t.normalisation, str)
        else t.normalisation
    )
    if norm not in TEMPERATURE_NORMALISATIONS:
        raise ValueError(
            f"unknown temperature normalisation {t.normalisation!r}: choose "
            "one of "
            f"{', '.join(TEMPERATURE_NORMALISATIONS)} (Contextual Temperature "
            "(2020) eq. 5 "
            "and Table 3)"
        )
    defaults = temperature_defaults(norm)
    uses_ab = norm in ("sigmoid", "softmax")
    params = {
        attr: _normalisation_parameter(t, attr, name, norm, uses_ab, defaults)
        for attr, name in _PARAMS
    }
    rank = t.rank
    if rank is None:
        ok = isinstance(hidden, int) and not isinstance(hidden, bool)
        if not ok or hidden // 2 < 1:
            raise ValueError(
                "temperature_rank defaults to hidden // 2, which needs "
                "hidden >= 2, got hidden "
                f"{hidden!r}; set temperature_rank"
            )
        rank = hidden // 2
    rank = check_positive_int(rank, "temperature_rank")
    return replace(t, normalisation=norm, rank=rank, **params)
