"""Overhead of the ST and NMST output layers' training loss over the vanilla softmax NLL (run by hand).

    python benchmarks/bench_heads.py [--repeats 9] [--threads 1] [--batch 32] [--steps 35] [--vocab 33278]
                                     [--eos-logit 15 --out benchmarks/results/heads-eos-heavy.json]

Times forward + backward of the mean NLL ``-log p(y_t)`` of random targets on ``[batch, steps,
vocab]`` float32 logits (default: the paper's WikiText-2 batches, 32 x 35 x 33,278), as in
training:

* ``vanilla``: ``F.cross_entropy`` (torch's log-softmax + NLL), the baseline;
* ``st``, ``nmst``: ``STHead(eps).token_losses`` / ``NMSTHead(eps).token_losses``, the fused
  layers of :mod:`nmst_lib.fused` that the models train with;
* ``st_before``, ``nmst_before``: the same losses the way main computed them before the fusion
  (``benchmarks/heads_before.py``, a verbatim copy: log-probabilities in two passes, then the
  target's entry), so that before and after come from ONE run;
* ``st_shift``, ``nmst_shift``: the fused loss as it was up to session 22
  (``benchmarks/fused_shift_before.py``, a verbatim copy: the full log-softmax shifted per row,
  eos-dominated rows recomputed exactly), the "before" of the masked log-softmax;
* ``entmax``, ``nmst_entmax`` (alpha 1.5): ``EntmaxHead.token_losses`` (the entmax loss) and
  ``NMSTEntmaxHead.token_losses``, compared with each other.

``--eos-logit X`` adds ``X`` to the eos column of the random logits: with ``X = 15`` eos holds
more than half of the full softmax's mass on every row, as on 85 % of the rows of Chapter 7's ST
GPT-2 after one epoch (``nmst_lib.fused``'s docstring); the default 0 is the random logits.

All run interleaved, after a warm-up, and the medians (and minima, which suffer less from other
processes on a shared machine) are compared: ``time(head) / time(vanilla)`` and
``time(nmst_entmax) / time(entmax)``. Written, with the torch version, thread count, device,
load average and date, to ``benchmarks/results/heads.json``. Target (issue 25): ratio <= 1.05.
Uses CUDA when available (then every timing is synchronised).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _provenance import KEY, closing_fields, stamp  # noqa: E402
from _timing import load_average, note_if_busy, timed, write_json  # noqa: E402
from fused_shift_before import nll_before as shift_nll_before  # noqa: E402
from heads_before import nmst_nll_before, st_nll_before  # noqa: E402

from nmst_lib.heads import EntmaxHead, NMSTEntmaxHead, NMSTHead, STHead  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "heads.json"
EPS = 1e-4
ALPHA = 1.5
TARGET = 1.05


def time_forward_backward(loss_fn, logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Seconds for one forward + backward of the mean of ``loss_fn(logits, targets)`` (per position)."""
    x = logits.detach().requires_grad_()
    return timed(lambda: loss_fn(x, targets).mean().backward(), logits.device)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=35)
    parser.add_argument("--vocab", type=int, default=33278)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--eos-logit", type=float, default=0.0,
                        help="added to the eos column of the random logits (15: eos-dominated rows)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    provenance = stamp(device, script=__file__)
    g = torch.Generator(device=device).manual_seed(0)
    shape = (args.batch, args.steps, args.vocab)
    logits = torch.randn(shape, generator=g, device=device)
    targets = torch.randint(0, args.vocab, shape[:2], generator=g, device=device)
    eos_id = args.vocab - 1
    logits[..., eos_id] += args.eos_logit
    dominated = float((torch.log_softmax(logits, -1)[..., eos_id] > -math.log(2.0)).float().mean())
    st, nmst = STHead(EPS), NMSTHead(EPS)
    entmax, nmst_entmax = EntmaxHead(ALPHA), NMSTEntmaxHead(EPS, ALPHA)
    layers = {
        "vanilla": lambda z, y: F.cross_entropy(z.reshape(-1, z.shape[-1]), y.reshape(-1), reduction="none"),
        "st": st.token_losses,
        "nmst": nmst.token_losses,
        "st_before": lambda z, y: st_nll_before(z, y, eos_id, EPS),
        "nmst_before": lambda z, y: nmst_nll_before(z, y, eos_id, EPS),
        "st_shift": lambda z, y: shift_nll_before(st, z, y),
        "nmst_shift": lambda z, y: shift_nll_before(nmst, z, y),
        "entmax": entmax.token_losses,
        "nmst_entmax": nmst_entmax.token_losses,
    }
    for _ in range(args.warmup):
        for layer in layers.values():
            time_forward_backward(layer, logits, targets)
    times = {name: [] for name in layers}
    for _ in range(args.repeats):  # interleaved, so that load from other processes hits all of them
        for name, layer in layers.items():
            times[name].append(time_forward_backward(layer, logits, targets))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    minima = {name: min(ts) for name, ts in times.items()}
    baseline = {name: "vanilla" for name in ("st", "nmst", "st_before", "nmst_before", "st_shift", "nmst_shift")}
    baseline["nmst_entmax"] = "entmax"
    ratios = {name: medians[name] / medians[base] for name, base in baseline.items()}
    ratios_of_minima = {name: minima[name] / minima[base] for name, base in baseline.items()}

    for name in layers:
        extra = ""
        if name in baseline:
            extra = (f"   {ratios[name]:.3f}x {baseline[name]} (of minima {ratios_of_minima[name]:.3f}x)")
        timing = f"median {1e3 * medians[name]:7.1f} ms, min {1e3 * minima[name]:7.1f} ms"
        print(f"{name:12s} forward+backward {timing}{extra}")
    met = max(ratios[n] for n in ("st", "nmst", "nmst_entmax")) <= TARGET
    print(f"rows where eos holds more than half of the full softmax: {dominated:.1%}")
    print(f"target: median ratio <= {TARGET} for st, nmst (vs vanilla) and nmst_entmax (vs entmax): "
          f"{'met' if met else 'missed'}")
    load = load_average()
    note_if_busy(load, device)

    record = {
        "benchmark": "forward+backward of the mean training loss of random targets: vanilla = F.cross_entropy, "
                     "st/nmst = the heads' fused token_losses, *_before = main's two-pass layers (heads_before.py), "
                     "*_shift = the fused loss up to session 22 (fused_shift_before.py), "
                     "entmax / nmst_entmax = the entmax heads' token_losses",
        "shape": list(shape),
        "dtype": "float32",
        "eos_logit_added": args.eos_logit,
        "share_of_rows_eos_dominated": dominated,
        "eps": EPS,
        "alpha": ALPHA,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "median_seconds": medians,
        "min_seconds": minima,
        "all_seconds": times,
        "baseline_of": baseline,
        "ratio": ratios,
        "ratio_of_minima": ratios_of_minima,
        "load_average_1min_at_end": load,
        "target_ratio": TARGET,
        **closing_fields(provenance),
        KEY: provenance,
    }
    write_json(args.out, record)


if __name__ == "__main__":
    main()
