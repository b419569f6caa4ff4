"""scripts/recipe_before_after.py: issue 23's before/after table per chapter matches each
converged run with its first-edition model and reads the numbers from the stored results."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("recipe_before_after", ROOT / "scripts" / "recipe_before_after.py")
rba = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rba)


@pytest.mark.parametrize("key, model", [
    ("cpu-lstm-va-seed2", "cpu-lstm-va"),
    ("cpu-lstm-va-bpe4k-nounk-seed0", "cpu-lstm-va"),
    ("cpu-gpt2-st-eps1e-4-nounk-seed0", "cpu-gpt2-st-eps1e-4"),
    ("cpu-lstm-va-h162-seed1", "cpu-lstm-va-matched"),
    ("cpu-lstm-va-h159-bpe4k-nounk-seed0", "cpu-lstm-va-matched"),
    ("cpu-lstm-nmst-entmax-eps5e-4-a1.5-bpe4k-nounk-seed0", "cpu-lstm-nmst-entmax-eps5e-4-a1.5"),
])
def test_a_model_is_its_key_without_seed_vocabulary_and_matched_size(key, model):
    assert rba.model_id(key) == model


def test_the_score_is_the_selection_metric_at_the_best_epoch():
    run = {"metrics": {"selection": "val_eps_ppl", "best_epoch": 2,
                       "history": [{"epoch": 1, "val_eps_ppl": 9.0}, {"epoch": 2, "val_eps_ppl": 7.5},
                                   {"epoch": 3, "val_eps_ppl": 7.6}]}}
    assert rba.score(run) == (7.5, "ε-ppl")


@pytest.mark.parametrize("family", ["gpt2", "sparse", "temperature"])
def test_every_converged_run_gets_a_row_with_its_own_numbers(family, capsys):
    # a switched chapter's converged runs are its published store; the others' wait in pending_results
    folder = ROOT / (rba.store(family) if family in rba.BEFORE_REV else f"pending_results/{family}")
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))]
    runs = [r for r in runs if rba.converged_recipe(r)]
    if not runs:
        pytest.skip(f"no converged {family} result yet")
    text = rba.main(["--family", family])
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    by_model: dict[str, list[dict]] = {}
    for run in runs:
        by_model.setdefault(rba.model_id(run["key"]), []).append(run)
    for model, seeds in by_model.items():
        # the after side of the row: its seeds, the mean score over them and the mean greedy r_nt(L)
        after = rows[model.removeprefix("cpu-")].split(" | ")[-5:]
        assert after[0] == str(len(seeds)), (model, after)
        value = sum(rba.score(r)[0] for r in seeds) / len(seeds)
        assert after[1].split(" (")[0] in (f"{value:,.1f}", f"{value:,.4f}"), (model, value, after)
        rnt = sum(r["decoding"]["greedy"]["rnt"][-1] for r in seeds) / len(seeds)
        assert after[3] == f"{rnt:.3f}", (model, rnt, after)


def test_the_after_folder_may_be_given_relative_to_the_working_folder(monkeypatch, tmp_path):
    """A relative AFTER folder (as typed from the repository root) is read and named as typed."""
    folder = tmp_path / "after" / "temperature"
    folder.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    text = rba.main(["--family", "temperature", "after/temperature"])
    # before: HEAD until Chapter 9 switches, then the commit before its switch
    before = rba.BEFORE_REV.get("temperature", "HEAD")
    assert text.startswith(f"Before: `cpu` temperature results at {before}") and "(temperature)" in text.splitlines()[0]


def test_a_switched_chapter_compares_its_published_store_with_the_commit_before_its_switch():
    text = rba.main(["--family", "gpt2"])
    assert text.startswith(f"Before: `cpu` gpt2 results at {rba.BEFORE_REV['gpt2']}")
    assert "(nmst_lib/published_results/gpt2)" in text.splitlines()[0]
