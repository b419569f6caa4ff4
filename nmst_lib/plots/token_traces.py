"""p(eos) along real lines, token by token: the figures of Chapters 6 and 7.

Step t is on the x axis and its tick is the token y_t being predicted (the
book's step convention, :data:`~nmst_lib.plots.style.STEP_AXIS_LABEL`): the
point at step t is the probability of stopping *instead of* emitting y_t (Choi,
Cho, Lee 2023, Figs. 3 and 6).

* :func:`eos_trace_plot`: the WikiText-2 models of Chapter 6
  (``06_wikitext``) along one validation line.
* :func:`eos_token_plot`: GPT-2's stored traces (Chapter 7, ``07_gpt2``),
  with sentence ends (:data:`SENTENCE_END_CHARS`) in red; the explorer that
  picks the line and the model is :func:`eos_token_explorer_html` on the
  website and :func:`eos_token_explorer_widget` in a live kernel.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from .._validation import check_eps, check_positive_int, check_records
from ..heads import eos_lower_bound
from ..report import eps_book, model_name
from .explorers import Control, Explorer
from .style import (
    _MODEL_HEADS,
    COLORS,
    COLUMN_WIDTH,
    FIGURE_DPI,
    HEAD_STYLES,
    STEP_AXIS_LABEL,
    _check_model_key,
    _default_style,
    _figure_and_axes,
    _one_line_title,
)

# in reading order: the API page (book/api.md) lists them so
__all__ = [  # noqa: RUF022
    "SENTENCE_END_CHARS",
    "eos_trace_plot",
    "eos_token_plot",
    "eos_token_explorer_html",
    "eos_token_explorer_widget",
]

#: Tokens after which a line can plausibly end (Choi, Cho, Lee 2023, Figs. 3
#: and 6 mark them in red): a token whose text, stripped of spaces, ends with
#: one of these characters.
SENTENCE_END_CHARS = (".", "!", "?")

_P_EOS_LABEL = r"$p(\langle eos\rangle \mid y_{<t}, x)$"


def _check_trace(what: str, label, values, n: int) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (n,):
        raise ValueError(
            f"{what} {label!r} has {values.size} values for {n} tokens"
        )
    return values


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

    Step t is on the x axis and its tick is labelled with the token y_t being
    predicted: the point at step t is the probability of stopping *instead
    of* emitting y_t (the book's step convention,
    :data:`~nmst_lib.plots.style.STEP_AXIS_LABEL`; Choi, Cho, Lee 2023, Figs. 3
    and 6).

    Args:
        tokens: the line's continuation tokens y_1, y_2, ... (the last one
            usually eos).
        traces: ``{label: p_eos}`` with one probability per token.
        floors: optional ``{label: f_lb}`` lower bounds 1 - (1 - eps)^t to
            draw thin and grey.
        styles: matplotlib keyword arguments per label.

    Chapter 6 (``06_wikitext``).
    """
    tokens = [str(t) for t in tokens]
    if not tokens:
        raise ValueError("tokens must not be empty")
    if not isinstance(traces, Mapping) or not traces:
        raise TypeError(
            "traces must be a non-empty mapping {label: probabilities}"
        )
    styles = dict(styles or {})
    fig, ax = _figure_and_axes(ax)
    steps = np.arange(1, len(tokens) + 1)
    for i, (label, p) in enumerate(traces.items()):
        p = _check_trace("trace", label, p, len(tokens))
        style = _default_style(label, i)
        style.update(styles.get(label, {}))
        ax.plot(steps, p, marker=".", label=label, **style)
    for label, f in (floors or {}).items():
        f = _check_trace("floor", label, f, len(tokens))
        ax.plot(
            steps, f, color="0.55", linewidth=0.9, linestyle="-.", label=label
        )
    ax.set_yscale("log")
    ax.set_xticks(steps)
    ax.set_xticklabels(tokens, rotation=90, fontsize=7)
    ax.set_xlabel(STEP_AXIS_LABEL)
    ax.set_ylabel(_P_EOS_LABEL + " (log scale)")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------
# Self-terminating GPT-2 (Chapter 7)
# ---------------------------------------------------------------------------


def _token_label(token: str) -> str:
    """A readable tick label for one decoded token: surrounding spaces
    dropped, a token that is only white space shown as ``␣``, a newline as
    ``\\n``."""
    text = str(token).replace("\n", "\\n")
    stripped = text.strip()
    return stripped if stripped else "␣"


#: The vocabularies' special tokens, written as the book writes them
#: (``<unk>``, ``<|endoftext|>``; ARCHITECTURE.md, "Pages"). GPT-2's BPE cuts
#: WikiText's ``<unk>`` into three tokens, ``" <"``, ``"unk"`` and ``">"``,
#: the last often merged with what follows (``">."``, ``">,"``); a label
#: shows the whole special token instead of such a piece.
_SPECIAL_TOKENS = ("<|endoftext|>", "<unk>", "<eos>", "<pad>", "<bos>")
_SPECIAL_RE = re.compile("|".join(map(re.escape, _SPECIAL_TOKENS)))


def _split_specials(pieces: Sequence[str]) -> list[list[tuple]]:
    """For each piece of ``"".join(pieces)``, the special tokens
    (:data:`_SPECIAL_TOKENS`) that are cut across several pieces and overlap
    it: ``(start, end, k, n)`` with the special's span in the joined text and
    the piece being its ``k``-th of ``n``."""
    bounds = np.cumsum([0] + [len(p) for p in pieces])
    text = "".join(pieces)
    found: list[list[tuple]] = [[] for _ in pieces]
    for match in _SPECIAL_RE.finditer(text):
        a, b = match.span()
        # the pieces holding at least one character of the special
        cut = [
            i
            for i in range(len(pieces))
            if bounds[i] < b and bounds[i + 1] > a
        ]
        if len(cut) < 2:
            continue
        for k, i in enumerate(cut, 1):
            found[i].append((a, b, k, len(cut)))
    return found


def _piece_label(pieces, i: int, cuts: list[tuple]) -> str:
    """The label of piece ``i``: its text with every special token it holds
    a part of written whole, and which part it is (``<unk>. 3/3``)."""
    if not cuts:
        return _token_label(pieces[i])
    start = sum(len(p) for p in pieces[:i])
    end = start + len(pieces[i])
    lo = min([start] + [a for a, _, _, _ in cuts])
    hi = max([end] + [b for _, b, _, _ in cuts])
    text = "".join(pieces)[lo:hi]
    parts = " ".join(f"{k}/{n}" for _, _, k, n in cuts)
    return f"{_token_label(text)} {parts}"


def _token_labels(
    tokens: Sequence[str], context: Sequence[str] = ()
) -> list[str]:
    """Tick labels for a line of decoded tokens (:func:`_token_label` each),
    with every special token (:data:`_SPECIAL_TOKENS`) that the BPE split
    shown whole: WikiText's word ``<unk>`` is three GPT-2 tokens ``" <"``,
    ``"unk"``, ``">"``, which would read as three unrelated labels; they are
    shown as ``<unk> 1/3``, ``<unk> 2/3``, ``<unk> 3/3``, and a last piece
    merged with a mark as ``<unk>. 3/3``. ``context``: the tokens before the
    line (a special token begun there is counted from its first piece)."""
    context = [str(t) for t in context]
    pieces = context + [str(t) for t in tokens]
    cuts = _split_specials(pieces)
    return [
        _piece_label(pieces, i, cuts[i])
        for i in range(len(context), len(pieces))
    ]


def _context_text(context: Sequence[str], tokens: Sequence[str]) -> str | None:
    """The context as readable text for a title or a menu when the line
    goes on inside a special token begun in the context: that token written
    whole with the parts the context holds (``... is <unk> 1–2/3`` for a
    context ending with ``" <"``, ``"unk"``); None when no special token is
    cut at the context's end."""
    context = [str(t) for t in context]
    if not context:
        return None
    pieces = context + [str(t) for t in tokens]
    cuts = _split_specials(pieces)
    text = "".join(context)
    ends_inside = [c for c in cuts[len(context) - 1] if c[1] > len(text)]
    if not ends_inside:
        return None
    # the context holds the special's first k pieces
    a, b, k, n = ends_inside[-1]
    parts = f"1/{n}" if k == 1 else f"1–{k}/{n}"
    return f"{text[:a]}{''.join(pieces)[a:b]} {parts}"


def _is_sentence_end(token: str) -> bool:
    return str(token).strip().endswith(SENTENCE_END_CHARS)


def _from_gpt2_traces(i: int, line: Mapping) -> dict:
    """A line in the form of :func:`nmst_lib.experiments.gpt2.gpt2_eos_traces`
    (``"context_text"``, ``"tokens"``, ``"models"``) in the form of
    :func:`eos_token_explorer_html`'s lines."""
    models = line["models"]
    if isinstance(models, (str, bytes, Mapping)) or not isinstance(
        models, Sequence
    ):
        raise TypeError(
            f"line {i}: 'models' must be a list of "
            "{'head', 'eps', 'p_eos'} mappings"
        )
    context_tokens = [str(t) for t in line.get("context", [])]
    return {
        "context": line.get("context_text", " ".join(context_tokens)),
        "context_tokens": context_tokens,
        "tokens": line.get("tokens", []),
        "label": line.get("label"),
        "p_eos": {(m["head"], m["eps"]): m["p_eos"] for m in models},
    }


def _check_line_probs(i: int, p_eos, n: int) -> dict:
    """``{(head, eps): float64 array [n]}`` from one line's ``p_eos``."""
    if not isinstance(p_eos, Mapping) or not p_eos:
        raise TypeError(
            f"line {i}: 'p_eos' must be a non-empty mapping "
            "{(head, eps): probabilities}"
        )
    probs = {}
    for key, p in p_eos.items():
        key = _check_model_key(key)
        if isinstance(p, torch.Tensor):
            p = p.cpu()
        p = np.asarray(p, dtype=np.float64)
        if p.shape != (n,):
            raise ValueError(
                f"line {i}, model {key}: {p.size} probabilities for {n} tokens"
            )
        if not np.all((p > 0) & (p <= 1)):
            raise ValueError(
                f"line {i}, model {key}: p(eos) must lie in (0, 1] at every "
                "step (a log axis)"
            )
        probs[key] = p
    return probs


def _check_eos_lines(lines) -> list[dict]:
    """Validate the ``lines`` of :func:`eos_token_explorer_html` and return
    normalised copies."""
    lines = check_records(lines, "lines", "'context', 'tokens' and 'p_eos'")
    out = []
    for i, line in enumerate(lines):
        if not isinstance(line, Mapping):
            raise TypeError(
                f"line {i} must be a mapping with 'context', 'tokens' and "
                f"'p_eos', got {type(line).__name__}"
            )
        if "models" in line and "p_eos" not in line:
            line = _from_gpt2_traces(i, line)
        missing = [k for k in ("context", "tokens", "p_eos") if k not in line]
        if missing:
            raise ValueError(
                f"line {i} lacks {missing}; each line needs 'context' "
                "(text), 'tokens' (the continuation's readable tokens) and "
                "'p_eos' ({(head, eps): probabilities})"
            )
        tokens = [str(t) for t in line["tokens"]]
        if not tokens:
            raise ValueError(f"line {i} has no tokens")
        probs = _check_line_probs(i, line["p_eos"], len(tokens))
        context_tokens = [str(t) for t in line.get("context_tokens", [])]
        # a special token cut by the context's end is written whole
        context = _context_text(context_tokens, tokens) or str(line["context"])
        label = str(line.get("label") or context)
        out.append(
            {
                "context": context,
                "context_tokens": context_tokens,
                "tokens": tokens,
                "p_eos": probs,
                "label": label,
            }
        )
    return out


def _token_axis(
    ax, tokens: list[str], n: int, context_tokens: Sequence[str] = ()
) -> None:
    """The x axis of :func:`eos_token_plot`: one tick per token
    (:func:`_token_labels`), sentence ends in red and the step after each
    shaded."""
    steps = np.arange(1, n + 1)
    for t in range(1, n):
        if _is_sentence_end(tokens[t - 1]):
            ax.axvspan(
                t + 0.5,
                t + 1.5,
                color=COLORS["vermillion"],
                alpha=0.08,
                linewidth=0,
            )
    ax.set_xlim(0.3, n + 0.7)
    ax.set_xticks(steps)
    labels = _token_labels(tokens, context_tokens)[:n]
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    for tick, token in zip(ax.get_xticklabels(), tokens[:n]):
        if _is_sentence_end(token):
            tick.set_color(COLORS["vermillion"])
    ax.grid(axis="x", visible=False)
    ax.set_xlabel(STEP_AXIS_LABEL)


def _draw_models(ax, probs: dict, n: int, eps: float | None) -> None:
    """p(eos) of each model over the first ``n`` steps (VA, then ST and NMST
    by eps), and the lower bound of ``eps`` when given."""
    steps = np.arange(1, n + 1)
    order = sorted(
        probs, key=lambda k: (_MODEL_HEADS.index(k[0]), k[1] or 0.0)
    )
    for head, e in order:
        ax.plot(
            steps,
            probs[(head, e)][:n],
            marker=".",
            markersize=4,
            label=model_name(head, e),
            **HEAD_STYLES[head.upper()],
        )
    if eps is not None:
        t = torch.as_tensor(steps, dtype=torch.float64)
        ax.plot(
            steps,
            eos_lower_bound(t, eps).numpy(),
            color="0.55",
            linewidth=0.9,
            linestyle="-.",
            label=f"f_lb(t), ε={eps_book(eps)}",
        )


def eos_token_plot(
    tokens: Sequence[str],
    p_eos: Mapping[tuple, Sequence[float]],
    *,
    eps: float | None = None,
    max_tokens: int | None = None,
    ylim: tuple[float, float] | None = None,
    title: str | None = None,
    ax: plt.Axes | None = None,
    context_tokens: Sequence[str] = (),
) -> Figure:
    """p(eos | y_<t, x) of GPT-2 models along one validation line, with its
    tokens on the x axis (Choi, Cho, Lee 2023, Figs. 3 and 6).

    Step t is on the x axis and its tick is the token y_t being predicted
    (the book's step convention,
    :data:`~nmst_lib.plots.style.STEP_AXIS_LABEL`): the point at step t is the
    probability of stopping *instead of* emitting y_t. Ticks of tokens after
    which the line could end (:data:`SENTENCE_END_CHARS`) are red, as in the
    paper, and the step right after each of them, where the model may stop, is
    shaded: NMST's curve can rise there and fall again, ST's can only rise
    (Chapter 4, monotone ST; Chapter 5, NMST).

    Args:
        tokens: the continuation's readable tokens y_1, y_2, ... (e.g. GPT-2
            BPE decoded to text).
        p_eos: ``{(head, eps): probabilities}``, one per token; head ``"va"``
            (eps ``None``), ``"st"`` or ``"nmst"``; drawn in
            :data:`~nmst_lib.plots.style.HEAD_STYLES`.
        eps: when given, also draw the lower bound f_lb(t) = 1 - (1 - eps)^t
            of ST and NMST.
        max_tokens: draw only the first ``max_tokens`` steps (the title says
            so).
        ylim: fixed y limits (the explorer keeps one line's frames
            comparable).
        context_tokens: the context's readable tokens, when the line may
            begin inside a special token that the BPE split (``" <"``,
            ``"unk"`` | ``">"``): its pieces are then labelled whole
            (``<unk> 3/3``) like the others.

    Tick labels show every special token whole (``<unk>``,
    ``<|endoftext|>``, as the book writes them), never a piece of one: a
    split ``<unk>`` reads ``<unk> 1/3``, ``<unk> 2/3``, ``<unk>. 3/3``.

    Chapter 7 (``07_gpt2``).
    """
    line = {
        "context": "",
        "context_tokens": list(context_tokens),
        "tokens": tokens,
        "p_eos": p_eos,
    }
    line = _check_eos_lines([line])[0]
    tokens, probs = line["tokens"], line["p_eos"]
    n = len(tokens)
    if max_tokens is not None:
        n = min(n, check_positive_int(max_tokens, "max_tokens"))
    if eps is not None:
        eps = check_eps(eps)
    if ax is None:
        width = COLUMN_WIDTH
        fig, ax = plt.subplots(figsize=(width, 3.7))
        fig.subplots_adjust(
            left=0.75 / width, right=1 - 1.45 / width, bottom=0.3, top=0.88
        )
    else:
        fig = ax.figure
    _draw_models(ax, probs, n, eps)
    ax.set_yscale("log")
    if ylim is not None:
        ax.set_ylim(*ylim)
    _token_axis(ax, tokens, n, line["context_tokens"])
    ax.set_ylabel(_P_EOS_LABEL)
    shown = title or ""
    if n < len(tokens):
        shown = (shown + " " if shown else "") + (
            f"(first {n} of {len(tokens)} tokens)"
        )
    if shown:
        ax.set_title(shown, fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    return fig


def _line_menu(lines, label_words: int) -> list[str]:
    """One distinct menu text per line: its number and the first
    ``label_words`` words of its label."""
    menu, seen = [], set()
    for i, line in enumerate(lines):
        words = line["label"].split()
        text = " ".join(words[:label_words])
        if len(words) > label_words:
            text += " …"
        text = f"{i + 1}. {text}"
        while text in seen:
            text += " "
        seen.add(text)
        menu.append(text)
    return menu


def _line_limits(lines, max_tokens: int, eps_values) -> list[tuple]:
    """y limits per line, shared by every frame of that line."""
    limits = []
    for line in lines:
        n = min(len(line["tokens"]), max_tokens)
        lows = [float(p[:n].min()) for p in line["p_eos"].values()]
        lows += [float(eos_lower_bound(1, e)) for e in eps_values]
        limits.append((max(min(lows) / 3, 1e-12), 1.5))
    return limits


def _model_choices(lines, eps_values) -> list[tuple[str, float]]:
    """One menu of the models every line has stored: a layer at an eps, and
    both layers (``"both"``) where both exist at that eps. A choice some line
    lacks would draw an empty "no stored result" frame."""

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
        raise ValueError(
            "no ST or NMST model is stored for every line: nothing to show "
            "on all lines"
        )
    return choices


def _check_initial(heads, eps_values, initial_head, initial_eps) -> float:
    """The eps of the model shown first, after checking ``initial_head`` and
    ``initial_eps`` against the stored layers and eps."""
    head_choices = heads + (["both"] if len(heads) == 2 else [])
    if initial_head not in head_choices:
        raise ValueError(
            f"initial_head must be one of {head_choices}, got {initial_head!r}"
        )
    if initial_eps is None:
        return eps_values[0]
    if check_eps(initial_eps) not in eps_values:
        raise ValueError(
            f"initial_eps must be one of the stored eps {eps_values}, "
            f"got {initial_eps!r}"
        )
    return float(initial_eps)


def _eos_token_explorer(
    lines, max_tokens, label_words, initial_head, initial_eps
) -> Explorer:
    """The GPT-2 p(eos) explorer's drawing function and controls, shared by
    :func:`eos_token_explorer_html` and :func:`eos_token_explorer_widget`."""
    lines = _check_eos_lines(lines)
    max_tokens = check_positive_int(max_tokens, "max_tokens")
    label_words = check_positive_int(label_words, "label_words")
    keys = {k for line in lines for k in line["p_eos"]}
    heads = [h for h in ("st", "nmst") if any(k[0] == h for k in keys)]
    if not heads:
        raise ValueError(
            "the lines hold no ST or NMST model: nothing to choose (p_eos "
            "keys like ('nmst', 5e-4))"
        )
    eps_values = sorted({k[1] for k in keys if k[1] is not None})
    start_eps = _check_initial(heads, eps_values, initial_head, initial_eps)
    choices = _model_choices(lines, eps_values)
    preferred = (
        [c for c in choices if c == (initial_head, start_eps)]
        or [c for c in choices if c[0] == initial_head]
        or choices
    )
    limits = _line_limits(lines, max_tokens, eps_values)
    shown = tuple(
        f"{'ST and NMST' if h == 'both' else h.upper()}, ε = {eps_book(e)}"
        for h, e in choices
    )
    controls = (
        Control(
            "line",
            tuple(range(len(lines))),
            label="validation line",
            kind="dropdown",
            shown=tuple(_line_menu(lines, label_words)),
        ),
        Control(
            "model",
            tuple(range(len(choices))),
            label="model",
            kind="dropdown",
            initial=choices.index(preferred[0]),
            shown=shown,
        ),
    )

    def draw(line, model):
        data = lines[line]
        head, eps = choices[model]
        layers = heads if head == "both" else [head]
        wanted = [("va", None)] + [(h, eps) for h in layers]
        chosen = {k: data["p_eos"][k] for k in wanted if k in data["p_eos"]}
        title = "context: " + " ".join(data["context"].split())
        return eos_token_plot(
            data["tokens"],
            chosen,
            eps=eps,
            max_tokens=max_tokens,
            ylim=limits[line],
            title=_one_line_title(title),
            context_tokens=data["context_tokens"],
        )

    alt = (
        "p(eos) at each step of a validation line (log scale), with the "
        "line's tokens as x tick labels and sentence ends in red: the VA "
        "model and the chosen ST or NMST model at the chosen eps, with the "
        "lower bound f_lb(t)"
    )
    return Explorer(draw, controls, alt)


def eos_token_explorer_html(
    lines: Sequence[Mapping],
    *,
    max_tokens: int = 60,
    label_words: int = 8,
    initial_head: str = "nmst",
    initial_eps: float | None = None,
    dpi: int = FIGURE_DPI,
):
    """The p(eos | t) explorer of Chapter 7 (``07_gpt2``) for the static
    website: choose the validation line and the model, a layer at an eps (Choi,
    Cho, Lee 2023, Figs. 3 and 6).

    Every frame is drawn by :func:`eos_token_plot`: the VA model of the line
    (if stored) as the reference, the chosen layer (ST, NMST, or both) at its
    eps, and the lower bound f_lb(t) = 1 - (1 - eps)^t, with the line's
    tokens on the x axis and sentence ends in red. All frames of one line
    share their y limits. Frames are pre-rendered PNGs switched by JavaScript
    (:func:`~nmst_lib.plots.explorers.explorer_html`), so the controls work
    without a kernel; the live twin is :func:`eos_token_explorer_widget`.

    Args:
        lines: one mapping per validation line with ``"context"`` (readable
            text), ``"tokens"`` (the continuation's readable tokens, eos
            last) and ``"p_eos"`` (``{(head, eps): probabilities}``, one per
            token, head ``"va"``/``"st"``/``"nmst"``); optionally
            ``"label"``, the menu text (default: the context's first
            ``label_words`` words) and ``"context_tokens"``, the context's
            readable tokens (a special token that the context begins and
            the continuation finishes is then labelled whole, as in
            :func:`eos_token_plot`). The lines of
            :func:`nmst_lib.experiments.gpt2.gpt2_eos_traces`
            (``"context_text"``, ``"tokens"``, ``"models"``) are accepted as
            they are.
        max_tokens: draw at most this many steps of a line (the frame's title
            says so).
        initial_head: the layer shown first (``"st"``, ``"nmst"`` or
            ``"both"``).
        initial_eps: the eps shown first (default: the smallest stored).

    The model menu offers only what every line has stored (a layer at an
    eps; "ST and NMST" where both are stored at that eps), so no frame is
    empty and "ST and NMST" always shows two layers. Frames: lines x models;
    keep it to a few dozen.
    """
    explorer = _eos_token_explorer(
        lines, max_tokens, label_words, initial_head, initial_eps
    )
    return explorer.html(dpi=dpi)


def eos_token_explorer_widget(
    lines: Sequence[Mapping],
    *,
    max_tokens: int = 60,
    label_words: int = 8,
    initial_head: str = "nmst",
    initial_eps: float | None = None,
):
    """:func:`eos_token_explorer_html` for a live kernel: the same menus as an
    ``ipywidgets.interactive``.

    Takes the same lines and draws the same frames with
    :func:`eos_token_plot`, on demand
    (:func:`~nmst_lib.plots.explorers.explorer_widget`). Chapter 7
    (``07_gpt2``).
    """
    explorer = _eos_token_explorer(
        lines, max_tokens, label_words, initial_head, initial_eps
    )
    return explorer.widget()
