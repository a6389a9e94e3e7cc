"""The cluster tier (tests/e2e) runs only when asked for: `make e2e` (`pytest -m e2e tests/e2e`)."""

from __future__ import annotations

from pathlib import Path

import pytest

E2E_DIR = Path(__file__).resolve().parent / "e2e"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave tests/e2e out of every run whose marker expression does not name `e2e`, so `make test`
    neither imports nor counts it."""
    if collection_path == E2E_DIR and "e2e" not in (config.option.markexpr or ""):
        return True
    return None
