"""Each content check of the website (site_checks.py) fails on a planted bad page and passes a
good one; no build, no browser. (The checks on the real pages are in test_site_content.py.)"""

from pathlib import Path

import pytest

import site_checks as checks

REPO = Path(__file__).resolve().parents[2]


def page(body: str) -> str:
    """A page shaped like sphinx-book-theme's: a print-only title, then the article."""
    return (
        "<!DOCTYPE html><html><head><script>const title = '<unk>';</script></head><body>"
        "<div class='onlyprint'><h1>Print title</h1></div>"
        f"<main><article class='bd-article' role='main'>{body}</article></main></body></html>"
    )


# --- 1. model tokens ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    "<td>Alan <unk> writes of reviewers</td>",
    "<pre>the end <eos></pre>",
    "<p>left <pad> <pad> padded</p>",
    "<p>a GPT-2 document<|endoftext|>and the next</p>",
    "<p>upper case <UNK> too</p>",
])
def test_raw_model_token_is_found_with_a_snippet(bad):
    problems = checks.raw_model_tokens(page(f"<table><tr>{bad}</tr></table>"))
    assert problems and "unescaped model token" in problems[0]
    assert any("line 1:" in p and bad.split("<")[1][:8].split()[0] in p for p in problems[1:]), problems


@pytest.mark.parametrize("good", [
    "<td>Alan &lt;unk&gt; writes of reviewers &lt;eos&gt;</td>",
    "<p>a GPT-2 document&lt;|endoftext|&gt;and the next</p>",
    "<img alt='a table of <unk> tokens' src='x.png'>",  # an attribute value is text, not markup
    "<script>const tokens = ['<unk>', '<eos>', '<|endoftext|>'];</script>",
    "<style>/* <pad> */</style>",
    "<p>x &lt; y and a<b>bold</b> tag</p>",
])
def test_escaped_or_non_markup_tokens_pass(good):
    assert checks.raw_model_tokens(page(good)) == []


def test_raw_token_count_and_line():
    html = page("<p>ok</p>\n<p><unk> <unk></p>\n<p><eos></p>")
    problems = checks.raw_model_tokens(html)
    assert problems[0].startswith("3 unescaped model token(s): 1 x <eos>, 2 x <unk>")
    assert problems[1].startswith("line 2: <unk>")
    assert problems[3].startswith("line 3: <eos>")


# --- 2. library names --------------------------------------------------------------------

CODE_CELL = """<div class="cell docutils container"><div class="cell_input docutils container">
<div class="highlight-ipython3 notranslate"><div class="highlight"><pre>{}</pre></div></div></div></div>"""


def highlighted(code: str) -> str:
    """Code as Pygments writes it: every token in a span, entities escaped."""
    import html

    return "".join(f'<span class="n">{html.escape(part)}</span>' for part in code.split("."))\
        .replace('</span><span class="n">', '</span><span class="o">.</span><span class="n">')


def test_library_names_are_collected_from_text_and_code():
    html = page(
        "<p>See <code class='docutils literal'><span class='pre'>nmst_lib.theory.half_life_bound(eps)</span></code>"
        " and nmst_lib.plots.</p>"
        + CODE_CELL.format(highlighted("%pip install nmst_lib\nfrom nmst_lib.decoding import (decode,\n"
                                       "    not_a_function)\nimport nmst_lib.metrics as M\nM.rnt_curve(g, Ls)\n"
                                       "from nmst_lib.experiments import results\nresults = {}\nresults.keys()"))
        + "<div class='toctree-wrapper'><p>nmst_lib.in_the_toc</p></div>"
    )
    names = checks.library_names(html)
    assert names == {"nmst_lib.theory.half_life_bound", "nmst_lib.plots", "nmst_lib.decoding", "nmst_lib.decoding.decode",
                     "nmst_lib.experiments",
                     "nmst_lib.decoding.not_a_function", "nmst_lib.metrics", "nmst_lib.metrics.rnt_curve",
                     "nmst_lib.experiments.results"}


def test_in_code_column_literals_are_collected():
    html = page(
        "<table><thead><tr><th>symbol</th><th>meaning</th><th>in code</th></tr></thead><tbody>"
        "<tr><td>a</td><td><code>not_this</code></td><td><code><span class='pre'>decode(...,</span> "
        "<span class='pre'>k=...)</span></code>, <code>beam_size</code></td></tr>"
        "<tr><td>b</td><td>x</td><td></td></tr></tbody></table>"
        "<table><thead><tr><th>symbol</th><th>code</th></tr></thead><tbody><tr><td>c</td><td><code>ignored</code></td></tr></tbody></table>"
    )
    assert checks.in_code_literals(html) == [("a", "decode(..., k=...)"), ("a", "beam_size")]


GOOD_NAMES = ["nmst_lib.theory.half_life_bound", "nmst_lib.decoding", "nmst_lib.decoding.decode", "nmst_lib.__main__",
              "nmst_lib.decoding.Generation.tokens", "nmst_lib.decoding.Generation.to_lists"]
BAD_NAMES = ["nmst_lib.foo", "nmst_lib.theory.foo", "nmst_lib.decoding.Generation.foo"]
GOOD_LITERALS = ["rnt_curve", "decode(..., k=...)", "decode", "max_len", "eos_id", "vocab_size", "Ls",
                 "Generation.tokens", "LongTensor[B, k]", "logits[..., eos_id]", "torch.sigmoid", "logsigmoid",
                 "eos_lower_bound(t, eps)", "half_life_bound(eps)", "nmst_lib.theory.half_life_bound"]
BAD_LITERALS = {
    "sparsemax_not_in_the_library": "not a public name",
    "entmax_bisect_not_in_the_library(z, alpha=1.5)": "not a public function or class",
    "decode(..., beam_width=...)": "no parameter(s) beam_width",
    "Generation.no_such_field": "no attribute 'no_such_field'",
    "torch.no_such_function": "no attribute",
    "nmst_lib.foo.bar": "has no attribute 'foo'",
    "q(|y| > L)": "not a Python expression",
}


@pytest.fixture(scope="module")
def unresolved():
    literals = [("row", literal) for literal in GOOD_LITERALS + list(BAD_LITERALS)]
    return dict(checks.resolve_library_names(GOOD_NAMES + BAD_NAMES, literals, root=REPO))


def test_names_that_do_not_exist_are_reported(unresolved):
    for name in BAD_NAMES:
        assert name in unresolved, (name, unresolved)
    assert "has no attribute 'foo'" in unresolved["nmst_lib.theory.foo"]


def test_names_that_exist_resolve(unresolved):
    assert not set(GOOD_NAMES) & set(unresolved), unresolved


@pytest.mark.parametrize("literal", GOOD_LITERALS)
def test_in_code_entries_that_exist_pass(unresolved, literal):
    assert literal not in unresolved, unresolved.get(literal)


@pytest.mark.parametrize("literal, reason", BAD_LITERALS.items())
def test_in_code_entries_that_do_not_exist_fail(unresolved, literal, reason):
    assert literal in unresolved and reason in unresolved[literal], (literal, unresolved.get(literal))


# --- 3. the intro's chapters -------------------------------------------------------------

PAGES = {"chapters/01_decoding.html": 1, "chapters/02_consistency.html": 2, "book/how_to_use.html": None}


def page_number(href: str):
    return PAGES.get(href.split("#")[0]) if href.split("#")[0] in PAGES else None


def intro(body: str) -> list[str]:
    toc = "<div class='toctree-wrapper'><ul><li>Chapter 9 in the toc, ignored</li></ul></div>"
    return checks.intro_chapter_problems(page(body + toc), page_number, existing_chapters={1, 2})


def test_intro_with_links_and_in_preparation_passes():
    assert intro(
        "<p>Decoding (<a href='chapters/01_decoding.html'>Chapter 1</a>) and consistency "
        "(<a href='chapters/02_consistency.html#section'>Chapter 2</a>).</p>"
        "<ul><li><p>Chapters 7-9: sparse output layers</p><p>(in preparation)</p></li></ul>"
        "<p>Chapters 1 and 2 (<a href='chapters/01_decoding.html'>decoding</a>, "
        "<a href='chapters/02_consistency.html'>consistency</a>).</p>"
    ) == []


def test_intro_chapter_without_link_fails():
    problems = intro("<p>Incomplete decoding breaks termination. (Chapters 1-2.)</p>")
    assert len(problems) == 2 and "no link to chapter 1's page" in problems[0] and "chapter 2" in problems[1]


def test_intro_range_with_one_link_fails_for_the_others():
    problems = intro("<p>Chapters 1-2 (<a href='chapters/01_decoding.html'>start here</a>).</p>")
    assert problems == [p for p in problems if "chapter 2" in p] and len(problems) == 1


def test_intro_link_to_a_missing_or_wrong_page_fails():
    assert intro("<p><a href='chapters/07_entmax.html'>Chapter 1</a></p>")  # no such page
    assert intro("<p><a href='chapters/02_consistency.html'>Chapter 1</a></p>")  # chapter 2's page


def test_intro_future_chapter_must_say_in_preparation():
    problems = intro("<p>Sparse output layers come in Chapter 7.</p>")
    assert len(problems) == 1 and "chapter 7 does not exist" in problems[0]
    assert intro("<p>Sparse output layers come in Chapter 7 (in preparation).</p>") == []


def test_intro_existing_chapter_said_in_preparation_still_needs_its_link():
    assert intro("<p>Chapter 2 (in preparation).</p>")


def test_intro_without_any_announcement_fails():
    assert intro("<p>No chapter is named here.</p>") == [
        "the intro announces no chapter ('Chapter N' / 'Chapters N-M' not found)"]


@pytest.mark.parametrize("text, numbers", [("1-4", [1, 2, 3, 4]), ("5, 6 and 8", [5, 6, 8]),
                                           ("7\u20139", [7, 8, 9]), ("3", [3])])
def test_chapter_numbers(text, numbers):
    assert checks.chapter_numbers(text) == numbers


def test_h1_number_reads_the_article_title():
    assert checks.h1_number(page("<h1><span class='section-number'>6. </span>Experiments</h1>")) == 6
    assert checks.h1_number(page("<h1>Notation</h1>")) is None


# --- 4. numbering ------------------------------------------------------------------------

THEOREM = ("<div class='proof theorem admonition' id='thm-ch4-x'><p class='admonition-title'>"
           "<span class='caption-number'>{} </span> (Title)</p><div class='section'>text</div></div>")
FIGURE = ("<figure class='align-default' id='fig-ch4-x'><img alt='{alt}' src='../_images/a.png'>"
          "<figcaption><p>{number}<span class='caption-text'>What it shows.</span></p></figcaption></figure>")
NUMBER = "<span class='caption-number'>Fig. {} </span>"
GOOD_CHAPTER = (
    THEOREM.format("Theorem 4.2")
    + FIGURE.format(alt="p(eos) against the step", number=NUMBER.format("4.1"))
    + "<p>As <a class='reference internal' href='#fig-ch4-x'><span class='std std-numref'>Fig. 4.1</span></a> shows, "
    "<a href='#thm-ch4-x'><span class='std std-ref'>Theorem 4.2</span></a> holds.</p>"
    + "<div class='cell_output'><pre>loss ?? nan</pre></div>"  # program output is not prose
)


def test_good_chapter_page_passes():
    assert checks.numbering_problems(page(GOOD_CHAPTER), chapter=4) == []


@pytest.mark.parametrize("bad, expected", [
    (THEOREM.format("Theorem 2.1"), "not numbered in chapter 4: 'Theorem 2.1'"),
    (THEOREM.format("Theorem 7"), "not numbered in chapter 4: 'Theorem 7'"),
    (THEOREM.format("Theorem"), "unnumbered: 'Theorem'"),
    (FIGURE.format(alt="curves", number=""), "figure #fig-ch4-x has no caption number 'Fig. 4.k'"),
    (FIGURE.format(alt="curves", number=NUMBER.format("6.1")), "no caption number 'Fig. 4.k'"),
    (FIGURE.format(alt="", number=NUMBER.format("4.2")), "an image without alt text"),
    (FIGURE.format(alt="curves", number=NUMBER.format("4.2")).replace("What it shows.", " "),
     "has a number but no caption text"),
    (FIGURE.format(alt="../_images/a.png", number=NUMBER.format("4.2")), "an image without alt text"),
    ("<div class='cell' id='cell-7'><div class='cell_output'><img alt='../_images/b.png' src='../_images/b.png'>"
     "</div></div>", "an image outside a numbered figure (unnumbered figure) in #cell-7"),
    ("<p>as Theorem ?? shows</p>", "'??' in the text"),
    ("<p>see <span class='xref std std-numref'>fig-ch4-missing</span></p>", "unresolved cross-reference"),
])
def test_planted_numbering_problem_is_found(bad, expected):
    problems = checks.numbering_problems(page(GOOD_CHAPTER + bad), chapter=4)
    assert len(problems) == 1 and expected in problems[0], problems


@pytest.mark.parametrize("title, ok", [
    ("<span class='section-number'>6. </span>Experiments on WikiText-2", True),
    ("<span class='section-number'>6. </span>6. Experiments", False),
    ("<span class='section-number'>6. </span>Chapter 6: Experiments", False),
    ("Experiments", False),
])
def test_chapter_title_carries_one_number(title, ok):
    html = page(f"<section><h1>{title}<a class='headerlink' href='#x'>#</a></h1></section>")
    assert (checks.title_problems(html) == []) is ok
