"""Unit tests of the checks of Assignment 4 (nmst_lib.classroom.a4_sparse_temperature).

Every check passes on a correct implementation (the library's, or the master notebook's solution),
fails with its intended message on a planted bug, and reports a stub (returns None) as "not
implemented yet"."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from nmst_lib import decoding, entmax, metrics, theory
from nmst_lib.classroom import a4_mismatch
from nmst_lib.classroom import a4_sparse_temperature as A
from nmst_lib.classroom.checks import NotImplementedYet
from nmst_lib.temperature import normalised_temperature


# ------------------------------------------------------------------ correct implementations
def solution_sparsemax(z):
    """The master notebook's solution (Theorem 8.2)."""
    z = z - z.amax(dim=-1, keepdim=True)
    zs = torch.sort(z, dim=-1, descending=True).values
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    cumsum = torch.cumsum(torch.nan_to_num(zs, neginf=0.0), dim=-1)
    k_star = (1 + k * zs > cumsum).sum(dim=-1, keepdim=True)
    tau = (cumsum.gather(-1, k_star - 1) - 1) / k_star.to(z.dtype)
    return torch.clamp(z - tau, min=0)


def library_eps_ppl(p, V, kappa):
    return metrics.epsilon_perplexity(p, V, eps=kappa)[0]


def library_temperature(h, W1, W2, a, b):
    return normalised_temperature(h @ W1 @ W2, "sigmoid", a=a, b=b)


def _sweep(scores=None, seed=0, rows=slice(None, -1)):
    scores = A.sweep_scores() if scores is None else scores
    S = A.SWEEP
    contexts = torch.arange(S["n"]).remainder(S["vocab_size"] - 1).unsqueeze(1)
    out = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for T in S["temperatures"]:
            q = entmax.entmax(scores[rows] / T, S["alpha"])
            gen = decoding.decode(A.TemperedBigram(scores, S["alpha"], T), contexts, "ancestral", max_len=max(S["Ls"]),
                                  generator=torch.Generator().manual_seed(seed))
            out[T] = {"support": float((q > 0).sum(-1).double().mean()), "eos_rows": int((q[:, -1] > 0).sum()),
                      "rnt": [metrics.non_termination_ratio(gen, L) for L in S["Ls"]]}
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def results():
    return _sweep()


def solution_argmax_reachable(z, lo, hi):
    """The master notebook's solution (Proposition 9.4, part 1)."""
    largest = torch.where(z >= 0, z / lo, z / hi)
    smallest = torch.where(z >= 0, z / hi, z / lo)
    if z.shape[-1] == 1:
        return torch.ones_like(z, dtype=torch.bool)
    top2 = smallest.topk(2, dim=-1)
    is_first = torch.zeros_like(z, dtype=torch.bool).scatter(
        -1, top2.indices[..., :1], True)
    others = torch.where(is_first, top2.values[..., 1:2],
                         top2.values[..., :1])
    return largest > others


def library_reading(eta, a, b):
    return normalised_temperature(eta, "softmax", a=a, b=b)


def library_reachable(z, lo, hi):
    return theory.can_become_argmax(z, None, lo, hi)


# ------------------------------------------------------------------ planted bugs
def _naive_log_softmax(z, T):
    e = torch.exp(z / T)
    return torch.log(e / e.sum(-1, keepdim=True))


def _float32_inside(z):
    return solution_sparsemax(z.float()).to(z.dtype)


def _masked_as_zero(z):
    return solution_sparsemax(torch.nan_to_num(z, neginf=0.0))  # -inf read as a score of 0


def _others_max(r):
    """max over i != v of r_i, for every v (a loop: the planted bugs below)."""
    V = r.shape[-1]
    return torch.stack([torch.cat([r[..., :v], r[..., v + 1:]], -1).amax(-1)
                        for v in range(V)], -1)


def _reachable_ignoring_sign(z, lo, hi):
    """z_v/lo is taken as the largest ratio and z_v/hi as the smallest, also
    for negative logits."""
    return z / lo > _others_max(z / hi)


def _reachable_not_strict(z, lo, hi):
    largest = torch.where(z >= 0, z / lo, z / hi)
    return largest >= _others_max(torch.where(z >= 0, z / hi, z / lo))


def _reachable_without_the_single_token(z, lo, hi):
    largest = torch.where(z >= 0, z / lo, z / hi)
    top2 = torch.where(z >= 0, z / hi, z / lo).topk(2, dim=-1)  # fails for V = 1
    is_first = torch.zeros_like(z, dtype=torch.bool).scatter(
        -1, top2.indices[..., :1], True)
    return largest > torch.where(is_first, top2.values[..., 1:2],
                                 top2.values[..., :1])


def _argmax_only(z, lo, hi):
    return torch.nn.functional.one_hot(z.argmax(-1), z.shape[-1]).bool()


BUGS = {
    # q1
    "check_sparsemax_on_simplex": [
        (lambda z: torch.clamp(z - z.amax(-1, keepdim=True) + 1, min=0), "not 1"),
        (lambda z: z - z.mean(-1, keepdim=True) + 1.0 / z.shape[-1], "negative entry"),
    ],
    "check_sparsemax_threshold_form": [(lambda z: torch.softmax(z, -1), "one threshold tau")],
    "check_sparsemax_shift_invariance": [
        (lambda z: solution_sparsemax(z / z.abs().amax(-1, keepdim=True)), "Corollary 8.1, part 3")],
    "check_sparsemax_two_tokens": [(lambda z: solution_sparsemax(2 * z), "Exercise 8.2")],
    "hidden_sparsemax_matches_library": [(lambda z: torch.softmax(z, -1), "nmst_lib.entmax.sparsemax")],
    "hidden_sparsemax_extreme_scores": [(_float32_inside, "|z| = 1e4")],
    "hidden_sparsemax_ties": [
        (lambda z: solution_sparsemax(z + 1e-6 * torch.arange(z.shape[-1], dtype=z.dtype)), "tied integer scores")],
    "hidden_sparsemax_float32": [(lambda z: solution_sparsemax(z.double()), "keep the input's dtype")],
    "hidden_sparsemax_masked_tokens": [(_masked_as_zero, "must get probability exactly 0")],
    # q2
    "check_eps_perplexity_without_smoothing": [
        (lambda p, V, k: 1.0 / float(p.mean()), "plain perplexity"),
        (lambda p, V, k: float(torch.exp(-torch.log(p.float()).mean())), "float32 rounding does: accumulate the mean")],
    "check_eps_perplexity_uniform_and_zeros": [
        (lambda p, V, k: math.exp(-float((torch.log(p + k) - math.log1p(k)).mean())), "1/|V| for every kappa"),
        (lambda p, V, k: metrics.epsilon_perplexity(p, V, eps=k), "returned a tuple")],
    "check_sparsemax_score_bounds": [
        (lambda p, y: p.gather(-1, y[..., None])[..., 0] + (1 - (p * p).sum(-1)), "1/|V| + (1 - 1/|V|)/2")],
    "check_sparsemax_score_whole_distribution": [
        (lambda p, y: p.gather(-1, y[..., None])[..., 0], "looks at the whole distribution")],
    "hidden_eps_perplexity_matches_library": [
        (lambda p, V, k: math.exp(-float((torch.log(p.float() + k) - math.log1p(k * V)).mean())),
         "nmst_lib.metrics.epsilon_perplexity")],
    "hidden_eps_perplexity_zero_probabilities": [
        (lambda p, V, k: library_eps_ppl(p.clamp(min=1e-12), V, k), "plain perplexity, +inf")],
    "hidden_sparsemax_score_matches_library": [
        (lambda p, y: 1 - ((p - torch.nn.functional.one_hot(y, p.shape[-1]).to(p.dtype)) ** 2).sum(-1),
         "nmst_lib.metrics.sparsemax_score")],
    # q3
    "check_temperature_range": [
        (lambda h, W1, W2, a, b: (torch.sigmoid(h @ W1 @ W2) + a) * b, "outside [a/b, (1 + a)/b]")],
    "check_temperature_constant_start": [
        (lambda h, W1, W2, a, b: (torch.softmax(h @ W1 @ W2, -1) + a) / b, "(1/|V| + a)/b")],
    "check_ct_log_probs_global": [
        (lambda z, T: torch.log_softmax(z * T, -1), "log softmax(z / T)"),
        (lambda z, T: z / T - torch.logsumexp(z, -1, keepdim=True), "log softmax(z / T)")],
    "check_global_temperature_entropy_and_ranking": [
        (lambda z, T: torch.log_softmax(z * T, -1), "Proposition 9.2")],
    "hidden_temperature_matches_library": [
        (lambda h, W1, W2, a, b: (torch.softmax(h @ W1 @ W2, -1) + a) / b, "ContextualTemperature")],
    "hidden_ct_log_probs_matches_library": [
        (lambda z, T: torch.log_softmax(z / T.mean(-1, keepdim=True), -1) if isinstance(T, torch.Tensor)
         else torch.log_softmax(z / T, -1), "nmst_lib.theory.tempered_log_softmax")],
    "hidden_ct_log_probs_extreme": [(_naive_log_softmax, "|z| = 1e4")],
    # q7
    "check_softmax_reading_mean": [
        (lambda eta, a, b: (torch.sigmoid(eta) + a) / b, "(1 + |V| a)/b"),
        (lambda eta, a, b: (torch.softmax(eta, 0) + a) / b,
         "a softmax over another dimension"),
        (lambda eta, a, b: (eta.exp() / eta.exp().sum(-1, keepdim=True) + a) / b,
         "with torch.softmax")],
    "check_softmax_reading_few_tokens_move": [
        (lambda eta, a, b: (torch.sigmoid(eta) + a) / b, "at most 1/(b delta)"),
        (lambda eta, a, b: (torch.softmax(eta, -1) - 1 / eta.shape[-1] + a) / b,
         "below a/b")],
    "hidden_softmax_reading_matches_library": [
        (lambda eta, a, b: (torch.softmax(eta, -1) + b) / a,
         "normalised_temperature(eta, 'softmax')"),
        (lambda eta, a, b: ((torch.softmax(eta.double(), -1) + a) / b),
         "keep the input's dtype")],
    "check_reachable_global_temperature": [
        (_reachable_not_strict, "*strict* argmax"),
        (lambda z, lo, hi: torch.ones_like(z, dtype=torch.bool),
         "only the largest logit")],
    "check_reachable_positive_logits": [(_argmax_only, "part 2 says")],
    "check_reachable_shift": [
        (_reachable_ignoring_sign, "largest at the largest temperature")],
    "check_reachable_against_search": [
        (_reachable_ignoring_sign, "makes it so"),
        (lambda z, lo, hi: torch.ones_like(z, dtype=torch.bool),
         "no choice of temperatures")],
    "hidden_reachable_matches_library": [
        (_reachable_ignoring_sign, "can_become_argmax disagrees")],
    "hidden_reachable_extreme": [
        (_reachable_without_the_single_token, "handle |V| = 1"),
        (lambda z, lo, hi: library_reachable(z, lo, hi).float(),
         "return a bool mask")],
}

CORRECT = {
    "sparsemax": solution_sparsemax,
    "epsilon_perplexity": library_eps_ppl,
    "sparsemax_score": metrics.sparsemax_score,
    "contextual_temperature": library_temperature,
    "ct_log_probs": theory.tempered_log_softmax,
    "softmax_reading_temperature": library_reading,
    "argmax_reachable": library_reachable,
}
ARG_OF = {}
for _name in BUGS:
    _fn = getattr(A, _name)
    ARG_OF[_name] = _fn.__code__.co_varnames[0]

FUNCTION_CHECKS = sorted(BUGS)
SWEEP_CHECKS = ["check_sweep_format", "check_sweep_theorem_8_6", "check_sweep_monotone",
                "hidden_sweep_support_recomputed", "hidden_sweep_rnt_recomputed"]


MISMATCH_CHECKS = ["check_mismatch_format", "check_mismatch_supports",
                   "check_mismatch_table5",
                   "hidden_mismatch_supports_recomputed",
                   "hidden_mismatch_scores_recomputed"]


def test_every_check_of_the_module_is_tested():
    names = {n for n in A.__all__ if n.startswith(("check_", "hidden_"))}
    assert names == set(FUNCTION_CHECKS) | set(SWEEP_CHECKS) | set(MISMATCH_CHECKS)


@pytest.mark.parametrize("name", FUNCTION_CHECKS)
def test_check_passes_on_a_correct_implementation(name):
    getattr(A, name)(CORRECT[ARG_OF[name]])


def test_the_library_sparsemax_passes_the_sparsemax_checks_too():
    for name in FUNCTION_CHECKS:
        if ARG_OF[name] == "sparsemax":
            getattr(A, name)(entmax.sparsemax)


def test_the_master_solution_passes_the_reachable_checks_too():
    for name in FUNCTION_CHECKS:
        if ARG_OF[name] == "argmax_reachable":
            getattr(A, name)(solution_argmax_reachable)


@pytest.mark.parametrize("name,bug,fragment", [(n, b, f) for n in FUNCTION_CHECKS for b, f in BUGS[n]])
def test_check_fails_on_a_planted_bug_with_its_message(name, bug, fragment):
    with pytest.raises(AssertionError) as err:
        getattr(A, name)(bug)
    assert fragment in str(err.value), str(err.value)


@pytest.mark.parametrize("name", FUNCTION_CHECKS)
def test_a_stub_is_not_implemented_yet(name):
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        getattr(A, name)(lambda *args: None)


def test_a_non_function_is_reported():
    with pytest.raises(AssertionError, match="not a function"):
        A.check_sparsemax_on_simplex(None)


@pytest.mark.parametrize("name,fixture", [(n, "results") for n in SWEEP_CHECKS]
                         + [(n, "table5") for n in MISMATCH_CHECKS])
def test_result_check_passes_on_the_solution(name, fixture, request):
    """q5's sweep recomputed, q8's table from the master's solution."""
    getattr(A, name)(request.getfixturevalue(fixture))


@pytest.mark.parametrize("name", SWEEP_CHECKS + MISMATCH_CHECKS)
def test_result_check_reports_a_stub(name):
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        getattr(A, name)(None)


def test_sweep_format_wants_every_temperature(results):
    broken = dict(results)
    broken.pop(3.0)
    with pytest.raises(AssertionError, match="no entry for T = 3"):
        A.check_sweep_format(broken)
    with pytest.raises(AssertionError, match="should be a dict"):
        A.check_sweep_format([1, 2])


def test_sweep_theorem_8_6_catches_eos_below_the_margin_and_stopping_without_eos(results):
    broken = copy.deepcopy(results)
    broken[1.0]["eos_rows"] = 1
    with pytest.raises(AssertionError, match="Corollary 8.1"):
        A.check_sweep_theorem_8_6(broken)
    broken = copy.deepcopy(results)
    broken[2.0]["rnt"] = [1.0, 0.99, 0.98]
    with pytest.raises(AssertionError, match="Theorem 8.6"):
        A.check_sweep_theorem_8_6(broken)


def test_sweep_monotone_catches_a_shrinking_support(results):
    broken = copy.deepcopy(results)
    broken[6.0]["support"] = 7.5
    with pytest.raises(AssertionError, match="Exercise 8.3"):
        A.check_sweep_monotone(broken)
    broken = copy.deepcopy(results)
    broken[6.0]["rnt"] = [0.1, 0.2, 0.3]
    with pytest.raises(AssertionError, match="can only fall"):
        A.check_sweep_monotone(broken)


def test_sweep_support_recomputation_catches_the_eos_row(results):
    wrong = copy.deepcopy(results)
    for T, row in _sweep(rows=slice(None)).items():   # the eos row counted among the rows
        wrong[T]["support"] = row["support"]
    with pytest.raises(AssertionError, match="mean support size at T"):
        A.hidden_sweep_support_recomputed(wrong)


def test_sweep_rnt_recomputation_catches_another_seed(results):
    with pytest.raises(AssertionError, match="the statement's recipe"):
        A.hidden_sweep_rnt_recomputed(_sweep(seed=1))


def test_sweep_settings_match_the_chapter_construction():
    """The experiment's premise: eos is 1.5/(alpha - 1) below the best score in every row (Theorem 8.6)."""
    scores = A.sweep_scores()
    gap = scores[:, :-1].amax(-1) - scores[:, -1]
    assert torch.allclose(gap, torch.full_like(gap, A.SWEEP["gap_factor"] / (A.SWEEP["alpha"] - 1)))


# ------------------------------------------------------------------ q8: the mismatch table
def solution_mismatch_table(setting, kappa=None, raw_logits=False, own=None):
    """The master notebook's solution; the keywords plant bugs (a fixed kappa,
    the NLL logits passed as log-probabilities, another "own" distribution)."""
    V = setting.vocab_size
    options = {"top-k": {"k": setting.k}, "nucleus": {"p": setting.mu},
               "entmax": {"alpha": setting.alpha}}
    log_nll = torch.log_softmax(setting.nll_logits, -1)
    mine = entmax.entmax(setting.entmax_scores, setting.alpha)
    dists = {("nll", "softmax"): log_nll.exp()}
    for d in ("top-k", "nucleus", "entmax"):
        given = setting.nll_logits if raw_logits else log_nll
        dists[("nll", d)] = decoding.decoder_distribution(given, d, **options[d])
    for d in ("top-k", "nucleus"):
        dists[("entmax", d)] = decoding.decoder_distribution(torch.log(mine), d, **options[d])
    dists[("entmax", "entmax")] = mine if own is None else own(mine)
    table = {}
    for key, q in dists.items():
        rows = q[setting.contexts]
        q_y = rows.gather(-1, setting.targets[:, None])[:, 0]
        eps = metrics.epsilon_perplexity(q_y, V, eps=kappa)[0]
        table[key] = {"sp": float(metrics.sparsemax_score(rows, setting.targets).mean()),
                      "eps_ppl": eps, "outside": float((q_y == 0).double().mean()),
                      "support": float((q > 0).sum(-1).double().mean())}
    return table


@pytest.fixture(scope="module")
def setting():
    return A.mismatch_setting()


@pytest.fixture(scope="module")
def table5(setting):
    return solution_mismatch_table(setting)


def test_the_master_solution_is_the_checks_recomputation(table5):
    assert table5 == a4_mismatch._recomputed_rows()


def test_mismatch_format_wants_every_row_and_a_dict(table5):
    broken = dict(table5)
    broken.pop(("nll", "nucleus"))
    with pytest.raises(AssertionError, match="has no row"):
        A.check_mismatch_format(broken)
    with pytest.raises(AssertionError, match="should be a dict"):
        A.check_mismatch_format([1, 2])


def test_mismatch_supports_catch_entmax_applied_twice(setting):
    twice = solution_mismatch_table(
        setting, own=lambda p: entmax.entmax(torch.log(p), setting.alpha))
    with pytest.raises(AssertionError, match="applying entmax\\s+again"):
        A.check_mismatch_supports(twice)


# (check, row, metric, planted value, fragment of the message); a value None
# copies the NLL model's nucleus row over the row
MISMATCH_EDITS = [
    ("check_mismatch_format", ("nll", "top-k"), "sp", torch.tensor(0.5), "should be a number"),
    ("check_mismatch_format", ("nll", "top-k"), "eps_ppl", 80.0, "did you pass the vocabulary size"),
    ("check_mismatch_supports", ("nll", "softmax"), None, None, "a softmax gives every token"),
    ("check_mismatch_supports", ("entmax", "top-k"), "support", 11.0, "more than k = 10"),
    ("check_mismatch_supports", ("entmax", "nucleus"), "support", 20.0, "can only remove tokens"),
    ("check_mismatch_table5", ("entmax", "entmax"), "sp", 0.6756, "no distribution scores better"),
    ("check_mismatch_table5", ("entmax", "entmax"), "eps_ppl", 6.0, "eps-perplexity"),
]


@pytest.mark.parametrize("name,row,metric,value,fragment", MISMATCH_EDITS)
def test_mismatch_check_fails_on_a_planted_entry_with_its_message(table5, name, row, metric, value, fragment):
    broken = copy.deepcopy(table5)
    if metric is None:
        broken[row] = dict(table5[("nll", "nucleus")])
    else:
        broken[row][metric] = value
    with pytest.raises(AssertionError) as err:
        getattr(A, name)(broken)
    assert fragment in str(err.value), str(err.value)


def test_mismatch_recomputation_catches_logits_read_as_log_probabilities(setting):
    wrong = solution_mismatch_table(setting, raw_logits=True)
    with pytest.raises(AssertionError, match="log_softmax of the NLL logits"):
        A.hidden_mismatch_supports_recomputed(wrong)


def test_mismatch_recomputation_catches_a_fixed_kappa(setting):
    wrong = solution_mismatch_table(setting, kappa=1e-3)
    A.check_mismatch_format(wrong)  # in range: only the recomputation sees it
    with pytest.raises(AssertionError, match="the best kappa"):
        A.hidden_mismatch_scores_recomputed(wrong)


def test_mismatch_setting_is_the_optimum_of_each_loss(setting):
    """Chapter 8, Theorem 8.4: the entmax model's distribution is the data's,
    p* = counts / R; the NLL model's is p* with its 5 % tail; the held-out
    text follows p* exactly; contexts have 1 to 34 possible next tokens."""
    S = A.MISMATCH
    counts = A.mismatch_counts()
    p = counts.double() / S["references"]
    assert torch.equal(counts.sum(-1), torch.full((S["contexts"],), S["references"]))
    assert sorted(set((counts > 0).sum(-1).tolist())) == list(S["support_sizes"])
    assert torch.allclose(entmax.entmax(setting.entmax_scores, S["alpha"]), p, atol=1e-15, rtol=0)
    assert torch.equal(entmax.entmax(setting.entmax_scores, S["alpha"]) > 0, p > 0)
    want = (1 - S["tail"]) * p + S["tail"] / S["vocab_size"]
    assert torch.allclose(torch.softmax(setting.nll_logits, -1), want, atol=1e-15, rtol=0)
    seen = torch.zeros_like(counts)
    seen.index_put_((setting.contexts, setting.targets), torch.ones_like(setting.targets), accumulate=True)
    assert torch.equal(seen, counts)
    again = A.mismatch_setting()
    assert torch.equal(again.nll_logits, setting.nll_logits) and torch.equal(again.targets, setting.targets)


def test_mismatch_distribution_refuses_an_unknown_row(setting):
    with pytest.raises(ValueError, match="unknown row"):
        a4_mismatch._mismatch_distribution(setting, "entmax", "greedy")


def test_the_guide_s_numbers(table5):
    """assignments/a4_sparse_temperature/guide.md and the reading cell quote these."""
    own, ent = table5[("entmax", "entmax")], table5[("nll", "entmax")]
    assert (round(own["sp"], 3), round(own["eps_ppl"], 2)) == (0.676, 4.87)
    assert (round(ent["sp"], 3), round(ent["eps_ppl"], 1), round(ent["outside"], 2)) == (0.625, 8.0, 0.16)
    assert round(table5[("nll", "nucleus")]["eps_ppl"], 2) == 5.01
    assert (round(table5[("entmax", "nucleus")]["eps_ppl"], 2), round(table5[("entmax", "nucleus")]["outside"], 2)) == (5.29, 0.02)
    assert round(table5[("nll", "top-k")]["outside"], 3) == 0.082


def test_the_student_facing_module_does_not_export_the_reference_answers():
    """The notebook imports this module: a public reference table would answer q8 (and q5) in one line."""
    for answer in ("mismatch_distribution", "mismatch_scores", "_mismatch_distribution", "_mismatch_scores",
                   "_recomputed_rows"):
        assert not hasattr(A, answer) and answer not in A.__all__, answer
    assert not {"mismatch_distribution", "mismatch_scores"} & set(a4_mismatch.__all__)


def test_q7_messages_state_the_comparison_that_decides_a_token():
    """A wrong reachability mask is explained by Proposition 9.4's own comparison: the token's
    largest ratio against the strongest other token's smallest one, and its direction agrees with
    nmst_lib.theory.can_become_argmax on random logits of both signs."""
    from nmst_lib.classroom.a4_temperature_reach import _deciding_comparison
    from nmst_lib.theory import can_become_argmax

    z = torch.tensor([10.0, 6.0], dtype=torch.float64)
    assert _deciding_comparison(z, 1, 2.0, 4.0).endswith("z_1/2 = 3, and the strongest other token, 0 "
                                                          "(z_0 = 10), cannot go below z_0/4 = 2.5; 3 > 2.5")
    assert _deciding_comparison(torch.tensor([1.0, -3.0]), 1, 2.0, 4.0).endswith("-0.75 <= 0.25")
    assert "only token" in _deciding_comparison(torch.tensor([-5.0]), 0, 2.0, 4.0)
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        z = 3 * torch.randn(6, generator=g, dtype=torch.float64) - 1
        lo, hi = sorted((0.5 + 3 * torch.rand(2, generator=g, dtype=torch.float64)).tolist())
        can = can_become_argmax(z, None, lo, hi)
        for v in range(6):
            says = " > " in _deciding_comparison(z, v, lo, hi).rsplit(";", 1)[1]
            assert says == bool(can[v]), (z, v, lo, hi)
