"""The book's figure style: colours, line styles, figure sizes and shared axis
helpers.

Every figure of the book is drawn one text column wide (:data:`COLUMN_WIDTH`
inches at :data:`FIGURE_DPI`) in the colour-blind-safe palette of Okabe and Ito
(2008) (:data:`COLORS`), with each output layer in one colour and dash
(:data:`HEAD_STYLES`: VA dotted, ST dashed, NMST solid). Today this module
serves:

* every chapter: :func:`use_book_style` (called by
  :func:`nmst_lib.notebook.setup_notebook` in each chapter's first cell),
  :data:`COLORS` and :func:`column_figure` (Chapters 1-3, 6, 9 draw their own
  panels with it);
* the figure families of :mod:`nmst_lib.plots` and the chapters that add
  curves to them: :func:`legend_below` (Chapters 3, 5, 8),
  :func:`shared_legend`, :func:`model_style` and :data:`STEP_AXIS_LABEL`
  (Chapters 6-7).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .._validation import check_eps, check_positive_int

# in reading order: the API page (book/api.md) lists them so
__all__ = [  # noqa: RUF022
    "COLORS",
    "Palette",
    "HEAD_STYLES",
    "COLUMN_WIDTH",
    "FIGURE_DPI",
    "STEP_AXIS_LABEL",
    "use_book_style",
    "column_figure",
    "model_style",
    "legend_below",
    "shared_legend",
]


class Palette(tuple):
    """An ordered tuple of colours that can also be indexed by name:
    ``COLORS[0]`` or ``COLORS["blue"]``.

    Iterating or indexing by position gives the colours in the order the book
    cycles through them; the dict ``names`` maps each name to its colour.
    Every chapter's figures use :data:`COLORS` (Chapter 1, ``01_decoding``,
    onwards).
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
                raise KeyError(
                    f"no colour named {key!r}; "
                    f"the palette has {list(self.names)}"
                ) from None
        return super().__getitem__(key)


#: The Okabe-Ito palette (Okabe and Ito 2008), distinguishable with every
#: common form of colour blindness; the book's only colours, in the order
#: figures cycle through them. Index by position (``COLORS[0]``) or by name
#: (``COLORS["vermillion"]``).
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

#: Colour and line style of each output layer, used by every figure that
#: compares them (VA dotted, ST dashed, NMST solid, as in Choi, Cho, Lee
#: 2023, Fig. 2).
HEAD_STYLES: dict[str, dict[str, object]] = {
    "VA": {"color": COLORS["vermillion"], "linestyle": ":", "linewidth": 2.2},
    "ST": {"color": COLORS["blue"], "linestyle": "--", "linewidth": 2.0},
    "NMST": {"color": COLORS["green"], "linestyle": "-", "linewidth": 2.0},
}

_CYCLE = list(COLORS[:7])  # yellow is too light for lines on white
_LINESTYLES = ["-", "--", ":", "-."]

#: Width of the book's text column in inches: figures are drawn at this width
#: and :data:`FIGURE_DPI`, i.e. 670 pixels, the width the website's column
#: shows them at (672 CSS px at a 1,280 px window), so their text is printed
#: at the size it was set in.
COLUMN_WIDTH = 6.7
#: Resolution of every figure of the book (inline PNGs and explorer frames).
FIGURE_DPI = 100

#: Axis label of a step axis along a real line (the book's step convention,
#: ARCHITECTURE.md): step t counts continuation tokens, t = 1 predicts the first
#: token after the context, and the tick of step t is labelled with the token
#: y_t being predicted (Chapter 6, ``06_wikitext``; Chapter 7, ``07_gpt2``).
STEP_AXIS_LABEL = "step t (token being predicted)"


def use_book_style() -> None:
    """Set matplotlib's defaults to the book's style: Okabe-Ito colours, light
    grids, no top/right spines.

    Figures are :data:`COLUMN_WIDTH` inches wide at :data:`FIGURE_DPI` (the
    width of the website's text column) with 10-point text, so nothing is
    shrunk on the page. Called by :func:`nmst_lib.notebook.setup_notebook` in
    the first cell of every chapter (Chapter 1, ``01_decoding``, onwards).
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


def column_figure(
    nrows: int = 1,
    ncols: int = 1,
    *,
    panel_height: float = 2.9,
    legend_width: float = 0.0,
    **subplots,
):
    """A figure one text column wide: ``nrows`` x ``ncols`` panels, each
    ``panel_height`` inches tall.

    The book's figures are drawn at the width the page shows them
    (:data:`COLUMN_WIDTH`), so a figure with several panels stacks them in
    rows of at most two rather than shrinking a long row. A legend placed
    outside the axes on the right widens the saved figure (the book saves with
    a tight bounding box): ``legend_width`` inches are then taken off the
    figure's width so that figure and legend together still fit the column.
    Extra keyword arguments go to :func:`matplotlib.pyplot.subplots`
    (``sharey``, ``squeeze``, ...). Returns ``(fig, axes)`` as
    ``plt.subplots`` does. Chapters 1-3, 6 and 9.

    Raises:
        ValueError: ``nrows`` or ``ncols`` is not a positive integer,
            ``ncols`` > 2 (a panel narrower than half the column cannot be
            read), ``panel_height`` is not positive, or ``legend_width`` is
            outside [0, COLUMN_WIDTH / 2].
    """
    nrows = check_positive_int(nrows, "nrows")
    ncols = check_positive_int(ncols, "ncols")
    if ncols > 2:
        raise ValueError(
            f"ncols={ncols}: at most 2 panels fit side by side in the "
            "column; stack the rest in more rows"
        )
    if not isinstance(panel_height, numbers.Real) or not panel_height > 0:
        raise ValueError(
            "panel_height must be a positive number of inches, "
            f"got {panel_height!r}"
        )
    if "figsize" in subplots:
        raise ValueError(
            "column_figure sets figsize itself (COLUMN_WIDTH wide); "
            "pass panel_height instead"
        )
    figsize = (COLUMN_WIDTH - legend_width, panel_height * nrows)
    return plt.subplots(nrows, ncols, figsize=figsize, **subplots)


def _figure_and_axes(ax):
    """A new figure laid out for a legend on the right (fixed margins: no
    tight-bbox pass when an explorer renders dozens of frames), or the figure
    of ``ax``."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.4))
        fig.subplots_adjust(left=0.1, right=0.58, bottom=0.15, top=0.9)
    else:
        fig = ax.figure
    return fig, ax


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


def _one_line_title(text: str, width: int = 110) -> str:
    """``text`` cut to ``width`` characters (with an ellipsis) for a one-line
    figure title."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _default_style(label: str, i: int) -> dict:
    """The line style of the ``i``-th curve, labelled ``label``: its output
    layer's (:data:`HEAD_STYLES`) when the label starts with VA, ST or NMST,
    else the next colour and dash of the book's cycle."""
    words = str(label).split()
    head = words[0].rstrip(":+,") if words else ""
    if head in HEAD_STYLES:
        return dict(HEAD_STYLES[head])
    dash = _LINESTYLES[(i // len(_CYCLE)) % len(_LINESTYLES)]
    return {
        "color": _CYCLE[i % len(_CYCLE)],
        "linestyle": dash,
        "linewidth": 2.0,
    }


def _cycle_style(i: int) -> tuple[str, str]:
    """Colour and dash of the ``i``-th of several unlabelled curves."""
    dash = _LINESTYLES[(i // len(_CYCLE)) % len(_LINESTYLES)]
    return _CYCLE[i % len(_CYCLE)], dash


_MODEL_HEADS = ("va", "st", "nmst")


def _check_model_key(key) -> tuple[str, float | None]:
    """``("va", None)``, ``("st", 5e-4)`` or ``("nmst", 5e-4)`` (head names
    in any case): a trained model of Chapter 7 named by its output layer and
    eps."""
    if not isinstance(key, tuple) or len(key) != 2:
        raise TypeError(
            "a model key must be a pair (head, eps) such as ('nmst', 5e-4) "
            f"or ('va', None), got {key!r}"
        )
    head, eps = key
    head = str(head).lower()
    if head not in _MODEL_HEADS:
        raise ValueError(
            f"a model key's head must be one of {_MODEL_HEADS}, got {key[0]!r}"
        )
    if head == "va":
        if eps is not None:
            raise ValueError(
                f"the VA model has no eps: write ('va', None), got {key!r}"
            )
        return head, None
    return head, check_eps(eps)


def model_style(head: str, eps=None, eps_grid: Sequence[float] = ()) -> dict:
    """Line style of one trained model: its output layer's colour and dash
    (:data:`HEAD_STYLES`: VA dotted, ST dashed, NMST solid), drawn thicker and
    more opaque the larger its eps is within ``eps_grid``, so that one layer
    at several eps stays readable in one plot. Chapters 6-7 (``06_wikitext``,
    ``07_gpt2``)."""
    key = str(head).upper()
    if key not in HEAD_STYLES:
        raise ValueError(
            f"head must be one of {list(HEAD_STYLES)} (any case), got {head!r}"
        )
    style = dict(HEAD_STYLES[key])
    grid = sorted({float(e) for e in eps_grid})
    if key != "VA" and eps is not None and len(grid) > 1:
        log_eps = math.log(float(eps))
        rank = min(
            range(len(grid)), key=lambda i: abs(math.log(grid[i]) - log_eps)
        )
        share = rank / (len(grid) - 1)
        style["linewidth"] = 1.3 + 1.5 * share
        style["alpha"] = 0.55 + 0.45 * share
    return style


def legend_below(ax, *, fontsize: float = 8.5):
    """Put the legend of ``ax`` under its x axis, in two columns when its
    labels are short, so the figure keeps the column's width
    (:data:`COLUMN_WIDTH`): a legend beside the axes widens a figure saved
    with a tight bounding box. For a figure that adds curves to one drawn by
    :func:`~nmst_lib.plots.termination.rnt_plot` (Chapters 3, 5 and 8 add
    their bounds). Returns the legend."""
    labels = ax.get_legend_handles_labels()[1]
    two_columns = len(labels) > 3 and max(len(x) for x in labels) <= 38
    return ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        ncol=2 if two_columns else 1,
        fontsize=fontsize,
    )


def shared_legend(
    fig: Figure,
    axes,
    *,
    ncol: int | None = None,
    fontsize: float = 8.5,
    strip: str | None = None,
) -> Figure:
    """Replace the legends of ``axes`` (panels of one figure that draw the
    same labels) by one legend under the panels, so that a two-panel figure
    scaled to a page's width keeps legible labels. Labels are taken from
    every panel in order, once each; ``strip`` (a regular expression) is
    removed from them first (e.g. ``r" \\(0 from L = [\\d,]+\\)"``, the
    panel-specific note of :func:`~nmst_lib.plots.termination.rnt_plot`).
    Call after ``tight_layout`` is not needed: the figure's bottom margin is
    made room for here, in inches, so a stack of panels gets the same gap as
    one row. Chapters 6 and 9 (``06_wikitext``, ``09_temperature``)."""
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
    # the legend's height in inches (a row of labels at ``fontsize``, and a
    # margin), as a fraction of the figure's: the same gap under a one-row
    # figure as under a tall stack of panels
    legend_inches = 0.15 + rows * 1.6 * fontsize / 72
    fig.tight_layout(rect=(0, min(0.6, legend_inches / fig.get_figheight()), 1, 1))
    fig.legend(
        list(seen.values()),
        list(seen),
        loc="lower center",
        ncol=ncol,
        fontsize=fontsize,
        frameon=False,
    )
    return fig
