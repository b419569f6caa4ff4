"""Tests of Chapter 9's experiments (09_temperature; nmst_lib.experiments.temperature_suite) and of what
contextual temperature changed in the Chapter 6 machinery: the new config fields (keys, validation,
hashes of Chapters 6-8 unchanged), the training loop's monitor hook (exact resumption, no effect on
training), the analyses against hand computation on models whose temperature is known, the quick
suite end to end, the results store, the table builders and the CLI."""

import importlib
import json
import math
import statistics
from pathlib import Path

import pytest
import torch
from torch import nn

from nmst_lib import __main__ as cli
from nmst_lib import data as D
from nmst_lib.experiments import (
    CURRENT,
    MISSING,
    STALE,
    config_from_dict,
    config_hash,
    make_config,
    published_results_dir,
    train,
    training_hash,
)
from nmst_lib.experiments import config as C
from nmst_lib.experiments.config import WORD_CPU_RECIPE, chapter_recipe
from nmst_lib.experiments.config_sections import TemperatureOptions
from nmst_lib.experiments.model_setup import build_model_for
from nmst_lib.experiments.preparation import prepare_data
from nmst_lib.experiments.results import StoredResult
from nmst_lib.experiments.runs import decoding_context_indices
from nmst_lib.heads import NMSTHead, VanillaHead
from nmst_lib.temperature import ContextualHead

T = importlib.import_module("nmst_lib.experiments.temperature_suite")
sparse = importlib.import_module("nmst_lib.experiments.sparse")

pytestmark = pytest.mark.usefixtures("fixture_data_env", "one_thread_per_module")

CT_FIELDS = ("temperature", "temperature_a", "temperature_b", "temperature_lambda", "temperature_rank",
             "loss_scaling", "mixtures")


# ------------------------------------------------------------------------------- configs


def test_committed_results_of_chapters_6_to_8_keep_their_config_hashes():
    """The seven new fields are left out of to_dict at their defaults: every committed result of
    Chapters 6, 7 and 8 still has the hash and key its config gives now."""
    root = published_results_dir()
    files = sorted((root / "wikitext2").glob("*.json")) + sorted((root / "gpt2").glob("*.json"))
    assert len(files) >= 20
    for path in files:
        stored = json.loads(path.read_text())
        config = config_from_dict(stored["config"])
        assert not set(CT_FIELDS) & set(config.to_dict()), path.name
        assert config_hash(config) == stored["config_hash"], path.name
        assert config.key == stored["key"], path.name
    sparse_files = sorted((root / "sparse").glob("*.json"))
    for path in sparse_files:
        stored = json.loads(path.read_text())
        sc = sparse.sparse_config_from_dict(stored["config"])
        assert sparse.sparse_config_hash(sc) == stored["config_hash"], path.name


def test_default_configs_have_the_keys_and_hashes_they_had():
    """Keys and hashes of default configs are unchanged (values computed before the fields existed)."""
    c = make_config("cpu", "lstm", "va", **WORD_CPU_RECIPE)  # the cpu profile of the first editions
    assert c.key == "cpu-lstm-va-seed0" and config_hash(c) == "b88c57d58aa8c645"
    assert c.label == "VA+LSTM"


@pytest.mark.parametrize("fields, key", [
    (dict(head="va", temperature="sigmoid", loss_scaling=True), "cpu-lstm-va-ct-sig-a1-b0.5-seed0"),
    (dict(head="nmst", eps=5e-4, temperature="sigmoid", loss_scaling=True), "cpu-lstm-nmst-eps5e-4-ct-sig-a1-b0.5-seed0"),
    (dict(head="va", mixtures=3), "cpu-lstm-va-mos3-seed0"),
    (dict(head="va", mixtures=3, temperature="sigmoid", loss_scaling=True), "cpu-lstm-va-mos3-ct-sig-a1-b0.5-seed0"),
    (dict(head="va", temperature="sigmoid"), "cpu-lstm-va-ct-sig-a1-b0.5-nols-seed0"),
    (dict(head="va", temperature="softmax", loss_scaling=True), "cpu-lstm-va-ct-smax-a1-b0.5-seed0"),
    (dict(head="va", temperature="power-tanh", loss_scaling=True), "cpu-lstm-va-ct-pow-l4-seed0"),
    (dict(head="va", temperature="shifted-tanh", loss_scaling=True), "cpu-lstm-va-ct-shift-l3-seed0"),
    (dict(head="va", temperature="sigmoid", temperature_a=0.5, temperature_b=1.0, temperature_rank=32,
          loss_scaling=True), "cpu-lstm-va-ct-sig-a0.5-b1-q32-seed0"),
    (dict(head="va", temperature="sigmoid", temperature_rank=64, loss_scaling=True), "cpu-lstm-va-ct-sig-a1-b0.5-seed0"),
])
def test_contextual_temperature_keys_follow_the_contract(fields, key):
    fields = dict(fields)
    head, eps = fields.pop("head"), fields.pop("eps", None)
    assert make_config("cpu", "lstm", head, eps, 0, **fields, **WORD_CPU_RECIPE).key == key


def test_validation_fills_the_normalisation_defaults_and_to_dict_keeps_them():
    c = make_config("cpu", "lstm", "va", temperature="SIGMOID")
    t = c.temperature
    assert (t.normalisation, t.a, t.b, t.rank) == ("sigmoid", 1.0, 0.5, 64)
    assert t.lam is None
    d = c.to_dict()
    assert d["temperature"] == "sigmoid" and d["temperature_rank"] == 64 and "loss_scaling" not in d
    assert config_from_dict(d) == c and config_hash(config_from_dict(d)) == config_hash(c)
    p = make_config("cpu", "lstm", "va", temperature="power-tanh")
    assert (p.temperature.lam, p.temperature.a, p.temperature.b) == (4.0, None, None)
    assert make_config("cpu", "lstm", "va", temperature="shifted-tanh").temperature.lam == 3.0
    assert c.label == "CT-VA+LSTM (sigmoid a=1 b=0.5, no LS)"
    assert make_config("cpu", "lstm", "va", mixtures=3).label == "MoS+LSTM (M=3)"


def test_temperature_fields_change_the_training_hash():
    base = make_config("cpu", "lstm", "va")
    hashes = {training_hash(base)}
    for fields in (dict(temperature="sigmoid"), dict(temperature="sigmoid", loss_scaling=True), dict(mixtures=3),
                   dict(temperature="softmax")):
        hashes.add(training_hash(base.replace(**fields)))
    assert len(hashes) == 5


@pytest.mark.parametrize("args, fields, match", [
    (("lstm", "va"), dict(temperature="cosine"), "unknown temperature normalisation"),
    (("lstm", "va"), dict(temperature_a=1.0), "only for a contextual temperature"),
    (("lstm", "va"), dict(temperature_rank=8), "only for a contextual temperature"),
    (("lstm", "va"), dict(loss_scaling=True), "only for a contextual temperature"),
    (("lstm", "va"), dict(temperature="sigmoid", temperature_a=0.0), "must be > 0"),
    (("lstm", "va"), dict(temperature="softmax", temperature_b=-1.0), "must be > 0"),
    (("lstm", "va"), dict(temperature="power-tanh", temperature_lambda=1.0), "must be > 1"),
    (("lstm", "va"), dict(temperature="sigmoid", temperature_lambda=4.0), "does not apply"),
    (("lstm", "va"), dict(temperature="shifted-tanh", temperature_a=1.0), "does not apply"),
    (("lstm", "va"), dict(temperature="sigmoid", temperature_rank=0), "temperature_rank"),
    (("lstm", "va"), dict(mixtures=0), "mixtures must be an integer >= 1"),
    (("lstm", "va"), dict(mixtures=True), "mixtures must be an integer >= 1"),
    (("lstm", "nmst", 1e-4), dict(mixtures=3), "head va only"),
    (("lstm", "entmax"), dict(alpha=1.5, temperature="sigmoid"), "softmax-based head"),
])
def test_invalid_temperature_fields_say_what_is_allowed(args, fields, match):
    with pytest.raises(ValueError, match=match):
        make_config("quick", *args, **fields)


def test_gpt2_and_bad_types_are_rejected():
    with pytest.raises(ValueError, match="RNNLM/LSTMLM"):
        make_config("quick", "gpt2", "va", temperature="sigmoid")
    with pytest.raises(TypeError, match="loss_scaling must be True or False"):
        make_config("quick", "lstm", "va", temperature="sigmoid", loss_scaling=1)
    with pytest.raises(TypeError, match="temperature_a must be a number"):
        make_config("quick", "lstm", "va", temperature="sigmoid", temperature_a="1")


def test_build_model_for_wraps_the_head_as_the_config_says():
    plain = build_model_for(make_config("quick", "lstm", "va"), 50)
    assert type(plain.head) is VanillaHead
    c = make_config("quick", "lstm", "nmst", 1e-2, temperature="power-tanh", temperature_rank=5, loss_scaling=True)
    head = build_model_for(c, 50).head
    assert isinstance(head, ContextualHead) and isinstance(head.base, NMSTHead)
    assert head.temperature.normalisation == "power-tanh" and head.temperature.lam == 4.0
    assert head.temperature.rank == 5 and head.loss_scaling and head.mixtures == 1
    mos = build_model_for(make_config("quick", "lstm", "va", mixtures=3), 50).head
    assert isinstance(mos, ContextualHead) and mos.mixtures == 3 and mos.temperature is None


# ------------------------------------------------------------------------------ monitor


def _small(config):
    return config.replace(max_epochs=2, max_train_tokens=5000, max_eval_tokens=1500)


class _Boom(Exception):
    pass


def _crash_on(monitor, call):
    calls = [0]

    def f(model):
        calls[0] += 1
        if calls[0] == call:
            raise _Boom()
        return monitor(model)

    return f


def test_monitor_log_of_an_interrupted_and_resumed_run_equals_the_uninterrupted_one(tmp_path):
    """A run killed mid-epoch (after a mid-epoch checkpoint) and resumed ends with the same monitor
    log, weights and perplexity as a run that was never interrupted."""
    m = _small(T.temperature_suite_configs("quick")[0].model)
    data = prepare_data(m)
    mon = T.temperature_monitor(T.monitor_subset(data.valid, 300), [0, 1, 2, data.vocab.eos_id])
    full = train(m, checkpoint_dir=tmp_path / "a", data=data, progress=False, monitor=mon, monitor_every=2)
    with pytest.raises(_Boom):
        train(m, checkpoint_dir=tmp_path / "b", data=data, progress=False, monitor=_crash_on(mon, 4),
              monitor_every=2, checkpoint_every=3)
    resumed = train(m, checkpoint_dir=tmp_path / "b", data=data, progress=False, monitor=mon, monitor_every=2,
                    resume=True, checkpoint_every=3)
    assert resumed.resumed_from["step"] > 0  # resumed mid-epoch
    assert resumed.monitor_log == full.monitor_log
    assert resumed.val_ppl == full.val_ppl and resumed.step_losses == full.step_losses
    steps = [r["step"] for r in full.monitor_log]
    assert steps[0] == 0 and steps == sorted(set(steps)) and full.monitor_log[-1]["epoch"] == 2.0
    assert all(s % 2 == 0 or float(r["epoch"]).is_integer() for s, r in zip(steps, full.monitor_log))
    assert [r["epoch"] for r in full.monitor_log if float(r["epoch"]).is_integer()] == [0.0, 1.0, 2.0]


def test_the_monitor_does_not_change_training(tmp_path):
    """Same step losses and perplexities with and without a monitor (eval mode, no grad, RNG forked),
    even with a monitor that draws random numbers; the model is back in train mode afterwards."""
    m = _small(make_config("quick", "lstm", "va"))  # dropout 0.1: RNG matters
    data = prepare_data(m)
    modes = []

    def noisy(model):
        modes.append(model.training)
        return {"x": float(torch.rand(()))}

    plain = train(m, checkpoint_dir=tmp_path / "a", data=data, progress=False)
    watched = train(m, checkpoint_dir=tmp_path / "b", data=data, progress=False, monitor=noisy, monitor_every=1)
    assert plain.step_losses == watched.step_losses and plain.val_ppl == watched.val_ppl
    assert not any(modes) and len(watched.monitor_log) == watched.optimizer_steps + 1
    assert plain.monitor_log == []


def test_monitor_arguments_are_checked(tmp_path):
    m = _small(make_config("quick", "lstm", "va"))
    with pytest.raises(ValueError, match="monitor_every needs a monitor"):
        train(m, checkpoint_dir=tmp_path, progress=False, monitor_every=3)
    with pytest.raises(TypeError, match="monitor must be a function"):
        train(m, checkpoint_dir=tmp_path, progress=False, monitor=3)
    with pytest.raises(ValueError, match="monitor_every"):
        train(m, checkpoint_dir=tmp_path, progress=False, monitor=lambda model: {}, monitor_every=0)
    with pytest.raises(ValueError, match="must not use the keys"):
        train(m, checkpoint_dir=tmp_path, progress=False, monitor=lambda model: {"step": 1})
    with pytest.raises(TypeError, match="dict with string keys"):
        train(m, checkpoint_dir=tmp_path, progress=False, monitor=lambda model: [1])


# ----------------------------------------------------------------------------- analyses


WORDS = ["a", "b", "c", "d", "e", "f", "<unk>", "<pad>", "<eos>"]


def _toy_data(lengths, context_len=3, seed=0):
    vocab = D.Vocabulary(WORDS)
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.cat([torch.randint(0, 7, (n - 1,), generator=g), torch.tensor([vocab.eos_id])]) for n in lengths]
    return D.SequenceData(torch.cat(seqs), torch.tensor(lengths), context_len, vocab)


class _KnownTau(nn.Module):
    """A stub whose temperatures are a known function of position j, input token x and entry v:
    tau = 2 + 0.01 j + 0.001 v + 0.0001 x."""

    def __init__(self, vocab_size):
        super().__init__()
        self.vocab_size, self.eos_id = vocab_size, vocab_size - 1
        self.device = torch.device("cpu")

    def temperatures(self, inputs):
        j = torch.arange(inputs.shape[1], dtype=torch.float64)[None, :, None]
        v = torch.arange(self.vocab_size, dtype=torch.float64)[None, None, :]
        return (2 + 0.01 * j + 0.001 * v + 0.0001 * inputs.double()[..., None]).float()


def _tau_line(model, data, i):
    """tau [n - 1, V] of line i by itself (no batching, no padding)."""
    seq = data.sequence(i)
    with torch.no_grad():
        return model.temperatures(seq[:-1].unsqueeze(0))[0].double()


def _check_band(band, values_per_column, z, tol):
    for c, vals in enumerate(values_per_column):
        if not vals:
            assert band["mean"][c] is None
            continue
        assert band["mean"][c] == pytest.approx(statistics.fmean(vals), abs=tol)
        if len(vals) > 1:
            sd = statistics.stdev(vals)
            assert band["std"][c] == pytest.approx(sd, abs=tol)
            assert band["ci_low"][c] == pytest.approx(statistics.fmean(vals) - z * sd / math.sqrt(len(vals)), abs=tol)
            assert band["ci_high"][c] == pytest.approx(statistics.fmean(vals) + z * sd / math.sqrt(len(vals)), abs=tol)
        else:
            assert band["std"][c] is None and band["ci_low"][c] is None


def _lstm_with_tau(normalisation="sigmoid", head="va", eps=None, w2=None, seed=0):
    config = make_config("quick", "lstm", head, eps, temperature=normalisation, hidden=8, layers=1)
    torch.manual_seed(seed)
    model = build_model_for(config, len(WORDS)).eval()
    if w2 is not None:
        with torch.no_grad():
            model.head.temperature.W2.weight.copy_(w2(model.head.temperature.W2.weight))
    return model


# batched (padded, bucketed) float32 LSTM vs one line at a time: equal up to float32 rounding
TOL = (1e-9, 2e-6)


def _analysis_models():
    return [_KnownTau(len(WORDS)),
            _lstm_with_tau(w2=lambda w: torch.randn(w.shape, generator=torch.Generator().manual_seed(1)) * 3)]


@pytest.mark.parametrize("which", [0, 1])
def test_token_temperatures_are_the_mean_over_scored_positions(which):
    model = _analysis_models()[which]
    data = _toy_data([7, 12, 5, 20, 9])
    rows = [_tau_line(model, data, i)[data.context_len - 1:] for i in range(len(data))]
    expected = torch.cat(rows).mean(0)
    got = T.token_temperatures(model, data, batch_size=2)
    assert got.dtype == torch.float64 and torch.allclose(got, expected, rtol=0, atol=TOL[which])
    first_two = torch.cat(rows[:2]).mean(0)  # max_tokens: the first lines up to that many scored tokens
    n2 = int(data.continuation_lengths[:2].sum())
    assert torch.allclose(T.token_temperatures(model, data, max_tokens=n2 + 1), first_two, rtol=0, atol=TOL[which])


@pytest.mark.parametrize("which", [0, 1])
def test_temperature_by_position_matches_hand_computation(which):
    model = _analysis_models()[which]
    data = _toy_data([19, 8, 25, 17, 30, 6, 18])
    out = T.temperature_by_position(model, data, min_tokens=15, span=5, max_position=12, batch_size=3)
    z = statistics.NormalDist().inv_cdf(0.975)
    curve = {"mean_over_vocabulary": [[] for _ in range(12)], "target_token": [[] for _ in range(12)]}
    proto = {"mean_over_vocabulary": [[] for _ in range(15)], "target_token": [[] for _ in range(15)]}
    for i in range(len(data)):
        tau = _tau_line(model, data, i)
        seq = data.sequence(i)
        words = len(seq) - 2
        for j in range(min(words, 12)):
            curve["mean_over_vocabulary"][j].append(float(tau[j].mean()))
            curve["target_token"][j].append(float(tau[j, seq[j + 1]]))
        if words >= 15:
            middle = (words - 5) // 2
            for c, j in enumerate(list(range(5)) + list(range(middle, middle + 5)) + list(range(words - 5, words))):
                proto["mean_over_vocabulary"][c].append(float(tau[j].mean()))
                proto["target_token"][c].append(float(tau[j, seq[j + 1]]))
    for k in curve:
        _check_band(out["curve"][k], curve[k], z, TOL[which])
        _check_band(out["protocol"][k], proto[k], z, TOL[which])
    assert out["protocol"]["num_lines"] == 5 and out["curve"]["count"][:3] == [7, 7, 7]
    assert out["curve"]["position"] == list(range(1, 13))
    assert out["protocol"]["labels"][0] == "first 1" and out["protocol"]["labels"][-1] == "last 5"


@pytest.mark.parametrize("which", [0, 1])
def test_eos_temperature_by_distance_matches_hand_computation(which):
    model = _analysis_models()[which]
    data = _toy_data([9, 14, 6, 11])
    out = T.eos_temperature_by_distance(model, data, 8, batch_size=3, confidence=0.9)
    z = statistics.NormalDist().inv_cdf(0.95)
    eos = [[] for _ in range(8)]
    mean = [[] for _ in range(8)]
    for i in range(len(data)):
        tau = _tau_line(model, data, i)
        last = tau.shape[0] - 1  # the prediction of eos
        assert int(data.sequence(i)[last + 1]) == data.vocab.eos_id
        for d in range(8):
            if last - d >= 0:
                eos[d].append(float(tau[last - d, -1]))
                mean[d].append(float(tau[last - d].mean()))
    _check_band(out["eos"], eos, z, TOL[which])
    _check_band(out["mean_over_vocabulary"], mean, z, TOL[which])
    assert out["count"] == [len(v) for v in eos] and out["distance"] == list(range(8))


def test_constant_temperature_gives_constant_analyses():
    """W2 = 0 (the head's start): tau = (1/2 + a)/b = 3 everywhere for sigmoid, 1 for power-tanh;
    every analysis returns that constant with zero spread."""
    data = _toy_data([19, 8, 25, 17, 30])
    for norm, value in (("sigmoid", 3.0), ("power-tanh", 1.0)):
        model = _lstm_with_tau(norm)
        assert torch.allclose(T.token_temperatures(model, data), torch.full((len(WORDS),), value, dtype=torch.float64))
        pos = T.temperature_by_position(model, data, max_position=10)
        assert all(v == pytest.approx(value, abs=1e-6) for v in pos["protocol"]["mean_over_vocabulary"]["mean"])
        assert all(s == pytest.approx(0.0, abs=1e-6) for s in pos["curve"]["target_token"]["std"])
        eos = T.eos_temperature_by_distance(model, data, 5)
        assert all(v == pytest.approx(value, abs=1e-6) for v in eos["eos"]["mean"])


def test_softmax_normalisation_keeps_the_mean_over_the_vocabulary_constant():
    """The paper's literal eq. 5 (a softmax over the vocabulary): the mean temperature at every
    position is (a + 1/V)/b whatever the context."""
    model = _lstm_with_tau("softmax", w2=lambda w: torch.randn(w.shape, generator=torch.Generator().manual_seed(2)) * 3)
    data = _toy_data([19, 8, 25, 17])
    pos = T.temperature_by_position(model, data, max_position=10)
    want = (1.0 + 1 / len(WORDS)) / 0.5
    assert all(v == pytest.approx(want, abs=1e-6) for v in pos["curve"]["mean_over_vocabulary"]["mean"])
    assert max(pos["curve"]["target_token"]["std"][:5]) > 1e-3  # the target's temperature does vary


def test_frequency_ranks_and_tracked_tokens():
    vocab = D.Vocabulary(WORDS)
    tokens = torch.tensor([2, 2, 2, 0, 0, 5, 8, 8, 8, 8, 6])
    data = D.SequenceData(tokens, torch.tensor([5, 6]), 2, vocab)
    ranks = T.frequency_ranks(data)
    assert ranks.tolist() == [8, 2, 0, 5, 6, 1, 3, 4, 7]  # by count, ties by id
    ids = T.tracked_token_ids(ranks, top=3, log_spaced=4, eos_id=8, unk_id=6, exclude=(7,))
    assert ids[:3] == [8, 2, 0] and 6 in ids and 7 not in ids and len(ids) == len(set(ids))
    assert set(ids[3:]) <= {int(ranks[r]) for r in range(3, 9)} | {6}
    with pytest.raises(ValueError, match="non-empty 1-D"):
        T.tracked_token_ids(torch.tensor([]))
    with pytest.raises(TypeError, match="SequenceData"):
        T.frequency_ranks(tokens)


def test_the_tracked_tokens_rule_counts_ranks_from_one_as_the_figures_do():
    """tracked_token_ids(top=3) takes frequency ranks 0, 1, 2 of ``frequency_ranks`` (0-based
    indices); in words they are ranks 1-3, the most frequent token being rank 1."""
    rule = T.tracked_tokens_rule(top=3, log_spaced=4)
    assert "the 3 most frequent training tokens (frequency ranks 1-3)" in rule
    assert "4 more at log-spaced ranks" in rule and "0-" not in rule
    assert "log-spaced" not in T.tracked_tokens_rule(top=3, log_spaced=0)
    with pytest.raises(ValueError, match="log_spaced must be an integer >= 0"):
        T.tracked_tokens_rule(top=3, log_spaced=-1)
    with pytest.raises(ValueError, match="top"):
        T.tracked_tokens_rule(top=0)


def test_monitor_subset_is_fixed_and_within_budget():
    data = _toy_data([19, 8, 25, 17, 30, 6, 18, 40])
    a, b = T.monitor_subset(data, 60, seed=3), T.monitor_subset(data, 60, seed=3)
    assert torch.equal(a.tokens, b.tokens) and a.num_target_tokens <= 60 and len(a) >= 1
    assert len(T.monitor_subset(data, 1)) == 1  # at least one line


def test_greedy_continuations_report_the_chosen_tokens_temperature():
    from nmst_lib.decoding import decode

    model = _lstm_with_tau(head="nmst", eps=0.2,
                           w2=lambda w: torch.randn(w.shape, generator=torch.Generator().manual_seed(4)) * 3)
    vocab = D.Vocabulary(WORDS)
    contexts = torch.tensor([[0, 1, 2], [3, 3, 4]])
    out = T.greedy_continuations(model, contexts, vocab, max_len=12, top=3)
    gen = decode(model, contexts, "greedy", max_len=12)
    for i, c in enumerate(out):
        n = int(gen.lengths[i])
        assert c["token_ids"] == gen.tokens[i, :n].tolist() and c["length"] == n
        seq = torch.cat([contexts[i], gen.tokens[i, :n]])
        tau = model.temperatures(seq[:-1].unsqueeze(0))[0, 2:].double()
        assert c["tau"] == pytest.approx(tau[torch.arange(n), gen.tokens[i, :n]].tolist(), abs=1e-6)
        assert c["tau_eos"] == pytest.approx(tau[:, -1].tolist(), abs=1e-6)
        assert c["p"] == pytest.approx([row[0] for row in c["top_p"]], abs=1e-9)  # greedy picks the argmax
        assert c["tokens"] == vocab.decode(gen.tokens[i, :n]) and len(c["top_tokens"][0]) == 3
    with pytest.raises(ValueError, match="contexts must be"):
        T.greedy_continuations(model, torch.tensor([1, 2]), vocab)


def test_analyses_reject_bad_input():
    data = _toy_data([19, 8])
    model = _KnownTau(len(WORDS))
    with pytest.raises(TypeError, match="contextual temperature"):
        T.token_temperatures(nn.Linear(2, 2), data)
    with pytest.raises(TypeError, match="SequenceData"):
        T.temperature_by_position(model, [1, 2])
    with pytest.raises(ValueError, match="must not exceed min_tokens"):
        T.temperature_by_position(model, data, min_tokens=10, span=5)
    with pytest.raises(ValueError, match="confidence"):
        T.eos_temperature_by_distance(model, data, 5, confidence=1.5)
    with pytest.raises(ValueError, match="window"):
        T.eos_temperature_by_distance(model, data, 0)
    with pytest.raises(ValueError, match="tracked_ids"):
        T.temperature_monitor(data, [])


# ------------------------------------------------------------------------- suite and store


# Chapter 9's cpu suite under each of its two recipes: the first editions' (word-4-epochs), and the
# converged one it switched to (issue 23). Keys get the vocabulary's suffix, and the
# parameter-matched VA is matched again for the vocabulary (162 units with 5,003 words, 159 with
# 4,000 pieces).
RECIPES = {"word-4-epochs": ("", 162), "converged-unigram-hold": ("-bpe4k-nounk", 159)}
LIBRARY_RECIPE = C.CHAPTER_CPU_RECIPE["temperature"]  # the recipe the committed results follow


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_suite_configs_are_chapter_6_lstm_plus_temperature(recipe, monkeypatch):
    monkeypatch.setitem(C.CHAPTER_CPU_RECIPE, "temperature", recipe)
    suffix, h = RECIPES[recipe]
    configs = T.temperature_suite_configs("cpu")
    stems = ["cpu-lstm-va-ct-sig-a1-b0.5-lsdet", "cpu-lstm-nmst-eps5e-4-ct-sig-a1-b0.5-lsdet",
             "cpu-lstm-va-ct-sig-a1-b0.5-nols", "cpu-lstm-va-ct-sig-a1-b0.5", "cpu-lstm-va-ct-pow-l4-lsdet",
             "cpu-lstm-va-ct-shift-l3-lsdet", "cpu-lstm-va-ct-smax-a1-b0.5-lsdet", "cpu-lstm-va-mos3",
             "cpu-lstm-va-mos3-ct-sig-a1-b0.5-lsdet"]
    # seeds 1 and 2 of every model a perplexity finding compares: all but CT-NMST (stems[1])
    compared = [stem for stem in stems if "-nmst-" not in stem]
    ablations = [stem.replace("-va-ct-", "-va-mos3-ct-") for stem in stems[2:7]]
    # MoS+ (Table 1): a MoS with CT-MoS's parameter count
    ct_mos = configs[8].model
    h_plus = T.parameter_matched_hidden(ct_mos, T.vocabulary_size_of(ct_mos), mixtures=3)
    assert [c.key for c in configs] == (
        [f"{stem}{suffix}-seed0" for stem in stems]
        + [f"cpu-lstm-va-ct-sig-a0.5-b1-lsdet{suffix}-seed{i}" for i in range(3)]
        + [f"cpu-lstm-va-h{h}{suffix}-seed{i}" for i in range(3)]
        + [f"cpu-lstm-va-mos3-h{h_plus}{suffix}-seed{i}" for i in range(3)]
        + [f"{stem}{suffix}-seed{i}" for i in (1, 2) for stem in compared]
        # the paper's Tables 3 and 4 on CT-MoS, its own model: seeds 0-2 after every model above
        + [f"{stem}{suffix}-seed{i}" for i in range(3) for stem in ablations])
    assert T.EXTRA_SEEDS["cpu"] == (1, 2) and len(configs) == 18 + 2 * 8 + 3 * 5
    assert T.CT_MOS_ABLATIONS == {"quick": False, "cpu": True, "paper": True}
    # each ablation is CT-MoS's model with one field changed, as CT-VA's ablations are CT-VA's
    for mos_ablation, va_ablation in zip(configs[34:39], configs[2:7]):
        a, b = mos_ablation.model.flat_dict(), va_ablation.model.flat_dict()
        assert a.pop("mixtures") == 3 and b.pop("mixtures") == 1
        assert a == {**b, "decoders": ("greedy",)}, (a, b)
    # LS is detached everywhere except the literal eq. 7 model (Table 4) and the models without LS
    detached = [True, False, False, True, True, True, False, True]  # of `compared`, in order
    assert [c.model.value("detach_loss_scale") for c in configs] == [True, True, False, False, True, True, True, False, True,
                                                            True, True, True, False, False, False,
                                                            False, False, False] + detached * 2 \
        + [False, False, True, True, True] * 3
    assert configs[14].label == f"VA+LSTM (hidden {h})"
    assert configs[15].label == f"MoS+LSTM (M=3, hidden {h_plus})"
    # as many parameters as CT-MoS, to within the step of one hidden unit
    count = lambda m: T.parameter_count(m, T.vocabulary_size_of(m))
    step = count(configs[15].model.replace(hidden=h_plus + 1)) - count(configs[15].model)
    assert abs(count(configs[15].model) - count(ct_mos)) <= step / 2
    # Chapter 6's LSTM by Chapter 9's recipe
    ch6 = make_config("cpu", "lstm", "va", **chapter_recipe("temperature", "cpu")).to_dict()
    for c in configs:
        d = c.model.to_dict()
        sized = {"hidden"} if f"-h{h}-" in c.key else ({"hidden", "mixtures"} if f"-h{h_plus}-" in c.key else set())
        for k in set(ch6) - {"decoders", "head", "eps", "seed"} - sized:
            assert d[k] == ch6[k], (c.key, k)
        featured = (configs[0].key, configs[1].key, configs[3].key, configs[9].key)
        assert c.model.decoding.decoders == (T.CT_DECODERS if c.key in featured else ("greedy",))
    assert [c.key for c in T.baseline_configs("cpu")] == (
        [f"cpu-lstm-va{suffix}-seed{i}" for i in range(3)]
        + [f"cpu-lstm-nmst-eps5e-4{suffix}-seed{i}" for i in range(3)])
    word = recipe == "word-4-epochs"
    assert all(c.training.max_epochs == (4 if word else 60) and c.data.vocab_kind == ("word" if word else "bpe")
               for c in T.baseline_configs("cpu"))
    if recipe == LIBRARY_RECIPE:  # Chapter 6's LSTMs by it are committed: seed 0 of each at least
        status = [s.status for s in T.load_baselines("cpu")]
        assert STALE not in status and status[0] == status[3] == CURRENT, status
    with pytest.raises(ValueError, match="unknown profile"):
        T.temperature_suite_configs("laptop")


def test_temperature_config_validation_and_round_trip():
    c = T.temperature_suite_configs("quick")[1]
    assert T.temperature_config_from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert T.temperature_config_hash(c) != T.temperature_config_hash(c.replace(evaluation={"eos_window": 7}))
    with pytest.raises(ValueError, match="unknown evaluation settings"):
        T.TemperatureConfig(model=c.model, evaluation={"windowz": 3})
    with pytest.raises(ValueError, match="confidence"):
        T.TemperatureConfig(model=c.model, evaluation={"confidence": 1.0})
    with pytest.raises(TypeError, match="ExperimentConfig"):
        T.TemperatureConfig(model={}, evaluation={})
    with pytest.raises(ValueError, match="exactly the keys"):
        T.temperature_config_from_dict({"model": {}})


@pytest.fixture(scope="module")
def quick_suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    ckpt = tmp_path_factory.mktemp("ckpt")
    argv = ["temperature", "--profile", "quick", "--out", str(out), "--checkpoint-dir", str(ckpt), "--no-progress"]
    assert cli.main(argv) == 0
    return out, ckpt, argv


def test_quick_suite_writes_a_current_result_per_model(quick_suite, capsys):
    out, ckpt, argv = quick_suite
    stored = T.load_temperature_results("quick", out)
    assert [s.status for s in stored] == [CURRENT] * len(T.temperature_suite_configs("quick")) == [CURRENT] * 12
    for s, c in zip(stored, T.temperature_suite_configs("quick")):
        d = s.data
        assert s.path == out / "temperature" / f"{c.key}.json"
        assert d["schema"] == T.TEMPERATURE_RESULT_SCHEMA and d["config_hash"] == T.temperature_config_hash(c)
        prov = d["provenance"]
        for k in ("git_sha", "git_dirty", "device", "threads", "command", "date_utc", "train_seconds",
                  "decode_seconds", "analysis_seconds", "wall_seconds"):
            assert k in prov, k
        assert prov["command"] == "python -m nmst_lib " + " ".join(argv)
        assert d["data"]["sequences"]["train"]["num_tokens"] > 0 and d["seeds"]["torch"] == 0
        assert list(d["decoding"]) == list(c.model.decoding.decoders)
        assert d["metrics"]["val_ppl"] > 1 and d["model"]["training_hash"] == training_hash(c.model)
    assert cli.main(argv) == 0  # everything current: skipped
    assert capsys.readouterr().out.count("current, skipped") == 12


def test_quick_results_hold_what_the_chapter_draws(quick_suite):
    out, _, _ = quick_suite
    for s in T.load_temperature_results("quick", out):
        d = s.data
        m = d["model"]
        if m["temperature"] is None:  # MoS without temperature: no temperature analyses
            assert d["monitor"] is None and d["positions"] is None and d["eos_temperature"] is None
            continue
        lo, hi = m["range"]
        mon = d["monitor"]
        assert mon["complete"] and mon["records"][0]["step"] == 0 and mon["records"][-1]["epoch"] == 2.0
        assert len(mon["ids"]) == len(mon["strings"]) == len(mon["frequency_ranks"]) == len(mon["train_counts"])
        assert mon["strings"][0] == "<unk>" or mon["frequency_ranks"][0] == 0
        assert "<eos>" in mon["strings"] and "<pad>" not in mon["strings"]
        for r in mon["records"]:
            assert len(r["tau"]) == len(mon["ids"])
            assert all(lo - 1e-6 <= t <= hi + 1e-6 for t in r["tau"])
        ends = {r["epoch"]: r["mean_all"] for r in mon["records"] if float(r["epoch"]).is_integer()}
        assert [h["mean_temperature"] for h in d["metrics"]["history"]] == [ends[1.0], ends[2.0]]
        assert d["metrics"]["train_loss_is_scaled"] == m["loss_scaling"]
        if m["temperature"] == "softmax":
            want = (m["a"] + 1 / d["data"]["vocabulary"]["size"]) / m["b"]
            assert all(r["mean_all"] == pytest.approx(want, abs=1e-5) for r in mon["records"])
        for band in (d["positions"]["protocol"]["mean_over_vocabulary"], d["positions"]["curve"]["target_token"],
                     d["eos_temperature"]["eos"]):
            for mean, a, b in zip(band["mean"], band["ci_low"], band["ci_high"]):
                if a is not None:
                    assert a <= mean <= b
        tt = d["token_temperatures"]
        assert len(tt["mean_tau"]) == len(tt["train_counts"]) == d["data"]["vocabulary"]["size"]
        assert d["continuations"] and all(lo - 1e-6 <= t <= hi + 1e-6 for t in d["continuations"][0]["tau"])
        assert m["eos_tempered"] == (m["head"] == "va")


def test_quick_results_decode_chapter_6s_contexts(quick_suite):
    """r_nt compares with Chapter 6 because the decoded contexts are the same."""
    out, _, _ = quick_suite
    base = make_config("quick", "lstm", "va")
    data = prepare_data(base)
    idx = decoding_context_indices(base, data.valid)
    want = [" ".join(data.vocab.decode(c)) for c in data.valid.contexts(idx)]
    for s in T.load_temperature_results("quick", out):
        g = s.data["decoding"]["greedy"]
        assert g["num_contexts"] == len(idx)
        assert [e["context"] for e in g["examples"]] == want[:len(g["examples"])]


def test_results_store_status(quick_suite, tmp_path):
    out, _, _ = quick_suite
    c = T.temperature_suite_configs("quick")[0]
    assert T.load_temperature_result(c, tmp_path).status == MISSING
    changed = c.replace(evaluation={**c.evaluation, "eos_window": 3})
    stale = T.load_temperature_result(changed, out)
    assert stale.status == STALE and "eos_window" in stale.message
    path = tmp_path / "temperature" / f"{c.key}.json"
    path.parent.mkdir()
    path.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        T.load_temperature_result(c, tmp_path)


# ----------------------------------------------------------------------------- tables


def _fake(config, val, test, params=1000, decoding=None, loss_scaling=None):
    """A minimal CT result dict in the stored layout."""
    m = config.model
    t = m.temperature or TemperatureOptions()
    return {"schema": T.TEMPERATURE_RESULT_SCHEMA, "key": config.key, "config": config.to_dict(),
            "model": {"label": config.label, "head": m.head, "eps": m.eps, "temperature": t.normalisation,
                      "a": t.a, "b": t.b, "lambda": t.lam, "rank": t.rank, "mixtures": t.mixtures,
                      "loss_scaling": t.loss_scaling, "detach_loss_scale": t.detach_loss_scale,
                      "range": [2.0, 4.0]},
            "metrics": {"val_ppl": val, "test_ppl": test, "num_parameters": params},
            "decoding": decoding or {}}


def _fake_baseline(config, val, test, decoding=None):
    return {"schema": "nmst_lib.wikitext_result/1", "key": config.key, "config": config.to_dict(),
            "metrics": {"val_ppl": val, "test_ppl": test, "num_parameters": 900}, "decoding": decoding or {}}


def _dec(rnt, n=64):
    return {"max_len": 100, "num_contexts": n, "L": [1, 100], "rnt": [1.0, rnt], "terminated_fraction": 1 - rnt,
            "mean_terminated_length": 5.0}


def test_table_builders_on_synthetic_results():
    cs_all = T.temperature_suite_configs("cpu")
    cs = cs_all[:34]  # up to MoS+ and the further seeds; the CT-MoS ablations are checked last
    recs = [_fake(c, 100.0 + i, 90.0 + i, decoding={"greedy": _dec(0.5), "top-2": _dec(0.1)} if i < 2 else
                  {"greedy": _dec(0.9)}) for i, c in enumerate(cs)]
    stale = StoredResult(STALE, Path("x.json"), _fake(cs[0], 1.0, 1.0), "stale")
    base = [_fake_baseline(c, v, v - 10, {"greedy": _dec(0.8), "beam-2": _dec(0.0)})
            for c, v in zip(T.baseline_configs("cpu"), (150.0, 152.0, 154.0, 160.0, 161.0, 162.0))]
    rows = T.temperature_table_rows(recs + [stale], base)
    # the centred model's three seeds make one row, the matched VA's and MoS+'s too
    assert len(rows) == 2 + 12
    va = rows[0]
    assert va["model"].startswith("VA+LSTM") and va["seeds"] == 3 and va["val ppl"] == pytest.approx(152.0)
    assert va["val ppl sd"] == pytest.approx(2.0) and va["test ppl"] == pytest.approx(142.0)
    assert rows[1]["model"].startswith("NMST+LSTM (eps=5e-04)") and rows[1]["val ppl"] == pytest.approx(161.0)
    # one row per model, in the suite's order of first seeds, its seeds' keys joined
    stems = list(dict.fromkeys(c.key.rsplit("-seed", 1)[0] for c in cs))
    assert [r["key"] for r in rows[2:]] == [",".join(c.key for c in cs if c.key.rsplit("-seed", 1)[0] == stem)
                                            for stem in stems]
    plus = rows[-1]  # seeds 0-2 of MoS+: val ppl 115, 116, 117
    assert plus["model"] == f"MoS+LSTM (M=3, hidden {cs[17].model.model.hidden})"
    assert plus["val ppl"] == pytest.approx(116.0) and plus["seeds"] == 3
    matched = rows[-2]  # seeds 0-2 of the parameter-matched VA: val ppl 112, 113, 114
    assert matched["model"] == f"VA+LSTM (hidden {cs[14].model.model.hidden})"
    assert matched["val ppl"] == pytest.approx(113.0)
    assert matched["params"] != va["params"]
    centred = rows[-3]  # seeds 0-2 of the (a, b) = (1/2, 1) model: val ppl 109, 110, 111
    assert centred["seeds"] == 3 and centred["val ppl"] == pytest.approx(110.0)
    assert centred["val ppl sd"] == pytest.approx(1.0)
    # CT-VA's seeds are suite entries 0, 18 and 26 (val ppl 100, 118, 126); CT-NMST has one seed
    assert rows[2]["seeds"] == 3 and rows[2]["val ppl"] == pytest.approx(344 / 3) and rows[3]["seeds"] == 1
    assert rows[3]["val ppl sd"] is None and rows[2]["test ppl sd"] == pytest.approx(statistics.stdev([90, 108, 116]))
    norm = T.normalisation_table_rows(recs)
    assert [r["normalisation"] for r in norm] == ["sigmoid", "power-tanh", "shifted-tanh", "softmax", "sigmoid"]
    assert norm[1]["hyper-parameter"] == "lambda=4" and norm[0]["hyper-parameter"] == "a=1, b=0.5"
    assert norm[4]["hyper-parameter"] == "a=0.5, b=1"
    ls = T.loss_scaling_table_rows(recs)
    assert [r["loss scaling"] for r in ls] == ["none", "eq. 7 (factor has a gradient)", "detached factor"]
    # the mean over each model's seeds: entries (2, 19, 27), (3, 20, 28) and (0, 18, 26)
    assert [r["val ppl"] for r in ls] == pytest.approx([116.0, 117.0, 344 / 3]) and {r["seeds"] for r in ls} == {3}
    assert [r["seeds"] for r in norm] == [3] * 5 and norm[1]["val ppl"] == pytest.approx((104 + 121 + 129) / 3)
    rnt = T.temperature_rnt_rows(recs, base)
    assert {r["decoder"] for r in rnt} == {"greedy", "top-2"}  # the baselines' beam-2 is left out
    # a row says whose it is without its name being read: Chapter 6's VA seeds are the baseline
    # rows with head va, never the parameter-matched VA (whose name starts with "VA" too)
    ch6_va = [r for r in rnt if r["baseline"] and r["head"] == "va" and r["decoder"] == "greedy"]
    assert [r["seed"] for r in ch6_va] == [0, 1, 2] and all(r["key"] in {c.key for c in T.baseline_configs("cpu")}
                                                            for r in ch6_va)
    matched_rows = [r for r in rnt if r["key"] in {c.key for c in cs[12:15]}]
    assert matched_rows and all(r["model"].startswith("VA") and not r["baseline"] and r["head"] == "va"
                                for r in matched_rows)
    assert [r["seed"] for r in matched_rows] == [0, 1, 2]
    assert sum(r["model"].startswith("VA+LSTM, seed") for r in rnt) == 3
    assert sum(r["model"].endswith(", seed 1") or r["model"].endswith(", seed 2") for r in rnt) == 22  # greedy each
    assert [c.model.seed for c in cs] == [0] * 10 + [1, 2] + [0, 1, 2] * 2 + [1] * 8 + [2] * 8
    assert [r["r_nt(L)"] for r in rnt if r["key"] == cs[0].key] == [0.5, 0.1]
    curves = T.temperature_rnt_curves(recs, base)
    assert len(curves) == len(rnt) and curves[0]["rnt"] == [1.0, 0.8]
    assert [{k: c[k] for k in ("seed", "head", "eps", "baseline")} for c in curves] == [
        {k: r[k] for k in ("seed", "head", "eps", "baseline")} for r in rnt]
    assert T.temperature_table_rows([stale]) == []
    # Tables 3 and 4 on CT-MoS, the paper's own setting: CT-MoS and its five ablations, three seeds each
    mos = [c for c in cs_all if c.model.temperature is not None and c.model.temperature.mixtures == 3
           and c.model.temperature.normalisation is not None]
    recs_m = [_fake(c, 200.0 + i, 190.0 + i) for i, c in enumerate(mos)]
    norm_m = T.normalisation_table_rows(recs_m, mixtures=3)
    assert [r["normalisation"] for r in norm_m] == ["sigmoid", "power-tanh", "shifted-tanh", "softmax"]
    ls_m = T.loss_scaling_table_rows(recs_m, mixtures=3)
    assert [r["loss scaling"] for r in ls_m] == ["none", "eq. 7 (factor has a gradient)", "detached factor"]
    assert {r["seeds"] for r in norm_m + ls_m} == {3}
    # by default the single-softmax rows only: none of these
    assert T.normalisation_table_rows(recs_m) == [] and T.loss_scaling_table_rows(recs_m) == []


# -------------------------------------------------------------------------------- CLI


def test_cli_dry_run_lists_the_cpu_suite_with_keys(tmp_path, capsys):
    assert cli.main(["temperature", "--profile", "cpu", "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == [c.key for c in T.temperature_suite_configs("cpu")]
    assert all(" MISSING " in line for line in lines)
    assert cli.main(["temperature", "--profile", "cpu", "--dry-run", "--only", "pow,mos3", "--out",
                     str(tmp_path)]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.strip().splitlines()] == [
        c.key for c in T.temperature_suite_configs("cpu") if "-pow-" in c.key or "-mos3-" in c.key]
    # the power-tanh model, MoS, CT-MoS, MoS+ and CT-MoS's five ablations, three seeds each
    assert len([c for c in T.temperature_suite_configs("cpu") if "-pow-" in c.key or "-mos3-" in c.key]) == 27


def test_cli_errors(tmp_path, capsys):
    assert cli.main(["temperature", "--profile", "cpu", "--dry-run", "--only", "nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    mos = next(c.key for c in T.temperature_suite_configs("cpu") if c.key.startswith("cpu-lstm-va-mos3-")
               and "-ct-" not in c.key)
    assert "no model of the cpu temperature suite" in err and mos in err
    with pytest.raises(SystemExit):
        cli.main(["temperature", "--profile", "laptop"])
    assert cli.main(["temperature", "--profile", "cpu", "--dry-run", "--only", ",", "--out", str(tmp_path)]) == 2
    with pytest.raises(TypeError, match="predicate"):
        T.run_temperature_suite("quick", only=3, results_dir=tmp_path)


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_parameter_matched_va_is_the_closest_plain_lstm_to_ct_va(recipe, monkeypatch):
    """Chapter 9's parameter-matched baseline: the plain VA LSTM whose parameter count is the
    closest to CT-VA's (its neighbours H - 1 and H + 1 are farther), counted on the model the
    config builds; the cpu suite trains it with as many seeds as the centred model. A word
    vocabulary adds pad, eos and unk to its words; a BPE vocabulary's size counts them."""
    from nmst_lib.experiments import temperature_suite as T
    from nmst_lib.experiments.model_setup import build_model_for

    monkeypatch.setitem(C.CHAPTER_CPU_RECIPE, "temperature", recipe)
    cpu = T.temperature_suite_configs("cpu")
    ct = cpu[0].model
    V = T.vocabulary_size_of(ct)
    assert V == ct.data.vocab_cap + (3 if ct.data.vocab_kind == "word" else 0)
    assert T.parameter_count(ct, V) == sum(p.numel() for p in build_model_for(ct, V).parameters())
    H = T.parameter_matched_hidden(ct, V)
    matched = [c.model for c in cpu if c.model.model.hidden == H]
    assert [m.seed for m in matched] == [0, *T.EXTRA_SEEDS["cpu"]]
    suffix, h = RECIPES[recipe]
    assert H == h and all(m.head == "va" and m.temperature is None
                          and m.key == f"cpu-lstm-va-h{H}{suffix}-seed{m.seed}" for m in matched)
    want = T.parameter_count(ct, V)
    gap = lambda h: abs(T.parameter_count(matched[0].replace(hidden=h), V) - want)
    assert gap(H) <= gap(H - 1) and gap(H) <= gap(H + 1)
    assert gap(H) / want < 0.01 and H > ct.model.hidden
    assert T.vocabulary_size_of(ct.replace(vocab_kind="bpe", vocab_cap=4000)) == 4000
