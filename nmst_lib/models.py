"""Recurrent language models (tanh RNN, LSTM) and GPT-2, with a pluggable output layer, and the
decoding protocol of ARCHITECTURE.md.

The models of the NMST paper's WikiText-2 experiments (Choi, Cho, Lee (2023), Sec. 4.1 and
App. D): 2-layer tanh RNN or LSTM, tied input/output embeddings, dropout, and an output
layer from :mod:`nmst_lib.heads` (vanilla softmax, ST of Welleck et al. (2020) Def. 4.3, or NMST
of Choi, Cho, Lee (2023) Def. 6). Chapter 6 (06_wikitext) trains and decodes them; the heads
are derived in Chapters 4 (04_self_terminating) and 5 (05_nmst). Chapter 8 (08_sparse) gives
the LSTM the entmax layers and Chapter 9 (09_temperature) the contextual-temperature ones
(:mod:`nmst_lib.temperature`), with no change here.

:class:`GPT2LM` wraps ``transformers.GPT2LMHeadModel`` with the same heads (Choi, Cho, Lee
(2023) Sec. 4.2) and a key/value-cache decoding state (Chapter 7, 07_gpt2).

Decoding protocol (ARCHITECTURE.md): ``eos_id``, ``vocab_size``, ``initial_state(contexts)``,
``step(state, tokens)``, ``select(state, index)``. The state is a :class:`RecurrentState`
(the RNN's hidden state AND the head's running state, e.g. ST's running product or NMST's
step count); ``select`` reorders both (the reference code forgot the LSTM cell state and the
eos state in beam search).
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from ._validation import check_positive_int

__all__ = ["RecurrentState", "RecurrentLM", "RNNLM", "LSTMLM", "build_model", "ARCHITECTURES", "GPT2LM", "GPT2State",
           "UncachedGPT2", "UncachedGPT2State", "HEAD_FILE", "GPT2Unavailable"]


class RecurrentState(NamedTuple):
    """Decoding state of a :class:`RecurrentLM`: ``hidden`` is ``h[L, B, H]`` (RNN) or
    ``(h, c)`` (LSTM); ``head`` is the output layer's per-row state ``[B]``. Used by the RNN and
    LSTM models of Chapters 6, 8 and 9."""

    hidden: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
    head: torch.Tensor


def _default_head():
    from .heads import VanillaHead

    return VanillaHead()


class RecurrentLM(nn.Module):
    """A word-level recurrent LM: embedding -> dropout -> ``layers``-layer RNN/LSTM -> dropout ->
    tied output projection -> output layer ``head`` (Choi, Cho, Lee (2023) App. D; Chapter 6,
    06_wikitext).

    The embedding size equals ``hidden`` so that the output projection can share the embedding
    matrix (weight tying). ``head`` is any :class:`nmst_lib.heads.OutputHead` (default: vanilla
    softmax); its eos must be the last id, as in :class:`nmst_lib.data.Vocabulary`. A head
    with ``uses_hidden`` (:class:`nmst_lib.temperature.ContextualHead`, Chapter 9,
    09_temperature) also receives the pre-output hidden state (:meth:`features`) and the
    output layer, in teacher forcing, in the loss and in every decoding step.
    Subclasses fix the cell: :class:`RNNLM` (tanh) and :class:`LSTMLM`.
    """

    cell = "rnn"

    def __init__(self, vocab_size: int, hidden: int = 256, layers: int = 2, dropout: float = 0.3, head=None):
        super().__init__()
        self.vocab_size = check_positive_int(vocab_size, "vocab_size", minimum=2)
        self.hidden_size = check_positive_int(hidden, "hidden")
        self.num_layers = check_positive_int(layers, "layers")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a probability in [0, 1), got {dropout!r}")
        self.dropout_p = float(dropout)
        self.head = _default_head() if head is None else head
        if not isinstance(self.head, nn.Module) or not hasattr(self.head, "step"):
            raise TypeError(f"head must be an output layer from nmst_lib.heads, got {type(self.head).__name__}")
        head_eos = int(getattr(self.head, "eos_id", -1))
        if head_eos not in (-1, self.vocab_size - 1):
            raise ValueError(
                f"the head's eos_id ({head_eos}) must be the last id ({self.vocab_size - 1}) or -1: "
                "the vocabulary puts <eos> last"
            )
        self.eos_id = self.vocab_size - 1
        self.embedding = nn.Embedding(self.vocab_size, self.hidden_size)
        rnn_dropout = self.dropout_p if self.num_layers > 1 else 0.0
        if self.cell == "lstm":
            self.rnn = nn.LSTM(self.hidden_size, self.hidden_size, self.num_layers, batch_first=True,
                               dropout=rnn_dropout)
        else:
            self.rnn = nn.RNN(self.hidden_size, self.hidden_size, self.num_layers, nonlinearity="tanh",
                              batch_first=True, dropout=rnn_dropout)
        self.drop = nn.Dropout(self.dropout_p)
        self.output = nn.Linear(self.hidden_size, self.vocab_size)
        self.output.weight = self.embedding.weight  # weight tying
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.output.bias)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, head={getattr(self.head, 'name', type(self.head).__name__)}"

    @property
    def device(self) -> torch.device:
        """Where the parameters live (inputs are moved here)."""
        return self.embedding.weight.device

    # ---------------------------------------------------------------- training (teacher forcing)

    def features(self, inputs: torch.Tensor) -> torch.Tensor:
        """The pre-output hidden states ``[B, T, H]`` (teacher forcing): the last RNN layer's
        output after dropout, the tensor the tied output projection reads
        (``logits(inputs) == output(features(inputs))``). A head with ``uses_hidden`` (the
        contextual temperature of Chapter 9, 09_temperature) receives it as ``hidden=``."""
        hidden, _ = self.rnn(self.drop(self.embedding(inputs)))
        return self.drop(hidden)

    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        """Raw output-layer scores ``[B, T, V]`` before the head (teacher forcing)."""
        return self.output(self.features(inputs))

    @property
    def _uses_hidden(self) -> bool:
        return bool(getattr(self.head, "uses_hidden", False))

    def _hidden_head_call(self, method: str, features: torch.Tensor, *args):
        """``head.<method>(logits, *args, hidden=features, output=self.output)``, the head outside
        autocast with float16/bfloat16 tensors upcast to float32 (float64 models stay float64);
        the logits are not computed for a head whose ``needs_logits`` is False (MoS)."""
        logits = self.output(features) if getattr(self.head, "needs_logits", True) else None
        with torch.autocast(device_type=features.device.type, enabled=False):
            if features.dtype in (torch.float16, torch.bfloat16):
                features = features.float()
            if logits is not None and logits.dtype in (torch.float16, torch.bfloat16):
                logits = logits.float()
            return getattr(self.head, method)(logits, *args, hidden=features, output=self.output)

    def temperatures(self, inputs: torch.Tensor) -> torch.Tensor:
        """The contextual temperatures ``tau[B, T, V]`` of ``inputs[B, T]`` (teacher forcing;
        Contextual Temperature (2020), eq. 5; Chapter 9, 09_temperature), computed from
        :meth:`features` (so with dropout in training mode: call ``eval()`` first for the
        model's deterministic temperatures). ValueError if the head has no temperature."""
        if not self._uses_hidden or getattr(self.head, "temperature", None) is None:
            raise ValueError(f"the output layer {getattr(self.head, 'name', type(self.head).__name__)} has no contextual "
                             "temperature (build the head with nmst_lib.temperature.contextual_head(normalisation=...))")
        if inputs.dim() != 2:
            raise ValueError(f"inputs must be LongTensor[B, T], got shape {tuple(inputs.shape)}")
        features = self.features(inputs)
        with torch.autocast(device_type=features.device.type, enabled=False):
            if features.dtype in (torch.float16, torch.bfloat16):
                features = features.float()
            return self.head.temperatures(features)

    def _apply_head(self, logits: torch.Tensor, context_mask: torch.Tensor | None) -> torch.Tensor:
        # The head runs in float32 even under mixed-precision autocast (log-space ST/NMST math).
        with torch.autocast(device_type=logits.device.type, enabled=False):
            return self.head(logits.float(), context_mask)

    def forward(self, inputs: torch.Tensor, context_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Next-token log-probabilities ``[B, T, V]`` for ``inputs[B, T]`` (position j predicts
        token j+1), through the head with ``context_mask`` (True where the predicted token is a
        context token: no eos mass there, and step t = 1 is the first False position; see
        :class:`nmst_lib.data.Batch`). Trailing padding needs no mask: the RNN is causal."""
        if inputs.dim() != 2:
            raise ValueError(f"inputs must be LongTensor[B, T], got shape {tuple(inputs.shape)}")
        if self._uses_hidden:
            return self._hidden_head_call("forward", self.features(inputs), context_mask)
        return self._apply_head(self.logits(inputs), context_mask)

    def token_nll(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum of -log p(y_t | y_<t, x) over the continuation tokens of ``batch`` (eos included,
        context and padding excluded) and their count (Choi, Cho, Lee (2023) eq. 3)."""
        batch = batch.to(self.device)
        log_probs = self(batch.inputs, batch.context_mask)
        return -batch.target_log_probs(log_probs).sum(), batch.target_mask.sum()

    def token_loss(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum of the head's own per-token training loss over the continuation tokens of
        ``batch`` (eos included, context and padding excluded) and their count.

        The per-token loss is :meth:`nmst_lib.heads.OutputHead.token_losses`: -log p(y_t) for the
        vanilla, ST and NMST heads (then this equals :meth:`token_nll`, bit for bit: Choi, Cho,
        Lee (2023) eq. 3; Chapter 6, 06_wikitext), the entmax loss (a Fenchel-Young loss,
        Martins et al. (2020) eq. 6) for the entmax head, and its NMST-entmax version (Chapter
        8, 08_sparse), the NLL times the mean temperature for a contextual-temperature head with
        loss scaling (Contextual Temperature (2020) eq. 7; Chapter 9, 09_temperature). Like the
        head itself it runs in float32 even under autocast."""
        batch = batch.to(self.device)
        if self._uses_hidden:
            losses = self._hidden_head_call("token_losses", self.features(batch.inputs), batch.targets,
                                            batch.context_mask)
        else:
            logits = self.logits(batch.inputs)
            with torch.autocast(device_type=logits.device.type, enabled=False):
                losses = self.head.token_losses(logits.float(), batch.targets, batch.context_mask)
        scored = batch.target_mask
        return losses[scored].sum(), scored.sum()

    def loss(self, batch) -> torch.Tensor:
        """Training loss: the mean of the head's own per-token loss (:meth:`token_loss`) over the
        continuation tokens of ``batch`` (eos included; context positions and padding carry no
        loss): the mean negative log-likelihood for the vanilla, ST and NMST heads (Choi, Cho,
        Lee (2023) eq. 3; Chapter 6, 06_wikitext), the mean entmax loss for the entmax heads
        (Martins et al. (2020) eq. 5; Chapter 8, 08_sparse)."""
        total, count = self.token_loss(batch)
        return total / count

    # ------------------------------------------------------------------- decoding protocol

    def _check_eval(self):
        if self.training:
            raise RuntimeError("call model.eval() before decoding: dropout would make the decoding random")

    def _head_step(self, logits: torch.Tensor, head_state: torch.Tensor):
        with torch.autocast(device_type=logits.device.type, enabled=False):
            return self.head.step(logits.float(), head_state)

    @torch.no_grad()
    def initial_state(self, contexts: torch.Tensor):
        """Decoding protocol (ARCHITECTURE.md): read the contexts ``[B, k]`` and return the state and
        the log-probabilities of the first continuation token (step t = 1). Needs eval mode;
        runs without gradients."""
        self._check_eval()
        if contexts.dim() != 2 or contexts.shape[1] < 1:
            raise ValueError(f"contexts must be LongTensor[B, k] with k >= 1, got shape {tuple(contexts.shape)}")
        contexts = contexts.to(self.device)
        out, hidden = self.rnn(self.embedding(contexts))
        head_state = self.head.initial_step_state(contexts.shape[0], self.device)
        if self._uses_hidden:
            log_probs, head_state = self._hidden_head_call("step", out[:, -1], head_state)
        else:
            log_probs, head_state = self._head_step(self.output(out[:, -1]), head_state)
        return RecurrentState(hidden, head_state), log_probs

    @torch.no_grad()
    def step(self, state: RecurrentState, tokens: torch.Tensor):
        """Decoding protocol: feed ``tokens[B]`` and return the new state and next-token
        log-probabilities ``[B, V]``."""
        self._check_eval()
        out, hidden = self.rnn(self.embedding(tokens.to(self.device)).unsqueeze(1), state.hidden)
        if self._uses_hidden:
            log_probs, head_state = self._hidden_head_call("step", out[:, 0], state.head)
        else:
            log_probs, head_state = self._head_step(self.output(out[:, 0]), state.head)
        return RecurrentState(hidden, head_state), log_probs

    def select(self, state: RecurrentState, index: torch.Tensor) -> RecurrentState:
        """Decoding protocol: rows ``index`` of the state (picked, reordered or repeated), for
        the hidden state (both ``h`` and ``c`` of an LSTM, batch is dim 1) and the head state."""
        index = index.to(self.device)
        hidden = state.hidden
        if isinstance(hidden, tuple):
            hidden = tuple(h.index_select(1, index) for h in hidden)
        else:
            hidden = hidden.index_select(1, index)
        return RecurrentState(hidden, state.head.index_select(0, index))


class RNNLM(RecurrentLM):
    """:class:`RecurrentLM` with an Elman tanh RNN (the "RNN" of Choi, Cho, Lee (2023) Sec. 4.1:
    2 x 256, dropout 0.3). Chapter 6 (06_wikitext)."""

    cell = "rnn"


class LSTMLM(RecurrentLM):
    """:class:`RecurrentLM` with an LSTM (the "LSTM" of Choi, Cho, Lee (2023) Sec. 4.1:
    2 x 512, dropout 0.5). Chapter 6 (06_wikitext)."""

    cell = "lstm"


ARCHITECTURES = {"rnn": RNNLM, "lstm": LSTMLM}


def build_model(arch: str, vocab_size: int, *, hidden: int, layers: int, dropout: float, head=None) -> RecurrentLM:
    """The model named ``arch`` (``"rnn"`` or ``"lstm"``) with the given sizes and output layer
    (Choi, Cho, Lee (2023) App. D; Chapter 6, 06_wikitext)."""
    if not isinstance(arch, str) or arch.lower() not in ARCHITECTURES:
        raise ValueError(f"unknown arch {arch!r}: choose one of {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[arch.lower()](vocab_size, hidden=hidden, layers=layers, dropout=dropout, head=head)


# ------------------------------------------------------------------------------------ GPT-2


HEAD_FILE = "nmst_head.json"
"""The file in a :meth:`GPT2LM.save_pretrained` folder that names the output layer."""


class GPT2Unavailable(OSError):
    """Pretrained GPT-2 weights could not be loaded (hub unreachable and not cached, or not a GPT-2 folder).
    Used by Chapter 7 (``07_gpt2``)."""


def _head_from_file(path: Path):
    from .heads import head_from_name

    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
        return head_from_name(spec["name"], eps=spec.get("eps"), eos_id=spec.get("eos_id", -1),
                              alpha=spec.get("alpha"))
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} does not describe an output layer ({err}); expected the JSON that "
                         "GPT2LM.save_pretrained writes") from err


class GPT2State(NamedTuple):
    """Decoding state of :class:`GPT2LM`: the key/value cache (a ``transformers``
    ``DynamicCache``; :meth:`GPT2LM.step` extends it in place, so a state is used once) and the
    head's per-row state ``[B]``. Chapter 7 (``07_gpt2``) builds one in its exercise on reordering
    the ST state."""

    cache: object
    head: torch.Tensor


def _cache_keyword(model) -> str:
    return _cache_keyword_of(type(model))


@functools.lru_cache(maxsize=None)
def _cache_keyword_of(model_type) -> str:
    """The name under which this ``transformers`` version takes a key/value cache: ``cache`` from
    transformers 5.2x on, ``past_key_values`` before (the old name still works there but warns on
    every call, which put a FutureWarning on Chapter 7's page)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model_type.forward).parameters else "past_key_values"


def _cache_of(output):
    """The key/value cache of a model output under its current name (see :func:`_cache_keyword`)."""
    fields = getattr(type(output), "__dataclass_fields__", {})
    return output.cache if "cache" in fields else output.past_key_values


class GPT2LM(nn.Module):
    """GPT-2 (``transformers.GPT2LMHeadModel``) with an output layer from :mod:`nmst_lib.heads`:
    the NMST paper's WikiText-103 model (Choi, Cho, Lee (2023) Sec. 4.2, App. D; Chapter 6,
    06_wikitext). eos is ``<|endoftext|>`` = 50256, the last id, as the heads expect.

    Build it with :meth:`from_pretrained` (``"gpt2"``; needs the hub or a local copy) or
    :meth:`from_config` (a randomly initialised configuration, e.g. for tests). Implements the
    decoding protocol with a key/value cache; ``select`` reorders every layer's cache and the
    head state (the reference code's GPT-2 ST beam search did not reorder the eos state).
    Teacher forcing: ``forward(input_ids, context_mask)``, ``token_nll(batch)``, ``loss(batch)``
    as for :class:`RecurrentLM` (right padding needs no attention mask: attention is causal).
    """

    def __init__(self, model, head=None):
        super().__init__()
        self.model = model
        self.head = _default_head() if head is None else head
        if getattr(self.head, "uses_hidden", False):
            raise ValueError("contextual temperature is implemented for RNNLM/LSTMLM (Chapter 9, 09_temperature), not "
                             f"GPT-2: the {getattr(self.head, 'name', '?')} output layer needs the model's hidden state")
        self.vocab_size = int(model.config.vocab_size)
        eos = getattr(model.config, "eos_token_id", None)
        if eos != self.vocab_size - 1:
            raise ValueError(f"GPT2LM needs eos as the last id ({self.vocab_size - 1}), the config says {eos}")
        head_eos = int(getattr(self.head, "eos_id", -1))
        if head_eos not in (-1, self.vocab_size - 1):
            raise ValueError(f"the head's eos_id ({head_eos}) must be -1 or {self.vocab_size - 1}")
        self.eos_id = self.vocab_size - 1
        self.max_positions = int(model.config.n_positions)

    @classmethod
    def from_pretrained(cls, name_or_dir: str | os.PathLike = "gpt2", head=None, *, hub_timeout: float = 2.0,
                        **kwargs) -> "GPT2LM":
        """Pretrained GPT-2 (``transformers.GPT2LMHeadModel.from_pretrained``; Choi, Cho, Lee (2023)
        Sec. 4.2 fine-tunes ``"gpt2"``; Chapter 7, 07_gpt2).

        ``name_or_dir``: a folder written by :meth:`save_pretrained` (read without the network;
        its output layer is restored from ``nmst_head.json`` unless ``head`` is given), or a hub
        name such as ``"gpt2"``. For a hub name the hub is probed first
        (:func:`nmst_lib.data.hub_is_reachable`, ``hub_timeout`` seconds): when it cannot be
        reached, only the local Hugging Face cache is tried, and :class:`GPT2Unavailable` says
        what to do within seconds instead of minutes of retries. ``head`` defaults to the
        folder's head, else the vanilla softmax.
        """
        from transformers import GPT2LMHeadModel

        from .data.sources import go_offline, hub_is_reachable

        # a folder: a path object, an existing path, or a string that can only be a path
        if isinstance(name_or_dir, os.PathLike) or (isinstance(name_or_dir, str) and (
                Path(name_or_dir).expanduser().exists() or name_or_dir.startswith((".", "/", "~", "\\")))):
            folder = Path(name_or_dir).expanduser()
            if not (folder / "config.json").is_file():
                raise GPT2Unavailable(
                    f"{folder} is not a GPT-2 folder (no config.json): pass a folder written by "
                    "GPT2LM.save_pretrained (or transformers' save_pretrained), or a hub name such as 'gpt2'")
            if head is None and (folder / HEAD_FILE).is_file():
                head = _head_from_file(folder / HEAD_FILE)
            return cls(GPT2LMHeadModel.from_pretrained(str(folder), local_files_only=True, **kwargs), head)
        if not isinstance(name_or_dir, str) or not name_or_dir:
            raise TypeError(f"name_or_dir must be a hub name such as 'gpt2' or a folder, got {name_or_dir!r}")
        what_to_do = (
            f"To use pretrained GPT-2 ({name_or_dir!r}) run where the Hugging Face hub is reachable (e.g. Colab), or "
            "copy a folder written by GPT2LM.save_pretrained / transformers' save_pretrained and pass its path; "
            "without pretrained weights use GPT2LM.from_config(...) (the 'cpu' profile trains a small GPT-2 from "
            "scratch: not pretrained GPT-2)."
        )
        start = time.perf_counter()
        if not hub_is_reachable(hub_timeout):
            go_offline()
            try:  # the local Hugging Face cache may hold it
                model = GPT2LMHeadModel.from_pretrained(name_or_dir, local_files_only=True, **kwargs)
            except OSError as err:
                raise GPT2Unavailable(
                    f"the Hugging Face hub is not reachable (probe of huggingface.co:443 failed within "
                    f"{hub_timeout:g} s, or HF_HUB_OFFLINE is set) and {name_or_dir!r} is not in the local cache "
                    f"(gave up after {time.perf_counter() - start:.1f} s). {what_to_do}") from err
            return cls(model, head)
        try:
            return cls(GPT2LMHeadModel.from_pretrained(name_or_dir, **kwargs), head)
        except OSError as err:
            raise GPT2Unavailable(f"loading {name_or_dir!r} from the Hugging Face hub failed ({err}). "
                                  f"{what_to_do}") from err

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write the model to ``directory`` so that :meth:`from_pretrained` (directory) restores it
        exactly, output layer included: the transformers files (``config.json`` and
        ``model.safetensors``) and ``nmst_head.json`` (the head's name, eps, alpha, eos id).
        Chapter 7 (07_gpt2). Returns the folder."""
        folder = Path(directory).expanduser()
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} exists and is not a folder")
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(folder))
        spec = {"format": 1, "name": self.head.name, "eps": getattr(self.head, "eps", None),
                "alpha": getattr(self.head, "alpha", None), "eos_id": int(getattr(self.head, "eos_id", -1)),
                "note": "nmst_lib output layer (nmst_lib.heads.head_from_name); read by GPT2LM.from_pretrained"}
        from .files import atomic_write_bytes

        atomic_write_bytes(folder / HEAD_FILE, (json.dumps(spec, indent=1) + "\n").encode("utf-8"))
        return folder

    @classmethod
    def from_config(cls, head=None, **config_kwargs) -> "GPT2LM":
        """A randomly initialised GPT-2 with ``transformers.GPT2Config(**config_kwargs)``."""
        from transformers import GPT2Config, GPT2LMHeadModel

        return cls(GPT2LMHeadModel(GPT2Config(**config_kwargs)), head)

    @property
    def device(self) -> torch.device:
        """Where the parameters live (inputs are moved here)."""
        return self.model.lm_head.weight.device

    def forward(self, inputs: torch.Tensor, context_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Next-token log-probabilities ``[B, T, V]`` through the head (see :meth:`RecurrentLM.forward`)."""
        if inputs.shape[1] > self.max_positions:
            raise ValueError(f"GPT-2 reads at most {self.max_positions} positions, got {inputs.shape[1]}")
        logits = self.model(input_ids=inputs, use_cache=False).logits
        with torch.autocast(device_type=logits.device.type, enabled=False):
            return self.head(logits.float(), context_mask)

    token_nll = RecurrentLM.token_nll
    loss = RecurrentLM.loss

    def token_loss(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum of the head's per-token loss over the scored tokens and their count (see
        :meth:`RecurrentLM.token_loss`; the same values).

        Memory (Chapter 7, 07_gpt2): at V = 50,257 each ``[B, T, V]`` float32 tensor is 200 kB
        per token. For the vanilla, ST and NMST heads the output projection and the loss run
        together (:func:`nmst_lib.heads.projected_nll_token_losses`): the logits are computed,
        become the log-probabilities in place (the gradient ``softmax - one-hot`` needs one of
        them) and then, in backward, their own gradient. A training step holds ONE such tensor;
        ``lm_head(hidden)`` followed by the head would hold the logits and the log-probabilities
        in forward and three in backward. Other heads use ``head.token_losses`` on the logits."""
        from .heads import projected_nll_token_losses

        batch = batch.to(self.device)
        if batch.inputs.shape[1] > self.max_positions:
            raise ValueError(f"GPT-2 reads at most {self.max_positions} positions, got {batch.inputs.shape[1]}")
        lm_head = self.model.lm_head
        if getattr(lm_head, "bias", None) is None:
            hidden = self.model.transformer(input_ids=batch.inputs, use_cache=False).last_hidden_state
            losses = projected_nll_token_losses(self.head, hidden, lm_head.weight, batch.targets, batch.context_mask)
        else:  # pragma: no cover - GPT-2's output projection has no bias
            logits = self.model(input_ids=batch.inputs, use_cache=False).logits
            with torch.autocast(device_type=logits.device.type, enabled=False):
                losses = self.head.token_losses(logits.float(), batch.targets, batch.context_mask)
        scored = batch.target_mask
        return losses[scored].sum(), scored.sum()
    _check_eval = RecurrentLM._check_eval
    _head_step = RecurrentLM._head_step

    @torch.no_grad()
    def initial_state(self, contexts: torch.Tensor):
        """Decoding protocol: read the contexts ``[B, k]`` (equal lengths, no padding), return the
        cache + head state and the log-probabilities of step t = 1. Needs eval mode."""
        self._check_eval()
        contexts = contexts.to(self.device)
        out = self.model(input_ids=contexts, use_cache=True)
        head_state = self.head.initial_step_state(contexts.shape[0], self.device)
        log_probs, head_state = self._head_step(out.logits[:, -1], head_state)
        return GPT2State(_cache_of(out), head_state), log_probs

    @torch.no_grad()
    def step(self, state: GPT2State, tokens: torch.Tensor):
        """Decoding protocol: feed ``tokens[B]``; raises ValueError past GPT-2's 1024 positions."""
        self._check_eval()
        if state.cache.get_seq_length() >= self.max_positions:
            raise ValueError(f"GPT-2 attends to at most {self.max_positions} positions (context + continuation); "
                             "decode with a smaller max_len")
        cache = {_cache_keyword(self.model): state.cache}
        out = self.model(input_ids=tokens.to(self.device)[:, None], use_cache=True, **cache)
        log_probs, head_state = self._head_step(out.logits[:, -1], state.head)
        return GPT2State(_cache_of(out), head_state), log_probs

    def select(self, state: GPT2State, index: torch.Tensor) -> GPT2State:
        """Decoding protocol: rows ``index`` of every layer's keys and values, and of the head state.

        An ``index`` that keeps every row in place (``0, 1, ..., B-1``; beam search keeps its
        beams' order at many steps once the beams settle) returns ``state`` itself: re-copying a
        cache that grows by one position per step would make such steps cost O(length) each."""
        from transformers import DynamicCache

        index = index.to(self.device)
        if index.dim() == 1 and index.numel() == state.head.shape[0] and bool(
                torch.equal(index, torch.arange(index.numel(), device=index.device, dtype=index.dtype))):
            return state
        layers = [(layer.keys.index_select(0, index), layer.values.index_select(0, index))
                  for layer in state.cache.layers]
        return GPT2State(DynamicCache(layers), state.head.index_select(0, index))


class UncachedGPT2State(NamedTuple):
    """Decoding state of :class:`UncachedGPT2`: every token so far ``[B, n]`` (context and
    continuation) and the head's per-row state ``[B]`` (Chapter 7, ``07_gpt2``)."""

    tokens: torch.Tensor
    head: torch.Tensor


class UncachedGPT2:
    """The decoding protocol for a :class:`GPT2LM` WITHOUT the key/value cache: every step runs
    the Transformer over the whole prefix again (Chapter 7, 07_gpt2, "what the cache changes").

    Step n of a continuation costs a forward pass over k + n positions instead of one, so
    decoding L tokens costs O((k + L)^2) position-passes (and O((k + L)^3) attention work)
    instead of O(k + L). Only the last position goes through the output projection
    (``logits_to_keep=1``), as a fair baseline would do. The log-probabilities equal the cached model's up to float rounding (the
    same causal attention, computed in another order); ``benchmarks/bench_gpt2.py`` times both.
    ``select`` picks rows of the token history and of the head state.
    """

    def __init__(self, model: GPT2LM):
        if not isinstance(model, GPT2LM):
            raise TypeError(f"UncachedGPT2 wraps a GPT2LM, got {type(model).__name__}")
        self.model = model
        self.eos_id = model.eos_id
        self.vocab_size = model.vocab_size

    def __repr__(self) -> str:
        return f"UncachedGPT2({type(self.model.head).__name__}, vocab_size={self.vocab_size})"

    @property
    def device(self) -> torch.device:
        """Where the wrapped model's parameters live."""
        return self.model.device

    def _last_log_probs(self, tokens: torch.Tensor, head_state: torch.Tensor):
        if tokens.shape[1] > self.model.max_positions:
            raise ValueError(f"GPT-2 attends to at most {self.model.max_positions} positions (context + "
                             "continuation); decode with a smaller max_len")
        # only the last position's logits: the baseline recomputes the prefix, not V-sized outputs it drops
        logits = self.model.model(input_ids=tokens, use_cache=False, logits_to_keep=1).logits[:, -1]
        return self.model._head_step(logits, head_state)

    @torch.no_grad()
    def initial_state(self, contexts: torch.Tensor):
        """Decoding protocol: read the contexts ``[B, k]``; the state keeps them."""
        self.model._check_eval()
        if contexts.dim() != 2 or contexts.shape[1] < 1:
            raise ValueError(f"contexts must be LongTensor[B, k] with k >= 1, got shape {tuple(contexts.shape)}")
        contexts = contexts.to(self.device)
        head_state = self.model.head.initial_step_state(contexts.shape[0], self.device)
        log_probs, head_state = self._last_log_probs(contexts, head_state)
        return UncachedGPT2State(contexts, head_state), log_probs

    @torch.no_grad()
    def step(self, state: UncachedGPT2State, tokens: torch.Tensor):
        """Decoding protocol: append ``tokens[B]`` and run the whole prefix again."""
        self.model._check_eval()
        seq = torch.cat([state.tokens, tokens.to(self.device)[:, None]], dim=1)
        log_probs, head_state = self._last_log_probs(seq, state.head)
        return UncachedGPT2State(seq, head_state), log_probs

    def select(self, state: UncachedGPT2State, index: torch.Tensor) -> UncachedGPT2State:
        """Decoding protocol: rows ``index`` of the token history and of the head state."""
        index = index.to(self.device)
        return UncachedGPT2State(state.tokens.index_select(0, index), state.head.index_select(0, index))
