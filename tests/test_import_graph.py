"""The library's modules import each other one way (ARCHITECTURE.md: data flows
one way): no import cycle, and the low layers import nothing of the
experiments, a chapter's set-up, the classroom kit or the command line.

The graph is read from the source with ``ast`` (every ``import`` and
``from ... import``, also those inside functions, which Python runs late
and a reader easily misses), so a cycle that only closes at run time is
found too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nmst_lib

PACKAGE = Path(nmst_lib.__file__).resolve().parent
UPPER = ("nmst_lib.experiments", "nmst_lib.notebook", "nmst_lib.classroom", "nmst_lib.__main__")
"""The layers on top (ARCHITECTURE.md's layers 4-6): they may import everything below them.
``nmst_lib.notebook``, a chapter's set-up, prints the code version the experiments stamp results
with, so it sits beside the classroom kit, above the experiments."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _imported(node, name: str, modules) -> list[str]:
    """The nmst_lib modules one import statement of module ``name`` names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: from the module's package, up level - 1
        package = (
            name if _is_package(name, modules) else name.rpartition(".")[0]
        )
        base_parts = package.split(".")
        base_parts = base_parts[: len(base_parts) - (node.level - 1)]
        base = ".".join(base_parts + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    # `from pkg import sub` imports the module pkg.sub when there is one
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    """Module -> the nmst_lib modules it imports (a submodule's import also
    runs its packages' ``__init__``, except the importer's own packages)."""
    modules = all_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets.update(_imported(node, name, modules))
        own = {name.rsplit(".", i)[0] for i in range(name.count(".") + 1)}
        edges = set()
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in modules and prefix not in own:
                    edges.add(prefix)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def is_upper(name: str) -> bool:
    return any(name == u or name.startswith(u + ".") for u in UPPER)


def test_the_graph_sees_every_kind_of_import():
    """The reader resolves what the library uses: relative imports at any
    depth, ``from . import module``, and imports inside functions."""
    graph = import_graph()
    assert "nmst_lib.files" in graph["nmst_lib.experiments.results"]
    assert "nmst_lib.data" in graph["nmst_lib.experiments.trainer"]  # from ..
    assert "nmst_lib.data.sources" in graph["nmst_lib.data.corpus"]
    assert "nmst_lib.heads" in graph["nmst_lib.models"]  # inside functions
    assert "nmst_lib.data.sources" in graph["nmst_lib.models"]
    assert "nmst_lib.experiments.trainer" in graph["nmst_lib.__main__"]


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_names_the_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_low_layers_import_nothing_from_the_layers_on_top():
    """files, data, heads, models, decoding, plots, ...: none of them
    imports the experiments, the classroom kit or the command line."""
    graph = import_graph()
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in graph.items()
        if not is_upper(name)
        for target in targets
        if is_upper(target)
    )
    assert not upward, "; ".join(upward)


def test_files_is_the_leaf():
    """nmst_lib.files, used by the data and the experiments alike, imports
    nothing of nmst_lib."""
    assert import_graph()["nmst_lib.files"] == set()
