"""Figures of termination and lengths: r_nt(L) curves, length distributions,
the eps trade-off.

* :func:`rnt_plot` draws the non-termination ratio r_nt(L) of Choi, Cho, Lee
  (2023), eq. 11, on log-log axes (Chapters 2, 3, 4, 5, 6, 8 and 9, and the
  classroom kit's Assignments 1 and 2); :func:`rnt_explorer_html` and its
  live twin :func:`rnt_explorer_widget` show the curves of many settings
  behind menus and sliders (Chapters 2 and 6).
* :func:`length_cdf_plot` (Chapter 6) and :func:`length_histogram_plot`
  (Chapter 7; Welleck et al. 2020, Fig. 4) show how long the continuations
  are, with the unfinished ones apart.
* :func:`history_plot` draws the per-epoch validation perplexity of the runs
  whose continuations these are (Chapter 6), and :func:`eps_tradeoff_plot`
  what termination costs in perplexity as eps grows (Chapter 7; Choi, Cho,
  Lee 2023, Fig. 5).
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

from .._validation import check_positive_int, check_records
from .explorers import Control, Explorer
from .style import (
    COLUMN_WIDTH,
    FIGURE_DPI,
    HEAD_STYLES,
    _check_model_key,
    _default_style,
    _figure_and_axes,
    _format_number,
    legend_below,
)

# in reading order: the API page (book/api.md) lists them so
__all__ = [  # noqa: RUF022
    "rnt_plot",
    "rnt_explorer_html",
    "rnt_explorer_widget",
    "history_plot",
    "length_cdf_plot",
    "length_histogram_plot",
    "eps_tradeoff_plot",
]

_L_LABEL = "maximal length L (generated tokens)"


# ---------------------------------------------------------------------------
# r_nt(L) curves (Chapters 2 and 6)
# ---------------------------------------------------------------------------


def _as_array(values) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.cpu()
    return np.asarray(values, dtype=np.float64)


def _check_curve(label, curve) -> tuple[np.ndarray, np.ndarray]:
    try:
        Ls, rnt = curve
    except (TypeError, ValueError):
        raise TypeError(
            f"curve {label!r} must be a pair (Ls, rnt) of equal-length 1-D "
            "arrays"
        ) from None
    Ls, rnt = _as_array(Ls), _as_array(rnt)
    if Ls.ndim != 1 or rnt.shape != Ls.shape or Ls.size == 0:
        raise ValueError(
            f"curve {label!r}: Ls and rnt must be 1-D arrays of the same "
            f"non-zero length, got shapes {Ls.shape} and {rnt.shape}"
        )
    if not np.all(Ls >= 1) or not np.all(np.diff(Ls) > 0):
        raise ValueError(
            f"curve {label!r}: Ls must be increasing lengths >= 1"
        )
    if not np.all((rnt >= 0) & (rnt <= 1)):
        raise ValueError(
            f"curve {label!r}: r_nt values are fractions and must lie in "
            "[0, 1]"
        )
    return Ls, rnt


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
    """Log-log plot of non-termination ratios r_nt(L) against the maximal
    length L.

    r_nt(L) is the fraction of contexts whose continuation has no eos among
    its first L tokens (Choi, Cho, Lee 2023, eq. 11; Welleck et al. 2020's
    r_L), e.g. from :func:`nmst_lib.metrics.rnt_curve` or the exact
    :mod:`nmst_lib.markov` curves. A consistent decoder's curve falls to 0 as
    L grows; an inconsistent one levels off above 0 (Choi, Cho, Lee 2023,
    Fig. 2). Zeros cannot be drawn on a log axis: a curve that reaches 0
    stops there and its legend entry says from which L on it is 0.

    Args:
        curves: ``{label: (Ls, rnt)}``; labels starting with VA, ST or NMST
            get that output layer's colour and line style
            (:data:`~nmst_lib.plots.style.HEAD_STYLES`).
        styles: optional matplotlib keyword arguments per label.
        xlim, ylim: fixed axis limits (the explorers use them to keep frames
            comparable).
        y_floor: the lowest r_nt the default y axis shows (exact curves of
            Markov models can fall to 1e-300; with N contexts an estimate is
            0 or at least 1/N).

    Chapters 2 and 6 (``02_consistency``, ``06_wikitext``).
    """
    if not isinstance(curves, Mapping) or len(curves) == 0:
        raise TypeError(
            "curves must be a non-empty mapping {label: (Ls, rnt)}"
        )
    styles = dict(styles or {})
    own_figure = ax is None
    fig, ax = _figure_and_axes(ax)
    lowest = 1.0
    for i, (label, curve) in enumerate(curves.items()):
        Ls, rnt = _check_curve(label, curve)
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        zero = np.flatnonzero(rnt == 0)
        shown = str(label)
        if zero.size:
            shown = f"{label} (0 from L = {Ls[zero[0]]:,.0f})"
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
    if ylim is None:
        ylim = (max(min(lowest, 1.0) / 2, y_floor), 1.5)
    ax.set_ylim(*ylim)
    if title:
        ax.set_title(title, fontsize=10)
    if own_figure:
        # A figure of its own keeps the column's width: its legend goes under
        # the axes (the labels of Chapter 8's models are long), never beside
        # them where it would widen the figure.
        fig.subplots_adjust(right=0.97)
        legend_below(ax)
    else:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    return fig


def _curves_table(curves_by_key) -> dict[tuple, Mapping]:
    """``curves_by_key`` with every key a tuple of the same width, checked."""
    if not isinstance(curves_by_key, Mapping) or len(curves_by_key) == 0:
        raise TypeError(
            "curves_by_key must be a non-empty mapping "
            "{key: {label: (Ls, rnt)}}"
        )
    table = {
        k if isinstance(k, tuple) else (k,): v
        for k, v in curves_by_key.items()
    }
    width = len(next(iter(table)))
    if width == 0 or any(len(k) != width for k in table):
        raise ValueError(
            "all keys of curves_by_key must have the same number of parts"
        )
    for key, curves in table.items():
        if not isinstance(curves, Mapping) or len(curves) == 0:
            raise TypeError(
                f"curves_by_key[{key!r}] must be a non-empty mapping "
                "{label: (Ls, rnt)}"
            )
    return table


def _shared_limits(table, y_floor: float):
    """One x and one y range for every curve of ``table``, so that frames
    compare at a glance."""
    all_L, all_r = [], []
    for curves in table.values():
        for label, curve in curves.items():
            Ls, rnt = _check_curve(label, curve)
            all_L.append(Ls)
            all_r.append(rnt[rnt > 0])
    L_all, r_all = np.concatenate(all_L), np.concatenate(all_r)
    xlim = (float(L_all.min()), float(L_all.max()) * 1.05)
    lowest = float(r_all.min()) if r_all.size else 1e-3
    return xlim, (max(lowest / 2, y_floor), 1.5)


def _no_result_figure(title: str) -> Figure:
    fig, ax = _figure_and_axes(None)
    ax.text(
        0.5,
        0.5,
        "no result for this combination",
        ha="center",
        va="center",
        transform=ax.transAxes,
    )
    ax.set_axis_off()
    ax.set_title(title, fontsize=10)
    return fig


def _is_numeric(values) -> bool:
    return all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values
    )


def _rnt_explorer(
    curves_by_key, control_names, title, y_floor, styles=None
) -> Explorer:
    """The r_nt explorer's drawing function and controls, shared by
    :func:`rnt_explorer_html` and :func:`rnt_explorer_widget`."""
    table = _curves_table(curves_by_key)
    width = len(next(iter(table)))
    if control_names is None:
        control_names = (
            ["setting"]
            if width == 1
            else [f"setting {i + 1}" for i in range(width)]
        )
    control_names = [str(n) for n in control_names]
    if len(control_names) != width:
        raise ValueError(
            f"control_names must name each of the {width} parts of a key, "
            f"got {len(control_names)}"
        )
    values = [list(dict.fromkeys(k[i] for k in table)) for i in range(width)]
    xlim, ylim = _shared_limits(table, y_floor)
    controls = tuple(
        Control(
            f"part{i}",
            tuple(values[i]),
            label=control_names[i],
            kind="slider"
            if _is_numeric(values[i]) and len(values[i]) > 1
            else "dropdown",
        )
        for i in range(width)
    )

    def draw(**parts):
        key = tuple(parts[f"part{i}"] for i in range(width))
        setting = ", ".join(
            f"{n} = {_format_number(v)}" for n, v in zip(control_names, key)
        )
        full_title = f"{title}: {setting}" if title else setting
        if key not in table:
            return _no_result_figure(full_title)
        return rnt_plot(
            table[key], title=full_title, xlim=xlim, ylim=ylim, styles=styles
        )

    alt = (
        "non-termination ratio r_nt(L) against the maximal length L, "
        "log-log axes"
    )
    return Explorer(draw, controls, alt)


def rnt_explorer_html(
    curves_by_key: Mapping,
    *,
    control_names: Sequence[str] | None = None,
    title: str | None = None,
    dpi: int = FIGURE_DPI,
    y_floor: float = 1e-6,
    styles: Mapping[str, Mapping] | None = None,
):
    """r_nt(L) curves for many settings on the static website: menus or sliders
    pick the setting.

    Args:
        curves_by_key: ``{key: {label: (Ls, rnt)}}``. A key is one value or a
            tuple of values, one per control (e.g. ``("LSTM", "NMST", 1e-4)``
            for architecture, output layer and eps). Each control offers its
            values in order of first appearance; numeric controls are
            sliders, the others menus. A combination without curves shows an
            empty frame that says so.
        control_names: the label of each key position (default
            ``"setting"`` or ``"setting 1"``, ``"setting 2"``, ...).
        title: shown above every frame, followed by the selected setting.
        y_floor: the lowest r_nt shown (see :func:`rnt_plot`).
        styles: matplotlib keyword arguments per curve label, as in
            :func:`rnt_plot` (e.g. to give a decoder the colour another
            figure of the chapter gives it).

    Every frame is drawn by :func:`rnt_plot` on the same axes limits, so
    frames compare at a glance (see
    :func:`~nmst_lib.plots.explorers.explorer_html`). The live twin is
    :func:`rnt_explorer_widget`. Chapters 2 and 6 (``02_consistency``,
    ``06_wikitext``).
    """
    explorer = _rnt_explorer(
        curves_by_key, control_names, title, y_floor, styles
    )
    return explorer.html(dpi=dpi)


def rnt_explorer_widget(
    curves_by_key: Mapping,
    *,
    control_names: Sequence[str] | None = None,
    title: str | None = None,
    y_floor: float = 1e-6,
    styles: Mapping[str, Mapping] | None = None,
):
    """:func:`rnt_explorer_html` for a live kernel: the same menus and sliders
    as an ``ipywidgets.interactive``.

    Takes the same curves and draws the same frames with :func:`rnt_plot`,
    on demand (:func:`~nmst_lib.plots.explorers.explorer_widget`). Chapters 2
    and 6 (``02_consistency``, ``06_wikitext``).
    """
    explorer = _rnt_explorer(
        curves_by_key, control_names, title, y_floor, styles
    )
    return explorer.widget()


# ---------------------------------------------------------------------------
# Runs and the lengths of their continuations (Chapters 6 and 7)
# ---------------------------------------------------------------------------


def history_plot(
    histories: Mapping[str, Sequence[Sequence[float]]],
    *,
    ax: plt.Axes | None = None,
    styles: Mapping[str, Mapping] | None = None,
    title: str | None = None,
    ylabel: str = "validation perplexity",
    log_y: bool = True,
) -> Figure:
    """A per-epoch metric (by default validation perplexity) of several runs,
    one line per run.

    Args:
        histories: ``{label: [run_1, run_2, ...]}``, each run the metric after
            epochs 1, 2, ...; the runs of one label share its style and one
            legend entry (e.g. the seeds of one model).
        styles: matplotlib keyword arguments per label (default:
            :func:`~nmst_lib.plots.style.model_style` when the label starts
            with VA, ST or NMST).
        log_y: a log y axis (perplexities fall geometrically early in
            training).

    A curve still falling at its last epoch shows a run that stopped before
    its validation plateau (Chapter 6, ``06_wikitext``).
    """
    if not isinstance(histories, Mapping) or not histories:
        raise TypeError(
            "histories must be a non-empty mapping "
            "{label: [values per epoch, ...]}"
        )
    styles = dict(styles or {})
    fig, ax = _figure_and_axes(ax)
    for i, (label, runs) in enumerate(histories.items()):
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        for j, run in enumerate(runs):
            values = np.asarray(run, dtype=np.float64)
            if values.ndim != 1 or values.size == 0:
                raise ValueError(
                    f"history {label!r}: every run must be a non-empty 1-D "
                    "sequence"
                )
            epochs = np.arange(1, values.size + 1)
            ax.plot(
                epochs,
                values,
                marker="o",
                markersize=3,
                label=label if j == 0 else None,
                **style,
            )
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
    """One entry of a ``lengths`` mapping (lengths, or (lengths, terminated
    flags)) as float lengths and boolean flags (all True when no flags are
    given), checked: 1-D, non-empty, lengths >= 1."""
    if isinstance(value, tuple) and len(value) == 2:
        ls = np.asarray(value[0], dtype=np.float64)
        done = np.asarray(value[1], dtype=bool)
    else:
        ls = np.asarray(value, dtype=np.float64)
        done = np.ones(ls.shape, dtype=bool)
    if ls.ndim != 1 or ls.size == 0 or done.shape != ls.shape:
        raise ValueError(
            f"lengths {label!r}: a non-empty 1-D array (and as many "
            "terminated flags)"
        )
    if np.any(ls[done] < 1):
        raise ValueError(
            f"lengths {label!r}: lengths count tokens and must be >= 1"
        )
    return ls, done


def _check_lengths(lengths) -> None:
    if not isinstance(lengths, Mapping) or not lengths:
        raise TypeError(
            "lengths must be a non-empty mapping "
            "{label: lengths or (lengths, terminated)}"
        )


def length_cdf_plot(
    lengths: Mapping[str, object],
    *,
    max_len: int | None = None,
    ax: plt.Axes | None = None,
    styles: Mapping[str, Mapping] | None = None,
    title: str | None = None,
) -> Figure:
    """Distribution functions of sequence lengths on a log x axis: for each
    label, the fraction of sequences whose length (eos included) is at most l.

    Args:
        lengths: ``{label: lengths}`` or ``{label: (lengths, terminated)}``;
            an unfinished sequence (``terminated`` False) never counts as "at
            most l", so its curve ends below 1 at ``max_len``, by the
            fraction that did not stop (compare Choi, Cho, Lee 2023, Figs.
            8-9, which draw histograms).
        max_len: the decoding limit, drawn as a vertical line when given.
        styles: matplotlib keyword arguments per label (the label ``"data"``
            is drawn as a grey area by default).

    A curve far to the right of the data's means continuations much longer
    than real lines; a near-vertical step means many continuations of one
    length. Chapter 6 (``06_wikitext``).
    """
    _check_lengths(lengths)
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
            ax.fill_between(
                xs, ys, step="post", color="0.82", label=label, zorder=0
            )
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


def _length_bars(label, value, edges, extra, max_len: int):
    """The bar heights of one label of :func:`length_histogram_plot` (the
    fractions per bin, then the "> L" bar), their edges and the share of
    sequences in the last bar."""
    ls, done = _lengths_and_flags(label, value)
    counts, _ = np.histogram(ls[done & (ls <= max_len)], bins=edges)
    fractions = counts / ls.size
    # not finished within L (a data line: longer than L)
    unfinished = float(np.mean(~done | (ls > max_len)))
    xs = np.concatenate([edges, [extra[0], extra[1]]])
    ys = np.concatenate([fractions, [0.0, unfinished]])
    return xs, ys, unfinished


def _length_axis(ax, max_len: int, extra, width: float) -> None:
    """x ticks of :func:`length_histogram_plot`: lengths up to L, then
    "> L" under the last bar."""
    ax.axvline(max_len + 0.5, color="0.5", linewidth=0.8, linestyle=":")
    ax.set_xlim(0, extra[1] + 0.5 * width)
    locator = matplotlib.ticker.MaxNLocator(nbins=6, integer=True)
    ticks = [
        t for t in locator.tick_values(1, max_len) if 0 <= t <= 0.88 * max_len
    ]
    ax.set_xticks(ticks + [sum(extra) / 2])
    ax.set_xticklabels([f"{t:,.0f}" for t in ticks] + [f"> {max_len:,}"])
    ax.set_xlabel(
        "continuation length (tokens, eos included); last bar: longer than "
        "L or unfinished"
    )


def length_histogram_plot(
    lengths: Mapping[str, object],
    *,
    max_len: int,
    bins: int = 25,
    ax: plt.Axes | None = None,
    styles: Mapping[str, Mapping] | None = None,
    title: str | None = None,
) -> Figure:
    """Histograms of continuation lengths, as fractions of each label's
    sequences, with the unfinished ones in a separate bar beyond the limit
    (Welleck et al. 2020, Fig. 4: GPT-2's greedy continuations pile up at the
    limit, the self-terminating model's do not).

    Args:
        lengths: ``{label: lengths}`` or ``{label: (lengths, terminated)}`` as
            for :func:`length_cdf_plot`; an unfinished sequence
            (``terminated`` False) and a sequence longer than ``max_len`` (a
            data line) are counted in the last bar, "> L", drawn right of
            ``max_len``. ``"data"`` is a grey area.
        max_len: the decoding limit L; the bins split [1, L] evenly.
        bins: the number of bins up to L.

    Every label's bars (unfinished bar included) sum to 1. Chapter 7
    (``07_gpt2``).
    """
    _check_lengths(lengths)
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
    # the "unfinished" bar
    extra = (max_len + 0.5 + 0.4 * width, max_len + 0.5 + 1.4 * width)
    for i, (label, value) in enumerate(lengths.items()):
        xs, ys, unfinished = _length_bars(label, value, edges, extra, max_len)
        share = f"{100 * unfinished:.0f}%"
        if label == "data" and label not in styles:
            note = f" ({share} longer than L)" if unfinished else ""
            ax.stairs(
                ys, xs, fill=True, color="0.82", label=label + note, zorder=0
            )
            continue
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        style.pop("marker", None)
        note = f" ({share} unfinished)" if unfinished else ""
        ax.stairs(ys, xs, label=label + note, **style)
    _length_axis(ax, max_len, extra, width)
    ax.set_ylabel("fraction of continuations")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center")
    return fig


# ---------------------------------------------------------------------------
# What termination costs: perplexity and r_nt against eps (Chapter 7)
# ---------------------------------------------------------------------------


def _tradeoff_rows(points) -> list[dict]:
    """The ``points`` of :func:`eps_tradeoff_plot`, checked, as dicts with
    ``head``, ``eps``, ``ppl``, ``rnt`` and their standard deviations."""
    points = check_records(points, "points", "'head', 'eps', 'ppl' and 'rnt'")
    rows = []
    for i, point in enumerate(points):
        if not isinstance(point, Mapping) or any(
            k not in point for k in ("head", "eps", "ppl", "rnt")
        ):
            raise ValueError(
                f"point {i} must be a mapping with 'head', 'eps', 'ppl' and "
                f"'rnt', got {point!r}"
            )
        head, eps = _check_model_key((point["head"], point["eps"]))
        ppl, rnt = float(point["ppl"]), float(point["rnt"])
        if not (math.isfinite(ppl) and ppl >= 1):
            raise ValueError(
                f"point {i}: a perplexity is a finite number >= 1, "
                f"got {point['ppl']!r}"
            )
        if not 0 <= rnt <= 1:
            raise ValueError(
                f"point {i}: r_nt is a fraction in [0, 1], "
                f"got {point['rnt']!r}"
            )
        rows.append(
            {
                "head": head,
                "eps": eps,
                "ppl": ppl,
                "rnt": rnt,
                "ppl_std": float(point.get("ppl_std") or 0.0),
                "rnt_std": float(point.get("rnt_std") or 0.0),
            }
        )
    if not any(r["head"] != "va" for r in rows):
        raise ValueError(
            "points need at least one ST or NMST model (an eps axis needs eps)"
        )
    return rows


def _tradeoff_panel(ax, rows, metric: str, L: int | None) -> None:
    """One panel of :func:`eps_tradeoff_plot`: ``metric`` (``"ppl"`` or
    ``"rnt"``) of ST and NMST against eps, VA as a horizontal line."""
    for head in ("st", "nmst"):
        pts = sorted(
            (r for r in rows if r["head"] == head), key=lambda r: r["eps"]
        )
        if not pts:
            continue
        ax.errorbar(
            [r["eps"] for r in pts],
            [r[metric] for r in pts],
            yerr=[r[metric + "_std"] for r in pts],
            marker="o",
            markersize=5,
            capsize=3,
            label=head.upper(),
            **HEAD_STYLES[head.upper()],
        )
    for r in (r for r in rows if r["head"] == "va"):
        style = dict(HEAD_STYLES["VA"])
        ax.axhline(r[metric], label="VA", **style)
        std = r[metric + "_std"]
        if std:
            ax.axhspan(
                r[metric] - std,
                r[metric] + std,
                color=style["color"],
                alpha=0.12,
                linewidth=0,
            )
    if L is not None:
        eps_L = -math.expm1(-math.log(2.0) / L)  # 1 - 2^(-1/L)
        ax.axvline(
            eps_L,
            color="0.45",
            linewidth=1,
            linestyle=(0, (1, 2)),
            label="ε above which $t_{1/2}$ ≤ L",
        )


def eps_tradeoff_plot(
    points: Sequence[Mapping],
    *,
    L: int | None = None,
    axes=None,
    title: str | None = None,
    ppl_label: str = "validation perplexity",
) -> Figure:
    """Validation perplexity (left) and r_nt(L) under greedy search (right)
    against eps, log x axis, for ST and NMST, with VA as a horizontal line
    (Choi, Cho, Lee 2023, Fig. 5; Welleck et al. 2020, Sec. 5.3's eps
    trade-off).

    Args:
        points: one mapping per model with ``"head"`` (``"va"``, ``"st"`` or
            ``"nmst"``), ``"eps"`` (``None`` for VA), ``"ppl"`` and ``"rnt"``
            (a fraction in [0, 1]); optional ``"ppl_std"`` and ``"rnt_std"``
            are drawn as error bars (VA: a band).
        L: the decoding limit of r_nt; when given, a vertical line marks
            eps_L = 1 - 2^(-1/L): right of it (eps > eps_L) the half-life
            step t_{1/2} = floor(-log 2 / log(1 - eps)) + 1 is at most L, so
            greedy search on an ST or NMST model stops within L steps
            *whatever the weights* (Chapter 4, greedy theorem); left of it a
            zero r_nt(L) is learned, not guaranteed.
        axes: two matplotlib axes to draw into (default: a new 1 x 2 figure).
        ppl_label: the perplexity axis's label, with its unit where the page
            has one (e.g. ``"validation perplexity (per GPT-2 token)"``).

    Chapter 7 (``07_gpt2``).
    """
    rows = _tradeoff_rows(points)
    if not isinstance(ppl_label, str) or not ppl_label:
        raise TypeError(
            f"ppl_label must be a non-empty str, got {ppl_label!r}"
        )
    if L is not None:
        L = check_positive_int(L, "L")
    if axes is None:
        fig, axes = plt.subplots(2, 1, figsize=(COLUMN_WIDTH, 5.6))
    else:
        axes = list(np.ravel(axes))
        if len(axes) != 2:
            raise ValueError(
                f"axes must hold two axes (perplexity, r_nt), got {len(axes)}"
            )
        fig = axes[0].figure
    eps_all = [r["eps"] for r in rows if r["eps"] is not None]
    rnt_label = "$r_{nt}(L)$, greedy" + (f", L = {L:,}" if L else "")
    panels = (
        (axes[0], "ppl", ppl_label),
        (axes[1], "rnt", rnt_label),
    )
    for ax, metric, ylabel in panels:
        _tradeoff_panel(ax, rows, metric, L)
        ax.set_xscale("log")
        ax.set_xlim(min(eps_all) / 2, max(eps_all) * 2)
        ax.set_xlabel("ε (log scale)")
        ax.set_ylabel(ylabel)
    axes[1].set_ylim(-0.03, 1.03)
    if title:
        fig.suptitle(title, fontsize=10)
    handles, labels = axes[1].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.legend(
        list(seen.values()),
        list(seen),
        loc="lower center",
        ncol=len(seen),
        fontsize=8.5,
        frameon=False,
    )
    return fig
