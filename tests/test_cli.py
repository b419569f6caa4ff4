"""Tests of the command line `python -m nmst_lib` (Chapter 6, 06_wikitext)."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from datasources import FIXTURE_WIKITEXT_DIR
from nmst_lib import __main__ as cli
from nmst_lib import data as D
from nmst_lib.experiments import config as cfg

REPO = Path(__file__).resolve().parents[1]


def _env(**changes):
    """The environment of a CLI subprocess: no data variables, hub offline, plus ``changes``."""
    env = {k: v for k, v in os.environ.items() if k not in (D.DATA_DIR_ENV, D.WIKITEXT_DIR_ENV)}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1", **changes)
    return env
COMMANDS = ("train", "decode", "run", "run-suite", "report", "sparse", "gpt2", "temperature")
SUITE_COMMANDS = ("sparse", "gpt2", "temperature")  # Chapters 8, 7 and 9: a chapter's whole suite


def test_module_help_runs_as_a_subprocess_and_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "nmst_lib", "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    for command in COMMANDS:  # in the list of commands (indented), not only in the description's prose
        assert re.search(rf"^\s+{re.escape(command)}\s", out.stdout, re.M), command
    assert "substitute" in out.stdout  # says what it trains on when the official split is missing


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_explains_its_options(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--profile", "--out", "--checkpoint-dir", "--device"):
        assert option in text
    if command in ("train", "decode", "run"):
        for option in ("--arch", "--head", "--eps", "--seed", "--decoders", "--set"):
            assert option in text
    if command == "train":
        assert "--resume" in text and "--checkpoint-every" in text
    if command in SUITE_COMMANDS:
        for option in ("--only", "--force", "--dry-run", "--threads", "--data-dir"):
            assert option in text
    if command == "gpt2":
        assert "--nproc" in text


def test_cli_choices_match_the_library():
    assert cli.PROFILES == cfg.PROFILES
    assert cli.ARCHS == cfg.ARCHS
    assert cli.HEADS == cfg.HEADS


def test_bad_input_exits_with_status_2_and_says_what_to_change(capsys):
    assert cli.main(["train", "--head", "st"]) == 2
    assert "needs eps" in capsys.readouterr().err
    assert cli.main(["train", "--head", "va", "--eps", "0.1"]) == 2
    assert "eps applies" in capsys.readouterr().err
    assert cli.main(["train", "--set", "hidden"]) == 2
    assert "FIELD=VALUE" in capsys.readouterr().err
    assert cli.main(["train", "--set", "colour=3"]) == 2
    assert "unknown config fields" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train", "--arch", "gru"])


def test_decode_without_a_checkpoint_says_to_train_first(tmp_path, capsys):
    assert cli.main(["decode", "--checkpoint-dir", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "train` first" in capsys.readouterr().err


def test_run_suite_dry_run_and_report_list_the_suite(tmp_path, capsys):
    assert cli.main(["run-suite", "--profile", "cpu", "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 30 and all("MISSING" in line for line in lines)
    assert cli.main(["report", "--profile", "quick", "--out", str(tmp_path)]) == 0
    assert "MISSING" in capsys.readouterr().out


def test_without_out_the_published_cpu_results_are_found(tmp_path, monkeypatch, capsys):
    """The committed cpu results ship in the package (nmst_lib/published_results): an empty
    write directory ($NMST_RESULTS_DIR) still sees every published one of the 30 as CURRENT,
    and the rest of the suite as MISSING."""
    from nmst_lib.experiments import published_results_dir, suite_configs

    published = {c.key for c in suite_configs("cpu")
                 if (published_results_dir() / "wikitext2" / f"{c.key}.json").is_file()}
    assert published
    monkeypatch.setenv("NMST_RESULTS_DIR", str(tmp_path))
    assert cli.main(["run-suite", "--profile", "cpu", "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 30
    for line in lines:
        key = line.split()[0]
        assert ("CURRENT" if key in published else "MISSING") in line, line
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    help_text = capsys.readouterr().out
    assert "NMST_RESULTS_DIR" in help_text and "published_results" in help_text and ".cache/nmst_lib" in help_text


def test_config_overrides_parse_json_values():
    args = cli.build_parser().parse_args(["train", "--set", "max_epochs=1", "--set", "vocab_cap=null",
                                          "--decoders", "greedy,beam-2"])
    config = cli._config_from_args(args)
    assert config.training.max_epochs == 1 and config.data.vocab_cap is None and config.decoding.decoders == ("greedy", "beam-2")


def test_help_names_the_data_variables_and_no_workplace_path(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = capsys.readouterr().out
    for name in ("NMST_DATA_DIR", "NMST_WIKITEXT_DIR", "hub"):  # the command's own help, and the module's
        assert name in text and name in cli._DESCRIPTION, name
    assert "shared" not in text + cli._DESCRIPTION


def test_run_on_the_fixture_corpus_through_data_dir_writes_a_result(tmp_path):
    """`python -m nmst_lib run --data-dir DIR` end to end (train, decode, JSON) on the fixture corpus,
    offline, with no data variable set."""
    out = subprocess.run(
        [sys.executable, "-m", "nmst_lib", "run", "--profile", "quick", "--arch", "rnn", "--head", "nmst", "--eps",
         "0.01", "--decoders", "greedy", "--set", "max_epochs=1", "--set", "decode_max_len=20", "--threads", "1",
         "--no-progress", "--data-dir", str(FIXTURE_WIKITEXT_DIR), "--out", str(tmp_path / "results"),
         "--checkpoint-dir", str(tmp_path / "ckpt")],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=_env())
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (path,) = (tmp_path / "results").rglob("*.json")
    result = json.loads(path.read_text())
    assert result["data"]["location"].endswith("fixtures/data/wikitext-2")
    assert D.SUBSTITUTE_NAME in result["data"]["splits"]["train"]
    assert result["decoding"]["greedy"]["max_len"] == 20


def test_without_data_or_network_a_command_stops_at_once_naming_the_variable(tmp_path):
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "nmst_lib", "train", "--profile", "quick", "--no-progress",
         "--checkpoint-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120, env=_env())
    assert out.returncode == 2, out.stdout + out.stderr
    assert "NMST_DATA_DIR" in out.stderr and "wikitext-2/" in out.stderr and "valid.txt" in out.stderr
    assert "Traceback" not in out.stderr
    assert time.perf_counter() - start < 60  # imports only: no download retries
    assert not list(tmp_path.iterdir())
