"""Benchmark: greedy decoding with early exit vs the papers' fixed-length loop.

Run by hand from the project root::

    .venv/bin/python benchmarks/bench_decoding.py                  # the real benchmark
    .venv/bin/python benchmarks/bench_decoding.py --baseline-steps 0   # full-length baseline
    .venv/bin/python benchmarks/bench_decoding.py --quick          # seconds-long smoke run
    .venv/bin/python benchmarks/bench_decoding.py --threads 1      # on a shared, busy CPU

Model: a randomly initialised 2-layer LSTM language model (hidden 512, vocabulary 33,278:
``nn.Embedding`` + ``nn.LSTM`` + ``nn.Linear``, the paper's WikiText-2 size), wrapped in a
small adapter that follows the decoding protocol of ARCHITECTURE.md. The adapter forces the eos
logit so that the workload is known in advance: rows whose context starts with a token in
the lower half of the vocabulary (90% of the 512 rows) emit eos at a row-specific step in
[1, 99]; the other 10% never can (eos logit -inf). The forcing depends only on the state
(step counter and stop step travel with the LSTM state), so ``select`` keeps it right.

Compared (same model, same contexts, greedy, L = 2,000 tokens):

* the workload's row-step limit: rows x L row-steps against the sum of the rows' lengths,
  what early exit would gain if a step cost the same per row at every batch size;
* the model-bound limit: the fixed-length time against the model's own steps on the same
  shrinking batch with the rows dropped on a schedule known in advance
  (``scheduled_early_exit``), which no decoder can beat; the difference between the two
  limits is what the model's step costs per row at a small batch more than at a full one;

* ``nmst_lib.decoding.decode``: finished rows leave the working batch, decoding stops when
  every row has finished;
* the fixed-length loop of the papers' reference code: every row for all L steps.

The fixed-length loop costs the same at every step (fixed batch, data-independent work), so
by default it runs for ``--baseline-steps`` steps and its total is extrapolated linearly
from the per-step slope measured over the second half of that window; the output says so.
``--baseline-steps 0`` runs it in full. Results go to ``benchmarks/results/decoding.json``.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import sys
import time

import torch
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _provenance import KEY, short_version, stamp  # noqa: E402
from _timing import load_average, synchronize, timed, write_json  # noqa: E402

from nmst_lib.decoding import decode  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "decoding.json"


class ForcedStopLSTM(nn.Module):
    """Random 2-layer LSTM LM under the decoding protocol, with eos forced by a schedule.

    State: ``(h, c, t, stop_at)`` where ``t`` is the step of the next prediction (t = 1 is the
    first continuation token) and ``stop_at`` the step at which the row must emit eos
    (-1: never). Before ``stop_at`` and for never-stopping rows the eos logit is -inf.
    """

    def __init__(self, vocab_size: int, hidden: int, num_layers: int = 2):
        super().__init__()
        self.vocab_size, self.eos_id = vocab_size, vocab_size - 1
        self.embedding = nn.Embedding(vocab_size, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers, batch_first=True)
        self.output = nn.Linear(hidden, vocab_size)

    def stop_steps(self, contexts: torch.Tensor) -> torch.Tensor:
        """Rows whose first context token is in the lower half stop at step 1 + (2nd token mod 99)."""
        stops = contexts[:, 0] < (self.vocab_size - 1) // 2
        return torch.where(stops, 1 + contexts[:, 1] % 99, torch.full_like(contexts[:, 0], -1))

    def _log_probs(self, hidden_out, t, stop_at):
        logits = self.output(hidden_out)
        forced = (stop_at > 0) & (t >= stop_at)
        eos_logit = torch.where(forced, torch.tensor(1e4, device=logits.device), torch.tensor(-torch.inf, device=logits.device))
        logits[:, self.eos_id] = eos_logit
        return torch.log_softmax(logits, dim=-1)

    @torch.no_grad()
    def initial_state(self, contexts):
        contexts = contexts.to(self.output.weight.device)
        out, (h, c) = self.lstm(self.embedding(contexts))
        t = torch.ones(contexts.shape[0], dtype=torch.long, device=contexts.device)
        stop_at = self.stop_steps(contexts)
        return (h, c, t, stop_at), self._log_probs(out[:, -1], t, stop_at)

    @torch.no_grad()
    def step(self, state, tokens):
        h, c, t, stop_at = state
        out, (h, c) = self.lstm(self.embedding(tokens[:, None]), (h, c))
        t = t + 1
        return (h, c, t, stop_at), self._log_probs(out[:, 0], t, stop_at)

    def select(self, state, index):
        h, c, t, stop_at = state
        return h[:, index], c[:, index], t[index], stop_at[index]


def make_contexts(rows: int, vocab_size: int, context_len: int, stop_fraction: float, generator) -> torch.Tensor:
    """Random contexts; the first ``round(stop_fraction * rows)`` start in the lower half of the vocabulary."""
    half = (vocab_size - 1) // 2
    contexts = torch.randint(0, vocab_size - 1, (rows, context_len), generator=generator)
    n_stop = round(stop_fraction * rows)
    contexts[:n_stop, 0] = torch.randint(0, half, (n_stop,), generator=generator)
    contexts[n_stop:, 0] = torch.randint(half, vocab_size - 1, (rows - n_stop,), generator=generator)
    return contexts


@torch.no_grad()
def fixed_length_greedy(model, contexts, steps: int, device):
    """The papers' reference loop: argmax for every row at every step, no early exit.

    Returns the tokens and the elapsed time after each step (for the extrapolation).
    """
    synchronize(device)
    start = time.perf_counter()
    state, log_probs = model.initial_state(contexts)
    tokens = torch.empty((contexts.shape[0], steps), dtype=torch.long, device=log_probs.device)
    elapsed = []
    for t in range(steps):
        tokens[:, t] = log_probs.argmax(dim=-1)
        if t + 1 < steps:
            state, log_probs = model.step(state, tokens[:, t])
        synchronize(device)
        elapsed.append(time.perf_counter() - start)
    return tokens.cpu(), elapsed


@torch.no_grad()
def scheduled_early_exit(model, contexts, lengths: torch.Tensor, max_len: int, device):
    """The model's own share of early exit: the same steps on the same shrinking batch, with
    the rows dropped on a schedule known in advance (``lengths``), so nothing but
    ``model.step``, the argmax that feeds it and ``model.select`` runs. ``decode`` can at
    best match this time; the gap between this loop's ratio and the row-step limit is what
    a step of the model costs per row at a small batch more than at a large one."""
    order = torch.argsort(lengths, stable=True)
    sorted_lengths = lengths[order]
    contexts = contexts[order.to(contexts.device)]
    synchronize(device)
    start = time.perf_counter()
    state, log_probs = model.initial_state(contexts)
    first_alive = 0  # rows first_alive.. are alive (sorted by length)
    for t in range(max_len):
        next_tokens = log_probs.argmax(dim=-1)
        done = int(torch.searchsorted(sorted_lengths, torch.tensor(t + 1), right=True))
        if done > first_alive:
            keep = torch.arange(done - first_alive, sorted_lengths.numel() - first_alive, device=next_tokens.device)
            if keep.numel() == 0:
                break
            state, next_tokens = model.select(state, keep), next_tokens[keep]
            first_alive = done
        if t + 1 == max_len:
            break
        state, log_probs = model.step(state, next_tokens)
    synchronize(device)
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--max-len", type=int, default=2000)
    parser.add_argument("--vocab-size", type=int, default=33_278)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--baseline-steps", type=int, default=200,
                        help="steps of the fixed-length loop to time before extrapolating; 0 = all max_len steps")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads (0 = torch's default); on a shared, loaded machine 1 avoids "
                             "waiting on descheduled threads, which penalises small batches most")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for checking that the script runs")
    parser.add_argument("--profile-steps", type=int, default=0,
                        help="also profile (torch.profiler) an early-exit decode of this many steps and "
                             "store its top operators in the JSON: what bounds the early-exit time")
    parser.add_argument("--output", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.max_len, args.vocab_size, args.hidden, args.baseline_steps = 64, 300, 1000, 64, 0

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    provenance = stamp(device, script=__file__, argv=argv)
    torch.manual_seed(0)
    model = ForcedStopLSTM(args.vocab_size, args.hidden).to(device).eval()
    contexts = make_contexts(args.rows, args.vocab_size, 10, 0.9, torch.Generator().manual_seed(0)).to(device)
    stop_at = model.stop_steps(contexts).cpu()
    expected_lengths = torch.where(stop_at > 0, stop_at, torch.full_like(stop_at, args.max_len))

    # the workload's own limit: the fixed-length loop does rows * L row-steps, early exit only
    # sum(lengths); with a cost per row-step independent of the batch size the ratio is their quotient
    row_steps_early_exit = int(expected_lengths.sum())
    row_step_limit = args.rows * args.max_len / row_steps_early_exit
    baseline_steps = args.max_len if args.baseline_steps <= 0 else min(args.baseline_steps, args.max_len)
    extrapolated = baseline_steps < args.max_len
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{args.rows} rows, L = {args.max_len}, vocabulary {args.vocab_size}, hidden {args.hidden}; "
          f"{int((stop_at > 0).sum())} rows stop within 100 steps")

    decode(model, contexts[:8], "greedy", max_len=5)  # warm-up (allocations, kernels)
    gen, early_exit_s = timed(lambda: decode(model, contexts, "greedy", max_len=args.max_len), device)
    assert torch.equal(gen.lengths, expected_lengths), "the forcing schedule did not produce the planned lengths"
    assert torch.equal(gen.terminated, stop_at > 0)
    print(f"early-exit decode: {early_exit_s:.2f} s")

    model_only_s = scheduled_early_exit(model, contexts, expected_lengths, args.max_len, device)
    print(f"the model's share (the same shrinking batch on a known schedule): {model_only_s:.2f} s")

    baseline_tokens, elapsed = fixed_length_greedy(model, contexts, baseline_steps, device)
    if extrapolated:
        half = baseline_steps // 2
        per_step = (elapsed[-1] - elapsed[half - 1]) / (baseline_steps - half)
        fixed_length_s = elapsed[-1] + (args.max_len - baseline_steps) * per_step
        how = (f"EXTRAPOLATED: ran {baseline_steps} of {args.max_len} steps ({elapsed[-1]:.2f} s), "
               f"per-step slope {per_step * 1e3:.1f} ms over steps {half + 1}-{baseline_steps}")
    else:
        fixed_length_s = elapsed[-1]
        how = f"measured over all {args.max_len} steps"
    print(f"fixed-length loop: {fixed_length_s:.2f} s ({how})")

    # Same tokens where both ran (before each row's eos); matmuls of different batch sizes
    # may round differently, so near-ties can flip: report agreement instead of asserting it.
    window = min(baseline_steps, args.max_len)
    positions = torch.arange(window)[None, :] < gen.lengths[:, None].clamp(max=window)
    agree = (baseline_tokens[:, :window] == gen.tokens[:, :window]) | ~positions
    rows_agree = float(agree.all(dim=1).float().mean())
    ratio = fixed_length_s / early_exit_s
    model_bound = fixed_length_s / model_only_s
    print(f"speed-up of early exit: {ratio:.2f}x; the workload's row-step limit {row_step_limit:.2f}x "
          f"({ratio / row_step_limit:.0%} of it; target >= 90%); the model-bound limit (the model's "
          f"steps alone on the shrinking batch) {model_bound:.2f}x, of which decode reaches "
          f"{ratio / model_bound:.0%}; rows with identical tokens over the first {window} steps: {rows_agree:.1%}")
    profile = None
    if args.profile_steps > 0:
        with torch.profiler.profile() as prof:
            decode(model, contexts, "greedy", max_len=args.profile_steps)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
        print(table)
        profile = {"steps": args.profile_steps, "top_operators_by_self_cpu_time": table.splitlines()}

    result = {
        "benchmark": "greedy decoding, early exit + dropping finished rows vs fixed-length loop",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "code_version": short_version(provenance),
        "torch": torch.__version__,
        "python": provenance["python"],
        "threads": torch.get_num_threads(),
        "load_average_1min_at_end": load_average(digits=2),
        "device": provenance["device"],
        "model": f"random 2-layer LSTM, hidden {args.hidden}, vocabulary {args.vocab_size}",
        "rows": args.rows,
        "L": args.max_len,
        "rows_stopping_within_100_steps": int((stop_at > 0).sum()),
        "early_exit_s": early_exit_s,
        "fixed_length_s": fixed_length_s,
        "fixed_length_extrapolated": extrapolated,
        "fixed_length_steps_measured": baseline_steps,
        "fixed_length_measured_s": elapsed[-1],
        "fixed_length_note": how,
        "ratio": ratio,
        "row_steps_fixed_length": args.rows * args.max_len,
        "row_steps_early_exit": row_steps_early_exit,
        "row_step_limit": row_step_limit,
        "ratio_fraction_of_limit": ratio / row_step_limit,
        "model_only_early_exit_s": model_only_s,
        "model_bound_limit": model_bound,
        "ratio_fraction_of_model_bound": ratio / model_bound,
        "rows_with_identical_tokens": rows_agree,
        "profile": profile,
        KEY: provenance,
    }
    if not args.quick or args.output != RESULTS:
        write_json(args.output, result)
    return result


if __name__ == "__main__":
    main()
