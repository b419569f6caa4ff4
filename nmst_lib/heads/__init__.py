"""Output layers (moved from ``nmst_lib/heads.py``; the next commit splits the package by idea)."""

from .log_probs import *  # noqa: F403
from .log_probs import __all__ as __all__
from .log_probs import _check_alpha as _check_alpha
from .log_probs import _check_batch_size as _check_batch_size
from .log_probs import _check_context_mask as _check_context_mask
from .log_probs import _check_logits as _check_logits
from .log_probs import _check_step_inputs as _check_step_inputs
from .log_probs import _check_targets as _check_targets
