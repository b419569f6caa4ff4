"""Choi, Cho, Lee (2023) Remark 1: the optimal p(eos | prefix) need not be
monotone, so no ST model fits it (Chapter 5, ``05_nmst``).

Part of :mod:`nmst_lib.theory`, which re-exports every public name here."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validation import is_integer_tensor

__all__ = [
    "RemarkOneDataset",
    "remark1_dataset",
    "optimal_eos_probs",
    "monotone_violation",
    "best_monotone_eos_probs",
    "eos_log_likelihood",
]


# ---------------------------------------------------------------------------------------
# Choi, Cho, Lee (2023), Remark 1: the optimal p(eos | prefix) need not be monotone
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemarkOneDataset:
    """A data set of continuations sharing one context, as in Choi, Cho, Lee (2023), Remark 1
    (Chapter 5, ``05_nmst``).

    Attributes:
        vocab: token strings; ``vocab[eos_id] == "<eos>"`` (eos is the last id).
        context: the shared context x as token strings (a single ``<bos>``).
        sequences: the continuations y^(n) as token strings, each ending with ``<eos>``.
        counts: how often each continuation occurs (equal in the paper).
    """

    vocab: tuple[str, ...]
    context: tuple[str, ...]
    sequences: tuple[tuple[str, ...], ...]
    counts: tuple[int, ...]

    @property
    def eos_id(self) -> int:
        return self.vocab.index("<eos>")

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, words) -> torch.Tensor:
        """Token ids of a sequence of token strings."""
        index = {w: i for i, w in enumerate(self.vocab)}
        unknown = [w for w in words if w not in index]
        if unknown:
            raise ValueError(
                f"tokens {unknown} are not in the vocabulary {self.vocab}"
            )
        return torch.tensor([index[w] for w in words], dtype=torch.long)

    def context_ids(self) -> torch.Tensor:
        """The context as a ``[1, k]`` LongTensor (ready for a model's ``initial_state``)."""
        return self.encode(self.context).unsqueeze(0)

    def token_ids(self) -> torch.Tensor:
        """The continuations as a ``[N, T_max]`` LongTensor, PAD = -1 after each eos."""
        longest = max(len(s) for s in self.sequences)
        out = torch.full((len(self.sequences), longest), -1, dtype=torch.long)
        for n, seq in enumerate(self.sequences):
            out[n, : len(seq)] = self.encode(seq)
        return out

    def longest(self) -> torch.Tensor:
        """Token ids of the longest continuation (y^(2) of Remark 1). Used by Chapter 5
        (``05_nmst``)."""
        lengths = [len(s) for s in self.sequences]
        return self.encode(self.sequences[lengths.index(max(lengths))])

    def eos_decision_counts(self, path: torch.Tensor | None = None):
        """Counts behind each eos decision along ``path`` (default: the longest continuation). Used
        by Chapter 5 (``05_nmst``).

        Returns ``(stop, go)``, float64 tensors of length |path|: at step t, ``stop[t-1]`` is the
        (count-weighted) number of data sequences that share the prefix path_<t and have eos
        at step t, ``go[t-1]`` the number that share it and continue. The maximum-likelihood
        objective (Choi et al. 2023, eq. 3) restricted to eos decisions along the path is
        ``sum_t stop_t log p_t + go_t log(1 - p_t)``.
        """
        if path is None:
            path = self.longest()
        elif not is_integer_tensor(path) or path.dim() != 1 or path.numel() == 0:
            got = (f"dtype {path.dtype}, shape {tuple(path.shape)}" if isinstance(path, torch.Tensor)
                   else type(path).__name__)
            raise TypeError(f"path must be a non-empty 1-D integer tensor of token ids (e.g. dataset.longest()), "
                            f"got {got}")
        data = self.token_ids()
        weights = torch.tensor(self.counts, dtype=torch.float64)
        steps = path.shape[0]
        width = max(steps, data.shape[1])
        padded = torch.full((data.shape[0], width), -1, dtype=torch.long)
        padded[:, : data.shape[1]] = data
        same = padded[:, :steps] == path.unsqueeze(0)  # [N, T]
        # shares_prefix[n, t] = all(same[n, :t]) (t = 0: the empty prefix, always shared)
        shares = torch.ones(data.shape[0], steps, dtype=torch.bool)
        if steps > 1:
            shares[:, 1:] = torch.cumprod(same[:, :-1].long(), dim=1).bool()
        is_eos = padded[:, :steps] == self.eos_id
        stop = (weights[:, None] * (shares & is_eos)).sum(0)
        go = (
            weights[:, None] * (shares & ~is_eos & (padded[:, :steps] >= 0))
        ).sum(0)
        return stop, go


def remark1_dataset(counts: tuple[int, int] = (1, 1)) -> RemarkOneDataset:
    """The two-sequence data set of Choi, Cho, Lee (2023), Remark 1 and Section 1.

    y^(1) = "I am a boy <eos>", y^(2) = "I am a boy , and you are a girl . <eos>", sharing the
    context x (a single ``<bos>``) and the prefix y_<t0 = "I am a boy" with
    t0 = |y^(1)| = 5 < |y^(2)| - 1 = 11, as Remark 1 assumes. Each sequence occurs once by
    default (the paper's two-instance data set); ``counts`` changes the frequencies.
    Used in Chapter 5 (``05_nmst``) to show why ST's monotone p(eos) costs likelihood.
    """
    if (
        not isinstance(counts, (tuple, list))
        or len(counts) != 2
        or any(
            isinstance(c, bool) or not isinstance(c, int) or c < 1
            for c in counts
        )
    ):
        raise ValueError(
            f"counts must be two positive integers (one per sequence), got {counts!r}"
        )
    short = tuple("I am a boy <eos>".split())
    long = tuple("I am a boy , and you are a girl . <eos>".split())
    # <bos>, then every word of the long sequence in order of first use
    vocab = ("<bos>", *dict.fromkeys(long))
    return RemarkOneDataset(
        vocab=vocab,
        context=("<bos>",),
        sequences=(short, long),
        counts=tuple(counts),
    )


def optimal_eos_probs(
    dataset: RemarkOneDataset, path: torch.Tensor | None = None
) -> torch.Tensor:
    """The data's optimal p*(eos at t | y_<t, x) along ``path`` (default: the longest sequence).

    An unconstrained model maximising the likelihood (Choi et al. 2023, eq. 3) matches the
    empirical conditional: p*_t = stop_t / (stop_t + go_t) (see
    :meth:`RemarkOneDataset.eos_decision_counts`). For :func:`remark1_dataset` along y^(2):
    0 for t = 1..4, 1/2 at t = t0 = 5 (after "boy"), 0 for t = 6..11, and 1 at t = 12
    (Remark 1, eqs. 20-22): not monotone (Chapter 5, ``05_nmst``). Float64, length |path|.
    """
    stop, go = dataset.eos_decision_counts(path)
    if bool(((stop + go) == 0).any()):
        raise ValueError(
            "path leaves the data: some of its prefixes occur in no data sequence"
        )
    return stop / (stop + go)


def monotone_violation(eos_probs: torch.Tensor) -> torch.Tensor:
    """The largest drop max_t (p_{t-1} - p_t)^+ of a sequence of eos probabilities (0 if non-decreasing).

    Every ST model has a strictly increasing p(eos at t) along any prefix path
    (Welleck et al. 2020, Def. 4.3: p_t - p_{t-1} = (1 - p_{t-1})(1 - (1-eps) sigma_t) > 0),
    so its violation is 0; the optimum of Choi et al. (2023), Remark 1 has violation 1/2.
    NMST (Choi et al. 2023, Def. 6) can have any violation (Chapter 5, ``05_nmst``).
    Accepts ``[..., T]`` and reduces the last dimension.
    """
    if not isinstance(eos_probs, torch.Tensor) or eos_probs.dim() < 1:
        raise ValueError(
            "eos_probs must be a tensor [..., T] of probabilities"
        )
    if eos_probs.shape[-1] < 2:
        return torch.zeros(
            eos_probs.shape[:-1],
            dtype=eos_probs.dtype,
            device=eos_probs.device,
        )
    drops = eos_probs[..., :-1] - eos_probs[..., 1:]
    return drops.clamp(min=0).amax(dim=-1)


def best_monotone_eos_probs(
    dataset: RemarkOneDataset, path: torch.Tensor | None = None
) -> torch.Tensor:
    """The best non-decreasing p(eos at t) along ``path``: what ST can approach on this data.

    Maximises ``sum_t stop_t log p_t + go_t log(1 - p_t)`` over non-decreasing (p_t), the
    constraint every ST model obeys (Welleck et al. 2020, Def. 4.3; Choi et al. 2023, Def. 5).
    This is weighted isotonic regression of the empirical rates stop_t / (stop_t + go_t) with
    weights stop_t + go_t, given in closed form by the min-max formula
    p_t = max_{s<=t} min_{u>=t} (sum_{s..u} stop) / (sum_{s..u} (stop + go)).
    An ST model with eps > 0 can only approach it (it also needs p_t >= 1 - (1-eps)^t and a
    strict increase); its value is the supremum of the ST likelihood as eps -> 0.
    For :func:`remark1_dataset` along y^(2): 0 for t <= 4, 1/8 for t = 5..11, 1 at t = 12
    (Chapter 5, ``05_nmst``).
    """
    stop, go = dataset.eos_decision_counts(path)
    total = stop + go
    if bool((total == 0).any()):
        raise ValueError(
            "path leaves the data: some of its prefixes occur in no data sequence"
        )
    zero = torch.zeros(1, dtype=stop.dtype)
    cs, ct = (
        torch.cat([zero, stop.cumsum(0)]),
        torch.cat([zero, total.cumsum(0)]),
    )
    steps = stop.shape[0]
    s = torch.arange(steps).unsqueeze(1)  # block start (row)
    u = torch.arange(steps).unsqueeze(0)  # block end (column)
    block = (cs[u + 1] - cs[s]) / (ct[u + 1] - ct[s]).where(
        u >= s, torch.ones(())
    )  # avg over s..u
    inf = torch.tensor(float("inf"), dtype=stop.dtype)
    # min over u >= t of block[s, u], for each (s, t): reverse cumulative minimum along u
    masked = torch.where(u >= s, block, inf)
    suffix_min = torch.flip(
        torch.cummin(torch.flip(masked, [1]), dim=1).values, [1]
    )  # [s, t]
    candidates = torch.where(
        s <= u, suffix_min, -inf
    )  # only s <= t (here u plays t)
    return candidates.amax(dim=0)


def eos_log_likelihood(
    dataset: RemarkOneDataset,
    eos_probs: torch.Tensor,
    path: torch.Tensor | None = None,
):
    """Log-likelihood of the data's eos decisions along ``path`` under eos probabilities ``eos_probs``.

    ``sum_t stop_t log p_t + go_t log(1 - p_t)``, with the convention 0 * log 0 = 0: the part
    of the objective of Choi et al. (2023), eq. 3 that depends on p(eos) along the path (the
    non-eos tokens can be fitted exactly by both ST and NMST). Compare
    :func:`optimal_eos_probs` with :func:`best_monotone_eos_probs` (Chapter 5, ``05_nmst``).
    """
    stop, go = dataset.eos_decision_counts(path)
    p = torch.as_tensor(eos_probs, dtype=torch.float64)
    if p.shape != stop.shape:
        raise ValueError(
            f"eos_probs must have shape {tuple(stop.shape)} (one per step of the path), got {tuple(p.shape)}"
        )
    if bool(((p < 0) | (p > 1) | p.isnan()).any()):
        raise ValueError("eos_probs must lie in [0, 1]")
    zero = torch.zeros_like(p)
    term_stop = torch.where(stop > 0, stop * torch.log(p), zero)
    term_go = torch.where(go > 0, go * torch.log1p(-p), zero)
    return float((term_stop + term_go).sum())
