"""The analyses of Chapter 9's experiments (09_temperature; Contextual Temperature for Language
Modeling (2020) Sec. 4.5, Figs. 1 and 3, Table 5): pure functions of a model with a contextual
temperature and a :class:`nmst_lib.data.SequenceData`, batched tensor operations with no loops
over tokens. :mod:`nmst_lib.experiments.temperature_suite` runs them on every model of the suite
and stores what they return.

* :func:`frequency_ranks`, :func:`tracked_token_ids` (in words: :func:`tracked_tokens_rule`), :func:`monitor_subset`: which tokens and
  lines the temperature is followed on during training;
* :func:`token_temperatures` and :func:`temperature_monitor`: the mean temperature of every
  vocabulary entry (Fig. 1a; the ``monitor`` hook of :func:`nmst_lib.experiments.trainer.train`);
* :func:`temperature_by_position` (Fig. 1b) and :func:`eos_temperature_by_distance` (eos's
  temperature against the distance to the line's end);
* :func:`greedy_continuations`: greedy continuations with the temperature of each chosen token
  (Table 5's case studies).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import numpy as np
import torch

from .. import data as D
from .._validation import check_positive_int

__all__ = [
    "frequency_ranks",
    "tracked_token_ids",
    "tracked_tokens_rule",
    "monitor_subset",
    "token_temperatures",
    "temperature_monitor",
    "temperature_by_position",
    "eos_temperature_by_distance",
    "greedy_continuations",
]


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


def tracked_tokens_rule(top: int = 100, log_spaced: int = 60) -> str:
    """The tracked set of :func:`tracked_token_ids` in words, with frequency ranks counted from 1
    (rank 1 = the most frequent token), as Chapter 9's figures (09_temperature) count them: the
    ``top`` most frequent training tokens, ``log_spaced`` more at log-spaced ranks down to the
    rarest, ⟨eos⟩ and ``<unk>``, and ``<pad>`` (never a target) left out."""
    top = check_positive_int(top, "top")
    if isinstance(log_spaced, bool) or not isinstance(log_spaced, int) or log_spaced < 0:
        raise ValueError(f"log_spaced must be an integer >= 0, got {log_spaced!r}")
    spaced = f", {log_spaced} more at log-spaced ranks down to the rarest" if log_spaced else ""
    return (f"the {top} most frequent training tokens (frequency ranks 1-{top}){spaced}, ⟨eos⟩ and <unk> "
            "(<pad>, never a target, left out)")


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
