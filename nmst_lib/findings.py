"""Verdicts that follow from the numbers: the book's one rule for "does it reproduce?".

Chapters 6-9 test findings of the four papers (Welleck et al. 2020; Choi, Cho and Lee 2023;
Martins et al. 2020; the contextual-temperature paper) on models far smaller than the papers'.
Each finding is a :class:`Claim` (an id, the paper and its table or figure, the quantity
compared and the direction the paper reports), and each verdict comes from one rule, stated
on the notation page (``book/notation.md``, "Reading the experiments"):

* **forced**: a bound the book proves already decides the outcome (e.g. an ST or NMST model
  has ``r_nt(L) = 0`` under greedy search once ``t_1/2 <= L``, Proposition 6.1 part 2).
  The finding is labelled with that theorem and **not counted** as a reproduction.
* **within noise**: ``|difference| <= band``. The band comes from the spread over seeds where
  there are at least two seeds on each side (:meth:`Band.from_seeds`), otherwise from a floor
  the page states (:meth:`Band.floor`, e.g. the last epoch's validation change of a model that
  had not converged, :meth:`Band.binomial` for a rate measured on ``n`` contexts, or
  :meth:`Band.ks` for a distance between length distributions). One
  seed and no floor is refused (:func:`noise_band` raises ``ValueError``).
* **reproduces** / **does not reproduce**: only outside the band, by the sign of the
  difference against the paper's direction; the sizes (difference and band) are printed.
* **not run**: what the book did not run, named with the reason.

:class:`Findings` collects a chapter's verdicts and renders its "What reproduces" list and
every count of its Summary, so no page states a count that this module did not compute
(``tests/test_findings.py`` scans the chapters for hand-written counts).

A :class:`Claim` whose ``beyond`` is set is a comparison the paper never
makes: judged by the same rule, listed apart and never counted. For rates and
length distributions measured per seed, :meth:`Band.rates` and
:meth:`Band.ks_over_seeds` widen the binomial or KS band by a model's seed
spread even against a model with one seed; :meth:`Band.relative_spread` is the
floor for a relative gap between single runs (Chapters 8-9).

Besides the verdicts, the tables a page shows under its results:
:func:`recipe_rows` (our recipe beside the paper's, :data:`RECIPE_FIELDS`,
each deviation named; :func:`recipe_summary`) and :func:`convergence_rows`
(whether every seed of each model converged, from :func:`convergence`;
:func:`convergence_summary`, and :func:`last_epoch_floor`, the floor for
models that had not).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

__all__ = ["VERDICTS", "Band", "Claim", "Finding", "Findings", "UnknownBandError", "convergence",
           "convergence_rows", "decide",
           "last_epoch_floor", "noise_band", "RECIPE_FIELDS", "recipe_rows", "recipe_summary",
           "convergence_summary"]

#: The five verdicts, in the order a page lists their counts.
VERDICTS = ("reproduces", "does not reproduce", "within noise", "forced", "not run")


def _real(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def _k(k) -> float:
    """The number of standard errors of a band: a finite number > 0 (2 for about 95 %)."""
    k = _real(k, "k")
    if k <= 0:
        raise ValueError(f"k (the number of standard errors in the band) must be > 0, e.g. 2, got {k}")
    return k


def _text(value, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string saying what it is, got {value!r}")
    return value


@dataclass(frozen=True)
class Band:
    """A noise band: a difference with ``|d| <= half_width`` is not read in either direction.
    Chapters 6-9 read their findings against such bands.

    ``source`` says where the width comes from, in words a page can print
    (e.g. "2 s.e. over 3 + 3 seeds").
    """

    half_width: float
    source: str

    def __post_init__(self):
        width = _real(self.half_width, "half_width")
        if width < 0:
            raise ValueError(f"half_width must be >= 0, got {width}")
        object.__setattr__(self, "half_width", width)
        _text(self.source, "source")

    @classmethod
    def from_seeds(cls, a, b=None, *, k: float = 2.0) -> Band:
        """``k`` standard errors of ``mean(a) - mean(b)`` from the seeds' spread.

        ``a`` and ``b`` are the per-seed values of the two models compared (``b=None``:
        one model against a fixed number). Each needs at least two seeds (else there is no
        spread: use :meth:`floor` and say why); ``ValueError`` otherwise.
        """
        k = _k(k)
        groups = [np.asarray(g, dtype=float).ravel() for g in (a, b) if g is not None]
        for g in groups:
            if g.size < 2:
                raise ValueError(f"a band from seeds needs >= 2 seeds per model, got {g.size}; "
                                 "state a floor instead (Band.floor)")
            if not np.all(np.isfinite(g)):
                raise ValueError("seed values must be finite")
        var = sum(float(g.var(ddof=1)) / g.size for g in groups)
        sizes = " + ".join(str(g.size) for g in groups)
        return cls(k * math.sqrt(var), f"{k:g} s.e. over {sizes} seeds")

    @classmethod
    def floor(cls, half_width, reason: str) -> Band:
        """A stated floor: a fixed tolerance the page names, with ``reason`` saying why."""
        return cls(abs(_real(half_width, "half_width")), _text(reason, "reason"))

    @classmethod
    def relative_spread(cls, values, reference: str, *, k: float = 2.0, minimum: float = 0.10) -> Band:
        """A stated floor for a *relative* gap between models of which one or both have a single
        seed (Chapters 8-9).

        ``values``: one positive quantity over the seeds of a reference model (e.g. the test
        perplexity of Chapter 6's LSTM VA seeds), named by ``reference``. The floor is ``k`` times
        their relative spread ``(max - min) / min``, rounded to whole percent, and at least
        ``minimum``: two seeds of one model already differ by the spread, so a gap between two
        single runs of different models must exceed it ``k`` times over to be read. With fewer
        than two values the floor is ``minimum``, and the source says why. ValueError for values
        that are not positive and finite, or ``k``, ``minimum`` not positive.
        """
        vals = np.asarray(values, dtype=float).ravel()
        if vals.size and not (np.all(np.isfinite(vals)) and np.all(vals > 0)):
            raise ValueError(f"a relative spread needs positive finite values, got {vals.tolist()}")
        k, minimum = _real(k, "k"), _real(minimum, "minimum")
        if k <= 0 or minimum <= 0:
            raise ValueError(f"k and minimum must be > 0, got k={k}, minimum={minimum}")
        times = "twice" if k == 2 else f"{k:g} times"
        if vals.size < 2:
            return cls(minimum, f"stated tolerance: {minimum:.0%}, since fewer than two seeds of "
                                f"{_text(reference, 'reference')} are stored to measure a spread")
        spread = float((vals.max() - vals.min()) / vals.min())
        return cls(max(minimum, round(k * spread, 2)),
                   f"stated tolerance: {times} the relative spread of {_text(reference, 'reference')} "
                   f"({k:g} × {spread:.1%} ≈ {round(k * spread, 2):.0%}), at least {minimum:.0%}")

    @classmethod
    def binomial(cls, p_a, n_a, p_b=None, n_b=None, *, k: float = 2.0, unit: str = "contexts") -> Band:
        """``k`` binomial standard errors of a rate (or of a difference of two rates).

        A rate such as ``r_nt`` measured on ``n`` contexts, ``x = p n`` of them counted, has the
        Agresti-Coull standard error ``sqrt(q (1 - q) / (n + 4))`` with ``q = (x + 2) / (n + 4)``,
        which stays positive at ``p = 0`` and ``p = 1`` (where the plain ``sqrt(p (1 - p) / n)``
        would claim no noise at all; a zero on ``n`` contexts only means ``r < 3/n``,
        Proposition 6.1 part 3); two independent rates add in quadrature. ``unit`` names what
        was counted (contexts, tokens), for the printed source.
        """
        k = _k(k)
        var, ns = 0.0, []
        for p, n in ((p_a, n_a), (p_b, n_b)):
            if p is None:
                continue
            p = _real(p, "rate")
            if not 0.0 <= p <= 1.0 or isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
                raise ValueError(f"a rate must lie in [0, 1] with n >= 1 contexts, got p={p}, n={n!r}")
            var += _agresti_coull_var(p, n)
            ns.append(str(n))
        return cls(k * math.sqrt(var), f"{k:g} binomial s.e. (Agresti-Coull) on {' and '.join(ns)} {_text(unit, 'unit')}")

    @classmethod
    def rates(cls, a, n_a, b=None, n_b=None, *, names=("first", "second"), k: float = 2.0,
              unit: str = "contexts") -> Band:
        """``k`` standard errors of ``mean(a) - mean(b)`` for rates such as ``r_nt``, each model
        measured once per seed on the same ``n`` contexts (``b=None``: one model against a number).

        ``a`` and ``b`` are the per-seed rates. Each model's share of the variance is the larger of
        two estimates of the variance of its mean: the seeds' (``var / s``, sample variance, when it
        has ``s >= 2`` seeds) and the binomial one of its pooled rate on ``s * n`` continuations
        (Agresti-Coull, as :meth:`binomial`). So one seed each gives :meth:`binomial`'s band; a
        model whose seeds disagree more than its contexts do (greedy ``r_nt`` of two seeds of one
        model can differ by far more than two binomial standard errors) brings its seeds' spread
        even when the model it is compared with has one seed, where :meth:`from_seeds` has no
        band; and two seeds that agree by chance never narrow the band below the binomial one.
        ``names`` name the two models in the printed source.
        """
        k = _k(k)
        groups = []
        names = tuple(names) + ("second",) * (2 - len(tuple(names)))
        for rates, n, name in ((a, n_a, names[0]), (b, n_b, names[1])):
            if rates is None:
                continue
            vals = np.asarray(rates, dtype=float).ravel()
            if vals.size == 0 or not np.all((vals >= 0) & (vals <= 1)):
                raise ValueError(f"rates must be one or more values in [0, 1] (one per seed), got {vals.tolist()}")
            if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
                raise ValueError(f"n must be the number of {unit} per seed (an integer >= 1), got {n!r}")
            groups.append((vals, int(n), _text(name, "name")))
        if not groups:
            raise ValueError("rates needs the per-seed rates of at least one model")
        var, parts = 0.0, []
        for vals, n, name in groups:
            pooled = vals.size * n
            binom = _agresti_coull_var(float(vals.mean()), pooled)
            seeds = float(vals.var(ddof=1)) / vals.size if vals.size >= 2 else 0.0
            var += max(binom, seeds)
            # the same n contexts decoded by each seed: say so, not "s * n contexts"
            parts.append(f"{name}: the spread of its {vals.size} seeds" if seeds > binom else
                         f"{name}: binomial (Agresti-Coull) on {n:,} {_text(unit, 'unit')}"
                         + (f" × {vals.size} seeds, pooled" if vals.size > 1 else ""))
        return cls(k * math.sqrt(var), f"{k:g} s.e.; {'; '.join(parts)}")

    @classmethod
    def ks(cls, n_a, n_b, *, c: float = 1.36) -> Band:
        """The 5 % critical two-sample Kolmogorov-Smirnov distance ``c sqrt(1/n_a + 1/n_b)``.

        Two uses. Whether ``n_a`` lengths differ from ``n_b`` others at all: a KS distance
        (:func:`nmst_lib.report.ks_distance`) above the band is significant at 5 %. And which of
        two models, with ``n_a`` and ``n_b`` lengths, is closer to the same data sample ``D``:
        ``|KS(A, D) - KS(B, D)| <= KS(A, B)`` (the triangle inequality of the sup distance between
        distribution functions), and for two samples of one distribution ``KS(A, B)`` stays below
        the band with probability about 95 % (``c = 1.36``, asymptotically; lengths are discrete,
        which makes it conservative). So a change of KS distance inside the band is not read
        (Chapters 6 and 7, the length findings).
        """
        for n in (n_a, n_b):
            if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
                raise ValueError(f"a KS band needs sample sizes >= 1 (integers), got n_a={n_a!r}, n_b={n_b!r}")
        c = _real(c, "c")
        if c <= 0:
            raise ValueError(f"c must be > 0 (1.36 for 5 %), got {c}")
        return cls(c * math.sqrt(1 / n_a + 1 / n_b), f"the 5% two-sample KS distance for {n_a:,} + {n_b:,} lengths")

    @classmethod
    def ks_over_seeds(cls, a, n_a, b, n_b, *, names=("first", "second"), k: float = 2.0,
                      c: float = 1.36) -> Band:
        """The band of ``mean(a) - mean(b)``, where ``a`` and ``b`` are two models' KS distances to
        the same data's lengths, one per seed, each from ``n_a`` (``n_b``) lengths per seed.

        The wider of two: :meth:`ks` for one seed of each (``n_a`` and ``n_b`` lengths, never the
        pooled count: two seeds of one model are two models, and their lengths are not one sample
        of twice the size), and ``k`` standard errors from the seeds' spread of each model that
        has two or more seeds (``var / s`` each, added; Chapters 6 and 7 saw two seeds of one model
        differ by more than the KS band). With one seed each it is :meth:`ks`. ``names`` name the
        two models in the printed source.
        """
        k = _k(k)
        groups = []
        for vals, name in ((a, names[0]), (b, names[1])):
            vals = np.asarray(vals, dtype=float).ravel()
            if vals.size == 0 or not np.all((vals >= 0) & (vals <= 1)):
                raise ValueError(f"KS distances must be one or more values in [0, 1] (one per seed), "
                                 f"got {vals.tolist()}")
            groups.append((vals, _text(name, "name")))
        sampling = cls.ks(n_a, n_b, c=c)
        spread = [(vals, name) for vals, name in groups if vals.size >= 2]
        if not spread:
            return sampling
        var = sum(float(vals.var(ddof=1)) / vals.size for vals, _ in spread)
        seeds = k * math.sqrt(var)
        if seeds <= sampling.half_width:
            return sampling
        which = " and ".join(f"{name}'s {vals.size} seeds" for vals, name in spread)
        return cls(seeds, f"{k:g} s.e. from the spread of {which}, wider than {sampling.source}")


def _agresti_coull_var(p: float, n: int) -> float:
    """The Agresti-Coull variance ``q (1 - q) / (n + 4)``, ``q = (p n + 2) / (n + 4)``, of a rate
    ``p`` counted on ``n`` units (:meth:`Band.binomial`, :meth:`Band.rates`)."""
    q = (p * n + 2.0) / (n + 4.0)
    return q * (1.0 - q) / (n + 4.0)


class UnknownBandError(ValueError):
    """One seed per model and no stated floor: no noise band, so no verdict (:func:`noise_band`).
    Chapter 7 (``07_gpt2``) catches it."""


def noise_band(*, seeds=None, floor: Band | None = None) -> Band:
    """The band of the rule: from the seeds when each side has >= 2, else the stated floor. Used by
    Chapters 6-9 (:meth:`Findings.judge`); ``07_gpt2`` calls it directly.

    ``seeds`` is ``(a, b)`` or ``(a,)`` per-seed values. With both, the wider band is used.
    One seed and no floor raises ``ValueError`` (a single run cannot say what is noise).
    """
    if floor is not None and not isinstance(floor, Band):
        raise TypeError(f"floor must be a Band (e.g. Band.floor(0.5, 'why')), got {type(floor).__name__}")
    from_seeds = None
    if seeds is not None:
        groups = [np.asarray(g, dtype=float).ravel() for g in seeds if g is not None]
        if groups and all(g.size >= 2 for g in groups):
            from_seeds = Band.from_seeds(*groups)
    if from_seeds is None and floor is None:
        raise UnknownBandError("one seed and no stated floor: the noise band is unknown, so no verdict can be "
                               "read; give >= 2 seeds per model or a floor (Band.floor(width, reason))")
    if from_seeds is None or (floor is not None and floor.half_width > from_seeds.half_width):
        return floor
    return from_seeds


def convergence(result) -> dict:
    """Whether one stored run converged, from its per-epoch history (``metrics.history``).

    Returns ``metric`` (``val_ppl``; for the entmax models of Chapter 8, which have no
    perplexity, ``val_eps_ppl`` where they were selected by epsilon-perplexity, else
    ``val_loss``), ``best_epoch``, ``last_epoch``, ``last_change``
    (last epoch's value minus the one before; NaN with one epoch), ``stopped_early`` (the
    trainer's early stopping fired: ``patience`` epochs in a row without an improvement of more
    than ``min_improvement``, a plateau rule after Choi, Cho, Lee (2023) App. D;
    ``metrics.stopped_early``) and
    ``converged``: True when early stopping fired or the best epoch came before the last one
    (validation had stopped improving), False when training was cut by its epoch limit while the
    last epoch was still the best, i.e. while the model improved.

    A validation value that is not a number, or is NaN (a diverged run: the trainer stops such a
    run with ``FloatingPointError``, and stored results cannot hold NaN), raises ``ValueError``:
    NumPy's argmin would take the NaN epoch for the best one and call the run converged.
    """
    try:
        history = list(result["metrics"]["history"])
    except (KeyError, TypeError):
        raise ValueError("a stored result needs metrics.history (one entry per epoch)") from None
    if not history:
        raise ValueError("metrics.history is empty: no epoch was recorded")
    metric = next((m for m in ("val_ppl", "val_eps_ppl") if history[0].get(m) is not None), "val_loss")
    values = []
    for epoch, h in enumerate(history, start=1):
        value = h.get(metric) if isinstance(h, dict) else None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"metrics.history epoch {epoch} has no number for {metric} (got {value!r}); every "
                             "epoch of a run records the same validation metric")
        if math.isnan(value):
            raise ValueError(f"metrics.history epoch {epoch} has {metric} = NaN: the run diverged, and a diverged "
                             "run has no convergence to report (the trainer stops such runs)")
        values.append(float(value))
    best = int(np.argmin(values)) + 1
    change = values[-1] - values[-2] if len(values) >= 2 else math.nan
    stopped_early = result["metrics"].get("stopped_early") is True
    return {"metric": metric, "best_epoch": best, "last_epoch": len(values), "last_change": change,
            "stopped_early": stopped_early, "converged": stopped_early or best < len(values)}


def convergence_rows(groups) -> list:
    """One table row per model: ``groups`` maps a model's name to its runs (one per seed).

    Shows each seed's best and last epoch and last-epoch validation change, and whether every
    seed converged (Chapters 6-9 show it under their results tables).
    """
    table = []
    for name, runs in groups.items():
        cs = [convergence(r) for r in runs]
        if not cs:
            raise ValueError(f"model {name!r} has no runs")
        table.append((name, cs))
    metrics = {c["metric"] for _, cs in table for c in cs}
    # one column: headed by the metric when every model has the same, else each value names it
    header = f"last epoch's change ({next(iter(metrics))})" if len(metrics) == 1 else "last epoch's change"
    rows = []
    for name, cs in table:
        done = sum(c["converged"] for c in cs)
        rows.append({"model": name,
                     "best / last epoch": ", ".join(f"{c['best_epoch']}/{c['last_epoch']}" for c in cs),
                     header: ", ".join(f"{c['last_change']:+.3g}" + ("" if len(metrics) == 1 else
                                                                     f" ({c['metric']})") for c in cs),
                     "converged": "yes" if done == len(cs) else
                     ("no: still improving" if done == 0 else f"{done} of {len(cs)} seeds")})
    return rows


def last_epoch_floor(*runs) -> Band | None:
    """The floor for models that had not converged: the largest last-epoch validation change
    over ``runs`` (one more epoch could move either model by that much). Runs that converged
    contribute nothing; if every run converged there is no floor (None): the seeds must then give
    the band, and with one seed per model :meth:`Findings.judge` reads no verdict. Chapters 6, 7
    and 9 state their floors with it."""
    changes, metrics = [], set()
    for r in runs:
        c = convergence(r)
        metrics.add(c["metric"])
        if not c["converged"] and not math.isnan(c["last_change"]):
            changes.append(abs(c["last_change"]))
    if len(metrics) > 1:
        raise ValueError(f"the runs compared record different validation metrics {sorted(metrics)}")
    if not changes:
        return None
    return Band(max(changes), "the largest last-epoch validation change of the runs "
                "compared, which were still improving")


#: The hyper-parameters a recipe table compares, with the words a page prints for them.
RECIPE_FIELDS = {
    "dataset": "data set", "pretrained": "pretrained weights (None: from scratch)",
    "hidden": "hidden size", "layers": "layers", "dropout": "dropout", "lr": "learning rate",
    "betas": "AdamW betas", "weight_decay": "weight decay", "lr_schedule": "learning-rate schedule",
    "lr_decay": "lr decay factor (plateau schedule)",
    "min_improvement": "plateau threshold (relative gain)",
    "start_below_unigram": "plateau rule held until below this share of the unigram perplexity",
    "select_on": "epochs compared by (None: the validation loss)",
    "patience": "early-stopping patience (epochs)", "max_epochs": "max. epochs",
    "max_steps": "max. steps", "batch_size": "batch size (sequences)",
    "max_batch_tokens": "batch size (tokens)", "grad_accum": "gradient accumulation",
    "clip": "gradient clip", "vocab_cap": "vocabulary cap (None: every word)",
    "vocab_kind": "vocabulary kind", "drop_unk": "WikiText's <unk> markers deleted",
    "max_train_tokens": "training tokens (None: all)",
    "decode_max_len": "decoding limit L", "num_decode_contexts": "decoded contexts (None: all)",
}


def recipe_rows(ours, paper, fields=RECIPE_FIELDS, *, seeds=None) -> list:
    """Our recipe beside the paper's, one row per hyper-parameter, each deviation named.

    ``ours`` and ``paper`` are configs (dataclasses, mappings, or configs with a
    ``flat_dict()`` such as ``ExperimentConfig``, read by flat field name) of the same experiment at
    our profile and at the ``paper`` profile, which encodes the paper's published settings
    (e.g. Choi et al. 2023 App. D). ``seeds``: optional ``(ours, paper)`` seed counts.
    Fields that are None in both are left out. Chapters 6-9 show it as their recipe table.
    """
    def get(config, name):
        if isinstance(config, dict):
            return config.get(name)
        if callable(getattr(config, "flat_dict", None)):  # ExperimentConfig: by flat name
            return config.flat_dict().get(name)
        return getattr(config, name, None)

    rows = []
    for name, label in fields.items():
        a, b = get(ours, name), get(paper, name)
        if a is None and b is None:
            continue
        a, b = (tuple(v) if isinstance(v, list) else v for v in (a, b))
        rows.append({"hyper-parameter": label, "ours": "None" if a is None else str(a),
                     "paper": "None" if b is None else str(b), "deviation": "" if a == b else "differs"})
    if seeds is not None:
        a, b = seeds
        rows.append({"hyper-parameter": "seeds per model", "ours": str(a), "paper": str(b),
                     "deviation": "" if a == b else "differs"})
    return rows


def recipe_summary(rows) -> str:
    """One line for a :func:`recipe_rows` table: how many settings differ from the paper's, and
    which ("4 of 12 settings differ from the paper's: learning rate, batch size, ..."), so a page
    can show the table folded under it (Chapter 6)."""
    rows = list(rows)
    if not rows:
        raise ValueError("recipe_summary needs the rows of recipe_rows, got none")
    differing = [r["hyper-parameter"] for r in rows if r.get("deviation")]
    if not differing:
        return f"all {len(rows)} settings as in the paper"
    return f"{len(differing)} of {len(rows)} settings differ from the paper's: " + ", ".join(differing)


def convergence_summary(rows) -> str:
    """One line for a :func:`convergence_rows` table: how many models converged on every seed
    ("0 of 10 models converged: every run was still improving at its last epoch"). Used by
    Chapters 6 and 7 (``06_wikitext``, ``07_gpt2``)."""
    rows = list(rows)
    if not rows:
        raise ValueError("convergence_summary needs the rows of convergence_rows, got none")
    done = sum(r["converged"] == "yes" for r in rows)
    still = sum(r["converged"].startswith("no") for r in rows)
    text = f"{done} of {len(rows)} models converged on every seed"
    if still == len(rows):
        text += "; every run was still improving at its last epoch"
    elif still:
        text += f"; {still} still improving at their last epoch"
    return text


@dataclass(frozen=True)
class Claim:
    """One finding of a paper that the book tests.

    ``quantity`` names the difference compared (e.g. "NMST − ST validation perplexity");
    ``direction`` is the sign the paper reports for it: ``-1`` (below zero) or ``+1``.
    ``paper_value`` quotes what the paper reports (text, as printed there).
    ``beyond`` is empty for a claim the paper makes; non-empty, it marks a comparison the paper
    never makes and says why in a phrase. The three kinds, as the notation page states them: its
    idea set against a baseline it never trains (contextual temperature against a single-softmax
    LSTM, where the paper only sets CT-MoS against MoS and MoS+); two of its models it never sets
    against each other (Chapter 6's LSTM against its RNN); a setting at which it reports no
    finding, beside the one at which it does (entmax at alpha = 1.5 where the paper reports 1.2, an
    eps outside its grid, a trend read past its grid). Such a comparison is read by the same rule
    but listed apart and never counted for or against the paper (:meth:`Findings.beyond_list`).
    """

    id: str
    paper: str
    where: str
    statement: str
    quantity: str = ""
    direction: int = -1
    paper_value: str = ""
    beyond: str = ""

    def __post_init__(self):
        for name in ("id", "paper", "where", "statement"):
            _text(getattr(self, name), name)
        if not isinstance(self.beyond, str):
            raise TypeError(f"beyond must be a str (empty for a claim the paper makes, else why it "
                            f"is not one), got {type(self.beyond).__name__}")
        if self.direction not in (-1, 1) or isinstance(self.direction, bool):
            raise ValueError(f"direction must be -1 (the paper reports the quantity below 0) or +1, "
                             f"got {self.direction!r}")


@dataclass(frozen=True)
class Finding:
    """A claim with its verdict, the measured difference, the band and the reason. Chapters 6-9 list
    their findings as these."""

    claim: Claim
    verdict: str
    value: float | None = None
    band: Band | None = None
    reason: str = ""
    digits: int = 2

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    @property
    def counted(self) -> bool:
        """Whether the finding counts for or against the paper (forced, not-run and a
        comparison beyond the paper, :attr:`Claim.beyond`, do not)."""
        return self.verdict in ("reproduces", "does not reproduce") and not self.claim.beyond

    def sizes(self, brief: bool = False) -> str:
        """The numbers behind the verdict, e.g. "NMST − ST = −4.80; band ±15.00 (...)".

        ``brief``: the difference and the band's half-width only, without where the band comes
        from and without the paper's value (a section whose table beside the verdict already
        quotes the paper; the chapter's list of findings gives both); a reason (why a finding
        is forced or not run) is always kept."""
        parts = []
        if self.value is not None:
            name = self.claim.quantity or "difference"
            parts.append(f"{name} = {self.value:+.{self.digits}f}")
        if self.band is not None:
            parts.append(f"noise band ±{self.band.half_width:.{self.digits}f}"
                         + ("" if brief else f" ({self.band.source})"))
        if self.claim.paper_value and not brief:
            parts.append(f"paper: {self.claim.paper_value}")
        if self.reason:
            parts.append(self.reason)
        return "; ".join(parts)


def decide(claim: Claim, value, band: Band, *, digits: int = 2) -> Finding:
    """The rule: within noise if ``|value| <= band``, else reproduces when ``value`` has the
    paper's sign (``claim.direction``) and does not reproduce otherwise. Chapters 6-9 judge their
    findings by it (:meth:`Findings.judge`)."""
    if not isinstance(claim, Claim):
        raise TypeError(f"claim must be a Claim, got {type(claim).__name__}")
    if not isinstance(band, Band):
        raise TypeError(f"band must be a Band (see noise_band), got {type(band).__name__}")
    value = _real(value, "value")
    if abs(value) <= band.half_width:
        verdict = "within noise"
    elif math.copysign(1.0, value) == claim.direction:
        verdict = "reproduces"
    else:
        verdict = "does not reproduce"
    return Finding(claim, verdict, value, band, digits=digits)


@dataclass
class Findings:
    """A chapter's findings, in the order the page tests them; renders its list and counts. Every
    page of Chapters 6-9 builds one."""

    chapter: str
    items: list = field(default_factory=list)

    def _add(self, finding: Finding) -> Finding:
        if any(f.claim.id == finding.claim.id for f in self.items):
            raise ValueError(f"claim id {finding.claim.id!r} is already judged on this page")
        self.items.append(finding)
        return finding

    def judge(self, claim: Claim, value, *, seeds=None, floor: Band | None = None,
              digits: int = 2) -> Finding:
        """Apply the rule to ``value`` with the band of :func:`noise_band`. With one seed of a
        model and no floor (e.g. converged runs, :func:`last_epoch_floor` None) the band is
        unknown: the finding is *not run*, naming the seeds it needs, never read with no band."""
        try:
            band = noise_band(seeds=seeds, floor=floor)
        except UnknownBandError:
            # the one-seed difference is shown, not read: the seeds that would give its band were not run
            return self._add(Finding(claim, "not run", _real(value, "value"), None,
                                     "not run: a model compared has one seed and converged, so no noise band "
                                     "until two seeds of each are stored", digits=digits))
        return self._add(decide(claim, value, band, digits=digits))

    def forced(self, claim: Claim, theorem: str, value=None, *, digits: int = 2) -> Finding:
        """A finding a proved bound decides: labelled with ``theorem``, not counted."""
        value = None if value is None else _real(value, "value")
        return self._add(Finding(claim, "forced", value, None, f"forced by {_text(theorem, 'theorem')}",
                                 digits=digits))

    def not_run(self, claim: Claim, reason: str) -> Finding:
        """A finding the book did not test, with the reason."""
        return self._add(Finding(claim, "not run", None, None, f"not run: {_text(reason, 'reason')}"))

    def not_stored(self, claim: Claim, missing) -> Finding:
        """A finding whose models are not stored: *not run*, naming them.

        A page that shows the stored part of its suite
        (:mod:`nmst_lib.experiments.page_selection`) still lists every finding
        of the suite; one that needs a missing model says so instead of being
        dropped (Chapter 6). ``missing``: the models' names, e.g.
        ``["LSTM ST ε=1e-4"]`` (at least one)."""
        names = [missing] if isinstance(missing, str) else list(missing)
        if not names:
            raise ValueError("not_stored needs the names of the missing models, got none")
        names = [_text(n, "a missing model's name") for n in names]
        verb = "is" if len(names) == 1 else "are"
        return self.not_run(claim, f"{' and '.join(names)} {verb} not stored")

    def __getitem__(self, claim_id: str) -> Finding:
        for f in self.items:
            if f.claim.id == claim_id:
                return f
        raise KeyError(f"no finding {claim_id!r} on this page; judged: {[f.claim.id for f in self.items]}")

    def line(self, *claim_ids: str, brief: bool = False) -> str:
        """The verdicts of some findings, one sentence each, for the prose of their section
        (at least one claim id; ``ValueError`` otherwise). ``brief``: each with its difference
        and band width only (:meth:`Finding.sizes`), for a section whose table quotes the paper;
        the chapter's list (:meth:`markdown_list`) keeps every detail."""
        if not claim_ids:
            raise ValueError("line needs the id of at least one judged finding, got none")
        if not isinstance(brief, bool):
            raise TypeError(f"brief must be True or False, got {brief!r}")
        parts = [f"{self[i].claim.statement}"
                 f"{' (beyond the paper, not counted)' if self[i].claim.beyond else ''}: "
                 f"*{self[i].verdict}* ({self[i].sizes(brief)})" for i in claim_ids]
        # one sentence each; the first keeps its case, since a page may splice it into a sentence
        return ". ".join([parts[0], *(p[:1].upper() + p[1:] for p in parts[1:])]) + "."

    @property
    def of_the_papers(self) -> list:
        """The findings of claims the papers make, in page order: what the counts, the Summary
        and the list are made of."""
        return [f for f in self.items if not f.claim.beyond]

    @property
    def beyond_the_papers(self) -> list:
        """The comparisons beyond the papers (:attr:`Claim.beyond`), in page order: judged by
        the same rule, never counted."""
        return [f for f in self.items if f.claim.beyond]

    def counts(self) -> dict:
        """``{verdict: number}`` over the five verdicts (zeros included), of the papers' claims
        only: a comparison beyond the papers is never counted."""
        return {v: sum(f.verdict == v for f in self.of_the_papers) for v in VERDICTS}

    def summary(self) -> str:
        """The Summary's sentence, e.g. "of the 9 findings of the paper tested on this page, 4
        reproduce, 2 do not and 3 are within the noise; 4 were not run". A verdict no finding got
        is left out, and "the paper" is "the papers" when the claims come from several."""
        c = self.counts()
        tested = len(self.of_the_papers) - c["not run"]
        papers = "the paper" if len({f.claim.paper for f in self.of_the_papers}) <= 1 else "the papers"

        def n(k, one, many):
            return f"{k} {one if k == 1 else many}"

        parts = [n(c[v], one, many) for v, one, many in (
            ("reproduces", "reproduces", "reproduce"),
            ("does not reproduce", "does not", "do not"),
            ("within noise", "is within the noise", "are within the noise"),
            ("forced", "is forced by a theorem (not counted)", "are forced by a theorem (not counted)"))
            if c[v]]
        if not parts:
            head = f"no finding of {papers} was tested on this page"
        else:
            listed = parts[0] if len(parts) == 1 else (
                f"{parts[0]} and {parts[1]}" if len(parts) == 2 else ", ".join(parts[:-1]) + f", and {parts[-1]}")
            head = f"of the {n(tested, 'finding', 'findings')} of {papers} tested on this page, {listed}"
        return head + (f"; {n(c['not run'], 'was', 'were')} not run" if c["not run"] else "")

    def markdown_list(self, by_verdict: bool = False) -> str:
        """One bullet per finding of the papers: statement (paper, where): **verdict** (sizes); in
        the order they were judged, or with ``by_verdict`` grouped in the order of ``VERDICTS``
        (those that reproduce first, those not run last), the order within a verdict kept, as
        each chapter's "What reproduces" list shows them."""
        if not isinstance(by_verdict, bool):
            raise TypeError(f"by_verdict must be True or False, got {type(by_verdict).__name__}")
        shown = self.of_the_papers
        if by_verdict:
            shown = sorted(shown, key=lambda f: VERDICTS.index(f.verdict))  # stable: judged order within
        return "\n".join(f"* **{f.claim.statement}** ({f.claim.paper}, {f.claim.where}): "
                         f"*{f.verdict}* ({f.sizes()})." for f in shown)

    def beyond_list(self) -> str:
        """One bullet per comparison beyond the papers: statement (after paper, where): how the
        rule reads it (sizes), and why the paper does not make it; empty when there is none."""
        return "\n".join(f"* **{f.claim.statement}** (after {f.claim.paper}, {f.claim.where}): "
                         f"{'' if f.verdict == 'not run' else 'reads '}*{f.verdict}* ({f.sizes()}); "
                         f"not a claim of the paper, so not counted: {f.claim.beyond}."
                         for f in self.beyond_the_papers)

    def rows(self) -> list:
        """Table rows for :func:`nmst_lib.report.html_table`, the papers' claims only."""
        return [{"finding": f.claim.statement, "paper": f"{f.claim.paper}, {f.claim.where}",
                 "verdict": f.verdict, "sizes": f.sizes()} for f in self.of_the_papers]
