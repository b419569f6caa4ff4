"""nmst_lib: the library behind *When Do Language Models Stop?*.

Every chapter imports it; no chapter re-implements what lives here. One module per idea:
output layers (``heads``, ``entmax``, ``temperature``), decoders (``decoding``), the papers'
constructions and bounds (``theory``, ``markov``), metrics (``metrics``), models and data
(``models``, ``data``), the experiments and their stored results (``experiments``), and what a
page shows of them (``report``, ``findings``, ``plots``). How they fit, and the one direction
data flows between them, is in the repository's ``ARCHITECTURE.md``; the API reference page
of the book lists every public name (each module's ``__all__``).
"""

__version__ = "0.1.0"
