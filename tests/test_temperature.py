"""Tests of nmst_lib.temperature: the contextual-temperature output layer of Contextual
Temperature (2020), eqs. 3-7 and Table 3 (Chapter 9, 09_temperature), and its integration in
nmst_lib.models.RecurrentLM."""

from __future__ import annotations

import math

import pytest
import torch

from nmst_lib import data as D
from nmst_lib.decoding import decode
from nmst_lib.heads import NMSTHead, STHead, VanillaHead
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


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run faster on one thread (and the machine is shared)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _randomise(module: torch.nn.Module, seed: int = 0, std: float = 0.7) -> torch.nn.Module:
    """Every parameter drawn afresh (W2 starts at zero, which would hide most bugs)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(std * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def _model(base, seed=0, mixtures=1, normalisation="sigmoid", loss_scaling=False, arch=LSTMLM, dtype=F64):
    torch.manual_seed(seed)
    head = contextual_head(base, H, V, normalisation=normalisation, mixtures=mixtures, loss_scaling=loss_scaling)
    model = arch(V, hidden=H, layers=2, dropout=0.0, head=head)
    return _randomise(model, seed).to(dtype).eval()


BASES = [("va", lambda: VanillaHead()), ("st", lambda: STHead(0.05)), ("nmst", lambda: NMSTHead(0.05))]
MODEL_HEADS = [(name, make, 1) for name, make in BASES] + [("va", BASES[0][1], 3)]


# --------------------------------------------------------------------------- smoke: model integration


@pytest.mark.parametrize("name,make,mixtures", MODEL_HEADS)
def test_model_teacher_forcing_equals_incremental_decoding(name, make, mixtures):
    model = _model(make(), mixtures=mixtures)
    seq = torch.randint(0, V - 1, (3, 9), generator=torch.Generator().manual_seed(1))
    full = model(seq)
    state, lp = model.initial_state(seq[:, :1])
    steps = [lp]
    for j in range(1, seq.shape[1]):
        state, lp = model.step(state, seq[:, j])
        steps.append(lp)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(full.exp().sum(-1), torch.ones(3, 9, dtype=F64), atol=1e-12, rtol=0)


def test_plain_heads_do_not_use_hidden_and_ct_head_does():
    assert VanillaHead.uses_hidden is False and NMSTHead(0.1).uses_hidden is False
    head = contextual_head(VanillaHead(), H, V, normalisation="sigmoid")
    assert isinstance(head, ContextualHead) and head.uses_hidden and head.name == "CT-VA"
    assert contextual_head(NMSTHead(0.1), H, V, normalisation="softmax").name == "CT-NMST"
    assert contextual_head(VanillaHead(), H, V, mixtures=3).name == "MoS"
    assert contextual_head(VanillaHead(), H, V, normalisation="power-tanh", mixtures=3).name == "CT-MoS"
    base = NMSTHead(0.1)
    assert contextual_head(base, H, V) is base


@pytest.mark.parametrize("name,make,mixtures", MODEL_HEADS)
def test_greedy_decoding_runs_through_the_model(name, make, mixtures):
    model = _model(make(), mixtures=mixtures)
    g = decode(model, torch.randint(0, V - 1, (4, 2), generator=torch.Generator().manual_seed(2)), "greedy",
               max_len=12)
    assert g.tokens.shape[0] == 4


def test_model_temperatures_shape_and_range():
    model = _model(VanillaHead())
    tau = model.temperatures(torch.randint(0, V - 1, (2, 5)))
    lo, hi = temperature_range("sigmoid")
    assert tau.shape == (2, 5, V) and bool((tau >= lo).all()) and bool((tau <= hi).all())
    with pytest.raises(ValueError, match="no contextual temperature"):
        LSTMLM(V, hidden=H, layers=1, dropout=0.0).temperatures(torch.zeros(1, 3, dtype=torch.long))
