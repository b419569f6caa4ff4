"""Argument checks shared by every module: clear ``ValueError``/``TypeError`` messages
that say what was wrong and what is allowed."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import torch


def check_eps(eps) -> float:
    """Return ``eps`` as a float after checking it lies in the open interval (0, 1).

    ``eps`` is the ST/NMST lower-bound rate (Welleck et al. 2020 Def. 4.3; Choi et al.
    2023 Defs. 5-6). NaN, 0, 1, negatives and non-numbers are rejected. Chapters 4-5
    (``04_self_terminating``, ``05_nmst``) define eps.
    """
    if isinstance(eps, torch.Tensor):
        if eps.numel() != 1:
            raise ValueError(f"eps must be a single number in (0, 1), got a tensor of shape {tuple(eps.shape)}")
        eps = eps.item()
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number in (0, 1), got {type(eps).__name__}")
    eps = float(eps)
    if math.isnan(eps) or not (0.0 < eps < 1.0):
        raise ValueError(f"eps must lie strictly between 0 and 1 (e.g. 1e-4), got {eps!r}")
    return eps


def check_index(value, size: int, name: str) -> int:
    """Check that ``value`` is an integer id in ``[0, size)`` and return it as ``int``."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer id, got {type(value).__name__}")
    value = int(value)
    if not (0 <= value < size):
        raise ValueError(f"{name} must be in [0, {size}) for a vocabulary of size {size}, got {value}")
    return value


def is_integer_tensor(x) -> bool:
    """Whether ``x`` is a tensor of integers (token ids, lengths, step counts): not floating
    point, complex or bool."""
    return (isinstance(x, torch.Tensor) and not x.is_floating_point() and not x.is_complex()
            and x.dtype != torch.bool)


def check_token_ids(tokens, vocab_size: int, name: str) -> torch.Tensor:
    """Check that ``tokens`` is a torch tensor of token ids (not floating point or complex)
    whose values lie in ``[0, vocab_size)``, and return it."""
    if (
        not isinstance(tokens, torch.Tensor)
        or tokens.is_floating_point()
        or tokens.is_complex()
    ):
        raise TypeError(f"{name} must be an integer torch.Tensor of token ids")
    if tokens.numel() and (
        int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size
    ):
        raise ValueError(
            f"{name} must hold token ids in [0, {vocab_size}), got values outside"
        )
    return tokens


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    """Check that ``value`` is an integer >= ``minimum`` and return it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def check_records(value, name: str, fields: str) -> list:
    """Check that ``value`` is a non-empty sequence (not a string or a
    mapping) and return it as a list; ``fields`` says what each record holds,
    for the message (e.g. ``"'head', 'eps', 'ppl' and 'rnt'"``). Chapter 7 (``07_gpt2``) passes such
    records to its eps trade-off plot and p(eos) token explorer."""
    if (
        isinstance(value, (str, bytes, Mapping))
        or not isinstance(value, Sequence)
        or len(value) == 0
    ):
        raise TypeError(
            f"{name} must be a non-empty sequence of mappings with {fields}"
        )
    return list(value)
