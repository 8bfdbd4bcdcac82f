"""No module of the package imports one that imports it back, directly or through others, at
the top or inside a function: data flows one way (shared vocabulary lives in a lower module,
e.g. ``core/aborts.py`` below ``core/state.py`` and ``core/failure.py``, ``perfrow.py`` below
both perftest workers). Importing a package's ``__init__`` is not counted: every submodule
import runs it, and the flavour dispatch lives there by design."""

from __future__ import annotations

import ast
import os
from typing import Dict, List, Set

PYTHON = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _modules() -> Dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(os.path.join(PYTHON, "symsched")):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path, PYTHON)[:-3].replace(os.sep, ".")
                out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def _imports(mod: str, mods: Dict[str, str]) -> Set[str]:
    """The package's modules ``mod`` imports anywhere in its source."""
    is_pkg = mods[mod].endswith("__init__.py")
    here = mod if is_pkg else mod.rsplit(".", 1)[0]
    names: List[str] = []
    with open(mods[mod], encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # ``from . import x`` imports the module x; ``from .m import f`` imports m
            names += [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    out = set()
    for n in names:
        while n and n not in mods:
            n = n.rpartition(".")[0]
        if n and n != mod:
            out.add(n)
    return out


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_in_the_package():
    mods = _modules()
    packages = {m for m, p in mods.items() if p.endswith("__init__.py")}
    graph = {m: _imports(m, mods) - packages for m in mods if m not in packages}
    # the scan sees what it must: lazy imports inside functions count too
    assert "symsched.mindspore.perftest" in graph["symsched.perftest"]
    assert {"symsched.core.aborts", "symsched.core.state"} <= graph["symsched.core.failure"]
    assert not _cycles(graph), _cycles(graph)


def test_the_scan_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
