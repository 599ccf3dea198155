"""The layout's rules, read from the source: no import circle anywhere in ``keyqueue`` (imports inside functions and
under ``TYPE_CHECKING`` count: a lazy import that dodges a circle is still one), and the lab depends on keyqueue,
never the reverse."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in (SRC / "keyqueue").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """Each keyqueue module -> the keyqueue modules it imports anywhere in its source (a ``from pkg import name``
    counts as an import of ``pkg.name`` when that is a module, else of ``pkg``)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    found.add(sub if sub in mods else module)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)):
                found.add(str(node.args[0].value))
        graph[name] = {m for m in found if m in mods and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
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


def test_no_import_circles() -> None:
    assert circles(import_graph()) == []


def test_the_checker_finds_a_circle() -> None:
    """Control: the same search reports a circle planted in a copy of the graph."""
    graph = import_graph()
    graph["keyqueue.clock"] = graph["keyqueue.clock"] | {"keyqueue.threaded"}  # threaded imports the clock
    assert any({"keyqueue.clock", "keyqueue.threaded"} <= set(c) for c in circles(graph))


def test_only_the_lab_imports_the_lab() -> None:
    graph = import_graph()
    users = {m for m, deps in graph.items() if not m.startswith("keyqueue.lab")
             and any(d == "keyqueue.lab" or d.startswith("keyqueue.lab.") for d in deps)}
    assert users == set()
