"""nmst_lib: the library behind *When Do Language Models Stop?*."""

__version__ = "0.1.0"
