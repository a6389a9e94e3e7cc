"""The environment a container of an effective pod sees, and Kubernetes' `$(VAR)` expansion.

Used to check the torchrun arguments each node gets, and by the local scheduler. The pod is an
effective pod (`infra.review.effective`): the env the controllers inject is already in it, so only
the kubelet's part is done here: values in order (a later entry of the same name wins, `$(VAR)`
expanded from the earlier ones), downward-API fieldRefs from the pod's own metadata, and Secret
references through `secret_value`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from infra.review.effective import field_value

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' expansion of command/args: `$(VAR)` from env if defined, `$$` escapes a `$`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _REFERENCE.sub(replace, text)


def container_env(
    container: Mapping[str, Any],
    pod: Mapping[str, Any],
    secret_value: Callable[[str, str], str] | None = None,
) -> dict[str, str]:
    """The container's env as the kubelet resolves it for `pod` (a Pod object)."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
            continue
        source = var.get("valueFrom", {})
        if "fieldRef" in source:
            value = field_value(dict(pod), source["fieldRef"]["fieldPath"])
            if value is not None:
                env[var["name"]] = value
        elif "secretKeyRef" in source and secret_value is not None:
            ref = source["secretKeyRef"]
            env[var["name"]] = secret_value(ref["name"], ref["key"])
    return env


def node_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The container's command + args after Kubernetes expanded them with `env`."""
    return [expand(a, env) for a in [*container.get("command", []), *container.get("args", [])]]
