"""WikiText-2 and GPT-2 data (being split into modules; see corpus.py)."""

from .corpus import *  # noqa: F403
from .corpus import __all__, _go_offline  # noqa: F401
