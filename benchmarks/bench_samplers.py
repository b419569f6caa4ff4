"""Benchmark: top-k and nucleus sampling with topk prefilters vs the full-vocabulary rule.

Run by hand from the project root::

    .venv/bin/python benchmarks/bench_samplers.py --threads 1     # the real benchmark
    .venv/bin/python benchmarks/bench_samplers.py --quick         # seconds-long smoke run

Compared, per decoding step on the same log-probabilities:

* baseline (what ``nmst_lib.decoding`` did before): the candidate set as a mask over the
  whole vocabulary (top-k: a threshold and a cumulative sum over ties; nucleus: a stable sort
  of every row and a ``logcumsumexp``), then an exponential race over all V tokens;
* ``nmst_lib.decoding._token_chooser`` (what ``decode`` uses): the set from ``topk``
  prefilters (``_top_k_ids``; ``_nucleus_sets`` looks among the 64, then 1,024 most probable
  tokens before sorting a row), and a race over the candidates only.

The sets are checked to be identical before timing. Rows: next-token distributions shaped
like a language model's (Zipf laws p_r ~ r^-s over a random order of the ids, s drawn from
[0.8, 1.4] per row; nucleus-0.4 sets then range from a few tokens to several hundred, so
every prefilter stage is exercised), at the cpu profile's vocabulary (5,001) and the paper's
(33,278). End to end: ``decode`` of a randomly initialised 2 x 128 LSTM language model
(vocabulary 5,001) with each decoder, once with the baseline chooser patched in.
Results go to ``benchmarks/results/samplers.json``.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _provenance import KEY, short_version, stamp  # noqa: E402
from _timing import load_average, write_json  # noqa: E402

from nmst_lib import decoding as D  # noqa: E402
from nmst_lib.models import LSTMLM  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "samplers.json"
DECODERS = {"top-2": ("top-k", dict(k=2)), "top-4": ("top-k", dict(k=4)),
            "nucleus-0.2": ("nucleus", dict(p=0.2)), "nucleus-0.4": ("nucleus", dict(p=0.4)),
            "consistent-top-2": ("top-k", dict(k=2, consistent=True)),
            "consistent-nucleus-0.2": ("nucleus", dict(p=0.2, consistent=True))}


def full_vocabulary_mask(log_probs, method, k=None, p=None, eos_id=None):
    """The baseline candidate set: the full-vocabulary rules (ties: smaller id first)."""
    if method == "top-k":
        mask = D._top_k_mask(log_probs, k)
    else:
        ordered, order = torch.sort(log_probs, dim=-1, descending=True, stable=True)
        before = torch.logcumsumexp(ordered, dim=-1).roll(1, dims=-1)
        before[..., 0] = -math.inf
        mask = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < math.log(p))
    return D._with_eos(mask, eos_id)


def baseline_chooser(method, k, p, eos_id, generator):
    return lambda lp: D._sample(lp.masked_fill(~full_vocabulary_mask(lp, method, k, p, eos_id), -math.inf), generator)


def zipf_rows(rows: int, vocab_size: int, generator) -> torch.Tensor:
    s = 0.8 + 0.6 * torch.rand(rows, 1, generator=generator, dtype=torch.float64)
    ranks = torch.stack([torch.randperm(vocab_size, generator=generator) for _ in range(rows)]).double() + 1
    return torch.log_softmax(-s * ranks.log(), dim=-1).float()


def median_ms(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--decode-contexts", type=int, default=64)
    parser.add_argument("--decode-len", type=int, default=200)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for checking that the script runs")
    parser.add_argument("--output", type=pathlib.Path, default=None,
                        help=f"where the JSON goes (default {RESULTS.relative_to(RESULTS.parents[2])}; "
                             "a --quick run writes only where --output names)")
    args = parser.parse_args(argv)
    if args.output is None and not args.quick:
        args.output = RESULTS
    vocab_sizes = (5_001, 33_278)
    if args.quick:
        args.rows, args.reps, args.decode_contexts, args.decode_len, vocab_sizes = 8, 3, 8, 20, (2_000,)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    provenance = stamp(device, script=__file__, argv=argv)
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}")

    per_step = []
    for vocab_size in vocab_sizes:
        lp = zipf_rows(args.rows, vocab_size, torch.Generator().manual_seed(vocab_size)).to(device)
        eos_id = vocab_size - 1
        sizes = D.nucleus_mask(lp, 0.4).sum(dim=-1).float()
        print(f"V = {vocab_size}: nucleus-0.4 sizes min {sizes.min():.0f} median {sizes.median():.0f} "
              f"max {sizes.max():.0f}")
        for name, (method, kw) in DECODERS.items():
            k, p, cons = kw.get("k"), kw.get("p"), kw.get("consistent", False)
            e = eos_id if cons else None
            new_mask = D.top_k_mask(lp, k, eos_id=e) if method == "top-k" else D.nucleus_mask(lp, p, eos_id=e)
            assert torch.equal(new_mask, full_vocabulary_mask(lp, method, k, p, e)), f"{name}: sets differ"
            g = torch.Generator(device=device).manual_seed(0)
            new = D._token_chooser(method, k, p, e, g)
            old = baseline_chooser(method, k, p, e, g)
            t_old, t_new = median_ms(lambda: old(lp), args.reps), median_ms(lambda: new(lp), args.reps)
            per_step.append({"vocab_size": vocab_size, "decoder": name, "rows": args.rows,
                             "baseline_ms": t_old, "prefilter_ms": t_new, "speedup": t_old / t_new})
            print(f"  {name:24s} baseline {t_old:7.2f} ms  prefilter {t_new:6.2f} ms  {t_old / t_new:5.1f}x")

    torch.manual_seed(0)
    model = LSTMLM(5_001, hidden=128, layers=2, dropout=0.0).to(device).eval()
    contexts = torch.randint(0, 5_000, (args.decode_contexts, 10), generator=torch.Generator().manual_seed(0)).to(device)
    end_to_end = []
    original = D._token_chooser
    for name in ("top-2", "nucleus-0.2", "nucleus-0.4"):
        method, kw = DECODERS[name]
        timings = {}
        for label, chooser in (("baseline", lambda m, k, p, e, g, *_: baseline_chooser(m, k, p, e, g)), ("prefilter", original)):
            D._token_chooser = chooser
            try:
                start = time.perf_counter()
                with torch.no_grad():
                    D.decode(model, contexts, method, max_len=args.decode_len,
                             generator=torch.Generator(device=device).manual_seed(0), **kw)
                timings[label] = time.perf_counter() - start
            finally:
                D._token_chooser = original
        end_to_end.append({"decoder": name, "contexts": args.decode_contexts, "L": args.decode_len,
                           "baseline_s": timings["baseline"], "prefilter_s": timings["prefilter"],
                           "speedup": timings["baseline"] / timings["prefilter"]})
        print(f"decode {name:12s} ({args.decode_contexts} contexts, L = {args.decode_len}, random 2x128 LSTM, "
              f"V = 5001): baseline {timings['baseline']:.2f} s, prefilter {timings['prefilter']:.2f} s, "
              f"{timings['baseline'] / timings['prefilter']:.1f}x")

    result = {
        "benchmark": "top-k / nucleus sampling: topk prefilters + race over candidates vs full-vocabulary mask + race",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "code_version": short_version(provenance),
        "torch": torch.__version__,
        "python": provenance["python"],
        "threads": torch.get_num_threads(),
        "load_average_1min_at_end": load_average(digits=2),
        "device": provenance["device"],
        "rows": "Zipf laws p_r ~ r^-s, s ~ U[0.8, 1.4] per row, random id order",
        "per_step": per_step,
        "end_to_end": end_to_end,
        "quick": args.quick,
        KEY: provenance,
    }
    if args.output is not None:
        write_json(args.output, result)


if __name__ == "__main__":
    main()
