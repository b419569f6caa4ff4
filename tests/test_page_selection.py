"""Which results a chapter page shows (nmst_lib.experiments.page_selection): the whole committed
profile, the stored part of it with the rest named, or a run made here, each with the notice a
reader sees. Uses copies of the published GPT-2 cpu results (small JSON files; seeds not trained
yet are stand-ins copied from seed 0) in a temporary folder; the run made here is replaced by a
stand-in that records how it was called."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from chapter_run import store_as_seed

from nmst_lib import report
from nmst_lib.experiments import (
    CURRENT,
    StoredResult,
    get_family,
    model_names,
    page_results,
    published_results_dir,
)
from nmst_lib.experiments import page_selection as page_module

FAMILY = get_family("gpt2")
CPU = FAMILY.configs("cpu")
VA = next(c for c in CPU if c.head == "va")
ST = next(c for c in CPU if c.head == "st")


def seeds_of(config) -> list:
    """Every seed of ``config``'s model in the cpu suite."""
    return [c for c in CPU if (c.head, c.eps) == (config.head, config.eps)]


def stored_folder(tmp_path: Path, leave_out=()) -> Path:
    """A results folder holding every GPT-2 cpu result but ``leave_out``'s: the published ones,
    and a stand-in (seed 0's numbers) for each seed not published yet."""
    folder = tmp_path / "results"
    for config in CPU:
        if config in leave_out:
            continue
        target = FAMILY.path(config, folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        published = FAMILY.path(config, published_results_dir())
        if published.is_file():
            shutil.copy(published, target)
        else:
            first = next(c for c in CPU if (c.head, c.eps, c.seed) == (config.head, config.eps, 0))
            seed0 = FAMILY.load(first, published_results_dir())
            assert seed0.status == CURRENT, seed0.message
            store_as_seed("gpt2", seed0.data, config, folder, lambda result: None)
    return folder


@pytest.fixture
def trained(monkeypatch):
    """A stand-in for train_here: records its calls, returns a CURRENT result for every config."""
    calls = []

    def fake_train_here(family, profile, folder, **kwargs):
        calls.append((family, profile, str(folder)))
        return [StoredResult(CURRENT, Path(folder) / f"{c.key}.json", {"key": c.key}, "made here")
                for c in get_family(family).configs(profile)]

    monkeypatch.setattr(page_module, "train_here", fake_train_here)
    monkeypatch.setattr(page_module, "scratch_folder", lambda chapter: f"scratch-{chapter}")
    return calls


def has_va(data):
    return any(d["config"]["head"] == "va" for d in data)


def test_the_whole_stored_profile_is_shown_without_a_notice(tmp_path, trained):
    page = page_results("gpt2", "cpu", results_dir=stored_folder(tmp_path), needs=has_va)
    assert (page.profile, page.asked, page.trained_here, page.folder) == ("cpu", "cpu", False, None)
    assert [s.path.stem for s in page.results] == [c.key for c in CPU]
    assert list(page.configs) == CPU and not page.partial and page.notices() == []
    assert [d["key"] for d in page.data] == [c.key for c in CPU]
    assert trained == []


def test_a_partial_page_shows_the_stored_models_and_names_the_missing_one(tmp_path, trained):
    gone = seeds_of(ST)
    page = page_results("gpt2", "cpu", results_dir=stored_folder(tmp_path, leave_out=gone), needs=has_va)
    assert page.profile == "cpu" and page.partial and trained == []
    assert [c.key for c in page.configs] == [s.path.stem for s in page.results]
    assert len(gone) == 3 and len(page.results) == len(CPU) - 3
    assert [s.path.stem for s in page.left_out] == [c.key for c in gone]
    (notice,) = page.notices()
    assert f"showing the {len(CPU) - 3} `cpu` results that are stored" in notice
    # the model is named once, as the book names it (never by its file name), with the seeds it lacks
    assert "1 model of the suite is not trained yet, or stored by an older version of the code " \
        f"(ST+GPT2 (ε={report.eps_book(ST.eps)}) (seeds 0, 1 and 2))" in notice, notice
    assert "is listed as *not run*" in notice and "further seeds" not in notice
    assert "cpu-gpt2" not in notice and "STALE" not in notice


def test_a_missing_seed_of_a_model_shown_is_named_as_a_seed_not_as_a_missing_model(tmp_path, trained):
    """A model with some seeds stored is shown (the mean of those); its other seeds are named as
    still to come, not as a missing model whose findings are not run."""
    later = [c for c in CPU if c.seed == 2]
    page = page_results("gpt2", "cpu", results_dir=stored_folder(tmp_path, leave_out=later), needs=has_va)
    assert page.profile == "cpu" and page.partial and trained == []
    (notice,) = page.notices()
    models = len(later)
    assert f"{len(later)} further seeds of the models shown are not stored yet " \
        f"(seed 2 of each of the {models} models shown)" in notice, notice
    assert "not run" not in notice
    both = page_results("gpt2", "cpu", results_dir=stored_folder(tmp_path / "b", leave_out=later + seeds_of(ST)),
                        needs=has_va)
    (notice,) = both.notices()
    assert "1 model of the suite is not trained yet" in notice
    assert f"{len(later) - 1} further seeds of the models shown" in notice


def test_further_seeds_are_grouped_by_the_seeds_each_model_lacks(tmp_path, trained):
    """Models that lack different seeds are listed per group of seeds (a suite whose second seed
    is trained for some models only), each model by its key without the seed."""
    later = [c for c in CPU if c.seed == 2] + [c for c in seeds_of(VA) if c.seed == 1]
    page = page_results("gpt2", "cpu", results_dir=stored_folder(tmp_path, leave_out=later), needs=has_va)
    (notice,) = page.notices()
    assert f"{len(later)} further seeds of the models shown are not stored yet (seeds 1 and 2 of VA+GPT2; " \
        "seed 2 of " in notice, notice
    names = model_names(CPU)
    others = {names[c.key.removesuffix("-seed2")] for c in CPU if c.seed == 2} - {"VA+GPT2"}
    assert all(m in notice for m in others) and "cpu-gpt2" not in notice


def test_without_what_the_page_needs_it_falls_back_to_a_quick_run_and_says_why(tmp_path, trained):
    page = page_results("gpt2", "cpu", results_dir=stored_folder(tmp_path, leave_out=seeds_of(VA)), needs=has_va)
    assert trained == [("gpt2", "quick", "scratch-ch7")]
    assert (page.profile, page.asked, page.trained_here, page.folder) == ("quick", "cpu", True, "scratch-ch7")
    assert list(page.configs) == FAMILY.configs("quick") and not page.partial
    (notice,) = page.notices()
    assert VA.key in notice and "`quick` run made just now" in notice and "mean nothing" in notice


def test_a_page_that_needs_the_whole_suite_falls_back_when_one_result_is_missing(tmp_path, trained):
    page = page_results("gpt2", "cpu", results_dir=stored_folder(tmp_path, leave_out=[ST]))
    assert page.profile == "quick" and trained == [("gpt2", "quick", "scratch-ch7")]
    assert f"1 of the {len(CPU)} `cpu` results are missing or STALE" in page.notices()[0]


def test_retrain_trains_the_chosen_profile_into_the_results_folder(tmp_path, trained, monkeypatch):
    monkeypatch.setenv("NMST_RESULTS_DIR", str(tmp_path / "mine"))
    page = page_results("gpt2", "cpu", retrain=True, needs=has_va)
    assert trained == [("gpt2", "cpu", str(tmp_path / "mine"))]
    assert page.profile == "cpu" and page.trained_here and list(page.configs) == CPU
    (notice,) = page.notices()
    assert "trained just now on this machine at the `cpu` profile" in notice
    assert "mean nothing" not in notice


def test_a_run_made_here_that_leaves_a_result_missing_is_an_error(monkeypatch):
    monkeypatch.setattr(page_module, "scratch_folder", lambda chapter: "scratch")
    monkeypatch.setattr(page_module, "train_here", lambda family, profile, folder, **kw: [
        StoredResult("missing", Path("x.json"), None, "no file")] * len(get_family(family).configs(profile)))
    with pytest.raises(RuntimeError, match="not CURRENT: no file"):
        page_results("gpt2", "quick")


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"family": "gpt3"}, ValueError, "gpt3"),
    ({"profile": 1}, TypeError, "profile must be a profile name"),
    ({"needs": True}, TypeError, "needs must be None"),
])
def test_bad_arguments_say_what_was_wrong(kwargs, error, match):
    args = {"family": "gpt2", "profile": "cpu", **kwargs}
    family, profile = args.pop("family"), args.pop("profile")
    with pytest.raises(error, match=match):
        page_results(family, profile, **args)


def test_model_names_name_every_model_of_each_suite_once_in_the_books_notation():
    """One name per model (the key without its seed), distinct across the suite, in the book's
    notation (no ASCII eps/alpha/lambda), for every family's cpu suite."""
    for family in ("wikitext2", "gpt2", "sparse", "temperature"):
        configs = get_family(family).configs("cpu")
        names = model_names(configs)
        assert set(names) == {c.key.rsplit("-seed", 1)[0] for c in configs}
        assert len(set(names.values())) == len(names), names
        assert not any(w in n for n in names.values() for w in ("eps=", "alpha=", "lambda=")), names
    assert model_names(CPU)[ST.key.removesuffix("-seed0")] == f"ST+GPT2 (ε={report.eps_book(ST.eps)})"


def test_notice_and_model_names_refuse_what_they_cannot_name():
    with pytest.raises(TypeError, match="experiment configs"):
        model_names(["cpu-gpt2-va-nounk-seed0"])
    with pytest.raises(TypeError, match="names must map"):
        page_module.partial_notice([], [], "cpu", names=["VA"])
