"""Training cost of the entmax loss at alpha = 1.2 against alpha = 1.5 (run by hand; Chapter 8, issue 25).

    python benchmarks/bench_entmax_alpha.py [--repeats 7] [--threads 1] [--rows 1120] [--vocab 33278] [--scale 1]

Times forward + backward of the mean entmax (Fenchel-Young) loss
(:func:`nmst_lib.entmax.entmax_loss`, what ``EntmaxHead.token_losses`` trains with) of random
targets on ``[rows, vocab]`` float32 logits (default: one WikiText-2 batch, 32 x 35 positions
of a 33,278-word vocabulary; standard normal logits times ``--scale``):

* ``alpha1.5``: exact, sort-based threshold (Peters et al. 2019);
* ``alpha1.2``: the threshold exact in the dtype (safeguarded Newton on the largest scores);
* ``alpha1.2_before``: the same loss with main's threshold before issue 25, 50 halvings of the
  bracket (``_bisect_threshold(X, alpha, dim, 50)``, still in the library for
  ``entmax_bisect``), swapped in for the timing only; so before and after come from ONE run.

Interleaved after a warm-up; medians and minima; ratio ``time(alpha1.2) / time(alpha1.5)``
(target <= 1.5) and the same for the "before" variant. Checks first that both alpha = 1.2
variants give the same losses. Writes ``benchmarks/results/entmax_alpha.json`` with the torch
version, thread count, device, load average and date.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _provenance import KEY, closing_fields, stamp  # noqa: E402
from _timing import load_average, timed, write_json  # noqa: E402

import nmst_lib.entmax as E  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "entmax_alpha.json"
TARGET = 1.5


@contextlib.contextmanager
def fifty_halvings():
    """main's threshold for alpha not in {1.5, 2}: 50 halvings (the code before issue 25)."""
    exact = E._exact_threshold
    E._exact_threshold = lambda X, alpha, dim: E._bisect_threshold(X, alpha, dim, 50)
    try:
        yield
    finally:
        E._exact_threshold = exact


def time_loss(alpha, logits, targets, before=False) -> float:
    x = logits.detach().requires_grad_()

    def loss_backward():
        with fifty_halvings() if before else contextlib.nullcontext():
            E.entmax_loss(x, targets, alpha).mean().backward()

    return timed(loss_backward, logits.device)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=32 * 35)
    parser.add_argument("--vocab", type=int, default=33278)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    provenance = stamp(device, script=__file__)
    g = torch.Generator(device=device).manual_seed(0)
    logits = args.scale * torch.randn(args.rows, args.vocab, generator=g, device=device)
    targets = torch.randint(0, args.vocab, (args.rows,), generator=g, device=device)
    variants = {"alpha1.5": (1.5, False), "alpha1.2": (1.2, False), "alpha1.2_before": (1.2, True)}

    with torch.no_grad():
        new = E.entmax_loss(logits, targets, 1.2)
        with fifty_halvings():
            old = E.entmax_loss(logits, targets, 1.2)
    err = float((new - old).abs().max())
    print(f"alpha 1.2: largest difference between the two thresholds' losses {err:.3g}")
    if err > 1e-4:
        raise SystemExit("the two alpha = 1.2 variants compute different losses")

    for _ in range(args.warmup):
        for alpha, before in variants.values():
            time_loss(alpha, logits, targets, before)
    times = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, (alpha, before) in variants.items():
            times[name].append(time_loss(alpha, logits, targets, before))
    medians = {n: statistics.median(ts) for n, ts in times.items()}
    minima = {n: min(ts) for n, ts in times.items()}
    ratios = {n: medians[n] / medians["alpha1.5"] for n in ("alpha1.2", "alpha1.2_before")}
    ratios_min = {n: minima[n] / minima["alpha1.5"] for n in ("alpha1.2", "alpha1.2_before")}
    for name in variants:
        extra = "" if name not in ratios else f"   {ratios[name]:.2f}x alpha1.5 (of minima {ratios_min[name]:.2f}x)"
        print(f"{name:16s} median {1e3 * medians[name]:8.1f} ms, min {1e3 * minima[name]:8.1f} ms{extra}")
    print(f"target: alpha1.2 <= {TARGET}x alpha1.5 ({'met' if ratios['alpha1.2'] <= TARGET else 'missed'})")
    load = load_average()
    record = {
        "benchmark": "forward+backward of the mean entmax loss of random targets, alpha 1.2 vs 1.5",
        "shape": [args.rows, args.vocab],
        "logit_scale": args.scale,
        "dtype": "float32",
        "repeats": args.repeats,
        "warmup": args.warmup,
        "median_seconds": medians,
        "min_seconds": minima,
        "all_seconds": times,
        "ratio_to_alpha1.5": ratios,
        "ratio_of_minima_to_alpha1.5": ratios_min,
        "max_loss_difference_new_vs_before": err,
        "target_ratio": TARGET,
        "load_average_1min_at_end": load,
        **closing_fields(provenance),
        KEY: provenance,
    }
    write_json(args.out, record)


if __name__ == "__main__":
    main()
