"""The cluster tiers run only when asked for: `make e2e` (`pytest -m e2e tests/e2e`, a real cluster)
`make e2e-local` (`pytest -m e2e_local tests/e2e_local`, the local cluster of real parts) and `make
e2e-node` (`pytest -m e2e_node tests/e2e_node`, that cluster with a real kubelet node).

The policy pack's modules import each other by plain name, as the Pulumi CLI runs the pack (its
directory on sys.path), so that directory is importable in every test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

from tests import processguard

TESTS = Path(__file__).resolve().parent
if str(TESTS.parent / "policy") not in sys.path:
    sys.path.append(str(TESTS.parent / "policy"))
TIERS = {
    TESTS / "e2e": "e2e",
    TESTS / "e2e_local": "e2e_local",
    TESTS / "e2e_node": "e2e_node",
    TESTS / "trainer" / "test_mlflow_server.py": "mlflow_server",
}
E2E_DIR = TESTS / "e2e"


def selects(markexpr: str, marker: str) -> bool:
    """Whether a `-m` expression asks for the tests marked `marker`: it selects a test so marked and not
    an unmarked one (`e2e`, `e2e or slow`; not `not e2e`, `not slow` or an empty one)."""
    if not markexpr:
        return False
    expression = Expression.compile(markexpr)
    return bool(expression.evaluate(lambda name, **_: name == marker)) and not expression.evaluate(
        lambda name, **_: False
    )


def selects_e2e(markexpr: str) -> bool:
    return selects(markexpr, "e2e")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave each tier out of every run whose `-m` does not select it (the cluster tiers, the real MLflow
    server's), so `make test` neither imports nor counts it."""
    marker = TIERS.get(collection_path)
    if marker is not None and not selects(config.option.markexpr, marker):
        return True
    if collection_path.suffix == ".py" and _deselects_slow(config.option.markexpr):
        lines = collection_path.read_text(encoding="utf-8").splitlines()
        if any(line.split("#")[0].rstrip() == SLOW_MODULE for line in lines):
            return True
    return None


# A test module whose every test is `slow` says so in this line (a comment may follow); `make
# test-fast` (`-m "not slow"`) then never imports it (its torch, kserve and servers' imports), rather
# than importing it to deselect all.
SLOW_MODULE = "pytestmark = pytest.mark.slow"


def _deselects_slow(markexpr: str) -> bool:
    """Whether a `-m` expression leaves out a test marked `slow` (and nothing else): `not slow`."""
    return bool(markexpr) and not Expression.compile(markexpr).evaluate(lambda name, **_: name == "slow")


_RUNNING: dict[str, pytest.Item | None] = {"item": None}


def _quick(item: pytest.Item) -> bool:
    """A test `make test-fast` runs: not marked `slow`, and in none of the tiers run only when asked for."""
    in_tier = any(item.path == tier or tier in item.path.parents for tier in TIERS)
    return not in_tier and item.get_closest_marker("slow") is None


def _quick_tests_start_no_project_process(event: str, args: tuple) -> None:
    """The audit hook of tests/processguard.py: a test not marked `slow` that starts the project's code
    in a process fails at that call, with the command in one line."""
    item = _RUNNING["item"]
    if event != "subprocess.Popen" or item is None or not _quick(item):
        return
    reason = processguard.project_process(args[0], args[1])
    if reason is not None:
        raise RuntimeError(
            f"{item.nodeid} is not marked slow but starts `{reason}` in a process; "
            "mark it `slow` (CONTRIBUTING.md#tests) or run the code in the test's own process"
        )


sys.addaudithook(_quick_tests_start_no_project_process)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Which test is running, set-up and teardown of its fixtures included, for the audit hook above."""
    _RUNNING["item"] = item
    try:
        return (yield)
    finally:
        _RUNNING["item"] = None
