"""Cost of the contextual-temperature output layer (Chapter 9, 09_temperature): training and greedy
decoding throughput of CT-LSTM and CT-MoS relative to the plain LSTM, measured in the same run.

Run by hand (about two minutes on one CPU thread):

    .venv/bin/python benchmarks/bench_temperature.py --threads 1

Models at the cpu profile's sizes (Chapter 6's LSTM: 2 x 128, vocabulary 5,001 with eos last,
dropout 0.3, batch 16): the plain LSTM with the vanilla softmax, CT-LSTM (the sigmoid
normalisation of Contextual Temperature (2020) eq. 5, (a, b) = (1, 1/2), rank Q = 64, loss
scaling of Sec. 3.3) and CT-MoS (the same temperature shared by M = 3 softmaxes, eq. 6).
Training: AdamW steps (forward, loss, backward, clipping, update) on the same batches with
WikiText-2-like line lengths (:func:`bench_training.synthetic_batches`). Decoding:
``nmst_lib.decoding.decode(..., "greedy")`` of the same contexts for a fixed number of steps
(eos is made unreachable so that every row runs to ``max_len``). The models take turns inside
each round (interleaved, after a warm-up), and the medians over rounds are compared: the
script prints and stores ``throughput(model) / throughput(LSTM)`` (of the medians, and of the
minima, which suffer less from other processes on a shared machine) in
``benchmarks/results/temperature.json`` with the torch version, thread count, device, load
average, code version and date.

Expected costs per position: the output projection is ``H V`` multiply-adds; the temperature
adds ``Q (H + V)`` (about half of it for Q = H/2) plus a few element-wise passes over ``V``;
a mixture of M softmaxes multiplies the projection and the softmax by M.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _provenance import KEY, short_version, stamp  # noqa: E402
from _timing import (  # noqa: E402
    load_average,
    machine_and_run,
    note_if_busy,
    timed,
    write_json,
)
from bench_training import synthetic_batches, train_steps  # noqa: E402

from nmst_lib import data as D  # noqa: E402
from nmst_lib.decoding import decode  # noqa: E402
from nmst_lib.heads import VanillaHead  # noqa: E402
from nmst_lib.models import LSTMLM  # noqa: E402
from nmst_lib.temperature import contextual_head  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "temperature.json"
MODELS = ("lstm", "ct-lstm", "ct-mos3")


def build(name: str, vocab: int, hidden: int, layers: int, rank: int) -> LSTMLM:
    """The plain LSTM, CT-LSTM (sigmoid, a = 1, b = 1/2, loss scaling) or CT-MoS (M = 3)."""
    torch.manual_seed(0)
    if name == "lstm":
        head = VanillaHead()
    else:
        head = contextual_head(VanillaHead(), hidden, vocab, normalisation="sigmoid", rank=rank,
                               mixtures=3 if name == "ct-mos3" else 1, loss_scaling=True)
    return LSTMLM(vocab, hidden=hidden, layers=layers, dropout=0.3, head=head)


def decode_seconds(model, contexts: torch.Tensor, max_len: int, device) -> float:
    """Seconds for one greedy decode of ``contexts`` to ``max_len`` tokens."""
    model.eval()
    g, seconds = timed(lambda: decode(model, contexts, "greedy", max_len=max_len), device)
    if int(g.lengths.min()) != max_len:
        raise RuntimeError("a row stopped early: the decoding timings would not be comparable")
    return seconds


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=5001)
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=3, help="training batches per model per round")
    parser.add_argument("--contexts", type=int, default=128, help="greedy decoding: contexts per decode")
    parser.add_argument("--decode-len", type=int, default=100, help="greedy decoding: tokens per row")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    provenance = stamp(device, script=__file__, argv=argv)

    batches = synthetic_batches(args.vocab, args.batches, args.batch_size)
    contexts = torch.randint(0, args.vocab - 3, (args.contexts, D.CONTEXT_LEN),
                             generator=torch.Generator().manual_seed(1))
    models, optims = {}, {}
    for name in MODELS:
        model = build(name, args.vocab, args.hidden, args.layers, args.rank).to(device)
        with torch.no_grad():
            model.output.bias[model.eos_id] = -1e4  # eos unreachable: every row decodes max_len tokens
        models[name] = model
        optims[name] = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0)
    params = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    for name in MODELS:  # warm-up
        train_steps(models[name], optims[name], batches[:1], device)
        decode_seconds(models[name], contexts, 5, device)
    train_times = {name: [] for name in MODELS}
    decode_times = {name: [] for name in MODELS}
    scored = positions = 0
    start = time.perf_counter()
    for _ in range(args.rounds):  # interleaved: load from other processes hits every model alike
        for name in MODELS:
            seconds, scored, positions = train_steps(models[name], optims[name], batches, device)
            train_times[name].append(seconds)
        for name in MODELS:
            decode_times[name].append(decode_seconds(models[name], contexts, args.decode_len, device))
    wall = time.perf_counter() - start

    def summary(times: dict, work: int) -> dict:
        med = {n: statistics.median(ts) for n, ts in times.items()}
        low = {n: min(ts) for n, ts in times.items()}
        return {
            "median_seconds": med,
            "min_seconds": low,
            "all_seconds": times,
            "per_second_median": {n: work / s for n, s in med.items()},
            "throughput_ratio_to_lstm": {n: med["lstm"] / med[n] for n in med},
            "throughput_ratio_to_lstm_of_minima": {n: low["lstm"] / low[n] for n in low},
        }

    training = summary(train_times, scored)
    decoding = summary(decode_times, args.contexts * args.decode_len)
    load = load_average()
    result = {
        "benchmark": "contextual temperature: training and greedy decoding throughput relative to the plain LSTM",
        "setup": {"arch": "lstm", "hidden": args.hidden, "layers": args.layers, "vocab": args.vocab,
                  "dropout": 0.3, "rank": args.rank, "normalisation": "sigmoid", "a": 1.0, "b": 0.5,
                  "loss_scaling": True, "mixtures": {"lstm": 1, "ct-lstm": 1, "ct-mos3": 3},
                  "parameters": params, "batch_size": args.batch_size, "batches_per_round": len(batches),
                  "scored_tokens_per_round": scored, "positions_per_round": positions,
                  "decode_contexts": args.contexts, "decode_len": args.decode_len,
                  "decode_tokens_per_round": args.contexts * args.decode_len, "rounds": args.rounds,
                  "optimizer": "AdamW lr 1e-3, gradient clipping 1.0"},
        "training": training,
        "training_unit": "scored tokens per second",
        "greedy_decoding": decoding,
        "greedy_decoding_unit": "generated tokens per second",
        "timed_wall_seconds": wall,
        **machine_and_run(device, short_version(provenance), argv, load),
        "note": "Ratios are what matters (same batches, same contexts, models interleaved within each round); "
                "absolute numbers depend on the machine and its load.",
        KEY: provenance,
    }
    for what, res, unit in (("train", training, "scored tok/s"), ("greedy", decoding, "gen tok/s")):
        for name in MODELS:
            print(f"{what:6s} {name:8s} {res['per_second_median'][name]:9.0f} {unit}  "
                  f"x{res['throughput_ratio_to_lstm'][name]:.3f} of LSTM "
                  f"(of minima x{res['throughput_ratio_to_lstm_of_minima'][name]:.3f})")
    note_if_busy(load, device)
    write_json(args.out, result, indent=1)
    return result


if __name__ == "__main__":
    main()
