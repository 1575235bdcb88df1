"""The package's import graph: no module reaches itself through its imports, and only the
composition root (``kubeacc.cli``), the testbed and the synthetic hosts themselves import
``kubeacc.synthetic`` (docs/architecture.md).

Every import counts, those inside functions and under ``TYPE_CHECKING`` too: a circle there is
the same design knot, only deferred."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import kubeacc

PACKAGE = Path(kubeacc.__file__).parent
#: Who may import the synthetic host: the composition root chooses it, the testbed builds it.
SYNTHETIC_USERS = ("kubeacc.synthetic", "kubeacc.testbed", "kubeacc.cli")


def _modules(package: Path) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imported(path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The package's modules that ``path`` imports (``from m import name`` counts ``m.name``
    when that is a module)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in modules:
                yield node.module
            yield from (
                f"{node.module}.{a.name}"
                for a in node.names
                if f"{node.module}.{a.name}" in modules
            )


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, read from the sources under ``package``."""
    modules = _modules(package)
    return {name: set(_imported(path, modules)) - {name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_finder_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_circle_in_the_package() -> None:
    graph = import_graph()
    assert graph.get("kubeacc.agent.runner")
    assert cycles(graph) == []


def test_only_the_composition_root_imports_the_synthetic_host() -> None:
    users = {
        name
        for name, imports in import_graph().items()
        if any(m.startswith("kubeacc.synthetic") for m in imports)
        and not name.startswith(SYNTHETIC_USERS)
    }
    assert users == set()
