"""Raw WikiText for GPT-2 (Chapter 7, 07_gpt2): the text as running prose,
detokenised, from the hub's raw configurations or, without the hub, from
the local tokenised WikiText-2 (said plainly in the provenance).

GPT-2 was pretrained on ordinary text, so the lines it is fine-tuned on and
the continuations Chapter 7 shows must read like text
(:func:`wikitext_detokenize`). :func:`load_wikitext_raw` returns a
:class:`~nmst_lib.data.Corpus` whose :class:`~nmst_lib.data.DataDescription`
says which text it is; :mod:`.gpt2_bpe` tokenises it.
"""

from __future__ import annotations

import re

from .corpus import (
    HUB_DATASET,
    SPLITS,
    Corpus,
    DataDescription,
    _describe,
    _split_stats,
    drop_unk_markers,
    load_wikitext2,
    load_wikitext2_from_hub,
)
from .sources import (
    WikiTextUnavailable,
    _no_local_data_message,
    go_offline,
    hub_is_reachable,
    wikitext_dir,
)

__all__ = [
    "RAW_HUB_CONFIGS",
    "load_wikitext_raw",
    "wikitext_detokenize",
]

RAW_HUB_CONFIGS = {
    "wikitext-2": "wikitext-2-raw-v1",
    "wikitext-103": "wikitext-103-raw-v1",
}
"""Hub configurations of the raw (not ``<unk>``-replaced) WikiText text that
GPT-2 reads (Chapter 7, 07_gpt2)."""
_DATA_SOURCES = ("auto", "hub", "local", "substitute")


# --------------------------------------------------------------------------
# Detokenisation
# --------------------------------------------------------------------------

_DETOK_JOINERS = {"@-@": "-", "@,@": ",", "@.@": "."}
_DETOK_CLOSE = {
    *(".", ",", ";", ":", "!", "?", ")", "]", "}", "%"),
    *("'s", "'re", "'ve", "'ll", "'d", "'m", "n't", "'t"),
}
_DETOK_OPEN = {"(", "[", "{", "$"}
_HEADING = re.compile(r"^((?:= )*=) (.*?) ((?:= )*=)$")


def wikitext_detokenize(line: str) -> str:
    """Undo WikiText's tokenisation of one line into readable running text
    (Chapter 7, 07_gpt2): ``" @-@ "`` -> ``"-"``, ``" @,@ "`` -> ``","``,
    ``" @.@ "`` -> ``"."``; no space before closing punctuation
    (``. , ; : ! ? ) ] } %``) and clitics (``'s``, ``n't``, ...), none after
    opening brackets and ``$``; double quotes paired within the line
    (``" lobster red "`` -> ``"lobster red"``); a lone ``'`` after a word
    ending in s closes a plural possessive; headings ``= = Section = =`` ->
    ``== Section ==`` (article titles ``= Title =`` stay, so
    :func:`~nmst_lib.data.is_article_heading` still finds them). ``<unk>``
    is kept as text. Leading and trailing spaces are stripped. GPT-2 was
    pretrained on ordinary text, and the continuations shown in Chapter 7
    must read like text; WikiText-103's raw release keeps the tokenised
    spacing, the NMST paper (Choi, Cho, Lee (2023) Sec. 4.2) does not say
    whether it was undone.
    """
    if not isinstance(line, str):
        raise TypeError(f"line must be a str, got {type(line).__name__}")
    s = line.strip()
    if not s:
        return ""
    heading = _HEADING.match(s)
    if heading and heading.group(1).count("=") == heading.group(3).count("="):
        bars = "=" * heading.group(1).count("=")
        return f"{bars} {wikitext_detokenize(heading.group(2))} {bars}"
    return _join_tokens(s.split())


def _join_tokens(tokens: list[str]) -> str:
    """The tokens of one line joined as running text (the spacing rules of
    :func:`wikitext_detokenize`)."""
    out: list[str] = []
    glue_next = False  # no space before the next token
    open_quote = False
    for tok in tokens:
        if tok in _DETOK_JOINERS:
            out.append(_DETOK_JOINERS[tok])
            glue_next = True
            continue
        glue = glue_next or not out
        glue_next = False
        if tok in _DETOK_CLOSE:
            glue = True
        elif tok in _DETOK_OPEN:
            glue_next = True
        elif tok == '"':
            if open_quote:
                glue = True
            else:
                glue_next = True
            open_quote = not open_quote
        elif tok == "'" and out and out[-1].endswith("s"):
            glue = True
        out.append(tok if glue else " " + tok)
    return "".join(out)


def _detokenized_corpus(corpus: Corpus) -> Corpus:
    splits = {
        s: [wikitext_detokenize(line) for line in corpus.split(s)]
        for s in SPLITS
    }
    return Corpus(
        splits["train"], splits["valid"], splits["test"], corpus.description
    )


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def load_wikitext_raw(
    dataset: str = "wikitext-2",
    data_source: str = "auto",
    directory=None,
    substitute_seed: int = 0,
    *,
    hub_timeout: float = 2.0,
    drop_unk: bool = False,
) -> Corpus:
    """Raw WikiText text for GPT-2 fine-tuning (Choi, Cho, Lee (2023) Sec.
    4.2 and App. D; Welleck et al. (2020) Sec. 5.3; Chapter 7, 07_gpt2),
    every line passed through :func:`wikitext_detokenize`, with a
    :class:`~nmst_lib.data.DataDescription` that says plainly what it is.

    ``dataset``: ``"wikitext-2"`` or ``"wikitext-103"`` (the papers' GPT-2
    data). ``data_source``:

    * ``"hub"``: ``Salesforce/wikitext``, configuration
      ``wikitext-103-raw-v1`` or ``wikitext-2-raw-v1``
      (:data:`RAW_HUB_CONFIGS`), through ``datasets``; fails fast with
      :class:`~nmst_lib.data.WikiTextUnavailable` when the hub is
      unreachable (as :func:`~nmst_lib.data.load_wikitext2`).
    * ``"local"``: the local tokenised WikiText-2 folder (see
      :func:`~nmst_lib.data.wikitext_dir`): its own splits when it has a
      training file, else the named substitute
      :data:`~nmst_lib.data.SUBSTITUTE_NAME` (validation + test articles
      re-split by article with ``substitute_seed``, exactly as
      ``load_wikitext2("substitute")``); ``<unk>`` stays in the text.
    * ``"substitute"``: always that substitute.
    * ``"auto"``: for ``"wikitext-2"``, ``"local"`` when a local folder is
      configured, else the hub (as :func:`~nmst_lib.data.load_wikitext2`);
      for ``"wikitext-103"``, the hub when it is reachable, else ``"local"``
      (never silently: the description then says it is not WikiText-103).

    ``drop_unk``: delete the ``<unk>`` markers of the local tokenised text
    (:func:`~nmst_lib.data.drop_unk_markers`) before it is detokenised, so
    that none is left glued to punctuation (``<unk>,``); the hub's raw text
    has none, so there it changes nothing.
    """
    if not isinstance(drop_unk, bool):
        raise TypeError(f"drop_unk must be True or False, got {drop_unk!r}")
    if dataset not in RAW_HUB_CONFIGS:
        raise ValueError(
            f"dataset must be one of {tuple(RAW_HUB_CONFIGS)}, got {dataset!r}"
        )
    if data_source not in _DATA_SOURCES:
        raise ValueError(
            f"data_source must be one of {_DATA_SOURCES}, got {data_source!r}"
        )
    why = f"data_source={data_source!r} was asked for"
    if data_source == "auto":
        data_source, why = _choose_raw_source(dataset, directory, hub_timeout)
    if data_source == "hub":
        return _raw_from_hub(dataset, hub_timeout)
    return _raw_from_local(
        dataset, data_source, why, directory, substitute_seed, drop_unk
    )


def _display_name(dataset: str) -> str:
    return "WikiText-103" if dataset == "wikitext-103" else "WikiText-2"


def _choose_raw_source(
    dataset: str, directory, hub_timeout: float
) -> tuple[str, str]:
    """What ``data_source="auto"`` means for ``dataset`` here and now, and
    why (for the provenance); fails fast when neither the hub nor a local
    folder can serve it."""
    local_dir = wikitext_dir(directory)
    if dataset == "wikitext-103":
        source = "hub" if hub_is_reachable(hub_timeout) else "local"
        why = "the Hugging Face hub was not reachable"
    else:
        source = "local" if local_dir is not None else "hub"
        why = (
            "a local WikiText-2 folder is configured (data_source='auto' "
            "prefers it for wikitext-2)"
        )
    if source == "local" and local_dir is None:
        go_offline()
        raise WikiTextUnavailable(
            _no_local_data_message(
                f"{_display_name(dataset)} (raw) needs the Hugging Face hub, "
                "which is not reachable (probe of huggingface.co:443 failed "
                f"within {hub_timeout:g} s, or "
                "HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set)"
            )
        )
    return source, why


def _raw_from_hub(dataset: str, hub_timeout: float) -> Corpus:
    """The hub's raw configuration of ``dataset``, detokenised."""
    config = RAW_HUB_CONFIGS[dataset]
    name = _display_name(dataset)
    raw = load_wikitext2_from_hub(hub_timeout, config)
    splits = {
        s: [wikitext_detokenize(line) for line in raw[s]] for s in SPLITS
    }
    names = {
        s: f"{name} {s} (official, {config}, detokenised)" for s in SPLITS
    }
    source = (
        f"Hugging Face hub: {HUB_DATASET} ({config}), each line detokenised"
    )
    desc = _describe(source, HUB_DATASET, splits, names)
    desc.extra.update(
        {"dataset": dataset, "hub_config": config, "detokenized": True}
    )
    return Corpus(splits["train"], splits["valid"], splits["test"], desc)


def _raw_from_local(
    dataset: str,
    data_source: str,
    why: str,
    directory,
    substitute_seed: int,
    drop_unk: bool = False,
) -> Corpus:
    """The local tokenised WikiText-2 (or its substitute) standing in for
    the raw ``dataset``, its ``<unk>`` markers deleted first when
    ``drop_unk``, detokenised, with a description that says so."""
    config = RAW_HUB_CONFIGS[dataset]
    name = _display_name(dataset)
    local_source = "substitute" if data_source == "substitute" else "local"
    corpus = load_wikitext2(
        local_source, directory, substitute_seed=substitute_seed
    )
    if drop_unk:
        corpus = Corpus(
            *(drop_unk_markers(corpus.split(s)) for s in SPLITS),
            corpus.description,
        )
    corpus = _detokenized_corpus(corpus)
    old = corpus.description
    stats = {s: _split_stats(corpus.split(s)) for s in SPLITS}
    not_103 = " This is NOT WikiText-103." if dataset == "wikitext-103" else ""
    what = (
        "the local tokenised WikiText-2 (v1: rare words replaced by <unk>, "
        + ("the markers deleted" if drop_unk else "kept as text")
        + ")"
        + (" re-split by article" if old.substitute else "")
    )
    sentence = (
        f"Asked for {name} (raw) for GPT-2; the Hugging Face hub was not "
        f"used ({why}). Used instead: {what}, each line detokenised "
        f"(wikitext_detokenize) and tokenised with GPT-2's BPE.{not_103} "
        + (old.substitute or "The splits are WikiText-2's own (local files).")
    )
    desc = DataDescription(
        source=old.source + ", detokenised",
        location=old.location,
        splits={s: f"{v}, detokenised" for s, v in old.splits.items()},
        num_lines={s: v[0] for s, v in stats.items()},
        num_tokens={s: v[1] for s, v in stats.items()},
        num_articles={s: v[2] for s, v in stats.items()},
        substitute=sentence,
        substitute_seed=old.substitute_seed,
        extra={
            "dataset": dataset,
            "asked_for": f"{name} raw ({config})",
            "detokenized": True,
            "unk_in_text": not drop_unk,
            "is_wikitext103": False,
        },
    )
    return Corpus(corpus.train, corpus.valid, corpus.test, desc)
