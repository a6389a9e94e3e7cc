"""docs/how-to/troubleshooting.md shows every message the code can produce where a user must act, as the
code writes it: templates are read from the source (tests/docs/messages.py), so a changed message fails."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re

import pytest

from infra.program import checks
from infra.program import settings as settings_package
from infra.program.common import config, platform_facts, scheduling
from infra.program.job import placement, runwatch
from infra.program.platform import device_plugin, kserve, network_check, smoke
from infra.stackconfig import ROOT
from tests.docs.messages import HOLE, Message, calls, canonical, config_errors, raised, template
from trainer import errors, export, launch, mirrors, s3

PAGE = ROOT / "docs/how-to/troubleshooting.md"
TEXT = PAGE.read_text()


def shown_lines() -> list[str]:
    """Every line of the page's fenced code blocks, canonical."""
    lines, fenced = [], False
    for line in TEXT.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            lines.append(canonical(line))
    return lines


SHOWN = shown_lines()


def pattern(message_template: str) -> re.Pattern[str]:
    """A code template as a regex: its literal text exactly, each run-time part any text."""
    return re.compile(".+?".join(re.escape(part) for part in message_template.split(HOLE)))


def shown(message: Message, whole: bool = True) -> bool:
    regex = pattern(message.template)
    return any((regex.fullmatch(line) if whole else regex.search(line)) for line in SHOWN)


def check_modules() -> list[object]:
    return [
        importlib.import_module(f"infra.program.checks.{m.name}")
        for m in pkgutil.iter_modules(checks.__path__)
    ]


CONFIG_MESSAGES = [msg for module in (*check_modules(), config) for msg in config_errors(module)]


def test_every_rule_in_the_checks_produces_a_message_read_here() -> None:
    functions = {msg.function for msg in CONFIG_MESSAGES}
    assert {rule.__name__ for rule in checks.CHECKS} - functions - {
        "operator_source",
        "trainer_source",
    } == set()


@pytest.mark.parametrize("message", CONFIG_MESSAGES, ids=lambda m: f"{m.module}.{m.function}")
def test_every_config_error_is_shown_as_the_code_writes_it(message: Message) -> None:
    assert shown(message), message.template


def value_rules() -> list[Message]:
    found = []
    for info in pkgutil.iter_modules(settings_package.__path__):
        module = importlib.import_module(f"infra.program.settings.{info.name}")
        found += raised(module, "ValueError", 0)
    found += raised(scheduling, "SchedulingError", 1)
    return [
        Message(m.module, m.function, f"config ddp-mnist:{HOLE}={HOLE} is invalid: must be {m.template}")
        for m in found
    ]


@pytest.mark.parametrize("message", value_rules(), ids=lambda m: f"{m.module}.{m.function}")
def test_every_value_rule_of_a_key_is_shown(message: Message) -> None:
    assert shown(message), message.template


def test_every_generic_value_message_is_shown() -> None:
    """The messages `_allowed` gives pydantic's own errors (ranges, types)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(config._allowed))
    lambdas = [node.body for node in ast.walk(tree) if isinstance(node, ast.Lambda)]
    templates = {canonical(template(body, {})) for body in lambdas} - {HOLE}
    missing = [
        t
        for t in templates
        if not shown(Message("config", "_allowed", f"config ddp-mnist:{HOLE}={HOLE} is invalid: must be {t}"))
    ]
    assert len(templates) >= 8 and missing == []


def run_time_messages() -> list[Message]:
    found = (
        raised(runwatch, "RunError", 0)
        + raised(smoke, "RunError", 0)
        + raised(device_plugin, "RunError", 0)
        + raised(network_check, "RunError", 0)
        + raised(kserve, "KServeSourceError", 0)
    )
    return [m for m in found if m.template != HOLE]


@pytest.mark.parametrize("message", run_time_messages(), ids=lambda m: f"{m.module}.{m.function}")
def test_every_wait_and_smoke_failure_is_shown(message: Message) -> None:
    assert shown(message, whole=False), message.template


def smoke_causes() -> list[str]:
    """The `cause = ...` texts of the smoke checks' outcomes."""
    import ast
    import inspect

    causes = []
    for function in (smoke.smoke_outcome, device_plugin.gpu_smoke_outcome, network_check.network_outcome):
        tree = ast.parse(inspect.getsource(function).lstrip())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "cause":
                text = canonical(template(node.value, {}))
                if text.strip(HOLE + ": "):
                    causes.append(text)
    return causes


def test_every_smoke_check_cause_is_shown() -> None:
    causes = smoke_causes()
    assert len(causes) >= 8
    assert [c for c in causes if not shown(Message("smoke", "cause", c))] == []


def placement_lines() -> list[str]:
    """The lines `placement` returns for a stuck pod, claim or job (each starts with what is stuck)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(placement))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            text = canonical(template(node.value, {}))
            if text.startswith(("Pod ", "PersistentVolumeClaim ", HOLE + " " + HOLE + "/")):
                found.append(text)
    return found


def test_every_placement_line_is_shown() -> None:
    lines = placement_lines()
    assert len(lines) >= 5
    assert [line for line in lines if not shown(Message("placement", "", line), whole=False)] == []


def needs_action_messages(code: int) -> list[Message]:
    """Every message raised with exit code `code`: by an exception class that carries it, or by
    launch's LaunchError given it."""
    classes = [
        name
        for name, obj in vars(errors).items()
        if isinstance(obj, type) and getattr(obj, "exit_code", None) == code
    ]
    found = []
    for module in (s3, mirrors, export):
        for name in classes:
            found += raised(module, name, 0)
    for function, node, names in calls(launch, "LaunchError", 1):
        if isinstance(node.args[1], __import__("ast").Name) and getattr(errors, node.args[1].id) == code:
            found.append(Message("trainer.launch", function, canonical(template(node.args[0], names))))
    return found


@pytest.mark.parametrize("code", errors.NEEDS_ACTION_EXIT_CODES)
def test_every_exit_code_that_needs_action_has_an_entry_with_its_messages(code: int) -> None:
    assert re.search(rf"^### Exit {code}: ", TEXT, re.MULTILINE), code
    messages = needs_action_messages(code)
    assert messages, code
    assert [m.template for m in messages if m.template != HOLE and not shown(m, whole=False)] == []


def platform_messages() -> list[Message]:
    """Every line a job stack stops with when its platform stack disagrees: the PlatformMismatch
    raises, and the needs `take` puts after "stack <stack> " (`_needs`'s returned texts)."""
    found = [
        Message(platform_facts.__name__, function, canonical(template(node.args[0], names)))
        for function, node, names in calls(platform_facts, "PlatformMismatch", 0)
        if ".format(" not in ast.unparse(node.args[0])  # "stack {stack} " + a need: read below
    ]
    tree = ast.parse(inspect.getsource(platform_facts._needs))
    needs = [
        Message(platform_facts.__name__, "_needs", canonical("stack {} " + template(node.value, {})))
        for node in ast.walk(tree)
        if isinstance(node, ast.Return)
        and not (isinstance(node.value, ast.Constant) and node.value.value is None)
    ]
    return found + needs


@pytest.mark.parametrize("message", platform_messages(), ids=lambda m: m.template[:60])
def test_every_platform_mismatch_is_shown(message: Message) -> None:
    assert shown(message), message.template


def test_the_platform_lines_are_all_read() -> None:
    assert len(platform_messages()) >= 11  # 4 raises with text of their own, 7 needs
