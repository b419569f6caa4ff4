"""Tests of the command line `python -m nmst_lib` (Chapter 6, 06_wikitext)."""

import subprocess
import sys
from pathlib import Path

import pytest

from nmst_lib import __main__ as cli
from nmst_lib.experiments import config as cfg

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ("train", "decode", "run", "run-suite", "report")


def test_module_help_runs_as_a_subprocess_and_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "nmst_lib", "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    for command in COMMANDS:
        assert command in out.stdout
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
    write directory ($NMST_RESULTS_DIR) still sees all 30 as CURRENT."""
    monkeypatch.setenv("NMST_RESULTS_DIR", str(tmp_path))
    assert cli.main(["run-suite", "--profile", "cpu", "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 30 and all("CURRENT" in line for line in lines)
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    help_text = capsys.readouterr().out
    assert "NMST_RESULTS_DIR" in help_text and "published_results" in help_text and ".cache/nmst_lib" in help_text


def test_config_overrides_parse_json_values():
    args = cli.build_parser().parse_args(["train", "--set", "max_epochs=1", "--set", "vocab_cap=null",
                                          "--decoders", "greedy,beam-2"])
    config = cli._config_from_args(args)
    assert config.max_epochs == 1 and config.vocab_cap is None and config.decoders == ("greedy", "beam-2")
