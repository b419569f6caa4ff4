"""Unit tests of Assignment 3's checks (nmst_lib.classroom.a3_experiments): each check passes on a
correct implementation and fails, with its teaching message, on a planted bug; a stub fails with
"not implemented yet"."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from datasources import FIXTURE_DATA_DIR
from nmst_lib import data as D
from nmst_lib.classroom import a3_experiments as A
from nmst_lib.decoding import decode
from nmst_lib.heads import NMSTHead, VanillaHead
from nmst_lib.models import LSTMLM


def stub(*args, **kwargs):
    return None


# ------------------------------------------------------------------------------ q1 perplexity

def ppl(token_log_probs, lengths, drop_eos=False, per_line=False, multiply=False, float32=False):
    width = token_log_probs.shape[1]
    lengths = torch.as_tensor(lengths)
    used = lengths - 1 if drop_eos else lengths
    mask = torch.arange(width)[None, :] < used[:, None]
    if per_line:
        sums = torch.where(mask, token_log_probs, torch.zeros_like(token_log_probs)).double().sum(1)
        return math.exp(float((-sums / used).mean()))
    if multiply:
        total = -(token_log_probs * mask).sum()
    else:
        total = -token_log_probs[mask].double().sum()
    if float32:
        return float(torch.exp(total.float() / mask.sum()))
    return math.exp(float(total) / int(mask.sum()))


def test_q1_checks_pass_on_a_correct_perplexity():
    for check in (A.check_uniform_model_gives_vocabulary_size, A.check_perplexity_pools_tokens,
                  A.check_perplexity_counts_eos, A.hidden_perplexity_matches_library, A.hidden_perplexity_extreme):
        check(ppl)


@pytest.mark.parametrize("check, bug, message", [
    # the hint comes after the numbers, at the end of the message
    (A.check_perplexity_counts_eos, dict(drop_eos=True), r"gives 10\.31: this is the perplexity without the eos "
     r"terms; .* must pay for it$"),
    (A.check_perplexity_pools_tokens, dict(per_line=True), r"gives 5\.755: this is the exp of the mean of the "
     r"lines' mean NLLs, .*; pool the tokens instead$"),
    (A.check_uniform_model_gives_vocabulary_size, dict(multiply=True), "padding entries"),
    (A.hidden_perplexity_extreme, dict(float32=True), "float32 exp overflows"),
    (A.hidden_perplexity_matches_library, dict(drop_eos=True), "per-token perplexity of Chapter 6"),
])
def test_q1_checks_catch_bugs(check, bug, message):
    with pytest.raises(AssertionError, match=message):
        check(lambda lp, n: ppl(lp, n, **bug))
    with pytest.raises(AssertionError, match="not implemented yet"):
        check(stub)


def nan_skipping_ppl(token_log_probs, lengths):
    """Sums every entry that is not NaN: right when the padding is NaN, wrong when it is a number."""
    return math.exp(float(-torch.nansum(token_log_probs.double()) / torch.as_tensor(lengths).sum()))


@pytest.mark.parametrize("check", [A.check_perplexity_pools_tokens, A.check_perplexity_counts_eos,
                                   A.hidden_perplexity_matches_library])
def test_q1_checks_catch_padding_that_enters_the_sum_when_it_is_not_nan(check):
    """The statement says the padding may hold anything: an answer that only skips NaN (or zeros)
    loses the public points too, and the pooled check names the mistake."""
    with pytest.raises(AssertionError, match="padding"):
        check(nan_skipping_ppl)
    A.check_uniform_model_gives_vocabulary_size(nan_skipping_ppl)  # NaN padding: this one cannot tell


def test_q1_pooled_check_names_padding_in_the_sum():
    with pytest.raises(AssertionError, match=r"is 25\.79, .* gives 5\.755: the padding entries .* entered the sum"):
        A.check_perplexity_pools_tokens(nan_skipping_ppl)


# ------------------------------------------------------------------------------------ q2 r_nt

def rnt(tokens, eos_id, Ls, at_least=False, increasing=False, last_eos=False, sort=False):
    is_eos = tokens == eos_id
    never = torch.full((tokens.shape[0],), tokens.shape[1] + 1)
    if last_eos:
        last = tokens.shape[1] - is_eos.flip(1).long().argmax(1)
        first = torch.where(is_eos.any(1), last, never)
    else:
        first = torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, never)
    Ls = torch.as_tensor(sorted(Ls) if sort else Ls)
    out = ((first[None, :] >= Ls[:, None]) if at_least else (first[None, :] > Ls[:, None])).double().mean(1)
    return 1 - out if increasing else out


def test_q2_checks_pass_on_a_correct_curve():
    for check in (A.check_rnt_hand_example, A.check_rnt_is_non_increasing, A.check_rnt_at_max_len,
                  A.hidden_rnt_matches_library, A.hidden_rnt_edge_cases):
        check(rnt)


@pytest.mark.parametrize("check, bug, message", [
    (A.check_rnt_hand_example, dict(at_least=True), "Welleck et al.'s r_L"),
    (A.check_rnt_is_non_increasing, dict(increasing=True), "non-increasing in L"),
    (A.check_rnt_at_max_len, dict(sort=True), "belongs to Ls"),
    (A.hidden_rnt_matches_library, dict(at_least=True), "nmst_lib.metrics.rnt_curve"),
    (A.hidden_rnt_edge_cases, dict(last_eos=True), "eos repeated after the first"),
])
def test_q2_checks_catch_bugs(check, bug, message):
    with pytest.raises(AssertionError, match=message):
        check(lambda tokens, eos, Ls: rnt(tokens, eos, Ls, **bug))
    with pytest.raises(AssertionError, match="not implemented yet"):
        check(stub)


# ---------------------------------------------------------------------------------- q3 GPT-2

def nmst_gpt2(gpt2, contexts, continuation, eps, t0=1, shift=0, naive=False, no_keep=False):
    k, T = contexts.shape[1], continuation.shape[1]
    inputs = torch.cat([contexts, continuation[:, :-1]], 1)
    logits = gpt2(input_ids=inputs).logits[:, k - 1:].float()
    if shift:
        logits = torch.cat([logits[:, shift:], logits[:, -shift:]], 1)
    eos = logits.shape[-1] - 1
    t = torch.arange(t0, t0 + T, dtype=torch.float32)
    z = logits[..., eos]
    if naive:
        s = torch.sigmoid(z)
        floor = 1 - (1 - eps) ** t
        p_eos = (1 - s) * floor + s
        others = torch.softmax(logits[..., :eos], -1) * (1 - p_eos)[..., None]
        return torch.cat([others, p_eos[..., None]], -1).log()
    decay = t * math.log1p(-eps)
    log_floor = torch.log(-torch.expm1(decay)) if t0 > 0 else torch.log(-torch.expm1(decay).clamp(max=-1e-30))
    log_eos = torch.logaddexp(F.logsigmoid(z), F.logsigmoid(-z) + log_floor)
    keep = torch.zeros_like(z) if no_keep else F.logsigmoid(-z) + decay
    return torch.cat([torch.log_softmax(logits[..., :eos], -1) + keep[..., None], log_eos[..., None]], -1)


def test_q3_checks_pass_on_a_correct_layer():
    for check in (A.check_gpt2_rows_are_distributions, A.check_gpt2_eos_floor, A.check_gpt2_matches_cached_decoding,
                  A.hidden_gpt2_matches_library, A.hidden_gpt2_extreme):
        check(nmst_gpt2)


@pytest.mark.parametrize("check, bug, message", [
    (A.check_gpt2_rows_are_distributions, dict(no_keep=True), "a distribution"),
    (A.check_gpt2_eos_floor, dict(t0=0), "below the floor"),
    (A.check_gpt2_matches_cached_decoding, dict(shift=1), "cached decoding"),
    (A.hidden_gpt2_matches_library, dict(t0=0), "nmst_log_probs"),
    (A.hidden_gpt2_extreme, dict(naive=True), "log space"),
])
def test_q3_checks_catch_bugs(check, bug, message):
    with pytest.raises(AssertionError, match=message):
        check(lambda *args: nmst_gpt2(*args, **bug))
    with pytest.raises(AssertionError, match="not implemented yet"):
        check(stub)


def test_q3_the_wrong_submissions_bug_keeps_only_the_distribution_point():
    def bug(*args):
        return nmst_gpt2(*args, t0=0)
    A.check_gpt2_rows_are_distributions(bug)
    for check in (A.check_gpt2_eos_floor, A.check_gpt2_matches_cached_decoding, A.hidden_gpt2_matches_library,
                  A.hidden_gpt2_extreme):
        with pytest.raises(AssertionError):
            check(bug)


# ------------------------------------------------------------------------------ q4 experiment

# Problem 4's checks on a smaller setting of the same kind (the checks read it from
# ``A.EXPERIMENT``, which these tests patch; a test below checks that the real one is the master
# notebook's given cell).
SMALL = {"EPS_EXP": 0.05, "L_EXP": 30, "N_CONTEXTS": 16}
REAL_EXPERIMENT = dict(A.EXPERIMENT)


@pytest.fixture(autouse=True)
def small_experiment(monkeypatch):
    for key, value in SMALL.items():
        monkeypatch.setitem(A.EXPERIMENT, key, value)


def test_the_checks_setting_is_the_master_notebooks_given_cell():
    """``EXPERIMENT`` holds the constants of Problem 4's given cell in the master notebook: its eps
    and L, and the number of validation contexts in ``exp_contexts``."""
    import ast
    import json

    from nmst_lib.classroom.build import master_notebook

    master = master_notebook("a3_experiments")
    cells = ["".join(c["source"]) for c in json.loads(master.read_text(encoding="utf-8"))["cells"]]
    given = next(c for c in cells if "EPS_EXP, L_EXP" in c and "exp_contexts =" in c)
    values = {}
    for node in ast.parse(given).body:
        if isinstance(node, ast.Assign) and "EPS_EXP" in ast.unparse(node.targets[0]):
            names = [t.id for t in node.targets[0].elts]
            values.update(zip(names, ast.literal_eval(node.value)))
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "exp_contexts":
            assert ast.unparse(node.value) == f"valid.contexts(range(min({REAL_EXPERIMENT['N_CONTEXTS']}, len(valid))))"
    assert (values["EPS_EXP"], values["L_EXP"]) == (REAL_EXPERIMENT["EPS_EXP"], REAL_EXPERIMENT["L_EXP"])


def test_q4_checks_grade_the_problems_experiment_not_an_edited_one(experiment):
    """An edited eps, horizon or set of contexts fails with "keep the given cell" (a larger eps, or a
    horizon past t_1/2, would make the guarantee hold in an easier experiment)."""
    e = experiment
    with pytest.raises(AssertionError, match="`EPS_EXP` is 0.5, but the problem fixes 0.05: keep the given cell"):
        A.check_experiment_guarantee_and_training(e["models"], e["results"], 0.5, e["L"])
    with pytest.raises(AssertionError, match="`L_EXP` is 300, but the problem fixes 30"):
        A.check_experiment_numbers_recomputed(e["models"], e["results"], e["valid"], e["contexts"], 300)
    with pytest.raises(AssertionError, match=r"`exp_contexts` is a tensor of shape \(4, "):
        A.check_experiment_numbers_recomputed(e["models"], e["results"], e["valid"], e["contexts"][:4], e["L"])


@pytest.fixture(scope="module")
def experiment():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(D.DATA_DIR_ENV, str(FIXTURE_DATA_DIR))
        mp.delenv(D.WIKITEXT_DIR_ENV, raising=False)
        exp = A.load_experiment_data(max_tokens=40, vocab_cap=300, num_valid=16)
    eps, L = 0.05, 30

    def train(head, steps=40):
        torch.manual_seed(0)
        model = LSTMLM(len(exp.vocab), hidden=16, layers=1, dropout=0.0, head=head)
        opt = torch.optim.Adam(model.parameters(), lr=2e-2)
        draw = torch.Generator().manual_seed(0)
        for _ in range(steps):
            loss = model.loss(D.make_batch(exp.train, torch.randint(0, len(exp.train), (16,), generator=draw)))
            opt.zero_grad()
            loss.backward()
            opt.step()
        return model.eval()

    from nmst_lib.experiments.evaluation import evaluate_perplexity
    from nmst_lib.metrics import non_termination_ratio

    contexts = exp.valid.contexts(range(len(exp.valid)))
    models = {"va": train(VanillaHead()), "nmst": train(NMSTHead(eps))}
    results = {k: {"ppl": evaluate_perplexity(m, exp.valid),
                   "rnt": non_termination_ratio(decode(m, contexts, "greedy", max_len=L), L)} for k, m in models.items()}
    return dict(models=models, results=results, valid=exp.valid, contexts=contexts, eps=eps, L=L, train=train,
                description=exp.description)


def test_q4_data_says_where_it_comes_from(experiment):
    assert "SYNTHETIC fixture" in experiment["description"] or "local files" in experiment["description"]


def test_q4_checks_pass_on_a_correct_experiment(experiment):
    e = experiment
    A.check_experiment_numbers_recomputed(e["models"], e["results"], e["valid"], e["contexts"], e["L"])
    A.check_experiment_guarantee_and_training(e["models"], e["results"], e["eps"], e["L"])
    A.hidden_experiment_models(e["models"], e["eps"])


def test_q4_checks_catch_bugs(experiment):
    e = experiment
    swapped = {"va": e["results"]["nmst"], "nmst": e["results"]["va"]}
    with pytest.raises(AssertionError, match="reported validation perplexity"):
        A.check_experiment_numbers_recomputed(e["models"], swapped, e["valid"], e["contexts"], e["L"])
    wrong_layer = {"va": e["models"]["va"], "nmst": e["models"]["va"]}
    fake = {"va": e["results"]["va"], "nmst": {"ppl": e["results"]["va"]["ppl"], "rnt": 0.5}}
    with pytest.raises(AssertionError, match="Proposition 6.1, part 2"):
        A.check_experiment_guarantee_and_training(wrong_layer, fake, e["eps"], e["L"])
    untrained = {"va": e["results"]["va"], "nmst": {"ppl": 90.0, "rnt": 0.0}}
    with pytest.raises(AssertionError, match="barely learned"):
        A.check_experiment_guarantee_and_training(e["models"], untrained, e["eps"], e["L"])
    with pytest.raises(AssertionError, match="expected NMSTHead"):
        A.hidden_experiment_models(wrong_layer, e["eps"])
    with pytest.raises(AssertionError, match="EPS_EXP"):
        A.hidden_experiment_models(e["models"], 0.02)
    stubs = {"va": None, "nmst": None}
    for call in (lambda: A.check_experiment_numbers_recomputed(stubs, stubs, e["valid"], e["contexts"], e["L"]),
                 lambda: A.check_experiment_guarantee_and_training(stubs, stubs, e["eps"], e["L"]),
                 lambda: A.hidden_experiment_models(stubs, e["eps"])):
        with pytest.raises(AssertionError, match="not implemented yet"):
            call()


def test_helpers_reject_bad_arguments():
    with pytest.raises(ValueError):
        A.load_experiment_data(max_tokens=5)
    with pytest.raises(TypeError):
        A.tiny_gpt2(seed=1.5)
