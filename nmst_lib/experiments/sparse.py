"""Chapter 8 (08_sparse): the sparse-text-generation experiments of Martins et al. (2020) Sec. 5.1
on WikiText-2, at the book's profiles, with an NMST-entmax model beside them.

Models (one LSTM each, trained by :func:`nmst_lib.experiments.trainer.train`, the loop of Chapter 6,
on the same data pipeline and, without the official training split, the same named substitute):

* **softmax / NLL** (head ``va``): exactly Chapter 6's LSTM VA seed 0 training config
  (``cpu-lstm-va-bpe4k-nounk-seed0`` at the ``cpu`` profile; same
  :func:`~nmst_lib.experiments.config.training_hash`, so its checkpoint is reused when present);
* **entmax loss** (head ``entmax``) with alpha = 1.5 (the exact sort-based entmax15) and alpha = 1.2
  (the paper's WikiText-2 value, Table 3; bisection);
* **NMST-entmax** (head ``nmst-entmax``): eos gets NMST's probability, the other tokens share the
  rest by alpha-entmax; eps as Chapter 6's featured eps (5e-4 at the cpu profile) and alpha = 1.5:
  the same alpha as the entmax-1.5 model, so that the two differ only in how eos is treated, and
  the exact sort-based algorithm (no bisection tolerance in the eos analysis).

Evaluation (:func:`evaluate_sparse`), all on the TEST split under teacher forcing, every scored
test token of the profile (continuation tokens and eos), in batches:

* for every decoder of :attr:`SparseConfig.decoders` (Martins et al. Table 2: softmax = ancestral,
  softmax-tau = ``temperature-0.95``, ``greedy``, ``top-50``, ``nucleus-0.95``, entmax sampling =
  ``entmax-A`` on the softmax model and ``ancestral`` on an entmax-trained model, whose own
  distribution is alpha-entmax): the distribution that decoder samples from at each position
  (:func:`nmst_lib.decoding.decoder_distribution`), then the sparsemax score (eq. 10), JS
  divergence (eq. 11), eps-perplexity with its optimal eps (eq. 9, App. A), REP and WREP
  (windows 16/32/128/512 and their average, Sec. 5.1 fn. 6) of one token sampled per position
  (seeded), and the number of tokens considered per step (Table 4: mean, median, std, min, max);
  every model x decoder pair is stored, which is Table 5 (the loss x decoder ablation);
* eos's fate: the fraction of positions whose distribution has eos in its support, and, at the
  true sentence ends (target = eos), the mean probability of eos and how often it is zero;
* distinct-1/2/3 of free-running continuations of validation contexts under every decoder;
* r_nt(L) up to the profile's L (1e4 at cpu) under each model's natural decoder (ancestral sampling
  from its own distribution: softmax sampling for the NLL model, entmax sampling for the others)
  and greedy, by :func:`nmst_lib.experiments.runs.decode_at_scale` (Choi, Cho, Lee (2023) eq. 11);
* for the softmax model only: full next-token score vectors (logits) of a few validation contexts,
  for the chapter's interactive alpha explorer.

Perplexity is infinite for a sparse distribution as soon as one reference word falls outside its
support (Martins et al. Sec. 4); the entmax models are therefore trained and selected on their own
loss (``val_loss``), and stored perplexities are None where they are infinite.

Results: one JSON per model, ``<results_dir>/sparse/<key>.json``, atomically written, stamped like
Chapter 6's (config and its hash, data description, seeds, code version, environment, command):
:func:`load_sparse_result` / :func:`load_or_run_sparse` / :func:`load_sparse_results`, and table
builders (:func:`table2_rows`, :func:`table4_rows`, :func:`table5_rows`, :func:`distinct_rows`,
:func:`eos_rows`, :func:`rnt_curves`) that return plain rows for :func:`nmst_lib.report.html_table`.
CLI: ``python -m nmst_lib sparse --profile {quick,cpu,paper}``.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .. import data as D
from .._validation import check_positive_int
from .config import (
    FEATURED_EPS,
    NLL_HEADS,
    PROFILES,
    ExperimentConfig,
    canonical_hash,
    chapter_recipe,
    config_from_dict,
    make_config,
    parse_decoder,
    suite_overrides,
    training_hash,
    validate_config,
)
from .distributed import DistContext
from .evaluation import selection_metric
from .family import Family, register, run_family_suite
from .model_setup import _autocast
from .results import (
    CURRENT,
    StoredResult,
    current_records,
    mean_over_seeds,
    training_provenance,
    training_seeds,
    write_json_atomic,
)
from .runs import decode_at_scale, decoding_context_indices
from .trainer import TrainedRun, train

__all__ = [
    "SPARSE_RESULT_SCHEMA",
    "SPARSE_SEEDS",
    "SPARSE_FOLDER",
    "TOP_K",
    "NUCLEUS_P",
    "TEMPERATURE",
    "ENTMAX_ALPHAS",
    "PAPER_ALPHA",
    "NMST_ENTMAX_ALPHA",
    "SPARSE",
    "SparseConfig",
    "sparse_config_hash",
    "sparse_config_from_dict",
    "sparse_suite_configs",
    "sparse_result_path",
    "load_sparse_result",
    "evaluate_sparse",
    "teacher_forced_metrics",
    "run_sparse",
    "load_or_run_sparse",
    "run_sparse_suite",
    "load_sparse_results",
    "decoder_label",
    "paper_row",
    "table2_rows",
    "table4_rows",
    "table5_rows",
    "distinct_rows",
    "eos_rows",
    "rnt_curves",
]

SPARSE_RESULT_SCHEMA = "nmst_lib.sparse_result/1"
_SPARSE_SCHEMA_VERSION = 1
"""Bump when the evaluation code changes what a sparse result's numbers mean (every stored
sparse result then becomes STALE)."""
SPARSE_FOLDER = "sparse"

TOP_K = 50
"""k of top-k sampling: Martins et al. (2020) Table 3 selected k = 50 for WikiText-2 (from
{5, 10, 20, 50, 100}) with GPT-2's 50,257 BPE tokens. Our cpu vocabulary has 4,000 BPE pieces
learned on the training split (WikiText's <unk> markers deleted). We keep k = 50: k counts plausible
next tokens, a property of the language and the context rather than of the vocabulary's rare tail;
scaling k with V (k = 4) would make top-k nearly greedy, which the paper's grid did not select."""
NUCLEUS_P = 0.95
"""P of nucleus sampling, Martins et al. (2020) Table 3 (WikiText-2)."""
TEMPERATURE = 0.95
"""tau of softmax with temperature, Martins et al. (2020) Table 3 (WikiText-2)."""
PAPER_ALPHA = 1.2
"""The alpha at which Martins et al. (2020) report their WikiText findings (Table 3: WikiText-2 and
WikiText-103 alike; BookCorpus has 1.3): Chapter 8 reads Tables 2, 4 and 5 on the entmax model of
this alpha, and another alpha's readings beyond the paper."""
ENTMAX_ALPHAS = (1.5, PAPER_ALPHA)
"""alpha of the entmax-loss models: 1.2 is Martins et al.'s WikiText-2 choice (Table 3), 1.5 the
exact sort-based entmax15; both also sample from the softmax model (Table 5's ablation)."""
NMST_ENTMAX_ALPHA = 1.5
"""alpha of the NMST-entmax model (see the module docstring: same alpha as an entmax model, exact
algorithm)."""

REP_WINDOWS = (16, 32, 128, 512)
DISTINCT_N = (1, 2, 3)


def _table_decoders(head: str) -> tuple[str, ...]:
    common = ("ancestral", f"temperature-{TEMPERATURE:g}", "greedy", f"top-{TOP_K}", f"nucleus-{NUCLEUS_P:g}")
    if head == "va":
        return common + tuple(f"entmax-{a:g}" for a in sorted(ENTMAX_ALPHAS))
    return common


# ------------------------------------------------------------------------------------ config


@dataclass(frozen=True)
class SparseConfig:
    """One model of Chapter 8's suite (08_sparse) and how it is evaluated.

    ``model``: the :class:`~nmst_lib.experiments.config.ExperimentConfig` that trains it (data,
    model, optimisation) and that fixes the r_nt(L) decodes: ``model.decoding.decoders`` (greedy and
    ancestral, i.e. the model's natural decoder), ``model.decoding.decode_max_len``,
    ``model.decoding.num_decode_contexts`` validation contexts (the fixed random subset of Chapter 6).

    Teacher-forced evaluation on ``eval_split`` (Martins et al. (2020) Tables 2, 4, 5), every
    scored token, ``eval_batch_size`` sequences per batch: the decoders ``decoders``, one token
    sampled per position from a generator seeded with ``eval_seed`` (REP/WREP over ``rep_windows``).
    Free-running continuations for distinct-n (``distinct_n``): the first ``distinct_contexts`` of
    the decoding contexts, ``distinct_max_len`` tokens, every decoder in ``distinct_decoders``.
    ``explorer_contexts`` validation positions get their full next-token score vector stored (0 =
    none; the chapter's alpha explorer uses the softmax model's).
    """

    model: ExperimentConfig
    decoders: tuple[str, ...]
    distinct_decoders: tuple[str, ...]
    eval_split: str = "test"
    eval_batch_size: int = 16
    eval_seed: int = 0
    rep_windows: tuple[int, ...] = REP_WINDOWS
    distinct_contexts: int = 64
    distinct_max_len: int = 200
    distinct_n: tuple[int, ...] = DISTINCT_N
    explorer_contexts: int = 0

    def __post_init__(self):
        if not isinstance(self.model, ExperimentConfig):
            raise TypeError(f"model must be an ExperimentConfig (make_config(...)), got {type(self.model).__name__}")
        object.__setattr__(self, "model", validate_config(self.model))
        for name in ("decoders", "distinct_decoders"):
            value = tuple(getattr(self, name))
            if not value or len(set(value)) != len(value):
                raise ValueError(f"{name} must name at least one decoder, each once, got {value}")
            for d in value:
                spec = parse_decoder(d)
                if spec.method == "beam" or spec.consistent:
                    raise ValueError(f"{name}: {d!r} has no per-step distribution to score; use greedy, ancestral, "
                                     "top-K, nucleus-P, entmax-A or temperature-T")
            object.__setattr__(self, name, value)
        if self.eval_split not in ("valid", "test"):
            raise ValueError(f"eval_split must be 'valid' or 'test', got {self.eval_split!r}")
        for name in ("eval_batch_size", "distinct_contexts", "distinct_max_len"):
            check_positive_int(getattr(self, name), name)
        if isinstance(self.eval_seed, bool) or not isinstance(self.eval_seed, int) or self.eval_seed < 0:
            raise ValueError(f"eval_seed must be an integer >= 0, got {self.eval_seed!r}")
        if isinstance(self.explorer_contexts, bool) or not isinstance(self.explorer_contexts, int) \
                or self.explorer_contexts < 0:
            raise ValueError(f"explorer_contexts must be an integer >= 0, got {self.explorer_contexts!r}")
        for name in ("rep_windows", "distinct_n"):
            value = tuple(check_positive_int(v, name) for v in getattr(self, name))
            if not value or len(set(value)) != len(value):
                raise ValueError(f"{name} must hold distinct positive integers, got {value}")
            object.__setattr__(self, name, value)

    @property
    def key(self) -> str:
        """The model's key, e.g. ``cpu-lstm-entmax-a1.5-seed0`` (file name of its result)."""
        return self.model.key

    @property
    def label(self) -> str:
        """Short label, e.g. ``softmax (NLL)``, ``entmax loss (alpha=1.5)``, ``NMST-entmax (eps=5e-04, alpha=1.5)``."""
        m = self.model
        if m.head == "va":
            return "softmax (NLL)"
        if m.head == "entmax":
            return f"entmax loss (alpha={m.alpha:g})"
        if m.head == "nmst-entmax":
            return f"NMST-entmax (eps={m.eps:.0e}, alpha={m.alpha:g})"
        return m.label

    @property
    def natural_decoder(self) -> str:
        """The decoder that samples from the model's own distribution: ``ancestral`` (softmax
        sampling for the NLL model, entmax sampling (Martins et al. eq. 7) for an entmax-trained
        model, the NMST-entmax distribution for NMST-entmax)."""
        return "ancestral"

    def describe(self) -> str:
        """One line: loss, decoders, r_nt horizon."""
        return (f"{self.label}; teacher-forced decoders {','.join(self.decoders)}; r_nt({self.model.decoding.decode_max_len}) "
                f"for {','.join(self.model.decoding.decoders)}")

    def evaluation_dict(self) -> dict:
        """The evaluation settings as a JSON-ready dict."""
        return {f.name: (list(getattr(self, f.name)) if isinstance(getattr(self, f.name), tuple) else getattr(self, f.name))
                for f in fields(self) if f.name != "model"}

    def to_dict(self) -> dict:
        """``{"model": model.to_dict(), "evaluation": evaluation_dict()}``."""
        return {"model": self.model.to_dict(), "evaluation": self.evaluation_dict()}

    def replace(self, **changes) -> "SparseConfig":
        """A validated copy with ``changes`` applied (``model=...`` replaces the model config)."""
        return replace(self, **changes)


def sparse_config_hash(config: SparseConfig) -> str:
    """sha256 (16 hex digits) of the canonical JSON of the config (model and evaluation) plus the
    sparse schema version: equal hashes = the same numbers. The results of Chapter 8 (``08_sparse``)
    are stamped with it."""
    return canonical_hash({"schema": _SPARSE_SCHEMA_VERSION, "config": config.to_dict()})


def sparse_config_from_dict(d: dict) -> SparseConfig:
    """Inverse of :meth:`SparseConfig.to_dict`. Used by Chapter 8 (``08_sparse``)."""
    if not isinstance(d, dict) or set(d) != {"model", "evaluation"}:
        raise ValueError("a sparse config dict has exactly the keys 'model' and 'evaluation'")
    ev = dict(d["evaluation"])
    names = {f.name for f in fields(SparseConfig)} - {"model"}
    unknown = set(ev) - names
    if unknown:
        raise ValueError(f"unknown evaluation fields {sorted(unknown)}; known: {sorted(names)}")
    for k, v in list(ev.items()):
        if isinstance(v, list):
            ev[k] = tuple(v)
    return SparseConfig(model=config_from_dict(d["model"]), **ev)


_SUITE_PROFILE = {
    # quick: seconds, for tests (numbers mean nothing); cpu: what the website shows; paper: GPU.
    "quick": dict(model=dict(num_decode_contexts=16, num_decode_contexts_nongreedy=None),
                  evaluation=dict(distinct_contexts=8, distinct_max_len=20, eval_batch_size=16), explorer=2),
    "cpu": dict(model=dict(num_decode_contexts=64, num_decode_contexts_nongreedy=None, decode_max_len=10_000),
                evaluation=dict(distinct_contexts=64, distinct_max_len=200, eval_batch_size=16), explorer=6),
    "paper": dict(model=dict(num_decode_contexts=None, num_decode_contexts_nongreedy=None),
                  evaluation=dict(distinct_contexts=256, distinct_max_len=200, eval_batch_size=16), explorer=6),
}


SPARSE_SEEDS = {"quick": (0,), "cpu": (0, 1, 2), "paper": (0, 1, 2)}
"""The seeds of every Chapter 8 model per profile: three where the findings are read, so that
their noise bands come from seeds (issue 23); one at ``quick``, whose numbers mean nothing."""


def sparse_suite_configs(profile: str, **overrides) -> list[SparseConfig]:
    """The models of Chapter 8 (08_sparse) at ``profile``, in run order: softmax/NLL, entmax loss
    alpha = 1.5, NMST-entmax (eps = the profile's featured eps, alpha = 1.5), entmax loss alpha = 1.2,
    for each seed of :data:`SPARSE_SEEDS` (all of seed 0 first).
    ``overrides``: option fields set for every model's training config, on top of the suite's
    (:func:`~nmst_lib.experiments.config.suite_overrides`).

    Training: :func:`~nmst_lib.experiments.config.make_config` (``profile``, ``"lstm"``) for every
    head, with the fields of Chapter 8's recipe (:func:`~nmst_lib.experiments.config.chapter_recipe`),
    i.e. at ``cpu`` the LSTM 2 x 128 of Chapter 6 on 4,000 BPE pieces (``<unk>`` markers deleted),
    lr 2e-3, trained until the 0.5 % plateau rule stops it (at most 60 epochs), the entmax models'
    epochs compared by validation epsilon-perplexity (:data:`~nmst_lib.experiments.config.EPS_PPL_CPU_RECIPE`);
    the softmax model of seed ``s`` IS Chapter 6's ``cpu-lstm-va-bpe4k-nounk-seed{s}`` (same training
    hash). No training setting was reduced for the entmax models.
    Decoding: greedy and ancestral (the natural decoder) for r_nt(L) up to ``decode_max_len``
    (1e4 at cpu) on 64 validation contexts (cpu; the first 64 of Chapter 6's 128), plus entmax-1.5
    sampling from the softmax model (does a sparse decoder of a softmax model still stop?); teacher-forced
    decoders of Martins et al. (2020) Table 2 (``temperature-0.95``, ``top-50``, ``nucleus-0.95``;
    ``entmax-1.2`` and ``entmax-1.5`` for the softmax model: Table 5's ablation); distinct-n on 64
    contexts x 200 tokens (cpu) under the same decoders, for every seed; score vectors of 6
    contexts (the softmax model of seed 0).
    """
    if profile not in _SUITE_PROFILE:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    settings = _SUITE_PROFILE[profile]
    overrides = suite_overrides(overrides)
    recipe = chapter_recipe("sparse", profile)
    eps = FEATURED_EPS[profile]
    models = [("va", None, None), ("entmax", None, ENTMAX_ALPHAS[0]), ("nmst-entmax", eps, NMST_ENTMAX_ALPHA),
              ("entmax", None, ENTMAX_ALPHAS[1])]
    out = []
    for seed, (head, e, alpha) in ((s, m) for s in SPARSE_SEEDS[profile] for m in models):
        extra = {} if alpha is None else {"alpha": alpha}
        rnt_decoders = ("greedy", "ancestral") + ((f"entmax-{NMST_ENTMAX_ALPHA:g}",) if head == "va" else ())
        # select_on names how the entmax models' epochs are compared; the softmax model is Chapter 6's
        # (selected by its perplexity), so it does not take the field
        fields = {"decoders": rnt_decoders, **recipe, **settings["model"], **extra, **overrides}
        if head in NLL_HEADS:
            fields.pop("select_on", None)
        model = make_config(profile, "lstm", head, e, seed, **fields)
        decoders = _table_decoders(head)
        out.append(SparseConfig(model=model, decoders=decoders, distinct_decoders=decoders,
                                explorer_contexts=settings["explorer"] if head == "va" and seed == 0 else 0,
                                **settings["evaluation"]))
    return out


# ------------------------------------------------------------------------------------ store


def sparse_result_path(config: SparseConfig, results_dir=None) -> Path:
    """``<results_dir>/sparse/<key>.json`` (``results_dir`` defaults to
    :func:`~nmst_lib.experiments.results.default_results_dir`). Used by Chapter 8 (``08_sparse``)."""
    return SPARSE.path(config, results_dir)


def load_sparse_result(config: SparseConfig, results_dir=None) -> StoredResult:
    """The stored result of ``config`` with status CURRENT / STALE / MISSING, as
    :func:`nmst_lib.experiments.results.load_result` for Chapter 6: with ``results_dir`` only
    that folder; without it the write folder first, then the results published with the library
    (``nmst_lib/published_results/sparse``). Chapter 8 (08_sparse)."""
    return SPARSE.load(SPARSE.check(config), results_dir)


# ------------------------------------------------------------------------------ evaluation


def _distribution(log_probs: torch.Tensor, decoder: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The distribution ``decoder`` samples from at each row of ``log_probs [N, V]``
    (:func:`nmst_lib.decoding.decoder_distribution`) as probabilities q [N, V], and its support
    [N, V] (bool). The support of ancestral sampling (with or without temperature) is where the
    model's log-probability is finite, even where float32 rounds q to 0 (a softmax considers
    every token: Martins et al. (2020) Table 4); for the other decoders it is q > 0."""
    from ..decoding import decoder_distribution

    spec = parse_decoder(decoder)
    q = decoder_distribution(log_probs, spec.method, **spec.decode_kwargs())
    support = torch.isfinite(log_probs) if spec.method == "ancestral" else q > 0
    return q, support


def _support_stats(sizes: torch.Tensor) -> dict:
    s = sizes.double()
    q = torch.quantile(s, torch.tensor([0.1, 0.25, 0.75, 0.9], dtype=torch.float64))
    bins = np.bincount(np.floor(np.log2(sizes.numpy())).astype(np.int64))
    return {"mean": float(s.mean()), "median": float(np.median(s.numpy())),
            "std": float(s.std(unbiased=False)), "min": int(sizes.min()), "max": int(sizes.max()),
            "p10": float(q[0]), "p25": float(q[1]), "p75": float(q[2]), "p90": float(q[3]),
            "log2_histogram": {"bin_lower_edges": [2 ** i for i in range(len(bins))], "counts": bins.tolist()}}


def _accumulate_decoder(a: dict, lp, y, decoder: str, eos: int, is_end, generator, seq_ids,
                        cols) -> None:
    """Add one batch of scored positions (log-probabilities ``lp [N, V]``, references ``y``)
    to ``decoder``'s running sums ``a`` (:func:`teacher_forced_metrics`): sparsemax score, JS,
    q(y), argmax hits, support sizes, eos in the support and at sentence ends, and one sampled
    token per position in its full-sequence column (for REP/WREP)."""
    from ..decoding import sample_tokens
    from ..metrics import js_divergence, sparsemax_score

    q, support = _distribution(lp, decoder)
    lq = q.log()  # -inf where q = 0
    a["sp"] += float(sparsemax_score(q, y).double().sum())
    a["js"] += float(js_divergence(q, y).double().sum())
    q_y = q.gather(-1, y[:, None]).squeeze(-1)
    a["q_y"].append(q_y.double().cpu())
    a["argmax_hit"] += int((q.argmax(-1) == y).sum())
    a["sizes"].append(support.sum(-1).cpu())
    a["eos_in"] += int(support[:, eos].sum())
    a["eos_q_at_end"].append(q[is_end, eos].double().cpu())
    sample = sample_tokens(lq, generator)
    a["pred"][seq_ids.cpu(), cols.cpu() + 1] = sample.cpu()


def _decoder_metrics(a: dict, decoder: str, V: int, total: int, full_targets, scored_full,
                     windows) -> dict:
    """One decoder's entry of :func:`teacher_forced_metrics` from its running sums ``a``."""
    from ..metrics import epsilon_perplexity, rep_wrep

    q_y = torch.cat(a["q_y"])
    value, eps = epsilon_perplexity(q_y, V)
    zero = int((q_y == 0).sum())
    ppl = float(torch.exp(-torch.log(q_y).mean())) if zero == 0 else None
    rw = rep_wrep(a["pred"], full_targets, scored_full, windows=windows)
    sizes = torch.cat(a["sizes"])
    at_end = torch.cat(a["eos_q_at_end"])
    spec = parse_decoder(decoder)
    return {
        "method": spec.method, "kwargs": spec.decode_kwargs(),
        "sp": a["sp"] / total, "js": a["js"] / total,
        "eps_ppl": value, "eps": None if math.isinf(eps) else eps,
        "ppl": ppl, "target_outside_support": zero / total,
        "accuracy": a["argmax_hit"] / total,
        "rep": {str(w): rw[w]["rep"] for w in windows} | {"mean": rw["mean"]["rep"]},
        "wrep": {str(w): rw[w]["wrep"] for w in windows} | {"mean": rw["mean"]["wrep"]},
        "support": _support_stats(sizes),
        "eos": {"in_support": a["eos_in"] / total, "num_sentence_ends": int(at_end.numel()),
                "mean_p_at_sentence_end": float(at_end.mean()) if at_end.numel() else None,
                "zero_at_sentence_end": float((at_end == 0).double().mean()) if at_end.numel() else None},
    }


@torch.no_grad()
def teacher_forced_metrics(model, data: D.SequenceData, decoders, *, batch_size: int = 16, seed: int = 0,
                           windows=REP_WINDOWS, progress: bool = False, log: Callable[[str], None] | None = None) -> dict:
    """Martins et al. (2020) Tables 2, 4 and 5 for one model on ``data`` under teacher forcing
    (Chapter 8, 08_sparse).

    For every scored position (continuation tokens and eos) and every decoder: the distribution q
    the decoder samples from there (:func:`nmst_lib.decoding.decoder_distribution` of the model's
    log-probabilities), then, pooled over all positions: sparsemax score (eq. 10,
    :func:`nmst_lib.metrics.sparsemax_score`), JS divergence (eq. 11), eps-perplexity with the
    optimal eps (eq. 9, App. A), plain perplexity (None when some q(y) = 0), accuracy of the most
    probable token, the fraction of reference words outside the support, REP/WREP (Sec. 5.1, fn. 6)
    of one token sampled per position (one ``torch.Generator`` seeded with ``seed`` per decoder,
    batches in a fixed order), the support size (Table 4: mean, median, std, min, max, quantiles,
    a log2 histogram), and eos: the fraction of positions with eos in the support, and at the
    positions whose reference is eos the mean q(eos) and the fraction with q(eos) = 0.

    Returns ``{"num_positions", "num_sequences", "vocab_size", "decoders": {name: {...}}}``. The
    work is tensor ops over whole batches ([N, V] per batch); nothing loops over tokens.
    """
    from tqdm.auto import tqdm

    say = log or (lambda msg: None)
    decoders = list(decoders)
    device = model.device
    was_training = model.training
    model.eval()
    V = model.vocab_size
    eos = model.eos_id
    n_seq = len(data)
    width = int(data.lengths.max())
    # Full-sequence layout for REP/WREP: column j holds token j; the prediction of token j+1 goes
    # to column j+1; padding is -1 (never matches).
    positions = torch.arange(width)
    inside = positions < data.lengths[:, None]
    full_targets = torch.where(inside, data.tokens[(data.offsets[:, None] + positions).clamp(max=data.num_tokens - 1)],
                               torch.tensor(-1))
    scored_full = inside & (positions >= data.context_len)
    acc = {d: {"q_y": [], "sp": 0.0, "js": 0.0, "argmax_hit": 0, "sizes": [], "eos_in": 0, "eos_q_at_end": [],
               "pred": torch.full((n_seq, width), -1, dtype=torch.long)} for d in decoders}
    gens = {d: torch.Generator(device=device).manual_seed(int(seed) + 7919 * i) for i, d in enumerate(decoders)}
    batches = D.bucket_batches(data.lengths, batch_size)
    started = time.perf_counter()
    total = 0
    try:
        for indices in tqdm(batches, desc="teacher-forced", disable=not progress, leave=False):
            batch = D.make_batch(data, indices).to(device)
            with _autocast(device):
                log_probs = model(batch.inputs, batch.context_mask)
            scored = batch.target_mask
            lp = log_probs[scored].float()  # [N, V]
            y = batch.targets[scored]
            rows, cols = torch.nonzero(scored, as_tuple=True)
            seq_ids = indices.to(device)[rows]
            total += y.numel()
            is_end = y == eos
            for d in decoders:
                _accumulate_decoder(acc[d], lp, y, d, eos, is_end, gens[d], seq_ids, cols)
    finally:
        model.train(was_training)
    out = {"num_positions": total, "num_sequences": n_seq, "vocab_size": V, "eos_id": eos, "seed": int(seed),
           "windows": list(windows), "decoders": {}}
    for d in decoders:
        r = out["decoders"][d] = _decoder_metrics(acc[d], d, V, total, full_targets, scored_full, windows)
        say(f"[sparse] {d}: sp {r['sp']:.4f} JS {r['js']:.4f} eps-ppl {r['eps_ppl']:.2f} REP {r['rep']['mean']:.3f} "
            f"WREP {r['wrep']['mean']:.3f} support {r['support']['mean']:.1f}")
    out["wall_seconds"] = time.perf_counter() - started
    return out


def _distinct(model, contexts: torch.Tensor, decoders, *, max_len: int, ns, seed: int, vocab,
              log: Callable[[str], None] | None = None, num_examples: int = 3, example_tokens: int = 60) -> dict:
    """distinct-n (Li et al. 2016a; Martins et al. (2020) Sec. 5.2-5.3) of free-running
    continuations of ``contexts`` under each decoder (eos ends a continuation and is not a word)."""
    from ..decoding import decode
    from ..metrics import distinct_n

    say = log or (lambda msg: None)
    out = {}
    for i, d in enumerate(decoders):
        spec = parse_decoder(d)
        g = torch.Generator(device=model.device).manual_seed(int(seed) + 104729 * (i + 1))
        start = time.perf_counter()
        gen = decode(model, contexts, spec.method, max_len=max_len, generator=g if spec.sampling else None,
                     **spec.decode_kwargs())
        words = int((gen.lengths - gen.terminated.long()).sum())
        res = {"num_contexts": int(contexts.shape[0]), "max_len": max_len, "num_words": words,
               "mean_length": float(gen.lengths.double().mean()), "terminated_fraction": float(gen.terminated.double().mean())}
        for n in ns:
            try:
                res[f"distinct_{n}"] = distinct_n(gen, n)
            except ValueError:  # no n-gram at all (every continuation shorter than n)
                res[f"distinct_{n}"] = None
        res["examples"] = []
        for j in range(min(num_examples, contexts.shape[0])):
            n_tok = int(gen.lengths[j])
            res["examples"].append({"context": " ".join(vocab.decode(contexts[j])),
                                    "continuation": " ".join(vocab.decode(gen.tokens[j, :min(n_tok, example_tokens)])),
                                    "length": n_tok, "terminated": bool(gen.terminated[j])})
        res["wall_seconds"] = time.perf_counter() - start
        out[d] = res
        say(f"[sparse] distinct {d}: " + " ".join(f"d{n} {res[f'distinct_{n}']:.3f}" for n in ns
                                                   if res[f"distinct_{n}"] is not None)
            + f" mean length {res['mean_length']:.1f}")
    return out


@torch.no_grad()
def _explorer(model, data: D.SequenceData, indices: torch.Tensor, count: int) -> dict:
    """Next-token score vectors (logits, 4 decimals) of ``count`` validation positions, for the
    chapter's alpha explorer: the first step, the middle step and the eos step of the first
    validation contexts in turn (Chapter 8, 08_sparse)."""
    if count == 0:
        return {}
    was_training = model.training
    model.eval()
    vocab = data.vocab
    k = data.context_len
    picks = []
    for i in indices.tolist():
        n = int(data.lengths[i])
        for step in (k, (k + n) // 2, n - 1):  # predict token `step` (0-based) of the sequence
            if len(picks) < count and k <= step < n:
                picks.append((i, step))
        if len(picks) >= count:
            break
    items = []
    try:
        for i, step in picks:
            seq = data.sequence(i)
            logits = model.logits(seq[:step].unsqueeze(0).to(model.device))[0, -1].float().cpu()
            words = vocab.decode(seq[:step])
            items.append({"sequence_index": i, "line_number": int(data.line_numbers[i]), "step": step - k + 1,
                          "prefix_length": step, "context": " ".join(words[-40:]),
                          "context_truncated": len(words) > 40,
                          "next_token": vocab.decode(seq[step:step + 1])[0], "next_token_id": int(seq[step]),
                          "logits": [round(float(v), 4) for v in logits.tolist()]})
    finally:
        model.train(was_training)
    return {"eos_id": model.eos_id, "vocab_size": model.vocab_size, "model": "softmax (NLL)",
            "scores": "raw output-layer scores z (logits) before the head; softmax(z) is the model's distribution, "
                      "alpha-entmax(z) what entmax sampling with that alpha draws from",
            "vocabulary": list(vocab.itos),
            "contexts": items}


def _partial_path(config: SparseConfig, results_dir) -> Path:
    return sparse_result_path(config, results_dir).with_name(f".{config.key}.partial.json")


def evaluate_sparse(run: TrainedRun, config: SparseConfig, *, results_dir=None, progress: bool = False,
                    log: Callable[[str], None] | None = None, command: str | None = None,
                    started: float | None = None) -> dict:
    """Everything a sparse result holds for a trained model (Chapter 8, 08_sparse): training
    record, Tables 2/4/5 on the test split (:func:`teacher_forced_metrics`), distinct-n, r_nt(L)
    curves (:func:`~nmst_lib.experiments.runs.decode_at_scale`), explorer scores, data, seeds,
    provenance. Parts already computed for the same config hash are read back from a partial file
    next to the result (so an interrupted evaluation resumes; each part has its own seeds, so the
    numbers do not depend on where it stopped)."""
    say = log or (lambda msg: None)
    model, data = run.model, run.data
    model.eval()
    chash = sparse_config_hash(config)
    partial_path = _partial_path(config, results_dir)
    parts: dict = {}
    if partial_path.is_file():
        try:
            stored = json.loads(partial_path.read_text(encoding="utf-8"))
            if stored.get("config_hash") == chash:
                parts = stored.get("parts", {})
                say(f"[sparse] {config.key}: resuming evaluation with {sorted(parts)} done")
        except (OSError, ValueError):
            parts = {}

    def save_part(name, value):
        parts[name] = value
        write_json_atomic(partial_path, {"config_hash": chash, "parts": parts})

    split = data.test if config.eval_split == "test" else data.valid
    if "teacher_forced" not in parts:
        say(f"[sparse] {config.key}: teacher-forced metrics on {config.eval_split} ({split.num_target_tokens} tokens)")
        save_part("teacher_forced", teacher_forced_metrics(model, split, config.decoders,
                                                           batch_size=config.eval_batch_size, seed=config.eval_seed,
                                                           windows=config.rep_windows, progress=progress, log=log))
    idx = decoding_context_indices(config.model, data.valid)
    contexts = data.valid.contexts(idx)
    if "distinct" not in parts:
        save_part("distinct", _distinct(model, contexts[:config.distinct_contexts], config.distinct_decoders,
                                        max_len=config.distinct_max_len, ns=config.distinct_n,
                                        seed=config.eval_seed, vocab=data.vocab, log=log))
    decoding = dict(parts.get("decoding", {}))
    for name in config.model.decoding.decoders:
        if name in decoding:
            continue
        res = decode_at_scale(model, contexts, name, max_len=config.model.decoding.decode_max_len, seed=config.model.seed,
                              batch_size=config.model.decoding.decode_batch_size, vocab=data.vocab, progress=progress)
        say(f"[decode] {config.key} {name}: r_nt({config.model.decoding.decode_max_len}) = {res['rnt'][-1]:.3f} "
            f"({res['wall_seconds']:.1f} s)")
        decoding[name] = res
        save_part("decoding", decoding)
    if "explorer" not in parts:
        save_part("explorer", _explorer(model, data.valid, idx, config.explorer_contexts))
    m = config.model
    result = {
        "model": {"head": m.head, "alpha": m.alpha, "eps": m.eps, "label": config.label,
                  "natural_decoder": config.natural_decoder, "training_hash": training_hash(m),
                  "checkpoint": Path(run.checkpoint).name},
        "metrics": {
            "selection": selection_metric(m),
            "val_ppl": run.val_ppl, "test_ppl": run.test_ppl, "val_loss": run.val_loss, "test_loss": run.test_loss,
            "best_epoch": run.best_epoch, "epochs_run": run.epochs_run, "stopped_early": run.stopped_early,
            "history": run.history, "num_parameters": sum(p.numel() for p in model.parameters()),
        },
        "teacher_forced": parts["teacher_forced"],
        "distinct": parts["distinct"],
        "decoding": decoding,
        "explorer": parts["explorer"],
        "data": data.description,
        "seeds": {**training_seeds(m),
                  "teacher_forced_sampling": f"one torch.Generator per decoder, seed "
                                             f"{config.eval_seed} + 7919 i (i = the decoder's "
                                             "index in config.decoders)",
                  "distinct_sampling": f"one torch.Generator per decoder, seed "
                                       f"{config.eval_seed} + 104729 (i + 1)",
                  "rnt_sampling": m.seed, "decoding_contexts": 0,
                  "substitute_split": m.data.substitute_seed},
        "provenance": training_provenance(run, command=command, started=started),
    }
    return result


def run_sparse(config: SparseConfig, *, results_dir=None, checkpoint_dir=None, resume: bool = True, device=None,
               progress: bool = True, log: Callable[[str], None] | None = None, command: str | None = None,
               checkpoint_every: int | None = None, dist: DistContext | None = None) -> StoredResult:
    """Train (or resume, or load the finished checkpoint of) ``config.model``, evaluate it
    (:func:`evaluate_sparse`) and store the result; returns it (status CURRENT). Chapter 8
    (08_sparse); ``dist`` as in :func:`~nmst_lib.experiments.trainer.train`."""
    if not isinstance(config, SparseConfig):
        raise TypeError(f"config must be a SparseConfig (see sparse_suite_configs), got {type(config).__name__}")
    started = time.perf_counter()
    run = train(config.model, checkpoint_dir=checkpoint_dir, resume=resume, device=device, progress=progress,
                log=log, checkpoint_every=checkpoint_every, dist=dist)
    result = evaluate_sparse(run, config, results_dir=results_dir, progress=progress, log=log, command=command,
                             started=started)
    SPARSE.save(result, config, results_dir)
    partial = _partial_path(config, results_dir)
    if partial.is_file():
        os.unlink(partial)
    return load_sparse_result(config, results_dir)


def load_or_run_sparse(config: SparseConfig, *, results_dir=None, run: bool = True, log=None,
                       **run_kwargs) -> StoredResult:
    """The CURRENT stored result of ``config``; otherwise (missing or STALE) run it when ``run``,
    else return what was found with its status (so a page can say it is STALE or MISSING)."""
    stored = load_sparse_result(config, results_dir)
    if stored.status == CURRENT or not run:
        return stored
    if log:
        log(f"[load_or_run_sparse] {config.key}: {stored.message}; running it")
    return run_sparse(config, results_dir=results_dir, log=log, **run_kwargs)


def run_sparse_suite(profile: str, *, results_dir=None, checkpoint_dir=None, force: bool = False,
                     device=None, progress: bool = True, log: Callable[[str], None] | None = print,
                     command: str | None = None, only=None, jobs: int = 1,
                     threads: int | None = None) -> list[StoredResult]:
    """Run every model of :func:`sparse_suite_configs` whose stored result is not CURRENT (all
    with ``force``, trained from scratch), resuming training from checkpoints; returns the
    stored results in order: the ``sparse`` family through
    :func:`~nmst_lib.experiments.family.run_family_suite` (``only``, ``jobs``, ``threads`` as
    there). Chapter 8 (08_sparse)."""
    return run_family_suite(SPARSE, profile, only=only, force=force, results_dir=results_dir,
                            checkpoint_dir=checkpoint_dir, device=device, progress=progress,
                            log=log, command=command, jobs=jobs, threads=threads)


def load_sparse_results(profile: str = "cpu", results_dir=None) -> list[StoredResult]:
    """The stored results of every model of ``profile`` (CURRENT, STALE or MISSING; nothing is
    run), in suite order: the ``sparse`` family's ``load_all``, which Chapter 8 (08_sparse) reads
    through :func:`~nmst_lib.experiments.page_selection.page_results`; for scripts and tests."""
    return SPARSE.load_all(profile, results_dir)


SPARSE = register(Family(
    name="sparse", title="sparse", chapter="08_sparse", schema=SPARSE_RESULT_SCHEMA, folder=SPARSE_FOLDER,
    config_type=SparseConfig, configs=sparse_suite_configs, config_hash=sparse_config_hash,
    config_from_dict=sparse_config_from_dict, run=run_sparse, describe=SparseConfig.describe,
    missing_hint="run it (load_or_run_sparse or `python -m nmst_lib suite sparse`)",
    distributed=True))
"""Chapter 8's family (08_sparse): softmax, entmax and NMST-entmax LSTMs, results in
``sparse/``."""


# --------------------------------------------------------------------------------- tables


def decoder_label(decoder: str, head: str, alpha: float | None = None) -> str:
    """The row name of Martins et al. (2020) Table 2 for ``decoder`` on a model with ``head``:
    ``ancestral`` is "Softmax" on the NLL model and "Entmax" on an entmax-trained model (its own
    distribution is alpha-entmax, eq. 7), "NMST-entmax" on the NMST-entmax model. A temperature
    decoder is "Softmax-tau" on the NLL model only: on a sparse model ``softmax(log p / tau)`` is
    ``p^(1/tau)`` renormalised, a sharpened entmax, named "Temperature". Used by Chapter 8
    (``08_sparse``)."""
    spec = parse_decoder(decoder)
    if spec.method == "ancestral" and spec.temperature is None:
        return {"va": "Softmax", "entmax": f"Entmax (alpha={alpha:g})" if alpha else "Entmax",
                "nmst-entmax": "NMST-entmax"}.get(head, "Ancestral")
    if spec.temperature is not None:  # softmax(log p / tau): p^(1/tau) renormalised
        if head == "va":
            return f"Softmax-tau (tau={spec.temperature:g})"
        return f"Temperature (tau={spec.temperature:g})"  # a sharpened entmax, not a softmax
    if spec.method == "greedy":
        return "Greedy"
    if spec.method == "top-k":
        return f"Top-k (k={spec.k})"
    if spec.method == "nucleus":
        return f"Nucleus (P={spec.p:g})"
    if spec.method == "entmax":
        return f"Entmax sampling (alpha={spec.alpha:g})"
    return decoder


def paper_row(decoder: str, head: str) -> str | None:
    """The row of Martins et al. (2020) Table 2 that ``decoder`` on a model with ``head``
    stands for, named without its parameters as the paper names it: "Softmax", "Softmax-tau",
    "Greedy", "Top-k", "Nucleus" (the softmax model's decoders) or "Entmax" (an entmax-trained
    model's own distribution); None for a row the paper does not have (the NMST-entmax model,
    entmax sampling of the softmax model). Chapter 8 (08_sparse) puts the quoted numbers beside
    its rows by this name, :func:`decoder_label` being the name with the parameters."""
    spec = parse_decoder(decoder)
    if spec.method == "ancestral" and spec.temperature is None:
        return {"va": "Softmax", "entmax": "Entmax"}.get(head)
    if spec.temperature is not None:
        return "Softmax-tau"
    return {"greedy": "Greedy", "top-k": "Top-k", "nucleus": "Nucleus"}.get(spec.method)


def _records(stored) -> list[dict]:
    return current_records(stored)


def _metric_row(rec: dict, decoder: str) -> dict:
    r = rec["teacher_forced"]["decoders"][decoder]
    m = rec["model"]
    return {"loss": rec["model"]["label"], "decoder": decoder,
            "method": decoder_label(decoder, m["head"], m["alpha"]), "paper row": paper_row(decoder, m["head"]),
            "sp": r["sp"], "JS": r["js"], "eps-ppl": r["eps_ppl"], "eps": r["eps"], "REP": r["rep"]["mean"],
            "WREP": r["wrep"]["mean"], "ppl": r["ppl"], "accuracy": r["accuracy"],
            "outside support": r["target_outside_support"]}


def table2_rows(stored) -> list[dict]:
    """Martins et al. (2020) Table 2 analogue: the softmax model under softmax, softmax-tau,
    greedy, top-k, nucleus; then each entmax-trained model under entmax sampling (its own
    distribution) and the NMST-entmax model under its own distribution. Columns: method, paper row
    (:func:`paper_row`), loss, decoder, sp, JS, eps-ppl (and its eps), REP, WREP (averages over the windows), plus ppl,
    accuracy and the fraction of reference words outside the support. ``stored``: the
    :class:`~nmst_lib.experiments.results.StoredResult` list of :func:`load_sparse_results` (non-current ones are skipped).
    Every table of this module has one row per model (loss) and decoder: several seeds of a model
    give the mean, their count in ``seeds`` and each seed's value in ``per_seed``
    (:func:`~nmst_lib.experiments.results.mean_over_seeds`). Shown in Chapter 8 (``08_sparse``)."""
    rows = []
    for rec in _records(stored):
        decs = rec["teacher_forced"]["decoders"]
        if rec["model"]["head"] == "va":
            rows += [_metric_row(rec, d) for d in decs if parse_decoder(d).method != "entmax"]
    for rec in _records(stored):
        if rec["model"]["head"] != "va":
            rows.append(_metric_row(rec, rec["model"]["natural_decoder"]))
    return _per_model(rows)


def _per_model(rows: list[dict]) -> list[dict]:
    """One row per (loss, decoder): the seeds of a model merged (means, ``seeds``, ``per_seed``)."""
    return mean_over_seeds(rows, ("loss", "decoder"))


def table4_rows(stored) -> list[dict]:
    """Martins et al. (2020) Table 4 analogue: tokens considered per step (support size of the
    decoder's distribution) on the test split: mean, median, std, min, max (+ quantiles), for every
    model x decoder. Shown in Chapter 8 (``08_sparse``)."""
    rows = []
    for rec in _records(stored):
        m = rec["model"]
        for d, r in rec["teacher_forced"]["decoders"].items():
            s = r["support"]
            rows.append({"loss": m["label"], "decoder": d, "method": decoder_label(d, m["head"], m["alpha"]),
                         "mean": s["mean"], "median": s["median"], "std": s["std"], "min": s["min"], "max": s["max"],
                         "p10": s["p10"], "p90": s["p90"]})
    return _per_model(rows)


def table5_rows(stored) -> list[dict]:
    """Martins et al. (2020) Table 5 analogue, complete: every model (loss) x every decoder, with
    the columns of :func:`table2_rows`. Shown in Chapter 8 (``08_sparse``)."""
    return _per_model([_metric_row(rec, d) for rec in _records(stored) for d in rec["teacher_forced"]["decoders"]])


def distinct_rows(stored) -> list[dict]:
    """distinct-1/2/3, mean length and terminated fraction of free-running continuations, per
    model x decoder. Shown in Chapter 8 (``08_sparse``)."""
    rows = []
    for rec in _records(stored):
        m = rec["model"]
        for d, r in rec["distinct"].items():
            row = {"loss": m["label"], "decoder": d, "method": decoder_label(d, m["head"], m["alpha"])}
            row.update({k: v for k, v in r.items() if k.startswith("distinct_")})
            row.update(mean_length=r["mean_length"], terminated=r["terminated_fraction"])
            rows.append(row)
    return _per_model(rows)


def eos_rows(stored) -> list[dict]:
    """eos's fate per model x decoder: fraction of test positions with eos in the support; at the
    true sentence ends, the mean probability of eos and the fraction where it is exactly 0; and
    r_nt at the largest L of the free-running decodes of the model's natural decoder and greedy.
    Shown in Chapter 8 (``08_sparse``)."""
    rows = []
    for rec in _records(stored):
        m = rec["model"]
        for d, r in rec["teacher_forced"]["decoders"].items():
            e = r["eos"]
            row = {"loss": m["label"], "decoder": d, "method": decoder_label(d, m["head"], m["alpha"]),
                   "eos in support": e["in_support"], "mean p(eos) at sentence end": e["mean_p_at_sentence_end"],
                   "p(eos) = 0 at sentence end": e["zero_at_sentence_end"]}
            if d in rec["decoding"]:
                row["r_nt(L_max)"] = rec["decoding"][d]["rnt"][-1]
            rows.append(row)
    return _per_model(rows)


def rnt_curves(stored) -> list[dict]:
    """r_nt(L) curves of every model under its natural decoder and greedy: ``{"loss", "decoder",
    "method", "L", "rnt", "max_len", "num_contexts"}`` per curve (Choi, Cho, Lee (2023) eq. 11);
    several seeds of a model give the mean curve (``num_contexts`` per seed; ``seeds``,
    ``per_seed`` as in :func:`table2_rows`). Shown in Chapter 8 (``08_sparse``)."""
    out = []
    for rec in _records(stored):
        m = rec["model"]
        for d, r in rec["decoding"].items():
            out.append({"loss": m["label"], "decoder": d, "method": decoder_label(d, m["head"], m["alpha"]),
                        "L": r["L"], "rnt": r["rnt"], "max_len": r["max_len"], "num_contexts": r["num_contexts"]})
    return _per_model(out)
