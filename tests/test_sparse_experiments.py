"""Tests of Chapter 8's experiments (08_sparse; nmst_lib.experiments.sparse) and of what the
entmax heads changed in the Chapter 6 machinery: config validation and keys, the training loss
(the head's own loss; bit-identical for va/st/nmst), Chapter 6's committed results still current,
the quick sparse suite end to end (JSON layout, metrics that must agree with each other),
resumption of an interrupted evaluation and training, the results store and the CLI."""

import importlib
import json
import math
from pathlib import Path

import pytest
import torch

from nmst_lib import __main__ as cli
from nmst_lib import data as D
from nmst_lib.experiments import (
    CURRENT,
    MISSING,
    STALE,
    config_from_dict,
    config_hash,
    load_result,
    make_config,
    parse_decoder,
    published_results_dir,
    train,
    training_hash,
)
from nmst_lib.experiments import config as cfg
from nmst_lib.experiments.config import (
    EPS_PPL_CPU_RECIPE,
    WORD_CPU_RECIPE,
    ExperimentConfig,
    chapter_recipe,
    validate_config,
)

sparse = importlib.import_module("nmst_lib.experiments.sparse")
REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("fixture_data_env", "one_thread_per_module")


# ------------------------------------------------------------------------------- configs


def test_chapter6_committed_results_keep_their_config_hash():
    """Adding ``alpha`` (left out of to_dict when None) changed no hash: every committed cpu
    result of Chapter 6 loads as CURRENT, and their configs round-trip."""
    files = sorted((published_results_dir() / "wikitext2").glob("*.json"))
    assert len(files) >= 7
    for path in files:
        stored = json.loads(path.read_text())
        config = config_from_dict(stored["config"])
        assert "alpha" not in config.to_dict()
        assert config_hash(config) == stored["config_hash"], path.name
        assert load_result(config, published_results_dir()).status == CURRENT, path.name
    va = make_config("cpu", "lstm", "va", **WORD_CPU_RECIPE)  # Chapters 8 and 9's Chapter 6 LSTM
    assert training_hash(va) == "a9f251c3114c79a7"  # the checkpoint of cpu-lstm-va-seed0 stays usable


@pytest.mark.parametrize("kwargs,match", [
    (dict(head="entmax"), "needs alpha"),
    (dict(head="entmax", alpha=1.0), "alpha must be a finite number > 1"),
    (dict(head="entmax", alpha=math.inf), "alpha must be"),
    (dict(head="entmax", alpha="1.5"), "alpha must be a number"),
    (dict(head="entmax", alpha=1.5, eps=1e-3), "eps applies"),
    (dict(head="nmst-entmax", alpha=1.5), "needs eps"),
    (dict(head="nmst-entmax", eps=1e-3), "needs alpha"),
    (dict(head="va", alpha=1.5), "alpha applies"),
    (dict(head="nmst", eps=1e-3, alpha=1.5), "alpha applies"),
    (dict(head="sparsemax"), "unknown head"),
])
def test_bad_entmax_configs_are_rejected_with_what_to_change(kwargs, match):
    fields = dict(profile="quick", arch="lstm")
    fields.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        validate_config(ExperimentConfig.from_flat(**fields))


def test_keys_and_labels_name_alpha_and_hashes_see_it():
    e15 = make_config("cpu", "lstm", "entmax", alpha=1.5, **WORD_CPU_RECIPE)
    ne = make_config("cpu", "lstm", "nmst_entmax", 5e-4, alpha=1.5, **WORD_CPU_RECIPE)
    assert e15.key == "cpu-lstm-entmax-a1.5-seed0" and e15.label == "ENTMAX+LSTM (alpha=1.5)"
    assert ne.head == "nmst-entmax" and ne.key == "cpu-lstm-nmst-entmax-eps5e-4-a1.5-seed0"
    assert make_config("cpu", "lstm", "entmax", alpha=1.2).key == "cpu-lstm-entmax-a1.2-bpe4k-nounk-seed0"
    assert e15.to_dict()["alpha"] == 1.5 and config_from_dict(e15.to_dict()) == e15
    assert config_hash(e15) != config_hash(e15.replace(alpha=1.2))
    assert training_hash(e15) != training_hash(e15.replace(alpha=1.2))
    assert make_config("cpu", "lstm", "nmst", 5e-4, **WORD_CPU_RECIPE).key == "cpu-lstm-nmst-eps5e-4-seed0"


def test_new_decoder_names_parse_and_old_ones_do_not_change():
    assert parse_decoder("entmax-1.5").decode_kwargs() == {"alpha": 1.5}
    assert parse_decoder("entmax-1.5").method == "entmax" and parse_decoder("entmax-1.2").sampling
    t = parse_decoder("temperature-0.95")
    assert (t.method, t.decode_kwargs(), t.sampling) == ("ancestral", {"temperature": 0.95}, True)
    assert parse_decoder("ancestral").decode_kwargs() == {}
    assert parse_decoder("top-2").decode_kwargs() == {"k": 2}
    assert parse_decoder("consistent-nucleus-0.4").decode_kwargs() == {"consistent": True, "p": 0.4}
    for bad, match in (("entmax-1", "alpha > 1"), ("entmax-0.5", "alpha > 1"), ("temperature-0", "> 0"),
                       ("consistent-entmax-1.5", "consistent"), ("entmax-", "unknown decoder"),
                       ("entmax-1.2.3", "not a number")):
        with pytest.raises(ValueError, match=match):
            parse_decoder(bad)


def test_cli_head_list_and_alpha_option_match_the_library():
    assert cli.HEADS == cfg.HEADS
    args = cli.build_parser().parse_args(["train", "--profile", "cpu", "--head", "entmax", "--alpha", "1.2"])
    assert cli._config_from_args(args).key == "cpu-lstm-entmax-a1.2-bpe4k-nounk-seed0"


# ------------------------------------------------------------------------- training loss


@pytest.mark.parametrize("head,eps", [("va", None), ("st", 1e-2), ("nmst", 1e-2)])
def test_training_loss_is_the_nll_bit_for_bit_for_va_st_nmst(head, eps):
    """Model.loss now averages head.token_losses; for the NLL heads it equals token_nll / count
    exactly in value, and its gradient is the same function (fused backward, nmst_lib.fused,
    issue 25: equal to rounding, no longer bit for bit, to autograd through the log-probabilities)."""
    from nmst_lib.heads import head_from_name
    from nmst_lib.models import build_model

    torch.manual_seed(0)
    model = build_model("lstm", 23, hidden=8, layers=2, dropout=0.0, head=head_from_name(head, eps=eps))
    batch = D.Batch(torch.randint(0, 22, (3, 14)), torch.tensor([14, 11, 9]), 4)
    total, count = model.token_nll(batch)
    loss_sum, count2 = model.token_loss(batch)
    assert int(count) == int(count2)
    assert torch.equal(loss_sum, total)
    grads = []
    for fn in (lambda: model.token_nll(batch)[0] / count, lambda: model.loss(batch)):
        model.zero_grad()
        fn().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_entmax_model_trains_selects_on_its_own_loss_and_resumes_exactly(tmp_path, interrupted_training):
    """An entmax head trains with the same loop; history holds val_loss (perplexity may be
    infinite); a run interrupted mid-epoch resumes to the same numbers."""
    config = make_config("quick", "lstm", "entmax", alpha=1.5, max_epochs=2, data_source="local")
    ref = train(config, checkpoint_dir=tmp_path / "ref", progress=False)
    assert ref.val_ppl is None and ref.test_ppl is None and math.isfinite(ref.val_loss)
    assert all("val_loss" in h and "val_ppl" not in h for h in ref.history)
    assert ref.val_loss == pytest.approx(min(h["val_loss"] for h in ref.history), rel=1e-6)
    assert ref.history[-1]["val_loss"] < ref.history[0]["train_loss"]  # it learned something
    interrupted_training(config, tmp_path / "cut", "[step] epoch 2 batch 2/", checkpoint_every=1)
    resumed = train(config, checkpoint_dir=tmp_path / "cut", resume=True, progress=False)
    assert resumed.resumed_from["epoch"] == 1 and resumed.resumed_from["step"] >= 1
    assert resumed.val_loss == ref.val_loss and resumed.test_loss == ref.test_loss


# ------------------------------------------------------------------------ the quick suite


@pytest.fixture(scope="module")
def quick_suite(fixture_data_env, tmp_path_factory):
    base = tmp_path_factory.mktemp("sparse")
    results = sparse.run_sparse_suite("quick", results_dir=base / "results", checkpoint_dir=base / "ckpt",
                                      progress=False, log=None)
    return base, results


def test_sparse_suite_configs_follow_the_brief():
    every_seed = sparse.sparse_suite_configs("cpu")
    models = ["cpu-lstm-va-bpe4k-nounk-seed{}", "cpu-lstm-entmax-a1.5-bpe4k-nounk-seed{}",
              "cpu-lstm-nmst-entmax-eps5e-4-a1.5-bpe4k-nounk-seed{}", "cpu-lstm-entmax-a1.2-bpe4k-nounk-seed{}"]
    # three seeds of every model, all of seed 0 first (its noise bands come from seeds, issue 23)
    assert [c.key for c in every_seed] == [m.format(s) for s in (0, 1, 2) for m in models]
    assert sparse.SPARSE_SEEDS == {"quick": (0,), "cpu": (0, 1, 2), "paper": (0, 1, 2)}
    assert [c.model.seed for c in sparse.sparse_suite_configs("quick")] == [0] * 4
    # the softmax model of each seed is Chapter 6's LSTM VA of that seed (same training hash)
    for c in every_seed:
        if c.model.head == "va":
            assert training_hash(c.model) == training_hash(make_config("cpu", "lstm", "va", None, c.model.seed))
    # only seed 0's softmax model scores the explorer's contexts
    assert [c.explorer_contexts for c in every_seed if c.model.head == "va"] == [6, 0, 0]
    configs = every_seed[:4]
    va = configs[0]
    # Chapter 8's recipe is Chapter 6's converged one, the entmax models' epochs compared by
    # eps-perplexity; its softmax model is Chapter 6's LSTM VA seed 0 itself (same training hash)
    assert chapter_recipe("sparse", "cpu") == EPS_PPL_CPU_RECIPE
    assert training_hash(va.model) == training_hash(make_config("cpu", "lstm", "va"))
    assert va.model.training.select_on is None
    assert all(c.model.training.select_on == "eps_ppl" for c in configs[1:])
    assert va.decoders == ("ancestral", "temperature-0.95", "greedy", "top-50", "nucleus-0.95", "entmax-1.2",
                           "entmax-1.5")
    assert all(not any(d.startswith("entmax-") for d in c.decoders) for c in configs[1:])
    for c in configs:
        m = c.model
        assert (m.model.hidden, m.model.layers, m.data.vocab_kind, m.data.vocab_cap, m.data.drop_unk,
                m.training.max_epochs, m.training.patience, m.training.lr) == (128, 2, "bpe", 4000, True, 60, 2, 2e-3)
        assert m.decoding.decoders[:2] == ("greedy", "ancestral") and m.decoding.decode_max_len == 10_000
        assert m.decoding.num_decode_contexts == 64 and c.eval_split == "test"
    assert configs[0].explorer_contexts == 6 and all(c.explorer_contexts == 0 for c in configs[1:])
    assert va.model.decoding.decoders == ("greedy", "ancestral", "entmax-1.5")  # a sparse decoder of a softmax model
    d = configs[2].to_dict()
    assert sparse.sparse_config_from_dict(json.loads(json.dumps(d))) == configs[2]
    with pytest.raises(ValueError, match="no per-step distribution"):
        configs[0].replace(decoders=("beam-2",))


def test_quick_suite_writes_every_model_with_provenance(quick_suite):
    base, results = quick_suite
    assert [r.status for r in results] == [CURRENT] * 4
    for stored, config in zip(results, sparse.sparse_suite_configs("quick")):
        d = json.loads(stored.path.read_text())
        assert stored.path == base / "results" / "sparse" / f"{config.key}.json"
        assert d["schema"] == sparse.SPARSE_RESULT_SCHEMA and d["key"] == config.key
        assert d["config_hash"] == sparse.sparse_config_hash(config) and d["config"] == config.to_dict()
        for key in ("model", "metrics", "teacher_forced", "distinct", "decoding", "explorer", "data", "seeds",
                    "provenance"):
            assert key in d, key
        assert d["model"]["training_hash"] == training_hash(config.model)
        for key in ("git_sha", "git_dirty", "torch", "device", "date_utc", "wall_seconds", "command", "train_seconds"):
            assert key in d["provenance"]
        assert D.SUBSTITUTE_NAME in d["data"]["splits"]["train"]
        m = d["metrics"]
        if config.model.head == "va":
            assert m["selection"] == "val_ppl" and m["val_loss"] == pytest.approx(math.log(m["val_ppl"]))
        else:
            assert m["selection"] == "val_ppl" or (m["val_ppl"] is None and math.isfinite(m["val_loss"]))
        assert set(d["teacher_forced"]["decoders"]) == set(config.decoders)
        assert set(d["distinct"]) == set(config.distinct_decoders)
        assert set(d["decoding"]) == set(config.model.decoding.decoders) >= {"greedy", "ancestral"}
        assert not list((base / "results" / "sparse").glob(".*partial*"))  # cleaned up


def test_teacher_forced_metrics_agree_with_each_other(quick_suite):
    """sp in [0, 1], JS in [0, log 2]; greedy: one token considered, sp = accuracy, JS = (1 -
    accuracy) log 2; the softmax model's own distribution considers all V tokens and has finite
    perplexity, equal to its eps-perplexity with eps = 0 (f'(0) <= 0) or larger; every support
    holds at least one token and at most V."""
    _, results = quick_suite
    for stored in results:
        d = stored.data
        tf = d["teacher_forced"]
        V, n = tf["vocab_size"], tf["num_positions"]
        assert n == d["data"]["sequences"]["test"]["num_scored_tokens"]
        for name, r in tf["decoders"].items():
            assert 0 <= r["sp"] <= 1 and 0 <= r["js"] <= math.log(2) + 1e-12
            s = r["support"]
            assert 1 <= s["min"] <= s["median"] <= s["max"] <= V and s["min"] <= s["mean"] <= s["max"]
            assert sum(s["log2_histogram"]["counts"]) == n
            assert 0 <= r["eos"]["in_support"] <= 1 and 0 <= r["target_outside_support"] <= 1
            assert r["eps_ppl"] <= V + 1e-9
            for key in ("rep", "wrep"):
                vals = [r[key][str(w)] for w in tf["windows"]]
                assert r[key]["mean"] == pytest.approx(sum(vals) / len(vals))
                assert vals == sorted(vals)  # a larger window finds at least as many repeats
            assert all(r["wrep"][k] <= r["rep"][k] for k in r["rep"])
            if r["ppl"] is not None:
                assert r["eps_ppl"] <= r["ppl"] * (1 + 1e-9)
        g = tf["decoders"]["greedy"]
        assert (g["support"]["min"], g["support"]["max"]) == (1, 1)
        assert g["sp"] == pytest.approx(g["accuracy"], abs=1e-9)
        assert g["js"] == pytest.approx((1 - g["accuracy"]) * math.log(2), abs=1e-6)  # float32 log 2
        top = tf["decoders"]["top-50"]["support"]
        assert top["max"] <= 50
        if d["model"]["head"] == "va":
            own = tf["decoders"]["ancestral"]
            assert own["support"]["min"] == own["support"]["max"] == V
            assert own["ppl"] is not None and own["target_outside_support"] == 0
            assert own["eos"]["in_support"] == 1
            assert own["ppl"] == pytest.approx(d["metrics"]["test_ppl"], rel=1e-4)
            assert top["min"] == 50
            assert set(d["explorer"]["contexts"][0]) >= {"context", "next_token", "next_token_id", "logits"}
            assert len(d["explorer"]["contexts"][0]["logits"]) == V == len(d["explorer"]["vocabulary"])
            assert d["explorer"]["eos_id"] == V - 1
        else:
            own = tf["decoders"]["ancestral"]
            assert own["support"]["max"] <= V
            assert d["explorer"] == {}


def test_distinct_and_rnt_parts_are_consistent(quick_suite):
    _, results = quick_suite
    for stored in results:
        d = stored.data
        for name, r in d["distinct"].items():
            for n in (1, 2, 3):
                assert r[f"distinct_{n}"] is None or 0 < r[f"distinct_{n}"] <= 1
            assert 0 <= r["terminated_fraction"] <= 1 and r["mean_length"] <= r["max_len"]
        for name, r in d["decoding"].items():
            assert r["L"][-1] == r["max_len"] == d["config"]["model"]["decode_max_len"]
            assert all(a >= b for a, b in zip(r["rnt"], r["rnt"][1:]))
            assert len(r["lengths"]) == r["num_contexts"]


def test_a_temperature_decoder_is_softmax_tau_only_on_the_softmax_model():
    """softmax(log p / tau) of a sparse model is p^(1/tau) renormalised (zeros stay zero): a sharpened
    entmax, which the table must not call a softmax (Martins et al.'s Softmax-tau row is the NLL model's)."""
    assert sparse.decoder_label("temperature-0.95", "va") == "Softmax-tau (tau=0.95)"
    for head in ("entmax", "nmst-entmax"):
        assert sparse.decoder_label("temperature-0.95", head, 1.5) == "Temperature (tau=0.95)"
    assert sparse.decoder_label("ancestral", "entmax", 1.2) == "Entmax (alpha=1.2)"


def test_table_builders_return_rows_for_the_chapter(quick_suite):
    _, results = quick_suite
    t2 = sparse.table2_rows(results)
    methods = [r["method"] for r in t2]
    assert methods[:5] == ["Softmax", "Softmax-tau (tau=0.95)", "Greedy", "Top-k (k=50)", "Nucleus (P=0.95)"]
    assert methods[5:] == ["Entmax (alpha=1.5)", "NMST-entmax", "Entmax (alpha=1.2)"]
    # the row of Martins et al.'s Table 2 each stands for, by the paper's name (none for NMST-entmax)
    assert [r["paper row"] for r in t2] == ["Softmax", "Softmax-tau", "Greedy", "Top-k", "Nucleus", "Entmax",
                                            None, "Entmax"]
    assert all({"sp", "JS", "eps-ppl", "REP", "WREP"} <= set(r) for r in t2)
    t5 = sparse.table5_rows(results)
    assert len(t5) == sum(len(r.data["teacher_forced"]["decoders"]) for r in results) == 7 + 3 * 5
    assert len(sparse.table4_rows(results)) == len(t5) == len(sparse.eos_rows(results))
    assert len(sparse.distinct_rows(results)) == len(t5)
    assert len(sparse.rnt_curves(results)) == 9
    from nmst_lib.report import html_table

    assert "Softmax" in str(html_table(t2, digits=3))
    # results that are not current are left out, not shown as if they were
    missing = sparse.load_sparse_results("quick", results_dir=Path("/nonexistent-results"))
    assert [s.status for s in missing] == [MISSING] * 4 and sparse.table2_rows(missing) == []


def test_store_reports_stale_and_load_or_run_does_not_rerun(quick_suite, monkeypatch):
    base, results = quick_suite
    config = sparse.sparse_suite_configs("quick")[1]
    folder = base / "results"
    assert sparse.load_sparse_result(config, folder).status == CURRENT
    changed = config.replace(eval_seed=3)
    found = sparse.load_sparse_result(changed, folder)
    assert found.status == STALE and "eval_seed" in found.message
    monkeypatch.setattr(sparse, "run_sparse", lambda *a, **k: pytest.fail("re-ran"))
    assert sparse.load_or_run_sparse(config, results_dir=folder).status == CURRENT
    assert sparse.load_or_run_sparse(changed, results_dir=folder, run=False).status == STALE


def test_interrupted_evaluation_resumes_from_its_saved_parts(quick_suite, tmp_path, monkeypatch):
    """Kill the evaluation after its teacher-forced part: the re-run reuses the saved part (no
    recomputation) and the result equals the uninterrupted one."""
    base, results = quick_suite
    config = sparse.sparse_suite_configs("quick")[1]
    reference = results[1].data
    real = sparse._distinct

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sparse, "_distinct", boom)
    with pytest.raises(KeyboardInterrupt):
        sparse.run_sparse(config, results_dir=tmp_path, checkpoint_dir=base / "ckpt", progress=False)
    assert sparse._partial_path(config, tmp_path).is_file()
    monkeypatch.setattr(sparse, "_distinct", real)
    monkeypatch.setattr(sparse, "teacher_forced_metrics", lambda *a, **k: pytest.fail("recomputed"))
    stored = sparse.run_sparse(config, results_dir=tmp_path, checkpoint_dir=base / "ckpt", progress=False)
    assert stored.status == CURRENT and not sparse._partial_path(config, tmp_path).exists()
    for part in ("teacher_forced", "distinct"):
        a, b = dict(stored.data[part]), dict(reference[part])
        a.pop("wall_seconds", None), b.pop("wall_seconds", None)
        strip = lambda x: {k: {kk: vv for kk, vv in v.items() if kk != "wall_seconds"} if isinstance(v, dict) else v
                           for k, v in x.items()}  # noqa: E731
        assert strip(a) == strip(b)
    assert {k: v["rnt"] for k, v in stored.data["decoding"].items()} == \
        {k: v["rnt"] for k, v in reference["decoding"].items()}


def test_cli_sparse_dry_run_lists_the_models(tmp_path, capsys):
    assert cli.main(["sparse", "--profile", "cpu", "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 12 and all("MISSING" in line for line in lines)
    assert cli.main(["sparse", "--profile", "cpu", "--dry-run", "--only", "entmax-a1.2", "--out", str(tmp_path)]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 3  # its three seeds
    with pytest.raises(SystemExit):
        cli.main(["sparse", "--help"])
    text = capsys.readouterr().out
    for option in ("--profile", "--only", "--threads", "--out", "--no-progress"):
        assert option in text


def test_committed_cpu_results_are_current_and_made_by_committed_code():
    """The cpu results Chapter 8 shows ship in nmst_lib/published_results/sparse: each is CURRENT
    for today's configs, from a clean checkout, on the test split, and made by its own seed's config
    (the training hash). Its converged models and seeds land one by one (issue 23), so a model may be
    missing (the page names it); the softmax model is there. Table 2 has one row per model and
    decoder, a model's seeds averaged: the softmax model's 5 decoders and one row per other model."""
    stored = [s for s in sparse.load_sparse_results("cpu", results_dir=published_results_dir())
              if s.status != MISSING]
    assert all(s.status == CURRENT for s in stored), [s.message for s in stored]
    assert stored and stored[0].data["model"]["head"] == "va"
    config_of = {c.key: c for c in sparse.sparse_suite_configs("cpu")}
    for s in stored:
        prov = s.data["provenance"]
        assert prov["git_sha"] and prov["git_dirty"] is False and "sparse --profile cpu" in prov["command"]
        tf = s.data["teacher_forced"]
        assert tf["num_positions"] == s.data["data"]["sequences"]["test"]["num_scored_tokens"]
        assert s.data["model"]["training_hash"] == training_hash(config_of[s.path.stem].model)
    rows = sparse.table2_rows(stored)
    others = {s.data["model"]["label"] for s in stored if s.data["model"]["head"] != "va"}
    assert len(rows) == 5 + len(others) and all(0 < r["sp"] < 1 for r in rows)
