"""Data-parallel training over several processes with PyTorch's DistributedDataParallel (DDP),
launched by ``torchrun`` (``torch.distributed.run``): the scale-out path of Chapter 7 (07_gpt2),
where GPT-2 is fine-tuned as in Choi, Cho, Lee (2023) Sec. 4.2 and App. D.

The training loop (:func:`nmst_lib.experiments.trainer.train`) is the same for one process and
for many. What changes with ``world_size`` processes:

* every global batch (the same on every process: the batch order depends only on the seed and
  the epoch) is split row-wise into ``world_size * grad_accum`` near-equal parts
  (:func:`shard_rows`); process r gets parts ``r * grad_accum ... (r + 1) * grad_accum - 1``, its
  micro-batches;
* the loss of a micro-batch is its summed per-token loss times ``world_size`` divided by the
  scored tokens of the WHOLE global batch (known on every process without communication), so
  after DDP averages the gradients over processes the update is the one-process update of the
  whole batch (up to floating-point summation order);
* DDP synchronises gradients only on the last micro-batch of an optimizer step (``no_sync`` on
  the others); a process whose part of a micro-batch is empty still runs a forward and backward
  pass (on one row, weighted 0) so that every process calls the same collectives;
* the logged loss of a step is all-reduced over processes (:func:`all_reduce_sum`);
* only rank 0 writes checkpoints, results and log lines (:attr:`DistContext.is_main`).

``python -m nmst_lib train ... --nproc N`` re-launches itself under ``torch.distributed.run``
(:func:`relaunch_with_torchrun`); ``torchrun --nproc-per-node N -m nmst_lib train ...`` works too.
CUDA processes use the NCCL backend (one GPU per process, ``cuda:LOCAL_RANK``), CPU processes
gloo.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass

import torch
from torch import nn

from .._validation import check_positive_int

__all__ = [
    "DistContext",
    "init_distributed",
    "shard_rows",
    "LossModule",
    "wrap_model",
    "no_sync",
    "all_reduce_sum",
    "relaunch_with_torchrun",
    "torchrun_command",
]

_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in a data-parallel run (Chapter 7, 07_gpt2): ``rank`` (0 ...
    world_size - 1), ``world_size`` (1 = no distribution), ``local_rank`` (rank on this machine:
    the GPU index), ``device`` (this process's device) and ``backend`` (``"nccl"``, ``"gloo"`` or
    None for a single process)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only process that writes checkpoints, results and logs."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when more than one process trains."""
        return self.world_size > 1


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} must be an integer (set by torchrun)") from None


def init_distributed(device=None) -> DistContext:
    """The :class:`DistContext` of this process, from the environment that ``torchrun`` sets
    (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); Chapter 7
    (07_gpt2).

    Without those variables, or with ``WORLD_SIZE=1``, nothing is initialised: rank 0 of 1 on
    ``device`` (default: CUDA when available, else CPU). Otherwise the default process group is
    initialised once (reused when it already is): NCCL with device ``cuda:LOCAL_RANK`` when CUDA is
    available and ``device`` is not a CPU device, else gloo on the CPU.
    """
    world = _env_int("WORLD_SIZE")
    requested = torch.device(device) if device is not None else None
    if world is None or world == 1:
        if requested is None:
            requested = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return DistContext(device=requested)
    if world < 1:
        raise ValueError(f"WORLD_SIZE must be >= 1, got {world}")
    rank, local_rank = _env_int("RANK"), _env_int("LOCAL_RANK")
    if rank is None:
        raise ValueError("WORLD_SIZE is set but RANK is not: launch with torchrun (torch.distributed.run), which "
                         "sets both")
    local_rank = rank if local_rank is None else local_rank
    import torch.distributed as dist

    use_cuda = torch.cuda.is_available() and (requested is None or requested.type == "cuda")
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK {local_rank} has no GPU ({torch.cuda.device_count()} visible): start at most "
                             "one process per GPU (--nproc-per-node)")
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
        backend = "nccl"
    else:
        dev = torch.device("cpu")
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    else:
        backend = dist.get_backend()
    if dist.get_world_size() != world or dist.get_rank() != rank:
        raise RuntimeError(f"the process group ({dist.get_rank()} of {dist.get_world_size()}) disagrees with "
                           f"RANK={rank}, WORLD_SIZE={world}")
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=dev, backend=backend)


def shard_rows(indices: torch.Tensor, rank: int, world_size: int, grad_accum: int = 1) -> list[torch.Tensor]:
    """This process's micro-batches of one global batch (Chapter 7, 07_gpt2): the rows
    ``indices`` split into ``world_size * grad_accum`` contiguous, near-equal parts
    (``torch.tensor_split``), of which process ``rank`` gets the ``grad_accum`` parts starting at
    ``rank * grad_accum``. Parts can be empty (a batch with fewer rows than parts); the caller
    must still take part in every collective. With one process and ``grad_accum = 1`` the result
    is ``[indices]`` itself."""
    world_size = check_positive_int(world_size, "world_size")
    grad_accum = check_positive_int(grad_accum, "grad_accum")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an integer in [0, {world_size}), got {rank!r}")
    indices = torch.as_tensor(indices, dtype=torch.long)
    if indices.dim() != 1 or indices.numel() == 0:
        raise ValueError(f"indices must be a non-empty 1-D tensor of row ids, got shape {tuple(indices.shape)}")
    if world_size == 1 and grad_accum == 1:
        return [indices]
    parts = torch.tensor_split(indices, world_size * grad_accum)
    return list(parts[rank * grad_accum:(rank + 1) * grad_accum])


class LossModule(nn.Module):
    """``forward(batch) -> (summed loss, scored-token count)`` of a language model
    (:meth:`nmst_lib.models.RecurrentLM.token_loss` / ``GPT2LM.token_loss``). DDP arms its gradient
    reducer only in ``forward``, so the training loop calls the model through this module when it
    is wrapped in DistributedDataParallel (Chapter 7, 07_gpt2)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        if not hasattr(model, "token_loss"):
            raise TypeError(f"model must have token_loss(batch) (an nmst_lib language model), got "
                            f"{type(model).__name__}")
        self.model = model

    def forward(self, batch):
        return self.model.token_loss(batch)


def wrap_model(model: nn.Module, ctx: DistContext) -> nn.Module:
    """``LossModule(model)``, inside DistributedDataParallel when ``ctx`` has more than one
    process (``device_ids=[local_rank]`` on CUDA). DDP broadcasts rank 0's parameters and
    buffers at construction, so every process starts from the same weights (Chapter 7, 07_gpt2)."""
    module = LossModule(model)
    if not ctx.distributed:
        return module
    from torch.nn.parallel import DistributedDataParallel as DDP

    if ctx.device.type == "cuda":
        return DDP(module, device_ids=[ctx.device.index], output_device=ctx.device.index)
    return DDP(module)


def no_sync(module: nn.Module, skip: bool):
    """``module.no_sync()`` when ``skip`` and ``module`` is DistributedDataParallel (gradients of a
    non-final micro-batch accumulate locally), else a context that does nothing. Chapter 7 (07_gpt2)."""
    if skip and hasattr(module, "no_sync"):
        return module.no_sync()
    return contextlib.nullcontext()


def all_reduce_sum(values, ctx: DistContext) -> list[float]:
    """The sums over processes of the numbers ``values`` (float64, one all-reduce), or the numbers
    themselves for one process (Chapter 7, 07_gpt2: the logged loss of a step is the global one)."""
    values = [float(v) for v in values]
    if not ctx.distributed:
        return values
    import torch.distributed as dist

    device = ctx.device if ctx.backend == "nccl" else torch.device("cpu")
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu().tolist()


def torchrun_command(nproc: int, module_args: list[str], module: str = "nmst_lib") -> list[str]:
    """The command that runs ``python -m <module> <module_args>`` in ``nproc`` processes on this
    machine under ``torch.distributed.run`` (torchrun, ``--standalone``: a local rendezvous on a
    free port). Chapter 7 (07_gpt2)."""
    nproc = check_positive_int(nproc, "nproc")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", module, *module_args]


def relaunch_with_torchrun(nproc: int, module_args: list[str], module: str = "nmst_lib") -> int:
    """Run :func:`torchrun_command` and return its exit status (used by ``python -m nmst_lib
    train/run --nproc N``; Chapter 7, 07_gpt2). The child processes inherit the environment."""
    return subprocess.call(torchrun_command(nproc, module_args, module))
