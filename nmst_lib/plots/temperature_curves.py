"""Figures of contextual temperature: Chapter 9 (``09_temperature``).

The analogues of Fig. 1 of *Contextual Temperature for Language Modeling*
(2020) for the book's models (:mod:`nmst_lib.temperature`):
:func:`temperature_over_training_plot` (each tracked token's temperature over
training, coloured by frequency rank, :data:`TEMPERATURE_CMAP`),
:func:`temperature_by_position_plot` (the mean temperature by position in the
line) and :func:`eos_temperature_plot` (eos's temperature as the line's end
nears). "Choose the token to follow" is :func:`temperature_explorer_html` on
the website and :func:`temperature_explorer_widget` in a live kernel.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from .._validation import check_index, check_positive_int
from .explorers import Control, Explorer
from .style import (
    COLORS,
    COLUMN_WIDTH,
    FIGURE_DPI,
    _default_style,
    _figure_and_axes,
    _format_number,
)

# in reading order: the API page (book/api.md) lists them so
__all__ = [  # noqa: RUF022
    "TEMPERATURE_CMAP",
    "temperature_over_training_plot",
    "temperature_by_position_plot",
    "eos_temperature_plot",
    "temperature_explorer_html",
    "temperature_explorer_widget",
]

#: The colour map of Chapter 9's token-by-frequency figures: viridis,
#: perceptually uniform and readable with every common form of colour
#: blindness (dark = frequent tokens).
TEMPERATURE_CMAP = "viridis"

_RIGHT_LEGEND = {"loc": "center left", "bbox_to_anchor": (1.01, 0.5)}


def _numpy(values, dtype=None) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.cpu()
    return np.asarray(values, dtype=dtype)


def _check_training_curves(epochs, temperatures, ranks, labels=None):
    """Validate (epochs [R], temperatures [R, N], ranks [N], labels [N]) and
    return numpy copies."""
    epochs = _numpy(epochs, np.float64)
    temps = _numpy(temperatures, np.float64)
    ranks = _numpy(ranks)
    if epochs.ndim != 1 or epochs.size == 0:
        raise ValueError(
            "epochs must be a non-empty 1-D sequence (one per monitor "
            f"record), got shape {epochs.shape}"
        )
    if not np.all(np.diff(epochs) >= 0):
        raise ValueError(
            "epochs must be non-decreasing (the monitor records in training "
            "order)"
        )
    if temps.ndim == 1:
        temps = temps[:, None]
    if temps.ndim != 2 or temps.shape[0] != epochs.size or temps.shape[1] == 0:
        raise ValueError(
            f"temperatures must be [records, tokens] with {epochs.size} "
            f"records, got shape {temps.shape}"
        )
    if not np.all(np.isfinite(temps)) or not np.all(temps > 0):
        raise ValueError("temperatures must be finite and > 0")
    if ranks.ndim != 1 or ranks.size != temps.shape[1]:
        raise ValueError(
            "ranks must give one frequency rank per tracked token "
            f"({temps.shape[1]}), got shape {ranks.shape}"
        )
    if not np.issubdtype(ranks.dtype, np.integer) or np.any(ranks < 0):
        raise ValueError(
            "ranks must be integers >= 0 (0 = the most frequent token)"
        )
    if labels is not None:
        labels = [str(x) for x in labels]
        if len(labels) != temps.shape[1]:
            raise ValueError(
                f"labels must name each of the {temps.shape[1]} tracked "
                f"tokens, got {len(labels)}"
            )
    return epochs, temps, ranks.astype(np.int64), labels


def _rank_colorbar(fig, ax, norm, cmap) -> None:
    mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
    mappable.set_array([])
    bar = fig.colorbar(mappable, ax=ax, pad=0.02, fraction=0.05)
    bar.set_label("frequency rank (1 = most frequent)", fontsize=9)


def _draw_token_lines(ax, epochs, y, ranks, cmap, norm, highlight) -> None:
    """One line per tracked token but ``highlight``, coloured by frequency
    rank: rare tokens first, frequent ones on top; thin when a token is
    highlighted."""
    thin = highlight is not None
    for i in np.argsort(-ranks, kind="stable"):
        if i == highlight:
            continue
        ax.plot(
            epochs,
            y[:, i],
            color=cmap(norm(ranks[i] + 1)),
            linewidth=0.6 if thin else 1.0,
            alpha=0.35 if thin else 0.8,
        )


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
    """The temperature of tracked tokens over training, one line per token
    coloured by its frequency rank: the analogue of Fig. 1(a) of *Contextual
    Temperature for Language Modeling* (2020).

    Args:
        epochs: ``[R]`` epochs of training done at each monitor record (0 =
            before training).
        temperatures: ``[R, N]`` mean temperature of each of the N tracked
            tokens at each record.
        ranks: ``[N]`` frequency ranks in the training data (0 = the most
            frequent token); the colour bar shows them 1-based on a log
            scale.
        labels: ``[N]`` the tokens' strings (used for ``highlight``'s legend
            entry).
        highlight: index of one token drawn thick in vermillion above the
            others (which are then drawn thin), as in the explorer of
            Chapter 9.
        offset: subtracted from every temperature (the paper plots
            ``T - 2``, the lower end a/b of its range); the y label says so.

    Chapter 9 (``09_temperature``). Returns the figure.
    """
    epochs, temps, ranks, labels = _check_training_curves(
        epochs, temperatures, ranks, labels
    )
    if (
        isinstance(offset, bool)
        or not isinstance(offset, numbers.Real)
        or not math.isfinite(float(offset))
    ):
        raise TypeError(f"offset must be a finite number, got {offset!r}")
    if highlight is not None:
        highlight = check_index(highlight, temps.shape[1], "highlight")
    if ax is None:
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.6))
        right = 0.84 if colorbar else 0.97
        fig.subplots_adjust(left=0.11, right=right, bottom=0.14, top=0.9)
    else:
        fig = ax.figure
    cmap = plt.get_cmap(TEMPERATURE_CMAP)
    vmax = max(int(ranks.max()) + 1, 2)
    norm = matplotlib.colors.LogNorm(vmin=1, vmax=vmax)
    y = temps - float(offset)
    _draw_token_lines(ax, epochs, y, ranks, cmap, norm, highlight)
    if highlight is not None:
        name = labels[highlight] if labels else f"token {highlight}"
        ax.plot(
            epochs,
            y[:, highlight],
            color=COLORS["vermillion"],
            linewidth=2.6,
            marker="o",
            markersize=3,
            label=f"{name} (frequency rank {ranks[highlight] + 1:,})",
        )
        ax.legend(loc="best", fontsize=9, framealpha=0.8, frameon=True)
    if colorbar:
        _rank_colorbar(fig, ax, norm, cmap)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel("epochs of training")
    shift = f" − {_format_number(float(offset))}" if offset else ""
    ax.set_ylabel("temperature" + shift)
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def _check_band(label, s, x_key: str):
    """One series of a band plot as float arrays (x, mean, lower, upper)."""
    if not isinstance(s, Mapping) or any(
        k not in s for k in ("mean", "lower", "upper")
    ):
        raise ValueError(
            f"series {label!r} must be a mapping with 'mean', 'lower' and "
            f"'upper' (and optionally '{x_key}')"
        )
    mean = np.asarray(s["mean"], dtype=np.float64)
    lower = np.asarray(s["lower"], dtype=np.float64)
    upper = np.asarray(s["upper"], dtype=np.float64)
    if s.get(x_key) is not None:
        x = np.asarray(s[x_key], dtype=np.float64)
    else:
        x = np.arange(1, mean.size + 1, dtype=np.float64)
    if (
        mean.ndim != 1
        or mean.size == 0
        or any(a.shape != mean.shape for a in (lower, upper, x))
    ):
        raise ValueError(
            f"series {label!r}: {x_key}, mean, lower and upper must be 1-D "
            "of the same non-zero length"
        )
    finite = np.isfinite(mean)
    outside = (lower > mean + 1e-12) | (upper < mean - 1e-12)
    if np.any(finite & outside):
        raise ValueError(
            f"series {label!r}: the band must contain the mean "
            "(lower <= mean <= upper)"
        )
    return x, mean, lower, upper


def _check_band_series(series, x_key: str) -> dict:
    if not isinstance(series, Mapping) or not series:
        raise TypeError(
            "series must be a non-empty mapping "
            f"{{label: {{'{x_key}', 'mean', 'lower', 'upper'}}}}"
        )
    return {
        str(label): _check_band(label, s, x_key) for label, s in series.items()
    }


def _draw_band(ax, label, x, mean, lower, upper, style, markersize):
    """A mean line with its band in the line's colour; returns the line."""
    (line,) = ax.plot(
        x, mean, marker="o", markersize=markersize, label=label, **style
    )
    ax.fill_between(
        x, lower, upper, color=line.get_color(), alpha=0.18, linewidth=0
    )
    return line


def _check_segments(segments, n: int):
    segments = [
        (str(name), check_positive_int(length, "segment length"))
        for name, length in segments
    ]
    total = sum(length for _, length in segments)
    if total != n:
        raise ValueError(
            f"the segment lengths must add up to the {n} positions, "
            f"got {total}"
        )
    return segments


def _mark_segments(ax, x0, segments) -> None:
    """Segment names above the axes, dotted lines between the segments."""
    start = 0
    for k, (name, length) in enumerate(segments):
        centre = (x0[start] + x0[start + length - 1]) / 2
        ax.text(
            centre,
            1.01,
            name,
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=9,
        )
        if k > 0:
            between = (x0[start - 1] + x0[start]) / 2
            ax.axvline(between, color="0.5", linestyle=":", linewidth=1)
        start += length


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
    """Mean temperature against the position in the line, with 95% confidence
    bands: the analogue of Fig. 1(b) of *Contextual Temperature for Language
    Modeling* (2020).

    Args:
        series: ``{label: {"mean": [P], "lower": [P], "upper": [P], "x": [P]
            (optional)}}``, one model per label; ``lower``/``upper`` are the
            band's ends (e.g. a 95% normal interval over lines). Positions
            without data may be NaN.
        tick_labels: one label per position (e.g. the protocol "first 5,
            middle 5, last 5" predicted tokens of lines of at least 15
            tokens, as in the paper).
        segments: ``[(name, length), ...]`` splitting the positions into
            named groups, separated by dotted lines and named above the axes
            (e.g. ``[("first", 5), ("middle", 5), ("last", 5)]``); the
            lengths must add up to P.
        styles: matplotlib keyword arguments per label.

    Chapter 9 (``09_temperature``). Returns the figure.
    """
    data = _check_band_series(series, "x")
    styles = dict(styles or {})
    n = next(iter(data.values()))[0].size
    if tick_labels is not None:
        tick_labels = [str(t) for t in tick_labels]
        if any(x.size != len(tick_labels) for x, *_ in data.values()):
            raise ValueError(
                f"tick_labels must give one label per position ({n}), "
                f"got {len(tick_labels)}"
            )
    if segments is not None:
        segments = _check_segments(segments, n)
    fig, ax = _figure_and_axes(ax)
    for i, (label, (x, mean, lower, upper)) in enumerate(data.items()):
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        _draw_band(ax, label, x, mean, lower, upper, style, 3.5)
    x0 = next(iter(data.values()))[0]
    if tick_labels is not None:
        ax.set_xticks(x0)
        ax.set_xticklabels(tick_labels, fontsize=8)
    if segments is not None:
        _mark_segments(ax, x0, segments)
    ax.set_xlabel("position of the predicted token in the line")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10, pad=16 if segments else None)
    ax.legend(fontsize=9, **_RIGHT_LEGEND)
    return fig


def eos_temperature_plot(
    series: Mapping[str, Mapping],
    *,
    reference: Mapping[str, float] | None = None,
    styles: Mapping[str, Mapping] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
) -> Figure:
    """The temperature of eos against the distance to the line's true end, with
    95% bands.

    Args:
        series: ``{label: {"distance": [D], "mean": [D], "lower": [D],
            "upper": [D]}}``: at distance 0 the model predicts the token the
            line really ends with (eos), at distance d the prediction d
            tokens earlier. Drawn with the end on the right.
        reference: ``{label: value}``, a horizontal line per model (e.g. the
            mean temperature of all tokens, or the range's ends), dashed in
            the series' colour.
        styles: matplotlib keyword arguments per label.

    A temperature does not set eos's probability by itself: a lower
    ``T_eos`` raises ``z_eos / T_eos`` only where ``z_eos`` is positive (where
    it is negative a higher one does), and no temperature in the range makes
    eos the most probable token unless its logit is close enough to the top
    (Chapter 9, ``09_temperature``, the proposition on per-token
    temperatures). Returns the figure.
    """
    data = _check_band_series(series, "distance")
    styles = dict(styles or {})
    fig, ax = _figure_and_axes(ax)
    for i, (label, (d, mean, lower, upper)) in enumerate(data.items()):
        if np.any(d < 0):
            raise ValueError(
                f"series {label!r}: distances count tokens before the end "
                "and must be >= 0"
            )
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        line = _draw_band(ax, label, -d, mean, lower, upper, style, 3)
        if reference and label in reference:
            ax.axhline(
                float(reference[label]),
                color=line.get_color(),
                linestyle="--",
                linewidth=1,
                label=f"{label}: all tokens",
            )
    ticks = [t for t in ax.get_xticks() if t <= 0]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{abs(t):g}" for t in ticks])
    ax.set_xlim(min(-d.max() for d, *_ in data.values()) - 0.5, 0.5)
    ax.set_xlabel(
        "tokens before the line's end (0: the step that should predict eos)"
    )
    ax.set_ylabel("temperature of eos")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=9, **_RIGHT_LEGEND)
    return fig


def _default_token_choices(ranks: np.ndarray, n: int) -> list[int]:
    """Up to ``n`` token indices spread over the frequency ranks: the most
    frequent ones, then log-spaced ranks down to the rarest tracked token."""
    order = np.argsort(ranks, kind="stable")
    if order.size <= n:
        return order.tolist()
    head = order[: max(1, n // 3)].tolist()
    rest = order[len(head) :]
    spaced = np.geomspace(1, rest.size, n - len(head)).round().astype(int)
    picks = np.unique(spaced - 1)
    return head + rest[picks].tolist()


def _check_runs(runs) -> dict:
    """``{label: (epochs, temperatures, ranks, tokens)}``, checked."""
    if not isinstance(runs, Mapping) or not runs:
        raise TypeError(
            "runs must be a non-empty mapping {model label: {'epochs', "
            "'temperatures', 'ranks', 'tokens'}}"
        )
    checked = {}
    for label, run in runs.items():
        if not isinstance(run, Mapping) or any(
            k not in run for k in ("epochs", "temperatures", "ranks", "tokens")
        ):
            raise ValueError(
                f"run {label!r} must be a mapping with 'epochs', "
                "'temperatures', 'ranks' and 'tokens'"
            )
        checked[str(label)] = _check_training_curves(
            run["epochs"], run["temperatures"], run["ranks"], run["tokens"]
        )
    return checked


def _token_choices(checked, choices, max_choices: int) -> list[str]:
    """The tokens the menu offers (default: spread over the first model's
    frequency ranks, with ``<eos>`` and ``<unk>`` when tracked)."""
    if choices is None:
        _, _, ranks0, tokens0 = next(iter(checked.values()))
        picks = _default_token_choices(ranks0, max_choices)
        choices = [tokens0[i] for i in picks]
        for special in ("<eos>", "<unk>"):
            if special in tokens0 and special not in choices:
                choices.append(special)
    choices = list(dict.fromkeys(str(c) for c in choices))
    if not choices:
        raise ValueError("choices must name at least one token")
    known = set().union(*(set(t) for *_, t in checked.values()))
    unknown = [c for c in choices if c not in known]
    if unknown:
        raise ValueError(f"choices {unknown} are not tracked by any model")
    return choices


def _temperature_limits(checked, shift: float) -> dict:
    """The y range of each model, the same for all of its tokens."""
    limits = {}
    for label, (_, temps, _, _) in checked.items():
        lo, hi = float(temps.min()) - shift, float(temps.max()) - shift
        pad = 0.05 * (hi - lo) if hi > lo else 0.05 * max(abs(hi), 1e-6)
        limits[label] = (lo - pad, hi + pad)
    return limits


def _untracked_figure(label: str, token: str) -> Figure:
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.6))
    ax.text(
        0.5,
        0.5,
        f"{label} does not track {token!r}",
        ha="center",
        va="center",
        transform=ax.transAxes,
    )
    ax.set_axis_off()
    return fig


def _temperature_controls(checked, choices, start) -> tuple[Control, ...]:
    def shown_token(token):
        found = [
            ranks[tokens.index(token)]
            for *_, ranks, tokens in checked.values()
            if token in tokens
        ]
        return f"{token} (rank {found[0] + 1:,})" if found else token

    controls = []
    if len(checked) > 1:
        controls.append(
            Control("model", tuple(checked), label="model", kind="dropdown")
        )
    controls.append(
        Control(
            "token",
            tuple(choices),
            label="token to follow",
            kind="dropdown",
            initial=start,
            shown=tuple(shown_token(c) for c in choices),
        )
    )
    return tuple(controls)


def _temperature_explorer(
    runs, choices, max_choices, initial_token, offset
) -> Explorer:
    """The temperature explorer's drawing function and controls, shared by
    :func:`temperature_explorer_html` and
    :func:`temperature_explorer_widget`."""
    checked = _check_runs(runs)
    max_choices = check_positive_int(max_choices, "max_choices")
    choices = _token_choices(checked, choices, max_choices)
    if initial_token is not None and str(initial_token) not in choices:
        raise ValueError(
            f"initial_token must be one of the choices, got {initial_token!r}"
        )
    start = 0
    if initial_token is not None:
        start = choices.index(str(initial_token))
    shift = 0.0 if offset is None else float(offset)
    limits = _temperature_limits(checked, shift)
    controls = _temperature_controls(checked, choices, start)

    def draw(token, model=None):
        label = model if model is not None else next(iter(checked))
        epochs, temps, ranks, tokens = checked[label]
        if token not in tokens:
            return _untracked_figure(label, token)
        i = tokens.index(token)
        title = (
            f"{label}: {token!r}, frequency rank {ranks[i] + 1:,} of the "
            "tracked tokens' vocabulary"
        )
        return temperature_over_training_plot(
            epochs,
            temps,
            ranks,
            labels=tokens,
            highlight=i,
            offset=shift,
            ylim=limits[label],
            title=title,
        )

    alt = (
        "line plot of the temperature of tracked tokens against epochs of "
        "training, one thin line per token coloured by frequency rank, with "
        "the chosen token drawn thick; menus choose the model and the token"
    )
    return Explorer(draw, controls, alt)


def temperature_explorer_html(
    runs: Mapping[str, Mapping],
    *,
    choices: Sequence[str] | None = None,
    max_choices: int = 16,
    initial_token: str | None = None,
    offset: float | None = None,
    dpi: int = FIGURE_DPI,
):
    """The temperature of one token over training, with its frequency rank:
    "choose the token to follow" on the static website (Chapter 9,
    ``09_temperature``; *Contextual Temperature for Language Modeling* (2020),
    Fig. 1(a)).

    A menu picks the model (when there are several) and a menu picks the
    token; every frame is drawn by :func:`temperature_over_training_plot`
    with every tracked token in the background and the chosen one
    highlighted, on the same y axis for all tokens of a model. The frames are
    pre-rendered PNGs switched by JavaScript
    (:func:`~nmst_lib.plots.explorers.explorer_html`): no kernel needed. The
    live twin is :func:`temperature_explorer_widget`.

    Args:
        runs: ``{model label: {"epochs": [R], "temperatures": [R, N],
            "ranks": [N], "tokens": [N]}}`` (ranks 0-based by training
            frequency; tokens as strings, escaped in the menu).
        choices: the token strings offered in the menu (default: up to
            ``max_choices`` tokens spread over the frequency ranks of the
            first model, always with ``<eos>`` and ``<unk>`` when tracked). A
            choice missing from a model is drawn as a note.
        initial_token: the token shown first (default: the first choice).
        offset: subtracted from the temperatures (default: none).

    Frames: models x choices; keep it to a few dozen.
    """
    explorer = _temperature_explorer(
        runs, choices, max_choices, initial_token, offset
    )
    return explorer.html(dpi=dpi)


def temperature_explorer_widget(
    runs: Mapping[str, Mapping],
    *,
    choices: Sequence[str] | None = None,
    max_choices: int = 16,
    initial_token: str | None = None,
    offset: float | None = None,
):
    """:func:`temperature_explorer_html` for a live kernel: the same menus as
    an ``ipywidgets.interactive``.

    Takes the same runs and draws the same frames with
    :func:`temperature_over_training_plot`, on demand
    (:func:`~nmst_lib.plots.explorers.explorer_widget`). Chapter 9
    (``09_temperature``).
    """
    explorer = _temperature_explorer(
        runs, choices, max_choices, initial_token, offset
    )
    return explorer.widget()
