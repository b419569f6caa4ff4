"""Experiment configurations and the three profiles (``quick``, ``cpu``, ``paper``) of the
WikiText-2 experiments of Chapter 6 (06_wikitext), after Choi, Cho, Lee (2023) Sec. 4.1 and
App. D, F, G, and of the GPT-2 fine-tuning experiments of Chapter 7 (07_gpt2), after Choi, Cho,
Lee (2023) Sec. 4.2 and App. D and Welleck et al. (2020) Sec. 5.3 (``arch="gpt2"``), and the
contextual-temperature and mixture-of-softmaxes output layers of Chapter 9 (09_temperature;
Contextual Temperature (2020) Sec. 3, eq. 5-7: the ``temperature*``, ``loss_scaling`` and
``mixtures`` fields).

A config is a frozen dataclass; everything that can change a number in a result is a field,
so its hash (:func:`config_hash`) identifies the result. Runtime choices that cannot change
the numbers (progress bars, checkpoint frequency, output folders) are not fields.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, fields, replace

from .._validation import check_eps, check_positive_int

__all__ = [
    "canonical_hash",
    "PROFILES",
    "VOCAB_KINDS",
    "ARCHS",
    "HEADS",
    "NLL_HEADS",
    "SPARSE_HEADS",
    "EPS_HEADS",
    "PAPER_EPS",
    "CPU_EPS",
    "GPT2_CPU_EPS",
    "GPT2_FEATURED_EPS",
    "DATASETS",
    "LR_SCHEDULES",
    "GPT2_MAX_POSITIONS",
    "GREEDY_ONLY",
    "ALL_DECODERS",
    "VA_CONSISTENT_DECODERS",
    "SCHEMA_VERSION",
    "ExperimentConfig",
    "DecoderSpec",
    "parse_decoder",
    "normalise_head",
    "validate_config",
    "config_hash",
    "training_hash",
    "DECODING_FIELDS",
    "FEATURED_EPS",
    "default_decoders",
    "config_from_dict",
    "make_config",
]

SCHEMA_VERSION = 1
"""Bump when the training or evaluation code changes what a config's numbers mean: every
stored result then becomes STALE."""

PROFILES = ("quick", "cpu", "paper")
VOCAB_KINDS = ("word", "bpe")
"""Vocabularies of the RNN/LSTM experiments: whitespace words, or BPE pieces learned on the
training split (Chapter 6, "The data")."""
ARCHS = ("rnn", "lstm", "gpt2")
"""Model families: tanh RNN and LSTM (Chapter 6, 06_wikitext; Chapter 8, 08_sparse) and GPT-2
(Chapter 7, 07_gpt2; Choi, Cho, Lee (2023) Sec. 4.2)."""
DATASETS = ("wikitext-2", "wikitext-103")
"""Corpora: WikiText-2 (every arch) and WikiText-103 (GPT-2 only; Choi, Cho, Lee (2023) Sec. 4.2)."""
LR_SCHEDULES = ("plateau", "linear")
"""``plateau``: multiply the lr by ``lr_decay`` after an epoch without validation improvement
(Choi, Cho, Lee (2023) App. D, Chapter 6); ``linear``: lr * max(0, 1 - step / lr_decay_steps) per
optimizer step (GPT-2 fine-tuning, App. D; Chapter 7, 07_gpt2)."""
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

GREEDY_ONLY = ("greedy",)
ALL_DECODERS = ("greedy", "ancestral", "top-2", "top-4", "nucleus-0.2", "nucleus-0.4", "beam-2", "beam-4")
"""The decoders of Choi, Cho, Lee (2023) Fig. 2 and App. F (plus ancestral sampling)."""
VA_CONSISTENT_DECODERS = ("consistent-top-2", "consistent-nucleus-0.2")
"""Consistent top-k / nucleus (Welleck et al. 2020, Defs. 4.1-4.2), run on VA models."""


@dataclass(frozen=True)
class DecoderSpec:
    """A decoder name parsed into the arguments of :func:`nmst_lib.decoding.decode`."""

    name: str
    method: str
    k: int | None = None
    p: float | None = None
    beam_size: int | None = None
    consistent: bool = False
    sampling: bool = False
    alpha: float | None = None
    temperature: float | None = None

    def decode_kwargs(self) -> dict:
        """Keyword arguments for :func:`nmst_lib.decoding.decode` (besides ``max_len``)."""
        kw = {"consistent": self.consistent} if self.consistent else {}
        for key in ("k", "p", "beam_size", "alpha", "temperature"):
            if getattr(self, key) is not None:
                kw[key] = getattr(self, key)
        return kw


_DECODER_RE = re.compile(r"^(consistent-)?(greedy|ancestral|top-(\d+)|nucleus-([0-9.]+)|beam-(\d+)"
                         r"|entmax-([0-9.]+)|temperature-([0-9.]+))$")


def _decoder_number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"decoder {name!r}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"decoder {name!r}: the number must be finite, got {text!r}")
    return value


def parse_decoder(name: str) -> DecoderSpec:
    """Parse ``greedy``, ``ancestral``, ``top-K``, ``nucleus-P``, ``beam-B``, and
    ``consistent-top-K`` / ``consistent-nucleus-P`` (Welleck et al. 2020, Defs. 2.5-2.8, 4.1,
    4.2, A.2; Chapter 1, 01_decoding, and Chapter 3, 03_consistent_sampling), plus the decoders
    of Martins et al. (2020) Sec. 3 and 5.1 (Chapter 8, 08_sparse): ``entmax-A`` (entmax
    sampling, eq. 7: sample from alpha-entmax of the model's scores, A > 1, e.g. ``entmax-1.5``)
    and ``temperature-T`` (softmax with temperature, ancestral sampling from softmax(log p / T),
    T > 0, e.g. ``temperature-0.95``)."""
    m = _DECODER_RE.match(name) if isinstance(name, str) else None
    allowed = ("greedy, ancestral, top-K, nucleus-P, beam-B, consistent-top-K, consistent-nucleus-P, entmax-A, "
               "temperature-T")
    if m is None:
        raise ValueError(f"unknown decoder {name!r}: use one of {allowed} (e.g. top-2, nucleus-0.4, beam-4, "
                         "entmax-1.5, temperature-0.95)")
    consistent = m.group(1) is not None
    if m.group(6) is not None:
        alpha = _decoder_number(m.group(6), name)
        if not alpha > 1.0:
            raise ValueError(f"entmax sampling needs alpha > 1, got {alpha} in {name!r} (alpha = 1 is softmax: "
                             "use 'ancestral')")
        spec = DecoderSpec(name, "entmax", alpha=alpha, sampling=True)
    elif m.group(7) is not None:
        temperature = _decoder_number(m.group(7), name)
        if not temperature > 0.0:
            raise ValueError(f"the temperature must be > 0, got {temperature} in {name!r} (use 'greedy' for the "
                             "limit T -> 0)")
        spec = DecoderSpec(name, "ancestral", temperature=temperature, sampling=True)
    elif m.group(3) is not None:
        spec = DecoderSpec(name, "top-k", k=check_positive_int(int(m.group(3)), "top-k's k"), sampling=True,
                           consistent=consistent)
    elif m.group(4) is not None:
        p = float(m.group(4))
        if not 0.0 < p <= 1.0:
            raise ValueError(f"nucleus p must lie in (0, 1], got {p} in {name!r}")
        spec = DecoderSpec(name, "nucleus", p=p, sampling=True, consistent=consistent)
    elif m.group(5) is not None:
        spec = DecoderSpec(name, "beam", beam_size=check_positive_int(int(m.group(5)), "beam size"))
    else:
        spec = DecoderSpec(name, m.group(2), sampling=m.group(2) == "ancestral")
    if consistent and (spec.method not in ("top-k", "nucleus")):
        raise ValueError(f"'consistent-' applies to top-K and nucleus-P only, got {name!r}")
    return spec


def normalise_head(head: str) -> str:
    """``va``/``vanilla``/``softmax`` -> ``va``; ``st``; ``nmst``; ``entmax``;
    ``nmst-entmax``/``nmst_entmax`` -> ``nmst-entmax`` (case-insensitive)."""
    key = head.lower() if isinstance(head, str) else head
    if key not in _HEAD_ALIASES:
        raise ValueError(f"unknown head {head!r}: choose one of va (vanilla softmax), st, nmst, entmax "
                         "(alpha-entmax, Chapter 8), nmst-entmax (NMST eos + alpha-entmax, Chapter 8)")
    return _HEAD_ALIASES[key]


def _short_count(n: int) -> str:
    """``8000`` -> ``"8k"``, ``8192`` -> ``"8192"``: a vocabulary size in a key."""
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def _short_eps(eps: float) -> str:
    """eps in scientific notation with the fewest mantissa digits that give it back exactly:
    ``1e-04``, ``5e-04``, ``2.5e-03`` (one digit would print 2.5e-3 as ``3e-03``). Keys and labels
    of Chapters 6-8 (every eps of Chapter 6 and 8 has one digit, so their keys are unchanged)."""
    for digits in range(16):
        text = f"{eps:.{digits}e}"
        if float(text) == eps:
            return text
    return repr(eps)


@dataclass(frozen=True)
class ExperimentConfig:
    """One WikiText-2 run: data, model, optimisation, decoding (Choi, Cho, Lee (2023)
    Sec. 4.1, App. D; Chapter 6, 06_wikitext). Build with :func:`make_config` to get a
    profile's defaults.

    Data: ``data_source`` (see :func:`nmst_lib.data.load_wikitext2`), ``substitute_seed``,
    ``context_len`` k, ``vocab_kind`` (``word``: whitespace words; ``bpe``: subword pieces learned on
    the training split, :func:`nmst_lib.data.learn_subword_vocabulary`), ``vocab_cap`` (word:
    N most frequent training words + ``<unk>``, None = all; bpe: the number of pieces, specials
    included, required), ``drop_unk`` (delete the data's own ``<unk>`` markers, WikiText's stand-in
    for its rare words, from every split before the vocabulary is built, so that a model cannot learn
    to say ``<unk>``: :func:`nmst_lib.data.drop_unk_markers`; rnn/lstm only),
    ``max_train_tokens`` (training sequences kept in order until this many tokens; None = all),
    ``max_eval_tokens`` (the same for the validation and test splits; None = all).
    Model: ``arch`` (rnn|lstm), ``head`` (va|st|nmst|entmax|nmst-entmax), ``eps`` (ST, NMST and
    NMST-entmax only), ``alpha`` (entmax and NMST-entmax only: the alpha > 1 of alpha-entmax,
    Martins et al. (2020) eq. 2; Chapter 8, 08_sparse), ``hidden``, ``layers``, ``dropout`` (tied
    embeddings, embedding size = hidden).
    Optimisation: AdamW(``lr``, ``betas``, ``weight_decay``) on the mean of the head's own
    per-token loss (:meth:`nmst_lib.heads.OutputHead.token_losses`: the negative log-likelihood for
    va/st/nmst, the entmax loss of Martins et al. (2020) eq. 6 for entmax, its NMST version for
    nmst-entmax); the learning rate is multiplied by ``lr_decay`` after every epoch whose
    validation score does not improve (by more than the relative ``min_improvement``, default 0:
    any improvement counts); training stops after ``patience`` such epochs in a row or
    ``max_epochs``; the best epoch by validation score is kept. The validation score is the
    validation mean of the head's own loss: for va/st/nmst that is log perplexity, so the
    perplexity itself is compared (as in Chapter 6); for entmax heads perplexity can be infinite
    (a reference word outside the support), so the mean entmax loss is compared; ``batch_size`` sequences (and at most ``max_batch_tokens``
    padded tokens) per batch, bucketed by length; gradient-norm clipping at ``clip``.
    Decoding: every name in ``decoders`` (see :func:`parse_decoder`) decodes a fixed set of
    ``num_decode_contexts`` validation contexts (None = all) once, up to ``decode_max_len``
    tokens; decoders other than greedy may use fewer contexts (the first
    ``num_decode_contexts_nongreedy`` of the same set) and a shorter ``decode_max_len_nongreedy``
    (None = the same as greedy); ``num_eos_lines`` validation lines get per-token eos
    probabilities.

    GPT-2 (``arch="gpt2"``; Choi, Cho, Lee (2023) Sec. 4.2 and App. D; Chapter 7, 07_gpt2) and
    the training options it needs, each left out of :meth:`to_dict` (and so of
    :func:`config_hash`) at its default, so that every Chapter 6 and Chapter 8 config keeps its hash:
    ``dataset`` (``wikitext-2``, or ``wikitext-103`` for GPT-2 only), ``pretrained`` (GPT-2 only:
    a Hugging Face name such as ``"gpt2"`` or a ``save_pretrained`` folder; None = a randomly
    initialised GPT-2 with ``hidden`` = n_embd, ``layers`` = n_layer, ``attn_heads`` = n_head),
    ``attn_heads`` (GPT-2 from scratch only; divides ``hidden``), ``lr_schedule`` (``plateau``: the
    lr_decay rule above; ``linear``: lr * max(0, 1 - step / ``lr_decay_steps``) per optimizer step,
    validation still early-stops), ``lr_decay_steps`` (linear only; None = max_epochs x optimizer
    steps per epoch), ``max_steps`` (stop after this many optimizer steps), ``grad_accum``
    (micro-batches per optimizer step; the loss is normalised by the scored tokens of the whole
    step, so it equals one batch ``grad_accum`` times larger), ``no_decay_bias_norm`` (no weight
    decay on parameters with fewer than 2 dimensions: biases and LayerNorm). ``vocab_cap`` must be
    None for GPT-2 (the BPE vocabulary is fixed).

    Chapter 9 (09_temperature; Contextual Temperature (2020) Sec. 3, eq. 5-7), RNN/LSTM with
    head va, st or nmst only, each left out of :meth:`to_dict` at its default: ``temperature``
    (the normalisation of a per-token, per-context temperature: ``sigmoid``, ``softmax``,
    ``power-tanh`` or ``shifted-tanh``; None = none), ``temperature_a``/``temperature_b``
    (sigmoid/softmax: tau = (sigma(mu) + a) / b, default a = 1, b = 1/2), ``temperature_lambda``
    (power-tanh: lambda ** tanh(mu), default 4; shifted-tanh: tanh(mu) + lambda, default 3),
    ``temperature_rank`` (Q of mu = h W1 W2, default ``hidden // 2``), ``loss_scaling`` (multiply
    each token's NLL by the mean temperature, Sec. 3.3), ``detach_loss_scale`` (with loss_scaling:
    the factor gets no gradient, a constant weight per position, which is the gradient the paper's
    softmax normalisation gives; False = the literal eq. 7, whose factor gradient pushes every
    temperature down) and ``mixtures`` (M > 1: a mixture of M softmaxes, eq. 3 and 6, head va only).
    """

    profile: str = "quick"
    arch: str = "lstm"
    head: str = "va"
    eps: float | None = None
    seed: int = 0
    alpha: float | None = None
    # data
    data_source: str = "auto"
    substitute_seed: int = 0
    context_len: int = 10
    vocab_cap: int | None = None
    vocab_kind: str = "word"
    drop_unk: bool = False
    max_train_tokens: int | None = None
    max_eval_tokens: int | None = None
    # model
    hidden: int = 256
    layers: int = 2
    dropout: float = 0.3
    # optimisation
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
    # decoding
    decoders: tuple[str, ...] = GREEDY_ONLY
    decode_max_len: int = 1000
    decode_max_len_nongreedy: int | None = None
    num_decode_contexts: int | None = None
    num_decode_contexts_nongreedy: int | None = None
    decode_batch_size: int = 512
    num_eos_lines: int = 4
    # Chapter 7 (07_gpt2): left out of to_dict at these defaults (see _OMITTED_AT_DEFAULT)
    dataset: str = "wikitext-2"
    pretrained: str | None = None
    attn_heads: int | None = None
    lr_schedule: str = "plateau"
    lr_decay_steps: int | None = None
    max_steps: int | None = None
    grad_accum: int = 1
    no_decay_bias_norm: bool = False
    # Chapter 9 (09_temperature): left out of to_dict at these defaults (see _OMITTED_AT_DEFAULT)
    temperature: str | None = None
    temperature_a: float | None = None
    temperature_b: float | None = None
    temperature_lambda: float | None = None
    temperature_rank: int | None = None
    loss_scaling: bool = False
    mixtures: int = 1
    detach_loss_scale: bool = False

    @property
    def key(self) -> str:
        """File-name key: profile, arch, head, eps, alpha, seed (the identity of a run in a suite),
        e.g. ``cpu-lstm-nmst-eps5e-4-seed0``, ``cpu-lstm-entmax-a1.5-seed0``,
        ``cpu-lstm-nmst-entmax-eps5e-4-a1.5-seed0``; eps with as many digits as it needs
        (``cpu-gpt2-st-eps2.5e-3-seed0``, not ``eps3e-3``)."""
        eps = "" if self.eps is None else f"-eps{_short_eps(self.eps)}".replace("e-0", "e-")
        alpha = "" if self.alpha is None else f"-a{self.alpha:g}"
        vocab = "" if self.vocab_kind == "word" else f"-{self.vocab_kind}{_short_count(self.vocab_cap)}"
        vocab += "-nounk" if self.drop_unk else ""
        return f"{self.profile}-{self.arch}-{self.head}{eps}{alpha}{self._temperature_key()}{vocab}-seed{self.seed}"

    def _temperature_key(self) -> str:
        """The Chapter 9 (09_temperature) part of :attr:`key`: ``-mos{M}`` for a mixture of M
        softmaxes (Contextual Temperature (2020) eq. 3), then ``-ct-`` and the normalisation of
        eq. 5 / Table 3 (``sig-a1-b0.5``, ``smax-a1-b0.5``, ``pow-l4``, ``shift-l3``), ``-nols``
        without the loss scaling of Sec. 3.3, ``-lsdet`` with it detached (``detach_loss_scale``),
        and ``-q{rank}`` when the rank Q of W1 W2 is not
        ``hidden // 2``. Empty for every config of Chapters 6-8."""
        out = f"-mos{self.mixtures}" if self.mixtures != 1 else ""
        if self.temperature is None:
            return out
        short = {"sigmoid": "sig", "softmax": "smax", "power-tanh": "pow", "shifted-tanh": "shift"}[self.temperature]
        if self.temperature in ("sigmoid", "softmax"):
            norm = f"{short}-a{self.temperature_a:g}-b{self.temperature_b:g}"
        else:
            norm = f"{short}-l{self.temperature_lambda:g}"
        out += "-ct-" + norm + ("-lsdet" if self.detach_loss_scale else "" if self.loss_scaling else "-nols")
        if self.temperature_rank is not None and self.temperature_rank != self.hidden // 2:
            out += f"-q{self.temperature_rank}"
        return out

    @property
    def label(self) -> str:
        """Short label for plots, e.g. ``NMST+LSTM (eps=1e-04)``, ``ENTMAX+LSTM (alpha=1.5)``."""
        parts = ([] if self.eps is None else [f"eps={_short_eps(self.eps)}"]) + (
            [] if self.alpha is None else [f"alpha={self.alpha:g}"])
        head = self.head.upper()
        if self.mixtures != 1:  # Chapter 9 (09_temperature): MoS / CT-MoS, CT-VA, CT-NMST
            head = "MoS" if head == "VA" else f"{head}-MoS"
            parts.append(f"M={self.mixtures}")
        if self.temperature is not None:
            head = f"CT-{head}"
            if self.temperature in ("sigmoid", "softmax"):
                parts.append(f"{self.temperature} a={self.temperature_a:g} b={self.temperature_b:g}")
            else:
                parts.append(f"{self.temperature} lambda={self.temperature_lambda:g}")
            if not self.loss_scaling:
                parts.append("no LS")
            elif self.detach_loss_scale:
                parts.append("LS detached")
            if self.temperature_rank is not None and self.temperature_rank != self.hidden // 2:
                parts.append(f"Q={self.temperature_rank}")
        extra = f" ({', '.join(parts)})" if parts else ""
        return f"{head}+{self.arch.upper()}{extra}"

    def to_dict(self) -> dict:
        """JSON-ready dict of every field (tuples become lists). ``alpha`` is left out when it is
        None (every head but entmax and nmst-entmax), and the fields added for GPT-2 (Chapter 7,
        07_gpt2: dataset, pretrained, attn_heads, lr_schedule, lr_decay_steps, max_steps,
        grad_accum, no_decay_bias_norm) and for Chapter 9 (09_temperature: temperature,
        temperature_a, temperature_b, temperature_lambda, temperature_rank, loss_scaling, mixtures, detach_loss_scale)
        when they are at their defaults, so that configs written before those fields existed
        (Chapter 6's, 7's and 8's committed results) keep their :func:`config_hash`."""
        d = asdict(self)
        d["betas"] = list(self.betas)
        d["decoders"] = list(self.decoders)
        for name, default in _OMITTED_AT_DEFAULT.items():
            if d[name] == default and type(d[name]) is type(default):
                del d[name]
        return d

    def replace(self, **changes) -> "ExperimentConfig":
        """A validated copy with ``changes`` applied."""
        return validate_config(replace(self, **changes))


_OMITTED_AT_DEFAULT = {"alpha": None, "vocab_kind": "word", "drop_unk": False, "min_improvement": 0.0, "dataset": "wikitext-2", "pretrained": None, "attn_heads": None,
                       "lr_schedule": "plateau", "lr_decay_steps": None, "max_steps": None, "grad_accum": 1,
                       "no_decay_bias_norm": False,
                       "temperature": None, "temperature_a": None, "temperature_b": None, "temperature_lambda": None,
                       "temperature_rank": None, "loss_scaling": False, "mixtures": 1, "detach_loss_scale": False}
"""Fields that :meth:`ExperimentConfig.to_dict` leaves out at these values (they postdate
Chapter 6's committed results, whose hashes must not change)."""


def _check_number(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise TypeError(f"{name} must be a number, got {value!r}")


def validate_config(config: ExperimentConfig) -> ExperimentConfig:
    """Check every field and return the config with normalised names; raises ValueError /
    TypeError saying what to change (before any data is loaded or any training starts). Longer
    than most functions because it is a flat list of independent checks, one per field in the
    order of the fields; the GPT-2 and Chapter 9 fields have their own functions."""
    if not isinstance(config, ExperimentConfig):
        raise TypeError(f"expected an ExperimentConfig, got {type(config).__name__}")
    changes = {}
    if config.profile not in PROFILES:
        raise ValueError(f"unknown profile {config.profile!r}: choose one of {', '.join(PROFILES)}")
    arch = config.arch.lower() if isinstance(config.arch, str) else config.arch
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {config.arch!r}: choose rnn (tanh RNN), lstm or gpt2")
    changes["arch"] = arch
    changes.update(_validate_gpt2_and_schedule(config, arch))
    head = normalise_head(config.head)
    changes["head"] = head
    changes.update(_validate_temperature(config, arch, head))
    if head not in EPS_HEADS:
        if config.eps is not None:
            raise ValueError(f"eps applies to the st, nmst and nmst-entmax heads only; leave it out (None) for "
                             f"head {head}")
    else:
        if config.eps is None:
            raise ValueError(f"head {head} needs eps in (0, 1), e.g. 1e-4 (the paper uses {PAPER_EPS})")
        changes["eps"] = check_eps(config.eps)
    if head in SPARSE_HEADS:
        if config.alpha is None:
            raise ValueError(f"head {head} needs alpha > 1 (alpha-entmax; Martins et al. (2020) use 1.2 on "
                             "WikiText-2, 1.5 is the exact sort-based entmax15)")
        _check_number(config.alpha, "alpha")
        if not (math.isfinite(config.alpha) and config.alpha > 1):
            raise ValueError(f"alpha must be a finite number > 1 for head {head} (alpha = 1 is softmax: use "
                             f"{'va' if head == 'entmax' else 'nmst'}), got {config.alpha!r}")
        changes["alpha"] = float(config.alpha)
    elif config.alpha is not None:
        raise ValueError(f"alpha applies to the entmax and nmst-entmax heads only; leave it out (None) for head "
                         f"{head}")
    for name in ("seed", "substitute_seed"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if config.data_source not in ("auto", "hub", "local", "substitute"):
        raise ValueError(f"data_source must be auto, hub, local or substitute, got {config.data_source!r}")
    for name in ("context_len", "hidden", "layers", "max_epochs", "patience", "batch_size", "decode_max_len",
                 "decode_batch_size"):
        check_positive_int(getattr(config, name), name)
    for name in ("vocab_cap", "max_train_tokens", "max_eval_tokens", "max_batch_tokens", "num_decode_contexts",
                 "decode_max_len_nongreedy", "num_decode_contexts_nongreedy"):
        if getattr(config, name) is not None:
            check_positive_int(getattr(config, name), name)
    if isinstance(config.num_eos_lines, bool) or not isinstance(config.num_eos_lines, int) or config.num_eos_lines < 0:
        raise ValueError(f"num_eos_lines must be an integer >= 0, got {config.num_eos_lines!r}")
    for name, lo, hi, closed_hi in (("dropout", 0.0, 1.0, False), ("lr_decay", 0.0, 1.0, True),
                                    ("min_improvement", 0.0, 1.0, False)):
        v = getattr(config, name)
        _check_number(v, name)
        if not (lo <= v < hi or (closed_hi and v == hi)) or (name == "lr_decay" and v == 0):
            raise ValueError(f"{name} must lie in {'(0, 1]' if name == 'lr_decay' else '[0, 1)'}, got {v!r}"
                             + (" (a relative threshold, e.g. 0.005 for 0.5 %)" if name == "min_improvement" else ""))
    for name in ("lr", "clip"):
        v = getattr(config, name)
        _check_number(v, name)
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v!r}")
    _check_number(config.weight_decay, "weight_decay")
    if config.weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {config.weight_decay!r}")
    betas = tuple(config.betas)
    if len(betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in betas):
        raise ValueError(f"betas must be two numbers in [0, 1), got {config.betas!r}")
    changes["betas"] = tuple(float(b) for b in betas)
    decoders = tuple(config.decoders)
    if not decoders:
        raise ValueError("decoders must name at least one decoder, e.g. ('greedy',)")
    if len(set(decoders)) != len(decoders):
        raise ValueError(f"decoders must be distinct, got {decoders}")
    for name in decoders:
        parse_decoder(name)
    changes["decoders"] = decoders
    if arch == "gpt2":
        longest = max(config.decode_max_len, config.decode_max_len_nongreedy or 0)
        if config.context_len + longest > GPT2_MAX_POSITIONS:
            raise ValueError(f"GPT-2 attends to {GPT2_MAX_POSITIONS} positions: context_len ({config.context_len}) + "
                             f"the longest decode_max_len ({longest}) must not exceed it; the paper uses L = 1000 "
                             "with k = 10")
    return replace(config, **changes)


def _validate_temperature(config: ExperimentConfig, arch: str, head: str) -> dict:
    """Checks of the Chapter 9 (09_temperature) fields: ``temperature`` (one of
    :data:`nmst_lib.temperature.TEMPERATURE_NORMALISATIONS`; None = no contextual temperature),
    ``temperature_a``/``temperature_b`` (sigmoid and softmax, Contextual Temperature (2020) eq. 5:
    a > 0, b > 0), ``temperature_lambda`` (power-tanh and shifted-tanh, Table 3: lambda > 1),
    ``temperature_rank`` (Q of W1 W2, a positive integer), ``loss_scaling`` (Sec. 3.3) and
    ``mixtures`` (M of the mixture of softmaxes, eq. 3 and 6). Fills the normalisation's
    defaults (``nmst_lib.temperature.temperature_defaults``) and the rank ``hidden // 2``. Returns
    the normalised values; raises ValueError / TypeError saying what is allowed. One flat list of
    checks, in the order of the fields (hence its length)."""
    changes = {}
    mixtures = config.mixtures
    if isinstance(mixtures, bool) or not isinstance(mixtures, int) or mixtures < 1:
        raise ValueError(f"mixtures must be an integer >= 1 (1 = a single softmax; M > 1 = a mixture of M softmaxes, "
                         f"Contextual Temperature (2020) eq. 3), got {mixtures!r}")
    if not isinstance(config.loss_scaling, bool):
        raise TypeError(f"loss_scaling must be True or False, got {config.loss_scaling!r}")
    if not isinstance(config.detach_loss_scale, bool):
        raise TypeError(f"detach_loss_scale must be True or False, got {config.detach_loss_scale!r}")
    if config.detach_loss_scale and not config.loss_scaling:
        raise ValueError("detach_loss_scale applies with loss_scaling=True only (it says whether the mean-temperature "
                         "factor of Contextual Temperature (2020) eq. 7 gets a gradient)")
    ct_fields = ("temperature_a", "temperature_b", "temperature_lambda", "temperature_rank")
    if config.temperature is None:
        given = [name for name in ct_fields if getattr(config, name) is not None]
        if config.loss_scaling:
            given.append("loss_scaling")
        if given:
            raise ValueError(f"{', '.join(given)}: only for a contextual temperature; set temperature to one of "
                             "sigmoid, softmax, power-tanh, shifted-tanh, or leave them out")
    if config.temperature is None and mixtures == 1:
        return changes
    if arch == "gpt2":
        raise ValueError("contextual temperature and mixtures of softmaxes are implemented for RNNLM/LSTMLM "
                         "(Chapter 9); use arch rnn or lstm, or leave temperature and mixtures out for gpt2")
    if head in SPARSE_HEADS:
        raise ValueError(f"contextual temperature and mixtures of softmaxes need a softmax-based head (va, st or "
                         f"nmst), got head {head}")
    if mixtures > 1 and head != "va":
        raise ValueError(f"a mixture of softmaxes (mixtures={mixtures}) is implemented with head va only (MoS / "
                         f"CT-MoS, Contextual Temperature (2020) eq. 3 and 6), got head {head}")
    if config.temperature is None:
        return changes
    from ..temperature import TEMPERATURE_NORMALISATIONS, temperature_defaults

    norm = config.temperature.lower() if isinstance(config.temperature, str) else config.temperature
    if norm not in TEMPERATURE_NORMALISATIONS:
        raise ValueError(f"unknown temperature normalisation {config.temperature!r}: choose one of "
                         f"{', '.join(TEMPERATURE_NORMALISATIONS)} (Contextual Temperature (2020) eq. 5 and Table 3)")
    changes["temperature"] = norm
    defaults = temperature_defaults(norm)
    uses_ab = norm in ("sigmoid", "softmax")
    for name, short in (("temperature_a", "a"), ("temperature_b", "b"), ("temperature_lambda", "lam")):
        value = getattr(config, name)
        applies = uses_ab if short in ("a", "b") else not uses_ab
        if not applies:
            if value is not None:
                raise ValueError(f"{name} does not apply to the {norm} normalisation (its parameters: "
                                 f"{'temperature_a and temperature_b' if uses_ab else 'temperature_lambda'}); "
                                 f"leave {name} out")
            continue
        if value is None:
            value = defaults[short]
        _check_number(value, name)
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
        if short in ("a", "b") and not value > 0:
            raise ValueError(f"{name} must be > 0 (tau = (sigma + a) / b must stay positive: its range is "
                             f"[a/b, (1+a)/b]), got {value!r}")
        if short == "lam" and not value > 1:
            raise ValueError(f"temperature_lambda must be > 1 for {norm} (Table 3: lambda = 4 for power-tanh, range "
                             f"[1/lambda, lambda]; lambda = 3 for shifted-tanh, range [lambda-1, lambda+1]), "
                             f"got {value!r}")
        changes[name] = value
    rank = config.temperature_rank
    if rank is None:
        hidden = config.hidden if isinstance(config.hidden, int) and not isinstance(config.hidden, bool) else None
        if hidden is None or hidden // 2 < 1:
            raise ValueError(f"temperature_rank defaults to hidden // 2, which needs hidden >= 2, got hidden "
                             f"{config.hidden!r}; set temperature_rank")
        rank = hidden // 2
    changes["temperature_rank"] = check_positive_int(rank, "temperature_rank")
    return changes


def _validate_gpt2_and_schedule(config: ExperimentConfig, arch: str) -> dict:
    """Checks of the fields added for GPT-2 fine-tuning (Choi, Cho, Lee (2023) Sec. 4.2, App. D;
    Chapter 7, 07_gpt2): dataset, pretrained, attn_heads, vocab_cap, lr_schedule, lr_decay_steps,
    max_steps, grad_accum, no_decay_bias_norm. Returns the normalised values; raises ValueError /
    TypeError saying what is allowed."""
    changes = {}
    if config.dataset not in DATASETS:
        raise ValueError(f"unknown dataset {config.dataset!r}: choose one of {', '.join(DATASETS)}")
    if config.dataset == "wikitext-103" and arch != "gpt2":
        raise ValueError("dataset 'wikitext-103' is for arch gpt2 only (Choi, Cho, Lee (2023) Sec. 4.2); the RNN/LSTM "
                         "experiments use 'wikitext-2'")
    if config.pretrained is not None:
        if arch != "gpt2":
            raise ValueError(f"pretrained applies to arch gpt2 only; leave it out (None) for arch {arch}")
        if not isinstance(config.pretrained, str) or not config.pretrained.strip():
            raise ValueError(f"pretrained must be a Hugging Face model name (e.g. 'gpt2') or a folder written by "
                             f"GPT2LM.save_pretrained, got {config.pretrained!r}")
    if config.attn_heads is not None:
        if arch != "gpt2" or config.pretrained is not None:
            raise ValueError("attn_heads applies to a GPT-2 trained from scratch only (arch gpt2, pretrained None); "
                             "a pretrained model brings its own; leave it out (None)")
        check_positive_int(config.attn_heads, "attn_heads")
        if isinstance(config.hidden, int) and config.hidden % config.attn_heads:
            raise ValueError(f"hidden ({config.hidden}) must be a multiple of attn_heads ({config.attn_heads}): "
                             "each attention head gets hidden / attn_heads dimensions")
    elif arch == "gpt2" and config.pretrained is None:
        raise ValueError("a GPT-2 trained from scratch (pretrained None) needs attn_heads, a divisor of hidden "
                         "(e.g. attn_heads=4 with hidden=128), or pretrained='gpt2'")
    if config.vocab_kind not in VOCAB_KINDS:
        raise ValueError(f"unknown vocab_kind {config.vocab_kind!r}: choose word (whitespace words, the "
                         "vocab_cap most frequent) or bpe (subword pieces learned on the training split)")
    if config.vocab_kind == "bpe" and (arch == "gpt2" or config.vocab_cap is None):
        raise ValueError("vocab_kind bpe needs vocab_cap, the number of pieces (e.g. 8000), and an rnn or lstm "
                         f"(GPT-2 has its own BPE); got arch {arch!r}, vocab_cap {config.vocab_cap!r}")
    if not isinstance(config.drop_unk, bool):
        raise TypeError(f"drop_unk must be True or False, got {config.drop_unk!r}")
    if config.drop_unk and arch == "gpt2":
        raise ValueError("drop_unk applies to arch rnn or lstm only: GPT-2 reads the raw text, which has no <unk> "
                         "markers; leave it out (False)")
    if arch == "gpt2" and config.vocab_cap is not None:
        raise ValueError(f"vocab_cap must be None for arch gpt2: the GPT-2 BPE vocabulary is fixed (50,257 ids), "
                         f"got {config.vocab_cap!r}")
    if config.lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"unknown lr_schedule {config.lr_schedule!r}: choose plateau (multiply the lr by lr_decay "
                         "after an epoch without validation improvement) or linear (linear decay to 0 over "
                         "lr_decay_steps optimizer steps)")
    if config.lr_decay_steps is not None:
        if config.lr_schedule != "linear":
            raise ValueError("lr_decay_steps applies to lr_schedule 'linear' only; leave it out (None) for 'plateau'")
        check_positive_int(config.lr_decay_steps, "lr_decay_steps")
    if config.max_steps is not None:
        check_positive_int(config.max_steps, "max_steps")
    check_positive_int(config.grad_accum, "grad_accum")
    if not isinstance(config.no_decay_bias_norm, bool):
        raise TypeError(f"no_decay_bias_norm must be True or False, got {config.no_decay_bias_norm!r}")
    return changes


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
    under any decoding settings."""
    d = {k: v for k, v in config.to_dict().items() if k not in DECODING_FIELDS and k != "profile"}
    return canonical_hash({"schema": SCHEMA_VERSION, "training": d})


def config_hash(config: ExperimentConfig) -> str:
    """sha256 (first 16 hex digits) of the canonical JSON of every field plus
    :data:`SCHEMA_VERSION`: equal hashes mean the same experiment with the same code semantics."""
    return canonical_hash({"schema": SCHEMA_VERSION, "config": config.to_dict()})


def config_from_dict(d: dict) -> ExperimentConfig:
    """Inverse of :meth:`ExperimentConfig.to_dict` (unknown keys are an error)."""
    names = {f.name for f in fields(ExperimentConfig)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown config fields {sorted(unknown)}; known: {sorted(names)}")
    d = dict(d)
    if "betas" in d:
        d["betas"] = tuple(d["betas"])
    if "decoders" in d:
        d["decoders"] = tuple(d["decoders"])
    return validate_config(ExperimentConfig(**d))


# ---------------------------------------------------------------------------------- profiles

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
        common=dict(vocab_cap=5000, max_train_tokens=None, hidden=128, layers=2, dropout=0.3, lr=2e-3,
                    batch_size=16, max_epochs=4, patience=2, decode_max_len=10_000, decode_max_len_nongreedy=None,
                    num_decode_contexts=128, num_decode_contexts_nongreedy=64, num_eos_lines=6,
                    decode_batch_size=512),
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
    "cpu": dict(vocab_cap=None, max_train_tokens=150_000, max_eval_tokens=None, hidden=128, layers=2, attn_heads=4,
                dropout=0.1, lr=1e-3, lr_schedule="linear", betas=(0.9, 0.99), weight_decay=0.01,
                no_decay_bias_norm=True, clip=1.0, batch_size=64, max_batch_tokens=2048, max_epochs=2, patience=1,
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


def make_config(profile: str = "quick", arch: str = "lstm", head: str = "va", eps: float | None = None,
                seed: int = 0, **overrides) -> ExperimentConfig:
    """The config of ``profile`` for one (arch, head, eps, seed), with ``overrides`` applied.

    * ``quick``: a 2 x 32 model on 12k training tokens (4k validation / test tokens), vocabulary
      300, 2 epochs, 24 contexts decoded to L = 40. Seconds; for tests and CI; its numbers mean nothing.
    * ``cpu`` (the website; Chapter 6's cpu suite of 30 runs takes about 3 CPU hours, i.e.
      about 1.5 h as two single-thread processes on a 2-core machine): vocabulary capped to the
      5,000 most frequent training words + ``<unk>``; 2 x 128 RNN / LSTM, dropout 0.3, tied;
      all training sequences (about 330k scored tokens of the substitute split); 4 epochs of
      AdamW at lr 2e-3, batch 16 (more, smaller steps than the paper's lr 1e-3 / batch 32,
      which after 2 epochs left an RNN at validation perplexity 255 instead of 197), betas,
      weight decay, clipping and lr halving as in the paper (validation perplexity after 4
      epochs: about 127 for the RNN, 155 for the LSTM; greedy continuations of the vanilla
      models still loop for most contexts); eps in :data:`CPU_EPS`; seeds 0-2; every decoder
      runs to L = 1e4 (greedy on 128 fixed validation contexts, the other decoders on the first
      64 of them: a row that never stops costs an output-layer product per step for all
      10,000 steps).
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
      sequences and 2,048 tokens; ~150k training BPE tokens, 2 epochs, patience 1; eps in
      :data:`GPT2_CPU_EPS`; greedy on 128 validation contexts (the other decoders on 64) to
      L = 1000 (the paper's L). Budget: about 5 minutes of training per model on 2 threads.
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
    names = {f.name for f in fields(ExperimentConfig)}
    unknown = set(defaults) - names
    if unknown:
        raise ValueError(f"unknown config fields {sorted(unknown)}; known: {sorted(names)}")
    return validate_config(ExperimentConfig(profile=profile, arch=arch_key, head=head, eps=eps, seed=seed, **defaults))
