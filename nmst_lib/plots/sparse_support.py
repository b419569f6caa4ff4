"""How many tokens alpha-entmax keeps: the figures and the alpha explorer of
Chapter 8 (``08_sparse``).

alpha-entmax (Peters et al. 2019; Martins et al. 2020, eq. 3; computed by
:func:`nmst_lib.entmax.entmax`) gives the tokens below a threshold
probability exactly zero, eos among them. :func:`support_size_plot` draws the
support size against alpha for a few score vectors; :func:`plot_entmax_ranks`
draws probability against rank for one alpha, with the softmax beside it and
eos marked; the alpha explorer built on it is
:func:`entmax_alpha_explorer_html` on the website and
:func:`entmax_alpha_explorer_widget` in a live kernel.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from .._validation import check_index
from .explorers import Control, Explorer
from .style import (
    COLORS,
    COLUMN_WIDTH,
    FIGURE_DPI,
    _cycle_style,
    _figure_and_axes,
    _format_number,
    legend_below,
)

# in reading order: the API page (book/api.md) lists them so
__all__ = [  # noqa: RUF022
    "support_size_plot",
    "plot_entmax_ranks",
    "entmax_alpha_explorer_html",
    "entmax_alpha_explorer_widget",
]

_RIGHT_LEGEND = {"loc": "center left", "bbox_to_anchor": (1.01, 0.5)}


def _check_scores(scores) -> torch.Tensor:
    """Score vectors as a float64 CPU tensor [N, V] (one row per context)."""
    if not isinstance(scores, torch.Tensor):
        try:
            scores = torch.as_tensor(np.asarray(scores, dtype=np.float64))
        except (TypeError, ValueError):
            raise TypeError(
                "scores must be a tensor or array of logits, shape [V] or "
                "[N, V]"
            ) from None
    if not scores.is_floating_point():
        raise TypeError(
            f"scores must hold floating-point logits, got dtype {scores.dtype}"
        )
    if scores.dim() == 1:
        scores = scores.unsqueeze(0)
    if scores.dim() != 2 or scores.shape[-1] < 2:
        raise ValueError(
            "scores must have shape [V] or [N, V] with V >= 2, "
            f"got {tuple(scores.shape)}"
        )
    scores = scores.detach().to("cpu", torch.float64)
    if torch.isnan(scores).any() or torch.isposinf(scores).any():
        raise ValueError(
            "scores must not contain NaN or +inf (-inf marks a masked token)"
        )
    if not torch.isfinite(scores).any(dim=-1).all():
        raise ValueError("every row of scores needs at least one finite logit")
    return scores


def _check_alphas(alphas) -> tuple[float, ...]:
    if isinstance(alphas, numbers.Real) and not isinstance(alphas, bool):
        alphas = (alphas,)
    try:
        values = tuple(alphas)
    except TypeError:
        raise TypeError("alphas must be a sequence of numbers >= 1") from None
    if not values:
        raise ValueError("alphas must hold at least one value")
    out = []
    for a in values:
        if (
            isinstance(a, bool)
            or not isinstance(a, numbers.Real)
            or not math.isfinite(float(a))
        ):
            raise TypeError(
                f"every alpha must be a finite real number >= 1, got {a!r}"
            )
        if float(a) < 1:
            raise ValueError(
                "alpha-entmax needs alpha >= 1 (1 = softmax, 2 = sparsemax), "
                f"got {a!r}"
            )
        out.append(float(a))
    return tuple(out)


def _check_labels(labels, n: int) -> tuple[str, ...]:
    if labels is None:
        return tuple(f"context {i + 1}" for i in range(n))
    labels = tuple(str(x) for x in labels)
    if len(labels) != n:
        raise ValueError(
            f"labels must name each of the {n} score vectors, "
            f"got {len(labels)}"
        )
    return labels


def _entmax_probs(scores: torch.Tensor, alpha: float) -> torch.Tensor:
    from ..entmax import entmax

    return entmax(scores, alpha, dim=-1)


def _mark_eos_support(ax, x, sizes, inside, color) -> None:
    """Filled circles where eos is in the support, open ones where not."""
    ax.plot(x[inside], sizes[inside], "o", color=color, markersize=5)
    ax.plot(
        x[~inside],
        sizes[~inside],
        "o",
        markerfacecolor="white",
        markeredgecolor=color,
        markersize=5,
    )


def support_size_plot(
    scores,
    alphas: Sequence[float],
    *,
    eos_id: int | None = None,
    labels: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
) -> Figure:
    """How many tokens alpha-entmax keeps: the support size of
    ``entmax(scores, alpha)`` against alpha.

    One line per score vector (row of ``scores``, e.g. next-token logits of a
    few contexts), on a log y axis from 1 to V (alpha = 1 is the softmax,
    which keeps all V tokens; alpha = 2 is sparsemax). With ``eos_id``, each
    point is a filled circle where eos is in the support (p(eos) > 0) and an
    open circle where alpha-entmax gives eos probability exactly zero
    (Chapter 8, ``08_sparse``: Theorem "The closed form of alpha-entmax",
    after Peters et al. 2019 and Martins et al. 2020, eq. 3). Returns the
    figure.
    """
    scores = _check_scores(scores)
    alphas = _check_alphas(alphas)
    labels = _check_labels(labels, scores.shape[0])
    if eos_id is not None:
        eos_id = check_index(eos_id, scores.shape[-1], "eos_id")
    own_figure = ax is None
    if own_figure:
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.4))
        fig.subplots_adjust(left=0.11, right=0.97, bottom=0.15, top=0.9)
    else:
        fig = ax.figure
    x = np.asarray(alphas)
    probs = [_entmax_probs(scores, a) for a in alphas]
    for i, label in enumerate(labels):
        color, dash = _cycle_style(i)
        sizes = np.array([int((p[i] > 0).sum()) for p in probs])
        ax.plot(x, sizes, color=color, linestyle=dash, label=label)
        if eos_id is not None:
            inside = np.array([bool(p[i, eos_id] > 0) for p in probs])
            _mark_eos_support(ax, x, sizes, inside, color)
    if eos_id is not None:
        ax.plot([], [], "o", color="grey", label="eos in the support")
        ax.plot(
            [],
            [],
            "o",
            markerfacecolor="white",
            markeredgecolor="grey",
            label="p(eos) = 0",
        )
    ax.set_yscale("log")
    ax.set_ylim(0.8, scores.shape[-1] * 1.5)
    ax.set_xlabel(r"$\alpha$ (1 = softmax, 2 = sparsemax)")
    ax.set_ylabel("support size (tokens with p > 0)")
    if title:
        ax.set_title(title, fontsize=10)
    if own_figure:
        # the contexts' labels are long: under the axes the figure keeps the
        # column's width (beside them it came out 8 % wider, and shrank)
        legend_below(ax)
    else:
        ax.legend(fontsize=9, **_RIGHT_LEGEND)
    return fig


def _rank_points(V: int, n: int = 1500) -> np.ndarray:
    """0-based ranks to draw on a log rank axis: every rank up to 300, then
    log-spaced."""
    dense = np.arange(min(V, 300))
    if V <= 300:
        return dense
    log_spaced = np.geomspace(300, V, n).round().astype(np.int64) - 1
    return np.unique(np.concatenate([dense, log_spaced]))


def _mark_eos_rank(ax, order, eos_id: int, p, soft) -> None:
    """The eos token on the rank plot: filled on the entmax curve when
    p(eos) > 0, open on the softmax curve when alpha-entmax gives it 0."""
    r = int((order == eos_id).nonzero()[0, 0])
    if p[r] > 0:
        ax.plot(
            r + 1,
            p[r],
            "o",
            color=COLORS["vermillion"],
            markersize=8,
            label=f"eos: p = {p[r]:.2g}",
        )
    else:
        ax.plot(
            r + 1,
            soft[r],
            "o",
            markerfacecolor="white",
            markeredgecolor=COLORS["vermillion"],
            markersize=8,
            markeredgewidth=2,
            label=f"eos: p = 0 (softmax {soft[r]:.1g})",
        )


def plot_entmax_ranks(
    scores,
    alpha: float,
    *,
    eos_id: int | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    ylim: tuple[float, float] | None = None,
) -> Figure:
    """Probability against rank, log-log, of alpha-entmax and of the softmax of
    one score vector.

    The tokens are ranked by score (the same order for every alpha, by
    Chapter 8's corollary "What the threshold implies": the support is a top
    set). The softmax (dotted) is dense; the alpha-entmax curve stops at its
    support size k, marked by a dashed vertical line. With ``eos_id`` the eos
    token is marked: filled on the entmax curve when p(eos) > 0, open on the
    softmax curve when alpha-entmax gives it exactly zero. Chapter 8
    (``08_sparse``).
    """
    scores = _check_scores(scores)
    if scores.shape[0] != 1:
        raise ValueError(
            f"plot_entmax_ranks draws one score vector, got {scores.shape[0]}"
        )
    (alpha,) = _check_alphas(alpha)
    z = scores[0]
    V = z.shape[0]
    if eos_id is not None:
        eos_id = check_index(eos_id, V, "eos_id")
    order = torch.argsort(z, descending=True, stable=True)
    soft = torch.softmax(z, dim=-1)[order].numpy()
    p = _entmax_probs(z, alpha)[order].numpy()
    k = int((p > 0).sum())
    fig, ax = _figure_and_axes(ax)
    shown = _rank_points(V)
    soft_shown = np.where(soft[shown] > 0, soft[shown], np.nan)
    ax.plot(
        shown + 1,
        soft_shown,
        ":",
        color=COLORS["black"],
        lw=1.6,
        label="softmax (α = 1)",
    )
    inside = shown[shown < k]
    ax.plot(
        inside + 1,
        p[inside],
        "-",
        color=COLORS["blue"],
        lw=2.2,
        label=f"{_format_number(alpha)}-entmax",
    )
    ax.axvline(k, color=COLORS["blue"], linestyle="--", lw=1)
    ax.text(
        k,
        1.0,
        f" {k:,} kept",
        color=COLORS["blue"],
        va="top",
        ha="left" if k < V**0.7 else "right",
        fontsize=9,
    )
    if eos_id is not None:
        _mark_eos_rank(ax, order, eos_id, p, soft)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.8, V * 1.3)
    floor = max(float(soft[soft > 0].min()), 1e-12)
    ax.set_ylim(*(ylim if ylim is not None else (floor / 2, 1.5)))
    ax.set_xlabel("rank of the token's score (1 = best)")
    ax.set_ylabel("probability")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=9, **_RIGHT_LEGEND)
    return fig


def _alpha_explorer(scores, alphas, eos_id, labels, initial_alpha) -> Explorer:
    """The alpha explorer's drawing function and controls, shared by
    :func:`entmax_alpha_explorer_html` and
    :func:`entmax_alpha_explorer_widget`."""
    scores = _check_scores(scores)
    alphas = _check_alphas(alphas)
    labels = _check_labels(labels, scores.shape[0])
    V = scores.shape[-1]
    if eos_id is not None:
        eos_id = check_index(eos_id, V, "eos_id")
    soft = torch.softmax(scores, dim=-1)
    floor = max(float(soft[soft > 0].min()), 1e-12)
    start = 0
    if initial_alpha is not None and float(initial_alpha) in alphas:
        start = alphas.index(float(initial_alpha))
    rows = {label: i for i, label in enumerate(labels)}
    controls = (
        Control("context", labels, label="context", kind="dropdown"),
        Control("alpha", alphas, label="α", initial=start),
    )

    def draw(context, alpha):
        z = scores[rows[context]]
        p = _entmax_probs(z, alpha)
        k = int((p > 0).sum())
        if eos_id is None:
            where = ""
        elif p[eos_id] > 0:
            where = "; eos in the support"
        else:
            where = "; p(eos) = 0"
        title = (
            f"{context}, α = {_format_number(alpha)}: "
            f"{k:,} of {V:,} tokens{where}"
        )
        return plot_entmax_ranks(
            z, alpha, eos_id=eos_id, title=title, ylim=(floor / 2, 1.5)
        )

    alt = (
        "probability against rank (log-log) of the softmax and of "
        "alpha-entmax of one next-token score vector; the entmax curve stops "
        "at its support size, and the eos token is marked"
    )
    return Explorer(draw, controls, alt)


def entmax_alpha_explorer_html(
    scores,
    alphas: Sequence[float],
    *,
    eos_id: int | None = None,
    labels: Sequence[str] | None = None,
    initial_alpha: float | None = None,
    dpi: int = FIGURE_DPI,
):
    """The alpha explorer of Chapter 8 (``08_sparse``) for the static website.

    A menu picks a score vector (one row of ``scores`` per context, labelled
    by ``labels``), a slider picks alpha; every combination is drawn once by
    :func:`plot_entmax_ranks` on the same axes and embedded as a PNG frame
    (:func:`~nmst_lib.plots.explorers.explorer_html`), so the controls work
    without a kernel. The frame's title gives the support size and whether eos
    is in it. The live twin is :func:`entmax_alpha_explorer_widget`.
    """
    explorer = _alpha_explorer(scores, alphas, eos_id, labels, initial_alpha)
    return explorer.html(dpi=dpi)


def entmax_alpha_explorer_widget(
    scores,
    alphas: Sequence[float],
    *,
    eos_id: int | None = None,
    labels: Sequence[str] | None = None,
    initial_alpha: float | None = None,
):
    """:func:`entmax_alpha_explorer_html` for a live kernel: the same menu and
    slider as an ``ipywidgets.interactive``.

    Takes the same score vectors and draws the same frames with
    :func:`plot_entmax_ranks`, on demand
    (:func:`~nmst_lib.plots.explorers.explorer_widget`). Chapter 8
    (``08_sparse``).
    """
    explorer = _alpha_explorer(scores, alphas, eos_id, labels, initial_alpha)
    return explorer.widget()
