"""Tests of nmst_lib.experiments: quick profile end to end (train -> decode -> result JSON with
provenance), exact resumption after a kill, checksummed checkpoints, bad configs failing
before training, and STALE detection in the results store (Chapter 6, 06_wikitext)."""

import importlib
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from datasources import NO_REAL_WIKITEXT, REAL_WIKITEXT_DIR
from nmst_lib import data as D
from nmst_lib.experiments import (
    CURRENT,
    MISSING,
    STALE,
    CheckpointError,
    config_from_dict,
    config_hash,
    load_checkpoint,
    load_or_run,
    load_result,
    make_config,
    parse_decoder,
    prepare_data,
    result_path,
    run_experiment,
    run_suite,
    suite_configs,
    train,
)
from nmst_lib.experiments.config import ExperimentConfig, validate_config

train_module = importlib.import_module("nmst_lib.experiments.trainer")
model_setup = importlib.import_module("nmst_lib.experiments.model_setup")  # the module; the package attribute `train` is its function
REPO = Path(__file__).resolve().parents[1]

# Every test here reads the fixture corpus (tests/fixtures/data, through NMST_DATA_DIR), with or
# without the real WikiText-2: they test the pipeline, not the data (see tests/conftest.py).
# One torch thread (tests/conftest.py): tiny models; it also keeps the in-process and subprocess runs
# bitwise comparable.
pytestmark = pytest.mark.usefixtures("fixture_data_env", "one_thread_per_module")


def quick(head="nmst", eps=1e-2, **kw):
    kw.setdefault("data_source", "local")
    return make_config("quick", "lstm", head, eps, 0, **kw)


@pytest.fixture(scope="module")
def stored(fixture_data_env, tmp_path_factory):
    """One quick end-to-end run (train, decode, write the JSON) shared by several tests."""
    base = tmp_path_factory.mktemp("quick")
    config = quick(num_decode_contexts_nongreedy=12, decode_max_len_nongreedy=25)
    result = run_experiment(config, results_dir=base / "results", checkpoint_dir=base / "ckpt", progress=False)
    return config, base, result


@pytest.fixture(scope="module")
def reference_run(fixture_data_env, tmp_path_factory):
    """An uninterrupted 3-epoch quick run: what every resumed run must reproduce."""
    config = quick(max_epochs=3)
    return config, train(config, checkpoint_dir=tmp_path_factory.mktemp("ref"), progress=False)


# -------------------------------------------------------------------------------- configs


def test_profiles_follow_the_paper_and_the_budget():
    paper_rnn = make_config("paper", "rnn", "nmst", 1e-5)
    paper_lstm = make_config("paper", "lstm", "va")
    assert (paper_rnn.model.hidden, paper_rnn.model.layers, paper_rnn.model.dropout) == (256, 2, 0.3)
    assert (paper_lstm.model.hidden, paper_lstm.model.dropout, paper_lstm.data.vocab_cap) == (512, 0.5, None)
    assert (paper_lstm.training.lr, paper_lstm.training.betas, paper_lstm.training.weight_decay) == (1e-3, (0.9, 0.99), 0.01)
    assert (paper_lstm.training.lr_decay, paper_lstm.training.patience, paper_lstm.training.max_epochs) == (0.5, 10, 70)
    assert (paper_lstm.training.batch_size, paper_lstm.training.clip, paper_lstm.decoding.decode_max_len) == (32, 1.0, 100_000)
    assert make_config("cpu").decoding.decode_max_len == 10_000
    assert len(suite_configs("paper")) == 2 * 10 * (1 + 2 * 4)
    cpu = suite_configs("cpu")
    assert len({c.key for c in cpu}) == len(cpu) == 2 * 3 * (1 + 2 * 2)
    va = [c for c in cpu if c.head == "va" and c.seed == 0][0]
    assert "consistent-top-2" in va.decoding.decoders and "beam-4" in va.decoding.decoders
    assert va.decoding.decode_max_len == 10_000 and va.decoding.decode_max_len_nongreedy is None  # every decoder to L = 1e4
    featured = [c for c in cpu if c.head == "nmst" and c.seed == 0 and c.eps == 5e-4][0]
    assert "nucleus-0.4" in featured.decoding.decoders
    assert all(c.decoding.decoders == ("greedy",) for c in cpu if c.seed > 0)  # other seeds: greedy only


def test_config_hash_changes_with_every_field_and_round_trips():
    base = quick()
    assert config_hash(base) == config_hash(quick())
    assert config_from_dict(json.loads(json.dumps(base.to_dict()))) == base
    for change in ({"hidden": 40}, {"seed": 1}, {"decoders": ("greedy",)}, {"eps": 2e-2}, {"lr": 2e-3}):
        assert config_hash(base.replace(**change)) != config_hash(base)


@pytest.mark.parametrize("kwargs,match", [
    (dict(arch="gru"), "arch"),
    (dict(head="softmax2"), "head"),
    (dict(head="nmst", eps=0.0), "eps"),
    (dict(head="st", eps=1.5), "eps"),
    (dict(head="st", eps=None), "needs eps"),
    (dict(head="va", eps=1e-4), "eps applies"),
    (dict(dropout=1.0), "dropout"),
    (dict(decoders=("top-0",)), "k"),
    (dict(decoders=("nucleus-1.5",)), "nucleus"),
    (dict(decoders=("consistent-greedy",)), "consistent"),
    (dict(decoders=("sampling",)), "unknown decoder"),
    (dict(profile="gpu"), "profile"),
])
def test_bad_configs_are_rejected_with_what_to_change(kwargs, match):
    fields = dict(profile="quick", arch="lstm", head="va", eps=None)
    fields.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        validate_config(ExperimentConfig.from_flat(**fields))


def test_bad_config_fails_before_any_data_or_training(monkeypatch, tmp_path):
    def boom(*a, **k):
        raise AssertionError("must not be reached")

    monkeypatch.setattr(train_module, "prepare_data", boom)
    monkeypatch.setattr(train_module, "_train_one_epoch", boom)
    bad = ExperimentConfig(profile="quick", arch="lstm", head="nmst", eps=1.0)
    with pytest.raises(ValueError, match="eps"):
        train(bad, checkpoint_dir=tmp_path, progress=False)
    assert not list(tmp_path.iterdir())


def test_empty_data_fails_before_training(tmp_path, monkeypatch):
    (tmp_path / "valid.txt").write_text(" = A = \n short line \n = B = \n tiny \n = C = \n x y \n")
    (tmp_path / "test.txt").write_text(" = D = \n also short \n")
    monkeypatch.setenv(D.WIKITEXT_DIR_ENV, str(tmp_path))
    with pytest.raises(ValueError, match="no line longer than context_len"):
        train(quick(data_source="auto"), checkpoint_dir=tmp_path / "ckpt", progress=False)
    assert not (tmp_path / "ckpt").exists()


def test_quick_profile_data_from_the_real_wikitext(monkeypatch):
    """The quick profile's data preparation on the real validation + test splits (the substitute)."""
    if REAL_WIKITEXT_DIR is None:
        pytest.skip(NO_REAL_WIKITEXT)
    monkeypatch.setenv(D.WIKITEXT_DIR_ENV, str(REAL_WIKITEXT_DIR))
    config = quick(data_source="auto")
    data = prepare_data(config)
    desc = data.description
    assert desc["substitute"] is not None and sum(desc["num_articles"].values()) > 100
    assert len(data.vocab) == config.data.vocab_cap + 3
    assert data.train.num_tokens <= config.data.max_train_tokens < data.train.num_tokens + 300
    assert len(data.valid) >= config.decoding.num_decode_contexts


def test_parse_decoder_names():
    assert parse_decoder("consistent-nucleus-0.4").decode_kwargs() == {"consistent": True, "p": 0.4}
    assert parse_decoder("beam-4").decode_kwargs() == {"beam_size": 4}
    assert parse_decoder("top-2").sampling and not parse_decoder("greedy").sampling


def test_decode_at_scale_beam_rnt_equals_one_search_per_step_limit():
    """The stored beam curve is r_nt(L) of a search limited to L steps (Welleck et al. 2020,
    Def. A.2), from one decode in chunks; per-context first finishes are stored (null = never)."""
    from nmst_lib.decoding import decode
    from nmst_lib.experiments.runs import decode_at_scale
    from nmst_lib.markov import random_markov_lm
    from nmst_lib.metrics import non_termination_ratio

    model = random_markov_lm(6, temperature=0.25, generator=torch.Generator().manual_seed(9))
    contexts = torch.arange(6).repeat(3)[:, None]
    Ls = list(range(1, 13))
    res = decode_at_scale(model, contexts, "beam-3", max_len=12, Ls=Ls, batch_size=5)
    per_limit = [non_termination_ratio(decode(model, contexts, "beam", beam_size=3, max_len=L), L) for L in Ls]
    assert res["rnt"] == pytest.approx(per_limit, abs=1e-12)
    full = decode(model, contexts, "beam", beam_size=3, max_len=12)
    ff = full.first_finish_steps.tolist()
    assert res["first_finish_steps"] == [s if s <= 12 else None for s in ff]
    assert res["lengths"] == full.lengths.tolist() and res["terminated"] == full.terminated.tolist()
    assert any(s is not None and s < n for s, n in zip(res["first_finish_steps"], res["lengths"]))  # precondition
    assert "first_finish_steps" not in decode_at_scale(model, contexts, "greedy", max_len=12, Ls=Ls)


# ------------------------------------------------------------------------- end to end


def test_quick_profile_end_to_end_writes_a_result_with_provenance(stored):
    config, base, result = stored
    assert result.status == CURRENT
    path = result_path(config, base / "results")
    data = json.loads(path.read_text())
    assert data["config"] == config.to_dict() and data["config_hash"] == config_hash(config)
    assert data["profile"] == "quick"
    # data description: the substitute is named, with article counts
    desc = data["data"]
    assert desc["substitute"] is not None and D.SUBSTITUTE_NAME in desc["splits"]["train"]
    assert desc["num_articles"] == {"train": 24, "valid": 3, "test": 3}  # the fixture's 30 articles, 80/10/10
    assert desc["location"].endswith("fixtures/data/wikitext-2")
    assert desc["sequences"]["train"]["num_tokens"] <= config.data.max_train_tokens
    assert desc["vocabulary"]["size"] == config.data.vocab_cap + 3
    # metrics
    m = data["metrics"]
    assert math.isfinite(m["val_ppl"]) and math.isfinite(m["test_ppl"]) and 1 < m["val_ppl"] < 1e4
    assert m["val_ppl"] == pytest.approx(min(h["val_ppl"] for h in m["history"]), rel=1e-6)
    # decoding: one curve per decoder, consistent with its histogram
    assert set(data["decoding"]) == set(config.decoding.decoders)
    for name, dec in data["decoding"].items():
        n = dec["num_contexts"]
        if name == "greedy":
            assert (n, dec["max_len"]) == (config.decoding.num_decode_contexts, config.decoding.decode_max_len)
        else:  # the other decoders may use fewer contexts and a shorter horizon
            assert (n, dec["max_len"]) == (config.decoding.num_decode_contexts_nongreedy, config.decoding.decode_max_len_nongreedy)
        assert dec["L"][0] == 1 and dec["L"][-1] == dec["max_len"]
        assert all(a >= b for a, b in zip(dec["rnt"], dec["rnt"][1:]))  # r_nt(L) is non-increasing
        hist = dict(zip(dec["length_histogram"]["values"], dec["length_histogram"]["counts"]))
        assert sum(hist.values()) + dec["not_terminated"] == n
        if dec["method"] == "beam":  # r_nt(L) from the first finished hypothesis, not the returned length
            ff = dec["first_finish_steps"]
            assert len(ff) == n and [s is not None for s in ff] == dec["terminated"]
            assert all(s <= v for s, v in zip(ff, dec["lengths"]) if s is not None)
            for L, r in zip(dec["L"], dec["rnt"]):
                assert r == pytest.approx(sum(s is None or s > L for s in ff) / n)
                assert r <= (n - sum(c for v, c in hist.items() if v <= L)) / n + 1e-12
        else:
            assert "first_finish_steps" not in dec
        for L, r in zip(dec["L"], dec["rnt"]):
            if dec["method"] != "beam" or L == dec["max_len"]:
                assert r == pytest.approx((n - sum(c for v, c in hist.items() if v <= L)) / n)
        assert dec["peak_memory"]["mib"] > 0
        # per-context lengths agree with the histogram; examples are the first contexts
        assert len(dec["lengths"]) == len(dec["terminated"]) == n
        assert sum(not t for t in dec["terminated"]) == dec["not_terminated"]
        assert sorted(v for v, t in zip(dec["lengths"], dec["terminated"]) if t) == sorted(
            v for v, c in hist.items() for _ in range(c))
        for i, ex in enumerate(dec["examples"]):
            assert ex["index"] == i and (ex["length"], ex["terminated"]) == (dec["lengths"][i], dec["terminated"][i])
    assert sum(data["data_length_histogram"]["counts"]) == config.decoding.num_decode_contexts
    # eos probabilities along chosen validation lines
    traces = data["eos_probabilities"]
    assert len(traces) == config.decoding.num_eos_lines
    for tr in traces:
        assert len(tr["p_eos"]) == len(tr["continuation"]) and tr["continuation"][-1] == D.EOS
        lb = [1 - (1 - config.eps) ** t for t in range(1, len(tr["p_eos"]) + 1)]
        assert all(p >= b * (1 - 1e-5) for p, b in zip(tr["p_eos"], lb))  # NMST lower bound
    # provenance
    prov = data["provenance"]
    for key in ("git_sha", "git_dirty", "torch", "device", "date_utc", "wall_seconds", "command", "python"):
        assert key in prov
    assert prov["torch"] == torch.__version__ and prov["wall_seconds"] > 0
    assert data["seeds"]["torch"] == config.seed


def test_load_result_reports_current_stale_and_missing(stored):
    config, base, _ = stored
    results = base / "results"
    assert load_result(config, results).status == CURRENT
    assert load_result(config, results).source == "local"  # not the package's published results
    changed = config.replace(dropout=0.25)  # same key (file), different config: the stored file is STALE
    found = load_result(changed, results)
    assert found.status == STALE and "dropout" in found.message and not found.is_current
    assert load_or_run(changed, results_dir=results, run=False).status == STALE
    assert load_result(config.replace(seed=7), results).status == MISSING
    assert load_result(config.replace(seed=7), results).source is None
    # a tampered hash is STALE too, never current
    path = result_path(config, results)
    data = json.loads(path.read_text())
    data["config_hash"] = "0" * 16
    tampered = base / "tampered"
    (tampered / "wikitext2").mkdir(parents=True)
    (tampered / "wikitext2" / path.name).write_text(json.dumps(data))
    assert load_result(config, tampered).status == STALE


def test_load_or_run_returns_the_current_result_without_training(stored, monkeypatch):
    config, base, _ = stored
    monkeypatch.setattr("nmst_lib.experiments.runs.run_experiment", lambda *a, **k: pytest.fail("re-ran"))
    assert load_or_run(config, results_dir=base / "results").status == CURRENT


def test_corrupted_or_truncated_checkpoint_is_a_clear_error(stored, tmp_path):
    config, base, _ = stored
    good = (base / "ckpt" / f"{config.key}.safetensors").read_bytes()
    assert load_checkpoint(base / "ckpt" / f"{config.key}.safetensors")["progress"]["finished"]
    ckpt = tmp_path / f"{config.key}.safetensors"
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    for damaged in (good[: len(good) // 2], b"not a checkpoint", bytes(flipped)):
        ckpt.write_bytes(damaged)
        with pytest.raises(CheckpointError, match="corrupted|truncated|not an nmst_lib checkpoint"):
            load_checkpoint(ckpt)
    with pytest.raises(CheckpointError, match="corrupted"):  # never silently used by a resumed run
        train(config, checkpoint_dir=tmp_path, resume=True, progress=False)


def test_resume_rejects_a_checkpoint_of_another_config_or_vocabulary(stored, monkeypatch):
    config, base, _ = stored
    ckpt_dir = base / "ckpt"
    before = (ckpt_dir / f"{config.key}.safetensors").read_bytes()
    monkeypatch.setattr(train_module, "_train_one_epoch", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(CheckpointError, match="different config.*dropout"):
        train(config.replace(dropout=0.25), checkpoint_dir=ckpt_dir, resume=True, progress=False)
    other_corpus = D.load_wikitext2("local", substitute_seed=5)  # same config, other data -> other vocabulary
    other = prepare_data(config, corpus=other_corpus)
    with pytest.raises(CheckpointError, match="vocabulary mismatch"):
        train(config, checkpoint_dir=ckpt_dir, resume=True, data=other, progress=False)
    assert (ckpt_dir / f"{config.key}.safetensors").read_bytes() == before
    # decoding settings do not touch the weights: the same checkpoint serves other decoders
    run = train(config.replace(decoders=("greedy",)), checkpoint_dir=ckpt_dir, resume=True, progress=False)
    assert run.resumed_from is not None


# ------------------------------------------------------------------------------- resumption


def test_interrupted_run_resumes_from_the_epoch_checkpoint_to_the_same_result(reference_run, tmp_path,
                                                                              interrupted_training):
    config, reference = reference_run
    interrupted_training(config, tmp_path, "[step] epoch 2 batch 3/")
    assert load_checkpoint(tmp_path / f"{config.key}.safetensors")["progress"]["epoch"] == 1
    resumed = train(config, checkpoint_dir=tmp_path, resume=True, progress=False)
    assert resumed.resumed_from == {"epoch": 1, "step": 0}
    assert resumed.val_ppl == reference.val_ppl
    assert resumed.test_ppl == reference.test_ppl
    assert [h["val_ppl"] for h in resumed.history] == [h["val_ppl"] for h in reference.history]


def test_killed_cli_training_resumes_mid_epoch_to_the_same_result(reference_run, tmp_path):
    """SIGKILL a `python -m nmst_lib train` subprocess in the middle of epoch 2, resume, and
    compare with the uninterrupted run."""
    config, reference = reference_run
    cmd = [sys.executable, "-m", "nmst_lib", "train", "--profile", "quick", "--arch", "lstm", "--head", "nmst",
           "--eps", "0.01", "--set", "max_epochs=3", "--set", 'data_source="local"', "--threads", "1",
           "--checkpoint-dir", str(tmp_path), "--checkpoint-every", "2", "--log-steps", "--no-progress"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("[step] epoch 2 batch 3/"):
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.stdout.close()
        proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, "".join(seen[-20:])
    ckpt = load_checkpoint(tmp_path / f"{config.key}.safetensors")
    assert not ckpt["progress"]["finished"]
    resumed = train(config, checkpoint_dir=tmp_path, resume=True, progress=False)
    assert resumed.resumed_from["epoch"] == 1 and resumed.resumed_from["step"] >= 2  # mid-epoch
    assert resumed.val_ppl == reference.val_ppl
    assert resumed.test_ppl == reference.test_ppl


def test_parallel_suite_gives_the_same_results_as_a_serial_one(tmp_path):
    only = lambda c: c.head != "st"  # noqa: E731 - VA and NMST of the quick suite
    serial = run_suite("quick", results_dir=tmp_path / "serial", checkpoint_dir=tmp_path / "ck-serial",
                       progress=False, log=None, only=only)
    messages = []
    parallel = run_suite("quick", results_dir=tmp_path / "parallel", checkpoint_dir=tmp_path / "ck-parallel",
                         progress=False, log=messages.append, only=only, jobs=2, threads=1)
    assert [s.status for s in parallel] == [CURRENT, CURRENT] and len(serial) == 2
    assert sum("finished" in m for m in messages) == 2
    for a, b in zip(serial, parallel):
        assert a.path.name == b.path.name
        assert a.data["metrics"]["val_ppl"] == b.data["metrics"]["val_ppl"]
        assert {k: v["rnt"] for k, v in a.data["decoding"].items()} == {k: v["rnt"] for k, v in b.data["decoding"].items()}
    with pytest.raises(ValueError, match="jobs"):
        run_suite("quick", results_dir=tmp_path / "x", jobs=0)


def _flush_supported() -> bool:
    with model_setup.subnormals_flushed() as supported:
        return supported


@pytest.mark.skipif(not _flush_supported(), reason="this CPU has no flush-to-zero mode")
@pytest.mark.parametrize("before", [False, True])
def test_subnormals_flushed_zeroes_them_inside_and_restores_the_mode_after(before):
    """Inside the block a subnormal float32 (2^-140) times 1 is 0; after it, also after an
    exception, the mode is what it was before (either way)."""
    tiny = torch.tensor(2.0 ** -140, dtype=torch.float32)
    torch.set_flush_denormal(before)
    try:
        assert model_setup.subnormals_are_flushed() is before
        assert (float(tiny * 1.0) == 0.0) is before
        with model_setup.subnormals_flushed():
            assert float(tiny * 1.0) == 0.0 and model_setup.subnormals_are_flushed()
        assert model_setup.subnormals_are_flushed() is before
        with pytest.raises(RuntimeError, match="inside"):
            with model_setup.subnormals_flushed():
                raise RuntimeError("inside")
        assert model_setup.subnormals_are_flushed() is before
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.skipif(not _flush_supported(), reason="this CPU has no flush-to-zero mode")
def test_training_epochs_run_with_subnormals_flushed_and_the_mode_is_restored(tmp_path):
    """train() flushes subnormals during its epochs (what the monitor sees after step 0, which
    is taken before them) and leaves the caller's mode as it found it."""
    probe = lambda model: {"flushed": model_setup.subnormals_are_flushed()}
    run = train(quick("va", None, max_epochs=1), checkpoint_dir=tmp_path, progress=False, monitor=probe,
                monitor_every=2)
    records = run.monitor_log
    assert records[0]["step"] == 0 and records[0]["flushed"] is False
    assert len(records) >= 2 and all(r["flushed"] for r in records[1:])
    assert model_setup.subnormals_are_flushed() is False


def test_a_relative_improvement_threshold_stops_training_on_a_plateau(tmp_path):
    """min_improvement (Chapter 6's converged recipe): an epoch better by less than the threshold
    halves the lr and counts towards patience, but its weights are still the best kept."""
    config = quick("va", None, max_epochs=6, patience=2, min_improvement=0.9)
    run = train(config, checkpoint_dir=tmp_path, progress=False)
    history = run.history
    # epochs 2 and 3 cannot be 90 % better than the best before them: two plateau epochs, patience 2
    assert len(history) == 3 and run.stopped_early
    assert history[1]["lr"] == history[0]["lr"]  # the halving applies from the next epoch on
    assert history[2]["lr"] == history[1]["lr"] / 2  # epoch 2's plateau halved it
    best = min(history, key=lambda h: h["val_ppl"])
    assert run.best_epoch == best["epoch"]
