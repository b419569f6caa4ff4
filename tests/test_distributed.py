"""Data-parallel training (nmst_lib.experiments.distributed; Chapter 7, 07_gpt2): row sharding of
the global batch, and 2 CPU processes on gloo (torchrun) following the loss trajectory of 1
process with the same global batch. The GPT-2 runs use a tiny byte-level BPE tokenizer (the code
path is GPT-2's, the vocabulary small) so that the check takes seconds on any machine."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from datasources import (
    FIXTURE_WIKITEXT_DIR,
    use_data_root,
    write_tiny_bpe_tokenizer,
)
from nmst_lib import data as D
from nmst_lib.experiments import make_config, train
from nmst_lib.experiments.distributed import (
    LossModule,
    all_reduce_sum,
    init_distributed,
    shard_rows,
    torchrun_command,
)

preparation = importlib.import_module("nmst_lib.experiments.preparation")
REPO = Path(__file__).resolve().parents[1]

LOSS_TOLERANCE = 1e-4
"""Largest allowed |loss(2 processes) - loss(1 process)| per optimizer step (losses ~ 5-8 nats):
the two runs differ only in floating-point summation order (measured: < 1e-6 over 8 steps)."""


def ddp_config(grad_accum: int = 1):
    """Quick GPT-2, dropout 0, batches of 3 rows (with 2 processes x grad_accum 2 one micro-batch
    of rank 1 is empty), 8 optimizer steps."""
    return make_config("quick", "gpt2", "nmst", 1e-2, 0, data_source="local", dropout=0.0, batch_size=3,
                       max_epochs=1, max_steps=8, grad_accum=grad_accum, num_eos_lines=0)


@pytest.fixture
def tiny_gpt2_env(tmp_path_factory):
    """NMST_DATA_DIR = a root with the fixture WikiText-2 and a tiny BPE tokenizer folder."""
    root = tmp_path_factory.mktemp("ddp-data")
    (root / D.WIKITEXT_SUBDIR).symlink_to(FIXTURE_WIKITEXT_DIR, target_is_directory=True)
    tok_dir = write_tiny_bpe_tokenizer(root / "tiny-tokenizer")
    with pytest.MonkeyPatch.context() as mp:
        use_data_root(mp, root)
        from transformers import GPT2Tokenizer

        tok = GPT2Tokenizer.from_pretrained(str(tok_dir))
        # load_gpt2_tokenizer insists on GPT-2's 50,257 ids; the training code path is the same with 277
        mp.setattr(preparation, "_gpt2_tokenizer", lambda: tok)
        yield root, tok_dir


DRIVER = textwrap.dedent("""
    import json, sys, time
    import torch
    torch.set_num_threads(1)
    from transformers import GPT2Tokenizer
    from nmst_lib.experiments import make_config, train
    from nmst_lib.experiments.distributed import init_distributed
    T = sys.modules["nmst_lib.experiments.preparation"]
    tok = GPT2Tokenizer.from_pretrained(sys.argv[2])
    T._gpt2_tokenizer = lambda: tok
    norms, clip = [], torch.nn.utils.clip_grad_norm_
    torch.nn.utils.clip_grad_norm_ = lambda params, c: norms.append(float(clip(params, c))) or norms[-1]
    out = sys.argv[1]
    ctx = init_distributed("cpu")
    config = make_config("quick", "gpt2", "nmst", 1e-2, 0, data_source="local", dropout=0.0, batch_size=3,
                         max_epochs=1, max_steps=8, grad_accum=int(sys.argv[3]), num_eos_lines=0)
    start = time.perf_counter()
    run = train(config, checkpoint_dir=out + "/ckpt", progress=False, dist=ctx)
    json.dump({"rank": ctx.rank, "world": ctx.world_size, "backend": ctx.backend, "losses": run.step_losses,
               "grad_norms": norms, "val_ppl": run.val_ppl, "seconds": time.perf_counter() - start},
              open(f"{out}/rank{ctx.rank}.json", "w"))
""")


# ------------------------------------------------------------------------------ sharding


@pytest.mark.parametrize("rows,world,accum", [(7, 2, 2), (3, 2, 2), (1, 2, 1), (10, 3, 1), (5, 1, 3), (4, 1, 1)])
def test_shard_rows_gives_every_row_of_the_global_batch_to_exactly_one_micro_batch(rows, world, accum):
    indices = torch.randperm(50)[:rows]
    parts = [shard_rows(indices, r, world, accum) for r in range(world)]
    assert all(len(p) == accum for p in parts)
    flat = torch.cat([m for p in parts for m in p])
    assert torch.equal(flat, indices)  # in order: rank-major, then micro-batch
    sizes = [m.numel() for p in parts for m in p]
    assert max(sizes) - min(sizes) <= 1  # near-equal; some may be empty when rows < world * accum
    if rows < world * accum:
        assert 0 in sizes


def test_shard_rows_is_the_identity_for_one_process_and_no_accumulation():
    idx = torch.tensor([4, 2, 9])
    assert shard_rows(idx, 0, 1, 1)[0] is not None and torch.equal(shard_rows(idx, 0, 1, 1)[0], idx)


@pytest.mark.parametrize("kwargs,match", [(dict(rank=2, world_size=2), "rank"), (dict(rank=0, world_size=0), "world"),
                                          (dict(rank=0, world_size=1, grad_accum=0), "grad_accum")])
def test_shard_rows_rejects_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        shard_rows(torch.arange(4), **kwargs)


def test_one_process_context_without_torchrun(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    ctx = init_distributed("cpu")
    assert (ctx.rank, ctx.world_size, ctx.is_main, ctx.distributed, ctx.backend) == (0, 1, True, False, None)
    assert all_reduce_sum([1.5, 2], ctx) == [1.5, 2.0]
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="RANK"):
        init_distributed("cpu")
    with pytest.raises(TypeError, match="token_loss"):
        LossModule(torch.nn.Linear(2, 2))
    cmd = torchrun_command(2, ["train", "--profile", "quick"])
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"] and cmd[-3:] == ["train", "--profile", "quick"]


def test_the_cli_drops_nproc_before_relaunching():
    from nmst_lib.__main__ import _without_nproc

    assert _without_nproc(["train", "--nproc", "2", "--arch", "gpt2", "--nproc=3"]) == ["train", "--arch", "gpt2"]


# ---------------------------------------------------------------------- 2 processes vs 1


def test_two_gloo_processes_follow_the_one_process_loss_trajectory(tiny_gpt2_env, tmp_path):
    """torchrun, 2 CPU processes (gloo), each global batch split over the processes and over
    grad_accum = 2 micro-batches per process (rank 1 gets an empty micro-batch whenever a batch has
    3 rows: it still runs one zero-weighted row), vs 1 process with the whole batch: every optimizer
    step's loss agrees within LOSS_TOLERANCE, and so does the final validation perplexity."""
    root, tok_dir = tiny_gpt2_env
    torch.set_num_threads(1)
    norms, clip = [], torch.nn.utils.clip_grad_norm_
    with pytest.MonkeyPatch.context() as mp:  # the gradient norm of every step (AdamW hides a constant factor)
        mp.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, c: norms.append(float(clip(params, c))))
        one = train(ddp_config(1), checkpoint_dir=tmp_path / "one", progress=False)
    assert len(one.step_losses) == one.optimizer_steps == 8
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    out = tmp_path / "two"
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script),
           str(out), str(tok_dir), "2"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                          timeout=300)
    wall = time.perf_counter() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["world"], r["backend"]) for r in ranks] == [(0, 2, "gloo"), (1, 2, "gloo")]
    assert ranks[0]["losses"] == ranks[1]["losses"]  # the logged loss is the all-reduced global one
    two = ranks[0]["losses"]
    assert len(two) == len(one.step_losses)
    diff = max(abs(a - b) for a, b in zip(one.step_losses, two))
    print(f"\nDDP check: 2 gloo processes x grad_accum 2 vs 1 process, {len(two)} steps: max |loss difference| = "
          f"{diff:.3e} (tolerance {LOSS_TOLERANCE:g}); val_ppl {one.val_ppl:.6f} vs {ranks[0]['val_ppl']:.6f}; "
          f"torchrun wall {wall:.1f} s")
    assert diff <= LOSS_TOLERANCE
    assert ranks[0]["val_ppl"] == pytest.approx(one.val_ppl, rel=1e-4)
    # the all-reduced gradients are the one-process gradients of the whole batch, on both ranks
    assert ranks[0]["grad_norms"] == pytest.approx(norms, rel=1e-4) and ranks[1]["grad_norms"] == pytest.approx(
        norms, rel=1e-4)
    assert one.step_losses[0] != one.step_losses[-1]  # precondition: it trained
    # only rank 0 wrote a checkpoint (one file + its mirror)
    assert sorted(p.name for p in (out / "ckpt").iterdir()) == [
        f"{ddp_config(2).key}.safetensors", f"{ddp_config(2).key}.safetensors.json"]


def test_cli_nproc_2_trains_an_lstm_like_one_process(fixture_data_env, tmp_path):
    """`python -m nmst_lib train --nproc 2` re-launches itself under torchrun; with dropout 0 the
    result equals the one-process run's within the tolerance of floating-point summation order."""
    base = [sys.executable, "-m", "nmst_lib", "train", "--profile", "quick", "--arch", "lstm", "--head", "nmst",
            "--eps", "0.01", "--set", "max_epochs=1", "--set", "dropout=0.0", "--set", 'data_source="local"',
            "--threads", "1", "--no-progress"]
    results = {}
    for nproc in (1, 2):
        cmd = base + ["--checkpoint-dir", str(tmp_path / f"n{nproc}"), "--nproc", str(nproc)]
        proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        assert len(lines) == 1, proc.stdout  # rank 0 alone reports
        results[nproc] = json.loads(lines[0])
        assert sum(line.startswith("[train]") and "epoch 1/1" in line for line in proc.stdout.splitlines()) == 1
    assert results[2]["val_ppl"] == pytest.approx(results[1]["val_ppl"], rel=1e-4)
