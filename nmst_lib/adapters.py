"""A network with its softmax replaced: the decoding protocol for small worked examples.

The chapters' toy networks (e.g. :func:`nmst_lib.theory.inconsistent_rnn`) expose
``initial_state(contexts) -> (h, ...)``, ``step(h, tokens) -> (h, ...)``, ``logits(h)`` and
``select(h, index)``. :class:`WithHead` turns such a network into a model that
:func:`nmst_lib.decoding.decode` accepts (``initial_state``/``step`` returning log-probabilities,
``select``, ``eos_id``, ``vocab_size``) with another output layer on its logits:

* an :class:`~nmst_lib.heads.OutputHead` (VA, ST, NMST, entmax; Chapters 4-5, Definitions 4.3,
  5.1), with its running state carried and reordered beside the network's;
* or a function ``log_probs(h, z)``, e.g. a contextual temperature
  ``theory.tempered_log_softmax(z, T(h))`` (Chapter 9, eq. 5).

``negate_eos`` flips the eos logit's sign (so the RNN of Chapter 2, which never wants to stop,
becomes an ST model whose sigmoid says "go on", the hardest case for Theorem 4.1) and ``gain``
scales every logit. Chapters 4 (``STOnRNN``), 5 (``WithHead``) and 9 (``TemperedModel``) each
wrote this class; they now use this one.
"""

from __future__ import annotations

import torch

from .heads import OutputHead

__all__ = ["WithHead"]


class WithHead:
    """Decoding protocol for ``net`` with its softmax replaced by ``head`` or ``log_probs``.
    Chapters 4, 5 and 9 (``04_self_terminating``, ``05_nmst``, ``09_temperature``) decode through
    it."""

    def __init__(self, net, head: OutputHead | None = None, *, log_probs=None, negate_eos: bool = False,
                 gain: float = 1.0):
        missing = [n for n in ("initial_state", "step", "logits", "select", "eos_id", "vocab_size")
                   if not hasattr(net, n)]
        if missing:
            raise TypeError(f"net lacks {', '.join(missing)} (the toy-network protocol of nmst_lib.theory, "
                            f"e.g. theory.inconsistent_rnn), got {type(net).__name__}")
        if (head is None) == (log_probs is None):
            raise ValueError("give exactly one of head (an nmst_lib.heads.OutputHead) or log_probs(h, z)")
        if head is not None and not isinstance(head, OutputHead):
            raise TypeError(f"head must be an nmst_lib.heads.OutputHead, got {type(head).__name__}")
        if log_probs is not None and not callable(log_probs):
            raise TypeError("log_probs must be a function (h, logits) -> log-probabilities")
        if not isinstance(negate_eos, bool):
            raise TypeError("negate_eos must be True or False")
        self.net, self.head, self._log_probs, self.negate_eos = net, head, log_probs, negate_eos
        self.gain = float(gain)
        self.eos_id, self.vocab_size = net.eos_id, net.vocab_size

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The network's logits, times ``gain``, with the eos logit negated if asked."""
        z = self.gain * self.net.logits(h)
        if self.negate_eos:
            z = z.clone()
            z[..., self.eos_id] = -z[..., self.eos_id]
        return z

    def _out(self, h, head_state):
        z = self.logits(h)
        if self.head is None:
            with torch.no_grad():
                return self._log_probs(h, z), None
        return self.head.step(z, head_state)

    def initial_state(self, contexts: torch.Tensor):
        h, _ = self.net.initial_state(contexts)
        head_state = None if self.head is None else self.head.initial_step_state(contexts.shape[0], h.device)
        log_probs, head_state = self._out(h, head_state)
        return (h, head_state), log_probs

    def step(self, state, tokens: torch.Tensor):
        h, _ = self.net.step(state[0], tokens)
        log_probs, head_state = self._out(h, state[1])
        return (h, head_state), log_probs

    def select(self, state, index: torch.Tensor):
        h, head_state = state
        if head_state is not None:
            head_state = head_state.index_select(0, index.to(head_state.device))
        return self.net.select(h, index), head_state
