"""Decoder names of the experiments' configs
(``ExperimentConfig.decoding.decoders``): the decoders of Choi, Cho, Lee (2023)
Fig. 2 and App. F, Welleck et al. (2020) Defs. 2.5-2.8, 4.1-4.2 (Chapter 1,
01_decoding; Chapter 3, 03_consistent_sampling) and Martins et al. (2020) Sec.
3 and 5.1 (Chapter 8, 08_sparse), each a string such as ``top-2`` that
:func:`parse_decoder` turns into the arguments of
:func:`nmst_lib.decoding.decode`. Re-exported by
:mod:`nmst_lib.experiments.config`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .._validation import check_positive_int

__all__ = [
    "ALL_DECODERS",
    "GREEDY_ONLY",
    "VA_CONSISTENT_DECODERS",
    "DecoderSpec",
    "parse_decoder",
]

GREEDY_ONLY = ("greedy",)
ALL_DECODERS = (
    "greedy",
    "ancestral",
    "top-2",
    "top-4",
    "nucleus-0.2",
    "nucleus-0.4",
    "beam-2",
    "beam-4",
)
"""The decoders of Choi, Cho, Lee (2023) Fig. 2 and App. F (plus ancestral
sampling)."""
VA_CONSISTENT_DECODERS = ("consistent-top-2", "consistent-nucleus-0.2")
"""Consistent top-k / nucleus (Welleck et al. 2020, Defs. 4.1-4.2), run on VA
models."""


@dataclass(frozen=True)
class DecoderSpec:
    """A decoder name parsed into the arguments of
    :func:`nmst_lib.decoding.decode`. Used by the configs of Chapters 6-9."""

    name: str
    method: str
    k: int | None = None
    p: float | None = None
    beam_size: int | None = None
    consistent: bool = False
    sampling: bool = False
    alpha: float | None = None
    temperature: float | None = None

    def decode_kwargs(self) -> dict:
        """Keyword arguments for :func:`nmst_lib.decoding.decode` (besides
        ``max_len``)."""
        kw = {"consistent": self.consistent} if self.consistent else {}
        for key in ("k", "p", "beam_size", "alpha", "temperature"):
            if getattr(self, key) is not None:
                kw[key] = getattr(self, key)
        return kw


_DECODER_RE = re.compile(
    r"^(consistent-)?(greedy|ancestral|top-(\d+)|nucleus-([0-9.]+)|beam-(\d+)"
    r"|entmax-([0-9.]+)|temperature-([0-9.]+))$"
)


def _decoder_number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"decoder {name!r}: {text!r} is not a number"
        ) from None
    if not math.isfinite(value):
        raise ValueError(
            f"decoder {name!r}: the number must be finite, got {text!r}"
        )
    return value


def parse_decoder(name: str) -> DecoderSpec:
    """Parse ``greedy``, ``ancestral``, ``top-K``, ``nucleus-P``, ``beam-B``,
    and ``consistent-top-K`` / ``consistent-nucleus-P`` (Welleck et al. 2020,
    Defs. 2.5-2.8, 4.1, 4.2, A.2; Chapter 1, 01_decoding, and Chapter 3,
    03_consistent_sampling), plus the decoders of Martins et al. (2020) Sec. 3
    and 5.1 (Chapter 8, 08_sparse): ``entmax-A`` (entmax sampling, eq. 7:
    sample from alpha-entmax of the model's scores, A > 1, e.g. ``entmax-1.5``)
    and ``temperature-T`` (softmax with temperature, ancestral sampling from
    softmax(log p / T), T > 0, e.g. ``temperature-0.95``)."""
    m = _DECODER_RE.match(name) if isinstance(name, str) else None
    allowed = (
        "greedy, ancestral, top-K, nucleus-P, beam-B, consistent-top-K, "
        "consistent-nucleus-P, entmax-A, "
        "temperature-T"
    )
    if m is None:
        raise ValueError(
            f"unknown decoder {name!r}: use one of {allowed} (e.g. top-2, "
            "nucleus-0.4, beam-4, "
            "entmax-1.5, temperature-0.95)"
        )
    consistent = m.group(1) is not None
    if m.group(6) is not None:
        alpha = _decoder_number(m.group(6), name)
        if not alpha > 1.0:
            raise ValueError(
                f"entmax sampling needs alpha > 1, got {alpha} in {name!r} "
                "(alpha = 1 is softmax: "
                "use 'ancestral')"
            )
        spec = DecoderSpec(name, "entmax", alpha=alpha, sampling=True)
    elif m.group(7) is not None:
        temperature = _decoder_number(m.group(7), name)
        if not temperature > 0.0:
            raise ValueError(
                f"the temperature must be > 0, got {temperature} in {name!r} "
                "(use 'greedy' for the "
                "limit T -> 0)"
            )
        spec = DecoderSpec(
            name, "ancestral", temperature=temperature, sampling=True
        )
    elif m.group(3) is not None:
        spec = DecoderSpec(
            name,
            "top-k",
            k=check_positive_int(int(m.group(3)), "top-k's k"),
            sampling=True,
            consistent=consistent,
        )
    elif m.group(4) is not None:
        p = float(m.group(4))
        if not 0.0 < p <= 1.0:
            raise ValueError(
                f"nucleus p must lie in (0, 1], got {p} in {name!r}"
            )
        spec = DecoderSpec(
            name, "nucleus", p=p, sampling=True, consistent=consistent
        )
    elif m.group(5) is not None:
        spec = DecoderSpec(
            name,
            "beam",
            beam_size=check_positive_int(int(m.group(5)), "beam size"),
        )
    else:
        spec = DecoderSpec(
            name, m.group(2), sampling=m.group(2) == "ancestral"
        )
    if consistent and (spec.method not in ("top-k", "nucleus")):
        raise ValueError(
            f"'consistent-' applies to top-K and nucleus-P only, got {name!r}"
        )
    return spec
