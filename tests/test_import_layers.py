"""The project's imports point one way: no import circle anywhere (at module level or hidden in
a function), and the core imports nothing from the layers above it (pricing, loops, results).
Read from the source with ``ast``, so an import inside a function counts as much as one at
the top of a file."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("sim", "engine", "kernels", "calibration", "endpoint", "benchmarks", "scenarios")
ABOVE_THE_CORE = ("sim.pricing", "sim.loops", "sim.results")


def modules(root: Path = REPO) -> dict[str, Path]:
    """Every module of the project's packages, by dotted name (a package by its own name)."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file: ``from a import b`` names the
    module ``a.b`` when there is one, else ``a``; relative imports are resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # import a.b.c of a module a.b's attribute
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path = REPO) -> nx.DiGraph:
    mods = modules(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(mods)
    for name, path in mods.items():
        graph.add_edges_from((name, target) for target in imports(name, path, set(mods)))
    return graph


def circles(graph: nx.DiGraph) -> list[list[str]]:
    """The import circles: groups of modules that import one another, in a stable order."""
    return sorted(sorted(group) for group in nx.strongly_connected_components(graph) if len(group) > 1)


def test_no_import_circle_anywhere():
    found = circles(import_graph())
    assert not found, "import circles (module-level or in a function):\n" + "\n".join(
        " <-> ".join(group) for group in found)


def test_the_core_imports_nothing_above_it():
    graph = import_graph()
    wrong = sorted((a, b) for a, b in graph.edges
                   if (a == "sim.core" or a.startswith("sim.core.")) and b.startswith(ABOVE_THE_CORE))
    assert not wrong, "sim.core imports from the layers above it: " + ", ".join(f"{a} -> {b}" for a, b in wrong)


@pytest.mark.parametrize("hidden", [False, True])
def test_a_circle_is_found_at_module_level_and_in_a_function(tmp_path, hidden):
    """The check itself: two modules that import each other (one of them inside a function, or
    through a relative import) are a circle; a one-way import is not."""
    pkg = tmp_path / "sim" / "core"
    pkg.mkdir(parents=True)
    (tmp_path / "sim" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from sim.core import b\n")
    back = "def f():\n    from . import a\n" if hidden else "import sim.core.a\n"
    (pkg / "b.py").write_text(back)
    assert circles(import_graph(tmp_path)) == [["sim.core.a", "sim.core.b"]]
    (pkg / "b.py").write_text("X = 1\n")
    assert circles(import_graph(tmp_path)) == []
