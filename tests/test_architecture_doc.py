"""ARCHITECTURE.md stays true: what it names exists, and the library keeps its layers.

1. Every repository path the document writes in backticks (``nmst_lib/experiments/results.py``,
   ``scripts/book.sh``, ``data/README.md``) exists; ``<key>`` placeholders stand for any name
   (the folder before them must exist), ``*`` globs must match a file, ``{a,b}`` lists every
   alternative.
2. Every dotted name ``nmst_lib.x.y`` it writes is a module of the repository's library, or a
   module followed by attributes that exist in it.
3. Its "Layers" table names every top-level module and package of ``nmst_lib`` once, each
   one exists, and no module imports from a layer above its own (imports inside functions
   included): data flows one way. ``nmst_lib._validation`` is below every layer, and the
   package root (``nmst_lib.__version__``) may be read by any module.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "ARCHITECTURE.md"
LIBRARY = REPO / "nmst_lib"
TOP_LEVEL = ("nmst_lib", "scripts", "tests", "book", "chapters", "assignments", "benchmarks", "binder",
             "data", ".ci")
BELOW_EVERY_LAYER = {"_validation"}


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- 1. paths


def _expand_braces(token: str) -> list[str]:
    match = re.search(r"\{([^{}]*,[^{}]*)\}", token)
    if not match:
        return [token]
    return list(itertools.chain.from_iterable(
        _expand_braces(token[:match.start()] + choice + token[match.end():]) for choice in match.group(1).split(",")))


def repository_paths(text: str) -> list[str]:
    """The repository paths written in backticks (split at spaces), braces expanded."""
    paths = []
    for span in re.findall(r"`([^`\n]+)`", text):
        for token in span.split():
            token = token.rstrip(".,;:)")
            if "/" in token and token.split("/")[0] in TOP_LEVEL:
                paths += _expand_braces(token)
    return sorted(set(paths))


def path_problem(path: str, root: Path = REPO) -> str | None:
    """None when ``path`` exists under ``root`` (placeholders and globs as the module says)."""
    parts = path.rstrip("/").split("/")
    if any("<" in p for p in parts):
        parts = parts[:next(i for i, p in enumerate(parts) if "<" in p)]
        return None if (root / "/".join(parts)).is_dir() else f"{'/'.join(parts)}/ does not exist"
    if "*" in path:
        return None if any(root.glob(path)) else "matches no file"
    return None if (root / path).exists() else "does not exist"


@pytest.mark.parametrize("path", repository_paths(_text()))
def test_every_path_the_document_names_exists(path):
    problem = path_problem(path)
    assert problem is None, f"ARCHITECTURE.md names {path}: {problem}"


# --------------------------------------------------------------------------- 2. dotted names


def dotted_names(text: str) -> list[str]:
    return sorted(set(re.findall(r"\bnmst_lib(?:\.[A-Za-z_]\w*)+", text)))


def _is_module(parts: list[str], root: Path = REPO) -> bool:
    base = root.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def dotted_problem(name: str, root: Path = REPO) -> str | None:
    """None when ``name`` is a module of the library under ``root`` or a module's attribute."""
    parts = name.split(".")
    cut = max((i for i in range(1, len(parts) + 1) if _is_module(parts[:i], root)), default=0)
    if cut == 0:
        return "no such module"
    if cut == len(parts):
        return None
    obj = importlib.import_module(".".join(parts[:cut]))
    for attribute in parts[cut:]:
        if not hasattr(obj, attribute):
            return f"{'.'.join(parts[:cut])} has no {'.'.join(parts[cut:])} (no module of that name either)"
        obj = getattr(obj, attribute)
    return None


@pytest.mark.parametrize("name", dotted_names(_text()))
def test_every_dotted_name_the_document_writes_exists(name):
    problem = dotted_problem(name)
    assert problem is None, f"ARCHITECTURE.md names {name}: {problem}"


# --------------------------------------------------------------------------- 3. layers


def layer_table(text: str) -> dict[str, int]:
    """The "Layers" table: top-level module or package name -> layer number."""
    section = text.split("### Layers", 1)[1].split("\n#", 1)[0]
    layers = {}
    for number, cell in re.findall(r"^\|\s*(\d+)\s*\|([^|]*)\|", section, flags=re.MULTILINE):
        for name in re.findall(r"`([\w.]+)`", cell):
            if name in layers:
                raise ValueError(f"{name} is in layers {layers[name]} and {number}")
            layers[name] = int(number)
    return layers


def library_units(root: Path = LIBRARY) -> list[str]:
    """The top-level modules and packages of the library (not ``_validation``, not data folders)."""
    units = [p.stem for p in root.glob("*.py") if p.name != "__init__.py"]
    units += [p.name for p in root.iterdir() if (p / "__init__.py").is_file()]
    return sorted(u for u in units if u not in BELOW_EVERY_LAYER)


def _unit_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "nmst_lib" else None


def imported_units(path: Path, root: Path = LIBRARY) -> set[str]:
    """The top-level library units ``path`` imports from, anywhere in the file."""
    # the package a relative import starts from: a module's folder (for __init__, the package)
    package = list(path.relative_to(root.parent).parts[:-1])
    units = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            units |= {_unit_of(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            unit = _unit_of(module)
            if unit is None and module == "nmst_lib":
                units |= {a.name for a in node.names}
            else:
                units.add(unit)
    return {u for u in units if u}


def layer_violations(layers: dict[str, int], root: Path = LIBRARY) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if "public_tests" in relative.parts or relative == Path("__init__.py"):
            continue
        own = relative.parts[0].removesuffix(".py")
        if own in BELOW_EVERY_LAYER or own not in layers:
            continue
        for unit in sorted(imported_units(path, root)):
            if unit == own or unit in BELOW_EVERY_LAYER or unit not in layers:
                continue
            if layers[unit] >= layers[own]:
                problems.append(f"nmst_lib/{relative} (layer {layers[own]}) imports {unit} (layer {layers[unit]})")
    return problems


def test_the_layers_table_names_every_top_level_module_once():
    layers = layer_table(_text())
    units = library_units()
    assert sorted(set(units) - set(layers)) == [], "modules of nmst_lib missing from ARCHITECTURE.md's Layers table"
    assert sorted(set(layers) - set(units)) == [], "Layers table names modules nmst_lib does not have"


def test_no_module_imports_from_a_layer_above_its_own():
    problems = layer_violations(layer_table(_text()))
    assert not problems, "imports against the direction of ARCHITECTURE.md's layers:\n" + "\n".join(problems)


# --------------------------------------------------------------------------- 4. one design document

OLD_BRIEF = "DESIGN" + ".md"  # the starting brief, outside the repository
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".yml", ".yaml", ".toml", ".sh", ".txt", ".cff", ".cfg", ".js", ".css"}
SKIPPED_FOLDERS = {".git", ".venv", "_build", "node_modules", "__pycache__", "vendor"}


def files_citing(needle: str, root: Path = REPO) -> list[str]:
    """The repository's text files that contain ``needle``."""
    found = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if SKIPPED_FOLDERS & set(relative.parts) or path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        if needle in path.read_text(encoding="utf-8", errors="replace"):
            found.append(str(relative))
    return found


def test_every_design_reference_points_at_the_architecture_document():
    assert files_citing(OLD_BRIEF) == [], f"these files cite {OLD_BRIEF}, which is not in the repository; cite ARCHITECTURE.md"


def test_the_book_shows_the_document():
    """book/architecture.md includes ARCHITECTURE.md (not a copy), and the table of contents lists it."""
    page = (REPO / "book" / "architecture.md").read_text(encoding="utf-8")
    assert "```{include} ../ARCHITECTURE.md" in page
    assert re.search(r"^\s*- file: book/architecture\s*$", (REPO / "_toc.yml").read_text(encoding="utf-8"), re.MULTILINE)


# --------------------------------------------------------------------------- the checks can fail


def test_the_checks_catch_a_missing_path_a_missing_name_and_an_upward_import(tmp_path):
    assert repository_paths("`nmst_lib/a.py`, `scripts/x.sh --y`, `~/.cache/z`, `data/{b,c}.md`") == [
        "data/b.md", "data/c.md", "nmst_lib/a.py", "scripts/x.sh"]
    assert path_problem("nmst_lib/heads/modules.py") is None
    assert path_problem("nmst_lib/no_such_module.py") == "does not exist"
    assert path_problem("nmst_lib/published_results/<key>.json") is None
    assert path_problem("nmst_lib/published_results/*/*.json") is None
    assert dotted_problem("nmst_lib.heads.NMSTHead") is None
    assert dotted_problem("nmst_lib.heads.no_such_name").startswith("nmst_lib.heads has no")
    assert dotted_problem("nmst_lib_other.x") == "no such module"
    assert layer_table("### Layers\n\n| 0 | `a`, `b` | x |\n| 1 | `c` | y |\n\n## Next\n") == {"a": 0, "b": 0, "c": 1}

    library = tmp_path / "nmst_lib"
    (library / "pkg").mkdir(parents=True)
    (library / "__init__.py").write_text("")
    (library / "low.py").write_text("def f():\n    from .pkg import high\n")
    (library / "pkg" / "__init__.py").write_text("from .. import low\n")
    (library / "pkg" / "high.py").write_text("from ..low import f\nfrom . import other\n")
    assert library_units(library) == ["low", "pkg"]
    assert imported_units(library / "low.py", library) == {"pkg"}
    assert imported_units(library / "pkg" / "high.py", library) == {"low", "pkg"}
    assert layer_violations({"low": 0, "pkg": 1}, library) == ["nmst_lib/low.py (layer 0) imports pkg (layer 1)"]
    (library / "pkg" / "notes.md").write_text(f"see {OLD_BRIEF}\n")
    assert files_citing(OLD_BRIEF, tmp_path) == ["nmst_lib/pkg/notes.md"]
