"""Tests of nmst_lib.plots and nmst_lib.notebook: the figures run headless, the eos explorer
shows what Definitions 4.3 (Welleck et al. 2020) and 6 (Choi, Cho, Lee 2023) say, and the
static explorers hold one distinct frame per setting of their controls."""

import json
import math
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nmst_lib import plots  # noqa: E402
from nmst_lib.notebook import COLORS, code_words, markdown_text, setup_notebook  # noqa: E402

SHAPES = sorted(plots.EOS_SHAPES)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def explorer_payload(html_object):
    """The JSON data block of a static explorer, and its HTML."""
    text = html_object.data
    match = re.search(r'<script type="application/json" class="nmst-explorer-data">(.*?)</script>', text, re.S)
    assert match, "explorer has no data block"
    return json.loads(match.group(1).replace("<\\/", "</")), text


# --- eos trajectories and probabilities --------------------------------------------------


def test_one_stop_trajectory_wants_to_stop_only_at_t0():
    lam = torch.sigmoid(plots.eos_trajectory(30, "one_stop", 0.7, t0=4, baseline=1e-3))
    expected = np.full(30, 1e-3)
    expected[3] = 0.7
    np.testing.assert_allclose(lam.numpy(), expected, rtol=1e-12)


def test_remark1_trajectory_is_not_monotone():
    lam = torch.sigmoid(plots.eos_trajectory(20, "remark1", 0.5, t0=3, t1=9, baseline=1e-3)).numpy()
    assert lam[2] == pytest.approx(0.5) and lam[4] == pytest.approx(1e-3) and lam[8] == pytest.approx(1 - 1e-3)
    assert np.any(np.diff(lam) < 0) and np.any(np.diff(lam) > 0)


def test_fading_trajectory_tends_to_zero():
    t = np.arange(1, 1001)
    lam = torch.sigmoid(plots.eos_trajectory(1000, "fading", 0.9, t0=5)).numpy()
    np.testing.assert_allclose(lam, 0.9 * 5 / (5 + t), rtol=1e-10)


@settings(max_examples=30, deadline=None)
@given(
    eps=st.sampled_from([1e-5, 1e-4, 1e-3, 1e-2, 0.3]),
    shape=st.sampled_from(SHAPES),
    amplitude=st.floats(0.01, 0.99),
)
def test_eos_probabilities_follow_definitions(eps, shape, amplitude):
    """VA = lambda; NMST = (1 - lambda) f_lb + lambda (Choi et al. eq. 10);
    ST = 1 - prod_{s<=t} (1 - eps)(1 - lambda_s) (Welleck et al. Def. 4.3 with the negated logit)."""
    T = 60
    z = plots.eos_trajectory(T, shape, amplitude, t0=3, t1=8)
    p = plots.eos_probabilities(z, eps)
    lam = 1.0 / (1.0 + np.exp(-z.numpy()))
    t = np.arange(1, T + 1)
    f_lb = 1.0 - (1.0 - eps) ** t
    np.testing.assert_allclose(p["VA"].numpy(), lam, rtol=1e-9)
    np.testing.assert_allclose(p["NMST"].numpy(), (1 - lam) * f_lb + lam, rtol=1e-9)
    np.testing.assert_allclose(p["ST"].numpy(), 1 - np.cumprod((1 - eps) * (1 - lam)), rtol=1e-9, atol=1e-15)


@settings(max_examples=20, deadline=None)
@given(eps=st.sampled_from([1e-5, 1e-3, 0.1]), shape=st.sampled_from(SHAPES), amplitude=st.floats(0.01, 0.99))
def test_self_terminating_layers_stay_above_lower_bound_and_st_never_decreases(eps, shape, amplitude):
    T = 200
    p = plots.eos_probabilities(plots.eos_trajectory(T, shape, amplitude), eps)
    f_lb = -np.expm1(np.arange(1, T + 1) * math.log1p(-eps))
    assert np.all(p["NMST"].numpy() >= f_lb * (1 - 1e-12))
    assert np.all(p["ST"].numpy() >= f_lb * (1 - 1e-12))
    assert np.all(np.diff(p["ST"].numpy()) >= -1e-15)


def test_eos_probabilities_subset_of_heads():
    p = plots.eos_probabilities(plots.eos_trajectory(10), 1e-3, heads=("NMST",))
    assert list(p) == ["NMST"]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"shape": "sine"}, ValueError, "shape must be one of"),
        ({"amplitude": 1.0}, ValueError, "amplitude must lie strictly between 0 and 1"),
        ({"amplitude": "0.5"}, TypeError, "amplitude must be a real number in (0, 1), got str"),
        ({"baseline": 0.0}, ValueError, "baseline must lie strictly between 0 and 1"),
        ({"t0": 0}, ValueError, "t0 must be an integer >= 1"),
        ({"shape": "remark1", "t0": 9, "t1": 9}, ValueError, "needs t0 < t1"),
    ],
)
def test_eos_trajectory_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        plots.eos_trajectory(20, **kwargs)


def test_eos_probabilities_rejects_bad_arguments():
    z = plots.eos_trajectory(10)
    with pytest.raises(ValueError, match="eps must lie strictly between 0 and 1"):
        plots.eos_probabilities(z, 0.0)
    with pytest.raises(TypeError, match="eos_logits must be a 1-D floating-point torch.Tensor"):
        plots.eos_probabilities(z.numpy(), 1e-3)
    with pytest.raises(ValueError, match="unknown head 'entmax'"):
        plots.eos_probabilities(z, 1e-3, heads=("VA", "entmax"))
    with pytest.raises(TypeError, match="heads must be a non-empty sequence"):
        plots.eos_probabilities(z, 1e-3, heads="VA")


# --- the drawing function ----------------------------------------------------------------


def test_plot_eos_probabilities_draws_heads_bound_and_half_life_step_headless():
    from nmst_lib.theory import half_life_bound

    assert matplotlib.get_backend().lower() == "agg"
    fig = plots.plot_eos_probabilities(1e-3, "remark1", 0.5, t_max=20_000)
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert any("f_{lb}" in label for label in labels)
    assert sum(label.startswith(("VA", "ST", "NMST")) for label in labels) == 3
    vertical = [line for line in ax.get_lines() if np.ptp(np.asarray(line.get_xdata(), float)) == 0]
    assert len(vertical) == 1 and vertical[0].get_xdata()[0] == pytest.approx(half_life_bound(1e-3))
    assert ax.get_xscale() == "log" and "step t (tokens)" in ax.get_xlabel()
    fig.canvas.draw()  # renders without a display


def test_plot_eos_probabilities_draws_into_given_axes_and_log_y():
    fig, axes = plt.subplots(1, 2)
    out = plots.plot_eos_probabilities(1e-2, "fading", 0.4, heads=("ST",), t_max=500, ax=axes[1], yscale="log")
    assert out is fig and axes[1].get_yscale() == "log" and len(axes[0].get_lines()) == 0
    with pytest.raises(ValueError):
        plots.plot_eos_probabilities(1e-3, yscale="symlog", t_max=100)


# --- static explorers --------------------------------------------------------------------


def test_eos_explorer_html_has_one_distinct_frame_per_setting():
    html_object = plots.eos_explorer_html(
        eps_values=(1e-4, 1e-2), amplitudes=(0.2, 0.9), shapes=("one_stop",), t_max=2000, dpi=30
    )
    data, text = explorer_payload(html_object)
    assert data["sizes"] == [1, 2, 2]
    assert len(data["frames"]) == 4 == len(set(data["frames"]))
    assert all(f.startswith("data:image/png;base64,") for f in data["frames"])
    assert text.count('type="range"') == 2 and text.count("<select") == 1
    assert data["labels"][1] == ["1e-4", "1e-2"]
    assert "http://" not in text and "https://" not in text  # nothing from the network


def test_explorer_html_frame_order_matches_the_controls():
    """Frame i is the drawing of the i-th combination, last control fastest (what the JS assumes)."""
    seen = []

    def draw(a, b):
        seen.append((a, b))
        fig, ax = plt.subplots(figsize=(1, 1))
        ax.plot([0, a], [0, b])
        return fig

    html_object = plots.explorer_html(
        draw,
        [plots.Control("a", (1, 2, 3)), plots.Control("b", ("x", "y"), kind="dropdown", initial=1, shown=("ex", "why"))],
        dpi=20,
    )
    data, text = explorer_payload(html_object)
    assert seen == [(1, "x"), (1, "y"), (2, "x"), (2, "y"), (3, "x"), (3, "y")]
    assert data["sizes"] == [3, 2] and data["labels"] == [["1", "2", "3"], ["ex", "why"]]
    assert '<option value="1" selected>why</option>' in text
    assert f'src="{data["frames"][1]}"' in text  # initial: a = 1, b = "y"


def test_explorer_html_keeps_model_tokens_out_of_the_page_source_and_gives_them_back_intact():
    """Labels such as <unk>, <eos> or </script> reach the page only as JSON escapes (a raw <unk> in the
    source would be read as a tag) and as escaped <option> text; the data block decodes to the original."""
    shown = ("<unk> & co", "</script><eos>")

    def draw(token):
        fig, ax = plt.subplots(figsize=(1, 1))
        ax.plot([0, 1], [0, len(token)])
        return fig

    html_object = plots.explorer_html(draw, [plots.Control("token", shown, kind="dropdown")], dpi=20)
    data, text = explorer_payload(html_object)
    assert data["labels"] == [list(shown)]
    for raw in ("<unk>", "<eos>", "</script><eos>"):
        assert raw not in text
    assert "&lt;unk&gt; &amp; co" in text


def test_explorer_html_rejects_bad_controls():
    with pytest.raises(TypeError, match="controls must be a non-empty sequence"):
        plots.explorer_html(lambda: None, [])
    with pytest.raises(ValueError, match="needs at least one value"):
        plots.Control("a", ())
    with pytest.raises(ValueError, match="kind must be 'slider' or 'dropdown'"):
        plots.Control("a", (1, 2), kind="knob")
    with pytest.raises(ValueError, match="initial must be an index"):
        plots.Control("a", (1, 2), initial=2)
    with pytest.raises(ValueError, match="shown must give one text per value"):
        plots.Control("a", (1, 2), shown=("one",))
    with pytest.raises(TypeError, match="draw must return a matplotlib Figure, got str"):
        plots.explorer_html(lambda a: "not a figure", [plots.Control("a", (1,))])


def test_eos_explorer_widget_builds_with_the_same_controls():
    import ipywidgets as widgets

    w = plots.eos_explorer_widget(eps_values=(1e-4, 1e-3), amplitudes=(0.3, 0.6), shapes=("fading",), t_max=300)
    assert isinstance(w, widgets.interactive)
    controls = {c.description: c for c in w.children if hasattr(c, "options")}
    assert set(controls) == {"λ(t)", "ε", "amplitude"}
    assert [v for _, v in controls["ε"].options] == [1e-4, 1e-3]
    controls["ε"].value = 1e-4  # redraws without error


# --- r_nt(L) -----------------------------------------------------------------------------


def test_rnt_plot_is_log_log_and_says_where_a_curve_reaches_zero():
    Ls = np.array([1, 10, 100, 1000])
    fig = plots.rnt_plot({"VA greedy": (Ls, [0.9, 0.5, 0.4, 0.4]), "NMST greedy": (Ls, [0.8, 0.2, 0.0, 0.0])})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[0] == "VA greedy" and labels[1] == "NMST greedy (0 from L = 100)"
    assert ax.get_lines()[1].get_color() == plots.HEAD_STYLES["NMST"]["color"]
    assert ax.get_ylim()[0] == pytest.approx(0.1)  # half the smallest positive value
    fig.canvas.draw()


def test_rnt_plot_y_axis_stops_at_the_floor():
    Ls = np.arange(1, 1001)
    fig = plots.rnt_plot({"exact": (Ls, np.exp(-Ls / 2.0))}, y_floor=1e-8)
    assert fig.axes[0].get_ylim()[0] == pytest.approx(1e-8)


@pytest.mark.parametrize(
    "curves, error",
    [
        ({}, TypeError),
        ({"a": ([1, 2], [0.5])}, ValueError),
        ({"a": ([2, 1], [0.5, 0.4])}, ValueError),
        ({"a": ([1, 2], [0.5, 1.5])}, ValueError),
        ({"a": 3}, TypeError),
    ],
)
def test_rnt_plot_rejects_bad_curves(curves, error):
    with pytest.raises(error):
        plots.rnt_plot(curves)


def test_rnt_explorer_html_has_a_frame_per_setting_and_marks_missing_ones():
    Ls = np.arange(1, 101)
    curves = {
        ("RNN", 1e-4): {"NMST": (Ls, np.exp(-Ls / 10))},
        ("RNN", 1e-3): {"NMST": (Ls, np.exp(-Ls / 5))},
        ("LSTM", 1e-4): {"NMST": (Ls, np.exp(-Ls / 20)), "VA": (Ls, np.full(100, 0.3))},
    }
    data, text = explorer_payload(plots.rnt_explorer_html(curves, control_names=["model", "ε"], dpi=30))
    assert data["sizes"] == [2, 2] and data["labels"] == [["RNN", "LSTM"], ["1e-4", "1e-3"]]
    assert len(set(data["frames"])) == 4
    assert text.count("<select") == 1 and text.count('type="range"') == 1
    with pytest.raises(ValueError):
        plots.rnt_explorer_html(curves, control_names=["model"])
    with pytest.raises(ValueError):
        plots.rnt_explorer_html({("a", 1): {"x": (Ls, Ls / 100)}, "b": {"x": (Ls, Ls / 100)}})


def test_rnt_explorer_frames_draw_each_label_in_the_style_given():
    """A chapter keeps a decoder's colour across its figures: the explorer's frames take the
    same per-label styles as rnt_plot (Chapter 2's Figure 2.6 matches Figure 2.5)."""
    from nmst_lib.plots.termination import _rnt_explorer

    Ls = np.arange(1, 51)
    curves = {("a",): {"greedy": (Ls, np.full(50, 0.5)), "nucleus": (Ls, np.exp(-Ls / 9))}}
    styles = {"nucleus": {"color": COLORS["purple"]}}
    fig = _rnt_explorer(curves, ["setting"], None, 1e-6, styles).draw(part0="a")
    colours = {line.get_label().split(" (")[0]: line.get_color() for line in fig.axes[0].get_lines()}
    assert colours["nucleus"] == COLORS["purple"] and colours["greedy"] == COLORS[0]
    plt.close(fig)
    fig = _rnt_explorer(curves, ["setting"], None, 1e-6).draw(part0="a")
    assert [line.get_color() for line in fig.axes[0].get_lines()] == [COLORS[0], COLORS[1]]
    plt.close(fig)


# --- notebook set-up ---------------------------------------------------------------------


def test_setup_notebook_seeds_and_picks_the_available_device(capsys):
    device = setup_notebook(seed=3)
    first = (torch.rand(3), np.random.rand())
    setup_notebook(seed=3, verbose=False)
    second = (torch.rand(3), np.random.rand())
    assert torch.equal(first[0], second[0]) and first[1] == second[1]
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    out = capsys.readouterr().out
    first_line, second_line = out.splitlines()[:2]
    assert first_line.startswith("seed: 3 | device: ") and " | torch " in first_line, out
    assert second_line.startswith("nmst_lib ") and second_line.endswith("(UTC)"), out
    # each line fits a phone's output box (the GPU's name may lengthen the first; an
    # uncommitted checkout adds " with local changes" to the second)
    assert len(second_line.replace(" with local changes", "")) <= 64, out
    assert device.type == "cuda" or len(first_line) <= 64, out
    assert matplotlib.rcParams["axes.prop_cycle"].by_key()["color"][0] == COLORS["blue"]
    with pytest.raises(ValueError):
        setup_notebook(seed=-1)
    with pytest.raises(TypeError):
        setup_notebook(seed=1.5)


def test_code_words_name_the_commit_and_the_date_a_page_ran_with(monkeypatch):
    import datetime

    import nmst_lib.experiments.results as results

    day = datetime.date(2026, 11, 30)
    for version, words in [
        ({"git_sha": "0123456789abcdef", "git_dirty": False, "nmst_lib": "0.1.0"}, "commit 0123456789 |"),
        ({"git_sha": "0123456789abcdef", "git_dirty": True, "nmst_lib": "0.1.0"},
         "commit 0123456789 with local changes |"),
        ({"git_sha": None, "git_dirty": None, "nmst_lib": "0.1.0"}, "installed package |"),
    ]:
        monkeypatch.setattr(results, "code_version", lambda v=version: v)
        text = code_words(day)
        assert text.startswith("nmst_lib 0.1.0, ") and words in text and text.endswith("run 2026-11-30 (UTC)")
    with pytest.raises(TypeError, match="datetime.date"):
        code_words("2026-11-30")


def test_palette_is_indexable_by_position_and_by_name():
    assert COLORS[0] == COLORS["blue"] == "#0072B2"
    assert len(COLORS) == 8 == len(set(COLORS))
    assert list(COLORS) == list(COLORS.names.values())
    with pytest.raises(KeyError):
        COLORS["red"]


def test_eos_probabilities_at_chosen_steps_equal_the_full_computation():
    z = plots.eos_trajectory(500, "remark1", 0.6, t0=3, t1=40)
    full = plots.eos_probabilities(z, 1e-2)
    steps = torch.tensor([1, 3, 4, 39, 40, 41, 250, 500])
    some = plots.eos_probabilities(z, 1e-2, steps=steps)
    for head in full:
        torch.testing.assert_close(some[head], full[head][steps - 1], rtol=1e-12, atol=0)
    with pytest.raises(ValueError):
        plots.eos_probabilities(z, 1e-2, steps=torch.tensor([3, 2]))
    with pytest.raises(ValueError):
        plots.eos_probabilities(z, 1e-2, steps=torch.tensor([0, 2]))


def test_eos_explorer_alt_text_names_only_the_layers_it_draws():
    """Chapter 4's explorer draws VA and ST only; its alt text must not promise NMST."""
    import re

    html = plots.eos_explorer_html(eps_values=(1e-3,), amplitudes=(0.2,), shapes=("one_stop",), heads=("VA", "ST"),
                                   t_max=100, dpi=20).data
    alt = re.search(r'alt="([^"]*)"', html).group(1)
    assert "VA and ST output layers" in alt and "NMST" not in alt
    full = plots.eos_explorer_html(eps_values=(1e-3,), amplitudes=(0.2,), shapes=("one_stop",), t_max=100, dpi=20).data
    assert "VA, ST and NMST output layers" in re.search(r'alt="([^"]*)"', full).group(1)


def test_glued_text_is_the_text_even_when_it_names_a_file(tmp_path, monkeypatch):
    """say() glues markdown_text(text): a text such as "." or the name of a file in the working
    folder is shown as written, not read from disk (IPython's Markdown would read the file)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes").write_text("the file's content")
    for text in (".", "notes", "plain words", 3.5):
        assert markdown_text(text).data == str(text)
        assert markdown_text(text)._repr_markdown_() == str(text)
