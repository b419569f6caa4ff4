"""Where results live (nmst_lib.experiments.results): the committed cpu results are package
data that travel in the wheel; new runs go to $NMST_RESULTS_DIR, the published folder of a
source checkout, or the user cache; load_result reads the write directory, then the
published results, and says which (Chapter 6, 06_wikitext; README "Other ways in")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import nmst_lib
from nmst_lib.experiments import (
    CURRENT,
    MISSING,
    STALE,
    make_config,
    suite_configs,
)
from nmst_lib.experiments import results as R
from nmst_lib.experiments.gpt2 import gpt2_suite_configs
from nmst_lib.experiments.temperature_suite import baseline_configs

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "nmst_lib" / "published_results" / "wikitext2"
SUITE_PUBLISHED = [c for c in suite_configs("cpu") if (PUBLISHED / f"{c.key}.json").is_file()]
"""Chapter 6's cpu configs with a published result: its converged recipe lands run by run (issue 23)."""
BASELINES = [c for c in baseline_configs("cpu") if c.key not in {s.key for s in suite_configs("cpu")}]
"""Chapter 9's Chapter 6 LSTMs by Chapter 9's recipe where that is not Chapter 6's own (the first
editions' word recipe, until Chapter 9 switches; none after); read through Chapter 6's loader."""
N_PUBLISHED = len(SUITE_PUBLISHED) + len(BASELINES)
GPT2_PUBLISHED = [c for c in gpt2_suite_configs("cpu")
                  if (REPO / "nmst_lib" / "published_results" / "gpt2" / f"{c.key}.json").is_file()]
"""Chapter 7's cpu configs with a published result: its seven seed-0 models, then later seeds as they land."""
N_PUBLISHED_GPT2 = len(GPT2_PUBLISHED)


@pytest.fixture
def write_dir(tmp_path, monkeypatch):
    """An empty write directory through the variable a user sets."""
    d = tmp_path / "runs"
    monkeypatch.setenv(R.ENV_RESULTS_DIR, str(d))
    return d


def _copy_published(key: str, dest: Path, **changes) -> Path:
    data = json.loads((PUBLISHED / f"{key}.json").read_text())
    data.update(changes)
    path = dest / "wikitext2" / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_published_results_are_the_package_data():
    assert R.published_results_dir() == Path(nmst_lib.__file__).resolve().parent / "published_results"
    files = sorted(p.name for p in (R.published_results_dir() / "wikitext2").glob("*.json"))
    assert len(files) == N_PUBLISHED and any(c.head == "va" for c in SUITE_PUBLISHED)
    assert files == sorted(f"{c.key}.json" for c in SUITE_PUBLISHED + BASELINES)


def test_the_committed_gpt2_results_are_current_and_found_in_their_folder(write_dir):
    """Chapter 7 (07_gpt2): the cpu GPT-2 results are package data in published_results/gpt2/,
    every seed-0 model of the suite and the later seeds as they land (issue 23), each CURRENT for
    today's configs and found through the same fallback as Chapter 6's."""
    from nmst_lib.experiments.gpt2 import gpt2_suite_configs, load_gpt2_results

    suite = gpt2_suite_configs("cpu")
    files = {p.name for p in (R.published_results_dir() / "gpt2").glob("*.json")}
    assert files <= {f"{c.key}.json" for c in suite}, files - {f"{c.key}.json" for c in suite}
    first = {f"{c.key}.json" for c in suite if c.seed == 0}
    assert len(first) == 7 and first <= files and len(files) == N_PUBLISHED_GPT2
    found = [s for s in load_gpt2_results("cpu") if s.path.name in files]
    assert len(found) == len(files)
    assert {(s.status, s.source) for s in found} == {(CURRENT, R.PUBLISHED)}
    assert all(s.path.parent == R.published_results_dir() / "gpt2" for s in found)


def test_the_committed_cpu_results_are_current_and_found_through_the_fallback(write_dir):
    found = [R.load_result(c) for c in SUITE_PUBLISHED + BASELINES]
    assert {s.status for s in found} == {CURRENT}
    assert {s.source for s in found} == {R.PUBLISHED}
    assert all(s.path.parent == R.published_results_dir() / "wikitext2" for s in found)
    assert "[published]" in repr(found[0])


def test_default_results_dir_env_checkout_and_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(R.ENV_RESULTS_DIR, str(tmp_path / "mine"))
    assert R.default_results_dir() == tmp_path / "mine"
    monkeypatch.setenv(R.ENV_RESULTS_DIR, "")  # empty means unset
    assert R.is_source_checkout() == (REPO / ".git").exists()  # True in a git clone
    monkeypatch.setattr(R, "is_source_checkout", lambda: True)
    assert R.default_results_dir() == R.published_results_dir()
    # an installed package (no pyproject.toml / .git beside nmst_lib/) writes to the user cache
    monkeypatch.setattr(R, "is_source_checkout", lambda: False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert R.default_results_dir() == tmp_path / "xdg" / "nmst_lib" / "results"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec: ignore relative paths
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert R.default_results_dir() == tmp_path / "home" / ".cache" / "nmst_lib" / "results"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert R.user_cache_dir() == tmp_path / "home" / ".cache" / "nmst_lib"


def test_a_run_in_the_write_dir_overrides_the_published_one(write_dir):
    config = make_config("cpu", "lstm", "nmst", 5e-4, 0)
    mine = _copy_published(config.key, write_dir, marker="my run")
    found = R.load_result(config)
    assert (found.status, found.source, found.path) == (CURRENT, R.LOCAL, mine)
    assert found.data["marker"] == "my run"
    assert R.result_path(config) == mine  # where a new run would go


def test_a_stale_file_in_the_write_dir_does_not_hide_the_current_published_one(write_dir):
    config = make_config("cpu", "rnn", "va", None, 0)
    _copy_published(config.key, write_dir, config_hash="0" * 16)
    found = R.load_result(config)
    assert (found.status, found.source) == (CURRENT, R.PUBLISHED)
    # asked for that folder only, the stale file is what there is, and it says so
    only = R.load_result(config, write_dir)
    assert (only.status, only.source) == (STALE, R.LOCAL) and "config hash" in only.message
    # a config the package has no result for: the stale write-dir file is returned, never as current
    other = config.replace(dropout=0.25)
    found = R.load_result(other)
    assert found.status == STALE and not found.is_current and "dropout" in found.message


def test_a_stale_published_result_is_reported_with_where_it_came_from(write_dir):
    changed = make_config("cpu", "lstm", "va", None, 0).replace(max_epochs=5)  # same file, other config
    found = R.load_result(changed)
    assert (found.status, found.source) == (STALE, R.PUBLISHED) and "max_epochs" in found.message


def test_an_explicit_folder_is_the_only_place_looked_at(tmp_path, write_dir):
    config = make_config("cpu", "lstm", "va", None, 0)
    found = R.load_result(config, tmp_path / "empty")
    assert (found.status, found.source, found.data) == (MISSING, None, None)
    assert found.path == tmp_path / "empty" / "wikitext2" / f"{config.key}.json"
    missing = R.load_result(make_config("quick"))  # nowhere: both places are named
    assert missing.status == MISSING and str(write_dir) in missing.message
    assert str(R.published_results_dir()) in missing.message


def test_save_result_writes_to_the_default_write_dir(write_dir):
    config = make_config("quick")
    path = R.save_result({"metrics": {}}, config)
    assert path == write_dir / "wikitext2" / "quick-lstm-va-seed0.json"
    found = R.load_result(config)
    assert (found.status, found.source, found.path) == (CURRENT, R.LOCAL, path)


def test_gpt2_results_have_their_own_folder_and_rnn_results_stay_in_wikitext2(write_dir):
    """Chapter 7 (07_gpt2): arch gpt2 is written to and read from ``gpt2/``; every other arch
    (Chapter 6's RNN/LSTM results, the committed ones included) stays in ``wikitext2/``."""
    import dataclasses

    lstm = make_config("quick", "lstm", "nmst", 1e-2)
    gpt = dataclasses.replace(lstm, arch="gpt2")  # the folder depends on the arch only
    assert R.result_folder(gpt) == R.GPT2_FOLDER == "gpt2" and R.result_folder(lstm) == R.RNN_FOLDER == "wikitext2"
    assert R.result_path(gpt) == write_dir / "gpt2" / f"{gpt.key}.json"
    assert R.result_path(lstm) == write_dir / "wikitext2" / f"{lstm.key}.json"
    assert R.result_path(gpt, write_dir / "x") == write_dir / "x" / "gpt2" / f"{gpt.key}.json"
    with pytest.raises(TypeError, match="ExperimentConfig"):
        R.result_folder({"arch": "gpt2"})


@pytest.mark.parametrize("bad", [5, b"dir", "", 1.5])
def test_bad_results_dir_is_a_type_error(bad):
    with pytest.raises(TypeError, match="results_dir must be a folder path"):
        R.load_result(make_config("quick"), bad)
    with pytest.raises(TypeError, match="results_dir must be a folder path"):
        R.result_path(make_config("quick"), bad)


def test_unreadable_or_non_object_result_files_raise_value_error(write_dir):
    config = make_config("quick")
    path = write_dir / "wikitext2" / f"{config.key}.json"
    path.parent.mkdir(parents=True)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a result object"):
        R.load_result(config)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        R.load_result(config)


def test_code_version_outside_a_checkout_has_no_git_sha(monkeypatch):
    monkeypatch.setattr(R, "is_source_checkout", lambda: False)
    assert R.code_version() == {"git_sha": None, "git_dirty": None, "nmst_lib": nmst_lib.__version__}


# ---------------------------------------------------------------------------------- the wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """nmst_lib's wheel, built offline from a copy of the working tree."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "nmst_lib", src / "nmst_lib", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(work / "dist"), str(src)], check=True, cwd=work,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    (found,) = (work / "dist").glob("nmst_lib-*.whl")
    return found


def test_the_wheel_carries_every_published_result(wheel):
    with zipfile.ZipFile(wheel) as z:
        inside = {n: z.read(n) for n in z.namelist() if n.startswith("nmst_lib/published_results/")}
    # every chapter's folder travels: Chapter 6's wikitext2/, Chapter 7's gpt2/ and Chapter 8's sparse/
    every = sorted(p.relative_to(REPO).as_posix() for p in PUBLISHED.parent.glob("*/*.json"))
    assert sorted(inside) == every
    assert sum(name.startswith("nmst_lib/published_results/wikitext2/") for name in inside) == N_PUBLISHED
    assert sum(name.startswith("nmst_lib/published_results/sparse/") for name in inside) == len(
        list((PUBLISHED.parent / "sparse").glob("*.json"))) >= 3
    # every file of gpt2/ is a suite config's result, and all seven seed-0 models are there
    assert sum(name.startswith("nmst_lib/published_results/gpt2/") for name in inside) == N_PUBLISHED_GPT2
    assert sum(c.seed == 0 for c in GPT2_PUBLISHED) == 7
    for name, payload in inside.items():
        assert payload == (REPO / name).read_bytes()


def test_an_installed_wheel_finds_the_published_results_from_anywhere(wheel, tmp_path):
    """Installed (not editable) and run from an empty folder with no repository: the package
    data answers, the write directory is the user cache, and an override there wins."""
    target, cwd, home = tmp_path / "site", tmp_path / "elsewhere", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target),
                    str(wheel)], check=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    script = textwrap.dedent(f"""
        import json, os, sys
        from pathlib import Path
        import nmst_lib
        from nmst_lib.experiments import suite_configs
        from nmst_lib.experiments import results as R
        assert Path(nmst_lib.__file__).is_relative_to({str(target)!r}), nmst_lib.__file__
        assert not R.is_source_checkout()
        assert R.default_results_dir() == Path({str(home)!r}) / ".cache" / "nmst_lib" / "results"
        found = [s for s in (R.load_result(c) for c in suite_configs("cpu")) if s.status != "missing"]
        assert {{(s.status, s.source) for s in found}} == {{("current", "published")}}, found[:2]
        # a run in the user cache overrides the package's copy
        key = found[0].data["key"]
        data = dict(found[0].data, marker="cache")
        p = R.default_results_dir() / "wikitext2" / (key + ".json")
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps(data))
        again = R.load_result(next(c for c in suite_configs("cpu") if c.key == key))
        assert (again.status, again.source, again.data["marker"]) == ("current", "local", "cache"), again
        print("ok", len(found))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NMST_", "XDG_"))}
    env.update(PYTHONPATH=str(target), HOME=str(home))
    out = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"ok {len(SUITE_PUBLISHED)}"


def test_a_result_from_uncommitted_code_is_refused_in_the_published_folder_unless_forced(tmp_path, monkeypatch, capsys):
    """The website's results must say which code made them: a dirty-worktree result is refused in
    the published folder, written elsewhere unchanged, and written there only when forced, stamped
    and announced."""
    from nmst_lib.experiments import results as R

    monkeypatch.setattr(R, "published_results_dir", lambda: tmp_path / "published")
    (tmp_path / "published" / "gpt2").mkdir(parents=True)
    dirty = {"key": "k", "provenance": {"git_sha": "eb48482cce0", "git_dirty": True}}
    clean = {"key": "k", "provenance": {"git_sha": "eb48482cce0", "git_dirty": False}}
    target = tmp_path / "published" / "gpt2" / "k.json"
    monkeypatch.delenv(R.ALLOW_DIRTY_ENV, raising=False)
    with pytest.raises(R.DirtyResultError, match="uncommitted changes"):
        R.refuse_dirty_publication(dirty, target)
    assert R.refuse_dirty_publication(clean, target) is clean
    assert R.refuse_dirty_publication(dirty, tmp_path / "elsewhere" / "k.json") is dirty
    monkeypatch.setenv(R.ALLOW_DIRTY_ENV, "1")
    forced = R.refuse_dirty_publication(dirty, target)
    assert forced["provenance"]["dirty_forced"] is True and "dirty_forced" not in dirty["provenance"]
    assert "UNCOMMITTED" in capsys.readouterr().err
    # the writers apply it: nothing is written when refused
    monkeypatch.delenv(R.ALLOW_DIRTY_ENV)
    with pytest.raises(R.DirtyResultError):
        R.write_result(dirty, target, schema="s", key="k", config_hash="h", config={}, profile="cpu")
    assert not target.exists()
