"""The command line of the library: one model's training and decoding, the suites of the four
experiment families (wikitext2: Chapter 6, 06_wikitext; gpt2: Chapter 7, 07_gpt2; sparse:
Chapter 8, 08_sparse; temperature: Chapter 9, 09_temperature; see
:mod:`nmst_lib.experiments.family`), a report of stored results, and the classroom kit.

    python -m nmst_lib train     --profile quick --arch lstm --head nmst --eps 1e-4 --seed 0 [--resume]
    python -m nmst_lib train     --profile cpu --head entmax --alpha 1.5
    python -m nmst_lib decode    --profile quick --arch lstm --head nmst --eps 1e-4 --seed 0
    python -m nmst_lib run       ... (train, then decode)
    python -m nmst_lib suite FAMILY --profile cpu [--only KEY,KEY] [--dry-run] [--force] [--jobs N]
                                 [--threads N] [--nproc N]   (any family's suite; the same options for all)
    python -m nmst_lib run-suite --profile cpu   (= suite wikitext2)
    python -m nmst_lib report    [FAMILY] --profile cpu
    python -m nmst_lib sparse    --profile cpu [--only KEY] (= suite sparse, Chapter 8)
    python -m nmst_lib gpt2      --profile cpu [--only KEY] [--nproc N] (= suite gpt2, Chapter 7)
    python -m nmst_lib temperature --profile cpu [--only KEY] (= suite temperature, Chapter 9)
    python -m nmst_lib assignments build [--only ID] [--out DIR]   (the classroom kit, otter-grader)
    python -m nmst_lib assignments grade ID SUBMISSION.ipynb ...     (grade with the built autograder)

Run ``python -m nmst_lib COMMAND --help`` for the options of each command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# Kept in sync with nmst_lib.experiments.config (a test checks); listed here so that
# `--help` answers without importing torch.
PROFILES = ("quick", "cpu", "paper")
ARCHS = ("rnn", "lstm", "gpt2")
HEADS = ("va", "st", "nmst", "entmax", "nmst-entmax")

_DESCRIPTION = """\
The experiments of "When Do Language Models Stop?" (Chapters 6-9), on WikiText-2.

Chapter 6 (after Choi, Cho, Lee 2023): train RNN/LSTM language models with a vanilla (va),
self-terminating (st) or non-monotonic self-terminating (nmst) output layer, decode validation
contexts with greedy / top-k / nucleus / beam / ancestral decoders, and store r_nt(L) curves,
perplexities and provenance as JSON.

Chapter 7 (after Welleck et al. 2020 and Choi, Cho, Lee 2023): the same output layers on GPT-2
(--arch gpt2), and the `gpt2` command: VA, ST and NMST GPT-2 models (a small one trained from
scratch with GPT-2's tokenizer for the cpu profile; pretrained gpt2 fine-tuned for the paper's).

Chapter 8 (sparse text generation, after Martins et al. 2020): the entmax (alpha-entmax, trained
with the entmax loss) and nmst-entmax output layers (--head entmax --alpha 1.5), and the `sparse`
command: Martins et al.'s Tables 2, 4 and 5 (sp, JS, eps-perplexity, REP/WREP, tokens per step)
for a softmax model, entmax models and an NMST-entmax model under every decoder.

Chapter 9 (contextual temperature, after "Contextual Temperature for Language Modeling", 2020): the
`temperature` command trains LSTMs whose output layer divides the logits by a learned per-token,
per-context temperature (CT-VA, CT-NMST, the normalisations of the paper's Table 3, without loss
scaling, MoS and CT-MoS) and stores perplexities, the temperature of tracked tokens over training, the
mean temperature by position, eos's temperature near line ends and r_nt(L) on Chapter 6's contexts.
Single runs take the fields through --set, e.g. --set temperature='"sigmoid"' --set loss_scaling=true.

Suites: `suite FAMILY` runs every model of an experiment family (wikitext2, gpt2, sparse,
temperature) whose stored result is not current; --only, --dry-run, --force, --jobs and --threads
mean the same for every family, and --nproc for every family but temperature (which refuses it).
run-suite, gpt2, sparse and temperature are its aliases.

Profiles: quick = seconds, for tests and CI (numbers mean nothing); cpu = what the website shows
(each model trained until early stopping, from about 20 minutes to a few hours on one CPU thread;
`suite FAMILY --dry-run` lists a family's runs); paper = the paper's settings (GPU).
When the official WikiText-2 training split cannot be downloaded, a named substitute (the
validation + test articles re-split by article) is used, and every result says so.

Data: --data-dir DIR, else $NMST_WIKITEXT_DIR, else $NMST_DATA_DIR/wikitext-2 (NMST_DATA_DIR names a
folder holding wikitext-2/ and gpt2-tokenizer/), else the Hugging Face hub. Offline with none of
them, commands stop at once and say which variable to set.
"""


def _add_common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("where and how")
    g.add_argument("--profile", choices=PROFILES, default="quick",
                   help="experiment profile: quick (seconds, tests), cpu (the website), paper (GPU) [quick]")
    g.add_argument("--out", default=None, metavar="DIR",
                   help="results directory: JSON results are written there and read from there only "
                        "[$NMST_RESULTS_DIR if set; else nmst_lib/published_results in a git checkout (the "
                        "committed results, package data); else ~/.cache/nmst_lib/results (honours "
                        "XDG_CACHE_HOME), read before the results published with the package]")
    g.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                   help="checkpoint directory [data/checkpoints/wikitext2 in a git checkout, else ~/.cache/nmst_lib/checkpoints/wikitext2]")
    g.add_argument("--data-dir", default=None, metavar="DIR",
                   help="local WikiText-2 folder (valid.txt + test.txt, optionally train.txt, or wiki.*.tokens); "
                        "sets NMST_WIKITEXT_DIR [$NMST_WIKITEXT_DIR, else $NMST_DATA_DIR/wikitext-2, else the "
                        "Hugging Face hub; without a training file, the named substitute split]")
    g.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda [cuda if available, else cpu]")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch CPU threads (1 is fastest on a busy machine) [torch's default]")
    g.add_argument("--no-progress", action="store_true", help="no tqdm progress bars")


def _add_run(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("which run")
    g.add_argument("--arch", choices=ARCHS, default="lstm",
                   help="rnn (tanh RNN), lstm, or gpt2 (Chapter 7: GPT-2 with the BPE tokenizer) [lstm]")
    g.add_argument("--head", choices=HEADS, default="va",
                   help="output layer: va (vanilla softmax), st (self-terminating), nmst (non-monotonic ST), "
                        "entmax (alpha-entmax, entmax loss; Chapter 8), nmst-entmax (NMST eos probability + "
                        "alpha-entmax over the other tokens; Chapter 8) [va]")
    g.add_argument("--eps", type=float, default=None,
                   help="eps in (0, 1) of the st/nmst/nmst-entmax lower bound 1-(1-eps)^t; required for st, nmst "
                        "and nmst-entmax, not allowed for va and entmax (paper: 1e-5, 5e-5, 1e-4, 5e-4)")
    g.add_argument("--alpha", type=float, default=None,
                   help="alpha > 1 of alpha-entmax; required for entmax and nmst-entmax, not allowed for the "
                        "other heads (Martins et al. 2020: 1.2 on WikiText-2; 1.5 = exact entmax15)")
    g.add_argument("--seed", type=int, default=0, help="seed of everything random (init, dropout, data order) [0]")
    g.add_argument("--decoders", default=None, metavar="LIST",
                   help="comma-separated decoders, e.g. greedy,top-2,nucleus-0.4,beam-4,ancestral,"
                        "consistent-top-2,entmax-1.5,temperature-0.95 [the profile's: greedy]")
    g.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override any config field, e.g. --set max_epochs=1 (repeatable; JSON values)")


def _add_train_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint (weights, optimizer, RNG states, position in the epoch) "
                        "instead of starting over")
    g.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="also checkpoint every N batches (always at the end of each epoch)")
    g.add_argument("--log-steps", action="store_true", help="print one line per training batch")
    _add_nproc(g)


def _add_nproc(g) -> None:
    g.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="train with N data-parallel processes (DistributedDataParallel; one GPU each with CUDA, "
                        "else CPU processes on gloo): re-launches this command under torch.distributed.run "
                        "(torchrun); `torchrun --nproc-per-node N -m nmst_lib ...` works too [1]")


_SUITES = {
    # command: (family, help, description); the aliases of `suite FAMILY` that the chapters cite
    "run-suite": (
        "wikitext2",
        "Chapter 6's RNN/LSTM suite (= suite wikitext2; skips current results)",
        "Run all configs of the profile's suite (see nmst_lib.experiments.runs.suite_configs) "
        "whose stored result is missing or STALE, resuming from checkpoints. The command line "
        "is stored in every result."),
    "gpt2": (
        "gpt2",
        "Chapter 7's GPT-2 suite (= suite gpt2): VA, ST and NMST output layers (Choi, Cho, Lee "
        "2023 Sec. 4.2; Welleck et al. 2020 Sec. 5.3)",
        "Train (or resume) the GPT-2 models of the profile with a vanilla (VA), "
        "self-terminating (ST) or non-monotonic self-terminating (NMST) output layer, decode "
        "validation contexts with every decoder of the config up to L = 1,000, and store one "
        "result JSON per model under OUT/gpt2/ (perplexities, r_nt(L), length histograms, "
        "readable continuations, p(eos) per token, provenance). quick: seconds (tests); cpu: a "
        "small GPT-2 trained from scratch, NOT pretrained GPT-2 (the website); paper: "
        "pretrained gpt2 fine-tuned on WikiText-103 (GPU, hub). Models whose result is current "
        "are skipped (see nmst_lib.experiments.gpt2)."),
    "sparse": (
        "sparse",
        "Chapter 8's sparse-generation suite (= suite sparse; Martins et al. 2020 Tables 2, 4, 5)",
        "Train (or resume) the softmax, entmax and NMST-entmax LSTMs of the profile and "
        "evaluate them on the test split under every decoder of Martins et al. (2020) Table 2 "
        "(sp, JS, eps-perplexity, REP/WREP, tokens considered per step), plus distinct-n of "
        "free-running continuations, r_nt(L) under each model's natural decoder and greedy, eos "
        "in the support, and next-token scores for the chapter's alpha explorer. One JSON per "
        "model under OUT/sparse/; models whose result is current are skipped (see "
        "nmst_lib.experiments.sparse)."),
    "temperature": (
        "temperature",
        "Chapter 9's contextual-temperature suite (= suite temperature; CT-LSTM, CT-NMST, "
        "Tables 3-4, MoS / CT-MoS)",
        "Train (or resume) the contextual-temperature LSTMs of the profile (Contextual "
        "Temperature for Language Modeling, 2020: eq. 5-7, Tables 3-4) with a monitor of the "
        "temperature of tracked tokens over training (Fig. 1a), then store one result JSON per "
        "model under OUT/temperature/: perplexities, the monitor log, the mean temperature by "
        "position with 95% bands (Fig. 1b), eos's temperature against the distance to the "
        "line's end, greedy continuations with the temperature of each chosen token, r_nt(L) "
        "on Chapter 6's validation contexts, provenance. Models whose result is current are "
        "skipped; result files are written atomically, so two processes with disjoint --only "
        "can share OUT (see nmst_lib.experiments.temperature_suite)."),
}
"""The suite commands that name one family each (kept for the README, the chapters and the
book pages, which cite them); ``suite FAMILY`` runs any registered family."""
FAMILIES = ("wikitext2", "gpt2", "sparse", "temperature")
"""The book's experiment families (a test checks them against the registry)."""


def _add_suite_options(p: argparse.ArgumentParser) -> None:
    """The options of every suite command, the same meaning for every family (see
    :func:`nmst_lib.experiments.family.run_family_suite`)."""
    g = p.add_argument_group("suite")
    g.add_argument("--only", default=None, metavar="KEY[,KEY]",
                   help="only the models whose key contains KEY; several comma-separated "
                        "substrings select every model matching one (e.g. va,nmst-eps5e-4)")
    g.add_argument("--force", action="store_true",
                   help="re-run models whose result is current, training from scratch")
    g.add_argument("--dry-run", action="store_true",
                   help="list the models, their keys and status, run nothing")
    g.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run N models at once, each in its own process with --threads "
                        "threads (on a 2-core CPU: --jobs 2 --threads 1) [1]")
    g.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="set an option field for every model of the suite, on top of its own "
                        "settings, e.g. --set vocab_kind=bpe --set vocab_cap=4000 (repeatable; JSON "
                        "values; not profile, arch, head, eps, alpha or seed, which the suite "
                        "chooses): a different suite, with its own keys and hashes")
    _add_nproc(g)
    _add_common(p)


def _add_suite_parsers(sub) -> None:
    """``suite FAMILY`` and its aliases (``run-suite``, ``gpt2``, ``sparse``, ``temperature``)."""
    p = sub.add_parser("suite", help="run every model of an experiment family at a profile "
                                     "(skips current results)",
                       description="Run every model of FAMILY's suite at the profile whose "
                                   "stored result is missing or STALE, resuming from "
                                   "checkpoints: wikitext2 (Chapter 6), gpt2 (Chapter 7), "
                                   "sparse (Chapter 8), temperature (Chapter 9), or any family "
                                   "a module registered (nmst_lib.experiments.family). Every "
                                   "option means the same for every family.")
    p.add_argument("family", metavar="FAMILY",
                   help=f"the experiment family: {', '.join(FAMILIES)}")
    _add_suite_options(p)
    for command, (family, help_text, description) in _SUITES.items():
        p = sub.add_parser(command, help=help_text, description=description)
        p.set_defaults(family=family)
        _add_suite_options(p)


def _add_single_run_parsers(sub) -> None:
    """``train``, ``decode`` and ``run``: one model of Chapters 6-9 (an ExperimentConfig)."""
    p = sub.add_parser("train", help="train one model (checkpoint after every epoch; --resume continues)",
                       description="Train one RNN/LSTM language model on WikiText-2 with early stopping; the "
                                   "checkpoint holds the best epoch's weights. Writes no result JSON (see decode/run).")
    _add_run(p)
    _add_train_options(p)
    _add_common(p)

    p = sub.add_parser("decode", help="decode a trained model and write its result JSON",
                       description="Load a finished checkpoint, decode validation contexts with every decoder of "
                                   "the config up to the profile's L, and write the result JSON (perplexities, "
                                   "r_nt(L) curves, length histograms, eos probabilities, provenance) to --out.")
    _add_run(p)
    _add_common(p)

    p = sub.add_parser("run", help="train (resuming if a checkpoint exists), then decode",
                       description="train + decode for one config; resumes from an existing checkpoint.")
    _add_run(p)
    g = p.add_argument_group("training")
    g.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="also checkpoint every N batches")
    g.add_argument("--restart", action="store_true", help="ignore an existing checkpoint and start over")
    _add_nproc(g)
    _add_common(p)


def _add_report_parser(sub) -> None:
    p = sub.add_parser("report", help="list a family's results with status (CURRENT/STALE/MISSING) "
                                      "and key numbers",
                       description="For every model of the family's suite at the profile "
                                   "(default wikitext2, Chapter 6): status of the stored "
                                   "result, validation and test perplexity, greedy r_nt at the "
                                   "largest L, and the data used.")
    p.add_argument("family", nargs="?", default="wikitext2", metavar="FAMILY",
                   help=f"the experiment family: {', '.join(FAMILIES)} [wikitext2]")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_common(p)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m nmst_lib`` argument parser: one sub-parser per command, the suite
    commands built per family (:func:`_add_suite_parsers`). Its commands make the results of
    Chapters 6-9 (``08_sparse`` and ``09_temperature`` name theirs)."""
    parser = argparse.ArgumentParser(prog="python -m nmst_lib", description=_DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_single_run_parsers(sub)
    _add_suite_parsers(sub)
    _add_report_parser(sub)
    _add_assignments_parser(sub)
    return parser


def _add_assignments_parser(sub) -> None:
    p = sub.add_parser("assignments", help="the classroom kit: build the assignments' student, instructor and "
                                           "autograder editions (otter-grader), or grade submissions",
                       description="Build every assignment of assignments/ (one per part of the book) with "
                                   "otter-grader into OUT/<id>/: student/ (+ <id>-student.zip), instructor/ "
                                   "(solutions, rubrics, all tests) and <id>-autograder.zip (otter run, otter grade, "
                                   "Gradescope); or grade submitted notebooks with a built autograder (see the "
                                   "book's instructor guide and nmst_lib.classroom.build).")
    p.add_argument("action", choices=("build", "grade"), help="build the editions, or grade submissions")
    p.add_argument("items", nargs="*", metavar="ARG",
                   help="grade: the assignment id, then one or more submitted .ipynb files")
    p.add_argument("--only", default=None, metavar="ID[,ID]", help="build: only these assignments")
    p.add_argument("--out", default=None, metavar="DIR", help="where the editions are [_build/assignments]")
    p.add_argument("--csv", default=None, metavar="FILE",
                   help="grade: write one row per submission (status, scores, one-line error) to this CSV, "
                        "rewritten after each one; a second run with the same file resumes the batch")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="grade: wall-clock limit per submission [900]")
    p.add_argument("--memory-gb", type=float, default=None, metavar="GB",
                   help="grade: memory (data segment) limit per submission, in GiB [6]")
    p.add_argument("--trusted", action="store_true",
                   help="grade: run the notebooks WITHOUT the bubblewrap sandbox, with your rights, files, "
                        "environment and network (only for code you trust; limits still apply)")
    p.add_argument("--retry-failed", action="store_true",
                   help="grade: grade again the submissions whose CSV row says failed or timed out")
    p.add_argument("--sync-package", action="store_true",
                   help="build: also copy the public tests into nmst_lib/classroom/public_tests/ (what Colab "
                        "students check against; commit the result after editing a master)")
    pin = p.add_mutually_exclusive_group()
    pin.add_argument("--pin", default="auto", metavar="REF",
                     help="build: the git commit or tag of this repository the editions install nmst_lib at "
                          "[the commit that builds the kit, when assignments/ and nmst_lib/ are committed]; "
                          "it must be on the repository's host (pushed) for students' installs to find it")
    pin.add_argument("--no-pin", dest="pin", action="store_const", const=None,
                     help="build: install the repository's default branch (a development build)")
    p.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--data-dir", default=None, help=argparse.SUPPRESS)


def _parse_value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def _set_overrides(items) -> dict:
    """The ``--set FIELD=VALUE`` options as a dict (values parsed as JSON where they are)."""
    overrides = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        overrides[key.strip()] = _parse_value(value)
    return overrides


def _config_from_args(args):
    from .experiments.config import make_config

    overrides = _set_overrides(args.set)
    if args.decoders:
        overrides["decoders"] = tuple(d.strip() for d in args.decoders.split(",") if d.strip())
    if args.alpha is not None:
        overrides["alpha"] = args.alpha
    return make_config(args.profile, args.arch, args.head, args.eps, args.seed, **overrides)


def _setup(args):
    if args.data_dir:
        os.environ["NMST_WIKITEXT_DIR"] = args.data_dir
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


def _log(msg: str) -> None:
    print(msg, flush=True)


def _command(args) -> str:
    """The command line for provenance: the arguments given to :func:`main` (``sys.argv`` from a shell)."""
    argv = getattr(args, "argv", None)
    return "python -m nmst_lib " + " ".join(sys.argv[1:] if argv is None else argv)


def _cmd_train(args) -> int:
    from .experiments.distributed import init_distributed
    from .experiments.trainer import train

    config = _config_from_args(args)
    dist = init_distributed(args.device)  # torchrun's environment (--nproc), else one process
    run = train(config, checkpoint_dir=args.checkpoint_dir, resume=args.resume, device=args.device,
                progress=not args.no_progress, checkpoint_every=args.checkpoint_every, log=_log,
                log_steps=args.log_steps, dist=dist)
    if not dist.is_main:
        return 0
    score = (f"val_ppl {run.val_ppl:.4f}, test_ppl {run.test_ppl:.4f}" if run.val_ppl is not None
             else f"val_loss {run.val_loss:.4f}, test_loss {run.test_loss:.4f}")
    _log(f"[train] {config.key}: done; best epoch {run.best_epoch}, {score}; checkpoint {run.checkpoint}")
    _log(json.dumps({"key": config.key, "val_ppl": run.val_ppl, "test_ppl": run.test_ppl, "val_loss": run.val_loss,
                     "test_loss": run.test_loss, "best_epoch": run.best_epoch, "epochs_run": run.epochs_run}))
    return 0


def _cmd_decode(args) -> int:
    import time

    from .experiments.results import save_result
    from .experiments.runs import evaluate_trained, load_trained

    config = _config_from_args(args)
    started = time.perf_counter()
    run = load_trained(config, checkpoint_dir=args.checkpoint_dir, device=args.device)
    result = evaluate_trained(run, progress=not args.no_progress, log=_log, command=_command(args), started=started)
    path = save_result(result, config, args.out)
    _log(f"[decode] {config.key}: wrote {path}")
    return 0


def _cmd_run(args) -> int:
    from .experiments.distributed import init_distributed
    from .experiments.runs import run_experiment
    from .experiments.trainer import train

    config = _config_from_args(args)
    dist = init_distributed(args.device)
    if not dist.is_main:  # other ranks take part in training; rank 0 trains, decodes and writes the result
        train(config, checkpoint_dir=args.checkpoint_dir, resume=not args.restart, device=args.device,
              progress=False, checkpoint_every=args.checkpoint_every, dist=dist)
        return 0
    stored = run_experiment(config, results_dir=args.out, checkpoint_dir=args.checkpoint_dir,
                            resume=not args.restart, device=args.device, progress=not args.no_progress, log=_log,
                            command=_command(args), checkpoint_every=args.checkpoint_every)
    _log(f"[run] {config.key}: wrote {stored.path}")
    return 0


def _suite_module_args(args) -> list[str]:
    """The suite command line of ``args`` without ``--nproc``, for the processes that
    ``torch.distributed.run`` starts (every family; Chapter 7, 07_gpt2, first)."""
    out = [args.command] + ([args.family] if args.command == "suite" else []) + ["--profile", args.profile]
    for flag, value in (("--only", args.only), ("--out", args.out), ("--checkpoint-dir", args.checkpoint_dir),
                        ("--data-dir", args.data_dir), ("--device", args.device), ("--threads", args.threads),
                        ("--jobs", None if args.jobs == 1 else args.jobs)):
        if value is not None:
            out += [flag, str(value)]
    out += [flag for flag, on in (("--force", args.force), ("--no-progress", args.no_progress)) if on]
    for item in args.set:
        out += ["--set", item]
    return out


def _cmd_suite(args) -> int:
    """``python -m nmst_lib suite FAMILY`` (and its aliases ``run-suite``, ``gpt2``, ``sparse``,
    ``temperature``): the family's models with their status (``--dry-run``), or run them
    (:func:`nmst_lib.experiments.family.run_family_suite`)."""
    from .experiments.family import (
        get_family,
        run_family_suite,
        select_configs,
    )

    family = get_family(args.family)
    overrides = _set_overrides(args.set)
    configs = select_configs(family.configs(args.profile, **overrides), args.only,
                             suite=f"the {args.profile} {family.title} suite")
    if args.dry_run:
        for c in configs:
            _log(f"{c.key:45s} {family.load(c, args.out).status.upper():8s} {family.describe(c)}")
        return 0
    results = run_family_suite(family, args.profile, only=args.only, force=args.force, results_dir=args.out,
                               checkpoint_dir=args.checkpoint_dir, device=args.device,
                               progress=not args.no_progress, log=_log, command=_command(args), jobs=args.jobs,
                               threads=args.threads, overrides=overrides)
    if os.environ.get("RANK", "0") == "0":  # under torchrun only rank 0 reports
        _log(f"[{family.name}] {len(results)} results in {results[0].path.parent if results else args.out}: "
             + ", ".join(f"{r.path.stem} {r.status.upper()}" for r in results))
    return 0


def _report_row(stored) -> dict:
    """One row of ``report``: key, status and, for a stored result, its perplexities, greedy
    r_nt at the largest L (:func:`nmst_lib.report.rnt_at`), the training data and the date."""
    from .report import rnt_at

    d = stored.data
    row = {"key": stored.path.stem, "status": stored.status.upper(), "message": stored.message}
    if d is None:
        return row
    greedy = d.get("decoding", {}).get("greedy")
    metrics = d.get("metrics", {})
    row.update(val_ppl=metrics.get("val_ppl"), test_ppl=metrics.get("test_ppl"),
               rnt_greedy=rnt_at(greedy, int(greedy["max_len"])) if greedy else None,
               L=greedy["max_len"] if greedy else None,
               data=d.get("data", {}).get("splits", {}).get("train"),
               date=d.get("provenance", {}).get("date_utc"))
    return row


def _cmd_report(args) -> int:
    """``python -m nmst_lib report [FAMILY]``: the status and key numbers of every model of a
    family's suite, as a text table (:func:`nmst_lib.report.text_table`) or JSON."""
    from .experiments.family import get_family
    from .report import text_table

    family = get_family(args.family)
    rows = [_report_row(family.load(c, args.out)) for c in family.configs(args.profile)]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    columns = {"key": "run", "status": "status", "val_ppl": "val ppl", "test_ppl": "test ppl",
               "rnt_greedy": "r_nt(L)", "L": "L"}
    print(text_table(rows, columns, digits={"val_ppl": 2, "test_ppl": 2, "rnt_greedy": 3}))
    for r in rows:
        if r["status"] == "STALE":
            print(f"  {r['key']}: {r['message']}")
    for d in sorted({r["data"] for r in rows if r.get("data")}):
        print(f"training data: {d}")
    return 0


def _assignments_folder(args) -> str:
    """Where ``assignments build`` writes the editions and ``assignments grade`` finds them:
    ``--out``, else ``_build/assignments`` in the repository."""
    from .classroom.build import repository_root

    return args.out or str(repository_root() / "_build" / "assignments")


def _cmd_assignments(args) -> int:
    from .classroom import ASSIGNMENTS
    from .classroom.build import build_assignments

    if args.action == "build":
        if args.items:
            raise ValueError(f"`assignments build` takes no positional arguments (got {' '.join(args.items)}); "
                             "use --only ID[,ID]")
        only = None if args.only is None else [a.strip() for a in args.only.split(",") if a.strip()]
        index = build_assignments(args.out, only=only, sync_package=args.sync_package, pin=args.pin)
        for name, entry in index["assignments"].items():
            if only is None or name in only:
                qs = ", ".join(f"{q['name']} {q['points']:g} {'manual' if q['kind'] == 'manual' else 'auto'}"
                               for q in entry["questions"])
                _log(f"[assignments] {name}: {entry['autograded_points']:g} autograded + "
                     f"{entry['manual_points']:g} manual points ({qs})")
        out = _assignments_folder(args)
        _log(f"[assignments] editions in {out}: <id>/student/, <id>/<id>-student.zip, <id>/instructor/, "
             "<id>/<id>-autograder.zip")
        provenance = index["provenance"]
        _log(f"[assignments] they install {provenance['install_spec']} ({provenance['install_note']})")
        return 0
    if len(args.items) < 2:
        raise ValueError("`assignments grade` needs the assignment id and at least one submitted notebook, e.g. "
                         "`python -m nmst_lib assignments grade a1_decoding alice.ipynb bob.ipynb`")
    assignment, submissions = args.items[0], args.items[1:]
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"unknown assignment {assignment!r}; the assignments are {', '.join(ASSIGNMENTS)}")
    out = _assignments_folder(args)
    zip_path = os.path.join(out, assignment, f"{assignment}-autograder.zip")
    if not os.path.isfile(zip_path):
        raise ValueError(f"no autograder at {zip_path}: run `python -m nmst_lib assignments build --only {assignment}` first")
    files = []
    for item in submissions:
        if os.path.isdir(item):
            found = sorted(os.path.join(item, f) for f in os.listdir(item) if f.endswith(".ipynb"))
            if not found:
                raise ValueError(f"no .ipynb submissions in the folder {item}")
            files.extend(found)
        else:
            files.append(item)
    return _grade_batch(args, assignment, zip_path, out, files)


def _grade_batch(args, assignment: str, zip_path: str, out: str, files: list[str]) -> int:
    """`assignments grade`: every file graded or reported; exit 0 when all graded, 1 when any was not."""
    from .classroom.grading import DEFAULT_LIMITS, grade_batch
    from .classroom.sandbox import Limits, SandboxUnavailable

    for name in ("timeout", "memory_gb"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive number, got {value}")
    limits = Limits(timeout_s=args.timeout or DEFAULT_LIMITS.timeout_s,
                    memory_bytes=int(args.memory_gb * 2**30) if args.memory_gb else DEFAULT_LIMITS.memory_bytes,
                    file_bytes=DEFAULT_LIMITS.file_bytes)
    index_path = os.path.join(out, "index.json")
    with open(index_path, encoding="utf-8") as f:
        entry = json.load(f).get("assignments", {}).get(assignment)
    if entry is None:
        raise ValueError(f"{index_path} does not list {assignment}: run `python -m nmst_lib assignments build "
                         f"--only {assignment}` first")
    questions = [q["name"] for q in entry["questions"] if q["kind"] == "autograded"]
    mode = "trusted" if args.trusted else "sandbox"
    _log(f"[assignments] grading {len(files)} submission(s) of {assignment} ({mode} mode; at most "
         f"{limits.timeout_s:g} s and {limits.memory_bytes / 2**30:g} GiB each)")
    try:
        summary = grade_batch(zip_path, files, questions, args.csv, mode=mode, limits=limits,
                              retry_failed=args.retry_failed, log=lambda line, bar: bar.write(line, file=sys.stderr))
    except SandboxUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: {args.csv or 'no CSV'} holds every submission graded so far; the same command "
              "grades the rest", file=sys.stderr)
        return 130
    _log(f"[assignments] {len(files)} submission(s): {summary['graded']} graded, {summary['failed']} failed, "
         f"{summary['timed out']} timed out" + (f" ({summary['skipped']} already in {args.csv}, not graded again)"
                                                if summary["skipped"] else ""))
    if args.csv:
        _log(f"[assignments] scores written to {args.csv}")
    return 0 if summary["failed"] == summary["timed out"] == 0 else 1


_COMMANDS = {"train": _cmd_train, "decode": _cmd_decode, "run": _cmd_run, "suite": _cmd_suite,
             "report": _cmd_report, "assignments": _cmd_assignments,
             **{command: _cmd_suite for command in _SUITES}}


def _without_nproc(argv: list[str]) -> list[str]:
    """``argv`` without ``--nproc N`` / ``--nproc=N`` (what each torchrun process runs)."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--nproc":
            skip = True
        elif not item.startswith("--nproc="):
            out.append(item)
    return out


def _wants_torchrun(args) -> bool:
    """True when ``--nproc N`` (N > 1) asks for N processes and this is not one of them yet;
    ValueError for N < 1 or for a family that does not train data-parallel."""
    nproc = getattr(args, "nproc", None)
    if nproc is None:
        return False
    if nproc < 1:
        raise ValueError(f"--nproc must be >= 1, got {nproc}")
    if nproc > 1 and getattr(args, "family", None) is not None:
        from .experiments.family import get_family

        family = get_family(args.family)
        if not family.distributed:
            raise ValueError(f"the {family.name} family does not train data-parallel (--nproc); "
                             "run its models in parallel processes with --jobs N")
    return nproc > 1 and "WORLD_SIZE" not in os.environ


def main(argv=None) -> int:
    """Entry point of ``python -m nmst_lib``; returns the exit status (2 on bad input). The command
    line of the experiments of Chapters 6-9 (``08_sparse`` and ``09_temperature`` name its
    commands)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = None if argv is None else [str(a) for a in argv]
    if args.command is None:
        parser.print_help()
        return 2
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    _setup(args)
    try:
        if _wants_torchrun(args):  # not yet under torchrun: re-launch there
            from .experiments.distributed import relaunch_with_torchrun

            given = sys.argv[1:] if argv is None else list(argv)
            suite = args.command == "suite" or args.command in _SUITES
            return relaunch_with_torchrun(args.nproc, _suite_module_args(args) if suite
                                          else _without_nproc(given))
        return _COMMANDS[args.command](args)
    except (ValueError, TypeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        _end_distributed()


def _end_distributed() -> None:
    """Destroy the process group that a torchrun-launched train/run initialised (if any)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
