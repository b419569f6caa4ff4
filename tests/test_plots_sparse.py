"""Tests of Chapter 8's figures in nmst_lib.plots (``08_sparse``): the support-size plot draws the
support sizes of alpha-entmax and marks eos correctly, the rank plot stops the entmax curve at the
support size, and the alpha explorer holds one distinct frame per (context, alpha)."""

import json
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
from nmst_lib.entmax import entmax  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def zipf_scores(n=3, V=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = torch.arange(1, V + 1, dtype=torch.float64)
    slopes = torch.linspace(0.8, 2.0, n, dtype=torch.float64)[:, None]
    return -slopes * torch.log(r) + 0.2 * torch.randn(n, V, generator=g, dtype=torch.float64)


def explorer_payload(html_object):
    match = re.search(r'<script type="application/json" class="nmst-explorer-data">(.*?)</script>', html_object.data, re.S)
    assert match, "explorer has no data block"
    return json.loads(match.group(1).replace("<\\/", "</"))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([0.1, 1.0, 10.0]))
def test_support_size_plot_draws_the_number_of_positive_probabilities(seed, scale):
    scores = scale * zipf_scores(seed=seed)
    alphas = (1.0, 1.2, 1.5, 2.0, 3.0)
    fig = plots.support_size_plot(scores, alphas, labels=["a", "b", "c"])
    lines = [line for line in fig.axes[0].get_lines() if line.get_label() in ("a", "b", "c")]
    assert [line.get_label() for line in lines] == ["a", "b", "c"]
    for i, line in enumerate(lines):
        expected = [int((entmax(scores[i], a) > 0).sum()) for a in alphas]
        np.testing.assert_array_equal(line.get_ydata(), expected)
        np.testing.assert_array_equal(line.get_xdata(), alphas)
        assert expected[0] == scores.shape[-1]  # the softmax keeps every token


def test_support_size_plot_marks_eos_open_exactly_where_its_probability_is_zero():
    scores = zipf_scores(n=1, V=300)
    eos = 40  # a mid-ranked token: in the support for alpha near 1, out of it for sparsemax
    alphas = (1.0, 1.1, 1.5, 2.0)
    fig = plots.support_size_plot(scores, alphas, eos_id=eos)
    markers = [line for line in fig.axes[0].get_lines() if line.get_marker() == "o" and len(line.get_xdata())]
    filled = [line for line in markers if line.get_markerfacecolor() != "white"]
    hollow = [line for line in markers if line.get_markerfacecolor() == "white"]
    inside = {a for a in alphas if entmax(scores[0], a)[eos] > 0}
    assert set(np.concatenate([line.get_xdata() for line in filled]).tolist()) == inside
    assert set(np.concatenate([line.get_xdata() for line in hollow]).tolist()) == set(alphas) - inside
    assert 1.0 in inside and 2.0 not in inside


def test_rank_plot_stops_the_entmax_curve_at_the_support_size():
    scores = zipf_scores(n=1, V=2_000)[0]
    for alpha in (1.2, 1.5, 2.0):
        fig = plots.plot_entmax_ranks(scores, alpha, eos_id=5)
        k = int((entmax(scores, alpha) > 0).sum())
        (curve,) = [line for line in fig.axes[0].get_lines() if "entmax" in line.get_label()]
        assert curve.get_xdata().max() == k
        assert np.all(np.asarray(curve.get_ydata()) > 0)
        vertical = [line for line in fig.axes[0].get_lines() if line.get_linestyle() == "--"]
        assert vertical and vertical[0].get_xdata()[0] == k
        plt.close(fig)


def test_rank_plot_labels_eos_with_its_entmax_probability_or_zero():
    scores = zipf_scores(n=1, V=500)[0]
    inside = plots.plot_entmax_ranks(scores, 1.2, eos_id=0)
    assert any(line.get_label().startswith("eos: p = ") and "p = 0 " not in line.get_label()
               for line in inside.axes[0].get_lines())
    outside = plots.plot_entmax_ranks(scores, 2.0, eos_id=499)
    assert any(line.get_label().startswith("eos: p = 0 (softmax") for line in outside.axes[0].get_lines())


def test_alpha_explorer_has_one_distinct_frame_per_context_and_alpha():
    scores = zipf_scores(n=2, V=300)
    alphas = (1.0, 1.5, 2.0)
    html = plots.entmax_alpha_explorer_html(scores, alphas, eos_id=3, labels=["x < y", "z"], initial_alpha=1.5, dpi=30)
    data = explorer_payload(html)
    assert data["sizes"] == [2, 3]
    assert data["labels"] == [["x < y", "z"], ["1", "1.5", "2"]]
    assert len(data["frames"]) == 6 and len(set(data["frames"])) == 6
    assert "x &lt; y" in html.data and "x < y" not in html.data.split("<script")[0]
    assert 'data-frame="1"' in html.data  # context 0, alpha 1.5 is shown first


def test_masked_scores_are_allowed_and_never_in_the_support():
    scores = zipf_scores(n=1, V=200)
    scores[0, 100:] = -float("inf")
    fig = plots.support_size_plot(scores, (1.0, 1.5))
    (line,) = [line for line in fig.axes[0].get_lines() if line.get_label() == "context 1"]
    assert line.get_ydata()[0] == 100


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(alphas=(0.5, 1.5)), ValueError, "alpha-entmax needs alpha >= 1"),
        (dict(alphas=()), ValueError, "alphas must hold at least one value"),
        (dict(alphas=("1.5",)), TypeError, "every alpha must be a finite real number >= 1"),
        (dict(alphas=(1.5,), labels=["only one"]), ValueError, "labels must name each of the 2 score vectors"),
        (dict(alphas=(1.5,), eos_id=400), ValueError, r"eos_id must be in \[0, 400\)"),
        (dict(alphas=(1.5,), eos_id=1.0), TypeError, "eos_id must be an integer id"),
    ],
)
def test_bad_arguments_say_what_is_allowed(kwargs, error, message):
    with pytest.raises(error, match=message):
        plots.support_size_plot(zipf_scores(n=2), **kwargs)


def test_bad_scores_say_what_is_allowed():
    with pytest.raises(ValueError, match=r"must not contain NaN or \+inf"):
        plots.support_size_plot(torch.tensor([[float("nan"), 1.0]]), (1.5,))
    with pytest.raises(ValueError, match="needs at least one finite logit"):
        plots.support_size_plot(torch.full((1, 3), -float("inf")), (1.5,))
    with pytest.raises(TypeError, match="scores must hold floating-point logits"):
        plots.support_size_plot(torch.ones(2, 3, dtype=torch.long), (1.5,))
    with pytest.raises(ValueError, match="draws one score vector, got 2"):
        plots.plot_entmax_ranks(zipf_scores(n=2), 1.5)
