"""Tests of nmst_lib.experiments.evaluation against references computed by hand.

The references score one sequence at a time, without batches, padding or length buckets, and
apply each output layer's definition written out in float64 to the model's raw logits:
the vanilla log-softmax (Choi, Cho, Lee (2023), Def. 1), NMST's
``p(eos at t) = sigma(z_eos) + (1 - sigma(z_eos)) (1 - (1 - eps)^t)`` with the other tokens
sharing ``1 - p(eos)`` by a softmax over the non-eos logits (Def. 6), and the entmax loss
``(p - e_y) . z + H_alpha(p)`` with ``p`` from a float64 bisection for the threshold (Martins
et al. (2020), eqs. 3-6). Perplexity is exp of the NLL summed over every scored token (each
continuation token and the eos) divided by their number (Chapter 6, 06_wikitext).
"""

from __future__ import annotations

import math

import pytest
import torch

from nmst_lib import data as D
from nmst_lib.experiments.evaluation import (
    evaluate_eps_perplexity,
    evaluate_loss,
    evaluate_perplexity,
)
from nmst_lib.heads import EntmaxHead, NMSTHead, VanillaHead
from nmst_lib.models import build_model

F64 = torch.float64
V = 12
CONTEXT = 3
EPS = 0.05


def _vocab() -> D.Vocabulary:
    return D.Vocabulary([f"w{i}" for i in range(V - 3)] + [D.UNK, D.PAD, D.EOS])


def _data(seed: int = 0, n: int = 9) -> D.SequenceData:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(CONTEXT + 1, 16, (n,), generator=g)
    rows = [torch.cat([torch.randint(0, V - 3, (int(n_) - 1,), generator=g), torch.tensor([V - 1])])
            for n_ in lengths]
    return D.SequenceData(torch.cat(rows), lengths, CONTEXT, _vocab())


def _model(head):
    torch.manual_seed(3)
    model = build_model("lstm", V, hidden=8, layers=1, dropout=0.0, head=head).eval()
    with torch.no_grad():  # spread the logits: eos-dominated and sparse rows both occur
        model.output.weight.mul_(6.0)
    return model


def _entmax_ref(z: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha-entmax of the rows of ``z`` in float64: tau by 200 halvings of
    [(alpha-1) max z - 1, (alpha-1) max z], p = [(alpha-1) z - tau]_+^(1/(alpha-1)), renormalised."""
    x = (alpha - 1.0) * z.to(F64)
    hi = x.max(-1, keepdim=True).values
    lo = hi - 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        mass = (x - mid).clamp(min=0).pow(1.0 / (alpha - 1.0)).sum(-1, keepdim=True)
        lo, hi = torch.where(mass >= 1, mid, lo), torch.where(mass >= 1, hi, mid)
    p = (x - lo).clamp(min=0).pow(1.0 / (alpha - 1.0))
    return p / p.sum(-1, keepdim=True)


def _reference_losses(model, data: D.SequenceData, kind: str) -> list[float]:
    """Per scored token of every sequence, one sequence at a time: -log p(y) or the entmax loss."""
    losses = []
    with torch.no_grad():
        for i in range(len(data)):
            seq = data.sequence(i)
            z = model.logits(seq[None, :-1])[0].to(F64)  # position j predicts token j + 1
            for j in range(CONTEXT - 1, seq.numel() - 1):
                y, t = int(seq[j + 1]), j - CONTEXT + 2  # step t = 1 at the first continuation token
                row = z[j]
                if kind == "va":
                    losses.append(-float(torch.log_softmax(row, -1)[y]))
                elif kind == "nmst":
                    sigma = torch.sigmoid(row[V - 1])
                    p_eos = sigma + (1 - sigma) * (1 - (1 - EPS) ** t)
                    q = torch.softmax(row[:V - 1], -1)
                    p = float(p_eos) if y == V - 1 else float((1 - p_eos) * q[y])
                    losses.append(-math.log(p))
                else:
                    p = _entmax_ref(row, 1.5)
                    onehot = torch.nn.functional.one_hot(torch.tensor(y), V).to(F64)
                    tsallis = float((p - p ** 1.5).sum()) / (1.5 * 0.5)
                    losses.append(float(((p - onehot) * row).sum()) + tsallis)
    return losses


@pytest.mark.parametrize("batch_size, max_tokens", [(1, None), (3, None), (64, None), (64, 40)])
@pytest.mark.parametrize("kind, head", [("va", VanillaHead()), ("nmst", NMSTHead(EPS))], ids=["va", "nmst"])
def test_evaluate_perplexity_is_exp_of_the_nll_summed_per_sequence_over_the_scored_tokens(kind, head, batch_size,
                                                                                         max_tokens):
    model, data = _model(head), _data()
    nll = _reference_losses(model, data, kind)
    assert len(nll) == data.num_target_tokens == int((data.lengths - CONTEXT).sum())
    want = math.exp(sum(nll) / len(nll))
    got = evaluate_perplexity(model, data, batch_size, max_tokens)
    assert got == pytest.approx(want, rel=1e-5)
    # the head's own loss for an NLL head is the log perplexity
    assert evaluate_loss(model, data, batch_size, max_tokens) == pytest.approx(math.log(want), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("batch_size", [1, 4, 64])
def test_evaluate_loss_of_an_entmax_model_is_the_mean_entmax_loss_per_scored_token(batch_size):
    model, data = _model(EntmaxHead(1.5)), _data(1)
    losses = _reference_losses(model, data, "entmax")
    assert min(losses) >= -1e-9  # a Fenchel-Young loss is non-negative
    assert evaluate_loss(model, data, batch_size) == pytest.approx(sum(losses) / len(losses), rel=1e-5, abs=1e-7)


def test_evaluations_restore_the_training_mode():
    model, data = _model(VanillaHead()), _data()
    model.train()
    evaluate_perplexity(model, data)
    assert model.training
    model.eval()
    evaluate_loss(model, data)
    assert not model.training


@pytest.mark.parametrize("evaluate", [evaluate_perplexity, evaluate_loss, evaluate_eps_perplexity])
def test_evaluations_refuse_what_is_not_a_model_or_a_split_and_an_empty_split(evaluate):
    model, data = _model(VanillaHead()), _data()
    with pytest.raises(TypeError, match="model must be a language model"):
        evaluate(None, data)
    with pytest.raises(TypeError, match="model must be a language model"):
        evaluate(torch.nn.Linear(2, 2), data)
    with pytest.raises(TypeError, match="data must be a nmst_lib.data.SequenceData"):
        evaluate(model, [[0, 1, 2, 3, 11]])
    empty = D.SequenceData(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), CONTEXT, _vocab())
    with pytest.raises(ValueError, match="no continuation token to score"):
        evaluate(model, empty)  # was a ZeroDivisionError


def test_sequence_data_refuses_lengths_that_do_not_add_up_to_the_tokens():
    vocab = _vocab()
    # tokens of length 3 with lengths [4, 2]: make_batch invented a token
    with pytest.raises(ValueError, match="add up to 6 tokens, but tokens holds 3"):
        D.SequenceData(torch.tensor([0, 1, 2]), torch.tensor([4, 2]), 1, vocab)


def test_sequence_data_refuses_sequences_without_a_scored_token_and_ids_outside_the_vocabulary():
    vocab = _vocab()
    with pytest.raises(ValueError, match="longer than context_len = 3"):
        D.SequenceData(torch.tensor([0, 1, 2, 11, 0, 1, 11]), torch.tensor([4, 3]), 3, vocab)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 12\).*\[0, 12\]"):
        D.SequenceData(torch.tensor([0, 1, 12]), torch.tensor([3]), 1, vocab)
    with pytest.raises(ValueError, match=r"\[-1, 11\]"):
        D.SequenceData(torch.tensor([0, -1, 11]), torch.tensor([3]), 1, vocab)
    with pytest.raises(TypeError, match="tokens must be a 1-D integer tensor"):
        D.SequenceData(torch.tensor([0.0, 1.0, 11.0]), torch.tensor([3]), 1, vocab)
    with pytest.raises(TypeError, match="lengths must be a 1-D integer tensor"):
        D.SequenceData(torch.tensor([0, 1, 11]), [3], 1, vocab)
    with pytest.raises(ValueError, match="context_len"):
        D.SequenceData(torch.tensor([0, 1, 11]), torch.tensor([3]), 0, vocab)
    with pytest.raises(TypeError, match="vocab must be a vocabulary"):
        D.SequenceData(torch.tensor([0, 1, 11]), torch.tensor([3]), 1, None)
    with pytest.raises(ValueError, match="line_numbers"):
        D.SequenceData(torch.tensor([0, 1, 11]), torch.tensor([3]), 1, vocab, torch.tensor([0, 1]))


def test_sequence_data_accepts_the_shortest_sequences_and_its_own_subsets():
    vocab = _vocab()
    data = D.SequenceData(torch.tensor([0, 1, 11, 2, 3, 4, 11]), torch.tensor([3, 4]), 2, vocab)
    assert data.num_target_tokens == 3 and torch.equal(data.continuation_tokens, torch.tensor([11, 4, 11]))
    sub = data.subset([1])
    assert torch.equal(sub.tokens, torch.tensor([2, 3, 4, 11])) and sub.line_numbers.tolist() == [1]
