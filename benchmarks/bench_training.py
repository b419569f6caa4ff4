"""Training throughput of the WikiText-2 language models with every output layer of the book
(vanilla, ST, NMST, and the sparse entmax / NMST-entmax at alpha 1.5, entmax also at alpha 1.2),
relative to the vanilla softmax (target for ST / NMST: >= 0.9x), and against the machine's
measured matmul FLOP/s ceiling (Chapters 6 and 8); and alpha = 1.2 entmax against alpha = 1.5
(target <= 1.5x), with the alpha = 1.2 threshold also as it was before issue 25's dense layout
(``entmax1.2_before``, swapped in for its timing only); and alpha = 1.5 entmax with its threshold's
CPU sort (NumPy's) against ``torch.sort`` (``entmax1.5_torch_sort``), the sort it replaced.

Run by hand. It is slow: the stored run (3 rounds, one thread of a loaded
2-core CPU) spent about 9 minutes a round, nearly nine tenths of it in the
five entmax variants; the default is 5 rounds (``--rounds``).

    .venv/bin/python benchmarks/bench_training.py            # LSTM 2 x 256, vocabulary 10k
    .venv/bin/python benchmarks/bench_training.py --arch rnn --hidden 128 --vocab 5000

Each round trains a few identical batches with every head in turn (same model weights, same
batches, interleaved so that machine noise hits all heads alike); the median over rounds is
reported. Writes ``benchmarks/results/training.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _provenance import KEY, stamp  # noqa: E402
from _timing import load_average, synchronize, timed, write_json  # noqa: E402

from nmst_lib import data as D  # noqa: E402
from nmst_lib import entmax as E  # noqa: E402
from nmst_lib.heads import head_from_name  # noqa: E402
from nmst_lib.models import build_model  # noqa: E402

# (key, head name, eps, alpha): every output layer of the book, the entmax ones at two alphas
HEADS = (("va", "va", None, None), ("st", "st", 1e-4, None), ("nmst", "nmst", 1e-4, None),
         ("entmax1.5", "entmax", None, 1.5), ("nmst-entmax1.5", "nmst-entmax", 1e-4, 1.5),
         ("entmax1.2", "entmax", None, 1.2), ("entmax1.2_before", "entmax", None, 1.2),
         ("entmax1.5_torch_sort", "entmax", None, 1.5))


@contextlib.contextmanager
def ragged_threshold():
    """nmst_lib.entmax with every row's candidates in the ragged layout and ``pow`` for powers
    (the code before the dense layout and ``_power``), for the timing only."""
    saved = E._DENSE_CANDIDATE_FRACTION, E._power
    E._DENSE_CANDIDATE_FRACTION, E._power = float("inf"), lambda u, e: u.pow(e)
    try:
        yield
    finally:
        E._DENSE_CANDIDATE_FRACTION, E._power = saved


@contextlib.contextmanager
def torch_sort():
    """nmst_lib.entmax's sort-based thresholds (alpha 1.5 and 2) with ``torch.sort`` in place of
    the NumPy sort they use on a CPU (the code before), for the timing only."""
    saved = E._sort_descending
    E._sort_descending = lambda X, dim: torch.sort(X, dim=dim, descending=True).values
    try:
        yield
    finally:
        E._sort_descending = saved


BEFORE = {"entmax1.2_before": ragged_threshold, "entmax1.5_torch_sort": torch_sort}
"""Variants timed with a part of the entmax code as it was before (the alpha = 1.2 threshold
before issue 25's dense layout and whole powers; the alpha = 1.5 threshold with ``torch.sort``),
so that before and after come from one run."""


def _best_matmul_flops(a: torch.Tensor, b: torch.Tensor, repeats: int) -> float:
    """Best FLOP/s of ``a @ b`` over ``repeats`` timed runs."""
    flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
    best = 0.0
    for _ in range(repeats):
        best = max(best, flops / timed(lambda: a @ b, a.device)[1])
    return best


def matmul_ceiling(device, n: int = 1024, repeats: int = 10) -> float:
    """Best float32 FLOP/s of an n x n x n matrix multiply on ``device``."""
    return _best_matmul_flops(torch.randn(n, n, device=device), torch.randn(n, n, device=device), repeats)


def output_layer_ceiling(device, rows: int, hidden: int, vocab: int, repeats: int = 5) -> float:
    """Best FLOP/s of the output projection's shape, [rows, hidden] @ [hidden, vocab]."""
    return _best_matmul_flops(torch.randn(rows, hidden, device=device), torch.randn(hidden, vocab, device=device),
                              repeats)


def flops_per_position(arch: str, hidden: int, layers: int, vocab: int) -> float:
    """Forward FLOPs per input position: recurrent matmuls (input + hidden, 4 gates for an LSTM)
    and the output projection; training counts 3x (forward + backward)."""
    gates = 4 if arch == "lstm" else 1
    return layers * gates * 2 * (2 * hidden * hidden) + 2 * hidden * vocab


def synthetic_batches(vocab_size: int, n_batches: int, batch_size: int, seed: int = 0):
    """Batches with WikiText-2-like line lengths (from the local validation split named by
    $NMST_WIKITEXT_DIR / $NMST_DATA_DIR when present, else 11-200 tokens), random token ids, eos last."""
    g = torch.Generator().manual_seed(seed)
    lengths = None
    folder = D.wikitext_dir()
    path = folder / "valid.txt" if folder is not None else None
    if path is not None and path.is_file():
        lens = [len(line.split()) for line in path.read_text(encoding="utf-8").splitlines()]
        lengths = torch.tensor([n + 1 for n in lens if n > D.CONTEXT_LEN])
    if lengths is None or lengths.numel() == 0:
        lengths = torch.randint(12, 201, (2000,), generator=g)
    pick = lengths[torch.randint(0, lengths.numel(), (n_batches * batch_size,), generator=g)]
    tokens = torch.randint(0, vocab_size - 3, (int(pick.sum()),), generator=g)
    ends = torch.cumsum(pick, 0) - 1
    tokens[ends] = vocab_size - 1
    itos = [f"w{i}" for i in range(vocab_size - 3)] + [D.UNK, D.PAD, D.EOS]
    seqs = D.SequenceData(tokens, pick, D.CONTEXT_LEN, D.Vocabulary(itos))
    return [D.make_batch(seqs, b) for b in D.bucket_batches(seqs.lengths, batch_size)]


def train_steps(model, optimizer, batches, device) -> tuple[float, int, int]:
    """Seconds, scored tokens and processed positions of one pass over ``batches``."""
    model.train()
    scored = positions = 0
    synchronize(device)
    t = time.perf_counter()
    for batch in batches:
        batch = batch.to(device)
        loss = model.loss(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scored += batch.num_target_tokens
        positions += batch.inputs.numel()
    synchronize(device)
    return time.perf_counter() - t, scored, positions


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", choices=("rnn", "lstm"), default="lstm")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=4, help="batches per head per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "training.json"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    provenance = stamp(device, script=__file__, argv=argv)

    batches = synthetic_batches(args.vocab, args.batches, args.batch_size)
    models, optims = {}, {}
    for name, head, eps, alpha in HEADS:
        torch.manual_seed(0)
        models[name] = build_model(args.arch, args.vocab, hidden=args.hidden, layers=args.layers, dropout=0.3,
                                   head=head_from_name(head, eps, alpha=alpha)).to(device)
        optims[name] = torch.optim.AdamW(models[name].parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.01)
    def timed(name, some_batches):
        with BEFORE[name]() if name in BEFORE else contextlib.nullcontext():
            return train_steps(models[name], optims[name], some_batches, device)

    for name, *_ in HEADS:  # warm-up
        timed(name, batches[:1])
    times = {name: [] for name, *_ in HEADS}
    scored = positions = 0
    for _ in range(args.rounds):
        for name, *_ in HEADS:
            seconds, scored, positions = timed(name, batches)
            times[name].append(seconds)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    tokens_per_s = {name: scored / s for name, s in median.items()}
    train_flops = 3 * positions * flops_per_position(args.arch, args.hidden, args.layers, args.vocab)
    flops_per_s = {name: train_flops / s for name, s in median.items()}
    ceiling = matmul_ceiling(device)
    out_ceiling = output_layer_ceiling(device, args.batch_size * 64, args.hidden, args.vocab)
    result = {
        "benchmark": "training throughput by output layer",
        "setup": {"arch": args.arch, "hidden": args.hidden, "layers": args.layers, "vocab": args.vocab,
                  "batch_size": args.batch_size, "batches_per_round": len(batches), "rounds": args.rounds,
                  "scored_tokens_per_round": scored, "positions_per_round": positions,
                  "heads": {key: {"head": h, "eps": e, "alpha": a} for key, h, e, a in HEADS}},
        "median_seconds_per_round": median,
        "scored_tokens_per_s": tokens_per_s,
        "ratio_to_vanilla": {name: tokens_per_s[name] / tokens_per_s["va"] for name in tokens_per_s},
        "target_ratio": 0.9,
        "entmax_alpha1.2_over_alpha1.5": {name: median[name] / median["entmax1.5"]
                                          for name in ("entmax1.2", "entmax1.2_before")},
        "entmax_alpha_target": 1.5,
        "entmax1.5_speedup_of_cpu_sort": median["entmax1.5_torch_sort"] / median["entmax1.5"],
        "model_flops_per_s": flops_per_s,
        "matmul_ceiling_flops_per_s": {"square_1024": ceiling, "output_layer_shape": out_ceiling},
        "fraction_of_matmul_ceiling": {name: f / ceiling for name, f in flops_per_s.items()},
        "machine": {"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
                    "load_average_1min_at_end": load_average(),
                    "platform": platform.platform(terse=True), "processor": platform.processor() or platform.machine()},
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "note": "Ratios are what matters; absolute numbers depend on the machine and its load.",
        KEY: provenance,
    }
    for name in tokens_per_s:
        print(f"{name:14s} {tokens_per_s[name]:9.0f} scored tok/s  x{result['ratio_to_vanilla'][name]:.3f} of VA  "
              f"{flops_per_s[name] / 1e9:6.1f} GFLOP/s = {result['fraction_of_matmul_ceiling'][name]:.0%} of "
              f"matmul ceiling {ceiling / 1e9:.1f} GFLOP/s")
    print("alpha = 1.2 entmax against alpha = 1.5 (seconds per round; target <= 1.5): "
          + ", ".join(f"{k} {v:.2f}x" for k, v in result["entmax_alpha1.2_over_alpha1.5"].items()))
    print(f"alpha = 1.5 entmax training with the CPU sort: {result['entmax1.5_speedup_of_cpu_sort']:.2f}x "
          "the speed with torch.sort")
    write_json(args.out, result, indent=1)
    return result


if __name__ == "__main__":
    main()
