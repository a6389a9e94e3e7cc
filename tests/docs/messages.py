"""The one-line messages the code can produce, read from its source as templates.

A template is the message's text with every part the code fills in at run time (an f-string's
`{...}`, a `.format` field) written `{}`; docs write those parts as `{name}`, and `canonical`
turns either into the same string, so a page shows a message exactly when their canonical forms
are equal. Reading the source, not running the code, covers every branch of every rule."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from infra.program.checks.errors import _show
from infra.program.settings import PROJECT

HOLE = "{}"
CONFIG_SHAPE = "config {project}:{key}={value} is invalid: must be {allowed}"


def canonical(text: str) -> str:
    """A message with each `{...}` placeholder as `{}` and its whitespace as single spaces."""
    return " ".join(re.sub(r"\{[^{}]*\}", HOLE, text).split())


@dataclass(frozen=True)
class Message:
    """One message a module can produce: where (module and function) and its template."""

    module: str
    function: str
    template: str


def _module_strings(tree: ast.Module) -> dict[str, ast.expr]:
    """The module-level `NAME = <expression>` assignments."""
    found: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
    return found


def _local_strings(function: ast.AST) -> dict[str, ast.expr]:
    return {
        node.targets[0].id: node.value
        for node in ast.walk(function)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }


def template(node: ast.expr | None, names: dict[str, ast.expr]) -> str:
    """The text an expression gives, each run-time part `{}`; `{}` alone when nothing is literal."""
    if node is None:
        return HOLE
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("strip", "rstrip")
    ):
        return template(node.func.value, names)
    if isinstance(node, ast.JoinedStr):
        parts = [part.value if isinstance(part, ast.Constant) else HOLE for part in node.values]
        return "".join(str(p) for p in parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return template(node.left, names) + template(node.right, names)
    if isinstance(node, ast.Name) and node.id in names:
        return template(names[node.id], names)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in names
    ):
        return canonical(_literal(names[node.func.value.id]))
    return HOLE


def _literal(node: ast.expr) -> str:
    value = ast.literal_eval(node)
    assert isinstance(value, str)
    return value


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            yield node


def calls(module: ModuleType, callee: str, arg: int) -> list[tuple[str, ast.Call, dict[str, ast.expr]]]:
    """Every call of `callee(...)` in `module`'s functions, with the function's name and the names the
    call's arguments may refer to (the function's locals, then the module's)."""
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    module_names = _module_strings(tree)
    found = []
    for function in _functions(tree):
        names = {**module_names, **_local_strings(function)}
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and (
                    (isinstance(node.func, ast.Name) and node.func.id == callee)
                    or (isinstance(node.func, ast.Attribute) and node.func.attr == callee)
                )
                and len(node.args) > arg
            ):
                found.append((function.name, node, names))
    return found


def raised(module: ModuleType, callee: str, arg: int) -> list[Message]:
    """The templates of argument `arg` of every `callee(...)` call in `module`."""
    return [
        Message(module.__name__, function, canonical(template(node.args[arg], names)))
        for function, node, names in calls(module, callee, arg)
    ]


def config_errors(module: ModuleType) -> list[Message]:
    """Every `ConfigError(key, value, allowed)` of `module`, as the whole line the user sees."""
    messages = []
    for function, node, names in calls(module, "ConfigError", 2):
        key, value, allowed = node.args[:3]
        shown_key = key.value if isinstance(key, ast.Constant) else HOLE
        secret = any(
            k.arg == "secret" and isinstance(k.value, ast.Constant) and k.value.value for k in node.keywords
        )
        if isinstance(value, ast.Constant) and value.value is None:
            shown = "(unset)"
        elif secret:
            shown = "[secret]"
        elif isinstance(value, ast.Constant):
            shown = _show(value.value)
        else:
            shown = HOLE
        line = CONFIG_SHAPE.format(
            project=PROJECT, key=shown_key, value=shown, allowed=template(allowed, names)
        )
        messages.append(Message(module.__name__, function, canonical(line)))
    return messages
