"""Model-agnostic decoding algorithms: greedy, ancestral, top-k, nucleus, entmax sampling and beam search.

Every decoder works on any model that follows the decoding protocol of ARCHITECTURE.md
(:class:`LanguageModel`): it asks the model for next-token log-probabilities, picks tokens,
and uses ``model.select`` to drop finished rows and to reorder beams. Decoders never look
inside the model's state.

The algorithms are the ones whose (in)consistency the book studies:

* greedy decoding, ancestral, top-k and nucleus sampling: Welleck et al. (2020),
  Defs. 2.5-2.8; Choi, Cho, Lee (2023), Sec. 2.2 and App. A.1-A.2;
* consistent top-k and nucleus sampling, which add eos to the candidate set:
  Welleck et al. (2020), Defs. 4.1-4.2;
* beam search: Welleck et al. (2020), Def. A.2 (Choi et al. 2023, Def. A.3).

They are derived in Chapter 1 (01_decoding); the consistent variants in Chapter 3
(03_consistent_sampling). Chapter 8 (08_sparse) adds

* ancestral sampling with a temperature, ``softmax(log p / T)`` (Martins et al. (2020),
  Sec. 5.1, "softmax-tau");
* entmax sampling (Martins et al. (2020), Sec. 3): a draw from ``entmax_alpha(log p)``;
  entmax is shift-invariant, so this is ``entmax_alpha(z)`` of the model's scores z whenever
  ``log p = log_softmax(z)``;

and makes every decoder work on *sparse* models, whose log-probabilities contain ``-inf``
(tokens of probability zero are never drawn, never kept by beam search, never counted in a
nucleus). A row of log-probabilities with no finite entry (no token of positive probability),
or with NaN or ``+inf``, is no distribution to decode from: every decoder and every function
here raises ``ValueError`` on it (one ``amax`` per step) instead of emitting a token with score
NaN or ``-inf``. :func:`decoder_distribution` returns the distribution a token-level decoder draws
from at one step, built from the same candidate sets as :func:`decode`.

Tie-breaking is deterministic everywhere: among tokens of equal probability the smaller
token id comes first (greedy, top-k, nucleus); in beam search the expansion of the
higher-ranked prefix comes first, then the smaller token id.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from ._validation import check_index, check_positive_int, is_integer_tensor
from .entmax import entmax, log_entmax
from .heads import _check_alpha

__all__ = [
    "PAD",
    "METHODS",
    "LanguageModel",
    "Generation",
    "decode",
    "decoder_distribution",
    "top_k_mask",
    "nucleus_mask",
    "restrict_log_probs",
    "sample_tokens",
]

PAD = -1
"""Token id that fills ``Generation.tokens`` after the end of each sequence."""

METHODS = ("greedy", "ancestral", "top-k", "nucleus", "entmax", "beam")
"""The decoding methods :func:`decode` knows."""

_NEG_INF = -math.inf


@runtime_checkable
class LanguageModel(Protocol):
    """The decoding protocol of ARCHITECTURE.md: what a model must offer to be decoded.

    ``initial_state(contexts)`` reads the contexts (``LongTensor[B, k]``) and returns the
    state and the log-probabilities ``[B, V]`` of the first continuation token (step t = 1);
    ``step(state, tokens)`` feeds one token per row and returns the next state and the
    log-probabilities of the next token; ``select(state, index)`` returns the state of the
    rows ``index`` (picked, reordered or repeated). Log-probabilities are the model's own,
    after its output layer (softmax, ST, NMST, ...). Chapter 1 (01_decoding).
    """

    eos_id: int
    vocab_size: int

    def initial_state(self, contexts: torch.Tensor) -> tuple[Any, torch.Tensor]: ...

    def step(self, state: Any, tokens: torch.Tensor) -> tuple[Any, torch.Tensor]: ...

    def select(self, state: Any, index: torch.Tensor) -> Any: ...


@dataclass(frozen=True, eq=False)
class Generation:
    """The sequences a decoder returned for a batch of contexts (all tensors on CPU).

    ``tokens[i, :lengths[i]]`` is the continuation of context ``i``; it ends with eos exactly
    when ``terminated[i]``; later positions hold :data:`PAD`. A row that is not terminated
    was cut at ``max_len`` (``lengths[i] == max_len``), the finite stand-in for the
    non-terminating sequences of Welleck et al. (2020), Def. 3.2. ``scores[i]`` is the sum
    of the model's log-probabilities of the returned tokens (Welleck et al. 2020, Def. A.1),
    in the dtype of the model's log-probabilities (at least float32). Chapter 1 (01_decoding).

    ``first_finish_steps[i]`` (LongTensor ``[B]``) is the first step t (1-based, ARCHITECTURE.md's
    steps) at which the decoder had a finished sequence for context ``i``, or ``max_len + 1``
    when it had none within ``max_len`` (the sentinel "never": the convention of
    :func:`nmst_lib.metrics.first_eos_steps`, so ``first_finish_steps[i] <= L`` reads
    "terminated under step limit L" for every ``L <= max_len``). It is the quantity behind
    r_nt(L) (Choi, Cho, Lee 2023, eq. 11; Chapters 2 and 6, ``02_consistency``,
    ``06_wikitext``):

    * beam search (Welleck et al. 2020, Def. A.2): the first step at which *any* hypothesis
      of the row entered the finished set. The search is the same up to step L whatever the
      limit ``max_len >= L``, so the decode with limit L terminates exactly when this is
      <= L; the *returned* sequence may be a better-scoring one that finished later, so
      ``lengths`` can exceed it and must not be read as the termination step under a
      smaller limit;
    * token-level decoders (greedy, sampling): their own first-eos step, i.e. ``lengths[i]``
      where ``terminated[i]`` and ``max_len + 1`` elsewhere (one decode to ``max_len`` gives
      the whole r_nt curve).

    ``terminated[i]`` is always ``first_finish_steps[i] <= max_len``. ``None`` only in a
    Generation built by hand without it (:mod:`nmst_lib.metrics` then reads first-eos steps
    from ``tokens``, and refuses for ``method == "beam"``).
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    terminated: torch.Tensor
    max_len: int
    eos_id: int
    method: str
    scores: torch.Tensor
    first_finish_steps: torch.Tensor | None = None

    def to_lists(self) -> list[list[int]]:
        """The generated sequences as Python lists of token ids (without padding)."""
        return [row[:n].tolist() for row, n in zip(self.tokens, self.lengths.tolist())]


# --------------------------------------------------------------------------- candidate sets


def _check_log_probs_tensor(log_probs) -> None:
    if not isinstance(log_probs, torch.Tensor) or not log_probs.is_floating_point():
        raise TypeError("log_probs must be a floating-point torch.Tensor of shape [..., V]")
    if log_probs.dim() < 1 or log_probs.shape[-1] < 1:
        raise ValueError(f"log_probs must have a non-empty last (vocabulary) dimension, got shape {tuple(log_probs.shape)}")
    _check_rows_have_mass(log_probs, "log_probs (leading dims flattened)")


def _check_rows_have_mass(log_probs: torch.Tensor, what: str) -> None:
    """Every row of ``log_probs [..., V]`` needs a finite maximum: at least one token of positive
    probability (a row of ``-inf`` is no distribution to decode from) and no NaN or ``+inf``.
    One reduction (``amax``, which propagates NaN) and one check of the ``[...]`` row maxima."""
    row_max = log_probs.detach().amax(dim=-1)
    finite = torch.isfinite(row_max)
    if bool(finite.all()):
        return
    row = int((~finite).reshape(-1).nonzero()[0])
    value = float(row_max.reshape(-1)[row])
    if math.isnan(value):
        problem = "contains NaN"
    elif value < 0:
        problem = "has no token of positive probability (every log-probability is -inf)"
    else:
        problem = "contains +inf"
    raise ValueError(f"row {row} of {what} {problem}; every row must be a "
                     "distribution over the vocabulary: finite log-probabilities, -inf only for tokens of "
                     "probability zero, at least one finite")


def _check_k(k, vocab_size: int) -> int:
    k = check_positive_int(k, "k")
    if k > vocab_size:
        raise ValueError(f"k must be between 1 and the vocabulary size {vocab_size}, got {k}")
    return k


def _check_p(p) -> float:
    if isinstance(p, torch.Tensor) and p.numel() == 1:
        p = p.item()
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"p must be a real number in (0, 1], got {type(p).__name__}")
    p = float(p)
    if math.isnan(p) or not (0.0 < p <= 1.0):
        raise ValueError(f"p must lie in (0, 1] (e.g. 0.9; p = 1 keeps every token), got {p!r}")
    return p


def _with_eos(mask: torch.Tensor, eos_id: int | None) -> torch.Tensor:
    """``mask`` with eos added to every candidate set (no change where it is already in)."""
    if eos_id is None:
        return mask
    is_eos = torch.arange(mask.shape[-1], device=mask.device) == eos_id
    return mask | is_eos


def _top_k_mask(log_probs: torch.Tensor, k: int) -> torch.Tensor:
    """Exactly ``k`` most probable tokens per row; ties go to the smaller token id.

    The reference rule, over the whole vocabulary (a pass and a cumulative sum per row);
    :func:`_top_k_ids` gets the same set from ``topk`` alone unless a tie straddles the
    k-th place, and falls back to this rule for those rows."""
    kth_value = log_probs.topk(k, dim=-1).values[..., -1:]
    above = log_probs > kth_value
    tied = log_probs == kth_value
    still_needed = k - above.sum(dim=-1, keepdim=True)
    return above | (tied & (tied.cumsum(dim=-1) <= still_needed))


def _top_k_ids(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Token ids ``[n, k]`` (increasing) of the set :func:`_top_k_mask` keeps in each row of
    ``scores [n, V]``.

    ``topk(k + 1)`` decides every row whose k-th and (k+1)-th values differ: the k largest
    are then the same set whatever order ``topk`` gives to ties. Rows where they are equal
    (a tie across the boundary, e.g. several ``-inf``) use the reference rule."""
    n, vocab_size = scores.shape
    if k >= vocab_size:
        return torch.arange(vocab_size, device=scores.device).expand(n, vocab_size)
    values, ids = scores.topk(k + 1, dim=-1)
    ids = ids[:, :k]
    straddles = values[:, k - 1] == values[:, k]
    if bool(straddles.any()):
        rows = straddles.nonzero().squeeze(1)
        ids = ids.clone()
        ids[rows] = _top_k_mask(scores[rows], k).nonzero()[:, 1].view(-1, k)
    return ids.sort(dim=-1).values


_NUCLEUS_WIDTHS = (64, 1024)
"""Prefilter widths of :func:`_nucleus_sets`: the nucleus is looked for among the 64 most
probable tokens, then 1,024, then the whole vocabulary (sorted)."""


def _nucleus_sets(log_probs: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The nucleus of each row of ``log_probs [n, V]`` as ``(ids [n, W], kept [n, W])``: row
    i's set is ``ids[i][kept[i]]``; exactly the set of :func:`_nucleus_mask`.

    The nucleus is the m most probable tokens (ties: smaller id first), where m counts the
    ranks whose preceding mass is below p; m depends on the sorted values only. Among the
    top W values (``topk``) a row is decided when m < W and the m-th and (m+1)-th values
    differ (no tie across the boundary): its set is then the first m ids of ``topk``
    whatever order ties among them got. Undecided rows move on to a wider W (skipped when
    no row can fit in it: beyond the top W each token has at most the W-th probability),
    and finally to a stable sort of the whole row. The cumulative mass is a ``logcumsumexp`` over
    the sorted values in every case."""
    n, vocab_size = log_probs.shape
    log_p = math.log(p)
    ids = torch.empty((n, 0), dtype=torch.long, device=log_probs.device)
    kept = torch.empty((n, 0), dtype=torch.bool, device=log_probs.device)
    pending = torch.arange(n, device=log_probs.device)
    widths = [w for w in _NUCLEUS_WIDTHS if w < vocab_size] + [vocab_size]
    fewest_needed = 0.0  # a lower bound on the smallest nucleus among the pending rows
    for width in widths:
        if width < vocab_size and fewest_needed >= width:
            continue  # no pending row's nucleus fits: skip this prefilter
        rows = log_probs[pending]
        if width < vocab_size:
            values, order = rows.topk(width, dim=-1)
        else:
            values, order = torch.sort(rows, dim=-1, descending=True, stable=True)
        mass_before = torch.logcumsumexp(values, dim=-1).roll(1, dims=-1)
        mass_before[:, 0] = _NEG_INF  # nothing precedes the most probable token
        # tokens of probability zero (sparse models) never join, even when the finite mass
        # rounds to just below p
        keep = (mass_before < log_p) & (values > _NEG_INF)
        if width < vocab_size:
            m = keep.sum(dim=-1, keepdim=True)
            inside = m < width
            last = values.gather(1, (m - 1).clamp(min=0))
            following = values.gather(1, m.clamp(max=width - 1))
            decided = (inside & (last != following)).squeeze(1)
        else:
            decided = torch.ones(pending.numel(), dtype=torch.bool, device=log_probs.device)
        if ids.shape[1] < width:  # widen the output, padding with not-kept slots
            pad = width - ids.shape[1]
            ids = torch.cat([ids, ids.new_zeros((n, pad))], dim=1)
            kept = torch.cat([kept, kept.new_zeros((n, pad))], dim=1)
        done = pending[decided]
        ids[done, :width] = order[decided]
        kept[done, :width] = keep[decided]
        pending = pending[~decided]
        if pending.numel() == 0:
            break
        if width < vocab_size:
            # Each token beyond the first `width` has probability <= the width-th one, so a
            # row needs at least width + (p - mass of the first width) / p_width tokens.
            values = values[~decided].double()
            missing = p - torch.logsumexp(values, dim=-1).exp()
            fewest_needed = float((width + missing / values[:, -1].exp()).min())
    # Kept slots are a prefix of each row: drop the columns no row keeps.
    width = int(kept.sum(dim=1).max()) if n else 0
    return ids[:, :width], kept[:, :width]


def _nucleus_mask(log_probs: torch.Tensor, p: float) -> torch.Tensor:
    """Smallest set of most probable tokens with total probability >= p (ties: smaller id first)."""
    if p == 1.0:
        # The smallest set of mass 1 is the support; a cumulative sum could round just
        # below 1 and drop tokens of tiny but positive probability.
        return log_probs > _NEG_INF
    rows = log_probs.reshape(-1, log_probs.shape[-1])
    ids, kept = _nucleus_sets(rows, p)
    return _scatter_kept(rows.shape, ids, kept).view(log_probs.shape)


def _scatter_kept(shape, ids: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """Boolean mask of ``shape [n, V]`` that is True at ``ids[i][kept[i]]`` in row i."""
    mask = torch.zeros(shape, dtype=torch.int8, device=ids.device)
    mask.scatter_add_(1, ids, kept.to(torch.int8))
    return mask > 0


def top_k_mask(log_probs: torch.Tensor, k: int, eos_id: int | None = None) -> torch.Tensor:
    """Candidate set of top-k sampling as a boolean mask over the vocabulary.

    Keeps the ``k`` most probable tokens of each row of ``log_probs`` (shape ``[..., V]``):
    the set V_k of Welleck et al. (2020), Def. 2.6 (Choi et al. 2023, Def. A.1, eq. 13).
    Ties at the k-th place go to the smaller token ids, so exactly ``k`` tokens are kept.
    With ``eos_id`` given, eos is added: the set V' = {eos} u V_k of *consistent* top-k
    sampling (Welleck et al. 2020, Def. 4.1); if eos is already in V_k nothing changes.
    Chapter 1 (01_decoding) and Chapter 3 (03_consistent_sampling).
    """
    _check_log_probs_tensor(log_probs)
    vocab_size = log_probs.shape[-1]
    k = _check_k(k, vocab_size)
    if eos_id is not None:
        eos_id = check_index(eos_id, vocab_size, "eos_id")
    return _with_eos(_top_k_mask(log_probs, k), eos_id)


def nucleus_mask(log_probs: torch.Tensor, p: float, eos_id: int | None = None) -> torch.Tensor:
    """Candidate set of nucleus (top-p) sampling as a boolean mask over the vocabulary.

    Keeps the smallest set of most probable tokens whose total probability is >= ``p``
    (Choi et al. 2023, Def. A.2, eq. 15; Welleck et al. 2020, Def. 2.7 with mu = p): a token
    is kept when the probability of the tokens ranked before it is still below ``p``, so the
    most probable token is always kept. Ranks among equal probabilities follow token ids.
    ``p = 1`` keeps the support (every token of positive probability). The cumulative mass
    is computed in log space (``logcumsumexp``); a set whose mass equals ``p`` up to
    rounding may or may not include the next token. With ``eos_id`` given, eos is added:
    V_mu u {eos} of *consistent* nucleus sampling (Welleck et al. 2020, Def. 4.2).
    Chapter 1 (01_decoding) and Chapter 3 (03_consistent_sampling).
    """
    _check_log_probs_tensor(log_probs)
    p = _check_p(p)
    if eos_id is not None:
        eos_id = check_index(eos_id, log_probs.shape[-1], "eos_id")
    return _with_eos(_nucleus_mask(log_probs, p), eos_id)


def restrict_log_probs(log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The model's distribution renormalised over a candidate set, as log-probabilities.

    ``q(v) = p(v) / sum_{v' in V'} p(v')`` for ``v`` in the set (``mask`` True) and
    ``log q(v) = -inf`` outside: the proposal distribution of top-k and nucleus sampling and
    of their consistent variants (Welleck et al. 2020, Defs. 2.6, 2.7, 4.1, 4.2; Choi et al.
    2023, eqs. 12 and 14). Computed in log space with ``logsumexp``.
    Chapter 1 (01_decoding).
    """
    _check_log_probs_tensor(log_probs)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError("mask must be a boolean torch.Tensor (e.g. from top_k_mask or nucleus_mask)")
    if mask.shape != log_probs.shape:
        raise ValueError(f"mask must have the shape of log_probs {tuple(log_probs.shape)}, got {tuple(mask.shape)}")
    kept = log_probs.masked_fill(~mask, _NEG_INF)
    log_mass = torch.logsumexp(kept, dim=-1, keepdim=True)
    if bool((log_mass == _NEG_INF).any()):
        raise ValueError("every candidate set must contain a token of positive probability")
    return kept - log_mass


# --------------------------------------------------------------------------- sampling


def _check_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def _sample(log_probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Exponential race: argmax_v log p(v) - log E_v with E_v ~ Exp(1) i.i.d."""
    dtype = torch.promote_types(log_probs.dtype, torch.float32)
    noise_device = log_probs.device if generator is None else generator.device
    exponentials = torch.empty(log_probs.shape, dtype=dtype, device=noise_device).exponential_(generator=generator)
    race = log_probs.to(dtype) - exponentials.to(log_probs.device).log()
    # A token of probability zero never wins, even against E_v = 0 (log E_v = -inf).
    race = race.masked_fill(log_probs == _NEG_INF, _NEG_INF)
    return race.argmax(dim=-1)


def sample_tokens(log_probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row from the (possibly unnormalised) log-probabilities ``[..., V]``.

    Uses the exponential race (equivalently the Gumbel-max trick): with ``E_v ~ Exp(1)``
    independent, ``argmin_v E_v / p(v)`` is distributed as ``p(v) / sum p``, so
    ``argmax_v (log p(v) - log E_v)`` is a draw of Welleck et al. (2020), Def. 2.5, and, on
    masked log-probabilities, of Defs. 2.6-2.7 and 4.1-4.2. Tokens with log-probability
    ``-inf`` are never drawn; a row with no finite entry, or with NaN or ``+inf``, has nothing
    to draw from and raises ``ValueError``. The noise comes only from ``generator`` (drawn on the
    generator's device, then moved to ``log_probs.device``; pass a generator on the model's
    device to avoid the copy); ``None`` uses torch's global RNG for ``log_probs.device``.
    Chapter 1 (01_decoding).
    """
    _check_log_probs_tensor(log_probs)
    _check_generator(generator)
    return _sample(log_probs, generator)


def decoder_distribution(
    log_probs: torch.Tensor,
    method: str,
    *,
    k: int | None = None,
    p: float | None = None,
    consistent: bool = False,
    eos_id: int | None = None,
    alpha: float | None = None,
    temperature: float | None = None,
) -> torch.Tensor:
    """The distribution ``[..., V]`` a token-level decoder draws from, given one step's
    log-probabilities ``log_probs [..., V]`` (teacher forcing).

    * ``"greedy"``: one-hot at the most probable token (smallest id among ties; Welleck et al.
      (2020), Def. 2.8);
    * ``"ancestral"``: ``softmax(log_probs / T)`` (Def. 2.5; ``temperature`` T, default 1);
    * ``"top-k"`` / ``"nucleus"``: the model's probabilities renormalised over the candidate
      set (Defs. 2.6-2.7; with ``consistent=True`` and ``eos_id``, eos added: Defs. 4.1-4.2);
    * ``"entmax"``: ``entmax_alpha(log_probs)`` (Martins et al. (2020), Sec. 3).

    These are the distributions Martins et al. (2020), Table 2, scores with the sparse-LM
    metrics (sp, JS, eps-perplexity; Chapter 8, 08_sparse). The candidate sets are built by
    the same functions :func:`decode` samples with (``_top_k_ids``, ``_nucleus_sets``), so a
    draw of :func:`decode` at this step follows exactly this distribution. Tokens of
    probability zero (``-inf``, sparse models) get zero, also when they are among the k of
    top-k. Beam search is not a token-level decoder and is refused. Returns probabilities
    in the dtype of ``log_probs`` (at least float32); every row sums to one.
    """
    _check_log_probs_tensor(log_probs)
    vocab_size = log_probs.shape[-1]
    if isinstance(method, str) and method == "beam":
        raise ValueError("beam search is not a token-level decoder: it has no per-step sampling distribution; "
                         f"use one of {', '.join(repr(m) for m in METHODS if m != 'beam')}")
    k, p, _, alpha, temperature = _check_method_arguments(method, vocab_size, k, p, None, consistent, alpha,
                                                          temperature)
    if consistent and eos_id is None:
        raise ValueError("consistent=True adds eos to the candidate set: pass eos_id, the id of eos")
    if eos_id is not None:
        if not consistent:
            raise ValueError("eos_id is only used with consistent=True (top-k and nucleus)")
        eos_id = check_index(eos_id, vocab_size, "eos_id")
    dtype = torch.promote_types(log_probs.dtype, torch.float32)
    rows = log_probs.reshape(-1, vocab_size).to(dtype)
    if method == "greedy":
        probs = torch.nn.functional.one_hot(rows.argmax(dim=-1), vocab_size).to(dtype)
    elif method == "ancestral":
        probs = torch.softmax(rows if temperature == 1.0 else rows / temperature, dim=-1)
    elif method == "entmax":
        probs = entmax(rows, alpha, dim=-1)
    else:
        if method == "top-k":
            ids = _top_k_ids(rows, k)
            kept = torch.ones_like(ids, dtype=torch.bool)
        elif p == 1.0:
            ids, kept = None, None
        else:
            ids, kept = _nucleus_sets(rows, p)
        mask = rows > _NEG_INF if ids is None else _scatter_kept(rows.shape, ids, kept)
        mask = _with_eos(mask, eos_id)
        probs = torch.softmax(rows.masked_fill(~mask, _NEG_INF), dim=-1)
    return probs.view(log_probs.shape)


# --------------------------------------------------------------------------- argument checks


def _check_model(model) -> tuple[int, int]:
    if not isinstance(model, LanguageModel) or not all(
        callable(getattr(model, name)) for name in ("initial_state", "step", "select")
    ):
        missing = [
            name
            for name in ("eos_id", "vocab_size", "initial_state", "step", "select")
            if not hasattr(model, name) or (name not in ("eos_id", "vocab_size") and not callable(getattr(model, name)))
        ]
        raise TypeError(
            "model must follow the decoding protocol (eos_id, vocab_size, initial_state(contexts), "
            f"step(state, tokens), select(state, index)); {type(model).__name__} lacks {', '.join(missing)}"
        )
    vocab_size = check_positive_int(model.vocab_size, "model.vocab_size", minimum=2)
    eos_id = check_index(model.eos_id, vocab_size, "model.eos_id")
    return vocab_size, eos_id


def _check_contexts(contexts, vocab_size: int) -> None:
    if not isinstance(contexts, torch.Tensor):
        raise TypeError(f"contexts must be a torch.Tensor of token ids of shape [B, k], got {type(contexts).__name__}")
    if not is_integer_tensor(contexts):
        raise TypeError(f"contexts must hold integer token ids (e.g. torch.long), got dtype {contexts.dtype}")
    if contexts.dim() != 2:
        raise ValueError(f"contexts must be a 2-D tensor [B, k] (one context per row), got shape {tuple(contexts.shape)}")
    if contexts.shape[0] == 0:
        raise ValueError("contexts is an empty batch: give at least one context (B >= 1)")
    if contexts.shape[1] == 0:
        raise ValueError("every context must have at least one token (k >= 1)")
    low, high = int(contexts.min()), int(contexts.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"context token ids must be in [0, {vocab_size}) for a vocabulary of size {vocab_size}, got {bad}")


def _check_temperature(temperature) -> float:
    if isinstance(temperature, torch.Tensor) and temperature.numel() == 1:
        temperature = temperature.item()
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"temperature must be a real number > 0, got {type(temperature).__name__}")
    temperature = float(temperature)
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0 (1 = the model's own distribution), got {temperature!r}")
    return temperature


def _check_method_arguments(method, vocab_size, k, p, beam_size, consistent, alpha=None, temperature=None):
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(repr(m) for m in METHODS)}; got {method!r}")
    if not isinstance(consistent, bool):
        raise TypeError(f"consistent must be True or False, got {type(consistent).__name__}")
    if consistent and method not in ("top-k", "nucleus"):
        raise ValueError(f"consistent=True is only defined for 'top-k' and 'nucleus' (Welleck et al. 2020, Defs. 4.1-4.2), not {method!r}")
    if k is not None and method != "top-k":
        raise ValueError(f"k is only used by top-k; method {method!r} does not take it")
    if p is not None and method != "nucleus":
        raise ValueError(f"p is only used by nucleus; method {method!r} does not take it")
    if beam_size is not None and method != "beam":
        raise ValueError(f"beam_size is only used by beam; method {method!r} does not take it")
    if alpha is not None and method != "entmax":
        raise ValueError(f"alpha is only used by entmax sampling (method='entmax'); method {method!r} does not take it")
    if temperature is not None and method != "ancestral":
        raise ValueError(f"temperature is only used by ancestral sampling (method='ancestral', softmax(log p / T)); "
                         f"method {method!r} does not take it")
    if method == "top-k":
        if k is None:
            raise ValueError("top-k needs k, an integer in [1, V]")
        k = _check_k(k, vocab_size)
    if method == "nucleus":
        if p is None:
            raise ValueError("nucleus needs p, a number in (0, 1]")
        p = _check_p(p)
    if method == "beam":
        if beam_size is None:
            raise ValueError("beam needs beam_size, an integer >= 1")
        beam_size = check_positive_int(beam_size, "beam_size")
    if method == "entmax":
        if alpha is None:
            raise ValueError("entmax sampling needs alpha, a number >= 1 (e.g. 1.5; 1 = ancestral sampling)")
        alpha = _check_alpha(alpha)
    if method == "ancestral":
        temperature = 1.0 if temperature is None else _check_temperature(temperature)
    return k, p, beam_size, alpha, temperature


def _check_step_log_probs(log_probs, rows: int, vocab_size: int, where: str) -> None:
    if not isinstance(log_probs, torch.Tensor) or not log_probs.is_floating_point():
        raise TypeError(f"model.{where} must return (state, log_probs) with a floating-point log_probs tensor")
    if tuple(log_probs.shape) != (rows, vocab_size):
        raise ValueError(
            f"model.{where} returned log_probs of shape {tuple(log_probs.shape)}; expected ({rows}, {vocab_size}) = (rows, vocab_size)"
        )
    _check_rows_have_mass(log_probs, f"the log_probs model.{where} returned (one row per unfinished sequence)")


# --------------------------------------------------------------------------- decoders


def decode(
    model: LanguageModel,
    contexts: torch.Tensor,
    method: str,
    *,
    max_len: int,
    k: int | None = None,
    p: float | None = None,
    beam_size: int | None = None,
    consistent: bool = False,
    alpha: float | None = None,
    temperature: float | None = None,
    generator: torch.Generator | None = None,
) -> Generation:
    """Decode one continuation per context with ``method``; stop at eos or after ``max_len`` tokens.

    Methods (Chapter 1, 01_decoding):

    * ``"greedy"``: the most probable token at each step (Welleck et al. 2020, Def. 2.8;
      ties go to the smaller token id);
    * ``"ancestral"``: a draw from the model's distribution (Def. 2.5); with ``temperature``
      T > 0, from ``softmax(log p / T)`` (Martins et al. (2020), Sec. 5.1; T = 1, the
      default, is the model's own distribution, draw for draw; tokens of probability zero
      keep probability zero);
    * ``"top-k"``: a draw from the distribution renormalised over the ``k`` most probable
      tokens (Def. 2.6; see :func:`top_k_mask`);
    * ``"nucleus"``: the same over the smallest set of most probable tokens of mass >= ``p``
      (Def. 2.7; Choi et al. 2023, Def. A.2; see :func:`nucleus_mask`);
    * ``"entmax"``: a draw from ``entmax_alpha(log p)`` with ``alpha >= 1`` (Martins et al.
      (2020), Sec. 3; Chapter 8, 08_sparse); entmax is shift-invariant, so for a softmax model
      this is alpha-entmax of its logits (Martins et al.'s entmax sampling of a model trained
      with the entmax loss is exactly this with the model's scores). A model whose output
      layer is already entmax (:class:`~nmst_lib.heads.EntmaxHead`, NMST-entmax) returns its
      own sparse distribution, which ``"ancestral"`` samples; ``"entmax"`` on top of it would
      apply a second entmax (a sparser decoder, not the model's distribution).
      ``alpha = 1`` is ancestral sampling, draw for draw;
    * ``"beam"``: beam search of width ``beam_size`` (Welleck et al. 2020, Def. A.2): at
      each step the ``beam_size`` best expansions of all live prefixes (score = sum of
      log-probs, no length normalisation) are kept, and those ending in eos move to the
      finished set; a context stops at ``beam_size`` finished sequences, with no live prefix
      left, or at ``max_len``, and returns its best finished sequence, else its best live
      prefix (not terminated). Ties go to the expansion of the higher-ranked prefix, then
      to the smaller token id.

    ``consistent=True`` (top-k and nucleus only) adds eos to every candidate set
    (Welleck et al. 2020, Defs. 4.1-4.2; Chapter 3, 03_consistent_sampling).

    Sparse models (Chapter 8, 08_sparse): log-probabilities may be ``-inf``. A token of
    probability zero is never drawn by any sampler (top-k with fewer than k tokens of
    positive probability samples among those), never joins a nucleus, and never enters a beam
    (a beam holds fewer than ``beam_size`` prefixes when fewer expansions are possible).
    A step whose log-probabilities have a row without a finite entry, or with NaN or ``+inf``,
    raises ``ValueError`` (one ``amax`` over ``[B, V]`` per step, under 1 % of a step of a
    2-layer LSTM with V = 4,000 and B = 64).
    Consistent sampling adds eos to the candidate set, but a draw still follows the model's
    probabilities renormalised over the set: if the model gives eos probability exactly zero,
    adding it changes nothing, and consistent top-k / nucleus sampling do not terminate
    either. Consistency of the decoder cannot rescue a model that never puts mass on eos;
    only the output layer can (the NMST-entmax head, :mod:`nmst_lib.heads`).

    Sampling draws its noise only from ``generator`` (same seed, same output; see
    :func:`sample_tokens` for devices); ``generator=None`` uses torch's global RNG.
    ``generator`` is ignored by greedy and beam search. Rows that emit eos leave the working
    batch (``model.select``), so a step costs what the unfinished rows cost, and decoding
    ends as soon as every row has finished. Returns a :class:`Generation` on CPU; its
    ``first_finish_steps`` give r_nt(L) for every L <= ``max_len`` from this one decode,
    also for beam search, whose returned length does not (see :class:`Generation`).
    """
    vocab_size, eos_id = _check_model(model)
    _check_contexts(contexts, vocab_size)
    max_len = check_positive_int(max_len, "max_len")
    k, p, beam_size, alpha, temperature = _check_method_arguments(
        method, vocab_size, k, p, beam_size, consistent, alpha, temperature)
    _check_generator(generator)

    if method == "beam":
        tokens, lengths, terminated, scores, first_finish = _beam_search(
            model, contexts, beam_size, max_len, vocab_size, eos_id)
    else:
        choose = _token_chooser(method, k, p, eos_id if consistent else None, generator, alpha, temperature)
        tokens, lengths, terminated, scores = _decode_token_by_token(model, contexts, choose, max_len, vocab_size, eos_id)
        first_finish = torch.where(terminated, lengths, torch.full_like(lengths, max_len + 1))
    return Generation(
        tokens=tokens.cpu(),
        lengths=lengths.cpu(),
        terminated=terminated.cpu(),
        max_len=max_len,
        eos_id=eos_id,
        method=method,
        scores=scores.cpu(),
        first_finish_steps=first_finish.cpu(),
    )


def _score_dtype(log_probs: torch.Tensor) -> torch.dtype:
    """Scores are summed in the log-probs' dtype, at least float32 (half precision drifts)."""
    return torch.promote_types(log_probs.dtype, torch.float32)


def _sample_among(log_probs: torch.Tensor, ids: torch.Tensor, kept: torch.Tensor | None, eos_id: int | None,
                  generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row from ``log_probs [n, V]`` restricted to the candidates ``ids[kept]``
    (all of ``ids`` when ``kept`` is None), plus eos when ``eos_id`` is given (consistent
    sampling). Equal in distribution to racing over the masked vocabulary, but the race
    (and its noise) covers only the candidates."""
    candidates = log_probs.gather(1, ids)
    if kept is not None:
        candidates = candidates.masked_fill(~kept, _NEG_INF)
    # One extra column for eos, present (at -inf) also when eos is not added, so that plain
    # and consistent sampling use the same noise and agree wherever their sets agree.
    if eos_id is None:
        extra_id, extra = 0, torch.full_like(candidates[:, :1], _NEG_INF)
    else:
        eos_in = ids == eos_id
        if kept is not None:
            eos_in &= kept
        extra_id = eos_id
        extra = log_probs[:, eos_id:eos_id + 1].to(candidates.dtype).masked_fill(eos_in.any(dim=1, keepdim=True), _NEG_INF)
    ids = torch.cat([ids, torch.full_like(ids[:, :1], extra_id)], dim=1)
    candidates = torch.cat([candidates, extra], dim=1)
    return ids.gather(1, _sample(candidates, generator)[:, None]).squeeze(1)


def _token_chooser(method: str, k, p, eos_id, generator, alpha=None, temperature=None):
    """The per-step rule ``log_probs [n, V] -> tokens [n]`` of a single-pass decoder.

    Top-k and nucleus sampling find their candidate sets with ``topk`` prefilters
    (:func:`_top_k_ids`, :func:`_nucleus_sets`: the same sets as :func:`top_k_mask` and
    :func:`nucleus_mask`) and race over the candidates only, so a step costs O(V) for the
    prefilter instead of a sort and a vocabulary-wide draw."""
    if method == "greedy":
        return lambda log_probs: log_probs.argmax(dim=-1)  # first maximum: smallest id
    if method == "ancestral" and temperature not in (None, 1.0):
        return lambda log_probs: _sample(log_probs / temperature, generator)  # -inf stays -inf
    if method == "entmax" and alpha != 1.0:
        return lambda log_probs: _sample(log_entmax(log_probs, alpha, dim=-1), generator)
    if method in ("ancestral", "entmax") or (method == "nucleus" and p == 1.0):
        # The nucleus of mass 1 is the support: ancestral sampling (eos is in it or has p = 0).
        # entmax with alpha = 1 is the softmax: ancestral sampling, with the same noise
        return lambda log_probs: _sample(log_probs, generator)
    if method == "top-k":
        return lambda log_probs: _sample_among(log_probs, _top_k_ids(log_probs, k), None, eos_id, generator)
    return lambda log_probs: _sample_among(log_probs, *_nucleus_sets(log_probs, p), eos_id, generator)


def _decode_token_by_token(model, contexts, choose, max_len: int, vocab_size: int, eos_id: int):
    """Greedy and sampling decoders: one token per unfinished row per step.

    Finished rows leave the working batch through ``model.select``; ``alive`` maps working
    rows to output rows. One Python loop over time steps, tensor operations inside.
    """
    batch = contexts.shape[0]
    state, log_probs = model.initial_state(contexts)
    _check_step_log_probs(log_probs, batch, vocab_size, "initial_state")
    device = log_probs.device
    tokens = torch.full((batch, max_len), PAD, dtype=torch.long, device=device)
    lengths = torch.full((batch,), max_len, dtype=torch.long, device=device)
    terminated = torch.zeros(batch, dtype=torch.bool, device=device)
    scores = torch.zeros(batch, dtype=_score_dtype(log_probs), device=device)
    alive = torch.arange(batch, device=device)
    for t in range(max_len):
        next_tokens = choose(log_probs)
        tokens[alive, t] = next_tokens
        scores[alive] += log_probs.gather(1, next_tokens[:, None]).squeeze(1)
        is_eos = next_tokens == eos_id
        if bool(is_eos.any()):
            finished = alive[is_eos]
            lengths[finished] = t + 1
            terminated[finished] = True
            unfinished = (~is_eos).nonzero().squeeze(1)
            if unfinished.numel() == 0:
                break
            alive, next_tokens = alive[unfinished], next_tokens[unfinished]
            state = model.select(state, unfinished)
        if t + 1 == max_len:
            break
        state, log_probs = model.step(state, next_tokens)
        _check_step_log_probs(log_probs, alive.numel(), vocab_size, "step")
    return tokens, lengths, terminated, scores


def _beam_search(model, contexts, beam_size: int, max_len: int, vocab_size: int, eos_id: int):
    """Beam search of Welleck et al. (2020), Def. A.2, batched over contexts.

    Per context and step t: every live prefix rho is expanded with every token v, with score
    s(rho o v) = s(rho) + log p(v | rho, x) (Def. A.1; no length normalisation); the
    ``beam_size`` best expansions over all live prefixes x all tokens are kept (expansions of
    probability zero, score ``-inf``, never are: with a sparse model the beam may hold fewer
    than ``beam_size`` prefixes, and a zero-probability eos never finishes one); kept ones
    ending in eos leave for the finished set S, the others form the next live beam (which
    may thus hold fewer than ``beam_size`` prefixes). A context stops when S holds
    ``beam_size`` sequences, when no live prefix is left, or at ``max_len``; it returns the
    highest-scoring sequence of S, else (S empty) the best live prefix, not terminated.

    Ties are broken deterministically: among equal scores the expansion of the
    higher-ranked live prefix comes first, then the smaller token id; live prefixes are
    ranked by the order in which they were kept; the best finished sequence is the earliest
    one found among equal scores.

    Working batch: the live prefixes of all unfinished contexts, grouped by context in rank
    order; ``model.select`` repeats and reorders their states, and finished contexts leave.
    Tokens are recovered at the end from back-pointers (one loop over time).

    Also returns each context's first finish step: the first t (1-based) at which a kept
    expansion ended in eos, ``max_len + 1`` if none did. Nothing before step L depends on
    ``max_len >= L``, so a search limited to L steps terminates iff this is <= L.

    One function of about 90 lines of code on purpose: the step updates eight tensors of the
    working batch together (scores, back-pointers, live and finished sets, first finish
    steps), and a reader checks Def. A.2 against it in one place.
    """
    batch, width = contexts.shape[0], beam_size
    per_row = min(width, vocab_size)  # a row contributes at most this many expansions
    state, log_probs = model.initial_state(contexts)
    _check_step_log_probs(log_probs, batch, vocab_size, "initial_state")
    device, dtype = log_probs.device, _score_dtype(log_probs)
    long = dict(dtype=torch.long, device=device)

    # Back-pointers: the kept expansions of each context at each step, in kept order.
    kept_tokens = torch.full((batch, max_len, width), PAD, **long)
    kept_parents = torch.zeros((batch, max_len, width), **long)
    # What each context returns: the step and kept position of its last token.
    end_step = torch.full((batch,), max_len - 1, **long)
    end_position = torch.zeros(batch, **long)
    best_score = torch.full((batch,), _NEG_INF, dtype=dtype, device=device)
    n_finished = torch.zeros(batch, **long)
    has_finished = torch.zeros(batch, dtype=torch.bool, device=device)
    first_finish = torch.full((batch,), max_len + 1, **long)  # max_len + 1: never finished

    # Working rows (one per live prefix) and the contexts still being decoded.
    active = torch.arange(batch, device=device)  # context id of each active slot a
    row_slot = torch.arange(batch, device=device)  # active slot of each row's context
    row_rank = torch.zeros(batch, **long)  # rank of the row's prefix in its live beam
    row_position = torch.zeros(batch, **long)  # kept position of the prefix at step t - 1
    row_score = torch.zeros(batch, dtype=dtype, device=device)

    for t in range(max_len):
        n_active, n_rows = active.numel(), row_slot.numel()
        # 1. Each row's best expansions (the global best are among them).
        expansion_scores = row_score[:, None] + log_probs.to(dtype)
        row_tokens = _top_k_ids(expansion_scores, per_row)  # increasing ids
        row_token_scores = expansion_scores.gather(1, row_tokens)
        # 2. Lay them out per context as [slot, rank, j]; missing ranks are padding.
        grid_scores = torch.full((n_active, width, per_row), _NEG_INF, dtype=dtype, device=device)
        grid_tokens = torch.zeros((n_active, width, per_row), **long)
        grid_rows = torch.full((n_active, width), -1, **long)
        grid_scores[row_slot, row_rank] = row_token_scores
        grid_tokens[row_slot, row_rank] = row_tokens
        grid_rows[row_slot, row_rank] = torch.arange(n_rows, device=device)
        # 3. Keep the `width` best per context. The stable sort keeps (rank, token) order
        #    among ties, and padding (highest ranks) after every real expansion.
        flat_scores = grid_scores.view(n_active, width * per_row)
        order = torch.sort(flat_scores, dim=1, descending=True, stable=True).indices[:, :width]
        scores = flat_scores.gather(1, order)
        tokens = grid_tokens.view(n_active, -1).gather(1, order)
        parent_rows = grid_rows.gather(1, order // per_row)
        # a real expansion has a parent and positive probability (sparse models give -inf)
        real = (parent_rows >= 0) & (scores > _NEG_INF)
        parent_rows = parent_rows.masked_fill(~real, 0)
        kept_tokens[active, t] = tokens.masked_fill(~real, PAD)
        kept_parents[active, t] = row_position[parent_rows]
        # 4. Kept expansions ending in eos join the finished set S.
        ends = real & (tokens == eos_id)
        lives = real & (tokens != eos_id)
        any_end = ends.any(dim=1)
        first_end = ends.int().argmax(dim=1)  # the best of this step's finished (kept order)
        first_end_score = scores.gather(1, first_end[:, None]).squeeze(1)
        improves = any_end & (~has_finished[active] | (first_end_score > best_score[active]))
        improved = active[improves]
        best_score[improved] = first_end_score[improves]
        end_step[improved] = t
        end_position[improved] = first_end[improves]
        first_finish[active[any_end & ~has_finished[active]]] = t + 1
        has_finished[active] |= any_end
        n_finished[active] += ends.sum(dim=1)
        # 5. Contexts that stop; those with an empty S return their best live prefix.
        done = (n_finished[active] >= width) | ~lives.any(dim=1) | (t + 1 == max_len)
        unfinished_done = done & ~has_finished[active]
        first_live = lives.int().argmax(dim=1)
        fallback = active[unfinished_done]
        end_step[fallback] = t
        end_position[fallback] = first_live[unfinished_done]
        best_score[fallback] = scores.gather(1, first_live[:, None]).squeeze(1)[unfinished_done]
        going_on = ~done
        if not bool(going_on.any()):
            break
        # 6. The next working batch: live prefixes of the contexts that go on.
        slot, position = (lives & going_on[:, None]).nonzero(as_tuple=True)
        state = model.select(state, parent_rows[slot, position])
        next_tokens = tokens[slot, position]
        row_score = scores[slot, position]
        row_rank = (lives.cumsum(dim=1) - 1)[slot, position]
        row_position = position
        row_slot = (going_on.cumsum(dim=0) - 1)[slot]
        active = active[going_on]
        state, log_probs = model.step(state, next_tokens)
        _check_step_log_probs(log_probs, next_tokens.numel(), vocab_size, "step")

    tokens = _follow_back_pointers(kept_tokens, kept_parents, end_step, end_position)
    return tokens, end_step + 1, has_finished, best_score, first_finish


def _follow_back_pointers(kept_tokens, kept_parents, end_step, end_position):
    """Rebuild each context's returned sequence from the back-pointers, last token first."""
    batch, max_len, _ = kept_tokens.shape
    rows = torch.arange(batch, device=kept_tokens.device)
    tokens = torch.full((batch, max_len), PAD, dtype=torch.long, device=kept_tokens.device)
    position = end_position
    # from the last step any context ran (beyond it every row is padding), not from max_len
    last = int(end_step.max()) if batch else -1
    for t in range(last, -1, -1):
        inside = t <= end_step
        tokens[:, t] = torch.where(inside, kept_tokens[rows, t, position], PAD)
        position = torch.where(inside, kept_parents[rows, t, position], position)
    return tokens
