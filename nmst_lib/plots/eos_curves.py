"""The eos-probability figure and explorer of Chapters 4 and 5
(``04_self_terminating``, ``05_nmst``).

p(eos | t) of the vanilla (VA), self-terminating (ST; Welleck et al. 2020,
Def. 4.3) and non-monotonic self-terminating (NMST; Choi, Cho, Lee 2023,
Def. 6, eq. 10) output layers for one trajectory of the eos mixing weight
lambda(t), with the lower bound f_lb(t) = 1 - (1 - eps)^t and the real number
beta_eps = -log 2 / log(1 - eps) after which f_lb > 1/2, so that from the
half-life step t_{1/2} = floor(beta_eps) + 1 on eos is the most probable
token (Welleck et al. 2020, proof of Thm. 4.2; Chapter 4, Lemma "The
half-life of the lower bound").

The numbers come from the library, so the figure shows exactly what it
computes: the trajectories and probabilities from
:func:`nmst_lib.theory.eos_trajectory` and
:func:`nmst_lib.theory.eos_probabilities` (built on :mod:`nmst_lib.heads`),
the half-life from :func:`nmst_lib.theory.half_life_bound`. One drawing
function, :func:`plot_eos_probabilities`, is behind the kernel-free
:func:`eos_explorer_html` (the website's explorer in both chapters) and the
live :func:`eos_explorer_widget`.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from .._validation import check_eps
from ..heads import eos_lower_bound
from ..report import and_list
from ..theory import (
    EOS_SHAPES,
    eos_probabilities,
    eos_trajectory,
    first_step_eos_above_half,
    half_life_bound,
)
from ..theory.eos_shapes import (
    _HEADS,
    _check_heads,
    _check_probability,
    _check_shape,
)
from .explorers import Control, Explorer
from .style import (
    COLORS,
    FIGURE_DPI,
    HEAD_STYLES,
    _figure_and_axes,
    _format_number,
)

# in reading order: the API page (book/api.md) lists them so
__all__ = [  # noqa: RUF022
    "plot_eos_probabilities",
    "eos_explorer_html",
    "eos_explorer_widget",
]

_SHAPE_NAMES = {
    "one_stop": "may stop once",
    "remark1": "Remark 1",
    "fading": "fading",
}
_T_LABEL = "step t (tokens)"
_EXPLORER_EPS = (1e-5, 1e-4, 1e-3, 1e-2)
_EXPLORER_AMPLITUDES = (0.2, 0.5, 0.9)
_HEAD_LABELS = {
    "VA": r"VA: $\lambda(t)$",
    "ST": "ST",
    "NMST": r"NMST: $(1-\lambda)f_{lb} + \lambda$",
}
# the dotted VA line stays visible where curves coincide
_ON_TOP = {"VA": 4, "ST": 3, "NMST": 2}


def _plot_steps(
    t_max: int, dense_until: int = 1000, n_log: int = 1500
) -> np.ndarray:
    """Integer steps to draw: every step up to ``dense_until`` (narrow bumps
    stay visible), then log-spaced steps up to ``t_max``."""
    dense = np.arange(1, min(t_max, dense_until) + 1)
    if t_max <= dense_until:
        return dense
    log_spaced = np.geomspace(dense_until, t_max, n_log)
    sparse = np.unique(log_spaced.round().astype(np.int64))
    return np.unique(np.concatenate([dense, sparse]))


def _mark_half_life(ax, eps: float, t_max: int) -> None:
    """A vertical line at beta_eps, labelled with beta_eps and t_{1/2}."""
    beta = half_life_bound(eps)
    if beta > t_max:
        return
    ax.axvline(beta, color=COLORS["sky_blue"], linewidth=1.2)
    label = (
        rf"$\beta_\epsilon$ = {beta:,.1f}"
        + "\n"
        + rf"$t_{{1/2}}$ = {first_step_eos_above_half(eps):,}"
    )
    ax.annotate(
        label,
        xy=(beta, 0.62),
        xycoords=("data", "axes fraction"),
        xytext=(-4, 0),
        textcoords="offset points",
        ha="right",
        va="center",
        fontsize=9,
        bbox={
            "boxstyle": "round,pad=0.2",
            "facecolor": "white",
            "edgecolor": "none",
            "alpha": 0.85,
        },
    )


def _draw_lower_bound(ax, steps: np.ndarray, eps: float) -> None:
    """f_lb(t) = 1 - (1 - eps)^t, dash-dotted in black."""
    f_lb = eos_lower_bound(torch.from_numpy(steps).double(), eps)
    ax.plot(
        steps,
        f_lb.numpy(),
        color=COLORS["black"],
        linewidth=1.0,
        linestyle="-.",
        label=r"$f_{lb}(t) = 1-(1-\epsilon)^t$",
    )


def _probability_axis(ax, yscale: str, lowest: float) -> None:
    """A linear axis from 0 to 1, or a log axis down to a third of
    ``lowest``."""
    if yscale == "log":
        ax.set_yscale("log")
        ax.set_ylim(lowest / 3, 1.5)
    else:
        ax.set_ylim(-0.02, 1.04)


def plot_eos_probabilities(
    eps: float = 1e-3,
    shape: str = "one_stop",
    amplitude: float = 0.5,
    *,
    heads: Sequence[str] = _HEADS,
    t_max: int = 10**6,
    t0: int = 5,
    t1: int = 12,
    baseline: float = 1e-3,
    yscale: str = "linear",
    show_lower_bound: bool = True,
    show_half_life: bool = True,
    ax: plt.Axes | None = None,
) -> Figure:
    """Draw p(eos | t) of VA, ST and NMST against the step t (log axis) for one
    lambda(t) trajectory.

    The trajectory is :func:`~nmst_lib.theory.eos_trajectory` (``shape``,
    ``amplitude``, ``t0``, ``t1``, ``baseline``); the probabilities are
    :func:`~nmst_lib.theory.eos_probabilities`. Drawn in as well: the lower
    bound f_lb(t) = 1 - (1 - eps)^t of ST and NMST (Choi, Cho, Lee 2023,
    Fig. 1), and a vertical line at beta_eps = -log 2 / log(1 - eps)
    (:func:`nmst_lib.theory.half_life_bound`), where f_lb crosses 1/2,
    labelled with beta_eps and the half-life step t_{1/2} = floor(beta_eps) +
    1 (:func:`nmst_lib.theory.first_step_eos_above_half`), from which on eos
    is the most probable token of both self-terminating layers (Welleck et
    al. 2020, proof of Thm. 4.2; Choi, Cho, Lee 2023, proof of Thm. 3).

    This is the one drawing function behind :func:`eos_explorer_widget` and
    :func:`eos_explorer_html`. Returns the figure (drawn into ``ax`` when
    given). Chapters 4-5 (``04_self_terminating``, ``05_nmst``).
    """
    eps = check_eps(eps)
    heads = _check_heads(heads)
    if yscale not in ("linear", "log"):
        raise ValueError(f"yscale must be 'linear' or 'log', got {yscale!r}")
    z = eos_trajectory(
        t_max, shape, amplitude, t0=t0, t1=t1, baseline=baseline
    )
    steps = _plot_steps(t_max)
    probs = eos_probabilities(z, eps, heads, steps=torch.from_numpy(steps))
    fig, ax = _figure_and_axes(ax)

    if show_lower_bound:
        _draw_lower_bound(ax, steps, eps)
    for head in heads:
        ax.plot(
            steps,
            probs[head].cpu().numpy(),
            label=_HEAD_LABELS[head],
            zorder=_ON_TOP[head],
            **HEAD_STYLES[head],
        )
    if show_half_life:
        _mark_half_life(ax, eps, t_max)

    ax.set_xscale("log")
    ax.set_xlim(1, t_max)
    _probability_axis(ax, yscale, min(baseline, eps))
    ax.set_xlabel(_T_LABEL)
    ax.set_ylabel(r"$p(\mathrm{eos} \mid y_{<t}, x)$")
    ax.set_title(
        rf"$\epsilon$ = {_format_number(eps)};  "
        rf"$\lambda(t)$: {EOS_SHAPES[shape]}",
        fontsize=10,
    )
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    return fig


def _eos_explorer(
    eps_values, amplitudes, shapes, initial_eps, plot_kwargs
) -> Explorer:
    """The eos-probability explorer's drawing function and controls (a menu
    for lambda(t), sliders for eps and the amplitude), shared by
    :func:`eos_explorer_html` and :func:`eos_explorer_widget`."""
    eps_values = tuple(check_eps(e) for e in eps_values)
    amplitudes = tuple(_check_probability(a, "amplitude") for a in amplitudes)
    shapes = tuple(_check_shape(s) for s in shapes)
    if not eps_values or not amplitudes or not shapes:
        raise ValueError(
            "eps_values, amplitudes and shapes must each hold at least "
            "one value"
        )
    eps_start = (
        eps_values.index(initial_eps) if initial_eps in eps_values else 0
    )
    controls = (
        Control(
            "shape",
            shapes,
            label="λ(t)",
            kind="dropdown",
            shown=tuple(_SHAPE_NAMES[s] for s in shapes),
        ),
        Control("eps", eps_values, label="ε", initial=eps_start),
        Control(
            "amplitude",
            amplitudes,
            label="amplitude",
            initial=min(1, len(amplitudes) - 1),
        ),
    )

    def draw(shape, eps, amplitude):
        return plot_eos_probabilities(eps, shape, amplitude, **plot_kwargs)

    heads = _check_heads(plot_kwargs.get("heads", _HEADS))
    alt = (
        f"p(eos | t) of the {and_list(heads)} output "
        f"layer{'s' if len(heads) > 1 else ''} against the step t on a log "
        "axis, with the lower bound f_lb(t) and a vertical line where it "
        "crosses one half (beta_eps; the half-life step t_1/2 is the next "
        "integer)"
    )
    return Explorer(draw, controls, alt)


def eos_explorer_html(
    eps_values: Sequence[float] = _EXPLORER_EPS,
    amplitudes: Sequence[float] = _EXPLORER_AMPLITUDES,
    shapes: Sequence[str] = tuple(EOS_SHAPES),
    *,
    initial_eps: float | None = 1e-3,
    dpi: int = FIGURE_DPI,
    **plot_kwargs,
):
    """The eos-probability explorer for the static website: sliders for eps and
    amplitude, a menu for lambda(t).

    Every combination of ``eps_values`` x ``amplitudes`` x ``shapes`` is
    drawn once with :func:`plot_eos_probabilities` (extra keyword arguments
    go to it) and embedded as a PNG frame (see
    :func:`~nmst_lib.plots.explorers.explorer_html`): moving a slider on the
    built page switches the figure without a kernel. The live-kernel twin is
    :func:`eos_explorer_widget`. Chapters 4-5 (``04_self_terminating``,
    ``05_nmst``).
    """
    explorer = _eos_explorer(
        eps_values, amplitudes, shapes, initial_eps, plot_kwargs
    )
    return explorer.html(dpi=dpi)


def eos_explorer_widget(
    eps_values: Sequence[float] = _EXPLORER_EPS,
    amplitudes: Sequence[float] = _EXPLORER_AMPLITUDES,
    shapes: Sequence[str] = tuple(EOS_SHAPES),
    *,
    initial_eps: float | None = 1e-3,
    **plot_kwargs,
):
    """The eos-probability explorer as an ``ipywidgets.interactive`` for a live
    kernel (Colab, Jupyter).

    Same drawing function (:func:`plot_eos_probabilities`) and same controls
    as :func:`eos_explorer_html`
    (:func:`~nmst_lib.plots.explorers.explorer_widget`); here every move of a
    control redraws the figure in the kernel. Returns the ``interactive``
    widget (display it, or make it the last expression of a cell). Chapters 4-5
    (``04_self_terminating``, ``05_nmst``).
    """
    explorer = _eos_explorer(
        eps_values, amplitudes, shapes, initial_eps, plot_kwargs
    )
    return explorer.widget()
