"""The code's import graph: no import circle, and the program never imports the tools that exercise it.

Every import counts, at the top of a module or inside a function (a lazy import still ties the two
modules together) or under `TYPE_CHECKING`; read from the source with `ast`, so nothing is imported."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from infra.stackconfig import ROOT

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


def _paths(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def map_rows() -> list[tuple[list[str], list[str]]]:
    """CONTRIBUTING.md's map of infra/: per row, its folders or files and what they may import."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("### The map of `infra/`", 1)[1].split("| --- |", 1)[1]
    rows = []
    for line in section.splitlines()[1:]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((_paths(cells[0]), _paths(cells[3])))
    return rows


def _module_prefix(path: str) -> str:
    """`infra/program/job/` -> `infra.program.job`; `infra/stackconfig.py` -> `infra.stackconfig`."""
    return path.removesuffix("/").removesuffix(".py").replace("/", ".")


def owner(module: str, rows: list[tuple[list[str], list[str]]]) -> str | None:
    """The map's entry (folder or file, as a module prefix) that holds `module`: the longest that does."""
    found = [
        _module_prefix(path)
        for paths, _ in rows
        for path in paths
        if module == _module_prefix(path) or module.startswith(_module_prefix(path) + ".")
    ]
    return max(found, key=len, default=None)


def breaches(edges: dict[str, set[str]], rows: list[tuple[list[str], list[str]]]) -> list[str]:
    """Each import the map does not allow: `module -> target`."""
    allowed = {
        _module_prefix(path): {_module_prefix(a) for a in may} for paths, may in rows for path in paths
    }
    rows_of = {
        _module_prefix(path): {_module_prefix(p) for p in paths} for paths, _ in rows for path in paths
    }
    found = []
    for module, targets in edges.items():
        home = owner(module, rows)
        for target in targets:
            there = owner(target, rows)
            if home is None or there is None or there in rows_of[home]:
                continue
            if not any(there == a or there.startswith(a + ".") for a in allowed[home]):
                found.append(f"{module} -> {target}")
    return sorted(found)


def test_no_module_imports_one_that_imports_it_back():
    assert circles(graph()) == []


def test_the_program_imports_nothing_of_the_tools_that_exercise_it():
    assert upward(graph()) == []


def test_every_module_has_a_place_on_the_map():
    rows = map_rows()
    assert len(rows) >= 10
    unplaced = [name for name, path in modules().items() if owner(name, rows) is None]
    assert [name for name in unplaced if modules()[name].read_text().strip()] == []


def test_every_import_is_one_the_map_allows():
    assert breaches(graph(), map_rows()) == []


def test_the_map_refuses_a_job_part_importing_a_platform_part():
    """A job stack's part reaching into the platform's: the layer above it."""
    seed = ROOT / "infra" / "program" / "job" / "seed.py"
    planted = seed.read_text() + "\n\nfrom infra.program.platform.kserve import KSERVE_NAMESPACE\n"
    assert breaches(graph({seed: planted}), map_rows()) == [
        "infra.program.job.seed -> infra.program.platform.kserve"
    ]


def test_the_map_refuses_the_trainer_importing_the_program():
    launch = ROOT / "trainer" / "launch.py"
    planted = launch.read_text() + "\n\nimport infra.program.common.meta\n"
    assert breaches(graph({launch: planted}), map_rows()) == ["trainer.launch -> infra.program.common.meta"]


def test_both_checks_see_a_lazy_import_from_the_program_into_the_tools():
    """What the platform's facts once held: a function importing the tools' stack file reader, which
    imports the program's config, which imports the facts."""
    facts = ROOT / "infra" / "program" / "common" / "platform_facts.py"
    lazy = "\n\ndef _facts():\n    from infra.stackconfig import load_stack\n"
    edges = graph({facts: facts.read_text() + lazy})
    assert upward(edges) == [("infra.program.common.platform_facts", "infra.stackconfig")]
    assert [
        "infra.program.common.config",
        "infra.program.common.platform_facts",
        "infra.stackconfig",
    ] in circles(edges)
    assert "infra.program.common.platform_facts -> infra.stackconfig" in breaches(edges, map_rows())


def test_every_module_of_the_cluster_tiers_imports():
    """The tiers `make test` never collects (e2e, e2e_local, e2e_node) still import what they name, so a
    moved module breaks `make test`, not the next tier run."""
    import importlib

    broken = []
    for tier in ("e2e", "e2e_local", "e2e_node", "e2e_static"):
        for path in sorted((ROOT / "tests" / tier).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            try:
                importlib.import_module(name)
            except ImportError as error:
                broken.append(f"{name}: {error}")
    assert broken == []
