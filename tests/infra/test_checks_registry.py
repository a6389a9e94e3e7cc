"""The cross-field rules are written in one module per concern and run in the order `CHECKS` lists."""

from __future__ import annotations

import inspect
import pkgutil
from importlib import import_module

import pytest

import infra.program.checks as checks
from infra.program.common.config import settings_from_raw
from infra.program.settings import PROJECT


def _rules_written() -> set[str]:
    rules = set()
    for module_info in pkgutil.iter_modules(checks.__path__):
        module = import_module(f"{checks.__name__}.{module_info.name}")
        for name, fn in vars(module).items():
            if inspect.isgeneratorfunction(fn) and fn.__module__ == module.__name__:
                rules.add(f"{module_info.name}.{name}")
    return rules


def test_every_rule_written_is_run_once():
    """A rule in a concern's module that `CHECKS` leaves out would never run."""
    listed = [f"{fn.__module__.rsplit('.', 1)[1]}.{fn.__name__}" for fn in checks.CHECKS]
    assert len(listed) == len(set(listed))
    assert set(listed) == _rules_written()


def test_a_config_breaking_rules_of_two_concerns_is_reported_by_the_earlier_rule():
    """jobBatchSize (the job's rules) runs before nfsServer (storage's), whatever the modules' order."""
    raw = {f"{PROJECT}:jobBatchSize": "3", f"{PROJECT}:nfsServer": ""}
    with pytest.raises(checks.ConfigError) as raised:
        settings_from_raw(raw, set())
    assert raised.value.key == f"{PROJECT}:jobBatchSize"
