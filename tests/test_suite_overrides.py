"""A whole suite with option fields set for every model (``suite FAMILY --set FIELD=VALUE``;
nmst_lib.experiments.config.suite_overrides): how a new recipe is trained, in every family, before
a chapter switches its profile to it (issue 23's converged recipe). The overrides reach every
model, the suite still chooses each model's identity, and what depends on the options is
computed after them (Chapter 9's parameter-matched hidden size)."""

from __future__ import annotations

import pytest

from nmst_lib import __main__ as cli
from nmst_lib.experiments import get_family
from nmst_lib.experiments.config import (
    CHAPTER_CPU_RECIPE,
    CONVERGED_CPU_RECIPE,
    CPU_RECIPES,
    EPS_PPL_CPU_RECIPE,
    GPT2_CONVERGED_CPU_RECIPE,
    UNIGRAM_HOLD_CPU_RECIPE,
    suite_overrides,
)
from nmst_lib.experiments.temperature_suite import (
    parameter_matched_hidden,
    vocabulary_size_of,
)

RECIPE = dict(vocab_kind="bpe", vocab_cap=4000, drop_unk=True, max_epochs=60, patience=2, min_improvement=0.005)
"""scripts/converge_cpu.sh's recipe."""


def training_config(family, config):
    return get_family(family).training_config(config)


def test_the_scripts_recipe_is_the_cpu_profiles_converged_recipe():
    import re
    from pathlib import Path

    script = (Path(__file__).resolve().parents[1] / "scripts" / "converge_cpu.sh").read_text()
    values = dict(re.findall(r"\b(VOCAB|CAP|PATIENCE|MIN_IMPROVEMENT)=([0-9.]+)", script))
    assert {"vocab_cap": int(values["VOCAB"]), "max_epochs": int(values["CAP"]),
            "patience": int(values["PATIENCE"]), "min_improvement": float(values["MIN_IMPROVEMENT"])} == {
        k: RECIPE[k] for k in ("vocab_cap", "max_epochs", "patience", "min_improvement")}
    assert "--set vocab_kind=bpe" in script and "--set drop_unk=true" in script
    assert RECIPE == CONVERGED_CPU_RECIPE
    assert CHAPTER_CPU_RECIPE["wikitext2"] == "converged"  # Chapter 6 trains with it: nothing to override
    assert get_family("wikitext2").configs("cpu", **RECIPE) == get_family("wikitext2").configs("cpu")


def test_the_script_adds_chapter_9s_unigram_hold_for_the_temperature_suite_only():
    import re
    from pathlib import Path

    script = (Path(__file__).resolve().parents[1] / "scripts" / "converge_cpu.sh").read_text()
    hold = float(re.search(r"\bUNIGRAM_HOLD=([0-9.]+)", script).group(1))
    assert UNIGRAM_HOLD_CPU_RECIPE == {**RECIPE, "start_below_unigram": hold}
    assert CPU_RECIPES["converged-unigram-hold"] == UNIGRAM_HOLD_CPU_RECIPE
    assert 'if [ "${FAMILY:-}" = temperature ]; then recipe+=(--set start_below_unigram=$UNIGRAM_HOLD); fi' in script


def test_the_script_adds_chapter_8s_eps_perplexity_selection_for_the_sparse_suite_only():
    from pathlib import Path

    script = (Path(__file__).resolve().parents[1] / "scripts" / "converge_cpu.sh").read_text()
    assert 'if [ "${FAMILY:-}" = sparse ]; then recipe+=(--set select_on=eps_ppl); fi' in script
    assert EPS_PPL_CPU_RECIPE == {**RECIPE, "select_on": "eps_ppl"}
    assert CPU_RECIPES["converged-eps-ppl"] == EPS_PPL_CPU_RECIPE
    configs = get_family("sparse").configs("cpu", **EPS_PPL_CPU_RECIPE)
    # every seed's softmax model by its perplexity, the entmax models by eps-perplexity
    assert [c.model.training.select_on for c in configs] == [None, "eps_ppl", "eps_ppl", "eps_ppl"] * 3
    # the softmax model is still Chapter 6's LSTM VA seed 0
    assert training_config("sparse", configs[0]).key == "cpu-lstm-va-bpe4k-nounk-seed0"


@pytest.mark.parametrize("family", ["sparse", "temperature"])
def test_the_recipe_reaches_every_model_of_the_rnn_and_lstm_suites(family):
    plain = get_family(family).configs("cpu")
    tuned = get_family(family).configs("cpu", **RECIPE)
    assert len(tuned) == len(plain)
    for before, after in zip(plain, tuned):
        b, a = training_config(family, before), training_config(family, after)
        assert (a.arch, a.head, a.eps, a.alpha, a.seed) == (b.arch, b.head, b.eps, b.alpha, b.seed)
        assert (a.data.vocab_kind, a.data.vocab_cap, a.data.drop_unk) == ("bpe", 4000, True)
        assert (a.training.max_epochs, a.training.patience, a.training.min_improvement) == (60, 2, 0.005)
        assert a.key.endswith(f"-bpe4k-nounk-seed{a.seed}")  # the files name the vocabulary
        # the suite's own choices that the recipe does not name are kept (e.g. Chapter 8's 64 contexts)
        assert a.decoding == b.decoding


def test_gpt2_takes_the_fields_that_apply_to_it():
    tuned = get_family("gpt2").configs("cpu", max_epochs=3)
    assert all(c.training.max_epochs == 3 for c in tuned)
    assert [c.key for c in tuned] == [c.key for c in get_family("gpt2").configs("cpu")]
    with pytest.raises(ValueError, match="vocab"):
        get_family("gpt2").configs("cpu", vocab_kind="bpe", vocab_cap=4000)


def test_the_parameter_matched_baseline_is_matched_under_the_recipe(monkeypatch):
    suite = get_family("temperature").configs("cpu", **RECIPE)
    ct = suite[0].model
    matched = [c.model for c in suite if c.model.key.startswith("cpu-lstm-va-h")]
    want = parameter_matched_hidden(ct, vocabulary_size_of(ct))
    assert len(matched) == 3 and {m.model.hidden for m in matched} == {want}
    # a 4,000-piece vocabulary moves the match away from the word vocabulary's 162 (the suite by
    # the first editions' recipe)
    monkeypatch.setitem(CHAPTER_CPU_RECIPE, "temperature", "word-4-epochs")
    plain = [c.model for c in get_family("temperature").configs("cpu") if c.model.key.startswith("cpu-lstm-va-h")]
    assert plain[0].model.hidden == 162 and want != 162


@pytest.mark.parametrize(("overrides", "error", "match"), [
    ({"seed": 1}, ValueError, "overrides cannot set seed"),
    ({"head": "st", "eps": 1e-3}, ValueError, "cannot set eps, head"),
    ({"vocab_size": 10}, ValueError, "unknown config field"),
])
def test_an_override_the_suite_cannot_take_is_refused(overrides, error, match):
    with pytest.raises(error, match=match):
        suite_overrides(overrides)
    with pytest.raises(error, match=match):
        get_family("sparse").configs("cpu", **overrides)


def test_overrides_must_be_a_dict():
    with pytest.raises(TypeError, match="dict"):
        suite_overrides([("max_epochs", 3)])


def test_the_suite_command_sets_fields_for_every_model(tmp_path, capsys):
    argv = ["suite", "sparse", "--profile", "cpu", "--dry-run", "--out", str(tmp_path)]
    sets = [arg for field, value in (("vocab_kind", "bpe"), ("vocab_cap", "4000"), ("drop_unk", "true"))
            for arg in ("--set", f"{field}={value}")]
    assert cli.main(argv + sets) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.strip().splitlines()]
    assert keys == [c.key for c in get_family("sparse").configs("cpu", vocab_kind="bpe", vocab_cap=4000,
                                                                drop_unk=True)]
    assert [key.rsplit("-", 1)[0].endswith("-bpe4k-nounk") for key in keys] == [True] * 12  # 4 models, 3 seeds
    assert cli.main(argv + ["--set", "seed=2"]) == 2
    assert "overrides cannot set seed" in capsys.readouterr().err


def test_the_scripts_gpt2_recipe_is_chapter_7s_converged_recipe_and_keeps_every_models_identity():
    import re
    from pathlib import Path

    script = (Path(__file__).resolve().parents[1] / "scripts" / "converge_cpu.sh").read_text()
    block = re.search(r'if \[ "\$\{FAMILY:-\}" = gpt2 \]; then\n(.*?)\nfi', script, re.S).group(1)
    values = dict(re.findall(r"\b(GPT2_CAP|PATIENCE|MIN_IMPROVEMENT)=([0-9.]+)", script))
    fields = dict(re.findall(r"--set (\w+)=([^\s)]+)", block))
    assert fields == {"max_train_tokens": "null", "drop_unk": "true", "max_epochs": "$GPT2_CAP",
                      "patience": "$PATIENCE", "min_improvement": "$MIN_IMPROVEMENT"}
    assert GPT2_CONVERGED_CPU_RECIPE == {"max_train_tokens": None, "drop_unk": True,
                                         "max_epochs": int(values["GPT2_CAP"]), "patience": int(values["PATIENCE"]),
                                         "min_improvement": float(values["MIN_IMPROVEMENT"])}
    plain = get_family("gpt2").configs("cpu")
    tuned = get_family("gpt2").configs("cpu", **GPT2_CONVERGED_CPU_RECIPE)
    assert [(c.head, c.eps, c.seed) for c in tuned] == [(c.head, c.eps, c.seed) for c in plain]
    assert all(c.key.rsplit("-", 1)[0].endswith("-nounk") and c.data.max_train_tokens is None for c in tuned)
    assert {c.seed for c in tuned} == {0, 1, 2}


def test_the_gpt2_cpu_profile_is_the_converged_gpt2_recipe():
    """Chapter 7 switched: the cpu profile's GPT-2 defaults are GPT2_CONVERGED_CPU_RECIPE, so the
    suite with the recipe set again is the same suite, hash for hash (the stored results stay
    current), and converge_cpu.sh's overrides change nothing."""
    from nmst_lib.experiments.config import config_hash

    plain = get_family("gpt2").configs("cpu")
    again = get_family("gpt2").configs("cpu", **GPT2_CONVERGED_CPU_RECIPE)
    assert [config_hash(c) for c in again] == [config_hash(c) for c in plain]
    for c in plain:
        assert (c.data.max_train_tokens, c.data.drop_unk) == (None, True)
        assert (c.training.max_epochs, c.training.patience, c.training.min_improvement) == (30, 2, 0.005)
