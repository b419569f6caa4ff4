"""Checkpoints as one safetensors file + JSON metadata + sha256 (nmst_lib.experiments.checkpoints;
Chapters 6 and 7): exact round trips of real training state, detection of every truncation and
bit flip, the readable mirror, and the legacy NMSTCKPT1 format."""

from __future__ import annotations

import hashlib
import io
import json
import math
import random

import numpy as np
import pytest
import torch

from nmst_lib.experiments.checkpoints import (
    FORMAT,
    LEGACY_MAGIC,
    CheckpointError,
    load_checkpoint,
    mirror_path,
    save_checkpoint,
)
from nmst_lib.models import RNNLM


def assert_same(a, b, where="payload"):
    """Equal values of equal types, recursively (tuples stay tuples, int keys stay ints; an
    OrderedDict, e.g. a state_dict, may come back as a plain dict in the same order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        a, b = dict(a), dict(b)
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, where


def training_state(steps: int = 3):
    """A small tied-weight LSTM-free RNN trained a few AdamW steps, and a payload like train.py's."""
    torch.manual_seed(0)
    model = RNNLM(50, hidden=8, layers=1, dropout=0.0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=0.01)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randint(0, 50, (4, 6))).mean().backward()
        opt.step()
    np_state = np.random.get_state()
    payload = {
        "format": 1,
        "config": {"arch": "rnn", "eps": 1e-4, "betas": (0.9, 0.99), "vocab_cap": None},
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                          "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached": float(np_state[4])}},
        "progress": {"epoch": 1, "best_val_ppl": math.inf, "history": [{"epoch": 1, "val_ppl": 12.5}],
                     "nan": math.nan, "finished": False},
    }
    return model, opt, payload


def test_round_trip_of_real_adamw_and_rng_state_is_exact_and_resumes_identically(tmp_path):
    model, opt, payload = training_state()
    path = tmp_path / "run.safetensors"
    save_checkpoint(path, payload)
    loaded = load_checkpoint(path)
    assert_same(payload, loaded)
    assert set(loaded["optimizer"]["state"]) == set(range(len(list(model.parameters()))))  # int keys survive
    assert isinstance(loaded["optimizer"]["param_groups"][0]["betas"], tuple)
    assert isinstance(loaded["rng"]["python"], tuple) and isinstance(loaded["rng"]["python"][1], tuple)
    random.setstate(loaded["rng"]["python"])  # accepted as is

    # resume: a fresh model + optimizer loaded from the file takes the same next step as the original
    x = torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(1))
    model2 = RNNLM(50, hidden=8, layers=1, dropout=0.0)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=0.01)
    model2.load_state_dict(loaded["model"])
    opt2.load_state_dict(loaded["optimizer"])
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(x).mean().backward()
        o.step()
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)


def test_tied_weights_are_stored_once_and_come_back_as_one_tensor(tmp_path):
    from safetensors import safe_open

    model, _, _ = training_state(steps=1)
    state = model.state_dict()
    assert state["embedding.weight"].data_ptr() == state["output.weight"].data_ptr()  # tied
    save_checkpoint(tmp_path / "m.safetensors", {"model": state})
    with safe_open(str(tmp_path / "m.safetensors"), framework="pt") as f:
        assert len(list(f.keys())) == len(state) - 1
    loaded = load_checkpoint(tmp_path / "m.safetensors")["model"]
    assert loaded["embedding.weight"] is loaded["output.weight"]
    assert torch.equal(loaded["output.weight"], state["output.weight"])


def test_overlapping_views_and_odd_dtypes_round_trip_without_aliasing_the_caller(tmp_path):
    base = torch.arange(12, dtype=torch.float64)
    payload = {"whole": base, "view": base[2:7], "strided": base.view(3, 4).t(), "empty": torch.zeros(0, 3),
               "scalar": torch.tensor(3, dtype=torch.int8), "mask": torch.tensor([True, False]),
               "half": torch.tensor([1.5, -2.25], dtype=torch.bfloat16), "array": np.arange(5, dtype=np.uint32),
               "bytes": b"\x00\xff", "nested": {3: (1, "a", None), (1, 2): [1.0, -math.inf]},
               "only": {"__tuple__": 1}}
    save_checkpoint(tmp_path / "x.safetensors", payload)
    loaded = load_checkpoint(tmp_path / "x.safetensors")
    assert_same(payload, loaded)
    loaded["view"][0] = -1.0
    assert loaded["whole"][2] == 2.0 and base[2] == 2.0  # separate copies


def test_every_truncation_is_a_checkpoint_error(tmp_path):
    _, _, payload = training_state(steps=1)
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, payload)
    raw = path.read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    offsets = sorted({0, 1, 7, 8, 9, 8 + header_len // 2, 8 + header_len - 1, 8 + header_len,
                      8 + header_len + 1, (8 + header_len + len(raw)) // 2, len(raw) - 1})
    for n in offsets:
        path.write_bytes(raw[:n])
        with pytest.raises(CheckpointError, match="delete it"):
            load_checkpoint(path)


def test_every_single_bit_flip_is_a_checkpoint_error(tmp_path):
    payload = {"w": torch.arange(6, dtype=torch.float32).view(2, 3), "step": 7, "betas": (0.9, 0.99),
               "state": {0: {"exp_avg": torch.ones(3)}}}
    path = tmp_path / "f.safetensors"
    save_checkpoint(path, payload)
    raw = path.read_bytes()
    missed = []
    for i in range(len(raw)):
        for bit in (0, 5):
            flipped = bytearray(raw)
            flipped[i] ^= 1 << bit
            path.write_bytes(bytes(flipped))
            try:
                load_checkpoint(path)
            except CheckpointError:
                continue
            missed.append((i, bit))
    assert not missed, f"undetected flips at (byte, bit) {missed[:10]} of {len(raw)} bytes"


def test_foreign_files_are_checkpoint_errors_and_a_missing_file_is_not_found(tmp_path):
    from safetensors.torch import save_file

    save_file({"a": torch.ones(2)}, str(tmp_path / "plain.safetensors"))
    (tmp_path / "text.safetensors").write_text("hello, this is not a checkpoint")
    for name in ("plain.safetensors", "text.safetensors"):
        with pytest.raises(CheckpointError, match="not a readable nmst_lib checkpoint"):
            load_checkpoint(tmp_path / name)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "absent.safetensors")
    assert issubclass(CheckpointError, ValueError)


def test_legacy_nmstckpt1_files_still_load_and_their_corruption_is_detected(tmp_path):
    _, _, payload = training_state(steps=1)
    buf = io.BytesIO()
    torch.save(payload, buf)  # exactly what train.save_checkpoint wrote before this format
    body = buf.getvalue()
    raw = LEGACY_MAGIC + hashlib.sha256(body).hexdigest().encode("ascii") + b"\n" + body
    path = tmp_path / "old.pt"
    path.write_bytes(raw)
    assert_same(payload, load_checkpoint(path))
    for broken in (raw[:-10], raw[:20], raw[:-100] + bytes([raw[-100] ^ 1]) + raw[-99:]):
        path.write_bytes(broken)
        with pytest.raises(CheckpointError, match="corrupted|truncated"):
            load_checkpoint(path)


def test_write_is_atomic_and_the_json_mirror_is_readable_without_tensor_data(tmp_path):
    _, _, payload = training_state(steps=1)
    path = tmp_path / "deep" / "run.safetensors"
    save_checkpoint(path, payload)
    save_checkpoint(path, payload)  # overwrite in place
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.safetensors", "run.safetensors.json"]
    mirror = json.loads(mirror_path(path).read_text())
    assert mirror["format"] == FORMAT and mirror["checkpoint"] == "run.safetensors"
    assert mirror["payload"]["config"]["arch"] == "rnn"
    assert mirror["payload"]["progress"]["history"] == [{"epoch": 1, "val_ppl": 12.5}]
    weight = mirror["payload"]["model"]["embedding.weight"]
    assert weight["dtype"] == "float32" and weight["shape"] == [50, 8]
    assert mirror_path(path).stat().st_size < path.stat().st_size


def test_mirror_is_not_needed_to_resume(tmp_path):
    _, _, payload = training_state(steps=1)
    path = tmp_path / "run.safetensors"
    save_checkpoint(path, payload)
    mirror_path(path).unlink()
    assert_same(payload, load_checkpoint(path))


def test_unstorable_values_are_type_errors_naming_where():
    with pytest.raises(TypeError, match=r"payload\['bad'\]\[1\].*object"):
        save_checkpoint("/nonexistent/never-written", {"bad": [1, object()]})
    with pytest.raises(TypeError, match="must be a dict"):
        save_checkpoint("/nonexistent/never-written", [1, 2])
