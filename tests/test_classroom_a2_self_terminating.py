"""The checks of Assignment 2 (nmst_lib.classroom.a2_self_terminating): each passes on a correct
implementation (the library's, or the solution's) and fails, with its teaching message, on a planted bug;
a stub (returns None) fails with "not implemented yet"."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nmst_lib.classroom import a2_self_terminating as checks
from nmst_lib.classroom.checks import NotImplementedYet
from nmst_lib.decoding import decode
from nmst_lib.heads import NMSTHead, log1mexp, st_log_probs
from nmst_lib.metrics import rnt_curve
from nmst_lib.theory import beam_termination_bound, first_step_eos_above_half

# ----------------------------------------------------------------------------- q1


def _assemble(logits, eos_id, log_keep, log_alpha):
    rest = logits.clone()
    rest[..., eos_id] = -math.inf
    out = torch.log_softmax(rest, dim=-1) + log_keep.unsqueeze(-1)
    out[..., eos_id] = log_alpha
    return out


def st_naive(logits, eos_id, eps):
    """Probability space: right on moderate inputs, -inf / inaccurate at |logit| = 1e4."""
    keep = torch.cumprod((1 - eps) * torch.sigmoid(logits[..., eos_id]), dim=-1)
    return _assemble(logits, eos_id, torch.log(keep), torch.log(1 - keep))


def st_without_product(logits, eos_id, eps):
    """Forgets the running product of sigmoids (keeps (1 - eps)^t): NMST with ST's sign, not monotone."""
    t = torch.arange(1, logits.shape[-2] + 1, dtype=logits.dtype)
    log_keep = t * math.log1p(-eps) + F.logsigmoid(logits[..., eos_id])
    return _assemble(logits, eos_id, log_keep, log1mexp(log_keep))


def st_full_softmax(logits, eos_id, eps):
    """Shares 1 - alpha by a softmax over ALL logits (eos included): rows do not sum to one."""
    log_keep = torch.cumsum(math.log1p(-eps) + F.logsigmoid(logits[..., eos_id]), dim=-1)
    out = torch.log_softmax(logits, dim=-1) + log_keep.unsqueeze(-1)
    out[..., eos_id] = log1mexp(log_keep)
    return out


def st_no_eps(logits, eos_id, eps):
    """Drops (1 - eps): no floor."""
    log_keep = torch.cumsum(F.logsigmoid(logits[..., eos_id]), dim=-1)
    return _assemble(logits, eos_id, log_keep, log1mexp(log_keep))


def stub(*args, **kwargs):
    return None


def test_st_checks_pass_on_the_library():
    for check in (checks.check_st_rows_sum_to_one, checks.check_st_floor_and_monotone,
                  checks.hidden_st_matches_library, checks.hidden_st_extreme_inputs):
        check(st_log_probs)


@pytest.mark.parametrize("check", [checks.check_st_rows_sum_to_one, checks.check_st_floor_and_monotone,
                                   checks.hidden_st_matches_library, checks.hidden_st_extreme_inputs])
def test_st_checks_fail_on_a_stub(check):
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check(stub)


def test_st_checks_catch_planted_bugs():
    with pytest.raises(AssertionError, match="falls from .* Proposition 4.1 part 2"):
        checks.check_st_floor_and_monotone(st_without_product)
    with pytest.raises(AssertionError, match=r"below the floor 1 - \(1 - eps\)\^"):
        checks.check_st_floor_and_monotone(st_no_eps)
    with pytest.raises(AssertionError, match="sum to .* not 1"):
        checks.check_st_rows_sum_to_one(st_full_softmax)
    checks.hidden_st_matches_library(st_naive)  # the naive formula is right on moderate inputs ...
    with pytest.raises(AssertionError, match="float32 with \\|logit\\| = 1e4"):
        checks.hidden_st_extreme_inputs(st_naive)  # ... and not at the extremes
    with pytest.raises(AssertionError, match="Definition 4.1"):
        checks.hidden_st_matches_library(st_no_eps)


def test_st_check_keeps_the_dtype():
    with pytest.raises(AssertionError, match="keep the dtype"):
        checks.hidden_st_matches_library(lambda z, e, eps: st_log_probs(z, e, eps).float())


# ----------------------------------------------------------------------------- q2


class LibraryHead(nn.Module):
    """The library's NMSTHead behind the assignment's constructor MyNMSTHead(eps, eos_id)."""

    def __init__(self, eps, eos_id):
        super().__init__()
        self.inner = NMSTHead(eps, eos_id=eos_id)
        self.eos_id = eos_id

    def forward(self, logits):
        return self.inner(logits)

    def initial_step_state(self, batch_size, device=None):
        return self.inner.initial_step_state(batch_size, device)

    def step(self, logits, state):
        return self.inner.step(logits, state)


class SolutionHead(nn.Module):
    offset = 1  # step numbers start at offset; 0 is the planted off-by-one

    def __init__(self, eps, eos_id):
        super().__init__()
        self.eps, self.eos_id = eps, eos_id

    def log_probs_at(self, logits, t):
        t = torch.as_tensor(t, dtype=logits.dtype, device=logits.device)
        log_keep = t * math.log1p(-self.eps) + F.logsigmoid(-logits[..., self.eos_id])
        return _assemble(logits, self.eos_id, log_keep, log1mexp(log_keep))

    def forward(self, logits):
        return self.log_probs_at(logits, torch.arange(logits.shape[-2], device=logits.device) + self.offset)

    def initial_step_state(self, batch_size, device=None):
        return torch.zeros(batch_size, dtype=torch.long, device=device)

    def step(self, logits, state):
        return self.log_probs_at(logits, state + self.offset), state + 1


class ZeroBasedHead(SolutionHead):
    offset = 0


class STLikeHead(SolutionHead):
    """A running product of (1 - lambda): the ST layer with the NMST sign (monotone)."""

    def forward(self, logits):
        T = logits.shape[-2]
        t = torch.arange(1, T + 1, dtype=logits.dtype)
        log_keep = t * math.log1p(-self.eps) + torch.cumsum(F.logsigmoid(-logits[..., self.eos_id]), dim=-1)
        return _assemble(logits, self.eos_id, log_keep, log1mexp(log_keep))


class StatelessStepHead(SolutionHead):
    """step forgets to advance the state: every step uses t = 1."""

    def step(self, logits, state):
        return self.log_probs_at(logits, state + 1), state


class NaiveHead(SolutionHead):
    """Probability space: log(1 - alpha) of sigma(-1e4) = 0 in float32 gives -inf."""

    def log_probs_at(self, logits, t):
        t = torch.as_tensor(t, dtype=logits.dtype)
        lam = torch.sigmoid(logits[..., self.eos_id])
        alpha = (1 - lam) * (1 - (1 - self.eps) ** t) + lam
        return _assemble(logits, self.eos_id, torch.log(1 - alpha), torch.log(alpha))


class StubHead(nn.Module):
    def __init__(self, eps, eos_id):
        super().__init__()
        self.eps, self.eos_id = eps, eos_id

    def forward(self, logits):
        ...

    def initial_step_state(self, batch_size, device=None):
        ...

    def step(self, logits, state):
        ...


NMST_CHECKS = [checks.check_nmst_rows_sum_to_one, checks.check_nmst_floor, checks.check_nmst_can_fall,
               checks.check_nmst_step_matches_forward, checks.hidden_nmst_matches_library,
               checks.hidden_nmst_extreme_inputs, checks.hidden_nmst_head_decodes_like_library]


@pytest.mark.parametrize("check", NMST_CHECKS)
def test_nmst_checks_pass_on_the_library_and_the_solution(check):
    check(LibraryHead)
    check(SolutionHead)


@pytest.mark.parametrize("check", NMST_CHECKS)
def test_nmst_checks_fail_on_a_stub(check):
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check(StubHead)


def test_nmst_checks_catch_planted_bugs():
    # the wrong submission's bug: steps counted from 0
    with pytest.raises(AssertionError, match=r"below the floor 1 - \(1 - eps\)\^10 .* Definition 5.1"):
        checks.check_nmst_floor(ZeroBasedHead)
    for check in (checks.check_nmst_rows_sum_to_one, checks.check_nmst_can_fall, checks.check_nmst_step_matches_forward):
        check(ZeroBasedHead)  # what the wrong submission keeps
    for check in (checks.hidden_nmst_matches_library, checks.hidden_nmst_extreme_inputs,
                  checks.hidden_nmst_head_decodes_like_library):
        with pytest.raises(AssertionError):
            check(ZeroBasedHead)
    with pytest.raises(AssertionError, match="falls from about 1 at t = 2 back to the floor"):
        checks.check_nmst_can_fall(STLikeHead)
    with pytest.raises(AssertionError, match=r"`step` at t = 2 .* must count the steps"):
        checks.check_nmst_step_matches_forward(StatelessStepHead)
    with pytest.raises(AssertionError, match="state must count"):
        checks.hidden_nmst_head_decodes_like_library(StatelessStepHead)
    with pytest.raises(AssertionError, match="float32 log p at \\|logit\\| = 1e4"):
        checks.hidden_nmst_extreme_inputs(NaiveHead)


def test_nmst_check_wants_a_module():
    with pytest.raises(AssertionError, match="not a torch.nn.Module"):
        checks.check_nmst_floor(lambda eps, eos_id: object())


# ----------------------------------------------------------------------------- q4


def half_life_step(eps):
    return first_step_eos_above_half(eps)


def beam_step_bound(eps, k):
    return first_step_eos_above_half(eps) + k - 1


def tail_bound(eps, L):
    th = first_step_eos_above_half(eps)
    return 1.0 if L < th else math.exp(math.log1p(-eps) * (L * (L + 1) - th * (th - 1)) / 2)


def test_bound_checks_pass_on_a_correct_solution():
    checks.check_half_life_step(half_life_step)
    checks.check_tail_bound_shape(tail_bound, half_life_step)
    checks.hidden_half_life_step_matches_library(half_life_step)
    checks.hidden_bounds_match_library(beam_step_bound, tail_bound)


def test_bound_checks_fail_on_stubs():
    with pytest.raises(NotImplementedYet):
        checks.check_half_life_step(stub)
    with pytest.raises(NotImplementedYet):
        checks.check_tail_bound_shape(stub, half_life_step)
    with pytest.raises(NotImplementedYet):
        checks.hidden_half_life_step_matches_library(stub)
    with pytest.raises(NotImplementedYet):
        checks.hidden_bounds_match_library(stub, tail_bound)


def test_bound_checks_catch_planted_bugs():
    with pytest.raises(AssertionError, match="FIRST such step"):
        checks.check_half_life_step(lambda eps: half_life_step(eps) + 1)
    with pytest.raises(AssertionError, match="is not above 1/2"):
        checks.check_half_life_step(lambda eps: math.ceil(-math.log(2) / math.log1p(-eps)) - 1)
    # ceil(beta) is right except where beta is an integer: eps = 1/2 (beta = 1, t_1/2 = 2)
    with pytest.raises(AssertionError, match=r"half_life_step\(0.5\) = 1"):
        checks.hidden_half_life_step_matches_library(lambda eps: math.ceil(-math.log(2) / math.log1p(-eps)))
    # log(1 - eps) in float32 is off by 0.14% at eps = 1e-5 (Chapter 4)
    f32 = lambda eps: math.floor(-math.log(2) / torch.log(1 - torch.tensor(eps, dtype=torch.float32)).item()) + 1
    with pytest.raises(AssertionError, match=r"half_life_step\(.*but Lemma 4.1"):
        checks.hidden_half_life_step_matches_library(f32)
    with pytest.raises(AssertionError, match="t_1/2 \\+ k - 1"):
        checks.hidden_bounds_match_library(lambda eps, k: beam_termination_bound(eps, k), tail_bound)
    with pytest.raises(AssertionError, match="only from t_1/2 on"):
        checks.check_tail_bound_shape(lambda eps, L: (1 - eps) ** (L * (L + 1) / 2), half_life_step)
    with pytest.raises(AssertionError, match="Theorem 5.1 part 1"):
        checks.hidden_bounds_match_library(beam_step_bound,
                                           lambda eps, L: tail_bound(eps, L) if L < 100 else (1 - eps) ** L)


# ----------------------------------------------------------------------------- q5


def my_rnt(generation, Ls):
    return [float((generation.first_finish_steps > L).double().mean()) for L in Ls]


def rnt_from_lengths(generation, Ls):
    """The beam-search mistake: r_nt read off the returned sequences."""
    return [float(((~generation.terminated) | (generation.lengths > L)).double().mean()) for L in Ls]


def test_rnt_checks_pass_on_the_library_and_a_solution():
    for fn in (lambda g, Ls: rnt_curve(g, Ls), my_rnt):
        checks.check_rnt_token_level(fn)
        checks.check_rnt_beam_uses_first_finish(fn)
        checks.hidden_rnt_matches_library(fn)


def test_rnt_checks_catch_planted_bugs():
    checks.check_rnt_token_level(rnt_from_lengths)  # right for token-level decoders ...
    with pytest.raises(AssertionError, match="read off first_finish_steps, not off the returned lengths"):
        checks.check_rnt_beam_uses_first_finish(rnt_from_lengths)  # ... wrong for beam search
    off_by_one = lambda g, Ls: [float((g.first_finish_steps >= L).double().mean()) for L in Ls]
    with pytest.raises(AssertionError, match="a row ending exactly at step L has terminated"):
        checks.check_rnt_token_level(off_by_one)
    with pytest.raises(AssertionError, match="rnt_curve"):
        checks.hidden_rnt_matches_library(off_by_one)
    with pytest.raises(NotImplementedYet):
        checks.check_rnt_token_level(stub)


# Problem 5's checks on a smaller setting of the same kind (under a second instead of several
# seconds): they read the setting from ``checks.EXPERIMENT``, which these tests patch; the last
# test below checks that the real one is the master notebook's given cell.
SMALL = {"V": 12, "HIDDEN": 16, "N_CONTEXTS": 12, "MAX_LEN": 60, "BEAM": 2, "EOS_BIAS": 6.0, "EPS_VALUES": (0.05, 0.02)}
BEAM, MAX_LEN, EPS_VALUES = SMALL["BEAM"], SMALL["MAX_LEN"], SMALL["EPS_VALUES"]
LS = list(range(1, MAX_LEN + 1))
REAL_EXPERIMENT = dict(checks.EXPERIMENT)


def build_model(head, eps):
    return checks.experiment_model(head, eps)


@pytest.fixture(autouse=True)
def small_experiment(monkeypatch):
    for key, value in SMALL.items():
        monkeypatch.setitem(checks.EXPERIMENT, key, value)


@pytest.fixture(scope="module")
def experiment():
    with pytest.MonkeyPatch.context() as patch:
        for key, value in SMALL.items():
            patch.setitem(checks.EXPERIMENT, key, value)
        contexts = checks.experiment_contexts()
        results = {}
        for head, eps, dec in checks.experiment_keys(EPS_VALUES, BEAM):
            kwargs = {"beam_size": BEAM} if dec.startswith("beam") else {}
            gen = decode(build_model(head, eps), contexts, "beam" if kwargs else "greedy", max_len=MAX_LEN, **kwargs)
            results[head, eps, dec] = {"rnt": rnt_curve(gen, LS), "mean_length": gen.lengths.double().mean().item()}
    return results, contexts


def test_results_checks_pass_on_a_correct_experiment(experiment):
    results, contexts = experiment
    checks.check_results_obey_the_theorems(results, EPS_VALUES, BEAM, LS)
    checks.hidden_results_match_recomputation(results, build_model, contexts, EPS_VALUES, BEAM, LS, MAX_LEN)


def test_results_checks_catch_planted_bugs(experiment):
    results, contexts = experiment
    with pytest.raises(NotImplementedYet, match="not computed yet"):
        checks.check_results_obey_the_theorems(None, EPS_VALUES, BEAM, LS)
    missing = {k: v for k, v in results.items() if k[0] != "NMST"}
    with pytest.raises(AssertionError, match="has no entry \\('NMST'"):
        checks.check_results_obey_the_theorems(missing, EPS_VALUES, BEAM, LS)
    # r_nt from a decode with a too-small limit, reported as if the rows never stopped
    late = dict(results)
    late["NMST", 0.05, "greedy"] = {"rnt": [1.0] * MAX_LEN, "mean_length": float(MAX_LEN)}
    with pytest.raises(AssertionError, match="Theorem 5.1 .* every row stops within 14 steps"):
        checks.check_results_obey_the_theorems(late, EPS_VALUES, BEAM, LS)
    # mean length over the terminated rows only (or any other wrong number)
    wrong_mean = dict(results)
    key = ("ST", 0.02, "greedy")
    wrong_mean[key] = dict(results[key], mean_length=results[key]["mean_length"] + 0.5)
    with pytest.raises(AssertionError, match="mean_length"):
        checks.hidden_results_match_recomputation(wrong_mean, build_model, contexts, EPS_VALUES, BEAM, LS, MAX_LEN)
    increasing = dict(results)
    increasing["VA", None, "greedy"] = {"rnt": [i / MAX_LEN for i in range(MAX_LEN)], "mean_length": 1.0}
    with pytest.raises(AssertionError, match="increases with L"):
        checks.check_results_obey_the_theorems(increasing, EPS_VALUES, BEAM, LS)


def test_results_checks_grade_the_problems_experiment_not_an_edited_one(experiment):
    """An experiment whose given constants were edited (no ST or NMST rows, a shorter horizon, other
    contexts, another model) fails with "keep the given cell", however well its numbers fit the
    edited setting (an empty EPS_VALUES used to pass both checks with the two VA rows alone)."""
    results, contexts = experiment
    va_only = {k: v for k, v in results.items() if k[0] == "VA"}
    with pytest.raises(AssertionError, match=r"`EPS_VALUES` is \(\), but the problem fixes \(0.05, 0.02\): "
                                             "keep the given cell"):
        checks.check_results_obey_the_theorems(va_only, (), BEAM, LS)
    with pytest.raises(AssertionError, match="`EPS_VALUES` is"):
        checks.hidden_results_match_recomputation(va_only, build_model, contexts, (), BEAM, LS, MAX_LEN)
    short = list(range(1, 51))
    with pytest.raises(AssertionError, match="`LS` is a list of 50 values from 1 to 50, but the problem fixes a list "
                                             "of 60 values"):
        checks.check_results_obey_the_theorems(results, EPS_VALUES, BEAM, short)
    with pytest.raises(AssertionError, match="`MAX_LEN` is 50, but the problem fixes 60"):
        checks.hidden_results_match_recomputation(results, build_model, contexts, EPS_VALUES, BEAM, LS, 50)
    with pytest.raises(AssertionError, match="`contexts` is a tensor of shape \\(10, 5\\)"):
        checks.hidden_results_match_recomputation(results, build_model, contexts[:10], EPS_VALUES, BEAM, LS, MAX_LEN)

    def louder_eos(head, eps):
        model = build_model(head, eps)
        with torch.no_grad():
            model.output.bias[-1] += 3.0
        return model

    with pytest.raises(AssertionError, match=r"`build_model\('VA', None\)` is a model \(LSTMLM\) with other weights or "
                                             "settings, but the problem fixes the given cell's model"):
        checks.hidden_results_match_recomputation(results, louder_eos, contexts, EPS_VALUES, BEAM, LS, MAX_LEN)


def test_the_checks_setting_is_the_master_notebooks_given_cell():
    """``EXPERIMENT``, ``experiment_model`` and ``experiment_contexts`` are what Problem 5's given
    cell in the master notebook sets up (the checks grade that experiment)."""
    import json

    from nmst_lib.classroom.build import master_notebook

    master = master_notebook("a2_self_terminating")
    cells = ["".join(c["source"]) for c in json.loads(master.read_text(encoding="utf-8"))["cells"]]
    given = next(c for c in cells if "def build_model(" in c and "EPS_VALUES =" in c)
    namespace = {"torch": torch}
    exec(given.replace("print(", "(lambda *a, **k: None)("), namespace)
    for key, value in REAL_EXPERIMENT.items():
        checks.EXPERIMENT[key] = value  # the autouse fixture restores the small setting afterwards
    assert {k: namespace[k] for k in REAL_EXPERIMENT} == REAL_EXPERIMENT
    for head, eps in [("VA", None)] + [(h, e) for h in ("ST", "NMST") for e in REAL_EXPERIMENT["EPS_VALUES"]]:
        checks.expect_given({"m": namespace["build_model"](head, eps)}, {"m": checks.experiment_model(head, eps)})
    checks.expect_given({"contexts": namespace["contexts"]}, {"contexts": checks.experiment_contexts()})
