"""nmst_lib.adapters.WithHead: a toy network with its softmax replaced, decodable."""

from __future__ import annotations

import pytest
import torch

from nmst_lib import decoding, theory
from nmst_lib.adapters import WithHead
from nmst_lib.heads import NMSTHead, STHead, VanillaHead


@pytest.fixture
def net():
    return theory.inconsistent_rnn(6, seed=0, eos_margin=1.0)


@pytest.fixture
def contexts(net):
    return torch.randint(0, net.eos_id, (16, 3), generator=torch.Generator().manual_seed(0))


def test_a_vanilla_head_gives_the_networks_own_distribution(net, contexts):
    _, own = net.initial_state(contexts)
    _, lp = WithHead(net, VanillaHead()).initial_state(contexts)
    torch.testing.assert_close(lp, own)
    a = decoding.decode(net, contexts, "greedy", max_len=30)
    b = decoding.decode(WithHead(net, VanillaHead()), contexts, "greedy", max_len=30)
    assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize("head_cls", [STHead, NMSTHead])
def test_greedy_on_a_self_terminating_head_stops_by_the_half_life_step(net, contexts, head_cls):
    eps = 0.05
    t_half = theory.first_step_eos_above_half(eps)
    model = WithHead(net, head_cls(eps), negate_eos=head_cls is STHead)
    g = decoding.decode(model, contexts, "greedy", max_len=t_half + 5)
    assert bool(g.terminated.all()) and int(g.lengths.max()) <= t_half  # Theorems 4.1, 5.1
    # without the head the same network never stops under greedy search (Theorem 2.x)
    assert not bool(decoding.decode(net, contexts, "greedy", max_len=t_half + 5).terminated.any())


def test_a_log_probs_function_replaces_the_softmax(net, contexts):
    hot = WithHead(net, log_probs=lambda h, z: theory.tempered_log_softmax(z, 1.0))
    _, lp = hot.initial_state(contexts)
    torch.testing.assert_close(lp, net.initial_state(contexts)[1])
    cold = WithHead(net, log_probs=lambda h, z: theory.tempered_log_softmax(z, 0.5))
    assert not torch.allclose(cold.initial_state(contexts)[1], lp)


def test_select_reorders_the_head_state_with_the_network_state(net, contexts):
    model = WithHead(net, STHead(0.05), negate_eos=True)
    state, _ = model.initial_state(contexts)
    state, _ = model.step(state, torch.zeros(len(contexts), dtype=torch.long))
    index = torch.arange(len(contexts) - 1, -1, -1)
    h, head_state = model.select(state, index)
    assert torch.equal(h, state[0][index]) and torch.equal(head_state, state[1][index])


def test_negate_eos_flips_only_the_eos_logit(net, contexts):
    h, _ = net.initial_state(contexts)
    z, zn = WithHead(net, VanillaHead()).logits(h), WithHead(net, VanillaHead(), negate_eos=True).logits(h)
    assert torch.equal(zn[:, net.eos_id], -z[:, net.eos_id])
    assert torch.equal(zn[:, :net.eos_id], z[:, :net.eos_id])


@pytest.mark.parametrize("kwargs, error", [
    (dict(), ValueError),
    (dict(head=VanillaHead(), log_probs=lambda h, z: z), ValueError),
    (dict(head="softmax"), TypeError),
    (dict(log_probs=3), TypeError),
    (dict(head=VanillaHead(), negate_eos=1), TypeError),
])
def test_bad_arguments_are_refused(net, kwargs, error):
    with pytest.raises(error):
        WithHead(net, **kwargs)


def test_a_network_without_the_protocol_is_refused():
    with pytest.raises(TypeError, match="logits"):
        WithHead(object(), VanillaHead())
