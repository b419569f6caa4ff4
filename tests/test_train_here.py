"""The chapters' "train it here" helpers (nmst_lib.experiments.train_here and scratch_folder,
Chapters 6, 7 and 9): one library function instead of a copy in each chapter."""

from __future__ import annotations

import pytest

from nmst_lib.experiments import CURRENT, scratch_folder, train_here
from nmst_lib.experiments.family import get_family

pytestmark = pytest.mark.usefixtures("fixture_data_env")


def test_scratch_folder_is_named_after_the_chapter_or_the_shared_one(monkeypatch, tmp_path):
    monkeypatch.delenv("NMST_QUICK_DIR", raising=False)
    made = scratch_folder("ch6")
    assert "nmst-ch6-quick-" in made
    monkeypatch.setenv("NMST_QUICK_DIR", str(tmp_path))
    assert scratch_folder("ch9") == str(tmp_path)
    with pytest.raises(ValueError, match="chapter must name the chapter"):
        scratch_folder("")


def test_train_here_runs_the_whole_suite_once_and_then_only_reads(tmp_path, capsys, monkeypatch):
    configs = get_family("wikitext2").configs("quick")[:1]
    only = configs[0].key
    stored = train_here("wikitext2", "quick", tmp_path, only=only)
    assert [s.path.stem for s in stored] == [only]
    assert all(s.status == CURRENT for s in stored)
    assert (tmp_path / "checkpoints").is_dir()
    said = capsys.readouterr().out
    assert f"quick WikiText-2 suite here ({len(configs)} models)" in said
    assert str(tmp_path) not in said  # a page never shows the machine's folders
    # a second call finds every result CURRENT and trains nothing
    from nmst_lib.experiments import trainer

    monkeypatch.setattr(trainer, "_train_one_epoch", lambda *a, **k: pytest.fail("trained again"))
    again = train_here("wikitext2", "quick", tmp_path, only=only)
    assert [s.data for s in again] == [s.data for s in stored]
