"""Tests of the one interface of the experiment families (nmst_lib.experiments.family, Chapters
6-9): every published result of every family loads CURRENT through the one reader, the `suite`
command and its aliases mean the same for every family, and a fifth family is one registration."""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from nmst_lib import __main__ as cli
from nmst_lib.experiments import family as F
from nmst_lib.experiments import results as R
from nmst_lib.experiments.config import canonical_hash

BOOK_FAMILIES = ("wikitext2", "gpt2", "sparse", "temperature")
"""Every family's cpu suite may be published in part: Chapters 6-9's converged runs and their seeds
land run by run (issue 23), and their pages show the stored part with the rest named."""


def _published_configs(name):
    """(config, stored) for every config of ``name``'s cpu suite that has a published file."""
    family = F.get_family(name)
    published = R.published_results_dir()
    out = []
    for config in family.configs("cpu"):
        stored = family.load(config, published)
        if stored.status != R.MISSING:
            out.append((config, stored))
    return out


def test_the_book_registers_four_families_and_the_cli_knows_them():
    assert F.family_names()[:4] == BOOK_FAMILIES
    assert cli.FAMILIES == BOOK_FAMILIES
    assert {family for family, _, _ in cli._SUITES.values()} == set(
        BOOK_FAMILIES
    )
    chapters = [F.get_family(name).chapter for name in BOOK_FAMILIES]
    assert chapters == [
        "06_wikitext",
        "07_gpt2",
        "08_sparse",
        "09_temperature",
    ]
    with pytest.raises(
        ValueError, match="unknown experiment family 'wikitext3'.*wikitext2"
    ):
        F.get_family("wikitext3")


def test_every_published_result_of_every_family_loads_current_through_the_one_reader():
    """Every file under nmst_lib/published_results is the result of a config of its family's
    cpu suite (or one of Chapter 9's Chapter 6 baselines, which Chapter 6's reader loads),
    CURRENT, with the config hash stored in it, and the numbers on disk. Every family has at least
    one result (its suite lands in part, :data:`BOOK_FAMILIES`)."""
    from nmst_lib.experiments.temperature_suite import baseline_configs

    published = R.published_results_dir()
    files = {p.resolve() for p in published.rglob("*.json")}
    assert len(files) >= 30  # every chapter's seed-0 models at least
    loaded = {}
    for name in BOOK_FAMILIES:
        family = F.get_family(name)
        all_configs = family.configs("cpu")
        configs = [c for c, _ in _published_configs(name)]
        assert configs, name
        if name == "wikitext2":  # Chapter 9's baselines, where they are not Chapter 6's own runs
            configs = configs + [c for c in baseline_configs("cpu") if c not in all_configs]
        for config in configs:
            stored = family.load(config, published)
            assert stored.status == R.CURRENT, (
                name,
                config.key,
                stored.message,
            )
            assert stored.source == R.PUBLISHED
            assert stored.data["config_hash"] == family.config_hash(config)
            assert stored.data["schema"] == family.schema
            again = R.read_result_file(
                stored.path,
                family.schema,
                family.config_hash(config),
                config.to_dict(),
            )
            assert again.status == R.CURRENT
            assert stored.data == json.loads(
                stored.path.read_text(encoding="utf-8")
            )
            loaded[stored.path.resolve()] = name
    assert set(loaded) == files  # no published file belongs to no family


def test_a_stale_file_names_the_fields_that_differ_in_every_family(tmp_path):
    for name in BOOK_FAMILIES:
        family = F.get_family(name)
        config = family.configs("quick")[0]
        family.save({"metrics": {}}, config, tmp_path)
        stored = family.load(config, tmp_path)
        assert stored.status == R.CURRENT
        data = dict(stored.data, config_hash="0" * 16)
        stored.path.write_text(json.dumps(data), encoding="utf-8")
        stale = family.load(config, tmp_path)
        assert (
            stale.status == R.STALE
            and "config hash 0000000000000000" in stale.message
        )
    missing = F.get_family("sparse").load(
        F.get_family("sparse").configs("quick")[0], tmp_path / "none"
    )
    assert missing.status == R.MISSING and "suite sparse" in missing.message


def test_records_keep_only_current_results():
    current = R.StoredResult(
        R.CURRENT, Path("a.json"), {"config": {}, "x": 1}, ""
    )
    stale = R.StoredResult(R.STALE, Path("b.json"), {"config": {}, "x": 2}, "")
    missing = R.StoredResult(R.MISSING, Path("c.json"), None, "")
    assert R.current_records(
        [current, stale, missing, {"config": {}, "x": 3}]
    ) == [{"config": {}, "x": 1}, {"config": {}, "x": 3}]
    assert R.current_records(current) == [{"config": {}, "x": 1}]
    with pytest.raises(TypeError):
        R.current_records("results")
    with pytest.raises(TypeError, match="'config'"):
        R.current_records([{"x": 1}], need="config")


def test_only_selects_the_same_way_in_every_family():
    for name in BOOK_FAMILIES:
        configs = F.get_family(name).configs("cpu")
        first, last = configs[0].key, configs[-1].key
        chosen = F.select_configs(configs, f"{first},{last}")
        assert chosen[0].key == first and chosen[-1].key == last
        assert F.select_configs(configs, None) == configs
        assert F.select_configs(configs, lambda c: c.key == last) == [
            configs[-1]
        ]
        with pytest.raises(ValueError, match="no model of the suite"):
            F.select_configs(configs, "no-such-key")
        with pytest.raises(ValueError, match="comma-separated"):
            F.select_configs(configs, ",")
        with pytest.raises(TypeError, match="predicate"):
            F.select_configs(configs, 3)


@pytest.mark.parametrize(
    "command", ["run-suite", "gpt2", "sparse", "temperature"]
)
def test_each_suite_command_is_suite_family(
    command, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("NMST_RESULTS_DIR", str(tmp_path))
    family = cli._SUITES[command][0]
    assert cli.main([command, "--profile", "cpu", "--dry-run"]) == 0
    alias = capsys.readouterr().out
    assert cli.main(["suite", family, "--profile", "cpu", "--dry-run"]) == 0
    assert capsys.readouterr().out == alias
    lines = alias.strip().splitlines()
    assert [line.split()[0] for line in lines] == [
        c.key for c in F.get_family(family).configs("cpu")
    ]
    stored = {c.key for c, _ in _published_configs(family)}
    assert stored
    for line in lines:  # the published results, and the rest of a partial suite
        assert line.split()[1] == ("CURRENT" if line.split()[0] in stored else "MISSING"), line
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    for option in (
        "--only",
        "--force",
        "--dry-run",
        "--jobs",
        "--threads",
        "--nproc",
        "--out",
    ):
        assert option in text


def test_suite_says_what_is_wrong(tmp_path, capsys):
    assert (
        cli.main(["suite", "nope", "--dry-run", "--out", str(tmp_path)]) == 2
    )
    assert "unknown experiment family 'nope'" in capsys.readouterr().err
    assert (
        cli.main(
            [
                "suite",
                "sparse",
                "--profile",
                "cpu",
                "--dry-run",
                "--only",
                "gpt2",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "no model of the cpu sparse suite" in capsys.readouterr().err
    assert (
        cli.main(
            ["suite", "temperature", "--nproc", "2", "--out", str(tmp_path)]
        )
        == 2
    )
    assert "does not train data-parallel" in capsys.readouterr().err


# ---------------------------------------------------------------- a fifth family, registered


@dataclass(frozen=True)
class ToyConfig:
    """A config of a toy family: a profile and a number."""

    profile: str
    n: int

    @property
    def key(self) -> str:
        return f"{self.profile}-toy-{self.n}"

    def to_dict(self) -> dict:
        return {"profile": self.profile, "n": self.n}


def _toy_family(runs: list) -> F.Family:
    def run(config, *, results_dir=None, log=None, **_):
        runs.append(config.key)
        family.save({"square": config.n**2}, config, results_dir)
        return family.load(config, results_dir)

    family = F.Family(
        name="toy",
        title="toy",
        chapter="99_toy",
        schema="test.toy/1",
        folder="toy",
        config_type=ToyConfig,
        configs=lambda profile: [ToyConfig(profile, n) for n in (1, 2, 3)],
        config_hash=lambda c: canonical_hash({"toy": c.to_dict()}),
        config_from_dict=lambda d: ToyConfig(**d),
        run=run,
        describe=lambda c: f"n={c.n}",
        missing_hint="run the toy suite",
    )
    return family


def test_a_fifth_family_is_one_registration(tmp_path, monkeypatch, capsys):
    runs = []
    monkeypatch.setattr(F, "_FAMILIES", dict(F._FAMILIES))
    toy = F.register(_toy_family(runs))
    assert "toy" in F.family_names() and F.get_family("toy") is toy
    results = F.run_family_suite(
        "toy", "quick", results_dir=tmp_path, only="toy-1,toy-3", log=None
    )
    assert (
        runs == ["quick-toy-1", "quick-toy-3"]
        and [r.status for r in results] == [R.CURRENT] * 2
    )
    assert (
        results[1].data["square"] == 9
        and results[1].path == tmp_path / "toy" / "quick-toy-3.json"
    )
    F.run_family_suite("toy", "quick", results_dir=tmp_path, log=None)
    assert runs == [
        "quick-toy-1",
        "quick-toy-3",
        "quick-toy-2",
    ]  # current results are skipped
    F.run_family_suite(
        "toy",
        "quick",
        results_dir=tmp_path,
        only="toy-2",
        force=True,
        log=None,
    )
    assert runs[-1] == "quick-toy-2"
    assert cli.main(["suite", "toy", "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split() for line in lines] == [
        [f"quick-toy-{n}", "CURRENT", f"n={n}"] for n in (1, 2, 3)
    ]
    with pytest.raises(TypeError, match="ToyConfig"):
        toy.load(F.get_family("sparse").configs("quick")[0], tmp_path)
    with pytest.raises(ValueError, match="already registered"):
        F.register(F.Family(**{**toy.__dict__, "chapter": "98_other"}))


def test_suite_clock_counts_runs_and_estimates_the_time_left_from_their_mean(monkeypatch):
    from nmst_lib.experiments import family as F

    now = [100.0]
    monkeypatch.setattr(F.time, "monotonic", lambda: now[0])
    clock = F.SuiteClock(4)
    now[0] += 600  # the first run took 10 minutes
    assert clock.tick().startswith("1/4 runs done in 10 min; about 30 min left (the mean of the runs so far")
    now[0] += 60  # the second 1 minute: mean 5.5 min, 2 left
    assert "2/4 runs done in 11 min; about 11 min left" in clock.tick()
    now[0] += 30
    clock.tick()
    assert clock.tick() == "4/4 runs done in 12 min"  # 690 s; nothing left to estimate
    with pytest.raises(ValueError):
        F.SuiteClock(0)
