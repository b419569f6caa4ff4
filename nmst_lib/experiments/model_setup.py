"""The model and optimiser a config names, and where and how precisely they
run (Choi, Cho, Lee (2023) App. D; Chapters 6-9): the device
(:func:`default_device`), the seeds (:func:`seed_everything`), the model with
its output layer (:func:`build_model_for`: RNN/LSTM or GPT-2 of Chapter 7,
07_gpt2, with the heads of Chapters 6 and 8 and Chapter 9's contextual
temperature), AdamW's parameter groups (:func:`parameter_groups`), the linear
learning-rate schedule (:func:`linear_lr`), the mixed-precision dtype
(:func:`autocast_dtype`) and the CPU's treatment of subnormal numbers while
training (:func:`subnormals_flushed`). :func:`nmst_lib.experiments.trainer.train` sets a run
up with them; :mod:`nmst_lib.experiments.choices` builds a config's model to
time it.
"""

from __future__ import annotations

import contextlib
import random

import numpy as np
import torch

from ..heads import head_from_name
from ..models import GPT2LM, RecurrentLM, build_model
from .config import GPT2_MAX_POSITIONS, ExperimentConfig, validate_config

__all__ = [
    "autocast_dtype", "build_model_for", "default_device", "linear_lr",
    "parameter_groups", "seed_everything", "subnormals_are_flushed", "subnormals_flushed",
]


def default_device() -> torch.device:
    """CUDA when available, else CPU (same code path on both). Used to train the models of
    Chapters 6-9."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")



def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy and torch (CPU and CUDA) with ``seed``. Used to train the
    models of Chapters 6-9."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_model_for(config: ExperimentConfig, vocab_size: int) -> RecurrentLM | GPT2LM:
    """The model and output layer that ``config`` names (Choi, Cho, Lee (2023) App. D; the
    entmax heads of Chapter 8, 08_sparse, with ``config.alpha``; Chapter 9, 09_temperature: the
    base head wrapped by ``nmst_lib.temperature.contextual_head`` with the config's
    ``temperature`` section, Contextual Temperature (2020)
    eq. 5-7, when a temperature or a mixture is set).

    GPT-2 (Choi, Cho, Lee (2023) Sec. 4.2; Chapter 7, 07_gpt2): ``GPT2LM.from_pretrained(
    config.gpt2.pretrained)`` (its n_embd and n_layer must equal ``hidden`` and ``layers``, its
    vocabulary ``vocab_size``; dropout set to ``config.model.dropout``), or, with ``pretrained=None``, a
    randomly initialised GPT-2 with n_embd = ``hidden``, n_layer = ``layers``, n_head =
    ``attn_heads``, 1,024 positions, eos = bos = ``vocab_size - 1`` and every dropout
    (residual, embedding, attention) = ``config.model.dropout``."""
    config = validate_config(config)
    kwargs = {} if config.alpha is None else {"alpha": config.alpha}
    head = head_from_name(config.head, eps=config.eps, **kwargs)
    t = config.temperature
    if t is not None:  # Chapter 9 (09_temperature): a contextual temperature and/or a mixture
        from ..temperature import contextual_head

        head = contextual_head(head, config.model.hidden, vocab_size, normalisation=t.normalisation, a=t.a,
                               b=t.b, lam=t.lam, rank=t.rank, mixtures=t.mixtures,
                               loss_scaling=t.loss_scaling, detach_loss_scale=t.detach_loss_scale)
    m = config.model
    if config.arch != "gpt2":
        return build_model(config.arch, vocab_size, hidden=m.hidden, layers=m.layers, dropout=m.dropout,
                           head=head)
    if config.gpt2.pretrained is None:
        return GPT2LM.from_config(head=head, n_embd=m.hidden, n_layer=m.layers, n_head=config.gpt2.attn_heads,
                                  n_positions=GPT2_MAX_POSITIONS, vocab_size=vocab_size,
                                  bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1,
                                  resid_pdrop=m.dropout, embd_pdrop=m.dropout, attn_pdrop=m.dropout)
    model = GPT2LM.from_pretrained(config.gpt2.pretrained, head=head)
    hf = model.model.config
    if (hf.n_embd, hf.n_layer, hf.vocab_size) != (config.model.hidden, config.model.layers, vocab_size):
        raise ValueError(f"pretrained {config.gpt2.pretrained!r} has n_embd {hf.n_embd}, n_layer {hf.n_layer}, vocabulary "
                         f"{hf.vocab_size}; the config says hidden {config.model.hidden}, layers {config.model.layers} and the "
                         f"data's vocabulary has {vocab_size} ids: set hidden/layers to the model's")
    for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        setattr(hf, name, config.model.dropout)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = config.model.dropout
    return model


def parameter_groups(model: torch.nn.Module, config: ExperimentConfig) -> list[dict]:
    """AdamW parameter groups (Loshchilov & Hutter 2019; Choi, Cho, Lee (2023) App. D; Chapter 7,
    07_gpt2): one group with every parameter (weight decay ``config.training.weight_decay``) unless
    ``config.training.no_decay_bias_norm``; then two groups, ``{"params": <parameters with ndim >= 2>,
    "weight_decay": config.training.weight_decay}`` and ``{"params": <ndim < 2: biases, LayerNorm gains and
    biases>, "weight_decay": 0.0}`` (shared, e.g. tied, parameters counted once). Each group also
    has a ``"name"``."""
    config = validate_config(config)
    if not config.training.no_decay_bias_norm:
        return [{"params": list(model.parameters()), "weight_decay": config.training.weight_decay, "name": "all"}]
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": config.training.weight_decay, "name": "decay (ndim >= 2)"},
            {"params": no_decay, "weight_decay": 0.0, "name": "no decay (biases, LayerNorm)"}]


def linear_lr(base_lr: float, step: int, decay_steps: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based) under linear decay:
    ``base_lr * max(0, 1 - step / decay_steps)`` (Choi, Cho, Lee (2023) App. D's linear schedule,
    without warm-up; Chapter 7, 07_gpt2)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    from .._validation import check_positive_int

    decay_steps = check_positive_int(decay_steps, "decay_steps")
    return base_lr * max(0.0, 1.0 - step / decay_steps)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The mixed-precision dtype of training and evaluation on ``device``: bfloat16 on a CUDA
    device that supports it, else float16; None on the CPU (float32 throughout). The output
    layer runs in float32 either way (:class:`nmst_lib.models.RecurrentLM`; the heads upcast
    half-precision logits). Whenever it is not None, :func:`~nmst_lib.experiments.trainer.train` scales the loss with a
    ``GradScaler``: float16 gradients underflow without it, and cuDNN RNN/LSTM layers run in
    float16 under CUDA autocast whatever its dtype (ATen's autocast wrapper of ``_cudnn_rnn``
    casts to float16), so bfloat16 runs of these models need it too. Used to train and evaluate the
    models of Chapters 6-9."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    with torch.cuda.device(device):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def _autocast(device: torch.device):
    """Autocast to :func:`autocast_dtype` on CUDA, nothing on the CPU."""
    dtype = autocast_dtype(device)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def subnormals_are_flushed() -> bool:
    """Whether the calling thread's CPU arithmetic flushes subnormal float32 numbers (those
    below ``torch.finfo(torch.float32).tiny``, about 1.18e-38) to zero, read by a probe: the
    product of the subnormal 2^-140 and 1 is 0 exactly when it does. Always False on a CPU
    without the mode (see :func:`subnormals_flushed`). Used to train the models of Chapters 6-9."""
    probe = torch.tensor(2.0 ** -140, dtype=torch.float32)
    return float(probe * 1.0) == 0.0


@contextlib.contextmanager
def subnormals_flushed():
    """Inside the block, subnormal float32 results and operands count as zero on the CPU
    (``torch.set_flush_denormal``: x86's flush-to-zero and denormals-are-zero); on leaving it,
    also by an exception, the previous setting (:func:`subnormals_are_flushed`) comes back.
    :func:`~nmst_lib.experiments.trainer.train` runs its epochs (training and validation) inside
    it. CUDA devices are not affected.

    Why (Chapter 9, 09_temperature): the literal loss scaling of Contextual Temperature (2020)
    eq. 7 drives the sigmoid temperatures to their floor ``a / b``, with scores ``mu`` between
    about -100 and -40; the derivative ``sigmoid'(mu)`` there, times the gradient that reaches it,
    falls below 1.18e-38, and a quarter of the gradient entries of the temperature layer's
    ``W2`` were subnormal in the trained CT-MoS. x86 arithmetic on subnormals takes a slow
    path, so one training step took about twice as long as with them flushed (2.1x measured
    on that model's checkpoint, and its epochs in the training queue went from 11 to about 5.5
    minutes; ``benchmarks/bench_subnormals.py`` times a CT-MoS saturated to the same scores:
    1.6x). What flushing changes is only numbers smaller than 1.2e-38 in magnitude: such
    gradient terms move an AdamW step (its ``eps`` is 1e-8) by less than 1e-30 of the learning
    rate each, and in the forward pass ``sigmoid(mu) + a`` rounds to ``a`` either way (for ``a``
    above 1e-30). Other models of the book train at the same speed either way (0.85-1.04x,
    within the noise of a shared machine, on Chapter 6's LSTM and RNN, Chapter 7's GPT-2 and a
    CT-MoS without loss scaling).

    The mode belongs to a thread. It holds for all of a run's arithmetic with one intra-op
    thread (``torch.set_num_threads(1)``, the published runs' ``--threads 1``) and when the
    block starts before torch's first parallel work, whose worker threads then inherit it;
    worker threads started earlier keep their own mode, which changes the speed, not results
    beyond those subnormals. Yields whether the CPU supports the mode."""
    before = subnormals_are_flushed()
    supported = torch.set_flush_denormal(True)
    try:
        yield supported
    finally:
        torch.set_flush_denormal(before)
