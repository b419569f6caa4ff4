"""scripts/train_queue.py, issue 23's compute plan as one queue that several lanes share: the
queue holds every cpu model of Chapters 6-9 once, by its chapter's converged recipe, one seed of
every configuration first; the child command a lane runs builds exactly the queued config; a
claim is exclusive, and the claims of lanes that no longer run are cleared."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from nmst_lib.__main__ import _set_overrides
from nmst_lib.experiments import get_family
from nmst_lib.experiments.config import (
    CPU_RECIPES,
    GPT2_CONVERGED_CPU_RECIPE,
    config_hash,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tq():
    spec = importlib.util.spec_from_file_location("train_queue", ROOT / "scripts" / "train_queue.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def plan(tq):
    return tq.queue()


def test_the_queue_holds_every_cpu_model_once_by_its_chapters_converged_recipe(tq, plan):
    assert tq.RECIPES == {"wikitext2": CPU_RECIPES["converged"], "gpt2": GPT2_CONVERGED_CPU_RECIPE,
                          "sparse": CPU_RECIPES["converged-eps-ppl"],
                          "temperature": CPU_RECIPES["converged-unigram-hold"]}
    # once per family: Chapter 8's softmax model is Chapter 6's LSTM VA seed 0 (same key and training
    # hash), evaluated by Chapter 8's suite into its own result file
    keys = Counter((f, c.key) for f, c in plan)
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    for name, recipe in tq.RECIPES.items():
        suite = get_family(name).configs("cpu", **recipe)
        # and Chapter 6's models at the eps its grid takes next (their own test below)
        queued = {c.key for f, c in plan if f == name and not tq.is_next_grid(f, c)}
        assert queued == {c.key for c in suite}, name
        # by the recipe: every model on the converged vocabulary and stopping rule
        for c in suite:
            t = get_family(name).training_config(c)
            assert t.training.min_improvement == 0.005 and t.data.drop_unk, c.key


def test_one_seed_of_every_configuration_comes_first_chapter_7_leading(tq, plan):
    plan = [(f, c) for f, c in plan if not tq.is_next_grid(f, c)]  # placed by their own test below
    seeds = [get_family(f).training_config(c).seed for f, c in plan]
    first_later = seeds.index(next(s for s in seeds if s != 0))
    assert all(s == 0 for s in seeds[:first_later]) and all(s != 0 for s in seeds[first_later:])
    assert [f for f, _ in plan[:7]] == ["gpt2"] * 7
    # VA, then ST and NMST of each eps side by side (the pairs Table 2 compares land together)
    assert [(c.head, c.eps) for _, c in plan[1:7]] == [(h, e) for e in sorted({c.eps for _, c in plan[1:7]})
                                                        for h in ("st", "nmst")]
    # then Chapters 7 and 6 (bands from seeds only), seed 1 before seed 2, Chapter 7's first;
    # then Chapters 9 and 8 (a stated floor), seed 1 before seed 2
    later = plan[first_later:]
    # the further seeds of the models no counted finding reads come last, and are exactly these:
    # Chapter 8's at alpha = 1.5 (two models) and Chapter 9's single-softmax models (CT-VA, its five
    # ablations, its range [1/2, 3/2] and the plain LSTM of its size), two further seeds each
    # (CT-NMST, also beyond, has one seed in the suite)
    last = [tq.beyond_only(f, c) for f, c in later]
    assert last == sorted(last) and sum(last) == 2 * (2 + 8), sum(last)
    assert {c.key.rsplit("-seed", 1)[0] for (f, c), b in zip(later, last) if b} == {
        "cpu-lstm-entmax-a1.5-bpe4k-nounk", "cpu-lstm-nmst-entmax-eps5e-4-a1.5-bpe4k-nounk",
        "cpu-lstm-va-h159-bpe4k-nounk", "cpu-lstm-va-ct-sig-a0.5-b1-lsdet-bpe4k-nounk",
        *(f"cpu-lstm-va-ct-{stem}-bpe4k-nounk" for stem in (
            "sig-a1-b0.5-lsdet", "sig-a1-b0.5-nols", "sig-a1-b0.5", "pow-l4-lsdet", "shift-l3-lsdet",
            "smax-a1-b0.5-lsdet"))}
    assert tq.beyond_only(*next((f, c) for f, c in plan if f == "temperature" and c.model.head == "nmst"))
    # the mixtures are read by the paper's findings: MoS, CT-MoS and its ablations, MoS+
    assert not any(tq.beyond_only(f, c) for f, c in plan if f == "temperature" and "-mos3-" in c.key)
    assert not any(tq.beyond_only(f, c) for f, c in plan if f in ("gpt2", "wikitext2"))
    later = [job for job, b in zip(later, last) if not b]
    groups = [[get_family(f).training_config(c).seed for f, c in later if f in names]
              for names in tq.SEED_GROUPS]
    assert [f in tq.SEED_GROUPS[0] for f, _ in later] == sorted((f in tq.SEED_GROUPS[0] for f, _ in later),
                                                                 reverse=True)
    assert all(g == sorted(g) and g[0] == 1 and g[-1] == 2 for g in groups)
    assert later[0][0] == "gpt2" and sorted(n for g in tq.SEED_GROUPS for n in g) == sorted(tq.SEED_ORDER)
    # Chapter 9's parameter-matched VA (fast) before its contextual-temperature models
    ch9 = [c for f, c in plan if f == "temperature"]
    assert get_family("temperature").training_config(ch9[0]).model.hidden != 128


def test_a_lanes_child_command_builds_exactly_the_queued_config(tq, plan, tmp_path):
    for family, config in [next((f, c) for f, c in plan if f == name) for name in tq.RECIPES]:
        command = tq.suite_command(family, config, tmp_path)
        assert command[command.index("--only") + 1] == config.key
        sets = [command[i + 1] for i, arg in enumerate(command) if arg == "--set"]
        again = get_family(family).configs("cpu", **_set_overrides(sets))
        match = [c for c in again if config.key in c.key]
        assert len(match) == 1, (config.key, [c.key for c in match])
        fam = get_family(family)
        assert fam.config_hash(match[0]) == fam.config_hash(config)
        if family in ("wikitext2", "gpt2"):  # a plain ExperimentConfig: the stored hash
            assert config_hash(match[0]) == config_hash(config)


def test_chapter_6s_next_eps_is_queued_after_every_seed_0_model_as_the_configs_its_grid_will_make(
        tq, plan, tmp_path, monkeypatch):
    """The models of Chapter 6 at ``NEXT_EPS`` (1e-5, Choi et al.'s best): RNN and LSTM, ST and NMST,
    seeds 0-2, one block right after the last seed-0 model of the suites, seed by seed; each is the
    config (key and hash) the suite makes once ``CPU_EPS`` takes the eps, and the lane's ``run``
    command builds exactly it; once the grid has the eps, none is left over."""
    from nmst_lib import __main__ as cli
    from nmst_lib.experiments import runs

    assert tq.NEXT_EPS == (1e-5,)
    flags = [tq.is_next_grid(f, c) for f, c in plan]
    at = flags.index(True)
    block = plan[at:at + 12]
    assert sum(flags) == 12 and all(flags[at:at + 12])
    assert [(c.seed, c.arch, c.head, c.eps) for _, c in block] == [
        (s, a, h, 1e-5) for s in range(3) for a in ("rnn", "lstm") for h in ("st", "nmst")]
    before = plan[:at]
    assert all(get_family(f).training_config(c).seed == 0 for f, c in before)
    assert all(get_family(f).training_config(c).seed != 0 for f, c in plan[at + 12:])
    # the configs the suite makes when the grid takes 1e-5 (nothing else of the suite changes)
    wide = tq.CPU_EPS + tq.NEXT_EPS
    monkeypatch.setattr(runs, "CPU_EPS", wide)
    suite = {c.key: c for c in get_family("wikitext2").configs("cpu", **tq.RECIPES["wikitext2"])}
    for _, config in block:
        assert config_hash(suite[config.key]) == config_hash(config), config.key
    # the lane's child: `run` with the model's arch, head, eps and seed and the recipe's fields
    command = tq.suite_command("wikitext2", block[-1][1], tmp_path)
    assert command[3] == "run" and "--only" not in command
    args = cli.build_parser().parse_args(command[3:])
    assert config_hash(cli._config_from_args(args)) == config_hash(block[-1][1])
    assert args.out == str(tmp_path / "out") and args.checkpoint_dir == str(tmp_path / "ckpt")
    # the suite's own models keep `suite --only`
    assert tq.suite_command("wikitext2", plan[-1][1], tmp_path)[3] == "suite"
    monkeypatch.setattr(tq, "CPU_EPS", wide)
    assert tq.next_grid_configs() == []


def test_a_next_eps_result_lands_in_pending_results_not_in_the_store(tq, plan, tmp_path, monkeypatch):
    """The published store holds only suite configs (test_family): a finished model of the next
    eps lands in ``pending_results/wikitext2/`` and is done from there."""
    # one that is not landed yet (a landed one is done, and nothing of it waits)
    config = next((c for f, c in plan if tq.is_next_grid(f, c) and tq.where_done(f, c, None) is None), None)
    if config is None:
        pytest.skip("every model of the next eps is landed")
    fam = get_family("wikitext2")
    sibling = next((c for f, c in plan if f == "wikitext2" and c.key == config.key.replace("1e-5", "1e-4")))
    if fam.load(sibling).status != "current":
        pytest.skip("no published result of the 1e-4 sibling to dress as a 1e-5 result")
    data = json.loads(Path(fam.load(sibling).path).read_text(encoding="utf-8"))
    data.update(key=config.key, config=config.to_dict(), config_hash=config_hash(config))
    work, store, pending = tmp_path / "work", tmp_path / "store", tmp_path / "pending"
    waiting = fam.path(config, work / "out")
    waiting.parent.mkdir(parents=True)
    waiting.write_text(json.dumps(data), encoding="utf-8")
    assert tq.where_done("wikitext2", config, work, tree=tmp_path) == "WORK/out"
    written = tq.land(work, [config.key], store=store, pending=pending)
    assert written == [pending / "wikitext2" / f"{config.key}.json"]
    assert written[0].read_bytes() == waiting.read_bytes() and not store.exists()
    assert tq.where_done("wikitext2", config, None, tree=tmp_path / "tree") is None
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "pending_results").symlink_to(pending)
    assert tq.where_done("wikitext2", config, None, tree=tmp_path / "tree") == "pending_results"


def test_a_claim_is_exclusive_and_a_dead_lanes_claim_is_cleared(tq, tmp_path):
    assert tq.claim(tmp_path, "model-a")
    assert not tq.claim(tmp_path, "model-a")  # the other lane sees it taken
    assert tq.claim(tmp_path, "model-b")
    # model-b's lane has ended: its pid is a process that has exited
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "claims" / "model-b" / "pid").write_text(str(gone.pid))
    assert tq.clear_stale_claims(tmp_path) == ["model-b"]
    assert (tmp_path / "claims" / "model-a").is_dir()  # this process still runs: kept
    assert int((tmp_path / "claims" / "model-a" / "pid").read_text()) == os.getpid()
    tq.release(tmp_path, "model-a")
    assert not any((tmp_path / "claims").iterdir())


def test_a_model_with_a_current_result_is_done_wherever_it_is_stored(tq, plan, tmp_path, monkeypatch):
    family, config = next((f, c) for f, c in plan if f == "wikitext2")
    published = tq.where_done(family, config, tmp_path)
    if published is None:
        pytest.skip("no published result of the first Chapter 6 model")
    assert published == "published"
    fam = get_family(family)
    stored = fam.load(config)
    target = fam.path(config, tmp_path / "work" / "out")
    target.parent.mkdir(parents=True)
    target.write_bytes(Path(stored.path).read_bytes())
    # committed and in WORK/out: the repository's copy is named (nothing to land)
    assert tq.where_done(family, config, tmp_path / "work") == "published"
    # only in WORK/out: a finished result that is not committed yet
    monkeypatch.setattr(tq, "published_results_dir", lambda: tmp_path / "empty")
    assert tq.where_done(family, config, tmp_path / "work", tree=tmp_path) == "WORK/out"
    assert tq.where_done(family, config, None, tree=tmp_path) is None


def test_update_tree_is_refused_while_a_lane_runs_and_checks_out_the_commit_otherwise(tq, tmp_path, monkeypatch):
    """--update-tree moves the worktree only when no lane holds a claim (a live lane's child
    trains with the tree's code)."""
    calls = []
    monkeypatch.setattr(tq.subprocess, "run", lambda args, **kw: calls.append(args))
    assert tq.claim(tmp_path, "some-model")  # this process plays a live lane
    with pytest.raises(SystemExit, match="lanes are running \\(some-model\\)"):
        tq.update_tree(tmp_path, "abc123")
    assert calls == []
    tq.release(tmp_path, "some-model")
    tq.update_tree(tmp_path, "abc123")
    assert calls == [["git", "-C", str(tmp_path / "tree"), "checkout", "--quiet", "--detach", "abc123"]]


def test_land_copies_a_waiting_result_byte_for_byte_once_and_refuses_a_dirty_one(tq, plan, tmp_path, monkeypatch,
                                                                                    capsys):
    """``land`` moves a finished result of WORK/out into the published store unchanged; landed, it
    is no longer waiting; a result made from a tree with local changes is never published."""
    family, config = next((f, c) for f, c in plan if f == "wikitext2")
    if tq.where_done(family, config, None) != "published":
        pytest.skip("no published result of the first Chapter 6 model")
    fam = get_family(family)
    payload = Path(fam.load(config).path).read_bytes()
    work, store = tmp_path / "work", tmp_path / "store"
    waiting = fam.path(config, work / "out")
    waiting.parent.mkdir(parents=True)
    waiting.write_bytes(payload)
    monkeypatch.setattr(tq, "published_results_dir", lambda: store)
    assert tq.where_done(family, config, work, tree=tmp_path) == "WORK/out"
    written = tq.land(work, [], store=store)
    assert written == [store / family / f"{config.key}.json"]
    assert written[0].read_bytes() == payload
    assert "val " in capsys.readouterr().out
    assert tq.land(work, [], store=store) == []  # landed: nothing waits any more
    with pytest.raises(SystemExit, match="no finished result waits"):
        tq.land(work, [config.key], store=store)
    with pytest.raises(SystemExit, match="not in the plan"):
        tq.land(work, ["no-such-model"], store=store)
    # a dirty result: refused, the store keeps nothing of it
    written[0].unlink()
    data = json.loads(payload)
    data["provenance"]["git_dirty"] = True
    waiting.write_text(json.dumps(data), encoding="utf-8")
    assert tq.where_done(family, config, work, tree=tmp_path) == "WORK/out"  # CURRENT for its config
    with pytest.raises(SystemExit, match="git_dirty"):
        tq.land(work, [config.key], store=store)
    assert not written[0].exists()


def test_land_finds_a_result_whose_key_two_families_share(tq, plan, tmp_path, monkeypatch):
    """Chapter 8's softmax model is Chapter 6's LSTM VA under the same key: a finished Chapter 6 run
    of it waits in WORK/out/wikitext2 and lands there (a dict by key kept only the sparse family's
    entry, and ``land`` said there was nothing to land)."""
    shared = {c.key for f, c in plan if f == "sparse"} & {c.key for f, c in plan if f == "wikitext2"}
    key = min(shared)
    config = next(c for f, c in plan if f == "wikitext2" and c.key == key)
    fam = get_family("wikitext2")
    if fam.load(config).status != "current":
        pytest.skip("no published Chapter 6 result of the shared model")
    work, store = tmp_path / "work", tmp_path / "store"
    waiting = fam.path(config, work / "out")
    waiting.parent.mkdir(parents=True)
    waiting.write_bytes(Path(fam.load(config).path).read_bytes())
    monkeypatch.setattr(tq, "published_results_dir", lambda: store)
    assert tq.land(work, [key], store=store) == [store / "wikitext2" / f"{key}.json"]
    assert not (store / "sparse").exists()


def _stored(store: Path, family: str, key: str, minutes: float) -> None:
    (store / family).mkdir(parents=True, exist_ok=True)
    payload = {"provenance": {"train_seconds": minutes * 60}}
    (store / family / f"{key}.json").write_text(json.dumps(payload), encoding="utf-8")


def test_a_models_expected_time_is_the_median_of_its_nearest_published_relatives(tq, plan, tmp_path):
    """The estimate reads the model's other seeds when they are published, else the results whose
    keys share the most leading words with its own, else the family's measured mean."""
    family, config = next((f, c) for f, c in plan if f == "wikitext2")
    stem = config.key.rsplit("-seed", 1)[0]
    store = tmp_path / "store"
    assert tq.estimate_minutes(family, config, store) == tq.MINUTES[family]  # nothing published
    _stored(store, family, "cpu-some-other-model-seed0", 500)  # shares one word: the nearest so far
    assert tq.estimate_minutes(family, config, store) == 500
    _stored(store, family, f"{stem}-seed7", 30)
    _stored(store, family, f"{stem}-seed8", 50)
    _stored(store, family, f"{stem}-seed9", 400)
    assert tq.estimate_minutes(family, config, store) == 50  # its own seeds, their median
    words = config.key.split("-")
    _stored(store, family, "-".join(words[:-2] + ["other", "seed0"]), 90)  # a cousin: fewer shared words
    assert tq.estimate_minutes(family, config, store) == 50
    measured = tq.measured_minutes(family, store)  # read once, then passed: the same estimate
    assert measured[f"{stem}-seed9"] == 400 and len(measured) == 5
    assert tq.estimate_minutes(family, config, measured=measured) == 50


def test_a_models_stem_is_its_key_without_the_seed(tq):
    assert tq.model_stem("cpu-lstm-va-bpe4k-nounk-seed12") == "cpu-lstm-va-bpe4k-nounk"
    assert tq.model_stem("cpu-gpt2-st-eps2.5e-3-nounk") == "cpu-gpt2-st-eps2.5e-3-nounk"  # no seed: unchanged


def test_a_deadline_reads_each_familys_published_times_once_per_look(tq, tmp_path, monkeypatch):
    """``next_job`` with a deadline estimates every model it passes over, but reads a family's
    store once (Chapter 9's holds 17 MB of JSON)."""
    fam = get_family("wikitext2")
    jobs = [("wikitext2", c) for c in fam.configs("cpu", **tq.RECIPES["wikitext2"])][:4]
    monkeypatch.setattr(tq, "queue", lambda: jobs)
    monkeypatch.setattr(tq, "where_done", lambda *a, **k: None)
    reads = []
    monkeypatch.setattr(tq, "measured_minutes", lambda family, store=None: reads.append(family) or {})
    until = tq.time.time() + 60  # a minute: no model fits
    assert tq.next_job(tmp_path / "work", until) is None
    assert reads == ["wikitext2"]


def test_with_a_deadline_a_lane_starts_only_what_ends_in_time_and_resumes_a_surviving_checkpoint(tq, tmp_path,
                                                                                                    monkeypatch):
    """--fit: a model expected to outlast the session is left for later (a fresh machine would lose
    it), a shorter one behind it is taken, and a model whose checkpoint survived is resumed however
    long it is; nothing qualifying leaves the lane idle."""
    fam = get_family("wikitext2")
    jobs = [("wikitext2", c) for c in fam.configs("cpu", **tq.RECIPES["wikitext2"])][:3]
    monkeypatch.setattr(tq, "queue", lambda: jobs)
    monkeypatch.setattr(tq, "where_done", lambda *a, **k: None)
    minutes = {jobs[0][1].key: 300.0, jobs[1][1].key: 40.0, jobs[2][1].key: 300.0}
    monkeypatch.setattr(tq, "estimate_minutes", lambda family, config, **_: minutes[config.key])
    work = tmp_path / "work"
    until = tq.time.time() + 60 * 60  # an hour left
    assert tq.next_job(work, until)[1].key == jobs[1][1].key  # the 40-minute model, not the first
    assert tq.next_job(work, until) is None  # the rest is too long and has no checkpoint
    (work / "ckpt").mkdir()
    (work / "ckpt" / f"{jobs[2][1].key}.safetensors").write_bytes(b"")
    assert tq.next_job(work, until)[1].key == jobs[2][1].key  # its checkpoint survived: resumed
    assert tq.next_job(work, None)[1].key == jobs[0][1].key  # no deadline: the queue's order
    assert tq.next_job(work, None) is None  # all three claimed


def test_a_surviving_checkpoint_is_resumed_before_a_fresh_model_earlier_in_the_queue(tq, tmp_path, monkeypatch):
    """A lane that restarts finishes the interrupted run first (its hours are spent; it lands soonest)
    instead of starting the first unfinished model of the queue from scratch, with or without a
    deadline; the rest then follows the queue's order."""
    fam = get_family("wikitext2")
    jobs = [("wikitext2", c) for c in fam.configs("cpu", **tq.RECIPES["wikitext2"])][:3]
    monkeypatch.setattr(tq, "queue", lambda: jobs)
    monkeypatch.setattr(tq, "where_done", lambda *a, **k: None)
    monkeypatch.setattr(tq, "estimate_minutes", lambda family, config, **_: 10.0)
    for until in (None, tq.time.time() + 60 * 60):
        work = tmp_path / f"work-{until is None}"
        (work / "ckpt").mkdir(parents=True)
        (work / "ckpt" / f"{jobs[2][1].key}.safetensors").write_bytes(b"")
        assert [tq.next_job(work, until)[1].key for _ in jobs] == [jobs[2][1].key, jobs[0][1].key, jobs[1][1].key]


def test_fit_must_be_a_positive_number_of_minutes(tq, tmp_path):
    with pytest.raises(SystemExit, match="--fit must be a positive number of minutes"):
        tq.main(["start", str(tmp_path), "--fit", "0"])
