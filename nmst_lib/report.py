"""Reports of stored experiment results for the book's pages: tables, provenance summaries,
escaped text, length and token statistics.

The experiment chapters (Chapters 6-9: ``06_wikitext``, ``07_gpt2``, ``08_sparse``,
``09_temperature``) show numbers loaded from provenance-stamped result files
(:mod:`nmst_lib.experiments.results`). What they need besides the numbers themselves lives
here, so that a chapter's visible code is about the experiment and not about HTML:

* **HTML tables that escape every cell** (:func:`html_table`, :class:`Html`). Model-generated
  text holds tokens such as ``<unk>``, ``<eos>`` or ``<|endoftext|>``; put unescaped into a
  page, a browser takes them for tags and shows nothing. Every cell goes through
  ``html.escape``; the result displays as HTML in Jupyter and on the website.
* **The book's notation for models and settings** (:func:`eps_text`, :func:`eps_book`,
  :func:`model_name`, :func:`book_notation`): the one place that turns an eps, a head or a
  label the library stores in ASCII (``eps=5e-04``, ``alpha=1.5``) into what a page prints
  (``ε=5e-4``, ``α=1.5``), so that no chapter parses the library's labels.
* **Formatting of repeated runs**: :func:`mean_std` (mean +- sample standard deviation) and
  :func:`mean_range` (mean and min-max over seeds: a fraction of N contexts averaged over
  seeds is not a count, so it is reported as a mean with its range).
* **Selecting results** by config fields (:func:`select`) and reading one number from each
  (:func:`values`).
* **r_nt(L) at any L from a stored decoding record** (:func:`rnt_at`,
  :func:`stored_termination_steps`), with beam search read from its first finished
  hypothesis, not its returned length.
* **Lengths and tokens of continuations**: :func:`lengths_from_histogram`,
  :func:`length_summary`, :func:`ks_distance`, :func:`token_share` (e.g. the ``<unk>``
  rate), :func:`longest_run` and :func:`repeating_tail` (the cycle a degenerate continuation
  ends in).
* **Training status** (:func:`training_status`): whether a run stopped at its epoch limit
  while its validation perplexity was still falling (an undertrained model).
* **Provenance** (:func:`provenance_summary`, :func:`provenance_html`; where the results were
  read from is ``nmst_lib.experiments.describe_results``): what every run has
  in common stated once, what differs in a compact table grouped by config fields, and the
  full per-run table in a collapsed ``<details>`` element (ARCHITECTURE.md, "Pages": long
  provenance goes in a dropdown under a short summary).

Nothing here needs pandas or IPython: tables are built as HTML strings, and :class:`Html`
only implements Jupyter's ``_repr_html_`` protocol.
"""

from __future__ import annotations

import html
import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "eps_text",
    "eps_book",
    "model_name",
    "book_notation",
    "and_list",
    "counted",
    "times",
    "Html",
    "escape",
    "html_table",
    "text_table",
    "mean_std",
    "mean_range",
    "select",
    "values",
    "stored_termination_steps",
    "rnt_at",
    "lengths_from_histogram",
    "LengthSummary",
    "ks_distance",
    "ks_by_seed",
    "average_ranks",
    "rank_correlation",
    "length_summary",
    "TokenShare",
    "token_share",
    "longest_run",
    "Cycle",
    "repeating_tail",
    "training_status",
    "command_template",
    "shown_command",
    "provenance_rows",
    "ProvenanceSummary",
    "provenance_summary",
    "provenance_html",
    "details_html",
]


# ---------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------


class Html(str):
    """A string of HTML that Jupyter (and so the website) displays as HTML. Chapters 6-9 display
    their tables with it.

    It is a plain ``str`` (print it, test it, concatenate it) whose ``_repr_html_`` returns
    itself, so ``display(Html(...))`` or an ``Html`` as a cell's last value renders it. Every
    function of this module that builds HTML escapes the text it is given (:func:`escape`).
    """

    __slots__ = ()

    def _repr_html_(self) -> str:
        return str(self)


def escape(text) -> str:
    """``str(text)`` with ``& < > " '`` replaced by HTML entities (``html.escape``). Used by
    Chapters 6-9 (``09_temperature`` calls it directly).

    Model-generated text is full of angle-bracket tokens (``<unk>``, ``<eos>``,
    ``<|endoftext|>``); unescaped, a browser parses them as unknown tags and shows nothing
    (ARCHITECTURE.md, "Pages"). ``None`` becomes the empty string.
    """
    return "" if text is None else html.escape(str(text), quote=True)


def _cell_text(value, digits: int | None) -> str:
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        v = float(value)
        if not math.isfinite(v):
            return str(v)
        return f"{v:,.{digits}f}" if digits is not None else f"{v:,.6g}"
    return str(value)


def html_table(
    rows: Sequence[Mapping],
    columns: Sequence | None = None,
    *,
    text_columns: Iterable = (),
    caption: str | None = None,
    digits: int | None = None,
    wrap_width: str | None = None,
    font_size: str = "0.85em",
) -> Html:
    """An HTML table of ``rows`` (mappings from column to value), every cell escaped.

    Args:
        rows: one mapping per row; a missing key shows an empty cell.
        columns: the columns in order (default: keys of the rows in order of first
            appearance). A column given as a pair ``(group, name)`` gets a two-row header in
            which consecutive columns of the same group share one spanning cell, as in the
            papers' tables ("RNN: ours | paper").
        text_columns: columns holding running text (e.g. model continuations): left-aligned,
            wrapped, whitespace preserved. Other cells stay on one line (numbers right-aligned);
            a table wider than the page scrolls sideways instead of wrapping them.
        caption: a caption above the table (escaped).
        digits: decimals for float cells (default: 6 significant digits); integers get
            thousands separators; strings are shown as they are (already-formatted numbers).
        wrap_width: a CSS width for the text columns (e.g. ``"60ch"``).
        font_size: a CSS font size for the whole table (smaller for wide tables).

    Returns an :class:`Html`. Used by Chapter 6 (``06_wikitext``) and later experiment chapters.
    """
    if isinstance(rows, Mapping) or not isinstance(rows, Sequence):
        raise TypeError("rows must be a sequence of mappings (one per row)")
    if any(not isinstance(r, Mapping) for r in rows):
        raise TypeError("every row must be a mapping from column to value")
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    columns = list(columns)
    if not columns:
        raise ValueError("a table needs at least one column")
    text_columns = set(text_columns)
    grouped = any(isinstance(c, tuple) for c in columns)
    if grouped and any(not (isinstance(c, tuple) and len(c) == 2) for c in columns):
        raise ValueError("with grouped headers every column must be a pair (group, name)")

    def is_numeric_column(c) -> bool:
        vals = [r[c] for r in rows if c in r and r[c] is not None]
        return bool(vals) and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in vals)

    numeric = {c: is_numeric_column(c) for c in columns}

    pad = "padding: 0.15em 0.5em;"

    def style(c, header=False) -> str:
        if c in text_columns:
            width = f" min-width: {escape(wrap_width)};" if wrap_width else ""
            return f' style="{pad} text-align: left; white-space: pre-wrap; word-break: break-word;{width}"'
        align = "right" if numeric[c] else "left"
        wrap = "" if header else " white-space: nowrap;"  # short cells: one line each, the headers may wrap
        return f' style="{pad} text-align: {align};{wrap}"'

    # The caption stays outside the scrolling box: on a narrow screen a wide table scrolls inside
    # its own box and its caption stays in the column, whole.
    out = [f'<p class="nmst-table-caption" style="margin: 0.5em 0 0 0; font-size: 0.9em;">{escape(caption)}</p>'
           if caption else "",
           '<div class="nmst-table-wrapper" style="overflow-x: auto; max-width: 100%;">'
           f'<table class="nmst-table" style="font-size: {escape(font_size)}; margin: 0.5em 0;">']
    out.append("<thead>")
    if grouped:
        out.append("<tr>")
        i = 0
        while i < len(columns):
            group = columns[i][0]
            span = 1
            while i + span < len(columns) and columns[i + span][0] == group:
                span += 1
            out.append(f'<th colspan="{span}" style="{pad} text-align: center;">{escape(group)}</th>')
            i += span
        out.append("</tr>")
    out.append("<tr>")
    for c in columns:
        name = c[1] if grouped else c
        out.append(f"<th{style(c, header=True)}>{escape(name)}</th>")
    out.append("</tr></thead><tbody>")
    for r in rows:
        out.append("<tr>")
        for c in columns:
            out.append(f"<td{style(c)}>{escape(_cell_text(r.get(c), digits))}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return Html("".join(out))


# ---------------------------------------------------------------------------------------
# Repeated runs
# ---------------------------------------------------------------------------------------


def text_table(rows: Sequence[Mapping], columns: Mapping[str, str], *,
               digits: Mapping[str, int] | None = None) -> str:
    """``rows`` as a plain-text table for a terminal (the ``report`` command): one column per
    key of ``columns`` (key -> header), numbers right-aligned and written as
    :func:`html_table` writes them (``digits[key]`` decimals, else 6 significant digits;
    integers with thousands separators), None as an empty cell, text left-aligned."""
    if not isinstance(columns, Mapping) or not columns:
        raise ValueError("columns must map at least one row key to its header")
    digits = dict(digits or {})
    cells = [[_cell_text(row.get(k), digits.get(k)) for k in columns] for row in rows]
    numeric = [any(isinstance(row.get(k), numbers.Real) and not isinstance(row.get(k), bool)
                   for row in rows) for k in columns]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(columns.values())]

    def line(values) -> str:
        return " ".join(v.rjust(w) if num else v.ljust(w)
                        for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(list(columns.values()))] + [line(c) for c in cells])


def _as_values(values) -> np.ndarray:
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64).ravel()
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError(f"values must be finite numbers, got {arr.tolist()}")
    return arr


def eps_text(eps) -> str:
    """eps in short scientific notation, with the fewest mantissa digits that give it back
    exactly: ``1e-04``, ``5e-04``, ``2.5e-03`` (one digit would print 2.5e-3 as ``3e-03``). The
    ASCII form of config keys and the labels stored in results (Chapters 6-9). ValueError for
    anything but a number in (0, 1)."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < 1:
        raise ValueError(f"eps must be a number in (0, 1), got {eps!r}")
    for digits in range(16):
        text = f"{float(eps):.{digits}e}"
        if float(text) == eps:
            return text
    return repr(float(eps))


def eps_book(eps) -> str:
    """eps as the book writes it: ``5e-4``, ``2.5e-3``, ``1e-2`` (:func:`eps_text` without the
    exponent's sign padding). Used by Chapters 6 and 7."""
    mantissa, exponent = eps_text(eps).split("e")
    return f"{mantissa}e{int(exponent)}"


def model_name(head: str, eps=None) -> str:
    """A model as the book names it: ``VA``, or the head in capitals and its eps, ``ST ε=1e-4``,
    ``NMST ε=2.5e-3`` (Chapters 6-7). ValueError for an eps on VA or none on ST/NMST."""
    if head not in ("va", "st", "nmst"):
        raise ValueError(f"head must be va, st or nmst, got {head!r}")
    if (head == "va") != (eps is None):
        raise ValueError(f"VA has no eps and ST/NMST need one, got head={head!r}, eps={eps!r}")
    return "VA" if head == "va" else f"{head.upper()} ε={eps_book(eps)}"


_ASCII_EPS = re.compile(r"\beps=(\d(?:\.\d+)?)e-0*(\d+)")


def book_notation(label: str) -> str:
    """A label the library stores in ASCII (results, decoder and model labels) in the book's
    notation: ``eps=5e-04`` -> ``ε=5e-4``, ``alpha=1.5`` -> ``α=1.5``, ``lambda=4`` -> ``λ=4``
    (Chapter 9's tanh normalisations), ``Softmax-tau (tau=0.95)`` -> ``Softmax-T (T=0.95)`` (a
    temperature is T in the book). Everything else is kept."""
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}")
    label = _ASCII_EPS.sub(r"ε=\1e-\2", label)
    return label.replace("Softmax-tau", "Softmax-T").replace("tau=", "T=").replace("alpha=", "α=").replace(
        "lambda=", "λ=")


def and_list(names) -> str:
    """Names joined as prose: ``("VA",)`` -> ``"VA"``; ``("VA", "ST")`` -> ``"VA and ST"``;
    ``("VA", "ST", "NMST")`` -> ``"VA, ST and NMST"`` (no serial comma, the book's style). Every
    name must be a non-empty ``str``, and there must be at least one. Used by Chapters 6, 7 and 9."""
    names = list(names)
    if not names:
        raise ValueError("and_list needs at least one name, got none")
    for n in names:
        if not isinstance(n, str) or not n:
            raise TypeError(f"and_list joins non-empty strings, got {n!r}")
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in the number ``n`` asks for: ``counted(1, "seed")`` -> ``"1 seed"``,
    ``counted(3, "seed")`` -> ``"3 seeds"``, ``counted(0, "seed")`` -> ``"0 seeds"``;
    ``plural`` for a noun that does not take an ``s``. ``n`` is a non-negative integer. Used by
    Chapter 9 (``09_temperature``)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"n counts something, so it must be >= 0, got {n}")
    if not isinstance(noun, str) or not noun:
        raise TypeError(f"noun must be a non-empty str, got {noun!r}")
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def times(ratio) -> str:
    """A ratio to two significant figures as prose writes "N times": ``times(2243.7)`` ->
    ``"2,200"``, ``times(20.4)`` -> ``"20"``, ``times(0.7391)`` -> ``"0.74"`` (Chapters 6 and 7:
    the median p(eos) after a sentence end against elsewhere). ``ratio`` is a finite number
    > 0."""
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real):
        raise TypeError(f"ratio must be a real number, got {type(ratio).__name__}")
    if not math.isfinite(ratio) or ratio <= 0:
        raise ValueError(f"ratio must be finite and > 0, got {ratio}")
    rounded = float(f"{ratio:.2g}")
    return f"{rounded:,.0f}" if rounded >= 10 else f"{rounded:g}"


def mean_std(values, digits: int = 1) -> str:
    """``"mean ± std"`` over repeated runs (sample standard deviation, ddof = 1). Used by Chapter 6
    (``06_wikitext``).

    One value has no spread: ``"m ± n/a"``; no values: ``"—"``. The papers report mean
    (st.dev.) over 10 runs (Choi, Cho, Lee 2023, Table 1; Welleck et al. 2020, Tables 1, 3).
    """
    arr = _as_values(values)
    if arr.size == 0:
        return "—"
    spread = f"{arr.std(ddof=1):.{digits}f}" if arr.size > 1 else "n/a"
    return f"{arr.mean():.{digits}f} ± {spread}"


def mean_range(values, digits: int = 3, *, scale: float = 1.0, range_digits: int | None = None) -> str:
    """``"mean (min–max)"`` over repeated runs, each value multiplied by ``scale`` first. Used by
    Chapter 6 (``06_wikitext``).

    For quantities such as r_nt(L) averaged over seeds: the mean of "k of N contexts
    unfinished" over seeds is not itself a count, so a page gives the mean and the range
    (e.g. ``mean_range(r, 1, scale=100)`` for percent, ``mean_range(k, 1, range_digits=0)`` for
    counts, whose range ends are whole numbers). ``range_digits`` (default ``digits``) formats
    the range. One value, or values that are all equal: just the value; none: ``"—"``.
    """
    arr = _as_values(values) * float(scale)
    if arr.size == 0:
        return "—"
    rd = digits if range_digits is None else range_digits
    if arr.size == 1 or np.all(arr == arr[0]):
        return f"{arr[0]:.{digits}f}"
    return f"{arr.mean():.{digits}f} ({arr.min():.{rd}f}–{arr.max():.{rd}f})"


# ---------------------------------------------------------------------------------------
# Selecting results
# ---------------------------------------------------------------------------------------


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def select(results: Iterable[Mapping], **fields) -> list[dict]:
    """The results whose ``config`` matches every given field, in their order. Used by Chapters 6
    and 7.

    ``select(results, arch="lstm", head="va", eps=None)``: ``None`` matches only ``None``;
    floats match up to a relative 1e-9 (``5e-4`` matches ``0.0005``). A field a config does
    not have never matches. Results are stamped dicts as written by
    :func:`nmst_lib.experiments.results.save_result` (their ``config`` entry).
    """
    out = []
    for r in results:
        config = r.get("config", {}) if isinstance(r, Mapping) else {}
        if all(k in config and _same(config[k], v) for k, v in fields.items()):
            out.append(r)
    return out


def _get_path(obj, path: str):
    for part in path.split("."):
        if isinstance(obj, Mapping) and part in obj:
            obj = obj[part]
        elif isinstance(obj, Sequence) and not isinstance(obj, str) and part.lstrip("-").isdigit():
            obj = obj[int(part)]
        else:
            raise KeyError(f"no {part!r} in the path {path!r}")
    return obj


def values(results: Iterable[Mapping], path: str | Callable[[Mapping], float]) -> np.ndarray:
    """One number from each result, as a float64 array: ``path`` is a dotted path into the
    result (``"metrics.val_ppl"``, ``"decoding.greedy.rnt.-1"``) or a function of the result.
    A missing entry raises ``KeyError`` naming the path. Used by Chapter 6 (``06_wikitext``)."""
    get = path if callable(path) else (lambda r: _get_path(r, path))
    return np.asarray([float(get(r)) for r in results], dtype=np.float64)


# ---------------------------------------------------------------------------------------
# Lengths and tokens of continuations
# ---------------------------------------------------------------------------------------


def stored_termination_steps(record: Mapping) -> np.ndarray:
    """Per context of a stored decoding record (one entry of a result's ``decoding``), the
    smallest step limit L under which the decoder terminates, as float64 (``inf``: not within
    the record's ``max_len``). r_nt(L) is the fraction of values > L (Choi, Cho, Lee 2023,
    eq. 11).

    Token-level decoders (greedy, sampling): the length of a terminated continuation (its
    first eos), ``inf`` for an unfinished one. Beam search (Welleck et al. 2020, Def. A.2):
    the stored ``first_finish_steps``, the first step at which any hypothesis finished
    (``None``: never), because a search limited to L steps returns a finished sequence
    exactly when one finished by step L, while the sequence returned at ``max_len`` may be a
    later, better-scoring one (Chapter 6, ``06_wikitext``; :func:`nmst_lib.metrics.termination_steps`
    for a live :class:`~nmst_lib.decoding.Generation`). A beam record without
    ``first_finish_steps`` (made before the field existed) raises ``ValueError``.
    """
    if record.get("method") == "beam":
        steps = record.get("first_finish_steps")
        if steps is None:
            raise ValueError(f"the beam record {record.get('decoder', '')!r} has no first_finish_steps (it predates "
                             f"them): its returned lengths give r_nt(L) only at L = max_len")
        return np.array([math.inf if s is None else float(s) for s in steps], dtype=np.float64)
    lengths = np.asarray(record["lengths"], dtype=np.float64)
    terminated = np.asarray(record["terminated"], dtype=bool)
    if lengths.shape != terminated.shape:
        raise ValueError("a decoding record needs equally long 'lengths' and 'terminated'")
    return np.where(terminated, lengths, math.inf)


def rnt_at(record: Mapping, L: int) -> float:
    """r_nt(L) = q(|y| > L) of a stored decoding record at any 1 <= L <= its ``max_len``
    (Choi, Cho, Lee 2023, eq. 11), from :func:`stored_termination_steps`. Welleck et al.
    (2020)'s r_L counts |y| >= L instead; for token-level decoders r_L = r_nt(L - 1). Used by
    Chapters 6 and 7."""
    if isinstance(L, bool) or not isinstance(L, numbers.Integral):
        raise TypeError(f"L must be an integer, got {L!r}")
    max_len = int(record["max_len"])
    if not 1 <= int(L) <= max_len:
        raise ValueError(f"L must satisfy 1 <= L <= max_len = {max_len}, got {L}")
    steps = stored_termination_steps(record)
    if steps.size == 0:
        raise ValueError("the record has no contexts: r_nt(L) is undefined")
    return float(np.mean(steps > int(L)))


def lengths_from_histogram(hist: Mapping) -> np.ndarray:
    """The individual lengths of a sparse histogram ``{"values": [...], "counts": [...]}``
    (the form results store, e.g. ``length_histogram`` and ``data_length_histogram``), as an
    int64 array sorted ascending. Used by Chapter 6 (``06_wikitext``)."""
    vals = np.asarray(hist["values"], dtype=np.int64)
    counts = np.asarray(hist["counts"], dtype=np.int64)
    if vals.shape != counts.shape or vals.ndim != 1:
        raise ValueError("a histogram needs equally long 1-D 'values' and 'counts'")
    if np.any(counts < 0):
        raise ValueError("histogram counts must be non-negative")
    return np.sort(np.repeat(vals, counts))


@dataclass(frozen=True)
class LengthSummary:
    """Lengths of ``n`` continuations: ``finished`` of them ended (with eos) and
    ``unfinished`` did not within the decoding limit; the statistics (median, mean,
    quartiles ``q1``/``q3``, ``max``) are over the finished ones (NaN when none)."""

    n: int
    finished: int
    unfinished: int
    median: float
    mean: float
    q1: float
    q3: float
    max: float


def length_summary(lengths, terminated=None) -> LengthSummary:
    """Summary of continuation lengths (eos included). ``terminated`` (booleans, optional)
    marks which continuations ended; the others are counted as ``unfinished`` and left out of
    the statistics, since their length is only the decoding limit."""
    arr = np.asarray(lengths, dtype=np.float64).ravel()
    done = np.ones(arr.shape, dtype=bool) if terminated is None else np.asarray(terminated, dtype=bool).ravel()
    if done.shape != arr.shape:
        raise ValueError("lengths and terminated must have the same length")
    fin = arr[done]
    if fin.size:
        q1, med, q3 = np.percentile(fin, [25, 50, 75])
        stats = (float(med), float(fin.mean()), float(q1), float(q3), float(fin.max()))
    else:
        stats = (math.nan,) * 5
    return LengthSummary(int(arr.size), int(done.sum()), int((~done).sum()), *stats)


def ks_distance(a, b) -> float:
    """The two-sample Kolmogorov-Smirnov distance sup_l |F_a(l) - F_b(l)| between two samples
    of lengths (``inf`` allowed: an unfinished continuation is longer than every finite
    length). 0 for equal distributions, 1 when every value of one sample lies below every
    value of the other. Used to say how close the continuation lengths are to the data's
    (Choi, Cho, Lee 2023, Figs. 8-9; Chapter 6, ``06_wikitext``)."""
    a = np.sort(np.asarray(a, dtype=np.float64).ravel())
    b = np.sort(np.asarray(b, dtype=np.float64).ravel())
    if a.size == 0 or b.size == 0:
        raise ValueError("both samples need at least one value")
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("lengths must not be NaN")
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / a.size
    fb = np.searchsorted(b, grid, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


def average_ranks(values) -> np.ndarray:
    """The ranks 1..n of ``values`` (float64), equal values sharing the mean of the ranks they
    span (``[10, 20, 20, 5]`` -> ``[2, 3.5, 3.5, 1]``): the ranks of Spearman's correlation with
    ties. ``values`` is a one-dimensional sequence of finite numbers."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"values must be a non-empty one-dimensional sequence, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("values must be finite numbers (no NaN or infinity)")
    order = np.argsort(x, kind="stable")
    _, first, counts = np.unique(x[order], return_index=True, return_counts=True)
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)  # mean of ranks first+1..first+k
    return ranks


def rank_correlation(x, y) -> float:
    """Spearman's rank correlation of two paired samples: the Pearson correlation of their
    :func:`average_ranks`, so that tied values (a temperature saturated at its bound, shared by
    many tokens) count as tied and not in the order they happen to be stored. Without ties it
    equals ``1 - 6 sum d_i^2 / (n (n^2 - 1))``. Chapter 9 (``09_temperature``) reads the
    contextual-temperature paper's Sec. 4.5 (frequent tokens get higher temperatures) with it.
    ``x`` and ``y``: equally long one-dimensional sequences of finite numbers, at least two, each
    with two or more distinct values (a constant sample has no rank order: ``ValueError``)."""
    rx, ry = average_ranks(x), average_ranks(y)
    if rx.size != ry.size:
        raise ValueError(f"x and y must be paired samples of equal length, got {rx.size} and {ry.size}")
    if rx.size < 2:
        raise ValueError("a rank correlation needs at least two pairs")
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        raise ValueError("a sample whose values are all equal has no rank order: the correlation is undefined")
    return float(np.corrcoef(rx, ry)[0, 1])


def ks_by_seed(runs, data_lengths, decoder: str = "greedy") -> tuple[np.ndarray, int]:
    """Each stored seed's :func:`ks_distance` from its ``decoder`` lengths (unfinished: longer
    than every real line, :func:`stored_termination_steps`) to the data's lengths, and the number
    of lengths of one seed. ``runs`` are the stored results of one model, one per seed, decoded
    on the same contexts. Two seeds of one model are two samples, never pooled into one: the
    noise band of a KS finding is :meth:`nmst_lib.findings.Band.ks_over_seeds` (Chapters 6-7)."""
    runs = list(runs)
    if not runs:
        raise ValueError("ks_by_seed needs the stored results of at least one seed")
    steps = []
    for r in runs:
        try:
            steps.append(stored_termination_steps(r["decoding"][decoder]))
        except (KeyError, TypeError):
            raise ValueError(f"a result has no {decoder!r} decoding record") from None
    sizes = {s.size for s in steps}
    if len(sizes) != 1:
        raise ValueError(f"the seeds were decoded on different numbers of contexts: {sorted(sizes)}")
    return np.array([ks_distance(s, data_lengths) for s in steps]), sizes.pop()


@dataclass(frozen=True)
class TokenShare:
    """``count`` occurrences of a token among ``total`` tokens; ``fraction`` = count / total
    (NaN when there are no tokens). Chapter 7 (``07_gpt2``) reads it from :func:`token_share`."""

    count: int
    total: int

    @property
    def fraction(self) -> float:
        return self.count / self.total if self.total else math.nan


def _tokens(text) -> list[str]:
    return text.split() if isinstance(text, str) else [str(t) for t in text]


def token_share(texts: Iterable, token: str = "<unk>", *, ignore: Iterable[str] = ("<eos>",)) -> TokenShare:
    """How often ``token`` occurs among the tokens of ``texts`` (whitespace-separated strings
    or token lists), leaving out the tokens in ``ignore`` (by default ``<eos>``, which ends a
    continuation and is not text). E.g. the ``<unk>`` rate of stored continuations, to set
    beside the data's (Chapter 7, ``07_gpt2``)."""
    if isinstance(texts, str):
        texts = [texts]
    skip = set(ignore)
    count = total = 0
    for text in texts:
        for t in _tokens(text):
            if t in skip:
                continue
            total += 1
            count += t == token
    return TokenShare(count, total)


def longest_run(text, token: str = "<unk>") -> int:
    """The length of the longest run of consecutive ``token`` in ``text`` (a whitespace-
    separated string or a token list)."""
    best = cur = 0
    for t in _tokens(text):
        cur = cur + 1 if t == token else 0
        best = max(best, cur)
    return best


@dataclass(frozen=True)
class Cycle:
    """A text ends with ``tokens`` repeated ``repeats`` times in a row (a loop of period
    ``len(tokens)``). Chapters 6 and 7 read it from :func:`repeating_tail`."""

    tokens: tuple[str, ...]
    repeats: int

    @property
    def period(self) -> int:
        return len(self.tokens)

    @property
    def covered(self) -> int:
        """How many tokens at the end of the text the repeats cover."""
        return self.period * self.repeats

    def canonical(self) -> tuple[str, ...]:
        """The cycle up to where it starts: its smallest rotation (``", <unk> <unk>"`` and
        ``"<unk> <unk> ,"`` are the same loop entered at different points)."""
        p = self.period
        return min(tuple(self.tokens[i:] + self.tokens[:i]) for i in range(p))

    def __str__(self) -> str:
        return " ".join(self.tokens)


def repeating_tail(text, *, max_period: int = 20, min_repeats: int = 3) -> Cycle | None:
    """The shortest cycle the text ends in: the smallest period p <= ``max_period`` such that
    the last p tokens occur at least ``min_repeats`` times in a row at the end of the text,
    with how many times they do; ``None`` if there is none. The degenerate loops of greedy
    search ("`, <unk> <unk> , <unk> <unk>` ...") are such tails. ``<eos>`` at the end is
    ignored (a cycle that was cut off by eos is still a cycle). Used by Chapters 6 and 7."""
    if isinstance(max_period, bool) or not isinstance(max_period, int) or max_period < 1:
        raise ValueError("max_period must be a positive integer")
    if isinstance(min_repeats, bool) or not isinstance(min_repeats, int) or min_repeats < 2:
        raise ValueError("min_repeats must be an integer >= 2")
    toks = _tokens(text)
    while toks and toks[-1] == "<eos>":
        toks = toks[:-1]
    for p in range(1, max_period + 1):
        if p * min_repeats > len(toks):
            break
        unit = toks[-p:]
        reps = 1
        while (reps + 1) * p <= len(toks) and toks[len(toks) - (reps + 1) * p:len(toks) - reps * p] == unit:
            reps += 1
        if reps >= min_repeats:
            return Cycle(tuple(unit), reps)
    return None


# ---------------------------------------------------------------------------------------
# Training status
# ---------------------------------------------------------------------------------------


def training_status(result: Mapping) -> dict:
    """How a run's training ended, from its stored ``metrics`` and ``config``. Used by Chapter 6
    (``06_wikitext``).

    Returns a dict with ``epochs_run``, ``best_epoch``, ``max_epochs``, ``stopped_early``,
    ``val_ppl_by_epoch`` (the stored history), ``last_drop`` (the relative fall of the
    validation perplexity over the last epoch, e.g. 0.10 for 10%; NaN with fewer than two
    epochs) and ``at_epoch_limit``: True when the best epoch is the last epoch allowed, i.e.
    training was cut by its epoch budget, not by early stopping on a validation plateau
    (the model is undertrained: more epochs would likely lower its perplexity).
    """
    metrics = result["metrics"]
    config = result.get("config", {})
    history = [h["val_ppl"] for h in metrics.get("history", [])]
    max_epochs = config.get("max_epochs")
    last_drop = (1.0 - history[-1] / history[-2]) if len(history) >= 2 else math.nan
    return {
        "epochs_run": metrics.get("epochs_run"),
        "best_epoch": metrics.get("best_epoch"),
        "max_epochs": max_epochs,
        "stopped_early": metrics.get("stopped_early"),
        "val_ppl_by_epoch": history,
        "last_drop": last_drop,
        "at_epoch_limit": max_epochs is not None and metrics.get("best_epoch") == max_epochs
        and not metrics.get("stopped_early", False),
    }


# ---------------------------------------------------------------------------------------
# Provenance
# ---------------------------------------------------------------------------------------


def _split_command(command: str) -> tuple[list[str], list[tuple[str, str | None]]]:
    toks = command.split()
    head = []
    i = 0
    while i < len(toks) and not toks[i].startswith("--"):
        head.append(toks[i])
        i += 1
    flags = []
    while i < len(toks):
        name = toks[i]
        value = None
        if i + 1 < len(toks) and not toks[i + 1].startswith("--"):
            value = toks[i + 1]
            i += 1
        flags.append((name, value))
        i += 1
    return head, flags


_WINDOWS_PATH = re.compile(r"^[A-Za-z]:[\\/]")


def _placeholder(name: str) -> str:
    return f"<{name.lstrip('-').replace('-', '_').upper()}>"


def _without_machine_paths(head: list[str], flags: list[tuple[str, str | None]]):
    """A stamped command with every absolute path (a folder of the machine that ran it, e.g.
    ``--out /tmp/sparse-results``) replaced by a placeholder named after its flag (``--out
    <OUT>``), and the interpreter's own path by ``python``: a page shows how to rerun the
    command, never where the maintainers' files were."""
    def absolute(value):
        return value is not None and (value.startswith("/") or value.startswith("~") or bool(_WINDOWS_PATH.match(value)))

    head = ["python" if i == 0 and absolute(word) and "python" in word.rsplit("/", 1)[-1] else
            ("<PATH>" if absolute(word) else word) for i, word in enumerate(head)]
    return head, [(name, _placeholder(name) if absolute(value) else value) for name, value in flags]


def shown_command(command: str) -> str:
    """A stamped command line as a page shows it: absolute paths replaced by placeholders named
    after their flag (``--out`` followed by a temporary folder becomes ``--out <OUT>``; see
    :func:`command_template`). Chapters 6-9 show commands through it (:func:`provenance_html`)."""
    if not command:
        return ""
    head, flags = _without_machine_paths(*_split_command(command))
    return " ".join(head + [name if value is None else f"{name} {value}" for name, value in flags])


def command_template(commands: Iterable[str]) -> str:
    """One line that describes many command lines: the common leading words, then every
    ``--flag`` in order of first appearance; a flag whose value differs between commands shows
    ``<FLAG>`` instead of the value, and a flag that only some commands have is in brackets.
    Absolute paths (folders of the machine that ran the command) become ``<FLAG>`` too.

    ``["run --arch rnn --seed 0", "run --arch lstm --seed 0 --eps 1e-4"]`` gives
    ``"run --arch <ARCH> --seed 0 [--eps 1e-4]"``. Commands whose leading words differ give
    ``"<several commands>"``. Chapters 6-9 show commands through it (:func:`provenance_html`).
    """
    cmds = [c for c in commands if c]
    if not cmds:
        return ""
    parsed = [_without_machine_paths(*_split_command(c)) for c in cmds]
    heads = {tuple(h) for h, _ in parsed}
    if len(heads) > 1:
        return "<several commands>"
    order: dict[str, None] = {}
    per_cmd = []
    for _, flags in parsed:
        d = {}
        for name, value in flags:
            order.setdefault(name, None)
            d[name] = value
        per_cmd.append(d)
    parts = list(parsed[0][0])
    for name in order:
        present = [d[name] for d in per_cmd if name in d]
        vals = set(present)
        if len(vals) == 1:
            (v,) = vals
            shown = name if v is None else f"{name} {v}"
        else:
            shown = f"{name} {_placeholder(name)}"
        parts.append(shown if len(present) == len(per_cmd) else f"[{shown}]")
    return " ".join(parts)


def _code_text(prov: Mapping) -> str:
    sha = prov.get("git_sha")
    text = sha[:10] if sha else "unknown commit"
    if prov.get("git_dirty"):
        text += " + local changes"
    elif prov.get("git_dirty") is False:
        text += " (clean)"
    return text


def provenance_rows(results: Iterable[Mapping]) -> list[dict]:
    """One flat row per result from its stamps: ``run`` (the key), ``profile``, ``training
    data``, ``seed``, ``code``, ``nmst_lib``, ``torch``, ``python``, ``device``, ``date
    (UTC)``, ``training (s)``, ``resumed`` and ``command``. Missing stamps show as empty. Used by
    Chapters 6-9 (:func:`provenance_html`)."""
    rows = []
    for r in results:
        prov = r.get("provenance", {}) or {}
        data = r.get("data", {}) or {}
        seeds = r.get("seeds", {}) or {}
        splits = data.get("splits", {}) or {}
        device = prov.get("device", "")
        if prov.get("device_name"):
            device += f" ({prov['device_name']}"
            device += f", {prov['threads']} thread{'s' if prov.get('threads') != 1 else ''})" if prov.get("threads") \
                else ")"
        resumed = prov.get("resumed_from")
        train_s = prov.get("train_seconds")
        rows.append({
            "run": r.get("key", ""),
            "profile": r.get("profile", ""),
            "training data": splits.get("train") or data.get("source", ""),
            "seed": seeds.get("torch", r.get("config", {}).get("seed", "")),
            "code": _code_text(prov),
            "nmst_lib": prov.get("nmst_lib", ""),
            "torch": prov.get("torch", ""),
            "python": prov.get("python", ""),
            "device": device,
            "date (UTC)": prov.get("date_utc", ""),
            "training (s)": round(float(train_s)) if train_s is not None else "",
            "resumed": f"from epoch {resumed['epoch']}" if isinstance(resumed, Mapping) and "epoch" in resumed
            else ("" if not resumed else str(resumed)),
            "command": shown_command(prov.get("command", "")),
        })
    return rows


@dataclass
class ProvenanceSummary:
    """What :func:`provenance_summary` found: ``common`` maps each stamp shared by every run
    to its value; ``groups`` has one row per group of runs (the group's config fields, the
    number of runs, and for each stamp that differs between runs its value or its range);
    ``full`` is :func:`provenance_rows`; ``varying`` names the stamps that differ. Used by
    Chapters 6-9 (:func:`provenance_html`)."""

    n: int
    common: dict
    groups: list[dict]
    full: list[dict]
    varying: list[str] = field(default_factory=list)


_SUMMARY_FIELDS = ("profile", "training data", "code", "nmst_lib", "torch", "python", "device", "date (UTC)",
                   "training (s)", "resumed", "command")


def _describe(vals: list) -> str:
    present = [v for v in vals if v not in ("", None)]
    distinct = list(dict.fromkeys(present))
    if not distinct:
        return ""
    if len(distinct) == 1:
        return str(distinct[0]) if len(present) == len(vals) else f"{distinct[0]} ({len(present)} of {len(vals)})"
    if all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in distinct):
        return f"{min(distinct):,}–{max(distinct):,}"
    if all(isinstance(v, str) for v in distinct) and all(len(v) >= 10 and v[4:5] == "-" for v in distinct):
        return f"{min(distinct)[:16].replace('T', ' ')} – {max(distinct)[:16].replace('T', ' ')}"
    if len(distinct) <= 3:  # a few values (e.g. two code versions): each with how many runs have it
        return ", ".join(f"{v} ×{present.count(v)}" for v in sorted(distinct, key=lambda v: -present.count(v)))
    return f"{len(distinct)} values"


def provenance_summary(results: Sequence[Mapping], group_by: Sequence[str] = ("arch", "head")) -> ProvenanceSummary:
    """Split the stamps of ``results`` into what every run shares (said once) and what differs
    (one compact row per group of runs with equal ``group_by`` config fields).

    Commands are compared through :func:`command_template`, so runs made by the same command
    with different arguments share one templated command line. Dates and training times that
    differ show as ranges. ARCHITECTURE.md, "Pages": long provenance goes in a dropdown under a
    short summary (:func:`provenance_html`). Chapter 6 (``06_wikitext``).
    """
    results = list(results)
    full = provenance_rows(results)
    common, varying = {}, []
    for f in _SUMMARY_FIELDS:
        vals = [row[f] for row in full]
        if f == "command":
            template = command_template(vals)
            if template:
                common[f] = template
            continue
        distinct = set(map(str, vals))
        if len(distinct) == 1:
            if vals and vals[0] not in ("", None):
                common[f] = vals[0]
        else:
            varying.append(f)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(results):
        config = r.get("config", {})
        groups.setdefault(tuple(config.get(k) for k in group_by), []).append(i)
    rows = []
    for key, idx in groups.items():
        row = {k: ("—" if v is None else v) for k, v in zip(group_by, key)}
        row["runs"] = len(idx)
        seeds = sorted({full[i]["seed"] for i in idx if full[i]["seed"] != ""})
        if seeds:
            row["seeds"] = ", ".join(map(str, seeds))
        for f in varying:
            row[f] = _describe([full[i][f] for i in idx])
        rows.append(row)
    return ProvenanceSummary(len(results), common, rows, full, varying)


_COMMON_LABELS = {
    "profile": "Profile", "training data": "Training data", "code": "Code (git commit)",
    "nmst_lib": "nmst_lib version", "torch": "torch", "python": "Python", "device": "Device",
    "date (UTC)": "Date (UTC)", "training (s)": "Training time (s)", "resumed": "Resumed",
    "command": "Command (each file stamps its own)",
}


def details_html(summary: str, content: str, *, open: bool = False) -> Html:
    """``content`` (HTML, e.g. a :func:`html_table`) inside a ``<details>`` element that shows
    only ``summary`` (plain text, escaped) until the reader opens it: secondary material that
    a page keeps out of the way (ARCHITECTURE.md, "Pages"). Used by Chapters 6-9."""
    return Html(f"<details{' open' if open else ''}><summary>{escape(summary)}</summary>{content}</details>")


def provenance_html(
    results: Sequence[Mapping],
    group_by: Sequence[str] = ("arch", "head"),
    *,
    intro: str | None = None,
    details_label: str | None = None,
) -> Html:
    """Provenance of many runs for a page: a short list of what all runs share, a compact
    table of what differs (grouped by ``group_by``), and the full per-run table inside a
    collapsed ``<details>`` element. ``intro`` (plain text, escaped) opens the summary.
    Everything comes from the stamps in the results (:func:`provenance_summary`). Used by
    Chapters 6-9."""
    s = provenance_summary(results, group_by)
    out = ['<div class="nmst-provenance">']
    if intro:
        out.append(f"<p>{escape(intro)}</p>")
    if s.common:  # one compact paragraph: the shared stamps, then the (templated) command on its own line
        facts = [f"<strong>{escape(_COMMON_LABELS.get(f, f))}:</strong> {escape(v)}"
                 for f, v in s.common.items() if f != "command"]
        out.append(f'<p class="nmst-provenance-common">{"; ".join(facts)}.')
        if "command" in s.common:
            out.append(f'<br><strong>{escape(_COMMON_LABELS["command"])}:</strong> '
                       f'<code>{escape(s.common["command"])}</code>')
        out.append("</p>")
    if s.groups and s.varying:
        out.append(html_table(s.groups))
    label = details_label or f"Full provenance of every run ({s.n} result files)"
    columns = [c for c in s.full[0]] if s.full else []
    out.append(details_html(label, html_table(s.full, columns, text_columns=("command",)) if s.full else ""))
    out.append("</div>")
    return Html("".join(out))
