"""Placement strings from stack config ('key=value', 'key=value:Effect', 'key in a,b') as k8s fields."""

from __future__ import annotations

import re
from typing import Any

_LABEL_KEY = r"(?:[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


class SchedulingError(ValueError):
    def __init__(self, entry: str, allowed: str) -> None:
        super().__init__(f"{entry!r}: must be {allowed}")
        self.entry = entry
        self.allowed = allowed


def node_selector(entries: list[str]) -> dict[str, str]:
    """['k=v', ...] as a nodeSelector map."""
    result: dict[str, str] = {}
    for entry in entries:
        match = re.fullmatch(rf"({_LABEL_KEY})=({_LABEL_VALUE})", entry)
        if not match:
            raise SchedulingError(entry, "entries 'label-key=label-value'")
        result[match.group(1)] = entry.split("=", 1)[1]
    return result


def tolerations(entries: list[str]) -> list[dict[str, str]]:
    """['key[=value]:Effect', ...] as tolerations (Equal with a value, else Exists)."""
    result = []
    for entry in entries:
        match = re.fullmatch(rf"({_LABEL_KEY})(?:=({_LABEL_VALUE}))?:({'|'.join(EFFECTS)})", entry)
        if not match:
            raise SchedulingError(
                entry, f"entries 'key[=value]:Effect' with Effect one of {', '.join(EFFECTS)}"
            )
        taint_key, value, effect = match.group(1), match.group(2), match.group(3)
        toleration = {
            "key": taint_key,
            "operator": "Equal" if value is not None else "Exists",
            "effect": effect,
        }
        if value is not None:
            toleration["value"] = value
        result.append(toleration)
    return result


_OPERATORS = {"in": "In", "notin": "NotIn", "exists": "Exists", "doesnotexist": "DoesNotExist"}


def affinity_terms(entries: list[str]) -> list[dict[str, Any]]:
    """['key in a,b', 'key exists', ...] as nodeSelectorTerm matchExpressions (all must hold)."""
    result: list[dict[str, Any]] = []
    allowed = "entries 'key in a,b', 'key notin a,b', 'key exists' or 'key doesnotexist'"
    for entry in entries:
        parts = entry.split()
        if len(parts) not in (2, 3) or not re.fullmatch(_LABEL_KEY, parts[0]):
            raise SchedulingError(entry, allowed)
        op = _OPERATORS.get(parts[1].lower())
        needs_values = op in ("In", "NotIn")
        if op is None or needs_values != (len(parts) == 3):
            raise SchedulingError(entry, allowed)
        expression: dict[str, Any] = {"key": parts[0], "operator": op}
        if needs_values:
            values = parts[2].split(",")
            if not all(v and re.fullmatch(_LABEL_VALUE, v) for v in values):
                raise SchedulingError(entry, allowed)
            expression["values"] = values
        result.append(expression)
    return result
