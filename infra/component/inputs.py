"""A component's inputs read as the stack's config: the same keys, defaults and one-line errors.

A component's inputs are the project's config keys (`jobNodes`, `storageProvider`, ...). They are
turned into the raw config map a stack would have (`ddp-mnist:jobNodes` -> "2") and read by the same
function the stack program uses (`infra.program.common.config.settings_from_raw`), so every rule and
every error message is the stack's. The S3 key pair comes as secret inputs and stays a secret.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pulumi

from infra.program.checks import ConfigError
from infra.program.common.config import S3Credentials, settings_from_raw
from infra.program.settings import PROJECT, SECRET_KEYS, Settings
from infra.program.settings.prerequisites import PrerequisitesSettings

# Fixed by the component itself (its role), or a stack's concern only (another stack's outputs, the
# prerequisites stack's MinIO and NFS server).
NOT_INPUTS = frozenset({"stackRole", "platformStack"}) | frozenset(
    field.alias or name for name, field in PrerequisitesSettings.model_fields.items()
)


def input_keys() -> list[str]:
    """Every config key a component takes as an input, in Pulumi.yaml's order; the secret keys last."""
    keys = [field.alias or name for name, field in Settings.model_fields.items()]
    return [key for key in keys if key not in NOT_INPUTS] + list(SECRET_KEYS)


class InputError(ValueError):
    """An input the component cannot read: one line naming the input and what it must be."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        super().__init__(f"input {key} is invalid: must be {reason}")


def _raw(key: str, value: object) -> str:
    """The value as the stack's config would hold it (Pulumi's config is strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    # Numbers cross the provider protocol as floats (protobuf's Value): 2.0 is the integer 2.
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    raise InputError(key, "a string, a number, true or false, or a list of strings")


def read_inputs(
    component: str, role: str, inputs: Mapping[str, Any]
) -> tuple[Settings, S3Credentials | None]:
    """The settings and S3 credentials of a component of stack role `role` from its inputs.

    Raises ConfigError (the stack's own line) or InputError for the first bad input."""
    raw: dict[str, str] = {f"{PROJECT}:stackRole": role}
    secrets: dict[str, pulumi.Output[str]] = {}
    allowed = input_keys()
    for key in sorted(inputs):
        value = inputs[key]
        if value is None or (key in SECRET_KEYS and value == ""):
            continue
        if key in SECRET_KEYS:
            # Kept an Output (a secret): only its presence is read here; the Secret object takes the value.
            secrets[key] = pulumi.Output.secret(value)
            raw[f"{PROJECT}:{key}"] = "(secret)"
            continue
        if key in NOT_INPUTS:
            raise InputError(key, f"unset: it is not an input of {component} ({_fixed(key, role)})")
        if key not in allowed:
            raw[f"{PROJECT}:{key}"] = _raw(key, value)  # settings_from_raw names the key and its nearest
            continue
        if isinstance(value, pulumi.Output):
            raise InputError(
                key,
                "a plain value, not another resource's output "
                f"(it decides which objects {component} creates)",
            )
        raw[f"{PROJECT}:{key}"] = _raw(key, value)
    settings, has_keys = settings_from_raw(raw, {f"{PROJECT}:{key}" for key in secrets})
    if not has_keys:
        return settings, None
    read = "minioReadAccessKey" in secrets
    return settings, S3Credentials(
        secrets["minioAccessKey"],
        secrets["minioSecretKey"],
        secrets["minioReadAccessKey"] if read else None,
        secrets["minioReadSecretKey"] if read else None,
    )


def _fixed(key: str, role: str) -> str:
    if key == "stackRole":
        return f"the component is the {role} role"
    if key == "platformStack":
        return "pass the platform component's declarations as inputs instead"
    return "a prerequisites stack's key"


__all__ = ["ConfigError", "InputError", "NOT_INPUTS", "input_keys", "read_inputs"]
