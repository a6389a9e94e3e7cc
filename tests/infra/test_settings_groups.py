"""`Settings` is one flat model written as groups: every key in exactly one group, in config order."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from infra.program.common import yamlio
from infra.program.settings import PROJECT_ROOT, Settings
from infra.program.settings.base import SettingsGroup


def _groups() -> list[type[SettingsGroup]]:
    return [
        base
        for base in Settings.__mro__[1:]
        if isinstance(base, type) and issubclass(base, SettingsGroup) and base is not SettingsGroup
    ]


def test_every_key_is_declared_by_exactly_one_group():
    declared = Counter(name for group in _groups() for name in group.__annotations__)
    assert sorted(declared) == sorted(Settings.model_fields)
    assert [name for name, count in declared.items() if count > 1] == []
    assert "__annotations__" not in vars(Settings) or not vars(Settings)["__annotations__"]


def test_validator_names_are_unique_across_groups():
    """pydantic merges the bases' validators by function name: a name two groups share keeps one."""
    names = Counter(
        name
        for group in _groups()
        for name in (
            *vars(group)["__pydantic_decorators__"].field_validators,
            *vars(group)["__pydantic_decorators__"].model_validators,
        )
    )
    assert [name for name, count in names.items() if count > 1] == []


def test_keys_keep_the_config_order_the_groups_are_written_in():
    """The groups in reading order (cluster first) give the order of Pulumi.yaml's config block."""
    in_reading_order = [name for group in reversed(_groups()) for name in group.__annotations__]
    assert list(Settings.model_fields) == in_reading_order
    project = yamlio.load((PROJECT_ROOT / "Pulumi.yaml").read_text())
    aliases = [field.alias for field in Settings.model_fields.values()]
    assert list(project["config"])[: len(aliases)] == aliases
    assert aliases[:3] == ["stackRole", "platformStack", "namespace"]


def test_every_group_refuses_its_own_bad_values():
    """Each group's rule still applies to the composed model (namespace, storage class, queue, CIDRs)."""
    for alias, bad in (
        ("namespace", "Bad_NS"),
        ("storageClassName", "-x"),
        ("jobQueueName", "Q"),
        ("jobDnsEgressCidrs", ["10.0.0.0/33"]),
        ("seedMirrors", ["http://example.com/"]),
        ("operatorInitContainerImage", "alpine:3.20"),
        ("kserveVersion", "0.20"),
        ("serveCpuLimit", "0"),
    ):
        with pytest.raises(ValidationError) as raised:
            Settings.model_validate({alias: bad})
        assert raised.value.errors()[0]["loc"] == (alias,)
