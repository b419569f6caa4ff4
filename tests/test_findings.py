"""The findings engine (nmst_lib.findings): one rule decides every verdict of Chapters 6-9.

Each verdict on synthetic inputs, the bands, the refusals, and a scan of the chapters for a
verdict count written by hand instead of computed by the engine.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.findings import (
    VERDICTS,
    Band,
    Claim,
    Finding,
    Findings,
    decide,
    noise_band,
)

ROOT = Path(__file__).resolve().parents[1]
CLAIM = Claim("nmst-below-st", "Choi et al. (2023)", "Table 1", "NMST is below ST in perplexity",
              quantity="NMST − ST", direction=-1, paper_value="177.4 against 181.0")


def test_a_gap_inside_the_band_is_within_noise_in_either_direction():
    band = Band.floor(5.0, "last epoch's validation change")
    assert decide(CLAIM, -4.8, band).verdict == "within noise"
    assert decide(CLAIM, +4.8, band).verdict == "within noise"
    assert decide(CLAIM, -5.0, band).verdict == "within noise"  # the edge is not read


def test_outside_the_band_the_sign_against_the_papers_direction_decides():
    band = Band.floor(1.0, "stated tolerance")
    assert decide(CLAIM, -1.5, band).verdict == "reproduces"
    assert decide(CLAIM, +1.5, band).verdict == "does not reproduce"
    up = Claim("x", "P", "Fig. 1", "rises", direction=+1)
    assert decide(up, +1.5, band).verdict == "reproduces"
    assert decide(up, -1.5, band).verdict == "does not reproduce"


@given(st.floats(-1e6, 1e6), st.floats(0, 1e6))
def test_the_rule_is_symmetric_and_reads_nothing_inside_the_band(value, width):
    band = Band.floor(width, "w")
    verdict = decide(CLAIM, value, band).verdict
    assert (verdict == "within noise") == (abs(value) <= width)
    mirrored = decide(Claim("y", "P", "T", "s", direction=+1), -value, band).verdict
    assert verdict == mirrored


def test_a_forced_zero_is_labelled_with_its_theorem_and_not_counted():
    f = Findings("ch6")
    found = f.forced(Claim("st-zero", "Welleck et al. (2020)", "Table 2", "ST leaves nothing unfinished"),
                     "Proposition 6.1 (t_1/2 = 277 <= L)", value=0.0)
    assert found.verdict == "forced" and not found.counted
    assert "Proposition 6.1" in found.sizes()
    assert f.counts()["reproduces"] == 0 and f.counts()["forced"] == 1


def test_one_seed_without_a_floor_is_refused():
    with pytest.raises(ValueError, match="one seed and no stated floor"):
        noise_band(seeds=([101.0], [99.0]))
    # a page's Findings never reads it either: it records the finding as not run, and why
    got = Findings("ch9").judge(CLAIM, -3.0, seeds=([101.0], [99.0]))
    assert got.verdict == "not run" and "noise band" in got.reason and got.band is None
    with pytest.raises(ValueError, match=">= 2 seeds"):
        Band.from_seeds([1.0], [1.0, 2.0])


def test_seed_spread_gives_the_band_and_the_wider_of_seeds_and_floor_wins():
    a, b = [100.0, 102.0, 104.0], [110.0, 111.0, 112.0]
    band = noise_band(seeds=(a, b))
    assert band.half_width == pytest.approx(2 * ((4 / 3) + (1 / 3)) ** 0.5)
    assert "3 + 3 seeds" in band.source
    assert noise_band(seeds=(a, b), floor=Band.floor(50.0, "big")).half_width == 50.0
    assert noise_band(seeds=([1.0], [2.0]), floor=Band.floor(0.5, "floor")).source == "floor"
    assert Findings("ch6").judge(CLAIM, -8.0, seeds=(a, b)).verdict == "reproduces"


def test_binomial_band_of_two_rates_stays_positive_at_zero_and_one():
    band = Band.binomial(0.5, 100, 0.5, 100)
    assert band.half_width == pytest.approx(2 * (2 * 0.25 / 104) ** 0.5)  # Agresti-Coull, q = 52/104
    zero = Band.binomial(0.0, 128)
    assert zero.half_width == pytest.approx(2 * ((2 / 132) * (130 / 132) / 132) ** 0.5)
    assert Band.binomial(1.0, 128).half_width == pytest.approx(zero.half_width)
    # a tie at zero is not a reproduction, and 1 of 128 against 0 of 128 is not read either
    assert decide(CLAIM, 0.0, Band.binomial(0.0, 128, 0.0, 128)).verdict == "within noise"
    assert decide(CLAIM, -1 / 128, Band.binomial(1 / 128, 128, 0.0, 128)).verdict == "within noise"
    assert decide(CLAIM, -1.0, Band.binomial(0.0, 128, 1.0, 128)).verdict == "reproduces"
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Band.binomial(1.5, 10)


@pytest.mark.parametrize("bad, error, message", [
    (lambda: Band.floor(float("nan"), "x"), ValueError, "half_width must be finite"),
    (lambda: Band.floor(1.0, ""), ValueError, "reason must be a non-empty string"),
    (lambda: Band(-1.0, "x"), ValueError, "half_width must be >= 0"),
    (lambda: decide(CLAIM, "3", Band.floor(1, "x")), TypeError, "value must be a real number, got str"),
    (lambda: decide(CLAIM, 3.0, 1.0), TypeError, "band must be a Band"),
    (lambda: Claim("id", "P", "T", "s", direction=0), ValueError, "direction must be -1"),
    (lambda: Claim("", "P", "T", "s"), ValueError, "id must be a non-empty string"),
    (lambda: Finding(CLAIM, "holds"), ValueError, "verdict must be one of"),
    (lambda: noise_band(floor=1.0), TypeError, "floor must be a Band"),
    (lambda: Findings("c").not_run(CLAIM, ""), ValueError, "reason must be a non-empty string"),
    (lambda: Findings("c").not_stored(CLAIM, []), ValueError, "needs the names of the missing models"),
    (lambda: Findings("c").not_stored(CLAIM, ["LSTM VA", " "]), ValueError, "a missing model's name must be"),
])
def test_bad_input_is_refused_with_a_clear_error(bad, error, message):
    """Each refusal is the library's own check, saying what was wrong (not an error that some
    later operation happens to raise on the bad value)."""
    with pytest.raises(error, match=re.escape(message)):
        bad()


def test_a_claim_is_judged_once_per_page():
    f = Findings("ch7")
    f.not_run(CLAIM, "WikiText-103 was not trained")
    with pytest.raises(ValueError, match="already judged"):
        f.judge(CLAIM, 1.0, floor=Band.floor(0.1, "x"))


def test_counts_summary_and_list_come_from_the_verdicts():
    f = Findings("ch8")
    floor = Band.floor(1.0, "stated tolerance")
    f.judge(Claim("a", "P", "T1", "a holds"), -2.0, floor=floor)
    f.judge(Claim("b", "P", "T1", "b holds"), +2.0, floor=floor)
    f.judge(Claim("c", "P", "T1", "c holds"), 0.5, floor=floor)
    f.forced(Claim("d", "P", "T2", "d holds"), "Theorem 8.6")
    f.not_run(Claim("e", "P", "T9", "e holds"), "BookCorpus is not used")
    assert f.counts() == dict(zip(VERDICTS, (1, 1, 1, 1, 1)))
    assert f.summary().startswith("of the 4 findings")
    assert "1 reproduces, 1 does not, 1 is within the noise, and 1 is forced" in f.summary()
    assert f.summary().endswith("1 was not run")
    text = f.markdown_list()
    assert text.count("\n") == 4 and "*within noise*" in text and "Theorem 8.6" in text
    assert "+2.00" in text and "±1.00" in text  # the sizes are printed
    assert [r["verdict"] for r in f.rows()] == list(VERDICTS)


def test_the_list_grouped_by_verdict_puts_reproductions_first_and_keeps_the_judged_order_within():
    f = Findings("ch8")
    floor = Band.floor(1.0, "a stated floor")
    f.not_run(Claim("e", "P", "T9", "e holds"), "BookCorpus is not used")
    f.judge(Claim("c", "P", "T1", "c holds"), 0.5, floor=floor)  # within noise
    f.judge(Claim("a", "P", "T1", "a holds"), -2.0, floor=floor)  # reproduces (a decrease claimed)
    f.judge(Claim("b", "P", "T1", "b holds"), +2.0, floor=floor)  # does not reproduce
    f.judge(Claim("a2", "P", "T1", "a2 holds"), -3.0, floor=floor)  # reproduces, judged after a
    order = lambda text: [line.split("**")[1] for line in text.splitlines()]  # noqa: E731
    assert order(f.markdown_list()) == ["e holds", "c holds", "a holds", "b holds", "a2 holds"]
    assert order(f.markdown_list(by_verdict=True)) == ["a holds", "a2 holds", "b holds", "c holds", "e holds"]
    assert sorted(f.markdown_list(by_verdict=True).splitlines()) == sorted(f.markdown_list().splitlines())
    with pytest.raises(TypeError, match="by_verdict must be True or False"):
        f.markdown_list(by_verdict="yes")


def test_summary_leaves_out_verdicts_no_finding_got_and_names_one_paper_or_several():
    floor = Band.floor(1.0, "stated tolerance")
    f = Findings("ch9")
    f.judge(Claim("a", "P", "T1", "a holds"), -2.0, floor=floor)
    f.judge(Claim("b", "P", "T1", "b holds"), -3.0, floor=floor)
    f.judge(Claim("c", "P", "T1", "c holds"), 0.5, floor=floor)
    assert f.summary() == ("of the 3 findings of the paper tested on this page, 2 reproduce and 1 is within "
                           "the noise")
    f.not_run(Claim("d", "Q", "T2", "d holds"), "not trained")
    assert f.summary().startswith("of the 3 findings of the papers tested") and f.summary().endswith(
        "; 1 was not run")
    g = Findings("ch8")
    g.not_run(Claim("e", "P", "T9", "e holds"), "BookCorpus is not used")
    assert g.summary() == "no finding of the paper was tested on this page; 1 was not run"


def test_a_finding_whose_models_are_not_stored_is_not_run_and_names_them():
    f = Findings("ch6")
    one = f.not_stored(Claim("a", "P", "T1", "a holds"), "LSTM VA")
    two = f.not_stored(Claim("b", "P", "T1", "b holds"), ["RNN ST ε=1e-4", "RNN NMST ε=1e-4"])
    assert one.verdict == two.verdict == "not run" and not one.counted
    assert one.reason == "not run: LSTM VA is not stored"
    assert two.reason == "not run: RNN ST ε=1e-4 and RNN NMST ε=1e-4 are not stored"
    assert f.counts()["not run"] == 2 and "2 were not run" in f.summary()


# ----- No chapter states a verdict count that the engine did not compute -----------------

NUM = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|all|none)"
MD_COUNT = re.compile(rf"\b{NUM}\s+(?:out\s+)?of\s+(?:the\s+|its\s+|these\s+)?{NUM}\b", re.I)
CODE_COUNT = re.compile(r"\}\s+(?:out\s+)?of\s+(?:the\s+)?\{")
VERDICT_WORDS = re.compile(r"reproduc|\bholds?\b|findings?|comparisons?|verdict|lowest|beats|\bbelow\b|"
                           r"\babove\b|closer", re.I)
SAY_CALL = re.compile(r"\bsay\(\s*f?\"(\w+)\"")


def _say_calls(src: str) -> list[tuple[str, str]]:
    """Each ``say("key", ...)`` of a code cell: its key and the source of its other arguments
    (the text, not the key's name), cut at the call's own closing parenthesis (``ast``), so that
    code after the call is not read as part of it; by the regex up to the next call when the
    cell does not parse."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        calls = list(SAY_CALL.finditer(src))
        ends = [m.start() for m in calls[1:]] + [len(src)]
        return [(m.group(1), src[m.end():end]) for m, end in zip(calls, ends)]
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "say"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            rest = node.args[1:] + [k.value for k in node.keywords]
            found.append((node.args[0].value, "\n".join(ast.get_source_segment(src, a) or "" for a in rest)))
    return found


def hand_written_counts(notebook: dict) -> list:
    """Verdict counts a notebook states by hand: in markdown as a literal "N of M" in a sentence
    about findings, or as a glued ``say(...)`` that counts with ``{...} of {...}`` where either
    the code or the sentence that shows it speaks of findings (reproduces, below, lowest, ...)."""
    counting, sentences = {}, []
    for i, cell in enumerate(notebook["cells"]):
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            sentences += [(i, s) for s in re.split(r"(?<=[.;:])\s|\n\n", src)]
        elif cell["cell_type"] == "code":
            for key, body in _say_calls(src):
                if CODE_COUNT.search(body):
                    counting[key] = (i, body)
    found = [(i, body.strip()[:120]) for key, (i, body) in counting.items() if VERDICT_WORDS.search(body)]
    for i, sentence in sentences:
        shown = [k for k in re.findall(r"\{glue:md\}`(\w+)`", sentence) if k in counting]
        prose = re.sub(r"\{glue:md\}`\w+`", "", sentence)  # the words, not the keys' names
        if (shown or MD_COUNT.search(prose)) and VERDICT_WORDS.search(prose):
            found.append((i, sentence.strip()[:120]))
    return sorted(set(found))


def _notebook(*cells):
    return {"cells": [{"cell_type": t, "source": [s]} for t, s in cells]}


def test_the_scan_finds_a_planted_hand_written_count():
    planted = _notebook(("markdown", "Of the papers' findings, 9 of 12 reproduce here."),
                        ("code", 'say("ch6_x", f"{sum(v < 0 for v in d)} of the {len(d)} comparisons")'),
                        ("markdown", "The summary: {glue:md}`ch6_summary_counts`."),
                        ("code", 'say("ch6_summary_counts", FINDINGS.summary())'))
    assert [i for i, _ in hand_written_counts(planted)] == [0, 1]
    glued = _notebook(("code", 'say("ch6_closer", f"{len(c)} of the {n}")'),
                      ("markdown", "NMST is closer to the data in {glue:md}`ch6_closer` comparisons."),
                      ("code", 'say("ch6_loops", f"{k} of {n}")'),
                      ("markdown", "{glue:md}`ch6_loops` continuations end in a loop."))
    assert [i for i, _ in hand_written_counts(glued)] == [1]


def test_the_scan_reads_a_glued_count_up_to_its_own_closing_parenthesis():
    """Code after a counting ``say`` (here a list of findings that reproduce) is not part of its
    text; a count whose own text speaks of findings is still found, however the call is laid out."""
    after = _notebook(("code", 'say("ch9_plateau", "epochs: " + "; ".join(f"{k} of {n}" for k, n in p))\n'
                               'read = [f for f in FINDINGS.items if f.verdict == "reproduces"]'))
    assert hand_written_counts(after) == []
    inside = _notebook(("code", 'say(\n    "ch9_x",\n    f"{k} of the {n} findings"\n    if k\n    else "none",\n)'))
    assert [i for i, _ in hand_written_counts(inside)] == [0]


@pytest.mark.parametrize("chapter", ["06_wikitext", "07_gpt2", "08_sparse", "09_temperature"])
def test_no_chapter_states_a_verdict_count_the_engine_did_not_compute(chapter):
    notebook = json.loads((ROOT / "chapters" / f"{chapter}.ipynb").read_text())
    assert hand_written_counts(notebook) == []
    sources = "".join("".join(c["source"]) for c in notebook["cells"])
    assert "say_findings(" in sources, "the chapter's verdicts must be rendered by nmst_lib.findings"


# ----- The notebook helpers that glue the engine's output into the prose ----------------

def test_say_glues_markdown_under_its_name_and_refuses_bad_names(monkeypatch):
    from nmst_lib import notebook

    glued = {}
    monkeypatch.setattr(notebook, "_glue", lambda name, value: glued.__setitem__(name, value))
    assert notebook.say("ch6_gap", 4.8) is None  # ending a cell, it adds no output
    assert glued["ch6_gap"].data == "4.8"
    with pytest.raises(ValueError, match="glue key"):
        notebook.say("ch6 gap", "x")


def test_a_comparison_beyond_the_paper_is_read_by_the_rule_but_listed_apart_and_never_counted():
    floor = Band.floor(1.0, "stated tolerance")
    f = Findings("ch9")
    f.judge(Claim("a", "P", "T2", "a holds"), -2.0, floor=floor)
    transfer = Claim("t", "P", "T2", "t holds on a plain LSTM", quantity="t − plain", direction=-1,
                     beyond="the paper only puts t on a mixture of softmaxes")
    out = f.judge(transfer, +3.0, floor=floor)
    # the same rule reads it (outside the band, against the paper's sign) ...
    assert out.verdict == "does not reproduce" and not out.counted
    # ... but the counts, the Summary, the list and the rows hold the paper's claim only
    assert f.counts() == dict(zip(VERDICTS, (1, 0, 0, 0, 0)))
    assert f.summary() == "of the 1 finding of the paper tested on this page, 1 reproduces"
    assert "t holds" not in f.markdown_list() and [r["finding"] for r in f.rows()] == ["a holds"]
    text = f.beyond_list()
    assert text.startswith("* **t holds on a plain LSTM** (after P, T2): reads *does not reproduce*")
    assert "+3.00" in text and "only puts t on a mixture of softmaxes" in text
    assert f["t"] is out and f.line("t").startswith("t holds on a plain LSTM (beyond the paper, not counted): ")
    # a not-run comparison beyond the paper is not counted as not run either
    f.not_run(Claim("u", "P", "T2", "u holds", beyond="a transfer"), "not trained")
    assert f.counts()["not run"] == 0 and f.beyond_list().count("\n") == 1
    assert "(after P, T2): *not run* (not run: not trained)" in f.beyond_list()
    assert Findings("ch8").beyond_list() == ""
    with pytest.raises(TypeError, match="beyond must be a str"):
        Claim("v", "P", "T2", "v holds", beyond=True)


def test_say_findings_glues_list_summary_and_every_count(monkeypatch):
    from nmst_lib import notebook

    glued = {}
    monkeypatch.setattr(notebook, "_glue", lambda name, value: glued.__setitem__(name, value.data))
    f = Findings("ch9")
    f.judge(Claim("a", "P", "T1", "a holds"), -2.0, floor=Band.floor(1.0, "t"))
    counts = notebook.say_findings(f, "ch9")
    assert counts["reproduces"] == 1 and glued["ch9_n_reproduces"] == "1"
    assert glued["ch9_n_within_noise"] == "0" and glued["ch9_summary_counts"] == f.summary()
    assert glued["ch9_summary_list"] == f.markdown_list(by_verdict=True)
    assert glued["ch9_beyond_list"] == ""  # no comparison beyond the paper on this page
    with pytest.raises(TypeError, match="Findings"):
        notebook.say_findings([("a", "reproduces", "")], "ch9")


# ----- Convergence, from the stored histories ------------------------------------------

def _run(values, key="run", metric="val_ppl", stopped_early=None):
    metrics = {"history": [{metric: v} for v in values]}
    if stopped_early is not None:
        metrics["stopped_early"] = stopped_early
    return {"key": key, "metrics": metrics}


def test_a_run_whose_last_epoch_was_best_has_not_converged():
    from nmst_lib.findings import convergence

    still = convergence(_run([260.0, 200.0, 170.0, 152.0]))
    assert still == {"metric": "val_ppl", "best_epoch": 4, "last_epoch": 4, "last_change": -18.0,
                     "stopped_early": False, "converged": False}
    done = convergence(_run([260.0, 250.0, 251.0]))
    assert done["converged"] and done["best_epoch"] == 2
    assert convergence(_run([5.1, 4.9], metric="val_loss"))["metric"] == "val_loss"
    by_eps = convergence(_run([623.0, 439.9, 441.0], metric="val_eps_ppl", stopped_early=True))
    assert by_eps["metric"] == "val_eps_ppl" and by_eps["best_epoch"] == 2 and by_eps["converged"]
    with pytest.raises(ValueError, match="history"):
        convergence({"metrics": {}})


@pytest.mark.parametrize("values", [[260.0, 200.0, float("nan"), float("nan")], [float("nan")],
                                    [260.0, float("nan"), 150.0]])
def test_a_diverged_run_with_a_nan_validation_value_is_refused_not_called_converged(values):
    # np.argmin took the first NaN epoch for the best one: best_epoch 3 of 4, converged True
    from nmst_lib.findings import (
        convergence,
        convergence_rows,
        last_epoch_floor,
    )

    for call in (lambda: convergence(_run(values)), lambda: last_epoch_floor(_run(values)),
                 lambda: convergence_rows({"m": [_run(values)]})):
        with pytest.raises(ValueError, match=r"val_ppl = NaN: the run diverged"):
            call()


def test_convergence_refuses_an_epoch_without_a_number_and_keeps_infinite_values():
    from nmst_lib.findings import convergence

    for bad in (None, "152.0", True):
        with pytest.raises(ValueError, match=r"epoch 2 has no number for val_ppl"):
            convergence({"metrics": {"history": [{"val_ppl": 200.0}, {"val_ppl": bad}]}})
    # an infinite perplexity is a (bad) number: epoch 2 is still the best
    got = convergence(_run([float("inf"), 300.0, 310.0]))
    assert got["best_epoch"] == 2 and got["converged"] and got["last_change"] == 10.0


@pytest.mark.parametrize("k", [0, -1, -2.0, float("nan"), float("inf")])
def test_every_band_with_k_standard_errors_refuses_a_k_that_is_not_positive_and_finite(k):
    # k = 0 gave a zero-width band, ks_over_seeds ignored k = -1, from_seeds and binomial
    # failed with "half_width must be >= 0"
    calls = [lambda: Band.from_seeds([1.0, 2.0, 3.0], k=k), lambda: Band.binomial(0.3, 100, k=k),
             lambda: Band.rates([0.2, 0.3], 100, [0.4], 100, k=k),
             lambda: Band.ks_over_seeds([0.1], 100, [0.2], 100, k=k),
             lambda: Band.ks_over_seeds([0.1, 0.3], 100, [0.2], 100, k=k)]
    for call in calls:
        with pytest.raises(ValueError, match=r"k .*(must be > 0|must be finite)"):
            call()
    with pytest.raises(TypeError, match="k must be a real number"):
        Band.binomial(0.3, 100, k="2")


def test_bands_with_a_valid_k_are_unchanged_by_its_check():
    assert Band.binomial(0.5, 96, k=2).half_width == pytest.approx(2 * (0.5 * 0.5 / 100) ** 0.5, rel=1e-12)
    assert Band.from_seeds([1.0, 3.0], k=1).source == "1 s.e. over 2 seeds"


def test_the_last_epoch_floor_is_the_largest_change_of_the_unconverged_runs():
    from nmst_lib.findings import convergence_rows, last_epoch_floor

    a, b = _run([200.0, 170.0, 152.0], "a"), _run([210.0, 175.0, 160.0], "b")
    assert last_epoch_floor(a, b).half_width == 18.0
    assert last_epoch_floor(_run([200.0, 150.0, 151.0])) is None  # converged: no floor
    # the case: a 4.8 gap between two runs still falling 15-25 per epoch is not read
    f = Findings("ch6")
    assert f.judge(CLAIM, -4.8, floor=last_epoch_floor(a, b)).verdict == "within noise"
    with pytest.raises(ValueError, match="different validation metrics"):
        last_epoch_floor(a, _run([5.0, 4.0], metric="val_loss"))
    rows = convergence_rows({"ab": [a, b], "c": [_run([200.0, 150.0, 151.0])],
                             "mixed": [a, _run([200.0, 150.0, 151.0])]})
    assert [r["converged"] for r in rows] == ["no: still improving", "yes", "1 of 2 seeds"]
    assert rows[0]["best / last epoch"] == "3/3, 3/3"
    assert rows[0]["last epoch's change (val_ppl)"] == "-18, -15"


def test_convergence_rows_of_models_with_different_metrics_share_one_column_naming_each():
    from nmst_lib.findings import convergence_rows

    # Chapter 8: the softmax model compares epochs by perplexity, the entmax ones by eps-perplexity
    rows = convergence_rows({"softmax": [_run([210.0, 208.0])],
                             "entmax": [_run([240.0, 231.5], metric="val_eps_ppl")]})
    assert [set(r) for r in rows] == [{"model", "best / last epoch", "last epoch's change", "converged"}] * 2
    assert [r["last epoch's change"] for r in rows] == ["-2 (val_ppl)", "-8.5 (val_eps_ppl)"]


def test_a_run_that_early_stopping_ended_has_converged_even_if_its_last_epoch_was_best():
    """The plateau rule (Choi et al. App. D) stops after epochs that each gain less than
    min_improvement: the last epoch can still be the best by a hair. Early stopping fired, so the
    run converged (issue 23's definition) and gives no last-epoch floor."""
    from nmst_lib.findings import convergence, last_epoch_floor

    plateau = _run([210.0, 203.8, 203.1, 202.3], stopped_early=True)
    c = convergence(plateau)
    assert c["stopped_early"] and c["converged"] and c["best_epoch"] == c["last_epoch"] == 4
    cut = _run([210.0, 203.8, 203.1, 202.3], stopped_early=False)  # the epoch limit ended it
    assert not convergence(cut)["converged"]
    assert last_epoch_floor(plateau) is None
    assert last_epoch_floor(plateau, cut).half_width == pytest.approx(0.8)


def test_one_seed_of_converged_models_is_not_read_but_named_as_needing_seeds():
    """One seed each and no floor: the band is unknown. The library never reads a gap with no
    band (noise_band refuses), and a page's Findings records *not run*, saying why."""
    from nmst_lib.findings import (
        UnknownBandError,
        last_epoch_floor,
        noise_band,
    )

    a = _run([210.0, 200.0, 199.5], "a", stopped_early=True)
    b = _run([215.0, 205.0, 204.9], "b", stopped_early=True)
    with pytest.raises(UnknownBandError, match="noise band is unknown"):
        noise_band(seeds=([199.5], [204.9]), floor=last_epoch_floor(a, b))
    f = Findings("ch6")
    got = f.judge(CLAIM, -5.4, seeds=([199.5], [204.9]), floor=last_epoch_floor(a, b))
    assert got.verdict == "not run" and "two seeds" in got.reason and not got.counted
    assert got.value == -5.4 and got.band is None  # the one-seed gap is shown, with no band
    # two seeds each: the seeds give the band and the gap is read
    got = Findings("ch6").judge(CLAIM, -5.4, seeds=([199.5, 200.1], [204.9, 205.3]))
    assert CLAIM.direction == -1 and got.verdict == "reproduces"  # a gap of -5.4 far outside a tight band


def test_the_recipe_table_names_every_deviation_and_only_those():
    from nmst_lib.findings import recipe_rows

    ours = {"lr": 0.002, "batch_size": 16, "dropout": 0.3, "patience": 2, "clip": 1.0,
            "betas": [0.9, 0.99], "max_steps": None}
    paper = {"lr": 0.001, "batch_size": 32, "dropout": 0.5, "patience": 10, "clip": 1.0,
             "betas": (0.9, 0.99), "max_steps": None}
    rows = recipe_rows(ours, paper, seeds=(3, 10))
    differs = {r["hyper-parameter"] for r in rows if r["deviation"] == "differs"}
    assert differs == {"learning rate", "batch size (sequences)", "dropout",
                       "early-stopping patience (epochs)", "seeds per model"}
    assert "max. steps" not in {r["hyper-parameter"] for r in rows}  # None in both: left out


def test_the_recipe_table_names_the_vocabulary_and_the_stopping_rule():
    """The fields issue 23's recipes changed are rows of every chapter's recipe table: the
    vocabulary's kind, WikiText's <unk> markers, the plateau threshold, the unigram hold and what
    the epochs are compared by (each left out where None in both)."""
    from nmst_lib.findings import recipe_rows

    ours = {"vocab_kind": "bpe", "vocab_cap": 4000, "drop_unk": True, "min_improvement": 0.005,
            "start_below_unigram": 0.9, "select_on": None}
    paper = {"vocab_kind": "word", "vocab_cap": None, "drop_unk": False, "min_improvement": 0.0,
             "start_below_unigram": None, "select_on": None}
    rows = {r["hyper-parameter"]: r for r in recipe_rows(ours, paper)}
    assert rows["vocabulary kind"]["ours"] == "bpe" and rows["vocabulary kind"]["deviation"] == "differs"
    assert rows["WikiText's <unk> markers deleted"]["paper"] == "False"
    assert rows["plateau threshold (relative gain)"]["ours"] == "0.005"
    assert rows["plateau rule held until below this share of the unigram perplexity"]["paper"] == "None"
    assert "epochs compared by (None: the validation loss)" not in rows


def test_a_section_quotes_its_verdicts_by_claim_id():
    f = Findings("ch6")
    f.judge(Claim("a", "P", "T1", "a holds", quantity="a − b"), -2.0, floor=Band.floor(1.0, "t"))
    assert f.line("a") == "a holds: *reproduces* (a − b = -2.00; noise band ±1.00 (t))."
    with pytest.raises(KeyError, match="no finding 'b'"):
        f.line("b")
    with pytest.raises(ValueError, match="at least one"):
        f.line()


def test_a_brief_line_keeps_the_difference_band_width_and_reason_but_not_the_band_source_or_paper():
    f = Findings("ch6")
    f.judge(Claim("a", "P", "T1", "a holds", quantity="a − b", paper_value="1 against 2"), -2.0,
            floor=Band.floor(1.0, "a stated floor"))
    f.not_run(Claim("c", "P", "T2", "c holds", paper_value="3"), "not trained")
    full, brief = f.line("a", "c"), f.line("a", "c", brief=True)
    # one sentence per finding: the first as the claim reads (a page may splice it into its
    # own sentence), the others capitalised
    assert brief == ("a holds: *reproduces* (a − b = -2.00; noise band ±1.00). "
                     "C holds: *not run* (not run: not trained).")
    assert "a stated floor" in full and "paper: 1 against 2" in full and "paper: 3" in full
    # the list of findings keeps every detail whatever the sections show
    assert "a stated floor" in f.markdown_list() and "paper: 1 against 2" in f.markdown_list()
    with pytest.raises(TypeError, match="brief must be True or False"):
        f.line("a", brief="yes")


def test_rate_band_with_one_seed_each_is_the_binomial_band():
    one = Band.rates([0.3], 128, [0.0], 128, names=("VA", "NMST"))
    assert one.half_width == pytest.approx(Band.binomial(0.3, 128, 0.0, 128).half_width)
    assert one.source == ("2 s.e.; VA: binomial (Agresti-Coull) on 128 contexts; "
                          "NMST: binomial (Agresti-Coull) on 128 contexts")


def test_rate_band_takes_each_models_seed_spread_when_it_exceeds_the_binomial_one():
    # two seeds of VA that disagree (0.34 and 0.72, as Chapter 7's GPT-2 VA did) against one
    # seed of a model: VA's share is var / 2 of its seeds, far above binomial on 256 contexts
    a, b = [0.34, 0.72], [0.0]
    band = Band.rates(a, 128, b, 128, names=("VA", "NMST"))
    seeds = np.var(a, ddof=1) / 2
    q = 2 / 132
    assert band.half_width == pytest.approx(2 * np.sqrt(seeds + q * (1 - q) / 132))
    assert "VA: the spread of its 2 seeds" in band.source
    assert band.half_width > Band.binomial(0.53, 256, 0.0, 128).half_width
    # with two or more seeds of each it is at least as wide as the band from the seeds alone
    c = [0.05, 0.10, 0.02]
    assert Band.rates(a, 128, c, 128).half_width >= Band.from_seeds(a, c).half_width - 1e-12


def test_rate_band_never_narrower_than_binomial_on_the_pooled_continuations():
    # two seeds that agree exactly have no spread: the binomial share of 2 x 128 remains
    band = Band.rates([0.25, 0.25], 128)
    q = (0.25 * 256 + 2) / 260
    assert band.half_width == pytest.approx(2 * np.sqrt(q * (1 - q) / 260))
    assert band.source == "2 s.e.; first: binomial (Agresti-Coull) on 128 contexts × 2 seeds, pooled"
    # the verdict of a tie at zero stays within noise
    assert decide(CLAIM, 0.0, Band.rates([0.0, 0.0], 128, [0.0], 128)).verdict == "within noise"


@pytest.mark.parametrize("args, match", [
    (([1.5], 128), r"\[0, 1\]"),
    (([], 128), r"one or more"),
    (([0.5], 0), r"integer >= 1"),
    (([0.5], True), r"integer >= 1"),
    ((None, 128), r"at least one model"),
])
def test_rate_band_rejects_bad_input_with_a_clear_error(args, match):
    with pytest.raises(ValueError, match=match):
        Band.rates(*args)


def test_ks_band_over_seeds_is_the_ks_band_with_one_seed_each():
    assert Band.ks_over_seeds([0.3], 128, [0.5], 128) == Band.ks(128, 128)


def test_ks_band_over_seeds_widens_with_a_models_seed_spread_and_never_pools_lengths():
    # Chapter 6's LSTM VA: KS 0.391 and 0.430 for seeds 0 and 1, ST one seed: the spread is
    # small, so the band is the KS band of one seed of each (128 + 128), not of 128 + 256 pooled
    small = Band.ks_over_seeds([0.258], 128, [0.391, 0.430], 128, names=("ST", "VA"))
    assert small == Band.ks(128, 128)
    assert small.half_width > Band.ks(128, 256).half_width
    # Chapter 7's GPT-2 VA: 0.461 and 0.773, far apart: 2 s.e. from VA's seeds
    wide = Band.ks_over_seeds([0.867], 128, [0.461, 0.773], 128, names=("ST", "VA"))
    assert wide.half_width == pytest.approx(2 * np.sqrt(np.var([0.461, 0.773], ddof=1) / 2))
    assert wide.source.startswith("2 s.e. from the spread of VA's 2 seeds, wider than the 5% two-sample KS")
    both = Band.ks_over_seeds([0.2, 0.6], 128, [0.461, 0.773], 128, names=("A", "B"))
    assert both.half_width == pytest.approx(
        2 * np.sqrt(np.var([0.2, 0.6], ddof=1) / 2 + np.var([0.461, 0.773], ddof=1) / 2))
    assert "A's 2 seeds and B's 2 seeds" in both.source


@pytest.mark.parametrize("a, b", [([], [0.1]), ([1.2], [0.1]), ([0.1], [-0.1])])
def test_ks_band_over_seeds_rejects_distances_outside_0_1(a, b):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Band.ks_over_seeds(a, 128, b, 128)


def test_the_binomial_band_names_what_was_counted():
    assert Band.binomial(0.5, 159, unit="tokens").source == "2 binomial s.e. (Agresti-Coull) on 159 tokens"
    with pytest.raises(ValueError):
        Band.binomial(0.5, 10, unit="")



def test_ks_band_is_the_five_percent_critical_distance_and_refuses_bad_sizes():
    band = Band.ks(128, 384)
    assert band.half_width == pytest.approx(1.36 * (1 / 128 + 1 / 384) ** 0.5)
    assert band.source == "the 5% two-sample KS distance for 128 + 384 lengths"
    for bad in ((0, 10), (10, -1), (True, 10), (2.5, 10)):
        with pytest.raises(ValueError, match="sample sizes >= 1"):
            Band.ks(*bad)
    with pytest.raises(ValueError, match="c must be > 0"):
        Band.ks(10, 10, c=0.0)


@given(st.lists(st.integers(1, 60), min_size=1, max_size=40),
       st.lists(st.integers(1, 60), min_size=1, max_size=40),
       st.lists(st.integers(1, 60), min_size=1, max_size=40),
       st.integers(0, 5))
def test_ks_distances_to_one_sample_differ_by_at_most_the_distance_between_the_models(a, b, d, unfinished):
    # the triangle inequality Band.ks rests on; unfinished continuations are inf
    import numpy as np

    from nmst_lib.report import ks_distance

    a = np.r_[a, np.full(unfinished, np.inf)]
    assert abs(ks_distance(a, d) - ks_distance(b, d)) <= ks_distance(a, b) + 1e-12


def test_ks_band_reads_a_gap_between_two_samples_of_one_distribution_rarely():
    # two models whose lengths come from one distribution: the change of their KS distance to a
    # data sample lies outside Band.ks in at most about 5 % of draws (discrete lengths: fewer)
    import numpy as np

    from nmst_lib.report import ks_distance

    rng = np.random.default_rng(0)
    data = rng.geometric(1 / 90, size=128)
    n, outside = 128, 0
    band = Band.ks(n, n).half_width
    for _ in range(400):
        a, b = rng.geometric(1 / 40, size=n), rng.geometric(1 / 40, size=n)
        outside += abs(ks_distance(a, data) - ks_distance(b, data)) > band
    assert outside / 400 <= 0.05
    # and a real difference of distributions is read
    a, b = rng.geometric(1 / 90, size=n), rng.geometric(1 / 10, size=n)
    assert ks_distance(b, data) - ks_distance(a, data) > band

def test_recipe_and_convergence_summaries_say_what_the_folded_tables_hold():
    from nmst_lib.findings import convergence_summary, recipe_summary

    recipe = [{"hyper-parameter": "learning rate", "ours": "0.002", "paper": "0.001", "deviation": "differs"},
              {"hyper-parameter": "optimizer", "ours": "AdamW", "paper": "AdamW", "deviation": ""},
              {"hyper-parameter": "batch size", "ours": "16", "paper": "32", "deviation": "differs"}]
    assert recipe_summary(recipe) == "2 of 3 settings differ from the paper's: learning rate, batch size"
    assert recipe_summary(recipe[1:2]) == "all 1 settings as in the paper"
    rows = [{"model": "VA", "converged": "no: still improving"}, {"model": "ST", "converged": "yes"},
            {"model": "NMST", "converged": "2 of 3 seeds"}]
    assert convergence_summary(rows) == "1 of 3 models converged on every seed; 1 still improving at their last epoch"
    assert convergence_summary(rows[:1]) == (
        "0 of 1 models converged on every seed; every run was still improving at its last epoch")
    with pytest.raises(ValueError):
        recipe_summary([])
    with pytest.raises(ValueError):
        convergence_summary([])


def test_the_relative_spread_floor_is_k_times_the_seeds_spread_and_at_least_the_minimum():
    wide = Band.relative_spread([200.0, 230.0, 210.0], "three VA seeds")
    assert wide.half_width == pytest.approx(0.30)  # 2 x (230 - 200) / 200
    assert "twice the relative spread of three VA seeds (2 × 15.0% ≈ 30%), at least 10%" in wide.source
    narrow = Band.relative_spread([200.0, 202.0], "two VA seeds")
    assert narrow.half_width == 0.10  # 2 x 1% is below the minimum
    alone = Band.relative_spread([200.0], "one VA seed", minimum=0.15)
    assert alone.half_width == 0.15 and "fewer than two seeds of one VA seed" in alone.source
    assert Band.relative_spread([], "no seed").half_width == 0.10
    assert Band.relative_spread([100.0, 110.0], "x", k=3).half_width == pytest.approx(0.30)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(1.0, 1e4), min_size=2, max_size=6))
def test_two_seeds_of_one_model_never_differ_by_more_than_the_relative_floor(values):
    """The floor's point: any two of the reference seeds lie inside it, relative to the smaller."""
    band = Band.relative_spread(values, "seeds")
    lo = min(values)
    assert all(abs(a - b) / lo <= band.half_width + 0.005 for a in values for b in values)


@pytest.mark.parametrize("values, kwargs", [([200.0, -1.0], {}), ([200.0, float("nan")], {}),
                                            ([1.0, 2.0], {"k": 0}), ([1.0, 2.0], {"minimum": -0.1})])
def test_the_relative_spread_floor_refuses_bad_input(values, kwargs):
    with pytest.raises(ValueError):
        Band.relative_spread(values, "seeds", **kwargs)
