"""What Chapter 6 tells a reader about its results (nmst_lib.experiments.choices): where they
come from, how to retrain them, and an estimate of the paper profile's time."""

from __future__ import annotations

import shutil

import pytest

import nmst_lib
from nmst_lib.experiments import (
    CURRENT,
    MISSING,
    TimeEstimate,
    describe_results,
    estimate_profile_time,
    load_result,
    make_config,
    published_results_dir,
    run_choices,
    suite_configs,
)
from nmst_lib.theory import first_step_eos_above_half


@pytest.fixture(scope="module")
def committed():
    """The published cpu results of Chapter 6's suite (the part of it that is stored)."""
    stored = [load_result(c, published_results_dir()) for c in suite_configs("cpu")]
    current = [s for s in stored if s.status == CURRENT]
    assert current, "no published cpu result of Chapter 6"
    return current


def test_describe_results_names_the_package_data_and_the_provenance(committed):
    text = describe_results(committed)
    n = len(committed)
    assert f"{n} result{'s' if n > 1 else ''} of the `cpu` profile" in text
    assert f"published with the library (package data of `nmst_lib` {nmst_lib.__version__}" in text
    sha = committed[0].data["provenance"]["git_sha"][:10]
    assert sha in text and "thread per run" in text and "Not shown" not in text


def test_describe_results_counts_the_missing_part_of_a_partial_suite():
    stored = [load_result(c, published_results_dir()) for c in suite_configs("cpu")]
    missing = sum(s.status == MISSING for s in stored)
    text = describe_results(stored)
    assert (f"{missing} MISSING" in text) == (missing > 0)


def test_describe_results_says_local_and_counts_what_is_not_shown(committed, tmp_path):
    key = committed[0].path.name
    (tmp_path / "wikitext2").mkdir()
    shutil.copy2(committed[0].path, tmp_path / "wikitext2" / key)
    local = load_result(suite_configs("cpu")[0], tmp_path)
    missing = load_result(make_config("quick"), tmp_path)
    text = describe_results([local, committed[1], missing])
    assert "1 published with the library" in text and "1 from a local results folder" in text
    from nmst_lib.experiments.choices import shown_folder

    assert f"`{shown_folder(tmp_path / 'wikitext2')}`" in text and "1 MISSING" in text
    assert str(tmp_path) not in text  # no absolute path of this machine
    assert describe_results([missing]).startswith("**No result is shown:**")


@pytest.mark.parametrize("bad, err", [("results", TypeError), ([1, 2], TypeError), ([], ValueError),
                                      (None, TypeError)])
def test_describe_results_rejects_what_is_not_stored_results(bad, err):
    with pytest.raises(err, match="StoredResult|empty"):
        describe_results(bad)


def test_the_cpu_estimate_brackets_what_the_committed_runs_took(committed):
    est = estimate_profile_time("cpu", "cpu", measure=False)
    assert isinstance(est, TimeEstimate) and est.runs == len(suite_configs("cpu")) and est.method == "scaled"
    lo, hi = est.train_seconds
    assert lo <= hi
    lo, hi = est.decode_seconds
    assert lo <= hi
    # run by run, for the stored part of the suite: training and decoding together inside the band
    for s in committed:
        spent = s.data["provenance"]["train_seconds"] + sum(d["wall_seconds"] for d in s.data["decoding"].values())
        lo, hi = est.per_run[s.path.stem]
        assert lo <= hi and lo / 1.5 <= spent <= hi * 1.5, (s.path.stem, lo, spent, hi)
    assert "estimate" in est.summary().lower() and "scaled, not measured" in est.derivation
    assert f"Takes {est}." == f"Takes {est.summary()}"  # str() reads inside a sentence


def test_the_paper_estimate_covers_the_suite_and_respects_the_caps():
    est = estimate_profile_time("paper", "cpu", measure=False)
    assert est.runs == 180 and len(est.per_run) == 180
    assert est.total_seconds[0] > 30 * 86400  # on a CPU: months, which is why it needs a GPU
    assert "official WikiText-2 split" in est.derivation and "11 epochs" in est.derivation
    # an ST/NMST greedy run decodes at most t_1/2 steps per batch; VA the whole L
    va = make_config("paper", "lstm", "va", None, 3)
    nmst = make_config("paper", "lstm", "nmst", 1e-4, 3)  # greedy only
    assert nmst.decoding.decoders == ("greedy",) and va.decoding.decode_max_len == 100_000
    one = estimate_profile_time("paper", "cpu", measure=False, configs=[va.replace(decoders=("greedy",)), nmst])
    (_, va_hi), (_, nm_hi) = one.per_run[va.key], one.per_run[nmst.key]
    train = one.train_seconds[1] / 2
    assert (nm_hi - train) / (va_hi - train) == pytest.approx(first_step_eos_above_half(1e-4) / 100_000, rel=1e-6)


def test_a_measured_estimate_runs_on_this_device():
    config = make_config("cpu", "rnn", "nmst", 5e-4, 1)
    est = estimate_profile_time("cpu", "cpu", measure=True, configs=[config], train_steps=1, decode_steps=2)
    assert est.method == "measured" and est.runs == 1 and "measured on cpu" in est.derivation
    assert 0 < est.total_seconds[0] <= est.total_seconds[1] < 30 * 86400
    assert "for the run of the `cpu` profile" in est.summary()


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(profile="quick"), ValueError, "'cpu' or 'paper'"),
    (dict(measure="yes"), TypeError, "measure must be"),
    (dict(train_steps=0), ValueError, "train_steps"),
    (dict(configs=[]), ValueError, "configs is empty"),
    (dict(configs=[make_config("cpu")]), ValueError, "profile 'paper'"),
])
def test_estimate_rejects_bad_arguments(kwargs, err, match):
    kwargs = {"profile": "paper", "device": "cpu", "measure": False, **kwargs}
    with pytest.raises(err, match=match):
        estimate_profile_time(**kwargs)


def test_run_choices_without_and_with_a_gpu(committed):
    text = run_choices(committed, "cpu")
    assert "**Where these numbers come from.**" in text and "**Retrain instead**" in text
    assert 'run_suite("cpu", force=True)' in text and "need a GPU" in text
    # the GPU branch (scaled, so that it runs here): an estimate for the suite and one run
    gpu = run_choices(committed, "cuda", measure=False)
    assert "The paper's settings on this GPU" in gpu and "Estimate (scaled) for the 180 runs" in gpu
    assert "The longest single run" in gpu


def test_shown_folder_names_no_absolute_path_of_the_machine(tmp_path, monkeypatch):
    """A page names the published folder inside the package and other folders relatively, never by
    the absolute path of the machine that built it."""
    from nmst_lib.experiments import published_results_dir
    from nmst_lib.experiments.choices import shown_folder

    assert shown_folder(published_results_dir() / "gpt2") == "nmst_lib/published_results/gpt2"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "a").mkdir(parents=True)
    assert shown_folder(tmp_path / "runs" / "a") == "./runs/a"
    monkeypatch.setenv("HOME", str(tmp_path / "runs"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert shown_folder(tmp_path / "runs" / "a") == "~/a"
    shown = shown_folder("/somewhere/deep/inside/x")
    assert shown == ".../inside/x" and not shown.startswith("/")
