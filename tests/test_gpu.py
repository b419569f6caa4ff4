"""The GPU path: mixed-precision training through the real training loop, every decoder on CUDA,
greedy decoding on CUDA equal to the CPU, and the output layers on float16 / bfloat16 inputs
(Chapter 6, 06_wikitext: the ``paper`` profile needs a GPU).

Tests marked ``needs_cuda`` run where ``torch.cuda.is_available()`` and skip with the reason
elsewhere. The half-precision checks of the heads, the model under CPU autocast, and the
precondition of the CPU/CUDA greedy comparison also run on the CPU, so part of this file always runs.

Tolerances:

* Heads on float16/bfloat16 logits are computed in float32 (``nmst_lib.heads._check_logits``),
  so they are compared with float64 on the SAME (rounded) logits at float32 accuracy:
  ``|lp - lp64| <= 1e-5 (1 + |lp64|)`` (measured on the CPU: <= 2.4e-7 for T = 400 steps, V = 64;
  ST's log(1 - p(eos)) is a cumulative sum that reaches -2,400 here, hence the relative part),
  probabilities sum to one within 1e-5 (measured: <= 3e-7), NMST keeps ``p(eos) >= f_lb(t)``.
* A model under autocast: its log-probabilities still sum to one within 1e-5 (the head is
  float32) and differ from the float32 model by less than 0.05 nats with bfloat16 logits
  (8-bit significand, relative rounding 2^-9 on logits of size ~10 is 0.02) and 0.01 with float16
  (measured on the CPU with bfloat16: 1.3e-3).
* Greedy on CUDA vs CPU in float32 (TF32 off): the reference models are chosen so that at every
  step the best token beats the second by >= 1e-3 nats and greedy is unchanged when every weight
  is perturbed by a relative 1e-5 (both checked on the CPU here), while float32 results on two
  devices differ by rounding (~1e-7 relative) only: tokens must be identical and scores (sums
  of <= 40 log-probabilities) equal within 1e-3.
"""

import copy
import importlib
import math

import pytest
import torch

from nmst_lib import heads as H
from nmst_lib.decoding import decode
from nmst_lib.experiments import (
    load_checkpoint,
    make_config,
    model_setup,
    prepare_data,
    train,
)
from nmst_lib.experiments.config import ALL_DECODERS, VA_CONSISTENT_DECODERS
from nmst_lib.experiments.evaluation import evaluate_perplexity
from nmst_lib.experiments.runs import decode_at_scale
from nmst_lib.heads import head_from_name
from nmst_lib.models import RecurrentLM, build_model

train_module = importlib.import_module("nmst_lib.experiments.trainer")

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(
    not CUDA, reason="needs a CUDA GPU: torch.cuda.is_available() is False on this machine "
                     "(the CPU variants of the half-precision head checks run instead)")
BF16_CUDA = CUDA and torch.cuda.is_bf16_supported()
HALF = [torch.bfloat16, torch.float16]
HEAD_CASES = [("va", None), ("st", 1e-4), ("nmst", 1e-4), ("st", 1e-2), ("nmst", 1e-2)]


@pytest.fixture(autouse=True)
def _one_thread_no_tf32():
    """One CPU thread (shared machine); full float32 matmuls and cuDNN on CUDA (TF32 keeps 10 bits)."""
    before = (torch.get_num_threads(), torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.set_num_threads(before[0])
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before[1], before[2]


def cuda_dtypes():
    """The half dtypes this GPU runs (bfloat16 needs compute capability >= 8.0)."""
    return [torch.float16] + ([torch.bfloat16] if BF16_CUDA else [])


# ------------------------------------------------------------------ heads on half precision


def _functional(name, eps, eos_id):
    if name == "va":
        return H.vanilla_log_probs
    if name == "st":
        return lambda z: H.st_log_probs(z, eos_id, eps)
    return lambda z: H.nmst_log_probs(z, eos_id, eps)


def check_heads_on_half_logits(dtype, device):
    """Every head (functional API, module forward with a context mask, module step) on logits of
    ``dtype``: float32 output, finite, sums to one, float32-accurate against float64 on the same
    rounded logits, NMST's lower bound kept, finite gradients back to the half logits."""
    B, T, V = 3, 400, 64
    g = torch.Generator().manual_seed(0)
    z64 = 4 * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    z64[..., V - 1] -= 6.0  # a small eos logit: ST/NMST's lower bound carries p(eos) late in the sequence
    z = z64.to(device=device, dtype=dtype)
    exact = z.double()  # the same rounded inputs, in float64
    steps = torch.arange(1, T + 1, device=device, dtype=torch.float64)
    for name, eps in HEAD_CASES:
        f = _functional(name, eps, V - 1)
        lp, ref = f(z), f(exact)
        assert lp.dtype == torch.float32 and lp.device == z.device, (name, lp.dtype)
        assert bool(torch.isfinite(lp).all()), name
        total = lp.double().exp().sum(-1)
        assert float((total - 1).abs().max()) <= 1e-5, (name, eps)
        assert bool(((lp.double() - ref).abs() <= 1e-5 * (1 + ref.abs())).all()), (name, eps)
        if name == "nmst":
            bound = H.eos_lower_bound(steps, eps)
            assert bool((lp[..., V - 1].double().exp() >= bound * (1 - 1e-6)).all()), eps
        # gradients reach the half-precision logits, finite, in their dtype
        zg = z.detach().clone().requires_grad_()
        targets = torch.randint(0, V, (B, T), generator=g).to(device)
        (-f(zg).gather(-1, targets[..., None]).sum()).backward()
        assert zg.grad.dtype == dtype and bool(torch.isfinite(zg.grad).all()), name
        # the modules: forward with two context positions, then step by step
        head = head_from_name(name, eps)
        mask = (torch.arange(T, device=device) < 2).expand(B, -1)
        full = head(z, mask)
        assert full.dtype == torch.float32 and bool(torch.isfinite(full[~mask]).all())
        torch.testing.assert_close(full.double(), head(exact, mask), atol=1e-4, rtol=1e-5)
        state = head.initial_step_state(B, device)
        for t in range(2, 12):
            out, state = head.step(z[:, t], state)
            assert out.dtype == torch.float32
            torch.testing.assert_close(out, full[:, t], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("dtype", HALF, ids=["bfloat16", "float16"])
def test_heads_on_half_precision_logits_cpu(dtype):
    check_heads_on_half_logits(dtype, "cpu")


@needs_cuda
@pytest.mark.parametrize("dtype", HALF, ids=["bfloat16", "float16"])
def test_heads_on_half_precision_logits_cuda(dtype):
    if dtype is torch.bfloat16 and not BF16_CUDA:
        pytest.skip("this GPU has no bfloat16 support (torch.cuda.is_bf16_supported() is False)")
    check_heads_on_half_logits(dtype, "cuda")


def check_fused_nll_on(device):
    """The fused ST / NMST / vanilla NLL (nmst_lib.fused) on ``device`` against the float64 CPU
    values and gradients, with eos-dominated rows (eos logit 1e4 and +40, which the masked
    log-softmax never reads)."""
    g = torch.Generator().manual_seed(11)
    B, T, V = 3, 12, 500
    z = 3 * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    z[0, 2, V - 1] = 1e4
    z[1, 5, V - 1] = z[1, 5, :V - 1].logsumexp(-1) + 40.0
    y = torch.randint(0, V, (B, T), generator=g)
    y[2, 3] = V - 1
    mask = (torch.arange(T) < 2).expand(B, -1)
    for name, eps in HEAD_CASES:
        head = head_from_name(name, eps)
        ref_x = z.clone().requires_grad_()
        ref = head.token_losses(ref_x, y, mask)
        (ref_grad,) = torch.autograd.grad(ref.sum(), ref_x)
        x = z.float().to(device).requires_grad_()
        losses = head.token_losses(x, y.to(device), mask.to(device))
        (grad,) = torch.autograd.grad(losses.sum(), x)
        assert losses.device.type == device and bool(torch.isfinite(grad).all()), name
        torch.testing.assert_close(losses.double().cpu(), ref, rtol=2e-6, atol=2e-5)
        torch.testing.assert_close(grad.double().cpu(), ref_grad, rtol=1e-5, atol=1e-6)


def test_fused_nll_cpu():
    check_fused_nll_on("cpu")


@needs_cuda
def test_fused_nll_cuda():
    check_fused_nll_on("cuda")


def check_model_under_autocast(device, dtype, atol):
    """A RecurrentLM under autocast: half-precision logits, float32 log-probabilities that sum to one,
    close to the float32 model; the loss's gradients are finite."""
    V = 64
    for arch in ("rnn", "lstm"):
        torch.manual_seed(0)
        model = build_model(arch, V, hidden=32, layers=2, dropout=0.0, head=head_from_name("nmst", 1e-2))
        model = model.to(device).eval()
        x = torch.randint(0, V - 1, (4, 30), generator=torch.Generator().manual_seed(1)).to(device)
        mask = (torch.arange(30, device=device) < 3).expand(4, -1)
        with torch.no_grad():
            ref = model(x, mask)
            with torch.autocast(torch.device(device).type, dtype=dtype):
                logits = model.logits(x)
                lp = model(x, mask)
        assert logits.dtype == dtype, (arch, logits.dtype)  # autocast is really on ...
        assert lp.dtype == torch.float32  # ... and the head is not
        assert float((lp.double().exp().sum(-1) - 1).abs().max()) <= 1e-5
        assert float((lp - ref)[~mask].abs().max()) <= atol, arch
        model.train()
        targets = x.roll(-1, dims=1)  # never eos (ids < V - 1): finite log-probs at every position
        with torch.autocast(torch.device(device).type, dtype=dtype):
            loss = -model(x, mask).gather(-1, targets[..., None]).squeeze(-1)[~mask].mean()
        loss.backward()
        assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)


def test_model_under_cpu_autocast_keeps_a_float32_head():
    check_model_under_autocast("cpu", torch.bfloat16, atol=0.05)


@needs_cuda
@pytest.mark.parametrize("dtype", HALF, ids=["bfloat16", "float16"])
def test_model_under_cuda_autocast_keeps_a_float32_head(dtype):
    if dtype is torch.bfloat16 and not BF16_CUDA:
        pytest.skip("this GPU has no bfloat16 support (torch.cuda.is_bf16_supported() is False)")
    check_model_under_autocast("cuda", dtype, atol=0.05 if dtype is torch.bfloat16 else 0.01)


def test_autocast_dtype_policy():
    assert model_setup.autocast_dtype(torch.device("cpu")) is None  # CPU runs stay float32
    if CUDA:
        want = torch.bfloat16 if BF16_CUDA else torch.float16
        assert model_setup.autocast_dtype(torch.device("cuda")) == want


# --------------------------------------------------------------------- training on the GPU


@needs_cuda
@pytest.mark.parametrize("amp", ["bfloat16", "float16"])
def test_quick_training_on_cuda_under_autocast(amp, fixture_data_env, tmp_path, monkeypatch):
    """The real training loop (quick profile on the fixture corpus, lr 1e-2 so that two epochs
    learn a lot) on CUDA under autocast, with the GradScaler, whose state is checkpointed and
    restored on resume."""
    dtype = getattr(torch, amp)
    if dtype is torch.bfloat16 and not BF16_CUDA:
        pytest.skip("this GPU has no bfloat16 support (torch.cuda.is_bf16_supported() is False)")
    def forced(device):
        return dtype if torch.device(device).type == "cuda" else None

    # the trainer picks its GradScaler by it, model_setup's autocast context its dtype
    monkeypatch.setattr(train_module, "autocast_dtype", forced)
    monkeypatch.setattr(model_setup, "autocast_dtype", forced)
    seen, rnn_dtypes = [], set()
    logits = RecurrentLM.logits

    def spy(self, inputs):
        if not getattr(self.rnn, "_dtype_spy", False):  # a forward hook: no extra computation, no RNG use
            self.rnn.register_forward_hook(lambda module, args, out: rnn_dtypes.add(out[0].dtype))
            self.rnn._dtype_spy = True
        out = logits(self, inputs)
        seen.append((out.device.type, out.dtype))
        return out

    monkeypatch.setattr(RecurrentLM, "logits", spy)
    config = make_config("quick", "lstm", "nmst", 1e-2, 0, lr=1e-2)
    data = prepare_data(config)
    model_setup.seed_everything(config.seed)
    untrained = evaluate_perplexity(model_setup.build_model_for(config, len(data.vocab)), data.valid)

    run = train(config, checkpoint_dir=tmp_path / "gpu", data=data, device="cuda", progress=False)
    assert run.device.startswith("cuda") and next(run.model.parameters()).is_cuda
    assert ("cuda", dtype) in seen  # the forward pass ran under autocast
    assert all(math.isfinite(h["val_ppl"]) and math.isfinite(h["train_loss"]) for h in run.history)
    assert all(bool(torch.isfinite(p).all()) for p in run.model.parameters())
    assert run.val_ppl < 0.5 * untrained  # it learned (CPU: 731 -> 60 for this config)
    # cuDNN's LSTM runs in float16 under autocast even when the rest is bfloat16 (ATen's autocast
    # wrapper of _cudnn_rnn), hence a GradScaler for both dtypes
    assert rnn_dtypes <= {torch.float16, dtype, torch.float32}, rnn_dtypes
    ckpt = load_checkpoint(tmp_path / "gpu" / f"{config.key}.safetensors")
    assert ckpt["scaler"] is not None and 0 < float(ckpt["scaler"]["scale"]) < math.inf
    resumed = train(config, checkpoint_dir=tmp_path / "gpu", data=data, device="cuda", resume=True, progress=False)
    assert resumed.resumed_from is not None and resumed.val_ppl == pytest.approx(run.val_ppl, rel=1e-4)

    cpu = train(config, checkpoint_dir=tmp_path / "cpu", data=data, device="cpu", progress=False)
    # same init and data order; mixed precision changes rounding only: same validation perplexity
    # within a factor 1.5 (a broken GPU path would not learn, or diverge)
    assert abs(math.log(run.val_ppl) - math.log(cpu.val_ppl)) < math.log(1.5), (run.val_ppl, cpu.val_ppl)


# --------------------------------------------------------------------- decoding on the GPU

V = 12
GREEDY_REFERENCES = [  # (arch, head, eps, eos bias): greedy lengths differ per row (checked below)
    ("rnn", "va", None, 0.0),
    ("rnn", "st", 0.02, 1.0),
    ("lstm", "nmst", 0.02, -1.0),
]


def reference_model(arch, head, eps, eos_bias, seed=0):
    torch.manual_seed(seed)
    model = build_model(arch, V, hidden=16, layers=2, dropout=0.0, head=head_from_name(head, eps))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
        model.output.bias[V - 1] = eos_bias
    return model.eval()


def reference_contexts(n=8, k=4):
    return torch.randint(0, V - 1, (n, k), generator=torch.Generator().manual_seed(1))


def greedy_margins(model, contexts, generation) -> float:
    """The smallest gap between the best and the second-best log-probability along the greedy path."""
    k, gaps = contexts.shape[1], []
    for i in range(contexts.shape[0]):
        n = int(generation.lengths[i])
        seq = torch.cat([contexts[i], generation.tokens[i, :n]])[None].to(model.device)
        mask = (torch.arange(seq.shape[1] - 1, device=model.device) < k - 1)[None]
        with torch.no_grad():
            top2 = model(seq[:, :-1], mask)[0, k - 1:].topk(2, dim=-1).values
        gaps.append(float((top2[:, 0] - top2[:, 1]).min()))
    return min(gaps)


@pytest.mark.parametrize("arch,head,eps,bias", GREEDY_REFERENCES)
def test_greedy_references_have_clear_margins_and_are_stable(arch, head, eps, bias):
    """The precondition of the CPU/CUDA greedy comparison, checked on the CPU."""
    model, ctx = reference_model(arch, head, eps, bias), reference_contexts()
    g = decode(model, ctx, "greedy", max_len=40)
    assert len(set(g.lengths.tolist())) > 1  # rows finish at different steps (select is exercised)
    assert greedy_margins(model, ctx, g) >= 1e-3
    for trial in range(3):
        shaken = copy.deepcopy(model)
        gen = torch.Generator().manual_seed(trial)
        with torch.no_grad():
            for p in shaken.parameters():
                p.mul_(1 + 1e-5 * torch.randn(p.shape, generator=gen))
        assert torch.equal(decode(shaken, ctx, "greedy", max_len=40).tokens, g.tokens)


@needs_cuda
@pytest.mark.parametrize("arch,head,eps,bias", GREEDY_REFERENCES)
def test_greedy_on_cuda_equals_greedy_on_cpu(arch, head, eps, bias):
    cpu_model, ctx = reference_model(arch, head, eps, bias), reference_contexts()
    on_cpu = decode(cpu_model, ctx, "greedy", max_len=40)
    on_gpu = decode(copy.deepcopy(cpu_model).cuda(), ctx.cuda(), "greedy", max_len=40)
    assert torch.equal(on_gpu.tokens.cpu(), on_cpu.tokens)
    assert torch.equal(on_gpu.lengths.cpu(), on_cpu.lengths)
    assert torch.equal(on_gpu.terminated.cpu(), on_cpu.terminated)
    torch.testing.assert_close(on_gpu.scores.cpu(), on_cpu.scores, atol=1e-3, rtol=0)


@needs_cuda
@pytest.mark.parametrize("decoder", ALL_DECODERS + VA_CONSISTENT_DECODERS)
@pytest.mark.parametrize("arch,head,eps", [("lstm", "nmst", 0.05), ("rnn", "va", None)])
def test_every_decoder_runs_on_cuda(decoder, arch, head, eps):
    """decode_at_scale (the experiments' decoding, in chunks, with a generator on the device)
    for every decoder of the experiments, on CUDA: sane curves, reproducible with the same seed."""
    model = reference_model(arch, head, eps, -1.0).cuda()
    ctx = torch.randint(0, V - 1, (20, 4), generator=torch.Generator().manual_seed(2))
    res = decode_at_scale(model, ctx, decoder, max_len=30, seed=0, batch_size=8)
    n = res["num_contexts"]
    assert n == 20 and len(res["lengths"]) == len(res["terminated"]) == n
    assert all(1 <= length <= 30 for length in res["lengths"])
    assert all(0.0 <= r <= 1.0 for r in res["rnt"])
    assert all(a >= b for a, b in zip(res["rnt"], res["rnt"][1:]))
    assert res["not_terminated"] == sum(not t for t in res["terminated"])
    assert res["peak_memory"]["mib"] > 0
    again = decode_at_scale(model, ctx, decoder, max_len=30, seed=0, batch_size=8)
    assert again["lengths"] == res["lengths"] and again["rnt"] == res["rnt"]


@needs_cuda
def test_sampling_on_cuda_draws_from_a_generator_on_the_device():
    model = reference_model("lstm", "nmst", 0.05, -1.0).cuda()
    ctx = reference_contexts().cuda()
    runs = [decode(model, ctx, "nucleus", p=0.5, max_len=30, generator=torch.Generator(device="cuda").manual_seed(7))
            for _ in range(2)]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert bool(runs[0].terminated.all())  # NMST with eps = 0.05 ends well within 30 steps


def gpt2_reference():
    """A tiny random GPT-2 (vocabulary 50, eos 49) with a vanilla head whose greedy path has clear margins."""
    pytest.importorskip("transformers", reason="GPT-2 needs transformers (pip install -e .[data])")
    from nmst_lib.models import GPT2LM

    torch.manual_seed(0)
    model = GPT2LM.from_config(head_from_name("va"), vocab_size=50, eos_token_id=49, bos_token_id=49,
                               n_layer=2, n_embd=32, n_head=2, n_positions=64)
    with torch.no_grad():
        model.model.transformer.wte.weight.mul_(3.0)  # larger (tied) logits: margins of ~0.4 nats, not ~4e-4
    return model.eval(), torch.randint(0, 49, (6, 5), generator=torch.Generator().manual_seed(1))


def test_gpt2_greedy_reference_has_clear_margins():
    """The precondition of the CPU/CUDA comparison of GPT-2's greedy decoding, checked on the CPU."""
    model, ctx = gpt2_reference()
    assert greedy_margins(model, ctx, decode(model, ctx, "greedy", max_len=20)) >= 1e-3


@needs_cuda
def test_gpt2_decodes_on_cuda_like_on_the_cpu():
    """GPT2LM on CUDA: greedy equal to the CPU (clear margins, see above); beam search, which
    reorders the key/value cache on the device with select, runs (its ranking of near-equal
    expansions may differ between devices, so only its output's form is compared)."""
    model, ctx = gpt2_reference()
    gpu_model = copy.deepcopy(model).cuda()
    on_cpu = decode(model, ctx, "greedy", max_len=20)
    on_gpu = decode(gpu_model, ctx.cuda(), "greedy", max_len=20)
    assert torch.equal(on_gpu.tokens.cpu(), on_cpu.tokens)
    torch.testing.assert_close(on_gpu.scores.cpu(), on_cpu.scores, atol=1e-3, rtol=0)
    beam_cpu = decode(model, ctx, "beam", beam_size=3, max_len=20)
    beam_gpu = decode(gpu_model, ctx.cuda(), "beam", beam_size=3, max_len=20)
    assert beam_gpu.tokens.shape == beam_cpu.tokens.shape
    assert bool(torch.isfinite(beam_gpu.scores).all()) and bool((beam_gpu.scores <= 0).all())
    assert bool(((beam_gpu.tokens >= 0) & (beam_gpu.tokens < 50) | (beam_gpu.tokens == -1)).all())
    assert bool((beam_gpu.lengths >= 1).all()) and bool((beam_gpu.lengths <= 20).all())
