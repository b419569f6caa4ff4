"""Command line for the WikiText-2 experiments of Chapter 6 (06_wikitext), Chapter 7 (07_gpt2),
Chapter 8 (08_sparse) and Chapter 9 (09_temperature).

    python -m nmst_lib train     --profile quick --arch lstm --head nmst --eps 1e-4 --seed 0 [--resume]
    python -m nmst_lib train     --profile cpu --head entmax --alpha 1.5
    python -m nmst_lib decode    --profile quick --arch lstm --head nmst --eps 1e-4 --seed 0
    python -m nmst_lib run       ... (train, then decode)
    python -m nmst_lib run-suite --profile cpu
    python -m nmst_lib report    --profile cpu
    python -m nmst_lib sparse    --profile cpu [--only KEY] (Chapter 8's sparse-generation suite)
    python -m nmst_lib gpt2      --profile cpu [--only KEY] [--nproc N] (Chapter 7's GPT-2 suite)
    python -m nmst_lib temperature --profile cpu [--only KEY] (Chapter 9's contextual-temperature suite)
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
WikiText-2 experiments of "When Do Language Models Stop?" (Chapter 6, after Choi, Cho, Lee 2023):
train RNN/LSTM language models with a vanilla (va), self-terminating (st) or non-monotonic
self-terminating (nmst) output layer, decode validation contexts with greedy / top-k / nucleus /
beam / ancestral decoders, and store r_nt(L) curves, perplexities and provenance as JSON.

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

Profiles: quick = seconds, for tests and CI (numbers mean nothing); cpu = what the website shows
(30 runs, about 3 CPU hours: 1.5 hours as two single-thread processes on 2 cores); paper = the paper's settings (GPU).
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


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m nmst_lib`` argument parser (Chapter 6, 06_wikitext)."""
    parser = argparse.ArgumentParser(prog="python -m nmst_lib", description=_DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

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

    p = sub.add_parser("run-suite", help="run every config a chapter needs at a profile (skips current results)",
                       description="Run all configs of the profile's suite (see nmst_lib.experiments.runs."
                                   "suite_configs) whose stored result is missing or STALE, resuming from checkpoints. "
                                   "The command line is stored in every result.")
    g = p.add_argument_group("suite")
    g.add_argument("--force", action="store_true", help="re-run configs whose results are current, from scratch")
    g.add_argument("--dry-run", action="store_true", help="list the configs and their status, run nothing")
    g.add_argument("--only", default=None, metavar="SUBSTR", help="only configs whose key contains SUBSTR")
    g.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run N configs at once, each in its own process with --threads threads "
                        "(on a 2-core CPU: --jobs 2 --threads 1) [1]")
    _add_common(p)

    p = sub.add_parser("report", help="list a profile's results with status (CURRENT/STALE/MISSING) and key numbers",
                       description="For every config of the profile's suite: status of the stored result, "
                                   "validation perplexity, greedy r_nt at the largest L, and the data used.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_common(p)

    p = sub.add_parser("sparse", help="Chapter 8's sparse-generation suite (Martins et al. 2020 Tables 2, 4, 5)",
                       description="Train (or resume) the softmax, entmax and NMST-entmax LSTMs of the profile and "
                                   "evaluate them on the test split under every decoder of Martins et al. (2020) "
                                   "Table 2 (sp, JS, eps-perplexity, REP/WREP, tokens considered per step), plus "
                                   "distinct-n of free-running continuations, r_nt(L) under each model's natural "
                                   "decoder and greedy, eos in the support, and next-token scores for the "
                                   "chapter's alpha explorer. One JSON per model under OUT/sparse/; models "
                                   "whose result is current are skipped (see nmst_lib.experiments.sparse).")
    g = p.add_argument_group("suite")
    g.add_argument("--only", default=None, metavar="KEY",
                   help="only the models whose key contains KEY (e.g. entmax-a1.5, va)")
    g.add_argument("--force", action="store_true", help="re-evaluate models whose result is current")
    g.add_argument("--dry-run", action="store_true", help="list the models and their status, run nothing")
    _add_common(p)

    p = sub.add_parser("gpt2", help="Chapter 7's GPT-2 suite: VA, ST and NMST output layers (Choi, Cho, Lee 2023 "
                                    "Sec. 4.2; Welleck et al. 2020 Sec. 5.3)",
                       description="Train (or resume) the GPT-2 models of the profile with a vanilla (VA), "
                                   "self-terminating (ST) or non-monotonic self-terminating (NMST) output layer, "
                                   "decode validation contexts with every decoder of the config up to L = 1,000, "
                                   "and store one result JSON per model under OUT/gpt2/ (perplexities, r_nt(L), "
                                   "length histograms, readable continuations, p(eos) per token, provenance). "
                                   "quick: seconds (tests); cpu: a small GPT-2 trained from scratch, NOT pretrained "
                                   "GPT-2 (the website); paper: pretrained gpt2 fine-tuned on WikiText-103 (GPU, "
                                   "hub). Models whose result is current are skipped (see "
                                   "nmst_lib.experiments.gpt2).")
    g = p.add_argument_group("suite")
    g.add_argument("--only", default=None, metavar="KEY",
                   help="only the models whose key contains KEY (e.g. va, nmst-eps5e-4)")
    g.add_argument("--force", action="store_true", help="re-run models whose result is current, from scratch")
    g.add_argument("--dry-run", action="store_true", help="list the models and their status, run nothing")
    g.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="train with N processes (DistributedDataParallel through torchrun: GPUs, or CPU "
                        "processes on gloo); the command re-launches itself under torch.distributed.run [1]")
    _add_common(p)

    p = sub.add_parser("temperature", help="Chapter 9's contextual-temperature suite (CT-LSTM, CT-NMST, Tables 3-4, "
                                           "MoS / CT-MoS)",
                       description="Train (or resume) the contextual-temperature LSTMs of the profile (Contextual "
                                   "Temperature for Language Modeling, 2020: eq. 5-7, Tables 3-4) with a monitor of "
                                   "the temperature of tracked tokens over training (Fig. 1a), then store one result "
                                   "JSON per model under OUT/temperature/: perplexities, the monitor log, the mean "
                                   "temperature by position with 95% bands (Fig. 1b), eos's temperature against the "
                                   "distance to the line's end, greedy continuations with the temperature of each "
                                   "chosen token, r_nt(L) on Chapter 6's validation contexts, provenance. Models "
                                   "whose result is current are skipped; result files are written atomically, so "
                                   "two processes with disjoint --only can share OUT (see "
                                   "nmst_lib.experiments.temperature).")
    g = p.add_argument_group("suite")
    g.add_argument("--only", default=None, metavar="SUBSTR",
                   help="only the models whose key contains SUBSTR; several comma-separated substrings select "
                        "every model matching one (e.g. va-ct-sig-a1-b0.5-seed0,pow,smax or mos3)")
    g.add_argument("--force", action="store_true", help="re-run models whose result is current, from scratch")
    g.add_argument("--dry-run", action="store_true", help="list the models, their keys and status, run nothing")
    _add_common(p)

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
    p.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--data-dir", default=None, help=argparse.SUPPRESS)
    return parser


def _parse_value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def _config_from_args(args):
    from .experiments.config import make_config

    overrides = {}
    for item in args.set:
        if "=" not in item:
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        overrides[key.strip()] = _parse_value(value)
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
    from .experiments.train import train

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
    from .experiments.train import train

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


def _cmd_run_suite(args) -> int:
    from .experiments.results import load_result
    from .experiments.runs import run_suite, suite_configs

    only = (lambda c: args.only in c.key) if args.only else None
    if args.dry_run:
        for c in suite_configs(args.profile):
            if only is None or only(c):
                _log(f"{c.key:40s} {load_result(c, args.out).status.upper():8s} decoders={','.join(c.decoders)}")
        return 0
    results = run_suite(args.profile, results_dir=args.out, checkpoint_dir=args.checkpoint_dir, force=args.force,
                        device=args.device, progress=not args.no_progress, log=_log, command=_command(args),
                        only=only, jobs=args.jobs, threads=args.threads)
    _log(f"[run-suite] {len(results)} results current in {results[0].path.parent if results else args.out}")
    return 0


def _cmd_report(args) -> int:
    from .experiments.results import load_result
    from .experiments.runs import suite_configs

    rows = []
    for c in suite_configs(args.profile):
        stored = load_result(c, args.out)
        row = {"key": c.key, "status": stored.status.upper(), "message": stored.message}
        if stored.data is not None:
            d = stored.data
            greedy = d.get("decoding", {}).get("greedy")
            row.update(val_ppl=d["metrics"]["val_ppl"], test_ppl=d["metrics"]["test_ppl"],
                       rnt_greedy=greedy["rnt"][-1] if greedy else None, L=greedy["max_len"] if greedy else None,
                       data=d["data"]["splits"]["train"], date=d["provenance"]["date_utc"])
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'run':40s} {'status':8s} {'val ppl':>9s} {'test ppl':>9s} {'r_nt(L)':>8s} {'L':>7s}")
    for r in rows:
        if "val_ppl" in r:
            rnt = "" if r["rnt_greedy"] is None else f"{r['rnt_greedy']:.3f}"
            print(f"{r['key']:40s} {r['status']:8s} {r['val_ppl']:9.2f} {r['test_ppl']:9.2f} {rnt:>8s} {r['L'] or '':>7}")
        else:
            print(f"{r['key']:40s} {r['status']:8s}")
    stale = [r for r in rows if r["status"] == "STALE"]
    for r in stale:
        print(f"  {r['key']}: {r['message']}")
    datas = sorted({r["data"] for r in rows if "data" in r})
    for d in datas:
        print(f"training data: {d}")
    return 0


def _cmd_sparse(args) -> int:
    from .experiments.sparse import run_sparse_suite, sparse_results_status, sparse_suite_configs

    only = (lambda c: args.only in c.key) if args.only else None
    if args.dry_run:
        for c in sparse_suite_configs(args.profile):
            if only is None or only(c):
                _log(f"{c.key:45s} {sparse_results_status(c, args.out).upper():8s} {c.describe()}")
        return 0
    results = run_sparse_suite(args.profile, results_dir=args.out, checkpoint_dir=args.checkpoint_dir,
                               force=args.force, device=args.device, progress=not args.no_progress, log=_log,
                               command=_command(args), only=only)
    _log(f"[sparse] {len(results)} results current in {results[0].path.parent if results else args.out}")
    return 0


def _gpt2_module_args(args) -> list[str]:
    """The ``gpt2`` command line of ``args`` without ``--nproc``, for the processes that
    ``torch.distributed.run`` starts (Chapter 7, 07_gpt2)."""
    out = ["gpt2", "--profile", args.profile]
    for flag, value in (("--only", args.only), ("--out", args.out), ("--checkpoint-dir", args.checkpoint_dir),
                        ("--data-dir", args.data_dir), ("--device", args.device), ("--threads", args.threads)):
        if value is not None:
            out += [flag, str(value)]
    out += [flag for flag, on in (("--force", args.force), ("--no-progress", args.no_progress)) if on]
    return out


def _cmd_gpt2(args) -> int:
    from .experiments.gpt2 import gpt2_suite_configs, run_gpt2_suite
    from .experiments.results import load_result

    configs = [c for c in gpt2_suite_configs(args.profile) if not args.only or args.only in c.key]
    if args.only and not configs:
        raise ValueError(f"no model of the {args.profile} GPT-2 suite has {args.only!r} in its key; keys: "
                         + ", ".join(c.key for c in gpt2_suite_configs(args.profile)))
    if args.dry_run:
        for c in configs:
            _log(f"{c.key:40s} {load_result(c, args.out).status.upper():8s} decoders={','.join(c.decoders)}")
        return 0
    if args.nproc is not None and args.nproc < 1:
        raise ValueError(f"--nproc must be >= 1, got {args.nproc}")
    if args.nproc and args.nproc > 1 and not os.environ.get("WORLD_SIZE"):
        from .experiments.distributed import relaunch_with_torchrun

        return relaunch_with_torchrun(args.nproc, _gpt2_module_args(args))
    results = run_gpt2_suite(args.profile, results_dir=args.out, checkpoint_dir=args.checkpoint_dir,
                             only=args.only, force=args.force, device=args.device, progress=not args.no_progress,
                             log=_log, command=_command(args))
    if os.environ.get("RANK", "0") == "0":  # under torchrun only rank 0 reports
        _log(f"[gpt2] {len(results)} results in {results[0].path.parent if results else args.out}: "
             + ", ".join(f"{r.path.stem} {r.status.upper()}" for r in results))
    return 0


def _cmd_temperature(args) -> int:
    """``python -m nmst_lib temperature``: Chapter 9's suite (09_temperature; Contextual Temperature
    (2020) Sec. 4), or with ``--dry-run`` its models, keys, status and decoders."""
    from .experiments.temperature import (
        load_temperature_result,
        run_temperature_suite,
        select_temperature_configs,
        temperature_suite_configs,
    )

    configs = temperature_suite_configs(args.profile)
    chosen = select_temperature_configs(configs, args.only) if args.only is not None else configs
    if args.dry_run:
        for c in chosen:
            _log(f"{c.key:45s} {load_temperature_result(c, args.out).status.upper():8s} {c.describe()}")
        return 0
    results = run_temperature_suite(args.profile, only=args.only, force=args.force, results_dir=args.out,
                                    checkpoint_dir=args.checkpoint_dir, device=args.device,
                                    progress=not args.no_progress, log=_log, command=_command(args))
    _log(f"[temperature] {len(results)} results in {results[0].path.parent if results else args.out}: "
         + ", ".join(f"{r.path.stem} {r.status.upper()}" for r in results))
    return 0


def _cmd_assignments(args) -> int:
    from .classroom import ASSIGNMENTS
    from .classroom.build import build_assignments

    if args.action == "build":
        if args.items:
            raise ValueError(f"`assignments build` takes no positional arguments (got {' '.join(args.items)}); "
                             "use --only ID[,ID]")
        only = None if args.only is None else [a.strip() for a in args.only.split(",") if a.strip()]
        index = build_assignments(args.out, only=only, sync_package=args.sync_package)
        for name, entry in index["assignments"].items():
            if only is None or name in only:
                qs = ", ".join(f"{q['name']} {q['points']:g} {'manual' if q['kind'] == 'manual' else 'auto'}"
                               for q in entry["questions"])
                _log(f"[assignments] {name}: {entry['autograded_points']:g} autograded + "
                     f"{entry['manual_points']:g} manual points ({qs})")
        from .classroom.build import repository_root

        out = args.out or str(repository_root() / "_build" / "assignments")
        _log(f"[assignments] editions in {out}: <id>/student/, <id>/<id>-student.zip, <id>/instructor/, "
             "<id>/<id>-autograder.zip")
        return 0
    if len(args.items) < 2:
        raise ValueError("`assignments grade` needs the assignment id and at least one submitted notebook, e.g. "
                         "`python -m nmst_lib assignments grade a1_decoding alice.ipynb bob.ipynb`")
    assignment, submissions = args.items[0], args.items[1:]
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"unknown assignment {assignment!r}; the assignments are {', '.join(ASSIGNMENTS)}")
    from .classroom.build import repository_root

    out = args.out or str(repository_root() / "_build" / "assignments")
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


_COMMANDS = {"train": _cmd_train, "decode": _cmd_decode, "run": _cmd_run, "run-suite": _cmd_run_suite,
             "report": _cmd_report, "sparse": _cmd_sparse, "gpt2": _cmd_gpt2, "temperature": _cmd_temperature,
             "assignments": _cmd_assignments}


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


def main(argv=None) -> int:
    """Entry point of ``python -m nmst_lib``; returns the exit status (2 on bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = None if argv is None else [str(a) for a in argv]
    if args.command is None:
        parser.print_help()
        return 2
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    if getattr(args, "nproc", None) is not None and args.command in ("train", "run"):
        if args.nproc < 1:
            parser.error("--nproc must be >= 1")
        if args.nproc > 1 and "WORLD_SIZE" not in os.environ:  # not yet under torchrun: re-launch there
            from .experiments.distributed import relaunch_with_torchrun

            return relaunch_with_torchrun(args.nproc, _without_nproc(sys.argv[1:] if argv is None else list(argv)))
    _setup(args)
    try:
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
