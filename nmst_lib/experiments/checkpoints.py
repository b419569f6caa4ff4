"""Training checkpoints as safetensors files: what the one training loop
(:mod:`nmst_lib.experiments.trainer`) writes and resumes from for every family (Chapters 6-9).

A checkpoint payload is a nested structure of tensors, numbers, strings, ``None``, lists,
tuples and dicts (with string, integer or other such keys: optimizer state is keyed by
parameter index), e.g. the model's ``state_dict``, AdamW's ``state_dict`` and the RNG states
that let a run resume exactly (Choi, Cho, Lee (2023) App. D trains for up to 300k steps; the
issue asks for resumable fine-tuning).

**Format** (``"nmst-checkpoint-2"``): ONE safetensors file. Its tensors are the payload's
tensors (detached, contiguous, on the CPU; tensors that share memory are stored once per
distinct view and cloned so that safetensors accepts them; the same view appearing twice, as
tied weights in a ``state_dict``, is stored once and comes back as one tensor object). Its
string metadata holds ``format``, ``payload`` (the JSON of everything else, tensors replaced by
``{"__tensor__": name}``; tuples, non-string dict keys, non-finite floats and bytes tagged so
that they come back as they were) and ``sha256``, a digest over the payload JSON and every
tensor's name, dtype, shape and bytes. The file is written atomically
(:func:`nmst_lib.experiments.results.atomic_write_bytes`); afterwards ``<path>.json`` mirrors
the non-tensor state (tensors listed by dtype and shape) for people to read. Resuming never
needs the mirror. Truncated, corrupted or foreign files raise :class:`CheckpointError`.
Files of the previous format (``NMSTCKPT1``: a sha256 header + ``torch.save``) still load.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import numbers
from pathlib import Path

import numpy as np
import torch

from .results import atomic_write_bytes

__all__ = ["CheckpointError", "FORMAT", "LEGACY_MAGIC", "save_checkpoint", "load_checkpoint", "mirror_path"]

FORMAT = "nmst-checkpoint-2"
"""Value of the ``format`` metadata entry of the checkpoints this module writes."""
LEGACY_MAGIC = b"NMSTCKPT1\n"
"""First bytes of the previous format (sha256 header + ``torch.save``), still read."""

_TAGS = ("__tensor__", "__ndarray__", "__tuple__", "__dict__", "__float__", "__bytes__")


class CheckpointError(ValueError):
    """A checkpoint is corrupted, truncated, not a checkpoint, or does not belong to this config/data.
    Raised by the resumable training of Chapters 6-9."""


def mirror_path(path: str | Path) -> Path:
    """The human-readable JSON mirror of checkpoint ``path``: ``<path>.json``. Written by the
    resumable training of Chapters 6-9."""
    path = Path(path)
    return path.with_name(path.name + ".json")


# ------------------------------------------------------------------------------------ encoding


class _Encoder:
    """Turns a payload into JSON-ready data plus a dict of tensors (see the module docstring)."""

    def __init__(self):
        self.tensors: dict[str, torch.Tensor] = {}
        self._seen: dict[tuple, str] = {}

    def tensor(self, t: torch.Tensor) -> str:
        if t.is_sparse or t.layout != torch.strided:
            raise TypeError(f"checkpoints store dense (strided) tensors only, got layout {t.layout}")
        t = t.detach()
        key = (t.device, t.dtype, t.untyped_storage().data_ptr() if t.numel() else 0, t.storage_offset(),
               tuple(t.shape), t.stride())
        name = self._seen.get(key)
        if name is None:
            name = f"t{len(self.tensors):06d}"
            # always a fresh contiguous CPU copy: shared storages would make safetensors refuse the save,
            # and the caller's tensors must not be aliased by what we hold
            self.tensors[name] = t.to("cpu", copy=True).contiguous()
            self._seen[key] = name
        return name

    def encode(self, obj, where: str):
        if isinstance(obj, torch.Tensor):
            return {"__tensor__": self.tensor(obj)}
        if isinstance(obj, np.ndarray):
            if obj.dtype == object:
                raise TypeError(f"{where}: numpy arrays of Python objects cannot be stored")
            return {"__ndarray__": self.tensor(torch.from_numpy(np.ascontiguousarray(obj)))}
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, numbers.Integral):
            return int(obj)
        if isinstance(obj, numbers.Real):
            x = float(obj)
            return x if math.isfinite(x) else {"__float__": repr(x)}
        if isinstance(obj, (bytes, bytearray)):
            return {"__bytes__": base64.b64encode(bytes(obj)).decode("ascii")}
        if isinstance(obj, torch.Size):
            obj = tuple(obj)
        if isinstance(obj, tuple):
            return {"__tuple__": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        if isinstance(obj, dict):
            plain = all(isinstance(k, str) for k in obj) and not (len(obj) == 1 and next(iter(obj)) in _TAGS)
            if plain:
                return {k: self.encode(v, f"{where}[{k!r}]") for k, v in obj.items()}
            return {"__dict__": [[self.encode(k, f"{where} key"), self.encode(v, f"{where}[{k!r}]")]
                                 for k, v in obj.items()]}
        raise TypeError(
            f"{where}: cannot store a {type(obj).__name__} in a checkpoint; allowed are tensors, numpy arrays, "
            "numbers, strings, bytes, None, lists, tuples and dicts of these"
        )


def _decode(obj, tensors: dict[str, torch.Tensor]):
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        (tag, value), = obj.items()
        if tag == "__tensor__":
            return tensors[value]
        if tag == "__ndarray__":
            return tensors[value].numpy()
        if tag == "__tuple__":
            return tuple(_decode(v, tensors) for v in value)
        if tag == "__float__":
            return float(value)
        if tag == "__bytes__":
            return base64.b64decode(value)
        if tag == "__dict__":
            return {_hashable(_decode(k, tensors)): _decode(v, tensors) for k, v in value}
    return {k: _decode(v, tensors) for k, v in obj.items()}


def _hashable(key):
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def _digest(payload_json: str, tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over the payload JSON and every tensor's name, dtype, shape and bytes (in name order)."""
    h = hashlib.sha256()
    h.update(FORMAT.encode())
    h.update(len(payload_json).to_bytes(8, "little"))
    h.update(payload_json.encode("utf-8"))
    for name in sorted(tensors):
        t = tensors[name]
        h.update(json.dumps([name, str(t.dtype), list(t.shape)]).encode())
        if t.numel():
            h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def _readable(obj, tensors):
    """The payload JSON with tensors shown as ``{"tensor": name, "dtype": ..., "shape": ...}``."""
    if isinstance(obj, list):
        return [_readable(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        (tag, value), = obj.items()
        if tag in ("__tensor__", "__ndarray__"):
            t = tensors[value]
            return {"tensor": value, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
    return {k: _readable(v, tensors) for k, v in obj.items()}


# ------------------------------------------------------------------------------- save / load


def save_checkpoint(path: str | Path, payload: dict) -> None:
    """Write ``payload`` (a dict of tensors, numpy arrays, numbers, strings, bytes, None, lists,
    tuples and dicts, nested) to ``path`` as one safetensors file with the non-tensor state and a
    sha256 in its metadata, atomically, then the readable mirror ``<path>.json`` (see the module
    docstring). Chapter 6 (06_wikitext) and Chapter 7 (07_gpt2): resumable training.
    TypeError names the first value that cannot be stored."""
    from safetensors.torch import save as st_save

    if not isinstance(payload, dict):
        raise TypeError(f"a checkpoint payload must be a dict, got {type(payload).__name__}")
    enc = _Encoder()
    tree = enc.encode(payload, "payload")
    payload_json = json.dumps(tree, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    digest = _digest(payload_json, enc.tensors)
    blob = st_save(enc.tensors, metadata={"format": FORMAT, "payload": payload_json, "sha256": digest})
    path = Path(path)
    atomic_write_bytes(path, blob)
    mirror = {"format": FORMAT, "checkpoint": path.name, "sha256": digest,
              "note": "human-readable mirror of the checkpoint's non-tensor state; not needed to resume",
              "payload": _readable(tree, enc.tensors)}
    atomic_write_bytes(mirror_path(path), (json.dumps(mirror, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))


def _load_legacy(path: Path, raw: bytes) -> dict:
    head_len = len(LEGACY_MAGIC) + 64 + 1
    if len(raw) < head_len:
        raise CheckpointError(f"checkpoint {path} is truncated (shorter than its header); delete it and train again")
    digest, body = raw[len(LEGACY_MAGIC):head_len - 1].decode("ascii", "replace"), raw[head_len:]
    if hashlib.sha256(body).hexdigest() != digest:
        raise CheckpointError(f"checkpoint {path} is corrupted or truncated (sha256 mismatch); delete it and "
                              "train again without --resume")
    try:
        return torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)
    except Exception as err:  # pragma: no cover - checksum passed but unpickling failed
        raise CheckpointError(f"checkpoint {path} could not be loaded ({err}); delete it and train again") from err


def load_checkpoint(path: str | Path) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint` (or the previous ``NMSTCKPT1``
    format) and return its payload, tensors on the CPU. The sha256 is checked; a truncated,
    corrupted or foreign file raises :class:`CheckpointError` (a missing one FileNotFoundError).
    Chapter 6 (06_wikitext) and Chapter 7 (07_gpt2)."""
    from safetensors.torch import load as st_load

    path = Path(path)
    raw = path.read_bytes()
    if raw.startswith(LEGACY_MAGIC):
        return _load_legacy(path, raw)
    bad = f"{path} is not a readable nmst_lib checkpoint"
    if len(raw) < 8:
        raise CheckpointError(f"{bad}: {len(raw)} bytes, truncated or empty; delete it and train again")
    header_len = int.from_bytes(raw[:8], "little")
    if 8 + header_len > len(raw):
        raise CheckpointError(f"{bad}: header of {header_len} bytes in a file of {len(raw)} (truncated, or not a "
                              "checkpoint); delete it and train again")
    try:
        header = json.loads(raw[8:8 + header_len].decode("utf-8"))
        meta = header.get("__metadata__") or {}
    except (UnicodeDecodeError, ValueError, AttributeError) as err:
        raise CheckpointError(f"{bad}: its header is not valid JSON ({err}); delete it and train again") from err
    if meta.get("format") != FORMAT or "payload" not in meta or "sha256" not in meta:
        raise CheckpointError(f"{bad}: format {meta.get('format')!r}, expected {FORMAT!r} (or the legacy "
                              f"{LEGACY_MAGIC.strip().decode()}); delete it and train again")
    try:
        tensors = st_load(raw)
    except Exception as err:  # SafetensorError: truncated data, bad offsets
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted ({err}); delete it and train again "
                              "without --resume") from err
    if _digest(meta["payload"], tensors) != meta["sha256"]:
        raise CheckpointError(f"checkpoint {path} is corrupted (sha256 mismatch); delete it and train again "
                              "without --resume")
    try:
        return _decode(json.loads(meta["payload"]), tensors)
    except (ValueError, KeyError, TypeError) as err:  # pragma: no cover - digest passed, so written by a bug
        raise CheckpointError(f"checkpoint {path}: payload could not be decoded ({err})") from err
