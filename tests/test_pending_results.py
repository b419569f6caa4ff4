"""Results of issue 23's plan that wait for their chapter (pending_results/README.md): each is
the stamped result of the config it names, made from a clean commit, and the recipe the plan
states (BPE pieces, early stopping, the epoch cap)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nmst_lib.experiments import get_family

ROOT = Path(__file__).resolve().parents[1]
PENDING = sorted((ROOT / "pending_results").rglob("*.json"))


def test_the_folder_says_what_it_holds():
    assert (ROOT / "pending_results" / "README.md").is_file()


@pytest.mark.parametrize("path", PENDING, ids=[p.stem for p in PENDING])
def test_a_pending_result_is_the_stamped_result_of_its_config(path):
    """Any family's result (its folder names the family: wikitext2, sparse, temperature), from a
    clean commit and selected at its best epoch. A result waiting here to be published (outside
    ``measuring/``: Chapter 6's models at the eps its grid takes next, ``train_queue.NEXT_EPS``) must
    also follow the plan's recipe; the measuring runs record other recipes on purpose."""
    data = json.loads(path.read_text(encoding="utf-8"))
    family = get_family(path.parent.name)
    config = family.config_from_dict(data["config"])
    assert data["config_hash"] == family.config_hash(config)
    assert data["key"] == config.key == path.stem
    config = family.training_config(config)
    assert config.profile == "cpu"
    assert config.data.vocab_kind == ("word" if config.arch == "gpt2" else "bpe")  # GPT-2 has its own BPE
    if "measuring" not in path.parts:  # the recipe the plan states (scripts/converge_cpu.sh)
        assert config.data.drop_unk and config.training.min_improvement == 0.005 and config.training.patience == 2
        if config.arch == "gpt2":  # the whole substitute training split (GPT2_CONVERGED_CPU_RECIPE)
            assert config.data.max_train_tokens is None
    prov = data["provenance"]
    assert prov["git_dirty"] is False and len(prov["git_sha"]) == 40
    metrics = data["metrics"]
    assert metrics["epochs_run"] == len(metrics["history"]) <= config.training.max_epochs
    score = metrics.get("selection", "val_ppl")  # the entmax losses select by validation loss
    best = min(metrics["history"], key=lambda h: h[score])
    assert best["epoch"] == metrics["best_epoch"]
