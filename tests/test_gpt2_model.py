"""GPT2LM for Chapter 7 (07_gpt2): save_pretrained / from_pretrained round trips (output layer
included), fast clear failure without the hub, the uncached decoding baseline, and the memory of
the training loss at GPT-2's vocabulary (how many [B, T, V] float32 tensors autograd keeps and
the backward allocates)."""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nmst_lib import data as D
from nmst_lib.decoding import decode
from nmst_lib.heads import head_from_name, nll_token_losses

transformers = pytest.importorskip("transformers")
from nmst_lib.models import GPT2LM, HEAD_FILE, GPT2Unavailable, UncachedGPT2  # noqa: E402

V = 50257
HEADS = [("va", None), ("st", 1e-3), ("nmst", 1e-3)]


def small_gpt2(head="va", eps=None, seed=0, **kw):
    torch.manual_seed(seed)
    config = dict(n_layer=2, n_embd=32, n_head=2, n_positions=128, vocab_size=V, eos_token_id=V - 1,
                  bos_token_id=V - 1, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config.update(kw)
    model = GPT2LM.from_config(head_from_name(head, eps), **config)
    with torch.no_grad():  # a louder eos embedding, so that p(eos) matters
        model.model.transformer.wte.weight[-1] *= 4.0
    return model


def a_batch(B=3, T=30, k=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V - 1, (B, T), generator=g)
    lengths = torch.tensor([T, T - 5, k + 3][:B])
    tokens[torch.arange(B), lengths - 1] = V - 1  # eos ends each sequence
    tokens = torch.where(torch.arange(T) < lengths[:, None], tokens, V - 1)  # padding
    return D.Batch(tokens, lengths, k)


# ------------------------------------------------------------------------------ save / load


@pytest.mark.parametrize("head,eps", HEADS + [("nmst", 2.5e-3)])
def test_save_pretrained_round_trip_gives_identical_log_probs_and_head(tmp_path, head, eps):
    model = small_gpt2(head, eps).eval()
    folder = model.save_pretrained(tmp_path / "saved")
    assert {"config.json", "model.safetensors", HEAD_FILE} <= {p.name for p in folder.iterdir()}
    loaded = GPT2LM.from_pretrained(folder).eval()
    assert type(loaded.head) is type(model.head) and getattr(loaded.head, "eps", None) == eps
    batch = a_batch()
    with torch.no_grad():
        assert torch.equal(model(batch.inputs, batch.context_mask), loaded(batch.inputs, batch.context_mask))
    assert loaded.model.lm_head.weight.data_ptr() == loaded.model.transformer.wte.weight.data_ptr()  # still tied
    same = GPT2LM.from_pretrained(str(folder)).eval()  # a string path works too
    assert type(same.head) is type(model.head)


def test_from_pretrained_folder_with_an_explicit_head_uses_that_head(tmp_path):
    folder = small_gpt2("va").save_pretrained(tmp_path / "va")
    loaded = GPT2LM.from_pretrained(folder, head=head_from_name("nmst", 1e-4))
    assert loaded.head.name == "NMST" and loaded.head.eps == 1e-4


def test_from_pretrained_hub_name_without_the_hub_fails_within_seconds_saying_what_to_do(no_data_env):
    for offline_flag in (False, True):
        if offline_flag:
            no_data_env.setenv("HF_HUB_OFFLINE", "1")
        start = time.perf_counter()
        with pytest.raises(GPT2Unavailable) as err:
            GPT2LM.from_pretrained("gpt2", hub_timeout=2.0)
        assert time.perf_counter() - start < 5
        message = str(err.value)
        assert "not reachable" in message and "save_pretrained" in message and "from_config" in message


def test_from_pretrained_rejects_folders_that_are_not_gpt2(tmp_path):
    with pytest.raises(GPT2Unavailable, match="config.json"):
        GPT2LM.from_pretrained(tmp_path)
    with pytest.raises(GPT2Unavailable, match="config.json"):
        GPT2LM.from_pretrained("./no-such-folder")
    folder = small_gpt2("va").save_pretrained(tmp_path / "bad-head")
    (folder / HEAD_FILE).write_text('{"name": "nmst"}')  # NMST without eps
    with pytest.raises(ValueError, match="does not describe an output layer"):
        GPT2LM.from_pretrained(folder)


# ------------------------------------------------------------------------------ uncached decoding


@pytest.mark.parametrize("head,eps", HEADS)
def test_uncached_log_probs_equal_cached_ones_step_by_step_and_after_select(head, eps):
    model = small_gpt2(head, eps).eval()
    uncached = UncachedGPT2(model)
    assert uncached.eos_id == model.eos_id and uncached.vocab_size == V
    ctx = torch.randint(0, V - 1, (3, 10), generator=torch.Generator().manual_seed(2))
    cs, cl = model.initial_state(ctx)
    us, ul = uncached.initial_state(ctx)
    torch.testing.assert_close(ul, cl, rtol=0, atol=2e-5)
    order = torch.tensor([2, 0, 0])  # reorder and repeat rows, as beam search does
    for step in range(6):
        if step == 3:
            cs, us = model.select(cs, order), uncached.select(us, order)
            cl, ul = cl[order], ul[order]
            torch.testing.assert_close(us.head, cs.head, rtol=0, atol=2e-5)
        tokens = cl.argmax(-1)
        cs, cl = model.step(cs, tokens)
        us, ul = uncached.step(us, tokens)
        torch.testing.assert_close(ul, cl, rtol=0, atol=2e-5)
        torch.testing.assert_close(us.head, cs.head, rtol=0, atol=2e-5)
    assert us.tokens.shape == (3, 16)


def test_select_with_the_identity_index_keeps_the_cache_without_copying_and_a_reorder_still_copies():
    model = small_gpt2("nmst", 1e-2).eval()
    ctx = torch.randint(0, V - 1, (3, 10), generator=torch.Generator().manual_seed(7))
    state, _ = model.initial_state(ctx)
    same = model.select(state, torch.arange(3))
    assert same is state  # no copy of the keys and values
    moved = model.select(state, torch.tensor([1, 0, 2]))
    assert moved is not state
    keys = state.cache.layers[0].keys
    assert torch.equal(moved.cache.layers[0].keys, keys[torch.tensor([1, 0, 2])])
    fewer = model.select(state, torch.arange(2))  # dropping rows is not the identity
    assert fewer.head.shape[0] == 2 and fewer.cache.layers[0].keys.shape[0] == 2


def test_uncached_greedy_and_beam_decodes_equal_the_cached_ones():
    model = small_gpt2("nmst", 1e-2).eval()
    ctx = torch.randint(0, V - 1, (4, 10), generator=torch.Generator().manual_seed(5))
    for method, kw in (("greedy", {}), ("beam", {"beam_size": 2})):
        cached = decode(model, ctx, method, max_len=12, **kw)
        plain = decode(UncachedGPT2(model), ctx, method, max_len=12, **kw)
        assert torch.equal(cached.tokens, plain.tokens), method


def test_uncached_refuses_training_mode_and_positions_past_the_limit():
    model = small_gpt2("va", n_positions=16)
    with pytest.raises(RuntimeError, match="eval"):
        UncachedGPT2(model).initial_state(torch.zeros(1, 4, dtype=torch.long))
    model.eval()
    with pytest.raises(ValueError, match="positions"):
        decode(UncachedGPT2(model), torch.zeros(1, 10, dtype=torch.long), "greedy", max_len=20)
    with pytest.raises(TypeError, match="GPT2LM"):
        UncachedGPT2(torch.nn.Linear(2, 2))


# ------------------------------------------------------------------------------ memory


def btv_saved_for_backward(model, batch) -> list[tuple]:
    """Distinct [B, T, V]-sized tensors autograd saves during ``model.token_loss(batch)``."""
    size = batch.inputs.numel() * V
    saved: dict[int, tuple] = {}

    def pack(t):
        if t.numel() >= size:
            saved[t.untyped_storage().data_ptr()] = (tuple(t.shape), t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        total, _ = model.token_loss(batch)
    return list(saved.values()), total


class NewBigTensors(TorchDispatchMode):
    """Counts op outputs of at least ``size`` elements that are new memory (not an input's storage)."""

    def __init__(self, size):
        super().__init__()
        self.size, self.count = size, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in torch.utils._pytree.tree_leaves((args, kwargs))
                  if isinstance(a, torch.Tensor)}
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.numel() >= self.size and t.untyped_storage().data_ptr() not in inputs:
                self.count += 1
        return out


@pytest.mark.parametrize("head,eps", HEADS)
def test_token_loss_saves_exactly_one_btv_float32_tensor_per_head(head, eps):
    model = small_gpt2(head, eps).train()
    batch = a_batch()
    saved, total = btv_saved_for_backward(model, batch)
    B, T = batch.inputs.shape
    assert saved == [((B, T, V), torch.float32)], saved
    total.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def plain_token_loss(model, batch):
    """What token_loss did before: transformers' logits, then the head's loss, all by autograd
    (for the vanilla, ST and NMST heads -log p(y) gathered from their log-probabilities, since
    their own token_losses is fused too)."""
    logits = model.model(input_ids=batch.inputs, use_cache=False).logits
    if model.head.name in ("VA", "ST", "NMST"):
        log_probs = model.head(logits, batch.context_mask)
        losses = -log_probs.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    else:
        losses = model.head.token_losses(logits, batch.targets, batch.context_mask)
    return losses[batch.target_mask].sum()


@pytest.mark.parametrize("head,eps", HEADS)
def test_a_training_step_allocates_one_btv_tensor_where_plain_autograd_allocates_five(head, eps):
    model = small_gpt2(head, eps).train()
    batch = a_batch()
    size = batch.inputs.numel() * V
    counts = {}
    for name, loss_fn in (("lean", lambda: model.token_loss(batch)[0]), ("plain", lambda: plain_token_loss(model, batch))):
        with NewBigTensors(size) as forward:
            total = loss_fn()
        with NewBigTensors(size) as backward:
            total.backward()
        counts[name] = (forward.count, backward.count)
    # lean: the logits, which become the log-probabilities and then their own gradient;
    # plain: logits + log-probabilities, then a one-hot upstream gradient and fresh gradients
    assert counts["lean"] == (1, 0) and sum(counts["plain"]) >= 4, counts


@pytest.mark.parametrize("head,eps", HEADS)
def test_gpt2_token_loss_gradients_equal_the_plain_autograd_ones(head, eps):
    model = small_gpt2(head, eps).train()
    batch = a_batch()
    model.token_loss(batch)[0].backward()
    lean = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    plain_token_loss(model, batch).backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(lean[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)


@pytest.mark.parametrize("head,eps", HEADS)
def test_lean_nll_has_the_same_values_and_gradients_as_the_head(head, eps):
    torch.manual_seed(3)
    h = head_from_name(head, eps)
    z = (4 * torch.randn(3, 14, 300, dtype=torch.float64)).requires_grad_()
    y = torch.randint(0, 300, (3, 14))
    y[0, 12] = y[1, 5] = 299  # eos targets
    mask = (torch.arange(14) < 4).expand(3, -1)
    w = torch.rand(3, 14, dtype=torch.float64)
    ref = h.token_losses(z, y, mask)
    (gz_ref,) = torch.autograd.grad((ref * w).sum(), z)
    lean = nll_token_losses(h, z, y, mask)
    (gz,) = torch.autograd.grad((lean * w).sum(), z)
    assert torch.equal(lean, ref)  # forward: bit for bit
    torch.testing.assert_close(gz, gz_ref, rtol=1e-12, atol=1e-15)  # backward: the same function
    # and both are -log p(y) of the head's own log-probabilities (its forward, another code path)
    nll = -h(z.detach(), mask).gather(-1, y[..., None])[..., 0]
    torch.testing.assert_close(lean.detach()[~mask], nll[~mask], rtol=1e-12, atol=1e-12)


def test_lean_nll_refuses_a_second_backward_and_leaves_other_heads_alone():
    h = head_from_name("st", 1e-2)
    z = torch.randn(2, 5, 10, requires_grad=True)
    y = torch.randint(0, 10, (2, 5))
    loss = nll_token_losses(h, z, y).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()
    entmax = head_from_name("entmax", alpha=1.5)
    assert torch.equal(nll_token_losses(entmax, z, y), entmax.token_losses(z, y))
    with pytest.raises(TypeError, match="output layer"):
        nll_token_losses(torch.nn.Identity(), z, y)


@pytest.mark.parametrize("head,eps", HEADS + [("entmax", None), ("nmst-entmax", 1e-3)])
def test_gpt2_token_loss_values_equal_the_heads_own_loss_bit_for_bit(head, eps):
    alpha = 1.5 if "entmax" in head else None
    torch.manual_seed(0)
    model = GPT2LM.from_config(head_from_name(head, eps, alpha=alpha), n_layer=1, n_embd=16, n_head=2,
                               n_positions=64, vocab_size=V, eos_token_id=V - 1, bos_token_id=V - 1,
                               resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0).train()
    batch = a_batch()
    total, count = model.token_loss(batch)
    assert torch.equal(total, plain_token_loss(model, batch)) and int(count) == batch.num_target_tokens
    with torch.no_grad():
        assert torch.equal(model.token_loss(batch)[0], total)


def test_projected_nll_rejects_mismatched_shapes():
    from nmst_lib.heads import projected_nll_token_losses

    h = head_from_name("va")
    with pytest.raises(ValueError, match="agree on H"):
        projected_nll_token_losses(h, torch.randn(2, 3, 4), torch.randn(10, 5), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="targets"):
        projected_nll_token_losses(h, torch.randn(2, 3, 4, requires_grad=True), torch.randn(10, 4),
                                   torch.full((2, 3), 10))


def test_gpt2_token_loss_under_autocast_matches_the_plain_path():
    """Mixed precision (bfloat16 autocast on the CPU, as float16 on CUDA): the projection runs in
    the autocast dtype, the head in float32, and both paths agree."""
    model = small_gpt2("st", 1e-3).train()
    batch = a_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lean = model.token_loss(batch)[0]
        plain = plain_token_loss(model, batch)
    assert lean.dtype == torch.float32 and torch.equal(lean, plain)
    lean.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    plain.backward()
    for n, p in model.named_parameters():
        assert grads[n].dtype == p.grad.dtype == torch.float32
        torch.testing.assert_close(grads[n], p.grad, rtol=2e-2, atol=1e-4, msg=n)
