"""Assignment 4, q8: the train/test mismatch of Martins et al. (2020)'s Table 5 on two
models at the optimum of their losses (Chapter 8, Theorem 8.4). The test cells reach these
through :mod:`nmst_lib.classroom.a4_sparse_temperature`.

The reference table of the hidden checks (``_mismatch_distribution``, ``_mismatch_scores``) is
private and not re-exported: the student notebook imports the assignment's module, and a public
reference would be the answer to q8 in one line."""

# A check's failure is an AssertionError (otter's test failure) whatever its
# cause, a wrong type included:
# ruff: noqa: TRY004

from __future__ import annotations

import dataclasses
import math
import numbers

import torch

from . import checks as C
from .a4_sparse_temperature_common import (
    _close,
)

__all__ = [
    "MISMATCH",
    "MISMATCH_ROWS",
    "MismatchSetting",
    "mismatch_counts",
    "mismatch_setting",
    "check_mismatch_format",
    "check_mismatch_supports",
    "check_mismatch_table5",
    "hidden_mismatch_supports_recomputed",
    "hidden_mismatch_scores_recomputed",
]

# ==================================== q8: Martins et al.'s Table 5 mismatch

#: The mismatch experiment's fixed settings (Chapter 8; Martins et al.
#: (2020), Tables 3 and 5). Contexts cycle through the support sizes.
MISMATCH = {
    "contexts": 96,
    "vocab_size": 50,
    "references": 64,     # held-out positions per context
    "support_sizes": (1, 2, 3, 5, 8, 13, 21, 34),
    "alpha": 1.5,         # the entmax-trained model's alpha, and the decoder's
    "tail": 0.05,         # the NLL model's mass spread over the vocabulary
    "k": 10,
    "mu": 0.95,
    "seed": 0,
}

#: The rows of the table, (training loss, decoder), in Table 5's order
#: (plus the NLL model's own softmax, for reference).
MISMATCH_ROWS = (("nll", "softmax"), ("nll", "top-k"), ("nll", "nucleus"),
                 ("nll", "entmax"), ("entmax", "top-k"),
                 ("entmax", "nucleus"), ("entmax", "entmax"))

_METRIC_KEYS = ("sp", "eps_ppl", "outside", "support")
_T5 = "Martins et al. (2020), Table 5; Chapter 8"


@dataclasses.dataclass(frozen=True)
class MismatchSetting:
    """The two models and the held-out text of the mismatch experiment.

    ``nll_logits`` and ``entmax_scores`` are ``[C, V]`` (one row per
    context); the held-out text is ``N = C * R`` positions, position ``t``
    being context ``contexts[t]`` followed by token ``targets[t]``.
    """

    nll_logits: torch.Tensor
    entmax_scores: torch.Tensor
    contexts: torch.Tensor
    targets: torch.Tensor
    alpha: float
    k: int
    mu: float

    @property
    def vocab_size(self) -> int:
        return int(self.nll_logits.shape[-1])


def _zipf_counts(m: int, total: int) -> torch.Tensor:
    """``m`` positive integer counts summing to ``total``, proportional to
    1/rank (largest remainder; every count at least 1)."""
    w = 1.0 / torch.arange(1, m + 1, dtype=torch.float64)
    w = w / w.sum() * total
    n = torch.floor(w).long().clamp(min=1)
    while int(n.sum()) < total:
        n[int(torch.argmax(w - n))] += 1
    while int(n.sum()) > total:
        n[int(torch.argmax(torch.where(n > 1, n - w, -math.inf)))] -= 1
    return n


def mismatch_counts() -> torch.Tensor:
    """How often each token follows each context in the held-out text,
    ``[C, V]`` (each row sums to ``R``): context c has
    ``support_sizes[c % 8]`` possible next tokens, at random ids, with
    Zipf-shaped counts. ``counts / R`` is the data distribution p*."""
    S = MISMATCH
    g = C.generator(S["seed"])
    C_, V, R = S["contexts"], S["vocab_size"], S["references"]
    counts = torch.zeros(C_, V, dtype=torch.long)
    sizes = S["support_sizes"]
    zipf = {m: _zipf_counts(m, R) for m in sizes}
    for c in range(C_):
        m = sizes[c % len(sizes)]
        tokens = torch.randperm(V, generator=g)[:m]
        counts[c, tokens] = zipf[m]
    return counts


def mismatch_setting() -> MismatchSetting:
    """The models at the optimum of their training losses for the data
    distribution p* = counts / R (:func:`mismatch_counts`; no training).

    * entmax loss (Theorem 8.4, parts 2-3, Chapter 8: convex, gradient
      alpha-entmax(z) - e_y, so the expected loss is smallest where
      alpha-entmax(z) = p*): scores ``p*^(alpha-1)/(alpha-1)`` on the
      support (threshold tau = 0) and below 0 off it;
    * NLL (softmax): the softmax cannot give zeros, so the model keeps a
      tail, ``(1 - tail) p* + tail/|V|``; its logits are the log of that
      plus a constant per context (logits are not log-probabilities).

    The held-out text follows each context exactly ``counts`` times, so
    its empirical distribution is p* (no sampling noise).
    """
    S = MISMATCH
    counts = mismatch_counts()
    C_, V = counts.shape
    g = C.generator(S["seed"] + 1)
    p = counts.double() / S["references"]
    alpha = float(S["alpha"])
    below = -0.5 - torch.rand(C_, V, generator=g, dtype=torch.float64)
    scores = torch.where(p > 0, p ** (alpha - 1) / (alpha - 1), below)
    tail = S["tail"]
    shift = 3 * torch.randn(C_, 1, generator=g, dtype=torch.float64)
    logits = torch.log((1 - tail) * p + tail / V) + shift
    contexts = torch.arange(C_).repeat_interleave(counts.sum(-1))
    targets = torch.arange(V).repeat(C_).repeat_interleave(counts.flatten())
    return MismatchSetting(logits, scores, contexts, targets, alpha,
                           int(S["k"]), float(S["mu"]))


def _mismatch_distribution(setting: MismatchSetting, training: str,
                          decoder: str) -> torch.Tensor:
    """The distribution ``[C, V]`` that ``decoder`` samples from, for the
    model trained with ``training`` (Martins et al. (2020), Table 5): the
    model's own ("softmax" for NLL, "entmax" for the entmax loss), or
    ``decoding.decoder_distribution`` of its log-probabilities ("top-k",
    "nucleus", and "entmax" on the NLL model)."""
    from nmst_lib import decoding
    from nmst_lib.entmax import entmax
    if (training, decoder) not in MISMATCH_ROWS:
        raise ValueError(f"unknown row {(training, decoder)!r}; the rows "
                         f"are {MISMATCH_ROWS}")
    if training == "nll":
        log_p = torch.log_softmax(setting.nll_logits, -1)
        if decoder == "softmax":
            return log_p.exp()
    else:
        own = entmax(setting.entmax_scores, setting.alpha)
        if decoder == "entmax":
            return own
        log_p = torch.log(own)
    kwargs = {"top-k": {"k": setting.k}, "nucleus": {"p": setting.mu},
              "entmax": {"alpha": setting.alpha}}[decoder]
    return decoding.decoder_distribution(log_p, decoder, **kwargs)


def _mismatch_scores(q: torch.Tensor, setting: MismatchSetting) -> dict:
    """sp (Theorem 8.5), eps-perplexity with its best kappa (eq. (8.2),
    Proposition 8.1), the share of reference words outside the support,
    and the mean support size over the contexts (Martins et al.'s Table 4)
    of the distributions ``q [C, V]`` on the held-out text."""
    from nmst_lib import metrics
    rows = q[setting.contexts]
    q_y = rows.gather(-1, setting.targets.unsqueeze(-1)).squeeze(-1)
    return {"sp": float(metrics.sparsemax_score(rows, setting.targets).mean()),
            "eps_ppl": metrics.epsilon_perplexity(q_y, setting.vocab_size)[0],
            "outside": float((q_y == 0).double().mean()),
            "support": float((q > 0).sum(-1).double().mean())}


def _check_table_object(table5) -> None:
    if table5 is None or table5 is Ellipsis:
        raise C.NotImplementedYet("`table5` is None: `mismatch_table` is not "
                                  "implemented yet (replace the `...`)")
    if not isinstance(table5, dict):
        raise AssertionError(
            f"`table5` is a {type(table5).__name__}; it should be a dict "
            "{(training, decoder): {'sp': ..., 'eps_ppl': ..., "
            "'outside': ..., 'support': ...}}")


def _row(table5, key) -> dict:
    entry = table5.get(key)
    C.expect(entry is not None,
             f"`table5` has no row {key!r}; its keys should be the pairs "
             f"{list(MISMATCH_ROWS)}")
    C.expect(isinstance(entry, dict) and set(_METRIC_KEYS) <= set(entry),
             f"table5[{key!r}] should be a dict with the keys "
             f"{list(_METRIC_KEYS)}")
    for m in _METRIC_KEYS:
        v = entry[m]
        C.expect(isinstance(v, numbers.Real) and not isinstance(v, bool),
                 f"table5[{key!r}][{m!r}] is {v!r}; it should be a number "
                 "(a Python float: use float(...) on a tensor)")
    return {m: float(entry[m]) for m in _METRIC_KEYS}


def check_mismatch_format(table5) -> None:
    """The table's format: one row per (training, decoder) pair with sp in
    [0, 1] (Theorem 8.5), eps-perplexity in [1, |V|] (its best kappa is at
    most as bad as the uniform distribution's |V|; Proposition 8.1), the
    share outside the support in [0, 1], the mean support in [1, |V|]."""
    _check_table_object(table5)
    V = MISMATCH["vocab_size"]
    for key in MISMATCH_ROWS:
        r = _row(table5, key)
        for m, lo, hi, why in (
                ("sp", 0.0, 1.0, "0 <= sp <= 1 (Theorem 8.5, part 2)"),
                ("eps_ppl", 1.0, V, ("with the best kappa it lies in [1, "
                 "|V|]: kappa -> infinity gives the uniform distribution's "
                 "|V| (Proposition 8.1); did you pass the vocabulary size?")),
                ("outside", 0.0, 1.0, "a share of the positions"),
                ("support", 1.0, V, ("the best token always has p > 0 "
                 "(Corollary 8.1) and there are |V| tokens"))):
            C.expect(lo - 1e-9 <= r[m] <= hi + 1e-9,
                     f"table5[{key!r}][{m!r}] = {C.fmt(r[m])}, outside "
                     f"[{lo:g}, {hi:g}]: {why}")


def check_mismatch_supports(table5) -> None:
    """Chapter 8 on the supports: the softmax keeps all |V| tokens; top-k at
    most k; truncating the entmax-trained model only removes tokens; and
    that model's own distribution leaves no reference word out (it learned
    the data's support: Theorem 8.4)."""
    check_mismatch_format(table5)
    S, V = MISMATCH, MISMATCH["vocab_size"]
    soft = _row(table5, ("nll", "softmax"))
    C.expect(soft["support"] == V and soft["outside"] == 0.0,
             "the NLL model's softmax has mean support "
             f"{C.fmt(soft['support'])}"
             f" and leaves {C.fmt(soft['outside'])} of the reference words "
             f"outside it, but a softmax gives every token p_v >= "
             f"e^(z_v - max z)/|V| > 0 (Chapter 8): support |V| = {V}, none "
             "outside")
    for training in ("nll", "entmax"):
        r = _row(table5, (training, "top-k"))
        C.expect(r["support"] <= S["k"] + 1e-9,
                 f"top-k on the {training} model keeps {C.fmt(r['support'])}"
                 f" tokens on average, more than k = {S['k']}: top-k keeps the"
                 " k most probable tokens and renormalises")
    own = _row(table5, ("entmax", "entmax"))
    C.expect(own["outside"] == 0.0,
             f"entmax sampling from the entmax-trained model leaves "
             f"{C.fmt(own['outside'])} of the reference words outside its "
             "support, but that model learned the data's support (the "
             "expected entmax loss is smallest where alpha-entmax(z) = p*: "
             "Theorem 8.4, Chapter 8). Entmax sampling from it draws from "
             "its own distribution, alpha-entmax(scores); applying entmax "
             "again to its log-probabilities gives another, sparser one")
    for decoder in ("top-k", "nucleus"):
        r = _row(table5, ("entmax", decoder))
        C.expect(r["support"] <= own["support"] + 1e-9,
                 f"{decoder} on the entmax-trained model keeps "
                 f"{C.fmt(r['support'])} tokens on average, more than the "
                 f"model's own support ({C.fmt(own['support'])}): truncating"
                 " a distribution can only remove tokens, never add any")


def check_mismatch_table5(table5) -> None:
    """Martins et al. (2020), Table 5 (Chapter 8): entmax sampling from the
    entmax-trained model scores best, on sp and on eps-perplexity; entmax
    at decoding time only (the NLL model) or truncating the entmax model
    is worse. Here this is forced: both metrics are proper and the model's
    own distribution is the held-out text's."""
    check_mismatch_format(table5)
    own = _row(table5, ("entmax", "entmax"))
    why = ("here the held-out text follows the data distribution p* exactly"
           " and the entmax-trained model's own distribution is p* (Theorem "
           "8.4); no distribution scores better than p* itself (sp: the "
           "mean of sp(q, y) over y ~ p* is 1/2 + ||p*||^2/2 - ||q - p*||^2/2"
           ", Theorem 8.5; eps-perplexity: Gibbs' inequality). Score every "
           "row at the same positions (setting.contexts, setting.targets) "
           "and with the best kappa")
    for key in MISMATCH_ROWS[:-1]:
        r = _row(table5, key)
        C.expect(r["sp"] < own["sp"],
                 f"{key} has sp = {C.fmt(r['sp'], 6)}, not below entmax "
                 f"sampling from the entmax-trained model "
                 f"({C.fmt(own['sp'], 6)}), but {why} ({_T5})")
        C.expect(r["eps_ppl"] > own["eps_ppl"],
                 f"{key} has eps-perplexity {C.fmt(r['eps_ppl'], 6)}, not "
                 "above entmax sampling from the entmax-trained model "
                 f"({C.fmt(own['eps_ppl'], 6)}), but {why} ({_T5})")


def _recomputed_rows():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread, immune to load
    try:
        setting = mismatch_setting()
        return {key: _mismatch_scores(_mismatch_distribution(setting, *key),
                                     setting) for key in MISMATCH_ROWS}
    finally:
        torch.set_num_threads(threads)


_RECIPE = ("the recomputation with mismatch_setting() (decoding."
           "decoder_distribution of the log-probabilities, log_softmax of "
           "the NLL logits; the entmax model's own alpha-entmax(scores))")


def hidden_mismatch_supports_recomputed(table5) -> None:
    """The table's support sizes and shares outside the support recomputed
    with :func:`_mismatch_distribution` (Martins et al. (2020), Tables 4-5;
    Chapter 8)."""
    check_mismatch_format(table5)
    for key, want in _recomputed_rows().items():
        r = _row(table5, key)
        for m in ("support", "outside"):
            _close(r[m], want[m], f"table5[{key!r}][{m!r}]", _RECIPE,
                   rtol=1e-9, atol=1e-12)


def hidden_mismatch_scores_recomputed(table5) -> None:
    """The table's sp and eps-perplexity (best kappa) recomputed with
    ``nmst_lib.metrics`` (Theorem 8.5, eq. (8.2), Proposition 8.1;
    Martins et al. (2020), Table 5; Chapter 8)."""
    check_mismatch_format(table5)
    for key, want in _recomputed_rows().items():
        r = _row(table5, key)
        _close(r["sp"], want["sp"], f"table5[{key!r}]['sp']",
               _RECIPE + " and metrics.sparsemax_score", rtol=1e-6)
        _close(r["eps_ppl"], want["eps_ppl"], f"table5[{key!r}]['eps_ppl']",
               _RECIPE + " and metrics.epsilon_perplexity(q_y, |V|)[0] (the"
               " best kappa, Proposition 8.1)", rtol=1e-6)
