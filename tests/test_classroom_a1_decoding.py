"""Unit tests of the checks of Assignment 1 (nmst_lib.classroom.a1_decoding).

Each check passes on a correct implementation (the library's), fails with its teaching message
on at least one planted bug, and turns a stub (returns None) into "not implemented yet".
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nmst_lib.classroom import a1_decoding as checks
from nmst_lib.classroom.checks import NotImplementedYet
from nmst_lib.decoding import (
    decode,
    nucleus_mask,
    restrict_log_probs,
    top_k_mask,
)
from nmst_lib.markov import survival_curve
from nmst_lib.metrics import rnt_curve
from nmst_lib.theory import inconsistent_rnn

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------- reference and buggy code


def nucleus_ok(log_probs, mu):
    return nucleus_mask(log_probs, mu)


def _nucleus_from_sorted(log_probs, mu, keep_rule, descending=True, ties_to_larger_id=False):
    lp = log_probs.flip(-1) if ties_to_larger_id else log_probs
    sorted_lp, order = torch.sort(lp, dim=-1, descending=descending, stable=True)
    probs = sorted_lp.double().exp()
    keep = keep_rule(probs.cumsum(-1) - probs, probs.cumsum(-1), mu)
    mask = torch.zeros_like(keep).scatter(-1, order, keep)
    return mask.flip(-1) if ties_to_larger_id else mask


def nucleus_inclusive(log_probs, mu):  # keeps a token while the mass *including* it is below mu
    return _nucleus_from_sorted(log_probs, mu, lambda before, upto, m: upto < m)


def nucleus_inclusive_top(log_probs, mu):  # the same, but never empty
    return _nucleus_from_sorted(log_probs, mu, lambda before, upto, m: (upto < m) | (before == 0))


def nucleus_ascending(log_probs, mu):  # sorted the wrong way: the least probable tokens
    return _nucleus_from_sorted(log_probs, mu, lambda before, upto, m: before < m, descending=False)


def nucleus_le(log_probs, mu):  # "<=" where Definition 1.4 needs "<": not the smallest set at equality
    return _nucleus_from_sorted(log_probs, mu, lambda before, upto, m: before <= m)


def nucleus_one_extra(log_probs, mu):  # keeps one token too many
    return _nucleus_from_sorted(log_probs, mu, lambda before, upto, m: (before - (upto - before)) < m)


def nucleus_ties_to_larger_id(log_probs, mu):
    return _nucleus_from_sorted(log_probs, mu, lambda before, upto, m: before < m, ties_to_larger_id=True)


def nucleus_unstable_sort(log_probs, mu):  # torch.sort without stable=True: tied tokens in any order
    sorted_lp, order = torch.sort(log_probs, dim=-1, descending=True)
    probs = sorted_lp.double().exp()
    keep = (probs.cumsum(-1) - probs) < mu
    return torch.zeros_like(keep).scatter(-1, order, keep)


def nucleus_probability_space(log_probs, mu):  # Exercise 1.1's solution: fine except at mu = 1 in float32
    sorted_lp, order = torch.sort(log_probs, dim=-1, descending=True, stable=True)
    sorted_p = sorted_lp.exp()
    keep = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < mu
    return torch.zeros_like(keep).scatter(-1, order, keep)


def consistent_ok(log_probs, k, eos_id):
    return restrict_log_probs(log_probs, top_k_mask(log_probs, k, eos_id=eos_id))


def consistent_without_eos(log_probs, k, eos_id):
    return restrict_log_probs(log_probs, top_k_mask(log_probs, k))


def consistent_not_renormalised(log_probs, k, eos_id):
    return log_probs.masked_fill(~top_k_mask(log_probs, k, eos_id=eos_id), -math.inf)


def consistent_softmax_of_probs(log_probs, k, eos_id):  # a softmax of probabilities, not of log-probabilities
    mask = top_k_mask(log_probs, k, eos_id=eos_id)
    return torch.log_softmax(log_probs.exp().masked_fill(~mask, -math.inf), dim=-1)


def consistent_eos_last(log_probs, k, eos_id):  # assumes eos is the last id
    return consistent_ok(log_probs, k, log_probs.shape[-1] - 1)


def consistent_ties_to_larger_id(log_probs, k, eos_id):
    flipped = log_probs.flip(-1)
    return consistent_ok(flipped, k, log_probs.shape[-1] - 1 - eos_id).flip(-1)


def consistent_unstable_sort(log_probs, k, eos_id):  # the top k by torch.sort without stable=True
    order = torch.sort(log_probs, dim=-1, descending=True).indices[..., :k]
    mask = torch.zeros_like(log_probs, dtype=torch.bool).scatter(-1, order, True)
    mask[..., eos_id] = True
    return restrict_log_probs(log_probs, mask)


def consistent_probability_space(log_probs, k, eos_id):  # underflows for float32 logits of size 1e4
    probs = log_probs.exp() * top_k_mask(log_probs, k, eos_id=eos_id)
    return (probs / probs.sum(-1, keepdim=True)).log()


def rnt_ok(kernel, eos_id, start_token, Ls):
    return survival_curve(kernel, eos_id, start_token, Ls)


def _rnt_loop(kernel, eos_id, start_token, Ls, shift=0, keep_eos=False, eos_last=False, dtype=torch.float64):
    V = kernel.shape[0]
    transient = list(range(V)) if keep_eos else ([v for v in range(V - 1)] if eos_last else
                                                 [v for v in range(V) if v != eos_id])
    Q = kernel[transient][:, transient].to(dtype)
    pi = kernel[start_token, transient].to(dtype)
    values = {}
    for L in range(1, max(Ls) + 1 + shift):
        values[L - shift] = float(pi.sum())
        pi = pi @ Q
    return [values[L] for L in Ls]


def rnt_off_by_one(kernel, eos_id, start_token, Ls):  # returns r_nt(L + 1)
    return _rnt_loop(kernel, eos_id, start_token, Ls, shift=1)


def rnt_keeps_eos(kernel, eos_id, start_token, Ls):  # eos not removed: the mass never leaves
    return _rnt_loop(kernel, eos_id, start_token, Ls, keep_eos=True)


def rnt_eos_last(kernel, eos_id, start_token, Ls):
    return _rnt_loop(kernel, eos_id, start_token, Ls, eos_last=True)


def rnt_float32(kernel, eos_id, start_token, Ls):
    return _rnt_loop(kernel, eos_id, start_token, Ls, dtype=torch.float32)


def tokens_ok(tokens, eos_id, Ls):
    is_eos = tokens == eos_id
    first = torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, tokens.shape[1] + 1)
    return np.array([(first > L).double().mean().item() for L in Ls])


def tokens_welleck(tokens, eos_id, Ls):  # |y| >= L (Welleck et al.'s r_L), not |y| > L
    is_eos = tokens == eos_id
    first = torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, tokens.shape[1] + 1)
    return np.array([(first >= L).double().mean().item() for L in Ls])


def stub(*args, **kwargs):
    return None


# ----------------------------------------------------------------------------- q1, q2, q4, q5(a)

PASSING = [
    (checks.check_nucleus_keeps_the_top_token, nucleus_ok),
    (checks.check_nucleus_is_a_most_probable_set, nucleus_ok),
    (checks.check_nucleus_mass_reaches_mu, nucleus_ok),
    (checks.check_nucleus_is_the_smallest_set, nucleus_ok),
    (checks.hidden_nucleus_matches_library, nucleus_ok),
    (checks.hidden_nucleus_breaks_ties_by_token_id, nucleus_ok),
    (checks.hidden_nucleus_extreme_logits_float32, nucleus_ok),
    (checks.hidden_nucleus_mu_one_keeps_the_support, nucleus_ok),
    (checks.check_consistent_top_k_candidate_set, consistent_ok),
    (checks.check_consistent_top_k_never_lowers_eos, consistent_ok),
    (checks.check_consistent_top_k_keeps_ratios, consistent_ok),
    (checks.hidden_consistent_top_k_matches_library, consistent_ok),
    (checks.hidden_consistent_top_k_ties, consistent_ok),
    (checks.hidden_consistent_top_k_extreme_logits_float32, consistent_ok),
    (checks.check_exact_rnt_first_step_and_monotone, rnt_ok),
    (checks.check_exact_rnt_geometric, rnt_ok),
    (checks.check_exact_rnt_trapped_loop, rnt_ok),
    (checks.hidden_exact_rnt_matches_library, rnt_ok),
    (checks.hidden_exact_rnt_eos_not_last, rnt_ok),
    (checks.hidden_exact_rnt_long_horizon, rnt_ok),
    (checks.check_rnt_from_tokens_small_example, tokens_ok),
    (checks.hidden_rnt_from_tokens_matches_library, tokens_ok),
]

FAILING = [
    (checks.check_nucleus_keeps_the_top_token, nucleus_inclusive, "empty candidate set"),
    (checks.check_nucleus_is_a_most_probable_set, nucleus_ascending, "drops the more probable token"),
    (checks.check_nucleus_mass_reaches_mu, nucleus_inclusive_top, "below mu"),
    (checks.check_nucleus_is_the_smallest_set, nucleus_le, "the mass is 0.5 >= mu already"),
    (checks.hidden_nucleus_matches_library, nucleus_one_extra, "rows differ from the nucleus of Definition 1.4"),
    (checks.hidden_nucleus_breaks_ties_by_token_id, nucleus_ties_to_larger_id, "ties go to the smaller token id"),
    (checks.hidden_nucleus_breaks_ties_by_token_id, nucleus_unstable_sort, "ties go to the smaller token id"),
    (checks.hidden_nucleus_extreme_logits_float32, nucleus_ties_to_larger_id, "|logit| ~ 1e4"),
    (checks.hidden_nucleus_mu_one_keeps_the_support, nucleus_probability_space, "mu = 1: every token of positive"),
    (checks.check_consistent_top_k_candidate_set, consistent_without_eos, "consistent top-k always adds eos"),
    (checks.check_consistent_top_k_never_lowers_eos, consistent_not_renormalised, "not 1; renormalise"),
    (checks.check_consistent_top_k_keeps_ratios, consistent_softmax_of_probs, "must be the same constant"),
    (checks.hidden_consistent_top_k_matches_library, consistent_eos_last, "consistent top-k (Definition 3.1"),
    (checks.hidden_consistent_top_k_ties, consistent_ties_to_larger_id, "ties go to the smaller token id, so V_k holds token"),
    (checks.hidden_consistent_top_k_ties, consistent_unstable_sort, "torch.sort(..., descending=True, stable=True)"),
    (checks.hidden_consistent_top_k_extreme_logits_float32, consistent_probability_space,
     "compute in log space"),
    (checks.check_exact_rnt_first_step_and_monotone, rnt_off_by_one, "1 - K_S[c, eos]"),
    (checks.check_exact_rnt_geometric, rnt_off_by_one, "(1 - delta)^L"),
    (checks.check_exact_rnt_trapped_loop, rnt_keeps_eos, "greedy successor is eos"),
    (checks.hidden_exact_rnt_matches_library, rnt_off_by_one, "nmst_lib.markov.survival_curve"),
    (checks.hidden_exact_rnt_eos_not_last, rnt_eos_last, "eos_id = 0"),
    (checks.hidden_exact_rnt_long_horizon, rnt_float32, "p(eos) = 1e-6"),
    (checks.check_rnt_from_tokens_small_example, tokens_welleck, "has stopped within L"),
    (checks.hidden_rnt_from_tokens_matches_library, tokens_welleck, "nmst_lib.metrics.rnt_curve"),
]


@pytest.mark.parametrize("check, fn", PASSING, ids=[c.__name__ for c, _ in PASSING])
def test_check_passes_on_a_correct_implementation(check, fn):
    check(fn)


@pytest.mark.parametrize("check, fn, message", FAILING, ids=[c.__name__ for c, _, _ in FAILING])
def test_check_fails_on_a_planted_bug_with_its_message(check, fn, message):
    with pytest.raises(AssertionError, match=None) as info:
        check(fn)
    assert message in str(info.value), str(info.value)


@pytest.mark.parametrize("check", [c for c, _ in PASSING], ids=[c.__name__ for c, _ in PASSING])
def test_check_says_a_stub_is_not_implemented(check):
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check(stub)


def test_a_function_that_raises_is_reported_with_its_inputs():
    def broken(log_probs, mu):
        raise IndexError("index 30 is out of bounds")
    with pytest.raises(AssertionError, match=r"`nucleus_candidates` raised IndexError: index 30 .*shape \(300, 20\)"):
        checks.check_nucleus_keeps_the_top_token(broken)


def test_a_float_mask_is_refused_with_a_hint():
    with pytest.raises(AssertionError, match="return a boolean mask"):
        checks.check_nucleus_keeps_the_top_token(lambda lp, mu: nucleus_mask(lp, mu).float())


def test_the_exact_boundary_row_is_the_one_reported():
    # p = (1/2, 1/4, 1/8, 1/8), mu = 1/2: the nucleus is the first token, "<=" keeps two
    with pytest.raises(AssertionError, match=r"p = \[0.5, 0.25, 0.125, 0.125\], mu = 0.5: your set keeps 2 tokens"):
        checks.check_nucleus_is_the_smallest_set(nucleus_le)


# ----------------------------------------------------------------------------- q5: the experiment

SETTINGS = checks.EXPERIMENT_DECODERS
# Problem 5's checks on a shorter setting of the same kind (the checks read it from
# ``checks.EXPERIMENT``, which these tests patch; a test below checks that the real one is the
# master notebook's given cell).
SMALL = {"MAX_LEN": 400, "SEED": 2, "LS": [1, 5, 20, 100, 400], "N_CONTEXTS": 40, "CONTEXT_LEN": 3}
MAX_LEN, LS = SMALL["MAX_LEN"], SMALL["LS"]
REAL_EXPERIMENT = dict(checks.EXPERIMENT)


@pytest.fixture(autouse=True)
def small_experiment(monkeypatch):
    for key, value in SMALL.items():
        monkeypatch.setitem(checks.EXPERIMENT, key, value)


@pytest.fixture(scope="module")
def experiment():
    torch.set_num_threads(1)
    rnn = inconsistent_rnn(6, seed=0, eos_margin=1.0, device="cpu")
    contexts = torch.randint(0, rnn.eos_id, (40, 3), generator=torch.Generator().manual_seed(0))
    generations = {name: decode(rnn, contexts, max_len=MAX_LEN, generator=torch.Generator().manual_seed(2), **kw)
                   for name, kw in SETTINGS.items()}
    curves = {name: rnt_curve(g, LS) for name, g in generations.items()}
    return rnn, contexts, generations, curves


def test_experiment_checks_pass_on_the_library(experiment):
    rnn, contexts, generations, curves = experiment
    checks.check_experiment_follows_the_theory(generations, curves, rnn, LS)
    checks.hidden_experiment_curves_match_generations(generations, curves, LS)
    checks.hidden_experiment_generations_follow_their_decoders(generations, contexts, rnn, MAX_LEN, 2)


def test_experiment_checks_say_the_experiment_has_not_run(experiment):
    rnn, contexts, _, _ = experiment
    with pytest.raises(AssertionError, match="not the dict that `run_decoders` returns"):
        checks.check_experiment_follows_the_theory(None, None, rnn, LS)
    with pytest.raises(AssertionError, match="not the dict that `run_decoders` returns"):
        checks.hidden_experiment_generations_follow_their_decoders(None, contexts, rnn, MAX_LEN, 2)
    _, _, generations, curves = experiment
    with pytest.raises(AssertionError, match="rnt_from_tokens is not implemented yet"):
        checks.check_experiment_follows_the_theory(generations, {name: None for name in curves}, rnn, LS)


def test_a_plain_decoder_that_stops_contradicts_theorem_2_1(experiment):
    rnn, _, generations, curves = experiment
    swapped = dict(curves, **{"top-2": curves["consistent top-2"]})
    with pytest.raises(AssertionError, match=r"top-2: r_nt\(L = 1\) = .*Theorem 2.1"):
        checks.check_experiment_follows_the_theory(generations, swapped, rnn, LS)
    swapped = dict(curves, **{"consistent nucleus-0.6": curves["nucleus-0.6"]})
    with pytest.raises(AssertionError, match=r"above the guarantee \(1 - xi\)\^L"):
        checks.check_experiment_follows_the_theory(generations, swapped, rnn, LS)


def test_curves_must_be_those_of_the_generations(experiment):
    _, _, generations, curves = experiment
    swapped = dict(curves, **{"ancestral": curves["consistent top-2"]})
    with pytest.raises(AssertionError, match=r"curves\['ancestral'\].*recomputed from generations"):
        checks.hidden_experiment_curves_match_generations(generations, swapped, LS)


def test_generations_must_follow_their_decoders(experiment):
    rnn, contexts, generations, _ = experiment
    top3 = decode(rnn, contexts, "top-k", k=3, max_len=MAX_LEN, generator=torch.Generator().manual_seed(2))
    with pytest.raises(AssertionError, match=r"generations\['top-2'\].*outside the candidate set"):
        checks.hidden_experiment_generations_follow_their_decoders(dict(generations, **{"top-2": top3}), contexts,
                                                                   rnn, MAX_LEN, 2)
    fake = dict(generations, ancestral=generations["consistent top-2"])
    with pytest.raises(AssertionError, match="ancestral sampling draws from all of V"):
        checks.hidden_experiment_generations_follow_their_decoders(fake, contexts, rnn, MAX_LEN, 2)
    with pytest.raises(AssertionError, match="`MAX_LEN` is 401, but the problem fixes 400: keep the given cell"):
        checks.hidden_experiment_generations_follow_their_decoders(generations, contexts, rnn, MAX_LEN + 1, 2)


def test_samplers_decoded_greedily_or_with_one_shared_generator_are_not_the_recipe(experiment):
    """Greedy tokens stay inside every candidate set: only the recipe (same settings, a fresh
    generator seeded with SEED per decoder) tells top-2 and nucleus-0.6 decoded greedily apart."""
    rnn, contexts, generations, _ = experiment
    greedy = {name: generations["greedy"] for name in ("top-2", "nucleus-0.6")}
    with pytest.raises(AssertionError, match=r"generations\['top-2'\], row \d+, step t = \d+: token \d+, but the "
                       r"statement's recipe .*method='top-k', k=2\) with seed = SEED = 2 gives"):
        checks.hidden_experiment_generations_follow_their_decoders(dict(generations, **greedy), contexts, rnn,
                                                                   MAX_LEN, 2)
    shared = torch.Generator().manual_seed(2)
    one_generator = {name: decode(rnn, contexts, max_len=MAX_LEN, generator=shared, **kw) for name, kw in SETTINGS.items()}
    with pytest.raises(AssertionError, match="a fresh generator seeded with SEED"):
        checks.hidden_experiment_generations_follow_their_decoders(one_generator, contexts, rnn, MAX_LEN, 2)
    with pytest.raises(AssertionError, match="`SEED` is 3, but the problem fixes 2"):
        checks.hidden_experiment_generations_follow_their_decoders(generations, contexts, rnn, MAX_LEN, 3)


def test_experiment_checks_grade_the_problems_experiment_not_an_edited_one(experiment):
    """Edited constants of the given cell (a shorter LS, other contexts, another RNN) fail with
    "keep the given cell", however well the numbers fit the edited setting."""
    rnn, contexts, generations, curves = experiment
    with pytest.raises(AssertionError, match=r"`LS` is \[1, 5\], but the problem fixes \[1, 5, 20, 100, 400\]"):
        checks.check_experiment_follows_the_theory(generations, {k: v[:2] for k, v in curves.items()}, rnn, [1, 5])
    with pytest.raises(AssertionError, match="`LS` is"):
        checks.hidden_experiment_curves_match_generations(generations, curves, [1, 5])
    other = inconsistent_rnn(6, seed=1, eos_margin=1.0, device="cpu")
    with pytest.raises(AssertionError, match=r"`rnn` is a model \(InconsistentRNN\) with other weights or settings"):
        checks.check_experiment_follows_the_theory(generations, curves, other, LS)
    with pytest.raises(AssertionError, match=r"`contexts` is a tensor of shape \(5, 3\)"):
        checks.hidden_experiment_generations_follow_their_decoders(generations, contexts[:5], rnn, MAX_LEN, 2)


def test_the_checks_setting_is_the_master_notebooks_given_cell():
    """``EXPERIMENT``, ``experiment_rnn`` and ``experiment_contexts`` are what Problem 5's given
    cell in the master notebook sets up (the checks grade that experiment)."""
    import json

    from nmst_lib.classroom.build import master_notebook

    master = master_notebook("a1_decoding")
    cells = ["".join(c["source"]) for c in json.loads(master.read_text(encoding="utf-8"))["cells"]]
    given = next(c for c in cells if "MAX_LEN, SEED =" in c).split("generations = run_decoders")[0]
    namespace = {"torch": torch, "math": math, "inconsistent_rnn": inconsistent_rnn}
    exec(given, namespace)
    for key, value in REAL_EXPERIMENT.items():
        checks.EXPERIMENT[key] = value  # the autouse fixture restores the small setting afterwards
    rnn = checks.experiment_rnn()
    checks.expect_given({k: namespace[k] for k in ("MAX_LEN", "SEED", "LS", "rnn", "contexts")},
                        {"MAX_LEN": REAL_EXPERIMENT["MAX_LEN"], "SEED": REAL_EXPERIMENT["SEED"],
                         "LS": REAL_EXPERIMENT["LS"], "rnn": rnn, "contexts": checks.experiment_contexts(rnn)})


def test_xi_is_the_bounded_state_floor(experiment):
    rnn = experiment[0]
    xi = checks.bounded_state_xi(rnn)
    u_plus = rnn.output_embeddings.abs().sum(dim=1).max().item()
    assert math.isclose(xi, math.exp(-2 * u_plus) / 6)
    assert 1e-4 < xi < 1e-3


def test_a_tensor_checks_message_says_where_the_worst_entry_is_apart_from_what_it_is():
    """The index of the worst entry is written "at index [i, j]", not glued onto the description
    ("...eps = 0.3[2, 24, 3]"), and a 0-dimensional tensor has none."""
    from nmst_lib.classroom.checks import expect_tensor_close

    want = torch.zeros(2, 3, dtype=torch.float64)
    got = want.clone()
    got[1, 2] = 0.5
    with pytest.raises(AssertionError) as err:
        expect_tensor_close(got, want, "your log-probabilities at eps = 0.3", "the layer's formula")
    assert str(err.value) == ("your log-probabilities at eps = 0.3, at index [1, 2], is 0.5, "
                              "but the layer's formula gives 0"), str(err.value)
    with pytest.raises(AssertionError) as err:
        expect_tensor_close(torch.tensor(1.0), torch.tensor(0.0), "your r_nt", "the definition")
    assert str(err.value).startswith("your r_nt is 1"), str(err.value)
