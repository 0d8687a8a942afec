"""The package's import graph, against docs/architecture.md: no module
imports another that imports it back, and the arithmetic layer of the
table imports nothing above it (`_words`, at its bottom, nothing at all)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jax_softplus"


def _imports() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    graph = {}
    for name in modules:
        tree = ast.parse((PACKAGE / f"{name}.py").read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "jax_softplus":
                    found |= {a.name for a in node.names if a.name in modules}
                elif node.module.startswith("jax_softplus."):
                    found.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("jax_softplus."):
                        found.add(alias.name.split(".")[1])
        graph[name] = found - {name}
    return graph


def _layers() -> list[tuple[str, set[str]]]:
    """The table's layers, top first: (layer, its modules)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| ([a-z ]+) \| ([^|]+) \|", text, re.M)
    return [
        (layer, set(re.findall(r"`(\w+)`", modules)))
        for layer, modules in rows
        if layer != "layer"
    ]


def test_no_module_imports_one_that_imports_it_back():
    graph = _imports()
    state = {}

    def visit(name, path):
        state[name] = "open"
        for dep in sorted(graph[name]):
            if state.get(dep) == "open":
                cycle = path[path.index(dep) :] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, [*path, dep])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_the_arithmetic_imports_nothing_above_it():
    graph = _imports()
    layers = dict(_layers())
    arithmetic, versions = layers["arithmetic"], layers["versions"]
    assert arithmetic | versions <= set(graph), "the table names a module that is gone"
    for name in sorted(arithmetic):
        above = graph[name] - arithmetic - versions
        assert not above, f"{name} imports {sorted(above)}, above the arithmetic"
    assert not graph["_words"]
