"""Tests of nmst_lib.temperature: the contextual-temperature output layer of Contextual
Temperature (2020), eqs. 3-7 and Table 3 (Chapter 9, 09_temperature), and its integration in
nmst_lib.models.RecurrentLM.

References are written out independently in float64 (the paper's formulas as printed, explicit
loops over positions and mixture components); sizes are tiny so that the file runs in seconds.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.func import functional_call

from nmst_lib import data as D
from nmst_lib.decoding import decode
from nmst_lib.heads import (
    EntmaxHead,
    NMSTEntmaxHead,
    NMSTHead,
    STHead,
    VanillaHead,
    eos_lower_bound,
)
from nmst_lib.models import LSTMLM, RNNLM
from nmst_lib.temperature import (
    TEMPERATURE_NORMALISATIONS,
    ContextualHead,
    ContextualTemperature,
    contextual_head,
    normalised_temperature,
    temperature_defaults,
    temperature_range,
)

F64 = torch.float64
V, H = 12, 8
EOS = V - 1
NORMS = TEMPERATURE_NORMALISATIONS


pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------- helpers


def _randomise(module: torch.nn.Module, seed: int = 0, std: float = 0.7) -> torch.nn.Module:
    """Every parameter drawn afresh (W2 starts at zero, which would hide most bugs)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(std * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def _base(name: str, eps: float = 0.05):
    return {"va": VanillaHead, "st": lambda: STHead(eps), "nmst": lambda: NMSTHead(eps)}[name]()


def _head(base="va", normalisation="sigmoid", mixtures=1, loss_scaling=False, seed=0, std=0.7, dtype=F64, **kw):
    """A randomised ContextualHead [H -> V] and a randomised output layer for it."""
    head = contextual_head(_base(base) if isinstance(base, str) else base, H, V, normalisation=normalisation,
                           mixtures=mixtures, loss_scaling=loss_scaling, **kw)
    output = torch.nn.Linear(H, V)
    _randomise(head, seed, std)
    _randomise(output, seed + 1000)
    return head.to(dtype), output.to(dtype)


def _hidden(seed=1, shape=(2, 6), dtype=F64, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, H, generator=g, dtype=F64)).to(dtype)


def _model(base, seed=0, mixtures=1, normalisation="sigmoid", loss_scaling=False, arch=LSTMLM, dtype=F64):
    head = contextual_head(_base(base), H, V, normalisation=normalisation, mixtures=mixtures,
                           loss_scaling=loss_scaling)
    model = arch(V, hidden=H, layers=2, dropout=0.0, head=head)
    return _randomise(model, seed).to(dtype).eval()


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def naive_tau(hidden: torch.Tensor, temp: ContextualTemperature) -> torch.Tensor:
    """Eq. 5 / Table 3 written out position by position from the weights."""
    w1, w2 = temp.W1.weight.double(), temp.W2.weight.double()
    rows = hidden.double().reshape(-1, hidden.shape[-1])
    out = []
    for h in rows:
        mu = (h @ w1.T @ w2.T).tolist()
        if temp.normalisation == "sigmoid":
            out.append([(_sigmoid(m) + temp.a) / temp.b for m in mu])
        elif temp.normalisation == "softmax":
            top = max(mu)
            norm = sum(math.exp(m - top) for m in mu)
            out.append([(math.exp(m - top) / norm + temp.a) / temp.b for m in mu])
        elif temp.normalisation == "power-tanh":
            out.append([temp.lam ** math.tanh(m) for m in mu])
        else:
            out.append([math.tanh(m) + temp.lam for m in mu])
    return torch.tensor(out, dtype=F64).reshape(*hidden.shape[:-1], -1)


def _softmax_row(values: list[float]) -> list[float]:
    top = max(values)
    e = [math.exp(v - top) for v in values]
    s = sum(e)
    return [x / s for x in e]


def naive_probs(head: ContextualHead, hidden: torch.Tensor, output: torch.nn.Linear) -> torch.Tensor:
    """p of eqs. 4-6 (and the CT-ST/CT-NMST combination) in float64, one position at a time;
    ``hidden`` is [B, T, H] and steps t = 1..T run along dim 1."""
    B, T, _ = hidden.shape
    tau = naive_tau(hidden, head.temperature) if head.temperature is not None else torch.ones(B, T, V, dtype=F64)
    W, c = output.weight.double(), output.bias.double()
    out = torch.empty(B, T, V, dtype=F64)
    keep = [1.0] * B  # ST's running product
    for b in range(B):
        for t in range(T):
            h = hidden[b, t].double()
            tv = tau[b, t].tolist()
            if head.mixtures > 1:
                lat = torch.tanh(head.latent.weight.double() @ h + head.latent.bias.double()).reshape(head.mixtures, H)
                prior = _softmax_row((head.prior.weight.double() @ h).tolist())
                p = [0.0] * V
                for m in range(head.mixtures):
                    z = (W @ lat[m] + c).tolist()
                    comp = _softmax_row([z[v] / tv[v] for v in range(V)])
                    p = [p[v] + prior[m] * comp[v] for v in range(V)]
                out[b, t] = torch.tensor(p, dtype=F64)
                continue
            z = (W @ h + c).tolist()
            if isinstance(head.base, VanillaHead):
                out[b, t] = torch.tensor(_softmax_row([z[v] / tv[v] for v in range(V)]), dtype=F64)
                continue
            eps, sig = head.base.eps, _sigmoid(z[EOS])
            if isinstance(head.base, NMSTHead):
                p_eos = sig + (1 - sig) * (1 - (1 - eps) ** (t + 1))
            else:
                keep[b] = (keep[b] if t else 1.0) * (1 - eps) * sig
                p_eos = 1 - keep[b]
            q = _softmax_row([z[v] / tv[v] for v in range(V - 1)])
            out[b, t] = torch.tensor([(1 - p_eos) * x for x in q] + [p_eos], dtype=F64)
    return out


# --------------------------------------------------------------------------- normalisations (eq. 5, Table 3)


def test_defaults_and_ranges_are_the_papers():
    assert temperature_defaults("sigmoid") == {"a": 1.0, "b": 0.5}
    assert temperature_defaults("softmax") == {"a": 1.0, "b": 0.5}
    assert temperature_defaults("power-tanh") == {"lam": 4.0}
    assert temperature_defaults("shifted-tanh") == {"lam": 3.0}
    temperature_defaults("sigmoid")["a"] = 99.0  # a fresh dict each time
    assert temperature_defaults("sigmoid")["a"] == 1.0
    assert temperature_range("sigmoid") == (2.0, 4.0) == temperature_range("softmax")
    assert temperature_range("power-tanh") == (0.25, 4.0)
    assert temperature_range("shifted-tanh") == (2.0, 4.0)
    assert temperature_range("sigmoid", a=0.5, b=2.0) == (0.25, 0.75)
    assert temperature_range("power-tanh", lam=2.0) == (0.5, 2.0)
    assert temperature_range("shifted-tanh", lam=5.0) == (4.0, 6.0)


@pytest.mark.parametrize("normalisation", NORMS)
def test_normalised_temperature_matches_the_formulas(normalisation):
    mu = torch.tensor([[-30.0, -2.0, -0.3, 0.0, 0.7, 3.0, 25.0]], dtype=F64)
    temp = ContextualTemperature(1, 7, 1, normalisation).double()
    with torch.no_grad():
        temp.W1.weight.fill_(1.0)
        temp.W2.weight.copy_(mu.T)
    hidden = torch.ones(1, 1, dtype=F64)
    expected = naive_tau(hidden, temp)
    torch.testing.assert_close(normalised_temperature(mu, normalisation), expected, rtol=1e-14, atol=0)
    torch.testing.assert_close(temp(hidden), expected, rtol=1e-14, atol=0)


def _assert_in_range(tau: torch.Tensor, lo: float, hi: float):
    """lo <= tau <= hi up to rounding in tau's dtype: two ulps of the range's top ``hi``, since the
    normalisations add terms as large as ``hi`` (shifted-tanh's tanh(mu) + lambda at lambda = 1.073
    in float32 lands 4.7e-8 below lambda - 1 = 0.073: cancellation, which hypothesis found against
    a tolerance of one ulp of ``lo``)."""
    tau = tau.detach()
    slack = 2 * torch.finfo(tau.dtype).eps * hi
    assert bool(torch.isfinite(tau).all()) and bool((tau > 0).all())
    assert float(tau.min()) >= lo - slack, (float(tau.min()), lo)
    assert float(tau.max()) <= hi + slack, (float(tau.max()), hi)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("normalisation", NORMS)
def test_temperatures_stay_in_range_at_extremes(normalisation, dtype):
    mu = torch.tensor([[-1e4, -60.0, -1.0, 0.0, 1.0, 60.0, 1e4], [1e4] * 7, [-1e4] * 7], dtype=dtype)
    lo, hi = temperature_range(normalisation)
    tau = normalised_temperature(mu, normalisation)
    assert tau.dtype == dtype and tau.shape == mu.shape
    _assert_in_range(tau, lo, hi)
    if normalisation != "softmax":  # saturation reaches the ends exactly
        assert float(tau[0, 0]) == pytest.approx(lo, rel=2 * torch.finfo(dtype).eps)
        assert float(tau[0, -1]) == pytest.approx(hi, rel=2 * torch.finfo(dtype).eps)
    else:  # one dominant score: that token at the top, the others at the bottom
        row = normalised_temperature(torch.tensor([1e4, -1e4, 0.0], dtype=dtype), "softmax")
        assert row.tolist() == [hi, lo, lo]


@settings(max_examples=60, deadline=None)
@given(
    normalisation=st.sampled_from(NORMS),
    a=st.floats(1e-3, 10.0),
    b=st.floats(1e-2, 10.0),
    lam=st.floats(1.001, 10.0),
    mu=st.lists(st.one_of(st.floats(-80.0, 80.0), st.sampled_from([-1e4, 1e4])), min_size=2, max_size=9),
    dtype=st.sampled_from([torch.float32, F64]),
)
def test_temperatures_stay_in_range_for_any_parameters(normalisation, a, b, lam, mu, dtype):
    kw = {"a": a, "b": b} if normalisation in ("sigmoid", "softmax") else {"lam": lam}
    tau = normalised_temperature(torch.tensor(mu, dtype=dtype), normalisation, **kw)
    _assert_in_range(tau, *temperature_range(normalisation, **kw))


@settings(max_examples=40, deadline=None)
@given(
    a=st.floats(1e-3, 10.0),
    b=st.floats(1e-2, 10.0),
    mu=st.lists(st.one_of(st.floats(-50.0, 50.0), st.sampled_from([-1e4, 1e4])), min_size=2, max_size=40),
)
def test_softmax_normalisation_has_a_constant_mean_temperature(a, b, mu):
    """With the paper's literal softmax over the vocabulary the temperatures sum to (1 + V a)/b,
    so their mean is (a + 1/V)/b at every position, whatever the context."""
    tau = normalised_temperature(torch.tensor(mu, dtype=F64), "softmax", a=a, b=b)
    assert float(tau.mean()) == pytest.approx((a + 1 / len(mu)) / b, rel=1e-12)


def test_softmax_mean_temperature_through_the_module_and_model():
    model = _model("va", normalisation="softmax")
    tau = model.temperatures(torch.randint(0, V - 1, (3, 7), generator=torch.Generator().manual_seed(0)))
    assert tau.std() > 0  # not trivially constant per token
    torch.testing.assert_close(tau.mean(-1), torch.full((3, 7), (1.0 + 1 / V) / 0.5, dtype=F64), rtol=1e-13, atol=0)


# --------------------------------------------------------------------------- the temperature module


def test_temperature_module_shapes_and_bias_free_factorisation():
    temp = ContextualTemperature(H, V, 3)
    assert temp.W1.weight.shape == (3, H) and temp.W2.weight.shape == (V, 3)
    assert temp.W1.bias is None and temp.W2.bias is None
    assert sum(p.numel() for p in temp.parameters()) == 3 * (H + V)
    assert temp.range == (2.0, 4.0) and temp.rank == 3 and (temp.a, temp.b, temp.lam) == (1.0, 0.5, None)
    for shape in [(H,), (5, H), (2, 3, H), (2, 0, H)]:
        assert temp(torch.randn(shape)).shape == (*shape[:-1], V)
    assert temp.scores(torch.randn(4, H)).shape == (4, V)
    assert ContextualTemperature(H, V, 2, "power-tanh", lam=2.0).range == (0.5, 2.0)
    assert "normalisation='sigmoid'" in repr(temp)


@pytest.mark.parametrize("normalisation,start", [("sigmoid", 3.0), ("softmax", (1.0 + 1 / V) / 0.5),
                                                 ("power-tanh", 1.0), ("shifted-tanh", 3.0)])
def test_initial_temperature_is_one_constant_for_every_token_and_context(normalisation, start):
    """W2 starts at zero: mu = 0, so training starts from one global temperature (the middle of
    the range for sigmoid and the tanh forms)."""
    temp = ContextualTemperature(H, V, 4, normalisation)
    assert bool((temp.W2.weight == 0).all()) and bool((temp.W1.weight != 0).any())
    with torch.no_grad():
        tau = temp(_hidden(dtype=torch.float32, scale=5.0))
    assert torch.equal(tau, torch.full_like(tau, tau[0, 0, 0].item()))
    assert float(tau[0, 0, 0]) == pytest.approx(start, rel=1e-6)


# --------------------------------------------------------------------------- the head: definitions and equivalences


@pytest.mark.parametrize("normalisation", NORMS)
@pytest.mark.parametrize("base,mixtures", [("va", 1), ("st", 1), ("nmst", 1), ("va", 3)])
def test_head_matches_the_definition_written_out(base, mixtures, normalisation):
    head, output = _head(base, normalisation, mixtures)
    hidden = _hidden(shape=(2, 5))
    got = head(output(hidden), hidden=hidden, output=output)
    expected = naive_probs(head, hidden, output)
    assert got.shape == (2, 5, V)
    torch.testing.assert_close(got.exp(), expected, rtol=1e-10, atol=1e-15)
    torch.testing.assert_close(got, expected.log(), rtol=1e-10, atol=1e-12)


def test_plain_mos_matches_the_explicit_mixture():
    head, output = _head("va", None, mixtures=4)
    assert head.temperature is None and head.name == "MoS" and not head.needs_logits
    hidden = _hidden(shape=(3, 4))
    got = head(None, hidden=hidden, output=output)
    torch.testing.assert_close(got.exp(), naive_probs(head, hidden, output), rtol=1e-10, atol=1e-15)
    # the logits argument is ignored by a mixture (but checked when given)
    torch.testing.assert_close(head(output(hidden), hidden=hidden, output=output), got, rtol=0, atol=0)


@pytest.mark.parametrize("base", ["va", "st", "nmst"])
def test_unit_temperature_is_exactly_the_plain_layer(base):
    """W2 = 0 and (a, b) = (1/2, 1): tau = (1/2 + 1/2)/1 = 1 exactly, and the layer is the base
    layer bit for bit (with and without a context mask)."""
    head = contextual_head(_base(base), H, V, normalisation="sigmoid", a=0.5, b=1.0)
    _randomise(head.temperature.W1)
    output = _randomise(torch.nn.Linear(H, V), 3)
    hidden = _hidden(shape=(2, 6), dtype=torch.float32)
    logits = output(hidden)
    assert bool((head.temperatures(hidden) == 1.0).all())
    mask = torch.tensor([[True, True, False, False, False, False], [True, False, False, False, False, False]])
    for cm in (None, mask):
        assert torch.equal(head(logits, cm, hidden=hidden), _base(base)(logits, cm))


@settings(max_examples=25, deadline=None)
@given(c=st.floats(0.05, 20.0), base=st.sampled_from(["va", "st", "nmst"]), seed=st.integers(0, 1000))
def test_constant_temperature_is_a_global_temperature(c, base, seed):
    """W2 = 0: tau = (1/2 + a)/b = c for every token, and the layer is the base layer on z / c
    (for ST/NMST the non-eos logits only)."""
    a = 0.5
    head = contextual_head(_base(base), H, V, normalisation="sigmoid", a=a, b=(0.5 + a) / c).double()
    output = _randomise(torch.nn.Linear(H, V), seed).double()
    hidden = _hidden(seed, shape=(2, 5))
    logits = output(hidden)
    torch.testing.assert_close(head.temperatures(hidden), torch.full((2, 5, V), c, dtype=F64), rtol=1e-14, atol=0)
    scaled = logits / c
    if base != "va":
        scaled[..., EOS] = logits[..., EOS]
    torch.testing.assert_close(head(logits, hidden=hidden), _base(base)(scaled), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("base,mixtures", [("va", 1), ("st", 1), ("nmst", 1), ("va", 3)])
def test_step_equals_forward(base, mixtures):
    head, output = _head(base, "sigmoid", mixtures)
    hidden = _hidden(shape=(3, 7))
    logits = output(hidden)
    full = head(logits, hidden=hidden, output=output)
    state = head.initial_step_state(3)
    steps = []
    for t in range(7):
        lp, state = head.step(logits[:, t], state, hidden=hidden[:, t], output=output)
        steps.append(lp)
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-13, atol=1e-13)
    # with a context mask, the continuation steps are the same steps
    mask = torch.arange(7).expand(3, 7) < 2
    masked = head(logits, mask, hidden=hidden, output=output)
    state = head.initial_step_state(3)
    for t in range(2, 7):
        lp, state = head.step(logits[:, t], state, hidden=hidden[:, t], output=output)
        torch.testing.assert_close(lp, masked[:, t], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("eps", [1e-5, 5e-4])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_nmst_base_keeps_the_eos_floor_exactly_with_an_untempered_eos(eps, dtype):
    """CT-NMST: the eos log-probability is NMST's on the RAW eos logit, bit for bit, so
    p(eos at t) >= 1 - (1 - eps)^t holds for any temperatures; also at |logit| = 1e4 and
    extreme temperatures (|mu| ~ 1e4)."""
    head, output = _head(NMSTHead(eps), "sigmoid", std=3e3, dtype=dtype)
    hidden = _hidden(shape=(4, 30), dtype=dtype, scale=3.0)
    logits = (output(hidden) * 1e3).detach()
    logits[0, :, EOS] = -1e4
    logits[1, :, :EOS] = 1e4
    mu = head.temperature.scores(hidden).detach()
    assert float(mu.abs().max()) > 1e4
    out = head(logits, hidden=hidden)
    plain = NMSTHead(eps)(logits)
    assert torch.equal(out[..., EOS], plain[..., EOS])
    assert bool(torch.isfinite(out).all())
    bound = eos_lower_bound(torch.arange(1, 31, dtype=F64), eps)
    tol = 1e-12 if dtype == F64 else 1e-6
    assert bool((out[..., EOS].double() >= bound.log() - tol).all())
    torch.testing.assert_close(out.double().exp().sum(-1), torch.ones(4, 30, dtype=F64), rtol=0,
                               atol=1e-12 if dtype == F64 else 1e-5)
    # the non-eos tokens follow the tempered logits
    tau = head.temperatures(hidden)
    tempered = logits / tau
    tempered[..., EOS] = logits[..., EOS]
    torch.testing.assert_close(out, NMSTHead(eps)(tempered), rtol=0, atol=0)


@pytest.mark.parametrize("base", ["va", "st", "nmst"])
def test_loss_scaling_is_the_nll_times_the_mean_temperature_and_not_detached(base):
    head, output = _head(base, "sigmoid", loss_scaling=True)
    plain, _ = _head(base, "sigmoid", loss_scaling=False)
    hidden = _hidden(shape=(2, 6))
    logits = output(hidden).detach()
    targets = torch.randint(0, V, (2, 6), generator=torch.Generator().manual_seed(5))
    nll = -head(logits, hidden=hidden).gather(-1, targets[..., None])[..., 0]
    plain.load_state_dict(head.state_dict())
    torch.testing.assert_close(plain.token_losses(logits, targets, hidden=hidden), nll, rtol=1e-14, atol=0)
    tau = head.temperatures(hidden)
    mean_tau = tau.mean(-1) if base == "va" else tau[..., :EOS].mean(-1)  # ST/NMST: the tempered (non-eos) entries
    losses = head.token_losses(logits, targets, hidden=hidden)
    torch.testing.assert_close(losses, nll * mean_tau, rtol=1e-14, atol=0)
    # the gradient flows through the factor: d(nll m) = m d(nll) + nll d(m)
    w2 = head.temperature.W2.weight
    (g_total,) = torch.autograd.grad(losses.sum(), w2)
    (g_nll,) = torch.autograd.grad((nll * mean_tau.detach()).sum(), w2)
    (g_factor,) = torch.autograd.grad((nll.detach() * mean_tau).sum(), w2)
    assert float(g_factor.abs().max()) > 1e-6
    torch.testing.assert_close(g_total, g_nll + g_factor, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("base,mixtures", [("va", 1), ("nmst", 1), ("va", 3)])
def test_detached_loss_scaling_has_the_same_values_and_no_gradient_through_the_factor(base, mixtures):
    """detach_loss_scale: the loss is still nll * mean tau, but its gradient is mean tau * d(nll)
    only (fused and autograd paths alike)."""
    literal, output = _head(base, "sigmoid", mixtures, loss_scaling=True)
    detached, _ = _head(base, "sigmoid", mixtures, loss_scaling=True, detach_loss_scale=True)
    detached.load_state_dict(literal.state_dict())
    hidden = _hidden(shape=(2, 6))
    logits = output(hidden).detach()
    targets = torch.randint(0, V, (2, 6), generator=torch.Generator().manual_seed(9))
    lit = literal.token_losses(logits, targets, hidden=hidden, output=output)
    det = detached.token_losses(logits, targets, hidden=hidden, output=output)
    torch.testing.assert_close(det, lit, rtol=1e-13, atol=0)
    nll = -detached(logits, hidden=hidden, output=output).gather(-1, targets[..., None])[..., 0]
    tau = detached.temperatures(hidden)
    mean_tau = tau.mean(-1) if base == "va" else tau[..., :EOS].mean(-1)
    w2 = detached.temperature.W2.weight
    (g_det,) = torch.autograd.grad(det.sum(), w2)
    (g_ref,) = torch.autograd.grad((nll * mean_tau.detach()).sum(), w2)
    torch.testing.assert_close(g_det, g_ref, rtol=1e-11, atol=1e-14)
    (g_lit,) = torch.autograd.grad(literal.token_losses(logits, targets, hidden=hidden, output=output).sum(),
                                   literal.temperature.W2.weight)
    assert float((g_lit - g_det).abs().max()) > 1e-6  # the literal eq. 7 differs by the factor's gradient


def test_detach_loss_scale_needs_loss_scaling():
    with pytest.raises(ValueError, match="detach_loss_scale applies to loss_scaling=True"):
        contextual_head(VanillaHead(), H, V, normalisation="sigmoid", detach_loss_scale=True)


def test_loss_scaling_with_softmax_normalisation_is_a_constant_factor():
    head, output = _head("va", "softmax", loss_scaling=True)
    plain, _ = _head("va", "softmax")
    hidden = _hidden(shape=(2, 5))
    targets = torch.randint(0, V, (2, 5), generator=torch.Generator().manual_seed(6))
    logits = output(hidden).detach()
    torch.testing.assert_close(head.token_losses(logits, targets, hidden=hidden),
                               plain.token_losses(logits, targets, hidden=hidden) * (1.0 + 1 / V) / 0.5,
                               rtol=1e-13, atol=0)


# --------------------------------------------------------------------------- gradients


class _Losses(torch.nn.Module):
    """``head.token_losses`` as a module's forward, for ``functional_call``."""

    def __init__(self, head):
        super().__init__()
        self.head = head

    def forward(self, logits, targets, context_mask, hidden, output):
        return self.head.token_losses(logits, targets, context_mask, hidden=hidden, output=output)


def _gradcheck_case(head, output, context_mask=None, losses=False):
    """``(f, inputs)``: the head's log-probabilities (or losses) as a function of the hidden
    state and of every parameter of the head, with the base's -inf entries (context eos) zeroed."""
    names = [n for n, _ in head.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for _, p in head.named_parameters())
    hidden = _hidden(shape=(2, 3)).requires_grad_()
    targets = torch.tensor([[0, EOS, 3], [EOS, 5, 1]])
    wrapper = _Losses(head)

    def f(hidden, *params):
        logits = output(hidden)
        if losses:
            state = {"head." + n: p for n, p in zip(names, params)}
            return functional_call(wrapper, state, (logits, targets, context_mask, hidden, output))
        out = functional_call(head, dict(zip(names, params)), (logits, context_mask),
                              {"hidden": hidden, "output": output})
        return out.masked_fill(torch.isinf(out), 0.0)

    return f, (hidden, *params)


@pytest.mark.parametrize("normalisation", NORMS)
@pytest.mark.parametrize("base,mixtures", [("va", 1), ("nmst", 1), ("st", 1), ("va", 2)])
def test_gradcheck_in_float64(base, mixtures, normalisation):
    """Analytic gradients wrt hidden, W1, W2 (and the MoS weights) match finite differences."""
    head, output = _head(base, normalisation, mixtures, std=0.5)
    f, inputs = _gradcheck_case(head, output)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("loss_scaling", [True, False, "detached"])
@pytest.mark.parametrize("base,mixtures", [("va", 1), ("nmst", 1), ("va", 3)])
def test_gradcheck_of_losses_with_context(base, mixtures, loss_scaling):
    """token_losses (with the fused autograd functions of the vanilla base: CT and CT-MoS)
    against finite differences (``detached``: against the loss with the factor held fixed)."""
    detached = loss_scaling == "detached"
    head, output = _head(base, "sigmoid", mixtures, loss_scaling=bool(loss_scaling), std=0.5,
                         detach_loss_scale=detached)
    if detached:  # finite differences see the factor move; compare with autograd of the detached formula instead
        hidden = _hidden(shape=(2, 3), scale=0.5)
        targets = torch.tensor([[1, EOS, 3], [4, 0, 2]])
        losses = head.token_losses(output(hidden), targets, hidden=hidden, output=output)
        params = list(head.parameters())
        g1 = torch.autograd.grad(losses.sum(), params, allow_unused=True)
        ref = -head(output(hidden), hidden=hidden, output=output).gather(-1, targets[..., None])[..., 0]
        tau = head.temperatures(hidden)
        ref = ref * (tau.mean(-1) if base == "va" else tau[..., :EOS].mean(-1)).detach()
        g2 = torch.autograd.grad(ref.sum(), params, allow_unused=True)
        for a, b in zip(g1, g2):
            if a is None or b is None:
                assert a is None and b is None or float((a if b is None else b).abs().max()) == 0.0
            else:
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)
        return
    mask = torch.tensor([[True, False, False], [False, False, False]])
    f, inputs = _gradcheck_case(head, output, context_mask=mask, losses=True)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_gradcheck_of_plain_mos_losses():
    head, output = _head("va", None, mixtures=3, std=0.5)
    f, inputs = _gradcheck_case(head, output, losses=True)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("base,mixtures", [("va", 1), ("va", 3)])
def test_fused_losses_equal_the_autograd_losses_and_gradients(base, mixtures):
    """The fused training loss gives the values and gradients of -log p(y) * mean tau built from
    forward() with autograd."""
    head, output = _head(base, "power-tanh", mixtures, loss_scaling=True)
    hidden = _hidden(shape=(3, 5))
    targets = torch.randint(0, V, (3, 5), generator=torch.Generator().manual_seed(8))
    losses = head.token_losses(output(hidden), targets, hidden=hidden, output=output)
    assert "Backward" in type(losses.grad_fn).__name__ and "Mul" not in type(losses.grad_fn).__name__
    ref = -head(output(hidden), hidden=hidden, output=output).gather(-1, targets[..., None])[..., 0]
    ref = ref * head.temperatures(hidden).mean(-1)
    torch.testing.assert_close(losses, ref, rtol=1e-13, atol=0)
    params = list(head.parameters()) + list(output.parameters())
    g1 = torch.autograd.grad((losses * torch.arange(15.0, dtype=F64).reshape(3, 5)).sum(), params)
    g2 = torch.autograd.grad((ref * torch.arange(15.0, dtype=F64).reshape(3, 5)).sum(), params)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("normalisation", NORMS)
@pytest.mark.parametrize("base,mixtures", [("va", 1), ("nmst", 1), ("va", 3)])
def test_gradients_are_finite_at_extremes_in_float32(base, mixtures, normalisation):
    head, output = _head(NMSTHead(1e-5) if base == "nmst" else base, normalisation, mixtures, loss_scaling=True,
                         std=3e3, dtype=torch.float32)
    hidden = _hidden(shape=(2, 5), dtype=torch.float32, scale=3.0).requires_grad_()
    logits = output(hidden) * 1e3
    targets = torch.tensor([[0, EOS, 3, 4, 5], [EOS, 5, 1, 1, 0]])
    mask = torch.tensor([[True, False, False, False, False], [False] * 5])
    assert float(head.temperature.scores(hidden).detach().abs().max()) > 1e4
    # the forward pass (decoding and evaluation use it, not the fused loss): finite wherever scored,
    # and for the mixture eq. 6 written out in float64, log sum_m pi_m softmax(z_m / tau)
    # (a mixture computes its logits from its own latent states, tanh-bounded: its output layer is
    # scaled so that its component logits reach about 1e4 too)
    with torch.no_grad():
        big = copy.deepcopy(output)
        if mixtures > 1:
            big.weight.mul_(1e3)
        out = head(logits, mask, hidden=hidden, output=big)
        assert bool(torch.isfinite(out[~mask]).all())
        if mixtures > 1:
            assert float(head._mos_parts(hidden, big)[0].abs().max()) > 1e3
            h64, o64 = copy.deepcopy(head).double(), copy.deepcopy(big).double()
            z, log_prior = h64._mos_parts(hidden.double(), o64)
            tau = h64.temperatures(hidden.double())
            ref = torch.logsumexp(log_prior[..., None] + torch.log_softmax(z / tau[..., None, :], -1), dim=-2)
            torch.testing.assert_close(out.double()[~mask], ref[~mask], rtol=1e-5, atol=1e-2)
    losses = head.token_losses(logits, targets, mask, hidden=hidden, output=output)
    assert bool(torch.isfinite(losses).all())
    losses.sum().backward()
    grads = [hidden.grad] + [p.grad for p in list(head.parameters()) + list(output.parameters())]
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads)


# --------------------------------------------------------------------------- through the model


@pytest.mark.parametrize("base,mixtures", [("va", 1), ("st", 1), ("nmst", 1), ("va", 3)])
@pytest.mark.parametrize("arch", [LSTMLM, RNNLM])
def test_model_teacher_forcing_equals_incremental_decoding(base, mixtures, arch):
    model = _model(base, mixtures=mixtures, arch=arch)
    seq = torch.randint(0, V - 1, (3, 9), generator=torch.Generator().manual_seed(1))
    k = 3  # the first k tokens are context: k - 1 context predictions
    mask = (torch.arange(8) < k - 1).expand(3, 8)
    full = model(seq[:, :-1], mask)
    state, lp = model.initial_state(seq[:, :k])
    steps = [lp]
    for j in range(k, 8):
        state, lp = model.step(state, seq[:, j])
        steps.append(lp)
    torch.testing.assert_close(torch.stack(steps, 1), full[:, k - 1:], atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(full.exp().sum(-1), torch.ones(3, 8, dtype=F64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("base,mixtures", [("va", 1), ("nmst", 1), ("va", 3)])
def test_greedy_decoding_agrees_with_teacher_forcing(base, mixtures):
    """decode(greedy) picks, at every step, the argmax of the model's teacher-forced distribution
    over the sequence it produced (the incremental path and the batched path agree)."""
    model = _model(base, mixtures=mixtures, seed=3)
    contexts = torch.randint(0, V - 1, (5, 2), generator=torch.Generator().manual_seed(2))
    g = decode(model, contexts, "greedy", max_len=15)
    for i, row in enumerate(g.to_lists()):
        seq = torch.cat([contexts[i], torch.tensor(row, dtype=torch.long)])[None]
        context_mask = torch.arange(seq.shape[1] - 1)[None] < contexts.shape[1] - 1
        with torch.no_grad():
            lp = model(seq[:, :-1], context_mask)[0, contexts.shape[1] - 1:]
        assert lp.argmax(-1).tolist() == row
        assert float(g.scores[i]) == pytest.approx(float(lp.gather(-1, torch.tensor(row)[:, None]).sum()), rel=1e-9)


def test_nmst_base_terminates_every_greedy_decode():
    """With NMST's eos (eps = 0.3) every row stops, whatever the temperatures do."""
    head = contextual_head(NMSTHead(0.3), H, V, normalisation="power-tanh")
    model = _randomise(LSTMLM(V, hidden=H, layers=1, dropout=0.0, head=head), 4).eval()
    with torch.no_grad():
        model.output.bias[EOS] = -30.0
    g = decode(model, torch.randint(0, V - 1, (6, 2), generator=torch.Generator().manual_seed(0)), "greedy",
               max_len=60)
    assert bool(g.terminated.all())


def _toy_batch():
    lines = ["a b c d e f g h i j", "a b c d e f g", "b c d e f g h i j k l m", "c d"]
    vocab = D.build_vocabulary(lines)
    seqs = D.make_sequences(lines, vocab)
    return D.make_batch(seqs, torch.arange(len(seqs))), len(vocab)


@pytest.mark.parametrize("base,mixtures,loss_scaling", [("va", 1, True), ("nmst", 1, True), ("va", 3, True),
                                                        ("va", 3, False), ("st", 1, False)])
def test_model_loss_is_the_mean_head_loss_over_continuation_tokens(base, mixtures, loss_scaling):
    batch, vocab_size = _toy_batch()
    head = contextual_head(_base(base), H, vocab_size, normalisation=None if (mixtures > 1 and not loss_scaling)
                           else "sigmoid", mixtures=mixtures, loss_scaling=loss_scaling)
    model = _randomise(LSTMLM(vocab_size, hidden=H, layers=2, dropout=0.0, head=head)).double()
    features = model.features(batch.inputs)
    assert features.shape == (*batch.inputs.shape, H)
    assert torch.equal(model.logits(batch.inputs), model.output(features))
    lp = model(batch.inputs, batch.context_mask)
    nll = -lp.gather(-1, batch.targets[..., None])[..., 0]
    if loss_scaling:
        tau = model.temperatures(batch.inputs)
        nll = nll * (tau.mean(-1) if base == "va" else tau[..., :-1].mean(-1))
    expected = nll[batch.target_mask].mean()
    loss = model.loss(batch)
    torch.testing.assert_close(loss, expected, rtol=1e-13, atol=0)
    total, count = model.token_nll(batch)
    assert int(count) == int(batch.target_mask.sum())
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads.values())
    assert any(n.startswith("head.") and float(g.abs().max()) > 0 for n, g in grads.items())


def test_model_with_dropout_keeps_features_and_logits_consistent():
    """features() applies the same dropout that logits() does (same random stream)."""
    head = contextual_head(VanillaHead(), H, V, normalisation="sigmoid")
    model = LSTMLM(V, hidden=H, layers=2, dropout=0.5, head=head).train()
    x = torch.randint(0, V - 1, (2, 6))
    torch.manual_seed(7)
    a = model.logits(x)
    torch.manual_seed(7)
    b = model.output(model.features(x))
    assert torch.equal(a, b)


def test_model_temperatures_shape_and_range():
    model = _model("va", normalisation="shifted-tanh")
    tau = model.temperatures(torch.randint(0, V - 1, (2, 5)))
    assert tau.shape == (2, 5, V)
    _assert_in_range(tau, *temperature_range("shifted-tanh"))
    with pytest.raises(ValueError, match="no contextual temperature"):
        LSTMLM(V, hidden=H, layers=1, dropout=0.0).temperatures(torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="no contextual temperature"):
        _model("va", normalisation=None, mixtures=2).temperatures(torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="inputs"):
        model.temperatures(torch.zeros(3, dtype=torch.long))


def test_gpt2_refuses_contextual_heads():
    transformers = pytest.importorskip("transformers")
    from nmst_lib.models import GPT2LM

    config = transformers.GPT2Config(vocab_size=V, n_positions=16, n_embd=8, n_layer=1, n_head=2,
                                     bos_token_id=EOS, eos_token_id=EOS)
    with pytest.raises(ValueError, match="RNNLM/LSTMLM"):
        GPT2LM(transformers.GPT2LMHeadModel(config), contextual_head(VanillaHead(), 8, V, normalisation="sigmoid"))


# --------------------------------------------------------------------------- names and errors


def test_names_and_plain_heads():
    assert VanillaHead.uses_hidden is False and NMSTHead(0.1).uses_hidden is False
    assert EntmaxHead(1.5).uses_hidden is False
    head = contextual_head(VanillaHead(), H, V, normalisation="sigmoid")
    assert isinstance(head, ContextualHead) and head.uses_hidden and head.name == "CT-VA"
    assert head.temperature.rank == H // 2 and head.eps is None
    nmst = contextual_head(NMSTHead(0.1), H, V, normalisation="softmax", rank=3)
    assert nmst.name == "CT-NMST" and nmst.eps == 0.1 and nmst.temperature.rank == 3
    assert contextual_head(STHead(0.1), H, V, normalisation="sigmoid").name == "CT-ST"
    assert contextual_head(VanillaHead(), H, V, mixtures=3).name == "MoS"
    assert contextual_head(VanillaHead(), H, V, normalisation="power-tanh", mixtures=3).name == "CT-MoS"
    base = NMSTHead(0.1)
    assert contextual_head(base, H, V) is base
    temp = contextual_head(VanillaHead(), H, V, normalisation="shifted-tanh", lam=5.0).temperature
    assert (temp.lam, temp.range) == (5.0, (4.0, 6.0))


def test_bad_temperature_parameters_are_rejected():
    with pytest.raises(TypeError, match="normalisation"):
        temperature_range(3)
    with pytest.raises(ValueError, match="allowed: sigmoid, softmax, power-tanh, shifted-tanh"):
        temperature_defaults("tanh")
    for a in (0.0, -1.0):
        with pytest.raises(ValueError, match="a must be > 0"):
            temperature_range("sigmoid", a=a)
    with pytest.raises(ValueError, match="b must be > 0"):
        temperature_range("softmax", b=0.0)
    with pytest.raises(ValueError, match="finite"):
        temperature_range("sigmoid", a=math.nan)
    with pytest.raises(ValueError, match="finite"):
        temperature_range("sigmoid", b=math.inf)
    with pytest.raises(TypeError, match="a must be a real number"):
        temperature_range("sigmoid", a="1")
    with pytest.raises(TypeError, match="b must be a real number"):
        temperature_range("sigmoid", b=True)
    for lam in (1.0, 0.5, -3.0):
        with pytest.raises(ValueError, match="lam must be > 1"):
            temperature_range("power-tanh", lam=lam)
        with pytest.raises(ValueError, match="lam must be > 1"):
            temperature_range("shifted-tanh", lam=lam)
    with pytest.raises(ValueError, match="takes a and b, not lam"):
        temperature_range("sigmoid", lam=4.0)
    with pytest.raises(ValueError, match="takes lam, not a and b"):
        temperature_range("power-tanh", a=1.0)
    with pytest.raises(TypeError, match="mu must be a torch.Tensor"):
        normalised_temperature([0.0, 1.0], "sigmoid")
    with pytest.raises(TypeError, match="floating-point"):
        normalised_temperature(torch.tensor([1, 2]), "sigmoid")
    with pytest.raises(ValueError, match="at least one dim"):
        normalised_temperature(torch.tensor(1.0), "softmax")
    with pytest.raises(ValueError, match="hidden_size"):
        ContextualTemperature(0, V, 2)
    with pytest.raises(ValueError, match="vocab_size"):
        ContextualTemperature(H, 1, 2)
    with pytest.raises(TypeError, match="rank"):
        ContextualTemperature(H, V, 2.5)
    with pytest.raises(ValueError, match=r"shape \[\.\.\., 8\]"):
        ContextualTemperature(H, V, 2)(torch.randn(3, H + 1))


def test_bad_head_construction_is_rejected():
    temp = ContextualTemperature(H, V, 2)
    with pytest.raises(TypeError, match="output layer"):
        ContextualHead("va", H, V, temperature=temp)
    for base in (EntmaxHead(1.5), NMSTEntmaxHead(0.1, 1.5), contextual_head(VanillaHead(), H, V, mixtures=2)):
        with pytest.raises(ValueError, match="VanillaHead, STHead or NMSTHead"):
            ContextualHead(base, H, V, temperature=temp)
    with pytest.raises(ValueError, match="temperature or mixtures > 1"):
        ContextualHead(VanillaHead(), H, V, temperature=None)
    with pytest.raises(ValueError, match="needs a VanillaHead base"):
        ContextualHead(NMSTHead(0.1), H, V, temperature=temp, mixtures=2)
    with pytest.raises(ValueError, match="loss_scaling"):
        ContextualHead(VanillaHead(), H, V, temperature=None, mixtures=2, loss_scaling=True)
    with pytest.raises(TypeError, match="loss_scaling must be True or False"):
        ContextualHead(VanillaHead(), H, V, temperature=temp, loss_scaling=1)
    with pytest.raises(TypeError, match="ContextualTemperature"):
        ContextualHead(VanillaHead(), H, V, temperature=torch.nn.Linear(H, V))
    with pytest.raises(ValueError, match="must agree"):
        ContextualHead(VanillaHead(), H, V + 1, temperature=temp)
    with pytest.raises(ValueError, match="mixtures"):
        ContextualHead(VanillaHead(), H, V, temperature=temp, mixtures=0)
    with pytest.raises(ValueError, match="a, rank set without a temperature normalisation"):
        contextual_head(VanillaHead(), H, V, a=1.0, rank=2)
    with pytest.raises(ValueError, match="loss_scaling needs a temperature"):
        contextual_head(VanillaHead(), H, V, mixtures=2, loss_scaling=True)
    with pytest.raises(TypeError, match="output layer"):
        contextual_head("nmst", H, V)
    with pytest.raises(ValueError, match="hidden_size >= 2"):
        contextual_head(VanillaHead(), 1, V, normalisation="sigmoid")
    with pytest.raises(ValueError, match="unknown temperature normalisation"):
        contextual_head(VanillaHead(), H, V, normalisation="relu")


def test_bad_head_calls_are_rejected():
    head, output = _head("nmst", "sigmoid")
    mos, _ = _head("va", None, mixtures=2)
    hidden = _hidden(shape=(2, 4))
    logits = output(hidden)
    with pytest.raises(TypeError, match="needs the model's pre-output hidden state"):
        head(logits)
    with pytest.raises(TypeError, match="hidden must be a torch.Tensor"):
        head(logits, hidden=hidden.tolist())
    with pytest.raises(TypeError, match="floating-point"):
        head(logits, hidden=hidden.long())
    with pytest.raises(ValueError, match="hidden must have shape"):
        head(logits, hidden=hidden[..., :-1])
    with pytest.raises(ValueError, match="must agree on all dims but the last"):
        head(logits[:, :3], hidden=hidden)
    with pytest.raises(ValueError, match="must agree on all dims but the last"):
        head(logits[..., :-1], hidden=hidden)
    with pytest.raises(TypeError, match="logits must be a torch.Tensor"):
        head(None, hidden=hidden)
    with pytest.raises(TypeError, match="context_mask"):
        head(logits, torch.zeros(2, 4), hidden=hidden)
    with pytest.raises(TypeError, match="needs the model's output layer"):
        mos(None, hidden=hidden)
    with pytest.raises(ValueError, match="output must map"):
        mos(None, hidden=hidden, output=torch.nn.Linear(H, V + 1).double())
    with pytest.raises(ValueError, match="must agree on all dims but the last"):
        mos(logits[:, :2], hidden=hidden, output=output)
    with pytest.raises(ValueError, match="no contextual temperature"):
        mos.temperatures(hidden)
    with pytest.raises(TypeError, match="targets"):
        head.token_losses(logits, torch.zeros(2, 4), hidden=hidden)
    state = head.initial_step_state(2)
    assert state.dtype == torch.long and state.shape == (2,)
    with pytest.raises(ValueError, match="state must be a tensor"):
        head.step(logits[:, 0], torch.zeros(3, dtype=torch.long), hidden=hidden[:, 0])
    with pytest.raises(ValueError, match="one step"):
        head.step(logits, state, hidden=hidden)
    with pytest.raises(ValueError, match="batch_size"):
        head.initial_step_state(-1)


@pytest.mark.parametrize("normalisation, kw, dtype", [("sigmoid", {"b": 1e-310}, F64), ("softmax", {"b": 1e-310}, F64),
                                                       ("sigmoid", {"b": 1e-39}, torch.float32),
                                                       ("sigmoid", {"a": 1e-50, "b": 1.0}, torch.float32),
                                                       ("power-tanh", {"lam": 1e39}, torch.float32),
                                                       ("shifted-tanh", {"lam": 1e39}, torch.float32)])
def test_normalised_temperature_refuses_parameters_whose_range_leaves_the_dtype(normalisation, kw, dtype):
    # b = 1e-310 gave inf temperatures (a/b overflows float64); in float32 the range must fit float32
    with pytest.raises(ValueError, match="temperature range"):
        normalised_temperature(torch.zeros(2, 5, dtype=dtype), normalisation, **kw)
    if dtype == torch.float32:  # the same parameters fit float64
        tau = normalised_temperature(torch.zeros(2, 5, dtype=F64), normalisation, **kw)
        assert torch.isfinite(tau).all() and (tau > 0).all()


def test_a_temperature_module_refuses_a_range_that_overflows_float64():
    with pytest.raises(ValueError, match="temperature range"):
        ContextualTemperature(4, 6, 2, "sigmoid", a=1.0, b=1e-310)
    with pytest.raises(ValueError, match="temperature range"):
        temperature_range("sigmoid", a=1.0, b=1e-310)
