"""Figures of the book: static matplotlib plots and explorers that stay
interactive offline.

One module per family of figures; every name is importable from
``nmst_lib.plots`` itself, which is how the chapters, the classroom kit and
the tests import them:

* :mod:`nmst_lib.plots.style`: colours (the colour-blind-safe palette of
  Okabe and Ito 2008), line styles of the output layers, figure sizes and
  shared legends; every chapter.
* :mod:`nmst_lib.plots.explorers`: the explorer machinery. Every interactive
  figure has two front-ends built on ONE drawing function: a self-contained
  HTML version for the static website, where every setting of the controls
  was rendered in advance to a PNG frame and a few lines of JavaScript
  switch frames when a slider or menu moves (no kernel, no network), and an
  ``ipywidgets`` version for a live kernel (Colab, Jupyter) that redraws on
  every move: :func:`~nmst_lib.plots.explorers.explorer_html` and
  :func:`~nmst_lib.plots.explorers.explorer_widget`, fed the same
  :class:`~nmst_lib.plots.explorers.Explorer`.
* :mod:`nmst_lib.plots.eos_curves`: p(eos | t) of the VA, ST and NMST output
  layers along one trajectory of the wish to stop lambda(t), with the lower
  bound f_lb(t) and its half-life (Chapters 4 and 5, ``04_self_terminating``
  and ``05_nmst``).
* :mod:`nmst_lib.plots.termination`: the non-termination ratio r_nt(L)
  (Choi, Cho, Lee 2023, eq. 11) on log-log axes (Chapters 2-6, 8, 9),
  length distributions (Chapters 6-7), training histories (Chapter 6) and
  the eps trade-off of perplexity and r_nt (Chapter 7).
* :mod:`nmst_lib.plots.token_traces`: p(eos) along real lines with the
  tokens on the x axis (Chapter 6, ``06_wikitext``, and GPT-2's stored
  results in Chapter 7, ``07_gpt2``; Choi, Cho, Lee 2023, Figs. 3 and 6).
* :mod:`nmst_lib.plots.sparse_support`: how many tokens alpha-entmax keeps
  (Chapter 8, ``08_sparse``).
* :mod:`nmst_lib.plots.temperature_curves`: contextual temperature over
  training, by position and at the line's end (Chapter 9,
  ``09_temperature``).

The explorers, each with both front-ends:
:func:`~nmst_lib.plots.eos_curves.eos_explorer_html` /
:func:`~nmst_lib.plots.eos_curves.eos_explorer_widget`,
:func:`~nmst_lib.plots.termination.rnt_explorer_html` /
:func:`~nmst_lib.plots.termination.rnt_explorer_widget`,
:func:`~nmst_lib.plots.token_traces.eos_token_explorer_html` /
:func:`~nmst_lib.plots.token_traces.eos_token_explorer_widget`,
:func:`~nmst_lib.plots.sparse_support.entmax_alpha_explorer_html` /
:func:`~nmst_lib.plots.sparse_support.entmax_alpha_explorer_widget` and
:func:`~nmst_lib.plots.temperature_curves.temperature_explorer_html` /
:func:`~nmst_lib.plots.temperature_curves.temperature_explorer_widget`.

The numbers the eos-probability figure draws are computed in
:mod:`nmst_lib.theory` (:func:`~nmst_lib.theory.eos_trajectory`,
:func:`~nmst_lib.theory.eos_probabilities`,
:data:`~nmst_lib.theory.EOS_SHAPES`); they are importable from here as well,
as the chapters have always imported them.
"""

# where the chapters have always imported them from (the `as` marks a
# re-export that is not in __all__)
from ..theory import EOS_SHAPES as EOS_SHAPES
from ..theory import eos_probabilities as eos_probabilities
from ..theory import eos_trajectory as eos_trajectory
from .eos_curves import (
    eos_explorer_html,
    eos_explorer_widget,
    plot_eos_probabilities,
)
from .explorers import Control, Explorer, explorer_html, explorer_widget
from .sparse_support import (
    entmax_alpha_explorer_html,
    entmax_alpha_explorer_widget,
    plot_entmax_ranks,
    support_size_plot,
)
from .style import (
    COLORS,
    COLUMN_WIDTH,
    FIGURE_DPI,
    HEAD_STYLES,
    STEP_AXIS_LABEL,
    Palette,
    column_figure,
    legend_below,
    model_style,
    shared_legend,
    use_book_style,
)
from .temperature_curves import (
    TEMPERATURE_CMAP,
    eos_temperature_plot,
    temperature_by_position_plot,
    temperature_explorer_html,
    temperature_explorer_widget,
    temperature_over_training_plot,
)
from .termination import (
    eps_tradeoff_plot,
    history_plot,
    length_cdf_plot,
    length_histogram_plot,
    rnt_explorer_html,
    rnt_explorer_widget,
    rnt_plot,
)
from .token_traces import (
    SENTENCE_END_CHARS,
    eos_token_explorer_html,
    eos_token_explorer_widget,
    eos_token_plot,
    eos_trace_plot,
)
from .token_traces import _is_sentence_end as _is_sentence_end
from .token_traces import _token_labels as _token_labels

# Grouped by figure family, in the order of the modules above (the API page,
# book/api.md, shows each module with its own __all__). EOS_SHAPES,
# eos_trajectory and eos_probabilities are documented with nmst_lib.theory,
# where they live; _token_labels and _is_sentence_end are here for the tests.
__all__ = [  # noqa: RUF022
    # style
    "COLORS",
    "Palette",
    "HEAD_STYLES",
    "COLUMN_WIDTH",
    "FIGURE_DPI",
    "STEP_AXIS_LABEL",
    "use_book_style",
    "column_figure",
    "legend_below",
    "shared_legend",
    "model_style",
    # explorers
    "Control",
    "Explorer",
    "explorer_html",
    "explorer_widget",
    # eos curves (Chapters 4-5)
    "plot_eos_probabilities",
    "eos_explorer_html",
    "eos_explorer_widget",
    # termination and lengths (Chapters 2-9)
    "rnt_plot",
    "rnt_explorer_html",
    "rnt_explorer_widget",
    "history_plot",
    "length_cdf_plot",
    "length_histogram_plot",
    "eps_tradeoff_plot",
    # token traces (Chapters 6-7)
    "SENTENCE_END_CHARS",
    "eos_trace_plot",
    "eos_token_plot",
    "eos_token_explorer_html",
    "eos_token_explorer_widget",
    # sparse support (Chapter 8)
    "support_size_plot",
    "plot_entmax_ranks",
    "entmax_alpha_explorer_html",
    "entmax_alpha_explorer_widget",
    # temperature (Chapter 9)
    "TEMPERATURE_CMAP",
    "temperature_over_training_plot",
    "temperature_by_position_plot",
    "eos_temperature_plot",
    "temperature_explorer_html",
    "temperature_explorer_widget",
]
