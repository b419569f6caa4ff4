"""Training step time of CT-MoS with saturated sigmoid temperatures, with subnormal numbers
flushed to zero (what :func:`nmst_lib.experiments.trainer.train` does during its epochs,
:func:`nmst_lib.experiments.model_setup.subnormals_flushed`) against without, measured in the
same run (Chapter 9, 09_temperature).

Run by hand (about three minutes on one CPU thread):

    .venv/bin/python benchmarks/bench_subnormals.py --threads 1

Why: the literal loss scaling of Contextual Temperature (2020) eq. 7 drives every sigmoid
temperature to its floor a / b, with the temperature layer's scores ``mu`` far below zero
(between about -100 and -40 in the book's trained CT-MoS); ``sigmoid'(mu)`` times the gradient
that reaches it is then below float32's smallest normal number (1.18e-38), and x86 arithmetic on
such subnormal numbers takes a slow path. The model here is Chapter 9's cpu CT-MoS (LSTM 2 x 128,
vocabulary 4,000 with eos last, M = 3, sigmoid (a, b) = (1, 1/2), rank 64, the literal eq. 7; ``bench_temperature.build("ct-mos3", ...)``),
saturated (:func:`saturate`) so that its scores lie about where the trained model's did (its
10, 50 and 90 % quantiles were -87, -68 and -48; ``--mu-mean`` -68 by default), and the same
model unsaturated (its initialisation) as a control. Each of the four (saturated or not, flushed or not) trains on the
same WikiText-2-like batches (:func:`bench_training.synthetic_batches`) from the same weights, in
turn within each round; the medians over rounds are compared. The script also reports the share
of subnormal entries in the gradient of ``W2``'s output (``mu``), where they arise, and the
ratio ``time(not flushed) / time(flushed)`` of each model. Writes
``benchmarks/results/subnormals.json`` with the torch version, thread count, device, load average,
code version and date. On CUDA the flag does nothing (the ratios are about 1).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _provenance import KEY, short_version, stamp  # noqa: E402
from _timing import load_average, machine_and_run, note_if_busy, write_json  # noqa: E402
from bench_temperature import build as build_temperature_model  # noqa: E402
from bench_training import synthetic_batches, train_steps  # noqa: E402

from nmst_lib.experiments.model_setup import (  # noqa: E402
    subnormals_are_flushed,
    subnormals_flushed,
)
from nmst_lib.models import LSTMLM  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "subnormals.json"
TINY = torch.finfo(torch.float32).tiny


def scores_and_their_gradient(model: LSTMLM, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """``mu`` (the output of the temperature layer's ``W2``) on ``batch`` and the loss's gradient
    with respect to it, subnormals not flushed (one forward and backward, no update)."""
    seen = {}

    def keep(module, inputs, output):
        output.retain_grad()
        seen["mu"] = output

    hook = model.head.temperature.W2.register_forward_hook(keep)
    try:
        model.train()
        torch.manual_seed(1)
        model.zero_grad(set_to_none=True)
        model.loss(batch).backward()
    finally:
        hook.remove()
    model.zero_grad(set_to_none=True)
    return seen["mu"].detach(), seen["mu"].grad


HELD_UNITS = 8
"""Hidden units of the last LSTM layer that :func:`saturate` holds near +1."""


def saturate(model: LSTMLM, batch, mu_mean: float, mu_noise: float) -> None:
    """Put the temperature layer where the literal eq. 7 leaves it: scores ``mu`` far below zero
    on ``batch``. The last LSTM layer's first :data:`HELD_UNITS` hidden units are held near +1
    (their four gate biases at +20); the first row of ``W1`` sums them; ``W2`` (zero at
    initialisation, every temperature mid-range) is drawn from a standard normal, its first
    column scaled so that the scores' mean in training mode is ``mu_mean`` (dropout, which keeps
    each held unit with probability 0.7, spreads them by about a quarter of it, as in the trained
    model) and the other columns so that they add a spread ``mu_noise``."""
    rnn, hidden = model.rnn, model.rnn.hidden_size
    last = rnn.num_layers - 1
    held = torch.arange(HELD_UNITS)
    with torch.no_grad():
        bias = getattr(rnn, f"bias_ih_l{last}")
        for gate in range(4):  # input, forget, cell and output gates
            bias[gate * hidden + held] = 20.0
        w1, w2 = model.head.temperature.W1.weight, model.head.temperature.W2.weight
        w2.copy_(torch.randn(w2.shape, generator=torch.Generator().manual_seed(3)))
        w1[0].zero_()
        w1[0, held] = 1.0
    seen = {}
    hook = model.head.temperature.W2.register_forward_hook(lambda m, inputs, out: seen.update(z=inputs[0]))
    try:
        model.train()
        torch.manual_seed(1)
        with torch.no_grad():
            model.loss(batch)
    finally:
        hook.remove()
    z = seen["z"].reshape(-1, seen["z"].shape[-1])
    with torch.no_grad():
        w2[:, 0] = mu_mean / float(z[:, 0].mean())
        rest = z[:, 1:] @ w2[:, 1:].T
        w2[:, 1:] *= mu_noise / float(rest.std())


def subnormal_share(grad: torch.Tensor) -> float:
    """The share of entries of ``grad`` that are subnormal (nonzero, below ``tiny``)."""
    size = grad.abs()
    return float(((size > 0) & (size < TINY)).float().mean())


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=2, help="training batches per model per round")
    parser.add_argument("--mu-mean", type=float, default=-68.0, help="mean of the saturated scores")
    parser.add_argument("--mu-noise", type=float, default=5.0, help="spread the other columns of W2 add")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    provenance = stamp(device, script=__file__, argv=argv)
    if subnormals_are_flushed():
        raise RuntimeError("subnormals are already flushed in this process: the unflushed timings would not be")

    batches = synthetic_batches(args.vocab, args.batches, args.batch_size)
    base = build_temperature_model("ct-mos3", args.vocab, args.hidden, args.layers, args.rank)
    saturated = copy.deepcopy(base)
    saturate(saturated, batches[0], args.mu_mean, args.mu_noise)
    mu, grad = scores_and_their_gradient(saturated, batches[0])
    shares = {"saturated": subnormal_share(grad), "initial": subnormal_share(scores_and_their_gradient(base, batches[0])[1])}
    quantiles = [float(q) for q in torch.quantile(mu.flatten()[:1_000_000], torch.tensor([0.1, 0.5, 0.9]))]
    states = {"saturated": saturated.state_dict(), "initial": base.state_dict()}
    cases = [(model, flush) for model in states for flush in (False, True)]
    name = lambda case: f"{case[0]}, {'flushed' if case[1] else 'not flushed'}"

    def run(case) -> float:
        model = build_temperature_model("ct-mos3", args.vocab, args.hidden, args.layers, args.rank).to(device)
        model.load_state_dict(states[case[0]])  # every pass starts from the same weights
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0)
        torch.manual_seed(2)
        if case[1]:
            with subnormals_flushed():
                return train_steps(model, optimizer, batches, device)[0]
        return train_steps(model, optimizer, batches, device)[0]

    for case in cases:  # warm-up
        run(case)
    times = {name(c): [] for c in cases}
    start = time.perf_counter()
    for _ in range(args.rounds):  # interleaved: load from other processes hits every case alike
        for case in cases:
            times[name(case)].append(run(case))
    wall = time.perf_counter() - start
    med = {n: statistics.median(ts) for n, ts in times.items()}
    low = {n: min(ts) for n, ts in times.items()}
    ratio = {m: med[f"{m}, not flushed"] / med[f"{m}, flushed"] for m in states}
    ratio_min = {m: low[f"{m}, not flushed"] / low[f"{m}, flushed"] for m in states}
    load = load_average()
    result = {
        "benchmark": "CT-MoS training steps with saturated sigmoid temperatures: subnormals flushed against not",
        "setup": {"arch": "lstm", "hidden": args.hidden, "layers": args.layers, "vocab": args.vocab,
                  "dropout": 0.3, "rank": args.rank, "mixtures": 3, "normalisation": "sigmoid", "a": 1.0,
                  "b": 0.5, "loss_scaling": "literal eq. 7 (not detached)", "batch_size": args.batch_size,
                  "batches_per_round": len(batches), "rounds": args.rounds, "mu_mean": args.mu_mean, "mu_noise": args.mu_noise,
                  "saturated_mu_quantiles_10_50_90": quantiles,
                  "optimizer": "AdamW lr 1e-3, gradient clipping 1.0"},
        "subnormal_share_of_mu_gradient": shares,
        "median_seconds": med,
        "min_seconds": low,
        "all_seconds": times,
        "slowdown_without_flushing": ratio,
        "slowdown_without_flushing_of_minima": ratio_min,
        "timed_wall_seconds": wall,
        **machine_and_run(device, short_version(provenance), argv, load),
        "note": "Ratios are what matters (same batches, same weights, cases interleaved within each round); "
                "absolute numbers depend on the machine and its load.",
        KEY: provenance,
    }
    print(f"scores of the saturated model: 10/50/90 % quantiles {', '.join(f'{q:.0f}' for q in quantiles)}; "
          f"subnormal share of their gradient {shares['saturated']:.1%} (initial model {shares['initial']:.1%})")
    for m in states:
        print(f"{m:9s} not flushed {med[f'{m}, not flushed']:.3f} s, flushed {med[f'{m}, flushed']:.3f} s: "
              f"x{ratio[m]:.2f} slower unflushed (of minima x{ratio_min[m]:.2f})")
    note_if_busy(load, device)
    write_json(args.out, result, indent=1)
    return result


if __name__ == "__main__":
    main()
