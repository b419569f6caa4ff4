"""What a reader can do with the results a chapter shows: see where they come from
(:func:`describe_results`, any family's stored results: Chapters 6, 7 and 9 call it), retrain
them, or run the paper's settings with an estimate of the time on the current device
(:func:`estimate_profile_time`, Chapter 6's RNN/LSTM suite); :func:`run_choices` puts the three
together as Markdown for Chapter 6 (06_wikitext; and for Colab).

The time estimate is a model, not a measurement of the whole suite. Training: epochs x
(training tokens / training throughput + validation tokens / evaluation throughput), with the
epochs between the earliest early stop (``patience + 1``) and ``max_epochs``. Decoding: for
every decoder of every run, the number of batches of contexts x the steps a batch runs x the
time of one step. The throughputs are *measured* on the current device when asked (by default
on a GPU): a few training steps and decoding steps of each architecture at the profile's sizes,
on random tokens. Otherwise they are *scaled* from the committed ``cpu`` results: their
training throughput (stored ``train_seconds``) gives a rate in FLOP/s, and every other size
is converted by its floating-point operations per token (multiply-adds of the output layer,
H x V, and of the recurrent layers, 2 g H^2 per layer with g = 4 gates for an LSTM and 1 for
a tanh RNN; x 6 for a training token, x 2 for a forward one). The steps a decoding batch runs
lie between the longest continuation of the matching committed ``cpu`` run (low) and the
hardest cap the decoder has (high): ``L`` for the vanilla softmax, and for ST/NMST the
half-life step ``t_1/2`` (greedy), ``t_1/2 + B`` (beam search, Choi, Cho, Lee (2023) Thm. 3)
or ``t_1/2 + 59`` (sampling: unfinished with odds below 2^-60, Chapter 6's Proposition part 4).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..theory import first_step_eos_above_half
from .config import ExperimentConfig, parse_decoder, validate_config
from .results import (
    CURRENT,
    PUBLISHED,
    StoredResult,
    default_results_dir,
    load_result,
)

__all__ = [
    "SAMPLING_MARGIN",
    "BEAM_OVERHEAD",
    "WIKITEXT2_SIZES",
    "TimeEstimate",
    "describe_results",
    "estimate_profile_time",
    "run_choices",
    "shown_folder",
]

WIKITEXT2_SIZES = {
    "train_tokens": 2_088_628,
    "valid_tokens": 217_646,
    "vocab_size": 33_278,
    "valid_contexts": 1_777,
    "mean_line_tokens": 88,
}
"""The official WikiText-2 split as the ``paper`` profile uses it: training and validation
tokens and vocabulary size (Merity et al. (2016), Table 1); validation contexts = non-empty
validation lines with more than k = 10 tokens (counted on the real validation split: 1,777 of
2,461 lines); mean non-empty line length, 87 tokens + eos (the training batches' sequence
length, as batches are bucketed by length)."""

SAMPLING_MARGIN = 59
"""Steps past t_1/2 after which a sampling decoder on an ST/NMST model is unfinished with
probability below 2^-60 (Chapter 6, Proposition "What a finite experiment can and cannot show",
part 4)."""

BEAM_OVERHEAD = 1.5
"""Cost of one beam-search row-step relative to a greedy one: the committed ``cpu`` runs (VA,
seed 0) took 13 ms per step for beam-2 on 64 x 2 rows and 8.6 ms for greedy on 128 rows."""


def _check_stored(stored) -> list[StoredResult]:
    if isinstance(stored, StoredResult):
        stored = [stored]
    if isinstance(stored, (str, bytes)) or not isinstance(stored, Sequence):
        raise TypeError(f"stored must be a list of StoredResult (from load_result), got {type(stored).__name__}")
    stored = list(stored)
    bad = [type(s).__name__ for s in stored if not isinstance(s, StoredResult)]
    if bad:
        raise TypeError(f"stored must hold StoredResult objects (from load_result), got {sorted(set(bad))}")
    if not stored:
        raise ValueError("stored is empty: pass the results a page shows (e.g. [load_result(c) for c in configs])")
    return stored


def _hours(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _span(lo: float, hi: float) -> str:
    return _hours(lo) if _hours(lo) == _hours(hi) else f"{_hours(lo)} to {_hours(hi)}"


def shown_folder(folder) -> str:
    """How a page names a results folder without showing the machine's file system: inside the
    installed package as ``nmst_lib/published_results/<family>``, else relative to the working
    folder, else under the home folder as ``~/...``, else its last two parts after ``.../``.
    Chapters 6, 7 and 9 name their results folders with it (:func:`describe_results`)."""
    import nmst_lib

    folder = Path(folder).resolve()
    anchors = ((Path(nmst_lib.__file__).resolve().parent, "nmst_lib"), (Path.cwd().resolve(), "."),
               (Path.home().resolve(), "~"))
    for anchor, name in anchors:
        try:
            relative = folder.relative_to(anchor)
        except ValueError:
            continue
        return f"{name}/{relative.as_posix()}" if str(relative) != "." else name
    return ".../" + "/".join(folder.parts[-2:])


def describe_results(stored: Sequence[StoredResult]) -> str:
    """One Markdown paragraph saying where the results a page shows come from: the results
    published with the library (package data of ``nmst_lib`` <version>, made by the commands and
    code stamped in them) or a local folder of runs, plus profile, code, device, dates and total
    training time, all read from the results' own provenance stamps. Results that are not
    CURRENT are counted and named as not shown. Chapter 6 (06_wikitext)."""
    stored = _check_stored(stored)
    shown = [s for s in stored if s.status == CURRENT and s.data is not None]
    parts = []
    if shown:
        import nmst_lib

        profiles = sorted({s.data.get("profile", "?") for s in shown})
        prov = [s.data.get("provenance", {}) for s in shown]
        published = [s for s in shown if s.source == PUBLISHED]
        local = [s for s in shown if s.source != PUBLISHED]
        where = []
        if published:
            folder = shown_folder(published[0].path.parent)
            where.append(f"{len(published)} published with the library (package data of `nmst_lib` "
                         f"{nmst_lib.__version__}, `{folder}`)")
        if local:
            folders = sorted({shown_folder(s.path.parent) for s in local})
            where.append(f"{len(local)} from a local results folder ({', '.join(f'`{f}`' for f in folders)}): "
                         f"runs made here or copied there, not the published ones")
        shas = sorted({(p.get("git_sha") or "unknown")[:10] + (" + local changes" if p.get("git_dirty") else "")
                       for p in prov})
        devices = sorted({f"{p.get('device', '?')} ({p.get('device_name', '?')}, {p.get('threads', '?')} "
                          f"thread{'' if p.get('threads') == 1 else 's'} per run)" for p in prov})
        dates = sorted(p.get("date_utc", "")[:10] for p in prov if p.get("date_utc"))
        train = sum(p.get("train_seconds") or 0.0 for p in prov)
        when = (dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}") if dates else "an unknown date"
        parts.append(
            f"**Where these numbers come from.** {len(shown)} result{'s' if len(shown) != 1 else ''} of the "
            f"`{'`, `'.join(profiles)}` profile: {'; '.join(where)}. Code {', '.join(shas)}; "
            f"device {', '.join(devices)}; made {when}; {_hours(train)} of training in all.")
    else:
        parts.append("**No result is shown:** none of them is CURRENT.")
    not_shown = [s for s in stored if s not in shown]
    if not_shown:
        counts = {}
        for s in not_shown:
            counts[s.status.upper()] = counts.get(s.status.upper(), 0) + 1
        parts.append("Not shown (never presented as current): " +
                     ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) + ".")
    return " ".join(parts)


# ------------------------------------------------------------------------------ the estimate


@dataclass(frozen=True)
class TimeEstimate:
    """An estimate of the time a profile's suite takes on a device (see the module docstring).
    Chapter 6 (``06_wikitext``) computes one.

    Attributes:
        profile: the profile estimated (``cpu`` or ``paper``).
        device: the device, in words (e.g. ``cuda (NVIDIA T4)``).
        runs: how many configs the estimate covers.
        train_seconds: (low, high) training time of all runs, evaluation included.
        decode_seconds: (low, high) decoding time of all runs.
        method: ``"measured"`` (throughputs timed on this device) or ``"scaled"`` (from the
            committed cpu results by floating-point operations).
        derivation: plain sentences: how every number was obtained, and what it leaves out.
        per_run: config key -> (low, high) total seconds of that run.
    """

    profile: str
    device: str
    runs: int
    train_seconds: tuple[float, float]
    decode_seconds: tuple[float, float]
    method: str
    derivation: str
    per_run: dict = field(default_factory=dict)

    @property
    def total_seconds(self) -> tuple[float, float]:
        """(low, high) of training plus decoding."""
        return (self.train_seconds[0] + self.decode_seconds[0], self.train_seconds[1] + self.decode_seconds[1])

    def __str__(self) -> str:
        """The summary without its final full stop, for use inside a sentence."""
        return self.summary().rstrip(".")

    def summary(self) -> str:
        """One sentence: the total range and its two parts, marked as an estimate."""
        lo, hi = self.total_seconds
        runs = "the run" if self.runs == 1 else f"the {self.runs} runs"
        return (f"Estimate ({self.method}) for {runs} of the `{self.profile}` profile on "
                f"{self.device}: {_span(lo, hi)} (training {_span(*self.train_seconds)}, decoding "
                f"{_span(*self.decode_seconds)}).")


def _macs_per_token(arch: str, hidden: int, layers: int, vocab: int) -> float:
    gates = 4 if arch == "lstm" else 1
    return hidden * vocab + layers * gates * 2 * hidden * hidden


def _device_words(device: torch.device) -> str:
    if device.type == "cuda" and torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        n = torch.get_num_threads()
        return f"cpu ({n} thread{'' if n == 1 else 's'})"
    return device.type


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _measure(config: ExperimentConfig, vocab: int, seq_len: int, decode_rows: int, device: torch.device,
             train_steps: int, decode_steps: int) -> tuple[float, float]:
    """(training tokens/s, seconds per greedy decoding step at ``decode_rows`` rows) of
    ``config``'s model on ``device``, on random tokens, as :func:`nmst_lib.experiments.trainer.train`
    runs it (AdamW, clipping, mixed precision on CUDA)."""
    from .model_setup import _autocast, autocast_dtype, build_model_for

    gen = torch.Generator().manual_seed(0)
    model = build_model_for(config, vocab).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.training.lr, betas=config.training.betas,
                                  weight_decay=config.training.weight_decay)
    scaler = torch.amp.GradScaler(device.type) if autocast_dtype(device) == torch.float16 else None
    inputs = torch.randint(0, vocab - 1, (config.training.batch_size, seq_len), generator=gen).to(device)
    targets = torch.randint(0, vocab, (config.training.batch_size, seq_len), generator=gen).to(device)
    mask = torch.zeros(config.training.batch_size, seq_len, dtype=torch.bool, device=device)
    mask[:, : config.data.context_len - 1] = True

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        with _autocast(device):
            log_probs = model(inputs, mask)
        loss = -log_probs[~mask].gather(-1, targets[~mask].unsqueeze(-1)).mean()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.training.clip)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()

    model.train()
    train_step()  # warm-up (allocations, kernel selection)
    _sync(device)
    start = time.perf_counter()
    for _ in range(train_steps):
        train_step()
    _sync(device)
    tokens_per_second = train_steps * config.training.batch_size * seq_len / (time.perf_counter() - start)

    # Greedy steps through the decoding protocol (model.step + argmax), every row kept alive: a
    # random model may pick eos at once, and decode() would then stop before the steps are timed.
    model.eval()
    contexts = torch.randint(0, vocab - 1, (decode_rows, config.data.context_len), generator=gen).to(device)
    with torch.no_grad():
        state, log_probs = model.initial_state(contexts)
        state, log_probs = model.step(state, log_probs.argmax(-1))  # warm-up
        _sync(device)
        start = time.perf_counter()
        for _ in range(decode_steps):
            state, log_probs = model.step(state, log_probs[:, :-1].argmax(-1))  # eos (last id) excluded
        _sync(device)
    step_seconds = (time.perf_counter() - start) / decode_steps
    return tokens_per_second, step_seconds


def _committed_rate() -> tuple[float, list[StoredResult]]:
    """FLOP/s of training reached by the committed cpu runs (median over runs), and those runs."""
    from .runs import suite_configs

    found = [load_result(c) for c in suite_configs("cpu")]
    found = [s for s in found if s.status == CURRENT]
    if not found:
        raise ValueError("no CURRENT committed cpu result to scale from: pass measure=True to time this device")
    rates = []
    for s in found:
        d = s.data
        cfg = d["config"]
        tokens = d["data"]["sequences"]["train"]["num_tokens"] * d["metrics"]["epochs_run"]
        macs = _macs_per_token(cfg["arch"], cfg["hidden"], cfg["layers"], d["data"]["vocabulary"]["size"])
        secs = d["provenance"].get("train_seconds")
        if secs:
            rates.append(6 * macs * tokens / secs)
    if not rates:
        raise ValueError("the committed cpu results carry no train_seconds: pass measure=True")
    rates.sort()
    return rates[len(rates) // 2], found


def _proxy_steps(committed: list[StoredResult], config: ExperimentConfig, decoder: str) -> int | None:
    """The steps a batch of ``decoder`` ran in the matching committed cpu run (same arch and
    head, nearest eps, seed 0): its longest continuation, or None when some row never stopped."""
    match = [s.data for s in committed if s.data["config"]["arch"] == config.arch
             and s.data["config"]["head"] == config.head and s.data["config"]["seed"] == 0]
    if config.eps is not None and match:
        best = min(abs(math.log(d["config"]["eps"]) - math.log(config.eps)) for d in match)
        match = [d for d in match if abs(math.log(d["config"]["eps"]) - math.log(config.eps)) == best]
    for d in match:
        dec = d["decoding"].get(decoder) or d["decoding"].get("greedy")
        if dec is None:
            continue
        if dec.get("not_terminated", 0) > 0:
            return None
        return max(dec["lengths"]) if dec.get("lengths") else None
    return None


def _data_sizes(profile: str, committed: list[StoredResult]) -> dict:
    """The data sizes a profile's estimate uses: the official split (``paper``,
    :data:`WIKITEXT2_SIZES`) or the data of the committed cpu results (``cpu``), with words
    that say which."""
    if profile == "paper":
        return {"vocab": WIKITEXT2_SIZES["vocab_size"], "train_tokens": WIKITEXT2_SIZES["train_tokens"],
                "valid_tokens": WIKITEXT2_SIZES["valid_tokens"], "n_valid": WIKITEXT2_SIZES["valid_contexts"],
                "seq_len": WIKITEXT2_SIZES["mean_line_tokens"],
                "words": ("the official WikiText-2 split (2,088,628 training and 217,646 validation tokens, "
                          "vocabulary 33,278, 1,777 validation contexts)")}
    cpu_data = committed[0].data["data"]
    vocab = cpu_data["vocabulary"]["size"]
    train_tokens = cpu_data["sequences"]["train"]["num_tokens"]
    return {"vocab": vocab, "train_tokens": train_tokens,
            "valid_tokens": cpu_data["sequences"]["valid"]["num_tokens"], "n_valid": None,
            "seq_len": max(1, round(train_tokens / cpu_data["sequences"]["train"]["num_sequences"])),
            "words": (f"the data of the committed cpu results ({train_tokens:,} training tokens, vocabulary "
                      f"{vocab:,}; with the official training split, reachable through the Hugging Face hub, "
                      f"training takes about {WIKITEXT2_SIZES['train_tokens'] / train_tokens:.1f} times longer)")}


def _speeds(configs, sizes: dict, rate: float, measure: bool, device, train_steps: int,
            decode_steps: int) -> dict:
    """Per arch: (training tokens/s, seconds per greedy decoding step at the reference rows,
    the reference rows), measured on ``device`` or scaled from the committed ``rate``."""
    speeds = {}
    for c in configs:
        if c.arch in speeds:
            continue
        rows = min(c.decoding.num_decode_contexts or sizes["n_valid"] or 1, c.decoding.decode_batch_size)
        macs = _macs_per_token(c.arch, c.model.hidden, c.model.layers, sizes["vocab"])
        if measure:
            ref = c.replace(head="nmst", eps=c.eps or 1e-4, decoders=("greedy",))
            tps, step = _measure(ref, sizes["vocab"], sizes["seq_len"], rows, device, train_steps, decode_steps)
        else:
            tps, step = rate / (6 * macs), rows * 2 * macs / rate
        speeds[c.arch] = (tps, step, rows)
    return speeds


def _decode_seconds(c: ExperimentConfig, speed: tuple, committed, n_valid) -> tuple[float, float]:
    """(low, high) seconds of decoding run ``c`` with every decoder: batches of contexts x the
    steps a batch runs (see the module docstring) x the time of a step."""
    _, step, ref_rows = speed
    d_lo = d_hi = 0.0
    d = c.decoding
    for name in d.decoders:
        spec = parse_decoder(name)
        greedy = name == "greedy"
        n_ctx = d.num_decode_contexts if greedy else (d.num_decode_contexts_nongreedy or d.num_decode_contexts)
        n_ctx = n_ctx or n_valid or 1
        L = d.decode_max_len if greedy else (d.decode_max_len_nongreedy or d.decode_max_len)
        beam = spec.beam_size or 1
        if c.head == "va":
            cap = L
        else:
            half = first_step_eos_above_half(c.eps)
            cap = min(L, half + (beam if spec.method == "beam" else SAMPLING_MARGIN if spec.sampling else 0))
        if spec.method == "beam":
            low = cap  # beam search runs until beam_size hypotheses finish: no cheaper proxy
        else:
            proxy = _proxy_steps(committed, c, name)
            low = cap if proxy is None else min(cap, proxy)
        batches = math.ceil(n_ctx / c.decoding.decode_batch_size)
        rows = min(n_ctx, c.decoding.decode_batch_size) * beam
        step_time = step * rows / ref_rows * (BEAM_OVERHEAD if spec.method == "beam" else 1.0)
        d_lo += batches * low * step_time
        d_hi += batches * cap * step_time
    return d_lo, d_hi


def _derivation(configs, sizes: dict, speeds: dict, rate: float, measure: bool, device,
                train_steps: int, decode_steps: int) -> str:
    """The words of a :class:`TimeEstimate` that say how it was made."""
    speed_words = "; ".join(f"{a.upper()}: {tps:,.0f} training tokens/s, {step * 1e3:.1f} ms per greedy step "
                            f"at {rows} rows" for a, (tps, step, rows) in speeds.items())
    if measure:
        how = (f"Throughputs measured on {_device_words(device)}: {train_steps} training steps (batch "
               f"{configs[0].training.batch_size} x {sizes['seq_len']} random tokens, the NMST layer, AdamW, mixed precision "
               f"on CUDA) and {decode_steps} greedy steps of each architecture at the profile's sizes "
               f"({speed_words}).")
    else:
        how = (f"Throughputs scaled, not measured: the committed cpu runs trained at a median "
               f"{rate / 1e9:.0f} GFLOP/s (their train_seconds, one thread each on a 2-core CPU), and each "
               f"size here is converted by its multiply-adds per token ({speed_words}). A GPU, or more "
               f"threads, is faster; pass measure=True to time this device.")
    return (
        f"{how} Data: {sizes['words']}. Training: between {min(c.training.patience + 1 for c in configs)} epochs (the "
        f"earliest early stop) and {max(c.training.max_epochs for c in configs)} epochs per run, each a pass over the "
        f"training tokens plus a forward pass over the validation tokens (a third of a training token each). "
        f"Decoding: for every decoder, the batches of contexts x the steps a batch runs (low: the longest "
        f"continuation of the matching committed cpu run, or the cap when some continuation there never stopped; "
        f"high: the cap, L for VA, t_1/2, t_1/2 + B or t_1/2 + {SAMPLING_MARGIN} for ST/NMST; beam search always "
        f"the cap) x the time of a step, proportional to the rows (x {BEAM_OVERHEAD} for beam search). Left out: "
        f"data loading and tokenisation, checkpoints, the per-token eos traces, and rows leaving a batch as they "
        f"finish (which makes real decoding cheaper than the high end). It is an estimate: expect the truth "
        f"within a factor of about two of this range.")


def _estimate_configs(profile: str, configs, train_steps: int, decode_steps: int) -> list[ExperimentConfig]:
    """Check :func:`estimate_profile_time`'s arguments; the validated configs to estimate."""
    from .runs import suite_configs

    if profile not in ("cpu", "paper"):
        raise ValueError(f"profile must be 'cpu' or 'paper' (the quick profile takes seconds), got {profile!r}")
    for name, value in (("train_steps", train_steps), ("decode_steps", decode_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    configs = list(suite_configs(profile) if configs is None else configs)
    if not configs:
        raise ValueError("configs is empty: pass at least one config of the profile")
    configs = [validate_config(c) for c in configs]
    if any(c.profile != profile for c in configs):
        raise ValueError(f"every config must be of profile {profile!r}, got {sorted({c.profile for c in configs})}")
    return configs


def estimate_profile_time(profile: str = "paper", device=None, *, measure: bool | None = None,
                          configs: Sequence[ExperimentConfig] | None = None, train_steps: int = 3,
                          decode_steps: int = 20) -> TimeEstimate:
    """Estimate how long ``profile``'s suite (or ``configs``) takes on ``device`` (Chapter 6,
    06_wikitext; the model is in this module's docstring).

    ``profile`` is ``"paper"`` (the official WikiText-2 split, :data:`WIKITEXT2_SIZES`) or
    ``"cpu"`` (the data the committed cpu results used). ``device`` defaults to CUDA when
    available. ``measure``: time ``train_steps`` training steps and ``decode_steps`` greedy
    steps of each architecture on ``device`` (default: only on a GPU, where it takes seconds;
    on a CPU the paper-size LSTM needs about 10 s); otherwise scale from the committed cpu
    runs. ``configs``: a subset of the suite (e.g. one run), all of ``profile``.
    """
    device = torch.device(device) if device is not None else torch.device(
        "cuda" if torch.cuda.is_available() else "cpu")
    if measure is None:
        measure = device.type == "cuda"
    if not isinstance(measure, bool):
        raise TypeError(f"measure must be True, False or None (measure on a GPU only), got {measure!r}")
    configs = _estimate_configs(profile, configs, train_steps, decode_steps)
    rate, committed = _committed_rate()
    sizes = _data_sizes(profile, committed)
    speeds = _speeds(configs, sizes, rate, measure, device, train_steps, decode_steps)
    per_run, train_total, decode_total = {}, [0.0, 0.0], [0.0, 0.0]
    for c in configs:
        tps = speeds[c.arch][0]
        epoch = sizes["train_tokens"] / tps + sizes["valid_tokens"] / (3 * tps)
        t_lo, t_hi = min(c.training.max_epochs, c.training.patience + 1) * epoch, c.training.max_epochs * epoch
        d_lo, d_hi = _decode_seconds(c, speeds[c.arch], committed, sizes["n_valid"])
        per_run[c.key] = (t_lo + d_lo, t_hi + d_hi)
        train_total[0] += t_lo
        train_total[1] += t_hi
        decode_total[0] += d_lo
        decode_total[1] += d_hi
    derivation = _derivation(configs, sizes, speeds, rate, measure, device, train_steps, decode_steps)
    return TimeEstimate(profile, _device_words(device), len(configs), tuple(train_total), tuple(decode_total),
                        "measured" if measure else "scaled", derivation, per_run)


def run_choices(stored: Sequence[StoredResult], device=None, *, measure: bool | None = None) -> str:
    """Markdown for Chapter 6 (06_wikitext), in Colab or anywhere: (a) where the shown results
    come from (:func:`describe_results`); (b) how to retrain them, as an explicit choice, with
    the time the committed runs took and where new results go (:func:`~nmst_lib.experiments.results.default_results_dir`,
    read before the published ones); (c) the ``paper`` profile: with a GPU, the estimate of
    :func:`estimate_profile_time` for the whole suite and for one run; without one, that it
    needs a GPU and how to get one in Colab."""
    stored = _check_stored(stored)
    device = torch.device(device) if device is not None else torch.device(
        "cuda" if torch.cuda.is_available() else "cpu")
    lines = [describe_results(stored), ""]
    profiles = sorted({s.data.get("profile") for s in stored if s.data is not None} or {"cpu"})
    profile = "cpu" if "cpu" in profiles else profiles[0]
    train = sum((s.data or {}).get("provenance", {}).get("train_seconds") or 0.0 for s in stored)
    decoding = sum(d.get("wall_seconds") or 0.0 for s in stored for d in (s.data or {}).get("decoding", {}).values())
    out = default_results_dir()
    lines.append(
        f"* **Retrain instead** (your choice; nothing is retrained unless you ask): "
        f"`run_suite(\"{profile}\", force=True)` in a cell, or `python -m nmst_lib run-suite --profile {profile} "
        f"--force` in a terminal. The new results are written to `{out}` (set `NMST_RESULTS_DIR` to choose) "
        f"and from then on are read before the published ones. The results shown took {_hours(train)} of "
        f"training and {_hours(decoding)} of decoding in all, on the device named above.")
    if device.type == "cuda":
        est = estimate_profile_time("paper", device, measure=measure)
        one = max(est.per_run.items(), key=lambda kv: kv[1][1])
        lines.append(
            f"* **The paper's settings on this GPU:** `python -m nmst_lib run-suite --profile paper` "
            f"({est.runs} runs). {est.summary()} The longest single run, `{one[0]}` "
            f"(`python -m nmst_lib run --profile paper ...`), takes {_span(*one[1])}. "
            f"How this was estimated: {est.derivation}")
    else:
        lines.append(
            "* **The paper's settings** (`--profile paper`: full vocabulary, RNN 2 x 256 / LSTM 2 x 512, up to 70 "
            "epochs, 10 seeds, L = 10^5) need a GPU: in Colab, *Runtime > Change runtime type > GPU*, then run "
            "this cell again for a time estimate on that GPU.")
    return "\n".join(lines)
