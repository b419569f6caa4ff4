"""Running a language-model experiment end to end: train, decode at scale (r_nt(L) curves,
length distributions), per-token eos probabilities, and the stored result with its provenance.
Chapters 7-9 decode and evaluate through these functions too. This module registers the
``wikitext2`` family (:mod:`nmst_lib.experiments.family`): the suite of RNN/LSTM runs that
Chapter 6 (06_wikitext) shows (Choi, Cho, Lee (2023) Sec. 4.1, Figs. 2-4, 7-8, App. F-G).
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np
import torch

from .. import data as D
from ..decoding import decode
from ..metrics import length_histogram, rnt_curve
from .checkpoints import CheckpointError, load_checkpoint
from .config import (
    CPU_EPS,
    PAPER_EPS,
    ExperimentConfig,
    config_from_dict,
    config_hash,
    make_config,
    parse_decoder,
    suite_overrides,
    validate_config,
)
from .distributed import DistContext
from .family import Family, register, run_family_suite
from .results import (
    CURRENT,
    RESULT_SCHEMA,
    StoredResult,
    load_result,
    result_folder,
    save_result,
    training_provenance,
    training_seeds,
)
from .trainer import TrainedRun, checkpoint_path, train

__all__ = [
    "rnt_grid",
    "decoding_context_indices",
    "sparse_histogram",
    "unk_counts",
    "decode_at_scale",
    "eos_probability_traces",
    "load_trained",
    "evaluate_trained",
    "run_experiment",
    "load_or_run",
    "suite_configs",
    "run_suite",
    "WIKITEXT2",
    "describe_run",
]

def rnt_grid(max_len: int, points: int = 60) -> list[int]:
    """Log-spaced integer L values from 1 to ``max_len`` (inclusive) for r_nt(L) curves
    (Choi, Cho, Lee (2023) Fig. 2 plots r_nt(L) on log-log axes). Used for the stored curves of
    Chapters 6-9."""
    grid = np.unique(np.round(np.logspace(0, math.log10(max_len), points)).astype(np.int64))
    grid = grid[(grid >= 1) & (grid <= max_len)]
    return sorted(set(grid.tolist()) | {1, max_len})


def decoding_context_indices(config: ExperimentConfig, valid: D.SequenceData) -> torch.Tensor:
    """Which validation sequences give the decoding contexts: all of them, or a fixed random
    subset of ``num_decode_contexts`` (generator seed 0, the same for every model seed) in
    random order, so that any prefix of it is a random subset too. Used by the runs of Chapters 6-9."""
    n = len(valid)
    if config.decoding.num_decode_contexts is None or config.decoding.num_decode_contexts >= n:
        return torch.arange(n)
    return torch.randperm(n, generator=torch.Generator().manual_seed(0))[: config.decoding.num_decode_contexts]


def sparse_histogram(counts) -> dict:
    """``{"values": [...], "counts": [...]}`` of the non-zero entries of a count array. Used for the
    results of Chapters 6, 7 and 9."""
    counts = np.asarray(counts)
    nz = np.nonzero(counts)[0]
    return {"values": nz.tolist(), "counts": counts[nz].tolist()}


def _display_tokens(vocab, ids) -> list[str]:
    """Readable per-token strings of ``ids``: ``vocab.display(ids)`` when the vocabulary has it
    (GPT-2's BPE, :class:`nmst_lib.data.TokenizerVocabulary`: bytes decoded, e.g. ``" the"``
    instead of ``"Ġthe"``; Chapter 7, 07_gpt2), else ``vocab.decode(ids)`` (the words of a
    word-level vocabulary, Chapter 6, unchanged)."""
    display = getattr(vocab, "display", None)
    return list(display(ids)) if callable(display) else list(vocab.decode(ids))


def _display_text(vocab, ids) -> str:
    """``ids`` as one readable string: BPE pieces concatenated (they carry their own spaces;
    Chapter 7, 07_gpt2), words joined by single spaces for a word-level vocabulary (Chapter 6)."""
    if callable(getattr(vocab, "display", None)):
        return "".join(vocab.display(ids))
    return " ".join(vocab.decode(ids))


def unk_counts(tokens: torch.Tensor, lengths: torch.Tensor, unk_id: int, eos_id: int) -> tuple[int, int]:
    """(tokens equal to ``unk_id``, tokens emitted) among the first ``lengths[i]`` tokens of each
    row of ``tokens`` (a decoder's output), eos not counted as emitted: the ``<unk>`` share of
    a decoder's continuations, ``unk / emitted`` (Chapter 6, 06_wikitext, "The data")."""
    inside = torch.arange(tokens.shape[1], device=tokens.device) < lengths.to(tokens.device)[:, None]
    emitted = inside & (tokens != eos_id)
    return int((emitted & (tokens == unk_id)).sum()), int(emitted.sum())


def _examples(vocab, contexts: torch.Tensor, g, first_index: int, count: int, example_tokens: int) -> list[dict]:
    """The first ``count`` continuations of a decoded chunk as readable text (at most
    ``example_tokens`` tokens each), numbered from ``first_index``: what a page shows of them."""
    out = []
    for i in range(min(count, contexts.shape[0])):
        n = int(g.lengths[i])
        shown = g.tokens[i, :min(n, example_tokens)]
        if callable(getattr(vocab, "texts", None)):  # GPT-2 BPE: a character split across the two stays whole
            context, continuation = vocab.texts(contexts[i], shown)
        else:
            context, continuation = _display_text(vocab, contexts[i]), _display_text(vocab, shown)
        out.append({"index": first_index + i, "context": context, "continuation": continuation,
                    "length": n, "terminated": bool(g.terminated[i])})
    return out


def _peak_memory_start(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    return None


def _peak_memory_mib(device: torch.device, start) -> dict:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        return {"kind": "cuda max_memory_allocated during the decode", "mib": peak / 2**20,
                "above_start_mib": (peak - start) / 2**20}
    try:
        import resource
        import sys

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        mib = rss / 2**20 if sys.platform == "darwin" else rss / 2**10
        return {"kind": "process peak RSS so far (ru_maxrss)", "mib": mib}
    except ImportError:  # pragma: no cover - Windows
        return {"kind": "unavailable", "mib": None}


def decode_at_scale(model, contexts: torch.Tensor, decoder: str, *, max_len: int, Ls=None, seed: int = 0,
                    batch_size: int = 512, vocab: D.Vocabulary | None = None, num_examples: int = 8,
                    example_tokens: int = 60, progress: bool = False) -> dict:
    """r_nt(L) for every L in ``Ls`` (default :func:`rnt_grid`) and the length distribution of
    ``decoder``'s continuations of ``contexts``, from ONE decode per context to ``max_len``
    (Choi, Cho, Lee (2023) eq. 11, Figs. 2 and 7; ARCHITECTURE.md r_nt(L); Chapter 6, 06_wikitext).

    Contexts are decoded in chunks of ``batch_size`` (one :func:`nmst_lib.decoding.decode` call
    each; finished rows leave, so memory follows the unfinished rows) and the chunks' curves are
    averaged with their sizes as weights. Sampling decoders draw from one generator seeded with
    ``seed``. Returns JSON-ready numbers plus wall time, peak memory, every context's length
    and termination (``lengths``, ``terminated``, in the order of ``contexts``) and the
    continuations of the first ``num_examples`` contexts (``examples``, when ``vocab`` is
    given; the same contexts for every model, so a page can set models side by side). Example
    text is readable: words joined by spaces (word-level vocabularies, Chapter 6), GPT-2's BPE
    pieces decoded and concatenated through ``vocab.display`` (Chapter 7, 07_gpt2).

    ``rnt`` is :func:`nmst_lib.metrics.rnt_curve`: for beam search (Welleck et al. 2020,
    Def. A.2) a context counts as terminated within L when some hypothesis finished by step L,
    which is what a search limited to L steps returns, not when the sequence returned at
    ``max_len`` is at most L long (that one can be a later, better-scoring finish). Beam
    decoders therefore also store ``first_finish_steps``: per context (order of ``contexts``)
    the first step at which a hypothesis finished, ``null`` when none did within ``max_len``;
    r_nt(L) = fraction of contexts whose value is null or > L. ``lengths``,
    ``length_histogram``, ``mean_terminated_length`` and ``examples`` describe the sequences
    returned with limit ``max_len``; ``terminated_fraction`` and ``not_terminated`` agree with
    ``rnt`` at L = ``max_len``. ``unk_share`` (when ``vocab`` has an ``<unk>`` of its own) is the
    share of ``<unk>`` among the emitted tokens (:func:`unk_counts`). (Results stored before this field existed have it absent and
    their beam ``rnt`` read off the returned lengths, which overstates r_nt(L) for L < max_len.)
    """
    spec = parse_decoder(decoder)
    Ls = rnt_grid(max_len) if Ls is None else list(Ls)
    device = getattr(model, "device", torch.device("cpu"))
    generator = torch.Generator(device=device).manual_seed(int(seed)) if spec.sampling else None
    weighted = np.zeros(len(Ls))
    hist = np.zeros(max_len + 2, dtype=np.int64)
    examples, context_lengths, terminated_rows, first_finish = [], [], [], []
    unk_tokens = word_tokens = 0
    count_unk = vocab is not None and getattr(vocab, "unk_id", None) not in (None, getattr(vocab, "eos_id", None))
    mem0 = _peak_memory_start(device)
    start = time.perf_counter()
    chunks = contexts.split(batch_size)
    for chunk in chunks:
        g = decode(model, chunk, spec.method, max_len=max_len, generator=generator, **spec.decode_kwargs())
        weighted += rnt_curve(g, Ls) * chunk.shape[0]
        hist += length_histogram(g)
        context_lengths += g.lengths.tolist()
        terminated_rows += g.terminated.tolist()
        if spec.method == "beam":  # JSON null, not the library's max_len + 1, for "never finished"
            first_finish += [s if s <= max_len else None for s in g.first_finish_steps.tolist()]
        if count_unk:
            unk, emitted = unk_counts(g.tokens, g.lengths, vocab.unk_id, vocab.eos_id)
            unk_tokens, word_tokens = unk_tokens + unk, word_tokens + emitted
        if vocab is not None and len(examples) < num_examples:
            examples += _examples(vocab, chunk, g, len(examples), num_examples - len(examples), example_tokens)
    wall = time.perf_counter() - start
    n = contexts.shape[0]
    terminated = hist[1:max_len + 1]
    lengths = np.arange(1, max_len + 1)
    n_term = int(terminated.sum())
    beam_fields = {"first_finish_steps": first_finish} if spec.method == "beam" else {}
    return {
        "decoder": decoder,
        "method": spec.method,
        "kwargs": spec.decode_kwargs(),
        "seed": int(seed) if spec.sampling else None,
        "num_contexts": n,
        "max_len": max_len,
        "L": Ls,
        "rnt": (weighted / n).tolist(),
        "terminated_fraction": n_term / n,
        "mean_terminated_length": float((terminated * lengths).sum() / n_term) if n_term else None,
        "length_histogram": sparse_histogram(hist[:max_len + 1]),
        "not_terminated": int(hist[max_len + 1]),
        "lengths": context_lengths,
        "terminated": terminated_rows,
        **beam_fields,
        **({"unk_share": unk_tokens / word_tokens if word_tokens else None} if count_unk else {}),
        "wall_seconds": wall,
        "peak_memory": _peak_memory_mib(device, mem0),
        "examples": examples,
    }


@torch.no_grad()
def eos_probability_traces(model, data: D.SequenceData, num_lines: int, min_len: int = 12,
                           max_len: int = 60) -> list[dict]:
    """p(y_t = eos | y_<t, x) at every continuation step t of ``num_lines`` validation lines
    under teacher forcing (Choi, Cho, Lee (2023) Fig. 3 and 6; Chapter 6, 06_wikitext).

    Lines are chosen deterministically: those whose continuation (with eos) has ``min_len`` to
    ``max_len`` tokens, evenly spaced through the split. Each trace lists the context words,
    the continuation words (the t-th is the token that step t should predict; the last is
    ``<eos>``) and p(eos) per step.

    For a BPE vocabulary with ``display`` (GPT-2, Chapter 7, 07_gpt2) the ``context`` and
    ``continuation`` lists hold readable token strings (``vocab.display``: ``" the"``, not
    ``"Ġthe"``; one per token, so the t-th still labels step t on an explorer's x-axis), and
    each trace also stores ``context_text`` and ``continuation_text``, the line as readable
    text. Word-level traces (Chapter 6) are unchanged.
    """
    if num_lines == 0:
        return []
    cont = data.continuation_lengths
    eligible = torch.nonzero((cont >= min_len) & (cont <= max_len)).squeeze(1)
    if eligible.numel() == 0:
        eligible = torch.arange(len(data))
    picks = eligible[torch.linspace(0, eligible.numel() - 1, min(num_lines, eligible.numel())).round().long()]
    picks = torch.unique(picks)
    was_training = model.training
    model.eval()
    batch = D.make_batch(data, picks).to(model.device)
    log_probs = model(batch.inputs, batch.context_mask)
    model.train(was_training)
    p_eos = log_probs[..., model.eos_id].exp().double().cpu()
    k = data.context_len
    traces = []
    for row, i in enumerate(picks.tolist()):
        seq = data.sequence(i)
        n = int(data.lengths[i]) - k
        trace = {
            "sequence_index": i,
            "line_number": int(data.line_numbers[i]),
            "context": _display_tokens(data.vocab, seq[:k]),
            "continuation": _display_tokens(data.vocab, seq[k:]),
            "p_eos": p_eos[row, k - 1:k - 1 + n].tolist(),
        }
        if callable(getattr(data.vocab, "display", None)):  # BPE (GPT-2): the line as readable text too
            trace["context_text"] = "".join(trace["context"])
            trace["continuation_text"] = "".join(trace["continuation"])
        traces.append(trace)
    return traces


def load_trained(config: ExperimentConfig, *, checkpoint_dir=None, device=None, data=None) -> TrainedRun:
    """The finished run of ``config`` from its checkpoint (best weights, eval mode), without
    training; raises :class:`CheckpointError` if there is none or it is unfinished."""
    path = checkpoint_path(config, checkpoint_dir)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint for {config.key} at {path}: run `python -m nmst_lib train` first")
    ckpt = load_checkpoint(path)
    if not ckpt["progress"]["finished"]:
        raise CheckpointError(f"{path} holds an unfinished run (epoch {ckpt['progress']['epoch']}); "
                              "finish it with `python -m nmst_lib train --resume`")
    return train(config, checkpoint_dir=checkpoint_dir, resume=True, device=device, data=data, progress=False)


def evaluate_trained(run: TrainedRun, *, progress: bool = False, log: Callable[[str], None] | None = None,
                     command: str | None = None, started: float | None = None) -> dict:
    """Everything a result file holds for a trained run: perplexities and training history,
    r_nt(L) curves and length histograms of every decoder of the config, the data's length
    histogram, eos-probability traces, data description, seeds and provenance. Used for the results
    of Chapters 6, 7 and 9."""
    config, model, data = run.config, run.model, run.data
    say = log or (lambda msg: None)
    model.eval()
    idx = decoding_context_indices(config, data.valid)
    contexts = data.valid.contexts(idx)
    decoding = {}
    from tqdm.auto import tqdm

    for name in tqdm(config.decoding.decoders, desc=f"{config.label} decoding", disable=not progress, leave=False):
        max_len, these = config.decoding.decode_max_len, contexts
        if name != "greedy":
            max_len = config.decoding.decode_max_len_nongreedy or max_len
            these = contexts[:config.decoding.num_decode_contexts_nongreedy]  # None keeps them all
        res = decode_at_scale(model, these, name, max_len=max_len, seed=config.seed,
                              batch_size=config.decoding.decode_batch_size, vocab=data.vocab)
        decoding[name] = res
        say(f"[decode] {config.key} {name}: r_nt({max_len}) = {res['rnt'][-1]:.3f} "
            f"({res['wall_seconds']:.1f} s)")
    data_lengths = data.valid.continuation_lengths[idx]
    data_hist = np.bincount(data_lengths.numpy(), minlength=config.decoding.decode_max_len + 2)
    return {
        "metrics": {
            "val_ppl": run.val_ppl,  # None for the entmax heads (Chapter 8): see val_loss
            "test_ppl": run.test_ppl,
            "val_loss": run.val_loss,  # mean of the head's own loss: log perplexity for va/st/nmst
            "test_loss": run.test_loss,
            "best_epoch": run.best_epoch,
            "epochs_run": run.epochs_run,
            "stopped_early": run.stopped_early,
            "history": run.history,
            "num_parameters": sum(p.numel() for p in model.parameters()),
        },
        "decoding": decoding,
        "data_length_histogram": {**sparse_histogram(data_hist), "of": "continuation lengths (eos included) of "
                                  "the decoded validation sequences"},
        "eos_probabilities": eos_probability_traces(model, data.valid, config.decoding.num_eos_lines),
        "data": data.description,
        "seeds": {**training_seeds(config), "sampling_decoders": config.seed,
                  "decoding_contexts": 0, "substitute_split": config.data.substitute_seed},
        "provenance": training_provenance(run, command=command, started=started),
    }


def run_experiment(config: ExperimentConfig, *, results_dir=None, checkpoint_dir=None,
                   resume: bool = True, device=None, progress: bool = True,
                   log: Callable[[str], None] | None = None, command: str | None = None,
                   checkpoint_every: int | None = None,
                   dist: DistContext | None = None) -> StoredResult:
    """Train (or resume) ``config``, decode, evaluate and store the result JSON; returns the
    stored result (status CURRENT). The ``run`` of the ``wikitext2`` and ``gpt2`` families
    (Chapters 6-7); ``dist`` as in :func:`~nmst_lib.experiments.trainer.train`."""
    config = validate_config(config)
    started = time.perf_counter()
    run = train(config, checkpoint_dir=checkpoint_dir, resume=resume, device=device,
                progress=progress, log=log, checkpoint_every=checkpoint_every, dist=dist)
    result = evaluate_trained(run, progress=progress, log=log, command=command, started=started)
    save_result(result, config, results_dir)
    return load_result(config, results_dir)


def load_or_run(config: ExperimentConfig, *, results_dir=None, run: bool = True, log=None, **run_kwargs) -> StoredResult:
    """The CURRENT stored result of ``config``; otherwise (missing or STALE) run the experiment
    when ``run`` is true, else return what was found with its status so a page can say it is
    STALE or MISSING. One config at a time; the chapters read whole suites through
    ``nmst_lib.experiments.page_results``."""
    stored = load_result(config, results_dir)
    if stored.status == CURRENT or not run:
        return stored
    if log:
        log(f"[load_or_run] {config.key}: {stored.message}; running it")
    return run_experiment(config, results_dir=results_dir, log=log, **run_kwargs)


# ------------------------------------------------------------------------------------ suites


def suite_configs(profile: str, **overrides) -> list[ExperimentConfig]:
    """Every run Chapter 6 (06_wikitext) needs at ``profile`` (``overrides``: option fields set for
    every run, :func:`~nmst_lib.experiments.config.suite_overrides`).

    Decoders per run follow :func:`nmst_lib.experiments.config.default_decoders`.

    * ``paper``: RNN and LSTM x {VA, ST, NMST x :data:`PAPER_EPS`} x seeds 0-9: 180 runs; greedy
      for all (Fig. 2, Table 1, Fig. 4); every decoder for VA and for ST/NMST at eps = 1e-5
      (App. F, Fig. 7; consistent top-k/nucleus for VA).
    * ``cpu``: RNN and LSTM x {VA, ST, NMST x :data:`CPU_EPS`} x seeds 0-2: 30 runs; greedy
      for all; every decoder for seed 0's VA and ST/NMST at eps = 5e-4.
    * ``quick``: LSTM x {VA, ST, NMST at eps = 1e-2}, seed 0, greedy, top-2 and beam-2.
    """
    overrides = suite_overrides(overrides)
    if profile == "quick":
        return [make_config("quick", "lstm", h, e, 0, **overrides)
                for h, e in (("va", None), ("st", 1e-2), ("nmst", 1e-2))]
    if profile not in ("cpu", "paper"):
        raise ValueError(f"unknown profile {profile!r}: choose quick, cpu or paper")
    eps_grid = CPU_EPS if profile == "cpu" else PAPER_EPS
    seeds = range(3) if profile == "cpu" else range(10)
    configs = []
    for arch in ("rnn", "lstm"):
        for seed in seeds:
            configs.append(make_config(profile, arch, "va", None, seed, **overrides))
            configs += [make_config(profile, arch, head, eps, seed, **overrides)
                        for head in ("st", "nmst") for eps in eps_grid]
    return configs


def run_suite(profile: str, *, results_dir=None, checkpoint_dir=None, force: bool = False,
              device=None, progress: bool = True, log: Callable[[str], None] | None = print,
              command: str | None = None, only=None, jobs: int = 1,
              threads: int | None = None) -> list[StoredResult]:
    """Run every config of :func:`suite_configs` whose stored result is not CURRENT (all of
    them with ``force``), resuming from checkpoints; returns the stored results in order: the
    ``wikitext2`` family through :func:`~nmst_lib.experiments.family.run_family_suite`
    (``only``, ``jobs``, ``threads`` as there; ``jobs=2, threads=1`` on a 2-core CPU is how
    the committed cpu results were made)."""
    return run_family_suite(WIKITEXT2, profile, only=only, force=force, results_dir=results_dir,
                            checkpoint_dir=checkpoint_dir, device=device, progress=progress,
                            log=log, command=command, jobs=jobs, threads=threads)


def describe_run(config: ExperimentConfig) -> str:
    """One line for ``--dry-run``: the decoders of a run (Chapters 6-7)."""
    return f"decoders={','.join(config.decoding.decoders)}"


WIKITEXT2 = register(Family(
    name="wikitext2", title="WikiText-2", chapter="06_wikitext", schema=RESULT_SCHEMA, folder=result_folder,
    config_type=ExperimentConfig, configs=suite_configs, config_hash=config_hash,
    config_from_dict=config_from_dict, run=run_experiment, describe=describe_run,
    missing_hint="run it (load_or_run or the CLI)", distributed=True))
"""Chapter 6's family (06_wikitext): RNN/LSTM x VA/ST/NMST runs, results in ``wikitext2/``."""
