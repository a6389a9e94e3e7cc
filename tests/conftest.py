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
    return None
