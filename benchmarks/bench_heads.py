"""Overhead of the ST and NMST output layers over the vanilla softmax (run by hand).

    python benchmarks/bench_heads.py [--repeats 9] [--batch 32] [--steps 35] [--vocab 33278]

Times forward + backward of :func:`nmst_lib.heads.vanilla_log_probs`,
:func:`~nmst_lib.heads.st_log_probs` and :func:`~nmst_lib.heads.nmst_log_probs` on
``[batch, steps, vocab]`` float32 logits (default: the paper's WikiText-2 batches, 32 x 35 x
33,278), the backward being that of the mean NLL of random targets (gather + mean), as in
training. The three layers run interleaved, after a warm-up, and the medians of the repeats
are compared: the script prints ``time(head) / time(vanilla)`` (of the medians, and of the
minima, which suffer less from other processes on a shared machine) and writes them, with the
torch version, thread count, device, load average and date, to ``benchmarks/results/heads.json``.
Target: ratio <= 1.15. Uses CUDA when available (then every timing is synchronised).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from nmst_lib.heads import nmst_log_probs, st_log_probs, vanilla_log_probs

RESULTS = Path(__file__).resolve().parent / "results" / "heads.json"
EPS = 1e-4


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def time_forward_backward(layer, logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Seconds for one forward + backward of the mean NLL of ``targets`` under ``layer``."""
    x = logits.detach().requires_grad_()
    _sync(logits.device)
    start = time.perf_counter()
    log_probs = layer(x)
    loss = -log_probs.gather(-1, targets.unsqueeze(-1)).mean()
    loss.backward()
    _sync(logits.device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=35)
    parser.add_argument("--vocab", type=int, default=33278)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator(device=device).manual_seed(0)
    shape = (args.batch, args.steps, args.vocab)
    logits = torch.randn(shape, generator=g, device=device)
    targets = torch.randint(0, args.vocab, shape[:2], generator=g, device=device)
    eos_id = args.vocab - 1
    layers = {
        "vanilla": vanilla_log_probs,
        "st": lambda z: st_log_probs(z, eos_id, EPS),
        "nmst": lambda z: nmst_log_probs(z, eos_id, EPS),
    }
    for _ in range(args.warmup):
        for layer in layers.values():
            time_forward_backward(layer, logits, targets)
    times = {name: [] for name in layers}
    for _ in range(args.repeats):  # interleaved, so that load from other processes hits all three
        for name, layer in layers.items():
            times[name].append(time_forward_backward(layer, logits, targets))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    minima = {name: min(ts) for name, ts in times.items()}
    ratios = {name: medians[name] / medians["vanilla"] for name in ("st", "nmst")}
    ratios_of_minima = {name: minima[name] / minima["vanilla"] for name in ("st", "nmst")}

    for name in layers:
        extra = "" if name == "vanilla" else f"   ratio {ratios[name]:.3f}x (of minima {ratios_of_minima[name]:.3f}x)"
        timing = f"median {1e3 * medians[name]:7.1f} ms, min {1e3 * minima[name]:7.1f} ms"
        print(f"{name:8s} forward+backward {timing}{extra}")
    print(f"target: median ratio <= 1.15 ({'met' if max(ratios.values()) <= 1.15 else 'missed'})")
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    if load is not None and device.type == "cpu" and load[0] > (os.cpu_count() or 1):
        print(f"note: load average {load[0]:.1f} on {os.cpu_count()} cores; other processes disturb these timings")

    record = {
        "benchmark": "forward+backward of the output layer, backward of the mean NLL of random targets",
        "shape": list(shape),
        "dtype": "float32",
        "eps": EPS,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "median_seconds": medians,
        "min_seconds": minima,
        "all_seconds": times,
        "ratio_to_vanilla": ratios,
        "ratio_of_minima_to_vanilla": ratios_of_minima,
        "load_average_1min_at_end": None if load is None else load[0],
        "target_ratio": 1.15,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": _device_name(device),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
