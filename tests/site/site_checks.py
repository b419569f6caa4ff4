"""The content checks of the built website as plain functions on HTML text (no browser).

``test_site_content.py`` runs them on every page of ``_build/html``; ``test_site_checks.py``
shows that each one fails on a planted bad page and passes a good one. Each function returns a
list of problems (strings a reader of the test output can act on); an empty list means the
page passes.

1. :func:`raw_model_tokens`: model tokens written into the HTML unescaped (``<unk>``,
   ``<eos>``, ``<pad>``, ``<bos>``, ``<|endoftext|>``). A browser reads ``<unk>`` as an
   unknown element and shows nothing; ``&lt;unk&gt;`` is what a page must hold.
2. :func:`library_names` (every ``nmst_lib.*`` name a page writes), :func:`in_code_literals`
   (the "in code" column of the notation tables) and :func:`resolve_library_names`, which
   imports them in a separate Python process with the book's own ``nmst_lib`` first on the path
   (the rule for the "in code" column is in :func:`check_in_code_literal`).
3. :func:`intro_chapter_problems`: every chapter the intro announces ("Chapter 7",
   "Chapters 1-4") links to that chapter's page, or says "in preparation" if the chapter
   does not exist.
4. :func:`numbering_problems`: caption numbers (boxes, figures, tables) carry the chapter's
   number, every figure has a number and every image in it alt text, no image outside a
   numbered figure, no "??" and no unresolved cross-reference.
5. :func:`build_machine_problems`: nothing of the machine that built the site on a page: no
   absolute path of a file system (``/work/...``, ``/tmp/...``, a virtualenv's
   ``site-packages``) and no stderr output block of an executed cell.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from bs4 import BeautifulSoup, Comment

# --------------------------------------------------------------------------- helpers


def soup_of(html: str) -> BeautifulSoup:
    return BeautifulSoup(html, "html.parser")


def article_of(soup: BeautifulSoup):
    """The page's own content: the article of sphinx-book-theme (no sidebars, no navigation)."""
    return soup.select_one("article.bd-article") or soup.find("article") or soup.find("main") or soup.body or soup


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# --------------------------------------------------------------------------- 1. raw model tokens

TAG_TOKENS = {"unk", "eos", "pad", "bos"}  # read by a browser as (unknown) elements
TEXT_TOKENS = ("<|endoftext|>",)  # not an element (a parse error), but unescaped all the same


class _RawTokens(HTMLParser):
    """Finds model tokens that the HTML parser sees as markup: the browser's view of the page."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=False)  # keep &lt; apart from a literal <
        self.source = source
        starts, offset = [0], 0
        for line in source.splitlines(keepends=True):
            offset += len(line)
            starts.append(offset)
        self._line_starts = starts
        self._raw_text = 0  # depth inside <script> / <style> (raw text, never rendered as HTML)
        self.found: list[tuple[int, str]] = []  # (offset in source, token)

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._line_starts[line - 1] + column

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._raw_text += 1
        elif tag in TAG_TOKENS:
            self.found.append((self._offset(), f"<{tag}>"))

    def handle_startendtag(self, tag, attrs):
        if tag in TAG_TOKENS:
            self.found.append((self._offset(), f"<{tag}/>"))

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._raw_text = max(0, self._raw_text - 1)
        elif tag in TAG_TOKENS:
            self.found.append((self._offset(), f"</{tag}>"))

    def handle_data(self, data):
        if self._raw_text or not data.startswith("<"):
            return
        offset = self._offset()
        for token in TEXT_TOKENS:
            if self.source.startswith(token, offset):
                self.found.append((offset, token))


def raw_model_tokens(html: str, max_snippets: int = 3) -> list[str]:
    """Unescaped model tokens in a page's raw HTML, each with its line and a snippet around it.

    Only what the browser parses as page content counts: text inside ``<script>``/``<style>``
    and inside attribute values is not rendered as markup and is skipped; ``&lt;unk&gt;`` is the
    escaped form and passes.
    """
    parser = _RawTokens(html)
    parser.feed(html)
    parser.close()
    if not parser.found:
        return []
    counts: dict[str, int] = {}
    for _, token in parser.found:
        counts[token] = counts.get(token, 0) + 1
    problems = [f"{len(parser.found)} unescaped model token(s): "
                + ", ".join(f"{n} x {t}" for t, n in sorted(counts.items()))]
    for offset, token in parser.found[:max_snippets]:
        line = html.count("\n", 0, offset) + 1
        snippet = _squeeze(html[max(0, offset - 80): offset + 80])
        problems.append(f"line {line}: {token} in ...{snippet}...")
    return problems


# --------------------------------------------------------------------------- 2. library names

LIBRARY = "nmst_lib"
_DOTTED = re.compile(r"(?<![\w.])nmst_lib(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_CODE_BLOCK = re.compile(r"highlight-(?:python3?|ipython3?|py|default)\b")
_FROM_IMPORT = re.compile(r"^\s*from\s+(nmst_lib(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#]+)", re.M)


def _names_in_code(code: str, aliases: dict[str, str]) -> set[str]:
    """The nmst_lib names a Python code block imports or reads through an imported name.

    ``from nmst_lib.x import a, b`` gives ``nmst_lib.x.a`` and ``nmst_lib.x.b``;
    ``import nmst_lib.x as y`` gives ``nmst_lib.x``; ``y.f`` or ``a.attr`` afterwards give
    ``nmst_lib.x.f`` and ``nmst_lib.x.a.attr`` (``aliases`` carries the imports from one
    code cell to the next, as a kernel does). IPython lines (``%pip``, ``!ls``) are dropped;
    code that still does not parse is searched for ``from nmst_lib... import`` lines only.
    """
    names: set[str] = set()
    source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())
    try:
        tree = ast.parse(source)
    except SyntaxError:
        for module, imported in _FROM_IMPORT.findall(source):
            for item in imported.strip("()").replace("\n", " ").split(","):
                parts = item.split()
                if parts and parts[0] != "*" and parts[0].isidentifier():
                    names.add(f"{module}.{parts[0]}")
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == LIBRARY:
            for alias in node.names:
                if alias.name != "*":
                    names.add(f"{node.module}.{alias.name}")
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == LIBRARY:
                    names.add(alias.name)
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        aliases[LIBRARY] = LIBRARY
    for node in ast.walk(tree):  # a name assigned anew no longer refers to the import
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            aliases.pop(node.id, None)
        elif isinstance(node, ast.arg):
            aliases.pop(node.arg, None)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in aliases:
                names.add(".".join([aliases[inner.id]] + chain[::-1]))
    return names


def library_names(html: str) -> set[str]:
    """Every ``nmst_lib.<...>`` name a page writes: in its rendered text (prose, inline code,
    code cells, outputs) and in the imports and attribute reads of its Python code blocks."""
    article = article_of(soup_of(html))
    for toc in article.select(".toctree-wrapper"):
        toc.decompose()
    names = set(_DOTTED.findall(article.get_text()))
    aliases: dict[str, str] = {}
    for block in article.find_all("div", class_=_CODE_BLOCK):
        pre = block.find("pre")
        if pre is not None and not block.find_parent(class_="cell_output"):
            names |= _names_in_code(pre.get_text(), aliases)
    return names


def in_code_literals(html: str) -> list[tuple[str, str]]:
    """``(row, literal)`` for every inline code literal in an "in code" column of a table.

    ``row`` is the text of the row's first cell (the symbol), to name the row in a failure.
    """
    literals = []
    for table in article_of(soup_of(html)).find_all("table"):
        header = [_squeeze(th.get_text()).lower() for th in table.select("thead th")]
        if "in code" not in header:
            continue
        column = header.index("in code")
        for row in table.select("tbody tr"):
            cells = row.find_all(["td", "th"], recursive=False)
            if len(cells) <= column:
                continue
            symbol = _squeeze(cells[0].get_text())[:60]
            for code in cells[column].find_all("code"):
                literals.append((symbol, _squeeze(code.get_text())))
    return literals


def resolve_library_names(names, literals=(), root: Path | None = None, python: str | None = None) -> list[str]:
    """Import every name (and check every "in code" literal) in a fresh Python process.

    ``root`` is the book's checkout: its ``nmst_lib`` is imported, not whichever one the test
    process has. Returns ``(name or literal, reason)`` for each one that does not resolve.
    """
    env = dict(os.environ)
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("MPLBACKEND", "Agg")
    request = json.dumps({"names": sorted(set(names)), "literals": list(literals)})
    done = subprocess.run([python or sys.executable, str(Path(__file__).resolve()), "--resolve"], input=request,
                          capture_output=True, text=True, env=env, cwd=str(root) if root else None, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the name resolver failed:\n{done.stdout}\n{done.stderr}")
    return [tuple(item) for item in json.loads(done.stdout.strip().splitlines()[-1])]


# --- run inside the resolver process ----------------------------------------------------


def _resolve_dotted(name: str):
    """Import the longest module prefix of ``name`` and getattr the rest (a dataclass field or an
    annotated attribute of a class counts as present). Returns the object or raises LookupError."""
    import importlib
    import importlib.util

    parts = name.split(".")
    if "__main__" in parts:  # importing it would run the command line: only check that it exists
        module = ".".join(parts[: parts.index("__main__") + 1])
        if importlib.util.find_spec(module) is None:
            raise LookupError(f"no module {module}")
        return None
    obj, error = None, None
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError as exc:
            error = error or exc
            continue
        rest = parts[cut:]
        break
    else:
        raise LookupError(f"cannot import {parts[0]}: {error}")
    for i, attr in enumerate(rest):
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
            continue
        fields = getattr(obj, "__dataclass_fields__", {}) or {}
        annotations = {}
        for klass in getattr(obj, "__mro__", ()):
            annotations.update(getattr(klass, "__annotations__", {}) or {})
        if isinstance(obj, type) and (attr in fields or attr in annotations) and i == len(rest) - 1:
            return None  # a field: present, no object to go further into
        where = ".".join(parts[: len(parts) - len(rest) + i])
        raise LookupError(f"{where} has no attribute {attr!r}")
    return obj


class _Api:
    """What the book's ``nmst_lib`` offers: public names of every module, and the parameter,
    field and attribute names of its public functions and classes."""

    def __init__(self):
        import importlib
        import inspect
        import pkgutil

        lib = importlib.import_module(LIBRARY)
        self.objects: dict[str, list] = {}  # public name -> objects of that name
        self.words: set[str] = set()  # parameters, fields, attributes
        modules = [lib]
        for info in pkgutil.walk_packages(lib.__path__, LIBRARY + "."):
            if any(part.startswith("_") for part in info.name.split(".")[1:]):
                continue  # private modules and __main__ (which would run the command line)
            try:
                modules.append(importlib.import_module(info.name))
            except ImportError:
                continue
        for module in modules:
            for name, obj in vars(module).items():
                if name.startswith("_") or inspect.ismodule(obj):
                    continue
                if (inspect.isclass(obj) or inspect.isroutine(obj)) and not str(
                        getattr(obj, "__module__", "") or "").startswith(LIBRARY):
                    continue  # imported from another package (torch.Tensor, typing.Any, ...)
                self.objects.setdefault(name, []).append(obj)
                self._collect_words(obj, inspect)

    def _collect_words(self, obj, inspect):
        def parameters(fn):
            try:
                self.words.update(inspect.signature(fn).parameters)
            except (TypeError, ValueError):
                pass

        if inspect.isroutine(obj):
            parameters(obj)
        elif inspect.isclass(obj):
            parameters(obj)
            for klass in obj.__mro__:
                if not str(getattr(klass, "__module__", "")).startswith(LIBRARY):
                    continue
                self.words.update(getattr(klass, "__annotations__", {}) or {})
                self.words.update(getattr(klass, "__dataclass_fields__", {}) or {})
                self.words.update(getattr(klass, "_fields", ()) or ())
                for name, member in vars(klass).items():
                    if name.startswith("_"):
                        continue
                    self.words.add(name)
                    target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                    if inspect.isroutine(target):
                        parameters(target)
                try:
                    self.words.update(re.findall(r"\bself\.([A-Za-z]\w*)\s*(?::[^=\n]*)?=(?!=)", inspect.getsource(klass)))
                except (OSError, TypeError):
                    pass

    def public(self, name: str):
        return self.objects.get(name, [])


EXTERNAL_NAMESPACES = ("torch", "torch.nn.functional")  # where a bare third-party name may live


def check_in_code_literal(literal: str, api: _Api) -> str | None:
    """Whether an entry of an "in code" column names something that exists; ``None`` if it does.

    The rule. The literal must parse as a Python expression (``...`` placeholders are valid
    Python: ``decode(..., k=...)``, ``logits[..., v]``). Then:

    * a call ``f(...)``: ``f`` must be a public function or class of ``nmst_lib`` (any module),
      and every keyword must be one of its parameters (unless it takes ``**kwargs``);
      positional arguments are placeholders and are not checked;
    * a subscript ``x[...]``: ``x`` is checked; the index is a placeholder;
    * a dotted name ``a.b.c``: rooted at ``nmst_lib`` or at an importable package (``torch``)
      it is imported and resolved with getattr; rooted at a public ``nmst_lib`` name
      (``Generation.tokens``) each part must be an attribute or a dataclass field;
    * a bare name: a public name of some ``nmst_lib`` module (``rnt_curve``), a parameter,
      field or attribute name of nmst_lib's public API (``max_len``, ``eos_id``, ``vocab_size``),
      or, for third-party code, a name in ``torch`` or ``torch.nn.functional`` (``logsigmoid``).
      So ``sparsemax`` fails when no module of ``nmst_lib`` defines it.
    """
    import importlib
    import importlib.util
    import inspect

    try:
        expression = ast.parse(literal, mode="eval").body
    except SyntaxError:
        return "not a Python expression"

    def dotted(node) -> list[str] | None:
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            return [node.id] + chain[::-1]
        return None

    def external(name: str) -> bool:
        for namespace in EXTERNAL_NAMESPACES:
            try:
                if hasattr(importlib.import_module(namespace), name):
                    return True
            except ImportError:
                continue
        return False

    def resolve(node, called: bool = False):
        """The objects the node names (a list; [] for a plain API word) or an error string."""
        chain = dotted(node)
        if chain is None:
            return "not a name"
        head, rest = chain[0], chain[1:]
        if head == LIBRARY or (rest and head not in api.objects and importlib.util.find_spec(head) is not None):
            try:
                return [_resolve_dotted(".".join(chain))]
            except LookupError as exc:
                return str(exc)
        candidates = api.public(head)
        if not rest:
            if candidates:
                return candidates
            if called:
                return f"{head} is not a public function or class of {LIBRARY}"
            if head in api.words or external(head):
                return []
            return (f"{head} is not a public name of any {LIBRARY} module, nor a parameter, field or attribute "
                    f"of its API, nor in {' / '.join(EXTERNAL_NAMESPACES)}")
        if not candidates:
            return f"{head} is not a public name of any {LIBRARY} module"
        errors = []
        for obj in candidates:
            module = getattr(obj, "__module__", None) or LIBRARY
            qualified = f"{module}.{getattr(obj, '__qualname__', head)}" if inspect.isclass(obj) or inspect.isroutine(obj) else None
            try:
                if qualified is None:
                    raise LookupError(f"{head} is a value, not a class or module")
                return [_resolve_dotted(".".join([qualified] + rest))]
            except LookupError as exc:
                errors.append(str(exc))
        return "; ".join(errors)

    def check(node) -> str | None:
        if isinstance(node, ast.Call):
            found = resolve(node.func, called=True)
            if isinstance(found, str):
                return found
            if not found:
                return f"{ast.unparse(node.func)} is not a function or class of {LIBRARY}"
            keywords = [k.arg for k in node.keywords if k.arg]
            missing = keywords
            for obj in found:
                if obj is None or not callable(obj):
                    continue
                try:
                    params = inspect.signature(obj).parameters
                except (TypeError, ValueError):
                    return None
                if any(p.kind is p.VAR_KEYWORD for p in params.values()):
                    return None
                missing = [k for k in keywords if k not in params]
                if not missing:
                    return None
            return f"{ast.unparse(node.func)} has no parameter(s) {', '.join(missing)}"
        if isinstance(node, ast.Subscript):
            return check(node.value)
        found = resolve(node)
        return found if isinstance(found, str) else None

    return check(expression)


def _resolver_main() -> None:
    request = json.loads(sys.stdin.read())
    sys.path.insert(0, os.getcwd())
    unresolved = []
    for name in request["names"]:
        try:
            _resolve_dotted(name)
        except LookupError as exc:
            unresolved.append((name, str(exc)))
        except Exception as exc:  # an import that fails for another reason is also a broken name
            unresolved.append((name, f"{type(exc).__name__}: {exc}"))
    if request["literals"]:
        api = _Api()
        for where, literal in request["literals"]:
            reason = check_in_code_literal(literal, api)
            if reason:
                unresolved.append((literal, reason))
    print(json.dumps(unresolved))


# --------------------------------------------------------------------------- 3. the intro's chapters

_MENTION = re.compile(r"\bChapters?\s+(\d+(?:\s*(?:-|\u2013|\u2014|to|,|and|&|or)\s*\d+)*)", re.I)
_BLOCKS = ["p", "li", "td", "th", "dd", "dt", "h1", "h2", "h3", "h4", "h5", "h6", "figcaption", "caption"]


def chapter_numbers(text: str) -> list[int]:
    """``"1-4"`` -> [1, 2, 3, 4]; ``"5, 6 and 8"`` -> [5, 6, 8]."""
    numbers: list[int] = []
    for piece in re.split(r"\s*(?:,|and|&|or)\s*", text):
        bounds = [int(x) for x in re.split(r"\s*(?:-|\u2013|\u2014|to)\s*", piece) if x.strip().isdigit()]
        if len(bounds) == 2 and bounds[0] <= bounds[1]:
            numbers.extend(range(bounds[0], bounds[1] + 1))
        else:
            numbers.extend(bounds)
    return numbers


def intro_chapter_problems(html: str, page_number, existing_chapters) -> list[str]:
    """Chapter announcements of the intro page that neither link to the chapter nor say "in preparation".

    Every mention "Chapter N" / "Chapters N-M" / "Chapters N, M and K" in the page's text (the
    table of contents excluded) is an announcement. Its unit is the list item it is in, else
    its paragraph (or table cell, heading). For each announced N:

    * if chapter N exists (``N in existing_chapters``), the unit must hold a link whose target
      page exists and is numbered N (``page_number(href)`` returns the target's chapter number,
      or ``None`` when the target page does not exist);
    * otherwise the unit must say "in preparation" (a link cannot work).

    Also fails when the page announces no chapter at all (the parser no longer sees them).
    """
    article = article_of(soup_of(html))
    for toc in article.select(".toctree-wrapper"):
        toc.decompose()
    problems, announced = [], 0
    for text in article.find_all(string=True):
        if isinstance(text, Comment) or text.find_parent(["script", "style"]):
            continue
        for match in _MENTION.finditer(str(text)):
            unit = text.find_parent("li") or text.find_parent(_BLOCKS)
            if unit is None:
                unit = text.parent
            unit_text = _squeeze(unit.get_text())
            linked = {page_number(a["href"]) for a in unit.find_all("a", href=True)}
            for number in chapter_numbers(match.group(1)):
                announced += 1
                if number in existing_chapters:
                    if number not in linked:
                        problems.append(f"{match.group(0)!r}: no link to chapter {number}'s page in: {unit_text[:160]!r}")
                elif "in preparation" not in unit_text.lower():
                    problems.append(f"{match.group(0)!r}: chapter {number} does not exist and the text does not say "
                                    f"'in preparation': {unit_text[:160]!r}")
    if not announced:
        problems.append("the intro announces no chapter ('Chapter N' / 'Chapters N-M' not found)")
    return sorted(set(problems), key=problems.index)


def h1_number(html: str) -> int | None:
    """The chapter number of a built page (its title's section number), ``None`` if unnumbered."""
    number = soup_of(html).select_one("h1 span.section-number")
    found = re.match(r"\s*(\d+)", number.get_text()) if number else None
    return int(found.group(1)) if found else None


# --------------------------------------------------------------------------- 4. numbering


def title_problems(html: str) -> list[str]:
    """A chapter title must carry one number: the table of contents' ("6. Experiments"), never a
    hand-typed one as well ("6. 6. Experiments", "6. Chapter 6: ...")."""
    heading = article_of(soup_of(html)).find("h1")  # not the print-only copy above the article
    if heading is None:
        return ["no chapter title (h1)"]
    span = heading.find("span", class_="section-number")
    number = _squeeze(span.get_text()) if span else ""
    title = _squeeze("".join(t for t in heading.find_all(string=True, recursive=False)))
    if not number:
        return [f"the chapter title has no number: {title!r}"]
    if re.match(r"(Chapter\s+)?\d+(\.|:|\s|$)", title, re.I):
        return [f"title numbered twice: {number} {title!r}"]
    return []


_CAPTION = re.compile(r"^(?P<kind>.*?)\s*(?P<number>\d+(?:\.\d+)*)?\s*$")
_UNRESOLVED_XREF = "span.xref, span.std-ref, span.std-numref, span.std-doc, span.prf, span.std-term"


def has_alt_text(img) -> bool:
    """A non-empty ``alt`` that is not the image's file name (Sphinx writes the path when none is given)."""
    alt = (img.get("alt") or "").strip()
    return bool(alt) and alt != (img.get("src") or "").strip() and not re.search(
        r"\.(png|jpe?g|svg|gif|webp)$", alt, re.I)


def numbering_problems(html: str, chapter: int) -> list[str]:
    """Numbers, captions and alt text on a chapter page numbered ``chapter``.

    * every caption number (theorem, lemma, definition, ... boxes of sphinx-proof, exercises,
      figures, tables) reads "<Kind> N.k" with N = ``chapter``: numbered per chapter;
    * every ``<figure>`` has a caption number "Fig. N.k", a caption text, and every ``<img>`` in it
      alt text (non-empty, not the file name); an ``<img>`` outside a figure is an unnumbered figure;
    * no "??" in the prose and no cross-reference left unresolved (an ``xref`` outside a link).
    """
    article = article_of(soup_of(html))
    problems = []
    for caption in article.select("span.caption-number"):
        if caption.find_parent("figure") is not None:
            continue  # figures: below
        text = _squeeze(caption.get_text())
        found = _CAPTION.match(text)
        parts = (found.group("number") or "").split(".") if found else []
        box = caption.find_parent(class_=re.compile(r"\b(proof|exercise|solution|figure|table)\b")) or caption.parent
        box_id = box.get("id") or (box.find_parent(id=True) or {}).get("id", "?")
        if not found or not found.group("number"):
            problems.append(f"unnumbered: {text!r} (#{box_id})")
        elif len(parts) < 2 or parts[0] != str(chapter):
            problems.append(f"not numbered in chapter {chapter}: {text!r} (#{box_id})")
    for figure in article.find_all("figure"):
        label = figure.get("id") or "?"
        number = figure.select_one("figcaption span.caption-number")
        text = _squeeze(number.get_text()) if number else ""
        if not re.match(rf"Fig\. {chapter}\.\d+$", text):
            problems.append(f"figure #{label} has no caption number 'Fig. {chapter}.k' (caption: "
                            f"{_squeeze(figure.figcaption.get_text())[:80] if figure.figcaption else 'none'!r})")
        elif not _squeeze(figure.figcaption.get_text()).removeprefix(text).strip():
            problems.append(f"figure #{label} ({text}) has a number but no caption text")
        for img in figure.find_all("img"):
            if not has_alt_text(img):
                problems.append(f"figure #{label}: an image without alt text (alt={img.get('alt')!r})")
    for img in article.find_all("img"):
        if img.find_parent("figure") is None:
            output = img.find_parent(class_="cell") or img.parent
            problems.append(f"an image outside a numbered figure (unnumbered figure) in "
                            f"#{output.get('id') or (output.find_previous(id=True) or {}).get('id', '?')}: "
                            f"alt={img.get('alt')!r}")
    prose = BeautifulSoup(str(article), "html.parser")
    for skip in prose.select("pre, code, .cell_output, script, style"):
        skip.decompose()
    text = prose.get_text()
    for found in re.finditer(r"\?\?", text):
        problems.append(f"'??' in the text: ...{_squeeze(text[max(0, found.start() - 60): found.end() + 60])}...")
    for xref in article.select(_UNRESOLVED_XREF):
        if xref.find_parent("a") is None and "py" not in (xref.get("class") or []):
            problems.append(f"unresolved cross-reference: {_squeeze(xref.get_text())!r}")
    return problems


# --------------------------------------------------------------------------- 5. the build machine

# An absolute POSIX path into a machine's file system (a home, a temporary or a system folder),
# a Windows drive path, or a virtualenv's package folder. URLs (``https://host/tmp/x``) are not
# paths: the look-behind refuses a path that follows a word character, a dot, a colon or a slash.
_ABSOLUTE_PATH = re.compile(
    r"(?<![\w.:/~-])/(?:work|home|tmp|root|usr|opt|var|srv|mnt|private|Users|scratch|content)/[\w.@+-]+(?:/[\w.@+-]*)*"
    r"|\b[A-Za-z]:\\\\?[\w.-]+\\"
    r"|[\w.-]*site-packages/[\w./-]+"
)


def build_machine_problems(html: str, max_snippets: int = 3) -> list[str]:
    """What a page shows of the machine that built it: absolute paths and stderr output blocks.

    The page's article is read as text, code cells and outputs included (a path printed by a cell
    is on the page as much as one in the prose); scripts and styles are skipped. myst-nb writes a
    cell's standard error as ``<div class="output stderr ...">``: any such block is a problem, since
    a warning on a page is either a real problem to fix or noise to silence at its cause.
    """
    article = article_of(soup_of(html))
    problems = []
    for stderr in article.select("div.output.stderr, div.stderr"):
        cell = stderr.find_parent(id=True)
        problems.append(f"stderr block in {('#' + cell['id']) if cell else 'a cell'}: "
                        f"{_squeeze(stderr.get_text())[:120]!r}")
    text_soup = BeautifulSoup(str(article), "html.parser")
    for skip in text_soup.select("script, style"):
        skip.decompose()
    text = text_soup.get_text()
    found = list(_ABSOLUTE_PATH.finditer(text))
    if found:
        paths = sorted({m.group(0) for m in found})
        problems.append(f"{len(found)} absolute path(s) of the build machine: " + ", ".join(paths[:5]))
        for m in found[:max_snippets]:
            problems.append(f"  ...{_squeeze(text[max(0, m.start() - 60): m.end() + 30])}...")
    return problems


_SUBWORD_MARK = "\u2581"
"""The mark a stored subword piece carries at the start of a word (``"▁the"``,
``nmst_lib.data.WORD_START``): a raw model token when a page shows it."""


def raw_token_problems(html: str, max_snippets: int = 3) -> list[str]:
    """Raw model tokens on a page: subword pieces with their word-start mark, which a chapter must
    turn into words (``nmst_lib.data.tokens_text``) or labels (``token_labels``) first. Read like
    :func:`build_machine_problems`, outputs, figure menus and tables included (scripts and styles
    skipped)."""
    text_soup = BeautifulSoup(str(article_of(soup_of(html))), "html.parser")
    for skip in text_soup.select("script, style"):
        skip.decompose()
    text = text_soup.get_text()
    found = [i for i, ch in enumerate(text) if ch == _SUBWORD_MARK]
    problems = [f"{len(found)} raw subword mark(s) (U+2581) on the page"] if found else []
    for i in found[:max_snippets]:
        problems.append(f"  ...{_squeeze(text[max(0, i - 50): i + 50])}...")
    return problems


if __name__ == "__main__" and sys.argv[1:] == ["--resolve"]:
    _resolver_main()
