"""The package's shape: no import circle between clusterkit's modules (docs/architecture.md §1).

import-linter's layers contract (in `.ci/run`) keeps lower layers from importing higher ones;
this test also catches a circle inside one layer or one package (two modules that import each
other, at module level or inside a function).  Imports under ``if TYPE_CHECKING:`` count: a
circle that only typing closes still ties the modules together (a type two modules share
belongs in the lower one, or in a small module of its own).  The package root counts too: its
lazy ``__init__`` imports the API's names for typing, so a module below the API that imported
``clusterkit`` itself (``from clusterkit import __version__``) would close a circle through it.
"""

from __future__ import annotations

from typing import Any

import pytest

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the test extra)")


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def _edges(graph: Any, mods: set[str]) -> dict[str, set[str]]:
    return {m: {n for n in graph.find_modules_directly_imported_by(m) if n in mods} for m in mods}


def test_the_graph_holds_typing_only_imports() -> None:
    """The test below would pass blind if the graph left ``if TYPE_CHECKING:`` imports out."""
    graph = grimp.build_graph("clusterkit", cache_dir=None)
    # clusterkit/__init__.py imports clusterkit.api for typing only (its names are lazy)
    assert "clusterkit.api" in graph.find_modules_directly_imported_by("clusterkit")


def test_no_import_circle_in_clusterkit() -> None:
    graph = grimp.build_graph("clusterkit", cache_dir=None)   # typing-only imports included
    circles = _circles(_edges(graph, set(graph.modules)))
    assert not circles, "import circles (typing-only imports counted): " + "; ".join(
        " <-> ".join(c) for c in circles)
