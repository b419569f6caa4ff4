"""Tests of the explorers' two front-ends (nmst_lib.plots.explorers): the
live ``explorer_widget`` offers the controls of the kernel-free
``explorer_html`` built from the same data, and moving a control redraws the
figure; every explorer of the book (Chapters 2 and 4-9) has its live twin.
No display is needed: the widget's ``result`` is the figure it drew last."""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from nmst_lib import plots
from nmst_lib.plots.eos_curves import _eos_explorer
from nmst_lib.plots.sparse_support import _alpha_explorer
from nmst_lib.plots.temperature_curves import _temperature_explorer
from nmst_lib.plots.termination import _rnt_explorer
from nmst_lib.plots.token_traces import _eos_token_explorer


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def titled(title):
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.set_title(title)
    return fig


def recording_draw(calls):
    def draw(a, b):
        calls.append((a, b))
        return titled(f"{a} {b}")

    return draw


CONTROLS = [
    plots.Control("a", (1, 2, 3), label="A", initial=2),
    plots.Control("b", ("x", "y"), kind="dropdown", shown=("ex", "why")),
]


def controls_of(widget):
    return [c for c in widget.children if hasattr(c, "options")]


def title_of(fig):
    return fig.axes[0].get_title()


# --- the generic front-end -----------------------------------------------


def test_the_widget_offers_each_control_as_a_slider_or_a_menu():
    calls = []
    w = plots.explorer_widget(recording_draw(calls), CONTROLS)
    assert isinstance(w, widgets.interactive)
    a, b = controls_of(w)
    assert isinstance(a, widgets.SelectionSlider)
    assert isinstance(b, widgets.Dropdown)
    assert (a.description, b.description) == ("A", "b")
    assert list(a.options) == [("1", 1), ("2", 2), ("3", 3)]
    assert list(b.options) == [("ex", "x"), ("why", "y")]
    assert (a.value, b.value) == (3, "x")  # the controls' initial values
    assert calls == [(3, "x")] and title_of(w.result) == "3 x"


def test_moving_a_control_redraws_the_figure():
    calls = []
    w = plots.explorer_widget(recording_draw(calls), CONTROLS)
    a, b = controls_of(w)
    first = w.result
    b.value = "y"
    assert calls[-1] == (3, "y")
    assert w.result is not first and title_of(w.result) == "3 y"
    a.value = 1
    assert calls == [(3, "x"), (3, "y"), (1, "y")]
    assert title_of(w.result) == "1 y"
    assert plt.get_fignums() == []  # each figure closed once shown


def test_one_explorer_feeds_both_front_ends():
    calls = []
    explorer = plots.Explorer(recording_draw(calls), CONTROLS, alt="alt!")
    page = explorer.html(dpi=20).data
    assert 'data-frames="6"' in page and 'alt="alt!"' in page
    assert sorted(calls) == sorted((a, b) for a in (1, 2, 3) for b in "xy")
    w = explorer.widget()
    assert title_of(w.result) == "3 x"
    assert [c.description for c in controls_of(w)] == ["A", "b"]


def test_a_widget_of_a_bad_explorer_is_refused():
    draw = recording_draw([])
    with pytest.raises(TypeError, match="controls"):
        plots.explorer_widget(draw, [])
    with pytest.raises(TypeError, match="draw"):
        plots.explorer_widget("draw", CONTROLS)
    twice = [plots.Control("a", (1,)), plots.Control("a", (2,))]
    with pytest.raises(ValueError, match="distinct"):
        plots.Explorer(draw, twice)


def test_a_draw_that_returns_no_figure_leaves_no_result(caplog):
    w = plots.explorer_widget(lambda a: "text", [plots.Control("a", (1,))])
    assert w.result is None
    assert "matplotlib Figure" in caplog.text


# --- every explorer of the book has its live twin ------------------------


def eos_line():
    n = 4
    floor = 1 - (1 - 1e-3) ** np.arange(1, n + 1)
    return {
        "context": "On December 4 , 2010 , Kershaw married his",
        "tokens": [" The", " cat", ".", "<|endoftext|>"],
        "p_eos": {
            ("va", None): [0.01, 0.02, 0.3, 0.1],
            ("st", 1e-3): np.maximum.accumulate([0.01, 0.05, 0.4, 0.5]),
            ("nmst", 1e-3): np.maximum([0.01, 0.05, 0.4, 0.1], floor),
        },
    }


def training_run(R=4, N=5, seed=0):
    rng = np.random.default_rng(seed)
    tokens = ["w0", "w1", "w2", "<eos>", "<unk>"]
    return {
        "epochs": np.linspace(0, 3, R),
        "temperatures": 2.0 + rng.uniform(0.0, 1.0, (R, N)),
        "ranks": np.arange(N) * 5,
        "tokens": tokens,
    }


Ls = np.array([1, 10, 100])
SCORES = -torch.log(torch.arange(1, 41, dtype=torch.float64)).repeat(2, 1) * torch.tensor([[1.0], [2.0]])
"""Two contexts whose scores differ (a steeper second one), so that moving the context control shows it."""
TWINS = {
    "eos": (
        plots.eos_explorer_widget,
        lambda **kw: _eos_explorer(
            kw["eps_values"],
            kw["amplitudes"],
            kw["shapes"],
            1e-3,
            {"t_max": kw["t_max"]},
        ),
        {
            "eps_values": (1e-3, 1e-2),
            "amplitudes": (0.5,),
            "shapes": ("one_stop", "fading"),
            "t_max": 200,
        },
    ),
    "rnt": (
        plots.rnt_explorer_widget,
        lambda **kw: _rnt_explorer(
            kw["curves_by_key"], kw["control_names"], None, 1e-6
        ),
        {
            "curves_by_key": {
                ("LSTM", 1e-4): {"NMST": (Ls, [0.5, 0.1, 0.0])},
                ("LSTM", 1e-3): {"NMST": (Ls, [0.4, 0.0, 0.0])},
            },
            "control_names": ["architecture", "ε"],
        },
    ),
    "eos_token": (
        plots.eos_token_explorer_widget,
        lambda **kw: _eos_token_explorer(kw["lines"], 60, 8, "nmst", None),
        {"lines": [eos_line(), {**eos_line(), "context": "Another line"}]},
    ),
    "alpha": (
        plots.entmax_alpha_explorer_widget,
        lambda **kw: _alpha_explorer(
            kw["scores"], kw["alphas"], kw["eos_id"], None, None
        ),
        {"scores": SCORES, "alphas": (1.0, 1.5, 2.0), "eos_id": 39},
    ),
    "temperature": (
        plots.temperature_explorer_widget,
        lambda **kw: _temperature_explorer(kw["runs"], None, 16, None, None),
        {"runs": {"CT": training_run(), "CT + NMST": training_run(seed=1)}},
    ),
}


def drawn(fig):
    """What a frame shows: its title, its curves' labels and their values."""
    ax = fig.axes[0]
    return (ax.get_title(), [line.get_label() for line in ax.get_lines()],
            [[str(v) for v in np.round(np.asarray(line.get_ydata(), dtype=float), 9)]  # nan equals nan
             for line in ax.get_lines()])


@pytest.mark.parametrize("family", sorted(TWINS))
def test_every_explorer_has_a_live_twin_that_redraws(family):
    make_widget, make_explorer, data = TWINS[family]
    w = make_widget(**data)
    explorer = make_explorer(**data)
    shown = controls_of(w)
    assert [(c.description, list(c.options), c.index) for c in shown] == [
        (c.label or c.name, list(zip(c.shown, c.values)), c.initial)
        for c in explorer.controls
    ]
    movable = [c for c in shown if len(c.options) > 1]
    assert movable
    for moved in movable:  # every control reaches the drawing, each with its own value
        before = w.result
        moved.index = (moved.index + 1) % len(moved.options)
        values = {c.name: s.value for c, s in zip(explorer.controls, shown)}
        assert w.result is not before and isinstance(w.result, plt.Figure)
        assert drawn(w.result) == drawn(explorer.draw(**values)), (family, moved.description)
        assert drawn(w.result) != drawn(before), (family, moved.description)
