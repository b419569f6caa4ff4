"""GPT-2 fine-tuning through the one training loop (nmst_lib.experiments.trainer; Choi, Cho, Lee
(2023) Sec. 4.2 and App. D; Chapter 7, 07_gpt2): the quick profile on GPT-2's real tokenizer,
exact resumption, AdamW parameter groups, the linear schedule, max_steps, gradient accumulation,
config validation, legacy checkpoints, and Chapter 6's and Chapter 8's config hashes unchanged.

Most runs use a tiny byte-level BPE tokenizer (277 ids, eos last) in place of GPT-2's 50,257 so
that they take seconds; the first test uses the real one and skips without it."""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import math

import pytest
import torch

from datasources import (
    NO_REAL_TOKENIZER,
    REAL_TOKENIZER_DIR,
    fixture_data_root,
    use_data_root,
    write_tiny_bpe_tokenizer,
)
from nmst_lib import data as D
from nmst_lib.experiments import (
    CURRENT,
    MISSING,
    ExperimentConfig,
    config_hash,
    load_checkpoint,
    load_result,
    make_config,
    model_setup,
    preparation,
    prepare_data,
    suite_configs,
    train,
)
from nmst_lib.experiments.config import (
    GPT2_CPU_EPS,
    default_decoders,
    validate_config,
)
from nmst_lib.models import GPT2LM

train_module = importlib.import_module("nmst_lib.experiments.trainer")


pytestmark = pytest.mark.usefixtures("one_thread_per_module")


@pytest.fixture(scope="module")
def tiny_env(tmp_path_factory):
    """The fixture WikiText-2 text + a tiny BPE tokenizer in GPT-2's format (load_gpt2_tokenizer
    insists on 50,257 ids, so the loader is swapped for this module; the rest of the path is
    GPT-2's)."""
    from transformers import GPT2Tokenizer

    base = tmp_path_factory.mktemp("tiny-gpt2")
    tok_dir = write_tiny_bpe_tokenizer(base / "tok")
    tok = GPT2Tokenizer.from_pretrained(str(tok_dir))
    with pytest.MonkeyPatch.context() as mp:
        use_data_root(mp, fixture_data_root(base, tok_dir))
        mp.setattr(preparation, "_gpt2_tokenizer", lambda: tok)
        yield tok


def tiny(**kw):
    """Quick GPT-2 config for the tiny tokenizer: 1 epoch of <= 12 optimizer steps unless changed."""
    kw.setdefault("data_source", "local")
    kw.setdefault("max_epochs", 1)
    kw.setdefault("num_eos_lines", 0)
    kw.setdefault("batch_size", 8)
    return make_config("quick", "gpt2", kw.pop("head", "nmst"), kw.pop("eps", 1e-2), 0, **kw)


# ------------------------------------------------------------------------ real tokenizer


def test_quick_gpt2_profile_trains_with_the_real_tokenizer(tmp_path):
    if REAL_TOKENIZER_DIR is None:
        pytest.skip(NO_REAL_TOKENIZER)
    with pytest.MonkeyPatch.context() as mp:
        use_data_root(mp, fixture_data_root(tmp_path, REAL_TOKENIZER_DIR))
        config = make_config("quick", "gpt2", "nmst", 1e-2, 0, data_source="local", max_epochs=1, max_steps=6)
        data = prepare_data(config)
        run = train(config, checkpoint_dir=tmp_path / "ckpt", data=data, progress=False)
    assert len(data.vocab) == 50257 and data.vocab.eos_id == 50256
    assert data.description["vocabulary"]["size"] == 50257 and data.description["extra"]["detokenized"]
    assert data.train.num_tokens <= config.data.max_train_tokens
    model = run.model
    assert isinstance(model, GPT2LM) and model.model.config.n_embd == 32 and model.model.config.n_head == 2
    assert model.vocab_size == 50257 and model.eos_id == 50256
    assert run.optimizer_steps == 6 and len(run.step_losses) == 6 and run.history[-1]["optimizer_steps"] == 6
    assert all(math.isfinite(v) for v in run.step_losses)
    # a fresh model is near uniform over V (NMST's eos lower bound 1 - (1 - eps)^t adds a little)
    assert abs(run.step_losses[0] - math.log(50257)) < 2
    assert math.isfinite(run.val_ppl) and run.val_ppl < 50257 * 2
    assert (tmp_path / "ckpt" / f"{config.key}.safetensors").is_file()


# ---------------------------------------------------------------------------- resumption


def test_interrupted_gpt2_run_resumes_mid_epoch_to_the_same_result(tiny_env, tmp_path, interrupted_training):
    """Dropout 0.1 (random masks) and the linear schedule: an interrupted run resumed from its
    mid-epoch checkpoint equals the uninterrupted one bit for bit (step losses and perplexity)."""
    config = tiny(max_epochs=2, dropout=0.1)
    reference = train(config, checkpoint_dir=tmp_path / "ref", progress=False)
    interrupted_training(config, tmp_path / "run", "[step] epoch 2 batch 3/", checkpoint_every=2)
    ckpt = load_checkpoint(tmp_path / "run" / f"{config.key}.safetensors")
    assert (ckpt["progress"]["epoch"], ckpt["progress"]["step"]) == (1, 2)
    resumed = train(config, checkpoint_dir=tmp_path / "run", resume=True, progress=False)
    assert resumed.resumed_from == {"epoch": 1, "step": 2}
    assert resumed.step_losses == reference.step_losses
    assert resumed.val_ppl == reference.val_ppl and resumed.test_ppl == reference.test_ppl
    assert [h["val_ppl"] for h in resumed.history] == [h["val_ppl"] for h in reference.history]


def test_a_legacy_pt_checkpoint_is_still_read(tiny_env, tmp_path, interrupted_training):
    """A checkpoint in the earlier format (NMSTCKPT1: sha256 header + torch.save) named <key>.pt is
    what checkpoint_path finds when no .safetensors exists: a run resumes from it to the
    uninterrupted result, and its next checkpoint is written as .safetensors."""
    config = tiny(max_epochs=2)
    reference = train(config, checkpoint_dir=tmp_path / "ref", progress=False)
    run_dir = tmp_path / "run"
    interrupted_training(config, run_dir, "[step] epoch 2 batch 1/")
    new = run_dir / f"{config.key}.safetensors"
    payload = load_checkpoint(new)
    assert payload["progress"]["epoch"] == 1 and not payload["progress"]["finished"]
    buf = io.BytesIO()
    torch.save(payload, buf)
    body = buf.getvalue()
    legacy = run_dir / f"{config.key}.pt"
    legacy.write_bytes(b"NMSTCKPT1\n" + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    new.unlink()
    assert train_module.checkpoint_path(config, run_dir) == legacy
    resumed = train(config, checkpoint_dir=run_dir, resume=True, progress=False)
    assert resumed.resumed_from == {"epoch": 1, "step": 0}
    assert resumed.step_losses == reference.step_losses and resumed.val_ppl == reference.val_ppl
    assert new.is_file() and train_module.checkpoint_path(config, run_dir) == new


# ------------------------------------------------------------------- optimiser and schedule


def test_adamw_groups_exempt_biases_and_layernorm_from_weight_decay(tiny_env, tmp_path):
    config = tiny(max_steps=1)
    model = model_setup.build_model_for(config, 277)
    groups = model_setup.parameter_groups(model, config)
    assert [g["weight_decay"] for g in groups] == [config.training.weight_decay, 0.0] and config.training.weight_decay > 0
    decay, no_decay = groups[0]["params"], groups[1]["params"]
    assert all(p.ndim >= 2 for p in decay) and all(p.ndim < 2 for p in no_decay)
    names = {id(p): n for n, p in model.named_parameters()}
    assert any(".ln_" in names[id(p)] for p in no_decay) and any(names[id(p)].endswith(".bias") for p in no_decay)
    assert any(names[id(p)].endswith("wte.weight") for p in decay)
    every = {id(p) for p in model.parameters()}  # the tied lm_head/wte weight once
    assert sorted(map(id, decay + no_decay)) == sorted(every)
    # the run's optimizer uses them
    train(config, checkpoint_dir=tmp_path, progress=False)
    saved = load_checkpoint(tmp_path / f"{config.key}.safetensors")["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in saved] == [config.training.weight_decay, 0.0]
    assert [len(g["params"]) for g in saved] == [len(decay), len(no_decay)]
    # without no_decay_bias_norm: one group, every parameter decayed (Chapter 6)
    rnn = make_config("quick", "lstm", "va")
    one = model_setup.parameter_groups(model_setup.build_model_for(rnn, 50), rnn)
    assert len(one) == 1 and one[0]["weight_decay"] == rnn.training.weight_decay


def test_linear_schedule_decays_per_optimizer_step(tiny_env, tmp_path):
    assert [model_setup.linear_lr(1e-3, s, 4) for s in range(6)] == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4, 0, 0])
    with pytest.raises(ValueError, match="step"):
        model_setup.linear_lr(1e-3, -1, 4)
    config = tiny(lr_decay_steps=10, max_steps=5)
    seen = []
    original = torch.optim.AdamW.step

    def spy(self, *a, **k):
        seen.append([g["lr"] for g in self.param_groups])
        return original(self, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.optim.AdamW, "step", spy)
        run = train(config, checkpoint_dir=tmp_path, progress=False)
    expected = [config.training.lr * (1 - s / 10) for s in range(5)]
    assert [lrs[0] for lrs in seen] == pytest.approx(expected) and all(len(set(lrs)) == 1 for lrs in seen)
    assert run.history[-1]["lr"] == pytest.approx(expected[-1])
    assert run.optimizer_steps == 5 and run.epochs_run == 1  # max_steps ended the epoch early
    # default horizon: max_epochs x steps per epoch, so the lr reaches 0 at the end of the last epoch
    full = tiny(max_epochs=2)
    horizon = train_module._decay_horizon(full, prepare_data(full))
    batches = D.bucket_batches(prepare_data(full).train.lengths, full.training.batch_size, max_tokens=full.training.max_batch_tokens,
                               shuffle=True, generator=D.epoch_generator(0, 0))
    assert horizon == 2 * len(batches)


def test_max_steps_stops_training_and_finishes_the_run(tiny_env, tmp_path):
    config = tiny(max_epochs=3, max_steps=4)
    run = train(config, checkpoint_dir=tmp_path, progress=False)
    assert run.optimizer_steps == 4 and len(run.history) == 1 and not run.stopped_early
    assert load_checkpoint(tmp_path / f"{config.key}.safetensors")["progress"]["finished"]
    again = train(config, checkpoint_dir=tmp_path, resume=True, progress=False)  # finished: nothing trained
    assert again.step_losses == run.step_losses and again.val_ppl == run.val_ppl


def test_grad_accum_2_with_half_batches_equals_one_full_batch(tiny_env, tmp_path):
    """grad_accum = 2 runs each batch as two row halves whose summed losses are divided by the
    whole batch's scored tokens: the same updates as one batch, up to floating-point order."""
    norms = {1: [], 2: []}
    clip = torch.nn.utils.clip_grad_norm_
    runs = {}
    for accum in (1, 2):
        with pytest.MonkeyPatch.context() as mp:  # the gradient norm of every step, before clipping
            mp.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, c, acc=accum: norms[acc].append(
                float(clip(params, c))))
            runs[accum] = train(tiny(max_steps=6, grad_accum=accum), checkpoint_dir=tmp_path / str(accum),
                                progress=False)
    whole, halves = runs[1], runs[2]
    diff = max(abs(a - b) for a, b in zip(whole.step_losses, halves.step_losses))
    assert len(halves.step_losses) == 6 and diff < 1e-5, diff
    # the gradients themselves agree (AdamW would hide a constant factor in the losses)
    assert len(norms[1]) == len(norms[2]) == 6 and norms[2] == pytest.approx(norms[1], rel=1e-4)
    assert whole.step_losses[0] != whole.step_losses[-1]  # precondition: it trained
    for (name, p), q in zip(whole.model.named_parameters(), halves.model.parameters()):
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-6), name
    assert halves.val_ppl == pytest.approx(whole.val_ppl, rel=1e-4)


# ------------------------------------------------------------------------------- configs


def test_gpt2_profiles_follow_the_contract():
    quick = make_config("quick", "gpt2", "nmst", 5e-4)
    assert (quick.model.hidden, quick.model.layers, quick.gpt2.attn_heads, quick.model.dropout) == (32, 2, 2, 0.0)
    assert (quick.training.lr_schedule, quick.training.no_decay_bias_norm, quick.data.vocab_cap) == ("linear", True, None)
    cpu = make_config("cpu", "gpt2", "nmst", 5e-4)
    assert (cpu.model.hidden, cpu.model.layers, cpu.gpt2.attn_heads, cpu.gpt2.pretrained, cpu.data.dataset) == (128, 2, 4, None, "wikitext-2")
    assert (cpu.training.lr, cpu.training.betas, cpu.training.weight_decay, cpu.training.clip, cpu.training.max_batch_tokens) == (1e-3, (0.9, 0.99), 0.01, 1.0, 2048)
    assert (cpu.decoding.decode_max_len, cpu.decoding.num_decode_contexts, cpu.decoding.num_decode_contexts_nongreedy) == (1000, 128, 64)
    assert "beam-4" in cpu.decoding.decoders and "nucleus-0.2" in cpu.decoding.decoders  # featured eps 5e-4
    assert make_config("cpu", "gpt2", "st", 2.5e-3).decoding.decoders == ("greedy",)
    assert "consistent-top-2" in make_config("cpu", "gpt2", "va").decoding.decoders
    paper = make_config("paper", "gpt2", "nmst", 1e-5)
    assert (paper.gpt2.pretrained, paper.data.dataset, paper.training.lr, paper.training.lr_decay_steps, paper.training.max_steps) == (
        "gpt2", "wikitext-103", 5e-5, 500_000, 300_000)
    assert (paper.training.max_batch_tokens, paper.training.grad_accum, paper.decoding.decode_max_len, paper.gpt2.attn_heads) == (1024, 1, 1000, None)
    assert "top-4" in paper.decoding.decoders and default_decoders("paper", "nmst", 1e-4, arch="gpt2") == ("greedy",)
    assert GPT2_CPU_EPS == (1e-4, 5e-4, 2.5e-3)
    assert quick.key == "quick-gpt2-nmst-eps5e-4-seed0"


@pytest.mark.parametrize("changes,match", [
    (dict(arch="gpt3"), "arch"),
    (dict(arch="lstm", dataset="wikitext-103"), "wikitext-103"),
    (dict(dataset="ptb"), "dataset"),
    (dict(arch="lstm", pretrained="gpt2"), "pretrained"),
    (dict(pretrained=""), "pretrained"),
    (dict(attn_heads=None), "attn_heads"),
    (dict(attn_heads=3), "multiple of attn_heads"),
    (dict(pretrained="gpt2"), "attn_heads applies"),
    (dict(arch="lstm"), "attn_heads applies"),
    (dict(vocab_cap=5000), "vocab_cap"),
    (dict(lr_schedule="cosine"), "lr_schedule"),
    (dict(lr_schedule="plateau", lr_decay_steps=10), "lr_decay_steps"),
    (dict(lr_decay_steps=0), "lr_decay_steps"),
    (dict(max_steps=0), "max_steps"),
    (dict(grad_accum=0), "grad_accum"),
    (dict(grad_accum=1.5), "grad_accum"),
    (dict(no_decay_bias_norm="yes"), "no_decay_bias_norm"),
    (dict(decode_max_len=1020), "1024"),
])
def test_bad_gpt2_configs_say_what_is_allowed(changes, match):
    base = make_config("quick", "gpt2", "va")
    with pytest.raises((ValueError, TypeError), match=match):
        validate_config(ExperimentConfig.from_flat(**{**base.flat_dict(), **changes}))


def test_new_fields_leave_chapter_6_and_8_hashes_unchanged():
    """Every new field is left out of to_dict at its default: each committed Chapter 6 result
    (30 cpu runs) is still CURRENT under its stored hash, and so are Chapter 8's."""
    new = {"dataset", "pretrained", "attn_heads", "lr_schedule", "lr_decay_steps", "max_steps", "grad_accum",
           "no_decay_bias_norm"}
    assert not new & set(make_config("cpu", "lstm", "nmst", 5e-4).to_dict())
    assert new - {"pretrained", "dataset", "lr_decay_steps", "max_steps", "grad_accum"} <= set(
        make_config("cpu", "gpt2", "va").to_dict())
    from nmst_lib.experiments.results import published_results_dir
    from nmst_lib.experiments.temperature_suite import baseline_configs

    configs = [c for c in suite_configs("cpu") + baseline_configs("cpu")
               if (published_results_dir() / "wikitext2" / f"{c.key}.json").is_file()]
    assert len(configs) >= 7
    for c in configs:
        stored = json.loads((published_results_dir() / "wikitext2" / f"{c.key}.json").read_text())
        assert stored["config_hash"] == config_hash(c), c.key
        assert load_result(c).status == CURRENT
    from nmst_lib.experiments.sparse import load_sparse_results

    # Chapter 8's converged models land one by one: every stored one is CURRENT
    assert CURRENT in {s.status for s in load_sparse_results("cpu")} <= {CURRENT, MISSING}
    # a field at a non-default value does change the hash
    base = make_config("cpu", "lstm", "va")
    assert config_hash(base.replace(grad_accum=2)) != config_hash(base)
    assert config_hash(base.replace(lr_schedule="linear")) != config_hash(base)
