"""Speed of nmst_lib.entmax against the ``entmax`` package (1.3) (run by hand; Chapter 8).

    python benchmarks/bench_entmax.py [--repeats 11] [--batch 64] [--vocab 50257] [--threads 1]

Times forward + backward of sparsemax and entmax15 on ``[batch, vocab]`` float32 logits (default:
64 rows of GPT-2's 50,257-word vocabulary, standard normal scores), the backward being that of
``(p * w).sum()`` for a fixed random ``w`` (a dense incoming gradient). Ours (default: exact
partial sort of the candidates ``z_j >= max z - 1/(alpha-1)``) and ours with the full sort
(``k=V``) run interleaved with the package's (full sort, its default), after a warm-up, and the
medians of the repeats are compared: the script prints ``time(package) / time(ours)`` (of the
medians, and of the minima, which suffer less from other processes on a shared machine) and
writes them, with the torch version, thread count, device, load average and date, to
``benchmarks/results/entmax.json``. Target (issue 10): ratio >= 1.0. Uses CUDA when available
(then every timing is synchronised).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import entmax as entmax_pkg
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _provenance import KEY, closing_fields, stamp  # noqa: E402
from _timing import load_average, note_if_busy, timed, write_json  # noqa: E402

from nmst_lib import entmax as ours  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "entmax.json"


def time_forward_backward(fn, logits: torch.Tensor, weights: torch.Tensor) -> float:
    """Seconds for one forward + backward of ``(fn(logits) * weights).sum()``."""
    x = logits.detach().requires_grad_()
    return timed(lambda: (fn(x) * weights).sum().backward(), logits.device)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--scale", type=float, default=1.0, help="standard deviation of the logits")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    provenance = stamp(device, script=__file__)
    g = torch.Generator(device=device).manual_seed(0)
    shape = (args.batch, args.vocab)
    logits = args.scale * torch.randn(shape, generator=g, device=device)
    weights = torch.randn(shape, generator=g, device=device)
    V = args.vocab
    fns = {
        "sparsemax": {
            "package": lambda z: entmax_pkg.sparsemax(z, dim=-1),
            "ours": lambda z: ours.sparsemax(z, dim=-1),
            "ours_full_sort": lambda z: ours.sparsemax(z, dim=-1, k=V),
        },
        "entmax15": {
            "package": lambda z: entmax_pkg.entmax15(z, dim=-1),
            "ours": lambda z: ours.entmax15(z, dim=-1),
            "ours_full_sort": lambda z: ours.entmax15(z, dim=-1, k=V),
        },
    }
    # the same numbers, so that a speed-up cannot come from computing something else
    for name, impl in fns.items():
        ref = impl["package"](logits)
        for variant in ("ours", "ours_full_sort"):
            err = (impl[variant](logits) - ref).abs().max().item()
            if err > 1e-6:
                raise SystemExit(f"{name} {variant} differs from the package by {err:.3g}")

    flat = [(name, variant, fn) for name, impl in fns.items() for variant, fn in impl.items()]
    for _ in range(args.warmup):
        for _, _, fn in flat:
            time_forward_backward(fn, logits, weights)
    times = {name: {variant: [] for variant in impl} for name, impl in fns.items()}
    for _ in range(args.repeats):  # interleaved, so that load from other processes hits every variant
        for name, variant, fn in flat:
            times[name][variant].append(time_forward_backward(fn, logits, weights))
    medians = {n: {v: statistics.median(ts) for v, ts in d.items()} for n, d in times.items()}
    minima = {n: {v: min(ts) for v, ts in d.items()} for n, d in times.items()}
    ratios = {n: {v: medians[n]["package"] / medians[n][v] for v in ("ours", "ours_full_sort")} for n in fns}
    ratios_min = {n: {v: minima[n]["package"] / minima[n][v] for v in ("ours", "ours_full_sort")} for n in fns}

    for name in fns:
        for variant in fns[name]:
            timing = f"median {1e3 * medians[name][variant]:7.1f} ms, min {1e3 * minima[name][variant]:7.1f} ms"
            extra = ""
            if variant != "package":
                extra = f"   package/ours {ratios[name][variant]:.2f}x (of minima {ratios_min[name][variant]:.2f}x)"
            print(f"{name:9s} {variant:15s} forward+backward {timing}{extra}")
    met = min(r["ours"] for r in ratios.values()) >= 1.0
    print(f"target: package/ours >= 1.0 with the defaults ({'met' if met else 'missed'})")
    load = load_average()
    note_if_busy(load, device)

    record = {
        "benchmark": "forward+backward of sparsemax / entmax15, backward of (p * w).sum() for a fixed random w",
        "shape": list(shape),
        "logit_std": args.scale,
        "dtype": "float32",
        "repeats": args.repeats,
        "warmup": args.warmup,
        "median_seconds": medians,
        "min_seconds": minima,
        "all_seconds": times,
        "ratio_package_over_ours": ratios,
        "ratio_of_minima_package_over_ours": ratios_min,
        "load_average_1min_at_end": load,
        "target_ratio": 1.0,
        "entmax_package": getattr(entmax_pkg, "__version__", "1.3"),
        **closing_fields(provenance),
        KEY: provenance,
    }
    write_json(args.out, record)


if __name__ == "__main__":
    main()
