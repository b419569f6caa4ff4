"""Checks of Assignment 3, "Experiments" (Chapters 6 and 7: ``06_wikitext``, ``07_gpt2``).

Problems and the boxes they check:

* q1 ``sequence_perplexity``: the per-token perplexity of Chapter 6's tables (Choi, Cho, Lee
  (2023) Sec. 4; :func:`nmst_lib.metrics.perplexity`): every continuation token of every line,
  ``<eos>`` included, pooled over the lines before dividing.
* q2 ``rnt_curve_from_tokens``: the non-termination ratio r_nt(L) (Choi, Cho, Lee (2023) eq. 11;
  Chapter 6, "Non-termination ratio"; Proposition 6.1), compared with
  :func:`nmst_lib.metrics.rnt_curve`.
* q3 ``gpt2_nmst_log_probs``: the NMST layer (Definition 5.1) on GPT-2's logits, teacher forced
  (Proposition 7.1), compared with :func:`nmst_lib.heads.nmst_log_probs` and with cached decoding
  by :class:`nmst_lib.models.GPT2LM`.
* q4 the experiment: the reported perplexities and r_nt(L) recomputed from the student's own
  models (:func:`nmst_lib.experiments.evaluation.evaluate_perplexity`, :func:`nmst_lib.decoding.decode`,
  :func:`nmst_lib.metrics.non_termination_ratio`), and Proposition 6.1, part 2.

Besides the checks: :func:`tiny_gpt2` (the randomly initialised GPT-2 of q3, no download) and
:func:`load_experiment_data` (the short lines of q4's corpus, offline where possible).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from . import checks
from .checks import (
    call_student,
    expect,
    expect_close,
    expect_given,
    expect_tensor_close,
    fmt,
)

__all__ = [
    "tiny_gpt2", "load_experiment_data",
    "check_uniform_model_gives_vocabulary_size", "check_perplexity_pools_tokens", "check_perplexity_counts_eos",
    "hidden_perplexity_matches_library", "hidden_perplexity_extreme",
    "check_rnt_hand_example", "check_rnt_is_non_increasing", "check_rnt_at_max_len",
    "hidden_rnt_matches_library", "hidden_rnt_edge_cases",
    "check_gpt2_rows_are_distributions", "check_gpt2_eos_floor", "check_gpt2_matches_cached_decoding",
    "hidden_gpt2_matches_library", "hidden_gpt2_extreme",
    "check_experiment_numbers_recomputed", "check_experiment_guarantee_and_training", "hidden_experiment_models",
    "EXPERIMENT",
]

EXPERIMENT = {"EPS_EXP": 0.02, "L_EXP": 200, "N_CONTEXTS": 64}
"""Problem 4's setting, the values of its given cell (eps of the NMST model, the horizon L, the
first N_CONTEXTS validation contexts): the checks grade this experiment, whatever the notebook's
constants say (``checks.expect_given`` names an edited one)."""

PPL_WHERE = "the per-token perplexity of Chapter 6 (nmst_lib.metrics.perplexity)"
RNT_WHERE = "r_nt(L) of Chapter 6 (Choi et al. eq. 11, nmst_lib.metrics.rnt_curve)"
NMST_WHERE = "the NMST layer of Definition 5.1 on GPT-2's logits (Proposition 7.1)"


# --------------------------------------------------------------------------------------- helpers


def tiny_gpt2(seed: int = 0, vocab_size: int = 64, n_positions: int = 64, tie: bool = True):
    """A randomly initialised 2-layer GPT-2 (``transformers.GPT2LMHeadModel``, d = 32, float32,
    eval mode) whose eos is the last id, as in GPT-2: the tiny model of Chapter 7 (07_gpt2), no
    download. ``tie=False`` unties the output embeddings (the checks then reshape the logits)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not isinstance(vocab_size, int) or vocab_size < 3:
        raise ValueError(f"vocab_size must be an int >= 3, got {vocab_size!r}")
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab_size, n_positions=n_positions, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1, tie_word_embeddings=tie)
    return GPT2LMHeadModel(config).eval()


def load_experiment_data(max_tokens: int = 60, vocab_cap: int = 1000, num_valid: int = 96):
    """The corpus of q4: the WikiText lines of at most ``max_tokens`` tokens (short lines keep
    the experiment under a minute on a CPU), a vocabulary of the ``vocab_cap`` most frequent
    training words, and the continuation-task sequences of Chapter 6 (``nmst_lib.data``).

    Where the lines come from, first that works: :func:`nmst_lib.data.load_wikitext2` (a local
    folder named by ``NMST_DATA_DIR``/``NMST_WIKITEXT_DIR``, else the Hugging Face hub, as in
    Colab); else, in a source checkout, the repository's synthetic fixture corpus
    (``tests/fixtures/data``, not English: its numbers mean nothing). ``description`` says which.
    Returns a namespace with ``vocab``, ``train``, ``valid`` (SequenceData) and ``description``.
    """
    from .. import data as D

    for name, value in (("max_tokens", max_tokens), ("vocab_cap", vocab_cap), ("num_valid", num_valid)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if max_tokens <= D.CONTEXT_LEN:
        raise ValueError(f"max_tokens must exceed the context length k = {D.CONTEXT_LEN}")
    try:
        corpus = D.load_wikitext2("auto")
        source = corpus.description.source
    except D.WikiTextUnavailable as err:
        fixture = D.repo_root() / "tests" / "fixtures" / "data" / "wikitext-2"
        if not fixture.is_dir():
            raise D.WikiTextUnavailable(f"{err} (and no fixture corpus: this is not a source checkout)") from None
        corpus = D.load_wikitext2("local", directory=fixture)
        source = ("the repository's SYNTHETIC fixture corpus (tests/fixtures/data; no WikiText-2 here: "
                  "set NMST_DATA_DIR or run where the Hugging Face hub is reachable)")

    def short(lines):
        return [line for line in lines if len(line.split()) <= max_tokens]

    train_lines = short(corpus.train)
    vocab = D.build_vocabulary(train_lines, cap=vocab_cap)
    train = D.make_sequences(train_lines, vocab)
    valid = D.make_sequences(short(corpus.valid), vocab)
    if len(valid) > num_valid:
        valid = valid.subset(range(num_valid))
    description = (f"{source}: {len(train)} training and {len(valid)} validation lines of 11 to {max_tokens} "
                   f"tokens, vocabulary {len(vocab)}")
    return SimpleNamespace(vocab=vocab, train=train, valid=valid, description=description)


def _as_float(value, what: str) -> float:
    if isinstance(value, torch.Tensor):
        expect(value.numel() == 1, f"{what} should be one number, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AssertionError(f"{what} should be a number, got {type(value).__name__}") from None


def _as_tensor(value, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    try:
        return torch.as_tensor(value)
    except Exception:
        raise AssertionError(f"{what} should be a tensor (or a list/array), got {type(value).__name__}") from None


# ----------------------------------------------------------------------------- q1 perplexity


def _library_perplexity(token_log_probs: torch.Tensor, lengths: torch.Tensor) -> float:
    from ..metrics import perplexity

    n, width = token_log_probs.shape
    mask = torch.arange(width)[None, :] < lengths[:, None]
    clean = torch.where(mask, token_log_probs, torch.zeros_like(token_log_probs))
    # log_probs [N, T, 1] with target 0: the library's gather picks exactly the given numbers
    return perplexity(clean.unsqueeze(-1), torch.zeros(n, width, dtype=torch.long), mask)


def _ppl_inputs(gen: torch.Generator, n: int, width: int, dtype=torch.float32, pad=float("nan")):
    lengths = torch.randint(1, width + 1, (n,), generator=gen)
    lengths[0] = width
    values = -torch.rand(n, width, generator=gen, dtype=torch.float64) * 6
    mask = torch.arange(width)[None, :] < lengths[:, None]
    return torch.where(mask, values, torch.full_like(values, pad)).to(dtype), lengths


def _student_ppl(fn, token_log_probs, lengths) -> float:
    out = call_student(fn, token_log_probs.clone(), lengths.clone(), name="sequence_perplexity")
    return _as_float(out, "sequence_perplexity's result")


def check_uniform_model_gives_vocabulary_size(sequence_perplexity) -> None:
    """q1, public: a model that gives every token probability 1/|V| has perplexity |V| (Chapter 6,
    "Perplexity"), whatever the lengths; padding entries (NaN here) are not scored."""
    V = 5003
    lengths = torch.tensor([3, 1, 7])
    mask = torch.arange(7)[None, :] < lengths[:, None]
    lp = torch.where(mask, torch.full((3, 7), -math.log(V)), torch.full((3, 7), float("nan")))
    got = _student_ppl(sequence_perplexity, lp, lengths)
    expect(not math.isnan(got), "the perplexity is nan: the padding entries (beyond lengths[n]) hold NaN and must "
           "not enter the sum; select the scored entries with a mask (torch.where or indexing), do not multiply")
    expect_close(got, V, "the perplexity of a uniform model over 5,003 tokens",
                 "exp(mean NLL) = exp(log |V|) = |V| (" + PPL_WHERE + ")", rtol=1e-5)


def check_perplexity_pools_tokens(sequence_perplexity) -> None:
    """q1, public: the negative log-likelihoods of all lines are summed and divided by the total
    number of scored tokens (Chapter 6; nmst_lib.metrics.perplexity), not averaged line by line;
    the padding holds ordinary log-probabilities (-3 here), which must enter neither the sum nor
    the count."""
    lp = torch.tensor([[-1.0, -3.0, -3.0], [-2.0, -2.0, -2.0]])
    lengths = torch.tensor([1, 3])
    got = _student_ppl(sequence_perplexity, lp, lengths)
    want = math.exp(7 / 4)
    hint = ""
    if math.isclose(got, (math.e + math.e ** 2) / 2, rel_tol=1e-4):
        hint = "this is the mean of the lines' perplexities; pool the tokens instead"
    elif math.isclose(got, math.exp(1.5), rel_tol=1e-4):
        hint = ("this is the exp of the mean of the lines' mean NLLs, where a 1-token line weighs as much as a "
                "3-token one; pool the tokens instead")
    elif math.isclose(got, math.exp(13 / 6), rel_tol=1e-4):
        hint = "the padding entries (beyond lengths[n]) were counted as tokens"
    elif math.isclose(got, math.exp(13 / 4), rel_tol=1e-4):
        hint = ("the padding entries (beyond lengths[n], -3 each here) entered the sum: padding may hold any "
                "number, not only NaN or 0, so select the scored entries instead of skipping NaN")
    elif math.isclose(got, math.exp(7 / 6), rel_tol=1e-4):
        hint = "the denominator counts the padding entries (beyond lengths[n]) as tokens"
    expect_close(got, want, "the perplexity of lines with NLLs [1] and [2, 2, 2] (padding -3)",
                 "exp((1 + 2 + 2 + 2) / 4), the NLL summed over every token of every line divided by the "
                 "number of tokens (" + PPL_WHERE + ")", rtol=1e-5, hint=hint)


def check_perplexity_counts_eos(sequence_perplexity) -> None:
    """q1, public: the eos prediction is a scored token (DESIGN's canonical sequence: the
    continuation is the rest of the line plus eos; Chapter 6): the last entry of each line
    counts."""
    lengths = torch.tensor([4, 2])
    lp = torch.tensor([[-1.0, -1.0, -1.0, -5.0], [-1.0, -5.0, -4.0, -4.0]])  # eos costs 5 nats; padding -4
    got = _student_ppl(sequence_perplexity, lp, lengths)
    want = math.exp((3 + 5 + 1 + 5) / 6)
    without = math.exp(4 / 4)
    hint = ("this is the perplexity without the eos terms; the prediction of eos at step |y| is scored, "
            "and models that stop badly must pay for it" if math.isclose(got, without, rel_tol=1e-4) else "")
    if math.isclose(got, math.exp((14 + 8) / 6), rel_tol=1e-4):
        hint = ("the padding entries (beyond lengths[n], -4 each here) entered the sum: select the scored "
                "entries instead of skipping NaN")
    expect_close(got, want, "the perplexity of two lines whose eos costs 5 nats (padding -4)",
                 "exp(14 / 6) with the eos term of every line (" + PPL_WHERE + ")", rtol=1e-5, hint=hint)


def hidden_perplexity_matches_library(sequence_perplexity) -> None:
    """q1, hidden: random lines (float32 and float64; NaN padding, and padding that holds ordinary
    log-probabilities) against :func:`nmst_lib.metrics.perplexity`."""
    cases = [(5, 9, torch.float32, float("nan")), (1, 1, torch.float32, float("nan")),
             (40, 30, torch.float64, -3.0), (3, 200, torch.float32, -0.5)]
    for seed, (n, width, dtype, pad) in enumerate(cases):
        lp, lengths = _ppl_inputs(checks.generator(100 + seed), n, width, dtype, pad=pad)
        got = _student_ppl(sequence_perplexity, lp, lengths)
        want = _library_perplexity(lp, lengths)
        expect(got >= 1.0 - 1e-9, f"the perplexity is {fmt(got)} < 1: log-probabilities are <= 0, so the mean NLL is "
               ">= 0 and exp of it >= 1")
        padding = "NaN padding" if math.isnan(pad) else f"padding {pad:g}, to be left out"
        expect_close(got, want, f"the perplexity of {n} random lines ({str(dtype)[6:]}, {padding})", PPL_WHERE,
                     rtol=1e-5)


def hidden_perplexity_extreme(sequence_perplexity) -> None:
    """q1, hidden: extreme float32 inputs: one token at log p = -1e4 among 99 ordinary ones gives a
    mean NLL near 101, whose exp (about 1e44) overflows float32 (max about 3e38): accumulate and
    exponentiate in float64, as nmst_lib.metrics.perplexity does; a 1e5-token split in float32."""
    lp = torch.full((2, 50), -1.0)
    lp[1, 7] = -1e4
    lengths = torch.tensor([50, 50])
    got = _student_ppl(sequence_perplexity, lp, lengths)
    want = _library_perplexity(lp, lengths)
    expect(not math.isinf(got), f"the perplexity is inf, but {PPL_WHERE} gives {fmt(want)}: a float32 exp overflows "
           "above about 88.7; compute the mean NLL and its exp in float64")
    expect_close(got, want, "the perplexity with one log-probability of -1e4 (float32)", PPL_WHERE, rtol=1e-5)
    gen = checks.generator(7)
    lp = (-torch.rand(1000, 100, generator=gen) * 8).float()
    lengths = torch.full((1000,), 100)
    got = _student_ppl(sequence_perplexity, lp, lengths)
    expect_close(got, _library_perplexity(lp, lengths), "the perplexity of 100,000 float32 tokens", PPL_WHERE,
                 rtol=1e-5)


# ------------------------------------------------------------------------------------ q2 r_nt


def _generation(tokens: torch.Tensor, eos_id: int):
    from ..decoding import Generation

    has = (tokens == eos_id).any(1)
    first = torch.where(has, (tokens == eos_id).long().argmax(1) + 1, torch.full((tokens.shape[0],), tokens.shape[1]))
    return Generation(tokens=tokens, lengths=first, terminated=has, max_len=tokens.shape[1], eos_id=eos_id,
                      method="greedy", scores=torch.zeros(tokens.shape[0]), first_finish_steps=None)


def _random_tokens(gen: torch.Generator, rows: int, max_len: int, vocab: int, p_eos: float, pad_after=True):
    tokens = torch.randint(0, vocab - 1, (rows, max_len), generator=gen)
    eos = torch.rand(rows, max_len, generator=gen) < p_eos
    tokens[eos] = vocab - 1
    if pad_after:
        seen = torch.cumsum((tokens == vocab - 1).long(), 1)
        after = (seen - (tokens == vocab - 1).long()) > 0
        tokens[after] = -1
    return tokens


def _student_rnt(fn, tokens, eos_id, Ls) -> torch.Tensor:
    out = call_student(fn, tokens.clone(), eos_id, list(Ls), name="rnt_curve_from_tokens")
    out = _as_tensor(out, "rnt_curve_from_tokens's result")
    expect(tuple(out.shape) == (len(Ls),), f"rnt_curve_from_tokens returned shape {tuple(out.shape)}; it should "
           f"return one r_nt(L) per L, shape ({len(Ls)},)")
    return out.double()


def _library_rnt(tokens, eos_id, Ls) -> torch.Tensor:
    from ..metrics import rnt_curve

    return torch.as_tensor(rnt_curve(_generation(tokens, eos_id), Ls))


def check_rnt_hand_example(rnt_curve_from_tokens) -> None:
    """q2, public: three continuations with their first eos at steps 3 and 5 and never (max_len 6);
    a row whose eos is at step L has terminated within L: r_nt(L) counts |y| > L (Choi et al.
    eq. 11), not Welleck et al.'s |y| >= L (Chapter 6, "Non-termination ratio")."""
    E = 9
    tokens = torch.tensor([[4, 2, E, -1, -1, -1], [1, 1, 1, 1, E, -1], [3, 3, 3, 3, 3, 3]])
    want = torch.tensor([1, 1, 2 / 3, 2 / 3, 1 / 3, 1 / 3], dtype=torch.float64)
    got = _student_rnt(rnt_curve_from_tokens, tokens, E, range(1, 7))
    if torch.allclose(got, torch.tensor([1, 1, 1, 2 / 3, 2 / 3, 1 / 3], dtype=torch.float64)):
        raise AssertionError("r_nt(L) for L = 1..6 is [1, 1, 1, 0.6667, 0.6667, 0.3333], which is Welleck et al.'s "
                             "r_L (|y| >= L). r_nt(L) counts the continuations with |y| > L, i.e. no eos among the "
                             "first L tokens (Choi et al. eq. 11; Chapter 6): a row whose eos is at step 3 has "
                             "terminated within L = 3, so r_nt(3) = 2/3")
    expect_tensor_close(got, want, "r_nt(L) for L = 1..6 with first eos at steps 3, 5, never",
                        "the fraction of rows without eos among their first L tokens (" + RNT_WHERE + ")", atol=1e-9)


def check_rnt_is_non_increasing(rnt_curve_from_tokens) -> None:
    """q2, public: r_nt(L) lies in [0, 1] and never increases with L (Proposition 6.1, part 1)."""
    tokens = _random_tokens(checks.generator(1), 50, 40, 12, 0.05)
    Ls = list(range(1, 41))
    got = _student_rnt(rnt_curve_from_tokens, tokens, 11, Ls)
    outside = got[(got < 0) | (got > 1) | got.isnan()]
    if outside.numel():
        raise AssertionError(f"r_nt(L) takes the value {fmt(outside[0])}, outside [0, 1]: it is a fraction of contexts")
    rises = (got[1:] > got[:-1] + 1e-12).nonzero()
    if rises.numel():
        i = int(rises[0])
        raise AssertionError(f"r_nt({Ls[i + 1]}) = {fmt(got[i + 1])} is above r_nt({Ls[i]}) = {fmt(got[i])}, but r_nt(L) "
                             "is non-increasing in L (Proposition 6.1, part 1): a prefix that holds eos keeps it")


def check_rnt_at_max_len(rnt_curve_from_tokens) -> None:
    """q2, public: at L = max_len, r_nt is the fraction of rows with no eos at all; Ls may come in
    any order, and the result follows it."""
    tokens = _random_tokens(checks.generator(2), 30, 25, 8, 0.03)
    never = float((~(tokens == 7).any(1)).double().mean())
    got = _student_rnt(rnt_curve_from_tokens, tokens, 7, [25, 3])
    expect_close(float(got[0]), never, "r_nt(max_len = 25)",
                 "the fraction of rows with no eos in all 25 generated tokens (" + RNT_WHERE + "; Ls = [25, 3], and the "
                 "i-th result belongs to Ls[i])", atol=1e-12)
    expect_close(float(got[1]), float(_library_rnt(tokens, 7, [3])[0]), "r_nt(3) (second entry of Ls = [25, 3])",
                 RNT_WHERE + "; the i-th result belongs to Ls[i]", atol=1e-12)


def hidden_rnt_matches_library(rnt_curve_from_tokens) -> None:
    """q2, hidden: random generations (several shapes, sparse and dense eos) against
    :func:`nmst_lib.metrics.rnt_curve`."""
    for seed, (rows, max_len, vocab, p) in enumerate([(64, 100, 50, 0.01), (1, 10, 5, 0.2), (200, 30, 3, 0.3),
                                                      (17, 500, 1000, 0.002)]):
        tokens = _random_tokens(checks.generator(200 + seed), rows, max_len, vocab, p)
        gen = checks.generator(300 + seed)
        Ls = torch.randint(1, max_len + 1, (12,), generator=gen).tolist() + [1, max_len]
        got = _student_rnt(rnt_curve_from_tokens, tokens, vocab - 1, Ls)
        expect_tensor_close(got, _library_rnt(tokens, vocab - 1, Ls),
                            f"r_nt(L) of {rows} random rows of {max_len} tokens", RNT_WHERE, atol=1e-9)


def hidden_rnt_edge_cases(rnt_curve_from_tokens) -> None:
    """q2, hidden: eos at step 1 everywhere (r_nt = 0 for every L), no eos anywhere (r_nt = 1),
    eos repeated after the first one (only the first counts), and eos id 0."""
    cases = [
        ("every row stops at step 1", torch.tensor([[5, -1, -1], [5, -1, -1]]), 5),
        ("no row ever stops", torch.tensor([[1, 2, 3], [0, 0, 0]]), 5),
        ("eos repeated after the first", torch.tensor([[1, 4, 4, 4], [4, 4, 4, 4], [1, 1, 1, 4]]), 4),
        ("eos id 0", torch.tensor([[3, 0, -1], [2, 2, 2]]), 0),
    ]
    for label, tokens, eos in cases:
        Ls = list(range(1, tokens.shape[1] + 1))
        got = _student_rnt(rnt_curve_from_tokens, tokens, eos, Ls)
        expect_tensor_close(got, _library_rnt(tokens, eos, Ls), f"r_nt(L) when {label}", RNT_WHERE, atol=1e-9)


# ---------------------------------------------------------------------------------- q3 GPT-2


def _gpt2_inputs(seed: int, vocab: int, rows: int = 3, k: int = 10, T: int = 12):
    gen = checks.generator(seed)
    contexts = torch.randint(0, vocab - 1, (rows, k), generator=gen)
    continuation = torch.randint(0, vocab - 1, (rows, T), generator=gen)
    return contexts, continuation


def _library_gpt2(gpt2, contexts, continuation, eps) -> torch.Tensor:
    from ..heads import nmst_log_probs

    inputs = torch.cat([contexts, continuation[:, :-1]], 1)
    with torch.no_grad():
        logits = gpt2(input_ids=inputs).logits[:, contexts.shape[1] - 1:]
    return nmst_log_probs(logits, gpt2.config.vocab_size - 1, eps)


def _student_gpt2(fn, gpt2, contexts, continuation, eps) -> torch.Tensor:
    with torch.no_grad():
        out = call_student(fn, gpt2, contexts.clone(), continuation.clone(), eps, name="gpt2_nmst_log_probs")
    out = _as_tensor(out, "gpt2_nmst_log_probs's result")
    want = (contexts.shape[0], continuation.shape[1], gpt2.config.vocab_size)
    expect(tuple(out.shape) == want, f"gpt2_nmst_log_probs returned shape {tuple(out.shape)}; with {want[0]} contexts "
           f"and a continuation of T = {want[1]} tokens it should return [B, T, V] = {list(want)}: one next-token "
           "distribution per step t = 1..T (step t predicts y_t)")
    expect(out.is_floating_point(), f"gpt2_nmst_log_probs returned dtype {out.dtype}, not floating point")
    return out.detach()


def _eos_suppressed_gpt2(seed: int, vocab: int = 64, eos_logit: float = -40.0):
    """A tiny GPT-2 whose eos logit is ``eos_logit`` whatever the input: the final LayerNorm gets a
    bias of ones and the (untied) eos output embedding points against it, so sigma(z_eos) ~ 0 and
    NMST's p(eos at t) sits on the floor f_lb(t) (Definition 5.1)."""
    model = tiny_gpt2(seed, vocab, tie=False)
    d = model.config.n_embd
    with torch.no_grad():
        model.transformer.ln_f.weight.fill_(1.0)
        model.transformer.ln_f.bias.fill_(1.0)
        model.lm_head.weight[vocab - 1] = eos_logit / d  # . (normalised + 1) = eos_logit (normalised has mean 0)
    return model


def check_gpt2_rows_are_distributions(gpt2_nmst_log_probs) -> None:
    """q3, public: every step's output is a distribution over the vocabulary, log-sum-exp 0
    (Proposition 7.1, part 1: the NMST layer of Definition 5.1 on any logits)."""
    model = tiny_gpt2(0)
    contexts, continuation = _gpt2_inputs(0, 64)
    got = _student_gpt2(gpt2_nmst_log_probs, model, contexts, continuation, 0.05)
    total = torch.logsumexp(got.double(), -1)
    expect_tensor_close(total, torch.zeros_like(total), "log of the total probability at each (row, step)",
                        "a distribution (Definition 5.1: p(eos) plus (1 - p(eos)) times a softmax over the other "
                        "tokens; Proposition 7.1, part 1)", atol=1e-4, rtol=0)


def check_gpt2_eos_floor(gpt2_nmst_log_probs) -> None:
    """q3, public: p(eos at step t) >= f_lb(t) = 1 - (1 - eps)^t, t = 1 for the first continuation
    token (Definition 5.1, Proposition 7.1); checked on a GPT-2 whose eos logit is -40, so that
    p(eos) sits on the floor and a step counted from 0 (or from the context) shows."""
    from ..heads import eos_lower_bound

    eps = 0.05
    model = _eos_suppressed_gpt2(1)
    contexts, continuation = _gpt2_inputs(1, 64, T=15)
    got = _student_gpt2(gpt2_nmst_log_probs, model, contexts, continuation, eps)
    p_eos = got[..., -1].double().exp()
    T = continuation.shape[1]
    floor = eos_lower_bound(torch.arange(1, T + 1, dtype=torch.float64), eps).expand_as(p_eos)
    low = p_eos < floor * (1 - 1e-4) - 1e-7
    if bool(low.any()):
        row, col = (int(i) for i in low.nonzero()[0])
        raise AssertionError(f"p(eos) at t = {col + 1} (row {row}) is {fmt(p_eos[row, col])}, below the floor "
                             f"1 - (1 - eps)^{col + 1} = {fmt(floor[row, col])} (eps = {eps}): Definition 5.1 "
                             "(Chapter 5). Step t = 1 is the prediction of the first continuation token, the one "
                             "made at the last context position (Proposition 7.1, part 2)")
    high = p_eos > floor * (1 + 1e-3) + 1e-6
    if bool(high.any()):
        row, col = (int(i) for i in high.nonzero()[0])
        raise AssertionError(f"p(eos) at t = {col + 1} is {fmt(p_eos[row, col])}, but with sigma(z_eos) ~ 0 NMST gives "
                             f"exactly the floor 1 - (1 - eps)^{col + 1} = {fmt(floor[row, col])} (Definition 5.1): "
                             "check the step count t (it starts at 1 with the first continuation token)")


def check_gpt2_matches_cached_decoding(gpt2_nmst_log_probs) -> None:
    """q3, public: one teacher-forced pass gives the log-probabilities that cached decoding gives
    step by step (Proposition 7.1, part 2), computed by :class:`nmst_lib.models.GPT2LM` with
    :class:`nmst_lib.heads.NMSTHead`."""
    from ..heads import NMSTHead
    from ..models import GPT2LM

    eps = 0.02
    model = tiny_gpt2(2)
    contexts, continuation = _gpt2_inputs(2, 64, rows=4, T=10)
    got = _student_gpt2(gpt2_nmst_log_probs, model, contexts, continuation, eps)
    lm = GPT2LM(model, NMSTHead(eps)).eval()
    state, log_probs = lm.initial_state(contexts)
    steps = [log_probs]
    for t in range(continuation.shape[1] - 1):
        state, log_probs = lm.step(state, continuation[:, t])
        steps.append(log_probs)
    want = torch.stack(steps, 1)
    expect_tensor_close(got, want, "log p(v | x, y_<t) at [row, step - 1, v]",
                        "cached decoding of the same GPT-2 with the NMST layer, step by step (Proposition 7.1, "
                        "part 2; nmst_lib.models.GPT2LM)", rtol=1e-4, atol=1e-4)


def hidden_gpt2_matches_library(gpt2_nmst_log_probs) -> None:
    """q3, hidden: other seeds, eps, context lengths and batch sizes against
    :func:`nmst_lib.heads.nmst_log_probs` on GPT-2's logits (float32)."""
    for seed, (eps, rows, k, T, V) in enumerate([(1e-3, 2, 10, 20, 64), (0.3, 5, 3, 7, 17), (0.5, 1, 1, 1, 64),
                                                 (1e-4, 3, 12, 30, 101)]):
        model = tiny_gpt2(10 + seed, V)
        contexts, continuation = _gpt2_inputs(20 + seed, V, rows=rows, k=k, T=T)
        got = _student_gpt2(gpt2_nmst_log_probs, model, contexts, continuation, eps)
        expect_tensor_close(got, _library_gpt2(model, contexts, continuation, eps),
                            f"log p[row, t - 1, v] (eps = {eps}, k = {k}, T = {T}, V = {V})",
                            NMST_WHERE + " (nmst_lib.heads.nmst_log_probs)", rtol=1e-4, atol=1e-4)


def hidden_gpt2_extreme(gpt2_nmst_log_probs) -> None:
    """q3, hidden: logits of size 1e4 (untied output embeddings scaled up) and eps = 1e-5, float32:
    the log-probabilities must stay finite and exact, so compute in log space (log_softmax,
    logsigmoid, log1p/expm1, logaddexp), as nmst_lib.heads.nmst_log_probs does."""
    for seed, (eps, scale) in enumerate([(1e-5, 1e5), (0.1, 3e4)]):
        model = tiny_gpt2(30 + seed, 64, tie=False)
        with torch.no_grad():
            model.lm_head.weight.mul_(scale)
        contexts, continuation = _gpt2_inputs(40 + seed, 64, rows=3, T=8)
        want = _library_gpt2(model, contexts, continuation, eps)
        got = _student_gpt2(gpt2_nmst_log_probs, model, contexts, continuation, eps)
        expect_tensor_close(got, want, f"log p[row, t - 1, v] with logits up to {fmt(want.abs().max())} "
                            f"(eps = {eps}, float32)", NMST_WHERE + " computed in log space", rtol=1e-4, atol=1e-3)


# ------------------------------------------------------------------------------ q4 experiment


def _entry(mapping, key: str, what: str):
    expect(isinstance(mapping, dict), f"`{what}` should be a dict with keys 'va' and 'nmst', got "
           f"{type(mapping).__name__}")
    expect(key in mapping, f"`{what}` has no entry {key!r}: it should hold 'va' and 'nmst'")
    value = mapping[key]
    if value is None or value is Ellipsis:
        raise checks.NotImplementedYet(f"`{what}[{key!r}]` is {value!r}: it is not implemented yet (replace the `...`)")
    return value


def _model_and_result(models, results, key):
    from ..models import RecurrentLM

    model = _entry(models, key, "models")
    expect(isinstance(model, RecurrentLM), f"models[{key!r}] should be an nmst_lib.models.LSTMLM, got "
           f"{type(model).__name__}")
    result = _entry(results, key, "results")
    expect(isinstance(result, dict) and "ppl" in result and "rnt" in result,
           f"results[{key!r}] should be a dict with 'ppl' and 'rnt', got {result!r}")
    return model, _as_float(result["ppl"], f"results[{key!r}]['ppl']"), _as_float(result["rnt"], f"results[{key!r}]['rnt']")


def _recomputed(model, valid, contexts, L):
    from ..decoding import decode
    from ..experiments.evaluation import evaluate_perplexity
    from ..metrics import non_termination_ratio

    was_training = model.training
    model.eval()
    try:
        ppl = evaluate_perplexity(model, valid)
        gen = decode(model, contexts, "greedy", max_len=int(L))
        return ppl, non_termination_ratio(gen, int(L))
    finally:
        model.train(was_training)


def check_experiment_numbers_recomputed(models, results, valid, exp_contexts, L_EXP) -> None:
    """q4, public: each reported validation perplexity and greedy r_nt(L_EXP) equals what the
    library computes from the student's own trained model (nmst_lib.experiments.evaluation.
    evaluate_perplexity; greedy nmst_lib.decoding.decode and nmst_lib.metrics.non_termination_ratio)."""
    expect_given({"L_EXP": L_EXP, "exp_contexts": exp_contexts},
                 {"L_EXP": EXPERIMENT["L_EXP"], "exp_contexts": valid.contexts(range(min(EXPERIMENT["N_CONTEXTS"],
                                                                                         len(valid))))})
    for key in ("va", "nmst"):
        model, ppl, rnt = _model_and_result(models, results, key)
        want_ppl, want_rnt = _recomputed(model, valid, exp_contexts, L_EXP)
        expect_close(ppl, want_ppl, f"the reported validation perplexity of the {key.upper()} model",
                     "the library's per-token perplexity of the same model on `valid` (continuation tokens and eos, "
                     "Chapter 6)", rtol=1e-4)
        expect_close(rnt, want_rnt, f"the reported greedy r_nt({L_EXP}) of the {key.upper()} model",
                     f"greedy search on `exp_contexts` to L = {L_EXP} with the same model (Chapter 6, "
                     "nmst_lib.metrics.non_termination_ratio)", atol=1e-9)


def check_experiment_guarantee_and_training(models, results, EPS_EXP, L_EXP) -> None:
    """q4, public: the NMST model's greedy r_nt(L_EXP) is 0 because L_EXP >= t_1/2 (Proposition 6.1,
    part 2; Lemma 4.1), and both models learned something: perplexity well below the uniform
    model's |V|."""
    from ..theory import first_step_eos_above_half

    expect_given({"EPS_EXP": EPS_EXP, "L_EXP": L_EXP}, {"EPS_EXP": EXPERIMENT["EPS_EXP"], "L_EXP": EXPERIMENT["L_EXP"]})
    t_half = first_step_eos_above_half(EPS_EXP)
    for key in ("va", "nmst"):
        model, ppl, rnt = _model_and_result(models, results, key)
        V = model.vocab_size
        expect(ppl < V / 4, f"the {key.upper()} model's validation perplexity is {fmt(ppl)}, not far below the "
               f"{V} of a uniform model over its vocabulary: it has barely learned (train it as asked, and report "
               "the perplexity of the trained model)")
        if key == "nmst":
            expect(L_EXP >= t_half, f"L_EXP = {L_EXP} is below t_1/2 = {t_half} for eps = {EPS_EXP}: keep the given "
                   "constants")
            expect(rnt == 0, f"the NMST model's greedy r_nt({L_EXP}) is {fmt(rnt)}, but with eps = {EPS_EXP} greedy "
                   f"search stops by t_1/2 = {t_half} <= {L_EXP} whatever the weights (Proposition 6.1, part 2): "
                   "is models['nmst'] built with NMSTHead(EPS_EXP)?")


def hidden_experiment_models(models, EPS_EXP) -> None:
    """q4, hidden: the two models are LSTMs with the asked output layers (VA: the vanilla softmax;
    NMST: Definition 5.1 with eps = EPS_EXP), returned in eval mode as the problem asks."""
    from ..heads import NMSTHead, VanillaHead
    from ..models import LSTMLM

    expect_given({"EPS_EXP": EPS_EXP}, {"EPS_EXP": EXPERIMENT["EPS_EXP"]})
    for key, head_type in (("va", VanillaHead), ("nmst", NMSTHead)):
        model = _entry(models, key, "models")
        expect(isinstance(model, LSTMLM), f"models[{key!r}] should be an nmst_lib.models.LSTMLM, got "
               f"{type(model).__name__}")
        expect(type(model.head) is head_type, f"models[{key!r}] has the output layer {type(model.head).__name__}, "
               f"expected {head_type.__name__}")
        expect(not model.training, f"models[{key!r}] is in training mode: train_lm should return model.eval()")
    eps = float(models["nmst"].head.eps)
    expect_close(eps, EPS_EXP, "the NMST model's eps", "EPS_EXP", rtol=1e-12)
