"""Explorers: one drawing function behind menus and sliders, with and without a
kernel.

An explorer is a drawing function ``draw(**values) -> Figure`` and its
controls (each a :class:`Control`: the menus and sliders that choose
``values``), held together by :class:`Explorer`. It has two front-ends built
on that ONE drawing function:

* :func:`explorer_html`, for the static website: every setting of the
  controls is rendered in advance to a PNG frame, and a few lines of
  JavaScript switch frames when a slider or menu moves (no kernel, no
  network);
* :func:`explorer_widget`, for a live kernel (Colab, Jupyter): an
  ``ipywidgets.interactive`` with the same controls that redraws the figure
  on every move.

Every explorer of the book has both (``*_explorer_html`` and
``*_explorer_widget`` in :mod:`nmst_lib.plots`): the eos-probability explorer
(Chapters 4-5), r_nt(L) curves by setting (Chapters 2 and 6), p(eos) along
GPT-2's validation lines (Chapter 7), the alpha explorer of alpha-entmax
(Chapter 8) and the temperature of a chosen token (Chapter 9).
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .._validation import check_positive_int
from .style import FIGURE_DPI, _format_number

# in reading order: the API page (book/api.md) lists them so
__all__ = [
    "Control",
    "Explorer",
    "explorer_html",
    "explorer_widget",
]


@dataclass(frozen=True)
class Control:
    """One control of an explorer: a slider (``kind="slider"``) or a menu
    (``kind="dropdown"``).

    ``values`` are passed to the drawing function under ``name``; ``label``
    is shown next to the control; ``initial`` is the index shown first;
    ``shown`` (optional, one string per value) is what the reader sees for
    each value (default: the value, numbers written compactly). Used by
    :func:`explorer_html` and :func:`explorer_widget` (Chapters 2 and 4-9).
    """

    name: str
    values: tuple
    label: str = ""
    kind: str = "slider"
    initial: int = 0
    shown: tuple | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(
                "a control's name must be a Python identifier, "
                f"got {self.name!r}"
            )
        values = tuple(self.values)
        if len(values) == 0:
            raise ValueError(f"control {self.name!r} needs at least one value")
        object.__setattr__(self, "values", values)
        if self.kind not in ("slider", "dropdown"):
            raise ValueError(
                "a control's kind must be 'slider' or 'dropdown', "
                f"got {self.kind!r}"
            )
        if (
            isinstance(self.initial, bool)
            or not isinstance(self.initial, int)
            or not 0 <= self.initial < len(values)
        ):
            raise ValueError(
                f"initial must be an index into the {len(values)} values "
                f"of {self.name!r}, got {self.initial!r}"
            )
        if self.shown is None:
            shown = tuple(_format_number(v) for v in values)
        else:
            shown = tuple(str(text) for text in self.shown)
            if len(shown) != len(values):
                raise ValueError(
                    f"shown must give one text per value of {self.name!r} "
                    f"({len(values)}), got {len(shown)}"
                )
        object.__setattr__(self, "shown", shown)


def _check_explorer(draw, controls) -> list[Control]:
    """The controls as a list, after checking them and ``draw``."""
    controls = list(controls)
    if not controls or not all(isinstance(c, Control) for c in controls):
        raise TypeError(
            "controls must be a non-empty sequence of nmst_lib.plots.Control"
        )
    if len({c.name for c in controls}) != len(controls):
        raise ValueError("control names must be distinct")
    if not callable(draw):
        raise TypeError(
            "draw must be a function returning a matplotlib Figure"
        )
    return controls


def _draw_frame(draw: Callable[..., Figure], values: dict) -> Figure:
    fig = draw(**values)
    if not isinstance(fig, Figure):
        raise TypeError(
            f"draw must return a matplotlib Figure, got {type(fig).__name__}"
        )
    return fig


@dataclass(frozen=True)
class Explorer:
    """What an explorer shows: ``draw(**values) -> Figure``, its controls and
    the figure's alt text.

    :meth:`html` is the kernel-free front-end (:func:`explorer_html`),
    :meth:`widget` the live one (:func:`explorer_widget`); both call the same
    ``draw`` with the same values. The book's explorers build one each
    (Chapters 2 and 4-9).
    """

    draw: Callable[..., Figure]
    controls: tuple[Control, ...]
    alt: str = ""

    def __post_init__(self):
        controls = tuple(_check_explorer(self.draw, self.controls))
        object.__setattr__(self, "controls", controls)

    def html(self, *, caption: str = "", dpi: int = FIGURE_DPI):
        """The static front-end: :func:`explorer_html`."""
        return explorer_html(
            self.draw, self.controls, alt=self.alt, caption=caption, dpi=dpi
        )

    def widget(self):
        """The live front-end: :func:`explorer_widget`."""
        return explorer_widget(self.draw, self.controls)


def _png_data_uri(fig: Figure, dpi: int, colors: int = 64) -> str:
    """The figure as a base64 PNG, reduced to a palette of ``colors`` colours
    (line plots look the same and take a quarter of the bytes: pages embed
    dozens of frames)."""
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    buffer.seek(0)
    image = (
        Image.open(buffer)
        .convert("RGB")
        .quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
    )
    small = io.BytesIO()
    image.save(small, format="PNG", optimize=True)
    encoded = base64.b64encode(small.getvalue()).decode("ascii")
    return "data:image/png;base64," + encoded


def _control_html(index: int, control: Control) -> str:
    label = html.escape(control.label or control.name)
    shown = [html.escape(text) for text in control.shown]
    if control.kind == "slider":
        widget = (
            f'<input type="range" min="0" max="{len(control.values) - 1}" '
            f'step="1" value="{control.initial}" '
            f'data-control="{index}" aria-label="{label}" '
            'style="vertical-align: middle; width: 10em;">'
            ' <output style="font-family: monospace; min-width: 4em; '
            f'display: inline-block;">{shown[control.initial]}</output>'
        )
    else:
        options = "".join(
            f'<option value="{i}"'
            f"{' selected' if i == control.initial else ''}>{text}</option>"
            for i, text in enumerate(shown)
        )
        widget = (
            f'<select data-control="{index}" aria-label="{label}" '
            f'style="max-width: 100%;">{options}</select>'
        )
    # an inline block no wider than the column: on a phone a long menu wraps
    # under its label
    return (
        '<label style="display: inline-block; max-width: 100%; '
        f'margin-right: 1.5em;">{label} {widget}</label>'
    )


_EXPLORER_JS = """
(function () {
  var root = document.getElementById("%(id)s");
  if (!root || root.getAttribute("data-ready")) { return; }
  root.setAttribute("data-ready", "1");
  var data = JSON.parse(
    root.querySelector("script.nmst-explorer-data").textContent);
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


def _render_frames(draw, controls: list[Control], dpi: int) -> list[str]:
    """One PNG data URI per combination of control values, row-major (the
    last control varying fastest)."""
    frames = []
    for combination in itertools.product(*(c.values for c in controls)):
        values = {c.name: value for c, value in zip(controls, combination)}
        fig = _draw_frame(draw, values)
        frames.append(_png_data_uri(fig, dpi))
        plt.close(fig)
    return frames


def _explorer_markup(controls, frames, alt: str, caption: str) -> str:
    initial = 0
    for c in controls:
        initial = initial * len(c.values) + c.initial
    explorer_id = "nmst-explorer-" + uuid.uuid4().hex[:12]
    data = {
        "sizes": [len(c.values) for c in controls],
        "labels": [list(c.shown) for c in controls],
        "frames": frames,
    }
    # <, > and & as JSON escapes: the page source then holds no raw "<unk>",
    # "<eos>" or "</script>" (JSON.parse gives the same strings back, and the
    # script sets them with textContent).
    payload = (
        json.dumps(data)
        .replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
    )
    alt_text = html.escape(
        alt or "figure; move the controls above it to change it"
    )
    caption_html = (
        '<div class="nmst-explorer-caption" style="font-size: 0.9em;">'
        f"{html.escape(caption)}</div>"
        if caption
        else ""
    )
    return (
        f'<div class="nmst-explorer" id="{explorer_id}" '
        f'data-frames="{len(frames)}" style="margin: 0.5em 0;">'
        '<div class="nmst-explorer-controls" style="margin-bottom: 0.3em;">'
        + "".join(_control_html(i, c) for i, c in enumerate(controls))
        + "</div>"
        f'<img class="nmst-explorer-frame" src="{frames[initial]}" '
        f'data-frame="{initial}" alt="{alt_text}" '
        'style="max-width: 100%; height: auto;">'
        f"{caption_html}"
        '<script type="application/json" class="nmst-explorer-data">'
        f"{payload}</script>"
        f"<script>{_EXPLORER_JS % {'id': explorer_id}}</script>"
        "</div>"
    )


def explorer_html(
    draw: Callable[..., Figure],
    controls: Sequence[Control],
    *,
    alt: str = "",
    caption: str = "",
    dpi: int = FIGURE_DPI,
):
    """A self-contained HTML figure with sliders and menus that works without a
    kernel.

    ``draw(**{c.name: value for c in controls})`` is called once for every
    combination of control values (row-major, the last control varying
    fastest); each figure is stored as a base64 PNG frame, and a few lines of
    plain JavaScript show the frame that matches the controls. Nothing is
    loaded from the network, so the page works offline, from ``file://``, in
    Jupyter, in Colab and on the book's static website (ARCHITECTURE.md: "figures
    that stay interactive without a kernel"). Returns an
    ``IPython.display.HTML`` object. The live twin is :func:`explorer_widget`.

    Keep ``len(frames)`` = the product of the number of values modest (tens):
    every frame is embedded in the page. Behind every ``*_explorer_html`` of
    :mod:`nmst_lib.plots` (Chapters 2 and 4-9).
    """
    from IPython.display import HTML

    controls = _check_explorer(draw, controls)
    dpi = check_positive_int(dpi, "dpi", minimum=20)
    frames = _render_frames(draw, controls, dpi)
    return HTML(_explorer_markup(controls, frames, alt, caption))


def _control_widget(control: Control):
    """The ipywidgets twin of one control: a ``SelectionSlider`` or a
    ``Dropdown`` offering ``(shown, value)`` pairs, starting at ``initial``."""
    import ipywidgets as widgets

    kind = (
        widgets.SelectionSlider
        if control.kind == "slider"
        else widgets.Dropdown
    )
    return kind(
        options=list(zip(control.shown, control.values)),
        index=control.initial,
        description=control.label or control.name,
    )


def explorer_widget(draw: Callable[..., Figure], controls: Sequence[Control]):
    """The live front-end of an explorer: the same controls as
    :func:`explorer_html` as an ``ipywidgets.interactive``.

    Every move of a control calls ``draw(**values)`` in the kernel and shows
    the new figure (a slider becomes a ``SelectionSlider``, a menu a
    ``Dropdown``, each offering the control's ``shown`` texts and starting at
    its ``initial`` value). The widget's ``result`` is the figure last drawn.
    Returns the ``interactive`` widget: display it, or make it the last
    expression of a cell (Colab, Jupyter). Behind every ``*_explorer_widget``
    of :mod:`nmst_lib.plots` (Chapters 2 and 4-9).
    """
    import ipywidgets as widgets
    from IPython.display import display

    controls = _check_explorer(draw, controls)

    def show(**values):
        fig = _draw_frame(draw, values)
        display(fig)
        plt.close(fig)  # shown once: not again by the inline backend
        return fig

    return widgets.interactive(
        show, **{c.name: _control_widget(c) for c in controls}
    )
