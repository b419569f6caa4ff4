"""Tests of nmst_lib.report: escaped HTML tables, repeated-run formatting, selection of results,
r_nt from stored records, length and token statistics, training status and provenance summaries
(Chapter 6, 06_wikitext, and the later experiment chapters)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib import report

# ---------------------------------------------------------------------------------------------
# HTML


def test_escape_turns_model_tokens_into_visible_text():
    assert report.escape("<unk> <eos> <|endoftext|> & \"q\"") == (
        "&lt;unk&gt; &lt;eos&gt; &lt;|endoftext|&gt; &amp; &quot;q&quot;")
    assert report.escape(None) == ""
    assert report.escape(3) == "3"


def test_html_table_escapes_every_cell_header_and_caption():
    rows = [{"<b>col</b>": "<unk> , <unk>", "n": 3}, {"<b>col</b>": "<eos>", "n": 12345}]
    out = report.html_table(rows, caption="<unk> table", text_columns=("<b>col</b>",))
    assert isinstance(out, report.Html) and isinstance(out, str)
    assert out._repr_html_() == str(out)
    for raw in ("<unk>", "<eos>", "<b>col</b>"):
        assert raw not in out
    assert "&lt;unk&gt; , &lt;unk&gt;" in out and "&lt;eos&gt;" in out and "&lt;b&gt;col&lt;/b&gt;" in out
    assert "12,345" in out  # integers get thousands separators
    assert out.count("<tr>") == 3 and 'class="nmst-table-caption"' in out and "&lt;unk&gt; table</p>" in out
    # the caption is outside the box that scrolls: it stays whole in the column on a phone
    assert out.index("nmst-table-caption") < out.index("nmst-table-wrapper")
    assert "pre-wrap" in out  # the text column wraps and keeps whitespace
    assert out.count("nowrap") == 2  # the short cells stay on one line (headers may wrap)
    assert out.startswith('<p class="nmst-table-caption"') and out.endswith("</table></div>")
    assert report.html_table(rows).startswith('<div class="nmst-table-wrapper"')  # no caption: no paragraph


def test_html_table_grouped_headers_span_consecutive_columns():
    rows = [{("", "model"): "VA", ("RNN", "ours"): "1", ("RNN", "paper"): "2", ("LSTM", "ours"): "3"}]
    out = report.html_table(rows)
    assert '<th colspan="2" style="padding: 0.15em 0.5em; text-align: center;">RNN</th>' in out
    assert '<th colspan="1" style="padding: 0.15em 0.5em; text-align: center;">LSTM</th>' in out
    with pytest.raises(ValueError):
        report.html_table(rows, [("RNN", "ours"), "plain"])


def test_html_table_missing_cells_floats_and_bad_input():
    out = report.html_table([{"a": 1.5}, {"b": "x"}], ["a", "b"], digits=2)
    assert "1.50" in out and out.count("<td") == 4
    with pytest.raises(TypeError, match="rows must be a sequence of mappings"):
        report.html_table({"a": 1})
    with pytest.raises(TypeError, match="every row must be a mapping"):
        report.html_table([1, 2])
    with pytest.raises(ValueError, match="a table needs at least one column"):
        report.html_table([], [])


# ---------------------------------------------------------------------------------------------
# Repeated runs


def test_and_list_joins_names_as_prose_without_a_serial_comma():
    assert report.and_list(["VA"]) == "VA"
    assert report.and_list(("VA", "ST")) == "VA and ST"
    assert report.and_list(iter(["VA", "ST", "NMST"])) == "VA, ST and NMST"
    with pytest.raises(ValueError, match="at least one"):
        report.and_list([])
    with pytest.raises(TypeError, match="non-empty strings"):
        report.and_list(["VA", ""])
    with pytest.raises(TypeError, match="non-empty strings"):
        report.and_list(["VA", 3])


def test_counted_puts_the_noun_in_the_number_the_count_asks_for():
    assert report.counted(1, "seed") == "1 seed"
    assert report.counted(0, "seed") == "0 seeds"
    assert report.counted(3, "seed") == "3 seeds"
    assert report.counted(np.int64(2), "model") == "2 models"
    assert report.counted(4000, "piece") == "4,000 pieces"
    assert report.counted(2, "mixture", "mixtures") == "2 mixtures"
    assert report.counted(2, "index", "indices") == "2 indices"
    with pytest.raises(ValueError, match=">= 0"):
        report.counted(-1, "seed")
    for bad in (1.0, True, "1"):
        with pytest.raises(TypeError, match="n must be an int"):
            report.counted(bad, "seed")
    with pytest.raises(TypeError, match="noun"):
        report.counted(1, "")


def test_mean_std_uses_the_sample_standard_deviation():
    assert report.mean_std([1.0, 2.0, 3.0]) == "2.0 ± 1.0"
    assert report.mean_std([5.0]) == "5.0 ± n/a"
    assert report.mean_std([]) == "—"
    with pytest.raises(ValueError):
        report.mean_std([1.0, float("nan")])


def test_mean_range_reports_a_mean_over_seeds_with_its_range_not_a_count():
    r = np.array([0.890625, 0.53125, 0.9140625])  # the LSTM VA greedy plateau of three seeds
    assert report.mean_range(r, 1, scale=100) == "77.9 (53.1–91.4)"
    assert report.mean_range(r * 128, 1, range_digits=0) == "99.7 (68–117)"
    assert report.mean_range([0.0, 0.0, 0.0], 1) == "0.0"
    assert report.mean_range([0.25], 2) == "0.25"
    assert report.mean_range([], 2) == "—"


# ---------------------------------------------------------------------------------------------
# Selecting results


def _result(arch="lstm", head="va", eps=None, seed=0, **extra):
    return {"key": f"cpu-{arch}-{head}-seed{seed}", "config": {"arch": arch, "head": head, "eps": eps, "seed": seed},
            **extra}


def test_select_matches_config_fields_with_none_and_float_tolerance():
    results = [_result(), _result(head="st", eps=5e-4), _result(head="st", eps=1e-4), _result(arch="rnn")]
    assert [r["config"]["eps"] for r in report.select(results, head="st")] == [5e-4, 1e-4]
    assert report.select(results, head="st", eps=0.0005) == [results[1]]
    assert report.select(results, eps=None) == [results[0], results[3]]
    assert report.select(results, no_such_field=1) == []


def test_values_reads_dotted_paths_and_functions():
    results = [_result(metrics={"val_ppl": 10.0}, decoding={"greedy": {"rnt": [0.5, 0.25]}}),
               _result(seed=1, metrics={"val_ppl": 12.0}, decoding={"greedy": {"rnt": [0.5, 0.0]}})]
    np.testing.assert_array_equal(report.values(results, "metrics.val_ppl"), [10.0, 12.0])
    np.testing.assert_array_equal(report.values(results, "decoding.greedy.rnt.-1"), [0.25, 0.0])
    np.testing.assert_array_equal(report.values(results, lambda r: r["config"]["seed"]), [0.0, 1.0])
    with pytest.raises(KeyError, match="test_ppl"):
        report.values(results, "metrics.test_ppl")


# ---------------------------------------------------------------------------------------------
# r_nt from stored records


def test_rnt_at_token_level_counts_lengths_above_L_and_unfinished():
    rec = {"method": "greedy", "max_len": 10, "lengths": [3, 5, 10, 10], "terminated": [True, True, True, False]}
    steps = report.stored_termination_steps(rec)
    np.testing.assert_array_equal(steps, [3, 5, 10, math.inf])
    assert report.rnt_at(rec, 3) == 0.75   # |y| > 3: 5, 10, unfinished
    assert report.rnt_at(rec, 5) == 0.5
    assert report.rnt_at(rec, 9) == 0.5
    assert report.rnt_at(rec, 10) == 0.25  # the one of length exactly 10 finished within 10
    with pytest.raises(ValueError):
        report.rnt_at(rec, 11)
    with pytest.raises(TypeError):
        report.rnt_at(rec, 2.0)


def test_rnt_at_beam_uses_first_finish_steps_not_returned_lengths():
    # Row 0 returned a sequence of length 9, but a hypothesis had finished at step 4: a search
    # limited to 5 steps terminates there.
    rec = {"method": "beam", "max_len": 10, "lengths": [9, 10], "terminated": [True, False],
           "first_finish_steps": [4, None]}
    assert report.rnt_at(rec, 5) == 0.5
    assert report.rnt_at(rec, 3) == 1.0
    old = {k: v for k, v in rec.items() if k != "first_finish_steps"}
    with pytest.raises(ValueError, match="first_finish_steps"):
        report.rnt_at(old, 5)


def test_rnt_at_agrees_with_the_library_on_a_real_decode():
    import torch

    from nmst_lib.decoding import decode
    from nmst_lib.markov import random_markov_lm
    from nmst_lib.metrics import rnt_curve

    lm = random_markov_lm(12, temperature=0.3, generator=torch.Generator().manual_seed(1))
    contexts = torch.randint(0, 11, (200, 1), generator=torch.Generator().manual_seed(0))
    later_finish = 0
    for method, kw in [("greedy", {}), ("beam", {"beam_size": 3})]:
        g = decode(lm, contexts, method, max_len=30, **kw)
        # decode() records it (nmst_lib.decoding.Generation); without it this
        # check would have nothing to compare, so its absence is a failure
        assert getattr(g, "first_finish_steps", None) is not None, method
        rec = {"method": method, "max_len": 30, "lengths": g.lengths.tolist(), "terminated": g.terminated.tolist()}
        if method == "beam":
            rec["first_finish_steps"] = [s if s <= 30 else None for s in g.first_finish_steps.tolist()]
            later_finish = int((g.terminated & (g.first_finish_steps < g.lengths)).sum())
        Ls = list(range(1, 31))
        np.testing.assert_allclose([report.rnt_at(rec, L) for L in Ls], rnt_curve(g, Ls))
    assert later_finish > 0  # the case where returned lengths and first finishes differ did occur


# ---------------------------------------------------------------------------------------------
# Lengths and tokens


def test_lengths_from_histogram_and_length_summary():
    lengths = report.lengths_from_histogram({"values": [5, 2, 9], "counts": [2, 1, 0]})
    np.testing.assert_array_equal(lengths, [2, 5, 5])
    s = report.length_summary([2, 5, 5, 100], terminated=[True, True, True, False])
    assert (s.n, s.finished, s.unfinished) == (4, 3, 1)
    assert s.median == 5 and s.max == 5 and math.isclose(s.mean, 4.0)
    empty = report.length_summary([7], terminated=[False])
    assert math.isnan(empty.median)
    with pytest.raises(ValueError):
        report.lengths_from_histogram({"values": [1, 2], "counts": [1]})


def test_ks_distance_extremes_and_unfinished_lengths():
    assert report.ks_distance([1, 2, 3], [1, 2, 3]) == 0.0
    assert report.ks_distance([1, 2], [10, 20]) == 1.0
    assert report.ks_distance([1, 2, math.inf, math.inf], [1, 2, 3, 4]) == 0.5
    assert math.isclose(report.ks_distance([1, 2, 3, 4], [3, 4, 5, 6]), 0.5)
    with pytest.raises(ValueError):
        report.ks_distance([], [1])


def test_ks_by_seed_gives_one_distance_per_seed_never_pooled():
    data = [1, 2, 3, 4]
    seed0 = {"decoding": {"greedy": {"lengths": [1, 2, 3, 4], "terminated": [True] * 4}}}
    seed1 = {"decoding": {"greedy": {"lengths": [1, 2, 1000, 1000], "terminated": [True, True, False, False]}}}
    ks, n = report.ks_by_seed([seed0, seed1], data)
    assert n == 4 and ks.tolist() == [0.0, 0.5]  # the unfinished count as longer than every line
    # pooling the two seeds would give one distance of 0.25 on 8 lengths, which is neither seed
    assert report.ks_distance(np.r_[[1, 2, 3, 4], [1, 2, math.inf, math.inf]], data) == 0.25
    with pytest.raises(ValueError, match="at least one seed"):
        report.ks_by_seed([], data)
    with pytest.raises(ValueError, match="no 'greedy' decoding"):
        report.ks_by_seed([{"decoding": {}}], data)
    short = {"decoding": {"greedy": {"lengths": [1, 2], "terminated": [True, True]}}}
    with pytest.raises(ValueError, match="different numbers of contexts"):
        report.ks_by_seed([seed0, short], data)


def test_token_share_longest_run_and_repeating_tail():
    texts = ["<unk> , <unk> <unk> <eos>", ["the", "<unk>"]]
    share = report.token_share(texts)
    assert (share.count, share.total) == (4, 6) and math.isclose(share.fraction, 4 / 6)
    assert math.isnan(report.token_share([]).fraction)
    assert report.longest_run("a <unk> <unk> b <unk> <unk> <unk>") == 3
    assert report.longest_run("a b") == 0

    cycle = report.repeating_tail("the cat , <unk> <unk> , <unk> <unk> , <unk> <unk> <eos>")
    assert cycle is not None and cycle.tokens == (",", "<unk>", "<unk>") and cycle.repeats == 3
    assert cycle.period == 3 and cycle.covered == 9 and str(cycle) == ", <unk> <unk>"
    assert cycle.canonical() == report.Cycle(("<unk>", ",", "<unk>"), 2).canonical()
    assert report.repeating_tail("<unk> " * 5).tokens == ("<unk>",)
    assert report.repeating_tail("a b c d e f") is None
    assert report.repeating_tail("a b a b", min_repeats=3) is None
    with pytest.raises(ValueError):
        report.repeating_tail("a", max_period=0)


# ---------------------------------------------------------------------------------------------
# Training status


def test_training_status_flags_a_run_cut_by_its_epoch_budget():
    history = [{"val_ppl": v} for v in (260.0, 200.0, 170.0, 150.0)]
    r = {"config": {"max_epochs": 4}, "metrics": {"history": history, "best_epoch": 4, "epochs_run": 4,
                                                    "stopped_early": False}}
    s = report.training_status(r)
    assert s["at_epoch_limit"] and math.isclose(s["last_drop"], 1 - 150 / 170)
    assert s["val_ppl_by_epoch"] == [260.0, 200.0, 170.0, 150.0]
    r["metrics"].update(best_epoch=3, stopped_early=True)
    assert not report.training_status(r)["at_epoch_limit"]
    one = {"config": {"max_epochs": 1}, "metrics": {"history": history[:1], "best_epoch": 1}}
    assert math.isnan(report.training_status(one)["last_drop"])


# ---------------------------------------------------------------------------------------------
# Provenance


def test_command_template_keeps_shared_values_and_marks_the_rest():
    cmds = ["python -m nmst_lib run --arch rnn --seed 0 --threads 1",
            "python -m nmst_lib run --arch lstm --seed 0 --threads 1 --eps 1e-4",
            "python -m nmst_lib run --arch lstm --seed 0 --threads 1 --eps 5e-4 --no-progress"]
    assert report.command_template(cmds) == (
        "python -m nmst_lib run --arch <ARCH> --seed 0 --threads 1 [--eps <EPS>] [--no-progress]")
    assert report.command_template(["a --x 1", "b --x 1"]) == "<several commands>"
    assert report.command_template([]) == ""


def _stamped(arch, head, eps, seed, date, seconds, resumed=None):
    return _result(arch, head, eps, seed, profile="cpu",
                   provenance={"git_sha": "be0b89dedd69ec36", "git_dirty": False, "nmst_lib": "0.1.0",
                               "torch": "2.13.0+cpu", "python": "3.11.7", "device": "cpu", "device_name": "x86_64",
                               "threads": 1, "date_utc": date, "train_seconds": seconds, "resumed_from": resumed,
                               "command": f"python -m nmst_lib run --arch {arch} --head {head} --seed {seed}"},
                   data={"splits": {"train": "substitute train"}}, seeds={"torch": seed})


def test_provenance_summary_states_shared_stamps_once_and_groups_the_rest():
    results = [_stamped("rnn", "va", None, 0, "2026-11-22T03:27:16+00:00", 356.2, {"epoch": 4, "step": 0}),
               _stamped("rnn", "va", None, 1, "2026-11-22T03:45:57+00:00", 330.0),
               _stamped("lstm", "st", 5e-4, 0, "2026-11-22T03:20:53+00:00", 317.4)]
    s = report.provenance_summary(results, group_by=("arch", "head"))
    assert s.n == 3
    assert s.common["code"] == "be0b89dedd (clean)" and s.common["device"] == "cpu (x86_64, 1 thread)"
    assert s.common["training data"] == "substitute train"
    assert s.common["command"] == "python -m nmst_lib run --arch <ARCH> --head <HEAD> --seed <SEED>"
    assert set(s.varying) == {"date (UTC)", "training (s)", "resumed"}
    rnn = next(g for g in s.groups if g["arch"] == "rnn")
    assert rnn["runs"] == 2 and rnn["seeds"] == "0, 1"
    assert rnn["date (UTC)"] == "2026-11-22 03:27 – 2026-11-22 03:45"
    assert rnn["training (s)"] == "330–356" and rnn["resumed"] == "from epoch 4 (1 of 2)"
    assert len(s.full) == 3 and s.full[0]["run"] == "cpu-rnn-va-seed0"
    results[1]["provenance"]["git_sha"] = "d8add94a21aa"  # a run remade later by other code
    s = report.provenance_summary(results, group_by=("arch",))
    assert "code" in s.varying and "code" not in s.common
    assert next(g for g in s.groups if g["arch"] == "rnn")["code"] == "be0b89dedd (clean) ×1, d8add94a21 (clean) ×1"


def test_provenance_html_puts_the_full_table_in_a_collapsed_details_element():
    results = [_stamped("rnn", "va", None, 0, "2026-11-22T03:27:16+00:00", 356.2),
               _stamped("rnn", "va", None, 1, "2026-11-22T03:45:57+00:00", 330.0)]
    out = report.provenance_html(results, intro="<from the stamps>")
    assert "<details><summary>Full provenance of every run (2 result files)</summary>" in out
    assert "<details open" not in out
    assert "&lt;from the stamps&gt;" in out and "<from the stamps>" not in out
    assert out.index("nmst-provenance-common") < out.index("<details>")  # the summary comes first
    assert "<strong>Code (git commit):</strong> be0b89dedd (clean)" in out
    assert out.count("cpu-rnn-va-seed") == 2           # the run keys appear only in the full table


def test_details_html_is_collapsed_unless_asked_and_escapes_the_summary():
    out = report.details_html("<unk> examples", "<b>x</b>")
    assert out == "<details><summary>&lt;unk&gt; examples</summary><b>x</b></details>"
    assert report.details_html("s", "", open=True).startswith("<details open>")


def test_published_results_render_without_raw_model_tokens():
    """Every published result's provenance and stored continuations, put through the report
    module, leave no raw <unk>/<eos> in the HTML (the site check for Chapter 6)."""
    from nmst_lib.experiments import load_result, suite_configs
    from nmst_lib.experiments.temperature_suite import baseline_configs

    # Chapter 6's suite and Chapter 9's baselines (by the first editions' word recipe, until
    # Chapter 9 switches, their text has <unk>; by the converged recipe, only <eos>)
    stored = [load_result(c) for c in suite_configs("cpu") + baseline_configs("cpu")]
    results = [s.data for s in stored if s.data is not None]
    if not results:
        pytest.skip("no published cpu results in this installation")
    rows = [{"text": ex["continuation"], "context": ex["context"]}
            for d in results for rec in d["decoding"].values() for ex in rec["examples"]]
    out = report.html_table(rows, text_columns=("text", "context")) + report.provenance_html(results)
    assert "<unk>" not in out and "<eos>" not in out
    assert "&lt;eos&gt;" in out  # the stored text has them, escaped: the check is not vacuous


# ---------------------------------------------------------------------------------------------
# The figures of stored experiments that the report pages use (nmst_lib.plots helpers)


def test_experiment_figure_helpers_draw_what_they_are_given():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nmst_lib import plots

    assert plots.STEP_AXIS_LABEL == "step t (token being predicted)"
    thin, thick = plots.model_style("nmst", 1e-4, [1e-4, 5e-4]), plots.model_style("NMST", 5e-4, [1e-4, 5e-4])
    assert thin["linewidth"] < thick["linewidth"] and thin["color"] == thick["color"] == plots.HEAD_STYLES["NMST"]["color"]
    assert plots.model_style("va") == plots.HEAD_STYLES["VA"]
    with pytest.raises(ValueError):
        plots.model_style("softmax")

    fig, axes = plt.subplots(1, 2)
    plots.history_plot({"VA": [[260, 200, 170], [250, 190, 160]], "NMST": [[255, 195, 165]]}, ax=axes[0])
    assert len(axes[0].lines) == 3 and [t.get_text() for t in axes[0].get_legend().get_texts()] == ["VA", "NMST"]
    plots.length_cdf_plot({"data": [2, 5, 9], "VA": ([3, 4, 100], [True, True, False])}, max_len=100, ax=axes[1])
    (va_line,) = [ln for ln in axes[1].lines if ln.get_label() == "VA"]
    assert va_line.get_ydata()[-1] == pytest.approx(2 / 3)  # the unfinished continuation never counts
    plots.shared_legend(fig, axes, strip=r" \(x\)")
    assert axes[0].get_legend() is None and axes[1].get_legend() is None
    assert sorted(t.get_text() for t in fig.legends[0].get_texts()) == ["NMST", "VA", "data"]
    plt.close(fig)

    fig, ax = plt.subplots()
    plots.eos_trace_plot(["the", "cat", "<eos>"], {"ST": [0.01, 0.02, 0.5]}, floors={"f_lb": [0.001, 0.002, 0.003]}, ax=ax)
    assert ax.get_xlabel() == plots.STEP_AXIS_LABEL
    assert [t.get_text() for t in ax.get_xticklabels()] == ["the", "cat", "<eos>"]
    with pytest.raises(ValueError):
        plots.eos_trace_plot(["a"], {"ST": [0.1, 0.2]}, ax=ax)
    plt.close(fig)


def test_command_template_shows_no_path_of_the_machine_that_ran_it():
    """A stamped command's absolute folders (and the interpreter's path) become placeholders named
    after their flag, so a page shows how to rerun it and nothing of the maintainers' machine."""
    from nmst_lib.report import command_template

    commands = ["/work/main/.venv/bin/python -m nmst_lib sparse --only a --out /tmp/sparse-results --checkpoint-dir /tmp/c1",
                "/work/main/.venv/bin/python -m nmst_lib sparse --only b --out /tmp/sparse-results --checkpoint-dir /tmp/c2"]
    line = command_template(commands)
    assert line == "python -m nmst_lib sparse --only <ONLY> --out <OUT> --checkpoint-dir <CHECKPOINT_DIR>"
    assert command_template(["python -m nmst_lib run --out C:\\results --seed 0"]) == \
        "python -m nmst_lib run --out <OUT> --seed 0"
    # relative paths and plain values are kept as they were
    assert command_template(["python -m nmst_lib run --out results/x --seed 0"]) == \
        "python -m nmst_lib run --out results/x --seed 0"


def test_provenance_rows_show_commands_without_machine_paths():
    from nmst_lib.report import provenance_rows, shown_command

    stamped = "python -m nmst_lib gpt2 --only st --out /tmp/gpt2-results --threads 1"
    assert shown_command(stamped) == "python -m nmst_lib gpt2 --only st --out <OUT> --threads 1"
    rows = provenance_rows([{"key": "k", "provenance": {"command": stamped}}])
    assert rows[0]["command"] == "python -m nmst_lib gpt2 --only st --out <OUT> --threads 1"


# ----- the book's notation for eps, models and the library's ASCII labels ----------------


@pytest.mark.parametrize("eps, ascii_, book", [(1e-4, "1e-04", "1e-4"), (5e-4, "5e-04", "5e-4"),
                                              (2.5e-3, "2.5e-03", "2.5e-3"), (1.25e-5, "1.25e-05", "1.25e-5"),
                                              (1e-2, "1e-02", "1e-2")])
def test_eps_is_written_with_the_fewest_digits_that_give_it_back(eps, ascii_, book):
    assert report.eps_text(eps) == ascii_ and float(ascii_) == eps
    assert report.eps_book(eps) == book and float(book) == eps


@pytest.mark.parametrize("bad", [0, 1, -1e-4, True, "5e-4", None])
def test_eps_outside_zero_one_is_refused(bad):
    with pytest.raises(ValueError, match=r"eps must be a number in \(0, 1\)"):
        report.eps_text(bad)


def test_model_names_are_the_books_and_refuse_an_eps_that_does_not_fit_the_head():
    assert report.model_name("va") == "VA"
    assert report.model_name("nmst", 2.5e-3) == "NMST ε=2.5e-3"
    assert report.model_name("st", 1e-4) == "ST ε=1e-4"
    for head, eps in (("va", 1e-4), ("st", None), ("entmax", None)):
        with pytest.raises(ValueError):
            report.model_name(head, eps)


@pytest.mark.parametrize("label, book", [
    ("NMST (eps=2.5e-03)", "NMST (ε=2.5e-3)"),
    ("NMST-entmax (eps=5e-04, alpha=1.5)", "NMST-entmax (ε=5e-4, α=1.5)"),
    ("Softmax-tau (tau=0.95)", "Softmax-T (T=0.95)"),
    ("entmax loss (alpha=1.2)", "entmax loss (α=1.2)"),
    ("CT-MoS+LSTM (M=3, power-tanh lambda=4, LS detached)", "CT-MoS+LSTM (M=3, power-tanh λ=4, LS detached)"),
    ("Nucleus (P=0.95)", "Nucleus (P=0.95)"),
    ("VA", "VA"),
])
def test_book_notation_rewrites_only_the_librarys_ascii_settings(label, book):
    assert report.book_notation(label) == book


def test_book_notation_of_a_stored_label_agrees_with_the_books_model_name():
    for head, eps in (("st", 1e-4), ("nmst", 2.5e-3), ("nmst", 1e-5)):
        stored = f"{head.upper()} (eps={report.eps_text(eps)})"  # as results store it
        assert report.book_notation(stored) == f"{head.upper()} ({report.model_name(head, eps).split(' ', 1)[1]})"
    with pytest.raises(TypeError):
        report.book_notation(None)


def test_times_writes_a_ratio_to_two_significant_figures_with_thousands_separators():
    assert report.times(2243.7) == "2,200" and report.times(20.4) == "20" and report.times(0.7391) == "0.74"
    assert report.times(9.96) == "10" and report.times(1.0) == "1" and report.times(np.float64(13.2)) == "13"
    for bad in (0.0, -2.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="finite and > 0"):
            report.times(bad)
    with pytest.raises(TypeError, match="real number"):
        report.times("3")


# ------------------------------------------------------------------ rank correlation (Chapter 9)


def test_average_ranks_share_the_mean_rank_among_ties():
    assert report.average_ranks([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]
    assert report.average_ranks([7, 7, 7]).tolist() == [2.0, 2.0, 2.0]
    assert report.average_ranks([3.0]).tolist() == [1.0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=30))
def test_average_ranks_sum_to_the_ranks_1_to_n_and_order_like_the_values(values):
    ranks = report.average_ranks(values)
    n = len(values)
    assert ranks.sum() == pytest.approx(n * (n + 1) / 2)
    for i in range(n):
        for j in range(n):
            assert (values[i] < values[j]) == (ranks[i] < ranks[j])


@settings(max_examples=60, deadline=None)
@given(st.permutations(list(range(12))))
def test_rank_correlation_without_ties_is_spearmans_formula(perm):
    x, y = np.arange(12.0), np.asarray(perm, dtype=float)
    d = report.average_ranks(x) - report.average_ranks(y)
    n = x.size
    assert report.rank_correlation(x, y) == pytest.approx(1 - 6 * np.sum(d**2) / (n * (n**2 - 1)))
    # a strictly increasing map of either sample changes no rank
    assert report.rank_correlation(np.exp(x), y**3) == pytest.approx(report.rank_correlation(x, y))


def test_rank_correlation_with_ties_ignores_the_order_the_pairs_are_stored_in():
    """A temperature saturated at its bound is shared by many tokens stored in frequency order: ranks
    by position (argsort of argsort) would make those ties correlate with the frequency rank. The
    tie-aware correlation is the same in any order of the pairs, and is the Pearson correlation of
    the mid-ranks (computed here by hand)."""
    x = np.array([2.0, 2.0, 2.0, 2.0, 3.1, 2.5])
    y = np.arange(6.0)  # the storage order itself
    rho = report.rank_correlation(x, y)
    rx = np.array([2.5, 2.5, 2.5, 2.5, 6.0, 5.0])
    ry = np.arange(1.0, 7.0)
    expected = np.sum((rx - rx.mean()) * (ry - ry.mean())) / np.sqrt(
        np.sum((rx - rx.mean()) ** 2) * np.sum((ry - ry.mean()) ** 2))
    assert rho == pytest.approx(expected)
    rng = np.random.default_rng(0)
    for _ in range(5):
        p = rng.permutation(x.size)
        assert report.rank_correlation(x[p], y[p]) == pytest.approx(rho)
    by_position = np.argsort(np.argsort(x, kind="stable"), kind="stable")
    assert np.corrcoef(by_position, y)[0, 1] > rho + 0.1  # what ranking by position made of it


@pytest.mark.parametrize(
    "x, y, match",
    [
        ([1, 2, 3], [1, 2], "equal length"),
        ([1.0], [2.0], "at least two pairs"),
        ([1, 1, 1], [1, 2, 3], "all equal has no rank order"),
        ([1, float("nan")], [1, 2], "finite"),
        ([[1, 2], [3, 4]], [1, 2], "one-dimensional"),
    ],
)
def test_rank_correlation_refuses_what_has_no_correlation(x, y, match):
    with pytest.raises(ValueError, match=match):
        report.rank_correlation(x, y)
