"""Tests of the sparse-LM metrics in nmst_lib.metrics (Martins et al. 2020, Sec. 4, App. A-D,
Sec. 5.1 fn. 6, Sec. 5.2 fn. 10; Chapter 8, 08_sparse): sparsemax score, JS divergence,
eps-perplexity with its exact optimal eps, teacher-forced REP/WREP, distinct-n.

Each closed form is checked against its definition (float64, naive loops); tolerances are
float64 rounding (1e-12) unless a test says otherwise. Tests marked ``needs_cuda`` run the same
code on a GPU where one is present.
"""

from __future__ import annotations

import decimal
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nmst_lib.decoding import PAD, Generation
from nmst_lib.metrics import (
    distinct_n,
    epsilon_perplexity,
    js_divergence,
    rep_wrep,
    sparsemax_score,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
LOG2 = math.log(2.0)


# --------------------------------------------------------------------------- helpers


@st.composite
def sparse_distributions(draw, max_vocab: int = 12, max_rows: int = 5):
    """(probs [N, V] float64 with exact zeros allowed, target [N]) from random weights."""
    V = draw(st.integers(1, max_vocab))
    N = draw(st.integers(1, max_rows))
    weights = draw(st.lists(st.lists(st.sampled_from([0.0, 0.0, 1e-9, 0.3, 1.0, 2.5, 7.0, 1e6]),
                                     min_size=V, max_size=V), min_size=N, max_size=N))
    w = torch.tensor(weights, dtype=torch.float64)
    w[w.sum(-1) == 0, 0] = 1.0
    probs = w / w.sum(-1, keepdim=True)
    target = torch.tensor(draw(st.lists(st.integers(0, V - 1), min_size=N, max_size=N)))
    return probs, target


def js_by_definition(probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Eq. 11 term by term: JS = KL(p||m)/2 + KL(e_y||m)/2, m = (p + e_y)/2, 0 log 0 = 0."""
    q = torch.nn.functional.one_hot(target, probs.shape[-1]).to(probs.dtype)
    m = (probs + q) / 2
    kl_p = torch.where(probs > 0, probs * torch.log(probs / m), torch.zeros_like(probs)).sum(-1)
    kl_q = torch.where(q > 0, q * torch.log(q / m), torch.zeros_like(q)).sum(-1)
    return 0.5 * kl_p + 0.5 * kl_q


def eps_ppl_by_definition(p: np.ndarray, V: int, eps: float) -> float:
    """Eq. 9 as printed."""
    return float(np.exp(-np.mean(np.log((p + eps) / (1 + eps * V)))))


def rep_wrep_naive(pred, tgt, mask, windows):
    """Double loop over positions and their windows (the definition in rep_wrep's docstring)."""
    B, T = tgt.shape
    n = int(mask.sum())
    out = {}
    for w in windows:
        rep = wrep = 0
        for b in range(B):
            for t in range(T):
                if not mask[b, t]:
                    continue
                history = tgt[b, max(0, t - w):t].tolist()
                if int(pred[b, t]) in history:
                    rep += 1
                    wrep += int(pred[b, t] != tgt[b, t])
        out[w] = {"rep": rep / n, "wrep": wrep / n}
    return out


def distinct_naive(seqs, n, per="ngrams"):
    grams = [tuple(s[i:i + n]) for s in seqs for i in range(len(s) - n + 1)]
    total = len(grams) if per == "ngrams" else sum(len(s) for s in seqs)
    return len(set(grams)) / total


def _generation(rows: list[list[int]], max_len: int, eos_id: int) -> Generation:
    tokens = torch.full((len(rows), max_len), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, :len(row)] = torch.tensor(row, dtype=torch.long)
    terminated = torch.tensor([len(r) > 0 and r[-1] == eos_id for r in rows])
    lengths = torch.tensor([len(r) for r in rows])
    return Generation(tokens=tokens, lengths=lengths, terminated=terminated, max_len=max_len, eos_id=eos_id,
                      method="hand-made", scores=torch.zeros(len(rows)))


# --------------------------------------------------------------------------- sparsemax score


@settings(max_examples=80, deadline=None)
@given(sparse_distributions())
def test_sparsemax_score_equals_one_minus_half_squared_distance_to_one_hot(data):
    """App. C: sp = 1 - ||p - e_y||^2 / 2, and it lies in [0, 1] (App. B)."""
    probs, target = data
    sp = sparsemax_score(probs, target)
    onehot = torch.nn.functional.one_hot(target, probs.shape[-1]).double()
    expected = 1 - 0.5 * ((probs - onehot) ** 2).sum(-1)
    torch.testing.assert_close(sp, expected, rtol=0, atol=1e-12)
    assert bool((sp >= -1e-12).all()) and bool((sp <= 1 + 1e-12).all())


def test_sparsemax_score_is_one_for_the_target_one_hot_and_zero_for_another():
    probs = torch.eye(4, dtype=torch.float64)
    target = torch.tensor([0, 2, 2, 3])
    assert sparsemax_score(probs, target).tolist() == [1.0, 0.0, 1.0, 1.0]


def test_sparsemax_score_is_word_accuracy_for_deterministic_predictions():
    pred = torch.tensor([1, 0, 3, 3, 2])
    target = torch.tensor([1, 2, 3, 0, 2])
    sp = sparsemax_score(torch.nn.functional.one_hot(pred, 5).float(), target)
    assert float(sp.mean()) == pytest.approx(float((pred == target).float().mean()), abs=0)


def test_sparsemax_score_of_uniform_is_one_over_V_plus_half_the_rest():
    V = 7
    sp = sparsemax_score(torch.full((3, V), 1.0 / V, dtype=torch.float64), torch.tensor([0, 3, 6]))
    torch.testing.assert_close(sp, torch.full((3,), 1 / V + 0.5 * (1 - 1 / V), dtype=torch.float64), rtol=0, atol=1e-15)


def test_sparsemax_score_keeps_batch_shape_and_input_dtype():
    probs = torch.softmax(torch.randn(2, 3, 4, 9, generator=torch.Generator().manual_seed(0)), -1)
    target = torch.randint(0, 9, (2, 3, 4), generator=torch.Generator().manual_seed(1))
    sp = sparsemax_score(probs, target)
    assert sp.shape == (2, 3, 4) and sp.dtype == torch.float32
    flat = sparsemax_score(probs.reshape(-1, 9).double(), target.reshape(-1))
    torch.testing.assert_close(sp.reshape(-1).double(), flat, rtol=0, atol=1e-6)


def test_sparse_metrics_on_gpt2_vocabulary_float32_with_extreme_logits_match_float64():
    """V = 50,257 in float32, logits up to |1e4| (near one-hot rows) and -inf masks: sp and JS
    agree with float64 on the same probabilities within float32 rounding."""
    g = torch.Generator().manual_seed(0)
    V = 50_257
    logits = torch.randn(4, V, generator=g) * torch.tensor([[1.0], [10.0], [1e4], [3.0]])
    logits[3, 100:] = -math.inf  # a truncated (sparse) row
    probs = torch.softmax(logits, -1)
    target = torch.tensor([5, int(logits[1].argmax()), int(logits[2].argmax()), 50_000])
    sp32, js32 = sparsemax_score(probs, target), js_divergence(probs, target)
    sp64, js64 = sparsemax_score(probs.double(), target), js_divergence(probs.double(), target)
    assert sp32.dtype == js32.dtype == torch.float32
    torch.testing.assert_close(sp32.double(), sp64, rtol=0, atol=1e-6)
    torch.testing.assert_close(js32.double(), js64, rtol=0, atol=1e-6)
    assert float(js32[3]) == pytest.approx(LOG2, abs=1e-7)  # target outside the support
    assert float(js32[2]) <= 1e-6 and float(sp32[2]) >= 1 - 1e-6  # one-hot on the target


def test_sparse_metrics_compute_half_precision_in_float32():
    probs = torch.softmax(torch.randn(3, 10, generator=torch.Generator().manual_seed(2)), -1)
    target = torch.tensor([0, 1, 2])
    for dtype in (torch.float16, torch.bfloat16):
        half = probs.to(dtype)
        sp, js = sparsemax_score(half, target), js_divergence(half, target)
        assert sp.dtype == js.dtype == torch.float32
        # the same numbers as the float32 computation on the same (rounded) probabilities
        torch.testing.assert_close(sp, sparsemax_score(half.float(), target), rtol=0, atol=1e-7)
        torch.testing.assert_close(js, js_divergence(half.float(), target), rtol=0, atol=1e-7)


# --------------------------------------------------------------------------- JS divergence


@settings(max_examples=120, deadline=None)
@given(sparse_distributions())
def test_js_closed_form_equals_definition_eq11(data):
    probs, target = data
    torch.testing.assert_close(js_divergence(probs, target), js_by_definition(probs, target), rtol=1e-12, atol=1e-15)


def test_js_is_log2_when_target_gets_zero_and_zero_when_it_gets_one():
    probs = torch.tensor([[0.0, 0.5, 0.5], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    js = js_divergence(probs, torch.tensor([0, 0, 0]))
    assert js[0].item() == pytest.approx(LOG2, rel=1e-15) and js[1].item() == pytest.approx(LOG2, rel=1e-15)
    assert js[2].item() == 0.0
    js32 = js_divergence(probs.float(), torch.tensor([0, 0, 0]))
    assert js32[2].item() == 0.0 and js32[0].item() == pytest.approx(LOG2, rel=1e-7)


@settings(max_examples=60, deadline=None)
@given(st.floats(0.0, 1.0), st.integers(2, 9), st.randoms(use_true_random=False))
def test_js_depends_on_the_target_probability_only(p_y, V, rnd):
    """Two different distributions with the same p_y have the same JS (App. D), which equals
    H_b((1 + p_y)/2) - H_b(p_y)/2."""
    rows = []
    for _ in range(2):
        rest = torch.tensor([rnd.choice([0.0, rnd.random()]) for _ in range(V - 1)], dtype=torch.float64)
        rest = rest / rest.sum() * (1 - p_y) if rest.sum() > 0 else torch.full((V - 1,), (1 - p_y) / (V - 1), dtype=torch.float64)
        rows.append(torch.cat([torch.tensor([p_y], dtype=torch.float64), rest]))
    js = js_divergence(torch.stack(rows), torch.tensor([0, 0]))

    def hb(x):
        return -sum(v * math.log(v) for v in (x, 1 - x) if v > 0)

    assert js[0].item() == pytest.approx(js[1].item(), rel=1e-12, abs=1e-15)
    assert js[0].item() == pytest.approx(hb((1 + p_y) / 2) - hb(p_y) / 2, rel=1e-9, abs=1e-14)
    assert 0 <= js[0].item() <= LOG2 * (1 + 1e-15)


def _js_decimal(p_y: float) -> float:
    """JS(p, e_y) = H(m) - H(p) / 2 for p = (p_y, 1 - p_y), m = (p + e_y) / 2, in nats, with
    60-digit decimals at the p_y given (an independent reference for the closed form)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        p, one = decimal.Decimal(p_y), decimal.Decimal(1)

        def h(*xs):
            return -sum((x * x.ln() for x in xs if x > 0), decimal.Decimal(0))

        return float(h((one + p) / 2, (one - p) / 2) - h(p, one - p) / 2)


@pytest.mark.parametrize("dtype, q, rel", [
    (torch.float64, 1e-6, 1e-12), (torch.float64, 1e-10, 1e-12), (torch.float64, 1e-14, 1e-12),
    (torch.float64, 2.0 ** -53, 1e-12),
    (torch.float32, 1e-3, 1e-5), (torch.float32, 1e-6, 1e-5), (torch.float32, 2.0 ** -24, 1e-5),
])
def test_js_keeps_relative_accuracy_near_a_perfect_prediction(dtype, q, rel):
    """Near p_y = 1, JS ~ q log(2)/2 with q = 1 - p_y; the evaluation keeps its relative accuracy
    there, in float64 down to q = 2^-53 and in float32 down to 2^-24 (the textbook form
    log 2 + [p log p - (1+p) log(1+p)]/2 cancels to rounding noise). abs=0: JS is as small as
    1e-16, below pytest.approx's default abs of 1e-12, which would accept any value."""
    p_y = torch.tensor(1.0 - q, dtype=dtype)
    probs = torch.stack([p_y, 1.0 - p_y]).unsqueeze(0)  # 1 - p_y is exact (Sterbenz)
    js = js_divergence(probs, torch.tensor([0])).item()
    assert js == pytest.approx(_js_decimal(p_y.item()), rel=rel, abs=0)


# --------------------------------------------------------------------------- input checks


@pytest.mark.parametrize("fn", [sparsemax_score, js_divergence])
def test_sparse_metrics_reject_what_is_not_a_distribution_with_target_ids(fn):
    probs = torch.full((2, 4), 0.25)
    with pytest.raises(ValueError, match="sum to 1"):
        fn(probs * 1.1, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=">= 0"):
        fn(torch.tensor([[1.5, -0.5]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="finite"):
        fn(torch.tensor([[math.nan, 1.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match=r"token ids in \[0, 4\)"):
        fn(probs, torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="shape"):
        fn(probs, torch.tensor([0, 1, 2]))
    with pytest.raises(TypeError, match="floating-point"):
        fn(torch.ones(2, 4, dtype=torch.long), torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="integer"):
        fn(probs, torch.tensor([0.0, 1.0]))


# --------------------------------------------------------------------------- eps-perplexity


def test_eps_perplexity_with_eps_zero_is_plain_perplexity():
    p = torch.tensor([0.1, 0.5, 0.25, 0.9], dtype=torch.float64)
    value, eps = epsilon_perplexity(p, 10, eps=0)
    assert eps == 0.0 and value == pytest.approx(math.exp(-float(torch.log(p).mean())), rel=1e-15)
    assert epsilon_perplexity(torch.tensor([0.0, 0.5]), 10, eps=0.0) == (math.inf, 0.0)


def test_eps_perplexity_with_a_given_eps_is_eq9():
    p = np.array([0.0, 0.1, 0.5, 0.2])
    for eps in (1e-8, 1e-3, 0.1, 7.0):
        value, used = epsilon_perplexity(torch.tensor(p), 10, eps=eps)
        assert used == eps and value == pytest.approx(eps_ppl_by_definition(p, 10, eps), rel=1e-13)
    assert epsilon_perplexity(p, 10, eps=math.inf) == (10.0, math.inf)


def test_optimal_eps_is_zero_when_every_reference_word_is_likely():
    """All p = c > 1/V: f'(0) = 1/(V c) - 1 < 0, so lambda* = 0 and eps-ppl is plain perplexity 1/c."""
    value, eps = epsilon_perplexity(torch.full((50,), 0.3, dtype=torch.float64), 100)
    assert eps == 0.0 and value == pytest.approx(1 / 0.3, rel=1e-14)
    # p = 1/V everywhere: f is constant, the solver keeps eps = 0 and the value is V
    value, eps = epsilon_perplexity(torch.full((5,), 0.125, dtype=torch.float64), 8)
    assert eps == 0.0 and value == pytest.approx(8.0, rel=1e-14)


def test_optimal_eps_is_infinite_with_value_V_when_the_model_does_worse_than_uniform():
    """mean p <= 1/V (e.g. every p = 0): f'(1) >= 0, the infimum is the limit eps -> inf, value V."""
    assert epsilon_perplexity(torch.zeros(7), 50) == (50.0, math.inf)
    assert epsilon_perplexity([0.0, 0.01, 0.0], 50) == (50.0, math.inf)  # mean p = 1/300 < 1/50


@pytest.mark.parametrize("c,V", [(0.5, 10), (0.3, 100), (0.9, 50_257), (2.5e-4, 50_257)])
def test_optimal_eps_matches_the_closed_form_for_half_zeros_half_c(c, V):
    """Half of the p are 0 and half c (r = V c > 2): f'(lambda) = 0 gives lambda = r / (2 (r - 1)),
    so eps* = c / (V c - 2)."""
    p = torch.tensor([0.0, c] * 3, dtype=torch.float64)
    value, eps = epsilon_perplexity(p, V)
    expected = c / (V * c - 2)
    assert eps == pytest.approx(expected, rel=1e-12, abs=0)  # eps down to 2e-5
    assert value == pytest.approx(eps_ppl_by_definition(p.numpy(), V, expected), rel=1e-13)


def test_optimal_eps_of_an_exact_example_is_exact():
    """r = V p = (0, 1, 5, 2): f'(1/2) = (2 + 0 - 4/3 - 2/3)/4 = 0, so lambda* = 1/2 and eps* = 1/V."""
    value, eps = epsilon_perplexity(torch.tensor([0.0, 0.1, 0.5, 0.2], dtype=torch.float64), 10)
    assert eps == pytest.approx(0.1, rel=1e-14)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.0, 1e-12, 1e-6, 1e-4, 0.01, 0.1, 0.5, 0.9, 1.0]), min_size=1, max_size=40),
       st.sampled_from([2, 10, 1000, 50_257]))
def test_optimal_eps_minimises_eps_perplexity(ps, V):
    """The returned eps is no worse than a log-spaced grid of 161 values over 1e-16..1e8, than its
    neighbours eps (1 +- 1e-3), and than eps = 0 and eps -> inf; the value is eq. 9 at that eps."""
    p = np.array(ps)
    value, eps = epsilon_perplexity(torch.tensor(p), V)
    tol = 1 + 1e-12
    if math.isinf(eps):
        assert value == V
    else:
        assert value == pytest.approx(eps_ppl_by_definition(p, V, eps), rel=1e-12)
        for other in (eps * (1 - 1e-3), eps * (1 + 1e-3)):
            assert value <= eps_ppl_by_definition(p, V, other) * tol
    for other in np.logspace(-16, 8, 161):
        assert value <= eps_ppl_by_definition(p, V, other) * tol
    assert value <= V * tol
    if (p > 0).all():
        assert value <= float(np.exp(-np.mean(np.log(p)))) * tol


def test_optimal_eps_finds_a_tiny_eps_for_one_zero_among_many_good_predictions():
    """One reference word out of 200,000 gets probability 0: eps* is small (here ~6.5e-12) but
    positive, found to full precision (f'(lambda*) = 0 in the closed form r / ...)."""
    n, c, V = 200_000, 0.5, 50_257
    p = torch.full((n,), c, dtype=torch.float64)
    p[0] = 0.0
    value, eps = epsilon_perplexity(p, V)
    # f'(lambda) = 0 <=> 1/lambda = (n - 1)(r - 1)/((1 - lambda) r + lambda), r = V c
    r = V * c
    lam = r / ((n - 1) * (r - 1) + r - 1)
    # abs=0: eps is ~1e-10, so pytest.approx's default abs=1e-12 alone would
    # let a 1 % error through
    assert eps == pytest.approx(lam / (V * (1 - lam)), rel=1e-9, abs=0)
    assert 0 < eps < 1e-10 and math.isfinite(value)


def test_eps_perplexity_rejects_bad_input():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        epsilon_perplexity(torch.tensor([0.5, 1.5]), 10)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        epsilon_perplexity(torch.tensor([0.5, math.nan]), 10)
    with pytest.raises(ValueError, match="empty"):
        epsilon_perplexity(torch.tensor([]), 10)
    with pytest.raises(ValueError, match=">= 0"):
        epsilon_perplexity([0.5], 10, eps=-1e-3)
    with pytest.raises(ValueError, match=">= 0"):
        epsilon_perplexity([0.5], 10, eps=math.nan)
    with pytest.raises(TypeError, match="eps"):
        epsilon_perplexity([0.5], 10, eps=True)
    with pytest.raises(ValueError, match="vocab_size"):
        epsilon_perplexity([0.5], 0)
    with pytest.raises(TypeError, match="floating-point"):
        epsilon_perplexity(torch.tensor([0, 1]), 10)


# --------------------------------------------------------------------------- REP / WREP


def test_rep_wrep_on_a_hand_worked_example():
    """targets 1 2 3 1 2, predictions 2 2 1 1 5:
    t=1: pred 2, history [1] -> no; t=2: pred 1, last 1 at j=0 (gap 2) -> repeat for w >= 2,
    wrong (target 3); t=3: pred 1, gap 3 -> repeat for w >= 3, right (target 1); t=0, t=4: no."""
    tgt = torch.tensor([[1, 2, 3, 1, 2]])
    pred = torch.tensor([[2, 2, 1, 1, 5]])
    out = rep_wrep(pred, tgt, windows=(1, 2, 3))
    assert out[1] == {"rep": 0.0, "wrep": 0.0}
    assert out[2] == {"rep": 0.2, "wrep": 0.2}
    assert out[3] == {"rep": 0.4, "wrep": 0.2}
    assert out["mean"]["rep"] == pytest.approx(0.2) and out["mean"]["wrep"] == pytest.approx(0.4 / 3)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4), st.integers(1, 25), st.integers(1, 6), st.data())
def test_rep_wrep_equals_the_double_loop(B, T, V, data):
    """Random predictions/targets (small vocabularies, so repeats are common), random masks, PAD
    in targets, windows from 1 to beyond the sequence length."""
    tgt = torch.tensor(data.draw(st.lists(st.lists(st.integers(-1, V - 1), min_size=T, max_size=T), min_size=B, max_size=B)))
    pred = torch.tensor(data.draw(st.lists(st.lists(st.integers(0, V - 1), min_size=T, max_size=T), min_size=B, max_size=B)))
    mask = torch.tensor(data.draw(st.lists(st.lists(st.booleans(), min_size=T, max_size=T), min_size=B, max_size=B)))
    assume(bool(mask.any()))
    windows = tuple(data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=4, unique=True)))
    out = rep_wrep(pred, tgt, mask, windows=windows)
    naive = rep_wrep_naive(pred, tgt, mask, windows)
    for w in windows:
        assert out[w]["rep"] == pytest.approx(naive[w]["rep"], abs=1e-15)
        assert out[w]["wrep"] == pytest.approx(naive[w]["wrep"], abs=1e-15)
        assert 0 <= out[w]["wrep"] <= out[w]["rep"] <= 1
    assert out["mean"]["rep"] == pytest.approx(sum(naive[w]["rep"] for w in windows) / len(windows))


def test_rep_is_non_decreasing_in_the_window_and_constant_beyond_the_sequence():
    g = torch.Generator().manual_seed(0)
    tgt, pred = torch.randint(0, 30, (3, 100), generator=g), torch.randint(0, 30, (3, 100), generator=g)
    out = rep_wrep(pred, tgt)
    reps = [out[w]["rep"] for w in (16, 32, 128, 512)]
    assert reps == sorted(reps) and out[128] == out[512]  # T = 100 < 128: the whole prefix
    assert out["mean"]["rep"] == pytest.approx(sum(reps) / 4)


def test_rep_wrep_never_looks_across_rows_or_ahead():
    tgt = torch.tensor([[7, 7, 7], [1, 2, 3]])
    pred = torch.tensor([[1, 2, 3], [3, 3, 7]])  # row 1 predicts 3 before 3 appears in its targets
    out = rep_wrep(pred, tgt, windows=(512,))
    assert out[512] == {"rep": 0.0, "wrep": 0.0}


def test_rep_wrep_counts_context_tokens_as_history_but_does_not_score_them():
    tgt = torch.tensor([[4, 5, 6, 9]])
    pred = torch.tensor([[0, 0, 0, 4]])
    mask = torch.tensor([[False, False, False, True]])
    out = rep_wrep(pred, tgt, mask, windows=(2, 3))
    assert out[2] == {"rep": 0.0, "wrep": 0.0} and out[3] == {"rep": 1.0, "wrep": 1.0}


def test_rep_wrep_rejects_bad_input():
    t = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="same shape"):
        rep_wrep(t, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="no position"):
        rep_wrep(t, t, torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="integer"):
        rep_wrep(t.float(), t)
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        rep_wrep(t[0], t[0])
    with pytest.raises(TypeError, match="bool"):
        rep_wrep(t, t, torch.ones(2, 3))
    with pytest.raises(ValueError, match="window"):
        rep_wrep(t, t, windows=(0, 16))
    with pytest.raises(ValueError, match="distinct"):
        rep_wrep(t, t, windows=(16, 16))
    with pytest.raises(ValueError, match=">= 0"):
        rep_wrep(t - 1, t)


# --------------------------------------------------------------------------- distinct-n


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), max_size=12), min_size=1, max_size=6), st.integers(1, 4))
def test_distinct_n_equals_the_naive_count_for_lists_tensors_and_generations(seqs, n):
    total_grams = sum(max(0, len(s) - n + 1) for s in seqs)
    T = max(1, max(len(s) for s in seqs))
    padded = torch.full((len(seqs), T), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        padded[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    lengths = torch.tensor([len(s) for s in seqs])
    if sum(len(s) for s in seqs):
        for per in ("ngrams", "tokens"):
            if per == "ngrams" and total_grams == 0:
                continue
            expected = distinct_naive(seqs, n, per)
            assert distinct_n(seqs, n, per=per) == pytest.approx(expected, rel=1e-15)
            assert distinct_n(padded, n, lengths=lengths, per=per) == pytest.approx(expected, rel=1e-15)
            assert distinct_n(_generation(seqs, T, eos_id=99), n, per=per) == pytest.approx(expected, rel=1e-15)
    if total_grams == 0:
        with pytest.raises(ValueError, match="undefined"):
            distinct_n(seqs, n)


def test_distinct_n_ignores_short_sequences_and_never_spans_two_sequences():
    # [1, 2] + [3] would make the bigram (2, 3) if sequences were concatenated
    assert distinct_n([[1, 2], [3], [2, 3]], 2) == 1.0  # bigrams (1, 2), (2, 3): both distinct
    assert distinct_n([[1, 2], [3], [1, 2]], 2) == 0.5
    assert distinct_n([[1, 2], [3], [1, 2]], 2, per="tokens") == 0.2


def test_distinct_n_drops_the_final_eos_of_a_generation_unless_asked():
    gen = _generation([[1, 2, 9], [1, 2, 9], [3, 3]], 4, eos_id=9)
    assert distinct_n(gen, 1) == pytest.approx(3 / 6)  # {1, 2, 3} over 1 2 1 2 3 3
    assert distinct_n(gen, 1, include_eos=True) == pytest.approx(4 / 8)


def test_distinct_n_of_a_generation_drops_exactly_the_final_eos():
    # Two terminated rows and one cut at max_len. Without eos the words are
    # 1 1 | 1 | 2 2, with it 1 1 9 | 1 9 | 2 2; the two readings give
    # different values for n = 1 and n = 2 and both normalisations (in the
    # test above both readings give 1/2, so it cannot tell them apart).
    gen = _generation([[1, 1, 9], [1, 9], [2, 2]], 4, eos_id=9)
    assert distinct_n(gen, 1) == 2 / 5  # {1, 2} over 5 words
    assert distinct_n(gen, 1, include_eos=True) == 3 / 7  # {1, 2, 9}
    assert distinct_n(gen, 2) == 2 / 2  # (1, 1), (2, 2)
    assert distinct_n(gen, 2, per="tokens") == 2 / 5
    # (1, 1), (1, 9), (1, 9), (2, 2): three distinct among four bigrams
    assert distinct_n(gen, 2, include_eos=True) == 3 / 4
    assert distinct_n(gen, 2, include_eos=True, per="tokens") == 3 / 7


def test_distinct_n_rejects_bad_input():
    with pytest.raises(ValueError, match="n must be"):
        distinct_n([[1, 2]], 0)
    with pytest.raises(ValueError, match="per"):
        distinct_n([[1, 2]], 1, per="words")
    with pytest.raises(ValueError, match="lengths"):
        distinct_n([[1, 2]], 1, lengths=torch.tensor([2]))
    with pytest.raises(ValueError, match="lengths"):
        distinct_n(torch.ones(2, 3, dtype=torch.long), 1, lengths=torch.tensor([4, 1]))
    with pytest.raises(ValueError, match="undefined"):
        distinct_n([], 1)
    with pytest.raises(TypeError):
        distinct_n("abc", 1)


# --------------------------------------------------------------------------- CUDA


@needs_cuda
def test_sparse_metrics_run_on_cuda_and_agree_with_the_cpu():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(6, 50_257, generator=g) * 5, -1)
    target = torch.randint(0, 50_257, (6,), generator=g)
    sp, js = sparsemax_score(probs.cuda(), target.cuda()), js_divergence(probs.cuda(), target.cuda())
    assert sp.is_cuda and js.is_cuda
    torch.testing.assert_close(sp.cpu(), sparsemax_score(probs, target), rtol=0, atol=1e-6)
    torch.testing.assert_close(js.cpu(), js_divergence(probs, target), rtol=0, atol=1e-6)
    p = torch.tensor([0.0, 0.1, 0.5, 0.2], dtype=torch.float64)
    assert epsilon_perplexity(p.cuda(), 10) == pytest.approx(epsilon_perplexity(p, 10), rel=1e-12)
    tgt, pred = torch.randint(0, 30, (3, 200), generator=g), torch.randint(0, 30, (3, 200), generator=g)
    assert rep_wrep(pred.cuda(), tgt.cuda()) == rep_wrep(pred, tgt)
    assert distinct_n(tgt.cuda(), 2) == distinct_n(tgt, 2)


@pytest.mark.parametrize("eps", [1e306, 1e307, 1e308, 1.7e308])
def test_eps_perplexity_with_an_eps_whose_product_with_v_overflows_is_the_uniform_limit(eps):
    # eps V overflowed float64 and the value came out inf; eq. 9 tends to V as eps grows
    p = np.array([0.0, 0.1, 0.5, 0.2, 1.0])
    V = 300
    value, used = epsilon_perplexity(torch.tensor(p), V, eps=eps)
    assert used == eps and value == pytest.approx(V, rel=1e-12)
    # exact in decimal arithmetic: (p + eps) / (1 + eps V) -> 1 / V up to (1 - p V) / (eps V)
    from decimal import Decimal, localcontext

    with localcontext() as ctx:
        ctx.prec = 50
        mean_log = sum(((Decimal(x) + Decimal(eps)) / (1 + Decimal(eps) * V)).ln() for x in p) / len(p)
        assert value == pytest.approx(float((-mean_log).exp()), rel=1e-14)
    # below the overflow the formula as printed is kept
    small = 1e300
    assert epsilon_perplexity(torch.tensor(p), V, eps=small)[0] == pytest.approx(
        eps_ppl_by_definition(p, V, small), rel=1e-12)


def test_distinct_n_refuses_float_token_ids_in_lists_instead_of_truncating_them():
    with pytest.raises(TypeError, match="integer token ids"):
        distinct_n([[1.5, 2.7, 3.0]], 1)  # counted as [1, 2, 3] before
    with pytest.raises(TypeError, match="integer token ids"):
        distinct_n([[True, False]], 1)
    assert distinct_n([[1, 2, 3], [], np.array([1, 2])], 1) == distinct_n([[1, 2, 3], [1, 2]], 1)
