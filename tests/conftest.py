"""The cluster tier (tests/e2e) runs only when asked for: `make e2e` (`pytest -m e2e tests/e2e`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

E2E_DIR = Path(__file__).resolve().parent / "e2e"


def selects_e2e(markexpr: str) -> bool:
    """Whether a `-m` expression asks for the `e2e` tests: it selects a test marked `e2e` and not an
    unmarked one (`e2e`, `e2e or slow`; not `not e2e`, `not slow` or an empty one)."""
    if not markexpr:
        return False
    expression = Expression.compile(markexpr)
    return bool(expression.evaluate(lambda name, **_: name == "e2e")) and not expression.evaluate(
        lambda name, **_: False
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave tests/e2e out of every run whose `-m` does not select `e2e`, so `make test` neither imports
    nor counts it."""
    if collection_path == E2E_DIR and not selects_e2e(config.option.markexpr):
        return True
    return None
