"""Chapter 7 (07_gpt2): the GPT-2 experiments of Choi, Cho, Lee (2023) Sec. 4.2, Sec. 5 and App. D
(Tables 2-5, Figs. 3, 5, 6) and of Welleck et al. (2020) Sec. 5.3 (Table 4, Fig. 4), at the book's
profiles.

Models: GPT-2 (:class:`nmst_lib.models.GPT2LM`) with a vanilla softmax (VA), self-terminating (ST)
or non-monotonic self-terminating (NMST) output layer, trained by the ONE training loop of the
library (:func:`nmst_lib.experiments.trainer.train`), decoded and stored by Chapter 6's pipeline
(:func:`nmst_lib.experiments.runs.run_experiment` / :func:`~nmst_lib.experiments.runs.load_or_run`):
this module only says which configs form the suite (:func:`gpt2_suite_configs`), runs them
(:func:`run_gpt2_suite`), reads them back (:func:`load_gpt2_results`) and turns stored results
into the rows and series the chapter shows. Every builder is a pure function of stored results.

* ``quick``: a 2 x 32 GPT-2 trained from scratch for seconds; VA, ST and NMST at one eps, every
  decoder (tests and CI; its numbers mean nothing).
* ``cpu`` (the website): a small GPT-2 (2 layers, n_embd 128) **trained from scratch** on the
  offline WikiText text with GPT-2's real tokenizer: **not pretrained GPT-2**, and every page
  says so. VA; ST and NMST at each eps of :data:`~nmst_lib.experiments.config.GPT2_CPU_EPS`
  (1e-4, 5e-4, and 2.5e-3: the eps of Welleck et al. (2020) Sec. 5.3); seeds 0-2.
* ``paper``: pretrained ``gpt2`` fine-tuned on WikiText-103 (App. D); VA, ST and NMST at each
  eps of :data:`~nmst_lib.experiments.config.PAPER_EPS`, 10 seeds; plus ST at Welleck's eps
  2.5e-3 (seed 0) so that Welleck et al.'s Table 4 has its model at every profile. Needs a GPU.

Results: ``<results_dir>/gpt2/<key>.json`` (:func:`nmst_lib.experiments.results.result_path`),
stamped like Chapter 6's. CLI: ``python -m nmst_lib gpt2 --profile {quick,cpu,paper}``.

Builders (rows are plain dicts for :func:`nmst_lib.report.html_table`; r_nt values are fractions
in [0, 1] unless a key says ``percent``; results that are not CURRENT are left out, never shown as
if they were):

* :func:`gpt2_table2_rows`: NMST Table 2, validation perplexity and greedy r_nt(L) per model
  (mean and sample standard deviation over seeds);
* :func:`gpt2_table4_rows`: NMST Table 4, r_nt(L) under top-{2,4}, nucleus-{0.2,0.4}, beam-{2,4}
  for VA, ST and NMST at the featured eps;
* :func:`gpt2_continuation_rows`: NMST Tables 3 and 5, greedy continuations side by side for
  contexts where VA does not stop, as readable text;
* :func:`welleck_table4_rows`: Welleck et al. (2020) Table 4, VA vs ST (eps = 2.5e-3), r_nt(500)
  in percent and perplexity;
* :func:`gpt2_length_distributions`: Welleck et al. (2020) Fig. 4, lengths of the data vs VA vs
  ST greedy continuations;
* :func:`gpt2_eos_traces`: NMST Figs. 3 and 6, per validation line the readable tokens and
  p(eos | y_<t, x) of every model (the chapter's kernel-free explorer);
* :func:`gpt2_eps_tradeoff`: NMST Fig. 5, validation perplexity and r_nt(1,000) against eps per head;
* :func:`gpt2_rnt_curves`: r_nt(L) curves per model and decoder (log-log, as Chapter 6's Fig. 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..report import eps_text  # re-exported: Chapter 7 names eps through it
from .config import (
    GPT2_CPU_EPS,
    GPT2_FEATURED_EPS,
    PAPER_EPS,
    PROFILES,
    ExperimentConfig,
    config_from_dict,
    config_hash,
    make_config,
    suite_overrides,
)
from .family import Family, register, run_family_suite
from .results import GPT2_FOLDER, RESULT_SCHEMA, StoredResult, current_records
from .runs import describe_run, run_experiment

__all__ = [
    "WELLECK_EPS",
    "WELLECK_L",
    "TABLE4_DECODERS",
    "EXAMPLE_TOKENS",
    "GPT2",
    "gpt2_suite_configs",
    "run_gpt2_suite",
    "load_gpt2_results",
    "eps_text",
    "model_label",
    "gpt2_table2_rows",
    "gpt2_table4_rows",
    "gpt2_continuation_rows",
    "welleck_table4_rows",
    "gpt2_length_distributions",
    "gpt2_eos_traces",
    "gpt2_eps_tradeoff",
    "gpt2_rnt_curves",
]

WELLECK_EPS = 2.5e-3
"""eps of the ST GPT-2 of Welleck et al. (2020) Sec. 5.3 (Table 4, Fig. 4)."""
WELLECK_L = 500
"""The limit L of Welleck et al. (2020) Sec. 5.3's non-termination ratio on GPT-2."""
TABLE4_DECODERS = ("top-2", "top-4", "nucleus-0.2", "nucleus-0.4", "beam-2", "beam-4")
"""The decoders of Choi, Cho, Lee (2023) Table 4 (GPT-2 under top-k, nucleus and beam search)."""
EXAMPLE_TOKENS = 60
"""Continuations stored as examples are cut to this many tokens (the default ``example_tokens`` of
:func:`nmst_lib.experiments.runs.decode_at_scale`); ``length`` is the full length."""
_EOS_TEXT = "<|endoftext|>"  # GPT-2's eos as a stored continuation spells it (TokenizerVocabulary.texts)
_EVERY_DECODER = ("greedy", "ancestral", "top-2", "top-4", "nucleus-0.2", "nucleus-0.4", "beam-2", "beam-4")
_VA_CONSISTENT = ("consistent-top-2", "consistent-nucleus-0.2")


# ------------------------------------------------------------------------------------ suite


def _check_profile(profile) -> str:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    return profile


def gpt2_suite_configs(profile: str, **overrides) -> list[ExperimentConfig]:
    """Every GPT-2 model Chapter 7 (07_gpt2) needs at ``profile``, in run order (Choi, Cho, Lee
    (2023) Sec. 4.2 and App. D; Welleck et al. (2020) Sec. 5.3); ``overrides``: option fields set
    for every model (:func:`~nmst_lib.experiments.config.suite_overrides`).

    * ``quick``: VA, ST and NMST at eps = 1e-2 (``GPT2_FEATURED_EPS["quick"]``), seed 0, each with
      every decoder (greedy, ancestral, top-2/4, nucleus-0.2/0.4, beam-2/4; VA also consistent
      top-2 and nucleus-0.2), so that the tests exercise the whole pipeline in seconds.
    * ``cpu``: VA; ST and NMST at each eps of ``GPT2_CPU_EPS`` (1e-4, the paper's headline GPT-2
      setting, 5e-4 and 2.5e-3); seeds 0-2, all of seed 0 first: 21 models, 30-90 minutes each
      on one shared core by the converged recipe (VA's beam-4 alone about 19 minutes, since VA
      rarely stops by L = 1,000). Decoders as :func:`~nmst_lib.experiments.config.make_config`
      gives them (seed 0: every decoder for VA and the featured eps 5e-4, greedy for the others;
      seeds 1-2: greedy, which gives Table 2's spread).
    * ``paper``: VA; ST and NMST at each eps of ``PAPER_EPS``; seeds 0-9 (90 models), then ST at
      :data:`WELLECK_EPS` seed 0 (Welleck et al.'s Table 4 model).
    """
    _check_profile(profile)
    overrides = suite_overrides(overrides)
    if profile == "quick":
        eps = GPT2_FEATURED_EPS["quick"]
        va = {"decoders": _EVERY_DECODER + _VA_CONSISTENT, **overrides}
        every = {"decoders": _EVERY_DECODER, **overrides}
        return [make_config("quick", "gpt2", "va", None, 0, **va),
                make_config("quick", "gpt2", "st", eps, 0, **every),
                make_config("quick", "gpt2", "nmst", eps, 0, **every)]
    eps_grid = GPT2_CPU_EPS if profile == "cpu" else PAPER_EPS
    seeds = tuple(range(3 if profile == "cpu" else 10))
    configs = []
    for seed in seeds:
        configs.append(make_config(profile, "gpt2", "va", None, seed, **overrides))
        configs += [make_config(profile, "gpt2", "st", eps, seed, **overrides) for eps in eps_grid]
        configs += [make_config(profile, "gpt2", "nmst", eps, seed, **overrides) for eps in eps_grid]
    if not any(c.head == "st" and c.eps is not None and math.isclose(c.eps, WELLECK_EPS) for c in configs):
        configs.append(make_config(profile, "gpt2", "st", WELLECK_EPS, 0, **overrides))
    return configs


def run_gpt2_suite(profile: str, *, results_dir=None, only=None, force: bool = False,
                   progress: bool = True, log: Callable[[str], None] | None = None,
                   checkpoint_dir=None, device=None, command: str | None = None,
                   jobs: int = 1, threads: int | None = None) -> list[StoredResult]:
    """Train, decode and store every model of :func:`gpt2_suite_configs` whose stored result is
    not CURRENT (all of them with ``force``, retrained from scratch), through
    :func:`nmst_lib.experiments.runs.run_experiment` (Chapter 6's pipeline: one training loop,
    resume from checkpoints, provenance); returns the stored results in suite order. ``only``:
    comma-separated parts of keys (e.g. ``"nmst"``) or a predicate on configs. Chapter 7
    (07_gpt2). The ``gpt2`` family through
    :func:`~nmst_lib.experiments.family.run_family_suite`.

    Under ``torchrun`` (``WORLD_SIZE`` > 1; ``python -m nmst_lib gpt2 --nproc N``) every process
    first trains the models to do together (DistributedDataParallel, :mod:`.distributed`; rank 0
    writes the checkpoints); then rank 0 alone loads each finished checkpoint, decodes, evaluates
    and stores it (the same evaluation as ``run_experiment``), while the other processes are
    done. Decoding is not distributed."""
    return run_family_suite(GPT2, profile, only=only, force=force, results_dir=results_dir,
                            checkpoint_dir=checkpoint_dir, device=device, progress=progress,
                            log=log, command=command, jobs=jobs, threads=threads)


def load_gpt2_results(profile: str = "cpu", results_dir=None) -> list[StoredResult]:
    """The stored results of every model of :func:`gpt2_suite_configs` at ``profile`` (CURRENT,
    STALE or MISSING; nothing is run), in suite order. Chapter 7 (07_gpt2) reads its tables and
    figures through this (the cpu results ship in ``nmst_lib/published_results/gpt2/``)."""
    return GPT2.load_all(profile, results_dir)


GPT2 = register(Family(
    name="gpt2", title="GPT-2", chapter="07_gpt2", schema=RESULT_SCHEMA, folder=GPT2_FOLDER,
    config_type=ExperimentConfig, configs=gpt2_suite_configs, config_hash=config_hash,
    config_from_dict=config_from_dict, run=run_experiment, describe=describe_run,
    missing_hint="run it (`python -m nmst_lib suite gpt2`)", distributed=True))
"""Chapter 7's family (07_gpt2): GPT-2 with VA/ST/NMST output layers, results in ``gpt2/``."""


# ------------------------------------------------------------------------------ helpers


def _records(results) -> list[dict]:
    """The data of the CURRENT results among ``results`` (StoredResults or result dicts)."""
    return current_records(results, need="config")


def model_label(head: str, eps: float | None = None) -> str:
    """Row name of a model in Chapter 7's tables (07_gpt2): ``VA``, ``ST (eps=5e-04)``,
    ``NMST (eps=2.5e-03)`` (Choi, Cho, Lee (2023) Table 2); eps through :func:`eps_text`."""
    if head not in ("va", "st", "nmst"):
        raise ValueError(f"head must be va, st or nmst for GPT-2, got {head!r}")
    if head == "va":
        if eps is not None:
            raise ValueError("VA has no eps")
        return "VA"
    if eps is None:
        raise ValueError(f"{head.upper()} needs eps")
    return f"{head.upper()} (eps={eps_text(eps)})"


def _model(rec: Mapping) -> tuple[str, float | None, int]:
    c = rec["config"]
    return c["head"], c.get("eps"), int(c.get("seed", 0))


def _same_eps(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9))


def _groups(records) -> list[tuple[str, float | None, list[dict]]]:
    """Records grouped by (head, eps) in order of first appearance (seeds within a group)."""
    groups: list[tuple[str, float | None, list[dict]]] = []
    for rec in records:
        head, eps, _ = _model(rec)
        for g in groups:
            if g[0] == head and _same_eps(g[1], eps):
                g[2].append(rec)
                break
        else:
            groups.append((head, eps, [rec]))
    return groups


def _rnt(record: Mapping, L: int | None) -> float:
    from ..report import rnt_at

    return rnt_at(record, int(record["max_len"]) if L is None else L)


def _mean_sd(vals: Sequence[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in vals if v is not None]
    if not vals:
        return None, None
    arr = np.asarray(vals, dtype=np.float64)
    return float(arr.mean()), (float(arr.std(ddof=1)) if arr.size > 1 else None)


def _check_L(L) -> int | None:
    if L is None:
        return None
    if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < 1:
        raise ValueError(f"L must be a positive integer (at most the decodes' max_len) or None, got {L!r}")
    return int(L)


def _featured_eps(records) -> float | None:
    profiles = {r.get("profile", r["config"].get("profile")) for r in records}
    if len(profiles) > 1:
        raise ValueError(f"results of several profiles ({sorted(profiles)}) cannot share one table; pass one profile's")
    return GPT2_FEATURED_EPS[profiles.pop()] if profiles else None


# ------------------------------------------------------------------------------ tables


def gpt2_table2_rows(results, *, L: int | None = None, decoder: str = "greedy") -> list[dict]:
    """Choi, Cho, Lee (2023) Table 2 for Chapter 7 (07_gpt2): per model (VA, then ST and NMST at
    each eps, in the order of ``results``) the validation and test perplexity and r_nt(L) of
    ``decoder`` (greedy) continuations, L = the decodes' limit (1,000 at the cpu and paper
    profiles) unless given. Several seeds of a model give the mean and the sample standard
    deviation (``*_sd``; None for one seed) and ``seeds`` counts them.

    Columns: ``model``, ``head``, ``eps``, ``seeds``, ``val_ppl``, ``val_ppl_sd``, ``test_ppl``,
    ``test_ppl_sd``, ``L``, ``rnt``, ``rnt_sd``, ``num_contexts``. Non-current results are left out.
    """
    L = _check_L(L)
    rows = []
    for head, eps, recs in _groups(_records(results)):
        with_dec = [r for r in recs if decoder in r.get("decoding", {})]
        rnts = [_rnt(r["decoding"][decoder], L) for r in with_dec]
        val, val_sd = _mean_sd([r["metrics"]["val_ppl"] for r in recs])
        test, test_sd = _mean_sd([r["metrics"]["test_ppl"] for r in recs])
        rnt, rnt_sd = _mean_sd(rnts)
        Ls = {L if L is not None else int(r["decoding"][decoder]["max_len"]) for r in with_dec}
        rows.append({"model": model_label(head, eps), "head": head, "eps": eps, "seeds": len(recs),
                     "val_ppl": val, "val_ppl_sd": val_sd, "test_ppl": test, "test_ppl_sd": test_sd,
                     "L": Ls.pop() if len(Ls) == 1 else None, "rnt": rnt, "rnt_sd": rnt_sd,
                     "num_contexts": with_dec[0]["decoding"][decoder]["num_contexts"] if with_dec else None})
    return rows


def gpt2_table4_rows(results, *, eps: float | None = None, decoders: Sequence[str] = TABLE4_DECODERS,
                     L: int | None = None) -> list[dict]:
    """Choi, Cho, Lee (2023) Table 4 for Chapter 7 (07_gpt2): r_nt(L) of VA, ST and NMST (at
    ``eps``, default the profile's featured eps: 5e-4 at cpu, 1e-5 at paper) under top-{2,4},
    nucleus-{0.2,0.4} and beam-{2,4} (``decoders``). One row per model with one column per
    decoder (mean over seeds; None where the model was not decoded with it), plus ``L`` and
    ``num_contexts``. Beam search counts a context as terminated within L when some hypothesis
    finished by step L (Welleck et al. (2020) Def. A.2; :func:`nmst_lib.report.rnt_at`)."""
    L = _check_L(L)
    decoders = tuple(decoders)
    if not decoders or not all(isinstance(d, str) for d in decoders):
        raise ValueError(f"decoders must name at least one decoder, e.g. {TABLE4_DECODERS}, got {decoders!r}")
    records = _records(results)
    if eps is None:
        eps = _featured_eps(records)
    rows = []
    for head, e, recs in _groups(records):
        if head != "va" and not _same_eps(e, eps):
            continue
        row = {"model": model_label(head, e), "head": head, "eps": e, "seeds": len(recs)}
        Ls, ns = set(), set()
        for d in decoders:
            got = [r["decoding"][d] for r in recs if d in r.get("decoding", {})]
            row[d] = _mean_sd([_rnt(g, L) for g in got])[0]
            Ls |= {L if L is not None else int(g["max_len"]) for g in got}
            ns |= {int(g["num_contexts"]) for g in got}
        row["L"] = Ls.pop() if len(Ls) == 1 else None
        row["num_contexts"] = ns.pop() if len(ns) == 1 else None
        rows.append(row)
    return rows


def gpt2_continuation_rows(results, *, eps: float | None = None, decoder: str = "greedy",
                           max_contexts: int | None = 3, only_va_nonterminating: bool = True) -> list[dict]:
    """Choi, Cho, Lee (2023) Tables 3 and 5 for Chapter 7 (07_gpt2): continuations of the same
    validation contexts by VA, ST and NMST (at ``eps``, default the featured eps), side by side as
    readable text (GPT-2 BPE decoded; a page escapes it with :func:`nmst_lib.report.html_table`).

    Contexts are the stored examples of ``decoder`` (the first contexts of the fixed decoding
    subset, the same for every model); with ``only_va_nonterminating`` only those where VA did
    not stop within L (the paper's choice), at most ``max_contexts`` of them (None: all). Each
    model shows its lowest stored seed, except that with ``only_va_nonterminating`` VA shows its
    lowest seed that failed to stop on some stored context (two seeds of one model can differ
    there: Chapter 7's GPT-2 VA seed 0 stopped on all 8, seed 1 on 2). One row
    per context and model: ``example`` (the context's index), ``context``, ``model``, ``head``,
    ``seed``,
    ``continuation`` (the first :data:`EXAMPLE_TOKENS` tokens, without the ``<|endoftext|>`` that
    ends a finished one: ``terminated`` says it stopped, and a page shows words, not the model's
    special tokens), ``length`` (full length in tokens, eos included when it stopped),
    ``terminated``, ``truncated`` (the text is cut)."""
    if max_contexts is not None and (isinstance(max_contexts, bool) or not isinstance(max_contexts, int)
                                     or max_contexts < 1):
        raise ValueError(f"max_contexts must be a positive integer or None, got {max_contexts!r}")
    records = _records(results)
    if eps is None:
        eps = _featured_eps(records)
    chosen = []
    for head, e, recs in _groups(records):
        if head == "va" or _same_eps(e, eps):
            recs = sorted((r for r in recs if decoder in r.get("decoding", {})), key=lambda r: _model(r)[2])
            if not recs:
                continue
            rec = recs[0]  # the lowest seed
            if head == "va" and only_va_nonterminating:
                rec = next((r for r in recs if not all(ex["terminated"] for ex in r["decoding"][decoder]["examples"])),
                           rec)
            chosen.append((model_label(head, e), head, _model(rec)[2], rec["decoding"][decoder]["examples"]))
    va = [c for c in chosen if c[1] == "va"]
    if not chosen or (only_va_nonterminating and not va):
        return []
    n = min(len(c[3]) for c in chosen)
    for label, _, _, examples in chosen[1:]:
        for a, b in zip(chosen[0][3][:n], examples[:n]):
            if a["context"] != b["context"]:
                raise ValueError(f"{label}'s example {b['index']} continues another context than "
                                 f"{chosen[0][0]}'s: results from different data or decoding subsets")
    picks = [i for i in range(n) if not only_va_nonterminating or not va[0][3][i]["terminated"]]
    if max_contexts is not None:
        picks = picks[:max_contexts]
    rows = []
    for i in picks:
        for label, head, seed, examples in chosen:
            ex = examples[i]
            text = ex["continuation"].removesuffix(_EOS_TEXT) if ex["terminated"] else ex["continuation"]
            rows.append({"example": ex["index"], "context": ex["context"], "model": label, "head": head,
                         "seed": seed, "continuation": text, "length": ex["length"],
                         "terminated": ex["terminated"], "truncated": ex["length"] > EXAMPLE_TOKENS})
    return rows


def welleck_table4_rows(results, *, eps: float = WELLECK_EPS, L: int = WELLECK_L,
                        decoder: str = "greedy") -> list[dict]:
    """Welleck et al. (2020) Sec. 5.3, Table 4, for Chapter 7 (07_gpt2): the vanilla GPT-2 vs the
    self-terminating one at ``eps`` (2.5e-3): non-termination ratio of ``decoder`` (greedy)
    continuations at L = 500, in percent: ``rnt_percent`` counts |y| > L (eq. 11 of Choi, Cho, Lee
    (2023), the book's r_nt), ``r_L_percent`` counts |y| >= L (Welleck's r_L, = r_nt(L - 1));
    and validation / test perplexity (mean over seeds). Rows: VA, then ST."""
    L = _check_L(L)
    rows = []
    for head, e, recs in _groups(_records(results)):
        if not (head == "va" or (head == "st" and _same_eps(e, eps))):
            continue
        got = [r["decoding"][decoder] for r in recs if decoder in r.get("decoding", {})]
        for g in got:
            if L > int(g["max_len"]):
                raise ValueError(f"L = {L} exceeds the decodes' limit {g['max_len']}: choose L <= {g['max_len']}")
        rnt = _mean_sd([_rnt(g, L) for g in got])[0]
        r_L = _mean_sd([_rnt(g, L - 1) for g in got])[0] if L > 1 else None
        rows.append({"model": model_label(head, e), "head": head, "eps": e, "seeds": len(recs), "L": L,
                     "rnt": rnt, "rnt_percent": None if rnt is None else 100 * rnt,
                     "r_L_percent": None if r_L is None else 100 * r_L,
                     "val_ppl": _mean_sd([r["metrics"]["val_ppl"] for r in recs])[0],
                     "test_ppl": _mean_sd([r["metrics"]["test_ppl"] for r in recs])[0]})
    rows.sort(key=lambda r: r["head"] != "va")
    return rows


# ----------------------------------------------------------------------------- figures


def gpt2_length_distributions(results, *, eps: float = WELLECK_EPS, decoder: str = "greedy") -> list[dict]:
    """Welleck et al. (2020) Fig. 4 for Chapter 7 (07_gpt2): the lengths of the reference
    continuations of the decoded validation contexts (``data``), of VA's and of ST's (at ``eps``)
    ``decoder`` continuations of the same contexts (lowest seed of each model). One dict per
    series: ``label``, ``kind`` (``data`` or the head), ``eps``, ``lengths`` (the lengths of the
    continuations that stopped, eos included, sorted), ``not_terminated`` (how many did not stop
    within ``max_len``), ``num_contexts``, ``max_len``."""
    from ..report import lengths_from_histogram

    records = _records(results)
    series = []
    chosen = [(h, e, min(recs, key=lambda r: _model(r)[2])) for h, e, recs in _groups(records)
              if h == "va" or (h == "st" and _same_eps(e, eps))]
    chosen.sort(key=lambda x: x[0] != "va")
    if not chosen:
        return []
    ref = chosen[0][2]
    data_lengths = lengths_from_histogram(ref["data_length_histogram"])
    max_len = int(ref["decoding"][decoder]["max_len"]) if decoder in ref.get("decoding", {}) else None
    series.append({"label": "data", "kind": "data", "eps": None, "lengths": data_lengths.tolist(),
                   "not_terminated": 0, "num_contexts": int(data_lengths.size), "max_len": max_len})
    for head, e, rec in chosen:
        if decoder not in rec.get("decoding", {}):
            continue
        d = rec["decoding"][decoder]
        lengths = np.asarray(d["lengths"], dtype=np.int64)
        term = np.asarray(d["terminated"], dtype=bool)
        series.append({"label": model_label(head, e), "kind": head, "eps": e,
                       "lengths": np.sort(lengths[term]).tolist(), "not_terminated": int((~term).sum()),
                       "num_contexts": int(d["num_contexts"]), "max_len": int(d["max_len"])})
    return series


def gpt2_eos_traces(results) -> list[dict]:
    """Choi, Cho, Lee (2023) Figs. 3 and 6 for Chapter 7 (07_gpt2): p(eos | y_<t, x) along
    validation lines under teacher forcing, every model on the same lines; with several seeds of a
    model, their mean and sample standard deviation (the paper's curve and shaded band).

    One dict per line, in the order the results store them: ``sequence_index``, ``line_number``,
    ``context_text`` (readable), ``context`` and ``tokens`` (readable per-token strings of the
    context and of the continuation; ``tokens[t-1]`` is the token that step t predicts, the last
    is ``<|endoftext|>``), ``text`` (the continuation as readable text) and ``models``: per model
    ``{"label", "head", "eps", "seeds", "p_eos", "p_eos_sd"}`` with ``len(p_eos) == len(tokens)``
    (``p_eos_sd`` None for one seed). Raises ValueError when two results traced different tokens
    on a line (results from different data)."""
    lines: dict[int, dict] = {}
    order: list[int] = []
    for head, eps, recs in _groups(_records(results)):
        label = model_label(head, eps)
        per_line: dict[int, list[list[float]]] = {}
        for rec in recs:
            for tr in rec.get("eos_probabilities", []):
                i = int(tr["sequence_index"])
                tokens = list(tr["continuation"])
                if len(tr["p_eos"]) != len(tokens):
                    raise ValueError(f"trace of line {i} ({label}) has {len(tr['p_eos'])} probabilities for "
                                     f"{len(tokens)} tokens")
                if i not in lines:
                    order.append(i)
                    lines[i] = {"sequence_index": i, "line_number": tr["line_number"],
                                "context_text": tr.get("context_text", "".join(tr["context"])),
                                "context": list(tr["context"]), "tokens": tokens,
                                "text": tr.get("continuation_text", "".join(tokens)), "models": []}
                elif lines[i]["tokens"] != tokens:
                    raise ValueError(f"line {i}: {label} traced other tokens than the first model; the results "
                                     "come from different data")
                per_line.setdefault(i, []).append([float(p) for p in tr["p_eos"]])
        for i, runs in per_line.items():
            arr = np.asarray(runs, dtype=np.float64)
            lines[i]["models"].append({"label": label, "head": head, "eps": eps, "seeds": len(runs),
                                       "p_eos": arr.mean(axis=0).tolist(),
                                       "p_eos_sd": arr.std(axis=0, ddof=1).tolist() if len(runs) > 1 else None})
    return [lines[i] for i in order]


def gpt2_eps_tradeoff(results, *, L: int | None = None, decoder: str = "greedy") -> list[dict]:
    """Choi, Cho, Lee (2023) Fig. 5 (and Welleck et al. (2020) Sec. 5.3's trade-off) for Chapter 7
    (07_gpt2): validation perplexity and greedy r_nt(L) as functions of eps, one series per
    self-terminating head, plus VA as a reference without eps. Each series: ``label`` (``ST``,
    ``NMST``, ``VA``), ``head``, ``eps`` (ascending; ``[]`` for VA), ``val_ppl``, ``val_ppl_sd``,
    ``rnt``, ``rnt_sd`` (lists aligned with ``eps``; one value for VA), ``L``. Built from
    :func:`gpt2_table2_rows`."""
    rows = gpt2_table2_rows(results, L=L, decoder=decoder)
    out = []
    for head in ("va", "st", "nmst"):
        mine = sorted((r for r in rows if r["head"] == head), key=lambda r: r["eps"] or 0.0)
        if not mine:
            continue
        out.append({"label": head.upper(), "head": head, "eps": [r["eps"] for r in mine if r["eps"] is not None],
                    **{k: [r[k] for r in mine] for k in ("val_ppl", "val_ppl_sd", "rnt", "rnt_sd")},
                    "L": mine[0]["L"]})
    return out


def gpt2_rnt_curves(results) -> list[dict]:
    """r_nt(L) curves (Choi, Cho, Lee (2023) eq. 11; the log-log plots of its Figs. 2 and 5) of
    every model and decoder, lowest seed per model, for Chapter 7 (07_gpt2): ``{"label", "head",
    "eps", "decoder", "L", "rnt", "max_len", "num_contexts"}``."""
    out = []
    for head, eps, recs in _groups(_records(results)):
        rec = min(recs, key=lambda r: _model(r)[2])
        for name, d in rec.get("decoding", {}).items():
            out.append({"label": model_label(head, eps), "head": head, "eps": eps, "decoder": name,
                        "L": list(d["L"]), "rnt": list(d["rnt"]), "max_len": int(d["max_len"]),
                        "num_contexts": int(d["num_contexts"])})
    return out
