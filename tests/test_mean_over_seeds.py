"""``nmst_lib.experiments.results.mean_over_seeds``: the seeds of a model merged into one table row
(Chapter 8's tables, whose models have several seeds once they land)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmst_lib.experiments.results import mean_over_seeds

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


def _row(loss, decoder, **values):
    return {"loss": loss, "decoder": decoder, "method": f"{decoder} on {loss}", **values}


def test_one_seed_per_model_keeps_every_value_and_counts_one_seed():
    rows = [_row("softmax", "greedy", sp=0.5, n=64, L=[1, 10]), _row("entmax", "ancestral", sp=0.7, n=64, L=[1, 10])]
    merged = mean_over_seeds(rows, ("loss", "decoder"))
    assert [m["seeds"] for m in merged] == [1, 1]
    for row, m in zip(rows, merged):
        assert {k: m[k] for k in row} == row
        assert m["per_seed"] == {"sp": [row["sp"]]}  # numbers get their seeds' list; counts do not


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=6))
def test_a_merged_number_is_the_mean_of_its_seeds_and_lists_them_in_order(values):
    rows = [_row("m", "d", sp=a, rep=b) for a, b in values]
    (merged,) = mean_over_seeds(rows, ("loss", "decoder"))
    for i, name in enumerate(("sp", "rep")):
        seeds = [v[i] for v in values]
        assert merged["per_seed"][name] == seeds
        assert math.isclose(merged[name], float(np.mean(seeds)), rel_tol=1e-12, abs_tol=1e-9)
        assert min(seeds) - 1e-9 <= merged[name] <= max(seeds) + 1e-9
    assert merged["seeds"] == len(values)


def test_models_keep_the_order_of_first_appearance_whatever_the_order_of_seeds():
    rows = [_row("b", "x", sp=1.0), _row("a", "x", sp=2.0), _row("b", "x", sp=3.0), _row("a", "y", sp=4.0)]
    merged = mean_over_seeds(rows, ("loss", "decoder"))
    assert [(m["loss"], m["decoder"], m["sp"], m["seeds"]) for m in merged] == [
        ("b", "x", 2.0, 2), ("a", "x", 2.0, 1), ("a", "y", 4.0, 1)]


def test_a_curve_is_averaged_pointwise_and_its_grid_of_integers_kept():
    rows = [_row("m", "greedy", L=[1, 10, 100], rnt=[1.0, 0.5, 0.25]),
            _row("m", "greedy", L=[1, 10, 100], rnt=[1.0, 0.25, 0.0])]
    (merged,) = mean_over_seeds(rows, ("loss", "decoder"))
    assert merged["L"] == [1, 10, 100] and "L" not in merged["per_seed"]
    assert merged["rnt"] == [1.0, 0.375, 0.125]
    assert merged["per_seed"]["rnt"] == [[1.0, 0.5, 0.25], [1.0, 0.25, 0.0]]


def test_an_infinite_perplexity_in_one_seed_makes_the_mean_infinite():
    """ppl None means infinite (a reference token outside an entmax support): the mean is too."""
    rows = [_row("entmax", "ancestral", ppl=None, sp=0.6), _row("entmax", "ancestral", ppl=None, sp=0.8),
            _row("softmax", "ancestral", ppl=120.0), _row("softmax", "ancestral", ppl=None)]
    entmax, softmax = mean_over_seeds(rows, ("loss", "decoder"))
    assert entmax["ppl"] is None and "ppl" not in entmax["per_seed"]  # never a number in any seed
    assert math.isclose(entmax["sp"], 0.7)
    assert softmax["ppl"] is None and softmax["per_seed"]["ppl"] == [120.0, None]


def test_counts_that_differ_across_seeds_are_averaged():
    rows = [_row("m", "d", num_contexts=64), _row("m", "d", num_contexts=32)]
    (merged,) = mean_over_seeds(rows, ("loss", "decoder"))
    assert merged["num_contexts"] == 48.0 and merged["per_seed"]["num_contexts"] == [64.0, 32.0]


@pytest.mark.parametrize("rows, message", [
    ([_row("m", "d", method="a"), _row("m", "d", method="b")], "'method' of .* differs across seeds"),
    ([_row("m", "d", rnt=[1.0, 0.5]), _row("m", "d", rnt=[1.0])], "lengths \\[2, 1\\] across seeds"),
    ([{"loss": "m", "sp": 0.5}], "with the fields \\('loss', 'decoder'\\)"),
    (["not a row"], "with the fields"),
])
def test_rows_that_cannot_be_merged_raise_value_error_saying_why(rows, message):
    with pytest.raises(ValueError, match=message):
        mean_over_seeds(rows, ("loss", "decoder"))


def test_bools_are_not_averaged_as_numbers():
    rows = [_row("m", "d", converged=True), _row("m", "d", converged=False)]
    with pytest.raises(ValueError, match="'converged' of .* differs"):
        mean_over_seeds(rows, ("loss", "decoder"))
    (same,) = mean_over_seeds([_row("m", "d", converged=True)] * 2, ("loss", "decoder"))
    assert same["converged"] is True and same["per_seed"] == {}
