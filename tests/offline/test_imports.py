"""The code's import graph: no import circle, and the program never imports the tools that exercise it.

Every import counts, at the top of a module or inside a function (a lazy import still ties the two
modules together) or under `TYPE_CHECKING`; read from the source with `ast`, so nothing is imported."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from infra.offline.stackconfig import ROOT

PACKAGES = ("infra", "trainer")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def graph(edited: dict[Path, str] | None = None) -> dict[str, set[str]]:
    """Module -> the modules of PACKAGES it imports (`from a.b import c` names `a.b.c` when that is a
    module, else `a.b`); `edited` gives some files another text."""
    known = modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        text = (edited or {}).get(path) or path.read_text()
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in known else base
                    if target in known and target != name:
                        edges[name].add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in known and alias.name != name:
                        edges[name].add(alias.name)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(set(edges) | {t for ts in edges.values() for t in ts}):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
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
                    work.append((child, iter(sorted(edges.get(child, ())))))
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


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted(
        (module, target)
        for module, targets in edges.items()
        for target in targets
        if module.startswith("infra.program") and not target.startswith("infra.program")
    )


def test_no_module_imports_one_that_imports_it_back():
    assert circles(graph()) == []


def test_the_program_imports_nothing_of_the_tools_that_exercise_it():
    assert upward(graph()) == []


def test_both_checks_see_a_lazy_import_from_the_program_into_the_tools():
    """What platform.py once held: a function importing the stack file reader of the offline tools, which
    imports the program's config, which imports platform.py."""
    platform = ROOT / "infra" / "program" / "platform.py"
    lazy = "\n\ndef _facts():\n    from infra.offline.stackconfig import load_stack\n"
    edges = graph({platform: platform.read_text() + lazy})
    assert upward(edges) == [("infra.program.platform", "infra.offline.stackconfig")]
    assert ["infra.offline.stackconfig", "infra.program.config", "infra.program.platform"] in circles(edges)
