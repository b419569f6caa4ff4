"""Markov (bigram) language models: the smallest models that obey the decoding protocol.

A :class:`MarkovLM` is a table ``P[i, j] = p(y_t = j | y_{t-1} = i)``. It is small enough that
every quantity the book cares about (the probability that a decoder never emits eos, the
expected length, r_nt(L)) can be computed exactly by absorbing-Markov-chain algebra and set
against Monte-Carlo estimates from :func:`nmst_lib.decoding.decode`
(Chapter 2, ``02_consistency``). Chapter 1 (``01_decoding``) decodes them as its first
examples, Chapter 3 (``03_consistent_sampling``) computes what consistent sampling changes,
and Assignment 1 checks students' code against them. :func:`decoder_transition_matrix` builds
the chain a decoder induces from the decoders' own candidate sets, so exact and sampled
answers come from the same code.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from ._validation import check_index, check_positive_int
from .decoding import nucleus_mask, restrict_log_probs, top_k_mask

__all__ = [
    "MarkovLM",
    "random_markov_lm",
    "decoder_transition_matrix",
    "absorption_probabilities",
    "expected_lengths",
    "survival_curve",
    "termination_probability",
    "expected_length",
    "exact_rnt_curve",
]


class MarkovLM:
    """A bigram language model given by a table of next-token log-probabilities.

    Row ``i`` of ``transition_log_probs`` (shape ``[V, V]``) is the distribution of the next
    token after token ``i``. The first continuation token is drawn from the row of the last
    context token. The eos row is never used by a decoder (sequences stop at eos).

    Implements the decoding protocol of ARCHITECTURE.md (``eos_id``, ``vocab_size``,
    ``initial_state``, ``step``, ``select``); its state is the last token, ``LongTensor[B]``.
    Used in Chapters 1-3 and in the decoder tests.
    """

    def __init__(self, transition_log_probs: torch.Tensor, eos_id: int = -1):
        if not isinstance(transition_log_probs, torch.Tensor) or not transition_log_probs.is_floating_point():
            raise TypeError("transition_log_probs must be a floating-point torch.Tensor of shape [V, V]")
        if transition_log_probs.dim() != 2 or transition_log_probs.shape[0] != transition_log_probs.shape[1]:
            raise ValueError(
                f"transition_log_probs must be a square [V, V] table, got shape {tuple(transition_log_probs.shape)}"
            )
        vocab_size = transition_log_probs.shape[0]
        if vocab_size < 2:
            raise ValueError("a Markov LM needs at least 2 tokens (one of them eos)")
        row_sums = torch.logsumexp(transition_log_probs.double(), dim=-1)
        if not torch.allclose(row_sums, torch.zeros_like(row_sums), atol=1e-6):
            raise ValueError("each row of transition_log_probs must be a log-distribution (logsumexp == 0)")
        self.vocab_size = int(vocab_size)
        if isinstance(eos_id, int) and not isinstance(eos_id, bool) and eos_id == -1:
            eos_id = vocab_size - 1  # ARCHITECTURE.md: eos is the last id unless said otherwise
        self.eos_id = check_index(eos_id, vocab_size, "eos_id")
        self.transition_log_probs = transition_log_probs

    @property
    def transition_probs(self) -> torch.Tensor:
        """The table as probabilities ``P[i, j]``."""
        return self.transition_log_probs.exp()

    def initial_state(self, contexts: torch.Tensor):
        """State after reading ``contexts`` ([B, k]): the last context token; and its next-token log-probs."""
        last = contexts[:, -1].to(self.transition_log_probs.device)
        return last, self.transition_log_probs[last]

    def step(self, state: torch.Tensor, tokens: torch.Tensor):
        """Advance every row by one token; the new state is that token."""
        tokens = tokens.to(self.transition_log_probs.device)
        return tokens, self.transition_log_probs[tokens]

    def select(self, state: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Rows of the state picked, reordered or repeated by ``index``."""
        return state[index.to(state.device)]


def random_markov_lm(
    vocab_size: int,
    eos_id: int = -1,
    *,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> MarkovLM:
    """A :class:`MarkovLM` whose rows are ``softmax(z / temperature)`` with ``z ~ N(0, I)``.

    Small temperatures give peaked rows (greedy-like behaviour), large ones near-uniform rows.
    Drawn with ``generator`` only, so the same seed gives the same table. Chapters 1 and 2
    (``01_decoding``, ``02_consistency``) check the decoders and the exact calculations on such
    tables.
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size", minimum=2)
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"temperature must be a real number > 0, got {type(temperature).__name__}")
    temperature = float(temperature)
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    logits = torch.randn(vocab_size, vocab_size, generator=generator, dtype=dtype) / temperature
    return MarkovLM(torch.log_softmax(logits, dim=-1), eos_id=eos_id)


# ---------------------------------------------------------------------------------------
# Exact probabilities: a decoder on a MarkovLM is an absorbing Markov chain
# ---------------------------------------------------------------------------------------
#
# A per-step decoding rule (greedy, ancestral, top-k, nucleus and their consistent variants)
# turns each row P[i] of a MarkovLM into a next-token distribution q(. | i) that depends
# only on the last token i. The decoded sequence is then a Markov chain on tokens in which
# eos is absorbing, and termination probability, expected length and r_nt(L) follow from
# absorbing-chain algebra (Kemeny & Snell): Chapter 2 (``02_consistency``) and Chapter 3
# (``03_consistent_sampling``). Beam search is not a per-step kernel and is not covered.

KERNEL_METHODS = ("greedy", "ancestral", "top-k", "nucleus")


def _check_markov_lm(model) -> None:
    if not isinstance(model, MarkovLM):
        raise TypeError(f"model must be a MarkovLM, got {type(model).__name__}")


def decoder_transition_matrix(
    model: MarkovLM,
    method: str,
    k: int | None = None,
    p: float | None = None,
    consistent: bool = False,
) -> torch.Tensor:
    """The decoder's induced kernel ``q[i, j] = q_F(y_t = j | y_{t-1} = i)`` as a float64 [V, V] matrix.

    Rows follow the proposal distributions of Welleck et al. (2020): ancestral (Def. 2.5:
    q = p), greedy (Def. 2.8: a point mass on the argmax), top-k (Def. 2.6), nucleus
    (Def. 2.7, ARCHITECTURE.md: the smallest most-probable set with mass >= p), and with
    ``consistent=True`` consistent top-k / nucleus (Defs. 4.1-4.2: eos added to the set).
    The candidate set V_t comes from :mod:`nmst_lib.decoding` (``top_k_mask``,
    ``nucleus_mask``, ``restrict_log_probs``), so the exact computation and the sampler share
    one definition; greedy is the top-1 set, whose tie rule (smaller id first) is the
    decoder's argmax. The eos row is included for completeness; decoders stop at eos, but a
    context may end in eos, and its row then gives the first step. Chapters 2-3.
    """
    _check_markov_lm(model)
    if not isinstance(consistent, bool):
        raise TypeError(f"consistent must be True or False, got {type(consistent).__name__}")
    if method not in KERNEL_METHODS:
        raise ValueError(
            f"method must be one of {KERNEL_METHODS} (per-step decoding rules; beam search is not a Markov kernel), got {method!r}"
        )
    if consistent and method not in ("top-k", "nucleus"):
        raise ValueError("consistent=True applies to 'top-k' and 'nucleus' only (Welleck et al. 2020, Defs. 4.1-4.2)")
    if method != "top-k" and k is not None:
        raise ValueError(f"k is only used by method 'top-k', got k={k!r} with method {method!r}")
    if method != "nucleus" and p is not None:
        raise ValueError(f"p is only used by method 'nucleus', got p={p!r} with method {method!r}")
    log_probs = model.transition_log_probs.double()
    eos_id = model.eos_id if consistent else None
    if method == "ancestral":
        kernel_log_probs = log_probs
    elif method == "greedy":
        kernel_log_probs = restrict_log_probs(log_probs, top_k_mask(log_probs, 1))
    elif method == "top-k":
        if k is None:
            raise ValueError("method 'top-k' needs k (an integer >= 1)")
        kernel_log_probs = restrict_log_probs(log_probs, top_k_mask(log_probs, k, eos_id=eos_id))
    else:
        if p is None:
            raise ValueError("method 'nucleus' needs p (a number in (0, 1])")
        kernel_log_probs = restrict_log_probs(log_probs, nucleus_mask(log_probs, p, eos_id=eos_id))
    return kernel_log_probs.exp()


def _check_kernel(kernel: torch.Tensor, eos_id: int) -> torch.Tensor:
    if not isinstance(kernel, torch.Tensor) or kernel.dim() != 2 or kernel.shape[0] != kernel.shape[1]:
        raise ValueError("kernel must be a square [V, V] tensor of transition probabilities")
    check_index(eos_id, kernel.shape[0], "eos_id")
    kernel = kernel.double()
    ones = torch.ones(kernel.shape[0], dtype=torch.float64, device=kernel.device)
    if bool((kernel < 0).any()) or not torch.allclose(kernel.sum(-1), ones, atol=1e-9):
        raise ValueError("kernel rows must be probability distributions (non-negative, summing to 1)")
    return kernel


def _transient_index(vocab_size: int, eos_id: int, device) -> torch.Tensor:
    return torch.cat([torch.arange(0, eos_id, device=device), torch.arange(eos_id + 1, vocab_size, device=device)])


def _absorbing_chain(kernel: torch.Tensor, eos_id: int):
    """The kernel q checked (float64), the transient (non-eos) tokens T, Q = q[T, T] and
    r = q[T, eos]: the blocks of the absorbing chain that every exact calculation below reads."""
    kernel = _check_kernel(kernel, eos_id)
    transient = _transient_index(kernel.shape[0], eos_id, kernel.device)
    return kernel, transient, kernel[transient][:, transient], kernel[transient, eos_id]


def _one_minus_kernel(kernel: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """I - q[S, S] for the states S, with the diagonal computed without cancellation.

    1 - q_ii is the mass that leaves i, sum_{j != i} q_ij (over every column: other states,
    eos, and states outside S), as in the Grassmann-Taksar-Heyman algorithm: 1 - q_ii itself
    would lose all precision when q_ii is within rounding of 1 (a near-absorbing self-loop).
    """
    rows = kernel[states]  # [|S|, V]
    is_self = torch.zeros_like(rows, dtype=torch.bool)
    index = torch.arange(states.numel(), device=kernel.device)
    is_self[index, states] = True
    leaving = rows.masked_fill(is_self, 0.0).sum(-1)
    block = -rows[:, states]
    block[index, index] = leaving
    return block


def _can_reach(adjacency: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """States with a positive-probability path (length >= 1 or 0) to a state in ``targets``.

    Backward breadth-first search as repeated boolean matrix-vector products: at most V
    rounds, one per extra path length.
    """
    reach = targets.clone()
    while True:
        grown = reach | (adjacency.double() @ reach.double() > 0)
        if bool((grown == reach).all()):
            return reach
        reach = grown


def absorption_probabilities(kernel: torch.Tensor, eos_id: int) -> torch.Tensor:
    """x[i] = probability that the chain started by a first step from row i ever emits eos.

    Absorbing-chain algebra on the kernel q (e.g. :func:`decoder_transition_matrix`): with
    T = the non-eos (transient) tokens, Q = q[T, T] and r = q[T, eos], the absorption
    probabilities solve (I - Q) a = r. States from which eos is unreachable have a = 0
    exactly; they are split out first by graph reachability (Q restricted to the others has
    spectral radius < 1, so the system is non-singular). The diagonal of I - Q is the mass
    leaving each state, summed without computing 1 - q_ii (accurate even for near-absorbing
    self-loops). Then x[i] = q[i, eos] + q[i, T] a for every row i, eos's row included (a
    context may end in any token). Float64, shape [V]. The consistency of Welleck et al.
    (2020), Def. 3.2 is x == 1 (Chapters 2-3).
    """
    kernel, transient, Q, r = _absorbing_chain(kernel, eos_id)
    reaches = _can_reach(Q > 0, r > 0)
    a = torch.zeros(transient.shape[0], dtype=torch.float64, device=kernel.device)
    live = reaches.nonzero().squeeze(1)
    if live.numel():
        a[live] = torch.linalg.solve(_one_minus_kernel(kernel, transient[live]), r[live])
    return kernel[:, eos_id] + kernel[:, transient] @ a


def expected_lengths(kernel: torch.Tensor, eos_id: int) -> torch.Tensor:
    """E|y| for a chain started by a first step from each row i (length counts eos); inf if P(stop) < 1.

    With T, Q as in :func:`absorption_probabilities`, the expected number of steps to
    absorption from each transient state solves (I - Q) m = 1 on the states that reach eos;
    then E|y| from row i is 1 + q[i, T] m. A row from which some eos-unreachable state can be
    reached terminates with probability < 1 and gets ``inf`` (decided by reachability, not a
    tolerance). Float64, shape [V] (Chapters 2-3).
    """
    kernel, transient, Q, r = _absorbing_chain(kernel, eos_id)
    device = kernel.device
    reaches = _can_reach(Q > 0, r > 0)
    # transient states that can reach a trapped state (one that never reaches eos)
    leaks = _can_reach(Q > 0, ~reaches)
    m = torch.full((transient.shape[0],), float("inf"), dtype=torch.float64, device=device)
    safe = (~leaks).nonzero().squeeze(1)
    if safe.numel():
        # a safe state's successors are all safe, so the system closes on the safe states
        ones = torch.ones(safe.numel(), dtype=torch.float64, device=device)
        m[safe] = torch.linalg.solve(_one_minus_kernel(kernel, transient[safe]), ones)
    first = kernel[:, transient]
    row_leaks = ((first > 0) & leaks.unsqueeze(0)).any(dim=1)
    finite_m = torch.where(leaks, torch.zeros_like(m), m)
    out = 1.0 + first @ finite_m
    return torch.where(row_leaks, torch.full_like(out, float("inf")), out)


def survival_curve(kernel: torch.Tensor, eos_id: int, start_token, Ls) -> torch.Tensor:
    """P(no eos among the first L tokens) for each L in ``Ls``, from the row ``start_token``.

    Iterates the distribution over the last token with eos removed (it is absorbing):
    pi_1 = q[start, T], pi_{t+1} = pi_t q[T, T], and P(no eos in first L) = sum_{j in T} pi_L[j].
    One (vector- or matrix-) matrix product per step up to max(Ls). This is the exact r_nt(L)
    of Choi et al. (2023), eq. 11 (Chapters 2-3). ``start_token`` is one token id (returns a
    float64 tensor of len(Ls)) or a 1-D tensor/list of n ids (returns [n, len(Ls)]).
    """
    kernel, transient, Q, _ = _absorbing_chain(kernel, eos_id)
    vocab_size = kernel.shape[0]
    single = not isinstance(start_token, (torch.Tensor, list, tuple))
    starts = [start_token] if single else list(torch.as_tensor(start_token).reshape(-1).tolist())
    starts = torch.tensor([check_index(s, vocab_size, "start_token") for s in starts], device=kernel.device)
    Ls = _check_steps(Ls)
    pi = kernel[starts][:, transient]  # [n, |T|]: mass on each non-eos token after step 1
    survival = [pi.sum(-1)]
    for _ in range(int(Ls.max()) - 1):  # a loop over steps (not tokens or rows): pi_{t+1} = pi_t Q
        pi = pi @ Q
        survival.append(pi.sum(-1))
    curve = torch.stack(survival, dim=-1)[:, Ls.to(kernel.device) - 1]  # [n, len(Ls)]
    # A sum of probabilities can round to 1 + 1 ulp; a probability is reported inside [0, 1].
    curve = curve.clamp(0.0, 1.0)
    return curve[0] if single else curve


def _check_steps(Ls) -> torch.Tensor:
    if isinstance(Ls, int) and not isinstance(Ls, bool):
        Ls = [Ls]
    Ls = torch.as_tensor(list(Ls) if not isinstance(Ls, torch.Tensor) else Ls)
    if Ls.dim() != 1 or Ls.numel() == 0 or Ls.is_floating_point() or Ls.dtype == torch.bool:
        raise ValueError("Ls must be a non-empty 1-D sequence of integers >= 1")
    if int(Ls.min()) < 1:
        raise ValueError(f"every L must be >= 1, got {int(Ls.min())}")
    return Ls.long()


def termination_probability(
    model: MarkovLM,
    method: str,
    k: int | None = None,
    p: float | None = None,
    consistent: bool = False,
    *,
    start_token: int,
) -> float:
    """q_F(|y| < inf | last context token = start_token): the probability the decoder ever emits eos.

    Welleck et al. (2020), Def. 3.2 (a decoder is consistent when this is 1) computed
    exactly for a MarkovLM: :func:`absorption_probabilities` of
    :func:`decoder_transition_matrix`. 1 - this is r_nt = lim_L r_nt(L) of Choi et al. (2023),
    eq. 11. Chapters 2-3 (``02_consistency``, ``03_consistent_sampling``).
    """
    start_token = check_index(start_token, model.vocab_size, "start_token")
    kernel = decoder_transition_matrix(model, method, k=k, p=p, consistent=consistent)
    return float(absorption_probabilities(kernel, model.eos_id)[start_token])


def expected_length(
    model: MarkovLM,
    method: str,
    k: int | None = None,
    p: float | None = None,
    consistent: bool = False,
    *,
    start_token: int,
) -> float:
    """E_qF|y| (tokens including eos) of the decoder's continuation after ``start_token``; inf if it may not stop.

    Absorbing-chain expected time to absorption (:func:`expected_lengths`) of
    :func:`decoder_transition_matrix`; a geometric stop with eos probability s per step gives
    1/s. Chapters 2-3.
    """
    start_token = check_index(start_token, model.vocab_size, "start_token")
    kernel = decoder_transition_matrix(model, method, k=k, p=p, consistent=consistent)
    return float(expected_lengths(kernel, model.eos_id)[start_token])


def exact_rnt_curve(
    model: MarkovLM,
    method: str,
    k: int | None = None,
    p: float | None = None,
    consistent: bool = False,
    *,
    start_token: int,
    Ls,
) -> np.ndarray:
    """Exact r_nt(L) = q_F(no eos among the first L tokens) for each L in ``Ls`` (float64 numpy array).

    Choi, Cho, Lee (2023), eq. 11 (Welleck et al. 2020's r_L is r_nt(L - 1)) for a MarkovLM: the survival
    curve (:func:`survival_curve`) of :func:`decoder_transition_matrix`. Comparable with
    :func:`nmst_lib.metrics.rnt_curve` of a decode whose contexts end in ``start_token``.
    Chapters 2-3.
    """
    kernel = decoder_transition_matrix(model, method, k=k, p=p, consistent=consistent)
    return survival_curve(kernel, model.eos_id, start_token, Ls).cpu().numpy()
