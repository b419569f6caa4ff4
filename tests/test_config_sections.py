"""The typed sections of ``ExperimentConfig`` (issue 21): every stored result
keeps its hash, one flat vocabulary routes to the sections, each section
validates itself."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from nmst_lib.experiments import get_family
from nmst_lib.experiments.config import (
    ExperimentConfig,
    config_from_dict,
    config_hash,
    make_config,
    training_hash,
)
from nmst_lib.experiments.config_sections import (
    FIELD_SECTIONS,
    SECTION_TYPES,
    DataOptions,
    GPT2Options,
    ModelOptions,
    TemperatureOptions,
    validate_model,
)

REPO = Path(__file__).resolve().parents[1]
STORED = sorted(
    [
        *(REPO / "nmst_lib" / "published_results").rglob("*.json"),
        *(REPO / "pending_results").rglob("*.json"),
    ]
)
FAMILY_OF_SCHEMA = {
    "nmst_lib.wikitext_result/1": "wikitext2",
    "nmst_lib.sparse_result/1": "sparse",
    "nmst_lib.temperature_result/1": "temperature",
}


def test_there_are_stored_results():
    assert len(STORED) >= 30  # every chapter's seed-0 models at least
    assert any(p.parent.name == "gpt2" for p in STORED)


@pytest.mark.parametrize(
    "path", STORED, ids=lambda p: str(p.relative_to(REPO))
)
def test_every_stored_result_keeps_its_hash(path):
    """Rebuilt from its stored dict, every result's config has the stored hash
    and gives the stored dict back (the flat dict of the config before the
    sections)."""
    stored = json.loads(path.read_text(encoding="utf-8"))
    family = get_family(FAMILY_OF_SCHEMA[stored["schema"]])
    config = family.config_from_dict(stored["config"])
    assert family.config_hash(config) == stored["config_hash"]
    assert config.to_dict() == stored["config"]
    assert json.dumps(config.to_dict()) == json.dumps(
        stored["config"]
    )  # same key order
    training = family.training_config(config)
    assert isinstance(training, ExperimentConfig)
    assert config_from_dict(training.to_dict()) == training


@pytest.mark.parametrize(
    "flat",
    [
        {"profile": "cpu", "arch": "lstm", "head": "nmst", "eps": 5e-4},
        {"profile": "cpu", "arch": "gpt2", "head": "st", "eps": 2.5e-3},
        {
            "profile": "quick",
            "arch": "gpt2",
            "head": "va",
            "pretrained": "gpt2",
            "attn_heads": None,
        },
        {
            "profile": "cpu",
            "arch": "lstm",
            "head": "nmst-entmax",
            "eps": 5e-4,
            "alpha": 1.5,
        },
        {
            "profile": "cpu",
            "arch": "lstm",
            "head": "va",
            "temperature": "sigmoid",
            "loss_scaling": True,
            "detach_loss_scale": True,
            "mixtures": 3,
        },
        {"profile": "quick", "arch": "rnn", "head": "va", "mixtures": 2},
        {
            "profile": "quick",
            "arch": "lstm",
            "head": "va",
            "vocab_kind": "bpe",
            "vocab_cap": 400,
            "drop_unk": True,
        },
    ],
    ids=[
        "wikitext2",
        "gpt2",
        "gpt2-pretrained",
        "sparse",
        "temperature",
        "mos",
        "bpe",
    ],
)
def test_each_family_round_trips(flat):
    config = make_config(**flat)
    again = config_from_dict(config.to_dict())
    assert again == config
    assert config_hash(again) == config_hash(config)
    assert training_hash(again) == training_hash(config)
    assert config.replace() == config
    assert ExperimentConfig.from_flat(**config.flat_dict()) == config


def test_sections_hold_the_options():
    lstm = make_config("cpu", "lstm", "va")
    assert lstm.model == ModelOptions(hidden=128, layers=2, dropout=0.3)
    assert lstm.data.vocab_kind == "bpe" and lstm.data.vocab_cap == 4000 and lstm.data.drop_unk
    assert lstm.training.lr == 2e-3 and lstm.training.max_epochs == 60 and lstm.training.min_improvement == 0.005
    assert lstm.decoding.num_decode_contexts == 128
    assert lstm.gpt2 is None and lstm.temperature is None
    gpt2 = make_config("cpu", "gpt2", "va")
    assert gpt2.gpt2 == GPT2Options(pretrained=None, attn_heads=4)
    ct = make_config(
        "quick", "lstm", "va", temperature="power-tanh", loss_scaling=True
    )
    assert ct.temperature == TemperatureOptions(
        normalisation="power-tanh", lam=4.0, rank=16, loss_scaling=True
    )
    assert (
        ct.value("temperature") == "power-tanh"
        and ct.value("temperature_rank") == 16
    )
    assert (
        lstm.value("temperature_lambda") is None
        and lstm.value("mixtures") == 1
    )
    # a mixture alone is a section too; with one softmax again, it goes away
    mos = make_config("quick", "lstm", "va", mixtures=3)
    assert mos.temperature == TemperatureOptions(mixtures=3)
    assert mos.replace(mixtures=1).temperature is None


def test_one_table_names_every_section_attribute():
    routed = {(s, a) for s, a in FIELD_SECTIONS.values() if s is not None}
    declared = {
        (s, f.name) for s, cls in SECTION_TYPES.items() for f in fields(cls)
    }
    assert routed == declared
    identity = {a for s, a in FIELD_SECTIONS.values() if s is None}
    on_config = {f.name for f in fields(ExperimentConfig)} - set(SECTION_TYPES)
    assert identity == on_config
    assert not hasattr(
        make_config(), "hidden"
    )  # no flat forwarding attributes


@pytest.mark.parametrize(
    "call",
    [
        lambda: make_config("quick", hiden=3),
        lambda: make_config("quick").replace(learning_rate=1e-3),
        lambda: config_from_dict(
            {**make_config("quick").to_dict(), "normalisation": "sigmoid"}
        ),
        lambda: make_config("quick").value("model"),
    ],
)
def test_unknown_flat_names_are_refused_with_the_known_ones(call):
    with pytest.raises(
        ValueError, match=r"unknown config field.*known: .*'hidden'"
    ):
        call()


def test_a_misspelt_flat_name_gets_the_closest_known_one():
    with pytest.raises(
        ValueError, match=r"'hiden' \(did you mean 'hidden'\?\)"
    ):
        make_config("quick", hiden=3)


def test_each_section_validates_itself():
    with pytest.raises(ValueError, match="dropout must lie in"):
        validate_model(ModelOptions(dropout=1.0))
    with pytest.raises(
        TypeError, match="the data section must be a DataOptions"
    ):
        from nmst_lib.experiments.config import validate_config

        validate_config(ExperimentConfig(data=ModelOptions()))
    with pytest.raises(
        ValueError, match="the gpt2 section applies to arch gpt2 only"
    ):
        validate_config(ExperimentConfig(gpt2=GPT2Options()))
    # cross-section checks stay in validate_config
    with pytest.raises(
        ValueError, match="vocab_cap must be None for arch gpt2"
    ):
        validate_config(
            ExperimentConfig(
                arch="gpt2",
                data=DataOptions(vocab_cap=10),
                gpt2=GPT2Options(attn_heads=2),
            )
        )


def test_a_hidden_size_other_than_the_profiles_is_in_the_key():
    from nmst_lib.experiments import make_config

    assert make_config("cpu", "lstm", "va").key == "cpu-lstm-va-bpe4k-nounk-seed0"
    assert make_config("cpu", "lstm", "va", hidden=162).key == "cpu-lstm-va-h162-bpe4k-nounk-seed0"
    assert make_config("paper", "rnn", "va").key == "paper-rnn-va-seed0"  # 256 is paper's RNN size
    assert make_config("paper", "lstm", "va", hidden=256).key == "paper-lstm-va-h256-seed0"
    assert make_config("cpu", "gpt2", "va").key == "cpu-gpt2-va-nounk-seed0"  # the converged recipe drops <unk>
    assert make_config("quick", "gpt2", "va").key == "quick-gpt2-va-seed0"
