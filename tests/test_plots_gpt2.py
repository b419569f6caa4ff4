"""Tests of Chapter 7's figures in nmst_lib.plots (``07_gpt2``): the p(eos | t) plot draws the
given probabilities over the line's tokens and marks sentence ends, the kernel-free explorer
holds one distinct frame per (line, output layer, eps) and escapes its menu text, the eps
trade-off plot draws the stored numbers and puts its guarantee line exactly where t_{1/2} = L,
and the length histogram's bars are fractions that sum to one with the unfinished bar last."""

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
from nmst_lib.heads import eos_lower_bound  # noqa: E402
from nmst_lib.theory import first_step_eos_above_half  # noqa: E402

EPS = (1e-4, 5e-4, 2.5e-3)
TOKENS = [" The", " cat", " sat", ".", " It", " was", " <unk>", "!", "\n", "<|endoftext|>"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def fake_line(seed=0, tokens=TOKENS, context="On December 4 , 2010 , Kershaw married his"):
    rng = np.random.default_rng(seed)
    n = len(tokens)
    p = {("va", None): rng.uniform(1e-4, 0.3, n)}
    for e in EPS:
        floor = eos_lower_bound(torch.arange(1, n + 1), e).double().numpy()
        p[("st", e)] = np.maximum.accumulate(rng.uniform(1e-3, 0.3, n))
        p[("nmst", e)] = np.maximum(rng.uniform(1e-3, 0.3, n), floor)
    return {"context": context, "tokens": list(tokens), "p_eos": p}


def explorer_payload(html_object):
    match = re.search(r'<script type="application/json" class="nmst-explorer-data">(.*?)</script>', html_object.data, re.S)
    assert match, "explorer has no data block"
    return json.loads(match.group(1).replace("<\\/", "</"))


# --- eos_token_plot ----------------------------------------------------------------------


def test_eos_token_plot_draws_each_models_probabilities_over_the_tokens():
    line = fake_line()
    fig = plots.eos_token_plot(line["tokens"], line["p_eos"], eps=5e-4)
    ax = fig.axes[0]
    drawn = {l.get_label(): l for l in ax.get_lines()}
    np.testing.assert_allclose(drawn["VA"].get_ydata(), line["p_eos"][("va", None)])
    np.testing.assert_allclose(drawn["NMST ε=5e-4"].get_ydata(), line["p_eos"][("nmst", 5e-4)])
    np.testing.assert_allclose(drawn["ST ε=2.5e-3"].get_ydata(), line["p_eos"][("st", 2.5e-3)])
    np.testing.assert_array_equal(drawn["VA"].get_xdata(), np.arange(1, len(TOKENS) + 1))
    floor = [l for label, l in drawn.items() if label.startswith("f_lb")][0]
    np.testing.assert_allclose(floor.get_ydata(), 1 - (1 - 5e-4) ** np.arange(1, len(TOKENS) + 1), rtol=1e-12)
    assert ax.get_yscale() == "log"
    # the tick of step t is the token y_t, readable: no leading space, a newline shown as \n
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["The", "cat", "sat", ".", "It", "was", "<unk>", "!", "\\n", "<|endoftext|>"]


def test_eos_token_plot_marks_sentence_ends_in_red_and_shades_the_next_step():
    line = fake_line()
    fig = plots.eos_token_plot(line["tokens"], {("va", None): line["p_eos"][("va", None)]})
    ax = fig.axes[0]
    red = [t.get_text() for t in ax.get_xticklabels() if t.get_color() == plots.COLORS["vermillion"]]
    assert red == [".", "!"]
    # shaded: the step after each sentence end (t = 5 after "." at t = 4, t = 9 after "!" at t = 8)
    spans = sorted(round((p.get_x() + p.get_width() / 2)) for p in ax.patches)
    assert spans == [5, 9]


def test_eos_token_plot_max_tokens_cuts_the_line_and_says_so():
    line = fake_line()
    fig = plots.eos_token_plot(line["tokens"], line["p_eos"], max_tokens=4, title="x")
    ax = fig.axes[0]
    assert len(ax.get_xticklabels()) == 4
    assert all(len(l.get_ydata()) == 4 for l in ax.get_lines())
    assert "first 4 of 10 tokens" in ax.get_title()


@pytest.mark.parametrize("bad, error, message", [
    ({("xx", None): [0.1] * 10}, ValueError, "head must be one of"),              # unknown head
    ({("va", 1e-4): [0.1] * 10}, ValueError, "the VA model has no eps"),          # VA with an eps
    ({("nmst", 0.0): [0.1] * 10}, ValueError, "eps must lie strictly between"),   # eps outside (0, 1)
    ({("nmst", 1e-4): [0.1] * 9}, ValueError, "9 probabilities for 10 tokens"),   # one short
    ({("nmst", 1e-4): [0.0] * 10}, ValueError, r"must lie in \(0, 1\]"),          # zero: a log axis
    ({("nmst", 1e-4): [1.5] * 10}, ValueError, r"must lie in \(0, 1\]"),          # not a probability
    ({"nmst": [0.1] * 10}, TypeError, "a model key must be a pair"),              # key is not (head, eps)
    ([0.1] * 10, TypeError, "must be a non-empty mapping"),                       # not a mapping
])
def test_eos_token_plot_rejects_bad_probabilities(bad, error, message):
    with pytest.raises(error, match=message):
        plots.eos_token_plot(TOKENS, bad)


# --- eos_token_explorer_html -------------------------------------------------------------


def test_explorer_has_one_distinct_frame_per_line_and_stored_model():
    lines = [fake_line(seed=s) for s in range(2)]
    html = plots.eos_token_explorer_html(lines, dpi=30)
    data = explorer_payload(html)
    # controls: line (2), model (ST, NMST, both at each of 3 eps)
    assert data["sizes"] == [2, 9]
    assert data["labels"][1][:3] == ["ST, ε = 1e-4", "NMST, ε = 1e-4", "ST and NMST, ε = 1e-4"]
    assert data["labels"][1][-1] == "ST and NMST, ε = 2.5e-3"
    assert len(data["frames"]) == 2 * 9
    assert len(set(data["frames"])) == len(data["frames"])  # every setting draws something different
    # the menu starts at NMST and the smallest eps
    assert 'value="1" selected' in html.data


def test_explorer_accepts_the_traces_of_the_experiments_module_unchanged():
    line = fake_line()
    traces = [{"sequence_index": 3, "line_number": 7, "context_text": line["context"], "context": [],
               "tokens": line["tokens"], "text": "".join(line["tokens"]),
               "models": [{"label": "x", "head": h, "eps": e, "p_eos": list(p)} for (h, e), p in line["p_eos"].items()]}]
    direct = explorer_payload(plots.eos_token_explorer_html([line], dpi=30))
    converted = explorer_payload(plots.eos_token_explorer_html(traces, dpi=30))
    assert direct["labels"] == converted["labels"]
    assert direct["frames"] == converted["frames"]


def test_explorer_escapes_model_tokens_in_its_menu():
    line = fake_line(context="the <unk> of <|endoftext|> & co")
    html = plots.eos_token_explorer_html([line], dpi=30).data
    controls = html.split('<script type="application/json"')[0]
    assert "<unk>" not in controls and "&lt;unk&gt;" in controls
    assert "<|endoftext|>" not in controls


def test_explorer_offers_only_models_every_line_has_and_never_an_empty_frame():
    """A model some line lacks is not in the menu (Chapter 7's ST at 1e-4 drew six blank frames),
    and "ST and NMST" is offered only where both are stored, so it never equals one layer alone."""
    line = fake_line()
    del line["p_eos"][("st", 1e-4)]
    other = fake_line(seed=1)
    html = plots.eos_token_explorer_html([line, other], dpi=30)
    data = explorer_payload(html)
    assert "ST, ε = 1e-4" not in data["labels"][1] and "ST and NMST, ε = 1e-4" not in data["labels"][1]
    assert "NMST, ε = 1e-4" in data["labels"][1]
    assert len(data["frames"]) == 2 * 7
    assert "no stored result" not in html.data


def test_explorer_labels_keep_unk_whole():
    """GPT-2's BPE cuts WikiText's <unk> into ' <', 'unk', '>': the ticks say it is one word."""
    assert plots._token_labels([" The", " <", "unk", ">", " sat", "<", "b"]) == \
        ["The", "<unk> 1/3", "<unk> 2/3", "<unk> 3/3", "sat", "<", "b"]


def test_explorer_labels_a_split_unk_whole_also_when_merged_or_begun_in_the_context():
    """The last piece of a split <unk> is often merged with a mark (">.", ">,"), and a line can
    begin inside an <unk> that the context began: every piece still reads as <unk>."""
    assert plots._token_labels([" <", "unk", ">.", " It", " (<", "unk", ">)"]) == \
        ["<unk> 1/3", "<unk> 2/3", "<unk>. 3/3", "It", "(<unk> 1/3", "<unk> 2/3", "<unk>) 3/3"]
    assert plots._token_labels(["unk", ">,", " just"], context=[" is", " <"]) == \
        ["<unk> 2/3", "<unk>, 3/3", "just"]
    assert plots._token_labels([" <unk>", "<|endoftext|>"]) == ["<unk>", "<|endoftext|>"]


# A piece of a special token, or a GPT-2 byte-level marker (Ġ space, Ċ newline), on a tick
# label, in a title or in a menu: what the book never shows a reader.
_WHOLE = re.compile(r"<unk>|<\|endoftext\|>")


def _raw_pieces(text):
    rest = _WHOLE.sub(" ", text)
    found = re.findall(r"[<>Ġ\u010a\ufffd]|\|endoftext\||(?<![a-z])unk(?![a-z])", rest)
    return found


def test_explorer_of_the_published_gpt2_results_shows_no_piece_of_a_model_token():
    """Chapter 7's explorer on the published cpu results: before, its ticks read '<', 'unk',
    '>.' and '>,' wherever GPT-2's BPE had merged the end of <unk> with a mark or the context had
    begun the <unk>, and a title ended in '<unk'."""
    from nmst_lib.experiments import published_results_dir
    from nmst_lib.experiments.gpt2 import gpt2_eos_traces, load_gpt2_results
    from nmst_lib.plots.token_traces import _eos_token_explorer

    stored = load_gpt2_results("cpu", published_results_dir())
    traces = gpt2_eos_traces([s.data for s in stored if s.data is not None])
    assert traces, "no published GPT-2 trace"
    explorer = _eos_token_explorer(traces, max_tokens=10**6, label_words=8, initial_head="nmst",
                                   initial_eps=None)
    menu = explorer.controls[0].shown
    problems = [f"menu {m!r}" for m in menu if _raw_pieces(m)]
    for i, line in enumerate(traces):
        fig = explorer.draw(i, 0)
        ax = fig.axes[0]
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert len(ticks) == len(line["tokens"])
        problems += [f"line {i}, step {t}: {label!r}" for t, label in enumerate(ticks, 1)
                     if _raw_pieces(label)]
        problems += [f"line {i}, title {ax.get_title()!r}"] if _raw_pieces(ax.get_title()) else []
        plt.close(fig)
    assert not problems, "\n".join(problems)


def test_explorer_rejects_lines_without_self_terminating_models_or_bad_choices():
    only_va = {"context": "c", "tokens": TOKENS, "p_eos": {("va", None): [0.1] * len(TOKENS)}}
    with pytest.raises(ValueError, match="no ST or NMST"):
        plots.eos_token_explorer_html([only_va])
    with pytest.raises(ValueError, match="initial_head"):
        plots.eos_token_explorer_html([fake_line()], initial_head="va")
    with pytest.raises(ValueError, match="initial_eps"):
        plots.eos_token_explorer_html([fake_line()], initial_eps=1e-2)
    with pytest.raises(TypeError):
        plots.eos_token_explorer_html([])
    with pytest.raises(ValueError, match="lacks"):
        plots.eos_token_explorer_html([{"context": "c", "tokens": TOKENS}])


# --- eps_tradeoff_plot -------------------------------------------------------------------


def tradeoff_points():
    return [
        {"head": "va", "eps": None, "ppl": 60.0, "rnt": 0.4},
        {"head": "st", "eps": 2.5e-3, "ppl": 70.0, "rnt": 0.0},
        {"head": "st", "eps": 1e-4, "ppl": 64.0, "rnt": 0.9, "ppl_std": 1.0},
        {"head": "nmst", "eps": 1e-4, "ppl": 61.0, "rnt": 0.3},
        {"head": "nmst", "eps": 2.5e-3, "ppl": 66.0, "rnt": 0.0},
    ]


def test_tradeoff_plot_draws_each_layers_numbers_sorted_by_eps_and_va_as_a_line():
    fig = plots.eps_tradeoff_plot(tradeoff_points(), L=1000)
    ppl_ax, rnt_ax = fig.axes[:2]
    for ax, metric in ((ppl_ax, "ppl"), (rnt_ax, "rnt")):
        assert ax.get_xscale() == "log"
        lines = {l.get_label(): l for l in ax.get_lines()}
        st_line = [l for l in ax.get_lines() if list(l.get_xdata()) == [1e-4, 2.5e-3] and l.get_linestyle() == "--"][0]
        nmst_line = [l for l in ax.get_lines() if list(l.get_xdata()) == [1e-4, 2.5e-3] and l.get_linestyle() == "-"][0]
        expected = {"ppl": ([64.0, 70.0], [61.0, 66.0]), "rnt": ([0.9, 0.0], [0.3, 0.0])}[metric]
        np.testing.assert_allclose(np.asarray(st_line.get_ydata(), dtype=float), expected[0])
        np.testing.assert_allclose(np.asarray(nmst_line.get_ydata(), dtype=float), expected[1])
        va = lines["VA"]
        assert set(va.get_ydata()) == {60.0 if metric == "ppl" else 0.4}


def test_tradeoff_plot_labels_the_perplexity_axis_with_the_unit_it_is_given():
    fig = plots.eps_tradeoff_plot(tradeoff_points(), ppl_label="validation perplexity (per GPT-2 token)")
    assert fig.axes[0].get_ylabel() == "validation perplexity (per GPT-2 token)"
    assert fig.axes[1].get_ylabel().startswith("$r_{nt}(L)$")
    plt.close(fig)
    with pytest.raises(TypeError, match="ppl_label"):
        plots.eps_tradeoff_plot(tradeoff_points(), ppl_label="")


@settings(max_examples=30, deadline=None)
@given(L=st.integers(2, 5000))
def test_tradeoff_guarantee_line_sits_where_the_half_life_step_reaches_L(L):
    fig = plots.eps_tradeoff_plot(tradeoff_points(), L=L)
    ax = fig.axes[0]
    guarantee = [l for l in ax.get_lines() if l.get_label().startswith("ε above which")]
    assert len(guarantee) == 1
    eps_L = guarantee[0].get_xdata()[0]
    # right of the line greedy search must stop within L whatever the weights; left of it not
    assert first_step_eos_above_half(min(eps_L * (1 + 1e-9), 0.999)) <= L
    assert first_step_eos_above_half(eps_L * (1 - 1e-6)) > L or eps_L * (1 - 1e-6) <= 0
    plt.close(fig)


@pytest.mark.parametrize("points, error, message", [
    ([{"head": "va", "eps": None, "ppl": 60.0, "rnt": 0.4}], ValueError, "at least one ST or NMST"),  # no eps axis
    ([{"head": "st", "eps": 1e-4, "ppl": 60.0, "rnt": 1.4}], ValueError, "r_nt is a fraction"),
    ([{"head": "st", "eps": 1e-4, "ppl": 0.5, "rnt": 0.4}], ValueError, "a perplexity is a finite number >= 1"),
    ([{"head": "st", "eps": 1e-4, "ppl": 60.0}], ValueError, "must be a mapping with 'head', 'eps', 'ppl' and 'rnt'"),
    ({"head": "st"}, TypeError, "points must be a non-empty sequence"),
])
def test_tradeoff_plot_rejects_bad_points(points, error, message):
    with pytest.raises(error, match=message):
        plots.eps_tradeoff_plot(points)


# --- length_histogram_plot ---------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 200), bins=st.integers(1, 40))
def test_length_histogram_bars_are_fractions_that_sum_to_one_with_unfinished_last(seed, n, bins):
    rng = np.random.default_rng(seed)
    L = 500
    lengths = rng.integers(1, L + 1, n)
    done = rng.random(n) > 0.3
    fig = plots.length_histogram_plot({"data": rng.integers(1, L + 1, 50), "VA": (lengths, done)}, max_len=L, bins=bins)
    ax = fig.axes[0]
    va = [p for p in ax.patches if p.get_label().startswith("VA")][0]
    data = [p for p in ax.patches if p.get_label().startswith("data")][0]
    heights = va.get_data().values
    np.testing.assert_allclose(heights.sum(), 1.0, atol=1e-12)
    np.testing.assert_allclose(heights[-1], np.mean(~done))  # the last bar: unfinished at L
    assert heights[-2] == 0.0                                 # the gap before it
    np.testing.assert_allclose(data.get_data().values.sum(), 1.0, atol=1e-12)
    edges = va.get_data().edges
    assert edges[-2] > L + 0.5                                # the unfinished bar lies right of L
    plt.close(fig)


def test_length_histogram_counts_lines_longer_than_the_limit_in_the_last_bar():
    fig = plots.length_histogram_plot({"data": [1, 2, 600, 700], "VA": ([1, 2, 600], [True, True, False])}, max_len=500)
    bars = {p.get_label().split(" (")[0]: p.get_data().values for p in fig.axes[0].patches}
    np.testing.assert_allclose(bars["data"][-1], 0.5)
    np.testing.assert_allclose(bars["VA"][-1], 1 / 3)
    np.testing.assert_allclose(bars["data"].sum(), 1.0)


def test_length_histogram_rejects_lengths_below_one_and_bad_input():
    with pytest.raises(ValueError):
        plots.length_histogram_plot({"VA": [0, 2]}, max_len=500)
    with pytest.raises(TypeError):
        plots.length_histogram_plot([1, 2], max_len=500)
    with pytest.raises(ValueError):
        plots.length_histogram_plot({"VA": ([1, 2], [True])}, max_len=500)


def test_sentence_end_chars_cover_the_papers_marks():
    assert all(plots._is_sentence_end(t) for t in [".", " .", "!", "?", " end."])
    assert not any(plots._is_sentence_end(t) for t in [",", " the", "<|endoftext|>", "\n"])
