"""A chapter's set-up: seeds, device and figure style in one call, the code
version it prints, and the computed numbers its prose quotes.

Every chapter notebook starts with a Colab-only install cell and then::

    from nmst_lib.notebook import setup_notebook
    device = setup_notebook(seed=0)

so that a chapter gives the same numbers on every run (on the same device) and uses a GPU
when Colab attaches one (ARCHITECTURE.md, "Habits worth copying": seeds and device selection in
the first cell). The figure style is the colour-blind-safe palette of :mod:`nmst_lib.plots`.
Used by every chapter, from Chapter 1 (``01_decoding``) on.
:func:`setup_notebook` also prints :func:`code_words`: the library's version
and commit, the same code version every stored result is stamped with.

The experiment chapters (6-9) put computed values into their text with
:func:`say` (myst-nb's ``glue`` during a website build, nothing visible in
Colab), and their verdicts and counts with :func:`say_findings` (from a
:class:`nmst_lib.findings.Findings`), so their prose quotes only computed
numbers.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from ._validation import check_positive_int
from .plots import COLORS, use_book_style

__all__ = [
    "COLORS",
    "code_words",
    "markdown_text",
    "pick_device",
    "say",
    "say_findings",
    "seed_everything",
    "setup_notebook",
]


def seed_everything(seed: int = 0) -> int:
    """Seed Python's ``random``, NumPy's global generator and torch (CPU and every GPU).

    Chapters that need several independent streams should still pass explicit
    ``torch.Generator`` objects to the library; this only makes a whole notebook
    reproducible run to run. Returns the seed (a non-negative integer). Used by
    :func:`setup_notebook` in every chapter (Chapter 1, ``01_decoding``, onwards).
    """
    seed = check_positive_int(seed, "seed", minimum=0)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed


def pick_device() -> torch.device:
    """``cuda`` when a GPU is available (Colab with a GPU runtime), else ``cpu``.

    The library runs the same code path on both; only speed differs. Used by
    :func:`setup_notebook` in every chapter (Chapter 1, ``01_decoding``, onwards).
    """
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def setup_notebook(seed: int = 0, *, style: bool = True, verbose: bool = True) -> torch.device:
    """Seed everything, pick the device and set the book's figure style; return the device.

    Args:
        seed: non-negative integer for :func:`seed_everything`.
        style: apply :func:`nmst_lib.plots.style.use_book_style` (Okabe-Ito colours, labelled,
            uncluttered axes) to matplotlib.
        verbose: print the seed, the device (and the GPU's name), the versions used, the
            library's commit (:func:`code_words`) and the date, so a reader can tell which run
            produced a page.

    Returns:
        ``torch.device("cuda")`` if a GPU is available, else ``torch.device("cpu")``.

    Used in the first cell of every chapter (Chapter 1, ``01_decoding``, onwards).
    """
    if not isinstance(style, bool) or not isinstance(verbose, bool):
        raise TypeError("style and verbose must be True or False")
    seed = seed_everything(seed)
    device = pick_device()
    if style:
        use_book_style()
    if verbose:
        where = str(device)
        if device.type == "cuda":
            where += f" ({torch.cuda.get_device_name(device)})"
        # two short lines, not one of 100 characters: a phone shows each whole
        print(f"seed: {seed} | device: {where} | torch {torch.__version__}\n{code_words()}")
    return device


def code_words(today=None) -> str:
    """The library a page ran with and when, as its first cell prints it: ``nmst_lib 0.1.0, commit
    0123456789 | run 2026-11-30 (UTC)``; "with local changes" when the checkout's library differs
    from its commit, "installed package" when the library is not a git checkout (Colab, a wheel).
    ``today``: a :class:`datetime.date` (default: today, UTC). The same code version every stored
    result is stamped with (:func:`nmst_lib.experiments.results.code_version`). Every chapter
    (Chapters 1-9) prints it in its first cell through :func:`setup_notebook`."""
    import datetime

    from .experiments.results import code_version

    if today is None:
        today = datetime.datetime.now(datetime.timezone.utc).date()
    if not isinstance(today, datetime.date):
        raise TypeError(f"today must be a datetime.date, got {type(today).__name__}")
    v = code_version()
    if v["git_sha"]:
        where = f"commit {v['git_sha'][:10]}" + (" with local changes" if v["git_dirty"] else "")
    else:
        where = "installed package"
    return f"nmst_lib {v['nmst_lib']}, {where} | run {today.isoformat()} (UTC)"


def _glue(name, value):
    """myst-nb's ``glue`` when the website is being built, else nothing (Colab, plain Jupyter)."""
    try:
        from myst_nb import glue
    except ImportError:  # Colab: the same numbers are in the tables and printed lines
        return False
    glue(name, value, display=False)
    return True


def say(name: str, text) -> None:
    """Put a computed value into the prose: a markdown cell writes ``{glue:md}`name```.

    Returns nothing, so that a ``say(...)`` ending a cell adds no output to it (a second output
    in a figure cell would be a second figure of the same name). Outside a website build
    (Colab) it does nothing visible. Used by Chapters 6-9, whose prose quotes only computed
    numbers.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a glue key like 'ch6_gap' (letters, digits, _), got {name!r}")
    _glue(name, markdown_text(text))


def markdown_text(text):
    """``IPython.display.Markdown`` holding ``text`` itself. ``Markdown(text)`` reads a file
    instead when ``text`` names one that exists ("." or a word that is also a folder's name), so
    the text is set after construction. Chapters 1-9 show their computed sentences through it
    (:func:`say`)."""
    from IPython.display import Markdown

    shown = Markdown("")
    shown.data = str(text)
    return shown


def say_findings(findings, prefix: str) -> dict:
    """Glue a chapter's :class:`nmst_lib.findings.Findings`: its list, Summary sentence and counts.

    Keys: ``{prefix}_summary_list`` (the "What reproduces" list, grouped by verdict), ``{prefix}_summary_counts``
    (the Summary's sentence), ``{prefix}_n_<verdict>`` for each verdict, so every count a
    page states comes from the engine (Chapters 6-9), and ``{prefix}_beyond_list``, the
    comparisons beyond the papers, judged but never counted (empty when there is none).
    Returns the counts.
    """
    from .findings import Findings

    if not isinstance(findings, Findings):
        raise TypeError(f"findings must be a nmst_lib.findings.Findings, got {type(findings).__name__}")
    say(f"{prefix}_summary_list", findings.markdown_list(by_verdict=True))
    say(f"{prefix}_summary_counts", findings.summary())
    say(f"{prefix}_beyond_list", findings.beyond_list())
    counts = findings.counts()
    for verdict, n in counts.items():
        say(f"{prefix}_n_{verdict.replace(' ', '_')}", n)
    return counts

