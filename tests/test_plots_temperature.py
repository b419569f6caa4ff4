"""Tests of Chapter 9's figures in nmst_lib.plots (``09_temperature``): the temperature of tracked
tokens over training (Fig. 1a analogue), the mean temperature by position with bands (Fig. 1b
analogue), eos's temperature near the line's end, and the "choose the token to follow" explorer
(one distinct frame per model and token, escaped menus, shared y axis per model)."""

import json
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from nmst_lib import plots  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def explorer_payload(html_object):
    match = re.search(r'<script type="application/json" class="nmst-explorer-data">(.*?)</script>', html_object.data, re.S)
    assert match, "explorer has no data block"
    return json.loads(match.group(1).replace("<\\/", "</"))


def training_run(R=6, N=12, seed=0, base=2.0):
    rng = np.random.default_rng(seed)
    epochs = np.linspace(0, 3, R)
    ranks = np.arange(N) * 5
    temps = base + rng.uniform(0.0, 1.0, (R, N))
    tokens = [f"w{i}" for i in range(N)]
    tokens[-2:] = ["<eos>", "<unk>"]
    return {"epochs": epochs, "temperatures": temps, "ranks": ranks, "tokens": tokens}


def test_over_training_draws_one_line_per_token_and_the_offset():
    run = training_run()
    fig = plots.temperature_over_training_plot(run["epochs"], run["temperatures"], run["ranks"], offset=2.0)
    ax = fig.axes[0]
    lines = [line for line in ax.get_lines()]
    assert len(lines) == 12
    ys = sorted(tuple(np.round(line.get_ydata(), 12)) for line in lines)
    assert ys == sorted(tuple(np.round(run["temperatures"][:, i] - 2.0, 12)) for i in range(12))
    assert "− 2" in ax.get_ylabel() and "epoch" in ax.get_xlabel()
    assert len(fig.axes) == 2  # the colour bar of frequency ranks


def test_over_training_colours_follow_frequency_rank_and_highlight_is_on_top():
    run = training_run()
    fig = plots.temperature_over_training_plot(run["epochs"], run["temperatures"], run["ranks"], labels=run["tokens"],
                                               highlight=3, colorbar=False)
    ax = fig.axes[0]
    top = ax.get_lines()[-1]
    assert np.allclose(top.get_ydata(), run["temperatures"][:, 3])
    assert top.get_color() == plots.COLORS["vermillion"]
    assert "w3 (frequency rank 16)" in [t.get_text() for t in ax.get_legend().get_texts()]
    cmap, norm = plt.get_cmap(plots.TEMPERATURE_CMAP), matplotlib.colors.LogNorm(vmin=1, vmax=56)
    for line in ax.get_lines()[:-1]:  # every other line has its rank's colour
        i = int(np.argmin([np.abs(line.get_ydata() - run["temperatures"][:, j]).max() for j in range(12)]))
        assert np.allclose(matplotlib.colors.to_rgba(line.get_color()), cmap(norm(run["ranks"][i] + 1)))


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(epochs=[0, 1], temperatures=np.ones((3, 2)), ranks=[0, 1]), ValueError, "records"),
    (dict(epochs=[1, 0], temperatures=np.ones((2, 2)), ranks=[0, 1]), ValueError, "non-decreasing"),
    (dict(epochs=[0, 1], temperatures=np.zeros((2, 2)), ranks=[0, 1]), ValueError, "> 0"),
    (dict(epochs=[0, 1], temperatures=np.ones((2, 2)), ranks=[0]), ValueError, "one frequency rank"),
    (dict(epochs=[0, 1], temperatures=np.ones((2, 2)), ranks=[0.5, 1.0]), ValueError, "integers"),
])
def test_over_training_rejects_malformed_curves(kwargs, error, match):
    with pytest.raises(error, match=match):
        plots.temperature_over_training_plot(kwargs["epochs"], kwargs["temperatures"], kwargs["ranks"])


def test_by_position_draws_means_bands_and_segments():
    mean = np.linspace(3.0, 2.5, 15)
    series = {"CT-LSTM": {"mean": mean, "lower": mean - 0.1, "upper": mean + 0.1}}
    fig = plots.temperature_by_position_plot(series, tick_labels=[str(i) for i in range(15)],
                                             segments=[("first", 5), ("middle", 5), ("last", 5)])
    ax = fig.axes[0]
    assert np.allclose(ax.get_lines()[0].get_ydata(), mean)
    band = ax.collections[0].get_paths()[0].vertices
    assert np.isclose(band[:, 1].max(), 3.1) and np.isclose(band[:, 1].min(), 2.4)
    assert {"first", "middle", "last"} <= {t.get_text() for t in ax.texts}
    assert len([line for line in ax.get_lines() if line.get_linestyle() == ":"]) == 2  # two separators
    with pytest.raises(ValueError, match="add up"):
        plots.temperature_by_position_plot(series, segments=[("first", 5), ("last", 5)])
    with pytest.raises(ValueError, match="contain the mean"):
        plots.temperature_by_position_plot({"x": {"mean": mean, "lower": mean + 1, "upper": mean + 2}})


def test_eos_plot_puts_the_end_on_the_right_and_draws_the_reference():
    d = np.arange(10)
    mean = 3 - d / 10
    fig = plots.eos_temperature_plot({"CT": {"distance": d, "mean": mean, "lower": mean - 0.1, "upper": mean + 0.1}},
                                     reference={"CT": 2.5})
    ax = fig.axes[0]
    line = ax.get_lines()[0]
    assert np.allclose(line.get_xdata(), -d) and np.allclose(line.get_ydata(), mean)
    assert ax.get_xlim()[1] > 0 > ax.get_xlim()[0]
    assert any(np.allclose(l.get_ydata(), 2.5) for l in ax.get_lines()[1:])
    # the ticks name distances: |t| with no sign (matplotlib would write "−10" with a Unicode minus)
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{abs(t):g}" for t in ax.get_xticks()]
    with pytest.raises(ValueError, match=">= 0"):
        plots.eos_temperature_plot({"CT": {"distance": -d, "mean": mean, "lower": mean, "upper": mean}})


def test_explorer_has_one_distinct_frame_per_model_and_token_and_escapes_the_menu():
    runs = {"CT-LSTM": training_run(seed=0), "CT-NMST": training_run(seed=1, base=2.5)}
    html_object = plots.temperature_explorer_html(runs, choices=["w0", "w4", "<eos>"], dpi=40)
    data = explorer_payload(html_object)
    assert data["sizes"] == [2, 3]
    assert len(data["frames"]) == 6 and len(set(data["frames"])) == 6
    assert "<eos>" not in html_object.data.split('<script type="application/json"')[0]   # escaped in the menu
    assert "&lt;eos&gt; (rank 51)" in html_object.data
    assert data["labels"][1] == ["w0 (rank 1)", "w4 (rank 21)", "<eos> (rank 51)"]


def test_explorer_frames_of_one_model_share_its_y_axis():
    """Every token's frame of a model is drawn on that model's one y range (moving between tokens
    never rescales the axis), which holds all of its temperatures; the two models' ranges differ."""
    from nmst_lib.plots.temperature_curves import _temperature_explorer

    runs = {"CT-LSTM": training_run(seed=0), "CT-NMST": training_run(seed=1, base=2.5)}
    explorer = _temperature_explorer(runs, ["w0", "w4", "<eos>"], 16, None, None)
    limits = {}
    for model, run in runs.items():
        frames = [explorer.draw(token, model) for token in ("w0", "w4", "<eos>")]
        ylims = {fig.axes[0].get_ylim() for fig in frames}
        for fig in frames:
            plt.close(fig)
        assert len(ylims) == 1, (model, ylims)
        (lo, hi), temps = ylims.pop(), np.asarray(run["temperatures"])
        assert lo < temps.min() and temps.max() < hi
        limits[model] = (lo, hi)
    assert limits["CT-LSTM"] != limits["CT-NMST"]


def test_explorer_default_choices_span_the_ranks_and_include_eos_and_unk():
    run = training_run(N=40)
    run["tokens"][-2:] = ["<eos>", "<unk>"]
    data = explorer_payload(plots.temperature_explorer_html({"CT": run}, max_choices=8, dpi=30))
    shown = data["labels"][0]
    assert shown[0] == "w0 (rank 1)" and any(s.startswith("<eos>") for s in shown) and any(s.startswith("<unk>") for s in shown)
    assert len(data["sizes"]) == 1  # one model: no model menu
    assert 8 <= len(shown) <= 10
    # spread over the ranks (not the most frequent few): the last ordinary choice is far down the list
    ranks = [int(s.split("(rank ")[1].rstrip(")")) for s in shown if not s.startswith("<")]
    assert ranks == sorted(ranks) and ranks[-1] >= 0.4 * max(run["ranks"]), shown


def test_explorer_rejects_unknown_tokens_and_bad_runs():
    with pytest.raises(ValueError, match="not tracked"):
        plots.temperature_explorer_html({"CT": training_run()}, choices=["nope"])
    with pytest.raises(ValueError, match="'epochs'"):
        plots.temperature_explorer_html({"CT": {"epochs": [0]}})
    with pytest.raises(ValueError, match="initial_token"):
        plots.temperature_explorer_html({"CT": training_run()}, choices=["w0"], initial_token="w1")
