"""nmst_lib.files.atomic_write_bytes: the one atomic writer of results, checkpoints and grade sheets."""

import os
import stat

import pytest

from nmst_lib.files import atomic_write_bytes


def test_atomic_write_replaces_the_file_whole_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "sub" / "table.csv"
    atomic_write_bytes(path, b"old\r\n")
    atomic_write_bytes(path, b"new\r\n")
    assert path.read_bytes() == b"new\r\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["table.csv"]


def test_atomic_write_sets_the_mode_it_is_given_and_is_owner_only_without_one(tmp_path):
    shared, private = tmp_path / "shared.csv", tmp_path / "private.json"
    atomic_write_bytes(shared, b"x", mode=0o644)
    atomic_write_bytes(private, b"y")
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary_file(tmp_path):
    path = tmp_path / "t.csv"
    atomic_write_bytes(path, b"kept")
    with pytest.raises(TypeError):
        atomic_write_bytes(path, "not bytes")
    assert path.read_bytes() == b"kept" and [p.name for p in tmp_path.iterdir()] == ["t.csv"]
