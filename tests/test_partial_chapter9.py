"""Chapter 9 (``chapters/09_temperature.ipynb``) renders from any stored part of its converged suite.

Chapter 9's converged models (``UNIGRAM_HOLD_CPU_RECIPE``) land one by one over several sessions
(issue 23). The chapter switched to them with ten of its eleven seed-0 models in (session 21); the
rest (CT-MoS in session 22, then seeds 1 and 2 of every compared model) land in the published store, or wait in
``pending_results/temperature/`` when they land too late in a session to check the book. This test
renders the page in a temporary store with every converged Chapter 9 result there is, published or
pending, and Chapter 6's published LSTMs as the baselines. It checks what the website build needs:
no cell fails, the page says which models are missing, every ``{glue}`` key its prose uses is set
once, the recipe is described as the converged one, and each finding whose model is missing is
listed as *not run*, naming it. About 40-60 s.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from chapter_run import (
    check_model_names,
    execute_on,
    glue_names,
    glued_once,
    isolate,
    markdown_outputs,
)

from nmst_lib.experiments import CURRENT, model_names, published_results_dir
from nmst_lib.experiments import config as C
from nmst_lib.experiments.temperature_suite import (
    load_temperature_result,
    temperature_suite_configs,
)

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "09_temperature.ipynb"
PENDING = ROOT / "pending_results"


@pytest.fixture
def converged_store(tmp_path, monkeypatch):
    assert C.CHAPTER_CPU_RECIPE["temperature"] == "converged-unigram-hold"
    suite = temperature_suite_configs("cpu")
    found = {}
    for config in suite:
        for folder in (published_results_dir(), PENDING):
            stored = load_temperature_result(config, folder)
            if stored.status == CURRENT:
                found[config.key] = stored.path
                break
    main = next((c for c in suite if c.model.head == "va" and c.model.temperature is not None
                 and c.model.temperature.normalisation == "sigmoid" and c.model.temperature.mixtures == 1
                 and c.model.seed == 0), None)
    if main is None or main.key not in found:
        pytest.skip("no converged CT-VA result (the page's main model) is stored yet")
    published = tmp_path / "published"
    (published / "temperature").mkdir(parents=True)
    for path in found.values():
        shutil.copy(path, published / "temperature")
    # the baselines: Chapter 6's converged LSTMs
    shutil.copytree(published_results_dir() / "wikitext2", published / "wikitext2")
    isolate(monkeypatch, tmp_path)
    missing = [c.key for c in suite if c.key not in found]
    return published, missing


def test_chapter_9_renders_from_a_stored_part_of_its_converged_suite(converged_store):
    published, missing = converged_store
    nb = nbformat.read(CHAPTER, as_version=4)
    wanted = glue_names(nb)
    assert {"ch9_summary_counts", "ch9_ppl_verdict", "ch9_train_budget", "ch9_t4_verdict"} <= wanted
    execute_on(nb, CHAPTER, published)

    values = glued_once(nb, wanted)
    assert "subword pieces" in values["ch9_train_budget"] and "early stopping" in values["ch9_train_budget"]
    if missing:
        shown = [t for t in markdown_outputs(nb) if "This page is showing" in t]
        assert len(shown) == 1, shown
        # each as the book names its model (model_names), never by its file name
        check_model_names(shown[0], missing, model_names(temperature_suite_configs("cpu")))
    # the models of the perplexity findings that are not stored are named, never dropped (the
    # findings compare seed 0 of MoS and CT-MoS; "MoS is not stored" is also the tail of
    # "CT-MoS is not stored"; MoS+, a MoS of CT-MoS's size, has "-h" and its hidden size in its key)
    suite = temperature_suite_configs("cpu")
    mixtures = [c for c in suite if c.model.temperature is not None and c.model.temperature.mixtures == 3
                and c.model.model.hidden == suite[0].model.model.hidden]
    t = lambda c: c.model.temperature
    mos0 = [c.key for c in mixtures if t(c).normalisation is None and c.model.seed == 0]
    ct_mos = [c for c in mixtures if t(c).normalisation == "sigmoid" and t(c).loss_scaling
              and t(c).detach_loss_scale]
    ablations = [c for c in mixtures if t(c).normalisation is not None and c not in ct_mos]
    assert len(mos0) == 1 and len(ct_mos) == 3 and len(ablations) == 15
    if any(key in missing for key in mos0 + [ct_mos[0].key]):
        assert "MoS is not stored" in values["ch9_ppl_verdict"] \
            or "MoS are not stored" in values["ch9_ppl_verdict"], values["ch9_ppl_verdict"]
        assert int(values["ch9_n_not_run"]) >= 1
    # the paper's Tables 3 and 4 are read on CT-MoS's ablations (Table 3: the other normalisations;
    # Table 4: the sigmoid without or with the literal loss scaling): a table's missing model is
    # named in its verdict, and the same readings on CT-VA are listed beyond the paper, never in
    # their place
    by_table = {"ch9_t3_verdict": [c for c in ablations if t(c).normalisation != "sigmoid"],
                "ch9_t4_verdict": [c for c in ablations if t(c).normalisation == "sigmoid"]}
    assert [len(v) for v in by_table.values()] == [9, 6]
    for glue_key, configs in by_table.items():
        assert "CT-VA) (beyond the paper, not counted)" in values[glue_key], values[glue_key]
        if any(c.key in missing for c in configs if c.model.seed == 0):
            assert "CT-MoS): *not run*" in values[glue_key] and "not stored" in values[glue_key], values[glue_key]
        else:  # every model of the table stored (and each left its plateau): read, none "not run"
            assert "CT-MoS): *not run*" not in values[glue_key], values[glue_key]
    if any("-mos3-h" in key and key.endswith("-seed0") for key in missing):
        assert "MoS+ is not stored" in values["ch9_ppl_verdict"], values["ch9_ppl_verdict"]
        assert "not stored for this profile yet" in values["ch9_mos_plus"]
    # the plateau sentence reads every stored contextual-temperature model (one seed each; MoS
    # without CT has mixtures but no temperature, normalisation None), so
    # "every model here left that plateau" is a statement about all of them
    stored_ct = [c for c in temperature_suite_configs("cpu")
                 if c.key not in missing and c.model.temperature is not None
                 and c.model.temperature.normalisation is not None and c.model.seed == 0]
    assert values["ch9_plateau"].count("(T starts at") == len(stored_ct), values["ch9_plateau"]
