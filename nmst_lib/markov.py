"""Markov (bigram) language models: the smallest models that obey the decoding protocol.

A :class:`MarkovLM` is a table ``P[i, j] = p(y_t = j | y_{t-1} = i)``. It is small enough that
every quantity the book cares about (the probability that a decoder never emits eos, the
expected length, r_nt(L)) can be computed exactly by absorbing-Markov-chain algebra and set
against Monte-Carlo estimates from :func:`nmst_lib.decoding.decode`
(Chapter 2, ``02_consistency``).
"""

from __future__ import annotations

import torch

from ._validation import check_index, check_positive_int

__all__ = ["MarkovLM", "random_markov_lm"]


class MarkovLM:
    """A bigram language model given by a table of next-token log-probabilities.

    Row ``i`` of ``transition_log_probs`` (shape ``[V, V]``) is the distribution of the next
    token after token ``i``. The first continuation token is drawn from the row of the last
    context token. The eos row is never used by a decoder (sequences stop at eos).

    Implements the decoding protocol of DESIGN.md (``eos_id``, ``vocab_size``,
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
            eos_id = vocab_size - 1  # DESIGN.md: eos is the last id unless said otherwise
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
    Drawn with ``generator`` only, so the same seed gives the same table.
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size", minimum=2)
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}")
    logits = torch.randn(vocab_size, vocab_size, generator=generator, dtype=dtype) / temperature
    return MarkovLM(torch.log_softmax(logits, dim=-1), eos_id=eos_id)
