"""Figures of the book: static matplotlib plots and explorers that stay interactive offline.

Two kinds of figures live here.

* **The eos-probability explorer** (Chapters 4 and 5, ``04_self_terminating`` and
  ``05_nmst``): p(eos | t) of the vanilla (VA), self-terminating (ST; Welleck et al. 2020,
  Def. 4.3) and non-monotonic self-terminating (NMST; Choi, Cho, Lee 2023, Def. 6, eq. 10)
  output layers for one trajectory of the eos mixing weight lambda(t), with the lower bound
  f_lb(t) = 1 - (1 - eps)^t and the real number beta_eps = -log 2 / log(1 - eps) after which
  f_lb > 1/2, so that from the half-life step t_{1/2} = floor(beta_eps) + 1 on eos is the most
  probable token (Welleck et al. 2020, proof of Thm. 4.2; Chapter 4, Lemma "The half-life of
  the lower bound"). The probabilities come from
  :mod:`nmst_lib.heads`, so the figure shows exactly what the library computes.
* **r_nt(L) curves** (Chapter 2, ``02_consistency``, and Chapter 6, ``06_wikitext``):
  the non-termination ratio of Choi, Cho, Lee (2023), eq. 11, on log-log axes.
* **GPT-2's stored results** (Chapter 7, ``07_gpt2``): p(eos | t) along validation lines
  with the tokens on the x axis (Choi, Cho, Lee 2023, Figs. 3 and 6), the eps trade-off of
  perplexity and r_nt (their Fig. 5) and length histograms (Welleck et al. 2020, Fig. 4).

Every interactive figure has two front-ends built on ONE drawing function: an
``ipywidgets`` version for a live kernel (Colab, Jupyter) and a self-contained HTML version
for the static website, where every setting of the controls was rendered in advance to a PNG
frame and a few lines of JavaScript switch frames when a slider or menu moves (no kernel, no
network). Colours are the colour-blind-safe palette of Okabe and Ito (2008).
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import math
import numbers
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from ._validation import check_eps, check_index, check_positive_int
from .heads import eos_lower_bound, nmst_eos_log_probs, st_eos_log_probs, vanilla_log_probs
from .theory import first_step_eos_above_half, half_life_bound

__all__ = [
    "COLORS",
    "Palette",
    "HEAD_STYLES",
    "EOS_SHAPES",
    "Control",
    "use_book_style",
    "COLUMN_WIDTH",
    "FIGURE_DPI",
    "column_figure",
    "eos_trajectory",
    "eos_probabilities",
    "plot_eos_probabilities",
    "eos_explorer_widget",
    "eos_explorer_html",
    "rnt_plot",
    "legend_below",
    "rnt_explorer_html",
    "STEP_AXIS_LABEL",
    "model_style",
    "history_plot",
    "length_cdf_plot",
    "eos_trace_plot",
    "shared_legend",
    "explorer_html",
    "support_size_plot",
    "plot_entmax_ranks",
    "entmax_alpha_explorer_html",
    "SENTENCE_END_CHARS",
    "eos_token_plot",
    "eos_token_explorer_html",
    "eps_tradeoff_plot",
    "length_histogram_plot",
]

class Palette(tuple):
    """An ordered tuple of colours that can also be indexed by name: ``COLORS[0]`` or ``COLORS["blue"]``.

    Iterating or indexing by position gives the colours in the order the book cycles through
    them; the dict ``names`` maps each name to its colour. Every chapter's figures use
    :data:`COLORS` (Chapter 1, ``01_decoding``, onwards).
    """

    def __new__(cls, named: Mapping[str, str]):
        palette = super().__new__(cls, named.values())
        palette.names = dict(named)
        return palette

    def __getitem__(self, key):
        if isinstance(key, str):
            try:
                return self.names[key]
            except KeyError:
                raise KeyError(f"no colour named {key!r}; the palette has {list(self.names)}") from None
        return super().__getitem__(key)


#: The Okabe-Ito palette (Okabe and Ito 2008), distinguishable with every common form of
#: colour blindness; the book's only colours, in the order figures cycle through them.
#: Index by position (``COLORS[0]``) or by name (``COLORS["vermillion"]``).
COLORS = Palette(
    {
        "blue": "#0072B2",
        "vermillion": "#D55E00",
        "green": "#009E73",
        "purple": "#CC79A7",
        "orange": "#E69F00",
        "sky_blue": "#56B4E9",
        "black": "#000000",
        "yellow": "#F0E442",
    }
)

#: Colour and line style of each output layer, used by every figure that compares them
#: (VA dotted, ST dashed, NMST solid, as in Choi, Cho, Lee 2023, Fig. 2).
HEAD_STYLES: dict[str, dict[str, object]] = {
    "VA": {"color": COLORS["vermillion"], "linestyle": ":", "linewidth": 2.2},
    "ST": {"color": COLORS["blue"], "linestyle": "--", "linewidth": 2.0},
    "NMST": {"color": COLORS["green"], "linestyle": "-", "linewidth": 2.0},
}

_CYCLE = list(COLORS[:7])  # yellow is too light for lines on white
_LINESTYLES = ["-", "--", ":", "-."]

#: Trajectories of lambda(t) offered by :func:`eos_trajectory`, with their descriptions.
EOS_SHAPES: dict[str, str] = {
    "one_stop": "could end once (t = t0), never again",
    "remark1": "Remark 1: may end at t0 (p = amplitude), must end at t1",
    "fading": "fading: lambda(t) = amplitude * t0 / (t0 + t)",
}

_SHAPE_NAMES = {"one_stop": "may stop once", "remark1": "Remark 1", "fading": "fading"}
_HEADS = ("VA", "ST", "NMST")
_T_LABEL = "step t (tokens)"
_L_LABEL = "maximal length L (generated tokens)"


#: Width of the book's text column in inches: figures are drawn at this width and
#: :data:`FIGURE_DPI`, i.e. 670 pixels, the width the website's column shows them at
#: (672 CSS px at a 1,280 px window), so their text is printed at the size it was set in.
COLUMN_WIDTH = 6.7
#: Resolution of every figure of the book (inline PNGs and explorer frames).
FIGURE_DPI = 100


def use_book_style() -> None:
    """Set matplotlib's defaults to the book's style: Okabe-Ito colours, light grids, no top/right spines.

    Figures are :data:`COLUMN_WIDTH` inches wide at :data:`FIGURE_DPI` (the width of the
    website's text column) with 10-point text, so nothing is shrunk on the page. Called by
    :func:`nmst_lib.notebook.setup_notebook` in the first cell of every chapter (Chapter 1,
    ``01_decoding``, onwards).
    """
    matplotlib.rcParams.update(
        {
            "axes.prop_cycle": matplotlib.cycler(color=_CYCLE),
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "figure.figsize": (COLUMN_WIDTH, 3.4),
            "figure.dpi": FIGURE_DPI,
            "savefig.dpi": FIGURE_DPI,
            "savefig.bbox": "tight",
            "font.size": 10,
            "legend.frameon": False,
        }
    )


def column_figure(nrows: int = 1, ncols: int = 1, *, panel_height: float = 2.9, legend_width: float = 0.0,
                  **subplots):
    """A figure one text column wide: ``nrows`` x ``ncols`` panels, each ``panel_height`` inches tall.

    The book's figures are drawn at the width the page shows them (:data:`COLUMN_WIDTH`), so a
    figure with several panels stacks them in rows of at most two rather than shrinking a long
    row. A legend placed outside the axes on the right widens the saved figure (the book saves
    with a tight bounding box): ``legend_width`` inches are then taken off the figure's width so
    that figure and legend together still fit the column. Extra keyword arguments go to
    :func:`matplotlib.pyplot.subplots` (``sharey``, ``squeeze``, ...). Returns ``(fig, axes)``
    as ``plt.subplots`` does.

    Raises:
        ValueError: ``nrows`` or ``ncols`` is not a positive integer, ``ncols`` > 2 (a panel
            narrower than half the column cannot be read), ``panel_height`` is not positive, or
            ``legend_width`` is outside [0, COLUMN_WIDTH / 2].
    """
    nrows = check_positive_int(nrows, "nrows")
    ncols = check_positive_int(ncols, "ncols")
    if ncols > 2:
        raise ValueError(f"ncols={ncols}: at most 2 panels fit side by side in the column; "
                         f"stack the rest in more rows")
    if not isinstance(panel_height, numbers.Real) or not panel_height > 0:
        raise ValueError(f"panel_height must be a positive number of inches, got {panel_height!r}")
    if "figsize" in subplots:
        raise ValueError("column_figure sets figsize itself (COLUMN_WIDTH wide); pass panel_height instead")
    return plt.subplots(nrows, ncols, figsize=(COLUMN_WIDTH - legend_width, panel_height * nrows), **subplots)


# ---------------------------------------------------------------------------------------
# The eos probability of VA, ST and NMST along one trajectory (Chapters 4-5)
# ---------------------------------------------------------------------------------------


def _check_probability(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number in (0, 1), got {type(value).__name__}")
    value = float(value)
    if not (0.0 < value < 1.0):
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return value


def _check_shape(shape) -> str:
    if shape not in EOS_SHAPES:
        raise ValueError(f"shape must be one of {sorted(EOS_SHAPES)}, got {shape!r}")
    return shape


def _logit(p: torch.Tensor) -> torch.Tensor:
    """log(p) - log(1 - p), exact for p near 0 and near 1."""
    return torch.log(p) - torch.log1p(-p)


def eos_trajectory(
    t_max: int,
    shape: str = "one_stop",
    amplitude: float = 0.5,
    *,
    t0: int = 5,
    t1: int = 12,
    baseline: float = 1e-3,
) -> torch.Tensor:
    """The eos logit z_t = logit(lambda(t)) for t = 1, ..., t_max along a named trajectory.

    lambda(t) is the NMST mixing weight sigma(u_eos . h_t) of Choi, Cho, Lee (2023), Def. 6
    (eq. 10, Fig. 1): how much the model itself wants to stop at step t. The trajectories
    (``shape``) are:

    * ``"one_stop"``: lambda = ``amplitude`` at t = t0 (the text could end there, e.g. after
      "I am a boy") and ``baseline`` everywhere else: the model never wants to stop again.
    * ``"remark1"``: the optimal trajectory of Choi, Cho, Lee (2023), Remark 1 (with the
      probabilities kept inside (0, 1)): ``amplitude`` at t0 where the shorter training
      sequence ends, ``baseline`` until t1 where the longer one ends, 1 - ``baseline`` from
      t1 on. Non-monotone.
    * ``"fading"``: lambda(t) = amplitude * t0 / (t0 + t), a model that grows ever less
      willing to stop (p(eos) -> 0, like the inconsistent RNN of Welleck et al. 2020, Thm. 3.4).

    Returns a float64 tensor of shape ``[t_max]`` (entry ``t - 1`` is step t), exact in log
    space. Chapters 4-5 (``04_self_terminating``, ``05_nmst``).
    """
    t_max = check_positive_int(t_max, "t_max")
    shape = _check_shape(shape)
    amplitude = _check_probability(amplitude, "amplitude")
    baseline = _check_probability(baseline, "baseline")
    t0 = check_positive_int(t0, "t0")
    t1 = check_positive_int(t1, "t1")
    if shape == "remark1" and not t0 < t1:
        raise ValueError(f"the Remark 1 trajectory needs t0 < t1, got t0={t0}, t1={t1}")
    t = torch.arange(1, t_max + 1, dtype=torch.float64)
    lam = torch.full_like(t, baseline)
    if shape == "one_stop":
        lam[t == t0] = amplitude
    elif shape == "remark1":
        lam[t == t0] = amplitude
        lam[t >= t1] = 1.0 - baseline
    else:  # fading
        lam = amplitude * t0 / (t0 + t)
    return _logit(lam)


def eos_probabilities(
    eos_logits: torch.Tensor,
    eps: float,
    heads: Sequence[str] = _HEADS,
    steps: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """p(eos | t) of the VA, ST and NMST output layers for one eos-logit trajectory z_1, ..., z_T.

    The vocabulary is reduced to eos and one competing token of logit 0, which loses nothing:
    every layer below gives eos a probability that depends only on the eos logit and (for VA)
    the log-sum-exp of the other logits. With lambda(t) = sigma(z_t):

    * VA (softmax): p = sigma(z_t) = lambda(t).
    * NMST (Choi, Cho, Lee 2023, Def. 6, eq. 10): p = (1 - lambda(t)) f_lb(t) + lambda(t),
      with f_lb(t) = 1 - (1 - eps)^t; computed by :func:`nmst_lib.heads.nmst_eos_log_probs`.
    * ST (Welleck et al. 2020, Def. 4.3): p = 1 - prod_{s <= t} (1 - eps) sigma(u_eos . h_s).
      ST's sigmoid is a probability of *continuing*, so ST is given the negated logit -z_t:
      both self-terminating layers then receive the same per-step wish to stop lambda(t), and
      ST's p(eos) becomes 1 - prod_{s <= t} (1 - eps)(1 - lambda(s)), which can never decrease.
      Computed by :func:`nmst_lib.heads.st_eos_log_probs`.

    Args:
        eos_logits: float tensor ``[T]``, entry ``t - 1`` is z_t (e.g. :func:`eos_trajectory`).
        eps: the lower-bound rate in (0, 1).
        heads: which of ``"VA"``, ``"ST"``, ``"NMST"`` to compute.
        steps: optional increasing integer tensor of steps in ``[1, T]`` at which to return the
            probabilities (a figure needs a few thousand of a million steps). VA and NMST are
            then evaluated only there; ST still accumulates over every step.

    Returns:
        ``{head: float64 tensor [T]}`` (or ``[len(steps)]``) of probabilities, on the device
        of ``eos_logits``.
        Chapters 4-5 (``04_self_terminating``, ``05_nmst``).
    """
    eps = check_eps(eps)
    if not isinstance(eos_logits, torch.Tensor) or not eos_logits.is_floating_point() or eos_logits.dim() != 1:
        raise TypeError("eos_logits must be a 1-D floating-point torch.Tensor [T] (entry t-1 is step t)")
    heads = _check_heads(heads)
    z = eos_logits.to(torch.float64)
    T = z.shape[0]
    if steps is None:
        steps = torch.arange(1, T + 1, device=z.device)
    elif (not isinstance(steps, torch.Tensor) or steps.dim() != 1 or steps.is_floating_point()
          or steps.numel() == 0 or bool((steps < 1).any()) or bool((steps > T).any())
          or bool((torch.diff(steps) <= 0).any())):
        raise ValueError(f"steps must be a non-empty increasing 1-D integer tensor of steps in [1, {T}]")
    steps = steps.to(z.device)
    z_at = z[steps - 1]
    out: dict[str, torch.Tensor] = {}
    for head in heads:
        if head == "VA":  # eos against one token of logit 0
            log_p = vanilla_log_probs(torch.stack([torch.zeros_like(z_at), z_at], dim=-1))[..., 1]
        elif head == "NMST":
            log_p, _ = nmst_eos_log_probs(z_at, eps, t=steps)
        else:  # ST: its sigmoid is the probability of going on; it accumulates over every step
            log_p, _ = st_eos_log_probs(-z[: int(steps[-1])], eps)
            log_p = log_p[steps - 1]
        out[head] = log_p.exp()
    return out


def _check_heads(heads) -> tuple[str, ...]:
    if isinstance(heads, str) or not isinstance(heads, Sequence) or len(heads) == 0:
        raise TypeError(f"heads must be a non-empty sequence drawn from {_HEADS}, e.g. ('VA', 'NMST')")
    for head in heads:
        if head not in _HEADS:
            raise ValueError(f"unknown head {head!r}; allowed: {_HEADS}")
    return tuple(heads)


def _plot_steps(t_max: int, dense_until: int = 1000, n_log: int = 1500) -> np.ndarray:
    """Integer steps to draw: every step up to ``dense_until`` (narrow bumps stay visible),
    then log-spaced steps up to ``t_max``."""
    dense = np.arange(1, min(t_max, dense_until) + 1)
    if t_max <= dense_until:
        return dense
    sparse = np.unique(np.geomspace(dense_until, t_max, n_log).round().astype(np.int64))
    return np.unique(np.concatenate([dense, sparse]))


def _format_number(value) -> str:
    """1e-05 -> '1e-5', 0.5 -> '0.5', 'greedy' -> 'greedy'."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    value = float(value)
    if value != 0 and (abs(value) <= 1e-2 or abs(value) >= 1e5):
        mantissa, exponent = f"{value:.0e}".split("e")
        if float(mantissa) * 10 ** int(exponent) == value:
            return f"{mantissa}e{int(exponent)}"
        return f"{value:.3g}"
    return f"{value:g}"


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
    """Draw p(eos | t) of VA, ST and NMST against the step t (log axis) for one lambda(t) trajectory.

    The trajectory is :func:`eos_trajectory` (``shape``, ``amplitude``, ``t0``, ``t1``,
    ``baseline``); the probabilities are :func:`eos_probabilities`. Drawn in as well: the
    lower bound f_lb(t) = 1 - (1 - eps)^t of ST and NMST (Choi, Cho, Lee 2023, Fig. 1), and a
    vertical line at beta_eps = -log 2 / log(1 - eps) (:func:`nmst_lib.theory.half_life_bound`),
    where f_lb crosses 1/2, labelled with beta_eps and the half-life step t_{1/2} =
    floor(beta_eps) + 1 (:func:`nmst_lib.theory.first_step_eos_above_half`), from which on eos
    is the most probable token of both self-terminating layers (Welleck et al. 2020, proof of
    Thm. 4.2; Choi, Cho, Lee 2023, proof of Thm. 3).

    This is the one drawing function behind :func:`eos_explorer_widget` and
    :func:`eos_explorer_html`. Returns the figure (drawn into ``ax`` when given).
    Chapters 4-5 (``04_self_terminating``, ``05_nmst``).
    """
    eps = check_eps(eps)
    heads = _check_heads(heads)
    if yscale not in ("linear", "log"):
        raise ValueError(f"yscale must be 'linear' or 'log', got {yscale!r}")
    z = eos_trajectory(t_max, shape, amplitude, t0=t0, t1=t1, baseline=baseline)
    steps = _plot_steps(t_max)
    probs = eos_probabilities(z, eps, heads, steps=torch.from_numpy(steps))
    fig, ax = _figure_and_axes(ax)

    if show_lower_bound:
        f_lb = eos_lower_bound(torch.from_numpy(steps).double(), eps)
        ax.plot(steps, f_lb.numpy(), color=COLORS["black"], linewidth=1.0, linestyle="-.",
                label=r"$f_{lb}(t) = 1-(1-\epsilon)^t$")
    labels = {"VA": r"VA: $\lambda(t)$", "ST": "ST", "NMST": r"NMST: $(1-\lambda)f_{lb} + \lambda$"}
    on_top = {"VA": 4, "ST": 3, "NMST": 2}  # the dotted VA line stays visible where curves coincide
    for head in heads:
        ax.plot(steps, probs[head].cpu().numpy(), label=labels[head], zorder=on_top[head], **HEAD_STYLES[head])
    if show_half_life:
        beta = half_life_bound(eps)
        if beta <= t_max:
            ax.axvline(beta, color=COLORS["sky_blue"], linewidth=1.2)
            label = rf"$\beta_\epsilon$ = {beta:,.1f}" + "\n" + rf"$t_{{1/2}}$ = {first_step_eos_above_half(eps):,}"
            ax.annotate(label, xy=(beta, 0.62), xycoords=("data", "axes fraction"), xytext=(-4, 0),
                        textcoords="offset points", ha="right", va="center", fontsize=9,
                        bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})

    ax.set_xscale("log")
    ax.set_xlim(1, t_max)
    if yscale == "log":
        ax.set_yscale("log")
        ax.set_ylim(min(baseline, eps) / 3, 1.5)
    else:
        ax.set_ylim(-0.02, 1.04)
    ax.set_xlabel(_T_LABEL)
    ax.set_ylabel(r"$p(\mathrm{eos} \mid y_{<t}, x)$")
    ax.set_title(rf"$\epsilon$ = {_format_number(eps)};  $\lambda(t)$: {EOS_SHAPES[shape]}", fontsize=10)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    return fig


def _and_list(names) -> str:
    """("VA",) -> "VA"; ("VA", "ST") -> "VA and ST"; ("VA", "ST", "NMST") -> "VA, ST and NMST"."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _figure_and_axes(ax):
    """A new figure laid out for a legend on the right (fixed margins: no tight-bbox pass when
    an explorer renders dozens of frames), or the figure of ``ax``."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.4))
        fig.subplots_adjust(left=0.1, right=0.58, bottom=0.15, top=0.9)
    else:
        fig = ax.figure
    return fig, ax


# ---------------------------------------------------------------------------------------
# Static explorers: pre-rendered frames switched by JavaScript (no kernel, no network)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """One control of a static explorer: a slider (``kind="slider"``) or a menu (``kind="dropdown"``).

    ``values`` are passed to the drawing function under ``name``; ``label`` is shown next to the
    control; ``initial`` is the index shown first; ``shown`` (optional, one string per value)
    is what the reader sees for each value (default: the value, numbers written compactly).
    Used by :func:`explorer_html` (Chapters 2 and 4-6).
    """

    name: str
    values: tuple
    label: str = ""
    kind: str = "slider"
    initial: int = 0
    shown: tuple | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a control's name must be a Python identifier, got {self.name!r}")
        values = tuple(self.values)
        if len(values) == 0:
            raise ValueError(f"control {self.name!r} needs at least one value")
        object.__setattr__(self, "values", values)
        if self.kind not in ("slider", "dropdown"):
            raise ValueError(f"a control's kind must be 'slider' or 'dropdown', got {self.kind!r}")
        if isinstance(self.initial, bool) or not isinstance(self.initial, int) or not 0 <= self.initial < len(values):
            raise ValueError(f"initial must be an index into the {len(values)} values of {self.name!r}, got {self.initial!r}")
        if self.shown is None:
            object.__setattr__(self, "shown", tuple(_format_number(v) for v in values))
        else:
            shown = tuple(str(text) for text in self.shown)
            if len(shown) != len(values):
                raise ValueError(f"shown must give one text per value of {self.name!r} ({len(values)}), got {len(shown)}")
            object.__setattr__(self, "shown", shown)


def _png_data_uri(fig: Figure, dpi: int, colors: int = 64) -> str:
    """The figure as a base64 PNG, reduced to a palette of ``colors`` colours (line plots look
    the same and take a quarter of the bytes: pages embed dozens of frames)."""
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    buffer.seek(0)
    image = Image.open(buffer).convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
    small = io.BytesIO()
    image.save(small, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(small.getvalue()).decode("ascii")


def _control_html(index: int, control: Control) -> str:
    label = html.escape(control.label or control.name)
    shown = [html.escape(text) for text in control.shown]
    if control.kind == "slider":
        widget = (
            f'<input type="range" min="0" max="{len(control.values) - 1}" step="1" value="{control.initial}" '
            f'data-control="{index}" aria-label="{label}" style="vertical-align: middle; width: 10em;">'
            f' <output style="font-family: monospace; min-width: 4em; display: inline-block;">{shown[control.initial]}</output>'
        )
    else:
        options = "".join(
            f'<option value="{i}"{" selected" if i == control.initial else ""}>{text}</option>' for i, text in enumerate(shown)
        )
        widget = f'<select data-control="{index}" aria-label="{label}" style="max-width: 100%;">{options}</select>'
    # an inline block no wider than the column: on a phone a long menu wraps under its label
    return f'<label style="display: inline-block; max-width: 100%; margin-right: 1.5em;">{label} {widget}</label>'


_EXPLORER_JS = """
(function () {
  var root = document.getElementById("%(id)s");
  if (!root || root.getAttribute("data-ready")) { return; }
  root.setAttribute("data-ready", "1");
  var data = JSON.parse(root.querySelector("script.nmst-explorer-data").textContent);
  var image = root.querySelector("img.nmst-explorer-frame");
  var inputs = root.querySelectorAll("[data-control]");
  function update() {
    var index = 0;
    for (var i = 0; i < inputs.length; i++) {
      var c = parseInt(inputs[i].getAttribute("data-control"), 10);
      var v = parseInt(inputs[i].value, 10);
      index = index * data.sizes[c] + v;
      var out = inputs[i].parentNode.querySelector("output");
      if (out) { out.textContent = data.labels[c][v]; }
    }
    image.src = data.frames[index];
    image.setAttribute("data-frame", index);
  }
  for (var i = 0; i < inputs.length; i++) {
    inputs[i].addEventListener("input", update);
    inputs[i].addEventListener("change", update);
  }
  update();
})();
"""


def explorer_html(
    draw: Callable[..., Figure],
    controls: Sequence[Control],
    *,
    alt: str = "",
    caption: str = "",
    dpi: int = FIGURE_DPI,
):
    """A self-contained HTML figure with sliders and menus that works without a kernel.

    ``draw(**{c.name: value for c in controls})`` is called once for every combination of
    control values (row-major, the last control varying fastest); each figure is stored as a
    base64 PNG frame, and a few lines of plain JavaScript show the frame that matches the
    controls. Nothing is loaded from the network, so the page works offline, from ``file://``,
    in Jupyter, in Colab and on the book's static website (DESIGN.md: "figures that stay
    interactive without a kernel"). Returns an ``IPython.display.HTML`` object.

    Keep ``len(frames)`` = the product of the number of values modest (tens): every frame is
    embedded in the page. Behind :func:`eos_explorer_html` (Chapters 4-5) and
    :func:`rnt_explorer_html` (Chapters 2 and 6).
    """
    from IPython.display import HTML

    controls = list(controls)
    if not controls or not all(isinstance(c, Control) for c in controls):
        raise TypeError("controls must be a non-empty sequence of nmst_lib.plots.Control")
    if len({c.name for c in controls}) != len(controls):
        raise ValueError("control names must be distinct")
    if not callable(draw):
        raise TypeError("draw must be a function returning a matplotlib Figure")
    dpi = check_positive_int(dpi, "dpi", minimum=20)

    frames = []
    for combination in itertools.product(*(c.values for c in controls)):
        fig = draw(**{c.name: value for c, value in zip(controls, combination)})
        if not isinstance(fig, Figure):
            raise TypeError(f"draw must return a matplotlib Figure, got {type(fig).__name__}")
        frames.append(_png_data_uri(fig, dpi))
        plt.close(fig)

    initial = 0
    for c in controls:
        initial = initial * len(c.values) + c.initial
    explorer_id = "nmst-explorer-" + uuid.uuid4().hex[:12]
    data = {
        "sizes": [len(c.values) for c in controls],
        "labels": [list(c.shown) for c in controls],
        "frames": frames,
    }
    # <, > and & as JSON escapes: the page source then holds no raw "<unk>", "<eos>" or "</script>"
    # (JSON.parse gives the same strings back, and the script sets them with textContent).
    payload = json.dumps(data).replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    alt_text = html.escape(alt or "figure; move the controls above it to change it")
    caption_html = (f'<div class="nmst-explorer-caption" style="font-size: 0.9em;">{html.escape(caption)}</div>'
                    if caption else "")
    body = (
        f'<div class="nmst-explorer" id="{explorer_id}" data-frames="{len(frames)}" style="margin: 0.5em 0;">'
        f'<div class="nmst-explorer-controls" style="margin-bottom: 0.3em;">'
        + "".join(_control_html(i, c) for i, c in enumerate(controls))
        + "</div>"
        f'<img class="nmst-explorer-frame" src="{frames[initial]}" data-frame="{initial}" alt="{alt_text}" '
        f'style="max-width: 100%; height: auto;">'
        f"{caption_html}"
        f'<script type="application/json" class="nmst-explorer-data">{payload}</script>'
        f"<script>{_EXPLORER_JS % {'id': explorer_id}}</script>"
        "</div>"
    )
    return HTML(body)


_EXPLORER_EPS = (1e-5, 1e-4, 1e-3, 1e-2)
_EXPLORER_AMPLITUDES = (0.2, 0.5, 0.9)


def eos_explorer_html(
    eps_values: Sequence[float] = _EXPLORER_EPS,
    amplitudes: Sequence[float] = _EXPLORER_AMPLITUDES,
    shapes: Sequence[str] = tuple(EOS_SHAPES),
    *,
    initial_eps: float | None = 1e-3,
    dpi: int = FIGURE_DPI,
    **plot_kwargs,
):
    """The eos-probability explorer for the static website: sliders for eps and amplitude, a menu for lambda(t).

    Every combination of ``eps_values`` x ``amplitudes`` x ``shapes`` is drawn once with
    :func:`plot_eos_probabilities` (extra keyword arguments go to it) and embedded as a PNG
    frame (see :func:`explorer_html`): moving a slider on the built page switches the figure
    without a kernel. The live-kernel twin is :func:`eos_explorer_widget`.
    Chapters 4-5 (``04_self_terminating``, ``05_nmst``).
    """
    eps_values = tuple(check_eps(e) for e in eps_values)
    amplitudes = tuple(_check_probability(a, "amplitude") for a in amplitudes)
    shapes = tuple(_check_shape(s) for s in shapes)
    if not eps_values or not amplitudes or not shapes:
        raise ValueError("eps_values, amplitudes and shapes must each hold at least one value")
    eps_start = eps_values.index(initial_eps) if initial_eps in eps_values else 0
    controls = [
        Control("shape", shapes, label="λ(t)", kind="dropdown", shown=tuple(_SHAPE_NAMES[s] for s in shapes)),
        Control("eps", eps_values, label="ε", initial=eps_start),
        Control("amplitude", amplitudes, label="amplitude", initial=min(1, len(amplitudes) - 1)),
    ]

    def draw(shape, eps, amplitude):
        return plot_eos_probabilities(eps, shape, amplitude, **plot_kwargs)

    return explorer_html(
        draw,
        controls,
        dpi=dpi,
        alt=f"p(eos | t) of the {_and_list(_check_heads(plot_kwargs.get('heads', _HEADS)))} output "
        f"layer{'s' if len(_check_heads(plot_kwargs.get('heads', _HEADS))) > 1 else ''} against the step t on a log axis, "
        "with the lower bound f_lb(t) and a vertical line where it crosses one half (beta_eps; the half-life "
        "step t_1/2 is the next integer)",
    )


def eos_explorer_widget(
    eps_values: Sequence[float] = _EXPLORER_EPS,
    amplitudes: Sequence[float] = _EXPLORER_AMPLITUDES,
    shapes: Sequence[str] = tuple(EOS_SHAPES),
    **plot_kwargs,
):
    """The eos-probability explorer as an ``ipywidgets.interactive`` for a live kernel (Colab, Jupyter).

    Same drawing function (:func:`plot_eos_probabilities`) and same controls as
    :func:`eos_explorer_html`; here every move of a control redraws the figure in the kernel.
    Returns the ``interactive`` widget (display it, or make it the last expression of a cell).
    Chapters 4-5 (``04_self_terminating``, ``05_nmst``).
    """
    import ipywidgets as widgets
    from IPython.display import display

    eps_values = tuple(check_eps(e) for e in eps_values)
    amplitudes = tuple(_check_probability(a, "amplitude") for a in amplitudes)
    shapes = tuple(_check_shape(s) for s in shapes)

    def draw(shape, eps, amplitude):
        fig = plot_eos_probabilities(eps, shape, amplitude, **plot_kwargs)
        display(fig)
        plt.close(fig)

    eps_start = eps_values[eps_values.index(1e-3)] if 1e-3 in eps_values else eps_values[0]
    return widgets.interactive(
        draw,
        shape=widgets.Dropdown(options=[(_SHAPE_NAMES[s], s) for s in shapes], value=shapes[0], description="λ(t)"),
        eps=widgets.SelectionSlider(options=[(_format_number(e), e) for e in eps_values], value=eps_start, description="ε"),
        amplitude=widgets.SelectionSlider(
            options=[(_format_number(a), a) for a in amplitudes],
            value=amplitudes[min(1, len(amplitudes) - 1)],
            description="amplitude",
        ),
    )


# ---------------------------------------------------------------------------------------
# r_nt(L) curves (Chapters 2 and 6)
# ---------------------------------------------------------------------------------------


def _check_curve(label, curve) -> tuple[np.ndarray, np.ndarray]:
    try:
        Ls, rnt = curve
    except (TypeError, ValueError):
        raise TypeError(f"curve {label!r} must be a pair (Ls, rnt) of equal-length 1-D arrays") from None
    Ls = np.asarray(Ls.cpu() if isinstance(Ls, torch.Tensor) else Ls, dtype=np.float64)
    rnt = np.asarray(rnt.cpu() if isinstance(rnt, torch.Tensor) else rnt, dtype=np.float64)
    if Ls.ndim != 1 or rnt.shape != Ls.shape or Ls.size == 0:
        raise ValueError(f"curve {label!r}: Ls and rnt must be 1-D arrays of the same non-zero length, "
                         f"got shapes {Ls.shape} and {rnt.shape}")
    if not np.all(Ls >= 1) or not np.all(np.diff(Ls) > 0):
        raise ValueError(f"curve {label!r}: Ls must be increasing lengths >= 1")
    if not np.all((rnt >= 0) & (rnt <= 1)):
        raise ValueError(f"curve {label!r}: r_nt values are fractions and must lie in [0, 1]")
    return Ls, rnt


def _default_style(label: str, i: int) -> dict:
    head = str(label).split()[0].rstrip(":+,") if str(label).split() else ""
    if head in HEAD_STYLES:
        return dict(HEAD_STYLES[head])
    return {"color": _CYCLE[i % len(_CYCLE)], "linestyle": _LINESTYLES[(i // len(_CYCLE)) % len(_LINESTYLES)], "linewidth": 2.0}


def legend_below(ax, *, fontsize: float = 8.5):
    """Put the legend of ``ax`` under its x axis, in two columns when its labels are short, so
    the figure keeps the column's width (:data:`COLUMN_WIDTH`): a legend beside the axes widens
    a figure saved with a tight bounding box. For a figure that adds curves to one drawn by
    :func:`rnt_plot` (Chapters 3, 5 and 8 add their bounds). Returns the legend."""
    labels = ax.get_legend_handles_labels()[1]
    two_columns = len(labels) > 3 and max(len(label) for label in labels) <= 38
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2 if two_columns else 1,
                     fontsize=fontsize)


def rnt_plot(
    curves: Mapping[str, tuple],
    *,
    ax: plt.Axes | None = None,
    title: str | None = None,
    styles: Mapping[str, Mapping] | None = None,
    xlim: tuple[float, float] | None = None,
    ylim: tuple[float, float] | None = None,
    y_floor: float = 1e-6,
) -> Figure:
    """Log-log plot of non-termination ratios r_nt(L) against the maximal length L.

    r_nt(L) is the fraction of contexts whose continuation has no eos among its first L
    tokens (Choi, Cho, Lee 2023, eq. 11; Welleck et al. 2020's r_L), e.g. from
    :func:`nmst_lib.metrics.rnt_curve` or the exact :mod:`nmst_lib.markov` curves. A consistent
    decoder's curve falls to 0 as L grows; an inconsistent one levels off above 0 (Choi, Cho,
    Lee 2023, Fig. 2). Zeros cannot be drawn on a log axis: a curve that reaches 0 stops there
    and its legend entry says from which L on it is 0.

    Args:
        curves: ``{label: (Ls, rnt)}``; labels starting with VA, ST or NMST get that output
            layer's colour and line style (:data:`HEAD_STYLES`).
        styles: optional matplotlib keyword arguments per label.
        xlim, ylim: fixed axis limits (the explorers use them to keep frames comparable).
        y_floor: the lowest r_nt the default y axis shows (exact curves of Markov models can
            fall to 1e-300; with N contexts an estimate is 0 or at least 1/N).

    Chapters 2 and 6 (``02_consistency``, ``06_wikitext``).
    """
    if not isinstance(curves, Mapping) or len(curves) == 0:
        raise TypeError("curves must be a non-empty mapping {label: (Ls, rnt)}")
    styles = dict(styles or {})
    own_figure = ax is None
    fig, ax = _figure_and_axes(ax)
    lowest = 1.0
    for i, (label, curve) in enumerate(curves.items()):
        Ls, rnt = _check_curve(label, curve)
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        zero = np.flatnonzero(rnt == 0)
        shown = f"{label} (0 from L = {Ls[zero[0]]:,.0f})" if zero.size else str(label)
        positive = np.where(rnt > 0, rnt, np.nan)
        if np.any(rnt > 0):
            lowest = min(lowest, float(np.nanmin(positive)))
        ax.plot(Ls, positive, label=shown, **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_L_LABEL)
    ax.set_ylabel(r"$r_{nt}(L)$ (fraction not terminated)")
    if xlim is not None:
        ax.set_xlim(*xlim)
    ax.set_ylim(*(ylim if ylim is not None else (max(min(lowest, 1.0) / 2, y_floor), 1.5)))
    if title:
        ax.set_title(title, fontsize=10)
    if own_figure:
        # A figure of its own keeps the column's width: its legend goes under the axes (the
        # labels of Chapter 8's models are long), never beside them where it would widen the figure.
        fig.subplots_adjust(right=0.97)
        legend_below(ax)
    else:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    return fig


def rnt_explorer_html(
    curves_by_key: Mapping,
    *,
    control_names: Sequence[str] | None = None,
    title: str | None = None,
    dpi: int = FIGURE_DPI,
    y_floor: float = 1e-6,
):
    """r_nt(L) curves for many settings on the static website: menus or sliders pick the setting.

    Args:
        curves_by_key: ``{key: {label: (Ls, rnt)}}``. A key is one value or a tuple of values,
            one per control (e.g. ``("LSTM", "NMST", 1e-4)`` for architecture, output layer and
            eps). Each control offers its values in order of first appearance; numeric controls
            are sliders, the others menus. A combination without curves shows an empty frame
            that says so.
        control_names: the label of each key position (default ``"setting"`` or
            ``"setting 1"``, ``"setting 2"``, ...).
        title: shown above every frame, followed by the selected setting.
        y_floor: the lowest r_nt shown (see :func:`rnt_plot`).

    Every frame is drawn by :func:`rnt_plot` on the same axes limits, so frames compare at a
    glance (see :func:`explorer_html`). Chapters 2 and 6 (``02_consistency``, ``06_wikitext``).
    """
    if not isinstance(curves_by_key, Mapping) or len(curves_by_key) == 0:
        raise TypeError("curves_by_key must be a non-empty mapping {key: {label: (Ls, rnt)}}")
    keys = [k if isinstance(k, tuple) else (k,) for k in curves_by_key]
    width = len(keys[0])
    if width == 0 or any(len(k) != width for k in keys):
        raise ValueError("all keys of curves_by_key must have the same number of parts")
    table = {k if isinstance(k, tuple) else (k,): v for k, v in curves_by_key.items()}
    if control_names is None:
        control_names = ["setting"] if width == 1 else [f"setting {i + 1}" for i in range(width)]
    control_names = [str(n) for n in control_names]
    if len(control_names) != width:
        raise ValueError(f"control_names must name each of the {width} parts of a key, got {len(control_names)}")

    values = [list(dict.fromkeys(k[i] for k in keys)) for i in range(width)]
    all_L, all_r = [], []
    for key, curves in table.items():
        if not isinstance(curves, Mapping) or len(curves) == 0:
            raise TypeError(f"curves_by_key[{key!r}] must be a non-empty mapping {{label: (Ls, rnt)}}")
        for label, curve in curves.items():
            Ls, rnt = _check_curve(label, curve)
            all_L.append(Ls)
            all_r.append(rnt[rnt > 0])
    L_all = np.concatenate(all_L)
    r_all = np.concatenate(all_r)
    xlim = (float(L_all.min()), float(L_all.max()) * 1.05)
    ylim = (max((float(r_all.min()) if r_all.size else 1e-3) / 2, y_floor), 1.5)

    def is_numeric(vs):
        return all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in vs)

    controls = [
        Control(f"part{i}", tuple(values[i]), label=control_names[i],
                kind="slider" if is_numeric(values[i]) and len(values[i]) > 1 else "dropdown")
        for i in range(width)
    ]

    def draw(**parts):
        key = tuple(parts[f"part{i}"] for i in range(width))
        setting = ", ".join(f"{n} = {_format_number(v)}" for n, v in zip(control_names, key))
        full_title = f"{title}: {setting}" if title else setting
        if key not in table:
            fig, ax = _figure_and_axes(None)
            ax.text(0.5, 0.5, "no result for this combination", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            ax.set_title(full_title, fontsize=10)
            return fig
        return rnt_plot(table[key], title=full_title, xlim=xlim, ylim=ylim)

    return explorer_html(draw, controls, dpi=dpi,
                         alt="non-termination ratio r_nt(L) against the maximal length L, log-log axes")


# ---------------------------------------------------------------------------------------
# Figures of stored experiments (Chapter 6 and the later experiment chapters)
# ---------------------------------------------------------------------------------------

#: Axis label of a step axis along a real line (the book's step convention, DESIGN.md): step t
#: counts continuation tokens, t = 1 predicts the first token after the context, and the tick
#: of step t is labelled with the token y_t being predicted (Chapter 6, ``06_wikitext``).
STEP_AXIS_LABEL = "step t (token being predicted)"


def model_style(head: str, eps=None, eps_grid: Sequence[float] = ()) -> dict:
    """Line style of one trained model: its output layer's colour and dash
    (:data:`HEAD_STYLES`: VA dotted, ST dashed, NMST solid), drawn thicker and more opaque the
    larger its eps is within ``eps_grid``, so that one layer at several eps stays readable in
    one plot. Chapter 6 (``06_wikitext``)."""
    key = str(head).upper()
    if key not in HEAD_STYLES:
        raise ValueError(f"head must be one of {list(HEAD_STYLES)} (any case), got {head!r}")
    style = dict(HEAD_STYLES[key])
    grid = sorted({float(e) for e in eps_grid})
    if key != "VA" and eps is not None and len(grid) > 1:
        rank = min(range(len(grid)), key=lambda i: abs(math.log(grid[i]) - math.log(float(eps))))
        share = rank / (len(grid) - 1)
        style["linewidth"] = 1.3 + 1.5 * share
        style["alpha"] = 0.55 + 0.45 * share
    return style


def history_plot(
    histories: Mapping[str, Sequence[Sequence[float]]],
    *,
    ax: plt.Axes | None = None,
    styles: Mapping[str, Mapping] | None = None,
    title: str | None = None,
    ylabel: str = "validation perplexity",
    log_y: bool = True,
) -> Figure:
    """A per-epoch metric (by default validation perplexity) of several runs, one line per run.

    Args:
        histories: ``{label: [run_1, run_2, ...]}``, each run the metric after epochs 1, 2, ...;
            the runs of one label share its style and one legend entry (e.g. the seeds of one
            model).
        styles: matplotlib keyword arguments per label (default: :func:`model_style` when the
            label starts with VA, ST or NMST).
        log_y: a log y axis (perplexities fall geometrically early in training).

    A curve still falling at its last epoch shows a run that stopped before its validation
    plateau (Chapter 6, ``06_wikitext``).
    """
    if not isinstance(histories, Mapping) or not histories:
        raise TypeError("histories must be a non-empty mapping {label: [values per epoch, ...]}")
    styles = dict(styles or {})
    fig, ax = _figure_and_axes(ax)
    for i, (label, runs) in enumerate(histories.items()):
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        for j, run in enumerate(runs):
            values = np.asarray(run, dtype=np.float64)
            if values.ndim != 1 or values.size == 0:
                raise ValueError(f"history {label!r}: every run must be a non-empty 1-D sequence")
            ax.plot(np.arange(1, values.size + 1), values, marker="o", markersize=3,
                    label=label if j == 0 else None, **style)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return fig


def _lengths_and_flags(label, value) -> tuple[np.ndarray, np.ndarray]:
    """One entry of a ``lengths`` mapping (lengths, or (lengths, terminated flags)) as float lengths
    and boolean flags (all True when no flags are given), checked: 1-D, non-empty, lengths >= 1."""
    if isinstance(value, tuple) and len(value) == 2:
        ls, done = np.asarray(value[0], dtype=np.float64), np.asarray(value[1], dtype=bool)
    else:
        ls = np.asarray(value, dtype=np.float64)
        done = np.ones(ls.shape, dtype=bool)
    if ls.ndim != 1 or ls.size == 0 or done.shape != ls.shape:
        raise ValueError(f"lengths {label!r}: a non-empty 1-D array (and as many terminated flags)")
    if np.any(ls[done] < 1):
        raise ValueError(f"lengths {label!r}: lengths count tokens and must be >= 1")
    return ls, done


def length_cdf_plot(
    lengths: Mapping[str, object],
    *,
    max_len: int | None = None,
    ax: plt.Axes | None = None,
    styles: Mapping[str, Mapping] | None = None,
    title: str | None = None,
) -> Figure:
    """Distribution functions of sequence lengths on a log x axis: for each label, the
    fraction of sequences whose length (eos included) is at most l.

    Args:
        lengths: ``{label: lengths}`` or ``{label: (lengths, terminated)}``; an unfinished
            sequence (``terminated`` False) never counts as "at most l", so its curve ends below
            1 at ``max_len``, by the fraction that did not stop (compare Choi, Cho, Lee 2023,
            Figs. 8-9, which draw histograms).
        max_len: the decoding limit, drawn as a vertical line when given.
        styles: matplotlib keyword arguments per label (the label ``"data"`` is drawn as a
            grey area by default).

    A curve far to the right of the data's means continuations much longer than real lines;
    a near-vertical step means many continuations of one length. Chapter 6 (``06_wikitext``).
    """
    if not isinstance(lengths, Mapping) or not lengths:
        raise TypeError("lengths must be a non-empty mapping {label: lengths or (lengths, terminated)}")
    styles = dict(styles or {})
    fig, ax = _figure_and_axes(ax)
    right = 1.0
    for i, (label, value) in enumerate(lengths.items()):
        ls, done = _lengths_and_flags(label, value)
        finished = np.sort(ls[done])
        right = max(right, float(ls.max()))
        if finished.size == 0:
            continue
        xs = np.concatenate([[finished[0]], finished])
        ys = np.concatenate([[0.0], np.arange(1, finished.size + 1) / ls.size])
        if max_len is not None:
            xs, ys = np.append(xs, max_len), np.append(ys, ys[-1])
        style = styles.get(label)
        if style is None and label == "data":
            ax.fill_between(xs, ys, step="post", color="0.82", label=label, zorder=0)
            continue
        full = _default_style(label, i)
        full.update(style or {})
        ax.step(xs, ys, where="post", label=label, **full)
    if max_len is not None:
        ax.axvline(max_len, color="0.5", linewidth=0.8, linestyle=":")
        right = max(right, float(max_len))
    ax.set_xscale("log")
    ax.set_xlim(1, right * 1.3)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("length l (tokens, eos included; log scale)")
    ax.set_ylabel("fraction with length <= l")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7.5, loc="upper left")
    return fig


def eos_trace_plot(
    tokens: Sequence[str],
    traces: Mapping[str, Sequence[float]],
    *,
    floors: Mapping[str, Sequence[float]] | None = None,
    ax: plt.Axes | None = None,
    styles: Mapping[str, Mapping] | None = None,
    title: str | None = None,
) -> Figure:
    """p(eos | y_<t, x) of several models along one real line, on a log y axis.

    Step t is on the x axis and its tick is labelled with the token y_t being predicted: the
    point at step t is the probability of stopping *instead of* emitting y_t (the book's step
    convention, :data:`STEP_AXIS_LABEL`; Choi, Cho, Lee 2023, Figs. 3 and 6).

    Args:
        tokens: the line's continuation tokens y_1, y_2, ... (the last one usually eos).
        traces: ``{label: p_eos}`` with one probability per token.
        floors: optional ``{label: f_lb}`` lower bounds 1 - (1 - eps)^t to draw thin and grey.
        styles: matplotlib keyword arguments per label.

    Chapter 6 (``06_wikitext``).
    """
    tokens = [str(t) for t in tokens]
    if not tokens:
        raise ValueError("tokens must not be empty")
    if not isinstance(traces, Mapping) or not traces:
        raise TypeError("traces must be a non-empty mapping {label: probabilities}")
    styles = dict(styles or {})
    fig, ax = _figure_and_axes(ax)
    steps = np.arange(1, len(tokens) + 1)
    for i, (label, p) in enumerate(traces.items()):
        p = np.asarray(p, dtype=np.float64)
        if p.shape != (len(tokens),):
            raise ValueError(f"trace {label!r} has {p.size} values for {len(tokens)} tokens")
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        ax.plot(steps, p, marker=".", label=label, **style)
    for label, f in (floors or {}).items():
        f = np.asarray(f, dtype=np.float64)
        if f.shape != (len(tokens),):
            raise ValueError(f"floor {label!r} has {f.size} values for {len(tokens)} tokens")
        ax.plot(steps, f, color="0.55", linewidth=0.9, linestyle="-.", label=label)
    ax.set_yscale("log")
    ax.set_xticks(steps)
    ax.set_xticklabels(tokens, rotation=90, fontsize=7)
    ax.set_xlabel(STEP_AXIS_LABEL)
    ax.set_ylabel(r"$p(\langle eos\rangle \mid y_{<t}, x)$ (log scale)")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return fig


def shared_legend(fig: Figure, axes, *, ncol: int | None = None, fontsize: float = 8.5,
                  strip: str | None = None) -> Figure:
    """Replace the legends of ``axes`` (panels of one figure that draw the same labels) by one
    legend under the panels, so that a two-panel figure scaled to a page's width keeps legible
    labels. Labels are taken from every panel in order, once each; ``strip`` (a regular
    expression) is removed from them first (e.g. ``r" \\(0 from L = [\\d,]+\\)"``, the
    panel-specific note of :func:`rnt_plot`). Call after ``tight_layout`` is not needed: the
    figure's bottom margin is made room for here. Chapter 6 (``06_wikitext``)."""
    import re

    axes = list(np.ravel(axes))
    seen: dict[str, object] = {}
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        for h, lab in zip(handles, labels):
            lab = re.sub(strip, "", lab) if strip else lab
            seen.setdefault(lab, h)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if not seen:
        return fig
    ncol = ncol or min(len(seen), 6)
    rows = math.ceil(len(seen) / ncol)
    fig.tight_layout(rect=(0, 0.06 + 0.07 * rows, 1, 1))
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=ncol, fontsize=fontsize, frameon=False)
    return fig


# ---------------------------------------------------------------------------------------
# Sparse output layers: how many tokens alpha-entmax keeps (Chapter 8)
# ---------------------------------------------------------------------------------------


def _check_scores(scores) -> torch.Tensor:
    """Score vectors as a float64 CPU tensor [N, V] (one row per context)."""
    if not isinstance(scores, torch.Tensor):
        try:
            scores = torch.as_tensor(np.asarray(scores, dtype=np.float64))
        except (TypeError, ValueError):
            raise TypeError("scores must be a tensor or array of logits, shape [V] or [N, V]") from None
    if not scores.is_floating_point():
        raise TypeError(f"scores must hold floating-point logits, got dtype {scores.dtype}")
    if scores.dim() == 1:
        scores = scores.unsqueeze(0)
    if scores.dim() != 2 or scores.shape[-1] < 2:
        raise ValueError(f"scores must have shape [V] or [N, V] with V >= 2, got {tuple(scores.shape)}")
    scores = scores.detach().to("cpu", torch.float64)
    if torch.isnan(scores).any() or torch.isposinf(scores).any():
        raise ValueError("scores must not contain NaN or +inf (-inf marks a masked token)")
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
        if isinstance(a, bool) or not isinstance(a, numbers.Real) or not math.isfinite(float(a)):
            raise TypeError(f"every alpha must be a finite real number >= 1, got {a!r}")
        if float(a) < 1:
            raise ValueError(f"alpha-entmax needs alpha >= 1 (1 = softmax, 2 = sparsemax), got {a!r}")
        out.append(float(a))
    return tuple(out)


def _check_labels(labels, n: int) -> tuple[str, ...]:
    if labels is None:
        return tuple(f"context {i + 1}" for i in range(n))
    labels = tuple(str(x) for x in labels)
    if len(labels) != n:
        raise ValueError(f"labels must name each of the {n} score vectors, got {len(labels)}")
    return labels


def _entmax_probs(scores: torch.Tensor, alpha: float) -> torch.Tensor:
    from .entmax import entmax

    return entmax(scores, alpha, dim=-1)


def support_size_plot(
    scores,
    alphas: Sequence[float],
    *,
    eos_id: int | None = None,
    labels: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
) -> Figure:
    """How many tokens alpha-entmax keeps: support size of ``entmax(scores, alpha)`` against alpha.

    One line per score vector (row of ``scores``, e.g. next-token logits of a few contexts), on a
    log y axis from 1 to V (alpha = 1 is the softmax, which keeps all V tokens; alpha = 2 is
    sparsemax). With ``eos_id``, each point is a filled circle where eos is in the support
    (p(eos) > 0) and an open circle where alpha-entmax gives eos probability exactly zero
    (Chapter 8, ``08_sparse``: Theorem "The closed form of alpha-entmax", after Peters et al.
    2019 and Martins et al. 2020, eq. 3). Returns the figure.
    """
    scores = _check_scores(scores)
    alphas = _check_alphas(alphas)
    labels = _check_labels(labels, scores.shape[0])
    if eos_id is not None:
        eos_id = check_index(eos_id, scores.shape[-1], "eos_id")
    if ax is None:
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.4))
        fig.subplots_adjust(left=0.11, right=0.66, bottom=0.15, top=0.9)
    else:
        fig = ax.figure
    x = np.asarray(alphas)
    probs = [_entmax_probs(scores, a) for a in alphas]
    for i, label in enumerate(labels):
        color = _CYCLE[i % len(_CYCLE)]
        sizes = np.array([int((p[i] > 0).sum()) for p in probs])
        ax.plot(x, sizes, color=color, linestyle=_LINESTYLES[(i // len(_CYCLE)) % len(_LINESTYLES)], label=label)
        if eos_id is not None:
            inside = np.array([bool(p[i, eos_id] > 0) for p in probs])
            ax.plot(x[inside], sizes[inside], "o", color=color, markersize=5)
            ax.plot(x[~inside], sizes[~inside], "o", markerfacecolor="white", markeredgecolor=color, markersize=5)
    if eos_id is not None:
        ax.plot([], [], "o", color="grey", label="eos in the support")
        ax.plot([], [], "o", markerfacecolor="white", markeredgecolor="grey", label="p(eos) = 0")
    ax.set_yscale("log")
    ax.set_ylim(0.8, scores.shape[-1] * 1.5)
    ax.set_xlabel(r"$\alpha$ (1 = softmax, 2 = sparsemax)")
    ax.set_ylabel("support size (tokens with p > 0)")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    return fig


def _rank_points(V: int, n: int = 1500) -> np.ndarray:
    """0-based ranks to draw on a log rank axis: every rank up to 300, then log-spaced."""
    dense = np.arange(min(V, 300))
    if V <= 300:
        return dense
    return np.unique(np.concatenate([dense, np.geomspace(300, V, n).round().astype(np.int64) - 1]))


def plot_entmax_ranks(
    scores,
    alpha: float,
    *,
    eos_id: int | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    ylim: tuple[float, float] | None = None,
) -> Figure:
    """Probability against rank, log-log, of alpha-entmax and of the softmax of one score vector.

    The tokens are ranked by score (the same order for every alpha, by Chapter 8's corollary
    "What the threshold implies": the support is a top set). The softmax (dotted) is dense; the
    alpha-entmax curve stops at its support size k, marked by a dashed vertical line. With
    ``eos_id`` the eos token is marked: filled on the entmax curve when p(eos) > 0, open on the
    softmax curve when alpha-entmax gives it exactly zero. Chapter 8 (``08_sparse``).
    """
    scores = _check_scores(scores)
    if scores.shape[0] != 1:
        raise ValueError(f"plot_entmax_ranks draws one score vector, got {scores.shape[0]}")
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
    ranks = shown + 1
    ax.plot(ranks, np.where(soft[shown] > 0, soft[shown], np.nan), ":", color=COLORS["black"], lw=1.6,
            label="softmax (α = 1)")
    inside = shown[shown < k]
    ax.plot(inside + 1, p[inside], "-", color=COLORS["blue"], lw=2.2, label=f"{_format_number(alpha)}-entmax")
    ax.axvline(k, color=COLORS["blue"], linestyle="--", lw=1)
    ax.text(k, 1.0, f" {k:,} kept", color=COLORS["blue"], va="top", ha="left" if k < V ** 0.7 else "right", fontsize=9)
    if eos_id is not None:
        r = int((order == eos_id).nonzero()[0, 0])
        if p[r] > 0:
            ax.plot(r + 1, p[r], "o", color=COLORS["vermillion"], markersize=8, label=f"eos: p = {p[r]:.2g}")
        else:
            ax.plot(r + 1, soft[r], "o", markerfacecolor="white", markeredgecolor=COLORS["vermillion"], markersize=8,
                    markeredgewidth=2, label=f"eos: p = 0 (softmax {soft[r]:.1g})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.8, V * 1.3)
    floor = max(float(soft[soft > 0].min()), 1e-12)
    ax.set_ylim(*(ylim if ylim is not None else (floor / 2, 1.5)))
    ax.set_xlabel("rank of the token's score (1 = best)")
    ax.set_ylabel("probability")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    return fig


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

    A menu picks a score vector (one row of ``scores`` per context, labelled by ``labels``), a
    slider picks alpha; every combination is drawn once by :func:`plot_entmax_ranks` on the same
    axes and embedded as a PNG frame (:func:`explorer_html`), so the controls work without a
    kernel. The frame's title gives the support size and whether eos is in it.
    """
    scores = _check_scores(scores)
    alphas = _check_alphas(alphas)
    labels = _check_labels(labels, scores.shape[0])
    V = scores.shape[-1]
    if eos_id is not None:
        eos_id = check_index(eos_id, V, "eos_id")
    soft = torch.softmax(scores, dim=-1)
    floor = max(float(soft[soft > 0].min()), 1e-12)
    start = alphas.index(float(initial_alpha)) if initial_alpha is not None and float(initial_alpha) in alphas else 0
    rows = {label: i for i, label in enumerate(labels)}
    controls = [
        Control("context", labels, label="context", kind="dropdown"),
        Control("alpha", alphas, label="α", initial=start),
    ]

    def draw(context, alpha):
        z = scores[rows[context]]
        p = _entmax_probs(z, alpha)
        k = int((p > 0).sum())
        if eos_id is None:
            where = ""
        else:
            where = "; eos in the support" if p[eos_id] > 0 else "; p(eos) = 0"
        title = f"{context}, α = {_format_number(alpha)}: {k:,} of {V:,} tokens{where}"
        return plot_entmax_ranks(z, alpha, eos_id=eos_id, title=title, ylim=(floor / 2, 1.5))

    return explorer_html(
        draw,
        controls,
        dpi=dpi,
        alt="probability against rank (log-log) of the softmax and of alpha-entmax of one next-token score vector; "
        "the entmax curve stops at its support size, and the eos token is marked",
    )


# ---------------------------------------------------------------------------------------
# Self-terminating GPT-2 (Chapter 7)
# ---------------------------------------------------------------------------------------

#: Tokens after which a line can plausibly end (Choi, Cho, Lee 2023, Figs. 3 and 6 mark them in
#: red): a token whose text, stripped of spaces, ends with one of these characters.
SENTENCE_END_CHARS = (".", "!", "?")

_GPT2_HEADS = ("va", "st", "nmst")


def _token_label(token: str) -> str:
    """A readable tick label for one decoded token: surrounding spaces dropped, a token that is
    only white space shown as ``␣``, a newline as ``\\n``."""
    text = str(token).replace("\n", "\\n")
    stripped = text.strip()
    return stripped if stripped else "␣"


def _token_labels(tokens: Sequence[str]) -> list[str]:
    """Tick labels for a line of decoded tokens (:func:`_token_label` each), with WikiText's word
    ``<unk>`` kept whole: GPT-2's BPE splits it into three tokens ``" <"``, ``"unk"``, ``">"``,
    which would read as three unrelated labels; they are shown as ``<unk> 1/3``, ``2/3``, ``3/3``."""
    labels = [_token_label(t) for t in tokens]
    stripped = [str(t).strip() for t in tokens]
    i = 0
    while i + 2 < len(stripped):
        if stripped[i:i + 3] == ["<", "unk", ">"]:
            labels[i:i + 3] = ["<unk> 1/3", "<unk> 2/3", "<unk> 3/3"]
            i += 3
        else:
            i += 1
    return labels


def _is_sentence_end(token: str) -> bool:
    return str(token).strip().endswith(SENTENCE_END_CHARS)


def _eps_text(eps: float) -> str:
    """5e-4 -> '5e-4', 2.5e-3 -> '2.5e-3', 1e-2 -> '1e-2' (the book writes eps in this form)."""
    mantissa, exponent = f"{float(eps):.3e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def _check_model_key(key) -> tuple[str, float | None]:
    """``("va", None)``, ``("st", 5e-4)`` or ``("nmst", 5e-4)`` (head names in any case)."""
    if not isinstance(key, tuple) or len(key) != 2:
        raise TypeError(f"a model key must be a pair (head, eps) such as ('nmst', 5e-4) or ('va', None), got {key!r}")
    head, eps = key
    head = str(head).lower()
    if head not in _GPT2_HEADS:
        raise ValueError(f"a model key's head must be one of {_GPT2_HEADS}, got {key[0]!r}")
    if head == "va":
        if eps is not None:
            raise ValueError(f"the VA model has no eps: write ('va', None), got {key!r}")
        return head, None
    return head, check_eps(eps)


def _check_eos_lines(lines) -> list[dict]:
    """Validate the ``lines`` of :func:`eos_token_explorer_html` and return normalised copies."""
    if isinstance(lines, (str, bytes, Mapping)) or not isinstance(lines, Sequence) or len(lines) == 0:
        raise TypeError("lines must be a non-empty sequence of mappings with 'context', 'tokens' and 'p_eos'")
    out = []
    for i, line in enumerate(lines):
        if not isinstance(line, Mapping):
            raise TypeError(f"line {i} must be a mapping with 'context', 'tokens' and 'p_eos', got {type(line).__name__}")
        if "models" in line and "p_eos" not in line:  # the form of nmst_lib.experiments.gpt2.gpt2_eos_traces
            models = line["models"]
            if isinstance(models, (str, bytes, Mapping)) or not isinstance(models, Sequence):
                raise TypeError(f"line {i}: 'models' must be a list of {{'head', 'eps', 'p_eos'}} mappings")
            line = {"context": line.get("context_text", " ".join(map(str, line.get("context", [])))),
                    "tokens": line.get("tokens", []), "label": line.get("label"),
                    "p_eos": {(m["head"], m["eps"]): m["p_eos"] for m in models}}
        missing = [k for k in ("context", "tokens", "p_eos") if k not in line]
        if missing:
            raise ValueError(f"line {i} lacks {missing}; each line needs 'context' (text), 'tokens' (the continuation's "
                             "readable tokens) and 'p_eos' ({(head, eps): probabilities})")
        tokens = [str(t) for t in line["tokens"]]
        if not tokens:
            raise ValueError(f"line {i} has no tokens")
        p_eos = line["p_eos"]
        if not isinstance(p_eos, Mapping) or not p_eos:
            raise TypeError(f"line {i}: 'p_eos' must be a non-empty mapping {{(head, eps): probabilities}}")
        probs = {}
        for key, p in p_eos.items():
            key = _check_model_key(key)
            p = np.asarray(p.cpu() if isinstance(p, torch.Tensor) else p, dtype=np.float64)
            if p.shape != (len(tokens),):
                raise ValueError(f"line {i}, model {key}: {p.size} probabilities for {len(tokens)} tokens")
            if not np.all((p > 0) & (p <= 1)):
                raise ValueError(f"line {i}, model {key}: p(eos) must lie in (0, 1] at every step (a log axis)")
            probs[key] = p
        label = str(line.get("label") or line["context"])
        out.append({"context": str(line["context"]), "tokens": tokens, "p_eos": probs, "label": label})
    return out


def eos_token_plot(
    tokens: Sequence[str],
    p_eos: Mapping[tuple, Sequence[float]],
    *,
    eps: float | None = None,
    max_tokens: int | None = None,
    ylim: tuple[float, float] | None = None,
    title: str | None = None,
    ax: plt.Axes | None = None,
) -> Figure:
    """p(eos | y_<t, x) of GPT-2 models along one validation line, with its tokens on the x axis
    (Choi, Cho, Lee 2023, Figs. 3 and 6).

    Step t is on the x axis and its tick is the token y_t being predicted (the book's step
    convention, :data:`STEP_AXIS_LABEL`): the point at step t is the probability of stopping
    *instead of* emitting y_t. Ticks of tokens after which the line could end
    (:data:`SENTENCE_END_CHARS`) are red, as in the paper, and the step right after each of
    them, where the model may stop, is shaded: NMST's curve can rise there and fall again, ST's
    can only rise (Chapter 4, monotone ST; Chapter 5, NMST).

    Args:
        tokens: the continuation's readable tokens y_1, y_2, ... (e.g. GPT-2 BPE decoded to text).
        p_eos: ``{(head, eps): probabilities}``, one per token; head ``"va"`` (eps ``None``),
            ``"st"`` or ``"nmst"``; drawn in :data:`HEAD_STYLES`.
        eps: when given, also draw the lower bound f_lb(t) = 1 - (1 - eps)^t of ST and NMST.
        max_tokens: draw only the first ``max_tokens`` steps (the title says so).
        ylim: fixed y limits (the explorer keeps one line's frames comparable).

    Chapter 7 (``07_gpt2``).
    """
    line = _check_eos_lines([{"context": "", "tokens": tokens, "p_eos": p_eos}])[0]
    tokens, probs = line["tokens"], line["p_eos"]
    n = len(tokens) if max_tokens is None else min(len(tokens), check_positive_int(max_tokens, "max_tokens"))
    if eps is not None:
        eps = check_eps(eps)
    if ax is None:
        width = COLUMN_WIDTH
        fig, ax = plt.subplots(figsize=(width, 3.7))
        fig.subplots_adjust(left=0.75 / width, right=1 - 1.45 / width, bottom=0.3, top=0.88)
    else:
        fig = ax.figure
    steps = np.arange(1, n + 1)
    order = sorted(probs, key=lambda k: (_GPT2_HEADS.index(k[0]), k[1] or 0.0))
    for key in order:
        head, e = key
        style = dict(HEAD_STYLES[head.upper()])
        label = "VA" if head == "va" else f"{head.upper()} ε={_eps_text(e)}"
        ax.plot(steps, probs[key][:n], marker=".", markersize=4, label=label, **style)
    if eps is not None:
        ax.plot(steps, eos_lower_bound(torch.as_tensor(steps, dtype=torch.float64), eps).numpy(), color="0.55", linewidth=0.9,
                linestyle="-.", label=f"f_lb(t), ε={_eps_text(eps)}")
    for t in range(1, n):
        if _is_sentence_end(tokens[t - 1]):
            ax.axvspan(t + 0.5, t + 1.5, color=COLORS["vermillion"], alpha=0.08, linewidth=0)
    ax.set_yscale("log")
    ax.set_xlim(0.3, n + 0.7)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xticks(steps)
    ax.set_xticklabels(_token_labels(tokens)[:n], rotation=90, fontsize=7)
    for tick, token in zip(ax.get_xticklabels(), tokens[:n]):
        if _is_sentence_end(token):
            tick.set_color(COLORS["vermillion"])
    ax.grid(axis="x", visible=False)
    ax.set_xlabel(STEP_AXIS_LABEL)
    ax.set_ylabel(r"$p(\langle eos\rangle \mid y_{<t}, x)$")
    shown = title or ""
    if n < len(tokens):
        shown = (shown + " " if shown else "") + f"(first {n} of {len(tokens)} tokens)"
    if shown:
        ax.set_title(shown, fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    return fig


def eos_token_explorer_html(
    lines: Sequence[Mapping],
    *,
    max_tokens: int = 60,
    label_words: int = 8,
    initial_head: str = "nmst",
    initial_eps: float | None = None,
    dpi: int = FIGURE_DPI,
):
    """The p(eos | t) explorer of Chapter 7 (``07_gpt2``) for the static website: choose the
    validation line and the model, a layer at an eps (Choi, Cho, Lee 2023, Figs. 3 and 6).

    Every frame is drawn by :func:`eos_token_plot`: the VA model of the line (if stored) as the
    reference, the chosen layer (ST, NMST, or both) at its eps, and the lower bound
    f_lb(t) = 1 - (1 - eps)^t, with the line's tokens on the x axis and sentence ends in red.
    All frames of one line share their y limits. Frames are pre-rendered PNGs switched by
    JavaScript (:func:`explorer_html`), so the controls work without a kernel.

    Args:
        lines: one mapping per validation line with ``"context"`` (readable text),
            ``"tokens"`` (the continuation's readable tokens, eos last) and ``"p_eos"``
            (``{(head, eps): probabilities}``, one per token, head ``"va"``/``"st"``/``"nmst"``);
            optionally ``"label"``, the menu text (default: the context's first
            ``label_words`` words). The lines of
            :func:`nmst_lib.experiments.gpt2.gpt2_eos_traces` (``"context_text"``, ``"tokens"``,
            ``"models"``) are accepted as they are.
        max_tokens: draw at most this many steps of a line (the frame's title says so).
        initial_head: the layer shown first (``"st"``, ``"nmst"`` or ``"both"``).
        initial_eps: the eps shown first (default: the smallest stored).

    The model menu offers only what every line has stored (a layer at an eps; "ST and NMST" where
    both are stored at that eps), so no frame is empty and "ST and NMST" always shows two layers.
    Frames: lines x models; keep it to a few dozen.
    """
    lines = _check_eos_lines(lines)
    max_tokens = check_positive_int(max_tokens, "max_tokens")
    label_words = check_positive_int(label_words, "label_words")
    keys = {k for line in lines for k in line["p_eos"]}
    heads = [h for h in ("st", "nmst") if any(k[0] == h for k in keys)]
    eps_values = sorted({k[1] for k in keys if k[1] is not None})
    if not heads:
        raise ValueError("the lines hold no ST or NMST model: nothing to choose (p_eos keys like ('nmst', 5e-4))")
    head_choices = heads + (["both"] if len(heads) == 2 else [])
    if initial_head not in head_choices:
        raise ValueError(f"initial_head must be one of {head_choices}, got {initial_head!r}")
    if initial_eps is not None and check_eps(initial_eps) not in eps_values:
        raise ValueError(f"initial_eps must be one of the stored eps {eps_values}, got {initial_eps!r}")
    eps_start = eps_values.index(float(initial_eps)) if initial_eps is not None else 0

    menu, seen = [], set()
    for i, line in enumerate(lines):
        words = line["label"].split()
        text = " ".join(words[:label_words]) + (" …" if len(words) > label_words else "")
        text = f"{i + 1}. {text}"
        while text in seen:
            text += " "
        seen.add(text)
        menu.append(text)
    limits = []
    for line in lines:
        n = min(len(line["tokens"]), max_tokens)
        lows = [float(p[:n].min()) for p in line["p_eos"].values()]
        lows += [float(eos_lower_bound(1, e)) for e in eps_values]
        limits.append((max(min(lows) / 3, 1e-12), 1.5))

    # One menu of the models every line has stored: a layer at an eps, and both layers where both
    # exist at that eps. A choice some line lacks would draw an empty "no stored result" frame.
    def stored_everywhere(wanted):
        return all(all(k in line["p_eos"] for k in wanted) for line in lines)

    choices = []
    for e in eps_values:
        for head in ("st", "nmst"):
            if stored_everywhere([(head, e)]):
                choices.append((head, e))
        if stored_everywhere([("st", e), ("nmst", e)]):
            choices.append(("both", e))
    if not choices:
        raise ValueError("no ST or NMST model is stored for every line: nothing to show on all lines")
    start_eps = eps_values[eps_start]
    preferred = [c for c in choices if c == (initial_head, start_eps)] or [c for c in choices if c[0] == initial_head] \
        or choices
    controls = [
        Control("line", tuple(range(len(lines))), label="validation line", kind="dropdown", shown=tuple(menu)),
        Control("model", tuple(range(len(choices))), label="model", kind="dropdown",
                initial=choices.index(preferred[0]),
                shown=tuple(f"{'ST and NMST' if h == 'both' else h.upper()}, ε = {_eps_text(e)}" for h, e in choices)),
    ]

    def draw(line, model):
        data = lines[line]
        head, eps = choices[model]
        wanted = [("va", None)] + [(h, eps) for h in (heads if head == "both" else [head])]
        chosen = {k: data["p_eos"][k] for k in wanted if k in data["p_eos"]}
        title = "context: " + " ".join(data["context"].split())
        return eos_token_plot(data["tokens"], chosen, eps=eps, max_tokens=max_tokens, ylim=limits[line],
                              title=_one_line_title(title))

    return explorer_html(
        draw,
        controls,
        dpi=dpi,
        alt="p(eos) at each step of a validation line (log scale), with the line's tokens as x tick labels and sentence "
        "ends in red: the VA model and the chosen ST or NMST model at the chosen eps, with the lower bound f_lb(t)",
    )


def _one_line_title(text: str, width: int = 110) -> str:
    """``text`` cut to ``width`` characters (with an ellipsis) for a one-line figure title."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def eps_tradeoff_plot(
    points: Sequence[Mapping],
    *,
    L: int | None = None,
    axes=None,
    title: str | None = None,
) -> Figure:
    """Validation perplexity (left) and r_nt(L) under greedy search (right) against eps, log x
    axis, for ST and NMST, with VA as a horizontal line (Choi, Cho, Lee 2023, Fig. 5; Welleck et
    al. 2020, Sec. 5.3's eps trade-off).

    Args:
        points: one mapping per model with ``"head"`` (``"va"``, ``"st"`` or ``"nmst"``),
            ``"eps"`` (``None`` for VA), ``"ppl"`` and ``"rnt"`` (a fraction in [0, 1]);
            optional ``"ppl_std"`` and ``"rnt_std"`` are drawn as error bars (VA: a band).
        L: the decoding limit of r_nt; when given, a vertical line marks
            eps_L = 1 - 2^(-1/L): right of it (eps > eps_L) the half-life step
            t_{1/2} = floor(-log 2 / log(1 - eps)) + 1 is at most L, so greedy search on an ST or
            NMST model stops within L steps *whatever the weights* (Chapter 4, greedy theorem);
            left of it a zero r_nt(L) is learned, not guaranteed.
        axes: two matplotlib axes to draw into (default: a new 1 x 2 figure).

    Chapter 7 (``07_gpt2``).
    """
    if isinstance(points, (str, bytes, Mapping)) or not isinstance(points, Sequence) or len(points) == 0:
        raise TypeError("points must be a non-empty sequence of mappings with 'head', 'eps', 'ppl' and 'rnt'")
    rows = []
    for i, point in enumerate(points):
        if not isinstance(point, Mapping) or any(k not in point for k in ("head", "eps", "ppl", "rnt")):
            raise ValueError(f"point {i} must be a mapping with 'head', 'eps', 'ppl' and 'rnt', got {point!r}")
        head, eps = _check_model_key((point["head"], point["eps"]))
        ppl, rnt = float(point["ppl"]), float(point["rnt"])
        if not (math.isfinite(ppl) and ppl >= 1):
            raise ValueError(f"point {i}: a perplexity is a finite number >= 1, got {point['ppl']!r}")
        if not 0 <= rnt <= 1:
            raise ValueError(f"point {i}: r_nt is a fraction in [0, 1], got {point['rnt']!r}")
        rows.append({"head": head, "eps": eps, "ppl": ppl, "rnt": rnt,
                     "ppl_std": float(point.get("ppl_std") or 0.0), "rnt_std": float(point.get("rnt_std") or 0.0)})
    if not any(r["head"] != "va" for r in rows):
        raise ValueError("points need at least one ST or NMST model (an eps axis needs eps)")
    if L is not None:
        L = check_positive_int(L, "L")
    if axes is None:
        fig, axes = plt.subplots(2, 1, figsize=(COLUMN_WIDTH, 5.6))
    else:
        axes = list(np.ravel(axes))
        if len(axes) != 2:
            raise ValueError(f"axes must hold two axes (perplexity, r_nt), got {len(axes)}")
        fig = axes[0].figure
    eps_all = [r["eps"] for r in rows if r["eps"] is not None]
    lo, hi = min(eps_all) / 2, max(eps_all) * 2
    for ax, metric, ylabel in ((axes[0], "ppl", "validation perplexity"),
                               (axes[1], "rnt", f"$r_{{nt}}(L)$, greedy" + (f", L = {L:,}" if L else ""))):
        for head in ("st", "nmst"):
            pts = sorted((r for r in rows if r["head"] == head), key=lambda r: r["eps"])
            if not pts:
                continue
            style = dict(HEAD_STYLES[head.upper()])
            ax.errorbar([r["eps"] for r in pts], [r[metric] for r in pts], yerr=[r[metric + "_std"] for r in pts],
                        marker="o", markersize=5, capsize=3, label=head.upper(), **style)
        for r in (r for r in rows if r["head"] == "va"):
            style = dict(HEAD_STYLES["VA"])
            ax.axhline(r[metric], label="VA", **style)
            if r[metric + "_std"]:
                ax.axhspan(r[metric] - r[metric + "_std"], r[metric] + r[metric + "_std"], color=style["color"],
                           alpha=0.12, linewidth=0)
        if L is not None:
            eps_L = -math.expm1(-math.log(2.0) / L)  # 1 - 2^(-1/L)
            ax.axvline(eps_L, color="0.45", linewidth=1, linestyle=(0, (1, 2)),
                       label=f"ε above which $t_{{1/2}}$ ≤ L")
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.set_xlabel("ε (log scale)")
        ax.set_ylabel(ylabel)
    axes[1].set_ylim(-0.03, 1.03)
    if title:
        fig.suptitle(title, fontsize=10)
    handles, labels = axes[1].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=len(seen), fontsize=8.5, frameon=False)
    return fig


def length_histogram_plot(
    lengths: Mapping[str, object],
    *,
    max_len: int,
    bins: int = 25,
    ax: plt.Axes | None = None,
    styles: Mapping[str, Mapping] | None = None,
    title: str | None = None,
) -> Figure:
    """Histograms of continuation lengths, as fractions of each label's sequences, with the
    unfinished ones in a separate bar beyond the limit (Welleck et al. 2020, Fig. 4: GPT-2's
    greedy continuations pile up at the limit, the self-terminating model's do not).

    Args:
        lengths: ``{label: lengths}`` or ``{label: (lengths, terminated)}`` as for
            :func:`length_cdf_plot`; an unfinished sequence (``terminated`` False) and a
            sequence longer than ``max_len`` (a data line) are counted in the last bar, "> L",
            drawn right of ``max_len``. ``"data"`` is a grey area.
        max_len: the decoding limit L; the bins split [1, L] evenly.
        bins: the number of bins up to L.

    Every label's bars (unfinished bar included) sum to 1. Chapter 7 (``07_gpt2``).
    """
    if not isinstance(lengths, Mapping) or not lengths:
        raise TypeError("lengths must be a non-empty mapping {label: lengths or (lengths, terminated)}")
    max_len = check_positive_int(max_len, "max_len", minimum=2)
    bins = check_positive_int(bins, "bins")
    styles = dict(styles or {})
    if ax is None:
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.4))
        fig.subplots_adjust(left=0.1, right=0.98, bottom=0.16, top=0.9)
    else:
        fig = ax.figure
    edges = np.linspace(0.5, max_len + 0.5, bins + 1)
    width = edges[1] - edges[0]
    extra = (max_len + 0.5 + 0.4 * width, max_len + 0.5 + 1.4 * width)  # the "unfinished" bar
    for i, (label, value) in enumerate(lengths.items()):
        ls, done = _lengths_and_flags(label, value)
        counts, _ = np.histogram(ls[done & (ls <= max_len)], bins=edges)
        fractions = counts / ls.size
        unfinished = float(np.mean(~done | (ls > max_len)))  # not finished within L (a data line: longer than L)
        xs = np.concatenate([edges, [extra[0], extra[1]]])
        ys = np.concatenate([fractions, [0.0, unfinished]])
        if label == "data" and label not in styles:
            ax.stairs(ys, xs, fill=True, color="0.82", label=label + (f" ({100 * unfinished:.0f}% longer than L)"
                                                                       if unfinished else ""), zorder=0)
            continue
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        style.pop("marker", None)
        ax.stairs(ys, xs, label=label + (f" ({100 * unfinished:.0f}% unfinished)" if unfinished else ""), **style)
    ax.axvline(max_len + 0.5, color="0.5", linewidth=0.8, linestyle=":")
    ax.set_xlim(0, extra[1] + 0.5 * width)
    ticks = [t for t in matplotlib.ticker.MaxNLocator(nbins=6, integer=True).tick_values(1, max_len) if 0 <= t <= 0.88 * max_len]
    ax.set_xticks(ticks + [sum(extra) / 2])
    ax.set_xticklabels([f"{t:,.0f}" for t in ticks] + [f"> {max_len:,}"])
    ax.set_xlabel("continuation length (tokens, eos included); last bar: longer than L or unfinished")
    ax.set_ylabel("fraction of continuations")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center")
    return fig


# ---------------------------------------------------------------------------------------
# Contextual temperature (Chapter 9)
# ---------------------------------------------------------------------------------------

__all__ += [
    "temperature_over_training_plot",
    "temperature_by_position_plot",
    "eos_temperature_plot",
    "temperature_explorer_html",
]

#: The colour map of Chapter 9's token-by-frequency figures: viridis, perceptually uniform and
#: readable with every common form of colour blindness (dark = frequent tokens).
TEMPERATURE_CMAP = "viridis"


def _check_training_curves(epochs, temperatures, ranks, labels=None):
    """Validate (epochs [R], temperatures [R, N], ranks [N], labels [N]) and return numpy copies."""
    epochs = np.asarray(epochs.cpu() if isinstance(epochs, torch.Tensor) else epochs, dtype=np.float64)
    temps = np.asarray(temperatures.cpu() if isinstance(temperatures, torch.Tensor) else temperatures, dtype=np.float64)
    ranks = np.asarray(ranks.cpu() if isinstance(ranks, torch.Tensor) else ranks)
    if epochs.ndim != 1 or epochs.size == 0:
        raise ValueError(f"epochs must be a non-empty 1-D sequence (one per monitor record), got shape {epochs.shape}")
    if not np.all(np.diff(epochs) >= 0):
        raise ValueError("epochs must be non-decreasing (the monitor records in training order)")
    if temps.ndim == 1:
        temps = temps[:, None]
    if temps.ndim != 2 or temps.shape[0] != epochs.size or temps.shape[1] == 0:
        raise ValueError(f"temperatures must be [records, tokens] with {epochs.size} records, got shape {temps.shape}")
    if not np.all(np.isfinite(temps)) or not np.all(temps > 0):
        raise ValueError("temperatures must be finite and > 0")
    if ranks.ndim != 1 or ranks.size != temps.shape[1]:
        raise ValueError(f"ranks must give one frequency rank per tracked token ({temps.shape[1]}), got shape {ranks.shape}")
    if not np.issubdtype(ranks.dtype, np.integer) or np.any(ranks < 0):
        raise ValueError("ranks must be integers >= 0 (0 = the most frequent token)")
    if labels is not None:
        labels = [str(x) for x in labels]
        if len(labels) != temps.shape[1]:
            raise ValueError(f"labels must name each of the {temps.shape[1]} tracked tokens, got {len(labels)}")
    return epochs, temps, ranks.astype(np.int64), labels


def temperature_over_training_plot(
    epochs,
    temperatures,
    ranks,
    *,
    labels: Sequence[str] | None = None,
    highlight: int | None = None,
    offset: float = 0.0,
    ylim: tuple[float, float] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    colorbar: bool = True,
) -> Figure:
    """The temperature of tracked tokens over training, one line per token coloured by its frequency
    rank: the analogue of Fig. 1(a) of *Contextual Temperature for Language Modeling* (2020).

    Args:
        epochs: ``[R]`` epochs of training done at each monitor record (0 = before training).
        temperatures: ``[R, N]`` mean temperature of each of the N tracked tokens at each record.
        ranks: ``[N]`` frequency ranks in the training data (0 = the most frequent token); the
            colour bar shows them 1-based on a log scale.
        labels: ``[N]`` the tokens' strings (used for ``highlight``'s legend entry).
        highlight: index of one token drawn thick in vermillion above the others (which are
            then drawn thin), as in the explorer of Chapter 9.
        offset: subtracted from every temperature (the paper plots ``T - 2``, the lower end a/b
            of its range); the y label says so.

    Chapter 9 (``09_temperature``). Returns the figure.
    """
    epochs, temps, ranks, labels = _check_training_curves(epochs, temperatures, ranks, labels)
    if isinstance(offset, bool) or not isinstance(offset, numbers.Real) or not math.isfinite(float(offset)):
        raise TypeError(f"offset must be a finite number, got {offset!r}")
    if highlight is not None:
        highlight = check_index(highlight, temps.shape[1], "highlight")
    if ax is None:
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.6))
        fig.subplots_adjust(left=0.11, right=0.84 if colorbar else 0.97, bottom=0.14, top=0.9)
    else:
        fig = ax.figure
    cmap = plt.get_cmap(TEMPERATURE_CMAP)
    norm = matplotlib.colors.LogNorm(vmin=1, vmax=max(int(ranks.max()) + 1, 2))
    y = temps - float(offset)
    order = np.argsort(-ranks, kind="stable")  # rare tokens first, frequent ones drawn on top
    thin = highlight is not None
    for i in order:
        if i == highlight:
            continue
        ax.plot(epochs, y[:, i], color=cmap(norm(ranks[i] + 1)), linewidth=0.6 if thin else 1.0,
                alpha=0.35 if thin else 0.8)
    if highlight is not None:
        name = labels[highlight] if labels else f"token {highlight}"
        ax.plot(epochs, y[:, highlight], color=COLORS["vermillion"], linewidth=2.6, marker="o", markersize=3,
                label=f"{name} (frequency rank {ranks[highlight] + 1:,})")
        ax.legend(loc="best", fontsize=9, framealpha=0.8, frameon=True)
    if colorbar:
        mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
        mappable.set_array([])
        bar = fig.colorbar(mappable, ax=ax, pad=0.02, fraction=0.05)
        bar.set_label("frequency rank (1 = most frequent)", fontsize=9)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel("epochs of training")
    ax.set_ylabel("temperature" + (f" − {_format_number(float(offset))}" if offset else ""))
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def _check_band_series(series, x_key: str) -> dict:
    if not isinstance(series, Mapping) or not series:
        raise TypeError(f"series must be a non-empty mapping {{label: {{'{x_key}', 'mean', 'lower', 'upper'}}}}")
    out = {}
    for label, s in series.items():
        if not isinstance(s, Mapping) or any(k not in s for k in ("mean", "lower", "upper")):
            raise ValueError(f"series {label!r} must be a mapping with 'mean', 'lower' and 'upper' (and optionally "
                             f"'{x_key}')")
        mean = np.asarray(s["mean"], dtype=np.float64)
        lower = np.asarray(s["lower"], dtype=np.float64)
        upper = np.asarray(s["upper"], dtype=np.float64)
        x = np.asarray(s[x_key], dtype=np.float64) if s.get(x_key) is not None else np.arange(1, mean.size + 1, dtype=np.float64)
        if mean.ndim != 1 or mean.size == 0 or any(a.shape != mean.shape for a in (lower, upper, x)):
            raise ValueError(f"series {label!r}: {x_key}, mean, lower and upper must be 1-D of the same non-zero length")
        finite = np.isfinite(mean)
        if np.any(finite & ((lower > mean + 1e-12) | (upper < mean - 1e-12))):
            raise ValueError(f"series {label!r}: the band must contain the mean (lower <= mean <= upper)")
        out[str(label)] = (x, mean, lower, upper)
    return out


def temperature_by_position_plot(
    series: Mapping[str, Mapping],
    *,
    tick_labels: Sequence[str] | None = None,
    segments: Sequence[tuple[str, int]] | None = None,
    styles: Mapping[str, Mapping] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    ylabel: str = "mean temperature over the vocabulary",
) -> Figure:
    """Mean temperature against the position in the line, with 95% confidence bands: the analogue of
    Fig. 1(b) of *Contextual Temperature for Language Modeling* (2020).

    Args:
        series: ``{label: {"mean": [P], "lower": [P], "upper": [P], "x": [P] (optional)}}``, one
            model per label; ``lower``/``upper`` are the band's ends (e.g. a 95% normal interval
            over lines). Positions without data may be NaN.
        tick_labels: one label per position (e.g. the protocol "first 5, middle 5, last 5"
            predicted tokens of lines of at least 15 tokens, as in the paper).
        segments: ``[(name, length), ...]`` splitting the positions into named groups, separated
            by dotted lines and named above the axes (e.g. ``[("first", 5), ("middle", 5),
            ("last", 5)]``); the lengths must add up to P.
        styles: matplotlib keyword arguments per label.

    Chapter 9 (``09_temperature``). Returns the figure.
    """
    data = _check_band_series(series, "x")
    styles = dict(styles or {})
    n = next(iter(data.values()))[0].size
    if tick_labels is not None:
        tick_labels = [str(t) for t in tick_labels]
        if any(x.size != len(tick_labels) for x, *_ in data.values()):
            raise ValueError(f"tick_labels must give one label per position ({n}), got {len(tick_labels)}")
    if segments is not None:
        segments = [(str(name), check_positive_int(length, "segment length")) for name, length in segments]
        if sum(length for _, length in segments) != n:
            raise ValueError(f"the segment lengths must add up to the {n} positions, got {sum(l for _, l in segments)}")
    fig, ax = _figure_and_axes(ax)
    for i, (label, (x, mean, lower, upper)) in enumerate(data.items()):
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        line, = ax.plot(x, mean, marker="o", markersize=3.5, label=label, **style)
        ax.fill_between(x, lower, upper, color=line.get_color(), alpha=0.18, linewidth=0)
    x0 = next(iter(data.values()))[0]
    if tick_labels is not None:
        ax.set_xticks(x0)
        ax.set_xticklabels(tick_labels, fontsize=8)
    if segments is not None:
        start = 0
        for k, (name, length) in enumerate(segments):
            centre = (x0[start] + x0[start + length - 1]) / 2
            ax.text(centre, 1.01, name, transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=9)
            if k > 0:
                ax.axvline((x0[start - 1] + x0[start]) / 2, color="0.5", linestyle=":", linewidth=1)
            start += length
    ax.set_xlabel("position of the predicted token in the line")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10, pad=16 if segments else None)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    return fig


def eos_temperature_plot(
    series: Mapping[str, Mapping],
    *,
    reference: Mapping[str, float] | None = None,
    styles: Mapping[str, Mapping] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
) -> Figure:
    """The temperature of eos against the distance to the line's true end, with 95% bands.

    Args:
        series: ``{label: {"distance": [D], "mean": [D], "lower": [D], "upper": [D]}}``: at distance
            0 the model predicts the token the line really ends with (eos), at distance d the
            prediction d tokens earlier. Drawn with the end on the right.
        reference: ``{label: value}``, a horizontal line per model (e.g. the mean temperature of
            all tokens, or the range's ends), dashed in the series' colour.
        styles: matplotlib keyword arguments per label.

    A temperature does not set eos's probability by itself: a lower temperature sharpens the
    logit ``z_eos / T_eos``, which helps eos only where ``z_eos`` is large (Chapter 9,
    ``09_temperature``). Returns the figure.
    """
    data = _check_band_series(series, "distance")
    styles = dict(styles or {})
    fig, ax = _figure_and_axes(ax)
    for i, (label, (d, mean, lower, upper)) in enumerate(data.items()):
        if np.any(d < 0):
            raise ValueError(f"series {label!r}: distances count tokens before the end and must be >= 0")
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        line, = ax.plot(-d, mean, marker="o", markersize=3, label=label, **style)
        ax.fill_between(-d, lower, upper, color=line.get_color(), alpha=0.18, linewidth=0)
        if reference and label in reference:
            ax.axhline(float(reference[label]), color=line.get_color(), linestyle="--", linewidth=1,
                       label=f"{label}: all tokens")
    ticks = [t for t in ax.get_xticks() if t <= 0]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{abs(t):g}" for t in ticks])
    ax.set_xlim(min(-d.max() for d, *_ in data.values()) - 0.5, 0.5)
    ax.set_xlabel("tokens before the line's end (0: the step that should predict eos)")
    ax.set_ylabel("temperature of eos")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    return fig


def _default_token_choices(ranks: np.ndarray, n: int) -> list[int]:
    """Up to ``n`` token indices spread over the frequency ranks: the most frequent ones, then
    log-spaced ranks down to the rarest tracked token."""
    order = np.argsort(ranks, kind="stable")
    if order.size <= n:
        return order.tolist()
    head = order[: max(1, n // 3)].tolist()
    rest = order[len(head):]
    picks = np.unique(np.geomspace(1, rest.size, n - len(head)).round().astype(int) - 1)
    return head + rest[picks].tolist()


def temperature_explorer_html(
    runs: Mapping[str, Mapping],
    *,
    choices: Sequence[str] | None = None,
    max_choices: int = 16,
    initial_token: str | None = None,
    offset: float | None = None,
    dpi: int = FIGURE_DPI,
):
    """"Choose the token to follow": the temperature of one token over training, with its frequency
    rank, for the static website (Chapter 9, ``09_temperature``; *Contextual Temperature for
    Language Modeling* (2020), Fig. 1(a)).

    A menu picks the model (when there are several) and a menu picks the token; every frame is
    drawn by :func:`temperature_over_training_plot` with every tracked token in the background
    and the chosen one highlighted, on the same y axis for all tokens of a model. The frames are
    pre-rendered PNGs switched by JavaScript (:func:`explorer_html`): no kernel needed.

    Args:
        runs: ``{model label: {"epochs": [R], "temperatures": [R, N], "ranks": [N], "tokens": [N]}}``
            (ranks 0-based by training frequency; tokens as strings, escaped in the menu).
        choices: the token strings offered in the menu (default: up to ``max_choices`` tokens
            spread over the frequency ranks of the first model, always with ``<eos>`` and
            ``<unk>`` when tracked). A choice missing from a model is drawn as a note.
        initial_token: the token shown first (default: the first choice).
        offset: subtracted from the temperatures (default: none).

    Frames: models x choices; keep it to a few dozen.
    """
    if not isinstance(runs, Mapping) or not runs:
        raise TypeError("runs must be a non-empty mapping {model label: {'epochs', 'temperatures', 'ranks', 'tokens'}}")
    checked = {}
    for label, run in runs.items():
        if not isinstance(run, Mapping) or any(k not in run for k in ("epochs", "temperatures", "ranks", "tokens")):
            raise ValueError(f"run {label!r} must be a mapping with 'epochs', 'temperatures', 'ranks' and 'tokens'")
        checked[str(label)] = _check_training_curves(run["epochs"], run["temperatures"], run["ranks"], run["tokens"])
    max_choices = check_positive_int(max_choices, "max_choices")
    first = next(iter(checked.values()))
    if choices is None:
        _, _, ranks0, tokens0 = first
        picked = [tokens0[i] for i in _default_token_choices(ranks0, max_choices)]
        for special in ("<eos>", "<unk>"):
            if special in tokens0 and special not in picked:
                picked.append(special)
        choices = picked
    choices = list(dict.fromkeys(str(c) for c in choices))
    if not choices:
        raise ValueError("choices must name at least one token")
    known = set().union(*(set(t) for *_, t in checked.values()))
    unknown = [c for c in choices if c not in known]
    if unknown:
        raise ValueError(f"choices {unknown} are not tracked by any model")
    if initial_token is not None and str(initial_token) not in choices:
        raise ValueError(f"initial_token must be one of the choices, got {initial_token!r}")
    start = choices.index(str(initial_token)) if initial_token is not None else 0
    shift = 0.0 if offset is None else float(offset)
    limits = {}
    for label, (epochs, temps, ranks, tokens) in checked.items():
        lo, hi = float(temps.min()) - shift, float(temps.max()) - shift
        pad = 0.05 * (hi - lo) if hi > lo else 0.05 * max(abs(hi), 1e-6)
        limits[label] = (lo - pad, hi + pad)

    def shown_token(token):
        run_ranks = [ranks[tokens.index(token)] for *_, ranks, tokens in checked.values() if token in tokens]
        return f"{token} (rank {run_ranks[0] + 1:,})" if run_ranks else token

    controls = []
    if len(checked) > 1:
        controls.append(Control("model", tuple(checked), label="model", kind="dropdown"))
    controls.append(Control("token", tuple(choices), label="token to follow", kind="dropdown", initial=start,
                            shown=tuple(shown_token(c) for c in choices)))

    def draw(token, model=None):
        label = model if model is not None else next(iter(checked))
        epochs, temps, ranks, tokens = checked[label]
        if token not in tokens:
            fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.6))
            ax.text(0.5, 0.5, f"{label} does not track {token!r}", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            return fig
        i = tokens.index(token)
        title = f"{label}: {token!r}, frequency rank {ranks[i] + 1:,} of the tracked tokens' vocabulary"
        return temperature_over_training_plot(epochs, temps, ranks, labels=tokens, highlight=i, offset=shift,
                                              ylim=limits[label], title=title)

    return explorer_html(
        draw,
        controls,
        dpi=dpi,
        alt="line plot of the temperature of tracked tokens against epochs of training, one thin line per token "
        "coloured by frequency rank, with the chosen token drawn thick; menus choose the model and the token",
    )
